//! A VM as a snapshot holds it, its disks converted to qcow2 with
//! `qemu-img` (Debian's `qemu-utils`), for hypervisors that take qcow2.

use std::path::Path;
use std::process::Command;

use crate::error::{Error, Result};

/// Converts every `<device>.raw` in `dir` into `<target>/<device>.qcow2`
/// (each written as `.partial`, then renamed) and copies the
/// configuration files beside them; returns the images' names.
pub fn convert_vm(dir: &Path, target: &Path) -> Result<Vec<String>> {
    let io = |what: &Path| {
        let what = what.display().to_string();
        move |e: std::io::Error| Error::io(what.clone(), e)
    };
    std::fs::create_dir_all(target).map_err(io(target))?;
    let mut raws = Vec::new();
    let mut configs = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !entry.path().is_file() {
            continue;
        }
        match name.strip_suffix(".raw") {
            Some(stem) if !stem.is_empty() => raws.push(stem.to_owned()),
            _ if name.starts_with("qemu-server.") => configs.push(name),
            _ => {}
        }
    }
    raws.sort();
    if raws.is_empty() || !configs.iter().any(|c| c == "qemu-server.conf") {
        return Err(Error::InvalidArgument(
            "the snapshot does not hold a Proxmox VE VM (qemu-server.conf and drive-*.raw at its root)"
                .into(),
        ));
    }
    let mut out = Vec::new();
    for stem in &raws {
        let from = dir.join(format!("{stem}.raw"));
        let name = format!("{stem}.qcow2");
        let to = target.join(&name);
        let partial = target.join(format!("{name}.partial"));
        let result = Command::new("qemu-img")
            .args(["convert", "-f", "raw", "-O", "qcow2"])
            .arg(&from)
            .arg(&partial)
            .output();
        let ok = match result {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => Err(Error::InvalidArgument(format!(
                "qemu-img convert {stem}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::InvalidArgument(
                "qemu-img is not installed (Debian: apt-get install qemu-utils)".into(),
            )),
            Err(e) => Err(Error::io("running qemu-img", e)),
        };
        if let Err(e) = ok {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
        std::fs::rename(&partial, &to).map_err(io(&to))?;
        out.push(name);
    }
    for c in configs {
        let from = dir.join(&c);
        std::fs::copy(&from, target.join(&c)).map_err(io(&from))?;
    }
    Ok(out)
}
