//! Staging directories for guests on their way into or out of a snapshot:
//! below `$VOUCH_STAGING_DIR`, else `staging/` in the cache directory, else
//! the system's temporary directory; removed when dropped, also after an
//! error.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Where staging directories go.
pub fn staging_base(cache: Option<PathBuf>) -> PathBuf {
    std::env::var_os("VOUCH_STAGING_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| cache.map(|c| c.join("staging")))
        .unwrap_or_else(std::env::temp_dir)
}

/// A fresh directory below a base, removed when dropped.
pub struct Staging(PathBuf);

impl Staging {
    /// Creates it (and the base).
    pub fn new(base: &Path) -> Result<Staging> {
        std::fs::create_dir_all(base).map_err(|e| Error::io(base.display().to_string(), e))?;
        let name = format!(
            "vouch-pve-{}-{}",
            std::process::id(),
            hex::encode(crate::crypto::random_array::<6>())
        );
        let dir = base.join(name);
        std::fs::create_dir(&dir).map_err(|e| Error::io(dir.display().to_string(), e))?;
        Ok(Staging(dir))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            tracing::warn!(dir = %self.0.display(), error = %e, "could not remove a staging directory");
        }
    }
}
