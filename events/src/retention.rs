//! Retention: which recovery points a set of keep rules keeps.
//!
//! [`apply_retention`] is a pure function with the semantics of restic's
//! `forget`:
//!
//! * Points are considered newest first (by `time_unix_ns`; points with the
//!   same time keep their input order).
//! * `last: Some(n)` keeps the `n` newest points.
//! * `hourly`/`daily`/`weekly`/`monthly`/`yearly: Some(n)` keep the newest
//!   point of each of the `n` most recent *distinct buckets that contain a
//!   point* (calendar hours, days, ISO 8601 weeks, months, years: in UTC,
//!   or in the plan's time zone with [`apply_retention_in`]). A
//!   bucket without any point does not use up the count: `daily: Some(7)`
//!   means "seven days that have a backup", not "the last seven calendar
//!   days".
//! * `within: Some(d)` keeps every point taken within `d` of the reference
//!   time, which is the newest point's time, or `now` if the newest point is
//!   dated in the future (clock skew). Measuring from the newest point rather
//!   than from `now` means backups that stopped running do not make every
//!   point expire one day after the other.
//! * `tags` keeps every point carrying at least one of the tags.
//! * A point is kept if any rule keeps it; every rule that keeps it is listed
//!   in its reasons.
//!
//! **An empty policy keeps everything.** This is deliberate: a forget run
//! with no rule given must never delete every point by accident. Callers that
//! want to delete should refuse an empty policy (see [`KeepPolicy::is_empty`])
//! rather than pass it through.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Keep rules. A point is kept if any rule keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeepPolicy {
    /// Keep the N newest points.
    pub last: Option<u32>,
    /// Keep the newest point of each of the last N hours that have one.
    pub hourly: Option<u32>,
    /// Keep the newest point of each of the last N days that have one.
    pub daily: Option<u32>,
    /// Keep the newest point of each of the last N ISO weeks that have one.
    pub weekly: Option<u32>,
    /// Keep the newest point of each of the last N months that have one.
    pub monthly: Option<u32>,
    /// Keep the newest point of each of the last N years that have one.
    pub yearly: Option<u32>,
    /// Keep every point within this duration of the newest point.
    pub within: Option<Duration>,
    /// Keep every point carrying any of these tags.
    pub tags: Vec<String>,
}

impl KeepPolicy {
    /// True when no rule is set. An empty policy keeps everything; a caller
    /// about to delete should refuse it instead.
    pub fn is_empty(&self) -> bool {
        self.last.is_none()
            && self.hourly.is_none()
            && self.daily.is_none()
            && self.weekly.is_none()
            && self.monthly.is_none()
            && self.yearly.is_none()
            && self.within.is_none()
            && self.tags.is_empty()
    }
}

/// One point offered to [`apply_retention`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionCandidate<Id> {
    /// The caller's identifier of the point, returned in the decision.
    pub id: Id,
    /// When the point was taken, nanoseconds since the Unix epoch (UTC).
    pub time_unix_ns: i64,
    /// The point's tags.
    pub tags: Vec<String>,
}

/// Why a point is kept.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KeepReason {
    /// One of the `last` newest points.
    Last,
    /// Newest point of this UTC hour (`2026-12-03 14:00`).
    Hourly(String),
    /// Newest point of this UTC day (`2026-12-03`).
    Daily(String),
    /// Newest point of this ISO 8601 week (`2026-W49`).
    Weekly(String),
    /// Newest point of this UTC month (`2026-12`).
    Monthly(String),
    /// Newest point of this UTC year (`2026`).
    Yearly(String),
    /// Taken within the `within` window.
    Within,
    /// Carries this tag.
    Tag(String),
}

impl fmt::Display for KeepReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeepReason::Last => f.write_str("one of the last snapshots"),
            KeepReason::Hourly(b) => write!(f, "hourly snapshot for {b}"),
            KeepReason::Daily(b) => write!(f, "daily snapshot for {b}"),
            KeepReason::Weekly(b) => write!(f, "weekly snapshot for {b}"),
            KeepReason::Monthly(b) => write!(f, "monthly snapshot for {b}"),
            KeepReason::Yearly(b) => write!(f, "yearly snapshot for {b}"),
            KeepReason::Within => f.write_str("within the keep-within window"),
            KeepReason::Tag(t) => write!(f, "tagged {t:?}"),
        }
    }
}

/// The decision for one candidate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionDecision<Id> {
    /// The candidate's id.
    pub id: Id,
    /// When the candidate was taken (copied from the candidate).
    pub time_unix_ns: i64,
    /// Whether it is kept.
    pub keep: bool,
    /// Every rule that keeps it (empty when removed, and when the policy is
    /// empty).
    pub reasons: Vec<KeepReason>,
}

/// Applies `policy` to `candidates`; returns one decision per candidate,
/// newest first. See the module documentation for the exact semantics.
pub fn apply_retention<Id: Clone>(
    policy: &KeepPolicy,
    candidates: &[RetentionCandidate<Id>],
    now_unix_ns: i64,
) -> Vec<RetentionDecision<Id>> {
    apply_retention_in(policy, candidates, now_unix_ns, |_| 0)
}

/// [`apply_retention`] with the calendar buckets counted in local time:
/// `utc_offset_secs(t)` is the offset from UTC (seconds, east positive) of
/// the plan's time zone at instant `t`, so that "daily" keeps the newest
/// point of each local day (a point at 00:30 in Berlin belongs to that
/// day, not to the UTC day before). Reasons name local dates and hours.
pub fn apply_retention_in<Id: Clone>(
    policy: &KeepPolicy,
    candidates: &[RetentionCandidate<Id>],
    now_unix_ns: i64,
    utc_offset_secs: impl Fn(i64) -> i64,
) -> Vec<RetentionDecision<Id>> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    // Stable: equal times keep their input order.
    order.sort_by(|&a, &b| candidates[b].time_unix_ns.cmp(&candidates[a].time_unix_ns));

    if policy.is_empty() {
        return order
            .iter()
            .map(|&i| RetentionDecision {
                id: candidates[i].id.clone(),
                time_unix_ns: candidates[i].time_unix_ns,
                keep: true,
                reasons: Vec::new(),
            })
            .collect();
    }

    let mut buckets: Vec<Bucket> = Vec::new();
    let rules: [(Option<u32>, BucketKind); 6] = [
        (policy.last, BucketKind::Last),
        (policy.hourly, BucketKind::Hourly),
        (policy.daily, BucketKind::Daily),
        (policy.weekly, BucketKind::Weekly),
        (policy.monthly, BucketKind::Monthly),
        (policy.yearly, BucketKind::Yearly),
    ];
    for (count, kind) in rules {
        if let Some(n) = count {
            buckets.push(Bucket {
                kind,
                remaining: n,
                last: None,
            });
        }
    }

    let within_cutoff = policy.within.and_then(|d| {
        let newest = order.first().map(|&i| candidates[i].time_unix_ns)?;
        let reference = newest.min(now_unix_ns);
        let d_ns = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        Some(reference.saturating_sub(d_ns))
    });

    let mut out = Vec::with_capacity(candidates.len());
    for (rank, &i) in order.iter().enumerate() {
        let c = &candidates[i];
        let mut reasons = Vec::new();
        let local_ns = c
            .time_unix_ns
            .saturating_add(utc_offset_secs(c.time_unix_ns).saturating_mul(1_000_000_000));
        let t = CivilTime::from_unix_ns(local_ns);
        for b in &mut buckets {
            if b.remaining == 0 {
                continue;
            }
            let key = match b.kind {
                BucketKind::Last => rank as i64,
                other => t.bucket_key(other),
            };
            if b.last != Some(key) {
                b.last = Some(key);
                b.remaining -= 1;
                reasons.push(t.reason(b.kind));
            }
        }
        if let Some(cutoff) = within_cutoff {
            if c.time_unix_ns >= cutoff {
                reasons.push(KeepReason::Within);
            }
        }
        for tag in &policy.tags {
            if c.tags.iter().any(|t| t == tag) {
                reasons.push(KeepReason::Tag(tag.clone()));
            }
        }
        out.push(RetentionDecision {
            id: c.id.clone(),
            time_unix_ns: c.time_unix_ns,
            keep: !reasons.is_empty(),
            reasons,
        });
    }
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BucketKind {
    Last,
    Hourly,
    Daily,
    Weekly,
    Monthly,
    Yearly,
}

struct Bucket {
    kind: BucketKind,
    remaining: u32,
    last: Option<i64>,
}

/// A UTC calendar breakdown of a Unix time, enough for the buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CivilTime {
    /// Days since 1970-01-01.
    days: i64,
    hour: i64,
    year: i64,
    month: i64,
    day: i64,
    iso_year: i64,
    iso_week: i64,
}

const NS_PER_HOUR: i64 = 3_600_000_000_000;
const NS_PER_DAY: i64 = 24 * NS_PER_HOUR;

impl CivilTime {
    fn from_unix_ns(ns: i64) -> Self {
        let days = ns.div_euclid(NS_PER_DAY);
        let hour = ns.rem_euclid(NS_PER_DAY) / NS_PER_HOUR;
        let (year, month, day) = civil_from_days(days);
        // 1970-01-01 was a Thursday; Monday = 0.
        let weekday = (days + 3).rem_euclid(7);
        let thursday = days - weekday + 3;
        let (iso_year, _, _) = civil_from_days(thursday);
        let iso_week = (thursday - days_from_civil(iso_year, 1, 1)) / 7 + 1;
        CivilTime {
            days,
            hour,
            year,
            month,
            day,
            iso_year,
            iso_week,
        }
    }

    fn bucket_key(&self, kind: BucketKind) -> i64 {
        match kind {
            BucketKind::Last => 0,
            BucketKind::Hourly => self.days * 24 + self.hour,
            BucketKind::Daily => self.days,
            BucketKind::Weekly => self.iso_year * 100 + self.iso_week,
            BucketKind::Monthly => self.year * 100 + self.month,
            BucketKind::Yearly => self.year,
        }
    }

    fn reason(&self, kind: BucketKind) -> KeepReason {
        let date = format!("{:04}-{:02}-{:02}", self.year, self.month, self.day);
        match kind {
            BucketKind::Last => KeepReason::Last,
            BucketKind::Hourly => KeepReason::Hourly(format!("{date} {:02}:00", self.hour)),
            BucketKind::Daily => KeepReason::Daily(date),
            BucketKind::Weekly => {
                KeepReason::Weekly(format!("{:04}-W{:02}", self.iso_year, self.iso_week))
            }
            BucketKind::Monthly => {
                KeepReason::Monthly(format!("{:04}-{:02}", self.year, self.month))
            }
            BucketKind::Yearly => KeepReason::Yearly(format!("{:04}", self.year)),
        }
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (H. Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// (year, month, day) to days since 1970-01-01 (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests;
