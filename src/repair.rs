//! `vouch repair`: rebuilds the index from the packs themselves, salvaging
//! every intact blob of a damaged pack, and removes snapshot files that do
//! not read.

use serde::Serialize;

use crate::backend::{FileKind, WriteSync};
use crate::error::Result;
use crate::format::{IndexFile, IndexPack};
use crate::id::{PackId, SnapshotId};
use crate::repo::{Repository, MAX_PACK_SIZE};

/// What `repair index` found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RepairReport {
    /// Packs indexed with every blob of their header.
    pub packs: u64,
    /// Packs whose bytes do not hash to their name, indexed with the blobs
    /// that still authenticate and hash to their ids.
    pub salvaged_packs: u64,
    /// Blobs of salvaged packs that failed their check and are not indexed.
    pub lost_blobs: u64,
    /// Packs that could not be read, or whose header does not authenticate:
    /// left out of the index and kept on storage (prune keeps them too).
    pub unreadable_packs: u64,
    /// Index files replaced.
    pub index_files_replaced: u64,
}

/// What one pack gives the rebuilt index.
enum Rebuilt {
    /// Every blob of the header.
    Whole(IndexPack),
    /// The blobs that passed their checks, and how many did not.
    Salvaged(IndexPack, u64),
    /// Nothing: it does not read.
    Unreadable(String),
}

fn rebuild_pack(repo: &Repository, name: &str, size: u64) -> Rebuilt {
    let Ok(id) = PackId::from_hex(name) else {
        return Rebuilt::Unreadable("not a pack name".into());
    };
    // A pack is at most the pack size plus one blob and its header; a file
    // far larger is not one of ours, and reading it whole could exhaust
    // memory.
    if size > 2 * MAX_PACK_SIZE {
        return Rebuilt::Unreadable(format!("{size} bytes is larger than any pack"));
    }
    let bytes = match repo.backend().read(FileKind::Pack, name) {
        Ok(b) => b,
        Err(e) => return Rebuilt::Unreadable(e.to_string()),
    };
    let record = match crate::repo::pack::read_whole(repo.key(), id, &bytes) {
        Ok(r) => r,
        Err(e) => return Rebuilt::Unreadable(e.to_string()),
    };
    if PackId::hash_of(&bytes) == id {
        return Rebuilt::Whole(record);
    }
    // Damaged somewhere: keep each blob that authenticates and hashes to
    // its id, so one bad byte costs one blob, not the whole pack.
    let mut lost = 0;
    let mut good = Vec::with_capacity(record.blobs.len());
    for entry in &record.blobs {
        let start = entry.offset as usize;
        let sealed = &bytes[start..start + entry.length as usize];
        match crate::repo::pack::open_blob(repo.key(), &record.salt, entry, sealed) {
            Ok(_) => good.push(*entry),
            Err(_) => lost += 1,
        }
    }
    Rebuilt::Salvaged(
        IndexPack {
            blobs: good,
            ..record
        },
        lost,
    )
}

/// Rebuilds the index from the pack headers alone (`vouch repair index`).
#[tracing::instrument(skip_all, fields(repo = %repo.backend().location()))]
pub fn repair_index(repo: &Repository) -> Result<RepairReport> {
    let guard = repo.lock(true, "repair index")?;
    let old: Vec<crate::id::IndexId> = repo
        .backend()
        .list(FileKind::Index)?
        .into_iter()
        .filter_map(|(n, _)| crate::id::IndexId::from_hex(&n).ok())
        .collect();
    let mut report = RepairReport::default();
    let mut packs = Vec::new();
    for (name, size) in repo.backend().list(FileKind::Pack)? {
        crate::util::check_interrupted()?;
        match rebuild_pack(repo, &name, size) {
            Rebuilt::Whole(rec) => {
                report.packs += 1;
                packs.push(rec);
            }
            Rebuilt::Salvaged(rec, lost) => {
                tracing::warn!(pack = %name, lost, kept = rec.blobs.len(), "pack is damaged; its intact blobs are indexed");
                report.salvaged_packs += 1;
                report.lost_blobs += lost;
                packs.push(rec);
            }
            Rebuilt::Unreadable(why) => {
                tracing::warn!(pack = %name, "pack does not read; left out of the index and kept: {why}");
                report.unreadable_packs += 1;
            }
        }
    }
    report.index_files_replaced = old.len() as u64;
    guard.check()?;
    repo.save_index(
        &IndexFile {
            packs,
            supersedes: old.clone(),
        },
        WriteSync::Now,
    )?;
    crate::failpoint::crash("repair-index-written");
    for id in old {
        repo.backend().delete(FileKind::Index, &id.to_hex())?;
    }
    repo.backend().sync_deletes(FileKind::Index)?;
    Ok(report)
}

/// Removes the snapshot files that do not read or authenticate (`vouch
/// repair snapshots`): a zero-length manifest after a power cut at sync
/// level `none`, say. Their data is then unreferenced, and a later prune
/// frees it. Returns the ids removed (only listed with `dry_run`).
pub fn remove_unreadable_snapshots(
    repo: &Repository,
    dry_run: bool,
) -> Result<Vec<(SnapshotId, String)>> {
    let _guard = repo.lock(false, "repair snapshots")?;
    let scan = repo.scan_snapshots()?;
    if !dry_run {
        for (id, _) in &scan.unreadable {
            repo.delete_snapshot(id)?;
        }
        repo.backend().sync_deletes(FileKind::Snapshot)?;
    }
    Ok(scan.unreadable)
}
