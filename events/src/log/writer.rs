//! The single writer of the log: open (with torn-tail repair), append with
//! group commit and a real `fdatasync`, roll segments.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::clock::Clock;
use crate::codec::encode_body;
use crate::error::{EventError, Result};
use crate::event::Event;
use crate::format::{EventHash, GENESIS_HASH, MAX_BODY_LEN};
use crate::log::frame::write_frame;
use crate::log::notify::Notifier;
use crate::log::reader::{LogReader, Subscription};
use crate::log::segment::{
    check_header, create_segment, find_whole_record, list_segments, sync_dir, walk_records,
    SegmentFile, WalkEnd,
};

/// Options of [`EventLog::open`].
#[derive(Clone, Debug)]
pub struct LogOptions {
    /// A new segment is started once the current one reaches this size.
    pub segment_max_bytes: u64,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_max_bytes: 64 << 20,
        }
    }
}

/// What an append made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendReceipt {
    /// Seq of the first event of the batch.
    pub first_seq: u64,
    /// Seq of the last event of the batch.
    pub last_seq: u64,
    /// Hash of the last event (the head of the chain).
    pub last_hash: EventHash,
}

/// The append-only event log, opened for writing. One per directory (an
/// advisory lock keeps a second writer out, across processes too).
///
/// Durability level: `file` (of `none` / `filesystem` / `file`), always:
/// [`EventLog::append`] writes a whole batch with one `write`
/// and returns only after one `fdatasync` of the segment (group commit: a
/// batch of 1000 events costs one sync). Creating a segment syncs its header
/// and then the directory. The log never relies on sled or on the page
/// cache.
pub struct EventLog {
    dir: PathBuf,
    options: LogOptions,
    clock: Arc<dyn Clock>,
    _lock: File,
    active: Option<(SegmentFile, File, u64)>,
    next_seq: u64,
    last_hash: EventHash,
    notifier: Arc<Notifier>,
    poisoned: bool,
    buf: Vec<u8>,
}

impl std::fmt::Debug for EventLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventLog")
            .field("dir", &self.dir)
            .field("next_seq", &self.next_seq)
            .field("last_hash", &self.last_hash)
            .finish()
    }
}

impl EventLog {
    /// Opens (creating if needed) the log in `dir`. A torn tail left by a
    /// crash is cut at the last whole, chain-valid record; the cut bytes are
    /// kept beside the segment in a `.torn` file and a warning is logged.
    pub fn open(dir: impl AsRef<Path>, options: LogOptions, clock: Arc<dyn Clock>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            fs::create_dir_all(&dir)
                .map_err(|e| EventError::io(format!("creating {}", dir.display()), e))?;
            // The new directory's entry must survive a crash too.
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_dir(parent)?;
            }
        }
        let lock = lock_dir(&dir)?;
        let mut segments = list_segments(&dir)?;
        let mut next_seq = 1;
        let mut last_hash = GENESIS_HASH;
        let mut active = None;

        // A segment whose header never became whole was being created when
        // the process died: nothing in it was acknowledged.
        while let Some(seg) = segments.last() {
            let len = fs::metadata(&seg.path)
                .map_err(|e| EventError::io(format!("reading {}", seg.path.display()), e))?
                .len();
            if len >= crate::format::SEGMENT_HEADER_LEN as u64 {
                break;
            }
            tracing::warn!(segment = %seg.path.display(), bytes = len, "event log: removing a segment whose creation was interrupted");
            set_aside(&seg.path)?;
            segments.pop();
        }

        if let Some(seg) = segments.last().cloned() {
            let data = fs::read(&seg.path)
                .map_err(|e| EventError::io(format!("reading {}", seg.path.display()), e))?;
            check_header(&seg, &data)?;
            if seg.first_seq == 0 {
                return Err(EventError::BadSegment {
                    path: seg.path.clone(),
                    message: "starts at seq 0, but sequence numbers start at 1".into(),
                });
            }
            // The first record must chain to the head of the segment before
            // (or to the genesis hash for seq 1).
            let prev = if seg.first_seq == 1 {
                Some(GENESIS_HASH)
            } else {
                previous_segment_head(&segments)?
            };
            let walk = walk_records(&data, seg.first_seq, prev, |_, _, _| {});
            if let WalkEnd::Damaged { offset, what } = &walk.end {
                // A torn tail is damage with nothing whole after it. A whole
                // record after the damage means acknowledged events were hit
                // (bit rot, tampering): cutting would lose them and let new
                // appends reuse their seqs, so refuse and change nothing.
                if let Some((at, seq)) = find_whole_record(&data, *offset) {
                    let seq = seq.map_or_else(|| "?".to_string(), |s| s.to_string());
                    return Err(EventError::Corrupt {
                        path: seg.path.clone(),
                        offset: *offset as u64,
                        seq: walk.next_seq,
                        message: format!(
                            "{what}; a whole record (seq {seq}) follows at byte {at}, so this is \
                             not a torn tail and the log was left unchanged. Restore the segment \
                             from a backup, or, to give up every event from seq {} on, copy the \
                             segment aside, truncate it to {offset} bytes and open again",
                            walk.next_seq
                        ),
                    });
                }
                let cut = data.len() - offset;
                let side = set_aside_tail(&seg.path, &data[*offset..], walk.next_seq)?;
                let f = OpenOptions::new()
                    .write(true)
                    .open(&seg.path)
                    .map_err(|e| EventError::io(format!("opening {}", seg.path.display()), e))?;
                f.set_len(*offset as u64)
                    .and_then(|()| f.sync_data())
                    .map_err(|e| EventError::io(format!("truncating {}", seg.path.display()), e))?;
                tracing::warn!(
                    segment = %seg.path.display(),
                    offset,
                    bytes_cut = cut,
                    kept_in = %side.display(),
                    last_good_seq = walk.next_seq.saturating_sub(1),
                    reason = %what,
                    "event log: torn tail cut at the last whole, chain-valid event"
                );
            }
            next_seq = walk.next_seq;
            last_hash = walk.last_hash;
            if walk.records == 0 {
                last_hash = prev.unwrap_or_default();
            }
            let file = OpenOptions::new()
                .append(true)
                .open(&seg.path)
                .map_err(|e| EventError::io(format!("opening {}", seg.path.display()), e))?;
            active = Some((seg, file, walk.valid_len as u64));
        }
        let last_seq = next_seq
            .checked_sub(1)
            .ok_or_else(|| EventError::BadSegment {
                path: dir.clone(),
                message: "the log would continue at seq 0; sequence numbers start at 1".into(),
            })?;
        tracing::info!(dir = %dir.display(), next_seq, "event log opened");
        Ok(EventLog {
            dir,
            options,
            clock,
            _lock: lock,
            active,
            next_seq,
            last_hash,
            notifier: Arc::new(Notifier::new(last_seq)),
            poisoned: false,
            buf: Vec::new(),
        })
    }

    /// The directory of the log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Seq of the last durable event (0 when empty).
    pub fn last_seq(&self) -> u64 {
        // `open` guarantees next_seq >= 1.
        self.next_seq.saturating_sub(1)
    }

    /// Hash of the last durable event (the genesis hash when empty).
    pub fn last_hash(&self) -> EventHash {
        self.last_hash
    }

    /// Appends one event durably.
    pub fn append_one(&mut self, event: &Event) -> Result<AppendReceipt> {
        self.append(std::slice::from_ref(event))
    }

    /// Appends `events` as one group commit: one write, one `fdatasync`.
    /// Returns once they are durable; on error none of them is (the segment
    /// is cut back to where it was).
    pub fn append(&mut self, events: &[Event]) -> Result<AppendReceipt> {
        if self.poisoned {
            return Err(EventError::io(
                format!("event log {} after a failed write", self.dir.display()),
                std::io::Error::other("a failed append could not be undone; reopen the log"),
            ));
        }
        if events.is_empty() {
            return Ok(AppendReceipt {
                first_seq: self.next_seq,
                last_seq: self.next_seq.saturating_sub(1),
                last_hash: self.last_hash,
            });
        }
        let now = self.clock.now_unix_ns();
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let mut hash = self.last_hash;
        let mut seq = self.next_seq;
        for event in events {
            let body = encode_body(seq, now, &hash, event)?;
            if body.len() > MAX_BODY_LEN as usize {
                return Err(EventError::TooLarge(body.len()));
            }
            hash = write_frame(&mut buf, &body);
            seq += 1;
        }
        let roll = match &self.active {
            None => true,
            Some((seg, _, len)) => {
                *len + buf.len() as u64 > self.options.segment_max_bytes
                    && seg.first_seq != self.next_seq
            }
        };
        if roll {
            let (seg, file) = create_segment(&self.dir, self.next_seq)?;
            self.active = Some((seg, file, crate::format::SEGMENT_HEADER_LEN as u64));
        }
        let result = match &mut self.active {
            Some((seg, file, len)) => match file.write_all(&buf).and_then(|()| file.sync_data()) {
                Ok(()) => {
                    *len += buf.len() as u64;
                    Ok(())
                }
                Err(e) => {
                    // Undo the partial write so the file ends on a record.
                    if file.set_len(*len).and_then(|()| file.sync_data()).is_err() {
                        self.poisoned = true;
                    }
                    Err(EventError::io(
                        format!("appending to {}", seg.path.display()),
                        e,
                    ))
                }
            },
            None => Err(EventError::io(
                "appending",
                std::io::Error::other("no active segment"),
            )),
        };
        self.buf = buf;
        result?;
        let receipt = AppendReceipt {
            first_seq: self.next_seq,
            last_seq: seq - 1,
            last_hash: hash,
        };
        self.next_seq = seq;
        self.last_hash = hash;
        self.notifier.publish(receipt.last_seq);
        Ok(receipt)
    }

    /// A reader over what is durable now.
    pub fn reader(&self) -> LogReader {
        LogReader::new(self.dir.clone())
    }

    /// A subscription delivering every event from `from_seq` on, including
    /// those appended later, each exactly once and in order.
    pub fn subscribe(&self, from_seq: u64) -> Subscription {
        Subscription::new(self.dir.clone(), from_seq.max(1), self.notifier.clone())
    }
}

/// Takes the advisory lock of the log directory.
fn lock_dir(dir: &Path) -> Result<File> {
    let path = dir.join("LOCK");
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| EventError::io(format!("opening {}", path.display()), e))?;
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(EventError::Locked(dir.to_path_buf()));
    }
    Ok(f)
}

/// `<path><suffix>`, or, if that exists already, `<path><suffix>.<n>` for the
/// first free `n`: a file set aside is never overwritten.
fn unique_side_path(path: &Path, suffix: &str) -> PathBuf {
    let mut base = path.as_os_str().to_owned();
    base.push(suffix);
    let mut candidate = PathBuf::from(&base);
    let mut n = 1u32;
    while fs::symlink_metadata(&candidate).is_ok() {
        let mut next = base.clone();
        next.push(format!(".{n}"));
        candidate = PathBuf::from(next);
        n += 1;
    }
    candidate
}

/// Moves a whole file aside (renamed with a `.torn` suffix, never over an
/// existing file).
fn set_aside(path: &Path) -> Result<()> {
    let side = unique_side_path(path, ".torn");
    fs::rename(path, &side)
        .map_err(|e| EventError::io(format!("setting aside {}", path.display()), e))?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Writes the cut tail of a segment to `<segment>.torn-<seq>` (or
/// `.torn-<seq>.<n>` if that exists: an earlier crash at the same seq) so
/// nothing is destroyed; returns that path.
fn set_aside_tail(path: &Path, tail: &[u8], at_seq: u64) -> Result<PathBuf> {
    let side = unique_side_path(path, &format!(".torn-{at_seq}"));
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&side)
        .map_err(|e| EventError::io(format!("creating {}", side.display()), e))?;
    f.write_all(tail)
        .and_then(|()| f.sync_data())
        .map_err(|e| EventError::io(format!("writing {}", side.display()), e))?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(side)
}

/// The head hash of the segment before the last one, checking that it ends
/// just before the last one starts; `None` if there is no segment before.
fn previous_segment_head(segments: &[SegmentFile]) -> Result<Option<EventHash>> {
    let n = segments.len();
    let (Some(prev), Some(last)) = (
        n.checked_sub(2).and_then(|i| segments.get(i)),
        segments.last(),
    ) else {
        return Ok(None);
    };
    let data = fs::read(&prev.path)
        .map_err(|e| EventError::io(format!("reading {}", prev.path.display()), e))?;
    check_header(prev, &data)?;
    let walk = walk_records(&data, prev.first_seq, None, |_, _, _| {});
    if let WalkEnd::Damaged { offset, what } = walk.end {
        return Err(EventError::Corrupt {
            path: prev.path.clone(),
            offset: offset as u64,
            seq: walk.next_seq,
            message: what,
        });
    }
    if walk.next_seq != last.first_seq {
        return Err(EventError::Corrupt {
            path: last.path.clone(),
            offset: 0,
            seq: walk.next_seq,
            message: format!(
                "the segment before ends at seq {}, but this one starts at seq {}",
                walk.next_seq.saturating_sub(1),
                last.first_seq
            ),
        });
    }
    Ok(Some(walk.last_hash))
}
