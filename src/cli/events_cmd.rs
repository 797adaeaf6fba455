//! `vouch events`: offline checks of the service's event log
//! (`verify`) and the chain key (`keygen`).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use vouch_events::{verify_log, ChainKey, LogVerifyReport};

/// Options of `vouch events`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch events verify --data-dir /var/lib/vouch
  vouch events keygen --out /etc/vouch/chain.key

EXIT STATUS
  0  the log verifies (or the key was made); 1 the log does not verify,
  or it failed")]
pub struct EventsArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: EventsAction,
}

/// `vouch events` subcommands.
#[derive(Subcommand, Debug)]
pub enum EventsAction {
    /// Verify the whole event log: every segment, checksums, seqs, the
    /// hash chain, the acknowledged head, and (with a chain key) the signed
    /// checkpoints. Read-only and lock-free: safe while the service runs.
    Verify {
        /// The service's data directory (the log is in its `events/`);
        /// default as `vouch serve`: the configuration's `data_dir`, else
        /// `./vouch-data` from a checkout, `/var/lib/vouch` as root,
        /// `~/.local/share/vouch` otherwise.
        #[arg(long, env = "VOUCH_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// The service's configuration file: its `data_dir` and `[log]
        /// chain_key_file` are used unless given here.
        #[arg(long, env = "VOUCH_CONFIG")]
        config: Option<PathBuf>,
        /// The chain key the service signs checkpoints with (kept outside
        /// the data directory). Without it the chain is not authenticated.
        #[arg(long, env = "VOUCH_CHAIN_KEY_FILE")]
        chain_key_file: Option<PathBuf>,
    },
    /// Make a new chain key file (32 random bytes as hex, mode 0600).
    Keygen {
        /// Where to write it (must not exist; keep it outside the data
        /// directory, and back it up).
        #[arg(long)]
        out: PathBuf,
    },
}

/// Runs `vouch events`; returns the exit code (0: verified, 1: a problem).
pub fn run(a: EventsArgs, json: bool) -> anyhow::Result<i32> {
    match a.action {
        EventsAction::Verify {
            data_dir,
            config,
            chain_key_file,
        } => {
            let defaults = super::defaults::defaults();
            let config = match config.or(defaults.config) {
                Some(p) => super::serve::Config::load(&p)?,
                None => super::serve::Config::default(),
            };
            let data_dir = data_dir.or(config.data_dir).unwrap_or(defaults.data_dir);
            let key = chain_key_file.or(config.log.chain_key_file);
            verify(&data_dir, key.as_deref(), json)
        }
        EventsAction::Keygen { out } => keygen(&out),
    }
}

/// Refuses a chain key kept inside the data directory: whoever can
/// rewrite the log could then read the key and re-sign the rewrite.
pub fn load_chain_key(path: &Path, data_dir: &Path) -> anyhow::Result<ChainKey> {
    let key_path = std::fs::canonicalize(path)
        .with_context(|| format!("chain key file {}", path.display()))?;
    if let Ok(dir) = std::fs::canonicalize(data_dir) {
        if key_path.starts_with(&dir) {
            bail!(
                "the chain key file {} is inside the data directory {}: whoever can rewrite the \
                 event log could read it and re-sign a forged history; keep it elsewhere \
                 (e.g. /etc/vouch/chain.key, mode 0600)",
                key_path.display(),
                dir.display()
            );
        }
    }
    if let Ok(meta) = std::fs::metadata(&key_path) {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(path = %key_path.display(), "the chain key file is readable by others than its owner; make it mode 0600");
        }
    }
    Ok(ChainKey::from_file(&key_path)?)
}

fn keygen(out: &Path) -> anyhow::Result<i32> {
    let mut key = zeroize::Zeroizing::new([0u8; 32]);
    getrandom::fill(&mut key[..])
        .map_err(|e| anyhow::anyhow!("the operating system's random source failed: {e}"))?;
    let hex = zeroize::Zeroizing::new(format!("{}\n", hex::encode(&key[..])));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .with_context(|| format!("creating {} (it must not exist yet)", out.display()))?;
    f.write_all(hex.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", out.display()))?;
    let id = ChainKey::from_bytes(*key).id();
    eprintln!(
        "chain key written to {} (key id {}); keep it outside the data directory and back it up \
         apart from it: without it the checkpoints cannot be verified",
        out.display(),
        hex::encode(id)
    );
    Ok(0)
}

fn verify(data_dir: &Path, key_file: Option<&Path>, json: bool) -> anyhow::Result<i32> {
    let log_dir = data_dir.join("events");
    if !log_dir.is_dir() {
        bail!(
            "no event log in {} (is --data-dir the service's data directory?)",
            log_dir.display()
        );
    }
    let key = match key_file {
        Some(p) => Some(load_chain_key(p, data_dir)?),
        None => None,
    };
    let r = verify_log(&log_dir, key.as_ref())
        .with_context(|| format!("verifying the event log in {}", log_dir.display()))?;
    if json {
        println!("{}", report_json(&r, key.as_ref()));
    } else {
        print_report(&log_dir, &r, key.as_ref());
    }
    Ok(if r.ok() { 0 } else { 1 })
}

fn report_json(r: &LogVerifyReport, key: Option<&ChainKey>) -> serde_json::Value {
    serde_json::json!({
        "ok": r.ok(),
        "segments": r.segments,
        "events": r.events,
        "bytes": r.bytes,
        "head_seq": r.events,
        "head_hash": r.head.to_hex(),
        "acknowledged_seq": r.acknowledged.map(|a| a.0),
        "authenticated": r.keyed && r.ok(),
        "key_id": key.map(|k| hex::encode(k.id())),
        "checkpoints": r.checkpoints,
        "checkpoints_verified": r.checkpoints_verified,
        "latest_checkpoint": r.latest_checkpoint.map(|c| serde_json::json!({
            "seq": c.seq, "hash": c.hash.to_hex(), "mac": hex::encode(c.mac),
        })),
        "problem": r.problem.as_ref().map(|p| serde_json::json!({
            "seq": p.seq, "file": p.segment.display().to_string(), "offset": p.offset,
            "message": p.message,
        })),
    })
}

fn print_report(log_dir: &Path, r: &LogVerifyReport, key: Option<&ChainKey>) {
    println!("event log:  {}", log_dir.display());
    println!(
        "segments:   {} ({} bytes), events verified: {}",
        r.segments, r.bytes, r.events
    );
    println!("head:       seq {} hash {}", r.events, r.head);
    match r.acknowledged {
        Some((seq, _)) => println!("HEAD file:  acknowledged seq {seq}"),
        None => println!("HEAD file:  none (a log written by an older build; read to its end)"),
    }
    match key {
        None => println!(
            "chain:      UNAUTHENTICATED: no chain key given (--chain-key-file). The hash chain \
             proves integrity only: someone able to write the log directory can rewrite history \
             consistently and this check still passes. ({} checkpoints present, not checked)",
            r.checkpoints
        ),
        Some(k) => match (&r.latest_checkpoint, r.ok()) {
            (Some(c), true) => println!(
                "chain:      AUTHENTICATED up to seq {} by {} checkpoints of key id {} \
                 (latest: seq {} mac {}); events after seq {} are covered by the chain only",
                c.seq,
                r.checkpoints_verified,
                hex::encode(k.id()),
                c.seq,
                hex::encode(c.mac),
                c.seq
            ),
            _ => println!(
                "chain:      NOT AUTHENTICATED with key id {} ({} of {} checkpoints verified)",
                hex::encode(k.id()),
                r.checkpoints_verified,
                r.checkpoints
            ),
        },
    }
    match &r.problem {
        None => println!("result:     OK"),
        Some(p) => {
            println!("result:     FAILED {p}");
            println!(
                "what to do: events from seq {} on are not trusted. Restore the data directory's \
                 events/ from a backup (keep the damaged copy for inspection), or, to give up the \
                 events from that seq on, stop the service and start it with `vouch serve \
                 --repair-log` (the cut part is set aside and recorded); see docs/operations.md, \
                 \"Verifying the event log\".",
                p.seq
            );
        }
    }
}
