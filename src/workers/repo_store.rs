//! The engine's side of the repository protocol (`/repo/v1/`): the
//! [`RepoStore`] the web layer calls, over the repositories the service
//! serves. The web layer decides who may call what; this checks what is
//! written: a content-addressed name must be the BLAKE3 of its bytes, an
//! index may only name stored packs, a snapshot must decrypt with the
//! repository's key and reference only stored data (referential integrity
//! at commit), and only shared locks may be taken or removed by callers
//! other than an admin.

use std::path::PathBuf;
use std::sync::Arc;

use vouch_events::sources::agent_repository;
use vouch_events::RepositoryId;
use vouch_web::{
    FileStat, NewAgentRepository, PutOutcome, PutRules, RepoFile, RepoStore, RepoStoreError,
    SnapshotFacts,
};

use super::{RepoSet, RepoSpec};
use crate::backend::storage::Storage;
use crate::backend::{FileKind, LocalBackend, WriteSync};
use crate::error::Error;
use crate::id::{IndexId, PackId, SnapshotId};
use crate::repo::lock::LockFile;
use crate::repo::{integrity, InitOptions, Repository};

/// Where agents' repositories live, below the data directory:
/// `agents/NAME/repository` and `agents/NAME/repository.passphrase`.
pub const AGENTS_DIR: &str = "agents";

/// The repositories of a service, as the protocol serves them.
pub struct EngineRepoStore {
    repos: Arc<RepoSet>,
    agents_dir: PathBuf,
}

impl EngineRepoStore {
    /// A store over `repos`; agents' repositories are made below
    /// `data_dir/agents`.
    pub fn new(repos: Arc<RepoSet>, data_dir: &std::path::Path) -> Self {
        EngineRepoStore {
            repos,
            agents_dir: data_dir.join(AGENTS_DIR),
        }
    }

    fn open(&self, repo: &str) -> Result<Arc<Repository>, RepoStoreError> {
        let id = RepositoryId::new(repo);
        if !self.repos.contains(&id) {
            return Err(RepoStoreError::NoRepository(repo.to_owned()));
        }
        self.repos.open(&id).map_err(store_error)
    }
}

/// The agents' repositories found below `data_dir/agents` (made at their
/// registration), to serve again after a restart.
pub fn agent_repositories(data_dir: &std::path::Path) -> anyhow::Result<Vec<RepoSpec>> {
    let dir = data_dir.join(AGENTS_DIR);
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(anyhow::anyhow!("reading {}: {e}", dir.display())),
    };
    for entry in entries {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let path = entry.path().join("repository");
        let pw = entry.path().join("repository.passphrase");
        if !path.join("config").exists() {
            tracing::warn!(agent = %name, "an agent directory without a repository is skipped");
            continue;
        }
        let passphrase = std::fs::read_to_string(&pw)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", pw.display()))?;
        out.push(RepoSpec {
            id: RepositoryId::new(agent_repository(&name)),
            storage: Storage::Local(path),
            passphrase: passphrase.trim_end().as_bytes().to_vec().into(),
        });
    }
    Ok(out)
}

/// Writes a new file readable only by its owner (0600), durably.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn kind_of(kind: RepoFile) -> FileKind {
    match kind {
        RepoFile::Config => FileKind::Config,
        RepoFile::Owner => FileKind::Owner,
        RepoFile::Key => FileKind::Key,
        RepoFile::Pack => FileKind::Pack,
        RepoFile::Index => FileKind::Index,
        RepoFile::Snapshot => FileKind::Snapshot,
        RepoFile::Lock => FileKind::Lock,
        RepoFile::PointLock => FileKind::PointLock,
    }
}

fn store_error(e: Error) -> RepoStoreError {
    match e {
        Error::NotFound(m) => RepoStoreError::NotFound(m),
        Error::InvalidArgument(m) => RepoStoreError::Refused(m),
        e @ (Error::CorruptMetadata { .. }
        | Error::Damaged(_)
        | Error::UnsupportedFormat { .. }
        | Error::SnapshotUnreadable(_)) => RepoStoreError::Refused(e.to_string()),
        e @ Error::PointLocked(_) => RepoStoreError::Refused(e.to_string()),
        e => RepoStoreError::Unavailable(format!("{e} ({})", e.hint())),
    }
}

/// A file name the protocol accepts: 64 lower-case hex digits for named
/// kinds, empty for config and owner.
fn check_name(kind: RepoFile, name: &str) -> Result<(), RepoStoreError> {
    let ok = if kind.is_named() {
        name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    } else {
        name.is_empty()
    };
    if ok {
        Ok(())
    } else {
        Err(RepoStoreError::Invalid(format!(
            "{name:?} is not a name of a {} file (64 lower-case hex digits)",
            kind.segment()
        )))
    }
}

fn content_id_matches(kind: RepoFile, name: &str, body: &[u8]) -> bool {
    match kind {
        RepoFile::Pack => PackId::hash_of(body).to_hex() == name,
        RepoFile::Index => IndexId::hash_of(body).to_hex() == name,
        RepoFile::Snapshot => SnapshotId::hash_of(body).to_hex() == name,
        RepoFile::PointLock => blake3::hash(body).to_hex().as_str() == name,
        _ => false,
    }
}

impl RepoStore for EngineRepoStore {
    fn has(&self, repo: &str) -> bool {
        self.repos.contains(&RepositoryId::new(repo))
    }

    fn list(&self, repo: &str, kind: RepoFile) -> Result<Vec<(String, u64)>, RepoStoreError> {
        if !kind.is_named() {
            return Err(RepoStoreError::Invalid(format!(
                "{} is one file, not a list",
                kind.segment()
            )));
        }
        let r = self.open(repo)?;
        r.backend().list(kind_of(kind)).map_err(store_error)
    }

    fn stat(
        &self,
        repo: &str,
        kind: RepoFile,
        name: &str,
    ) -> Result<Option<FileStat>, RepoStoreError> {
        check_name(kind, name)?;
        let r = self.open(repo)?;
        let b = r.backend();
        if !b.exists(kind_of(kind), name).map_err(store_error)? {
            return Ok(None);
        }
        let size = if kind.is_named() {
            b.list(kind_of(kind))
                .map_err(store_error)?
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, s)| s)
        } else {
            Some(b.read(kind_of(kind), name).map_err(store_error)?.len() as u64)
        };
        let Some(size) = size else { return Ok(None) };
        let modified_unix_ns = b
            .modified(kind_of(kind), name)
            .map_err(store_error)?
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos().min(i64::MAX as u128) as i64);
        Ok(Some(FileStat {
            size,
            modified_unix_ns,
        }))
    }

    fn read(
        &self,
        repo: &str,
        kind: RepoFile,
        name: &str,
        range: Option<(u64, u64)>,
    ) -> Result<Vec<u8>, RepoStoreError> {
        check_name(kind, name)?;
        let r = self.open(repo)?;
        let b = r.backend();
        let k = kind_of(kind);
        if !b.exists(k, name).map_err(store_error)? {
            return Err(RepoStoreError::NotFound(format!(
                "no {} file {name:?} in repository {repo:?}",
                kind.segment()
            )));
        }
        match range {
            None => b.read(k, name).map_err(store_error),
            Some((offset, length)) => {
                let length = usize::try_from(length)
                    .map_err(|_| RepoStoreError::Invalid("range too long".into()))?;
                b.read_range(k, name, offset, length).map_err(|e| match e {
                    Error::Io { .. } => RepoStoreError::Invalid(format!(
                        "bytes {offset}..+{length} are not all in {} {name}",
                        kind.segment()
                    )),
                    e => store_error(e),
                })
            }
        }
    }

    fn put(
        &self,
        repo: &str,
        kind: RepoFile,
        name: &str,
        body: &[u8],
        rules: &PutRules,
    ) -> Result<(PutOutcome, Option<SnapshotFacts>), RepoStoreError> {
        check_name(kind, name)?;
        if rules.append_only && matches!(kind, RepoFile::Config | RepoFile::Owner | RepoFile::Key) {
            return Err(RepoStoreError::Refused(format!(
                "the {} of a repository is written only by an admin",
                kind.segment()
            )));
        }
        let r = self.open(repo)?;
        let b = r.backend();
        let k = kind_of(kind);
        let sync = if rules.durable {
            WriteSync::Now
        } else {
            WriteSync::Deferred
        };
        if kind.is_content_addressed() && !content_id_matches(kind, name, body) {
            return Err(RepoStoreError::Refused(format!(
                "the {} file's bytes do not hash to its name {name} (BLAKE3): a damaged or forged upload",
                kind.segment()
            )));
        }
        let mut facts = None;
        match kind {
            RepoFile::Index => {
                let id =
                    IndexId::from_hex(name).map_err(|e| RepoStoreError::Invalid(e.to_string()))?;
                let file = r.decode_index_file(&id, body).map_err(store_error)?;
                integrity::check_index_file(&r, &file).map_err(store_error)?;
            }
            RepoFile::Snapshot => {
                let id = SnapshotId::from_hex(name)
                    .map_err(|e| RepoStoreError::Invalid(e.to_string()))?;
                let m = r.decode_snapshot(&id, body).map_err(store_error)?;
                if let Some(tag) = &rules.expect_tag {
                    if !m.tags.iter().any(|t| t == tag) {
                        return Err(RepoStoreError::Refused(format!(
                            "the snapshot does not carry the tag {tag:?} of the leased job's plan"
                        )));
                    }
                }
                integrity::check_manifest(&r, &m).map_err(store_error)?;
                facts = Some(SnapshotFacts {
                    id: name.to_owned(),
                    time_unix_ns: m.time_ns,
                    tags: m.tags.clone(),
                    host: m.host.clone(),
                    paths: m.paths.clone(),
                    files: m.summary.files,
                    bytes: m.summary.bytes_read,
                    added_bytes: m.summary.bytes_added,
                    total_bytes: m.summary.total_bytes,
                    warnings: m.summary.warnings,
                });
            }
            RepoFile::PointLock => {
                // A record must read with the repository's key and name a
                // snapshot that exists: anything else is refused, not kept.
                let record = r.decode_point_lock(name, body).map_err(store_error)?;
                if !b
                    .exists(FileKind::Snapshot, &record.snapshot.to_hex())
                    .map_err(store_error)?
                {
                    return Err(RepoStoreError::Refused(format!(
                        "the lock names snapshot {}, which is not in the repository",
                        record.snapshot.short()
                    )));
                }
            }
            RepoFile::Lock if rules.append_only => {
                let exclusive = serde_json::from_slice::<LockFile>(body)
                    .map_err(|e| RepoStoreError::Invalid(format!("not a lock file: {e}")))?
                    .exclusive;
                if exclusive {
                    return Err(RepoStoreError::Refused(
                        "only an admin may take an exclusive lock (prune, repair run on the server)"
                            .into(),
                    ));
                }
                if b.exists(k, name).map_err(store_error)? {
                    return Err(RepoStoreError::Refused(format!(
                        "lock {name} exists: a lock is never overwritten"
                    )));
                }
            }
            _ => {}
        }
        if kind.is_content_addressed() && b.exists(k, name).map_err(store_error)? {
            // Same name, so the same bytes: nothing to write.
            return Ok((PutOutcome::AlreadyPresent, facts));
        }
        b.write(k, name, body, sync).map_err(store_error)?;
        Ok((PutOutcome::Written, facts))
    }

    fn delete(
        &self,
        repo: &str,
        kind: RepoFile,
        name: &str,
        shared_locks_only: bool,
    ) -> Result<(), RepoStoreError> {
        check_name(kind, name)?;
        let r = self.open(repo)?;
        let b = r.backend();
        if shared_locks_only {
            if kind != RepoFile::Lock {
                return Err(RepoStoreError::Refused(format!(
                    "{} files are never deleted through the protocol but by an admin",
                    kind.segment()
                )));
            }
            if let Ok(bytes) = b.read(FileKind::Lock, name) {
                if let Ok(lock) = serde_json::from_slice::<LockFile>(&bytes) {
                    if lock.exclusive {
                        return Err(RepoStoreError::Refused(format!(
                            "lock {name} is exclusive ({}): only an admin may remove it",
                            lock.purpose
                        )));
                    }
                }
            }
        }
        // A lock stored in the repository holds against every client.
        let now = crate::util::now_ns();
        match kind {
            RepoFile::Snapshot => {
                let id = SnapshotId::from_hex(name)
                    .map_err(|e| RepoStoreError::Invalid(e.to_string()))?;
                r.point_locks()
                    .and_then(|l| l.check_deletable(&id, now))
                    .map_err(|e| RepoStoreError::Refused(e.to_string()))?;
            }
            RepoFile::PointLock => {
                if let Ok(record) = b
                    .read(FileKind::PointLock, name)
                    .and_then(|bytes| r.decode_point_lock(name, &bytes))
                {
                    if record.until_ns > now {
                        return Err(RepoStoreError::Refused(format!(
                            "lock {name} of snapshot {} holds until {}: a lock cannot be removed before its end",
                            record.snapshot.short(),
                            crate::util::rfc3339(record.until_ns)
                        )));
                    }
                }
            }
            _ => {}
        }
        b.delete(kind_of(kind), name).map_err(store_error)
    }

    fn sync(&self, repo: &str, deletes: Option<RepoFile>) -> Result<(), RepoStoreError> {
        let r = self.open(repo)?;
        r.backend().sync_all().map_err(store_error)?;
        if let Some(k) = deletes {
            r.backend().sync_deletes(kind_of(k)).map_err(store_error)?;
        }
        Ok(())
    }

    fn missing(
        &self,
        repo: &str,
        kind: RepoFile,
        names: &[String],
    ) -> Result<Vec<String>, RepoStoreError> {
        for n in names {
            check_name(kind, n)?;
        }
        let present: std::collections::HashSet<String> =
            self.list(repo, kind)?.into_iter().map(|(n, _)| n).collect();
        Ok(names
            .iter()
            .filter(|n| !present.contains(*n))
            .cloned()
            .collect())
    }

    fn create_agent_repository(&self, agent: &str) -> Result<NewAgentRepository, RepoStoreError> {
        let id = agent_repository(agent);
        if self.has(&id) {
            return Err(RepoStoreError::Refused(format!(
                "repository {id:?} exists: an agent of that name registered before"
            )));
        }
        let dir = self.agents_dir.join(agent);
        let path = dir.join("repository");
        std::fs::create_dir_all(&dir)
            .map_err(|e| store_error(Error::io(dir.display().to_string(), e)))?;
        let passphrase = zeroize::Zeroizing::new(hex::encode(crate::crypto::random_array::<32>()));
        let pw_path = dir.join("repository.passphrase");
        write_private(&pw_path, passphrase.as_bytes())
            .map_err(|e| store_error(Error::io(pw_path.display().to_string(), e)))?;
        Repository::init(
            Arc::new(LocalBackend::new(&path)),
            passphrase.as_bytes(),
            &InitOptions::default(),
        )
        .map_err(store_error)?;
        self.repos.add(RepoSpec {
            id: RepositoryId::new(&id),
            storage: Storage::Local(path),
            passphrase: passphrase.as_bytes().to_vec().into(),
        });
        Ok(NewAgentRepository { id, passphrase })
    }

    fn max_upload(&self, repo: &str) -> Result<u64, RepoStoreError> {
        let r = self.open(repo)?;
        Ok(r.config().pack_size.saturating_mul(2).max(8 << 20))
    }
}
