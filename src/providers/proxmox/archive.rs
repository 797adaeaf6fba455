//! vzdump archives on a dump storage: their names, their compression, and
//! the newest one of each guest in a directory.
//!
//! vzdump names an archive `vzdump-{qemu|lxc}-{VMID}-{YYYY_MM_DD-HH_MM_SS}`
//! followed by `.vma` (a VM) or `.tar` (a container), and `.zst`, `.gz` or
//! `.lzo` when compressed. Its task log lies beside it as `...-HH_MM_SS.log`,
//! its notes as `<archive>.notes`.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The kind of guest an archive holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GuestType {
    /// A virtual machine (`qemu`, a VMA archive).
    Qemu,
    /// A container (`lxc`, a tar archive).
    Lxc,
}

impl GuestType {
    /// The name vzdump and the Proxmox VE API use.
    pub fn as_str(&self) -> &'static str {
        match self {
            GuestType::Qemu => "qemu",
            GuestType::Lxc => "lxc",
        }
    }
}

/// How an archive is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// Not at all.
    None,
    /// zstd (`.zst`, vzdump's default).
    Zstd,
    /// gzip (`.gz`).
    Gzip,
    /// LZO (`.lzo`): no maintained Rust crate reads lzop files; refused
    /// with a clear error.
    Lzo,
}

/// One vzdump archive, by its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveName {
    /// Where it is.
    pub path: PathBuf,
    /// The guest's type.
    pub guest: GuestType,
    /// The guest's id.
    pub vmid: u32,
    /// When vzdump started it, as in the name (`2026_12_03-02_00_00`).
    pub stamp: String,
    /// Its compression.
    pub compression: Compression,
}

impl ArchiveName {
    /// Reads a vzdump archive's file name (none: not one).
    pub fn parse(path: &Path) -> Option<ArchiveName> {
        let name = path.file_name()?.to_str()?;
        let rest = name.strip_prefix("vzdump-")?;
        let (guest, rest) = if let Some(r) = rest.strip_prefix("qemu-") {
            (GuestType::Qemu, r)
        } else {
            (GuestType::Lxc, rest.strip_prefix("lxc-")?)
        };
        let (vmid, rest) = rest.split_once('-')?;
        let vmid: u32 = vmid
            .parse()
            .ok()
            .filter(|_| vmid.bytes().all(|b| b.is_ascii_digit()))?;
        let (stamp, ext) = rest.split_once('.')?;
        let stamp_ok = stamp.len() == 19
            && stamp.bytes().enumerate().all(|(i, b)| match i {
                4 | 7 | 13 | 16 => b == b'_',
                10 => b == b'-',
                _ => b.is_ascii_digit(),
            });
        if !stamp_ok {
            return None;
        }
        let expected = match guest {
            GuestType::Qemu => "vma",
            GuestType::Lxc => "tar",
        };
        let compression = match ext.strip_prefix(expected)? {
            "" => Compression::None,
            ".zst" => Compression::Zstd,
            ".gz" => Compression::Gzip,
            ".lzo" => Compression::Lzo,
            _ => return None,
        };
        Some(ArchiveName {
            path: path.to_path_buf(),
            guest,
            vmid,
            stamp: stamp.to_owned(),
            compression,
        })
    }

    /// The task log vzdump wrote beside the archive, if it is there.
    pub fn log_path(&self) -> Option<PathBuf> {
        let dir = self.path.parent()?;
        let p = dir.join(format!(
            "vzdump-{}-{}-{}.log",
            self.guest.as_str(),
            self.vmid,
            self.stamp
        ));
        p.is_file().then_some(p)
    }

    /// The notes beside the archive, if there are any.
    pub fn notes_path(&self) -> Option<PathBuf> {
        let mut name = self.path.file_name()?.to_os_string();
        name.push(".notes");
        let p = self.path.with_file_name(name);
        p.is_file().then_some(p)
    }

    /// The archive's content, decompressed as it is read.
    pub fn open(&self) -> Result<Box<dyn Read + Send>> {
        let file =
            File::open(&self.path).map_err(|e| Error::io(self.path.display().to_string(), e))?;
        let file = BufReader::with_capacity(1 << 20, file);
        Ok(match self.compression {
            Compression::None => Box::new(file),
            Compression::Zstd => Box::new(
                zstd::stream::read::Decoder::with_buffer(file)
                    .map_err(|e| Error::io(self.path.display().to_string(), e))?,
            ),
            Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(file)),
            Compression::Lzo => {
                return Err(Error::InvalidArgument(format!(
                    "{}: LZO-compressed archives cannot be read (no maintained reader); \
                     set vzdump's compression to zstd or gzip",
                    self.path.display()
                )))
            }
        })
    }
}

/// The archives `spec` names: the file itself, or in a directory the
/// newest archive of each guest (by the time in their names), ordered by
/// guest.
pub fn archives(spec: &Path) -> Result<Vec<ArchiveName>> {
    let meta = std::fs::metadata(spec).map_err(|e| Error::io(spec.display().to_string(), e))?;
    if meta.is_file() {
        return ArchiveName::parse(spec).map(|a| vec![a]).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{} is not named like a vzdump archive (vzdump-qemu-VMID-YYYY_MM_DD-HH_MM_SS.vma[.zst|.gz], \
                 vzdump-lxc-....tar[.zst|.gz])",
                spec.display()
            ))
        });
    }
    let mut newest: std::collections::BTreeMap<(GuestType, u32), ArchiveName> =
        std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(spec).map_err(|e| Error::io(spec.display().to_string(), e))? {
        let entry = entry.map_err(|e| Error::io(spec.display().to_string(), e))?;
        let Some(a) = ArchiveName::parse(&entry.path()) else {
            continue;
        };
        let slot = newest.entry((a.guest, a.vmid)).or_insert_with(|| a.clone());
        if a.stamp > slot.stamp {
            *slot = a;
        }
    }
    if newest.is_empty() {
        return Err(Error::NotFound(format!(
            "no vzdump archive in {}",
            spec.display()
        )));
    }
    Ok(newest.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vzdump_names_are_read_and_others_refused() {
        let a = ArchiveName::parse(Path::new(
            "/mnt/dump/vzdump-qemu-101-2026_12_03-02_00_00.vma.zst",
        ))
        .unwrap();
        assert_eq!(
            (a.guest, a.vmid, a.stamp.as_str(), a.compression),
            (
                GuestType::Qemu,
                101,
                "2026_12_03-02_00_00",
                Compression::Zstd
            )
        );
        let c = ArchiveName::parse(Path::new("vzdump-lxc-200-2026_12_03-02_00_00.tar.gz")).unwrap();
        assert_eq!(
            (c.guest, c.compression),
            (GuestType::Lxc, Compression::Gzip)
        );
        for bad in [
            "vzdump-qemu-101-2026_12_03-02_00_00.tar",
            "vzdump-lxc-200-2026_12_03-02_00_00.vma",
            "vzdump-qemu-x1-2026_12_03-02_00_00.vma",
            "vzdump-qemu-101-2026-12-03-02_00_00.vma",
            "vzdump-qemu-101-2026_12_03-02_00_00.log",
            "vzdump-qemu-101-2026_12_03-02_00_00.vma.zst.notes",
            "backup.vma",
        ] {
            assert_eq!(ArchiveName::parse(Path::new(bad)), None, "{bad}");
        }
    }

    #[test]
    fn a_directory_gives_the_newest_archive_of_each_guest() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "vzdump-qemu-101-2026_12_02-02_00_00.vma.zst",
            "vzdump-qemu-101-2026_12_03-02_00_00.vma.zst",
            "vzdump-qemu-101-2026_12_03-02_00_00.log",
            "vzdump-lxc-200-2026_12_01-02_00_00.tar.zst",
            "unrelated.txt",
        ] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let found: Vec<String> = archives(dir.path())
            .unwrap()
            .iter()
            .map(|a| a.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            found,
            vec![
                "vzdump-qemu-101-2026_12_03-02_00_00.vma.zst",
                "vzdump-lxc-200-2026_12_01-02_00_00.tar.zst"
            ]
        );
    }
}
