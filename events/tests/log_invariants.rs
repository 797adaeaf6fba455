//! The log's invariants under crashes and power loss, on real files:
//!
//! - an acknowledged event is never cut silently (M1): damage at or below
//!   the durable head refuses to open, or, with the repair option, is cut
//!   and recorded as `service.log_repaired { lost_acknowledged: true }`;
//! - a tail beyond the head (an append that was never acknowledged) is cut
//!   whatever its shape, and every cut is recorded (M1, L4);
//! - nothing written but not yet committed is ever folded (M2);
//! - missing leading segments are an error (L2); a segment being created
//!   is the end of the log for a reader (L11).
//!
//! A power cut loses the bytes the disk had not made durable. It is
//! simulated here by writing the in-flight batch, then putting back the
//! head as it was before that batch (its head write never happened) and
//! mangling the batch's bytes the ways a power cut can: cut short, a page
//! left zero, pages out of order, a flipped byte.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use vouch_events::{
    format, verify_chain, Envelope, Event, EventError, EventLog, JobFinished, JobId, LogOptions,
    LogReader, LogRepaired, ManualClock, MemoryStore, ReadModel, SnapshotId, VerificationFailed,
    VerifyDepth,
};

fn ev(n: u64) -> Event {
    JobFinished {
        job: JobId::new(format!("job-{n}")),
    }
    .into()
}

fn opts() -> LogOptions {
    LogOptions::default()
}

fn repair_opts() -> LogOptions {
    LogOptions {
        allow_cut_acknowledged: true,
        ..LogOptions::default()
    }
}

fn open_with(dir: &Path, o: LogOptions) -> Result<EventLog, EventError> {
    EventLog::open(dir, o, Arc::new(ManualClock::new(1_000)))
}

fn open(dir: &Path) -> EventLog {
    open_with(dir, opts()).expect("open")
}

fn all(dir: &Path) -> Vec<Envelope> {
    LogReader::new(dir)
        .replay_from(1)
        .expect("replay")
        .collect::<Result<Vec<_>, _>>()
        .expect("read")
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .expect("ls")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    v.sort();
    v
}

fn last_segment(dir: &Path) -> PathBuf {
    segments(dir).pop().expect("a segment")
}

/// (offset, len) of every record of a segment (the framing: u32 length,
/// 32-byte hash, body; after the segment header).
fn records(path: &Path) -> Vec<(usize, usize)> {
    let data = fs::read(path).expect("read");
    let mut out = Vec::new();
    let mut pos = format::SEGMENT_HEADER_LEN;
    while pos + format::RECORD_HEADER_LEN <= data.len() {
        let mut l = [0u8; 4];
        l.copy_from_slice(&data[pos..pos + 4]);
        let len = format::RECORD_HEADER_LEN + u32::from_le_bytes(l) as usize;
        if pos + len > data.len() || len == format::RECORD_HEADER_LEN {
            break;
        }
        out.push((pos, len));
        pos += len;
    }
    out
}

fn head(dir: &Path) -> Vec<u8> {
    fs::read(dir.join("HEAD")).expect("read HEAD")
}

fn set_head(dir: &Path, bytes: &[u8]) {
    fs::write(dir.join("HEAD"), bytes).expect("write HEAD");
}

fn repaired(env: &Envelope) -> LogRepaired {
    match &env.event {
        Event::LogRepaired(r) => r.clone(),
        other => panic!(
            "seq {}: expected service.log_repaired, got {other:?}",
            env.seq
        ),
    }
}

fn torn_files(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .expect("ls")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains(".torn"))
        .collect()
}

/// The review's M1 repro: five events, the fifth a `verification.failed`;
/// one byte of the fifth flipped. It used to open with `last_seq() == 4`
/// and give seq 5 to the next append.
#[test]
fn m1_damage_to_the_last_acknowledged_event_refuses_to_open() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    {
        let mut log = open(dir);
        for i in 1..=4 {
            log.append_one(&ev(i)).expect("append");
        }
        log.append_one(
            &VerificationFailed {
                point: SnapshotId([5; 32]),
                job: None,
                depth: VerifyDepth::ReadAll,
                bytes_read: 1,
                damaged: vec!["pack 00ff".into()],
            }
            .into(),
        )
        .expect("append");
    }
    let seg = last_segment(dir);
    let recs = records(&seg);
    let mut data = fs::read(&seg).expect("read");
    let (off, len) = recs[4];
    data[off + len - 2] ^= 0x01;
    fs::write(&seg, &data).expect("write");

    let err = open_with(dir, opts()).expect_err("acknowledged event 5 is damaged");
    let msg = err.to_string();
    assert!(matches!(err, EventError::Corrupt { seq: 5, .. }), "{msg}");
    assert!(msg.contains("events 5 to 5 had been acknowledged"), "{msg}");
    assert!(msg.contains("--repair-log"), "{msg}");
    assert_eq!(fs::read(&seg).expect("read"), data, "nothing may be cut");
    assert!(torn_files(dir).is_empty());

    // The operator accepts the loss: cut, set aside, recorded.
    let mut log = open_with(dir, repair_opts()).expect("open with the repair option");
    assert_eq!(log.last_seq(), 5);
    let back = all(dir);
    let r = repaired(&back[4]);
    assert_eq!(
        (r.from_seq, r.bytes, r.acknowledged_seq, r.lost_acknowledged),
        (5, len as u64, 5, true),
        "{r:?}"
    );
    assert_eq!(torn_files(dir).len(), 1);
    log.append_one(&ev(6)).expect("append");
    drop(log);
    // The head moved on with the repaired log: a plain open works again.
    assert_eq!(open(dir).last_seq(), 6);
    assert!(verify_chain(dir).expect("verify").ok());
}

/// The head is beyond the end of a log that ends cleanly on a record: a
/// whole acknowledged batch vanished (a lost write, an older copy).
#[test]
fn m1_a_head_ahead_of_a_clean_log_is_loss_not_a_torn_tail() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    {
        let mut log = open(dir);
        log.append(&[ev(1), ev(2)]).expect("append");
        log.append(&[ev(3), ev(4)]).expect("append");
    }
    let seg = last_segment(dir);
    let (off3, _) = records(&seg)[2];
    let f = fs::OpenOptions::new().write(true).open(&seg).expect("open");
    f.set_len(off3 as u64).expect("truncate");
    drop(f);
    let err = open_with(dir, opts()).expect_err("acknowledged 3 and 4 are gone");
    let msg = err.to_string();
    assert!(msg.contains("events 3 to 4 are lost"), "{msg}");
    let log = open_with(dir, repair_opts()).expect("repair");
    assert_eq!(log.last_seq(), 3);
    let r = repaired(&all(dir)[2]);
    assert_eq!(
        (r.from_seq, r.bytes, r.acknowledged_seq, r.lost_acknowledged),
        (3, 0, 4, true)
    );
}

/// Another log's segment under this log's head: the event at the head's
/// seq is not the acknowledged one.
#[test]
fn m1_a_log_replaced_under_its_head_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    open(&a).append(&[ev(1), ev(2)]).expect("append");
    EventLog::open(&b, opts(), Arc::new(ManualClock::new(7)))
        .expect("open")
        .append(&[ev(1), ev(2)])
        .expect("append");
    fs::copy(last_segment(&b), last_segment(&a)).expect("copy");
    let err = open_with(&a, opts()).expect_err("refused");
    assert!(
        err.to_string().contains("not the one acknowledged"),
        "{err}"
    );
}

/// L4: a batch that was never acknowledged, some of whose pages reached
/// the disk before an earlier one did: whole records follow the damage.
/// The head says it was not acknowledged, so it is cut and set aside,
/// never refused (an older build refused to open here).
#[test]
fn m1_l4_an_unacknowledged_tail_with_whole_records_after_the_damage_is_cut() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let before;
    {
        let mut log = open(dir);
        log.append(&[ev(1), ev(2)]).expect("append");
        before = head(dir);
        log.append(&[ev(3), ev(4), ev(5)]).expect("append");
    }
    set_head(dir, &before);
    let seg = last_segment(dir);
    let recs = records(&seg);
    let mut data = fs::read(&seg).expect("read");
    let full_len = data.len();
    let (off3, len3) = recs[2];
    data[off3..off3 + len3].fill(0);
    fs::write(&seg, &data).expect("write");
    let log = open(dir);
    assert_eq!(log.last_seq(), 3, "seqs 1, 2 and the repair event");
    let back = all(dir);
    assert_eq!(
        back[..2].iter().map(|e| &e.event).collect::<Vec<_>>(),
        [&ev(1), &ev(2)]
    );
    let r = repaired(&back[2]);
    assert_eq!(
        (r.from_seq, r.bytes, r.acknowledged_seq, r.lost_acknowledged),
        (3, (full_len - off3) as u64, 2, false)
    );
    let torn = torn_files(dir);
    assert_eq!(torn.len(), 1);
    assert_eq!(fs::read(&torn[0]).expect("read"), data[off3..].to_vec());
}

/// A log written before the head existed: no `HEAD`. A torn tail is cut as
/// before, and now recorded; damage followed by whole records is refused as
/// before.
#[test]
fn m1_a_log_without_a_head_is_repaired_as_before_and_the_cut_recorded() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    open(dir).append(&[ev(1), ev(2), ev(3)]).expect("append");
    fs::remove_file(dir.join("HEAD")).expect("rm HEAD");
    let seg = last_segment(dir);
    let (off3, len3) = records(&seg)[2];
    let data = fs::read(&seg).expect("read");
    fs::write(&seg, &data[..off3 + len3 / 2]).expect("tear");
    let log = open(dir);
    assert_eq!(log.last_seq(), 3);
    let r = repaired(&all(dir)[2]);
    assert_eq!(
        (r.from_seq, r.acknowledged_seq, r.lost_acknowledged),
        (3, 0, false)
    );
    assert!(r.reason.contains("no acknowledged head"), "{}", r.reason);
    drop(log);
    assert!(
        dir.join("HEAD").exists(),
        "the writer keeps a head from now on"
    );

    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    open(dir).append(&[ev(1), ev(2), ev(3)]).expect("append");
    fs::remove_file(dir.join("HEAD")).expect("rm HEAD");
    let seg = last_segment(dir);
    let (off2, len2) = records(&seg)[1];
    let mut data = fs::read(&seg).expect("read");
    data[off2 + len2 - 1] ^= 1;
    fs::write(&seg, &data).expect("write");
    let err = open_with(dir, opts()).expect_err("a whole record follows");
    assert!(err.to_string().contains("not a torn tail"), "{err}");
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Power cuts at random: each round acknowledges some batches, writes one
/// more whose head write never happened, and mangles that batch's bytes
/// the way a power cut can. Every reopen must succeed without the repair
/// option, keep every acknowledged event unchanged, record every cut, and
/// verify.
#[test]
fn power_cuts_lose_only_unacknowledged_bytes_and_every_cut_is_recorded() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let seed = std::env::var("VOUCH_POWER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15u64);
    let mut rng = Rng(seed | 1);
    let small = LogOptions {
        segment_max_bytes: 2048,
        ..LogOptions::default()
    };
    // What every acknowledged seq holds.
    let mut acked: Vec<Event> = Vec::new();
    let mut cuts = 0;
    let mut n = 0u64;
    for round in 0..80 {
        let mut log = EventLog::open(dir, small.clone(), Arc::new(ManualClock::new(round)))
            .unwrap_or_else(|e| panic!("seed {seed} round {round}: reopen failed: {e}"));
        assert_eq!(
            log.last_seq(),
            acked.len() as u64,
            "seed {seed} round {round}"
        );
        for _ in 0..rng.below(3) {
            let batch: Vec<Event> = (0..1 + rng.below(5))
                .map(|_| {
                    n += 1;
                    ev(n)
                })
                .collect();
            log.append(&batch).expect("append");
            acked.extend(batch);
        }
        let before = head(dir);
        let in_flight: Vec<Event> = (0..1 + rng.below(6))
            .map(|_| {
                n += 1;
                ev(n)
            })
            .collect();
        let seg_before = segments(dir).pop();
        let len_before = seg_before
            .as_ref()
            .map_or(0, |s| fs::metadata(s).expect("meta").len() as usize);
        log.append(&in_flight).expect("append");
        drop(log);
        set_head(dir, &before);
        let seg = last_segment(dir);
        // Where the in-flight batch starts in its segment.
        let start = if Some(&seg) == seg_before.as_ref() {
            len_before
        } else {
            format::SEGMENT_HEADER_LEN
        };
        let mut data = fs::read(&seg).expect("read");
        let region = data.len() - start;
        let how = rng.below(5);
        match how {
            0 => data.truncate(start + rng.below(region as u64) as usize),
            1 => {
                let at = start + rng.below(region as u64) as usize;
                let end = (at + 512).min(data.len());
                data[at..end].fill(0);
            }
            2 => {
                let at = start + rng.below(region as u64) as usize;
                data[at] ^= 1 << rng.below(8);
            }
            3 => {
                // Two halves of the batch swapped (pages out of order).
                let mid = start + region / 2;
                let mut tail = data[mid..].to_vec();
                tail.extend_from_slice(&data[start..mid]);
                data.truncate(start);
                data.extend_from_slice(&tail);
            }
            _ => {} // the whole batch reached the disk, only its head did not
        }
        fs::write(&seg, &data).expect("write");
        let log = EventLog::open(dir, small.clone(), Arc::new(ManualClock::new(round)))
            .unwrap_or_else(|e| panic!("seed {seed} round {round} (how {how}): {e}"));
        let back = all(dir);
        assert!(
            back.len() >= acked.len(),
            "seed {seed} round {round}: acknowledged events lost"
        );
        for (i, e) in acked.iter().enumerate() {
            assert_eq!(
                &back[i].event,
                e,
                "seed {seed} round {round}: seq {}",
                i + 1
            );
        }
        let extra = &back[acked.len()..];
        if how == 4 {
            assert_eq!(
                extra.iter().map(|e| e.event.clone()).collect::<Vec<_>>(),
                in_flight,
                "seed {seed} round {round}: an intact batch is kept"
            );
        } else if extra.len() != in_flight.len()
            || extra.iter().zip(&in_flight).any(|(a, b)| &a.event != b)
        {
            // Something was cut: the repair is the last event.
            let last = back.last().expect("an event");
            let r = repaired(last);
            assert!(!r.lost_acknowledged, "seed {seed} round {round}: {r:?}");
            assert_eq!(r.acknowledged_seq, acked.len() as u64);
            cuts += 1;
        }
        // Whatever survived is acknowledged from now on.
        acked = back.into_iter().map(|e| e.event).collect();
        assert_eq!(log.last_seq(), acked.len() as u64);
        drop(log);
        let report = verify_chain(dir).expect("verify");
        assert!(report.ok(), "seed {seed} round {round}: {report:?}");
    }
    assert!(cuts > 20, "only {cuts} rounds cut anything");
}

/// L2: a log whose first segment is gone is an error for the writer and
/// for readers, never an empty replay.
#[test]
fn l2_missing_leading_segments_are_an_error_at_open_and_for_readers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let small = LogOptions {
        segment_max_bytes: 300,
        ..LogOptions::default()
    };
    {
        let mut log =
            EventLog::open(dir, small.clone(), Arc::new(ManualClock::new(0))).expect("open");
        for i in 1..=10 {
            log.append_one(&ev(i)).expect("append");
        }
    }
    let segs = segments(dir);
    assert!(segs.len() > 2);
    fs::remove_file(&segs[0]).expect("rm");
    let err = EventLog::open(dir, small, Arc::new(ManualClock::new(0))).expect_err("refused");
    assert!(err.to_string().contains("are missing"), "{err}");
    let first = LogReader::new(dir).replay_from(1).expect("replay").next();
    assert!(
        matches!(first, Some(Err(EventError::Corrupt { .. }))),
        "{first:?}"
    );
}

/// L11: a reader at the end of a segment while the writer creates the next
/// one (its header not yet written) sees the end of the log, not damage.
#[test]
fn l11_a_segment_being_created_is_the_end_of_the_log_for_a_reader() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    open(dir).append(&[ev(1), ev(2)]).expect("append");
    let next = dir.join(format::segment_file_name(3));
    for partial in [&b""[..], &b"VOUCH"[..]] {
        fs::write(&next, partial).expect("write");
        let seqs: Vec<u64> = LogReader::new(dir)
            .replay_from(1)
            .expect("replay")
            .map(|e| e.map(|e| e.seq))
            .collect::<Result<_, _>>()
            .expect("no error at a rollover in progress");
        assert_eq!(seqs, vec![1, 2]);
        // Also when the replay starts right at the new segment.
        assert_eq!(
            LogReader::new(dir).replay_from(3).expect("replay").count(),
            0
        );
    }
    // The header is written: the reader goes on into the new segment.
    fs::write(&next, format::segment_header(3)).expect("write");
    assert_eq!(all(dir).len(), 2);
}

/// M2, the review's repro: a record written to the segment but not
/// committed (between the write and the `fdatasync`, or a sync that
/// failed and was undone) must never be folded, and a model that folded
/// something the log no longer holds rebuilds.
#[test]
fn m2_a_phantom_record_is_never_folded_and_a_fork_is_rebuilt() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let mut log = open(&dir);
    log.append_one(&ev(1)).expect("append");
    let seg = last_segment(&dir);
    let committed_len = fs::metadata(&seg).expect("meta").len();
    // A valid frame for seq 2, chained to seq 1: made by a copy of the log.
    let phantom = {
        let copy = tmp.path().join("copy");
        fs::create_dir_all(&copy).expect("mkdir");
        fs::copy(&seg, copy.join(seg.file_name().expect("name"))).expect("copy");
        fs::copy(dir.join("HEAD"), copy.join("HEAD")).expect("copy");
        open(&copy).append_one(&ev(666)).expect("append");
        fs::read(last_segment(&copy)).expect("read")[committed_len as usize..].to_vec()
    };
    let write_phantom = || {
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(&seg)
            .expect("open");
        std::io::Write::write_all(&mut f, &phantom).expect("write");
    };
    let undo_phantom = || {
        let f = fs::OpenOptions::new().write(true).open(&seg).expect("open");
        f.set_len(committed_len).expect("truncate");
    };

    // Bounded by the writer's committed seq: the phantom is not read.
    let mut model = ReadModel::open(MemoryStore::new(), &log.reader()).expect("model");
    write_phantom();
    assert_eq!(model.catch_up(&log.reader()).expect("catch up"), 0);
    assert_eq!(log.reader().replay_from(1).expect("replay").count(), 1);
    undo_phantom();
    log.append_one(&ev(2)).expect("append");
    model.catch_up(&log.reader()).expect("catch up");
    let truth = |log: &EventLog| {
        vouch_events::Projections::fold(
            &log.reader()
                .replay_from(1)
                .expect("replay")
                .collect::<Result<Vec<_>, _>>()
                .expect("read"),
        )
    };
    assert_eq!(model.projections(), &truth(&log));

    // A model that did fold a phantom (through a reader that cannot know
    // what was committed) finds out at the next event and rebuilds.
    let unbounded = LogReader::new(&dir);
    for (round, scratch) in ["copy2", "copy3"].into_iter().enumerate() {
        let len = fs::metadata(&seg).expect("meta").len();
        write_phantom_at(&seg, len, &tmp.path().join(scratch), &dir);
        let mut fooled = ReadModel::open(MemoryStore::new(), &unbounded).expect("model");
        assert_eq!(
            fooled.projections().last_seq,
            log.last_seq() + 1,
            "the phantom was folded"
        );
        let f = fs::OpenOptions::new().write(true).open(&seg).expect("open");
        f.set_len(len).expect("undo");
        drop(f);
        let first = log.last_seq() + 1;
        log.append(&[ev(first), ev(first + 1)]).expect("append");
        if round == 0 {
            // Through the subscription path.
            let envs: Vec<Envelope> = log
                .reader()
                .replay_from(first)
                .expect("replay")
                .collect::<Result<_, _>>()
                .expect("read");
            for env in &envs {
                fooled.apply(env);
            }
        } else {
            fooled.catch_up(&log.reader()).expect("catch up");
        }
        assert_eq!(fooled.rebuilds(), 1, "round {round}");
        assert_eq!(fooled.projections(), &truth(&log), "round {round}");
    }
}

/// Appends to `seg` (of log `dir`, whose writer is open elsewhere) one
/// valid record for the next seq, made by a copy of the log in `scratch`.
fn write_phantom_at(seg: &Path, len: u64, scratch: &Path, dir: &Path) {
    fs::create_dir_all(scratch).expect("mkdir");
    for s in segments(dir) {
        fs::copy(&s, scratch.join(s.file_name().expect("name"))).expect("copy");
    }
    fs::copy(dir.join("HEAD"), scratch.join("HEAD")).expect("copy");
    open(scratch).append_one(&ev(999)).expect("append");
    let bytes = fs::read(last_segment(scratch)).expect("read")[len as usize..].to_vec();
    let mut f = fs::OpenOptions::new().append(true).open(seg).expect("open");
    std::io::Write::write_all(&mut f, &bytes).expect("write");
}

/// A bounded reader (the service's) whose log files disappear under it
/// says so: a replay that ends before the committed seq is an error,
/// never a silently short (or empty) replay.
#[test]
fn a_bounded_replay_short_of_the_committed_seq_is_an_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let mut log = open(&dir);
    log.append(&[ev(1), ev(2), ev(3)]).expect("append");
    let shared = vouch_events::SharedLog::new(log);
    let reader = shared.reader();
    assert_eq!(reader.replay_from(1).expect("replay").count(), 3);
    let aside = tmp.path().join("aside");
    fs::rename(&dir, &aside).expect("move away");
    fs::create_dir(&dir).expect("mkdir");
    let got: Vec<_> = reader.replay_from(1).expect("replay").collect();
    assert_eq!(got.len(), 1, "one error, then the end: {got:?}");
    match &got[0] {
        Err(EventError::Corrupt { seq, message, .. }) => {
            assert_eq!(*seq, 1);
            assert!(
                message.contains("up to seq 3 was acknowledged"),
                "{message}"
            );
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // Part of the log: the replay ends with the error where it stops.
    fs::remove_dir(&dir).expect("rmdir");
    fs::rename(&aside, &dir).expect("move back");
    assert_eq!(reader.replay_from(2).expect("replay").count(), 2);
}
