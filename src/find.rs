//! `vouch find`: which entries of a snapshot match names, or hold given
//! blobs (to map a damaged blob or pack to the files it takes with it).
//!
//! A name pattern's matches inside a tree depend only on that tree, so they
//! are computed once per distinct tree and shared by every snapshot and
//! every directory that holds it: searching many snapshots of a slowly
//! changing tree costs little more than searching one. Patterns on whole
//! paths depend on where a tree sits, and are matched in a plain walk.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use globset::GlobSet;

use crate::error::{Error, Result};
use crate::format::{Node, NodeKind};
use crate::id::BlobId;
use crate::repo::{MasterIndex, Repository};
use crate::tree::{MAX_DEPTH, MAX_ENTRIES};

/// What an entry must be to be found.
pub enum Matcher {
    /// Glob patterns; one without `/` matches an entry's name, one with `/`
    /// its whole path (from the snapshot's root, with a leading `/`).
    Names {
        /// Patterns matched against the name.
        names: Option<GlobSet>,
        /// Patterns matched against the whole path.
        paths: Option<GlobSet>,
    },
    /// Files with a content blob, and directories whose tree is, in this
    /// set.
    Blobs(HashSet<BlobId>),
}

impl Matcher {
    /// Matches glob `patterns` (`*`, `?`, `[...]`, `**` across directories
    /// in path patterns), optionally ignoring case.
    pub fn names(patterns: &[String], ignore_case: bool) -> Result<Matcher> {
        let globs = crate::globs::compile(
            patterns.iter().map(|p| (p.as_str(), ignore_case)),
            "pattern",
        )?;
        Ok(Matcher::Names {
            names: globs.names,
            paths: globs.paths,
        })
    }

    /// Whether matches depend on the directory a tree sits in.
    fn needs_paths(&self) -> bool {
        matches!(self, Matcher::Names { paths: Some(_), .. })
    }

    fn matches_node(&self, node: &Node) -> bool {
        match self {
            Matcher::Names { names, .. } => names.as_ref().is_some_and(|g| {
                // Names are bytes; a name that is not UTF-8 is matched in its
                // lossy form (the replacement character matches `?` and `*`).
                g.is_match(String::from_utf8_lossy(&node.name).as_ref())
            }),
            Matcher::Blobs(set) => match node.kind {
                NodeKind::File => node
                    .content
                    .iter()
                    .any(|e| e.blob.is_some_and(|b| set.contains(&b))),
                NodeKind::Dir => node.subtree.is_some_and(|t| set.contains(&t)),
                _ => false,
            },
        }
    }

    fn matches_path(&self, path: &[u8]) -> bool {
        match self {
            Matcher::Names { paths: Some(g), .. } => {
                g.is_match(String::from_utf8_lossy(path).as_ref())
            }
            _ => false,
        }
    }
}

/// The blobs named by `prefixes`: a full id (64 hex digits) as it is, even
/// when no index lists it (a lost blob still has files that need it); a
/// shorter prefix (at least 4 digits) is every indexed blob it starts, and
/// an error when none.
pub fn blobs_with_prefixes(index: &MasterIndex, prefixes: &[String]) -> Result<HashSet<BlobId>> {
    let wanted = parse_prefixes(prefixes, "blob")?;
    let mut found = HashSet::new();
    let mut seen: Vec<bool> = wanted.iter().map(|p| p.len() == 64).collect();
    for p in wanted.iter().filter(|p| p.len() == 64) {
        let mut id = [0u8; 32];
        if hex::decode_to_slice(p, &mut id).is_ok() {
            found.insert(BlobId(id));
        }
    }
    if seen.iter().all(|s| *s) {
        return Ok(found);
    }
    if let Some(i) = blobs_where(index, &wanted, &mut seen, &mut found, |_, blob| blob.0) {
        return Err(Error::NotFound(format!(
            "no blob {} in the index: `vouch verify` names damaged blobs by their full id",
            wanted[i]
        )));
    }
    Ok(found)
}

/// Every blob of the packs whose hex id starts with one of `prefixes`; an
/// error names a prefix no indexed pack has.
pub fn blobs_of_packs(index: &MasterIndex, prefixes: &[String]) -> Result<HashSet<BlobId>> {
    let wanted = parse_prefixes(prefixes, "pack")?;
    let mut seen = vec![false; wanted.len()];
    let mut found = HashSet::new();
    if let Some(i) = blobs_where(index, &wanted, &mut seen, &mut found, |pack, _| pack.0) {
        return Err(Error::NotFound(format!(
            "no pack {} in the index (a pack no index names holds nothing a snapshot can reach; \
             `vouch repair index` indexes packs that are present)",
            wanted[i]
        )));
    }
    Ok(found)
}

/// Adds to `found` each indexed blob whose `key` (its own id or its
/// pack's), in hex, starts with one of `wanted`, marking that prefix
/// `seen`; returns the first prefix nothing matched.
fn blobs_where(
    index: &MasterIndex,
    wanted: &[String],
    seen: &mut [bool],
    found: &mut HashSet<BlobId>,
    key: impl Fn(&crate::id::PackId, &BlobId) -> [u8; 32],
) -> Option<usize> {
    for (pack, entry) in index.iter() {
        let hex = hex::encode(key(&pack.id, &entry.id));
        for (i, p) in wanted.iter().enumerate() {
            if hex.starts_with(p.as_str()) {
                found.insert(entry.id);
                seen[i] = true;
            }
        }
    }
    seen.iter().position(|s| !s)
}

fn parse_prefixes(prefixes: &[String], what: &str) -> Result<Vec<String>> {
    prefixes
        .iter()
        .map(|p| {
            let p = p.trim().to_ascii_lowercase();
            if p.len() < 4 || p.len() > 64 || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(Error::InvalidArgument(format!(
                    "{p:?} is not a {what} id: 4 to 64 hex digits"
                )));
            }
            Ok(p)
        })
        .collect()
}

/// One entry found: its path from the snapshot's root (leading `/`) and
/// its node.
#[derive(Clone, Debug)]
pub struct Found {
    /// Path, raw bytes.
    pub path: Vec<u8>,
    /// The entry.
    pub node: Node,
}

/// Entries found in one tree, relative to it (no leading `/`).
type Matches = Rc<Vec<Found>>;

/// Searches snapshots' trees, sharing the work across them.
pub struct Finder<'a> {
    repo: &'a Repository,
    index: &'a MasterIndex,
    matcher: Matcher,
    memo: HashMap<BlobId, Matches>,
    /// Distinct trees loaded so far.
    pub trees_loaded: u64,
}

impl<'a> Finder<'a> {
    /// A search of `repo` for what `matcher` accepts.
    pub fn new(repo: &'a Repository, index: &'a MasterIndex, matcher: Matcher) -> Self {
        Finder {
            repo,
            index,
            matcher,
            memo: HashMap::new(),
            trees_loaded: 0,
        }
    }

    /// The entries under tree `root` that match, in walk order (a
    /// directory before what it holds, names in order).
    pub fn search(&mut self, root: &BlobId) -> Result<Vec<Found>> {
        if self.matcher.needs_paths() {
            return self.search_by_path(root);
        }
        let found = self.in_tree(root, 0)?;
        Ok(found
            .iter()
            .map(|f| {
                let mut path = Vec::with_capacity(f.path.len() + 1);
                path.push(b'/');
                path.extend_from_slice(&f.path);
                Found {
                    path,
                    node: f.node.clone(),
                }
            })
            .collect())
    }

    fn search_by_path(&mut self, root: &BlobId) -> Result<Vec<Found>> {
        let mut out = Vec::new();
        let matcher = &self.matcher;
        crate::tree::walk(self.repo, self.index, root, &mut |rel, node| {
            let mut path = Vec::with_capacity(rel.len() + 1);
            path.push(b'/');
            path.extend_from_slice(rel);
            if matcher.matches_node(node) || matcher.matches_path(&path) {
                out.push(Found {
                    path,
                    node: node.clone(),
                });
            }
            crate::util::check_interrupted()?;
            Ok(true)
        })?;
        Ok(out)
    }

    /// The matches under tree `id`, relative to it, computed once per tree.
    fn in_tree(&mut self, id: &BlobId, depth: usize) -> Result<Matches> {
        if let Some(m) = self.memo.get(id) {
            return Ok(m.clone());
        }
        if depth >= MAX_DEPTH {
            return Err(Error::Damaged(format!(
                "the trees under {id} nest deeper than {MAX_DEPTH} directories"
            )));
        }
        crate::util::check_interrupted()?;
        let tree = crate::tree::load(self.repo, self.index, id)?;
        self.trees_loaded += 1;
        let mut out: Vec<Found> = Vec::new();
        for node in tree.nodes {
            let below = match (node.kind, node.subtree) {
                (NodeKind::Dir, Some(sub)) => Some(self.in_tree(&sub, depth + 1)?),
                _ => None,
            };
            let name = node.name.clone();
            if self.matcher.matches_node(&node) {
                out.push(Found {
                    path: name.clone(),
                    node,
                });
            }
            for f in below.iter().flat_map(|b| b.iter()) {
                let mut path = Vec::with_capacity(name.len() + 1 + f.path.len());
                path.extend_from_slice(&name);
                path.push(b'/');
                path.extend_from_slice(&f.path);
                out.push(Found {
                    path,
                    node: f.node.clone(),
                });
            }
            if out.len() as u64 > MAX_ENTRIES {
                return Err(Error::Damaged(format!(
                    "the trees under {id} expand to more than {MAX_ENTRIES} entries"
                )));
            }
        }
        let out = Rc::new(out);
        self.memo.insert(*id, out.clone());
        Ok(out)
    }
}
