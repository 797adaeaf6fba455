//! Prune: deletes packs no snapshot needs, repacks mostly-unused ones, and
//! consolidates the index. Runs under an exclusive lock, so no backup can be
//! writing; the order of writes keeps every referenced blob reachable
//! through some index at every instant (see `docs/format.md`, "Prune").
//!
//! Prune deletes data, so it first proves that it knows where everything
//! lives: it refuses to run (and points to `vouch repair index`) when an
//! index or snapshot file does not read, when a blob some snapshot needs is
//! in no index, when an indexed pack is missing or has the wrong size, or
//! when a pack that no index lists holds a blob some snapshot needs.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::backend::{FileKind, WriteSync};
use crate::error::{Error, Result};
use crate::format::{IndexFile, Manifest, NodeKind};
use crate::id::{BlobId, PackId, SnapshotId};
use crate::repo::pack::PackBuilder;
use crate::repo::{MasterIndex, Repository};

pub use crate::repair::{repair_index, RepairReport};

/// Options of prune.
#[derive(Clone, Debug)]
pub struct PruneOptions {
    /// Repack packs whose used share of bytes is below this (0..1).
    pub repack_below: f64,
    /// Only report.
    pub dry_run: bool,
    /// Packs in no index written less than this long ago are kept: a
    /// writer that holds no lock may still be about to index them.
    pub grace: Option<std::time::Duration>,
}

impl Default for PruneOptions {
    fn default() -> Self {
        Self {
            repack_below: 0.5,
            dry_run: false,
            grace: None,
        }
    }
}

/// What prune did (or would do).
#[derive(Clone, Debug, Default, Serialize)]
pub struct PruneReport {
    /// Packs before.
    pub packs_before: u64,
    /// Packs deleted because nothing in them is used.
    pub packs_deleted: u64,
    /// Packs rewritten because mostly unused.
    pub packs_repacked: u64,
    /// New packs written by repacking.
    pub packs_written: u64,
    /// Leftover packs of interrupted sessions removed.
    pub leftover_packs: u64,
    /// Packs in no index younger than the grace period: kept.
    pub young_packs_kept: u64,
    /// Packs in no index whose header does not read: kept, since prune
    /// cannot tell what they hold (`vouch repair index` salvages them).
    pub unreadable_packs_kept: u64,
    /// Index files replaced by the consolidated one and removed.
    pub index_files_removed: u64,
    /// Temporary files removed.
    pub temporary_files: u64,
    /// Bytes freed (net).
    pub bytes_freed: u64,
    /// Blobs still used.
    pub blobs_used: u64,
    /// Blobs dropped.
    pub blobs_dropped: u64,
    /// Packs of locked snapshots left as they are although mostly unused
    /// (a locked point's files stay where the storage retains them).
    pub packs_kept_for_locks: u64,
    /// Lock records removed: expired, of snapshots that are gone.
    pub lock_records_removed: u64,
    /// Files whose storage retention was checked or renewed (S3 Object
    /// Lock).
    pub files_retained: u64,
    /// Whether this was a dry run.
    pub dry_run: bool,
}

/// Every blob (trees and data) the given snapshots reference. Fails with
/// [`Error::RepairNeeded`] when one is in no index.
pub(crate) fn mark(
    repo: &Repository,
    index: &MasterIndex,
    snapshots: &[(SnapshotId, Manifest)],
) -> Result<HashSet<BlobId>> {
    let mut used: HashSet<BlobId> = HashSet::new();
    // Per blob not in the index: the first snapshot found needing it.
    let mut missing: HashMap<BlobId, SnapshotId> = HashMap::new();
    for (snap, manifest) in snapshots {
        if used.insert(manifest.tree) {
            let mut stack = vec![manifest.tree];
            while let Some(t) = stack.pop() {
                if !index.contains(&t) {
                    missing.entry(t).or_insert(*snap);
                    continue;
                }
                let tree = repo.load_tree(index, &t)?;
                for node in &tree.nodes {
                    if node.kind == NodeKind::Dir {
                        if let Some(s) = node.subtree {
                            if used.insert(s) {
                                stack.push(s);
                            }
                        }
                    }
                    for blob in node.content.iter().filter_map(|e| e.blob) {
                        if used.insert(blob) && !index.contains(&blob) {
                            missing.entry(blob).or_insert(*snap);
                        }
                    }
                }
            }
        }
    }
    if !missing.is_empty() {
        let mut snaps: Vec<String> = missing.values().map(|s| s.short()).collect();
        snaps.sort();
        snaps.dedup();
        return Err(Error::RepairNeeded(format!(
            "{} blobs that snapshots need are in no index (snapshots {}); prune would delete data it cannot see",
            missing.len(),
            snaps.join(", ")
        )));
    }
    Ok(used)
}

/// Checks that every indexed pack is on storage with the size the index
/// records.
fn check_indexed_packs(index: &MasterIndex, listing: &HashMap<PackId, u64>) -> Result<()> {
    let bad: Vec<String> = index
        .packs_not_in(listing)
        .into_iter()
        .take(10)
        .map(|p| match listing.get(&p.id) {
            Some(size) => format!("{} ({size} bytes, the index says {})", p.id.short(), p.size),
            None => format!("{} (missing)", p.id.short()),
        })
        .collect();
    if bad.is_empty() {
        return Ok(());
    }
    Err(Error::RepairNeeded(format!(
        "the index lists packs that are not on storage as indexed: {}",
        bad.join(", ")
    )))
}

/// A pack no index lists, and what prune may do with it.
enum Leftover {
    /// Its header reads and names no used blob: safe to delete.
    Garbage(String, u64),
    /// Its header does not read: kept.
    Unreadable,
}

/// Sorts the packs no index lists, refusing when one holds a used blob.
fn classify_leftovers(
    repo: &Repository,
    listing: &HashMap<String, u64>,
    index: &MasterIndex,
    used: &HashSet<BlobId>,
) -> Result<Vec<Leftover>> {
    let indexed: HashSet<String> = index.packs().iter().map(|p| p.id.to_hex()).collect();
    let mut out = Vec::new();
    for (name, &size) in listing {
        if indexed.contains(name) {
            continue;
        }
        if PackId::from_hex(name).is_err() {
            tracing::warn!(pack = %name, "a file in data/ that is not a pack is left alone");
            continue;
        }
        if size == 0 {
            // An empty pack (a power cut before its data reached the disk)
            // holds nothing anyone could salvage.
            out.push(Leftover::Garbage(name.clone(), 0));
            continue;
        }
        match crate::repo::pack::read_header(repo.backend().as_ref(), repo.key(), name, size) {
            Ok((_, header)) => {
                // `mark` already refused any used blob in no index; this
                // stays as a second line of defence: a leftover may hold
                // used blobs only if they are indexed elsewhere too (the
                // old copy of a repacked pack whose deletion a crash undid).
                if let Some(b) = header
                    .blobs
                    .iter()
                    .find(|b| used.contains(&b.id) && !index.contains(&b.id))
                {
                    return Err(Error::RepairNeeded(format!(
                        "pack {} is in no index but holds blob {}, which a snapshot needs",
                        &name[..8.min(name.len())],
                        b.id.short()
                    )));
                }
                out.push(Leftover::Garbage(name.clone(), size));
            }
            Err(e) => {
                tracing::warn!(pack = %name, "keeping a pack in no index whose header does not read: {e}");
                out.push(Leftover::Unreadable);
            }
        }
    }
    Ok(out)
}

/// Runs prune.
#[tracing::instrument(skip_all, fields(repo = %repo.backend().location(), dry_run = opts.dry_run))]
pub fn prune(repo: &Repository, opts: &PruneOptions) -> Result<PruneReport> {
    let guard = repo.lock(true, "prune")?;
    let index = repo.load_index()?;
    if let Some((id, why)) = index.unreadable.first() {
        return Err(Error::RepairNeeded(format!(
            "index file {} does not read ({why}); prune would treat its packs as unused",
            id.short()
        )));
    }
    let scan = repo.scan_snapshots()?;
    if let Some((id, why)) = scan.unreadable.first() {
        return Err(Error::SnapshotUnreadable(format!(
            "snapshot {} does not read ({why}); prune would delete the data it references",
            id.short()
        )));
    }
    let now = crate::util::now_ns();
    let locks = repo.point_locks()?;
    if let Some((name, why)) = locks.unreadable.first() {
        return Err(Error::RepairNeeded(format!(
            "point lock record {name} does not read ({why}); prune cannot tell which packs locked snapshots need kept in place"
        )));
    }
    let locked: Vec<(SnapshotId, Manifest)> = scan
        .snapshots
        .iter()
        .filter(|(id, _)| locks.in_force(id, now).is_some())
        .cloned()
        .collect();
    let listing: HashMap<String, u64> = repo.backend().list(FileKind::Pack)?.into_iter().collect();
    let by_id: HashMap<PackId, u64> = listing
        .iter()
        .filter_map(|(n, &size)| PackId::from_hex(n).ok().map(|id| (id, size)))
        .collect();
    check_indexed_packs(&index, &by_id)?;
    let used = mark(repo, &index, &scan.snapshots)?;
    let locked_packs: HashSet<PackId> = mark(repo, &index, &locked)?
        .iter()
        .filter_map(|b| index.get(b).map(|(p, _)| p.id))
        .collect();
    let mut report = PruneReport {
        dry_run: opts.dry_run,
        packs_before: index.packs().len() as u64,
        ..Default::default()
    };

    // Per pack: bytes of blobs whose kept location is this pack and are used.
    let mut used_bytes: HashMap<PackId, u64> = HashMap::new();
    let mut used_in: HashMap<PackId, Vec<BlobId>> = HashMap::new();
    for (pack, entry) in index.iter() {
        if used.contains(&entry.id) {
            *used_bytes.entry(pack.id).or_default() += u64::from(entry.length);
            used_in.entry(pack.id).or_default().push(entry.id);
        }
    }
    report.blobs_used = used.len() as u64;
    report.blobs_dropped = index.len().saturating_sub(used.len()) as u64;
    let mut delete: Vec<PackId> = Vec::new();
    let mut repack: Vec<PackId> = Vec::new();
    let mut keep: HashSet<PackId> = HashSet::new();
    for p in index.packs() {
        let u = used_bytes.get(&p.id).copied().unwrap_or(0);
        if u == 0 {
            delete.push(p.id);
        } else if (u as f64) < p.size as f64 * opts.repack_below {
            if locked_packs.contains(&p.id) {
                report.packs_kept_for_locks += 1;
                keep.insert(p.id);
            } else {
                repack.push(p.id);
            }
        } else {
            keep.insert(p.id);
        }
    }
    let leftovers = classify_leftovers(repo, &listing, &index, &used)?;
    let mut garbage: Vec<(String, u64)> = leftovers
        .iter()
        .filter_map(|l| match l {
            Leftover::Garbage(n, s) => Some((n.clone(), *s)),
            Leftover::Unreadable => None,
        })
        .collect();
    report.unreadable_packs_kept = (leftovers.len() - garbage.len()) as u64;
    if let Some(grace) = opts.grace {
        let before = garbage.len();
        let cutoff = std::time::SystemTime::now().checked_sub(grace);
        let mut kept = Vec::new();
        for (name, size) in garbage {
            // Unknown age (the backend cannot say): kept, never guessed old.
            let old = match (repo.backend().modified(FileKind::Pack, &name)?, cutoff) {
                (Some(m), Some(c)) => m <= c,
                _ => false,
            };
            if old {
                kept.push((name, size));
            }
        }
        garbage = kept;
        report.young_packs_kept = (before - garbage.len()) as u64;
    }
    report.packs_deleted = delete.len() as u64;
    report.packs_repacked = repack.len() as u64;
    report.leftover_packs = garbage.len() as u64;
    let old_index_files = index.all_files();
    report.index_files_removed = old_index_files.len() as u64;
    let size_of = |id: &PackId| index.pack(id).map(|p| p.size).unwrap_or(0);
    let freed: u64 = delete.iter().chain(&repack).map(size_of).sum::<u64>()
        + garbage.iter().map(|l| l.1).sum::<u64>();
    if opts.dry_run {
        report.bytes_freed = freed;
        return Ok(report);
    }

    // Repack: copy the used blobs of mostly-empty packs into new packs.
    let pack_size = repo.config().pack_size as usize;
    let mut new_packs = Vec::new();
    let mut written = 0u64;
    let mut builder: Option<PackBuilder> = None;
    let mut compressor = crate::backup::Compressor::new(repo.config().compression_level);
    let flush = |b: PackBuilder, new_packs: &mut Vec<_>, written: &mut u64| -> Result<()> {
        let p = b.finish();
        repo.backend().write(
            FileKind::Pack,
            &p.id.to_hex(),
            &p.bytes,
            WriteSync::Deferred,
        )?;
        *written += p.bytes.len() as u64;
        new_packs.push(p.index);
        Ok(())
    };
    for pid in &repack {
        for blob in used_in.get(pid).into_iter().flatten() {
            crate::util::check_interrupted()?;
            let Some((_, entry)) = index.get(blob) else {
                continue;
            };
            let plain = repo.read_blob(&index, blob)?;
            let (compression, stored) = compressor.compress(&plain);
            let b = builder
                .get_or_insert_with(|| PackBuilder::new(repo.key(), pack_size + pack_size / 8));
            b.try_add(entry.id, entry.kind, plain.len(), compression, stored)?;
            if b.len() >= pack_size {
                if let Some(full) = builder.take() {
                    flush(full, &mut new_packs, &mut written)?;
                }
            }
        }
    }
    if let Some(b) = builder.take().filter(|b| !b.is_empty()) {
        flush(b, &mut new_packs, &mut written)?;
    }
    report.packs_written = new_packs.len() as u64;
    report.bytes_freed = freed.saturating_sub(written);

    // New consolidated index, durable before anything is deleted. It
    // supersedes every index file present, superseded ones included, so that
    // none of them can come back to life when this one is replaced in turn.
    let mut packs = index.records_for(&keep);
    for p in &mut packs {
        p.blobs.retain(|b| used.contains(&b.id));
    }
    packs.extend(new_packs);
    repo.backend().sync_all()?;
    let new_index = IndexFile {
        packs,
        supersedes: old_index_files.clone(),
    };
    guard.check()?;
    repo.save_index(&new_index, WriteSync::Now)?;
    crate::failpoint::crash("prune-index-written");
    for (i, old) in old_index_files.iter().enumerate() {
        repo.backend().delete(FileKind::Index, &old.to_hex())?;
        if i == old_index_files.len() / 2 {
            crate::failpoint::crash("prune-index-half-deleted");
        }
    }
    repo.backend().sync_deletes(FileKind::Index)?;
    crate::failpoint::crash("prune-index-deleted");
    let doomed: Vec<&PackId> = delete.iter().chain(&repack).collect();
    for (i, id) in doomed.iter().enumerate() {
        repo.backend().delete(FileKind::Pack, &id.to_hex())?;
        if i == doomed.len() / 2 {
            crate::failpoint::crash("prune-packs-half-deleted");
        }
    }
    for (name, _) in &garbage {
        repo.backend().delete(FileKind::Pack, name)?;
    }
    repo.backend().sync_deletes(FileKind::Pack)?;
    report.temporary_files = repo.backend().remove_temporary()? as u64;
    // Lock records are inert once expired; those of snapshots that are
    // gone go (a record of a snapshot still there stays, as its history).
    let present: HashSet<SnapshotId> = scan.snapshots.iter().map(|(id, _)| *id).collect();
    for (name, r) in &locks.records {
        if r.until_ns <= now && !present.contains(&r.snapshot) {
            repo.backend().delete(FileKind::PointLock, name)?;
            report.lock_records_removed += 1;
        }
    }
    // The new index describes locked points' packs: the storage retains
    // it too.
    report.files_retained = repo.retain_locked_points(now)?;
    tracing::info!(
        deleted = report.packs_deleted,
        repacked = report.packs_repacked,
        "prune done"
    );
    Ok(report)
}
