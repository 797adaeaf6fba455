//! `vouch copy`: snapshots from one repository into another (a second copy,
//! off-host or immutable: 3-2-1).
//!
//! The repositories may have different keys, chunker parameters and
//! storage. Blob ids are keyed by each repository's key, so every blob is
//! read from the source, decrypted, hashed under the destination's key and
//! stored there unless the destination has it already; trees are rewritten
//! with the destination's ids. Chunk boundaries are the source's: copies of
//! snapshots of one source deduplicate fully against each other, and
//! against the destination's own backups only when both repositories use
//! the same chunker parameters.
//!
//! It is idempotent and resumable: a copy records its origin in its
//! manifest (`copied_from`), so a snapshot copied before is skipped; packs
//! and an index file are written as the copy goes, so a copy killed midway
//! stores nothing twice when run again. The manifest, written last, is the
//! commit: a copy either exists whole or not at all. A snapshot locked in
//! the source is locked until the same date in the destination (and
//! retained by its storage where it can: an immutable second copy).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::Serialize;

use crate::backend::{FileKind, WriteSync};
use crate::backup::Compressor;
use crate::error::Result;
use crate::format::{encode, BlobType, CopyOrigin, IndexFile, IndexPack, Manifest, Tree};
use crate::id::{BlobId, SnapshotId};
use crate::progress::Progress;

use crate::repo::pack::PackBuilder;
use crate::repo::{MasterIndex, Repository};

/// An index file is written after this many new packs (what a killed copy
/// keeps).
const PACKS_PER_INDEX: usize = 8;

/// What one snapshot's copy did.
#[derive(Clone, Debug, Serialize)]
pub struct CopiedSnapshot {
    /// The source snapshot.
    pub source: String,
    /// Its copy in the destination.
    pub copy: String,
    /// Whether it was copied now (false: a copy existed).
    pub copied: bool,
    /// Blobs stored in the destination for it.
    pub blobs_stored: u64,
    /// Blobs the destination had already.
    pub blobs_present: u64,
    /// Bytes of plaintext stored.
    pub bytes_stored: u64,
    /// The lock the copy was given (the source's, RFC 3339).
    pub locked_until: Option<String>,
}

/// Writes blobs into the destination's packs.
struct Sink<'a> {
    dst: &'a Repository,
    index: MasterIndex,
    pending: HashSet<BlobId>,
    builder: Option<PackBuilder>,
    done: Vec<IndexPack>,
    compressor: Compressor,
    watch: &'a CopyWatch,
}

/// How a caller follows and stops a copy (the service's jobs): a flag that
/// stops it at the next file, and counters of what it read (`files_done`,
/// `bytes_done`) and stored (`bytes_added`, `bytes_stored`).
#[derive(Clone, Debug, Default)]
pub struct CopyWatch {
    /// Set to stop the copy (it fails with `Error::Interrupted`).
    pub cancel: Option<Arc<AtomicBool>>,
    /// Counters, when someone reads them.
    pub progress: Option<Arc<Progress>>,
}

impl CopyWatch {
    fn check(&self) -> Result<()> {
        crate::util::check_interrupted()?;
        match &self.cancel {
            Some(flag) if flag.load(Ordering::Relaxed) => Err(crate::error::Error::Interrupted),
            _ => Ok(()),
        }
    }

    fn count(&self, pick: impl Fn(&Progress) -> &std::sync::atomic::AtomicU64, n: u64) {
        if let Some(p) = &self.progress {
            Progress::add(pick(p), n);
        }
    }
}

impl Sink<'_> {
    fn has(&self, id: &BlobId) -> bool {
        self.index.contains(id) || self.pending.contains(id)
    }

    fn add(&mut self, id: BlobId, kind: BlobType, plain: &[u8]) -> Result<()> {
        let pack_size = self.dst.config().pack_size as usize;
        let (compression, stored) = self.compressor.compress(plain);
        let b = self
            .builder
            .get_or_insert_with(|| PackBuilder::new(self.dst.key(), pack_size + pack_size / 8));
        b.try_add(id, kind, plain.len(), compression, stored)?;
        self.pending.insert(id);
        if b.len() >= pack_size {
            self.flush_pack()?;
        }
        if self.done.len() >= PACKS_PER_INDEX {
            self.flush_index()?;
        }
        Ok(())
    }

    fn flush_pack(&mut self) -> Result<()> {
        if let Some(b) = self.builder.take().filter(|b| !b.is_empty()) {
            let p = b.finish();
            self.dst.backend().write(
                FileKind::Pack,
                &p.id.to_hex(),
                &p.bytes,
                WriteSync::Deferred,
            )?;
            self.watch.count(|p| &p.bytes_stored, p.bytes.len() as u64);
            self.done.push(p.index);
        }
        Ok(())
    }

    /// Packs durable, then the index file naming them.
    fn flush_index(&mut self) -> Result<()> {
        self.flush_pack()?;
        if self.done.is_empty() {
            return Ok(());
        }
        self.dst.backend().sync_all()?;
        let packs = std::mem::take(&mut self.done);
        for p in &packs {
            self.index.add_pack(p);
        }
        self.dst.save_index(
            &IndexFile {
                packs,
                supersedes: Vec::new(),
            },
            WriteSync::Now,
        )?;
        self.pending.clear();
        Ok(())
    }
}

/// Copies one tree (and everything below it) into the sink; returns its id
/// in the destination.
fn copy_tree(
    src: &Repository,
    src_index: &MasterIndex,
    sink: &mut Sink<'_>,
    tree_id: &BlobId,
    done: &mut HashMap<BlobId, BlobId>,
    out: &mut CopiedSnapshot,
) -> Result<BlobId> {
    if let Some(id) = done.get(tree_id) {
        return Ok(*id);
    }
    let mut tree: Tree = src.load_tree(src_index, tree_id)?;
    for node in &mut tree.nodes {
        sink.watch.check()?;
        if node.subtree.is_none() {
            sink.watch.count(|p| &p.files_done, 1);
        }
        if let Some(sub) = node.subtree {
            node.subtree = Some(copy_tree(src, src_index, sink, &sub, done, out)?);
        }
        for extent in &mut node.content {
            let Some(blob) = extent.blob else { continue };
            let mapped = match done.get(&blob) {
                Some(id) => *id,
                None => {
                    let plain = src.read_blob(src_index, &blob)?;
                    sink.watch.count(|p| &p.bytes_done, plain.len() as u64);
                    let id = sink.dst.key().blob_id(&plain);
                    if sink.has(&id) {
                        out.blobs_present += 1;
                    } else {
                        sink.add(id, BlobType::Data, &plain)?;
                        sink.watch.count(|p| &p.bytes_added, plain.len() as u64);
                        out.blobs_stored += 1;
                        out.bytes_stored += plain.len() as u64;
                    }
                    done.insert(blob, id);
                    id
                }
            };
            extent.blob = Some(mapped);
        }
    }
    let bytes = encode(&tree);
    let id = sink.dst.key().blob_id(&bytes);
    if sink.has(&id) {
        out.blobs_present += 1;
    } else {
        sink.add(id, BlobType::Tree, &bytes)?;
        out.blobs_stored += 1;
        out.bytes_stored += bytes.len() as u64;
    }
    done.insert(*tree_id, id);
    Ok(id)
}

/// Copies `ids` (every snapshot when empty) from `src` to `dst`, skipping
/// those copied before; `progress` hears of each snapshot done.
pub fn copy(
    src: &Repository,
    dst: &Repository,
    ids: &[SnapshotId],
    progress: impl FnMut(&CopiedSnapshot),
) -> Result<Vec<CopiedSnapshot>> {
    copy_watched(src, dst, ids, &CopyWatch::default(), progress)
}

/// [`copy`], followed and stoppable through `watch`.
pub fn copy_watched(
    src: &Repository,
    dst: &Repository,
    ids: &[SnapshotId],
    watch: &CopyWatch,
    mut progress: impl FnMut(&CopiedSnapshot),
) -> Result<Vec<CopiedSnapshot>> {
    let _src_lock = src.lock(false, "copy (source)")?;
    let dst_lock = dst.lock(false, "copy")?;
    let origin_repo = src.config().id;
    let mut wanted: Vec<(SnapshotId, Manifest)> = src
        .list_snapshots()?
        .into_iter()
        .filter(|(id, _)| ids.is_empty() || ids.contains(id))
        .collect();
    if let Some(missing) = ids.iter().find(|id| !wanted.iter().any(|(w, _)| w == *id)) {
        return Err(crate::error::Error::NotFound(format!(
            "snapshot {} is not in {} (or does not read)",
            missing.short(),
            src.backend().location()
        )));
    }
    wanted.sort_by_key(|(_, m)| m.time_ns);
    // Copies already in the destination, by their origin.
    let copies: HashMap<SnapshotId, SnapshotId> = dst
        .list_snapshots()?
        .into_iter()
        .filter_map(|(id, m)| {
            m.copied_from
                .filter(|o| o.repository == origin_repo)
                .map(|o| (o.snapshot, id))
        })
        .collect();
    let src_index = src.load_index()?;
    let src_locks = src.point_locks()?;
    let mut sink = Sink {
        dst,
        index: dst.load_index()?,
        pending: HashSet::new(),
        builder: None,
        done: Vec::new(),
        compressor: Compressor::new(dst.config().compression_level),
        watch,
    };
    let mut mapped: HashMap<BlobId, BlobId> = HashMap::new();
    let mut out = Vec::new();
    for (id, manifest) in wanted {
        let _span = tracing::info_span!("copy", snapshot = %id.short()).entered();
        if let Some(copy) = copies.get(&id) {
            let done = CopiedSnapshot {
                source: id.to_hex(),
                copy: copy.to_hex(),
                copied: false,
                blobs_stored: 0,
                blobs_present: 0,
                bytes_stored: 0,
                locked_until: None,
            };
            progress(&done);
            out.push(done);
            continue;
        }
        let mut done = CopiedSnapshot {
            source: id.to_hex(),
            copy: String::new(),
            copied: true,
            blobs_stored: 0,
            blobs_present: 0,
            bytes_stored: 0,
            locked_until: None,
        };
        let tree = copy_tree(
            src,
            &src_index,
            &mut sink,
            &manifest.tree,
            &mut mapped,
            &mut done,
        )?;
        sink.flush_index()?;
        let copy = Manifest {
            tree,
            // The source's parent means nothing here.
            parent: None,
            copied_from: Some(CopyOrigin {
                repository: origin_repo,
                snapshot: id,
            }),
            // The source's line of rewrites means nothing here either.
            original: None,
            ..manifest
        };
        dst_lock.check()?;
        let new = dst.save_snapshot(&copy, WriteSync::Now)?;
        dst_lock.check()?;
        done.copy = new.to_hex();
        // A locked snapshot's copy is locked until the same date (and
        // retained by the destination's storage where it can).
        if let Some(until) = src_locks.in_force(&id, crate::util::now_ns()) {
            let by = format!("vouch copy from {}", src.backend().location());
            dst.lock_point(&new, until, &by)?;
            done.locked_until = Some(crate::util::rfc3339(until));
        }
        tracing::info!(copy = %new.short(), stored = done.blobs_stored, "snapshot copied");
        progress(&done);
        out.push(done);
    }
    Ok(out)
}
