//! The read model: projections kept up to date from the log, checkpointed
//! into a [`ReadStore`].

use crate::codec::Envelope;
use crate::error::{EventError, Result};
use crate::event::Event;
use crate::format::EventHash;
use crate::log::{LogReader, SealKey};
use crate::projection::Projections;
use crate::store::ReadStore;

/// Projections plus the store they are checkpointed into.
#[derive(Debug)]
pub struct ReadModel<S: ReadStore> {
    store: S,
    /// Seals snapshots with a key when the log has a chain key.
    seal_key: Option<SealKey>,
    projections: Projections,
    snapshot_seq: u64,
    /// The seq and hash of the state last written to the store (or found
    /// there at open): a checkpoint of the same state is skipped.
    stored: Option<(u64, EventHash)>,
    log: LogReader,
    rebuilds: u64,
}

/// A checkpoint taken from a [`ReadModel`]: a copy of its projections and
/// a handle on its store, to be encoded and written on another thread
/// while the model goes on folding and answering ([`Checkpoint::write`]).
#[derive(Debug)]
pub struct Checkpoint<S: ReadStore> {
    store: S,
    seal_key: Option<SealKey>,
    projections: Projections,
}

/// What a written checkpoint cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointWritten {
    /// The seq it is tagged with.
    pub seq: u64,
    /// Its hash (of the last event folded).
    pub hash: EventHash,
    /// Snapshot bytes.
    pub bytes: usize,
}

impl<S: ReadStore> Checkpoint<S> {
    /// The seq the checkpoint is tagged with.
    pub fn seq(&self) -> u64 {
        self.projections.last_seq
    }

    /// Encodes the snapshot and stores it with its tag, then flushes.
    pub fn write(self) -> Result<CheckpointWritten> {
        write_snapshot(&self.store, self.seal_key.as_ref(), &self.projections)
    }
}

/// Magic of the seal appended to every snapshot written to a read store
/// without a key.
const SEAL_MAGIC: &[u8; 8] = b"VRSSEAL1";
/// Magic of a seal made with a [`SealKey`] (the checksum is a keyed BLAKE3
/// of the same input).
const KEYED_SEAL_MAGIC: &[u8; 8] = b"VRSKEYD1";
/// Length of the seal: magic, the hash of the last event folded, checksum.
const SEAL_LEN: usize = 8 + 32 + 32;
/// `blake3::derive_key` context of the seal's checksum.
const SEAL_CONTEXT: &str = "vouch read store snapshot seal v1";

/// The checksum binding a snapshot's bytes to its seq and hash.
fn seal_sum(key: Option<&SealKey>, seq: u64, hash: &EventHash, bytes: &[u8]) -> [u8; 32] {
    let mut h = match key {
        Some(k) => blake3::Hasher::new_keyed(&k.0),
        None => blake3::Hasher::new_derive_key(SEAL_CONTEXT),
    };
    h.update(&seq.to_le_bytes());
    h.update(&hash.0);
    h.update(bytes);
    *h.finalize().as_bytes()
}

/// `bytes` followed by its seal: `"VRSSEAL1" | hash | BLAKE3 (derive_key
/// mode) of seq, hash and bytes`. The store is trusted on nothing but a
/// seal that verifies (security review finding 11): a snapshot edited
/// inside the store, or moved to another seq, is rebuilt from the log.
fn seal(key: Option<&SealKey>, seq: u64, hash: &EventHash, mut bytes: Vec<u8>) -> Vec<u8> {
    let sum = seal_sum(key, seq, hash, &bytes);
    bytes.extend_from_slice(magic(key));
    bytes.extend_from_slice(&hash.0);
    bytes.extend_from_slice(&sum);
    bytes
}

/// The snapshot bytes and the hash they are sealed with, if the seal of
/// `sealed` (tagged `seq`) verifies; otherwise what is wrong.
fn unseal<'a>(
    key: Option<&SealKey>,
    seq: u64,
    sealed: &'a [u8],
) -> std::result::Result<(&'a [u8], EventHash), &'static str> {
    let Some(split) = sealed.len().checked_sub(SEAL_LEN) else {
        return Err("no seal (written by an older build, or cut)");
    };
    let (bytes, tail) = sealed.split_at(split);
    if &tail[..8] != magic(key) {
        let other = if key.is_some() {
            SEAL_MAGIC
        } else {
            KEYED_SEAL_MAGIC
        };
        return Err(if &tail[..8] == other {
            "sealed with a key where none is, or without one where one is (the chain key was \
             added or removed, or the snapshot was written by someone without it)"
        } else {
            "no seal (written by an older build, or damaged)"
        });
    }
    let mut hash = [0u8; 32];
    hash.copy_from_slice(&tail[8..40]);
    let hash = EventHash(hash);
    let sum = seal_sum(key, seq, &hash, bytes);
    if blake3::Hash::from(sum) != blake3::Hash::from_slice(&tail[40..]).map_err(|_| "bad seal")? {
        return Err("its checksum does not match (the snapshot or its tag was changed)");
    }
    Ok((bytes, hash))
}

/// The magic of a seal made with or without a key.
fn magic(key: Option<&SealKey>) -> &'static [u8; 8] {
    if key.is_some() {
        KEYED_SEAL_MAGIC
    } else {
        SEAL_MAGIC
    }
}

fn write_snapshot<S: ReadStore>(
    store: &S,
    key: Option<&SealKey>,
    p: &Projections,
) -> Result<CheckpointWritten> {
    let bytes = seal(key, p.last_seq, &p.last_hash, p.to_snapshot()?);
    store.store(p.last_seq, &bytes)?;
    store.flush()?;
    Ok(CheckpointWritten {
        seq: p.last_seq,
        hash: p.last_hash,
        bytes: bytes.len(),
    })
}

/// Where the log stands against a snapshot's tag.
enum Tag {
    /// The log holds that very event.
    Held,
    /// The log ends before the tag's seq.
    Beyond,
    /// The log holds another event at that seq.
    Other(EventHash),
}

impl<S: ReadStore> ReadModel<S> {
    /// Starts from the store's snapshot when it is usable (decodes, and the
    /// log has the event it is tagged with), otherwise from nothing; replays
    /// the log's tail; checkpoints. A store that lost writes is only behind:
    /// it ends up with the same state as a full replay.
    ///
    /// A snapshot *ahead* of the log (tagged with a seq the log does not
    /// reach, or with another event at that seq) is a second witness of
    /// acknowledged events the log lost: it is an
    /// [`EventError::ReadStoreAhead`], unless the log itself records the
    /// loss (a `service.log_repaired` event whose cut starts at or below
    /// the tag), in which case the state is rebuilt from the log.
    pub fn open(store: S, log: &LogReader) -> Result<Self> {
        Self::open_sealed(store, log, None)
    }

    /// [`ReadModel::open`], with snapshots sealed (and trusted only when
    /// sealed) with `key`: a log with a chain key gives its read store
    /// [`ChainKey::read_store_seal_key`](crate::ChainKey::read_store_seal_key),
    /// so that whoever can write the data directory but lacks the key
    /// cannot plant a state the log does not hold.
    pub fn open_sealed(store: S, log: &LogReader, key: Option<SealKey>) -> Result<Self> {
        let started = std::time::Instant::now();
        let mut projections = Projections::new();
        let loaded = store.load_snapshot().map(|s| {
            s.and_then(|snap| match unseal(key.as_ref(), snap.seq, &snap.bytes) {
                Ok((bytes, hash)) => Some((snap.seq, hash, bytes.to_vec())),
                Err(why) => {
                    tracing::error!(
                        seq = snap.seq,
                        why,
                        "read store snapshot does not verify; rebuilding from the log"
                    );
                    None
                }
            })
        });
        match loaded {
            Ok(Some((seq, hash, bytes))) => match Projections::from_snapshot(&bytes) {
                Ok(p) if p.last_seq == seq && p.last_hash == hash => {
                    match tag_in_log(log, seq, p.last_hash)? {
                        Tag::Held => projections = p,
                        found => {
                            let what = match found {
                                Tag::Other(h) => format!(
                                    "the log holds another event at seq {} (hash {h}, the read \
                                 store folded {})",
                                    seq, p.last_hash
                                ),
                                _ => format!(
                                "the read store reflects events up to seq {}, but the log ends \
                                 before it{}",
                                seq,
                                log.committed_seq()
                                    .map(|c| format!(" (at seq {c})"))
                                    .unwrap_or_default()
                            ),
                            };
                            match repair_in_log(log, seq)? {
                                Some(r) => tracing::error!(
                                seq = seq,
                                repaired_from = r,
                                "read store snapshot ahead of the log, explained by a recorded \
                                 service.log_repaired: rebuilding from the log"
                            ),
                                None => {
                                    return Err(EventError::ReadStoreAhead {
                                        seq,
                                        message: format!(
                                            "{what}. Acknowledged events are missing from the log \
                                         and it records no repair: was the log directory \
                                         restored from an older copy, or replaced? Restore the \
                                         newer log if there is one; to go on with the log as it \
                                         is, start with `vouch serve --repair-log` (the read \
                                         store is set aside and rebuilt)"
                                        ),
                                    });
                                }
                            }
                        }
                    }
                }
                Ok(_) => tracing::warn!(
                    seq = seq,
                    "read store snapshot does not match its tag; rebuilding"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "read store snapshot unreadable; rebuilding from the log")
                }
            },
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "read store snapshot unreadable; rebuilding from the log")
            }
        }
        let loaded = started.elapsed();
        let from = projections.last_seq;
        let stored = (from > 0).then_some((from, projections.last_hash));
        let mut model = ReadModel {
            store,
            seal_key: key,
            projections,
            snapshot_seq: from,
            stored,
            log: log.clone(),
            rebuilds: 0,
        };
        let applied = model.catch_up(log)?;
        let replayed = started.elapsed();
        // A snapshot that is the log's head needs no new checkpoint:
        // writing the same state again only delays the start.
        if applied > 0 || from == 0 {
            model.checkpoint()?;
        }
        tracing::info!(
            snapshot_seq = from,
            replayed = applied,
            last_seq = model.projections.last_seq,
            load_ms = loaded.as_millis() as u64,
            replay_ms = (replayed - loaded).as_millis() as u64,
            checkpoint_ms = (started.elapsed() - replayed).as_millis() as u64,
            "read model ready"
        );
        Ok(model)
    }

    /// Applies every event of the log after the last applied one (up to
    /// the reader's committed seq); returns how many. An event that does not
    /// chain to the last one folded (the model folded something the log no
    /// longer holds) makes it rebuild from the start of the log.
    pub fn catch_up(&mut self, log: &LogReader) -> Result<u64> {
        let mut n = 0;
        for env in log.replay_from(self.projections.last_seq + 1)? {
            let env = env?;
            if env.prev_hash != self.projections.last_hash {
                return self.rebuild(log, env.seq);
            }
            self.projections.apply(&env);
            n += 1;
        }
        Ok(n)
    }

    /// Applies one envelope (from a subscription). One at or below the
    /// last applied seq is ignored; one after a gap is read from the log
    /// (catch-up); one that does not chain to the last applied event makes
    /// the model rebuild from the log.
    pub fn apply(&mut self, env: &Envelope) {
        let last = self.projections.last_seq;
        if env.seq <= last {
            return;
        }
        let log = self.log.clone();
        let result = if env.seq != last + 1 {
            self.catch_up(&log)
        } else if env.prev_hash != self.projections.last_hash {
            self.rebuild(&log, env.seq)
        } else {
            self.projections.apply(env);
            return;
        };
        if let Err(e) = result {
            tracing::error!(error = %e, seq = env.seq, "read model could not read the log");
        }
    }

    fn rebuild(&mut self, log: &LogReader, at: u64) -> Result<u64> {
        tracing::error!(
            seq = at,
            last_applied = self.projections.last_seq,
            "read model: the log does not chain to what was folded (an event read before it was \
             durable, or a log that changed under the model); rebuilding from the log"
        );
        let mut p = Projections::new();
        let mut n = 0;
        for env in log.replay_from(1)? {
            p.apply(&env?);
            n += 1;
        }
        self.projections = p;
        self.snapshot_seq = 0;
        self.rebuilds += 1;
        Ok(n)
    }

    /// Writes the snapshot, tagged with the last applied seq, here and
    /// now (at open and at shutdown; a running service uses
    /// [`ReadModel::take_checkpoint`]). A state already stored is not
    /// written again.
    pub fn checkpoint(&mut self) -> Result<()> {
        if self.stored != Some((self.projections.last_seq, self.projections.last_hash)) {
            let w = write_snapshot(&self.store, self.seal_key.as_ref(), &self.projections)?;
            self.checkpoint_written(&w);
        }
        Ok(())
    }

    /// A copy of the state to checkpoint, to be written elsewhere
    /// ([`Checkpoint::write`], then [`ReadModel::checkpoint_written`]);
    /// `None` when the store already holds this state. The copy costs a
    /// clone of the projections; the encoding and the store's writes,
    /// which cost far more, happen in `write`.
    pub fn take_checkpoint(&self) -> Option<Checkpoint<S>>
    where
        S: Clone,
    {
        let now = (self.projections.last_seq, self.projections.last_hash);
        if self.stored == Some(now) {
            return None;
        }
        Some(Checkpoint {
            store: self.store.clone(),
            seal_key: self.seal_key.clone(),
            projections: self.projections.clone(),
        })
    }

    /// Records that a checkpoint was written (a later one of the same
    /// state is skipped).
    pub fn checkpoint_written(&mut self, w: &CheckpointWritten) {
        self.stored = Some((w.seq, w.hash));
    }

    /// The key its snapshots are sealed with, if any (to reopen the store
    /// as it was opened).
    pub fn seal_key(&self) -> Option<SealKey> {
        self.seal_key.clone()
    }

    /// The current state.
    pub fn projections(&self) -> &Projections {
        &self.projections
    }

    /// The seq of the snapshot [`ReadModel::open`] started from (0: it
    /// rebuilt from the start of the log).
    pub fn snapshot_seq(&self) -> u64 {
        self.snapshot_seq
    }

    /// How many times the model found the log not chaining to what it had
    /// folded and rebuilt from the log since it was opened.
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds
    }

    /// The store (for index queries).
    pub fn store(&self) -> &S {
        &self.store
    }
}

/// Whether the log holds this very event (same seq, same hash); seq 0
/// trivially.
fn tag_in_log(log: &LogReader, seq: u64, hash: EventHash) -> Result<Tag> {
    if seq == 0 {
        return Ok(Tag::Held);
    }
    match log.replay_from(seq)?.next() {
        Some(Ok(env)) if env.seq == seq && env.hash == hash => Ok(Tag::Held),
        Some(Ok(env)) => Ok(Tag::Other(env.hash)),
        Some(Err(e)) => Err(e),
        None => Ok(Tag::Beyond),
    }
}

/// The seq of a recorded `service.log_repaired` whose cut starts at or
/// below `seq`, if the log has one.
fn repair_in_log(log: &LogReader, seq: u64) -> Result<Option<u64>> {
    for env in log.replay_from(1)? {
        if let Event::LogRepaired(r) = env?.event {
            if r.from_seq <= seq {
                return Ok(Some(r.from_seq));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;
    use crate::error::EventError;
    use crate::event::*;
    use crate::ids::*;
    use crate::log::{EventLog, LogOptions};
    use crate::projection::PointState;
    use crate::store::{MemoryStore, SledStore};
    use crate::testkit::{evidence, plan_def, sid};

    fn history(n: u8) -> Vec<Event> {
        let mut v: Vec<Event> = vec![PlanCreated {
            plan: PlanId::new("p1"),
            definition: plan_def(3600, 3600),
        }
        .into()];
        for i in 1..=n {
            v.push(
                BackupCommitted {
                    job: None,
                    plan: Some(PlanId::new(if i % 2 == 0 { "p1" } else { "p2" })),
                    repository: RepositoryId::new("main"),
                    snapshot: sid(i),
                    snapshot_time_unix_ns: i as i64 * 1000,
                    summary: BackupSummary {
                        files: 1,
                        ..BackupSummary::default()
                    },
                    changes: None,
                }
                .into(),
            );
            if i % 3 == 0 {
                v.push(
                    VerificationPassed {
                        point: sid(i),
                        job: None,
                        depth: crate::VerifyDepth::ReadAll,
                        bytes_read: 1,
                        blobs_checked: 1,
                    }
                    .into(),
                );
            }
            if i % 6 == 0 {
                v.push(
                    RestoreTestPassed {
                        point: sid(i),
                        job: None,
                        evidence: evidence(),
                    }
                    .into(),
                );
            }
        }
        v
    }

    fn log_with(dir: &std::path::Path, events: &[Event]) -> EventLog {
        let mut log = EventLog::open(dir, LogOptions::default(), Arc::new(ManualClock::new(5)))
            .expect("open");
        log.append(events).expect("append");
        log
    }

    /// What a model answers: its projections, and what its store holds.
    fn answers<S: ReadStore>(m: &ReadModel<S>) -> (Projections, u64) {
        (
            m.projections().clone(),
            m.store().last_applied_seq().expect("seq"),
        )
    }

    #[test]
    fn a_deleted_sled_store_gives_the_same_answers_after_a_rebuild() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = log_with(&dir.path().join("log"), &history(12));
        let store_path = dir.path().join("store");
        let first = answers(
            &ReadModel::open(SledStore::open(&store_path).expect("store"), &log.reader())
                .expect("model"),
        );
        let recoverable: Vec<SnapshotId> = first
            .0
            .points
            .points
            .values()
            .filter(|p| p.state == PointState::Recoverable)
            .map(|p| p.id)
            .collect();
        assert_eq!(recoverable, vec![sid(6), sid(12)]);
        assert_eq!(first.1, first.0.last_seq);
        std::fs::remove_dir_all(&store_path).expect("rm");
        let again = answers(
            &ReadModel::open(SledStore::open(&store_path).expect("store"), &log.reader())
                .expect("model"),
        );
        assert_eq!(first, again);
    }

    #[test]
    fn a_store_that_is_behind_catches_up_to_a_full_replay() {
        let dir = tempfile::tempdir().expect("tempdir");
        let events = history(12);
        let mut log = log_with(&dir.path().join("log"), &events[..5]);
        let store_path = dir.path().join("store");
        {
            let m = ReadModel::open(SledStore::open(&store_path).expect("store"), &log.reader())
                .expect("model");
            assert_eq!(m.projections().last_seq, 5);
        }
        log.append(&events[5..]).expect("append");
        let store = SledStore::open(&store_path).expect("store");
        assert_eq!(store.last_applied_seq().expect("seq"), 5);
        let m = ReadModel::open(store, &log.reader()).expect("model");
        assert_eq!(m.snapshot_seq(), 5, "only the tail is replayed");
        let full = Projections::fold(
            &log.reader()
                .replay_from(1)
                .expect("replay")
                .collect::<Result<Vec<_>>>()
                .expect("read"),
        );
        assert_eq!(m.projections(), &full);
        assert_eq!(
            m.store().last_applied_seq().expect("seq"),
            events.len() as u64
        );
    }

    #[test]
    fn a_store_that_fails_to_open_is_set_aside_and_rebuilt() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = log_with(&dir.path().join("log"), &history(6));
        let store_path = dir.path().join("store");
        let good = answers(&ReadModel::open(MemoryStore::new(), &log.reader()).expect("model"));
        // Not a sled directory at all.
        std::fs::write(&store_path, b"garbage").expect("write");
        let (store, aside) = SledStore::open_or_set_aside(&store_path).expect("open");
        assert!(aside.as_ref().is_some_and(|p| p.exists()));
        let rebuilt = answers(&ReadModel::open(store, &log.reader()).expect("model"));
        assert_eq!(good, rebuilt);
    }

    /// Security review finding 11: the read store was trusted on its seq
    /// and hash alone, so a snapshot edited inside sled (here: the state
    /// changed, re-encoded, and put back with its tag and whatever trailer
    /// it had) was served as is. Now it must not verify, and the model is
    /// rebuilt from the log.
    #[test]
    fn regression_finding_11_a_read_store_snapshot_edited_on_disk_is_detected_and_rebuilt() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = log_with(&dir.path().join("log"), &history(12));
        let store_path = dir.path().join("store");
        let good = answers(
            &ReadModel::open(SledStore::open(&store_path).expect("store"), &log.reader())
                .expect("model"),
        );
        {
            let store = SledStore::open(&store_path).expect("store");
            let snap = store.load_snapshot().expect("load").expect("a snapshot");
            let mut p = Projections::from_snapshot(&snap.bytes).expect("decode");
            let plain_len = p.to_snapshot().expect("encode").len();
            assert!(p.latest_recorded_unix_ns != 0);
            p.latest_recorded_unix_ns = 0;
            p.inconsistencies_total += 41;
            let mut edited = p.to_snapshot().expect("encode");
            assert_eq!(edited.len(), plain_len, "an edit of the same size");
            edited.extend_from_slice(&snap.bytes[plain_len..]);
            store.store(snap.seq, &edited).expect("store");
            store.flush().expect("flush");
        }
        let m = ReadModel::open(SledStore::open(&store_path).expect("store"), &log.reader())
            .expect("model");
        assert_eq!(m.snapshot_seq(), 0, "rebuilt from the log, not loaded");
        assert_eq!(answers(&m), good);
        // The rebuilt state was checkpointed again, sealed: the next open
        // loads it.
        drop(m);
        let m = ReadModel::open(SledStore::open(&store_path).expect("store"), &log.reader())
            .expect("model");
        assert_eq!(m.snapshot_seq(), good.1);
        assert_eq!(answers(&m), good);
    }

    #[test]
    fn a_sealed_snapshot_moved_to_another_seq_is_rebuilt() {
        let sealed = seal(None, 7, &EventHash([1; 32]), b"state".to_vec());
        assert_eq!(
            unseal(None, 7, &sealed),
            Ok((&b"state"[..], EventHash([1; 32])))
        );
        assert!(unseal(None, 6, &sealed).is_err());
        assert!(unseal(None, 7, b"state").is_err());
        let mut flipped = sealed.clone();
        flipped[2] ^= 1;
        assert!(unseal(None, 7, &flipped).is_err());
    }

    /// With a chain key, the read store is trusted only on a seal made
    /// with it: a snapshot sealed without a key (as anyone who can write
    /// the data directory could make one) or with another key is rebuilt
    /// from the log, never loaded.
    #[test]
    fn with_a_key_only_a_snapshot_sealed_with_it_is_loaded() {
        use crate::ChainKey;
        let key = |b: u8| Some(ChainKey::from_bytes([b; 32]).read_store_seal_key());
        let sealed = seal(key(1).as_ref(), 7, &EventHash([1; 32]), b"state".to_vec());
        assert!(unseal(key(1).as_ref(), 7, &sealed).is_ok());
        assert!(unseal(key(2).as_ref(), 7, &sealed).is_err());
        assert!(unseal(None, 7, &sealed).is_err());
        let plain = seal(None, 7, &EventHash([1; 32]), b"state".to_vec());
        assert!(unseal(key(1).as_ref(), 7, &plain).is_err());

        let dir = tempfile::tempdir().expect("tempdir");
        let log = log_with(&dir.path().join("log"), &history(12));
        let store = MemoryStore::new();
        let open = |k| ReadModel::open_sealed(store.clone(), &log.reader(), k).expect("model");
        let good = answers(&open(key(1)));
        let m = open(key(1));
        assert_eq!(m.snapshot_seq(), good.1, "its own seal: loaded");
        drop(m);
        let m = open(key(2));
        assert_eq!(m.snapshot_seq(), 0, "another key's seal: rebuilt");
        assert_eq!(answers(&m), good);
        drop(m);
        // An unkeyed open leaves an unkeyed seal behind (a forger's).
        let m = open(None);
        assert_eq!(m.snapshot_seq(), 0);
        drop(m);
        let m = open(key(1));
        assert_eq!(m.snapshot_seq(), 0, "an unkeyed seal: rebuilt");
        assert_eq!(answers(&m), good);
    }

    #[test]
    fn a_truncated_sled_store_is_behind_or_rebuilt_never_wrong() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = log_with(&dir.path().join("log"), &history(12));
        let store_path = dir.path().join("store");
        let good = answers(
            &ReadModel::open(SledStore::open(&store_path).expect("store"), &log.reader())
                .expect("model"),
        );
        for entry in std::fs::read_dir(&store_path).expect("ls") {
            let path = entry.expect("entry").path();
            if path.is_file() {
                let len = std::fs::metadata(&path).expect("meta").len();
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .expect("open");
                f.set_len(len / 3).expect("truncate");
            }
        }
        let (store, _) = SledStore::open_or_set_aside(&store_path).expect("open");
        let again = answers(&ReadModel::open(store, &log.reader()).expect("model"));
        assert_eq!(good, again);
    }

    #[test]
    fn a_snapshot_ahead_of_the_log_is_an_error_not_a_silent_rebuild() {
        let dir = tempfile::tempdir().expect("tempdir");
        let events = history(6);
        let store = MemoryStore::new();
        {
            let log = log_with(&dir.path().join("a"), &events);
            ReadModel::open(store.clone(), &log.reader()).expect("model");
        }
        // The same store against a shorter log (e.g. the log restored from
        // an older backup): acknowledged events are missing from the log.
        let log = log_with(&dir.path().join("b"), &events[..3]);
        let err = ReadModel::open(store.clone(), &log.reader()).expect_err("must refuse");
        match &err {
            EventError::ReadStoreAhead { seq, message } => {
                assert_eq!(*seq, events.len() as u64);
                assert!(message.contains("ends before it (at seq 3)"), "{message}");
                assert!(message.contains("--repair-log"), "{message}");
            }
            other => panic!("expected ReadStoreAhead, got {other:?}"),
        }
        // The store was left as it was (the evidence is kept).
        assert_eq!(store.last_applied_seq().expect("seq"), events.len() as u64);
        // Set aside (what `--repair-log` does): rebuilt from the log.
        let m = ReadModel::open(MemoryStore::new(), &log.reader()).expect("model");
        assert_eq!(m.projections().last_seq, 3);
        assert_eq!(m.projections().points.points.len(), 2);
    }

    #[test]
    fn a_snapshot_ahead_of_a_log_that_records_its_repair_is_rebuilt() {
        let dir = tempfile::tempdir().expect("tempdir");
        let events = history(6);
        let store = MemoryStore::new();
        {
            let log = log_with(&dir.path().join("a"), &events);
            ReadModel::open(store.clone(), &log.reader()).expect("model");
        }
        let mut log = log_with(&dir.path().join("b"), &events[..3]);
        log.append_one(
            &LogRepaired {
                from_seq: 4,
                bytes: 100,
                acknowledged_seq: events.len() as u64,
                lost_acknowledged: true,
                reason: "test".into(),
            }
            .into(),
        )
        .expect("append");
        let m = ReadModel::open(store, &log.reader()).expect("model");
        assert_eq!(m.snapshot_seq(), 0);
        assert_eq!(m.projections().last_seq, 4);
    }

    #[test]
    fn a_snapshot_of_another_log_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let events = history(6);
        let store = MemoryStore::new();
        {
            let log = log_with(&dir.path().join("a"), &events);
            ReadModel::open(store.clone(), &log.reader()).expect("model");
        }
        // A log as long, but with other events (other times: other hashes).
        let mut other = EventLog::open(
            dir.path().join("b"),
            LogOptions::default(),
            Arc::new(ManualClock::new(99)),
        )
        .expect("open");
        other.append(&events).expect("append");
        let err = ReadModel::open(store, &other.reader()).expect_err("must refuse");
        assert!(
            matches!(&err, EventError::ReadStoreAhead { message, .. } if message.contains("another event")),
            "{err}"
        );
    }

    #[test]
    fn memory_and_sled_stores_answer_alike() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = log_with(&dir.path().join("log"), &history(12));
        let a = answers(&ReadModel::open(MemoryStore::new(), &log.reader()).expect("model"));
        let b = answers(
            &ReadModel::open(
                SledStore::open(dir.path().join("s")).expect("store"),
                &log.reader(),
            )
            .expect("model"),
        );
        assert_eq!(a, b);
    }

    #[test]
    fn a_checkpoint_written_elsewhere_while_the_model_goes_on_is_a_consistent_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let events = history(12);
        let mut log = log_with(&dir.path().join("log"), &events[..6]);
        let store = MemoryStore::new();
        let mut m = ReadModel::open(store.clone(), &log.reader()).expect("model");
        let at_open = store.stores();
        assert!(
            m.take_checkpoint().is_none(),
            "the state just checkpointed at open is not taken again"
        );
        m.checkpoint().expect("checkpoint");
        assert_eq!(store.stores(), at_open, "nor written again");

        log.append(&events[6..]).expect("append");
        m.catch_up(&log.reader()).expect("catch up");
        let job = m.take_checkpoint().expect("a changed state is taken");
        let copied_at = job.seq();
        assert_eq!(copied_at, events.len() as u64);
        // The model goes on while the copy is written on another thread.
        log.append_one(
            &BackupCommitted {
                job: None,
                plan: Some(PlanId::new("p1")),
                repository: RepositoryId::new("main"),
                snapshot: sid(99),
                snapshot_time_unix_ns: 99_000,
                summary: BackupSummary::default(),
                changes: None,
            }
            .into(),
        )
        .expect("append");
        let writer = std::thread::spawn(move || job.write().expect("write"));
        m.catch_up(&log.reader()).expect("catch up");
        let written = writer.join().expect("thread");
        assert_eq!(written.seq, copied_at);
        m.checkpoint_written(&written);
        assert_eq!(store.last_applied_seq().expect("seq"), copied_at);
        // The written state is the copy's, not the model's later one, and
        // a reopen from it plus the log's tail is a full replay.
        let full = Projections::fold(
            &log.reader()
                .replay_from(1)
                .expect("replay")
                .collect::<Result<Vec<_>>>()
                .expect("read"),
        );
        let reopened = ReadModel::open(store.clone(), &log.reader()).expect("reopen");
        assert_eq!(reopened.snapshot_seq(), copied_at);
        assert_eq!(reopened.projections(), &full);
        assert_eq!(m.projections(), &full);
        // The model's newer state is still to be checkpointed.
        assert!(m.take_checkpoint().is_some());
    }
}
