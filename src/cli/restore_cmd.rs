//! `vouch restore`.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use serde_json::json;

use super::{Ctx, SnapshotPath};
use crate::error::{exit_code, Result};
use crate::progress::Progress;
use crate::restore::{restore, OverwriteMode, RestoreOptions};
use crate::util::human_bytes;

/// `vouch restore`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch restore latest -t /srv/restore              into an empty directory
  vouch restore latest:/etc -t /etc --overwrite=if-newer
  vouch restore 3fa9c2d1 -t /home/alice --overwrite --delete --dry-run
  vouch restore latest -t /tmp/r --include '*.conf' --verify

A target that is not empty is refused unless --overwrite says what to do
with what is there: always (the default of --overwrite: everything becomes
the snapshot's, only differing extents are written), if-changed (files with
the snapshot's size and time are not even read), if-newer (only files older
than the snapshot's are replaced) or never (only missing entries are
added). --delete also removes what the snapshot lacks in the directories it
restores. An interrupted restore resumes when run again.

EXIT STATUS
  0  restored (or, with --dry-run, planned)
  1  it failed; 2 wrong usage; 12 wrong passphrase; 13 damaged data (the
  snapshot cannot be restored whole); 14 disk full; 17 the target is not
  empty; 19 no such snapshot or path; 130 interrupted (run it again)")]
pub struct RestoreArgs {
    /// What to restore.
    #[command(flatten)]
    pub what: SnapshotPath,
    /// Directory to restore into.
    #[arg(long, short = 't')]
    pub target: PathBuf,
    /// Restore only paths matching a glob (repeatable).
    #[arg(long)]
    pub include: Vec<String>,
    /// Skip paths matching a glob (repeatable).
    #[arg(long)]
    pub exclude: Vec<String>,
    /// Restore into a non-empty target; what is there is replaced as MODE
    /// says (`--overwrite` alone: always).
    #[arg(
        long,
        value_enum,
        value_name = "MODE",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "always"
    )]
    pub overwrite: Option<OverwriteMode>,
    /// Remove what the restored directories hold and the snapshot does not
    /// (not with --include or --exclude).
    #[arg(long, conflicts_with_all = ["include", "exclude"])]
    pub delete: bool,
    /// Say what would be restored, skipped and deleted; write nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Re-read every restored file and check it against the snapshot.
    #[arg(long)]
    pub verify: bool,
    /// Pack reader threads (0 = automatic).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Entries planned and written at once (0 = 65,536, about 40 MB of
    /// plan for small files): memory is bounded by a batch whatever the
    /// snapshot's size; lower it on a machine short of memory.
    #[arg(long, value_name = "ENTRIES", default_value_t = 0)]
    pub batch: usize,
    /// What to write: `files` (the snapshot's tree, the default), `vma` (a
    /// Proxmox VE VM snapshot as one VMA archive at the target path, for
    /// `qmrestore`) or `qcow2` (its disks as qcow2 images in the target
    /// directory, with its configuration; needs `qemu-img`).
    #[arg(long, value_enum, default_value_t = RestoreFormat::Files)]
    pub format: RestoreFormat,
}

/// What `vouch restore` writes.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreFormat {
    /// The snapshot's files.
    Files,
    /// A VMA archive of a Proxmox VE VM.
    Vma,
    /// A Proxmox VE VM's disks as qcow2 images.
    Qcow2,
}

/// Restores a VM's snapshot as a VMA archive at `a.target`: the snapshot
/// into a staging directory, then the archive next to the target and
/// renamed onto it once whole.
/// Restores snapshot `id` into a new staging directory (deleted when the
/// returned handle drops); the handle and where the guest's files are.
fn restore_staged(
    ctx: &Ctx,
    repo: &crate::repo::Repository,
    id: &crate::id::SnapshotId,
    threads: usize,
) -> Result<(
    crate::providers::proxmox::staging::Staging,
    std::path::PathBuf,
)> {
    let staging = crate::providers::proxmox::staging::Staging::new(
        &crate::providers::proxmox::staging::staging_base(super::cache_base()),
    )?;
    let guest = staging.path().join("guest");
    let opts = RestoreOptions {
        target: guest.clone(),
        threads,
        ..Default::default()
    };
    let progress = Arc::new(Progress::default());
    let reporter = ctx.out.progress("restore", progress.clone());
    let result = restore(repo, id, &opts, progress);
    reporter.finish();
    result?;
    Ok((staging, guest))
}

fn run_vma(ctx: &Ctx, a: RestoreArgs) -> Result<i32> {
    use crate::error::Error;
    let repo = ctx.open_cached()?;
    let (spec, _) = a.what.split();
    let (id, _) = repo.find_snapshot_of(&spec, &a.what.latest.filter())?;
    if a.target.exists() && a.overwrite.is_none() {
        return Err(Error::TargetNotEmpty(a.target.clone()));
    }
    // Held (not `_`): the staging directory lives until the end.
    let (_staging, guest) = restore_staged(ctx, &repo, &id, a.threads)?;
    let partial = a.target.with_extension("vma.partial");
    let file =
        std::fs::File::create(&partial).map_err(|e| Error::io(partial.display().to_string(), e))?;
    let written = match crate::providers::proxmox::to_vma::write_vma(&guest, file) {
        Ok(w) => w,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    std::fs::rename(&partial, &a.target)
        .map_err(|e| Error::io(a.target.display().to_string(), e))?;
    if ctx.out.json {
        ctx.out
            .json_line(&json!({"type": "summary", "snapshot": id.to_hex(),
            "format": "vma", "target": a.target, "vma": written}));
    } else {
        ctx.out.say(format!(
            "restored snapshot {} as {}: {} disks ({}), {} archive",
            id.short(),
            a.target.display(),
            written.devices.len(),
            human_bytes(written.bytes),
            human_bytes(written.archive_bytes)
        ));
    }
    Ok(exit_code::OK)
}

/// Restores a VM's snapshot as qcow2 images: the snapshot into a staging
/// directory, then each `<device>.raw` converted by `qemu-img` into
/// `<target>/<device>.qcow2` (written as `.partial` and renamed), the
/// configuration files copied beside them.
fn run_qcow2(ctx: &Ctx, a: RestoreArgs) -> Result<i32> {
    use crate::error::Error;
    let repo = ctx.open_cached()?;
    let (spec, _) = a.what.split();
    let (id, _) = repo.find_snapshot_of(&spec, &a.what.latest.filter())?;
    let occupied = std::fs::read_dir(&a.target).is_ok_and(|mut d| d.next().is_some());
    if occupied && a.overwrite.is_none() {
        return Err(Error::TargetNotEmpty(a.target.clone()));
    }
    // Held (not `_`): the staging directory lives until the end.
    let (_staging, guest) = restore_staged(ctx, &repo, &id, a.threads)?;
    let images = crate::providers::proxmox::qcow2::convert_vm(&guest, &a.target)?;
    if ctx.out.json {
        ctx.out
            .json_line(&json!({"type": "summary", "snapshot": id.to_hex(),
            "format": "qcow2", "target": a.target, "images": images}));
    } else {
        ctx.out.say(format!(
            "restored snapshot {} as qcow2 into {}: {}",
            id.short(),
            a.target.display(),
            images.join(", ")
        ));
    }
    Ok(exit_code::OK)
}

/// Runs a restore.
pub fn run(ctx: &Ctx, a: RestoreArgs) -> Result<i32> {
    match a.format {
        RestoreFormat::Vma => return run_vma(ctx, a),
        RestoreFormat::Qcow2 => return run_qcow2(ctx, a),
        RestoreFormat::Files => {}
    }
    let repo = ctx.open_cached()?;
    let (spec, subpath) = a.what.split();
    let (id, _) = repo.find_snapshot_of(&spec, &a.what.latest.filter())?;
    let opts = RestoreOptions {
        target: a.target,
        subpath,
        includes: a.include,
        excludes: a.exclude,
        overwrite: a.overwrite.is_some(),
        overwrite_mode: a.overwrite.unwrap_or_default(),
        delete: a.delete,
        dry_run: a.dry_run,
        verify: a.verify,
        threads: a.threads,
        batch_entries: a.batch,
        ..Default::default()
    };
    let progress = Arc::new(Progress::default());
    let reporter = ctx.out.progress("restore", progress.clone());
    let result = restore(&repo, &id, &opts, progress);
    reporter.finish();
    let s = match result {
        Ok(s) => s,
        Err(crate::Error::Interrupted) => {
            eprintln!("restore interrupted: run the same command again to resume where it stopped");
            return Err(crate::Error::Interrupted);
        }
        Err(e) => return Err(e),
    };
    if ctx.out.json {
        ctx.out
            .json_line(&json!({"message_type": "summary", "type": "summary",
            "snapshot": id.to_hex(), "summary": s}));
    } else if s.dry_run {
        for p in &s.deleted_paths {
            println!("would delete {p}");
        }
        ctx.out.say(format!(
            "dry run, nothing written: would restore {} files ({}), {} dirs, {} others into {}; {} left as they are, {} deleted",
            s.files,
            human_bytes(s.total_bytes),
            s.dirs,
            s.others,
            opts.target.display(),
            s.skipped,
            s.deleted
        ));
    } else {
        for w in &s.warnings {
            eprintln!("warning: {w}");
        }
        if s.skipped > 0 || s.deleted > 0 {
            ctx.out.say(format!(
                "{} entries already in the target left as they are, {} deleted",
                s.skipped, s.deleted
            ));
        }
        ctx.out.say(format!(
            "restored snapshot {} to {}: {} files, {} dirs, {} others, {} ({} written{}){} in {:.1}s",
            id.short(),
            opts.target.display(),
            s.files,
            s.dirs,
            s.others,
            human_bytes(s.total_bytes),
            human_bytes(s.bytes_written),
            if s.resumed { format!(", {} already in place: resumed", human_bytes(s.bytes_reused)) } else { String::new() },
            if opts.verify { format!(", {} files verified", s.files_verified) } else { String::new() },
            s.duration_ms as f64 / 1000.0
        ));
    }
    Ok(exit_code::OK)
}
