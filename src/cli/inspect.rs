//! `snapshots`, `ls`, `diff`, `stats`.

use clap::Args;
use serde_json::json;

use super::{listing, Ctx, LatestArgs, SnapshotPath};
use crate::error::{exit_code, Result};
use crate::format::NodeKind;
use crate::util::{human_bytes, short_time};

/// `vouch snapshots`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch snapshots
  vouch snapshots --host db-1 --tag daily
  vouch snapshots --json | jq '.[].short_id'

EXIT STATUS
  0  listed; 1 it failed; 10 no repository there; 12 wrong passphrase")]
pub struct SnapshotsArgs {
    /// Only snapshots of this host.
    #[arg(long)]
    pub host: Option<String>,
    /// Only snapshots with this tag.
    #[arg(long)]
    pub tag: Option<String>,
}

/// Lists snapshots (from the manifests alone).
pub fn snapshots(ctx: &Ctx, a: SnapshotsArgs) -> Result<i32> {
    let repo = ctx.open_cached()?;
    let list: Vec<_> = repo
        .list_snapshots()?
        .into_iter()
        .filter(|(_, m)| a.host.as_ref().is_none_or(|h| &m.host == h))
        .filter(|(_, m)| a.tag.as_ref().is_none_or(|t| m.tags.contains(t)))
        .collect();
    let locks = repo.point_locks()?;
    let now = crate::util::now_ns();
    let locked = |id| locks.in_force(id, now).map(crate::util::rfc3339);
    if ctx.out.json {
        let v: Vec<_> = list
            .iter()
            .map(|(id, m)| {
                json!({
                    "id": id.to_hex(), "short_id": id.short(), "time": crate::util::rfc3339(m.time_ns),
                    "host": m.host, "paths": m.paths, "tags": m.tags, "parent": m.parent.map(|p| p.to_hex()),
                    "tree": m.tree.to_hex(), "user": m.user, "program": m.program, "summary": m.summary,
                    "warnings": m.warnings, "locked_until": locked(id),
                    "copied_from": m.copied_from.as_ref().map(|o| json!({
                        "repository": o.repository.to_hex(), "snapshot": o.snapshot.to_hex(),
                    })),
                })
            })
            .collect();
        ctx.out.json_line(&v);
    } else {
        println!(
            "{:<10}{:<21}{:<16}{:<10}{:>12}  {:<21}paths",
            "id", "time (UTC)", "host", "tags", "size", "locked until"
        );
        for (id, m) in &list {
            println!(
                "{:<10}{:<21}{:<16}{:<10}{:>12}  {:<21}{}",
                id.short(),
                short_time(m.time_ns),
                m.host,
                m.tags.join(","),
                human_bytes(m.summary.total_bytes),
                locks
                    .in_force(id, now)
                    .map(short_time)
                    .unwrap_or_else(|| "-".into()),
                m.paths.join(" ")
            );
        }
        println!("{} snapshots", list.len());
        if let Some((name, why)) = locks.unreadable.first() {
            eprintln!(
                "warning: point lock record {name} does not read ({why}): no snapshot can be forgotten until it is repaired"
            );
        }
    }
    Ok(exit_code::OK)
}

/// `vouch ls`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch ls latest                       every path of this host's newest snapshot
  vouch ls -l --human-readable 3fa9c2d1 /etc
  vouch ls --json latest:/home | jq -r 'select(.type==\"file\") | .path'

EXIT STATUS
  0  listed; 1 it failed; 10 no repository there; 12 wrong passphrase; 13 damaged trees; 19 no such snapshot or
  path")]
pub struct LsArgs {
    /// Snapshot.
    #[command(flatten)]
    pub what: SnapshotPath,
    /// Directory inside the snapshot.
    pub path: Option<String>,
    /// Show details as `ls -l` does: type and permissions, links, user,
    /// group, size, time (UTC), and a symlink's target.
    #[arg(long, short = 'l')]
    pub long: bool,
    /// With `-l`, sizes as `ls -lh` shows them (1.5K, 20M).
    #[arg(long = "human-readable")]
    pub human: bool,
}

/// Lists the files of a snapshot.
pub fn ls(ctx: &Ctx, a: LsArgs) -> Result<i32> {
    let repo = ctx.open_cached()?;
    let (spec, sub) = a.what.split();
    let (_, m) = repo.find_snapshot_of(&spec, &a.what.latest.filter())?;
    let index = repo.load_index()?;
    let path = a.path.clone().or(sub).unwrap_or_default();
    let base = path.trim_end_matches('/').to_string();
    let root = if base.is_empty() || base == "/" {
        Some(m.tree)
    } else {
        let node = crate::tree::find_node(&repo, &index, &m.tree, &base)?
            .ok_or_else(|| crate::Error::NotFound(format!("no path {base:?}")))?;
        if node.kind != NodeKind::Dir {
            print_node(ctx, &a, &base, &node);
            return Ok(exit_code::OK);
        }
        node.subtree
    };
    let prefix = if base.starts_with('/') || base.is_empty() {
        base.clone()
    } else {
        format!("/{base}")
    };
    if let Some(root) = root {
        crate::tree::walk(&repo, &index, &root, &mut |rel, node| {
            print_node(
                ctx,
                &a,
                &format!("{prefix}/{}", String::from_utf8_lossy(rel)),
                node,
            );
            Ok(true)
        })?;
    }
    Ok(exit_code::OK)
}

fn print_node(ctx: &Ctx, a: &LsArgs, path: &str, node: &crate::format::Node) {
    if ctx.out.json {
        ctx.out.json_line(&listing::node_json(node, path));
    } else if a.long {
        println!("{}", listing::long_line(node, path, a.human));
    } else {
        println!("{path}");
    }
}

/// `vouch diff`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch diff 3fa9c2d1 latest
  vouch diff --json 3fa9c2d1 77b0e4aa

Each line starts with + (added), - (removed), M (content changed), T
(type changed) or U (metadata only: mode, owner, times, attributes).

EXIT STATUS
  0  compared (whether or not anything differs); 1 it failed; 10 no repository there; 12 wrong passphrase; 19 no
  such snapshot")]
pub struct DiffArgs {
    /// Older snapshot.
    pub first: String,
    /// Newer snapshot.
    pub second: String,
    /// Which snapshot `latest` is.
    #[command(flatten)]
    pub latest: LatestArgs,
}

/// Shows added (+), removed (-), changed (M), metadata-only (U) and type (T) changes.
pub fn diff(ctx: &Ctx, a: DiffArgs) -> Result<i32> {
    let repo = ctx.open_cached()?;
    let latest = a.latest.filter();
    let (_, m1) = repo.find_snapshot_of(&a.first, &latest)?;
    let (_, m2) = repo.find_snapshot_of(&a.second, &latest)?;
    let index = repo.load_index()?;
    let changes = crate::diff::diff(&repo, &index, &m1.tree, &m2.tree)?;
    if ctx.out.json {
        ctx.out.json_line(&changes);
    } else {
        for c in &changes {
            println!("{} {}", c.kind, c.path);
        }
        let count = |k| changes.iter().filter(|c| c.kind == k).count();
        ctx.out.say(format!(
            "{} added, {} removed, {} changed, {} metadata only",
            count('+'),
            count('-'),
            count('M') + count('T'),
            count('U')
        ));
    }
    Ok(exit_code::OK)
}

/// `vouch stats`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch stats                   every snapshot, and the repository's packs
  vouch stats latest --json     the newest snapshot of this host, as JSON
  vouch stats --host db-1       every snapshot of one host

Restore size counts each file in every snapshot that holds it; unique data
counts each distinct blob once; deduplication is their ratio, compression
the ratio of unique data to what it takes in packs.

EXIT STATUS
  0  done; 1 it failed; 10 no repository there; 12 wrong passphrase; 13 damaged trees; 19 no such snapshot")]
pub struct StatsArgs {
    /// Snapshots (ids, prefixes or `latest`); none: every snapshot, of
    /// `--host` and with `--tag` when given.
    pub snapshots: Vec<String>,
    /// Only snapshots with this tag (when none are named).
    #[arg(long)]
    pub tag: Option<String>,
    /// Which snapshot `latest` is; without named snapshots, `--host` keeps
    /// only that host's.
    #[command(flatten)]
    pub latest: LatestArgs,
}

/// Prints what the snapshots hold and cost.
pub fn stats(ctx: &Ctx, a: StatsArgs) -> Result<i32> {
    let repo = ctx.open_cached()?;
    let host = a.latest.latest_host.as_ref();
    let chosen = super::chosen_snapshots(&repo, &a.snapshots, a.tag.as_ref(), &a.latest)?;
    let index = repo.load_index()?;
    let s = crate::stats::stats(&repo, &index, &chosen)?;
    let whole = (a.snapshots.is_empty()
        && host.is_none()
        && a.tag.is_none()
        && a.latest.latest_paths.is_empty())
    .then(|| crate::stats::repository_totals(&index, &s));
    if ctx.out.json {
        ctx.out
            .json_line(&json!({"type": "stats", "snapshots": s, "repository": whole}));
        return Ok(exit_code::OK);
    }
    println!("snapshots:        {}", s.snapshots);
    println!(
        "restore size:     {} in {} files, {} directories, {} others",
        human_bytes(s.restore_size),
        s.files,
        s.dirs,
        s.others
    );
    println!(
        "unique data:      {} in {} blobs (trees: {} in {} blobs)",
        human_bytes(s.data_bytes),
        s.data_blobs,
        human_bytes(s.tree_bytes),
        s.tree_blobs
    );
    println!(
        "stored:           {} (compression {:.2}x)",
        human_bytes(s.stored_bytes),
        s.compression_ratio
    );
    println!("deduplication:    {:.2}x", s.dedup_ratio);
    if let Some(w) = whole {
        println!(
            "repository:       {} packs, {} ({} in {} blobs no snapshot needs: `vouch prune` frees it)",
            w.packs,
            human_bytes(w.pack_bytes),
            human_bytes(w.unreferenced_bytes),
            w.blobs
        );
    }
    Ok(exit_code::OK)
}

/// What `vouch cat` prints.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CatKind {
    /// The repository's config (no argument).
    Config,
    /// A snapshot's manifest (an id, a prefix or `latest`).
    Snapshot,
    /// An index file (its 64-digit id).
    Index,
    /// The tree of a snapshot's directory (`SNAP` or `SNAP:PATH`).
    Tree,
    /// A blob's plaintext, raw, to stdout (its 64-digit id).
    Blob,
    /// A key file: its KDF parameters and wrapped key, never the key.
    Key,
}

/// `vouch cat`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch cat config
  vouch cat snapshot latest
  vouch cat tree latest:/etc         the tree of /etc in the newest snapshot
  vouch cat blob 5f2c…  > blob.bin   a blob's plaintext, raw

For debugging: everything but `blob` is JSON as the repository stores it
(binary names and values as arrays of bytes). The master key is never
printed (`vouch key export` makes a paper copy).

EXIT STATUS
  0  printed; 1 it failed; 2 wrong usage; 10 no repository there; 12 wrong passphrase; 13 damaged data; 19 no such
  snapshot, index, tree, blob or key")]
pub struct CatArgs {
    /// What to print.
    #[arg(value_enum)]
    pub kind: CatKind,
    /// Which one (none for `config`).
    pub id: Option<String>,
    /// Which snapshot `latest` is.
    #[command(flatten)]
    pub latest: LatestArgs,
}

/// Prints one of the repository's structures, for debugging.
pub fn cat(ctx: &Ctx, a: CatArgs) -> Result<i32> {
    use crate::error::Error;
    let repo = ctx.open_cached()?;
    let id = |what: &str| {
        a.id.clone()
            .ok_or_else(|| Error::InvalidArgument(format!("`vouch cat {what}` needs an id")))
    };
    let hex = |what: &str| -> Result<[u8; 32]> {
        let text = id(what)?;
        let mut out = [0u8; 32];
        hex::decode_to_slice(&text, &mut out).map_err(|_| {
            Error::InvalidArgument(format!("{text:?} is not a {what} id (64 hex digits)"))
        })?;
        Ok(out)
    };
    let print = |v: serde_json::Value| -> Result<i32> {
        let text = serde_json::to_string_pretty(&v)
            .map_err(|e| Error::InvalidArgument(format!("cannot print: {e}")))?;
        println!("{text}");
        Ok(exit_code::OK)
    };
    fn to_json<T: serde::Serialize>(v: &T) -> serde_json::Value {
        serde_json::to_value(v)
            .unwrap_or_else(|e| serde_json::json!({"unprintable": e.to_string()}))
    }
    match a.kind {
        CatKind::Config => {
            if a.id.is_some() {
                return Err(Error::InvalidArgument(
                    "`vouch cat config` takes no id".into(),
                ));
            }
            print(to_json(repo.config()))
        }
        CatKind::Snapshot => {
            let (sid, m) = repo.find_snapshot_of(&id("snapshot")?, &a.latest.filter())?;
            print(json!({"id": sid.to_hex(), "manifest": to_json(&m)}))
        }
        CatKind::Index => {
            let iid = crate::id::IndexId(hex("index")?);
            print(to_json(&repo.load_index_file(&iid)?))
        }
        CatKind::Tree => {
            let spec = id("tree")?;
            let (snap, path) = match spec.split_once(':') {
                Some((s, p)) => (s.to_owned(), p.trim_end_matches('/').to_owned()),
                None => (spec, String::new()),
            };
            let (_, m) = repo.find_snapshot_of(&snap, &a.latest.filter())?;
            let index = repo.load_index()?;
            let tree_id = if path.is_empty() || path == "/" {
                m.tree
            } else {
                let node = crate::tree::find_node(&repo, &index, &m.tree, &path)?
                    .ok_or_else(|| Error::NotFound(format!("no path {path:?} in {snap}")))?;
                node.subtree
                    .ok_or_else(|| Error::InvalidArgument(format!("{path:?} is not a directory")))?
            };
            let tree = crate::tree::load(&repo, &index, &tree_id)?;
            print(json!({"id": tree_id.to_hex(), "tree": to_json(&tree)}))
        }
        CatKind::Blob => {
            let bid = crate::id::BlobId(hex("blob")?);
            let index = repo.load_index()?;
            let bytes = repo.read_blob(&index, &bid)?;
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            out.write_all(&bytes)
                .and_then(|()| out.flush())
                .map_err(|e| Error::io("writing to stdout", e))?;
            Ok(exit_code::OK)
        }
        CatKind::Key => {
            let kid = repo.find_key(&id("key")?)?;
            let bytes = repo
                .backend()
                .read(crate::backend::FileKind::Key, &kid.to_hex())?;
            let v: serde_json::Value = serde_json::from_slice(&bytes)
                .map_err(|e| Error::InvalidArgument(format!("key {kid} does not parse: {e}")))?;
            print(json!({"id": kid.to_hex(), "key": v}))
        }
    }
}
