//! The engine's error type: what happened, what the user can do, and the
//! process exit code that the CLI maps it to (documented in `docs/cli.md`).

use std::io;
use std::path::PathBuf;

/// Exit codes of the `vouch` binary. Part of the CLI contract: never
/// renumber once released. 10, 11 and 12 mean what they mean to restic
/// (no repository, locked, wrong password), so wrappers carry over.
pub mod exit_code {
    /// Everything worked.
    pub const OK: i32 = 0;
    /// An error not covered by a more specific code.
    pub const FAILURE: i32 = 1;
    /// The command line was wrong (clap's own code).
    pub const USAGE: i32 = 2;
    /// A snapshot was made, but some sources could not be read.
    pub const PARTIAL: i32 = 3;
    /// No repository exists at the given location.
    pub const NO_REPOSITORY: i32 = 10;
    /// The repository is locked by another process (11, as restic).
    pub const LOCKED: i32 = 11;
    /// The passphrase matches none of the repository's keys (12, as
    /// restic).
    pub const WRONG_PASSWORD: i32 = 12;
    /// Verification found damage.
    pub const DAMAGED: i32 = 13;
    /// The disk (or quota) is full.
    pub const DISK_FULL: i32 = 14;
    /// The repository was written by a newer, unknown format version.
    pub const UNSUPPORTED_FORMAT: i32 = 15;
    /// A repository file (config, key, index, snapshot) is unreadable.
    pub const CORRUPT_METADATA: i32 = 16;
    /// The restore target is not empty and `--overwrite` was not given.
    pub const TARGET_NOT_EMPTY: i32 = 17;
    /// A backup source does not exist.
    pub const SOURCE_MISSING: i32 = 18;
    /// The snapshot or path asked for does not exist.
    pub const NOT_FOUND: i32 = 19;
    /// `forget` or `prune` refused: a service owns the repository (or its
    /// ownership record is damaged) and `--outside-service` was not given.
    pub const SERVICE_OWNED: i32 = 20;
    /// `forget` refused: the snapshot is locked until a date.
    pub const POINT_LOCKED: i32 = 21;
    /// Interrupted by SIGINT or SIGTERM (128 + 2).
    pub const INTERRUPTED: i32 = 130;
}

/// Every failure the engine reports.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No repository at the location.
    #[error("no repository at {0}")]
    NoRepository(String),
    /// `init` on a directory that already holds something.
    #[error("{0} is not empty; refusing to create a repository there")]
    NotEmpty(PathBuf),
    /// No key file opens with the passphrase.
    #[error("wrong passphrase: no key of this repository opens with it")]
    WrongPassword,
    /// No passphrase could be obtained.
    #[error("no passphrase: {0}")]
    NoPassword(String),
    /// Format version newer than this binary knows.
    #[error(
        "repository format version {found} is newer than this vouch supports (up to {supported})"
    )]
    UnsupportedFormat {
        /// The version found on disk.
        found: u32,
        /// The newest version this binary reads.
        supported: u32,
    },
    /// A metadata file that cannot be parsed or authenticated.
    #[error("{what} is corrupt: {detail}")]
    CorruptMetadata {
        /// Which file.
        what: String,
        /// Why it is considered corrupt.
        detail: String,
    },
    /// Data (a pack or blob) is damaged or missing.
    #[error("{0}")]
    Damaged(String),
    /// Prune (or another destructive step) refuses to run because the index
    /// does not account for everything: deleting now could lose data.
    #[error("refusing to prune: {0}")]
    RepairNeeded(String),
    /// A snapshot file does not read, so what it references is unknown.
    #[error("{0}")]
    SnapshotUnreadable(String),
    /// Another process holds a conflicting lock.
    #[error("repository is locked: {0}")]
    Locked(String),
    /// A snapshot is locked until a date (a lock stored in the repository).
    #[error("{0}")]
    PointLocked(String),
    /// Disk full while writing.
    #[error("disk full while {0}")]
    DiskFull(String),
    /// A backup source path does not exist.
    #[error("source {0} does not exist")]
    SourceMissing(PathBuf),
    /// The command whose output was being backed up failed
    /// (`--stdin-from-command`); nothing was committed.
    #[error("{0}")]
    SourceCommandFailed(String),
    /// Restore target not empty.
    #[error("restore target {0} is not empty")]
    TargetNotEmpty(PathBuf),
    /// Snapshot, path or key not found.
    #[error("{0}")]
    NotFound(String),
    /// A bad argument detected by the engine.
    #[error("{0}")]
    InvalidArgument(String),
    /// Stopped by a signal.
    #[error("interrupted")]
    Interrupted,
    /// A bug: an internal invariant failed or a worker thread panicked. The
    /// operation stopped without committing anything.
    #[error("{0}")]
    Internal(String),
    /// An I/O error, with what we were doing.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// Result alias for the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps an I/O error with context; ENOSPC/EDQUOT become [`Error::DiskFull`].
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        let context = context.into();
        match source.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => Error::DiskFull(context),
            _ => Error::Io { context, source },
        }
    }

    /// Shorthand for [`Error::CorruptMetadata`].
    pub fn corrupt(what: impl Into<String>, detail: impl std::fmt::Display) -> Self {
        Error::CorruptMetadata {
            what: what.into(),
            detail: detail.to_string(),
        }
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        use exit_code::*;
        match self {
            Error::NoRepository(_) => NO_REPOSITORY,
            Error::WrongPassword | Error::NoPassword(_) => WRONG_PASSWORD,
            Error::UnsupportedFormat { .. } => UNSUPPORTED_FORMAT,
            Error::CorruptMetadata { .. } => CORRUPT_METADATA,
            Error::Damaged(_) | Error::RepairNeeded(_) => DAMAGED,
            Error::SnapshotUnreadable(_) => CORRUPT_METADATA,
            Error::Locked(_) => LOCKED,
            Error::PointLocked(_) => POINT_LOCKED,
            Error::DiskFull(_) => DISK_FULL,
            Error::SourceMissing(_) => SOURCE_MISSING,
            Error::TargetNotEmpty(_) => TARGET_NOT_EMPTY,
            Error::NotFound(_) => NOT_FOUND,
            Error::InvalidArgument(_) => USAGE,
            Error::Interrupted => INTERRUPTED,
            Error::NotEmpty(_)
            | Error::Io { .. }
            | Error::Internal(_)
            | Error::SourceCommandFailed(_) => FAILURE,
        }
    }

    /// What the user can do about it, one sentence.
    pub fn hint(&self) -> &'static str {
        match self {
            Error::NoRepository(_) => "check --repo / VOUCH_REPOSITORY, or create one with `vouch init`",
            Error::NotEmpty(_) => "choose an empty or new directory for the repository",
            Error::WrongPassword => "check VOUCH_PASSWORD, VOUCH_PASSWORD_FILE or VOUCH_PASSWORD_COMMAND; `vouch key list` shows the keys",
            Error::NoPassword(_) => "set VOUCH_PASSWORD_FILE or VOUCH_PASSWORD_COMMAND, or run on a terminal to be prompted",
            Error::UnsupportedFormat { .. } => "upgrade vouch to a version that reads this format",
            Error::CorruptMetadata { .. } => "restore this file from a copy of the repository; `vouch repair index` rebuilds index files from the packs",
            Error::Damaged(_) => "run `vouch verify --read-data` for the full list of damage and the snapshots it affects",
            Error::RepairNeeded(_) => "run `vouch repair index` and then `vouch verify`; if blobs are still missing, forget the snapshots verify names as affected, then prune again",
            Error::SnapshotUnreadable(_) => "`vouch verify` lists unreadable snapshots; restore the file from a copy, or remove it with `vouch repair snapshots` if you accept losing that snapshot",
            Error::Locked(_) => "wait for the other process to finish, or pass --retry-lock 10m; `vouch unlock` removes stale locks (a lock of a dead process on this host is removed automatically)",
            Error::PointLocked(_) => "a locked snapshot stays until its lock ends; `vouch snapshots` shows the locks, and nothing can shorten one",
            Error::DiskFull(_) => "free space (or raise the quota) and run the same command again; nothing already stored is lost",
            Error::SourceMissing(_) => "check the path; back up only paths that exist",
            Error::SourceCommandFailed(_) => "the command's own messages above say why it failed; fix that and run the backup again",
            Error::TargetNotEmpty(_) => "restore into an empty directory, or pass --overwrite to replace what is there",
            Error::NotFound(_) => "`vouch snapshots` lists the snapshots; `vouch ls` lists paths",
            Error::InvalidArgument(_) => "see `vouch help` for the accepted values",
            Error::Interrupted => "run the same command again; completed work is kept (an interrupted restore resumes)",
            Error::Io { .. } => "check permissions and the health of the disk, then retry",
            Error::Internal(_) => "this is a bug in vouch; nothing was committed, so retrying is safe; please report it with the log",
        }
    }
}

/// Adds context to `io::Result`s.
pub trait IoContext<T> {
    /// Attaches `context` (evaluated lazily) to an I/O error.
    fn ctx<F: FnOnce() -> String>(self, context: F) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx<F: FnOnce() -> String>(self, context: F) -> Result<T> {
        self.map_err(|e| Error::io(context(), e))
    }
}
