//! Reading the log: replay from any seq, and follow the tail.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::codec::{decode_envelope, decode_persisted};
use crate::error::{EventError, Result};
use crate::format::{EventHash, SEGMENT_HEADER_LEN};
use crate::log::frame::{read_frame, write_frame, Frame};
use crate::log::notify::Notifier;
use crate::log::segment::{check_header, find_whole_record, list_segments, SegmentFile};
use crate::Envelope;

/// Reads the log of a directory. Safe to use while a writer appends: it
/// ends cleanly at the end of the data on a record boundary, or at a record
/// cut short with nothing whole after it (a write in flight, or a torn tail
/// the writer cuts when it next opens), except that a [`Subscription`] treats
/// even that as damage for a seq the writer acknowledged. Any other damage
/// (a bad checksum or length, or a whole record after the damage) is an
/// [`EventError::Corrupt`], never a silently short replay.
#[derive(Clone, Debug)]
pub struct LogReader {
    dir: PathBuf,
    /// The writer's committed seq, when the writer is in this process: a
    /// replay never reads beyond it (nothing written but not yet synced is
    /// ever returned).
    bound: Option<Arc<Notifier>>,
}

impl LogReader {
    /// A reader of the log in `dir` (no writer needed). Without a writer
    /// in the process it cannot know what was acknowledged: it reads every
    /// whole record there is. Inside the writer's process use
    /// [`EventLog::reader`](crate::EventLog::reader) or
    /// [`SharedLog::reader`](crate::SharedLog::reader), which are bounded.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        LogReader {
            dir: dir.into(),
            bound: None,
        }
    }

    pub(crate) fn bounded(dir: PathBuf, notifier: Arc<Notifier>) -> Self {
        LogReader {
            dir,
            bound: Some(notifier),
        }
    }

    /// The seq a replay started now would stop at (`None`: unbounded, no
    /// writer in this process).
    pub fn committed_seq(&self) -> Option<u64> {
        self.bound.as_ref().map(|n| n.committed())
    }

    /// Every event with seq >= `from_seq`, in order, up to the committed
    /// seq of this moment when the reader is bounded. Each record's
    /// checksum and sequence number are checked; an error is yielded once
    /// and ends the iteration.
    pub fn replay_from(&self, from_seq: u64) -> Result<Replay> {
        Ok(Replay {
            cursor: Cursor::new(self.dir.clone(), from_seq.max(1)),
            limit: self.committed_seq(),
            failed: false,
        })
    }

    /// The exact records (frames: length, checksum, body) of seqs
    /// `from_seq..=to_seq`, concatenated, with the seq of the last one
    /// included: fewer when the log (or, when bounded, the committed seq)
    /// ends first, or when more than `max_bytes` would be returned (at
    /// least one record is). Every record is checked as a replay checks it.
    /// These are the bytes [`LogImporter::push`](crate::LogImporter::push)
    /// takes: a copy of the log elsewhere (the repository mirror) keeps the
    /// records, their hashes and the chain exactly.
    pub fn frames(&self, from_seq: u64, to_seq: u64, max_bytes: usize) -> Result<(Vec<u8>, u64)> {
        let mut replay = self.replay_from(from_seq)?;
        replay.cursor.capture = Some(Vec::new());
        let mut last = from_seq.max(1) - 1;
        while last < to_seq {
            match replay.next() {
                Some(env) => last = env?.seq,
                None => break,
            }
            if replay.cursor.capture.as_ref().map_or(0, Vec::len) >= max_bytes {
                break;
            }
        }
        Ok((replay.cursor.capture.take().unwrap_or_default(), last))
    }

    /// Calls `f` with every envelope from `from_seq` on; returns how many.
    pub fn for_each(&self, from_seq: u64, mut f: impl FnMut(Envelope)) -> Result<u64> {
        let mut n = 0;
        for env in self.replay_from(from_seq)? {
            f(env?);
            n += 1;
        }
        Ok(n)
    }
}

/// An iterator of envelopes, in seq order.
#[derive(Debug)]
pub struct Replay {
    cursor: Cursor,
    limit: Option<u64>,
    failed: bool,
}

impl Iterator for Replay {
    type Item = Result<Envelope>;

    fn next(&mut self) -> Option<Self::Item> {
        // An error ends the iteration: the next call would meet it again.
        if self.failed {
            return None;
        }
        // Bounded: stop at the committed seq; below it every seq was
        // acknowledged, so even a record cut short is damage.
        if self.limit.is_some_and(|l| self.cursor.next_seq > l) {
            return None;
        }
        let mut item = self.cursor.next(self.limit.is_some()).transpose();
        if item.is_none() {
            if let Some(l) = self.limit {
                // The log ends before the committed seq: acknowledged
                // events are gone (files removed, a directory replaced).
                // Never a silently short replay.
                item = Some(Err(EventError::Corrupt {
                    path: self
                        .cursor
                        .segment
                        .as_ref()
                        .map_or_else(|| self.cursor.dir.clone(), |s| s.path.clone()),
                    offset: self.cursor.base + self.cursor.pos as u64,
                    seq: self.cursor.next_seq,
                    message: format!(
                        "the log ends before seq {}, but every event up to seq {l} was \
                         acknowledged: its files were removed or replaced",
                        self.cursor.next_seq
                    ),
                }));
            }
        }
        self.failed = matches!(item, Some(Err(_)));
        item
    }
}

/// A position in the log: which segment, how far, which seq comes next.
#[derive(Debug)]
struct Cursor {
    dir: PathBuf,
    next_seq: u64,
    segment: Option<SegmentFile>,
    /// Bytes of the segment from `base` on.
    data: Vec<u8>,
    base: u64,
    pos: usize,
    prev_hash: Option<EventHash>,
    /// Whether records before `next_seq` may still come (set when a
    /// segment is located): they are skipped without decoding their event.
    skipping: bool,
    /// While skipping: the seq of the record at `pos`.
    at_seq: u64,
    /// When set, every record returned is also appended here as its exact
    /// frame (header and body), for [`LogReader::frames`].
    capture: Option<Vec<u8>>,
}

impl Cursor {
    fn new(dir: PathBuf, next_seq: u64) -> Self {
        Cursor {
            dir,
            next_seq,
            segment: None,
            data: Vec::new(),
            base: 0,
            pos: 0,
            prev_hash: None,
            skipping: false,
            at_seq: 0,
            capture: None,
        }
    }

    /// Finds the segment holding `next_seq`, if any. Missing leading
    /// segments (none starts at or before `next_seq` but later ones exist,
    /// or the first one starts after seq 1) are an error, never an empty
    /// replay. The last segment with a header not yet whole is one being
    /// created by the writer (a rollover in progress): the end of the log
    /// for now, not damage.
    fn locate(&mut self) -> Result<bool> {
        let segments = list_segments(&self.dir)?;
        if let Some(first) = segments.first() {
            if first.first_seq > 1 {
                return Err(EventError::Corrupt {
                    path: first.path.clone(),
                    offset: 0,
                    seq: self.next_seq.min(first.first_seq - 1),
                    message: format!(
                        "the first segment starts at seq {}: the segments holding events 1 to {} \
                         are missing",
                        first.first_seq,
                        first.first_seq - 1
                    ),
                });
            }
        }
        let Some(seg) = segments
            .iter()
            .rev()
            .find(|s| s.first_seq <= self.next_seq)
            .cloned()
        else {
            return Ok(false);
        };
        let data = std::fs::read(&seg.path)
            .map_err(|e| EventError::io(format!("reading {}", seg.path.display()), e))?;
        let is_last = segments.last() == Some(&seg);
        if data.len() < SEGMENT_HEADER_LEN && is_last && seg.first_seq == self.next_seq {
            return Ok(false);
        }
        check_header(&seg, &data)?;
        self.at_seq = seg.first_seq;
        self.segment = Some(seg);
        self.data = data;
        self.base = 0;
        self.pos = SEGMENT_HEADER_LEN;
        self.skipping = true;
        Ok(true)
    }

    /// Reads what was appended to the current segment since the last read;
    /// returns whether anything new arrived.
    fn refill(&mut self) -> Result<bool> {
        let Some(seg) = &self.segment else {
            return Ok(false);
        };
        let offset = self.base + self.pos as u64;
        let mut f = File::open(&seg.path)
            .map_err(|e| EventError::io(format!("reading {}", seg.path.display()), e))?;
        let mut data = Vec::new();
        f.seek(SeekFrom::Start(offset))
            .and_then(|_| f.read_to_end(&mut data))
            .map_err(|e| EventError::io(format!("reading {}", seg.path.display()), e))?;
        let grew = data.len() > self.data.len() - self.pos;
        self.data = data;
        self.base = offset;
        self.pos = 0;
        Ok(grew)
    }

    /// Moves to the segment that starts at `next_seq`, if it exists.
    fn advance_segment(&mut self) -> Result<bool> {
        // Already in the segment that starts at `next_seq` (it holds only
        // its header): nothing more yet.
        if self
            .segment
            .as_ref()
            .is_some_and(|s| s.first_seq == self.next_seq)
        {
            return Ok(false);
        }
        let segments = list_segments(&self.dir)?;
        match segments.into_iter().find(|s| s.first_seq == self.next_seq) {
            Some(seg) => {
                self.segment = None;
                self.locate()?;
                Ok(self.segment.as_ref().map(|s| s.first_seq) == Some(seg.first_seq))
            }
            None => {
                if let Some(later) = list_segments(&self.dir)?
                    .into_iter()
                    .find(|s| s.first_seq > self.next_seq)
                {
                    return Err(EventError::Corrupt {
                        path: later.path,
                        offset: 0,
                        seq: self.next_seq,
                        message: format!(
                            "events {} to {} are missing or damaged; run `vouch events verify`",
                            self.next_seq,
                            later.first_seq - 1
                        ),
                    });
                }
                Ok(false)
            }
        }
    }

    /// Damage at the current position: the seq is the damaged record's
    /// (while passing over records before the wanted one, an earlier seq
    /// than the one asked for).
    fn damage_at(&self, message: &str) -> EventError {
        EventError::Corrupt {
            path: self
                .segment
                .as_ref()
                .map(|s| s.path.clone())
                .unwrap_or_default(),
            offset: self.base + self.pos as u64,
            seq: if self.skipping {
                self.at_seq.min(self.next_seq)
            } else {
                self.next_seq
            },
            message: message.to_owned(),
        }
    }

    /// The next envelope, or `None` at the current end of the log. A
    /// damaged record is an error, never an end; `durable` says the writer
    /// has acknowledged `next_seq`, so even a record cut short is damage.
    fn next(&mut self, durable: bool) -> Result<Option<Envelope>> {
        if self.segment.is_none() && !self.locate()? {
            return Ok(None);
        }
        let mut refilled = false;
        loop {
            match read_frame(&self.data[self.pos..]) {
                Frame::Record { hash, body, len } => {
                    if self.skipping {
                        // Before the wanted seq (a replay that starts in the
                        // middle of a segment): only the envelope's header
                        // is read, not its event. Same checks, same errors:
                        // the event itself never fails to decode (it
                        // becomes `Event::Unknown`).
                        let seq = decode_persisted(body)?.seq;
                        if seq < self.next_seq {
                            self.pos += len;
                            self.prev_hash = Some(hash);
                            self.at_seq = seq + 1;
                            continue;
                        }
                        self.skipping = false;
                    }
                    let env = decode_envelope(body, hash)?;
                    let at = self.base + self.pos as u64;
                    self.pos += len;
                    if env.seq < self.next_seq {
                        self.prev_hash = Some(hash);
                        continue;
                    }
                    if env.seq != self.next_seq
                        || self.prev_hash.is_some_and(|p| p != env.prev_hash)
                    {
                        return Err(EventError::Corrupt {
                            path: self
                                .segment
                                .as_ref()
                                .map(|s| s.path.clone())
                                .unwrap_or_default(),
                            offset: at,
                            seq: self.next_seq,
                            message: format!(
                                "found seq {} where seq {} was expected, or a broken chain",
                                env.seq, self.next_seq
                            ),
                        });
                    }
                    if let Some(out) = self.capture.as_mut() {
                        write_frame(out, body);
                    }
                    self.next_seq += 1;
                    self.prev_hash = Some(hash);
                    return Ok(Some(env));
                }
                // A damaged record before the wanted seq, whose framing
                // the next record confirms (it is whole, matches its
                // checksum and carries the seq after): passed over, so
                // that old damage (which the scrub and `vouch events
                // verify` report) does not stop readers of later events,
                // such as the read model catching up. Reading the damaged
                // record itself is still an error.
                Frame::BadHash { len } if self.skipping && self.at_seq < self.next_seq => {
                    let confirmed = match read_frame(&self.data[self.pos + len..]) {
                        Frame::Record { body, .. } => {
                            decode_persisted(body).is_ok_and(|p| p.seq == self.at_seq + 1)
                        }
                        _ => false,
                    };
                    if !confirmed {
                        return Err(self.damage_at("record does not match its checksum"));
                    }
                    self.pos += len;
                    self.at_seq += 1;
                    // The chain across the damaged record cannot be checked.
                    self.prev_hash = None;
                }
                // The end of what is there now: new data or a new segment.
                other => {
                    let damage = match other {
                        Frame::End => None,
                        Frame::Truncated => Some(("record cut short".to_string(), true)),
                        Frame::BadLength(l) => {
                            Some((format!("impossible record length {l}"), false))
                        }
                        Frame::BadHash { .. } => {
                            Some(("record does not match its checksum".to_string(), false))
                        }
                        Frame::Record { .. } => unreachable!("handled above"),
                    };
                    if !refilled && self.refill()? {
                        refilled = true;
                        continue;
                    }
                    if self.advance_segment()? {
                        refilled = false;
                        continue;
                    }
                    let Some((what, short)) = damage else {
                        // EOF exactly at a frame boundary: a clean end.
                        return Ok(None);
                    };
                    // A record cut short with nothing whole after it is a
                    // write still in flight (or a torn tail the writer will
                    // cut when it opens), unless the writer has told us this
                    // seq is durable. Anything else is damage.
                    let after = find_whole_record(&self.data, self.pos);
                    if short && after.is_none() && !durable {
                        return Ok(None);
                    }
                    let following = match after {
                        Some((at, _)) => {
                            format!("; a whole record follows at byte {}", self.base + at as u64)
                        }
                        None if short => "; the writer had acknowledged it".to_string(),
                        None => String::new(),
                    };
                    return Err(self.damage_at(&format!("{what}{following}")));
                }
            }
        }
    }
}

/// Follows the log from a seq: every event exactly once, in order, across
/// appends made after it was created. Reconnecting is creating a new one at
/// the seq after the last one handled.
#[derive(Debug)]
pub struct Subscription {
    cursor: Cursor,
    notifier: Arc<Notifier>,
}

impl Subscription {
    pub(crate) fn new(dir: PathBuf, from_seq: u64, notifier: Arc<Notifier>) -> Self {
        Subscription {
            cursor: Cursor::new(dir, from_seq),
            notifier,
        }
    }

    /// The seq of the next event it will deliver.
    pub fn next_seq(&self) -> u64 {
        self.cursor.next_seq
    }

    /// The next durable event, waiting up to `timeout` for one to be
    /// appended; `None` if none arrived in time.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<Envelope>> {
        let want = self.cursor.next_seq;
        if self.notifier.wait_for(want, timeout) < want {
            return Ok(None);
        }
        self.cursor.next(true)
    }

    /// Every durable event not yet delivered, without waiting.
    pub fn drain(&mut self) -> Result<Vec<Envelope>> {
        let committed = self.notifier.committed();
        let mut out = Vec::new();
        while self.cursor.next_seq <= committed {
            match self.cursor.next(true)? {
                Some(env) => out.push(env),
                None => break,
            }
        }
        Ok(out)
    }
}
