//! `vouch serve` over HTTPS: the real binary with a certificate made for
//! the test, spoken to by a rustls client that trusts only that
//! certificate, on 127.0.0.1.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};

/// A running `vouch serve`, killed on drop.
struct Service {
    child: Child,
    addr: SocketAddr,
    token: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Certificate {
    cert: PathBuf,
    key: PathBuf,
    der: CertificateDer<'static>,
}

fn certificate(dir: &Path, name: &str) -> Certificate {
    let key = rcgen::KeyPair::generate().expect("key");
    let params = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .expect("params");
    let cert = params.self_signed(&key).expect("self-signed certificate");
    let cert_path = dir.join(format!("{name}.crt"));
    let key_path = dir.join(format!("{name}.key"));
    std::fs::write(&cert_path, cert.pem()).expect("write certificate");
    std::fs::write(&key_path, key.serialize_pem()).expect("write key");
    Certificate {
        cert: cert_path,
        key: key_path,
        der: cert.der().clone(),
    }
}

fn serve(data_dir: &Path, args: &[&std::ffi::OsStr]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vouch"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .args(args)
        .stdin(Stdio::null());
    cmd
}

fn start(data_dir: &Path, c: &Certificate) -> Service {
    let mut child = serve(
        data_dir,
        &[
            "--tls-cert".as_ref(),
            c.cert.as_os_str(),
            "--tls-key".as_ref(),
            c.key.as_os_str(),
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit())
    .spawn()
    .expect("vouch serve starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("vouch serve printed its address before exiting")
            .expect("stdout readable");
        assert!(
            !line.contains("admin token"),
            "stdout is no terminal: the token stays in its file: {line}"
        );
        if let Some(a) = line.strip_prefix("listening on https://") {
            break a.trim().parse().expect("an address");
        }
        assert!(
            !line.starts_with("listening on http://"),
            "a TLS listener announces https: {line}"
        );
    };
    std::thread::spawn(move || for _ in lines {});
    Service {
        child,
        addr,
        token: std::fs::read_to_string(data_dir.join("initial-admin-token"))
            .expect("the first start leaves its admin token in the data directory")
            .trim()
            .to_owned(),
    }
}

/// One HTTPS/1.1 exchange trusting only `trusted`: status, body and the
/// head (status line and headers).
fn https_get(
    addr: SocketAddr,
    trusted: &CertificateDer<'static>,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String, String), std::io::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trusted.clone()).map_err(std::io::Error::other)?;
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(std::io::Error::other)?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::try_from("localhost").map_err(std::io::Error::other)?;
    let conn =
        rustls::ClientConnection::new(Arc::new(config), name).map_err(std::io::Error::other)?;
    let tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    match tls.read_to_end(&mut raw) {
        Ok(_) => {}
        // A server may close without close_notify after a complete response.
        Err(e) if e.kind() == ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e),
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line in {head:?}")))?;
    Ok((status, body.to_owned(), head.to_owned()))
}

#[test]
fn the_api_is_served_over_tls_with_the_configured_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = certificate(dir.path(), "server");
    let svc = start(&dir.path().join("data"), &c);

    let (status, body, head) = https_get(svc.addr, &c.der, "/healthz", None).expect("healthz");
    assert_eq!(status, 200, "{body}");
    assert!(
        head.to_ascii_lowercase()
            .contains("\r\nstrict-transport-security: max-age=31536000"),
        "HSTS over TLS: {head}"
    );
    let (status, _, _) = https_get(svc.addr, &c.der, "/api/v1/plans", None).expect("plans");
    assert_eq!(status, 401, "TLS changes nothing about authentication");
    let (status, body, _) =
        https_get(svc.addr, &c.der, "/api/v1/plans", Some(&svc.token)).expect("plans");
    assert_eq!(status, 200, "{body}");

    // A client that trusts another certificate refuses the server.
    let other = certificate(dir.path(), "other");
    let err = https_get(svc.addr, &other.der, "/healthz", None).expect_err("untrusted");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "the handshake fails on the certificate: {err}"
    );

    // Plain HTTP on the TLS port gets no HTTP answer.
    let mut plain = TcpStream::connect(svc.addr).expect("connect");
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .expect("send");
    let mut raw = Vec::new();
    let _ = plain.read_to_end(&mut raw);
    assert!(
        !String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 200"),
        "plain HTTP is not served on the TLS listener"
    );
}

#[test]
fn a_key_that_does_not_match_the_certificate_stops_the_start_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = certificate(dir.path(), "a");
    let b = certificate(dir.path(), "b");
    let out = serve(
        &dir.path().join("data"),
        &[
            "--tls-cert".as_ref(),
            a.cert.as_os_str(),
            "--tls-key".as_ref(),
            b.key.as_os_str(),
        ],
    )
    .output()
    .expect("vouch serve runs");
    assert!(!out.status.success(), "it must not start");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("listening on"),
        "nothing listened: {stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("a.crt") && stderr.contains("b.key"),
        "the error names both files: {stderr}"
    );

    // The same through the configuration file, with a key file that is
    // not a key.
    let config = dir.path().join("vouch.toml");
    std::fs::write(
        &config,
        format!(
            "[tls]\ncert = {:?}\nkey = {:?}\n",
            a.cert.display().to_string(),
            a.cert.display().to_string()
        ),
    )
    .expect("config");
    let out = serve(
        &dir.path().join("data"),
        &["--config".as_ref(), config.as_os_str()],
    )
    .output()
    .expect("vouch serve runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no private key"), "{stderr}");
}

/// Security review finding 10: beyond loopback with no certificate, the
/// service never serves plain HTTP: it makes a self-signed certificate on
/// its first start (kept for later ones), prints its SHA-256 fingerprint to
/// pin, and serves HTTPS with it. `--insecure-http` is the only way to
/// plain HTTP there.
#[test]
fn beyond_loopback_without_a_certificate_it_serves_https_with_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let first = start_beyond_loopback(&data, &[]);
    let cert_file = data.join("tls/self-signed.crt");
    let pem = std::fs::read(&cert_file).expect("the certificate is kept in the data directory");
    let der = {
        use rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_slice(&pem).expect("PEM")
    };
    let sha = ring::digest::digest(&ring::digest::SHA256, der.as_ref());
    let hex: Vec<String> = sha.as_ref().iter().map(|b| format!("{b:02X}")).collect();
    assert_eq!(first.fingerprint.as_deref(), Some(hex.join(":").as_str()));
    let (status, body, head) = https_get(first.addr, &der, "/healthz", None).expect("healthz");
    assert_eq!(status, 200, "{body}");
    assert!(head
        .to_ascii_lowercase()
        .contains("strict-transport-security"));
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(data.join("tls/self-signed.key"))
            .expect("key")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "the key is private");
    }
    drop(first);
    // A restart keeps the same certificate: pinned clients keep working.
    let again = start_beyond_loopback(&data, &[]);
    assert_eq!(again.fingerprint.as_deref(), Some(hex.join(":").as_str()));
    drop(again);
    // --insecure-http: plain HTTP, as the admin asked.
    let plain = start_beyond_loopback(&data, &["--insecure-http"]);
    assert!(plain.fingerprint.is_none() && !plain.https);
}

struct Beyond {
    child: Child,
    addr: SocketAddr,
    fingerprint: Option<String>,
    https: bool,
}

impl Drop for Beyond {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_beyond_loopback(data: &Path, extra: &[&str]) -> Beyond {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vouch"))
        .args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(data)
        .args(extra)
        .env("VOUCH_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("vouch serve starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut fingerprint = None;
    let (addr, https) = loop {
        let line = lines
            .next()
            .expect("vouch serve printed its address before exiting")
            .expect("stdout readable");
        if let Some(f) = line.strip_prefix("tls certificate fingerprint (SHA-256): ") {
            fingerprint = Some(f.trim().to_owned());
        }
        let (rest, https) = match line.strip_prefix("listening on https://") {
            Some(r) => (Some(r), true),
            None => (line.strip_prefix("listening on http://"), false),
        };
        if let Some(a) = rest {
            let port: u16 = a
                .trim()
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .expect("a port");
            break (SocketAddr::from(([127, 0, 0, 1], port)), https);
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Beyond {
        child,
        addr,
        fingerprint,
        https,
    }
}
