//! Measuring a child process: `wait4` for wall time, CPU, peak RSS and
//! blocks read; `/proc/<pid>/io` sampled for bytes read; caches; memory limits.

use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{BenchError, Ctx, Result};

/// Cache state before a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheState {
    /// Caches dropped just before.
    Cold,
    /// Not dropped.
    Warm,
}

/// `sync`, then drop the page, dentry and inode caches if allowed.
pub fn drop_caches() -> CacheState {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    match fs::write("/proc/sys/vm/drop_caches", "3\n") {
        Ok(()) => CacheState::Cold,
        Err(_) => CacheState::Warm,
    }
}

/// What one process used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Usage {
    /// Wall time in seconds.
    pub wall_s: f64,
    /// User CPU seconds.
    pub user_s: f64,
    /// System CPU seconds.
    pub sys_s: f64,
    /// Peak resident set in KiB.
    pub max_rss_kib: u64,
    /// Bytes read from block devices (`ru_inblock` × 512).
    pub disk_read_bytes: u64,
    /// Bytes read through read-like system calls (`rchar`, sampled; a lower bound).
    pub read_bytes: u64,
    /// Exit code (or 128 + signal).
    pub exit_code: i32,
}

/// A memory limiter that works on this machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryLimiter {
    /// `systemd-run --scope -p MemoryMax=`.
    SystemdRun,
    /// A cgroup v2 directory made by hand under this root.
    CgroupV2(PathBuf),
    /// A cgroup v1 memory directory made by hand under this root.
    CgroupV1(PathBuf),
}

impl MemoryLimiter {
    /// Finds one that works, trying systemd-run first. `None`: none works.
    pub fn detect() -> Option<(Self, Vec<String>)> {
        let mut tried = Vec::new();
        let ok = Command::new("systemd-run")
            .args(["--scope", "-q", "-p", "MemoryMax=64M", "--", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if ok {
            return Some((MemoryLimiter::SystemdRun, tried));
        }
        tried.push("systemd-run --scope: not available (no systemd as init?)".into());
        for base in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
            let controllers =
                fs::read_to_string(format!("{base}/cgroup.controllers")).unwrap_or_default();
            if controllers.split_whitespace().any(|c| c == "memory") {
                let _ = fs::write(format!("{base}/cgroup.subtree_control"), "+memory");
                let probe =
                    Path::new(base).join(format!("vouch-bench-probe-{}", std::process::id()));
                let works = fs::create_dir(&probe).is_ok()
                    && fs::write(probe.join("memory.max"), "67108864").is_ok();
                let _ = fs::remove_dir(&probe);
                if works {
                    return Some((MemoryLimiter::CgroupV2(base.into()), tried));
                }
            }
            tried.push(format!("cgroup v2 at {base}: no usable memory controller"));
        }
        let v1 = Path::new("/sys/fs/cgroup/memory");
        if v1.join("memory.limit_in_bytes").exists() {
            let probe = v1.join(format!("vouch-bench-probe-{}", std::process::id()));
            let works = fs::create_dir(&probe).is_ok()
                && fs::write(probe.join("memory.limit_in_bytes"), "67108864").is_ok();
            let _ = fs::remove_dir(&probe);
            if works {
                return Some((MemoryLimiter::CgroupV1(v1.into()), tried));
            }
        }
        tried.push("cgroup v1 memory controller: not writable".into());
        None
    }

    /// In words, for the report.
    pub fn describe(&self, limit_mib: u64) -> String {
        match self {
            MemoryLimiter::SystemdRun => {
                format!("systemd-run --scope -p MemoryMax={limit_mib}M")
            }
            MemoryLimiter::CgroupV2(b) => format!(
                "cgroup v2 made by hand under {} (memory.max = {limit_mib} MiB, memory.swap.max = 0)",
                b.display()
            ),
            MemoryLimiter::CgroupV1(b) => format!(
                "cgroup v1 made by hand under {} (memory.limit_in_bytes = {limit_mib} MiB, page cache included)",
                b.display()
            ),
        }
    }
}

/// A memory-limited group for one process.
pub(crate) struct LimitedGroup {
    dir: Option<PathBuf>,
    v2: bool,
}

/// What the memory group saw.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MemoryOutcome {
    /// How the limit was applied.
    pub limiter: String,
    /// The limit in MiB.
    pub limit_mib: u64,
    /// Peak usage of the group in MiB (page cache included), if known.
    pub group_peak_mib: Option<f64>,
    /// How often the limit was hit (reclaim forced), if known.
    pub limit_hits: Option<u64>,
    /// Processes killed by the OOM killer, if known.
    pub oom_kills: Option<u64>,
}

impl LimitedGroup {
    /// Creates the group and prepares `cmd` to join it (or wraps it).
    pub(crate) fn apply(
        limiter: &MemoryLimiter,
        limit_mib: u64,
        tag: &str,
        cmd: Command,
    ) -> Result<(Self, Command)> {
        let bytes = (limit_mib << 20).to_string();
        match limiter {
            MemoryLimiter::SystemdRun => {
                let mut c = Command::new("systemd-run");
                c.args(["--scope", "-q", "-p"])
                    .arg(format!("MemoryMax={limit_mib}M"))
                    .arg("-p")
                    .arg("MemorySwapMax=0")
                    .arg("--")
                    .arg(cmd.get_program())
                    .args(cmd.get_args());
                for (k, v) in cmd.get_envs() {
                    if let Some(v) = v {
                        c.env(k, v);
                    }
                }
                if let Some(d) = cmd.get_current_dir() {
                    c.current_dir(d);
                }
                Ok((
                    Self {
                        dir: None,
                        v2: false,
                    },
                    c,
                ))
            }
            MemoryLimiter::CgroupV2(base) | MemoryLimiter::CgroupV1(base) => {
                let v2 = matches!(limiter, MemoryLimiter::CgroupV2(_));
                let dir = base.join(format!("vouch-bench-{}-{tag}", std::process::id()));
                let _ = fs::remove_dir(&dir);
                fs::create_dir(&dir).ctx(|| format!("creating cgroup {}", dir.display()))?;
                let group = Self {
                    dir: Some(dir.clone()),
                    v2,
                };
                if v2 {
                    fs::write(dir.join("memory.max"), &bytes)
                        .ctx(|| format!("setting memory.max in {}", dir.display()))?;
                    let _ = fs::write(dir.join("memory.swap.max"), "0");
                } else {
                    fs::write(dir.join("memory.limit_in_bytes"), &bytes)
                        .ctx(|| format!("setting memory.limit_in_bytes in {}", dir.display()))?;
                    let _ = fs::write(dir.join("memory.memsw.limit_in_bytes"), &bytes);
                }
                let procs = std::ffi::CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
                    .map_err(|_| BenchError::Workdir("cgroup path with a NUL byte".into()))?;
                let mut cmd = cmd;
                // SAFETY: the closure only calls async-signal-safe functions
                // (open, write, close) on memory prepared before the fork.
                unsafe {
                    cmd.pre_exec(move || {
                        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                        if fd < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                        libc::close(fd);
                        if n != 1 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
                Ok((group, cmd))
            }
        }
    }

    /// Reads the group's counters and removes it.
    pub(crate) fn finish(self, limiter: &MemoryLimiter, limit_mib: u64) -> MemoryOutcome {
        let mut out = MemoryOutcome {
            limiter: limiter.describe(limit_mib),
            limit_mib,
            ..MemoryOutcome::default()
        };
        let Some(dir) = self.dir else {
            return out;
        };
        let num = |f: &str| {
            fs::read_to_string(dir.join(f))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
        };
        let keyed = |f: &str, key: &str| {
            fs::read_to_string(dir.join(f)).ok().and_then(|s| {
                s.lines().find_map(|l| {
                    let (k, v) = l.split_once(' ')?;
                    (k == key).then(|| v.trim().parse::<u64>().ok()).flatten()
                })
            })
        };
        if self.v2 {
            out.group_peak_mib = num("memory.peak").map(|b| b as f64 / 1048576.0);
            out.limit_hits = keyed("memory.events", "max");
            out.oom_kills = keyed("memory.events", "oom_kill");
        } else {
            out.group_peak_mib = num("memory.max_usage_in_bytes").map(|b| b as f64 / 1048576.0);
            out.limit_hits = num("memory.failcnt");
            out.oom_kills = keyed("memory.oom_control", "oom_kill");
        }
        // The group is empty once its process was reaped; a short retry
        // covers the kernel's lazy cleanup.
        for _ in 0..50 {
            if fs::remove_dir(&dir).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        out
    }
}

/// A started, measured child.
pub(crate) struct Running {
    pid: libc::pid_t,
    start: Instant,
    stop: Arc<AtomicBool>,
    rchar: Arc<AtomicU64>,
    sampler: Option<std::thread::JoinHandle<()>>,
    program: String,
}

/// Starts `cmd` with its output in `log`.
pub(crate) fn start(mut cmd: Command, log: &Path) -> Result<Running> {
    let out = File::create(log).ctx(|| format!("creating {}", log.display()))?;
    let err = out
        .try_clone()
        .ctx(|| format!("opening {}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let program = cmd.get_program().to_string_lossy().into_owned();
    let start = Instant::now();
    let child = cmd.spawn().map_err(|source| BenchError::Spawn {
        program: program.clone(),
        source,
    })?;
    let pid = child.id() as libc::pid_t;
    // The child is reaped by `wait4` below, not by `Child`.
    drop(child);
    let stop = Arc::new(AtomicBool::new(false));
    let rchar = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (stop, rchar) = (stop.clone(), rchar.clone());
        std::thread::spawn(move || {
            let path = format!("/proc/{pid}/io");
            while !stop.load(Ordering::Relaxed) {
                if let Some(v) = fs::read_to_string(&path).ok().and_then(|s| parse_rchar(&s)) {
                    rchar.fetch_max(v, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(25));
            }
        })
    };
    Ok(Running {
        pid,
        start,
        stop,
        rchar,
        sampler: Some(sampler),
        program,
    })
}

impl Running {
    /// Waits for the child and returns what it used.
    pub(crate) fn wait(mut self) -> Result<Usage> {
        let mut status = 0;
        // SAFETY: zeroed rusage is a valid out-parameter.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: pid is our own unreaped child; pointers are valid.
            let r = unsafe { libc::wait4(self.pid, &mut status, 0, &mut ru) };
            if r == self.pid {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(BenchError::Io {
                    context: format!("waiting for {}", self.program),
                    source: e,
                });
            }
        }
        let wall = self.start.elapsed().as_secs_f64();
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.sampler.take() {
            let _ = h.join();
        }
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        let exit_code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            128 + libc::WTERMSIG(status)
        };
        Ok(Usage {
            wall_s: wall,
            user_s: tv(ru.ru_utime),
            sys_s: tv(ru.ru_stime),
            max_rss_kib: ru.ru_maxrss.max(0) as u64,
            disk_read_bytes: ru.ru_inblock.max(0) as u64 * 512,
            read_bytes: self.rchar.load(Ordering::Relaxed),
            exit_code,
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// `rchar` of a /proc/<pid>/io text.
pub(crate) fn parse_rchar(s: &str) -> Option<u64> {
    s.lines()
        .find_map(|l| l.strip_prefix("rchar:").and_then(|v| v.trim().parse().ok()))
}

/// Sum of the sizes of the regular files under `path` (0 if missing).
pub(crate) fn dir_size(path: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(rd) = fs::read_dir(&p) {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
        } else if meta.is_file() {
            total += meta.len();
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_a_child() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Command::new("sh");
        c.args([
            "-c",
            "head -c 3000000 /dev/zero > /dev/null; echo hi; exit 3",
        ]);
        let log = dir.path().join("log");
        let u = start(c, &log).unwrap().wait().unwrap();
        assert_eq!(u.exit_code, 3);
        assert!(u.wall_s > 0.0);
        assert!(u.max_rss_kib > 0);
        assert_eq!(fs::read_to_string(&log).unwrap(), "hi\n");
    }

    #[test]
    fn a_missing_program_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = start(Command::new("/nonexistent/tool"), &dir.path().join("l"));
        assert!(matches!(e, Err(BenchError::Spawn { .. })));
    }

    #[test]
    fn parses_proc_io_and_sizes_dirs() {
        assert_eq!(
            parse_rchar("rchar: 1234\nwchar: 5\nread_bytes: 0\n"),
            Some(1234)
        );
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("a")).unwrap();
        fs::write(dir.path().join("a/x"), [0u8; 100]).unwrap();
        fs::write(dir.path().join("y"), [0u8; 23]).unwrap();
        assert_eq!(dir_size(dir.path()), 123);
        assert_eq!(dir_size(&dir.path().join("missing")), 0);
    }
}
