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

use crate::backend::FileKind;
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
    /// Problems, for humans (empty: passed); each starts with the part
    /// it is in (`manifest`, `index`, `tree`, `pack`, `blob`).
    pub damaged: Vec<String>,
    /// The fault that stopped the verification before its end, if any
    /// (its line is in `damaged` too).
    pub fault: Option<PointFault>,
}

/// The part of a point a fault was found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The snapshot file.
    Manifest,
    /// The index (which names the pack of every blob).
    Index,
    /// A tree blob (a directory listing).
    Tree,
    /// A pack file.
    Pack,
    /// A data blob.
    Blob,
}

impl Part {
    /// The word used in events (`verification.failed` damage lines).
    pub fn as_str(self) -> &'static str {
        match self {
            Part::Manifest => "manifest",
            Part::Index => "index",
            Part::Tree => "tree",
            Part::Pack => "pack",
            Part::Blob => "blob",
        }
    }
}

/// How the part failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultCause {
    /// It is gone from the repository.
    Missing,
    /// It is there but does not read back intact.
    Damaged,
    /// A metadata file (manifest, index) does not parse or authenticate.
    CorruptMetadata,
}

impl FaultCause {
    /// The stable `cause` of `restore_test.failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultCause::Missing => "missing",
            FaultCause::Damaged => "damaged",
            FaultCause::CorruptMetadata => "corrupt_metadata",
        }
    }
}

/// A fact about the point's own data that stopped a proof before its end:
/// not a failure of this machine (no retry can change it), so it is the
/// proof's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PointFault {
    /// Where.
    pub part: Part,
    /// How.
    pub cause: FaultCause,
    /// What was found, for humans (names the file or blob).
    pub detail: String,
}

impl PointFault {
    fn new(part: Part, cause: FaultCause, detail: impl Into<String>) -> Self {
        PointFault {
            part,
            cause,
            detail: detail.into(),
        }
    }

    /// One damage line: the part, then what was found (`pack 1a2b...: missing`).
    pub fn line(&self) -> String {
        format!("{}: {}", self.part.as_str(), self.detail)
    }

    /// What happened and what the user can do, in one text.
    pub fn reason(&self) -> String {
        let advice = match (self.part, self.cause) {
            (Part::Manifest, FaultCause::Missing) => {
                "the point's manifest is gone from the repository, so nothing of it can be \
                 restored; if retention did not delete it, find out what did, and take a new backup"
            }
            (_, FaultCause::Missing) => {
                "data this point needs is gone from the repository; take a new backup, and run \
                 `vouch verify --read-data` to list the other snapshots that need it"
            }
            (_, FaultCause::Damaged) => {
                "data this point needs no longer reads back intact; take a new backup, and run \
                 `vouch verify --read-data` to list what else is damaged (or restore the \
                 repository from a copy)"
            }
            (_, FaultCause::CorruptMetadata) => {
                "a repository file does not read: `vouch repair index` rebuilds index files from \
                 the packs; a corrupt manifest comes back only from a copy of the repository"
            }
        };
        format!("{} {}: {advice}", self.part.as_str(), self.detail)
    }
}

/// Whether the manifest of `id` is in the repository's listing.
pub fn manifest_listed(repo: &Repository, id: &SnapshotId) -> Result<bool> {
    let name = id.to_hex();
    Ok(repo
        .backend()
        .list(FileKind::Snapshot)?
        .iter()
        .any(|(n, _)| *n == name))
}

/// What a failure to load the manifest of `id` means: a fault of the point
/// (gone, or corrupt), or `Err` with the error itself when it is this
/// machine's (I/O, permissions).
fn manifest_fault(repo: &Repository, id: &SnapshotId, e: Error) -> Result<PointFault> {
    match e {
        // Only the manifest's own file (`load_snapshot` names it `snapshot
        // <id>`); another corrupt file (a restore marker in the sandbox) is
        // not the point's.
        Error::CorruptMetadata { ref what, .. } if what.starts_with("snapshot") => Ok(
            PointFault::new(Part::Manifest, FaultCause::CorruptMetadata, e.to_string()),
        ),
        Error::SnapshotUnreadable(_) => Ok(PointFault::new(
            Part::Manifest,
            FaultCause::CorruptMetadata,
            e.to_string(),
        )),
        Error::Io { .. } | Error::NotFound(_) => match manifest_listed(repo, id) {
            Ok(false) => Ok(PointFault::new(
                Part::Manifest,
                FaultCause::Missing,
                format!("snapshot {} is missing from the repository", id.short()),
            )),
            _ => Err(e),
        },
        other => Err(other),
    }
}

/// What the failure `err` to read blob `id` (a `part`) means.
fn blob_fault(
    repo: &Repository,
    index: &MasterIndex,
    id: &BlobId,
    part: Part,
    err: &Error,
) -> PointFault {
    let Some((pack, _)) = index.get(id) else {
        return not_in_index(index, id, part);
    };
    if let Ok(false) = repo.backend().exists(FileKind::Pack, &pack.id.to_hex()) {
        return PointFault::new(
            Part::Pack,
            FaultCause::Missing,
            format!("{} (holding {} {id}) is missing", pack.id, part.as_str()),
        );
    }
    let text = err.to_string();
    if text.starts_with("pack ") {
        PointFault::new(
            Part::Pack,
            FaultCause::Damaged,
            format!("{}: {text}", pack.id),
        )
    } else {
        PointFault::new(part, FaultCause::Damaged, text)
    }
}

/// A blob the index does not name: missing, or lost with an index file
/// that does not read.
fn not_in_index(index: &MasterIndex, id: &BlobId, part: Part) -> PointFault {
    if let Some((file, e)) = index.unreadable.first() {
        PointFault::new(
            Part::Index,
            FaultCause::CorruptMetadata,
            format!(
                "{} {id} is not in the index, and index file {} does not read: {e}",
                part.as_str(),
                file.short()
            ),
        )
    } else {
        PointFault::new(
            part,
            FaultCause::Missing,
            format!("{id} is not in the index"),
        )
    }
}

/// Finds which tree of `root` does not load (each tree once), after a walk
/// failed with `original`; falls back to `original` as tree damage (a cap
/// on nesting or expansion).
fn tree_fault(
    repo: &Repository,
    index: &MasterIndex,
    root: &BlobId,
    original: &Error,
) -> PointFault {
    let mut seen = HashSet::new();
    let mut stack = vec![*root];
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        match crate::tree::load(repo, index, &id) {
            Ok(t) => stack.extend(
                t.nodes
                    .iter()
                    .filter(|n| n.kind == NodeKind::Dir)
                    .filter_map(|n| n.subtree),
            ),
            Err(e) => return blob_fault(repo, index, &id, Part::Tree, &e),
        }
    }
    PointFault::new(Part::Tree, FaultCause::Damaged, original.to_string())
}

/// What a restore that failed with data damage `err` means: a missing
/// pack or blob of the files restored, or damage.
fn restore_fault(
    repo: &Repository,
    index: &MasterIndex,
    chosen: &[(String, Node)],
    err: &Error,
) -> PointFault {
    let listed: Option<HashSet<String>> = repo
        .backend()
        .list(FileKind::Pack)
        .ok()
        .map(|l| l.into_iter().map(|(n, _)| n).collect());
    for (path, node) in chosen {
        for blob in node.content.iter().filter_map(|e| e.blob) {
            let Some((pack, _)) = index.get(&blob) else {
                return not_in_index(index, &blob, Part::Blob);
            };
            if listed
                .as_ref()
                .is_some_and(|l| !l.contains(&pack.id.to_hex()))
            {
                return PointFault::new(
                    Part::Pack,
                    FaultCause::Missing,
                    format!("{} (holding data of /{path}) is missing", pack.id),
                );
            }
        }
    }
    let text = err.to_string();
    let part = if text.starts_with("pack ") {
        Part::Pack
    } else if text.starts_with("blob ") {
        Part::Blob
    } else {
        Part::Tree
    };
    PointFault::new(part, FaultCause::Damaged, text)
}

/// The data blobs under `root`, and how many distinct trees hold them.
fn data_blobs(repo: &Repository, index: &MasterIndex, root: &BlobId) -> Result<(Vec<BlobId>, u64)> {
    let mut out = Vec::new();
    let mut trees = HashSet::from([*root]);
    walk(repo, index, root, &mut |_, node| {
        match node.kind {
            NodeKind::File => out.extend(node.content.iter().filter_map(|e| e.blob)),
            NodeKind::Dir => trees.extend(node.subtree),
            _ => {}
        }
        Ok(true)
    })?;
    Ok((out, trees.len() as u64))
}

/// Whether blob `id` falls in a `percent` sample (stable: the same blobs
/// are picked every time).
fn in_sample(id: &BlobId, percent: u8) -> bool {
    u32::from(id.0[0]) * 100 < u32::from(percent) * 256
}

/// Verifies one snapshot: every tree loads (decrypts and matches its id),
/// every data blob is in the index, and the chosen blobs read back. A
/// point whose manifest, trees or data are gone or damaged is a report
/// with damage (the verdict), not an error; errors are this machine's (I/O
/// on the repository listing, the lock, a cancel).
pub fn verify_point(
    repo: &Repository,
    id: &SnapshotId,
    read_back: ReadBack,
    progress: &Progress,
    cancel: &dyn Fn() -> bool,
) -> Result<PointVerification> {
    let _guard = repo.lock(false, "verify")?;
    let mut report = PointVerification::default();
    let stop = |report: &mut PointVerification, f: PointFault| {
        report.damaged.push(f.line());
        report.fault = Some(f);
    };
    let manifest = match repo.load_snapshot(id) {
        Ok(m) => m,
        Err(e) => {
            stop(&mut report, manifest_fault(repo, id, e)?);
            return Ok(report);
        }
    };
    let index = repo.load_index()?;
    let (blobs, trees) = match data_blobs(repo, &index, &manifest.tree) {
        Ok(b) => b,
        Err(e @ Error::Damaged(_)) => {
            stop(&mut report, tree_fault(repo, &index, &manifest.tree, &e));
            return Ok(report);
        }
        Err(e) => return Err(e),
    };
    // Every tree was loaded and checked.
    report.blobs_checked = trees;
    let parent_blobs: HashSet<BlobId> = match manifest.parent {
        Some(parent) if read_back != ReadBack::All => match repo.load_snapshot(&parent) {
            Ok(pm) => data_blobs(repo, &index, &pm.tree)
                .map(|(v, _)| v.into_iter().collect())
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
        Progress::add(&progress.files_done, 1);
        if !index.contains(&blob) {
            report
                .damaged
                .push(not_in_index(&index, &blob, Part::Blob).line());
            continue;
        }
        let read = match read_back {
            ReadBack::All => true,
            ReadBack::Added => !parent_blobs.contains(&blob),
            ReadBack::AddedAndSample(p) => !parent_blobs.contains(&blob) || in_sample(&blob, p),
        };
        if !read {
            // Only its presence in the index was checked.
            continue;
        }
        match repo.read_blob(&index, &blob) {
            Ok(bytes) => {
                report.bytes_read += bytes.len() as u64;
                report.blobs_checked += 1;
                Progress::add(&progress.bytes_done, bytes.len() as u64);
            }
            Err(e) => report
                .damaged
                .push(blob_fault(repo, &index, &blob, Part::Blob, &e).line()),
        }
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
    /// Bytes in the point's files (their sizes, from the trees).
    pub bytes_in_point: u64,
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
    /// The fault of the point's data that stopped the test before its end
    /// (the verdict: the point cannot be restored), if any.
    pub fault: Option<PointFault>,
}

impl RestoreTestReport {
    /// Every file of the point was restored and compared.
    pub fn complete(&self) -> bool {
        self.fault.is_none() && !self.sampled && self.files == self.files_in_point
    }
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
/// the manifest, and deletes the sandbox. A point whose manifest, trees or
/// data are gone or damaged is a report with a [`PointFault`] (the
/// verdict), not an error: errors are this machine's (the sandbox's I/O,
/// a full disk, the lock, a cancel). A point with no files restores
/// nothing (`files_in_point` 0).
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
    let mut report = RestoreTestReport::default();
    let done = |mut report: RestoreTestReport| {
        report.duration_ms = started.elapsed().as_millis() as u64;
        Ok(report)
    };
    let manifest = match repo.load_snapshot(id) {
        Ok(m) => m,
        Err(e) => {
            report.fault = Some(manifest_fault(repo, id, e)?);
            return done(report);
        }
    };
    let index = repo.load_index()?;
    let mut files = Vec::new();
    let walked = walk(repo, &index, &manifest.tree, &mut |path, node| {
        if node.kind == NodeKind::File {
            files.push((String::from_utf8_lossy(path).into_owned(), node.clone()));
        }
        Ok(true)
    });
    match walked {
        Ok(()) => {}
        Err(e @ Error::Damaged(_)) => {
            report.fault = Some(tree_fault(repo, &index, &manifest.tree, &e));
            return done(report);
        }
        Err(e) => return Err(e),
    }
    report.files_in_point = files.len() as u64;
    report.bytes_in_point = files.iter().map(|(_, n)| n.size).sum();
    if files.is_empty() {
        return done(report);
    }
    let (chosen, sampled) = choose(files, sample_files, max_bytes);
    report.sampled = sampled;
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
        // The restore reads the repository and writes the sandbox: damage
        // it meets is the point's (every read of the repository's data
        // fails as `Damaged`); I/O errors are the sandbox's.
        match restore(repo, id, &opts, progress) {
            Ok(_) => {}
            Err(e @ Error::Damaged(_)) => {
                report.fault = Some(restore_fault(repo, &index, &chosen, &e));
                return Ok(());
            }
            Err(e @ (Error::CorruptMetadata { .. } | Error::Io { .. })) => {
                // The manifest read again by the restore: gone or changed
                // since it was loaded above?
                report.fault = Some(manifest_fault(repo, id, e)?);
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        for (path, node) in &chosen {
            let on_disk: PathBuf = sandbox.join(path);
            compare_file(repo, &on_disk, node, &mut report)?;
            report.restored.push(format!("/{path}"));
        }
        Ok(())
    })();
    if let Err(e) = std::fs::remove_dir_all(sandbox) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(sandbox = %sandbox.display(), error = %e, "could not delete the restore-test sandbox");
        }
    }
    result?;
    done(report)
}

/// The live snapshots of `repo` that reference a blob (a tree or a file's
/// content) stored in one of `packs` (full hex ids), by walking every
/// snapshot's trees through the index. Each distinct tree is loaded once,
/// and only the subtree ids of the trees on the current path are held, so
/// memory is one flag per distinct tree. A tree that itself lives in a
/// damaged pack marks its snapshots without being read. `Err` when it
/// cannot tell: a manifest, the index or a tree (outside those packs) does
/// not read.
pub fn snapshots_referencing(repo: &Repository, packs: &[String]) -> Result<Vec<SnapshotId>> {
    use std::collections::HashMap;
    let index = repo.load_index()?;
    if let Some((file, e)) = index.unreadable.first() {
        return Err(Error::corrupt(format!("index file {}", file.short()), e));
    }
    let wanted: HashSet<&str> = packs.iter().map(String::as_str).collect();
    let bad_pack: Vec<bool> = index
        .packs()
        .iter()
        .map(|p| wanted.contains(p.id.to_hex().as_str()))
        .collect();
    let in_bad = |blob: &BlobId| {
        index
            .location(blob)
            .is_some_and(|l| bad_pack.get(l.pack as usize).copied().unwrap_or(false))
    };
    let scan = repo.scan_snapshots()?;
    if let Some((id, e)) = scan.unreadable.first() {
        return Err(Error::SnapshotUnreadable(format!(
            "snapshot {} does not read: {e}",
            id.short()
        )));
    }
    // Whether a tree references a damaged pack, for every tree decided.
    let mut refs: HashMap<BlobId, bool> = HashMap::new();
    let mut out = Vec::new();
    for (snap, manifest) in &scan.snapshots {
        // (tree, its subtrees still to decide, whether it references one
        // directly); a frame is decided when its subtrees are.
        let mut stack: Vec<(BlobId, Vec<BlobId>, bool)> = Vec::new();
        let open = |id: BlobId,
                    refs: &mut HashMap<BlobId, bool>|
         -> Result<Option<(BlobId, Vec<BlobId>, bool)>> {
            if refs.contains_key(&id) {
                return Ok(None);
            }
            if in_bad(&id) {
                refs.insert(id, true);
                return Ok(None);
            }
            let tree = crate::tree::load(repo, &index, &id)?;
            let mut direct = false;
            let mut subs = Vec::new();
            for node in &tree.nodes {
                match node.kind {
                    NodeKind::File => {
                        direct |= node
                            .content
                            .iter()
                            .filter_map(|e| e.blob.as_ref())
                            .any(&in_bad)
                    }
                    NodeKind::Dir => subs.extend(node.subtree),
                    _ => {}
                }
            }
            if direct {
                refs.insert(id, true);
                return Ok(None);
            }
            Ok(Some((id, subs, false)))
        };
        if let Some(frame) = open(manifest.tree, &mut refs)? {
            stack.push(frame);
        }
        while let Some((_, subs, _)) = stack.last_mut() {
            match subs.pop() {
                Some(sub) => match refs.get(&sub) {
                    Some(true) => {
                        if let Some(top) = stack.last_mut() {
                            top.2 = true;
                            top.1.clear();
                        }
                    }
                    Some(false) => {}
                    None => {
                        if let Some(frame) = open(sub, &mut refs)? {
                            if stack.len() >= crate::tree::MAX_DEPTH {
                                return Err(Error::Damaged(format!(
                                    "the trees of snapshot {} nest deeper than {} directories",
                                    snap.short(),
                                    crate::tree::MAX_DEPTH
                                )));
                            }
                            stack.push(frame);
                        } else if refs.get(&sub) == Some(&true) {
                            if let Some(top) = stack.last_mut() {
                                top.2 = true;
                                top.1.clear();
                            }
                        }
                    }
                },
                None => {
                    let Some((id, _, bad)) = stack.pop() else {
                        break;
                    };
                    refs.insert(id, bad);
                    if bad {
                        if let Some(parent) = stack.last_mut() {
                            parent.2 = true;
                            parent.1.clear();
                        }
                    }
                }
            }
        }
        if refs.get(&manifest.tree) == Some(&true) {
            out.push(*snap);
        }
    }
    Ok(out)
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
        let (capped, sampled) = choose(files.clone(), None, 55);
        assert!(sampled);
        assert!(capped.iter().map(|(_, n)| n.size).sum::<u64>() <= 55);
        // Found by `cargo mutants` (`>=` for `>`, `*` for `+` in the byte
        // budget): files that fill the budget exactly are all taken.
        let (full, _) = choose(files, None, 50);
        assert_eq!(full.len(), 5, "five files of 10 bytes fill 50");
    }

    /// Found by `cargo mutants` (the guard naming the manifest's own file
    /// replaced by `true`): a corrupt file that is not the point's (the
    /// restore marker in the sandbox) is this machine's error, never the
    /// point's verdict; a corrupt manifest is the point's.
    #[test]
    fn only_the_manifests_own_corruption_is_the_points_fault() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = crate::workers::tests::new_repo(dir.path());
        let id = SnapshotId([7; 32]);
        let marker = Error::corrupt("restore marker", "not msgpack");
        assert!(manifest_fault(&repo, &id, marker).is_err());
        let manifest = Error::corrupt(format!("snapshot {}", id.short()), "not msgpack");
        let fault = manifest_fault(&repo, &id, manifest).expect("the point's fault");
        assert_eq!(fault.part, Part::Manifest);
    }

    /// Found by `cargo mutants` (the guard of the short-read arm): a
    /// restored file shorter than its manifest is a mismatch (the test's
    /// verdict); any other read error is this machine's (the job's error).
    #[test]
    fn a_short_restored_file_is_a_mismatch_and_an_unreadable_one_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = crate::workers::tests::new_repo(dir.path());
        let file = dir.path().join("short");
        std::fs::write(&file, b"abc").expect("written");
        let node = Node {
            size: 3,
            content: vec![crate::format::Extent {
                blob: None,
                length: 10,
            }],
            ..Node::new(b"short", NodeKind::File)
        };
        let mut report = RestoreTestReport::default();
        compare_file(&repo, &file, &node, &mut report).expect("a verdict, not an error");
        assert!(
            report
                .mismatches
                .iter()
                .any(|m| m.contains("shorter than the manifest")),
            "{:?}",
            report.mismatches
        );
        // A hole is compared as zeros (`cargo mutants`: `!=` for `==`).
        let content = |bytes: &[u8]| {
            std::fs::write(&file, bytes).expect("written");
            let mut report = RestoreTestReport::default();
            compare_file(&repo, &file, &node, &mut report).expect("a verdict");
            !report
                .mismatches
                .iter()
                .any(|m| m.contains("content differs"))
        };
        assert!(content(&[0; 10]), "zeros where the manifest has a hole");
        assert!(!content(&[7; 10]), "data where the manifest has a hole");
        // A directory where the file should be: reading it fails (EISDIR).
        let mut report = RestoreTestReport::default();
        assert!(
            compare_file(&repo, dir.path(), &node, &mut report).is_err(),
            "{:?}",
            report.mismatches
        );
    }

    /// Found by `cargo mutants` (`in_sample` constant, `<` for `==`, `*`
    /// for `+` or `/`): a share of `p` % picks that share of the blobs
    /// (by their first byte, so the same ones every time), and 100 % picks
    /// every blob.
    #[test]
    fn a_read_back_sample_takes_its_share_of_the_blobs() {
        let picked = |percent| {
            (0..=255u8)
                .filter(|b| in_sample(&BlobId([*b; 32]), percent))
                .count()
        };
        assert_eq!(picked(100), 256, "every blob");
        assert_eq!(picked(50), 128, "half");
        assert_eq!(picked(25), 64, "a quarter");
        assert_eq!(picked(1), 3, "about one in a hundred");
        assert!(in_sample(&BlobId([0; 32]), 1) && !in_sample(&BlobId([255; 32]), 99));
    }
}
