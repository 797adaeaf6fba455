//! How simulated work ends and which facts the simulator injects, shared
//! by both tiers (`simulation.rs`, the whole service; `model_simulation.rs`,
//! the pure decision code in memory), so both see the same kinds of
//! outcomes drawn the same way from a seed.

use vouch_actors::service::{JobCommand, JobFailure, JobOutput};
use vouch_events::{
    BackupCommitted, BackupSummary, Event, JobFailed, JobId, JobKind, JobScheduled, JobStarted,
    PacksReadBack, PlanChanged, PlanDefinition, PlanId, PointForgotten, PointVanished, Projections,
    RestoreEvidence, RestoreTestFailed, RestoreTestPassed, RestoreTestStarted, SnapshotId,
    UnknownEvent, VerificationFailed, VerificationPassed, VerificationStarted, VerifyDepth,
};

use super::rng::Rng;

/// How the simulator ends a job.
pub enum Ending {
    /// The worker answers this.
    Answer(Result<JobOutput, JobFailure>),
    /// The job's future panics: its answer never comes (the dispatcher sees
    /// the worker's reply dropped).
    Panic,
}

/// How a job ends, drawn from the seed.
pub fn ending(
    rng: &mut Rng,
    proj: &Projections,
    job: &JobId,
    command: &JobCommand,
    cancelled: bool,
    now: i64,
) -> Ending {
    let job = job.clone();
    let fail = |kind: &str, retryable: bool, events: Vec<Event>| {
        Ending::Answer(Err(JobFailure {
            kind: kind.into(),
            message: format!("simulated {kind}"),
            retryable,
            events,
        }))
    };
    let ok = |events: Vec<Event>| Ending::Answer(Ok(JobOutput { events }));
    if cancelled {
        return fail("cancelled", false, started_events(&job, command));
    }
    match command {
        JobCommand::Backup {
            plan, definition, ..
        } => match rng.weighted(&[14, 1, 2, 1, 1]) {
            0 | 1 => {
                let empty = rng.chance(1, 12);
                let files = if empty { 0 } else { 1 + rng.below(5000) as u64 };
                ok(vec![BackupCommitted {
                    job: Some(job),
                    plan: Some(plan.clone()),
                    repository: definition.repository.clone(),
                    snapshot: SnapshotId(rng.bytes32()),
                    snapshot_time_unix_ns: now - 1_000_000_000,
                    summary: BackupSummary {
                        files,
                        bytes: files * 4096,
                        added_bytes: files * 100,
                        stored_bytes: files * 50,
                        duration_ms: 1000,
                        total_bytes: None,
                        warnings: None,
                    },
                    changes: None,
                }
                .into()])
            }
            2 => fail("source_missing", true, Vec::new()),
            3 => fail("repository_corrupt", false, Vec::new()),
            _ => Ending::Panic,
        },
        JobCommand::Verify { point, depth, .. } => {
            let started: Event = VerificationStarted {
                point: *point,
                job: Some(job.clone()),
                depth: *depth,
            }
            .into();
            match rng.weighted(&[12, 2, 2, 2, 1]) {
                0 => ok(vec![
                    started,
                    VerificationPassed {
                        point: *point,
                        job: Some(job),
                        depth: *depth,
                        bytes_read: 4096,
                        blobs_checked: 10,
                    }
                    .into(),
                ]),
                1 => ok(vec![
                    started,
                    VerificationFailed {
                        point: *point,
                        job: Some(job),
                        depth: *depth,
                        bytes_read: 4096,
                        damaged: vec!["pack 3f2a: blob fails authentication".into()],
                    }
                    .into(),
                ]),
                // A check that stops without a verdict (what the engine worker did on
                // damaged data before the C1 fix): the point must be capped.
                2 => fail("damaged", false, vec![started]),
                3 => fail("io", true, vec![started]),
                _ => Ending::Panic,
            }
        }
        JobCommand::RestoreTest {
            point,
            sample_files,
            ..
        } => {
            let files_in_point = proj
                .points
                .points
                .get(point)
                .and_then(|p| p.summary.as_ref())
                .map_or(100, |s| s.files);
            let files = sample_files.map_or(files_in_point, |n| n.min(files_in_point));
            let evidence = RestoreEvidence {
                restored: vec!["etc/hosts".into()],
                files,
                bytes: files * 4096,
                digests_compared: files,
                digests_matched: files,
                duration_ms: 1000,
                location: "sandbox (simulated)".into(),
                files_in_point: Some(files_in_point),
                bytes_in_point: Some(files_in_point * 4096),
                complete: files == files_in_point,
                guest: None,
            };
            let started: Event = RestoreTestStarted {
                point: *point,
                job: Some(job.clone()),
            }
            .into();
            match rng.weighted(&[12, 2, 2, 2, 1]) {
                0 => ok(vec![
                    started,
                    RestoreTestPassed {
                        point: *point,
                        job: Some(job),
                        evidence,
                    }
                    .into(),
                ]),
                1 => ok(vec![
                    started,
                    RestoreTestFailed {
                        point: *point,
                        job: Some(job),
                        evidence,
                        reason: "a pack is damaged".into(),
                        cause: ["damaged", "mismatch", "missing"][rng.below(3)].into(),
                    }
                    .into(),
                ]),
                2 => fail("damaged", false, vec![started]),
                3 => fail("io", true, vec![started]),
                _ => Ending::Panic,
            }
        }
        JobCommand::Retention { plan, protect, .. } => {
            if rng.chance(1, 10) {
                return fail("repository_locked", true, Vec::new());
            }
            let mut live: Vec<(i64, SnapshotId)> = proj
                .points
                .of_plan(plan)
                .filter(|p| p.expired.is_none() && !protect.contains(&p.id))
                .map(|p| (p.snapshot_time_unix_ns, p.id))
                .collect();
            live.sort();
            let keep = 2;
            let forget = live.len().saturating_sub(keep);
            let events = live
                .into_iter()
                .take(forget)
                .filter(|_| rng.chance(1, 2))
                .map(|(_, id)| {
                    PointForgotten {
                        point: id,
                        rule: "keep-last 2".into(),
                    }
                    .into()
                })
                .collect();
            ok(events)
        }
        // The simulation never asks for restores onto a host, and its plans
        // name no replica (copies are tested in `tests/replica.rs`).
        JobCommand::Restore { .. } | JobCommand::Copy { .. } => fail("io", true, Vec::new()),
        JobCommand::Prune { repository } => {
            if rng.chance(1, 10) {
                return fail("io", true, Vec::new());
            }
            ok(vec![vouch_events::RepositoryPruned {
                job,
                repository: repository.clone(),
                packs_before: 10,
                packs_deleted: rng.below(5) as u64,
                packs_repacked: 0,
                packs_written: 0,
                leftover_packs: 0,
                young_packs_kept: 0,
                packs_kept_for_locks: 0,
                bytes_freed: rng.below(1 << 20) as u64,
                took_ms: 10,
            }
            .into()])
        }
        JobCommand::Reconcile { .. } => {
            // Manifests are the simulator's to lose (`point.vanished`
            // steps); a reconcile finds nothing new, or fails on I/O.
            if rng.chance(1, 10) {
                return fail("io", true, Vec::new());
            }
            ok(Vec::new())
        }
        JobCommand::ReadBack {
            repository,
            slices,
            of,
        } => {
            if rng.chance(1, 10) {
                return fail("io", true, Vec::new());
            }
            let damage = rng.chance(1, 5);
            let points: Vec<SnapshotId> = proj
                .points
                .points
                .values()
                .filter(|p| &p.repository == repository && p.expired.is_none())
                .map(|p| p.id)
                .collect();
            let (damaged, damaged_packs, affected) = if damage {
                let pack = hex(&rng.bytes32());
                let affected = if rng.chance(1, 4) {
                    None
                } else {
                    Some(points.into_iter().filter(|_| rng.chance(1, 2)).collect())
                };
                (
                    vec![format!("pack {pack}: fails authentication")],
                    vec![pack],
                    affected,
                )
            } else {
                (Vec::new(), Vec::new(), Some(Vec::new()))
            };
            ok(vec![PacksReadBack {
                repository: repository.clone(),
                job: Some(job),
                slices: slices.clone(),
                of: *of,
                packs: 5,
                bytes_read: 5 << 20,
                damaged,
                damaged_packs,
                affected_points: affected,
            }
            .into()])
        }
    }
}

pub fn started_events(job: &JobId, command: &JobCommand) -> Vec<Event> {
    match command {
        JobCommand::Verify { point, depth, .. } => vec![VerificationStarted {
            point: *point,
            job: Some(job.clone()),
            depth: *depth,
        }
        .into()],
        JobCommand::RestoreTest { point, .. } => vec![RestoreTestStarted {
            point: *point,
            job: Some(job.clone()),
        }
        .into()],
        _ => Vec::new(),
    }
}

/// An event a newer build wrote: of a family this build cannot read.
pub fn unknown_event(rng: &mut Rng, plans: &[PlanId], p: &Projections) -> Event {
    let backups: Vec<&vouch_events::Job> = p
        .jobs
        .jobs
        .values()
        .filter(|j| j.kind == JobKind::Backup)
        .collect();
    let live: Vec<SnapshotId> = p
        .points
        .points
        .values()
        .filter(|x| x.expired.is_none())
        .map(|x| x.id)
        .collect();
    match rng.below(3) {
        0 if !backups.is_empty() => {
            let job = backups[rng.below(backups.len())].id.to_string();
            unknown("job.failed", msgpack_str_array(&job))
        }
        1 if !live.is_empty() => unknown(
            "verification.failed",
            msgpack_point_array(&live[rng.below(live.len())]),
        ),
        _ => {
            let plan = plans[rng.below(plans.len())].to_string();
            unknown("plan.changed", msgpack_str_array(&plan))
        }
    }
}

/// A negative fact about something `p` knows (for monotonicity).
pub fn negative_fact(
    rng: &mut Rng,
    injected: &mut u64,
    plans_ids: &[PlanId],
    p: &Projections,
    now: i64,
) -> Option<(String, Vec<Event>)> {
    let live: Vec<&vouch_events::Point> = p
        .points
        .points
        .values()
        .filter(|x| x.expired.is_none())
        .collect();
    let plans: Vec<&vouch_events::Plan> = p
        .plans
        .plans
        .values()
        .filter(|x| x.removed.is_none())
        .collect();
    *injected += 1;
    let kind = rng.below(8);
    if kind == 7 {
        let plan = *rng.pick(&plans)?;
        let definition = PlanDefinition {
            source: format!("{}-moved", plan.definition.source),
            ..plan.definition.clone()
        };
        return Some((
            "plan.changed (source)".into(),
            vec![PlanChanged {
                plan: plan.id.clone(),
                definition,
            }
            .into()],
        ));
    }
    if kind == 6 {
        return Some((
            "an unknown event of the job family".into(),
            vec![unknown_event(rng, plans_ids, p)],
        ));
    }
    let pt = *rng.pick(&live)?;
    let point = pt.id;
    let job = JobId::new(format!("injected-{}", *injected));
    let events: Vec<Event> = match kind {
        0 => vec![VerificationFailed {
            point,
            job: None,
            depth: VerifyDepth::ReadAll,
            bytes_read: 0,
            damaged: vec!["injected".into()],
        }
        .into()],
        1 => vec![RestoreTestFailed {
            point,
            job: None,
            evidence: RestoreEvidence::default(),
            reason: "injected".into(),
            cause: "damaged".into(),
        }
        .into()],
        2 => vec![
            JobScheduled {
                job: job.clone(),
                kind: JobKind::Verify,
                plan: pt.plan.clone(),
                point: Some(point),
                due_unix_ns: now,
                attempt: 1,
                spec: Default::default(),
            }
            .into(),
            JobStarted {
                job: job.clone(),
                agent: None,
            }
            .into(),
            VerificationStarted {
                point,
                job: Some(job.clone()),
                depth: VerifyDepth::Structure,
            }
            .into(),
            JobFailed {
                job,
                error_kind: "damaged".into(),
                message: "injected".into(),
                retryable: false,
            }
            .into(),
        ],
        3 => vec![PacksReadBack {
            repository: pt.repository.clone(),
            job: None,
            slices: vec![0],
            of: 4,
            packs: 1,
            bytes_read: 0,
            damaged: vec!["pack 00: injected".into()],
            damaged_packs: vec!["00".repeat(32)],
            affected_points: if rng.chance(1, 2) {
                Some(vec![point])
            } else {
                None
            },
        }
        .into()],
        4 => vec![PointVanished {
            point,
            repository: pt.repository.clone(),
            reason: "injected".into(),
        }
        .into()],
        _ => vec![unknown("restore_test.failed", msgpack_point_array(&point))],
    };
    let what = events
        .iter()
        .map(|e| e.event_type())
        .collect::<Vec<_>>()
        .join("+");
    Some((format!("{what} about point {}", point.short()), events))
}

pub fn unknown(event_type: &str, payload: Vec<u8>) -> Event {
    Event::Unknown(UnknownEvent {
        event_type: event_type.into(),
        schema_version: 99,
        payload,
    })
}

pub fn msgpack_str_array(s: &str) -> Vec<u8> {
    let mut out = vec![0x92];
    let b = s.as_bytes();
    if b.len() < 32 {
        out.push(0xa0 | b.len() as u8);
    } else {
        out.push(0xd9);
        out.push(b.len().min(255) as u8);
    }
    out.extend_from_slice(&b[..b.len().min(255)]);
    out.extend_from_slice(&[0xa1, b'x']);
    out
}

pub fn msgpack_point_array(id: &SnapshotId) -> Vec<u8> {
    let mut out = vec![0x92, 0xc4, 0x20];
    out.extend_from_slice(&id.0);
    out.extend_from_slice(&[0xa1, b'x']);
    out
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
