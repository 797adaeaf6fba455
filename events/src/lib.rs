//! Vouch's domain vocabulary, event schema, append-only log and projections.

pub mod retention;

pub use retention::{
    apply_retention, KeepPolicy, KeepReason, RetentionCandidate, RetentionDecision,
};
