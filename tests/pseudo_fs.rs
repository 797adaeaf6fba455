//! A backup that crosses into a kernel pseudo file system keeps the
//! directory and skips its contents: a real `proc` mounted inside the
//! source (root only; skipped with a note otherwise).

mod common;

use std::fs;
use std::process::Command;

use common::{is_root, Env};

/// Unmounts on drop, also when an assertion fails.
struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_proc_mount_inside_the_source_is_kept_empty_and_the_rest_is_backed_up() {
    if !is_root() {
        eprintln!("SKIPPED: needs root to mount proc");
        return;
    }
    let env = Env::new();
    env.init();
    let src = env.path("src");
    fs::create_dir_all(src.join("kernel")).expect("mkdir");
    fs::write(src.join("notes.txt"), b"kept\n").expect("write");
    let mounted = Command::new("mount")
        .args(["-t", "proc", "proc"])
        .arg(src.join("kernel"))
        .status()
        .expect("mount runs");
    if !mounted.success() {
        eprintln!("SKIPPED: this machine does not let us mount proc");
        return;
    }
    let _m = Mount(src.join("kernel"));
    assert!(
        src.join("kernel/self").exists(),
        "proc is mounted in the source"
    );

    let snap = env.backup(&[&src]);
    let ls = env.ok(&["ls", &snap, src.to_str().expect("utf-8 path")]);
    let listed: Vec<&str> = ls.lines().collect();
    assert!(
        listed.iter().any(|l| l.ends_with("/notes.txt")),
        "the ordinary file is there: {ls}"
    );
    assert!(
        listed.iter().any(|l| l.ends_with("/kernel")),
        "the mount point is kept: {ls}"
    );
    assert!(
        !listed.iter().any(|l| l.contains("/kernel/")),
        "nothing below the proc mount: {}",
        listed
            .iter()
            .filter(|l| l.contains("/kernel/"))
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
