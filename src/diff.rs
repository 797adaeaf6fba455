//! Differences between two snapshots: added, removed and changed paths.
//! Identical subtrees (same tree id) are skipped without being read.

use serde::Serialize;

use crate::error::Result;
use crate::format::{Node, NodeKind, Tree};
use crate::id::BlobId;
use crate::repo::{MasterIndex, Repository};

/// One difference.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Change {
    /// `+` added, `-` removed, `M` content changed, `U` metadata only, `T` type changed.
    pub kind: char,
    /// Path in the snapshots.
    pub path: String,
}

fn changed(a: &Node, b: &Node) -> Option<char> {
    if a.kind != b.kind {
        return Some('T');
    }
    if a.content != b.content || a.target != b.target || a.size != b.size {
        return Some('M');
    }
    if a.mode != b.mode
        || a.uid != b.uid
        || a.gid != b.gid
        || a.mtime() != b.mtime()
        || a.xattrs != b.xattrs
    {
        return Some('U');
    }
    None
}

/// Lists the differences from `a` to `b`.
pub fn diff(repo: &Repository, index: &MasterIndex, a: &BlobId, b: &BlobId) -> Result<Vec<Change>> {
    let mut out = Vec::new();
    diff_trees(repo, index, Some(*a), Some(*b), "", &mut out)?;
    Ok(out)
}

fn load(repo: &Repository, index: &MasterIndex, id: Option<BlobId>) -> Result<Tree> {
    match id {
        Some(id) => crate::tree::load(repo, index, &id),
        None => Ok(Tree::default()),
    }
}

fn all_below(
    repo: &Repository,
    index: &MasterIndex,
    node: &Node,
    path: &str,
    kind: char,
    out: &mut Vec<Change>,
) -> Result<()> {
    out.push(Change {
        kind,
        path: path.to_string(),
    });
    if node.kind == NodeKind::Dir {
        for child in load(repo, index, node.subtree)?.nodes {
            all_below(
                repo,
                index,
                &child,
                &format!("{path}/{}", child.display_name()),
                kind,
                out,
            )?;
        }
    }
    Ok(())
}

fn diff_trees(
    repo: &Repository,
    index: &MasterIndex,
    a: Option<BlobId>,
    b: Option<BlobId>,
    prefix: &str,
    out: &mut Vec<Change>,
) -> Result<()> {
    if a == b {
        return Ok(());
    }
    let (ta, tb) = (load(repo, index, a)?, load(repo, index, b)?);
    let (mut i, mut j) = (0, 0);
    while i < ta.nodes.len() || j < tb.nodes.len() {
        let order = match (ta.nodes.get(i), tb.nodes.get(j)) {
            (Some(x), Some(y)) => x.name.cmp(&y.name),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        match order {
            std::cmp::Ordering::Less => {
                let n = &ta.nodes[i];
                all_below(
                    repo,
                    index,
                    n,
                    &format!("{prefix}/{}", n.display_name()),
                    '-',
                    out,
                )?;
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                let n = &tb.nodes[j];
                all_below(
                    repo,
                    index,
                    n,
                    &format!("{prefix}/{}", n.display_name()),
                    '+',
                    out,
                )?;
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                let (x, y) = (&ta.nodes[i], &tb.nodes[j]);
                let path = format!("{prefix}/{}", x.display_name());
                if x.kind == NodeKind::Dir && y.kind == NodeKind::Dir {
                    if x.mode != y.mode || x.uid != y.uid || x.gid != y.gid || x.xattrs != y.xattrs
                    {
                        out.push(Change {
                            kind: 'U',
                            path: path.clone(),
                        });
                    }
                    diff_trees(repo, index, x.subtree, y.subtree, &path, out)?;
                } else if let Some(k) = changed(x, y) {
                    out.push(Change { kind: k, path });
                }
                i += 1;
                j += 1;
            }
        }
    }
    Ok(())
}
