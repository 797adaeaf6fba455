//! `vouch events verify`: walks the whole log and says where the chain
//! breaks.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{EventError, Result};
use crate::format::{EventHash, GENESIS_HASH};
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
    let dir = dir.as_ref();
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
        let walk = walk_records(&data, seg.first_seq, Some(report.head), |_, hash, _| {
            if seq <= committed {
                head = hash;
                counted += 1;
            }
            seq += 1;
        });
        report.events += counted;
        report.head = head;
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
