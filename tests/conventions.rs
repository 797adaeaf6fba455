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
