//! What the web layer needs from the engine, which it cannot depend on: the
//! file browser of a recovery point and repository statistics. The binary
//! implements [`Browse`] over the real repositories; handlers call it on
//! the blocking pool.

use std::io::{Read, Write};

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
    /// Bytes free to unprivileged writers on the file system that holds
    /// it (none: object storage, or not known).
    pub free_bytes: Option<u64>,
    /// Every event up to this seq is mirrored into it (none: the log is
    /// not mirrored there, or no pass reached it yet).
    pub log_mirrored_seq: Option<u64>,
}

/// A file's content, read on the blocking pool in chunks.
pub type FileReader = Box<dyn Read + Send>;

/// A file to download: its size (sent as `Content-Length`) and a reader
/// that produces exactly that many bytes, or fails (a damaged blob is an
/// error, never zeros).
pub struct FileDownload {
    /// The file's size in bytes.
    pub size: u64,
    /// Its content, read blob by blob; holes as bounded runs of zeros.
    pub reader: FileReader,
}

/// A directory's tar archive, written on the blocking pool into the sink
/// it is given (a bounded pipe to the client). An `Err` means the archive
/// is incomplete: the web layer then aborts the response.
pub type ArchiveWriter = Box<dyn FnOnce(&mut dyn Write) -> Result<(), BrowseError> + Send>;

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
    /// The request conflicts with the repository's state, e.g. a lock
    /// that would be shortened (409 `conflict`).
    #[error("{0}")]
    Conflict(String),
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
            BrowseError::Conflict(m) => crate::WebError::Conflict(m),
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

    /// The content of file `path` of snapshot `point` in `repository`,
    /// read lazily: memory stays bounded whatever the file's size.
    fn read_file(
        &self,
        repository: &str,
        point: &str,
        path: &str,
    ) -> Result<FileDownload, BrowseError>;

    /// The tar archive of directory `path` of snapshot `point`: files,
    /// directories and symbolic links with their modes and modification
    /// times, entry names relative to `path`. Errors found before any byte
    /// is written (no such path, not a directory) are returned here; the
    /// writer reports the rest.
    fn archive(
        &self,
        _repository: &str,
        _point: &str,
        _path: &str,
    ) -> Result<ArchiveWriter, BrowseError> {
        Err(BrowseError::Unavailable(
            "this server cannot make archives".into(),
        ))
    }

    /// Every configured repository with its statistics.
    fn repositories(&self) -> Result<Vec<RepoStats>, BrowseError>;

    /// Stores a lock of `point` until `until_unix_ns` in `repository`
    /// itself (a record every tool honours, and the storage's retention
    /// where it has one).
    fn lock_point(
        &self,
        _repository: &str,
        _point: &str,
        _until_unix_ns: i64,
        _by: &str,
    ) -> Result<StoredLock, BrowseError> {
        Err(BrowseError::Unavailable(
            "this server cannot store locks in repositories".into(),
        ))
    }

    /// The lock `repository` itself holds for `point` (the latest date of
    /// its records), if any.
    fn stored_lock(&self, _repository: &str, _point: &str) -> Result<Option<i64>, BrowseError> {
        Ok(None)
    }
}

/// A lock stored in a repository.
#[derive(Clone, Debug)]
pub struct StoredLock {
    /// Until when (ns since the epoch).
    pub until_unix_ns: i64,
    /// `by_storage` (S3 Object Lock) or `by_vouch`.
    pub enforced_by: String,
    /// Files the storage retains to that date.
    pub files_retained: u64,
}
