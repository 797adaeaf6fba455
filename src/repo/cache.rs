//! A local cache of a served repository's immutable metadata, so that an
//! incremental backup over the network moves only what changed.
//!
//! What it keeps, per repository (`BASE/repos/<repository id>/`):
//!
//! - `index/NAME` and `snapshots/NAME`: whole files, exactly as stored. Their
//!   names are the BLAKE3 of their bytes, so an entry is checked against its
//!   name on every read and a damaged one is dropped and fetched again.
//! - `trees/PACK`: a sparse shadow of pack `PACK` holding only its tree
//!   blobs, each at its offset in the pack (the rest is a hole, which costs
//!   no disk). One file per pack, not per tree: thousands of small files
//!   cost a first backup more than the trees are worth. A tree read from
//!   here is opened with the repository's key (authenticated encryption and
//!   the blob's id are checked), so a hole, a torn write or damage fails to
//!   open and the tree is fetched again and written over it. Shadows of
//!   packs the index no longer names are removed.
//!
//! Entries are written when the client writes the file or pack itself (an
//! agent's second backup reads nothing it wrote in its first) and when it
//! reads one it lacked. Nothing here is secret beyond what the repository
//! holds: every entry is the repository's own ciphertext.
//!
//! The cache only ever saves reads; it never decides what exists. Listings
//! always go to the repository, and entries of files the listing no longer
//! names are removed ([`Cache::retain`]). Commands that check the repository
//! (`verify`, `prune`, `repair`) do not use it.

use std::collections::HashSet;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::backend::FileKind;
use crate::id::{PackId, RepoId};

/// The cache of one repository.
#[derive(Debug)]
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    /// The cache of repository `repo` below `base` (created, 0700).
    pub fn open(base: &Path, repo: &RepoId) -> std::io::Result<Cache> {
        let root = base.join("repos").join(repo.to_hex());
        for sub in ["index", "snapshots", "trees"] {
            create_private_dir(&root.join(sub))?;
        }
        let tag = base.join("CACHEDIR.TAG");
        if !tag.exists() {
            // Backup tools that honour the convention (vouch's
            // --exclude-caches among them) skip the cache.
            let _ = std::fs::write(
                &tag,
                "Signature: 8a477f597d28d172789f06886806bc55\n# vouch's cache of served repositories: safe to delete.\n",
            );
        }
        Ok(Cache { root })
    }

    fn dir(&self, kind: FileKind) -> Option<PathBuf> {
        match kind {
            FileKind::Index => Some(self.root.join("index")),
            FileKind::Snapshot => Some(self.root.join("snapshots")),
            _ => None,
        }
    }

    /// The cached bytes of an index or snapshot file, if present and they
    /// still hash to `name`.
    pub fn file(&self, kind: FileKind, name: &str) -> Option<Vec<u8>> {
        let path = self.dir(kind)?.join(checked(name)?);
        let bytes = std::fs::read(&path).ok()?;
        if blake3::hash(&bytes).to_hex().as_str() == name {
            Some(bytes)
        } else {
            tracing::warn!(file = %path.display(), "dropping a damaged cache entry");
            let _ = std::fs::remove_file(&path);
            None
        }
    }

    /// Keeps a copy of an index or snapshot file. Best effort: a cache that
    /// cannot be written only costs a later read.
    pub fn put_file(&self, kind: FileKind, name: &str, bytes: &[u8]) {
        if let (Some(dir), Some(name)) = (self.dir(kind), checked(name)) {
            write_atomically(&dir.join(name), &[bytes]);
        }
    }

    /// Removes the cached files of `kind` that `live` (the repository's
    /// current listing) no longer names: forgotten snapshots, index files
    /// replaced by a prune.
    pub fn retain(&self, kind: FileKind, live: &HashSet<String>) {
        let Some(dir) = self.dir(kind) else { return };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            if !live.contains(name.to_string_lossy().as_ref()) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    fn shadow_path(&self, pack: &PackId) -> PathBuf {
        self.root.join("trees").join(pack.to_hex())
    }

    /// The `length` bytes at `offset` of pack `pack`'s shadow, if it has a
    /// shadow that long (a hole reads as zeros and fails to open).
    pub fn tree(&self, pack: &PackId, offset: u64, length: usize) -> Option<Vec<u8>> {
        let f = std::fs::File::open(self.shadow_path(pack)).ok()?;
        let mut buf = vec![0u8; length];
        f.read_exact_at(&mut buf, offset).ok()?;
        Some(buf)
    }

    /// Writes sealed trees into pack `pack`'s shadow, each at its offset.
    pub fn put_trees<'a>(&self, pack: &PackId, trees: impl IntoIterator<Item = (u64, &'a [u8])>) {
        let path = self.shadow_path(pack);
        let result = (|| -> std::io::Result<()> {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(false)
                .open(&path)?;
            for (offset, sealed) in trees {
                f.write_all_at(sealed, offset)?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            tracing::debug!(file = %path.display(), "trees not cached: {e}");
        }
    }

    /// Removes the shadows of packs not in `live` (gone after a prune).
    pub fn retain_packs(&self, live: &HashSet<PackId>) {
        let Ok(entries) = std::fs::read_dir(self.root.join("trees")) else {
            return;
        };
        for e in entries.flatten() {
            let keep = e
                .file_name()
                .to_str()
                .and_then(|n| PackId::from_hex(n).ok())
                .is_some_and(|p| live.contains(&p));
            if !keep {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// `name` if it is a plain file name (64 lowercase hex digits), so that no
/// name from a listing can point outside the cache.
fn checked(name: &str) -> Option<&str> {
    (name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then_some(name)
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

/// Writes through a temporary file and a rename, so a reader never sees a
/// partial entry (and one that is partial after a crash fails its check).
fn write_atomically(path: &Path, parts: &[&[u8]]) {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        for p in parts {
            f.write_all(p)?;
        }
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        tracing::debug!(file = %path.display(), "not cached: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> (tempfile::TempDir, Cache) {
        let dir = tempfile::tempdir().unwrap();
        let c = Cache::open(dir.path(), &RepoId([7; 32])).unwrap();
        (dir, c)
    }

    #[test]
    fn a_file_reads_back_only_while_it_matches_its_name() {
        let (_d, c) = cache();
        let bytes = b"an index file".to_vec();
        let name = blake3::hash(&bytes).to_hex().to_string();
        assert_eq!(c.file(FileKind::Index, &name), None);
        c.put_file(FileKind::Index, &name, &bytes);
        assert_eq!(c.file(FileKind::Index, &name), Some(bytes.clone()));
        // Not another kind's entry.
        assert_eq!(c.file(FileKind::Snapshot, &name), None);
        // Damage is noticed and the entry dropped.
        let path = c.dir(FileKind::Index).unwrap().join(&name);
        std::fs::write(&path, b"an index filE").unwrap();
        assert_eq!(c.file(FileKind::Index, &name), None);
        assert!(!path.exists(), "the damaged entry is removed");
    }

    #[test]
    fn names_that_are_not_ids_are_neither_read_nor_written() {
        let (d, c) = cache();
        c.put_file(FileKind::Index, "../../escape", b"x");
        assert!(!d.path().join("escape").exists());
        assert_eq!(c.file(FileKind::Index, "../../escape"), None);
        c.put_file(FileKind::Pack, &"a".repeat(64), b"x");
        assert_eq!(c.file(FileKind::Pack, &"a".repeat(64)), None);
    }

    #[test]
    fn retain_drops_what_the_listing_no_longer_names() {
        let (_d, c) = cache();
        let names: Vec<String> = (0..3u8)
            .map(|i| {
                let b = vec![i; 10];
                let n = blake3::hash(&b).to_hex().to_string();
                c.put_file(FileKind::Snapshot, &n, &b);
                n
            })
            .collect();
        let live: HashSet<String> = names[1..].iter().cloned().collect();
        c.retain(FileKind::Snapshot, &live);
        assert_eq!(c.file(FileKind::Snapshot, &names[0]), None);
        assert!(c.file(FileKind::Snapshot, &names[1]).is_some());
        assert!(c.file(FileKind::Snapshot, &names[2]).is_some());
    }

    #[test]
    fn trees_sit_at_their_offsets_in_a_sparse_shadow_of_their_pack() {
        let (_d, c) = cache();
        let (p1, p2) = (PackId([2; 32]), PackId([3; 32]));
        c.put_trees(&p1, [(10, &b"first"[..]), (1 << 20, &b"second"[..])]);
        assert_eq!(c.tree(&p1, 10, 5).as_deref(), Some(&b"first"[..]));
        assert_eq!(c.tree(&p1, 1 << 20, 6).as_deref(), Some(&b"second"[..]));
        // A hole reads as zeros (which no sealed tree is), past the end as
        // nothing; another pack has no shadow.
        assert_eq!(c.tree(&p1, 100, 4).as_deref(), Some(&[0u8; 4][..]));
        assert_eq!(c.tree(&p1, 2 << 20, 4), None);
        assert_eq!(c.tree(&p2, 10, 5), None);
        let shadow = c.shadow_path(&p1);
        let meta = std::fs::metadata(&shadow).unwrap();
        assert!(
            std::os::unix::fs::MetadataExt::blocks(&meta) * 512 < 256 * 1024,
            "the hole costs no disk"
        );
        c.retain_packs(&[p2].into_iter().collect());
        assert_eq!(
            c.tree(&p1, 10, 5),
            None,
            "a pack gone from the index loses its shadow"
        );
    }
}
