//! Habits admins bring from other tools (`../shared/reviews/ecosystem.md`):
//! logs without colour codes when they go to the journal or a file (D6),
//! and `vouch token` finding the service's data directory through its
//! configuration file (D5), and `latest` never being another host's
//! snapshot by accident (D11).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// `vouch serve` logging into a pipe (the journal, a file) writes plain
/// lines: no ANSI escape sequences.
#[test]
fn logs_into_a_pipe_carry_no_colour_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_vouch"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("VOUCH_LOG", "info")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vouch serve starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = Vec::new();
    for line in BufReader::new(stderr).lines() {
        let line = line.expect("stderr readable");
        let ready = line.contains("vouch serve ready");
        lines.push(line);
        if ready || lines.len() > 500 {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        lines.iter().any(|l| l.contains("vouch serve ready")),
        "{lines:#?}"
    );
    let coloured: Vec<&String> = lines.iter().filter(|l| l.contains('\u{1b}')).collect();
    assert!(
        coloured.is_empty(),
        "escape codes in piped logs: {coloured:#?}"
    );
}

/// `vouch token --config FILE` writes where the service reads: the
/// configuration's `data_dir` (not `./vouch-data` of the working
/// directory); `--data-dir` still wins.
#[test]
fn vouch_token_finds_the_data_directory_through_the_configuration() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("state");
    let config = dir.path().join("vouch.toml");
    std::fs::write(
        &config,
        format!("data_dir = {:?}\n", data.to_str().expect("utf-8")),
    )
    .expect("config");
    let cwd = dir.path().join("elsewhere");
    std::fs::create_dir_all(&cwd).expect("mkdir");
    let token = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_vouch"))
            .arg("token")
            .args(args)
            .current_dir(&cwd)
            .env_remove("VOUCH_DATA_DIR")
            .env_remove("VOUCH_CONFIG")
            .output()
            .expect("vouch token runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    token(&[
        "--config",
        config.to_str().expect("utf-8"),
        "create",
        "--role",
        "viewer",
        "--name",
        "auditor",
    ]);
    let tokens =
        std::fs::read_to_string(data.join("tokens.json")).expect("tokens.json in data_dir");
    assert!(tokens.contains("\"auditor\""), "{tokens}");
    assert!(
        !cwd.join("vouch-data").exists(),
        "nothing written under the working directory"
    );
    let other = dir.path().join("other");
    token(&[
        "--config",
        config.to_str().expect("utf-8"),
        "--data-dir",
        other.to_str().expect("utf-8"),
        "create",
        "--role",
        "viewer",
        "--name",
        "second",
    ]);
    assert!(other.join("tokens.json").exists(), "--data-dir wins");
}

/// On a repository two hosts share, `latest` is this host's newest
/// snapshot even when another host backed up since (restic's `--host`);
/// `--host NAME`, `--any-host` and `--path` choose otherwise, and a filter
/// nothing matches says which hosts there are.
#[test]
fn latest_is_this_hosts_newest_snapshot() {
    let env = common::Env::new();
    env.init();
    let mine = env.path("mine");
    let theirs = env.path("theirs");
    std::fs::create_dir_all(&mine).expect("mkdir");
    std::fs::create_dir_all(&theirs).expect("mkdir");
    std::fs::write(mine.join("here.txt"), b"this host").expect("write");
    std::fs::write(theirs.join("there.txt"), b"another host").expect("write");
    env.ok(&["backup", mine.to_str().expect("utf-8")]);
    // Newer, from another host.
    env.ok(&[
        "backup",
        "--host",
        "elsewhere",
        theirs.to_str().expect("utf-8"),
    ]);
    let names = |args: &[&str]| -> String {
        let mut all = vec!["ls"];
        all.extend_from_slice(args);
        env.ok(&all)
    };
    let ls = names(&["latest"]);
    assert!(ls.contains("here.txt"), "{ls}");
    assert!(!ls.contains("there.txt"), "another host's latest: {ls}");
    let ls = names(&["latest", "--any-host"]);
    assert!(ls.contains("there.txt"), "{ls}");
    let ls = names(&["latest", "--host", "elsewhere"]);
    assert!(ls.contains("there.txt"), "{ls}");
    let ls = names(&[
        "latest",
        "--any-host",
        "--path",
        mine.to_str().expect("utf-8"),
    ]);
    assert!(ls.contains("here.txt"), "{ls}");

    // Restore follows the same rule.
    let target = env.path("restored");
    env.ok(&[
        "restore",
        "latest",
        "--target",
        target.to_str().expect("utf-8"),
    ]);
    let restored: Vec<_> = walk(&target);
    assert!(
        restored.iter().any(|p| p.ends_with("here.txt")),
        "{restored:?}"
    );
    assert!(
        !restored.iter().any(|p| p.ends_with("there.txt")),
        "{restored:?}"
    );

    // Nothing matches: a clear error naming the hosts there are.
    let out = env.run(&["ls", "latest", "--host", "nobody"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nobody") && err.contains("elsewhere") && err.contains("--any-host"),
        "{err}"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A point's size is the bytes of all its files, also for an unchanged
/// incremental (which reads about nothing): the API says both figures
/// apart (D3; before, `bytes` was the bytes read and the console called it
/// the size).
#[test]
fn a_points_size_is_its_files_not_what_the_run_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    let mut total = 0u64;
    for i in 0..5u64 {
        let body = vec![b'a' + i as u8; 10_000 + i as usize * 1000];
        total += body.len() as u64;
        let f = src.join(format!("f{i}"));
        std::fs::write(&f, body).expect("write");
    }
    // Files changed within the racy margin before a backup are read again
    // by the next one (git's "racily clean" rule, src/backup/walk.rs):
    // let the margin pass, so the second run really skips them.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let cfg = dir.path().join("vouch.toml");
    std::fs::write(&cfg, common::served::sources_allow(dir.path())).expect("config");
    let svc = common::served::start(&dir.path().join("data"), &cfg, None);
    let (status, body) = common::served::post(
        &svc,
        "/api/v1/plans",
        &serde_json::json!({"id": "p", "source": src, "schedule": "0 3 * * *", "rpo": "1d"}),
    );
    assert_eq!(status, 201, "{body}");
    for n in 1..=2usize {
        let (status, body) =
            common::served::post(&svc, "/api/v1/plans/p/run", &serde_json::Value::Null);
        assert_eq!(status, 202, "{body}");
        common::served::eventually("the backup", || {
            let pts = common::served::get(&svc, "/api/v1/points?plan=p");
            (pts.as_array().map(Vec::len) == Some(n)).then_some(())
        });
    }
    let pts = common::served::get(&svc, "/api/v1/points?plan=p");
    let pts = pts.as_array().expect("points");
    for p in pts {
        assert_eq!(p["summary"]["size_bytes"], total, "{p}");
    }
    let read: Vec<u64> = pts
        .iter()
        .map(|p| p["summary"]["bytes_read"].as_u64().expect("bytes_read"))
        .collect();
    assert!(
        read.contains(&total),
        "the first run read everything: {read:?}"
    );
    assert!(
        read.contains(&0),
        "the unchanged run read nothing: {read:?}"
    );
}
