//! Group commit across threads: many callers append concurrently, and the
//! events that arrive while one `fdatasync` is in flight share the next one.
//!
//! The classic leader/follower scheme: a caller queues its batch; if no
//! commit is running it becomes the leader, takes everything queued, appends
//! it with one write and one sync, and hands each caller its receipt. A
//! caller returns only once its own events are durable.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use crate::error::{EventError, Result};
use crate::event::Event;
use crate::log::notify::Notifier;
use crate::log::reader::{LogReader, Subscription};
use crate::log::verify::{scrub, ScrubReport};
use crate::log::writer::{AppendReceipt, EventLog};

/// One caller's batch in the queue.
struct Pending {
    ticket: u64,
    events: Vec<Event>,
    /// Append only if the log then ends at this seq.
    expected_last_seq: Option<u64>,
}

/// Why a caller's batch was not appended.
#[derive(Clone, Debug)]
enum Refused {
    /// The write or sync failed (nothing of the commit is acknowledged).
    Failed(String),
    /// The log did not end at the expected seq.
    Conflict { expected: u64, actual: u64 },
}

impl Refused {
    fn into_error(self) -> EventError {
        match self {
            Refused::Failed(m) => EventError::io("group commit", std::io::Error::other(m)),
            Refused::Conflict { expected, actual } => EventError::Conflict { expected, actual },
        }
    }
}

type Outcome = std::result::Result<AppendReceipt, Refused>;

#[derive(Default)]
struct Queue {
    pending: Vec<Pending>,
    leader: bool,
    next_ticket: u64,
    done: HashMap<u64, Outcome>,
}

/// A test hook of the group commit, called by the leader after it took
/// the batch and before it commits it (to inject a panic).
#[cfg(test)]
pub(crate) type LeaderHook = Box<dyn Fn() + Send + Sync>;

/// An [`EventLog`] shared by threads, with group commit across them.
///
/// [`SharedLog::last_seq`], [`SharedLog::reader`] and
/// [`SharedLog::subscribe`] never take the writer's lock: they answer
/// while a commit waits on the disk.
pub struct SharedLog {
    log: Mutex<EventLog>,
    dir: PathBuf,
    notifier: Arc<Notifier>,
    queue: Mutex<Queue>,
    committed: Condvar,
    /// When a poisoned writer was last reopened (at most once a second).
    last_reopen: Mutex<Option<std::time::Instant>>,
    #[cfg(test)]
    leader_hook: Mutex<Option<LeaderHook>>,
}

impl std::fmt::Debug for SharedLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLog").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Held by the leader while it commits a batch: if the commit unwinds, it
/// fails every caller of the batch, gives up the leadership and wakes the
/// followers, so no caller waits forever.
struct LeaderGuard<'a> {
    shared: &'a SharedLog,
    tickets: Vec<u64>,
    armed: bool,
}

impl Drop for LeaderGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut q = lock(&self.shared.queue);
        for t in self.tickets.drain(..) {
            q.done.entry(t).or_insert_with(|| {
                Err(Refused::Failed(
                    "the group commit panicked; nothing of it was acknowledged".into(),
                ))
            });
        }
        q.leader = false;
        self.shared.committed.notify_all();
    }
}

impl SharedLog {
    /// Wraps an open log.
    pub fn new(log: EventLog) -> Self {
        SharedLog {
            dir: log.dir().to_path_buf(),
            notifier: log.notifier(),
            log: Mutex::new(log),
            queue: Mutex::new(Queue::default()),
            committed: Condvar::new(),
            last_reopen: Mutex::new(None),
            #[cfg(test)]
            leader_hook: Mutex::new(None),
        }
    }

    /// Appends `events` durably (they stay together and in order); returns
    /// once they are synced, possibly in a commit shared with other callers.
    /// The receipt's `first_seq`/`last_seq` are this caller's; its
    /// `last_hash` is the head after the whole group commit, which is the
    /// hash of this caller's last event only if it was last in the group.
    pub fn append(&self, events: Vec<Event>) -> Result<AppendReceipt> {
        self.enqueue(events, None)
    }

    /// Appends `events` only if the log then ends at `expected_last_seq`
    /// (the seq of the state the caller decided on): otherwise nothing is
    /// written and the answer is [`EventError::Conflict`] with where the
    /// log ends. Optimistic concurrency for check-then-append decisions
    /// (two creations of one plan: one wins, the other is told).
    pub fn append_expecting(
        &self,
        events: Vec<Event>,
        expected_last_seq: u64,
    ) -> Result<AppendReceipt> {
        self.enqueue(events, Some(expected_last_seq))
    }

    fn enqueue(&self, events: Vec<Event>, expected_last_seq: Option<u64>) -> Result<AppendReceipt> {
        let mut q = lock(&self.queue);
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        q.pending.push(Pending {
            ticket,
            events,
            expected_last_seq,
        });
        loop {
            if let Some(r) = q.done.remove(&ticket) {
                return r.map_err(Refused::into_error);
            }
            if q.leader {
                q = self
                    .committed
                    .wait(q)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            q.leader = true;
            let batch = std::mem::take(&mut q.pending);
            drop(q);
            let mut guard = LeaderGuard {
                shared: self,
                tickets: batch.iter().map(|p| p.ticket).collect(),
                armed: true,
            };
            #[cfg(test)]
            if let Some(h) = lock(&self.leader_hook).as_ref() {
                h();
            }
            let results = self.commit(batch);
            guard.armed = false;
            drop(guard);
            q = lock(&self.queue);
            q.done.extend(results);
            q.leader = false;
            self.committed.notify_all();
        }
    }

    fn commit(&self, batch: Vec<Pending>) -> Vec<(u64, Outcome)> {
        let mut log = lock(&self.log);
        // Expectations are checked in queue order against the head the
        // commit would give: a refused caller's events are left out, and
        // a later caller's expectation sees the events of the earlier ones.
        let mut head = log.last_seq();
        let mut results: Vec<(u64, Outcome)> = Vec::new();
        let mut taken: Vec<(u64, u64)> = Vec::new();
        let mut all: Vec<Event> = Vec::new();
        for p in batch {
            if let Some(expected) = p.expected_last_seq {
                if expected != head {
                    results.push((
                        p.ticket,
                        Err(Refused::Conflict {
                            expected,
                            actual: head,
                        }),
                    ));
                    continue;
                }
            }
            let n = p.events.len() as u64;
            head += n;
            taken.push((p.ticket, n));
            all.extend(p.events);
        }
        if taken.is_empty() {
            return results;
        }
        // A panic inside the append leaves the writer's state untrusted
        // (bytes may be written that its seq does not count): it is
        // poisoned, and every caller of the batch gets an error.
        // A writer poisoned by a failed append it could not undo (an I/O
        // error that also failed the undo: a disk that failed for a
        // while) is reopened first, at most once a second, so that the
        // service takes writes again once the disk does, instead of
        // refusing them until a restart.
        let reopen_due = log.is_poisoned() && {
            let mut last = lock(&self.last_reopen);
            let due = last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(1));
            if due {
                *last = Some(std::time::Instant::now());
            }
            due
        };
        let appended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if reopen_due {
                if let Err(e) = log.reopen() {
                    tracing::warn!(error = %e, "the event log could not be reopened yet");
                }
            }
            log.append(&all)
        }))
        .unwrap_or_else(|_| {
            log.poison();
            Err(EventError::io(
                "group commit",
                std::io::Error::other("the append panicked; reopen the log"),
            ))
        });
        match appended {
            Ok(r) => {
                let mut first = r.first_seq;
                for (t, n) in taken {
                    let receipt = AppendReceipt {
                        first_seq: first,
                        last_seq: (first + n).saturating_sub(1),
                        // The chain head after this caller's last event is
                        // only known for the last caller; give the commit's.
                        last_hash: r.last_hash,
                    };
                    first += n;
                    results.push((t, Ok(receipt)));
                }
            }
            Err(e) => {
                let m = e.to_string();
                for (t, _) in taken {
                    results.push((t, Err(Refused::Failed(m.clone()))));
                }
            }
        }
        results
    }

    /// Seq of the last durable, acknowledged event. One atomic load: it
    /// never waits for a commit in flight.
    pub fn last_seq(&self) -> u64 {
        self.notifier.committed()
    }

    /// The committed seq: every replay of [`SharedLog::reader`] stops at
    /// it (the same as [`SharedLog::last_seq`]).
    pub fn committed_seq(&self) -> u64 {
        self.notifier.committed()
    }

    /// A reader of the log, bounded by the committed seq (nothing written
    /// but not yet synced is ever read).
    pub fn reader(&self) -> LogReader {
        LogReader::bounded(self.dir.clone(), self.notifier.clone())
    }

    /// A subscription from `from_seq`.
    pub fn subscribe(&self, from_seq: u64) -> Subscription {
        Subscription::new(self.dir.clone(), from_seq.max(1), self.notifier.clone())
    }

    /// The faults armed for the writer's next syncs (cargo feature
    /// `failpoints`; see [`SyncFaults`](crate::SyncFaults)).
    #[cfg(feature = "failpoints")]
    pub fn sync_faults(&self) -> crate::SyncFaults {
        lock(&self.log).sync_faults.clone()
    }

    /// Re-reads every segment up to the committed seq, checking each
    /// record's checksum, seq and link, without taking the writer's lock
    /// (appends go on meanwhile). See [`scrub`](crate::log::scrub).
    pub fn scrub(&self) -> Result<ScrubReport> {
        scrub(&self.dir, self.notifier.committed())
    }

    #[cfg(test)]
    pub(crate) fn set_leader_hook(&self, hook: Option<LeaderHook>) {
        *lock(&self.leader_hook) = hook;
    }

    #[cfg(test)]
    pub(crate) fn set_sync_hook(&self, hook: Option<crate::log::writer::SyncHook>) {
        lock(&self.log).before_sync = hook;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;
    use crate::event::JobFinished;
    use crate::ids::JobId;
    use crate::log::{verify_chain, LogOptions};

    fn named(name: &str) -> Event {
        JobFinished {
            job: JobId::new(name),
        }
        .into()
    }

    /// L7: of callers that decided on the same state, exactly one appends;
    /// the others are told where the log ends, and nothing of theirs is
    /// written, whether or not they shared a group commit.
    #[test]
    fn appends_expecting_the_same_head_let_exactly_one_through() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = EventLog::open(
            dir.path(),
            LogOptions::default(),
            Arc::new(ManualClock::new(0)),
        )
        .expect("open");
        let shared = Arc::new(SharedLog::new(log));
        shared.append(vec![named("first")]).expect("append");
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (shared, barrier) = (shared.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    shared.append_expecting(
                        vec![named(&format!("t{t}")), named(&format!("t{t}b"))],
                        1,
                    )
                })
            })
            .collect();
        let results: Vec<Result<AppendReceipt>> = threads
            .into_iter()
            .map(|t| t.join().expect("thread"))
            .collect();
        let won: Vec<&AppendReceipt> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(won.len(), 1, "{results:?}");
        assert_eq!((won[0].first_seq, won[0].last_seq), (2, 3));
        for r in &results {
            if let Err(e) = r {
                assert!(
                    matches!(
                        e,
                        EventError::Conflict {
                            expected: 1,
                            actual: 3
                        }
                    ),
                    "{e}"
                );
            }
        }
        assert_eq!(shared.last_seq(), 3, "the losers wrote nothing");
        // Plain appends in the same commit as a refused one still go in,
        // and an expectation of the new head is met.
        let r = shared
            .append_expecting(vec![named("next")], 3)
            .expect("append");
        assert_eq!(r.first_seq, 4);
        assert!(matches!(
            shared.append_expecting(vec![named("stale")], 3),
            Err(EventError::Conflict {
                expected: 3,
                actual: 4
            })
        ));
        verify_chain(dir.path()).expect("chain");
    }

    #[test]
    fn concurrent_appends_are_all_durable_once_and_in_caller_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = EventLog::open(
            dir.path(),
            LogOptions::default(),
            Arc::new(ManualClock::new(0)),
        )
        .expect("open");
        let shared = Arc::new(SharedLog::new(log));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    let mut receipts = Vec::new();
                    for i in 0..25 {
                        let e: Event = JobFinished {
                            job: JobId::new(format!("t{t}-{i}")),
                        }
                        .into();
                        receipts.push(shared.append(vec![e.clone(), e]).expect("append"));
                    }
                    receipts
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in threads {
            all.extend(t.join().expect("join"));
        }
        assert_eq!(shared.last_seq(), 200);
        let mut seqs: Vec<u64> = all.iter().flat_map(|r| r.first_seq..=r.last_seq).collect();
        seqs.sort_unstable();
        assert_eq!(seqs, (1..=200).collect::<Vec<_>>());
        // Each caller's two events are adjacent, and each thread's in order.
        let envs: Vec<_> = shared
            .reader()
            .replay_from(1)
            .expect("replay")
            .map(|e| e.expect("env"))
            .collect();
        for r in &all {
            assert_eq!(
                envs[(r.first_seq - 1) as usize].event,
                envs[(r.last_seq - 1) as usize].event
            );
        }
        assert!(verify_chain(dir.path()).expect("verify").ok());
    }

    fn shared(dir: &std::path::Path) -> Arc<SharedLog> {
        let log = EventLog::open(dir, LogOptions::default(), Arc::new(ManualClock::new(0)))
            .expect("open");
        Arc::new(SharedLog::new(log))
    }

    fn job(i: u64) -> Event {
        JobFinished {
            job: JobId::new(format!("j{i}")),
        }
        .into()
    }

    /// Appends from `n` threads while the leader is held in `hold`; each
    /// thread's result arrives on the channel (a hang shows as a timeout).
    fn appends_during(
        shared: &Arc<SharedLog>,
        n: u64,
    ) -> std::sync::mpsc::Receiver<std::thread::Result<Result<AppendReceipt>>> {
        let (tx, rx) = std::sync::mpsc::channel();
        for i in 0..n {
            let (shared, tx) = (shared.clone(), tx.clone());
            std::thread::spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    shared.append(vec![job(i)])
                }));
                let _ = tx.send(r);
            });
            // Let the first one become the leader before the others queue.
            if i == 0 {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        rx
    }

    #[test]
    fn regression_l1_a_leader_panic_fails_its_batch_and_hangs_nobody() {
        let dir = tempfile::tempdir().expect("tempdir");
        let shared = shared(dir.path());
        shared.append(vec![job(100)]).expect("append");
        // The first commit is slow, so the three callers behind it queue
        // up; the leader of their batch panics after taking it.
        let once = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let o = once.clone();
        shared.set_sync_hook(Some(Arc::new(move || {
            if !o.swap(true, std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(400));
            }
        })));
        let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let c = calls.clone();
        shared.set_leader_hook(Some(Box::new(move || {
            if c.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1 {
                panic!("injected leader panic");
            }
        })));
        let rx = appends_during(&shared, 4);
        let mut outcomes = Vec::new();
        for _ in 0..4 {
            outcomes.push(
                rx.recv_timeout(std::time::Duration::from_secs(10))
                    .expect("an append hung after a leader panic"),
            );
        }
        let panicked = outcomes.iter().filter(|o| o.is_err()).count();
        let failed = outcomes.iter().filter(|o| matches!(o, Ok(Err(_)))).count();
        let acked = outcomes.iter().filter(|o| matches!(o, Ok(Ok(_)))).count() as u64;
        assert_eq!(
            (panicked, failed, acked),
            (1, 2, 1),
            "the leader panics, the two others of its batch fail, the first commit stands"
        );
        shared.set_leader_hook(None);
        shared.set_sync_hook(None);
        // Appends go on, and nothing of the failed batch is in the log.
        let r = shared
            .append(vec![job(200)])
            .expect("append after the panic");
        assert_eq!(r.last_seq, 1 + acked + 1);
        assert!(verify_chain(dir.path()).expect("verify").ok());
    }

    #[test]
    fn a_panic_inside_the_append_fails_every_caller_and_the_writer_is_reopened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let shared = shared(dir.path());
        shared.append(vec![job(100)]).expect("append");
        shared.set_sync_hook(Some(Arc::new(|| panic!("injected panic before fdatasync"))));
        let rx = appends_during(&shared, 3);
        for _ in 0..3 {
            let r = rx
                .recv_timeout(std::time::Duration::from_secs(10))
                .expect("an append hung after a panic in the append");
            // No caller panics and none is acknowledged.
            assert!(matches!(r, Ok(Err(_))), "{r:?}");
        }
        shared.set_sync_hook(None);
        // A head write whose sync failed may still land, saying a seq
        // nobody was told of (the chaos runner saw it under fsync EIO: the
        // reopen then refused the log, whose end was before that head).
        let mut head = crate::log::head::HeadFile::open(dir.path(), None).expect("the head file");
        head.write(crate::log::head::AckHead {
            seq: shared.last_seq() + 1,
            hash: crate::format::EventHash([7; 32]),
        })
        .expect("a head nobody was told of");
        // The writer's state is not trusted any more: the next append
        // reopens the log in place (found by the chaos runner: after an
        // fsync EIO that also failed the undo, the service refused every
        // append for five minutes, until it stopped itself). The reopen
        // cuts the bytes the panicked append wrote, records that, and
        // appends go on after the last acknowledged event.
        // (At most one reopen a second: the panicked appends above may
        // have used this second's.)
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let after = loop {
            match shared.append(vec![job(5)]) {
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                other => break other.expect("the reopened log takes appends"),
            }
        };
        assert!(after.first_seq >= 2, "{after:?}");
        let events: Vec<_> = shared
            .reader()
            .replay_from(1)
            .expect("replay")
            .collect::<Result<Vec<_>>>()
            .expect("every event reads");
        assert_eq!(events.len() as u64, after.last_seq);
        assert!(
            events
                .iter()
                .any(|e| e.event.event_type() == "service.log_repaired"),
            "the cut is recorded"
        );
        // Nothing of the panicked batches was acknowledged: the log holds
        // the first append, the repairs, and the last append.
        let jobs: Vec<Event> = events
            .iter()
            .filter(|e| e.event.event_type() != "service.log_repaired")
            .map(|e| e.event.clone())
            .collect();
        assert_eq!(jobs, vec![job(100), job(5)]);
        assert!(verify_chain(dir.path()).expect("verify").ok());
        // Subscriptions made before the reopen see what is appended after.
        let mut sub = shared.subscribe(after.last_seq);
        assert_eq!(
            sub.next_timeout(std::time::Duration::from_secs(5))
                .expect("read")
                .map(|e| e.seq),
            Some(after.last_seq)
        );
    }

    #[test]
    fn regression_m4_last_seq_answers_while_an_fsync_is_in_flight() {
        let dir = tempfile::tempdir().expect("tempdir");
        let shared = shared(dir.path());
        shared.append(vec![job(1)]).expect("append");
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let entered_tx = Mutex::new(entered_tx);
        shared.set_sync_hook(Some(Arc::new(move || {
            let _ = lock(&entered_tx).send(());
            std::thread::sleep(std::time::Duration::from_millis(1500));
        })));
        let writer = {
            let shared = shared.clone();
            std::thread::spawn(move || shared.append(vec![job(2)]))
        };
        entered_rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("sync reached");
        let t = std::time::Instant::now();
        assert_eq!(shared.last_seq(), 1, "the unsynced append is not counted");
        assert_eq!(shared.committed_seq(), 1);
        let n = shared.reader().replay_from(1).expect("replay").count();
        let _sub = shared.subscribe(1);
        let waited = t.elapsed();
        assert_eq!(n, 1, "a bounded replay stops at the committed seq");
        assert!(
            waited < std::time::Duration::from_millis(500),
            "last_seq/reader/subscribe waited {waited:?} for the fsync"
        );
        assert_eq!(writer.join().expect("join").expect("append").last_seq, 2);
        assert_eq!(shared.last_seq(), 2);
    }

    #[test]
    fn scrub_checks_every_committed_record_while_appends_go_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = EventLog::open(
            dir.path(),
            LogOptions {
                segment_max_bytes: 400,
                ..LogOptions::default()
            },
            Arc::new(ManualClock::new(0)),
        )
        .expect("open");
        let shared = Arc::new(SharedLog::new(log));
        for i in 0..30 {
            shared.append(vec![job(i)]).expect("append");
        }
        let report = shared.scrub().expect("scrub");
        assert!(report.ok(), "{report:?}");
        assert_eq!(report.events, 30);
        assert!(report.segments > 3, "{report:?}");
        // Scrubbing during a slow commit neither waits for it nor judges
        // its bytes.
        shared.set_sync_hook(Some(Arc::new(|| {
            std::thread::sleep(std::time::Duration::from_millis(800))
        })));
        let writer = {
            let shared = shared.clone();
            std::thread::spawn(move || shared.append(vec![job(99)]))
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        let t = std::time::Instant::now();
        let report = shared.scrub().expect("scrub");
        assert!(t.elapsed() < std::time::Duration::from_millis(500));
        assert!(report.ok(), "{report:?}");
        assert_eq!(report.events, 30);
        writer.join().expect("join").expect("append");
        shared.set_sync_hook(None);
        // Bit rot in a sealed segment is found.
        let segs = crate::log::segment::list_segments(dir.path()).expect("list");
        let mut data = std::fs::read(&segs[1].path).expect("read");
        let at = data.len() - 3;
        data[at] ^= 0x40;
        std::fs::write(&segs[1].path, &data).expect("write");
        let report = shared.scrub().expect("scrub");
        let problem = report.problem.expect("damage found");
        assert_eq!(problem.segment, segs[1].path);
        assert!(problem.message.contains("checksum"), "{problem}");
    }
}
