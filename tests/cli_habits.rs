//! The command line admins bring from restic (issue 19), end to end with
//! the real binary: `check`, `--read-data-subset n/t`, `--password-file`,
//! `--repository-file` / VOUCH_REPOSITORY_FILE.

mod common;

use common::{random_files, Env, PASSWORD};
use serde_json::Value;

fn verify_json(env: &Env, args: &[&str]) -> Value {
    let out = env.ok(args);
    let line = out
        .lines()
        .find(|l| l.contains("\"type\":\"verify\""))
        .unwrap_or_else(|| panic!("no verify line in {out}"));
    serde_json::from_str(line).expect("json")
}

/// `check` is `verify`; `--read-data-subset n/t` reads disjoint parts that
/// together cover every pack exactly once; bad parts are refused.
#[test]
fn check_reads_rotating_parts_that_cover_every_pack_once() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    random_files(&src, 40, 300_000, 19);
    env.backup(&[&src]);
    let all = verify_json(&env, &["check", "--read-data", "--json"]);
    let packs = all["report"]["packs_read"].as_u64().expect("packs_read");
    assert!(packs >= 8, "the test needs several packs: {all}");
    let parts = 3u64;
    let mut read = 0;
    let mut nonempty = 0;
    for n in 1..=parts {
        let part = verify_json(
            &env,
            &[
                "check",
                "--read-data-subset",
                &format!("{n}/{parts}"),
                "--json",
            ],
        );
        assert_eq!(part["damaged"], false, "{part}");
        let got = part["report"]["packs_read"].as_u64().expect("packs_read");
        read += got;
        nonempty += u64::from(got > 0);
        // The same part twice reads the same packs.
        let again = verify_json(
            &env,
            &[
                "verify",
                "--read-data-subset",
                &format!("{n}/{parts}"),
                "--json",
            ],
        );
        assert_eq!(again["report"]["packs_read"], part["report"]["packs_read"]);
    }
    assert_eq!(read, packs, "the parts cover every pack once");
    assert!(nonempty >= 2, "packs spread over the parts");
    for bad in ["0/3", "4/3", "1/0", "a/3", "1/3/4"] {
        let err = env.expect_stderr(&["check", "--read-data-subset", bad], 2);
        assert!(err.contains("--read-data-subset"), "{bad}: {err}");
    }
}

/// `--password-file` and `--repository-file` (and their variables) work
/// like restic's; the flag wins over the passphrase variables; an empty or
/// missing file is a clear error, not a prompt.
#[test]
fn password_and_repository_files() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    random_files(&src, 2, 1000, 3);
    env.backup(&[&src]);
    let pw = env.path("pw");
    std::fs::write(&pw, format!("{PASSWORD}\nignored second line\n")).unwrap();
    let repo_file = env.path("repo-location");
    std::fs::write(&repo_file, format!("{}\n", env.repo.display())).unwrap();
    let run = |args: &[&str], envs: &[(&str, &str)]| {
        let mut c = env.cmd();
        c.env_remove("VOUCH_REPOSITORY")
            .env_remove("VOUCH_PASSWORD");
        for (k, v) in envs {
            c.env(k, v);
        }
        c.args(args).output().expect("vouch runs")
    };
    let ok = |args: &[&str], envs: &[(&str, &str)]| {
        let out = run(args, envs);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let pw_s = pw.to_str().unwrap();
    let rf = repo_file.to_str().unwrap();
    // Flags.
    ok(
        &[
            "--repository-file",
            rf,
            "--password-file",
            pw_s,
            "snapshots",
        ],
        &[],
    );
    // Variables.
    ok(
        &["snapshots"],
        &[("VOUCH_REPOSITORY_FILE", rf), ("VOUCH_PASSWORD_FILE", pw_s)],
    );
    // The flag wins over a wrong passphrase in the environment.
    ok(
        &[
            "--repository-file",
            rf,
            "--password-file",
            pw_s,
            "snapshots",
        ],
        &[("VOUCH_PASSWORD", "wrong")],
    );
    // A missing passphrase file, an empty repository file: said plainly.
    let out = run(
        &[
            "--repository-file",
            rf,
            "--password-file",
            "/nonexistent/pw",
            "snapshots",
        ],
        &[],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--password-file") && err.contains("/nonexistent/pw"),
        "{err}"
    );
    let empty = env.path("empty");
    std::fs::write(&empty, "\n").unwrap();
    let out = run(
        &[
            "--repository-file",
            empty.to_str().unwrap(),
            "--password-file",
            pw_s,
            "snapshots",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is empty"));
    // Both a location and a location file: refused, not guessed.
    let out = run(
        &[
            "--repo",
            env.repo.to_str().unwrap(),
            "--repository-file",
            rf,
            "--password-file",
            pw_s,
            "snapshots",
        ],
        &[],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn stats_json(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["stats", "--json"];
    all.extend_from_slice(args);
    let out = env.ok(&all);
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// `vouch stats`: restore size counts every snapshot, unique data each
/// blob once; two backups of the same random files deduplicate exactly
/// 2:1 and do not compress; a named snapshot counts alone.
#[test]
fn stats_counts_restore_size_unique_data_and_ratios() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    random_files(&src, 5, 100_000, 8);
    env.backup(&[&src]);
    env.backup(&[&src]);
    let all = stats_json(&env, &[]);
    let s = &all["snapshots"];
    assert_eq!(s["snapshots"], 2, "{all}");
    assert_eq!(s["files"], 10, "{all}");
    assert_eq!(s["restore_size"], 1_000_000, "{all}");
    assert_eq!(s["data_bytes"], 500_000, "{all}");
    assert_eq!(s["dedup_ratio"], 2.0, "{all}");
    let compression = s["compression_ratio"].as_f64().unwrap();
    assert!((0.9..1.01).contains(&compression), "random data: {all}");
    let r = &all["repository"];
    assert!(
        r["pack_bytes"].as_u64() >= s["stored_bytes"].as_u64(),
        "{all}"
    );
    assert_eq!(r["unreferenced_bytes"], 0, "{all}");
    let one = stats_json(&env, &["latest"]);
    assert_eq!(one["snapshots"]["restore_size"], 500_000, "{one}");
    assert_eq!(one["snapshots"]["dedup_ratio"], 1.0, "{one}");
    assert!(one["repository"].is_null(), "{one}");
    // Human output names the figures.
    let text = env.ok(&["stats"]);
    for label in [
        "restore size:",
        "unique data:",
        "deduplication:    2.00x",
        "repository:",
    ] {
        assert!(text.contains(label), "{label}: {text}");
    }
}

fn json_of(env: &Env, args: &[&str]) -> Value {
    let out = env.ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

/// `vouch cat`: the config, a snapshot, an index file, a tree, a blob's
/// raw bytes and a key file; a missing or extra id is a usage error.
#[test]
fn cat_prints_the_repositorys_structures() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let content = b"the blob's plaintext\n".repeat(20);
    std::fs::write(src.join("one.txt"), &content).unwrap();
    std::fs::write(src.join("two.txt"), b"two").unwrap();
    let snap = env.backup(&[&src]);
    assert_eq!(json_of(&env, &["cat", "config"])["version"], 1);
    let s = json_of(&env, &["cat", "snapshot", &snap[..8]]);
    assert_eq!(s["id"], snap.as_str());
    assert!(s["manifest"]["tree"].is_string(), "{s}");
    let t = json_of(&env, &["cat", "tree", &format!("{snap}:{}", src.display())]);
    let nodes = t["tree"]["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 2, "{t}");
    let blob = nodes[0]["content"][0]["blob"].as_str().expect("a blob id");
    let out = env.cmd().args(["cat", "blob", blob]).output().unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout, content, "the blob's plaintext, raw");
    let index = std::fs::read_dir(env.repo.join("index"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name();
    let i = json_of(&env, &["cat", "index", index.to_str().unwrap()]);
    assert!(
        i.to_string().contains(blob),
        "the index lists the blob: {i}"
    );
    let key = std::fs::read_dir(env.repo.join("keys"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name();
    let key = key.to_str().unwrap();
    let k = json_of(&env, &["cat", "key", &key[..8]]);
    assert_eq!(k["id"], key);
    env.expect_stderr(&["cat", "snapshot"], 2);
    env.expect_stderr(&["cat", "config", "extra"], 2);
    env.expect_stderr(&["cat", "blob", "not-hex"], 2);
}
