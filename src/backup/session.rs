//! A backup's session journal: what makes an interrupted backup resume
//! instead of sending everything again. After each pack is stored, its
//! index record is written (sealed with the repository's key, like an
//! index file) into the session directory, on the client's side. A backup
//! that starts with records left by one that never committed asks the
//! repository which of those packs are stored (with their size) and
//! counts their blobs as present: it then re-sends at most the packs that
//! were in flight when it stopped, one per saver thread and the writer's.
//! The resumed records go into this backup's index file at commit; the
//! journal is emptied once the snapshot is committed.

use std::collections::HashMap;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::backend::FileKind;
use crate::crypto::MasterKey;
use crate::error::{Error, IoContext, Result};
use crate::format::{IndexFile, IndexPack};
use crate::id::{IndexId, PackId};
use crate::repo::{seal_index_file, MasterIndex, Repository};

/// The journal of one backup session.
pub struct Session {
    dir: PathBuf,
    key: Arc<MasterKey>,
}

impl Session {
    /// The journal in `dir` (made 0700 if missing), sealed with `repo`'s
    /// key.
    pub fn open(dir: &Path, repo: &Repository) -> Result<Session> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .ctx(|| format!("creating the session journal {}", dir.display()))?;
        Ok(Session {
            dir: dir.to_path_buf(),
            key: repo.key().clone(),
        })
    }

    /// Records a stored pack (durably: the record outlives a kill).
    pub fn record(&self, pack: &IndexPack) -> Result<()> {
        let (id, bytes) = seal_index_file(
            &self.key,
            &IndexFile {
                packs: vec![pack.clone()],
                supersedes: Vec::new(),
            },
        );
        let path = self.dir.join(id.to_hex());
        let tmp = self.dir.join(format!(".{}.tmp", id.to_hex()));
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_data()?;
            std::fs::rename(&tmp, &path)
        };
        write().ctx(|| format!("recording pack {} in {}", pack.id.short(), path.display()))
    }

    /// The records left by a session that did not commit, for packs that
    /// are stored with the recorded size and not indexed yet; they are
    /// added to `index`. Unreadable records are skipped with a warning.
    pub fn resume(&self, repo: &Repository, index: &mut MasterIndex) -> Result<Vec<IndexPack>> {
        let mut records: Vec<IndexPack> = Vec::new();
        let entries = std::fs::read_dir(&self.dir)
            .ctx(|| format!("reading the session journal {}", self.dir.display()))?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| IndexId::from_hex(n).ok()) else {
                continue;
            };
            let decoded = std::fs::read(entry.path())
                .map_err(|e| Error::io(entry.path().display().to_string(), e))
                .and_then(|bytes| repo.decode_index_file(&id, &bytes));
            match decoded {
                Ok(file) => records.extend(file.packs),
                Err(e) => {
                    tracing::warn!(record = %id.short(), "skipping an unreadable session record: {e}")
                }
            }
        }
        if records.is_empty() {
            return Ok(records);
        }
        let stored: HashMap<PackId, u64> = repo
            .backend()
            .list(FileKind::Pack)?
            .into_iter()
            .filter_map(|(n, size)| PackId::from_hex(&n).ok().map(|id| (id, size)))
            .collect();
        let recorded = records.len();
        records.retain(|p| stored.get(&p.id) == Some(&p.size) && index.pack(&p.id).is_none());
        records.sort_by_key(|p| p.id);
        records.dedup_by_key(|p| p.id);
        for p in &records {
            index.add_pack(p);
        }
        tracing::info!(
            recorded,
            resumed = records.len(),
            bytes = records.iter().map(|p| p.size).sum::<u64>(),
            "resuming an interrupted backup: its stored packs are not sent again"
        );
        Ok(records)
    }

    /// Empties the journal (the snapshot is committed).
    pub fn clear(&self) {
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}
