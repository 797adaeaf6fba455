//! A storage backend that loses power on purpose.
//!
//! [`PowerCut`] wraps a real [`LocalBackend`] and keeps a journal of every
//! change that is not yet durable by the backend's own rules: a deferred
//! write stays volatile until a `sync_all`; a deletion until a
//! `sync_deletes` of its kind or a `sync_all`; a write with
//! [`WriteSync::Now`] is durable when it returns. After a chosen number of
//! operations the power "goes out": that operation and every later one
//! fail. [`PowerCut::apply_cut`] then rewrites the directory the way a real
//! machine could come back: each volatile change, independently and by the
//! seeded generator, survives whole, is lost (the old file, or none, is
//! back), or leaves a zero-length file (a rename made durable before its
//! data, as ext4 and XFS can leave it).
//!
//! A hook can also act on the storage after a chosen operation (for
//! example, delete the locks when a manifest is written, as a prune on
//! another host that judged the writer stale would).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use vouch::backend::{Backend, FileKind, LocalBackend, WriteSync};

use crate::Rng;

/// A change that a power cut may undo.
#[derive(Debug)]
enum Volatile {
    /// A file written without sync; `before` is what was there (if anything).
    Written {
        kind: FileKind,
        path: PathBuf,
        before: Option<Vec<u8>>,
    },
    /// A file whose directory entry is durable but whose data may not be.
    DataOnly { path: PathBuf },
    /// A file deleted without a directory sync; `before` is its content.
    Deleted {
        kind: FileKind,
        path: PathBuf,
        before: Vec<u8>,
    },
}

/// What a hook sees: the wrapped backend, and the operation just done.
pub type Hook = Box<dyn Fn(&LocalBackend, &str, FileKind, &str) + Send + Sync>;

#[derive(Default)]
struct State {
    ops: u64,
    cut_after: Option<u64>,
    cut: bool,
    journal: Vec<Volatile>,
}

/// A [`LocalBackend`] that can lose power (see the module docs).
pub struct PowerCut {
    inner: LocalBackend,
    state: Mutex<State>,
    hook: Option<Hook>,
}

/// How a cut left the directory, for messages.
#[derive(Clone, Debug, Default)]
pub struct CutOutcome {
    /// Volatile changes that survived.
    pub kept: u64,
    /// Volatile changes that were lost.
    pub lost: u64,
    /// Files left with zero length.
    pub emptied: u64,
}

fn power_out() -> vouch::Error {
    vouch::Error::io(
        "power cut (simulated)",
        std::io::Error::other("the machine lost power"),
    )
}

impl PowerCut {
    /// A backend on `root` that loses power after `cut_after` operations
    /// (never with `None`).
    pub fn new(root: impl Into<PathBuf>, cut_after: Option<u64>) -> Self {
        PowerCut {
            inner: LocalBackend::new(root),
            state: Mutex::new(State {
                cut_after,
                ..Default::default()
            }),
            hook: None,
        }
    }

    /// Runs `hook` after every successful operation.
    pub fn with_hook(mut self, hook: Hook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// Operations done so far (also those refused after the cut).
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// Whether the power went out.
    pub fn was_cut(&self) -> bool {
        self.lock().cut
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts an operation; fails once the power is out.
    fn step(&self) -> vouch::Result<()> {
        let mut st = self.lock();
        st.ops += 1;
        if st.cut || st.cut_after.is_some_and(|n| st.ops > n) {
            st.cut = true;
            return Err(power_out());
        }
        Ok(())
    }

    fn after(&self, op: &str, kind: FileKind, name: &str) {
        if let Some(h) = &self.hook {
            h(&self.inner, op, kind, name);
        }
    }

    fn path(&self, kind: FileKind, name: &str) -> PathBuf {
        self.inner.file_path(kind, name)
    }

    /// Brings the directory back the way a machine that lost power could
    /// find it. Call once, after the operation under test returned.
    pub fn apply_cut(&self, rng: &mut Rng) -> CutOutcome {
        let journal = std::mem::take(&mut self.lock().journal);
        let mut out = CutOutcome::default();
        // Newest first, so older states are what a lost change falls back to.
        for change in journal.into_iter().rev() {
            match change {
                Volatile::Written { path, before, .. } => match rng.below(3) {
                    0 => out.kept += 1,
                    1 => {
                        out.lost += 1;
                        restore(&path, before.as_deref());
                    }
                    _ => {
                        out.emptied += 1;
                        let _ = std::fs::write(&path, b"");
                    }
                },
                Volatile::DataOnly { path, .. } => {
                    if rng.below(2) == 0 {
                        out.kept += 1;
                    } else if path.exists() {
                        out.emptied += 1;
                        let _ = std::fs::write(&path, b"");
                    }
                }
                Volatile::Deleted { path, before, .. } => {
                    if rng.below(2) == 0 {
                        out.kept += 1;
                    } else {
                        out.lost += 1;
                        restore(&path, Some(&before));
                    }
                }
            }
        }
        out
    }
}

fn restore(path: &Path, content: Option<&[u8]>) {
    match content {
        Some(bytes) => {
            if let Some(dir) = path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let _ = std::fs::write(path, bytes);
        }
        None => {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Backend for PowerCut {
    fn location(&self) -> String {
        self.inner.location()
    }

    fn create(&self) -> vouch::Result<()> {
        self.step()?;
        self.inner.create()
    }

    fn exists(&self, kind: FileKind, name: &str) -> vouch::Result<bool> {
        self.step()?;
        self.inner.exists(kind, name)
    }

    fn list(&self, kind: FileKind) -> vouch::Result<Vec<(String, u64)>> {
        self.step()?;
        self.inner.list(kind)
    }

    fn read(&self, kind: FileKind, name: &str) -> vouch::Result<Vec<u8>> {
        self.step()?;
        self.inner.read(kind, name)
    }

    fn read_range(
        &self,
        kind: FileKind,
        name: &str,
        offset: u64,
        length: usize,
    ) -> vouch::Result<Vec<u8>> {
        self.step()?;
        self.inner.read_range(kind, name, offset, length)
    }

    fn write(&self, kind: FileKind, name: &str, data: &[u8], sync: WriteSync) -> vouch::Result<()> {
        self.step()?;
        let path = self.path(kind, name);
        let before = std::fs::read(&path).ok();
        self.inner.write(kind, name, data, sync)?;
        let mut st = self.lock();
        // A later write of the same file replaces what the journal says of it.
        st.journal.retain(|v| !matches!(v, Volatile::Written { path: p, .. } | Volatile::DataOnly { path: p, .. } | Volatile::Deleted { path: p, .. } if *p == path));
        if sync == WriteSync::Deferred {
            st.journal.push(Volatile::Written { kind, path, before });
        }
        drop(st);
        self.after("write", kind, name);
        Ok(())
    }

    fn delete(&self, kind: FileKind, name: &str) -> vouch::Result<()> {
        self.step()?;
        let path = self.path(kind, name);
        let before = std::fs::read(&path).ok();
        self.inner.delete(kind, name)?;
        if let Some(before) = before {
            let mut st = self.lock();
            let was_volatile_write = st.journal.iter().any(
                |v| matches!(v, Volatile::Written { path: p, before: None, .. } if *p == path),
            );
            st.journal.retain(|v| !matches!(v, Volatile::Written { path: p, .. } | Volatile::DataOnly { path: p, .. } if *p == path));
            // Deleting a file that was never durable leaves nothing to bring back.
            if !was_volatile_write {
                st.journal.push(Volatile::Deleted { kind, path, before });
            }
        }
        self.after("delete", kind, name);
        Ok(())
    }

    fn sync_all(&self) -> vouch::Result<()> {
        self.step()?;
        self.inner.sync_all()?;
        self.lock().journal.clear();
        Ok(())
    }

    fn sync_deletes(&self, kind: FileKind) -> vouch::Result<()> {
        self.step()?;
        self.inner.sync_deletes(kind)?;
        let mut st = self.lock();
        let journal = std::mem::take(&mut st.journal);
        st.journal = journal
            .into_iter()
            .filter_map(|v| match v {
                Volatile::Deleted { kind: k, .. } if k == kind => None,
                // The entry is now durable, the data not yet.
                Volatile::Written { kind: k, path, .. } if k == kind => {
                    Some(Volatile::DataOnly { path })
                }
                other => Some(other),
            })
            .collect();
        Ok(())
    }

    fn modified(&self, kind: FileKind, name: &str) -> vouch::Result<Option<std::time::SystemTime>> {
        self.step()?;
        self.inner.modified(kind, name)
    }

    fn remove_temporary(&self) -> vouch::Result<usize> {
        self.step()?;
        self.inner.remove_temporary()
    }
}
