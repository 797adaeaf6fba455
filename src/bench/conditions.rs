//! The conditions every figure is recorded with: machine, kernel, file
//! system and device, load, cache state, tools and their settings, date.

use std::ffi::CStr;
use std::path::Path;
use std::process::Command;

use serde::Serialize;

use super::{CachePolicy, Scale};

/// File system and device of the work directory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FsInfo {
    /// Mount point.
    pub target: String,
    /// Device (or source).
    pub source: String,
    /// File system type.
    pub fstype: String,
    /// Mount options.
    pub options: String,
    /// Whether the device is rotational (from /sys/class/block), if known.
    pub rotational: Option<bool>,
}

/// A tool, its version and the settings it runs with.
#[derive(Clone, Debug, Serialize)]
pub struct ToolInfo {
    /// Name.
    pub name: String,
    /// Version line.
    pub version: String,
    /// Settings used in every scenario.
    pub settings: String,
}

/// Everything recorded about the machine and the run.
#[derive(Clone, Debug, Serialize)]
pub struct Conditions {
    /// Start of the run, UTC, RFC 3339.
    pub date_utc: String,
    /// CPU model from /proc/cpuinfo.
    pub cpu_model: String,
    /// Online cores (nproc).
    pub cores: usize,
    /// MemTotal in MiB.
    pub memory_mib: u64,
    /// uname: system, release, machine.
    pub kernel: String,
    /// The work directory.
    pub workdir: String,
    /// Its file system and device.
    pub fs: FsInfo,
    /// Load average (1, 5, 15 min) at the start.
    pub loadavg_start: [f64; 3],
    /// Whether the harness runs as root (needed to drop caches).
    pub root: bool,
    /// The cache policy asked for.
    pub cache_policy: CachePolicy,
    /// Scale of the run.
    pub scale: Scale,
    /// Tools, versions, settings.
    pub tools: Vec<ToolInfo>,
    /// The command line that produced this.
    pub command_line: String,
}

impl Conditions {
    /// Records the conditions now.
    pub fn record(
        workdir: &Path,
        scale: Scale,
        cache_policy: CachePolicy,
        tools: Vec<ToolInfo>,
        command_line: String,
    ) -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        Self {
            date_utc: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            cpu_model: parse_cpu_model(&read("/proc/cpuinfo")).unwrap_or_else(|| "unknown".into()),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_mib: parse_mem_total_kib(&read("/proc/meminfo")).unwrap_or(0) / 1024,
            kernel: uname(),
            workdir: workdir.display().to_string(),
            fs: fs_info(workdir),
            loadavg_start: loadavg().unwrap_or([0.0; 3]),
            // SAFETY: geteuid has no preconditions.
            root: unsafe { libc::geteuid() } == 0,
            cache_policy,
            scale,
            tools,
            command_line,
        }
    }

    /// One paragraph for the Markdown report.
    pub fn to_markdown(&self) -> String {
        let fs = &self.fs;
        let rot = match fs.rotational {
            Some(true) => ", rotational",
            Some(false) => ", non-rotational",
            None => "",
        };
        let tools = self
            .tools
            .iter()
            .map(|t| format!("{} ({}; {})", t.name, t.version, t.settings))
            .collect::<Vec<_>>()
            .join("; ");
        format!(
            "**Machine:** {}, {} cores, {} MiB RAM, {}. **Work directory:** `{}` on {} ({}{}) \
             mounted at `{}`. **Date:** {}. **Load average at start:** {:.2} {:.2} {:.2}. \
             **Cache:** {}. **Scale:** {}. **Tools:** {}.",
            self.cpu_model,
            self.cores,
            self.memory_mib,
            self.kernel,
            self.workdir,
            fs.fstype,
            fs.source,
            rot,
            fs.target,
            self.date_utc,
            self.loadavg_start[0],
            self.loadavg_start[1],
            self.loadavg_start[2],
            match (self.cache_policy, self.root) {
                (CachePolicy::Cold, true) =>
                    "dropped before every measured step (sync; echo 3 > /proc/sys/vm/drop_caches)",
                (CachePolicy::Cold, false) => "warm: not root, so caches could not be dropped",
                (CachePolicy::Warm, _) => "warm (asked for)",
            },
            self.scale,
            tools
        )
    }
}

/// The first `model name` of /proc/cpuinfo.
pub fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "model name").then(|| v.trim().to_string())
    })
}

/// MemTotal of /proc/meminfo in KiB.
pub fn parse_mem_total_kib(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix("MemTotal:")?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The three load averages of /proc/loadavg.
pub fn parse_loadavg(s: &str) -> Option<[f64; 3]> {
    let mut it = s.split_whitespace().map(|x| x.parse::<f64>());
    Some([it.next()?.ok()?, it.next()?.ok()?, it.next()?.ok()?])
}

/// The load averages now.
pub fn loadavg() -> Option<[f64; 3]> {
    parse_loadavg(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// Parses `findmnt -J -T PATH -o TARGET,SOURCE,FSTYPE,OPTIONS`.
pub fn parse_findmnt_json(s: &str) -> Option<FsInfo> {
    let v: serde_json::Value = serde_json::from_str(s).ok()?;
    let fs = v.get("filesystems")?.get(0)?;
    let field = |k: &str| fs.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
    Some(FsInfo {
        target: field("target"),
        source: field("source"),
        fstype: field("fstype"),
        options: field("options"),
        rotational: None,
    })
}

fn fs_info(path: &Path) -> FsInfo {
    let out = Command::new("findmnt")
        .args(["-J", "-T"])
        .arg(path)
        .args(["-o", "TARGET,SOURCE,FSTYPE,OPTIONS"])
        .output();
    let mut info = out
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| parse_findmnt_json(&String::from_utf8_lossy(&o.stdout)))
        .unwrap_or_else(|| statfs_info(path));
    if let Some(dev) = info.source.strip_prefix("/dev/") {
        let dev = dev.split('[').next().unwrap_or(dev);
        let p = format!("/sys/class/block/{dev}/queue/rotational");
        let p2 = format!("/sys/class/block/{dev}/../queue/rotational");
        info.rotational = std::fs::read_to_string(&p)
            .or_else(|_| std::fs::read_to_string(&p2))
            .ok()
            .map(|s| s.trim() == "1");
    }
    info
}

fn statfs_info(path: &Path) -> FsInfo {
    use std::os::unix::ffi::OsStrExt;
    let mut info = FsInfo {
        target: "?".into(),
        source: "?".into(),
        fstype: "unknown".into(),
        ..FsInfo::default()
    };
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return info;
    };
    // SAFETY: zeroed statfs is a valid out-parameter; c is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0 {
        info.fstype = format!("statfs type {:#x}", st.f_type);
    }
    info
}

fn uname() -> String {
    // SAFETY: zeroed utsname is a valid out-parameter.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    // SAFETY: uname NUL-terminates each field.
    let f = |a: &[libc::c_char]| {
        unsafe { CStr::from_ptr(a.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    format!("{} {} {}", f(&u.sysname), f(&u.release), f(&u.machine))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let cpu =
            "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nflags\t: x\n";
        assert_eq!(parse_cpu_model(cpu).as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(parse_cpu_model("nothing"), None);
        let mem = "MemTotal:       24567890 kB\nMemFree:  1 kB\n";
        assert_eq!(parse_mem_total_kib(mem), Some(24567890));
        assert_eq!(
            parse_loadavg("0.14 0.38 0.92 1/85 29516\n"),
            Some([0.14, 0.38, 0.92])
        );
        assert_eq!(parse_loadavg("x"), None);
    }

    #[test]
    fn parses_findmnt() {
        let j = r#"{"filesystems": [{"target":"/","source":"/dev/vda","fstype":"ext4","options":"rw,relatime"}]}"#;
        let fs = parse_findmnt_json(j).unwrap();
        assert_eq!(fs.source, "/dev/vda");
        assert_eq!(fs.fstype, "ext4");
        assert_eq!(fs.target, "/");
        assert!(parse_findmnt_json("{}").is_none());
    }

    #[test]
    fn records_the_machine() {
        let dir = std::env::temp_dir();
        let c = Conditions::record(&dir, Scale::Small, CachePolicy::Warm, vec![], "x".into());
        assert!(c.cores >= 1);
        assert!(c.date_utc.ends_with('Z'), "{}", c.date_utc);
        assert!(c.kernel.starts_with("Linux"), "{}", c.kernel);
        assert!(c.memory_mib > 0);
        let md = c.to_markdown();
        assert!(
            md.contains("**Machine:**") && md.contains("warm (asked for)"),
            "{md}"
        );
    }
}
