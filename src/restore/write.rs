//! Writing file content: the writer threads' view of the target, the
//! in-place check of an extent, and the read of one pack's blobs into the
//! files that need them. Every write opens its file by name relative to its
//! parent directory's descriptor and checks that it is the inode the plan
//! created.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use super::dirfd::{self, Dirs};
use super::{Item, PackWork};
use crate::backend::FileKind;
use crate::error::{Error, IoContext, Result};
use crate::id::BlobId;
use crate::progress::Progress;
use crate::repo::{MasterIndex, Repository};

/// Where the writer threads put blobs: each file by its parent's
/// descriptor, its name, and the inode the plan created.
pub(super) struct Out<'a> {
    pub(super) dirs: &'a Dirs,
    pub(super) items: &'a [Item],
    pub(super) ids: &'a HashMap<usize, (u64, u64)>,
    /// Per item: the blob writes it still waits for. The thread that makes
    /// the last one applies the file's metadata through the descriptor it
    /// wrote with (one open per file instead of two, and on every writer
    /// thread instead of one); a file that needs no write (empty, all
    /// holes, or already in place) is left to the serial metadata pass.
    pub(super) pending: &'a [AtomicU32],
    /// Attributes the target refused, from the writer threads.
    pub(super) warnings: &'a Mutex<Vec<String>>,
    /// Bytes written.
    pub(super) written: &'a AtomicU64,
    /// Counters.
    pub(super) progress: &'a Progress,
}

impl Out<'_> {
    pub(super) fn id(&self, i: usize) -> Result<(u64, u64)> {
        self.ids.get(&i).copied().ok_or_else(|| {
            Error::Damaged(format!("{} was not planned", self.items[i].path.display()))
        })
    }

    /// Opens item `i`, which must be the inode `id` (its own, or a hard
    /// link's first file's).
    pub(super) fn open(&self, i: usize, id: (u64, u64), flags: libc::c_int) -> Result<File> {
        let item = &self.items[i];
        let parent = self.dirs.get(item.dir())?;
        dirfd::open_file_at(&parent, &item.name, flags, id, &item.path)
    }

    /// Applies the metadata of file `i`, whose last blob was just written
    /// through `f`.
    fn finish(&self, i: usize, f: &File) -> Result<()> {
        let mut warnings = Vec::new();
        super::meta::apply_fd(f, &self.items[i].node, &self.items[i].path, &mut warnings)?;
        if !warnings.is_empty() {
            if let Ok(mut w) = self.warnings.lock() {
                w.extend(warnings);
            }
        }
        Ok(())
    }
}

/// Whether the bytes at `offset` already hold the extent.
pub(super) fn extent_in_place(
    file: &File,
    offset: u64,
    length: u64,
    blob: Option<&BlobId>,
    key: &crate::crypto::MasterKey,
) -> Result<bool> {
    let mut hasher = blob.map(|_| key.blob_hasher());
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    while done < length {
        let n = ((length - done) as usize).min(buf.len());
        match file.read_exact_at(&mut buf[..n], offset + done) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(false),
            Err(e) => return Err(Error::io("checking a restored file", e)),
        }
        match hasher.as_mut() {
            Some(h) => {
                h.update(&buf[..n]);
            }
            None => {
                if buf[..n].iter().any(|&b| b != 0) {
                    return Ok(false);
                }
            }
        }
        done += n as u64;
    }
    Ok(match (hasher, blob) {
        (Some(h), Some(id)) => h.finalize().as_bytes() == &id.0,
        _ => true,
    })
}

pub(super) fn zero_range(file: &File, offset: u64, length: u64) -> std::io::Result<()> {
    let zeros = vec![0u8; (length as usize).min(1 << 20)];
    let mut done = 0;
    while done < length {
        let n = ((length - done) as usize).min(zeros.len());
        file.write_all_at(&zeros[..n], offset + done)?;
        done += n as u64;
    }
    Ok(())
}

/// Reads the needed blobs of one pack (coalescing close ranges) and writes them.
pub(super) fn restore_pack(
    repo: &Repository,
    index: &MasterIndex,
    pack_pos: u32,
    mut blobs: PackWork,
    out: &Out<'_>,
    scratch: &mut Vec<u8>,
) -> Result<()> {
    let pack = &index.packs()[pack_pos as usize];
    blobs.sort_by_key(|(e, _)| e.offset);
    let name = pack.id.to_hex();
    let mut i = 0;
    while i < blobs.len() {
        crate::util::check_interrupted()?;
        // Extend the read while the gap to the next needed blob is small.
        let start = blobs[i].0.offset as u64;
        let mut end = start + blobs[i].0.length as u64;
        let mut j = i + 1;
        while j < blobs.len()
            && (blobs[j].0.offset as u64) <= end + 256 * 1024
            && end - start < 32 << 20
        {
            end = blobs[j].0.offset as u64 + blobs[j].0.length as u64;
            j += 1;
        }
        repo.backend()
            .read_range_into(
                FileKind::Pack,
                &name,
                start,
                (end - start) as usize,
                scratch,
            )
            .map_err(|e| Error::Damaged(format!("pack {} unreadable: {e}", pack.id)))?;
        let bytes = &*scratch;
        for (entry, targets) in &blobs[i..j] {
            let from = (entry.offset as u64 - start) as usize;
            let sealed = bytes
                .get(from..from + entry.length as usize)
                .ok_or_else(|| Error::Damaged(format!("pack {} is short", pack.id)))?;
            let plain = crate::repo::pack::open_blob(repo.key(), &pack.salt, entry, sealed)?;
            for &(item, offset) in targets {
                let f = out.open(item, out.id(item)?, libc::O_WRONLY)?;
                let path = &out.items[item].path;
                f.write_all_at(&plain, offset)
                    .ctx(|| format!("writing {}", path.display()))?;
                out.written.fetch_add(plain.len() as u64, Ordering::Relaxed);
                Progress::add(&out.progress.bytes_done, plain.len() as u64);
                if out.pending[item].fetch_sub(1, Ordering::AcqRel) == 1 {
                    out.finish(item, &f)?;
                }
            }
        }
        i = j;
    }
    Ok(())
}
