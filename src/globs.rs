//! Glob patterns as backups, restores' rewrites and `find` read them: a
//! pattern with a `/` matches a whole path (`*` stops at `/`, `**` crosses
//! it), any other matches a name.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::error::{Error, Result};

/// Compiled patterns: those matched against a name, and those matched
/// against a whole path (`None` when there are none of a kind).
pub struct NameAndPathGlobs {
    /// Patterns without `/`.
    pub names: Option<GlobSet>,
    /// Patterns with `/`.
    pub paths: Option<GlobSet>,
}

/// Compiles `(pattern, ignore_case)` pairs; an error names the bad
/// pattern, `what` saying what kind it is ("exclude pattern").
pub fn compile<'a>(
    patterns: impl IntoIterator<Item = (&'a str, bool)>,
    what: &str,
) -> Result<NameAndPathGlobs> {
    let mut names = GlobSetBuilder::new();
    let mut paths = GlobSetBuilder::new();
    let (mut n_names, mut n_paths) = (0, 0);
    for (p, ignore_case) in patterns {
        let glob = GlobBuilder::new(p.trim_end_matches('/'))
            .literal_separator(true)
            .backslash_escape(true)
            .case_insensitive(ignore_case)
            .build()
            .map_err(|e| Error::InvalidArgument(format!("bad {what} {p:?}: {e}")))?;
        if p.contains('/') {
            paths.add(glob);
            n_paths += 1;
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
            .map_err(|e| Error::InvalidArgument(format!("bad {what}s: {e}")))
    };
    Ok(NameAndPathGlobs {
        names: build(names, n_names)?,
        paths: build(paths, n_paths)?,
    })
}
