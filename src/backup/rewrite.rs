//! Snapshots replaced by changed copies: `vouch tag` (other tags) and
//! `vouch rewrite` (without excluded paths). A snapshot's id is the hash of
//! its manifest, so a change is a new snapshot; it names the snapshot its
//! line started with in `original`. `tag` removes the old one once the new
//! one is durable; `rewrite` only with `forget`. A snapshot locked until a
//! date is never replaced: it could not be removed.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use super::exclude::Excludes;
use super::save::{BlobJob, Dedup, Naming, Saver};
use super::{commit, Abort, SyncLevel};
use crate::backend::{FileKind, WriteSync};
use crate::error::{Error, Result};
use crate::format::{encode, BlobType, Manifest, NodeKind, Tree};
use crate::id::{BlobId, SnapshotId};
use crate::progress::Progress;
use crate::repo::{MasterIndex, Repository};

/// How `vouch tag` changes tags.
#[derive(Clone, Debug, Default)]
pub struct TagChange {
    /// Tags to add.
    pub add: Vec<String>,
    /// Tags to remove.
    pub remove: Vec<String>,
    /// Tags to have instead of the current ones (`Some(vec![])`: none).
    pub set: Option<Vec<String>>,
}

impl TagChange {
    /// The tags `old` becomes.
    fn apply(&self, old: &[String]) -> Vec<String> {
        let mut tags: Vec<String> = match &self.set {
            Some(set) => set.clone(),
            None => old.to_vec(),
        };
        for t in &self.add {
            if !tags.contains(t) {
                tags.push(t.clone());
            }
        }
        tags.retain(|t| !self.remove.contains(t));
        let mut seen = std::collections::HashSet::new();
        tags.retain(|t| seen.insert(t.clone()));
        tags
    }
}

/// One snapshot replaced (or, in a dry run, that would be).
#[derive(Clone, Debug, Serialize)]
pub struct Replaced {
    /// The snapshot changed.
    pub old: String,
    /// Its replacement (absent in a dry run).
    pub new: Option<String>,
    /// Whether the old snapshot was removed.
    pub old_removed: bool,
    /// Its tags afterwards (`tag`).
    pub tags: Vec<String>,
    /// Entries left out (`rewrite`), at most [`LISTED`] named.
    pub excluded: Vec<String>,
    /// How many entries were left out, with what is below them.
    pub excluded_entries: u64,
    /// Bytes of file content left out.
    pub excluded_bytes: u64,
}

/// How many excluded paths a result names.
pub const LISTED: usize = 1000;

fn refuse_locked(repo: &Repository, ids: &[SnapshotId]) -> Result<()> {
    let locks = repo.point_locks()?;
    let now = crate::util::now_ns();
    for id in ids {
        if let Some(until) = locks.in_force(id, now) {
            return Err(Error::PointLocked(format!(
                "snapshot {} is locked until {}: it cannot be replaced (nothing was changed)",
                id.short(),
                crate::util::rfc3339(until)
            )));
        }
    }
    Ok(())
}

/// The `original` a replacement of `id` names.
fn original_of(id: &SnapshotId, m: &Manifest) -> Option<SnapshotId> {
    Some(m.original.unwrap_or(*id))
}

/// Changes the tags of `snapshots`; those whose tags do not change are
/// left alone (and not listed).
pub fn retag(
    repo: &Repository,
    snapshots: &[(SnapshotId, Manifest)],
    change: &TagChange,
    dry_run: bool,
) -> Result<Vec<Replaced>> {
    let changing: Vec<&(SnapshotId, Manifest)> = snapshots
        .iter()
        .filter(|(_, m)| change.apply(&m.tags) != m.tags)
        .collect();
    let ids: Vec<SnapshotId> = changing.iter().map(|(id, _)| *id).collect();
    refuse_locked(repo, &ids)?;
    let guard = (!dry_run).then(|| repo.lock(false, "tag")).transpose()?;
    let mut out = Vec::new();
    for (id, m) in changing {
        let tags = change.apply(&m.tags);
        let mut done = Replaced {
            old: id.to_hex(),
            new: None,
            old_removed: false,
            tags: tags.clone(),
            excluded: Vec::new(),
            excluded_entries: 0,
            excluded_bytes: 0,
        };
        if let Some(guard) = &guard {
            let manifest = Manifest {
                tags,
                original: original_of(id, m),
                ..m.clone()
            };
            let new = repo.save_snapshot(&manifest, WriteSync::Now)?;
            guard.check()?;
            let mut locks = repo.point_locks()?;
            repo.delete_snapshot_checked(id, &mut locks)?;
            done.new = Some(new.to_hex());
            done.old_removed = true;
        }
        out.push(done);
    }
    if !dry_run && !out.is_empty() {
        repo.backend().sync_deletes(FileKind::Snapshot)?;
    }
    Ok(out)
}

/// What `rewrite` leaves out.
pub struct RewriteOptions {
    /// Exclude patterns (as `backup --exclude`).
    pub excludes: Vec<String>,
    /// Exclude patterns ignoring case.
    pub iexcludes: Vec<String>,
    /// Files of exclude patterns.
    pub exclude_files: Vec<PathBuf>,
    /// Remove each original once its rewrite is committed.
    pub forget: bool,
    /// Only say what would be left out.
    pub dry_run: bool,
}

/// Counts of one tree's rewrite.
#[derive(Default)]
struct Cut {
    entries: u64,
    bytes: u64,
    paths: Vec<String>,
}

/// Writes new snapshots of `snapshots` without the entries the excludes
/// match; a snapshot with nothing to leave out is left alone (not listed).
pub fn rewrite(
    repo: &Repository,
    snapshots: &[(SnapshotId, Manifest)],
    opts: &RewriteOptions,
) -> Result<Vec<Replaced>> {
    let excludes = Excludes::new(
        &opts.excludes,
        &opts.iexcludes,
        &opts.exclude_files,
        false,
        Vec::new(),
    )?;
    if opts.excludes.is_empty() && opts.iexcludes.is_empty() && opts.exclude_files.is_empty() {
        return Err(Error::InvalidArgument(
            "nothing to leave out: give --exclude, --iexclude or --exclude-file".into(),
        ));
    }
    if opts.forget && !opts.dry_run {
        refuse_locked(
            repo,
            &snapshots.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        )?;
    }
    let guard = repo.lock(false, "rewrite")?;
    let index = Arc::new(repo.load_index()?);
    let mut out = Vec::new();
    for (id, m) in snapshots {
        crate::util::check_interrupted()?;
        let abort = Arc::new(Abort::with_cancel(None));
        let dedup = Arc::new(Dedup::new(index.clone()));
        let saver = Saver::start(
            repo,
            2,
            WriteSync::Deferred,
            Arc::new(Progress::default()),
            abort.clone(),
            None,
            opts.dry_run,
        );
        let mut w = TreeRewrite {
            repo,
            index: &index,
            excludes: &excludes,
            dedup: &dedup,
            saver: &saver,
            abort: &abort,
            cut: Cut::default(),
        };
        let root = w.tree(&m.tree, Path::new("/"), 0);
        let cut = std::mem::take(&mut w.cut);
        let packs = saver.finish()?;
        if let Some(e) = abort.take() {
            return Err(e);
        }
        let root = root?;
        if cut.entries == 0 {
            continue;
        }
        let mut done = Replaced {
            old: id.to_hex(),
            new: None,
            old_removed: false,
            tags: m.tags.clone(),
            excluded: cut.paths,
            excluded_entries: cut.entries,
            excluded_bytes: cut.bytes,
        };
        if !opts.dry_run {
            let mut summary = m.summary.clone();
            summary.total_bytes = summary.total_bytes.saturating_sub(cut.bytes);
            let manifest = Manifest {
                tree: root,
                original: original_of(id, m),
                summary,
                ..m.clone()
            };
            let new = commit::commit(repo, &guard, &packs, &manifest, SyncLevel::Filesystem)?;
            done.new = Some(new.to_hex());
            if opts.forget {
                let mut locks = repo.point_locks()?;
                repo.delete_snapshot_checked(id, &mut locks)?;
                repo.backend().sync_deletes(FileKind::Snapshot)?;
                done.old_removed = true;
            }
        }
        out.push(done);
    }
    Ok(out)
}

/// One snapshot's trees being rewritten.
struct TreeRewrite<'a> {
    repo: &'a Repository,
    index: &'a Arc<MasterIndex>,
    excludes: &'a Excludes,
    dedup: &'a Arc<Dedup>,
    saver: &'a Saver,
    abort: &'a Arc<Abort>,
    cut: Cut,
}

impl TreeRewrite<'_> {
    /// The id of tree `id` (at `path`) without the excluded entries: the
    /// same id when nothing below it is left out (never encoded again).
    fn tree(&mut self, id: &BlobId, path: &Path, depth: usize) -> Result<BlobId> {
        if depth >= crate::tree::MAX_DEPTH {
            return Err(Error::Damaged(format!(
                "the trees under {} nest deeper than {} directories",
                path.display(),
                crate::tree::MAX_DEPTH
            )));
        }
        let tree = crate::tree::load(self.repo, self.index, id)?;
        let mut changed = false;
        let mut nodes = Vec::with_capacity(tree.nodes.len());
        for mut node in tree.nodes {
            let child = path.join(std::ffi::OsStr::from_bytes(&node.name));
            if self.excludes.excluded(&child) {
                changed = true;
                self.count_out(&node, &child)?;
                continue;
            }
            if let (NodeKind::Dir, Some(sub)) = (node.kind, node.subtree) {
                let new = self.tree(&sub, &child, depth + 1)?;
                if new != sub {
                    node.subtree = Some(new);
                    changed = true;
                }
            }
            nodes.push(node);
        }
        if !changed {
            return Ok(*id);
        }
        let data = encode(&Tree { nodes });
        let new = self.repo.key().blob_id(&data);
        if self.dedup.claim(&new) {
            self.saver
                .tx
                .send(BlobJob {
                    naming: Naming::Known(new),
                    kind: BlobType::Tree,
                    data,
                })
                .map_err(|_| self.abort.error_or_interrupted())?;
        }
        Ok(new)
    }

    /// Counts an excluded entry and everything below it.
    fn count_out(&mut self, node: &crate::format::Node, path: &Path) -> Result<()> {
        if self.cut.paths.len() < LISTED {
            self.cut.paths.push(path.display().to_string());
        }
        self.cut.entries += 1;
        self.cut.bytes += if node.kind == NodeKind::File {
            node.size
        } else {
            0
        };
        if let (NodeKind::Dir, Some(sub)) = (node.kind, node.subtree) {
            crate::tree::walk(self.repo, self.index, &sub, &mut |_, n| {
                self.cut.entries += 1;
                if n.kind == NodeKind::File {
                    self.cut.bytes += n.size;
                }
                Ok(true)
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::TagChange;

    #[test]
    fn tag_changes_add_remove_and_set() {
        let old = vec!["a".to_string(), "b".to_string()];
        let add = TagChange {
            add: vec!["c".into(), "a".into()],
            ..Default::default()
        };
        assert_eq!(add.apply(&old), ["a", "b", "c"]);
        let remove = TagChange {
            remove: vec!["a".into()],
            ..Default::default()
        };
        assert_eq!(remove.apply(&old), ["b"]);
        let set = TagChange {
            set: Some(vec!["x".into(), "x".into()]),
            add: vec!["y".into()],
            ..Default::default()
        };
        assert_eq!(set.apply(&old), ["x", "y"]);
        let none = TagChange {
            set: Some(vec![]),
            ..Default::default()
        };
        assert!(none.apply(&old).is_empty());
    }
}
