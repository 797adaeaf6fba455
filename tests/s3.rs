//! Repositories in S3, against a real store: Ceph's RADOS Gateway started
//! by `.ci/s3-server.sh start` (its line of variables in the environment).
//! A full backup / verify / restore / forget / prune cycle, and `kill -9`
//! at random moments of a backup and at every crash point of prune: after
//! each, every committed snapshot verifies and restores to exactly the tree
//! it was taken from.
//!
//! Without `VOUCH_S3_ENDPOINT` the tests say so and pass, except under CI.
//! `VOUCH_STRESS_ROUNDS=N` runs N kill rounds instead of CI's few.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::Duration;

use common::{describe, random_bytes, random_files, Env};
use vouch_chaos::{run_and_kill, KillOutcome, Rng};

type Tree = BTreeMap<String, String>;

fn rounds(ci: usize) -> usize {
    std::env::var("VOUCH_STRESS_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(ci)
}

/// Restores `snapshot` into a fresh directory and returns its tree.
fn restored(env: &Env, snapshot: &str, source: &Path) -> Tree {
    let target = env.path(&format!("restore-{snapshot}-{}", common::hex_id()));
    env.ok(&["restore", snapshot, "--target", target.to_str().unwrap()]);
    let inside = target.join(source.strip_prefix("/").unwrap());
    let tree = describe(&inside);
    fs::remove_dir_all(&target).unwrap();
    tree
}

/// Every snapshot verifies (data read back) and restores to its tree.
fn assert_sound(env: &Env, source: &Path, trees: &BTreeMap<String, Tree>) {
    let out = env.ok(&["verify", "--read-data"]);
    assert!(out.contains("no damage found"), "{out}");
    for id in env.snapshot_ids() {
        let full = trees
            .iter()
            .find(|(k, _)| k.starts_with(&id) || id.starts_with(k.as_str()))
            .map(|(_, t)| t)
            .unwrap_or_else(|| panic!("snapshot {id} was never reported committed"));
        assert_eq!(
            &restored(env, &id, source),
            full,
            "snapshot {id} restores differently"
        );
    }
}

#[test]
fn a_repository_in_s3_backs_up_verifies_restores_and_prunes() {
    let Some(env) = Env::s3() else { return };
    env.init();
    let src = env.path("src");
    random_files(&src, 20, 300_000, 1);
    fs::write(src.join("big"), random_bytes(5 << 20, 9)).unwrap();
    let first = env.backup(&[&src]);
    let first_tree = describe(&src);
    fs::write(src.join("f3"), random_bytes(1000, 77)).unwrap();
    fs::remove_file(src.join("f4")).unwrap();
    let second = env.backup(&[&src]);
    let second_tree = describe(&src);
    let trees = BTreeMap::from([(first.clone(), first_tree), (second.clone(), second_tree)]);
    assert_sound(&env, &src, &trees);

    // An unchanged backup sends almost nothing: the metadata cache answers.
    let out = env.ok(&["backup", "--json", src.to_str().unwrap()]);
    let summary = common::summary_of(&out);
    assert!(
        summary["network"]["sent"].as_u64().unwrap() < 64 * 1024,
        "an unchanged backup to S3 sent {}",
        summary["network"]
    );

    env.ok(&["forget", "--keep-last", "1", "--prune"]);
    assert_eq!(env.snapshot_ids().len(), 1);
    let out = env.ok(&["verify", "--read-data"]);
    assert!(out.contains("no damage found"), "{out}");
    assert_eq!(restored(&env, "latest", &src), trees[&second]);
}

#[test]
fn a_backup_to_s3_killed_at_random_moments_leaves_only_whole_snapshots() {
    let Some(env) = Env::s3() else { return };
    env.init();
    let src = env.path("src");
    let seed = Rng::seed_from_clock();
    eprintln!("seed {seed} (VOUCH_STRESS_SEED replays it)");
    let seed = std::env::var("VOUCH_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(seed);
    let mut rng = Rng::new(seed);
    let mut trees = BTreeMap::new();
    let mut killed = 0;
    for round in 0..rounds(4) {
        random_files(&src, 12, 400_000, seed + round as u64 * 100);
        let tree = describe(&src);
        let mut cmd = env.cmd();
        cmd.args(["backup", "--json", src.to_str().unwrap()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        let delay = Duration::from_millis(50 + rng.below(600));
        match run_and_kill(&mut cmd, delay).unwrap() {
            KillOutcome::Killed => killed += 1,
            KillOutcome::Finished(code) => assert_eq!(code, 0, "round {round}"),
        }
        // Whatever committed is whole; what did not is invisible.
        let ids = env.snapshot_ids();
        if let Some(new) = ids.iter().find(|id| !trees.contains_key(*id)) {
            trees.insert(new.clone(), tree.clone());
        }
        assert_sound(&env, &src, &trees);
        // And the next backup completes.
        let id = env.backup(&[&src]);
        trees.insert(id, tree);
    }
    eprintln!("{killed} backups killed mid-way");
    assert_sound(&env, &src, &trees);
}

#[test]
fn prune_on_s3_killed_at_each_crash_point_loses_nothing() {
    let Some(env) = Env::s3() else { return };
    env.init();
    let src = env.path("src");
    let mut trees = BTreeMap::new();
    for (i, stage) in [
        "prune-index-written",
        "prune-index-half-deleted",
        "prune-index-deleted",
        "prune-packs-half-deleted",
    ]
    .into_iter()
    .enumerate()
    {
        // Two versions; the older one forgotten, so prune has packs to
        // delete and to repack.
        random_files(&src, 8, 200_000, 1000 + i as u64 * 10);
        let old = env.backup(&[&src]);
        fs::write(src.join("f1"), random_bytes(200_000, 5000 + i as u64)).unwrap();
        let new = env.backup(&[&src]);
        trees.insert(new.clone(), describe(&src));
        env.ok(&["forget", &old]);
        let out = env
            .cmd()
            .args(["prune", "--repack-below", "90"])
            .env("VOUCH_FAILPOINT", stage)
            .output()
            .unwrap();
        assert_ne!(
            out.status.code(),
            Some(0),
            "prune was not killed at {stage}"
        );
        assert_sound(&env, &src, &trees);
        env.ok(&["prune", "--repack-below", "90"]);
        assert_sound(&env, &src, &trees);
    }
}
