//! `vouch mount`: every snapshot of a repository as a read-only FUSE file
//! system.
//!
//! ```text
//! ids/<id>/...                 each snapshot's files (8-digit id; the full
//!                              id when two snapshots share those digits)
//! snapshots/<time>  -> ../ids/<id>    by time (UTC), and `latest`
//! hosts/<host>/<time> -> ../../ids/<id>, and `latest`
//! tags/<tag>/<time>   -> ../../ids/<id>, and `latest`
//! ```
//!
//! The layout is read when the mount starts and again, at most every
//! [`REFRESH`], when a top-level directory is listed, so new snapshots show
//! up; an entry keeps its inode across refreshes. A snapshot's directories
//! are loaded when first looked at, and a file's content is read one blob at
//! a time through a cache of decrypted blobs ([`BLOB_CACHE_BYTES`]): memory
//! is bounded by what is browsed, never by the size of a file. A blob that
//! cannot be read is an I/O error for that read (logged with the file and
//! the blob), never zeros.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenAccMode, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyXattr, Request,
};

use crate::error::{Error, Result};
use crate::format::{Extent, Manifest, Node, NodeKind};
use crate::id::{BlobId, SnapshotId};
use crate::repo::{MasterIndex, Repository};

/// How long the kernel may cache names and attributes (a snapshot never
/// changes; the top-level directories do, and are answered fresh).
const TTL: Duration = Duration::from_secs(60);

/// How often the snapshot list is read again, at most.
pub const REFRESH: Duration = Duration::from_secs(30);

/// Bytes of decrypted blobs kept for reads.
pub const BLOB_CACHE_BYTES: usize = 128 << 20;

/// The top-level directories.
const TOP: [&str; 4] = ["hosts", "ids", "snapshots", "tags"];

/// A directory's entries: names and inodes.
type Listing = Vec<(Vec<u8>, u64)>;

/// Snapshots, with the name of the directory that groups them.
type Group<'a> = (Vec<u8>, Vec<&'a (SnapshotId, Manifest)>);

/// What an inode is.
enum Entry {
    /// A directory of the layout, with its entries.
    Virtual {
        parent: u64,
        children: Listing,
        mtime_ns: i64,
    },
    /// A symlink of the layout.
    Link { target: Vec<u8>, mtime_ns: i64 },
    /// A snapshot's root directory.
    Root {
        tree: BlobId,
        manifest: Box<Manifest>,
    },
    /// An entry of a snapshot.
    Node { node: Arc<Node>, parent: u64 },
}

/// Inodes and the directories loaded so far.
struct State {
    /// Entry of inode `i + 1`.
    entries: Vec<Entry>,
    /// Layout paths (`hosts/db-1`) to their inodes, kept across refreshes.
    layout: HashMap<Vec<u8>, u64>,
    /// The root inode of each snapshot, kept across refreshes.
    roots: HashMap<SnapshotId, u64>,
    /// Entries of snapshot directories loaded so far.
    listed: HashMap<u64, Arc<Listing>>,
    /// When the snapshot list was last read.
    refreshed: Instant,
    /// The snapshots it had, in time order.
    listing: Vec<SnapshotId>,
}

/// A file open for reading: its node and where each extent starts.
struct OpenFile {
    node: Arc<Node>,
    starts: Vec<u64>,
}

/// Decrypted blobs, the oldest dropped first beyond the byte budget.
#[derive(Default)]
struct BlobCache {
    blobs: HashMap<BlobId, Arc<Vec<u8>>>,
    order: VecDeque<BlobId>,
    bytes: usize,
}

impl BlobCache {
    fn get(&self, id: &BlobId) -> Option<Arc<Vec<u8>>> {
        self.blobs.get(id).cloned()
    }

    fn put(&mut self, id: BlobId, data: Arc<Vec<u8>>) {
        if self.blobs.contains_key(&id) {
            return;
        }
        self.bytes += data.len();
        self.blobs.insert(id, data);
        self.order.push_back(id);
        while self.bytes > BLOB_CACHE_BYTES && self.order.len() > 1 {
            if let Some(old) = self.order.pop_front() {
                if let Some(d) = self.blobs.remove(&old) {
                    self.bytes -= d.len();
                }
            }
        }
    }
}

/// The file system.
pub struct SnapshotFs {
    repo: Arc<Repository>,
    index: RwLock<Arc<MasterIndex>>,
    state: Mutex<State>,
    open: Mutex<HashMap<u64, Arc<OpenFile>>>,
    next_fh: std::sync::atomic::AtomicU64,
    blobs: Mutex<BlobCache>,
    uid: u32,
    gid: u32,
    refresh: Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn system_time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

/// A snapshot's name in `snapshots/`, `hosts/` and `tags/`: its time, UTC.
fn time_name(ns: i64) -> String {
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns))
        .ok()
        .and_then(|t| t.format(&fmt).ok())
        .unwrap_or_else(|| ns.to_string())
}

/// A name that is safe as one path component (a host or tag with `/` or
/// NUL, or `.`/`..`, is changed so it cannot leave its directory).
fn component(name: &str) -> Vec<u8> {
    let cleaned: String = name
        .chars()
        .map(|c| if c == '/' || c == '\0' { '_' } else { c })
        .collect();
    match cleaned.as_str() {
        "" => b"_".to_vec(),
        "." | ".." => format!("_{cleaned}").into_bytes(),
        _ => cleaned.into_bytes(),
    }
}

impl SnapshotFs {
    /// The file system of `repo`'s snapshots, its layout read now and
    /// again at most every `refresh`.
    pub fn new(repo: Arc<Repository>, refresh: Duration) -> Result<Self> {
        let index = Arc::new(repo.load_index()?);
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let fs = SnapshotFs {
            repo,
            index: RwLock::new(index),
            state: Mutex::new(State {
                entries: Vec::new(),
                layout: HashMap::new(),
                roots: HashMap::new(),
                listed: HashMap::new(),
                refreshed: Instant::now(),
                listing: Vec::new(),
            }),
            open: Mutex::new(HashMap::new()),
            next_fh: std::sync::atomic::AtomicU64::new(1),
            blobs: Mutex::new(BlobCache::default()),
            uid,
            gid,
            refresh,
        };
        let snapshots = fs.repo.list_snapshots()?;
        fs.build_layout(&mut lock(&fs.state), snapshots);
        Ok(fs)
    }

    fn index(&self) -> Arc<MasterIndex> {
        self.index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Reads the snapshot list and the index again when the refresh
    /// interval has passed; a failure keeps the layout as it was.
    fn maybe_refresh(&self) {
        if lock(&self.state).refreshed.elapsed() < self.refresh {
            return;
        }
        let snapshots = match self.repo.list_snapshots() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("mount: cannot read the snapshot list again: {e}");
                lock(&self.state).refreshed = Instant::now();
                return;
            }
        };
        let mut state = lock(&self.state);
        let mut ids: Vec<SnapshotId> = snapshots.iter().map(|(id, _)| *id).collect();
        let mut before = state.listing.clone();
        ids.sort();
        before.sort();
        if ids != before {
            match self.repo.load_index() {
                Ok(index) => {
                    *self.index.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(index)
                }
                Err(e) => tracing::warn!("mount: cannot read the index again: {e}"),
            }
        }
        self.build_layout(&mut state, snapshots);
    }

    fn push(state: &mut State, entry: Entry) -> u64 {
        state.entries.push(entry);
        state.entries.len() as u64
    }

    /// The inode of layout path `path`, made or updated to `entry`.
    fn layout_ino(state: &mut State, path: &[u8], entry: Entry) -> u64 {
        match state.layout.get(path) {
            Some(&ino) => {
                state.entries[(ino - 1) as usize] = entry;
                ino
            }
            None => {
                let ino = Self::push(state, entry);
                state.layout.insert(path.to_vec(), ino);
                ino
            }
        }
    }

    /// Builds (or rebuilds) the layout from the snapshot list.
    fn build_layout(&self, state: &mut State, mut snapshots: Vec<(SnapshotId, Manifest)>) {
        snapshots.sort_by_key(|(id, m)| (m.time_ns, *id));
        let newest = snapshots.last().map(|(_, m)| m.time_ns).unwrap_or(0);
        // The root is inode 1, made first.
        let root = Self::layout_ino(
            state,
            b"",
            Entry::Virtual {
                parent: 1,
                children: Vec::new(),
                mtime_ns: newest,
            },
        );
        debug_assert_eq!(root, 1);
        // Short ids, unless two snapshots share them.
        let mut short_count: HashMap<String, usize> = HashMap::new();
        for (id, _) in &snapshots {
            *short_count.entry(id.short()).or_default() += 1;
        }
        let id_name = |id: &SnapshotId| {
            let short = id.short();
            if short_count.get(&short).copied().unwrap_or(0) > 1 {
                id.to_hex()
            } else {
                short
            }
        };
        // ids/
        let mut ids = Vec::new();
        for (id, m) in &snapshots {
            let ino = match state.roots.get(id) {
                Some(&ino) => ino,
                None => {
                    let ino = Self::push(
                        state,
                        Entry::Root {
                            tree: m.tree,
                            manifest: Box::new(m.clone()),
                        },
                    );
                    state.roots.insert(*id, ino);
                    ino
                }
            };
            ids.push((id_name(id).into_bytes(), ino));
        }
        // snapshots/, hosts/<host>/, tags/<tag>/: time names -> ids.
        let mut groups: Vec<Group<'_>> = vec![(b"snapshots".to_vec(), snapshots.iter().collect())];
        let mut by_host: std::collections::BTreeMap<Vec<u8>, Vec<&(SnapshotId, Manifest)>> =
            Default::default();
        let mut by_tag: std::collections::BTreeMap<Vec<u8>, Vec<&(SnapshotId, Manifest)>> =
            Default::default();
        for s in &snapshots {
            by_host.entry(component(&s.1.host)).or_default().push(s);
            for t in &s.1.tags {
                by_tag.entry(component(t)).or_default().push(s);
            }
        }
        for (host, list) in by_host {
            groups.push(([b"hosts/".as_slice(), &host].concat(), list));
        }
        for (tag, list) in by_tag {
            groups.push(([b"tags/".as_slice(), &tag].concat(), list));
        }
        let mut group_inos: HashMap<Vec<u8>, u64> = HashMap::new();
        for (path, list) in &groups {
            let up = if path.starts_with(b"snapshots") {
                "../ids/"
            } else {
                "../../ids/"
            };
            let mut children = Vec::new();
            let mut taken: HashMap<String, usize> = HashMap::new();
            for (id, m) in list {
                let base = time_name(m.time_ns);
                let n = taken.entry(base.clone()).or_default();
                let name = if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                };
                *n += 1;
                let target = format!("{up}{}", id_name(id)).into_bytes();
                let link_path = [path.as_slice(), b"/", name.as_bytes()].concat();
                let ino = Self::layout_ino(
                    state,
                    &link_path,
                    Entry::Link {
                        target: target.clone(),
                        mtime_ns: m.time_ns,
                    },
                );
                children.push((name.into_bytes(), ino));
            }
            if let Some((id, m)) = list.last() {
                let link_path = [path.as_slice(), b"/latest"].concat();
                let ino = Self::layout_ino(
                    state,
                    &link_path,
                    Entry::Link {
                        target: format!("{up}{}", id_name(id)).into_bytes(),
                        mtime_ns: m.time_ns,
                    },
                );
                children.push((b"latest".to_vec(), ino));
            }
            let mtime_ns = list.last().map(|(_, m)| m.time_ns).unwrap_or(0);
            // The parent is set with the top-level directories below.
            let ino = Self::layout_ino(
                state,
                path,
                Entry::Virtual {
                    parent: 1,
                    children,
                    mtime_ns,
                },
            );
            group_inos.insert(path.clone(), ino);
        }
        // The top-level directories.
        let mut top = Vec::new();
        for name in TOP {
            let children: Vec<(Vec<u8>, u64)> = match name {
                "ids" => ids.clone(),
                "snapshots" => state
                    .entries
                    .get((group_inos[b"snapshots".as_slice()] - 1) as usize)
                    .map(|e| match e {
                        Entry::Virtual { children, .. } => children.clone(),
                        _ => Vec::new(),
                    })
                    .unwrap_or_default(),
                _ => {
                    let prefix = format!("{name}/").into_bytes();
                    let mut v: Vec<(Vec<u8>, u64)> = group_inos
                        .iter()
                        .filter_map(|(p, ino)| {
                            p.strip_prefix(prefix.as_slice())
                                .map(|n| (n.to_vec(), *ino))
                        })
                        .collect();
                    v.sort();
                    v
                }
            };
            let ino = if name == "snapshots" {
                group_inos[b"snapshots".as_slice()]
            } else {
                Self::layout_ino(
                    state,
                    name.as_bytes(),
                    Entry::Virtual {
                        parent: 1,
                        children: Vec::new(),
                        mtime_ns: newest,
                    },
                )
            };
            // Sub-groups of hosts/ and tags/ have it as parent.
            for (_, child) in &children {
                if let Some(Entry::Virtual { parent, .. }) =
                    state.entries.get_mut((*child - 1) as usize)
                {
                    *parent = ino;
                }
            }
            if let Some(Entry::Virtual {
                children: c,
                parent,
                ..
            }) = state.entries.get_mut((ino - 1) as usize)
            {
                *c = children;
                *parent = 1;
            }
            top.push((name.as_bytes().to_vec(), ino));
        }
        if let Some(Entry::Virtual {
            children, mtime_ns, ..
        }) = state.entries.get_mut(0)
        {
            *children = top;
            *mtime_ns = newest;
        }
        state.listing = snapshots.iter().map(|(id, _)| *id).collect();
        state.refreshed = Instant::now();
    }

    /// The entries of directory `ino`: the layout's, or a snapshot
    /// directory's (loaded on first use).
    fn children(&self, ino: u64) -> std::result::Result<Arc<Listing>, Errno> {
        let tree = {
            let state = lock(&self.state);
            match state.entries.get((ino.wrapping_sub(1)) as usize) {
                None => return Err(Errno::ENOENT),
                Some(Entry::Virtual { children, .. }) => return Ok(Arc::new(children.clone())),
                Some(Entry::Link { .. }) => return Err(Errno::ENOTDIR),
                Some(_) if state.listed.contains_key(&ino) => return Ok(state.listed[&ino].clone()),
                Some(Entry::Root { tree, .. }) => *tree,
                Some(Entry::Node { node, .. }) => match (node.kind, node.subtree) {
                    (NodeKind::Dir, Some(t)) => t,
                    (NodeKind::Dir, None) => return Ok(Arc::new(Vec::new())),
                    _ => return Err(Errno::ENOTDIR),
                },
            }
        };
        // Loaded outside the lock; a second caller may load it too, once.
        let loaded = crate::tree::load(&self.repo, &self.index(), &tree).map_err(|e| {
            tracing::error!(tree = %tree, "mount: cannot read a directory: {e}");
            Errno::EIO
        })?;
        let mut state = lock(&self.state);
        if let Some(done) = state.listed.get(&ino) {
            return Ok(done.clone());
        }
        let mut list = Vec::with_capacity(loaded.nodes.len());
        for node in loaded.nodes {
            let name = node.name.clone();
            let child = Self::push(
                &mut state,
                Entry::Node {
                    node: Arc::new(node),
                    parent: ino,
                },
            );
            list.push((name, child));
        }
        let list = Arc::new(list);
        state.listed.insert(ino, list.clone());
        Ok(list)
    }

    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let state = lock(&self.state);
        let entry = state.entries.get((ino.wrapping_sub(1)) as usize)?;
        let dir = |mtime_ns: i64, nlink: u32| FileAttr {
            ino: INodeNo(ino),
            size: 0,
            blocks: 0,
            atime: system_time(mtime_ns),
            mtime: system_time(mtime_ns),
            ctime: system_time(mtime_ns),
            crtime: system_time(mtime_ns),
            kind: FileType::Directory,
            perm: 0o555,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        };
        Some(match entry {
            Entry::Virtual { mtime_ns, .. } => dir(*mtime_ns, 2),
            Entry::Root { manifest, .. } => dir(manifest.time_ns, 2),
            Entry::Link { target, mtime_ns } => FileAttr {
                size: target.len() as u64,
                kind: FileType::Symlink,
                perm: 0o777,
                nlink: 1,
                ..dir(*mtime_ns, 1)
            },
            Entry::Node { node, .. } => node_attr(ino, node),
        })
    }

    /// Reads `size` bytes at `offset` of an open file.
    fn read_at(
        &self,
        file: &OpenFile,
        offset: u64,
        size: u32,
    ) -> std::result::Result<Vec<u8>, Errno> {
        let end = offset.saturating_add(u64::from(size)).min(file.node.size);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut pos = offset;
        while pos < end {
            // The extent holding `pos`.
            let i = file.starts.partition_point(|s| *s <= pos) - 1;
            let ext: Extent = file.node.content[i];
            let within = pos - file.starts[i];
            let take = (ext.length - within).min(end - pos);
            match ext.blob {
                None => out.resize(out.len() + take as usize, 0),
                Some(id) => {
                    let blob = self.blob(&id, ext.length, &file.node)?;
                    let from = within as usize;
                    out.extend_from_slice(&blob[from..from + take as usize]);
                }
            }
            pos += take;
        }
        Ok(out)
    }

    fn blob(
        &self,
        id: &BlobId,
        length: u64,
        node: &Node,
    ) -> std::result::Result<Arc<Vec<u8>>, Errno> {
        if let Some(b) = lock(&self.blobs).get(id) {
            return Ok(b);
        }
        let data = self.repo.read_blob(&self.index(), id).map_err(|e| {
            tracing::error!(file = %node.display_name(), blob = %id, "mount: cannot read: {e}");
            Errno::EIO
        })?;
        if data.len() as u64 != length {
            tracing::error!(file = %node.display_name(), blob = %id,
                "mount: the blob has {} bytes, its extent {length}", data.len());
            return Err(Errno::EIO);
        }
        let data = Arc::new(data);
        lock(&self.blobs).put(*id, data.clone());
        Ok(data)
    }

    fn node(&self, ino: u64) -> Option<Arc<Node>> {
        match lock(&self.state)
            .entries
            .get((ino.wrapping_sub(1)) as usize)
        {
            Some(Entry::Node { node, .. }) => Some(node.clone()),
            _ => None,
        }
    }
}

fn node_attr(ino: u64, node: &Node) -> FileAttr {
    let kind = match node.kind {
        NodeKind::File => FileType::RegularFile,
        NodeKind::Dir => FileType::Directory,
        NodeKind::Symlink => FileType::Symlink,
        NodeKind::Fifo => FileType::NamedPipe,
        NodeKind::CharDevice => FileType::CharDevice,
        NodeKind::BlockDevice => FileType::BlockDevice,
        NodeKind::Socket => FileType::Socket,
    };
    let size = match node.kind {
        NodeKind::Symlink => node.target.as_ref().map_or(0, |t| t.len() as u64),
        _ => node.size,
    };
    let stored: u64 = node
        .content
        .iter()
        .filter(|e| e.blob.is_some())
        .map(|e| e.length)
        .sum();
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: stored.div_ceil(512),
        atime: system_time(node.mtime_ns),
        mtime: system_time(node.mtime_ns),
        ctime: system_time(node.ctime_ns),
        crtime: system_time(node.mtime_ns),
        kind,
        perm: (node.mode & 0o7777) as u16,
        nlink: match node.kind {
            NodeKind::Dir => 2,
            _ => u32::try_from(node.links.max(1)).unwrap_or(u32::MAX),
        },
        uid: node.uid,
        gid: node.gid,
        rdev: kernel_dev(node.rdev),
        blksize: 4096,
        flags: 0,
    }
}

/// A device number as FUSE hands it to the kernel (`new_encode_dev`), from
/// the `st_rdev` a backup recorded (glibc's encoding).
fn kernel_dev(rdev: u64) -> u32 {
    let (major, minor) = (crate::util::dev_major(rdev), crate::util::dev_minor(rdev));
    ((minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)) as u32
}

impl Filesystem for SnapshotFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent.0 == 1 || self.is_top(parent.0) {
            self.maybe_refresh();
        }
        let children = match self.children(parent.0) {
            Ok(c) => c,
            Err(e) => return reply.error(e),
        };
        let Some(&(_, ino)) = children
            .iter()
            .find(|(n, _)| n.as_slice() == name.as_bytes())
        else {
            return reply.error(Errno::ENOENT);
        };
        match self.attr(ino) {
            Some(a) => reply.entry(&self.ttl(parent.0), &a, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino.0) {
            Some(a) => reply.attr(&self.ttl(ino.0), &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let state = lock(&self.state);
        match state.entries.get((ino.0.wrapping_sub(1)) as usize) {
            Some(Entry::Link { target, .. }) => reply.data(target),
            Some(Entry::Node { node, .. }) if node.kind == NodeKind::Symlink => {
                reply.data(node.target.as_deref().unwrap_or_default())
            }
            Some(_) => reply.error(Errno::EINVAL),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        let Some(node) = self.node(ino.0) else {
            return reply.error(Errno::EISDIR);
        };
        if node.kind != NodeKind::File {
            return reply.error(Errno::EINVAL);
        }
        let mut starts = Vec::with_capacity(node.content.len());
        let mut at = 0u64;
        for e in &node.content {
            starts.push(at);
            at = at.saturating_add(e.length);
        }
        if at != node.size {
            tracing::error!(file = %node.display_name(), "mount: the extents do not add up to the size");
            return reply.error(Errno::EIO);
        }
        let fh = self
            .next_fh
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.open).insert(fh, Arc::new(OpenFile { node, starts }));
        // The content never changes: let the kernel keep its cache.
        reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE);
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some(file) = lock(&self.open).get(&fh.0).cloned() else {
            return reply.error(Errno::EBADF);
        };
        match self.read_at(&file, offset, size) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: fuser::ReplyEmpty,
    ) {
        lock(&self.open).remove(&fh.0);
        reply.ok();
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: fuser::ReplyEmpty,
    ) {
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if offset == 0 && (ino.0 == 1 || self.is_top(ino.0)) {
            self.maybe_refresh();
        }
        let children = match self.children(ino.0) {
            Ok(c) => c,
            Err(e) => return reply.error(e),
        };
        let parent = self.parent(ino.0);
        let mut all: Vec<(u64, FileType, &[u8])> = vec![
            (ino.0, FileType::Directory, b"."),
            (parent, FileType::Directory, b".."),
        ];
        let kinds: Vec<FileType> = children
            .iter()
            .map(|(_, c)| self.attr(*c).map_or(FileType::RegularFile, |a| a.kind))
            .collect();
        for ((name, child), kind) in children.iter().zip(kinds) {
            all.push((*child, kind, name));
        }
        for (i, (child, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
            if reply.add(
                INodeNo(child),
                (i + 1) as u64,
                kind,
                OsStr::from_bytes(name),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let Some(node) = self.node(ino.0) else {
            return reply.error(Errno::ENODATA);
        };
        let Some(x) = node.xattrs.iter().find(|x| x.name == name.as_bytes()) else {
            return reply.error(Errno::ENODATA);
        };
        xattr_reply(&x.value, size, reply);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let mut names = Vec::new();
        if let Some(node) = self.node(ino.0) {
            for x in &node.xattrs {
                names.extend_from_slice(&x.name);
                names.push(0);
            }
        }
        xattr_reply(&names, size, reply);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let files = lock(&self.state).entries.len() as u64;
        reply.statfs(0, 0, 0, files, 0, 4096, 255, 4096);
    }
}

/// Answers an xattr request: the size when asked with 0, ERANGE when the
/// caller's buffer is too small, else the bytes.
fn xattr_reply(value: &[u8], size: u32, reply: ReplyXattr) {
    let len = u32::try_from(value.len()).unwrap_or(u32::MAX);
    if size == 0 {
        reply.size(len);
    } else if len > size {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(value);
    }
}

impl SnapshotFs {
    fn is_top(&self, ino: u64) -> bool {
        let state = lock(&self.state);
        TOP.iter()
            .any(|t| state.layout.get(t.as_bytes()) == Some(&ino))
    }

    /// The layout's entries change with refreshes: cached briefly; a
    /// snapshot's never change.
    fn ttl(&self, ino: u64) -> Duration {
        match lock(&self.state)
            .entries
            .get((ino.wrapping_sub(1)) as usize)
        {
            Some(Entry::Virtual { .. }) | Some(Entry::Link { .. }) => Duration::from_secs(1),
            _ => TTL,
        }
    }

    fn parent(&self, ino: u64) -> u64 {
        let state = lock(&self.state);
        match state.entries.get((ino.wrapping_sub(1)) as usize) {
            Some(Entry::Virtual { parent, .. }) | Some(Entry::Node { parent, .. }) => *parent,
            Some(Entry::Root { .. }) => state.layout.get(b"ids".as_slice()).copied().unwrap_or(1),
            _ => 1,
        }
    }
}

/// Mount options of `vouch mount`.
#[derive(Clone, Copy, Debug, Default)]
pub struct MountOptions {
    /// Let other users (and root) in; the kernel then checks each entry's
    /// owner and mode unless `no_default_permissions`.
    pub allow_other: bool,
    /// With `allow_other`, let every user read every file.
    pub no_default_permissions: bool,
}

/// Mounts `fs` at `dir` and serves it until `stop` says so or the mount is
/// gone (`fusermount3 -u DIR`), then unmounts (lazily: a shell still inside
/// does not keep it).
pub fn serve(
    fs: SnapshotFs,
    dir: &Path,
    options: MountOptions,
    stop: &dyn Fn() -> bool,
) -> Result<()> {
    use fuser::{Config, MountOption, SessionACL};
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::RO,
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::FSName("vouch".into()),
        MountOption::Subtype("vouch".into()),
    ];
    if options.allow_other {
        config.acl = SessionACL::All;
        if !options.no_default_permissions {
            config.mount_options.push(MountOption::DefaultPermissions);
        }
    }
    config.n_threads = Some(crate::util::io_threads(0).min(4));
    let session = fuser::spawn_mount(fs, dir, &config).map_err(|e| {
        Error::io(
            format!(
                "mounting at {} (needs /dev/fuse and fusermount3 from Debian's fuse3 when not root)",
                dir.display()
            ),
            e,
        )
    })?;
    while !stop() && !session.guard.is_finished() {
        std::thread::sleep(Duration::from_millis(100));
    }
    if !session.guard.is_finished() {
        unmount(dir);
    }
    drop(session);
    Ok(())
}

/// Unmounts `dir` lazily: `umount2(MNT_DETACH)` as root, else
/// `fusermount3 -u -z` (or `fusermount`).
fn unmount(dir: &Path) {
    if crate::util::is_root() {
        if let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) {
            // SAFETY: a valid NUL-terminated path; umount2 touches nothing else.
            if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
                return;
            }
        }
    }
    for helper in ["fusermount3", "fusermount"] {
        let done = std::process::Command::new(helper)
            .args(["-u", "-z", "--"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if done {
            return;
        }
    }
    tracing::warn!(dir = %dir.display(), "could not unmount: run `fusermount3 -u {}`", dir.display());
}

#[cfg(test)]
mod tests {
    #[test]
    fn device_numbers_reach_the_kernel_in_its_encoding() {
        // /dev/sda1 (8,1) reads the same in both; a minor above 255 does not.
        assert_eq!(super::kernel_dev(libc::makedev(8, 1)), 0x801);
        let big = libc::makedev(259, 70000);
        let k = super::kernel_dev(big);
        // The kernel's new_decode_dev.
        let major = (k & 0xfff00) >> 8;
        let minor = (k & 0xff) | ((k >> 12) & 0xfff00);
        assert_eq!((major, minor), (259, 70000));
    }
}
