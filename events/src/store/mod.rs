//! The read store: derived, rebuildable state (projection snapshots and
//! point indexes) behind a small trait, so the embedded store can change
//! without touching the schema, the log or the projections.
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
pub use model::ReadModel;
pub use sled_store::SledStore;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::ids::{PlanId, SnapshotId};
use crate::projection::{PointState, Projections};

/// One point, as the indexes see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointRow {
    /// The point.
    pub id: SnapshotId,
    /// Its plan.
    pub plan: Option<PlanId>,
    /// Its state.
    pub state: PointState,
    /// The snapshot's own time.
    pub time_unix_ns: i64,
}

impl PointRow {
    /// The rows of every point of `p`.
    pub fn all(p: &Projections) -> Vec<PointRow> {
        p.points
            .points
            .values()
            .map(|pt| PointRow {
                id: pt.id,
                plan: pt.plan.clone(),
                state: pt.state,
                time_unix_ns: pt.snapshot_time_unix_ns,
            })
            .collect()
    }
}

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
    /// Replaces the snapshot and every index with the given state of `seq`.
    /// The seq tag is written last: a crash in between leaves the store
    /// tagged behind, never ahead.
    fn store(&self, seq: u64, snapshot: &[u8], points: &[PointRow]) -> Result<()>;
    /// Points in `state`, by id.
    fn points_by_state(&self, state: PointState) -> Result<Vec<SnapshotId>>;
    /// Points of `plan`, by id.
    fn points_by_plan(&self, plan: &PlanId) -> Result<Vec<SnapshotId>>;
    /// Points whose snapshot time is in `[from, to)`, oldest first.
    fn points_between(&self, from_unix_ns: i64, to_unix_ns: i64) -> Result<Vec<SnapshotId>>;
    /// Makes what was stored survive a process crash (not necessarily a
    /// power loss: it is rebuildable).
    fn flush(&self) -> Result<()>;
}
