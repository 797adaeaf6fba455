//! The clock, injected so tests and chaos runs can move time by hand.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time, in nanoseconds since the Unix epoch (UTC).
pub trait Clock: Send + Sync {
    /// Now.
    fn now_unix_ns(&self) -> i64;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_ns(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
            // A clock before 1970: report it as negative rather than panic.
            Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
        }
    }
}

/// A clock that only moves when told to. Clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock showing `unix_ns`.
    pub fn new(unix_ns: i64) -> Self {
        ManualClock(Arc::new(AtomicI64::new(unix_ns)))
    }

    /// Sets the time (it may go backwards: clocks do).
    pub fn set(&self, unix_ns: i64) {
        self.0.store(unix_ns, Ordering::SeqCst);
    }

    /// Moves the time forward by `ns`.
    pub fn advance(&self, ns: i64) {
        self.0.fetch_add(ns, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_unix_ns(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_unix_ns(&self) -> i64 {
        (**self).now_unix_ns()
    }
}
