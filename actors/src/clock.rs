//! The one clock abstraction of the orchestration layer.
//!
//! Everything that decides *when* (the scheduler, backoff, leases, alert
//! deduplication) reads time through a [`Clock`], so tests and the chaos
//! harness can move time by hand with a [`ManualClock`] instead of sleeping.
//!
//! Time is an `i64` count of nanoseconds since the Unix epoch, UTC: the same
//! unit the event log records (`*_unix_ns` fields), which covers the years
//! 1677 to 2262.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use time::OffsetDateTime;

/// Nanoseconds in one second.
pub const NANOS_PER_SEC: i64 = 1_000_000_000;

/// A source of the current time, in UTC.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, as nanoseconds since the Unix epoch (UTC).
    fn now_unix_ns(&self) -> i64;

    /// Now, as a UTC date and time.
    fn now_utc(&self) -> OffsetDateTime {
        unix_ns_to_utc(self.now_unix_ns())
    }
}

/// Converts nanoseconds since the Unix epoch to a UTC date and time.
///
/// Every `i64` is in range for [`OffsetDateTime`], so this cannot fail.
pub fn unix_ns_to_utc(unix_ns: i64) -> OffsetDateTime {
    // i64 nanoseconds span years 1677..2262, well inside `time`'s range.
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ns))
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// Converts a [`Duration`] to nanoseconds, saturating at `i64::MAX`.
pub fn duration_to_ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// The operating system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_ns(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => duration_to_ns(d),
            // A clock set before 1970: report it as negative time, do not panic.
            Err(e) => duration_to_ns(e.duration()).saturating_neg(),
        }
    }
}

/// A clock that only moves when told to.
///
/// Cloning shares the same time: hand one clone to the code under test and
/// keep another to move time. Safe to use from several threads.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock showing `unix_ns`.
    pub fn new(unix_ns: i64) -> Self {
        ManualClock(Arc::new(AtomicI64::new(unix_ns)))
    }

    /// Sets the time to `unix_ns` (it may go backwards, as a skewed clock does).
    pub fn set(&self, unix_ns: i64) {
        self.0.store(unix_ns, Ordering::SeqCst);
    }

    /// Moves the time forward by `by` (saturating) and returns the new time.
    pub fn advance(&self, by: Duration) -> i64 {
        let by = duration_to_ns(by);
        let prev = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(by))
            })
            .unwrap_or_else(|t| t);
        prev.saturating_add(by)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(5 * NANOS_PER_SEC);
        assert_eq!(c.now_unix_ns(), 5 * NANOS_PER_SEC);
        assert_eq!(c.now_unix_ns(), 5 * NANOS_PER_SEC);
        assert_eq!(c.advance(Duration::from_secs(2)), 7 * NANOS_PER_SEC);
        c.set(-1);
        assert_eq!(c.now_unix_ns(), -1);
    }

    #[test]
    fn manual_clock_clones_share_time_across_threads() {
        let c = ManualClock::new(0);
        let shared: Arc<dyn Clock> = Arc::new(c.clone());
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.advance(Duration::from_nanos(1));
                    }
                })
            })
            .collect();
        for h in handles {
            assert!(h.join().is_ok());
        }
        assert_eq!(shared.now_unix_ns(), 4000);
    }

    #[test]
    fn advance_saturates() {
        let c = ManualClock::new(i64::MAX - 1);
        assert_eq!(c.advance(Duration::from_secs(1)), i64::MAX);
    }

    #[test]
    fn now_utc_matches_unix_ns() {
        let c = ManualClock::new(1_700_000_000 * NANOS_PER_SEC + 42);
        let t = c.now_utc();
        assert_eq!(t.unix_timestamp(), 1_700_000_000);
        assert_eq!(t.nanosecond(), 42);
        assert_eq!(t.offset(), time::UtcOffset::UTC);
    }

    #[test]
    fn system_clock_is_after_2024() {
        // 2024-01-01T00:00:00Z
        assert!(SystemClock.now_unix_ns() > 1_704_067_200 * NANOS_PER_SEC);
    }
}
