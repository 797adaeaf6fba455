//! The in-memory index: every blob's pack, offset and length, merged from all
//! `index/` files.

use std::collections::{HashMap, HashSet};

use crate::crypto::SALT_LEN;
use crate::format::{BlobEntry, BlobType, Compression, IndexFile, IndexPack};
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

/// Where a blob lives: its pack's position and its entry without the id,
/// which is the map's key. 20 bytes instead of the 52 of a full entry plus
/// position: with a million blobs the map is what a backup's memory is made
/// of (docs/performance.md, "Memory of a million files").
#[derive(Clone, Copy, Debug)]
pub struct BlobLocation {
    /// Position in [`MasterIndex::packs`].
    pub pack: u32,
    /// Offset of the sealed blob in the pack.
    pub offset: u32,
    /// Length of the sealed blob.
    pub length: u32,
    /// Length of the plaintext.
    pub raw_length: u32,
    /// Data or tree.
    pub kind: BlobType,
    /// How the plaintext was stored.
    pub compression: Compression,
}

impl BlobLocation {
    fn new(pack: u32, e: &BlobEntry) -> Self {
        Self {
            pack,
            offset: e.offset,
            length: e.length,
            raw_length: e.raw_length,
            kind: e.kind,
            compression: e.compression,
        }
    }

    /// The full entry of the blob `id` stored here.
    pub fn entry(&self, id: BlobId) -> BlobEntry {
        BlobEntry {
            id,
            kind: self.kind,
            offset: self.offset,
            length: self.length,
            raw_length: self.raw_length,
            compression: self.compression,
        }
    }
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
            self.blobs
                .entry(entry.id)
                .or_insert_with(|| BlobLocation::new(pos, entry));
        }
    }

    /// Adds a whole index file.
    pub fn add_file(&mut self, id: IndexId, file: &IndexFile) {
        for p in &file.packs {
            self.add_pack(p);
        }
        self.files.push(id);
    }

    /// Makes room for `blobs` more blobs at once, so that loading a large
    /// index does not hold the old and the doubled table together.
    pub fn reserve(&mut self, blobs: usize) {
        self.blobs.reserve(blobs);
    }

    /// Where a blob is.
    pub fn get(&self, id: &BlobId) -> Option<(&PackInfo, BlobEntry)> {
        self.blobs
            .get(id)
            .map(|loc| (&self.packs[loc.pack as usize], loc.entry(*id)))
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
    pub fn iter(&self) -> impl Iterator<Item = (&PackInfo, BlobEntry)> {
        self.blobs
            .iter()
            .map(|(id, loc)| (&self.packs[loc.pack as usize], loc.entry(*id)))
    }

    /// Index records of the packs holding at least one of `keep`, with only
    /// those blobs listed (used by prune to write the consolidated index).
    pub fn records_for(&self, packs: &HashSet<PackId>) -> Vec<IndexPack> {
        let mut by_pack: HashMap<u32, Vec<BlobEntry>> = HashMap::new();
        for (id, loc) in &self.blobs {
            if packs.contains(&self.packs[loc.pack as usize].id) {
                by_pack.entry(loc.pack).or_default().push(loc.entry(*id));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u8, kind: BlobType, compression: Compression) -> BlobEntry {
        BlobEntry {
            id: BlobId([n; 32]),
            kind,
            offset: u32::from(n) * 100,
            length: 70_000 + u32::from(n),
            raw_length: 90_000 + u32::from(n),
            compression,
        }
    }

    #[test]
    fn a_location_is_small_and_gives_back_every_field_of_the_entry() {
        assert!(std::mem::size_of::<BlobLocation>() <= 20);
        let blobs = vec![
            entry(1, BlobType::Data, Compression::Zstd),
            entry(2, BlobType::Tree, Compression::None),
        ];
        let pack = IndexPack {
            id: PackId([9; 32]),
            size: 1234,
            salt: [7; SALT_LEN],
            blobs: blobs.clone(),
        };
        let mut index = MasterIndex::default();
        index.reserve(2);
        index.add_pack(&pack);
        for e in &blobs {
            let (p, got) = index.get(&e.id).expect("indexed");
            assert_eq!((p.id, got), (pack.id, *e));
        }
        let mut all: Vec<BlobEntry> = index.iter().map(|(_, e)| e).collect();
        all.sort_by_key(|e| e.id);
        assert_eq!(all, blobs);
        let records = index.records_for(&HashSet::from([pack.id]));
        assert_eq!(records, vec![pack]);
    }

    #[test]
    fn a_blob_listed_twice_keeps_its_first_location() {
        let e = entry(3, BlobType::Data, Compression::Zstd);
        let later = BlobEntry { offset: 5, ..e };
        let mut index = MasterIndex::default();
        for (n, b) in [(1u8, e), (2, later)] {
            index.add_pack(&IndexPack {
                id: PackId([n; 32]),
                size: 1,
                salt: [0; SALT_LEN],
                blobs: vec![b],
            });
        }
        let (p, got) = index.get(&e.id).expect("indexed");
        assert_eq!((p.id, got.offset), (PackId([1; 32]), e.offset));
    }
}
