//! Building a log directory from records kept elsewhere (the repository
//! mirror of disaster recovery): the exact frames, checked as they come
//! (checksum, seq, hash chain), written into fresh segments, then the
//! acknowledged head. The result opens like any log the writer left.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::codec::decode_persisted;
use crate::error::{EventError, Result};
use crate::format::{EventHash, GENESIS_HASH};
use crate::log::frame::{read_frame, Frame};
use crate::log::head::{AckHead, HeadFile};
use crate::log::segment::{create_segment, sync_dir};

/// A record named by its seq, hash and recorded time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef {
    /// Its seq.
    pub seq: u64,
    /// Its hash.
    pub hash: EventHash,
    /// When it was recorded.
    pub recorded_unix_ns: i64,
}

/// The last whole record of `frames` (as
/// [`LogReader::frames`](crate::LogReader::frames) returns them), or `None`
/// when there is none or the frames are damaged.
pub fn last_record(frames: &[u8]) -> Option<RecordRef> {
    let mut pos = 0;
    let mut last = None;
    while pos < frames.len() {
        match read_frame(&frames[pos..]) {
            Frame::Record { hash, body, len } => {
                let env = decode_persisted(body).ok()?;
                last = Some(RecordRef {
                    seq: env.seq,
                    hash,
                    recorded_unix_ns: env.recorded_unix_ns,
                });
                pos += len;
            }
            Frame::End => break,
            _ => return None,
        }
    }
    last
}

/// Writes a new log directory from frames, in seq order from seq 1.
#[derive(Debug)]
pub struct LogImporter {
    dir: PathBuf,
    segment_max_bytes: u64,
    active: Option<(File, u64)>,
    next_seq: u64,
    last_hash: EventHash,
}

/// What an import wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImportedLog {
    /// The last seq written (0: none).
    pub last_seq: u64,
    /// Its hash.
    pub last_hash: EventHash,
}

impl LogImporter {
    /// Starts a log in `dir`, which must not exist or be empty: an import
    /// never mixes with a log already there.
    pub fn create(dir: impl AsRef<Path>, segment_max_bytes: u64) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        match fs::read_dir(&dir) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(EventError::Import(format!(
                        "{} is not empty: an imported log never mixes with another",
                        dir.display()
                    )));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir_all(&dir)
                    .map_err(|e| EventError::io(format!("creating {}", dir.display()), e))?;
            }
            Err(e) => return Err(EventError::io(format!("reading {}", dir.display()), e)),
        }
        Ok(LogImporter {
            dir,
            segment_max_bytes: segment_max_bytes.max(1),
            active: None,
            next_seq: 1,
            last_hash: GENESIS_HASH,
        })
    }

    /// The seq the next record must have.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Appends the records framed in `frames` (as
    /// [`LogReader::frames`](crate::LogReader::frames) returns them). Each
    /// must match its checksum, carry the next seq and chain to the record
    /// before; records before the next seq (an overlap between two copies)
    /// are checked against nothing and skipped. Nothing of a bad batch is
    /// kept past its first bad record.
    pub fn push(&mut self, frames: &[u8]) -> Result<u64> {
        let mut pos = 0;
        let mut added = 0;
        while pos < frames.len() {
            let (hash, body, len) = match read_frame(&frames[pos..]) {
                Frame::Record { hash, body, len } => (hash, body, len),
                Frame::End => break,
                other => {
                    return Err(EventError::Import(format!(
                        "a damaged record at byte {pos} ({other:?}) where seq {} was expected",
                        self.next_seq
                    )))
                }
            };
            let env = decode_persisted(body)?;
            if env.seq < self.next_seq {
                pos += len;
                continue;
            }
            if env.seq != self.next_seq || EventHash(env.prev_hash) != self.last_hash {
                return Err(EventError::Import(format!(
                    "seq {} found where seq {} was expected, or it does not chain to the record \
                     before it",
                    env.seq, self.next_seq
                )));
            }
            self.write(&frames[pos..pos + len])?;
            self.next_seq += 1;
            self.last_hash = hash;
            pos += len;
            added += 1;
        }
        Ok(added)
    }

    fn write(&mut self, frame: &[u8]) -> Result<()> {
        if self
            .active
            .as_ref()
            .is_some_and(|(_, size)| *size >= self.segment_max_bytes)
        {
            self.seal_active()?;
        }
        if self.active.is_none() {
            let (seg, file) = create_segment(&self.dir, self.next_seq)?;
            let size = file
                .metadata()
                .map_err(|e| EventError::io(format!("reading {}", seg.path.display()), e))?
                .len();
            self.active = Some((file, size));
        }
        let dir = &self.dir;
        if let Some((file, size)) = self.active.as_mut() {
            file.write_all(frame).map_err(|e| {
                EventError::io(format!("writing a segment in {}", dir.display()), e)
            })?;
            *size += frame.len() as u64;
        }
        Ok(())
    }

    fn seal_active(&mut self) -> Result<()> {
        if let Some((file, _)) = self.active.take() {
            file.sync_all().map_err(|e| {
                EventError::io(format!("syncing a segment in {}", self.dir.display()), e)
            })?;
        }
        Ok(())
    }

    /// Makes the imported records durable and records them as acknowledged
    /// (the log's `HEAD`): the directory is then a log like any other.
    pub fn finish(mut self) -> Result<ImportedLog> {
        self.seal_active()?;
        let last_seq = self.next_seq - 1;
        let mut head = HeadFile::open(&self.dir, None)?;
        head.write(AckHead {
            seq: last_seq,
            hash: self.last_hash,
        })?;
        sync_dir(&self.dir)?;
        Ok(ImportedLog {
            last_seq,
            last_hash: self.last_hash,
        })
    }
}
