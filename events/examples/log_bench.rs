//! Event log benchmarks. Run in release:
//!
//! ```text
//! cargo run --release -p vouch-events --example log_bench -- [DIR]
//! ```
//!
//! DIR (default: a temporary directory in the current directory) decides
//! the disk measured: report `df -T DIR` with the figures. Measures durable
//! appends/s at batch sizes 1, 100 and 1000 (each batch: one write and one
//! fdatasync), replay events/s, the fold of 1 000 000 events into all
//! projections, and the log size per 1 000 000 events.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vouch_events::{verify_log, ChainKey};
use vouch_events::{
    BackupCommitted, BackupSummary, Envelope, Event, EventLog, JobFinished, JobId, JobKind,
    JobScheduled, JobStarted, LogOptions, LogReader, PlanId, Projections, RepositoryId, SharedLog,
    SnapshotId, SystemClock, VerificationPassed, VerifyDepth,
};

/// The i-th event of a realistic stream: per backup, a job scheduled,
/// started, finished, the point committed and verified.
fn event(i: u64) -> Event {
    let n = i / 5;
    let job = JobId::new(format!("job-{n:08}"));
    let mut id = [0u8; 32];
    id[..8].copy_from_slice(&n.to_le_bytes());
    id[8..16].copy_from_slice(&n.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
    let point = SnapshotId(id);
    let plan = PlanId::new(format!("plan-{}", n % 50));
    match i % 5 {
        0 => JobScheduled {
            job,
            kind: JobKind::Backup,
            plan: Some(plan),
            point: None,
            due_unix_ns: n as i64,
            attempt: 1,
            spec: Default::default(),
        }
        .into(),
        1 => JobStarted { job, agent: None }.into(),
        2 => BackupCommitted {
            job: Some(job),
            plan: Some(plan),
            repository: RepositoryId::new("main"),
            snapshot: point,
            snapshot_time_unix_ns: 1_800_000_000_000_000_000 + n as i64,
            summary: BackupSummary {
                files: 1200,
                bytes: 1 << 30,
                added_bytes: 1 << 20,
                stored_bytes: 1 << 19,
                duration_ms: 4000,
                total_bytes: None,
                warnings: None,
            },
            changes: None,
        }
        .into(),
        3 => JobFinished { job }.into(),
        _ => VerificationPassed {
            point,
            job: None,
            depth: VerifyDepth::Structure,
            bytes_read: 0,
            blobs_checked: 1200,
        }
        .into(),
    }
}

fn durable_appends(dir: &Path, batch: u64, batches: u64) -> (f64, Duration) {
    durable_appends_with(dir, batch, batches, LogOptions::default())
}

fn durable_appends_with(
    dir: &Path,
    batch: u64,
    batches: u64,
    options: LogOptions,
) -> (f64, Duration) {
    let _ = std::fs::remove_dir_all(dir);
    let mut log = EventLog::open(dir, options, Arc::new(SystemClock)).expect("open");
    let events: Vec<Vec<Event>> = (0..batches)
        .map(|b| (b * batch..(b + 1) * batch).map(event).collect())
        .collect();
    let start = Instant::now();
    for b in &events {
        log.append(b).expect("append");
    }
    let took = start.elapsed();
    ((batch * batches) as f64 / took.as_secs_f64(), took)
}

/// The raw cost of the durability primitive on this disk: 150-byte
/// appends, each followed by `fdatasync`.
fn raw_fdatasync(dir: &Path, n: u32) -> f64 {
    use std::io::Write;
    std::fs::create_dir_all(dir).expect("mkdir");
    let path = dir.join("raw.dat");
    let mut f = std::fs::File::create(&path).expect("create");
    let start = Instant::now();
    for _ in 0..n {
        f.write_all(&[7u8; 150]).expect("write");
        f.sync_data().expect("fdatasync");
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    rate
}

/// `threads` callers each appending single events through one
/// [`SharedLog`]: group commit across callers.
fn concurrent_single_appends(dir: &Path, threads: u64, per_thread: u64) -> (f64, u64) {
    let log = EventLog::open(dir, LogOptions::default(), Arc::new(SystemClock)).expect("open");
    let shared = Arc::new(SharedLog::new(log));
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    shared
                        .append(vec![event(t * per_thread + i)])
                        .expect("append");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("join");
    }
    let took = start.elapsed();
    let n = threads * per_thread;
    assert_eq!(shared.last_seq(), n);
    (n as f64 / took.as_secs_f64(), n)
}

fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("ls")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".seg"))
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum()
}

fn main() {
    let base = match std::env::args().nth(1) {
        Some(d) => tempfile::tempdir_in(d).expect("tempdir"),
        None => tempfile::tempdir_in(".").expect("tempdir"),
    };
    println!("bench dir: {}", base.path().display());

    println!(
        "raw write(150 B) + fdatasync on this disk: {:.0}/s",
        raw_fdatasync(&base.path().join("raw"), 1000)
    );

    for threads in [16u64, 64] {
        let (rate, n) =
            concurrent_single_appends(&base.path().join(format!("c{threads}")), threads, 200);
        println!("durable single-event appends from {threads} threads (group commit): {rate:.0} events/s ({n} events)");
    }

    for (batch, batches) in [(1u64, 3000u64), (100, 300), (1000, 300)] {
        let (rate, took) = durable_appends(&base.path().join(format!("b{batch}")), batch, batches);
        println!(
            "durable appends, batch {batch:>4}: {rate:>12.0} events/s ({:>8.0} commits/s; {} events in {:.2?})",
            rate / batch as f64,
            batch * batches,
            took
        );
    }

    // The same with a chain key: a signed checkpoint (one more write and
    // fdatasync) after the first commit, then every 1000 events or minute.
    // Interleaved with runs without a key, so both see the same disk.
    for (batch, batches) in [(1u64, 3000u64), (1000, 300)] {
        for keyed in [false, true, false, true] {
            let options = LogOptions {
                chain_key: keyed.then(|| ChainKey::from_bytes([7; 32])),
                ..LogOptions::default()
            };
            let (rate, took) = durable_appends_with(
                &base.path().join(format!("k{batch}")),
                batch,
                batches,
                options,
            );
            println!(
                "durable appends, chain key {}, batch {batch:>4}: {rate:>12.0} events/s ({} events in {:.2?})",
                if keyed { "yes" } else { "no " },
                batch * batches,
                took
            );
        }
    }

    // One million events, written in batches of 1000.
    const N: u64 = 1_000_000;
    let dir = base.path().join("million");
    let (rate, took) = durable_appends(&dir, 1000, N / 1000);
    println!("1M events written durably in batches of 1000: {rate:.0} events/s ({took:.2?})");
    let size = dir_size(&dir);
    println!(
        "log size per 1M events: {size} bytes ({:.1} MiB, {:.1} bytes/event)",
        size as f64 / 1048576.0,
        size as f64 / N as f64
    );

    for round in 0..2 {
        let start = Instant::now();
        let mut count = 0u64;
        for env in LogReader::new(&dir).replay_from(1).expect("replay") {
            let env = env.expect("envelope");
            count += env.seq & 1;
        }
        let took = start.elapsed();
        println!(
            "replay (read, check, decode) of 1M events, run {round}: {:.0} events/s ({took:.2?}, {count} odd)",
            N as f64 / took.as_secs_f64()
        );
    }

    let envs: Vec<Envelope> = LogReader::new(&dir)
        .replay_from(1)
        .expect("replay")
        .map(|e| e.expect("env"))
        .collect();
    let start = Instant::now();
    let p = Projections::fold(&envs);
    let took = start.elapsed();
    println!(
        "fold of 1M events into all projections (in memory): {took:.2?} ({:.0} events/s; {} points, {} jobs, {} inconsistencies)",
        N as f64 / took.as_secs_f64(),
        p.points.points.len(),
        p.jobs.jobs.len(),
        p.inconsistencies.len()
    );
    drop(envs);

    let start = Instant::now();
    let mut p = Projections::new();
    for env in LogReader::new(&dir).replay_from(1).expect("replay") {
        p.apply(&env.expect("envelope"));
    }
    let took = start.elapsed();
    println!("rebuild from the log (replay + fold) of 1M events: {took:.2?}");

    let start = Instant::now();
    let snap = p.to_snapshot().expect("snapshot");
    let enc = start.elapsed();
    let start = Instant::now();
    let back = Projections::from_snapshot(&snap).expect("decode");
    let dec = start.elapsed();
    assert_eq!(back.last_seq, N);
    println!(
        "projection snapshot: {} bytes, encode {enc:.2?}, decode {dec:.2?}",
        snap.len()
    );
    // The read store's seal: one BLAKE3 (derive-key mode) over the snapshot
    // bytes, at each checkpoint and at each open.
    let start = Instant::now();
    let mut h = blake3::Hasher::new_derive_key("vouch read store snapshot seal v1");
    h.update(&N.to_le_bytes());
    h.update(&back.last_hash.0);
    h.update(&snap);
    std::hint::black_box(h.finalize());
    println!("read store seal of that snapshot: {:.2?}", start.elapsed());
    // `vouch events verify` of the 1M-event log (no key, then with one it
    // did not sign with: the chain walk is the cost either way).
    let start = Instant::now();
    let r = verify_log(&dir, None).expect("verify");
    assert!(r.ok(), "{:?}", r.problem);
    println!(
        "verify_log of 1M events ({} bytes, {} segments): {:.2?}",
        r.bytes,
        r.segments,
        start.elapsed()
    );
}
