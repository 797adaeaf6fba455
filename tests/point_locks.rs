//! Point locks stored in the repository (`pointlocks/`): every tool honours
//! them. `vouch lock` writes one; `forget` by id is refused, keep rules keep
//! the snapshot, prune leaves its packs in place; a lock cannot be
//! shortened, an extension is a new record, an expired lock is inert, and a
//! record that does not read stops every forget.

mod common;

use std::fs;
use std::time::Duration;

use common::{random_bytes, random_files, Env};

const POINT_LOCKED: i32 = 21;

/// Sleeps until a second past `t` (a lock's end, by this machine's clock).
fn sleep_past(t: std::time::Instant) {
    std::thread::sleep(
        t.saturating_duration_since(std::time::Instant::now()) + Duration::from_secs(1),
    );
}

fn in_secs(s: u64) -> String {
    humantime::format_rfc3339_seconds(
        std::time::SystemTime::now() + std::time::Duration::from_secs(s),
    )
    .to_string()
}

#[test]
fn a_locked_snapshot_survives_forget_and_prune_until_its_date() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    random_files(&src, 6, 200_000, 1);
    let first = env.backup(&[&src]);
    fs::write(src.join("f1"), random_bytes(200_000, 99)).unwrap();
    let second = env.backup(&[&src]);

    let until = in_secs(3600);
    let out = env.ok(&["lock", &first[..8], "--until", &until]);
    assert!(out.contains("locked until"), "{out}");
    assert!(out.contains("enforced by vouch"), "{out}");
    assert_eq!(
        fs::read_dir(env.repo.join("pointlocks")).unwrap().count(),
        1
    );

    // Shown by `snapshots`.
    let v: serde_json::Value =
        serde_json::from_str(env.ok(&["snapshots", "--json"]).trim()).unwrap();
    let locked: Vec<(String, serde_json::Value)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_owned(),
                s["locked_until"].clone(),
            )
        })
        .collect();
    assert_eq!(locked[0].0, first);
    assert!(locked[0].1.is_string(), "{locked:?}");
    assert!(locked[1].1.is_null(), "{locked:?}");

    // Forget by id: refused, nothing deleted (not even the unlocked one
    // named with it).
    let err = env.expect_stderr(&["forget", &second, &first], POINT_LOCKED);
    assert!(err.contains("locked until"), "{err}");
    assert_eq!(env.snapshot_ids().len(), 2);

    // Keep rules keep it, and say why.
    let out = env.ok(&["forget", "--keep-last", "1", "--prune", "--json"]);
    assert!(out.contains("locked until"), "{out}");
    assert_eq!(env.snapshot_ids(), vec![first.clone(), second.clone()]);
    let out = env.ok(&["verify", "--read-data"]);
    assert!(out.contains("no damage found"), "{out}");

    // Shortening is refused; an extension is a new record.
    let err = env.expect_stderr(&["lock", &first, "--until", &in_secs(60)], POINT_LOCKED);
    assert!(err.contains("cannot be shortened"), "{err}");
    env.ok(&["lock", &first, "--until", &in_secs(7200)]);
    assert_eq!(
        fs::read_dir(env.repo.join("pointlocks")).unwrap().count(),
        2
    );
    // Deleting the newest record by hand leaves the older lock in force.
    let newest = fs::read_dir(env.repo.join("pointlocks"))
        .unwrap()
        .flatten()
        .max_by_key(|e| e.metadata().unwrap().modified().unwrap())
        .unwrap();
    fs::remove_file(newest.path()).unwrap();
    env.expect_stderr(&["forget", &first], POINT_LOCKED);
}

#[test]
fn prune_leaves_the_packs_of_a_locked_snapshot_in_place() {
    // A pack holding f0, f1 and f2; the locked snapshot needs only f0, the
    // one that needed all three is forgotten: a third used, so prune would
    // repack it, but not while the lock holds.
    let mut repacked = Vec::new();
    for locked in [false, true] {
        let env = Env::new();
        env.init();
        let src = env.path("src");
        random_files(&src, 3, 300_000, 7);
        let all = env.backup(&[&src]);
        fs::remove_file(src.join("f1")).unwrap();
        fs::remove_file(src.join("f2")).unwrap();
        let some = env.backup(&[&src]);
        if locked {
            env.ok(&["lock", &some, "--until", &in_secs(3600)]);
        }
        env.ok(&["forget", &all]);
        let out = env.ok(&["prune", "--repack-below", "90", "--json"]);
        let report = &common::summary_of(&out)["report"];
        let kept = report["packs_kept_for_locks"].as_u64().unwrap();
        assert_eq!(kept > 0, locked, "{report}");
        repacked.push(report["packs_repacked"].as_u64().unwrap());
        let out = env.ok(&["verify", "--read-data"]);
        assert!(out.contains("no damage found"), "{out}");
    }
    assert!(
        repacked[1] < repacked[0],
        "repacked without and with the lock: {repacked:?}"
    );
}

#[test]
fn an_expired_lock_is_inert_and_prune_removes_its_record() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    random_files(&src, 2, 10_000, 3);
    let id = env.backup(&[&src]);
    // Long enough for the refused forget below on a loaded machine.
    let ends = std::time::Instant::now() + Duration::from_secs(6);
    env.ok(&["lock", &id, "--until", &in_secs(6)]);
    env.expect_stderr(&["forget", &id], POINT_LOCKED);
    sleep_past(ends);
    env.ok(&["forget", &id]);
    let out = env.ok(&["prune", "--json"]);
    let report = &common::summary_of(&out)["report"];
    assert_eq!(report["lock_records_removed"], 1, "{report}");
    assert_eq!(
        fs::read_dir(env.repo.join("pointlocks")).unwrap().count(),
        0
    );
    // A lock in the past is refused outright.
    let id = env.backup(&[&src]);
    let err = env.expect_stderr(&["lock", &id, "--until", "2001-01-01T00:00:00Z"], 2);
    assert!(err.contains("in the past"), "{err}");
}

#[test]
fn a_record_that_does_not_read_stops_every_forget() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    random_files(&src, 2, 10_000, 4);
    let id = env.backup(&[&src]);
    let name = "ab".repeat(32);
    fs::write(env.repo.join("pointlocks").join(&name), b"not a record").unwrap();
    let err = env.expect_stderr(&["forget", &id], 13);
    assert!(err.contains("does not read"), "{err}");
    let err = env.expect_stderr(&["prune"], 13);
    assert!(err.contains("does not read"), "{err}");
    let out = env.expect(&["verify", "--json"], 13);
    assert!(out.contains("point lock record"), "{out}");
    assert_eq!(env.snapshot_ids(), vec![id]);
}

#[test]
fn a_repository_without_the_lock_directory_still_works() {
    // Repositories made before point locks have no pointlocks/.
    let env = Env::new();
    env.init();
    fs::remove_dir(env.repo.join("pointlocks")).unwrap();
    let src = env.path("src");
    random_files(&src, 1, 1000, 5);
    let id = env.backup(&[&src]);
    env.ok(&["snapshots"]);
    env.ok(&["lock", &id, "--until", &in_secs(3600)]);
    env.expect_stderr(&["forget", &id], POINT_LOCKED);
}

/// On a local directory, `VOUCH_IMMUTABLE_FILES=1` (as root, on ext4 here)
/// gives a locked point's files the immutable attribute: `rm` fails, even
/// as root; vouch's own forget and prune, once the lock has passed, clear it
/// and delete; and a later prune keeps the new index immutable.
#[test]
fn locked_files_on_ext4_are_immutable_until_vouch_may_delete_them() {
    use vouch::backend::immutable::is_immutable;
    if !common::is_root() {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root");
        eprintln!("SKIPPED: needs root for chattr +i and a loop mount");
        return;
    }
    let scratch = Env::new();
    let fs_ = common::LoopExt4::mount(scratch.dir.path(), &[]).expect("a loop-mounted ext4");
    let mut env = Env::new();
    env.repo = fs_.mnt.join("repo");
    env.init();
    let src = env.path("src");
    random_files(&src, 3, 300_000, 61);
    let locked = env.backup(&[&src]);
    fs::write(src.join("f0"), random_bytes(300_000, 62)).unwrap();
    let other = env.backup(&[&src]);

    // Long enough for the forget, prune and verify below on a loaded
    // machine: the lock must still hold when prune renews the retention.
    let ends = std::time::Instant::now() + Duration::from_secs(12);
    let out = common::stdout_of(env.cmd().env("VOUCH_IMMUTABLE_FILES", "1").args([
        "lock",
        &locked,
        "--until",
        &in_secs(12),
        "--json",
    ]));
    let lock = common::summary_of(&out);
    assert_eq!(lock["enforced_by"], "by_storage", "{lock}");
    let manifest = env.repo.join("snapshots").join(&locked);
    assert!(is_immutable(&manifest).unwrap());
    let err = fs::remove_file(&manifest).unwrap_err();
    assert_eq!(
        err.kind(),
        std::io::ErrorKind::PermissionDenied,
        "rm as root: {err}"
    );
    let packs: Vec<_> = vouch_chaos::files_below(&env.repo.join("data"));
    assert!(
        packs.iter().any(|p| is_immutable(p).unwrap()),
        "packs of the point"
    );

    // Forgetting and pruning the other snapshot works around the immutable
    // files (the consolidated index is made immutable in turn).
    env.expect_stderr(&["forget", &locked], 21);
    env.ok(&["forget", &other]);
    common::stdout_of(
        env.cmd()
            .env("VOUCH_IMMUTABLE_FILES", "1")
            .args(["prune", "--json"]),
    );
    for index in vouch_chaos::files_below(&env.repo.join("index")) {
        assert!(
            is_immutable(&index).unwrap(),
            "{} after prune",
            index.display()
        );
    }
    let out = env.ok(&["verify", "--read-data"]);
    assert!(out.contains("no damage found"), "{out}");

    // Past the lock, vouch deletes what it decides to delete.
    sleep_past(ends);
    env.ok(&["forget", &locked, "--prune"]);
    assert!(!manifest.exists());
    assert!(env.snapshot_ids().is_empty());
}
