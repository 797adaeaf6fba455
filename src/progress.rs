//! Progress counters shared between the engine's threads and whoever shows
//! them (a terminal bar, JSON lines, the service's job events). The engine
//! only increments atomics; it never prints.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of a running backup or restore.
#[derive(Debug, Default)]
pub struct Progress {
    /// Entries (files, dirs, others) found so far.
    pub entries: AtomicU64,
    /// Files whose content is done (read or reused; restored).
    pub files_done: AtomicU64,
    /// Bytes of files done or in flight (read from the source; written to the target).
    pub bytes_done: AtomicU64,
    /// Total bytes expected when known (restore), else 0.
    pub bytes_total: AtomicU64,
    /// Total files expected when known (restore), else 0.
    pub files_total: AtomicU64,
    /// New plaintext bytes added to the repository.
    pub bytes_added: AtomicU64,
    /// Bytes of packs written.
    pub bytes_stored: AtomicU64,
    /// Warnings so far.
    pub warnings: AtomicU64,
}

impl Progress {
    /// Adds to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
