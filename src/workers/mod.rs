//! The engine as workers of the service: one actor that answers the
//! orchestration's [`RunJob`] commands by running the backup, verification,
//! restore-test and retention engines on the blocking pool (never on an
//! arbiter's event loop) and turning their reports into events.
//!
//! This module and `cli` are the only parts of the engine package that
//! know about actors and events.

mod agent_jobs;
mod browse;
pub mod hooks;
pub mod log_mirror;
pub mod reconcile;
mod repo_store;
mod repos;
mod security_probe;

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use vouch_actors::service::{
    AgentBoard, JobCommand, JobFailure, JobOutput, ProgressReading, RunJob, Workers,
};
use vouch_actors::{Clock, SystemClock};
use vouch_events::sources::agent_source;
use vouch_events::{
    AnomalyDetected, BackupCommitted, BackupSummary, Event, JobId, KeepPolicy, PacksReadBack,
    PlanId, PointForgotten, PointVanished, RepositoryId, RestoreEvidence, RestoreTestFailed,
    RestoreTestPassed, RestoreTestStarted, SnapshotId as PointId, VerificationFailed,
    VerificationPassed, VerificationStarted, VerifyDepth,
};

pub use browse::EngineBrowser;
pub use repo_store::{agent_repositories, EngineRepoStore, AGENTS_DIR};
pub use repos::{RepoSet, RepoSpec, PRUNE_GRACE};
pub use security_probe::{EngineSecurityProbe, ListenerSpec};

use crate::backup::{backup, BackupOptions};
use crate::error::Error;
use crate::id::SnapshotId;
use crate::progress::Progress;
use crate::proof::{
    snapshots_referencing, verify_point, FaultCause, Part, PointFault, ReadBack, RestoreTestReport,
};
use crate::verify::{read_back_slices, SliceReadBack};

/// Paths named in a restore-test evidence at most (the count is complete).
pub const EVIDENCE_PATHS: usize = 100;

/// The tag that ties a snapshot to its plan.
pub fn plan_tag(plan: &PlanId) -> String {
    format!("vouch-plan:{plan}")
}

/// The `error_kind` of a backup whose source the administrator's policy
/// refuses (not retried: nothing changes until someone changes the plan
/// or the configuration).
pub const SOURCE_REFUSED: &str = "source_refused";

/// A stable kind for an engine error, and whether a retry may help.
pub fn failure_of(e: &Error, cancelled: bool) -> JobFailure {
    let (kind, retryable) = match e {
        Error::Interrupted if cancelled => ("cancelled", false),
        Error::Interrupted => ("interrupted", true),
        Error::SourceMissing(_) => ("source_missing", true),
        Error::Locked(_) => ("repository_locked", true),
        Error::PointLocked(_) => ("point_locked", false),
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
        // A directory holding files does not empty itself: retrying only
        // delays the answer.
        Error::TargetNotEmpty(_) | Error::NotEmpty(_) => ("target_not_empty", false),
        // Jobs never back up a command's output; were one to, it is an
        // I/O failure of its source.
        Error::Io { .. } | Error::SourceCommandFailed(_) => ("io", true),
        // A bug (a panicked engine thread): retrying is safe but likely fails alike.
        Error::Internal(_) => ("internal", false),
    };
    let message = match e {
        _ if cancelled => "cancelled by request".to_owned(),
        // The CLI's hint names --overwrite, which a job has no way to pass.
        Error::TargetNotEmpty(_) => {
            format!("{e} (choose an empty or new directory: a restore job never replaces files)")
        }
        _ => format!("{e} ({})", e.hint()),
    };
    JobFailure::new(kind, message, retryable)
}

/// Runs jobs with the engine.
pub struct EngineWorker {
    repos: Arc<RepoSet>,
    clock: Arc<dyn Clock>,
    agents: Option<Arc<AgentBoard>>,
}

impl EngineWorker {
    /// A worker over the configured repositories, on the system clock.
    pub fn new(repos: Arc<RepoSet>) -> Self {
        Self::with_clock(repos, Arc::new(SystemClock))
    }

    /// A worker reading time (retention's "now") from the service's clock.
    pub fn with_clock(repos: Arc<RepoSet>, clock: Arc<dyn Clock>) -> Self {
        EngineWorker {
            repos,
            clock,
            agents: None,
        }
    }

    /// Offers the backups of `agent:` plans on `board` (without one they
    /// fail: nobody would take them).
    pub fn with_agents(mut self, board: Arc<AgentBoard>) -> Self {
        self.agents = Some(board);
        self
    }

    /// Starts one worker actor and hands it out for every kind of job.
    pub fn start_all(repos: Arc<RepoSet>) -> Workers {
        Self::start_all_with_clock(repos, Arc::new(SystemClock))
    }

    /// [`EngineWorker::start_all`] on the service's clock.
    pub fn start_all_with_clock(repos: Arc<RepoSet>, clock: Arc<dyn Clock>) -> Workers {
        EngineWorker::with_clock(repos, clock).start_all_kinds()
    }

    /// Starts this worker and hands it out for every kind of job.
    pub fn start_all_kinds(self) -> Workers {
        let addr = self.start();
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
        if let JobCommand::Restore { point, spec, .. } = &msg.command {
            if let Some(agent) = spec.agent.clone() {
                let (point, spec) = (*point, spec.clone());
                let board = self.agents.clone();
                return Box::pin(async move {
                    match board {
                        Some(board) => {
                            agent_jobs::restore_on_agent(board, msg, &agent, &point, &spec).await
                        }
                        None => Err(JobFailure::new(
                            "no_agents",
                            "this service takes no agents, so nobody can restore onto one",
                            false,
                        )),
                    }
                });
            }
        }
        if let JobCommand::Backup {
            plan,
            definition,
            history,
            last_good,
        } = &msg.command
        {
            if let Some((agent, path)) = agent_source(&definition.source) {
                if let Err(f) = hooks::supported(definition) {
                    return Box::pin(async move { Err(f) });
                }
                let (plan, agent, path) = (plan.clone(), agent.to_owned(), path.to_owned());
                let files = definition.files.clone();
                let hooks = definition.hooks.clone();
                let board = self.agents.clone();
                let weigh = agent_jobs::AgentWeigh {
                    repos: self.repos.clone(),
                    plan: plan.clone(),
                    history: history.clone(),
                    anomaly_lock: definition.anomaly_lock,
                    last_good: *last_good,
                };
                return Box::pin(async move {
                    match board {
                        Some(board) => {
                            let out = agent_jobs::run_on_agent(
                                board, msg, plan, &agent, &path, files, hooks,
                            )
                            .await?;
                            Ok(weigh.weigh(out).await)
                        }
                        None => Err(JobFailure::new(
                            "no_agents",
                            "this service takes no agents, so nobody can run an agent's backup",
                            false,
                        )),
                    }
                });
            }
        }
        let repos = self.repos.clone();
        let clock = self.clock.clone();
        Box::pin(async move {
            let job = msg.job.clone();
            let ran = tokio::task::spawn_blocking(move || {
                let outcome = run(&repos, &*clock, msg);
                // A job's index, plan and trees are freed when it ends;
                // hand those pages back, so that the service's memory is
                // its live memory between jobs, not its largest job's.
                crate::util::return_free_memory();
                outcome
            });
            match ran.await {
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

/// The plan's opt-in answer to an anomaly (`anomaly_lock`): the newest
/// point before it is locked for `hold`, in the repository first (the
/// storage's retention where it has one), then recorded as
/// `point.locked`. A lock, never an action on the host. A point already
/// locked for longer keeps its lock; a lock that cannot be written is
/// logged and the anomaly is reported all the same.
fn lock_before_anomaly(
    repo: &crate::repo::Repository,
    plan: &PlanId,
    good: PointId,
    hold: std::time::Duration,
) -> Option<Event> {
    let until = crate::util::now_ns().saturating_add(vouch_actors::duration_to_ns(hold));
    let by = format!("plan {plan}: the last point before an anomaly (anomaly_lock)");
    match repo.lock_point(&snapshot_of(&good), until, &by) {
        Ok(outcome) => {
            tracing::warn!(point = %good.short(), until = %crate::util::rfc3339(outcome.until_ns), "anomaly: the last point before it is locked (the plan's anomaly_lock)");
            Some(
                vouch_events::PointLocked {
                    point: good,
                    until_unix_ns: outcome.until_ns,
                }
                .into(),
            )
        }
        Err(crate::error::Error::PointLocked(why)) => {
            tracing::info!(point = %good.short(), %why, "anomaly: the last point before it is already locked for longer");
            None
        }
        Err(e) => {
            tracing::error!(point = %good.short(), error = %e, "anomaly: the last point before it could not be locked");
            None
        }
    }
}

/// Runs one job to its end (on a blocking thread).
fn run(repos: &RepoSet, clock: &dyn Clock, msg: RunJob) -> Result<JobOutput, JobFailure> {
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
        JobCommand::Backup {
            plan,
            definition,
            history,
            last_good,
        } => {
            hooks::supported(&definition)?;
            // Checked again at every start: the policy may have changed
            // since the plan was accepted, or a symlink been planted on
            // the way to its source.
            if definition.source.starts_with("pve:") {
                let weigh = Weigh {
                    history: &history,
                    anomaly_lock: definition.anomaly_lock,
                    last_good,
                };
                return pve_backup(repos, &job, &plan, &definition, &weigh, &cancel, progress);
            }
            let dump = vouch_events::sources::vzdump_source(&definition.source);
            let local = dump.unwrap_or(&definition.source);
            // The further paths, and the exclude files the backup reads,
            // pass the same policy as the source.
            let (also, exclude_files) = if dump.is_some() {
                (&[][..], &[][..])
            } else {
                (
                    &definition.files.also[..],
                    &definition.files.exclude_files[..],
                )
            };
            let read = also.iter().chain(exclude_files).map(String::as_str);
            for path in std::iter::once(local).chain(read) {
                if let Err(refusal) = repos.source_policy().check_local(path) {
                    tracing::warn!(error = %refusal, "backup source refused");
                    return Err(JobFailure::new(
                        SOURCE_REFUSED,
                        format!("{refusal} (the plan's source must be changed, or the configuration's [sources] allow)"),
                        false,
                    ));
                }
            }
            let repo = repos.open(&definition.repository).map_err(fail)?;
            if let Some(dump) = dump {
                return vzdump_backup(
                    repos,
                    &repo,
                    &job,
                    &plan,
                    &definition.repository,
                    dump,
                    &Weigh {
                        history: &history,
                        anomaly_lock: definition.anomaly_lock,
                        last_good,
                    },
                    &cancel,
                    progress,
                )
                .map_err(fail);
            }
            let started = Instant::now();
            let opts = BackupOptions {
                tags: vec![plan_tag(&plan)],
                exclude_paths: repos.exclude_paths(),
                cancel: Some(cancel.flag()),
                ..hooks::file_options(&definition.source, &definition.files)
            };
            let hooked = hooks::Hooked::new(
                repos.hooks_dir(),
                &definition.hooks,
                &job,
                &plan,
                cancel.flag(),
            );
            hooked.pre()?;
            let outcome = match backup(&repo, &opts, progress.clone()) {
                Ok(o) => o,
                Err(e) => return Err(hooked.post_failed(fail(e))),
            };
            let s = &outcome.manifest.summary;
            let bytes_stored = Progress::get(&progress.bytes_stored);
            tracing::info!(snapshot = %outcome.snapshot.short(), files = s.files, "backup committed");
            let summary = BackupSummary {
                files: s.files,
                bytes: s.bytes_read,
                added_bytes: s.bytes_added,
                stored_bytes: bytes_stored,
                duration_ms: started.elapsed().as_millis() as u64,
                total_bytes: Some(s.total_bytes),
                warnings: Some(s.warnings),
            };
            let point = point_of(&outcome.snapshot);
            let (changes, anomaly) = compare_with_parent(&repo, &outcome, &history, &summary);
            let mut events: Vec<Event> = vec![BackupCommitted {
                job: Some(job.clone()),
                plan: Some(plan.clone()),
                repository: definition.repository.clone(),
                snapshot: point,
                snapshot_time_unix_ns: outcome.manifest.time_ns,
                summary,
                changes,
            }
            .into()];
            let weigh = Weigh {
                history: &history,
                anomaly_lock: definition.anomaly_lock,
                last_good,
            };
            push_anomaly(&mut events, &repo, &plan, point, anomaly, &weigh);
            events.extend(hooked.post_ok(&outcome.snapshot.to_hex()));
            Ok(JobOutput { events })
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
            let vanished = report.fault.as_ref().and_then(|f| {
                vanished_event(f, point, &repository, "verification: manifest missing")
            });
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
                events: [started_event, outcome]
                    .into_iter()
                    .chain(vanished)
                    .collect(),
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
            // Only when there is damage: the walk reads every tree.
            let affected = |packs: &[String]| -> Option<Vec<PointId>> {
                if packs.is_empty() {
                    return None;
                }
                match snapshots_referencing(&repo, packs) {
                    Ok(ids) => Some(ids.iter().map(point_of).collect()),
                    Err(e) => {
                        tracing::warn!(repository = %repository, error = %e, "cannot tell which points use the damaged packs; every live point is suspect");
                        None
                    }
                }
            };
            Ok(JobOutput {
                events: read_back_events(&repository, &job, &slices, of, found, &affected),
            })
        }
        JobCommand::RestoreTest {
            point,
            repository,
            sample_files,
            boot,
            ..
        } => {
            let repo = repos.open(&repository).map_err(fail)?;
            let sandbox = repos.sandbox_for(&job);
            let started_event: Event = RestoreTestStarted {
                point,
                job: Some(job.clone()),
            }
            .into();
            // A guest is started from all of its restored files: a boot
            // test restores every disk whole, whatever the sample and the
            // byte budget (the sandbox holds them sparse).
            let (sample_files, max_bytes) = match &boot {
                Some(_) => (None, u64::MAX),
                None => (sample_files, repos.restore_test_max_bytes()),
            };
            let flag = cancel.flag();
            let start_guest = |root: &std::path::Path, tags: &[String]| {
                start_restored_guest(root, tags, boot.as_ref(), &flag)
            };
            let report = crate::proof::restore_test_then(
                &repo,
                &snapshot_of(&point),
                &sandbox,
                sample_files,
                max_bytes,
                progress.clone(),
                Some(&start_guest),
            )
            .map_err(|e| {
                let mut f = fail(e);
                f.events.push(started_event.clone());
                f
            })?;
            if let Some(why) = &report.guest_unavailable {
                let mut f = JobFailure::new(
                    "guest_start_unavailable",
                    format!("the restored data matched, but the guest could not be started to prove it boots: {why}"),
                    false,
                );
                f.events.push(started_event);
                return Err(f);
            }
            Ok(JobOutput {
                events: restore_test_events(point, &repository, job, &sandbox, report),
            })
        }
        JobCommand::Retention {
            plan,
            repository,
            keep,
            time_zone,
            protect,
        } => {
            let offsets = vouch_actors::utc_offsets(time_zone.as_deref()).map_err(|e| {
                JobFailure::new(
                    "time_zone",
                    format!("{e}; the plan's time_zone must be changed (or the system's tz database installed: Debian's tzdata)"),
                    false,
                )
            })?;
            let repo = repos.open(&repository).map_err(fail)?;
            let forgotten = retention(&repo, &plan, &keep, &protect, clock.now_unix_ns(), &offsets)
                .map_err(fail)?;
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
        JobCommand::Prune { repository } => {
            let repo = repos.open(&repository).map_err(fail)?;
            let started = Instant::now();
            let opts = crate::prune::PruneOptions {
                grace: Some(repos.prune_grace()),
                ..crate::prune::PruneOptions::default()
            };
            let r = crate::prune::prune(&repo, &opts).map_err(fail)?;
            tracing::info!(repository = %repository, bytes_freed = r.bytes_freed, packs_deleted = r.packs_deleted, packs_repacked = r.packs_repacked, "pruned");
            Ok(JobOutput {
                events: vec![vouch_events::RepositoryPruned {
                    job,
                    repository,
                    packs_before: r.packs_before,
                    packs_deleted: r.packs_deleted,
                    packs_repacked: r.packs_repacked,
                    packs_written: r.packs_written,
                    leftover_packs: r.leftover_packs,
                    young_packs_kept: r.young_packs_kept,
                    packs_kept_for_locks: r.packs_kept_for_locks,
                    bytes_freed: r.bytes_freed,
                    took_ms: started.elapsed().as_millis() as u64,
                }
                .into()],
            })
        }
        JobCommand::Reconcile {
            repository,
            expired,
            live,
        } => {
            let repo = repos.open(&repository).map_err(fail)?;
            reconcile::reconcile(&repo, &repository, &expired, &live)
                .map_err(fail)?
                .into_outcome()
        }
        JobCommand::Copy {
            plan,
            point,
            source_repository,
            repository,
            lock_for,
        } => copy_job(
            repos,
            CopyJob {
                job,
                plan,
                point,
                source_repository,
                repository,
                lock_for,
            },
            &cancel,
            progress,
        )
        .map_err(fail),
        JobCommand::Restore {
            point,
            repository,
            spec,
            ..
        } => {
            // Onto the server: only below the roots plan sources may use,
            // never over the service's own files (the same rules).
            let destination = match repos.source_policy().check_local(&spec.destination) {
                Ok(d) => d,
                Err(refusal) => {
                    return Err(JobFailure::new(
                        SOURCE_REFUSED,
                        format!("{refusal} (a restore onto the server goes where plan sources may lie: [sources] allow)"),
                        false,
                    ))
                }
            };
            let repo = repos.open(&repository).map_err(fail)?;
            let opts = crate::restore::RestoreOptions {
                target: destination,
                subpath: (spec.path != "/").then(|| spec.path.clone()),
                ..Default::default()
            };
            let summary =
                crate::restore::restore(&repo, &snapshot_of(&point), &opts, progress.clone())
                    .map_err(fail)?;
            Ok(JobOutput {
                events: vec![vouch_events::RestoreCompleted {
                    job,
                    point,
                    path: spec.path.clone(),
                    destination: spec.destination.clone(),
                    agent: None,
                    files: summary.files,
                    bytes: summary.total_bytes,
                }
                .into()],
            })
        }
    }
}

/// Applies `keep` to the plan's snapshots as of `now_unix_ns` (the job's
/// clock), never forgetting `protect` nor a snapshot the repository itself
/// holds a lock for; returns what is to be forgotten and
/// why. It deletes nothing: the decision is recorded first (as
/// `point.forgotten`), and the reconciliation job deletes the manifests
/// ([`reconcile::reconcile`]), so a failed or interrupted deletion can
/// never leave a deleted point live in the log.
pub fn retention(
    repo: &crate::repo::Repository,
    plan: &PlanId,
    keep: &KeepPolicy,
    protect: &[PointId],
    now_unix_ns: i64,
    offsets: &vouch_actors::UtcOffsets,
) -> crate::Result<Vec<(SnapshotId, String)>> {
    if keep.is_empty() {
        return Ok(Vec::new());
    }
    // Locks stored in the repository hold too, whoever wrote them (`vouch
    // lock` from the CLI, a copy): such a point is never decided forgotten.
    // A record that does not read stops the decision (which point it
    // protects is unknown).
    let locks = repo.point_locks()?;
    if let Some((name, why)) = locks.unreadable.first() {
        return Err(crate::Error::RepairNeeded(format!(
            "point lock record {name} does not read ({why}): which point it protects is unknown, so retention forgets none"
        )));
    }
    let tag = plan_tag(plan);
    let candidates: Vec<vouch_events::RetentionCandidate<SnapshotId>> = repo
        .list_snapshots()?
        .into_iter()
        .filter(|(_, m)| m.tags.contains(&tag))
        .map(|(id, m)| vouch_events::RetentionCandidate {
            id,
            time_unix_ns: m.time_ns,
            tags: m.tags,
        })
        .collect();
    Ok(
        vouch_events::apply_retention_in(keep, &candidates, now_unix_ns, |t| offsets.at(t))
            .into_iter()
            .filter(|d| !d.keep && !protect.iter().any(|p| p.0 == d.id.0))
            .filter(|d| locks.in_force(&d.id, now_unix_ns).is_none())
            .map(|d| (d.id, "not kept by the plan's keep rules".to_owned()))
            .collect(),
    )
}

/// `point.vanished` for a fault that is the point's manifest gone from the
/// repository's listing.
fn vanished_event(
    fault: &PointFault,
    point: PointId,
    repository: &RepositoryId,
    reason: &str,
) -> Option<Event> {
    (fault.part == Part::Manifest && fault.cause == FaultCause::Missing).then(|| {
        PointVanished {
            point,
            repository: repository.clone(),
            reason: reason.to_owned(),
        }
        .into()
    })
}

/// Why a point with no files is not proven by restoring it.
pub const EMPTY_POINT_REASON: &str = "the point holds no files, so restoring it proves nothing: \
    its source was empty when it was backed up (an unmounted share or an emptied directory?); \
    check the plan's source, then take a new backup";

/// Starts the guest a restore test restored into `root`, as its point's
/// tags say it is: a VM (`pve:type=qemu`) is booted when the plan asks for
/// it; a container (`pve:type=lxc`) runs `/bin/true` under chroot when its
/// whole tree was restored (always, when the plan asks for a boot).
fn start_restored_guest(
    root: &std::path::Path,
    tags: &[String],
    boot: Option<&vouch_events::BootCheck>,
    cancel: &std::sync::atomic::AtomicBool,
) -> Option<Result<crate::providers::proxmox::boot::GuestStart, String>> {
    use crate::providers::proxmox::boot;
    let kind = tags.iter().find_map(|t| t.strip_prefix("pve:type="))?;
    let started = match (kind, boot) {
        ("qemu", Some(b)) => {
            let spec = boot::BootSpec::new(&b.marker, b.timeout, b.memory_mib);
            boot::boot(root, &spec, Some(cancel))
        }
        ("lxc", _) => {
            let timeout = boot.map_or(std::time::Duration::from_secs(60), |b| b.timeout);
            // SAFETY: geteuid has no preconditions.
            let as_root = unsafe { libc::geteuid() } == 0;
            let ran = if as_root {
                boot::run_in_container(root, timeout)
            } else {
                Err("running a command in a restored container needs chroot, so a service running as root".into())
            };
            match ran {
                Err(why) if boot.is_none() => {
                    // Not asked for: the test stays what it proves.
                    tracing::warn!(%why, "restored container not started");
                    return None;
                }
                other => other,
            }
        }
        _ => return None,
    };
    match &started {
        Ok(g) => tracing::info!(
            check = g.check,
            came_up = g.came_up,
            ms = g.took.as_millis() as u64,
            "restored guest started"
        ),
        Err(why) => tracing::warn!(%why, "the restored guest could not be started"),
    }
    Some(started)
}

/// The events of a restore test that ran to its verdict: started, then
/// passed or failed (a mismatch, the point's data damaged or missing, or
/// nothing to restore), then `point.vanished` if its manifest is gone.
fn restore_test_events(
    point: PointId,
    repository: &RepositoryId,
    job: JobId,
    sandbox: &std::path::Path,
    report: RestoreTestReport,
) -> Vec<Event> {
    let mut restored: Vec<String> = report
        .restored
        .iter()
        .take(EVIDENCE_PATHS)
        .cloned()
        .collect();
    if report.restored_total > EVIDENCE_PATHS as u64 {
        restored.push(format!(
            "... and {} more",
            report.restored_total - EVIDENCE_PATHS as u64
        ));
    }
    let complete = report.complete();
    let evidence = RestoreEvidence {
        restored,
        files: report.files,
        bytes: report.bytes,
        digests_compared: report.digests_compared,
        digests_matched: report.digests_matched,
        duration_ms: report.duration_ms,
        location: format!(
            "{}:{} (sandbox deleted)",
            crate::util::host_name(),
            sandbox.display()
        ),
        // Unknown when the test stopped before the trees were read.
        files_in_point: (report.fault.is_none() || report.files_in_point > 0)
            .then_some(report.files_in_point),
        bytes_in_point: (report.fault.is_none() || report.files_in_point > 0)
            .then_some(report.bytes_in_point),
        complete,
        guest: report.guest.as_ref().map(|g| vouch_events::GuestEvidence {
            check: g.check.to_owned(),
            command: g.command.clone(),
            accelerator: g.accelerator.clone(),
            marker: g.marker.clone(),
            came_up: g.came_up,
            took_ms: g.took.as_millis() as u64,
            console_tail: g.console_tail.clone(),
        }),
    };
    let started: Event = RestoreTestStarted {
        point,
        job: Some(job.clone()),
    }
    .into();
    let failed = |cause: &str, reason: String, evidence| -> Event {
        RestoreTestFailed {
            point,
            job: Some(job.clone()),
            evidence,
            reason,
            cause: cause.into(),
        }
        .into()
    };
    let mut vanished = None;
    let outcome = if let Some(fault) = &report.fault {
        tracing::warn!(point = %point.short(), cause = fault.cause.as_str(), "restore test stopped by the point's data");
        vanished = vanished_event(fault, point, repository, "restore test: manifest missing");
        failed(fault.cause.as_str(), fault.reason(), evidence)
    } else if report.files_in_point == 0 {
        // Restoring nothing proves nothing: recorded as what it is (a pass
        // over 0 files, complete), which the projection never counts as
        // proof; the plan is then at risk with the "source came back empty"
        // reason and the `SourceEmpty` alert (see docs/events.md).
        tracing::warn!(point = %point.short(), "{EMPTY_POINT_REASON}");
        RestoreTestPassed {
            point,
            job: Some(job.clone()),
            evidence,
        }
        .into()
    } else if let Some(g) = report.guest.as_ref().filter(|g| !g.came_up) {
        // The data matched, but the guest does not start from it.
        let cause = if g.check == "boot" {
            "boot_failed"
        } else {
            "start_failed"
        };
        tracing::warn!(point = %point.short(), cause, "restored guest did not come up");
        failed(
            cause,
            g.failure
                .clone()
                .unwrap_or_else(|| "the restored guest did not come up".into()),
            evidence,
        )
    } else if report.mismatches.is_empty() && report.digests_compared == report.digests_matched {
        RestoreTestPassed {
            point,
            job: Some(job.clone()),
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
        failed("mismatch", reason, evidence)
    };
    [started, outcome].into_iter().chain(vanished).collect()
}

/// What a read-back found, as events: one for the slices read back intact
/// (when any), one per damaged slice naming its damage.
fn read_back_events(
    repository: &RepositoryId,
    job: &JobId,
    slices: &[u32],
    of: u32,
    found: SliceReadBack,
    affected: &dyn Fn(&[String]) -> Option<Vec<PointId>>,
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
        let damaged_packs: Vec<String> = damage
            .iter()
            .filter_map(|d| d.pack.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        // Damage that names no pack: which points it touches is unknown.
        let affected_points = if damage.iter().all(|d| d.pack.is_some()) {
            affected(&damaged_packs)
        } else {
            None
        };
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
                damaged_packs,
                damaged,
                affected_points,
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

#[cfg(test)]
pub(crate) mod tests;

/// What a copy job copies, and where.
struct CopyJob {
    job: JobId,
    plan: vouch_events::PlanId,
    point: PointId,
    source_repository: RepositoryId,
    repository: RepositoryId,
    lock_for: Option<std::time::Duration>,
}

/// Copies a point into the plan's replica (resuming a copy a killed run
/// left: packs are not stored twice, and a manifest written before the
/// kill is found by its origin), locks the copy for the replica policy's
/// time, and records `copy.committed` with where it lies and who holds
/// its lock.
fn copy_job(
    repos: &RepoSet,
    c: CopyJob,
    cancel: &vouch_actors::service::CancelToken,
    progress: Arc<Progress>,
) -> Result<JobOutput, Error> {
    if c.source_repository == c.repository {
        return Err(Error::InvalidArgument(format!(
            "plan {}'s replica is {}, the repository its points are in: a second copy must \
             be in another repository (change the plan's replica)",
            c.plan, c.repository
        )));
    }
    let src = repos.open(&c.source_repository)?;
    let dst = repos.open(&c.repository)?;
    let started = Instant::now();
    let watch = crate::copy::CopyWatch {
        cancel: Some(cancel.flag()),
        progress: Some(progress.clone()),
    };
    let source = snapshot_of(&c.point);
    let done = crate::copy::copy_watched(&src, &dst, &[source], &watch, |_| {})?;
    let copied = done
        .into_iter()
        .next()
        .ok_or_else(|| Error::Internal("the copy reported no snapshot".into()))?;
    let copy = SnapshotId::from_hex(&copied.copy)
        .map_err(|e| Error::Internal(format!("the copy's id {:?}: {e}", copied.copy)))?;
    if let Some(lock_for) = c.lock_for {
        let until = crate::util::now_ns()
            .saturating_add(i64::try_from(lock_for.as_nanos()).unwrap_or(i64::MAX));
        let current = dst.point_locks()?.until.get(&copy).copied();
        if current.is_none_or(|t| t < until) {
            let by = format!("vouch service: replica of plan {}", c.plan);
            dst.lock_point(&copy, until, &by)?;
        }
    }
    let locked_until = dst.point_locks()?.in_force(&copy, crate::util::now_ns());
    let locks_enforced_by = match dst.backend().retention_support()? {
        crate::backend::Retained::ByStorage => vouch_events::LockEnforcement::Storage,
        crate::backend::Retained::ByVouch => vouch_events::LockEnforcement::Vouch,
    };
    let manifest = dst.load_snapshot(&copy)?;
    tracing::info!(
        copy = %copy.short(),
        repository = %c.repository,
        stored = copied.bytes_stored,
        fresh = copied.copied,
        "point copied"
    );
    Ok(JobOutput {
        events: vec![vouch_events::CopyCommitted {
            job: Some(c.job),
            plan: Some(c.plan),
            source: c.point,
            repository: c.repository.clone(),
            snapshot: point_of(&copy),
            snapshot_time_unix_ns: manifest.time_ns,
            summary: BackupSummary {
                files: manifest.summary.files,
                bytes: manifest.summary.bytes_read,
                added_bytes: copied.bytes_stored,
                stored_bytes: Progress::get(&progress.bytes_stored),
                duration_ms: started.elapsed().as_millis() as u64,
                total_bytes: Some(manifest.summary.total_bytes),
                warnings: None,
            },
            off_host: repos.is_remote(&c.repository),
            locks_enforced_by,
            locked_until_unix_ns: locked_until,
        }
        .into()],
    })
}

/// A plan's backup of a dump storage (`vzdump:/path`): one snapshot per
/// archive (the newest of each guest in a directory), each recorded as its
/// own `backup.committed` of the plan.
#[allow(clippy::too_many_arguments)]
fn vzdump_backup(
    repos: &RepoSet,
    repo: &crate::repo::Repository,
    job: &JobId,
    plan: &vouch_events::PlanId,
    repository: &RepositoryId,
    dump: &str,
    weigh: &Weigh<'_>,
    cancel: &vouch_actors::service::CancelToken,
    progress: Arc<Progress>,
) -> Result<JobOutput, Error> {
    let opts = crate::providers::proxmox::ingest::IngestOptions {
        tags: vec![plan_tag(plan)],
        image_chunk: 64 * 1024,
        staging_base: guest_staging(repos),
        cancel: Some(cancel.flag()),
        ..Default::default()
    };
    let mut events = Vec::new();
    crate::providers::proxmox::ingest::ingest(
        repo,
        std::path::Path::new(dump),
        &opts,
        progress.clone(),
        |done| events.extend(guest_committed(job, plan, repository, repo, weigh, done)),
    )?;
    Ok(JobOutput { events })
}

/// The ransomware heuristic on a committed backup: what changed since its
/// parent and, if that is an anomaly, the `anomaly.detected` to record
/// (its point still to be set). A comparison that fails costs only the
/// figures (logged): the backup itself is committed and good.
fn compare_with_parent(
    repo: &crate::repo::Repository,
    outcome: &crate::backup::BackupOutcome,
    history: &vouch_actors::service::BackupHistory,
    summary: &BackupSummary,
) -> (Option<vouch_events::ChangeFigures>, Option<AnomalyDetected>) {
    let _span =
        tracing::info_span!("ransomware_heuristic", snapshot = %outcome.snapshot.short()).entered();
    compare_manifest(
        repo,
        &outcome.manifest,
        Some(&outcome.index),
        history,
        summary,
    )
}

/// [`compare_with_parent`] of a snapshot given by its manifest, with the
/// index that holds it if the caller has one (else the repository's).
pub(crate) fn compare_manifest(
    repo: &crate::repo::Repository,
    manifest: &crate::format::Manifest,
    index: Option<&crate::repo::MasterIndex>,
    history: &vouch_actors::service::BackupHistory,
    summary: &BackupSummary,
) -> (Option<vouch_events::ChangeFigures>, Option<AnomalyDetected>) {
    match crate::anomaly::examine(repo, manifest, index, history, summary) {
        Ok(None) => (None, None),
        Ok(Some((profile, verdict))) => {
            let anomaly = verdict.anomalous.then(|| {
                tracing::warn!(
                    signals = ?verdict.signals.iter().map(|s| (&s.kind, s.score_permille)).collect::<Vec<_>>(),
                    "anomaly: this backup looks like files being encrypted (reported; nothing is stopped)"
                );
                AnomalyDetected {
                    point: profile.figures.compared_with,
                    compared_with: Some(profile.figures.compared_with),
                    signals: verdict.signals,
                    paths: verdict.paths,
                }
            });
            (Some(profile.figures), anomaly)
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not compare the backup with its parent; no change figures recorded");
            (None, None)
        }
    }
}

/// What a plan's backup weighs a new point against, and how it answers
/// an anomaly: the plan's recent backups, its `anomaly_lock`, and its
/// last unflagged point when the job started.
pub(crate) struct Weigh<'a> {
    pub(crate) history: &'a vouch_actors::service::BackupHistory,
    pub(crate) anomaly_lock: Option<std::time::Duration>,
    pub(crate) last_good: Option<PointId>,
}

/// Records an anomaly of `point` (when there is one) and, for a plan that
/// opted in, the lock of the last point before it.
pub(crate) fn push_anomaly(
    events: &mut Vec<Event>,
    repo: &crate::repo::Repository,
    plan: &PlanId,
    point: PointId,
    anomaly: Option<AnomalyDetected>,
    weigh: &Weigh<'_>,
) {
    let Some(a) = anomaly else { return };
    events.push(AnomalyDetected { point, ..a }.into());
    if let (Some(hold), Some(good)) = (weigh.anomaly_lock, weigh.last_good) {
        events.extend(lock_before_anomaly(repo, plan, good, hold));
    }
}

/// The `backup.committed` of one guest's snapshot and, for a container
/// (its root file system is a tree of files), the ransomware heuristic's
/// comparison with the guest's previous snapshot. A VM's disk images are
/// not compared: the heuristic reads files, and an image is one opaque
/// file (`docs/security.md`).
fn guest_committed(
    job: &JobId,
    plan: &vouch_events::PlanId,
    repository: &RepositoryId,
    repo: &crate::repo::Repository,
    weigh: &Weigh<'_>,
    done: &crate::providers::proxmox::ingest::Ingested,
) -> Vec<vouch_events::Event> {
    use crate::providers::proxmox::archive::GuestType;
    let s = &done.outcome.manifest.summary;
    let summary = BackupSummary {
        files: s.files,
        bytes: s.bytes_read,
        added_bytes: s.bytes_added,
        stored_bytes: s.bytes_stored,
        duration_ms: s.duration_ms,
        total_bytes: Some(s.total_bytes),
        warnings: Some(s.warnings),
    };
    let point = point_of(&done.outcome.snapshot);
    let (changes, anomaly) = match done.archive.guest {
        GuestType::Lxc => compare_with_parent(repo, &done.outcome, weigh.history, &summary),
        GuestType::Qemu => (None, None),
    };
    let mut events = vec![BackupCommitted {
        job: Some(job.clone()),
        plan: Some(plan.clone()),
        repository: repository.clone(),
        snapshot: point,
        snapshot_time_unix_ns: done.outcome.manifest.time_ns,
        summary,
        changes,
    }
    .into()];
    push_anomaly(&mut events, repo, plan, point, anomaly, weigh);
    events
}

/// Where a service's guest backups stage their archives: `staging/`
/// beside the restore tests' sandbox, in the data directory (or
/// `$VOUCH_STAGING_DIR`).
fn guest_staging(repos: &RepoSet) -> std::path::PathBuf {
    crate::providers::proxmox::staging::staging_base(
        repos
            .sandbox_root()
            .parent()
            .map(std::path::Path::to_path_buf),
    )
}

/// A plan's backup of a Proxmox VE guest through its cluster's API
/// (`pve:CLUSTER/qemu/VMID`): the guest's node is asked for a vzdump to the
/// dump storage, the task followed to its end, the archive ingested from
/// the storage's mount on this server, and removed if the plan says so.
fn pve_backup(
    repos: &RepoSet,
    job: &JobId,
    plan: &vouch_events::PlanId,
    definition: &vouch_events::PlanDefinition,
    weigh: &Weigh<'_>,
    cancel: &vouch_actors::service::CancelToken,
    progress: Arc<Progress>,
) -> Result<JobOutput, JobFailure> {
    use crate::providers::proxmox::archive::GuestType;
    let guest = repos
        .source_policy()
        .check_guest(&definition.source)
        .map_err(|refusal| {
            JobFailure::new(
                SOURCE_REFUSED,
                format!("{refusal} (the plan's source must be changed, or the configuration)"),
                false,
            )
        })?;
    let Some(cluster) = repos.cluster(guest.cluster) else {
        return Err(JobFailure::new(
            SOURCE_REFUSED,
            format!(
                "the plan's source names the Proxmox VE cluster {:?}, which the configuration does not have; an administrator adds it as a [[proxmox]] section",
                guest.cluster
            ),
            false,
        ));
    };
    let kind = if guest.kind == "lxc" {
        GuestType::Lxc
    } else {
        GuestType::Qemu
    };
    let pve = |e: crate::providers::proxmox::api::PveError| {
        tracing::warn!(error = %e, "Proxmox VE backup failed");
        JobFailure::new(e.kind(), e.to_string(), e.retryable())
    };
    let policy = definition
        .proxmox
        .clone()
        .unwrap_or(vouch_events::ProxmoxPolicy {
            mode: vouch_events::DumpMode::Snapshot,
            remove_dump: false,
        });
    let repo = repos
        .open(&definition.repository)
        .map_err(|e| failure_of(&e, cancel.is_cancelled()))?;
    let found = cluster.find_guest(kind, guest.vmid).map_err(pve)?;
    let flag = cancel.flag();
    let dump = cluster
        .dump(&found, policy.mode, Some(flag.as_ref()))
        .map_err(pve)?;
    tracing::info!(volid = %dump.volid, node = %dump.node, upid = %dump.upid, exitstatus = %dump.exitstatus, "vzdump archive written");
    let opts = crate::providers::proxmox::ingest::IngestOptions {
        tags: vec![
            plan_tag(plan),
            format!("pve:cluster={}", guest.cluster),
            format!("pve:node={}", dump.node),
        ],
        image_chunk: 64 * 1024,
        staging_base: guest_staging(repos),
        cancel: Some(flag.clone()),
        ..Default::default()
    };
    let done =
        crate::providers::proxmox::ingest::ingest_archive(&repo, &dump.archive, &opts, progress)
            .map_err(|e| failure_of(&e, cancel.is_cancelled()))?;
    // The snapshot is committed in the repository: the dump is no longer
    // the only copy. A removal that fails costs space, never data.
    if policy.remove_dump {
        match cluster.remove_dump(&dump) {
            Ok(()) => tracing::info!(volid = %dump.volid, "vzdump archive removed"),
            Err(e) => {
                tracing::warn!(volid = %dump.volid, error = %e, "the vzdump archive could not be removed; it stays on the dump storage")
            }
        }
    }
    Ok(JobOutput {
        events: guest_committed(job, plan, &definition.repository, &repo, weigh, &done),
    })
}
