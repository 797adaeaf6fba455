//! What the repository protocol (`/repo/v1/{repo}/...`, see
//! `docs/agents.md`) needs from the engine, which the web layer cannot
//! depend on. The binary implements [`RepoStore`] over the repositories it
//! serves; the handlers in `api::repo` decide *who* may call it (roles,
//! leases) and the store checks *what* is written (names against BLAKE3,
//! referential integrity of snapshots, only shared locks removed).

/// The kinds of repository files the protocol names, each by its URL
/// segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RepoFile {
    /// `config` (one file, no name).
    Config,
    /// `owner`: the service's ownership record (one file, no name).
    Owner,
    /// `keys/{id}`.
    Key,
    /// `data/{id}`: packs.
    Pack,
    /// `index/{id}`.
    Index,
    /// `snapshots/{id}`.
    Snapshot,
    /// `locks/{id}`.
    Lock,
    /// `pointlocks/{id}`: snapshots' locks until a date.
    PointLock,
}

impl RepoFile {
    /// Every kind.
    pub const ALL: [RepoFile; 8] = [
        RepoFile::Config,
        RepoFile::Owner,
        RepoFile::Key,
        RepoFile::Pack,
        RepoFile::Index,
        RepoFile::Snapshot,
        RepoFile::Lock,
        RepoFile::PointLock,
    ];

    /// The URL segment (`config`, `owner`, `keys`, `data`, `index`,
    /// `snapshots`, `locks`, `pointlocks`).
    pub fn segment(self) -> &'static str {
        match self {
            RepoFile::Config => "config",
            RepoFile::Owner => "owner",
            RepoFile::Key => "keys",
            RepoFile::Pack => "data",
            RepoFile::Index => "index",
            RepoFile::Snapshot => "snapshots",
            RepoFile::Lock => "locks",
            RepoFile::PointLock => "pointlocks",
        }
    }

    /// The kind of a URL segment.
    pub fn from_segment(s: &str) -> Option<RepoFile> {
        RepoFile::ALL.into_iter().find(|k| k.segment() == s)
    }

    /// Whether files of this kind have names (all but config and owner).
    pub fn is_named(self) -> bool {
        !matches!(self, RepoFile::Config | RepoFile::Owner)
    }

    /// Whether a file's name is the BLAKE3 of its bytes (packs, indexes,
    /// snapshots): such a name can only ever hold the same bytes.
    pub fn is_content_addressed(self) -> bool {
        matches!(
            self,
            RepoFile::Pack | RepoFile::Index | RepoFile::Snapshot | RepoFile::PointLock
        )
    }
}

/// Size and modification time of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    /// Bytes.
    pub size: u64,
    /// Last written, nanoseconds since the Unix epoch, when known.
    pub modified_unix_ns: Option<i64>,
}

/// What an accepted upload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutOutcome {
    /// The file was written.
    Written,
    /// A file of that name, and so (content-addressed) of those bytes, was
    /// there already: nothing was written.
    AlreadyPresent,
}

/// What the store learned from a snapshot it accepted (it decrypts and
/// checks every one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFacts {
    /// The snapshot's id (64 hex digits, its file name).
    pub id: String,
    /// Its time (the writer's clock, as recorded in the manifest).
    pub time_unix_ns: i64,
    /// Its tags.
    pub tags: Vec<String>,
    /// Its host.
    pub host: String,
    /// Its paths.
    pub paths: Vec<String>,
    /// Files in it.
    pub files: u64,
    /// Bytes the backup read from its source.
    pub bytes: u64,
    /// Bytes of content the backup found new.
    pub added_bytes: u64,
    /// Bytes of all files in it (its logical size).
    pub total_bytes: u64,
    /// Entries the backup could not read and left out.
    pub warnings: u64,
}

/// What a new agent's repository is, made at registration.
pub struct NewAgentRepository {
    /// Its id (`agent-NAME`).
    pub id: String,
    /// Its passphrase, handed to the agent once.
    pub passphrase: zeroize::Zeroizing<String>,
}

impl std::fmt::Debug for NewAgentRepository {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewAgentRepository")
            .field("id", &self.id)
            .field("passphrase", &"<redacted>")
            .finish()
    }
}

/// What an upload must also satisfy, by who sends it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PutRules {
    /// Make it durable before answering (else at the next sync).
    pub durable: bool,
    /// A snapshot must carry this tag (its lease's plan).
    pub expect_tag: Option<String>,
    /// Only shared locks, and no keys, config or ownership record (every
    /// caller but an admin).
    pub append_only: bool,
}

/// Why a call to the store failed.
#[derive(Debug, thiserror::Error)]
pub enum RepoStoreError {
    /// The service serves no repository of that id.
    #[error("no repository {0:?} is served here")]
    NoRepository(String),
    /// The file does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request is malformed (a bad name, a bad range).
    #[error("{0}")]
    Invalid(String),
    /// The upload was refused: its name is not its hash, a snapshot names
    /// data the repository lacks, a lock held exclusively, a file that
    /// would be overwritten.
    #[error("{0}")]
    Refused(String),
    /// The storage failed (full disk, I/O error): try again later.
    #[error("{0}")]
    Unavailable(String),
}

/// The repositories the service serves, as the protocol sees them. Every
/// method blocks (disk, decryption): handlers call it on the blocking pool.
pub trait RepoStore: Send + Sync {
    /// Whether `repo` is served.
    fn has(&self, repo: &str) -> bool;
    /// Names and sizes of every file of `kind`.
    fn list(&self, repo: &str, kind: RepoFile) -> Result<Vec<(String, u64)>, RepoStoreError>;
    /// Size and time of one file, `None` if it does not exist.
    fn stat(
        &self,
        repo: &str,
        kind: RepoFile,
        name: &str,
    ) -> Result<Option<FileStat>, RepoStoreError>;
    /// A whole file, or `length` bytes of it at `offset`.
    fn read(
        &self,
        repo: &str,
        kind: RepoFile,
        name: &str,
        range: Option<(u64, u64)>,
    ) -> Result<Vec<u8>, RepoStoreError>;
    /// Stores an upload after checking it: a content-addressed name must be
    /// the BLAKE3 of `body`; an index may only name packs that exist; a
    /// snapshot must decrypt and every blob its trees reference must be
    /// indexed in a pack that exists; the rest as `rules` say. Returns
    /// what a snapshot held (`Some` for snapshots).
    fn put(
        &self,
        repo: &str,
        kind: RepoFile,
        name: &str,
        body: &[u8],
        rules: &PutRules,
    ) -> Result<(PutOutcome, Option<SnapshotFacts>), RepoStoreError>;
    /// Removes a file. With `shared_locks_only` (every caller but an
    /// admin) only a lock that is not exclusive may go.
    fn delete(
        &self,
        repo: &str,
        kind: RepoFile,
        name: &str,
        shared_locks_only: bool,
    ) -> Result<(), RepoStoreError>;
    /// Makes every write so far durable, and the deletions of `deletes`
    /// when given.
    fn sync(&self, repo: &str, deletes: Option<RepoFile>) -> Result<(), RepoStoreError>;
    /// Of `names` (files of `kind`), those that do not exist.
    fn missing(
        &self,
        repo: &str,
        kind: RepoFile,
        names: &[String],
    ) -> Result<Vec<String>, RepoStoreError>;
    /// Creates the repository of a newly registered agent, served from now
    /// on. Fails if it exists.
    fn create_agent_repository(&self, agent: &str) -> Result<NewAgentRepository, RepoStoreError>;
    /// Largest upload the store accepts for `repo`, in bytes (twice its
    /// pack size: packs close once past it).
    fn max_upload(&self, repo: &str) -> Result<u64, RepoStoreError>;
}
