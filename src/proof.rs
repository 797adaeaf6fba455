//! Proof of one recovery point: a per-snapshot verification (its trees, its
//! blobs in the index, and a read-back of the data it added plus a share of
//! the rest) and a restore test (restore into a sandbox, then compare every
//! restored file with the manifest: size, mode, mtime, and each extent's
//! bytes against its content id).
//!
//! This is engine code: it knows nothing of jobs or events; the service's
//! workers turn its reports into events.

use std::collections::HashSet;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::format::{Node, NodeKind};
use crate::id::{BlobId, SnapshotId};
use crate::progress::Progress;
use crate::repo::{MasterIndex, Repository};
use crate::restore::{restore, RestoreOptions};
use crate::tree::walk;

/// How much data a point verification reads back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadBack {
    /// Only the blobs the point added (not in its parent).
    Added,
    /// The added blobs plus this share (1-100 %) of the others.
    AddedAndSample(u8),
    /// Every blob.
    All,
}

/// What a point verification found.
#[derive(Clone, Debug, Default)]
pub struct PointVerification {
    /// Blobs checked (trees loaded and data read back).
    pub blobs_checked: u64,
    /// Bytes read back.
    pub bytes_read: u64,
    /// Problems, for humans (empty: passed).
    pub damaged: Vec<String>,
}

fn data_blobs(repo: &Repository, index: &MasterIndex, root: &BlobId) -> Result<Vec<BlobId>> {
    let mut out = Vec::new();
    walk(repo, index, root, &mut |_, node| {
        if node.kind == NodeKind::File {
            out.extend(node.content.iter().filter_map(|e| e.blob));
        }
        Ok(true)
    })?;
    Ok(out)
}

/// Whether blob `id` falls in a `percent` sample (stable: the same blobs
/// are picked every time).
fn in_sample(id: &BlobId, percent: u8) -> bool {
    u32::from(id.0[0]) * 100 < u32::from(percent) * 256
}

/// Verifies one snapshot: every tree loads (decrypts and matches its id),
/// every data blob is in the index, and the chosen blobs read back.
pub fn verify_point(
    repo: &Repository,
    id: &SnapshotId,
    read_back: ReadBack,
    progress: &Progress,
    cancel: &dyn Fn() -> bool,
) -> Result<PointVerification> {
    let _guard = repo.lock(false, "verify")?;
    let manifest = repo.load_snapshot(id)?;
    let index = repo.load_index()?;
    let mut report = PointVerification::default();
    let blobs = match data_blobs(repo, &index, &manifest.tree) {
        Ok(b) => b,
        Err(e @ (Error::Damaged(_) | Error::CorruptMetadata { .. })) => {
            report.damaged.push(format!("tree unreadable: {e}"));
            return Ok(report);
        }
        Err(e) => return Err(e),
    };
    let parent_blobs: HashSet<BlobId> = match manifest.parent {
        Some(parent) if read_back != ReadBack::All => match repo.load_snapshot(&parent) {
            Ok(pm) => data_blobs(repo, &index, &pm.tree)
                .map(|v| v.into_iter().collect())
                .unwrap_or_default(),
            Err(_) => HashSet::new(),
        },
        _ => HashSet::new(),
    };
    let mut seen = HashSet::new();
    let total: u64 = blobs.len() as u64;
    Progress::add(&progress.files_total, total);
    for blob in blobs {
        if !seen.insert(blob) {
            continue;
        }
        if cancel() {
            return Err(Error::Interrupted);
        }
        if !index.contains(&blob) {
            report
                .damaged
                .push(format!("blob {blob} is not in the index"));
            continue;
        }
        let read = match read_back {
            ReadBack::All => true,
            ReadBack::Added => !parent_blobs.contains(&blob),
            ReadBack::AddedAndSample(p) => !parent_blobs.contains(&blob) || in_sample(&blob, p),
        };
        if read {
            match repo.read_blob(&index, &blob) {
                Ok(bytes) => {
                    report.bytes_read += bytes.len() as u64;
                    Progress::add(&progress.bytes_done, bytes.len() as u64);
                }
                Err(e) => report.damaged.push(format!("blob {blob}: {e}")),
            }
        }
        report.blobs_checked += 1;
        Progress::add(&progress.files_done, 1);
    }
    Ok(report)
}

/// What a restore test found.
#[derive(Clone, Debug, Default)]
pub struct RestoreTestReport {
    /// Paths restored and compared (all of them, or the sample).
    pub restored: Vec<String>,
    /// Whether `restored` is a sample of the point's files.
    pub sampled: bool,
    /// Files in the point.
    pub files_in_point: u64,
    /// Files compared.
    pub files: u64,
    /// Bytes compared.
    pub bytes: u64,
    /// Content digests compared: one per extent (a stored chunk's keyed
    /// BLAKE3 id, or a hole's zeros).
    pub digests_compared: u64,
    /// Of which matched.
    pub digests_matched: u64,
    /// Mismatches of content or metadata (size, mode, mtime), for humans
    /// (empty: passed).
    pub mismatches: Vec<String>,
    /// Wall time.
    pub duration_ms: u64,
}

/// Picks the files to restore: all when at most `sample_files` (and at
/// most `max_bytes`), else an even, stable spread over the point.
fn choose(
    files: Vec<(String, Node)>,
    sample_files: Option<u64>,
    max_bytes: u64,
) -> (Vec<(String, Node)>, bool) {
    let total_bytes: u64 = files.iter().map(|(_, n)| n.size).sum();
    let limit = sample_files.unwrap_or(u64::MAX) as usize;
    if files.len() <= limit && total_bytes <= max_bytes {
        return (files, false);
    }
    let step = (files.len() / limit.max(1)).max(1);
    let mut out = Vec::new();
    let mut bytes = 0u64;
    for (i, f) in files.into_iter().enumerate() {
        if i % step != 0 || out.len() >= limit {
            continue;
        }
        if bytes + f.1.size > max_bytes && !out.is_empty() {
            continue;
        }
        bytes += f.1.size;
        out.push(f);
    }
    (out, true)
}

/// Escapes a path for a glob pattern (every metacharacter in brackets).
fn glob_escape(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        match c {
            '*' | '?' | '[' | ']' | '{' | '}' | '\\' | '!' => {
                out.push('[');
                out.push(c);
                out.push(']');
            }
            _ => out.push(c),
        }
    }
    out
}

/// Compares one restored file with its node.
fn compare_file(
    repo: &Repository,
    path: &Path,
    node: &Node,
    report: &mut RestoreTestReport,
) -> Result<()> {
    let mut mismatch = |what: String| report.mismatches.push(what);
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) => {
            mismatch(format!("{}: not restored ({e})", path.display()));
            return Ok(());
        }
    };
    let mut compared = 0u64;
    let mut matched = 0u64;
    if meta.len() != node.size {
        mismatch(format!(
            "{}: size {} instead of {}",
            path.display(),
            meta.len(),
            node.size
        ));
    }
    if meta.permissions().mode() & 0o7777 != node.mode & 0o7777 {
        mismatch(format!(
            "{}: mode {:o} instead of {:o}",
            path.display(),
            meta.permissions().mode() & 0o7777,
            node.mode & 0o7777
        ));
    }
    let restored = crate::format::ExactTime {
        sec: meta.mtime(),
        nsec: meta.mtime_nsec().clamp(0, 999_999_999) as u32,
    };
    if restored != node.mtime() {
        mismatch(format!(
            "{}: modification time differs from the manifest",
            path.display()
        ));
    }
    let mut f =
        File::open(path).map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
    let key = repo.key();
    let mut buf = Vec::new();
    for ext in &node.content {
        buf.resize(ext.length as usize, 0);
        compared += 1;
        match f.read_exact(&mut buf) {
            Ok(()) => {}
            // A restored file shorter than its manifest is a failed test,
            // not a failed job.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                report.mismatches.push(format!(
                    "{}: shorter than the manifest says",
                    path.display()
                ));
                break;
            }
            Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
        }
        let ok = match &ext.blob {
            Some(id) => key.blob_id(&buf) == *id,
            None => buf.iter().all(|&b| b == 0),
        };
        if ok {
            matched += 1;
        } else {
            report.mismatches.push(format!(
                "{}: content differs from the manifest",
                path.display()
            ));
        }
        report.bytes += ext.length;
    }
    report.digests_compared += compared;
    report.digests_matched += matched;
    report.files += 1;
    Ok(())
}

/// Restores `id` (all of it, or a sample of its files) into `sandbox`
/// (which must not exist or be empty), compares every restored file with
/// the manifest, and deletes the sandbox.
pub fn restore_test(
    repo: &Repository,
    id: &SnapshotId,
    sandbox: &Path,
    sample_files: Option<u64>,
    max_bytes: u64,
    progress: Arc<Progress>,
) -> Result<RestoreTestReport> {
    let started = Instant::now();
    // Held for the whole test: a prune running meanwhile could otherwise
    // delete packs under the walk and make the test report false damage.
    let _guard = repo.lock(false, "restore test")?;
    let manifest = repo.load_snapshot(id)?;
    let index = repo.load_index()?;
    let mut files = Vec::new();
    walk(repo, &index, &manifest.tree, &mut |path, node| {
        if node.kind == NodeKind::File {
            files.push((String::from_utf8_lossy(path).into_owned(), node.clone()));
        }
        Ok(true)
    })?;
    let files_in_point = files.len() as u64;
    let (chosen, sampled) = choose(files, sample_files, max_bytes);
    let includes = if sampled {
        chosen.iter().map(|(p, _)| glob_escape(p)).collect()
    } else {
        Vec::new()
    };
    let opts = RestoreOptions {
        target: sandbox.to_path_buf(),
        includes,
        ..Default::default()
    };
    let result = (|| {
        restore(repo, id, &opts, progress)?;
        let mut report = RestoreTestReport {
            sampled,
            files_in_point,
            ..Default::default()
        };
        for (path, node) in &chosen {
            let on_disk: PathBuf = sandbox.join(path);
            compare_file(repo, &on_disk, node, &mut report)?;
            report.restored.push(format!("/{path}"));
        }
        Ok(report)
    })();
    if let Err(e) = std::fs::remove_dir_all(sandbox) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(sandbox = %sandbox.display(), error = %e, "could not delete the restore-test sandbox");
        }
    }
    let mut report = result?;
    report.duration_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_escape_neutralises_metacharacters() {
        assert_eq!(glob_escape("a/b*c?[d]"), "a/b[*]c[?][[]d[]]");
        let g = globset::Glob::new(&glob_escape("x/{a,b}*.txt"))
            .expect("valid glob")
            .compile_matcher();
        assert!(g.is_match("x/{a,b}*.txt"));
        assert!(!g.is_match("x/a.txt"));
    }

    #[test]
    fn sample_is_bounded_and_spread() {
        let node = |size| Node {
            mode: 0o644,
            size,
            ..Node::new(b"", NodeKind::File)
        };
        let files: Vec<(String, Node)> = (0..100).map(|i| (format!("f{i:03}"), node(10))).collect();
        let (all, sampled) = choose(files.clone(), None, u64::MAX);
        assert_eq!(all.len(), 100);
        assert!(!sampled);
        let (some, sampled) = choose(files.clone(), Some(10), u64::MAX);
        assert!(sampled);
        assert_eq!(some.len(), 10);
        assert_eq!(some[0].0, "f000");
        assert_eq!(some[9].0, "f090");
        let (capped, sampled) = choose(files, None, 55);
        assert!(sampled);
        assert!(capped.iter().map(|(_, n)| n.size).sum::<u64>() <= 55);
    }
}
