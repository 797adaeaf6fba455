//! Verification: structure (every tree and blob of every snapshot resolves
//! through the index, every indexed pack exists with its size) and, with
//! `read_data`, a full read-back (each pack hashes to its name, its header
//! matches the index, each blob decrypts, decompresses and hashes to its id).
//! The report names what is damaged and which snapshots and paths it hits.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

use crate::backend::FileKind;
use crate::error::Result;
use crate::format::{BlobEntry, Node, NodeKind, Tree, PACK_TRAILER_LEN};
use crate::id::{BlobId, PackId, SnapshotId};
use crate::progress::Progress;
use crate::repo::{pack, MasterIndex, Repository};

/// Whether `pack` is in part `n` of `t` ([`VerifyOptions::part`]).
pub fn in_part(pack: &PackId, n: u64, t: u64) -> bool {
    let mut first = [0u8; 8];
    first.copy_from_slice(&pack.0[..8]);
    t > 0 && u64::from_le_bytes(first) % t == n.wrapping_sub(1)
}

/// What to check.
#[derive(Clone, Debug, Default)]
pub struct VerifyOptions {
    /// Read back data.
    pub read_data: bool,
    /// Read back only this fraction of packs (0 < f <= 1), chosen at random
    /// (with `part`: the fraction `part` reads, for reports only).
    pub subset: Option<f64>,
    /// Read back only part `n` of `t` (1 <= n <= t): the packs whose id,
    /// its first 8 bytes read as a little-endian number, is `n - 1` modulo
    /// `t`. The parts are disjoint and together cover every pack, so
    /// `1/t` .. `t/t` on successive runs read everything once.
    pub part: Option<(u64, u64)>,
    /// Reader threads (0 = automatic).
    pub threads: usize,
}

/// One problem found.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Damage {
    /// The pack concerned, if any.
    pub pack: Option<String>,
    /// The blob concerned, if any.
    pub blob: Option<String>,
    /// What is wrong.
    pub problem: String,
}

/// Where damage hits.
#[derive(Clone, Debug, Serialize)]
pub struct Affected {
    /// Snapshot id.
    pub snapshot: String,
    /// Paths in it whose content or listing is damaged (first 100).
    pub paths: Vec<String>,
    /// How many paths in all.
    pub path_count: u64,
    /// The damaged packs this snapshot's trees reach (hex, sorted).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub packs: Vec<String>,
}

/// The result of `vouch verify`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VerifyReport {
    /// Snapshots checked.
    pub snapshots: u64,
    /// Packs in the index.
    pub packs: u64,
    /// Packs read back.
    pub packs_read: u64,
    /// Bytes read back.
    pub bytes_read: u64,
    /// Blobs checked by read-back.
    pub blobs_read: u64,
    /// Packs present but in no index (leftovers; `prune` removes them).
    pub unindexed_packs: u64,
    /// Problems.
    pub damage: Vec<Damage>,
    /// Snapshots and paths affected by the damage.
    pub affected: Vec<Affected>,
    /// Wall time.
    pub duration_ms: u64,
    /// Every snapshot that was checked (read and walked), whatever its
    /// verdict: the set a per-point verdict covers.
    #[serde(skip)]
    pub checked: Vec<SnapshotId>,
    /// Snapshot files that did not read (each a damaged point).
    #[serde(skip)]
    pub unreadable_snapshots: Vec<SnapshotId>,
}

impl VerifyReport {
    /// Whether anything is damaged.
    pub fn is_damaged(&self) -> bool {
        !self.damage.is_empty()
    }
}

/// Checks the repository.
#[tracing::instrument(skip_all, fields(repo = %repo.backend().location(), read_data = opts.read_data))]
pub fn verify(
    repo: &Repository,
    opts: &VerifyOptions,
    progress: &Progress,
) -> Result<VerifyReport> {
    let started = Instant::now();
    let _guard = repo.lock(false, "verify")?;
    let index = repo.load_index()?;
    let mut report = VerifyReport {
        packs: index.packs().len() as u64,
        ..Default::default()
    };
    let mut bad_blobs: HashSet<BlobId> = HashSet::new();
    for (id, why) in &index.unreadable {
        report.damage.push(Damage {
            pack: None,
            blob: None,
            problem: format!("index file {} does not read: {why}", id.to_hex()),
        });
    }

    // Point lock records read (one that does not blocks every forget).
    for (name, why) in repo.point_locks()?.unreadable {
        report.damage.push(Damage {
            pack: None,
            blob: None,
            problem: format!("point lock record {name} does not read: {why}"),
        });
    }

    // Packs exist with their sizes.
    let on_disk: HashMap<String, u64> = repo.backend().list(FileKind::Pack)?.into_iter().collect();
    let mut bad_packs: HashSet<PackId> = HashSet::new();
    for p in index.packs() {
        match on_disk.get(&p.id.to_hex()) {
            None => {
                report.damage.push(Damage {
                    pack: Some(p.id.to_hex()),
                    blob: None,
                    problem: "pack is missing".into(),
                });
                bad_packs.insert(p.id);
            }
            Some(&size) if size != p.size => {
                report.damage.push(Damage {
                    pack: Some(p.id.to_hex()),
                    blob: None,
                    problem: format!("pack has {size} bytes, the index says {}", p.size),
                });
                bad_packs.insert(p.id);
            }
            Some(_) => {}
        }
    }
    report.unindexed_packs = on_disk
        .keys()
        .filter(|n| {
            PackId::from_hex(n)
                .map(|id| index.pack(&id).is_none())
                .unwrap_or(true)
        })
        .count() as u64;

    // Read back.
    if opts.read_data {
        let mut packs: Vec<PackId> = index
            .packs()
            .iter()
            .map(|p| p.id)
            .filter(|id| !bad_packs.contains(id))
            .collect();
        if let (Some(f), None) = (opts.subset, opts.part) {
            let salt: [u8; 8] = crate::crypto::random_array();
            packs.retain(|id| {
                let h = blake3::keyed_hash(
                    &{
                        let mut k = [0u8; 32];
                        k[..8].copy_from_slice(&salt);
                        k
                    },
                    &id.0,
                );
                let x = u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap_or([0; 8]));
                (x as f64 / u64::MAX as f64) < f
            });
        }
        if let Some((n, t)) = opts.part {
            packs.retain(|id| in_part(id, n, t));
        }
        let never = || false;
        let reads = read_packs(repo, &index, packs, opts.threads, progress, &never);
        crate::util::check_interrupted()?;
        report.damage.extend(reads.damage);
        bad_blobs.extend(reads.bad_blobs);
        report.packs_read = reads.packs;
        report.bytes_read = reads.bytes;
        report.blobs_read = reads.blobs;
    }
    for (pack_info, entry) in index.iter() {
        if bad_packs.contains(&pack_info.id) {
            bad_blobs.insert(entry.id);
        }
    }

    // Snapshots: every tree loads, every blob is indexed; map damage to paths.
    let scanned = repo.scan_snapshots()?;
    report.unreadable_snapshots = scanned.unreadable.iter().map(|(id, _)| *id).collect();
    for (id, why) in &scanned.unreadable {
        report.damage.push(Damage {
            pack: None,
            blob: None,
            problem: format!("snapshot file {} does not read: {why}", id.to_hex()),
        });
    }
    let snapshots = scanned.snapshots;
    report.snapshots = snapshots.len() as u64;
    report.checked = snapshots.iter().map(|(id, _)| *id).collect();
    let mut scan = Scan {
        repo,
        index: &index,
        bad: &bad_blobs,
        dirty: HashMap::new(),
    };
    for (sid, manifest) in &snapshots {
        if !scan.is_dirty(&manifest.tree) {
            continue;
        }
        let (paths, count, problems, packs) = affected_paths(&mut scan, sid, &manifest.tree);
        report.damage.extend(problems);
        if count > 0 {
            report.affected.push(Affected {
                snapshot: sid.to_hex(),
                paths,
                path_count: count,
                packs: packs.iter().map(PackId::to_hex).collect(),
            });
        }
    }
    report.damage.sort();
    report.damage.dedup();
    report.duration_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

/// Reads one pack and checks everything in it.
/// What reading back a set of packs found.
#[derive(Debug, Default)]
struct PackReads {
    damage: Vec<Damage>,
    bad_blobs: HashSet<BlobId>,
    packs: u64,
    bytes: u64,
    blobs: u64,
}

/// Reads back `packs` on `threads` readers (0: automatic), until done, a
/// signal, or `stop()`.
fn read_packs(
    repo: &Repository,
    index: &MasterIndex,
    packs: Vec<PackId>,
    threads: usize,
    progress: &Progress,
    stop: &(dyn Fn() -> bool + Sync),
) -> PackReads {
    let threads = crate::util::io_threads(threads);
    let mut by_pack: HashMap<PackId, Vec<BlobEntry>> = HashMap::new();
    for (p, e) in index.iter() {
        by_pack.entry(p.id).or_default().push(e);
    }
    let queue = Mutex::new(packs.into_iter());
    let found = Mutex::new(PackReads::default());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                // One buffer per thread, reused for every pack.
                let mut buf = Vec::new();
                loop {
                    if crate::util::interrupted() || stop() {
                        return;
                    }
                    let next = queue.lock().ok().and_then(|mut q| q.next());
                    let Some(id) = next else { return };
                    let listed = by_pack.get(&id).map(Vec::as_slice).unwrap_or(&[]);
                    let (damage, bad, bytes, blobs) = read_back(repo, index, &id, listed, &mut buf);
                    Progress::add(&progress.bytes_done, bytes);
                    if let Ok(mut f) = found.lock() {
                        f.damage.extend(damage);
                        f.bad_blobs.extend(bad);
                        f.packs += 1;
                        f.bytes += bytes;
                        f.blobs += blobs;
                    }
                }
            });
        }
    });
    found.into_inner().unwrap_or_default()
}

/// The slice of `of` that pack `id` falls in: its name's first 8 bytes,
/// read as a big-endian number `x`, give `floor(x * of / 2^64)` (see
/// `docs/events.md`, "Read-back window").
pub fn pack_slice(id: &PackId, of: u32) -> u32 {
    name_slice(&id.0, of)
}

/// The slice of `of` that snapshot `id`'s manifest falls in (the same
/// rule as [`pack_slice`], over the snapshot's id).
pub fn snapshot_slice(id: &SnapshotId, of: u32) -> u32 {
    name_slice(&id.0, of)
}

fn name_slice(name: &[u8; 32], of: u32) -> u32 {
    let mut head = [0u8; 8];
    head.copy_from_slice(&name[..8]);
    let x = u128::from(u64::from_be_bytes(head));
    // x < 2^64 and of < 2^32, so the result is below `of`.
    u32::try_from((x * u128::from(of)) >> 64).unwrap_or(u32::MAX)
}

/// What [`read_back_slices`] found.
#[derive(Clone, Debug, Default)]
pub struct SliceReadBack {
    /// Packs read back.
    pub packs: u64,
    /// Bytes read back.
    pub bytes_read: u64,
    /// Blobs checked.
    pub blobs_read: u64,
    /// Damage found, by slice (slices absent here read back intact).
    pub damaged: BTreeMap<u32, Vec<Damage>>,
}

/// Reads back every indexed pack in `slices` of `of` (each pack hashes to
/// its name, its header matches the index, every blob decrypts,
/// decompresses and hashes to its id), every index file (each maps blobs
/// of many packs; they are read to load the index anyway), and the
/// snapshot manifests in those slices. A pack the index lists but the
/// backend lacks is damage; so is an index file or a manifest that does
/// not decrypt (damage that names no pack: charged to every slice read).
/// `cancel()` ends it early with
/// [`Error::Interrupted`](crate::Error::Interrupted).
#[tracing::instrument(skip_all, fields(repo = %repo.backend().location(), slices = slices.len(), of))]
pub fn read_back_slices(
    repo: &Repository,
    slices: &[u32],
    of: u32,
    threads: usize,
    cancel: &(dyn Fn() -> bool + Sync),
    progress: &Progress,
) -> Result<SliceReadBack> {
    let _guard = repo.lock(false, "read-back")?;
    let index = repo.load_index()?;
    let wanted: BTreeSet<u32> = slices.iter().copied().collect();
    let packs: Vec<PackId> = index
        .packs()
        .iter()
        .map(|p| p.id)
        .filter(|id| wanted.contains(&pack_slice(id, of)))
        .collect();
    let reads = read_packs(repo, &index, packs, threads, progress, cancel);
    if cancel() {
        return Err(crate::Error::Interrupted);
    }
    crate::util::check_interrupted()?;
    let metadata = metadata_damage(repo, &index, &wanted, of)?;
    let mut damaged: BTreeMap<u32, Vec<Damage>> = BTreeMap::new();
    for d in reads.damage.into_iter().chain(metadata) {
        let slice = d
            .pack
            .as_deref()
            .and_then(|h| PackId::from_hex(h).ok())
            .map(|id| pack_slice(&id, of));
        // Damage read from a pack always names it; anything else is
        // charged to every slice read, never silently dropped.
        match slice {
            Some(k) => damaged.entry(k).or_default().push(d),
            None => {
                for &k in &wanted {
                    damaged.entry(k).or_default().push(d.clone());
                }
            }
        }
    }
    Ok(SliceReadBack {
        packs: reads.packs,
        bytes_read: reads.bytes,
        blobs_read: reads.blobs,
        damaged,
    })
}

/// The index files whose content is damaged, and the manifests in
/// `wanted` slices whose content is: damage naming no pack. A file that
/// could not be read at all (the store failing, not its bytes) fails the
/// read-back instead, to be tried again; one deleted meanwhile (a prune, a
/// forget) is no damage.
fn metadata_damage(
    repo: &Repository,
    index: &MasterIndex,
    wanted: &BTreeSet<u32>,
    of: u32,
) -> Result<Vec<Damage>> {
    let mut damage = Vec::new();
    let mut judge = |what: String, res: Result<()>| -> Result<()> {
        match res {
            Ok(()) | Err(crate::Error::NotFound(_)) => Ok(()),
            Err(crate::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(())
            }
            // A newer format is no damage: this build cannot judge it.
            Err(crate::Error::UnsupportedFormat { .. }) => Ok(()),
            Err(e @ (crate::Error::CorruptMetadata { .. } | crate::Error::Damaged(_))) => {
                damage.push(Damage {
                    pack: None,
                    blob: None,
                    problem: format!("{what}: {e}"),
                });
                Ok(())
            }
            Err(e) => Err(e),
        }
    };
    // The index skipped what did not read; read those again to tell
    // damage from a failing store.
    for (file, _) in &index.unreadable {
        let res = repo.load_index_file(file).map(|_| ());
        judge(format!("index file {}", file.to_hex()), res)?;
    }
    for (name, _) in repo.backend().list(FileKind::Snapshot)? {
        let Ok(id) = SnapshotId::from_hex(&name) else {
            continue;
        };
        if wanted.contains(&snapshot_slice(&id, of)) {
            let res = repo.load_snapshot(&id).map(|_| ());
            judge(format!("snapshot {name}"), res)?;
        }
    }
    Ok(damage)
}

fn read_back(
    repo: &Repository,
    index: &MasterIndex,
    id: &PackId,
    indexed: &[BlobEntry],
    buf: &mut Vec<u8>,
) -> (Vec<Damage>, Vec<BlobId>, u64, u64) {
    let mut damage = Vec::new();
    let all_bad = |problem: String, damage: &mut Vec<Damage>| {
        damage.push(Damage {
            pack: Some(id.to_hex()),
            blob: None,
            problem,
        });
        indexed.iter().map(|e| e.id).collect::<Vec<_>>()
    };
    let bytes = match repo.backend().read_pack_into(&id.to_hex(), buf) {
        Ok(()) => &buf[..],
        Err(e) => {
            let bad = all_bad(format!("pack unreadable: {e}"), &mut damage);
            return (damage, bad, 0, 0);
        }
    };
    let n = bytes.len() as u64;
    let mut bad = Vec::new();
    if PackId::hash_of(bytes) != *id {
        damage.push(Damage {
            pack: Some(id.to_hex()),
            blob: None,
            problem: "pack content does not hash to its name".into(),
        });
    }
    let salt = index.pack(id).map(|p| p.salt).unwrap_or_default();
    match pack::read_whole(repo.key(), *id, bytes) {
        Ok(rec) => {
            let listed: HashSet<_> = rec.blobs.iter().map(|b| (b.id, b.offset)).collect();
            for e in indexed {
                if !listed.contains(&(e.id, e.offset)) {
                    damage.push(Damage {
                        pack: Some(id.to_hex()),
                        blob: Some(e.id.to_hex()),
                        problem: "index lists a blob the pack header does not".into(),
                    });
                }
            }
        }
        Err(e) => damage.push(Damage {
            pack: Some(id.to_hex()),
            blob: None,
            problem: format!("pack header: {e}"),
        }),
    }
    let data_end = bytes.len().saturating_sub(PACK_TRAILER_LEN);
    let mut blobs = 0;
    for e in indexed {
        blobs += 1;
        let (start, end) = (e.offset as usize, e.offset as usize + e.length as usize);
        let result = if end > data_end {
            Err(crate::Error::Damaged(
                "blob extends past the pack's data".into(),
            ))
        } else {
            pack::open_blob(repo.key(), &salt, e, &bytes[start..end]).map(|_| ())
        };
        if let Err(err) = result {
            damage.push(Damage {
                pack: Some(id.to_hex()),
                blob: Some(e.id.to_hex()),
                problem: err.to_string(),
            });
            bad.push(e.id);
        }
    }
    (damage, bad, n, blobs)
}

/// Walks a snapshot; returns damaged paths (first 100), their count, and
/// structural problems (missing blobs, unreadable trees).
/// Which trees reach damage, each tree read once across all snapshots
/// (snapshots share most of their trees).
struct Scan<'a> {
    repo: &'a Repository,
    index: &'a MasterIndex,
    bad: &'a HashSet<BlobId>,
    dirty: HashMap<BlobId, bool>,
}

impl Scan<'_> {
    fn blob_bad(&self, id: &BlobId) -> bool {
        !self.index.contains(id) || self.bad.contains(id)
    }

    /// Whether anything at or below this tree is missing, unreadable or
    /// damaged (including a tree that breaks the rules of [`tree_problems`]).
    fn is_dirty(&mut self, id: &BlobId) -> bool {
        self.is_dirty_at(id, 0)
    }

    fn is_dirty_at(&mut self, id: &BlobId, depth: usize) -> bool {
        if let Some(&d) = self.dirty.get(id) {
            return d;
        }
        // Too deep is damage (and the recursion stays bounded).
        let d = depth >= crate::tree::MAX_DEPTH
            || self.blob_bad(id)
            || match self.repo.load_tree(self.index, id) {
                Err(_) => true,
                Ok(tree) => {
                    !tree_problems(self.index, id, &tree).is_empty()
                        || tree.nodes.iter().any(|n| match n.kind {
                            NodeKind::Dir => {
                                n.subtree.is_some_and(|s| self.is_dirty_at(&s, depth + 1))
                            }
                            NodeKind::File => n
                                .content
                                .iter()
                                .filter_map(|e| e.blob)
                                .any(|b| self.blob_bad(&b)),
                            _ => false,
                        })
                }
            };
        self.dirty.insert(*id, d);
        d
    }
}

/// What is wrong with one tree on its own, as (node name, problem): names
/// that are not one path component, duplicate or unsorted names
/// ([`crate::tree::check_tree`]), files whose extents do not add up to
/// their size or whose extent lengths differ from their blob's length in the
/// index, and hard-link group members in the tree whose content differs.
fn tree_problems(index: &MasterIndex, id: &BlobId, tree: &Tree) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Err(e) = crate::tree::check_tree(id, tree) {
        out.push((String::new(), e.to_string()));
    }
    let mut groups: HashMap<(u64, u64), &Node> = HashMap::new();
    for n in tree.nodes.iter().filter(|n| n.kind == NodeKind::File) {
        let name = n.display_name();
        let sum: u64 = n.content.iter().map(|e| e.length).sum();
        if sum != n.size {
            out.push((
                name.clone(),
                format!("extents hold {sum} bytes, the size is {}", n.size),
            ));
        }
        for e in &n.content {
            if let Some(entry) = e.blob.and_then(|b| index.location(&b).map(|l| l.entry(b))) {
                if u64::from(entry.raw_length) != e.length {
                    out.push((
                        name.clone(),
                        format!(
                            "an extent of {} bytes names blob {} of {} bytes",
                            e.length, entry.id, entry.raw_length
                        ),
                    ));
                }
            }
        }
        if n.links > 1 {
            match groups.get(&(n.device, n.inode)) {
                Some(first) if first.size != n.size || first.content != n.content => {
                    out.push((
                        name.clone(),
                        format!(
                            "is hard-linked (device {}, inode {}) to {:?} but its content differs",
                            n.device,
                            n.inode,
                            first.display_name()
                        ),
                    ));
                }
                Some(_) => {}
                None => {
                    groups.insert((n.device, n.inode), n);
                }
            }
        }
    }
    out
}

/// Walks a snapshot's damaged trees: paths (first 100), their count,
/// problems, and the damaged packs reached (at most one entry per damaged
/// pack, so bounded by the damage, not by the snapshot).
fn affected_paths(
    scan: &mut Scan<'_>,
    sid: &SnapshotId,
    root: &BlobId,
) -> (Vec<String>, u64, Vec<Damage>, BTreeSet<PackId>) {
    let (repo, index, bad) = (scan.repo, scan.index, scan.bad);
    let mut packs: BTreeSet<PackId> = BTreeSet::new();
    let pack_of = |b: &BlobId| index.get(b).map(|(p, _)| p.id);
    let mut paths = BTreeSet::new();
    let mut count = 0u64;
    let mut problems = Vec::new();
    // Iterative; each entry carries its depth. A crafted DAG is cut off
    // after MAX_ENTRIES visits rather than expanded exponentially.
    let mut visited = 0u64;
    let mut stack: Vec<(String, BlobId, usize)> = vec![(String::new(), *root, 0)];
    while let Some((prefix, tree_id, depth)) = stack.pop() {
        let here = if prefix.is_empty() {
            "/".to_string()
        } else {
            prefix.clone()
        };
        if !index.contains(&tree_id) {
            problems.push(Damage {
                pack: None,
                blob: Some(tree_id.to_hex()),
                problem: format!(
                    "tree of {here} in snapshot {} is not in the index",
                    sid.short()
                ),
            });
            count += 1;
            paths.insert(here);
            continue;
        }
        visited += 1;
        if visited > crate::tree::MAX_ENTRIES || depth >= crate::tree::MAX_DEPTH {
            problems.push(Damage {
                pack: None,
                blob: Some(tree_id.to_hex()),
                problem: format!(
                    "the trees of snapshot {} nest deeper than {} or expand to more than {} entries",
                    sid.short(),
                    crate::tree::MAX_DEPTH,
                    crate::tree::MAX_ENTRIES
                ),
            });
            count += 1;
            paths.insert(here);
            break;
        }
        let tree = match repo.load_tree(index, &tree_id) {
            Ok(t) => t,
            Err(e) => {
                packs.extend(pack_of(&tree_id));
                problems.push(Damage {
                    pack: None,
                    blob: Some(tree_id.to_hex()),
                    problem: format!("tree of {here} in snapshot {}: {e}", sid.short()),
                });
                count += 1;
                paths.insert(here);
                continue;
            }
        };
        let structural = tree_problems(index, &tree_id, &tree);
        for (name, problem) in &structural {
            let path = if name.is_empty() {
                here.clone()
            } else {
                format!("{prefix}/{name}")
            };
            problems.push(Damage {
                pack: None,
                blob: Some(tree_id.to_hex()),
                problem: format!("{path} in snapshot {}: {problem}", sid.short()),
            });
            count += 1;
            if paths.len() < 100 {
                paths.insert(path);
            }
        }
        if structural.iter().any(|(name, _)| name.is_empty()) {
            // Names that cannot be trusted: do not build paths from them.
            continue;
        }
        visited += tree.nodes.len() as u64;
        for node in &tree.nodes {
            let path = format!("{prefix}/{}", node.display_name());
            match node.kind {
                NodeKind::Dir => {
                    if let Some(s) = node.subtree.filter(|s| scan.is_dirty(s)) {
                        stack.push((path, s, depth + 1));
                    }
                }
                NodeKind::File => {
                    let mut hit = false;
                    for blob in node.content.iter().filter_map(|e| e.blob) {
                        if !index.contains(&blob) {
                            problems.push(Damage {
                                pack: None,
                                blob: Some(blob.to_hex()),
                                problem: format!(
                                    "content of {path} in snapshot {} is not in the index",
                                    sid.short()
                                ),
                            });
                            hit = true;
                        } else if bad.contains(&blob) {
                            packs.extend(pack_of(&blob));
                            hit = true;
                        }
                    }
                    if hit {
                        count += 1;
                        if paths.len() < 100 {
                            paths.insert(path);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    (paths.into_iter().collect(), count, problems, packs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pack(head: u64) -> PackId {
        let mut id = [0xffu8; 32];
        id[..8].copy_from_slice(&head.to_be_bytes());
        PackId(id)
    }

    #[test]
    fn slices_cut_the_name_space_into_equal_ranges() {
        assert_eq!(pack_slice(&pack(0), 4), 0);
        assert_eq!(pack_slice(&pack((1 << 62) - 1), 4), 0);
        assert_eq!(pack_slice(&pack(1 << 62), 4), 1);
        assert_eq!(pack_slice(&pack(u64::MAX), 4), 3);
        assert_eq!(pack_slice(&pack(u64::MAX), 1), 0);
        assert_eq!(pack_slice(&pack(u64::MAX), u32::MAX), u32::MAX - 1);
    }

    #[test]
    fn every_pack_falls_in_exactly_one_slice_below_of() {
        for of in [1u32, 2, 3, 7, 720, 100_000] {
            let mut counts = vec![0u32; of.min(1000) as usize];
            for i in 0..4000u64 {
                let id = PackId::hash_of(&i.to_le_bytes());
                let k = pack_slice(&id, of);
                assert!(k < of, "slice {k} of {of}");
                if let Some(c) = counts.get_mut(k as usize) {
                    *c += 1;
                }
            }
            if of <= 7 {
                // Names are hashes: the slices share them about evenly.
                let expect = 4000 / of;
                assert!(
                    counts
                        .iter()
                        .all(|&c| c > expect * 8 / 10 && c < expect * 12 / 10),
                    "{counts:?}"
                );
            }
        }
    }
}
