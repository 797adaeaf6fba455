//! `vouch find`.

use clap::Args;
use serde_json::json;

use super::{listing, Ctx, LatestArgs};
use crate::error::{exit_code, Error, Result};
use crate::find::{blobs_of_packs, blobs_with_prefixes, Finder, Matcher};
use crate::util::short_time;

/// `vouch find`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch find '*.conf'                    by name, in every snapshot
  vouch find -i 'readme*' -s latest      ignoring case, in the newest snapshot
  vouch find '/etc/**/*.pem'             a pattern with / matches whole paths
  vouch find --pack 3fa9c2d1             the files a damaged pack takes with it
  vouch find --blob 5f2c… --json         the files that hold a blob, as JSON

A pattern without / matches an entry's name (`*`, `?`, `[abc]`); one with /
matches its whole path from the snapshot's root, where `**` spans
directories. With --blob or --pack the arguments are ids (at least 4 hex
digits): files that hold such a blob, and directories whose listing is one,
are found.

EXIT STATUS
  0  the search ran (whether or not anything matched)
  1  it failed; 2 wrong usage; 12 wrong passphrase; 13 damaged data;
  19 a snapshot, blob or pack that does not exist")]
pub struct FindArgs {
    /// Patterns (or ids, with --blob or --pack).
    #[arg(required = true, value_name = "PATTERN")]
    pub patterns: Vec<String>,
    /// Search only this snapshot (id, prefix or `latest`; repeatable).
    #[arg(long = "snapshot", short = 's', value_name = "SNAPSHOT")]
    pub snapshots: Vec<String>,
    /// Only snapshots with this tag.
    #[arg(long)]
    pub tag: Option<String>,
    /// The arguments are blob ids: find the files that hold them.
    #[arg(long, conflicts_with = "pack")]
    pub blob: bool,
    /// The arguments are pack ids: find the files that hold any of their
    /// blobs.
    #[arg(long)]
    pub pack: bool,
    /// Match names ignoring case.
    #[arg(long, short = 'i')]
    pub ignore_case: bool,
    /// Show details as `ls -l` does.
    #[arg(long, short = 'l')]
    pub long: bool,
    /// With `-l`, sizes as `ls -lh` shows them.
    #[arg(long = "human-readable")]
    pub human: bool,
    /// Without --snapshot, `--host` keeps that host's snapshots and
    /// `--path` those whose sources include PATH; with it, they say which
    /// snapshot `latest` is.
    #[command(flatten)]
    pub latest: LatestArgs,
}

/// Searches the snapshots.
pub fn run(ctx: &Ctx, a: FindArgs) -> Result<i32> {
    if a.ignore_case && (a.blob || a.pack) {
        return Err(Error::InvalidArgument(
            "--ignore-case applies to names, not to --blob or --pack ids".into(),
        ));
    }
    let repo = ctx.open_cached()?;
    let mut chosen = super::chosen_snapshots(&repo, &a.snapshots, a.tag.as_ref(), &a.latest)?;
    chosen.sort_by_key(|(id, m)| (m.time_ns, *id));
    let index = repo.load_index()?;
    let matcher = if a.blob {
        Matcher::Blobs(blobs_with_prefixes(&index, &a.patterns)?)
    } else if a.pack {
        Matcher::Blobs(blobs_of_packs(&index, &a.patterns)?)
    } else {
        Matcher::names(&a.patterns, a.ignore_case)?
    };
    let mut finder = Finder::new(&repo, &index, matcher);
    let mut total = 0usize;
    let mut with_hits = 0usize;
    for (id, m) in &chosen {
        let found = finder.search(&m.tree)?;
        total += found.len();
        if found.is_empty() {
            continue;
        }
        with_hits += 1;
        if ctx.out.json {
            let matches: Vec<_> = found
                .iter()
                .map(|f| listing::node_json(&f.node, &String::from_utf8_lossy(&f.path)))
                .collect();
            ctx.out.json_line(&json!({
                "message_type": "matches",
                "snapshot": id.to_hex(),
                "short_id": id.short(),
                "time": crate::util::rfc3339(m.time_ns),
                "host": m.host,
                "hits": found.len(),
                "matches": matches,
            }));
            continue;
        }
        if !ctx.out.quiet {
            println!(
                "snapshot {} of {} at {} (UTC): {} found",
                id.short(),
                m.host,
                short_time(m.time_ns),
                found.len()
            );
        }
        for f in &found {
            let path = String::from_utf8_lossy(&f.path);
            if a.long {
                println!("{}", listing::long_line(&f.node, &path, a.human));
            } else {
                println!("{path}");
            }
        }
        if !ctx.out.quiet {
            println!();
        }
    }
    tracing::debug!(trees = finder.trees_loaded, "find: distinct trees read");
    if ctx.out.json {
        ctx.out.json_line(&json!({
            "message_type": "summary",
            "snapshots_searched": chosen.len(),
            "snapshots_with_hits": with_hits,
            "hits": total,
        }));
    } else {
        ctx.out.say(format!(
            "{total} found in {with_hits} of {} snapshots searched",
            chosen.len()
        ));
    }
    Ok(exit_code::OK)
}
