//! The typed commands the orchestration sends to workers, and what workers
//! answer. Workers live outside this crate (the engine in the `vouch`
//! package, later agents); they are handed in as [`Recipient`]s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use actix::{Message, Recipient};
use vouch_events::{
    BackupSummary, ChangeFigures, Event, JobId, JobKind, JobSpec, KeepPolicy, PlanDefinition,
    PlanId, RepositoryId, RestoreSpec, SnapshotId, VerifyDepth,
};

/// A plan's recent backups, oldest first: each one's figures and what
/// changed then (none for a first backup or one recorded before change
/// figures existed).
pub type BackupHistory = Vec<(BackupSummary, Option<ChangeFigures>)>;

/// What a job does, with everything the worker needs to do it.
#[derive(Clone, Debug)]
pub enum JobCommand {
    /// Back up the plan's source into its repository.
    Backup {
        /// The plan.
        plan: PlanId,
        /// Its definition when the job started.
        definition: Box<PlanDefinition>,
        /// The plan's recent backups, oldest first, for the ransomware
        /// heuristic's baseline; the dispatcher fills it in from the
        /// projections when the job starts.
        history: BackupHistory,
        /// The plan's newest live, committed point the heuristic did not
        /// flag, when the job started: what `anomaly_lock` locks if this
        /// backup is flagged. Filled in by the dispatcher like `history`.
        last_good: Option<SnapshotId>,
    },
    /// Verify one point.
    Verify {
        /// The point.
        point: SnapshotId,
        /// Its plan, if any.
        plan: Option<PlanId>,
        /// Its repository.
        repository: RepositoryId,
        /// How deep to read.
        depth: VerifyDepth,
    },
    /// Restore one point into a sandbox and compare it with its manifest.
    RestoreTest {
        /// The point.
        point: SnapshotId,
        /// Its plan, if any.
        plan: Option<PlanId>,
        /// Its repository.
        repository: RepositoryId,
        /// Restore at most this many files (a sample), if set.
        sample_files: Option<u64>,
        /// Start the restored guest: boot a VM (the plan's
        /// `restore_test.boot`); none: only compare.
        boot: Option<vouch_events::BootCheck>,
    },
    /// Apply a plan's keep rules.
    Retention {
        /// The plan.
        plan: PlanId,
        /// Its repository.
        repository: RepositoryId,
        /// The rules.
        keep: KeepPolicy,
        /// The plan's time zone, which its calendar buckets (days, weeks,
        /// ...) are counted in (none: UTC).
        time_zone: Option<String>,
        /// Points that must not be forgotten whatever the rules say (locked
        /// points, the plan's last recoverable point); the dispatcher fills
        /// it in from the projections when the job starts.
        protect: Vec<SnapshotId>,
    },
    /// Read back whole packs of a repository: some slices of the rolling
    /// read-back window (recorded as `JobKind::ReadBack`; logs before
    /// `job.scheduled` v2 recorded it as a verification with no point).
    ReadBack {
        /// The repository.
        repository: RepositoryId,
        /// The slices to read, ascending.
        slices: Vec<u32>,
        /// How many slices the pack-name space is cut into.
        of: u32,
    },
    /// Restore a point, or a path in it, into a directory of a host (the
    /// server, or an agent, which the backup worker offers it to).
    Restore {
        /// The point.
        point: SnapshotId,
        /// Its plan, if any.
        plan: Option<PlanId>,
        /// Its repository.
        repository: RepositoryId,
        /// What to restore and where.
        spec: RestoreSpec,
    },
    /// Copy a point of a plan into its replica repository (a second copy,
    /// checked afterwards on its own).
    Copy {
        /// The plan.
        plan: PlanId,
        /// The point copied.
        point: SnapshotId,
        /// Its repository.
        source_repository: RepositoryId,
        /// The replica repository the copy goes to.
        repository: RepositoryId,
        /// Lock the copy for this long from when it is made (the plan's
        /// replica policy; it keeps the source's lock in any case).
        lock_for: Option<std::time::Duration>,
    },
    /// Make a repository's manifests agree with the log's decisions: delete
    /// the manifests of points the log forgot (retention only decides),
    /// record `point.vanished` for live points whose manifest is gone and
    /// `point.discovered` for manifests the log does not know. Never runs
    /// at the same time as a backup into the same repository.
    Reconcile {
        /// The repository.
        repository: RepositoryId,
        /// Points the log forgot: their manifests must go.
        expired: Vec<SnapshotId>,
        /// Points the log holds live: their manifests must be there. The
        /// dispatcher fills both lists in from the projections when the job
        /// starts.
        live: Vec<SnapshotId>,
    },
    /// Free a repository's unused data (packs no point needs, mostly
    /// unused packs repacked), keeping what locked points need. Never runs
    /// beside another job in the same repository.
    Prune {
        /// The repository.
        repository: RepositoryId,
    },
}

impl JobCommand {
    /// The job kind recorded in `job.scheduled`.
    pub fn kind(&self) -> JobKind {
        match self {
            JobCommand::Backup { .. } => JobKind::Backup,
            JobCommand::Verify { .. } => JobKind::Verify,
            JobCommand::ReadBack { .. } => JobKind::ReadBack,
            JobCommand::RestoreTest { .. } => JobKind::RestoreTest,
            JobCommand::Retention { .. } => JobKind::Forget,
            JobCommand::Reconcile { .. } => JobKind::Reconcile,
            JobCommand::Prune { .. } => JobKind::Prune,
            JobCommand::Restore { .. } => JobKind::Restore,
            JobCommand::Copy { .. } => JobKind::Copy,
        }
    }

    /// What `job.scheduled` records of it, beyond kind, plan and point:
    /// enough to rebuild it after a restart.
    pub fn spec(&self, why: impl Into<String>) -> JobSpec {
        let mut spec = JobSpec {
            repository: Some(self.repository().clone()),
            why: why.into(),
            ..JobSpec::default()
        };
        match self {
            JobCommand::Verify { depth, .. } => spec.depth = Some(*depth),
            JobCommand::RestoreTest { sample_files, .. } => spec.sample_files = *sample_files,
            JobCommand::ReadBack { slices, of, .. } => {
                spec.slices = slices.clone();
                spec.of = *of;
            }
            JobCommand::Restore { spec: r, .. } => spec.restore = Some(r.clone()),
            JobCommand::Backup { .. }
            | JobCommand::Retention { .. }
            | JobCommand::Reconcile { .. }
            | JobCommand::Prune { .. }
            | JobCommand::Copy { .. } => {}
        }
        spec
    }

    /// The plan it serves.
    pub fn plan(&self) -> Option<&PlanId> {
        match self {
            JobCommand::Backup { plan, .. }
            | JobCommand::Retention { plan, .. }
            | JobCommand::Copy { plan, .. } => Some(plan),
            JobCommand::Verify { plan, .. }
            | JobCommand::RestoreTest { plan, .. }
            | JobCommand::Restore { plan, .. } => plan.as_ref(),
            JobCommand::ReadBack { .. }
            | JobCommand::Reconcile { .. }
            | JobCommand::Prune { .. } => None,
        }
    }

    /// The repository it works in.
    pub fn repository(&self) -> &RepositoryId {
        match self {
            JobCommand::Backup { definition, .. } => &definition.repository,
            JobCommand::Verify { repository, .. }
            | JobCommand::RestoreTest { repository, .. }
            | JobCommand::Retention { repository, .. }
            | JobCommand::ReadBack { repository, .. }
            | JobCommand::Reconcile { repository, .. }
            | JobCommand::Prune { repository }
            | JobCommand::Restore { repository, .. }
            | JobCommand::Copy { repository, .. } => repository,
        }
    }

    /// The agent it runs on, if it runs on one (a backup of an `agent:`
    /// source, a restore onto an agent): such a job waits for its agent and
    /// holds none of the server's own job slots.
    pub fn agent(&self) -> Option<&str> {
        match self {
            JobCommand::Backup { definition, .. } => {
                vouch_events::sources::agent_source(&definition.source).map(|(a, _)| a)
            }
            JobCommand::Restore { spec, .. } => spec.agent.as_deref(),
            _ => None,
        }
    }

    /// The point it works on.
    pub fn point(&self) -> Option<SnapshotId> {
        match self {
            JobCommand::Verify { point, .. }
            | JobCommand::RestoreTest { point, .. }
            | JobCommand::Restore { point, .. }
            | JobCommand::Copy { point, .. } => Some(*point),
            _ => None,
        }
    }
}

/// Set by the dispatcher to ask a running job to stop at its next check.
#[derive(Clone, Debug, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// Asks the job to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether the job was asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// The flag itself, for engines that poll an `AtomicBool`.
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.0.clone()
    }
}

/// Progress of a running job, as counted so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProgressReading {
    /// Files done.
    pub files: u64,
    /// Bytes done.
    pub bytes: u64,
    /// Bytes expected, when known.
    pub bytes_total: Option<u64>,
}

type ProgressSource = Box<dyn Fn() -> ProgressReading + Send + Sync>;

/// Where the dispatcher reads a running job's progress: the worker installs
/// a source (a closure over its engine's counters) when it starts.
#[derive(Clone, Default)]
pub struct ProgressCell(Arc<Mutex<Option<ProgressSource>>>);

impl std::fmt::Debug for ProgressCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressCell").finish_non_exhaustive()
    }
}

impl ProgressCell {
    /// Installs the closure that reads the worker's counters.
    pub fn set_source(&self, source: impl Fn() -> ProgressReading + Send + Sync + 'static) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(Box::new(source));
    }

    /// The current reading (none before the worker installed a source).
    pub fn read(&self) -> Option<ProgressReading> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|f| f())
    }
}

/// What a worker reports when a job ran to its end: the domain events it
/// produced (`backup.committed`, `verification.passed` or `.failed`, ...),
/// appended together with `job.finished`.
#[derive(Clone, Debug, Default)]
pub struct JobOutput {
    /// Events to record.
    pub events: Vec<Event>,
}

/// Why a job could not run to its end.
#[derive(Clone, Debug)]
pub struct JobFailure {
    /// A stable kind (`source_missing`, `repository_locked`, `cancelled`, ...).
    pub kind: String,
    /// For humans: what happened and what to do.
    pub message: String,
    /// Whether trying again may help.
    pub retryable: bool,
    /// Events to record with the failure (e.g. `verification.started`).
    pub events: Vec<Event>,
}

impl JobFailure {
    /// A failure without events.
    pub fn new(kind: impl Into<String>, message: impl Into<String>, retryable: bool) -> Self {
        JobFailure {
            kind: kind.into(),
            message: message.into(),
            retryable,
            events: Vec::new(),
        }
    }
}

/// Run one job. The worker must not block its actor's event loop: the work
/// goes to a thread (`spawn_blocking` or its own pool).
#[derive(Message)]
#[rtype(result = "Result<JobOutput, JobFailure>")]
pub struct RunJob {
    /// The job.
    pub job: JobId,
    /// What to do.
    pub command: JobCommand,
    /// Asks it to stop.
    pub cancel: CancelToken,
    /// Where it reports progress.
    pub progress: ProgressCell,
}

/// The workers, one recipient per kind of job (one actor may serve all).
#[derive(Clone)]
pub struct Workers {
    /// Backups, and copies into a replica.
    pub backup: Recipient<RunJob>,
    /// Verifications.
    pub verify: Recipient<RunJob>,
    /// Restore tests.
    pub restore_test: Recipient<RunJob>,
    /// Retention, and reconciliation of a repository with the log.
    pub retention: Recipient<RunJob>,
}

impl Workers {
    /// The recipient of a kind of command.
    pub fn for_command(&self, command: &JobCommand) -> &Recipient<RunJob> {
        match command {
            // A copy writes into a repository, as a backup does.
            JobCommand::Backup { .. } | JobCommand::Copy { .. } => &self.backup,
            JobCommand::Verify { .. } | JobCommand::ReadBack { .. } => &self.verify,
            JobCommand::RestoreTest { .. } | JobCommand::Restore { .. } => &self.restore_test,
            JobCommand::Retention { .. }
            | JobCommand::Reconcile { .. }
            | JobCommand::Prune { .. } => &self.retention,
        }
    }
}
