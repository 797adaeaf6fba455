//! Regression tests of the engine review (`../shared/reviews/engine.md`),
//! each named after its finding: the CLI on real repositories in temporary
//! directories, driven into the states the review describes.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{describe, random_bytes, summary_of, Env};

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = vouch_chaos::files_below(dir)
        .into_iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| !n.starts_with(".tmp-"))
        .collect();
    v.sort();
    v
}

fn restore_to(env: &Env, snap: &str, src: &Path, target: &Path) {
    env.ok(&[
        "restore",
        &format!("{snap}:{}", src.display()),
        "--target",
        target.to_str().unwrap(),
    ]);
}

/// Finding 2: an index file left behind by an interrupted prune (superseded
/// by the new consolidated index) came back to life at the next prune and
/// made later backups skip blobs whose packs were deleted.
#[test]
fn finding_2_an_interrupted_prune_never_resurrects_a_stale_index() {
    let env = Env::new();
    env.init();
    let src = env.path("s");
    fs::create_dir_all(&src).unwrap();
    let old = random_bytes(100 * 1024, 1);
    fs::write(src.join("old"), &old).unwrap();
    env.backup(&[&src]);
    let first_index = names(&env.repo.join("index"));
    assert_eq!(first_index.len(), 1);
    let saved = fs::read(env.repo.join("index").join(&first_index[0])).unwrap();
    fs::remove_file(src.join("old")).unwrap();
    fs::write(src.join("new"), b"n").unwrap();
    env.backup(&[&src]);
    env.ok(&["forget", "--keep-last", "1"]);
    env.ok(&["prune"]);
    // The state after a kill between the new index and the unlinks: the
    // first session's index file is back.
    fs::write(env.repo.join("index").join(&first_index[0]), &saved).unwrap();
    env.ok(&["verify", "--read-data"]);
    env.ok(&["prune"]);
    env.ok(&["verify", "--read-data"]);
    assert!(
        !names(&env.repo.join("index")).contains(&first_index[0]),
        "a superseded index file is removed by the next prune"
    );
    // The old content comes back: it must be stored again, not deduplicated
    // against a deleted pack.
    fs::write(src.join("old"), &old).unwrap();
    let out = env.ok(&["backup", "--json", src.to_str().unwrap()]);
    let added = summary_of(&out)["summary"]["blobs_added"].as_u64().unwrap();
    assert!(added > 0, "the reverted file was not stored: {out}");
    env.ok(&["verify", "--read-data"]);
    let t = env.path("t");
    restore_to(&env, "latest", &src, &t);
    assert_eq!(fs::read(t.join("old")).unwrap(), old);
}

/// Finding 3: with an index file lost, prune deleted the only copy of data
/// a snapshot needs as an unindexed "leftover".
#[test]
fn finding_3_prune_refuses_when_a_needed_blob_is_in_no_index() {
    let env = Env::new();
    env.init();
    let src = env.path("s");
    fs::create_dir_all(&src).unwrap();
    let a = random_bytes(200 * 1024, 2);
    fs::write(src.join("a"), &a).unwrap();
    let s1 = env.backup(&[&src]);
    let i1 = names(&env.repo.join("index"));
    fs::write(src.join("b"), random_bytes(50 * 1024, 3)).unwrap();
    env.backup(&[&src]);
    fs::remove_file(env.repo.join("index").join(&i1[0])).unwrap();
    env.ok(&["forget", &s1]);
    let packs_before = names(&env.repo.join("data"));
    let err = env.expect_stderr(&["prune"], 13);
    assert!(err.contains("repair index"), "{err}");
    assert_eq!(
        names(&env.repo.join("data")),
        packs_before,
        "prune deleted nothing"
    );
    env.ok(&["repair", "index"]);
    env.ok(&["prune"]);
    env.ok(&["verify", "--read-data"]);
    let t = env.path("t");
    restore_to(&env, "latest", &src, &t);
    assert_eq!(fs::read(t.join("a")).unwrap(), a);
}

/// Finding 3, second half: an indexed pack that is missing on storage makes
/// prune refuse instead of trusting the index.
#[test]
fn finding_3_prune_refuses_when_an_indexed_pack_is_missing() {
    let env = Env::new();
    env.init();
    let src = env.path("s");
    common::random_files(&src, 4, 64 * 1024, 10);
    env.backup(&[&src]);
    let pack = vouch_chaos::files_below(&env.repo.join("data"))
        .into_iter()
        .next()
        .unwrap();
    fs::remove_file(&pack).unwrap();
    let err = env.expect_stderr(&["prune"], 13);
    assert!(err.contains("missing"), "{err}");
}

/// Finding 10: one flipped byte made `repair index` drop a whole pack, and
/// the next prune deleted every intact blob in it.
#[test]
fn finding_10_repair_index_keeps_the_intact_blobs_of_a_damaged_pack() {
    let env = Env::new();
    env.init();
    let src = env.path("s");
    fs::create_dir_all(&src).unwrap();
    // Small files: several blobs share one pack.
    for i in 0..6 {
        fs::write(src.join(format!("f{i}")), random_bytes(20 * 1024, 100 + i)).unwrap();
    }
    env.backup(&[&src]);
    // The largest pack holds the data of several files (each compression
    // worker fills its own pack, so there may be two; trees are small).
    let mut packs = vouch_chaos::files_below(&env.repo.join("data"));
    packs.sort_by_key(|p| std::cmp::Reverse(fs::metadata(p).unwrap().len()));
    assert!(fs::metadata(&packs[0]).unwrap().len() > 2 * 20 * 1024);
    // Inside the first blob, past its nonce.
    vouch_chaos::flip_bit(&packs[0], 100, 3).unwrap();
    let out = env.ok(&["repair", "index", "--json"]);
    let r = &summary_of(&out)["report"];
    assert_eq!(r["salvaged_packs"], 1, "{out}");
    assert_eq!(r["lost_blobs"], 1, "{out}");
    // Prune must not delete the pack (it holds five intact files) and must
    // not pretend the snapshot is whole either.
    let err = env.expect_stderr(&["prune"], 13);
    assert!(err.contains("in no index"), "{err}");
    assert!(packs[0].exists());
    let intact = (0..6)
        .filter(|i| {
            let t: PathBuf = env.path(&format!("t{i}"));
            let ok = env
                .run(&[
                    "restore",
                    &format!("latest:{}", src.join(format!("f{i}")).display()),
                    "--target",
                    t.to_str().unwrap(),
                ])
                .status
                .success();
            ok && fs::read(t.join(format!("f{i}"))).ok()
                == Some(random_bytes(20 * 1024, 100 + *i as u64))
        })
        .count();
    assert_eq!(intact, 5, "every file but the damaged one restores");
}

/// Finding 9: a zero-length index file (a power cut before its data was
/// durable) blocked backup, restore, verify and prune.
#[test]
fn finding_9_an_empty_index_file_does_not_wedge_the_repository() {
    let env = Env::new();
    env.init();
    let src = env.path("s");
    common::random_files(&src, 3, 40 * 1024, 20);
    env.backup(&[&src]);
    let empty = "ab".repeat(32);
    fs::write(env.repo.join("index").join(&empty), b"").unwrap();
    fs::write(src.join("more"), random_bytes(10_000, 21)).unwrap();
    env.backup(&[&src]);
    env.ok(&["snapshots"]);
    let t = env.path("t");
    restore_to(&env, "latest", &src, &t);
    assert_eq!(describe(&t), describe(&src));
    assert_eq!(
        env.run(&["verify"]).status.code(),
        Some(13),
        "verify reports it"
    );
    let err = env.expect_stderr(&["prune"], 13);
    assert!(err.contains("repair index"), "{err}");
    env.ok(&["repair", "index"]);
    env.ok(&["prune"]);
    env.ok(&["verify", "--read-data"]);
}

/// Finding 9, manifests: an empty snapshot file (sync level `none` and a
/// power cut) broke every command that lists snapshots.
#[test]
fn finding_9_an_empty_snapshot_file_is_skipped_and_can_be_removed() {
    let env = Env::new();
    env.init();
    let src = env.path("s");
    common::random_files(&src, 3, 40 * 1024, 30);
    env.backup(&[&src]);
    let empty = "cd".repeat(32);
    fs::write(env.repo.join("snapshots").join(&empty), b"").unwrap();
    env.backup(&[&src]);
    let snaps: serde_json::Value =
        serde_json::from_str(env.ok(&["snapshots", "--json"]).trim()).unwrap();
    assert_eq!(snaps.as_array().unwrap().len(), 2);
    assert_eq!(
        env.run(&["verify"]).status.code(),
        Some(13),
        "verify reports it"
    );
    let err = env.expect_stderr(&["prune"], 16);
    assert!(err.contains("repair snapshots"), "{err}");
    env.ok(&["repair", "snapshots"]);
    assert!(!env.repo.join("snapshots").join(&empty).exists());
    env.ok(&["prune"]);
    env.ok(&["verify", "--read-data"]);
}

fn edit_config(env: &Env, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = env.repo.join("config");
    let mut v: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
}

/// Finding 12: the config was used unchecked: a huge pack size truncated
/// blob offsets, a tiny average chunk size panicked the chunker.
#[test]
fn finding_12_a_config_out_of_bounds_is_refused_on_open() {
    let env = Env::new();
    env.init();
    let src = env.path("s");
    common::random_files(&src, 1, 1000, 40);
    let good = fs::read(env.repo.join("config")).unwrap();
    for (field, value) in [
        ("pack_size", serde_json::json!(6u64 << 30)),
        ("avg_size", serde_json::json!(2)),
        ("max_size", serde_json::json!(1u64 << 30)),
        ("compression_level", serde_json::json!(99)),
    ] {
        fs::write(env.repo.join("config"), &good).unwrap();
        edit_config(&env, |v| {
            if v.get(field).is_some() {
                v[field] = value.clone();
            } else {
                v["chunker"][field] = value.clone();
            }
        });
        let err = env.expect_stderr(&["backup", src.to_str().unwrap()], 16);
        assert!(err.contains("config"), "{field}: {err}");
        assert!(!err.contains("panicked"), "{field}: {err}");
    }
    fs::write(env.repo.join("config"), &good).unwrap();
    env.backup(&[&src]);
}

/// Finding 14 and the key-name item of finding 18: a planted key file with
/// huge Argon2 costs, or one under a name that is not a key id, stopped
/// every open; weak parameters were accepted for new keys.
#[test]
fn finding_14_planted_key_files_do_not_stop_an_open() {
    let env = Env::new();
    env.init();
    let src = env.path("s");
    common::random_files(&src, 1, 1000, 50);
    let keys = env.repo.join("keys");
    let real = vouch_chaos::files_below(&keys).pop().unwrap();
    let mut planted: serde_json::Value = serde_json::from_slice(&fs::read(&real).unwrap()).unwrap();
    planted["params"]["memory_kib"] = serde_json::json!(u32::MAX);
    planted["params"]["iterations"] = serde_json::json!(u32::MAX);
    // Sorts before the real key, so it is tried first.
    fs::write(
        keys.join("0".repeat(64)),
        serde_json::to_vec(&planted).unwrap(),
    )
    .unwrap();
    // A copy of the real key under a name that is not a key id.
    fs::copy(&real, keys.join("0-copy")).unwrap();
    let started = std::time::Instant::now();
    env.backup(&[&src]);
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    // The planted file is skipped with a warning that names it and says
    // why; the real key opens the repository.
    let out = env.run(&["key", "list"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.lines().any(|l| l.contains("skipping key file")
            && l.contains(&"0".repeat(64))
            && l.contains("outside the accepted range")),
        "{err}"
    );
    // New keys must meet the minimum unless --insecure-kdf is given.
    let out = env
        .cmd()
        .env("VOUCH_NEW_PASSWORD", "another passphrase")
        .args([
            "key",
            "add",
            "--kdf-memory-kib",
            "8",
            "--kdf-iterations",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("minimum"));
}

/// Finding 11: a lock file released between the listing and the read
/// counted as a conflict, so concurrent backups failed at random.
#[test]
fn finding_11_concurrent_backups_never_fail_on_each_others_locks() {
    let env = Env::new();
    env.init();
    let src = env.path("s");
    common::random_files(&src, 4, 2000, 60);
    for round in 0..4 {
        let children: Vec<_> = (0..6)
            .map(|_| {
                env.cmd()
                    .args(["backup", "--quiet", src.to_str().unwrap()])
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// This process's start time, as a lock of a live process records it.
fn own_start_time() -> u64 {
    let stat = fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 1..];
    after.split_whitespace().nth(19).unwrap().parse().unwrap()
}

fn plant_lock(env: &Env, name: &str, pid: u32, pid_start: u64, exclusive: bool) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let lock = serde_json::json!({
        "exclusive": exclusive, "purpose": "test", "host": vouch::util::host_name(),
        "pid": pid, "user": "t", "created_ns": now, "refreshed_ns": now,
        "session": "s",
        "boot_id": fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap().trim(),
        "pid_ns": fs::read_link("/proc/self/ns/pid").unwrap().to_string_lossy(),
        "pid_start": pid_start,
    });
    fs::write(env.repo.join("locks").join(name), lock.to_string()).unwrap();
}

/// `vouch unlock` removes stale locks only; `--retry-lock` waits.
#[test]
fn unlock_and_retry_lock() {
    let env = Env::new();
    env.init();
    let src = env.path("s");
    common::random_files(&src, 1, 1000, 70);
    plant_lock(&env, "dead", 0x7fff_fff0, 1, true);
    plant_lock(&env, "live", std::process::id(), own_start_time(), true);
    let out = env.ok(&["unlock", "--json"]);
    assert!(out.contains("\"removed\":true"), "{out}");
    assert!(!env.repo.join("locks/dead").exists());
    assert!(env.repo.join("locks/live").exists(), "a live lock is kept");
    assert_eq!(
        env.run(&["backup", src.to_str().unwrap()]).status.code(),
        Some(11)
    );
    let live = env.repo.join("locks/live");
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(1500));
        fs::remove_file(live).unwrap();
    });
    env.ok(&["--retry-lock", "1m", "backup", src.to_str().unwrap()]);
    releaser.join().unwrap();
    plant_lock(&env, "live", std::process::id(), own_start_time(), false);
    env.ok(&["unlock", "--force"]);
    assert!(names(&env.repo.join("locks")).is_empty());
}

/// Prune deletes leftovers whose header reads (also a copy of an indexed
/// pack, as a crash that undid the deletion of a repacked pack leaves it),
/// deletes empty ones, keeps those it cannot read, and deletes nothing on a
/// dry run. (Found by cargo mutants: no test saw leftovers go.)
#[test]
fn prune_removes_readable_leftovers_and_keeps_unreadable_ones() {
    let env = Env::new();
    env.init();
    let src = env.path("s");
    common::random_files(&src, 4, 64 * 1024, 80);
    env.backup(&[&src]);
    let data = env.repo.join("data");
    let packs = vouch_chaos::files_below(&data);
    let put = |name: &str, bytes: &[u8]| {
        let dir = data.join(&name[..2]);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(name), bytes).unwrap();
        dir.join(name)
    };
    let copy = put(&"c".repeat(64), &fs::read(&packs[0]).unwrap());
    let empty = put(&"d".repeat(64), b"");
    let garbage = put(&"e".repeat(64), &random_bytes(4096, 81));
    let out = env.ok(&["prune", "--dry-run", "--json"]);
    let r = &summary_of(&out)["report"];
    assert_eq!(r["dry_run"], true, "{out}");
    assert_eq!(r["leftover_packs"], 2, "{out}");
    assert!(copy.exists() && empty.exists() && garbage.exists());
    let out = env.ok(&["prune", "--json"]);
    let r = &summary_of(&out)["report"];
    assert_eq!(r["dry_run"], false, "{out}");
    assert_eq!(r["leftover_packs"], 2, "{out}");
    assert_eq!(r["unreadable_packs_kept"], 1, "{out}");
    assert!(!copy.exists(), "a readable leftover is deleted");
    assert!(!empty.exists(), "an empty leftover is deleted");
    assert!(garbage.exists(), "an unreadable leftover is kept");
    env.ok(&["verify", "--read-data"]);
    let t = env.path("t");
    restore_to(&env, "latest", &src, &t);
    assert_eq!(describe(&t), describe(&src));
}

/// An indexed pack with another size than the index records makes prune
/// refuse. (Found by cargo mutants.)
#[test]
fn finding_3_prune_refuses_when_an_indexed_pack_has_the_wrong_size() {
    let env = Env::new();
    env.init();
    let src = env.path("s");
    common::random_files(&src, 4, 64 * 1024, 90);
    env.backup(&[&src]);
    let pack = vouch_chaos::files_below(&env.repo.join("data"))
        .into_iter()
        .next()
        .unwrap();
    let len = fs::metadata(&pack).unwrap().len();
    vouch_chaos::truncate(&pack, len - 1).unwrap();
    let err = env.expect_stderr(&["prune"], 13);
    assert!(err.contains("the index says"), "{err}");
    assert!(pack.exists());
}
