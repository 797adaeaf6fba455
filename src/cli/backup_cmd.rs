//! `vouch backup`.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use serde_json::json;

use super::Ctx;
use crate::backup::{backup, BackupOptions, SyncLevel};
use crate::error::{exit_code, Result};
use crate::progress::Progress;
use crate::util::human_bytes;

/// `vouch backup`.
#[derive(Args, Debug)]
pub struct BackupArgs {
    /// Files and directories to back up.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Exclude paths matching a glob (name, or absolute path if it has a `/`).
    #[arg(long = "exclude", short = 'e')]
    pub exclude: Vec<String>,
    /// Read exclude patterns from a file (one per line, `#` comments).
    #[arg(long = "exclude-file")]
    pub exclude_file: Vec<PathBuf>,
    /// Skip the contents of directories with a valid CACHEDIR.TAG.
    #[arg(long)]
    pub exclude_caches: bool,
    /// Do not cross file-system boundaries.
    #[arg(long, short = 'x')]
    pub one_file_system: bool,
    /// Tag the snapshot (repeatable).
    #[arg(long = "tag")]
    pub tag: Vec<String>,
    /// Host name to record.
    #[arg(long)]
    pub host: Option<String>,
    /// Parent snapshot for change detection (default: latest of the same host and paths).
    #[arg(long)]
    pub parent: Option<String>,
    /// Read every file, even unchanged ones.
    #[arg(long)]
    pub force: bool,
    /// Durability: none, filesystem (default) or file.
    #[arg(long, default_value = "filesystem")]
    pub sync_level: SyncLevel,
    /// Reader threads (0 = automatic).
    #[arg(long, default_value_t = 0)]
    pub read_threads: usize,
}

/// Runs a backup.
pub fn run(ctx: &Ctx, a: BackupArgs) -> Result<i32> {
    let repo = ctx.open()?;
    // Resolved (symlinks, `..`), so that the walk never enters the
    // repository however it is named; `Excludes` resolves it again.
    let repo_path = ctx.repo_path()?;
    let repo_dir = std::fs::canonicalize(&repo_path)
        .or_else(|_| std::path::absolute(&repo_path))
        .ok();
    let opts = BackupOptions {
        paths: a.paths,
        excludes: a.exclude,
        exclude_files: a.exclude_file,
        exclude_caches: a.exclude_caches,
        exclude_paths: repo_dir.into_iter().collect(),
        one_file_system: a.one_file_system,
        tags: a.tag,
        host: a.host,
        parent: a.parent,
        force: a.force,
        sync: a.sync_level,
        read_threads: a.read_threads,
        cpu_threads: 0,
        cancel: None,
    };
    let progress = Arc::new(Progress::default());
    let reporter = ctx.out.progress("backup", progress.clone());
    let result = backup(&repo, &opts, progress);
    reporter.finish();
    let outcome = result?;
    let s = &outcome.manifest.summary;
    let code = if s.warnings > 0 {
        exit_code::PARTIAL
    } else {
        exit_code::OK
    };
    if ctx.out.json {
        ctx.out.json_line(&json!({
            "type": "summary",
            "snapshot": outcome.snapshot.to_hex(),
            "parent": outcome.manifest.parent.map(|p| p.to_hex()),
            "summary": s,
            "warnings": outcome.manifest.warnings,
            "exit_code": code,
        }));
    } else {
        for w in &outcome.manifest.warnings {
            eprintln!("warning: {w}");
        }
        ctx.out.say(format!(
            "snapshot {} saved: {} files ({} read, {} unchanged), {} dirs, {} in total; {} read, {} new ({} stored) in {:.1}s",
            outcome.snapshot.short(),
            s.files,
            s.files_read,
            s.files_unchanged,
            s.dirs,
            human_bytes(s.total_bytes),
            human_bytes(s.bytes_read),
            human_bytes(s.bytes_added),
            human_bytes(s.bytes_stored),
            s.duration_ms as f64 / 1000.0
        ));
        if s.warnings > 0 {
            eprintln!(
                "snapshot made, but {} sources could not be read completely (exit code 3)",
                s.warnings
            );
        }
    }
    Ok(code)
}
