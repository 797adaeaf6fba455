//! Storage backends: the one small trait the engine writes through, and the
//! local-directory implementation. An HTTP or S3 backend implements the same
//! trait and passes the same conformance tests (`backend::tests`).

pub mod http;
#[cfg(target_os = "linux")]
pub mod immutable;
pub mod s3;
pub mod storage;

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, IoContext, Result};

/// The kinds of files in a repository, each in its own place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// `config`.
    Config,
    /// `keys/<id>`.
    Key,
    /// `data/<2 hex>/<id>`.
    Pack,
    /// `index/<id>`.
    Index,
    /// `snapshots/<id>`.
    Snapshot,
    /// `locks/<id>`.
    Lock,
    /// `owner`: the optional sealed record of the service that owns the
    /// repository (format v1 extension; older builds never read it).
    Owner,
    /// `pointlocks/<id>`: a snapshot's lock until a date (format v1
    /// extension; older builds never read it).
    PointLock,
    /// `eventlog/<log>-<first>-<last>`: the service's event log, mirrored
    /// for disaster recovery (format v1 extension; older builds never read
    /// it).
    LogMirror,
}

impl FileKind {
    /// All kinds that live in a directory of their own.
    pub const DIRS: [FileKind; 7] = [
        FileKind::Key,
        FileKind::Pack,
        FileKind::Index,
        FileKind::Snapshot,
        FileKind::Lock,
        FileKind::PointLock,
        FileKind::LogMirror,
    ];

    fn dir(self) -> &'static str {
        match self {
            FileKind::Config | FileKind::Owner => "",
            FileKind::Key => "keys",
            FileKind::Pack => "data",
            FileKind::Index => "index",
            FileKind::Snapshot => "snapshots",
            FileKind::Lock => "locks",
            FileKind::PointLock => "pointlocks",
            FileKind::LogMirror => "eventlog",
        }
    }
}

/// Who keeps a locked point's files from being deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Retained {
    /// Vouch refuses to delete them; anyone with write access to the
    /// storage could.
    ByVouch,
    /// The storage itself refuses (S3 Object Lock in compliance mode).
    ByStorage,
}

/// Whether a write must be durable before the call returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteSync {
    /// Leave it to a later [`Backend::sync_all`] (or never).
    Deferred,
    /// fsync the file and its directory before returning.
    Now,
}

/// A repository's storage. Every write is atomic: readers see the whole file
/// or nothing.
pub trait Backend: Send + Sync {
    /// Where it is, for messages.
    fn location(&self) -> String;
    /// Creates the empty layout; fails if the location holds anything.
    fn create(&self) -> Result<()>;
    /// Whether a file exists.
    fn exists(&self, kind: FileKind, name: &str) -> Result<bool>;
    /// Names and sizes of all files of a kind (temporary files excluded).
    fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>>;
    /// Whole file.
    fn read(&self, kind: FileKind, name: &str) -> Result<Vec<u8>>;
    /// [`Backend::read`] of a pack into `buf` (replacing its contents),
    /// so that a reader of many packs reuses one buffer.
    fn read_pack_into(&self, name: &str, buf: &mut Vec<u8>) -> Result<()> {
        *buf = self.read(FileKind::Pack, name)?;
        Ok(())
    }
    /// `length` bytes at `offset`; an error if the file is shorter.
    fn read_range(&self, kind: FileKind, name: &str, offset: u64, length: usize)
        -> Result<Vec<u8>>;
    /// [`Backend::read_range`] into `buf` (replacing its contents), so that
    /// a reader of many ranges reuses one buffer instead of mapping fresh
    /// pages for each.
    fn read_range_into(
        &self,
        kind: FileKind,
        name: &str,
        offset: u64,
        length: usize,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        *buf = self.read_range(kind, name, offset, length)?;
        Ok(())
    }
    /// Atomically creates or replaces a file.
    fn write(&self, kind: FileKind, name: &str, data: &[u8], sync: WriteSync) -> Result<()>;

    /// [`Backend::write`] of a buffer the caller gives up, so that a remote
    /// backend sends it as it is instead of copying it into a request body
    /// first (a pack is 16 MiB, and three are in flight).
    fn write_owned(
        &self,
        kind: FileKind,
        name: &str,
        data: Vec<u8>,
        sync: WriteSync,
    ) -> Result<()> {
        self.write(kind, name, &data, sync)
    }
    /// Removes a file; removing a missing file is not an error.
    fn delete(&self, kind: FileKind, name: &str) -> Result<()>;
    /// Makes every write done through this handle durable, including writes
    /// of other sessions sharing it: when it returns, everything written
    /// before the call began is durable, whoever wrote it.
    fn sync_all(&self) -> Result<()>;
    /// Makes the deletions (and renames) of files of `kind` done so far
    /// durable: for a local directory, an fsync of the directories holding
    /// them. A crash after it returns never brings a deleted file back.
    fn sync_deletes(&self, kind: FileKind) -> Result<()>;
    /// When a file was last written, if the backend knows (`Ok(None)` when it
    /// does not, or the file is gone).
    fn modified(&self, kind: FileKind, name: &str) -> Result<Option<std::time::SystemTime>>;
    /// Removes temporary files left by interrupted writers; returns how many.
    fn remove_temporary(&self) -> Result<usize>;
    /// Whether the storage itself can retain files until a date.
    fn retention_support(&self) -> Result<Retained> {
        Ok(Retained::ByVouch)
    }
    /// Has the storage refuse to delete or overwrite a file before `until`
    /// (never shortening a retention already set). Only called when
    /// [`Backend::retention_support`] says the storage can.
    fn retain_until(&self, kind: FileKind, name: &str, until: std::time::SystemTime) -> Result<()> {
        let _ = (kind, name, until);
        Err(Error::InvalidArgument(format!(
            "{} cannot retain files",
            self.location()
        )))
    }
    /// What went over the network so far, for a remote backend (`None` for
    /// a local directory).
    fn traffic(&self) -> Option<Traffic> {
        None
    }
}

/// Bytes and requests a remote backend moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Traffic {
    /// Request bodies sent, in bytes.
    pub sent: u64,
    /// Answer bodies received, in bytes.
    pub received: u64,
    /// Requests made, retries included.
    pub requests: u64,
}

impl Traffic {
    /// What moved since `earlier`.
    pub fn since(self, earlier: Traffic) -> Traffic {
        Traffic {
            sent: self.sent.saturating_sub(earlier.sent),
            received: self.received.saturating_sub(earlier.received),
            requests: self.requests.saturating_sub(earlier.requests),
        }
    }
}

/// Largest `config`, key or lock file a reader accepts: these are small JSON
/// files, and anyone who can write the storage could plant a huge one to make
/// every command run out of memory.
pub const MAX_SMALL_FILE: u64 = 1 << 20;

/// A repository in a local directory.
pub struct LocalBackend {
    root: PathBuf,
    /// Files written with deferred sync since the last `sync_all`, each
    /// once however often it was written (bounded by the files that exist).
    pending: Mutex<BTreeSet<PathBuf>>,
    /// Held for the whole of a `sync_all`, so a caller whose writes were
    /// taken by a sync still in flight waits for it instead of returning
    /// early (engine review finding 8).
    syncing: Mutex<()>,
    /// Whether locked points' files get the immutable attribute
    /// (`VOUCH_IMMUTABLE_FILES=1`, as root, on a file system that has it).
    immutable_locks: bool,
}

impl LocalBackend {
    /// A backend rooted at `root` (not checked).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            pending: Mutex::new(BTreeSet::new()),
            syncing: Mutex::new(()),
            immutable_locks: std::env::var("VOUCH_IMMUTABLE_FILES").is_ok_and(|v| v == "1"),
        }
    }

    /// Sets whether locked points' files get the immutable attribute.
    pub fn with_immutable_locks(mut self, on: bool) -> Self {
        self.immutable_locks = on;
        self
    }

    /// Clears the immutable attribute of `path` when it has it, so that a
    /// deletion vouch decided on can proceed (the engine's lock checks ran
    /// before); `Ok(false)` when the file has no such attribute.
    #[cfg(target_os = "linux")]
    fn release_immutable(&self, path: &Path) -> Result<bool> {
        match immutable::is_immutable(path) {
            Ok(true) => immutable::set_immutable(path, false).map(|_| true).map_err(|e| {
                Error::io(
                    format!(
                        "{} is immutable (chattr +i) and its attribute cannot be cleared (run as root, or `chattr -i` it)",
                        path.display()
                    ),
                    e,
                )
            }),
            _ => Ok(false),
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn release_immutable(&self, _path: &Path) -> Result<bool> {
        Ok(false)
    }

    /// Remembers `path` for the next [`Backend::sync_all`].
    fn defer_sync(&self, path: PathBuf) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(path);
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the file `name` of `kind` lives.
    pub fn file_path(&self, kind: FileKind, name: &str) -> PathBuf {
        self.path(kind, name)
    }

    fn path(&self, kind: FileKind, name: &str) -> PathBuf {
        match kind {
            FileKind::Config => self.root.join("config"),
            FileKind::Owner => self.root.join("owner"),
            FileKind::Pack => self
                .root
                .join("data")
                .join(name.get(..2).unwrap_or("00"))
                .join(name),
            _ => self.root.join(kind.dir()).join(name),
        }
    }

    fn dirs_of(&self, kind: FileKind) -> Vec<PathBuf> {
        match kind {
            FileKind::Config | FileKind::Owner => vec![self.root.clone()],
            FileKind::Pack => (0..=255u8)
                .map(|b| self.root.join("data").join(hex::encode([b])))
                .collect(),
            _ => vec![self.root.join(kind.dir())],
        }
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .ctx(|| format!("syncing directory {}", dir.display()))
}

/// fsync of a file's data, and on macOS through to the medium
/// (`F_FULLFSYNC`; a plain fsync there leaves it in the drive's cache).
fn sync_file_data(f: &File) -> std::io::Result<()> {
    #[cfg(target_os = "macos")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: fcntl on a descriptor we own, with no pointer argument.
        if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_FULLFSYNC) } == 0 {
            return Ok(());
        }
    }
    f.sync_data()
}

/// `syncfs(2)` of the file system holding `dir`.
#[cfg(target_os = "linux")]
fn syncfs_of(dir: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    let d = File::open(dir).ctx(|| format!("opening {}", dir.display()))?;
    // SAFETY: syncfs only reads the valid descriptor we own.
    if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
        return Err(Error::io(
            format!("syncing the file system of {}", dir.display()),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Whether `path` carries the immutable attribute.
fn is_immutable_file(path: &Path) -> bool {
    #[cfg(target_os = "linux")]
    {
        immutable::is_immutable(path).unwrap_or(false)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        false
    }
}

fn is_temporary(name: &str) -> bool {
    name.starts_with(".tmp-")
}

impl Backend for LocalBackend {
    fn location(&self) -> String {
        self.root.display().to_string()
    }

    fn create(&self) -> Result<()> {
        match fs::read_dir(&self.root) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(Error::NotEmpty(self.root.clone()));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir_all(&self.root)
                    .ctx(|| format!("creating {}", self.root.display()))?;
            }
            Err(e) => return Err(Error::io(format!("reading {}", self.root.display()), e)),
        }
        for kind in FileKind::DIRS {
            for dir in self.dirs_of(kind) {
                fs::create_dir_all(&dir).ctx(|| format!("creating {}", dir.display()))?;
            }
        }
        for kind in FileKind::DIRS {
            sync_dir(&self.root.join(kind.dir()))?;
        }
        sync_dir(&self.root)
    }

    fn exists(&self, kind: FileKind, name: &str) -> Result<bool> {
        let p = self.path(kind, name);
        match fs::symlink_metadata(&p) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io(format!("checking {}", p.display()), e)),
        }
    }

    fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
        if matches!(kind, FileKind::Config | FileKind::Owner) {
            let size = fs::metadata(self.path(kind, "")).map(|m| m.len()).ok();
            let name = if kind == FileKind::Config {
                "config"
            } else {
                "owner"
            };
            return Ok(size.map(|s| (name.to_string(), s)).into_iter().collect());
        }
        let mut out = Vec::new();
        for dir in self.dirs_of(kind) {
            let entries = match fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(format!("listing {}", dir.display()), e)),
            };
            for entry in entries {
                let entry = entry.ctx(|| format!("listing {}", dir.display()))?;
                let Ok(name) = entry.file_name().into_string() else {
                    continue;
                };
                if is_temporary(&name) {
                    continue;
                }
                let meta = entry
                    .metadata()
                    .ctx(|| format!("stat {}", entry.path().display()))?;
                if meta.is_file() {
                    out.push((name, meta.len()));
                }
            }
        }
        out.sort();
        Ok(out)
    }

    fn read(&self, kind: FileKind, name: &str) -> Result<Vec<u8>> {
        let p = self.path(kind, name);
        if matches!(
            kind,
            FileKind::Config | FileKind::Key | FileKind::Lock | FileKind::Owner
        ) {
            let f = File::open(&p).ctx(|| format!("reading {}", p.display()))?;
            let mut buf = Vec::new();
            f.take(MAX_SMALL_FILE + 1)
                .read_to_end(&mut buf)
                .ctx(|| format!("reading {}", p.display()))?;
            if buf.len() as u64 > MAX_SMALL_FILE {
                return Err(Error::corrupt(
                    p.display().to_string(),
                    format!("larger than {MAX_SMALL_FILE} bytes; this file is small JSON"),
                ));
            }
            return Ok(buf);
        }
        fs::read(&p).ctx(|| format!("reading {}", p.display()))
    }

    fn read_pack_into(&self, name: &str, buf: &mut Vec<u8>) -> Result<()> {
        let p = self.path(FileKind::Pack, name);
        let f = File::open(&p).ctx(|| format!("reading {}", p.display()))?;
        buf.clear();
        // Read to the end, whatever the size said: the content is what is
        // checked against the pack's name.
        (&f).read_to_end(buf)
            .ctx(|| format!("reading {}", p.display()))?;
        Ok(())
    }

    fn read_range(
        &self,
        kind: FileKind,
        name: &str,
        offset: u64,
        length: usize,
    ) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        self.read_range_into(kind, name, offset, length, &mut buf)?;
        Ok(buf)
    }

    fn read_range_into(
        &self,
        kind: FileKind,
        name: &str,
        offset: u64,
        length: usize,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        let p = self.path(kind, name);
        let f = File::open(&p).ctx(|| format!("opening {}", p.display()))?;
        // Zeroes only what the buffer grows by; the read overwrites it all.
        buf.resize(length, 0);
        std::os::unix::fs::FileExt::read_exact_at(&f, buf, offset)
            .ctx(|| format!("reading {length} bytes at {offset} of {}", p.display()))
    }

    fn write(&self, kind: FileKind, name: &str, data: &[u8], sync: WriteSync) -> Result<()> {
        let path = self.path(kind, name);
        let dir = path.parent().unwrap_or(&self.root).to_path_buf();
        let tmp = dir.join(format!(
            ".tmp-{}",
            hex::encode(crate::crypto::random_array::<8>())
        ));
        let result = (|| {
            let open = || OpenOptions::new().write(true).create_new(true).open(&tmp);
            let mut f = match open() {
                // A directory lost in a copy (git, some sync tools drop empty
                // ones) is recreated, durably when the write must be.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    fs::create_dir_all(&dir).ctx(|| format!("creating {}", dir.display()))?;
                    if sync == WriteSync::Now {
                        if let Some(parent) = dir.parent() {
                            sync_dir(parent)?;
                        }
                    }
                    open()
                }
                other => other,
            }
            .ctx(|| format!("creating {}", tmp.display()))?;
            f.write_all(data)
                .ctx(|| format!("writing {}", path.display()))?;
            if sync == WriteSync::Now {
                sync_file_data(&f).ctx(|| format!("syncing {}", path.display()))?;
            }
            drop(f);
            match fs::rename(&tmp, &path) {
                // An immutable file named by the hash of its bytes already
                // holds these very bytes.
                Err(e)
                    if e.kind() == std::io::ErrorKind::PermissionDenied
                        && matches!(
                            kind,
                            FileKind::Pack
                                | FileKind::Index
                                | FileKind::Snapshot
                                | FileKind::PointLock
                        )
                        && is_immutable_file(&path) =>
                {
                    let _ = fs::remove_file(&tmp);
                    Ok(())
                }
                other => other.ctx(|| format!("renaming into {}", path.display())),
            }
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result?;
        if sync == WriteSync::Now {
            sync_dir(&dir)?;
        } else {
            self.defer_sync(path);
        }
        Ok(())
    }

    fn delete(&self, kind: FileKind, name: &str) -> Result<()> {
        let p = self.path(kind, name);
        // Nothing left to sync of it.
        if let Ok(mut pending) = self.pending.lock() {
            pending.remove(&p);
        }
        match fs::remove_file(&p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e)
                if e.kind() == std::io::ErrorKind::PermissionDenied
                    && self.release_immutable(&p)? =>
            {
                fs::remove_file(&p).ctx(|| format!("deleting {}", p.display()))
            }
            Err(e) => Err(Error::io(format!("deleting {}", p.display()), e)),
        }
    }

    fn retention_support(&self) -> Result<Retained> {
        Ok(if self.immutable_locks {
            Retained::ByStorage
        } else {
            Retained::ByVouch
        })
    }

    #[cfg(target_os = "linux")]
    fn retain_until(
        &self,
        kind: FileKind,
        name: &str,
        _until: std::time::SystemTime,
    ) -> Result<()> {
        let p = self.path(kind, name);
        immutable::set_immutable(&p, true).map(|_| ()).ctx(|| {
            format!(
                "making {} immutable (chattr +i needs root and ext4, xfs or btrfs)",
                p.display()
            )
        })
    }

    fn sync_all(&self) -> Result<()> {
        // One sync at a time: a second caller waits for the one in flight,
        // which may have taken (and so be syncing) its files.
        let _one = self.syncing.lock().unwrap_or_else(|p| p.into_inner());
        let pending = match self.pending.lock() {
            Ok(mut p) => std::mem::take(&mut *p),
            Err(p) => std::mem::take(&mut *p.into_inner()),
        };
        #[cfg(target_os = "linux")]
        {
            // One syncfs per file system the repository spans (data/ or
            // index/ may be mounts or symlinks elsewhere): data, inodes and
            // directory entries of everything written (PBS's "filesystem"
            // level). Always run, even with nothing pending here: another
            // session sharing this handle may rely on it, and a syncfs with
            // nothing dirty is cheap.
            let _ = pending;
            use std::os::unix::fs::MetadataExt;
            let mut seen = Vec::new();
            for dir in [
                self.root.clone(),
                self.root.join("data"),
                self.root.join("index"),
                self.root.join("snapshots"),
            ] {
                let Ok(meta) = fs::metadata(&dir) else {
                    continue;
                };
                if !seen.contains(&meta.dev()) {
                    seen.push(meta.dev());
                    syncfs_of(&dir)?;
                }
            }
            Ok(())
        }
        #[cfg(not(target_os = "linux"))]
        {
            let mut dirs = std::collections::BTreeSet::new();
            for p in &pending {
                File::open(p)
                    .and_then(|f| sync_file_data(&f))
                    .ctx(|| format!("syncing {}", p.display()))?;
                if let Some(d) = p.parent() {
                    dirs.insert(d.to_path_buf());
                }
            }
            for d in dirs {
                sync_dir(&d)?;
            }
            Ok(())
        }
    }

    fn sync_deletes(&self, kind: FileKind) -> Result<()> {
        for dir in self.dirs_of(kind) {
            match sync_dir(&dir) {
                Ok(()) => {}
                // A missing data/xx directory holds nothing to make durable.
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn modified(&self, kind: FileKind, name: &str) -> Result<Option<std::time::SystemTime>> {
        let p = self.path(kind, name);
        match fs::symlink_metadata(&p) {
            Ok(m) => Ok(m.modified().ok()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(format!("stat {}", p.display()), e)),
        }
    }

    fn remove_temporary(&self) -> Result<usize> {
        let mut removed = 0;
        let mut dirs = vec![self.root.clone()];
        for kind in FileKind::DIRS {
            dirs.extend(self.dirs_of(kind));
        }
        for dir in dirs {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry.file_name().to_str().is_some_and(is_temporary) {
                    fs::remove_file(entry.path())
                        .ctx(|| format!("removing {}", entry.path().display()))?;
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! The conformance suite every backend must pass.
    use super::*;

    pub(crate) fn conformance(b: &dyn Backend) {
        b.create().unwrap();
        assert!(b.list(FileKind::Index).unwrap().is_empty());
        let name = "ab".to_string() + &"0".repeat(62);
        b.write(FileKind::Pack, &name, b"0123456789", WriteSync::Deferred)
            .unwrap();
        assert!(b.exists(FileKind::Pack, &name).unwrap());
        assert_eq!(b.list(FileKind::Pack).unwrap(), vec![(name.clone(), 10)]);
        assert_eq!(b.read(FileKind::Pack, &name).unwrap(), b"0123456789");
        assert_eq!(b.read_range(FileKind::Pack, &name, 3, 4).unwrap(), b"3456");
        assert!(
            b.read_range(FileKind::Pack, &name, 8, 4).is_err(),
            "short read must fail"
        );
        b.write(FileKind::Pack, &name, b"new", WriteSync::Now)
            .unwrap();
        assert_eq!(b.read(FileKind::Pack, &name).unwrap(), b"new");
        b.sync_all().unwrap();
        b.write(FileKind::Config, "", b"{}", WriteSync::Now)
            .unwrap();
        assert_eq!(b.read(FileKind::Config, "").unwrap(), b"{}");
        assert!(
            b.create().is_err(),
            "create on a location holding a repository must fail"
        );
        assert!(b.modified(FileKind::Pack, &name).unwrap().is_some());
        b.delete(FileKind::Pack, &name).unwrap();
        b.delete(FileKind::Pack, &name).unwrap();
        b.sync_deletes(FileKind::Pack).unwrap();
        assert!(!b.exists(FileKind::Pack, &name).unwrap());
        assert_eq!(b.modified(FileKind::Pack, &name).unwrap(), None);
        assert!(b.read(FileKind::Snapshot, "missing").is_err());
    }

    #[test]
    fn local_backend_conforms() {
        let dir = tempfile::tempdir().unwrap();
        conformance(&LocalBackend::new(dir.path().join("repo")));
    }

    #[test]
    fn small_files_are_read_with_a_bound() {
        // Regression (engine review finding 18): a planted multi-GiB lock or
        // key file made every command run out of memory.
        let dir = tempfile::tempdir().unwrap();
        let b = LocalBackend::new(dir.path());
        b.create().unwrap();
        let big = vec![b' '; MAX_SMALL_FILE as usize + 1];
        fs::write(dir.path().join("locks/big"), &big).unwrap();
        let err = b.read(FileKind::Lock, "big").unwrap_err();
        assert!(err.to_string().contains("larger than"), "{err}");
        fs::write(dir.path().join("locks/ok"), b"{}").unwrap();
        assert_eq!(b.read(FileKind::Lock, "ok").unwrap(), b"{}");
        // Packs are not small files.
        let name = "cd".to_string() + &"1".repeat(62);
        b.write(FileKind::Pack, &name, &big, WriteSync::Deferred)
            .unwrap();
        assert_eq!(b.read(FileKind::Pack, &name).unwrap().len(), big.len());
    }

    /// Found by the fuzz harness (a 256 MiB allocation after some million
    /// deferred writes of one file): the files awaiting a sync are
    /// remembered once each, and a deleted one is forgotten, so a process
    /// that never syncs (sync level `none`) does not grow without bound.
    #[test]
    fn deferred_writes_are_remembered_once_per_file() {
        let dir = tempfile::tempdir().unwrap();
        let b = LocalBackend::new(dir.path());
        b.create().unwrap();
        let name = "ab".to_string() + &"3".repeat(62);
        for _ in 0..1000 {
            b.write(FileKind::Snapshot, &name, b"m", WriteSync::Deferred)
                .unwrap();
        }
        assert_eq!(b.pending.lock().unwrap().len(), 1);
        b.delete(FileKind::Snapshot, &name).unwrap();
        assert!(b.pending.lock().unwrap().is_empty());
    }

    #[test]
    fn a_sync_waits_for_the_one_in_flight() {
        // Regression (engine review finding 8): a second session's sync_all
        // returned at once when the first had taken the pending list, so its
        // manifest could be durable before its packs.
        let dir = tempfile::tempdir().unwrap();
        let b = std::sync::Arc::new(LocalBackend::new(dir.path()));
        b.create().unwrap();
        let name = "ef".to_string() + &"2".repeat(62);
        b.write(FileKind::Pack, &name, b"data", WriteSync::Deferred)
            .unwrap();
        // Simulate the first session's sync in flight: the pending list is
        // taken and the sync lock held.
        let guard = b.syncing.lock().unwrap();
        let taken = std::mem::take(&mut *b.pending.lock().unwrap());
        assert_eq!(taken.len(), 1);
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let t = {
            let (b, done) = (b.clone(), done.clone());
            std::thread::spawn(move || {
                b.sync_all().unwrap();
                done.store(true, std::sync::atomic::Ordering::SeqCst);
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            !done.load(std::sync::atomic::Ordering::SeqCst),
            "sync_all returned while another sync of its writes was in flight"
        );
        drop(guard);
        t.join().unwrap();
        assert!(done.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn temporary_files_are_invisible_and_removable() {
        let dir = tempfile::tempdir().unwrap();
        let b = LocalBackend::new(dir.path());
        b.create().unwrap();
        fs::write(dir.path().join("index/.tmp-123"), b"x").unwrap();
        fs::write(dir.path().join("data/00/.tmp-456"), b"x").unwrap();
        assert!(b.list(FileKind::Index).unwrap().is_empty());
        assert_eq!(b.remove_temporary().unwrap(), 2);
        assert_eq!(b.remove_temporary().unwrap(), 0);
    }
}
