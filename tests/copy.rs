//! `vouch copy`: snapshots into another repository with another key and
//! other chunker parameters; the copies verify and restore to the very
//! trees backed up, a second run copies nothing, a copy killed midway
//! completes when run again without duplicates, and locks hold.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::Duration;

use common::{describe, random_bytes, random_files, Env, PASSWORD};
use vouch_chaos::{run_and_kill, KillOutcome, Rng};

const DEST_PASSWORD: &str = "another passphrase entirely";

/// A second repository, with its own passphrase and chunker.
fn destination() -> Env {
    let dest = Env::new();
    common::stdout_of(dest.cmd().env("VOUCH_PASSWORD", DEST_PASSWORD).args([
        "init",
        "--insecure-kdf",
        "--kdf-memory-kib",
        "1024",
        "--kdf-iterations",
        "1",
        "--chunk-min-kib",
        "32",
        "--chunk-avg-kib",
        "128",
        "--chunk-max-kib",
        "512",
        "--pack-size-mib",
        "2",
    ]));
    dest
}

fn copy_cmd(env: &Env, dest: &Env, extra: &[&str]) -> std::process::Command {
    let mut c = env.cmd();
    c.env("VOUCH_TO_PASSWORD", DEST_PASSWORD)
        .arg("copy")
        .arg("--to")
        .arg(&dest.repo)
        .args(extra);
    c
}

fn run_copy(env: &Env, dest: &Env, extra: &[&str]) -> serde_json::Value {
    let out = common::stdout_of(copy_cmd(env, dest, &["--json"]).args(extra));
    common::summary_of(&out)
}

/// `vouch` on the destination with its passphrase.
fn in_dest(dest: &Env, args: &[&str]) -> String {
    let out = common::stdout_of(dest.cmd().env("VOUCH_PASSWORD", DEST_PASSWORD).args(args));
    out
}

fn dest_snapshots(dest: &Env) -> Vec<serde_json::Value> {
    serde_json::from_str::<serde_json::Value>(in_dest(dest, &["snapshots", "--json"]).trim())
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn restored_tree(dest: &Env, snapshot: &str, source: &Path) -> BTreeMap<String, String> {
    let target = dest.path(&format!("r-{snapshot}"));
    in_dest(
        dest,
        &["restore", snapshot, "--target", target.to_str().unwrap()],
    );
    let tree = describe(&target.join(source.strip_prefix("/").unwrap()));
    fs::remove_dir_all(&target).unwrap();
    tree
}

#[test]
fn copies_verify_restore_exactly_and_a_second_run_copies_nothing() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    random_files(&src, 8, 250_000, 1);
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("sub/small"), b"small file").unwrap();
    let first = env.backup(&[&src]);
    let first_tree = describe(&src);
    fs::write(src.join("f3"), random_bytes(250_000, 50)).unwrap();
    let second = env.backup(&[&src]);
    let second_tree = describe(&src);
    let dest = destination();

    let report = run_copy(&env, &dest, &[&first[..8]]);
    let copied = report["snapshots"].as_array().unwrap();
    assert_eq!(copied.len(), 1);
    assert_eq!(copied[0]["copied"], true);
    let stored_first = copied[0]["bytes_stored"].as_u64().unwrap();
    // All of them: the first is there already, the second shares all but
    // one file with it.
    let report = run_copy(&env, &dest, &[]);
    let copied = report["snapshots"].as_array().unwrap();
    assert_eq!(copied.len(), 2);
    assert_eq!(copied[0]["copied"], false, "{report}");
    assert_eq!(copied[1]["copied"], true, "{report}");
    let stored_second = copied[1]["bytes_stored"].as_u64().unwrap();
    assert!(
        stored_second * 4 < stored_first,
        "the second copy stored {stored_second} bytes, the first {stored_first}: no dedup"
    );

    let snaps = dest_snapshots(&dest);
    assert_eq!(snaps.len(), 2);
    assert_eq!(
        snaps[0]["paths"],
        serde_json::json!([src.to_str().unwrap()])
    );
    let out = in_dest(&dest, &["verify", "--read-data"]);
    assert!(out.contains("no damage found"), "{out}");
    assert_eq!(
        restored_tree(&dest, snaps[0]["id"].as_str().unwrap(), &src),
        first_tree
    );
    assert_eq!(
        restored_tree(&dest, snaps[1]["id"].as_str().unwrap(), &src),
        second_tree
    );

    // Nothing left to copy.
    let report = run_copy(&env, &dest, &[]);
    assert!(
        report["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["copied"] == false),
        "{report}"
    );
    assert_eq!(dest_snapshots(&dest).len(), 2);
    let _ = second;
}

#[test]
fn a_copy_killed_midway_completes_when_run_again_without_duplicates() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    let mut trees = Vec::new();
    for round in 0..3u64 {
        random_files(&src, 10, 400_000, 100 + round * 20);
        env.backup(&[&src]);
        trees.push(describe(&src));
    }
    let dest = destination();
    let seed = Rng::seed_from_clock();
    eprintln!("seed {seed}");
    let mut rng = Rng::new(seed);
    let mut killed = 0;
    for _ in 0..4 {
        let mut cmd = copy_cmd(&env, &dest, &[]);
        cmd.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        match run_and_kill(&mut cmd, Duration::from_millis(30 + rng.below(400))).unwrap() {
            KillOutcome::Killed => killed += 1,
            KillOutcome::Finished(code) => assert_eq!(code, 0),
        }
        // Whatever committed is whole.
        let out = in_dest(&dest, &["verify", "--read-data"]);
        assert!(out.contains("no damage found"), "{out}");
    }
    eprintln!("{killed} copies killed");
    run_copy(&env, &dest, &[]);
    let snaps = dest_snapshots(&dest);
    assert_eq!(snaps.len(), 3, "one copy per snapshot, no duplicates");
    for (s, tree) in snaps.iter().zip(&trees) {
        assert_eq!(&restored_tree(&dest, s["id"].as_str().unwrap(), &src), tree);
    }
}

#[test]
fn wrong_passphrases_and_the_same_repository_are_refused_clearly() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    random_files(&src, 1, 1000, 9);
    env.backup(&[&src]);
    let dest = destination();
    let out = env
        .cmd()
        .env("VOUCH_TO_PASSWORD", "wrong")
        .args(["copy", "--to", dest.repo.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(12),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = env
        .cmd()
        .env("VOUCH_TO_PASSWORD", PASSWORD)
        .args(["copy", "--to", env.repo.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("same repository"));
    assert!(dest_snapshots(&dest).is_empty());
}
