//! Backups of a stream (`backup --stdin`, `--stdin-from-command`): the
//! bytes become one file, `/<name>`, of a new snapshot, cut and stored as a
//! large file's content is. Nothing is committed unless the stream ended
//! and the caller's check before the commit passes (the command that wrote
//! it exited with 0).

use std::io::Read;
use std::sync::Arc;
use std::time::Instant;

use super::read::{read_streamed, ReaderContext};
use super::save::{BlobJob, Dedup, Naming, Saver};
use super::{commit, Abort, BackupOptions, BackupOutcome, SyncLevel};
use crate::backend::WriteSync;
use crate::error::{Error, Result};
use crate::format::{encode, BlobType, Manifest, Node, NodeKind, Summary, Tree};
use crate::id::SnapshotId;
use crate::progress::Progress;
use crate::repo::Repository;
use crate::util::{host_name, now_ns, user_name};

/// Checks a file name given for a stream: one path component.
pub fn check_stream_name(name: &str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "--stdin-filename {name:?}: one file name, without `/`"
        )));
    }
    Ok(())
}

/// Backs up `source` as the file `/<name>` of a new snapshot. Of `opts`,
/// tags, host, sync and dry_run apply. `before_commit` runs once the
/// stream is stored; its error stops the backup with nothing committed.
pub fn backup_stream(
    repo: &Repository,
    opts: &BackupOptions,
    name: &str,
    source: &mut dyn Read,
    before_commit: &mut dyn FnMut() -> Result<()>,
    progress: Arc<Progress>,
) -> Result<BackupOutcome> {
    check_stream_name(name)?;
    let started = Instant::now();
    let time_ns = now_ns();
    let host = opts.host.clone().unwrap_or_else(host_name);
    let path = format!("/{name}");
    let guard = repo.lock(false, "backup")?;
    let mut index = repo.load_index()?;
    commit::drop_missing_packs(repo, &mut index)?;
    let index = Arc::new(index);
    // The previous backup of the same stream, for the record (a stream has
    // nothing to compare by metadata: every byte is read and cut).
    let parent = repo
        .list_snapshots()?
        .into_iter()
        .rev()
        .find(|(_, m)| m.host == host && m.paths == [path.clone()])
        .map(|(id, _)| id);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let write_sync = if opts.sync == SyncLevel::File {
        WriteSync::Now
    } else {
        WriteSync::Deferred
    };
    let abort = Arc::new(Abort::with_cancel(opts.cancel.clone()));
    let dedup = Arc::new(Dedup::new(index.clone()));
    let saver = Saver::start(
        repo,
        cores,
        write_sync,
        progress.clone(),
        abort.clone(),
        None,
        opts.dry_run,
    );
    let ctx = ReaderContext {
        chunker: repo.chunker(),
        key: repo.key().clone(),
        dedup: dedup.clone(),
        blobs: saver.tx.clone(),
        progress: progress.clone(),
        abort: abort.clone(),
        image_chunk: None,
    };
    let mut extents = Vec::new();
    let streamed = read_streamed(&ctx, source, &mut extents);
    let stored = streamed.and_then(|size| {
        let mut node = Node::new(name.as_bytes(), NodeKind::File);
        // Dumps are often secrets: only the owner may read the file when
        // it is restored.
        node.mode = libc::S_IFREG | 0o600;
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        node.uid = uid;
        node.gid = gid;
        node.user = Some(user_name());
        node.mtime_ns = time_ns;
        node.ctime_ns = time_ns;
        node.size = size;
        node.content = extents;
        let data = encode(&Tree { nodes: vec![node] });
        let id = repo.key().blob_id(&data);
        if dedup.claim(&id) {
            ctx.blobs
                .send(BlobJob {
                    naming: Naming::Known(id),
                    kind: BlobType::Tree,
                    data,
                })
                .map_err(|_| abort.error_or_interrupted())?;
        }
        Ok((size, id))
    });
    drop(ctx);
    let packs = saver.finish()?;
    if let Some(e) = abort.take() {
        return Err(e);
    }
    let (size, root) = stored?;
    before_commit()?;
    crate::util::check_interrupted()?;
    let summary = Summary {
        files: 1,
        files_read: 1,
        total_bytes: size,
        bytes_read: size,
        blobs_added: packs.iter().map(|p| p.blobs.len() as u64).sum(),
        bytes_added: packs
            .iter()
            .flat_map(|p| &p.blobs)
            .map(|b| u64::from(b.raw_length))
            .sum(),
        bytes_stored: packs.iter().map(|p| p.size).sum(),
        duration_ms: started.elapsed().as_millis() as u64,
        ..Summary::default()
    };
    let manifest = Manifest {
        time_ns,
        host,
        paths: vec![path],
        tags: opts.tags.clone(),
        parent,
        tree: root,
        user: user_name(),
        program: format!("vouch {}", env!("CARGO_PKG_VERSION")),
        summary,
        warnings: Vec::new(),
        copied_from: None,
        original: None,
    };
    if opts.dry_run {
        return Ok(BackupOutcome {
            snapshot: SnapshotId([0; 32]),
            manifest,
            index,
        });
    }
    let snapshot = commit::commit(repo, &guard, &packs, &manifest, opts.sync)?;
    drop(guard);
    tracing::info!(snapshot = %snapshot.short(), bytes = size, "stream backup committed");
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
