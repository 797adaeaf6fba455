//! Mirrors the service's event log into its repositories (`eventlog/`,
//! `docs/format.md`), so that the server can be rebuilt from a repository
//! alone when its data directory is lost (`vouch dr rebuild`).
//!
//! A thread wakes every `every` (and once more when the service stops),
//! copies the records committed since the last pass into one new sealed
//! file per repository, and compacts: when a run of small files at the end
//! of the chain gets long, one file covering them replaces them (read again
//! from the local log, never from the repository), so a repository holds
//! about 15 files per size tier. The worst case lost with the data
//! directory is what was committed since the last pass that reached a
//! repository: `every` plus the time of one write, longer while a
//! repository is unreachable (`vouch_event_log_mirrored_seq` tells).
//!
//! No event records a pass: an event would itself need mirroring.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use vouch_events::{LogReader, RepositoryId};

use super::RepoSet;
use crate::repo::log_mirror::{covering_chain, MirrorFile};

/// How often the log is mirrored unless configured (`[log] mirror_every`).
pub const MIRROR_EVERY: Duration = Duration::from_secs(10);
/// Bytes of records in one new file at most (a long backlog is split).
const NEW_FILE_BYTES: usize = 16 << 20;
/// Files of a size tier that are merged into one.
const FAN_IN: usize = 16;
/// A merge never makes a file larger than this (it is held in memory).
const MAX_MERGED_BYTES: u64 = 64 << 20;

/// What went wrong in a pass.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// The repository could not be opened, listed or written.
    #[error(transparent)]
    Repository(#[from] crate::error::Error),
    /// The local log could not be read.
    #[error("reading the event log: {0}")]
    Log(String),
    /// The repository's copy of this log holds other records than the log
    /// (another history under the same name): never extended.
    #[error("{0}")]
    Diverged(String),
}

impl From<vouch_events::EventError> for MirrorError {
    fn from(e: vouch_events::EventError) -> Self {
        MirrorError::Log(e.to_string())
    }
}

/// How far the mirror of one repository is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MirrorState {
    /// Every record up to this seq is in the repository.
    pub mirrored_seq: u64,
    /// Files of this log in the repository.
    pub files: usize,
    /// The last pass's error, if it failed.
    pub error: Option<String>,
}

/// The mirror's progress per repository, shared with the API and metrics.
#[derive(Debug, Default)]
pub struct MirrorStatus {
    states: Mutex<HashMap<RepositoryId, MirrorState>>,
}

impl MirrorStatus {
    /// How far the mirror of `repository` is (`None`: not mirrored, or no
    /// pass reached it yet).
    pub fn get(&self, repository: &RepositoryId) -> Option<MirrorState> {
        self.states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(repository)
            .cloned()
    }

    fn update(&self, repository: &RepositoryId, f: impl FnOnce(&mut MirrorState)) {
        let mut states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        f(states.entry(repository.clone()).or_default());
    }
}

/// The file of the data directory that names the log's copies when a
/// rebuild gave it a new name (`vouch dr rebuild`): the rebuilt log shares
/// its first records with the old one, but not what follows the rebuild,
/// so its copies must never be taken for the old log's.
pub const MIRROR_ID_FILE: &str = "log-mirror.id";

/// Whether `id` is a log id: 16 lower-case hex digits.
pub fn is_log_id(id: &str) -> bool {
    id.len() == 16
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The id under which the log a reader reads is mirrored: the one in
/// `data_dir`'s [`MIRROR_ID_FILE`], else 16 hex digits of its first
/// record's hash (`None` while the log is empty).
pub fn log_id(
    reader: &LogReader,
    data_dir: Option<&std::path::Path>,
) -> Result<Option<String>, vouch_events::EventError> {
    if let Some(dir) = data_dir {
        let path = dir.join(MIRROR_ID_FILE);
        match std::fs::read_to_string(&path) {
            Ok(s) if is_log_id(s.trim()) => return Ok(Some(s.trim().to_owned())),
            Ok(_) => {
                tracing::warn!(path = %path.display(), "not a log id; the first record's hash names the log's copies")
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(vouch_events::EventError::Io {
                    context: format!("reading {}", path.display()),
                    source: e,
                })
            }
        }
    }
    match reader.replay_from(1)?.next() {
        Some(env) => Ok(Some(env?.hash.to_hex()[..16].to_owned())),
        None => Ok(None),
    }
}

/// The size tier of a file: 16 times larger per tier.
fn tier(size: u64) -> u32 {
    size.max(1).ilog2() / 4
}

/// Mirrors one log into some repositories.
pub struct LogMirror {
    reader: LogReader,
    data_dir: Option<std::path::PathBuf>,
    repos: Arc<RepoSet>,
    targets: Vec<RepositoryId>,
    status: Arc<MirrorStatus>,
    log: Option<String>,
    /// Per repository, this log's files from seq 1 without a gap.
    chains: HashMap<RepositoryId, Vec<MirrorFile>>,
    /// Repositories whose copy holds another history, with why: not read
    /// again on every pass (the check downloads a whole file), until a
    /// restart.
    diverged: HashMap<RepositoryId, String>,
}

impl LogMirror {
    /// Mirrors what `reader` reads (bounded by the writer's committed seq)
    /// into each of `targets`.
    pub fn new(
        reader: LogReader,
        repos: Arc<RepoSet>,
        targets: Vec<RepositoryId>,
        status: Arc<MirrorStatus>,
    ) -> Self {
        LogMirror {
            reader,
            data_dir: None,
            repos,
            targets,
            status,
            log: None,
            chains: HashMap::new(),
            diverged: HashMap::new(),
        }
    }

    /// Reads the log's mirror id from `data_dir` ([`MIRROR_ID_FILE`]).
    pub fn with_data_dir(mut self, data_dir: std::path::PathBuf) -> Self {
        self.data_dir = Some(data_dir);
        self
    }

    /// One pass over every repository; a repository that fails is tried
    /// again from scratch (its listing read anew) on the next pass.
    pub fn pass(&mut self) -> Vec<(RepositoryId, MirrorError)> {
        let mut failed = Vec::new();
        let Some(committed) = self.reader.committed_seq() else {
            return failed;
        };
        if self.log.is_none() {
            match log_id(&self.reader, self.data_dir.as_deref()) {
                Ok(id) => self.log = id,
                Err(e) => {
                    for t in &self.targets {
                        failed.push((t.clone(), MirrorError::Log(e.to_string())));
                    }
                    return failed;
                }
            }
        }
        let Some(log) = self.log.clone() else {
            return failed;
        };
        for id in self.targets.clone() {
            if let Some(why) = self.diverged.get(&id) {
                failed.push((id, MirrorError::Diverged(why.clone())));
                continue;
            }
            match self.mirror_into(&id, &log, committed) {
                Ok(()) => {
                    let chain = &self.chains[&id];
                    let mirrored = chain.last().map_or(0, |f| f.last_seq);
                    self.status.update(&id, |s| {
                        s.mirrored_seq = mirrored;
                        s.files = chain.len();
                        s.error = None;
                    });
                }
                Err(e) => {
                    self.chains.remove(&id);
                    if let MirrorError::Diverged(why) = &e {
                        self.diverged.insert(id.clone(), why.clone());
                    }
                    self.status.update(&id, |s| s.error = Some(e.to_string()));
                    failed.push((id, e));
                }
            }
        }
        failed
    }

    fn mirror_into(
        &mut self,
        id: &RepositoryId,
        log: &str,
        committed: u64,
    ) -> Result<(), MirrorError> {
        let repo = self.repos.open(id)?;
        if !self.chains.contains_key(id) {
            let files = repo.list_log_mirror()?;
            let (chain, _) = covering_chain(&files, log);
            let chain: Vec<MirrorFile> = chain.into_iter().cloned().collect();
            if let Some(last) = chain.last() {
                self.check_same_history(&repo, last)?;
            }
            self.chains.insert(id.clone(), chain);
        }
        let chain = self.chains.entry(id.clone()).or_default();
        let mut covered = chain.last().map_or(0, |f| f.last_seq);
        while covered < committed {
            let (frames, last) = self.reader.frames(covered + 1, committed, NEW_FILE_BYTES)?;
            if last <= covered {
                break;
            }
            chain.push(repo.write_log_mirror(log, covered + 1, last, frames)?);
            covered = last;
        }
        compact(&self.reader, &repo, log, chain)?;
        Ok(())
    }
}

impl LogMirror {
    /// Checks that the newest copied record is this log's own record at
    /// that seq: a copy of another history under the same name (a log
    /// cut by `--repair-log`, say) is never extended.
    fn check_same_history(
        &self,
        repo: &crate::repo::Repository,
        last: &MirrorFile,
    ) -> Result<(), MirrorError> {
        let copied = vouch_events::last_record(&repo.read_log_mirror(last)?);
        let (local, _) = self
            .reader
            .frames(last.last_seq, last.last_seq, usize::MAX)?;
        let local = vouch_events::last_record(&local);
        if copied.is_some() && copied == local {
            return Ok(());
        }
        Err(MirrorError::Diverged(format!(
            "the repository's copy of log {} ends at seq {} with another record than this log              holds there{}: it is another history under the same name, and it is left as it is.              Give this log a new name (write 16 new hex digits into DATA_DIR/{MIRROR_ID_FILE} and              restart) to copy it afresh",
            last.log,
            last.last_seq,
            if local.is_none() { " (this log is shorter)" } else { "" }
        )))
    }
}

/// Merges runs of small files at the end of `chain`: for each tier from
/// the smallest, the files at the end that are of that tier or smaller,
/// when there are [`FAN_IN`] of them, become one.
fn compact(
    reader: &LogReader,
    repo: &crate::repo::Repository,
    log: &str,
    chain: &mut Vec<MirrorFile>,
) -> Result<(), MirrorError> {
    'merging: loop {
        let top = chain.iter().map(|f| tier(f.size)).max().unwrap_or(0);
        for t in 0..=top {
            let run = chain.iter().rev().take_while(|f| tier(f.size) <= t).count();
            if run < FAN_IN {
                continue;
            }
            let tail = &chain[chain.len() - run..];
            if tail.iter().map(|f| f.size).sum::<u64>() > MAX_MERGED_BYTES {
                break 'merging;
            }
            let (first, last) = (tail[0].first_seq, tail[run - 1].last_seq);
            let (frames, got) = reader.frames(first, last, usize::MAX)?;
            if got != last {
                break 'merging;
            }
            let merged = repo.write_log_mirror(log, first, last, frames)?;
            for f in tail {
                // Immutable storage may refuse: the covered file stays,
                // harmless to readers.
                if let Err(e) = repo.delete_log_mirror(f) {
                    tracing::debug!(file = %f.name, error = %e, "event log mirror: a covered file stays");
                }
            }
            let keep = chain.len() - run;
            chain.truncate(keep);
            chain.push(merged);
            continue 'merging;
        }
        break;
    }
    Ok(())
}

/// Runs `mirror` on a thread: a pass every `every`, and a last one when
/// `stop` is set (so the service's last events are mirrored too).
pub fn spawn(
    mut mirror: LogMirror,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("log-mirror".into())
        .spawn(move || {
            let mut failing: HashMap<RepositoryId, Instant> = HashMap::new();
            loop {
                let last = stop.load(Ordering::Acquire);
                let _span = tracing::info_span!("log_mirror").entered();
                for (id, e) in mirror.pass() {
                    // Warned once per failure streak, then every 10 min.
                    let warn = failing
                        .get(&id)
                        .is_none_or(|since| since.elapsed() >= Duration::from_secs(600));
                    if warn {
                        tracing::warn!(repository = %id, error = %e, "event log mirror failed: the repository's copy of the log falls behind (it is retried)");
                        failing.insert(id, Instant::now());
                    }
                }
                for id in &mirror.targets {
                    if mirror.status.get(id).is_some_and(|s| s.error.is_none())
                        && failing.remove(id).is_some()
                    {
                        tracing::info!(repository = %id, "event log mirror caught up again");
                    }
                }
                if last {
                    break;
                }
                let until = Instant::now() + every;
                while Instant::now() < until && !stop.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(100).min(every));
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use vouch_events::{EventLog, JobFinished, JobId, LogImporter, LogOptions, ManualClock};

    use super::*;
    use crate::backend::storage::Storage;
    use crate::workers::RepoSpec;

    fn repo_set(dir: &std::path::Path) -> Arc<RepoSet> {
        crate::workers::tests::new_repo(dir);
        let path = dir.join("repo");
        let spec = RepoSpec {
            id: RepositoryId::new("main"),
            storage: Storage::Local(path),
            passphrase: b"pw".to_vec().into(),
        };
        Arc::new(RepoSet::new(
            vec![spec],
            dir.join("sandbox"),
            1 << 20,
            vec![],
        ))
    }

    #[test]
    fn many_small_passes_stay_few_files_and_rebuild_the_exact_log() {
        let dir = tempfile::tempdir().unwrap();
        let repos = repo_set(dir.path());
        let clock = ManualClock::new(1_000);
        let mut log = EventLog::open(
            dir.path().join("events"),
            LogOptions::default(),
            Arc::new(clock),
        )
        .unwrap();
        let status = Arc::new(MirrorStatus::default());
        let id = RepositoryId::new("main");
        let mut mirror = LogMirror::new(
            log.reader(),
            repos.clone(),
            vec![id.clone()],
            status.clone(),
        );
        assert!(mirror.pass().is_empty(), "an empty log: nothing to do");
        let mut most_files = 0;
        for n in 0..600u64 {
            // Passes of 1 to 3 events, as a quiet service makes them.
            for k in 0..=(n % 3) {
                log.append_one(
                    &JobFinished {
                        job: JobId::new(format!("job-{n}-{k}")),
                    }
                    .into(),
                )
                .unwrap();
            }
            let failed = mirror.pass();
            assert!(
                failed.is_empty(),
                "{:?}",
                failed.first().map(|f| f.1.to_string())
            );
            let state = status.get(&id).unwrap();
            assert_eq!(state.mirrored_seq, log.last_seq());
            most_files = most_files.max(state.files);
        }
        let repo = repos.open(&id).unwrap();
        let files = repo.list_log_mirror().unwrap();
        assert!(
            most_files <= 3 * FAN_IN && files.len() <= 3 * FAN_IN,
            "compaction keeps the count down: at most {most_files}, now {}",
            files.len()
        );
        // A mirror started afresh (a restart) finds where it was.
        let mut again = LogMirror::new(log.reader(), repos.clone(), vec![id.clone()], status);
        assert!(again.pass().is_empty());
        assert_eq!(repo.list_log_mirror().unwrap(), files, "nothing rewritten");

        let log_id = log_id(&log.reader(), None).unwrap().unwrap();
        let (chain, covered) = covering_chain(&files, &log_id);
        assert_eq!(covered, log.last_seq());
        let out = dir.path().join("rebuilt");
        let mut import = LogImporter::create(&out, 1 << 20).unwrap();
        for f in chain {
            import.push(&repo.read_log_mirror(f).unwrap()).unwrap();
        }
        let imported = import.finish().unwrap();
        assert_eq!(imported.last_seq, log.last_seq());
        assert_eq!(imported.last_hash, log.last_hash());
    }

    #[test]
    fn a_copy_of_another_history_under_the_same_name_is_never_extended() {
        let dir = tempfile::tempdir().unwrap();
        let repos = repo_set(dir.path());
        let id = RepositoryId::new("main");
        let job = |n: &str| -> vouch_events::Event { JobFinished { job: JobId::new(n) }.into() };
        // Two logs whose first records are the same (same event, same
        // clock), so the same name; their second records differ.
        let open = |name: &str| {
            EventLog::open(
                dir.path().join(name),
                LogOptions::default(),
                Arc::new(ManualClock::new(1_000)),
            )
            .unwrap()
        };
        let mut a = open("a");
        let mut b = open("b");
        a.append(&[job("first"), job("a-2"), job("a-3")]).unwrap();
        b.append(&[job("first"), job("b-2"), job("b-3"), job("b-4")])
            .unwrap();
        assert_eq!(
            log_id(&a.reader(), None).unwrap(),
            log_id(&b.reader(), None).unwrap()
        );
        let status = Arc::new(MirrorStatus::default());
        let mut ma = LogMirror::new(a.reader(), repos.clone(), vec![id.clone()], status.clone());
        assert!(ma.pass().is_empty());
        let mut mb = LogMirror::new(b.reader(), repos.clone(), vec![id.clone()], status.clone());
        let failed = mb.pass();
        assert_eq!(failed.len(), 1);
        assert!(
            matches!(&failed[0].1, MirrorError::Diverged(m) if m.contains("another history")),
            "{}",
            failed[0].1
        );
        assert_eq!(
            status.get(&id).unwrap().mirrored_seq,
            3,
            "a's copy is left as it is"
        );
        // Under a name of its own (what `vouch dr rebuild` gives a rebuilt
        // log), b is copied beside it.
        let own = dir.path().join("b-data");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join(MIRROR_ID_FILE), "00112233aabbccdd\n").unwrap();
        let mut mb = LogMirror::new(b.reader(), repos.clone(), vec![id.clone()], status.clone())
            .with_data_dir(own);
        assert!(mb.pass().is_empty());
        let files = repos.open(&id).unwrap().list_log_mirror().unwrap();
        assert_eq!(covering_chain(&files, "00112233aabbccdd").1, 4);
    }
}
