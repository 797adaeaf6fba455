//! Restoring relative to directory file descriptors. The target is opened
//! once; every directory below it is opened with `openat(O_NOFOLLOW |
//! O_DIRECTORY)` relative to its parent's descriptor, and every entry is
//! created, replaced and changed through its parent's descriptor by name.
//! No path below the target is ever resolved by the kernel from the top, so
//! no symlink in the target (planted or restored) is followed.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

/// Open directory descriptors kept at most (the soft limit of open files is
/// often 1024); beyond it the cache is emptied and refilled as needed.
const MAX_CACHED: usize = 256;

/// Flags of every directory open.
const DIR_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// The last OS error, with what was being done to which path.
pub fn os_err(what: &str, path: &Path) -> Error {
    Error::io(
        format!("{what} {}", path.display()),
        std::io::Error::last_os_error(),
    )
}

/// A name as a C string (names are checked to hold no NUL byte, so this
/// fails only for a bug).
pub fn cname(name: &[u8]) -> Result<CString> {
    CString::new(name).map_err(|_| Error::Damaged(format!("a name with a NUL byte: {name:?}")))
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`; `None` if nothing is there.
pub fn stat_at(dir: &OwnedFd, name: &CStr, path: &Path) -> Result<Option<libc::stat>> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor, NUL-terminated name, stat buffer.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc == 0 {
        return Ok(Some(st));
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOENT) => Ok(None),
        _ => Err(os_err("examining", path)),
    }
}

/// `fstat` of an open descriptor.
pub fn stat_fd(fd: &impl AsRawFd, path: &Path) -> Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor and stat buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(os_err("examining", path));
    }
    Ok(st)
}

/// Whether a stat describes a directory (or a regular file).
pub fn is_dir(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// Whether a stat describes a regular file.
pub fn is_file(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
}

/// `openat(dir, name, flags)`, never following a final symlink.
pub fn open_at(
    dir: &OwnedFd,
    name: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
    path: &Path,
) -> Result<OwnedFd> {
    // SAFETY: valid descriptor and NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            libc::c_uint::from(mode),
        )
    };
    if fd < 0 {
        return Err(os_err("opening", path));
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens a directory below `dir` without following a symlink.
pub fn open_dir_at(dir: &OwnedFd, name: &CStr, path: &Path) -> Result<OwnedFd> {
    open_at(dir, name, DIR_FLAGS, 0, path)
}

/// Opens a file below `dir` (no symlink followed) and checks that it is
/// the inode `(dev, ino)` this restore created.
pub fn open_file_at(
    dir: &OwnedFd,
    name: &CStr,
    flags: libc::c_int,
    expect: (u64, u64),
    path: &Path,
) -> Result<File> {
    let fd = open_at(dir, name, flags, 0, path)?;
    let st = stat_fd(&fd, path)?;
    if (st.st_dev, st.st_ino) != expect || !is_file(&st) {
        return Err(Error::Damaged(format!(
            "{} was replaced by something else during the restore",
            path.display()
        )));
    }
    Ok(File::from(fd))
}

/// `unlinkat(dir, name, flags)`.
pub fn unlink_at(dir: &OwnedFd, name: &CStr, flags: libc::c_int, path: &Path) -> Result<()> {
    // SAFETY: valid descriptor and NUL-terminated name.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) } != 0 {
        return Err(os_err("removing", path));
    }
    Ok(())
}

/// Removes whatever is at `name` below `dir`: a directory with everything in
/// it (through descriptors, never following a symlink), or anything else.
pub fn remove_at(dir: &OwnedFd, name: &CStr, path: &Path) -> Result<()> {
    match stat_at(dir, name, path)? {
        None => Ok(()),
        Some(st) if is_dir(&st) => {
            let sub = open_dir_at(dir, name, path)?;
            for child in list(&sub, path)? {
                remove_at(&sub, &child, &path.join(child_os(&child)))?;
            }
            drop(sub);
            unlink_at(dir, name, libc::AT_REMOVEDIR, path)
        }
        Some(_) => unlink_at(dir, name, 0, path),
    }
}

fn child_os(name: &CStr) -> &std::ffi::OsStr {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::OsStr::from_bytes(name.to_bytes())
}

/// The names in an open directory (without `.` and `..`).
pub fn list(dir: &OwnedFd, path: &Path) -> Result<Vec<CString>> {
    // fdopendir takes ownership of its descriptor: give it a duplicate.
    // SAFETY: valid descriptor.
    let dup = unsafe { libc::fcntl(dir.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(os_err("listing", path));
    }
    // SAFETY: `dup` is ours; on success the DIR owns it.
    let d = unsafe { libc::fdopendir(dup) };
    if d.is_null() {
        // SAFETY: fdopendir failed, so `dup` is still ours to close.
        unsafe { libc::close(dup) };
        return Err(os_err("listing", path));
    }
    let mut names = Vec::new();
    loop {
        // SAFETY: `d` is a valid DIR stream; the entry is read before the next call.
        let e = unsafe { libc::readdir(d) };
        if e.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated within the entry.
        let name = unsafe { CStr::from_ptr((*e).d_name.as_ptr()) };
        if name.to_bytes() != b"." && name.to_bytes() != b".." {
            names.push(name.to_owned());
        }
    }
    // SAFETY: closes the stream and its descriptor once.
    unsafe { libc::closedir(d) };
    Ok(names)
}

/// Descriptors of the target's directories, by path relative to the target
/// (`b""` is the target itself), shared by the writer threads.
pub struct Dirs {
    root: Arc<OwnedFd>,
    target: PathBuf,
    cache: Mutex<HashMap<Vec<u8>, Arc<OwnedFd>>>,
}

impl Dirs {
    /// Opens the target (which must exist).
    pub fn open(target: &Path) -> Result<Dirs> {
        let c = cname(std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str()))
            .map_err(|_| Error::InvalidArgument(format!("target {target:?} holds a NUL byte")))?;
        // SAFETY: NUL-terminated path. The target itself is the user's
        // choice and may be reached through a symlink; nothing below is.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(os_err("opening", target));
        }
        Ok(Dirs {
            // SAFETY: a fresh descriptor that nothing else owns.
            root: Arc::new(unsafe { OwnedFd::from_raw_fd(fd) }),
            target: target.to_path_buf(),
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The target's descriptor.
    pub fn root(&self) -> &OwnedFd {
        &self.root
    }

    /// The real path of `rel`, for messages.
    pub fn path(&self, rel: &[u8]) -> PathBuf {
        if rel.is_empty() {
            self.target.clone()
        } else {
            self.target
                .join(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(rel))
        }
    }

    /// The descriptor of directory `rel`, opened component by component
    /// from the nearest cached ancestor, never following a symlink.
    pub fn get(&self, rel: &[u8]) -> Result<Arc<OwnedFd>> {
        if rel.is_empty() {
            return Ok(self.root.clone());
        }
        if let Some(fd) = self.cache.lock().ok().and_then(|c| c.get(rel).cloned()) {
            return Ok(fd);
        }
        let (parent, name) = match rel.iter().rposition(|&b| b == b'/') {
            Some(i) => (&rel[..i], &rel[i + 1..]),
            None => (&rel[..0], rel),
        };
        // Depth is bounded by the walk's cap; each level is one small frame.
        let parent_fd = self.get(parent)?;
        let fd = Arc::new(open_dir_at(&parent_fd, &cname(name)?, &self.path(rel))?);
        if let Ok(mut c) = self.cache.lock() {
            if c.len() >= MAX_CACHED {
                c.clear();
            }
            c.insert(rel.to_vec(), fd.clone());
        }
        Ok(fd)
    }
}
