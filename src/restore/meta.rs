//! Recreating special files and applying metadata (owner, mode, times),
//! always through a descriptor: the entry's own (files, directories) or its
//! parent directory's with the entry's name (symlinks, fifos, devices).
//! The owner is set before the mode, so setuid and setgid bits never sit on
//! a file that still has the restoring user's owner (and `chown` would clear
//! them anyway). Extended attributes come after both: `chown` clears
//! `security.capability`, and `chmod` would rewrite an access ACL's mask.
//! An attribute the target refuses is a warning, not a failure.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use super::dirfd::{os_err, remove_at, stat_at};
use crate::error::{Error, Result};
use crate::format::{Node, NodeKind};
use crate::util::is_root;

/// Access and modification time for `utimensat`/`futimens`: the node's
/// exact modification time, also when i64 ns cannot hold it.
fn times(node: &Node) -> [libc::timespec; 2] {
    let t = node.mtime();
    let ts = libc::timespec {
        tv_sec: t.sec as libc::time_t,
        tv_nsec: t.nsec as _,
    };
    [ts, ts]
}

fn mode(node: &Node) -> libc::mode_t {
    (node.mode & 0o7777) as libc::mode_t
}

/// Creates a symlink, fifo or device named `name` in `dir`, replacing what
/// is there. Returns a warning instead when it cannot be recreated here
/// (devices as non-root, sockets).
pub fn create_special(
    dir: &OwnedFd,
    name: &CStr,
    path: &Path,
    node: &Node,
) -> Result<Option<String>> {
    match node.kind {
        NodeKind::CharDevice | NodeKind::BlockDevice if !is_root() => {
            return Ok(Some(format!(
                "{}: device not recreated (needs root)",
                path.display()
            )))
        }
        NodeKind::Socket => return Ok(Some(format!("{}: socket not recreated", path.display()))),
        NodeKind::File | NodeKind::Dir => return Ok(None),
        _ => {}
    }
    remove_at(dir, name, path)?;
    let fd = dir.as_raw_fd();
    // SAFETY (all three): valid descriptor and NUL-terminated strings.
    let rc = match node.kind {
        NodeKind::Symlink => {
            let target = super::dirfd::cname(node.target.as_deref().unwrap_or_default())?;
            unsafe { libc::symlinkat(target.as_ptr(), fd, name.as_ptr()) }
        }
        NodeKind::Fifo => unsafe { libc::mkfifoat(fd, name.as_ptr(), mode(node) & 0o777) },
        // Only the file type and permission bits: no setuid device appears
        // before its owner is set.
        _ => unsafe {
            libc::mknodat(
                fd,
                name.as_ptr(),
                (node.mode as libc::mode_t & libc::S_IFMT) | (mode(node) & 0o777),
                node.rdev as libc::dev_t,
            )
        },
    };
    if rc != 0 {
        return Err(os_err("creating", path));
    }
    Ok(None)
}

/// Applies owner (as root), mode, extended attributes and mtime to an open
/// file or directory; attributes the target refuses go to `warnings`.
pub fn apply_fd(
    file: &impl AsRawFd,
    node: &Node,
    path: &Path,
    warnings: &mut Vec<String>,
) -> Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY (all three): a valid open descriptor.
    if is_root() && unsafe { libc::fchown(fd, node.uid, node.gid) } != 0 {
        return Err(os_err("setting the owner of", path));
    }
    if unsafe { libc::fchmod(fd, mode(node)) } != 0 {
        return Err(os_err("setting the mode of", path));
    }
    crate::xattrs::write_fd(file, &node.xattrs, path, warnings);
    let t = times(node);
    if unsafe { libc::futimens(fd, t.as_ptr()) } != 0 {
        return Err(os_err("setting the times of", path));
    }
    Ok(())
}

/// Applies owner (as root), mode (not for symlinks), extended attributes
/// and mtime to `name` in `dir` without following a symlink. Used for the
/// entries that cannot be opened (symlinks, fifos, devices); the restore
/// created them a moment ago in a directory that only the restoring user
/// can write to. Attributes the target refuses go to `warnings`.
pub fn apply_at(
    dir: &OwnedFd,
    name: &CStr,
    node: &Node,
    path: &Path,
    warnings: &mut Vec<String>,
) -> Result<()> {
    let fd = dir.as_raw_fd();
    // SAFETY (all): valid descriptor, NUL-terminated name, two timespecs.
    if is_root()
        && unsafe {
            libc::fchownat(
                fd,
                name.as_ptr(),
                node.uid,
                node.gid,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        } != 0
    {
        return Err(os_err("setting the owner of", path));
    }
    if node.kind != NodeKind::Symlink {
        // Linux has no fchmodat that refuses symlinks: check, then change.
        let st = stat_at(dir, name, path)?.ok_or_else(|| {
            Error::io(
                format!("{} vanished", path.display()),
                std::io::ErrorKind::NotFound.into(),
            )
        })?;
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            return Err(Error::Damaged(format!(
                "{} became a symlink during the restore",
                path.display()
            )));
        }
        if unsafe { libc::fchmodat(fd, name.as_ptr(), mode(node), 0) } != 0 {
            return Err(os_err("setting the mode of", path));
        }
    }
    crate::xattrs::write_at(dir, name, &node.xattrs, path, warnings);
    let t = times(node);
    if unsafe { libc::utimensat(fd, name.as_ptr(), t.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(os_err("setting the times of", path));
    }
    Ok(())
}
