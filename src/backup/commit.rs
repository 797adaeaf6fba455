//! The commit protocol of a backup: the session's index, everything made
//! durable, the lock checked, the manifest (the commit marker) written, and
//! the lock checked again (see `docs/format.md`, "Commit").

use crate::backend::{FileKind, WriteSync};
use crate::error::Result;
use crate::format::{IndexFile, IndexPack, Manifest};
use crate::id::{IndexId, SnapshotId};
use crate::repo::lock::LockGuard;
use crate::repo::Repository;

use super::SyncLevel;

/// Commits a backup whose packs are all written: returns the snapshot id.
///
/// Order, at levels `filesystem` and `file`:
/// 1. packs are on storage (written by the pack writer; at level `file`
///    each was fsynced);
/// 2. one `sync_all` makes them durable (level `filesystem`);
/// 3. the session's index files (one per [`INDEX_FILE_BLOBS`] blobs) are
///    written, each with an fsync *before* its rename, so a power cut never
///    leaves an empty index file;
/// 4. the lock is checked: a writer that lost it (judged stale while
///    paused or stalled) stops here with nothing committed;
/// 5. the manifest is written and made durable;
/// 6. the lock is checked again: if it was lost while the manifest was
///    being written (a storage stall long enough for a prune elsewhere to
///    take over), the manifest and the session's index are removed again and
///    the backup fails, so no snapshot ever names packs a prune removed.
pub fn commit(
    repo: &Repository,
    guard: &LockGuard,
    packs: &[IndexPack],
    manifest: &Manifest,
    sync: SyncLevel,
) -> Result<SnapshotId> {
    let (data_sync, marker_sync) = match sync {
        SyncLevel::None => (WriteSync::Deferred, WriteSync::Deferred),
        SyncLevel::Filesystem | SyncLevel::File => (WriteSync::Now, WriteSync::Now),
    };
    if sync == SyncLevel::Filesystem {
        repo.backend().sync_all()?;
    }
    let mut index: Vec<IndexId> = Vec::new();
    for part in index_parts(packs) {
        let file = IndexFile {
            packs: part.to_vec(),
            supersedes: Vec::new(),
        };
        match repo.save_index(&file, data_sync) {
            Ok(id) => index.push(id),
            Err(e) => {
                undo(repo, None, &index);
                return Err(e);
            }
        }
    }
    crate::failpoint::crash("backup-index-written");
    if let Err(e) = guard.check() {
        undo(repo, None, &index);
        return Err(e);
    }
    let snapshot = repo.save_snapshot(manifest, marker_sync)?;
    crate::failpoint::crash("backup-manifest-written");
    if let Err(e) = guard.check() {
        tracing::error!(snapshot = %snapshot.short(), "the lock was lost while the snapshot was written; removing it again");
        undo(repo, Some(snapshot), &index);
        return Err(e);
    }
    Ok(snapshot)
}

/// Most blobs one index file of a backup lists (a pack with more goes alone).
/// A million-file backup thus writes 16 files of about 3 MB instead of one
/// of 100 MB, whose encoding and compression alone held 300 MB at once.
pub const INDEX_FILE_BLOBS: usize = 65_536;

/// `packs` cut into runs of whole packs of at most [`INDEX_FILE_BLOBS`]
/// blobs each.
fn index_parts(packs: &[IndexPack]) -> Vec<&[IndexPack]> {
    let mut parts = Vec::new();
    let (mut start, mut blobs) = (0, 0);
    for (i, p) in packs.iter().enumerate() {
        if i > start && blobs + p.blobs.len() > INDEX_FILE_BLOBS {
            parts.push(&packs[start..i]);
            (start, blobs) = (i, 0);
        }
        blobs += p.blobs.len();
    }
    if start < packs.len() {
        parts.push(&packs[start..]);
    }
    parts
}

/// Removes what a session that lost its lock (or failed to write all its
/// index files) wrote of its commit: its manifest (which may name packs a
/// prune removed) and its index files (which may describe them), durably.
/// Failures are logged: the error that stopped the commit is what the
/// caller reports.
fn undo(repo: &Repository, snapshot: Option<SnapshotId>, index: &[IndexId]) {
    let backend = repo.backend();
    if let Some(s) = snapshot {
        let r = backend
            .delete(FileKind::Snapshot, &s.to_hex())
            .and_then(|()| backend.sync_deletes(FileKind::Snapshot));
        if let Err(e) = r {
            tracing::error!(snapshot = %s.short(), "could not remove the uncommitted snapshot: {e}; remove snapshots/{} by hand", s.to_hex());
        }
    }
    for i in index {
        if let Err(e) = backend.delete(FileKind::Index, &i.to_hex()) {
            tracing::warn!(index = %i.short(), "could not remove the session's index file: {e}; `vouch repair index` rebuilds the index");
        }
    }
    if !index.is_empty() {
        if let Err(e) = backend.sync_deletes(FileKind::Index) {
            tracing::warn!("could not make the removal of the session's index files durable: {e}; `vouch repair index` rebuilds the index");
        }
    }
}

/// Drops from `index` the packs that are not on storage with their indexed
/// size, with a warning: their blobs are then stored again by this backup
/// instead of being deduplicated against data that is gone.
pub fn drop_missing_packs(repo: &Repository, index: &mut crate::repo::MasterIndex) -> Result<()> {
    let listing = repo
        .backend()
        .list(FileKind::Pack)?
        .into_iter()
        .filter_map(|(n, size)| crate::id::PackId::from_hex(&n).ok().map(|id| (id, size)))
        .collect();
    let missing = index.drop_packs_not_in(&listing);
    if !missing.is_empty() {
        tracing::warn!(
            packs = missing.len(),
            first = %missing[0].short(),
            "the index lists packs that are missing or damaged on storage; their blobs will be stored again (run `vouch repair index`, then `vouch verify`)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{BlobEntry, BlobType, Compression};
    use crate::id::{BlobId, PackId};

    fn pack(n: usize) -> IndexPack {
        let e = BlobEntry {
            id: BlobId([0; 32]),
            kind: BlobType::Data,
            offset: 0,
            length: 1,
            raw_length: 1,
            compression: Compression::None,
        };
        IndexPack {
            id: PackId([n as u8; 32]),
            size: 1,
            salt: Default::default(),
            blobs: vec![e; n],
        }
    }

    #[test]
    fn index_files_hold_whole_packs_and_at_most_the_limit_unless_one_pack_is_larger() {
        let packs: Vec<IndexPack> = [40_000, 20_000, 10_000, 70_000, 1, 65_535]
            .into_iter()
            .map(pack)
            .collect();
        let parts = index_parts(&packs);
        let sizes: Vec<Vec<usize>> = parts
            .iter()
            .map(|p| p.iter().map(|x| x.blobs.len()).collect())
            .collect();
        assert_eq!(
            sizes,
            vec![
                vec![40_000, 20_000],
                vec![10_000],
                vec![70_000],
                vec![1, 65_535]
            ]
        );
        assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), packs.len());
        assert!(index_parts(&[]).is_empty());
    }
}
