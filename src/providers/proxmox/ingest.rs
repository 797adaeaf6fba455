//! vzdump archives into snapshots, for the CLI (`vouch backup vzdump:PATH`)
//! and the service (plans with a `vzdump:PATH` source): each archive is
//! staged (a VM's disks as sparse images, a container's root tree) and
//! backed up as its own snapshot, tagged with the guest's id and type, its
//! parent the guest's previous snapshot.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::archive::{archives, ArchiveName, GuestType};
use super::staging::Staging;
use crate::backup::{backup, BackupOptions, BackupOutcome, SyncLevel};
use crate::error::{Error, Result};
use crate::progress::Progress;
use crate::repo::Repository;

/// The prefix of a dump-storage source.
pub const PREFIX: &str = "vzdump:";

/// How a dump is backed up.
#[derive(Clone, Debug, Default)]
pub struct IngestOptions {
    /// Tags beside the guest's (`pve:vmid=`, `pve:type=`).
    pub tags: Vec<String>,
    /// Host name to record.
    pub host: Option<String>,
    /// Parent snapshot (default: the guest's previous one).
    pub parent: Option<String>,
    /// Read every file.
    pub force: bool,
    /// Durability.
    pub sync: SyncLevel,
    /// Reader threads (0: automatic).
    pub read_threads: usize,
    /// Disk images are cut into chunks of this many bytes at fixed offsets.
    pub image_chunk: usize,
    /// Where staging directories go.
    pub staging_base: PathBuf,
    /// Stops the backup.
    pub cancel: Option<Arc<AtomicBool>>,
}

/// One archive's snapshot.
#[derive(Clone, Debug)]
pub struct Ingested {
    /// The archive.
    pub archive: ArchiveName,
    /// Bytes of guest data in the archive.
    pub data_bytes: u64,
    /// The backup.
    pub outcome: BackupOutcome,
}

/// The tags of a guest's snapshots.
pub fn guest_tags(a: &ArchiveName) -> Vec<String> {
    vec![
        format!("pve:vmid={}", a.vmid),
        format!("pve:type={}", a.guest.as_str()),
    ]
}

/// Unpacks one archive into `dir` (empty); returns the bytes of data it held.
fn stage(a: &ArchiveName, dir: &Path) -> Result<u64> {
    let copy_beside = |into: &Path| -> Result<()> {
        for (from, name) in [(a.log_path(), "vzdump.log"), (a.notes_path(), "notes")] {
            if let Some(from) = from {
                std::fs::copy(&from, into.join(name))
                    .map_err(|e| Error::io(from.display().to_string(), e))?;
            }
        }
        Ok(())
    };
    match a.guest {
        GuestType::Qemu => {
            let data = super::extract::extract_vma(a.open()?, &a.path, dir)?.data_bytes;
            copy_beside(dir)?;
            Ok(data)
        }
        GuestType::Lxc => {
            let unpacked = super::lxc::unpack(a.open()?, &a.path, dir)?;
            // The task log and notes go beside the configuration; the
            // directory keeps the time the archive gave it.
            let meta = dir.join("etc/vzdump");
            let io = |e: std::io::Error| Error::io(meta.display().to_string(), e);
            let modified = std::fs::metadata(&meta)
                .and_then(|m| m.modified())
                .map_err(io)?;
            copy_beside(&meta)?;
            std::fs::File::open(&meta)
                .and_then(|d| d.set_modified(modified))
                .map_err(io)?;
            Ok(unpacked.bytes)
        }
    }
}

/// Backs up one archive as one snapshot.
pub fn ingest_archive(
    repo: &Repository,
    archive: &ArchiveName,
    opts: &IngestOptions,
    progress: Arc<Progress>,
) -> Result<Ingested> {
    let _span = tracing::info_span!("vzdump", archive = %archive.path.display()).entered();
    let staging = Staging::new(&opts.staging_base)?;
    let root = staging.path().join("guest");
    std::fs::create_dir(&root).map_err(|e| Error::io(root.display().to_string(), e))?;
    let data_bytes = stage(archive, &root)?;
    let mut tags = guest_tags(archive);
    tags.extend(opts.tags.iter().cloned());
    let parent = match &opts.parent {
        Some(p) => Some(p.clone()),
        None => repo
            .list_snapshots()?
            .into_iter()
            .filter(|(_, m)| guest_tags(archive).iter().all(|t| m.tags.contains(t)))
            .max_by_key(|(_, m)| m.time_ns)
            .map(|(id, _)| id.to_hex()),
    };
    let source = PathBuf::from("/");
    let backup_opts = BackupOptions {
        paths: vec![source.clone()],
        tags,
        host: opts.host.clone(),
        parent,
        force: opts.force,
        sync: opts.sync,
        read_threads: opts.read_threads,
        cancel: opts.cancel.clone(),
        read_from: vec![(source, root.clone())],
        image_chunk: Some(opts.image_chunk),
        ..BackupOptions::default()
    };
    let outcome = backup(repo, &backup_opts, progress)?;
    tracing::info!(snapshot = %outcome.snapshot.short(), vmid = archive.vmid, "guest backed up");
    Ok(Ingested {
        archive: archive.clone(),
        data_bytes,
        outcome,
    })
}

/// Backs up every archive `spec` names (one file, or a dump directory's
/// newest archive of each guest); `each` hears of each snapshot.
pub fn ingest(
    repo: &Repository,
    spec: &Path,
    opts: &IngestOptions,
    progress: Arc<Progress>,
    mut each: impl FnMut(&Ingested),
) -> Result<Vec<Ingested>> {
    let mut out = Vec::new();
    for archive in archives(spec)? {
        let done = ingest_archive(repo, &archive, opts, progress.clone())?;
        each(&done);
        out.push(done);
    }
    Ok(out)
}
