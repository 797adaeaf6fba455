//! The ransomware heuristic: it reports, never acts.
//!
//! After a backup commits, [`examine`] compares the new snapshot with its
//! parent from their trees and the index (how each blob was stored: a file
//! whose blobs were stored without compression did not compress), so it
//! reads no file data a second time. [`profile`] counts what changed,
//! [`assess`] weighs that against the plan's recent history and decides
//! whether it is an anomaly; `docs/security.md` has the rules and what
//! they were measured to catch and to let pass.

pub mod assess;
pub mod names;
pub mod profile;

pub use assess::{assess, Assessment, Past};
pub use profile::{measure, Profile};

use crate::error::Result;
use crate::format::Manifest;
use crate::repo::Repository;

/// Compares the snapshot `manifest` (just committed) with its parent, if
/// it has one that can still be read: the figures, and the verdict against
/// `history` (the plan's recent backups, oldest first). `index`: one that
/// holds both snapshots' blobs (the backup's own,
/// [`crate::backup::BackupOutcome::index`]); none: the repository's is
/// loaded. None: a first backup, or a parent that is gone (forgotten
/// meanwhile).
pub fn examine(
    repo: &Repository,
    manifest: &Manifest,
    index: Option<&crate::repo::MasterIndex>,
    history: &[Past],
    summary: &vouch_events::BackupSummary,
) -> Result<Option<(Profile, Assessment)>> {
    let Some(parent_id) = manifest.parent else {
        return Ok(None);
    };
    let parent = match repo.load_snapshot(&parent_id) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(parent = %parent_id.short(), error = %e, "the parent snapshot cannot be read; the backup is not compared with it");
            return Ok(None);
        }
    };
    let compared_with = vouch_events::SnapshotId(parent_id.0);
    let profile = if parent.tree == manifest.tree {
        // Nothing changed: no tree or index to read.
        Profile::unchanged(repo, compared_with, parent.summary.files)
    } else {
        // The backup's own index holds the parent's blobs unless another
        // writer committed the parent after this backup loaded it: then
        // the repository's is read.
        let loaded;
        let index = match index.filter(|i| i.contains(&parent.tree)) {
            Some(i) => i,
            None => {
                loaded = repo.load_index()?;
                &loaded
            }
        };
        measure(
            repo,
            index,
            compared_with,
            parent.summary.files,
            &parent.tree,
            &manifest.tree,
        )?
    };
    let verdict = assess(&profile, summary, history);
    Ok(Some((profile, verdict)))
}
