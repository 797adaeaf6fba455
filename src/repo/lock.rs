//! Repository locks: how backups, restores and prune share a repository.
//!
//! Protocol (see `docs/format.md`, "Concurrency"):
//! - backup, restore, verify and forget take a *shared* lock; prune and
//!   `repair index` take an *exclusive* one;
//! - a lock is a small JSON file in `locks/`, refreshed every
//!   [`REFRESH_INTERVAL`] by a background thread;
//! - a lock is stale when it was not refreshed for [`STALE_AFTER`], or when it
//!   belongs to a process on this host that no longer exists; stale locks are
//!   removed by whoever finds them;
//! - taking a lock writes it, then lists again: on a conflict the newcomer
//!   removes its own lock and fails, so two racing exclusives both back off;
//! - a writer checks that its lock still exists right before writing the
//!   manifest, so a writer paused past `STALE_AFTER` aborts instead of
//!   committing a snapshot whose packs prune may have removed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backend::{Backend, FileKind, WriteSync};
use crate::error::{Error, Result};
use crate::util::{host_name, now_ns, rfc3339, user_name};

/// How often a held lock is rewritten.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(60);
/// After how long without refresh a lock is stale.
pub const STALE_AFTER: Duration = Duration::from_secs(30 * 60);

/// The content of `locks/<id>`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LockFile {
    /// Exclusive or shared.
    pub exclusive: bool,
    /// What the holder does.
    pub purpose: String,
    /// Host.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// User.
    pub user: String,
    /// Taken at (ns).
    pub created_ns: i64,
    /// Last refresh (ns).
    pub refreshed_ns: i64,
}

impl LockFile {
    fn is_stale(&self, now: i64) -> bool {
        if now - self.refreshed_ns > STALE_AFTER.as_nanos() as i64 {
            return true;
        }
        if self.host == host_name() {
            // SAFETY: kill with signal 0 only checks for existence.
            let rc = unsafe { libc::kill(self.pid as libc::pid_t, 0) };
            if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
                return true;
            }
        }
        false
    }

    fn describe(&self) -> String {
        format!(
            "{} lock for {} by pid {} on {} (user {}), taken {}",
            if self.exclusive {
                "exclusive"
            } else {
                "shared"
            },
            self.purpose,
            self.pid,
            self.host,
            self.user,
            rfc3339(self.created_ns)
        )
    }
}

/// A held lock; released on drop.
pub struct LockGuard {
    backend: Arc<dyn Backend>,
    name: String,
    stop: Arc<AtomicBool>,
    refresher: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LockGuard({})", self.name)
    }
}

fn read_locks(backend: &dyn Backend) -> Result<Vec<(String, Option<LockFile>)>> {
    let mut out = Vec::new();
    for (name, _) in backend.list(FileKind::Lock)? {
        let lock = backend
            .read(FileKind::Lock, &name)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        out.push((name, lock));
    }
    Ok(out)
}

/// Finds a conflicting live lock, removing stale ones on the way.
fn conflict(backend: &dyn Backend, own: Option<&str>, exclusive: bool) -> Result<Option<String>> {
    let now = now_ns();
    for (name, lock) in read_locks(backend)? {
        if Some(name.as_str()) == own {
            continue;
        }
        match lock {
            Some(l) if l.is_stale(now) => {
                tracing::warn!(lock = %name, "removing stale lock: {}", l.describe());
                backend.delete(FileKind::Lock, &name)?;
            }
            Some(l) if exclusive || l.exclusive => return Ok(Some(l.describe())),
            Some(_) => {}
            // Unreadable: being written right now, or garbage. Respect it.
            None => return Ok(Some(format!("unreadable lock file locks/{name}"))),
        }
    }
    Ok(None)
}

/// Takes a lock.
pub fn acquire(backend: Arc<dyn Backend>, exclusive: bool, purpose: &str) -> Result<LockGuard> {
    if let Some(c) = conflict(backend.as_ref(), None, exclusive)? {
        return Err(Error::Locked(c));
    }
    let now = now_ns();
    let file = LockFile {
        exclusive,
        purpose: purpose.to_string(),
        host: host_name(),
        pid: std::process::id(),
        user: user_name(),
        created_ns: now,
        refreshed_ns: now,
    };
    let name = crate::id::RepoId::random().to_hex();
    let json = serde_json::to_vec(&file).map_err(|e| Error::corrupt("lock", e))?;
    backend.write(FileKind::Lock, &name, &json, WriteSync::Now)?;
    if let Some(c) = conflict(backend.as_ref(), Some(&name), exclusive)? {
        backend.delete(FileKind::Lock, &name)?;
        return Err(Error::Locked(c));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let refresher = {
        let backend = backend.clone();
        let stop = stop.clone();
        let name = name.clone();
        std::thread::Builder::new()
            .name("lock-refresh".into())
            .spawn(move || refresh_loop(backend, name, file, stop))
            .ok()
    };
    Ok(LockGuard {
        backend,
        name,
        stop,
        refresher,
    })
}

fn refresh_loop(
    backend: Arc<dyn Backend>,
    name: String,
    mut file: LockFile,
    stop: Arc<AtomicBool>,
) {
    let step = Duration::from_millis(200);
    let mut waited = Duration::ZERO;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(step);
        waited += step;
        if waited < REFRESH_INTERVAL {
            continue;
        }
        waited = Duration::ZERO;
        // Only refresh a lock that still exists: if someone removed it as
        // stale, recreating it would hide that from `check`.
        if !backend.exists(FileKind::Lock, &name).unwrap_or(false) {
            return;
        }
        file.refreshed_ns = now_ns();
        if let Ok(json) = serde_json::to_vec(&file) {
            if let Err(e) = backend.write(FileKind::Lock, &name, &json, WriteSync::Deferred) {
                tracing::warn!("could not refresh lock: {e}");
            }
        }
    }
}

impl LockGuard {
    /// Fails if the lock was removed by someone who judged it stale.
    pub fn check(&self) -> Result<()> {
        if self.backend.exists(FileKind::Lock, &self.name)? {
            Ok(())
        } else {
            Err(Error::Locked(
                "this process's lock was removed as stale (paused too long?); nothing was committed".into(),
            ))
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.refresher.take() {
            let _ = h.join();
        }
        if let Err(e) = self.backend.delete(FileKind::Lock, &self.name) {
            tracing::warn!("could not remove lock {}: {e}", self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::LocalBackend;

    fn backend() -> (tempfile::TempDir, Arc<dyn Backend>) {
        let dir = tempfile::tempdir().unwrap();
        let b = LocalBackend::new(dir.path().join("r"));
        b.create().unwrap();
        (dir, Arc::new(b))
    }

    #[test]
    fn shared_locks_coexist_exclusive_conflicts() {
        let (_d, b) = backend();
        let s1 = acquire(b.clone(), false, "backup").unwrap();
        let _s2 = acquire(b.clone(), false, "backup").unwrap();
        let err = acquire(b.clone(), true, "prune").unwrap_err();
        assert!(
            matches!(err, Error::Locked(ref m) if m.contains("backup")),
            "{err}"
        );
        s1.check().unwrap();
        drop(s1);
        drop(_s2);
        let x = acquire(b.clone(), true, "prune").unwrap();
        assert!(acquire(b.clone(), false, "backup").is_err());
        drop(x);
        assert!(b.list(FileKind::Lock).unwrap().is_empty());
    }

    #[test]
    fn locks_of_dead_processes_are_stale() {
        let (_d, b) = backend();
        let now = now_ns();
        let dead = LockFile {
            exclusive: true,
            purpose: "prune".into(),
            host: host_name(),
            pid: 0x7fff_fff0,
            user: "x".into(),
            created_ns: now,
            refreshed_ns: now,
        };
        b.write(
            FileKind::Lock,
            "dead",
            &serde_json::to_vec(&dead).unwrap(),
            WriteSync::Now,
        )
        .unwrap();
        let old = LockFile {
            host: "elsewhere".into(),
            pid: 1,
            refreshed_ns: now - 3_600_000_000_000,
            ..dead
        };
        b.write(
            FileKind::Lock,
            "old",
            &serde_json::to_vec(&old).unwrap(),
            WriteSync::Now,
        )
        .unwrap();
        let g = acquire(b.clone(), true, "prune").unwrap();
        assert_eq!(b.list(FileKind::Lock).unwrap().len(), 1);
        b.delete(FileKind::Lock, &g.name).unwrap();
        assert!(g.check().is_err(), "a removed lock must be noticed");
    }
}
