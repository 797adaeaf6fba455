//! Prune: deletes packs no snapshot needs, repacks mostly-unused ones, and
//! consolidates the index. Runs under an exclusive lock, so no backup can be
//! writing; the order of writes keeps every referenced blob reachable
//! through some index at every instant (see `docs/format.md`).

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::backend::{FileKind, WriteSync};
use crate::error::Result;
use crate::format::{IndexFile, NodeKind};
use crate::id::{BlobId, PackId};
use crate::repo::pack::PackBuilder;
use crate::repo::{lock, Repository};

/// Options of prune.
#[derive(Clone, Debug)]
pub struct PruneOptions {
    /// Repack packs whose used share of bytes is below this (0..1).
    pub repack_below: f64,
    /// Only report.
    pub dry_run: bool,
}

impl Default for PruneOptions {
    fn default() -> Self {
        Self {
            repack_below: 0.5,
            dry_run: false,
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
    /// Temporary files removed.
    pub temporary_files: u64,
    /// Bytes freed (net).
    pub bytes_freed: u64,
    /// Blobs still used.
    pub blobs_used: u64,
    /// Blobs dropped.
    pub blobs_dropped: u64,
    /// Whether this was a dry run.
    pub dry_run: bool,
}

/// Runs prune.
#[tracing::instrument(skip_all, fields(repo = %repo.backend().location(), dry_run = opts.dry_run))]
pub fn prune(repo: &Repository, opts: &PruneOptions) -> Result<PruneReport> {
    let guard = lock::acquire(repo.backend().clone(), true, "prune")?;
    let index = repo.load_index()?;
    let mut report = PruneReport {
        dry_run: opts.dry_run,
        packs_before: index.packs().len() as u64,
        ..Default::default()
    };

    // Mark.
    let mut used: HashSet<BlobId> = HashSet::new();
    for (_, manifest) in repo.list_snapshots()? {
        used.insert(manifest.tree);
        let mut stack = vec![manifest.tree];
        while let Some(t) = stack.pop() {
            let tree = repo.load_tree(&index, &t)?;
            for node in &tree.nodes {
                if node.kind == NodeKind::Dir {
                    if let Some(s) = node.subtree {
                        if used.insert(s) {
                            stack.push(s);
                        }
                    }
                }
                used.extend(node.content.iter().filter_map(|e| e.blob));
            }
        }
    }

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
            repack.push(p.id);
        } else {
            keep.insert(p.id);
        }
    }
    let indexed: HashSet<String> = index.packs().iter().map(|p| p.id.to_hex()).collect();
    let leftovers: Vec<(String, u64)> = repo
        .backend()
        .list(FileKind::Pack)?
        .into_iter()
        .filter(|(n, _)| !indexed.contains(n))
        .collect();
    report.packs_deleted = delete.len() as u64;
    report.packs_repacked = repack.len() as u64;
    report.leftover_packs = leftovers.len() as u64;
    let size_of = |id: &PackId| index.pack(id).map(|p| p.size).unwrap_or(0);
    let freed: u64 = delete.iter().chain(&repack).map(size_of).sum::<u64>()
        + leftovers.iter().map(|l| l.1).sum::<u64>();
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
            let entry = *entry;
            let plain = repo.read_blob(&index, blob)?;
            let b = builder
                .get_or_insert_with(|| PackBuilder::new(repo.key(), pack_size + pack_size / 8));
            let (compression, stored) = compressor.compress(&plain);
            b.add(entry.id, entry.kind, plain.len(), compression, stored);
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

    // New consolidated index, durable before anything is deleted.
    let mut packs = index.records_for(&keep);
    for p in &mut packs {
        p.blobs.retain(|b| used.contains(&b.id));
    }
    packs.extend(new_packs);
    repo.backend().sync_all()?;
    let new_index = IndexFile {
        packs,
        supersedes: index.files.clone(),
    };
    guard.check()?;
    repo.save_index(&new_index, WriteSync::Now)?;
    for old in &index.files {
        repo.backend().delete(FileKind::Index, &old.to_hex())?;
    }
    for id in delete.iter().chain(&repack) {
        repo.backend().delete(FileKind::Pack, &id.to_hex())?;
    }
    for (name, _) in &leftovers {
        repo.backend().delete(FileKind::Pack, name)?;
    }
    report.temporary_files = repo.backend().remove_temporary()? as u64;
    tracing::info!(
        deleted = report.packs_deleted,
        repacked = report.packs_repacked,
        "prune done"
    );
    Ok(report)
}

/// Rebuilds the index from the pack headers alone (`vouch repair index`).
pub fn repair_index(repo: &Repository) -> Result<(u64, u64)> {
    let _guard = lock::acquire(repo.backend().clone(), true, "repair index")?;
    let old: Vec<crate::id::IndexId> = repo
        .backend()
        .list(FileKind::Index)?
        .into_iter()
        .filter_map(|(n, _)| crate::id::IndexId::from_hex(&n).ok())
        .collect();
    let mut packs = Vec::new();
    let mut unreadable = 0u64;
    for (name, _) in repo.backend().list(FileKind::Pack)? {
        let Ok(id) = PackId::from_hex(&name) else {
            continue;
        };
        let bytes = repo.backend().read(FileKind::Pack, &name)?;
        match crate::repo::pack::read_whole(repo.key(), id, &bytes) {
            Ok(rec) if PackId::hash_of(&bytes) == id => packs.push(rec),
            Ok(_) | Err(_) => {
                tracing::warn!(pack = %name, "pack is damaged; left out of the rebuilt index");
                unreadable += 1;
            }
        }
    }
    let n = packs.len() as u64;
    repo.save_index(
        &IndexFile {
            packs,
            supersedes: old.clone(),
        },
        WriteSync::Now,
    )?;
    for id in old {
        repo.backend().delete(FileKind::Index, &id.to_hex())?;
    }
    Ok((n, unreadable))
}
