//! Results must name their job (review finding L3). The dispatcher fences a
//! run by the token of its `job.started`; this checks that what the run
//! returned is about that job: a result is recorded only when none of its
//! events names another job, another point or another repository than the
//! command's. A refused result is recorded as the job's failure with kind
//! [`FOREIGN_RESULT`], and none of its events is appended.

use vouch_events::{Event, JobId, RepositoryId, SnapshotId};

use super::command::JobCommand;

/// The `error_kind` of a job whose worker returned events about something
/// else than the job (never retried: the same worker would answer the same).
pub const FOREIGN_RESULT: &str = "foreign_result";

/// The job an event names, if it names one.
fn job_of(e: &Event) -> Option<&JobId> {
    match e {
        Event::JobScheduled(e) => Some(&e.job),
        Event::JobStarted(e) => Some(&e.job),
        Event::JobProgress(e) => Some(&e.job),
        Event::JobFinished(e) => Some(&e.job),
        Event::JobFailed(e) => Some(&e.job),
        Event::JobAbandoned(e) => Some(&e.job),
        Event::LeaseGranted(e) => Some(&e.job),
        Event::LeaseExpired(e) => Some(&e.job),
        Event::BackupCommitted(e) => e.job.as_ref(),
        Event::CopyCommitted(e) => e.job.as_ref(),
        Event::VerificationStarted(e) => e.job.as_ref(),
        Event::VerificationPassed(e) => e.job.as_ref(),
        Event::VerificationFailed(e) => e.job.as_ref(),
        Event::RestoreTestStarted(e) => e.job.as_ref(),
        Event::RestoreTestPassed(e) => e.job.as_ref(),
        Event::RestoreTestFailed(e) => e.job.as_ref(),
        Event::PacksReadBack(e) => e.job.as_ref(),
        Event::RepositoryPruned(e) => Some(&e.job),
        _ => None,
    }
}

/// The repository an event names, if it names one.
fn repository_of(e: &Event) -> Option<&RepositoryId> {
    match e {
        Event::BackupCommitted(e) => Some(&e.repository),
        Event::CopyCommitted(e) => Some(&e.repository),
        Event::PointDiscovered(e) => Some(&e.repository),
        Event::PacksReadBack(e) => Some(&e.repository),
        Event::PointVanished(e) => Some(&e.repository),
        Event::RepositoryPruned(e) => Some(&e.repository),
        _ => None,
    }
}

/// Why the point event `e` (about `point`) is not about `command`, if it
/// is not. `committed`: the points the same result commits.
fn foreign_point(
    command: &JobCommand,
    committed: &[SnapshotId],
    anomalous: bool,
    e: &Event,
    point: SnapshotId,
) -> Option<String> {
    let ty = e.event_type();
    match command {
        JobCommand::Verify { point: own, .. }
        | JobCommand::RestoreTest { point: own, .. }
        | JobCommand::Restore { point: own, .. } => (point != *own).then(|| {
            format!(
                "{ty} is about point {}, the job's is {}",
                point.short(),
                own.short()
            )
        }),
        // The last point before an anomaly, locked by a plan that opted in
        // (`anomaly_lock`): only that point, only with an anomaly in the
        // same result.
        JobCommand::Backup {
            definition,
            last_good: Some(good),
            ..
        } if matches!(e, Event::PointLocked(_))
            && point == *good
            && anomalous
            && definition.anomaly_lock.is_some() =>
        {
            None
        }
        // A backup speaks only of the points it commits (anomalies too).
        JobCommand::Backup { .. } => (!committed.contains(&point)).then(|| {
            format!(
                "{ty} is about point {}, which this backup did not commit",
                point.short()
            )
        }),
        // A reconciliation finds manifests the log does not know, and
        // misses only those of the live points it was given.
        JobCommand::Reconcile { live, .. } => match e {
            Event::PointDiscovered(_) => None,
            Event::PointVanished(_) if live.contains(&point) => None,
            _ => Some(format!(
                "{ty} is about point {}, not one of the live points this reconciliation checked",
                point.short()
            )),
        },
        // A read-back is about packs, not points.
        JobCommand::ReadBack { .. } => Some(format!(
            "{ty} is about point {}; a read-back is about no point",
            point.short()
        )),
        // Neither is a prune.
        JobCommand::Prune { .. } => Some(format!(
            "{ty} is about point {}; a prune is about no point",
            point.short()
        )),
        // Retention decides over the plan's points, which the command does
        // not list; the projection refuses forgetting a locked point.
        JobCommand::Retention { .. } => None,
        // A copy records the copy of its own point, and nothing else.
        JobCommand::Copy {
            point: own, plan, ..
        } => match e {
            Event::CopyCommitted(c) if c.source == *own && c.plan.as_ref() == Some(plan) => None,
            Event::CopyCommitted(c) if c.source != *own => Some(format!(
                "{ty} copies point {}, the job's is {}",
                c.source.short(),
                own.short()
            )),
            Event::CopyCommitted(_) => {
                Some(format!("{ty} names another plan than the job's {plan}"))
            }
            _ => Some(format!(
                "{ty} is about point {}; a copy records only its copy",
                point.short()
            )),
        },
    }
}

/// Why the `events` that the worker running `job` on `command` returned
/// cannot be recorded, if they cannot: the first event that names another
/// job, a job's lifecycle (the dispatcher records those), another
/// repository, another plan or another point than the command's.
pub(crate) fn foreign(job: &JobId, command: &JobCommand, events: &[Event]) -> Option<String> {
    let committed: Vec<SnapshotId> = events
        .iter()
        .filter_map(|e| match e {
            Event::BackupCommitted(b) => Some(b.snapshot),
            _ => None,
        })
        .collect();
    let anomalous = events
        .iter()
        .any(|e| matches!(e, Event::AnomalyDetected(a) if committed.contains(&a.point)));
    for e in events {
        let ty = e.event_type();
        if let Some(other) = job_of(e).filter(|j| *j != job) {
            return Some(format!("{ty} names job {other}, not {job}"));
        }
        if matches!(
            e,
            Event::JobScheduled(_)
                | Event::JobStarted(_)
                | Event::JobFinished(_)
                | Event::JobFailed(_)
                | Event::JobAbandoned(_)
        ) {
            return Some(format!(
                "{ty} is the dispatcher's to record, not a worker's"
            ));
        }
        if let Some(r) = repository_of(e).filter(|r| *r != command.repository()) {
            return Some(format!(
                "{ty} names repository {r}, the job's is {}",
                command.repository()
            ));
        }
        if let (Event::BackupCommitted(b), JobCommand::Backup { plan, .. }) = (e, command) {
            if b.plan.as_ref() != Some(plan) {
                return Some(format!(
                    "{ty} names plan {}, the job's is {plan}",
                    b.plan.as_ref().map_or("none", |p| p.as_str())
                ));
            }
        }
        if let Some(reason) = e
            .point()
            .and_then(|point| foreign_point(command, &committed, anomalous, e, point))
        {
            return Some(reason);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use vouch_events::{
        BackupCommitted, BackupSummary, JobFinished, PlanId, PointForgotten, VerificationPassed,
        VerifyDepth,
    };

    fn verify(point: u8) -> JobCommand {
        JobCommand::Verify {
            point: SnapshotId([point; 32]),
            plan: None,
            repository: RepositoryId::new("main"),
            depth: VerifyDepth::Structure,
        }
    }

    fn passed(point: u8, job: &str) -> Event {
        VerificationPassed {
            point: SnapshotId([point; 32]),
            job: Some(JobId::new(job)),
            depth: VerifyDepth::Structure,
            bytes_read: 1,
            blobs_checked: 1,
        }
        .into()
    }

    fn committed(plan: &str, repo: &str, point: u8) -> Event {
        BackupCommitted {
            job: Some(JobId::new("j")),
            plan: Some(PlanId::new(plan)),
            repository: RepositoryId::new(repo),
            snapshot: SnapshotId([point; 32]),
            snapshot_time_unix_ns: 1,
            summary: BackupSummary::default(),
            changes: None,
        }
        .into()
    }

    #[test]
    fn a_result_about_its_own_job_and_point_is_recorded() {
        let j = JobId::new("j");
        assert_eq!(foreign(&j, &verify(1), &[passed(1, "j")]), None);
        assert_eq!(foreign(&j, &verify(1), &[]), None);
    }

    #[test]
    fn a_result_about_another_point_job_plan_or_repository_is_refused() {
        let j = JobId::new("j");
        let other_point = foreign(&j, &verify(1), &[passed(2, "j")]);
        assert!(other_point.is_some_and(|r| r.contains("point")));
        let other_job = foreign(&j, &verify(1), &[passed(1, "k")]);
        assert!(other_job.is_some_and(|r| r.contains("names job k")));
        let finished = foreign(
            &j,
            &verify(1),
            &[JobFinished {
                job: JobId::new("k"),
            }
            .into()],
        );
        assert!(finished.is_some());
        let own_finished = foreign(&j, &verify(1), &[JobFinished { job: j.clone() }.into()]);
        assert!(own_finished.is_some_and(|r| r.contains("dispatcher")));
        let backup = JobCommand::Backup {
            plan: PlanId::new("p"),
            definition: Box::new(vouch_events::PlanDefinition {
                source: "/s".into(),
                schedule: "0 3 * * *".into(),
                retention: vouch_events::KeepPolicy::default(),
                verification: vouch_events::VerificationPolicy {
                    after_backup: true,
                    every: None,
                    depth: VerifyDepth::Structure,
                },
                restore_test: vouch_events::RestoreTestPolicy {
                    every: None,
                    max_evidence_age: std::time::Duration::from_secs(1),
                    sample_files: None,
                    full_every: None,
                    boot: None,
                },
                rpo: std::time::Duration::from_secs(1),
                repository: RepositoryId::new("main"),
                paused: false,
                replica: None,
                proxmox: None,
                anomaly_lock: None,
                files: Default::default(),
                hooks: Default::default(),
                time_zone: None,
            }),
            history: Vec::new(),
            last_good: None,
        };
        assert_eq!(foreign(&j, &backup, &[committed("p", "main", 3)]), None);
        assert!(foreign(&j, &backup, &[committed("q", "main", 3)]).is_some());
        assert!(foreign(&j, &backup, &[committed("p", "other", 3)]).is_some());
        // A backup speaks only of the point it commits.
        assert!(foreign(&j, &backup, &[committed("p", "main", 3), passed(4, "j")]).is_some());
        // ... and, with an anomaly, of the lock of the last point before
        // it, when the plan opted in, and only that point.
        let lock = |n: u8| -> Event {
            vouch_events::PointLocked {
                point: SnapshotId([n; 32]),
                until_unix_ns: 1,
            }
            .into()
        };
        let anomaly: Event = vouch_events::AnomalyDetected {
            point: SnapshotId([3; 32]),
            compared_with: Some(SnapshotId([2; 32])),
            signals: Vec::new(),
            paths: Vec::new(),
        }
        .into();
        let mut opted = backup.clone();
        if let JobCommand::Backup {
            definition,
            last_good,
            ..
        } = &mut opted
        {
            definition.anomaly_lock = Some(std::time::Duration::from_secs(86_400));
            *last_good = Some(SnapshotId([2; 32]));
        }
        let result = [committed("p", "main", 3), anomaly.clone(), lock(2)];
        assert_eq!(foreign(&j, &opted, &result), None);
        assert!(
            foreign(&j, &backup, &result).is_some(),
            "a plan that did not opt in"
        );
        let other = [committed("p", "main", 3), anomaly, lock(1)];
        assert!(foreign(&j, &opted, &other).is_some(), "another point");
        let quiet = [committed("p", "main", 3), lock(2)];
        assert!(foreign(&j, &opted, &quiet).is_some(), "no anomaly");
        let read_back = JobCommand::ReadBack {
            repository: RepositoryId::new("main"),
            slices: vec![0],
            of: 1,
        };
        let forgot: Event = PointForgotten {
            point: SnapshotId([5; 32]),
            rule: "r".into(),
        }
        .into();
        assert!(foreign(&j, &read_back, &[forgot]).is_some());
    }

    fn copied(plan: &str, repo: &str, source: u8, copy: u8) -> Event {
        vouch_events::CopyCommitted {
            job: Some(JobId::new("j")),
            plan: Some(PlanId::new(plan)),
            source: SnapshotId([source; 32]),
            repository: RepositoryId::new(repo),
            snapshot: SnapshotId([copy; 32]),
            snapshot_time_unix_ns: 1,
            summary: BackupSummary::default(),
            off_host: true,
            locks_enforced_by: vouch_events::LockEnforcement::Storage,
            locked_until_unix_ns: None,
        }
        .into()
    }

    #[test]
    fn a_copy_records_only_the_copy_of_its_own_point() {
        let j = JobId::new("j");
        let copy = JobCommand::Copy {
            plan: PlanId::new("p"),
            point: SnapshotId([1; 32]),
            source_repository: RepositoryId::new("main"),
            repository: RepositoryId::new("offsite"),
            lock_for: None,
        };
        assert_eq!(foreign(&j, &copy, &[copied("p", "offsite", 1, 2)]), None);
        let other_source = foreign(&j, &copy, &[copied("p", "offsite", 3, 2)]);
        assert!(other_source.is_some_and(|r| r.contains("copies point")));
        assert!(
            foreign(&j, &copy, &[copied("q", "offsite", 1, 2)]).is_some_and(|r| r.contains("plan"))
        );
        let elsewhere = foreign(&j, &copy, &[copied("p", "main", 1, 2)]);
        assert!(elsewhere.is_some_and(|r| r.contains("repository")));
        assert!(foreign(&j, &copy, &[copied("p", "offsite", 1, 2), passed(2, "j")]).is_some());
        assert!(foreign(&j, &copy, &[committed("p", "offsite", 2)]).is_some());
    }
}
