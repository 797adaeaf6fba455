//! The engine as workers of the service: one actor that answers the
//! orchestration's [`RunJob`] commands by running the backup, verification,
//! restore-test and retention engines on the blocking pool (never on an
//! arbiter's event loop) and turning their reports into events.
//!
//! This module and `cli` are the only parts of the engine package that
//! know about actors and events.

mod browse;
mod repos;

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use vouch_actors::service::{JobCommand, JobFailure, JobOutput, ProgressReading, RunJob, Workers};
use vouch_events::{
    BackupCommitted, BackupSummary, Event, JobId, KeepPolicy, PacksReadBack, PlanId,
    PointForgotten, RepositoryId, RestoreEvidence, RestoreTestFailed, RestoreTestPassed,
    RestoreTestStarted, SnapshotId as PointId, VerificationFailed, VerificationPassed,
    VerificationStarted, VerifyDepth,
};

pub use browse::EngineBrowser;
pub use repos::{RepoSet, RepoSpec};

use crate::backup::{backup, BackupOptions};
use crate::error::Error;
use crate::id::SnapshotId;
use crate::progress::Progress;
use crate::proof::{restore_test, verify_point, ReadBack};
use crate::verify::{read_back_slices, SliceReadBack};

/// Paths named in a restore-test evidence at most (the count is complete).
pub const EVIDENCE_PATHS: usize = 100;

/// The tag that ties a snapshot to its plan.
pub fn plan_tag(plan: &PlanId) -> String {
    format!("vouch-plan:{plan}")
}

/// A stable kind for an engine error, and whether a retry may help.
pub fn failure_of(e: &Error, cancelled: bool) -> JobFailure {
    let (kind, retryable) = match e {
        Error::Interrupted if cancelled => ("cancelled", false),
        Error::Interrupted => ("interrupted", true),
        Error::SourceMissing(_) => ("source_missing", true),
        Error::Locked(_) => ("repository_locked", true),
        Error::DiskFull(_) => ("disk_full", true),
        Error::WrongPassword | Error::NoPassword(_) => ("wrong_passphrase", false),
        Error::NoRepository(_) => ("no_repository", false),
        Error::UnsupportedFormat { .. } => ("unsupported_format", false),
        Error::CorruptMetadata { .. } => ("corrupt_metadata", false),
        Error::Damaged(_) => ("damaged", false),
        Error::RepairNeeded(_) => ("repair_needed", false),
        Error::SnapshotUnreadable(_) => ("corrupt_metadata", false),
        Error::NotFound(_) => ("not_found", false),
        Error::InvalidArgument(_) => ("invalid", false),
        Error::TargetNotEmpty(_) | Error::NotEmpty(_) => ("target_not_empty", true),
        Error::Io { .. } => ("io", true),
        // A bug (a panicked engine thread): retrying is safe but likely fails alike.
        Error::Internal(_) => ("internal", false),
    };
    let message = if cancelled {
        "cancelled by request".to_owned()
    } else {
        format!("{e} ({})", e.hint())
    };
    JobFailure::new(kind, message, retryable)
}

/// Runs jobs with the engine.
pub struct EngineWorker {
    repos: Arc<RepoSet>,
}

impl EngineWorker {
    /// A worker over the configured repositories.
    pub fn new(repos: Arc<RepoSet>) -> Self {
        EngineWorker { repos }
    }

    /// Starts one worker actor and hands it out for every kind of job.
    pub fn start_all(repos: Arc<RepoSet>) -> Workers {
        let addr = EngineWorker::new(repos).start();
        let r = addr.recipient::<RunJob>();
        Workers {
            backup: r.clone(),
            verify: r.clone(),
            restore_test: r.clone(),
            retention: r,
        }
    }
}

impl Actor for EngineWorker {
    type Context = Context<Self>;
}

impl Handler<RunJob> for EngineWorker {
    type Result = ResponseFuture<Result<JobOutput, JobFailure>>;

    fn handle(&mut self, msg: RunJob, _ctx: &mut Self::Context) -> Self::Result {
        let repos = self.repos.clone();
        Box::pin(async move {
            let job = msg.job.clone();
            match tokio::task::spawn_blocking(move || run(&repos, msg)).await {
                Ok(outcome) => outcome,
                Err(e) => {
                    tracing::error!(job = %job, error = %e, "a worker thread panicked");
                    Err(JobFailure::new(
                        "worker_panicked",
                        format!(
                            "the worker running this job failed unexpectedly ({e}); it is retried"
                        ),
                        true,
                    ))
                }
            }
        })
    }
}

fn point_of(id: &SnapshotId) -> PointId {
    PointId(id.0)
}

fn snapshot_of(id: &PointId) -> SnapshotId {
    SnapshotId(id.0)
}

/// Runs one job to its end (on a blocking thread).
fn run(repos: &RepoSet, msg: RunJob) -> Result<JobOutput, JobFailure> {
    let RunJob {
        job,
        command,
        cancel,
        progress: cell,
    } = msg;
    let span =
        tracing::info_span!("job", job = %job, plan = ?command.plan().map(|p| p.to_string()));
    let _enter = span.enter();
    let progress = Arc::new(Progress::default());
    {
        let p = progress.clone();
        cell.set_source(move || ProgressReading {
            files: Progress::get(&p.files_done),
            bytes: Progress::get(&p.bytes_done),
            bytes_total: match Progress::get(&p.bytes_total) {
                0 => None,
                n => Some(n),
            },
        });
    }
    let cancelled = || cancel.is_cancelled();
    let fail = |e: Error| failure_of(&e, cancel.is_cancelled());
    match command {
        JobCommand::Backup { plan, definition } => {
            let repo = repos.open(&definition.repository).map_err(fail)?;
            let started = Instant::now();
            let opts = BackupOptions {
                paths: vec![definition.source.clone().into()],
                tags: vec![plan_tag(&plan)],
                exclude_paths: repos.exclude_paths(),
                cancel: Some(cancel.flag()),
                ..Default::default()
            };
            let outcome = backup(&repo, &opts, progress.clone()).map_err(fail)?;
            let s = &outcome.manifest.summary;
            let bytes_stored = Progress::get(&progress.bytes_stored);
            tracing::info!(snapshot = %outcome.snapshot.short(), files = s.files, "backup committed");
            Ok(JobOutput {
                events: vec![BackupCommitted {
                    job: Some(job),
                    plan: Some(plan),
                    repository: definition.repository.clone(),
                    snapshot: point_of(&outcome.snapshot),
                    snapshot_time_unix_ns: outcome.manifest.time_ns,
                    summary: BackupSummary {
                        files: s.files,
                        bytes: s.bytes_read,
                        added_bytes: s.bytes_added,
                        stored_bytes: bytes_stored,
                        duration_ms: started.elapsed().as_millis() as u64,
                    },
                }
                .into()],
            })
        }
        JobCommand::Verify {
            point,
            repository,
            depth,
            ..
        } => {
            let repo = repos.open(&repository).map_err(fail)?;
            let read_back = match depth {
                VerifyDepth::Structure => ReadBack::Added,
                VerifyDepth::ReadSample(p) => ReadBack::AddedAndSample(p.clamp(1, 100)),
                VerifyDepth::ReadAll => ReadBack::All,
            };
            let started_event: Event = VerificationStarted {
                point,
                job: Some(job.clone()),
                depth,
            }
            .into();
            let report = verify_point(
                &repo,
                &snapshot_of(&point),
                read_back,
                &progress,
                &cancelled,
            )
            .map_err(|e| {
                let mut f = fail(e);
                f.events.push(started_event.clone());
                f
            })?;
            let outcome: Event = if report.damaged.is_empty() {
                VerificationPassed {
                    point,
                    job: Some(job),
                    depth,
                    bytes_read: report.bytes_read,
                    blobs_checked: report.blobs_checked,
                }
                .into()
            } else {
                tracing::warn!(point = %point.short(), damage = report.damaged.len(), "verification found damage");
                VerificationFailed {
                    point,
                    job: Some(job),
                    depth,
                    bytes_read: report.bytes_read,
                    damaged: report.damaged.into_iter().take(EVIDENCE_PATHS).collect(),
                }
                .into()
            };
            Ok(JobOutput {
                events: vec![started_event, outcome],
            })
        }
        JobCommand::ReadBack {
            repository,
            slices,
            of,
        } => {
            let repo = repos.open(&repository).map_err(fail)?;
            let found =
                read_back_slices(&repo, &slices, of, 0, &cancelled, &progress).map_err(fail)?;
            Ok(JobOutput {
                events: read_back_events(&repository, &job, &slices, of, found),
            })
        }
        JobCommand::RestoreTest {
            point,
            repository,
            sample_files,
            ..
        } => {
            let repo = repos.open(&repository).map_err(fail)?;
            let sandbox = repos.sandbox_for(&job);
            let started_event: Event = RestoreTestStarted {
                point,
                job: Some(job.clone()),
            }
            .into();
            let report = restore_test(
                &repo,
                &snapshot_of(&point),
                &sandbox,
                sample_files,
                repos.restore_test_max_bytes(),
                progress.clone(),
            )
            .map_err(|e| {
                let mut f = fail(e);
                f.events.push(started_event.clone());
                f
            })?;
            let mut restored: Vec<String> = report
                .restored
                .iter()
                .take(EVIDENCE_PATHS)
                .cloned()
                .collect();
            if report.restored.len() > EVIDENCE_PATHS {
                restored.push(format!(
                    "... and {} more",
                    report.restored.len() - EVIDENCE_PATHS
                ));
            }
            let location = if report.sampled {
                format!(
                    "{} (sample of {} of {} files; sandbox deleted)",
                    sandbox.display(),
                    report.files,
                    report.files_in_point
                )
            } else {
                format!("{} (every file; sandbox deleted)", sandbox.display())
            };
            let evidence = RestoreEvidence {
                restored,
                files: report.files,
                bytes: report.bytes,
                digests_compared: report.digests_compared,
                digests_matched: report.digests_matched,
                duration_ms: report.duration_ms,
                location,
                files_in_point: Some(report.files_in_point),
                bytes_in_point: None,
                complete: !report.sampled,
            };
            let outcome: Event = if report.mismatches.is_empty()
                && report.digests_compared == report.digests_matched
            {
                RestoreTestPassed {
                    point,
                    job: Some(job),
                    evidence,
                }
                .into()
            } else {
                let reason = report
                    .mismatches
                    .iter()
                    .take(10)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ");
                RestoreTestFailed {
                    point,
                    job: Some(job),
                    evidence,
                    reason,
                    cause: "mismatch".into(),
                }
                .into()
            };
            Ok(JobOutput {
                events: vec![started_event, outcome],
            })
        }
        JobCommand::Retention {
            plan,
            repository,
            keep,
            protect,
        } => {
            let repo = repos.open(&repository).map_err(fail)?;
            let forgotten = retention(&repo, &plan, &keep, &protect).map_err(fail)?;
            Ok(JobOutput {
                events: forgotten
                    .into_iter()
                    .map(|(id, rule)| {
                        PointForgotten {
                            point: point_of(&id),
                            rule,
                        }
                        .into()
                    })
                    .collect(),
            })
        }
    }
}

/// Applies `keep` to the plan's snapshots, never forgetting `protect`;
/// returns what was forgotten and why.
fn retention(
    repo: &crate::repo::Repository,
    plan: &PlanId,
    keep: &KeepPolicy,
    protect: &[PointId],
) -> crate::Result<Vec<(SnapshotId, String)>> {
    if keep.is_empty() {
        return Ok(Vec::new());
    }
    let _guard = repo.lock(false, "retention")?;
    let tag = plan_tag(plan);
    let snaps: Vec<_> = repo
        .list_snapshots()?
        .into_iter()
        .filter(|(_, m)| m.tags.contains(&tag))
        .collect();
    let candidates: Vec<vouch_events::RetentionCandidate<SnapshotId>> = snaps
        .iter()
        .map(|(id, m)| vouch_events::RetentionCandidate {
            id: *id,
            time_unix_ns: m.time_ns,
            tags: m.tags.clone(),
        })
        .collect();
    let now = crate::util::now_ns();
    let mut out = Vec::new();
    for d in vouch_events::apply_retention(keep, &candidates, now) {
        if d.keep || protect.iter().any(|p| p.0 == d.id.0) {
            continue;
        }
        repo.delete_snapshot(&d.id)?;
        out.push((d.id, "not kept by the plan's keep rules".to_owned()));
    }
    if !out.is_empty() {
        repo.backend()
            .sync_deletes(crate::backend::FileKind::Snapshot)?;
    }
    Ok(out)
}

/// What a read-back found, as events: one for the slices read back intact
/// (when any), one per damaged slice naming its damage.
fn read_back_events(
    repository: &RepositoryId,
    job: &JobId,
    slices: &[u32],
    of: u32,
    found: SliceReadBack,
) -> Vec<Event> {
    let intact: Vec<u32> = slices
        .iter()
        .copied()
        .filter(|k| !found.damaged.contains_key(k))
        .collect();
    let mut events = Vec::new();
    if !intact.is_empty() {
        events.push(
            PacksReadBack {
                repository: repository.clone(),
                job: Some(job.clone()),
                slices: intact,
                of,
                packs: found.packs,
                bytes_read: found.bytes_read,
                damaged: Vec::new(),
                damaged_packs: Vec::new(),
                affected_points: Some(Vec::new()),
            }
            .into(),
        );
    }
    for (k, damage) in found.damaged {
        tracing::warn!(repository = %repository, slice = k, damage = damage.len(), "read-back found damage");
        let damaged = damage
            .iter()
            .take(EVIDENCE_PATHS)
            .map(|d| match (&d.pack, &d.blob) {
                (Some(p), Some(b)) => format!("pack {p}: blob {b}: {}", d.problem),
                (Some(p), None) => format!("pack {p}: {}", d.problem),
                (None, Some(b)) => format!("blob {b}: {}", d.problem),
                (None, None) => d.problem.clone(),
            })
            .collect();
        events.push(
            PacksReadBack {
                repository: repository.clone(),
                job: Some(job.clone()),
                slices: vec![k],
                of,
                // Totals ride on the intact event; a damaged-only run
                // carries them here once.
                packs: if events.is_empty() { found.packs } else { 0 },
                bytes_read: if events.is_empty() {
                    found.bytes_read
                } else {
                    0
                },
                damaged_packs: damage
                    .iter()
                    .filter_map(|d| d.pack.as_ref().map(|p| p.to_string()))
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect(),
                damaged,
                affected_points: None,
            }
            .into(),
        );
    }
    events
}

/// The id a job's sandbox is named by (safe as a file name).
pub fn sandbox_name(job: &JobId) -> String {
    job.as_str()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
