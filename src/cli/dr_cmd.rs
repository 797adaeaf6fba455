//! `vouch dr`: disaster recovery of the server itself. `rebuild` makes a
//! new data directory from a repository's copy of the event log
//! (`eventlog/`, written by `vouch serve`'s mirror); `status` shows which
//! logs a repository holds and how far each goes.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use vouch_events::{Event, EventLog, LogImporter, LogOptions, ServiceRebuilt, SystemClock};

use crate::repo::log_mirror::{covering_chain, MirrorFile};
use crate::repo::Repository;

/// Options of `vouch dr`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch dr status -r /srv/backup
  vouch dr rebuild -r /srv/backup --data-dir /var/lib/vouch

EXIT STATUS
  0  done; 1 it failed; 10 no repository there; 12 wrong passphrase")]
pub struct DrArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: DrAction,
}

/// `vouch dr` subcommands.
#[derive(Subcommand, Debug)]
pub enum DrAction {
    /// Rebuild a server's data directory from the copy of its event log in
    /// the repository `--repo` names: plans, points with their states and
    /// evidence, alerts. Tokens are not in the log: a new admin token is
    /// made. Start `vouch serve` on the directory afterwards.
    Rebuild {
        /// The data directory to make (it must not exist, or be empty).
        #[arg(long, env = "VOUCH_DATA_DIR")]
        data_dir: PathBuf,
        /// Which log, when the repository holds copies of several
        /// (`vouch dr status` lists them).
        #[arg(long)]
        log: Option<String>,
    },
    /// The event logs the repository `--repo` holds copies of: how far each
    /// goes without a gap, and when its last copied event was recorded.
    Status,
}

/// One log's copy in a repository.
struct LogCopy {
    log: String,
    files: usize,
    covered: u64,
    /// When its newest copied record was recorded (none: unreadable).
    newest_unix_ns: Option<i64>,
}

/// Every log copied into the repository, the most recent first (by when
/// its newest copied record was recorded): after a rebuild the repository
/// holds the old log's copy and the rebuilt one's, and the latter is the
/// live history.
fn logs(repo: &Repository, files: &[MirrorFile]) -> Vec<LogCopy> {
    let ids: BTreeSet<&str> = files.iter().map(|f| f.log.as_str()).collect();
    let mut out: Vec<LogCopy> = ids
        .into_iter()
        .map(|log| {
            let (chain, covered) = covering_chain(files, log);
            let newest_unix_ns = chain
                .last()
                .and_then(|f| repo.read_log_mirror(f).ok())
                .and_then(|frames| vouch_events::last_record(&frames))
                .map(|r| r.recorded_unix_ns);
            LogCopy {
                log: log.to_owned(),
                files: chain.len(),
                covered,
                newest_unix_ns,
            }
        })
        .collect();
    out.sort_by_key(|c| std::cmp::Reverse(c.newest_unix_ns));
    out
}

fn open(repo: Option<&Path>) -> anyhow::Result<Repository> {
    let Some(location) = repo else {
        bail!("no repository given: use --repo LOCATION (or VOUCH_REPOSITORY)");
    };
    let backend = super::storage_at(location)?;
    let config = Repository::read_config(backend.as_ref())?;
    let pw = super::password::existing()?;
    Ok(Repository::open_with_config(backend, config, &pw)?)
}

/// Runs `vouch dr`.
pub fn run(a: DrArgs, repo: Option<PathBuf>, json: bool) -> anyhow::Result<i32> {
    let repository = open(repo.as_deref())?;
    match a.action {
        DrAction::Status => status(&repository, json),
        DrAction::Rebuild { data_dir, log } => {
            let location = repo.map(|p| p.display().to_string()).unwrap_or_default();
            rebuild(&repository, &location, &data_dir, log.as_deref(), json)
        }
    }
}

fn status(repo: &Repository, json: bool) -> anyhow::Result<i32> {
    let files = repo.list_log_mirror()?;
    let copies = logs(repo, &files);
    if json {
        let v: Vec<_> = copies
            .iter()
            .map(|c| {
                serde_json::json!({"log": c.log, "files": c.files, "recovers_to_seq": c.covered,
                    "newest_recorded": c.newest_unix_ns.map(crate::util::rfc3339)})
            })
            .collect();
        println!("{}", serde_json::json!({ "logs": v }));
        return Ok(0);
    }
    if copies.is_empty() {
        println!("no copy of an event log in this repository (is it served by a `vouch serve` with [log] mirror_every on?)");
        return Ok(1);
    }
    for c in &copies {
        println!(
            "log {}: events 1 to {} in {} files, the newest recorded {}",
            c.log,
            c.covered,
            c.files,
            c.newest_unix_ns
                .map_or_else(|| "(unreadable)".to_owned(), crate::util::rfc3339)
        );
    }
    Ok(0)
}

fn rebuild(
    repo: &Repository,
    location: &str,
    data_dir: &Path,
    log: Option<&str>,
    json: bool,
) -> anyhow::Result<i32> {
    let files = repo.list_log_mirror()?;
    let copies = logs(repo, &files);
    let chosen = match (log, copies.as_slice()) {
        (_, []) => bail!(
            "this repository holds no copy of an event log (eventlog/ is empty): it was not \
             served by a `vouch serve` that mirrors its log. Its points can still be restored \
             with the CLI, and a new service finds them (point.discovered, unknown until proven)"
        ),
        (Some(l), _) => copies.iter().find(|c| c.log == l).with_context(|| {
            format!("the repository holds no copy of log {l} (`vouch dr status` lists them)")
        })?,
        (None, [newest, others @ ..]) => {
            if !others.is_empty() {
                eprintln!(
                    "the repository holds copies of {} event logs; rebuilding from {}, the most \
                     recent (--log names another; `vouch dr status` lists them)",
                    copies.len(),
                    newest.log
                );
            }
            newest
        }
    };
    if std::fs::read_dir(data_dir).is_ok_and(|mut d| d.next().is_some()) {
        bail!(
            "{} is not empty: `vouch dr rebuild` makes a new data directory; move the old one \
             aside (or name another)",
            data_dir.display()
        );
    }
    super::serve::make_private();
    super::serve::private_data_dir(data_dir)?;
    let log_dir = data_dir.join("events");
    let mut importer = LogImporter::create(&log_dir, LogOptions::default().segment_max_bytes)?;
    // From the next seq needed, the file reaching furthest; a file that
    // does not read is passed over for another that holds the same seqs.
    let mut bad: HashSet<&str> = HashSet::new();
    let mut used = 0u64;
    loop {
        let next = importer.next_seq();
        let Some(file) = files
            .iter()
            .filter(|f| {
                f.log == chosen.log
                    && f.first_seq <= next
                    && f.last_seq >= next
                    && !bad.contains(f.name.as_str())
            })
            .max_by_key(|f| f.last_seq)
        else {
            break;
        };
        let read = repo
            .read_log_mirror(file)
            .map_err(anyhow::Error::from)
            .and_then(|frames| Ok(importer.push(&frames)?));
        match read {
            Ok(_) => used += 1,
            Err(e) => {
                tracing::warn!(file = %file.name, error = %e, "a copy of the log does not read; looking for another that holds the same events");
                bad.insert(&file.name);
            }
        }
    }
    let imported = importer.finish()?;
    if imported.last_seq == 0 {
        bail!(
            "no event of log {} could be read from the repository",
            chosen.log
        );
    }
    // The rebuilt log's history parts from the old one's after the
    // recovered seq: its copies get a name of their own.
    let new_id = hex::encode(crate::crypto::random_array::<8>());
    let id_file = data_dir.join(crate::workers::log_mirror::MIRROR_ID_FILE);
    std::fs::write(&id_file, format!("{new_id}\n"))
        .with_context(|| format!("writing {}", id_file.display()))?;
    // The repository's ownership record names the service and the id it
    // has in the log.
    let owner = repo.read_owner().ok().flatten();
    if let Some(o) = &owner {
        super::service_link::adopt_service_id(data_dir, &o.service_id)?;
    }
    let repository_name = owner
        .as_ref()
        .map_or_else(|| location.to_owned(), |o| o.repository.clone());
    // What the recovered log says: its last time, the repositories its
    // plans use (the configuration must define each).
    let mut last_recorded = 0i64;
    let mut repositories = BTreeMap::<String, ()>::new();
    for env in vouch_events::LogReader::new(&log_dir).replay_from(1)? {
        let env = env?;
        last_recorded = env.recorded_unix_ns;
        let definition = match &env.event {
            Event::PlanCreated(p) => Some(&p.definition),
            Event::PlanChanged(p) => Some(&p.definition),
            _ => None,
        };
        if let Some(d) = definition {
            repositories.insert(d.repository.to_string(), ());
            if let Some(r) = &d.replica {
                repositories.insert(r.repository.to_string(), ());
            }
        }
    }
    let mut writer = EventLog::open(&log_dir, LogOptions::default(), Arc::new(SystemClock))?;
    writer.append_one(
        &ServiceRebuilt {
            repository: repository_name.clone(),
            log: chosen.log.clone(),
            recovered_seq: imported.last_seq,
            files: used,
        }
        .into(),
    )?;
    drop(writer);
    super::serve::ensure_admin_token(data_dir)?;
    let last_time = crate::util::rfc3339(last_recorded);
    let repositories: Vec<String> = repositories.into_keys().collect();
    if json {
        println!(
            "{}",
            serde_json::json!({
                "data_dir": data_dir.display().to_string(),
                "log": chosen.log,
                "recovered_seq": imported.last_seq,
                "last_recorded": last_time,
                "files": used,
                "mirrored_as": new_id,
                "repository": repository_name,
                "repositories_in_plans": repositories,
                "admin_token_file": data_dir.join(super::serve::INITIAL_ADMIN_TOKEN_FILE).display().to_string(),
            })
        );
    } else {
        println!(
            "rebuilt {} from {used} files: events 1 to {} of log {}, the last recorded {last_time}",
            data_dir.display(),
            imported.last_seq,
            chosen.log
        );
        println!("this repository is {repository_name:?} in the log");
        if !repositories.is_empty() {
            println!(
                "plans use the repositories {}: the configuration must define each before `vouch serve` starts (\"default\" is DATA_DIR/repository)",
                repositories.join(", ")
            );
        }
        println!(
            "a new admin token is in {} (mode 0600); tokens of the old server are not restored",
            data_dir
                .join(super::serve::INITIAL_ADMIN_TOKEN_FILE)
                .display()
        );
    }
    Ok(0)
}
