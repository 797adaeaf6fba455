//! The VMA archive format of Proxmox VE's `vzdump` for virtual machines,
//! read as a stream and written (for tests, and to give a VM back in the
//! form `qmrestore` takes).
//!
//! Layout (all integers big-endian, except the blob lengths):
//!
//! ```text
//! header (12288 bytes)
//!   magic "VMA\0" | version u32 (1) | uuid [16] | ctime i64 (Unix seconds)
//!   | md5 [16] (of the whole header, blob buffer included, with these 16
//!   bytes zeroed) | blob_buffer_offset u32 | blob_buffer_size u32
//!   | header_size u32 | reserved [1984] | config_names u32[256]
//!   | config_data u32[256] | reserved [4]
//!   | dev_info[256] { devname_ptr u32 | reserved u32 | size u64 | reserved [16] }
//! blob buffer (blob_buffer_size bytes at blob_buffer_offset; header_size
//!   covers it): blobs at offsets >= 1, each a u16 little-endian length
//!   and that many bytes; names are NUL-terminated strings. Device 0 and
//!   blob offset 0 mean "none".
//! extent* (until the end of the file)
//!   header (512 bytes): magic "VMAE" | reserved u16 | block_count u16
//!   | uuid [16] (the archive's) | md5 [16] (of these 512 bytes with it
//!   zeroed) | blockinfo u64[59]
//!   blockinfo: mask (16 bits) << 48 | device (8 bits) << 32 | cluster
//!   (32 bits); device 0: an unused slot. Each cluster is 64 KiB, 16
//!   blocks of 4 KiB; bit i of the mask set: block i follows in the data,
//!   clear: block i is zeros (not stored).
//!   data: the set blocks of each slot in order (block_count blocks).
//! ```
//!
//! Clusters may come in any order (the backup job copies a cluster out of
//! turn when the guest writes to it). Every cluster of every device is in
//! the archive once; the last cluster of a disk whose size is not a
//! multiple of 64 KiB is written whole, its tail zero.

use std::io::{self, Read, Write};

use md5::{Digest, Md5};

/// A block: the unit of the masks.
pub const BLOCK_SIZE: usize = 4096;
/// A cluster: 16 blocks.
pub const CLUSTER_SIZE: usize = 16 * BLOCK_SIZE;
/// Slots per extent.
pub const BLOCKS_PER_EXTENT: usize = 59;
/// The fixed part of the header.
pub const HEADER_SIZE: usize = 12288;
/// An extent's header.
pub const EXTENT_HEADER_SIZE: usize = 512;
const MAGIC: &[u8; 4] = b"VMA\0";
const EXTENT_MAGIC: &[u8; 4] = b"VMAE";
const MAX_CONFIGS: usize = 256;
const MAX_DEVICES: usize = 256;
/// Where the offset tables and the device table start in the header.
const CONFIG_NAMES_AT: usize = 2044;
const CONFIG_DATA_AT: usize = CONFIG_NAMES_AT + 4 * MAX_CONFIGS;
const DEV_INFO_AT: usize = CONFIG_DATA_AT + 4 * MAX_CONFIGS + 4;
/// A header larger than this is not a VMA header (the blob buffer holds
/// configuration files and names: kilobytes).
const MAX_HEADER_SIZE: u32 = 16 << 20;

/// What is wrong with an archive.
#[derive(Debug, thiserror::Error)]
pub enum VmaError {
    /// Reading failed.
    #[error("reading the archive: {0}")]
    Io(#[from] io::Error),
    /// Not a VMA archive, or damaged.
    #[error("not a valid VMA archive: {0}")]
    Invalid(String),
    /// The archive ends before it is complete.
    #[error("the VMA archive is truncated: {0}")]
    Truncated(String),
}

type Result<T> = std::result::Result<T, VmaError>;

fn invalid(msg: impl Into<String>) -> VmaError {
    VmaError::Invalid(msg.into())
}

/// One disk in the archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// Its id in the archive (1-255).
    pub id: u8,
    /// Its name (`drive-scsi0`).
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
}

impl Device {
    /// How many clusters it spans.
    pub fn clusters(&self) -> u64 {
        self.size.div_ceil(CLUSTER_SIZE as u64)
    }
}

/// What the header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The archive's UUID.
    pub uuid: [u8; 16],
    /// When it was made (Unix seconds).
    pub ctime: i64,
    /// Configuration files (`qemu-server.conf`, `qemu-server.fw`), in order.
    pub configs: Vec<(String, Vec<u8>)>,
    /// The disks, by id.
    pub devices: Vec<Device>,
}

/// One cluster read from an extent.
#[derive(Debug)]
pub struct Cluster<'a> {
    /// Its device.
    pub device: u8,
    /// Its number (offset / 64 KiB).
    pub number: u32,
    /// Which 4 KiB blocks are stored (bit i: block i); the others are zero.
    pub mask: u16,
    /// The stored blocks, in order (`mask.count_ones()` blocks).
    pub data: &'a [u8],
}

impl Cluster<'_> {
    /// Calls `f(block index, bytes)` for each stored block.
    pub fn stored_blocks(&self, mut f: impl FnMut(usize, &[u8])) {
        let mut at = 0;
        for i in 0..16 {
            if self.mask & (1 << i) != 0 {
                f(i, &self.data[at..at + BLOCK_SIZE]);
                at += BLOCK_SIZE;
            }
        }
    }
}

/// A VMA archive read front to back, one extent in memory at a time
/// (at most 59 clusters: 3.7 MiB).
pub struct VmaReader<R> {
    input: R,
    header: Header,
    extent: Vec<u8>,
    slots: Vec<(u8, u32, u16, usize)>,
    offset: u64,
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` at a clean end (nothing
/// read), `Truncated` for an end midway.
fn fill(input: &mut impl Read, buf: &mut [u8], what: &str) -> Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => {
                return Err(VmaError::Truncated(format!(
                    "{what} cut short after {got} of {} bytes",
                    buf.len()
                )))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

/// The blob at `offset` of the blob buffer.
fn blob(buffer: &[u8], offset: u32) -> Result<&[u8]> {
    let at = offset as usize;
    let len_bytes = buffer
        .get(at..at + 2)
        .ok_or_else(|| invalid(format!("blob offset {offset} is outside the blob buffer")))?;
    let len = usize::from(u16::from_le_bytes([len_bytes[0], len_bytes[1]]));
    buffer
        .get(at + 2..at + 2 + len)
        .ok_or_else(|| invalid(format!("blob at {offset} runs past the blob buffer")))
}

fn blob_string(buffer: &[u8], offset: u32) -> Result<String> {
    let b = blob(buffer, offset)?;
    let b = b.strip_suffix(&[0]).unwrap_or(b);
    String::from_utf8(b.to_vec()).map_err(|_| invalid(format!("name at {offset} is not UTF-8")))
}

impl<R: Read> VmaReader<R> {
    /// Reads and checks the header (magic, version, checksum, tables).
    pub fn new(mut input: R) -> Result<Self> {
        let mut fixed = vec![0u8; HEADER_SIZE];
        if !fill(&mut input, &mut fixed, "the header")? {
            return Err(VmaError::Truncated("the archive is empty".into()));
        }
        if &fixed[0..4] != MAGIC {
            return Err(invalid("no VMA magic at the start"));
        }
        let version = be_u32(&fixed, 4);
        if version != 1 {
            return Err(invalid(format!("version {version}, this build reads 1")));
        }
        let blob_offset = be_u32(&fixed, 48);
        let blob_size = be_u32(&fixed, 52);
        let header_size = be_u32(&fixed, 56);
        if !(HEADER_SIZE as u32..=MAX_HEADER_SIZE).contains(&header_size)
            || u64::from(blob_offset) + u64::from(blob_size) > u64::from(header_size)
            || (blob_offset as usize) < HEADER_SIZE && blob_size > 0
        {
            return Err(invalid(format!(
                "header size {header_size}, blob buffer {blob_size} bytes at {blob_offset}"
            )));
        }
        let mut whole = fixed;
        whole.resize(header_size as usize, 0);
        if !fill(
            &mut input,
            &mut whole[HEADER_SIZE..],
            "the header's blob buffer",
        )? && header_size as usize > HEADER_SIZE
        {
            return Err(VmaError::Truncated("the archive ends in its header".into()));
        }
        let mut stated = [0u8; 16];
        stated.copy_from_slice(&whole[32..48]);
        let mut zeroed = whole.clone();
        zeroed[32..48].fill(0);
        let computed: [u8; 16] = Md5::digest(&zeroed).into();
        if computed != stated {
            return Err(invalid("the header's MD5 checksum does not match"));
        }
        let buffer = &whole[blob_offset as usize..(blob_offset + blob_size) as usize];
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&whole[8..24]);
        let ctime = be_u64(&whole, 24) as i64;
        let mut configs = Vec::new();
        for i in 0..MAX_CONFIGS {
            let name = be_u32(&whole, CONFIG_NAMES_AT + 4 * i);
            let data = be_u32(&whole, CONFIG_DATA_AT + 4 * i);
            if name == 0 && data == 0 {
                continue;
            }
            configs.push((blob_string(buffer, name)?, blob(buffer, data)?.to_vec()));
        }
        let mut devices = Vec::new();
        for id in 1..MAX_DEVICES {
            let at = DEV_INFO_AT + 32 * id;
            let name_ptr = be_u32(&whole, at);
            if name_ptr == 0 {
                continue;
            }
            let name = blob_string(buffer, name_ptr)?;
            if name.is_empty() || name.contains('/') || name.starts_with('.') {
                return Err(invalid(format!("device {id} has the name {name:?}")));
            }
            devices.push(Device {
                id: id as u8,
                name,
                size: be_u64(&whole, at + 8),
            });
        }
        Ok(VmaReader {
            input,
            header: Header {
                uuid,
                ctime,
                configs,
                devices,
            },
            extent: Vec::with_capacity(BLOCKS_PER_EXTENT * CLUSTER_SIZE),
            slots: Vec::with_capacity(BLOCKS_PER_EXTENT),
            offset: u64::from(header_size),
        })
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Reads the next extent and calls `f` for each of its clusters;
    /// `Ok(false)` at the end of the archive.
    pub fn next_extent(&mut self, mut f: impl FnMut(Cluster<'_>) -> Result<()>) -> Result<bool> {
        let mut head = [0u8; EXTENT_HEADER_SIZE];
        let at = self.offset;
        if !fill(&mut self.input, &mut head, "an extent header")? {
            return Ok(false);
        }
        if &head[0..4] != EXTENT_MAGIC {
            return Err(invalid(format!("no extent magic at byte {at}")));
        }
        let mut stated = [0u8; 16];
        stated.copy_from_slice(&head[24..40]);
        let mut zeroed = head;
        zeroed[24..40].fill(0);
        let computed: [u8; 16] = Md5::digest(zeroed).into();
        if computed != stated {
            return Err(invalid(format!(
                "the MD5 checksum of the extent at byte {at} does not match"
            )));
        }
        if head[8..24] != self.header.uuid {
            return Err(invalid(format!(
                "the extent at byte {at} belongs to another archive (UUID)"
            )));
        }
        let block_count = usize::from(u16::from_be_bytes([head[6], head[7]]));
        self.slots.clear();
        let mut blocks = 0usize;
        for i in 0..BLOCKS_PER_EXTENT {
            let info = be_u64(&head, 40 + 8 * i);
            let device = ((info >> 32) & 0xff) as u8;
            if device == 0 {
                continue;
            }
            let mask = (info >> 48) as u16;
            let number = (info & 0xffff_ffff) as u32;
            let dev = self
                .header
                .devices
                .iter()
                .find(|d| d.id == device)
                .ok_or_else(|| {
                    invalid(format!(
                        "the extent at byte {at} names device {device}, which the header does not list"
                    ))
                })?;
            if u64::from(number) >= dev.clusters() {
                return Err(invalid(format!(
                    "the extent at byte {at} holds cluster {number} of {}, which has {} clusters",
                    dev.name,
                    dev.clusters()
                )));
            }
            self.slots.push((device, number, mask, blocks * BLOCK_SIZE));
            blocks += mask.count_ones() as usize;
        }
        if blocks != block_count {
            return Err(invalid(format!(
                "the extent at byte {at} says {block_count} blocks, its masks {blocks}"
            )));
        }
        self.extent.resize(blocks * BLOCK_SIZE, 0);
        if !fill(&mut self.input, &mut self.extent, "an extent's data")? && blocks > 0 {
            return Err(VmaError::Truncated(format!(
                "the extent at byte {at} has no data"
            )));
        }
        self.offset += (EXTENT_HEADER_SIZE + blocks * BLOCK_SIZE) as u64;
        for &(device, number, mask, start) in &self.slots {
            let len = mask.count_ones() as usize * BLOCK_SIZE;
            f(Cluster {
                device,
                number,
                mask,
                data: &self.extent[start..start + len],
            })?;
        }
        Ok(true)
    }
}

/// Writes a VMA archive: the header first, then clusters in any order,
/// grouped into extents of 59; zero blocks are left out.
pub struct VmaWriter<W: Write> {
    out: W,
    uuid: [u8; 16],
    slots: Vec<u64>,
    data: Vec<u8>,
}

/// Whether every byte is zero.
pub fn is_zero(b: &[u8]) -> bool {
    let mut words = b.chunks_exact(8);
    words.all(|w| u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]) == 0)
        && words.remainder().iter().all(|&x| x == 0)
}

impl<W: Write> VmaWriter<W> {
    /// Writes the header of an archive holding `header`'s configs and
    /// devices (device ids are taken from `header.devices`).
    pub fn new(mut out: W, header: &Header) -> io::Result<Self> {
        let mut buffer: Vec<u8> = vec![0];
        let mut put = |bytes: &[u8]| -> io::Result<u32> {
            let at = u32::try_from(buffer.len())
                .map_err(|_| io::Error::other("the blob buffer is too large"))?;
            let len = u16::try_from(bytes.len())
                .map_err(|_| io::Error::other("a configuration file is over 64 KiB"))?;
            buffer.extend_from_slice(&len.to_le_bytes());
            buffer.extend_from_slice(bytes);
            Ok(at)
        };
        let mut head = vec![0u8; HEADER_SIZE];
        head[0..4].copy_from_slice(MAGIC);
        head[4..8].copy_from_slice(&1u32.to_be_bytes());
        head[8..24].copy_from_slice(&header.uuid);
        head[24..32].copy_from_slice(&header.ctime.to_be_bytes());
        for (i, (name, data)) in header.configs.iter().enumerate().take(MAX_CONFIGS) {
            let mut n = name.as_bytes().to_vec();
            n.push(0);
            let name_at = put(&n)?;
            let data_at = put(data)?;
            head[CONFIG_NAMES_AT + 4 * i..][..4].copy_from_slice(&name_at.to_be_bytes());
            head[CONFIG_DATA_AT + 4 * i..][..4].copy_from_slice(&data_at.to_be_bytes());
        }
        for d in &header.devices {
            let mut n = d.name.as_bytes().to_vec();
            n.push(0);
            let name_at = put(&n)?;
            let at = DEV_INFO_AT + 32 * usize::from(d.id);
            head[at..at + 4].copy_from_slice(&name_at.to_be_bytes());
            head[at + 8..at + 16].copy_from_slice(&d.size.to_be_bytes());
        }
        let blob_size = buffer.len() as u32;
        let header_size = (HEADER_SIZE + buffer.len()).div_ceil(512) * 512;
        head[48..52].copy_from_slice(&(HEADER_SIZE as u32).to_be_bytes());
        head[52..56].copy_from_slice(&blob_size.to_be_bytes());
        head[56..60].copy_from_slice(&(header_size as u32).to_be_bytes());
        head.extend_from_slice(&buffer);
        head.resize(header_size, 0);
        let sum: [u8; 16] = Md5::digest(&head).into();
        head[32..48].copy_from_slice(&sum);
        out.write_all(&head)?;
        Ok(VmaWriter {
            out,
            uuid: header.uuid,
            slots: Vec::with_capacity(BLOCKS_PER_EXTENT),
            data: Vec::with_capacity(BLOCKS_PER_EXTENT * CLUSTER_SIZE),
        })
    }

    /// Adds cluster `number` of device `device` (`data` at most 64 KiB; a
    /// shorter last cluster is padded with zeros).
    pub fn write_cluster(&mut self, device: u8, number: u32, data: &[u8]) -> io::Result<()> {
        let mut mask = 0u16;
        for i in 0..16 {
            let start = (i * BLOCK_SIZE).min(data.len());
            let end = ((i + 1) * BLOCK_SIZE).min(data.len());
            let block = &data[start..end];
            if block.is_empty() || is_zero(block) {
                continue;
            }
            mask |= 1 << i;
            self.data.extend_from_slice(block);
            self.data
                .resize(self.data.len() + BLOCK_SIZE - block.len(), 0);
        }
        self.slots
            .push(u64::from(mask) << 48 | u64::from(device) << 32 | u64::from(number));
        if self.slots.len() == BLOCKS_PER_EXTENT {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.slots.is_empty() {
            return Ok(());
        }
        let mut head = [0u8; EXTENT_HEADER_SIZE];
        head[0..4].copy_from_slice(EXTENT_MAGIC);
        let blocks = u16::try_from(self.data.len() / BLOCK_SIZE)
            .map_err(|_| io::Error::other("too many blocks in an extent"))?;
        head[6..8].copy_from_slice(&blocks.to_be_bytes());
        head[8..24].copy_from_slice(&self.uuid);
        for (i, info) in self.slots.iter().enumerate() {
            head[40 + 8 * i..48 + 8 * i].copy_from_slice(&info.to_be_bytes());
        }
        let sum: [u8; 16] = Md5::digest(head).into();
        head[24..40].copy_from_slice(&sum);
        self.out.write_all(&head)?;
        self.out.write_all(&self.data)?;
        self.slots.clear();
        self.data.clear();
        Ok(())
    }

    /// Writes the last extent; returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.flush()?;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            uuid: [7; 16],
            ctime: 1_764_720_000,
            configs: vec![("qemu-server.conf".into(), b"memory: 512\n".to_vec())],
            devices: vec![
                Device {
                    id: 1,
                    name: "drive-scsi0".into(),
                    size: 3 * CLUSTER_SIZE as u64 + 5000,
                },
                Device {
                    id: 2,
                    name: "drive-efidisk0".into(),
                    size: 128 * 1024,
                },
            ],
        }
    }

    /// A cluster as read: device, number, mask, stored blocks.
    type ReadCluster = (u8, u32, u16, Vec<u8>);

    fn read_all(bytes: &[u8]) -> Result<(Header, Vec<ReadCluster>)> {
        let mut r = VmaReader::new(bytes)?;
        let mut out = Vec::new();
        while r.next_extent(|c| {
            out.push((c.device, c.number, c.mask, c.data.to_vec()));
            Ok(())
        })? {}
        Ok((r.header().clone(), out))
    }

    #[test]
    fn what_is_written_reads_back_with_zero_blocks_left_out() {
        let mut w = VmaWriter::new(Vec::new(), &header()).unwrap();
        let mut cluster = vec![0u8; CLUSTER_SIZE];
        cluster[BLOCK_SIZE * 3] = 1;
        cluster[BLOCK_SIZE * 15 + 10] = 2;
        w.write_cluster(1, 2, &cluster).unwrap();
        w.write_cluster(1, 0, &vec![0u8; CLUSTER_SIZE]).unwrap();
        w.write_cluster(2, 1, &[9u8; 100]).unwrap();
        let bytes = w.finish().unwrap();
        let (h, clusters) = read_all(&bytes).unwrap();
        assert_eq!(h, header());
        assert_eq!(clusters.len(), 3);
        assert_eq!(clusters[0].2, 1 << 3 | 1 << 15);
        assert_eq!(clusters[0].3.len(), 2 * BLOCK_SIZE);
        assert_eq!((clusters[1].1, clusters[1].2), (0, 0));
        let mut padded = vec![9u8; 100];
        padded.resize(BLOCK_SIZE, 0);
        assert_eq!(clusters[2], (2, 1, 1, padded));
    }

    #[test]
    fn damage_is_an_error_never_data() {
        let mut w = VmaWriter::new(Vec::new(), &header()).unwrap();
        for n in 0..4 {
            w.write_cluster(1, n, &[n as u8 + 1; CLUSTER_SIZE]).unwrap();
        }
        let good = w.finish().unwrap();
        assert!(read_all(&good).is_ok());
        // A changed header byte, a cut, a changed extent header, a cluster
        // beyond its disk.
        let mut bad = good.clone();
        bad[9000] ^= 1;
        assert!(matches!(read_all(&bad), Err(VmaError::Invalid(m)) if m.contains("MD5")));
        for cut in [100, HEADER_SIZE + 10, good.len() - 1] {
            assert!(
                matches!(read_all(&good[..cut]), Err(VmaError::Truncated(_))),
                "cut at {cut}"
            );
        }
        let header_len = good.len() - EXTENT_HEADER_SIZE - 4 * CLUSTER_SIZE;
        let mut bad = good.clone();
        bad[header_len + 45] ^= 1;
        assert!(matches!(read_all(&bad), Err(VmaError::Invalid(m)) if m.contains("MD5")));
        let mut w = VmaWriter::new(Vec::new(), &header()).unwrap();
        w.write_cluster(2, 2, &[1; CLUSTER_SIZE]).unwrap();
        let beyond = w.finish().unwrap();
        assert!(matches!(read_all(&beyond), Err(VmaError::Invalid(m)) if m.contains("cluster 2")));
        assert!(matches!(
            read_all(b"not a vma at all, but long enough?"),
            Err(VmaError::Truncated(_) | VmaError::Invalid(_))
        ));
    }
}
