//! The read store on sled 0.34.
//!
//! sled's flush uses `sync_file_range` on Linux, which is not durable
//! against power loss: fine here, because everything in it is derived from
//! the log and rebuilt when it is behind or broken.
//!
//! One tree, `meta`: `seq` -> u64 BE and `snapshot` -> bytes, written
//! together in one batch. (Stores written before the indexes were dropped
//! also have `by_state`, `by_plan` and `by_time` trees: they are dropped
//! at open.)

use std::path::{Path, PathBuf};

use crate::error::{EventError, Result};
use crate::store::{ReadStore, StoredSnapshot};

/// A read store in a sled database directory.
#[derive(Debug, Clone)]
pub struct SledStore {
    db: sled::Db,
    meta: sled::Tree,
}

/// Trees of the indexes older builds wrote at every checkpoint.
const OLD_INDEXES: [&[u8]; 3] = [b"by_state", b"by_plan", b"by_time"];

fn err(e: sled::Error) -> EventError {
    EventError::Store(e.to_string())
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
        let names = db.tree_names();
        for old in OLD_INDEXES {
            if names.iter().any(|n| n.as_ref() == old) {
                db.drop_tree(old).map_err(err)?;
            }
        }
        Ok(SledStore {
            meta: db.open_tree("meta").map_err(err)?,
            db,
        })
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

    fn store(&self, seq: u64, snapshot: &[u8]) -> Result<()> {
        let mut m = sled::Batch::default();
        m.insert(&b"snapshot"[..], snapshot);
        m.insert(&b"seq"[..], &seq.to_be_bytes()[..]);
        self.meta.apply_batch(m).map_err(err)?;
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        self.db.flush().map_err(err)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_written_by_a_build_with_indexes_keeps_its_snapshot_and_loses_the_indexes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("store");
        {
            let db = sled::Config::new().path(&path).open().expect("open");
            let meta = db.open_tree("meta").expect("meta");
            meta.insert(b"snapshot", &b"old"[..]).expect("insert");
            meta.insert(b"seq", &7u64.to_be_bytes()[..])
                .expect("insert");
            for t in OLD_INDEXES {
                db.open_tree(t)
                    .expect("tree")
                    .insert(b"k", &b""[..])
                    .expect("insert");
            }
            db.flush().expect("flush");
        }
        let s = SledStore::open(&path).expect("open");
        let snap = s.load_snapshot().expect("load").expect("some");
        assert_eq!((snap.seq, snap.bytes.as_slice()), (7, &b"old"[..]));
        let names = s.db.tree_names();
        for t in OLD_INDEXES {
            assert!(!names.iter().any(|n| n.as_ref() == t), "{t:?} dropped");
        }
    }
}
