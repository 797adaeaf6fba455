//! Given / when / then tests of every transition, and property tests.

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::event::*;
use crate::ids::*;
use crate::testkit::{evidence, plan_def, sid};

const SEC: i64 = 1_000_000_000;
const T0: i64 = 1_800_000_000 * SEC;

/// Applies events with seq 1, 2, ... recorded one second apart from T0.
fn given(events: &[Event]) -> Projections {
    let mut p = Projections::new();
    for e in events {
        let seq = p.last_seq + 1;
        p.apply_event(
            Recorded {
                seq,
                unix_ns: T0 + seq as i64 * SEC,
            },
            e,
        );
    }
    p
}

fn when(mut p: Projections, e: Event) -> Projections {
    let seq = p.last_seq + 1;
    p.apply_event(
        Recorded {
            seq,
            unix_ns: T0 + seq as i64 * SEC,
        },
        &e,
    );
    p
}

fn commit(point: u8) -> Event {
    commit_at(point, T0)
}

fn commit_at(point: u8, time: i64) -> Event {
    BackupCommitted {
        job: None,
        plan: Some(PlanId::new("p1")),
        repository: RepositoryId::new("main"),
        snapshot: sid(point),
        snapshot_time_unix_ns: time,
        summary: BackupSummary {
            files: 3,
            bytes: 300,
            ..BackupSummary::default()
        },
        changes: None,
    }
    .into()
}

fn discovered(point: u8) -> Event {
    PointDiscovered {
        repository: RepositoryId::new("main"),
        snapshot: sid(point),
        snapshot_time_unix_ns: T0,
        plan: None,
    }
    .into()
}

fn vp(point: u8) -> Event {
    VerificationPassed {
        point: sid(point),
        job: None,
        depth: crate::VerifyDepth::ReadAll,
        bytes_read: 1,
        blobs_checked: 1,
    }
    .into()
}

fn vf(point: u8) -> Event {
    VerificationFailed {
        point: sid(point),
        job: None,
        depth: crate::VerifyDepth::ReadAll,
        bytes_read: 1,
        damaged: vec!["pack 1".into()],
    }
    .into()
}

fn rp(point: u8) -> Event {
    RestoreTestPassed {
        point: sid(point),
        job: None,
        evidence: evidence(),
    }
    .into()
}

fn rf(point: u8) -> Event {
    RestoreTestFailed {
        point: sid(point),
        job: None,
        evidence: evidence(),
        reason: "mismatch".into(),
        cause: "mismatch".into(),
    }
    .into()
}

fn forgotten(point: u8) -> Event {
    PointForgotten {
        point: sid(point),
        rule: "keep-last 1".into(),
    }
    .into()
}

use PointState::*;

/// Starting states, each with the events that lead to it.
fn starts() -> Vec<(&'static str, Vec<Event>, PointState)> {
    vec![
        ("absent", vec![], Unknown),
        ("unknown", vec![discovered(1)], Unknown),
        ("unverified", vec![commit(1)], Unverified),
        ("verified", vec![commit(1), vp(1)], Verified),
        ("recoverable", vec![commit(1), vp(1), rp(1)], Recoverable),
        ("corrupt", vec![commit(1), vf(1)], Corrupt),
        (
            "unrecoverable",
            vec![commit(1), vp(1), rf(1)],
            Unrecoverable,
        ),
        ("expired", vec![commit(1), forgotten(1)], Expired),
    ]
}

/// The transition table of docs/events.md: for each starting state, the
/// state after each event, and whether the event is an inconsistency
/// (`true`). Columns: committed, discovered, verification passed,
/// verification failed, restore test passed, restore test failed, forgotten.
#[rustfmt::skip]
fn table() -> Vec<(&'static str, [(PointState, bool); 7])> {
    vec![
        ("absent",        [(Unverified, false), (Unknown, false), (Unknown, true), (Unknown, true), (Unknown, true), (Unknown, true), (Unknown, true)]),
        ("unknown",       [(Unverified, false), (Unknown, false), (Verified, false), (Corrupt, false), (Unknown, false), (Unrecoverable, false), (Expired, false)]),
        ("unverified",    [(Unverified, true), (Unverified, false), (Verified, false), (Corrupt, false), (Unverified, false), (Unrecoverable, false), (Expired, false)]),
        ("verified",      [(Verified, true), (Verified, false), (Verified, false), (Corrupt, false), (Recoverable, false), (Unrecoverable, false), (Expired, false)]),
        ("recoverable",   [(Recoverable, true), (Recoverable, false), (Recoverable, false), (Corrupt, false), (Recoverable, false), (Unrecoverable, false), (Expired, false)]),
        ("corrupt",       [(Corrupt, true), (Corrupt, false), (Verified, false), (Corrupt, false), (Corrupt, true), (Unrecoverable, false), (Expired, false)]),
        ("unrecoverable", [(Unrecoverable, true), (Unrecoverable, false), (Unrecoverable, false), (Corrupt, false), (Recoverable, false), (Unrecoverable, false), (Expired, false)]),
        ("expired",       [(Expired, true), (Expired, false), (Expired, true), (Expired, true), (Expired, true), (Expired, true), (Expired, true)]),
    ]
}

#[test]
fn every_transition_of_the_table() {
    let events = [
        commit(1),
        discovered(1),
        vp(1),
        vf(1),
        rp(1),
        rf(1),
        forgotten(1),
    ];
    let names = [
        "committed",
        "discovered",
        "verif passed",
        "verif failed",
        "restore passed",
        "restore failed",
        "forgotten",
    ];
    for ((name, prefix, start_state), (row_name, row)) in starts().into_iter().zip(table()) {
        assert_eq!(name, row_name);
        let start = given(&prefix);
        assert_eq!(start.points.state_of(&sid(1)), start_state, "given {name}");
        assert!(start.inconsistencies.is_empty(), "given {name}");
        for ((event, (expect, inconsistent)), ename) in events.iter().zip(row).zip(names) {
            let then = when(start.clone(), event.clone());
            assert_eq!(
                then.points.state_of(&sid(1)),
                expect,
                "given {name}, when {ename}"
            );
            assert_eq!(
                !then.inconsistencies.is_empty(),
                inconsistent,
                "given {name}, when {ename}"
            );
        }
    }
}

#[test]
fn restore_evidence_older_than_a_failed_check_does_not_make_a_point_recoverable() {
    let p = given(&[commit(1), vp(1), rp(1), vf(1), vp(1)]);
    assert_eq!(p.points.state_of(&sid(1)), Verified);
    let p = when(p, rp(1));
    assert_eq!(p.points.state_of(&sid(1)), Recoverable);
}

#[test]
fn a_restore_test_before_any_verification_does_not_count_later() {
    let p = given(&[commit(1), rp(1), vp(1)]);
    assert_eq!(p.points.state_of(&sid(1)), Verified);
}

#[test]
fn a_result_for_another_point_than_the_jobs_is_an_inconsistency() {
    let job = JobId::new("v1");
    let p = given(&[
        commit(1),
        commit(2),
        VerificationStarted {
            point: sid(1),
            job: Some(job.clone()),
            depth: crate::VerifyDepth::Structure,
        }
        .into(),
    ]);
    let p = when(
        p,
        VerificationPassed {
            point: sid(2),
            job: Some(job),
            depth: crate::VerifyDepth::Structure,
            bytes_read: 0,
            blobs_checked: 0,
        }
        .into(),
    );
    assert_eq!(p.points.state_of(&sid(2)), Unverified);
    assert_eq!(p.inconsistencies.len(), 1);
    assert_eq!(p.inconsistencies[0].point, Some(sid(2)));
}

#[test]
fn locks_block_forgetting_and_cannot_be_shortened() {
    let lock = |until| {
        Event::from(PointLocked {
            point: sid(1),
            until_unix_ns: until,
        })
    };
    let p = given(&[commit(1), lock(T0 + 1000 * SEC)]);
    let p = when(p, forgotten(1));
    assert_eq!(p.points.state_of(&sid(1)), Unverified);
    assert_eq!(p.inconsistencies.len(), 1);
    let p = when(p, lock(T0 + 10 * SEC));
    assert_eq!(
        p.points.points[&sid(1)].locked_until_unix_ns,
        Some(T0 + 1000 * SEC)
    );
    assert_eq!(p.inconsistencies.len(), 2);
    // Once the lock has passed, retention may forget it.
    let mut p = p;
    p.apply_event(
        Recorded {
            seq: 10,
            unix_ns: T0 + 2000 * SEC,
        },
        &forgotten(1),
    );
    assert_eq!(p.points.state_of(&sid(1)), Expired);
}

#[test]
fn anomalies_flag_a_point_without_changing_its_state() {
    let p = given(&[commit(1), vp(1)]);
    let p = when(
        p,
        AnomalyDetected {
            point: sid(1),
            compared_with: None,
            signals: vec![AnomalySignal {
                kind: "mass-rewrite".into(),
                score_permille: 800,
                detail: String::new(),
            }],
            paths: Vec::new(),
        }
        .into(),
    );
    assert_eq!(p.points.state_of(&sid(1)), Verified);
    assert!(p.points.points[&sid(1)].flagged());
}

#[test]
fn unknown_events_are_listed_and_change_nothing() {
    let p = given(&[
        commit(1),
        Event::Unknown(UnknownEvent {
            event_type: "x.y".into(),
            schema_version: 2,
            payload: vec![],
        }),
    ]);
    assert_eq!(p.unknown_events.len(), 1);
    assert_eq!(p.unknown_events[0].event_type, "x.y");
    assert_eq!(p.last_seq, 2);
    assert_eq!(p.points.state_of(&sid(1)), Unverified);
}

// ---- jobs -----------------------------------------------------------------

fn scheduled(job: &str, attempt: u32) -> Event {
    JobScheduled {
        job: JobId::new(job),
        kind: JobKind::Backup,
        plan: Some(PlanId::new("p1")),
        point: None,
        due_unix_ns: T0,
        attempt,
        spec: Default::default(),
    }
    .into()
}

fn started(job: &str) -> Event {
    JobStarted {
        job: JobId::new(job),
        agent: Some(AgentId::new("a1")),
    }
    .into()
}

fn failed(job: &str) -> Event {
    JobFailed {
        job: JobId::new(job),
        error_kind: "io".into(),
        message: "x".into(),
        retryable: true,
    }
    .into()
}

fn finished(job: &str) -> Event {
    JobFinished {
        job: JobId::new(job),
    }
    .into()
}

#[test]
fn job_lifecycle_with_retries() {
    let p = given(&[scheduled("j", 1)]);
    assert_eq!(p.jobs.jobs[&JobId::new("j")].state, JobState::Scheduled);
    let p = when(p, started("j"));
    assert_eq!(p.jobs.jobs[&JobId::new("j")].state, JobState::Running);
    assert_eq!(
        p.jobs.jobs[&JobId::new("j")].retries(),
        0,
        "the first start"
    );
    let p = when(
        p,
        JobProgress {
            job: JobId::new("j"),
            checkpoint: vec![7],
            done_bytes: 5,
            total_bytes: Some(10),
        }
        .into(),
    );
    assert_eq!(p.jobs.jobs[&JobId::new("j")].checkpoint, Some(vec![7]));
    let p = when(p, failed("j"));
    assert_eq!(p.jobs.jobs[&JobId::new("j")].state, JobState::Failed);
    let p = when(p, scheduled("j", 2));
    let p = when(p, started("j"));
    let p = when(p, finished("j"));
    let j = &p.jobs.jobs[&JobId::new("j")];
    assert_eq!(
        (j.state, j.retries(), j.attempt),
        (JobState::Succeeded, 1, 2)
    );
    assert!(p.inconsistencies.is_empty(), "{:?}", p.inconsistencies);
}

#[test]
fn job_events_out_of_order_are_inconsistencies() {
    let p = given(&[started("nope")]);
    assert_eq!(p.inconsistencies.len(), 1);
    let p = given(&[scheduled("j", 1), finished("j")]);
    assert_eq!(p.jobs.jobs[&JobId::new("j")].state, JobState::Scheduled);
    assert_eq!(p.inconsistencies.len(), 1);
    let p = given(&[scheduled("j", 1), started("j"), finished("j"), started("j")]);
    assert_eq!(p.jobs.jobs[&JobId::new("j")].state, JobState::Succeeded);
    assert_eq!(p.inconsistencies.len(), 1);
    // A scheduled job whose lease ran out before it started is abandoned.
    let p = given(&[
        scheduled("j", 1),
        JobAbandoned {
            job: JobId::new("j"),
            reason: "lease".into(),
        }
        .into(),
    ]);
    assert_eq!(p.jobs.jobs[&JobId::new("j")].state, JobState::Abandoned);
}

// ---- agents ---------------------------------------------------------------

#[test]
fn agents_are_seen_and_leases_end_with_their_job() {
    let a = AgentId::new("a1");
    let p = given(&[
        AgentRegistered {
            agent: a.clone(),
            hostname: "h".into(),
            os: "linux".into(),
            version: "1".into(),
        }
        .into(),
        scheduled("j", 1),
        LeaseGranted {
            agent: a.clone(),
            job: JobId::new("j"),
            expires_unix_ns: T0 + 60 * SEC,
        }
        .into(),
        started("j"),
        AgentSeen {
            agent: a.clone(),
            clock_skew_ms: None,
            version: None,
        }
        .into(),
    ]);
    let agent = &p.agents.agents[&a];
    assert_eq!(agent.last_seen_unix_ns, Some(T0 + 5 * SEC));
    assert_eq!(agent.leases.len(), 1);
    let p = when(p, finished("j"));
    assert!(p.agents.agents[&a].leases.is_empty());
    let p = when(
        p,
        LeaseExpired {
            agent: a.clone(),
            job: JobId::new("j"),
        }
        .into(),
    );
    assert_eq!(p.inconsistencies.len(), 1);
}

/// `cargo mutants` (the registration arm, and the failed and abandoned
/// arms that end leases): a registration records what the agent said of
/// itself, and a lease ends however its job ends.
#[test]
fn an_agent_registers_and_its_leases_end_when_their_jobs_fail_or_are_abandoned() {
    let a = AgentId::new("a1");
    let lease = |job: &str| -> Event {
        LeaseGranted {
            agent: AgentId::new("a1"),
            job: JobId::new(job),
            expires_unix_ns: T0 + 60 * SEC,
        }
        .into()
    };
    let p = given(&[
        AgentRegistered {
            agent: a.clone(),
            hostname: "web-1".into(),
            os: "linux".into(),
            version: "0.1.0".into(),
        }
        .into(),
        scheduled("f", 1),
        scheduled("g", 1),
        lease("f"),
        lease("g"),
        started("f"),
        started("g"),
    ]);
    let agent = &p.agents.agents[&a];
    assert_eq!(
        (
            agent.hostname.as_deref(),
            agent.os.as_deref(),
            agent.version.as_deref(),
            agent.last_seen_unix_ns
        ),
        (Some("web-1"), Some("linux"), Some("0.1.0"), Some(T0 + SEC))
    );
    assert_eq!(agent.leases.len(), 2);
    let p = when(p, failed("f"));
    assert!(!p.agents.agents[&a].leases.contains_key(&JobId::new("f")));
    assert_eq!(p.agents.agents[&a].leases.len(), 1);
    let p = when(
        p,
        JobAbandoned {
            job: JobId::new("g"),
            reason: "the agent stopped renewing".into(),
        }
        .into(),
    );
    assert!(p.agents.agents[&a].leases.is_empty());
}

// ---- plan protection ------------------------------------------------------

const HOUR: i64 = 3600 * SEC;

fn plan_created(rpo_hours: u64, evidence_hours: u64) -> Event {
    PlanCreated {
        plan: PlanId::new("p1"),
        definition: plan_def(rpo_hours * 3600, evidence_hours * 3600),
    }
    .into()
}

fn protection(p: &Projections, now: i64) -> Protection {
    p.plan_protection(&PlanId::new("p1"), now).status
}

#[test]
fn plan_protection_rules() {
    // 24 h RPO, restore evidence valid 48 h.
    let base = [plan_created(24, 48)];
    let now = T0 + 10 * SEC;
    let p = given(&base);
    assert_eq!(
        protection(&p, now),
        Protection::Unknown,
        "young plan, no history"
    );
    assert_eq!(
        protection(&p, now + 48 * HOUR),
        Protection::Unprotected,
        "old plan, nothing in RPO"
    );

    let p = given(&[plan_created(24, 48), commit_at(1, T0)]);
    assert_eq!(
        protection(&p, now),
        Protection::AtRisk,
        "unverified point only"
    );
    let p = given(&[plan_created(24, 48), commit_at(1, T0), vp(1)]);
    assert_eq!(
        protection(&p, now),
        Protection::AtRisk,
        "verified point only"
    );
    let p = given(&[plan_created(24, 48), commit_at(1, T0), vp(1), rp(1)]);
    assert_eq!(protection(&p, now), Protection::Protected);
    assert_eq!(
        protection(&p, now + 25 * HOUR),
        Protection::Unprotected,
        "point older than RPO"
    );
    let p = given(&[plan_created(24, 48), commit_at(1, T0), vp(1), vf(1)]);
    assert_eq!(
        protection(&p, now),
        Protection::Unprotected,
        "only a corrupt point"
    );

    // Stale evidence: the point is inside a long RPO but its proof is old.
    let p = given(&[plan_created(24 * 30, 1), commit_at(1, T0), vp(1), rp(1)]);
    assert_eq!(protection(&p, now), Protection::Protected);
    assert_eq!(protection(&p, now + 2 * HOUR), Protection::AtRisk);

    // The last backup job failed.
    let p = given(&[
        plan_created(24, 48),
        commit_at(1, T0),
        vp(1),
        rp(1),
        scheduled("j", 1),
        started("j"),
        failed("j"),
    ]);
    assert_eq!(protection(&p, now), Protection::Unprotected);
    assert!(p
        .plan_protection(&PlanId::new("p1"), now)
        .reason
        .contains("failed"));
    let p = when(p, scheduled("j", 2));
    let p = when(p, started("j"));
    let p = when(p, finished("j"));
    assert_eq!(protection(&p, now), Protection::Protected);

    let p = given(&[]);
    assert_eq!(protection(&p, now), Protection::Unknown, "no such plan");
}

#[test]
fn a_rollup_is_as_weak_as_its_weakest_member() {
    use Protection::*;
    assert_eq!(rollup([Protected, Protected]), Protected);
    assert_eq!(rollup([Protected, AtRisk]), AtRisk);
    assert_eq!(rollup([Protected, Unknown, AtRisk]), Unknown);
    assert_eq!(rollup([Unknown, Unprotected]), Unprotected);
    assert_eq!(rollup([]), Unknown);
    let p = given(&[
        plan_created(24, 48),
        commit_at(1, T0),
        vp(1),
        rp(1),
        PlanCreated {
            plan: PlanId::new("p2"),
            definition: plan_def(3600, 3600),
        }
        .into(),
    ]);
    assert_eq!(protection(&p, T0 + 10 * SEC), Protected);
    assert_eq!(p.overall_protection(T0 + 10 * SEC), Unknown);
    assert_eq!(p.overall_protection(T0 + 2 * HOUR), Unprotected);
}

// ---- properties -------------------------------------------------------------

fn arb_event(with_restore_pass: bool) -> impl Strategy<Value = Event> {
    let point = 1u8..4;
    let job = prop_oneof![
        Just(None),
        Just(Some(JobId::new("j1"))),
        Just(Some(JobId::new("j2")))
    ];
    let restore_pass: BoxedStrategy<Event> = if with_restore_pass {
        (point.clone(), job.clone())
            .prop_map(|(p, job)| {
                RestoreTestPassed {
                    point: sid(p),
                    job,
                    evidence: evidence(),
                }
                .into()
            })
            .boxed()
    } else {
        (point.clone()).prop_map(rf).boxed()
    };
    prop_oneof![
        Just(plan_created(24, 48)),
        (point.clone(), 0i64..48).prop_map(|(p, h)| commit_at(p, T0 - h * HOUR)),
        point.clone().prop_map(discovered),
        (point.clone(), job.clone()).prop_map(|(p, job)| VerificationStarted {
            point: sid(p),
            job,
            depth: crate::VerifyDepth::ReadAll
        }
        .into()),
        (point.clone(), job.clone())
            .prop_map(|(p, job)| RestoreTestStarted { point: sid(p), job }.into()),
        point.clone().prop_map(vp),
        point.clone().prop_map(vf),
        restore_pass,
        point.clone().prop_map(rf),
        point.clone().prop_map(forgotten),
        (point.clone(), 0i64..100).prop_map(|(p, s)| PointLocked {
            point: sid(p),
            until_unix_ns: T0 + s * SEC
        }
        .into()),
        Just(scheduled("b1", 1)),
        Just(started("b1")),
        Just(finished("b1")),
        Just(failed("b1")),
        Just(Event::Unknown(UnknownEvent {
            event_type: "future.thing".into(),
            schema_version: 1,
            payload: vec![]
        })),
    ]
}

fn envelopes(events: &[Event]) -> Vec<crate::Envelope> {
    events
        .iter()
        .enumerate()
        .map(|(i, e)| crate::Envelope {
            seq: i as u64 + 1,
            recorded_unix_ns: T0 + i as i64 * SEC,
            schema_version: e.schema_version(),
            prev_hash: Default::default(),
            hash: Default::default(),
            event: e.clone(),
        })
        .collect()
}

proptest! {
    #[test]
    fn snapshot_plus_tail_equals_full_replay(
        events in proptest::collection::vec(arb_event(true), 0..60),
        cut in any::<prop::sample::Index>(),
    ) {
        let envs = envelopes(&events);
        let full = Projections::fold(&envs);
        let k = if envs.is_empty() { 0 } else { cut.index(envs.len() + 1) };
        let head = Projections::fold(&envs[..k]);
        let mut restored = Projections::from_snapshot(&head.to_snapshot().expect("snapshot")).expect("decode");
        // Replaying an overlap is harmless: the seq guard skips it.
        for e in &envs[k.saturating_sub(3)..] {
            restored.apply(e);
        }
        prop_assert_eq!(&restored, &full);
    }

    #[test]
    fn nothing_is_recoverable_or_protected_without_a_passed_restore_test(
        events in proptest::collection::vec(arb_event(false), 0..60),
        now_hours in 0i64..100,
    ) {
        let p = Projections::fold(&envelopes(&events));
        for point in p.points.points.values() {
            prop_assert_ne!(point.state, Recoverable);
        }
        prop_assert_ne!(protection(&p, T0 + now_hours * HOUR), Protection::Protected);
    }

    #[test]
    fn every_recoverable_point_has_a_passed_restore_test_after_a_passed_verification(
        events in proptest::collection::vec(arb_event(true), 0..60),
    ) {
        let p = Projections::fold(&envelopes(&events));
        for point in p.points.points.values() {
            if point.state == Recoverable {
                let r = point.last_restore_test.as_ref().expect("restore test");
                prop_assert!(r.passed && r.after_passed_verification);
                prop_assert!(point.last_verification.as_ref().is_some_and(|v| v.passed));
            }
            prop_assert_eq!(point.state, point.derive_state());
        }
    }
}

#[test]
fn duration_fields_are_used_for_the_rpo() {
    // Guards the unit: plan_def takes seconds.
    assert_eq!(plan_def(60, 60).rpo, Duration::from_secs(60));
}

#[test]
fn regression_d2_a_failed_backup_stays_failed_while_its_job_is_retried() {
    let now = T0 + 10 * SEC;
    // Given a protected plan whose latest backup job failed,
    let p = given(&[
        plan_created(24, 48),
        commit_at(1, T0),
        vp(1),
        rp(1),
        scheduled("j", 1),
        started("j"),
        failed("j"),
    ]);
    assert_eq!(protection(&p, now), Protection::Unprotected);
    // when the same job is scheduled again, then it is still unprotected,
    let p = when(p, scheduled("j", 2));
    assert_eq!(protection(&p, now), Protection::Unprotected, "rescheduled");
    // when it runs again, still unprotected (nothing succeeded yet),
    let p = when(p, started("j"));
    assert_eq!(protection(&p, now), Protection::Unprotected, "restarted");
    // and a direct restart after another failure too.
    let p = when(p, failed("j"));
    let p = when(p, started("j"));
    assert_eq!(protection(&p, now), Protection::Unprotected, "retried");
    assert!(p
        .plan_protection(&PlanId::new("p1"), now)
        .reason
        .contains("failed"));
    // Only when a backup job of the plan succeeds is it protected again.
    let p = when(p, finished("j"));
    assert_eq!(protection(&p, now), Protection::Protected);
}

/// `event` as a newer schema version this build cannot read (same payload).
fn from_the_future(event: &Event) -> Event {
    let payload = event.encode_payload().expect("encode");
    let e = crate::codec::decode_event(event.event_type(), event.schema_version() + 1, &payload);
    assert!(matches!(e, Event::Unknown(_)));
    e
}

#[test]
fn regression_d4_a_newer_verification_failed_makes_the_point_unknown_not_recoverable() {
    let now = T0 + 10 * SEC;
    // Given a recoverable point and a protected plan,
    let p = given(&[plan_created(24, 48), commit_at(1, T0), vp(1), rp(1)]);
    assert_eq!(p.points.state_of(&sid(1)), Recoverable);
    assert_eq!(protection(&p, now), Protection::Protected);
    // when a newer-version verification.failed about it arrives,
    let p = when(p, from_the_future(&vf(1)));
    // then the point is no better than unknown and the plan not protected.
    assert_eq!(p.points.state_of(&sid(1)), Unknown);
    assert_eq!(p.unknown_events[0].point, Some(sid(1)));
    assert_ne!(protection(&p, now), Protection::Protected);
    assert_ne!(protection(&p, now), Protection::AtRisk);
    // A newer restore_test.failed does the same.
    let p = given(&[plan_created(24, 48), commit_at(1, T0), vp(1), rp(1)]);
    let p = when(p, from_the_future(&rf(1)));
    assert_eq!(p.points.state_of(&sid(1)), Unknown);
    assert_ne!(protection(&p, now), Protection::Protected);
    // A known-bad state stays as bad.
    let p = given(&[commit_at(1, T0), vf(1)]);
    let p = when(p, from_the_future(&vp(1)));
    assert_eq!(p.points.state_of(&sid(1)), Corrupt);
}

#[test]
fn regression_d4_an_unreadable_point_event_naming_no_known_point_caps_every_plan() {
    let now = T0 + 10 * SEC;
    let p = given(&[plan_created(24, 48), commit_at(1, T0), vp(1), rp(1)]);
    let p = when(
        p,
        Event::Unknown(UnknownEvent {
            event_type: "restore_test.failed".into(),
            schema_version: 9,
            payload: vec![0xc0],
        }),
    );
    assert_eq!(p.points.state_of(&sid(1)), Recoverable);
    assert_eq!(protection(&p, now), Protection::Unknown);
    assert_eq!(p.overall_protection(now), Protection::Unknown);
    // An unknown event of an unrelated family changes nothing.
    let p = given(&[plan_created(24, 48), commit_at(1, T0), vp(1), rp(1)]);
    let p = when(
        p,
        Event::Unknown(UnknownEvent {
            event_type: "alert.snoozed".into(),
            schema_version: 1,
            payload: vec![],
        }),
    );
    assert_eq!(protection(&p, now), Protection::Protected);
}

#[test]
fn regression_d5_a_future_dated_point_leaves_the_rpo_window_on_the_servers_time() {
    // Committed (recorded at T0 + 2 s) with a snapshot time a year ahead.
    let p = given(&[
        plan_created(24, 24 * 365 * 2),
        commit_at(1, T0 + 365 * 24 * HOUR),
        vp(1),
        rp(1),
    ]);
    assert_eq!(protection(&p, T0 + 10 * SEC), Protection::Protected);
    // 25 h after it was recorded, it is older than the 24 h RPO.
    assert_eq!(
        protection(&p, T0 + 25 * HOUR),
        Protection::Unprotected,
        "a future-dated point must not stay inside the RPO"
    );
}

#[test]
fn regression_d6_agent_seen_before_registering_changes_nothing() {
    let a = AgentId::new("ghost");
    let p = given(&[AgentSeen {
        agent: a.clone(),
        clock_skew_ms: None,
        version: None,
    }
    .into()]);
    assert_eq!(p.inconsistencies.len(), 1);
    assert!(!p.agents.agents.contains_key(&a), "{:?}", p.agents);
}

#[test]
fn regression_d6_an_invalid_job_end_does_not_end_a_lease() {
    let a = AgentId::new("a1");
    let p = given(&[
        AgentRegistered {
            agent: a.clone(),
            hostname: "h".into(),
            os: "linux".into(),
            version: "1".into(),
        }
        .into(),
        scheduled("j", 1),
        LeaseGranted {
            agent: a.clone(),
            job: JobId::new("j"),
            expires_unix_ns: T0 + 60 * SEC,
        }
        .into(),
    ]);
    // Finishing a job that never started is inconsistent: the lease stays.
    let p = when(p, finished("j"));
    assert_eq!(p.inconsistencies.len(), 1);
    assert_eq!(p.agents.agents[&a].leases.len(), 1);
}

#[test]
fn regression_d6_a_rejected_job_scheduled_does_not_retie_the_job_to_another_point() {
    let verify_job = |point: u8| -> Event {
        JobScheduled {
            job: JobId::new("v"),
            kind: JobKind::Verify,
            plan: Some(PlanId::new("p1")),
            point: Some(sid(point)),
            due_unix_ns: T0,
            attempt: 1,
            spec: Default::default(),
        }
        .into()
    };
    let p = given(&[commit(1), commit(2), verify_job(1), verify_job(2)]);
    assert_eq!(
        p.inconsistencies.len(),
        1,
        "scheduled again while scheduled"
    );
    // The job still works on point 1: a result of it for point 1 fits.
    let p = when(
        p,
        VerificationPassed {
            point: sid(1),
            job: Some(JobId::new("v")),
            depth: crate::VerifyDepth::ReadAll,
            bytes_read: 1,
            blobs_checked: 1,
        }
        .into(),
    );
    assert_eq!(p.inconsistencies.len(), 1, "{:?}", p.inconsistencies);
    assert_eq!(p.points.state_of(&sid(1)), Verified);
}

fn arb_any_event() -> impl Strategy<Value = Event> {
    let agent = prop_oneof![Just(AgentId::new("a1")), Just(AgentId::new("a2"))];
    let job = prop_oneof![Just(JobId::new("b1")), Just(JobId::new("j1"))];
    prop_oneof![
        4 => arb_event(true),
        1 => (agent.clone(), job.clone()).prop_map(|(agent, job)| LeaseGranted {
            agent,
            job,
            expires_unix_ns: T0
        }
        .into()),
        1 => (agent.clone(), job.clone())
            .prop_map(|(agent, job)| LeaseExpired { agent, job }.into()),
        1 => agent.clone().prop_map(|agent| AgentSeen { agent, clock_skew_ms: None, version: None }.into()),
        1 => agent.prop_map(|agent| AgentRegistered {
            agent,
            hostname: "h".into(),
            os: "linux".into(),
            version: "1".into()
        }
        .into()),
        1 => Just(scheduled("j1", 1)),
        1 => Just(started("j1")),
        1 => Just(failed("j1")),
        1 => Just(JobAbandoned { job: JobId::new("b1"), reason: "gone".into() }.into()),
    ]
}

proptest! {
    /// An event flagged as inconsistent changes nothing but the list of
    /// inconsistencies (and the seq/hash/newest recorded time the state
    /// reflects and the index of events naming a point: like its seq,
    /// these are facts about the log).
    #[test]
    fn regression_d6_an_inconsistent_event_changes_nothing_else(
        events in proptest::collection::vec(arb_any_event(), 0..80),
    ) {
        let mut p = Projections::new();
        for env in &envelopes(&events) {
            let before = p.clone();
            p.apply(env);
            if p.inconsistencies_total > before.inconsistencies_total {
                let mut same = p.clone();
                same.inconsistencies = before.inconsistencies.clone();
                same.inconsistencies_total = before.inconsistencies_total;
                same.last_seq = before.last_seq;
                same.last_hash = before.last_hash;
                same.latest_recorded_unix_ns = before.latest_recorded_unix_ns;
                // So is the index of the events naming a point: a point's
                // history lists what the log says about it, fitting or not.
                same.point_history = before.point_history.clone();
                prop_assert_eq!(&same, &before, "{:?}", env.event);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Folding what a real `EventLog` wrote, read back and decoded, equals
    /// folding the events in memory (only the tie to the real chain's hash
    /// differs); and a snapshot taken at a random point of the real log and
    /// restored, plus the rest, equals that too.
    #[test]
    fn regression_t1_folding_a_real_log_read_back_equals_folding_in_memory(
        events in proptest::collection::vec(arb_any_event(), 0..40),
        cut in any::<prop::sample::Index>(),
    ) {
        use std::sync::Arc;

        use crate::clock::ManualClock;
        use crate::log::{EventLog, LogOptions, LogReader};

        let dir = tempfile::tempdir().expect("tempdir");
        let clock = ManualClock::new(T0);
        let mut log = EventLog::open(dir.path(), LogOptions::default(), Arc::new(clock.clone()))
            .expect("open");
        for e in &events {
            log.append_one(e).expect("append");
            clock.advance(SEC);
        }
        let back: Vec<crate::Envelope> = LogReader::new(dir.path())
            .replay_from(1)
            .expect("replay")
            .collect::<Result<_, _>>()
            .expect("read back");
        prop_assert_eq!(back.len(), events.len());
        let mut from_log = Projections::fold(&back);
        prop_assert_eq!(from_log.last_hash, back.last().map(|e| e.hash).unwrap_or_default());
        let k = cut.index(back.len() + 1);
        let mut restored = Projections::from_snapshot(
            &Projections::fold(&back[..k]).to_snapshot().expect("snapshot"),
        )
        .expect("restore");
        for e in &back[k..] {
            restored.apply(e);
        }
        prop_assert_eq!(&restored, &from_log);
        from_log.last_hash = Default::default();
        prop_assert_eq!(from_log, Projections::fold(&envelopes(&events)));
    }
}

/// Found by `vouch bench service`: per-plan questions scanned every point
/// of every plan; the per-plan index must answer exactly as the scan did,
/// after a fold and after a snapshot round trip, and must not change the
/// snapshot's bytes.
#[test]
fn the_per_plan_index_answers_like_a_scan_and_stays_out_of_snapshots() {
    let plan = |n: u8| PlanId::new(format!("p{n}"));
    let mut events: Vec<Event> = vec![plan_created(24, 24 * 7)];
    for i in 1..=40u8 {
        let plan = if i % 7 == 0 { None } else { Some(plan(i % 3)) };
        events.push(
            BackupCommitted {
                job: None,
                plan,
                repository: RepositoryId::new("main"),
                snapshot: sid(i),
                snapshot_time_unix_ns: T0 + i as i64 * SEC,
                summary: BackupSummary::default(),
                changes: None,
            }
            .into(),
        );
        if i % 5 == 0 {
            events.push(vp(i));
            events.push(rp(i));
        }
    }
    events.push(
        PointDiscovered {
            repository: RepositoryId::new("main"),
            snapshot: sid(200),
            snapshot_time_unix_ns: T0,
            plan: Some(plan(1)),
        }
        .into(),
    );
    // Found again: not a second entry.
    events.push(
        PointDiscovered {
            repository: RepositoryId::new("main"),
            snapshot: sid(200),
            snapshot_time_unix_ns: T0,
            plan: Some(plan(1)),
        }
        .into(),
    );
    let folded = given(&events);
    let bytes = folded.to_snapshot().expect("encode");
    let decoded = Projections::from_snapshot(&bytes).expect("decode");
    assert_eq!(decoded, folded);
    assert_eq!(decoded.to_snapshot().expect("encode"), bytes);
    let now = T0 + 50 * SEC;
    for p in [&folded, &decoded] {
        for n in 0..4u8 {
            let id = plan(n);
            let by_index: Vec<SnapshotId> = p.points.of_plan(&id).map(|pt| pt.id).collect();
            let by_scan: Vec<SnapshotId> = p
                .points
                .points
                .values()
                .filter(|pt| pt.plan.as_ref() == Some(&id))
                .map(|pt| pt.id)
                .collect();
            assert_eq!(by_index, by_scan, "plan {id}");
        }
        assert_eq!(
            protection(p, now),
            plan_protection(&p.plans, &p.points, &p.jobs, &PlanId::new("p1"), now).status
        );
    }
    for p in [&folded, &decoded] {
        let mut sorted: Vec<&Point> = p.points.points.values().collect();
        sorted.sort_by_key(|pt| std::cmp::Reverse((pt.since.seq, pt.snapshot_time_unix_ns)));
        let sorted: Vec<SnapshotId> = sorted.iter().map(|pt| pt.id).collect();
        let fast: Vec<SnapshotId> = p.points.newest_first().map(|pt| pt.id).collect();
        assert_eq!(fast, sorted);
    }
    // A projection built without the index (e.g. by serde alone) still
    // answers, the slow way.
    let (_, _, raw): (u16, String, Projections) =
        rmp_serde::from_slice(&bytes).expect("raw decode");
    let id = plan(2);
    assert_eq!(
        raw.points.of_plan(&id).map(|pt| pt.id).collect::<Vec<_>>(),
        folded
            .points
            .of_plan(&id)
            .map(|pt| pt.id)
            .collect::<Vec<_>>()
    );
}
