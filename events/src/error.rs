//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong in `vouch-events`.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// An I/O error, with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, and on which path.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An event or envelope could not be encoded.
    #[error("cannot encode {what}: {message}")]
    Encode {
        /// What was being encoded.
        what: String,
        /// The encoder's message.
        message: String,
    },
    /// An event or envelope could not be decoded.
    #[error("cannot decode {what}: {message}")]
    Decode {
        /// What was being decoded.
        what: String,
        /// The decoder's message.
        message: String,
    },
    /// An id that does not parse.
    #[error("invalid id: {0}")]
    InvalidId(String),
    /// A segment file that is not a Vouch event log segment, or of an
    /// unsupported format version.
    #[error("{path}: {message}")]
    BadSegment {
        /// The segment file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The log is damaged somewhere other than its tail; it is not cut
    /// automatically because acknowledged events would be lost.
    #[error("event log damaged in {path} at byte {offset} (seq {seq}): {message}; run `vouch events verify`")]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// Byte offset of the damaged record.
        offset: u64,
        /// The sequence number expected there.
        seq: u64,
        /// What is wrong.
        message: String,
    },
    /// The log is held by another writer.
    #[error("event log {0} is already open for writing by another process")]
    Locked(PathBuf),
    /// An append would need more than the frame format allows.
    #[error("event too large: {0} bytes")]
    TooLarge(usize),
    /// Records offered to a [`LogImporter`](crate::LogImporter) that are
    /// not the next ones of one log (a gap, a broken chain, a bad frame).
    #[error("cannot import the records: {0}")]
    Import(String),
    /// The read store failed.
    #[error("read store: {0}")]
    Store(String),
    /// An append that expected the log to end at one seq found it at
    /// another (optimistic concurrency: someone else appended since the
    /// caller read the state it decided on). Nothing was written; read
    /// again and decide again.
    #[error(
        "the event log moved on: expected it to end at seq {expected}, it ends at seq {actual}"
    )]
    Conflict {
        /// The seq the caller expected the log to end at.
        expected: u64,
        /// Where it ended.
        actual: u64,
    },
    /// The read store reflects events the log does not hold (it is ahead
    /// of the log, or holds another event at its seq): acknowledged events
    /// are missing from the log, and the log records no repair explaining
    /// it.
    #[error("the read store is ahead of the event log at seq {seq}: {message}")]
    ReadStoreAhead {
        /// The seq the read store's snapshot is tagged with.
        seq: u64,
        /// What was found and what to do.
        message: String,
    },
}

impl EventError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        EventError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = EventError> = std::result::Result<T, E>;
