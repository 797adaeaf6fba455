//! The backup engine: a streaming pipeline
//! walk -> read -> chunk -> id and dedup -> compress -> encrypt -> pack -> write,
//! with bounded channels between the stages, then the commit protocol
//! (packs, index, sync, manifest).

mod assemble;
mod commit;
mod exclude;
mod pseudo_fs;
mod read;
pub mod rewrite;
mod save;
pub mod session;
mod stream;
mod walk;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_channel::bounded;

pub use exclude::Excludes;
pub use save::Compressor;

use crate::backend::WriteSync;
use crate::error::{Error, Result};
use crate::format::{Manifest, Summary};
use crate::id::SnapshotId;
use crate::progress::Progress;
use crate::repo::Repository;
use crate::util::{host_name, now_ns, user_name};
use assemble::{Assembler, Warnings};
use read::ReaderContext;
use save::{Dedup, Saver};
use walk::{SourceTrie, Walker};

pub use stream::{backup_stream, check_stream_name};

/// How hard a write path works to be durable (see `docs/format.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SyncLevel {
    /// No sync: fastest, a power cut may lose the snapshot (never corrupt others).
    None,
    /// One `syncfs` of the repository before the manifest, then the manifest
    /// with its own fsync (the default).
    #[default]
    Filesystem,
    /// fsync every file and its directory as it is written.
    File,
}

impl std::str::FromStr for SyncLevel {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(SyncLevel::None),
            "filesystem" => Ok(SyncLevel::Filesystem),
            "file" => Ok(SyncLevel::File),
            _ => Err(Error::InvalidArgument(format!(
                "sync level must be none, filesystem or file, not {s:?}"
            ))),
        }
    }
}

/// Options of one backup.
#[derive(Clone, Debug, Default)]
pub struct BackupOptions {
    /// Sources.
    pub paths: Vec<PathBuf>,
    /// Exclude patterns.
    pub excludes: Vec<String>,
    /// Exclude patterns matched ignoring case (`--iexclude`).
    pub iexcludes: Vec<String>,
    /// Files of exclude patterns.
    pub exclude_files: Vec<PathBuf>,
    /// Skip contents of `CACHEDIR.TAG` directories.
    pub exclude_caches: bool,
    /// Skip the contents of directories holding a file of one of these
    /// names (the marker file is kept).
    pub exclude_if_present: Vec<String>,
    /// Leave out regular files larger than this many bytes.
    pub exclude_larger_than: Option<u64>,
    /// Absolute paths never to back up (the repository itself, say).
    pub exclude_paths: Vec<PathBuf>,
    /// Do not cross file-system boundaries.
    pub one_file_system: bool,
    /// Leave extended attributes out (ACLs, file capabilities, SELinux
    /// labels among them); kept by default.
    pub no_xattrs: bool,
    /// Tags.
    pub tags: Vec<String>,
    /// Host name to record (default: this host).
    pub host: Option<String>,
    /// Parent snapshot (default: latest with the same host and paths).
    pub parent: Option<String>,
    /// Read every file even when the parent has it.
    pub force: bool,
    /// Durability.
    pub sync: SyncLevel,
    /// Reader threads (0 = automatic).
    pub read_threads: usize,
    /// Compression/encryption threads (0 = one per core).
    pub cpu_threads: usize,
    /// Set from outside to stop the backup (like SIGINT, for this backup
    /// only): it ends with [`Error::Interrupted`] and commits nothing.
    pub cancel: Option<Arc<AtomicBool>>,
    /// The session journal's directory (see [`session`]): an interrupted
    /// backup with the same one resumes instead of sending its stored
    /// packs again. None: no journal.
    pub session_dir: Option<PathBuf>,
    /// Sources read from somewhere else: `(source, where to read it)`, the
    /// second a frozen copy of the first (a file-system snapshot). The
    /// snapshot records the source's path; exclusions match it too.
    pub read_from: Vec<(PathBuf, PathBuf)>,
    /// Cut disk images (files named `*.raw`) into chunks of this size at
    /// offsets that are multiples of it, instead of by content: the next
    /// dump of a disk then shares every chunk it did not change (set by
    /// `vzdump:` backups; none: every file by content).
    pub image_chunk: Option<usize>,
    /// Read and cut everything, write nothing: no pack, no index, no
    /// snapshot (the outcome's snapshot id is all zeros; the summary says
    /// what a real run would add).
    pub dry_run: bool,
    /// Told of each regular file as the walk meets it.
    pub file_status: Option<FileStatusSink>,
}

/// What a backup does with a regular file, against its parent snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileStatus {
    /// The parent has no file of this path: read.
    New,
    /// The parent's file differs in size, times or inode: read.
    Modified,
    /// As in the parent: its content is taken from there, not read.
    Unchanged,
}

impl FileStatus {
    /// Its name in `backup -vv` output.
    pub fn as_str(self) -> &'static str {
        match self {
            FileStatus::New => "new",
            FileStatus::Modified => "modified",
            FileStatus::Unchanged => "unchanged",
        }
    }
}

/// A function told of each file's status.
pub type FileStatusFn = dyn Fn(FileStatus, &Path) + Send + Sync;

/// Where `backup -vv` sends each file's status (from the walking thread).
#[derive(Clone)]
pub struct FileStatusSink(pub Arc<FileStatusFn>);

impl std::fmt::Debug for FileStatusSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileStatusSink")
    }
}

/// What a backup made.
#[derive(Clone, Debug)]
pub struct BackupOutcome {
    /// The new snapshot.
    pub snapshot: SnapshotId,
    /// Its manifest.
    pub manifest: Manifest,
    /// The repository's index as this backup knew it: what it loaded at
    /// its start and the packs it wrote (every blob of the new snapshot and
    /// of its parent is in it; another writer's packs of the meantime are
    /// not). The ransomware heuristic reads it instead of loading the
    /// index again.
    pub index: Arc<crate::repo::MasterIndex>,
}

/// The first fatal error of a pipeline, and the flag every stage polls.
#[derive(Default)]
pub struct Abort {
    flag: AtomicBool,
    error: Mutex<Option<Error>>,
    cancel: Option<Arc<AtomicBool>>,
}

impl Abort {
    /// Records the first error and stops every stage.
    pub fn set(&self, e: Error) {
        if let Ok(mut slot) = self.error.lock() {
            if slot.is_none() {
                *slot = Some(e);
            }
        }
        self.flag.store(true, Ordering::SeqCst);
    }

    /// Whether to stop.
    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::Relaxed) || crate::util::interrupted() || self.cancelled()
    }

    /// An abort that also stops when `cancel` is set.
    pub fn with_cancel(cancel: Option<Arc<AtomicBool>>) -> Self {
        Abort {
            cancel,
            ..Default::default()
        }
    }

    fn cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
    }

    /// A stand-in error for a stage that stops because another failed; the
    /// first real error is what the backup reports.
    pub fn error_or_interrupted(&self) -> Error {
        if crate::util::interrupted() || self.cancelled() {
            Error::Interrupted
        } else {
            Error::io(
                "backup aborted",
                std::io::Error::other("another stage failed"),
            )
        }
    }

    fn take(&self) -> Option<Error> {
        self.error.lock().ok().and_then(|mut e| e.take())
    }
}

/// `abs` without `.` and `..` components, resolved by name only (symlinks
/// are not followed).
pub(crate) fn lexically_normal(abs: &Path) -> PathBuf {
    let mut norm = PathBuf::new();
    for c in abs.components() {
        match c {
            std::path::Component::ParentDir => {
                norm.pop();
            }
            std::path::Component::CurDir => {}
            other => norm.push(other),
        }
    }
    norm
}

/// Absolute, normalised source paths (no `..`; symlinks not followed).
fn resolve_paths(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    if paths.is_empty() {
        return Err(Error::InvalidArgument(
            "give at least one path to back up".into(),
        ));
    }
    let mut out = Vec::new();
    for p in paths {
        let abs = std::path::absolute(p)
            .map_err(|e| Error::io(format!("resolving {}", p.display()), e))?;
        let norm = lexically_normal(&abs);
        if std::fs::symlink_metadata(&norm).is_err() {
            return Err(Error::SourceMissing(p.clone()));
        }
        out.push(norm);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn path_strings(paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

/// Backs up `opts.paths` into `repo` and commits a snapshot.
#[tracing::instrument(skip_all, fields(repo = %repo.backend().location(), paths = ?opts.paths))]
pub fn backup(
    repo: &Repository,
    opts: &BackupOptions,
    progress: Arc<Progress>,
) -> Result<BackupOutcome> {
    let started = Instant::now();
    let time_ns = now_ns();
    let paths = resolve_paths(&opts.paths)?;
    let host = opts.host.clone().unwrap_or_else(host_name);
    let mut excludes = Excludes::new(
        &opts.excludes,
        &opts.iexcludes,
        &opts.exclude_files,
        opts.exclude_caches,
        opts.exclude_paths.clone(),
    )?
    .with_markers(&opts.exclude_if_present)?
    .with_size_limit(opts.exclude_larger_than);
    excludes.anchor(&paths);
    let guard = repo.lock(false, "backup")?;
    let mut index = repo.load_index()?;
    commit::drop_missing_packs(repo, &mut index)?;
    let session = match &opts.session_dir {
        Some(dir) if !opts.dry_run => Some(Arc::new(session::Session::open(dir, repo)?)),
        _ => None,
    };
    let resumed = match &session {
        Some(s) => s.resume(repo, &mut index)?,
        None => Vec::new(),
    };
    let index = Arc::new(index);

    let path_strs = path_strings(&paths);
    let parent = match (&opts.parent, opts.force) {
        (_, true) => None,
        (Some(spec), false) => Some(repo.find_snapshot(spec)?),
        (None, false) => repo
            .list_snapshots()?
            .into_iter()
            .rev()
            .find(|(_, m)| m.host == host && m.paths == path_strs),
    };
    let parent_root = match &parent {
        Some((id, m)) => match repo.load_tree(&index, &m.tree) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!("parent snapshot {id} unreadable, reading everything: {e}");
                None
            }
        },
        None => None,
    };
    tracing::info!(parent = ?parent.as_ref().map(|p| p.0.short()), "backup started");

    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let cpu_threads = if opts.cpu_threads == 0 {
        cores
    } else {
        opts.cpu_threads
    };
    let read_threads = crate::util::io_threads(opts.read_threads);
    let write_sync = if opts.sync == SyncLevel::File {
        WriteSync::Now
    } else {
        WriteSync::Deferred
    };

    let abort = Arc::new(Abort::with_cancel(opts.cancel.clone()));
    let dedup = Arc::new(Dedup::new(index.clone()));
    let warnings = Arc::new(Warnings::new(progress.clone()));
    let saver = Saver::start(
        repo,
        cpu_threads,
        write_sync,
        progress.clone(),
        abort.clone(),
        session.clone(),
        opts.dry_run,
    );

    let (job_tx, job_rx) = bounded(read_threads * 4);
    let ctx = Arc::new(ReaderContext {
        chunker: repo.chunker(),
        key: repo.key().clone(),
        dedup: dedup.clone(),
        blobs: saver.tx.clone(),
        progress: progress.clone(),
        abort: abort.clone(),
        image_chunk: opts.image_chunk,
    });
    let readers: Vec<_> = (0..read_threads)
        .map(|i| {
            let ctx = ctx.clone();
            let rx = job_rx.clone();
            std::thread::Builder::new()
                .name(format!("reader-{i}"))
                .spawn(move || read::reader_worker(ctx, rx))
                .expect("spawning a reader thread")
        })
        .collect();
    drop(job_rx);
    drop(ctx);

    // Batches of walk items: 16 x 256 entries in flight at most.
    let (item_tx, item_rx) = bounded(16);
    // Each source read elsewhere, under the name the walk gives it.
    let mut read_from = Vec::new();
    for (source, at) in &opts.read_from {
        if let Some(source) = resolve_paths(std::slice::from_ref(source))?.pop() {
            read_from.push((source, at.clone()));
        }
    }
    let walker = Walker {
        read_from,
        repo: repo.clone(),
        index: index.clone(),
        excludes,
        one_file_system: opts.one_file_system,
        read_xattrs: !opts.no_xattrs,
        pseudo_fs: std::collections::HashMap::new(),
        items: item_tx,
        batch: Vec::new(),
        prefetch: walk::Prefetcher::start(read_threads),
        jobs: job_tx,
        abort: abort.clone(),
        progress: progress.clone(),
        warnings: warnings.clone(),
        users: Default::default(),
        groups: Default::default(),
        reuse_before_ns: parent
            .as_ref()
            .map_or(i64::MIN, |(_, m)| walk::racy_cutoff_ns(m.time_ns)),
        file_status: opts.file_status.clone(),
    };
    let trie = SourceTrie::new(&paths);
    let walk_abort = abort.clone();
    let walk_thread = std::thread::Builder::new()
        .name("walker".into())
        .stack_size(64 << 20)
        .spawn(move || {
            if let Err(e) = walker.run(&trie, parent_root) {
                walk_abort.set(e);
            }
        })
        .expect("spawning the walker");

    // The assembler builds the trees bottom-up, in walk order, on this thread.
    let mut assembler = Assembler {
        repo,
        dedup: &dedup,
        blobs: &saver.tx,
        abort: &abort,
        warnings: &warnings,
        summary: Summary::default(),
    };
    let assembled = assembler.run(item_rx);
    let mut summary = assembler.summary;
    if let Err(e) = &assembled {
        abort.set(clone_error(e));
    }
    // A panicked stage fails the backup (finding 15): a walker that unwinds
    // closes the item channel as if the walk were complete, a saver or the
    // pack writer loses blobs already claimed. Its panic is the error
    // reported, before the stand-in errors of the stages it stopped.
    let mut panicked: Option<Error> = None;
    let mut joined = |what: &str, r: std::thread::Result<()>| {
        if let Err(payload) = r {
            let e = thread_panicked(what, payload.as_ref());
            abort.set(Error::Internal(e.to_string()));
            panicked.get_or_insert(e);
        }
    };
    joined("walker", walk_thread.join());
    for r in readers {
        joined("reader", r.join());
    }
    let packs = match saver.finish() {
        Ok(mut packs) => {
            packs.extend(resumed);
            packs
        }
        Err(e) => {
            abort.set(Error::Internal(e.to_string()));
            panicked.get_or_insert(e);
            Vec::new()
        }
    };
    if let Some(e) = panicked {
        return Err(e);
    }
    if let Some(e) = abort.take() {
        return Err(e);
    }
    let root = assembled?;
    crate::util::check_interrupted()?;
    if abort.is_set() {
        return Err(abort.error_or_interrupted());
    }

    let bytes_stored: u64 = packs.iter().map(|p| p.size).sum();
    summary.blobs_added = packs.iter().map(|p| p.blobs.len() as u64).sum();
    summary.bytes_added = packs
        .iter()
        .flat_map(|p| &p.blobs)
        .map(|b| u64::from(b.raw_length))
        .sum();
    let all_warnings = warnings.take();
    summary.warnings = all_warnings.len() as u64;
    summary.bytes_stored = bytes_stored;
    summary.duration_ms = started.elapsed().as_millis() as u64;
    let manifest = Manifest {
        time_ns,
        host,
        paths: path_strs,
        tags: opts.tags.clone(),
        parent: parent.map(|p| p.0),
        tree: root,
        user: user_name(),
        program: format!("vouch {}", env!("CARGO_PKG_VERSION")),
        summary,
        warnings: all_warnings.into_iter().take(10_000).collect(),
        copied_from: None,
        original: None,
    };
    if opts.dry_run {
        tracing::info!("dry run: nothing written");
        return Ok(BackupOutcome {
            snapshot: SnapshotId([0; 32]),
            manifest,
            index,
        });
    }
    let snapshot = commit::commit(repo, &guard, &packs, &manifest, opts.sync)?;
    drop(guard);
    if let Some(s) = &session {
        s.clear();
    }
    tracing::info!(snapshot = %snapshot.short(), "backup committed");
    drop(dedup);
    let mut index = Arc::try_unwrap(index).unwrap_or_else(|shared| (*shared).clone());
    index.reserve(packs.iter().map(|p| p.blobs.len()).sum());
    for pack in &packs {
        index.add_pack(pack);
    }
    Ok(BackupOutcome {
        snapshot,
        manifest,
        index: Arc::new(index),
    })
}

/// The error for a pipeline thread that panicked.
pub(crate) fn thread_panicked(what: &str, payload: &(dyn std::any::Any + Send)) -> Error {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into());
    Error::Internal(format!(
        "a backup thread panicked ({what}): {msg}; nothing was committed"
    ))
}

/// Errors are not `Clone` (they hold `io::Error`); keep the message and kind.
fn clone_error(e: &Error) -> Error {
    match e {
        Error::Interrupted => Error::Interrupted,
        Error::DiskFull(c) => Error::DiskFull(c.clone()),
        Error::Io { context, source } => Error::Io {
            context: context.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        other => Error::Damaged(other.to_string()),
    }
}

/// Whether `child` is `parent` or below it.
pub fn is_within(child: &Path, parent: &Path) -> bool {
    child.starts_with(parent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::LocalBackend;
    use crate::crypto::KdfParams;
    use crate::repo::InitOptions;

    fn repo(dir: &Path) -> Repository {
        // Cheap key derivation for tests.
        crate::crypto::allow_weak_kdf();
        let opts = InitOptions {
            kdf: KdfParams {
                memory_kib: 1024,
                iterations: 1,
                parallelism: 1,
            },
            ..Default::default()
        };
        Repository::init(Arc::new(LocalBackend::new(dir.join("repo"))), b"pw", &opts).unwrap()
    }

    /// Two directories of files; `b/` holds the file named `name` filled
    /// with `marker`, so a walker that stops there has already done `a/`.
    fn source(dir: &Path, name: &str, marker: &str) -> PathBuf {
        let src = dir.join("src");
        for d in ["a", "b"] {
            std::fs::create_dir_all(src.join(d)).unwrap();
            for i in 0..5 {
                std::fs::write(src.join(d).join(format!("f{i}")), format!("{d}{i}")).unwrap();
            }
        }
        std::fs::write(src.join("b").join(name), marker).unwrap();
        src
    }

    /// Engine review finding 15: a panic in any pipeline thread fails the
    /// backup with a clear error and commits nothing.
    fn panicking_stage_commits_nothing(stage: &'static str) {
        let dir = tempfile::tempdir().unwrap();
        let repo = repo(dir.path());
        let marker = format!(
            "vouch-failpoint-{stage}-{}",
            hex::encode(crate::crypto::random_array::<8>())
        );
        // The saver sees blobs: the marker only in the file's content, so
        // that one saver panics and the others go on.
        let name = if stage == "saver" { "f" } else { &marker };
        let src = source(dir.path(), name, &marker);
        let key = if stage == "writer" {
            repo.backend().location()
        } else {
            marker.clone()
        };
        crate::failpoint::arm(stage, key.as_bytes());
        let opts = BackupOptions {
            paths: vec![src],
            cpu_threads: 2,
            ..Default::default()
        };
        let r = backup(&repo, &opts, Arc::default());
        crate::failpoint::disarm(key.as_bytes());
        match r {
            Err(Error::Internal(msg)) => {
                assert!(msg.contains("a backup thread panicked"), "{msg}");
                assert!(msg.contains(&format!("failpoint {stage} hit")), "{msg}");
            }
            Err(e) => panic!("{stage}: wrong error {e:?}"),
            Ok(o) => panic!(
                "{stage}: a snapshot was committed: {:?}",
                o.manifest.summary
            ),
        }
        assert!(repo.list_snapshots().unwrap().is_empty());
    }

    #[test]
    fn review_finding_15_walker_panic_commits_nothing() {
        panicking_stage_commits_nothing("walker");
    }

    #[test]
    fn review_finding_15_reader_panic_commits_nothing() {
        panicking_stage_commits_nothing("reader");
    }

    #[test]
    fn review_finding_15_saver_panic_commits_nothing() {
        panicking_stage_commits_nothing("saver");
    }

    #[test]
    fn review_finding_15_pack_writer_panic_commits_nothing() {
        panicking_stage_commits_nothing("writer");
    }
}
