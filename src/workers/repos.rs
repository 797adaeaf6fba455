//! The repositories the service writes to, opened once and shared by jobs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use vouch_events::sources::SourcePolicy;
use vouch_events::{JobId, RepositoryId};

use crate::error::{Error, Result};
use crate::repo::Repository;

/// How long a pack in no index is kept by the service's prune jobs unless
/// configured (`[maintenance] prune_grace`).
pub const PRUNE_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);

/// One configured repository.
#[derive(Clone)]
pub struct RepoSpec {
    /// Its id in plans and events.
    pub id: RepositoryId,
    /// Where it is.
    pub storage: crate::backend::storage::Storage,
    /// Its passphrase (never logged; wiped from memory when dropped).
    pub passphrase: zeroize::Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for RepoSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepoSpec")
            .field("id", &self.id)
            .field("storage", &self.storage)
            .field("passphrase", &"<redacted>")
            .finish()
    }
}

/// The repositories, the sandbox directory for restore tests, and the
/// paths no backup may include (the service's own data).
pub struct RepoSet {
    /// Grows while running: an agent's repository is added when it
    /// registers.
    specs: RwLock<HashMap<RepositoryId, RepoSpec>>,
    opened: Mutex<HashMap<RepositoryId, Arc<Repository>>>,
    sandbox_root: PathBuf,
    restore_test_max_bytes: u64,
    prune_grace: std::time::Duration,
    exclude: Vec<PathBuf>,
    sources: SourcePolicy,
    sandbox_runs: AtomicU64,
    clusters: HashMap<String, Arc<crate::providers::proxmox::api::Cluster>>,
    hooks_dir: Option<PathBuf>,
}

impl RepoSet {
    /// A set over `specs`; restore tests go below `sandbox_root`, at most
    /// `restore_test_max_bytes` each; backups never include `exclude`.
    pub fn new(
        specs: Vec<RepoSpec>,
        sandbox_root: PathBuf,
        restore_test_max_bytes: u64,
        exclude: Vec<PathBuf>,
    ) -> Self {
        RepoSet {
            specs: RwLock::new(specs.into_iter().map(|s| (s.id.clone(), s)).collect()),
            opened: Mutex::new(HashMap::new()),
            sandbox_root,
            restore_test_max_bytes,
            prune_grace: PRUNE_GRACE,
            exclude,
            sources: SourcePolicy::unrestricted(),
            sandbox_runs: AtomicU64::new(0),
            clusters: HashMap::new(),
            hooks_dir: None,
        }
    }

    /// Runs the plans' hooks from `dir` (none: this host runs no hooks).
    pub fn with_hooks_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.hooks_dir = dir;
        self
    }

    /// Where this host's hooks are installed, if it runs any.
    pub fn hooks_dir(&self) -> Option<&std::path::Path> {
        self.hooks_dir.as_deref()
    }

    /// Checks every backup's source against `policy` when it starts (the
    /// default allows any source: `vouch serve` always sets its own).
    pub fn with_source_policy(mut self, policy: SourcePolicy) -> Self {
        self.sources = policy;
        self
    }

    /// The Proxmox VE clusters `pve:` sources name (`[[proxmox]]`).
    pub fn with_clusters(mut self, clusters: Vec<crate::providers::proxmox::api::Cluster>) -> Self {
        self.clusters = clusters
            .into_iter()
            .map(|c| (c.settings().name.clone(), Arc::new(c)))
            .collect();
        self
    }

    /// The cluster named `name`.
    pub fn cluster(&self, name: &str) -> Option<Arc<crate::providers::proxmox::api::Cluster>> {
        self.clusters.get(name).cloned()
    }

    /// The rules a backup's source must pass when it starts.
    pub fn source_policy(&self) -> &SourcePolicy {
        &self.sources
    }

    /// The served repositories, by id.
    pub fn specs(&self) -> Vec<RepoSpec> {
        let mut all: Vec<RepoSpec> = self
            .specs
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        all
    }

    /// Whether `id` is served.
    pub fn contains(&self, id: &RepositoryId) -> bool {
        self.specs
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(id)
    }

    /// Whether repository `id` is served from storage off this host (object
    /// storage); false for a local directory, or an id not served.
    pub fn is_remote(&self, id: &RepositoryId) -> bool {
        self.specs
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .is_some_and(|s| s.storage.is_remote())
    }

    /// Serves one more repository (an agent's, made at its registration);
    /// false if one of that id is served already.
    pub fn add(&self, spec: RepoSpec) -> bool {
        let mut specs = self.specs.write().unwrap_or_else(PoisonError::into_inner);
        if specs.contains_key(&spec.id) {
            return false;
        }
        specs.insert(spec.id.clone(), spec);
        true
    }

    /// The repository `id`, opened once (the key derivation is slow on
    /// purpose) and shared.
    pub fn open(&self, id: &RepositoryId) -> Result<Arc<Repository>> {
        if let Some(r) = self
            .opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
        {
            return Ok(r.clone());
        }
        let spec = self
            .specs
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "no repository {id:?} is configured (see `repositories` in the configuration)"
                ))
            })?;
        let backend = spec.storage.open()?;
        let repo = Arc::new(Repository::open(backend, &spec.passphrase)?);
        self.opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone(), repo.clone());
        Ok(repo)
    }

    /// A fresh directory name for one run of the restore test of `job`
    /// (below the sandbox root). Each run gets its own: an attempt retried
    /// after a dispatcher restart may overlap a cancelled earlier one that
    /// is still deleting its sandbox.
    pub fn sandbox_for(&self, job: &JobId) -> PathBuf {
        let run = self.sandbox_runs.fetch_add(1, Ordering::Relaxed);
        self.sandbox_root
            .join(format!("{}-{run}", super::sandbox_name(job)))
    }

    /// The sandbox root.
    pub fn sandbox_root(&self) -> &Path {
        &self.sandbox_root
    }

    /// How long a pack in no index survives a prune job.
    pub fn prune_grace(&self) -> std::time::Duration {
        self.prune_grace
    }

    /// Packs in no index younger than `grace` survive a prune job.
    pub fn with_prune_grace(mut self, grace: std::time::Duration) -> Self {
        self.prune_grace = grace;
        self
    }

    /// Largest restore test, in bytes (a sample beyond).
    pub fn restore_test_max_bytes(&self) -> u64 {
        self.restore_test_max_bytes
    }

    /// Paths no backup includes.
    pub fn exclude_paths(&self) -> Vec<PathBuf> {
        self.exclude.clone()
    }
}
