//! Everything written to disk by the log, in one place.
//!
//! **Frozen.** The constants and the layout of [`PersistedEnvelope`] are the
//! on-disk format of the event log, format version 1. Never change them;
//! add a new format version instead (and keep reading this one).
//!
//! A segment file is:
//!
//! ```text
//! header  (24 bytes): magic "VOUCHLOG" | format version u32 LE | reserved u32 (0) | first seq u64 LE
//! record* : body length u32 LE | BLAKE3(body) 32 bytes | body
//! ```
//!
//! where `body` is the rmp-serde encoding (positional array) of
//! [`PersistedEnvelope`]. The record's hash is the envelope's own hash; the
//! envelope carries the previous record's hash, which makes the chain.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Magic bytes at the start of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"VOUCHLOG";
/// The segment format version this build writes.
pub const SEGMENT_FORMAT_VERSION: u32 = 1;
/// Length of a segment header.
pub const SEGMENT_HEADER_LEN: usize = 24;
/// Length of a record header (body length + hash).
pub const RECORD_HEADER_LEN: usize = 36;
/// Largest body accepted (16 MiB). A length above this is damage.
pub const MAX_BODY_LEN: u32 = 16 << 20;
/// The `prev_hash` of the first event of a log.
pub const GENESIS_HASH: EventHash = EventHash([0; 32]);

/// A BLAKE3 hash of an envelope body.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct EventHash(#[serde(with = "serde_bytes")] pub [u8; 32]);

impl EventHash {
    /// The hash of `body`.
    pub fn of(body: &[u8]) -> Self {
        EventHash(*blake3::hash(body).as_bytes())
    }

    /// Lower-case hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for EventHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for EventHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EventHash({})", &self.to_hex()[..16])
    }
}

/// The persisted envelope, format version 1. Field order is format.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PersistedEnvelope<'a> {
    /// Sequence number, 1 for the first event, no gaps.
    pub seq: u64,
    /// When the server recorded it.
    pub recorded_unix_ns: i64,
    /// The event's type name.
    #[serde(borrow)]
    pub event_type: Cow<'a, str>,
    /// The payload's schema version.
    pub schema_version: u16,
    /// The hash of the previous envelope ([`GENESIS_HASH`] for seq 1).
    #[serde(with = "serde_bytes")]
    pub prev_hash: [u8; 32],
    /// The event payload (rmp-serde of the event struct).
    #[serde(borrow, with = "serde_bytes")]
    pub payload: Cow<'a, [u8]>,
}

/// Encodes a segment header.
pub fn segment_header(first_seq: u64) -> [u8; SEGMENT_HEADER_LEN] {
    let mut h = [0u8; SEGMENT_HEADER_LEN];
    h[..8].copy_from_slice(&SEGMENT_MAGIC);
    h[8..12].copy_from_slice(&SEGMENT_FORMAT_VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&first_seq.to_le_bytes());
    h
}

/// Decodes a segment header: the first seq, or what is wrong.
pub fn parse_segment_header(h: &[u8]) -> Result<u64, String> {
    if h.len() < SEGMENT_HEADER_LEN {
        return Err(format!(
            "header is {} bytes, expected {SEGMENT_HEADER_LEN}",
            h.len()
        ));
    }
    if h[..8] != SEGMENT_MAGIC {
        return Err("not a Vouch event log segment (bad magic)".into());
    }
    let mut v = [0u8; 4];
    v.copy_from_slice(&h[8..12]);
    let version = u32::from_le_bytes(v);
    if version != SEGMENT_FORMAT_VERSION {
        return Err(format!(
            "segment format version {version}, this build reads {SEGMENT_FORMAT_VERSION}"
        ));
    }
    let mut s = [0u8; 8];
    s.copy_from_slice(&h[16..24]);
    Ok(u64::from_le_bytes(s))
}

/// The file name of the segment starting at `first_seq`.
pub fn segment_file_name(first_seq: u64) -> String {
    format!("{first_seq:020}.seg")
}

/// The first seq encoded in a segment file name, if it is one.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".seg")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// File name of the signed checkpoints of the chain, in the log directory.
pub const CHECKPOINTS_FILE: &str = "CHECKPOINTS";
/// Magic (and version) of a checkpoint record, format version 1.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"VOUCHCP1";
/// Length of a checkpoint record.
pub const CHECKPOINT_LEN: usize = 96;
/// The `blake3::derive_key` context of a chain key's public id.
pub const CHAIN_KEY_ID_CONTEXT: &str = "vouch event log chain key id v1";

/// A signed checkpoint of the chain, format version 1 (frozen):
///
/// ```text
/// "VOUCHCP1" | seq u64 LE | recorded_unix_ns i64 LE | hash [32] | key id [8] | MAC [32]
/// ```
///
/// `MAC` is `blake3::keyed_hash(chain key, the 64 bytes before it)`; the key
/// id is the first 8 bytes of `blake3::derive_key(CHAIN_KEY_ID_CONTEXT,
/// chain key)` (it tells which key signed, and reveals nothing of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainCheckpoint {
    /// The checkpointed seq.
    pub seq: u64,
    /// When it was written (the writer's clock).
    pub recorded_unix_ns: i64,
    /// The hash of event `seq`.
    pub hash: EventHash,
    /// Which key signed it.
    pub key_id: [u8; 8],
    /// The keyed MAC of the fields above.
    pub mac: [u8; 32],
}

impl ChainCheckpoint {
    /// The signed part (the first 64 bytes of the record).
    pub fn signed_bytes(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[..8].copy_from_slice(&CHECKPOINT_MAGIC);
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.recorded_unix_ns.to_le_bytes());
        b[24..56].copy_from_slice(&self.hash.0);
        b[56..64].copy_from_slice(&self.key_id);
        b
    }

    /// The record's bytes.
    pub fn encode(&self) -> [u8; CHECKPOINT_LEN] {
        let mut r = [0u8; CHECKPOINT_LEN];
        r[..64].copy_from_slice(&self.signed_bytes());
        r[64..].copy_from_slice(&self.mac);
        r
    }

    /// Decodes a record (`Err`: not a version-1 checkpoint). The MAC is
    /// not checked here.
    pub fn decode(r: &[u8]) -> Result<Self, String> {
        if r.len() != CHECKPOINT_LEN {
            return Err(format!(
                "checkpoint record is {} bytes, expected {CHECKPOINT_LEN}",
                r.len()
            ));
        }
        if r[..8] != CHECKPOINT_MAGIC {
            return Err("not a version-1 checkpoint (bad magic)".into());
        }
        let mut u = [0u8; 8];
        u.copy_from_slice(&r[8..16]);
        let seq = u64::from_le_bytes(u);
        u.copy_from_slice(&r[16..24]);
        let recorded_unix_ns = i64::from_le_bytes(u);
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&r[24..56]);
        let mut key_id = [0u8; 8];
        key_id.copy_from_slice(&r[56..64]);
        let mut mac = [0u8; 32];
        mac.copy_from_slice(&r[64..96]);
        Ok(ChainCheckpoint {
            seq,
            recorded_unix_ns,
            hash: EventHash(hash),
            key_id,
            mac,
        })
    }
}
