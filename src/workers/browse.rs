//! Reading recovery points for the API: list a directory of a point, read
//! one file of it (blob by blob), a directory as a tar archive (both by
//! [`crate::dump`]), and the repositories' statistics. The master index of
//! each repository is cached and reloaded only when the listing of its
//! index files changes.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use vouch_events::RepositoryId;
use vouch_web::{
    ArchiveWriter, Browse, BrowseEntry, BrowseError, EntryKind, FileDownload, RepoStats,
};

use crate::backend::FileKind;
use crate::error::{Error, Result};
use crate::format::NodeKind;
use crate::id::SnapshotId;
use crate::repo::MasterIndex;
use crate::repo::Repository;
use crate::tree::{find_node_cached, TreeCache};

use crate::dump::{write_archive, ArchiveFormat, ContentReader};

use super::RepoSet;

/// A master index and the listing of index files it was loaded from.
struct CachedIndex {
    files: Vec<String>,
    index: Arc<MasterIndex>,
}

/// Browses points with the engine.
#[derive(Clone)]
pub struct EngineBrowser {
    repos: Arc<RepoSet>,
    indexes: Arc<Mutex<HashMap<RepositoryId, CachedIndex>>>,
    /// Every listing and download walks from the point's root: the trees
    /// near the root are decoded once, not per request.
    trees: Arc<TreeCache>,
    mirror: Option<Arc<crate::workers::log_mirror::MirrorStatus>>,
}

/// Nodes the browser's tree cache holds at most (a few hundred bytes each:
/// tens of MiB at most).
pub const TREE_CACHE_NODES: usize = 100_000;

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
        Error::PointLocked(m) => BrowseError::Conflict(m),
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
        EngineBrowser {
            repos,
            indexes: Arc::new(Mutex::new(HashMap::new())),
            trees: Arc::new(TreeCache::new(TREE_CACHE_NODES)),
            mirror: None,
        }
    }

    /// Reports how far the event log's mirror into each repository is.
    pub fn with_mirror_status(
        mut self,
        status: Arc<crate::workers::log_mirror::MirrorStatus>,
    ) -> Self {
        self.mirror = Some(status);
        self
    }

    /// The master index of `repo`, from the cache while the listing of its
    /// index files is the one it was loaded from.
    fn index(&self, id: &RepositoryId, repo: &Repository) -> Result<Arc<MasterIndex>> {
        let mut files: Vec<String> = repo
            .backend()
            .list(FileKind::Index)?
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        files.sort();
        let cached = self
            .indexes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .filter(|c| c.files == files)
            .map(|c| c.index.clone());
        if let Some(index) = cached {
            return Ok(index);
        }
        // Loaded outside the lock: a second caller may load it too, once.
        let index = Arc::new(repo.load_index()?);
        tracing::debug!(repository = %id, index_files = files.len(), "master index loaded");
        self.indexes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                id.clone(),
                CachedIndex {
                    files,
                    index: index.clone(),
                },
            );
        Ok(index)
    }

    /// The repository holding `point` and its master index.
    fn open(
        &self,
        repository: &str,
        point: &SnapshotId,
    ) -> Result<(Arc<Repository>, Arc<MasterIndex>)> {
        let (id, repo) = self.find(repository, point)?;
        let index = self.index(&id, &repo)?;
        Ok((repo, index))
    }

    fn find(
        &self,
        repository: &str,
        point: &SnapshotId,
    ) -> Result<(RepositoryId, Arc<Repository>)> {
        let id = RepositoryId::new(repository);
        if self.repos.contains(&id) {
            return Ok((id.clone(), self.repos.open(&id)?));
        }
        for spec in self.repos.specs() {
            let repo = self.repos.open(&spec.id)?;
            if repo.load_snapshot(point).is_ok() {
                return Ok((spec.id.clone(), repo));
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
        let (repo, index) = self.open(repository, point)?;
        let manifest = repo.load_snapshot(point)?;
        let tree_id = match find_node_cached(&self.trees, &repo, &index, &manifest.tree, path)? {
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
        let tree = self.trees.load(&repo, &index, &tree_id)?;
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

    /// The content of file `path` of `point`, as a lazy reader.
    pub fn file_reader(
        &self,
        repository: &str,
        point: &SnapshotId,
        path: &str,
    ) -> Result<(u64, ContentReader)> {
        let (repo, index) = self.open(repository, point)?;
        let manifest = repo.load_snapshot(point)?;
        let node = find_node_cached(&self.trees, &repo, &index, &manifest.tree, path)?
            .ok_or_else(|| Error::InvalidArgument("the root is a directory, not a file".into()))?;
        if node.kind != NodeKind::File {
            return Err(Error::InvalidArgument(format!(
                "{path:?} is not a regular file (a directory downloads from /archive)"
            )));
        }
        let reader = ContentReader::new(repo, index, &node)?;
        Ok((node.size, reader))
    }

    /// The tar archive of directory `path` of `point`, to be written later.
    pub fn archive_writer(
        &self,
        repository: &str,
        point: &SnapshotId,
        path: &str,
    ) -> Result<impl FnOnce(&mut dyn Write) -> Result<()> + Send + 'static> {
        let (repo, index) = self.open(repository, point)?;
        let manifest = repo.load_snapshot(point)?;
        let tree_id = match find_node_cached(&self.trees, &repo, &index, &manifest.tree, path)? {
            None => manifest.tree,
            Some(node) if node.kind == NodeKind::Dir => node
                .subtree
                .ok_or_else(|| Error::NotFound(format!("{path:?} has no listing")))?,
            Some(_) => {
                return Err(Error::InvalidArgument(format!(
                    "{path:?} is not a directory (a file downloads from /file)"
                )))
            }
        };
        Ok(move |out: &mut dyn Write| {
            write_archive(
                &repo,
                &index,
                &tree_id,
                Path::new(""),
                ArchiveFormat::Tar,
                out,
            )
            .map(drop)
        })
    }

    /// Statistics of every repository.
    pub fn stats(&self) -> Result<Vec<RepoStats>> {
        let mut out = Vec::new();
        for spec in self.repos.specs() {
            let repo = self.repos.open(&spec.id)?;
            let index = self.index(&spec.id, &repo)?;
            let snapshots = repo
                .backend()
                .list(crate::backend::FileKind::Snapshot)?
                .len() as u64;
            out.push(RepoStats {
                id: spec.id.to_string(),
                location: spec.storage.to_string(),
                snapshots,
                packs: index.packs().len() as u64,
                size_bytes: index.packs().iter().map(|p| p.size).sum(),
                free_bytes: match &spec.storage {
                    crate::backend::storage::Storage::Local(path) => free_bytes(path),
                    _ => None,
                },
                log_mirrored_seq: self
                    .mirror
                    .as_ref()
                    .and_then(|m| m.get(&spec.id))
                    .map(|s| s.mirrored_seq),
            });
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }
}

impl Browse for EngineBrowser {
    fn lock_point(
        &self,
        repository: &str,
        point: &str,
        until_unix_ns: i64,
        by: &str,
    ) -> std::result::Result<vouch_web::StoredLock, BrowseError> {
        let id = point_id(point)?;
        let repo = self
            .repos
            .open(&RepositoryId::new(repository))
            .map_err(browse_error)?;
        let outcome = repo
            .lock_point(&id, until_unix_ns, by)
            .map_err(browse_error)?;
        Ok(vouch_web::StoredLock {
            until_unix_ns: outcome.until_ns,
            enforced_by: match outcome.enforced_by {
                crate::backend::Retained::ByStorage => "by_storage",
                crate::backend::Retained::ByVouch => "by_vouch",
            }
            .to_owned(),
            files_retained: outcome.files_retained,
        })
    }

    fn stored_lock(
        &self,
        repository: &str,
        point: &str,
    ) -> std::result::Result<Option<i64>, BrowseError> {
        let id = point_id(point)?;
        let repo = self
            .repos
            .open(&RepositoryId::new(repository))
            .map_err(browse_error)?;
        let locks = repo.point_locks().map_err(browse_error)?;
        Ok(locks.until.get(&id).copied())
    }

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
    ) -> std::result::Result<FileDownload, BrowseError> {
        let id = point_id(point)?;
        let (size, reader) = self
            .file_reader(repository, &id, path)
            .map_err(browse_error)?;
        Ok(FileDownload {
            size,
            reader: Box::new(reader),
        })
    }

    fn archive(
        &self,
        repository: &str,
        point: &str,
        path: &str,
    ) -> std::result::Result<ArchiveWriter, BrowseError> {
        let id = point_id(point)?;
        let write = self
            .archive_writer(repository, &id, path)
            .map_err(browse_error)?;
        Ok(Box::new(move |out: &mut dyn Write| {
            write(out).map_err(browse_error)
        }))
    }

    fn repositories(&self) -> std::result::Result<Vec<RepoStats>, BrowseError> {
        self.stats().map_err(browse_error)
    }
}

/// Bytes free to unprivileged writers on the file system holding `path`
/// (`statvfs`), or none when it cannot be asked.
fn free_bytes(path: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c` is a NUL-terminated path and `st` a writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs succeeded, so it filled `st`.
    let st = unsafe { st.assume_init() };
    // The field types differ between targets (c_ulong is 32 bits on some).
    #[allow(clippy::useless_conversion)]
    Some(u64::from(st.f_bavail).saturating_mul(u64::from(st.f_frsize)))
}
