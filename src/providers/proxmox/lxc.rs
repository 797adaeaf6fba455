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
    for entry in archive.entries().map_err(err)? {
        crate::util::check_interrupted()?;
        let mut entry = entry.map_err(err)?;
        bytes += entry.header().size().unwrap_or(0);
        entries += 1;
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
    Ok(Unpacked { entries, bytes })
}
