//! The in-memory index: every blob's pack, offset and length, merged from all
//! `index/` files.

use std::collections::{HashMap, HashSet};

use crate::crypto::SALT_LEN;
use crate::format::{BlobEntry, IndexFile, IndexPack};
use crate::id::{BlobId, IndexId, PackId};

/// What the index knows about one pack.
#[derive(Clone, Debug)]
pub struct PackInfo {
    /// Its id.
    pub id: PackId,
    /// Its size.
    pub size: u64,
    /// Its key salt.
    pub salt: [u8; SALT_LEN],
}

/// Where a blob lives.
#[derive(Clone, Copy, Debug)]
pub struct BlobLocation {
    /// Position in [`MasterIndex::packs`].
    pub pack: u32,
    /// The blob's entry.
    pub entry: BlobEntry,
}

/// All index files merged.
#[derive(Clone, Default, Debug)]
pub struct MasterIndex {
    packs: Vec<PackInfo>,
    pack_pos: HashMap<PackId, u32>,
    blobs: HashMap<BlobId, BlobLocation>,
    /// The live index files merged into this one.
    pub files: Vec<IndexId>,
    /// Index files present but superseded by a live one: garbage once their
    /// superseder is durable, removed (and superseded again) by every
    /// consolidation so that none can come back to life (see `docs/format.md`).
    pub superseded: Vec<IndexId>,
    /// Index files that could not be read or authenticated, with the reason.
    /// Readers go on without them (their blobs look missing, so a backup
    /// stores them again); prune refuses to run while any is listed.
    pub unreadable: Vec<(IndexId, String)>,
}

impl MasterIndex {
    /// Adds one pack's record; a blob already known keeps its first location.
    pub fn add_pack(&mut self, pack: &IndexPack) {
        let pos = match self.pack_pos.get(&pack.id) {
            Some(&p) => p,
            None => {
                let p = self.packs.len() as u32;
                self.packs.push(PackInfo {
                    id: pack.id,
                    size: pack.size,
                    salt: pack.salt,
                });
                self.pack_pos.insert(pack.id, p);
                p
            }
        };
        for entry in &pack.blobs {
            self.blobs.entry(entry.id).or_insert(BlobLocation {
                pack: pos,
                entry: *entry,
            });
        }
    }

    /// Adds a whole index file.
    pub fn add_file(&mut self, id: IndexId, file: &IndexFile) {
        for p in &file.packs {
            self.add_pack(p);
        }
        self.files.push(id);
    }

    /// Where a blob is.
    pub fn get(&self, id: &BlobId) -> Option<(&PackInfo, &BlobEntry)> {
        self.blobs
            .get(id)
            .map(|loc| (&self.packs[loc.pack as usize], &loc.entry))
    }

    /// Where a blob is, with the pack's position in [`MasterIndex::packs`].
    pub fn location(&self, id: &BlobId) -> Option<&BlobLocation> {
        self.blobs.get(id)
    }

    /// Whether the blob is stored.
    pub fn contains(&self, id: &BlobId) -> bool {
        self.blobs.contains_key(id)
    }

    /// Every index file present when this index was loaded: live,
    /// superseded and unreadable. A consolidated index supersedes all of them.
    pub fn all_files(&self) -> Vec<IndexId> {
        let mut all: Vec<IndexId> = self
            .files
            .iter()
            .chain(&self.superseded)
            .copied()
            .chain(self.unreadable.iter().map(|(id, _)| *id))
            .collect();
        all.sort();
        all.dedup();
        all
    }

    /// The packs that are not in `present` (the backend's listing, pack to
    /// size) with the size the index records.
    pub fn packs_not_in(&self, present: &HashMap<PackId, u64>) -> Vec<&PackInfo> {
        self.packs
            .iter()
            .filter(|p| present.get(&p.id) != Some(&p.size))
            .collect()
    }

    /// Forgets the packs that are not in `present` (the backend's listing,
    /// pack to size) with the size the index records, with their blobs, and
    /// returns their ids. A blob of a missing pack then looks missing, so a
    /// backup stores it again instead of trusting a location that no longer
    /// exists (a stale index file, a pack lost to a power cut at sync level
    /// `none`).
    pub fn drop_packs_not_in(&mut self, present: &HashMap<PackId, u64>) -> Vec<PackId> {
        let missing: Vec<PackId> = self
            .packs_not_in(present)
            .into_iter()
            .map(|p| p.id)
            .collect();
        if missing.is_empty() {
            return missing;
        }
        // Renumber the packs that stay and drop the blobs of the others.
        let mut remap: Vec<Option<u32>> = Vec::with_capacity(self.packs.len());
        let mut kept = Vec::with_capacity(self.packs.len() - missing.len());
        for p in self.packs.drain(..) {
            if present.get(&p.id) == Some(&p.size) {
                remap.push(Some(kept.len() as u32));
                kept.push(p);
            } else {
                remap.push(None);
            }
        }
        self.packs = kept;
        self.pack_pos = self
            .packs
            .iter()
            .enumerate()
            .map(|(i, p)| (p.id, i as u32))
            .collect();
        self.blobs.retain(|_, loc| match remap[loc.pack as usize] {
            Some(new) => {
                loc.pack = new;
                true
            }
            None => false,
        });
        missing
    }

    /// All packs.
    pub fn packs(&self) -> &[PackInfo] {
        &self.packs
    }

    /// A pack by id.
    pub fn pack(&self, id: &PackId) -> Option<&PackInfo> {
        self.pack_pos.get(id).map(|&p| &self.packs[p as usize])
    }

    /// Number of blobs.
    pub fn len(&self) -> usize {
        self.blobs.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.blobs.is_empty()
    }

    /// Iterates over every blob with its pack.
    pub fn iter(&self) -> impl Iterator<Item = (&PackInfo, &BlobEntry)> {
        self.blobs
            .values()
            .map(|loc| (&self.packs[loc.pack as usize], &loc.entry))
    }

    /// Index records of the packs holding at least one of `keep`, with only
    /// those blobs listed (used by prune to write the consolidated index).
    pub fn records_for(&self, packs: &HashSet<PackId>) -> Vec<IndexPack> {
        let mut by_pack: HashMap<u32, Vec<BlobEntry>> = HashMap::new();
        for loc in self.blobs.values() {
            if packs.contains(&self.packs[loc.pack as usize].id) {
                by_pack.entry(loc.pack).or_default().push(loc.entry);
            }
        }
        let mut out: Vec<IndexPack> = by_pack
            .into_iter()
            .map(|(p, mut blobs)| {
                blobs.sort_by_key(|b| b.offset);
                let info = &self.packs[p as usize];
                IndexPack {
                    id: info.id,
                    size: info.size,
                    salt: info.salt,
                    blobs,
                }
            })
            .collect();
        out.sort_by_key(|p| p.id);
        out
    }
}
