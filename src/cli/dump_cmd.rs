//! `vouch dump`.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use serde_json::json;

use super::{Ctx, SnapshotPath};
use crate::dump::{write_archive, ArchiveFormat, ContentReader};
use crate::error::{exit_code, Error, Result};
use crate::format::NodeKind;

/// `vouch dump`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch dump latest:/etc/fstab                  a file, to stdout
  vouch dump latest:/srv/db > db.tar            a directory, as tar
  vouch dump 3fa9c2d1 /home/alice --archive zip --target alice.zip
  vouch dump latest:/var/lib/pg | tar -x -C /tmp/pg

A file is written as it is. A directory becomes an archive whose entries
sit under the directory's own name (`db/...`; the snapshot's root: its
top-level names): tar keeps owners, hard links, devices and extended
attributes (as PAX records, for `tar --xattrs`); zip keeps files,
directories and symlinks with permissions and times. An archive is not
written to a terminal. With --target, the output appears whole or not at
all (written beside the target and renamed).

EXIT STATUS
  0  written
  1  it failed (the partial target is removed); 2 wrong usage; 12 wrong
  passphrase; 13 damaged data; 19 no such snapshot or path")]
pub struct DumpArgs {
    /// What to dump: `SNAPSHOT:PATH`, or SNAPSHOT and PATH as two arguments.
    #[command(flatten)]
    pub what: SnapshotPath,
    /// The path inside the snapshot (when not given as `SNAPSHOT:PATH`).
    pub path: Option<String>,
    /// The archive a directory becomes.
    #[arg(long, value_enum, default_value_t = ArchiveFormat::Tar)]
    pub archive: ArchiveFormat,
    /// Write to this file instead of stdout.
    #[arg(long, short = 't', value_name = "FILE")]
    pub target: Option<PathBuf>,
}

/// Writes a file's content or a directory's archive.
pub fn run(ctx: &Ctx, a: DumpArgs) -> Result<i32> {
    let (spec, sub) = a.what.split();
    let path = match (sub, a.path.clone()) {
        (Some(_), Some(_)) => {
            return Err(Error::InvalidArgument(
                "give the path once: `SNAPSHOT:PATH` or `SNAPSHOT PATH`".into(),
            ))
        }
        (Some(p), None) | (None, Some(p)) => p,
        (None, None) => {
            return Err(Error::InvalidArgument(
                "which path? `vouch dump SNAPSHOT:PATH` (`SNAPSHOT:/` for everything)".into(),
            ))
        }
    };
    let repo = Arc::new(ctx.open_cached()?);
    let (id, m) = repo.find_snapshot_of(&spec, &a.what.latest.filter())?;
    let index = Arc::new(repo.load_index()?);
    let node = crate::tree::find_node(&repo, &index, &m.tree, &path)?;
    let what = match &node {
        None => Dumped::Dir(m.tree, PathBuf::new()),
        Some(n) if n.kind == NodeKind::Dir => {
            let tree = n.subtree.ok_or_else(|| {
                Error::Damaged(format!("directory {path:?} has no listing in the snapshot"))
            })?;
            Dumped::Dir(tree, PathBuf::from(n.display_name()))
        }
        Some(n) if n.kind == NodeKind::File => Dumped::File(Box::new(n.clone())),
        Some(n) => {
            return Err(Error::InvalidArgument(format!(
                "{path:?} is a {} in snapshot {}: only files and directories can be dumped",
                format!("{:?}", n.kind).to_lowercase(),
                id.short()
            )))
        }
    };
    let summary = match &a.target {
        Some(target) => write_whole(target, |out| write(&repo, &index, &what, a.archive, out))?,
        None => {
            if matches!(what, Dumped::Dir(..)) && std::io::stdout().is_terminal() {
                return Err(Error::InvalidArgument(
                    "an archive is not written to a terminal: redirect stdout, or use --target FILE"
                        .into(),
                ));
            }
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
            let s = write(&repo, &index, &what, a.archive, &mut out)?;
            out.flush().map_err(|e| Error::io("writing to stdout", e))?;
            s
        }
    };
    for s in &summary.skipped {
        eprintln!("warning: not in the archive: {s}");
    }
    // JSON goes to stderr's place only with a target (stdout holds the data).
    if let Some(target) = &a.target {
        if ctx.out.json {
            ctx.out.json_line(&json!({
                "message_type": "summary", "snapshot": id.to_hex(), "path": path,
                "target": target, "entries": summary.entries, "bytes": summary.bytes,
                "skipped": summary.skipped,
            }));
        } else {
            ctx.out.say(format!(
                "dumped {path} of snapshot {} to {}: {} entries, {}",
                id.short(),
                target.display(),
                summary.entries,
                crate::util::human_bytes(summary.bytes)
            ));
        }
    }
    Ok(if summary.skipped.is_empty() {
        exit_code::OK
    } else {
        exit_code::PARTIAL
    })
}

/// A file, or a directory's tree and the name its entries sit under.
enum Dumped {
    File(Box<crate::format::Node>),
    Dir(crate::id::BlobId, PathBuf),
}

fn write(
    repo: &Arc<crate::repo::Repository>,
    index: &Arc<crate::repo::MasterIndex>,
    what: &Dumped,
    format: ArchiveFormat,
    out: &mut dyn Write,
) -> Result<crate::dump::ArchiveSummary> {
    match what {
        Dumped::File(node) => {
            let mut reader = ContentReader::new(repo.clone(), index.clone(), node)?;
            let bytes = std::io::copy(&mut reader, out).map_err(|e| Error::io("dumping", e))?;
            Ok(crate::dump::ArchiveSummary {
                entries: 1,
                bytes,
                skipped: Vec::new(),
            })
        }
        Dumped::Dir(tree, prefix) => write_archive(repo, index, tree, prefix, format, out),
    }
}

/// Runs `write` into a new file beside `target`, synced and renamed onto
/// it when whole; removed on failure.
fn write_whole<T>(target: &Path, write: impl FnOnce(&mut dyn Write) -> Result<T>) -> Result<T> {
    let dir = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".vouch-dump-")
        .tempfile_in(dir)
        .map_err(|e| Error::io(format!("creating a file in {}", dir.display()), e))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, tmp);
    let value = write(&mut out)?;
    let tmp = out
        .into_inner()
        .map_err(|e| Error::io(target.display().to_string(), e.into_error()))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| Error::io(target.display().to_string(), e))?;
    tmp.persist(target)
        .map_err(|e| Error::io(target.display().to_string(), e.error))?;
    Ok(value)
}
