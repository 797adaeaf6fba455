//! The recovery engine: restores a snapshot (or a path in it) into a
//! directory. The walk's entries are restored in batches ([`session`],
//! [`batch`]): memory is bounded by a batch, not by the snapshot's size.
//! Within a batch, packs are read in parallel, each once; every blob is
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

mod batch;
pub(crate) mod dirfd;
mod files;
mod meta;
mod session;
mod write;

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::{self, File};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::format::{BlobEntry, Node, NodeKind};
use crate::id::SnapshotId;
use crate::progress::Progress;
use crate::repo::{MasterIndex, Repository};
use dirfd::Dirs;
use session::Session;
pub use session::BATCH_ENTRIES;

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
    /// Entries planned and written at once (0: [`BATCH_ENTRIES`]); it
    /// bounds the restore's memory whatever the snapshot's size.
    pub batch_entries: usize,
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
#[derive(Clone)]
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
pub fn restore(
    repo: &Repository,
    snapshot: &SnapshotId,
    opts: &RestoreOptions,
    progress: Arc<Progress>,
) -> Result<RestoreSummary> {
    let _guard = repo.lock(false, "restore")?;
    let index = repo.load_index()?;
    restore_with_index(repo, &index, snapshot, opts, progress)
}

/// [`restore`] with the repository's index loaded already, by a caller
/// that holds a lock of the repository (a restore test: one index in
/// memory, not two).
#[tracing::instrument(skip_all, fields(snapshot = %snapshot.short(), target = %opts.target.display()))]
pub fn restore_with_index(
    repo: &Repository,
    index: &MasterIndex,
    snapshot: &SnapshotId,
    opts: &RestoreOptions,
    progress: Arc<Progress>,
) -> Result<RestoreSummary> {
    let started = Instant::now();
    let manifest = repo.load_snapshot(snapshot)?;
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
            let node = crate::tree::find_node(repo, index, &manifest.tree, p)?
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

    if opts.delete && (filter.include.is_some() || filter.exclude.is_some()) {
        return Err(Error::InvalidArgument(
            "--delete removes whatever the snapshot lacks: it does not combine with --include or --exclude"
                .into(),
        ));
    }
    let target_node = if filter.include.is_some() {
        None
    } else {
        target_node
    };
    let (resumed, by_marker) = target_state(&opts.target, snapshot, &opts.subpath, opts.overwrite)?;
    let cx = batch::Ctx {
        repo,
        index,
        opts,
        progress: &progress,
        threads: crate::util::io_threads(opts.threads),
        resumed,
        by_marker,
    };
    let summary = RestoreSummary {
        resumed,
        dry_run: opts.dry_run,
        ..Default::default()
    };
    let top_tree = if single.is_none() { root_tree } else { None };
    let mut session = Session::new(cx, snapshot, filter, base, top_tree, summary);
    // The walk checks every tree before it visits the first entry: a
    // damaged tree stops the restore with the target untouched.
    if let Some(node) = &single {
        if let Some(why) = crate::tree::bad_name(&node.name) {
            return Err(Error::Damaged(format!(
                "the snapshot holds {why}: {:?}",
                node.display_name()
            )));
        }
        session.visit(&node.name, node)?;
    } else if let Some(root) = &root_tree {
        crate::tree::walk(repo, index, root, &mut |rel, node| session.visit(rel, node))?;
    }
    let (dirs, mut summary) = session.finish()?;
    let Some(dirs) = dirs else {
        // A dry run.
        summary.duration_ms = started.elapsed().as_millis() as u64;
        return Ok(summary);
    };
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

/// Reads a whole file, for tests and verification helpers.
pub fn read_all(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    File::open(path)?.read_to_end(&mut v)?;
    Ok(v)
}
