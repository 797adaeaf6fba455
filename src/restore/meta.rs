//! Recreating special files and applying metadata (mode, owner, times).

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::{Error, IoContext, Result};
use crate::format::{Node, NodeKind};
use crate::util::is_root;

fn cpath(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::InvalidArgument(format!("path with a NUL byte: {}", path.display())))
}

fn os_err(what: &str, path: &Path) -> Error {
    Error::io(
        format!("{what} {}", path.display()),
        std::io::Error::last_os_error(),
    )
}

/// Creates a symlink, fifo or device. Returns a warning instead when it
/// cannot be recreated here (devices as non-root, sockets).
pub fn create_special(path: &Path, node: &Node) -> Result<Option<String>> {
    if fs::symlink_metadata(path).is_ok() {
        if fs::symlink_metadata(path)
            .map(|m| m.is_dir())
            .unwrap_or(false)
        {
            fs::remove_dir_all(path).ctx(|| format!("replacing {}", path.display()))?;
        } else {
            fs::remove_file(path).ctx(|| format!("replacing {}", path.display()))?;
        }
    }
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).ctx(|| format!("creating {}", parent.display()))?;
    }
    let c = cpath(path)?;
    match node.kind {
        NodeKind::Symlink => {
            let target = node.target.clone().unwrap_or_default();
            std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&target), path)
                .ctx(|| format!("creating symlink {}", path.display()))?;
        }
        NodeKind::Fifo => {
            // SAFETY: c is a valid NUL-terminated path.
            if unsafe { libc::mkfifo(c.as_ptr(), (node.mode & 0o7777) as libc::mode_t) } != 0 {
                return Err(os_err("creating fifo", path));
            }
        }
        NodeKind::CharDevice | NodeKind::BlockDevice => {
            if !is_root() {
                return Ok(Some(format!(
                    "{}: device not recreated (needs root)",
                    path.display()
                )));
            }
            // SAFETY: as above; mode carries the file type bits.
            if unsafe {
                libc::mknod(
                    c.as_ptr(),
                    node.mode as libc::mode_t,
                    node.rdev as libc::dev_t,
                )
            } != 0
            {
                return Err(os_err("creating device", path));
            }
        }
        NodeKind::Socket => return Ok(Some(format!("{}: socket not recreated", path.display()))),
        NodeKind::File | NodeKind::Dir => {}
    }
    Ok(None)
}

/// Applies owner (as root), mode (not for symlinks) and mtime.
pub fn apply(path: &Path, node: &Node) -> Result<()> {
    let c = cpath(path)?;
    if is_root() {
        // SAFETY: valid path; lchown does not follow symlinks.
        if unsafe { libc::lchown(c.as_ptr(), node.uid, node.gid) } != 0 {
            return Err(os_err("setting the owner of", path));
        }
    }
    if node.kind != NodeKind::Symlink {
        // SAFETY: valid path.
        if unsafe { libc::chmod(c.as_ptr(), (node.mode & 0o7777) as libc::mode_t) } != 0 {
            return Err(os_err("setting the mode of", path));
        }
    }
    let ts = libc::timespec {
        tv_sec: node.mtime_ns.div_euclid(1_000_000_000) as libc::time_t,
        tv_nsec: node.mtime_ns.rem_euclid(1_000_000_000) as _,
    };
    let times = [ts, ts];
    // SAFETY: valid path and a two-element timespec array.
    if unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    } != 0
    {
        return Err(os_err("setting the times of", path));
    }
    Ok(())
}
