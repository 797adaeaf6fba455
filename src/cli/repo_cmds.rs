//! `init`, `key`, `repair`.

use std::sync::Arc;

use clap::{Args, Subcommand};
use serde_json::json;

use super::{password, Ctx};
use crate::backend::LocalBackend;
use crate::crypto::KdfParams;
use crate::error::{exit_code, Result};
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
}

impl KdfArgs {
    fn params(&self) -> KdfParams {
        KdfParams {
            memory_kib: self.kdf_memory_kib,
            iterations: self.kdf_iterations,
            parallelism: 1,
        }
    }
}

/// `vouch init`.
#[derive(Args, Debug)]
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
    let repo = Repository::init(Arc::new(LocalBackend::new(&path)), &pw, &opts)?;
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
}

/// Key management.
pub fn key(ctx: &Ctx, a: KeyArgs) -> Result<i32> {
    let repo = ctx.open()?;
    match a.action {
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

/// `vouch repair`.
#[derive(Args, Debug)]
pub struct RepairArgs {
    /// What to repair.
    #[command(subcommand)]
    pub what: RepairWhat,
}

/// Repairable things.
#[derive(Subcommand, Debug)]
pub enum RepairWhat {
    /// Rebuild the index from the pack headers.
    Index,
}

/// Repairs.
pub fn repair(ctx: &Ctx, a: RepairArgs) -> Result<i32> {
    let repo = ctx.open()?;
    match a.what {
        RepairWhat::Index => {
            let (packs, damaged) = crate::prune::repair_index(&repo)?;
            if ctx.out.json {
                ctx.out.json_line(
                    &json!({"type": "repair_index", "packs": packs, "damaged_packs": damaged}),
                );
            } else {
                ctx.out.say(format!(
                    "index rebuilt from {packs} packs ({damaged} damaged packs left out)"
                ));
            }
        }
    }
    Ok(exit_code::OK)
}
