//! Regressions found by the engine review (`/work/shared/reviews/engine.md`),
//! each named after its finding: change detection, far timestamps and the
//! repository's self-exclusion, end to end through the `vouch` binary.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{summary_of, Env, LoopExt4};

/// Skips a test that needs root or a mount, loudly; under CI it fails.
fn skip(why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("cannot run under CI: {why}");
    }
    eprintln!("SKIPPED: {why}");
}

/// Sets a file's mtime (and leaves atime alone), with `utimensat`.
fn set_mtime(path: &Path, sec: i64, nsec: i64) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let times = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: sec as libc::time_t,
            tv_nsec: nsec as _,
        },
    ];
    // SAFETY: a valid C string and two timespecs.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) };
    assert_eq!(
        r,
        0,
        "utimensat {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// Where a restore into `target` puts the source path `p`.
fn restored(target: &Path, p: &Path) -> PathBuf {
    target.join(p.strip_prefix("/").unwrap())
}

/// (size, mtime, ctime, inode): what change detection compares.
fn stat_key(p: &Path) -> (u64, i64, i64, i64, i64, u64) {
    let m = fs::symlink_metadata(p).unwrap();
    (
        m.len(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
        m.ino(),
    )
}

/// Engine review finding 7 (racily clean files): on a file system with
/// one-second timestamps, a file rewritten with the same size right after
/// the backup read it has an identical stat. The next backup must read it
/// again instead of keeping the stale content, while a file older than the
/// margin is still taken from the parent unread.
#[test]
fn review_finding_7_same_tick_rewrite_is_not_kept_stale() {
    if !common::is_root() {
        return skip("needs root to loop-mount an ext4 with 128-byte inodes");
    }
    let env = Env::new();
    env.init();
    let fs = match LoopExt4::mount(env.dir.path(), &["-I", "128"]) {
        Ok(fs) => fs,
        Err(e) => return skip(&format!("cannot mount a coarse ext4: {e}")),
    };
    let src = fs.mnt.join("d");
    fs::create_dir_all(&src).unwrap();
    let old = src.join("old");
    fs::write(&old, b"old content").unwrap();
    assert_eq!(
        fs::metadata(&old).unwrap().mtime_nsec(),
        0,
        "the file system must have whole-second timestamps"
    );
    // `old` must be older than the parent's start minus the 2 s margin for
    // its reuse to be allowed: this is the file system's clock, which a
    // test cannot move, so wait it out (about 3 s).
    let ctime = fs::metadata(&old).unwrap().ctime();
    let ready = UNIX_EPOCH + Duration::from_secs(ctime as u64 + 3);
    while SystemTime::now() < ready {
        std::thread::sleep(Duration::from_millis(100));
    }
    let f = src.join("f");
    let mut same_tick = false;
    for _ in 0..10 {
        fs::write(&f, b"AAAA").unwrap();
        let before = stat_key(&f);
        env.backup(&[&src]);
        fs::write(&f, b"BBBB").unwrap();
        // The rewrite must land in the same second as the recorded stat;
        // if the second turned meanwhile, try again.
        if stat_key(&f) == before {
            same_tick = true;
            break;
        }
    }
    assert!(same_tick, "no rewrite within the same second in 10 tries");
    let out = env.ok(&["backup", "--json", src.to_str().unwrap()]);
    let s = summary_of(&out);
    let target = env.path("target");
    env.ok(&["restore", "latest", "-t", target.to_str().unwrap()]);
    assert_eq!(
        fs::read(restored(&target, &f)).unwrap(),
        b"BBBB",
        "stale content kept: {s}"
    );
    assert_eq!(s["summary"]["files_unchanged"], 1, "{s}");
    assert_eq!(s["summary"]["files_read"], 1, "{s}");
}

/// Engine review finding 15: mtimes after 2262 or before 1678 overflowed
/// the walker's ns arithmetic (a panic in debug builds, which committed a
/// truncated snapshot). They are stored exactly (`mtime_exact`) and
/// restored exactly.
#[test]
fn review_finding_15_far_future_and_far_past_mtimes() {
    let env = Env::new();
    env.init();
    // tmpfs holds any 64-bit time; ext4 would clamp 1600 itself.
    let _tmpfs;
    let base = if common::is_root() {
        let t = vouch_chaos::Tmpfs::mount(&env.path("tmpfs"), 16 << 20).ok();
        let base = t.as_ref().map(|t| t.path().to_path_buf());
        _tmpfs = t;
        base
    } else {
        None
    };
    let base = base.unwrap_or_else(|| env.dir.path().to_path_buf());
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    for name in ["a", "future", "past", "z"] {
        fs::write(src.join(name), name).unwrap();
    }
    // 2300-01-01 and 1600-01-01, UTC, with nanoseconds.
    set_mtime(&src.join("future"), 10_413_792_000, 123);
    set_mtime(&src.join("past"), -11_676_096_000, 456);
    let kept = |name: &str| {
        let m = fs::metadata(src.join(name)).unwrap();
        (m.mtime(), m.mtime_nsec())
    };
    let (future_kept, past_kept) = (kept("future"), kept("past"));

    let out = env.ok(&["backup", "--json", src.to_str().unwrap()]);
    let s = summary_of(&out);
    assert_eq!(s["summary"]["files"], 4, "{s}");
    assert_eq!(s["summary"]["warnings"], 0, "{s}");

    let target = base.join("target");
    env.ok(&["restore", "latest", "-t", target.to_str().unwrap()]);
    let r = restored(&target, &src);
    for name in ["a", "future", "past", "z"] {
        assert_eq!(fs::read(r.join(name)).unwrap(), name.as_bytes());
    }
    let m = fs::metadata(r.join("future")).unwrap();
    assert_eq!((m.mtime(), m.mtime_nsec()), future_kept);
    let m = fs::metadata(r.join("past")).unwrap();
    assert_eq!((m.mtime(), m.mtime_nsec()), past_kept);
    // An unchanged re-run after the racy margin reuses them (the exact
    // times compare equal) and the restore test's comparison holds.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let out = env.ok(&["backup", "--json", src.to_str().unwrap()]);
    let s = summary_of(&out);
    assert_eq!(s["summary"]["warnings"], 0, "{s}");
}

/// Engine review finding 18: the repository given as `--repo ../r` (from
/// a working directory inside the source) or through a symlink was backed
/// up into itself.
#[test]
fn review_finding_18_repository_never_backed_up_into_itself() {
    let env = Env::new();
    let base = fs::canonicalize(env.dir.path()).unwrap();
    let src = base.join("src");
    fs::create_dir_all(src.join("work")).unwrap();
    fs::write(src.join("file"), b"data").unwrap();
    let repo = src.join("r");
    let init = |repo: &Path| {
        let out = env
            .cmd()
            .env("VOUCH_REPOSITORY", repo)
            .args([
                "init",
                "--insecure-kdf",
                "--kdf-memory-kib",
                "1024",
                "--kdf-iterations",
                "1",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    init(&repo);
    let link = base.join("repo-link");
    std::os::unix::fs::symlink(&repo, &link).unwrap();

    for (how, repo_arg, cwd) in [
        ("relative", PathBuf::from("../r"), src.join("work")),
        ("symlink", link.clone(), base.clone()),
    ] {
        let out = env
            .cmd()
            .current_dir(&cwd)
            .env_remove("VOUCH_REPOSITORY")
            .arg("--repo")
            .arg(&repo_arg)
            .args(["backup", "--json"])
            .arg(&src)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{how}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let target = base.join(format!("target-{how}"));
        let out = env
            .cmd()
            .env("VOUCH_REPOSITORY", &repo)
            .args(["restore", "latest", "-t"])
            .arg(&target)
            .output()
            .unwrap();
        assert!(out.status.success(), "{how}: {out:?}");
        let r = restored(&target, &src);
        assert_eq!(fs::read(r.join("file")).unwrap(), b"data", "{how}");
        assert!(
            !r.join("r").exists(),
            "{how}: the repository was backed up into itself"
        );
    }
}
