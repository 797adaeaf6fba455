//! An in-memory read store. Clones share their content, so a "reopen" in
//! tests is a clone.

use std::sync::{Arc, Mutex, PoisonError};

use crate::error::Result;
use crate::store::{ReadStore, StoredSnapshot};

#[derive(Debug, Default)]
struct Inner {
    seq: u64,
    snapshot: Option<Vec<u8>>,
    stores: u64,
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

    /// How many snapshots were stored (tests: checkpoints skipped or not).
    pub fn stores(&self) -> u64 {
        self.with(|i| i.stores)
    }
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

    fn store(&self, seq: u64, snapshot: &[u8]) -> Result<()> {
        self.with(|i| {
            i.snapshot = Some(snapshot.to_vec());
            i.seq = seq;
            i.stores += 1;
        });
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }
}
