//! When plans run: cron schedules, catch-up after downtime, jitter and
//! single flight.
//!
//! Everything here is a pure function of its inputs (times are `i64`
//! nanoseconds since the Unix epoch, UTC, as in the event log); the
//! scheduler actor feeds them the time read from its injected
//! [`Clock`](crate::Clock).
//!
//! # Cron crate
//!
//! Expressions are parsed and evaluated by [`croner`] 4. Of the candidates
//! checked in 2026 it is the one actively maintained (4.0.x releases fixing
//! DST and `L`/`W`/`#` corner cases), follows the Open Cron Pattern
//! Specification (standard 5-field cron, nicknames such as `@daily`, `L`,
//! `W`, `#`), and is generic over its date type, so built with no default
//! features it needs neither `chrono` nor `jiff`: this crate plugs in its own
//! UTC type. `cron` (zslayton) requires `chrono` and a 6/7-field
//! Quartz-style syntax; `saffron` has had no release since 2020.
//!
//! # Rules
//!
//! * Schedules are evaluated in UTC, or in the plan's IANA time zone
//!   (`time_zone`, read from the system's tz database through `jiff`), to
//!   the minute: the 5-field form only (no seconds, no year field), so a
//!   slot is a whole minute. In a time zone, croner resolves the daylight
//!   saving changes: a wall-clock time skipped in spring runs at the first
//!   minute after the gap, one repeated in autumn runs once, at its first
//!   occurrence.
//! * [`catch_up`] after downtime yields **one** run that covers every missed
//!   slot, never one run per slot.
//! * [`jitter`] spreads plans with the same expression over a window, stably
//!   per plan id; [`PlanSchedule`] applies it.
//! * [`InFlight`] refuses a second concurrent run of the same plan.

mod civil;
mod inflight;
mod jitter;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

use crate::clock::{duration_to_ns, NANOS_PER_SEC};
use civil::UtcSecs;

pub use inflight::{AlreadyRunning, InFlight, RunGuard};
pub use jitter::jitter;

/// At most this many missed slots are counted by [`catch_up`]; past it the
/// count is reported as capped (the run is due all the same).
pub const MAX_COUNTED_SLOTS: u64 = 10_000;

/// Errors of schedule parsing and evaluation.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// The expression is not a valid 5-field cron expression.
    #[error("invalid schedule {expr:?}: {reason}")]
    Invalid {
        /// The expression as given.
        expr: String,
        /// What the parser objected to.
        reason: String,
    },
    /// The expression never matches after the given time (e.g. `0 0 30 2 *`).
    #[error("schedule {expr:?} has no occurrence after the given time")]
    NoOccurrence {
        /// The expression as given.
        expr: String,
    },
    /// The time zone is not in the tz database.
    #[error("unknown time zone {name:?}: expected an IANA name such as \"Europe/Berlin\" or \"UTC\" ({reason})")]
    UnknownTimeZone {
        /// The name as given.
        name: String,
        /// What the tz database said.
        reason: String,
    },
    /// The next occurrence lies outside the representable range of i64
    /// nanoseconds (after the year 2262).
    #[error("schedule {expr:?}: next occurrence is out of the supported time range")]
    OutOfRange {
        /// The expression as given.
        expr: String,
    },
}

/// A parsed cron schedule (5 fields, minute resolution), in UTC or in a
/// time zone.
///
/// Two schedules are equal when their expressions and time zones are
/// (`@daily` and `0 0 * * *` fire alike but are not equal).
#[derive(Clone)]
pub struct Schedule {
    expr: String,
    cron: Cron,
    /// None: UTC.
    zone: Option<(String, jiff::tz::TimeZone)>,
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Schedule")
            .field(&self.expr)
            .field(&self.zone.as_ref().map(|(n, _)| n))
            .finish()
    }
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.expr == other.expr
            && self.zone.as_ref().map(|(n, _)| n) == other.zone.as_ref().map(|(n, _)| n)
    }
}

/// The tz database plans' time zones are read from: the one bundled into
/// this binary, never the host's, so that a schedule fires at the same
/// instants wherever the service runs (a rule change comes with a release).
fn tz_database() -> &'static jiff::tz::TimeZoneDatabase {
    static DB: std::sync::OnceLock<jiff::tz::TimeZoneDatabase> = std::sync::OnceLock::new();
    DB.get_or_init(jiff::tz::TimeZoneDatabase::bundled)
}

/// Every time zone name a plan may use, sorted (the bundled database's
/// IANA names, spelled exactly).
pub fn time_zone_names() -> &'static [String] {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let mut names: Vec<String> = tz_database().available().map(|n| n.to_string()).collect();
        names.sort();
        names.dedup();
        names
    })
}

/// The time zone named `name` (`UTC`, `Europe/Berlin`: spelled as in
/// [`time_zone_names`]).
pub fn time_zone(name: &str) -> Result<jiff::tz::TimeZone, ScheduleError> {
    let unknown = |reason: String| ScheduleError::UnknownTimeZone {
        name: name.to_owned(),
        reason,
    };
    if time_zone_names()
        .binary_search_by(|n| n.as_str().cmp(name))
        .is_err()
    {
        return Err(unknown(
            "not in the tz database, or spelled otherwise".into(),
        ));
    }
    tz_database().get(name).map_err(|e| unknown(e.to_string()))
}

/// The offsets from UTC of the time zone `zone` (none: UTC), as a function
/// of an instant (ns since the epoch) giving seconds: what retention counts
/// its hours, days, weeks, months and years in.
pub fn utc_offsets(zone: Option<&str>) -> Result<UtcOffsets, ScheduleError> {
    Ok(UtcOffsets(zone.map(time_zone).transpose()?))
}

/// See [`utc_offsets`]; the default is UTC.
#[derive(Clone, Debug, Default)]
pub struct UtcOffsets(Option<jiff::tz::TimeZone>);

impl UtcOffsets {
    /// The offset from UTC in seconds at `unix_ns` (0 for UTC).
    pub fn at(&self, unix_ns: i64) -> i64 {
        let Some(zone) = &self.0 else { return 0 };
        let ts = jiff::Timestamp::from_nanosecond(i128::from(unix_ns))
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        i64::from(zone.to_offset(ts).seconds())
    }
}

impl Eq for Schedule {}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.expr)
    }
}

impl Schedule {
    /// Parses a 5-field cron expression (`minute hour day-of-month month
    /// day-of-week`) or a nickname (`@hourly`, `@daily`, `@weekly`,
    /// `@monthly`, `@yearly`).
    ///
    /// As in Vixie cron, when both day-of-month and day-of-week are
    /// restricted, a day matching either one matches.
    pub fn parse(expr: &str) -> Result<Self, ScheduleError> {
        let expr = expr.trim();
        let parser = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build();
        let cron = parser.parse(expr).map_err(|e| ScheduleError::Invalid {
            expr: expr.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(Schedule {
            expr: expr.to_owned(),
            cron,
            zone: None,
        })
    }

    /// Parses `expr` to be read in the time zone `zone` (none: UTC).
    pub fn parse_in(expr: &str, zone: Option<&str>) -> Result<Self, ScheduleError> {
        let mut schedule = Schedule::parse(expr)?;
        if let Some(name) = zone {
            schedule.zone = Some((name.to_owned(), time_zone(name)?));
        }
        Ok(schedule)
    }

    /// A plan's schedule, in its time zone.
    pub fn of_plan(definition: &vouch_events::PlanDefinition) -> Result<Self, ScheduleError> {
        Schedule::parse_in(&definition.schedule, definition.time_zone.as_deref())
    }

    /// The time zone's name, if not UTC.
    pub fn zone_name(&self) -> Option<&str> {
        self.zone.as_ref().map(|(n, _)| n.as_str())
    }

    /// The expression as given (trimmed).
    pub fn as_str(&self) -> &str {
        &self.expr
    }

    /// Whether `unix_ns` is exactly a slot of this schedule.
    pub fn is_slot(&self, unix_ns: i64) -> bool {
        if unix_ns.rem_euclid(NANOS_PER_SEC) != 0 {
            return false;
        }
        let secs = unix_ns.div_euclid(NANOS_PER_SEC);
        match &self.zone {
            None => self.cron.is_time_matching(&UtcSecs(secs)).unwrap_or(false),
            Some((_, tz)) => {
                zoned(secs, tz).is_some_and(|z| self.cron.is_time_matching(&z).unwrap_or(false))
            }
        }
    }

    /// The first slot after (or at, if `inclusive`) `secs`, in seconds.
    fn find_next(&self, secs: i64, inclusive: bool) -> Result<i64, ScheduleError> {
        match &self.zone {
            None => self
                .cron
                .find_next_occurrence(&UtcSecs(secs), inclusive)
                .map(|t| t.0)
                .map_err(|_| self.no_occurrence()),
            Some((_, tz)) => {
                let from = zoned(secs, tz).ok_or_else(|| self.out_of_range())?;
                self.cron
                    .find_next_occurrence(&from, inclusive)
                    .map(|z| z.timestamp().as_second())
                    .map_err(|_| self.no_occurrence())
            }
        }
    }

    /// The last slot before (or at, if `inclusive`) `secs`, in seconds.
    fn find_previous(&self, secs: i64, inclusive: bool) -> Result<i64, ScheduleError> {
        match &self.zone {
            None => self
                .cron
                .find_previous_occurrence(&UtcSecs(secs), inclusive)
                .map(|t| t.0)
                .map_err(|_| self.no_occurrence()),
            Some((_, tz)) => {
                let from = zoned(secs, tz).ok_or_else(|| self.out_of_range())?;
                self.cron
                    .find_previous_occurrence(&from, inclusive)
                    .map(|z| z.timestamp().as_second())
                    .map_err(|_| self.no_occurrence())
            }
        }
    }

    fn out_of_range(&self) -> ScheduleError {
        ScheduleError::OutOfRange {
            expr: self.expr.clone(),
        }
    }

    fn no_occurrence(&self) -> ScheduleError {
        ScheduleError::NoOccurrence {
            expr: self.expr.clone(),
        }
    }

    fn secs_to_ns(&self, secs: i64) -> Result<i64, ScheduleError> {
        secs.checked_mul(NANOS_PER_SEC)
            .ok_or_else(|| self.out_of_range())
    }

    /// The latest slot at or before `t_unix_ns`, if any is found.
    fn latest_at_or_before(&self, t_unix_ns: i64) -> Result<i64, ScheduleError> {
        let slot = self.find_previous(t_unix_ns.div_euclid(NANOS_PER_SEC), true)?;
        self.secs_to_ns(slot)
    }
}

/// `secs` as a wall-clock time in `tz`.
fn zoned(secs: i64, tz: &jiff::tz::TimeZone) -> Option<jiff::Zoned> {
    jiff::Timestamp::from_second(secs)
        .ok()
        .map(|ts| ts.to_zoned(tz.clone()))
}

impl FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Schedule::parse(s)
    }
}

/// The first slot of `schedule` strictly after `t_unix_ns`.
pub fn next_after(schedule: &Schedule, t_unix_ns: i64) -> Result<i64, ScheduleError> {
    // Slots are whole seconds: the first one after floor(t) is after t too.
    let next = schedule.find_next(t_unix_ns.div_euclid(NANOS_PER_SEC), false)?;
    schedule.secs_to_ns(next)
}

/// What the scheduler should do for one plan at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// No slot fell due since the last run; the next one is at `next_unix_ns`.
    NotDue {
        /// The next slot, strictly after both the reference time and now.
        next_unix_ns: i64,
    },
    /// Run once now. This single run covers every slot that fell due since
    /// the last run (or since the plan was created).
    Due {
        /// The latest slot at or before now: the one this run stands for.
        slot_unix_ns: i64,
        /// How many slots fell due since the last run, at least 1 (exact up
        /// to [`MAX_COUNTED_SLOTS`], see `capped`).
        slots: u64,
        /// `slots` stopped counting at [`MAX_COUNTED_SLOTS`]; more were
        /// missed.
        capped: bool,
    },
}

impl Decision {
    /// Whether a run is due.
    pub fn is_due(&self) -> bool {
        matches!(self, Decision::Due { .. })
    }

    /// Slots that were missed beyond the one a punctual run would have
    /// covered: 0 when on time, 0 when not due.
    pub fn missed(&self) -> u64 {
        match self {
            Decision::NotDue { .. } => 0,
            Decision::Due { slots, .. } => slots.saturating_sub(1),
        }
    }
}

/// The catch-up rule: is a run of the plan due at `now_unix_ns`?
///
/// The reference point is the last run (the time it started, or the slot it
/// covered) or, for a plan that never ran, its creation time; the later of
/// the two if both are given (a last run before creation is ignored). Slots
/// in `(reference, now]` are due. However many there are (the service was
/// down for a week, say), the answer is one [`Decision::Due`]: after the run
/// is recorded, asking again at the same `now` gives [`Decision::NotDue`].
///
/// A reference in the future (the clock went backwards, or the last run was
/// recorded by a clock that ran fast) falls back to `now`: the schedule goes
/// on from the next slot after now instead of pausing until the clock
/// catches up with the reference.
pub fn catch_up(
    schedule: &Schedule,
    last_run_unix_ns: Option<i64>,
    created_unix_ns: i64,
    now_unix_ns: i64,
) -> Result<Decision, ScheduleError> {
    let reference = last_run_unix_ns
        .map_or(created_unix_ns, |l| l.max(created_unix_ns))
        .min(now_unix_ns);
    let first = next_after(schedule, reference)?;
    if first > now_unix_ns {
        return Ok(Decision::NotDue {
            next_unix_ns: first,
        });
    }
    let slot_unix_ns = schedule.latest_at_or_before(now_unix_ns)?;
    let mut slots = 1u64;
    let mut capped = false;
    let mut cursor = first;
    while cursor < slot_unix_ns {
        if slots >= MAX_COUNTED_SLOTS {
            capped = true;
            break;
        }
        cursor = next_after(schedule, cursor)?;
        slots += 1;
    }
    Ok(Decision::Due {
        slot_unix_ns,
        slots,
        capped,
    })
}

/// A plan's schedule with its jitter applied: every slot fires `jitter`
/// later than the cron expression says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanSchedule {
    schedule: Schedule,
    jitter_ns: i64,
}

impl PlanSchedule {
    /// Combines `schedule` with the plan's stable [`jitter`], at most
    /// `max_jitter` (exclusive; zero disables jitter).
    pub fn new(schedule: Schedule, plan_id: &[u8], max_jitter: Duration) -> Self {
        Self::with_offset(schedule, jitter(plan_id, max_jitter))
    }

    /// Combines `schedule` with an explicit offset.
    pub fn with_offset(schedule: Schedule, offset: Duration) -> Self {
        PlanSchedule {
            schedule,
            jitter_ns: duration_to_ns(offset),
        }
    }

    /// The cron schedule without jitter.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The offset added to every slot.
    pub fn offset(&self) -> Duration {
        Duration::from_nanos(self.jitter_ns.unsigned_abs())
    }

    /// The first jittered firing time strictly after `t_unix_ns`.
    pub fn next_after(&self, t_unix_ns: i64) -> Result<i64, ScheduleError> {
        let slot = next_after(&self.schedule, t_unix_ns.saturating_sub(self.jitter_ns))?;
        self.shift(slot)
    }

    /// [`catch_up`] on the jittered firing times; the times in the
    /// returned [`Decision`] are firing times (slot plus offset).
    pub fn catch_up(
        &self,
        last_run_unix_ns: Option<i64>,
        created_unix_ns: i64,
        now_unix_ns: i64,
    ) -> Result<Decision, ScheduleError> {
        let j = self.jitter_ns;
        let d = catch_up(
            &self.schedule,
            last_run_unix_ns.map(|l| l.saturating_sub(j)),
            created_unix_ns.saturating_sub(j),
            now_unix_ns.saturating_sub(j),
        )?;
        Ok(match d {
            Decision::NotDue { next_unix_ns } => Decision::NotDue {
                next_unix_ns: self.shift(next_unix_ns)?,
            },
            Decision::Due {
                slot_unix_ns,
                slots,
                capped,
            } => Decision::Due {
                slot_unix_ns: self.shift(slot_unix_ns)?,
                slots,
                capped,
            },
        })
    }

    fn shift(&self, slot: i64) -> Result<i64, ScheduleError> {
        slot.checked_add(self.jitter_ns)
            .ok_or_else(|| ScheduleError::OutOfRange {
                expr: self.schedule.expr.clone(),
            })
    }
}

#[cfg(test)]
mod tests;
