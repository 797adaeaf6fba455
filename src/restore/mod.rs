//! The recovery engine: restores a snapshot (or a path in it) into a
//! directory. Packs are read in parallel, each about once; every blob is
//! checked against its id before it is written. An interrupted restore
//! resumes with the same command: a marker file names the snapshot being
//! restored, and on the next run every existing file is checked extent by
//! extent against its content ids, so only what is missing is fetched.

mod meta;

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};

use crate::backend::FileKind;
use crate::error::{Error, IoContext, Result};
use crate::format::{BlobEntry, Node, NodeKind};
use crate::id::{BlobId, SnapshotId};
use crate::progress::Progress;
use crate::repo::{lock, MasterIndex, Repository};

/// Name of the marker of an unfinished restore, in the target directory.
pub const MARKER: &str = ".vouch-restore-in-progress";

/// Options of one restore.
#[derive(Clone, Debug, Default)]
pub struct RestoreOptions {
    /// Where to restore.
    pub target: PathBuf,
    /// Path inside the snapshot (default: everything).
    pub subpath: Option<String>,
    /// Restore only paths matching these globs (and what is below them).
    pub includes: Vec<String>,
    /// Skip paths matching these globs (and what is below them).
    pub excludes: Vec<String>,
    /// Replace what is in a non-empty target.
    pub overwrite: bool,
    /// Re-read and re-hash every restored file afterwards.
    pub verify: bool,
    /// Pack reader threads (0 = automatic).
    pub threads: usize,
}

/// What a restore did.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RestoreSummary {
    /// Files restored (including those found complete).
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Symlinks, fifos, devices, hard links.
    pub others: u64,
    /// Bytes of file content in the restored set.
    pub total_bytes: u64,
    /// Bytes written now.
    pub bytes_written: u64,
    /// Bytes found already in place (resume).
    pub bytes_reused: u64,
    /// Whether the run resumed an interrupted restore.
    pub resumed: bool,
    /// Files re-hashed by `--verify`.
    pub files_verified: u64,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// Entries that could not be recreated (devices as non-root, sockets).
    pub warnings: Vec<String>,
}

/// The blobs needed from one pack, each with the (item, offset) places it goes.
type PackWork = Vec<(BlobEntry, Vec<(usize, u64)>)>;

#[derive(Serialize, Deserialize)]
struct Marker {
    snapshot: SnapshotId,
    subpath: Option<String>,
}

/// One entry to recreate.
struct Item {
    path: PathBuf,
    /// Snapshot path, for filters and messages.
    node: Node,
}

struct Filter {
    include: Option<GlobSet>,
    exclude: Option<GlobSet>,
}

fn globset(patterns: &[String]) -> Result<Option<GlobSet>> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let p = if p.starts_with('/') {
            p.clone()
        } else {
            format!("**/{p}")
        };
        b.add(
            Glob::new(&p).map_err(|e| Error::InvalidArgument(format!("bad pattern {p:?}: {e}")))?,
        );
    }
    b.build()
        .map(Some)
        .map_err(|e| Error::InvalidArgument(e.to_string()))
}

impl Filter {
    /// Whether `path` (absolute in the snapshot) or an ancestor matches.
    fn matches_self_or_ancestor(set: &GlobSet, path: &Path) -> bool {
        path.ancestors()
            .any(|a| a != Path::new("/") && set.is_match(a))
    }

    fn excluded(&self, path: &Path) -> bool {
        matches!(&self.exclude, Some(set) if Self::matches_self_or_ancestor(set, path))
    }

    fn included(&self, path: &Path) -> bool {
        match &self.include {
            None => true,
            Some(set) => Self::matches_self_or_ancestor(set, path),
        }
    }
}

fn target_state(
    target: &Path,
    snapshot: &SnapshotId,
    subpath: &Option<String>,
    overwrite: bool,
) -> Result<bool> {
    let mut entries = match fs::read_dir(target) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io(format!("reading {}", target.display()), e)),
    };
    if entries.next().is_none() {
        return Ok(false);
    }
    if let Ok(bytes) = fs::read(target.join(MARKER)) {
        if let Ok(m) = serde_json::from_slice::<Marker>(&bytes) {
            if m.snapshot == *snapshot && m.subpath == *subpath {
                return Ok(true);
            }
        }
    }
    if overwrite {
        Ok(true)
    } else {
        Err(Error::TargetNotEmpty(target.to_path_buf()))
    }
}

/// Restores `snapshot` into `opts.target`.
#[tracing::instrument(skip_all, fields(snapshot = %snapshot.short(), target = %opts.target.display()))]
pub fn restore(
    repo: &Repository,
    snapshot: &SnapshotId,
    opts: &RestoreOptions,
    progress: Arc<Progress>,
) -> Result<RestoreSummary> {
    let started = Instant::now();
    let manifest = repo.load_snapshot(snapshot)?;
    let _guard = lock::acquire(repo.backend().clone(), false, "restore")?;
    let index = repo.load_index()?;
    let filter = Filter {
        include: globset(&opts.includes)?,
        exclude: globset(&opts.excludes)?,
    };

    // What to restore: the root, a directory's contents, or one entry.
    let sub = opts
        .subpath
        .as_deref()
        .map(|s| s.trim_end_matches('/'))
        .filter(|s| !s.is_empty() && *s != "/");
    // `target_node`: a restored directory's own metadata goes onto the target.
    let (root_tree, base, single, target_node) = match sub {
        None => (Some(manifest.tree), String::new(), None, None),
        Some(p) => {
            let node = crate::tree::find_node(repo, &index, &manifest.tree, p)?
                .ok_or_else(|| Error::NotFound(format!("no path {p:?} in the snapshot")))?;
            let base = format!("/{}", p.trim_start_matches('/'));
            if node.kind == NodeKind::Dir {
                (node.subtree, base, None, Some(node))
            } else {
                let parent = Path::new(&base)
                    .parent()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                (None, parent, Some(node), None)
            }
        }
    };

    let resumed = target_state(&opts.target, snapshot, &opts.subpath, opts.overwrite)?;
    fs::create_dir_all(&opts.target).ctx(|| format!("creating {}", opts.target.display()))?;
    let marker = serde_json::to_vec(&Marker {
        snapshot: *snapshot,
        subpath: opts.subpath.clone(),
    })
    .map_err(|e| Error::corrupt("restore marker", e))?;
    fs::write(opts.target.join(MARKER), marker)
        .ctx(|| format!("writing the restore marker in {}", opts.target.display()))?;

    // Plan.
    let mut items: Vec<Item> = Vec::new();
    let mut visit = |rel: &[u8], node: &Node| -> Result<bool> {
        let snap_path = PathBuf::from(format!("{base}/{}", String::from_utf8_lossy(rel)));
        if filter.excluded(&snap_path) {
            return Ok(false);
        }
        let included = filter.included(&snap_path);
        if included || node.kind == NodeKind::Dir {
            items.push(Item {
                path: opts.target.join(OsStr::from_bytes(rel)),
                node: node.clone(),
            });
        }
        Ok(true)
    };
    if let Some(node) = &single {
        visit(&node.name, node)?;
    } else if let Some(root) = &root_tree {
        crate::tree::walk(repo, &index, root, &mut visit)?;
    }
    if filter.include.is_some() {
        prune_empty_dirs(&mut items);
    } else if let Some(node) = target_node {
        items.push(Item {
            path: opts.target.clone(),
            node,
        });
    }

    let mut summary = RestoreSummary {
        resumed,
        ..Default::default()
    };
    for item in &items {
        if item.node.kind == NodeKind::File {
            summary.total_bytes += item.node.size;
        }
    }
    Progress::add(&progress.bytes_total, summary.total_bytes);
    Progress::add(
        &progress.files_total,
        items
            .iter()
            .filter(|i| i.node.kind == NodeKind::File)
            .count() as u64,
    );

    // Directories first (owner-writable until their metadata is applied).
    for item in items.iter().filter(|i| i.node.kind == NodeKind::Dir) {
        prepare_path(&item.path, true)?;
        summary.dirs += 1;
    }

    // Files: find what is already in place, size each file, plan the blobs.
    let mut plan: HashMap<u32, PackWork> = HashMap::new();
    let mut by_blob: HashMap<BlobId, (u32, usize)> = HashMap::new();
    let mut hardlinks: HashMap<(u64, u64), usize> = HashMap::new();
    let mut link_items: Vec<(usize, usize)> = Vec::new();
    let key = repo.key().clone();
    let mut file_items: Vec<usize> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if item.node.kind != NodeKind::File {
            continue;
        }
        crate::util::check_interrupted()?;
        if item.node.links > 1 {
            if let Some(&first) = hardlinks.get(&(item.node.device, item.node.inode)) {
                link_items.push((i, first));
                continue;
            }
            hardlinks.insert((item.node.device, item.node.inode), i);
        }
        file_items.push(i);
        prepare_path(&item.path, false)?;
        let existing = resumed && item.path.is_file();
        let file = OpenOptions::new()
            .write(true)
            .read(true)
            .create(true)
            .truncate(false)
            .open(&item.path)
            .ctx(|| format!("creating {}", item.path.display()))?;
        let old_len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut offset = 0u64;
        for ext in &item.node.content {
            let in_place = existing
                && offset + ext.length <= old_len
                && extent_in_place(&file, offset, ext.length, ext.blob.as_ref(), &key)?;
            if in_place {
                summary.bytes_reused += ext.length;
                Progress::add(&progress.bytes_done, ext.length);
            } else {
                match ext.blob {
                    Some(blob) => {
                        let loc = index.location(&blob).ok_or_else(|| {
                            Error::Damaged(format!(
                                "blob {blob} of {} is not in the index",
                                item.path.display()
                            ))
                        })?;
                        let (pack_pos, entry) = (loc.pack, &loc.entry);
                        let slot = by_blob.entry(blob).or_insert_with(|| {
                            let list = plan.entry(pack_pos).or_default();
                            list.push((*entry, Vec::new()));
                            (pack_pos, list.len() - 1)
                        });
                        if let Some(list) = plan.get_mut(&slot.0) {
                            list[slot.1].1.push((i, offset));
                        }
                    }
                    None if existing && offset < old_len => {
                        // A hole over old data: write zeros.
                        let end = (offset + ext.length).min(old_len);
                        zero_range(&file, offset, end - offset)
                            .ctx(|| format!("clearing {}", item.path.display()))?;
                    }
                    None => {}
                }
            }
            offset += ext.length;
        }
        if old_len != item.node.size {
            file.set_len(item.node.size)
                .ctx(|| format!("sizing {}", item.path.display()))?;
        }
    }

    // Read packs in parallel, each once, and write blobs where they belong.
    let threads = crate::util::io_threads(opts.threads);
    let written = AtomicU64::new(0);
    let paths: Vec<&Path> = items.iter().map(|i| i.path.as_path()).collect();
    let mut packs: Vec<(u32, PackWork)> = plan.into_iter().collect();
    packs.sort_by_key(|(p, _)| *p);
    let queue = Mutex::new(packs.into_iter());
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                if failure.lock().map(|f| f.is_some()).unwrap_or(true) {
                    return;
                }
                let next = queue.lock().ok().and_then(|mut q| q.next());
                let Some((pack_pos, blobs)) = next else {
                    return;
                };
                if let Err(e) =
                    restore_pack(repo, &index, pack_pos, blobs, &paths, &written, &progress)
                {
                    if let Ok(mut f) = failure.lock() {
                        f.get_or_insert(e);
                    }
                    return;
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e);
    }
    summary.bytes_written = written.load(Ordering::Relaxed);

    // Links and special files, then metadata: files, then directories deepest first.
    for item in items
        .iter()
        .filter(|i| !matches!(i.node.kind, NodeKind::Dir | NodeKind::File))
    {
        crate::util::check_interrupted()?;
        if let Some(w) = meta::create_special(&item.path, &item.node)? {
            summary.warnings.push(w);
            continue;
        }
        summary.others += 1;
        meta::apply(&item.path, &item.node)?;
    }
    for &i in &file_items {
        meta::apply(&items[i].path, &items[i].node)?;
        summary.files += 1;
        Progress::add(&progress.files_done, 1);
    }
    for &(i, first) in &link_items {
        let (path, target) = (&items[i].path, &items[first].path);
        let same = match (fs::symlink_metadata(path), fs::symlink_metadata(target)) {
            (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
            _ => false,
        };
        if !same {
            prepare_path(path, false)?;
            let _ = fs::remove_file(path);
            fs::hard_link(target, path)
                .ctx(|| format!("linking {} to {}", path.display(), target.display()))?;
        }
        summary.others += 1;
    }
    let mut dirs: Vec<&Item> = items
        .iter()
        .filter(|i| i.node.kind == NodeKind::Dir && i.path != opts.target)
        .collect();
    dirs.sort_by_key(|i| std::cmp::Reverse(i.path.components().count()));
    for d in dirs {
        meta::apply(&d.path, &d.node)?;
    }

    if opts.verify {
        for &i in &file_items {
            crate::util::check_interrupted()?;
            let item = &items[i];
            let f = File::open(&item.path).ctx(|| format!("opening {}", item.path.display()))?;
            let mut offset = 0;
            for ext in &item.node.content {
                if !extent_in_place(&f, offset, ext.length, ext.blob.as_ref(), &key)? {
                    return Err(Error::Damaged(format!(
                        "{} does not match the snapshot at offset {offset} after restore",
                        item.path.display()
                    )));
                }
                offset += ext.length;
            }
            summary.files_verified += 1;
        }
    }
    fs::remove_file(opts.target.join(MARKER)).ctx(|| "removing the restore marker".to_string())?;
    // The target's own metadata last: removing the marker changed its mtime.
    if let Some(t) = items.iter().find(|i| i.path == opts.target) {
        meta::apply(&t.path, &t.node)?;
    }
    summary.duration_ms = started.elapsed().as_millis() as u64;
    Ok(summary)
}

/// Drops directories that hold nothing included (after include filtering).
fn prune_empty_dirs(items: &mut Vec<Item>) {
    let needed: HashSet<PathBuf> = items
        .iter()
        .filter(|i| i.node.kind != NodeKind::Dir)
        .flat_map(|i| {
            i.path
                .ancestors()
                .skip(1)
                .map(Path::to_path_buf)
                .collect::<Vec<_>>()
        })
        .collect();
    items.retain(|i| i.node.kind != NodeKind::Dir || needed.contains(&i.path));
}

/// Makes sure `path` can be created: parents exist, and a wrong kind of
/// entry in its place is removed.
fn prepare_path(path: &Path, dir: bool) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if dir && m.is_dir() => return Ok(()),
        Ok(m) if !dir && m.is_file() => return Ok(()),
        Ok(m) if m.is_dir() => {
            fs::remove_dir_all(path).ctx(|| format!("replacing {}", path.display()))?
        }
        Ok(_) => fs::remove_file(path).ctx(|| format!("replacing {}", path.display()))?,
        Err(_) => {}
    }
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).ctx(|| format!("creating {}", parent.display()))?;
    }
    if dir {
        fs::create_dir(path).ctx(|| format!("creating {}", path.display()))?;
    }
    Ok(())
}

/// Whether the bytes at `offset` already hold the extent.
fn extent_in_place(
    file: &File,
    offset: u64,
    length: u64,
    blob: Option<&BlobId>,
    key: &crate::crypto::MasterKey,
) -> Result<bool> {
    let mut hasher = blob.map(|_| key.blob_hasher());
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    while done < length {
        let n = ((length - done) as usize).min(buf.len());
        match file.read_exact_at(&mut buf[..n], offset + done) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(false),
            Err(e) => return Err(Error::io("checking a restored file", e)),
        }
        match hasher.as_mut() {
            Some(h) => {
                h.update(&buf[..n]);
            }
            None => {
                if buf[..n].iter().any(|&b| b != 0) {
                    return Ok(false);
                }
            }
        }
        done += n as u64;
    }
    Ok(match (hasher, blob) {
        (Some(h), Some(id)) => h.finalize().as_bytes() == &id.0,
        _ => true,
    })
}

fn zero_range(file: &File, offset: u64, length: u64) -> std::io::Result<()> {
    let zeros = vec![0u8; (length as usize).min(1 << 20)];
    let mut done = 0;
    while done < length {
        let n = ((length - done) as usize).min(zeros.len());
        file.write_all_at(&zeros[..n], offset + done)?;
        done += n as u64;
    }
    Ok(())
}

/// Reads the needed blobs of one pack (coalescing close ranges) and writes them.
fn restore_pack(
    repo: &Repository,
    index: &MasterIndex,
    pack_pos: u32,
    mut blobs: PackWork,
    paths: &[&Path],
    written: &AtomicU64,
    progress: &Progress,
) -> Result<()> {
    let pack = &index.packs()[pack_pos as usize];
    blobs.sort_by_key(|(e, _)| e.offset);
    let name = pack.id.to_hex();
    let mut i = 0;
    while i < blobs.len() {
        crate::util::check_interrupted()?;
        // Extend the read while the gap to the next needed blob is small.
        let start = blobs[i].0.offset as u64;
        let mut end = start + blobs[i].0.length as u64;
        let mut j = i + 1;
        while j < blobs.len()
            && (blobs[j].0.offset as u64) <= end + 256 * 1024
            && end - start < 32 << 20
        {
            end = blobs[j].0.offset as u64 + blobs[j].0.length as u64;
            j += 1;
        }
        let bytes = repo
            .backend()
            .read_range(FileKind::Pack, &name, start, (end - start) as usize)
            .map_err(|e| Error::Damaged(format!("pack {} unreadable: {e}", pack.id)))?;
        for (entry, targets) in &blobs[i..j] {
            let from = (entry.offset as u64 - start) as usize;
            let sealed = &bytes[from..from + entry.length as usize];
            let plain = crate::repo::pack::open_blob(repo.key(), &pack.salt, entry, sealed)?;
            for &(item, offset) in targets {
                let path = paths[item];
                let f = OpenOptions::new()
                    .write(true)
                    .open(path)
                    .ctx(|| format!("opening {}", path.display()))?;
                f.write_all_at(&plain, offset)
                    .ctx(|| format!("writing {}", path.display()))?;
                written.fetch_add(plain.len() as u64, Ordering::Relaxed);
                Progress::add(&progress.bytes_done, plain.len() as u64);
            }
        }
        i = j;
    }
    Ok(())
}

/// Reads a whole file, for tests and verification helpers.
pub fn read_all(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    File::open(path)?.read_to_end(&mut v)?;
    Ok(v)
}
