//! The `vouch` command line: argument definitions and dispatch. Each group
//! of subcommands lives in its own module; all of them only call the engine.

mod agent_cmd;
mod backup_cmd;
#[cfg(feature = "bench")]
mod bench_cmd;
mod chaos_cmd;
mod copy_cmd;
pub mod defaults;
mod dr_cmd;
mod dump_cmd;
pub mod events_cmd;
mod find_cmd;
mod generate_cmd;
mod inspect;
mod listing;
mod maintain;
mod mount_cmd;
mod output;
mod password;
mod repo_cmds;
mod report_mail;
pub mod reports_cfg;
mod restore_cmd;
mod rewrite_cmd;
mod self_signed;
pub mod serve;
pub mod service_link;
pub mod tls;
mod vzdump_cmd;

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};

pub use output::Output;

use crate::backend::http::HttpBackend;
use crate::backend::{Backend, LocalBackend};
use crate::error::{Error, Result};
use crate::http_client::{split_url, ClientOptions, HttpClient};
use crate::repo::Repository;
use crate::tls_pin::Pin;

/// Encrypted, deduplicated backups that are proven restorable.
#[derive(Parser, Debug)]
#[command(name = "vouch", version, about, propagate_version = true)]
pub struct Cli {
    /// Repository location: a directory, or a repository a service serves
    /// (`https://HOST:PORT/repo/v1/REPOSITORY`, with the token in
    /// VOUCH_TOKEN or VOUCH_TOKEN_FILE and, for a self-signed server
    /// certificate, its SHA-256 in VOUCH_FINGERPRINT), or an S3 bucket
    /// (`s3:https://HOST[:PORT]/BUCKET/PREFIX`, keys in AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY or ~/.aws/credentials, region in AWS_REGION).
    #[arg(short = 'r', long = "repo", env = "VOUCH_REPOSITORY", global = true)]
    pub repo: Option<PathBuf>,
    /// A file whose first line is the repository location (as restic's
    /// `--repository-file`); not together with `--repo` or VOUCH_REPOSITORY.
    #[arg(
        long,
        env = "VOUCH_REPOSITORY_FILE",
        global = true,
        value_name = "FILE",
        conflicts_with = "repo"
    )]
    pub repository_file: Option<PathBuf>,
    /// A file whose first line is the repository's passphrase (as
    /// VOUCH_PASSWORD_FILE; this flag wins over the variables).
    #[arg(long, global = true, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
    /// Machine-readable JSON output on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// No progress and no messages, only errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// More detail: -v info logs, -vv also each file a backup meets (new,
    /// modified, unchanged), -vvv debug logs.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Wait this long for a conflicting repository lock to go away (e.g.
    /// `5m`) instead of failing at once.
    #[arg(long, global = true, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub retry_lock: Option<std::time::Duration>,
    /// Keep no local cache of a served repository's index, snapshots and
    /// trees (kept by default in VOUCH_CACHE_DIR, else
    /// $XDG_CACHE_HOME/vouch or ~/.cache/vouch).
    #[arg(long, global = true)]
    pub no_cache: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a repository in an empty or new directory.
    Init(repo_cmds::InitArgs),
    /// Back up files and directories.
    Backup(backup_cmd::BackupArgs),
    /// Restore a snapshot (or a path in it) into a directory.
    Restore(restore_cmd::RestoreArgs),
    /// List snapshots.
    Snapshots(inspect::SnapshotsArgs),
    /// List the files of a snapshot.
    Ls(inspect::LsArgs),
    /// Find files by name, or the files that hold a blob or a pack, in
    /// every snapshot (or those named).
    Find(find_cmd::FindArgs),
    /// Write a file of a snapshot to stdout, or a directory as a tar or zip
    /// archive.
    Dump(dump_cmd::DumpArgs),
    /// Browse every snapshot as a read-only file system (FUSE) until
    /// unmounted.
    Mount(mount_cmd::MountArgs),
    /// Show what changed between two snapshots.
    Diff(inspect::DiffArgs),
    /// How big snapshots are when restored, their distinct data, and what
    /// deduplication and compression save.
    Stats(inspect::StatsArgs),
    /// Print the repository's config, a snapshot, an index file, a tree, a
    /// blob or a key file (JSON, for debugging).
    Cat(inspect::CatArgs),
    /// Check the repository's structure and, with --read-data, its data
    /// (`check` is the same, as restic calls it).
    #[command(visible_alias = "check")]
    Verify(maintain::VerifyArgs),
    /// Add, remove or set the tags of snapshots.
    Tag(rewrite_cmd::TagArgs),
    /// Make new snapshots without excluded paths (originals kept unless
    /// --forget).
    Rewrite(rewrite_cmd::RewriteArgs),
    /// Remove snapshots by keep rules or by id (data stays until prune).
    Forget(maintain::ForgetArgs),
    /// Copy snapshots into another repository (a second copy: off-host,
    /// immutable), idempotent and resumable.
    Copy(copy_cmd::CopyArgs),
    /// Lock a snapshot until a date: no tool may forget it before (and on
    /// S3 with Object Lock, the store refuses to delete its files).
    Lock(maintain::LockArgs),
    /// Delete data no snapshot needs and repack mostly-empty packs.
    Prune(maintain::PruneArgs),
    /// Manage the passphrases (keys) of the repository.
    Key(repo_cmds::KeyArgs),
    /// Repair repository metadata.
    Repair(repo_cmds::RepairArgs),
    /// Remove stale locks (of processes that are gone, or not refreshed for
    /// 30 minutes); with --force, every lock.
    Unlock(maintain::UnlockArgs),
    /// Measure performance, side by side with restic and borg.
    #[cfg(feature = "bench")]
    Bench(bench_cmd::BenchArgs),
    /// Run the service: scheduler, proof policies, alerts, API and console.
    Serve(serve::ServeArgs),
    /// Manage the service's API tokens.
    Token(serve::TokenArgs),
    /// Run an agent: protect this host for a service (pulls its jobs; no
    /// open port).
    Agent(agent_cmd::AgentArgs),
    /// Check the service's event log (`verify`) and make a chain key
    /// (`keygen`).
    Events(events_cmd::EventsArgs),
    /// Disaster recovery of the server: rebuild its data directory from a
    /// repository's copy of its event log (`rebuild`), or see how far that
    /// copy goes (`status`).
    Dr(dr_cmd::DrArgs),
    /// Shell completions and man pages (the package ships them).
    Generate(generate_cmd::GenerateArgs),
    /// Break a deployment on purpose and check that nothing was lost (runs
    /// the chaos harness, `vouch-chaos`).
    Chaos(chaos_cmd::ChaosArgs),
}

/// Shared handle for subcommands.
pub struct Ctx {
    /// Global options.
    pub out: Output,
    repo_path: Option<PathBuf>,
    lock_wait: std::time::Duration,
    no_cache: bool,
}

/// The user's cache directory for vouch: VOUCH_CACHE_DIR, else
/// $XDG_CACHE_HOME/vouch, else ~/.cache/vouch.
pub fn cache_base() -> Option<PathBuf> {
    std::env::var_os("VOUCH_CACHE_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .filter(|d| !d.is_empty())
                .map(|d| PathBuf::from(d).join("vouch"))
        })
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/vouch")))
}

impl Ctx {
    /// The repository path or a clear error.
    pub fn repo_path(&self) -> Result<PathBuf> {
        self.repo_path.clone().ok_or_else(|| {
            Error::InvalidArgument(
                "no repository given: use --repo PATH or set VOUCH_REPOSITORY".into(),
            )
        })
    }

    /// Opens the repository with the passphrase from the environment or a prompt.
    pub fn open(&self) -> Result<Repository> {
        let (backend, config) = self.backend_and_config()?;
        let pw = password::existing()?;
        Ok(Repository::open_with_config(backend, config, &pw)?.with_lock_wait(self.lock_wait))
    }

    /// Opens the repository like [`Ctx::open`], with the local cache of its
    /// metadata when it is a served one (for commands that read or add;
    /// commands that check or remove read the repository itself).
    pub fn open_cached(&self) -> Result<Repository> {
        let repo = self.open()?;
        let remote = self.repo_path()?.to_str().is_some_and(is_remote);
        if !remote || self.no_cache {
            return Ok(repo);
        }
        let Some(base) = cache_base() else {
            return Ok(repo);
        };
        match crate::repo::cache::Cache::open(&base, &repo.config().id) {
            Ok(cache) => Ok(repo.with_cache(Arc::new(cache))),
            Err(e) => {
                tracing::warn!(dir = %base.display(), "working without a cache: {e}");
                Ok(repo)
            }
        }
    }

    /// The repository's storage, its config checked, without opening it
    /// (no passphrase needed).
    pub fn backend(&self) -> Result<Arc<dyn Backend>> {
        Ok(self.backend_and_config()?.0)
    }

    fn backend_and_config(&self) -> Result<(Arc<dyn Backend>, crate::format::Config)> {
        let backend = self.storage()?;
        // Check the config before asking for a passphrase.
        let config = Repository::read_config(backend.as_ref())?;
        Ok((backend, config))
    }
}

/// Whether a `--repo` names a served repository rather than a directory.
pub fn is_url(repo: &str) -> bool {
    repo.starts_with("https://") || repo.starts_with("http://")
}

/// Whether a `--repo` names an S3 location (`s3:https://HOST/BUCKET/PREFIX`).
pub fn is_s3(repo: &str) -> bool {
    repo.starts_with("s3:")
}

/// The storage a repository location names (not checked to hold a
/// repository): a directory, a served repository's URL, or an S3 location.
pub fn storage_at(location: &std::path::Path) -> Result<Arc<dyn Backend>> {
    Ok(match location.to_str() {
        Some(url) if is_url(url) => Arc::new(http_backend(url)?),
        Some(s3) if is_s3(s3) => Arc::new(crate::backend::s3::S3Backend::from_environment(s3)?),
        _ => Arc::new(LocalBackend::new(location)),
    })
}

/// Whether a `--repo` is anywhere but a local directory.
pub fn is_remote(repo: &str) -> bool {
    is_url(repo) || is_s3(repo)
}

impl Ctx {
    /// The storage `--repo` names (not checked to hold a repository): a
    /// directory, a served repository's URL, or an S3 location.
    pub fn storage(&self) -> Result<Arc<dyn Backend>> {
        storage_at(&self.repo_path()?)
    }

    /// The repository's directory when it is a local one.
    pub fn local_repo_dir(&self) -> Option<PathBuf> {
        let path = self.repo_path.clone()?;
        if path.to_str().is_some_and(is_remote) {
            return None;
        }
        Some(path)
    }
}

/// The backend of a served repository's URL, with the token from
/// VOUCH_TOKEN or VOUCH_TOKEN_FILE and the pin from VOUCH_FINGERPRINT.
pub fn http_backend(url: &str) -> Result<HttpBackend> {
    let (origin, path) = split_url(url).map_err(Error::InvalidArgument)?;
    let token = service_link::token()
        .map_err(Error::InvalidArgument)?
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{url} is a served repository: set VOUCH_TOKEN (or VOUCH_TOKEN_FILE) to a token of the service (role admin or append)"
            ))
        })?;
    let pin = match std::env::var("VOUCH_FINGERPRINT") {
        Ok(f) if !f.trim().is_empty() => {
            Some(Pin::sha256(f.trim()).map_err(Error::InvalidArgument)?)
        }
        _ => None,
    };
    let client = HttpClient::new(
        &origin,
        zeroize::Zeroizing::new(token),
        ClientOptions {
            pin,
            ..ClientOptions::default()
        },
    )
    .map_err(Error::InvalidArgument)?;
    HttpBackend::new(Arc::new(client), &path)
}

/// Options shared by commands that take a snapshot and a path.
#[derive(Args, Debug, Clone)]
pub struct SnapshotPath {
    /// Snapshot id, unique id prefix, or `latest`; `SNAPSHOT:PATH` selects a path.
    pub snapshot: String,
    /// Which snapshot `latest` is.
    #[command(flatten)]
    pub latest: LatestArgs,
}

/// Which snapshot `latest` names (ids and prefixes are not filtered).
#[derive(Args, Debug, Clone, Default)]
pub struct LatestArgs {
    /// `latest` is the newest snapshot of HOST (default: this machine's
    /// host name).
    #[arg(long = "host", value_name = "HOST")]
    pub latest_host: Option<String>,
    /// `latest` is the newest snapshot of any host.
    #[arg(long, conflicts_with = "latest_host")]
    pub any_host: bool,
    /// `latest` is the newest snapshot whose sources include PATH
    /// (repeatable).
    #[arg(long = "path", value_name = "PATH")]
    pub latest_paths: Vec<String>,
}

impl LatestArgs {
    /// The filter these options give.
    pub fn filter(&self) -> crate::repo::LatestFilter {
        let mut f = if self.any_host {
            crate::repo::LatestFilter::any()
        } else {
            match &self.latest_host {
                Some(h) => crate::repo::LatestFilter {
                    host: Some(h.clone()),
                    paths: Vec::new(),
                },
                None => crate::repo::LatestFilter::this_host(),
            }
        };
        f.paths = self.latest_paths.clone();
        f
    }
}

/// The snapshots a command acts on: those `named` (ids, prefixes, or
/// `latest` as `latest` says; each once), or with none named every
/// snapshot of `--host`, with `tag`, whose sources include every `--path`.
pub fn chosen_snapshots(
    repo: &Repository,
    named: &[String],
    tag: Option<&String>,
    latest: &LatestArgs,
) -> Result<Vec<(crate::id::SnapshotId, crate::format::Manifest)>> {
    if named.is_empty() {
        let host = latest.latest_host.as_ref();
        return Ok(repo
            .list_snapshots()?
            .into_iter()
            .filter(|(_, m)| host.is_none_or(|h| &m.host == h))
            .filter(|(_, m)| tag.is_none_or(|t| m.tags.contains(t)))
            .filter(|(_, m)| latest.latest_paths.iter().all(|p| m.paths.contains(p)))
            .collect());
    }
    let filter = latest.filter();
    let mut v: Vec<(crate::id::SnapshotId, crate::format::Manifest)> = Vec::new();
    for s in named {
        let found = repo.find_snapshot_of(s, &filter)?;
        if !v.iter().any(|(id, _)| *id == found.0) {
            v.push(found);
        }
    }
    Ok(v)
}

impl SnapshotPath {
    /// Splits `SNAP:PATH`.
    pub fn split(&self) -> (String, Option<String>) {
        match self.snapshot.split_once(':') {
            Some((s, p)) => (s.to_string(), Some(p.to_string())),
            None => (self.snapshot.clone(), None),
        }
    }
}

/// The repository location in the first line of `file`.
fn repository_from_file(file: &std::path::Path) -> Result<PathBuf> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        Error::InvalidArgument(format!(
            "cannot read the repository file {}: {e}",
            file.display()
        ))
    })?;
    let line = text.lines().next().unwrap_or_default().trim();
    if line.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "the repository file {} is empty: its first line must be the repository's location",
            file.display()
        )));
    }
    Ok(PathBuf::from(line))
}

/// Runs a parsed command line; returns the exit code.
pub fn run(cli: Cli) -> Result<i32> {
    if let Some(file) = &cli.password_file {
        password::use_file(file);
    }
    let repo = match (&cli.repo, &cli.repository_file) {
        (Some(r), _) => Some(r.clone()),
        (None, Some(file)) => Some(repository_from_file(file)?),
        (None, None) => None,
    };
    let ctx = Ctx {
        out: Output {
            json: cli.json,
            quiet: cli.quiet,
            verbose: cli.verbose,
        },
        repo_path: repo,
        lock_wait: cli.retry_lock.unwrap_or_default(),
        no_cache: cli.no_cache,
    };
    match cli.command {
        Command::Init(a) => repo_cmds::init(&ctx, a),
        Command::Backup(a) => backup_cmd::run(&ctx, a),
        Command::Restore(a) => restore_cmd::run(&ctx, a),
        Command::Snapshots(a) => inspect::snapshots(&ctx, a),
        Command::Ls(a) => inspect::ls(&ctx, a),
        Command::Diff(a) => inspect::diff(&ctx, a),
        Command::Find(a) => find_cmd::run(&ctx, a),
        Command::Dump(a) => dump_cmd::run(&ctx, a),
        Command::Mount(a) => mount_cmd::run(&ctx, a),
        Command::Stats(a) => inspect::stats(&ctx, a),
        Command::Cat(a) => inspect::cat(&ctx, a),
        Command::Verify(a) => maintain::verify(&ctx, a),
        Command::Forget(a) => maintain::forget(&ctx, a),
        Command::Tag(a) => rewrite_cmd::tag(&ctx, a),
        Command::Rewrite(a) => rewrite_cmd::run_rewrite(&ctx, a),
        Command::Lock(a) => maintain::lock(&ctx, a),
        Command::Copy(a) => copy_cmd::copy(&ctx, a),
        Command::Prune(a) => maintain::prune(&ctx, a),
        Command::Key(a) => repo_cmds::key(&ctx, a),
        Command::Repair(a) => repo_cmds::repair(&ctx, a),
        Command::Unlock(a) => maintain::unlock(&ctx, a),
        #[cfg(feature = "bench")]
        Command::Bench(a) => bench_cmd::run(&ctx, a),
        Command::Serve(_)
        | Command::Token(_)
        | Command::Events(_)
        | Command::Agent(_)
        | Command::Dr(_)
        | Command::Chaos(_)
        | Command::Generate(_) => Err(Error::InvalidArgument(
            "serve, token, events, agent, dr, chaos and generate run through cli::run_service"
                .into(),
        )),
    }
}

/// Runs `serve`, `token`, `events`, `agent`, `dr`, `chaos` or `generate` (errors at the binary's edge, as
/// `anyhow`). Returns `None` for any other command.
pub fn run_service(
    command: Command,
    json: bool,
    repo: Option<PathBuf>,
) -> Option<anyhow::Result<i32>> {
    match command {
        Command::Dr(a) => Some(dr_cmd::run(a, repo, json)),
        Command::Generate(a) => Some(generate_cmd::run(a)),
        Command::Chaos(a) => Some(chaos_cmd::run(a)),
        Command::Serve(a) => Some(serve::serve(a)),
        Command::Token(a) => Some(serve::token(a)),
        Command::Events(a) => Some(events_cmd::run(a, json)),
        Command::Agent(a) => Some(agent_cmd::run(a)),
        _ => None,
    }
}

#[cfg(test)]
mod help_tests {
    use clap::{CommandFactory, Parser};

    /// Splits a shell line into words (single and double quotes; no
    /// expansions).
    fn words(line: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut cur = String::new();
        let mut quote: Option<char> = None;
        let mut any = false;
        for c in line.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), c) => cur.push(c),
                (None, '\'' | '"') => {
                    quote = Some(c);
                    any = true;
                }
                (None, c) if c.is_whitespace() => {
                    if any || !cur.is_empty() {
                        out.push(std::mem::take(&mut cur));
                    }
                    any = false;
                }
                (None, c) => cur.push(c),
            }
        }
        if any || !cur.is_empty() {
            out.push(cur);
        }
        out
    }

    /// The `vouch ...` commands of a help text's examples, without what
    /// surrounds them (pipes, redirections, a trailing description).
    fn examples(text: &str) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        for line in text.lines() {
            // `vouch ` as a word (not the end of a path such as /mnt/vouch).
            let Some(at) = line
                .match_indices("vouch ")
                .map(|(i, _)| i)
                .find(|&i| i > 0 && line.as_bytes()[i - 1] == b' ')
            else {
                continue;
            };
            if !line.starts_with("  ") || line.contains('`') {
                continue;
            }
            let mut cmd = &line[at..];
            // A description follows after two spaces or more.
            if let Some(i) = cmd.find("   ").or_else(|| cmd.find("  ")) {
                cmd = &cmd[..i];
            }
            for stop in [" | ", " > ", " &", " ("] {
                if let Some(i) = cmd.find(stop) {
                    cmd = &cmd[..i];
                }
            }
            out.push(words(cmd.trim_end_matches(" &")));
        }
        out
    }

    /// Every command's help has examples and an EXIT STATUS section, and
    /// each example parses as the command line it claims to be.
    #[test]
    fn every_command_has_examples_and_exit_status_that_parse() {
        let cli = super::Cli::command();
        let mut checked = 0;
        for sub in cli.get_subcommands() {
            let name = sub.get_name().to_string();
            let help = sub
                .get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_default();
            assert!(help.contains("Examples:"), "vouch {name}: no examples");
            assert!(help.contains("EXIT STATUS"), "vouch {name}: no EXIT STATUS");
            let found = examples(&help);
            assert!(!found.is_empty(), "vouch {name}: no example command");
            for args in found {
                if let Err(e) = super::Cli::try_parse_from(&args) {
                    panic!("vouch {name}: the example {args:?} does not parse: {e}");
                }
                checked += 1;
            }
        }
        assert!(checked > 60, "only {checked} examples checked");
    }
}
