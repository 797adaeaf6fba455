//! Deterministic simulation of the whole service (issue 12, "The harness").
//!
//! Each seed is one run of a few hundred steps drawn from a seeded
//! generator: the real projections, policies, dispatcher, scheduler and
//! alerter (`vouch_actors::service::start`), simulated workers whose jobs
//! succeed, fail (retryable or not), hang, find damage, produce empty
//! points or panic, one simulated clock driving the log, the service and
//! tokio's timers, plan changes (source, removal, re-creation under the
//! same id), restarts and crashes of the whole service, and power cuts of
//! the log. After every step the oracles (`simulation/oracle.rs`) check the
//! log and the live service. See `docs/simulation.md`.
//!
//! Every oracle failure fails the test.
//!
//! * `VOUCH_SIM_SEEDS=N`: run seeds `0..N` (default 32; `VOUCH_SIM_FIRST_SEED`
//!   moves the range), or
//!   `VOUCH_SIM_SEED=S` for one seed (prints every step);
//! * `VOUCH_SIM_STEPS=N`: steps per seed (default 300);
//! * `VOUCH_SIM_PROFILE=1`: print where each seed's time went;
//! * `VOUCH_SIM_SEED_BUDGET_SECS=N`: real time one seed may take before it
//!   fails (default 180: a spinning run fails instead of holding CI).

mod simulation {
    pub mod disk;
    pub mod oracle;
    pub mod outcome;
    pub mod rng;
    pub mod worker;
    pub mod world;
}

use std::time::Instant;

use simulation::world::{Report, World};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn replay_line(seed: u64, steps: usize) -> String {
    format!("VOUCH_SIM_SEED={seed} VOUCH_SIM_STEPS={steps} cargo test -p vouch-actors --test simulation -- --nocapture")
}

/// The tests that run the service hold this, so that one's files and
/// threads never show up in the other's count of open files (the test
/// harness runs them on parallel threads of one process).
static ONE_SERVICE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_service_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_SERVICE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn open_files() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn quiet_simulated_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        if !msg.starts_with("simulated") {
            default(info);
        }
    }));
}

#[test]
fn simulation() {
    let _serial = one_service_at_a_time();
    quiet_simulated_panics();
    let steps = env_u64("VOUCH_SIM_STEPS").unwrap_or(300) as usize;
    let (seeds, verbose): (Vec<u64>, bool) = match env_u64("VOUCH_SIM_SEED") {
        Some(s) => (vec![s], true),
        None => {
            let n = env_u64("VOUCH_SIM_SEEDS").unwrap_or(32);
            let first = env_u64("VOUCH_SIM_FIRST_SEED").unwrap_or(0);
            ((first..first + n).collect(), false)
        }
    };
    let began = Instant::now();
    let mut failures: Vec<String> = Vec::new();
    let (mut events, mut lifetimes, mut refusals) = (0u64, 0usize, 0usize);
    let mut alert_checks_skipped = 0usize;
    for &seed in &seeds {
        let report: Report = World::new(seed, steps, verbose).run();
        events += report.events;
        lifetimes += report.lifetimes;
        refusals += report.refusals.len();
        alert_checks_skipped += report.alert_checks_skipped;
        for (step, v) in &report.violations {
            failures.push(format!(
                "seed {seed} step {step}: {v}\n  replay: {}",
                replay_line(seed, *step)
            ));
        }
        if verbose || std::env::var("VOUCH_SIM_PROFILE").is_ok() {
            eprintln!(
                "seed {seed}: opening {:.1} s, settling {:.1} s, oracles {:.1} s, {} open files",
                report.time_open.as_secs_f64(),
                report.time_settle.as_secs_f64(),
                report.time_check.as_secs_f64(),
                open_files()
            );
        }
        if verbose {
            eprintln!(
                "seed {seed}: {} steps, {} events, {} lifetimes, head {}",
                report.steps, report.events, report.lifetimes, report.head
            );
        }
    }
    let secs = began.elapsed().as_secs_f64();
    eprintln!(
        "simulation: {} seeds x {steps} steps in {secs:.1} s ({:.1} seeds/min), {events} events, {lifetimes} lifetimes, {refusals} refusals to open after a power cut, {alert_checks_skipped} alert checks left out while the log refused appends",
        seeds.len(),
        seeds.len() as f64 * 60.0 / secs.max(0.001)
    );
    assert!(
        failures.is_empty(),
        "{} oracle failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The same seed takes the same steps. (The log itself may differ in the
/// order of appends the service issues back to back, e.g. several
/// `job.scheduled` of one `EnqueueMany`: the event store runs each append
/// on its own blocking thread and they race for the group commit; see
/// `docs/simulation.md`. So this compares the steps, and reports the heads.)
#[test]
fn a_seed_replays_the_same_steps() {
    let _serial = one_service_at_a_time();
    quiet_simulated_panics();
    let actions = |r: &Report| -> Vec<String> {
        r.trace
            .iter()
            .filter(|l| {
                l.split_once(": ")
                    .is_some_and(|(_, a)| a.starts_with(|c: char| c.is_ascii_uppercase()))
            })
            .take(40)
            .cloned()
            .collect()
    };
    let a = World::new(4242, 60, false).run();
    let files = open_files();
    let b = World::new(4242, 60, false).run();
    // Each run has about ten lifetimes of the service: none may leave its
    // threads and files behind.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        open_files() <= files + 8,
        "open files grew from {files} to {}",
        open_files()
    );
    assert_eq!(actions(&a), actions(&b), "the same steps");
    assert!(a.events > 20, "the run did something: {} events", a.events);
    eprintln!(
        "heads: {} / {} ({})",
        a.head,
        b.head,
        if a.head == b.head {
            "same log"
        } else {
            "logs differ in the order of concurrent appends"
        }
    );
}
