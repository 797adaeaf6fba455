use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::segment::{list_segments, walk_records};
use super::*;
use crate::clock::ManualClock;
use crate::error::EventError;
use crate::event::{Event, JobFinished, ServiceStarted, UnknownEvent};
use crate::format::{EventHash, GENESIS_HASH, RECORD_HEADER_LEN};
use crate::ids::JobId;
use crate::testkit::sample_events;

fn ev(n: u64) -> Event {
    JobFinished {
        job: JobId::new(format!("job-{n}")),
    }
    .into()
}

fn open(dir: &Path, clock: &ManualClock) -> EventLog {
    EventLog::open(dir, LogOptions::default(), Arc::new(clock.clone())).expect("open")
}

fn open_small(dir: &Path, clock: &ManualClock) -> EventLog {
    EventLog::open(
        dir,
        LogOptions {
            segment_max_bytes: 300,
            ..LogOptions::default()
        },
        Arc::new(clock.clone()),
    )
    .expect("open")
}

fn all(dir: &Path) -> Vec<crate::Envelope> {
    LogReader::new(dir)
        .replay_from(1)
        .expect("replay")
        .collect::<Result<Vec<_>, _>>()
        .expect("read")
}

/// (offset, len) of every record of a segment.
fn records(path: &Path) -> Vec<(usize, usize)> {
    let data = fs::read(path).expect("read");
    let mut out = Vec::new();
    let first = crate::format::parse_segment_header(&data).expect("header");
    walk_records(&data, first, None, |off, _, body| {
        out.push((off, RECORD_HEADER_LEN + body.len()))
    });
    out
}

fn only_segment(dir: &Path) -> PathBuf {
    let segs = list_segments(dir).expect("list");
    assert_eq!(segs.len(), 1);
    segs[0].path.clone()
}

#[test]
fn appended_events_replay_in_order_with_a_valid_chain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(1_000);
    let mut log = open(dir.path(), &clock);
    assert_eq!(log.last_seq(), 0);
    let events = sample_events();
    let r = log.append(&events).expect("append");
    assert_eq!((r.first_seq, r.last_seq), (1, events.len() as u64));
    clock.advance(5);
    let r2 = log.append_one(&ev(99)).expect("append");
    assert_eq!(r2.first_seq, events.len() as u64 + 1);

    let back = all(dir.path());
    assert_eq!(back.len(), events.len() + 1);
    assert_eq!(back[0].prev_hash, GENESIS_HASH);
    for w in back.windows(2) {
        assert_eq!(w[1].prev_hash, w[0].hash);
        assert_eq!(w[1].seq, w[0].seq + 1);
    }
    assert_eq!(
        back.iter()
            .take(events.len())
            .map(|e| e.event.clone())
            .collect::<Vec<_>>(),
        events
    );
    assert_eq!(back[0].recorded_unix_ns, 1_000);
    assert_eq!(back.last().map(|e| e.recorded_unix_ns), Some(1_005));
    assert_eq!(back.last().map(|e| e.hash), Some(r2.last_hash));
    let report = verify_chain(dir.path()).expect("verify");
    assert!(report.ok(), "{report:?}");
    assert_eq!(
        (report.events, report.head),
        (events.len() as u64 + 1, r2.last_hash)
    );
}

#[test]
fn reopening_continues_the_sequence_and_the_chain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let head = {
        let mut log = open(dir.path(), &clock);
        log.append(&[ev(1), ev(2)]).expect("append").last_hash
    };
    let mut log = open(dir.path(), &clock);
    assert_eq!((log.last_seq(), log.last_hash()), (2, head));
    log.append_one(&ev(3)).expect("append");
    let back = all(dir.path());
    assert_eq!(
        back.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(verify_chain(dir.path()).expect("verify").ok());
}

#[test]
fn segments_roll_and_replay_starts_anywhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    {
        let mut log = open_small(dir.path(), &clock);
        for i in 1..=20 {
            log.append_one(&ev(i)).expect("append");
        }
    }
    // Reopen on a segment boundary and keep going.
    let mut log = open_small(dir.path(), &clock);
    log.append(&[ev(21), ev(22)]).expect("append");
    assert!(list_segments(dir.path()).expect("list").len() > 3);
    let report = verify_chain(dir.path()).expect("verify");
    assert!(report.ok(), "{report:?}");
    assert_eq!(report.events, 22);
    for from in [1, 2, 7, 13, 22, 23] {
        let seqs: Vec<u64> = LogReader::new(dir.path())
            .replay_from(from)
            .expect("replay")
            .map(|e| e.expect("env").seq)
            .collect();
        assert_eq!(seqs, (from..=22).collect::<Vec<_>>(), "from {from}");
    }
}

/// The durable head file's bytes (to rewind it: a crash after a batch's
/// `fdatasync` and before its head write leaves exactly that).
fn head_bytes(dir: &Path) -> Vec<u8> {
    fs::read(dir.join("HEAD")).expect("read HEAD")
}

fn set_head(dir: &Path, bytes: &[u8]) {
    fs::write(dir.join("HEAD"), bytes).expect("write HEAD");
}

/// Appends `events` in one batch, then puts the head back as it was: the
/// batch is in the segment but was never acknowledged.
fn append_unacked(dir: &Path, clock: &ManualClock, events: &[Event]) {
    let mut log = open(dir, clock);
    let before = head_bytes(dir);
    log.append(events).expect("append");
    drop(log);
    set_head(dir, &before);
}

fn repaired(env: &crate::Envelope) -> crate::event::LogRepaired {
    match &env.event {
        Event::LogRepaired(r) => r.clone(),
        other => panic!(
            "expected service.log_repaired at seq {}, got {other:?}",
            env.seq
        ),
    }
}

#[test]
fn a_torn_tail_is_cut_kept_aside_and_appends_continue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    open(dir.path(), &clock)
        .append(&[ev(1), ev(2)])
        .expect("append");
    append_unacked(dir.path(), &clock, &[ev(3)]);
    let seg = only_segment(dir.path());
    let recs = records(&seg);
    let full = fs::read(&seg).expect("read");
    // Half of record 3 made it to disk.
    let (off3, len3) = recs[2];
    fs::write(&seg, &full[..off3 + len3 / 2]).expect("tear");

    let mut log = open(dir.path(), &clock);
    // The repair is recorded as the first event after opening, at seq 3.
    assert_eq!(log.last_seq(), 3);
    assert_eq!(&fs::read(&seg).expect("read")[..off3], &full[..off3]);
    let torn: Vec<_> = fs::read_dir(dir.path())
        .expect("ls")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".torn-3"))
        .collect();
    assert_eq!(torn.len(), 1);
    assert_eq!(
        fs::read(torn[0].path()).expect("read"),
        full[off3..off3 + len3 / 2].to_vec()
    );
    log.append_one(&ev(30)).expect("append");
    let back = all(dir.path());
    assert_eq!(
        back.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    let r = repaired(&back[2]);
    assert_eq!(
        (r.from_seq, r.bytes, r.acknowledged_seq, r.lost_acknowledged),
        (3, (len3 / 2) as u64, 2, false)
    );
    assert_eq!(back[3].event, ev(30));
    assert!(verify_chain(dir.path()).expect("verify").ok());
}

#[test]
fn garbage_after_the_last_record_is_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    {
        let mut log = open(dir.path(), &clock);
        log.append(&[ev(1), ev(2)]).expect("append");
    }
    let seg = only_segment(dir.path());
    let mut data = fs::read(&seg).expect("read");
    let good = data.len();
    data.extend_from_slice(&[0u8; 4096]);
    fs::write(&seg, &data).expect("write");
    let log = open(dir.path(), &clock);
    assert_eq!(log.last_seq(), 3);
    let back = all(dir.path());
    assert_eq!(repaired(&back[2]).bytes, 4096);
    assert_eq!(records(&seg)[2].0, good, "cut right after seq 2");
}

#[test]
fn a_segment_whose_creation_was_interrupted_is_set_aside() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    {
        let mut log = open(dir.path(), &clock);
        log.append(&[ev(1), ev(2)]).expect("append");
    }
    fs::write(
        dir.path().join(crate::format::segment_file_name(3)),
        b"VOUCH",
    )
    .expect("write");
    let mut log = open(dir.path(), &clock);
    assert_eq!(log.last_seq(), 2);
    log.append_one(&ev(3)).expect("append");
    assert!(verify_chain(dir.path()).expect("verify").ok());
}

fn log_of_five(dir: &Path) -> PathBuf {
    let clock = ManualClock::new(0);
    let mut log = open(dir, &clock);
    log.append(&[ev(1), ev(2), ev(3), ev(4), ev(5)])
        .expect("append");
    only_segment(dir)
}

#[test]
fn verify_names_a_changed_event() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = log_of_five(dir.path());
    let recs = records(&seg);
    let mut data = fs::read(&seg).expect("read");
    let (off, len) = recs[2];
    data[off + len - 1] ^= 0x01; // inside seq 3's payload
    fs::write(&seg, &data).expect("write");
    let report = verify_chain(dir.path()).expect("verify");
    let p = report.problem.expect("problem");
    assert_eq!((p.seq, p.offset, report.events), (3, off as u64, 2));
    assert!(p.message.contains("checksum"), "{p}");
}

#[test]
fn verify_names_a_changed_event_even_with_a_recomputed_checksum() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = log_of_five(dir.path());
    let recs = records(&seg);
    let mut data = fs::read(&seg).expect("read");
    let (off, len) = recs[2];
    data[off + len - 1] ^= 0x01;
    let new_hash = EventHash::of(&data[off + RECORD_HEADER_LEN..off + len]);
    data[off + 4..off + 36].copy_from_slice(&new_hash.0);
    fs::write(&seg, &data).expect("write");
    let p = verify_chain(dir.path())
        .expect("verify")
        .problem
        .expect("problem");
    assert_eq!(p.seq, 4);
    assert!(p.message.contains("does not chain"), "{p}");
}

#[test]
fn verify_names_a_removed_event() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = log_of_five(dir.path());
    let recs = records(&seg);
    let data = fs::read(&seg).expect("read");
    let (off, len) = recs[1];
    let mut cut = data[..off].to_vec();
    cut.extend_from_slice(&data[off + len..]);
    fs::write(&seg, &cut).expect("write");
    let p = verify_chain(dir.path())
        .expect("verify")
        .problem
        .expect("problem");
    assert_eq!(p.seq, 2);
    assert!(p.message.contains("expected seq 2, found seq 3"), "{p}");
}

#[test]
fn verify_names_reordered_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = log_of_five(dir.path());
    let recs = records(&seg);
    let data = fs::read(&seg).expect("read");
    let (o3, l3) = recs[2];
    let (o4, l4) = recs[3];
    let mut swapped = data[..o3].to_vec();
    swapped.extend_from_slice(&data[o4..o4 + l4]);
    swapped.extend_from_slice(&data[o3..o3 + l3]);
    swapped.extend_from_slice(&data[o4 + l4..]);
    fs::write(&seg, &swapped).expect("write");
    let p = verify_chain(dir.path())
        .expect("verify")
        .problem
        .expect("problem");
    assert_eq!(p.seq, 3);
    assert!(p.message.contains("expected seq 3, found seq 4"), "{p}");
}

#[test]
fn damage_in_an_earlier_segment_is_an_error_not_a_short_replay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    {
        let mut log = open_small(dir.path(), &clock);
        for i in 1..=10 {
            log.append_one(&ev(i)).expect("append");
        }
    }
    let segs = list_segments(dir.path()).expect("list");
    let first = &segs[0].path;
    let mut data = fs::read(first).expect("read");
    let last = data.len() - 1;
    data[last] ^= 0xff;
    fs::write(first, &data).expect("write");
    let results: Vec<_> = LogReader::new(dir.path())
        .replay_from(1)
        .expect("replay")
        .collect();
    assert!(
        results
            .iter()
            .any(|r| matches!(r, Err(EventError::Corrupt { .. }))),
        "{results:?}"
    );
    assert!(!verify_chain(dir.path()).expect("verify").ok());
}

#[test]
fn a_second_writer_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let _log = open(dir.path(), &clock);
    let second = EventLog::open(dir.path(), LogOptions::default(), Arc::new(clock.clone()));
    assert!(matches!(second, Err(EventError::Locked(_))));
}

#[test]
fn unknown_events_survive_a_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), &clock);
    let unknown = Event::Unknown(UnknownEvent {
        event_type: "teleport.done".into(),
        schema_version: 3,
        payload: vec![0x91, 0x01],
    });
    log.append(&[
        unknown.clone(),
        ServiceStarted {
            version: "1".into(),
        }
        .into(),
    ])
    .expect("append");
    let back = all(dir.path());
    assert_eq!(back[0].event, unknown);
    assert_eq!(back[0].schema_version, 3);
}

#[test]
fn a_subscription_sees_every_event_once_across_reconnects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let mut log = open_small(dir.path(), &clock);
    let mut sub = log.subscribe(1);
    assert!(sub.next_timeout(Duration::ZERO).expect("next").is_none());
    log.append(&[ev(1), ev(2), ev(3)]).expect("append");
    let got: Vec<u64> = sub.drain().expect("drain").iter().map(|e| e.seq).collect();
    assert_eq!(got, vec![1, 2, 3]);
    for i in 4..=12 {
        log.append_one(&ev(i)).expect("append");
    }
    let e = sub
        .next_timeout(Duration::ZERO)
        .expect("next")
        .expect("event");
    assert_eq!(e.seq, 4);
    // Reconnect after having handled seq 4.
    drop(sub);
    let mut sub = log.subscribe(5);
    let got: Vec<u64> = sub.drain().expect("drain").iter().map(|e| e.seq).collect();
    assert_eq!(got, (5..=12).collect::<Vec<_>>());
    assert!(sub.drain().expect("drain").is_empty());
    assert_eq!(sub.next_seq(), 13);
}

#[test]
fn a_subscriber_on_another_thread_is_woken_by_an_append() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), &clock);
    let mut sub = log.subscribe(1);
    let handle = std::thread::spawn(move || {
        let mut seqs = Vec::new();
        while seqs.len() < 50 {
            if let Some(e) = sub.next_timeout(Duration::from_secs(30)).expect("next") {
                seqs.push(e.seq);
            }
        }
        seqs
    });
    for i in 1..=50 {
        log.append_one(&ev(i)).expect("append");
    }
    let seqs = handle.join().expect("join");
    assert_eq!(seqs, (1..=50).collect::<Vec<_>>());
}

mod properties {
    use proptest::prelude::*;

    use super::*;
    use crate::projection::Projections;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// Whatever the batching, a log replays to exactly the events
        /// appended, and folding the replay equals folding the events.
        #[test]
        fn a_real_log_replays_what_was_appended_in_any_batching(
            sizes in proptest::collection::vec(1usize..40, 1..8),
            small_segments in any::<bool>(),
        ) {
            let dir = tempfile::tempdir().expect("tempdir");
            let clock = ManualClock::new(0);
            let mut log = if small_segments { open_small(dir.path(), &clock) } else { open(dir.path(), &clock) };
            let samples = sample_events();
            let mut appended = Vec::new();
            for (i, n) in sizes.iter().enumerate() {
                let batch: Vec<Event> = (0..*n).map(|k| samples[(i * 7 + k) % samples.len()].clone()).collect();
                clock.advance(1);
                log.append(&batch).expect("append");
                appended.extend(batch);
            }
            let back = all(dir.path());
            prop_assert_eq!(back.iter().map(|e| e.event.clone()).collect::<Vec<_>>(), appended.clone());
            let from_log = Projections::fold(&back);
            let mut direct = Projections::new();
            for (i, e) in appended.iter().enumerate() {
                direct.apply_event(crate::projection::Recorded { seq: i as u64 + 1, unix_ns: back[i].recorded_unix_ns }, e);
            }
            // Folding without envelopes knows no hashes: take the head's.
            direct.last_hash = back.last().map(|e| e.hash).unwrap_or_default();
            prop_assert_eq!(from_log, direct);
            prop_assert!(verify_chain(dir.path()).expect("verify").ok());
        }
    }
}

#[test]
fn log_types_can_cross_threads() {
    fn send<T: Send>() {}
    fn sync<T: Send + Sync>() {}
    send::<EventLog>();
    send::<Subscription>();
    send::<LogReader>();
    sync::<SharedLog>();
}

mod garbage {
    use proptest::prelude::*;

    use crate::codec::decode_event;
    use crate::format::SEGMENT_HEADER_LEN;
    use crate::log::segment::walk_records;

    proptest! {
        /// Arbitrary bytes never make the record walker or the event
        /// decoder panic: damage is reported, not crashed on.
        #[test]
        fn garbage_is_reported_not_panicked_on(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let mut data = vec![0u8; SEGMENT_HEADER_LEN];
            data.extend_from_slice(&bytes);
            let walk = walk_records(&data, 1, None, |_, _, _| {});
            prop_assert!(walk.valid_len <= data.len());
            let e = decode_event("job.failed", 1, &bytes);
            prop_assert_eq!(e.event_type(), "job.failed");
        }
    }
}

fn torn_files(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = fs::read_dir(dir)
        .expect("ls")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".torn"))
        .collect();
    out.sort();
    out
}

#[test]
fn regression_d1_damage_followed_by_valid_records_refuses_to_open_and_cuts_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = log_of_five(dir.path());
    let recs = records(&seg);
    let mut data = fs::read(&seg).expect("read");
    let (off, len) = recs[1];
    data[off + len - 1] ^= 0x01; // bit rot inside seq 2; seqs 3..5 follow
    fs::write(&seg, &data).expect("write");
    let clock = ManualClock::new(0);
    let err = EventLog::open(dir.path(), LogOptions::default(), Arc::new(clock))
        .expect_err("mid-segment damage must not be cut as a torn tail");
    match &err {
        EventError::Corrupt {
            path,
            offset,
            seq,
            message,
        } => {
            assert_eq!((path, *offset, *seq), (&seg, off as u64, 2));
            assert!(message.contains("not a torn tail"), "{message}");
            assert!(message.contains("truncate"), "{message}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(fs::read(&seg).expect("read"), data, "nothing may be cut");
    assert!(torn_files(dir.path()).is_empty());
}

#[test]
fn regression_d1_a_valid_record_with_a_broken_link_is_not_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = log_of_five(dir.path());
    let recs = records(&seg);
    let data = fs::read(&seg).expect("read");
    // Drop seq 4: seq 5 is whole but does not follow seq 3.
    let (off, len) = recs[3];
    let mut cut = data[..off].to_vec();
    cut.extend_from_slice(&data[off + len..]);
    fs::write(&seg, &cut).expect("write");
    let err = EventLog::open(
        dir.path(),
        LogOptions::default(),
        Arc::new(ManualClock::new(0)),
    )
    .expect_err("must refuse");
    assert!(matches!(err, EventError::Corrupt { seq: 4, .. }), "{err}");
    assert_eq!(fs::read(&seg).expect("read"), cut);
}

#[test]
fn regression_d1_a_second_crash_at_the_same_seq_keeps_both_torn_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let tear_last = |dir: &Path| -> Vec<u8> {
        let seg = only_segment(dir);
        let recs = records(&seg);
        let full = fs::read(&seg).expect("read");
        let (off, len) = recs[recs.len() - 1];
        fs::write(&seg, &full[..off + len / 2]).expect("tear");
        full[off..off + len / 2].to_vec()
    };
    open(dir.path(), &clock)
        .append(&[ev(1), ev(2)])
        .expect("append");
    let head_at_2 = head_bytes(dir.path());
    append_unacked(dir.path(), &clock, &[ev(3)]);
    let first_tail = tear_last(dir.path());
    // Cut at 3; the repair event takes seq 3.
    assert_eq!(open(dir.path(), &clock).last_seq(), 3);
    // The same again: the repair event's own append torn before its ack.
    set_head(dir.path(), &head_at_2);
    let second_tail = tear_last(dir.path());
    assert_eq!(open(dir.path(), &clock).last_seq(), 3);
    let names = torn_files(dir.path());
    assert_eq!(names.len(), 2, "{names:?}");
    let seg = only_segment(dir.path());
    let first = fs::read(format!("{}.torn-3", seg.display())).expect("first");
    let second = fs::read(format!("{}.torn-3.1", seg.display())).expect("second");
    assert_eq!((first, second), (first_tail, second_tail));
}

#[test]
fn regression_d1_a_second_interrupted_segment_creation_keeps_both() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    open(dir.path(), &clock)
        .append(&[ev(1), ev(2)])
        .expect("append");
    let name = crate::format::segment_file_name(3);
    for content in [&b"VOUCH"[..], &b"VOU"[..]] {
        fs::write(dir.path().join(&name), content).expect("write");
        assert_eq!(open(dir.path(), &clock).last_seq(), 2);
    }
    let names = torn_files(dir.path());
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn regression_d7_a_segment_starting_at_seq_zero_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(
        dir.path().join(crate::format::segment_file_name(0)),
        crate::format::segment_header(0),
    )
    .expect("write");
    let r = EventLog::open(
        dir.path(),
        LogOptions::default(),
        Arc::new(ManualClock::new(0)),
    );
    assert!(matches!(r, Err(EventError::BadSegment { .. })), "{r:?}");
}

#[test]
fn regression_d8_the_last_segment_must_chain_to_the_one_before() {
    let a = tempfile::tempdir().expect("tempdir");
    let b = tempfile::tempdir().expect("tempdir");
    // Same sizes (same segment boundaries), different hashes.
    for (dir, t) in [(a.path(), 0), (b.path(), 1)] {
        let clock = ManualClock::new(t);
        let mut log = open_small(dir, &clock);
        for i in 1..=10 {
            log.append_one(&ev(i)).expect("append");
        }
    }
    let segs_a = list_segments(a.path()).expect("list");
    let segs_b = list_segments(b.path()).expect("list");
    assert!(segs_a.len() > 1);
    assert_eq!(
        segs_a.iter().map(|s| s.first_seq).collect::<Vec<_>>(),
        segs_b.iter().map(|s| s.first_seq).collect::<Vec<_>>()
    );
    let last_a = &segs_a[segs_a.len() - 1].path;
    let foreign = fs::read(&segs_b[segs_b.len() - 1].path).expect("read");
    fs::write(last_a, &foreign).expect("swap in a foreign segment");
    let r = EventLog::open(
        a.path(),
        LogOptions::default(),
        Arc::new(ManualClock::new(0)),
    );
    match r {
        Err(EventError::Corrupt { message, .. }) => {
            assert!(message.contains("does not chain"), "{message}")
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(fs::read(last_a).expect("read"), foreign);
}

#[test]
fn regression_d3_a_bad_checksum_in_the_last_segment_is_an_error_not_an_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = log_of_five(dir.path());
    let recs = records(&seg);
    for victim in [1usize, 4] {
        let mut data = fs::read(&seg).expect("read");
        let (off, len) = recs[victim];
        data[off + len - 1] ^= 0x01;
        let tmp = tempfile::tempdir().expect("tempdir");
        fs::write(tmp.path().join(seg.file_name().expect("name")), &data).expect("write");
        let results: Vec<_> = LogReader::new(tmp.path())
            .replay_from(1)
            .expect("replay")
            .collect();
        assert_eq!(results.len(), victim + 1, "victim {victim}: {results:?}");
        assert!(
            matches!(results[victim], Err(EventError::Corrupt { seq, offset, .. })
                if seq == victim as u64 + 1 && offset == off as u64),
            "victim {victim}: {results:?}"
        );
    }
}

#[test]
fn regression_d3_a_bad_length_in_the_last_segment_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = log_of_five(dir.path());
    let recs = records(&seg);
    let mut data = fs::read(&seg).expect("read");
    let (off, _) = recs[2];
    data[off..off + 4].copy_from_slice(&0u32.to_le_bytes());
    fs::write(&seg, &data).expect("write");
    let results: Vec<_> = LogReader::new(dir.path())
        .replay_from(1)
        .expect("replay")
        .collect();
    assert!(
        matches!(
            results.last(),
            Some(Err(EventError::Corrupt { seq: 3, .. }))
        ),
        "{results:?}"
    );
}

#[test]
fn regression_d3_a_record_cut_short_at_the_very_end_is_a_clean_end_for_a_reader() {
    // What a reader sees while a write is in flight, or before the writer
    // has cut a torn tail: the end of the durable data.
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = log_of_five(dir.path());
    let recs = records(&seg);
    let data = fs::read(&seg).expect("read");
    let (off, len) = recs[4];
    fs::write(&seg, &data[..off + len / 2]).expect("tear");
    assert_eq!(all(dir.path()).len(), 4);
}

#[test]
fn frames_copied_out_in_batches_import_into_a_log_that_verifies_and_grows() {
    let src = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(1_000);
    let mut log = open_small(src.path(), &clock);
    for n in 0..40 {
        clock.advance(3_000_000);
        log.append_one(&ev(n)).expect("append");
    }
    let reader = log.reader();
    // Batches of at most ~200 bytes, overlapping by one record (as two
    // mirror files may): the importer skips what it already has.
    let dst = tempfile::tempdir().expect("tempdir");
    let dst = dst.path().join("events");
    let mut import = LogImporter::create(&dst, 1000).expect("create");
    let mut from = 1;
    let mut batches = 0;
    while from <= 40 {
        let (frames, last) = reader.frames(from, 40, 200).expect("frames");
        assert!(last >= from, "at least one record per call");
        import.push(&frames).expect("push");
        from = last; // overlap by one
        if last == 40 {
            break;
        }
        batches += 1;
    }
    assert!(batches > 3, "the byte bound splits the log: {batches}");
    let imported = import.finish().expect("finish");
    assert_eq!(imported.last_seq, 40);
    assert_eq!(imported.last_hash, log.last_hash());
    let (a, b) = (all(src.path()), all(&dst));
    assert_eq!(a, b, "the same records: seqs, times, hashes, events");
    let report = verify_log(&dst, None).expect("verify");
    assert!(report.problem.is_none(), "{report:?}");
    drop(log);
    let mut again = open(&dst, &clock);
    assert_eq!(again.last_seq(), 40);
    let receipt = again.append_one(&ev(99)).expect("append after import");
    assert_eq!(receipt.last_seq, 41);
}

#[test]
fn an_import_refuses_a_gap_a_damaged_record_and_a_used_directory() {
    let src = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(1_000);
    let mut log = open(src.path(), &clock);
    for n in 0..5 {
        log.append_one(&ev(n)).expect("append");
    }
    let reader = log.reader();
    let (first, _) = reader.frames(1, 2, usize::MAX).expect("frames");
    let (rest, last) = reader.frames(4, 5, usize::MAX).expect("frames");
    assert_eq!(last, 5);
    let dst = tempfile::tempdir().expect("tempdir");
    let mut import = LogImporter::create(dst.path().join("a"), 1 << 20).expect("create");
    assert_eq!(import.push(&first).expect("push"), 2);
    let gap = import.push(&rest).expect_err("seq 3 is missing");
    assert!(gap.to_string().contains("seq 4 found where seq 3"), "{gap}");

    let (mut all_frames, _) = reader.frames(1, 5, usize::MAX).expect("frames");
    let n = all_frames.len();
    all_frames[n - 3] ^= 1;
    let mut import = LogImporter::create(dst.path().join("b"), 1 << 20).expect("create");
    let bad = import.push(&all_frames).expect_err("a flipped byte");
    assert!(bad.to_string().contains("damaged record"), "{bad}");
    assert_eq!(
        import.next_seq(),
        5,
        "the four good records before it were kept"
    );

    let used = LogImporter::create(src.path(), 1 << 20).expect_err("not empty");
    assert!(used.to_string().contains("not empty"), "{used}");
}

/// Found by the chaos runner (`vouch chaos run --scenario disk`): one
/// flipped bit in an old record made every read from a later seq fail, so
/// the service's read model stopped catching up and `/api/v1/events`
/// answered 500 for new events, although the damaged record was behind
/// them all. A reader now passes over a damaged record before the seq it
/// wants when the next record confirms the framing; reading the damaged
/// record itself, or a record whose length is damaged, is still an error,
/// naming the damaged record's seq.
#[test]
fn regression_chaos_old_damage_does_not_stop_readers_of_later_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = log_of_five(dir.path());
    let recs = records(&seg);
    let mut data = fs::read(&seg).expect("read");
    let (off, len) = recs[1];
    data[off + len - 1] ^= 0x01; // inside seq 2's payload
    fs::write(&seg, &data).expect("write");
    let reader = LogReader::new(dir.path());
    let later: Vec<u64> = reader
        .replay_from(4)
        .expect("replay")
        .map(|e| e.expect("seq 4 and 5 read").seq)
        .collect();
    assert_eq!(later, vec![4, 5]);
    let from3: Vec<u64> = reader
        .replay_from(3)
        .expect("replay")
        .map(|e| e.expect("seq 3 on read").seq)
        .collect();
    assert_eq!(from3, vec![3, 4, 5]);
    // The damaged record itself, and anything asking for it, fails.
    for from in [1, 2] {
        let results: Vec<_> = reader.replay_from(from).expect("replay").collect();
        assert!(
            matches!(
                results.last(),
                Some(Err(EventError::Corrupt { seq: 2, .. }))
            ),
            "from {from}: {results:?}"
        );
    }
    // A damaged length cannot be passed over: the error names the seq of
    // the damaged record, not the one asked for.
    let mut data = fs::read(&seg).expect("read");
    data[off + len - 1] ^= 0x01;
    data[off..off + 4].copy_from_slice(&7u32.to_le_bytes());
    fs::write(&seg, &data).expect("write");
    let results: Vec<_> = reader.replay_from(4).expect("replay").collect();
    assert!(
        matches!(
            results.first(),
            Some(Err(EventError::Corrupt { seq: 2, .. }))
        ),
        "{results:?}"
    );
}
