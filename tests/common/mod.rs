//! Shared helpers of the end-to-end tests: run the real `vouch` binary on
//! real files in temporary directories.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub mod guests;
pub mod ransom;
pub mod served;

pub const PASSWORD: &str = "correct horse battery staple";

/// A scratch area with a repository path.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub repo: PathBuf,
}

impl Env {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = dir.path().join("repo");
        Env { dir, repo }
    }

    /// A scratch area whose repository is a fresh prefix of the S3 test
    /// bucket (`VOUCH_S3_ENDPOINT` and the AWS keys, as `.ci/s3-server.sh
    /// start` prints them), or `None` outside CI without a store (CI must
    /// have one).
    pub fn s3() -> Option<Self> {
        let endpoint = s3_endpoint()?;
        let dir = tempfile::tempdir().expect("tempdir");
        let prefix = hex_id();
        let repo = PathBuf::from(format!("s3:{endpoint}/vouch-tests/e2e/{prefix}"));
        Some(Env { dir, repo })
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// A `vouch` command against this repository with the test passphrase.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_vouch"));
        c.env_remove("VOUCH_PASSWORD_FILE")
            .env_remove("VOUCH_PASSWORD_COMMAND")
            .env("VOUCH_REPOSITORY", &self.repo)
            // Session journals stay in the test's directory.
            .env("VOUCH_CACHE_DIR", self.dir.path().join("cache"))
            .env("VOUCH_PASSWORD", PASSWORD)
            // A stalled store is given up on (and retried) quickly.
            .env("VOUCH_S3_TIMEOUT", "2s")
            .stdin(std::process::Stdio::null());
        c
    }

    /// Runs with arguments; returns the output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("running vouch")
    }

    /// Runs and asserts the exit code; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        self.expect(args, 0)
    }

    /// Runs and asserts the exit code; returns stderr.
    pub fn expect_stderr(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "vouch {args:?}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// The ids of the snapshots, oldest first.
    pub fn snapshot_ids(&self) -> Vec<String> {
        let v: serde_json::Value =
            serde_json::from_str(self.ok(&["snapshots", "--json"]).trim()).expect("snapshots json");
        v.as_array()
            .expect("a list")
            .iter()
            .map(|s| s["id"].as_str().expect("an id").to_string())
            .collect()
    }

    pub fn expect(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "vouch {args:?}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates the repository with cheap KDF settings and small chunks.
    pub fn init(&self) {
        self.ok(&[
            "init",
            "--insecure-kdf",
            "--kdf-memory-kib",
            "1024",
            "--kdf-iterations",
            "1",
            "--chunk-min-kib",
            "16",
            "--chunk-avg-kib",
            "64",
            "--chunk-max-kib",
            "256",
            "--pack-size-mib",
            "1",
        ]);
    }

    /// Backs up and returns the snapshot id.
    pub fn backup(&self, paths: &[&Path]) -> String {
        let mut args = vec!["backup".to_string(), "--json".to_string()];
        args.extend(paths.iter().map(|p| p.display().to_string()));
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = self.ok(&a);
        summary_of(&out)["snapshot"]
            .as_str()
            .expect("snapshot id")
            .to_string()
    }
}

/// Runs `cmd` (a `vouch` command with extra environment), asserts that it
/// succeeded (naming it and its stderr if not) and returns its stdout.
pub fn stdout_of(cmd: &mut std::process::Command) -> String {
    let out = cmd.output().expect("running vouch");
    assert!(
        out.status.success(),
        "{cmd:?}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The last JSON line of an output.
pub fn summary_of(out: &str) -> serde_json::Value {
    let line = out
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("{}");
    serde_json::from_str(line).expect("json line")
}

/// Deterministic pseudo-random bytes.
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; n];
    vouch_chaos::Rng::new(seed).fill(&mut v);
    v
}

/// Creates `dir` with `files` files `f0, f1, ...` of `size` random bytes.
pub fn random_files(dir: &Path, files: u64, size: usize, seed: u64) {
    fs::create_dir_all(dir).unwrap();
    for i in 0..files {
        fs::write(dir.join(format!("f{i}")), random_bytes(size, seed + i)).unwrap();
    }
}

/// What a tree looks like: path -> (kind, mode, size, mtime, content hash, link target, inode group).
pub fn describe(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut inodes: BTreeMap<(u64, u64), String> = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = fs::read_dir(&dir).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel == ".vouch-restore-in-progress" {
                continue;
            }
            let m = fs::symlink_metadata(&p).unwrap();
            let t = m.file_type();
            let desc = if t.is_dir() {
                stack.push(p.clone());
                format!("dir mode={:o} mtime={}", m.mode() & 0o7777, m.mtime())
            } else if t.is_symlink() {
                format!("symlink -> {}", fs::read_link(&p).unwrap().display())
            } else if t.is_file() {
                let data = fs::read(&p).unwrap();
                let link = if m.nlink() > 1 {
                    let first = inodes
                        .entry((m.dev(), m.ino()))
                        .or_insert_with(|| rel.clone())
                        .clone();
                    format!(" link-group={first}")
                } else {
                    String::new()
                };
                format!(
                    "file mode={:o} size={} mtime={}.{} hash={}{link}",
                    m.mode() & 0o7777,
                    m.len(),
                    m.mtime(),
                    m.mtime_nsec(),
                    blake3::hash(&data).to_hex()
                )
            } else if t.is_fifo() {
                format!("fifo mode={:o}", m.mode() & 0o7777)
            } else if t.is_char_device() || t.is_block_device() {
                format!(
                    "device mode={:o} rdev={} uid={}",
                    m.mode(),
                    m.rdev(),
                    m.uid()
                )
            } else {
                "other".to_string()
            };
            out.insert(rel, desc);
        }
    }
    out
}

pub fn is_root() -> bool {
    vouch_chaos::is_root()
}

/// Bytes and number of the files one level of directories below `dir`
/// (a repository's `data/`: its pack files).
pub fn stored_bytes(dir: &Path) -> (u64, usize) {
    let mut bytes = 0;
    let mut n = 0;
    for sub in fs::read_dir(dir).into_iter().flatten().flatten() {
        for f in fs::read_dir(sub.path()).into_iter().flatten().flatten() {
            if let Ok(m) = f.metadata() {
                bytes += m.len();
                n += 1;
            }
        }
    }
    (bytes, n)
}

/// The S3 endpoint of the tests, or `None` (with a note) outside CI.
pub fn s3_endpoint() -> Option<String> {
    match std::env::var("VOUCH_S3_ENDPOINT") {
        Ok(e) if !e.is_empty() => Some(e),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run the S3 tests: start the store with `eval \"$(.ci/s3-server.sh start)\"`"
            );
            eprintln!("VOUCH_S3_ENDPOINT is not set: S3 test skipped (see .ci/s3-server.sh)");
            None
        }
    }
}

/// 12 random hex digits (a fresh prefix, a unique name).
pub fn hex_id() -> String {
    let mut b = [0u8; 6];
    vouch_chaos::Rng::new(vouch_chaos::Rng::seed_from_clock()).fill(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// An ext4 file system on a loop device (root only), unmounted on drop;
/// `mkfs_args` are added to `mkfs.ext4` (`-I 128`: whole-second
/// timestamps).
pub struct LoopExt4 {
    pub mnt: PathBuf,
}

impl LoopExt4 {
    pub fn mount(dir: &Path, mkfs_args: &[&str]) -> Result<Self, String> {
        let img = dir.join("ext4.img");
        let mnt = dir.join("mnt");
        fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
        fs::File::create(&img)
            .and_then(|f| f.set_len(64 << 20))
            .map_err(|e| e.to_string())?;
        let run = |cmd: &mut std::process::Command| -> Result<(), String> {
            let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr)))
            }
        };
        run(std::process::Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .args(mkfs_args)
            .arg(&img))?;
        run(std::process::Command::new("mount")
            .args(["-o", "loop"])
            .arg(&img)
            .arg(&mnt))?;
        Ok(Self { mnt })
    }
}

impl Drop for LoopExt4 {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.mnt).status();
    }
}
