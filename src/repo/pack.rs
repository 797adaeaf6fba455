//! Pack files: many sealed blobs, then the sealed header listing them, then a
//! fixed trailer (salt, header length, reserved, magic). A pack is named by
//! the BLAKE3 hash of all its bytes, so its integrity can be checked without
//! the key, and the index can be rebuilt from the packs alone.

use crate::crypto::{FileCipher, MasterKey, SALT_LEN};
use crate::error::{Error, Result};
use crate::format::{
    blob_aad, decode, encode_compact, BlobEntry, BlobType, Compression, IndexPack, PackHeader,
    PACK_HEADER_AAD, PACK_MAGIC, PACK_TRAILER_LEN,
};
use crate::id::{BlobId, PackId};

/// A pack being filled by one worker.
pub struct PackBuilder {
    salt: [u8; SALT_LEN],
    cipher: FileCipher,
    buf: Vec<u8>,
    blobs: Vec<BlobEntry>,
}

/// A finished pack, ready to be written.
pub struct FinishedPack {
    /// Its name.
    pub id: PackId,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Its index record.
    pub index: IndexPack,
}

impl PackBuilder {
    /// An empty pack with a fresh salt (and so a fresh key).
    pub fn new(key: &MasterKey, capacity: usize) -> Self {
        let salt = crate::crypto::random_array();
        Self {
            salt,
            cipher: key.file_cipher(&salt),
            buf: Vec::with_capacity(capacity),
            blobs: Vec::new(),
        }
    }

    /// Bytes so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether no blob was added.
    pub fn is_empty(&self) -> bool {
        self.blobs.is_empty()
    }

    /// Whether a blob of `stored_len` bytes still fits this pack: the format
    /// stores offsets and lengths as u32.
    pub fn fits(&self, stored_len: usize) -> bool {
        let end = self.buf.len() as u64 + stored_len as u64 + crate::crypto::SEAL_OVERHEAD as u64;
        end <= u64::from(u32::MAX)
    }

    /// Seals `stored` (the possibly compressed plaintext) into the pack;
    /// fails (adding nothing) when the blob would not fit the format's u32
    /// offsets: finish this pack and add it to a new one, and a blob that
    /// does not fit an empty pack cannot be stored at all.
    pub fn try_add(
        &mut self,
        id: BlobId,
        kind: BlobType,
        raw_length: usize,
        compression: Compression,
        stored: &[u8],
    ) -> Result<()> {
        let raw = u32::try_from(raw_length);
        if !self.fits(stored.len()) || raw.is_err() {
            return Err(Error::InvalidArgument(format!(
                "a blob of {raw_length} bytes does not fit a pack at offset {} (the format limits packs to 4 GiB)",
                self.buf.len()
            )));
        }
        self.add(id, kind, raw_length, compression, stored);
        Ok(())
    }

    /// Seals `stored` (the possibly compressed plaintext) into the pack.
    /// Callers keep packs below the repository's pack size (at most 1 GiB)
    /// and blobs below 16 MiB, so offsets fit; [`PackBuilder::try_add`]
    /// checks it.
    pub fn add(
        &mut self,
        id: BlobId,
        kind: BlobType,
        raw_length: usize,
        compression: Compression,
        stored: &[u8],
    ) {
        let offset = self.buf.len();
        self.cipher
            .seal_into(&blob_aad(kind, &id), stored, &mut self.buf);
        self.blobs.push(BlobEntry {
            id,
            kind,
            offset: offset as u32,
            length: (self.buf.len() - offset) as u32,
            raw_length: raw_length as u32,
            compression,
        });
    }

    /// Appends header and trailer and names the pack.
    pub fn finish(mut self) -> FinishedPack {
        let header = encode_compact(&PackHeader {
            blobs: self.blobs.clone(),
        });
        let before = self.buf.len();
        self.cipher
            .seal_into(PACK_HEADER_AAD, &header, &mut self.buf);
        let header_len = (self.buf.len() - before) as u32;
        self.buf.extend_from_slice(&self.salt);
        self.buf.extend_from_slice(&header_len.to_le_bytes());
        self.buf.extend_from_slice(&0u32.to_le_bytes());
        self.buf.extend_from_slice(PACK_MAGIC);
        let id = PackId::hash_of(&self.buf);
        let size = self.buf.len() as u64;
        FinishedPack {
            id,
            bytes: self.buf,
            index: IndexPack {
                id,
                size,
                salt: self.salt,
                blobs: self.blobs,
            },
        }
    }
}

/// Reads the trailer and header of a pack from its last bytes.
///
/// `tail` must be the end of the pack, at least the trailer and header.
pub fn parse_trailer(tail: &[u8]) -> Result<([u8; SALT_LEN], usize)> {
    if tail.len() < PACK_TRAILER_LEN || &tail[tail.len() - 8..] != PACK_MAGIC {
        return Err(Error::Damaged(
            "pack trailer missing or damaged (bad magic)".into(),
        ));
    }
    let t = &tail[tail.len() - PACK_TRAILER_LEN..];
    let mut salt = [0u8; SALT_LEN];
    salt.copy_from_slice(&t[..SALT_LEN]);
    let header_len = u32::from_le_bytes([t[16], t[17], t[18], t[19]]) as usize;
    Ok((salt, header_len))
}

/// Decrypts a pack's header given the bytes of the header and the salt.
pub fn open_header(
    key: &MasterKey,
    salt: &[u8; SALT_LEN],
    sealed_header: &[u8],
) -> Result<PackHeader> {
    let plain = key
        .file_cipher(salt)
        .open(PACK_HEADER_AAD, sealed_header)
        .map_err(|_| Error::Damaged("pack header fails authentication".into()))?;
    decode(&plain).map_err(|e| Error::Damaged(format!("pack header does not parse: {e}")))
}

/// Reads only the trailer and header of a stored pack of `size` bytes.
pub fn read_header(
    backend: &dyn crate::backend::Backend,
    key: &MasterKey,
    name: &str,
    size: u64,
) -> Result<([u8; SALT_LEN], PackHeader)> {
    use crate::backend::FileKind;
    if size < PACK_TRAILER_LEN as u64 {
        return Err(Error::Damaged(format!(
            "pack {name} is too short ({size} bytes)"
        )));
    }
    let trailer_at = size - PACK_TRAILER_LEN as u64;
    let tail = backend.read_range(FileKind::Pack, name, trailer_at, PACK_TRAILER_LEN)?;
    let (salt, header_len) = parse_trailer(&tail)?;
    let header_at = trailer_at
        .checked_sub(header_len as u64)
        .ok_or_else(|| Error::Damaged("pack header length exceeds the pack".into()))?;
    let sealed = backend.read_range(FileKind::Pack, name, header_at, header_len)?;
    Ok((salt, open_header(key, &salt, &sealed)?))
}

/// Parses a whole pack held in memory into its index record.
pub fn read_whole(key: &MasterKey, id: PackId, bytes: &[u8]) -> Result<IndexPack> {
    let (salt, header_len) = parse_trailer(bytes)?;
    let end = bytes.len() - PACK_TRAILER_LEN;
    let start = end
        .checked_sub(header_len)
        .ok_or_else(|| Error::Damaged("pack header length exceeds the pack".into()))?;
    let header = open_header(key, &salt, &bytes[start..end])?;
    for b in &header.blobs {
        if b.offset as usize + b.length as usize > start {
            return Err(Error::Damaged(format!(
                "blob {} extends past the pack's data",
                b.id.short()
            )));
        }
    }
    Ok(IndexPack {
        id,
        size: bytes.len() as u64,
        salt,
        blobs: header.blobs,
    })
}

thread_local! {
    /// One zstd decompression context per thread: creating one per blob
    /// cost more than decompressing a small blob.
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

fn decompress(data: &[u8], capacity: usize) -> std::io::Result<Vec<u8>> {
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new()?);
        }
        match slot.as_mut() {
            Some(d) => d.decompress(data, capacity),
            None => zstd::bulk::decompress(data, capacity),
        }
    })
}

/// Decrypts, decompresses and checks one blob.
pub fn open_blob(
    key: &MasterKey,
    salt: &[u8; SALT_LEN],
    entry: &BlobEntry,
    sealed: &[u8],
) -> Result<Vec<u8>> {
    let stored = key
        .file_cipher(salt)
        .open(&blob_aad(entry.kind, &entry.id), sealed)
        .map_err(|_| Error::Damaged(format!("blob {} fails authentication", entry.id)))?;
    let plain = match entry.compression {
        Compression::None => stored,
        Compression::Zstd => decompress(&stored, entry.raw_length as usize)
            .map_err(|e| Error::Damaged(format!("blob {} does not decompress: {e}", entry.id)))?,
    };
    if plain.len() != entry.raw_length as usize || key.blob_id(&plain) != entry.id {
        return Err(Error::Damaged(format!(
            "blob {} does not hash to its id",
            entry.id
        )));
    }
    Ok(plain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_round_trip_and_every_bit_matters() {
        let key = MasterKey::generate();
        let mut b = PackBuilder::new(&key, 1024);
        let data = b"some blob data".to_vec();
        let id = key.blob_id(&data);
        b.add(id, BlobType::Data, data.len(), Compression::None, &data);
        let tree = b"tree".to_vec();
        let tid = key.blob_id(&tree);
        b.add(tid, BlobType::Tree, tree.len(), Compression::None, &tree);
        let pack = b.finish();
        assert_eq!(pack.id, PackId::hash_of(&pack.bytes));
        let idx = read_whole(&key, pack.id, &pack.bytes).unwrap();
        assert_eq!(idx, pack.index);
        let e = &idx.blobs[0];
        let sealed = &pack.bytes[e.offset as usize..(e.offset + e.length) as usize];
        assert_eq!(open_blob(&key, &idx.salt, e, sealed).unwrap(), data);
        // A blob's type is authenticated.
        let mut as_tree = *e;
        as_tree.kind = BlobType::Tree;
        assert!(open_blob(&key, &idx.salt, &as_tree, sealed).is_err());
        // Any flipped bit changes the pack's name; flips in the header or
        // trailer also make it unreadable.
        for i in (0..pack.bytes.len()).step_by(7) {
            let mut bad = pack.bytes.clone();
            bad[i] ^= 0x10;
            assert_ne!(PackId::hash_of(&bad), pack.id);
        }
        let mut bad = pack.bytes.clone();
        let n = bad.len();
        bad[n - PACK_TRAILER_LEN - 3] ^= 1;
        assert!(read_whole(&key, pack.id, &bad).is_err());
    }

    /// Pack headers are written compact (no field names): 50 bytes per
    /// small blob instead of 95; headers written with names by earlier
    /// versions still read.
    #[test]
    fn headers_are_compact_and_named_ones_still_read() {
        let key = MasterKey::generate();
        let mut b = PackBuilder::new(&key, 1 << 20);
        for i in 0..1000u32 {
            let data = i.to_le_bytes();
            b.add(
                key.blob_id(&data),
                BlobType::Data,
                4,
                Compression::None,
                &data,
            );
        }
        let pack = b.finish();
        let (_, header_len) = parse_trailer(&pack.bytes).unwrap();
        // 1000 entries: the sealed header, nonce and tag included.
        assert!(
            header_len < 70_000,
            "header of 1000 blobs takes {header_len} bytes"
        );
        let header = PackHeader {
            blobs: pack.index.blobs.clone(),
        };
        let named = crate::format::encode(&header);
        assert!(named.len() > 90_000, "{}", named.len());
        assert_eq!(decode::<PackHeader>(&named).unwrap(), header);
        assert_eq!(
            decode::<PackHeader>(&encode_compact(&header)).unwrap(),
            header
        );
    }
}
