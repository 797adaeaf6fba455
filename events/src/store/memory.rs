//! An in-memory read store. Clones share their content, so a "reopen" in
//! tests is a clone.

use std::sync::{Arc, Mutex, PoisonError};

use crate::error::Result;
use crate::ids::{PlanId, SnapshotId};
use crate::projection::PointState;
use crate::store::{PointRow, ReadStore, StoredSnapshot};

#[derive(Debug, Default)]
struct Inner {
    seq: u64,
    snapshot: Option<Vec<u8>>,
    rows: Vec<PointRow>,
}

/// A read store in memory.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore(Arc<Mutex<Inner>>);

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

fn sorted(mut ids: Vec<SnapshotId>) -> Vec<SnapshotId> {
    ids.sort();
    ids
}

impl ReadStore for MemoryStore {
    fn last_applied_seq(&self) -> Result<u64> {
        Ok(self.with(|i| i.seq))
    }

    fn load_snapshot(&self) -> Result<Option<StoredSnapshot>> {
        Ok(self.with(|i| {
            i.snapshot
                .clone()
                .map(|bytes| StoredSnapshot { seq: i.seq, bytes })
        }))
    }

    fn store(&self, seq: u64, snapshot: &[u8], points: &[PointRow]) -> Result<()> {
        self.with(|i| {
            i.rows = points.to_vec();
            i.snapshot = Some(snapshot.to_vec());
            i.seq = seq;
        });
        Ok(())
    }

    fn points_by_state(&self, state: PointState) -> Result<Vec<SnapshotId>> {
        Ok(sorted(self.with(|i| {
            i.rows
                .iter()
                .filter(|r| r.state == state)
                .map(|r| r.id)
                .collect()
        })))
    }

    fn points_by_plan(&self, plan: &PlanId) -> Result<Vec<SnapshotId>> {
        Ok(sorted(self.with(|i| {
            i.rows
                .iter()
                .filter(|r| r.plan.as_ref() == Some(plan))
                .map(|r| r.id)
                .collect()
        })))
    }

    fn points_between(&self, from_unix_ns: i64, to_unix_ns: i64) -> Result<Vec<SnapshotId>> {
        let mut rows: Vec<(i64, SnapshotId)> = self.with(|i| {
            i.rows
                .iter()
                .filter(|r| r.time_unix_ns >= from_unix_ns && r.time_unix_ns < to_unix_ns)
                .map(|r| (r.time_unix_ns, r.id))
                .collect()
        });
        rows.sort();
        Ok(rows.into_iter().map(|(_, id)| id).collect())
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }
}
