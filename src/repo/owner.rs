//! The ownership record: the optional file `owner` at the repository's root,
//! written by `vouch serve` for every repository it serves, saying which
//! service owns the repository and where its API is. The CLI reads it to
//! send `vouch verify`'s findings to that service and to refuse `forget` and
//! `prune` behind the service's back (see `docs/format.md`, "Ownership
//! record").
//!
//! It is a sealed metadata file (kind 3: encrypted and authenticated with
//! the repository's master key, like index and snapshot files), so anyone
//! who can only write the storage cannot redirect the CLI, and the API token
//! it sends, to another server: a record that does not authenticate is
//! damage, never followed. It is written atomically (temporary file, fsync,
//! rename, fsync of the directory) and is small (at most [`MAX_OWNER_BYTES`]).

use serde::{Deserialize, Serialize};

use super::{sealed, Repository};
use crate::backend::{FileKind, WriteSync};
use crate::error::{Error, Result};
use crate::format::{decode, encode, SealedKind};

/// Largest ownership record a reader accepts (a record is a few hundred
/// bytes; anything bigger was not written by vouch).
pub const MAX_OWNER_BYTES: usize = 4096;

/// Longest text field of a record.
const MAX_FIELD: usize = 512;

/// The content of `owner`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerRecord {
    /// The owning service's id (random, kept in its data directory).
    pub service_id: String,
    /// The base URL of its API, e.g. `http://127.0.0.1:8080`.
    pub url: String,
    /// This repository's id in that service (`default`, ...).
    pub repository: String,
    /// Since when that service owns the repository (RFC 3339).
    pub since: String,
    /// When the API is HTTPS: BLAKE3 (hex) of the DER of the certificate
    /// the service presents; the CLI trusts exactly that certificate.
    #[serde(default)]
    pub tls_cert_blake3: Option<String>,
}

impl OwnerRecord {
    fn check(&self) -> std::result::Result<(), String> {
        for (name, v) in [
            ("service_id", &self.service_id),
            ("url", &self.url),
            ("repository", &self.repository),
            ("since", &self.since),
        ] {
            if v.is_empty() || v.len() > MAX_FIELD || v.chars().any(char::is_control) {
                return Err(format!("field {name} is empty, too long or not printable"));
            }
        }
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err(format!("url {:?} is not http:// or https://", self.url));
        }
        match (&self.tls_cert_blake3, self.url.starts_with("https://")) {
            (Some(h), true) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {}
            (None, false) => {}
            _ => return Err("an https url needs a certificate digest, and only it".into()),
        }
        Ok(())
    }
}

impl Repository {
    /// Writes (or replaces) the ownership record, durably and atomically.
    pub fn write_owner(&self, record: &OwnerRecord) -> Result<()> {
        record
            .check()
            .map_err(|e| Error::InvalidArgument(format!("ownership record: {e}")))?;
        let bytes = sealed::seal(self.key(), SealedKind::Owner, &encode(record));
        if bytes.len() > MAX_OWNER_BYTES {
            return Err(Error::InvalidArgument(format!(
                "ownership record of {} bytes is larger than {MAX_OWNER_BYTES}",
                bytes.len()
            )));
        }
        self.backend()
            .write(FileKind::Owner, "", &bytes, WriteSync::Now)
    }

    /// Reads the ownership record: `Ok(None)` when there is none; a record
    /// that does not authenticate or parse is [`Error::CorruptMetadata`].
    pub fn read_owner(&self) -> Result<Option<OwnerRecord>> {
        if !self.backend().exists(FileKind::Owner, "")? {
            return Ok(None);
        }
        let what = "ownership record (owner)";
        let bytes = self.backend().read(FileKind::Owner, "")?;
        if bytes.len() > MAX_OWNER_BYTES {
            return Err(Error::corrupt(
                what,
                format!("{} bytes, more than {MAX_OWNER_BYTES}", bytes.len()),
            ));
        }
        let plain = sealed::open(self.key(), SealedKind::Owner, &bytes, what)?;
        let record: OwnerRecord = decode(&plain).map_err(|e| Error::corrupt(what, e))?;
        record.check().map_err(|e| Error::corrupt(what, e))?;
        Ok(Some(record))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::LocalBackend;
    use crate::crypto::KdfParams;
    use crate::repo::InitOptions;

    fn repo(dir: &std::path::Path) -> Repository {
        crate::crypto::allow_weak_kdf();
        let opts = InitOptions {
            kdf: KdfParams {
                memory_kib: 1024,
                iterations: 1,
                parallelism: 1,
            },
            ..Default::default()
        };
        Repository::init(Arc::new(LocalBackend::new(dir.join("r"))), b"pw", &opts).unwrap()
    }

    fn record() -> OwnerRecord {
        OwnerRecord {
            service_id: "0123456789abcdef".into(),
            url: "http://127.0.0.1:8080".into(),
            repository: "default".into(),
            since: "2026-12-04T01:00:00Z".into(),
            tls_cert_blake3: None,
        }
    }

    #[test]
    fn round_trips_and_any_flipped_byte_is_damage() {
        let dir = tempfile::tempdir().unwrap();
        let r = repo(dir.path());
        assert_eq!(r.read_owner().unwrap(), None);
        r.write_owner(&record()).unwrap();
        assert_eq!(r.read_owner().unwrap(), Some(record()));
        let path = dir.path().join("r/owner");
        let good = std::fs::read(&path).unwrap();
        assert!(good.len() < MAX_OWNER_BYTES);
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x01;
            std::fs::write(&path, &bad).unwrap();
            assert!(
                matches!(
                    r.read_owner(),
                    Err(Error::CorruptMetadata { .. } | Error::UnsupportedFormat { .. })
                ),
                "byte {i} flipped was accepted"
            );
        }
    }

    #[test]
    fn a_record_of_another_repository_or_kind_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = repo(dir.path());
        a.write_owner(&record()).unwrap();
        let other = tempfile::tempdir().unwrap();
        let b = repo(other.path());
        std::fs::copy(dir.path().join("r/owner"), other.path().join("r/owner")).unwrap();
        assert!(matches!(b.read_owner(), Err(Error::CorruptMetadata { .. })));
        // A sealed file of another kind (an index file) under the name.
        let index = a.backend().list(FileKind::Index).unwrap();
        if let Some((name, _)) = index.first() {
            let bytes = a.backend().read(FileKind::Index, name).unwrap();
            std::fs::write(dir.path().join("r/owner"), bytes).unwrap();
            assert!(a.read_owner().is_err());
        }
        let mut https = record();
        https.url = "https://127.0.0.1:8443".into();
        assert!(
            a.write_owner(&https).is_err(),
            "https needs a certificate digest"
        );
    }
}
