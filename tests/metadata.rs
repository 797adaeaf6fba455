//! Restores that lose no metadata (issue 19): extended attributes, POSIX
//! ACLs (access and default) and file capabilities come back as they were,
//! compared with `getfattr -d -m -`, `getfacl` and `getcap` (SELinux labels
//! too where the kernel has SELinux); a change of attributes alone is
//! noticed (ctime) and shown by `diff` as `U`; `--no-xattrs` leaves them
//! out; snapshot files are written as version 2, so a binary that reads
//! only version 1 refuses them rather than restore without attributes.

mod common;

use std::path::Path;
use std::process::Command;

use common::{is_root, Env};

/// `tool args...` run in `dir`; its stdout. `None` (with a note) when the
/// tool is missing outside CI; CI must have it (.ci/run installs `acl`,
/// `attr` and `libcap2-bin`).
fn tool(dir: &Path, tool: &str, args: &[&str]) -> Option<String> {
    let out = match Command::new(tool).args(args).current_dir(dir).output() {
        Ok(out) => out,
        Err(e) => {
            assert!(std::env::var_os("CI").is_none(), "CI must have {tool}: {e}");
            eprintln!("skipped: {tool} is not installed ({e})");
            return None;
        }
    };
    assert!(
        out.status.success(),
        "{tool} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every attribute, ACL and capability under `dir`, as the system's own
/// tools print them (paths relative to `dir`).
fn metadata_of(dir: &Path) -> Option<String> {
    let attrs = tool(dir, "getfattr", &["-R", "-d", "-m", "-", "-h", "."])?;
    let acls = tool(dir, "getfacl", &["-R", "-p", "."])?;
    let caps = tool(dir, "getcap", &["-r", "."])?;
    let mut caps: Vec<&str> = caps.lines().collect();
    caps.sort_unstable();
    Some(format!("{attrs}\n{acls}\n{}", caps.join("\n")))
}

fn set(dir: &Path, cmd: &str, args: &[&str]) -> Option<()> {
    tool(dir, cmd, args).map(|_| ())
}

#[test]
fn xattrs_acls_and_capabilities_survive_backup_and_restore() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("share/inner")).unwrap();
    std::fs::write(src.join("notes.txt"), b"notes").unwrap();
    std::fs::write(src.join("plain.txt"), b"no attributes").unwrap();
    std::fs::write(src.join("share/inner/doc.txt"), b"doc").unwrap();
    std::fs::write(src.join("ping"), b"\x7fELF not really").unwrap();
    std::os::unix::fs::symlink("notes.txt", src.join("link")).unwrap();
    if set(
        &src,
        "setfattr",
        &["-n", "user.comment", "-v", "first", "notes.txt"],
    )
    .is_none()
    {
        return;
    }
    set(
        &src,
        "setfattr",
        &["-n", "user.binary", "-v", "0sAAEC/w==", "notes.txt"],
    )
    .unwrap();
    set(
        &src,
        "setfattr",
        &["-n", "user.dir", "-v", "on a directory", "share"],
    )
    .unwrap();
    // An access ACL on a file, access and default ACLs on a directory.
    set(
        &src,
        "setfacl",
        &["-m", "u:1234:rw,g:2345:r", "share/inner/doc.txt"],
    )
    .unwrap();
    set(&src, "setfacl", &["-m", "u:1234:rwx", "share"]).unwrap();
    set(
        &src,
        "setfacl",
        &["-d", "-m", "u:1234:rx,g:2345:rx", "share"],
    )
    .unwrap();
    let with_caps = is_root();
    if with_caps {
        set(&src, "setcap", &["cap_net_raw+ep", "ping"]).unwrap();
    } else {
        eprintln!("not root: file capabilities are not part of this run");
    }
    let before = metadata_of(&src).unwrap();
    assert!(before.contains("user.comment=\"first\""), "{before}");
    assert!(before.contains("default:user:1234:r-x"), "{before}");
    if with_caps {
        assert!(before.contains("cap_net_raw=ep"), "{before}");
    }
    // The first backup's parent times lie 2 s before the next backup's
    // start: entries unchanged since are taken from it (racily clean).
    std::thread::sleep(std::time::Duration::from_millis(2200));
    env.backup(&[&src]);

    let first = env.path("first");
    env.ok(&["restore", "latest", "--target", first.to_str().unwrap()]);
    let restored = first.join(src.strip_prefix("/").unwrap());
    assert_eq!(metadata_of(&restored).unwrap(), before);

    // Only an attribute changes: the next backup notices (ctime), diff says
    // U, and the unchanged entries keep theirs (taken from the parent).
    set(
        &src,
        "setfattr",
        &["-n", "user.comment", "-v", "second", "notes.txt"],
    )
    .unwrap();
    env.backup(&[&src]);
    let ids = env.snapshot_ids();
    let diff = env.ok(&["diff", &ids[0], &ids[1]]);
    let changed: Vec<&str> = diff
        .lines()
        .filter(|l| l.len() > 2 && "+-MUT".contains(&l[..1]) && &l[1..2] == " ")
        .collect();
    assert_eq!(changed.len(), 1, "{diff}");
    assert!(
        changed[0].starts_with('U') && changed[0].ends_with("notes.txt"),
        "{diff}"
    );
    let second = env.path("second");
    env.ok(&["restore", "latest", "--target", second.to_str().unwrap()]);
    let after = metadata_of(&src).unwrap();
    assert!(after.contains("user.comment=\"second\""), "{after}");
    assert_eq!(
        metadata_of(&second.join(src.strip_prefix("/").unwrap())).unwrap(),
        after
    );

    // --no-xattrs: none of them.
    env.ok(&["backup", "--no-xattrs", src.to_str().unwrap()]);
    let bare = env.path("bare");
    env.ok(&["restore", "latest", "--target", bare.to_str().unwrap()]);
    let bare_meta = metadata_of(&bare.join(src.strip_prefix("/").unwrap())).unwrap();
    assert!(!bare_meta.contains("user.comment"), "{bare_meta}");
    assert!(!bare_meta.contains("default:user:1234"), "{bare_meta}");
    assert!(!bare_meta.contains("cap_net_raw"), "{bare_meta}");
}

/// Snapshot files carry version 2 in their clear prefix (what a reader
/// checks before anything else); every other file stays version 1, so
/// older binaries still read the repository's index and its older
/// snapshots, and refuse the new ones as of a newer format.
#[test]
fn snapshots_are_written_as_version_2_and_the_rest_as_version_1() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    common::random_files(&src, 2, 1000, 5);
    env.backup(&[&src]);
    let version_of = |dir: &str| -> Vec<u8> {
        let mut out = Vec::new();
        for e in walk(&env.repo.join(dir)) {
            let bytes = std::fs::read(&e).unwrap();
            assert_eq!(&bytes[..5], b"VOUCH", "{}", e.display());
            out.push(bytes[6]);
        }
        out
    };
    let snapshots = version_of("snapshots");
    assert!(!snapshots.is_empty());
    assert!(snapshots.iter().all(|&v| v == 2), "{snapshots:?}");
    let index = version_of("index");
    assert!(!index.is_empty());
    assert!(index.iter().all(|&v| v == 1), "{index:?}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
