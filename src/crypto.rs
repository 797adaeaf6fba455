//! Cryptographic primitives of format v1: keyed blob ids, per-file subkeys,
//! AES-256-GCM sealing, and Argon2id passphrase wrapping of the master key.
//!
//! Key hierarchy (see `docs/format.md`):
//! - the master key holds a data key, a blob-id key and a chunker key;
//! - every encrypted file (pack, index, snapshot) carries a random 16-byte
//!   salt, and its AES key is `BLAKE3-derive_key(FILE_KEY_CONTEXT, data_key ||
//!   salt)`, so no key ever encrypts more than one file's blobs (far below the
//!   2^32 random-nonce limit of AES-GCM).

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use serde::{Deserialize, Serialize};

use crate::id::BlobId;

/// Length of a nonce (96 bits).
pub const NONCE_LEN: usize = 12;
/// Length of a GCM tag.
pub const TAG_LEN: usize = 16;
/// Bytes a sealed message adds to its plaintext.
pub const SEAL_OVERHEAD: usize = NONCE_LEN + TAG_LEN;
/// Length of a per-file salt.
pub const SALT_LEN: usize = 16;

/// BLAKE3 context for per-file encryption subkeys. Frozen.
const FILE_KEY_CONTEXT: &str = "vouch 2026-12-03 format v1 file encryption subkey";
/// BLAKE3 context for the chunker's gear table. Frozen.
const GEAR_CONTEXT: &str = "vouch 2026-12-03 format v1 chunker gear table";

/// Fills an array with bytes from the operating system's CSPRNG.
///
/// # Panics
/// Only if the OS has no random source at all, which no supported platform lacks.
pub fn random_array<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    getrandom::fill(&mut out).expect("the operating system's random source failed");
    out
}

/// Authentication failed: wrong key or modified bytes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("authentication failed (wrong key or modified data)")]
pub struct AuthError;

/// The repository master key. Never written in the clear.
#[derive(Clone, Serialize, Deserialize)]
pub struct MasterKey {
    /// Root of the per-file AES-256-GCM subkeys.
    #[serde(with = "serde_bytes")]
    pub data_key: [u8; 32],
    /// Key of the keyed BLAKE3 that names blobs.
    #[serde(with = "serde_bytes")]
    pub id_key: [u8; 32],
    /// Key from which the chunker's gear table is derived.
    #[serde(with = "serde_bytes")]
    pub chunker_key: [u8; 32],
}

impl Drop for MasterKey {
    /// Wipes the key material when the last copy goes away.
    fn drop(&mut self) {
        use zeroize::Zeroize;
        self.data_key.zeroize();
        self.id_key.zeroize();
        self.chunker_key.zeroize();
    }
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

impl MasterKey {
    /// A fresh random master key.
    pub fn generate() -> Self {
        Self {
            data_key: random_array(),
            id_key: random_array(),
            chunker_key: random_array(),
        }
    }

    /// The id of a blob: keyed BLAKE3 of its plaintext.
    pub fn blob_id(&self, plaintext: &[u8]) -> BlobId {
        BlobId(*blake3::keyed_hash(&self.id_key, plaintext).as_bytes())
    }

    /// A keyed hasher for ids of data arriving in pieces.
    pub fn blob_hasher(&self) -> blake3::Hasher {
        blake3::Hasher::new_keyed(&self.id_key)
    }

    /// The cipher for the file with this salt.
    pub fn file_cipher(&self, salt: &[u8; SALT_LEN]) -> FileCipher {
        let mut material = [0u8; 32 + SALT_LEN];
        material[..32].copy_from_slice(&self.data_key);
        material[32..].copy_from_slice(salt);
        let mut key = blake3::derive_key(FILE_KEY_CONTEXT, &material);
        let cipher = FileCipher::new(&key);
        zeroize::Zeroize::zeroize(&mut material);
        zeroize::Zeroize::zeroize(&mut key);
        cipher
    }

    /// The 256-entry gear table of the chunker, derived from the chunker key.
    pub fn gear_table(&self) -> Vec<u64> {
        let mut reader = blake3::Hasher::new_derive_key(GEAR_CONTEXT)
            .update(&self.chunker_key)
            .finalize_xof();
        let mut bytes = [0u8; 256 * 8];
        reader.fill(&mut bytes);
        bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect()
    }
}

/// AES-256-GCM under one file's subkey.
#[derive(Clone)]
pub struct FileCipher {
    aead: Aes256Gcm,
}

impl FileCipher {
    /// A cipher for a raw 32-byte key.
    pub fn new(key: &[u8; 32]) -> Self {
        Self {
            aead: Aes256Gcm::new(key.into()),
        }
    }

    /// Encrypts `plaintext` and appends `nonce || ciphertext || tag` to `out`.
    pub fn seal_into(&self, aad: &[u8], plaintext: &[u8], out: &mut Vec<u8>) {
        let nonce_bytes: [u8; NONCE_LEN] = random_array();
        let start = out.len();
        out.extend_from_slice(&nonce_bytes);
        out.extend_from_slice(plaintext);
        let nonce = Nonce::from(nonce_bytes);
        let tag = self
            .aead
            .encrypt_inout_detached(&nonce, aad, (&mut out[start + NONCE_LEN..]).into())
            // Only fails for messages over 64 GiB, which the format never makes.
            .expect("AES-GCM message within size limits");
        out.extend_from_slice(tag.as_slice());
    }

    /// Encrypts `plaintext` into a new buffer.
    pub fn seal(&self, aad: &[u8], plaintext: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(plaintext.len() + SEAL_OVERHEAD);
        self.seal_into(aad, plaintext, &mut out);
        out
    }

    /// Decrypts `nonce || ciphertext || tag`.
    pub fn open(&self, aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, AuthError> {
        if sealed.len() < SEAL_OVERHEAD {
            return Err(AuthError);
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let (ct, tag) = rest.split_at(rest.len() - TAG_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| AuthError)?;
        let tag: [u8; TAG_LEN] = tag.try_into().map_err(|_| AuthError)?;
        let mut buf = ct.to_vec();
        self.aead
            .decrypt_inout_detached(
                &Nonce::from(nonce),
                aad,
                buf.as_mut_slice().into(),
                &tag.into(),
            )
            .map_err(|_| AuthError)?;
        Ok(buf)
    }
}

/// Argon2id parameters, stored in each key file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KdfParams {
    /// Memory in KiB.
    pub memory_kib: u32,
    /// Passes.
    pub iterations: u32,
    /// Lanes.
    pub parallelism: u32,
}

impl Default for KdfParams {
    /// 64 MiB, 3 passes, 1 lane: about a third of a second here.
    fn default() -> Self {
        Self {
            memory_kib: 64 * 1024,
            iterations: 3,
            parallelism: 1,
        }
    }
}

/// Errors of key derivation.
#[derive(Debug, thiserror::Error)]
#[error("invalid key derivation parameters: {0}")]
pub struct KdfError(String);

/// Bounds on Argon2id parameters read from a key file: anyone who can write
/// the storage can plant a key file, so its cost is capped before it is paid
/// (4 GiB of memory, 64 passes, 16 lanes).
pub const KDF_READ_MAX: KdfParams = KdfParams {
    memory_kib: 4 * 1024 * 1024,
    iterations: 64,
    parallelism: 16,
};

/// The weakest parameters accepted for a new key: OWASP's Argon2id minimum
/// (19 MiB, 2 passes, 1 lane; RFC 9106 recommends more, and the default is
/// 64 MiB with 3 passes).
pub const KDF_NEW_MIN: KdfParams = KdfParams {
    memory_kib: 19 * 1024,
    iterations: 2,
    parallelism: 1,
};

/// Set (by `--insecure-kdf`, for tests) to accept new keys below
/// [`KDF_NEW_MIN`].
static ALLOW_WEAK_KDF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Allows new keys below [`KDF_NEW_MIN`] for the rest of the process (tests
/// only: such a key is cheap to guess).
pub fn allow_weak_kdf() {
    ALLOW_WEAK_KDF.store(true, std::sync::atomic::Ordering::Relaxed);
}

impl KdfParams {
    /// Whether a key file's parameters are within [`KDF_READ_MAX`] (and
    /// well-formed), so trying them costs a bounded amount.
    pub fn check_readable(&self) -> Result<(), KdfError> {
        let m = KDF_READ_MAX;
        if self.memory_kib > m.memory_kib
            || self.iterations > m.iterations
            || self.parallelism > m.parallelism
            || self.iterations == 0
            || self.parallelism == 0
        {
            return Err(KdfError(format!(
                "argon2id parameters m={} KiB, t={}, p={} are outside the accepted range (m <= {} KiB, 1 <= t <= {}, 1 <= p <= {})",
                self.memory_kib, self.iterations, self.parallelism, m.memory_kib, m.iterations, m.parallelism
            )));
        }
        Ok(())
    }

    /// Whether these parameters may protect a new key: within
    /// [`KDF_READ_MAX`] and at least [`KDF_NEW_MIN`] (unless
    /// [`allow_weak_kdf`] was called).
    pub fn check_new(&self) -> Result<(), KdfError> {
        self.check_readable()?;
        let min = KDF_NEW_MIN;
        let weak = self.memory_kib < min.memory_kib || self.iterations < min.iterations;
        if weak && !ALLOW_WEAK_KDF.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(KdfError(format!(
                "argon2id parameters m={} KiB, t={} are below the minimum for a new key (m >= {} KiB, t >= {}); --insecure-kdf allows them for tests",
                self.memory_kib, self.iterations, min.memory_kib, min.iterations
            )));
        }
        Ok(())
    }

    /// Derives the 32-byte wrapping key from a passphrase and salt.
    pub fn derive(&self, passphrase: &[u8], salt: &[u8]) -> Result<[u8; 32], KdfError> {
        let params =
            argon2::Params::new(self.memory_kib, self.iterations, self.parallelism, Some(32))
                .map_err(|e| KdfError(e.to_string()))?;
        let argon =
            argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
        let mut out = [0u8; 32];
        argon
            .hash_password_into(passphrase, salt, &mut out)
            .map_err(|e| KdfError(e.to_string()))?;
        Ok(out)
    }
}

/// Compares two byte strings in constant time (for tokens and MACs).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_round_trip_and_tamper_detection() {
        let key = MasterKey::generate();
        let salt = random_array();
        let c = key.file_cipher(&salt);
        let sealed = c.seal(b"aad", b"hello world");
        assert_eq!(sealed.len(), 11 + SEAL_OVERHEAD);
        assert_eq!(c.open(b"aad", &sealed).unwrap(), b"hello world");
        assert_eq!(c.open(b"other", &sealed), Err(AuthError));
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 1;
            assert_eq!(c.open(b"aad", &bad), Err(AuthError), "flip at {i}");
        }
        let other = key.file_cipher(&random_array());
        assert_eq!(other.open(b"aad", &sealed), Err(AuthError));
    }

    #[test]
    fn blob_ids_are_keyed() {
        let a = MasterKey::generate();
        let b = MasterKey::generate();
        assert_eq!(a.blob_id(b"x"), a.blob_id(b"x"));
        assert_ne!(a.blob_id(b"x"), b.blob_id(b"x"));
        assert_ne!(a.blob_id(b"x").0, *blake3::hash(b"x").as_bytes());
    }

    #[test]
    fn gear_tables_depend_on_the_key() {
        let a = MasterKey::generate();
        assert_eq!(a.gear_table().len(), 256);
        assert_eq!(a.gear_table(), a.gear_table());
        assert_ne!(a.gear_table(), MasterKey::generate().gear_table());
    }

    #[test]
    fn kdf_is_deterministic_and_salted() {
        let p = KdfParams {
            memory_kib: 1024,
            iterations: 1,
            parallelism: 1,
        };
        assert_eq!(
            p.derive(b"pw", b"saltsaltsalt").unwrap(),
            p.derive(b"pw", b"saltsaltsalt").unwrap()
        );
        assert_ne!(
            p.derive(b"pw", b"saltsaltsalt").unwrap(),
            p.derive(b"pw", b"othersaltxyz").unwrap()
        );
        let bad = KdfParams {
            memory_kib: 1,
            iterations: 0,
            parallelism: 0,
        };
        assert!(bad.derive(b"pw", b"saltsaltsalt").is_err());
    }

    #[test]
    fn kdf_parameters_from_disk_are_bounded() {
        // Regression (engine review finding 14): a planted key file with a
        // huge memory cost made every open abort or hang.
        let huge = KdfParams {
            memory_kib: u32::MAX,
            iterations: 3,
            parallelism: 1,
        };
        assert!(huge.check_readable().is_err());
        let slow = KdfParams {
            iterations: 1_000_000,
            ..KdfParams::default()
        };
        assert!(slow.check_readable().is_err());
        assert!(KDF_READ_MAX.check_readable().is_ok());
        assert!(KdfParams::default().check_readable().is_ok());
        assert!(KdfParams::default().check_new().is_ok());
        assert!(KDF_NEW_MIN.check_new().is_ok());
        let weak = KdfParams {
            memory_kib: 8,
            iterations: 1,
            parallelism: 1,
        };
        // Weak parameters still open existing keys, but protect no new one
        // (this unit test runs without `allow_weak_kdf`).
        assert!(weak.check_readable().is_ok());
        if !ALLOW_WEAK_KDF.load(std::sync::atomic::Ordering::Relaxed) {
            assert!(weak.check_new().is_err());
        }
    }

    #[test]
    fn constant_time_eq_works() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
