//! One test per finding of the events-and-actors review (C1, H1, H3, M6-M9,
//! L9) at the projection level, and the monotonicity property: a negative
//! fact never raises a point's state or a plan's protection.

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::event::*;
use crate::ids::*;
use crate::plan::VerifyDepth;
use crate::testkit::{evidence, plan_def, sid};

const SEC: i64 = 1_000_000_000;
const HOUR: i64 = 3600 * SEC;
const T0: i64 = 1_800_000_000 * SEC;

/// Applies events with seq 1, 2, ... recorded one second apart from T0.
fn given(events: &[Event]) -> Projections {
    let mut p = Projections::new();
    for e in events {
        apply(&mut p, e);
    }
    p
}

fn apply(p: &mut Projections, e: &Event) {
    let seq = p.last_seq + 1;
    p.apply_event(
        Recorded {
            seq,
            unix_ns: T0 + seq as i64 * SEC,
        },
        e,
    );
}

fn plan_id(n: u8) -> PlanId {
    PlanId::new(format!("p{n}"))
}

fn plan_created(n: u8) -> Event {
    PlanCreated {
        plan: plan_id(n),
        definition: plan_def(24 * 3600, 48 * 3600),
    }
    .into()
}

fn commit_files(point: u8, plan: u8, files: u64) -> Event {
    BackupCommitted {
        job: None,
        plan: Some(plan_id(plan)),
        repository: RepositoryId::new("main"),
        snapshot: sid(point),
        snapshot_time_unix_ns: T0 + 2 * SEC,
        summary: BackupSummary {
            files,
            bytes: files * 100,
            ..BackupSummary::default()
        },
        changes: None,
    }
    .into()
}

fn commit(point: u8) -> Event {
    commit_files(point, 1, 3)
}

fn verified(point: u8, depth: VerifyDepth, passed: bool) -> Event {
    if passed {
        VerificationPassed {
            point: sid(point),
            job: None,
            depth,
            bytes_read: 1,
            blobs_checked: 1,
        }
        .into()
    } else {
        VerificationFailed {
            point: sid(point),
            job: None,
            depth,
            bytes_read: 1,
            damaged: vec!["pack 01: bad".into()],
        }
        .into()
    }
}

fn vp(point: u8) -> Event {
    verified(point, VerifyDepth::ReadAll, true)
}

fn restored(point: u8, files: u64, complete: bool, passed: bool) -> Event {
    let evidence = RestoreEvidence {
        files,
        digests_compared: files,
        digests_matched: files,
        files_in_point: Some(3),
        complete,
        ..evidence()
    };
    if passed {
        RestoreTestPassed {
            point: sid(point),
            job: None,
            evidence,
        }
        .into()
    } else {
        RestoreTestFailed {
            point: sid(point),
            job: None,
            evidence,
            reason: "pack 01 does not decrypt".into(),
            cause: "damaged".into(),
        }
        .into()
    }
}

fn rp(point: u8) -> Event {
    restored(point, 3, true, true)
}

fn check_job(job: &str, point: u8, kind: JobKind) -> Vec<Event> {
    vec![
        JobScheduled {
            job: JobId::new(job),
            kind,
            plan: Some(plan_id(1)),
            point: Some(sid(point)),
            due_unix_ns: T0,
            attempt: 1,
            spec: JobSpec::default(),
        }
        .into(),
        JobStarted {
            job: JobId::new(job),
            agent: None,
        }
        .into(),
    ]
}

fn job_failed(job: &str) -> Event {
    JobFailed {
        job: JobId::new(job),
        error_kind: "damaged".into(),
        message: "pack 01 fails authentication".into(),
        retryable: false,
    }
    .into()
}

fn read_back(damaged_packs: &[&str], affected: Option<Vec<u8>>) -> Event {
    PacksReadBack {
        repository: RepositoryId::new("main"),
        job: None,
        slices: vec![0],
        of: 1,
        packs: 1,
        bytes_read: 1,
        damaged: damaged_packs
            .iter()
            .map(|p| format!("pack {p}: blob 02 does not decrypt"))
            .collect(),
        damaged_packs: damaged_packs.iter().map(|p| (*p).to_owned()).collect(),
        affected_points: affected.map(|v| v.into_iter().map(sid).collect()),
    }
    .into()
}

fn recoverable_history() -> Vec<Event> {
    vec![plan_created(1), commit(1), vp(1), rp(1)]
}

fn state(p: &Projections, point: u8) -> PointState {
    p.points.state_of(&sid(point))
}

fn protection(p: &Projections, plan: u8) -> Protection {
    p.plan_protection(&plan_id(plan), T0 + HOUR).status
}

// ---- C1 -------------------------------------------------------------------

#[test]
fn regression_c1_a_check_job_that_started_and_failed_caps_its_point_at_unknown() {
    for kind in [JobKind::Verify, JobKind::RestoreTest] {
        let mut events = recoverable_history();
        assert_eq!(state(&given(&events), 1), PointState::Recoverable);
        assert_eq!(protection(&given(&events), 1), Protection::Protected);
        events.extend(check_job("c", 1, kind));
        events.push(job_failed("c"));
        let p = given(&events);
        assert_eq!(state(&p, 1), PointState::Unknown, "{kind:?}");
        assert!(p.points.points[&sid(1)].cap().is_some());
        assert!(protection(&p, 1) < Protection::AtRisk, "{kind:?}");
        // A later check that passes clears it.
        let p = given(&[events, vec![vp(1)]].concat());
        assert_eq!(state(&p, 1), PointState::Recoverable);
    }
}

#[test]
fn regression_c1_an_abandoned_check_job_caps_too_but_a_scheduled_one_does_not() {
    let mut events = recoverable_history();
    events.push(
        JobScheduled {
            job: JobId::new("never-started"),
            kind: JobKind::RestoreTest,
            plan: Some(plan_id(1)),
            point: Some(sid(1)),
            due_unix_ns: T0,
            attempt: 1,
            spec: JobSpec::default(),
        }
        .into(),
    );
    events.push(
        JobAbandoned {
            job: JobId::new("never-started"),
            reason: "service restarted".into(),
        }
        .into(),
    );
    assert_eq!(state(&given(&events), 1), PointState::Recoverable);
    events.extend(check_job("c", 1, JobKind::Verify));
    events.push(
        JobAbandoned {
            job: JobId::new("c"),
            reason: "lease expired".into(),
        }
        .into(),
    );
    assert_eq!(state(&given(&events), 1), PointState::Unknown);
}

#[test]
fn a_check_job_with_a_verdict_then_finished_does_not_cap() {
    let mut events = recoverable_history();
    events.extend(check_job("c", 1, JobKind::Verify));
    events.push(vp(1));
    events.push(
        JobFinished {
            job: JobId::new("c"),
        }
        .into(),
    );
    assert_eq!(state(&given(&events), 1), PointState::Recoverable);
}

// ---- H1 -------------------------------------------------------------------

#[test]
fn regression_h1_read_back_damage_demotes_the_points_that_reference_the_pack() {
    let mut events = recoverable_history();
    events.extend([commit(2), vp(2), rp(2)]);
    events.push(read_back(&["01"], Some(vec![1])));
    let p = given(&events);
    assert_eq!(state(&p, 1), PointState::Unknown);
    assert_eq!(state(&p, 2), PointState::Recoverable, "not referencing it");
    // A structure-only pass does not clear it; reading all data does.
    let p2 = given(
        &[
            events.clone(),
            vec![verified(1, VerifyDepth::Structure, true)],
        ]
        .concat(),
    );
    assert_eq!(state(&p2, 1), PointState::Unknown);
    let p3 = given(&[events.clone(), vec![vp(1)]].concat());
    assert_eq!(state(&p3, 1), PointState::Recoverable);
    // And a follow-up verification that confirms it makes it corrupt.
    let p4 = given(&[events, vec![verified(1, VerifyDepth::ReadAll, false)]].concat());
    assert_eq!(state(&p4, 1), PointState::Corrupt);
}

#[test]
fn regression_h1_read_back_damage_that_names_no_points_makes_the_repository_suspect() {
    let mut events = recoverable_history();
    events.push(read_back(&["01"], None));
    let p = given(&events);
    assert_eq!(state(&p, 1), PointState::Unknown);
    assert!(protection(&p, 1) <= Protection::Unknown);
    // A v1 read-back (damage text only, no structured packs) counts too.
    let mut events = recoverable_history();
    events.push(
        PacksReadBack {
            repository: RepositoryId::new("main"),
            job: None,
            slices: vec![0],
            of: 1,
            packs: 1,
            bytes_read: 1,
            damaged: vec!["blob 02: does not decrypt".into()],
            damaged_packs: Vec::new(),
            affected_points: None,
        }
        .into(),
    );
    assert_eq!(state(&given(&events), 1), PointState::Unknown);
    // Damage in another repository touches nothing here.
    let mut events = recoverable_history();
    events.push(
        PacksReadBack {
            repository: RepositoryId::new("other"),
            job: None,
            slices: vec![0],
            of: 1,
            packs: 1,
            bytes_read: 1,
            damaged: vec!["pack 01: bad".into()],
            damaged_packs: vec!["01".into()],
            affected_points: None,
        }
        .into(),
    );
    assert_eq!(state(&given(&events), 1), PointState::Recoverable);
}

// ---- H3 -------------------------------------------------------------------

#[test]
fn regression_h3a_an_empty_point_is_never_recoverable_and_its_plan_is_at_risk() {
    let p = given(&[
        plan_created(1),
        commit_files(1, 1, 0),
        vp(1),
        restored(1, 0, true, true),
    ]);
    assert_eq!(state(&p, 1), PointState::Verified);
    let v = p.plan_protection(&plan_id(1), T0 + HOUR);
    assert_eq!(v.status, Protection::AtRisk);
    assert!(v.reason.contains("empty"), "{}", v.reason);
    // Even after older points were recoverable: the newest says what the
    // source is now.
    let p = given(&[
        plan_created(1),
        commit(1),
        vp(1),
        rp(1),
        commit_files(2, 1, 0),
    ]);
    assert_eq!(protection(&p, 1), Protection::AtRisk);
}

#[test]
fn regression_h3a_vacuous_restore_evidence_proves_nothing() {
    let p = given(&[
        plan_created(1),
        commit(1),
        vp(1),
        restored(1, 0, false, true),
    ]);
    assert_eq!(state(&p, 1), PointState::Verified);
}

#[test]
fn regression_h3b_samples_only_leave_the_plan_at_risk_under_the_proof_policy() {
    let sample = restored(1, 1, false, true);
    let p = given(&[plan_created(1), commit(1), vp(1), sample.clone()]);
    assert_eq!(state(&p, 1), PointState::Recoverable);
    let v = p.plan_protection(&plan_id(1), T0 + HOUR);
    assert_eq!(v.status, Protection::AtRisk, "{}", v.reason);
    assert!(v.reason.contains("sampled"), "{}", v.reason);
    // A complete test within `full_every` (7 days) protects it...
    let p = given(&[plan_created(1), commit(1), vp(1), rp(1), sample.clone()]);
    assert_eq!(protection(&p, 1), Protection::Protected);
    // ... until it is older than that.
    assert_eq!(
        p.plan_protection(&plan_id(1), T0 + 8 * 24 * HOUR)
            .status
            .min(Protection::AtRisk),
        Protection::Unprotected.max(p.plan_protection(&plan_id(1), T0 + 8 * 24 * HOUR).status)
    );
    // A plan that accepts samples (`full_every` none) is protected by one.
    let mut def = plan_def(24 * 3600, 48 * 3600);
    def.restore_test.full_every = None;
    let p = given(&[
        PlanCreated {
            plan: plan_id(1),
            definition: def,
        }
        .into(),
        commit(1),
        vp(1),
        sample,
    ]);
    assert_eq!(protection(&p, 1), Protection::Protected);
}

#[test]
fn regression_h3c_a_shallow_pass_never_clears_a_deeper_failure() {
    let p = given(&[
        plan_created(1),
        commit(1),
        verified(1, VerifyDepth::ReadAll, false),
        verified(1, VerifyDepth::Structure, true),
        rp(1),
    ]);
    assert_eq!(state(&p, 1), PointState::Corrupt);
    let p = given(&[
        plan_created(1),
        commit(1),
        verified(1, VerifyDepth::ReadSample(50), false),
        verified(1, VerifyDepth::ReadSample(10), true),
    ]);
    assert_eq!(state(&p, 1), PointState::Corrupt);
    let p = when(p, verified(1, VerifyDepth::ReadSample(50), true));
    assert_eq!(state(&p, 1), PointState::Verified);
}

#[test]
fn regression_h3c_a_sampled_restore_pass_never_clears_a_restore_failure() {
    let p = given(&[
        plan_created(1),
        commit(1),
        vp(1),
        restored(1, 3, true, false),
    ]);
    assert_eq!(state(&p, 1), PointState::Unrecoverable);
    let p = when(p, restored(1, 1, false, true));
    assert_eq!(state(&p, 1), PointState::Unrecoverable);
    let p = when(p, rp(1));
    assert_eq!(state(&p, 1), PointState::Recoverable);
}

fn when(mut p: Projections, e: Event) -> Projections {
    apply(&mut p, &e);
    p
}

// ---- H2: vanished points ----------------------------------------------------

#[test]
fn a_vanished_point_never_counts_again() {
    let vanished: Event = PointVanished {
        point: sid(1),
        repository: RepositoryId::new("main"),
        reason: "reconciliation".into(),
    }
    .into();
    let p = given(&[recoverable_history(), vec![vanished.clone()]].concat());
    assert_eq!(state(&p, 1), PointState::Vanished);
    assert!(protection(&p, 1) < Protection::AtRisk);
    let p = when(p, rp(1));
    assert_eq!(state(&p, 1), PointState::Vanished);
    // A forgotten point's manifest is meant to go.
    let forgotten: Event = PointForgotten {
        point: sid(1),
        rule: "keep-last 1".into(),
    }
    .into();
    let p = given(&[recoverable_history(), vec![forgotten, vanished]].concat());
    assert_eq!(state(&p, 1), PointState::Expired);
    assert!(p.inconsistencies.is_empty());
}

#[test]
fn a_point_found_by_a_reconciliation_then_committed_learns_its_history() {
    let discovered: Event = PointDiscovered {
        repository: RepositoryId::new("main"),
        snapshot: sid(1),
        snapshot_time_unix_ns: T0,
        plan: None,
    }
    .into();
    let p = given(&[plan_created(1), discovered, commit(1)]);
    assert!(p.inconsistencies.is_empty(), "{:?}", p.inconsistencies);
    assert_eq!(state(&p, 1), PointState::Unverified);
    assert_eq!(p.points.of_plan(&plan_id(1)).count(), 1);
    let p = when(p, commit(1));
    assert_eq!(p.inconsistencies.len(), 1, "a second commit is one");
}

// ---- M6 -------------------------------------------------------------------

fn unknown(event_type: &str, payload: Vec<u8>) -> Event {
    Event::Unknown(UnknownEvent {
        event_type: event_type.into(),
        schema_version: 9,
        payload,
    })
}

/// A msgpack array whose first element is the string `s`.
fn leading(s: &str) -> Vec<u8> {
    let mut v = vec![0x92, 0xa0 | s.len() as u8];
    v.extend(s.as_bytes());
    v.push(0xc0);
    v
}

#[test]
fn regression_m6_unknown_events_of_every_family_that_feeds_protection_cap_plans() {
    let base = || {
        let mut e = recoverable_history();
        e.push(plan_created(2));
        e.extend([commit_files(2, 2, 3), vp(2), rp(2)]);
        e.push(
            JobScheduled {
                job: JobId::new("b1"),
                kind: JobKind::Backup,
                plan: Some(plan_id(1)),
                point: None,
                due_unix_ns: T0,
                attempt: 1,
                spec: JobSpec::default(),
            }
            .into(),
        );
        e
    };
    let p = given(&base());
    assert_eq!(protection(&p, 1), Protection::Protected);
    assert_eq!(protection(&p, 2), Protection::Protected);
    // The review's repro: an unreadable `job.failed` of p1's backup job.
    let p = given(&[base(), vec![unknown("job.failed", leading("b1"))]].concat());
    assert_eq!(protection(&p, 1), Protection::Unknown);
    assert_eq!(protection(&p, 2), Protection::Protected, "tied to p1 only");
    // A job the log does not know: could be any plan's.
    let p = given(&[base(), vec![unknown("job.failed", leading("zz"))]].concat());
    assert_eq!(protection(&p, 2), Protection::Unknown);
    // An unreadable plan.changed of p2.
    let p = given(&[base(), vec![unknown("plan.changed", leading("p2"))]].concat());
    assert_eq!(protection(&p, 1), Protection::Protected);
    assert_eq!(protection(&p, 2), Protection::Unknown);
    // A repository event: the plans of that repository.
    let p = given(
        &[
            base(),
            vec![unknown("repository.read_back", leading("main"))],
        ]
        .concat(),
    );
    assert_eq!(protection(&p, 1), Protection::Unknown);
    let p = given(
        &[
            base(),
            vec![unknown("repository.read_back", leading("other"))],
        ]
        .concat(),
    );
    assert_eq!(protection(&p, 1), Protection::Protected);
    // A family this build has never heard of: anything.
    let p = given(&[base(), vec![unknown("teleport.started", vec![0x90])]].concat());
    assert_eq!(protection(&p, 1), Protection::Unknown);
    // Families that never bear on protection change nothing.
    for t in ["alert.raised", "agent.seen", "service.started"] {
        let p = given(&[base(), vec![unknown(t, vec![0x90])]].concat());
        assert_eq!(protection(&p, 1), Protection::Protected, "{t}");
    }
}

// ---- M7 -------------------------------------------------------------------

#[test]
fn regression_m7_old_points_stop_proving_a_plan_whose_source_changed() {
    let p = given(&recoverable_history());
    assert_eq!(protection(&p, 1), Protection::Protected);
    let mut def = plan_def(24 * 3600, 48 * 3600);
    def.source = "/other".into();
    let changed: Event = PlanChanged {
        plan: plan_id(1),
        definition: def.clone(),
    }
    .into();
    let p2 = when(p.clone(), changed);
    assert!(
        protection(&p2, 1) < Protection::AtRisk,
        "{:?}",
        protection(&p2, 1)
    );
    // A change of anything else (the RPO) keeps the points.
    let mut def = plan_def(24 * 3600, 48 * 3600);
    def.rpo = Duration::from_secs(30 * 3600);
    let p3 = when(
        p.clone(),
        PlanChanged {
            plan: plan_id(1),
            definition: def,
        }
        .into(),
    );
    assert_eq!(protection(&p3, 1), Protection::Protected);
    // Removed and created again under the same id: a new plan.
    let p4 = given(
        &[
            recoverable_history(),
            vec![PlanRemoved { plan: plan_id(1) }.into(), plan_created(1)],
        ]
        .concat(),
    );
    assert_eq!(
        protection(&p4, 1),
        Protection::Unknown,
        "young plan, no point"
    );
}

// ---- M8 -------------------------------------------------------------------

#[test]
fn regression_m8_evidence_dated_after_now_is_not_trusted() {
    // The review's repro: recorded at "100 h", the clock then reads 99 h.
    let p = given(&recoverable_history());
    let recorded = T0 + 4 * SEC;
    assert_eq!(
        p.plan_protection(&plan_id(1), recorded + HOUR).status,
        Protection::Protected
    );
    let v = p.plan_protection(&plan_id(1), recorded - HOUR);
    assert_eq!(v.status, Protection::Unknown);
    assert!(v.reason.contains("clock"), "{}", v.reason);
    // Within the tolerance (a few seconds of skew) it is fine.
    assert_eq!(
        p.plan_protection(&plan_id(1), recorded - 10 * SEC).status,
        Protection::Protected
    );
}

/// Found by the fast tier of the simulation (`model_simulation`, seeds
/// 1174 and 453 of the first 2000, after a restart with the clock stepped
/// back): the clock cap looked only at the plan's current points and their
/// latest restore test, so a negative fact that replaced a future-dated
/// restore test (or a source change that retired a future-dated point)
/// lifted it: `unknown` became `protected`. The cap now reads the newest
/// time the log recorded at all, which a new fact can only move forward.
#[test]
fn regression_m8_a_negative_fact_does_not_lift_the_clock_cap() {
    // Point 1 proven at T0 + 3..5 s; point 2 committed and verified, then
    // restore-tested two hours later (the clock then stepped back).
    let mut p = given(&[plan_created(1), commit(1), vp(1), rp(1), commit(2), vp(2)]);
    let later = T0 + 2 * HOUR;
    p.apply_event(
        Recorded {
            seq: p.last_seq + 1,
            unix_ns: later,
        },
        &rp(2),
    );
    let now = T0 + HOUR; // an hour behind the log's newest record
    assert_eq!(
        p.plan_protection(&plan_id(1), now).status,
        Protection::Unknown
    );
    // A failed restore test of point 2, recorded at the stepped-back now.
    let mut with = p.clone();
    with.apply_event(
        Recorded {
            seq: p.last_seq + 1,
            unix_ns: now,
        },
        &restored(2, 3, true, false),
    );
    assert_eq!(
        with.plan_protection(&plan_id(1), now).status,
        Protection::Unknown,
        "{}",
        with.plan_protection(&plan_id(1), now).reason
    );
    // Nor does a change of the plan's source (point 2 stops counting).
    let mut moved = p.clone();
    let mut def = plan_def(24 * 3600, 48 * 3600);
    def.source = "/elsewhere".into();
    moved.apply_event(
        Recorded {
            seq: p.last_seq + 1,
            unix_ns: now,
        },
        &PlanChanged {
            plan: plan_id(1),
            definition: def,
        }
        .into(),
    );
    assert!(moved.plan_protection(&plan_id(1), now).status <= Protection::Unknown);
    // Once the clock passes the newest record again, the facts decide.
    assert_eq!(
        with.plan_protection(&plan_id(1), later + HOUR).status,
        Protection::Protected
    );
}

// ---- M9 -------------------------------------------------------------------

#[test]
fn regression_m9_a_snapshot_recomputes_derived_state_and_carries_the_rules() {
    let mut p = given(&[plan_created(1), commit(1), vp(1)]);
    // A state an older (wrong) rule might have stored.
    p.points.points.get_mut(&sid(1)).expect("point").state = PointState::Recoverable;
    let bytes = p.to_snapshot().expect("encode");
    let back = Projections::from_snapshot(&bytes).expect("decode");
    assert_eq!(state(&back, 1), PointState::Verified);
    // A snapshot folded by other rules is not used.
    let other: Vec<u8> =
        rmp_serde::to_vec(&(PROJECTION_SNAPSHOT_VERSION, "0000000000000000", &p)).expect("encode");
    assert!(Projections::from_snapshot(&other).is_err());
    // Nor one of an older version (a 2-tuple).
    let old: Vec<u8> = rmp_serde::to_vec(&(3u16, &p)).expect("encode");
    assert!(Projections::from_snapshot(&old).is_err());
}

// ---- L9 -------------------------------------------------------------------

#[test]
fn regression_l9_inconsistencies_are_bounded_but_counted() {
    let mut p = Projections::new();
    for _ in 0..(MAX_INCONSISTENCIES + 10) {
        apply(&mut p, &vp(9)); // a point the log never knew
    }
    assert_eq!(p.inconsistencies.len(), MAX_INCONSISTENCIES);
    assert_eq!(p.inconsistencies_total, (MAX_INCONSISTENCIES + 10) as u64);
    assert_eq!(p.inconsistencies.last().map(|i| i.at.seq), Some(p.last_seq));
}

// ---- monotonicity -----------------------------------------------------------

const POINTS: u8 = 4;
const PLANS: u8 = 2;

fn arb_depth() -> impl Strategy<Value = VerifyDepth> {
    prop_oneof![
        Just(VerifyDepth::Structure),
        (1u8..=100).prop_map(VerifyDepth::ReadSample),
        Just(VerifyDepth::ReadAll),
    ]
}

fn arb_evidence() -> impl Strategy<Value = RestoreEvidence> {
    (0u64..4, any::<bool>(), any::<bool>()).prop_map(|(files, complete, known)| RestoreEvidence {
        files,
        digests_compared: files,
        digests_matched: files,
        files_in_point: known.then_some(3),
        bytes_in_point: known.then_some(300),
        complete,
        guest: None,
        ..evidence()
    })
}

/// A plan definition with a replica that asks `require` of its copies.
fn replicated(require: crate::plan::ReplicaRequirement) -> crate::PlanDefinition {
    crate::PlanDefinition {
        replica: Some(crate::plan::ReplicaPolicy {
            repository: RepositoryId::new("offsite"),
            lock_for: None,
            require,
        }),
        ..plan_def(24 * 3600, 48 * 3600)
    }
}

fn arb_requirement() -> impl Strategy<Value = crate::plan::ReplicaRequirement> {
    use crate::plan::ReplicaRequirement::*;
    prop_oneof![Just(Nothing), Just(Proven), Just(ImmutableOffHost)]
}

/// A copy of `source` as point `copy` of plan 1, in the replica.
fn copy_of(source: u8, copy: u8, off_host: bool, by_storage: bool, locked_h: i64) -> Event {
    CopyCommitted {
        job: None,
        plan: Some(plan_id(1)),
        source: sid(source),
        repository: RepositoryId::new("offsite"),
        snapshot: sid(copy),
        snapshot_time_unix_ns: T0,
        summary: BackupSummary {
            files: 3,
            bytes: 300,
            ..BackupSummary::default()
        },
        off_host,
        locks_enforced_by: if by_storage {
            LockEnforcement::Storage
        } else {
            LockEnforcement::Vouch
        },
        locked_until_unix_ns: (locked_h > 0).then_some(T0 + locked_h * HOUR),
    }
    .into()
}

fn arb_history_event() -> impl Strategy<Value = Event> {
    let point = 1..=POINTS;
    let plan = 1..=PLANS;
    prop_oneof![
        2 => plan.clone().prop_map(plan_created),
        1 => (plan.clone(), arb_requirement()).prop_map(|(n, r)| PlanChanged {
            plan: plan_id(n),
            definition: replicated(r),
        }
        .into()),
        2 => (point.clone(), point.clone(), any::<bool>(), any::<bool>(), 0i64..40)
            .prop_map(|(src, copy, off, storage, locked)| copy_of(src, copy, off, storage, locked)),
        1 => point.clone().prop_map(|pt| JobScheduled {
            job: JobId::new(format!("c{pt}")),
            kind: JobKind::Copy,
            plan: Some(plan_id(1)),
            point: Some(sid(pt)),
            due_unix_ns: T0,
            attempt: 1,
            spec: JobSpec::default(),
        }
        .into()),
        1 => point.clone().prop_map(|pt| JobStarted {
            job: JobId::new(format!("c{pt}")),
            agent: None,
        }
        .into()),
        1 => plan.clone().prop_map(|n| PlanChanged {
            plan: plan_id(n),
            definition: plan_def(24 * 3600, 48 * 3600),
        }
        .into()),
        3 => (point.clone(), plan.clone(), 0u64..3).prop_map(|(pt, pl, f)| commit_files(pt, pl, f)),
        3 => (point.clone(), arb_depth(), any::<bool>()).prop_map(|(pt, d, ok)| verified(pt, d, ok)),
        3 => (point.clone(), arb_evidence(), any::<bool>()).prop_map(|(pt, evidence, ok)| if ok {
            RestoreTestPassed { point: sid(pt), job: None, evidence }.into()
        } else {
            RestoreTestFailed {
                point: sid(pt),
                job: None,
                evidence,
                reason: "r".into(),
                cause: "damaged".into(),
            }
            .into()
        }),
        1 => (point.clone(), "[vr]").prop_map(|(pt, k)| JobScheduled {
            job: JobId::new(format!("{k}{pt}")),
            kind: if k == "v" { JobKind::Verify } else { JobKind::RestoreTest },
            plan: Some(plan_id(1)),
            point: Some(sid(pt)),
            due_unix_ns: T0,
            attempt: 1,
            spec: JobSpec::default(),
        }
        .into()),
        1 => (point.clone(), "[vr]").prop_map(|(pt, k)| JobStarted {
            job: JobId::new(format!("{k}{pt}")),
            agent: None,
        }
        .into()),
        1 => (point.clone(), "[vr]").prop_map(|(pt, k)| JobFinished {
            job: JobId::new(format!("{k}{pt}")),
        }
        .into()),
        1 => plan.clone().prop_map(|n| JobScheduled {
            job: JobId::new(format!("b{n}")),
            kind: JobKind::Backup,
            plan: Some(plan_id(n)),
            point: None,
            due_unix_ns: T0,
            attempt: 1,
            spec: JobSpec::default(),
        }
        .into()),
        1 => plan.clone().prop_map(|n| JobStarted { job: JobId::new(format!("b{n}")), agent: None }.into()),
        1 => plan.prop_map(|n| JobFinished { job: JobId::new(format!("b{n}")) }.into()),
        1 => (point.clone(), any::<bool>()).prop_map(|(pt, known)| read_back(&["01"], known.then(|| vec![pt]))),
        1 => point.clone().prop_map(|pt| PointForgotten { point: sid(pt), rule: "r".into() }.into()),
        1 => point.prop_map(|pt| PointDiscovered {
            repository: RepositoryId::new("main"),
            snapshot: sid(pt),
            snapshot_time_unix_ns: T0,
            plan: Some(plan_id(1)),
        }
        .into()),
    ]
}

/// Facts that only ever say something is worse (the issue's list).
fn arb_negative_fact() -> impl Strategy<Value = Event> {
    let point = 1..=POINTS;
    prop_oneof![
        (point.clone(), arb_depth()).prop_map(|(pt, d)| verified(pt, d, false)),
        (point.clone(), arb_evidence()).prop_map(|(pt, evidence)| RestoreTestFailed {
            point: sid(pt),
            job: None,
            evidence,
            reason: "r".into(),
            cause: "damaged".into(),
        }
        .into()),
        (point.clone(), "[vrc]").prop_map(|(pt, k)| job_failed(&format!("{k}{pt}"))),
        (1..=PLANS).prop_map(|n| job_failed(&format!("b{n}"))),
        (point.clone(), any::<bool>())
            .prop_map(|(pt, known)| read_back(&["01"], known.then(|| vec![pt]))),
        point.clone().prop_map(|pt| PointVanished {
            point: sid(pt),
            repository: RepositoryId::new("main"),
            reason: "r".into(),
        }
        .into()),
        (
            prop::sample::select(vec![
                "verification.failed",
                "restore_test.passed",
                "job.failed",
                "plan.changed",
                "backup.committed",
                "repository.read_back",
                "copy.committed",
                "teleport.x"
            ]),
            point.clone(),
        )
            .prop_map(|(t, pt)| {
                let payload = match t.split('.').next() {
                    Some("verification" | "restore_test") => {
                        let mut v = vec![0x91, 0xc4, 0x20];
                        v.extend([pt; 32]);
                        v
                    }
                    Some("job") => leading(&format!("v{pt}")),
                    Some("copy") => leading(&format!("c{pt}")),
                    Some("plan") => leading("p1"),
                    Some("repository") => leading("main"),
                    _ => vec![0x90],
                };
                unknown(t, payload)
            }),
        (1..=PLANS).prop_map(|n| {
            let mut def = plan_def(24 * 3600, 48 * 3600);
            def.source = "/moved".into();
            PlanChanged {
                plan: plan_id(n),
                definition: def,
            }
            .into()
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Monotonicity: inserting a negative fact anywhere in a history never
    /// raises any point's state or any plan's protection, at any time after.
    #[test]
    fn a_negative_fact_never_raises_a_state_or_a_protection(
        events in proptest::collection::vec(arb_history_event(), 0..40),
        at in any::<prop::sample::Index>(),
        negative in arb_negative_fact(),
    ) {
        let cut = at.index(events.len() + 1);
        let without = given(&events);
        let mut with_events = events[..cut].to_vec();
        with_events.push(negative.clone());
        with_events.extend_from_slice(&events[cut..]);
        let with = given(&with_events);
        for n in 1..=POINTS {
            let (a, b) = (state(&with, n), state(&without, n));
            prop_assert!(
                a.rank() <= b.rank(),
                "point {n}: {a} with {negative:?} at {cut}, {b} without"
            );
        }
        // The negative fact shifts the later seqs (and times) by one.
        for now in [T0 + 60 * SEC, T0 + HOUR, T0 + 30 * HOUR, T0 + 9 * 24 * HOUR] {
            for n in 1..=PLANS {
                let a = with.plan_protection(&plan_id(n), now + SEC);
                let b = without.plan_protection(&plan_id(n), now);
                prop_assert!(
                    a.status <= b.status,
                    "plan {n} at {now}: {} ({}) with {negative:?} at {cut}, {} ({}) without",
                    a.status, a.reason, b.status, b.reason
                );
            }
        }
    }

    /// Safety: a recoverable point always has a proving restore test after a
    /// passed verification, newer than every negative fact about it, and is
    /// not empty; a protected plan has such a point recorded after its epoch.
    #[test]
    fn recoverable_and_protected_always_rest_on_a_proof(
        events in proptest::collection::vec(prop_oneof![4 => arb_history_event(), 1 => arb_negative_fact()], 0..60),
    ) {
        let p = given(&events);
        for pt in p.points.points.values() {
            if pt.state != PointState::Recoverable {
                continue;
            }
            let r = pt.last_restore_test.as_ref().expect("a restore test");
            prop_assert!(r.passed && !r.evidence.is_vacuous() && r.after_passed_verification);
            prop_assert!(pt.last_failed_check.is_none_or(|f| f.seq < r.at.seq));
            prop_assert!(pt.cap().is_none() && pt.open_verification_failure.is_none());
            prop_assert!(pt.open_restore_failure.is_none() && !pt.is_empty());
        }
        for plan in p.plans.plans.values() {
            if p.plan_protection(&plan.id, T0 + HOUR).status == Protection::Protected {
                prop_assert!(p.points.of_plan(&plan.id).any(|pt| pt.state == PointState::Recoverable
                    && pt.since.seq > plan.epoch.seq));
                // A replica requirement rests on a proven copy of its own.
                let required = plan.definition.replica.as_ref().filter(|r| {
                    r.require != crate::plan::ReplicaRequirement::Nothing
                });
                if let Some(r) = required {
                    let immutable = r.require == crate::plan::ReplicaRequirement::ImmutableOffHost;
                    let proven_copy = p.points.copies_of_plan(&plan.id).any(|pt| {
                        pt.state == PointState::Recoverable
                            && pt.repository == r.repository
                            && pt.since.seq > plan.epoch.seq
                            && (!immutable
                                || (pt.immutable_at(T0 + HOUR)
                                    && pt.copy.as_ref().is_some_and(|c| c.off_host)))
                    });
                    prop_assert!(proven_copy, "protected without the copy its replica policy requires");
                }
            }
        }
    }
}

// ---- Found by cargo mutants -----------------------------------------------

/// `cargo mutants` (`replace * with +` in `CLOCK_TOLERANCE_NS`): the
/// tolerance for evidence dated after now is five minutes, not a second.
/// Four minutes of skew still proves; six do not.
#[test]
fn mutants_evidence_after_now_is_tolerated_for_five_minutes_and_no_more() {
    let p = given(&recoverable_history());
    let recorded = T0 + 4 * SEC;
    assert_eq!(
        p.plan_protection(&plan_id(1), recorded - 4 * 60 * SEC)
            .status,
        Protection::Protected,
        "four minutes of skew are within the tolerance"
    );
    assert_eq!(
        p.plan_protection(&plan_id(1), recorded - 6 * 60 * SEC)
            .status,
        Protection::Unknown,
        "six minutes are not"
    );
    // The tolerance is inclusive (the `>` of the log-wide cap).
    assert_eq!(
        p.plan_protection(&plan_id(1), recorded - CLOCK_TOLERANCE_NS)
            .status,
        Protection::Protected,
        "exactly five minutes are within the tolerance"
    );
}

/// `cargo mutants` (`replace match guard p.removed.is_none() with true`):
/// a removed plan cannot be changed or removed again. Either is an
/// inconsistency, and the plan keeps its definition, its epoch and its
/// first removal.
#[test]
fn mutants_a_removed_plan_is_neither_changed_nor_removed_again() {
    let removed: Event = PlanRemoved { plan: plan_id(1) }.into();
    let mut p = given(&[plan_created(1), removed.clone()]);
    let before = p.plans.plans.get(&plan_id(1)).cloned().expect("plan");
    let mut changed = plan_def(24 * 3600, 48 * 3600);
    changed.source = "/elsewhere".into();
    apply(
        &mut p,
        &PlanChanged {
            plan: plan_id(1),
            definition: changed,
        }
        .into(),
    );
    apply(&mut p, &removed);
    let after = p.plans.plans.get(&plan_id(1)).expect("plan");
    assert_eq!(after.definition, before.definition, "not changed");
    assert_eq!(after.epoch, before.epoch, "the epoch did not move");
    assert_eq!(after.removed, before.removed, "the first removal stands");
    assert_eq!(
        p.inconsistencies
            .iter()
            .map(|i| i.event_type.as_str())
            .collect::<Vec<_>>(),
        vec!["plan.changed", "plan.removed"]
    );
}

/// `cargo mutants` (`PointState::as_str`, `Protection::as_str` and their
/// `Display` replaced by constants): the names are the API's and the
/// docs' vocabulary, and `Display` says the same.
#[test]
fn mutants_state_names_are_the_documented_ones() {
    let points: Vec<String> = PointState::ALL.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        points,
        [
            "unknown",
            "unverified",
            "verified",
            "recoverable",
            "corrupt",
            "unrecoverable",
            "expired",
            "vanished"
        ]
    );
    for s in PointState::ALL {
        assert_eq!(s.to_string(), s.as_str());
    }
    let plans: Vec<String> = [
        Protection::Unprotected,
        Protection::Unknown,
        Protection::AtRisk,
        Protection::Protected,
    ]
    .iter()
    .map(|p| format!("{p}/{}", p.as_str()))
    .collect();
    assert_eq!(
        plans,
        [
            "unprotected/unprotected",
            "unknown/unknown",
            "at-risk/at-risk",
            "protected/protected"
        ]
    );
}

/// `cargo mutants` (`PointState::rank` replaced by a constant): the rank
/// the monotonicity rule compares is the documented order, so a constant
/// rank cannot make every history look monotone.
#[test]
fn mutants_rank_orders_the_states_as_documented() {
    use PointState::*;
    for s in [Expired, Vanished, Corrupt, Unrecoverable] {
        assert_eq!(s.rank(), 0, "{s} counts for nothing");
    }
    assert!(Unknown.rank() > Corrupt.rank());
    assert!(Unverified.rank() > Unknown.rank());
    assert!(Verified.rank() > Unverified.rank());
    assert!(Recoverable.rank() > Verified.rank());
}

/// `cargo mutants` (`Point::flagged` replaced by `true`): only an anomaly
/// flags a point.
#[test]
fn mutants_a_point_is_flagged_only_by_an_anomaly() {
    let p = given(&recoverable_history());
    assert!(!p.points.points[&sid(1)].flagged());
    let p = when(
        p,
        AnomalyDetected {
            point: sid(1),
            compared_with: None,
            signals: vec![AnomalySignal {
                kind: "mass-rewrite".into(),
                score_permille: 900,
                detail: String::new(),
            }],
            paths: Vec::new(),
        }
        .into(),
    );
    assert!(p.points.points[&sid(1)].flagged());
    assert_eq!(
        state(&p, 1),
        PointState::Recoverable,
        "a flag is no verdict"
    );
}

/// A check job that finished is no longer running: a later abandonment
/// named after it (a late, superseded report) does not cap its point.
/// (`cargo mutants` deleting the `job.finished` arm of the points
/// projection survives this test: the jobs projection already refuses an
/// abandonment after a finish, so the arm only keeps the running-check map
/// from growing; it changes no state.)
#[test]
fn mutants_a_finished_check_job_no_longer_caps_its_point() {
    let mut events = recoverable_history();
    events.extend(check_job("c", 1, JobKind::Verify));
    events.push(vp(1));
    events.push(
        JobFinished {
            job: JobId::new("c"),
        }
        .into(),
    );
    events.push(
        JobAbandoned {
            job: JobId::new("c"),
            reason: "a late report of a superseded run".into(),
        }
        .into(),
    );
    let p = given(&events);
    assert_eq!(state(&p, 1), PointState::Recoverable);
}

/// `cargo mutants` (`!=` for `==` in `newest_first`): points put into the
/// projection by hand (not indexed) are listed too, newest first.
#[test]
fn mutants_newest_first_lists_points_that_were_not_indexed() {
    let mut p = given(&[plan_created(1), commit(1), commit(2)]);
    let mut extra = p.points.points[&sid(2)].clone();
    extra.id = sid(3);
    extra.since.seq = 99;
    p.points.points.insert(sid(3), extra);
    let order: Vec<SnapshotId> = p.points.newest_first().map(|pt| pt.id).collect();
    assert_eq!(order, vec![sid(3), sid(2), sid(1)]);
}

/// `cargo mutants` (the guard that keeps the deeper of two open
/// verification failures, and the `depth` field of the kept failure): a
/// shallow failure after a deep one does not make the deep one clearable by
/// a shallow pass, whatever their order.
#[test]
fn mutants_the_deeper_open_verification_failure_stays_open() {
    use VerifyDepth::{ReadAll, Structure};
    for (first, second) in [(ReadAll, Structure), (Structure, ReadAll)] {
        let p = given(&[
            plan_created(1),
            commit(1),
            verified(1, first, false),
            verified(1, second, false),
            verified(1, Structure, true),
        ]);
        assert_eq!(
            state(&p, 1),
            PointState::Corrupt,
            "{first:?} then {second:?} failed: a structure pass clears neither"
        );
        let p = when(p, verified(1, ReadAll, true));
        assert_eq!(state(&p, 1), PointState::Verified, "a read-all pass does");
    }
}

/// `cargo mutants` (the `restore_test.started` arm deleted): a restore
/// test that starts on a forgotten point is an inconsistency, as a
/// verification's start is.
#[test]
fn mutants_a_restore_test_started_on_a_forgotten_point_is_inconsistent() {
    let p = given(&[
        plan_created(1),
        commit(1),
        PointForgotten {
            point: sid(1),
            rule: "keep-last 0".into(),
        }
        .into(),
        RestoreTestStarted {
            point: sid(1),
            job: None,
        }
        .into(),
    ]);
    assert_eq!(
        p.inconsistencies
            .iter()
            .map(|i| i.event_type.as_str())
            .collect::<Vec<_>>(),
        vec!["restore_test.started"]
    );
}

/// `cargo mutants` (`!=` for `==` when a forgotten point's running checks
/// are dropped): forgetting one point leaves the check jobs running on
/// the others, so a check of another point that then fails without a
/// verdict still caps that point.
#[test]
fn mutants_forgetting_a_point_keeps_the_running_checks_of_others() {
    let mut events = vec![plan_created(1), commit(1), commit_files(2, 1, 3), vp(2)];
    events.extend(check_job("c2", 2, JobKind::Verify));
    events.push(
        PointForgotten {
            point: sid(1),
            rule: "keep-last 1".into(),
        }
        .into(),
    );
    events.push(job_failed("c2"));
    let p = given(&events);
    assert_eq!(
        state(&p, 2),
        PointState::Unknown,
        "the failed check caps it"
    );
}

/// `cargo mutants` (`>` for `>=` in the lock checks): a lock runs until
/// its time, exclusive (forgetting at that very time is allowed), and
/// locking again until the same time is no shortening.
#[test]
fn mutants_lock_bounds() {
    let lock = |until| -> Event {
        PointLocked {
            point: sid(1),
            until_unix_ns: until,
        }
        .into()
    };
    // Recorded at T0 + 1 s, + 2 s, ...: the forget below is the 5th event.
    let until = T0 + 5 * SEC;
    let p = given(&[
        plan_created(1),
        commit(1),
        lock(until),
        lock(until),
        PointForgotten {
            point: sid(1),
            rule: "keep-last 0".into(),
        }
        .into(),
    ]);
    assert!(p.inconsistencies.is_empty(), "{:?}", p.inconsistencies);
    assert_eq!(state(&p, 1), PointState::Expired);
}

/// `cargo mutants` (the guard that trusts a read-back's list of affected
/// points only when it names its damaged packs): damage it could not tie
/// to packs makes every live point of the repository suspect, whatever
/// list came with it.
#[test]
fn mutants_damage_without_named_packs_makes_every_point_suspect() {
    let mut history = recoverable_history();
    history.extend([commit_files(2, 1, 3), vp(2), rp(2)]);
    let mut damage = read_back(&[], Some(vec![1]));
    if let Event::PacksReadBack(e) = &mut damage {
        e.damaged = vec!["a pack could not be listed".into()];
    }
    history.push(damage);
    let p = given(&history);
    assert_eq!(state(&p, 1), PointState::Unknown);
    assert_eq!(state(&p, 2), PointState::Unknown, "not only the listed one");
}

/// `cargo mutants` (`>` in the list of damaged packs a suspect point
/// names): at most three packs are named, then "...".
#[test]
fn mutants_a_suspect_point_names_at_most_three_damaged_packs() {
    let reason = |packs: &[&str]| {
        let mut history = recoverable_history();
        history.push(read_back(packs, Some(vec![1])));
        let p = given(&history);
        p.points.points[&sid(1)]
            .suspect
            .as_ref()
            .map(|c| c.reason.clone())
            .unwrap_or_default()
    };
    assert!(reason(&["0a", "0b", "0c"]).contains("pack 0a, 0b, 0c of"));
    let four = reason(&["0a", "0b", "0c", "0d"]);
    assert!(four.contains("pack 0a, 0b, 0c, ... of"), "{four}");
}

/// `cargo mutants` (`>` for `>=` in the grace of a young plan): a plan
/// without points is `unknown` only while it is younger than its RPO; at
/// exactly its RPO it is `unprotected`.
#[test]
fn mutants_the_grace_of_a_young_plan_ends_at_its_rpo() {
    let p = given(&[plan_created(1)]);
    let created = T0 + SEC;
    let rpo = 24 * HOUR;
    assert_eq!(
        p.plan_protection(&plan_id(1), created + rpo - 1).status,
        Protection::Unknown
    );
    assert_eq!(
        p.plan_protection(&plan_id(1), created + rpo).status,
        Protection::Unprotected
    );
}

/// `cargo mutants` (the guard `found.status >= AtRisk` of the empty-newest
/// rule replaced by `true`): an empty newest point makes a plan at best
/// `at-risk`, never better than what its points say: an unprotected plan
/// stays unprotected.
#[test]
fn mutants_an_empty_newest_point_never_raises_a_plan() {
    let p = given(&[
        plan_created(1),
        commit_files(1, 1, 0),
        verified(1, VerifyDepth::ReadAll, false),
    ]);
    assert_eq!(state(&p, 1), PointState::Corrupt);
    assert_eq!(protection(&p, 1), Protection::Unprotected);
}

/// `cargo mutants` (the `||` of the checks that skip points of another
/// repository, forgotten or vanished): a read-back of one repository that
/// lists a point of another leaves that point alone.
#[test]
fn mutants_a_read_back_never_touches_another_repositorys_point() {
    let mut history = recoverable_history();
    let mut damage = read_back(&["0a"], Some(vec![1]));
    if let Event::PacksReadBack(e) = &mut damage {
        e.repository = RepositoryId::new("other");
    }
    history.push(damage);
    assert_eq!(state(&given(&history), 1), PointState::Recoverable);
}

/// `cargo mutants` (the `array 16` and `array 32` arms of reading the
/// point an unreadable event is about): a payload of 16 or more fields
/// still names its point, so only that point is held at `unknown`.
#[test]
fn mutants_an_unreadable_event_with_many_fields_still_names_its_point() {
    let mut base = recoverable_history();
    base.extend([commit_files(2, 1, 3), vp(2), rp(2)]);
    for header in [vec![0xdc, 0x00, 0x10], vec![0xdd, 0x00, 0x00, 0x00, 0x10]] {
        let mut payload = header.clone();
        payload.extend([0xc4, 0x20]);
        payload.extend(sid(1).0);
        payload.extend(std::iter::repeat_n(0xc0, 15));
        let p = given(&[base.clone(), vec![unknown("verification.passed", payload)]].concat());
        assert_eq!(state(&p, 1), PointState::Unknown, "{header:x?}");
        assert_eq!(state(&p, 2), PointState::Recoverable, "{header:x?}");
    }
}

/// `cargo mutants` (the arms of reading the id an unreadable event leads
/// with): whatever msgpack header its array has (fixarray, array 16,
/// array 32) and however its leading string is encoded (fixstr, str 8,
/// str 16), an unreadable plan event names its plan, and an unreadable
/// backup event its job, so only that plan is held at `unknown`.
#[test]
fn mutants_an_unreadable_event_names_its_plan_whatever_its_encoding() {
    let mut base = recoverable_history();
    base.push(plan_created(2));
    base.extend([commit_files(2, 2, 3), vp(2), rp(2)]);
    base.push(
        JobScheduled {
            job: JobId::new("b2"),
            kind: JobKind::Backup,
            plan: Some(plan_id(2)),
            point: None,
            due_unix_ns: T0,
            attempt: 1,
            spec: JobSpec::default(),
        }
        .into(),
    );
    let arrays: [&[u8]; 3] = [
        &[0x92],
        &[0xdc, 0x00, 0x02],
        &[0xdd, 0x00, 0x00, 0x00, 0x02],
    ];
    let strings: [&[u8]; 3] = [&[0xa2], &[0xd9, 0x02], &[0xda, 0x00, 0x02]];
    for (event_type, id) in [("plan.changed", "p2"), ("backup.committed", "b2")] {
        for array in arrays {
            for string in strings {
                let mut payload = [array, string].concat();
                payload.extend(id.as_bytes());
                payload.push(0xc0);
                let p = given(&[base.clone(), vec![unknown(event_type, payload)]].concat());
                let case = format!("{event_type} {array:x?} {string:x?}");
                assert_eq!(protection(&p, 1), Protection::Protected, "{case}");
                assert_eq!(protection(&p, 2), Protection::Unknown, "{case}");
            }
        }
    }
}

/// Security finding 16: an unlock clears the lock, so the point can be
/// forgotten and locked again for less; an unlock of a point with no lock
/// is an inconsistency and changes nothing.
#[test]
fn an_unlock_clears_the_lock_and_needs_one() {
    use crate::event::PointUnlocked;
    let lock = |until| -> Event {
        PointLocked {
            point: sid(1),
            until_unix_ns: until,
        }
        .into()
    };
    let unlock = || -> Event {
        PointUnlocked {
            point: sid(1),
            reason: "hold lifted".into(),
        }
        .into()
    };
    let p = given(&[plan_created(1), commit(1), unlock()]);
    assert_eq!(p.inconsistencies.len(), 1, "{:?}", p.inconsistencies);
    let far = T0 + 1000 * SEC;
    let p = given(&[
        plan_created(1),
        commit(1),
        lock(far),
        unlock(),
        lock(T0 + 10 * SEC),
        unlock(),
        PointForgotten {
            point: sid(1),
            rule: "keep-last 0".into(),
        }
        .into(),
    ]);
    assert!(p.inconsistencies.is_empty(), "{:?}", p.inconsistencies);
    assert_eq!(state(&p, 1), PointState::Expired);
}

// ---- found by the chaos harness -------------------------------------------

/// A full check's verdict with its job.
fn with_job(e: Event, job: &str) -> Event {
    match e {
        Event::VerificationPassed(mut v) => {
            v.job = Some(JobId::new(job));
            v.into()
        }
        Event::RestoreTestPassed(mut r) => {
            r.job = Some(JobId::new(job));
            r.into()
        }
        other => other,
    }
}

#[test]
fn regression_chaos_a_full_check_that_began_before_the_damage_was_found_does_not_clear_it() {
    for (kind, verdict) in [
        (JobKind::Verify, vp(1)),
        (JobKind::RestoreTest, restored(1, 3, true, true)),
    ] {
        // The check starts, the read-back finds damage in a pack of the
        // point while it reads, then the check passes: it may have read
        // those bytes before they were damaged.
        let mut events = recoverable_history();
        events.extend(check_job("c", 1, kind));
        events.push(read_back(&["01"], Some(vec![1])));
        events.push(with_job(verdict.clone(), "c"));
        let p = given(&events);
        assert_eq!(state(&p, 1), PointState::Unknown, "{kind:?}");
        assert!(p.points.points[&sid(1)].suspect.is_some(), "{kind:?}");
        // A full check that starts after the read-back does clear it.
        let mut later = events.clone();
        later.extend(check_job("d", 1, kind));
        later.push(with_job(verdict.clone(), "d"));
        let p = given(&later);
        assert!(p.points.points[&sid(1)].suspect.is_none(), "{kind:?}");
        assert_eq!(state(&p, 1), PointState::Recoverable, "{kind:?}");
        // A verdict with no job (the CLI's) counts from where it is
        // recorded, as before.
        let mut jobless = recoverable_history();
        jobless.push(read_back(&["01"], Some(vec![1])));
        jobless.push(verdict);
        assert!(
            given(&jobless).points.points[&sid(1)].suspect.is_none(),
            "{kind:?}"
        );
    }
}
