//! `init`, `key`, `repair`.

use clap::{Args, Subcommand};
use serde_json::json;

use super::{password, Ctx};
use crate::crypto::KdfParams;
use crate::error::{exit_code, Error, Result};
use crate::format::ChunkerParams;
use crate::repo::{InitOptions, Repository};

/// Key-derivation cost options.
#[derive(Args, Debug, Clone)]
pub struct KdfArgs {
    /// Argon2id memory in KiB for the new key.
    #[arg(long, default_value_t = 65536)]
    pub kdf_memory_kib: u32,
    /// Argon2id passes for the new key.
    #[arg(long, default_value_t = 3)]
    pub kdf_iterations: u32,
    /// Accept Argon2id settings below the minimum (19 MiB, 2 passes) for
    /// the new key: for tests only, such a key is cheap to guess.
    #[arg(long)]
    pub insecure_kdf: bool,
}

impl KdfArgs {
    fn params(&self) -> KdfParams {
        if self.insecure_kdf {
            crate::crypto::allow_weak_kdf();
            tracing::warn!("--insecure-kdf: the new key's passphrase is cheap to guess");
        }
        KdfParams {
            memory_kib: self.kdf_memory_kib,
            iterations: self.kdf_iterations,
            parallelism: 1,
        }
    }
}

/// `vouch init`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch init -r /srv/backup                   a local repository
  vouch init -r s3:https://s3.example/bucket/host1 --object-lock
  VOUCH_PASSWORD_FILE=/etc/vouch/pass vouch init -r /srv/backup

The passphrase comes from VOUCH_PASSWORD, VOUCH_PASSWORD_FILE,
VOUCH_PASSWORD_COMMAND, --password-file, or a prompt (asked twice). Keep
it, or a paper key (`vouch key export`): without one, nothing in the
repository can be read.

EXIT STATUS
  0  created; 1 it failed (the directory is not empty, or cannot be
  written); 2 wrong usage; 12 no passphrase")]
pub struct InitArgs {
    /// zstd level for data (0 = no compression).
    #[arg(long, default_value_t = 3)]
    pub compression: i32,
    /// Target pack size in MiB.
    #[arg(long, default_value_t = 16)]
    pub pack_size_mib: u64,
    /// Minimum chunk size in KiB.
    #[arg(long, default_value_t = 512)]
    pub chunk_min_kib: u32,
    /// Average chunk size in KiB.
    #[arg(long, default_value_t = 1024)]
    pub chunk_avg_kib: u32,
    /// Maximum chunk size in KiB.
    #[arg(long, default_value_t = 8192)]
    pub chunk_max_kib: u32,
    /// For an S3 repository: create its bucket with Object Lock (so that
    /// locked snapshots are retained by the store itself), or check that
    /// the existing bucket has it.
    #[arg(long)]
    pub object_lock: bool,
    /// Key derivation.
    #[command(flatten)]
    pub kdf: KdfArgs,
}

/// Creates a repository.
pub fn init(ctx: &Ctx, a: InitArgs) -> Result<i32> {
    let path = ctx.repo_path()?;
    let pw = password::new("VOUCH_PASSWORD")?;
    let opts = InitOptions {
        chunker: ChunkerParams {
            min_size: a.chunk_min_kib * 1024,
            avg_size: a.chunk_avg_kib * 1024,
            max_size: a.chunk_max_kib * 1024,
        },
        compression_level: a.compression,
        pack_size: a.pack_size_mib << 20,
        kdf: a.kdf.params(),
    };
    if a.object_lock {
        let location = path.to_str().filter(|p| super::is_s3(p)).ok_or_else(|| {
            Error::InvalidArgument(
                "--object-lock is for S3 repositories (--repo s3:https://HOST/BUCKET/PREFIX)"
                    .into(),
            )
        })?;
        let s3 = crate::backend::s3::S3Backend::from_environment(location)?;
        if !s3.bucket_exists()? {
            s3.create_bucket(true)?;
        } else if !s3.object_lock_enabled()? {
            return Err(Error::InvalidArgument(format!(
                "bucket {} exists without Object Lock, which most stores only enable when a bucket is created: use a new bucket",
                s3.s3_location().bucket
            )));
        }
    }
    let repo = Repository::init(ctx.storage()?, &pw, &opts)?;
    if ctx.out.json {
        ctx.out.json_line(
            &json!({"type": "init", "repository": path, "id": repo.config().id.to_hex()}),
        );
    } else {
        ctx.out.say(format!(
            "created repository {} at {}",
            repo.config().id.short(),
            path.display()
        ));
        ctx.out.say(
            "keep the passphrase safe: without it the data cannot be read by anyone, including you",
        );
    }
    Ok(exit_code::OK)
}

/// `vouch key`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch key list
  vouch key add                          a second passphrase
  vouch key passwd                       change this passphrase
  vouch key export --out paper-key.txt   the master key, to print and store
  vouch key recover --from paper-key.txt

EXIT STATUS
  0  done; 1 it failed; 2 wrong usage; 10 no repository there; 12 wrong passphrase; 19 no such key")]
pub struct KeyArgs {
    /// Action.
    #[command(subcommand)]
    pub action: KeyAction,
}

/// Key actions.
#[derive(Subcommand, Debug)]
pub enum KeyAction {
    /// Add a passphrase (new one from VOUCH_NEW_PASSWORD* or a prompt).
    Add(KdfArgs),
    /// List keys.
    List,
    /// Remove a key by id or unique prefix.
    Remove {
        /// Key id.
        id: String,
    },
    /// Change the passphrase of the key in use (adds the new, removes the old).
    Passwd(KdfArgs),
    /// Export the repository's master key, for when every passphrase is
    /// lost: a JSON file (mode 0600) or, with --paper, lines to print and
    /// keep away from this machine. Prints the key's check code, which
    /// confirms the export to the service (the security center).
    Export {
        /// Write the export here (must not exist); else to standard output.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// The paper form: 8 lines of hex digits, each with a checksum.
        #[arg(long)]
        paper: bool,
    },
    /// Add a passphrase from a key export (`vouch key export`) when no
    /// passphrase opens the repository any more. The export is checked
    /// against the repository before the new key is written.
    Recover {
        /// The export (JSON or paper form); `-`: standard input.
        #[arg(long)]
        from: std::path::PathBuf,
        /// New key settings.
        #[command(flatten)]
        kdf: KdfArgs,
    },
}

/// Key management.
pub fn key(ctx: &Ctx, a: KeyArgs) -> Result<i32> {
    match a.action {
        KeyAction::Recover { from, kdf } => return recover_key(ctx, &from, &kdf),
        KeyAction::Export { out, paper } => return export_key(ctx, out.as_deref(), paper),
        _ => {}
    }
    let repo = ctx.open()?;
    match a.action {
        KeyAction::Export { .. } | KeyAction::Recover { .. } => {}
        KeyAction::Add(k) => {
            let pw = password::new("VOUCH_NEW_PASSWORD")?;
            let id = repo.add_key(&pw, k.params())?;
            ctx.out.say(format!("added key {}", id.short()));
            if ctx.out.json {
                ctx.out
                    .json_line(&json!({"type": "key_added", "id": id.to_hex()}));
            }
        }
        KeyAction::List => {
            let keys = repo.list_keys()?;
            if ctx.out.json {
                ctx.out.json_line(&keys);
            } else {
                println!("{:<3}{:<10}{:<27}{:<20}user", "", "id", "created", "host");
                for k in keys {
                    println!(
                        "{:<3}{:<10}{:<27}{:<20}{}",
                        if k.current { "*" } else { "" },
                        k.id.short(),
                        k.created,
                        k.host,
                        k.user
                    );
                }
            }
        }
        KeyAction::Remove { id } => {
            let id = repo.find_key(&id)?;
            repo.remove_key(&id)?;
            ctx.out.say(format!("removed key {}", id.short()));
        }
        KeyAction::Passwd(k) => {
            let pw = password::new("VOUCH_NEW_PASSWORD")?;
            let new_id = repo.add_key(&pw, k.params())?;
            repo.backend()
                .delete(crate::backend::FileKind::Key, &repo.key_id().to_hex())?;
            ctx.out.say(format!(
                "passphrase changed: key {} replaces {}",
                new_id.short(),
                repo.key_id().short()
            ));
        }
    }
    Ok(exit_code::OK)
}

fn export_key(ctx: &Ctx, out: Option<&std::path::Path>, paper: bool) -> Result<i32> {
    use crate::repo::key_export;
    let repo = ctx.open()?;
    let id = repo.config().id.to_hex();
    let text = if paper {
        key_export::to_paper(repo.key(), &id)
    } else {
        key_export::to_json(repo.key(), &id)
    };
    let check = repo.key_check();
    match out {
        Some(path) => {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| {
                    Error::io(
                        format!("creating {} (it must not exist yet)", path.display()),
                        e,
                    )
                })?;
            f.write_all(text.as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
            ctx.out
                .say(format!("key export written to {}", path.display()));
        }
        None => print!("{}", text.as_str()),
    }
    if ctx.out.json {
        ctx.out
            .json_line(&json!({"type": "key_exported", "repository": id, "check": check}));
    }
    eprintln!(
        "The export is the key itself: whoever holds it reads every backup of this repository \
         without a passphrase. Keep it away from this machine (a safe, a password manager).\n\
         Its check code is {check}: give it to the service to confirm the export \
         (console: Security, or POST /api/v1/security/key-exports)."
    );
    Ok(exit_code::OK)
}

fn recover_key(ctx: &Ctx, from: &std::path::Path, kdf: &KdfArgs) -> Result<i32> {
    use crate::repo::key_export;
    let text = if from.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| Error::io("reading the export from standard input", e))?;
        s
    } else {
        std::fs::read_to_string(from)
            .map_err(|e| Error::io(format!("reading {}", from.display()), e))?
    };
    let text = zeroize::Zeroizing::new(text);
    let recovered = key_export::parse(&text)?;
    let backend = ctx.backend()?;
    let (repo, checked) = Repository::open_with_master_key(backend, recovered.key)?;
    let id = repo.config().id.to_hex();
    if !recovered.repository.is_empty() && recovered.repository != id {
        return Err(Error::InvalidArgument(format!(
            "the export is of repository {}, this is repository {id}",
            recovered.repository
        )));
    }
    if !checked {
        eprintln!("the repository holds no snapshot or index yet: the key could not be checked against its data");
    }
    let pw = password::new("VOUCH_NEW_PASSWORD")?;
    let key_id = repo.add_key(&pw, kdf.params())?;
    ctx.out.say(format!(
        "added key {} from the export (check code {})",
        key_id.short(),
        repo.key_check()
    ));
    if ctx.out.json {
        ctx.out.json_line(
            &json!({"type": "key_recovered", "id": key_id.to_hex(), "checked": checked}),
        );
    }
    Ok(exit_code::OK)
}

/// `vouch repair`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch repair index                     rebuild index files from the packs
  vouch repair snapshots --dry-run       which snapshots need what is lost

EXIT STATUS
  0  repaired (or nothing to do); 1 it failed; 10 no repository there; 12 wrong passphrase; 11 the repository is
  locked")]
pub struct RepairArgs {
    /// What to repair.
    #[command(subcommand)]
    pub what: RepairWhat,
}

/// Repairable things.
#[derive(Subcommand, Debug)]
pub enum RepairWhat {
    /// Rebuild the index from the pack headers, salvaging the intact blobs
    /// of damaged packs.
    Index,
    /// Remove snapshot files that do not read (their data is freed by the
    /// next prune).
    Snapshots {
        /// Only list them.
        #[arg(long, short = 'n')]
        dry_run: bool,
    },
}

/// Repairs.
pub fn repair(ctx: &Ctx, a: RepairArgs) -> Result<i32> {
    let repo = ctx.open()?;
    match a.what {
        RepairWhat::Index => {
            let r = crate::repair::repair_index(&repo)?;
            if ctx.out.json {
                ctx.out
                    .json_line(&json!({"type": "repair_index", "report": r}));
            } else {
                ctx.out.say(format!(
                    "index rebuilt from {} packs: {} whole, {} damaged with their intact blobs kept ({} blobs lost), {} unreadable packs left out and kept",
                    r.packs + r.salvaged_packs + r.unreadable_packs,
                    r.packs,
                    r.salvaged_packs,
                    r.lost_blobs,
                    r.unreadable_packs
                ));
                if r.lost_blobs > 0 || r.unreadable_packs > 0 {
                    ctx.out
                        .say("run `vouch verify` to see which snapshots and paths lost data");
                }
            }
        }
        RepairWhat::Snapshots { dry_run } => {
            let removed = crate::repair::remove_unreadable_snapshots(&repo, dry_run)?;
            if ctx.out.json {
                ctx.out.json_line(&json!({"type": "repair_snapshots", "dry_run": dry_run,
                    "removed": removed.iter().map(|(id, why)| json!({"id": id.to_hex(), "reason": why})).collect::<Vec<_>>()}));
            } else if removed.is_empty() {
                ctx.out.say("every snapshot file reads; nothing to remove");
            } else {
                for (id, why) in &removed {
                    ctx.out.say(format!(
                        "{} unreadable snapshot {}: {why}",
                        if dry_run { "would remove" } else { "removed" },
                        id.short()
                    ));
                }
            }
        }
    }
    Ok(exit_code::OK)
}
