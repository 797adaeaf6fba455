//! Referential integrity at commit: the repository protocol's server
//! accepts a snapshot only when every blob its trees reference is indexed
//! in a pack that is stored, and an index only when every pack it names is
//! stored. A client (an agent, a CLI over HTTP) that lost an upload, or
//! lies, cannot commit a point that would fail its first restore.

use std::collections::HashSet;

use crate::backend::FileKind;
use crate::error::{Error, Result};
use crate::format::{IndexFile, Manifest};
use crate::id::BlobId;
use crate::repo::Repository;

/// Most missing items named in a refusal (the count is complete).
const NAMED: usize = 5;

/// The packs stored, by name.
fn stored_packs(repo: &Repository) -> Result<HashSet<String>> {
    Ok(repo
        .backend()
        .list(FileKind::Pack)?
        .into_iter()
        .map(|(name, _)| name)
        .collect())
}

fn refusal(what: &str, missing: &[String], count: usize) -> Error {
    Error::InvalidArgument(format!(
        "{what}: {count} missing, e.g. {} (upload them first, then commit again)",
        missing.join(", ")
    ))
}

/// Ok if every pack `file` names is stored; `InvalidArgument` naming the
/// missing ones otherwise.
pub fn check_index_file(repo: &Repository, file: &IndexFile) -> Result<()> {
    let packs = stored_packs(repo)?;
    let missing: Vec<String> = file
        .packs
        .iter()
        .map(|p| p.id.to_hex())
        .filter(|name| !packs.contains(name))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let count = missing.len();
    Err(refusal(
        "the index names packs that are not stored",
        &missing[..count.min(NAMED)],
        count,
    ))
}

/// Ok if every tree and content blob `manifest` references (each distinct
/// tree read once) is indexed in a stored pack; `InvalidArgument` naming
/// what is missing otherwise. Damage of a tree that is present is an
/// error of its own (`Damaged`).
pub fn check_manifest(repo: &Repository, manifest: &Manifest) -> Result<()> {
    let index = repo.load_index()?;
    let packs = stored_packs(repo)?;
    let stored = |id: &BlobId| {
        index
            .get(id)
            .is_some_and(|(pack, _)| packs.contains(&pack.id.to_hex()))
    };
    let mut missing: Vec<String> = Vec::new();
    let mut count = 0usize;
    let mut note = |id: &BlobId, missing: &mut Vec<String>| {
        count += 1;
        if missing.len() < NAMED {
            missing.push(id.to_hex());
        }
    };
    let mut seen: HashSet<BlobId> = HashSet::new();
    let mut trees = vec![manifest.tree];
    let mut content_seen: HashSet<BlobId> = HashSet::new();
    while let Some(id) = trees.pop() {
        if !seen.insert(id) {
            continue;
        }
        if !stored(&id) {
            note(&id, &mut missing);
            continue;
        }
        let tree = crate::tree::load(repo, &index, &id)?;
        for node in &tree.nodes {
            if let Some(sub) = node.subtree {
                trees.push(sub);
            }
            for blob in node.content.iter().filter_map(|e| e.blob) {
                if content_seen.insert(blob) && !stored(&blob) {
                    note(&blob, &mut missing);
                }
            }
        }
    }
    if count == 0 {
        return Ok(());
    }
    Err(refusal(
        "the snapshot references blobs that are not stored",
        &missing,
        count,
    ))
}
