use std::time::Duration;

use proptest::prelude::*;

use super::civil::days_from_civil;
use super::*;

const MIN: i64 = 60 * NANOS_PER_SEC;
const HOUR: i64 = 60 * MIN;
const DAY: i64 = 24 * HOUR;

/// `y-m-d h:mi:00` UTC as unix nanoseconds.
fn at(y: i64, m: i64, d: i64, h: i64, mi: i64) -> i64 {
    days_from_civil(y, m, d) * DAY + h * HOUR + mi * MIN
}

fn sched(expr: &str) -> Schedule {
    match Schedule::parse(expr) {
        Ok(s) => s,
        Err(e) => panic!("{expr}: {e}"),
    }
}

fn due(slot_unix_ns: i64, slots: u64) -> Decision {
    Decision::Due {
        slot_unix_ns,
        slots,
        capped: false,
    }
}

#[test]
fn parses_five_fields_and_nicknames() {
    for expr in [
        "* * * * *",
        "0 3 * * *",
        "*/15 * * * 1-5",
        "@daily",
        " @hourly ",
    ] {
        assert!(Schedule::parse(expr).is_ok(), "{expr}");
    }
    assert_eq!(sched(" @hourly ").as_str(), "@hourly");
    assert_eq!(sched("0 3 * * *").to_string(), "0 3 * * *");
}

#[test]
fn rejects_seconds_years_and_garbage() {
    for expr in [
        "",
        "0 0 3 * * *",
        "0 3 * * * 2030",
        "61 * * * *",
        "every day",
        "* * *",
    ] {
        match Schedule::parse(expr) {
            Err(ScheduleError::Invalid { expr: e, .. }) => assert_eq!(e, expr.trim()),
            other => panic!("{expr:?} gave {other:?}"),
        }
    }
}

#[test]
fn next_after_is_strictly_after() {
    let hourly = sched("0 * * * *");
    let ten = at(2026, 3, 1, 10, 0);
    assert_eq!(next_after(&hourly, ten).ok(), Some(ten + HOUR));
    assert_eq!(next_after(&hourly, ten + 30 * MIN).ok(), Some(ten + HOUR));
    assert_eq!(next_after(&hourly, ten - 1).ok(), Some(ten));
}

#[test]
fn next_after_handles_calendar_rules() {
    // Last day of February in a leap year, then in a common year.
    let monthly_last = sched("0 0 L * *");
    assert_eq!(
        next_after(&monthly_last, at(2028, 2, 1, 0, 0)).ok(),
        Some(at(2028, 2, 29, 0, 0))
    );
    assert_eq!(
        next_after(&monthly_last, at(2027, 2, 1, 0, 0)).ok(),
        Some(at(2027, 2, 28, 0, 0))
    );
    // Mondays at 02:30; 2026-03-04 is a Wednesday.
    let weekly = sched("30 2 * * MON");
    assert_eq!(
        next_after(&weekly, at(2026, 3, 4, 12, 0)).ok(),
        Some(at(2026, 3, 9, 2, 30))
    );
    // Before the epoch too.
    assert_eq!(
        next_after(&sched("@daily"), -1).ok(),
        Some(0),
        "1970-01-01 00:00 is the next daily slot after -1 ns"
    );
}

#[test]
fn impossible_schedule_has_no_occurrence() {
    let never = sched("0 0 30 2 *");
    assert!(matches!(
        next_after(&never, 0),
        Err(ScheduleError::NoOccurrence { .. })
    ));
}

#[test]
fn not_due_before_the_first_slot_after_creation() {
    let hourly = sched("0 * * * *");
    let created = at(2026, 3, 1, 9, 10);
    assert_eq!(
        catch_up(&hourly, None, created, at(2026, 3, 1, 9, 59)).ok(),
        Some(Decision::NotDue {
            next_unix_ns: at(2026, 3, 1, 10, 0)
        })
    );
    // A slot equal to the creation time is not due: only slots after it.
    assert!(
        !catch_up(&hourly, None, at(2026, 3, 1, 9, 0), at(2026, 3, 1, 9, 30))
            .map(|d| d.is_due())
            .unwrap_or(true)
    );
}

#[test]
fn due_exactly_at_the_slot() {
    let hourly = sched("0 * * * *");
    let created = at(2026, 3, 1, 9, 10);
    let ten = at(2026, 3, 1, 10, 0);
    let d = catch_up(&hourly, None, created, ten).ok();
    assert_eq!(d, Some(due(ten, 1)));
    assert_eq!(d.map(|d| d.missed()), Some(0));
}

#[test]
fn one_run_covers_a_day_of_downtime() {
    let hourly = sched("0 * * * *");
    let created = at(2026, 1, 1, 0, 0);
    let last = at(2026, 3, 1, 10, 0);
    let now = at(2026, 3, 2, 10, 5);
    let d = catch_up(&hourly, Some(last), created, now).ok();
    assert_eq!(d, Some(due(at(2026, 3, 2, 10, 0), 24)));
    assert_eq!(d.map(|d| d.missed()), Some(23));
    // The run is recorded at `now`: nothing more is due until 11:00.
    assert_eq!(
        catch_up(&hourly, Some(now), created, now).ok(),
        Some(Decision::NotDue {
            next_unix_ns: at(2026, 3, 2, 11, 0)
        })
    );
}

#[test]
fn long_downtime_is_counted_up_to_the_cap() {
    let every_minute = sched("* * * * *");
    let last = at(2026, 3, 1, 0, 0);
    let now = at(2026, 3, 31, 0, 0) + 30 * NANOS_PER_SEC;
    assert_eq!(
        catch_up(&every_minute, Some(last), last, now).ok(),
        Some(Decision::Due {
            slot_unix_ns: at(2026, 3, 31, 0, 0),
            slots: MAX_COUNTED_SLOTS,
            capped: true,
        })
    );
}

#[test]
fn clock_going_back_is_not_due_but_does_not_pause_the_schedule() {
    let hourly = sched("0 * * * *");
    // The last run was recorded a day ahead (a clock that ran fast).
    let last = at(2026, 3, 2, 12, 0);
    assert_eq!(
        catch_up(&hourly, Some(last), 0, at(2026, 3, 1, 11, 30)).ok(),
        Some(Decision::NotDue {
            next_unix_ns: at(2026, 3, 1, 12, 0)
        }),
        "the next slot after now, not after the future reference"
    );
}

#[test]
fn last_run_before_creation_is_ignored() {
    let hourly = sched("0 * * * *");
    let created = at(2026, 3, 1, 10, 30);
    let d = catch_up(
        &hourly,
        Some(at(2026, 2, 1, 0, 0)),
        created,
        at(2026, 3, 1, 11, 0),
    );
    assert_eq!(d.ok(), Some(due(at(2026, 3, 1, 11, 0), 1)));
}

#[test]
fn plan_schedule_shifts_slots_by_its_offset() {
    let p = PlanSchedule::with_offset(sched("0 * * * *"), Duration::from_secs(90));
    let ten = at(2026, 3, 1, 10, 0);
    let fire = ten + 90 * NANOS_PER_SEC;
    assert_eq!(p.offset(), Duration::from_secs(90));
    assert_eq!(p.next_after(ten).ok(), Some(fire));
    assert_eq!(p.next_after(fire).ok(), Some(fire + HOUR));
    let last = fire - HOUR;
    assert_eq!(
        p.catch_up(Some(last), 0, fire - 1).ok(),
        Some(Decision::NotDue { next_unix_ns: fire })
    );
    assert_eq!(p.catch_up(Some(last), 0, fire).ok(), Some(due(fire, 1)));
}

#[test]
fn jitter_is_zero_without_a_window() {
    assert_eq!(jitter(b"plan-a", Duration::ZERO), Duration::ZERO);
    assert_eq!(
        jitter(b"plan-a", Duration::from_micros(999)),
        Duration::ZERO
    );
}

#[test]
fn jitter_is_pinned() {
    // Golden values: changing the derivation moves every plan's firing time.
    let got = jitter(b"plan-a", Duration::from_secs(600));
    assert_eq!(got, jitter(b"plan-a", Duration::from_secs(600)));
    assert_eq!(got.as_millis(), GOLDEN_PLAN_A_600S_MS);
}

const GOLDEN_PLAN_A_600S_MS: u128 = 46_623;

#[test]
fn jitter_spreads_plans_over_the_window() {
    let max = Duration::from_secs(600);
    let mut minutes = [0u32; 10];
    for i in 0..1000u32 {
        let j = jitter(format!("plan-{i}").as_bytes(), max);
        minutes[(j.as_secs() / 60) as usize] += 1;
    }
    // 100 expected per minute; a fair hash stays far from these bounds.
    assert!(
        minutes.iter().all(|&n| (50..150).contains(&n)),
        "{minutes:?}"
    );
}

#[test]
fn in_flight_refuses_a_second_run_of_the_same_plan() {
    let reg = InFlight::new();
    let a = reg.try_start("plan-a");
    assert!(a.is_ok());
    assert_eq!(reg.try_start("plan-a").err(), Some(AlreadyRunning));
    let b = reg.try_start("plan-b");
    assert!(b.is_ok());
    assert_eq!(reg.len(), 2);
    drop(a);
    assert!(!reg.is_running(&"plan-a"));
    let again = reg.try_start("plan-a");
    assert_eq!(again.as_ref().map(|g| *g.key()).ok(), Some("plan-a"));
    drop((again, b));
    assert!(reg.is_empty());
}

#[test]
fn in_flight_is_released_when_a_run_panics() {
    let reg = InFlight::new();
    let r2 = reg.clone();
    let outcome = std::panic::catch_unwind(move || {
        let _guard = r2.try_start(7u64);
        panic!("the run blew up");
    });
    assert!(outcome.is_err());
    assert!(!reg.is_running(&7));
}

#[test]
fn in_flight_admits_exactly_one_of_many_threads() {
    let reg = InFlight::new();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let reg = reg.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                // Hold the guard until every thread has tried.
                let g = reg.try_start("plan");
                barrier.wait();
                g.is_ok()
            })
        })
        .collect();
    let winners = handles
        .into_iter()
        .map(|h| h.join().unwrap_or(false))
        .filter(|&won| won)
        .count();
    assert_eq!(winners, 1);
}

const EXPRS: &[&str] = &[
    "* * * * *",
    "*/7 * * * *",
    "0 * * * *",
    "15 3 * * *",
    "0 12 * * 1-5",
    "0 0 1 * *",
    "0 0 L * *",
    "@weekly",
];

/// Times between 1990 and 2100.
fn any_time() -> impl Strategy<Value = i64> {
    631_152_000 * NANOS_PER_SEC..4_102_444_800 * NANOS_PER_SEC
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// next_after is strictly after t, is a slot, and skips no slot.
    #[test]
    fn next_after_is_the_first_slot_after_t(i in 0..EXPRS.len(), t in any_time()) {
        let s = sched(EXPRS[i]);
        let n = next_after(&s, t).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(n > t);
        prop_assert!(s.is_slot(n));
        let before = s.latest_at_or_before(n - 1).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(before <= t, "slot {before} lies between {t} and {n}");
    }

    /// Whatever the downtime, a due decision is one run: once recorded,
    /// nothing more is due at the same instant.
    #[test]
    fn catch_up_yields_at_most_one_run(
        i in 0..EXPRS.len(),
        created in any_time(),
        since_created in 0i64..400 * DAY,
        downtime in 0i64..400 * DAY,
        ran_before in any::<bool>(),
    ) {
        let s = sched(EXPRS[i]);
        let last = ran_before.then_some(created + since_created);
        let now = created + since_created + downtime;
        let d = catch_up(&s, last, created, now).map_err(|e| TestCaseError::fail(e.to_string()))?;
        if let Decision::Due { slot_unix_ns, slots, .. } = d {
            prop_assert!(slots >= 1);
            prop_assert!(slot_unix_ns <= now && s.is_slot(slot_unix_ns));
            let again = catch_up(&s, Some(now), created, now).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(!again.is_due());
        }
        if let Decision::NotDue { next_unix_ns } = d {
            prop_assert!(next_unix_ns > now);
        }
    }

    /// The slot count agrees with a minute-by-minute walk.
    #[test]
    fn catch_up_counts_every_missed_slot(
        i in 0..EXPRS.len(),
        last in any_time(),
        downtime in 0i64..3 * DAY,
    ) {
        let s = sched(EXPRS[i]);
        let now = last + downtime;
        let first_minute = (last.div_euclid(MIN) + 1) * MIN;
        let expected = (0..)
            .map(|k| first_minute + k * MIN)
            .take_while(|&m| m <= now)
            .filter(|&m| s.is_slot(m))
            .count() as u64;
        let d = catch_up(&s, Some(last), last, now).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let got = match d {
            Decision::NotDue { .. } => 0,
            Decision::Due { slots, .. } => slots,
        };
        prop_assert_eq!(got, expected);
    }

    /// Jitter is within its bounds and the same on every call.
    #[test]
    fn jitter_is_bounded_and_stable(id in proptest::collection::vec(any::<u8>(), 0..64), max_ms in 0u64..86_400_000) {
        let max = Duration::from_millis(max_ms);
        let j = jitter(&id, max);
        prop_assert!(j < max || (max_ms == 0 && j.is_zero()));
        prop_assert_eq!(j, jitter(&id, max));
    }

    /// A jittered plan never fires before its slot nor later than the offset.
    #[test]
    fn plan_schedule_fires_offset_after_a_slot(i in 0..EXPRS.len(), t in any_time(), id in "[a-z0-9-]{1,24}") {
        let p = PlanSchedule::new(sched(EXPRS[i]), id.as_bytes(), Duration::from_secs(3600));
        let fire = p.next_after(t).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(fire > t);
        let off = duration_to_ns(p.offset());
        prop_assert!((0..3600 * NANOS_PER_SEC).contains(&off));
        prop_assert!(p.schedule().is_slot(fire - off));
    }
}

fn zoned_sched(expr: &str, zone: &str) -> Schedule {
    Schedule::parse_in(expr, Some(zone)).unwrap_or_else(|e| panic!("{expr} in {zone}: {e}"))
}

/// `0 2 * * *` in Europe/Berlin is 01:00 UTC in winter (CET, +1) and
/// 00:00 UTC in summer (CEST, +2); in UTC it stays 02:00.
#[test]
fn a_schedule_in_a_time_zone_follows_its_offset_through_the_year() {
    let berlin = zoned_sched("0 2 * * *", "Europe/Berlin");
    assert_eq!(
        next_after(&berlin, at(2026, 1, 10, 12, 0)).unwrap(),
        at(2026, 1, 11, 1, 0)
    );
    assert_eq!(
        next_after(&berlin, at(2026, 7, 10, 12, 0)).unwrap(),
        at(2026, 7, 11, 0, 0)
    );
    assert!(berlin.is_slot(at(2026, 7, 11, 0, 0)));
    assert!(!berlin.is_slot(at(2026, 7, 11, 2, 0)));
    assert_eq!(
        next_after(&sched("0 2 * * *"), at(2026, 7, 10, 12, 0)).unwrap(),
        at(2026, 7, 11, 2, 0)
    );
    assert_ne!(
        berlin,
        sched("0 2 * * *"),
        "the zone is part of the schedule"
    );
    assert_eq!(berlin.zone_name(), Some("Europe/Berlin"));
}

/// The spring gap (2026-03-29, Berlin skips 02:00-03:00) and the autumn
/// fold (2026-10-25, 02:00-03:00 happens twice): a daily 02:30 backup runs
/// exactly once on each of those days, and never twice in one hour.
#[test]
fn daylight_saving_days_run_a_daily_schedule_once() {
    let s = zoned_sched("30 2 * * *", "Europe/Berlin");
    for (day_before, day_after) in [
        (at(2026, 3, 28, 12, 0), at(2026, 3, 29, 22, 0)),
        (at(2026, 10, 24, 12, 0), at(2026, 10, 25, 23, 0)),
    ] {
        let first = next_after(&s, day_before).unwrap();
        let second = next_after(&s, first).unwrap();
        assert!(first < day_after, "it ran on the day: {first}");
        assert!(second > day_after, "once only: {first} then {second}");
    }
    // Catch-up over the gap day counts one slot.
    let d = catch_up(&s, Some(at(2026, 3, 28, 12, 0)), 0, at(2026, 3, 29, 12, 0)).unwrap();
    assert!(matches!(d, Decision::Due { slots: 1, .. }), "{d:?}");
}

#[test]
fn an_unknown_time_zone_is_refused_with_its_name() {
    let err = Schedule::parse_in("0 2 * * *", Some("Mars/Olympus_Mons")).unwrap_err();
    assert!(
        matches!(err, ScheduleError::UnknownTimeZone { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("Mars/Olympus_Mons"), "{err}");
    assert!(utc_offsets(Some("Nowhere/Else")).is_err());
    // Spelled exactly as listed: the API's enum is the list.
    assert!(time_zone("europe/berlin").is_err());
    let names = time_zone_names();
    assert!(names.len() > 300, "{}", names.len());
    for n in ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"] {
        assert!(names.iter().any(|x| x == n), "{n}");
        assert!(time_zone(n).is_ok(), "{n}");
    }
    let berlin = utc_offsets(Some("Europe/Berlin")).unwrap();
    assert_eq!(berlin.at(at(2026, 1, 1, 0, 0)), 3600);
    assert_eq!(berlin.at(at(2026, 7, 1, 0, 0)), 7200);
    assert_eq!(UtcOffsets::default().at(at(2026, 7, 1, 0, 0)), 0);
}
