//! What the API renders (the DTOs of `docs/api.md`) and how projections
//! become them. Times are RFC 3339 UTC, durations humantime strings.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use utoipa::ToSchema;
use vouch_actors::service::kind_name;
use vouch_events::{
    Alert, Envelope, Event, Job, JobKind, JobState, KeepPolicy, Plan, PointState, Projections,
    Protection, Severity, VerifyDepth,
};

/// `unix_ns` as an RFC 3339 UTC string.
pub(crate) fn rfc3339(unix_ns: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ns))
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned())
}

/// Now (wall clock) as RFC 3339; for token creation times.
pub(crate) fn rfc3339_now() -> String {
    OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_owned())
}

/// Parses an RFC 3339 time into Unix nanoseconds.
pub(crate) fn parse_rfc3339(s: &str) -> Option<i64> {
    let t = OffsetDateTime::parse(s, &Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos()).ok()
}

/// A duration as humantime (`1day 2h`).
pub(crate) fn human(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// The API label of a verification depth.
pub(crate) fn depth_label(d: VerifyDepth) -> String {
    match d {
        VerifyDepth::Structure => "structure".into(),
        VerifyDepth::ReadAll => "read-all".into(),
        VerifyDepth::ReadSample(n) => format!("read-sample:{n}"),
    }
}

/// The API name of an alert severity.
pub(crate) fn severity(s: Severity) -> &'static str {
    match s {
        Severity::Info => "info",
        Severity::Warning => "warning",
        Severity::Critical => "critical",
    }
}

/// Every point state, in the order of the docs.
pub(crate) const POINT_STATES: [PointState; 8] = [
    PointState::Unknown,
    PointState::Unverified,
    PointState::Verified,
    PointState::Recoverable,
    PointState::Corrupt,
    PointState::Unrecoverable,
    PointState::Expired,
    PointState::Vanished,
];

/// Every protection status.
pub(crate) const PROTECTIONS: [Protection; 4] = [
    Protection::Protected,
    Protection::AtRisk,
    Protection::Unprotected,
    Protection::Unknown,
];

/// Keep rules. A point is kept if any rule keeps it; no rule keeps all.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RetentionView {
    /// Keep the N newest points.
    pub last: Option<u32>,
    /// Keep the newest point of each of the last N hours that have one.
    pub hourly: Option<u32>,
    /// ... of each of the last N days that have one.
    pub daily: Option<u32>,
    /// ... of each of the last N ISO weeks that have one.
    pub weekly: Option<u32>,
    /// ... of each of the last N months that have one.
    pub monthly: Option<u32>,
    /// ... of each of the last N years that have one.
    pub yearly: Option<u32>,
    /// Keep every point within this duration (humantime) of the newest.
    pub within: Option<String>,
    /// Keep every point carrying one of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

impl RetentionView {
    pub(crate) fn of(k: &KeepPolicy) -> Self {
        RetentionView {
            last: k.last,
            hourly: k.hourly,
            daily: k.daily,
            weekly: k.weekly,
            monthly: k.monthly,
            yearly: k.yearly,
            within: k.within.map(human),
            tags: k.tags.clone(),
        }
    }
}

/// When points are verified.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct VerificationView {
    /// Verify each point right after its backup.
    pub after_backup: bool,
    /// Re-verify this often (humantime; null: never).
    pub every: Option<String>,
    /// `structure`, `read-all` or `read-sample:N` (N in 1..=100 percent).
    pub depth: String,
}

/// When points are restore-tested.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RestoreTestView {
    /// Restore-test this often (humantime; null: never).
    pub every: Option<String>,
    /// Evidence older than this no longer counts as protection.
    pub max_evidence_age: String,
    /// Restore at most this many files (null: the whole tree).
    pub sample_files: Option<u64>,
    /// The proof policy: a complete restore test at least this often
    /// (humantime; null: sampled tests suffice).
    pub full_every: Option<String>,
    /// Boot a VM point's restored disk (null: no boot).
    pub boot: Option<BootView>,
}

/// A restore test that boots the restored VM.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BootView {
    /// The text the serial console must show.
    pub marker: String,
    /// How long the guest gets (humantime).
    pub timeout: String,
    /// Its memory in MiB.
    pub memory_mib: u32,
}

/// How a plan's Proxmox VE guest is dumped.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProxmoxView {
    /// vzdump's mode: `snapshot`, `suspend` or `stop`.
    pub mode: String,
    /// Whether the archive is removed from the dump storage once backed up.
    pub remove_dump: bool,
}

/// A plan's protection and why.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProtectionView {
    /// `protected`, `at-risk`, `unprotected` or `unknown`.
    pub status: String,
    /// Why, for humans.
    pub reason: String,
}

/// The latest backup job of a plan.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LastRun {
    /// The job.
    pub job: String,
    /// Its state.
    pub state: String,
    /// When its state last changed.
    pub at: String,
}

/// A backup plan.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PlanView {
    /// Its id (`[a-z0-9][a-z0-9._-]{0,62}`).
    pub id: String,
    /// What is backed up: an absolute path, or `agent:<name>:<path>`.
    pub source: String,
    /// 5-field cron expression, in `time_zone` (UTC when null).
    pub schedule: String,
    /// Recovery point objective (humantime).
    pub rpo: String,
    /// Target repository.
    pub repository: String,
    /// Paused: the scheduler starts no backup (run now still works).
    pub paused: bool,
    /// Keep rules.
    pub retention: RetentionView,
    /// Verification policy.
    pub verification: VerificationView,
    /// Restore-test policy.
    pub restore_test: RestoreTestView,
    /// Protection now.
    pub protection: ProtectionView,
    /// Snapshot time of the newest recoverable point.
    pub last_recoverable_at: Option<String>,
    /// The latest backup job.
    pub last_run: Option<LastRun>,
    /// When the next scheduled backup is due (null when paused).
    pub next_run_at: Option<String>,
    /// When the plan was created.
    pub created_at: String,
    /// Its second copy, if it has one.
    pub replica: Option<ReplicaView>,
    /// Where copies of its points are (each repository holding live
    /// copies, and the replica's even when it holds none yet).
    pub copies: Vec<CopiesView>,
    /// How its Proxmox VE guest is dumped (null: snapshot mode, dumps kept).
    pub proxmox: Option<ProxmoxView>,
    /// Its live points the ransomware heuristic flagged (64 hex digits),
    /// newest first.
    pub anomalous_points: Vec<String>,
    /// How long the newest unflagged point is locked when the ransomware
    /// heuristic flags a backup (null: never).
    pub anomaly_lock: Option<String>,
    /// What a file-system backup reads beyond the source's path and what it
    /// leaves out (every field given).
    pub files: crate::plan_files::FilesInput,
    /// The programs run around each backup.
    pub hooks: crate::plan_files::HooksInput,
    /// The IANA time zone of the schedule and of retention's calendar
    /// (null: UTC).
    pub time_zone: Option<String>,
}

/// A plan's second copy.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ReplicaView {
    /// The repository the copies go to.
    pub repository: String,
    /// Each copy is locked this long after it is made (humantime; null: it
    /// keeps only its source point's lock).
    pub lock_for: Option<String>,
    /// What `protected` requires of the copies: `nothing`, `proven` or
    /// `immutable-off-host`.
    pub require: String,
}

/// The copies of a plan's points in one repository.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CopiesView {
    /// The repository.
    pub repository: String,
    /// Whether it is the plan's current replica.
    pub current: bool,
    /// `remote` (object storage, off this host), `local` (a directory on
    /// this host), or null when no copy was recorded there yet.
    pub location: Option<String>,
    /// Who enforces locks there: `storage` (the store refuses deletion
    /// before the date) or `vouch` (Vouch's tools only); null when not
    /// known yet.
    pub locks_enforced_by: Option<String>,
    /// Live (not forgotten) copies there.
    pub live: u64,
    /// Of which `recoverable`.
    pub recoverable: u64,
    /// The newest live copy.
    pub newest: Option<CopyView>,
}

/// One copy of a point.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CopyView {
    /// The copy's point id (64 hex digits).
    pub point: String,
    /// The point it is a copy of.
    pub source: String,
    /// Its own state, from its own checks.
    pub state: String,
    /// The snapshot's time (its source's).
    pub snapshot_at: String,
    /// Locked against deletion until then.
    pub locked_until: Option<String>,
    /// Whether its storage keeps it from deletion now (a lock in force that
    /// the storage enforces).
    pub immutable: bool,
}

/// What the copies of `plan` look like at `now_ns`, by repository.
pub(crate) fn copies_view(p: &Projections, plan: &Plan, now_ns: i64) -> Vec<CopiesView> {
    let replica = plan.definition.replica.as_ref().map(|r| &r.repository);
    let mut by_repo: BTreeMap<String, Vec<&vouch_events::Point>> = BTreeMap::new();
    if let Some(r) = replica {
        by_repo.entry(r.to_string()).or_default();
    }
    for pt in p.points.copies_of_plan(&plan.id) {
        if pt.expired.is_none() {
            by_repo
                .entry(pt.repository.to_string())
                .or_default()
                .push(pt);
        }
    }
    by_repo
        .into_iter()
        .map(|(repository, mut copies)| {
            copies.sort_by_key(|pt| std::cmp::Reverse((pt.snapshot_time_unix_ns, pt.since.seq)));
            let facts = copies.first().and_then(|pt| pt.copy.as_ref());
            CopiesView {
                current: replica.is_some_and(|r| r.as_str() == repository),
                location: facts.map(|c| if c.off_host { "remote" } else { "local" }.to_owned()),
                locks_enforced_by: facts.map(|c| c.locks_enforced_by.as_str().to_owned()),
                live: copies.len() as u64,
                recoverable: copies
                    .iter()
                    .filter(|pt| pt.state == PointState::Recoverable)
                    .count() as u64,
                newest: copies.first().map(|pt| CopyView {
                    point: pt.id.to_hex(),
                    source: pt
                        .copy
                        .as_ref()
                        .map(|c| c.source.to_hex())
                        .unwrap_or_default(),
                    state: pt.state.as_str().to_owned(),
                    snapshot_at: rfc3339(pt.snapshot_time_unix_ns),
                    locked_until: pt.locked_until_unix_ns.map(rfc3339),
                    immutable: pt.immutable_at(now_ns),
                }),
                repository,
            }
        })
        .collect()
}

/// A plan as projections and the service's clock show it.
pub(crate) fn plan_view(
    p: &Projections,
    plan: &Plan,
    now_ns: i64,
    next_run_ns: Option<i64>,
) -> PlanView {
    let d = &plan.definition;
    let prot = p.plan_protection(&plan.id, now_ns);
    let last_recoverable_at = last_recoverable_ns(p, &plan.id).map(rfc3339);
    let last_run = p
        .jobs
        .jobs
        .values()
        .filter(|j| j.kind == JobKind::Backup && j.plan.as_ref() == Some(&plan.id))
        .max_by_key(|j| j.scheduled.seq)
        .map(|j| LastRun {
            job: j.id.to_string(),
            state: j.state.as_str().to_owned(),
            at: rfc3339(j.updated.unix_ns),
        });
    PlanView {
        id: plan.id.to_string(),
        source: d.source.clone(),
        schedule: d.schedule.clone(),
        rpo: human(d.rpo),
        repository: d.repository.to_string(),
        paused: d.paused,
        retention: RetentionView::of(&d.retention),
        verification: VerificationView {
            after_backup: d.verification.after_backup,
            every: d.verification.every.map(human),
            depth: depth_label(d.verification.depth),
        },
        restore_test: RestoreTestView {
            every: d.restore_test.every.map(human),
            max_evidence_age: human(d.restore_test.max_evidence_age),
            sample_files: d.restore_test.sample_files,
            full_every: d.restore_test.full_every.map(human),
            boot: d.restore_test.boot.as_ref().map(|b| BootView {
                marker: b.marker.clone(),
                timeout: human(b.timeout),
                memory_mib: b.memory_mib,
            }),
        },
        protection: ProtectionView {
            status: prot.status.as_str().to_owned(),
            reason: prot.reason,
        },
        last_recoverable_at,
        last_run,
        next_run_at: next_run_ns.map(rfc3339),
        created_at: rfc3339(plan.created.unix_ns),
        replica: d.replica.as_ref().map(|r| ReplicaView {
            repository: r.repository.to_string(),
            lock_for: r.lock_for.map(human),
            require: r.require.as_str().to_owned(),
        }),
        copies: copies_view(p, plan, now_ns),
        proxmox: d.proxmox.as_ref().map(|x| ProxmoxView {
            mode: x.mode.as_str().to_owned(),
            remove_dump: x.remove_dump,
        }),
        anomaly_lock: d.anomaly_lock.map(human),
        files: crate::plan_files::files_input(&d.files),
        hooks: crate::plan_files::hooks_input(&d.hooks),
        time_zone: d.time_zone.clone(),
        anomalous_points: {
            let mut flagged: Vec<&vouch_events::Point> = p
                .points
                .of_plan(&plan.id)
                .filter(|pt| pt.expired.is_none() && pt.flagged())
                .collect();
            flagged.sort_by_key(|pt| std::cmp::Reverse(pt.snapshot_time_unix_ns));
            flagged.into_iter().map(|pt| pt.id.to_hex()).collect()
        },
    }
}

/// Snapshot time of the newest recoverable point of `plan`.
pub(crate) fn last_recoverable_ns(p: &Projections, plan: &vouch_events::PlanId) -> Option<i64> {
    p.points
        .of_plan(plan)
        .filter(|pt| pt.state == PointState::Recoverable)
        .map(|pt| pt.snapshot_time_unix_ns)
        .max()
}

/// Bytes done at the latest checkpoint.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProgressView {
    /// Bytes done.
    pub bytes_done: u64,
    /// Bytes in total, when known.
    pub bytes_total: Option<u64>,
}

/// A job's latest error.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobErrorView {
    /// Stable kind (`cancelled`, `abandoned`, `source_missing`, ...).
    pub kind: String,
    /// For humans.
    pub message: String,
    /// Whether trying again may help.
    pub retryable: bool,
}

/// A job.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobView {
    /// Its id.
    pub id: String,
    /// `backup`, `verify`, `restore-test`, `retention`, `prune`, `read-back` or
    /// `reconcile`.
    #[schema(schema_with = crate::api::jobs::job_kind_view_schema)]
    pub kind: String,
    /// Its plan.
    pub plan: Option<String>,
    /// The point it works on (64 hex).
    pub point: Option<String>,
    /// `scheduled`, `running`, `succeeded`, `failed`, `abandoned`.
    pub state: String,
    /// The attempt number (1 for the first).
    pub attempt: u32,
    /// When it was first scheduled.
    pub scheduled_at: String,
    /// The seq of its scheduling: the list's order (newest first), and the
    /// `before_seq` of the next page.
    pub scheduled_seq: u64,
    /// When its state last changed.
    pub updated_at: String,
    /// Progress at the latest checkpoint.
    pub progress: Option<ProgressView>,
    /// The latest error.
    pub error: Option<JobErrorView>,
}

pub(crate) fn job_view(j: &Job) -> JobView {
    JobView {
        id: j.id.to_string(),
        kind: kind_name(j.kind).to_owned(),
        plan: j.plan.as_ref().map(|p| p.to_string()),
        point: j.point.map(|p| p.to_hex()),
        state: j.state.as_str().to_owned(),
        attempt: j.attempt,
        scheduled_at: rfc3339(j.scheduled.unix_ns),
        scheduled_seq: j.scheduled.seq,
        updated_at: rfc3339(j.updated.unix_ns),
        progress: j.progress.map(|(done, total)| ProgressView {
            bytes_done: done,
            bytes_total: total,
        }),
        error: j.last_error.as_ref().map(|e| JobErrorView {
            kind: e.kind.clone(),
            message: e.message.clone(),
            retryable: e.retryable,
        }),
    }
}

/// Parses an API job state.
pub(crate) fn parse_job_state(s: &str) -> Option<JobState> {
    [
        JobState::Scheduled,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Abandoned,
    ]
    .into_iter()
    .find(|st| st.as_str() == s)
}

/// Parses an API point state.
pub(crate) fn parse_point_state(s: &str) -> Option<PointState> {
    POINT_STATES.into_iter().find(|st| st.as_str() == s)
}

/// Figures of a backup.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SummaryView {
    /// Files.
    pub files: u64,
    /// Bytes read from the source in that run (same as `bytes_read`; kept
    /// for clients written before `size_bytes` existed, which took it for
    /// the point's size).
    pub bytes: u64,
    /// Bytes read from the source in that run (an unchanged incremental
    /// reads about none).
    pub bytes_read: u64,
    /// The point's logical size: bytes of all its files (null: not known,
    /// for points recorded before Vouch recorded it).
    pub size_bytes: Option<u64>,
    /// Bytes the repository did not have yet.
    pub added_bytes: u64,
    /// Bytes written after compression and encryption.
    pub stored_bytes: u64,
    /// Wall time.
    pub duration_ms: u64,
}

/// One signal of the anomaly heuristic.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AnomalyView {
    /// What was measured.
    pub kind: String,
    /// Strength, 0-1000.
    pub score_permille: u32,
    /// For humans.
    pub detail: String,
}

/// What changed between a point and the point it was compared with (its
/// parent), as the ransomware heuristic counted it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChangesView {
    /// The point compared with (64 hex digits).
    pub compared_with: String,
    /// Regular files in it.
    pub files_before: u64,
    /// Files added.
    pub added: u64,
    /// Files whose content changed in place.
    pub changed: u64,
    /// Files deleted.
    pub deleted: u64,
    /// Files renamed in their directory (`a.doc` to `a.doc.x` or `a.x`).
    pub renamed: u64,
    /// Files that compressed before and no longer do (null: not known,
    /// the repository stores without compression).
    pub became_incompressible: Option<u64>,
    /// The extension foreign to their directories that most renamed files
    /// gained, if any.
    pub churn_extension: Option<String>,
    /// How many files gained it.
    pub churn_files: u64,
    /// A ransom-note-like name added in directories that existed, if any.
    pub note_name: Option<String>,
    /// In how many directories.
    pub note_dirs: u64,
}

impl From<&vouch_events::ChangeFigures> for ChangesView {
    fn from(c: &vouch_events::ChangeFigures) -> Self {
        ChangesView {
            compared_with: c.compared_with.to_hex(),
            files_before: c.files_before,
            added: c.added,
            changed: c.changed,
            deleted: c.deleted,
            renamed: c.renamed,
            became_incompressible: c.became_incompressible,
            churn_extension: c.churn_extension.clone(),
            churn_files: c.churn_files,
            note_name: c.note_name.clone(),
            note_dirs: c.note_dirs,
        }
    }
}

/// A recovery point.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PointView {
    /// Its id (64 hex digits, the snapshot id).
    pub id: String,
    /// Its plan.
    pub plan: Option<String>,
    /// Its repository.
    pub repository: String,
    /// `unknown`, `unverified`, `verified`, `recoverable`, `corrupt`,
    /// `unrecoverable`, `expired` or `vanished`.
    pub state: String,
    /// Why the point is held at `unknown` although its checks would say
    /// more (an unreadable event, a check job without a verdict, read-back
    /// damage), if it is.
    pub held_unknown_because: Option<String>,
    /// How much its proof covers: the latest restore test's files and
    /// bytes against the point's (null: never restore-tested).
    pub coverage: Option<CoverageView>,
    /// When a restore test of every file last passed.
    pub last_complete_restore_at: Option<String>,
    /// How deep the latest passed verification read (`structure`,
    /// `read-sample:N`, `read-all`).
    pub verified_depth: Option<String>,
    /// Why its manifest is considered gone, if it vanished.
    pub vanished_because: Option<String>,
    /// The snapshot's own time.
    pub snapshot_at: String,
    /// When the log learned about it.
    pub committed_at: String,
    /// Backup figures.
    pub summary: Option<SummaryView>,
    /// Locked against deletion until then.
    pub locked_until: Option<String>,
    /// Signals of the ransomware heuristic (it reports, never acts).
    pub anomalies: Vec<AnomalyView>,
    /// The paths that weighed most in those signals, heaviest first.
    pub anomaly_paths: Vec<String>,
    /// What changed since the point it was compared with (null: a first
    /// backup, a copy, a disk image, or a point recorded before these
    /// figures existed).
    pub changes: Option<ChangesView>,
    /// What it is a copy of, for a copy in a plan's replica (null: a point
    /// of its own).
    pub copy_of: Option<CopyOfView>,
}

/// Where a copy came from and how it is kept.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CopyOfView {
    /// The point it is a copy of (64 hex digits).
    pub source: String,
    /// `remote` (object storage, off this host) or `local`.
    pub location: String,
    /// Who enforces locks in its repository: `storage` or `vouch`.
    pub locks_enforced_by: String,
}

/// What a restore test covered.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CoverageView {
    /// Files restored and compared.
    pub files: u64,
    /// Files in the point (null: not known, a test of schema v1).
    pub files_in_point: Option<u64>,
    /// Bytes restored.
    pub bytes: u64,
    /// Bytes in the point (null: not known).
    pub bytes_in_point: Option<u64>,
    /// Every file of the point was restored and compared (false: a sample).
    pub complete: bool,
    /// The restored guest started: booted (a VM) or ran a command (a
    /// container); null when the test started nothing.
    pub guest: Option<GuestStartView>,
    /// Whether that test passed.
    pub passed: bool,
}

/// What starting a restored guest showed.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GuestStartView {
    /// `boot` (a VM under qemu) or `command` (a container under chroot).
    pub check: String,
    /// The command run.
    pub command: String,
    /// `kvm` or `tcg` for a boot.
    pub accelerator: Option<String>,
    /// The text its console had to show.
    pub marker: Option<String>,
    /// Whether it came up.
    pub came_up: bool,
    /// Milliseconds to the marker (or the command's end, or giving up).
    pub took_ms: u64,
    /// The last lines of its console.
    pub console_tail: Vec<String>,
}

pub(crate) fn point_view(pt: &vouch_events::Point) -> PointView {
    PointView {
        id: pt.id.to_hex(),
        plan: pt.plan.as_ref().map(|p| p.to_string()),
        repository: pt.repository.to_string(),
        state: pt.state.as_str().to_owned(),
        held_unknown_because: (pt.state == PointState::Unknown)
            .then(|| pt.cap())
            .flatten(),
        coverage: pt.last_restore_test.as_ref().map(|r| CoverageView {
            files: r.evidence.files,
            files_in_point: r.evidence.files_in_point,
            bytes: r.evidence.bytes,
            bytes_in_point: r.evidence.bytes_in_point,
            complete: r.evidence.complete,
            guest: r.evidence.guest.as_ref().map(|g| GuestStartView {
                check: g.check.clone(),
                command: g.command.clone(),
                accelerator: g.accelerator.clone(),
                marker: g.marker.clone(),
                came_up: g.came_up,
                took_ms: g.took_ms,
                console_tail: g.console_tail.clone(),
            }),
            passed: r.passed,
        }),
        last_complete_restore_at: pt.last_complete_restore.map(|at| rfc3339(at.unix_ns)),
        verified_depth: pt
            .last_verification
            .as_ref()
            .filter(|v| v.passed)
            .map(|v| depth_label(v.depth)),
        vanished_because: pt.vanished.as_ref().map(|(_, why)| why.clone()),
        snapshot_at: rfc3339(pt.snapshot_time_unix_ns),
        committed_at: rfc3339(pt.since.unix_ns),
        summary: pt.summary.as_ref().map(|s| SummaryView {
            files: s.files,
            bytes: s.bytes,
            bytes_read: s.bytes,
            size_bytes: s.total_bytes,
            added_bytes: s.added_bytes,
            stored_bytes: s.stored_bytes,
            duration_ms: s.duration_ms,
        }),
        locked_until: pt.locked_until_unix_ns.map(rfc3339),
        anomalies: pt
            .anomalies
            .iter()
            .map(|a| AnomalyView {
                kind: a.kind.clone(),
                score_permille: a.score_permille,
                detail: a.detail.clone(),
            })
            .collect(),
        anomaly_paths: pt.anomaly_paths.clone(),
        changes: pt.changes.as_ref().map(ChangesView::from),
        copy_of: pt.copy.as_ref().map(|c| CopyOfView {
            source: c.source.to_hex(),
            location: if c.off_host { "remote" } else { "local" }.to_owned(),
            locks_enforced_by: c.locks_enforced_by.as_str().to_owned(),
        }),
    }
}

/// The latest verification of a point.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct VerificationOutcomeView {
    /// When it was recorded.
    pub at: String,
    /// Whether it passed.
    pub passed: bool,
    /// How deep it read.
    pub depth: String,
    /// Bytes read back.
    pub bytes_read: u64,
    /// What is damaged.
    pub damaged: Vec<String>,
}

/// The proof a restore test left.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EvidenceView {
    /// What was restored (paths, or the sample).
    pub restored: Vec<String>,
    /// Files restored.
    pub files: u64,
    /// Bytes restored.
    pub bytes: u64,
    /// Digests compared with the manifest.
    pub digests_compared: u64,
    /// Of which matched.
    pub digests_matched: u64,
    /// Wall time.
    pub duration_ms: u64,
    /// Where it was restored.
    pub location: String,
}

/// The latest restore test of a point.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RestoreOutcomeView {
    /// When it was recorded.
    pub at: String,
    /// Whether it passed.
    pub passed: bool,
    /// Why it failed.
    pub reason: Option<String>,
    /// The evidence.
    pub evidence: EvidenceView,
}

/// A recovery point with its evidence and history.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PointDetail {
    /// The point.
    #[serde(flatten)]
    pub point: PointView,
    /// The latest verification.
    pub verification: Option<VerificationOutcomeView>,
    /// The latest restore test.
    pub restore_test: Option<RestoreOutcomeView>,
    /// Every event naming the point, oldest first.
    pub history: Vec<EventView>,
}

pub(crate) fn point_detail(pt: &vouch_events::Point, history: Vec<EventView>) -> PointDetail {
    PointDetail {
        point: point_view(pt),
        verification: pt
            .last_verification
            .as_ref()
            .map(|v| VerificationOutcomeView {
                at: rfc3339(v.at.unix_ns),
                passed: v.passed,
                depth: depth_label(v.depth),
                bytes_read: v.bytes_read,
                damaged: v.damaged.clone(),
            }),
        restore_test: pt.last_restore_test.as_ref().map(|r| RestoreOutcomeView {
            at: rfc3339(r.at.unix_ns),
            passed: r.passed,
            reason: r.reason.clone(),
            evidence: EvidenceView {
                restored: r.evidence.restored.clone(),
                files: r.evidence.files,
                bytes: r.evidence.bytes,
                digests_compared: r.evidence.digests_compared,
                digests_matched: r.evidence.digests_matched,
                duration_ms: r.evidence.duration_ms,
                location: r.evidence.location.clone(),
            },
        }),
        history,
    }
}

/// One event of the log.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventView {
    /// Sequence number (1-based, no gaps).
    pub seq: u64,
    /// Type (`backup.committed`, ...).
    #[serde(rename = "type")]
    pub event_type: String,
    /// Schema version it was written with.
    pub version: u16,
    /// When the server recorded it.
    pub recorded_at: String,
    /// Hash of the envelope (64 hex).
    pub hash: String,
    /// The event's payload.
    #[schema(value_type = Object)]
    pub data: Value,
}

pub(crate) fn event_view(env: &Envelope) -> EventView {
    EventView {
        seq: env.seq,
        event_type: env.event.event_type().to_owned(),
        version: env.schema_version,
        recorded_at: rfc3339(env.recorded_unix_ns),
        hash: env
            .hash
            .0
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>(),
        data: event_data(&env.event),
    }
}

/// The payload of an event as JSON.
pub(crate) fn event_data(e: &Event) -> Value {
    macro_rules! data {
        ($($v:ident),* $(,)?) => {
            match e {
                $(Event::$v(x) => serde_json::to_value(x),)*
                Event::Unknown(u) => Ok(serde_json::json!({
                    "unreadable": true,
                    "type": u.event_type,
                    "schema_version": u.schema_version,
                    "payload_bytes": u.payload.len(),
                })),
            }
        };
    }
    data!(
        PlanCreated,
        PlanChanged,
        PlanRemoved,
        JobScheduled,
        JobStarted,
        JobProgress,
        JobFinished,
        JobFailed,
        JobAbandoned,
        BackupCommitted,
        PointDiscovered,
        VerificationStarted,
        VerificationPassed,
        VerificationFailed,
        RestoreTestStarted,
        RestoreTestPassed,
        RestoreTestFailed,
        PointForgotten,
        PointLocked,
        AnomalyDetected,
        AlertRaised,
        AlertDelivered,
        AlertDeliveryFailed,
        AlertResolved,
        AgentRegistered,
        AgentSeen,
        LeaseGranted,
        LeaseExpired,
        ServiceStarted,
        ConfigurationChanged,
        PacksReadBack,
        PointVanished,
        LogRepaired,
        ClockStepped,
        LogScrubbed,
        ActionAudited,
        ContentRead,
        PointUnlocked,
        AccessRefused,
        RestoreCompleted,
        CopyCommitted,
        SecurityCheckChanged,
        KeyExportConfirmed,
        LogHeadExported,
        ReportDelivered,
        ReportDeliveryFailed,
        ServiceRebuilt,
        RepositoryPruned,
        HookFailed,
    )
    .unwrap_or(Value::Null)
}

/// A page of the log.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventsPage {
    /// Events, oldest first.
    pub events: Vec<EventView>,
    /// Where the next page starts (`from_seq`).
    pub next_seq: u64,
}

/// Delivery of an alert to one receiver.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DeliveryView {
    /// Attempts so far.
    pub attempts: u32,
    /// When it was delivered.
    pub delivered_at: Option<String>,
    /// The latest failure.
    pub last_error: Option<String>,
}

/// An alert.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AlertView {
    /// Its id.
    pub id: String,
    /// `info`, `warning` or `critical`.
    pub severity: String,
    /// What it is about.
    pub subject: String,
    /// For humans.
    pub message: String,
    /// When it was raised.
    pub raised_at: String,
    /// When it was resolved (null: open).
    pub resolved_at: Option<String>,
    /// Per receiver.
    pub deliveries: BTreeMap<String, DeliveryView>,
}

pub(crate) fn alert_view(a: &Alert) -> AlertView {
    AlertView {
        id: a.id.to_string(),
        severity: severity(a.severity).to_owned(),
        subject: a.subject.clone(),
        message: a.message.clone(),
        raised_at: rfc3339(a.raised.unix_ns),
        resolved_at: a.resolved.map(|r| rfc3339(r.unix_ns)),
        deliveries: a
            .deliveries
            .iter()
            .map(|(k, d)| {
                (
                    k.clone(),
                    DeliveryView {
                        attempts: d.attempts,
                        delivered_at: d.delivered.map(|r| rfc3339(r.unix_ns)),
                        last_error: d.last_error.clone(),
                    },
                )
            })
            .collect(),
    }
}

/// A repository and what is in it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RepositoryView {
    /// Its id in the configuration.
    pub id: String,
    /// Where it is: for administrators only (null for every other role; a
    /// repository's path tells where the service keeps its own files).
    pub location: Option<String>,
    /// Snapshots in it.
    pub snapshots: u64,
    /// Pack files in it.
    pub packs: u64,
    /// Bytes on storage.
    pub size_bytes: u64,
    /// Bytes free on the file system that holds it (null: object storage,
    /// or not known).
    pub free_bytes: Option<u64>,
    /// Every event up to this seq is in the repository's copy of the event
    /// log, for disaster recovery (null: not mirrored there, or not yet).
    pub log_mirrored_seq: Option<u64>,
    /// Recovery points of it by state (every state, 0s included).
    pub points: BTreeMap<String, u64>,
}

/// The dashboard in one answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Overview {
    /// Now, by the service's clock.
    pub now: String,
    /// Plans by protection status (every status, 0s included).
    pub protection: BTreeMap<String, u64>,
    /// The rollup: as weak as the weakest plan; `unknown` with no plan.
    pub overall: String,
    /// Every plan.
    pub plans: Vec<PlanView>,
    /// Alerts not resolved.
    pub open_alerts: Vec<AlertView>,
    /// Jobs scheduled or running.
    pub running_jobs: Vec<JobView>,
}

/// `GET /healthz`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: String,
    /// The server's version.
    pub version: String,
}

/// `GET /readyz`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Ready {
    /// `ready`, `starting`, `stopping`, `log_not_writable` (the event log
    /// refuses appends) or `read_model_unavailable` (the read model refuses
    /// queries: it could not be reopened after a failure).
    pub status: String,
    /// The seq of the last durable event (when ready).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// Why it is not ready, for humans (the last append error, or why the
    /// read model could not be reopened).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Body of `POST /api/v1/points/{id}/lock`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct LockRequest {
    /// Locked until then (RFC 3339).
    pub until: String,
}

/// Body of `POST /api/v1/points/{id}/unlock`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UnlockRequest {
    /// Why the lock is removed before its end (1 to 500 characters, no
    /// control characters); recorded in the log.
    #[schema(
        min_length = 1,
        max_length = 500,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]+$"
    )]
    pub reason: String,
}

/// One entry of a directory in a point.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EntryView {
    /// Its name.
    pub name: String,
    /// `file`, `dir`, `symlink` or `other`.
    pub kind: String,
    /// Size in bytes.
    pub size: u64,
    /// Unix mode bits.
    pub mode: u32,
    /// Modification time.
    pub mtime: Option<String>,
}

/// A directory in a point.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FileList {
    /// The directory.
    pub path: String,
    /// Its entries (one page), sorted by name.
    pub entries: Vec<EntryView>,
    /// When more entries follow: the `after` of the next page.
    pub next: Option<String>,
}
