//! Point locks stored in the repository itself (`pointlocks/<id>`, format
//! v1 extension): a snapshot may not be forgotten before its lock's date,
//! whichever tool tries (the service, `vouch forget`, `prune`, `copy`, a
//! served repository's protocol).
//!
//! - A record is a sealed file (kind 4) holding the snapshot's id, the date,
//!   when and by whom it was written; its name is the BLAKE3 of its bytes,
//!   like every metadata file, so it cannot be altered unseen.
//! - Records are only ever added: extending a lock writes a new record, the
//!   latest date of a snapshot's records is its lock, nothing can shorten
//!   it, and a record whose date has passed is inert (prune removes it once
//!   its snapshot is gone).
//! - A record that does not read blocks every deletion of snapshots: which
//!   snapshot it protects is unknown, so none may go (`vouch verify` names
//!   it).
//! - Where the storage enforces retention (S3 Object Lock), the record, the
//!   manifest, every pack the snapshot references and every index file
//!   describing those packs carry a compliance-mode retention to the same
//!   date ([`Repository::retain_locked_points`]).
//!
//! Builds older than this extension ignore `pointlocks/`: they do not
//! honour the records (storage retention still holds).

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{check_named, sealed, Repository};
use crate::backend::{FileKind, Retained, WriteSync};
use crate::error::{Error, Result};
use crate::format::{decode, encode, SealedKind};
use crate::id::{PackId, SnapshotId};

/// The content of `pointlocks/<id>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointLockRecord {
    /// The locked snapshot.
    pub snapshot: SnapshotId,
    /// Locked until (ns since the epoch).
    pub until_ns: i64,
    /// When the record was written (ns since the epoch).
    pub created_ns: i64,
    /// Who wrote it (`user@host`, or the service's principal).
    pub by: String,
}

/// Every lock of a repository.
#[derive(Debug, Default)]
pub struct PointLocks {
    /// Per snapshot, the latest date of its records (ns).
    pub until: BTreeMap<SnapshotId, i64>,
    /// Records that do not read, with why.
    pub unreadable: Vec<(String, String)>,
    /// Every record that reads, by file name.
    pub records: Vec<(String, PointLockRecord)>,
}

impl PointLocks {
    /// The lock of `snapshot` in force at `now_ns`, if any.
    pub fn in_force(&self, snapshot: &SnapshotId, now_ns: i64) -> Option<i64> {
        self.until.get(snapshot).copied().filter(|&u| u > now_ns)
    }

    /// Fails when `snapshot` may not be deleted at `now_ns`: it is locked,
    /// or a record does not read.
    pub fn check_deletable(&self, snapshot: &SnapshotId, now_ns: i64) -> Result<()> {
        if let Some((name, why)) = self.unreadable.first() {
            return Err(Error::RepairNeeded(format!(
                "point lock record {name} does not read ({why}): which snapshot it protects is unknown, so none may be forgotten"
            )));
        }
        match self.in_force(snapshot, now_ns) {
            Some(until) => Err(Error::PointLocked(format!(
                "snapshot {} is locked until {}",
                snapshot.short(),
                crate::util::rfc3339(until)
            ))),
            None => Ok(()),
        }
    }
}

/// What locking a point did.
#[derive(Clone, Debug, Serialize)]
pub struct LockOutcome {
    /// The record written (`None` when an existing lock already reached
    /// the date).
    pub record: Option<String>,
    /// The snapshot's lock now (ns).
    pub until_ns: i64,
    /// Files the storage itself now retains to that date (0 where it
    /// cannot).
    pub files_retained: u64,
    /// Who enforces the lock.
    pub enforced_by: Retained,
}

impl Repository {
    /// Encrypts and names a record.
    fn seal_point_lock(&self, record: &PointLockRecord) -> (String, Vec<u8>) {
        let bytes = sealed::seal(&self.key, SealedKind::PointLock, &encode(record));
        (blake3::hash(&bytes).to_hex().to_string(), bytes)
    }

    /// Checks a record's name and decrypts it.
    pub fn decode_point_lock(&self, name: &str, bytes: &[u8]) -> Result<PointLockRecord> {
        let what = format!("point lock record {}", name.get(..8).unwrap_or(name));
        check_named(blake3::hash(bytes).to_hex().as_str() == name, bytes, &what)?;
        let plain = sealed::open(&self.key, SealedKind::PointLock, bytes, &what)?;
        decode(&plain).map_err(|e| Error::corrupt(what, e))
    }

    /// Every record.
    pub fn point_locks(&self) -> Result<PointLocks> {
        let mut locks = PointLocks::default();
        self.refresh_point_locks(&mut locks)?;
        Ok(locks)
    }

    /// Adds the records written since `locks` was read (one listing; only
    /// new records are read).
    pub fn refresh_point_locks(&self, locks: &mut PointLocks) -> Result<()> {
        let known: HashSet<String> = locks
            .records
            .iter()
            .map(|(n, _)| n.clone())
            .chain(locks.unreadable.iter().map(|(n, _)| n.clone()))
            .collect();
        for (name, _) in self.backend.list(FileKind::PointLock)? {
            if known.contains(&name) {
                continue;
            }
            let record = self
                .backend
                .read(FileKind::PointLock, &name)
                .and_then(|bytes| self.decode_point_lock(&name, &bytes));
            match record {
                Ok(r) => {
                    let e = locks.until.entry(r.snapshot).or_insert(r.until_ns);
                    *e = (*e).max(r.until_ns);
                    locks.records.push((name, r));
                }
                Err(e @ Error::UnsupportedFormat { .. }) => return Err(e),
                Err(e) => locks.unreadable.push((name, e.to_string())),
            }
        }
        Ok(())
    }

    /// Deletes a manifest unless a lock forbids it, reading the records
    /// written since `locks` first (a lock taken while a forget runs holds).
    pub fn delete_snapshot_checked(&self, id: &SnapshotId, locks: &mut PointLocks) -> Result<()> {
        self.refresh_point_locks(locks)?;
        locks.check_deletable(id, crate::util::now_ns())?;
        self.backend.delete(FileKind::Snapshot, &id.to_hex())
    }

    /// Locks `snapshot` until `until_ns`: writes a record (unless a lock
    /// reaching that date exists) and has the storage retain the point's
    /// files where it can. A date before the current lock is refused.
    pub fn lock_point(
        &self,
        snapshot: &SnapshotId,
        until_ns: i64,
        by: &str,
    ) -> Result<LockOutcome> {
        let now = crate::util::now_ns();
        if until_ns <= now {
            return Err(Error::InvalidArgument(format!(
                "{} is in the past: a lock must end in the future",
                crate::util::rfc3339(until_ns)
            )));
        }
        // The snapshot must exist and read.
        self.load_snapshot(snapshot)?;
        let locks = self.point_locks()?;
        let current = locks.until.get(snapshot).copied().unwrap_or(i64::MIN);
        if current > until_ns {
            return Err(Error::PointLocked(format!(
                "snapshot {} is locked until {}, later than {}: a lock cannot be shortened",
                snapshot.short(),
                crate::util::rfc3339(current),
                crate::util::rfc3339(until_ns)
            )));
        }
        let record = if current == until_ns {
            None
        } else {
            let (name, bytes) = self.seal_point_lock(&PointLockRecord {
                snapshot: *snapshot,
                until_ns,
                created_ns: now,
                by: by.to_owned(),
            });
            self.backend
                .write(FileKind::PointLock, &name, &bytes, WriteSync::Now)?;
            Some(name)
        };
        let enforced_by = self.backend.retention_support()?;
        let files_retained = if enforced_by == Retained::ByStorage {
            // The records as they are now, the one just written included.
            let mut locks = locks;
            self.refresh_point_locks(&mut locks)?;
            self.retain_points(&[(*snapshot, until_ns)], &locks)?
        } else {
            0
        };
        tracing::info!(
            snapshot = %snapshot.short(),
            until = %crate::util::rfc3339(until_ns),
            files_retained,
            "point locked"
        );
        Ok(LockOutcome {
            record,
            until_ns,
            files_retained,
            enforced_by,
        })
    }

    /// Has the storage retain every file of each point (its lock records,
    /// manifest, packs, and the index files describing those packs) until
    /// its date. The index and the index files are read once for all the
    /// points. Only called where the storage can retain; returns how many
    /// files were checked or retained.
    fn retain_points(&self, points: &[(SnapshotId, i64)], locks: &PointLocks) -> Result<u64> {
        let b = self.backend.as_ref();
        let index = self.load_index()?;
        let mut described: Vec<(String, HashSet<PackId>)> = Vec::new();
        for id in &index.files {
            let file = self.load_index_file(id)?;
            described.push((id.to_hex(), file.packs.iter().map(|p| p.id).collect()));
        }
        let mut files = 0u64;
        for (snapshot, until_ns) in points {
            let until = UNIX_EPOCH + Duration::from_nanos((*until_ns).max(0) as u64);
            let mut retain = |kind: FileKind, name: &str| -> Result<()> {
                b.retain_until(kind, name, until)?;
                files += 1;
                Ok(())
            };
            let manifest = self.load_snapshot(snapshot)?;
            retain(FileKind::Snapshot, &snapshot.to_hex())?;
            for (name, r) in &locks.records {
                if r.snapshot == *snapshot {
                    retain(FileKind::PointLock, name)?;
                }
            }
            let blobs = crate::prune::mark(self, &index, &[(*snapshot, manifest)])?;
            let packs: HashSet<PackId> = blobs
                .iter()
                .filter_map(|b| index.get(b).map(|(p, _)| p.id))
                .collect();
            let mut sorted: Vec<&PackId> = packs.iter().collect();
            sorted.sort();
            for p in sorted {
                retain(FileKind::Pack, &p.to_hex())?;
            }
            for (name, in_file) in &described {
                if !in_file.is_disjoint(&packs) {
                    retain(FileKind::Index, name)?;
                }
            }
        }
        Ok(files)
    }

    /// Renews the storage's retention of every point locked at `now_ns`
    /// (after prune rewrote the index, say). Returns the files checked.
    pub fn retain_locked_points(&self, now_ns: i64) -> Result<u64> {
        if self.backend.retention_support()? == Retained::ByVouch {
            return Ok(0);
        }
        let locks = self.point_locks()?;
        let mut points = Vec::new();
        for (snapshot, &until) in &locks.until {
            if until > now_ns
                && self
                    .backend
                    .exists(FileKind::Snapshot, &snapshot.to_hex())?
            {
                points.push((*snapshot, until));
            }
        }
        if points.is_empty() {
            return Ok(0);
        }
        self.retain_points(&points, &locks)
    }
}
