//! `vouch stats`: how big snapshots are when restored, how much distinct
//! data they hold, and what that costs in the repository (deduplication
//! and compression), computed from the trees and the index alone.
//!
//! Each distinct tree is read once: its totals are kept by id, so a
//! directory shared by every snapshot costs one read however many
//! snapshots name it (and a crafted tree DAG cannot make the walk
//! exponential).

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::format::{BlobType, Manifest, NodeKind};
use crate::id::{BlobId, SnapshotId};
use crate::repo::{MasterIndex, Repository};
use crate::tree::MAX_DEPTH;

/// What a set of snapshots holds and costs.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Snapshots counted.
    pub snapshots: u64,
    /// Files, counted in every snapshot that holds them.
    pub files: u64,
    /// Directories, likewise.
    pub dirs: u64,
    /// Symlinks, devices, fifos and sockets, likewise.
    pub others: u64,
    /// Bytes a restore of every snapshot would write (file sizes, counted
    /// in every snapshot; holes included).
    pub restore_size: u64,
    /// Distinct file-content blobs the snapshots reference.
    pub data_blobs: u64,
    /// Their plaintext bytes: the distinct data.
    pub data_bytes: u64,
    /// Distinct tree blobs.
    pub tree_blobs: u64,
    /// Their plaintext bytes.
    pub tree_bytes: u64,
    /// Bytes the referenced blobs take in packs (compressed, encrypted).
    pub stored_bytes: u64,
    /// `restore_size / data_bytes`: how many times deduplication saves.
    pub dedup_ratio: f64,
    /// `(data_bytes + tree_bytes) / stored_bytes`: what compression saves.
    pub compression_ratio: f64,
}

/// What the whole repository holds besides its snapshots' share.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RepositoryTotals {
    /// Pack files the index lists.
    pub packs: u64,
    /// Their bytes.
    pub pack_bytes: u64,
    /// Blobs in the index.
    pub blobs: u64,
    /// Bytes of blobs in packs no snapshot references (freed by `prune`).
    pub unreferenced_bytes: u64,
}

#[derive(Clone, Copy, Default)]
struct Totals {
    files: u64,
    dirs: u64,
    others: u64,
    bytes: u64,
}

impl Totals {
    fn add(&mut self, o: Totals) {
        self.files += o.files;
        self.dirs += o.dirs;
        self.others += o.others;
        self.bytes = self.bytes.saturating_add(o.bytes);
    }
}

struct Counter<'a> {
    repo: &'a Repository,
    index: &'a MasterIndex,
    trees: HashMap<BlobId, Totals>,
    data: HashSet<BlobId>,
}

impl Counter<'_> {
    /// The totals below tree `id` (its entries, recursively), each distinct
    /// tree read once.
    fn tree(&mut self, id: &BlobId, depth: usize) -> Result<Totals> {
        if let Some(t) = self.trees.get(id) {
            return Ok(*t);
        }
        if depth > MAX_DEPTH {
            return Err(Error::Damaged(format!(
                "trees nest deeper than {MAX_DEPTH} directories below {id}"
            )));
        }
        let tree = crate::tree::load(self.repo, self.index, id)?;
        let mut totals = Totals::default();
        for node in &tree.nodes {
            match node.kind {
                NodeKind::Dir => {
                    totals.dirs += 1;
                    if let Some(sub) = &node.subtree {
                        let below = self.tree(sub, depth + 1)?;
                        totals.add(below);
                    }
                }
                NodeKind::File => {
                    totals.files += 1;
                    totals.bytes = totals.bytes.saturating_add(node.size);
                    self.data.extend(node.content.iter().filter_map(|e| e.blob));
                }
                _ => totals.others += 1,
            }
        }
        self.trees.insert(*id, totals);
        Ok(totals)
    }
}

/// The stats of `snapshots`.
pub fn stats(
    repo: &Repository,
    index: &MasterIndex,
    snapshots: &[(SnapshotId, Manifest)],
) -> Result<Stats> {
    let mut counter = Counter {
        repo,
        index,
        trees: HashMap::new(),
        data: HashSet::new(),
    };
    let mut all = Totals::default();
    for (_, m) in snapshots {
        crate::util::check_interrupted()?;
        let t = counter.tree(&m.tree, 0)?;
        all.add(t);
    }
    let mut s = Stats {
        snapshots: snapshots.len() as u64,
        files: all.files,
        dirs: all.dirs,
        others: all.others,
        restore_size: all.bytes,
        ..Stats::default()
    };
    let blobs = counter
        .data
        .iter()
        .map(|b| (b, BlobType::Data))
        .chain(counter.trees.keys().map(|b| (b, BlobType::Tree)));
    for (id, kind) in blobs {
        let Some((_, entry)) = index.get(id) else {
            return Err(Error::Damaged(format!(
                "blob {id} is referenced but in no index (run `vouch verify`)"
            )));
        };
        let raw = u64::from(entry.raw_length);
        match kind {
            BlobType::Data => {
                s.data_blobs += 1;
                s.data_bytes += raw;
            }
            BlobType::Tree => {
                s.tree_blobs += 1;
                s.tree_bytes += raw;
            }
        }
        s.stored_bytes += u64::from(entry.length);
    }
    s.dedup_ratio = ratio(s.restore_size, s.data_bytes);
    s.compression_ratio = ratio(s.data_bytes + s.tree_bytes, s.stored_bytes);
    Ok(s)
}

/// The whole repository's packs and what of them `referenced` leaves over.
pub fn repository_totals(index: &MasterIndex, referenced: &Stats) -> RepositoryTotals {
    let pack_bytes: u64 = index.packs().iter().map(|p| p.size).sum();
    let blob_bytes: u64 = index.iter().map(|(_, e)| u64::from(e.length)).sum();
    RepositoryTotals {
        packs: index.packs().len() as u64,
        pack_bytes,
        blobs: index.len() as u64,
        unreferenced_bytes: blob_bytes.saturating_sub(referenced.stored_bytes),
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}
