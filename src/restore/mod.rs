//! The recovery engine: restores a snapshot (or a path in it) into a
//! directory. Packs are read in parallel, each about once; every blob is
//! checked against its id before it is written. An interrupted restore
//! resumes with the same command: a marker file names the snapshot being
//! restored, and on the next run every existing file is checked extent by
//! extent against its content ids, so only what is missing is fetched.
//!
//! Safety against a crafted snapshot (engine review, findings 1, 5, 16, 18):
//! - Names: every tree is checked when it is loaded ([`crate::tree`]); a
//!   name that is empty, `.`, `..`, or holds `/` or NUL, and a tree whose
//!   names are duplicated or not strictly sorted by bytes, is damage, found
//!   while planning, before anything is written.
//! - Links: the target is opened once and everything below it is reached
//!   through directory descriptors ([`dirfd`]), so no symlink is followed,
//!   not even one the restore itself created; metadata goes through the
//!   entry's own descriptor, or its parent's with `AT_SYMLINK_NOFOLLOW`.
//! - Shared inodes: a file in the target that is not this restore's own is
//!   replaced by rename, never written into ([`files`]).
//! - Hard links: a `(device, inode)` group is linked only where content and
//!   size agree; a look-alike is restored as a file of its own.
//! - The marker: an entry named like it at the top is skipped with a
//!   warning. The data is made durable with one `syncfs` before the marker
//!   is removed.

pub(crate) mod dirfd;
mod files;
mod meta;
mod write;

use std::collections::{HashMap, HashSet};
use std::ffi::{CString, OsStr};
use std::fs::{self, File};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::format::{BlobEntry, Node, NodeKind};
use crate::id::{BlobId, SnapshotId};
use crate::progress::Progress;
use crate::repo::Repository;
use dirfd::Dirs;
use write::{extent_in_place, restore_pack, zero_range, Out};

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
    /// Restore into a non-empty target (what is there is replaced as
    /// `overwrite_mode` says).
    pub overwrite: bool,
    /// What happens to an entry the target has already.
    pub overwrite_mode: OverwriteMode,
    /// Remove what the target's restored directories hold and the snapshot
    /// does not (no filters).
    pub delete: bool,
    /// Plan only: say what would be restored, skipped and deleted, and
    /// write nothing.
    pub dry_run: bool,
    /// Re-read and re-hash every restored file afterwards.
    pub verify: bool,
    /// Pack reader threads (0 = automatic).
    pub threads: usize,
    /// Restore tests only: for a file at one of these paths (relative to
    /// the target, names joined with `/`), write only the extents at the
    /// listed indices (ascending) and leave the rest of it a hole. Such a
    /// file is not a copy of the original: the restore test compares only
    /// those extents of it (a file larger than its byte budget).
    pub only_extents: HashMap<Vec<u8>, Vec<usize>>,
}

/// What a restore does with an entry the target has already.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OverwriteMode {
    /// Make it the snapshot's: content checked extent by extent, only what
    /// differs is written; metadata set.
    #[default]
    Always,
    /// Leave a file alone when its size and modification time are the
    /// snapshot's (not read at all); otherwise as `always`.
    IfChanged,
    /// Replace it only when the target's is older than the snapshot's.
    IfNewer,
    /// Leave it as it is.
    Never,
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
    /// Entries the target had and the overwrite mode left alone.
    #[serde(default)]
    pub skipped: u64,
    /// Entries removed by `delete` (with what they held).
    #[serde(default)]
    pub deleted: u64,
    /// Paths that `delete` removed (or, in a dry run, would remove), at
    /// most [`LISTED`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted_paths: Vec<String>,
    /// A dry run: nothing was written.
    #[serde(default)]
    pub dry_run: bool,
}

/// How many deleted paths a summary lists.
pub const LISTED: usize = 1000;

/// The blobs needed from one pack, each with the (item, offset) places it goes.
type PackWork = Vec<(BlobEntry, Vec<(usize, u64)>)>;

#[derive(Serialize, Deserialize)]
struct Marker {
    snapshot: SnapshotId,
    subpath: Option<String>,
}

/// One entry to recreate.
struct Item {
    /// Path relative to the target, names joined with `/`.
    rel: Vec<u8>,
    /// Where its own name starts in `rel`.
    name_at: usize,
    /// Its own name.
    name: CString,
    /// Its path in the target, for messages and filters.
    path: PathBuf,
    node: Node,
}

impl Item {
    fn new(target: &Path, rel: &[u8], node: Node) -> Result<Item> {
        let name_at = rel.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
        Ok(Item {
            rel: rel.to_vec(),
            name_at,
            name: dirfd::cname(&rel[name_at..])?,
            path: target.join(OsStr::from_bytes(rel)),
            node,
        })
    }

    /// The parent directory, relative to the target.
    fn dir(&self) -> &[u8] {
        &self.rel[..self.name_at.saturating_sub(1)]
    }

    /// How many directories deep it is.
    fn depth(&self) -> usize {
        self.rel.iter().filter(|&&b| b == b'/').count()
    }
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

/// Whether the target may hold earlier content (resume or `--overwrite`),
/// and whether the marker says it is this restore's own.
fn target_state(
    target: &Path,
    snapshot: &SnapshotId,
    subpath: &Option<String>,
    overwrite: bool,
) -> Result<(bool, bool)> {
    let mut entries = match fs::read_dir(target) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((false, false)),
        Err(e) => return Err(Error::io(format!("reading {}", target.display()), e)),
    };
    if entries.next().is_none() {
        return Ok((false, false));
    }
    let marker = fs::symlink_metadata(target.join(MARKER))
        .ok()
        .filter(|m| m.is_file())
        .and_then(|_| fs::read(target.join(MARKER)).ok());
    if let Some(bytes) = marker {
        if let Ok(m) = serde_json::from_slice::<Marker>(&bytes) {
            if m.snapshot == *snapshot && m.subpath == *subpath {
                return Ok((true, true));
            }
        }
    }
    if overwrite {
        Ok((true, false))
    } else {
        Err(Error::TargetNotEmpty(target.to_path_buf()))
    }
}

/// Restores `snapshot` into `opts.target`.
///
/// Every tree is checked before its names are used ([`crate::tree`]): a
/// name that is not one path component, or a tree with duplicate or
/// unsorted names, is damage and nothing of the snapshot is written. All
/// work below the target goes through directory descriptors ([`dirfd`]),
/// so no symlink is ever followed, whoever made it.
#[tracing::instrument(skip_all, fields(snapshot = %snapshot.short(), target = %opts.target.display()))]
pub fn restore(
    repo: &Repository,
    snapshot: &SnapshotId,
    opts: &RestoreOptions,
    progress: Arc<Progress>,
) -> Result<RestoreSummary> {
    let started = Instant::now();
    let manifest = repo.load_snapshot(snapshot)?;
    let _guard = repo.lock(false, "restore")?;
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

    // Plan (before anything is written: a damaged tree stops the restore
    // with the target untouched).
    let mut warnings = Vec::new();
    let mut items: Vec<Item> = Vec::new();
    let mut visit = |rel: &[u8], node: &Node| -> Result<bool> {
        let snap_path = PathBuf::from(format!("{base}/{}", String::from_utf8_lossy(rel)));
        if rel == MARKER.as_bytes() {
            // The marker's name is taken at the target's top: such an entry
            // would be overwritten by the marker and removed at the end.
            warnings.push(format!(
                "{}: not restored, its name is reserved for the restore marker",
                snap_path.display()
            ));
            return Ok(false);
        }
        if filter.excluded(&snap_path) {
            return Ok(false);
        }
        let included = filter.included(&snap_path);
        if included || node.kind == NodeKind::Dir {
            items.push(Item::new(&opts.target, rel, node.clone())?);
        }
        Ok(true)
    };
    if let Some(node) = &single {
        if let Some(why) = crate::tree::bad_name(&node.name) {
            return Err(Error::Damaged(format!(
                "the snapshot holds {why}: {:?}",
                node.display_name()
            )));
        }
        visit(&node.name, node)?;
    } else if let Some(root) = &root_tree {
        crate::tree::walk(repo, &index, root, &mut visit)?;
    }
    let target_node = if filter.include.is_some() {
        prune_empty_dirs(&mut items);
        None
    } else {
        target_node
    };
    if opts.delete && (filter.include.is_some() || filter.exclude.is_some()) {
        return Err(Error::InvalidArgument(
            "--delete removes whatever the snapshot lacks: it does not combine with --include or --exclude"
                .into(),
        ));
    }
    // Every name of the snapshot in each restored directory, before the
    // overwrite mode drops any: what --delete keeps.
    let in_snapshot: HashMap<Vec<u8>, HashSet<Vec<u8>>> = if opts.delete && single.is_none() {
        let mut m: HashMap<Vec<u8>, HashSet<Vec<u8>>> = HashMap::new();
        m.entry(Vec::new()).or_default();
        for item in &items {
            m.entry(item.dir().to_vec())
                .or_default()
                .insert(item.node.name.clone());
            if item.node.kind == NodeKind::Dir {
                m.entry(item.rel.clone()).or_default();
            }
        }
        m
    } else {
        HashMap::new()
    };

    let (resumed, by_marker) = target_state(&opts.target, snapshot, &opts.subpath, opts.overwrite)?;
    let skipped = skip_existing(&mut items, opts.overwrite_mode, resumed && !by_marker);
    if opts.dry_run {
        return dry_run_summary(
            &opts.target,
            &items,
            &in_snapshot,
            skipped,
            warnings,
            started,
        );
    }
    fs::create_dir_all(&opts.target).ctx(|| format!("creating {}", opts.target.display()))?;
    let dirs = Dirs::open(&opts.target)?;
    write_marker(&dirs, snapshot, &opts.subpath)?;

    let mut summary = RestoreSummary {
        resumed,
        warnings,
        skipped,
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

    // Directories first (owner-only until their metadata is applied), in
    // walk order: parents before children.
    for item in items.iter().filter(|i| i.node.kind == NodeKind::Dir) {
        files::make_dir(&*dirs.get(item.dir())?, &item.name, &item.path)?;
        summary.dirs += 1;
    }
    // What the snapshot lacks goes before anything is written, so that the
    // directories' times, set last, are the snapshot's.
    if !in_snapshot.is_empty() {
        delete_extra(&dirs, &in_snapshot, &mut summary)?;
    }

    // Files: find what is already in place, size each file, plan the blobs.
    let mut plan: HashMap<u32, PackWork> = HashMap::new();
    let mut by_blob: HashMap<BlobId, (u32, usize)> = HashMap::new();
    let mut hardlinks: HashMap<(u64, u64), usize> = HashMap::new();
    let mut link_items: Vec<(usize, usize)> = Vec::new();
    // The (dev, ino) of each file written, by item.
    let mut ids: HashMap<usize, (u64, u64)> = HashMap::new();
    let key = repo.key().clone();
    let mut file_items: Vec<usize> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if item.node.kind != NodeKind::File {
            continue;
        }
        let sum: u64 = item.node.content.iter().map(|e| e.length).sum();
        if sum != item.node.size {
            return Err(Error::Damaged(format!(
                "{}: the snapshot's extents hold {sum} bytes, its size is {}",
                item.path.display(),
                item.node.size
            )));
        }
        let only = opts.only_extents.get(&item.rel);
        // A partly written file is never a hard link's first: another link
        // to it would read its holes.
        if item.node.links > 1 && only.is_none() {
            let group = (item.node.device, item.node.inode);
            match hardlinks.get(&group) {
                // A link only if it has the first's content: inode reuse
                // or a change between visits make look-alike groups.
                Some(&first) if same_content(&items[first].node, &item.node) => {
                    link_items.push((i, first));
                    continue;
                }
                Some(_) => {}
                None => {
                    hardlinks.insert(group, i);
                }
            }
        }
        file_items.push(i);
    }
    let threads = crate::util::io_threads(opts.threads);
    // Into a target that holds nothing of ours, every file is new: they are
    // created on several threads (creating is most of the kernel's work in
    // a restore of many small files). Otherwise each is looked at in turn.
    let created = if resumed {
        HashMap::new()
    } else {
        create_files(&dirs, &items, &file_items, &opts.only_extents, threads)?
    };
    for &i in &file_items {
        let item = &items[i];
        crate::util::check_interrupted()?;
        let only = opts.only_extents.get(&item.rel);
        let p = match created.get(&i) {
            Some(&id) => files::Prepared::created(id),
            None => {
                let parent = dirs.get(item.dir())?;
                files::prepare_file(&parent, &item.name, &item.path, by_marker, resumed)?
            }
        };
        ids.insert(i, p.id);
        // Where old data may be found: the file itself, or the one it replaces.
        let (check, copy_from) = match (&p.old, p.in_place) {
            (_, true) => (p.file.as_ref(), None),
            (Some(old), false) => (Some(old), Some(old)),
            (None, false) => (None, None),
        };
        let old_len = match check {
            Some(f) => f.metadata().map(|m| m.len()).unwrap_or(0),
            None => 0,
        };
        let mut offset = 0u64;
        for (x, ext) in item.node.content.iter().enumerate() {
            if only.is_some_and(|o| o.binary_search(&x).is_err()) {
                offset += ext.length;
                continue;
            }
            let entry = match ext.blob {
                Some(blob) => {
                    let loc = index.location(&blob).ok_or_else(|| {
                        Error::Damaged(format!(
                            "blob {blob} of {} is not in the index",
                            item.path.display()
                        ))
                    })?;
                    if u64::from(loc.raw_length) != ext.length {
                        return Err(Error::Damaged(format!(
                            "{}: an extent of {} bytes names blob {blob} of {} bytes",
                            item.path.display(),
                            ext.length,
                            loc.raw_length
                        )));
                    }
                    Some((loc.pack, loc.entry(blob)))
                }
                None => None,
            };
            let in_place = match check {
                Some(f) if offset + ext.length <= old_len => {
                    extent_in_place(f, offset, ext.length, ext.blob.as_ref(), &key)?
                }
                _ => false,
            };
            if in_place {
                if let (Some(from), Some(to), Some(_)) = (copy_from, &p.file, ext.blob) {
                    files::copy_range(from, to, offset, ext.length, &item.path)?;
                }
                summary.bytes_reused += ext.length;
                Progress::add(&progress.bytes_done, ext.length);
            } else {
                match (entry, ext.blob) {
                    (Some((pack_pos, entry)), Some(blob)) => {
                        let slot = by_blob.entry(blob).or_insert_with(|| {
                            let list = plan.entry(pack_pos).or_default();
                            list.push((entry, Vec::new()));
                            (pack_pos, list.len() - 1)
                        });
                        if let Some(list) = plan.get_mut(&slot.0) {
                            list[slot.1].1.push((i, offset));
                        }
                    }
                    _ if p.in_place && offset < p.len => {
                        // A hole over old data: write zeros.
                        let end = (offset + ext.length).min(p.len);
                        if let Some(f) = &p.file {
                            zero_range(f, offset, end - offset)
                                .ctx(|| format!("clearing {}", item.path.display()))?;
                        }
                    }
                    _ => {}
                }
            }
            offset += ext.length;
        }
        if let (true, Some(f)) = (p.len != item.node.size, &p.file) {
            f.set_len(item.node.size)
                .ctx(|| format!("sizing {}", item.path.display()))?;
        }
    }

    // Read packs in parallel, each once, and write blobs where they belong.
    let pending: Vec<AtomicU32> = (0..items.len()).map(|_| AtomicU32::new(0)).collect();
    for work in plan.values() {
        for (_, targets) in work {
            for &(item, _) in targets {
                pending[item].fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    // Files that wait for no blob get their metadata in the serial pass.
    let no_writes: Vec<bool> = pending
        .iter()
        .map(|p| p.load(Ordering::Relaxed) == 0)
        .collect();
    let writer_warnings = Mutex::new(Vec::new());
    let written = AtomicU64::new(0);
    let mut packs: Vec<(u32, PackWork)> = plan.into_iter().collect();
    packs.sort_by_key(|(p, _)| *p);
    let queue = Mutex::new(packs.into_iter());
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    let out = Out {
        dirs: &dirs,
        items: &items,
        ids: &ids,
        pending: &pending,
        warnings: &writer_warnings,
        written: &written,
        progress: &progress,
    };
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                // One buffer per thread for the packs' ranges.
                let mut scratch = Vec::new();
                loop {
                    if failure.lock().map(|f| f.is_some()).unwrap_or(true) {
                        return;
                    }
                    let next = queue.lock().ok().and_then(|mut q| q.next());
                    let Some((pack_pos, blobs)) = next else {
                        return;
                    };
                    if let Err(e) = restore_pack(repo, &index, pack_pos, blobs, &out, &mut scratch)
                    {
                        if let Ok(mut f) = failure.lock() {
                            f.get_or_insert(e);
                        }
                        return;
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e);
    }
    summary.bytes_written = written.load(Ordering::Relaxed);
    if let Ok(mut w) = writer_warnings.lock() {
        summary.warnings.append(&mut w);
    }

    // Special files, then metadata: files, links, then directories deepest first.
    for item in items
        .iter()
        .filter(|i| !matches!(i.node.kind, NodeKind::Dir | NodeKind::File))
    {
        crate::util::check_interrupted()?;
        let parent = dirs.get(item.dir())?;
        if let Some(w) = meta::create_special(&parent, &item.name, &item.path, &item.node)? {
            summary.warnings.push(w);
            continue;
        }
        summary.others += 1;
        meta::apply_at(
            &parent,
            &item.name,
            &item.node,
            &item.path,
            &mut summary.warnings,
        )?;
    }
    for &i in &file_items {
        if no_writes[i] {
            let f = out.open(i, i, libc::O_RDONLY)?;
            meta::apply_fd(&f, &items[i].node, &items[i].path, &mut summary.warnings)?;
        }
        summary.files += 1;
        Progress::add(&progress.files_done, 1);
    }
    for &(i, first) in &link_items {
        let (item, to) = (&items[i], &items[first]);
        let id = out.id(first)?;
        files::link(
            &*dirs.get(to.dir())?,
            &to.name,
            &*dirs.get(item.dir())?,
            &item.name,
            id,
            &item.path,
        )?;
        summary.others += 1;
    }
    let mut dir_items: Vec<&Item> = items
        .iter()
        .filter(|i| i.node.kind == NodeKind::Dir)
        .collect();
    dir_items.sort_by_key(|i| std::cmp::Reverse(i.depth()));
    for d in dir_items {
        meta::apply_fd(&*dirs.get(&d.rel)?, &d.node, &d.path, &mut summary.warnings)?;
    }

    if opts.verify {
        let checks = file_items
            .iter()
            .map(|&i| (i, i))
            .chain(link_items.iter().copied());
        for (i, first) in checks {
            crate::util::check_interrupted()?;
            let f = out.open(i, first, libc::O_RDONLY)?;
            let item = &items[i];
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
    // Durable before the marker goes: one sync of the target's file system
    // (a per-file fsync would cost far more).
    // SAFETY: a valid descriptor.
    if unsafe { libc::syncfs(dirs.root().as_raw_fd()) } != 0 {
        return Err(dirfd::os_err("syncing the file system of", &opts.target));
    }
    let marker = dirfd::cname(MARKER.as_bytes())?;
    dirfd::unlink_at(dirs.root(), &marker, 0, &opts.target.join(MARKER))?;
    // The target's own metadata last: removing the marker changed its mtime.
    if let Some(node) = &target_node {
        meta::apply_fd(dirs.root(), node, &opts.target, &mut summary.warnings)?;
    }
    summary.duration_ms = started.elapsed().as_millis() as u64;
    Ok(summary)
}

/// Creates the new, empty files `file_items` of a target that holds nothing
/// of this restore's, on `threads` threads (each takes runs of neighbours,
/// so that mostly one thread works in a directory at a time); returns each
/// file's `(dev, ino)`. A file is sized here only when the writes will not
/// do it (it ends in a hole, or only some of its extents are restored).
fn create_files(
    dirs: &Dirs,
    items: &[Item],
    file_items: &[usize],
    only_extents: &HashMap<Vec<u8>, Vec<usize>>,
    threads: usize,
) -> Result<HashMap<usize, (u64, u64)>> {
    const RUN: usize = 64;
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    let ids: Mutex<HashMap<usize, (u64, u64)>> =
        Mutex::new(HashMap::with_capacity(file_items.len()));
    let fail = |e: Error| {
        if let Ok(mut f) = failure.lock() {
            f.get_or_insert(e);
        }
    };
    let create = |i: usize| -> Result<(u64, u64)> {
        let item = &items[i];
        let parent = dirs.get(item.dir())?;
        let p = files::create_new(&parent, &item.name, &item.path)?;
        let writes_size = item.node.content.last().is_some_and(|e| e.blob.is_some())
            && !only_extents.contains_key(&item.rel);
        if item.node.size > 0 && !writes_size {
            p.set_len(item.node.size)
                .ctx(|| format!("sizing {}", item.path.display()))?;
        }
        files::file_id(&p, &item.path)
    };
    std::thread::scope(|s| {
        for _ in 0..threads.min(file_items.len().div_ceil(RUN)).max(1) {
            s.spawn(|| {
                let mut mine = Vec::new();
                loop {
                    let start = next.fetch_add(RUN, Ordering::Relaxed);
                    if start >= file_items.len()
                        || failure.lock().map(|f| f.is_some()).unwrap_or(true)
                    {
                        break;
                    }
                    if let Err(e) = crate::util::check_interrupted() {
                        fail(e);
                        break;
                    }
                    for &i in &file_items[start..(start + RUN).min(file_items.len())] {
                        match create(i) {
                            Ok(id) => mine.push((i, id)),
                            Err(e) => {
                                fail(e);
                                break;
                            }
                        }
                    }
                }
                if let Ok(mut ids) = ids.lock() {
                    ids.extend(mine);
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e);
    }
    ids.into_inner()
        .map_err(|_| Error::Damaged("a thread creating files panicked".into()))
}

/// Drops from `items` the entries (not directories) the target has and
/// `mode` leaves alone; returns how many. Only a target that was not empty
/// and is not this restore's own unfinished one (`replacing`) is looked at.
/// The target is asked by path (`lstat`): a wrong answer can only skip or
/// replace an entry, never write outside the target.
fn skip_existing(items: &mut Vec<Item>, mode: OverwriteMode, replacing: bool) -> u64 {
    if !replacing || mode == OverwriteMode::Always {
        return 0;
    }
    let before = items.len();
    items.retain(|item| {
        if item.node.kind == NodeKind::Dir {
            return true;
        }
        let Ok(there) = fs::symlink_metadata(&item.path) else {
            return true;
        };
        use std::os::unix::fs::MetadataExt;
        let there_ns = i128::from(there.mtime()) * 1_000_000_000 + i128::from(there.mtime_nsec());
        let snap_ns =
            i128::from(item.node.mtime().sec) * 1_000_000_000 + i128::from(item.node.mtime().nsec);
        match mode {
            OverwriteMode::Always => true,
            OverwriteMode::Never => false,
            OverwriteMode::IfNewer => there_ns < snap_ns,
            OverwriteMode::IfChanged => {
                !(item.node.kind == NodeKind::File
                    && there.file_type().is_file()
                    && there.len() == item.node.size
                    && there_ns == snap_ns)
            }
        }
    });
    (before - items.len()) as u64
}

/// What a dry run reports: the entries that would be restored, what the
/// overwrite mode skips and what `--delete` would remove; nothing written.
fn dry_run_summary(
    target: &Path,
    items: &[Item],
    in_snapshot: &HashMap<Vec<u8>, HashSet<Vec<u8>>>,
    skipped: u64,
    warnings: Vec<String>,
    started: Instant,
) -> Result<RestoreSummary> {
    let mut s = RestoreSummary {
        dry_run: true,
        skipped,
        warnings,
        ..Default::default()
    };
    for item in items {
        match item.node.kind {
            NodeKind::File => {
                s.files += 1;
                s.total_bytes += item.node.size;
            }
            NodeKind::Dir => s.dirs += 1,
            _ => s.others += 1,
        }
    }
    for (dir, names) in in_snapshot {
        let path = target.join(OsStr::from_bytes(dir));
        let Ok(entries) = fs::read_dir(&path) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let kept = names.contains(name.as_bytes()) || (dir.is_empty() && name == MARKER);
            if !kept {
                s.deleted += 1;
                if s.deleted_paths.len() < LISTED {
                    s.deleted_paths.push(e.path().display().to_string());
                }
            }
        }
    }
    s.duration_ms = started.elapsed().as_millis() as u64;
    Ok(s)
}

/// Removes from each restored directory what the snapshot does not have
/// there (through directory descriptors: no symlink is followed).
fn delete_extra(
    dirs: &Dirs,
    in_snapshot: &HashMap<Vec<u8>, HashSet<Vec<u8>>>,
    summary: &mut RestoreSummary,
) -> Result<()> {
    let mut order: Vec<&Vec<u8>> = in_snapshot.keys().collect();
    order.sort();
    for dir in order {
        crate::util::check_interrupted()?;
        let names = &in_snapshot[dir];
        let fd = dirs.get(dir)?;
        let path = dirs.path(dir);
        for name in dirfd::list(&fd, &path)? {
            let bytes = name.to_bytes();
            if names.contains(bytes) || (dir.is_empty() && bytes == MARKER.as_bytes()) {
                continue;
            }
            let victim = path.join(OsStr::from_bytes(bytes));
            dirfd::remove_at(&fd, &name, &victim)?;
            summary.deleted += 1;
            if summary.deleted_paths.len() < LISTED {
                summary.deleted_paths.push(victim.display().to_string());
            }
        }
    }
    Ok(())
}

/// Whether a hard-link group member has the same content as the first.
fn same_content(first: &Node, other: &Node) -> bool {
    first.size == other.size && first.content == other.content
}

/// Writes the resume marker at the target's top (never through a symlink).
fn write_marker(dirs: &Dirs, snapshot: &SnapshotId, subpath: &Option<String>) -> Result<()> {
    let bytes = serde_json::to_vec(&Marker {
        snapshot: *snapshot,
        subpath: subpath.clone(),
    })
    .map_err(|e| Error::corrupt("restore marker", e))?;
    let path = dirs.path(MARKER.as_bytes());
    let name = dirfd::cname(MARKER.as_bytes())?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC;
    let f = File::from(dirfd::open_at(dirs.root(), &name, flags, 0o600, &path)?);
    std::io::Write::write_all(&mut &f, &bytes)
        .ctx(|| format!("writing the restore marker {}", path.display()))
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

/// Reads a whole file, for tests and verification helpers.
pub fn read_all(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    File::open(path)?.read_to_end(&mut v)?;
    Ok(v)
}
