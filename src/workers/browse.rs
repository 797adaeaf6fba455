//! Reading recovery points for the API: list a directory of a point, read
//! one file of it, and the repositories' statistics.

use std::sync::Arc;

use vouch_events::RepositoryId;
use vouch_web::{Browse, BrowseEntry, BrowseError, EntryKind, FileReader, RepoStats};

use crate::error::{Error, Result};
use crate::format::NodeKind;
use crate::id::SnapshotId;
use crate::repo::Repository;
use crate::tree::find_node;

use super::RepoSet;

/// Browses points with the engine.
#[derive(Clone)]
pub struct EngineBrowser {
    repos: Arc<RepoSet>,
}

fn kind_of(k: NodeKind) -> EntryKind {
    match k {
        NodeKind::File => EntryKind::File,
        NodeKind::Dir => EntryKind::Dir,
        NodeKind::Symlink => EntryKind::Symlink,
        _ => EntryKind::Other,
    }
}

fn browse_error(e: Error) -> BrowseError {
    match e {
        Error::NotFound(m) => BrowseError::NotFound(m),
        Error::InvalidArgument(m) => BrowseError::Invalid(m),
        Error::Locked(m) => BrowseError::Unavailable(format!("repository is locked: {m}")),
        other => BrowseError::Failed(format!("{other} ({})", other.hint())),
    }
}

fn point_id(point: &str) -> std::result::Result<SnapshotId, BrowseError> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(point, &mut out)
        .map_err(|_| BrowseError::Invalid(format!("not a 64-digit hex point id: {point:?}")))?;
    Ok(SnapshotId(out))
}

impl EngineBrowser {
    /// A browser over `repos`.
    pub fn new(repos: Arc<RepoSet>) -> Self {
        EngineBrowser { repos }
    }

    fn find(&self, repository: &str, point: &SnapshotId) -> Result<Arc<Repository>> {
        let id = RepositoryId::new(repository);
        if self.repos.contains(&id) {
            return self.repos.open(&id);
        }
        for spec in self.repos.specs() {
            let repo = self.repos.open(&spec.id)?;
            if repo.load_snapshot(point).is_ok() {
                return Ok(repo);
            }
        }
        Err(Error::NotFound(format!(
            "point {} is in no repository (forgotten, or never made)",
            point.to_hex()
        )))
    }

    /// The entries of directory `path` of `point`.
    pub fn list_dir(
        &self,
        repository: &str,
        point: &SnapshotId,
        path: &str,
    ) -> Result<Vec<BrowseEntry>> {
        let repo = self.find(repository, point)?;
        let manifest = repo.load_snapshot(point)?;
        let index = repo.load_index()?;
        let tree_id = match find_node(&repo, &index, &manifest.tree, path)? {
            None => manifest.tree,
            Some(node) if node.kind == NodeKind::Dir => node
                .subtree
                .ok_or_else(|| Error::NotFound(format!("{path:?} has no listing")))?,
            Some(_) => {
                return Err(Error::InvalidArgument(format!(
                    "{path:?} is not a directory"
                )))
            }
        };
        let tree = crate::tree::load(&repo, &index, &tree_id)?;
        Ok(tree
            .nodes
            .iter()
            .map(|n| BrowseEntry {
                name: String::from_utf8_lossy(&n.name).into_owned(),
                kind: kind_of(n.kind),
                size: n.size,
                mode: n.mode & 0o7777,
                mtime_unix_ns: Some(n.mtime_ns),
            })
            .collect())
    }

    /// The content of file `path` of `point`.
    pub fn file_bytes(&self, repository: &str, point: &SnapshotId, path: &str) -> Result<Vec<u8>> {
        let repo = self.find(repository, point)?;
        let manifest = repo.load_snapshot(point)?;
        let index = repo.load_index()?;
        let node = find_node(&repo, &index, &manifest.tree, path)?
            .ok_or_else(|| Error::InvalidArgument("the root is a directory, not a file".into()))?;
        if node.kind != NodeKind::File {
            return Err(Error::InvalidArgument(format!(
                "{path:?} is not a regular file"
            )));
        }
        let mut out = Vec::with_capacity(node.size as usize);
        for ext in &node.content {
            match &ext.blob {
                Some(id) => out.extend_from_slice(&repo.read_blob(&index, id)?),
                None => out.resize(out.len() + ext.length as usize, 0),
            }
        }
        Ok(out)
    }

    /// Statistics of every repository.
    pub fn stats(&self) -> Result<Vec<RepoStats>> {
        let mut out = Vec::new();
        for spec in self.repos.specs() {
            let repo = self.repos.open(&spec.id)?;
            let index = repo.load_index()?;
            let snapshots = repo
                .backend()
                .list(crate::backend::FileKind::Snapshot)?
                .len() as u64;
            out.push(RepoStats {
                id: spec.id.to_string(),
                location: spec.path.display().to_string(),
                snapshots,
                packs: index.packs().len() as u64,
                size_bytes: index.packs().iter().map(|p| p.size).sum(),
            });
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }
}

impl Browse for EngineBrowser {
    fn list(
        &self,
        repository: &str,
        point: &str,
        path: &str,
    ) -> std::result::Result<Vec<BrowseEntry>, BrowseError> {
        let id = point_id(point)?;
        self.list_dir(repository, &id, path).map_err(browse_error)
    }

    fn read_file(
        &self,
        repository: &str,
        point: &str,
        path: &str,
    ) -> std::result::Result<FileReader, BrowseError> {
        let id = point_id(point)?;
        let bytes = self
            .file_bytes(repository, &id, path)
            .map_err(browse_error)?;
        Ok(Box::new(std::io::Cursor::new(bytes)))
    }

    fn repositories(&self) -> std::result::Result<Vec<RepoStats>, BrowseError> {
        self.stats().map_err(browse_error)
    }
}
