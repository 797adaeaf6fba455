//! Walking the trees of a snapshot.

use crate::error::{Error, Result};
use crate::format::{Node, NodeKind, Tree};
use crate::id::BlobId;
use crate::repo::{MasterIndex, Repository};

/// Visits every node under `root` depth-first, in name order. `visit` gets
/// the path (components joined with `/`, no leading slash) and the node, and
/// returns whether to descend into a directory.
pub fn walk(
    repo: &Repository,
    index: &MasterIndex,
    root: &BlobId,
    visit: &mut dyn FnMut(&[u8], &Node) -> Result<bool>,
) -> Result<()> {
    let tree = repo.load_tree(index, root)?;
    walk_tree(repo, index, &tree, &mut Vec::new(), visit)
}

fn walk_tree(
    repo: &Repository,
    index: &MasterIndex,
    tree: &Tree,
    prefix: &mut Vec<u8>,
    visit: &mut dyn FnMut(&[u8], &Node) -> Result<bool>,
) -> Result<()> {
    for node in &tree.nodes {
        let len = prefix.len();
        if !prefix.is_empty() {
            prefix.push(b'/');
        }
        prefix.extend_from_slice(&node.name);
        let descend = visit(prefix, node)?;
        if descend && node.kind == NodeKind::Dir {
            if let Some(sub) = &node.subtree {
                let subtree = repo.load_tree(index, sub)?;
                walk_tree(repo, index, &subtree, prefix, visit)?;
            }
        }
        prefix.truncate(len);
    }
    Ok(())
}

/// Finds the node at `path` (`/a/b` or `a/b`); `None` for the root.
pub fn find_node(
    repo: &Repository,
    index: &MasterIndex,
    root: &BlobId,
    path: &str,
) -> Result<Option<Node>> {
    let mut tree = repo.load_tree(index, root)?;
    let comps: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let mut found = None;
    for (i, comp) in comps.iter().enumerate() {
        let node = tree
            .nodes
            .iter()
            .find(|n| n.name == comp.as_bytes())
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("no path {path:?} in the snapshot")))?;
        if i + 1 < comps.len() {
            let sub = node
                .subtree
                .ok_or_else(|| Error::NotFound(format!("{path:?}: {comp:?} is not a directory")))?;
            tree = repo.load_tree(index, &sub)?;
        }
        found = Some(node);
    }
    Ok(found)
}
