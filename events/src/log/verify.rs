//! `vouch events verify`: walks the whole log and says where the chain
//! breaks.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{EventError, Result};
use crate::format::{ChainCheckpoint, EventHash, CHECKPOINTS_FILE, GENESIS_HASH};
use crate::log::checkpoint::{read_checkpoints, ChainKey};
use crate::log::head::read_head;
use crate::log::segment::{check_header, list_segments, walk_records, WalkEnd};

/// Where and how the chain breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainProblem {
    /// The segment file.
    pub segment: PathBuf,
    /// Byte offset of the first record that does not fit (0: the segment
    /// itself).
    pub offset: u64,
    /// The seq expected there: events from it on are not trusted.
    pub seq: u64,
    /// What is wrong, for humans.
    pub message: String,
}

impl fmt::Display for ChainProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "at seq {} ({} byte {}): {}",
            self.seq,
            self.segment.display(),
            self.offset,
            self.message
        )
    }
}

/// The result of [`verify_chain`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainReport {
    /// Events that verified (seq 1 to `events`).
    pub events: u64,
    /// Hash of the last verified event.
    pub head: EventHash,
    /// Segment files walked.
    pub segments: usize,
    /// The first problem, if any (`None`: the whole chain verifies).
    pub problem: Option<ChainProblem>,
}

impl ChainReport {
    /// True when the whole log verifies.
    pub fn ok(&self) -> bool {
        self.problem.is_none()
    }
}

/// Walks every segment of the log in `dir`: checks each record's checksum,
/// that seqs run 1, 2, 3 ... without gap across segments, and that each
/// record carries the hash of the one before. A changed event breaks its
/// checksum (or, if the checksum was recomputed, the next record's link); a
/// removed one leaves a gap; reordered ones break the seq order. The report
/// names the first place where that happens.
pub fn verify_chain(dir: impl AsRef<Path>) -> Result<ChainReport> {
    let dir = dir.as_ref();
    let segments = list_segments(dir)?;
    let mut report = ChainReport {
        events: 0,
        head: GENESIS_HASH,
        segments: segments.len(),
        problem: None,
    };
    let mut next_seq = 1;
    for seg in &segments {
        if seg.first_seq != next_seq {
            report.problem = Some(ChainProblem {
                segment: seg.path.clone(),
                offset: 0,
                seq: next_seq,
                message: format!(
                    "segment starts at seq {}, expected seq {next_seq} (events missing)",
                    seg.first_seq
                ),
            });
            return Ok(report);
        }
        let data = std::fs::read(&seg.path)
            .map_err(|e| EventError::io(format!("reading {}", seg.path.display()), e))?;
        if let Err(e) = check_header(seg, &data) {
            report.problem = Some(ChainProblem {
                segment: seg.path.clone(),
                offset: 0,
                seq: next_seq,
                message: e.to_string(),
            });
            return Ok(report);
        }
        let walk = walk_records(&data, seg.first_seq, Some(report.head), |_, _, _| {});
        report.events += walk.records;
        report.head = walk.last_hash;
        next_seq = walk.next_seq;
        if let WalkEnd::Damaged { offset, what } = walk.end {
            report.problem = Some(ChainProblem {
                segment: seg.path.clone(),
                offset: offset as u64,
                seq: next_seq,
                message: what,
            });
            return Ok(report);
        }
    }
    Ok(report)
}

/// The result of a [`scrub`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScrubReport {
    /// Segment files read.
    pub segments: usize,
    /// Events that verified (seq 1 to `events`; at most the committed
    /// seq the scrub was bounded by).
    pub events: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Hash of the last verified event.
    pub head: EventHash,
    /// The first problem, if any: damage at or below the committed seq
    /// (an acknowledged event is damaged or missing).
    pub problem: Option<ChainProblem>,
}

impl ScrubReport {
    /// True when every event up to the bound verified.
    pub fn ok(&self) -> bool {
        self.problem.is_none()
    }
}

/// Re-reads the log in `dir` up to `committed` (the writer's committed
/// seq; `u64::MAX` for a log without a writer): every record's checksum,
/// seq and link to the record before, and that segments run from seq 1
/// without gap. Bytes beyond the committed seq (an append in flight, a
/// segment being created) are not judged. Takes no lock: the writer goes on
/// appending while it runs; its cost is one sequential read of the log.
pub fn scrub(dir: impl AsRef<Path>, committed: u64) -> Result<ScrubReport> {
    scrub_with(dir.as_ref(), committed, &mut |_, _| None)
}

/// [`scrub`], calling `check` with the seq and hash of each event up to
/// `committed`; the first message it returns is the report's problem.
fn scrub_with(
    dir: &Path,
    committed: u64,
    check: &mut dyn FnMut(u64, EventHash) -> Option<String>,
) -> Result<ScrubReport> {
    let segments = list_segments(dir)?;
    let mut report = ScrubReport {
        segments: 0,
        events: 0,
        bytes: 0,
        head: GENESIS_HASH,
        problem: None,
    };
    let mut next_seq = 1u64;
    for seg in &segments {
        if next_seq > committed {
            break;
        }
        if seg.first_seq != next_seq {
            report.problem = Some(ChainProblem {
                segment: seg.path.clone(),
                offset: 0,
                seq: next_seq,
                message: format!(
                    "segment starts at seq {}, expected seq {next_seq} (events missing)",
                    seg.first_seq
                ),
            });
            return Ok(report);
        }
        let data = std::fs::read(&seg.path)
            .map_err(|e| EventError::io(format!("reading {}", seg.path.display()), e))?;
        report.segments += 1;
        report.bytes += data.len() as u64;
        if let Err(e) = check_header(seg, &data) {
            report.problem = Some(ChainProblem {
                segment: seg.path.clone(),
                offset: 0,
                seq: next_seq,
                message: e.to_string(),
            });
            return Ok(report);
        }
        let mut head = report.head;
        let mut seq = seg.first_seq;
        let mut counted = 0;
        let mut first_bad: Option<(usize, u64, String)> = None;
        let walk = walk_records(&data, seg.first_seq, Some(report.head), |pos, hash, _| {
            if seq <= committed && first_bad.is_none() {
                if let Some(message) = check(seq, hash) {
                    first_bad = Some((pos, seq, message));
                } else {
                    head = hash;
                    counted += 1;
                }
            }
            seq += 1;
        });
        report.events += counted;
        report.head = head;
        if let Some((offset, seq, message)) = first_bad {
            report.problem = Some(ChainProblem {
                segment: seg.path.clone(),
                offset: offset as u64,
                seq,
                message,
            });
            return Ok(report);
        }
        next_seq = walk.next_seq.min(committed.saturating_add(1));
        if let WalkEnd::Damaged { offset, what } = walk.end {
            if walk.next_seq <= committed {
                report.problem = Some(ChainProblem {
                    segment: seg.path.clone(),
                    offset: offset as u64,
                    seq: walk.next_seq,
                    message: what,
                });
                return Ok(report);
            }
        }
    }
    if report.events < committed && committed != u64::MAX {
        report.problem = Some(ChainProblem {
            segment: dir.to_path_buf(),
            offset: 0,
            seq: report.events + 1,
            message: format!(
                "the log ends at seq {}, but seq {committed} was committed",
                report.events
            ),
        });
    }
    Ok(report)
}

/// The result of [`verify_log`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogVerifyReport {
    /// Segment files read.
    pub segments: usize,
    /// Events that verified (seq 1 to `events`).
    pub events: u64,
    /// Bytes of segments read.
    pub bytes: u64,
    /// Hash of the last verified event.
    pub head: EventHash,
    /// The acknowledged head in `HEAD` (seq, hash) the log was read up to;
    /// `None`: a log without `HEAD` (older build), read to its end.
    pub acknowledged: Option<(u64, EventHash)>,
    /// Whether a chain key was given (checkpoints checked).
    pub keyed: bool,
    /// Whole checkpoint records in `CHECKPOINTS`.
    pub checkpoints: usize,
    /// Checkpoints whose MAC verified and which the chain passes through.
    pub checkpoints_verified: usize,
    /// The newest verified checkpoint.
    pub latest_checkpoint: Option<ChainCheckpoint>,
    /// The first problem (`None`: everything verifies).
    pub problem: Option<ChainProblem>,
}

impl LogVerifyReport {
    /// True when everything checked verifies.
    pub fn ok(&self) -> bool {
        self.problem.is_none()
    }
}

/// Verifies the whole log in `dir` offline, read-only and without a lock
/// (a running writer goes on appending): every segment (header, each
/// record's checksum, seq continuity, the `prev_hash` chain) up to the
/// acknowledged head in `HEAD`, and that the event at that seq is the
/// acknowledged one. With `key`, every checkpoint in `CHECKPOINTS` must
/// carry a valid MAC of that key and the chain must pass through each
/// checkpointed `(seq, hash)`: a history rewritten at or before the last
/// checkpoint is detected. Without a key the chain is not authenticated: a
/// consistent rewrite (every later hash recomputed) verifies.
///
/// Order: checkpoints are read before `HEAD`, and `HEAD` before the
/// segments (the writer writes them in the opposite order), so every
/// checkpoint read is at or below the head read, and every event up to the
/// head is in the segments.
pub fn verify_log(dir: impl AsRef<Path>, key: Option<&ChainKey>) -> Result<LogVerifyReport> {
    let dir = dir.as_ref();
    let cp_path = dir.join(CHECKPOINTS_FILE);
    let records = read_checkpoints(dir)?;
    let acknowledged = read_head(dir)?.map(|s| (s.head.seq, s.head.hash));
    let bound = acknowledged.map_or(u64::MAX, |(seq, _)| seq);
    let mut report = LogVerifyReport {
        segments: 0,
        events: 0,
        bytes: 0,
        head: GENESIS_HASH,
        acknowledged,
        keyed: key.is_some(),
        checkpoints: records.len(),
        checkpoints_verified: 0,
        latest_checkpoint: None,
        problem: None,
    };
    let cp_problem = |offset: u64, seq: u64, message: String| ChainProblem {
        segment: cp_path.clone(),
        offset,
        seq,
        message,
    };
    // (seq, hash, offset in CHECKPOINTS), ascending seq.
    let mut signed: Vec<(u64, EventHash, u64)> = Vec::new();
    if let Some(key) = key {
        for (offset, r) in &records {
            let cp = match r {
                Ok(cp) => cp,
                Err(message) => {
                    report.problem = Some(cp_problem(*offset, 0, message.clone()));
                    return Ok(report);
                }
            };
            if cp.key_id != key.id() {
                report.problem = Some(cp_problem(
                    *offset,
                    cp.seq,
                    format!(
                        "checkpoint signed with another chain key (id {}, this key's id {})",
                        hex::encode(cp.key_id),
                        hex::encode(key.id())
                    ),
                ));
                return Ok(report);
            }
            if !key.verifies(cp) {
                report.problem = Some(cp_problem(
                    *offset,
                    cp.seq,
                    "checkpoint MAC does not verify: the checkpoint was forged or changed".into(),
                ));
                return Ok(report);
            }
            if signed.last().is_some_and(|(s, _, _)| *s >= cp.seq) {
                report.problem = Some(cp_problem(
                    *offset,
                    cp.seq,
                    "checkpoints out of order".into(),
                ));
                return Ok(report);
            }
            if cp.seq > bound {
                report.problem = Some(cp_problem(
                    *offset,
                    cp.seq,
                    format!(
                        "a checkpoint signs seq {}, beyond the acknowledged head (seq {bound}): \
                         acknowledged events were removed or HEAD was rolled back",
                        cp.seq
                    ),
                ));
                return Ok(report);
            }
            signed.push((cp.seq, cp.hash, *offset));
            report.latest_checkpoint = Some(*cp);
        }
        if signed.is_empty() {
            report.problem = Some(cp_problem(
                0,
                0,
                "no checkpoint signed with this key: the service never ran with it, or the \
                 checkpoints were removed; the chain is not authenticated"
                    .into(),
            ));
            return Ok(report);
        }
    }
    let mut next = 0usize;
    let mut passed = 0usize;
    let scrub = scrub_with(dir, bound, &mut |seq, hash| {
        let (cp_seq, cp_hash, offset) = *signed.get(next)?;
        if cp_seq != seq {
            return None;
        }
        next += 1;
        if cp_hash != hash {
            return Some(format!(
                "seq {seq} is not the event signed by the checkpoint at byte {offset} of \
                 {CHECKPOINTS_FILE} (hash {hash}, signed {cp_hash}): the history up to seq {seq} \
                 was rewritten"
            ));
        }
        passed += 1;
        None
    })?;
    report.segments = scrub.segments;
    report.events = scrub.events;
    report.bytes = scrub.bytes;
    report.head = scrub.head;
    report.checkpoints_verified = passed;
    if scrub.problem.is_some() {
        report.problem = scrub.problem;
        return Ok(report);
    }
    if let Some((seq, hash)) = acknowledged {
        if seq > 0 && scrub.head != hash {
            report.problem = Some(ChainProblem {
                segment: dir.join("HEAD"),
                offset: 0,
                seq,
                message: format!(
                    "the event at the acknowledged head (seq {seq}) has hash {}, HEAD says {hash}: \
                     the log was replaced or rewritten",
                    scrub.head
                ),
            });
            return Ok(report);
        }
    }
    if let Some((seq, _, offset)) = signed.get(next) {
        report.problem = Some(cp_problem(
            *offset,
            *seq,
            format!("a checkpoint signs seq {seq}, beyond the end of the log"),
        ));
    }
    Ok(report)
}
