//! Signed checkpoints of the chain (`CHECKPOINTS`, beside the segments).
//!
//! The hash chain proves integrity, not authenticity: whoever can write the
//! log directory can rewrite an event and recompute every later hash. With a
//! chain key (32 random bytes kept outside the data directory), the writer
//! appends, every so often, a record `(seq, hash of seq)` with a keyed
//! BLAKE3 MAC. `vouch events verify --chain-key-file` checks each MAC and
//! that the chain passes through each checkpointed `(seq, hash)`: a history
//! rewritten at or before a checkpoint no longer verifies. The record format
//! is [`ChainCheckpoint`](crate::format::ChainCheckpoint).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{EventError, Result};
use crate::format::{
    ChainCheckpoint, EventHash, CHAIN_KEY_ID_CONTEXT, CHECKPOINTS_FILE, CHECKPOINT_LEN,
};

/// A chain key: 32 secret bytes. Never logged: its `Debug` shows only its
/// public id.
#[derive(Clone)]
pub struct ChainKey([u8; 32]);

/// `blake3::derive_key` context of [`ChainKey::read_store_seal_key`].
const READ_STORE_SEAL_KEY_CONTEXT: &str = "vouch read store seal key v1";

/// The key of the read store's seals ([`ChainKey::read_store_seal_key`]):
/// with it, a snapshot written by someone without the chain key does not
/// verify, however well formed.
#[derive(Clone)]
pub struct SealKey(pub(crate) [u8; 32]);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

impl std::fmt::Debug for ChainKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ChainKey(id {})", hex::encode(self.id()))
    }
}

impl Drop for ChainKey {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

impl ChainKey {
    /// A key from its 32 bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        ChainKey(bytes)
    }

    /// Reads a key file: 64 hex digits (what `vouch events keygen` writes,
    /// a trailing newline allowed) or 32 raw bytes.
    pub fn from_file(path: &Path) -> Result<Self> {
        let data = zeroize::Zeroizing::new(
            std::fs::read(path)
                .map_err(|e| EventError::io(format!("reading chain key {}", path.display()), e))?,
        );
        let bad = || EventError::BadSegment {
            path: path.to_path_buf(),
            message: "a chain key file holds 64 hex digits (or 32 raw bytes); make one with \
                      `vouch events keygen --out PATH`"
                .into(),
        };
        let mut key = [0u8; 32];
        let text = data.trim_ascii();
        if text.len() == 64 {
            hex::decode_to_slice(text, &mut key).map_err(|_| bad())?;
        } else if data.len() == 32 {
            key.copy_from_slice(&data);
        } else {
            return Err(bad());
        }
        Ok(ChainKey(key))
    }

    /// The public id of the key (which key signed a checkpoint).
    pub fn id(&self) -> [u8; 8] {
        let d = blake3::derive_key(CHAIN_KEY_ID_CONTEXT, &self.0);
        let mut id = [0u8; 8];
        id.copy_from_slice(&d[..8]);
        id
    }

    /// The key that seals the read store's snapshots (derived, so the
    /// chain key itself signs nothing but checkpoints).
    pub fn read_store_seal_key(&self) -> SealKey {
        SealKey(blake3::derive_key(READ_STORE_SEAL_KEY_CONTEXT, &self.0))
    }

    /// The MAC of a checkpoint's signed bytes.
    pub fn mac(&self, signed: &[u8]) -> [u8; 32] {
        *blake3::keyed_hash(&self.0, signed).as_bytes()
    }

    /// A signed checkpoint of `(seq, hash)`.
    pub fn sign(&self, seq: u64, hash: EventHash, recorded_unix_ns: i64) -> ChainCheckpoint {
        let mut cp = ChainCheckpoint {
            seq,
            recorded_unix_ns,
            hash,
            key_id: self.id(),
            mac: [0; 32],
        };
        cp.mac = self.mac(&cp.signed_bytes());
        cp
    }

    /// Whether `cp` was signed with this key (constant-time comparison).
    pub fn verifies(&self, cp: &ChainCheckpoint) -> bool {
        blake3::Hash::from(self.mac(&cp.signed_bytes())) == blake3::Hash::from(cp.mac)
    }
}

/// The checkpoints file of a writer (appends only).
#[derive(Debug)]
pub(crate) struct CheckpointFile {
    path: PathBuf,
    file: File,
}

impl CheckpointFile {
    pub(crate) fn open(dir: &Path) -> Result<Self> {
        let path = dir.join(CHECKPOINTS_FILE);
        let existed = path.exists();
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|e| EventError::io(format!("opening {}", path.display()), e))?;
        // A record torn by a crash (the length is not a multiple of a
        // record's) is cut, so every record starts at a multiple of it.
        let len = file
            .metadata()
            .map_err(|e| EventError::io(format!("reading {}", path.display()), e))?
            .len();
        let rem = len % CHECKPOINT_LEN as u64;
        if rem != 0 {
            file.set_len(len - rem)
                .and_then(|()| file.sync_data())
                .map_err(|e| EventError::io(format!("cutting {}", path.display()), e))?;
            tracing::warn!(path = %path.display(), bytes = rem, "a checkpoint torn by a crash was cut");
        }
        if !existed {
            crate::log::segment::sync_dir(dir)?;
        }
        Ok(CheckpointFile { path, file })
    }

    /// Appends a checkpoint (one write, one `fdatasync`).
    pub(crate) fn append(&mut self, cp: &ChainCheckpoint) -> Result<()> {
        self.file
            .write_all(&cp.encode())
            .and_then(|()| self.file.sync_data())
            .map_err(|e| EventError::io(format!("writing {}", self.path.display()), e))
    }
}

/// Every whole checkpoint record of the log in `dir`, with its byte
/// offset (MACs not checked; a trailing partial record is left out). No
/// file: none.
pub(crate) fn read_checkpoints(
    dir: &Path,
) -> Result<Vec<(u64, std::result::Result<ChainCheckpoint, String>)>> {
    let path = dir.join(CHECKPOINTS_FILE);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(EventError::io(format!("reading {}", path.display()), e)),
    };
    Ok(data
        .chunks_exact(CHECKPOINT_LEN)
        .enumerate()
        .map(|(i, r)| ((i * CHECKPOINT_LEN) as u64, ChainCheckpoint::decode(r)))
        .collect())
}

/// The last whole checkpoint of the log in `dir` (its MAC not checked):
/// reads only that record. `None`: no checkpoint.
pub fn latest_checkpoint(dir: impl AsRef<Path>) -> Result<Option<ChainCheckpoint>> {
    let path = dir.as_ref().join(CHECKPOINTS_FILE);
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(EventError::io(format!("opening {}", path.display()), e)),
    };
    let len = file
        .metadata()
        .map_err(|e| EventError::io(format!("reading {}", path.display()), e))?
        .len();
    let whole = len - len % CHECKPOINT_LEN as u64;
    if whole == 0 {
        return Ok(None);
    }
    let mut r = [0u8; CHECKPOINT_LEN];
    file.read_exact_at(&mut r, whole - CHECKPOINT_LEN as u64)
        .map_err(|e| EventError::io(format!("reading {}", path.display()), e))?;
    ChainCheckpoint::decode(&r)
        .map(Some)
        .map_err(|message| EventError::BadSegment { path, message })
}
