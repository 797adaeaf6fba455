//! Downloads of backed-up content: a file (with `Content-Length`) or a
//! directory as a tar archive, streamed through a bounded channel from the
//! blocking pool. Memory per download is the channel (a few chunks) plus
//! one blob in the engine, whatever the size of the file or the tree.
//!
//! Between chunks the token is looked at again ([`TokenWatch`]): a revoked
//! token ends the download within about a second. A read error (a damaged
//! blob), like a revoked token, aborts the response (the client sees a
//! broken transfer, never a complete-looking file with wrong bytes); both
//! are logged.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use actix_web::web::Bytes;
use tokio::sync::{mpsc, OwnedSemaphorePermit};

use crate::auth::TokenWatch;
use crate::browse::{ArchiveWriter, FileReader};

/// Bytes per chunk sent to the client.
pub(crate) const CHUNK: usize = 64 * 1024;
/// Chunks buffered between the reader and the client.
pub(crate) const CHANNEL_CHUNKS: usize = 4;
/// How often, at most, a download looks at its token again.
const TOKEN_CHECK_EVERY: Duration = Duration::from_millis(250);

pub(crate) type Tx = mpsc::Sender<Result<Bytes, io::Error>>;

/// The sink of a download: chunks into the channel, the token looked at
/// between them. Fails (and stays failed) once the client is gone or the
/// token is revoked.
struct ChannelWriter {
    tx: Tx,
    buf: Vec<u8>,
    watch: TokenWatch,
    last_check: Instant,
    failed: bool,
}

impl ChannelWriter {
    fn new(tx: Tx, watch: TokenWatch) -> Self {
        ChannelWriter {
            tx,
            buf: Vec::with_capacity(CHUNK),
            watch,
            last_check: Instant::now(),
            failed: false,
        }
    }

    fn send(&mut self) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the download was ended",
            ));
        }
        if self.last_check.elapsed() >= TOKEN_CHECK_EVERY {
            self.last_check = Instant::now();
            if !self.watch.still_valid() {
                self.failed = true;
                tracing::warn!(token = %self.watch.name(), "download ended: its token was revoked");
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "the token was revoked during the download",
                ));
            }
        }
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        if self.tx.blocking_send(Ok(chunk)).is_err() {
            self.failed = true;
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the client went away",
            ));
        }
        Ok(())
    }

    /// Ends the response as broken (unless the client is gone anyway).
    fn abort(&mut self, e: io::Error) {
        self.failed = true;
        self.buf.clear();
        let _ = self.tx.blocking_send(Err(e));
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.failed {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the download was ended",
            ));
        }
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// Copies `reader` to the client on the blocking pool; `permit` (a
/// download slot) is held until the copy ends.
pub(crate) fn spawn_file(
    mut reader: FileReader,
    tx: Tx,
    watch: TokenWatch,
    permit: OwnedSemaphorePermit,
) {
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let mut out = ChannelWriter::new(tx, watch);
        let mut buf = vec![0u8; CHUNK];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => {
                    let _ = out.flush();
                    return;
                }
                Ok(n) => {
                    if let Err(e) = out.write_all(&buf[..n]) {
                        ended(&mut out, e);
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::error!(error = %e, "reading a file of a point failed mid-way; the download is aborted");
                    out.abort(e);
                    return;
                }
            }
        }
    });
}

/// Writes an archive to the client on the blocking pool; `permit` is held
/// until it ends.
pub(crate) fn spawn_archive(
    archive: ArchiveWriter,
    tx: Tx,
    watch: TokenWatch,
    permit: OwnedSemaphorePermit,
) {
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let mut out = ChannelWriter::new(tx, watch);
        match archive(&mut out) {
            Ok(()) => {
                if let Err(e) = out.flush() {
                    ended(&mut out, e);
                }
            }
            Err(e) => {
                if !out.failed {
                    tracing::error!(error = %e, "writing the archive of a directory failed mid-way; the download is aborted");
                }
                out.abort(io::Error::other(e.to_string()));
            }
        }
    });
}

/// A download ended by the sink: the client left, or the token was revoked.
fn ended(out: &mut ChannelWriter, e: io::Error) {
    if e.kind() == io::ErrorKind::PermissionDenied {
        out.abort(e);
    } else {
        tracing::debug!(error = %e, "download ended early: the client went away");
    }
}
