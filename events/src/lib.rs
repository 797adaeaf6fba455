//! Vouch's domain vocabulary, event schema, append-only log and projections.
//!
//! * [`retention`]: which points keep rules keep (pure; used by `vouch
//!   forget`).
//! * Vocabulary: ids ([`SnapshotId`], [`PlanId`], ...), [`PlanDefinition`],
//!   and every [`Event`] with its schema version ([`EVENT_TYPES`]).
//! * Persisted form: [`format`](mod@format) (frozen on-disk constants and the
//!   [`PersistedEnvelope`]), [`Envelope`] (an event read back, with its
//!   sequence number and hash chain), upcasting of old versions, unknown
//!   events kept as [`Event::Unknown`].
//! * The log: [`EventLog`] (one writer, group commit with `fdatasync`,
//!   torn-tail repair), [`SharedLog`] (group commit across threads),
//!   [`LogReader`] (replay from any seq), [`Subscription`] (follow the tail),
//!   [`verify_chain`].
//! * Projections (pure folds): [`Projections`] with points
//!   ([`PointState`]), plans ([`Protection`]), jobs, agents, alerts.
//! * The read store: [`ReadStore`] ([`SledStore`], [`MemoryStore`]) and
//!   [`ReadModel`], rebuilt from the log when behind or broken.
//! * [`Clock`]: injected time ([`SystemClock`], [`ManualClock`]).
//!
//! The schema, the log format and the lifecycle rules are documented in
//! `docs/events.md`.

mod clock;
mod codec;
mod error;
mod event;
pub mod format;
mod ids;
mod log;
mod plan;
mod projection;
pub mod retention;
pub mod sources;
mod store;
mod upcast;

#[cfg(test)]
mod golden_tests;
#[cfg(test)]
mod testkit;

pub use clock::{Clock, ManualClock, SystemClock};
pub use codec::{decode_envelope, decode_event, encode_body, Envelope};
pub use error::{EventError, Result};
pub use event::{
    AccessRefused, ActionAudited, AgentRegistered, AgentSeen, AlertDelivered, AlertDeliveryFailed,
    AlertRaised, AlertResolved, AnomalyDetected, AnomalySignal, BackupCommitted, BackupSummary,
    ChangeFigures, CheckStatus, ClockStepped, ConfigurationChanged, ContentRead, CopyCommitted,
    Event, GuestEvidence, HookFailed, HookPhase, JobAbandoned, JobFailed, JobFinished, JobKind,
    JobProgress, JobScheduled, JobSpec, JobStarted, KeyExportConfirmed, LeaseExpired, LeaseGranted,
    LockEnforcement, LogHeadExported, LogRepaired, LogScrubbed, PacksReadBack, PlanChanged,
    PlanCreated, PlanRemoved, PointDiscovered, PointForgotten, PointLocked, PointUnlocked,
    PointVanished, ReportDelivered, ReportDeliveryFailed, RepositoryPruned, RestoreCompleted,
    RestoreEvidence, RestoreSpec, RestoreTestFailed, RestoreTestPassed, RestoreTestStarted,
    SecurityCheckChanged, ServiceRebuilt, ServiceStarted, Severity, UnknownEvent,
    VerificationFailed, VerificationPassed, VerificationStarted, EVENT_TYPES,
};
pub use format::{ChainCheckpoint, EventHash, PersistedEnvelope, GENESIS_HASH};
pub use ids::{AgentId, AlertId, JobId, PlanId, PointId, RepositoryId, SnapshotId};
/// Kills the process at a named commit step when `VOUCH_FAILPOINT` names it
/// (the crash tests and the chaos runner; the engine's steps use it too).
pub use log::crash::at as crash_point;
pub use log::{
    last_record, latest_checkpoint, read_log_head, scrub, verify_chain, verify_log, AppendReceipt,
    ChainKey, ChainProblem, ChainReport, EventLog, ImportedLog, LogImporter, LogOptions, LogReader,
    LogVerifyReport, RecordRef, Replay, ScrubReport, SealKey, SharedLog, Subscription,
};
#[cfg(feature = "failpoints")]
pub use log::{SyncFault, SyncFaults};
pub use plan::{
    valid_hook_name, BackupHooks, BootCheck, DumpMode, FileSelection, Hook, PlanDefinition,
    ProxmoxPolicy, ReplicaPolicy, ReplicaRequirement, RestoreTestPolicy, VerificationPolicy,
    VerifyDepth,
};
pub use projection::{
    plan_protection, rollup, Agent, AgentsProjection, Alert, AlertsProjection, BackupOutcome, Cap,
    CopyFacts, Delivery, HeadExport, Inconsistency, Job, JobError, JobState, JobsProjection,
    KeyExport, Plan, PlanProtection, PlansProjection, Point, PointOrigin, PointState,
    PointsProjection, Projections, Protection, ReadBackProjection, Recorded, RecordedCheck,
    RepositoryReadBack, RestoreOutcome, ScrubSeen, SecurityProjection, SliceDamage, UnknownScope,
    UnknownSeen, VerificationOutcome, CLOCK_TOLERANCE_NS, PROJECTION_RULES,
    PROJECTION_SNAPSHOT_VERSION,
};
pub use retention::{
    apply_retention, apply_retention_in, KeepPolicy, KeepReason, RetentionCandidate,
    RetentionDecision,
};
pub use store::{
    Checkpoint, CheckpointWritten, MemoryStore, ReadModel, ReadStore, SledStore, StoredSnapshot,
};
pub use upcast::{pack_of_damage_line, Upcaster, UPCASTERS, V1_FULL_EVERY_SECS};
