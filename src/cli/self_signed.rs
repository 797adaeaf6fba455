//! A certificate for a service that listens beyond loopback and was given
//! none: generated on the first start into `DATA_DIR/tls/` (as Proxmox
//! Backup Server does), kept for later starts, and named by its SHA-256
//! fingerprint so that agents and browsers can pin it. Tokens then never
//! cross the network in clear, even before an administrator installs a
//! certificate of their own.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The generated certificate and key of a data directory.
pub struct SelfSigned {
    /// PEM certificate.
    pub cert: PathBuf,
    /// PEM private key (mode 0600).
    pub key: PathBuf,
    /// SHA-256 of the certificate's DER, as colon-separated hex pairs.
    pub fingerprint: String,
    /// Whether this start made it.
    pub created: bool,
}

/// The directory below the data directory that holds them.
pub const TLS_DIR: &str = "tls";

/// The certificate of `data_dir`, made now if there is none yet, for the
/// names `listen` can be reached by (its address when it names one,
/// `localhost` and this host's name).
pub fn ensure(data_dir: &Path, listen: &str) -> anyhow::Result<SelfSigned> {
    let dir = data_dir.join(TLS_DIR);
    let cert = dir.join("self-signed.crt");
    let key = dir.join("self-signed.key");
    let created = if cert.exists() && key.exists() {
        false
    } else {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let (cert_pem, key_pem) = generate(&names(listen))?;
        // The key first: a certificate without its key would be reused and
        // fail; a key without its certificate is made again.
        write_new(&key, key_pem.as_bytes())?;
        write_new(&cert, cert_pem.as_bytes())?;
        true
    };
    let pem = std::fs::read(&cert).with_context(|| format!("reading {}", cert.display()))?;
    let der = {
        use rustls_pki_types::pem::PemObject;
        rustls_pki_types::CertificateDer::from_pem_slice(&pem)
            .map_err(|e| anyhow::anyhow!("{} is not a PEM certificate: {e}", cert.display()))?
    };
    Ok(SelfSigned {
        fingerprint: fingerprint(der.as_ref()),
        cert,
        key,
        created,
    })
}

/// SHA-256 of `der` as `AB:CD:...` (what browsers and `openssl x509
/// -fingerprint -sha256` show).
pub fn fingerprint(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The subject names: `localhost`, this host's name, and the address of
/// `listen` when it names one (not `0.0.0.0` or `::`).
fn names(listen: &str) -> Vec<String> {
    let mut out = vec!["localhost".to_owned()];
    if let Some(h) = hostname() {
        out.push(h);
    }
    if let Ok(addr) = listen.parse::<std::net::SocketAddr>() {
        if !addr.ip().is_unspecified() {
            out.push(addr.ip().to_string());
        }
    } else if let Some((host, _)) = listen.rsplit_once(':') {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if !host.is_empty() {
            out.push(host.to_owned());
        }
    }
    out.sort();
    out.dedup();
    out
}

fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into our buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = std::str::from_utf8(&buf[..end]).ok()?.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

fn generate(names: &[String]) -> anyhow::Result<(String, String)> {
    let key = rcgen::KeyPair::generate().context("generating a key for the certificate")?;
    let mut params =
        rcgen::CertificateParams::new(names.to_vec()).context("the certificate's names")?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "vouch serve (self-signed)");
    // Ten years: replaced by installing a certificate, never by expiry.
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(3650);
    let cert = params
        .self_signed(&key)
        .context("signing the certificate")?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn write_new(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_then_kept_with_a_private_key() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let first = ensure(dir.path(), "0.0.0.0:8007").unwrap();
        assert!(first.created);
        assert_eq!(first.fingerprint.len(), 32 * 3 - 1);
        let mode = std::fs::metadata(&first.key).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "the key is the service user's alone");
        let again = ensure(dir.path(), "0.0.0.0:8007").unwrap();
        assert!(!again.created);
        assert_eq!(again.fingerprint, first.fingerprint);
        // It is a certificate the TLS listener takes.
        crate::cli::tls::server_config(&again.cert, &again.key).unwrap();
    }

    #[test]
    fn names_cover_the_address_and_the_host() {
        let n = names("192.0.2.7:8443");
        assert!(n.contains(&"192.0.2.7".to_owned()) && n.contains(&"localhost".to_owned()));
        assert!(!names("0.0.0.0:1").iter().any(|s| s == "0.0.0.0"));
        assert!(names("backup.example.org:8443").contains(&"backup.example.org".to_owned()));
    }
}
