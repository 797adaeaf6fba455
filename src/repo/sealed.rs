//! Sealed metadata files (index, snapshot): a 9-byte plaintext prefix
//! (`VOUCH`, kind, version, two reserved zero bytes), a 16-byte salt, then
//! `nonce || AES-256-GCM(zstd(msgpack)) || tag` under the salt's subkey, with
//! the prefix as associated data.

use crate::crypto::{MasterKey, SALT_LEN};
use crate::error::{Error, Result};
use crate::format::{
    SealedKind, FORMAT_VERSION, MAX_SEALED_VERSION, SEALED_MAGIC, SEALED_PREFIX_LEN,
    SNAPSHOT_VERSION,
};

/// zstd level for metadata files (small, read often).
const METADATA_ZSTD_LEVEL: i32 = 3;

/// Largest plaintext a metadata file may claim (guards decompression).
const MAX_METADATA_PLAINTEXT: usize = 1 << 31;

fn prefix(kind: SealedKind, version: u8) -> [u8; SEALED_PREFIX_LEN] {
    let mut p = [0u8; SEALED_PREFIX_LEN];
    p[..5].copy_from_slice(SEALED_MAGIC);
    p[5] = kind as u8;
    p[6] = version;
    p
}

/// Decompresses at most `limit` bytes; `Ok(None)` when there is more (the
/// check runs while decompressing, so a bomb never gets allocated).
fn decompress_bounded(compressed: &[u8], limit: usize) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut out = Vec::new();
    zstd::stream::read::Decoder::new(compressed)?
        .take(limit as u64 + 1)
        .read_to_end(&mut out)?;
    Ok((out.len() <= limit).then_some(out))
}

/// Encrypts a metadata file.
pub fn seal(key: &MasterKey, kind: SealedKind, plaintext: &[u8]) -> Vec<u8> {
    let version = match kind {
        SealedKind::Snapshot => SNAPSHOT_VERSION,
        _ => FORMAT_VERSION,
    };
    let prefix = prefix(kind, version as u8);
    let salt: [u8; SALT_LEN] = crate::crypto::random_array();
    let compressed =
        zstd::bulk::compress(plaintext, METADATA_ZSTD_LEVEL).unwrap_or_else(|_| plaintext.to_vec());
    let mut out = Vec::with_capacity(SEALED_PREFIX_LEN + SALT_LEN + compressed.len() + 28);
    out.extend_from_slice(&prefix);
    out.extend_from_slice(&salt);
    key.file_cipher(&salt)
        .seal_into(&prefix, &compressed, &mut out);
    out
}

/// Decrypts a metadata file; `what` names it in errors.
pub fn open(key: &MasterKey, kind: SealedKind, bytes: &[u8], what: &str) -> Result<Vec<u8>> {
    if bytes.len() < SEALED_PREFIX_LEN + SALT_LEN || &bytes[..5] != SEALED_MAGIC {
        return Err(Error::corrupt(
            what,
            "not a vouch metadata file (bad magic or too short)",
        ));
    }
    if bytes[5] != kind as u8 {
        return Err(Error::corrupt(
            what,
            format!("holds kind {} where {} was expected", bytes[5], kind as u8),
        ));
    }
    let version = u32::from(bytes[6]);
    if version > MAX_SEALED_VERSION {
        return Err(Error::UnsupportedFormat {
            found: version,
            supported: MAX_SEALED_VERSION,
        });
    }
    let (prefix, rest) = bytes.split_at(SEALED_PREFIX_LEN);
    let (salt, sealed) = rest.split_at(SALT_LEN);
    let salt: [u8; SALT_LEN] = salt
        .try_into()
        .map_err(|_| Error::corrupt(what, "short salt"))?;
    let compressed = key
        .file_cipher(&salt)
        .open(prefix, sealed)
        .map_err(|e| Error::corrupt(what, e))?;
    decompress_bounded(&compressed, MAX_METADATA_PLAINTEXT)
        .map_err(|e| Error::corrupt(what, format!("decompression failed: {e}")))?
        .ok_or_else(|| Error::corrupt(what, "implausibly large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decompression_is_bounded_while_it_runs() {
        // Regression (engine review finding 18): the size guard ran after
        // the whole plaintext was decompressed.
        let bomb = zstd::bulk::compress(&vec![0u8; 1 << 20], 3).unwrap();
        assert!(bomb.len() < 1 << 12);
        assert_eq!(decompress_bounded(&bomb, 1 << 16).unwrap(), None);
        assert_eq!(
            decompress_bounded(&bomb, 1 << 20).unwrap().map(|v| v.len()),
            Some(1 << 20)
        );
    }

    #[test]
    fn round_trip_and_kind_binding() {
        let key = MasterKey::generate();
        let sealed = seal(&key, SealedKind::Snapshot, b"manifest");
        assert_eq!(
            open(&key, SealedKind::Snapshot, &sealed, "s").unwrap(),
            b"manifest"
        );
        assert!(open(&key, SealedKind::Index, &sealed, "s").is_err());
        let mut relabelled = sealed.clone();
        relabelled[5] = SealedKind::Index as u8;
        assert!(
            open(&key, SealedKind::Index, &relabelled, "s").is_err(),
            "prefix is authenticated"
        );
        assert!(open(&MasterKey::generate(), SealedKind::Snapshot, &sealed, "s").is_err());
        let mut newer = sealed;
        newer[6] = 9;
        assert!(matches!(
            open(&key, SealedKind::Snapshot, &newer, "s"),
            Err(Error::UnsupportedFormat { found: 9, .. })
        ));
    }
}
