//! When and from where each token was last used: kept in memory on every
//! authenticated request, written to a file beside the token file when it
//! changed (every [`USAGE_FLUSH_EVERY`] and when the server stops), and
//! shown by `vouch token list`. A token nobody uses any more is one to
//! revoke; a token used from an unexpected address is one to look into.
//!
//! The file is a record for the administrator, not a contract: a damaged
//! or missing file starts over empty (with a warning), and nothing is
//! decided from it.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// How often a changed record is written.
pub const USAGE_FLUSH_EVERY: Duration = Duration::from_secs(5);

/// The file's name, beside `tokens.json`.
pub const USAGE_FILE: &str = "tokens.last-used.json";

/// A token's last use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastUse {
    /// Unix seconds.
    pub at: i64,
    /// The client address, when the connection had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

#[derive(Serialize, Deserialize, Default)]
struct UsageFile {
    /// By token name.
    tokens: BTreeMap<String, LastUse>,
}

/// The last use of every token, by name.
#[derive(Debug, Default)]
pub struct TokenUsage {
    file: Option<PathBuf>,
    seen: Mutex<BTreeMap<String, LastUse>>,
    dirty: AtomicBool,
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl TokenUsage {
    /// A record kept in `file`, starting from what it holds.
    pub fn at(file: impl Into<PathBuf>) -> Self {
        let file = file.into();
        let seen = read(&file);
        TokenUsage {
            file: Some(file),
            seen: Mutex::new(seen),
            dirty: AtomicBool::new(false),
        }
    }

    /// `name` was used now, from `from`. Cheap: memory only; a use within
    /// the same second from the same address changes nothing.
    pub fn record(&self, name: &str, from: Option<IpAddr>) {
        let now = LastUse {
            at: unix_now(),
            from: from.map(|ip| ip.to_string()),
        };
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.get(name) != Some(&now) {
            seen.insert(name.to_owned(), now);
            self.dirty.store(true, Ordering::Release);
        }
    }

    /// The last use of `name`, as recorded so far.
    pub fn last_use(&self, name: &str) -> Option<LastUse> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// Writes the record if it changed since the last write (a new file
    /// renamed over the old one, private to the service's user).
    pub fn flush(&self) -> std::io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let body = UsageFile {
            tokens: self
                .seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        };
        let written = write(file, &body);
        if written.is_err() {
            // Tried again at the next flush.
            self.dirty.store(true, Ordering::Release);
        }
        written
    }
}

impl Drop for TokenUsage {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::warn!(error = %e, "the tokens' last uses could not be written");
        }
    }
}

fn write(file: &Path, body: &UsageFile) -> std::io::Result<()> {
    use std::io::Write;
    let json = serde_json::to_vec_pretty(body).map_err(std::io::Error::other)?;
    let tmp = file.with_extension("json.tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options.open(&tmp)?;
    f.write_all(&json)?;
    f.sync_all()?;
    std::fs::rename(&tmp, file)
}

/// What `file` holds: empty when it is missing or damaged (with a
/// warning for damage).
pub fn read(file: &Path) -> BTreeMap<String, LastUse> {
    match std::fs::read(file) {
        Ok(bytes) => match serde_json::from_slice::<UsageFile>(&bytes) {
            Ok(f) => f.tokens,
            Err(e) => {
                tracing::warn!(path = %file.display(), error = %e, "the tokens' last uses are unreadable; starting over");
                BTreeMap::new()
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
        Err(e) => {
            tracing::warn!(path = %file.display(), error = %e, "the tokens' last uses cannot be read; starting over");
            BTreeMap::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uses_are_written_when_changed_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join(USAGE_FILE);
        let usage = TokenUsage::at(&file);
        usage.flush().expect("nothing to write");
        assert!(!file.exists(), "written with nothing recorded");
        usage.record("ops", Some(IpAddr::from([192, 0, 2, 7])));
        usage.flush().expect("flush");
        let on_disk = read(&file);
        assert_eq!(on_disk["ops"].from.as_deref(), Some("192.0.2.7"));
        assert!(on_disk["ops"].at > 1_700_000_000);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&file).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // A new record starts from the file; a drop writes what is left.
        drop(usage);
        let again = TokenUsage::at(&file);
        assert_eq!(again.last_use("ops"), Some(on_disk["ops"].clone()));
        again.record("viewer", None);
        drop(again);
        let on_disk = read(&file);
        assert!(on_disk.contains_key("ops") && on_disk.contains_key("viewer"));
        // Damage: read as empty, and overwritten by the next write.
        std::fs::write(&file, b"{not json").expect("damage");
        assert!(read(&file).is_empty());
    }
}
