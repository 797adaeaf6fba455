//! The repository: opening and creating it, its keys, and reading and writing
//! its metadata (snapshots, index files) and blobs.

pub mod cache;
mod index;
pub mod integrity;
pub mod key_export;
pub mod lock;
pub mod log_mirror;
pub mod owner;
pub mod pack;
pub mod point_lock;
mod sealed;

use std::collections::HashSet;
use std::sync::Arc;

pub use index::{BlobLocation, MasterIndex, PackInfo};

use crate::backend::{Backend, FileKind, WriteSync};
use crate::chunker::Chunker;
use crate::crypto::{FileCipher, KdfParams, MasterKey};
use crate::error::{Error, Result};
use crate::format::{
    decode, encode, encode_compact, Config, IndexFile, KeyFile, Manifest, SealedKind, Tree,
    FORMAT_VERSION, KEY_WRAP_AAD, MAX_SUPPORTED_VERSION,
};
use crate::id::{BlobId, IndexId, KeyId, RepoId, SnapshotId};
use crate::util::{host_name, now_rfc3339, user_name};

/// Options of `vouch init`.
#[derive(Clone, Debug)]
pub struct InitOptions {
    /// Chunker sizes.
    pub chunker: crate::format::ChunkerParams,
    /// zstd level (0 disables compression).
    pub compression_level: i32,
    /// Target pack size.
    pub pack_size: u64,
    /// Argon2id parameters for the first key.
    pub kdf: KdfParams,
}

impl Default for InitOptions {
    fn default() -> Self {
        Self {
            chunker: Default::default(),
            compression_level: 3,
            pack_size: 16 * 1024 * 1024,
            kdf: KdfParams::default(),
        }
    }
}

/// Which snapshots `latest` may name (as restic's `--host` and `--path`):
/// on a repository several hosts share, `latest` must never be another
/// host's backup by accident.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LatestFilter {
    /// Only this host's snapshots (`None`: any host's).
    pub host: Option<String>,
    /// Only snapshots whose sources include every one of these paths.
    pub paths: Vec<String>,
}

impl LatestFilter {
    /// This host's snapshots, of any paths (the default).
    pub fn this_host() -> Self {
        LatestFilter {
            host: Some(crate::util::host_name()),
            paths: Vec::new(),
        }
    }

    /// Any snapshot.
    pub fn any() -> Self {
        LatestFilter {
            host: None,
            paths: Vec::new(),
        }
    }

    /// Whether `latest` may be `m`.
    pub fn allows(&self, m: &Manifest) -> bool {
        self.host.as_deref().is_none_or(|h| m.host == h)
            && self.paths.iter().all(|p| {
                m.paths
                    .iter()
                    .any(|q| q == p.trim_end_matches('/') || q == p)
            })
    }

    /// For messages: `of host "h" with path(s) /a, /b`.
    fn describe(&self) -> String {
        let host = match &self.host {
            Some(h) => format!("of host {h:?}"),
            None => "of any host".into(),
        };
        if self.paths.is_empty() {
            host
        } else {
            format!("{host} with path(s) {}", self.paths.join(", "))
        }
    }
}

/// An open repository.
#[derive(Clone)]
pub struct Repository {
    backend: Arc<dyn Backend>,
    config: Config,
    key: Arc<MasterKey>,
    key_id: KeyId,
    /// How long taking a lock waits for a conflicting one (`--retry-lock`).
    lock_wait: std::time::Duration,
    /// The local cache of a served repository's metadata, if any.
    cache: Option<Arc<cache::Cache>>,
}

impl std::fmt::Debug for Repository {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repository")
            .field("location", &self.backend.location())
            .finish()
    }
}

/// The result of reading every manifest.
#[derive(Debug, Default)]
pub struct SnapshotScan {
    /// Manifests that read, oldest first.
    pub snapshots: Vec<(SnapshotId, Manifest)>,
    /// Snapshot files that did not read or authenticate, with the reason.
    pub unreadable: Vec<(SnapshotId, String)>,
}

/// One key file, for `vouch key list`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KeyInfo {
    /// Key id.
    pub id: KeyId,
    /// Whether it is the key this session opened the repository with.
    pub current: bool,
    /// When added.
    pub created: String,
    /// By which host.
    pub host: String,
    /// By which user.
    pub user: String,
}

/// An index file sealed with `key`, as stored, and its id.
pub fn seal_index_file(key: &MasterKey, file: &IndexFile) -> (IndexId, Vec<u8>) {
    let bytes = sealed::seal(key, SealedKind::Index, &encode_compact(file));
    (IndexId::hash_of(&bytes), bytes)
}

/// Largest pack a repository may use: the format stores blob offsets and
/// lengths in a pack as u32, and a pack grows by at most one blob (16 MiB)
/// past its target, so 1 GiB keeps every offset far inside u32.
pub const MAX_PACK_SIZE: u64 = 1 << 30;
/// Smallest pack target.
pub const MIN_PACK_SIZE: u64 = 1 << 20;
/// Largest chunk the chunker may produce.
pub const MAX_CHUNK_SIZE: u32 = 16 << 20;

fn validate_chunker(c: &crate::format::ChunkerParams) -> Result<()> {
    let even = c.min_size.is_multiple_of(2)
        && c.avg_size.is_multiple_of(2)
        && c.max_size.is_multiple_of(2);
    // fastcdc's v2020 masks need min <= avg <= max within its own bounds
    // (64 B .. 16 MiB for avg/max at our settings), and avg a power of two's
    // neighbourhood is not required; these are the bounds `init` has always
    // enforced.
    if even
        && 64 <= c.min_size
        && c.min_size <= c.avg_size
        && c.avg_size <= c.max_size
        && c.max_size <= MAX_CHUNK_SIZE
        && c.avg_size >= 256
    {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "chunk sizes must be even with 64 <= min <= avg <= max <= 16 MiB and avg >= 256: {c:?}"
        )))
    }
}

fn validate_compression(level: i32) -> Result<()> {
    if (0..=22).contains(&level) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(
            "compression level must be 0..=22".into(),
        ))
    }
}

/// Checks every field of a config read from storage with the rules `init`
/// applies, so a damaged or tampered config is refused on open instead of
/// panicking the chunker or overflowing pack offsets later (the config is
/// plaintext and not authenticated: see `docs/format.md`).
pub fn validate_config(config: &Config) -> Result<()> {
    let bad = |e: Error| Error::corrupt("config", e);
    validate_chunker(&config.chunker).map_err(bad)?;
    validate_compression(config.compression_level).map_err(bad)?;
    if !(MIN_PACK_SIZE..=MAX_PACK_SIZE).contains(&config.pack_size) {
        return Err(Error::corrupt(
            "config",
            format!(
                "pack_size {} is outside {MIN_PACK_SIZE}..={MAX_PACK_SIZE} bytes",
                config.pack_size
            ),
        ));
    }
    Ok(())
}

/// A file named by the hash of its bytes whose bytes do not match its name
/// is corrupt (`hash_matches` is that comparison).
fn check_named(hash_matches: bool, bytes: &[u8], what: &str) -> Result<()> {
    if hash_matches {
        return Ok(());
    }
    Err(Error::corrupt(
        what,
        if bytes.is_empty() {
            "the file is empty (a power cut before it was made durable?)"
        } else {
            "its content does not hash to its name"
        },
    ))
}

fn wrap_key(key: &MasterKey, passphrase: &[u8], params: KdfParams) -> Result<KeyFile> {
    let salt: [u8; 16] = crate::crypto::random_array();
    let wrapping = params
        .derive(passphrase, &salt)
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    let wrapped = FileCipher::new(&wrapping).seal(KEY_WRAP_AAD, &encode(key));
    Ok(KeyFile {
        kdf: "argon2id".into(),
        params,
        salt: hex::encode(salt),
        wrapped: hex::encode(wrapped),
        created: now_rfc3339(),
        host: host_name(),
        user: user_name(),
    })
}

fn unwrap_key(file: &KeyFile, passphrase: &[u8], what: &str) -> Result<Option<MasterKey>> {
    if file.kdf != "argon2id" {
        return Err(Error::corrupt(
            what,
            format!("unknown key derivation {:?}", file.kdf),
        ));
    }
    let salt = hex::decode(&file.salt).map_err(|e| Error::corrupt(what, e))?;
    let wrapped = hex::decode(&file.wrapped).map_err(|e| Error::corrupt(what, e))?;
    let wrapping = file
        .params
        .derive(passphrase, &salt)
        .map_err(|e| Error::corrupt(what, e))?;
    match FileCipher::new(&wrapping).open(KEY_WRAP_AAD, &wrapped) {
        Ok(plain) => decode(&plain)
            .map(Some)
            .map_err(|e| Error::corrupt(what, format!("master key does not parse: {e}"))),
        Err(_) => Ok(None),
    }
}

impl Repository {
    /// Creates a repository in an empty location.
    pub fn init(
        backend: Arc<dyn Backend>,
        passphrase: &[u8],
        opts: &InitOptions,
    ) -> Result<Repository> {
        if passphrase.is_empty() {
            return Err(Error::InvalidArgument(
                "the passphrase must not be empty".into(),
            ));
        }
        validate_chunker(&opts.chunker)?;
        validate_compression(opts.compression_level)?;
        opts.kdf
            .check_new()
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        backend.create()?;
        let config = Config {
            version: FORMAT_VERSION,
            id: RepoId::random(),
            chunker: opts.chunker,
            compression_level: opts.compression_level,
            pack_size: opts.pack_size.clamp(MIN_PACK_SIZE, MAX_PACK_SIZE),
            created: now_rfc3339(),
        };
        let key = MasterKey::generate();
        let key_id = KeyId::random();
        let keyfile = wrap_key(&key, passphrase, opts.kdf)?;
        let json = serde_json::to_vec_pretty(&keyfile).map_err(|e| Error::corrupt("key", e))?;
        backend.write(FileKind::Key, &key_id.to_hex(), &json, WriteSync::Now)?;
        let json = serde_json::to_vec_pretty(&config).map_err(|e| Error::corrupt("config", e))?;
        // The config is written last: its presence marks a complete repository.
        backend.write(FileKind::Config, "", &json, WriteSync::Now)?;
        Ok(Repository {
            backend,
            config,
            key: Arc::new(key),
            key_id,
            lock_wait: std::time::Duration::ZERO,
            cache: None,
        })
    }

    /// Reads and checks the config without a key.
    pub fn read_config(backend: &dyn Backend) -> Result<Config> {
        // Read first, ask whether it exists only when that fails: one round
        // trip fewer to a served repository.
        let bytes = match backend.read(FileKind::Config, "") {
            Ok(b) => b,
            Err(_) if !backend.exists(FileKind::Config, "")? => {
                return Err(Error::NoRepository(backend.location()))
            }
            Err(e) => return Err(e),
        };
        let value: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| Error::corrupt("config", e))?;
        let version = value.get("version").and_then(|v| v.as_u64()).unwrap_or(0) as u32;
        if version > MAX_SUPPORTED_VERSION {
            return Err(Error::UnsupportedFormat {
                found: version,
                supported: MAX_SUPPORTED_VERSION,
            });
        }
        let config: Config =
            serde_json::from_value(value).map_err(|e| Error::corrupt("config", e))?;
        if config.version == 0 {
            return Err(Error::corrupt("config", "version 0"));
        }
        validate_config(&config)?;
        Ok(config)
    }

    /// Opens a repository with a passphrase.
    #[tracing::instrument(skip_all, fields(repo = %backend.location()))]
    pub fn open(backend: Arc<dyn Backend>, passphrase: &[u8]) -> Result<Repository> {
        let config = Self::read_config(backend.as_ref())?;
        Self::open_with_config(backend, config, passphrase)
    }

    /// [`Repository::open`] with the config already read (and checked) by
    /// [`Repository::read_config`].
    pub fn open_with_config(
        backend: Arc<dyn Backend>,
        config: Config,
        passphrase: &[u8],
    ) -> Result<Repository> {
        let keys = backend.list(FileKind::Key)?;
        if keys.is_empty() {
            return Err(Error::corrupt("keys/", "the repository has no key files"));
        }
        let mut corrupt = None;
        for (name, _) in keys {
            let what = format!("key file keys/{name}");
            let Ok(key_id) = KeyId::from_hex(&name) else {
                tracing::warn!(key = %name, "skipping a file in keys/ whose name is not a key id");
                continue;
            };
            let parsed: Result<KeyFile> = backend
                .read(FileKind::Key, &name)
                .and_then(|b| serde_json::from_slice(&b).map_err(|e| Error::corrupt(&what, e)));
            let file = match parsed {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(key = %name, "skipping unreadable key file: {e}");
                    corrupt = Some(e);
                    continue;
                }
            };
            // Parameters are read before any work is spent on them: a key
            // file planted with a huge memory cost must not hang or abort
            // every open.
            if let Err(e) = file.params.check_readable() {
                tracing::warn!(key = %name, "skipping key file: {e}");
                corrupt = Some(Error::corrupt(&what, e));
                continue;
            }
            match unwrap_key(&file, passphrase, &what) {
                Ok(Some(key)) => {
                    return Ok(Repository {
                        backend,
                        config,
                        key: Arc::new(key),
                        key_id,
                        lock_wait: std::time::Duration::ZERO,
                        cache: None,
                    });
                }
                Ok(None) => {}
                Err(e) => corrupt = Some(e),
            }
        }
        // A damaged key file may be the one this passphrase would open.
        Err(corrupt.unwrap_or(Error::WrongPassword))
    }

    /// Opens a repository with its master key itself (a recovered key
    /// export, [`key_export`]), checking it against the repository: the
    /// key must open a snapshot or an index file when there is one.
    /// Answers whether it could be checked so (an empty repository holds
    /// nothing to check against).
    pub fn open_with_master_key(
        backend: Arc<dyn Backend>,
        key: MasterKey,
    ) -> Result<(Repository, bool)> {
        let config = Self::read_config(backend.as_ref())?;
        let repo = Repository {
            backend,
            config,
            key: Arc::new(key),
            key_id: KeyId::random(),
            lock_wait: std::time::Duration::ZERO,
            cache: None,
        };
        if let Some((name, _)) = repo.backend.list(FileKind::Snapshot)?.into_iter().next() {
            let bytes = repo.backend.read(FileKind::Snapshot, &name)?;
            let id = SnapshotId::from_hex(&name).map_err(|_| {
                Error::corrupt("snapshots/", format!("{name} is not a snapshot id"))
            })?;
            repo.decode_snapshot(&id, &bytes)
                .map_err(|_| Error::WrongPassword)?;
            return Ok((repo, true));
        }
        if let Some((name, _)) = repo.backend.list(FileKind::Index)?.into_iter().next() {
            let bytes = repo.backend.read(FileKind::Index, &name)?;
            let id = IndexId::from_hex(&name)
                .map_err(|_| Error::corrupt("index/", format!("{name} is not an index id")))?;
            repo.decode_index_file(&id, &bytes)
                .map_err(|_| Error::WrongPassword)?;
            return Ok((repo, true));
        }
        Ok((repo, false))
    }

    /// The check code of this repository's master key (see
    /// [`key_export::check_code`]).
    pub fn key_check(&self) -> String {
        key_export::check_code(&self.key)
    }

    /// Keeps a local copy of the index, the snapshots and the trees in
    /// `cache` (for a served repository: see [`cache`]).
    pub fn with_cache(mut self, cache: Arc<cache::Cache>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// The local cache, if this repository has one.
    pub fn cache(&self) -> Option<&Arc<cache::Cache>> {
        self.cache.as_ref()
    }

    /// The storage.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The config.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The master key.
    pub fn key(&self) -> &Arc<MasterKey> {
        &self.key
    }

    /// A chunker with this repository's parameters and keyed gear table.
    pub fn chunker(&self) -> Chunker {
        Chunker::new(self.config.chunker, self.key.gear_table())
    }

    /// The same repository, whose locks wait up to `wait` for a conflicting
    /// lock to go away (`--retry-lock`).
    pub fn with_lock_wait(mut self, wait: std::time::Duration) -> Self {
        self.lock_wait = wait;
        self
    }

    /// Takes a shared (`exclusive == false`) or exclusive lock for `purpose`,
    /// waiting as set by [`Repository::with_lock_wait`].
    pub fn lock(&self, exclusive: bool, purpose: &str) -> Result<lock::LockGuard> {
        lock::acquire_waiting(self.backend.clone(), exclusive, purpose, self.lock_wait)
    }

    // ----- keys -----

    /// Adds a key for another passphrase.
    pub fn add_key(&self, passphrase: &[u8], params: KdfParams) -> Result<KeyId> {
        if passphrase.is_empty() {
            return Err(Error::InvalidArgument(
                "the passphrase must not be empty".into(),
            ));
        }
        params
            .check_new()
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        let id = KeyId::random();
        let file = wrap_key(&self.key, passphrase, params)?;
        let json = serde_json::to_vec_pretty(&file).map_err(|e| Error::corrupt("key", e))?;
        self.backend
            .write(FileKind::Key, &id.to_hex(), &json, WriteSync::Now)?;
        Ok(id)
    }

    /// Lists the key files.
    pub fn list_keys(&self) -> Result<Vec<KeyInfo>> {
        let mut out = Vec::new();
        for (name, _) in self.backend.list(FileKind::Key)? {
            let what = format!("key file keys/{name}");
            let Ok(id) = KeyId::from_hex(&name) else {
                tracing::warn!(key = %name, "skipping a file in keys/ whose name is not a key id");
                continue;
            };
            let file: KeyFile = serde_json::from_slice(&self.backend.read(FileKind::Key, &name)?)
                .map_err(|e| Error::corrupt(&what, e))?;
            out.push(KeyInfo {
                id,
                current: id == self.key_id,
                created: file.created,
                host: file.host,
                user: file.user,
            });
        }
        Ok(out)
    }

    /// Removes a key; refuses the one in use and the last one.
    pub fn remove_key(&self, id: &KeyId) -> Result<()> {
        if *id == self.key_id {
            return Err(Error::InvalidArgument(
                "refusing to remove the key this session was opened with; open with another passphrase first".into(),
            ));
        }
        let name = id.to_hex();
        if !self.backend.exists(FileKind::Key, &name)? {
            return Err(Error::NotFound(format!("no key {name}")));
        }
        self.backend.delete(FileKind::Key, &name)
    }

    /// Id of the key in use.
    pub fn key_id(&self) -> KeyId {
        self.key_id
    }

    /// Resolves a key id or unique prefix.
    pub fn find_key(&self, spec: &str) -> Result<KeyId> {
        let matches: Vec<String> = self
            .backend
            .list(FileKind::Key)?
            .into_iter()
            .map(|(n, _)| n)
            .filter(|n| n.starts_with(spec))
            .collect();
        match matches.as_slice() {
            [one] => KeyId::from_hex(one).map_err(|e| Error::corrupt("key", e)),
            [] => Err(Error::NotFound(format!("no key matches {spec:?}"))),
            _ => Err(Error::InvalidArgument(format!(
                "key prefix {spec:?} is ambiguous"
            ))),
        }
    }

    // ----- snapshots -----

    /// Writes a manifest: the commit marker. Always durable unless `sync` is
    /// deferred (sync level `none`).
    pub fn save_snapshot(&self, manifest: &Manifest, sync: WriteSync) -> Result<SnapshotId> {
        let bytes = sealed::seal(&self.key, SealedKind::Snapshot, &encode(manifest));
        let id = SnapshotId::hash_of(&bytes);
        self.backend
            .write(FileKind::Snapshot, &id.to_hex(), &bytes, sync)?;
        if let Some(c) = &self.cache {
            c.put_file(FileKind::Snapshot, &id.to_hex(), &bytes);
        }
        Ok(id)
    }

    /// Reads one manifest, checking that its bytes hash to its name.
    pub fn load_snapshot(&self, id: &SnapshotId) -> Result<Manifest> {
        let bytes = self.read_cached(FileKind::Snapshot, &id.to_hex())?;
        self.decode_snapshot(id, &bytes)
    }

    /// Reads an index or snapshot file from the cache, or from the backend
    /// into the cache. A cached entry is one whose bytes hash to its name:
    /// the very bytes stored.
    fn read_cached(&self, kind: FileKind, name: &str) -> Result<Vec<u8>> {
        let Some(cache) = &self.cache else {
            return self.backend.read(kind, name);
        };
        if let Some(bytes) = cache.file(kind, name) {
            return Ok(bytes);
        }
        let bytes = self.backend.read(kind, name)?;
        if blake3::hash(&bytes).to_hex().as_str() == name {
            cache.put_file(kind, name, &bytes);
        }
        Ok(bytes)
    }

    /// Lists `kind` and drops cache entries the listing no longer names.
    fn list_pruning_cache(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
        let listed = self.backend.list(kind)?;
        if let Some(c) = &self.cache {
            c.retain(kind, &listed.iter().map(|(n, _)| n.clone()).collect());
        }
        Ok(listed)
    }

    /// Checks that `bytes` hash to `id`, and decrypts and parses them as a
    /// manifest (for a snapshot received before it is stored).
    pub fn decode_snapshot(&self, id: &SnapshotId, bytes: &[u8]) -> Result<Manifest> {
        let what = format!("snapshot {}", id.short());
        check_named(SnapshotId::hash_of(bytes) == *id, bytes, &what)?;
        let plain = sealed::open(&self.key, SealedKind::Snapshot, bytes, &what)?;
        decode(&plain).map_err(|e| Error::corrupt(what, e))
    }

    /// Every manifest that reads, oldest first, and the snapshot files that
    /// do not (with the error), from the manifests alone.
    pub fn scan_snapshots(&self) -> Result<SnapshotScan> {
        let mut scan = SnapshotScan::default();
        for (name, _) in self.list_pruning_cache(FileKind::Snapshot)? {
            let Ok(id) = SnapshotId::from_hex(&name) else {
                tracing::warn!(file = %name, "ignoring a file that is not a snapshot");
                continue;
            };
            match self.load_snapshot(&id) {
                Ok(m) => scan.snapshots.push((id, m)),
                Err(e @ Error::UnsupportedFormat { .. }) => return Err(e),
                Err(e) => scan.unreadable.push((id, e.to_string())),
            }
        }
        scan.snapshots
            .sort_by(|a, b| a.1.time_ns.cmp(&b.1.time_ns).then(a.0.cmp(&b.0)));
        Ok(scan)
    }

    /// All snapshots that read, oldest first; an unreadable snapshot file is
    /// skipped with a warning (`vouch verify` reports it as damage, and
    /// prune refuses to run while one exists).
    pub fn list_snapshots(&self) -> Result<Vec<(SnapshotId, Manifest)>> {
        let scan = self.scan_snapshots()?;
        for (id, e) in &scan.unreadable {
            tracing::warn!(snapshot = %id.short(), "skipping an unreadable snapshot: {e}");
        }
        Ok(scan.snapshots)
    }

    /// Resolves `latest` (the newest snapshot of this host), a full id, or
    /// a unique id prefix.
    pub fn find_snapshot(&self, spec: &str) -> Result<(SnapshotId, Manifest)> {
        self.find_snapshot_of(spec, &LatestFilter::this_host())
    }

    /// Resolves `latest` (the newest snapshot `latest` allows), a full id,
    /// or a unique id prefix (which `latest` does not filter: an id names
    /// one snapshot, whoever made it).
    pub fn find_snapshot_of(
        &self,
        spec: &str,
        latest: &LatestFilter,
    ) -> Result<(SnapshotId, Manifest)> {
        if spec == "latest" {
            let all = self.list_snapshots()?;
            if all.is_empty() {
                return Err(Error::NotFound("the repository has no snapshots".into()));
            }
            let hosts: std::collections::BTreeSet<&str> =
                all.iter().map(|(_, m)| m.host.as_str()).collect();
            let hosts = hosts.into_iter().collect::<Vec<_>>().join(", ");
            return all
                .iter()
                .rev()
                .find(|(_, m)| latest.allows(m))
                .cloned()
                .ok_or_else(|| {
                    Error::NotFound(format!(
                        "no snapshot is `latest` {}; the repository has snapshots of host(s) {hosts}: pass --host NAME or --any-host, or name the snapshot by id (`vouch snapshots`)",
                        latest.describe()
                    ))
                });
        }
        let spec_l = spec.to_ascii_lowercase();
        let names: Vec<String> = self
            .backend
            .list(FileKind::Snapshot)?
            .into_iter()
            .map(|(n, _)| n)
            .filter(|n| n.starts_with(&spec_l))
            .collect();
        match names.as_slice() {
            [one] => {
                let id =
                    SnapshotId::from_hex(one).map_err(|e| Error::corrupt("snapshot name", e))?;
                Ok((id, self.load_snapshot(&id)?))
            }
            [] => Err(Error::NotFound(format!("no snapshot matches {spec:?}"))),
            _ => Err(Error::InvalidArgument(format!(
                "snapshot prefix {spec:?} matches {} snapshots; give more digits",
                names.len()
            ))),
        }
    }

    /// Deletes a manifest (the data stays until prune). Call
    /// [`Backend::sync_deletes`] for `FileKind::Snapshot` afterwards to make
    /// the deletion durable before anything relies on it.
    pub fn delete_snapshot(&self, id: &SnapshotId) -> Result<()> {
        // Every deletion of a manifest comes here: a lock stored in the
        // repository holds, whoever asks.
        self.delete_snapshot_checked(id, &mut point_lock::PointLocks::default())
    }

    // ----- index -----

    /// Writes an index file.
    pub fn save_index(&self, file: &IndexFile, sync: WriteSync) -> Result<IndexId> {
        let (id, bytes) = seal_index_file(&self.key, file);
        self.backend
            .write(FileKind::Index, &id.to_hex(), &bytes, sync)?;
        if let Some(c) = &self.cache {
            c.put_file(FileKind::Index, &id.to_hex(), &bytes);
        }
        Ok(id)
    }

    /// Reads one index file, checking that its bytes hash to its name.
    pub fn load_index_file(&self, id: &IndexId) -> Result<IndexFile> {
        let bytes = self.read_cached(FileKind::Index, &id.to_hex())?;
        self.decode_index_file(id, &bytes)
    }

    /// Checks that `bytes` hash to `id`, and decrypts and parses them as an
    /// index file (for one received before it is stored).
    pub fn decode_index_file(&self, id: &IndexId, bytes: &[u8]) -> Result<IndexFile> {
        let what = format!("index file {}", id.short());
        check_named(IndexId::hash_of(bytes) == *id, bytes, &what)?;
        let plain = sealed::open(&self.key, SealedKind::Index, bytes, &what)?;
        decode(&plain).map_err(|e| Error::corrupt(what, e))
    }

    /// Merges every index file. Files superseded by another readable file are
    /// skipped (and listed in [`MasterIndex::superseded`]); files that do not
    /// read are listed in [`MasterIndex::unreadable`] with a warning, so one
    /// damaged index file does not stop every command.
    pub fn load_index(&self) -> Result<MasterIndex> {
        let mut files = Vec::new();
        let mut unreadable = Vec::new();
        for (name, _) in self.list_pruning_cache(FileKind::Index)? {
            let Ok(id) = IndexId::from_hex(&name) else {
                continue;
            };
            match self.load_index_file(&id) {
                Ok(f) => files.push((id, f)),
                Err(e @ Error::UnsupportedFormat { .. }) => return Err(e),
                Err(e) => {
                    tracing::warn!(index = %id.short(), "skipping an unreadable index file: {e}");
                    unreadable.push((id, e.to_string()));
                }
            }
        }
        let superseded: HashSet<IndexId> = files
            .iter()
            .flat_map(|(_, f)| f.supersedes.iter().copied())
            .collect();
        let mut index = MasterIndex::default();
        index.reserve(
            files
                .iter()
                .filter(|(id, _)| !superseded.contains(id))
                .flat_map(|(_, f)| &f.packs)
                .map(|p| p.blobs.len())
                .sum(),
        );
        // The table is allocated once for every blob (no doubling while
        // it grows), and each decoded file is dropped as soon as it is
        // merged.
        for (id, file) in files {
            if superseded.contains(&id) {
                index.superseded.push(id);
            } else {
                index.add_file(id, &file);
            }
        }
        index.unreadable = unreadable;
        if let Some(c) = &self.cache {
            c.retain_packs(&index.packs().iter().map(|p| p.id).collect());
        }
        Ok(index)
    }

    // ----- blobs -----

    fn read_tree_cached(
        &self,
        cache: &cache::Cache,
        index: &MasterIndex,
        id: &BlobId,
    ) -> Result<Vec<u8>> {
        let (pack, entry) = index
            .get(id)
            .ok_or_else(|| Error::Damaged(format!("blob {id} is not in the index")))?;
        let (offset, length) = (u64::from(entry.offset), entry.length as usize);
        if let Some(sealed) = cache.tree(&pack.id, offset, length) {
            match pack::open_blob(&self.key, &pack.salt, &entry, &sealed) {
                Ok(plain) => return Ok(plain),
                // A hole (never cached), a torn write or damage: fetched
                // again and written over below.
                Err(e) => tracing::debug!(tree = %id.short(), "cached tree does not open: {e}"),
            }
        }
        let sealed = self
            .backend
            .read_range(FileKind::Pack, &pack.id.to_hex(), offset, length)
            .map_err(|e| Error::Damaged(format!("pack {} unreadable: {e}", pack.id)))?;
        let plain = pack::open_blob(&self.key, &pack.salt, &entry, &sealed)?;
        cache.put_trees(&pack.id, [(offset, &sealed[..])]);
        Ok(plain)
    }

    /// Reads, decrypts, decompresses and checks one blob.
    pub fn read_blob(&self, index: &MasterIndex, id: &BlobId) -> Result<Vec<u8>> {
        let (pack, entry) = index
            .get(id)
            .ok_or_else(|| Error::Damaged(format!("blob {id} is not in the index")))?;
        let sealed = self
            .backend
            .read_range(
                FileKind::Pack,
                &pack.id.to_hex(),
                u64::from(entry.offset),
                entry.length as usize,
            )
            .map_err(|e| Error::Damaged(format!("pack {} unreadable: {e}", pack.id)))?;
        pack::open_blob(&self.key, &pack.salt, &entry, &sealed)
    }

    /// Reads a tree blob (from the cache when it has it).
    pub fn load_tree(&self, index: &MasterIndex, id: &BlobId) -> Result<Tree> {
        let plain = match &self.cache {
            None => self.read_blob(index, id)?,
            Some(cache) => self.read_tree_cached(cache, index, id)?,
        };
        decode(&plain).map_err(|e| Error::Damaged(format!("tree {id} does not parse: {e}")))
    }
}
