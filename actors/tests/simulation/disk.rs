//! The log on disk: reading it back, and power cuts.
//!
//! The log syncs every batch before it acknowledges it, so at a settled
//! moment (no append in flight) the disk holds exactly the acknowledged
//! events. A power cut is modelled on top of that: a batch that was being
//! written when the power went (never acknowledged) reached the disk not at
//! all, in part, whole, or with a byte flipped; or, to model bit rot of
//! the last *acknowledged* record (finding M1), one byte of it flips.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use vouch_events::{encode_body, Envelope, EventHash, LogReader, ServiceStarted};

use super::rng::Rng;

/// What a power cut leaves of the unacknowledged tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Nothing of it reached the disk.
    Drop,
    /// A prefix of it did (a torn write).
    Truncate,
    /// All of it, with one byte flipped.
    Flip,
    /// All of it, intact (written, never acknowledged: it may appear).
    Whole,
    /// One byte of the last acknowledged record flipped (bit rot, M1).
    Rot,
}

impl Cut {
    /// Draws one (rot one time in six).
    pub fn draw(rng: &mut Rng) -> Cut {
        [
            Cut::Drop,
            Cut::Truncate,
            Cut::Flip,
            Cut::Whole,
            Cut::Truncate,
            Cut::Rot,
        ][rng.below(6)]
    }
}

/// Every envelope of the log, or the error that stopped the replay.
pub fn read_log(dir: &Path) -> Result<Vec<Envelope>, String> {
    read_log_from(dir, 1)
}

/// The envelopes of the log from `from` on.
pub fn read_log_from(dir: &Path, from: u64) -> Result<Vec<Envelope>, String> {
    let reader = LogReader::new(dir);
    let mut out = Vec::new();
    for env in reader.replay_from(from).map_err(|e| e.to_string())? {
        out.push(env.map_err(|e| e.to_string())?);
    }
    Ok(out)
}

fn last_segment(dir: &Path) -> Option<PathBuf> {
    let mut segs: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segs.sort();
    segs.pop()
}

/// Offsets of the records of a segment file (after its 24-byte header).
fn records(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 24usize;
    while at + 36 <= bytes.len() {
        let mut len = [0u8; 4];
        len.copy_from_slice(&bytes[at..at + 4]);
        let len = u32::from_le_bytes(len) as usize;
        let end = at + 36 + len;
        if end > bytes.len() {
            break;
        }
        out.push((at, end));
        at = end;
    }
    out
}

/// Applies a power cut to the log in `dir` (no writer may have it open).
/// Returns what was done, for the trace.
pub fn power_cut(dir: &Path, cut: Cut, rng: &mut Rng, now_ns: i64) -> Result<String, String> {
    let seg = last_segment(dir).ok_or("no segment")?;
    let bytes = fs::read(&seg).map_err(|e| e.to_string())?;
    if cut == Cut::Rot {
        let Some(&(start, end)) = records(&bytes).last() else {
            return Ok("rot: the last segment has no record; nothing flipped".into());
        };
        // A byte of the body (after length and checksum).
        let body = start + 36;
        let at = body + rng.below(end - body);
        let mut bytes = bytes;
        bytes[at] ^= 1 << rng.below(8);
        fs::write(&seg, &bytes).map_err(|e| e.to_string())?;
        return Ok(format!(
            "rot: flipped a bit at offset {at} of the last acknowledged record"
        ));
    }
    if cut == Cut::Drop {
        return Ok("drop: the unacknowledged batch never reached the disk".into());
    }
    let envs = read_log(dir)?;
    let (mut seq, mut prev) = envs
        .last()
        .map_or((1, EventHash([0; 32])), |e| (e.seq + 1, e.hash));
    let mut tail = Vec::new();
    for i in 0..1 + rng.below(3) {
        let event = ServiceStarted {
            version: format!("unacknowledged batch, event {i}"),
        }
        .into();
        let body = encode_body(seq, now_ns, &prev, &event).map_err(|e| e.to_string())?;
        let hash = blake3::hash(&body);
        tail.extend_from_slice(&(body.len() as u32).to_le_bytes());
        tail.extend_from_slice(hash.as_bytes());
        tail.extend_from_slice(&body);
        prev = EventHash(*hash.as_bytes());
        seq += 1;
    }
    let what = match cut {
        Cut::Truncate => {
            let keep = 1 + rng.below(tail.len() - 1);
            tail.truncate(keep);
            format!("truncate: {keep} bytes of an unacknowledged batch reached the disk")
        }
        Cut::Flip => {
            let at = rng.below(tail.len());
            tail[at] ^= 1 << rng.below(8);
            format!("flip: an unacknowledged batch with a bit flipped at its byte {at}")
        }
        _ => format!(
            "whole: an unacknowledged batch of {} bytes reached the disk",
            tail.len()
        ),
    };
    let mut f = OpenOptions::new()
        .append(true)
        .open(&seg)
        .map_err(|e| e.to_string())?;
    f.write_all(&tail).map_err(|e| e.to_string())?;
    Ok(what)
}
