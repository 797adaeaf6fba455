//! Crash consistency: `kill -9` at random moments during backups. After
//! every kill the repository verifies with `--read-data`, and every snapshot
//! that survived restores to exactly the tree it was taken from.

mod common;

use std::collections::HashMap;
use std::fs;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{describe, random_bytes, Env};
use vouch_chaos::{run_and_kill, KillOutcome, Rng};

const ROUNDS: usize = 50;

#[test]
fn kill_9_during_backup_never_leaves_a_broken_snapshot() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    fs::create_dir_all(src.join("d")).unwrap();
    let seed = Rng::seed_from_clock();
    eprintln!("seed {seed}");
    let mut rng = Rng::new(seed);
    for i in 0..24 {
        fs::write(
            src.join(format!("d/f{i}")),
            random_bytes(200_000 + i * 777, i as u64),
        )
        .unwrap();
    }
    env.ok(&["backup", "--tag", "round-init", src.to_str().unwrap()]);
    // How long an uninterrupted round takes (a few changed files), to
    // spread the kills over it.
    fs::write(src.join("d/f0"), random_bytes(300_000, 4242)).unwrap();
    let t0 = Instant::now();
    env.ok(&["backup", "--tag", "round-timing", src.to_str().unwrap()]);
    let full = t0.elapsed().max(Duration::from_millis(20));
    let mut expected: HashMap<String, std::collections::BTreeMap<String, String>> = HashMap::new();
    expected.insert("round-timing".into(), describe(&src));

    let (mut killed, mut finished) = (0, 0);
    for round in 0..ROUNDS {
        // Change a few files so that every round writes new data.
        for _ in 0..3 {
            let n = rng.below(30);
            fs::write(
                src.join(format!("d/f{n}")),
                random_bytes(100_000 + rng.below(400_000) as usize, rng.next_u64()),
            )
            .unwrap();
        }
        let tag = format!("round-{round}");
        expected.insert(tag.clone(), describe(&src));
        let delay = Duration::from_micros(rng.below(full.as_micros() as u64 * 3 / 2 + 1));
        let outcome = run_and_kill(
            env.cmd()
                .args(["backup", "--tag", &tag, src.to_str().unwrap()])
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            delay,
        )
        .unwrap();
        match outcome {
            KillOutcome::Killed => killed += 1,
            KillOutcome::Finished(code) => {
                assert_eq!(code, 0, "round {round} (seed {seed})");
                finished += 1;
            }
        }
        env.ok(&["verify", "--read-data"]);
        // The snapshot of this round, if it exists, is complete.
        let snaps: serde_json::Value =
            serde_json::from_str(env.ok(&["snapshots", "--json", "--tag", &tag]).trim()).unwrap();
        if let Some(s) = snaps.as_array().unwrap().first() {
            let target = env.path(&format!("restore-{round}"));
            let id = s["id"].as_str().unwrap();
            env.ok(&[
                "restore",
                &format!("{id}:{}", src.display()),
                "--target",
                target.to_str().unwrap(),
            ]);
            assert_eq!(
                describe(&target),
                expected[&tag],
                "round {round} (seed {seed})"
            );
            fs::remove_dir_all(&target).unwrap();
        }
    }
    eprintln!("{killed} backups killed, {finished} finished");
    assert!(
        killed >= ROUNDS / 5,
        "too few kills landed ({killed}); the test is not testing"
    );
    // Leftovers of killed sessions are harmless and prune removes them.
    env.ok(&["prune"]);
    env.ok(&["verify", "--read-data"]);
    assert!(fs::read_dir(env.repo.join("locks"))
        .unwrap()
        .next()
        .is_none());
}
