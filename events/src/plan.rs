//! What a backup plan is: source, schedule, retention, proof policy, RPO and
//! target repository.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ids::RepositoryId;
use crate::retention::KeepPolicy;

/// A backup plan's definition, as carried by `plan.created` and
/// `plan.changed`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanDefinition {
    /// What is backed up, e.g. `agent:web-1:/etc` or `pve:qemu/101`.
    pub source: String,
    /// When it runs, in the scheduler's syntax (e.g. `daily 02:00`).
    pub schedule: String,
    /// Which points are kept.
    pub retention: KeepPolicy,
    /// How and when points are verified.
    pub verification: VerificationPolicy,
    /// How and when points are restore-tested.
    pub restore_test: RestoreTestPolicy,
    /// Recovery point objective: the newest usable point must be younger.
    pub rpo: Duration,
    /// The repository the points are written to.
    pub repository: RepositoryId,
    /// Paused: the scheduler starts no backup of it (run now still works).
    /// Always written since schema v2 of the plan events; v1 events wrote it
    /// only when true (the v1 upcaster reads both shapes).
    pub paused: bool,
    /// A second copy: every new point is copied into this repository, and
    /// the copy is verified and restore-tested on its own (schema v3 of the
    /// plan events; none when upcast from v2).
    pub replica: Option<ReplicaPolicy>,
    /// How a `pve:` source's guest is dumped, and whether the dump is
    /// removed once backed up (schema v4 of the plan events; none when
    /// upcast: snapshot mode, dumps kept).
    pub proxmox: Option<ProxmoxPolicy>,
    /// When the ransomware heuristic flags a backup of this plan, lock the
    /// newest unflagged point before it for this long (a lock, never an
    /// action on the host; none: never, the default; schema v5 of the
    /// plan events, none when upcast).
    pub anomaly_lock: Option<Duration>,
    /// For a file-system source: further paths of the same host, backed up
    /// into the same point, and what is left out (schema v6 of the plan
    /// events; when upcast: nothing more and nothing left out, what a v5
    /// plan backed up).
    pub files: FileSelection,
    /// Commands the backup's host runs before and after each backup of the
    /// plan (schema v6; none when upcast).
    pub hooks: BackupHooks,
    /// The IANA time zone (`Europe/Berlin`) the schedule is read in and the
    /// retention's hours, days, weeks, months and years are counted in
    /// (schema v6; none: UTC, what every plan before it used).
    pub time_zone: Option<String>,
}

/// What a file-system backup of a plan reads and leaves out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSelection {
    /// Further absolute paths on the source's host, backed up into the same
    /// point as the source's own path (several sources, one snapshot).
    pub also: Vec<String>,
    /// Glob patterns: one with a `/` matches the absolute path, any other
    /// the file name (`*.tmp`, `/home/*/.cache`).
    pub exclude: Vec<String>,
    /// Files on the source's host with one such pattern a line.
    pub exclude_files: Vec<String>,
    /// Skip the contents of directories with a valid `CACHEDIR.TAG`.
    pub exclude_caches: bool,
    /// Stay on each path's file system (mount points are recorded empty).
    pub one_file_system: bool,
    /// Skip the contents of directories holding a file of one of these
    /// names (the marker itself is kept).
    pub exclude_if_present: Vec<String>,
    /// Leave out regular files larger than this many bytes.
    pub exclude_larger_than: Option<u64>,
}

impl FileSelection {
    /// Whether it selects exactly the source's path, nothing left out.
    pub fn is_default(&self) -> bool {
        self == &FileSelection::default()
    }
}

/// The commands run around a plan's backups.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupHooks {
    /// Run before the backup; if it fails or times out, the backup does
    /// not run and fails (`hook.failed`, then `job.failed`).
    pub pre: Option<Hook>,
    /// Run after the backup, whether it succeeded or not; its failure is
    /// recorded (`hook.failed`) and leaves the backup's outcome as it was.
    pub post: Option<Hook>,
}

/// One hook: a program the host's administrator installed in its hook
/// directory, named here, never a command line (a plan written through
/// the API cannot make a host run anything its administrator did not put
/// there).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hook {
    /// The program's file name in the host's hook directory.
    pub name: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// It is killed, and counted as failed, after this long.
    pub timeout: Duration,
}

/// Whether `name` may name a hook: a plain file name of letters, digits,
/// `.`, `_` and `-`, not starting with a dot, at most 64 bytes.
pub fn valid_hook_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// How a plan's Proxmox VE guest is dumped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxmoxPolicy {
    /// vzdump's mode.
    pub mode: DumpMode,
    /// Remove the archive from the dump storage once its snapshot is
    /// committed (false: Proxmox VE's own retention of the storage keeps
    /// or prunes it).
    pub remove_dump: bool,
}

/// How vzdump treats a running guest while it dumps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DumpMode {
    /// Live: a QEMU snapshot (or a storage snapshot of a container).
    #[default]
    Snapshot,
    /// Suspended while it is dumped.
    Suspend,
    /// Stopped while it is dumped, then started again.
    Stop,
}

impl DumpMode {
    /// vzdump's word for it (`snapshot`, `suspend`, `stop`).
    pub fn as_str(&self) -> &'static str {
        match self {
            DumpMode::Snapshot => "snapshot",
            DumpMode::Suspend => "suspend",
            DumpMode::Stop => "stop",
        }
    }

    /// The mode named `s`.
    pub fn parse(s: &str) -> Option<DumpMode> {
        [DumpMode::Snapshot, DumpMode::Suspend, DumpMode::Stop]
            .into_iter()
            .find(|m| m.as_str() == s)
    }
}

/// Where a plan's points are copied, how the copies are kept, and what the
/// plan's protection asks of them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaPolicy {
    /// The repository the copies go to (never the plan's own).
    pub repository: RepositoryId,
    /// Each copy is locked against deletion for this long after it is
    /// made (none: it keeps only the lock its source point had). In a
    /// repository whose storage retains locked files (S3 Object Lock, the
    /// immutable attribute) the lock makes the copy immutable.
    pub lock_for: Option<Duration>,
    /// What `protected` requires of the copies.
    pub require: ReplicaRequirement,
}

/// What a plan's protection requires of its copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReplicaRequirement {
    /// Nothing: the copies are shown, the plan's own points decide.
    Nothing,
    /// A copy inside the RPO that is `recoverable` with fresh restore
    /// evidence of its own.
    Proven,
    /// As `Proven`, and the copy is off this host (object storage) and
    /// locked in force by its storage (retention the store enforces, not
    /// only Vouch's tools).
    ImmutableOffHost,
}

impl ReplicaRequirement {
    /// The name used in the API (`nothing`, `proven`, `immutable-off-host`).
    pub fn as_str(&self) -> &'static str {
        match self {
            ReplicaRequirement::Nothing => "nothing",
            ReplicaRequirement::Proven => "proven",
            ReplicaRequirement::ImmutableOffHost => "immutable-off-host",
        }
    }

    /// The requirement named `s` in the API.
    pub fn parse(s: &str) -> Option<ReplicaRequirement> {
        [
            ReplicaRequirement::Nothing,
            ReplicaRequirement::Proven,
            ReplicaRequirement::ImmutableOffHost,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// How deep a verification reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum VerifyDepth {
    /// Structure only: manifests, trees and the index agree; no data read.
    Structure,
    /// Structure plus a read-back of this share of the data (1-100 %).
    ReadSample(u8),
    /// Structure plus a read-back of every byte.
    ReadAll,
}

impl VerifyDepth {
    /// How much of the point's data it reads, in per mille: 0 for
    /// `Structure`, 10 per percent of a sample, 1000 for `ReadAll`. A
    /// verification clears only a failure found at the same depth or less.
    pub fn permille(&self) -> u16 {
        match self {
            VerifyDepth::Structure => 0,
            VerifyDepth::ReadSample(p) => u16::from((*p).min(100)) * 10,
            VerifyDepth::ReadAll => 1000,
        }
    }

    /// Whether a pass at this depth is at least as deep as `other`.
    pub fn covers(&self, other: &VerifyDepth) -> bool {
        self.permille() >= other.permille()
    }
}

/// When points are verified.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerificationPolicy {
    /// Verify each point right after its backup committed.
    pub after_backup: bool,
    /// Re-verify the newest point this often (none: never again).
    pub every: Option<Duration>,
    /// How deep.
    pub depth: VerifyDepth,
}

/// When points are restore-tested, and how fresh the proof must be.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreTestPolicy {
    /// Restore-test the newest verified point this often (none: never, and
    /// the plan can then never be `protected`).
    pub every: Option<Duration>,
    /// Evidence older than this no longer makes the plan `protected`.
    pub max_evidence_age: Duration,
    /// Restore at most this many files (none: the whole tree).
    pub sample_files: Option<u64>,
    /// The proof policy: a *complete* restore test (every file) of the
    /// newest point at least this often; the tests in between are samples
    /// of `sample_files`. While the newest complete test is older than
    /// this, the plan is at best `at-risk` (none: samples suffice, and the
    /// plan's proof is marked as sampled). Schema v1 plans upcast to 7 days.
    pub full_every: Option<Duration>,
    /// Boot the restored disk of a VM point and wait for its console to
    /// show a marker (schema v4 of the plan events; none when upcast).
    pub boot: Option<BootCheck>,
}

/// A restore test that boots the restored VM.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootCheck {
    /// Text the serial console must show (default: a login prompt,
    /// `login:`), compared literally (escape sequences stripped).
    pub marker: String,
    /// How long the guest gets to show it.
    pub timeout: Duration,
    /// The guest's memory, in MiB.
    pub memory_mib: u32,
}

impl BootCheck {
    /// The default marker: a login prompt.
    pub const DEFAULT_MARKER: &'static str = "login:";
    /// The default time to the marker.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
    /// The default memory.
    pub const DEFAULT_MEMORY_MIB: u32 = 1024;
}
