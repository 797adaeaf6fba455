//! Webhooks as receivers meet them (security review finding 7): HTTPS
//! against a private CA, an HMAC signature or a bearer token read from a
//! file, and redirects never followed. Real `vouch serve`, real TLS
//! receivers on 127.0.0.1.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::served::*;
use serde_json::Value;

/// One request a receiver got.
#[derive(Clone, Debug)]
struct Request {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A receiver on loopback: records every request, answers with `answer`.
struct Receiver {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Request>>>,
}

fn read_request(stream: &mut impl Read) -> Option<Request> {
    let mut reader = BufReader::new(stream);
    let mut headers = Vec::new();
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 || line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.trim_end().split_once(':') {
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).ok()?;
    Some(Request { headers, body })
}

fn receiver(
    tls: Option<Arc<rustls::ServerConfig>>,
    answer: impl Fn() -> String + Send + 'static,
) -> Receiver {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(tcp) = conn else { continue };
            let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
            let serve = |s: &mut dyn ReadWrite| {
                if let Some(r) = read_request(&mut ReadOf(s)) {
                    log.lock().expect("lock").push(r);
                    let _ = s.write_all(answer().as_bytes());
                    let _ = s.flush();
                }
            };
            match &tls {
                Some(config) => {
                    let Ok(conn) = rustls::ServerConnection::new(config.clone()) else {
                        continue;
                    };
                    let mut s = rustls::StreamOwned::new(conn, tcp);
                    serve(&mut s);
                    s.conn.send_close_notify();
                    let _ = s.flush();
                }
                None => {
                    let mut s = tcp;
                    serve(&mut s);
                }
            }
        }
    });
    Receiver { addr, seen }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

struct ReadOf<'a>(&'a mut dyn ReadWrite);
impl Read for ReadOf<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

const OK: &str = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// A private CA and a certificate for 127.0.0.1 it signed; the CA's PEM.
fn private_ca(dir: &Path) -> (Arc<rustls::ServerConfig>, std::path::PathBuf) {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "vouch test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA");
    let leaf_key = rcgen::KeyPair::generate().expect("key");
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".into()])
        .expect("params")
        .signed_by(&leaf_key, &ca)
        .expect("leaf");
    let ca_pem = dir.join("ca.pem");
    std::fs::write(&ca_pem, ca.pem()).expect("write CA");
    let key = rustls_pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).expect("key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(vec![leaf.der().clone()], key)
    .expect("server config");
    (Arc::new(config), ca_pem)
}

fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn hmac_hex(key: &[u8], msg: &[u8]) -> String {
    let tag = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key), msg);
    tag.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn https_receivers_get_signed_alerts_and_redirects_are_not_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tls, ca_pem) = private_ca(dir.path());
    let signed = receiver(Some(tls.clone()), || OK.to_owned());
    let untrusted = receiver(Some(tls), || OK.to_owned());
    let target = receiver(None, || OK.to_owned());
    let target_addr = target.addr;
    let bouncer = receiver(None, move || {
        format!(
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://{target_addr}/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
    });
    // A CA file that is PEM but no certificate: the receiver can never be
    // reached; one failed attempt, recorded as final, never again.
    let bad_ca = dir.path().join("bad-ca.pem");
    std::fs::write(
        &bad_ca,
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    )
    .expect("write bad CA");
    let key = dir.path().join("hmac.key");
    std::fs::write(&key, "a shared secret\n").expect("write key");
    let token = dir.path().join("bearer.token");
    std::fs::write(&token, "tok-123\n").expect("write token");
    for f in [&key, &token] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let webhooks = format!(
        "[[webhooks]]\nname = \"signed\"\nurl = \"https://{}/hook\"\nca_file = {:?}\nhmac_key_file = {:?}\nretry_initial = \"200ms\"\n\n\
         [[webhooks]]\nname = \"untrusted\"\nurl = \"https://{}/hook\"\nmax_attempts = 2\nretry_initial = \"200ms\"\n\n\
         [[webhooks]]\nname = \"bouncer\"\nurl = \"http://{}/hook\"\nbearer_token_file = {:?}\nmax_attempts = 2\nretry_initial = \"200ms\"\n\n\
         [[webhooks]]\nname = \"misconfigured\"\nurl = \"https://{}/hook\"\nca_file = {:?}\nretry_initial = \"200ms\"\n",
        signed.addr,
        ca_pem.to_str().expect("utf-8"),
        key.to_str().expect("utf-8"),
        untrusted.addr,
        bouncer.addr,
        token.to_str().expect("utf-8"),
        untrusted.addr,
        bad_ca.to_str().expect("utf-8"),
    );
    let config = dir.path().join("vouch.toml");
    std::fs::write(
        &config,
        format!(
            "{}[scheduler]\ntick = \"1s\"\nmax_jitter = \"0s\"\n\n[alerting]\nevaluate_every = \"1s\"\n\n{webhooks}",
            sources_allow(dir.path())
        ),
    )
    .expect("config");
    let svc = start(&dir.path().join("data"), &config, None);
    let (status, body) = post(
        &svc,
        "/api/v1/plans",
        &serde_json::json!({"id": "broken", "source": dir.path().join("missing"), "schedule": "0 3 * * *", "rpo": "1d"}),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = post(&svc, "/api/v1/plans/broken/run", &Value::Null);
    assert_eq!(status, 202, "{body}");

    // Over HTTPS, trusted through the configured CA, signed.
    let req = eventually("a signed delivery over HTTPS", || {
        signed.seen.lock().expect("lock").first().cloned()
    });
    let sig = req.header("X-Vouch-Signature").expect("signature header");
    let (t, v1) = sig
        .strip_prefix("t=")
        .and_then(|s| s.split_once(",v1="))
        .expect("t=...,v1=...");
    let mut msg = t.as_bytes().to_vec();
    msg.push(b'.');
    msg.extend_from_slice(&req.body);
    assert_eq!(
        v1,
        hmac_hex(b"a shared secret", &msg),
        "the signature verifies"
    );
    let alert: Value = serde_json::from_slice(&req.body).expect("JSON body");
    assert_eq!(alert["status"], "firing", "{alert}");
    assert!(
        req.header("Authorization").is_none(),
        "no token beside the signature"
    );

    // The bouncer saw the bearer token; its redirect was not followed.
    let bounced = eventually("two attempts at the redirecting receiver", || {
        let seen = bouncer.seen.lock().expect("lock").clone();
        (seen.len() >= 2).then_some(seen)
    });
    assert_eq!(bounced[0].header("Authorization"), Some("Bearer tok-123"));
    // Without the CA, the same certificate is refused: nothing arrives.
    let failures = eventually("the failed deliveries recorded", || {
        let events = get(&svc, "/api/v1/events?type=alert.delivery_failed&limit=1000");
        let list = events["events"].as_array().cloned().unwrap_or_default();
        let of = |r: &str| list.iter().filter(|e| e["data"]["receiver"] == r).count();
        (of("bouncer") >= 2 && of("untrusted") >= 2).then_some(list)
    });
    let text = serde_json::to_string(&failures).expect("json");
    assert!(text.contains("redirects are not followed"), "{text}");
    assert!(
        target.seen.lock().expect("lock").is_empty(),
        "the redirect target never got the POST"
    );
    assert!(
        untrusted.seen.lock().expect("lock").is_empty(),
        "no request reached the receiver whose certificate is not trusted"
    );
    // The misconfigured receiver: one final failure, not redelivered by
    // the evaluations since (one a second here).
    let of_misconfigured = |list: &[Value]| {
        list.iter()
            .filter(|e| e["data"]["receiver"] == "misconfigured")
            .cloned()
            .collect::<Vec<_>>()
    };
    let first = eventually("the misconfigured receiver's failure", || {
        let events = get(&svc, "/api/v1/events?type=alert.delivery_failed&limit=1000");
        let list = events["events"].as_array().cloned().unwrap_or_default();
        let mine = of_misconfigured(&list);
        (!mine.is_empty()).then_some(mine)
    });
    assert_eq!(first[0]["data"]["will_retry"], false, "{first:?}");
    std::thread::sleep(Duration::from_secs(3));
    let events = get(&svc, "/api/v1/events?type=alert.delivery_failed&limit=1000");
    let later = of_misconfigured(events["events"].as_array().map_or(&[][..], |v| v));
    assert_eq!(later.len(), 1, "never delivered again: {later:?}");
    // Secrets never in the service's answers.
    assert!(!text.contains("tok-123") && !text.contains("a shared secret"));
}
