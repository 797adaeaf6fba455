//! Storage backends: the one small trait the engine writes through, and the
//! local-directory implementation. An HTTP or S3 backend implements the same
//! trait and passes the same conformance tests (`backend::tests`).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
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
}

impl FileKind {
    /// All kinds that live in a directory of their own.
    pub const DIRS: [FileKind; 5] = [
        FileKind::Key,
        FileKind::Pack,
        FileKind::Index,
        FileKind::Snapshot,
        FileKind::Lock,
    ];

    fn dir(self) -> &'static str {
        match self {
            FileKind::Config => "",
            FileKind::Key => "keys",
            FileKind::Pack => "data",
            FileKind::Index => "index",
            FileKind::Snapshot => "snapshots",
            FileKind::Lock => "locks",
        }
    }
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
    /// `length` bytes at `offset`; an error if the file is shorter.
    fn read_range(&self, kind: FileKind, name: &str, offset: u64, length: usize)
        -> Result<Vec<u8>>;
    /// Atomically creates or replaces a file.
    fn write(&self, kind: FileKind, name: &str, data: &[u8], sync: WriteSync) -> Result<()>;
    /// Removes a file; removing a missing file is not an error.
    fn delete(&self, kind: FileKind, name: &str) -> Result<()>;
    /// Makes every write done through this handle durable.
    fn sync_all(&self) -> Result<()>;
    /// Removes temporary files left by interrupted writers; returns how many.
    fn remove_temporary(&self) -> Result<usize>;
}

/// A repository in a local directory.
pub struct LocalBackend {
    root: PathBuf,
    /// Files written with deferred sync since the last `sync_all`.
    pending: Mutex<Vec<PathBuf>>,
}

impl LocalBackend {
    /// A backend rooted at `root` (not checked).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            pending: Mutex::new(Vec::new()),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, kind: FileKind, name: &str) -> PathBuf {
        match kind {
            FileKind::Config => self.root.join("config"),
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
            FileKind::Config => vec![self.root.clone()],
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
        if kind == FileKind::Config {
            let size = fs::metadata(self.path(kind, "")).map(|m| m.len()).ok();
            return Ok(size
                .map(|s| ("config".to_string(), s))
                .into_iter()
                .collect());
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
        fs::read(&p).ctx(|| format!("reading {}", p.display()))
    }

    fn read_range(
        &self,
        kind: FileKind,
        name: &str,
        offset: u64,
        length: usize,
    ) -> Result<Vec<u8>> {
        let p = self.path(kind, name);
        let mut f = File::open(&p).ctx(|| format!("opening {}", p.display()))?;
        f.seek(SeekFrom::Start(offset))
            .ctx(|| format!("seeking in {}", p.display()))?;
        let mut buf = vec![0u8; length];
        f.read_exact(&mut buf)
            .ctx(|| format!("reading {length} bytes at {offset} of {}", p.display()))?;
        Ok(buf)
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
                // ones) is recreated.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    fs::create_dir_all(&dir).ctx(|| format!("creating {}", dir.display()))?;
                    open()
                }
                other => other,
            }
            .ctx(|| format!("creating {}", tmp.display()))?;
            f.write_all(data)
                .ctx(|| format!("writing {}", path.display()))?;
            if sync == WriteSync::Now {
                f.sync_data()
                    .ctx(|| format!("syncing {}", path.display()))?;
            }
            drop(f);
            fs::rename(&tmp, &path).ctx(|| format!("renaming into {}", path.display()))
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result?;
        if sync == WriteSync::Now {
            sync_dir(&dir)?;
        } else if let Ok(mut pending) = self.pending.lock() {
            pending.push(path);
        }
        Ok(())
    }

    fn delete(&self, kind: FileKind, name: &str) -> Result<()> {
        let p = self.path(kind, name);
        match fs::remove_file(&p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("deleting {}", p.display()), e)),
        }
    }

    fn sync_all(&self) -> Result<()> {
        let pending = match self.pending.lock() {
            Ok(mut p) => std::mem::take(&mut *p),
            Err(_) => Vec::new(),
        };
        if pending.is_empty() {
            return Ok(());
        }
        #[cfg(target_os = "linux")]
        {
            // One syncfs for the whole session: data, inodes and directory
            // entries of everything written (PBS's "filesystem" level).
            let dir = File::open(&self.root).ctx(|| format!("opening {}", self.root.display()))?;
            use std::os::fd::AsRawFd;
            // SAFETY: syncfs only reads the valid descriptor we own.
            let rc = unsafe { libc::syncfs(dir.as_raw_fd()) };
            if rc != 0 {
                return Err(Error::io(
                    "syncing the repository file system",
                    std::io::Error::last_os_error(),
                ));
            }
            Ok(())
        }
        #[cfg(not(target_os = "linux"))]
        {
            let mut dirs = std::collections::BTreeSet::new();
            for p in &pending {
                File::open(p)
                    .and_then(|f| f.sync_all())
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
mod tests {
    //! The conformance suite every backend must pass.
    use super::*;

    fn conformance(b: &dyn Backend) {
        b.create().unwrap();
        assert!(
            b.create().is_err(),
            "create on a non-empty location must fail"
        );
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
        b.delete(FileKind::Pack, &name).unwrap();
        b.delete(FileKind::Pack, &name).unwrap();
        assert!(!b.exists(FileKind::Pack, &name).unwrap());
        assert!(b.read(FileKind::Snapshot, "missing").is_err());
    }

    #[test]
    fn local_backend_conforms() {
        let dir = tempfile::tempdir().unwrap();
        conformance(&LocalBackend::new(dir.path().join("repo")));
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
