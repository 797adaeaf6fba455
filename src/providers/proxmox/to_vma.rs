//! A VM as a snapshot holds it (configuration files and `<device>.raw`
//! images) written back as a VMA archive that `qmrestore` and `vma extract`
//! take. Zero blocks are left out of the archive, as vzdump does.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::vma::{Device, Header, VmaWriter, CLUSTER_SIZE};
use crate::error::{Error, Result};

/// The configuration files a VMA archive carries, in vzdump's order.
const CONFIGS: [&str; 2] = ["qemu-server.conf", "qemu-server.fw"];

/// What was written.
#[derive(Clone, Debug, serde::Serialize)]
pub struct VmaWritten {
    /// The disks, in the archive's order (`drive-scsi0`, ...).
    pub devices: Vec<String>,
    /// Their sizes.
    pub bytes: u64,
    /// Bytes of the archive.
    pub archive_bytes: u64,
}

/// Writes the VM held in `dir` as a VMA archive into `out`.
pub fn write_vma(dir: &Path, out: File) -> Result<VmaWritten> {
    let io = |what: &Path| {
        let what = what.display().to_string();
        move |e: std::io::Error| Error::io(what.clone(), e)
    };
    let mut configs = Vec::new();
    for name in CONFIGS {
        let path = dir.join(name);
        if path.is_file() {
            configs.push((name.to_owned(), std::fs::read(&path).map_err(io(&path))?));
        }
    }
    let mut images: Vec<(String, std::path::PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".raw") {
            if path.is_file() && !stem.is_empty() {
                images.push((stem.to_owned(), path));
            }
        }
    }
    images.sort();
    if configs.is_empty() || images.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "the snapshot does not hold a Proxmox VE VM (qemu-server.conf and drive-*.raw at its root): \
             {} configuration files, {} disk images",
            configs.len(),
            images.len()
        )));
    }
    if images.len() > 255 {
        return Err(Error::InvalidArgument(format!(
            "{} disk images: a VMA archive holds at most 255",
            images.len()
        )));
    }
    let mut devices = Vec::new();
    let mut files = Vec::new();
    for (i, (name, path)) in images.iter().enumerate() {
        let file = File::open(path).map_err(io(path))?;
        let size = file.metadata().map_err(io(path))?.len();
        devices.push(Device {
            id: i as u8 + 1,
            name: name.clone(),
            size,
        });
        files.push(file);
    }
    let header = Header {
        uuid: crate::crypto::random_array::<16>(),
        ctime: crate::util::now_ns() / 1_000_000_000,
        configs,
        devices: devices.clone(),
    };
    let target = Path::new("the VMA archive");
    let mut w =
        VmaWriter::new(BufWriter::with_capacity(4 << 20, out), &header).map_err(io(target))?;
    let mut buf = vec![0u8; CLUSTER_SIZE];
    for (d, file) in devices.iter().zip(&files) {
        for n in 0..d.clusters() {
            crate::util::check_interrupted()?;
            let at = n * CLUSTER_SIZE as u64;
            let len = (d.size - at).min(CLUSTER_SIZE as u64) as usize;
            file.read_exact_at(&mut buf[..len], at)
                .map_err(io(Path::new(&d.name)))?;
            let number = u32::try_from(n).map_err(|_| {
                Error::InvalidArgument(format!("{} is too large for a VMA archive", d.name))
            })?;
            w.write_cluster(d.id, number, &buf[..len])
                .map_err(io(target))?;
        }
    }
    let mut out = w.finish().map_err(io(target))?;
    out.flush().map_err(io(target))?;
    let file = out
        .into_inner()
        .map_err(|e| Error::io("the VMA archive", e.into_error()))?;
    file.sync_all().map_err(io(target))?;
    let archive_bytes = file.metadata().map_err(io(target))?.len();
    Ok(VmaWritten {
        devices: devices.iter().map(|d| d.name.clone()).collect(),
        bytes: devices.iter().map(|d| d.size).sum(),
        archive_bytes,
    })
}
