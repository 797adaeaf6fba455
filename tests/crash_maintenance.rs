//! Crash consistency of the destructive commands: `kill -9` at random
//! moments of prune (with repacking), forget and `repair index`. After
//! every kill `verify --read-data` finds no damage, every snapshot restores
//! to exactly the tree it was taken from, and a backup of content that was
//! forgotten and pruned before (a revert) is stored again in full, not
//! deduplicated against deleted packs.
//!
//! `VOUCH_STRESS_ROUNDS=N` runs N rounds instead of the few CI runs.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{describe, random_bytes, Env};
use vouch_chaos::{run_and_kill, KillOutcome, Rng};

type Tree = BTreeMap<String, String>;

/// The crash points of prune, forget and repair (`failpoint::crash` in the vouch crate).
const FAILPOINTS: [&str; 6] = [
    "prune-index-written",
    "prune-index-half-deleted",
    "prune-index-deleted",
    "prune-packs-half-deleted",
    "forget-one-deleted",
    "repair-index-written",
];

fn rounds() -> usize {
    std::env::var("VOUCH_STRESS_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12)
}

/// One version of the source: file name -> seed and length of its content.
type Version = BTreeMap<String, (u64, usize)>;

fn write_version(src: &Path, v: &Version) {
    let _ = fs::remove_dir_all(src);
    fs::create_dir_all(src).unwrap();
    for (name, &(seed, len)) in v {
        fs::write(src.join(name), random_bytes(len, seed)).unwrap();
    }
}

/// Rewrites six random files of `v` with new content.
fn change(v: &mut Version, rng: &mut Rng) {
    for _ in 0..6 {
        let n = rng.below(24);
        v.insert(
            format!("f{n:02}"),
            (rng.next_u64(), 20_000 + rng.below(200_000) as usize),
        );
    }
}

fn check(env: &Env, src: &Path, expected: &HashMap<String, Tree>, what: &str) {
    env.ok(&["verify", "--read-data"]);
    for id in env.snapshot_ids() {
        let want = expected
            .get(&id)
            .unwrap_or_else(|| panic!("{what}: unknown snapshot {id}"));
        let t = env.path("check");
        let _ = fs::remove_dir_all(&t);
        env.ok(&[
            "restore",
            &format!("{id}:{}", src.display()),
            "--target",
            t.to_str().unwrap(),
        ]);
        assert_eq!(&describe(&t), want, "{what}: snapshot {id}");
    }
}

#[test]
fn kill_9_during_prune_forget_and_repair_never_loses_data() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    let seed = Rng::seed_from_clock();
    eprintln!("seed {seed}");
    let mut rng = Rng::new(seed);
    let mut version: Version = (0..24)
        .map(|i| {
            (
                format!("f{i:02}"),
                (rng.next_u64(), 20_000 + rng.below(200_000) as usize),
            )
        })
        .collect();
    let mut history: Vec<Version> = Vec::new();
    let mut expected: HashMap<String, Tree> = HashMap::new();
    let backup = |env: &Env, v: &Version, expected: &mut HashMap<String, Tree>| {
        write_version(&src, v);
        let id = env.backup(&[&src]);
        expected.insert(id, describe(&src));
    };
    for _ in 0..4 {
        change(&mut version, &mut rng);
        backup(&env, &version, &mut expected);
        history.push(version.clone());
    }
    // How long an uninterrupted prune with repacking takes, to spread the
    // kills over it.
    let t0 = Instant::now();
    env.ok(&["prune", "--repack-below", "90"]);
    let full = t0.elapsed().max(Duration::from_millis(30));
    let (mut killed, mut finished) = (0, 0);
    for round in 0..rounds() {
        // New data, so that forget and prune have work to do.
        change(&mut version, &mut rng);
        backup(&env, &version, &mut expected);
        history.push(version.clone());
        let ids = env.snapshot_ids();
        let victim = ids[rng.below(ids.len() as u64 - 1) as usize].clone();
        // Even rounds kill at a random moment of a random command; odd
        // rounds kill at each named commit step in turn (windows too short
        // for a random kill to hit), with a command that reaches it.
        let failpoint = (round % 2 == 1).then(|| FAILPOINTS[(round / 2) % FAILPOINTS.len()]);
        let choice = match failpoint {
            Some("repair-index-written") => 3,
            Some(_) => 1,
            None => rng.below(4),
        };
        let args: Vec<String> = match choice {
            0 => vec!["prune".into(), "--repack-below".into(), "90".into()],
            1 => vec!["forget".into(), "--prune".into(), victim],
            2 => vec![
                "forget".into(),
                "--keep-last".into(),
                "3".into(),
                "--prune".into(),
            ],
            _ => vec!["repair".into(), "index".into()],
        };
        let delay = if failpoint.is_some() {
            Duration::from_secs(120)
        } else {
            Duration::from_micros(rng.below(full.as_micros() as u64 * 2 + 1))
        };
        let outcome = run_and_kill(
            env.cmd()
                .env("VOUCH_FAILPOINT", failpoint.unwrap_or(""))
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            delay,
        )
        .unwrap();
        match outcome {
            KillOutcome::Killed => killed += 1,
            // Killed by its own failpoint (no exit code: a signal).
            KillOutcome::Finished(-1) if failpoint.is_some() => killed += 1,
            KillOutcome::Finished(code) => {
                assert_eq!(code, 0, "round {round} {args:?} (seed {seed})");
                finished += 1;
            }
        }
        let what = format!(
            "round {round} {args:?} killed after {delay:?} or at {failpoint:?} (seed {seed})"
        );
        check(&env, &src, &expected, &what);
        // A revert to an older version (maybe forgotten and pruned): every
        // byte must be stored again or still be really there.
        let old = history[rng.below(history.len() as u64) as usize].clone();
        backup(&env, &old, &mut expected);
        check(&env, &src, &expected, &format!("{what}, after a revert"));
        env.ok(&["prune"]);
    }
    eprintln!("{killed} runs killed, {finished} finished");
    check(&env, &src, &expected, "at the end");
}
