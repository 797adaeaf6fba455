//! The Linux immutable attribute (`chattr +i`, `FS_IMMUTABLE_FL`): a file
//! with it cannot be changed, renamed over or deleted, by anyone, until
//! someone with `CAP_LINUX_IMMUTABLE` (root) clears it. ext4, xfs, btrfs and
//! f2fs have it.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// `FS_IMMUTABLE_FL` of `<linux/fs.h>`.
const FS_IMMUTABLE_FL: libc::c_int = 0x0000_0010;

fn flags(f: &File) -> io::Result<libc::c_int> {
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one int through the valid pointer.
    if unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags)
}

/// Whether `path` has the immutable attribute.
pub fn is_immutable(path: &Path) -> io::Result<bool> {
    Ok(flags(&File::open(path)?)? & FS_IMMUTABLE_FL != 0)
}

/// Sets (`on`) or clears the immutable attribute of `path`; returns
/// whether it changed.
pub fn set_immutable(path: &Path, on: bool) -> io::Result<bool> {
    let f = File::open(path)?;
    let old = flags(&f)?;
    let new = if on {
        old | FS_IMMUTABLE_FL
    } else {
        old & !FS_IMMUTABLE_FL
    };
    if new == old {
        return Ok(false);
    }
    // SAFETY: FS_IOC_SETFLAGS reads one int through the valid pointer.
    if unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_SETFLAGS, &new) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(true)
}
