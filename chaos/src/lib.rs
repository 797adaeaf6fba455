//! The adversary: primitives that break things on purpose, used by the
//! crash, corruption and resource-exhaustion tests of the `vouch` package.
//!
//! Everything here acts on real processes, files and sockets: signals to a
//! child, bit flips and truncation in files, a size-limited tmpfs, and a
//! TCP proxy that injects network faults ([`proxy`]).
//! Randomness comes from a seeded generator so that every failure can be
//! replayed with the seed it prints.

pub mod loopfs;
pub mod powercut;
pub mod proxy;
pub mod runner;
pub mod s3_faults;

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Errors of the harness.
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// An I/O error with what was being done.
    #[error("{0}: {1}")]
    Io(String, #[source] io::Error),
    /// Needs root (mounting, dropping caches).
    #[error("needs root: {0}")]
    NotRoot(String),
}

/// Result alias.
pub type Result<T> = std::result::Result<T, ChaosError>;

/// A small, seeded, reproducible generator (SplitMix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// A seed from the clock (print it, so a failure can be replayed).
    pub fn seed_from_clock() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(42)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Fills a buffer.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// Flips one bit of a file in place.
pub fn flip_bit(path: &Path, offset: u64, bit: u8) -> Result<()> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| ChaosError::Io(format!("opening {}", path.display()), e))?;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset)
        .map_err(|e| ChaosError::Io(format!("reading {}", path.display()), e))?;
    b[0] ^= 1 << (bit % 8);
    f.write_all_at(&b, offset)
        .map_err(|e| ChaosError::Io(format!("writing {}", path.display()), e))
}

/// Flips a random bit; returns its byte offset and bit.
pub fn flip_random_bit(path: &Path, rng: &mut Rng) -> Result<(u64, u8)> {
    let len = std::fs::metadata(path)
        .map_err(|e| ChaosError::Io(format!("stat {}", path.display()), e))?
        .len();
    let offset = rng.below(len);
    let bit = rng.below(8) as u8;
    flip_bit(path, offset, bit)?;
    Ok((offset, bit))
}

/// Cuts a file to `len` bytes.
pub fn truncate(path: &Path, len: u64) -> Result<()> {
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(len))
        .map_err(|e| ChaosError::Io(format!("truncating {}", path.display()), e))
}

/// All regular files below `dir`, sorted.
pub fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t) if t.is_file() => out.push(p),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

fn signal(pid: u32, sig: libc::c_int) -> Result<()> {
    // SAFETY: kill only sends a signal.
    if unsafe { libc::kill(pid as libc::pid_t, sig) } != 0 {
        return Err(ChaosError::Io(
            format!("signal {sig} to {pid}"),
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// SIGKILL.
pub fn kill(child: &Child) -> Result<()> {
    signal(child.id(), libc::SIGKILL)
}

/// SIGINT.
pub fn interrupt(child: &Child) -> Result<()> {
    signal(child.id(), libc::SIGINT)
}

/// SIGSTOP (pause).
pub fn pause(child: &Child) -> Result<()> {
    signal(child.id(), libc::SIGSTOP)
}

/// SIGCONT (resume).
pub fn resume(child: &Child) -> Result<()> {
    signal(child.id(), libc::SIGCONT)
}

/// How a killed run ended.
#[derive(Debug, PartialEq, Eq)]
pub enum KillOutcome {
    /// Finished before the kill with this exit code.
    Finished(i32),
    /// Killed.
    Killed,
}

/// Runs `cmd`, and SIGKILLs it after `delay` unless it finished before.
pub fn run_and_kill(cmd: &mut Command, delay: Duration) -> Result<KillOutcome> {
    let mut child = cmd
        .spawn()
        .map_err(|e| ChaosError::Io("spawning".into(), e))?;
    let deadline = Instant::now() + delay;
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| ChaosError::Io("waiting".into(), e))?
        {
            return Ok(KillOutcome::Finished(status.code().unwrap_or(-1)));
        }
        if Instant::now() >= deadline {
            let _ = kill(&child);
            let _ = child.wait();
            return Ok(KillOutcome::Killed);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether the process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A size-limited tmpfs, unmounted on drop (root only).
pub struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size_bytes` at `path` (created if missing).
    pub fn mount(path: &Path, size_bytes: u64) -> Result<Self> {
        if !is_root() {
            return Err(ChaosError::NotRoot("mounting a tmpfs".into()));
        }
        std::fs::create_dir_all(path)
            .map_err(|e| ChaosError::Io(format!("creating {}", path.display()), e))?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_bytes}"), "tmpfs"])
            .arg(path)
            .status()
            .map_err(|e| ChaosError::Io("running mount".into(), e))?;
        if !status.success() {
            return Err(ChaosError::Io(
                "mount".into(),
                io::Error::other(format!("mount exited with {status}")),
            ));
        }
        Ok(Self {
            path: path.to_path_buf(),
        })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_reproducible() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        assert_eq!(a.next_u64(), b.next_u64());
        assert!((0..1000).all(|_| a.below(10) < 10));
    }

    #[test]
    fn flip_changes_exactly_one_bit_and_truncate_cuts() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, [0u8; 64]).unwrap();
        let (off, bit) = flip_random_bit(&p, &mut Rng::new(1)).unwrap();
        let data = std::fs::read(&p).unwrap();
        assert_eq!(data.iter().map(|b| b.count_ones()).sum::<u32>(), 1);
        assert_eq!(data[off as usize], 1 << bit);
        truncate(&p, 10).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 10);
        assert_eq!(files_below(dir.path()), vec![p]);
    }

    #[test]
    fn kill_stops_a_long_process() {
        let out = run_and_kill(Command::new("sleep").arg("30"), Duration::from_millis(50)).unwrap();
        assert_eq!(out, KillOutcome::Killed);
        let out = run_and_kill(&mut Command::new("true"), Duration::from_secs(30)).unwrap();
        assert_eq!(out, KillOutcome::Finished(0));
    }
}
