//! The workload: the trees the plans back up, changed between runs, and
//! every version of each kept as a digest, so that a restored snapshot can
//! be compared with what was really there.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::Rng;

/// One entry of a tree as the comparison sees it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Entry {
    /// A directory and its permission bits.
    Dir(u32),
    /// A regular file: permission bits, size and the BLAKE3 of its bytes.
    File(u32, u64, [u8; 32]),
    /// A symbolic link and its target.
    Symlink(PathBuf),
}

/// A tree's entries by path relative to its root (the root itself left
/// out: restore sets its mode from the snapshot and the comparison is of
/// what is inside).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeDigest(pub BTreeMap<PathBuf, Entry>);

impl TreeDigest {
    /// Reads a tree; sockets, fifos and devices are skipped (the workload
    /// makes none).
    pub fn of(root: &Path) -> std::io::Result<TreeDigest> {
        let mut out = BTreeMap::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in fs::read_dir(&dir)? {
                let e = e?;
                let path = e.path();
                let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
                let meta = fs::symlink_metadata(&path)?;
                let mode = meta.permissions().mode() & 0o7777;
                let ft = meta.file_type();
                if ft.is_symlink() {
                    out.insert(rel, Entry::Symlink(fs::read_link(&path)?));
                } else if ft.is_dir() {
                    out.insert(rel, Entry::Dir(mode));
                    stack.push(path);
                } else if ft.is_file() {
                    let mut h = blake3::Hasher::new();
                    h.update_reader(fs::File::open(&path)?)?;
                    out.insert(rel, Entry::File(mode, meta.len(), *h.finalize().as_bytes()));
                }
            }
        }
        Ok(TreeDigest(out))
    }

    /// One hash of the whole listing, to name a version in reports.
    pub fn id(&self) -> String {
        let mut h = blake3::Hasher::new();
        for (p, e) in &self.0 {
            h.update(p.as_os_str().as_encoded_bytes());
            h.update(format!("{e:?}").as_bytes());
        }
        h.finalize().to_hex()[..16].to_owned()
    }

    /// What differs from `other`, at most `max` paths, for a report.
    pub fn differences(&self, other: &TreeDigest, max: usize) -> Vec<String> {
        let mut out = Vec::new();
        for (p, e) in &self.0 {
            match other.0.get(p) {
                None => out.push(format!("{}: only in the restore", p.display())),
                Some(o) if o != e => out.push(format!("{}: {e:?} against {o:?}", p.display())),
                _ => {}
            }
        }
        for p in other.0.keys().filter(|p| !self.0.contains_key(*p)) {
            out.push(format!("{}: missing from the restore", p.display()));
        }
        out.truncate(max);
        out
    }
}

/// A tree the workload owns, and the digests of every version it had.
pub struct Tree {
    /// Its root (the plan's source).
    pub root: PathBuf,
    /// Every version's digest, oldest first.
    pub versions: Vec<TreeDigest>,
    counter: u64,
}

impl Tree {
    /// A new generated tree of about `files` files below `root`.
    pub fn generate(root: &Path, files: usize, rng: &mut Rng) -> std::io::Result<Tree> {
        fs::create_dir_all(root)?;
        let mut t = Tree {
            root: root.to_path_buf(),
            versions: Vec::new(),
            counter: 0,
        };
        for _ in 0..files {
            t.add_file(rng)?;
        }
        // Dangling unless f0 landed in d0: restore keeps either.
        symlink("d0/f0", root.join("link-to-first"))?;
        t.snapshot_version()?;
        Ok(t)
    }

    /// A copy of a real directory (regular files, directories and
    /// symlinks), at most `max_files` files and `max_bytes` bytes.
    pub fn copy_of(
        from: &Path,
        root: &Path,
        max_files: usize,
        max_bytes: u64,
    ) -> std::io::Result<Tree> {
        fs::create_dir_all(root)?;
        let (mut files, mut bytes) = (0usize, 0u64);
        let mut stack = vec![from.to_path_buf()];
        'walk: while let Some(dir) = stack.pop() {
            let mut entries: Vec<_> = fs::read_dir(&dir)?.flatten().map(|e| e.path()).collect();
            entries.sort();
            for path in entries {
                let rel = path.strip_prefix(from).unwrap_or(&path);
                let to = root.join(rel);
                let Ok(meta) = fs::symlink_metadata(&path) else {
                    continue;
                };
                if meta.file_type().is_symlink() {
                    if let Ok(target) = fs::read_link(&path) {
                        symlink(target, &to)?;
                    }
                } else if meta.is_dir() {
                    fs::create_dir_all(&to)?;
                    stack.push(path);
                } else if meta.is_file() {
                    if files >= max_files || bytes + meta.len() > max_bytes {
                        break 'walk;
                    }
                    // Unreadable files (permissions) are left out.
                    if fs::copy(&path, &to).is_ok() {
                        files += 1;
                        bytes += meta.len();
                    }
                }
            }
        }
        let mut t = Tree {
            root: root.to_path_buf(),
            versions: Vec::new(),
            counter: 0,
        };
        t.snapshot_version()?;
        Ok(t)
    }

    /// Changes the tree a little (1 to 8 operations: new files, rewrites
    /// in place, truncation, deletion, renames, new directories and
    /// symlinks) and records the new version. Returns what it did.
    pub fn mutate(&mut self, rng: &mut Rng) -> std::io::Result<Vec<String>> {
        let mut done = Vec::new();
        for _ in 0..1 + rng.below(8) {
            let files = self.files();
            let op = if files.len() < 8 { 0 } else { rng.below(7) };
            let pick = |rng: &mut Rng| files[rng.below(files.len() as u64) as usize].clone();
            match op {
                0 | 1 => done.push(format!("add {}", self.add_file(rng)?.display())),
                2 => {
                    let f = pick(rng);
                    let len = fs::metadata(&f)?.len();
                    let mut buf = vec![0u8; 1 + rng.below(64 * 1024) as usize];
                    rng.fill(&mut buf);
                    let at = rng.below(len + 1);
                    use std::os::unix::fs::FileExt;
                    fs::OpenOptions::new()
                        .write(true)
                        .open(&f)?
                        .write_all_at(&buf, at)?;
                    done.push(format!("rewrite {} at {at}", self.rel(&f)));
                }
                3 => {
                    let f = pick(rng);
                    let len = fs::metadata(&f)?.len();
                    fs::OpenOptions::new()
                        .write(true)
                        .open(&f)?
                        .set_len(len / 2)?;
                    done.push(format!("truncate {}", self.rel(&f)));
                }
                4 => {
                    let f = pick(rng);
                    fs::remove_file(&f)?;
                    done.push(format!("delete {}", self.rel(&f)));
                }
                5 => {
                    let f = pick(rng);
                    let dir = self.root.join(format!("d{}", rng.below(6)));
                    fs::create_dir_all(&dir)?;
                    self.counter += 1;
                    let to = dir.join(format!("moved{}", self.counter));
                    fs::rename(&f, &to)?;
                    done.push(format!("rename {} to {}", self.rel(&f), self.rel(&to)));
                }
                _ => {
                    let f = pick(rng);
                    self.counter += 1;
                    let link = self.root.join(format!("link{}", self.counter));
                    symlink(f.strip_prefix(&self.root).unwrap_or(&f), &link)?;
                    fs::set_permissions(
                        &f,
                        fs::Permissions::from_mode(0o600 | (rng.below(2) as u32) << 5),
                    )?;
                    done.push(format!("symlink {}", self.rel(&link)));
                }
            }
        }
        self.snapshot_version()?;
        Ok(done)
    }

    /// The digest of the tree as it is now, recorded as its newest version
    /// (a version equal to the newest is not recorded twice).
    pub fn snapshot_version(&mut self) -> std::io::Result<()> {
        let d = TreeDigest::of(&self.root)?;
        if self.versions.last() != Some(&d) {
            self.versions.push(d);
        }
        Ok(())
    }

    fn rel(&self, p: &Path) -> String {
        p.strip_prefix(&self.root)
            .unwrap_or(p)
            .display()
            .to_string()
    }

    fn files(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![self.root.clone()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).into_iter().flatten().flatten() {
                let Ok(ft) = e.file_type() else { continue };
                if ft.is_dir() {
                    stack.push(e.path());
                } else if ft.is_file() {
                    out.push(e.path());
                }
            }
        }
        out.sort();
        out
    }

    /// A new file: mostly small, some of a few hundred KiB, now and then
    /// 2 MiB; random (incompressible) or repetitive text.
    fn add_file(&mut self, rng: &mut Rng) -> std::io::Result<PathBuf> {
        let dir = self.root.join(format!("d{}", rng.below(6)));
        fs::create_dir_all(&dir)?;
        let name = format!("f{}", self.counter);
        self.counter += 1;
        let size = match rng.below(20) {
            0 => 2 << 20,
            1..=5 => 64 * 1024 + rng.below(256 * 1024),
            _ => rng.below(16 * 1024),
        } as usize;
        let mut data = vec![0u8; size];
        if rng.below(2) == 0 {
            rng.fill(&mut data);
        } else {
            let line = format!("line of {name}, {} of the chaos workload\n", rng.next_u64());
            for (i, b) in data.iter_mut().enumerate() {
                *b = line.as_bytes()[i % line.len()];
            }
        }
        let path = dir.join(name);
        let mut f = fs::File::create(&path)?;
        f.write_all(&data)?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_follow_changes_and_differences_name_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng::new(3);
        let mut t = Tree::generate(&dir.path().join("t"), 20, &mut rng).unwrap();
        assert_eq!(t.versions.len(), 1);
        let first = t.versions[0].clone();
        assert!(first.0.len() > 20, "files, directories and the link");
        for _ in 0..5 {
            t.mutate(&mut rng).unwrap();
        }
        assert!(t.versions.len() > 1);
        let now = TreeDigest::of(&t.root).unwrap();
        assert_eq!(t.versions.last(), Some(&now));
        assert!(!first.differences(&now, 10).is_empty());
        assert_ne!(first.id(), now.id());
        // The same seed makes the same trees.
        let mut again = Tree::generate(&dir.path().join("u"), 20, &mut Rng::new(3)).unwrap();
        assert_eq!(again.versions[0], first);
        again.mutate(&mut Rng::new(9)).unwrap();
    }
}
