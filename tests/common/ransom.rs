//! What the ransomware heuristic is measured on: a simulated attack (files
//! encrypted with AES-256-GCM under a key nobody keeps, renamed, notes
//! dropped) and benign churn that must not look like one (an upgrade of a
//! source tree, a package upgrade of `/usr`, a compiler's build tree, log
//! rotation, new photos and archives).

#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};

/// The note the simulated attack drops.
pub const NOTE: &str = "HOW_TO_DECRYPT_FILES.txt";

/// Every regular file under `root`, sorted.
pub fn files_of(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).expect("read_dir").flatten() {
            let ft = e.file_type().expect("file type");
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// A deterministic choice of `permille`/1000 of `files` (at least one).
pub fn choose(files: &[PathBuf], permille: u64, seed: u64) -> Vec<PathBuf> {
    let want = ((files.len() as u64 * permille).div_ceil(1000)).max(1) as usize;
    let mut keyed: Vec<(u64, &PathBuf)> = files
        .iter()
        .map(|p| {
            let h = blake3::hash(format!("{seed}:{}", p.display()).as_bytes());
            let mut k = [0u8; 8];
            k.copy_from_slice(&h.as_bytes()[..8]);
            (u64::from_le_bytes(k), p)
        })
        .collect();
    keyed.sort();
    keyed
        .into_iter()
        .take(want)
        .map(|(_, p)| p.clone())
        .collect()
}

/// How the simulated attack goes.
#[derive(Clone, Copy, Debug)]
pub struct Attack {
    /// Share of the files it encrypts, in permille.
    pub permille: u64,
    /// The extension it appends to what it encrypted, if any.
    pub rename_to: Option<&'static str>,
    /// Whether that extension replaces the file's own (`a.rs` -> `a.x`)
    /// instead of following it (`a.rs.x`).
    pub replace_extension: bool,
    /// Whether it drops a note in every directory it touched.
    pub notes: bool,
    /// Whether it encrypts at all (false: only notes).
    pub encrypt: bool,
}

/// Runs `attack` on the tree at `root`; returns how many files it
/// encrypted.
pub fn attack(root: &Path, a: Attack) -> usize {
    let cipher = Aes256Gcm::new_from_slice(&[0x5a; 32]).expect("key");
    let chosen = choose(&files_of(root), a.permille, 7);
    let mut dirs: Vec<PathBuf> = Vec::new();
    for (i, path) in chosen.iter().enumerate() {
        if let Some(d) = path.parent() {
            if !dirs.iter().any(|x| x == d) {
                dirs.push(d.to_path_buf());
            }
        }
        if !a.encrypt {
            continue;
        }
        let plain = fs::read(path).expect("read");
        let mut nonce = [0u8; 12];
        nonce[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let sealed = cipher
            .encrypt(&Nonce::from(nonce), plain.as_slice())
            .expect("encrypt");
        let target = match a.rename_to {
            Some(ext) => {
                let target = if a.replace_extension {
                    path.with_extension(ext)
                } else {
                    let mut name = path.file_name().expect("name").to_os_string();
                    name.push(format!(".{ext}"));
                    path.with_file_name(name)
                };
                fs::remove_file(path).expect("remove");
                target
            }
            None => path.clone(),
        };
        let mut f = fs::File::create(&target).expect("create");
        f.write_all(&nonce).expect("write");
        f.write_all(&sealed).expect("write");
    }
    if a.notes {
        for d in &dirs {
            fs::write(
                d.join(NOTE),
                "Your files are encrypted. Send 1 BTC to get the key.\n",
            )
            .expect("note");
        }
    }
    if a.encrypt {
        chosen.len()
    } else {
        0
    }
}

/// Copies the project's own sources (Rust, docs, configuration: a real,
/// compressible tree of a few hundred files) to `to`.
pub fn project_tree(to: &Path) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for part in [
        "src",
        "events/src",
        "actors/src",
        "web/src",
        "docs",
        "tests",
    ] {
        for f in files_of(&root.join(part)) {
            let rel = f.strip_prefix(root).expect("under the root");
            if rel.components().any(|c| c.as_os_str() == "target") {
                continue;
            }
            let dest = to.join(rel);
            fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
            fs::copy(&f, &dest).expect("copy");
            n += 1;
        }
    }
    n
}

/// An upgrade of a source tree (as linux-6.1 replaced by a later
/// release): most files edited, some deleted, new ones added, some moved,
/// all of it still text.
pub fn upgrade_sources(root: &Path) {
    let files = files_of(root);
    for (i, f) in files.iter().enumerate() {
        match i % 10 {
            0 => fs::remove_file(f).expect("remove"),
            1..=6 => {
                let mut text = fs::read_to_string(f).unwrap_or_default();
                text = text.replace("the", "a");
                text.push_str(&format!("\n// upgraded in release {i}\n"));
                fs::write(f, text).expect("edit");
            }
            7 => {
                let moved = f.with_file_name(format!(
                    "moved_{}",
                    f.file_name().expect("name").to_string_lossy()
                ));
                fs::rename(f, moved).expect("move");
            }
            _ => {}
        }
        if i % 9 == 0 {
            let text = fs::read_to_string(f).unwrap_or_else(|_| "fn new() {}\n".repeat(80));
            fs::write(
                f.with_file_name(format!("new_{i}.rs")),
                text + "// new file\n",
            )
            .expect("add");
        }
    }
}

/// Real ELF files and compressed changelogs of this machine's `/usr`, as a
/// package set: up to `n` of each.
pub fn usr_tree(to: &Path, n: usize) -> usize {
    let mut count = 0;
    let mut elf: Vec<PathBuf> = files_of(Path::new("/usr/bin"))
        .into_iter()
        .filter(|p| fs::metadata(p).map(|m| m.len() < 4 << 20).unwrap_or(false))
        .collect();
    elf.truncate(n);
    for (i, f) in elf.iter().enumerate() {
        let dest = to.join("bin").join(f.file_name().expect("name"));
        fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
        if fs::copy(f, &dest).is_ok() {
            count += 1;
        }
        let lib = to.join("lib").join(format!("lib{i}.so.1"));
        fs::create_dir_all(lib.parent().expect("parent")).expect("mkdir");
        if fs::copy(f, &lib).is_ok() {
            count += 1;
        }
    }
    let docs: Vec<PathBuf> = files_of(Path::new("/usr/share/doc"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "gz"))
        .take(n)
        .collect();
    for f in &docs {
        let rel = f.strip_prefix("/usr").expect("under /usr");
        let dest = to.join(rel);
        fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
        if fs::copy(f, &dest).is_ok() {
            count += 1;
        }
    }
    count
}

/// A package upgrade of that `/usr`: every binary and library replaced by
/// a new build (another real ELF file's content), changelogs replaced by
/// newer compressed ones, configuration kept aside as `.dpkg-old`.
pub fn upgrade_usr(root: &Path) {
    for sub in ["bin", "lib"] {
        let files = files_of(&root.join(sub));
        let contents: Vec<Vec<u8>> = files.iter().map(|f| fs::read(f).expect("read")).collect();
        for (i, f) in files.iter().enumerate() {
            let next = &contents[(i + 1) % contents.len()];
            fs::write(f, next).expect("rewrite");
        }
    }
    let docs: Vec<PathBuf> = files_of(&root.join("share"));
    if docs.len() > 1 {
        let first = fs::read(&docs[0]).expect("read");
        for w in docs.windows(2) {
            fs::copy(&w[1], &w[0]).expect("replace");
        }
        fs::write(docs.last().expect("one"), first).expect("replace");
    }
    fs::create_dir_all(root.join("etc")).expect("etc");
    for i in 0..5 {
        fs::write(
            root.join(format!("etc/conf{i}")),
            "key = value\n".repeat(200),
        )
        .expect("conf");
        fs::copy(
            root.join(format!("etc/conf{i}")),
            root.join(format!("etc/conf{i}.dpkg-old")),
        )
        .expect("dpkg-old");
    }
}

/// Bytes that compress like compiler output (tables, padding, code).
pub fn object_like(n: usize, seed: u64) -> Vec<u8> {
    let noise = super::random_bytes(n / 4 + 1, seed);
    let mut v = Vec::with_capacity(n);
    let mut i = 0;
    while v.len() < n {
        v.extend_from_slice(b"\x48\x89\xe5\x48\x83\xec\x10\x89\x7d\xfc_ZN5vouch6backup");
        v.extend_from_slice(&noise[i % noise.len()..(i % noise.len() + 8).min(noise.len())]);
        v.extend_from_slice(&[0u8; 16]);
        i += 8;
    }
    v.truncate(n);
    v
}

/// A compiler's build tree (`target/`): objects, libraries and dep files
/// named by hash.
pub fn build_tree(root: &Path, generation: u64) {
    let deps = root.join("target/debug/deps");
    let inc = root.join("target/debug/incremental");
    fs::create_dir_all(&deps).expect("deps");
    fs::create_dir_all(&inc).expect("incremental");
    for i in 0..60u64 {
        let hash = format!("{:016x}", (i + 1) * 0x9e37_79b9 + generation * 0x1234_5678);
        fs::write(
            deps.join(format!("libcrate{i}-{hash}.rlib")),
            object_like(20_000 + (i as usize * 1000), generation * 1000 + i),
        )
        .expect("rlib");
        fs::write(
            deps.join(format!("libcrate{i}-{hash}.rmeta")),
            object_like(4_000, generation * 2000 + i),
        )
        .expect("rmeta");
        fs::write(
            deps.join(format!("crate{i}-{hash}.d")),
            format!("deps/crate{i}.rs: src/lib.rs src/mod{i}.rs\n").repeat(40),
        )
        .expect("d");
        fs::write(
            inc.join(format!("crate{i}-query-cache.bin")),
            object_like(30_000, generation * 3000 + i),
        )
        .expect("cache");
    }
}

/// Rebuilds that tree: the old hashed files go, new ones come, caches
/// are rewritten.
pub fn rebuild(root: &Path, generation: u64) {
    fs::remove_dir_all(root.join("target/debug/deps")).expect("clean deps");
    build_tree(root, generation);
}

/// A `/var/log` of `n` services, each with its current log, `.1` and
/// `.2.gz` ... `.4.gz`, and dated logs of another service.
pub fn log_tree(root: &Path, n: usize) {
    fs::create_dir_all(root).expect("log dir");
    for s in 0..n {
        let name = format!("service{s}.log");
        fs::write(root.join(&name), log_text(s, 0)).expect("log");
        fs::write(root.join(format!("{name}.1")), log_text(s, 1)).expect("log.1");
        for k in 2..=4 {
            fs::write(root.join(format!("{name}.{k}.gz")), gzip(&log_text(s, k))).expect("gz");
        }
        fs::write(
            root.join(format!("app{s}.log-2026120{}", 1)),
            log_text(s, 9),
        )
        .expect("dated");
    }
}

fn log_text(service: usize, day: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for line in 0..400 {
        v.extend_from_slice(
            format!("Dec {day:2} 03:{:02}:{:02} host service{service}[{}]: request {line} served in {} ms\n", line % 60, (line * 7) % 60, 1000 + line, (line * 13) % 97).as_bytes(),
        );
    }
    v
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("gzip");
    e.finish().expect("gzip")
}

/// One night of logrotate (`compress`, `delaycompress`, `rotate 4`, and
/// `dateext` for the `app` logs): `.4.gz` dropped, the others shifted,
/// `.1` compressed into `.2.gz`, the current log moved to `.1`, a new one
/// started; a dated log compressed and a new dated log started.
pub fn rotate_logs(root: &Path, n: usize) {
    for s in 0..n {
        let name = format!("service{s}.log");
        let p = |suffix: &str| root.join(format!("{name}{suffix}"));
        fs::remove_file(p(".4.gz")).expect("drop oldest");
        fs::rename(p(".3.gz"), p(".4.gz")).expect("shift");
        fs::rename(p(".2.gz"), p(".3.gz")).expect("shift");
        let one = fs::read(p(".1")).expect("read .1");
        fs::write(p(".2.gz"), gzip(&one)).expect("compress");
        fs::rename(p(""), p(".1")).expect("rotate");
        fs::write(p(""), log_text(s, 5)).expect("new log");
        let dated = root.join(format!("app{s}.log-20261201"));
        let text = fs::read(&dated).expect("dated");
        fs::write(root.join(format!("app{s}.log-20261201.gz")), gzip(&text)).expect("gz");
        fs::remove_file(&dated).expect("remove dated");
        fs::write(root.join(format!("app{s}.log-20261202")), log_text(s, 10)).expect("new dated");
    }
}

/// New photos and archives (incompressible, but new: nothing rewritten)
/// in directories that existed and in a new one.
pub fn add_photos(root: &Path, n: usize) {
    let dirs: Vec<PathBuf> = {
        let mut d: Vec<PathBuf> = files_of(root)
            .iter()
            .filter_map(|f| f.parent().map(Path::to_path_buf))
            .collect();
        d.dedup();
        d.push(root.join("Pictures/2026-12"));
        d
    };
    for i in 0..n {
        let dir = &dirs[i % dirs.len()];
        fs::create_dir_all(dir).expect("mkdir");
        let ext = ["jpg", "zip", "tar.xz", "mp4"][i % 4];
        fs::write(
            dir.join(format!("IMG_{i:04}.{ext}")),
            super::random_bytes(8_000 + i * 100, 900 + i as u64),
        )
        .expect("photo");
    }
}
