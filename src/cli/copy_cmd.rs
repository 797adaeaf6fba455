//! `vouch copy`: a second copy of snapshots in another repository.

use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use super::{password, storage_at, Ctx};
use crate::error::{exit_code, Error, Result};
use crate::id::SnapshotId;
use crate::repo::Repository;
use crate::util::human_bytes;

/// `vouch copy`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch copy --to s3:https://s3.example/offsite/host1     every snapshot
  vouch copy --to /mnt/usb/repo latest
  VOUCH_PASSWORD2=... vouch copy --from /srv/a --to /srv/b

Copies are idempotent (a snapshot copied before is not copied again) and
resumable; the destination's own passphrase comes from VOUCH_PASSWORD2 or
VOUCH_PASSWORD_FILE2.

EXIT STATUS
  0  copied; 1 it failed; 10 no repository there; 12 wrong passphrase; 11 a repository is locked; 19 no such
  snapshot")]
pub struct CopyArgs {
    /// The source repository (else --repo / VOUCH_REPOSITORY); its
    /// passphrase from VOUCH_PASSWORD, VOUCH_PASSWORD_FILE or
    /// VOUCH_PASSWORD_COMMAND.
    #[arg(long)]
    pub from: Option<PathBuf>,
    /// The destination repository (a directory, a served repository or
    /// s3:...); its passphrase from VOUCH_TO_PASSWORD, VOUCH_TO_PASSWORD_FILE
    /// or VOUCH_TO_PASSWORD_COMMAND.
    #[arg(long)]
    pub to: PathBuf,
    /// Snapshots to copy (ids, unique prefixes or `latest`); all when none.
    pub snapshots: Vec<String>,
    /// Which snapshot `latest` is.
    #[command(flatten)]
    pub latest: super::LatestArgs,
}

fn open(location: &std::path::Path, pw: &[u8]) -> Result<Repository> {
    let backend = storage_at(location)?;
    let config = Repository::read_config(backend.as_ref())?;
    Repository::open_with_config(backend, config, pw)
}

/// Copies snapshots between repositories.
pub fn copy(ctx: &Ctx, a: CopyArgs) -> Result<i32> {
    let from = match &a.from {
        Some(f) => f.clone(),
        None => ctx.repo_path()?,
    };
    let src = open(&from, &password::existing()?)?.with_lock_wait(ctx.lock_wait);
    let dst_pw =
        password::existing_with("VOUCH_TO_PASSWORD", "destination repository passphrase: ")?;
    let dst = open(&a.to, &dst_pw)?.with_lock_wait(ctx.lock_wait);
    if src.config().id == dst.config().id {
        return Err(Error::InvalidArgument(
            "--from and --to are the same repository".into(),
        ));
    }
    let mut ids: Vec<SnapshotId> = Vec::new();
    for s in &a.snapshots {
        ids.push(src.find_snapshot_of(s, &a.latest.filter())?.0);
    }
    let json = ctx.out.json;
    let copied = crate::copy::copy(&src, &dst, &ids, |c| {
        if json {
            return;
        }
        let short = |h: &str| h.get(..8).unwrap_or(h).to_owned();
        if c.copied {
            println!(
                "copied {} as {}: {} blobs stored ({}), {} present",
                short(&c.source),
                short(&c.copy),
                c.blobs_stored,
                human_bytes(c.bytes_stored),
                c.blobs_present
            );
        } else {
            println!(
                "{} is in the destination already, as {}",
                short(&c.source),
                short(&c.copy)
            );
        }
    })?;
    if json {
        ctx.out
            .json_line(&json!({"type": "copy", "snapshots": copied}));
    } else {
        let new = copied.iter().filter(|c| c.copied).count();
        ctx.out.say(format!(
            "{new} snapshots copied, {} already there",
            copied.len() - new
        ));
    }
    Ok(exit_code::OK)
}
