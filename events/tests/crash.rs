//! Crash test: a child process (this test binary, re-executed) appends to
//! the log in a loop and reports every acknowledged seq; the parent kills it
//! with SIGKILL at a random moment, reopens the log and checks that it
//! opens, the chain verifies, every acknowledged event is present and
//! appends continue. Repeated for many rounds on the same log.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use vouch_events::{
    verify_chain, Event, EventLog, JobFinished, JobId, LogOptions, LogReader, SystemClock,
};

const CHILD_ENV: &str = "VOUCH_EVENTS_CRASH_CHILD";
const ROUNDS: usize = 60;

fn event(seq: u64) -> Event {
    JobFinished {
        job: JobId::new(format!("e-{seq}")),
    }
    .into()
}

fn options() -> LogOptions {
    // Small segments, so kills also land around segment creation.
    LogOptions {
        segment_max_bytes: 16 << 10,
        ..LogOptions::default()
    }
}

/// xorshift64*, seeded from the clock: enough to vary kill points.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn child(dir: &Path) -> ! {
    let mut log = match EventLog::open(dir, options(), Arc::new(SystemClock)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("child: open failed: {e}");
            std::process::exit(3);
        }
    };
    let mut rng = Rng(std::process::id() as u64 | 1);
    let stdout = std::io::stdout();
    loop {
        let n = 1 + rng.next() % 40;
        let first = log.last_seq() + 1;
        let batch: Vec<Event> = (first..first + n).map(event).collect();
        match log.append(&batch) {
            Ok(r) => {
                let mut out = stdout.lock();
                // Only what append acknowledged is reported.
                let _ = writeln!(out, "ack {}", r.last_seq);
                let _ = out.flush();
            }
            Err(e) => {
                eprintln!("child: append failed: {e}");
                std::process::exit(4);
            }
        }
    }
}

#[test]
fn sigkill_while_appending_loses_nothing_acknowledged() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        child(Path::new(&dir));
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("log");
    let exe = std::env::current_exe().expect("current exe");
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(7, |d| d.as_nanos() as u64)
        | 1;
    let mut rng = Rng(seed);
    let mut acked_total = 0u64;
    let mut rounds_with_child_acks = 0;
    for round in 0..ROUNDS {
        let mut c = Command::new(&exe)
            .args([
                "sigkill_while_appending_loses_nothing_acknowledged",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn child");
        let stdout = c.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        // Kill after a random number of acknowledged batches (0: right
        // after start, possibly while it opens or repairs the log).
        let target = rng.next() % 12;
        let mut acked = 0u64;
        let mut seen = 0;
        while seen < target {
            match lines.next() {
                Some(Ok(l)) => {
                    if let Some(n) = l.strip_prefix("ack ").and_then(|n| n.parse::<u64>().ok()) {
                        acked = acked.max(n);
                        seen += 1;
                    }
                }
                _ => break,
            }
        }
        // A few spins more, so the kill does not always follow an ack.
        for _ in 0..rng.next() % 20_000 {
            std::hint::spin_loop();
        }
        c.kill().expect("SIGKILL");
        let status = c.wait().expect("wait");
        assert!(
            !status.success(),
            "round {round}: child exited by itself: {status:?}"
        );
        // Acks already in the pipe were acknowledged before the kill.
        for l in lines.map_while(Result::ok) {
            if let Some(n) = l.strip_prefix("ack ").and_then(|n| n.parse::<u64>().ok()) {
                acked = acked.max(n);
            }
        }
        if acked > acked_total {
            rounds_with_child_acks += 1;
        }
        acked_total = acked_total.max(acked);

        let mut log =
            EventLog::open(&dir, options(), Arc::new(SystemClock)).expect("reopen after SIGKILL");
        assert!(
            log.last_seq() >= acked_total,
            "round {round}: acknowledged seq {acked_total} lost (log ends at {})",
            log.last_seq()
        );
        let report = verify_chain(&dir).expect("verify");
        assert!(report.ok(), "round {round}: {report:?}");
        assert_eq!(report.events, log.last_seq());
        let next = log.last_seq() + 1;
        log.append_one(&event(next)).expect("append after reopen");
        acked_total = next;
        drop(log);
    }
    // Every event is where it should be.
    let mut n = 0;
    for env in LogReader::new(&dir).replay_from(1).expect("replay") {
        let env = env.expect("envelope");
        match &env.event {
            // A torn, never-acknowledged tail cut at a reopen is recorded
            // by the writer itself (and may never have cost an ack).
            vouch_events::Event::LogRepaired(r) => {
                assert!(!r.lost_acknowledged, "seq {}: {r:?}", env.seq)
            }
            e => assert_eq!(e, &event(env.seq)),
        }
        n += 1;
    }
    assert_eq!(n, acked_total);
    eprintln!("crash test: {ROUNDS} rounds, {rounds_with_child_acks} with acknowledged appends by the child, {n} events");
    // The test is only worth something if the children did append.
    assert!(
        rounds_with_child_acks >= ROUNDS / 2,
        "children acknowledged appends in only {rounds_with_child_acks} rounds"
    );
}
