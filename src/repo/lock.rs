//! Repository locks: how backups, restores and prune share a repository.
//!
//! Protocol (see `docs/format.md`, "Locks"):
//! - backup, restore, verify and forget take a *shared* lock; prune and
//!   `repair index` take an *exclusive* one;
//! - a lock is a small JSON file in `locks/`. It is refreshed every
//!   [`REFRESH_INTERVAL`] by writing a *new* file under a new name and then
//!   deleting the old one, after checking that the old one still exists: a
//!   lock removed by someone who judged it stale is never recreated, and its
//!   holder learns that it lost it;
//! - a lock names its holder by host, boot id, PID namespace, pid and the
//!   process's start time. On the same host, boot and PID namespace, the
//!   holder's liveness decides: a live holder is never stale, whatever the
//!   age of its lock; a holder that is gone (or whose pid now belongs to
//!   another process) is stale at once. Anywhere else (another host, another
//!   container sharing the host name, a lock of an older vouch without these
//!   fields) a lock is stale only when it was not refreshed for
//!   [`STALE_AFTER`];
//! - a lock that does not parse (garbage after a power cut) is stale once its
//!   file is older than [`STALE_AFTER`]; a lock that vanishes while being
//!   read was released and is no conflict;
//! - taking a lock writes it, then lists again: on a conflict the newcomer
//!   removes its own lock and fails (or waits, with `--retry-lock`), so two
//!   racing exclusives both back off;
//! - a writer checks its lock ([`LockGuard::check`]) right before it commits
//!   and again right after: `check` fails when the lock is gone, was lost by
//!   the refresher, or was not refreshed for [`STALE_AFTER`] / 2 of this
//!   machine's boot-time clock (suspend included), so a writer that was
//!   paused or stalled long enough for anyone to judge it stale never
//!   commits (and removes what it committed).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::backend::{Backend, FileKind, WriteSync};
use crate::error::{Error, Result};
use crate::util::{host_name, now_ns, rfc3339, user_name};

/// How often a held lock is rewritten.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(60);
/// After how long without refresh a lock of a holder whose liveness cannot
/// be checked is stale.
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
    /// Random id of this lock session (stays the same across refreshes,
    /// which rename the file).
    #[serde(default)]
    pub session: String,
    /// `/proc/sys/kernel/random/boot_id` of the holder's machine.
    #[serde(default)]
    pub boot_id: String,
    /// The holder's PID namespace (`/proc/self/ns/pid` link text).
    #[serde(default)]
    pub pid_ns: String,
    /// The holder process's start time (clock ticks after boot, field 22 of
    /// `/proc/PID/stat`), so a reused pid is not taken for the holder.
    #[serde(default)]
    pub pid_start: u64,
}

/// Whether the process holding a lock is known to be running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Liveness {
    /// Same host, boot and PID namespace, and the process is there.
    Alive,
    /// Same host, boot and PID namespace, and the process is gone.
    Dead,
    /// Cannot tell from here: judge by the age of the last refresh.
    Unknown,
}

/// Who this process is, for the liveness fields of a lock.
#[derive(Clone, Debug, Default)]
struct Identity {
    boot_id: String,
    pid_ns: String,
    pid_start: u64,
}

fn own_identity() -> Identity {
    Identity {
        boot_id: boot_id(),
        pid_ns: std::fs::read_link("/proc/self/ns/pid")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
        pid_start: process_start(std::process::id())
            .ok()
            .flatten()
            .unwrap_or(0),
    }
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The start time of process `pid` in clock ticks after boot; `Ok(None)`
/// when there is no such process; an error when it cannot be told.
fn process_start(pid: u32) -> std::io::Result<Option<u64>> {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    parse_start_time(&stat)
        .map(Some)
        .ok_or_else(|| std::io::Error::other("unparseable /proc stat line"))
}

/// Field 22 (`starttime`) of a `/proc/PID/stat` line; the command name in
/// field 2 may hold spaces and parentheses, so count from the last `)`.
fn parse_start_time(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    // Fields 3.. follow; starttime is field 22, so the 20th after the name.
    after.split_whitespace().nth(19)?.parse().ok()
}

impl LockFile {
    fn liveness(&self, me: &Identity) -> Liveness {
        if self.host != host_name()
            || self.boot_id.is_empty()
            || self.pid_ns.is_empty()
            || self.boot_id != me.boot_id
            || self.pid_ns != me.pid_ns
        {
            return Liveness::Unknown;
        }
        match process_start(self.pid) {
            Ok(None) => Liveness::Dead,
            Ok(Some(start)) if self.pid_start != 0 && start != self.pid_start => Liveness::Dead,
            Ok(Some(_)) => Liveness::Alive,
            Err(_) => Liveness::Unknown,
        }
    }

    fn is_stale(&self, now: i64, me: &Identity) -> bool {
        match self.liveness(me) {
            Liveness::Alive => false,
            Liveness::Dead => true,
            Liveness::Unknown => {
                now.saturating_sub(self.refreshed_ns) > STALE_AFTER.as_nanos() as i64
            }
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} lock for {} by pid {} on {} (user {}), taken {}, refreshed {}",
            if self.exclusive {
                "exclusive"
            } else {
                "shared"
            },
            self.purpose,
            self.pid,
            self.host,
            self.user,
            rfc3339(self.created_ns),
            rfc3339(self.refreshed_ns)
        )
    }
}

/// What a reader found in one file of `locks/`.
enum Found {
    /// A lock that parses.
    Lock(LockFile),
    /// A file that does not parse, with its modification time.
    Garbage(Option<std::time::SystemTime>),
}

/// Where a lock stands, shared by the guard and its refresher.
#[derive(Debug)]
struct HeldState {
    /// The current file name in `locks/` (changes with every refresh).
    name: String,
    /// Set when the refresher found the lock removed by someone else.
    lost: bool,
    /// Boot-time clock at the last successful write of the lock.
    refreshed: Duration,
}

/// A held lock; released on drop.
pub struct LockGuard {
    backend: Arc<dyn Backend>,
    state: Arc<Mutex<HeldState>>,
    stop: Arc<AtomicBool>,
    refresher: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LockGuard({})", self.name())
    }
}

/// `CLOCK_BOOTTIME`: monotonic, and unlike `Instant` it counts time spent
/// suspended, which is time during which others may judge the lock stale.
fn boot_clock() -> Duration {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes into the timespec we own.
        if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } == 0 {
            return Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
        }
    }
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

fn is_not_found(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

fn read_locks(backend: &dyn Backend) -> Result<Vec<(String, Found)>> {
    let mut out = Vec::new();
    for (name, _) in backend.list(FileKind::Lock)? {
        let found = match backend.read(FileKind::Lock, &name) {
            Ok(bytes) => match serde_json::from_slice::<LockFile>(&bytes) {
                Ok(l) => Found::Lock(l),
                Err(_) => Found::Garbage(backend.modified(FileKind::Lock, &name)?),
            },
            // Released between the listing and the read: no conflict.
            Err(e) if is_not_found(&e) => continue,
            Err(e @ Error::CorruptMetadata { .. }) => {
                tracing::warn!(lock = %name, "{e}");
                Found::Garbage(backend.modified(FileKind::Lock, &name)?)
            }
            Err(e) => return Err(e),
        };
        out.push((name, found));
    }
    Ok(out)
}

fn garbage_is_stale(modified: Option<std::time::SystemTime>) -> bool {
    modified
        .and_then(|m| m.elapsed().ok())
        .is_some_and(|age| age > STALE_AFTER)
}

/// Finds a conflicting live lock, removing stale ones on the way.
fn conflict(backend: &dyn Backend, own: Option<&str>, exclusive: bool) -> Result<Option<String>> {
    let now = now_ns();
    let me = own_identity();
    for (name, found) in read_locks(backend)? {
        if Some(name.as_str()) == own {
            continue;
        }
        match found {
            Found::Lock(l) if l.is_stale(now, &me) => {
                tracing::warn!(lock = %name, "removing stale lock: {}", l.describe());
                backend.delete(FileKind::Lock, &name)?;
            }
            Found::Lock(l) if exclusive || l.exclusive => return Ok(Some(l.describe())),
            Found::Lock(_) => {}
            Found::Garbage(m) if garbage_is_stale(m) => {
                tracing::warn!(lock = %name, "removing an unreadable lock file older than {}", humantime::format_duration(STALE_AFTER));
                backend.delete(FileKind::Lock, &name)?;
            }
            Found::Garbage(_) => {
                return Ok(Some(format!(
                    "unreadable lock file locks/{name}; it counts as stale {} after it was written (or remove it with `vouch unlock --force` once no other vouch runs)",
                    humantime::format_duration(STALE_AFTER)
                )))
            }
        }
    }
    Ok(None)
}

/// Takes a lock, failing at once on a conflict.
pub fn acquire(backend: Arc<dyn Backend>, exclusive: bool, purpose: &str) -> Result<LockGuard> {
    acquire_waiting(backend, exclusive, purpose, Duration::ZERO)
}

/// Takes a lock, waiting up to `wait` for conflicting locks to go away
/// (restic's `--retry-lock`).
pub fn acquire_waiting(
    backend: Arc<dyn Backend>,
    exclusive: bool,
    purpose: &str,
    wait: Duration,
) -> Result<LockGuard> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(100);
    let mut said = false;
    loop {
        match try_acquire(backend.clone(), exclusive, purpose) {
            Err(Error::Locked(why)) if started.elapsed() < wait => {
                if !said {
                    tracing::info!(
                        "waiting up to {} for a lock: {why}",
                        humantime::format_duration(wait)
                    );
                    said = true;
                }
                let left = wait.saturating_sub(started.elapsed());
                let step = pause.min(left);
                let until = Instant::now() + step;
                while Instant::now() < until {
                    crate::util::check_interrupted()?;
                    std::thread::sleep(Duration::from_millis(50).min(step));
                }
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

fn try_acquire(backend: Arc<dyn Backend>, exclusive: bool, purpose: &str) -> Result<LockGuard> {
    if let Some(c) = conflict(backend.as_ref(), None, exclusive)? {
        return Err(Error::Locked(c));
    }
    let now = now_ns();
    let me = own_identity();
    let file = LockFile {
        exclusive,
        purpose: purpose.to_string(),
        host: host_name(),
        pid: std::process::id(),
        user: user_name(),
        created_ns: now,
        refreshed_ns: now,
        session: crate::id::RepoId::random().to_hex(),
        boot_id: me.boot_id,
        pid_ns: me.pid_ns,
        pid_start: me.pid_start,
    };
    let name = crate::id::RepoId::random().to_hex();
    let json = serde_json::to_vec(&file).map_err(|e| Error::corrupt("lock", e))?;
    let written_at = boot_clock();
    backend.write(FileKind::Lock, &name, &json, WriteSync::Now)?;
    if let Some(c) = conflict(backend.as_ref(), Some(&name), exclusive)? {
        backend.delete(FileKind::Lock, &name)?;
        return Err(Error::Locked(c));
    }
    let state = Arc::new(Mutex::new(HeldState {
        name,
        lost: false,
        refreshed: written_at,
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let refresher = {
        let backend = backend.clone();
        let stop = stop.clone();
        let state = state.clone();
        std::thread::Builder::new()
            .name("lock-refresh".into())
            .spawn(move || refresh_loop(backend, state, file, stop))
            .ok()
    };
    if refresher.is_none() {
        tracing::warn!(
            "could not start the lock refresher; the lock expires after {}",
            humantime::format_duration(STALE_AFTER)
        );
    }
    Ok(LockGuard {
        backend,
        state,
        stop,
        refresher,
    })
}

fn lock_state(state: &Mutex<HeldState>) -> std::sync::MutexGuard<'_, HeldState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

fn refresh_loop(
    backend: Arc<dyn Backend>,
    state: Arc<Mutex<HeldState>>,
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
        file.refreshed_ns = now_ns();
        match refresh_once(backend.as_ref(), &state, &file) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => tracing::warn!("could not refresh the repository lock: {e}"),
        }
    }
}

/// One refresh: write the lock under a new name, and adopt it only if the
/// old file still exists. Returns `Ok(false)` when the lock was lost.
fn refresh_once(backend: &dyn Backend, state: &Mutex<HeldState>, file: &LockFile) -> Result<bool> {
    let mut st = lock_state(state);
    if st.lost {
        return Ok(false);
    }
    let json = serde_json::to_vec(file).map_err(|e| Error::corrupt("lock", e))?;
    let new_name = crate::id::RepoId::random().to_hex();
    let written_at = boot_clock();
    backend.write(FileKind::Lock, &new_name, &json, WriteSync::Now)?;
    if !backend.exists(FileKind::Lock, &st.name)? {
        // Someone removed the lock as stale: never recreate it.
        backend.delete(FileKind::Lock, &new_name)?;
        st.lost = true;
        tracing::error!(
            "the repository lock was removed by another process; this operation will not commit"
        );
        return Ok(false);
    }
    backend.delete(FileKind::Lock, &st.name)?;
    st.name = new_name;
    st.refreshed = written_at;
    Ok(true)
}

impl LockGuard {
    /// The lock file's current name.
    pub fn name(&self) -> String {
        lock_state(&self.state).name.clone()
    }

    /// Fails if the lock may no longer protect this process: it was removed
    /// by someone who judged it stale, the refresher saw it vanish, or it was
    /// not refreshed for half the staleness window (a pause, a suspend, a
    /// storage stall), after which another host may judge it stale at any
    /// moment.
    pub fn check(&self) -> Result<()> {
        let st = lock_state(&self.state);
        let lost = || {
            Error::Locked(
                "this process's lock was removed as stale (paused or stalled too long?); nothing was committed".into(),
            )
        };
        if st.lost {
            return Err(lost());
        }
        let age = boot_clock().saturating_sub(st.refreshed);
        if age > STALE_AFTER / 2 {
            return Err(Error::Locked(format!(
                "this process's lock was last refreshed {} ago (paused or stalled?), so another process may treat it as stale; nothing was committed",
                humantime::format_duration(Duration::from_secs(age.as_secs()))
            )));
        }
        if self.backend.exists(FileKind::Lock, &st.name)? {
            Ok(())
        } else {
            Err(lost())
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.refresher.take() {
            let _ = h.join();
        }
        let st = lock_state(&self.state);
        if st.lost {
            return;
        }
        if let Err(e) = self.backend.delete(FileKind::Lock, &st.name) {
            tracing::warn!("could not remove lock {}: {e}", st.name);
        }
    }
}

/// One file of `locks/`, for `vouch unlock`.
#[derive(Clone, Debug, Serialize)]
pub struct LockReport {
    /// File name in `locks/`.
    pub name: String,
    /// What the lock says, or why it does not read.
    pub description: String,
    /// Whether it is stale.
    pub stale: bool,
    /// Whether it was removed.
    pub removed: bool,
}

/// Removes stale locks, or every lock with `force` (`vouch unlock`).
pub fn unlock(backend: &dyn Backend, force: bool) -> Result<Vec<LockReport>> {
    let now = now_ns();
    let me = own_identity();
    let mut out = Vec::new();
    for (name, found) in read_locks(backend)? {
        let (description, stale) = match &found {
            Found::Lock(l) => (l.describe(), l.is_stale(now, &me)),
            Found::Garbage(m) => ("an unreadable lock file".to_string(), garbage_is_stale(*m)),
        };
        let removed = stale || force;
        if removed {
            backend.delete(FileKind::Lock, &name)?;
        }
        out.push(LockReport {
            name,
            description,
            stale,
            removed,
        });
    }
    if out.iter().any(|r| r.removed) {
        backend.sync_deletes(FileKind::Lock)?;
    }
    Ok(out)
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

    /// A lock as this process would write it, for another pid.
    fn lock_like_mine(pid: u32) -> LockFile {
        let me = own_identity();
        let now = now_ns();
        LockFile {
            exclusive: true,
            purpose: "prune".into(),
            host: host_name(),
            pid,
            user: "x".into(),
            created_ns: now,
            refreshed_ns: now,
            session: "s".into(),
            boot_id: me.boot_id,
            pid_ns: me.pid_ns,
            pid_start: 0,
        }
    }

    fn plant(b: &Arc<dyn Backend>, name: &str, lock: &LockFile) {
        b.write(
            FileKind::Lock,
            name,
            &serde_json::to_vec(lock).unwrap(),
            WriteSync::Now,
        )
        .unwrap();
    }

    const DEAD_PID: u32 = 0x7fff_fff0;

    #[test]
    fn shared_locks_coexist_exclusive_conflicts() {
        let (_d, b) = backend();
        let s1 = acquire(b.clone(), false, "backup").unwrap();
        let s2 = acquire(b.clone(), false, "backup").unwrap();
        let err = acquire(b.clone(), true, "prune").unwrap_err();
        assert!(
            matches!(err, Error::Locked(ref m) if m.contains("backup")),
            "{err}"
        );
        s1.check().unwrap();
        drop(s1);
        drop(s2);
        let x = acquire(b.clone(), true, "prune").unwrap();
        assert!(acquire(b.clone(), false, "backup").is_err());
        drop(x);
        assert!(b.list(FileKind::Lock).unwrap().is_empty());
    }

    #[test]
    fn locks_of_dead_processes_and_old_locks_elsewhere_are_stale() {
        let (_d, b) = backend();
        plant(&b, "dead", &lock_like_mine(DEAD_PID));
        let old = LockFile {
            host: "elsewhere".into(),
            pid: 1,
            refreshed_ns: now_ns() - 3_600_000_000_000,
            ..lock_like_mine(1)
        };
        plant(&b, "old", &old);
        let g = acquire(b.clone(), true, "prune").unwrap();
        assert_eq!(b.list(FileKind::Lock).unwrap().len(), 1);
        b.delete(FileKind::Lock, &g.name()).unwrap();
        assert!(g.check().is_err(), "a removed lock must be noticed");
    }

    #[test]
    fn a_live_holder_is_never_stale_by_age() {
        // Regression (engine review finding 4): a live writer paused for 30
        // minutes lost its lock to prune.
        let (_d, b) = backend();
        let mut mine = lock_like_mine(std::process::id());
        mine.pid_start = own_identity().pid_start;
        mine.refreshed_ns = now_ns() - 2 * 3_600_000_000_000;
        plant(&b, "paused", &mine);
        let err = acquire(b.clone(), true, "prune").unwrap_err();
        assert!(matches!(err, Error::Locked(_)), "{err}");
        assert!(b.exists(FileKind::Lock, "paused").unwrap());
        // The same pid started at another time is another process.
        mine.pid_start += 1;
        plant(&b, "paused", &mine);
        drop(acquire(b.clone(), true, "prune").unwrap());
        assert!(!b.exists(FileKind::Lock, "paused").unwrap());
    }

    #[test]
    fn a_container_sharing_the_host_name_is_not_judged_by_pid() {
        // Regression (engine review finding 4): with a shared host name and
        // another PID namespace, every live lock looked dead.
        let (_d, b) = backend();
        let other_ns = LockFile {
            pid_ns: "pid:[1]".into(),
            ..lock_like_mine(DEAD_PID)
        };
        plant(&b, "container", &other_ns);
        assert!(matches!(
            acquire(b.clone(), true, "prune"),
            Err(Error::Locked(_))
        ));
        let other_boot = LockFile {
            boot_id: "another-boot".into(),
            ..lock_like_mine(DEAD_PID)
        };
        plant(&b, "container", &other_boot);
        assert!(matches!(
            acquire(b.clone(), true, "prune"),
            Err(Error::Locked(_))
        ));
        // A lock of an older vouch (no boot id) is judged by age alone.
        let legacy = LockFile {
            boot_id: String::new(),
            pid_ns: String::new(),
            ..lock_like_mine(DEAD_PID)
        };
        plant(&b, "container", &legacy);
        assert!(matches!(
            acquire(b.clone(), true, "prune"),
            Err(Error::Locked(_))
        ));
    }

    /// A backend whose listing names one lock file that is gone by the time
    /// it is read, as when another process releases its lock in between.
    struct Vanishing(LocalBackend);

    impl Backend for Vanishing {
        fn location(&self) -> String {
            self.0.location()
        }
        fn create(&self) -> Result<()> {
            self.0.create()
        }
        fn exists(&self, kind: FileKind, name: &str) -> Result<bool> {
            self.0.exists(kind, name)
        }
        fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
            let mut l = self.0.list(kind)?;
            if kind == FileKind::Lock {
                l.push(("0released".into(), 10));
            }
            Ok(l)
        }
        fn read(&self, kind: FileKind, name: &str) -> Result<Vec<u8>> {
            self.0.read(kind, name)
        }
        fn read_range(&self, kind: FileKind, name: &str, o: u64, l: usize) -> Result<Vec<u8>> {
            self.0.read_range(kind, name, o, l)
        }
        fn write(&self, kind: FileKind, name: &str, data: &[u8], s: WriteSync) -> Result<()> {
            self.0.write(kind, name, data, s)
        }
        fn delete(&self, kind: FileKind, name: &str) -> Result<()> {
            self.0.delete(kind, name)
        }
        fn sync_all(&self) -> Result<()> {
            self.0.sync_all()
        }
        fn sync_deletes(&self, kind: FileKind) -> Result<()> {
            self.0.sync_deletes(kind)
        }
        fn modified(&self, kind: FileKind, name: &str) -> Result<Option<std::time::SystemTime>> {
            self.0.modified(kind, name)
        }
        fn remove_temporary(&self) -> Result<usize> {
            self.0.remove_temporary()
        }
    }

    #[test]
    fn a_lock_released_while_being_read_is_no_conflict() {
        // Regression (engine review finding 11): concurrent backups failed
        // with "unreadable lock file".
        let dir = tempfile::tempdir().unwrap();
        let inner = LocalBackend::new(dir.path().join("r"));
        inner.create().unwrap();
        let b: Arc<dyn Backend> = Arc::new(Vanishing(inner));
        let s = acquire(b.clone(), false, "backup").unwrap();
        drop(acquire(b.clone(), true, "prune").unwrap_err());
        drop(s);
        drop(acquire(b.clone(), true, "prune").unwrap());
    }

    #[test]
    fn an_unreadable_lock_is_respected_then_stale_by_its_age() {
        let (d, b) = backend();
        let path = d.path().join("r/locks/garbage");
        std::fs::write(&path, b"").unwrap();
        let err = acquire(b.clone(), false, "backup").unwrap_err();
        assert!(err.to_string().contains("unreadable lock file"), "{err}");
        let old = std::time::SystemTime::now() - STALE_AFTER - Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        drop(acquire(b.clone(), false, "backup").unwrap());
        assert!(!path.exists(), "a stale unreadable lock is removed");
    }

    #[test]
    fn refresh_renames_and_never_recreates_a_removed_lock() {
        let (_d, b) = backend();
        let g = acquire(b.clone(), false, "backup").unwrap();
        let first = g.name();
        let file = lock_like_mine(std::process::id());
        assert!(refresh_once(b.as_ref(), &g.state, &file).unwrap());
        assert_ne!(g.name(), first, "a refresh writes a new file");
        assert_eq!(
            b.list(FileKind::Lock).unwrap().len(),
            1,
            "and removes the old one"
        );
        g.check().unwrap();
        // Someone judges the lock stale and removes it.
        b.delete(FileKind::Lock, &g.name()).unwrap();
        assert!(!refresh_once(b.as_ref(), &g.state, &file).unwrap());
        assert!(
            b.list(FileKind::Lock).unwrap().is_empty(),
            "never recreated"
        );
        assert!(g.check().is_err());
    }

    #[test]
    fn check_fails_when_the_lock_was_not_refreshed_for_half_the_window() {
        let (_d, b) = backend();
        let g = acquire(b.clone(), false, "backup").unwrap();
        g.check().unwrap();
        lock_state(&g.state).refreshed = boot_clock().saturating_sub(STALE_AFTER);
        let err = g.check().unwrap_err();
        assert!(err.to_string().contains("last refreshed"), "{err}");
    }

    #[test]
    fn unlock_removes_only_stale_locks_unless_forced() {
        let (_d, b) = backend();
        let live = acquire(b.clone(), false, "backup").unwrap();
        plant(&b, "dead", &lock_like_mine(DEAD_PID));
        let report = unlock(b.as_ref(), false).unwrap();
        assert_eq!(report.len(), 2);
        assert!(report
            .iter()
            .any(|r| r.name == "dead" && r.removed && r.stale));
        assert!(report.iter().any(|r| r.name == live.name() && !r.removed));
        assert!(b.exists(FileKind::Lock, &live.name()).unwrap());
        let report = unlock(b.as_ref(), true).unwrap();
        assert!(report.iter().all(|r| r.removed));
        assert!(b.list(FileKind::Lock).unwrap().is_empty());
        assert!(live.check().is_err());
    }

    #[test]
    fn retry_lock_waits_for_a_conflicting_lock() {
        let (_d, b) = backend();
        let x = acquire(b.clone(), true, "prune").unwrap();
        assert!(acquire_waiting(b.clone(), false, "backup", Duration::ZERO).is_err());
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(x);
        });
        let g = acquire_waiting(b.clone(), false, "backup", Duration::from_secs(20)).unwrap();
        release.join().unwrap();
        g.check().unwrap();
    }

    #[test]
    fn start_time_is_read_after_the_command_name() {
        let line = "1234 (a b) c) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 20 21";
        assert_eq!(parse_start_time(line), Some(424242));
        assert_eq!(parse_start_time("garbage"), None);
        assert!(process_start(std::process::id()).unwrap().is_some());
        assert_eq!(process_start(DEAD_PID).unwrap(), None);
    }
}
