//! Vouch's domain vocabulary, event schema, append-only log and projections.
//!
//! * [`retention`]: which points keep rules keep (pure).
//! * Vocabulary: ids ([`SnapshotId`], [`PlanId`], ...), [`PlanDefinition`],
//!   and every [`Event`] with its schema version ([`EVENT_TYPES`]).
//! * Persisted form: [`format`] (frozen on-disk constants and the
//!   [`PersistedEnvelope`]), [`Envelope`] (an event read back, with its
//!   sequence number and hash chain), upcasting of old versions.
//!
//! The schema and its versions are documented in `docs/events.md`.

mod clock;
mod codec;
mod error;
mod event;
pub mod format;
mod ids;
mod log;
mod plan;
pub mod retention;
mod upcast;

#[cfg(test)]
mod golden_tests;
#[cfg(test)]
mod testkit;

pub use clock::{Clock, ManualClock, SystemClock};
pub use codec::{decode_envelope, decode_event, encode_body, Envelope};
pub use error::{EventError, Result};
pub use event::{
    AgentRegistered, AgentSeen, AlertDelivered, AlertDeliveryFailed, AlertRaised, AlertResolved,
    AnomalyDetected, AnomalySignal, BackupCommitted, BackupSummary, ConfigurationChanged, Event,
    JobAbandoned, JobFailed, JobFinished, JobKind, JobProgress, JobScheduled, JobStarted,
    LeaseExpired, LeaseGranted, PlanChanged, PlanCreated, PlanRemoved, PointDiscovered,
    PointForgotten, PointLocked, RestoreEvidence, RestoreTestFailed, RestoreTestPassed,
    RestoreTestStarted, ServiceStarted, Severity, UnknownEvent, VerificationFailed,
    VerificationPassed, VerificationStarted, EVENT_TYPES,
};
pub use format::{EventHash, PersistedEnvelope, GENESIS_HASH};
pub use ids::{AgentId, AlertId, JobId, PlanId, PointId, RepositoryId, SnapshotId};
pub use log::{
    verify_chain, AppendReceipt, ChainProblem, ChainReport, EventLog, LogOptions, LogReader,
    Replay, Subscription,
};
pub use plan::{PlanDefinition, RestoreTestPolicy, VerificationPolicy, VerifyDepth};
pub use retention::{
    apply_retention, KeepPolicy, KeepReason, RetentionCandidate, RetentionDecision,
};
pub use upcast::{Upcaster, UPCASTERS};
