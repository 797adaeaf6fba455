//! The course of one restore through the snapshot's walk: which entries
//! are restored (filters, the marker's reserved name), directories created
//! as the walk reaches them (parents first), entries gathered into batches
//! of at most [`RestoreOptions::batch_entries`] and written a batch at a
//! time ([`batch`](super::batch)), and each directory's metadata set once
//! everything below it is written. Memory is bounded by the batch and the
//! depth of the tree, not by the size of the snapshot.
//!
//! With `--include`, a directory is created only when something below it
//! is included: the directories the walk is in wait in a chain until an
//! included entry arrives, and those it leaves with nothing are dropped.
//! With `--delete`, each restored directory loses what the snapshot lacks
//! there as soon as it is created, before anything is written into it.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::batch::{self, Ctx, FirstLink};
use super::dirfd::{self, Dirs};
use super::{
    files, meta, skip_existing, write_marker, Filter, Item, RestoreSummary, LISTED, MARKER,
};
use crate::error::{IoContext, Result};
use crate::format::{Node, NodeKind};
use crate::id::{BlobId, SnapshotId};

/// Entries planned and written at once by default: about 40 MB of plan
/// for small files; a pack holding blobs of two batches is read twice,
/// its needed ranges only.
pub const BATCH_ENTRIES: usize = 65_536;

/// One restore's state across its batches.
pub(super) struct Session<'a> {
    pub(super) cx: Ctx<'a>,
    pub(super) snapshot: &'a SnapshotId,
    pub(super) filter: Filter,
    /// The snapshot's path the restore starts from (`/a/b`, or empty).
    pub(super) base: String,
    /// The tree of the target's own top, for `--delete` (none when one
    /// entry is restored).
    pub(super) top_tree: Option<BlobId>,
    /// The target's descriptors, made when the first entry is restored (a
    /// damaged tree stops the walk before that, with the target untouched).
    dirs: Option<Dirs>,
    /// Whether [`Session::begin`] ran.
    begun: bool,
    /// Entries (no directories) waiting for the next batch.
    batch: Vec<Item>,
    /// With `--include`: directories the walk is in that wait for an
    /// included entry below them (a chain, top down).
    waiting: Vec<Item>,
    /// Restored directories the walk is in (a chain, top down).
    open: Vec<Item>,
    /// Restored directories the walk has left, deepest first: their
    /// metadata is set after the batch that holds the last of their
    /// entries.
    closed: Vec<Item>,
    groups: HashMap<(u64, u64), FirstLink>,
    pub(super) summary: RestoreSummary,
}

/// Whether the entry at `rel` lies below the directory at `dir`.
fn below(dir: &[u8], rel: &[u8]) -> bool {
    rel.len() > dir.len() && rel.starts_with(dir) && rel[dir.len()] == b'/'
}

impl<'a> Session<'a> {
    pub(super) fn new(
        cx: Ctx<'a>,
        snapshot: &'a SnapshotId,
        filter: Filter,
        base: String,
        top_tree: Option<BlobId>,
        summary: RestoreSummary,
    ) -> Self {
        Session {
            cx,
            snapshot,
            filter,
            base,
            top_tree,
            dirs: None,
            begun: false,
            batch: Vec::new(),
            waiting: Vec::new(),
            open: Vec::new(),
            closed: Vec::new(),
            groups: HashMap::new(),
            summary,
        }
    }

    fn batch_limit(&self) -> usize {
        match self.cx.opts.batch_entries {
            0 => BATCH_ENTRIES,
            n => n,
        }
    }

    /// Before the first entry: the target is created, its marker written
    /// and (`--delete`) what its top holds that the snapshot lacks removed
    /// (a dry run only lists that).
    fn begin(&mut self) -> Result<()> {
        if self.begun {
            return Ok(());
        }
        self.begun = true;
        if !self.cx.opts.dry_run {
            let target = &self.cx.opts.target;
            fs::create_dir_all(target).ctx(|| format!("creating {}", target.display()))?;
            let dirs = Dirs::open(target)?;
            write_marker(&dirs, self.snapshot, &self.cx.opts.subpath)?;
            self.dirs = Some(dirs);
        }
        if self.cx.opts.delete {
            if let Some(top) = self.top_tree {
                self.delete_extra(&[], Some(&top))?;
            }
        }
        Ok(())
    }

    /// Takes one entry of the walk; returns whether to descend into it.
    pub(super) fn visit(&mut self, rel: &[u8], node: &Node) -> Result<bool> {
        self.begin()?;
        let snap_path = PathBuf::from(format!("{}/{}", self.base, String::from_utf8_lossy(rel)));
        if rel == MARKER.as_bytes() {
            // The marker's name is taken at the target's top: such an entry
            // would be overwritten by the marker and removed at the end.
            self.summary.warnings.push(format!(
                "{}: not restored, its name is reserved for the restore marker",
                snap_path.display()
            ));
            return Ok(false);
        }
        if self.filter.excluded(&snap_path) {
            return Ok(false);
        }
        if node.kind == NodeKind::Dir {
            let item = Item::new(&self.cx.opts.target, rel, node.clone())?;
            if self.filter.include.is_some() {
                self.waiting.retain(|d| below(&d.rel, rel));
                self.waiting.push(item);
            } else {
                self.admit_dir(item)?;
            }
            return Ok(true);
        }
        if !self.filter.included(&snap_path) {
            return Ok(true);
        }
        let item = Item::new(&self.cx.opts.target, rel, node.clone())?;
        self.waiting.retain(|d| below(&d.rel, rel));
        for dir in std::mem::take(&mut self.waiting) {
            self.admit_dir(dir)?;
        }
        self.close_until(rel);
        self.batch.push(item);
        if self.batch.len() >= self.batch_limit() {
            self.flush()?;
        }
        Ok(true)
    }

    /// Moves the restored directories that `rel` is not below to `closed`.
    fn close_until(&mut self, rel: &[u8]) {
        while let Some(top) = self.open.last() {
            if below(&top.rel, rel) {
                break;
            }
            if let Some(d) = self.open.pop() {
                self.closed.push(d);
            }
        }
    }

    /// A directory to restore: created now (owner-only until its metadata
    /// is set), and (`--delete`) emptied of what the snapshot lacks there.
    fn admit_dir(&mut self, item: Item) -> Result<()> {
        self.close_until(&item.rel);
        self.summary.dirs += 1;
        if let Some(dirs) = &self.dirs {
            files::make_dir(&*dirs.get(item.dir())?, &item.name, &item.path)?;
        }
        if self.cx.opts.delete {
            self.delete_extra(&item.rel, item.node.subtree.as_ref())?;
        }
        self.open.push(item);
        Ok(())
    }

    /// Writes the waiting entries, then sets the metadata of the
    /// directories the walk has left.
    fn flush(&mut self) -> Result<()> {
        let mut items = std::mem::take(&mut self.batch);
        let opts = self.cx.opts;
        let replacing = self.cx.resumed && !self.cx.by_marker;
        self.summary.skipped += skip_existing(&mut items, opts.overwrite_mode, replacing);
        let closed = std::mem::take(&mut self.closed);
        if opts.dry_run {
            for item in &items {
                match item.node.kind {
                    NodeKind::File => {
                        self.summary.files += 1;
                        self.summary.total_bytes += item.node.size;
                    }
                    _ => self.summary.others += 1,
                }
            }
            return Ok(());
        }
        if items.is_empty() && closed.is_empty() {
            return Ok(());
        }
        let Some(dirs) = self.dirs.as_ref() else {
            return Ok(());
        };
        batch::write_batch(&self.cx, dirs, &items, &mut self.groups, &mut self.summary)?;
        drop(items);
        for d in closed {
            crate::util::check_interrupted()?;
            meta::apply_fd(
                &*dirs.get(&d.rel)?,
                &d.node,
                &d.path,
                &mut self.summary.warnings,
            )?;
        }
        Ok(())
    }

    /// After the walk: writes the last batch and sets the metadata of every
    /// directory left; returns the target's descriptors (none in a dry
    /// run).
    pub(super) fn finish(mut self) -> Result<(Option<Dirs>, RestoreSummary)> {
        while let Some(d) = self.open.pop() {
            self.closed.push(d);
        }
        // A restore with nothing in it still makes its target.
        self.begin()?;
        self.flush()?;
        Ok((self.dirs, self.summary))
    }

    /// Removes from the restored directory `dir` what the snapshot does not
    /// have there (the names of `tree`), through directory descriptors (no
    /// symlink is followed); a dry run only counts and lists them.
    fn delete_extra(&mut self, dir: &[u8], tree: Option<&BlobId>) -> Result<()> {
        crate::util::check_interrupted()?;
        let names: HashSet<Vec<u8>> = match tree {
            Some(id) => crate::tree::load(self.cx.repo, self.cx.index, id)?
                .nodes
                .into_iter()
                .map(|n| n.name)
                .collect(),
            None => HashSet::new(),
        };
        let kept =
            |name: &[u8]| names.contains(name) || (dir.is_empty() && name == MARKER.as_bytes());
        let summary = &mut self.summary;
        let mut note = |victim: PathBuf| {
            summary.deleted += 1;
            if summary.deleted_paths.len() < LISTED {
                summary.deleted_paths.push(victim.display().to_string());
            }
        };
        let path = self.cx.opts.target.join(OsStr::from_bytes(dir));
        let Some(dirs) = self.dirs.as_ref() else {
            // A dry run: what is there, by path.
            let Ok(entries) = fs::read_dir(&path) else {
                return Ok(());
            };
            for e in entries.flatten() {
                if !kept(e.file_name().as_bytes()) {
                    note(e.path());
                }
            }
            return Ok(());
        };
        let fd = dirs.get(dir)?;
        for name in dirfd::list(&fd, &path)? {
            if kept(name.to_bytes()) {
                continue;
            }
            let victim = path.join(OsStr::from_bytes(name.to_bytes()));
            dirfd::remove_at(&fd, &name, &victim)?;
            note(victim);
        }
        Ok(())
    }
}
