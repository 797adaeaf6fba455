//! Several writers on one repository, and prune against a paused writer.

mod common;

use std::fs;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{describe, random_bytes, Env};

const LOCKED: i32 = 11;

fn wait_for_lock(env: &Env) {
    let deadline = Instant::now() + Duration::from_secs(20);
    // A lock being written is a temporary file first; wait for the real one.
    let taken = || {
        fs::read_dir(env.repo.join("locks"))
            .unwrap()
            .flatten()
            .any(|e| !e.file_name().to_string_lossy().starts_with(".tmp-"))
    };
    while !taken() {
        assert!(Instant::now() < deadline, "the backup never took its lock");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn prune_never_deletes_what_a_paused_backup_needs() {
    let env = Env::new();
    env.init();
    let old = env.path("old");
    fs::create_dir_all(&old).unwrap();
    fs::write(old.join("x"), random_bytes(500_000, 1)).unwrap();
    env.backup(&[&old]);
    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..30 {
        fs::write(src.join(format!("f{i}")), random_bytes(1 << 20, 10 + i)).unwrap();
    }
    // Forget the old snapshot so that prune has something to delete.
    let snaps: serde_json::Value =
        serde_json::from_str(env.ok(&["snapshots", "--json"]).trim()).unwrap();
    let old_id = snaps[0]["id"].as_str().unwrap().to_string();
    env.ok(&["forget", &old_id]);

    let mut writer = env
        .cmd()
        .args(["backup", "--sync-level", "file", src.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_lock(&env);
    vouch_chaos::pause(&writer).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let data_before = vouch_chaos::files_below(&env.repo.join("data"));
    let out = env.run(&["prune"]);
    assert_eq!(
        out.status.code(),
        Some(LOCKED),
        "prune must refuse while a backup holds its lock: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("backup"),
        "the message names the holder"
    );
    assert_eq!(
        vouch_chaos::files_below(&env.repo.join("data")),
        data_before,
        "prune deleted data"
    );
    vouch_chaos::resume(&writer).unwrap();
    let status = writer.wait().unwrap();
    assert_eq!(status.code(), Some(0));

    // Now prune runs, and the new snapshot is whole.
    env.ok(&["prune"]);
    env.ok(&["verify", "--read-data"]);
    let target = env.path("t");
    env.ok(&[
        "restore",
        &format!("latest:{}", src.display()),
        "--target",
        target.to_str().unwrap(),
    ]);
    assert_eq!(describe(&src), describe(&target));
}

#[test]
fn concurrent_backups_into_one_repository() {
    let env = Env::new();
    env.init();
    let mut sources = Vec::new();
    for s in 0..4 {
        let src = env.path(&format!("src{s}"));
        fs::create_dir_all(&src).unwrap();
        for i in 0..8 {
            // Shared content across sources, plus content of their own.
            fs::write(src.join(format!("shared{i}")), random_bytes(200_000, i)).unwrap();
            fs::write(
                src.join(format!("own{i}")),
                random_bytes(200_000, 1000 * (s + 1) + i),
            )
            .unwrap();
        }
        sources.push(src);
    }
    let children: Vec<_> = sources
        .iter()
        .map(|src| {
            env.cmd()
                .args(["backup", src.to_str().unwrap()])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    env.ok(&["verify", "--read-data"]);
    let snaps: serde_json::Value =
        serde_json::from_str(env.ok(&["snapshots", "--json"]).trim()).unwrap();
    assert_eq!(snaps.as_array().unwrap().len(), 4);
    for (i, src) in sources.iter().enumerate() {
        let target = env.path(&format!("t{i}"));
        let snap = snaps
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["paths"][0] == src.to_str().unwrap())
            .unwrap();
        let id = snap["id"].as_str().unwrap();
        env.ok(&[
            "restore",
            &format!("{id}:{}", src.display()),
            "--target",
            target.to_str().unwrap(),
        ]);
        assert_eq!(describe(src), describe(&target));
    }
    // Prune after concurrent writers: duplicates of shared blobs do not break anything.
    env.ok(&["prune"]);
    env.ok(&["verify", "--read-data"]);
}
