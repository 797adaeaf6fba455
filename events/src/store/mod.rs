//! The read store: derived, rebuildable state (the projections' snapshot)
//! behind a small trait, so the embedded store can change without touching
//! the schema, the log or the projections.
//!
//! It holds no indexes: every query is answered from the projections in
//! memory (which keep their own indexes), so writing index rows at every
//! checkpoint only cost time (review finding M4).
//!
//! Everything in a read store can be rebuilt from the log. It is tagged
//! with the seq of the last event it reflects; a store that lost writes is
//! only *behind* and catches up by replaying the log's tail; a store that
//! fails to open is set aside and rebuilt (see [`ReadModel`]).

mod memory;
mod model;
mod sled_store;

#[cfg(test)]
mod conformance;

pub use memory::MemoryStore;
pub use model::{Checkpoint, CheckpointWritten, ReadModel};
pub use sled_store::SledStore;

use crate::error::Result;

/// A snapshot of the projections and the seq it reflects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSnapshot {
    /// The seq of the last event it reflects.
    pub seq: u64,
    /// [`Projections::to_snapshot`] bytes.
    pub bytes: Vec<u8>,
}

/// A store of derived state. Implementations pass the conformance suite in
/// `store/conformance.rs`.
pub trait ReadStore: Send {
    /// The seq the store reflects (0: nothing).
    fn last_applied_seq(&self) -> Result<u64>;
    /// The latest snapshot, if any.
    fn load_snapshot(&self) -> Result<Option<StoredSnapshot>>;
    /// Replaces the snapshot with the given state of `seq`, atomically
    /// with its tag: a crash leaves the old snapshot and tag, or the new.
    fn store(&self, seq: u64, snapshot: &[u8]) -> Result<()>;
    /// Makes what was stored survive a process crash (not necessarily a
    /// power loss: it is rebuildable).
    fn flush(&self) -> Result<()>;
}
