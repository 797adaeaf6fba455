//! The read store on sled 0.34.
//!
//! sled's flush uses `sync_file_range` on Linux, which is not durable
//! against power loss: fine here, because everything in it is derived from
//! the log and rebuilt when it is behind or broken.
//!
//! Trees: `meta` (`seq` -> u64 BE, `snapshot` -> bytes), `by_state`
//! (state byte | id), `by_plan` (plan | 0x00 | id), `by_time` (time with
//! the sign bit flipped, BE | id).

use std::path::{Path, PathBuf};

use crate::error::{EventError, Result};
use crate::ids::{PlanId, SnapshotId};
use crate::projection::PointState;
use crate::store::{PointRow, ReadStore, StoredSnapshot};

/// A read store in a sled database directory.
#[derive(Debug, Clone)]
pub struct SledStore {
    db: sled::Db,
    meta: sled::Tree,
    by_state: sled::Tree,
    by_plan: sled::Tree,
    by_time: sled::Tree,
}

fn err(e: sled::Error) -> EventError {
    EventError::Store(e.to_string())
}

fn state_byte(s: PointState) -> u8 {
    match s {
        PointState::Unknown => 0,
        PointState::Unverified => 1,
        PointState::Verified => 2,
        PointState::Recoverable => 3,
        PointState::Corrupt => 4,
        PointState::Unrecoverable => 5,
        PointState::Expired => 6,
        PointState::Vanished => 7,
    }
}

fn time_key(t: i64) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

fn id_from_suffix(key: &[u8]) -> Option<SnapshotId> {
    let tail = key.get(key.len().checked_sub(32)?..)?;
    let mut id = [0u8; 32];
    id.copy_from_slice(tail);
    Some(SnapshotId(id))
}

impl SledStore {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let db = sled::Config::new()
            .path(path.as_ref())
            .open()
            .map_err(err)?;
        Self::from_db(db)
    }

    /// Opens the store at `path`; if it fails to open, moves it aside to
    /// `<path>.broken-<n>` with a warning and starts an empty one (it is
    /// rebuilt from the log). Returns the store and where the broken one
    /// went, if anywhere.
    pub fn open_or_set_aside(path: impl AsRef<Path>) -> Result<(Self, Option<PathBuf>)> {
        let path = path.as_ref();
        match Self::open(path) {
            Ok(s) => Ok((s, None)),
            Err(e) => {
                let mut n = 0;
                let aside = loop {
                    let mut name = path.as_os_str().to_owned();
                    name.push(format!(".broken-{n}"));
                    let candidate = PathBuf::from(name);
                    if !candidate.exists() {
                        break candidate;
                    }
                    n += 1;
                };
                tracing::warn!(
                    store = %path.display(),
                    moved_to = %aside.display(),
                    error = %e,
                    "read store failed to open; set aside, rebuilding from the event log"
                );
                std::fs::rename(path, &aside)
                    .map_err(|e| EventError::io(format!("setting aside {}", path.display()), e))?;
                Ok((Self::open(path)?, Some(aside)))
            }
        }
    }

    fn from_db(db: sled::Db) -> Result<Self> {
        Ok(SledStore {
            meta: db.open_tree("meta").map_err(err)?,
            by_state: db.open_tree("by_state").map_err(err)?,
            by_plan: db.open_tree("by_plan").map_err(err)?,
            by_time: db.open_tree("by_time").map_err(err)?,
            db,
        })
    }

    fn ids(
        iter: impl Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>,
    ) -> Result<Vec<SnapshotId>> {
        let mut out = Vec::new();
        for kv in iter {
            let (k, _) = kv.map_err(err)?;
            match id_from_suffix(&k) {
                Some(id) => out.push(id),
                None => return Err(EventError::Store("index key too short".into())),
            }
        }
        Ok(out)
    }
}

impl ReadStore for SledStore {
    fn last_applied_seq(&self) -> Result<u64> {
        match self.meta.get(b"seq").map_err(err)? {
            None => Ok(0),
            Some(v) => {
                let b: [u8; 8] = v
                    .as_ref()
                    .try_into()
                    .map_err(|_| EventError::Store("seq tag is not 8 bytes".into()))?;
                Ok(u64::from_be_bytes(b))
            }
        }
    }

    fn load_snapshot(&self) -> Result<Option<StoredSnapshot>> {
        let seq = self.last_applied_seq()?;
        Ok(self
            .meta
            .get(b"snapshot")
            .map_err(err)?
            .map(|b| StoredSnapshot {
                seq,
                bytes: b.to_vec(),
            }))
    }

    fn store(&self, seq: u64, snapshot: &[u8], points: &[PointRow]) -> Result<()> {
        self.by_state.clear().map_err(err)?;
        self.by_plan.clear().map_err(err)?;
        self.by_time.clear().map_err(err)?;
        let (mut s, mut p, mut t) = (
            sled::Batch::default(),
            sled::Batch::default(),
            sled::Batch::default(),
        );
        for row in points {
            let mut k = vec![state_byte(row.state)];
            k.extend_from_slice(&row.id.0);
            s.insert(k, &[]);
            if let Some(plan) = &row.plan {
                let mut k = plan.as_str().as_bytes().to_vec();
                k.push(0);
                k.extend_from_slice(&row.id.0);
                p.insert(k, &[]);
            }
            let mut k = time_key(row.time_unix_ns).to_vec();
            k.extend_from_slice(&row.id.0);
            t.insert(k, &[]);
        }
        self.by_state.apply_batch(s).map_err(err)?;
        self.by_plan.apply_batch(p).map_err(err)?;
        self.by_time.apply_batch(t).map_err(err)?;
        // The tag goes last, with the snapshot, in one batch.
        let mut m = sled::Batch::default();
        m.insert(&b"snapshot"[..], snapshot);
        m.insert(&b"seq"[..], &seq.to_be_bytes()[..]);
        self.meta.apply_batch(m).map_err(err)?;
        Ok(())
    }

    fn points_by_state(&self, state: PointState) -> Result<Vec<SnapshotId>> {
        Self::ids(self.by_state.scan_prefix([state_byte(state)]))
    }

    fn points_by_plan(&self, plan: &PlanId) -> Result<Vec<SnapshotId>> {
        let mut prefix = plan.as_str().as_bytes().to_vec();
        prefix.push(0);
        // A plan name containing NUL could collide with a prefix; check the
        // exact length.
        let want = prefix.len() + 32;
        let ids = Self::ids(
            self.by_plan
                .scan_prefix(&prefix)
                .filter(|kv| kv.as_ref().map_or(true, |(k, _)| k.len() == want)),
        )?;
        Ok(ids)
    }

    fn points_between(&self, from_unix_ns: i64, to_unix_ns: i64) -> Result<Vec<SnapshotId>> {
        if from_unix_ns >= to_unix_ns {
            return Ok(Vec::new());
        }
        Self::ids(
            self.by_time
                .range(time_key(from_unix_ns)..time_key(to_unix_ns)),
        )
    }

    fn flush(&self) -> Result<()> {
        self.db.flush().map_err(err)?;
        Ok(())
    }
}
