//! Tells subscribers in the writer's process that new events are durable.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

/// The last durable seq, with a condition variable to wait for a newer one.
#[derive(Debug)]
pub(crate) struct Notifier {
    committed: Mutex<u64>,
    changed: Condvar,
}

impl Notifier {
    pub(crate) fn new(committed: u64) -> Self {
        Notifier {
            committed: Mutex::new(committed),
            changed: Condvar::new(),
        }
    }

    pub(crate) fn publish(&self, seq: u64) {
        let mut c = self
            .committed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if seq > *c {
            *c = seq;
        }
        self.changed.notify_all();
    }

    pub(crate) fn committed(&self) -> u64 {
        *self
            .committed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the committed seq is at least `seq` or `timeout` passed;
    /// returns the committed seq.
    pub(crate) fn wait_for(&self, seq: u64, timeout: Duration) -> u64 {
        let guard = self
            .committed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (guard, _) = self
            .changed
            .wait_timeout_while(guard, timeout, |c| *c < seq)
            .unwrap_or_else(PoisonError::into_inner);
        *guard
    }
}
