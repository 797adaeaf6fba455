//! The repository: opening and creating it, its keys, and reading and writing
//! its metadata (snapshots, index files) and blobs.

mod index;
pub mod lock;
pub mod pack;
mod sealed;

use std::collections::HashSet;
use std::sync::Arc;

pub use index::{BlobLocation, MasterIndex, PackInfo};

use crate::backend::{Backend, FileKind, WriteSync};
use crate::chunker::Chunker;
use crate::crypto::{FileCipher, KdfParams, MasterKey};
use crate::error::{Error, Result};
use crate::format::{
    decode, encode, Config, IndexFile, KeyFile, Manifest, SealedKind, Tree, FORMAT_VERSION,
    KEY_WRAP_AAD, MAX_SUPPORTED_VERSION,
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

/// An open repository.
#[derive(Clone)]
pub struct Repository {
    backend: Arc<dyn Backend>,
    config: Config,
    key: Arc<MasterKey>,
    key_id: KeyId,
}

impl std::fmt::Debug for Repository {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repository")
            .field("location", &self.backend.location())
            .finish()
    }
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
        let c = opts.chunker;
        let even = c.min_size % 2 == 0 && c.avg_size % 2 == 0 && c.max_size % 2 == 0;
        if !(even
            && 64 <= c.min_size
            && c.min_size <= c.avg_size
            && c.avg_size <= c.max_size
            && c.max_size <= 16 << 20)
        {
            return Err(Error::InvalidArgument(format!(
                "chunk sizes must be even with 64 <= min <= avg <= max <= 16 MiB: {c:?}"
            )));
        }
        if !(0..=22).contains(&opts.compression_level) {
            return Err(Error::InvalidArgument(
                "compression level must be 0..=22".into(),
            ));
        }
        backend.create()?;
        let config = Config {
            version: FORMAT_VERSION,
            id: RepoId::random(),
            chunker: opts.chunker,
            compression_level: opts.compression_level,
            pack_size: opts.pack_size.clamp(1 << 20, 1 << 30),
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
        })
    }

    /// Reads and checks the config without a key.
    pub fn read_config(backend: &dyn Backend) -> Result<Config> {
        if !backend.exists(FileKind::Config, "")? {
            return Err(Error::NoRepository(backend.location()));
        }
        let bytes = backend.read(FileKind::Config, "")?;
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
        Ok(config)
    }

    /// Opens a repository with a passphrase.
    #[tracing::instrument(skip_all, fields(repo = %backend.location()))]
    pub fn open(backend: Arc<dyn Backend>, passphrase: &[u8]) -> Result<Repository> {
        let config = Self::read_config(backend.as_ref())?;
        let keys = backend.list(FileKind::Key)?;
        if keys.is_empty() {
            return Err(Error::corrupt("keys/", "the repository has no key files"));
        }
        let mut corrupt = None;
        for (name, _) in keys {
            let what = format!("key file keys/{name}");
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
            match unwrap_key(&file, passphrase, &what) {
                Ok(Some(key)) => {
                    let key_id = KeyId::from_hex(&name).map_err(|e| Error::corrupt(&what, e))?;
                    return Ok(Repository {
                        backend,
                        config,
                        key: Arc::new(key),
                        key_id,
                    });
                }
                Ok(None) => {}
                Err(e) => corrupt = Some(e),
            }
        }
        // A damaged key file may be the one this passphrase would open.
        Err(corrupt.unwrap_or(Error::WrongPassword))
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

    // ----- keys -----

    /// Adds a key for another passphrase.
    pub fn add_key(&self, passphrase: &[u8], params: KdfParams) -> Result<KeyId> {
        if passphrase.is_empty() {
            return Err(Error::InvalidArgument(
                "the passphrase must not be empty".into(),
            ));
        }
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
            let id = KeyId::from_hex(&name).map_err(|e| Error::corrupt(&what, e))?;
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
        Ok(id)
    }

    /// Reads one manifest.
    pub fn load_snapshot(&self, id: &SnapshotId) -> Result<Manifest> {
        let what = format!("snapshot {}", id.short());
        let bytes = self.backend.read(FileKind::Snapshot, &id.to_hex())?;
        let plain = sealed::open(&self.key, SealedKind::Snapshot, &bytes, &what)?;
        decode(&plain).map_err(|e| Error::corrupt(what, e))
    }

    /// All snapshots, oldest first, from the manifests alone.
    pub fn list_snapshots(&self) -> Result<Vec<(SnapshotId, Manifest)>> {
        let mut out = Vec::new();
        for (name, _) in self.backend.list(FileKind::Snapshot)? {
            let Ok(id) = SnapshotId::from_hex(&name) else {
                tracing::warn!(file = %name, "ignoring a file that is not a snapshot");
                continue;
            };
            out.push((id, self.load_snapshot(&id)?));
        }
        out.sort_by(|a, b| a.1.time_ns.cmp(&b.1.time_ns).then(a.0.cmp(&b.0)));
        Ok(out)
    }

    /// Resolves `latest`, a full id, or a unique id prefix.
    pub fn find_snapshot(&self, spec: &str) -> Result<(SnapshotId, Manifest)> {
        if spec == "latest" {
            return self
                .list_snapshots()?
                .pop()
                .ok_or_else(|| Error::NotFound("the repository has no snapshots".into()));
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

    /// Deletes a manifest (the data stays until prune).
    pub fn delete_snapshot(&self, id: &SnapshotId) -> Result<()> {
        self.backend.delete(FileKind::Snapshot, &id.to_hex())
    }

    // ----- index -----

    /// Writes an index file.
    pub fn save_index(&self, file: &IndexFile, sync: WriteSync) -> Result<IndexId> {
        let bytes = sealed::seal(&self.key, SealedKind::Index, &encode(file));
        let id = IndexId::hash_of(&bytes);
        self.backend
            .write(FileKind::Index, &id.to_hex(), &bytes, sync)?;
        Ok(id)
    }

    /// Reads one index file.
    pub fn load_index_file(&self, id: &IndexId) -> Result<IndexFile> {
        let what = format!("index file {}", id.short());
        let bytes = self.backend.read(FileKind::Index, &id.to_hex())?;
        let plain = sealed::open(&self.key, SealedKind::Index, &bytes, &what)?;
        decode(&plain).map_err(|e| Error::corrupt(what, e))
    }

    /// Merges every index file. Files superseded by another are skipped.
    pub fn load_index(&self) -> Result<MasterIndex> {
        let mut files = Vec::new();
        for (name, _) in self.backend.list(FileKind::Index)? {
            let Ok(id) = IndexId::from_hex(&name) else {
                continue;
            };
            files.push((id, self.load_index_file(&id)?));
        }
        let superseded: HashSet<IndexId> = files
            .iter()
            .flat_map(|(_, f)| f.supersedes.iter().copied())
            .collect();
        let mut index = MasterIndex::default();
        for (id, file) in &files {
            if !superseded.contains(id) {
                index.add_file(*id, file);
            }
        }
        Ok(index)
    }

    // ----- blobs -----

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
        pack::open_blob(&self.key, &pack.salt, entry, &sealed)
    }

    /// Reads a tree blob.
    pub fn load_tree(&self, index: &MasterIndex, id: &BlobId) -> Result<Tree> {
        let plain = self.read_blob(index, id)?;
        decode(&plain).map_err(|e| Error::Damaged(format!("tree {id} does not parse: {e}")))
    }
}
