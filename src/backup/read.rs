//! Reader workers: read a file, cut it into chunks, name each chunk, and send
//! the chunks the repository lacks to the savers. Several readers run at once
//! so that a cold disk sees parallel reads.

use std::fs::File;
use std::fs::Metadata;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
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
    /// Its metadata as the walker saw it. `node.device` and `node.inode`
    /// are the identity from the walker's `lstat`: the reader reads the file
    /// only if the descriptor it opens has the same.
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
    /// Disk images (`*.raw`) are cut into chunks of this size at offsets
    /// that are multiples of it (none: content-defined like any file).
    pub image_chunk: Option<usize>,
}

/// Whether `path` is a disk image cut at fixed offsets.
fn is_image(ctx: &ReaderContext, path: &std::path::Path) -> Option<usize> {
    ctx.image_chunk
        .filter(|_| path.extension().is_some_and(|e| e == "raw"))
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

/// Opens the file the walker `lstat`ed, and only that file.
///
/// The path may have been swapped between the walker's `lstat` and this open
/// (finding 6 of the engine review): for a symlink (`O_NOFOLLOW` fails with
/// `ELOOP`), a FIFO or device (`O_NONBLOCK` keeps the open from blocking, the
/// `fstat` shows it is not a regular file) or another regular file (its
/// `(st_dev, st_ino)` differs from the walker's). In each case the result is
/// `Err(message)`: the file is skipped with a warning naming it. `O_NOATIME`
/// is asked for, and dropped when the kernel refuses it (`EPERM`: not the
/// file's owner and no `CAP_FOWNER`).
fn open_checked(path: &Path, node: &Node) -> std::result::Result<(File, Metadata), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let open = |noatime: bool| {
        let extra = if noatime { libc::O_NOATIME } else { 0 };
        // std adds O_CLOEXEC itself.
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | extra)
            .open(path)
    };
    let (file, noatime) = match open(true) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => (open(false), 0),
        other => (other, libc::O_NOATIME),
    };
    let file = match file {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(format!(
                "{}: replaced by a symlink after it was listed; skipped",
                path.display()
            ))
        }
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("{}: stat: {e}", path.display()))?;
    if !meta.file_type().is_file() {
        return Err(format!(
            "{}: no longer a regular file (replaced after it was listed); skipped",
            path.display()
        ));
    }
    if (meta.dev(), meta.ino()) != (node.device, node.inode) {
        return Err(format!(
            "{}: replaced by another file after it was listed; skipped",
            path.display()
        ));
    }
    // Blocking reads from here on (a regular file ignores O_NONBLOCK on
    // most file systems, but not on all: some FUSE servers honour it).
    // F_SETFL sets the status flags it handles at once, so one call keeps
    // O_NOATIME and drops O_NONBLOCK.
    // SAFETY: fcntl on our own open descriptor.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, noatime) } < 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!("{}: fcntl: {e}", path.display()));
    }
    Ok((file, meta))
}

fn read_file(ctx: &ReaderContext, job: &FileJob) -> Result<FileResult> {
    let path = &job.path;
    crate::failpoint::hit("reader", path.as_os_str().as_encoded_bytes());
    let io = |what: &str| {
        let what = what.to_string();
        move |e: std::io::Error| Error::io(format!("{what} {}", path.display()), e)
    };
    let (mut file, before) = match open_checked(path, &job.node) {
        Ok(f) => f,
        Err(msg) => return Ok(FileResult::Unreadable(msg)),
    };
    // Never more than the size the open file had: a file that grows while
    // it is read (a log, or a device someone managed to put in its place)
    // is cut there and flagged as changed.
    let len = before.len();
    let mut extents = Vec::new();
    let mut bytes_read = 0u64;
    // Whether the file holds more than `len` bytes, once known.
    let mut grew = None;
    let size;
    if let Some(fixed) = is_image(ctx, path) {
        // A disk image: holes kept, every chunk at a fixed offset, so that
        // the next dump of the disk shares every chunk it did not change.
        size = read_sparse(
            ctx,
            &mut file,
            len,
            &mut extents,
            &mut bytes_read,
            Some(fixed),
        )?;
    } else if job.sparse {
        size = read_sparse(ctx, &mut file, len, &mut extents, &mut bytes_read, None)?;
    } else if len <= ctx.chunker.max_size() as u64 {
        // Whole file in one buffer sized to the file (never to the
        // maximum), plus one byte: a read that returns less than asked has
        // met the end of the file, so one `read` reads a small file and
        // proves it did not grow, where a separate probe took a second call.
        let (buf, grew_past) = read_small(&mut file, len).map_err(io("reading"))?;
        grew = Some(grew_past);
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
        let n = read_streamed(ctx, (&mut file).take(len), &mut extents)?;
        bytes_read = n;
        size = n;
    }
    // One byte past the size read: content the size did not announce (a
    // file that grew, or one whose st_size understates it, as on some
    // pseudo and FUSE file systems) is flagged, never read without bound.
    // This is the read that would have seen end-of-file anyway (a small
    // file's own read already made it).
    let grew = grew.unwrap_or_else(|| {
        let mut probe = [0u8; 1];
        std::os::unix::fs::FileExt::read_at(&file, &mut probe, len).is_ok_and(|n| n > 0)
    });
    let after = file.metadata().map_err(io("stat"))?;
    let changed = grew
        || after.len() != before.len()
        || after.mtime() != before.mtime()
        || after.mtime_nsec() != before.mtime_nsec()
        || after.ctime() != before.ctime()
        || after.ctime_nsec() != before.ctime_nsec()
        || size != job.node.size;
    Ok(FileResult::Done {
        extents,
        size,
        bytes_read,
        changed,
    })
}

/// Reads a file of `len` bytes whole; returns its first `len` bytes (fewer
/// if it shrank) and whether it held more. One `read` asks for `len + 1`
/// bytes: when it returns exactly the `len` that `fstat` announced, fewer
/// than asked, the file ended there, so a file that did not change costs
/// one call. Any other short read is followed until `read` returns 0.
fn read_small(file: &mut File, len: u64) -> std::io::Result<(Vec<u8>, bool)> {
    let len = len as usize;
    let mut buf = Vec::with_capacity(len + 1);
    while buf.len() <= len {
        let spare = buf.spare_capacity_mut();
        let asked = spare.len();
        // SAFETY: `spare` is writable memory of `asked` bytes that `read`
        // fills; the vector's length then covers only what it wrote.
        let n = unsafe { libc::read(file.as_raw_fd(), spare.as_mut_ptr().cast(), asked) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let n = n as usize;
        // SAFETY: the kernel wrote `n` bytes into the spare capacity.
        unsafe { buf.set_len(buf.len() + n) };
        if n == 0 || (buf.len() == len && n < asked) {
            break;
        }
    }
    let grew = buf.len() > len;
    buf.truncate(len);
    Ok((buf, grew))
}

/// Streams a large file (or a region of one) to the savers; returns the
/// bytes read. Hashing moves to the workers so that it runs on every core
/// while this thread keeps reading and cutting.
pub(crate) fn read_streamed(
    ctx: &ReaderContext,
    source: impl Read,
    extents: &mut Vec<Extent>,
) -> Result<u64> {
    let mut pending = Vec::new();
    let n = ctx.chunker.stream(source, |chunk| {
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
    Ok(n)
}

/// Cuts `source`, which starts at byte `offset` of its file, at the
/// multiples of `size` in the file and stores each piece; returns the bytes
/// read. Two dumps of a disk then share every chunk whose bytes did not
/// change, whatever changed elsewhere.
fn stream_fixed(
    ctx: &ReaderContext,
    mut source: impl Read,
    offset: u64,
    size: usize,
    extents: &mut Vec<Extent>,
) -> Result<u64> {
    let mut total = 0u64;
    let mut buf = vec![0u8; size];
    // Hashed by the savers (on every core), as `read_streamed` does.
    let mut pending = Vec::new();
    let result = loop {
        let at = offset + total;
        let want = size - (at % size as u64) as usize;
        let mut got = 0;
        while got < want {
            match source.read(&mut buf[got..want]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("reading a disk image", e)),
            }
        }
        if got == 0 {
            break Ok(total);
        }
        crate::util::check_interrupted()?;
        if ctx.abort.is_set() {
            return Err(ctx.abort.error_or_interrupted());
        }
        let (reply, id) = crossbeam_channel::bounded(1);
        Progress::add(&ctx.progress.bytes_done, got as u64);
        pending.push((id, got as u64));
        ctx.blobs
            .send(BlobJob {
                naming: Naming::Unnamed {
                    dedup: ctx.dedup.clone(),
                    reply,
                },
                kind: BlobType::Data,
                data: buf[..got].to_vec(),
            })
            .map_err(|_| ctx.abort.error_or_interrupted())?;
        total += got as u64;
        if got < want {
            break Ok(total);
        }
    };
    for (id, length) in pending {
        let id = id.recv().map_err(|_| ctx.abort.error_or_interrupted())?;
        extents.push(Extent {
            blob: Some(id),
            length,
        });
    }
    result
}

/// What a failed `lseek(SEEK_DATA)` means for the rest of a sparse file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SeekDataFailure {
    /// `ENXIO`: no data at or after the offset; the rest is a hole.
    RestIsHole,
    /// Anything else (`EINVAL`/`EOPNOTSUPP`: the file system has no
    /// `SEEK_DATA`; `EIO` or a FUSE server's odd answer): read the rest
    /// densely, so that no data is ever taken for a hole (finding 17).
    ReadDensely,
}

fn seek_data_failure(errno: Option<i32>) -> SeekDataFailure {
    match errno {
        Some(libc::ENXIO) => SeekDataFailure::RestIsHole,
        _ => SeekDataFailure::ReadDensely,
    }
}

/// Reads a sparse file region by region (SEEK_DATA / SEEK_HOLE); holes become
/// extents without a blob.
fn read_sparse(
    ctx: &ReaderContext,
    file: &mut File,
    len: u64,
    extents: &mut Vec<Extent>,
    bytes_read: &mut u64,
    fixed: Option<usize>,
) -> Result<u64> {
    let fd = file.as_raw_fd();
    let mut pos: u64 = 0;
    while pos < len {
        // SAFETY: lseek on our own descriptor.
        let data = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_DATA) };
        let data = if data >= 0 {
            data as u64
        } else {
            let errno = std::io::Error::last_os_error().raw_os_error();
            match seek_data_failure(errno) {
                SeekDataFailure::RestIsHole => len,
                SeekDataFailure::ReadDensely => {
                    file.seek(SeekFrom::Start(pos))
                        .map_err(|e| Error::io("seeking in a sparse file", e))?;
                    let rest = (&mut *file).take(len - pos);
                    let n = match fixed {
                        Some(size) => stream_fixed(ctx, rest, pos, size, extents)?,
                        None => read_streamed(ctx, rest, extents)?,
                    };
                    *bytes_read += n;
                    break;
                }
            }
        };
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
        let n = match fixed {
            Some(size) => stream_fixed(ctx, region, pos, size, extents)?,
            None => ctx.chunker.stream(region, |chunk| {
                crate::util::check_interrupted()?;
                extents.push(store_chunk(ctx, chunk.to_vec())?);
                Ok(())
            })?,
        };
        *bytes_read += n;
        if n == 0 {
            break;
        }
        pos += n;
    }
    Ok(extents.iter().map(|e| e.length).sum())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::time::Duration;

    use super::*;
    use crate::format::{ChunkerParams, NodeKind};
    use crate::repo::MasterIndex;

    fn context() -> (ReaderContext, Receiver<BlobJob>) {
        let key = MasterKey::generate();
        let (tx, rx) = crossbeam_channel::unbounded();
        let ctx = ReaderContext {
            chunker: Chunker::new(ChunkerParams::default(), key.gear_table()),
            key: Arc::new(key),
            dedup: Arc::new(Dedup::new(Arc::new(MasterIndex::default()))),
            blobs: tx,
            progress: Arc::default(),
            abort: Arc::default(),
            image_chunk: None,
        };
        (ctx, rx)
    }

    /// What the walker records from its `lstat`.
    fn walked(path: &Path) -> Node {
        let m = std::fs::symlink_metadata(path).unwrap();
        Node {
            mode: m.mode(),
            uid: m.uid(),
            gid: m.gid(),
            size: m.len(),
            inode: m.ino(),
            device: m.dev(),
            links: m.nlink(),
            ..Node::new(b"f", NodeKind::File)
        }
    }

    fn job(path: &Path, node: Node) -> (FileJob, Receiver<FileResult>) {
        let (reply, rx) = crossbeam_channel::bounded(1);
        let job = FileJob {
            path: path.to_path_buf(),
            node,
            sparse: false,
            reply,
        };
        (job, rx)
    }

    fn stored(blobs: &Receiver<BlobJob>) -> Vec<Vec<u8>> {
        blobs.try_iter().map(|b| b.data).collect()
    }

    /// Engine review finding 6: the path is swapped for a symlink to a
    /// secret between the walker's `lstat` and the reader's open.
    #[test]
    fn review_finding_6_symlink_swapped_in_after_the_walk_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"TOP SECRET: root's eyes only").unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"harmless").unwrap();
        let node = walked(&f);
        std::fs::remove_file(&f).unwrap();
        std::os::unix::fs::symlink(&secret, &f).unwrap();

        let (ctx, blobs) = context();
        let (job, _rx) = job(&f, node);
        match read_file(&ctx, &job).unwrap() {
            FileResult::Unreadable(msg) => {
                assert!(msg.contains(&f.display().to_string()), "{msg}")
            }
            FileResult::Done { .. } => panic!("read through a symlink swapped in"),
        }
        assert!(
            stored(&blobs).iter().all(|b| !b.starts_with(b"TOP SECRET")),
            "the secret's content reached the savers"
        );
    }

    /// The same with another regular file (a hard link to the secret) in
    /// its place: the identity differs from the walker's.
    #[test]
    fn review_finding_6_other_file_swapped_in_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"TOP SECRET: root's eyes only").unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"harmless").unwrap();
        let node = walked(&f);
        std::fs::remove_file(&f).unwrap();
        std::fs::hard_link(&secret, &f).unwrap();

        let (ctx, blobs) = context();
        let (job, _rx) = job(&f, node);
        assert!(matches!(
            read_file(&ctx, &job).unwrap(),
            FileResult::Unreadable(m) if m.contains("replaced")
        ));
        assert!(stored(&blobs).is_empty());
    }

    /// A FIFO swapped in must neither hang the backup nor be read.
    #[test]
    fn review_finding_6_fifo_swapped_in_does_not_hang() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"harmless").unwrap();
        let node = walked(&f);
        std::fs::remove_file(&f).unwrap();
        let c = std::ffi::CString::new(f.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);

        let (ctx, _blobs) = context();
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        let path = f.clone();
        std::thread::spawn(move || {
            let (job, _rx) = job(&path, node);
            let r = read_file(&ctx, &job).map(|r| match r {
                FileResult::Unreadable(m) => Some(m),
                FileResult::Done { .. } => None,
            });
            let _ = done_tx.send(r);
        });
        let outcome = done_rx.recv_timeout(Duration::from_secs(10));
        if outcome.is_err() {
            // Unblock the reader stuck in open(2) before failing.
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&f);
        }
        let msg = outcome
            .expect("the reader hung on a FIFO")
            .unwrap()
            .expect("a FIFO was read as the file");
        assert!(msg.contains("no longer a regular file"), "{msg}");
    }

    #[test]
    fn unchanged_file_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"content").unwrap();
        let (ctx, blobs) = context();
        let (job, _rx) = job(&f, walked(&f));
        match read_file(&ctx, &job).unwrap() {
            FileResult::Done { size, changed, .. } => {
                assert_eq!(size, 7);
                assert!(!changed);
            }
            FileResult::Unreadable(m) => panic!("{m}"),
        }
        assert_eq!(stored(&blobs), vec![b"content".to_vec()]);
        // Opened non-blocking, read blocking; O_NOATIME kept where allowed
        // (the owner of the file may always ask for it).
        let (file, _) = open_checked(&f, &job.node).unwrap();
        // SAFETY: fcntl on an open descriptor.
        let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(flags & libc::O_NONBLOCK, 0);
        assert_ne!(flags & libc::O_NOATIME, 0);
    }

    /// Content beyond the size the open file reports is not read, and the
    /// file is flagged as changed (finding 6: "read at most the fstat size").
    /// A procfs file reports size 0 and yet has content: the same as a file
    /// that grows after the `fstat`.
    #[test]
    fn review_finding_6_content_beyond_the_fstat_size_is_not_read() {
        let f = Path::new("/proc/self/status");
        if !f.exists() {
            eprintln!("SKIPPED: no /proc");
            return;
        }
        let (ctx, blobs) = context();
        let node = walked(f);
        assert_eq!(node.size, 0);
        let (job, _rx) = job(f, node);
        match read_file(&ctx, &job).unwrap() {
            FileResult::Done {
                size,
                bytes_read,
                changed,
                ..
            } => {
                assert_eq!((size, bytes_read), (0, 0));
                assert!(changed, "unannounced content must be flagged");
            }
            FileResult::Unreadable(m) => panic!("{m}"),
        }
        assert!(stored(&blobs).iter().all(|b| b.is_empty()));
    }

    /// Finding 17: only ENXIO means "no more data".
    #[test]
    fn review_finding_17_only_enxio_ends_the_data() {
        use SeekDataFailure::*;
        assert_eq!(seek_data_failure(Some(libc::ENXIO)), RestIsHole);
        for errno in [libc::EINVAL, libc::EOPNOTSUPP, libc::EIO, libc::EBADF] {
            assert_eq!(seek_data_failure(Some(errno)), ReadDensely, "{errno}");
        }
        assert_eq!(seek_data_failure(None), ReadDensely);
    }

    /// One read of `len + 1` bytes tells a whole file from one that holds
    /// more than its `fstat` said (grown, or a pseudo file that
    /// understates its size) and from one that shrank.
    #[test]
    fn a_small_file_is_read_whole_and_growth_beyond_its_size_is_seen() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        let read = |len| read_small(&mut File::open(&path).unwrap(), len).unwrap();
        assert_eq!(read(10), (b"0123456789".to_vec(), false));
        // More than announced: cut at the announced size, flagged.
        assert_eq!(read(4), (b"0123".to_vec(), true));
        // Less than announced: what is there, not flagged as growth.
        assert_eq!(read(20), (b"0123456789".to_vec(), false));
        assert!(read(0).1);
        std::fs::write(&path, b"").unwrap();
        assert_eq!(read(0), (Vec::new(), false));
    }
}
