//! A file system of its own for a data directory, that can lose power.
//!
//! [`LoopXfs`] makes an XFS file system in a sparse image file, mounts it
//! through a loop device, and [`LoopXfs::power_cut`] shuts it down the way
//! `xfstests` simulates a power failure: `xfs_io -x -c shutdown` without
//! `-f` stops the file system at once, without flushing its log, so every
//! write not yet made durable by `fsync` (data in the page cache, metadata
//! in the in-memory log) is gone when it is mounted again, and the log
//! replay leaves what a machine that lost power would find. Writes in
//! flight are torn where they were cut.
//!
//! Root only (mount, loop devices); `mkfs.xfs` and `xfs_io` come from
//! Debian's `xfsprogs`.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{is_root, ChaosError, Result};

/// `mkfs.xfs`.
pub const MKFS_XFS: &str = "/usr/sbin/mkfs.xfs";
/// `xfs_io`.
pub const XFS_IO: &str = "/usr/sbin/xfs_io";

/// Whether this machine can make one: root, and `xfsprogs` installed.
pub fn available() -> bool {
    is_root() && Path::new(MKFS_XFS).exists() && Path::new(XFS_IO).exists()
}

/// An XFS file system in `image`, mounted at `mnt`; unmounted (and the
/// image removed) on drop.
pub struct LoopXfs {
    image: PathBuf,
    mnt: PathBuf,
}

fn run(what: &str, cmd: &mut Command) -> Result<()> {
    let out = cmd
        .output()
        .map_err(|e| ChaosError::Io(format!("running {what}"), e))?;
    if out.status.success() {
        return Ok(());
    }
    Err(ChaosError::Io(
        what.into(),
        io::Error::other(format!(
            "exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    ))
}

impl LoopXfs {
    /// Makes a file system of `size_bytes` in `image` (a sparse file) and
    /// mounts it at `mnt` (created if missing).
    pub fn mount(image: &Path, mnt: &Path, size_bytes: u64) -> Result<Self> {
        if !is_root() {
            return Err(ChaosError::NotRoot("mounting a loop device".into()));
        }
        let io_err = |what: &str, e| ChaosError::Io(format!("{what} {}", image.display()), e);
        std::fs::create_dir_all(mnt)
            .map_err(|e| ChaosError::Io(format!("creating {}", mnt.display()), e))?;
        let f = std::fs::File::create(image).map_err(|e| io_err("creating", e))?;
        f.set_len(size_bytes).map_err(|e| io_err("sizing", e))?;
        drop(f);
        run(
            "mkfs.xfs",
            Command::new(MKFS_XFS).args(["-q", "-f"]).arg(image),
        )?;
        let fs = LoopXfs {
            image: image.to_path_buf(),
            mnt: mnt.to_path_buf(),
        };
        fs.mount_again()?;
        Ok(fs)
    }

    fn mount_again(&self) -> Result<()> {
        run(
            "mount",
            Command::new("mount")
                .args(["-t", "xfs", "-o", "loop"])
                .arg(&self.image)
                .arg(&self.mnt),
        )
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.mnt
    }

    /// The power goes out: the file system stops at once, nothing more
    /// reaches the disk (every later call on it fails with EIO). Kill its
    /// users, then [`LoopXfs::remount`].
    pub fn power_cut(&self) -> Result<()> {
        run(
            "xfs_io shutdown",
            Command::new(XFS_IO)
                .args(["-x", "-c", "shutdown"])
                .arg(&self.mnt),
        )
    }

    /// The power comes back: unmounted (the processes still holding it
    /// killed after `patience`) and mounted again, which replays its log.
    pub fn remount(&self, patience: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            let umount = Command::new("umount").arg(&self.mnt).output();
            if umount.as_ref().is_ok_and(|o| o.status.success()) {
                break;
            }
            if start.elapsed() > patience {
                // Whoever still holds a file open there was cut off too.
                let _ = Command::new("fuser").arg("-km").arg(&self.mnt).output();
            }
            if start.elapsed() > patience * 3 {
                return Err(ChaosError::Io(
                    format!("unmounting {}", self.mnt.display()),
                    io::Error::other("still busy"),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.mount_again()
    }
}

impl Drop for LoopXfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        let _ = std::fs::remove_file(&self.image);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A synced file survives the cut whole; one written after the last
    /// sync does not come back with its data.
    #[test]
    fn a_power_cut_keeps_what_was_synced_and_loses_what_was_not() {
        if !available() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs as root with xfsprogs installed"
            );
            eprintln!("not root or no xfsprogs: skipped");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let fs = LoopXfs::mount(&dir.path().join("img"), &dir.path().join("mnt"), 300 << 20)
            .expect("mount");
        let durable = fs.path().join("durable");
        let mut f = std::fs::File::create(&durable).expect("create");
        f.write_all(&[7u8; 100_000]).expect("write");
        f.sync_all().expect("fsync");
        let dirfd = std::fs::File::open(fs.path()).expect("dir");
        dirfd.sync_all().expect("fsync dir");
        drop((f, dirfd));
        let volatile = fs.path().join("volatile");
        std::fs::write(&volatile, [9u8; 100_000]).expect("write");
        fs.power_cut().expect("cut");
        assert!(std::fs::write(fs.path().join("after"), b"x").is_err());
        fs.remount(Duration::from_secs(5)).expect("remount");
        assert_eq!(std::fs::read(&durable).expect("read"), vec![7u8; 100_000]);
        let back = std::fs::read(&volatile).unwrap_or_default();
        assert_ne!(back, vec![9u8; 100_000], "unsynced data came back");
        assert!(!fs.path().join("after").exists());
    }
}
