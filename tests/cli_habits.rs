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

/// The JSON lines of a command's stdout.
fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The paths `find --json` found, per snapshot id.
fn found_paths(env: &Env, args: &[&str]) -> Vec<(String, Vec<String>)> {
    let mut all = vec!["find", "--json"];
    all.extend_from_slice(args);
    let lines = json_lines(&env.ok(&all));
    let (summary, matches) = lines.split_last().expect("a summary line");
    assert_eq!(summary["message_type"], "summary", "{summary}");
    let out: Vec<(String, Vec<String>)> = matches
        .iter()
        .map(|m| {
            assert_eq!(m["message_type"], "matches", "{m}");
            let paths = m["matches"]
                .as_array()
                .expect("matches")
                .iter()
                .map(|n| n["path"].as_str().expect("path").to_string())
                .collect::<Vec<_>>();
            assert_eq!(m["hits"], paths.len(), "{m}");
            (m["snapshot"].as_str().expect("id").to_string(), paths)
        })
        .collect();
    let hits: usize = out.iter().map(|(_, p)| p.len()).sum();
    assert_eq!(summary["hits"], hits, "{summary}");
    out
}

/// `find` by name (ignoring case or not), by whole path, by blob and by
/// pack, across snapshots and in one; an unknown pack is "not found".
#[test]
fn find_names_paths_blobs_and_packs() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("b/deep")).unwrap();
    std::fs::write(src.join("x.conf"), b"x = 1\n").unwrap();
    std::fs::write(src.join("NOTES.txt"), b"top").unwrap();
    std::fs::write(src.join("b/deep/notes.txt"), b"deep").unwrap();
    let first = env.backup(&[&src]);
    // The packs of the first backup (a backup may write several: each
    // saver thread fills its own).
    let first_packs: Vec<String> = walk_files(&env.repo.join("data"));
    std::fs::create_dir_all(src.join("c")).unwrap();
    std::fs::write(src.join("c/new.conf"), b"new = 2\n").unwrap();
    let second = env.backup(&[&src]);
    let s = src.display().to_string();

    let conf = found_paths(&env, &["*.conf"]);
    assert_eq!(
        conf,
        vec![
            (first.clone(), vec![format!("{s}/x.conf")]),
            (
                second.clone(),
                vec![format!("{s}/c/new.conf"), format!("{s}/x.conf")]
            ),
        ]
    );
    // Case matters unless -i; one snapshot with -s.
    let exact = found_paths(&env, &["notes.txt", "-s", &first[..8]]);
    assert_eq!(
        exact,
        vec![(first.clone(), vec![format!("{s}/b/deep/notes.txt")])]
    );
    let any_case = found_paths(&env, &["-i", "notes.txt", "-s", "latest"]);
    assert_eq!(
        any_case,
        vec![(
            second.clone(),
            vec![format!("{s}/NOTES.txt"), format!("{s}/b/deep/notes.txt")]
        )]
    );
    // A pattern with / matches whole paths; ** spans directories.
    let deep = found_paths(&env, &["-s", &second, &format!("{s}/**/deep/*")]);
    assert_eq!(
        deep,
        vec![(second.clone(), vec![format!("{s}/b/deep/notes.txt")])]
    );
    // Nothing found is no error, and says so.
    let none = env.ok(&["find", "*.nothing"]);
    assert!(
        none.contains("0 found in 0 of 2 snapshots searched"),
        "{none}"
    );

    // --blob: the file that holds the blob, in every snapshot with it.
    let t = json_of(&env, &["cat", "tree", &format!("{second}:{s}")]);
    let node = t["tree"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == serde_json::json!(b"x.conf".to_vec()))
        .unwrap_or_else(|| panic!("x.conf in {t}"))
        .clone();
    let blob = node["content"][0]["blob"]
        .as_str()
        .expect("blob")
        .to_string();
    let by_blob = found_paths(&env, &["--blob", &blob[..12]]);
    assert_eq!(
        by_blob,
        vec![
            (first.clone(), vec![format!("{s}/x.conf")]),
            (second.clone(), vec![format!("{s}/x.conf")]),
        ]
    );
    // --pack: every file and directory with a blob in them. The first
    // backup's packs hold x.conf and the unchanged directories b and
    // b/deep, not what the second backup added.
    let mut args = vec!["--pack"];
    args.extend(first_packs.iter().map(String::as_str));
    args.extend(["-s", second.as_str()]);
    let by_pack = found_paths(&env, &args);
    let paths = &by_pack[0].1;
    for p in ["b", "b/deep", "b/deep/notes.txt", "x.conf"] {
        assert!(paths.contains(&format!("{s}/{p}")), "{p}: {by_pack:?}");
    }
    assert!(!paths.contains(&format!("{s}/c/new.conf")), "{by_pack:?}");
    let err = env.expect_stderr(&["find", "--pack", "0123456789abcdef"], 19);
    assert!(
        err.contains("no pack 0123456789abcdef in the index"),
        "{err}"
    );
    env.expect_stderr(&["find", "--blob", "xyz"], 2);

    // -l prints as ls -l: permissions, names, size, path.
    let mut perms = std::fs::metadata(src.join("x.conf")).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o4750);
    std::fs::set_permissions(src.join("x.conf"), perms).unwrap();
    std::os::unix::fs::symlink("x.conf", src.join("link")).unwrap();
    std::fs::write(src.join("big"), vec![7u8; 1536]).unwrap();
    env.backup(&[&src]);
    let long = env.ok(&["find", "-l", "-s", "latest", "x.conf", "link"]);
    let line = long
        .lines()
        .find(|l| l.ends_with("/x.conf"))
        .expect("x.conf");
    assert!(line.starts_with("-rwsr-x--- "), "{line}");
    let link = long.lines().find(|l| l.contains("/link")).expect("link");
    assert!(
        link.starts_with("lrwxrwxrwx ") && link.ends_with("/link -> x.conf"),
        "{link}"
    );
    let ls = env.ok(&["ls", "-l", "--human-readable", "latest", &s]);
    let big = ls.lines().find(|l| l.ends_with("/big")).expect("big");
    assert!(big.contains(" 1.5K "), "{big}");
    let names = ls.lines().find(|l| l.ends_with("/x.conf")).unwrap();
    let user = String::from_utf8(
        std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        names.contains(&format!(" {} ", user.trim())),
        "user name shown: {names}"
    );
}

/// Every file under `dir`, by name.
fn walk_files(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.extend(walk_files(&e.path()));
        } else {
            out.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    out
}

/// `describe` without times (archives keep whole seconds).
fn without_times(tree: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    common::describe(tree)
        .into_iter()
        .map(|(k, v)| {
            let v: Vec<&str> = v.split(' ').filter(|t| !t.starts_with("mtime=")).collect();
            (k, v.join(" "))
        })
        .collect()
}

/// Runs python3 with a script; returns stdout.
fn python(script: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// `dump`: a file (with a hole) byte for byte to stdout; a directory as a
/// tar that GNU tar extracts to the same tree (hard links, symlinks, modes,
/// a fifo) with its extended attributes as PAX records; as a zip that
/// Python's zipfile reads; `--target` whole or not at all; what an archive
/// cannot hold is a warning and exit 3.
#[test]
fn dump_writes_files_and_directories_as_tar_and_zip() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    let db = src.join("db");
    std::fs::create_dir_all(db.join("sub")).unwrap();
    let data = common::random_bytes(700_000, 7);
    std::fs::write(db.join("data.bin"), &data).unwrap();
    // A sparse file: 1 MiB hole, then data.
    let sparse = std::fs::File::create(db.join("sparse")).unwrap();
    sparse.set_len(1 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, b"tail", 1 << 20).unwrap();
    drop(sparse);
    std::fs::hard_link(db.join("data.bin"), db.join("sub/again.bin")).unwrap();
    std::os::unix::fs::symlink("../data.bin", db.join("sub/link")).unwrap();
    std::fs::write(db.join("sub/small.txt"), b"small\n").unwrap();
    let mut perms = std::fs::metadata(db.join("sub/small.txt"))
        .unwrap()
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o640);
    std::fs::set_permissions(db.join("sub/small.txt"), perms).unwrap();
    let fifo = std::process::Command::new("mkfifo")
        .arg(db.join("pipe"))
        .status()
        .unwrap();
    assert!(fifo.success());
    let xattr_ok = std::process::Command::new("setfattr")
        .args(["-n", "user.origin", "-v", "dumped"])
        .arg(db.join("sub/small.txt"))
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        xattr_ok || std::env::var_os("CI").is_none(),
        "CI has setfattr and a file system with user attributes"
    );
    let snap = env.backup(&[&src]);
    let s = src.display().to_string();

    // A file, to stdout, byte for byte (both spellings of the path).
    let out = env
        .cmd()
        .args(["dump", &format!("{snap}:{s}/db/data.bin")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, data);
    let out = env
        .cmd()
        .args(["dump", "latest", &format!("{s}/db/sparse")])
        .output()
        .unwrap();
    assert_eq!(out.stdout.len(), (1 << 20) + 4);
    assert!(out.stdout[..1 << 20].iter().all(|b| *b == 0));
    assert_eq!(&out.stdout[1 << 20..], b"tail");

    // A directory as tar, extracted by GNU tar: the same tree under db/.
    let tar_file = env.path("db.tar");
    let msg = env.ok(&[
        "dump",
        &format!("latest:{s}/db"),
        "--target",
        tar_file.to_str().unwrap(),
    ]);
    assert!(msg.contains("dumped"), "{msg}");
    let x = env.path("x");
    std::fs::create_dir_all(&x).unwrap();
    let untar = std::process::Command::new("tar")
        .args(["--xattrs", "--xattrs-include=user.*", "-xf"])
        .arg(&tar_file)
        .arg("-C")
        .arg(&x)
        .status()
        .unwrap();
    assert!(untar.success());
    assert_eq!(without_times(&x.join("db")), without_times(&db));
    let tar_mtime = std::fs::metadata(x.join("db/sub/small.txt")).unwrap();
    let src_mtime = std::fs::metadata(db.join("sub/small.txt")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(tar_mtime.mtime(), src_mtime.mtime());
    if xattr_ok {
        let pax = python(
            "import sys,tarfile\nm=tarfile.open(sys.argv[1]).getmember('db/sub/small.txt')\nprint(m.pax_headers.get('SCHILY.xattr.user.origin'))",
            &[tar_file.to_str().unwrap()],
        );
        assert_eq!(pax.trim(), "dumped");
    }

    // As zip, read by Python's zipfile: content, permissions, the symlink;
    // the fifo is not in it (a warning, exit 3).
    let zip_file = env.path("db.zip");
    let out = env.run(&[
        "dump",
        &format!("latest:{s}/db"),
        "--archive",
        "zip",
        "-t",
        zip_file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("db/pipe: a fifo"), "{err}");
    let listing = python(
        "import sys,zipfile,hashlib,stat\nz=zipfile.ZipFile(sys.argv[1])\nfor i in sorted(z.infolist(), key=lambda i: i.filename):\n  mode=i.external_attr>>16\n  d=z.read(i) if not i.is_dir() else b''\n  print(i.filename, oct(stat.S_IMODE(mode)), 'link' if stat.S_ISLNK(mode) else '', hashlib.md5(d).hexdigest()[:12] if not stat.S_ISLNK(mode) else d.decode())",
        &[zip_file.to_str().unwrap()],
    );
    let sha = |b: &[u8]| {
        use md5::Digest;
        hex::encode(md5::Md5::digest(b))[..12].to_string()
    };
    assert!(
        listing.contains(&format!("db/data.bin 0o644  {}", sha(&data))),
        "{listing}"
    );
    assert!(
        listing.contains(&format!("db/sub/small.txt 0o640  {}", sha(b"small\n"))),
        "{listing}"
    );
    assert!(
        listing.contains("db/sub/link 0o777 link ../data.bin"),
        "{listing}"
    );
    assert!(listing.contains("db/sub/ 0o755"), "{listing}");
    assert!(!listing.contains("pipe"), "{listing}");

    // A target in a missing directory: an error, nothing left behind.
    let bad = env.path("missing/out.tar");
    env.expect_stderr(
        &[
            "dump",
            &format!("latest:{s}/db"),
            "-t",
            bad.to_str().unwrap(),
        ],
        1,
    );
    assert!(!bad.exists());
    // No path, a path twice, a path that is not there.
    env.expect_stderr(&["dump", "latest"], 2);
    env.expect_stderr(&["dump", &format!("latest:{s}"), &s], 2);
    env.expect_stderr(&["dump", &format!("latest:{s}/nothing")], 19);
}

/// A running `vouch mount`, stopped (and its mount removed) on drop.
struct Mounted {
    child: std::process::Child,
    dir: std::path::PathBuf,
}

impl Mounted {
    fn is_mounted(dir: &std::path::Path) -> bool {
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        std::fs::read_to_string("/proc/self/mounts")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split(' ').nth(1) == dir.to_str())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if Self::is_mounted(&self.dir) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.dir)
                .status();
        }
    }
}

/// `mount`: every snapshot by id, time, host and tag; content, a hole,
/// symlinks, modes and extended attributes as backed up; read-only; a new
/// snapshot appears; SIGINT unmounts and exits 0.
#[test]
fn mount_shows_every_snapshot_read_only() {
    if !std::path::Path::new("/dev/fuse").exists() || !common::is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root with /dev/fuse"
        );
        eprintln!("skipped: needs /dev/fuse and root");
        return;
    }
    let env = Env::new();
    env.init();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    let data = common::random_bytes(5_000_000, 3);
    std::fs::write(src.join("d/big"), &data).unwrap();
    let sparse = std::fs::File::create(src.join("sparse")).unwrap();
    sparse.set_len(3 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, b"end", 3 << 20).unwrap();
    drop(sparse);
    std::fs::write(src.join("d/small"), b"small\n").unwrap();
    let mut perms = std::fs::metadata(src.join("d/small"))
        .unwrap()
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o640);
    std::fs::set_permissions(src.join("d/small"), perms).unwrap();
    std::os::unix::fs::symlink("big", src.join("d/link")).unwrap();
    let with_xattr = xattr::set(src.join("d/small"), "user.origin", b"mounted").is_ok();
    let first = env.ok(&[
        "backup",
        "--json",
        "--tag",
        "daily",
        "--host",
        "db-1",
        src.to_str().unwrap(),
    ]);
    let first = common::summary_of(&first)["snapshot"]
        .as_str()
        .unwrap()
        .to_string();

    let dir = env.path("mnt");
    std::fs::create_dir_all(&dir).unwrap();
    let child = env
        .cmd()
        .args(["mount", "--refresh", "1s"])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut m = Mounted {
        child,
        dir: dir.clone(),
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !dir.join("ids").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the mount did not appear"
        );
        if let Ok(Some(status)) = m.child.try_wait() {
            panic!("vouch mount exited: {status}");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let names = |p: &std::path::Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&dir), ["hosts", "ids", "snapshots", "tags"]);
    assert_eq!(names(&dir.join("ids")), [first[..8].to_string()]);
    assert_eq!(names(&dir.join("hosts")), ["db-1"]);
    assert_eq!(names(&dir.join("tags")), ["daily"]);
    let root = dir.join("hosts/db-1/latest");
    assert_eq!(
        std::fs::read_link(&root).unwrap(),
        std::path::PathBuf::from(format!("../../ids/{}", &first[..8]))
    );
    let inside =
        |snap: &std::path::Path, rel: &str| snap.join(src.strip_prefix("/").unwrap()).join(rel);
    // Content, byte for byte; the hole as zeros.
    assert_eq!(std::fs::read(inside(&root, "d/big")).unwrap(), data);
    let s = std::fs::read(inside(&root, "sparse")).unwrap();
    assert_eq!(s.len(), (3 << 20) + 3);
    assert!(s[..3 << 20].iter().all(|b| *b == 0));
    assert_eq!(&s[3 << 20..], b"end");
    // Metadata as backed up.
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(inside(&root, "d/small")).unwrap();
    let orig = std::fs::symlink_metadata(src.join("d/small")).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o640);
    assert_eq!(
        (meta.uid(), meta.gid(), meta.size()),
        (orig.uid(), orig.gid(), 6)
    );
    assert_eq!(
        (meta.mtime(), meta.mtime_nsec()),
        (orig.mtime(), orig.mtime_nsec())
    );
    assert_eq!(
        std::fs::read_link(inside(&root, "d/link")).unwrap(),
        std::path::PathBuf::from("big")
    );
    if with_xattr {
        assert_eq!(
            xattr::get(inside(&root, "d/small"), "user.origin").unwrap(),
            Some(b"mounted".to_vec())
        );
    }
    // Read-only.
    let w = std::fs::OpenOptions::new()
        .write(true)
        .open(inside(&root, "d/small"))
        .unwrap_err();
    assert_eq!(w.raw_os_error(), Some(libc::EROFS), "{w}");
    assert!(std::fs::write(dir.join("ids/new"), b"x").is_err());

    // A new snapshot shows up after the refresh interval.
    std::fs::write(src.join("d/later"), b"later").unwrap();
    let second = env.backup(&[&src]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(names(&dir.join("ids")).len(), 2);
    let latest = dir.join("snapshots/latest");
    assert_eq!(
        std::fs::read_link(&latest).unwrap(),
        std::path::PathBuf::from(format!("../ids/{}", &second[..8]))
    );
    assert_eq!(std::fs::read(inside(&latest, "d/later")).unwrap(), b"later");

    // SIGINT: unmounted, exit 0.
    // SAFETY: signalling our own child by its pid.
    unsafe { libc::kill(m.child.id() as i32, libc::SIGINT) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(s) = m.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "vouch mount did not stop"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(0));
    assert!(!Mounted::is_mounted(&dir));
    let mut err = String::new();
    std::io::Read::read_to_string(m.child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!err.contains("WARN") && !err.contains("ERROR"), "{err}");
}

/// Files under the repository's data directory (packs).
fn pack_count(env: &Env) -> usize {
    walk_files(&env.repo.join("data")).len()
}

/// backup `--stdin`, `--stdin-from-command` (a failing command commits
/// nothing), `--dry-run` (writes nothing), `--files-from` and
/// `--files-from-raw`, `--iexclude`, `--read-concurrency`.
#[test]
fn backup_streams_lists_dry_runs_and_case_free_excludes() {
    use std::io::Write;
    let env = Env::new();
    env.init();
    // --stdin: the stream is /db.sql, mode 0600, byte for byte.
    let dump = common::random_bytes(3_000_000, 11);
    let mut child = env
        .cmd()
        .args([
            "backup",
            "--stdin",
            "--stdin-filename",
            "db.sql",
            "--json",
            "--tag",
            "db",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&dump).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = common::summary_of(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(summary["summary"]["total_bytes"], 3_000_000);
    let dumped = env.cmd().args(["dump", "latest:/db.sql"]).output().unwrap();
    assert_eq!(dumped.stdout, dump);
    let ls = env.ok(&["ls", "-l", "latest"]);
    assert!(ls.trim().starts_with("-rw------- "), "{ls}");
    let snaps: Value = serde_json::from_str(&env.ok(&["snapshots", "--json"])).unwrap();
    assert_eq!(snaps[0]["paths"], serde_json::json!(["/db.sql"]));
    env.expect_stderr(&["backup", "--stdin", "--stdin-filename", "a/b"], 2);

    // --stdin-from-command: the command's stdout; a failure commits nothing.
    env.ok(&[
        "backup",
        "--stdin-from-command",
        "--stdin-filename",
        "gen.txt",
        "--",
        "sh",
        "-c",
        "echo generated",
    ]);
    let out = env
        .cmd()
        .args(["dump", "latest:/gen.txt"])
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"generated\n");
    let before = env.snapshot_ids().len();
    let err = env.expect_stderr(
        &[
            "backup",
            "--stdin-from-command",
            "--",
            "sh",
            "-c",
            "echo partial; exit 3",
        ],
        1,
    );
    assert!(err.contains("nothing was committed"), "{err}");
    assert_eq!(env.snapshot_ids().len(), before);

    // --files-from (comments and blank lines skipped), --files-from-raw
    // (a name with a newline), --iexclude.
    let src = env.path("src");
    std::fs::create_dir_all(src.join("pics")).unwrap();
    std::fs::write(src.join("one"), b"1").unwrap();
    std::fs::write(src.join("two"), b"2").unwrap();
    std::fs::write(src.join("odd\nname"), b"3").unwrap();
    std::fs::write(src.join("pics/a.JPG"), b"j").unwrap();
    std::fs::write(src.join("pics/b.jpg"), b"j").unwrap();
    std::fs::write(src.join("pics/c.png"), b"p").unwrap();
    let list = env.path("list");
    std::fs::write(
        &list,
        format!(
            "# the list\n{}\n\n{}\n",
            src.join("one").display(),
            src.join("pics").display()
        ),
    )
    .unwrap();
    let raw = env.path("raw");
    let mut raw_bytes = src.join("odd\nname").into_os_string().into_encoded_bytes();
    raw_bytes.push(0);
    std::fs::write(&raw, raw_bytes).unwrap();
    let s = src.display().to_string();
    env.ok(&[
        "backup",
        "--files-from",
        list.to_str().unwrap(),
        "--files-from-raw",
        raw.to_str().unwrap(),
        "--iexclude",
        "*.jpg",
        "--read-concurrency",
        "1",
    ]);
    let mut paths: Vec<String> = json_lines(&env.ok(&["ls", "--json", "latest", &s]))
        .iter()
        .map(|n| n["path"].as_str().expect("path").to_string())
        .collect();
    paths.sort();
    let want: Vec<String> = ["odd\nname", "one", "pics", "pics/c.png"]
        .iter()
        .map(|n| format!("{s}/{n}"))
        .collect();
    assert_eq!(paths, want);

    // --dry-run: counts what it would store, writes no pack, no snapshot.
    std::fs::write(src.join("new.bin"), common::random_bytes(500_000, 5)).unwrap();
    let (packs, snaps) = (pack_count(&env), env.snapshot_ids().len());
    let out = env.ok(&["backup", "--dry-run", "--json", &s]);
    let dry = common::summary_of(&out);
    assert_eq!(dry["dry_run"], true, "{dry}");
    assert_eq!(dry["snapshot"], Value::Null);
    assert!(
        dry["summary"]["bytes_added"].as_u64().unwrap() >= 500_000,
        "{dry}"
    );
    assert_eq!((pack_count(&env), env.snapshot_ids().len()), (packs, snaps));
    let human = env.ok(&["backup", "-n", &s]);
    assert!(human.contains("dry run, nothing written"), "{human}");
    assert_eq!(env.snapshot_ids().len(), snaps);
}

/// Sets a file's modification time to `secs` since the epoch.
fn set_mtime(path: &std::path::Path, secs: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .unwrap();
}

/// restore `--overwrite=always|if-changed|if-newer|never`, `--delete`,
/// `--dry-run`: each leaves exactly what it promises.
#[test]
fn restore_overwrite_modes_delete_and_dry_run() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for n in ["old", "new", "gone", "same"] {
        std::fs::write(src.join(n), format!("snapshot {n}\n")).unwrap();
    }
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/kept"), "kept").unwrap();
    let sub_time = std::fs::File::open(src.join("sub")).unwrap();
    sub_time
        .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_500_000_000))
        .unwrap();
    let snap = env.backup(&[&src]);
    let t = env.path("t");
    let spec = format!("{snap}:{}", src.display());
    let restore = |extra: &[&str]| {
        let mut args = vec!["restore", spec.as_str(), "-t", t.to_str().unwrap()];
        args.extend_from_slice(extra);
        env.run(&args)
    };
    let read = |n: &str| std::fs::read_to_string(t.join(n)).unwrap_or_else(|_| "<none>".into());
    // The target drifts: one file older than the snapshot's, one newer,
    // one gone, one with other bytes but the same size and time, and
    // entries the snapshot never had.
    let drift = || {
        std::fs::write(t.join("old"), "target old\n").unwrap();
        set_mtime(&t.join("old"), 946_684_800); // 2000
        std::fs::write(t.join("new"), "target new\n").unwrap();
        set_mtime(&t.join("new"), 4_102_444_800); // 2100
        let _ = std::fs::remove_file(t.join("gone"));
        let same = std::fs::metadata(src.join("same"))
            .unwrap()
            .modified()
            .unwrap();
        std::fs::write(t.join("same"), "SNAPSHOT same\n").unwrap();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(t.join("same"))
            .unwrap();
        f.set_modified(same).unwrap();
        std::fs::write(t.join("extra"), "x").unwrap();
        std::fs::write(t.join("sub/junk"), "j").unwrap();
        std::fs::create_dir_all(t.join("dir/sub")).unwrap();
        std::fs::write(t.join("dir/sub/f"), "y").unwrap();
    };
    assert!(restore(&[]).status.success());
    drift();
    // Not empty: refused without --overwrite; `--overwrite MODE` (no `=`)
    // is a usage error, never a snapshot named MODE.
    assert_eq!(restore(&[]).status.code(), Some(17));
    assert_eq!(restore(&["--overwrite", "never"]).status.code(), Some(2));

    let out = restore(&["--overwrite=never", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let s = common::summary_of(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(s["summary"]["skipped"], 4, "{s}");
    assert_eq!(
        (read("old"), read("new"), read("gone"), read("same")),
        (
            "target old\n".into(),
            "target new\n".into(),
            "snapshot gone\n".into(),
            "SNAPSHOT same\n".into()
        )
    );
    drift();
    assert!(restore(&["--overwrite=if-newer"]).status.success());
    assert_eq!(
        (read("old"), read("new"), read("gone")),
        (
            "snapshot old\n".into(),
            "target new\n".into(),
            "snapshot gone\n".into()
        )
    );
    drift();
    assert!(restore(&["--overwrite=if-changed"]).status.success());
    assert_eq!(
        (read("old"), read("new"), read("same")),
        (
            "snapshot old\n".into(),
            "snapshot new\n".into(),
            "SNAPSHOT same\n".into()
        ),
        "if-changed trusts size and time"
    );
    drift();
    assert!(restore(&["--overwrite"]).status.success());
    assert_eq!(read("same"), "snapshot same\n", "always checks content");
    assert_eq!(read("extra"), "x", "no --delete: extra entries stay");

    // --delete --dry-run names what would go and removes nothing.
    let out = restore(&["--overwrite", "--delete", "--dry-run"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("would delete {}", t.join("extra").display())),
        "{text}"
    );
    assert!(
        text.contains(&format!("would delete {}", t.join("dir").display())),
        "{text}"
    );
    assert!(t.join("extra").exists() && t.join("dir/sub/f").exists());
    // --delete: the target is the snapshot again.
    let out = restore(&["--overwrite", "--delete", "--json"]);
    let s = common::summary_of(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(s["summary"]["deleted"], 3, "{s}");
    assert_eq!(without_times(&t), without_times(&src));
    // Deleting sub/junk did not leave sub with the time of the deletion.
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(t.join("sub")).unwrap().mtime(),
        1_500_000_000
    );
    assert_eq!(
        restore(&["--overwrite", "--delete", "--include", "old"])
            .status
            .code(),
        Some(2)
    );
    // A dry run into an empty target writes nothing, not even the target.
    let fresh = env.path("fresh");
    let out = env.run(&["restore", &spec, "-t", fresh.to_str().unwrap(), "-n"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("would restore 5 files"));
    assert!(!fresh.exists());
}

/// forget `--host`, `--tag`, `--path` choose what the rules apply to;
/// `--group-by` how they are grouped; nothing outside the scope goes.
#[test]
fn forget_scopes_and_groups() {
    let env = Env::new();
    env.init();
    let (p, q) = (env.path("p"), env.path("q"));
    std::fs::create_dir_all(&p).unwrap();
    std::fs::create_dir_all(&q).unwrap();
    std::fs::write(p.join("f"), b"p").unwrap();
    std::fs::write(q.join("f"), b"q").unwrap();
    let (ps, qs) = (p.to_str().unwrap(), q.to_str().unwrap());
    let mut made = Vec::new();
    for (host, tag, path) in [
        ("a", "x", ps),
        ("a", "x", ps),
        ("a", "y", ps),
        ("a", "y", qs),
        ("b", "x", ps),
        ("b", "x", ps),
    ] {
        let out = env.ok(&["backup", "--json", "--host", host, "--tag", tag, path]);
        made.push(
            common::summary_of(&out)["snapshot"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let plan = |args: &[&str]| -> Value {
        let mut all = vec!["forget", "--json", "--dry-run", "--keep-last", "1"];
        all.extend_from_slice(args);
        serde_json::from_str(&env.ok(&all)).unwrap()
    };
    let removed = |v: &Value| -> Vec<String> {
        let mut r: Vec<String> = v["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["decisions"].as_array().unwrap().clone())
            .filter(|d| d["keep"] == false)
            .map(|d| d["snapshot"].as_str().unwrap().to_string())
            .collect();
        r.sort();
        r
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    // Default: by host and paths: (a,p) (a,q) (b,p).
    let all = plan(&[]);
    assert_eq!(all["groups"].as_array().unwrap().len(), 3, "{all}");
    assert_eq!(
        removed(&all),
        sorted(vec![made[0].clone(), made[1].clone(), made[4].clone()])
    );
    // --host b: only b's snapshots are considered.
    assert_eq!(removed(&plan(&["--host", "b"])), vec![made[4].clone()]);
    // --tag x: a's two and b's two tagged x; --tag x,y: none has both.
    assert_eq!(
        removed(&plan(&["--tag", "x"])),
        sorted(vec![made[0].clone(), made[4].clone()])
    );
    assert!(removed(&plan(&["--tag", "x,y"])).is_empty());
    // --path q: the one snapshot of q, kept as the last.
    let only_q = plan(&["--path", qs]);
    assert_eq!(only_q["groups"].as_array().unwrap().len(), 1);
    assert!(removed(&only_q).is_empty());
    // --group-by host,tags: (a,x) (a,y) (b,x); --group-by "": one group.
    let by_tags = plan(&["--group-by", "host,tags"]);
    assert_eq!(by_tags["groups"].as_array().unwrap().len(), 3, "{by_tags}");
    assert_eq!(
        removed(&by_tags),
        sorted(vec![made[0].clone(), made[2].clone(), made[4].clone()])
    );
    assert_eq!(by_tags["groups"][0]["tags"], serde_json::json!(["x"]));
    let one = plan(&["--group-by", ""]);
    assert_eq!(one["groups"].as_array().unwrap().len(), 1);
    assert_eq!(removed(&one).len(), 5);
    env.expect_stderr(&["forget", "--keep-last", "1", "--group-by", "hosts"], 2);
    env.expect_stderr(&["forget", &made[0], "--host", "a"], 2);
    // For real: only b's older snapshot goes.
    env.ok(&["forget", "--keep-last", "1", "--host", "b"]);
    let left = env.snapshot_ids();
    assert_eq!(left.len(), 5);
    assert!(!left.contains(&made[4]));
}

/// The manifest of a snapshot, from `vouch cat snapshot`.
fn manifest_of(env: &Env, id: &str) -> Value {
    json_of(env, &["cat", "snapshot", id])["manifest"].clone()
}

/// `tag --add/--remove/--set` replaces a snapshot by one with the new tags
/// (naming the original) and removes the old one; a locked snapshot is
/// refused. `rewrite --exclude` makes snapshots without the paths, keeps
/// the originals unless `--forget`, and the repository checks clean.
#[test]
fn tag_and_rewrite_replace_snapshots() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("media")).unwrap();
    std::fs::write(src.join("keep.txt"), b"keep").unwrap();
    std::fs::write(src.join("SECRET.KEY"), b"secret").unwrap();
    std::fs::write(src.join("media/big.iso"), common::random_bytes(400_000, 1)).unwrap();
    let a = env.backup(&[&src]);

    let out = json_lines(&env.ok(&["tag", "--json", "--add", "keep,daily", &a[..8]]));
    let b = out[0]["snapshot"]["new"]
        .as_str()
        .expect("new id")
        .to_string();
    assert_ne!(a, b);
    assert_eq!(env.snapshot_ids(), vec![b.clone()], "the old one is gone");
    let m = manifest_of(&env, &b);
    assert_eq!(m["tags"], serde_json::json!(["keep", "daily"]));
    assert_eq!(m["original"], serde_json::json!(a));
    // Nothing to change: nothing changes.
    let same = env.ok(&["tag", "--add", "keep", &b]);
    assert!(same.contains("0 of 1 snapshots changed"), "{same}");
    assert_eq!(env.snapshot_ids(), vec![b.clone()]);
    env.ok(&["tag", "--remove", "daily", &b]);
    let c = env.snapshot_ids().pop().unwrap();
    assert_eq!(manifest_of(&env, &c)["tags"], serde_json::json!(["keep"]));
    assert_eq!(
        manifest_of(&env, &c)["original"],
        serde_json::json!(a),
        "the line's first snapshot"
    );
    env.ok(&["tag", "--set", "", &c]);
    let d = env.snapshot_ids().pop().unwrap();
    assert_eq!(manifest_of(&env, &d)["tags"], serde_json::json!([]));
    env.expect_stderr(&["tag", &d], 2);
    // Locked until a date: refused, nothing changed.
    env.ok(&["lock", &d, "--until", "2099-01-01T00:00:00Z"]);
    let err = env.expect_stderr(&["tag", "--add", "x", &d], 21);
    assert!(err.contains("locked until"), "{err}");
    assert_eq!(env.snapshot_ids(), vec![d.clone()]);

    // rewrite: a dry run changes nothing.
    let dry = env.ok(&["rewrite", "--exclude", "*.iso", "--dry-run", "-v"]);
    assert!(dry.contains("media/big.iso"), "{dry}");
    assert_eq!(env.snapshot_ids(), vec![d.clone()]);
    // Without --forget the original stays.
    let out = json_lines(&env.ok(&["rewrite", "--json", "--exclude", "*.iso", &d]));
    let e = out[0]["snapshot"]["new"].as_str().unwrap().to_string();
    assert_eq!(out[0]["snapshot"]["excluded_entries"], 1);
    assert_eq!(out[0]["snapshot"]["excluded_bytes"], 400_000);
    let mut ids = env.snapshot_ids();
    ids.sort();
    let mut want = vec![d.clone(), e.clone()];
    want.sort();
    assert_eq!(ids, want);
    let s = src.display().to_string();
    let listed = env.ok(&["ls", &e, &s]);
    assert!(
        !listed.contains("big.iso") && listed.contains("/media"),
        "{listed}"
    );
    // --iexclude with --forget: the original goes (e is not locked).
    let out = json_lines(&env.ok(&[
        "rewrite",
        "--json",
        "--iexclude",
        "secret.key",
        "--forget",
        &e,
    ]));
    let f = out[0]["snapshot"]["new"].as_str().unwrap().to_string();
    assert_eq!(out[0]["snapshot"]["old_removed"], true);
    let mut ids = env.snapshot_ids();
    ids.sort();
    let mut want = vec![d.clone(), f.clone()];
    want.sort();
    assert_eq!(ids, want);
    let t = env.path("t");
    env.ok(&["restore", &format!("{f}:{s}"), "-t", t.to_str().unwrap()]);
    let mut names: Vec<String> = walk_files(&t);
    names.sort();
    assert_eq!(names, ["keep.txt"]);
    assert_eq!(manifest_of(&env, &f)["original"], serde_json::json!(a));
    // The locked one cannot be forgotten through a rewrite.
    env.expect_stderr(&["rewrite", "--exclude", "*.iso", "--forget", &d], 21);
    env.ok(&["prune"]);
    env.ok(&["check", "--read-data"]);
}

/// `backup -vv` names each file with its status against the parent: new,
/// modified, unchanged (text and JSON).
#[test]
fn backup_vv_lists_each_file_with_its_status() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for n in ["a", "b"] {
        std::fs::write(src.join(n), n).unwrap();
        set_mtime(&src.join(n), 1_600_000_000);
    }
    // Changed (ctime) more than the racy margin (2 s) before the first
    // backup, so the second may take them as unchanged.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let first = env.ok(&["backup", "-vv", src.to_str().unwrap()]);
    let a = src.join("a").display().to_string();
    let b = src.join("b").display().to_string();
    assert!(first.contains(&format!("new       {a}")), "{first}");
    std::fs::write(src.join("b"), "changed").unwrap();
    std::fs::write(src.join("c"), "c").unwrap();
    let out = env.ok(&["backup", "-vv", "--json", src.to_str().unwrap()]);
    let mut seen: Vec<(String, String)> = json_lines(&out)
        .into_iter()
        .filter(|l| l["message_type"] == "file")
        .map(|l| {
            (
                l["path"].as_str().unwrap().to_string(),
                l["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    seen.sort();
    let c = src.join("c").display().to_string();
    assert_eq!(
        seen,
        vec![
            (a, "unchanged".to_string()),
            (b, "modified".to_string()),
            (c, "new".to_string())
        ]
    );
    // Without -vv: no file lines.
    assert!(!env
        .ok(&["backup", src.to_str().unwrap()])
        .contains("unchanged "));
}

/// Every JSON line a command prints says what it is: an object carries
/// `message_type`; `snapshots`, `diff` and `key list` print one array.
#[test]
fn every_json_line_has_a_message_type() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"f").unwrap();
    let first = env.backup(&[&src]);
    std::fs::write(src.join("g"), b"g").unwrap();
    let s = src.display().to_string();
    let t = env.path("t");
    let tar = env.path("x.tar");
    let dir = format!("latest:{s}");
    let commands: Vec<Vec<&str>> = vec![
        vec!["backup", "-vv", &s],
        vec!["backup", "--dry-run", &s],
        vec!["ls", "latest"],
        vec!["find", "f"],
        vec!["stats"],
        vec!["check"],
        vec!["forget", "--keep-last", "1", "--dry-run"],
        vec!["restore", "latest", "-t", t.to_str().unwrap()],
        vec!["dump", &dir, "-t", tar.to_str().unwrap()],
        vec!["tag", "--add", "t", "latest"],
        vec!["rewrite", "--exclude", "g", "latest"],
        vec!["cat", "snapshot", "nothing"],
        vec!["find", "--pack", "abcdef"],
    ];
    let arrays: Vec<Vec<&str>> = vec![
        vec!["snapshots"],
        vec!["diff", &first, "latest"],
        vec!["key", "list"],
    ];
    for c in commands {
        let mut args = vec!["--json"];
        args.extend_from_slice(&c);
        let out = env.run(&args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.trim().is_empty(), "{c:?} printed nothing");
        for line in text.lines() {
            let v: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{c:?}: {e}: {line}"));
            assert!(
                v["message_type"].as_str().is_some_and(|t| !t.is_empty()),
                "{c:?}: {line}"
            );
        }
    }
    for c in arrays {
        let mut args = vec!["--json"];
        args.extend_from_slice(&c);
        let v: Value = serde_json::from_str(env.ok(&args).trim()).unwrap();
        assert!(v.is_array(), "{c:?}: {v}");
    }
}
