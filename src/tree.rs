//! Walking the trees of a snapshot, and the rules a tree must follow before
//! anything trusts its names.
//!
//! Every tree loaded through this module is checked with [`check_tree`]: a
//! node name is one path component (not empty, not `.` or `..`, no `/` or
//! NUL byte) and the nodes are strictly sorted by name bytes, which is how
//! the backup writes them (`backup::assemble` sorts with `Vec<u8>`'s byte
//! order, and names within one directory are unique). A tree that breaks
//! these rules was not written by vouch's backup: it is damage.
//!
//! Walks are iterative (no recursion, so deep nesting cannot overflow the
//! stack), refuse trees nested deeper than [`MAX_DEPTH`], and refuse a
//! snapshot whose trees expand to more than [`MAX_ENTRIES`] entries. Shared
//! subtrees are legitimate (two identical directories have one tree), so a
//! walk cannot simply skip a subtree seen before; the cap is what stops a
//! crafted DAG (a tree naming the same subtree twice, sixty levels deep)
//! from expanding exponentially.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, Result};
use crate::format::{Node, NodeKind, Tree};
use crate::id::BlobId;
use crate::repo::{MasterIndex, Repository};

/// Deepest nesting of directories a walk accepts. A backup reads its
/// sources by path, and a path of `PATH_MAX` (4096) bytes holds at most
/// 2048 components, so no snapshot written by vouch is deeper.
pub const MAX_DEPTH: usize = 2048;

/// Most entries a snapshot may expand to before a walk calls it damaged (a
/// crafted tree DAG). A restore keeps every entry in memory (a few hundred
/// bytes each), so a snapshot this large could not be restored on an
/// ordinary machine anyway.
pub const MAX_ENTRIES: u64 = 1 << 28;

/// Why a name cannot be a node name, or `None` if it is a valid one.
pub fn bad_name(name: &[u8]) -> Option<&'static str> {
    if name.is_empty() {
        Some("an empty name")
    } else if name == b"." || name == b".." {
        Some("a name that is . or ..")
    } else if name.contains(&b'/') {
        Some("a name with a /")
    } else if name.contains(&0) {
        Some("a name with a NUL byte")
    } else {
        None
    }
}

/// Checks the names of a tree: each is one path component, and the nodes
/// are strictly sorted by name bytes (no duplicates). Returns
/// [`Error::Damaged`] naming the tree and the bad name.
pub fn check_tree(id: &BlobId, tree: &Tree) -> Result<()> {
    for (i, node) in tree.nodes.iter().enumerate() {
        if let Some(why) = bad_name(&node.name) {
            return Err(Error::Damaged(format!(
                "tree {id} holds {why}: {:?}",
                node.display_name()
            )));
        }
        if i > 0 && tree.nodes[i - 1].name >= node.name {
            let what = if tree.nodes[i - 1].name == node.name {
                "twice"
            } else {
                "out of order"
            };
            return Err(Error::Damaged(format!(
                "tree {id} lists the name {:?} {what}",
                node.display_name()
            )));
        }
    }
    Ok(())
}

/// Loads a tree and checks its names ([`check_tree`]).
pub fn load(repo: &Repository, index: &MasterIndex, id: &BlobId) -> Result<Tree> {
    let tree = repo.load_tree(index, id)?;
    check_tree(id, &tree)?;
    Ok(tree)
}

/// Visits every node under `root` depth-first, in name order. `visit` gets
/// the path (components joined with `/`, no leading slash) and the node, and
/// returns whether to descend into a directory. Every tree is checked
/// ([`check_tree`]); nesting and expansion are capped ([`MAX_DEPTH`],
/// [`MAX_ENTRIES`]).
pub fn walk(
    repo: &Repository,
    index: &MasterIndex,
    root: &BlobId,
    visit: &mut dyn FnMut(&[u8], &Node) -> Result<bool>,
) -> Result<()> {
    walk_keeping(repo, index, root, KEEP_NODES, visit)
}

/// [`walk`], keeping at most `keep_nodes` nodes of the trees loaded to
/// count the walk's entries.
fn walk_keeping(
    repo: &Repository,
    index: &MasterIndex,
    root: &BlobId,
    keep_nodes: usize,
    visit: &mut dyn FnMut(&[u8], &Node) -> Result<bool>,
) -> Result<()> {
    // One frame per open directory: its nodes, the next one to visit, and
    // the length of the path prefix of its parent.
    struct Frame {
        nodes: std::vec::IntoIter<Node>,
        prefix_len: usize,
    }
    // First count what the walk would visit, each distinct tree once, and
    // refuse a DAG that expands beyond the cap before visiting anything.
    let mut trees = count(repo, index, root, keep_nodes)?;
    let mut take = |id: &BlobId| match trees.remove(id) {
        Some(t) => Ok(t),
        None => load(repo, index, id),
    };
    let mut prefix: Vec<u8> = Vec::new();
    let mut stack = vec![Frame {
        nodes: take(root)?.nodes.into_iter(),
        prefix_len: 0,
    }];
    let mut visited = 0u64;
    while let Some(frame) = stack.last_mut() {
        let Some(node) = frame.nodes.next() else {
            prefix.truncate(frame.prefix_len);
            stack.pop();
            continue;
        };
        visited += 1;
        if visited > MAX_ENTRIES {
            return Err(Error::Damaged(format!(
                "the trees of {root} expand to more than {MAX_ENTRIES} entries \
                 (a tree that names the same subtree many times over)"
            )));
        }
        // The directory's own path is `prefix`; the node's is prefix/name.
        let dir_len = prefix.len();
        if !prefix.is_empty() {
            prefix.push(b'/');
        }
        prefix.extend_from_slice(&node.name);
        let descend = visit(&prefix, &node)?;
        match (&node.subtree, node.kind) {
            (Some(sub), NodeKind::Dir) if descend => {
                if stack.len() >= MAX_DEPTH {
                    return Err(Error::Damaged(format!(
                        "the trees of {root} nest deeper than {MAX_DEPTH} directories"
                    )));
                }
                let nodes = take(sub)?.nodes.into_iter();
                stack.push(Frame {
                    nodes,
                    prefix_len: dir_len,
                });
            }
            _ => prefix.truncate(dir_len),
        }
    }
    Ok(())
}

/// Nodes of the trees [`count`] keeps for the walk that follows (about
/// 300 bytes each in memory); trees past that are loaded a second time by
/// the walk instead of all being held at once (a point of a million files
/// held 400 MB here).
const KEEP_NODES: usize = 200_000;

/// What [`count`] learnt of one tree.
enum Counted {
    /// The tree itself, kept for the walk.
    Kept(Tree),
    /// Its number of nodes and the subtree of each directory node (a
    /// subtree named twice is listed twice).
    Summary(usize, Vec<BlobId>),
}

impl Counted {
    fn subtrees(&self) -> Vec<BlobId> {
        match self {
            Counted::Kept(t) => t.nodes.iter().filter_map(subtree_of).collect(),
            Counted::Summary(_, subs) => subs.clone(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Counted::Kept(t) => t.nodes.len(),
            Counted::Summary(n, _) => *n,
        }
    }
}

/// Loads (and checks) every distinct tree under `root`, iteratively, and
/// counts the entries a walk of `root` visits, memoized per tree. Fails as
/// damage beyond [`MAX_ENTRIES`] or [`MAX_DEPTH`]. Returns the trees it
/// kept (up to `keep_nodes` nodes), so the walk does not load them again.
fn count(
    repo: &Repository,
    index: &MasterIndex,
    root: &BlobId,
    keep_nodes: usize,
) -> Result<HashMap<BlobId, Tree>> {
    let mut seen: HashMap<BlobId, Counted> = HashMap::new();
    let mut kept_nodes = 0usize;
    let mut counts: HashMap<BlobId, u64> = HashMap::new();
    // (tree, depth, whether its subtrees are counted already)
    let mut stack = vec![(*root, 0usize, false)];
    while let Some((id, depth, children_done)) = stack.pop() {
        if counts.contains_key(&id) {
            continue;
        }
        if !children_done {
            if depth >= MAX_DEPTH {
                return Err(Error::Damaged(format!(
                    "the trees of {root} nest deeper than {MAX_DEPTH} directories"
                )));
            }
            if let std::collections::hash_map::Entry::Vacant(e) = seen.entry(id) {
                let tree = load(repo, index, &id)?;
                if kept_nodes + tree.nodes.len() <= keep_nodes {
                    kept_nodes += tree.nodes.len();
                    e.insert(Counted::Kept(tree));
                } else {
                    let subs = tree.nodes.iter().filter_map(subtree_of).collect();
                    e.insert(Counted::Summary(tree.nodes.len(), subs));
                }
            }
            stack.push((id, depth, true));
            for sub in seen[&id].subtrees() {
                if !counts.contains_key(&sub) {
                    stack.push((sub, depth + 1, false));
                }
            }
            continue;
        }
        let c = &seen[&id];
        let mut n = c.len() as u64;
        for sub in c.subtrees() {
            n = n.saturating_add(counts.get(&sub).copied().unwrap_or(0));
        }
        if n > MAX_ENTRIES {
            return Err(Error::Damaged(format!(
                "the trees of {root} expand to more than {MAX_ENTRIES} entries \
                 (a tree that names the same subtree many times over)"
            )));
        }
        counts.insert(id, n);
    }
    Ok(seen
        .into_iter()
        .filter_map(|(id, c)| match c {
            Counted::Kept(t) => Some((id, t)),
            Counted::Summary(..) => None,
        })
        .collect())
}

fn subtree_of(node: &Node) -> Option<BlobId> {
    match node.kind {
        NodeKind::Dir => node.subtree,
        _ => None,
    }
}

/// Finds the node at `path` (`/a/b` or `a/b`); `None` for the root.
pub fn find_node(
    repo: &Repository,
    index: &MasterIndex,
    root: &BlobId,
    path: &str,
) -> Result<Option<Node>> {
    find_node_with(&mut |id| load(repo, index, id).map(Arc::new), root, path)
}

/// [`find_node`] with the trees taken from `cache`.
pub fn find_node_cached(
    cache: &TreeCache,
    repo: &Repository,
    index: &MasterIndex,
    root: &BlobId,
    path: &str,
) -> Result<Option<Node>> {
    find_node_with(&mut |id| cache.load(repo, index, id), root, path)
}

fn find_node_with(
    load: &mut dyn FnMut(&BlobId) -> Result<Arc<Tree>>,
    root: &BlobId,
    path: &str,
) -> Result<Option<Node>> {
    let mut tree = load(root)?;
    let comps: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let mut found = None;
    for (i, comp) in comps.iter().enumerate() {
        // Names are strictly sorted (`check_tree`).
        let node = tree
            .nodes
            .binary_search_by(|n| n.name.as_slice().cmp(comp.as_bytes()))
            .map(|at| tree.nodes[at].clone())
            .map_err(|_| Error::NotFound(format!("no path {path:?} in the snapshot")))?;
        if i + 1 < comps.len() {
            let sub = node
                .subtree
                .ok_or_else(|| Error::NotFound(format!("{path:?}: {comp:?} is not a directory")))?;
            tree = load(&sub)?;
        }
        found = Some(node);
    }
    Ok(found)
}

/// Checked trees by id, for a reader that comes back to the same trees (the
/// API's listings and downloads walk from the root every time). A tree is
/// content-addressed, so an entry never goes stale. Bounded by the nodes
/// held; the least recently used trees go first, and a tree larger than
/// the bound is returned without being kept.
pub struct TreeCache {
    max_nodes: usize,
    inner: Mutex<CacheInner>,
}

#[derive(Default)]
struct CacheInner {
    trees: HashMap<BlobId, (Arc<Tree>, u64)>,
    nodes: usize,
    clock: u64,
}

impl TreeCache {
    /// A cache holding trees of at most `max_nodes` nodes together.
    pub fn new(max_nodes: usize) -> Self {
        TreeCache {
            max_nodes,
            inner: Mutex::default(),
        }
    }

    /// The tree `id`, from the cache or loaded ([`load`]) and kept.
    pub fn load(&self, repo: &Repository, index: &MasterIndex, id: &BlobId) -> Result<Arc<Tree>> {
        {
            let mut c = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            c.clock += 1;
            let now = c.clock;
            if let Some((tree, used)) = c.trees.get_mut(id) {
                *used = now;
                return Ok(tree.clone());
            }
        }
        // Loaded outside the lock: two callers may load it both, once.
        let tree = Arc::new(load(repo, index, id)?);
        let n = tree.nodes.len();
        if n <= self.max_nodes {
            let mut c = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            let now = c.clock;
            if c.trees.insert(*id, (tree.clone(), now)).is_none() {
                c.nodes += n;
            }
            while c.nodes > self.max_nodes {
                let Some(oldest) = c
                    .trees
                    .iter()
                    .min_by_key(|(_, (_, used))| *used)
                    .map(|(k, _)| *k)
                else {
                    break;
                };
                if let Some((t, _)) = c.trees.remove(&oldest) {
                    c.nodes -= t.nodes.len();
                }
            }
        }
        Ok(tree)
    }

    /// Trees and nodes held.
    pub fn held(&self) -> (usize, usize) {
        let c = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        (c.trees.len(), c.nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::NodeKind;

    fn node(name: &[u8]) -> Node {
        Node {
            mode: 0o100644,
            ..Node::new(name, NodeKind::File)
        }
    }

    fn check(names: &[&[u8]]) -> Result<()> {
        let tree = Tree {
            nodes: names.iter().map(|n| node(n)).collect(),
        };
        check_tree(&BlobId([7; 32]), &tree)
    }

    #[test]
    fn cached_trees_are_the_loaded_ones_kept_within_the_bound() {
        let d = tempfile::tempdir().unwrap();
        let repo = crate::workers::tests::new_repo(d.path());
        let src = crate::workers::tests::source(d.path(), "src", 6, "t");
        let snap = crate::workers::tests::backup_of(&repo, &src, "p");
        let m = repo.load_snapshot(&snap).unwrap();
        let index = repo.load_index().unwrap();
        let path = format!("{}/sub/f3", src.display());
        let plain = find_node(&repo, &index, &m.tree, &path).unwrap().unwrap();
        let cache = TreeCache::new(1_000);
        let cached = find_node_cached(&cache, &repo, &index, &m.tree, &path)
            .unwrap()
            .unwrap();
        assert_eq!(cached, plain);
        assert_eq!(cached.name, b"f3");
        // One tree per directory from `/` to `sub`, each kept once.
        let depth = src.components().count() + 1;
        let (trees, nodes) = cache.held();
        assert_eq!(trees, depth);
        let root = cache.load(&repo, &index, &m.tree).unwrap();
        assert!(Arc::ptr_eq(
            &root,
            &cache.load(&repo, &index, &m.tree).unwrap()
        ));
        assert_eq!(cache.held(), (trees, nodes), "a hit adds nothing");
        assert!(find_node_cached(&cache, &repo, &index, &m.tree, "/no/such").is_err());

        // `sub` holds 3 files, `src` 3 files and `sub`: a bound of 4 nodes
        // keeps one of them, the last used.
        let small = TreeCache::new(4);
        let sub = find_node(&repo, &index, &m.tree, &format!("{}/sub", src.display()))
            .unwrap()
            .unwrap()
            .subtree
            .unwrap();
        let top = find_node(&repo, &index, &m.tree, &src.display().to_string())
            .unwrap()
            .unwrap()
            .subtree
            .unwrap();
        small.load(&repo, &index, &sub).unwrap();
        assert_eq!(small.held(), (1, 3));
        small.load(&repo, &index, &top).unwrap();
        assert_eq!(small.held(), (1, 4), "the older tree made room");
        let again = small.load(&repo, &index, &top).unwrap();
        assert_eq!(again.nodes.len(), 4);
        // A tree larger than the bound is returned, not kept.
        let tiny = TreeCache::new(2);
        assert_eq!(tiny.load(&repo, &index, &top).unwrap().nodes.len(), 4);
        assert_eq!(tiny.held(), (0, 0));
    }

    #[test]
    fn a_walk_visits_the_same_whether_it_keeps_the_counted_trees_or_loads_them_again() {
        let d = tempfile::tempdir().unwrap();
        let repo = crate::workers::tests::new_repo(d.path());
        let src = crate::workers::tests::source(d.path(), "src", 9, "w");
        // A second subdirectory (a tree of its own: its files are other
        // inodes).
        std::fs::create_dir(src.join("again")).unwrap();
        for f in std::fs::read_dir(src.join("sub")).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), src.join("again").join(f.file_name())).unwrap();
        }
        let snap = crate::workers::tests::backup_of(&repo, &src, "p");
        let m = repo.load_snapshot(&snap).unwrap();
        let index = repo.load_index().unwrap();
        let visits = |keep: usize| {
            let mut seen = Vec::new();
            walk_keeping(&repo, &index, &m.tree, keep, &mut |p, n| {
                seen.push((p.to_vec(), n.size, n.subtree));
                Ok(true)
            })
            .unwrap();
            seen
        };
        let all = visits(usize::MAX);
        assert!(all.iter().any(|(p, ..)| p.ends_with(b"again/f1")));
        assert!(all.iter().any(|(p, ..)| p.ends_with(b"sub/f1")));
        for keep in [0, 1, 5] {
            assert_eq!(visits(keep), all, "keeping {keep} nodes");
        }
        // Counting keeps within the bound and still sees every tree.
        assert!(count(&repo, &index, &m.tree, 0).unwrap().is_empty());
        let kept = count(&repo, &index, &m.tree, usize::MAX).unwrap();
        // One tree per directory from `/` to `src`, and `sub` and `again`.
        assert_eq!(kept.len(), src.components().count() + 2);
    }

    #[test]
    fn names_that_are_not_one_component_are_damage() {
        for bad in [&b""[..], b".", b"..", b"a/b", b"/abs", b"../x", b"n\0ul"] {
            assert!(
                matches!(check(&[bad]), Err(Error::Damaged(_))),
                "{bad:?} accepted"
            );
        }
        check(&[b"...", b".a", b"a..b", b"\xe9t\xe9"]).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn duplicate_and_unsorted_names_are_damage() {
        assert!(matches!(check(&[b"x", b"x"]), Err(Error::Damaged(_))));
        assert!(matches!(check(&[b"b", b"a"]), Err(Error::Damaged(_))));
        // Byte order, as the backup sorts: "B" (0x42) < "a" (0x61) < "\xe9".
        check(&[b"B", b"a", b"a.txt", b"ab", b"\xe9"]).unwrap_or_else(|e| panic!("{e}"));
    }
}
