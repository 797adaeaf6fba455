use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;

use super::*;

fn at(y: i64, m: i64, d: i64, h: i64, min: i64) -> i64 {
    days_from_civil(y, m, d) * NS_PER_DAY + h * NS_PER_HOUR + min * 60_000_000_000
}

fn cand(id: u32, t: i64) -> RetentionCandidate<u32> {
    RetentionCandidate {
        id,
        time_unix_ns: t,
        tags: Vec::new(),
    }
}

fn kept(decisions: &[RetentionDecision<u32>]) -> Vec<u32> {
    decisions.iter().filter(|d| d.keep).map(|d| d.id).collect()
}

const NOW: i64 = 1_800_000_000_000_000_000;

#[test]
fn civil_calendar_matches_known_dates() {
    let cases = [
        ((2026, 12, 3), (2026, 49)),
        ((2021, 1, 1), (2020, 53)),
        ((2024, 12, 30), (2025, 1)),
        ((2020, 12, 31), (2020, 53)),
        ((2027, 1, 1), (2026, 53)),
        ((1969, 12, 31), (1970, 1)),
        ((2000, 2, 29), (2000, 9)),
    ];
    for ((y, m, d), (iy, iw)) in cases {
        let t = CivilTime::from_unix_ns(at(y, m, d, 13, 5));
        assert_eq!(
            (t.year, t.month, t.day, t.hour),
            (y, m, d, 13),
            "{y}-{m}-{d}"
        );
        assert_eq!((t.iso_year, t.iso_week), (iy, iw), "{y}-{m}-{d}");
    }
}

#[test]
fn times_before_the_epoch_fall_in_the_right_hour() {
    let t = CivilTime::from_unix_ns(-1);
    assert_eq!((t.year, t.month, t.day, t.hour), (1969, 12, 31, 23));
}

#[test]
fn keep_last_keeps_the_newest_n_and_returns_newest_first() {
    let cands: Vec<_> = (0..5)
        .map(|i| cand(i, at(2026, 1, 1 + i as i64, 0, 0)))
        .collect();
    let policy = KeepPolicy {
        last: Some(3),
        ..Default::default()
    };
    let d = apply_retention(&policy, &cands, NOW);
    assert_eq!(
        d.iter().map(|d| d.id).collect::<Vec<_>>(),
        vec![4, 3, 2, 1, 0]
    );
    assert_eq!(kept(&d), vec![4, 3, 2]);
    assert_eq!(d[0].reasons, vec![KeepReason::Last]);
    assert!(d[3].reasons.is_empty());
}

#[test]
fn keep_daily_keeps_newest_of_each_day_that_has_a_point() {
    let cands = vec![
        cand(1, at(2026, 12, 3, 22, 0)),
        cand(2, at(2026, 12, 3, 8, 0)),
        // 2026-12-02 has no point: it does not use up the count.
        cand(3, at(2026, 12, 1, 23, 59)),
        cand(4, at(2026, 12, 1, 0, 0)),
        cand(5, at(2026, 11, 30, 12, 0)),
        cand(6, at(2026, 11, 29, 12, 0)),
    ];
    let policy = KeepPolicy {
        daily: Some(3),
        ..Default::default()
    };
    let d = apply_retention(&policy, &cands, NOW);
    assert_eq!(kept(&d), vec![1, 3, 5]);
    assert_eq!(d[0].reasons, vec![KeepReason::Daily("2026-12-03".into())]);
    assert_eq!(d[0].reasons[0].to_string(), "daily snapshot for 2026-12-03");
}

#[test]
fn keep_hourly_weekly_monthly_yearly_use_their_buckets() {
    let cands = vec![
        cand(1, at(2026, 12, 3, 14, 50)),
        cand(2, at(2026, 12, 3, 14, 10)),
        cand(3, at(2026, 12, 3, 13, 10)),
        cand(4, at(2026, 11, 30, 9, 0)), // Monday of W49
        cand(5, at(2026, 11, 29, 9, 0)), // Sunday of W48
        cand(6, at(2025, 6, 1, 0, 0)),
        cand(7, at(2025, 1, 1, 0, 0)),
    ];
    let hourly = apply_retention(
        &KeepPolicy {
            hourly: Some(2),
            ..Default::default()
        },
        &cands,
        NOW,
    );
    assert_eq!(kept(&hourly), vec![1, 3]);
    assert_eq!(
        hourly[0].reasons[0].to_string(),
        "hourly snapshot for 2026-12-03 14:00"
    );

    let weekly = apply_retention(
        &KeepPolicy {
            weekly: Some(3),
            ..Default::default()
        },
        &cands,
        NOW,
    );
    assert_eq!(kept(&weekly), vec![1, 5, 6]);
    assert_eq!(
        weekly[0].reasons[0].to_string(),
        "weekly snapshot for 2026-W49"
    );

    let monthly = apply_retention(
        &KeepPolicy {
            monthly: Some(2),
            ..Default::default()
        },
        &cands,
        NOW,
    );
    assert_eq!(kept(&monthly), vec![1, 4]);
    assert_eq!(
        monthly[0].reasons[0].to_string(),
        "monthly snapshot for 2026-12"
    );

    let yearly = apply_retention(
        &KeepPolicy {
            yearly: Some(5),
            ..Default::default()
        },
        &cands,
        NOW,
    );
    assert_eq!(kept(&yearly), vec![1, 6]);
    assert_eq!(yearly[5].reasons[0].to_string(), "yearly snapshot for 2025");
}

#[test]
fn within_is_measured_from_the_newest_point_not_from_now() {
    let cands = vec![
        cand(1, at(2026, 1, 10, 0, 0)),
        cand(2, at(2026, 1, 8, 0, 0)),
        cand(3, at(2026, 1, 1, 0, 0)),
    ];
    let policy = KeepPolicy {
        within: Some(Duration::from_secs(3 * 86_400)),
        ..Default::default()
    };
    // Backups stopped a year ago: the recent ones still survive.
    let d = apply_retention(&policy, &cands, at(2027, 1, 1, 0, 0));
    assert_eq!(kept(&d), vec![1, 2]);
    assert_eq!(d[1].reasons, vec![KeepReason::Within]);
}

#[test]
fn within_uses_now_when_the_newest_point_is_in_the_future() {
    let cands = vec![
        cand(1, at(2030, 1, 1, 0, 0)),
        cand(2, at(2026, 1, 9, 0, 0)),
        cand(3, at(2026, 1, 1, 0, 0)),
    ];
    let policy = KeepPolicy {
        within: Some(Duration::from_secs(2 * 86_400)),
        ..Default::default()
    };
    let d = apply_retention(&policy, &cands, at(2026, 1, 10, 0, 0));
    // The future point is newer than the cutoff too.
    assert_eq!(kept(&d), vec![1, 2]);
}

#[test]
fn tags_keep_every_tagged_point_and_reasons_accumulate() {
    let mut a = cand(1, at(2026, 1, 2, 0, 0));
    a.tags = vec!["release".into()];
    let mut b = cand(2, at(2026, 1, 1, 0, 0));
    b.tags = vec!["keep".into(), "release".into()];
    let c = cand(3, at(2025, 1, 1, 0, 0));
    let policy = KeepPolicy {
        last: Some(1),
        daily: Some(1),
        tags: vec!["keep".into(), "release".into()],
        ..Default::default()
    };
    let d = apply_retention(&policy, &[c, b, a], NOW);
    assert_eq!(
        d[0].reasons,
        vec![
            KeepReason::Last,
            KeepReason::Daily("2026-01-02".into()),
            KeepReason::Tag("release".into())
        ]
    );
    assert_eq!(
        d[1].reasons,
        vec![
            KeepReason::Tag("keep".into()),
            KeepReason::Tag("release".into())
        ]
    );
    assert_eq!(d[1].reasons[0].to_string(), "tagged \"keep\"");
    assert!(!d[2].keep);
}

#[test]
fn empty_policy_keeps_everything() {
    let cands: Vec<_> = (0..4).map(|i| cand(i, i as i64)).collect();
    let policy = KeepPolicy::default();
    assert!(policy.is_empty());
    assert!(apply_retention(&policy, &cands, NOW).iter().all(|d| d.keep));
    assert!(!KeepPolicy {
        tags: vec!["x".into()],
        ..Default::default()
    }
    .is_empty());
    assert!(!KeepPolicy {
        within: Some(Duration::ZERO),
        ..Default::default()
    }
    .is_empty());
}

#[test]
fn zero_counts_keep_nothing() {
    let cands: Vec<_> = (0..4).map(|i| cand(i, i as i64)).collect();
    let policy = KeepPolicy {
        last: Some(0),
        daily: Some(0),
        ..Default::default()
    };
    assert!(apply_retention(&policy, &cands, NOW)
        .iter()
        .all(|d| !d.keep));
}

#[test]
fn no_candidates_no_decisions() {
    let policy = KeepPolicy {
        within: Some(Duration::from_secs(1)),
        ..Default::default()
    };
    assert!(apply_retention::<u32>(&policy, &[], NOW).is_empty());
}

fn arb_policy() -> impl Strategy<Value = KeepPolicy> {
    let n = || proptest::option::of(0u32..6);
    (
        n(),
        n(),
        n(),
        n(),
        n(),
        n(),
        proptest::option::of(0u64..40 * 86_400),
        any::<bool>(),
    )
        .prop_map(
            |(last, hourly, daily, weekly, monthly, yearly, within, tag)| KeepPolicy {
                last,
                hourly,
                daily,
                weekly,
                monthly,
                yearly,
                within: within.map(Duration::from_secs),
                tags: if tag { vec!["t".into()] } else { Vec::new() },
            },
        )
}

/// Distinct times spread over a few years, some tagged.
fn arb_candidates() -> impl Strategy<Value = Vec<RetentionCandidate<u32>>> {
    proptest::collection::btree_set(0i64..3 * 365 * 24 * 60, 0..40).prop_flat_map(|minutes| {
        let n = minutes.len();
        (Just(minutes), proptest::collection::vec(any::<bool>(), n)).prop_map(
            |(minutes, tagged)| {
                minutes
                    .into_iter()
                    .zip(tagged)
                    .enumerate()
                    .map(|(i, (m, tag))| RetentionCandidate {
                        id: i as u32,
                        time_unix_ns: at(2024, 1, 1, 0, 0) + m * 60_000_000_000,
                        tags: if tag { vec!["t".into()] } else { Vec::new() },
                    })
                    .collect()
            },
        )
    })
}

fn keep_map(d: &[RetentionDecision<u32>]) -> BTreeMap<u32, (bool, Vec<KeepReason>)> {
    d.iter()
        .map(|d| (d.id, (d.keep, d.reasons.clone())))
        .collect()
}

proptest! {
    #[test]
    fn keep_last_keeps_exactly_the_n_newest(cands in arb_candidates(), n in 0u32..50) {
        let d = apply_retention(&KeepPolicy { last: Some(n), ..Default::default() }, &cands, NOW);
        let expect = (n as usize).min(cands.len());
        prop_assert_eq!(d.iter().filter(|d| d.keep).count(), expect);
        prop_assert!(d.iter().take(expect).all(|d| d.keep));
    }

    #[test]
    fn empty_policy_removes_nothing(cands in arb_candidates()) {
        let d = apply_retention(&KeepPolicy::default(), &cands, NOW);
        prop_assert_eq!(d.len(), cands.len());
        prop_assert!(d.iter().all(|d| d.keep));
    }

    #[test]
    fn decisions_do_not_depend_on_input_order(
        cands in arb_candidates(),
        policy in arb_policy(),
        seed in any::<u64>(),
    ) {
        let mut shuffled = cands.clone();
        // A deterministic shuffle from the seed.
        let mut s = seed | 1;
        for i in (1..shuffled.len()).rev() {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            shuffled.swap(i, (s % (i as u64 + 1)) as usize);
        }
        let a = apply_retention(&policy, &cands, NOW);
        let b = apply_retention(&policy, &shuffled, NOW);
        prop_assert_eq!(a, b);
    }

    #[test]
    fn output_is_newest_first_and_reasons_match_keep(cands in arb_candidates(), policy in arb_policy()) {
        let d = apply_retention(&policy, &cands, NOW);
        prop_assert!(d.windows(2).all(|w| w[0].time_unix_ns >= w[1].time_unix_ns));
        if !policy.is_empty() {
            prop_assert!(d.iter().all(|d| d.keep != d.reasons.is_empty()));
        }
    }

    #[test]
    fn daily_keeps_one_per_day_for_the_newest_days(cands in arb_candidates(), n in 0u32..10) {
        let d = apply_retention(&KeepPolicy { daily: Some(n), ..Default::default() }, &cands, NOW);
        let days: BTreeSet<i64> = cands.iter().map(|c| c.time_unix_ns.div_euclid(NS_PER_DAY)).collect();
        let newest_days: BTreeSet<i64> = days.iter().rev().take(n as usize).copied().collect();
        let kept_days: Vec<i64> = d.iter().filter(|d| d.keep).map(|d| d.time_unix_ns.div_euclid(NS_PER_DAY)).collect();
        prop_assert_eq!(kept_days.iter().copied().collect::<BTreeSet<_>>(), newest_days);
        prop_assert_eq!(kept_days.len(), (n as usize).min(days.len()));
    }

    #[test]
    fn adding_a_rule_never_removes_a_point(cands in arb_candidates(), policy in arb_policy(), extra in 1u32..5) {
        let wider = KeepPolicy { last: Some(policy.last.unwrap_or(0) + extra), ..policy.clone() };
        let narrow = keep_map(&apply_retention(&policy, &cands, NOW));
        let wide = keep_map(&apply_retention(&wider, &cands, NOW));
        for (id, (keep, _)) in &narrow {
            if *keep && !policy.is_empty() {
                prop_assert!(wide[id].0);
            }
        }
    }
}

/// Daily buckets counted in a time zone: two points 02:00 apart that fall
/// on one UTC day but on two local days (UTC+1) are both kept by
/// `daily: 2`, and the reasons name the local dates.
#[test]
fn daily_buckets_follow_the_plan_time_zone() {
    let cands = vec![
        cand(1, at(2026, 12, 3, 23, 30)), // 2026-12-04 00:30 at UTC+1
        cand(2, at(2026, 12, 3, 21, 30)), // 2026-12-03 22:30 at UTC+1
        cand(3, at(2026, 12, 2, 21, 30)),
    ];
    let policy = KeepPolicy {
        daily: Some(2),
        ..Default::default()
    };
    let utc = apply_retention(&policy, &cands, NOW);
    assert_eq!(kept(&utc), vec![1, 3], "in UTC 1 and 2 share a day");
    let local = apply_retention_in(&policy, &cands, NOW, |_| 3600);
    assert_eq!(kept(&local), vec![1, 2]);
    assert_eq!(
        local[0].reasons[0].to_string(),
        "daily snapshot for 2026-12-04"
    );
}
