//! A VMA archive into a directory a snapshot can hold: each configuration
//! file as it is (`qemu-server.conf`), each disk as a sparse image
//! `<device>.raw` of its exact size (zero blocks are holes), read in one
//! pass whatever order the clusters come in. Every cluster of every disk
//! must be in the archive exactly once; anything else is an error, and what
//! was written is left for the caller to remove.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::vma::{Header, VmaError, VmaReader, BLOCK_SIZE, CLUSTER_SIZE};
use crate::error::{Error, Result};

/// What an extraction wrote.
#[derive(Clone, Debug)]
pub struct Extracted {
    /// The archive's header.
    pub header: Header,
    /// The files written, configuration first, then one image per disk.
    pub files: Vec<PathBuf>,
    /// Bytes of disk data stored in the archive (non-zero blocks).
    pub data_bytes: u64,
}

fn vma_error(what: &Path, e: VmaError) -> Error {
    match e {
        VmaError::Io(e) => Error::io(what.display().to_string(), e),
        other => Error::InvalidArgument(format!("{}: {other}", what.display())),
    }
}

/// A bit per cluster of one disk: which clusters were seen.
struct Seen {
    bits: Vec<u64>,
    count: u64,
}

impl Seen {
    fn new(clusters: u64) -> Seen {
        Seen {
            bits: vec![0; clusters.div_ceil(64) as usize],
            count: 0,
        }
    }

    /// Marks cluster `n`; false if it was seen before.
    fn mark(&mut self, n: u32) -> bool {
        let (word, bit) = ((n / 64) as usize, n % 64);
        let seen = self.bits[word] & (1 << bit) != 0;
        self.bits[word] |= 1 << bit;
        self.count += u64::from(!seen);
        !seen
    }

    fn first_missing(&self, clusters: u64) -> Option<u64> {
        (0..clusters).find(|&n| self.bits[(n / 64) as usize] & (1 << (n % 64)) == 0)
    }
}

/// A name the archive gives that may become a file name in `dir`.
fn safe_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\0')
}

/// Extracts the VMA archive read from `input` (`source` names it in
/// errors) into `dir`, which must exist and be empty.
pub fn extract_vma(input: impl Read, source: &Path, dir: &Path) -> Result<Extracted> {
    let mut reader = VmaReader::new(input).map_err(|e| vma_error(source, e))?;
    let header = reader.header().clone();
    let mut files = Vec::new();
    for (name, data) in &header.configs {
        if !safe_name(name) {
            return Err(Error::InvalidArgument(format!(
                "{}: configuration file name {name:?} is not a plain file name",
                source.display()
            )));
        }
        let path = dir.join(name);
        std::fs::write(&path, data).map_err(|e| Error::io(path.display().to_string(), e))?;
        files.push(path);
    }
    let mut images: Vec<(u8, File, u64, Seen)> = Vec::new();
    for d in &header.devices {
        let path = dir.join(format!("{}.raw", d.name));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(path.display().to_string(), e))?;
        // The exact size, all holes: what no block fills stays zero.
        file.set_len(d.size)
            .map_err(|e| Error::io(path.display().to_string(), e))?;
        images.push((d.id, file, d.size, Seen::new(d.clusters())));
        files.push(path);
    }
    let mut data_bytes = 0u64;
    loop {
        let more = reader
            .next_extent(|c| {
                let Some((_, file, size, seen)) =
                    images.iter_mut().find(|(id, ..)| *id == c.device)
                else {
                    return Err(VmaError::Invalid(format!("device {} unknown", c.device)));
                };
                if !seen.mark(c.number) {
                    return Err(VmaError::Invalid(format!(
                        "cluster {} of device {} is in the archive twice",
                        c.number, c.device
                    )));
                }
                let base = u64::from(c.number) * CLUSTER_SIZE as u64;
                // Runs of stored blocks (contiguous in the extent's data),
                // each written with one call; what lies beyond the disk's
                // end (the padding of its last cluster) is not.
                let (mut i, mut at) = (0usize, 0usize);
                while i < 16 {
                    if c.mask & (1 << i) == 0 {
                        i += 1;
                        continue;
                    }
                    let (first, from) = (i, at);
                    while i < 16 && c.mask & (1 << i) != 0 {
                        i += 1;
                        at += BLOCK_SIZE;
                    }
                    let offset = base + (first * BLOCK_SIZE) as u64;
                    let end = (offset + (at - from) as u64).min(*size);
                    if end > offset {
                        file.write_all_at(&c.data[from..from + (end - offset) as usize], offset)?;
                    }
                }
                data_bytes += at as u64;
                Ok(())
            })
            .map_err(|e| vma_error(source, e))?;
        if !more {
            break;
        }
    }
    for (id, file, _, seen) in &images {
        let d = header
            .devices
            .iter()
            .find(|d| d.id == *id)
            .ok_or_else(|| Error::Internal("a device vanished".into()))?;
        if let Some(n) = seen.first_missing(d.clusters()) {
            return Err(Error::InvalidArgument(format!(
                "{}: the archive is incomplete: cluster {n} of {} ({} of {} clusters present) is missing",
                source.display(),
                d.name,
                seen.count,
                d.clusters()
            )));
        }
        file.sync_all()
            .map_err(|e| Error::io(format!("{}.raw", d.name), e))?;
    }
    Ok(Extracted {
        header,
        files,
        data_bytes,
    })
}
