//! The authenticated chain head (security review finding 11, issue 13):
//! `verify_log` on real files, a flipped byte, and a *consistent* rewrite
//! (an event changed, its checksum and every later `prev_hash` recomputed,
//! `HEAD` rewritten) made with the crate's own format functions. Without a
//! key such a rewrite verifies (the documented limitation); with the chain
//! key the signed checkpoints catch it.

use std::borrow::Cow;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use vouch_events::format::{self, EventHash, PersistedEnvelope};
use vouch_events::{
    encode_body, verify_chain, verify_log, ChainKey, Event, EventLog, JobFinished, JobId,
    LogOptions, ManualClock,
};

fn ev(n: u64) -> Event {
    JobFinished {
        job: JobId::new(format!("job-{n}")),
    }
    .into()
}

fn key(b: u8) -> ChainKey {
    ChainKey::from_bytes([b; 32])
}

/// A log of `n` events appended one commit each, with `key`, a checkpoint
/// after every `every` events.
fn write_log(dir: &Path, n: u64, key: Option<ChainKey>, every: u64) {
    let mut log = EventLog::open(
        dir,
        LogOptions {
            chain_key: key,
            checkpoint_every_events: every,
            ..LogOptions::default()
        },
        Arc::new(ManualClock::new(1_000)),
    )
    .expect("open");
    for i in 1..=n {
        log.append_one(&ev(i)).expect("append");
    }
}

fn only_segment(dir: &Path) -> PathBuf {
    dir.join(format::segment_file_name(1))
}

/// Rewrites event `seq` as `JobFinished { job: "forged" }` and makes the
/// whole log consistent again: its checksum, every later `prev_hash` and
/// checksum, and `HEAD` (both slots, with their BLAKE3 checksums), the
/// way someone with write access to the directory (and no key) can.
fn rewrite_consistently(dir: &Path, seq: u64) {
    let path = only_segment(dir);
    let data = fs::read(&path).expect("read");
    let mut out = data[..format::SEGMENT_HEADER_LEN].to_vec();
    let mut pos = format::SEGMENT_HEADER_LEN;
    let mut prev = format::GENESIS_HASH;
    let mut head = (0, prev);
    while pos < data.len() {
        let len = u32::from_le_bytes(data[pos..pos + 4].try_into().expect("4")) as usize;
        let body = &data[pos + format::RECORD_HEADER_LEN..pos + format::RECORD_HEADER_LEN + len];
        let env: PersistedEnvelope<'_> = rmp_serde::from_slice(body).expect("decode");
        let new_body = if env.seq == seq {
            let forged: Event = JobFinished {
                job: JobId::new("forged"),
            }
            .into();
            encode_body(env.seq, env.recorded_unix_ns, &prev, &forged).expect("encode")
        } else {
            let env = PersistedEnvelope {
                prev_hash: prev.0,
                payload: Cow::Owned(env.payload.into_owned()),
                event_type: Cow::Owned(env.event_type.into_owned()),
                ..env
            };
            rmp_serde::to_vec(&env).expect("encode")
        };
        let hash = EventHash::of(&new_body);
        out.extend_from_slice(&(new_body.len() as u32).to_le_bytes());
        out.extend_from_slice(&hash.0);
        out.extend_from_slice(&new_body);
        head = (env.seq, hash);
        prev = hash;
        pos += format::RECORD_HEADER_LEN + len;
    }
    fs::write(&path, out).expect("write");
    // HEAD: "VOUCHHD1" | generation | seq | hash | BLAKE3 of the 56 bytes.
    let mut slot = Vec::new();
    slot.extend_from_slice(b"VOUCHHD1");
    slot.extend_from_slice(&u64::MAX.to_le_bytes());
    slot.extend_from_slice(&head.0.to_le_bytes());
    slot.extend_from_slice(&head.1 .0);
    let sum = blake3::hash(&slot);
    slot.extend_from_slice(sum.as_bytes());
    let mut file = vec![0u8; 1024];
    file[..88].copy_from_slice(&slot);
    fs::write(dir.join("HEAD"), file).expect("write head");
}

#[test]
fn a_fresh_log_verifies_up_to_its_head_and_says_it_is_unauthenticated() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_log(dir.path(), 7, None, 1000);
    let r = verify_log(dir.path(), None).expect("verify");
    assert!(r.ok(), "{:?}", r.problem);
    assert_eq!(r.events, 7);
    assert_eq!(r.segments, 1);
    assert!(!r.keyed);
    assert_eq!(r.acknowledged, Some((7, r.head)));
}

#[test]
fn a_flipped_byte_is_named_by_its_seq() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_log(dir.path(), 5, None, 1000);
    let path = only_segment(dir.path());
    let mut data = fs::read(&path).expect("read");
    // The last byte of the third record's body (records are equal-sized).
    let rec = (data.len() - format::SEGMENT_HEADER_LEN) / 5;
    let at = format::SEGMENT_HEADER_LEN + 3 * rec - 1;
    data[at] ^= 0x01;
    fs::write(&path, data).expect("write");
    let r = verify_log(dir.path(), None).expect("verify");
    let p = r.problem.expect("a problem");
    assert_eq!(p.seq, 3, "{p}");
    assert_eq!(
        p.offset as usize,
        format::SEGMENT_HEADER_LEN + 2 * rec,
        "{p}"
    );
    assert_eq!(r.events, 2);
}

#[test]
fn a_consistent_rewrite_passes_without_a_key_but_fails_with_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_log(dir.path(), 6, Some(key(7)), 1);
    let before = verify_log(dir.path(), Some(&key(7))).expect("verify");
    assert!(before.ok(), "{:?}", before.problem);
    assert_eq!(before.checkpoints, 6);
    assert_eq!(before.checkpoints_verified, 6);

    rewrite_consistently(dir.path(), 3);
    // The documented limitation: integrity, not authenticity.
    assert!(verify_chain(dir.path()).expect("verify").ok());
    let unkeyed = verify_log(dir.path(), None).expect("verify");
    assert!(unkeyed.ok(), "{:?}", unkeyed.problem);
    assert!(!unkeyed.keyed);
    // With the key: the checkpoint of seq 3 does not match.
    let keyed = verify_log(dir.path(), Some(&key(7))).expect("verify");
    let p = keyed.problem.expect("the rewrite is detected");
    assert_eq!(p.seq, 3, "{p}");
    assert!(p.message.contains("rewritten"), "{p}");
}

#[test]
fn a_rewrite_before_a_sparse_checkpoint_is_caught_at_the_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    // One checkpoint at the first commit (seq 1), then one at seq 5.
    write_log(dir.path(), 6, Some(key(7)), 4);
    let r = verify_log(dir.path(), Some(&key(7))).expect("verify");
    assert!(r.ok(), "{:?}", r.problem);
    assert_eq!(r.checkpoints, 2);
    assert_eq!(r.latest_checkpoint.map(|c| c.seq), Some(5));
    rewrite_consistently(dir.path(), 2);
    let p = verify_log(dir.path(), Some(&key(7)))
        .expect("verify")
        .problem
        .expect("detected");
    assert_eq!(p.seq, 5, "{p}");
}

#[test]
fn forged_or_foreign_checkpoints_and_a_missing_file_fail_the_keyed_verify() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_log(dir.path(), 3, Some(key(7)), 1);
    // Another key.
    let p = verify_log(dir.path(), Some(&key(8)))
        .expect("verify")
        .problem
        .expect("another key");
    assert!(p.message.contains("another chain key"), "{p}");
    // A changed checkpoint (its hash): the MAC no longer verifies.
    let cp = dir.path().join(format::CHECKPOINTS_FILE);
    let mut data = fs::read(&cp).expect("read");
    data[format::CHECKPOINT_LEN + 30] ^= 1;
    fs::write(&cp, &data).expect("write");
    let p = verify_log(dir.path(), Some(&key(7)))
        .expect("verify")
        .problem
        .expect("forged");
    assert!(p.message.contains("MAC"), "{p}");
    assert_eq!(p.seq, 2);
    // No checkpoint at all: the keyed verify cannot vouch for anything.
    fs::remove_file(&cp).expect("rm");
    let p = verify_log(dir.path(), Some(&key(7)))
        .expect("verify")
        .problem
        .expect("none");
    assert!(p.message.contains("no checkpoint"), "{p}");
}

#[test]
fn a_log_cut_below_its_head_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_log(dir.path(), 4, None, 1000);
    let path = only_segment(dir.path());
    let data = fs::read(&path).expect("read");
    let rec = (data.len() - format::SEGMENT_HEADER_LEN) / 4;
    fs::write(&path, &data[..data.len() - rec]).expect("cut");
    let p = verify_log(dir.path(), None)
        .expect("verify")
        .problem
        .expect("cut");
    assert_eq!(p.seq, 4, "{p}");
}

#[test]
fn a_checkpoint_torn_by_a_crash_is_ignored_by_readers_and_cut_by_the_writer() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_log(dir.path(), 3, Some(key(7)), 1);
    let cp = dir.path().join(format::CHECKPOINTS_FILE);
    let whole = fs::read(&cp).expect("read");
    assert_eq!(whole.len(), 3 * format::CHECKPOINT_LEN);
    // Half of a fourth record reached the disk.
    let mut torn = whole.clone();
    torn.extend_from_slice(&whole[..format::CHECKPOINT_LEN / 2]);
    fs::write(&cp, &torn).expect("write");
    let r = verify_log(dir.path(), Some(&key(7))).expect("verify");
    assert!(r.ok(), "{:?}", r.problem);
    assert_eq!(r.checkpoints, 3);
    // The writer cuts it and goes on appending whole records.
    write_log(dir.path(), 2, Some(key(7)), 1);
    let len = fs::metadata(&cp).expect("meta").len() as usize;
    assert_eq!(len, 5 * format::CHECKPOINT_LEN);
    let r = verify_log(dir.path(), Some(&key(7))).expect("verify");
    assert!(r.ok(), "{:?}", r.problem);
    assert_eq!((r.events, r.checkpoints_verified), (5, 5));
}

#[test]
fn a_repair_that_cuts_acknowledged_events_sets_their_checkpoints_aside() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_log(dir.path(), 6, Some(key(7)), 1);
    // Acknowledged events 5 and 6 lost: the segment ends after seq 4.
    let path = only_segment(dir.path());
    let data = fs::read(&path).expect("read");
    let rec = (data.len() - format::SEGMENT_HEADER_LEN) / 6;
    fs::write(&path, &data[..format::SEGMENT_HEADER_LEN + 4 * rec]).expect("cut");
    let p = verify_log(dir.path(), Some(&key(7)))
        .expect("verify")
        .problem
        .expect("loss");
    assert!(p.seq >= 5, "{p}");
    {
        let mut log = EventLog::open(
            dir.path(),
            LogOptions {
                chain_key: Some(key(7)),
                checkpoint_every_events: 1,
                allow_cut_acknowledged: true,
                ..LogOptions::default()
            },
            Arc::new(ManualClock::new(2_000)),
        )
        .expect("repair");
        log.append_one(&ev(99)).expect("append");
    }
    let r = verify_log(dir.path(), Some(&key(7))).expect("verify");
    assert!(r.ok(), "{:?}", r.problem);
    assert_eq!(r.events, 6, "4 kept, the repair event, one more");
    let aside: Vec<_> = fs::read_dir(dir.path())
        .expect("ls")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("CHECKPOINTS.repaired-5"))
        .collect();
    assert_eq!(aside.len(), 1, "the old checkpoints are kept aside");
}
