//! Preparing the entries a restore writes into: directories, and regular
//! files that are either fresh, resumed in place, or replaced by rename.
//!
//! A file already in the target is written in place only when it is known
//! to be this restore's own: the resume marker names this snapshot, it is a
//! regular file with one link, and the restoring user owns it (an
//! interrupted restore leaves its files so, since owners are applied at the
//! end). Anything else (a `--overwrite` target, a file hard-linked from
//! elsewhere, another user's file) is never written to: a fresh file is
//! created beside it under a random temporary name with `O_EXCL` and renamed
//! over it, so other links keep their content. Extents that are already in
//! place in the old file are copied across locally instead of fetched.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::dirfd::{cname, is_dir, is_file, open_at, open_file_at, os_err, remove_at, stat_at};
use crate::error::{Error, IoContext, Result};

/// Creates directory `name` in `dir` (owner-only until its metadata is
/// applied), replacing a non-directory in the way. An existing directory is
/// kept.
pub fn make_dir(dir: &OwnedFd, name: &CStr, path: &Path) -> Result<()> {
    if let Some(st) = stat_at(dir, name, path)? {
        if is_dir(&st) {
            return Ok(());
        }
        remove_at(dir, name, path)?;
    }
    // SAFETY: valid descriptor and NUL-terminated name.
    if unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o700) } != 0 {
        return Err(os_err("creating", path));
    }
    Ok(())
}

/// A file ready to receive its extents.
pub struct Prepared {
    /// The file restored into, open read-write (none for a file created
    /// beforehand by [`create_new`]: the writers open it themselves).
    pub file: Option<File>,
    /// Its `(dev, ino)`: every later open checks it.
    pub id: (u64, u64),
    /// Its length now.
    pub len: u64,
    /// Whether `file` still holds earlier data (resumed in place).
    pub in_place: bool,
    /// The replaced file, open read-only, whose extents may be copied over.
    pub old: Option<File>,
}

/// Creates file `name` in `dir`, which must not exist yet (owner-only until
/// its metadata is applied).
pub fn create_new(dir: &OwnedFd, name: &CStr, path: &Path) -> Result<File> {
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
    Ok(File::from(open_at(dir, name, flags, 0o600, path)?))
}

impl Prepared {
    /// A file [`create_new`] made: empty, nothing to keep or copy.
    pub fn created(id: (u64, u64)) -> Prepared {
        Prepared {
            file: None,
            id,
            len: 0,
            in_place: false,
            old: None,
        }
    }
}

/// The `(dev, ino)` of an open file.
pub fn file_id(f: &File, path: &Path) -> Result<(u64, u64)> {
    let st = super::dirfd::stat_fd(f, path)?;
    Ok((st.st_dev, st.st_ino))
}

/// Prepares file `name` in `dir`. `resume` says the marker names this
/// restore (so a file of ours may be continued in place); `existing` says
/// the target may hold earlier content at all (resume or `--overwrite`).
pub fn prepare_file(
    dir: &OwnedFd,
    name: &CStr,
    path: &Path,
    resume: bool,
    existing: bool,
) -> Result<Prepared> {
    let st = if existing {
        stat_at(dir, name, path)?
    } else {
        None
    };
    // A new, empty file to write, with the old inode to copy good extents from.
    let new_file = |file: File, old: Option<File>| -> Result<Prepared> {
        let id = file_id(&file, path)?;
        Ok(Prepared {
            file: Some(file),
            id,
            len: 0,
            in_place: false,
            old,
        })
    };
    let fresh = |old: Option<File>| new_file(create_new(dir, name, path)?, old);
    let Some(st) = st else {
        return fresh(None);
    };
    if !is_file(&st) {
        remove_at(dir, name, path)?;
        return fresh(None);
    }
    let id = (st.st_dev, st.st_ino);
    // SAFETY: geteuid cannot fail.
    let ours = resume && st.st_nlink == 1 && st.st_uid == unsafe { libc::geteuid() };
    if ours {
        // A file the interrupted restore finished already has its mode,
        // which may forbid writing: then it is replaced like a stranger's.
        match open_file_at(dir, name, libc::O_RDWR, id, path) {
            Ok(file) => {
                return Ok(Prepared {
                    file: Some(file),
                    id,
                    len: st.st_size as u64,
                    in_place: true,
                    old: None,
                })
            }
            Err(e) if denied(&e) => {}
            Err(e) => return Err(e),
        }
    }
    // Someone else's inode: read it, never write it. A fresh file takes its
    // name by rename; the old inode lives on under its other links. One
    // that cannot even be read is replaced without copying anything.
    let old = match open_file_at(dir, name, libc::O_RDONLY, id, path) {
        Ok(f) => Some(f),
        Err(e) if denied(&e) => None,
        Err(e) => return Err(e),
    };
    let tmp = temp_name()?;
    let tmp_path = path.with_file_name(tmp.to_string_lossy().as_ref());
    let file = create_new(dir, &tmp, &tmp_path)?;
    // SAFETY: valid descriptors and NUL-terminated names.
    if unsafe {
        libc::renameat(
            dir.as_raw_fd(),
            tmp.as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
        )
    } != 0
    {
        let err = os_err("replacing", path);
        // SAFETY: as above.
        unsafe { libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0) };
        return Err(err);
    }
    new_file(file, old)
}

/// Whether an error is the kernel refusing access (`EACCES`, `EPERM`).
fn denied(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. }
        if matches!(source.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)))
}

/// A random name for a temporary file (`.vouch-tmp-<hex>`).
fn temp_name() -> Result<CString> {
    let r: [u8; 8] = crate::crypto::random_array();
    let hex: String = r.iter().map(|b| format!("{b:02x}")).collect();
    cname(format!(".vouch-tmp-{hex}").as_bytes())
}

/// Copies `length` bytes at `offset` from `from` to `to`.
pub fn copy_range(from: &File, to: &File, offset: u64, length: u64, path: &Path) -> Result<()> {
    let mut buf = vec![0u8; (length as usize).min(1 << 20)];
    let mut done = 0u64;
    while done < length {
        let n = ((length - done) as usize).min(buf.len());
        from.read_exact_at(&mut buf[..n], offset + done)
            .ctx(|| format!("reading the old {}", path.display()))?;
        to.write_all_at(&buf[..n], offset + done)
            .ctx(|| format!("writing {}", path.display()))?;
        done += n as u64;
    }
    Ok(())
}

/// Links `name` in `dir` to the file `first_name` in `first_dir`, which must
/// be the inode `id` this restore wrote; what is in the way is removed. An
/// entry that already is that inode is kept.
pub fn link(
    first_dir: &OwnedFd,
    first_name: &CStr,
    dir: &OwnedFd,
    name: &CStr,
    id: (u64, u64),
    path: &Path,
) -> Result<()> {
    if let Some(st) = stat_at(dir, name, path)? {
        if (st.st_dev, st.st_ino) == id {
            return Ok(());
        }
        remove_at(dir, name, path)?;
    }
    match stat_at(first_dir, first_name, path)? {
        Some(st) if (st.st_dev, st.st_ino) == id && is_file(&st) => {}
        _ => {
            return Err(Error::Damaged(format!(
                "the file {} is to be linked to was replaced during the restore",
                path.display()
            )))
        }
    }
    // SAFETY: valid descriptors and NUL-terminated names; flags 0: a
    // symlink is never followed.
    if unsafe {
        libc::linkat(
            first_dir.as_raw_fd(),
            first_name.as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            0,
        )
    } != 0
    {
        return Err(os_err("linking", path));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Drops `CAP_DAC_OVERRIDE` and `CAP_DAC_READ_SEARCH` from the calling
    /// thread only (capabilities are per thread in Linux): root then meets
    /// file modes like any user.
    fn drop_dac_override_in_this_thread() {
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let mut h = Header {
            version: 0x2008_0522,
            pid: 0,
        };
        let mut d = [Data::default(); 2];
        // SAFETY: header and two data structs, as capget/capset version 3 want.
        unsafe {
            assert_eq!(libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()), 0);
            // Bits 1 and 2 of linux/capability.h.
            const CAP_DAC_OVERRIDE: u32 = 1;
            const CAP_DAC_READ_SEARCH: u32 = 2;
            d[0].effective &= !((1 << CAP_DAC_OVERRIDE) | (1 << CAP_DAC_READ_SEARCH));
            assert_eq!(libc::syscall(libc::SYS_capset, &mut h, d.as_ptr()), 0);
        }
    }

    /// A file an interrupted restore had finished already carries its mode;
    /// a read-only one cannot be continued in place, and resuming replaced
    /// it instead of failing with "Permission denied".
    #[test]
    fn resuming_over_a_finished_read_only_file_replaces_it() {
        if !crate::util::is_root() {
            eprintln!("skipped: needs root (to own the file and drop only the override)");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("done.txt");
        std::fs::write(&path, b"restored before the interruption").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
        let dirs = super::super::dirfd::Dirs::open(tmp.path()).unwrap();
        let name = cname(b"done.txt").unwrap();
        let p = std::thread::scope(|s| {
            s.spawn(|| {
                drop_dac_override_in_this_thread();
                prepare_file(dirs.root(), &name, &path, true, true)
            })
            .join()
            .unwrap()
        })
        .expect("resuming over a read-only file of ours");
        assert!(!p.in_place, "a read-only file cannot be written in place");
        let old = p
            .old
            .expect("the finished file is read to copy its extents");
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut &old, &mut buf).unwrap();
        assert_eq!(buf, b"restored before the interruption");
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            0,
            "a fresh file took the name"
        );
    }
}
