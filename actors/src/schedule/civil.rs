//! A UTC instant in whole seconds that croner can search over.
//!
//! croner is generic over [`CronDateTime`]; implementing it here for our own
//! UTC type spares the build both `chrono` and `jiff`. Schedules are
//! evaluated in UTC: there is no daylight saving time to resolve, so every
//! wall clock time happens exactly once.

use std::cmp::Ordering;

use croner::errors::CronError;
use croner::{CivilDate, CivilDateTime, CivilTime, CronDateTime, Resolution, Weekday};

const SECS_PER_DAY: i64 = 86_400;

/// Seconds since the Unix epoch, read as a UTC wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct UtcSecs(pub(crate) i64);

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
pub(crate) fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian `(year, month, day)` of a count of days since
/// 1970-01-01 (H. Hinnant's `civil_from_days`).
pub(crate) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl CronDateTime for UtcSecs {
    fn to_civil(&self) -> CivilDateTime {
        let days = self.0.div_euclid(SECS_PER_DAY);
        let sod = self.0.rem_euclid(SECS_PER_DAY);
        let (y, m, d) = civil_from_days(days);
        // Our instants come from i64 nanoseconds (years 1677..2262), and
        // croner stops its searches at year 5000, so every part fits.
        CivilDateTime::new(
            CivilDate::from_parts_unchecked(y as i32, m as u32, d as u32),
            CivilTime::from_parts_unchecked(
                (sod / 3600) as u32,
                (sod % 3600 / 60) as u32,
                (sod % 60) as u32,
            ),
        )
    }

    fn civil_weekday(&self) -> Weekday {
        // 1970-01-01 was a Thursday (4 days after Sunday).
        let days = self.0.div_euclid(SECS_PER_DAY);
        Weekday::from_days_from_sunday((days + 4).rem_euclid(7) as u32)
    }

    fn resolve_civil(&self, civil: CivilDateTime) -> Result<Resolution<Self>, CronError> {
        let days = days_from_civil(
            i64::from(civil.year()),
            i64::from(civil.month()),
            i64::from(civil.day()),
        );
        let secs = days * SECS_PER_DAY
            + i64::from(civil.hour()) * 3600
            + i64::from(civil.minute()) * 60
            + i64::from(civil.second());
        Ok(Resolution::Single(UtcSecs(secs)))
    }

    fn checked_add_seconds(&self, seconds: i64) -> Option<Self> {
        self.0.checked_add(seconds).map(UtcSecs)
    }

    fn cmp_instant(&self, other: &Self) -> Ordering {
        self.0.cmp(&other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn epoch_is_a_thursday_at_midnight() {
        let t = UtcSecs(0);
        let c = t.to_civil();
        assert_eq!((c.year(), c.month(), c.day()), (1970, 1, 1));
        assert_eq!((c.hour(), c.minute(), c.second()), (0, 0, 0));
        assert_eq!(t.civil_weekday(), Weekday::Thursday);
        assert_eq!(UtcSecs(-1).civil_weekday(), Weekday::Wednesday);
    }

    proptest! {
        /// Our calendar arithmetic agrees with the `time` crate over the
        /// whole range of i64 nanoseconds.
        #[test]
        fn civil_agrees_with_time_crate(secs in -9_223_372_036i64..9_223_372_036) {
            let ours = UtcSecs(secs);
            let c = ours.to_civil();
            let theirs = time::OffsetDateTime::from_unix_timestamp(secs)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(i64::from(c.year()), i64::from(theirs.year()));
            prop_assert_eq!(c.month(), u32::from(u8::from(theirs.month())));
            prop_assert_eq!(c.day(), u32::from(theirs.day()));
            prop_assert_eq!(c.hour(), u32::from(theirs.hour()));
            prop_assert_eq!(c.minute(), u32::from(theirs.minute()));
            prop_assert_eq!(c.second(), u32::from(theirs.second()));
            prop_assert_eq!(
                ours.civil_weekday() as u32,
                u32::from(theirs.weekday().number_days_from_sunday())
            );
            prop_assert_eq!(ours.resolve_civil(c).ok(), Some(Resolution::Single(ours)));
        }
    }
}
