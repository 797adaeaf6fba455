//! `vouch mount`.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::Ctx;
use crate::error::{exit_code, Error, Result};
use crate::mount::{serve, MountOptions, SnapshotFs};

/// `vouch mount`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch mount /mnt/vouch &             browse every snapshot, read-only
  ls /mnt/vouch/hosts/db-1/latest/etc
  cp /mnt/vouch/ids/3fa9c2d1/home/alice/notes.txt .
  fusermount3 -u /mnt/vouch            (or Ctrl-C) to unmount

The mount shows ids/<id>/ (each snapshot's files), and snapshots/<time>,
hosts/<host>/<time> and tags/<tag>/<time> as symlinks to them, each with
`latest`; new snapshots appear within 30 seconds. Files keep their owners,
modes, times and extended attributes. Without --allow-other only the
mounting user can enter. Needs /dev/fuse, and fusermount3 (Debian's fuse3)
when not run as root. The repository holds a shared lock while mounted:
no prune can run until it is unmounted.

EXIT STATUS
  0  unmounted cleanly (Ctrl-C, SIGTERM or fusermount3 -u)
  1  it could not mount or failed; 2 wrong usage; 11 the repository is
  locked exclusively; 12 wrong passphrase")]
pub struct MountArgs {
    /// An empty directory to mount on.
    pub dir: PathBuf,
    /// Let other users (and root) in; the kernel then checks each file's
    /// owner and mode (needs `user_allow_other` in /etc/fuse.conf when not
    /// root).
    #[arg(long)]
    pub allow_other: bool,
    /// With --allow-other, let every user read every file regardless of
    /// its owner and mode.
    #[arg(long, requires = "allow_other")]
    pub no_default_permissions: bool,
    /// How often the snapshot list may be read again (tests use 1s).
    #[arg(long, hide = true, value_parser = humantime::parse_duration, default_value = "30s")]
    pub refresh: std::time::Duration,
}

/// Mounts the repository's snapshots until interrupted or unmounted.
pub fn run(ctx: &Ctx, a: MountArgs) -> Result<i32> {
    let meta = std::fs::metadata(&a.dir).map_err(|e| Error::io(a.dir.display().to_string(), e))?;
    if !meta.is_dir() {
        return Err(Error::InvalidArgument(format!(
            "{} is not a directory",
            a.dir.display()
        )));
    }
    let repo = Arc::new(ctx.open_cached()?);
    let _guard = repo.lock(false, "mount")?;
    let fs = SnapshotFs::new(repo.clone(), a.refresh)?;
    ctx.out.say(format!(
        "mounted the snapshots at {}: Ctrl-C or `fusermount3 -u {}` unmounts",
        a.dir.display(),
        a.dir.display()
    ));
    serve(
        fs,
        &a.dir,
        MountOptions {
            allow_other: a.allow_other,
            no_default_permissions: a.no_default_permissions,
        },
        &crate::util::interrupted,
    )?;
    ctx.out.say(format!("unmounted {}", a.dir.display()));
    Ok(exit_code::OK)
}
