//! `vouch backup`.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use serde_json::json;

use super::Ctx;
use crate::backup::{backup, BackupOptions, SyncLevel};
use crate::error::{exit_code, Error, Result};
use crate::progress::Progress;
use crate::util::human_bytes;

/// `vouch backup`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch backup /etc /home                      two trees, one snapshot
  vouch backup --exclude-caches -e '*.tmp' --iexclude '*.iso' /home
  vouch backup --files-from list.txt           the paths listed, one per line
  find /srv -mtime -1 -print0 | vouch backup --files-from-raw /dev/stdin
  pg_dump db | vouch backup --stdin --stdin-filename db.sql
  vouch backup --stdin-from-command --stdin-filename db.sql -- pg_dump db
  vouch backup --dry-run -vv /home             what would be stored, nothing written

With --stdin-from-command the arguments are the command and its own
arguments (after `--`); it runs without a shell, and a command that exits
with anything but 0 fails the backup with nothing committed. A stream is
stored as the one file /NAME of its snapshot (mode 0600).

EXIT STATUS
  0  the snapshot was saved (or, with --dry-run, would be)
  1  it failed and nothing was committed; 2 wrong usage; 3 saved, but
  some sources could not be read (named as warnings); 11 the repository is
  locked; 12 wrong passphrase; 14 disk full; 18 a source does not exist;
  130 interrupted (run it again: it resumes)")]
pub struct BackupArgs {
    /// Files and directories to back up (with --stdin-from-command: the
    /// command and its arguments).
    #[arg(required_unless_present_any = ["files_from", "files_from_raw", "stdin"])]
    pub paths: Vec<PathBuf>,
    /// Also back up the paths listed in FILE, one per line (empty lines
    /// and lines starting with `#` are skipped; repeatable).
    #[arg(long, value_name = "FILE")]
    pub files_from: Vec<PathBuf>,
    /// Also back up the paths in FILE separated by NUL bytes, as `find
    /// -print0` writes them (any byte but NUL allowed; repeatable).
    #[arg(long, value_name = "FILE")]
    pub files_from_raw: Vec<PathBuf>,
    /// Back up what arrives on stdin as one file (see --stdin-filename).
    #[arg(long, conflicts_with_all = ["files_from", "files_from_raw"])]
    pub stdin: bool,
    /// Run the command the arguments name and back up its stdout as one
    /// file; a failing command fails the backup.
    #[arg(long, conflicts_with_all = ["stdin", "files_from", "files_from_raw"])]
    pub stdin_from_command: bool,
    /// The file name a stream is stored as.
    #[arg(long, value_name = "NAME", default_value = "stdin")]
    pub stdin_filename: String,
    /// Read, cut and count everything, but write nothing: no snapshot.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Exclude paths matching a glob (name, or absolute path if it has a `/`).
    #[arg(long = "exclude", short = 'e')]
    pub exclude: Vec<String>,
    /// Like --exclude, ignoring case.
    #[arg(long = "iexclude", value_name = "PATTERN")]
    pub iexclude: Vec<String>,
    /// Read exclude patterns from a file (one per line, `#` comments).
    #[arg(long = "exclude-file")]
    pub exclude_file: Vec<PathBuf>,
    /// Skip the contents of directories with a valid CACHEDIR.TAG.
    #[arg(long)]
    pub exclude_caches: bool,
    /// Skip the contents of directories that hold a file of this name
    /// (repeatable; the file itself is kept, like CACHEDIR.TAG).
    #[arg(long = "exclude-if-present", value_name = "NAME")]
    pub exclude_if_present: Vec<String>,
    /// Leave out files larger than this (500, 64K, 10MiB, 2G: binary units).
    #[arg(long, value_name = "SIZE", value_parser = crate::util::parse_size)]
    pub exclude_larger_than: Option<u64>,
    /// Do not cross file-system boundaries.
    #[arg(long, short = 'x')]
    pub one_file_system: bool,
    /// Leave out extended attributes (kept by default: ACLs, file
    /// capabilities and SELinux labels are extended attributes too).
    #[arg(long)]
    pub no_xattrs: bool,
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
    #[arg(long, value_enum, default_value_t = SyncLevel::Filesystem)]
    pub sync_level: SyncLevel,
    /// Files read at once (0 = automatic: two per core, 2 to 8).
    #[arg(long, visible_alias = "read-concurrency", default_value_t = 0)]
    pub read_threads: usize,
    /// Keep no session journal: an interrupted backup then sends again
    /// what it had stored (by default the journal lives in
    /// `$VOUCH_CACHE_DIR`, `$XDG_CACHE_HOME/vouch` or `~/.cache/vouch`).
    #[arg(long)]
    pub no_session: bool,
    /// For `vzdump:` sources: disk images are cut into chunks of this many
    /// KiB at fixed offsets (a power of two, 4 to 8192; 64 is a VMA
    /// cluster: a dump with few changed clusters stores little more than
    /// them; larger chunks keep the index of big disks smaller).
    #[arg(long, default_value_t = 64)]
    pub image_chunk_kib: u32,
}

/// The session journal of a backup of `paths` from `host` into `repo`:
/// one per repository and source set, in the user's cache directory.
fn session_dir(
    repo: &crate::repo::Repository,
    host: &str,
    paths: &[std::path::PathBuf],
) -> Option<std::path::PathBuf> {
    let cache = super::cache_base()?;
    let mut h = blake3::Hasher::new();
    h.update(host.as_bytes());
    for p in paths {
        h.update(b"\0");
        h.update(p.as_os_str().as_encoded_bytes());
    }
    Some(
        cache
            .join("sessions")
            .join(repo.config().id.to_hex())
            .join(&h.finalize().to_hex()[..32]),
    )
}

/// The dump named by a `vzdump:PATH` source, if the backup is of one (it
/// must then be the only source).
fn vzdump_source(paths: &[PathBuf]) -> Result<Option<PathBuf>> {
    let specs: Vec<PathBuf> = paths
        .iter()
        .filter_map(|p| p.to_str()?.strip_prefix("vzdump:").map(PathBuf::from))
        .collect();
    match (specs.len(), paths.len()) {
        (0, _) => Ok(None),
        (1, 1) => Ok(specs.into_iter().next()),
        _ => Err(crate::error::Error::InvalidArgument(
            "a vzdump:PATH source is backed up alone (one archive or one dump directory per command)"
                .into(),
        )),
    }
}

/// The paths listed in `--files-from` (lines) and `--files-from-raw` (NUL
/// separated) files.
fn listed_paths(lines: &[PathBuf], raw: &[PathBuf]) -> Result<Vec<PathBuf>> {
    use std::os::unix::ffi::OsStrExt;
    let read = |f: &PathBuf| {
        std::fs::read(f).map_err(|e| Error::io(format!("reading the file list {}", f.display()), e))
    };
    let mut out = Vec::new();
    for f in lines {
        let bytes = read(f)?;
        for line in bytes.split(|b| *b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() || line.starts_with(b"#") {
                continue;
            }
            out.push(PathBuf::from(std::ffi::OsStr::from_bytes(line)));
        }
    }
    for f in raw {
        let bytes = read(f)?;
        out.extend(
            bytes
                .split(|b| *b == 0)
                .filter(|p| !p.is_empty())
                .map(|p| PathBuf::from(std::ffi::OsStr::from_bytes(p))),
        );
    }
    if out.is_empty() && !(lines.is_empty() && raw.is_empty()) {
        return Err(Error::InvalidArgument(
            "the --files-from lists name no path".into(),
        ));
    }
    Ok(out)
}

/// Runs a backup.
pub fn run(ctx: &Ctx, mut a: BackupArgs) -> Result<i32> {
    if a.stdin || a.stdin_from_command {
        return run_stream(ctx, a);
    }
    if let Some(spec) = vzdump_source(&a.paths)? {
        return super::vzdump_cmd::run(ctx, a, &spec);
    }
    a.paths
        .extend(listed_paths(&a.files_from, &a.files_from_raw)?);
    let repo = ctx.open_cached()?;
    // Resolved (symlinks, `..`), so that the walk never enters the
    // repository however it is named; `Excludes` resolves it again.
    let repo_dir = ctx.local_repo_dir().and_then(|repo_path| {
        std::fs::canonicalize(&repo_path)
            .or_else(|_| std::path::absolute(&repo_path))
            .ok()
    });
    let session_dir = if a.no_session || a.dry_run {
        None
    } else {
        let host = a.host.clone().unwrap_or_else(crate::util::host_name);
        session_dir(&repo, &host, &a.paths)
    };
    let opts = BackupOptions {
        session_dir,
        paths: a.paths,
        excludes: a.exclude,
        iexcludes: a.iexclude,
        exclude_files: a.exclude_file,
        exclude_caches: a.exclude_caches,
        exclude_if_present: a.exclude_if_present,
        exclude_larger_than: a.exclude_larger_than,
        exclude_paths: repo_dir.into_iter().collect(),
        one_file_system: a.one_file_system,
        no_xattrs: a.no_xattrs,
        tags: a.tag,
        host: a.host,
        parent: a.parent,
        force: a.force,
        sync: a.sync_level,
        read_threads: a.read_threads,
        cpu_threads: 0,
        cancel: None,
        read_from: Vec::new(),
        image_chunk: None,
        dry_run: a.dry_run,
        file_status: (ctx.out.verbose >= 2).then(|| file_status_printer(ctx.out.json)),
    };
    let progress = Arc::new(Progress::default());
    let reporter = ctx.out.progress("backup", progress.clone());
    let traffic_before = repo.backend().traffic();
    let result = backup(&repo, &opts, progress);
    reporter.finish();
    let outcome = result?;
    if a.dry_run {
        return Ok(report_dry_run(ctx, &outcome));
    }
    // For a served repository: what this backup moved over the network
    // (opening the repository before it is not counted).
    let network = repo
        .backend()
        .traffic()
        .zip(traffic_before)
        .map(|(now, before)| now.since(before));
    let s = &outcome.manifest.summary;
    // The ransomware heuristic against the parent alone (a plan's history
    // is the service's): what changed, and whether it looks like an attack.
    let compared = crate::anomaly::examine(
        &repo,
        &outcome.manifest,
        Some(&outcome.index),
        &[],
        &vouch_events::BackupSummary {
            files: s.files,
            bytes: s.bytes_read,
            added_bytes: s.bytes_added,
            stored_bytes: s.bytes_stored,
            duration_ms: s.duration_ms,
            total_bytes: Some(s.total_bytes),
            warnings: None,
        },
    )
    .unwrap_or_else(|e| {
        tracing::warn!("could not compare the snapshot with its parent: {e}");
        None
    });
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
            "network": network,
            "changes": compared.as_ref().map(|(p, _)| &p.figures),
            "anomaly": compared.as_ref().filter(|(_, a)| a.anomalous).map(|(_, a)| json!({
                "signals": a.signals,
                "paths": a.paths,
            })),
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
        if let Some(n) = network {
            ctx.out.say(format!(
                "network: {} sent, {} received in {} requests",
                human_bytes(n.sent),
                human_bytes(n.received),
                n.requests
            ));
        }
        if let Some((_, a)) = compared.as_ref().filter(|(_, a)| a.anomalous) {
            eprintln!(
                "warning: compared with its parent, this snapshot looks like files being encrypted (nothing was stopped; check the host):"
            );
            for sig in &a.signals {
                eprintln!(
                    "  {} ({}/1000): {}",
                    sig.kind, sig.score_permille, sig.detail
                );
            }
            for p in a.paths.iter().take(5) {
                eprintln!("  e.g. {p}");
            }
        }
        if s.warnings > 0 {
            eprintln!(
                "snapshot made, but {} sources could not be read completely (exit code 3)",
                s.warnings
            );
        }
    }
    Ok(code)
}

/// `-vv`: one line per regular file on stdout (`new`, `modified` or
/// `unchanged`, then the path; a JSON object with `--json`).
fn file_status_printer(json: bool) -> crate::backup::FileStatusSink {
    use std::io::Write;
    crate::backup::FileStatusSink(Arc::new(move |status, path: &std::path::Path| {
        let mut out = std::io::stdout().lock();
        let _ = if json {
            writeln!(
                out,
                "{}",
                json!({"message_type": "file", "status": status.as_str(), "path": path.to_string_lossy()})
            )
        } else {
            writeln!(out, "{:<9} {}", status.as_str(), path.display())
        };
    }))
}

/// Says what a dry run would have stored; the exit code.
fn report_dry_run(ctx: &Ctx, outcome: &crate::backup::BackupOutcome) -> i32 {
    let s = &outcome.manifest.summary;
    let code = if s.warnings > 0 {
        exit_code::PARTIAL
    } else {
        exit_code::OK
    };
    if ctx.out.json {
        ctx.out.json_line(&json!({
            "message_type": "summary",
            "type": "summary",
            "dry_run": true,
            "snapshot": null,
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
            "dry run, nothing written: {} files ({} read, {} unchanged), {} dirs, {} in total; would add {} ({} stored)",
            s.files,
            s.files_read,
            s.files_unchanged,
            s.dirs,
            human_bytes(s.total_bytes),
            human_bytes(s.bytes_added),
            human_bytes(s.bytes_stored),
        ));
    }
    code
}

/// `--stdin` and `--stdin-from-command`: one file from a stream.
fn run_stream(ctx: &Ctx, a: BackupArgs) -> Result<i32> {
    crate::backup::check_stream_name(&a.stdin_filename)?;
    if a.stdin && !a.paths.is_empty() {
        return Err(Error::InvalidArgument(
            "--stdin takes no paths (the stream is the one file backed up)".into(),
        ));
    }
    let mut child = None;
    if a.stdin_from_command {
        let (program, args) = a.paths.split_first().ok_or_else(|| {
            Error::InvalidArgument(
                "--stdin-from-command needs the command: `vouch backup --stdin-from-command -- pg_dump db`"
                    .into(),
            )
        })?;
        let spawned = std::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| Error::io(format!("running {}", program.display()), e))?;
        child = Some((program.display().to_string(), spawned));
    }
    let repo = ctx.open_cached()?;
    let opts = BackupOptions {
        tags: a.tag,
        host: a.host,
        sync: a.sync_level,
        dry_run: a.dry_run,
        ..BackupOptions::default()
    };
    let progress = Arc::new(Progress::default());
    let reporter = ctx.out.progress("backup", progress.clone());
    let result = match &mut child {
        Some((program, c)) => {
            let mut out = c
                .stdout
                .take()
                .ok_or_else(|| Error::Internal("the command's stdout was not captured".into()))?;
            let program = program.clone();
            let mut waited = None;
            let mut check = || -> Result<()> {
                let status = c
                    .wait()
                    .map_err(|e| Error::io(format!("waiting for {program}"), e))?;
                waited = Some(status);
                if status.success() {
                    Ok(())
                } else {
                    Err(Error::SourceCommandFailed(format!(
                        "{program} ({status}) failed, so its output may be incomplete: nothing was committed"
                    )))
                }
            };
            let r = crate::backup::backup_stream(
                &repo,
                &opts,
                &a.stdin_filename,
                &mut out,
                &mut check,
                progress,
            );
            if r.is_err() && waited.is_none() {
                // Stopped before the command finished: it gets no more
                // readers.
                drop(out);
                let _ = c.kill();
                let _ = c.wait();
            }
            r
        }
        None => {
            let mut input = std::io::stdin().lock();
            crate::backup::backup_stream(
                &repo,
                &opts,
                &a.stdin_filename,
                &mut input,
                &mut || Ok(()),
                progress,
            )
        }
    };
    reporter.finish();
    let outcome = result?;
    if a.dry_run {
        return Ok(report_dry_run(ctx, &outcome));
    }
    let s = &outcome.manifest.summary;
    if ctx.out.json {
        ctx.out.json_line(&json!({
            "message_type": "summary",
            "type": "summary",
            "snapshot": outcome.snapshot.to_hex(),
            "parent": outcome.manifest.parent.map(|p| p.to_hex()),
            "summary": s,
            "warnings": outcome.manifest.warnings,
            "exit_code": exit_code::OK,
        }));
    } else {
        ctx.out.say(format!(
            "snapshot {} saved: /{} ({}), {} new ({} stored) in {:.1}s",
            outcome.snapshot.short(),
            a.stdin_filename,
            human_bytes(s.total_bytes),
            human_bytes(s.bytes_added),
            human_bytes(s.bytes_stored),
            s.duration_ms as f64 / 1000.0
        ));
    }
    Ok(exit_code::OK)
}
