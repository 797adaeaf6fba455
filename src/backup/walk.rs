//! The walker: visits the sources in a fixed order (names sorted by bytes),
//! decides for each file whether the parent snapshot already has it, hands
//! the others to the readers, and tells the assembler, in walk order, what
//! each directory holds.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::Metadata;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crossbeam_channel::{bounded, Receiver, Sender};

use super::assemble::Warnings;
use super::exclude::Excludes;
use super::read::{FileJob, FileResult};
use super::Abort;
use crate::error::{Error, Result};
use crate::format::{ExactTime, Node, NodeKind, Tree};
use crate::progress::Progress;
use crate::repo::{MasterIndex, Repository};
use crate::util::users;

/// Reads directories and stats their entries on a few threads ahead of the
/// walker, so that on a cold cache the disk sees several metadata reads at
/// once; the walker's own `lstat`s then hit the cache. Hints are dropped
/// when the queue is full: prefetching is an optimisation, never a duty.
pub struct Prefetcher {
    tx: Option<Sender<(PathBuf, Option<u64>)>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Prefetcher {
    /// Starts `threads` prefetching threads (0: none).
    pub fn start(threads: usize) -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        if threads == 0 {
            return Self {
                tx: None,
                stop,
                threads: Vec::new(),
            };
        }
        let (tx, rx) = bounded::<(PathBuf, Option<u64>)>(4096);
        let threads = (0..threads)
            .filter_map(|i| {
                let rx = rx.clone();
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name(format!("prefetch-{i}"))
                    .spawn(move || {
                        let stopped = || stop.load(std::sync::atomic::Ordering::Relaxed);
                        for (dir, same_fs) in rx {
                            if stopped() {
                                return;
                            }
                            // Never wander onto another file system the walk will not enter.
                            let dev = std::fs::symlink_metadata(&dir).map(|m| m.dev());
                            if same_fs.is_some_and(|want| dev.as_ref().ok() != Some(&want)) {
                                continue;
                            }
                            let Ok(entries) = std::fs::read_dir(&dir) else {
                                continue;
                            };
                            for e in entries.flatten() {
                                if stopped() {
                                    return;
                                }
                                // Relative to the listed directory: the
                                // kernel looks up one name, not the path.
                                let _ = e.metadata();
                            }
                        }
                    })
                    .ok()
            })
            .collect();
        Self {
            tx: Some(tx),
            stop,
            threads,
        }
    }

    /// Suggests a directory the walker will soon enter; with `same_fs`, only
    /// if it is on that device.
    pub fn hint(&self, dir: PathBuf, same_fs: Option<u64>) {
        if let Some(tx) = &self.tx {
            let _ = tx.try_send((dir, same_fs));
        }
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        // The walk is over: what is still queued is of no use.
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.tx = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Entries per message to the assembler.
pub const BATCH: usize = 256;

/// What the walker tells the assembler.
pub enum WalkItem {
    /// A directory's entries follow.
    DirStart,
    /// An entry of the current directory; files being read come with the
    /// receiver of their result.
    Entry(Box<Node>, Option<Receiver<FileResult>>),
    /// The current directory is complete; here is its own metadata.
    DirEnd(Box<Node>),
}

/// The sources as a tree of path components: inner nodes are the parents of
/// the sources (recorded with their metadata, but only the listed children),
/// leaves are walked completely.
#[derive(Default, Debug)]
pub struct SourceTrie {
    leaf: bool,
    children: BTreeMap<OsString, SourceTrie>,
}

impl SourceTrie {
    /// Builds the trie of absolute paths.
    pub fn new(paths: &[PathBuf]) -> Self {
        let mut root = SourceTrie::default();
        for p in paths {
            let mut node = &mut root;
            for c in p.components().skip(1) {
                node = node.children.entry(c.as_os_str().to_owned()).or_default();
            }
            node.leaf = true;
        }
        root
    }
}

/// The walking thread's state.
pub struct Walker {
    /// Sources read from a frozen copy: `(source, where it is read)`.
    pub read_from: Vec<(PathBuf, PathBuf)>,
    /// For loading the parent's trees.
    pub repo: Repository,
    /// The index the parent's blobs must be in.
    pub index: Arc<MasterIndex>,
    /// Exclusion rules.
    pub excludes: Excludes,
    /// Stay on each source's file system.
    pub one_file_system: bool,
    /// Read each entry's extended attributes.
    pub read_xattrs: bool,
    /// Per device crossed into: the pseudo file system it is, if any (its
    /// contents are skipped, see `pseudo_fs.rs`).
    pub pseudo_fs: HashMap<u64, Option<&'static str>>,
    /// To the assembler.
    pub items: Sender<Vec<WalkItem>>,
    /// Warms the inode cache ahead of the walk.
    pub prefetch: Prefetcher,
    /// Items not sent yet: they travel in batches, one channel operation per
    /// [`BATCH`] entries instead of one per entry.
    pub batch: Vec<WalkItem>,
    /// To the readers.
    pub jobs: Sender<FileJob>,
    /// Abort flag.
    pub abort: Arc<Abort>,
    /// Counters.
    pub progress: Arc<Progress>,
    /// Warnings for the manifest.
    pub warnings: Arc<Warnings>,
    /// Name caches.
    pub users: HashMap<u32, Option<String>>,
    /// Name caches.
    pub groups: HashMap<u32, Option<String>>,
    /// A parent node is reused only for a file whose mtime and ctime are
    /// both older than this (see [`racy_cutoff_ns`]); `i64::MIN` without a
    /// parent.
    pub reuse_before_ns: i64,
    /// Told of each regular file: new, modified or unchanged (`-vv`).
    pub file_status: Option<super::FileStatusSink>,
}

/// The largest timestamp granularity change detection allows for: 2 s (FAT's
/// mtime; 1 s on ext4 with 128-byte inodes, ext3, HFS+; a jiffy on ext4,
/// xfs and tmpfs without multigrain timestamps).
pub const RACY_MARGIN_NS: i64 = 2_000_000_000;

/// The time before which a file's stat must lie for its parent node to be
/// trusted: the parent backup's start minus [`RACY_MARGIN_NS`].
///
/// Why (git's "racily clean" rule, adapted): the parent recorded a file's
/// `(size, mtime, ctime, inode)` at its `lstat`, at or after the parent's
/// start `T` (`Manifest::time_ns` is taken before the walk), and read the
/// content after that. A write that lands after the read but within the
/// same timestamp tick as the recorded stat leaves all four fields equal,
/// so comparing them cannot see it, in this backup or any later one. Such a
/// write happens at a time `W > T`, and the kernel stamps it with `W`
/// truncated to the tick, which is greater than `W - g` for a granularity
/// `g`: so the stamp it shares with the recorded stat is greater than
/// `T - g`. Conversely a recorded stamp `<= T - g` lies in a tick that ended
/// by `T`, before anything was read, and no later write can carry it. Hence:
/// a file whose recorded mtime or ctime is not strictly older than
/// `T - RACY_MARGIN_NS` is read again (its content deduplicates, so this
/// costs reading, not storage); older files are still skipped. A node the
/// parent itself reused passed the same test against an older `T`, so it
/// passes against the parent's `T` too. ctime alone would do on local file
/// systems (every write or `utimensat` sets it to the current time); mtime
/// is checked too for file systems that report a made-up ctime. The rule
/// assumes the file system's clock and this host's agree within the margin
/// (a network file system with a skewed server clock, or a wall clock stepped
/// back between the parent's start and a write, defeats it); a file stamped
/// in the future is read every time.
pub fn racy_cutoff_ns(parent_time_ns: i64) -> i64 {
    parent_time_ns.saturating_sub(RACY_MARGIN_NS)
}

fn find<'a>(tree: Option<&'a Tree>, name: &[u8]) -> Option<&'a Node> {
    let tree = tree?;
    tree.nodes
        .binary_search_by(|n| n.name.as_slice().cmp(name))
        .ok()
        .map(|i| &tree.nodes[i])
}

fn kind_of(meta: &Metadata) -> NodeKind {
    let t = meta.file_type();
    if t.is_dir() {
        NodeKind::Dir
    } else if t.is_symlink() {
        NodeKind::Symlink
    } else if t.is_fifo() {
        NodeKind::Fifo
    } else if t.is_char_device() {
        NodeKind::CharDevice
    } else if t.is_block_device() {
        NodeKind::BlockDevice
    } else if t.is_socket() {
        NodeKind::Socket
    } else {
        NodeKind::File
    }
}

impl Walker {
    fn send(&mut self, item: WalkItem) -> Result<()> {
        self.batch.push(item);
        if self.batch.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        self.items
            .send(batch)
            .map_err(|_| self.abort.error_or_interrupted())
    }

    fn warn(&self, msg: String) {
        self.warnings.push(msg);
    }

    fn node(&mut self, name: &[u8], meta: &Metadata) -> Node {
        let uid = meta.uid();
        let gid = meta.gid();
        let user = self
            .users
            .entry(uid)
            .or_insert_with(|| users::user_name(uid))
            .clone();
        let group = self
            .groups
            .entry(gid)
            .or_insert_with(|| users::group_name(gid))
            .clone();
        let kind = kind_of(meta);
        // Times that i64 ns cannot hold are kept exactly beside the
        // nearest value it can (finding 15).
        let (mtime_ns, mtime_exact) = ExactTime::from_stat(meta.mtime(), meta.mtime_nsec());
        let (ctime_ns, ctime_exact) = ExactTime::from_stat(meta.ctime(), meta.ctime_nsec());
        Node {
            name: name.to_vec(),
            kind,
            mode: meta.mode(),
            uid,
            gid,
            user,
            group,
            mtime_ns,
            ctime_ns,
            size: if kind == NodeKind::File {
                meta.len()
            } else {
                0
            },
            inode: meta.ino(),
            device: meta.dev(),
            links: meta.nlink(),
            rdev: meta.rdev(),
            target: None,
            content: Vec::new(),
            subtree: None,
            mtime_exact,
            ctime_exact,
            xattrs: Vec::new(),
        }
    }

    /// Fills `node.xattrs`: the parent's when the entry's status did not
    /// change since (every change of an attribute changes the ctime, and
    /// the racily-clean rule of [`racy_cutoff_ns`] applies as to
    /// contents), else read from `path`.
    fn attach_xattrs(&mut self, path: &Path, node: &mut Node, pnode: Option<&Node>) {
        if !self.read_xattrs {
            return;
        }
        let unchanged = pnode.filter(|p| {
            node.ctime_ns < self.reuse_before_ns
                && p.kind == node.kind
                && p.inode == node.inode
                && p.ctime() == node.ctime()
        });
        if let Some(p) = unchanged {
            node.xattrs = p.xattrs.clone();
            return;
        }
        let (attrs, warnings) = crate::xattrs::read(path);
        node.xattrs = attrs;
        for w in warnings {
            self.warn(w);
        }
    }

    /// The path a read path stands for: itself, or below a source read
    /// from a frozen copy, the source's (exclusions are written for it).
    fn source_path<'a>(&self, path: &'a Path) -> std::borrow::Cow<'a, Path> {
        for (source, at) in &self.read_from {
            if let Ok(rest) = path.strip_prefix(at) {
                return std::borrow::Cow::Owned(if rest.as_os_str().is_empty() {
                    source.clone()
                } else {
                    source.join(rest)
                });
            }
        }
        std::borrow::Cow::Borrowed(path)
    }

    fn parent_subtree(&self, parent: Option<&Node>) -> Option<Tree> {
        let id = parent?.subtree?;
        match self.repo.load_tree(&self.index, &id) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!("parent tree {id} unreadable, reading the directory in full: {e}");
                None
            }
        }
    }

    /// Walks all sources.
    pub fn run(mut self, trie: &SourceTrie, parent_root: Option<Tree>) -> Result<()> {
        if trie.leaf {
            // `/` itself is a source: its contents are the root tree, read
            // from where `read_from` says if it says (a staged guest, a
            // frozen copy of the root file system).
            let at = self
                .read_from
                .iter()
                .find(|(s, _)| s == Path::new("/"))
                .map_or_else(|| PathBuf::from("/"), |(_, at)| at.clone());
            let root =
                std::fs::symlink_metadata(&at).map_err(|_| Error::SourceMissing(at.clone()))?;
            self.walk_dir_contents(&at, parent_root.as_ref(), root.dev(), None)?;
            return self.flush();
        }
        self.walk_virtual(Path::new("/"), trie, parent_root.as_ref())?;
        self.flush()
    }

    fn walk_virtual(&mut self, dir: &Path, trie: &SourceTrie, parent: Option<&Tree>) -> Result<()> {
        for (name, child) in &trie.children {
            let path = dir.join(name);
            let meta =
                std::fs::symlink_metadata(&path).map_err(|_| Error::SourceMissing(path.clone()))?;
            let pnode = find(parent, name.as_bytes());
            if child.leaf {
                if let Some((_, at)) = self.read_from.iter().find(|(s, _)| *s == path) {
                    // Read from the frozen copy, recorded under the
                    // source's name.
                    let at = at.clone();
                    let meta = std::fs::symlink_metadata(&at)
                        .map_err(|_| Error::SourceMissing(at.clone()))?;
                    self.walk_entry(&at, name.as_bytes(), &meta, pnode, meta.dev())?;
                    continue;
                }
                self.walk_entry(&path, name.as_bytes(), &meta, pnode, meta.dev())?;
            } else {
                Progress::add(&self.progress.entries, 1);
                let mut node = self.node(name.as_bytes(), &meta);
                self.attach_xattrs(&path, &mut node, pnode);
                self.send(WalkItem::DirStart)?;
                let sub = self.parent_subtree(pnode);
                self.walk_virtual(&path, child, sub.as_ref())?;
                self.send(WalkItem::DirEnd(Box::new(node)))?;
            }
        }
        Ok(())
    }

    fn walk_entry(
        &mut self,
        path: &Path,
        name: &[u8],
        meta: &Metadata,
        pnode: Option<&Node>,
        root_dev: u64,
    ) -> Result<()> {
        crate::util::check_interrupted()?;
        if self.abort.is_set() {
            return Err(self.abort.error_or_interrupted());
        }
        if self.excludes.excluded(&self.source_path(path))
            || self.excludes.excluded_identity(meta)
            || self.excludes.too_large(meta)
        {
            return Ok(());
        }
        crate::failpoint::hit("walker", path.as_os_str().as_bytes());
        Progress::add(&self.progress.entries, 1);
        let mut node = self.node(name, meta);
        self.attach_xattrs(path, &mut node, pnode);
        match node.kind {
            NodeKind::Dir => {
                self.send(WalkItem::DirStart)?;
                let crossed = meta.dev() != root_dev;
                let pseudo = crossed
                    && self
                        .pseudo_fs
                        .entry(meta.dev())
                        .or_insert_with(|| super::pseudo_fs::pseudo_fs_of(path))
                        .inspect(|fs| {
                            tracing::debug!(path = %path.display(), fs, "pseudo file system: contents skipped")
                        })
                        .is_some();
                let skip_contents = (self.one_file_system && crossed) || pseudo;
                if !skip_contents {
                    let marker = self.excludes.content_marker(path);
                    let sub = self.parent_subtree(pnode);
                    self.walk_dir_contents(path, sub.as_ref(), root_dev, marker.as_deref())?;
                }
                self.send(WalkItem::DirEnd(Box::new(node)))
            }
            NodeKind::File => {
                let unchanged = pnode.filter(|p| {
                    // Not racily clean: see `racy_cutoff_ns`.
                    node.mtime_ns < self.reuse_before_ns
                        && node.ctime_ns < self.reuse_before_ns
                        && p.kind == NodeKind::File
                        && p.size == node.size
                        && p.mtime() == node.mtime()
                        && p.ctime() == node.ctime()
                        && p.inode == node.inode
                        && p.content
                            .iter()
                            .all(|e| e.blob.is_none_or(|b| self.index.contains(&b)))
                });
                if let Some(sink) = &self.file_status {
                    let status = match (unchanged, pnode) {
                        (Some(_), _) => super::FileStatus::Unchanged,
                        (None, Some(p)) if p.kind == NodeKind::File => super::FileStatus::Modified,
                        (None, _) => super::FileStatus::New,
                    };
                    (sink.0)(status, &self.source_path(path));
                }
                if let Some(p) = unchanged {
                    node.content = p.content.clone();
                    Progress::add(&self.progress.files_done, 1);
                    Progress::add(&self.progress.bytes_done, node.size);
                    return self.send(WalkItem::Entry(Box::new(node), None));
                }
                let sparse = meta.blocks() * 512 < meta.len() && meta.len() > 0;
                let (tx, rx) = bounded(1);
                let job = FileJob {
                    path: path.to_path_buf(),
                    node: node.clone(),
                    sparse,
                    reply: tx,
                };
                self.jobs
                    .send(job)
                    .map_err(|_| self.abort.error_or_interrupted())?;
                self.send(WalkItem::Entry(Box::new(node), Some(rx)))
            }
            NodeKind::Symlink => {
                match std::fs::read_link(path) {
                    Ok(t) => node.target = Some(t.as_os_str().as_bytes().to_vec()),
                    Err(e) => {
                        self.warn(format!("{}: cannot read link: {e}", path.display()));
                        return Ok(());
                    }
                }
                self.send(WalkItem::Entry(Box::new(node), None))
            }
            _ => self.send(WalkItem::Entry(Box::new(node), None)),
        }
    }

    fn walk_dir_contents(
        &mut self,
        dir: &Path,
        parent: Option<&Tree>,
        root_dev: u64,
        only: Option<&std::ffi::OsStr>,
    ) -> Result<()> {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) => {
                self.warn(format!("{}: cannot list directory: {e}", dir.display()));
                return Ok(());
            }
        };
        // The entries keep the directory open: each is then `lstat`ed by
        // its name relative to it (`DirEntry::metadata`), one lookup
        // instead of one per component of its path.
        let mut listed: Vec<(OsString, std::fs::DirEntry)> = Vec::new();
        for entry in entries {
            match entry {
                Ok(e) => {
                    // d_type, no stat: hand subdirectories to the prefetcher.
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        let path = e.path();
                        if !self.excludes.excluded(&self.source_path(&path)) {
                            let same_fs = self.one_file_system.then_some(root_dev);
                            self.prefetch.hint(path, same_fs);
                        }
                    }
                    listed.push((e.file_name(), e))
                }
                Err(e) => self.warn(format!("{}: error while listing: {e}", dir.display())),
            }
        }
        listed.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        for (name, entry) in listed {
            if only.is_some_and(|keep| keep != name.as_os_str()) {
                continue;
            }
            let path = dir.join(&name);
            let meta = match entry.metadata() {
                Ok(m) => m,
                Err(e) => {
                    self.warn(format!("{}: vanished or unreadable: {e}", path.display()));
                    continue;
                }
            };
            let pnode = find(parent, name.as_bytes());
            self.walk_entry(&path, name.as_bytes(), &meta, pnode, root_dev)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn review_finding_15_times_never_overflow() {
        use crate::format::ExactTime;
        // 2300-01-01 and 1600-01-01 are kept exactly beside the nearest ns.
        assert_eq!(
            ExactTime::from_stat(10_413_792_000, 0),
            (
                i64::MAX,
                Some(ExactTime {
                    sec: 10_413_792_000,
                    nsec: 0
                })
            )
        );
        assert_eq!(
            ExactTime::from_stat(-11_676_096_000, 0),
            (
                i64::MIN,
                Some(ExactTime {
                    sec: -11_676_096_000,
                    nsec: 0
                })
            )
        );
        assert_eq!(ExactTime::from_stat(i64::MIN, 0).0, i64::MIN);
        // The last representable instant needs nothing more.
        assert_eq!(
            ExactTime::from_stat(i64::MAX / 1_000_000_000, i64::MAX % 1_000_000_000),
            (i64::MAX, None)
        );
    }

    #[test]
    fn racy_cutoff_is_the_parent_start_minus_the_margin() {
        assert_eq!(racy_cutoff_ns(10 * RACY_MARGIN_NS), 9 * RACY_MARGIN_NS);
        assert_eq!(racy_cutoff_ns(i64::MIN + 1), i64::MIN);
    }
}
