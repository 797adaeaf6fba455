//! Kernel pseudo file systems (`/proc`, `/sys`, cgroups, ...): their
//! directories are kept in a snapshot, their contents are not. Their files
//! are views of kernel state, not data: restoring them is meaningless, and
//! reading them can be endless or huge (`/proc/kcore` claims the size of
//! the address space). A source that *is* such a file system is still read
//! as asked; only crossing into one on the way is skipped.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `f_type` magic numbers (linux/magic.h) of file systems whose contents
/// are never backed up when a walk crosses into them.
const PSEUDO: &[(i64, &str)] = &[
    (0x9fa0, "proc"),
    (0x6265_6572, "sysfs"),
    (0x1cd1, "devpts"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0x6165_676c, "pstore"),
    (0xcafe_4a11, "bpf"),
    (0x6265_6570, "configfs"),
    (0x6573_5543, "fusectl"),
    (0x1980_0202, "mqueue"),
    (0x4249_4e4d, "binfmt_misc"),
    (0xde5e_81e4, "efivarfs"),
    (0x6e73_6673, "nsfs"),
    (0x0187, "autofs"),
];

/// The name of the pseudo file system `path` is on, if it is on one.
/// Anything that cannot be asked (the path vanished, a NUL in it) is not
/// one: the walk then reads it as usual and reports what fails.
pub fn pseudo_fs_of(path: &Path) -> Option<&'static str> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string and `buf` is a plain
    // C struct that statfs fills in; both outlive the call.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut buf) };
    if rc != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs by target
    let magic = buf.f_type as i64;
    PSEUDO.iter().find(|(m, _)| *m == magic).map(|(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_and_sys_are_pseudo_and_a_temporary_directory_is_not() {
        if Path::new("/proc/self").exists() {
            assert_eq!(pseudo_fs_of(Path::new("/proc")), Some("proc"));
        }
        if Path::new("/sys/kernel").exists() {
            assert_eq!(pseudo_fs_of(Path::new("/sys")), Some("sysfs"));
        }
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(pseudo_fs_of(dir.path()), None);
        assert_eq!(pseudo_fs_of(&dir.path().join("missing")), None);
    }
}
