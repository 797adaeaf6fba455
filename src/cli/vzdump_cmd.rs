//! `vouch backup vzdump:PATH`: Proxmox VE guests from their vzdump archives
//! on the dump storage (no API needed). Each archive becomes one snapshot:
//! a VM's configuration files and one sparse image per disk
//! (`drive-scsi0.raw`), with the task log (`vzdump.log`) and notes
//! (`notes`) when they lie beside it; a container's root tree (its
//! configuration in `etc/vzdump/pct.conf`, log and notes beside it).
//! Tagged `pve:vmid=ID`, `pve:type=qemu|lxc`.
//!
//! The archive is read once, as a stream (decompressed on the fly), into a
//! staging directory of sparse files below the cache directory (zero
//! blocks cost no space there), which is then backed up as the snapshot's
//! root and removed. A damaged or truncated archive stops before anything
//! is committed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use super::backup_cmd::BackupArgs;
use super::Ctx;
use crate::backup::{backup, BackupOptions};
use crate::error::{exit_code, Error, Result};
use crate::progress::Progress;
use crate::pve::archive::{archives, ArchiveName, GuestType};
use crate::pve::staging::{staging_base, Staging};
use crate::util::human_bytes;

/// The tags of a guest's snapshots.
fn guest_tags(a: &ArchiveName) -> Vec<String> {
    vec![
        format!("pve:vmid={}", a.vmid),
        format!("pve:type={}", a.guest.as_str()),
    ]
}

/// Unpacks one archive into `dir` (empty); returns the bytes of data it held.
fn stage(a: &ArchiveName, dir: &Path) -> Result<u64> {
    let data = match a.guest {
        GuestType::Qemu => crate::pve::extract::extract_vma(a.open()?, &a.path, dir)?.data_bytes,
        GuestType::Lxc => {
            let unpacked = crate::pve::lxc::unpack(a.open()?, &a.path, dir)?;
            // The container's root is the snapshot's root; the task log
            // and notes go beside its configuration.
            let meta = dir.join("etc/vzdump");
            let io = |e: std::io::Error| Error::io(meta.display().to_string(), e);
            let modified = std::fs::metadata(&meta)
                .and_then(|m| m.modified())
                .map_err(io)?;
            for (from, name) in [(a.log_path(), "vzdump.log"), (a.notes_path(), "notes")] {
                if let Some(from) = from {
                    let to = meta.join(name);
                    std::fs::copy(&from, &to)
                        .map_err(|e| Error::io(from.display().to_string(), e))?;
                }
            }
            // The directory keeps the time the archive gave it.
            std::fs::File::open(&meta)
                .and_then(|d| d.set_modified(modified))
                .map_err(io)?;
            return Ok(unpacked.bytes);
        }
    };
    for (from, name) in [(a.log_path(), "vzdump.log"), (a.notes_path(), "notes")] {
        if let Some(from) = from {
            let to = dir.join(name);
            std::fs::copy(&from, &to).map_err(|e| Error::io(from.display().to_string(), e))?;
        }
    }
    Ok(data)
}

/// Backs up every archive `spec` names.
pub fn run(ctx: &Ctx, a: BackupArgs, spec: &Path) -> Result<i32> {
    let kib = a.image_chunk_kib;
    if !(4..=8192).contains(&kib) || !kib.is_power_of_two() {
        return Err(Error::InvalidArgument(format!(
            "--image-chunk-kib {kib}: a power of two from 4 to 8192"
        )));
    }
    let repo = ctx.open_cached()?;
    let found = archives(spec)?;
    let base = staging_base(super::cache_base());
    let mut code = exit_code::OK;
    for archive in found {
        let _span = tracing::info_span!("vzdump", archive = %archive.path.display()).entered();
        let staging = Staging::new(&base)?;
        let root = staging.path().join("guest");
        std::fs::create_dir(&root).map_err(|e| Error::io(root.display().to_string(), e))?;
        let data = stage(&archive, &root)?;
        let mut tags = guest_tags(&archive);
        tags.extend(a.tag.iter().cloned());
        // The guest's previous snapshot is its parent (whatever else the
        // repository holds under the same path).
        let parent = match &a.parent {
            Some(p) => Some(p.clone()),
            None => repo
                .list_snapshots()?
                .into_iter()
                .filter(|(_, m)| guest_tags(&archive).iter().all(|t| m.tags.contains(t)))
                .max_by_key(|(_, m)| m.time_ns)
                .map(|(id, _)| id.to_hex()),
        };
        let source = PathBuf::from("/");
        let opts = BackupOptions {
            session_dir: None,
            paths: vec![source.clone()],
            tags,
            host: a.host.clone(),
            parent,
            force: a.force,
            sync: a.sync_level,
            read_threads: a.read_threads,
            read_from: vec![(source, root.clone())],
            image_chunk: Some(kib as usize * 1024),
            ..BackupOptions::default()
        };
        let progress = Arc::new(Progress::default());
        let reporter = ctx.out.progress("backup", progress.clone());
        let result = backup(&repo, &opts, progress);
        reporter.finish();
        let outcome = result?;
        let s = &outcome.manifest.summary;
        if s.warnings > 0 {
            code = exit_code::PARTIAL;
        }
        if ctx.out.json {
            ctx.out.json_line(&json!({
                "type": "summary",
                "archive": archive.path,
                "vmid": archive.vmid,
                "guest": archive.guest.as_str(),
                "snapshot": outcome.snapshot.to_hex(),
                "parent": outcome.manifest.parent.map(|p| p.to_hex()),
                "summary": s,
                "archive_data_bytes": data,
                "exit_code": code,
            }));
        } else {
            ctx.out.say(format!(
                "{} {} ({}): snapshot {} saved: {} files, {} of data in the archive, {} new ({} stored) in {:.1}s",
                archive.guest.as_str(),
                archive.vmid,
                archive.path.display(),
                outcome.snapshot.short(),
                s.files,
                human_bytes(data),
                human_bytes(s.bytes_added),
                human_bytes(s.bytes_stored),
                s.duration_ms as f64 / 1000.0
            ));
        }
    }
    Ok(code)
}
