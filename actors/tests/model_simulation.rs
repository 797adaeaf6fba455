//! The fast tier of the deterministic simulation (issue 12): thousands of
//! seeds of the service's pure decision code — projections, policies,
//! schedule, alert rules — on one thread per core, in memory, with the
//! same kinds of worker outcomes, plan changes, repository facts and
//! restarts as the full tier (`simulation.rs`) and the same oracles
//! (`simulation/oracle.rs`). It does not run actix, the event store's
//! threads or the disk: the full tier does. See `docs/simulation.md`.
//!
//! * `VOUCH_MODEL_SIM_SEEDS=N`: run seeds `0..N` (default 2000;
//!   `VOUCH_MODEL_SIM_FIRST_SEED` moves the range), or
//!   `VOUCH_MODEL_SIM_SEED=S` for one seed, every step printed;
//! * `VOUCH_MODEL_SIM_STEPS=N`: steps per seed (default 200);
//! * `VOUCH_MODEL_SIM_THREADS=N`: threads (default: the cores).
//!
//! `cargo test -p vouch-actors --test model_simulation -- --ignored stress`
//! runs 200 000 seeds (or `VOUCH_MODEL_SIM_SEEDS`) for offline hunting.

// Shared with the full tier (explicit paths: the modules live beside
// `simulation.rs`).
#[path = "simulation/oracle.rs"]
mod oracle;
#[path = "simulation/outcome.rs"]
mod outcome;
#[path = "simulation/rng.rs"]
mod rng;
#[path = "model_simulation/world.rs"]
mod world;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use world::{Model, Mutation};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn replay_line(seed: u64, steps: usize) -> String {
    format!(
        "VOUCH_MODEL_SIM_SEED={seed} VOUCH_MODEL_SIM_STEPS={steps} cargo test -p vouch-actors --test model_simulation -- --nocapture --exact model_simulation"
    )
}

/// Runs `seeds` on `threads` threads; returns the failures (one line each,
/// with its replay command) and the events folded.
fn run_seeds(seeds: &[u64], steps: usize, verbose: bool, threads: usize) -> (Vec<String>, u64) {
    let next = AtomicU64::new(0);
    let failures = Mutex::new(Vec::new());
    let events = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(&seed) = seeds.get(i) else { break };
                let report = Model::new(seed, steps, verbose, None).run();
                events.fetch_add(report.events, Ordering::Relaxed);
                for (step, v) in &report.violations {
                    let line = format!(
                        "seed {seed} step {step}: {v}\n  replay: {}",
                        replay_line(seed, *step)
                    );
                    failures
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(line);
                }
            });
        }
    });
    let mut failures = failures
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    failures.sort();
    (failures, events.into_inner())
}

fn threads() -> usize {
    env_u64("VOUCH_MODEL_SIM_THREADS").map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |n| n as usize,
    )
}

fn run(default_seeds: u64) {
    let steps = env_u64("VOUCH_MODEL_SIM_STEPS").unwrap_or(200) as usize;
    let (seeds, verbose): (Vec<u64>, bool) = match env_u64("VOUCH_MODEL_SIM_SEED") {
        Some(s) => (vec![s], true),
        None => {
            let n = env_u64("VOUCH_MODEL_SIM_SEEDS").unwrap_or(default_seeds);
            let first = env_u64("VOUCH_MODEL_SIM_FIRST_SEED").unwrap_or(0);
            ((first..first + n).collect(), false)
        }
    };
    let threads = threads();
    let began = Instant::now();
    let (failures, events) = run_seeds(&seeds, steps, verbose, threads);
    let secs = began.elapsed().as_secs_f64();
    eprintln!(
        "model simulation: {} seeds x {steps} steps on {threads} thread(s) in {secs:.1} s ({:.1} seeds/s), {events} events",
        seeds.len(),
        seeds.len() as f64 / secs.max(0.001)
    );
    assert!(
        failures.is_empty(),
        "{} oracle failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// What CI runs: 2000 seeds of 200 steps.
#[test]
fn model_simulation() {
    run(2000);
}

/// Offline: many more seeds (`VOUCH_MODEL_SIM_SEEDS`, default 200 000).
#[test]
#[ignore = "stress: run by hand, takes long"]
fn stress() {
    run(200_000);
}

/// The same seed takes the same steps and writes the same log.
#[test]
fn a_seed_replays_the_same_log() {
    let a = Model::new(77, 150, false, None).run();
    let b = Model::new(77, 150, false, None).run();
    assert_eq!(a.events, b.events);
    assert_eq!(a.head, b.head, "the same log, to the hash of its head");
    assert!(a.events > 100, "the run did something: {} events", a.events);
    assert!(a.restarts > 0, "the run restarted something");
}

/// The oracles catch a deliberately wrong rule: a read model that never
/// folds `verification.failed` keeps points `recoverable` that a failed
/// verification must drop (the safety oracle sees it, not only replay).
#[test]
fn a_read_model_that_forgets_failed_verifications_is_caught() {
    let caught = (0..200u64).find_map(|seed| {
        let r = Model::new(
            seed,
            200,
            false,
            Some(Mutation::ReadModelDropsFailedVerifications),
        )
        .run();
        r.violations
            .iter()
            .find(|(_, v)| v.oracle == "point-safety")
            .map(|(step, v)| (seed, *step, v.to_string()))
    });
    let (seed, step, v) = caught.expect("the safety oracle caught the wrong rule in 200 seeds");
    eprintln!("caught at seed {seed} step {step}: {v}");
}

/// An alerter that never resolves is caught by the alerts oracle.
#[test]
fn an_alerter_that_never_resolves_is_caught() {
    let caught = (0..50u64).find_map(|seed| {
        let r = Model::new(seed, 200, false, Some(Mutation::AlerterNeverResolves)).run();
        r.violations
            .iter()
            .find(|(_, v)| v.oracle == "alerts" && v.detail.contains("incident is over"))
            .map(|(step, v)| (seed, *step, v.to_string()))
    });
    let (seed, step, v) = caught.expect("the alerts oracle caught the wrong rule in 50 seeds");
    eprintln!("caught at seed {seed} step {step}: {v}");
}
