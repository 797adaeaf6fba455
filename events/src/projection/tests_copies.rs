//! Copies (`copy.committed`): a copy is a point of its own, checked on its
//! own, kept apart from the plan's points, and what a plan's replica
//! policy requires of it for `protected`.

use std::time::Duration;

use super::*;
use crate::event::*;
use crate::ids::*;
use crate::plan::{ReplicaPolicy, ReplicaRequirement};
use crate::testkit::{evidence, plan_def, sid};

const SEC: i64 = 1_000_000_000;
const HOUR: i64 = 3600 * SEC;
const T0: i64 = 1_800_000_000 * SEC;

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

fn plan(require: ReplicaRequirement) -> Event {
    PlanCreated {
        plan: PlanId::new("p1"),
        definition: crate::PlanDefinition {
            replica: Some(ReplicaPolicy {
                repository: RepositoryId::new("offsite"),
                lock_for: Some(Duration::from_secs(30 * 86_400)),
                require,
            }),
            ..plan_def(24 * 3600, 48 * 3600)
        },
    }
    .into()
}

fn commit(point: u8) -> Event {
    BackupCommitted {
        job: None,
        plan: Some(PlanId::new("p1")),
        repository: RepositoryId::new("main"),
        snapshot: sid(point),
        snapshot_time_unix_ns: T0,
        summary: BackupSummary {
            files: 3,
            bytes: 300,
            ..BackupSummary::default()
        },
        changes: None,
    }
    .into()
}

struct Copy {
    source: u8,
    copy: u8,
    repository: &'static str,
    off_host: bool,
    by: LockEnforcement,
    locked_until: Option<i64>,
}

impl Copy {
    fn offsite(source: u8, copy: u8) -> Copy {
        Copy {
            source,
            copy,
            repository: "offsite",
            off_host: true,
            by: LockEnforcement::Storage,
            locked_until: Some(T0 + 30 * 24 * HOUR),
        }
    }

    fn event(&self) -> Event {
        CopyCommitted {
            job: None,
            plan: Some(PlanId::new("p1")),
            source: sid(self.source),
            repository: RepositoryId::new(self.repository),
            snapshot: sid(self.copy),
            snapshot_time_unix_ns: T0,
            summary: BackupSummary {
                files: 3,
                bytes: 300,
                ..BackupSummary::default()
            },
            off_host: self.off_host,
            locks_enforced_by: self.by,
            locked_until_unix_ns: self.locked_until,
        }
        .into()
    }
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

fn rp(point: u8) -> Event {
    RestoreTestPassed {
        point: sid(point),
        job: None,
        evidence: evidence(),
    }
    .into()
}

fn protection(p: &Projections, now: i64) -> PlanProtection {
    p.plan_protection(&PlanId::new("p1"), now)
}

/// The plan's own point 1, proven: `protected` by the plan's own rules.
fn proven_primary(require: ReplicaRequirement) -> Vec<Event> {
    vec![plan(require), commit(1), vp(1), rp(1)]
}

#[test]
fn a_copy_is_a_point_of_its_own_checked_on_its_own() {
    let mut events = proven_primary(ReplicaRequirement::Nothing);
    events.push(Copy::offsite(1, 2).event());
    let p = given(&events);
    let copy = &p.points.points[&sid(2)];
    assert_eq!(
        copy.state,
        PointState::Unverified,
        "a copy proves nothing yet"
    );
    assert_eq!(copy.origin, PointOrigin::Copied);
    assert_eq!(copy.repository, RepositoryId::new("offsite"));
    assert_eq!(copy.copy.as_ref().map(|c| c.source), Some(sid(1)));
    assert_eq!(copy.locked_until_unix_ns, Some(T0 + 30 * 24 * HOUR));
    assert!(copy.immutable_at(T0 + HOUR));
    assert!(
        !copy.immutable_at(T0 + 31 * 24 * HOUR),
        "an expired lock holds nothing"
    );
    // The source's proof is not the copy's.
    assert_eq!(p.points.state_of(&sid(1)), PointState::Recoverable);
    let own: Vec<_> = p
        .points
        .of_plan(&PlanId::new("p1"))
        .map(|pt| pt.id)
        .collect();
    let copies: Vec<_> = p
        .points
        .copies_of_plan(&PlanId::new("p1"))
        .map(|pt| pt.id)
        .collect();
    assert_eq!(own, vec![sid(1)]);
    assert_eq!(copies, vec![sid(2)]);
    // Its own checks make it recoverable.
    events.extend([vp(2), rp(2)]);
    let p = given(&events);
    assert_eq!(p.points.state_of(&sid(2)), PointState::Recoverable);
    // The index survives a snapshot.
    let back = Projections::from_snapshot(&p.to_snapshot().expect("encode")).expect("decode");
    let copies: Vec<_> = back
        .points
        .copies_of_plan(&PlanId::new("p1"))
        .map(|pt| pt.id)
        .collect();
    assert_eq!(copies, vec![sid(2)]);
    assert_eq!(back.points.of_plan(&PlanId::new("p1")).count(), 1);
}

#[test]
fn copies_that_do_not_fit_are_inconsistencies() {
    let base = proven_primary(ReplicaRequirement::Nothing);
    let cases = [
        (Copy::offsite(9, 2), "never knew"),
        (
            Copy {
                repository: "main",
                ..Copy::offsite(1, 2)
            },
            "repository of its source",
        ),
        (Copy::offsite(1, 1), "onto itself"),
    ];
    for (copy, why) in cases {
        let mut events = base.clone();
        events.push(copy.event());
        let p = given(&events);
        assert!(
            p.inconsistencies.iter().any(|i| i.message.contains(why)),
            "{why}: {:?}",
            p.inconsistencies
        );
        assert_eq!(
            p.points.copies_of_plan(&PlanId::new("p1")).count(),
            0,
            "{why}"
        );
    }
    // The same copy twice.
    let mut events = base;
    events.extend([Copy::offsite(1, 2).event(), Copy::offsite(1, 2).event()]);
    let p = given(&events);
    assert_eq!(p.inconsistencies.len(), 1, "{:?}", p.inconsistencies);
}

#[test]
fn a_copy_found_by_a_reconciliation_before_its_commit_learns_what_it_is() {
    let mut events = proven_primary(ReplicaRequirement::Nothing);
    events.push(
        PointDiscovered {
            repository: RepositoryId::new("offsite"),
            snapshot: sid(2),
            snapshot_time_unix_ns: T0,
            plan: Some(PlanId::new("p1")),
        }
        .into(),
    );
    let p = given(&events);
    assert_eq!(p.points.of_plan(&PlanId::new("p1")).count(), 2);
    events.push(Copy::offsite(1, 2).event());
    let p = given(&events);
    assert!(p.inconsistencies.is_empty(), "{:?}", p.inconsistencies);
    assert_eq!(p.points.points[&sid(2)].origin, PointOrigin::Copied);
    assert_eq!(p.points.state_of(&sid(2)), PointState::Unverified);
    assert_eq!(p.points.of_plan(&PlanId::new("p1")).count(), 1);
    assert_eq!(p.points.copies_of_plan(&PlanId::new("p1")).count(), 1);
}

#[test]
fn a_failed_copy_job_says_nothing_about_its_source_point() {
    let mut events = proven_primary(ReplicaRequirement::Nothing);
    events.extend([
        JobScheduled {
            job: JobId::new("c1"),
            kind: JobKind::Copy,
            plan: Some(PlanId::new("p1")),
            point: Some(sid(1)),
            due_unix_ns: T0,
            attempt: 1,
            spec: JobSpec::default(),
        }
        .into(),
        JobStarted {
            job: JobId::new("c1"),
            agent: None,
        }
        .into(),
        JobFailed {
            job: JobId::new("c1"),
            error_kind: "io".into(),
            message: "the replica's store is down".into(),
            retryable: true,
        }
        .into(),
    ]);
    let p = given(&events);
    assert_eq!(p.points.state_of(&sid(1)), PointState::Recoverable);
    assert_eq!(protection(&p, T0 + HOUR).status, Protection::Protected);
}

#[test]
fn nothing_required_leaves_protection_to_the_plans_own_points() {
    let p = given(&proven_primary(ReplicaRequirement::Nothing));
    assert_eq!(protection(&p, T0 + HOUR).status, Protection::Protected);
}

#[test]
fn a_proven_copy_requirement_needs_a_recoverable_fresh_copy() {
    let now = T0 + HOUR;
    let mut events = proven_primary(ReplicaRequirement::Proven);
    let p = given(&events);
    let v = protection(&p, now);
    assert_eq!(v.status, Protection::AtRisk);
    assert!(v.reason.contains("no copy there"), "{}", v.reason);

    events.extend([Copy::offsite(1, 2).event(), vp(2)]);
    let p = given(&events);
    let v = protection(&p, now);
    assert_eq!(
        v.status,
        Protection::AtRisk,
        "a copy verified, not restore-tested"
    );
    assert!(v.reason.contains("not proven"), "{}", v.reason);

    events.push(rp(2));
    let p = given(&events);
    assert_eq!(protection(&p, now).status, Protection::Protected);
    // Stale evidence of the copy (48 h) while the RPO is 24 h: the point
    // itself left the RPO first, so the plan is unprotected anyway; with a
    // long-lived point the copy's evidence age decides.
    assert_eq!(
        protection(&p, T0 + 25 * HOUR).status,
        Protection::Unprotected
    );
    // A copy in another repository than the replica's does not count.
    let mut other = proven_primary(ReplicaRequirement::Proven);
    other.extend([
        Copy {
            repository: "elsewhere",
            ..Copy::offsite(1, 2)
        }
        .event(),
        vp(2),
        rp(2),
    ]);
    let p = given(&other);
    assert_eq!(protection(&p, now).status, Protection::AtRisk);
}

#[test]
fn an_immutable_off_host_requirement_needs_storage_held_locks_off_this_host() {
    let now = T0 + HOUR;
    let case = |copy: Copy, now: i64| {
        let mut events = proven_primary(ReplicaRequirement::ImmutableOffHost);
        events.extend([copy.event(), vp(2), rp(2)]);
        protection(&given(&events), now)
    };
    assert_eq!(case(Copy::offsite(1, 2), now).status, Protection::Protected);
    let local = case(
        Copy {
            off_host: false,
            ..Copy::offsite(1, 2)
        },
        now,
    );
    assert_eq!(local.status, Protection::AtRisk);
    assert!(local.reason.contains("on this host"), "{}", local.reason);
    let by_vouch = case(
        Copy {
            by: LockEnforcement::Vouch,
            ..Copy::offsite(1, 2)
        },
        now,
    );
    assert_eq!(by_vouch.status, Protection::AtRisk);
    assert!(
        by_vouch.reason.contains("not locked by its storage"),
        "{}",
        by_vouch.reason
    );
    let unlocked = case(
        Copy {
            locked_until: None,
            ..Copy::offsite(1, 2)
        },
        now,
    );
    assert_eq!(unlocked.status, Protection::AtRisk);
    // A lock that ran out holds nothing.
    let expired = case(
        Copy {
            locked_until: Some(T0 + 2 * SEC),
            ..Copy::offsite(1, 2)
        },
        now,
    );
    assert_eq!(expired.status, Protection::AtRisk);
}

#[test]
fn a_copy_never_lifts_a_plan_its_own_points_do_not_protect() {
    // The plan's own point only verified: at-risk, whatever its copy says.
    let events = vec![
        plan(ReplicaRequirement::ImmutableOffHost),
        commit(1),
        vp(1),
        Copy::offsite(1, 2).event(),
        vp(2),
        rp(2),
    ];
    let p = given(&events);
    assert_eq!(protection(&p, T0 + HOUR).status, Protection::AtRisk);
}
