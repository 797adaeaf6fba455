//! Small helpers: host and user names, times, and the interrupt flag.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static SIGNALS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Counts a SIGINT/SIGTERM for `vouch serve`, which stops gracefully on
/// the first (running jobs get a grace period) and at once on the second.
pub fn note_signal() {
    if SIGNALS.fetch_add(1, Ordering::SeqCst) >= 1 {
        set_interrupted();
    }
}

/// How many SIGINT/SIGTERM `vouch serve` got.
pub fn signals() -> usize {
    SIGNALS.load(Ordering::SeqCst)
}

/// Marks the process as interrupted (called from the signal handler).
pub fn set_interrupted() {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Whether SIGINT/SIGTERM arrived.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Returns `Err(Interrupted)` once a signal arrived.
pub fn check_interrupted() -> crate::Result<()> {
    if interrupted() {
        Err(crate::Error::Interrupted)
    } else {
        Ok(())
    }
}

/// Threads for I/O-bound parallel work (reading sources or packs): the
/// requested number, or two per core between 2 and 8 (several reads in
/// flight keep a cold disk busy; more only add memory).
pub fn io_threads(requested: usize) -> usize {
    if requested > 0 {
        return requested;
    }
    std::thread::available_parallelism()
        .map(|n| n.get() * 2)
        .unwrap_or(4)
        .clamp(2, 8)
}

/// Now in ns since the epoch.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Formats ns since the epoch as RFC 3339 UTC.
pub fn rfc3339(ns: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns))
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| ns.to_string())
}

/// Formats ns since the epoch as `YYYY-MM-DD HH:MM:SS` UTC.
pub fn short_time(ns: i64) -> String {
    let fmt = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns))
        .ok()
        .and_then(|t| t.format(&fmt).ok())
        .unwrap_or_else(|| ns.to_string())
}

/// Now as RFC 3339 UTC.
pub fn now_rfc3339() -> String {
    rfc3339(now_ns())
}

/// This machine's host name.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into our buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The current user's name (or uid).
pub fn user_name() -> String {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    users::user_name(uid).unwrap_or_else(|| uid.to_string())
}

/// Whether the process runs as root.
pub fn is_root() -> bool {
    // The effective user never changes in this process: asked once (a
    // restore asks for every file).
    static ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: geteuid cannot fail.
    *ROOT.get_or_init(|| unsafe { libc::geteuid() == 0 })
}

/// User and group name lookups.
pub mod users {
    use std::ffi::CStr;

    fn lookup(id: u32, group: bool) -> Option<String> {
        let mut buf = vec![0u8; 16 * 1024];
        if group {
            let mut grp: libc::group = unsafe { std::mem::zeroed() };
            let mut out: *mut libc::group = std::ptr::null_mut();
            // SAFETY: all pointers are to live, correctly sized buffers.
            let rc = unsafe {
                libc::getgrgid_r(id, &mut grp, buf.as_mut_ptr().cast(), buf.len(), &mut out)
            };
            if rc != 0 || out.is_null() {
                return None;
            }
            // SAFETY: on success gr_name points into buf, NUL-terminated.
            Some(
                unsafe { CStr::from_ptr(grp.gr_name) }
                    .to_string_lossy()
                    .into_owned(),
            )
        } else {
            let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
            let mut out: *mut libc::passwd = std::ptr::null_mut();
            // SAFETY: as above.
            let rc = unsafe {
                libc::getpwuid_r(id, &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut out)
            };
            if rc != 0 || out.is_null() {
                return None;
            }
            // SAFETY: on success pw_name points into buf, NUL-terminated.
            Some(
                unsafe { CStr::from_ptr(pwd.pw_name) }
                    .to_string_lossy()
                    .into_owned(),
            )
        }
    }

    /// Name of a uid.
    pub fn user_name(uid: u32) -> Option<String> {
        lookup(uid, false)
    }

    /// Name of a gid.
    pub fn group_name(gid: u32) -> Option<String> {
        lookup(gid, true)
    }
}

/// A byte count as people write it: `500`, `64K`, `10MiB`, `2g`, `1.5G`
/// (binary multiples whatever the spelling, as restic's
/// `--exclude-larger-than` reads them).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "{s:?} is not a size (examples: 500, 64K, 10MiB, 2G)"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a size (examples: 500, 64K, 10MiB, 2G)"))?;
    let bytes = value * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes >= u64::MAX as f64 {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(bytes as u64)
}

/// Major number of a Linux device number (glibc's `gnu_dev_major`).
pub fn dev_major(dev: u64) -> u64 {
    ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0000_0fff)
}

/// Minor number of a Linux device number (glibc's `gnu_dev_minor`).
pub fn dev_minor(dev: u64) -> u64 {
    ((dev >> 12) & 0xffff_ff00) | (dev & 0x0000_00ff)
}

/// Human-readable byte count (binary units).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

#[cfg(test)]
mod size_tests {
    use super::parse_size;

    #[test]
    fn device_numbers_split_as_glibc_does() {
        use super::{dev_major, dev_minor};
        // /dev/sda1 is 8,1; /dev/null 1,3; a large one (major 259, minor 70000).
        assert_eq!((dev_major(0x801), dev_minor(0x801)), (8, 1));
        assert_eq!((dev_major(0x103), dev_minor(0x103)), (1, 3));
        let big = libc::makedev(259, 70000);
        assert_eq!((dev_major(big), dev_minor(big)), (259, 70000));
    }

    #[test]
    fn sizes_as_people_write_them() {
        assert_eq!(parse_size("500"), Ok(500));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("10MiB"), Ok(10 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size(" 3 TB "), Ok(3 << 40));
        for bad in ["", "K", "12X", "-1", "1e3", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }
}

/// Returns the allocator's free pages to the system (glibc keeps what a
/// large job freed, spread over its arenas, until told; the resident size
/// of a long-running service then stays at its largest job's). Nothing
/// elsewhere.
pub fn return_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: no arguments but a padding size; glibc's own locking.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Threads of [`remove_dir_all_parallel`]: deleting is bound by the
/// latency of the file system's metadata updates, not by the cores (a
/// restore test's sandbox of 250,000 files on this project's 2-core test
/// machine: 23.3 s on one thread, 11.9 s on 4, 9.6 s on 8).
const REMOVE_THREADS: usize = 8;

/// Removes the directory `root` and everything in it, as
/// [`std::fs::remove_dir_all`] does (never following a symlink), on
/// several threads: the entries of its first directory that holds more
/// than one entry (below the chain of single directories a restore of an
/// absolute path makes), split a level further while they are fewer than
/// the threads' work, are removed in parallel, then the rest. A tree that
/// is not there is no error.
pub fn remove_dir_all_parallel(root: &Path) -> std::io::Result<()> {
    let entries = |dir: &Path| -> std::io::Result<Vec<(PathBuf, bool)>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            out.push((e.path(), e.file_type()?.is_dir()));
        }
        Ok(out)
    };
    match std::fs::symlink_metadata(root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(m) if !m.is_dir() => return std::fs::remove_file(root),
        Ok(_) => {}
    }
    // Down the chain of single directories.
    let mut units = entries(root)?;
    while let [(only, true)] = units.as_slice() {
        let only = only.clone();
        units = entries(&only)?;
    }
    // A level further while there is too little to share.
    for _ in 0..3 {
        if units.len() >= REMOVE_THREADS * 4 || !units.iter().any(|(_, dir)| *dir) {
            break;
        }
        let mut next = Vec::new();
        for (path, dir) in units {
            if dir {
                next.extend(entries(&path)?);
            } else {
                next.push((path, false));
            }
        }
        units = next;
    }
    let at = std::sync::atomic::AtomicUsize::new(0);
    let failure: std::sync::Mutex<Option<std::io::Error>> = std::sync::Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..REMOVE_THREADS.min(units.len()) {
            s.spawn(|| loop {
                let i = at.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((path, dir)) = units.get(i) else {
                    return;
                };
                let removed = if *dir {
                    std::fs::remove_dir_all(path)
                } else {
                    std::fs::remove_file(path)
                };
                match removed {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        if let Ok(mut f) = failure.lock() {
                            f.get_or_insert(e);
                        }
                        return;
                    }
                    _ => {}
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e);
    }
    std::fs::remove_dir_all(root)
}

#[cfg(test)]
mod remove_tests {
    use super::remove_dir_all_parallel;
    use std::fs;
    use std::os::unix::fs::symlink;

    /// The whole tree goes (below a chain of single directories, with
    /// directories split a level further and files among them), a symlink
    /// in it is removed and not followed, and nothing outside is touched.
    #[test]
    fn a_tree_is_removed_in_parallel_without_following_symlinks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = dir.path().join("outside");
        fs::create_dir(&outside).expect("outside");
        fs::write(outside.join("keep"), b"keep").expect("keep");
        let root = dir.path().join("sandbox");
        let wide = root.join("var/tmp/data");
        for d in 0..5 {
            for e in 0..3 {
                let sub = wide.join(format!("d{d}/e{e}"));
                fs::create_dir_all(&sub).expect("sub");
                for f in 0..4 {
                    fs::write(sub.join(format!("f{f}")), b"x").expect("file");
                }
            }
            fs::write(wide.join(format!("file{d}")), b"y").expect("file");
        }
        symlink(&outside, wide.join("d0/link-out")).expect("symlink");
        symlink(&outside, root.join("var/top-link")).expect("symlink");
        remove_dir_all_parallel(&root).expect("removed");
        assert!(!root.exists());
        assert_eq!(fs::read(outside.join("keep")).expect("kept"), b"keep");
        // Gone already, or a file: no error, and the file goes.
        remove_dir_all_parallel(&root).expect("nothing there");
        let file = dir.path().join("file");
        fs::write(&file, b"z").expect("file");
        remove_dir_all_parallel(&file).expect("a file");
        assert!(!file.exists());
    }
}
