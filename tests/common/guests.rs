//! Proxmox VE guests as vzdump writes them, for the tests: disks with
//! random, zero and sparse regions, VMA archives of them (clusters out of
//! order), container roots.

use std::fs;
use std::io::Write;
use std::path::Path;

use vouch::providers::proxmox::vma::{Device, Header, VmaWriter, CLUSTER_SIZE};
use vouch_chaos::Rng;

/// A disk: its bytes, with random, zero and hole-like (zero) regions.
pub fn disk(size: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut d = vec![0u8; size];
    let mut at = 0;
    while at < size {
        let len = (1 + rng.below(40) as usize) * 4096;
        let end = (at + len).min(size);
        // Half random, a quarter zero, a quarter sparse (a few bytes).
        match rng.below(4) {
            0 | 1 => rng.fill(&mut d[at..end]),
            2 => {}
            _ => {
                let mut i = at;
                while i < end {
                    d[i] = 0xa5;
                    i += 4096 * 3 + 17;
                }
            }
        }
        at = end;
    }
    d
}

/// A VMA archive of `disks` (name, bytes) and a configuration, its
/// clusters written in a shuffled order.
pub fn vma(disks: &[(&str, &[u8])], seed: u64) -> Vec<u8> {
    let header = Header {
        uuid: *b"0123456789abcdef",
        ctime: 1_764_727_200,
        configs: vec![(
            "qemu-server.conf".into(),
            b"boot: order=scsi0\ncores: 2\nmemory: 2048\nscsi0: local-lvm:vm-101-disk-0,size=4G\n"
                .to_vec(),
        )],
        devices: disks
            .iter()
            .enumerate()
            .map(|(i, (name, bytes))| Device {
                id: i as u8 + 1,
                name: (*name).into(),
                size: bytes.len() as u64,
            })
            .collect(),
    };
    let mut w = VmaWriter::new(Vec::new(), &header).unwrap();
    let mut order: Vec<(u8, u32)> = Vec::new();
    for (i, (_, bytes)) in disks.iter().enumerate() {
        for n in 0..bytes.len().div_ceil(CLUSTER_SIZE) {
            order.push((i as u8 + 1, n as u32));
        }
    }
    // Out of order: swap some clusters far apart, as a backup job copies a
    // cluster early when the guest writes to it.
    let mut rng = Rng::new(seed);
    for _ in 0..order.len() / 8 {
        let a = rng.below(order.len() as u64) as usize;
        let b = rng.below(order.len() as u64) as usize;
        order.swap(a, b);
    }
    for (dev, n) in order {
        let bytes = disks[usize::from(dev) - 1].1;
        let start = n as usize * CLUSTER_SIZE;
        let end = (start + CLUSTER_SIZE).min(bytes.len());
        w.write_cluster(dev, n, &bytes[start..end]).unwrap();
    }
    w.finish().unwrap()
}

pub fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 3).unwrap()
}

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// A container's root, as vzdump tars it: the configuration in
/// `etc/vzdump/pct.conf`, files of several owners and modes, a symlink, a
/// hard link, an empty directory.
pub fn container_root(root: &Path) {
    use std::os::unix::fs::{symlink, PermissionsExt};
    for d in ["etc/vzdump", "bin", "home/user", "var/empty"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    fs::write(
        root.join("etc/vzdump/pct.conf"),
        "arch: amd64\nhostname: ct200\nmemory: 512\nrootfs: local-lvm:vm-200-disk-0,size=8G\n",
    )
    .unwrap();
    fs::write(root.join("etc/hostname"), "ct200\n").unwrap();
    // A /bin/true that runs inside the root (the restore test runs it
    // under chroot): this host's, with the libraries it needs.
    copy_with_libraries("/bin/true", root);
    fs::write(
        root.join("home/user/notes.txt"),
        super::random_bytes(70_000, 51),
    )
    .unwrap();
    fs::set_permissions(
        root.join("home/user/notes.txt"),
        fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    symlink("../bin/true", root.join("etc/true-link")).unwrap();
    fs::hard_link(root.join("etc/hostname"), root.join("etc/hostname.bak")).unwrap();
}

/// `root` as vzdump tars a container (numeric owners, relative paths).
pub fn tar_of(root: &Path) -> Vec<u8> {
    let out = std::process::Command::new("tar")
        .args(["--numeric-owner", "-cf", "-", "-C"])
        .arg(root)
        .arg(".")
        .output()
        .expect("tar");
    assert!(
        out.status.success(),
        "tar: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The configuration of a service test that ticks every second, with
/// sources allowed below `dir`; its path.
pub fn service_config(dir: &Path) -> std::path::PathBuf {
    let config = dir.join("vouch.toml");
    fs::write(
        &config,
        format!(
            "{}[scheduler]\ntick = \"1s\"\nmax_jitter = \"0s\"\n",
            super::served::sources_allow(dir)
        ),
    )
    .unwrap();
    config
}

/// Copies the program `bin` and the libraries `ldd` names for it into
/// `root`, at their paths.
pub fn copy_with_libraries(bin: &str, root: &Path) {
    let out = std::process::Command::new("ldd").arg(bin).output().unwrap();
    let mut files = vec![std::path::PathBuf::from(bin)];
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(p) = line.split_whitespace().find(|w| w.starts_with('/')) {
            files.push(std::path::PathBuf::from(p));
        }
    }
    for f in files {
        let real = fs::canonicalize(&f).unwrap();
        let to = root.join(f.strip_prefix("/").unwrap());
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        let _ = fs::remove_file(&to);
        fs::copy(&real, &to).unwrap();
    }
}

/// `vma-extract` of `dissect.archive` (PyPI), an independent VMA reader;
/// required under CI.
pub fn vma_extract() -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("vma-extract"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "vma-extract (pip install dissect.archive) is missing under CI"
        );
        eprintln!("vma-extract not installed: the comparison with dissect.archive is skipped");
    }
    found
}
