//! The one clock abstraction of the service.
//!
//! Everything that decides *when* (the event log's recorded times, the
//! scheduler, retry due times, retention's protect list, restart backoff,
//! alert deduplication) reads time through one injected [`Clock`]: the
//! events crate's trait, re-exported here, so a single [`ManualClock`]
//! drives the log and the actors alike.
//!
//! Time is an `i64` count of nanoseconds since the Unix epoch, UTC: the same
//! unit the event log records (`*_unix_ns` fields), which covers the years
//! 1677 to 2262.
//!
//! Waiting is separate from reading the time. An actor that must act at a
//! due time keeps the due time (in clock nanoseconds) as its state and
//! re-checks it on every tick and on a wake-up timer computed by
//! [`timer_delay`]; the timer is only a hint (tokio time, which a paused
//! tokio runtime drives), the decision is always taken against the clock.
//! So a simulator moves a [`ManualClock`] and sends a tick, and nothing
//! waits on the real time.

use std::time::Duration;

use time::OffsetDateTime;
pub use vouch_events::{Clock, ManualClock, SystemClock};

/// Nanoseconds in one second.
pub const NANOS_PER_SEC: i64 = 1_000_000_000;

/// Converts nanoseconds since the Unix epoch to a UTC date and time.
///
/// Every `i64` is in range for [`OffsetDateTime`], so this cannot fail.
pub fn unix_ns_to_utc(unix_ns: i64) -> OffsetDateTime {
    // i64 nanoseconds span years 1677..2262, well inside `time`'s range.
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ns))
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// Now, by `clock`, as a UTC date and time.
pub fn now_utc(clock: &dyn Clock) -> OffsetDateTime {
    unix_ns_to_utc(clock.now_unix_ns())
}

/// Converts a [`Duration`] to nanoseconds, saturating at `i64::MAX`.
pub fn duration_to_ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// How long a wake-up timer should wait for `due_unix_ns`, as `clock` reads
/// now: zero when it is due, at most `cap` (so a clock that jumps is
/// noticed within `cap` of real time even without a tick).
pub fn timer_delay(clock: &dyn Clock, due_unix_ns: i64, cap: Duration) -> Duration {
    let left = due_unix_ns.saturating_sub(clock.now_unix_ns());
    if left <= 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(u64::try_from(left).unwrap_or(u64::MAX)).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(5 * NANOS_PER_SEC);
        assert_eq!(c.now_unix_ns(), 5 * NANOS_PER_SEC);
        c.advance(duration_to_ns(Duration::from_secs(2)));
        assert_eq!(c.now_unix_ns(), 7 * NANOS_PER_SEC);
        c.set(-1);
        assert_eq!(c.now_unix_ns(), -1);
    }

    #[test]
    fn one_manual_clock_is_both_crates_clock() {
        // The log's clock and the actors' clock are one trait: the same
        // value can be handed to both.
        let c = ManualClock::new(42);
        let for_log: Arc<dyn vouch_events::Clock> = Arc::new(c.clone());
        let for_actors: Arc<dyn Clock> = for_log.clone();
        c.set(7);
        assert_eq!(for_actors.now_unix_ns(), 7);
    }

    #[test]
    fn timer_delay_is_read_against_the_clock() {
        let c = ManualClock::new(10 * NANOS_PER_SEC);
        let cap = Duration::from_secs(60);
        assert_eq!(
            timer_delay(&c, 15 * NANOS_PER_SEC, cap),
            Duration::from_secs(5)
        );
        assert_eq!(timer_delay(&c, 5 * NANOS_PER_SEC, cap), Duration::ZERO);
        assert_eq!(timer_delay(&c, i64::MAX, cap), cap);
    }

    #[test]
    fn now_utc_matches_unix_ns() {
        let c = ManualClock::new(1_700_000_000 * NANOS_PER_SEC + 42);
        let t = now_utc(&c);
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
