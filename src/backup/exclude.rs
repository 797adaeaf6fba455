//! Exclusion rules of a backup: glob patterns, cache directories and paths.

use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::error::{Error, IoContext, Result};

/// The signature a `CACHEDIR.TAG` file starts with (bford.info/cachedir).
pub const CACHEDIR_SIGNATURE: &[u8] = b"Signature: 8a477f597d28d172789f06886806bc55";

/// Compiled exclusion rules.
#[derive(Debug, Default)]
pub struct Excludes {
    by_name: Option<GlobSet>,
    by_path: Option<GlobSet>,
    paths: Vec<PathBuf>,
    /// Skip the contents of directories tagged with `CACHEDIR.TAG`.
    pub caches: bool,
}

impl Excludes {
    /// Compiles patterns: a pattern with a `/` matches the absolute path
    /// (`*` stops at `/`, `**` crosses it), any other matches the file name.
    pub fn new(
        patterns: &[String],
        exclude_files: &[PathBuf],
        caches: bool,
        paths: Vec<PathBuf>,
    ) -> Result<Self> {
        let mut all: Vec<String> = patterns.to_vec();
        for f in exclude_files {
            let text = std::fs::read_to_string(f)
                .ctx(|| format!("reading exclude file {}", f.display()))?;
            all.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(String::from),
            );
        }
        let mut names = GlobSetBuilder::new();
        let mut full = GlobSetBuilder::new();
        let (mut n_names, mut n_full) = (0, 0);
        for p in &all {
            let glob = GlobBuilder::new(p.trim_end_matches('/'))
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| Error::InvalidArgument(format!("bad exclude pattern {p:?}: {e}")))?;
            if p.contains('/') {
                full.add(glob);
                n_full += 1;
            } else {
                names.add(glob);
                n_names += 1;
            }
        }
        let build = |b: GlobSetBuilder, n: usize| -> Result<Option<GlobSet>> {
            if n == 0 {
                return Ok(None);
            }
            b.build()
                .map(Some)
                .map_err(|e| Error::InvalidArgument(format!("bad exclude patterns: {e}")))
        };
        Ok(Self {
            by_name: build(names, n_names)?,
            by_path: build(full, n_full)?,
            paths,
            caches,
        })
    }

    /// Whether `path` (absolute) is excluded.
    pub fn excluded(&self, path: &Path) -> bool {
        if self.paths.iter().any(|p| p == path) {
            return true;
        }
        if let (Some(set), Some(name)) = (&self.by_name, path.file_name()) {
            if set.is_match(Path::new(name)) {
                return true;
            }
        }
        matches!(&self.by_path, Some(set) if set.is_match(path))
    }

    /// Whether the directory is a tagged cache directory.
    pub fn is_cache_dir(&self, dir: &Path) -> bool {
        if !self.caches {
            return false;
        }
        let mut buf = [0u8; CACHEDIR_SIGNATURE.len()];
        std::fs::File::open(dir.join("CACHEDIR.TAG"))
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf))
            .map(|_| buf == CACHEDIR_SIGNATURE)
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths() {
        let e = Excludes::new(
            &["*.o".into(), "/src/tmp/*".into(), "/a/**/deep".into()],
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
        assert!(Excludes::new(&["[".into()], &[], false, vec![]).is_err());
    }
}
