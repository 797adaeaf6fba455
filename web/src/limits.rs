//! Bounds on costly work (security review, finding 8): concurrent
//! downloads, concurrent browse calls, and event streams per token and in
//! all. Beyond a bound the answer is 503 `busy` (or 429
//! `too_many_requests` for one token's streams) with `Retry-After`, never a
//! queue that grows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::WebError;

/// Downloads (files and archives) running at once.
pub const MAX_DOWNLOADS: usize = 8;
/// Browse calls (directory listings, repository statistics) at once.
pub const MAX_BROWSE_CALLS: usize = 8;
/// How long a browse call waits for a slot before 503 `busy`.
const BROWSE_WAIT: Duration = Duration::from_secs(10);
/// Uploads (repository protocol) buffered at once: each holds at most
/// twice its repository's pack size in memory until it is written.
pub const MAX_UPLOADS: usize = 8;
/// How long an upload waits for a slot before 503 `busy`.
const UPLOAD_WAIT: Duration = Duration::from_secs(30);
/// Reports made at once (each folds the whole log; a PDF runs Chromium).
pub const MAX_REPORTS: usize = 2;
/// Event streams one token may hold open.
pub const MAX_STREAMS_PER_TOKEN: usize = 4;
/// Event streams open in all.
pub const MAX_STREAMS: usize = 64;

/// The shared counters of one server.
#[derive(Debug)]
pub(crate) struct Limits {
    downloads: Arc<Semaphore>,
    browse: Arc<Semaphore>,
    uploads: Arc<Semaphore>,
    reports: Arc<Semaphore>,
    streams: Arc<Mutex<Streams>>,
}

#[derive(Debug, Default)]
struct Streams {
    total: usize,
    per_token: HashMap<String, usize>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            downloads: Arc::new(Semaphore::new(MAX_DOWNLOADS)),
            browse: Arc::new(Semaphore::new(MAX_BROWSE_CALLS)),
            uploads: Arc::new(Semaphore::new(MAX_UPLOADS)),
            reports: Arc::new(Semaphore::new(MAX_REPORTS)),
            streams: Arc::new(Mutex::new(Streams::default())),
        }
    }
}

/// An open event stream, counted until dropped.
#[derive(Debug)]
pub(crate) struct StreamSlot {
    streams: Arc<Mutex<Streams>>,
    token: String,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut s = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
        s.total = s.total.saturating_sub(1);
        if let Some(n) = s.per_token.get_mut(&self.token) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                s.per_token.remove(&self.token);
            }
        }
    }
}

impl Limits {
    /// A download slot, or 503 `busy` at once when every slot is taken.
    pub(crate) fn download(&self) -> Result<OwnedSemaphorePermit, WebError> {
        self.downloads.clone().try_acquire_owned().map_err(|_| {
            WebError::Busy(format!(
                "{MAX_DOWNLOADS} downloads are running, as many as the server allows; retry later"
            ))
        })
    }

    /// A report slot, or 503 `busy` at once when every slot is taken.
    pub(crate) fn report(&self) -> Result<OwnedSemaphorePermit, WebError> {
        self.reports.clone().try_acquire_owned().map_err(|_| {
            WebError::Busy(format!(
                "{MAX_REPORTS} reports are being made, as many as the server allows; retry later"
            ))
        })
    }

    /// A browse slot, waiting a little; then 503 `busy`.
    pub(crate) async fn browse(&self) -> Result<OwnedSemaphorePermit, WebError> {
        let busy = || {
            WebError::Busy(format!(
                "{MAX_BROWSE_CALLS} browse calls are running, as many as the server allows; retry later"
            ))
        };
        match tokio::time::timeout(BROWSE_WAIT, self.browse.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) | Err(_) => Err(busy()),
        }
    }

    /// An upload slot, waiting a while; then 503 `busy`.
    pub(crate) async fn upload(&self) -> Result<OwnedSemaphorePermit, WebError> {
        match tokio::time::timeout(UPLOAD_WAIT, self.uploads.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) | Err(_) => Err(WebError::Busy(format!(
                "{MAX_UPLOADS} uploads are being received, as many as the server holds at once; retry later"
            ))),
        }
    }

    /// A stream slot for `token`: 429 `too_many_requests` when the token
    /// holds [`MAX_STREAMS_PER_TOKEN`], 503 `busy` when the server holds
    /// [`MAX_STREAMS`].
    pub(crate) fn stream(&self, token: &str) -> Result<StreamSlot, WebError> {
        let mut s = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = s.per_token.get(token).copied().unwrap_or(0);
        if mine >= MAX_STREAMS_PER_TOKEN {
            return Err(WebError::TooManyRequests(format!(
                "token {token:?} holds {mine} event streams, as many as one token may \
                 ({MAX_STREAMS_PER_TOKEN}); close one first"
            )));
        }
        if s.total >= MAX_STREAMS {
            return Err(WebError::Busy(format!(
                "{MAX_STREAMS} event streams are open, as many as the server allows; retry later"
            )));
        }
        s.total += 1;
        *s.per_token.entry(token.to_owned()).or_insert(0) += 1;
        Ok(StreamSlot {
            streams: self.streams.clone(),
            token: token.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_limited_per_token_and_freed_on_drop() {
        let limits = Limits::default();
        let held: Vec<_> = (0..MAX_STREAMS_PER_TOKEN)
            .map(|_| limits.stream("a").expect("a slot"))
            .collect();
        assert!(matches!(
            limits.stream("a"),
            Err(WebError::TooManyRequests(_))
        ));
        let other = limits.stream("b").expect("another token has its own");
        drop(held);
        drop(other);
        let s = limits.streams.lock().expect("lock");
        assert_eq!((s.total, s.per_token.len()), (0, 0));
    }

    #[test]
    fn streams_are_limited_in_all() {
        let limits = Limits::default();
        let held: Vec<_> = (0..MAX_STREAMS)
            .map(|i| limits.stream(&format!("t{i}")).expect("a slot"))
            .collect();
        assert!(matches!(limits.stream("late"), Err(WebError::Busy(_))));
        drop(held);
        assert!(limits.stream("late").is_ok());
    }
}
