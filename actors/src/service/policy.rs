//! The proof policies as pure functions of the projections and the time:
//! what to do after a job, what is due on a schedule, what retention must
//! never forget. The dispatcher and the scheduler only carry them out.

use vouch_events::{Event, JobKind, Plan, PlanId, Point, PointState, Projections, SnapshotId};

use super::command::JobCommand;
use crate::clock::duration_to_ns;

/// Plans that are not removed.
pub fn active_plans(p: &Projections) -> impl Iterator<Item = &Plan> {
    p.plans.plans.values().filter(|plan| plan.removed.is_none())
}

/// Points of `plan` that are not expired, newest snapshot first.
pub fn live_points<'a>(p: &'a Projections, plan: &PlanId) -> Vec<&'a Point> {
    let mut v: Vec<&Point> = p
        .points
        .points
        .values()
        .filter(|pt| pt.plan.as_ref() == Some(plan) && pt.expired.is_none())
        .collect();
    v.sort_by_key(|pt| std::cmp::Reverse(pt.snapshot_time_unix_ns));
    v
}

/// When the latest backup job of `plan` was scheduled (the scheduler's
/// "last run"), if one ever was.
pub fn last_backup_scheduled(p: &Projections, plan: &PlanId) -> Option<i64> {
    p.jobs
        .jobs
        .values()
        .filter(|j| j.kind == JobKind::Backup && j.plan.as_ref() == Some(plan))
        .map(|j| j.scheduled.unix_ns)
        .max()
}

/// Whether a job of `kind` for `plan` (and `point`, when given) is scheduled
/// or running.
pub fn job_open(
    p: &Projections,
    kind: JobKind,
    plan: Option<&PlanId>,
    point: Option<&SnapshotId>,
) -> bool {
    p.jobs.jobs.values().any(|j| {
        j.kind == kind
            && !j.state.is_terminal()
            && (plan.is_none() || j.plan.as_ref() == plan)
            && (point.is_none() || j.point.as_ref() == point)
    })
}

/// What to run after a job ended with `events` recorded: verify a new
/// point (if the plan says so), apply retention after a backup, and
/// restore-test a point whose verification passed (if the plan tests).
pub fn follow_ups(p: &Projections, kind: JobKind, events: &[Event]) -> Vec<JobCommand> {
    let mut out = Vec::new();
    for e in events {
        match (kind, e) {
            (JobKind::Backup, Event::BackupCommitted(c)) => {
                let Some(plan) = c.plan.as_ref().and_then(|id| p.plans.plans.get(id)) else {
                    continue;
                };
                let def = &plan.definition;
                if def.verification.after_backup {
                    out.push(JobCommand::Verify {
                        point: c.snapshot,
                        plan: Some(plan.id.clone()),
                        repository: c.repository.clone(),
                        depth: def.verification.depth,
                    });
                }
                if !def.retention.is_empty() {
                    // What it must keep is read when it starts.
                    out.push(JobCommand::Retention {
                        plan: plan.id.clone(),
                        repository: def.repository.clone(),
                        keep: def.retention.clone(),
                        protect: Vec::new(),
                    });
                }
            }
            (JobKind::Verify, Event::VerificationPassed(v)) => {
                let Some(point) = p.points.points.get(&v.point) else {
                    continue;
                };
                let plan = point.plan.as_ref().and_then(|id| p.plans.plans.get(id));
                if let Some(plan) = plan {
                    if plan.removed.is_none() && plan.definition.restore_test.every.is_some() {
                        out.push(JobCommand::RestoreTest {
                            point: v.point,
                            plan: Some(plan.id.clone()),
                            repository: point.repository.clone(),
                            sample_files: plan.definition.restore_test.sample_files,
                        });
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Points retention must keep whatever its rules say: every point locked at
/// `now`, and the plan's newest recoverable point.
pub fn retention_protects(p: &Projections, plan: &PlanId, now_ns: i64) -> Vec<SnapshotId> {
    let points = live_points(p, plan);
    let mut keep: Vec<SnapshotId> = points
        .iter()
        .filter(|pt| pt.locked_until_unix_ns.is_some_and(|u| u > now_ns))
        .map(|pt| pt.id)
        .collect();
    if let Some(newest_ok) = points.iter().find(|pt| pt.state == PointState::Recoverable) {
        keep.push(newest_ok.id);
    }
    keep.sort();
    keep.dedup();
    keep
}

/// Periodic proof due at `now`: re-verify a plan's newest point when its
/// latest verification is older than the plan's `verification.every`, and
/// restore-test its newest verified point when the latest restore test is
/// older than `restore_test.every`. Nothing is proposed for a plan that
/// already has such a job open.
pub fn periodic_checks(p: &Projections, now_ns: i64) -> Vec<JobCommand> {
    let mut out = Vec::new();
    for plan in active_plans(p) {
        let def = &plan.definition;
        let points = live_points(p, &plan.id);
        let Some(newest) = points.first() else {
            continue;
        };
        if let Some(every) = def.verification.every {
            let last = newest.last_verification.as_ref().map(|v| v.at.unix_ns);
            let stale = last.is_none_or(|t| now_ns.saturating_sub(t) >= duration_to_ns(every));
            if stale && !job_open(p, JobKind::Verify, Some(&plan.id), None) {
                out.push(JobCommand::Verify {
                    point: newest.id,
                    plan: Some(plan.id.clone()),
                    repository: newest.repository.clone(),
                    depth: def.verification.depth,
                });
            }
        }
        if let Some(every) = def.restore_test.every {
            let candidate = points
                .iter()
                .find(|pt| matches!(pt.state, PointState::Verified | PointState::Recoverable));
            if let Some(pt) = candidate {
                let last = pt.last_restore_test.as_ref().map(|r| r.at.unix_ns);
                let stale = last.is_none_or(|t| now_ns.saturating_sub(t) >= duration_to_ns(every));
                if stale && !job_open(p, JobKind::RestoreTest, Some(&plan.id), None) {
                    out.push(JobCommand::RestoreTest {
                        point: pt.id,
                        plan: Some(plan.id.clone()),
                        repository: pt.repository.clone(),
                        sample_files: def.restore_test.sample_files,
                    });
                }
            }
        }
    }
    out
}
