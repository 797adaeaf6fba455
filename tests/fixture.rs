//! The format-v1 fixture repository must open, list, verify and restore
//! bit-exactly with every future version of vouch. Never regenerate it: a
//! new format version gets a fixture of its own beside it.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::describe;

const FIXTURE_PASSWORD: &str = "vouch fixture v1";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn vouch(repo: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vouch"));
    c.env("VOUCH_REPOSITORY", repo)
        .env("VOUCH_PASSWORD", FIXTURE_PASSWORD)
        .env_remove("VOUCH_PASSWORD_FILE")
        .env_remove("VOUCH_PASSWORD_COMMAND");
    c
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        cmd,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn fixture_repo_v1_opens_lists_verifies_and_restores_bit_exactly() {
    let work = tempfile::tempdir().unwrap();
    // Work on a copy: opening takes locks, and the fixture must stay pristine.
    let repo = work.path().join("repo");
    copy_dir(&fixtures().join("repo-v1"), &repo);
    let expected: BTreeMap<String, String> = serde_json::from_str(
        &fs::read_to_string(fixtures().join("repo-v1.expected.json")).unwrap(),
    )
    .unwrap();

    let snaps: serde_json::Value =
        serde_json::from_str(run_ok(vouch(&repo).args(["snapshots", "--json"])).trim()).unwrap();
    let snaps = snaps.as_array().unwrap();
    assert_eq!(snaps.len(), 2);
    assert_eq!(snaps[0]["tags"][0], "fixture");
    run_ok(vouch(&repo).args(["verify", "--read-data"]));
    let target = work.path().join("restored");
    run_ok(
        vouch(&repo)
            .args([
                "restore",
                "latest:/fixture-source",
                "--host",
                "fixture-host",
                "--target",
            ])
            .arg(&target)
            .arg("--verify"),
    );
    assert_eq!(describe(&target), expected);
    let diff = run_ok(vouch(&repo).args([
        "diff",
        snaps[0]["id"].as_str().unwrap(),
        snaps[1]["id"].as_str().unwrap(),
    ]));
    assert!(diff.contains("+ /fixture-source/added-later"), "{diff}");
}

/// Copies like a git checkout does: empty directories are not kept.
fn copy_dir(from: &Path, to: &Path) {
    if fs::read_dir(from).unwrap().next().is_none() {
        return;
    }
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// Writes `tests/fixtures/repo-v1` once. Kept so the procedure is on record;
/// run with `cargo test --test fixture -- --ignored generate` only when
/// adding a fixture for a NEW format version (then change the paths).
#[test]
#[ignore]
fn generate_fixture_repo_v1() {
    let out = fixtures().join("repo-v1");
    assert!(
        !out.exists(),
        "the v1 fixture exists and must never be regenerated"
    );
    // The source lives at a fixed absolute path so the snapshot paths are stable.
    let src = Path::new("/fixture-source");
    let _ = fs::remove_dir_all(src);
    fs::create_dir_all(src.join("dir/empty")).unwrap();
    fs::write(src.join("hello.txt"), b"hello from format v1\n").unwrap();
    fs::write(src.join("dir/random.bin"), common::random_bytes(70_000, 42)).unwrap();
    fs::write(
        src.join("dir/text.txt"),
        b"compressible text, format v1. ".repeat(3000),
    )
    .unwrap();
    fs::write(src.join("empty"), b"").unwrap();
    symlink("hello.txt", src.join("link")).unwrap();
    let set_time = |p: &Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        let ts = libc::timespec {
            tv_sec: 1_764_000_000,
            tv_nsec: 123_456_789,
        };
        unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                c.as_ptr(),
                [ts, ts].as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
    };
    for p in [
        "hello.txt",
        "dir/random.bin",
        "dir/text.txt",
        "empty",
        "link",
        "dir/empty",
        "dir",
    ] {
        set_time(&src.join(p));
    }
    run_ok(vouch(&out).args([
        "init",
        "--insecure-kdf",
        "--kdf-memory-kib",
        "1024",
        "--kdf-iterations",
        "1",
        "--chunk-min-kib",
        "16",
        "--chunk-avg-kib",
        "32",
        "--chunk-max-kib",
        "64",
    ]));
    run_ok(vouch(&out).args([
        "backup",
        "--tag",
        "fixture",
        "--host",
        "fixture-host",
        "/fixture-source",
    ]));
    fs::write(src.join("added-later"), b"second snapshot\n").unwrap();
    set_time(&src.join("added-later"));
    set_time(src);
    run_ok(vouch(&out).args([
        "backup",
        "--tag",
        "fixture",
        "--host",
        "fixture-host",
        "/fixture-source",
    ]));
    fs::write(
        fixtures().join("repo-v1.expected.json"),
        serde_json::to_string_pretty(&describe(src)).unwrap(),
    )
    .unwrap();
    fs::remove_dir_all(src).unwrap();
}

/// A point lock record of format v1 (`tests/fixtures/pointlock-v1`, written
/// on 2026-12-06 for the fixture's first snapshot, until 2100): read and
/// honoured by every later version. Never regenerate it.
#[test]
fn fixture_point_lock_record_v1_is_read_and_honoured() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo");
    copy_dir(&fixtures().join("repo-v1"), &repo);
    copy_dir(&fixtures().join("pointlock-v1"), &repo.join("pointlocks"));
    let snaps: serde_json::Value =
        serde_json::from_str(run_ok(vouch(&repo).args(["snapshots", "--json"])).trim()).unwrap();
    let snaps = snaps.as_array().unwrap();
    assert_eq!(
        snaps[0]["id"],
        "dd7692e92ab25603b077944807580a6534a7abf8f57a99c75b6806c6f28217c7"
    );
    assert_eq!(snaps[0]["locked_until"], "2100-01-01T00:00:00Z");
    assert!(snaps[1]["locked_until"].is_null());
    let out = vouch(&repo)
        .args(["forget", snaps[0]["id"].as_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(21),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    run_ok(vouch(&repo).args(["verify"]));
}

/// The extended attributes under `root`, by relative path: `name=hex(value)`
/// sorted; `security.` ones only when `with_security` (they need root to
/// set).
fn xattrs_of(root: &Path, with_security: bool) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            for e in fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
        let mut attrs: Vec<String> = xattr::list(&p)
            .unwrap()
            .filter(|n| with_security || !n.to_string_lossy().starts_with("security."))
            .map(|n| {
                let v = xattr::get(&p, &n).unwrap().unwrap_or_default();
                format!("{}={}", n.to_string_lossy(), hex::encode(v))
            })
            .collect();
        attrs.sort();
        if !attrs.is_empty() {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            out.insert(rel, attrs);
        }
    }
    out
}

/// The snapshot-version-2 fixture repository (extended attributes: `user.`
/// values, an access and a default ACL, a file capability) must open,
/// verify and restore bit-exactly, attributes included, with every later
/// version of vouch. Never regenerate it.
#[test]
fn fixture_repo_v2_restores_its_extended_attributes() {
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo");
    copy_dir(&fixtures().join("repo-v2"), &repo);
    let expected: BTreeMap<String, String> = serde_json::from_str(
        &fs::read_to_string(fixtures().join("repo-v2.expected.json")).unwrap(),
    )
    .unwrap();
    let expected_xattrs: BTreeMap<String, Vec<String>> = serde_json::from_str(
        &fs::read_to_string(fixtures().join("repo-v2.expected-xattrs.json")).unwrap(),
    )
    .unwrap();
    run_ok(vouch(&repo).args(["verify", "--read-data"]));
    let target = work.path().join("restored");
    run_ok(
        vouch(&repo)
            .args([
                "restore",
                "latest:/fixture-source-v2",
                "--host",
                "fixture-host",
                "--target",
            ])
            .arg(&target)
            .arg("--verify"),
    );
    assert_eq!(describe(&target), expected);
    let root = common::is_root();
    let want: BTreeMap<String, Vec<String>> = expected_xattrs
        .into_iter()
        .map(|(k, v)| {
            let v: Vec<String> = v
                .into_iter()
                .filter(|a| root || !a.starts_with("security."))
                .collect();
            (k, v)
        })
        .filter(|(_, v)| !v.is_empty())
        .collect();
    assert!(want
        .values()
        .flatten()
        .any(|a| a.starts_with("system.posix_acl_default=")));
    assert_eq!(xattrs_of(&target, root), want);
}

/// Writes `tests/fixtures/repo-v2` once (as root, with `setfacl` and
/// `setcap`), like [`generate_fixture_repo_v1`].
#[test]
#[ignore]
fn generate_fixture_repo_v2() {
    let out = fixtures().join("repo-v2");
    assert!(
        !out.exists(),
        "the v2 fixture exists and must never be regenerated"
    );
    assert!(common::is_root(), "generate as root (file capabilities)");
    let src = Path::new("/fixture-source-v2");
    let _ = fs::remove_dir_all(src);
    fs::create_dir_all(src.join("shared")).unwrap();
    fs::write(src.join("notes.txt"), b"attributes, format v2\n").unwrap();
    fs::write(src.join("shared/doc.txt"), b"a document with an ACL\n").unwrap();
    fs::write(src.join("ping"), b"a file with a capability\n").unwrap();
    symlink("notes.txt", src.join("link")).unwrap();
    xattr::set(src.join("notes.txt"), "user.comment", b"kept").unwrap();
    xattr::set(src.join("notes.txt"), "user.binary", &[0, 1, 2, 255]).unwrap();
    xattr::set(src.join("shared"), "user.dir", b"a directory's").unwrap();
    let sh = |cmd: &str| {
        let ok = Command::new("sh")
            .arg("-ec")
            .arg(cmd)
            .current_dir(src)
            .status()
            .unwrap()
            .success();
        assert!(ok, "{cmd}");
    };
    sh("setfacl -m u:1234:rw,g:2345:r shared/doc.txt");
    sh("setfacl -m u:1234:rwx shared && setfacl -d -m u:1234:rx shared");
    sh("setcap cap_net_raw+ep ping");
    sh("touch -h -d @1764000000 notes.txt shared/doc.txt ping link shared .");
    run_ok(vouch(&out).args([
        "init",
        "--insecure-kdf",
        "--kdf-memory-kib",
        "1024",
        "--kdf-iterations",
        "1",
    ]));
    run_ok(vouch(&out).args([
        "backup",
        "--tag",
        "fixture",
        "--host",
        "fixture-host",
        "/fixture-source-v2",
    ]));
    fs::write(
        fixtures().join("repo-v2.expected.json"),
        serde_json::to_string_pretty(&describe(src)).unwrap(),
    )
    .unwrap();
    fs::write(
        fixtures().join("repo-v2.expected-xattrs.json"),
        serde_json::to_string_pretty(&xattrs_of(src, true)).unwrap(),
    )
    .unwrap();
    fs::remove_dir_all(src).unwrap();
}
