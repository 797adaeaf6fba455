//! Counting what changed between a snapshot and its parent, from their
//! trees and the index alone: which files were added, changed, deleted or
//! renamed, which of them stopped compressing, which extension renamed
//! files gained, and which ransom-note names appeared. Subtrees with the
//! same id are skipped unread, so the cost follows the change, not the
//! size of the tree.

use std::collections::{BTreeMap, HashMap, HashSet};

use vouch_events::{ChangeFigures, SnapshotId};

use super::names;
use crate::crypto::SEAL_OVERHEAD;
use crate::error::{Error, Result};
use crate::format::{Node, NodeKind, Tree};
use crate::id::BlobId;
use crate::repo::{MasterIndex, Repository};

/// Files smaller than this are not weighed for compressibility: zstd's
/// frame costs more than it saves on a few hundred bytes, so their ratio
/// says nothing.
pub const MIN_WEIGHED_SIZE: u64 = 1024;
/// At most this stored/raw ratio, a file compresses.
pub const COMPRESSIBLE: f64 = 0.90;
/// At least this stored/raw ratio, a file does not compress.
pub const INCOMPRESSIBLE: f64 = 0.97;
/// At least this share of a file's changed bytes must not compress for
/// the file to count as having stopped compressing.
pub const CHANGED_INCOMPRESSIBLE: f64 = 0.5;
/// Paths kept per kind of evidence (the heaviest).
const KEPT_PATHS: usize = 32;

/// What a comparison found: the figures for the log, and the paths behind
/// them for the humans who read an anomaly.
#[derive(Clone, Debug)]
pub struct Profile {
    /// The figures (`backup.committed`'s `changes`).
    pub figures: ChangeFigures,
    /// Files that stopped compressing, largest first.
    pub incompressible_paths: Vec<String>,
    /// Files that gained [`ChangeFigures::churn_extension`].
    pub churn_paths: Vec<String>,
    /// Where [`ChangeFigures::note_name`] appeared.
    pub note_paths: Vec<String>,
}

impl Profile {
    /// The profile of a snapshot whose tree is its parent's.
    pub fn unchanged(repo: &Repository, compared_with: SnapshotId, files: u64) -> Profile {
        Profile {
            figures: ChangeFigures {
                compared_with,
                files_before: files,
                added: 0,
                changed: 0,
                deleted: 0,
                renamed: 0,
                became_incompressible: (repo.config().compression_level > 0).then_some(0),
                churn_extension: None,
                churn_files: 0,
                note_name: None,
                note_dirs: 0,
            },
            incompressible_paths: Vec::new(),
            churn_paths: Vec::new(),
            note_paths: Vec::new(),
        }
    }
}

/// Compares the tree `after` with the tree `before` of the point
/// `compared_with`, which holds `files_before` regular files.
/// `compression_known`: false when the repository stores without
/// compression (then nothing tells what compresses).
pub fn measure(
    repo: &Repository,
    index: &MasterIndex,
    compared_with: SnapshotId,
    files_before: u64,
    before: &BlobId,
    after: &BlobId,
) -> Result<Profile> {
    // The walk recurses once per directory level (at most
    // `tree::MAX_DEPTH`): it gets the walker's large stack, not the caller's.
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("anomaly-profile".into())
            .stack_size(64 << 20)
            .spawn_scoped(scope, || {
                measure_here(repo, index, compared_with, files_before, before, after)
            })
            .map_err(|e| Error::Internal(format!("cannot start the comparison's thread: {e}")))?
            .join()
            .map_err(|_| Error::Internal("the comparison with the parent panicked".into()))?
    })
}

fn measure_here(
    repo: &Repository,
    index: &MasterIndex,
    compared_with: SnapshotId,
    files_before: u64,
    before: &BlobId,
    after: &BlobId,
) -> Result<Profile> {
    let compression_known = repo.config().compression_level > 0;
    let mut walk = Walk {
        visited: 0,
        repo,
        index,
        compression_known,
        added: 0,
        changed: 0,
        deleted: 0,
        renamed: 0,
        became_incompressible: 0,
        incompressible: Heaviest::default(),
        churn: HashMap::new(),
        notes: HashMap::new(),
    };
    walk.dir("", Some(*before), Some(*after), 0)?;
    let (churn_extension, churn_files, churn_paths) = walk
        .churn
        .into_iter()
        .max_by(|a, b| a.1 .0.cmp(&b.1 .0).then_with(|| b.0.cmp(&a.0)))
        .map_or((None, 0, Vec::new()), |(ext, (n, paths))| {
            (Some(ext), n, paths)
        });
    let (note_name, note_dirs, note_paths) = walk
        .notes
        .into_iter()
        .max_by(|a, b| a.1 .0.cmp(&b.1 .0).then_with(|| b.0.cmp(&a.0)))
        .map_or((None, 0, Vec::new()), |(name, (n, paths))| {
            (Some(name), n, paths)
        });
    Ok(Profile {
        figures: ChangeFigures {
            compared_with,
            files_before,
            added: walk.added,
            changed: walk.changed,
            deleted: walk.deleted,
            renamed: walk.renamed,
            became_incompressible: compression_known.then_some(walk.became_incompressible),
            churn_extension,
            churn_files,
            note_name,
            note_dirs,
        },
        incompressible_paths: walk.incompressible.into_paths(),
        churn_paths,
        note_paths,
    })
}

/// The heaviest paths seen, bounded.
#[derive(Default)]
struct Heaviest(Vec<(u64, String)>);

impl Heaviest {
    fn push(&mut self, weight: u64, path: String) {
        self.0.push((weight, path));
        if self.0.len() > 4 * KEPT_PATHS {
            self.trim();
        }
    }

    fn trim(&mut self) {
        self.0
            .sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        self.0.truncate(KEPT_PATHS);
    }

    fn into_paths(mut self) -> Vec<String> {
        self.trim();
        self.0.into_iter().map(|(_, p)| p).collect()
    }
}

/// Counts (and a few paths) per key.
type Tally = HashMap<String, (u64, Vec<String>)>;

fn tally(t: &mut Tally, key: &str, path: String) {
    let e = t.entry(key.to_owned()).or_default();
    e.0 += 1;
    if e.1.len() < KEPT_PATHS {
        e.1.push(path);
    }
}

struct Walk<'a> {
    /// Tree entries looked at so far (capped at `tree::MAX_ENTRIES`).
    visited: u64,
    repo: &'a Repository,
    index: &'a MasterIndex,
    compression_known: bool,
    added: u64,
    changed: u64,
    deleted: u64,
    renamed: u64,
    became_incompressible: u64,
    incompressible: Heaviest,
    churn: Tally,
    notes: Tally,
}

fn join(dir: &str, name: &str) -> String {
    format!("{dir}/{name}")
}

impl Walk<'_> {
    /// Loads a tree at nesting `depth`, within the caps every walk of a
    /// snapshot keeps (`tree::MAX_DEPTH`, `tree::MAX_ENTRIES`).
    fn load(&mut self, id: Option<BlobId>, depth: usize) -> Result<Tree> {
        if depth > crate::tree::MAX_DEPTH {
            return Err(Error::Damaged(format!(
                "trees nested deeper than {} levels",
                crate::tree::MAX_DEPTH
            )));
        }
        let tree = match id {
            Some(id) => crate::tree::load(self.repo, self.index, &id)?,
            None => Tree::default(),
        };
        self.visited += tree.nodes.len() as u64;
        if self.visited > crate::tree::MAX_ENTRIES {
            return Err(Error::Damaged(format!(
                "the snapshots expand to more than {} entries",
                crate::tree::MAX_ENTRIES
            )));
        }
        Ok(tree)
    }

    /// Regular files at and below `node`, which is at nesting `depth`.
    fn files_below(&mut self, node: &Node, depth: usize) -> Result<u64> {
        match node.kind {
            NodeKind::File => Ok(1),
            NodeKind::Dir => {
                let mut n = 0;
                for child in self.load(node.subtree, depth + 1)?.nodes {
                    n += self.files_below(&child, depth + 1)?;
                }
                Ok(n)
            }
            _ => Ok(0),
        }
    }

    /// Stored bytes over raw bytes of a file's content, from the index;
    /// none for a small file, a file of holes only, or a blob the index
    /// does not know.
    fn ratio(&self, node: &Node) -> Option<f64> {
        if node.kind != NodeKind::File || node.size < MIN_WEIGHED_SIZE {
            return None;
        }
        let (mut stored, mut raw) = (0u64, 0u64);
        for extent in &node.content {
            let Some(blob) = &extent.blob else { continue };
            let (_, entry) = self.index.get(blob)?;
            stored += u64::from(entry.length).saturating_sub(SEAL_OVERHEAD as u64);
            raw += u64::from(entry.raw_length);
        }
        (raw > 0).then(|| stored as f64 / raw as f64)
    }

    /// The share of the bytes that changed (the blobs of `after` that
    /// `before` does not have) stored as they were, because they did not
    /// compress: a file encrypted whole gives 1, one encrypted in large
    /// blocks (its head, or stripes a chunk long) gives the share of its
    /// changed chunks the encryption covered, an edited text file 0. None
    /// when fewer than [`MIN_WEIGHED_SIZE`] bytes changed or a blob is not
    /// in the index.
    fn changed_share(&self, before: &Node, after: &Node) -> Option<f64> {
        let old: HashSet<&BlobId> = before
            .content
            .iter()
            .filter_map(|e| e.blob.as_ref())
            .collect();
        let (mut raw_stored, mut raw) = (0u64, 0u64);
        for blob in after.content.iter().filter_map(|e| e.blob.as_ref()) {
            if old.contains(blob) {
                continue;
            }
            let (_, entry) = self.index.get(blob)?;
            let plain = u64::from(entry.raw_length);
            let stored = u64::from(entry.length).saturating_sub(SEAL_OVERHEAD as u64);
            if stored as f64 >= plain as f64 * INCOMPRESSIBLE {
                raw_stored += plain;
            }
            raw += plain;
        }
        (raw >= MIN_WEIGHED_SIZE).then(|| raw_stored as f64 / raw as f64)
    }

    /// Whether `before` compressed and at least half of what changed of it,
    /// in `after`, does not (the whole file, or the blocks an intermittent
    /// encryption rewrote).
    fn stopped_compressing(&self, before: &Node, after: &Node) -> bool {
        self.compression_known
            && self.ratio(before).is_some_and(|b| b <= COMPRESSIBLE)
            && self
                .changed_share(before, after)
                .is_some_and(|a| a >= CHANGED_INCOMPRESSIBLE)
    }

    fn note_incompressible(&mut self, before: &Node, after: &Node, path: String) {
        if self.stopped_compressing(before, after) {
            self.became_incompressible += 1;
            self.incompressible.push(after.size, path);
        }
    }

    fn dir(
        &mut self,
        path: &str,
        before: Option<BlobId>,
        after: Option<BlobId>,
        depth: usize,
    ) -> Result<()> {
        if before == after {
            return Ok(());
        }
        let existed = before.is_some() && after.is_some();
        let (old, new) = (self.load(before, depth)?, self.load(after, depth)?);
        let old_by_name: BTreeMap<&[u8], &Node> =
            old.nodes.iter().map(|n| (n.name.as_slice(), n)).collect();
        let new_by_name: BTreeMap<&[u8], &Node> =
            new.nodes.iter().map(|n| (n.name.as_slice(), n)).collect();
        // Files present on one side only, by name: renames are paired
        // among them before what is left counts as added or deleted.
        let mut gone: BTreeMap<String, &Node> = BTreeMap::new();
        let mut came: Vec<(String, &Node)> = Vec::new();
        for (name, o) in &old_by_name {
            let label = String::from_utf8_lossy(name).into_owned();
            match new_by_name.get(name) {
                None if o.kind == NodeKind::File => {
                    gone.insert(label, o);
                }
                None => self.deleted += self.files_below(o, depth)?,
                Some(n) => self.both(path, &label, o, n, depth)?,
            }
        }
        for (name, n) in &new_by_name {
            if old_by_name.contains_key(name) {
                continue;
            }
            let label = String::from_utf8_lossy(name).into_owned();
            if n.kind == NodeKind::File {
                came.push((label, n));
            } else {
                self.added += self.files_below(n, depth)?;
            }
        }
        // Extensions the directory had: a file that takes one of them
        // (`x.c` gone, `x.h` came, beside other `.h` files) is ordinary
        // churn of a source tree, not a rename to a foreign extension.
        let had: HashSet<String> = old_by_name
            .keys()
            .filter_map(|n| names::extension(&String::from_utf8_lossy(n)).map(|(_, e)| e))
            .collect();
        let mut by_stem: HashMap<String, Vec<String>> = HashMap::new();
        for g in gone.keys() {
            if let Some((stem, _)) = names::extension(g) {
                by_stem.entry(stem.to_owned()).or_default().push(g.clone());
            }
        }
        let mut unpaired: Vec<(String, &Node)> = Vec::new();
        for (name, n) in came {
            match Self::rename_source(&gone, &by_stem, &had, &name) {
                Some((old_name, ext)) => {
                    let o = gone.remove(&old_name).expect("the source was just found");
                    self.renamed += 1;
                    let at = join(path, &name);
                    // A conversion (`.js` -> `.ts`) or a plain rename
                    // (`.jpeg` -> `.jpg`) is not churn: the content must have
                    // changed into something not known to compress.
                    let rewritten = o.content != n.content
                        && !self
                            .changed_share(o, n)
                            .is_some_and(|r| r < CHANGED_INCOMPRESSIBLE);
                    if rewritten && !names::is_ordinary(&ext) && !had.contains(&ext) {
                        tally(&mut self.churn, &ext, at.clone());
                    }
                    if !names::is_compressed(&ext) {
                        self.note_incompressible(o, n, at);
                    }
                }
                None => unpaired.push((name, n)),
            }
        }
        // Files deleted and others added in the same directory: where
        // compressible files went and as many incompressible ones came,
        // the new ones took the old ones' place (ransomware that names
        // its output at random). New files alone (photos, archives) are
        // not replacements.
        if self.compression_known {
            let went = gone
                .values()
                .filter(|o| self.ratio(o).is_some_and(|r| r <= COMPRESSIBLE))
                .count();
            let mut replacing: Vec<(&String, &Node)> = unpaired
                .iter()
                .filter(|(name, n)| {
                    self.ratio(n).is_some_and(|r| r >= INCOMPRESSIBLE)
                        && !names::extension(name).is_some_and(|(_, e)| names::is_compressed(&e))
                })
                .map(|(name, n)| (name, *n))
                .collect();
            replacing.truncate(went);
            for (name, n) in replacing {
                self.became_incompressible += 1;
                self.incompressible.push(n.size, join(path, name));
            }
        }
        for (name, _) in &unpaired {
            if existed && names::is_ransom_note(name) {
                tally(&mut self.notes, name, join(path, name));
            }
        }
        self.added += unpaired.len() as u64;
        self.deleted += gone.len() as u64;
        Ok(())
    }

    /// The same name on both sides.
    fn both(&mut self, path: &str, name: &str, o: &Node, n: &Node, depth: usize) -> Result<()> {
        match (o.kind, n.kind) {
            (NodeKind::Dir, NodeKind::Dir) => {
                self.dir(&join(path, name), o.subtree, n.subtree, depth + 1)
            }
            (NodeKind::File, NodeKind::File) => {
                if o.content != n.content || o.size != n.size {
                    self.changed += 1;
                    self.note_incompressible(o, n, join(path, name));
                }
                Ok(())
            }
            (a, b) if a == b => Ok(()),
            _ => {
                self.deleted += self.files_below(o, depth)?;
                self.added += self.files_below(n, depth)?;
                Ok(())
            }
        }
    }

    /// The deleted file `name` was renamed from, and the extension it
    /// gained: `a.doc` for `a.doc.locked` (an extension appended), else a
    /// file of the same stem (`a.doc` for `a.locked`, an extension
    /// replaced by one the directory did not have). `by_stem`: the names
    /// of `gone` by their stem, so that a directory with many files gone
    /// and come costs one lookup per file.
    fn rename_source(
        gone: &BTreeMap<String, &Node>,
        by_stem: &HashMap<String, Vec<String>>,
        had: &HashSet<String>,
        name: &str,
    ) -> Option<(String, String)> {
        let (stem, ext) = names::extension(name)?;
        if gone.contains_key(stem) {
            return Some((stem.to_owned(), ext));
        }
        if had.contains(&ext) {
            return None;
        }
        by_stem
            .get(stem)?
            .iter()
            .find(|g| gone.contains_key(*g))
            .map(|g| (g.clone(), ext))
    }
}
