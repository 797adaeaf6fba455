//! Segment files: listing, creating, and walking the records of one.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::codec::decode_persisted;
use crate::error::{EventError, Result};
use crate::format::{
    parse_segment_file_name, parse_segment_header, segment_file_name, segment_header, EventHash,
    SEGMENT_HEADER_LEN,
};
use crate::log::frame::{read_frame, Frame};

/// A segment file and the seq of its first record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SegmentFile {
    pub first_seq: u64,
    pub path: PathBuf,
}

/// The segment files of `dir`, by first seq.
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<SegmentFile>> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(EventError::io(format!("listing {}", dir.display()), e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| EventError::io(format!("listing {}", dir.display()), e))?;
        let name = entry.file_name();
        if let Some(first_seq) = name.to_str().and_then(parse_segment_file_name) {
            out.push(SegmentFile {
                first_seq,
                path: entry.path(),
            });
        }
    }
    out.sort_by_key(|s| s.first_seq);
    Ok(out)
}

/// Creates a segment starting at `first_seq`, durably: header written and
/// synced, then the directory synced.
pub(crate) fn create_segment(dir: &Path, first_seq: u64) -> Result<(SegmentFile, File)> {
    let path = dir.join(segment_file_name(first_seq));
    let mut f = OpenOptions::new()
        .create_new(true)
        .read(true)
        .append(true)
        .open(&path)
        .map_err(|e| EventError::io(format!("creating {}", path.display()), e))?;
    f.write_all(&segment_header(first_seq))
        .and_then(|()| f.sync_data())
        .map_err(|e| EventError::io(format!("writing {}", path.display()), e))?;
    sync_dir(dir)?;
    tracing::debug!(segment = %path.display(), first_seq, "event log segment created");
    Ok((SegmentFile { first_seq, path }, f))
}

/// fsyncs a directory so a created or renamed entry survives a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| EventError::io(format!("syncing directory {}", dir.display()), e))
}

/// Checks a segment's header against its name.
pub(crate) fn check_header(seg: &SegmentFile, data: &[u8]) -> Result<()> {
    let first = parse_segment_header(data).map_err(|message| EventError::BadSegment {
        path: seg.path.clone(),
        message,
    })?;
    if first != seg.first_seq {
        return Err(EventError::BadSegment {
            path: seg.path.clone(),
            message: format!("header says first seq {first}, name says {}", seg.first_seq),
        });
    }
    Ok(())
}

/// How a walk over a segment's records ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum WalkEnd {
    /// Clean end of data.
    End,
    /// A record that is not whole or not valid at `offset`.
    Damaged { offset: usize, what: String },
}

/// The state after a walk.
#[derive(Debug)]
pub(crate) struct Walk {
    /// Offset after the last valid record.
    pub valid_len: usize,
    /// Seq of the next record.
    pub next_seq: u64,
    /// Hash of the last valid record.
    pub last_hash: EventHash,
    /// Records walked.
    pub records: u64,
    /// How it ended.
    pub end: WalkEnd,
}

/// Walks the records of a segment's bytes from `SEGMENT_HEADER_LEN`,
/// checking frames, sequence numbers and (after the first record, or from
/// the start when `prev` is given) the hash chain. Calls `each` with the
/// offset, hash and body of each valid record.
pub(crate) fn walk_records(
    data: &[u8],
    first_seq: u64,
    prev: Option<EventHash>,
    mut each: impl FnMut(usize, EventHash, &[u8]),
) -> Walk {
    let mut pos = SEGMENT_HEADER_LEN.min(data.len());
    let mut next_seq = first_seq;
    let mut last_hash = prev;
    let mut records = 0;
    let end = loop {
        match read_frame(&data[pos..]) {
            Frame::End => break WalkEnd::End,
            Frame::Truncated => {
                break WalkEnd::Damaged {
                    offset: pos,
                    what: "record cut short".into(),
                }
            }
            Frame::BadLength(l) => {
                break WalkEnd::Damaged {
                    offset: pos,
                    what: format!("impossible record length {l}"),
                }
            }
            Frame::BadHash { .. } => {
                break WalkEnd::Damaged {
                    offset: pos,
                    what: "record does not match its checksum".into(),
                }
            }
            Frame::Record { hash, body, len } => {
                let env = match decode_persisted(body) {
                    Ok(env) => env,
                    Err(e) => {
                        break WalkEnd::Damaged {
                            offset: pos,
                            what: e.to_string(),
                        }
                    }
                };
                if env.seq != next_seq {
                    break WalkEnd::Damaged {
                        offset: pos,
                        what: format!("expected seq {next_seq}, found seq {}", env.seq),
                    };
                }
                if let Some(prev) = last_hash {
                    if env.prev_hash != prev.0 {
                        break WalkEnd::Damaged {
                            offset: pos,
                            what: format!(
                                "seq {} does not chain to the record before it (prev hash {} expected {})",
                                env.seq,
                                EventHash(env.prev_hash),
                                prev
                            ),
                        };
                    }
                }
                each(pos, hash, body);
                last_hash = Some(hash);
                next_seq += 1;
                records += 1;
                pos += len;
            }
        }
    };
    Walk {
        valid_len: pos,
        next_seq,
        last_hash: last_hash.unwrap_or_default(),
        records,
        end,
    }
}

/// The first whole record (length plausible, checksum matching its body) at
/// or after `from`, scanning byte by byte: its offset and, if its body
/// decodes, its seq. A torn tail has none; damage in the middle of the data
/// does (a matching BLAKE3 checksum is never produced by chance).
pub(crate) fn find_whole_record(data: &[u8], from: usize) -> Option<(usize, Option<u64>)> {
    let mut pos = from;
    while pos < data.len() {
        // Cheap filter before hashing: a version-1 envelope body is a
        // msgpack array of six fields (0x96).
        let rest = &data[pos..];
        if rest.len() > crate::format::RECORD_HEADER_LEN
            && rest[crate::format::RECORD_HEADER_LEN] == 0x96
        {
            if let Frame::Record { body, .. } = read_frame(rest) {
                return Some((pos, decode_persisted(body).ok().map(|e| e.seq)));
            }
        }
        pos += 1;
    }
    None
}
