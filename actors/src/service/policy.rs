//! The proof policies as pure functions of the projections and the time:
//! what to do after a job, what is due on a schedule, what retention must
//! never forget. The dispatcher and the scheduler only carry them out.

use std::collections::{HashMap, HashSet};

use vouch_events::{
    Event, JobKind, Plan, PlanId, Point, PointState, Projections, RepositoryId, SnapshotId,
    VerifyDepth, CLOCK_TOLERANCE_NS,
};

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
        .of_plan(plan)
        .filter(|pt| pt.expired.is_none())
        .collect();
    v.sort_by_key(|pt| std::cmp::Reverse(pt.snapshot_time_unix_ns));
    v
}

/// How many of a plan's recent backups the ransomware heuristic's baseline
/// holds.
pub const BACKUP_HISTORY: usize = 10;

/// The plan's latest [`BACKUP_HISTORY`] committed backups (forgotten ones
/// too: they are history), oldest first. Points the heuristic flagged are
/// left out: one attack, or one false alarm, must not raise the bar for
/// the next ten backups.
pub fn backup_history(p: &Projections, plan: &PlanId) -> super::command::BackupHistory {
    let mut v: Vec<&Point> = p
        .points
        .of_plan(plan)
        .filter(|pt| {
            pt.origin == vouch_events::PointOrigin::Committed
                && pt.summary.is_some()
                && pt.anomalies.is_empty()
        })
        .collect();
    v.sort_by_key(|pt| pt.snapshot_time_unix_ns);
    let skip = v.len().saturating_sub(BACKUP_HISTORY);
    v.into_iter()
        .skip(skip)
        .filter_map(|pt| Some((pt.summary.clone()?, pt.changes.clone())))
        .collect()
}

/// The newest live point of `plan` committed by its own backups (not a
/// copy, not discovered) that the ransomware heuristic did not flag: the
/// last point before an anomaly, which the plan's `anomaly_lock` locks.
pub fn last_unflagged_point(p: &Projections, plan: &PlanId) -> Option<SnapshotId> {
    p.points
        .of_plan(plan)
        .filter(|pt| {
            pt.origin == vouch_events::PointOrigin::Committed
                && pt.expired.is_none()
                && pt.anomalies.is_empty()
        })
        .max_by_key(|pt| (pt.snapshot_time_unix_ns, pt.since.seq))
        .map(|pt| pt.id)
}

/// Points of `plan` stored in `repository` that are not expired, its own
/// and the copies of them (a replica holds only copies), newest snapshot
/// first.
pub fn live_points_in<'a>(
    p: &'a Projections,
    plan: &PlanId,
    repository: &RepositoryId,
) -> Vec<&'a Point> {
    let mut v: Vec<&Point> = p
        .points
        .of_plan(plan)
        .chain(p.points.copies_of_plan(plan))
        .filter(|pt| pt.expired.is_none() && &pt.repository == repository)
        .collect();
    v.sort_by_key(|pt| std::cmp::Reverse(pt.snapshot_time_unix_ns));
    v
}

/// When each plan's latest backup job was scheduled (the scheduler's
/// "last run"), for every plan that ever had one: one pass over the jobs,
/// not one per plan.
pub fn last_backups_scheduled(p: &Projections) -> HashMap<PlanId, i64> {
    let mut last: HashMap<PlanId, i64> = HashMap::new();
    for j in p.jobs.jobs.values() {
        if j.kind != JobKind::Backup {
            continue;
        }
        if let Some(plan) = &j.plan {
            let t = last.entry(plan.clone()).or_insert(j.scheduled.unix_ns);
            *t = (*t).max(j.scheduled.unix_ns);
        }
    }
    last
}

/// The kinds of job scheduled or running for each plan, in one pass, with
/// whether the job works on a copy (a check of the plan's replica does not
/// stand for a check of its own points, nor the reverse).
fn open_jobs(p: &Projections) -> HashSet<(JobKind, PlanId, bool)> {
    p.jobs
        .jobs
        .values()
        .filter(|j| !j.state.is_terminal())
        .filter_map(|j| {
            let on_copy = j
                .point
                .and_then(|id| p.points.points.get(&id))
                .is_some_and(Point::is_copy);
            j.plan.clone().map(|plan| (j.kind, plan, on_copy))
        })
        .collect()
}

/// How many live points a read-back that could not tell which points use
/// its damaged packs sends to a full verification (newest first).
pub const SUSPECT_POINTS_BOUND: usize = 32;

/// The sample a restore test of `point` of `plan` should take at `now_ns`
/// (none: a complete test): complete when the plan's proof policy asks for
/// one at least every `full_every` and the last complete restore test that
/// its protection counts (of a recoverable point of its current
/// definition, among the plan's own points, or among its copies for a
/// copy: each is proven on its own) is older than that, or there is none;
/// the plan's `sample_files` otherwise.
pub fn restore_sample(p: &Projections, plan: &Plan, point: &Point, now_ns: i64) -> Option<u64> {
    let def = &plan.definition.restore_test;
    let sample = def.sample_files?;
    let Some(full_every) = def.full_every else {
        return Some(sample);
    };
    // What the plan's protection counts (`plan_protection`): a complete
    // restore test of a recoverable point of its current definition. A
    // sampled test after a complete one does not hide it.
    let points = if point.is_copy() {
        p.points.copies_of_plan(&plan.id)
    } else {
        p.points.of_plan(&plan.id)
    };
    let last_complete = points
        .filter(|pt| pt.repository == point.repository)
        .filter(|pt| pt.since.seq > plan.epoch.seq && pt.state == PointState::Recoverable)
        .filter_map(|pt| pt.last_complete_restore)
        .map(|at| at.unix_ns)
        .max();
    match last_complete {
        Some(t) if now_ns.saturating_sub(t) < duration_to_ns(full_every) => Some(sample),
        _ => None,
    }
}

/// A full (`ReadAll`) verification of every point a read-back found
/// damage under: the points it names, or, when it could not tell, every
/// live point of the repository, newest first, at most
/// [`SUSPECT_POINTS_BOUND`].
fn verify_damaged(
    p: &Projections,
    r: &vouch_events::PacksReadBack,
    seq: u64,
) -> Vec<(JobCommand, String)> {
    if r.damaged_packs.is_empty() && r.damaged.is_empty() {
        return Vec::new();
    }
    let mut live: Vec<&Point> = p
        .points
        .points
        .values()
        .filter(|pt| pt.expired.is_none() && pt.repository == r.repository)
        .collect();
    live.sort_by_key(|pt| std::cmp::Reverse(pt.snapshot_time_unix_ns));
    let suspects: Vec<&Point> = match &r.affected_points {
        Some(ids) => live.into_iter().filter(|pt| ids.contains(&pt.id)).collect(),
        None => live.into_iter().take(SUSPECT_POINTS_BOUND).collect(),
    };
    suspects
        .into_iter()
        .map(|pt| {
            (
                JobCommand::Verify {
                    point: pt.id,
                    plan: pt.plan.clone(),
                    repository: pt.repository.clone(),
                    depth: VerifyDepth::ReadAll,
                },
                format!("follow-up of read-back damage at seq {seq}"),
            )
        })
        .collect()
}

/// What to run after a job ended with `events` recorded (the last of them
/// at `seq`, at `now_ns`), each with why: verify a new point (if the plan
/// says so), apply retention after a backup, restore-test a point whose
/// verification passed (if the plan tests; a complete test when the proof
/// policy asks for one), verify in full every point a read-back found
/// damage under, and reconcile a repository after retention forgot points
/// in it (retention only decides; the deletion is the reconciliation's).
pub fn follow_ups(
    p: &Projections,
    kind: JobKind,
    events: &[Event],
    seq: u64,
    now_ns: i64,
) -> Vec<(JobCommand, String)> {
    let mut out = Vec::new();
    let mut reconciled = false;
    for e in events {
        match (kind, e) {
            (JobKind::Backup, Event::BackupCommitted(c)) => {
                let Some(plan) = c.plan.as_ref().and_then(|id| p.plans.plans.get(id)) else {
                    continue;
                };
                let def = &plan.definition;
                if def.verification.after_backup {
                    out.push((
                        JobCommand::Verify {
                            point: c.snapshot,
                            plan: Some(plan.id.clone()),
                            repository: c.repository.clone(),
                            depth: def.verification.depth,
                        },
                        "after backup".into(),
                    ));
                }
                if !def.retention.is_empty() {
                    // What it must keep is read when it starts.
                    out.push((
                        JobCommand::Retention {
                            plan: plan.id.clone(),
                            repository: def.repository.clone(),
                            keep: def.retention.clone(),
                            time_zone: def.time_zone.clone(),
                            protect: Vec::new(),
                        },
                        "after backup".into(),
                    ));
                }
                if let Some(replica) = &def.replica {
                    out.push((
                        JobCommand::Copy {
                            plan: plan.id.clone(),
                            point: c.snapshot,
                            source_repository: c.repository.clone(),
                            repository: replica.repository.clone(),
                            lock_for: replica.lock_for,
                        },
                        "after backup".into(),
                    ));
                }
            }
            // A copy is a point of its own: it is verified (then
            // restore-tested, by the rule below) as a new backup is, and the
            // plan's keep rules apply in the replica too.
            (JobKind::Copy, Event::CopyCommitted(c)) => {
                let Some(plan) = c.plan.as_ref().and_then(|id| p.plans.plans.get(id)) else {
                    continue;
                };
                let def = &plan.definition;
                if def.verification.after_backup {
                    out.push((
                        JobCommand::Verify {
                            point: c.snapshot,
                            plan: Some(plan.id.clone()),
                            repository: c.repository.clone(),
                            depth: def.verification.depth,
                        },
                        "after copy".into(),
                    ));
                }
                if !def.retention.is_empty() {
                    out.push((
                        JobCommand::Retention {
                            plan: plan.id.clone(),
                            repository: c.repository.clone(),
                            keep: def.retention.clone(),
                            time_zone: def.time_zone.clone(),
                            protect: Vec::new(),
                        },
                        "after copy".into(),
                    ));
                }
            }
            (JobKind::Verify, Event::VerificationPassed(v)) => {
                let Some(point) = p.points.points.get(&v.point) else {
                    continue;
                };
                let plan = point.plan.as_ref().and_then(|id| p.plans.plans.get(id));
                if let Some(plan) = plan {
                    if plan.removed.is_none() && plan.definition.restore_test.every.is_some() {
                        out.push((
                            JobCommand::RestoreTest {
                                point: v.point,
                                plan: Some(plan.id.clone()),
                                repository: point.repository.clone(),
                                sample_files: restore_sample(p, plan, point, now_ns),
                                boot: plan.definition.restore_test.boot.clone(),
                            },
                            "after verification".into(),
                        ));
                    }
                }
            }
            (JobKind::ReadBack | JobKind::Verify, Event::PacksReadBack(r)) => {
                out.extend(verify_damaged(p, r, seq));
            }
            (JobKind::Forget, Event::PointForgotten(f)) if !reconciled => {
                if let Some(pt) = p.points.points.get(&f.point) {
                    reconciled = true;
                    out.push((
                        JobCommand::Reconcile {
                            repository: pt.repository.clone(),
                            expired: Vec::new(),
                            live: Vec::new(),
                        },
                        "after retention".into(),
                    ));
                }
            }
            _ => {}
        }
    }
    out
}

/// Every repository in use: by a plan (its own, or its replica), or by a
/// live point.
pub fn repositories_in_use(p: &Projections) -> std::collections::BTreeSet<RepositoryId> {
    let mut out: std::collections::BTreeSet<RepositoryId> = active_plans(p)
        .flat_map(|pl| {
            let d = &pl.definition;
            std::iter::once(d.repository.clone())
                .chain(d.replica.as_ref().map(|r| r.repository.clone()))
        })
        .collect();
    out.extend(
        p.points
            .points
            .values()
            .filter(|pt| pt.expired.is_none())
            .map(|pt| pt.repository.clone()),
    );
    out
}

/// What a reconciliation of `repository` works from: the points the log
/// forgot (their manifests must go) and the points it holds live (their
/// manifests must be there), each sorted.
pub fn reconcile_lists(
    p: &Projections,
    repository: &RepositoryId,
) -> (Vec<SnapshotId>, Vec<SnapshotId>) {
    let (mut expired, mut live) = (Vec::new(), Vec::new());
    for pt in p
        .points
        .points
        .values()
        .filter(|pt| &pt.repository == repository)
    {
        if pt.expired.is_some() {
            expired.push(pt.id);
        } else {
            live.push(pt.id);
        }
    }
    expired.sort();
    live.sort();
    (expired, live)
}

/// Points retention of `plan` in `repository` must keep whatever its rules
/// say: every point of the plan there (its own, or copies in its replica)
/// locked at `now`, and the newest recoverable one.
pub fn retention_protects(
    p: &Projections,
    plan: &PlanId,
    repository: &RepositoryId,
    now_ns: i64,
) -> Vec<SnapshotId> {
    let points = live_points_in(p, plan, repository);
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
/// older than `restore_test.every`; the same for the newest copy in the
/// plan's replica, which is proven on its own. Nothing is proposed where
/// such a job is already open (for the plan's own points, or its copies).
pub fn periodic_checks(p: &Projections, now_ns: i64) -> Vec<JobCommand> {
    let mut out = Vec::new();
    let open = open_jobs(p);
    for plan in active_plans(p) {
        let def = &plan.definition;
        let mut groups = vec![(live_points(p, &plan.id), false)];
        if let Some(replica) = &def.replica {
            let copies: Vec<&Point> = live_points_in(p, &plan.id, &replica.repository)
                .into_iter()
                .filter(|pt| pt.is_copy())
                .collect();
            groups.push((copies, true));
        }
        for (points, copies) in groups {
            let job_open = |kind: JobKind| open.contains(&(kind, plan.id.clone(), copies));
            let Some(newest) = points.first() else {
                continue;
            };
            if let Some(every) = def.verification.every {
                let last = newest.last_verification.as_ref().map(|v| v.at.unix_ns);
                let stale = last.is_none_or(|t| stale_since(t, now_ns, every));
                // Else an older point whose verification failed is read in
                // full again once as often: damage that was repaired (a
                // pack restored from a copy) clears, damage that stands is
                // confirmed, instead of the failure standing until
                // retention forgets the point (found by the chaos runner).
                let failed = points.iter().find(|pt| {
                    pt.id != newest.id
                        && pt.open_verification_failure.is_some()
                        && pt
                            .last_verification
                            .as_ref()
                            .is_none_or(|v| stale_since(v.at.unix_ns, now_ns, every))
                });
                if !job_open(JobKind::Verify) {
                    if stale {
                        out.push(JobCommand::Verify {
                            point: newest.id,
                            plan: Some(plan.id.clone()),
                            repository: newest.repository.clone(),
                            depth: def.verification.depth,
                        });
                    } else if let Some(pt) = failed {
                        out.push(JobCommand::Verify {
                            point: pt.id,
                            plan: Some(plan.id.clone()),
                            repository: pt.repository.clone(),
                            depth: VerifyDepth::ReadAll,
                        });
                    }
                }
            }
            if let Some(every) = def.restore_test.every {
                let candidate = points
                    .iter()
                    .find(|pt| matches!(pt.state, PointState::Verified | PointState::Recoverable));
                if let Some(pt) = candidate {
                    let last = pt.last_restore_test.as_ref().map(|r| r.at.unix_ns);
                    let stale = last.is_none_or(|t| stale_since(t, now_ns, every));
                    if stale && !job_open(JobKind::RestoreTest) {
                        out.push(JobCommand::RestoreTest {
                            point: pt.id,
                            plan: Some(plan.id.clone()),
                            repository: pt.repository.clone(),
                            sample_files: restore_sample(p, plan, pt, now_ns),
                            boot: def.restore_test.boot.clone(),
                        });
                    }
                }
            }
        }
    }
    out
}

/// Whether a check recorded at `last` is due again at `now` every `every`:
/// when that long has passed, or when `last` lies in the future beyond the
/// clock tolerance (the wall clock stepped back since, e.g. after running
/// ahead: without this, periodic checks would stall for the size of the
/// step; found by the chaos runner).
fn stale_since(last: i64, now_ns: i64, every: std::time::Duration) -> bool {
    now_ns.saturating_sub(last) >= duration_to_ns(every)
        || last > now_ns.saturating_add(CLOCK_TOLERANCE_NS)
}

/// The rolling read-back window: every pack of a repository is read back
/// within `window`, a slice of the pack-name space at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadBackWindow {
    /// Every pack is read back within this long.
    pub window: std::time::Duration,
    /// How many slices the pack-name space is cut into; one slice's turn
    /// comes every `window / slices`.
    pub slices: u32,
}

impl Default for ReadBackWindow {
    /// 30 days in 720 slices: one slice an hour.
    fn default() -> Self {
        ReadBackWindow {
            window: std::time::Duration::from_secs(30 * 24 * 3600),
            slices: 720,
        }
    }
}

/// Read-backs due at `now`, one job per repository in use (by a plan or a
/// live point). Slice `k`'s turns start at the slots `n * window / slices`
/// with `n mod slices = k`. A slice read before is due when it was not read
/// since its latest turn began (so after downtime the missed turns are
/// caught up in one job); a slice never read waits for its turn, so
/// turning the window on reads a large repository over one window, not at
/// once. Either way every pack that exists at its slice's turn is read
/// back within `window`.
pub fn read_back_due(p: &Projections, now_ns: i64, cfg: &ReadBackWindow) -> Vec<JobCommand> {
    if cfg.slices == 0 || now_ns < 0 {
        return Vec::new();
    }
    let of = cfg.slices;
    let slot_ns = (duration_to_ns(cfg.window) / i64::from(of)).max(1);
    let n_now = now_ns / slot_ns;
    let k_now = n_now.rem_euclid(i64::from(of));
    let mut repositories: std::collections::BTreeSet<&vouch_events::RepositoryId> = active_plans(p)
        .map(|pl| &pl.definition.repository)
        .collect();
    repositories.extend(
        p.points
            .points
            .values()
            .filter(|pt| pt.expired.is_none())
            .map(|pt| &pt.repository),
    );
    let mut out = Vec::new();
    for repository in repositories {
        let state = p
            .read_back
            .repositories
            .get(repository)
            .filter(|r| r.of == of);
        let mut due = Vec::new();
        for k in 0..of {
            let behind = (k_now - i64::from(k)).rem_euclid(i64::from(of));
            let turn_started = (n_now - behind) * slot_ns;
            let last_read = state.and_then(|r| {
                let intact = r.last_intact.get(&k).copied();
                let damaged = r.damaged.get(&k).map(|d| d.at.unix_ns);
                intact.max(damaged)
            });
            let is_due = match last_read {
                // A read recorded in the future (the clock stepped back
                // since) does not hold off the slice's turns.
                Some(t) => t < turn_started || t > now_ns.saturating_add(CLOCK_TOLERANCE_NS),
                None => behind == 0,
            };
            if is_due {
                due.push(k);
            }
        }
        if !due.is_empty() {
            out.push(JobCommand::ReadBack {
                repository: repository.clone(),
                slices: due,
                of,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use vouch_events::{
        Event, KeepPolicy, PacksReadBack, PlanCreated, PlanDefinition, PlanId, Projections,
        Recorded, RepositoryId, RestoreTestPolicy, VerificationPolicy, VerifyDepth,
    };

    use super::*;

    const S: i64 = 1_000_000_000;

    /// 100 s in 4 slices: slice k's turns start at 25 s * (4n + k).
    fn cfg() -> ReadBackWindow {
        ReadBackWindow {
            window: Duration::from_secs(100),
            slices: 4,
        }
    }

    fn plan(repository: &str) -> Event {
        PlanCreated {
            plan: PlanId::new(format!("p-{repository}")),
            definition: PlanDefinition {
                source: "/srv".into(),
                schedule: "hourly".into(),
                retention: KeepPolicy::default(),
                verification: VerificationPolicy {
                    after_backup: true,
                    every: None,
                    depth: VerifyDepth::Structure,
                },
                restore_test: RestoreTestPolicy {
                    every: None,
                    max_evidence_age: Duration::from_secs(3600),
                    sample_files: None,
                    full_every: None,
                    boot: None,
                },
                rpo: Duration::from_secs(3600),
                repository: RepositoryId::new(repository),
                paused: false,
                replica: None,
                proxmox: None,
                anomaly_lock: None,
                files: Default::default(),
                hooks: Default::default(),
                time_zone: None,
            },
        }
        .into()
    }

    fn read(slices: &[u32], of: u32, damaged: bool) -> Event {
        PacksReadBack {
            repository: RepositoryId::new("main"),
            job: None,
            slices: slices.to_vec(),
            of,
            packs: 1,
            bytes_read: 1,
            damaged: if damaged {
                vec!["pack 00: bad".into()]
            } else {
                Vec::new()
            },
            damaged_packs: if damaged {
                vec!["00".into()]
            } else {
                Vec::new()
            },
            affected_points: None,
        }
        .into()
    }

    fn state(events: &[(i64, Event)]) -> Projections {
        let mut p = Projections::new();
        for (i, (secs, e)) in events.iter().enumerate() {
            p.apply_event(
                Recorded {
                    seq: i as u64 + 1,
                    unix_ns: secs * S,
                },
                e,
            );
        }
        p
    }

    fn due(p: &Projections, secs: i64) -> Vec<(String, Vec<u32>)> {
        read_back_due(p, secs * S, &cfg())
            .into_iter()
            .map(|c| match c {
                JobCommand::ReadBack {
                    repository,
                    slices,
                    of,
                } => {
                    assert_eq!(of, 4);
                    (repository.to_string(), slices)
                }
                other => panic!("not a read-back: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn slices_never_read_wait_for_their_turn() {
        let p = state(&[(0, plan("main"))]);
        // 1000 s is slot 40: slice 0's turn. 1030 s is slot 41: slice 1.
        assert_eq!(due(&p, 1000), vec![("main".into(), vec![0])]);
        assert_eq!(due(&p, 1030), vec![("main".into(), vec![1])]);
    }

    #[test]
    fn a_slice_read_this_turn_is_not_due_until_its_next_turn() {
        let p = state(&[(0, plan("main")), (1001, read(&[0], 4, false))]);
        assert!(due(&p, 1010).is_empty());
        // Slice 1's turn; slice 0 is fine.
        assert_eq!(due(&p, 1030), vec![("main".into(), vec![1])]);
        // Slice 0's next turn starts at 1100 s.
        assert_eq!(due(&p, 1100), vec![("main".into(), vec![0])]);
    }

    #[test]
    fn missed_turns_are_caught_up_in_one_job_and_damage_is_read_again() {
        let p = state(&[
            (0, plan("main")),
            (1001, read(&[0], 4, false)),
            (1026, read(&[1], 4, true)),
            (1051, read(&[2], 4, false)),
            (1076, read(&[3], 4, false)),
        ]);
        assert!(due(&p, 1090).is_empty());
        // Down from 1090 s to 1260 s: every slice missed its turn.
        assert_eq!(due(&p, 1260), vec![("main".into(), vec![0, 1, 2, 3])]);
        // The damaged slice is read again at its next turn, not before.
        assert_eq!(due(&p, 1126), vec![("main".into(), vec![0, 1])]);
    }

    #[test]
    fn each_repository_in_use_gets_its_own_job_and_a_new_cut_starts_over() {
        let p = state(&[
            (0, plan("main")),
            (0, plan("offsite")),
            (1001, read(&[0, 1, 2, 3], 8, false)),
        ]);
        // The reads were of another cut (8 slices): slice 0 is due anew.
        assert_eq!(
            due(&p, 1001),
            vec![("main".into(), vec![0]), ("offsite".into(), vec![0])]
        );
    }

    #[test]
    fn every_slice_is_read_within_the_window() {
        // Simulate ticks every 5 s for three windows, reading what is due.
        let mut events = vec![(0, plan("main"))];
        let mut last_read = [None::<i64>; 4];
        let mut worst_gap = 0;
        for t in (0..300).step_by(5) {
            let p = state(&events);
            for (_, slices) in due(&p, t) {
                for k in slices {
                    if let Some(prev) = last_read[k as usize] {
                        worst_gap = worst_gap.max(t - prev);
                    }
                    last_read[k as usize] = Some(t);
                }
            }
            let read_now: Vec<u32> = (0..4u32)
                .filter(|&k| last_read[k as usize] == Some(t))
                .collect();
            if !read_now.is_empty() {
                events.push((t, read(&read_now, 4, false)));
            }
        }
        assert!(last_read.iter().all(Option::is_some), "{last_read:?}");
        assert!(
            worst_gap <= 100,
            "a slice waited {worst_gap} s, the window is 100 s"
        );
    }

    fn commit(n: u8, repository: &str, plan: &str, secs: i64, files: u64) -> Event {
        vouch_events::BackupCommitted {
            job: None,
            plan: Some(PlanId::new(plan)),
            repository: RepositoryId::new(repository),
            snapshot: SnapshotId([n; 32]),
            snapshot_time_unix_ns: secs * S,
            summary: vouch_events::BackupSummary {
                files,
                ..Default::default()
            },
            changes: None,
        }
        .into()
    }

    #[test]
    fn the_heuristics_history_is_the_plans_latest_ten_backups_oldest_first() {
        let mut events = vec![(0, plan("main"))];
        // Committed out of time order: the history follows snapshot time.
        for n in (1..=12u8).rev() {
            let mut e = commit(n, "main", "p1", i64::from(n) * 10, u64::from(n));
            if let Event::BackupCommitted(c) = &mut e {
                c.changes = (n > 1).then(|| vouch_events::ChangeFigures {
                    compared_with: SnapshotId([n - 1; 32]),
                    files_before: u64::from(n) - 1,
                    added: 1,
                    changed: 0,
                    deleted: 0,
                    renamed: 0,
                    became_incompressible: Some(0),
                    churn_extension: None,
                    churn_files: 0,
                    note_name: None,
                    note_dirs: 0,
                });
            }
            events.push((200, e));
        }
        events.push((200, commit(50, "main", "other", 5, 99)));
        // A flagged point is no baseline.
        events.push((200, commit(60, "main", "p1", 1000, 60)));
        events.push((
            200,
            vouch_events::AnomalyDetected {
                point: SnapshotId([60; 32]),
                compared_with: None,
                signals: vec![vouch_events::AnomalySignal {
                    kind: "entropy-jump".into(),
                    score_permille: 1000,
                    detail: "x".into(),
                }],
                paths: Vec::new(),
            }
            .into(),
        ));
        let p = state(&events);
        let h = backup_history(&p, &PlanId::new("p1"));
        let files: Vec<u64> = h.iter().map(|(s, _)| s.files).collect();
        assert_eq!(files, (3..=12).collect::<Vec<u64>>());
        assert!(h
            .iter()
            .all(|(s, c)| c.as_ref().is_some_and(|c| c.files_before + 1 == s.files)));
    }

    fn damaged(affected: Option<Vec<SnapshotId>>) -> vouch_events::PacksReadBack {
        vouch_events::PacksReadBack {
            repository: RepositoryId::new("main"),
            job: None,
            slices: vec![0],
            of: 4,
            packs: 3,
            bytes_read: 1,
            damaged: vec!["pack 00: bad".into()],
            damaged_packs: vec!["00".into()],
            affected_points: affected,
        }
    }

    fn verified_read_all(cmds: &[(JobCommand, String)]) -> Vec<SnapshotId> {
        cmds.iter()
            .map(|(c, why)| match c {
                JobCommand::Verify { point, depth, .. } => {
                    assert_eq!(*depth, VerifyDepth::ReadAll, "damage asks for a full read");
                    assert!(why.contains("read-back damage"), "{why}");
                    *point
                }
                other => panic!("not a verification: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn read_back_damage_verifies_in_full_every_affected_live_point() {
        let p = state(&[
            (0, plan("main")),
            (10, commit(1, "main", "p-main", 10, 5)),
            (20, commit(2, "main", "p-main", 20, 5)),
            (30, commit(3, "main", "p-main", 30, 5)),
            (31, commit(9, "other", "p-main", 31, 5)),
        ]);
        let r = damaged(Some(vec![SnapshotId([1; 32]), SnapshotId([3; 32])]));
        let next = follow_ups(&p, JobKind::ReadBack, &[r.into()], 40, 40 * S);
        let mut points = verified_read_all(&next);
        points.sort();
        assert_eq!(points, vec![SnapshotId([1; 32]), SnapshotId([3; 32])]);

        // Could not tell which points: every live point of the repository,
        // newest first (not the other repository's).
        let next = follow_ups(&p, JobKind::ReadBack, &[damaged(None).into()], 40, 40 * S);
        assert_eq!(
            verified_read_all(&next),
            vec![
                SnapshotId([3; 32]),
                SnapshotId([2; 32]),
                SnapshotId([1; 32])
            ]
        );
        // An intact read-back asks for nothing.
        let next = follow_ups(&p, JobKind::ReadBack, &[read(&[0], 4, false)], 40, 40 * S);
        assert!(next.is_empty());
    }

    #[test]
    fn damage_of_a_repository_with_many_points_is_bounded() {
        let mut events = vec![(0, plan("main"))];
        for n in 0..(SUSPECT_POINTS_BOUND as u8 + 5) {
            events.push((
                i64::from(n) + 1,
                commit(n, "main", "p-main", i64::from(n) + 1, 1),
            ));
        }
        let p = state(&events);
        let next = follow_ups(&p, JobKind::ReadBack, &[damaged(None).into()], 99, 99 * S);
        let points = verified_read_all(&next);
        assert_eq!(points.len(), SUSPECT_POINTS_BOUND);
        assert_eq!(
            points[0],
            SnapshotId([SUSPECT_POINTS_BOUND as u8 + 4; 32]),
            "newest first"
        );
    }

    fn tested_plan(sample: Option<u64>, full_every: Option<Duration>) -> Event {
        let Event::PlanCreated(mut c) = plan("main") else {
            unreachable!()
        };
        c.definition.restore_test.every = Some(Duration::from_secs(60));
        c.definition.restore_test.sample_files = sample;
        c.definition.restore_test.full_every = full_every;
        c.into()
    }

    fn restore_passed(n: u8, complete: bool) -> Event {
        vouch_events::RestoreTestPassed {
            point: SnapshotId([n; 32]),
            job: None,
            evidence: vouch_events::RestoreEvidence {
                files: 5,
                digests_compared: 5,
                digests_matched: 5,
                files_in_point: Some(5),
                complete,
                ..Default::default()
            },
        }
        .into()
    }

    fn verify_passed(n: u8) -> Event {
        vouch_events::VerificationPassed {
            point: SnapshotId([n; 32]),
            job: None,
            depth: VerifyDepth::Structure,
            bytes_read: 1,
            blobs_checked: 1,
        }
        .into()
    }

    fn restore_samples(p: &Projections, now: i64) -> Vec<Option<u64>> {
        follow_ups(p, JobKind::Verify, &[verify_passed(1)], 9, now * S)
            .into_iter()
            .filter_map(|(c, _)| match c {
                JobCommand::RestoreTest { sample_files, .. } => Some(sample_files),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_proof_policy_asks_for_a_complete_restore_test_when_the_last_is_too_old() {
        let day = Duration::from_secs(86_400);
        // Never a complete test: the first is complete.
        let p = state(&[
            (0, tested_plan(Some(100), Some(day))),
            (10, commit(1, "main", "p-main", 10, 5)),
            (11, verify_passed(1)),
        ]);
        assert_eq!(restore_samples(&p, 12), vec![None]);
        // A complete test an hour ago: a sample now.
        let p = state(&[
            (0, tested_plan(Some(100), Some(day))),
            (10, commit(1, "main", "p-main", 10, 5)),
            (11, verify_passed(1)),
            (12, restore_passed(1, true)),
        ]);
        assert_eq!(restore_samples(&p, 3600), vec![Some(100)]);
        // A day later: complete again. A sampled pass does not count.
        let p = state(&[
            (0, tested_plan(Some(100), Some(day))),
            (10, commit(1, "main", "p-main", 10, 5)),
            (11, verify_passed(1)),
            (12, restore_passed(1, true)),
            (80_000, restore_passed(1, false)),
        ]);
        assert_eq!(restore_samples(&p, 86_500), vec![None]);
        // No full_every: the plan's sample, as before.
        let p = state(&[
            (0, tested_plan(Some(100), None)),
            (10, commit(1, "main", "p-main", 10, 5)),
            (11, verify_passed(1)),
        ]);
        assert_eq!(restore_samples(&p, 12), vec![Some(100)]);
        // The periodic check follows the same policy.
        let p = state(&[
            (0, tested_plan(Some(100), Some(day))),
            (10, commit(1, "main", "p-main", 10, 5)),
            (11, verify_passed(1)),
        ]);
        let checks: Vec<Option<u64>> = periodic_checks(&p, 100 * S)
            .into_iter()
            .filter_map(|c| match c {
                JobCommand::RestoreTest { sample_files, .. } => Some(sample_files),
                _ => None,
            })
            .collect();
        assert_eq!(checks, vec![None]);
    }

    /// Found by `cargo mutants` (the guard `< full_every` replaced by
    /// `true`, and `<` by `<=`): a complete test that is the latest and
    /// older than `full_every` asks for a complete test again, at exactly
    /// `full_every` too. And a sampled test after a complete one does not
    /// hide it: the policy used to read only each point's latest test, so
    /// every sample was followed by a complete test (seen failing).
    #[test]
    fn the_proof_policy_counts_the_last_complete_test_whatever_came_after() {
        let day = Duration::from_secs(86_400);
        let history = |extra: Vec<(i64, Event)>| {
            let mut h = vec![
                (0, tested_plan(Some(100), Some(day))),
                (10, commit(1, "main", "p-main", 10, 5)),
                (11, verify_passed(1)),
                (12, restore_passed(1, true)),
            ];
            h.extend(extra);
            state(&h)
        };
        assert_eq!(restore_samples(&history(vec![]), 86_000), vec![Some(100)]);
        assert_eq!(restore_samples(&history(vec![]), 12 + 86_400), vec![None]);
        assert_eq!(restore_samples(&history(vec![]), 90_000), vec![None]);
        let sampled = history(vec![(1000, restore_passed(1, false))]);
        assert_eq!(restore_samples(&sampled, 3600), vec![Some(100)]);
    }

    /// Found by the chaos runner: a point whose verification failed on a
    /// damaged pack kept its failure (and its alert) after the pack was
    /// put back, since only a plan's newest point is verified
    /// periodically. Such a point is read in full again, as often, when
    /// the newest point is fresh.
    #[test]
    fn a_point_whose_verification_failed_is_verified_again() {
        let Event::PlanCreated(mut c) = plan("main") else {
            unreachable!()
        };
        c.definition.verification.every = Some(Duration::from_secs(60));
        let failed: Event = vouch_events::VerificationFailed {
            point: SnapshotId([1; 32]),
            job: None,
            depth: VerifyDepth::ReadAll,
            bytes_read: 1,
            damaged: vec!["pack 00: bad".into()],
        }
        .into();
        let h = vec![
            (0, c.into()),
            (10, commit(1, "main", "p-main", 10, 5)),
            (20, failed),
            (30, commit(2, "main", "p-main", 30, 5)),
            (95, verify_passed(2)),
        ];
        let p = state(&h);
        let verifies = |now: i64| -> Vec<(SnapshotId, VerifyDepth)> {
            periodic_checks(&p, now * S)
                .into_iter()
                .filter_map(|c| match c {
                    JobCommand::Verify { point, depth, .. } => Some((point, depth)),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(
            verifies(100),
            vec![(SnapshotId([1; 32]), VerifyDepth::ReadAll)]
        );
        // Not before its own verification is as old as the plan asks.
        assert_eq!(verifies(79), Vec::new());
        // The newest point first, when it is due.
        assert_eq!(
            verifies(160),
            vec![(SnapshotId([2; 32]), VerifyDepth::Structure)]
        );
    }

    /// Found by the chaos runner: checks recorded while the wall clock ran
    /// two hours ahead held off the next ones for two hours once the clock
    /// came back (verifications, restore tests and the read-back of the
    /// slice holding a damaged pack that had been put back). A check
    /// recorded in the future beyond the clock tolerance is due.
    #[test]
    fn checks_recorded_in_the_future_do_not_hold_off_the_next() {
        let Event::PlanCreated(mut c) = plan("main") else {
            unreachable!()
        };
        c.definition.verification.every = Some(Duration::from_secs(60));
        c.definition.restore_test.every = Some(Duration::from_secs(60));
        let kinds = |p: &Projections, now: i64| {
            let checks = periodic_checks(p, now * S);
            (
                checks
                    .iter()
                    .filter(|c| matches!(c, JobCommand::Verify { .. }))
                    .count(),
                checks
                    .iter()
                    .filter(|c| matches!(c, JobCommand::RestoreTest { .. }))
                    .count(),
            )
        };
        // Committed at 100 s; verified and restore-tested while the clock
        // said 7300 s (two hours ahead).
        let h = vec![
            (0, c.into()),
            (100, commit(1, "main", "p-main", 100, 5)),
            (7300, verify_passed(1)),
            (7301, restore_passed(1, true)),
        ];
        let p = state(&h);
        assert_eq!(kinds(&p, 7330), (0, 0), "fresh at the time they claim");
        assert_eq!(kinds(&p, 7100), (0, 0), "within the tolerance");
        assert_eq!(kinds(&p, 130), (1, 1), "the clock came back: due");
        // The read-back of a slice read in the future is due too.
        let r = state(&[(0, plan("main")), (10_000, read(&[0], 4, false))]);
        assert_eq!(due(&r, 2_810), vec![("main".into(), vec![0])]);
        assert!(
            due(&r, 10_010).is_empty(),
            "read this turn, by its own clock"
        );
    }

    /// Found by `cargo mutants` (`open_jobs` emptied, or its `!` deleted):
    /// a periodic check is not proposed again while one of its kind is
    /// open for the plan, and is once that one ended.
    #[test]
    fn a_periodic_check_is_not_proposed_while_one_is_open() {
        let Event::PlanCreated(mut c) = plan("main") else {
            unreachable!()
        };
        c.definition.verification.every = Some(Duration::from_secs(60));
        let job = vouch_events::JobId::new("v1");
        let scheduled: Event = vouch_events::JobScheduled {
            job: job.clone(),
            kind: JobKind::Verify,
            plan: Some(PlanId::new("p-main")),
            point: Some(SnapshotId([1; 32])),
            due_unix_ns: 11 * S,
            attempt: 1,
            spec: Default::default(),
        }
        .into();
        let verifies = |p: &Projections| {
            periodic_checks(p, 1000 * S)
                .into_iter()
                .filter(|c| matches!(c, JobCommand::Verify { .. }))
                .count()
        };
        let base = vec![(0, c.into()), (10, commit(1, "main", "p-main", 10, 5))];
        assert_eq!(verifies(&state(&base)), 1, "due");
        let mut open = base.clone();
        open.push((11, scheduled.clone()));
        assert_eq!(verifies(&state(&open)), 0, "one is open");
        let mut ended = open.clone();
        ended.push((
            12,
            vouch_events::JobStarted {
                job: job.clone(),
                agent: None,
            }
            .into(),
        ));
        ended.push((13, vouch_events::JobFinished { job }.into()));
        assert_eq!(verifies(&state(&ended)), 1, "it ended");
    }

    /// Found by `cargo mutants` (`&&` for `||` in the test for damage):
    /// damage named by pack ids alone still asks for full verifications.
    #[test]
    fn damage_named_only_by_pack_ids_is_followed_up() {
        let p = state(&[(0, plan("main")), (10, commit(1, "main", "p-main", 10, 5))]);
        let mut r = damaged(None);
        r.damaged.clear();
        let next = follow_ups(&p, JobKind::ReadBack, &[r.into()], 40, 40 * S);
        assert_eq!(verified_read_all(&next), vec![SnapshotId([1; 32])]);
    }

    fn scheduled(job: &str, kind: JobKind, plan: &str, secs: i64) -> Event {
        vouch_events::JobScheduled {
            job: vouch_events::JobId::new(job),
            kind,
            plan: Some(PlanId::new(plan)),
            point: None,
            due_unix_ns: secs * S,
            attempt: 1,
            spec: Default::default(),
        }
        .into()
    }

    /// Found by `cargo mutants` (`last_backups_scheduled` emptied, `!=`
    /// for `==`): a plan's last run is when its latest *backup* job was
    /// scheduled; other kinds of jobs do not move it.
    #[test]
    fn a_plans_last_run_is_its_latest_backup_job() {
        let p = state(&[
            (0, plan("main")),
            (10, scheduled("b1", JobKind::Backup, "p-main", 10)),
            (20, scheduled("b2", JobKind::Backup, "p-main", 20)),
            (30, scheduled("v1", JobKind::Verify, "p-main", 30)),
        ]);
        let last = last_backups_scheduled(&p);
        assert_eq!(last.get(&PlanId::new("p-main")), Some(&(20 * S)));
        assert_eq!(last.len(), 1);
    }

    /// Found by `cargo mutants` (the backup arm of `follow_ups` deleted,
    /// the `!` of the retention test deleted, `&&` for `||` in the restore
    /// test after a verification): a committed backup is verified and
    /// followed by retention when the plan keeps less than everything; a
    /// point of a removed plan is not restore-tested.
    #[test]
    fn a_backup_is_followed_by_its_verification_and_retention() {
        let Event::PlanCreated(mut c) = tested_plan(None, None) else {
            unreachable!()
        };
        c.definition.retention.last = Some(3);
        let p = state(&[(0, c.into()), (10, commit(1, "main", "p-main", 10, 5))]);
        let next = follow_ups(
            &p,
            JobKind::Backup,
            &[commit(1, "main", "p-main", 10, 5)],
            2,
            11 * S,
        );
        let kinds: Vec<&str> = next
            .iter()
            .map(|(c, _)| match c {
                JobCommand::Verify { .. } => "verify",
                JobCommand::Retention { .. } => "retention",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, vec!["verify", "retention"]);
        // Keep everything: no retention job.
        let p = state(&[
            (0, tested_plan(None, None)),
            (10, commit(1, "main", "p-main", 10, 5)),
        ]);
        let next = follow_ups(
            &p,
            JobKind::Backup,
            &[commit(1, "main", "p-main", 10, 5)],
            2,
            11 * S,
        );
        assert_eq!(next.len(), 1, "{next:?}");
        // A removed plan's point is not restore-tested after verification.
        let p = state(&[
            (0, tested_plan(None, None)),
            (10, commit(1, "main", "p-main", 10, 5)),
            (
                11,
                vouch_events::PlanRemoved {
                    plan: PlanId::new("p-main"),
                }
                .into(),
            ),
        ]);
        assert!(restore_samples(&p, 12).is_empty());
    }

    /// Found by `cargo mutants` (`retention_protects` emptied): retention
    /// keeps every point locked at `now` and the plan's newest recoverable
    /// point, whatever its rules say.
    #[test]
    fn retention_protects_locked_points_and_the_newest_recoverable_one() {
        let lock = |n: u8, until: i64| -> Event {
            vouch_events::PointLocked {
                point: SnapshotId([n; 32]),
                until_unix_ns: until * S,
            }
            .into()
        };
        let p = state(&[
            (0, tested_plan(None, None)),
            (10, commit(1, "main", "p-main", 10, 5)),
            (11, verify_passed(1)),
            (12, restore_passed(1, true)),
            (20, commit(2, "main", "p-main", 20, 5)),
            (30, commit(3, "main", "p-main", 30, 5)),
            (31, lock(3, 1000)),
            (32, commit(4, "main", "p-main", 40, 5)),
            (33, lock(4, 50)),
        ]);
        assert_eq!(
            retention_protects(
                &p,
                &PlanId::new("p-main"),
                &RepositoryId::new("main"),
                100 * S
            ),
            vec![SnapshotId([1; 32]), SnapshotId([3; 32])],
            "the recoverable point and the lock still in force, not the lapsed one"
        );
        // A lock runs until its time, exclusive (as the projection has it).
        assert_eq!(
            retention_protects(
                &p,
                &PlanId::new("p-main"),
                &RepositoryId::new("main"),
                1000 * S
            ),
            vec![SnapshotId([1; 32])]
        );
    }

    #[test]
    fn retention_that_forgot_points_is_followed_by_one_reconciliation() {
        let p = state(&[
            (0, plan("main")),
            (10, commit(1, "main", "p-main", 10, 5)),
            (20, commit(2, "main", "p-main", 20, 5)),
            (30, commit(3, "main", "p-main", 30, 5)),
        ]);
        let forgot = |n: u8| -> Event {
            vouch_events::PointForgotten {
                point: SnapshotId([n; 32]),
                rule: "keep_last".into(),
            }
            .into()
        };
        let next = follow_ups(&p, JobKind::Forget, &[forgot(1), forgot(2)], 40, 40 * S);
        assert_eq!(next.len(), 1, "{next:?}");
        assert!(
            matches!(&next[0].0, JobCommand::Reconcile { repository, .. } if repository.as_str() == "main")
        );
        // Retention that forgot nothing asks for nothing.
        assert!(follow_ups(&p, JobKind::Forget, &[], 40, 40 * S).is_empty());
        let p = state(&[
            (0, plan("main")),
            (10, commit(1, "main", "p-main", 10, 5)),
            (20, commit(2, "main", "p-main", 20, 5)),
            (21, forgot(1)),
        ]);
        assert_eq!(
            reconcile_lists(&p, &RepositoryId::new("main")),
            (vec![SnapshotId([1; 32])], vec![SnapshotId([2; 32])])
        );
    }

    fn replicated_plan() -> Event {
        let Event::PlanCreated(mut c) = tested_plan(Some(10), Some(Duration::from_secs(600)))
        else {
            unreachable!()
        };
        c.definition.verification.every = Some(Duration::from_secs(60));
        c.definition.retention = KeepPolicy {
            last: Some(2),
            ..KeepPolicy::default()
        };
        c.definition.replica = Some(vouch_events::ReplicaPolicy {
            repository: RepositoryId::new("offsite"),
            lock_for: Some(Duration::from_secs(3600)),
            require: vouch_events::ReplicaRequirement::Proven,
        });
        c.into()
    }

    fn copied(source: u8, copy: u8, secs: i64) -> Event {
        vouch_events::CopyCommitted {
            job: None,
            plan: Some(PlanId::new("p-main")),
            source: SnapshotId([source; 32]),
            repository: RepositoryId::new("offsite"),
            snapshot: SnapshotId([copy; 32]),
            snapshot_time_unix_ns: secs * S,
            summary: vouch_events::BackupSummary {
                files: 5,
                ..Default::default()
            },
            off_host: true,
            locks_enforced_by: vouch_events::LockEnforcement::Storage,
            locked_until_unix_ns: None,
        }
        .into()
    }

    #[test]
    fn a_backup_of_a_plan_with_a_replica_is_copied_and_the_copy_checked_on_its_own() {
        let p = state(&[
            (0, replicated_plan()),
            (10, commit(1, "main", "p-main", 10, 5)),
        ]);
        let after_backup = follow_ups(
            &p,
            JobKind::Backup,
            &[commit(1, "main", "p-main", 10, 5)],
            2,
            11 * S,
        );
        let copy = after_backup.iter().find_map(|(c, _)| match c {
            JobCommand::Copy {
                point,
                source_repository,
                repository,
                lock_for,
                ..
            } => Some((
                *point,
                source_repository.clone(),
                repository.clone(),
                *lock_for,
            )),
            _ => None,
        });
        assert_eq!(
            copy,
            Some((
                SnapshotId([1; 32]),
                RepositoryId::new("main"),
                RepositoryId::new("offsite"),
                Some(Duration::from_secs(3600))
            ))
        );
        // The copy is verified, and retention applies in the replica too.
        let p = state(&[
            (0, replicated_plan()),
            (10, commit(1, "main", "p-main", 10, 5)),
            (12, copied(1, 2, 10)),
        ]);
        let after_copy = follow_ups(&p, JobKind::Copy, &[copied(1, 2, 10)], 3, 13 * S);
        let kinds: Vec<(JobKind, String, Option<SnapshotId>)> = after_copy
            .iter()
            .map(|(c, _)| (c.kind(), c.repository().to_string(), c.point()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (JobKind::Verify, "offsite".into(), Some(SnapshotId([2; 32]))),
                (JobKind::Forget, "offsite".into(), None),
            ]
        );
        // Its restore test follows its own verification, complete: the
        // copies have no complete test yet, whatever the plan's own points
        // had.
        let p = state(&[
            (0, replicated_plan()),
            (10, commit(1, "main", "p-main", 10, 5)),
            (11, verify_passed(1)),
            (12, restore_passed(1, true)),
            (13, copied(1, 2, 10)),
            (14, verify_passed(2)),
        ]);
        let tests: Vec<(SnapshotId, Option<u64>)> =
            follow_ups(&p, JobKind::Verify, &[verify_passed(2)], 6, 15 * S)
                .into_iter()
                .filter_map(|(c, _)| match c {
                    JobCommand::RestoreTest {
                        point,
                        sample_files,
                        repository,
                        ..
                    } => {
                        assert_eq!(repository, RepositoryId::new("offsite"));
                        Some((point, sample_files))
                    }
                    _ => None,
                })
                .collect();
        assert_eq!(tests, vec![(SnapshotId([2; 32]), None)]);
        // The plan's own point had its complete test: a sample for it.
        assert_eq!(restore_samples(&p, 15), vec![Some(10)]);
    }

    #[test]
    fn periodic_checks_prove_the_newest_copy_as_well_as_the_plans_own_point() {
        let p = state(&[
            (0, replicated_plan()),
            (10, commit(1, "main", "p-main", 10, 5)),
            (11, verify_passed(1)),
            (12, restore_passed(1, true)),
            (13, copied(1, 2, 10)),
            (14, verify_passed(2)),
            (15, restore_passed(2, true)),
        ]);
        let mut due: Vec<(JobKind, SnapshotId)> = periodic_checks(&p, 1000 * S)
            .iter()
            .filter_map(|c| c.point().map(|pt| (c.kind(), pt)))
            .collect();
        due.sort_by_key(|(k, pt)| (format!("{k:?}"), *pt));
        assert_eq!(
            due,
            vec![
                (JobKind::RestoreTest, SnapshotId([1; 32])),
                (JobKind::RestoreTest, SnapshotId([2; 32])),
                (JobKind::Verify, SnapshotId([1; 32])),
                (JobKind::Verify, SnapshotId([2; 32])),
            ]
        );
        // An open check of the copy does not hold back the plan's own.
        let open: Event = vouch_events::JobScheduled {
            job: vouch_events::JobId::new("v-copy"),
            kind: JobKind::Verify,
            plan: Some(PlanId::new("p-main")),
            point: Some(SnapshotId([2; 32])),
            due_unix_ns: 0,
            attempt: 1,
            spec: Default::default(),
        }
        .into();
        let p = state(&[
            (0, replicated_plan()),
            (10, commit(1, "main", "p-main", 10, 5)),
            (13, copied(1, 2, 10)),
            (16, open),
        ]);
        let verifies: Vec<SnapshotId> = periodic_checks(&p, 1000 * S)
            .iter()
            .filter(|c| c.kind() == JobKind::Verify)
            .filter_map(JobCommand::point)
            .collect();
        assert_eq!(verifies, vec![SnapshotId([1; 32])]);
    }

    #[test]
    fn retention_in_the_replica_protects_the_newest_recoverable_copy_not_the_plans_point() {
        let p = state(&[
            (0, replicated_plan()),
            (10, commit(1, "main", "p-main", 10, 5)),
            (11, verify_passed(1)),
            (12, restore_passed(1, true)),
            (13, copied(1, 2, 10)),
            (14, verify_passed(2)),
            (15, restore_passed(2, true)),
            (20, commit(3, "main", "p-main", 20, 5)),
            (21, copied(3, 4, 20)),
        ]);
        let plan = PlanId::new("p-main");
        assert_eq!(
            retention_protects(&p, &plan, &RepositoryId::new("offsite"), 30 * S),
            vec![SnapshotId([2; 32])]
        );
        assert_eq!(
            retention_protects(&p, &plan, &RepositoryId::new("main"), 30 * S),
            vec![SnapshotId([1; 32])]
        );
    }
}
