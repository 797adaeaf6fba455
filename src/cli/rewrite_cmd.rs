//! `vouch tag` and `vouch rewrite`.

use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use super::{Ctx, LatestArgs};
use crate::backup::rewrite::{retag, rewrite, Replaced, RewriteOptions, TagChange};
use crate::error::{exit_code, Error, Result};
use crate::format::Manifest;
use crate::id::SnapshotId;

/// Which snapshots `tag` and `rewrite` change.
#[derive(Args, Debug)]
pub struct Selection {
    /// Snapshots (ids, prefixes or `latest`); none: every snapshot of
    /// `--host`, with `--tag` and of `--path` when given.
    pub snapshots: Vec<String>,
    /// Only snapshots with this tag (when none are named).
    #[arg(long = "tag", value_name = "TAG")]
    pub with_tag: Option<String>,
    /// Which snapshot `latest` is; without named snapshots, `--host` and
    /// `--path` keep only that host's and those of that path.
    #[command(flatten)]
    pub latest: LatestArgs,
    /// Act on a repository a service owns, behind its back (its
    /// reconciliation records the replaced points as vanished).
    #[arg(long)]
    pub outside_service: bool,
}

impl Selection {
    fn resolve(&self, repo: &crate::repo::Repository) -> Result<Vec<(SnapshotId, Manifest)>> {
        super::chosen_snapshots(repo, &self.snapshots, self.with_tag.as_ref(), &self.latest)
    }
}

/// `vouch tag`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch tag --add keep latest                 tag the newest snapshot
  vouch tag --remove test --host db-1         every snapshot of db-1
  vouch tag --set monthly 3fa9c2d1 77b0e4aa   exactly these tags
  vouch tag --set '' 3fa9c2d1                 no tags at all

A snapshot's id is the hash of what it records, so a snapshot with other
tags is a new snapshot: it names the one it replaces (`original`), and the
old one is removed once the new one is durable. A snapshot locked until a
date is refused (it cannot be removed). Snapshots whose tags would not
change are left alone.

EXIT STATUS
  0  done (or nothing to change); 1 it failed; 2 wrong usage; 11 the
  repository is locked; 19 no such snapshot; 20 a service owns the
  repository (--outside-service); 21 a snapshot is locked until a date")]
pub struct TagArgs {
    /// Snapshots to change.
    #[command(flatten)]
    pub which: Selection,
    /// Add this tag (repeatable, or `a,b`).
    #[arg(long, value_name = "TAG", value_delimiter = ',')]
    pub add: Vec<String>,
    /// Remove this tag (repeatable, or `a,b`).
    #[arg(long, value_name = "TAG", value_delimiter = ',')]
    pub remove: Vec<String>,
    /// Replace the tags with these (repeatable, or `a,b`; `''`: none).
    #[arg(long, value_name = "TAG", value_delimiter = ',')]
    pub set: Option<Vec<String>>,
    /// Only say what would change.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
}

/// Changes tags.
pub fn tag(ctx: &Ctx, a: TagArgs) -> Result<i32> {
    let clean = |v: Vec<String>| -> Vec<String> {
        v.into_iter()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect()
    };
    let change = TagChange {
        add: clean(a.add),
        remove: clean(a.remove),
        set: a.set.map(clean),
    };
    if change.add.is_empty() && change.remove.is_empty() && change.set.is_none() {
        return Err(Error::InvalidArgument(
            "say what to change: --add, --remove or --set".into(),
        ));
    }
    let repo = ctx.open()?;
    if !a.dry_run {
        if let Some(code) =
            super::service_link::refuse_if_owned(&repo, "tag", a.which.outside_service)?
        {
            return Ok(code);
        }
    }
    let chosen = a.which.resolve(&repo)?;
    let done = retag(&repo, &chosen, &change, a.dry_run)?;
    report(ctx, "tag", &done, chosen.len(), a.dry_run);
    Ok(exit_code::OK)
}

/// `vouch rewrite`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch rewrite --exclude '*.iso' --dry-run          what would go, everywhere
  vouch rewrite --exclude /home/alice/secrets latest
  vouch rewrite --iexclude '*.mp4' --forget --host laptop

Each snapshot that holds an excluded path gets a new snapshot without it
(same time, host, paths and tags; `original` names the first of the line).
The originals stay unless --forget removes each once its rewrite is
committed; `vouch prune` then frees what no snapshot needs. Patterns are
those of `backup --exclude`.

EXIT STATUS
  0  done (or nothing matched); 1 it failed; 2 wrong usage; 11 the
  repository is locked; 19 no such snapshot; 20 a service owns the
  repository (--outside-service); 21 a snapshot to forget is locked")]
pub struct RewriteArgs {
    /// Snapshots to rewrite.
    #[command(flatten)]
    pub which: Selection,
    /// Leave out paths matching a glob (name, or absolute path if it has a
    /// `/`; repeatable).
    #[arg(long = "exclude", short = 'e', value_name = "PATTERN")]
    pub exclude: Vec<String>,
    /// Like --exclude, ignoring case.
    #[arg(long = "iexclude", value_name = "PATTERN")]
    pub iexclude: Vec<String>,
    /// Read exclude patterns from a file (one per line, `#` comments).
    #[arg(long = "exclude-file", value_name = "FILE")]
    pub exclude_file: Vec<PathBuf>,
    /// Remove each original once its rewrite is committed.
    #[arg(long)]
    pub forget: bool,
    /// Only say what would be left out.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
}

/// Rewrites snapshots without the excluded paths.
pub fn run_rewrite(ctx: &Ctx, a: RewriteArgs) -> Result<i32> {
    let repo = ctx.open()?;
    if !a.dry_run {
        if let Some(code) =
            super::service_link::refuse_if_owned(&repo, "rewrite", a.which.outside_service)?
        {
            return Ok(code);
        }
    }
    let chosen = a.which.resolve(&repo)?;
    let done = rewrite(
        &repo,
        &chosen,
        &RewriteOptions {
            excludes: a.exclude,
            iexcludes: a.iexclude,
            exclude_files: a.exclude_file,
            forget: a.forget,
            dry_run: a.dry_run,
        },
    )?;
    report(ctx, "rewrite", &done, chosen.len(), a.dry_run);
    Ok(exit_code::OK)
}

fn report(ctx: &Ctx, what: &str, done: &[Replaced], considered: usize, dry_run: bool) {
    if ctx.out.json {
        for d in done {
            ctx.out
                .json_line(&json!({"message_type": "changed", "command": what,
                "dry_run": dry_run, "snapshot": d}));
        }
        ctx.out
            .json_line(&json!({"message_type": "summary", "command": what,
            "dry_run": dry_run, "considered": considered, "changed": done.len()}));
        return;
    }
    for d in done {
        let short = |id: &str| id[..8.min(id.len())].to_string();
        let excluded = if what == "rewrite" {
            format!(
                ", {} entries ({}) left out",
                d.excluded_entries,
                crate::util::human_bytes(d.excluded_bytes)
            )
        } else {
            format!(", tags {}", d.tags.join(","))
        };
        match &d.new {
            Some(new) => ctx.out.say(format!(
                "{} -> {}{excluded}{}",
                short(&d.old),
                short(new),
                if d.old_removed {
                    "; the old one removed"
                } else {
                    ""
                }
            )),
            None => ctx
                .out
                .say(format!("would change {}{excluded}", short(&d.old))),
        }
        if ctx.out.verbose > 0 {
            for p in &d.excluded {
                ctx.out.say(format!("  - {p}"));
            }
        }
    }
    ctx.out.say(format!(
        "{} of {considered} snapshots {}",
        done.len(),
        if dry_run { "would change" } else { "changed" }
    ));
}
