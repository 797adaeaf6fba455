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
use crate::event::LogRepaired;
use crate::format::{EventHash, GENESIS_HASH, MAX_BODY_LEN};
use crate::log::checkpoint::{ChainKey, CheckpointFile};
use crate::log::frame::write_frame;
use crate::log::head::{read_head, AckHead, HeadFile};
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
    /// Whether open may cut events the writer had acknowledged (damage at
    /// or below the durable head in `HEAD`). Off by default: such a log is
    /// refused with [`EventError::Corrupt`] naming the seqs. On (`vouch
    /// serve --repair-log`), the damaged tail is cut and set aside like a
    /// torn one, and the `service.log_repaired` event recorded says
    /// `lost_acknowledged: true`.
    pub allow_cut_acknowledged: bool,
    /// The chain key: with one, the writer appends signed checkpoints of
    /// the head to `CHECKPOINTS` (see [`ChainKey`]); without, the chain is
    /// not authenticated.
    pub chain_key: Option<ChainKey>,
    /// A checkpoint is written after the first commit since open, then
    /// after a commit once this many events were appended since the last
    /// one...
    pub checkpoint_every_events: u64,
    /// ... or once this long passed since the last one (the writer's clock).
    pub checkpoint_every: std::time::Duration,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_max_bytes: 64 << 20,
            allow_cut_acknowledged: false,
            chain_key: None,
            checkpoint_every_events: 1000,
            checkpoint_every: std::time::Duration::from_secs(60),
        }
    }
}

/// A test hook of the writer, called just before each `fdatasync` of a
/// segment (to inject a slow sync or a panic).
#[cfg(test)]
pub(crate) type SyncHook = Arc<dyn Fn() + Send + Sync>;

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
    /// The directory's lock (released only to reopen in place).
    lock: Option<File>,
    active: Option<(SegmentFile, File, u64)>,
    next_seq: u64,
    last_hash: EventHash,
    notifier: Arc<Notifier>,
    head: HeadFile,
    /// The chain key and the checkpoints file (with a key).
    checkpoints: Option<(ChainKey, CheckpointFile)>,
    /// Seq and time of the last checkpoint written since open.
    last_checkpoint: Option<(u64, i64)>,
    poisoned: bool,
    buf: Vec<u8>,
    #[cfg(test)]
    pub(crate) before_sync: Option<SyncHook>,
    #[cfg(feature = "failpoints")]
    pub(crate) sync_faults: super::failpoints::SyncFaults,
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
    /// Opens (creating if needed) the log in `dir`.
    ///
    /// A tail left by a crash (damage after the last whole, chain-valid
    /// record) is cut there when nothing cut was acknowledged: the durable
    /// head in `HEAD` says up to which seq the writer acknowledged appends,
    /// so a tail beyond it is cut even when whole records follow the damage
    /// (pages of an unacknowledged batch reached the disk out of order). The
    /// cut bytes are kept beside the segment in a `.torn-<seq>` file.
    ///
    /// If the repair would cut at or below the acknowledged head, or the
    /// head is beyond the end of the log, or the event at the head's seq is
    /// not the acknowledged one, acknowledged events are lost: open refuses
    /// with [`EventError::Corrupt`] and changes nothing, unless
    /// [`LogOptions::allow_cut_acknowledged`]. A log without `HEAD` (written
    /// by an older build) is repaired as before: cut when nothing whole
    /// follows the damage, refused otherwise.
    ///
    /// Whenever a repair cut anything, the first event appended after
    /// opening is a `service.log_repaired` ([`LogRepaired`]) saying what.
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
        let head_state = read_head(&dir)?;
        let acked = head_state.map(|s| s.head);
        let mut segments = list_segments(&dir)?;
        check_first_segment(&segments)?;
        let mut next_seq = 1;
        let mut last_hash = GENESIS_HASH;
        let mut active = None;
        let mut repaired: Option<LogRepaired> = None;

        // A segment whose header never became whole was being created when
        // the process died: nothing in it was acknowledged (if the head
        // says otherwise, the check below refuses).
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
            // The hash of the event at the acknowledged head's seq, if it is
            // in this segment or is the last one of the segment before.
            let mut at_head: Option<EventHash> = None;
            if let (Some(h), Some(p)) = (acked, prev) {
                if h.seq + 1 == seg.first_seq {
                    at_head = Some(p);
                }
            }
            let mut seq = seg.first_seq;
            let walk = walk_records(&data, seg.first_seq, prev, |_, hash, _| {
                if acked.is_some_and(|h| h.seq == seq) {
                    at_head = Some(hash);
                }
                seq += 1;
            });
            if let WalkEnd::Damaged { offset, what } = &walk.end {
                let from_seq = walk.next_seq;
                let lost = acked.is_some_and(|h| from_seq <= h.seq);
                let reason = match acked {
                    // Beyond the acknowledged head: never acknowledged, so
                    // it is cut whatever follows (no scan needed).
                    Some(h) if !lost => format!(
                        "{what} at seq {from_seq}, beyond the acknowledged head (seq {}): an \
                         append that was never acknowledged",
                        h.seq
                    ),
                    Some(h) => {
                        if !options.allow_cut_acknowledged {
                            return Err(EventError::Corrupt {
                                path: seg.path.clone(),
                                offset: *offset as u64,
                                seq: from_seq,
                                message: format!(
                                    "{what}; events {from_seq} to {} had been acknowledged (the \
                                     durable head in {} says seq {}), so this is not a torn tail \
                                     and the log was left unchanged. Restore the log directory \
                                     from a backup, or, to give up events from seq {from_seq} on, \
                                     open with the repair option (`vouch serve --repair-log`): it \
                                     sets the damaged bytes aside, truncates the segment to \
                                     {offset} bytes and records a `service.log_repaired` event \
                                     with lost_acknowledged",
                                    h.seq,
                                    dir.join(crate::log::head::HEAD_FILE).display(),
                                    h.seq
                                ),
                            });
                        }
                        format!(
                            "{what} at seq {from_seq}; acknowledged events {from_seq} to {} were \
                             cut (repair option)",
                            h.seq
                        )
                    }
                    // No head (a log of an older build): a whole record
                    // after the damage means acknowledged events were hit.
                    None => {
                        if let Some((at, found)) = find_whole_record(&data, *offset) {
                            let found = found.map_or_else(|| "?".to_string(), |s| s.to_string());
                            return Err(EventError::Corrupt {
                                path: seg.path.clone(),
                                offset: *offset as u64,
                                seq: from_seq,
                                message: format!(
                                    "{what}; a whole record (seq {found}) follows at byte {at}, so \
                                     this is not a torn tail and the log was left unchanged. \
                                     Restore the segment from a backup, or, to give up every \
                                     event from seq {from_seq} on, copy the segment aside, \
                                     truncate it to {offset} bytes and open again"
                                ),
                            });
                        }
                        format!(
                            "{what} at seq {from_seq} (no acknowledged head: a log written by an \
                             older build)"
                        )
                    }
                };
                let cut = data.len() - offset;
                let side = set_aside_tail(&seg.path, &data[*offset..], from_seq)?;
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
                    last_good_seq = from_seq.saturating_sub(1),
                    acknowledged_seq = acked.map_or(0, |h| h.seq),
                    lost_acknowledged = lost,
                    reason = %what,
                    "event log: tail cut at the last whole, chain-valid event"
                );
                if lost {
                    // Events up to the head are gone: the head event's hash
                    // was not seen, and must not be asked for below.
                    at_head = None;
                }
                repaired = Some(LogRepaired {
                    from_seq,
                    bytes: cut as u64,
                    acknowledged_seq: acked.map_or(0, |h| h.seq),
                    lost_acknowledged: lost,
                    reason,
                });
            }
            next_seq = walk.next_seq;
            last_hash = walk.last_hash;
            if walk.records == 0 {
                last_hash = prev.unwrap_or_default();
            }
            // The head event must be the acknowledged one: another event at
            // that seq means the log was replaced or forked.
            let lost_already = repaired.as_ref().is_some_and(|r| r.lost_acknowledged);
            if let (Some(h), Some(found), false) = (acked, at_head, lost_already) {
                if found != h.hash && h.seq < next_seq {
                    if !options.allow_cut_acknowledged {
                        return Err(EventError::Corrupt {
                            path: seg.path.clone(),
                            offset: 0,
                            seq: h.seq,
                            message: format!(
                                "the event at seq {} is not the one acknowledged (hash {found}, \
                                 the durable head says {}): this log is not the one the head was \
                                 written for, or it was rewritten. Restore the log directory \
                                 from a backup, or open with the repair option (`vouch serve \
                                 --repair-log`) to accept the log as it is",
                                h.seq, h.hash
                            ),
                        });
                    }
                    repaired = Some(LogRepaired {
                        from_seq: h.seq,
                        bytes: repaired.as_ref().map_or(0, |r| r.bytes),
                        acknowledged_seq: h.seq,
                        lost_acknowledged: true,
                        reason: format!(
                            "the event at seq {} is not the acknowledged one (accepted with the \
                             repair option)",
                            h.seq
                        ),
                    });
                }
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
        // The head beyond the end of the log: acknowledged events vanished
        // without leaving damage (a lost write, a truncated or removed
        // segment, an older copy of the log).
        if let Some(h) = acked.filter(|h| h.seq > last_seq) {
            if repaired.as_ref().is_none_or(|r| !r.lost_acknowledged) {
                if !options.allow_cut_acknowledged {
                    return Err(EventError::Corrupt {
                        path: active
                            .as_ref()
                            .map_or_else(|| dir.clone(), |(s, _, _)| s.path.clone()),
                        offset: active.as_ref().map_or(0, |(_, _, l)| *l),
                        seq: last_seq + 1,
                        message: format!(
                            "the log ends at seq {last_seq}, but events up to seq {} had been \
                             acknowledged (durable head in {}): events {} to {} are lost. \
                             Restore the log directory from a backup, or open with the repair \
                             option (`vouch serve --repair-log`) to go on from seq {last_seq} \
                             and record a `service.log_repaired` event with lost_acknowledged",
                            h.seq,
                            dir.join(crate::log::head::HEAD_FILE).display(),
                            last_seq + 1,
                            h.seq
                        ),
                    });
                }
                let bytes = repaired.as_ref().map_or(0, |r| r.bytes);
                repaired = Some(LogRepaired {
                    from_seq: last_seq + 1,
                    bytes,
                    acknowledged_seq: h.seq,
                    lost_acknowledged: true,
                    reason: format!(
                        "the log ended at seq {last_seq}, below the acknowledged head (seq {}); \
                         accepted with the repair option",
                        h.seq
                    ),
                });
            }
        }
        let head = HeadFile::open(&dir, head_state)?;
        // Checkpoints of events a repair cut sign events the log no longer
        // holds (their seqs are reused): they are set aside with the cut.
        if let Some(r) = &repaired {
            drop_checkpoints_from(&dir, r.from_seq)?;
        }
        let checkpoints = match &options.chain_key {
            Some(key) => Some((key.clone(), CheckpointFile::open(&dir)?)),
            None => None,
        };
        tracing::info!(dir = %dir.display(), next_seq, "event log opened");
        let mut log = EventLog {
            dir,
            options,
            clock,
            lock: Some(lock),
            active,
            next_seq,
            last_hash,
            notifier: Arc::new(Notifier::new(last_seq)),
            head,
            checkpoints,
            last_checkpoint: None,
            poisoned: false,
            buf: Vec::new(),
            #[cfg(test)]
            before_sync: None,
            #[cfg(feature = "failpoints")]
            sync_faults: Default::default(),
        };
        // What the log holds from now on is what readers are given: it is
        // acknowledged (the head of an older build's log, or an intact
        // batch whose head write was cut by a crash, is brought level).
        let now = AckHead {
            seq: last_seq,
            hash: last_hash,
        };
        if last_seq > 0 && log.head.current != Some(now) {
            log.head.write(now)?;
        }
        if let Some(r) = repaired {
            if r.lost_acknowledged {
                tracing::error!(
                    from_seq = r.from_seq,
                    acknowledged_seq = r.acknowledged_seq,
                    reason = %r.reason,
                    "event log: ACKNOWLEDGED EVENTS WERE CUT by the repair; recording service.log_repaired"
                );
            }
            log.append_one(&r.into())?;
        }
        Ok(log)
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
        #[cfg(test)]
        let hook = self.before_sync.clone();
        #[cfg(feature = "failpoints")]
        let fault = self.sync_faults.clone();
        let result = match &mut self.active {
            Some((seg, file, len)) => match file.write_all(&buf).and_then(|()| {
                super::crash::at("log-batch-written");
                #[cfg(test)]
                if let Some(h) = &hook {
                    h();
                }
                #[cfg(feature = "failpoints")]
                if let Some(e) = fault.take() {
                    return Err(e);
                }
                file.sync_data()
            }) {
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
        super::crash::at("log-batch-synced");
        let receipt = AppendReceipt {
            first_seq: self.next_seq,
            last_seq: seq - 1,
            last_hash: hash,
        };
        // The durable acknowledged head, before anyone is told: every
        // acknowledged seq is at or below it. If it cannot be written the
        // events are in the segment but unacknowledged; the writer stops
        // (reopening reads them back, and the head stays a lower bound).
        if let Err(e) = self.head.write(AckHead {
            seq: receipt.last_seq,
            hash,
        }) {
            self.poisoned = true;
            return Err(e);
        }
        super::crash::at("log-head-written");
        self.next_seq = seq;
        self.last_hash = hash;
        self.checkpoint(receipt.last_seq, hash, now);
        self.notifier.publish(receipt.last_seq);
        Ok(receipt)
    }

    /// Writes a signed checkpoint of `(seq, hash)` when one is due. A
    /// failure is logged and retried at the next commit: the events are
    /// durable and acknowledged either way.
    fn checkpoint(&mut self, seq: u64, hash: EventHash, now: i64) {
        let Some((key, file)) = &mut self.checkpoints else {
            return;
        };
        let every_ns = i64::try_from(self.options.checkpoint_every.as_nanos()).unwrap_or(i64::MAX);
        let due = match self.last_checkpoint {
            None => true,
            Some((at_seq, at_ns)) => {
                seq >= at_seq.saturating_add(self.options.checkpoint_every_events.max(1))
                    || now.saturating_sub(at_ns) >= every_ns
            }
        };
        if !due {
            return;
        }
        match file.append(&key.sign(seq, hash, now)) {
            Ok(()) => self.last_checkpoint = Some((seq, now)),
            Err(e) => {
                tracing::warn!(seq, error = %e, "event log: a chain checkpoint could not be written; retried at the next commit")
            }
        }
    }

    /// A reader bounded by what this writer has acknowledged: a replay
    /// stops at the committed seq of the moment it starts.
    pub fn reader(&self) -> LogReader {
        LogReader::bounded(self.dir.clone(), self.notifier.clone())
    }

    pub(crate) fn notifier(&self) -> Arc<Notifier> {
        self.notifier.clone()
    }

    /// Whether appends are refused until the log is reopened (a failed
    /// append could not be undone, or one panicked).
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Reopens a poisoned writer in place: the directory is opened again
    /// as [`EventLog::open`] does after a crash (an unacknowledged tail
    /// the failed append left is cut, kept aside and recorded), keeping
    /// the notifier readers and subscriptions wait on. Acknowledged events
    /// are never cut here, whatever the options say. On error the writer
    /// stays poisoned (and keeps its lock) and may be reopened again later.
    pub fn reopen(&mut self) -> Result<()> {
        // What the failed append left beyond the last acknowledged event
        // is cut first (and kept aside): its callers were told it failed,
        // so it must not come back as acknowledged, as whole records
        // beyond the durable head would after a crash.
        let cut = self.cut_unacknowledged()?;
        let options = LogOptions {
            allow_cut_acknowledged: false,
            ..self.options.clone()
        };
        // The new writer takes the directory's lock: this one lets go.
        self.lock = None;
        match EventLog::open(&self.dir, options, self.clock.clone()) {
            Ok(mut fresh) => {
                fresh.options = self.options.clone();
                fresh.notifier = self.notifier.clone();
                fresh.notifier.publish(fresh.last_seq());
                #[cfg(test)]
                {
                    fresh.before_sync = self.before_sync.take();
                }
                #[cfg(feature = "failpoints")]
                {
                    fresh.sync_faults = self.sync_faults.clone();
                }
                tracing::warn!(dir = %self.dir.display(), next_seq = fresh.next_seq, bytes_cut = cut.as_ref().map_or(0, |r| r.bytes), "event log reopened after a write it could not undo");
                *self = fresh;
                if let Some(r) = cut {
                    self.append_one(&r.into())?;
                }
                Ok(())
            }
            Err(e) => {
                self.lock = lock_dir(&self.dir).ok();
                Err(e)
            }
        }
    }

    /// Brings the log back to what this writer acknowledged: `HEAD` says
    /// its last acknowledged event again (a head write whose sync failed
    /// may have landed with a seq nobody was told of), and the active
    /// segment is cut back to the end of that event, the bytes after it
    /// set aside; what to record, if anything was cut. `HEAD` first: a cut
    /// that then fails leaves a log whose head is still a lower bound.
    fn cut_unacknowledged(&mut self) -> Result<Option<LogRepaired>> {
        self.head.write(AckHead {
            seq: self.next_seq.saturating_sub(1),
            hash: self.last_hash,
        })?;
        let Some((seg, _, _)) = &self.active else {
            return Ok(None);
        };
        let path = seg.path.clone();
        let data = fs::read(&path)
            .map_err(|e| EventError::io(format!("reading {}", path.display()), e))?;
        let mut end = crate::format::SEGMENT_HEADER_LEN.min(data.len());
        let mut seq = seg.first_seq;
        walk_records(&data, seg.first_seq, None, |off, _, body| {
            if seq < self.next_seq {
                end = off + crate::format::RECORD_HEADER_LEN + body.len();
            }
            seq += 1;
        });
        if end >= data.len() {
            return Ok(None);
        }
        let side = set_aside_tail(&path, &data[end..], self.next_seq)?;
        let f = OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| EventError::io(format!("opening {}", path.display()), e))?;
        f.set_len(end as u64)
            .and_then(|()| f.sync_data())
            .map_err(|e| EventError::io(format!("truncating {}", path.display()), e))?;
        tracing::warn!(segment = %path.display(), offset = end, kept_in = %side.display(), "event log: the bytes of an append that failed were cut");
        Ok(Some(LogRepaired {
            from_seq: self.next_seq,
            bytes: (data.len() - end) as u64,
            acknowledged_seq: self.next_seq.saturating_sub(1),
            lost_acknowledged: false,
            reason: "an append failed and could not be undone at once (the disk failed); its \
                     bytes were cut when the log was reopened, and its callers had been told it \
                     failed"
                .into(),
        }))
    }

    /// Marks the writer unusable (after a panic in the middle of an
    /// append, its state is not trusted): appends fail until reopened.
    pub(crate) fn poison(&mut self) {
        self.poisoned = true;
    }

    /// A subscription delivering every event from `from_seq` on, including
    /// those appended later, each exactly once and in order.
    pub fn subscribe(&self, from_seq: u64) -> Subscription {
        Subscription::new(self.dir.clone(), from_seq.max(1), self.notifier.clone())
    }
}

/// Refuses a log whose first segment does not start at seq 1: leading
/// segments are missing, and a replay from seq 1 would be silently empty.
pub(crate) fn check_first_segment(segments: &[SegmentFile]) -> Result<()> {
    match segments.first() {
        Some(first) if first.first_seq > 1 => Err(EventError::Corrupt {
            path: first.path.clone(),
            offset: 0,
            seq: 1,
            message: format!(
                "the first segment starts at seq {}: the segments holding events 1 to {} are \
                 missing. Restore them from a backup of the log directory",
                first.first_seq,
                first.first_seq - 1
            ),
        }),
        _ => Ok(()),
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
/// Keeps only the checkpoints of seqs below `from_seq` (the first seq a
/// repair cut): the whole file is first copied aside to
/// `CHECKPOINTS.repaired-<from_seq>`, the kept records are written to a
/// new file, synced, and renamed over it.
fn drop_checkpoints_from(dir: &Path, from_seq: u64) -> Result<()> {
    let path = dir.join(crate::format::CHECKPOINTS_FILE);
    let data = match fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(EventError::io(format!("reading {}", path.display()), e)),
    };
    let len = crate::format::CHECKPOINT_LEN;
    let keep = data
        .chunks_exact(len)
        .take_while(|r| crate::format::ChainCheckpoint::decode(r).is_ok_and(|cp| cp.seq < from_seq))
        .count()
        * len;
    if keep == data.len() {
        return Ok(());
    }
    let aside = unique_side_path(&path, &format!(".repaired-{from_seq}"));
    let tmp = dir.join(format!("{}.new", crate::format::CHECKPOINTS_FILE));
    let write = |p: &Path, bytes: &[u8]| {
        File::create(p)
            .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
            .map_err(|e| EventError::io(format!("writing {}", p.display()), e))
    };
    write(&aside, &data)?;
    write(&tmp, &data[..keep])?;
    fs::rename(&tmp, &path)
        .map_err(|e| EventError::io(format!("replacing {}", path.display()), e))?;
    sync_dir(dir)?;
    tracing::warn!(
        from_seq,
        kept = keep / len,
        set_aside = %aside.display(),
        "event log repair: chain checkpoints of the cut events set aside"
    );
    Ok(())
}

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
