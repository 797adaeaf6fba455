//! A snapshot's content read out: a file as a stream of bytes, a directory
//! as a tar or zip archive (`vouch dump`, the API's downloads).
//!
//! Memory is bounded by the data, never by the size of a file: a file is
//! read one blob at a time and holes come out as runs of zeros of at most
//! [`HOLE_RUN`] bytes per read. An archive that fails part way is never
//! finished: no end-of-archive marker makes a broken one look whole.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::format::{Extent, Node, NodeKind};
use crate::id::BlobId;
use crate::repo::{MasterIndex, Repository};

/// The most zeros one read of a hole produces.
pub const HOLE_RUN: usize = 1024 * 1024;

/// The content of a file, read lazily: one blob in memory at a time, holes
/// as bounded runs of zeros. A blob that cannot be read, or whose length is
/// not its extent's, is an error (never zeros in its place).
pub struct ContentReader {
    repo: Arc<Repository>,
    index: Arc<MasterIndex>,
    extents: std::vec::IntoIter<Extent>,
    blob: Vec<u8>,
    pos: usize,
    hole: u64,
}

impl ContentReader {
    /// A reader of `node` (a file); its extents must add up to its size.
    pub fn new(repo: Arc<Repository>, index: Arc<MasterIndex>, node: &Node) -> Result<Self> {
        let total = node
            .content
            .iter()
            .try_fold(0u64, |sum, e| sum.checked_add(e.length));
        if total != Some(node.size) {
            return Err(Error::Damaged(format!(
                "the extents of {:?} do not add up to its size {}",
                String::from_utf8_lossy(&node.name),
                node.size
            )));
        }
        Ok(ContentReader {
            repo,
            index,
            extents: node.content.clone().into_iter(),
            blob: Vec::new(),
            pos: 0,
            hole: 0,
        })
    }

    fn load(&mut self, id: &BlobId, length: u64) -> io::Result<()> {
        let data = self
            .repo
            .read_blob(&self.index, id)
            .map_err(|e| io::Error::other(format!("blob {id}: {e} ({})", e.hint())))?;
        if data.len() as u64 != length {
            return Err(io::Error::other(format!(
                "blob {id} has {} bytes, its extent {length}",
                data.len()
            )));
        }
        self.blob = data;
        self.pos = 0;
        Ok(())
    }
}

impl Read for ContentReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.pos < self.blob.len() {
                let n = buf.len().min(self.blob.len() - self.pos);
                buf[..n].copy_from_slice(&self.blob[self.pos..self.pos + n]);
                self.pos += n;
                return Ok(n);
            }
            if self.hole > 0 {
                let n = buf
                    .len()
                    .min(HOLE_RUN)
                    .min(usize::try_from(self.hole).unwrap_or(usize::MAX));
                buf[..n].fill(0);
                self.hole -= n as u64;
                return Ok(n);
            }
            // The last blob is dropped before the next is read.
            self.blob = Vec::new();
            self.pos = 0;
            match self.extents.next() {
                None => return Ok(0),
                Some(Extent {
                    blob: Some(id),
                    length,
                }) => self.load(&id, length)?,
                Some(Extent { blob: None, length }) => self.hole = length,
            }
        }
    }
}

/// The sink of an archive: refuses every write once the archive failed, so
/// the tar builder's end-of-archive blocks (written when it is dropped)
/// never make a broken archive look complete.
struct Guarded<'a> {
    out: &'a mut dyn Write,
    stopped: Rc<Cell<bool>>,
}

impl Write for Guarded<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.stopped.get() {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the archive failed",
            ));
        }
        self.out.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.stopped.get() {
            return Ok(());
        }
        self.out.flush()
    }
}

/// The kind of archive a directory is written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ArchiveFormat {
    /// POSIX tar (GNU long names, PAX records for extended attributes):
    /// every kind of entry, hard links, owners, attributes.
    Tar,
    /// Zip (deflate, ZIP64 for large files): files, directories and
    /// symlinks with their permissions and times; no owners or attributes.
    Zip,
}

/// What an archive holds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ArchiveSummary {
    /// Entries written.
    pub entries: u64,
    /// Bytes of file content written (before compression).
    pub bytes: u64,
    /// Entries the format cannot hold, each with why.
    pub skipped: Vec<String>,
}

/// Writes the entries of tree `tree` as an archive to `out`, their paths
/// under `prefix` (empty: relative to the tree). On an error the archive is
/// left unfinished.
pub fn write_archive(
    repo: &Arc<Repository>,
    index: &Arc<MasterIndex>,
    tree: &BlobId,
    prefix: &Path,
    format: ArchiveFormat,
    out: &mut dyn Write,
) -> Result<ArchiveSummary> {
    let stopped = Rc::new(Cell::new(false));
    let sink = Guarded {
        out,
        stopped: stopped.clone(),
    };
    let mut w = ArchiveWalk {
        repo,
        index,
        summary: ArchiveSummary::default(),
        links: HashMap::new(),
    };
    let written = match format {
        ArchiveFormat::Tar => {
            let mut tar = tar::Builder::new(sink);
            let done = w.tar_tree(tree, prefix, &mut tar).and_then(|()| {
                tar.finish()
                    .map_err(|e| Error::io("writing a tar archive", e))
            });
            if done.is_err() {
                stopped.set(true);
            }
            drop(tar);
            done
        }
        ArchiveFormat::Zip => {
            let mut zip = zip::ZipWriter::new_stream(sink);
            let done = w.zip_tree(tree, prefix, &mut zip).and_then(|()| {
                zip.finish()
                    .map(drop)
                    .map_err(|e| Error::io("writing a zip archive", io::Error::other(e)))
            });
            if done.is_err() {
                stopped.set(true);
            }
            done
        }
    };
    written.map(|()| w.summary)
}

/// One archive being written: the summary so far and, for tar, where each
/// hard-linked inode was first written.
struct ArchiveWalk<'r> {
    repo: &'r Arc<Repository>,
    index: &'r Arc<MasterIndex>,
    summary: ArchiveSummary,
    links: HashMap<(u64, u64), PathBuf>,
}

/// Seconds since the epoch as an archive stores them (0 before 1970).
fn unix_seconds(node: &Node) -> u64 {
    u64::try_from(node.mtime_ns.div_euclid(1_000_000_000)).unwrap_or(0)
}

impl ArchiveWalk<'_> {
    /// Writes the entries of tree `id` under `prefix` (depth first, a
    /// directory before its entries).
    fn tar_tree<W: Write>(
        &mut self,
        id: &BlobId,
        prefix: &Path,
        tar: &mut tar::Builder<W>,
    ) -> Result<()> {
        let tree = crate::tree::load(self.repo, self.index, id)?;
        let io_err = |e: io::Error| Error::io("writing a tar archive", e);
        for node in &tree.nodes {
            crate::util::check_interrupted()?;
            let path = prefix.join(OsStr::from_bytes(&node.name));
            let mut h = tar::Header::new_gnu();
            h.set_mode(node.mode & 0o7777);
            h.set_uid(u64::from(node.uid));
            h.set_gid(u64::from(node.gid));
            h.set_mtime(unix_seconds(node));
            if let Some(u) = &node.user {
                let _ = h.set_username(u);
            }
            if let Some(g) = &node.group {
                let _ = h.set_groupname(g);
            }
            h.set_size(0);
            self.tar_xattrs(node, &path, tar)?;
            match node.kind {
                NodeKind::Dir => {
                    h.set_entry_type(tar::EntryType::Directory);
                    tar.append_data(&mut h, &path, io::empty())
                        .map_err(io_err)?;
                    if let Some(sub) = &node.subtree {
                        self.summary.entries += 1;
                        self.tar_tree(sub, &path, tar)?;
                        continue;
                    }
                }
                NodeKind::File => {
                    let key = (node.device, node.inode);
                    if node.links > 1 {
                        if let Some(first) = self.links.get(&key) {
                            h.set_entry_type(tar::EntryType::Link);
                            tar.append_link(&mut h, &path, first).map_err(io_err)?;
                            self.summary.entries += 1;
                            continue;
                        }
                        self.links.insert(key, path.clone());
                    }
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(node.size);
                    let reader = ContentReader::new(self.repo.clone(), self.index.clone(), node)?;
                    tar.append_data(&mut h, &path, reader).map_err(io_err)?;
                    self.summary.bytes += node.size;
                }
                NodeKind::Symlink => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    let target = node.target.as_deref().unwrap_or_default();
                    tar.append_link(&mut h, &path, OsStr::from_bytes(target))
                        .map_err(io_err)?;
                }
                NodeKind::Fifo | NodeKind::CharDevice | NodeKind::BlockDevice => {
                    h.set_entry_type(match node.kind {
                        NodeKind::Fifo => tar::EntryType::Fifo,
                        NodeKind::CharDevice => tar::EntryType::Char,
                        _ => tar::EntryType::Block,
                    });
                    let number = |n: u64| {
                        u32::try_from(n).map_err(|_| {
                            Error::Damaged(format!(
                                "{}: device number {n} is out of range",
                                path.display()
                            ))
                        })
                    };
                    h.set_device_major(number(crate::util::dev_major(node.rdev))?)
                        .map_err(io_err)?;
                    h.set_device_minor(number(crate::util::dev_minor(node.rdev))?)
                        .map_err(io_err)?;
                    tar.append_data(&mut h, &path, io::empty())
                        .map_err(io_err)?;
                }
                NodeKind::Socket => {
                    self.summary
                        .skipped
                        .push(format!("{}: a socket (tar holds none)", path.display()));
                    continue;
                }
            }
            self.summary.entries += 1;
        }
        Ok(())
    }

    /// The node's extended attributes as PAX `SCHILY.xattr.` records (as GNU
    /// tar's --xattrs reads them), in the header before the entry.
    fn tar_xattrs<W: Write>(
        &mut self,
        node: &Node,
        path: &Path,
        tar: &mut tar::Builder<W>,
    ) -> Result<()> {
        if node.xattrs.is_empty() {
            return Ok(());
        }
        let mut records: Vec<(String, &[u8])> = Vec::new();
        for x in &node.xattrs {
            match std::str::from_utf8(&x.name) {
                Ok(name) if !name.contains('=') => {
                    records.push((format!("SCHILY.xattr.{name}"), &x.value));
                }
                _ => self.summary.skipped.push(format!(
                    "{}: attribute {:?} (its name cannot be a PAX record)",
                    path.display(),
                    String::from_utf8_lossy(&x.name)
                )),
            }
        }
        tar.append_pax_extensions(records.iter().map(|(k, v)| (k.as_str(), *v)))
            .map_err(|e| Error::io("writing a tar archive", e))
    }

    /// Writes the entries of tree `id` under `prefix` as zip entries.
    fn zip_tree<W: Write>(
        &mut self,
        id: &BlobId,
        prefix: &Path,
        zip: &mut zip::ZipWriter<zip::write::StreamWriter<W>>,
    ) -> Result<()> {
        use zip::write::SimpleFileOptions;
        let tree = crate::tree::load(self.repo, self.index, id)?;
        let zip_err =
            |e: zip::result::ZipError| Error::io("writing a zip archive", io::Error::other(e));
        for node in &tree.nodes {
            crate::util::check_interrupted()?;
            let path = prefix.join(OsStr::from_bytes(&node.name));
            let Some(name) = path.to_str().map(str::to_owned) else {
                self.summary.skipped.push(format!(
                    "{}: a name that is not UTF-8 (zip names are)",
                    path.display()
                ));
                continue;
            };
            let mut options = SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Deflated)
                .unix_permissions(node.mode & 0o777);
            if let Some(t) = zip_time(node.mtime_ns) {
                options = options.last_modified_time(t);
            }
            match node.kind {
                NodeKind::Dir => {
                    zip.add_directory(format!("{name}/"), options)
                        .map_err(zip_err)?;
                    self.summary.entries += 1;
                    if let Some(sub) = &node.subtree {
                        self.zip_tree(sub, &path, zip)?;
                    }
                }
                NodeKind::File => {
                    // ZIP64 when the size needs it; small files keep the
                    // plain headers every reader knows.
                    let options = options.large_file(node.size >= u64::from(u32::MAX) / 2);
                    zip.start_file(name, options).map_err(zip_err)?;
                    let mut reader =
                        ContentReader::new(self.repo.clone(), self.index.clone(), node)?;
                    io::copy(&mut reader, zip)
                        .map_err(|e| Error::io("writing a zip archive", e))?;
                    self.summary.entries += 1;
                    self.summary.bytes += node.size;
                }
                NodeKind::Symlink => {
                    let target =
                        String::from_utf8_lossy(node.target.as_deref().unwrap_or_default())
                            .into_owned();
                    zip.add_symlink(name, target, options).map_err(zip_err)?;
                    self.summary.entries += 1;
                }
                _ => self.summary.skipped.push(format!(
                    "{}: a {} (zip holds files, directories and symlinks)",
                    path.display(),
                    format!("{:?}", node.kind).to_lowercase()
                )),
            }
        }
        Ok(())
    }
}

/// A zip time (DOS date and time, 1980 to 2107, two-second steps) of a
/// time in ns since the epoch, in UTC; `None` outside that range.
fn zip_time(ns: i64) -> Option<zip::DateTime> {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns)).ok()?;
    zip::DateTime::from_date_and_time(
        u16::try_from(t.year()).ok()?,
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
    )
    .ok()
}
