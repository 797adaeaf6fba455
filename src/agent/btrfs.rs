//! Consistent reads of a source on btrfs: a read-only snapshot of the
//! subvolume that holds it, taken before the walk and deleted after.
//!
//! The snapshot is `<subvolume>/.vouch-snapshot` (btrfs snapshots must be on
//! the file system they copy). One agent runs one job at a time, so one
//! name per subvolume suffices; a snapshot left by a killed agent is deleted
//! before the next one is taken. In the snapshot, that name is an empty
//! directory (nested subvolumes are not copied), which the backup skips.
//! Taking and deleting snapshots needs `CAP_SYS_ADMIN` (an agent running as
//! root has it) and the `btrfs` command (Debian: btrfs-progs).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `statfs` magic of btrfs.
const BTRFS_SUPER_MAGIC: i64 = 0x9123_683E;
/// The inode number of every btrfs subvolume's root directory.
const SUBVOLUME_ROOT_INODE: u64 = 256;
/// The snapshot's name inside the subvolume.
pub const SNAPSHOT_NAME: &str = ".vouch-snapshot";

/// A read-only snapshot of the subvolume holding a source.
#[derive(Debug)]
pub struct BtrfsSnapshot {
    subvolume: PathBuf,
    snapshot: PathBuf,
    read_at: PathBuf,
}

fn is_btrfs(path: &Path) -> Result<bool, String> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: a NUL in the path", path.display()))?;
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a writable statfs.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(format!(
            "{}: statfs: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    #[allow(clippy::unnecessary_cast)]
    Ok(st.f_type as i64 == BTRFS_SUPER_MAGIC)
}

/// The root of the subvolume holding `path`: its topmost ancestor on the
/// same device (every subvolume has a device number of its own).
fn subvolume_root(path: &Path) -> Result<PathBuf, String> {
    let dev = std::fs::metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .dev();
    let mut root = path.to_path_buf();
    while let Some(parent) = root.parent() {
        match std::fs::metadata(parent) {
            Ok(m) if m.dev() == dev => root = parent.to_path_buf(),
            _ => break,
        }
    }
    Ok(root)
}

fn btrfs(args: &[&std::ffi::OsStr]) -> Result<(), String> {
    let out = Command::new("btrfs")
        .args(args)
        .output()
        .map_err(|e| format!("running btrfs (install btrfs-progs): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "btrfs {}: {}",
            args.iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn delete(snapshot: &Path) -> Result<(), String> {
    btrfs(&[
        "subvolume".as_ref(),
        "delete".as_ref(),
        snapshot.as_os_str(),
    ])
}

/// Snapshots the subvolume holding `source` when it is on btrfs; `Ok(None)`
/// when it is not.
pub fn freeze(source: &Path) -> Result<Option<BtrfsSnapshot>, String> {
    let source = std::fs::canonicalize(source).map_err(|e| format!("{}: {e}", source.display()))?;
    if !is_btrfs(&source)? {
        return Ok(None);
    }
    let subvolume = subvolume_root(&source)?;
    let inode = std::fs::metadata(&subvolume)
        .map_err(|e| format!("{}: {e}", subvolume.display()))?
        .ino();
    if inode != SUBVOLUME_ROOT_INODE {
        return Err(format!(
            "{} is on btrfs, but its subvolume's root could not be found ({} has inode {inode})",
            source.display(),
            subvolume.display()
        ));
    }
    let snapshot = subvolume.join(SNAPSHOT_NAME);
    if std::fs::symlink_metadata(&snapshot).is_ok() {
        tracing::warn!(snapshot = %snapshot.display(), "deleting a snapshot an interrupted backup left");
        delete(&snapshot)?;
    }
    btrfs(&[
        "subvolume".as_ref(),
        "snapshot".as_ref(),
        "-r".as_ref(),
        subvolume.as_os_str(),
        snapshot.as_os_str(),
    ])?;
    let rest = source.strip_prefix(&subvolume).unwrap_or(Path::new(""));
    Ok(Some(BtrfsSnapshot {
        read_at: snapshot.join(rest),
        subvolume,
        snapshot,
    }))
}

impl super::platform::Frozen for BtrfsSnapshot {
    fn read_path(&self) -> &Path {
        &self.read_at
    }

    fn describe(&self) -> String {
        format!(
            "btrfs snapshot {} of subvolume {}",
            self.snapshot.display(),
            self.subvolume.display()
        )
    }

    fn skip(&self) -> Vec<PathBuf> {
        // The snapshot's own name, seen inside the snapshot: an empty
        // directory standing for the nested subvolume it was when taken.
        vec![self.snapshot.join(SNAPSHOT_NAME)]
    }
}

impl Drop for BtrfsSnapshot {
    fn drop(&mut self) {
        if let Err(e) = delete(&self.snapshot) {
            tracing::warn!(
                "the snapshot {} was not deleted: {e}",
                self.snapshot.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_off_btrfs_is_read_live() {
        // The build directory's file system is not btrfs on these machines;
        // where it is, this only checks that freezing works there.
        let dir = tempfile::tempdir().expect("tempdir");
        if is_btrfs(dir.path()).expect("statfs") {
            return;
        }
        assert!(freeze(dir.path()).expect("no error").is_none());
    }
}
