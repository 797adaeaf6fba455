//! The storing end of the pipeline: compressor/encryptor workers, each
//! filling its own pack, and one writer that puts finished packs into the
//! repository. Channels are bounded: this is the backpressure.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender};

use super::Abort;
use crate::backend::{FileKind, WriteSync};
use crate::crypto::MasterKey;
use crate::format::{BlobType, Compression, IndexPack};
use crate::id::BlobId;
use crate::progress::Progress;
use crate::repo::pack::{FinishedPack, PackBuilder};
use crate::repo::{MasterIndex, Repository};

/// Size of the sample tried at zstd level 1 to detect incompressible data.
const SAMPLE_LEN: usize = 32 * 1024;
/// A sample that shrinks less than this (compressed/raw) is not compressed.
const INCOMPRESSIBLE_RATIO: f64 = 0.97;
/// Pack uploads in flight at once to a remote repository (S3, served).
const REMOTE_PACK_WRITERS: usize = 3;

/// A blob to store.
pub struct BlobJob {
    /// How it is named.
    pub naming: Naming,
    /// Data or tree.
    pub kind: BlobType,
    /// Plaintext.
    pub data: Vec<u8>,
}

/// Who names a blob.
pub enum Naming {
    /// The producer hashed it and claimed it: store it.
    Known(BlobId),
    /// The worker hashes it (so that hashing a large file runs on every
    /// core), sends the id back, and stores it only if it claims it.
    Unnamed {
        /// Which blobs are new.
        dedup: Arc<Dedup>,
        /// Where the id goes.
        reply: Sender<BlobId>,
    },
}

/// Decides which blobs a session must store: those neither in the index nor
/// already claimed by this session.
pub struct Dedup {
    index: Arc<MasterIndex>,
    claimed: Mutex<HashSet<BlobId>>,
}

impl Dedup {
    /// A deduplicator over `index`.
    pub fn new(index: Arc<MasterIndex>) -> Self {
        Self {
            index,
            claimed: Mutex::new(HashSet::new()),
        }
    }

    /// True if the caller must store the blob (and now owns that duty).
    pub fn claim(&self, id: &BlobId) -> bool {
        if self.index.contains(id) {
            return false;
        }
        match self.claimed.lock() {
            Ok(mut set) => set.insert(*id),
            // A poisoned set: store again rather than lose data.
            Err(_) => true,
        }
    }
}

/// Reusable zstd state of one worker.
pub struct Compressor {
    level: i32,
    fast: Option<zstd::bulk::Compressor<'static>>,
    full: Option<zstd::bulk::Compressor<'static>>,
    out: Vec<u8>,
}

impl Compressor {
    /// A compressor at `level` (0 = never compress).
    pub fn new(level: i32) -> Self {
        let make = |l| {
            if level > 0 {
                zstd::bulk::Compressor::new(l).ok()
            } else {
                None
            }
        };
        Self {
            level,
            fast: make(1),
            full: make(level),
            out: Vec::new(),
        }
    }

    /// Compresses when worth it: returns the method and the bytes to store.
    pub fn compress<'a>(&'a mut self, data: &'a [u8]) -> (Compression, &'a [u8]) {
        if self.level <= 0 || data.len() < 64 {
            return (Compression::None, data);
        }
        if data.len() > 2 * SAMPLE_LEN {
            if let Some(fast) = self.fast.as_mut() {
                let sample = &data[..SAMPLE_LEN];
                self.out
                    .resize(zstd::zstd_safe::compress_bound(SAMPLE_LEN), 0);
                match fast.compress_to_buffer(sample, &mut self.out) {
                    Ok(n) if (n as f64) < SAMPLE_LEN as f64 * INCOMPRESSIBLE_RATIO => {}
                    _ => return (Compression::None, data),
                }
            }
        }
        let Some(full) = self.full.as_mut() else {
            return (Compression::None, data);
        };
        self.out.clear();
        self.out
            .reserve(zstd::zstd_safe::compress_bound(data.len()));
        match full.compress_to_buffer(data, &mut self.out) {
            Ok(n) if n < data.len() => (Compression::Zstd, &self.out[..n]),
            _ => (Compression::None, data),
        }
    }
}

/// The running storing stage.
pub struct Saver {
    /// Where producers send blobs.
    pub tx: Sender<BlobJob>,
    workers: Vec<JoinHandle<()>>,
    writer: Vec<JoinHandle<Vec<IndexPack>>>,
}

impl Saver {
    /// Starts `threads` workers and the pack writer; with `dry_run` the
    /// packs are made and counted, never written.
    pub fn start(
        repo: &Repository,
        threads: usize,
        sync: WriteSync,
        progress: Arc<Progress>,
        abort: Arc<Abort>,
        session: Option<Arc<super::session::Session>>,
        dry_run: bool,
    ) -> Self {
        let (tx, rx) = bounded::<BlobJob>(threads * 2);
        // A remote store answers each upload after a round trip: several
        // uploads in flight keep the savers busy meanwhile. A local
        // directory gains nothing from more than one writer.
        let writers = if repo.backend().traffic().is_some() {
            REMOTE_PACK_WRITERS
        } else {
            1
        };
        let (pack_tx, pack_rx) = bounded::<FinishedPack>(writers);
        let pack_size = repo.config().pack_size as usize;
        let level = repo.config().compression_level;
        let workers = (0..threads.max(1))
            .map(|i| {
                let rx = rx.clone();
                let pack_tx = pack_tx.clone();
                let key = repo.key().clone();
                let progress = progress.clone();
                let abort = abort.clone();
                std::thread::Builder::new()
                    .name(format!("saver-{i}"))
                    .spawn(move || {
                        if let Err(e) = save_worker(rx, pack_tx, key, pack_size, level, progress) {
                            abort.set(e);
                        }
                    })
                    .expect("spawning a saver thread")
            })
            .collect();
        let writer = (0..writers)
            .map(|i| {
        let backend = repo.backend().clone();
        let cache = repo.cache().cloned();
        let (pack_rx, abort, progress, session) =
            (pack_rx.clone(), abort.clone(), progress.clone(), session.clone());
        std::thread::Builder::new()
            .name(format!("pack-writer-{i}"))
            .spawn(move || {
                let mut written = Vec::new();
                for pack in pack_rx {
                    if abort.is_set() {
                        continue;
                    }
                    if dry_run {
                        Progress::add(&progress.bytes_stored, pack.bytes.len() as u64);
                        written.push(pack.index);
                        continue;
                    }
                    crate::failpoint::hit("writer", backend.location().as_bytes());
                    // The trees go to the cache first: the write takes the
                    // pack's buffer (a remote backend sends it as it is).
                    // Trees of a pack whose write fails are never looked up
                    // (no index names the pack) and go at the next load.
                    if let Some(c) = &cache {
                        cache_trees(c, &pack);
                    }
                    let FinishedPack { id, bytes, index } = pack;
                    let stored = bytes.len() as u64;
                    match backend.write_owned(FileKind::Pack, &id.to_hex(), bytes, sync) {
                        Ok(()) => {
                            Progress::add(&progress.bytes_stored, stored);
                            if let Some(s) = &session {
                                if let Err(e) = s.record(&index) {
                                    tracing::warn!("the session journal could not be written ({e}); an interrupted backup will send this pack again");
                                }
                            }
                            written.push(index);
                        }
                        Err(e) => abort.set(e),
                    }
                }
                written
            })
            .expect("spawning a pack writer")
            })
            .collect();
        Self {
            tx,
            workers,
            writer,
        }
    }

    /// Flushes every partial pack and returns the records of all packs
    /// written; an error if a worker or the writer panicked (blobs it had
    /// claimed may be missing, so nothing may be committed).
    pub fn finish(self) -> crate::error::Result<Vec<IndexPack>> {
        drop(self.tx);
        let mut panicked = None;
        for w in self.workers {
            if let Err(p) = w.join() {
                panicked.get_or_insert_with(|| super::thread_panicked("saver", p.as_ref()));
            }
        }
        let mut written = Vec::new();
        for w in self.writer {
            match w.join() {
                Ok(packs) => written.extend(packs),
                Err(p) => {
                    panicked
                        .get_or_insert_with(|| super::thread_panicked("pack writer", p.as_ref()));
                }
            }
        }
        match panicked {
            Some(e) => Err(e),
            None => Ok(written),
        }
    }
}

/// Keeps the trees of a written pack in the local cache, so the next
/// backup reads its parent's trees without fetching them.
fn cache_trees(cache: &crate::repo::cache::Cache, pack: &FinishedPack) {
    let trees = pack
        .index
        .blobs
        .iter()
        .filter(|b| b.kind == BlobType::Tree)
        .filter_map(|b| {
            let (start, end) = (b.offset as usize, b.offset as usize + b.length as usize);
            Some((u64::from(b.offset), pack.bytes.get(start..end)?))
        });
    cache.put_trees(&pack.id, trees);
}

fn save_worker(
    rx: Receiver<BlobJob>,
    pack_tx: Sender<FinishedPack>,
    key: Arc<MasterKey>,
    pack_size: usize,
    level: i32,
    progress: Arc<Progress>,
) -> crate::error::Result<()> {
    let mut compressor = Compressor::new(level);
    let mut pack: Option<PackBuilder> = None;
    let new_pack = || PackBuilder::new(&key, pack_size + pack_size / 8);
    for job in rx {
        crate::failpoint::hit("saver", &job.data);
        let id = match job.naming {
            Naming::Known(id) => id,
            Naming::Unnamed { dedup, reply } => {
                let id = key.blob_id(&job.data);
                let _ = reply.send(id);
                if !dedup.claim(&id) {
                    continue;
                }
                id
            }
        };
        let (compression, stored) = compressor.compress(&job.data);
        // A blob that would overflow the format's u32 pack offsets (a huge
        // tree) starts a pack of its own; one that does not fit an empty
        // pack fails the backup (try_add says why).
        if let Some(full) = pack.take_if(|b| !b.is_empty() && !b.fits(stored.len())) {
            if pack_tx.send(full.finish()).is_err() {
                return Ok(());
            }
        }
        let builder = pack.get_or_insert_with(new_pack);
        builder.try_add(id, job.kind, job.data.len(), compression, stored)?;
        Progress::add(&progress.bytes_added, job.data.len() as u64);
        if builder.len() >= pack_size {
            if let Some(full) = pack.take() {
                if pack_tx.send(full.finish()).is_err() {
                    return Ok(());
                }
            }
        }
    }
    if let Some(p) = pack.take().filter(|p| !p.is_empty()) {
        let _ = pack_tx.send(p.finish());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_data_is_stored_raw_and_text_compressed() {
        let mut c = Compressor::new(3);
        let mut random = vec![0u8; 200_000];
        getrandom::fill(&mut random).unwrap();
        assert_eq!(c.compress(&random).0, Compression::None);
        let text = b"the quick brown fox jumps over the lazy dog ".repeat(5000);
        let (m, out) = c.compress(&text);
        assert_eq!(m, Compression::Zstd);
        let n = out.len();
        assert!(n < text.len() / 10);
        assert_eq!(
            zstd::bulk::decompress(c.compress(&text).1, text.len()).unwrap(),
            text
        );
        assert_eq!(Compressor::new(0).compress(&text).0, Compression::None);
    }
}
