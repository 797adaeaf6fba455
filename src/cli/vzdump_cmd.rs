//! `vouch backup vzdump:PATH`: Proxmox VE guests from their vzdump archives
//! on the dump storage (no API needed), one snapshot per archive (see
//! [`crate::providers::proxmox::ingest`] and `docs/proxmox.md`).

use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use super::backup_cmd::BackupArgs;
use super::Ctx;
use crate::error::{exit_code, Error, Result};
use crate::progress::Progress;
use crate::providers::proxmox::ingest::{ingest, IngestOptions};
use crate::providers::proxmox::staging::staging_base;
use crate::util::human_bytes;

/// Backs up every archive `spec` names.
pub fn run(ctx: &Ctx, a: BackupArgs, spec: &Path) -> Result<i32> {
    let kib = a.image_chunk_kib;
    if !(4..=8192).contains(&kib) || !kib.is_power_of_two() {
        return Err(Error::InvalidArgument(format!(
            "--image-chunk-kib {kib}: a power of two from 4 to 8192"
        )));
    }
    let repo = ctx.open_cached()?;
    let opts = IngestOptions {
        tags: a.tag.clone(),
        host: a.host.clone(),
        parent: a.parent.clone(),
        force: a.force,
        sync: a.sync_level,
        read_threads: a.read_threads,
        image_chunk: kib as usize * 1024,
        staging_base: staging_base(super::cache_base()),
        cancel: None,
    };
    let progress = Arc::new(Progress::default());
    let reporter = ctx.out.progress("backup", progress.clone());
    let mut code = exit_code::OK;
    let result = ingest(&repo, spec, &opts, progress, |done| {
        let s = &done.outcome.manifest.summary;
        if s.warnings > 0 {
            code = exit_code::PARTIAL;
        }
        if ctx.out.json {
            ctx.out.json_line(&json!({
                "type": "summary",
                "archive": done.archive.path,
                "vmid": done.archive.vmid,
                "guest": done.archive.guest.as_str(),
                "snapshot": done.outcome.snapshot.to_hex(),
                "parent": done.outcome.manifest.parent.map(|p| p.to_hex()),
                "summary": s,
                "archive_data_bytes": done.data_bytes,
                "exit_code": code,
            }));
        } else {
            ctx.out.say(format!(
                "{} {} ({}): snapshot {} saved: {} files, {} of data in the archive, {} new ({} stored) in {:.1}s",
                done.archive.guest.as_str(),
                done.archive.vmid,
                done.archive.path.display(),
                done.outcome.snapshot.short(),
                s.files,
                human_bytes(done.data_bytes),
                human_bytes(s.bytes_added),
                human_bytes(s.bytes_stored),
                s.duration_ms as f64 / 1000.0
            ));
        }
    });
    reporter.finish();
    result?;
    Ok(code)
}
