//! Report periods: UTC days, ISO weeks (Monday to Monday) and calendar
//! months, as half-open spans `[start, end)` of nanoseconds since the Unix
//! epoch. Pure arithmetic on dates; no clock.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use time::{Date, Month, OffsetDateTime, Time};

use super::ReportError;
use crate::clock::unix_ns_to_utc;

/// How long a report's period is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PeriodKind {
    /// A UTC day, 00:00 to 00:00.
    Daily,
    /// An ISO week: Monday 00:00 UTC to the next Monday.
    Weekly,
    /// A calendar month, from the 1st 00:00 UTC.
    Monthly,
}

impl PeriodKind {
    /// Every kind, shortest first.
    pub const ALL: [PeriodKind; 3] = [PeriodKind::Daily, PeriodKind::Weekly, PeriodKind::Monthly];

    /// The name used in the API and the configuration.
    pub fn as_str(&self) -> &'static str {
        match self {
            PeriodKind::Daily => "daily",
            PeriodKind::Weekly => "weekly",
            PeriodKind::Monthly => "monthly",
        }
    }
}

impl fmt::Display for PeriodKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PeriodKind {
    type Err = ReportError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "daily" => Ok(PeriodKind::Daily),
            "weekly" => Ok(PeriodKind::Weekly),
            "monthly" => Ok(PeriodKind::Monthly),
            other => Err(ReportError::BadPeriod(format!(
                "unknown period {other:?}: daily, weekly or monthly"
            ))),
        }
    }
}

/// One period: `[start, end)` in UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Period {
    /// Its kind.
    pub kind: PeriodKind,
    /// Its first instant (nanoseconds since the Unix epoch).
    pub start_unix_ns: i64,
    /// The first instant after it.
    pub end_unix_ns: i64,
}

/// Midnight UTC of `date`, in nanoseconds since the epoch (saturating
/// outside the `i64` range, which no date a log holds reaches).
fn midnight_ns(date: Date) -> i64 {
    let at = date.with_time(Time::MIDNIGHT).assume_utc();
    i64::try_from(at.unix_timestamp_nanos()).unwrap_or(if at.year() < 1970 {
        i64::MIN
    } else {
        i64::MAX
    })
}

/// The first day of the period of `kind` holding `date`.
fn first_day(kind: PeriodKind, date: Date) -> Date {
    match kind {
        PeriodKind::Daily => date,
        PeriodKind::Weekly => {
            let back = i64::from(date.weekday().number_days_from_monday());
            date.checked_sub(time::Duration::days(back)).unwrap_or(date)
        }
        PeriodKind::Monthly => date.replace_day(1).unwrap_or(date),
    }
}

/// The first day of the period after the one starting on `first`.
fn next_first_day(kind: PeriodKind, first: Date) -> Date {
    match kind {
        PeriodKind::Daily => first.next_day().unwrap_or(first),
        PeriodKind::Weekly => first.checked_add(time::Duration::days(7)).unwrap_or(first),
        PeriodKind::Monthly => {
            let (year, month) = match first.month() {
                Month::December => (first.year() + 1, Month::January),
                m => (first.year(), m.next()),
            };
            Date::from_calendar_date(year, month, 1).unwrap_or(first)
        }
    }
}

impl Period {
    /// The period of `kind` that holds the instant `unix_ns`.
    pub fn containing(kind: PeriodKind, unix_ns: i64) -> Period {
        let first = first_day(kind, unix_ns_to_utc(unix_ns).date());
        Period {
            kind,
            start_unix_ns: midnight_ns(first),
            end_unix_ns: midnight_ns(next_first_day(kind, first)),
        }
    }

    /// The newest period of `kind` that ended at or before `unix_ns`.
    pub fn last_ended(kind: PeriodKind, unix_ns: i64) -> Period {
        Period::containing(kind, unix_ns).previous()
    }

    /// The period before this one.
    pub fn previous(&self) -> Period {
        Period::containing(self.kind, self.start_unix_ns.saturating_sub(1))
    }

    /// The period after this one.
    pub fn next(&self) -> Period {
        Period::containing(self.kind, self.end_unix_ns)
    }

    /// Its first instant as a UTC date and time.
    pub fn start(&self) -> OffsetDateTime {
        unix_ns_to_utc(self.start_unix_ns)
    }

    /// Its length in nanoseconds.
    pub fn len_ns(&self) -> i64 {
        self.end_unix_ns.saturating_sub(self.start_unix_ns)
    }

    /// Its name: `2026-12-06`, `2026-W49` (ISO week), `2026-12`.
    pub fn label(&self) -> String {
        let d = self.start().date();
        match self.kind {
            PeriodKind::Daily => {
                format!("{:04}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day())
            }
            PeriodKind::Weekly => {
                let (year, week, _) = d.to_iso_week_date();
                format!("{year:04}-W{week:02}")
            }
            PeriodKind::Monthly => format!("{:04}-{:02}", d.year(), u8::from(d.month())),
        }
    }

    /// Chart buckets: hours of a day, days of a week or a month, as
    /// `[start, end)` spans.
    pub fn buckets(&self) -> Vec<(i64, i64)> {
        const HOUR_NS: i64 = 3_600 * 1_000_000_000;
        let mut out = Vec::new();
        match self.kind {
            PeriodKind::Daily => {
                let mut t = self.start_unix_ns;
                while t < self.end_unix_ns {
                    out.push((t, t.saturating_add(HOUR_NS).min(self.end_unix_ns)));
                    t = t.saturating_add(HOUR_NS);
                }
            }
            PeriodKind::Weekly | PeriodKind::Monthly => {
                let mut day = Period::containing(PeriodKind::Daily, self.start_unix_ns);
                while day.start_unix_ns < self.end_unix_ns {
                    out.push((day.start_unix_ns, day.end_unix_ns));
                    day = day.next();
                }
            }
        }
        out
    }
}

/// Parses the `at` of a request: an RFC 3339 time or a date
/// (`YYYY-MM-DD`, midnight UTC), as nanoseconds since the epoch (clamped
/// to the range of `i64` nanoseconds, the years 1677 to 2262).
pub fn parse_instant(s: &str) -> Result<i64, ReportError> {
    let bad = || {
        ReportError::BadPeriod(format!(
            "{s:?} is neither a date (2026-12-06) nor an RFC 3339 time (2026-12-06T10:00:00Z)"
        ))
    };
    if let Ok(t) = OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339) {
        // Outside the years 1677..2262 (i64 nanoseconds): the nearest end.
        let ns = t.unix_timestamp_nanos();
        return Ok(i64::try_from(ns).unwrap_or(if ns < 0 { i64::MIN } else { i64::MAX }));
    }
    let date = Date::parse(s, time::macros::format_description!("[year]-[month]-[day]"))
        .map_err(|_| bad())?;
    Ok(midnight_ns(date))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> i64 {
        parse_instant(s).expect("a valid instant")
    }

    fn span(p: Period) -> (String, String) {
        (
            crate::report::rfc3339(p.start_unix_ns),
            crate::report::rfc3339(p.end_unix_ns),
        )
    }

    #[test]
    fn a_day_runs_from_midnight_to_midnight_utc() {
        let p = Period::containing(PeriodKind::Daily, at("2026-12-06T23:59:59.999999999Z"));
        assert_eq!(
            span(p),
            ("2026-12-06T00:00:00Z".into(), "2026-12-07T00:00:00Z".into())
        );
        assert_eq!(p.label(), "2026-12-06");
        // The end belongs to the next day.
        assert_eq!(
            Period::containing(PeriodKind::Daily, p.end_unix_ns),
            p.next()
        );
        assert_eq!(p.next().previous(), p);
        // An offset is converted to UTC first.
        let q = Period::containing(PeriodKind::Daily, at("2026-12-07T00:30:00+01:00"));
        assert_eq!(q, p);
        assert_eq!(p.buckets().len(), 24);
    }

    #[test]
    fn weeks_are_iso_weeks_starting_on_monday() {
        // Sunday 2026-12-06 is in the week of Monday 2026-11-30.
        let p = Period::containing(PeriodKind::Weekly, at("2026-12-06T12:00:00Z"));
        assert_eq!(
            span(p),
            ("2026-11-30T00:00:00Z".into(), "2026-12-07T00:00:00Z".into())
        );
        assert_eq!(p.label(), "2026-W49");
        // A Monday starts its own week.
        assert_eq!(
            Period::containing(PeriodKind::Weekly, at("2026-12-07")).start_unix_ns,
            p.end_unix_ns
        );
        // ISO week 1 of 2027 starts on Monday 2027-01-04; 2027-01-01 is in
        // week 53 of 2026, which started on 2026-12-28.
        let w = Period::containing(PeriodKind::Weekly, at("2027-01-01"));
        assert_eq!(w.label(), "2026-W53");
        assert_eq!(span(w).0, "2026-12-28T00:00:00Z");
        assert_eq!(w.next().label(), "2027-W01");
        // Monday 2024-12-30 is in week 1 of 2025.
        assert_eq!(
            Period::containing(PeriodKind::Weekly, at("2024-12-31")).label(),
            "2025-W01"
        );
        assert_eq!(p.buckets().len(), 7);
    }

    #[test]
    fn months_follow_the_calendar_with_leap_years() {
        let feb = |y: i32| Period::containing(PeriodKind::Monthly, at(&format!("{y}-02-15")));
        assert_eq!(feb(2024).buckets().len(), 29, "2024 is a leap year");
        assert_eq!(feb(2026).buckets().len(), 28);
        assert_eq!(feb(2000).buckets().len(), 29, "divisible by 400");
        assert_eq!(feb(2100).buckets().len(), 28, "divisible by 100, not 400");
        assert_eq!(
            span(feb(2024)),
            ("2024-02-01T00:00:00Z".into(), "2024-03-01T00:00:00Z".into())
        );
        // December runs into the next year.
        let dec = Period::containing(PeriodKind::Monthly, at("2026-12-31T23:00:00Z"));
        assert_eq!(
            span(dec),
            ("2026-12-01T00:00:00Z".into(), "2027-01-01T00:00:00Z".into())
        );
        assert_eq!(dec.label(), "2026-12");
        assert_eq!(dec.next().label(), "2027-01");
        assert_eq!(dec.next().previous(), dec);
        // 29 February of a leap year is a day of its own.
        let d = Period::containing(PeriodKind::Daily, at("2024-02-29T08:00:00Z"));
        assert_eq!(d.label(), "2024-02-29");
        assert_eq!(d.next().label(), "2024-03-01");
    }

    #[test]
    fn the_last_ended_period_ends_at_or_before_now() {
        let now = at("2026-12-07T00:00:00Z");
        let p = Period::last_ended(PeriodKind::Daily, now);
        assert_eq!(p.label(), "2026-12-06");
        assert_eq!(p.end_unix_ns, now);
        let m = Period::last_ended(PeriodKind::Monthly, at("2026-03-01T00:00:01Z"));
        assert_eq!(m.label(), "2026-02");
    }

    #[test]
    fn instants_parse_as_dates_or_rfc3339_and_nothing_else() {
        assert_eq!(at("1970-01-02"), 86_400 * 1_000_000_000);
        assert_eq!(at("1970-01-01T00:00:01Z"), 1_000_000_000);
        for bad in [
            "",
            "yesterday",
            "2026-13-01",
            "2026-02-30",
            "2026-12-06 10:00",
        ] {
            assert!(parse_instant(bad).is_err(), "{bad:?}");
        }
        assert!("hourly".parse::<PeriodKind>().is_err());
        assert_eq!(
            "weekly".parse::<PeriodKind>().ok(),
            Some(PeriodKind::Weekly)
        );
    }
}
