//! The durable acknowledged head: a small file `HEAD` beside the segments
//! that says which seq (and hash) the writer last acknowledged. It is the
//! independent evidence that tells a torn, never-acknowledged tail (cut it)
//! from damage to acknowledged events (refuse, or cut with
//! `lost_acknowledged`).
//!
//! Layout: two slots of [`SLOT_LEN`] bytes, at offsets 0 and
//! [`SLOT_STRIDE`] (separate sectors). Each write goes to the slot the
//! previous one did not use, then `fdatasync`; the slot with the highest
//! generation whose checksum matches is the head. A write torn by a power
//! loss can spoil only the slot being written, and that commit was not
//! acknowledged yet: the other slot is still a valid lower bound. The file
//! never changes size after creation, so `fdatasync` writes no metadata.
//!
//! Slot: `magic "VOUCHHD1" | generation u64 LE | seq u64 LE | hash [32] |
//! BLAKE3(previous 56 bytes) [32]`. An all-zero slot is empty.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{EventError, Result};
use crate::format::EventHash;
use crate::log::segment::sync_dir;

/// File name of the head, in the log directory.
pub(crate) const HEAD_FILE: &str = "HEAD";
const MAGIC: &[u8; 8] = b"VOUCHHD1";
const SLOT_LEN: usize = 88;
const SLOT_STRIDE: u64 = 512;
const FILE_LEN: u64 = 2 * SLOT_STRIDE;

/// The acknowledged head: every event up to `seq` was acknowledged to a
/// caller (and `hash` is the hash of event `seq`). Seq 0: nothing yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AckHead {
    /// The highest acknowledged seq.
    pub seq: u64,
    /// The hash of that event.
    pub hash: EventHash,
}

fn encode_slot(generation: u64, head: AckHead) -> [u8; SLOT_LEN] {
    let mut s = [0u8; SLOT_LEN];
    s[..8].copy_from_slice(MAGIC);
    s[8..16].copy_from_slice(&generation.to_le_bytes());
    s[16..24].copy_from_slice(&head.seq.to_le_bytes());
    s[24..56].copy_from_slice(&head.hash.0);
    let sum = blake3::hash(&s[..56]);
    s[56..88].copy_from_slice(sum.as_bytes());
    s
}

/// A slot: `Ok(None)` if empty, `Err(())` if damaged.
fn decode_slot(s: &[u8]) -> std::result::Result<Option<(u64, AckHead)>, ()> {
    if s.len() < SLOT_LEN {
        return if s.iter().all(|b| *b == 0) {
            Ok(None)
        } else {
            Err(())
        };
    }
    let s = &s[..SLOT_LEN];
    if s.iter().all(|b| *b == 0) {
        return Ok(None);
    }
    if &s[..8] != MAGIC || blake3::hash(&s[..56]).as_bytes()[..] != s[56..88] {
        return Err(());
    }
    let mut u = [0u8; 8];
    u.copy_from_slice(&s[8..16]);
    let generation = u64::from_le_bytes(u);
    u.copy_from_slice(&s[16..24]);
    let seq = u64::from_le_bytes(u);
    let mut h = [0u8; 32];
    h.copy_from_slice(&s[24..56]);
    Ok(Some((
        generation,
        AckHead {
            seq,
            hash: EventHash(h),
        },
    )))
}

/// What the head file says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeadState {
    pub generation: u64,
    pub head: AckHead,
}

/// Reads the head of the log in `dir`: `Ok(None)` when there is no head
/// file (a log written by a build before the head existed), seq 0 when it
/// holds no head yet; an error when both slots are damaged.
pub(crate) fn read_head(dir: &Path) -> Result<Option<HeadState>> {
    let path = dir.join(HEAD_FILE);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(EventError::io(format!("reading {}", path.display()), e)),
    };
    let slot = |i: usize| {
        let start = (i as u64 * SLOT_STRIDE) as usize;
        data.get(start..).map_or(Ok(None), decode_slot)
    };
    let slots = [slot(0), slot(1)];
    let mut best: Option<HeadState> = None;
    let mut damaged = 0;
    for s in slots {
        match s {
            Ok(Some((generation, head))) => {
                if best.is_none_or(|b| generation > b.generation) {
                    best = Some(HeadState { generation, head });
                }
            }
            Ok(None) => {}
            Err(()) => damaged += 1,
        }
    }
    if best.is_none() && damaged == 0 {
        // The file exists but no head was written yet: a new log, nothing
        // acknowledged (not an older build's log, which has no file).
        return Ok(Some(HeadState {
            generation: 0,
            head: AckHead {
                seq: 0,
                hash: crate::format::GENESIS_HASH,
            },
        }));
    }
    if damaged == 2 {
        return Err(EventError::BadSegment {
            path,
            message: "both slots of the acknowledged head are damaged: the log cannot tell \
                      which events were acknowledged; run `vouch events verify`, and open with \
                      the repair option (`vouch serve --repair-log`) to go on from what the \
                      segments hold"
                .into(),
        });
    }
    Ok(best)
}

/// The acknowledged head of the log in `dir` as `(seq, hash)`: `None` for a
/// log without `HEAD` (an older build's). Reads one small file, takes no
/// lock: safe while the service runs.
pub fn read_log_head(dir: impl AsRef<Path>) -> Result<Option<(u64, EventHash)>> {
    Ok(read_head(dir.as_ref())?.map(|s| (s.head.seq, s.head.hash)))
}

/// The open head file of a writer.
#[derive(Debug)]
pub(crate) struct HeadFile {
    path: PathBuf,
    file: File,
    generation: u64,
    /// The head last written (what the file says now).
    pub current: Option<AckHead>,
}

impl HeadFile {
    /// Opens the head file of `dir`, creating it (empty, synced, directory
    /// synced) if missing; `state` is what [`read_head`] returned.
    pub(crate) fn open(dir: &Path, state: Option<HeadState>) -> Result<Self> {
        let path = dir.join(HEAD_FILE);
        let existed = path.exists();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| EventError::io(format!("opening {}", path.display()), e))?;
        let len = file
            .metadata()
            .map_err(|e| EventError::io(format!("reading {}", path.display()), e))?
            .len();
        if len < FILE_LEN {
            file.set_len(FILE_LEN)
                .and_then(|()| file.sync_all())
                .map_err(|e| EventError::io(format!("creating {}", path.display()), e))?;
        }
        if !existed {
            sync_dir(dir)?;
        }
        Ok(HeadFile {
            path,
            file,
            generation: state.map_or(0, |s| s.generation),
            current: state.map(|s| s.head),
        })
    }

    /// Makes `head` the durable acknowledged head (one `pwrite` of one
    /// slot, one `fdatasync`).
    pub(crate) fn write(&mut self, head: AckHead) -> Result<()> {
        let generation = self.generation + 1;
        let slot = encode_slot(generation, head);
        let at = (generation % 2) * SLOT_STRIDE;
        self.file
            .write_all_at(&slot, at)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| EventError::io(format!("writing {}", self.path.display()), e))?;
        self.generation = generation;
        self.current = Some(head);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_valid_slot_wins_and_a_torn_slot_falls_back_to_the_other() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read_head(dir.path()).expect("read"), None);
        let mut f = HeadFile::open(dir.path(), None).expect("open");
        assert_eq!(
            read_head(dir.path()).expect("read").map(|s| s.head.seq),
            Some(0),
            "created empty: nothing acknowledged"
        );
        let h = |seq: u64| AckHead {
            seq,
            hash: EventHash([seq as u8; 32]),
        };
        for seq in 1..=5 {
            f.write(h(seq)).expect("write");
            assert_eq!(
                read_head(dir.path()).expect("read").map(|s| s.head),
                Some(h(seq))
            );
        }
        // Generation 5 went to slot 1; tear it: slot 0 (seq 4) remains.
        let path = dir.path().join(HEAD_FILE);
        let mut data = std::fs::read(&path).expect("read");
        data[SLOT_STRIDE as usize + 20] ^= 0xff;
        std::fs::write(&path, &data).expect("write");
        assert_eq!(
            read_head(dir.path()).expect("read").map(|s| s.head),
            Some(h(4))
        );
        // Both torn: an error, never a guess.
        data[20] ^= 0xff;
        std::fs::write(&path, &data).expect("write");
        assert!(read_head(dir.path()).is_err());
    }
}
