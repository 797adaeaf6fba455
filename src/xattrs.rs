//! Extended attributes: read by a backup, written back by a restore. POSIX
//! ACLs (`system.posix_acl_access`, `system.posix_acl_default`), file
//! capabilities (`security.capability`) and SELinux labels
//! (`security.selinux`) are extended attributes too, so one mechanism keeps
//! them all, raw as the kernel gives them (docs/format.md, "Extended
//! attributes").

use std::ffi::{CStr, OsStr};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use xattr::FileExt as _;

use crate::format::Xattr;

/// Whether `e` says the file system keeps no extended attributes.
fn unsupported(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EOPNOTSUPP)
}

/// Every extended attribute of `path` (a symlink's own, never its
/// target's) that this process may read, sorted by name; and what could
/// not be read, as warnings naming the file and the attribute. A file
/// system without extended attributes gives none and no warning; an
/// attribute removed between listing and reading is skipped.
pub fn read(path: &Path) -> (Vec<Xattr>, Vec<String>) {
    let names = match xattr::list(path) {
        Ok(names) => names,
        Err(e) if unsupported(&e) => return (Vec::new(), Vec::new()),
        Err(e) => {
            return (
                Vec::new(),
                vec![format!(
                    "{}: extended attributes not read: {e}",
                    path.display()
                )],
            )
        }
    };
    let mut attrs = Vec::new();
    let mut warnings = Vec::new();
    for name in names {
        match xattr::get(path, &name) {
            Ok(Some(value)) => attrs.push(Xattr {
                name: name.as_bytes().to_vec(),
                value,
            }),
            Ok(None) => {}
            Err(e) => warnings.push(format!(
                "{}: extended attribute {} not read: {e}",
                path.display(),
                name.to_string_lossy()
            )),
        }
    }
    attrs.sort_by(|a, b| a.name.cmp(&b.name));
    (attrs, warnings)
}

/// An open descriptor, for `xattr`'s descriptor calls.
struct Fd(RawFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

impl xattr::FileExt for Fd {}

fn warning(path: &Path, attr: &Xattr, e: &io::Error) -> String {
    format!(
        "{}: extended attribute {} not restored: {e}",
        path.display(),
        String::from_utf8_lossy(&attr.name)
    )
}

/// Sets `attrs` on the open file or directory `fd` (after its owner and
/// mode: `chown` clears `security.capability`, and an access ACL must
/// come after `chmod`, which would rewrite its mask). What the target
/// refuses (a file system without attributes, `security.` or `trusted.`
/// as another user than root) becomes a warning naming the file and the
/// attribute; the restore goes on.
pub fn write_fd(fd: &impl AsRawFd, attrs: &[Xattr], path: &Path, warnings: &mut Vec<String>) {
    let fd = Fd(fd.as_raw_fd());
    for a in attrs {
        if let Err(e) = fd.set_xattr(OsStr::from_bytes(&a.name), &a.value) {
            warnings.push(warning(path, a, &e));
        }
    }
}

/// Sets `attrs` on the entry `name` of the directory `dir` without
/// following it if it is a symlink (through `/proc/self/fd`, so the
/// directory is the one the restore holds open, whatever its path became);
/// refusals as [`write_fd`].
pub fn write_at(
    dir: &impl AsRawFd,
    name: &CStr,
    attrs: &[Xattr],
    path: &Path,
    warnings: &mut Vec<String>,
) {
    if attrs.is_empty() {
        return;
    }
    let mut at = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    at.push(OsStr::from_bytes(name.to_bytes()));
    for a in attrs {
        if let Err(e) = xattr::set(&at, OsStr::from_bytes(&a.name), &a.value) {
            warnings.push(warning(path, a, &e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `user.` attributes of a file and a directory come back sorted and
    /// byte-exact (binary values too), and a symlink's are its own.
    #[test]
    fn attributes_are_read_sorted_and_written_back() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        if let Err(e) = xattr::set(&file, "user.zeta", b"last") {
            eprintln!("skipped: the temporary directory keeps no user attributes ({e})");
            return;
        }
        xattr::set(&file, "user.alpha", &[0, 1, 2, 255]).unwrap();
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let (attrs, warnings) = read(&file);
        assert!(warnings.is_empty(), "{warnings:?}");
        let names: Vec<&[u8]> = attrs.iter().map(|a| a.name.as_slice()).collect();
        assert_eq!(names, [b"user.alpha".as_slice(), b"user.zeta"]);
        assert_eq!(attrs[0].value, [0, 1, 2, 255]);
        // The link's own attributes: none (not its target's).
        assert!(read(&link).0.is_empty());

        let copy = dir.path().join("copy");
        let f = std::fs::File::create(&copy).unwrap();
        let mut warnings = Vec::new();
        write_fd(&f, &attrs, &copy, &mut warnings);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(read(&copy).0, attrs);

        // Through the directory's descriptor, by name.
        let other = dir.path().join("other");
        std::fs::write(&other, b"y").unwrap();
        let d = std::fs::File::open(dir.path()).unwrap();
        let name = std::ffi::CString::new("other").unwrap();
        write_at(&d, &name, &attrs, &other, &mut warnings);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(read(&other).0, attrs);

        // What the target refuses is a warning naming the attribute.
        let refused = [Xattr {
            name: b"nonsense.attr".to_vec(),
            value: b"v".to_vec(),
        }];
        write_fd(&f, &refused, &copy, &mut warnings);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("nonsense.attr"), "{warnings:?}");
    }
}
