//! Exclusion rules of a backup: glob patterns, cache directories and paths.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use globset::GlobSet;

use crate::error::{Error, IoContext, Result};

/// The signature a `CACHEDIR.TAG` file starts with (bford.info/cachedir).
pub const CACHEDIR_SIGNATURE: &[u8] = b"Signature: 8a477f597d28d172789f06886806bc55";

/// Compiled exclusion rules.
#[derive(Debug, Default)]
pub struct Excludes {
    by_name: Option<GlobSet>,
    by_path: Option<GlobSet>,
    /// Excluded paths, resolved (`realpath`), plus after [`Excludes::anchor`]
    /// the same paths as the walk spells them below each source. Everything
    /// at or below one of them is excluded.
    paths: Vec<PathBuf>,
    /// `(st_dev, st_ino)` of the excluded paths that exist: catches the
    /// same directory reached by another name (a bind mount, say).
    identities: Vec<(u64, u64)>,
    /// Skip the contents of directories tagged with `CACHEDIR.TAG`.
    pub caches: bool,
    /// Skip the contents of directories holding a file of one of these
    /// names (the marker itself is kept, as `CACHEDIR.TAG` is).
    pub if_present: Vec<OsString>,
    /// Leave out regular files larger than this many bytes.
    pub larger_than: Option<u64>,
}

impl Excludes {
    /// Compiles patterns: a pattern with a `/` matches the absolute path
    /// (`*` stops at `/`, `**` crosses it), any other matches the file name;
    /// `ipatterns` likewise, ignoring case.
    pub fn new(
        patterns: &[String],
        ipatterns: &[String],
        exclude_files: &[PathBuf],
        caches: bool,
        paths: Vec<PathBuf>,
    ) -> Result<Self> {
        let mut all: Vec<(String, bool)> = patterns.iter().map(|p| (p.clone(), false)).collect();
        all.extend(ipatterns.iter().map(|p| (p.clone(), true)));
        for f in exclude_files {
            let text = std::fs::read_to_string(f)
                .ctx(|| format!("reading exclude file {}", f.display()))?;
            all.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(|l| (l.to_string(), false)),
            );
        }
        let globs = crate::globs::compile(
            all.iter()
                .map(|(p, ignore_case)| (p.as_str(), *ignore_case)),
            "exclude pattern",
        )?;
        let paths: Vec<PathBuf> = paths.iter().map(|p| resolve(p)).collect();
        let identities = paths
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| (m.dev(), m.ino()))
            .collect();
        Ok(Self {
            by_name: globs.names,
            by_path: globs.paths,
            paths,
            identities,
            caches,
            if_present: Vec::new(),
            larger_than: None,
        })
    }

    /// Also skips the contents of directories holding a file named one of
    /// `names` (a plain name each: no `/`, not `.` or `..`).
    pub fn with_markers(mut self, names: &[String]) -> Result<Self> {
        for n in names {
            if n.is_empty() || n.contains('/') || n == "." || n == ".." || n.contains('\0') {
                return Err(Error::InvalidArgument(format!(
                    "exclude-if-present takes a file name, not {n:?}"
                )));
            }
            self.if_present.push(OsString::from(n));
        }
        Ok(self)
    }

    /// Also leaves out regular files larger than `bytes`.
    pub fn with_size_limit(mut self, bytes: Option<u64>) -> Self {
        self.larger_than = bytes;
        self
    }

    /// Whether a regular file of this `lstat` is too large to back up.
    pub fn too_large(&self, meta: &std::fs::Metadata) -> bool {
        matches!(self.larger_than, Some(limit) if meta.is_file() && meta.len() > limit)
    }

    /// Makes the excluded paths match the walk of `sources` (absolute,
    /// normalised, as the walker spells them): a source reached through a
    /// symlinked parent directory, or a repository given as `../r` or
    /// through a symlink, is compared by its resolved path, and each
    /// excluded path below a source is added as that source spells it. The
    /// walker follows no symlink below a source, so this covers the walk.
    pub fn anchor(&mut self, sources: &[PathBuf]) {
        let mut extra = Vec::new();
        for source in sources {
            // The source itself is not followed (a symlink stays a symlink),
            // only its parent directories are resolved.
            let resolved = match (source.parent(), source.file_name()) {
                (Some(parent), Some(name)) => resolve(parent).join(name),
                _ => source.clone(),
            };
            for p in &self.paths {
                if let Ok(rest) = p.strip_prefix(&resolved) {
                    extra.push(source.join(rest));
                } else if resolved.starts_with(p) {
                    // The source lies inside an excluded path.
                    extra.push(source.clone());
                }
            }
        }
        for p in extra {
            if !self.paths.contains(&p) {
                self.paths.push(p);
            }
        }
    }

    /// Whether `path` (absolute) is excluded.
    pub fn excluded(&self, path: &Path) -> bool {
        if self.paths.iter().any(|p| path.starts_with(p)) {
            return true;
        }
        if let (Some(set), Some(name)) = (&self.by_name, path.file_name()) {
            if set.is_match(Path::new(name)) {
                return true;
            }
        }
        matches!(&self.by_path, Some(set) if set.is_match(path))
    }

    /// Whether the entry with this `lstat` is one of the excluded paths
    /// under another name.
    pub fn excluded_identity(&self, meta: &std::fs::Metadata) -> bool {
        !self.identities.is_empty() && self.identities.contains(&(meta.dev(), meta.ino()))
    }

    /// If the directory's contents are skipped, the name of the marker
    /// that says so (a valid `CACHEDIR.TAG`, or a file named by
    /// [`Excludes::with_markers`]): only that entry of it is backed up, so a
    /// restore shows why the rest is missing.
    pub fn content_marker(&self, dir: &Path) -> Option<OsString> {
        if self.caches && is_cache_dir(dir) {
            return Some(OsString::from("CACHEDIR.TAG"));
        }
        self.if_present
            .iter()
            .find(|name| std::fs::symlink_metadata(dir.join(name)).is_ok())
            .cloned()
    }
}

/// Whether `dir` holds a `CACHEDIR.TAG` with the signature.
fn is_cache_dir(dir: &Path) -> bool {
    let mut buf = [0u8; CACHEDIR_SIGNATURE.len()];
    std::fs::File::open(dir.join("CACHEDIR.TAG"))
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf))
        .map(|_| buf == CACHEDIR_SIGNATURE)
        .unwrap_or(false)
}

/// `realpath` of `p`, or, if it does not exist (yet), its absolute form
/// without `.` and `..` (resolving the longest existing prefix).
fn resolve(p: &Path) -> PathBuf {
    if let Ok(r) = std::fs::canonicalize(p) {
        return r;
    }
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) if parent != abs => resolve(parent).join(name),
        _ => super::lexically_normal(&abs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths() {
        let e = Excludes::new(
            &["*.o".into(), "/src/tmp/*".into(), "/a/**/deep".into()],
            &["*.JPG".into(), "/Media/**".into()],
            &[],
            false,
            vec![PathBuf::from("/repo")],
        )
        .unwrap();
        assert!(e.excluded(Path::new("/x/y/z.o")));
        assert!(!e.excluded(Path::new("/x/y/z.c")));
        assert!(e.excluded(Path::new("/src/tmp/file")));
        assert!(
            !e.excluded(Path::new("/src/tmp/dir/file")),
            "* does not cross /"
        );
        assert!(e.excluded(Path::new("/a/b/c/deep")));
        assert!(e.excluded(Path::new("/repo")));
        // --iexclude ignores case, --exclude does not.
        assert!(e.excluded(Path::new("/x/photo.jpg")));
        assert!(e.excluded(Path::new("/x/PHOTO.Jpg")));
        assert!(e.excluded(Path::new("/media/a/b")));
        assert!(!e.excluded(Path::new("/x/y/z.O")));
        assert!(Excludes::new(&["[".into()], &[], &[], false, vec![]).is_err());
    }

    /// Engine review finding 18: the repository given as `../r` or through
    /// a symlink, and a source reached through a symlinked parent.
    #[test]
    fn review_finding_18_excluded_paths_are_compared_resolved() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let src = base.join("src");
        std::fs::create_dir_all(src.join("sub/repo")).unwrap();
        std::os::unix::fs::symlink(src.join("sub/repo"), base.join("repo-link")).unwrap();
        std::os::unix::fs::symlink(&src, base.join("src-link")).unwrap();
        for given in [
            src.join("sub/other/../repo"),
            base.join("repo-link"),
            src.join("sub/repo"),
        ] {
            let mut e = Excludes::new(&[], &[], &[], false, vec![given.clone()]).unwrap();
            e.anchor(&[src.clone(), base.join("src-link/sub")]);
            assert!(e.excluded(&src.join("sub/repo")), "{}", given.display());
            assert!(
                e.excluded(&src.join("sub/repo/data/x")),
                "{}",
                given.display()
            );
            assert!(
                e.excluded(&base.join("src-link/sub/repo")),
                "{}",
                given.display()
            );
            assert!(
                !e.excluded(&src.join("sub/repository")),
                "{}",
                given.display()
            );
            assert!(!e.excluded(&src.join("sub")), "{}", given.display());
            let m = std::fs::symlink_metadata(src.join("sub/repo")).unwrap();
            assert!(e.excluded_identity(&m));
            // A source inside the repository, named through the symlink.
            let mut e = Excludes::new(&[], &[], &[], false, vec![given.clone()]).unwrap();
            e.anchor(&[base.join("repo-link/data")]);
            assert!(
                e.excluded(&base.join("repo-link/data")),
                "{}",
                given.display()
            );
        }
    }
}
