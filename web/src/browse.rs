//! What the web layer needs from the engine, which it cannot depend on: the
//! file browser of a recovery point and repository statistics. The binary
//! implements [`Browse`] over the real repositories; handlers call it on
//! the blocking pool.

use std::io::Read;

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// Anything else (device, fifo, socket).
    Other,
}

impl EntryKind {
    /// The API name (`file`, `dir`, `symlink`, `other`).
    pub fn as_str(&self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Dir => "dir",
            EntryKind::Symlink => "symlink",
            EntryKind::Other => "other",
        }
    }
}

/// One entry of a directory inside a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowseEntry {
    /// Its name (no slash).
    pub name: String,
    /// What it is.
    pub kind: EntryKind,
    /// Size in bytes (0 for directories).
    pub size: u64,
    /// Unix mode bits.
    pub mode: u32,
    /// Modification time, nanoseconds since the Unix epoch, when known.
    pub mtime_unix_ns: Option<i64>,
}

/// Statistics of one repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoStats {
    /// Its id in the configuration (`default`, ...).
    pub id: String,
    /// Where it is (a path or URL without secrets).
    pub location: String,
    /// Snapshots in it.
    pub snapshots: u64,
    /// Pack files in it.
    pub packs: u64,
    /// Bytes on storage.
    pub size_bytes: u64,
}

/// A file's content, read on the blocking pool in chunks.
pub type FileReader = Box<dyn Read + Send>;

/// Why [`Browse`] could not answer.
#[derive(Debug, thiserror::Error)]
pub enum BrowseError {
    /// No such repository, snapshot or path (404 `not_found`).
    #[error("{0}")]
    NotFound(String),
    /// The request makes no sense, e.g. listing a file or reading a
    /// directory (400 `bad_request`).
    #[error("{0}")]
    Invalid(String),
    /// The repository cannot be opened now (503 `unavailable`).
    #[error("{0}")]
    Unavailable(String),
    /// Anything else (500 `internal`, logged).
    #[error("{0}")]
    Failed(String),
}

impl From<BrowseError> for crate::WebError {
    fn from(e: BrowseError) -> Self {
        match e {
            BrowseError::NotFound(m) => crate::WebError::NotFound(m),
            BrowseError::Invalid(m) => crate::WebError::BadRequest(m),
            BrowseError::Unavailable(m) => crate::WebError::Unavailable(m),
            BrowseError::Failed(m) => crate::WebError::Internal(m),
        }
    }
}

/// The engine's side of the file browser and repository statistics.
/// Implementations block (disk, decryption): the web layer calls them on
/// the blocking pool. `point` is the 64-hex snapshot id, `path` an absolute
/// path inside the snapshot (`/` is its root).
pub trait Browse: Send + Sync {
    /// The entries of directory `path` of snapshot `point` in `repository`.
    fn list(
        &self,
        repository: &str,
        point: &str,
        path: &str,
    ) -> Result<Vec<BrowseEntry>, BrowseError>;

    /// The content of file `path` of snapshot `point` in `repository`.
    fn read_file(
        &self,
        repository: &str,
        point: &str,
        path: &str,
    ) -> Result<FileReader, BrowseError>;

    /// Every configured repository with its statistics.
    fn repositories(&self) -> Result<Vec<RepoStats>, BrowseError>;
}
