//! Tells subscribers in the writer's process that new events are durable.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

/// The last durable (acknowledged) seq, with a condition variable to wait
/// for a newer one. Reading it is one atomic load: it never waits on the
/// writer (nor on an `fdatasync`).
#[derive(Debug)]
pub(crate) struct Notifier {
    committed: AtomicU64,
    lock: Mutex<()>,
    changed: Condvar,
}

impl Notifier {
    pub(crate) fn new(committed: u64) -> Self {
        Notifier {
            committed: AtomicU64::new(committed),
            lock: Mutex::new(()),
            changed: Condvar::new(),
        }
    }

    pub(crate) fn publish(&self, seq: u64) {
        let _g = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.committed.fetch_max(seq, Ordering::AcqRel);
        self.changed.notify_all();
    }

    pub(crate) fn committed(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    /// Waits until the committed seq is at least `seq` or `timeout` passed;
    /// returns the committed seq.
    pub(crate) fn wait_for(&self, seq: u64, timeout: Duration) -> u64 {
        let guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let (_guard, _) = self
            .changed
            .wait_timeout_while(guard, timeout, |_| self.committed() < seq)
            .unwrap_or_else(PoisonError::into_inner);
        self.committed()
    }
}
