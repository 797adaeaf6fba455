//! The domain events: what the log records.
//!
//! Every event type has a stable name (`plan.created`, ...) and a schema
//! version, listed by [`EVENT_TYPES`]. The structs here are the *current*
//! payload of each type; their rmp-serde encoding (positional arrays, field
//! order is format) is pinned by golden-byte tests. When a payload changes,
//! its old shape is frozen in `schema::upcast` with a function that lifts it
//! to the new one, and the version in the table goes up. An event of a type
//! this build does not know, or of a newer version than it knows, is kept as
//! [`Event::Unknown`]: shown, never dropped, never counted as good.

use serde::{Deserialize, Serialize};

use crate::ids::{AgentId, AlertId, JobId, PlanId, RepositoryId, SnapshotId};
use crate::plan::{PlanDefinition, VerifyDepth};

/// A plan was created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanCreated {
    /// The plan.
    pub plan: PlanId,
    /// Its definition.
    pub definition: PlanDefinition,
}

/// A plan's definition was replaced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanChanged {
    /// The plan.
    pub plan: PlanId,
    /// The new definition.
    pub definition: PlanDefinition,
}

/// A plan was removed (its points stay until forgotten).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanRemoved {
    /// The plan.
    pub plan: PlanId,
}

/// What a job does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum JobKind {
    /// Back up a plan's source.
    Backup,
    /// Verify a point.
    Verify,
    /// Restore-test a point.
    RestoreTest,
    /// Apply retention.
    Forget,
    /// Remove unreferenced data.
    Prune,
    /// Read back whole packs of a repository (a slice of the rolling
    /// read-back window). Recorded as `Verify` before `job.scheduled` v2.
    ReadBack,
    /// Compare a repository's manifests with the log (`point.discovered`,
    /// `point.vanished`, deletions retention decided but did not finish).
    Reconcile,
    /// Restore a point (or a path in it) into a directory of a host: the
    /// server, or an agent (`job.scheduled` v3 and later).
    Restore,
    /// Copy a point into the plan's replica repository (added within
    /// `job.scheduled` v3: a build before it reads such an event as unknown).
    Copy,
}

impl JobKind {
    /// Every kind, in declaration order (a kind added to the enum fails
    /// `every_kind_is_listed` until it is listed here).
    pub const ALL: [JobKind; 9] = [
        JobKind::Backup,
        JobKind::Verify,
        JobKind::RestoreTest,
        JobKind::Forget,
        JobKind::Prune,
        JobKind::ReadBack,
        JobKind::Reconcile,
        JobKind::Restore,
        JobKind::Copy,
    ];
}

#[cfg(test)]
mod job_kind_tests {
    use super::JobKind;

    #[test]
    fn every_kind_is_listed() {
        for k in JobKind::ALL {
            // Exhaustive: a new kind fails to compile here.
            let position = match k {
                JobKind::Backup => 0,
                JobKind::Verify => 1,
                JobKind::RestoreTest => 2,
                JobKind::Forget => 3,
                JobKind::Prune => 4,
                JobKind::ReadBack => 5,
                JobKind::Reconcile => 6,
                JobKind::Restore => 7,
                JobKind::Copy => 8,
            };
            assert_eq!(JobKind::ALL[position], k);
        }
    }
}

/// Where and what a restore job restores (`JobSpec::restore`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreSpec {
    /// The path inside the point (`/` for all of it).
    pub path: String,
    /// The directory it is restored into, on the host.
    pub destination: String,
    /// The agent that restores it onto its host; `None`: the server.
    pub agent: Option<String>,
}

/// What a job was asked to do, beyond its kind, plan and point: enough to
/// rebuild its command from the log after a restart (with the plan's
/// definition as of the job's `job.scheduled`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// The repository it works in (none: the plan's).
    pub repository: Option<RepositoryId>,
    /// How deep a verification reads.
    pub depth: Option<VerifyDepth>,
    /// A restore test restores at most this many files (none: every file,
    /// a complete test).
    pub sample_files: Option<u64>,
    /// The read-back slices, ascending.
    pub slices: Vec<u32>,
    /// How many slices the pack-name space is cut into (0: not a read-back).
    pub of: u32,
    /// Why it was scheduled, for humans (`schedule`, `after backup`,
    /// `retry after io`, `follow-up of read-back damage at seq 42`).
    pub why: String,
    /// What a restore job restores, and where (none for other kinds;
    /// absent before `job.scheduled` v3).
    pub restore: Option<RestoreSpec>,
}

/// A job was scheduled (again, for a retry: `attempt` counts).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobScheduled {
    /// The job.
    pub job: JobId,
    /// What it does.
    pub kind: JobKind,
    /// The plan it serves, if any.
    pub plan: Option<PlanId>,
    /// The point it works on (verify, restore test), if any.
    pub point: Option<SnapshotId>,
    /// When it should run.
    pub due_unix_ns: i64,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// What exactly it does (schema v2; empty when upcast from v1).
    pub spec: JobSpec,
}

/// A worker started a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStarted {
    /// The job.
    pub job: JobId,
    /// The agent running it (none: the server itself).
    pub agent: Option<AgentId>,
}

/// A job reached a checkpoint it can resume from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobProgress {
    /// The job.
    pub job: JobId,
    /// Opaque resume state, owned by the worker.
    #[serde(with = "serde_bytes")]
    pub checkpoint: Vec<u8>,
    /// Bytes done so far.
    pub done_bytes: u64,
    /// Bytes in total, when known.
    pub total_bytes: Option<u64>,
}

/// A job succeeded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFinished {
    /// The job.
    pub job: JobId,
}

/// A job failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFailed {
    /// The job.
    pub job: JobId,
    /// A stable, machine-readable kind (`io`, `repository-locked`, ...).
    pub error_kind: String,
    /// For humans.
    pub message: String,
    /// Whether trying again may help.
    pub retryable: bool,
}

/// A job's worker vanished (lease expired, agent gone, process killed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobAbandoned {
    /// The job.
    pub job: JobId,
    /// Why it is considered abandoned.
    pub reason: String,
}

/// Figures of one backup run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupSummary {
    /// Files in the snapshot.
    pub files: u64,
    /// Bytes read from the source in this run (an unchanged incremental
    /// reads about none; for a copy, the point's bytes as its source
    /// repository says). Before schema v3 of `backup.committed` and v2 of
    /// `copy.committed` this field was documented as the snapshot's size,
    /// which it never was.
    pub bytes: u64,
    /// Bytes the repository did not have yet (before compression).
    pub added_bytes: u64,
    /// Bytes written to the repository (after compression, encryption).
    pub stored_bytes: u64,
    /// Wall time of the run.
    pub duration_ms: u64,
    /// Bytes of all files in the snapshot (its logical size); none when
    /// not told (events upcast from `backup.committed` v2 or
    /// `copy.committed` v1).
    pub total_bytes: Option<u64>,
    /// Entries the backup could not read and left out (a file that
    /// vanished or was unreadable, a directory it could not list), each a
    /// warning in the snapshot's manifest; none when not counted (events
    /// upcast from `backup.committed` v3 or `copy.committed` v2, and
    /// copies, which read no source).
    pub warnings: Option<u64>,
}

/// A snapshot manifest was committed: a new recovery point, `unverified`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupCommitted {
    /// The backup job, if it ran as one.
    pub job: Option<JobId>,
    /// The plan, if any.
    pub plan: Option<PlanId>,
    /// Where it was written.
    pub repository: RepositoryId,
    /// The new point.
    pub snapshot: SnapshotId,
    /// The snapshot's own time.
    pub snapshot_time_unix_ns: i64,
    /// Figures.
    pub summary: BackupSummary,
    /// What changed since the point it was compared with (schema v2; none
    /// for a first backup, a disk image, and events upcast from v1).
    pub changes: Option<ChangeFigures>,
}

/// What changed between a backup and the point it was compared with (its
/// parent), as the ransomware heuristic weighs it. Counted from the two
/// snapshots' trees and the index (how each blob was stored), never from a
/// second read of the data. Kept in the log so that a plan's baseline is
/// derived from its history: the same log gives the same verdicts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeFigures {
    /// The point compared with.
    pub compared_with: SnapshotId,
    /// Regular files in it.
    pub files_before: u64,
    /// Regular files added (renamed ones not counted).
    pub added: u64,
    /// Regular files whose content changed at the same path.
    pub changed: u64,
    /// Regular files removed (renamed ones not counted).
    pub deleted: u64,
    /// Files renamed in their directory: `a.doc` became `a.doc.x` or `a.x`.
    pub renamed: u64,
    /// Files of 1 KiB or more that compressed before and no longer do,
    /// changed in place, renamed, or replaced in their directory (a rename
    /// to a compression format's extension is not counted). None: not known
    /// (the repository stores without compression, so nothing tells).
    pub became_incompressible: Option<u64>,
    /// The unknown extension most renamed files gained (`locked` for
    /// `a.doc` -> `a.doc.locked`), if any.
    pub churn_extension: Option<String>,
    /// How many files gained it.
    pub churn_files: u64,
    /// The ransom-note-like file name added in the most directories that
    /// existed before, if any.
    pub note_name: Option<String>,
    /// In how many.
    pub note_dirs: u64,
}

/// Who keeps a locked file from being deleted in a repository.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LockEnforcement {
    /// Vouch's own tools (every Vouch command honours the lock records;
    /// anyone with write access to the storage can still delete).
    Vouch,
    /// The storage itself (S3 Object Lock in compliance mode, the immutable
    /// attribute of a local file system): nobody can delete before the date.
    Storage,
}

impl LockEnforcement {
    /// The name used in the API (`vouch`, `storage`).
    pub fn as_str(&self) -> &'static str {
        match self {
            LockEnforcement::Vouch => "vouch",
            LockEnforcement::Storage => "storage",
        }
    }
}

/// A point was copied into another repository (a plan's replica): the copy
/// is a recovery point of its own, `unverified` until checked on its own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyCommitted {
    /// The copy job, if it ran as one.
    pub job: Option<JobId>,
    /// The plan, if any.
    pub plan: Option<PlanId>,
    /// The point copied.
    pub source: SnapshotId,
    /// Where the copy was written.
    pub repository: RepositoryId,
    /// The copy (its own snapshot id in that repository).
    pub snapshot: SnapshotId,
    /// The snapshot's own time (the source's).
    pub snapshot_time_unix_ns: i64,
    /// Figures: files and bytes of the point; `added_bytes` and
    /// `stored_bytes` what the copy stored that the repository lacked.
    pub summary: BackupSummary,
    /// The repository's storage is off this host (object storage).
    pub off_host: bool,
    /// Who enforces locks in that repository.
    pub locks_enforced_by: LockEnforcement,
    /// The copy's lock, written into that repository with it, if any.
    pub locked_until_unix_ns: Option<i64>,
}

/// A snapshot was found in a repository with no history in the log (e.g.
/// after a disaster recovery): a point in state `unknown`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointDiscovered {
    /// Where it was found.
    pub repository: RepositoryId,
    /// The point.
    pub snapshot: SnapshotId,
    /// The snapshot's own time.
    pub snapshot_time_unix_ns: i64,
    /// The plan it appears to belong to, if any.
    pub plan: Option<PlanId>,
}

/// A verification started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerificationStarted {
    /// The point.
    pub point: SnapshotId,
    /// The job.
    pub job: Option<JobId>,
    /// How deep.
    pub depth: VerifyDepth,
}

/// A verification passed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerificationPassed {
    /// The point.
    pub point: SnapshotId,
    /// The job.
    pub job: Option<JobId>,
    /// How deep.
    pub depth: VerifyDepth,
    /// Bytes read back.
    pub bytes_read: u64,
    /// Blobs checked.
    pub blobs_checked: u64,
}

/// A verification failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerificationFailed {
    /// The point.
    pub point: SnapshotId,
    /// The job.
    pub job: Option<JobId>,
    /// How deep.
    pub depth: VerifyDepth,
    /// Bytes read back.
    pub bytes_read: u64,
    /// What is damaged (blob ids, pack files, paths), for humans.
    pub damaged: Vec<String>,
}

/// The proof a restore test leaves behind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreEvidence {
    /// What was restored (paths inside the snapshot).
    pub restored: Vec<String>,
    /// Files restored.
    pub files: u64,
    /// Bytes restored.
    pub bytes: u64,
    /// Content digests compared against the manifest.
    pub digests_compared: u64,
    /// Of which matched.
    pub digests_matched: u64,
    /// Wall time.
    pub duration_ms: u64,
    /// Where it was restored (host and sandbox path).
    pub location: String,
    /// Files in the point (none: not known, as in schema v1).
    pub files_in_point: Option<u64>,
    /// Bytes in the point (none: not known, as in schema v1).
    pub bytes_in_point: Option<u64>,
    /// Every file of the point was restored and compared (false for a
    /// sample, and for evidence of schema v1, whose coverage is unknown).
    pub complete: bool,
    /// The restored guest started: a VM booted to its console's marker, a
    /// container ran a command (schema v3; none when upcast, or when the
    /// test started nothing).
    pub guest: Option<GuestEvidence>,
}

/// What starting a restored guest showed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestEvidence {
    /// `boot` (a VM under qemu) or `command` (a container under chroot).
    pub check: String,
    /// The command run, as a shell would show it.
    pub command: String,
    /// `kvm` or `tcg` for a boot.
    pub accelerator: Option<String>,
    /// The text the console had to show (a boot's).
    pub marker: Option<String>,
    /// Whether the guest came up.
    pub came_up: bool,
    /// Milliseconds from start to the marker (or the command's end; to
    /// giving up when it did not come up).
    pub took_ms: u64,
    /// The last lines of its console (or the command's output).
    pub console_tail: Vec<String>,
}

impl RestoreEvidence {
    /// Whether the test restored and compared nothing: such a test proves
    /// nothing, whatever it says.
    pub fn is_vacuous(&self) -> bool {
        self.files == 0 || self.digests_compared == 0
    }
}

/// A restore test started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreTestStarted {
    /// The point.
    pub point: SnapshotId,
    /// The job.
    pub job: Option<JobId>,
}

/// A restore test passed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreTestPassed {
    /// The point.
    pub point: SnapshotId,
    /// The job.
    pub job: Option<JobId>,
    /// The proof.
    pub evidence: RestoreEvidence,
}

/// A restore test failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreTestFailed {
    /// The point.
    pub point: SnapshotId,
    /// The job.
    pub job: Option<JobId>,
    /// What was done before it failed.
    pub evidence: RestoreEvidence,
    /// Why it failed.
    pub reason: String,
    /// A stable kind: `mismatch` (restored data differs from the manifest),
    /// `damaged` (data could not be read back intact), `missing` (a pack,
    /// tree or the manifest is gone), `corrupt_metadata`, `empty` (the point
    /// holds nothing to restore). Schema v1 failures upcast as `mismatch`.
    pub cause: String,
}

/// Retention forgot a point.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointForgotten {
    /// The point.
    pub point: SnapshotId,
    /// Which rule decided (`keep-daily 7`, or `manual`).
    pub rule: String,
}

/// A point was locked against deletion until a date.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointLocked {
    /// The point.
    pub point: SnapshotId,
    /// Until when.
    pub until_unix_ns: i64,
}

/// An administrator removed a point's lock before its end (audited: the
/// `audit.action` appended with it names who).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointUnlocked {
    /// The point.
    pub point: SnapshotId,
    /// Why, as the administrator gave it.
    pub reason: String,
}

/// One signal of the ransomware heuristic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnomalySignal {
    /// What was measured (`entropy-jump`, `extension-churn`, `ransom-note`,
    /// `mass-rewrite`, `dedup-miss`; see `docs/security.md`).
    pub kind: String,
    /// Strength, 0-1000: 500 is the signal's threshold.
    pub score_permille: u32,
    /// For humans.
    pub detail: String,
}

/// The heuristic flagged a point (it reports, never acts).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnomalyDetected {
    /// The point.
    pub point: SnapshotId,
    /// The point it was compared with.
    pub compared_with: Option<SnapshotId>,
    /// The signals.
    pub signals: Vec<AnomalySignal>,
    /// The paths that weighed most, heaviest first (schema v2; empty when
    /// upcast from v1).
    pub paths: Vec<String>,
}

/// How bad an alert is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Severity {
    /// For information.
    Info,
    /// Needs attention.
    Warning,
    /// Needs attention now.
    Critical,
}

/// An alert was raised.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertRaised {
    /// The alert.
    pub alert: AlertId,
    /// How bad.
    pub severity: Severity,
    /// What it is about (a plan, a point, an agent).
    pub subject: String,
    /// For humans.
    pub message: String,
    /// The rule that raised it (`BackupFailed`, ...; empty when upcast from
    /// v1, rendered as `VouchAlert`).
    pub rule: String,
    /// Its labels (`plan`, `point`, `repository`, ...): with `rule`, its
    /// identity for Alertmanager, so a `resolved` after a restart matches.
    pub labels: std::collections::BTreeMap<String, String>,
}

/// An alert reached a receiver.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertDelivered {
    /// The alert.
    pub alert: AlertId,
    /// The receiver (its configured name, never its secret URL).
    pub receiver: String,
    /// 1 for the first attempt.
    pub attempt: u32,
}

/// A delivery attempt failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertDeliveryFailed {
    /// The alert.
    pub alert: AlertId,
    /// The receiver's name.
    pub receiver: String,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// What went wrong.
    pub error: String,
    /// Whether another attempt follows.
    pub will_retry: bool,
}

/// A periodic protection report reached a receiver (`[reports]` of the
/// configuration): recorded so that a restart sends it neither twice nor
/// never.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportDelivered {
    /// The configured delivery's name.
    pub delivery: String,
    /// `daily`, `weekly` or `monthly`.
    pub period: String,
    /// The period's label (`2026-12-06`, `2026-W49`, `2026-12`).
    pub label: String,
    /// `installation` or the plan's id.
    pub scope: String,
    /// Where it went: `webhook:<receiver name>` or `email` (never a URL or
    /// an address list's secret).
    pub target: String,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// BLAKE3 (hex) of the report's JSON: what was sent, to compare with
    /// the report made again from the log.
    pub digest: String,
}

/// A report's delivery attempt failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportDeliveryFailed {
    /// The configured delivery's name.
    pub delivery: String,
    /// `daily`, `weekly` or `monthly`.
    pub period: String,
    /// The period's label.
    pub label: String,
    /// `installation` or the plan's id.
    pub scope: String,
    /// Where it was to go (as in [`ReportDelivered`]).
    pub target: String,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// What went wrong.
    pub error: String,
    /// Whether another attempt follows.
    pub will_retry: bool,
}

/// An alert's cause went away.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertResolved {
    /// The alert.
    pub alert: AlertId,
}

/// An agent registered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRegistered {
    /// The agent.
    pub agent: AgentId,
    /// Its host name.
    pub hostname: String,
    /// Its operating system (`linux`, `windows`).
    pub os: String,
    /// Its version.
    pub version: String,
}

/// An agent called in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSeen {
    /// The agent.
    pub agent: AgentId,
    /// How far the agent's clock was ahead of the server's (negative:
    /// behind) when it called in, in milliseconds, as it told (schema v2;
    /// none when upcast or when the agent did not say).
    pub clock_skew_ms: Option<i64>,
    /// The agent's software version when it called in (schema v2; none
    /// when upcast or not said).
    pub version: Option<String>,
}

/// An agent was given a job until a deadline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGranted {
    /// The agent.
    pub agent: AgentId,
    /// The job.
    pub job: JobId,
    /// When the lease ends unless renewed.
    pub expires_unix_ns: i64,
}

/// An agent's lease ran out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseExpired {
    /// The agent.
    pub agent: AgentId,
    /// The job.
    pub job: JobId,
}

/// The service started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceStarted {
    /// Its version.
    pub version: String,
}

/// The configuration changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigurationChanged {
    /// BLAKE3 of the new configuration file, hex (never its content:
    /// it may hold secrets).
    pub digest: String,
    /// What changed, for humans, without secrets.
    pub summary: String,
}

/// Packs of a repository were read back: some slices of the rolling
/// read-back window. Slice `k` of `of` holds the packs whose name, read
/// as a big-endian number from its first 8 bytes, falls in
/// `[k * 2^64 / of, (k + 1) * 2^64 / of)`; taking every slice in turn
/// reads every pack within the window (see docs/events.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PacksReadBack {
    /// The repository.
    pub repository: RepositoryId,
    /// The job.
    pub job: Option<JobId>,
    /// The slices read, ascending.
    pub slices: Vec<u32>,
    /// How many slices the pack-name space is cut into.
    pub of: u32,
    /// Packs read back.
    pub packs: u64,
    /// Bytes read back.
    pub bytes_read: u64,
    /// What is damaged (pack ids and problems), for humans; empty when
    /// every pack read back intact.
    pub damaged: Vec<String>,
    /// The damaged packs' ids (hex), structured (schema v2; upcast from the
    /// v1 `pack <hex>: ...` lines).
    pub damaged_packs: Vec<String>,
    /// The live points that reference a damaged pack, when the worker could
    /// tell; none: it could not (or schema v1), so every live point of the
    /// repository is suspect.
    pub affected_points: Option<Vec<SnapshotId>>,
}

/// A point's manifest is no longer in its repository although retention did
/// not forget it (deleted by hand, by another tool, or by an attacker): the
/// point can never count again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointVanished {
    /// The point.
    pub point: SnapshotId,
    /// Its repository.
    pub repository: RepositoryId,
    /// How it was noticed (`reconciliation`, `restore test: manifest missing`).
    pub reason: String,
}

/// Someone acted through the API (the audit trail): who, in which role,
/// what and on what. Appended in the same batch as the events the action
/// caused, or right after them when another actor appends those (a run
/// asked for, a cancel).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionAudited {
    /// The token's name.
    pub principal: String,
    /// The token's role (`admin`, `operator`, ...).
    pub role: String,
    /// What was done: `plan.create`, `plan.change`, `plan.remove`,
    /// `plan.pause`, `plan.resume`, `plan.run`, `job.cancel`,
    /// `point.lock`, `verify.report`.
    pub action: String,
    /// What it was done to: a plan id, a job id, a point id (hex).
    pub target: String,
}

/// A caller was refused something it tried (the repository protocol and
/// the agents' leases record these): another agent's repository, a
/// deletion or overwrite by an append-only credential, an upload or
/// result under a lease that is not current, a forged or incomplete
/// upload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessRefused {
    /// The token's name.
    pub principal: String,
    /// The token's role.
    pub role: String,
    /// What was tried: `repo.read`, `repo.put`, `repo.delete`,
    /// `repo.sync`, `lease.renew`, `lease.result`.
    pub action: String,
    /// What it was tried on: `REPO/KIND/NAME`, a fencing token.
    pub target: String,
    /// Why it was refused (for humans).
    pub reason: String,
}

/// A restore job put a point (or a path in it) into a directory of a host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreCompleted {
    /// The job.
    pub job: JobId,
    /// The point restored.
    pub point: SnapshotId,
    /// The path inside the point.
    pub path: String,
    /// The directory it went into.
    pub destination: String,
    /// The agent whose host it went to; `None`: the server.
    pub agent: Option<String>,
    /// Files restored.
    pub files: u64,
    /// Bytes of file content restored.
    pub bytes: u64,
}

/// The content of backed-up files was read through the API (a download).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContentRead {
    /// The token's name.
    pub principal: String,
    /// The token's role.
    pub role: String,
    /// The point read from.
    pub point: SnapshotId,
    /// The path inside the point.
    pub path: String,
    /// `file`, or `archive` for a directory.
    pub kind: String,
}

/// The log was repaired at open: records were cut or set aside. Recorded
/// as the first event after the repair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRepaired {
    /// The first seq that was cut (it is reused by the events after).
    pub from_seq: u64,
    /// Bytes set aside.
    pub bytes: u64,
    /// The highest seq that had been acknowledged (the durable head).
    pub acknowledged_seq: u64,
    /// Whether acknowledged events were lost (then an alert is critical).
    pub lost_acknowledged: bool,
    /// What was found, for humans.
    pub reason: String,
}

/// A prune job freed a repository's unused data (`JobKind::Prune`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepositoryPruned {
    /// The job.
    pub job: JobId,
    /// The repository.
    pub repository: RepositoryId,
    /// Pack files before.
    pub packs_before: u64,
    /// Packs deleted (wholly unused, or repacked).
    pub packs_deleted: u64,
    /// Packs repacked (their used blobs written into new packs).
    pub packs_repacked: u64,
    /// Packs written by repacking.
    pub packs_written: u64,
    /// Packs in no index left by interrupted writers, removed.
    pub leftover_packs: u64,
    /// Packs in no index younger than the grace period, kept.
    pub young_packs_kept: u64,
    /// Packs kept in place because a locked point needs them.
    pub packs_kept_for_locks: u64,
    /// Bytes of storage freed (net of what repacking wrote).
    pub bytes_freed: u64,
    /// How long it took, in milliseconds.
    pub took_ms: u64,
}

/// When a hook runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HookPhase {
    /// Before the backup (its failure stops the backup).
    Pre,
    /// After the backup.
    Post,
}

impl HookPhase {
    /// `pre` or `post`.
    pub fn as_str(&self) -> &'static str {
        match self {
            HookPhase::Pre => "pre",
            HookPhase::Post => "post",
        }
    }
}

/// A plan's hook failed: it exited non-zero, was killed at its timeout,
/// or could not be started (not installed, not executable). A failed
/// `pre` hook stops the backup, which then fails too.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookFailed {
    /// The backup job it ran for.
    pub job: JobId,
    /// Its plan.
    pub plan: PlanId,
    /// Before or after the backup.
    pub phase: HookPhase,
    /// The hook's name (its file in the host's hook directory).
    pub hook: String,
    /// Its exit status, when it exited (none: killed or never started).
    pub exit_code: Option<i32>,
    /// Killed at its timeout.
    pub timed_out: bool,
    /// What happened, with the end of its standard error, for humans.
    pub reason: String,
    /// How long it ran, in milliseconds.
    pub took_ms: u64,
}

/// The service was rebuilt from a repository's copy of its event log
/// (`vouch dr rebuild`): the first event after the recovered ones.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceRebuilt {
    /// The repository the log was read from: its id in the log when its
    /// ownership record names it, else its location.
    pub repository: String,
    /// The mirrored log's id (16 hex digits of its first record's hash).
    pub log: String,
    /// The last seq recovered: events the service recorded after it, if
    /// any, were lost with its data directory.
    pub recovered_seq: u64,
    /// Mirror files read.
    pub files: u64,
}

/// The wall clock stepped: a recorded time went backwards, or jumped
/// forwards more than the tolerance, relative to the previous event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockStepped {
    /// The recorded time of the last event before the step (noticed at
    /// start), or the clock's reading at the scheduler's previous tick
    /// (noticed while running).
    pub previous_unix_ns: i64,
    /// The clock's reading when the step was noticed.
    pub now_unix_ns: i64,
}

/// The service re-read its own event log (a scrub): every record up to
/// `through_seq` was checked against its checksum, its seq and its link to
/// the record before. Recorded after every periodic scrub, whether it found
/// damage or not, so the log itself says when it was last proven whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogScrubbed {
    /// The committed seq the scrub was bounded by (records appended while
    /// it ran are checked by the next one).
    pub through_seq: u64,
    /// Events that verified, from seq 1 on.
    pub events: u64,
    /// Segments read.
    pub segments: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Hash (hex) of the last event that verified: the head an operator can
    /// compare with an exported one.
    pub head_hash: String,
    /// The seq of the first damaged or missing record, when the scrub found
    /// one (none: the log verified whole, or it could not be read at all).
    pub damaged_seq: Option<u64>,
    /// What was wrong, for humans (none: the log verified whole).
    pub problem: Option<String>,
    /// How long the scrub took, in milliseconds.
    pub took_ms: u64,
}

impl LogScrubbed {
    /// True when every event up to `through_seq` verified.
    pub fn ok(&self) -> bool {
        self.problem.is_none()
    }
}

/// The status of a security-center check. `Unknown` is never counted as
/// `Ok`, anywhere: a rollup is as weak as its weakest member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// Evaluated, and as it should be.
    Ok,
    /// Evaluated: weaker than it should be, nothing broken yet.
    Warning,
    /// Evaluated: broken or missing; raises an alert.
    Failed,
    /// Could not be evaluated (a fact is missing or unreadable).
    Unknown,
}

impl CheckStatus {
    /// Its name in the API, the metrics and the log.
    pub fn as_str(&self) -> &'static str {
        match self {
            CheckStatus::Ok => "ok",
            CheckStatus::Warning => "warning",
            CheckStatus::Failed => "failed",
            CheckStatus::Unknown => "unknown",
        }
    }

    /// Every status, in the order of the metrics' series.
    pub const ALL: [CheckStatus; 4] = [
        CheckStatus::Ok,
        CheckStatus::Warning,
        CheckStatus::Failed,
        CheckStatus::Unknown,
    ];

    /// How bad, for rollups: `Ok` < `Unknown` < `Warning` < `Failed`
    /// (unknown is never good, and a known problem is worse than an
    /// unknown state).
    pub fn badness(&self) -> u8 {
        match self {
            CheckStatus::Ok => 0,
            CheckStatus::Unknown => 1,
            CheckStatus::Warning => 2,
            CheckStatus::Failed => 3,
        }
    }
}

/// A security-center check changed its status (or its reason): recorded
/// only on a change, so the log says since when each check has been in its
/// state, and reports of a past period show the state it had then.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityCheckChanged {
    /// The check's stable id, e.g. `encryption/default` or
    /// `immutability/home`.
    pub check: String,
    /// What it checks, e.g. `encryption`.
    pub kind: String,
    /// What it is about, e.g. `repository default` (empty: the
    /// installation).
    pub subject: String,
    /// The new status.
    pub status: CheckStatus,
    /// Why, in words.
    pub reason: String,
    /// What to do (empty when nothing is to be done).
    pub action: String,
}

/// An administrator proved they hold an exported copy of a repository's
/// master key (`vouch key export`): they gave the export's check code, and
/// the service found it matches the repository's key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyExportConfirmed {
    /// The repository.
    pub repository: RepositoryId,
    /// The check code of the key (not secret: a keyed hash of it).
    pub key_check: String,
    /// The token that confirmed.
    pub by: String,
}

/// The event log's head was handed out to be recorded elsewhere (`GET
/// /api/v1/log/head`): an anchor against a rewritten history. Recorded at
/// most once an hour per token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogHeadExported {
    /// The seq of the head handed out.
    pub seq: u64,
    /// Whether a signed checkpoint went with it.
    pub signed: bool,
    /// The token that asked.
    pub by: String,
}

/// An event this build cannot read: a type it does not know or a newer
/// version of one it knows. Kept as is, shown, never counted as good.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownEvent {
    /// Its type name.
    pub event_type: String,
    /// Its schema version.
    pub schema_version: u16,
    /// Its payload, untouched.
    pub payload: Vec<u8>,
}

macro_rules! events {
    ($($variant:ident => $name:literal, v $version:literal;)*) => {
        /// Every event the log records.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Event {
            $(
                #[doc = concat!("`", $name, "` (schema version ", stringify!($version), ").")]
                $variant($variant),
            )*
            /// An event this build cannot read.
            Unknown(UnknownEvent),
        }

        /// Every event type this build writes: (name, current schema version).
        pub const EVENT_TYPES: &[(&str, u16)] = &[$(($name, $version),)*];

        impl Event {
            /// The stable type name.
            pub fn event_type(&self) -> &str {
                match self {
                    $(Event::$variant(_) => $name,)*
                    Event::Unknown(u) => &u.event_type,
                }
            }

            /// The schema version this event is (or was) written with.
            pub fn schema_version(&self) -> u16 {
                match self {
                    $(Event::$variant(_) => $version,)*
                    Event::Unknown(u) => u.schema_version,
                }
            }

            /// Encodes the payload (without type or version).
            pub(crate) fn encode_payload(&self) -> Result<Vec<u8>, rmp_serde::encode::Error> {
                match self {
                    $(Event::$variant(e) => rmp_serde::to_vec(e),)*
                    Event::Unknown(u) => Ok(u.payload.clone()),
                }
            }

            /// Decodes a payload of the current version of `event_type`;
            /// `None` if the type is unknown or the version is not current.
            pub(crate) fn decode_current(
                event_type: &str,
                version: u16,
                payload: &[u8],
            ) -> Option<Result<Event, rmp_serde::decode::Error>> {
                match (event_type, version) {
                    $(($name, $version) => Some(rmp_serde::from_slice(payload).map(Event::$variant)),)*
                    _ => None,
                }
            }
        }

        $(
            impl From<$variant> for Event {
                fn from(e: $variant) -> Event {
                    Event::$variant(e)
                }
            }
        )*
    };
}

events! {
    PlanCreated => "plan.created", v 6;
    PlanChanged => "plan.changed", v 6;
    PlanRemoved => "plan.removed", v 1;
    JobScheduled => "job.scheduled", v 3;
    JobStarted => "job.started", v 1;
    JobProgress => "job.progress", v 1;
    JobFinished => "job.finished", v 1;
    JobFailed => "job.failed", v 1;
    JobAbandoned => "job.abandoned", v 1;
    BackupCommitted => "backup.committed", v 4;
    PointDiscovered => "point.discovered", v 1;
    VerificationStarted => "verification.started", v 1;
    VerificationPassed => "verification.passed", v 1;
    VerificationFailed => "verification.failed", v 1;
    RestoreTestStarted => "restore_test.started", v 1;
    RestoreTestPassed => "restore_test.passed", v 3;
    RestoreTestFailed => "restore_test.failed", v 3;
    PointForgotten => "point.forgotten", v 1;
    PointLocked => "point.locked", v 1;
    AnomalyDetected => "anomaly.detected", v 2;
    AlertRaised => "alert.raised", v 2;
    AlertDelivered => "alert.delivered", v 1;
    AlertDeliveryFailed => "alert.delivery_failed", v 1;
    AlertResolved => "alert.resolved", v 1;
    AgentRegistered => "agent.registered", v 1;
    AgentSeen => "agent.seen", v 2;
    LeaseGranted => "agent.lease_granted", v 1;
    LeaseExpired => "agent.lease_expired", v 1;
    ServiceStarted => "service.started", v 1;
    ConfigurationChanged => "service.configuration_changed", v 1;
    PacksReadBack => "repository.read_back", v 2;
    PointVanished => "point.vanished", v 1;
    LogRepaired => "service.log_repaired", v 1;
    ClockStepped => "service.clock_stepped", v 1;
    LogScrubbed => "service.log_scrubbed", v 1;
    ActionAudited => "audit.action", v 1;
    ContentRead => "audit.content_read", v 1;
    PointUnlocked => "point.unlocked", v 1;
    AccessRefused => "audit.refused", v 1;
    RestoreCompleted => "restore.completed", v 1;
    CopyCommitted => "copy.committed", v 3;
    SecurityCheckChanged => "security.check_changed", v 1;
    KeyExportConfirmed => "key.export_confirmed", v 1;
    LogHeadExported => "log.head_exported", v 1;
    ReportDelivered => "report.delivered", v 1;
    ReportDeliveryFailed => "report.delivery_failed", v 1;
    ServiceRebuilt => "service.rebuilt", v 1;
    RepositoryPruned => "repository.pruned", v 1;
    HookFailed => "hook.failed", v 1;
}

impl Event {
    /// The point this event is about, if it is about one.
    pub fn point(&self) -> Option<SnapshotId> {
        match self {
            Event::BackupCommitted(e) => Some(e.snapshot),
            Event::CopyCommitted(e) => Some(e.snapshot),
            Event::PointDiscovered(e) => Some(e.snapshot),
            Event::VerificationStarted(e) => Some(e.point),
            Event::VerificationPassed(e) => Some(e.point),
            Event::VerificationFailed(e) => Some(e.point),
            Event::RestoreTestStarted(e) => Some(e.point),
            Event::RestoreTestPassed(e) => Some(e.point),
            Event::RestoreTestFailed(e) => Some(e.point),
            Event::PointForgotten(e) => Some(e.point),
            Event::PointLocked(e) => Some(e.point),
            Event::AnomalyDetected(e) => Some(e.point),
            Event::PointVanished(e) => Some(e.point),
            Event::ContentRead(e) => Some(e.point),
            Event::PointUnlocked(e) => Some(e.point),
            Event::RestoreCompleted(e) => Some(e.point),
            _ => None,
        }
    }
}
