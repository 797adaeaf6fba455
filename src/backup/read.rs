//! Reader workers: read a file, cut it into chunks, name each chunk, and send
//! the chunks the repository lacks to the savers. Several readers run at once
//! so that a cold disk sees parallel reads.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use super::save::{BlobJob, Dedup, Naming};
use super::Abort;
use crate::chunker::Chunker;
use crate::crypto::MasterKey;
use crate::error::{Error, Result};
use crate::format::{BlobType, Extent, Node};
use crate::progress::Progress;

/// A file to read.
pub struct FileJob {
    /// Where it is.
    pub path: PathBuf,
    /// Its metadata as the walker saw it.
    pub node: Node,
    /// Whether it has holes worth preserving.
    pub sparse: bool,
    /// Where the result goes.
    pub reply: Sender<FileResult>,
}

/// What reading a file gave.
pub enum FileResult {
    /// Content stored (or already present).
    Done {
        /// Content pieces.
        extents: Vec<Extent>,
        /// Bytes of content.
        size: u64,
        /// Bytes actually read (holes excluded).
        bytes_read: u64,
        /// The file changed while it was read.
        changed: bool,
    },
    /// The file could not be read; a warning for the manifest.
    Unreadable(String),
}

/// Context shared by reader workers.
pub struct ReaderContext {
    /// Chunker of the repository.
    pub chunker: Chunker,
    /// For blob ids.
    pub key: Arc<MasterKey>,
    /// Which blobs to store.
    pub dedup: Arc<Dedup>,
    /// Savers' input.
    pub blobs: Sender<BlobJob>,
    /// Counters.
    pub progress: Arc<Progress>,
    /// Abort flag.
    pub abort: Arc<Abort>,
}

/// Runs one reader until the job channel closes or the backup aborts.
pub fn reader_worker(ctx: Arc<ReaderContext>, jobs: Receiver<FileJob>) {
    for job in jobs {
        if ctx.abort.is_set() {
            // Dropping `job.reply` tells the assembler the file was not done.
            continue;
        }
        let result = match read_file(&ctx, &job) {
            Ok(r) => r,
            Err(Error::Io { context, source }) => {
                FileResult::Unreadable(format!("{context}: {source}"))
            }
            Err(e) => {
                ctx.abort.set(e);
                continue;
            }
        };
        Progress::add(&ctx.progress.files_done, 1);
        let _ = job.reply.send(result);
    }
}

/// Sends a chunk to the savers if the repository lacks it; returns its extent.
fn store_chunk(ctx: &ReaderContext, data: Vec<u8>) -> Result<Extent> {
    let id = ctx.key.blob_id(&data);
    let length = data.len() as u64;
    Progress::add(&ctx.progress.bytes_done, length);
    if ctx.dedup.claim(&id) {
        ctx.blobs
            .send(BlobJob {
                naming: Naming::Known(id),
                kind: BlobType::Data,
                data,
            })
            .map_err(|_| ctx.abort.error_or_interrupted())?;
    }
    Ok(Extent {
        blob: Some(id),
        length,
    })
}

fn read_file(ctx: &ReaderContext, job: &FileJob) -> Result<FileResult> {
    let path = &job.path;
    let io = |what: &str| {
        let what = what.to_string();
        move |e: std::io::Error| Error::io(format!("{what} {}", path.display()), e)
    };
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) => return Ok(FileResult::Unreadable(format!("{}: {e}", path.display()))),
    };
    let before = file.metadata().map_err(io("stat"))?;
    let mut extents = Vec::new();
    let mut bytes_read = 0u64;
    let size;
    if job.sparse {
        size = read_sparse(ctx, &mut file, before.len(), &mut extents, &mut bytes_read)?;
    } else if before.len() <= ctx.chunker.max_size() as u64 {
        // Whole file in one buffer sized to the file, never to the maximum.
        let mut buf = Vec::with_capacity(before.len() as usize + 1);
        file.read_to_end(&mut buf).map_err(io("reading"))?;
        bytes_read = buf.len() as u64;
        size = bytes_read;
        let cuts = ctx.chunker.cut_all(&buf);
        if cuts.len() == 1 {
            extents.push(store_chunk(ctx, buf)?);
        } else {
            let mut pos = 0;
            for n in cuts {
                extents.push(store_chunk(ctx, buf[pos..pos + n].to_vec())?);
                pos += n;
            }
        }
    } else {
        // A large file: hashing moves to the workers so that it runs on
        // every core while this thread keeps reading and cutting.
        let mut pending = Vec::new();
        let n = ctx.chunker.stream(&mut file, |chunk| {
            crate::util::check_interrupted()?;
            if ctx.abort.is_set() {
                return Err(ctx.abort.error_or_interrupted());
            }
            let (reply, id) = crossbeam_channel::bounded(1);
            Progress::add(&ctx.progress.bytes_done, chunk.len() as u64);
            pending.push((id, chunk.len() as u64));
            let naming = Naming::Unnamed {
                dedup: ctx.dedup.clone(),
                reply,
            };
            ctx.blobs
                .send(BlobJob {
                    naming,
                    kind: BlobType::Data,
                    data: chunk.to_vec(),
                })
                .map_err(|_| ctx.abort.error_or_interrupted())
        })?;
        for (id, length) in pending {
            let id = id.recv().map_err(|_| ctx.abort.error_or_interrupted())?;
            extents.push(Extent {
                blob: Some(id),
                length,
            });
        }
        bytes_read = n;
        size = n;
    }
    let after = file.metadata().map_err(io("stat"))?;
    let changed = after.len() != before.len()
        || after.mtime() != before.mtime()
        || after.mtime_nsec() != before.mtime_nsec()
        || size != job.node.size;
    Ok(FileResult::Done {
        extents,
        size,
        bytes_read,
        changed,
    })
}

/// Reads a sparse file region by region (SEEK_DATA / SEEK_HOLE); holes become
/// extents without a blob.
fn read_sparse(
    ctx: &ReaderContext,
    file: &mut File,
    len: u64,
    extents: &mut Vec<Extent>,
    bytes_read: &mut u64,
) -> Result<u64> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let mut pos: u64 = 0;
    while pos < len {
        // SAFETY: lseek on our own descriptor.
        let data = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_DATA) };
        let data = if data < 0 { len } else { data as u64 };
        if data > pos {
            extents.push(Extent {
                blob: None,
                length: data.min(len) - pos,
            });
            pos = data.min(len);
            if pos >= len {
                break;
            }
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_HOLE) };
        let hole = if hole < 0 {
            len
        } else {
            (hole as u64).min(len)
        };
        file.seek(SeekFrom::Start(pos))
            .map_err(|e| Error::io("seeking in a sparse file", e))?;
        let region = (&mut *file).take(hole - pos);
        let n = ctx.chunker.stream(region, |chunk| {
            crate::util::check_interrupted()?;
            extents.push(store_chunk(ctx, chunk.to_vec())?);
            Ok(())
        })?;
        *bytes_read += n;
        if n == 0 {
            break;
        }
        pos += n;
    }
    Ok(extents.iter().map(|e| e.length).sum())
}
