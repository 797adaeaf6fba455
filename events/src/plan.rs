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
    /// Added compatibly: absent in older events (read as `false`) and not
    /// written while `false`, so the encoding of unpaused plans is unchanged.
    #[serde(default, skip_serializing_if = "is_false")]
    pub paused: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
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
}
