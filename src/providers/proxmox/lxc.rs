//! A container's vzdump archive (a tar of its root file system, with its
//! configuration in `etc/vzdump/pct.conf`) unpacked into a directory a
//! snapshot can hold: owners (numeric), modes, times, symlinks, hard links,
//! device nodes and extended attributes as the archive has them. Nothing
//! is written outside the directory (entries that would escape it are
//! refused by the tar reader).

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};

/// Where vzdump puts the container's configuration inside the archive.
pub const PCT_CONF: &str = "etc/vzdump/pct.conf";

/// What an unpacking wrote.
#[derive(Clone, Debug)]
pub struct Unpacked {
    /// Entries unpacked.
    pub entries: u64,
    /// Bytes of file content.
    pub bytes: u64,
}

/// Unpacks the container archive read from `input` (`source` names it in
/// errors) into `dir` (empty). Owners are kept when run as root (as the
/// dump storage's reader should be); otherwise the files belong to the
/// caller and the snapshot says so.
pub fn unpack(input: impl Read, source: &Path, dir: &Path) -> Result<Unpacked> {
    let err = |e: std::io::Error| {
        Error::InvalidArgument(format!(
            "{}: not a readable container archive: {e}",
            source.display()
        ))
    };
    let mut archive = tar::Archive::new(input);
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(true);
    archive.set_preserve_mtime(true);
    archive.set_unpack_xattrs(true);
    archive.set_overwrite(false);
    let (mut entries, mut bytes) = (0u64, 0u64);
    // A directory's time is set when its entry is unpacked, and writing
    // its children afterwards moves it to now: the times are set again
    // once everything is in, deepest first (as `tar` itself does).
    let mut dir_times: Vec<(std::path::PathBuf, u64)> = Vec::new();
    for entry in archive.entries().map_err(err)? {
        crate::util::check_interrupted()?;
        let mut entry = entry.map_err(err)?;
        bytes += entry.header().size().unwrap_or(0);
        entries += 1;
        if entry.header().entry_type().is_dir() {
            if let (Ok(path), Ok(mtime)) = (entry.path(), entry.header().mtime()) {
                dir_times.push((path.into_owned(), mtime));
            }
        }
        let unpacked = entry.unpack_in(dir).map_err(err)?;
        if !unpacked {
            return Err(Error::InvalidArgument(format!(
                "{}: entry {:?} would land outside the container's root; the archive is refused",
                source.display(),
                entry
                    .path()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            )));
        }
    }
    if !dir.join(PCT_CONF).is_file() {
        return Err(Error::InvalidArgument(format!(
            "{}: no {PCT_CONF} in the archive: not a vzdump container archive",
            source.display()
        )));
    }
    dir_times.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
    for (path, mtime) in dir_times {
        // Inside the root: `unpack_in` accepted every entry's path.
        let at = dir.join(&path);
        let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime);
        if let Err(e) = std::fs::File::open(&at).and_then(|d| d.set_modified(time)) {
            // A directory this user cannot open (mode 000 when not root):
            // its time is the only thing lost, and the snapshot shows it.
            tracing::warn!(path = %at.display(), error = %e, "cannot set a directory's time from the archive");
        }
    }
    Ok(Unpacked { entries, bytes })
}
