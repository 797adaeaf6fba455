//! Single flight: at most one run per plan at a time.

use std::collections::HashSet;
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

/// A second run of a plan was refused because one is still running.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a run of this plan is already in flight")]
pub struct AlreadyRunning;

/// The registry of plans (or any keys) with a run in flight.
///
/// [`InFlight::try_start`] hands out a [`RunGuard`]; the key stays taken
/// until the guard is dropped, whichever way the run ends (success, error,
/// panic unwinding through it). Clones share the same registry.
pub struct InFlight<K: Eq + Hash> {
    running: Arc<Mutex<HashSet<K>>>,
}

impl<K: Eq + Hash> Clone for InFlight<K> {
    fn clone(&self) -> Self {
        InFlight {
            running: Arc::clone(&self.running),
        }
    }
}

impl<K: Eq + Hash> Default for InFlight<K> {
    fn default() -> Self {
        InFlight {
            running: Arc::new(Mutex::new(HashSet::new())),
        }
    }
}

impl<K: Eq + Hash + fmt::Debug> fmt::Debug for InFlight<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(lock(&self.running).iter()).finish()
    }
}

/// Locks the set, recovering from poisoning: every critical section is a
/// single insert, remove or lookup, so the set is always consistent.
fn lock<K>(m: &Mutex<HashSet<K>>) -> MutexGuard<'_, HashSet<K>> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<K: Eq + Hash + Clone> InFlight<K> {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks `key` as running, or refuses if it already is.
    pub fn try_start(&self, key: K) -> Result<RunGuard<K>, AlreadyRunning> {
        if lock(&self.running).insert(key.clone()) {
            Ok(RunGuard {
                running: Arc::clone(&self.running),
                key,
            })
        } else {
            Err(AlreadyRunning)
        }
    }

    /// Whether a run of `key` is in flight.
    pub fn is_running(&self, key: &K) -> bool {
        lock(&self.running).contains(key)
    }

    /// How many runs are in flight.
    pub fn len(&self) -> usize {
        lock(&self.running).len()
    }

    /// Whether no run is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Proof that a run holds its key; dropping it frees the key.
#[must_use = "the run is marked finished as soon as the guard is dropped"]
pub struct RunGuard<K: Eq + Hash> {
    running: Arc<Mutex<HashSet<K>>>,
    key: K,
}

impl<K: Eq + Hash> RunGuard<K> {
    /// The key this guard holds.
    pub fn key(&self) -> &K {
        &self.key
    }
}

impl<K: Eq + Hash + fmt::Debug> fmt::Debug for RunGuard<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RunGuard").field(&self.key).finish()
    }
}

impl<K: Eq + Hash> Drop for RunGuard<K> {
    fn drop(&mut self) {
        lock(&self.running).remove(&self.key);
    }
}
