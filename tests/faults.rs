//! Bad input and faults: each gives a one-line error, a distinct exit code,
//! and leaves nothing behind that breaks the next run.

mod common;

use std::fs;
use std::process::Stdio;
use std::time::Duration;

use common::{random_bytes, Env};

const NO_REPOSITORY: i32 = 10;
const WRONG_PASSWORD: i32 = 12;
const DAMAGED: i32 = 13;
const DISK_FULL: i32 = 14;
const UNSUPPORTED: i32 = 15;
const CORRUPT: i32 = 16;
const NOT_EMPTY: i32 = 17;
const SOURCE_MISSING: i32 = 18;
const INTERRUPTED: i32 = 130;

fn one_line_error(out: &std::process::Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let first = err
        .lines()
        .find(|l| l.starts_with("vouch: "))
        .unwrap_or_else(|| panic!("no error line in {err:?}"));
    assert!(err.contains("hint: "), "no hint in {err:?}");
    first.to_string()
}

fn small_repo() -> (Env, std::path::PathBuf) {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), random_bytes(200_000, 9)).unwrap();
    env.backup(&[&src]);
    (env, src)
}

#[test]
fn wrong_passphrase() {
    let (env, _) = small_repo();
    let out = env
        .cmd()
        .env("VOUCH_PASSWORD", "nope")
        .arg("snapshots")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(WRONG_PASSWORD));
    assert!(one_line_error(&out).contains("wrong passphrase"));
}

#[test]
fn passphrase_from_file_and_command() {
    let (env, _) = small_repo();
    let pwfile = env.path("pw");
    fs::write(&pwfile, format!("{}\n", common::PASSWORD)).unwrap();
    let out = env
        .cmd()
        .env_remove("VOUCH_PASSWORD")
        .env("VOUCH_PASSWORD_FILE", &pwfile)
        .arg("snapshots")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = env
        .cmd()
        .env_remove("VOUCH_PASSWORD")
        .env(
            "VOUCH_PASSWORD_COMMAND",
            format!("cat {}", pwfile.display()),
        )
        .arg("snapshots")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    // No passphrase and no terminal: a clear error, not a hang.
    let out = env
        .cmd()
        .env_remove("VOUCH_PASSWORD")
        .arg("snapshots")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(WRONG_PASSWORD));
    assert!(one_line_error(&out).contains("no passphrase"));
}

#[test]
fn no_repository_and_init_refuses_non_empty() {
    let env = Env::new();
    let out = env.run(&["snapshots"]);
    assert_eq!(out.status.code(), Some(NO_REPOSITORY));
    assert!(one_line_error(&out).contains("no repository"));
    fs::create_dir_all(&env.repo).unwrap();
    fs::write(env.repo.join("something"), b"x").unwrap();
    let out = env.run(&[
        "init",
        "--insecure-kdf",
        "--kdf-memory-kib",
        "1024",
        "--kdf-iterations",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(one_line_error(&out).contains("not empty"));
}

#[test]
fn newer_format_and_corrupt_config() {
    let (env, _) = small_repo();
    let config = env.repo.join("config");
    let original = fs::read_to_string(&config).unwrap();
    fs::write(
        &config,
        original.replace("\"version\": 1", "\"version\": 7"),
    )
    .unwrap();
    let out = env.run(&["snapshots"]);
    assert_eq!(out.status.code(), Some(UNSUPPORTED));
    assert!(one_line_error(&out).contains("version 7"));
    fs::write(&config, "{ not json").unwrap();
    let out = env.run(&["snapshots"]);
    assert_eq!(out.status.code(), Some(CORRUPT));
    assert!(one_line_error(&out).contains("config is corrupt"));
    fs::write(&config, original).unwrap();
    env.ok(&["snapshots"]);
}

#[test]
fn corrupt_key_file() {
    let (env, _) = small_repo();
    let key = fs::read_dir(env.repo.join("keys"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let original = fs::read(&key).unwrap();
    fs::write(&key, &original[..original.len() / 2]).unwrap();
    let out = env.run(&["snapshots"]);
    assert_eq!(out.status.code(), Some(CORRUPT));
    assert!(one_line_error(&out).contains("key file"));
    fs::write(&key, original).unwrap();
    env.ok(&["snapshots"]);
}

#[test]
fn truncated_and_missing_packs_are_reported_with_what_they_affect() {
    let (env, _) = small_repo();
    let packs = vouch_chaos::files_below(&env.repo.join("data"));
    assert!(!packs.is_empty());
    vouch_chaos::truncate(&packs[0], 100).unwrap();
    let out = env.run(&["verify"]);
    assert_eq!(
        out.status.code(),
        Some(DAMAGED),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is affected"), "{err}");
    fs::remove_file(&packs[0]).unwrap();
    let out = env.run(&["verify", "--json"]);
    assert_eq!(out.status.code(), Some(DAMAGED));
    let v = common::summary_of(&String::from_utf8_lossy(&out.stdout));
    let damage = v["report"]["damage"].as_array().unwrap();
    assert!(
        damage.iter().any(|d| d["problem"] == "pack is missing"),
        "{v}"
    );
    let target = env.path("t");
    let out = env.run(&["restore", "latest", "--target", target.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(DAMAGED),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn source_missing_and_target_not_empty() {
    let (env, src) = small_repo();
    let out = env.run(&["backup", env.path("does-not-exist").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(SOURCE_MISSING));
    assert!(one_line_error(&out).contains("does not exist"));
    let target = env.path("t");
    fs::create_dir_all(&target).unwrap();
    fs::write(target.join("precious"), b"mine").unwrap();
    let out = env.run(&["restore", "latest", "--target", target.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(NOT_EMPTY));
    assert_eq!(
        fs::read(target.join("precious")).unwrap(),
        b"mine",
        "nothing may be touched"
    );
    env.ok(&[
        "restore",
        "latest",
        "--target",
        target.to_str().unwrap(),
        "--overwrite",
    ]);
    let restored = target.join(src.strip_prefix("/").unwrap()).join("f");
    assert_eq!(
        fs::read(restored).unwrap(),
        fs::read(src.join("f")).unwrap()
    );
}

#[test]
fn disk_full_while_backing_up_and_restoring() {
    if !common::is_root() {
        eprintln!("SKIPPED: needs root to mount a small tmpfs");
        return;
    }
    let env = Env::new();
    let mnt = env.path("small");
    let _fs = vouch_chaos::Tmpfs::mount(&mnt, 4 << 20).unwrap();
    let env2 = Env {
        dir: tempfile::tempdir().unwrap(),
        repo: mnt.join("repo"),
    };
    env2.init();
    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("big"), random_bytes(8 << 20, 5)).unwrap();
    let out = env2.run(&["backup", src.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(DISK_FULL),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(one_line_error(&out).contains("disk full"));
    // The repository still works: a smaller backup succeeds after prune frees space.
    env2.ok(&["prune"]);
    fs::write(src.join("big"), random_bytes(1 << 20, 6)).unwrap();
    env2.ok(&["backup", src.to_str().unwrap()]);
    env2.ok(&["verify", "--read-data"]);

    // Restore into a full disk, then resume once there is room.
    let small_target = env.path("small-target");
    let _t = vouch_chaos::Tmpfs::mount(&small_target, 512 << 10).unwrap();
    let out = env2.run(&[
        "restore",
        "latest",
        "--target",
        small_target.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(DISK_FULL),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn sigint_during_backup_leaves_a_usable_repository() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    common::random_files(&src, 40, 1 << 20, 0);
    let mut child = env
        .cmd()
        .args(["backup", "--sync-level", "file", src.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(150));
    vouch_chaos::interrupt(&child).unwrap();
    let status = child.wait().unwrap();
    // Either it was interrupted, or it was fast enough to finish.
    assert!(
        matches!(status.code(), Some(INTERRUPTED) | Some(0)),
        "{status}"
    );
    assert!(
        fs::read_dir(env.repo.join("locks"))
            .unwrap()
            .next()
            .is_none(),
        "lock left behind"
    );
    env.ok(&["verify", "--read-data"]);
    env.ok(&["backup", src.to_str().unwrap()]);
    env.ok(&["prune"]);
    env.ok(&["verify", "--read-data"]);
}

#[test]
fn interrupted_restore_resumes_with_the_same_command() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    common::random_files(&src, 30, 1 << 20, 100);
    let snap = env.backup(&[&src]);
    let target = env.path("t");
    let spec = format!("{snap}:{}", src.display());
    let args = [
        "restore",
        spec.as_str(),
        "--target",
        target.to_str().unwrap(),
        "--threads",
        "1",
    ];
    // Kill it part-way (SIGKILL: no cleanup at all).
    let mut resumed = false;
    for delay in [30u64, 60, 120] {
        let out = vouch_chaos::run_and_kill(
            env.cmd()
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            Duration::from_millis(delay),
        )
        .unwrap();
        if out == vouch_chaos::KillOutcome::Killed
            && target.join(".vouch-restore-in-progress").exists()
        {
            resumed = true;
            break;
        }
        let _ = fs::remove_dir_all(&target);
    }
    let out = env.ok(&[
        args[0], args[1], args[2], args[3], args[4], args[5], "--json", "--verify",
    ]);
    let v = common::summary_of(&out);
    if resumed {
        assert_eq!(v["summary"]["resumed"], true, "{v}");
    }
    assert_eq!(common::describe(&src), common::describe(&target));
}

#[test]
fn sigint_during_restore_says_how_to_resume() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    common::random_files(&src, 40, 1 << 20, 500);
    let snap = env.backup(&[&src]);
    let target = env.path("t");
    let spec = format!("{snap}:{}", src.display());
    let args = [
        "restore",
        spec.as_str(),
        "--target",
        target.to_str().unwrap(),
        "--threads",
        "1",
    ];
    let mut interrupted = false;
    for delay in [20u64, 50, 100, 200] {
        let _ = fs::remove_dir_all(&target);
        let child = env
            .cmd()
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        vouch_chaos::interrupt(&child).unwrap();
        let out = child.wait_with_output().unwrap();
        // Too early (before the handler or before the restore began) or too
        // late (already done): try the next delay.
        let marker = target.join(".vouch-restore-in-progress").exists();
        if out.status.code() == Some(INTERRUPTED) && marker {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("run the same command again"), "{err}");
            interrupted = true;
            break;
        }
        assert!(
            matches!(out.status.code(), Some(0) | Some(INTERRUPTED) | None),
            "{:?}",
            out.status
        );
    }
    assert!(interrupted, "no SIGINT landed during the restore");
    let out = env.ok(&[args[0], args[1], args[2], args[3], "--json", "--verify"]);
    assert_eq!(common::summary_of(&out)["summary"]["resumed"], true);
    assert_eq!(common::describe(&src), common::describe(&target));
}
