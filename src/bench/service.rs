//! `vouch bench service`: the service's scale targets, measured on the real
//! `vouch serve` binary over a generated history (see [`super::history`]).
//!
//! Steps: make a data directory (serve creates its default repository and
//! admin token on an empty one, then its log and read store are replaced
//! by the generated history); start serve with no read store (full
//! rebuild), stop it with SIGTERM; start it again (restart after a clean
//! shutdown) and load it with [`super::loadgen`] (`/api/v1/points?state=
//! recoverable`, then `/metrics`), then `kill -9` it; start it once more
//! (restart after a crash). Each start is timed from spawn to serve's
//! `listening on` line and to the first 200 of `/readyz`. The server is
//! always stopped by the harness, on errors too.
//!
//! `vouch bench point` ([`point`]) runs one real backup through serve and
//! measures how the service handles the point it made.

mod point;

pub use point::{run_point, PointOptions, PointReport};

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::conditions::{loadavg, Conditions, FsInfo};
use super::history::{self, HistoryOptions, HistorySummary};
use super::loadgen::{self, Conn, LoadOptions, LoadResult, Request};
use super::measure::dir_size;
use super::{BenchError, CachePolicy, Ctx as _, Result, Scale};

/// Restart to ready, at most.
pub const TARGET_READY_S: f64 = 5.0;
/// p99 of `/api/v1/points?state=recoverable` under load, at most.
pub const TARGET_POINTS_P99_MS: f64 = 20.0;
/// p99 of `/metrics` under load, at most.
pub const TARGET_METRICS_P99_MS: f64 = 50.0;
/// How long a start may take before the harness gives up.
const START_TIMEOUT: Duration = Duration::from_secs(600);
/// How long serve gets to stop on SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(120);

/// The read store's checkpoint interval serve is started with (its
/// default is 30 s): short, so that every load run sees several.
pub const CHECKPOINT_EVERY: &str = "2s";
/// The repository the generated history's points are in. It is not one
/// serve knows: the points exist only in the log, so the service must not
/// reconcile or read back a real repository against them (it would rightly
/// find every one of them gone and record 10 000 `point.vanished`). Its
/// reconciliation and read-back jobs fail (no such repository), as they
/// would for a repository that is offline.
pub const SYNTHETIC_REPOSITORY: &str = "bench-synthetic";
/// How often the writer of the load under writes appends.
const WRITE_EVERY: Duration = Duration::from_millis(100);

/// The endpoints under load.
pub const POINTS_PATH: &str = "/api/v1/points?state=recoverable";
/// `/metrics`.
pub const METRICS_PATH: &str = "/metrics";

/// What `vouch bench service` should do.
#[derive(Clone, Debug)]
pub struct ServiceOptions {
    /// Work directory (data directory, logs).
    pub workdir: PathBuf,
    /// Events in the log.
    pub events: u64,
    /// Recovery points.
    pub points: u64,
    /// Plans.
    pub plans: u64,
    /// Load generator bounds.
    pub load: LoadOptions,
    /// Reuse a data directory generated with the same sizes.
    pub reuse: bool,
    /// The vouch binary (default: this one).
    pub vouch: PathBuf,
    /// The command line, recorded.
    pub command_line: String,
    /// No progress lines.
    pub quiet: bool,
}

/// The machine and the run.
#[derive(Clone, Debug, Serialize)]
pub struct ServiceConditions {
    /// Start, UTC.
    pub date_utc: String,
    /// CPU model.
    pub cpu_model: String,
    /// Cores.
    pub cores: usize,
    /// RAM, MiB.
    pub memory_mib: u64,
    /// Kernel.
    pub kernel: String,
    /// Work directory and its file system.
    pub workdir: String,
    /// Its file system.
    pub fs: FsInfo,
    /// Load average at the start.
    pub loadavg_start: [f64; 3],
    /// `release` or `debug` (of the binary measured, which is this one
    /// unless `--vouch-bin` says otherwise).
    pub build_profile: String,
    /// The vouch binary.
    pub vouch: String,
    /// The command line.
    pub command_line: String,
}

impl ServiceConditions {
    /// The machine now, the work directory and the binary measured.
    pub fn record(workdir: &Path, vouch: &Path, command_line: &str) -> Self {
        let c = Conditions::record(
            workdir,
            Scale::Small,
            CachePolicy::Warm,
            Vec::new(),
            command_line.to_owned(),
        );
        ServiceConditions {
            date_utc: c.date_utc,
            cpu_model: c.cpu_model,
            cores: c.cores,
            memory_mib: c.memory_mib,
            kernel: c.kernel,
            workdir: c.workdir,
            fs: c.fs,
            loadavg_start: c.loadavg_start,
            build_profile: if cfg!(debug_assertions) {
                "debug".into()
            } else {
                "release".into()
            },
            vouch: vouch.display().to_string(),
            command_line: command_line.to_owned(),
        }
    }
}

/// One start of serve.
#[derive(Clone, Debug, Serialize)]
pub struct RestartResult {
    /// Which case.
    pub case: String,
    /// Spawn to the `listening on` line, seconds.
    pub listening_s: f64,
    /// Spawn to the first 200 of `/readyz`, seconds.
    pub ready_s: f64,
    /// Spawn to the first 200 of `/metrics` (its counters rebuilt), seconds.
    pub metrics_s: f64,
    /// The log's seq `/readyz` reported.
    pub seq: u64,
    /// Load average (1 min) before the spawn.
    pub loadavg_before: f64,
    /// Peak RSS of serve (VmHWM) when it was stopped, MiB.
    pub peak_rss_mib: f64,
    /// How it was stopped, and how long SIGTERM took (seconds).
    pub stopped_by: String,
    /// SIGTERM to exit, seconds (0 for kill -9).
    pub stop_s: f64,
}

/// Coherence checks of the run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Checks {
    /// Points by state as `/metrics` reports them.
    pub metrics_points_by_state: BTreeMap<String, u64>,
    /// Whether they equal what was generated.
    pub points_match: bool,
    /// Entries in one `/api/v1/points?state=recoverable` answer.
    pub points_page_len: usize,
    /// Whether every entry of it is recoverable.
    pub points_page_all_recoverable: bool,
    /// Whether every write of the load under writes was answered (201
    /// then 200).
    pub writes_ok: bool,
    /// Whether every measured request was answered 200.
    pub all_requests_ok: bool,
}

/// A target and how the run compares.
#[derive(Clone, Debug, Serialize)]
pub struct TargetRow {
    /// What.
    pub what: String,
    /// The target.
    pub target: f64,
    /// Measured.
    pub measured: f64,
    /// measured / target (below 1: met).
    pub ratio: f64,
    /// Unit.
    pub unit: String,
}

/// Everything `vouch bench service` measured.
#[derive(Clone, Debug, Serialize)]
pub struct ServiceReport {
    /// Conditions.
    pub conditions: ServiceConditions,
    /// Events asked for.
    pub events: u64,
    /// Points asked for.
    pub points: u64,
    /// What was generated.
    pub generated: HistorySummary,
    /// Seconds the generation took (0 when reused).
    pub generation_s: f64,
    /// Size of the data directory, bytes.
    pub data_dir_bytes: u64,
    /// Size of the event log, bytes.
    pub log_bytes: u64,
    /// Size of the read store after the run, bytes.
    pub read_store_bytes: u64,
    /// Every start.
    pub restarts: Vec<RestartResult>,
    /// Every endpoint under load.
    pub loads: Vec<LoadResult>,
    /// Coherence.
    pub checks: Checks,
    /// Against the targets.
    pub targets: Vec<TargetRow>,
    /// Remarks.
    pub notes: Vec<String>,
}

/// What a generated data directory was made with (`bench-data.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Marker {
    events: u64,
    points: u64,
    plans: u64,
    /// The repository of the generated points (markers of builds that
    /// generated them in `default` have none: regenerated).
    #[serde(default)]
    repository: String,
    summary: HistorySummaryFile,
}

/// The parts of [`HistorySummary`] kept on disk.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct HistorySummaryFile {
    events: u64,
    points_by_state: BTreeMap<String, u64>,
    plans: u64,
    days: u64,
    job_runs: u64,
    progress_events: u64,
    appends: u64,
    last_unix_ns: i64,
}

impl From<&HistorySummary> for HistorySummaryFile {
    fn from(s: &HistorySummary) -> Self {
        HistorySummaryFile {
            events: s.events,
            points_by_state: s.points_by_state.clone(),
            plans: s.plans,
            days: s.days,
            job_runs: s.job_runs,
            progress_events: s.progress_events,
            appends: s.appends,
            last_unix_ns: s.last_unix_ns,
        }
    }
}

impl From<HistorySummaryFile> for HistorySummary {
    fn from(s: HistorySummaryFile) -> Self {
        HistorySummary {
            events: s.events,
            points_by_state: s.points_by_state,
            plans: s.plans,
            days: s.days,
            job_runs: s.job_runs,
            progress_events: s.progress_events,
            appends: s.appends,
            last_unix_ns: s.last_unix_ns,
        }
    }
}

/// What the writer beside a load did.
struct Writes {
    sent: u64,
    ok: u64,
}

/// A thread that creates a plan (never due: its schedule is once a year)
/// and pauses it, every [`WRITE_EVERY`], until stopped: two appends each
/// time, so the read model always has a change to checkpoint.
struct Writer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Writes>,
}

impl Writer {
    fn start(addr: SocketAddr, token: &str) -> Writer {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (flag, token) = (stop.clone(), token.to_owned());
        let thread = std::thread::spawn(move || {
            let mut conn = Conn::new(addr);
            let mut w = Writes { sent: 0, ok: 0 };
            let tag = format!("bench-writer-{}-{}", std::process::id(), now_unix_ns());
            while !flag.load(Ordering::Relaxed) {
                let id = format!("{tag}-{}", w.sent);
                let create = Request {
                    path: "/api/v1/plans".into(),
                    token: Some(token.clone()),
                    json: Some(format!(
                        "{{\"id\":\"{id}\",\"source\":\"/nonexistent/vouch-bench\",\"schedule\":\"0 3 1 1 *\",\"rpo\":\"400d\"}}"
                    )),
                };
                let pause = Request {
                    path: format!("/api/v1/plans/{id}/pause"),
                    token: Some(token.clone()),
                    json: Some(String::new()),
                };
                w.sent += 1;
                let created = conn.get(&create.bytes()).is_ok_and(|r| r.status == 201);
                if created && conn.get(&pause.bytes()).is_ok_and(|r| r.status == 200) {
                    w.ok += 1;
                }
                std::thread::sleep(WRITE_EVERY);
            }
            w
        });
        Writer { stop, thread }
    }

    fn stop(self) -> Writes {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or(Writes { sent: 0, ok: 0 })
    }
}

/// A running `vouch serve`, killed when dropped.
struct Server {
    child: Option<Child>,
    spawned: Instant,
    lines: mpsc::Receiver<(Instant, String)>,
    addr: Option<SocketAddr>,
    token: Option<String>,
}

impl Server {
    fn spawn(vouch: &Path, data_dir: &Path, log: &Path) -> Result<Server> {
        // The plans' source never exists: the load is the API's, no
        // backup reads anything.
        Self::spawn_allowing(vouch, data_dir, log, Path::new("/nonexistent/vouch-bench"))
    }

    /// Serve with `allow` as the only root plans may back up.
    fn spawn_allowing(vouch: &Path, data_dir: &Path, log: &Path, allow: &Path) -> Result<Server> {
        let err = std::fs::File::create(log).ctx(|| format!("creating {}", log.display()))?;
        let config = log.with_extension("toml");
        let allow = serde_json::to_string(&allow.display().to_string())
            .map_err(|e| BenchError::Workdir(format!("quoting {}: {e}", allow.display())))?;
        std::fs::write(
            &config,
            format!(
                "[sources]\nallow = [{allow}]\n\n[read_store]\ncheckpoint_every = \"{CHECKPOINT_EVERY}\"\n"
            ),
        )
        .ctx(|| format!("writing {}", config.display()))?;
        let mut cmd = Command::new(vouch);
        cmd.arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err);
        let spawned = Instant::now();
        let mut child = cmd.spawn().map_err(|source| BenchError::Spawn {
            program: vouch.display().to_string(),
            source,
        })?;
        let (tx, lines) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
                    if tx.send((Instant::now(), line)).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Server {
            child: Some(child),
            spawned,
            lines,
            addr: None,
            token: None,
        })
    }

    fn pid(&self) -> Option<libc::pid_t> {
        self.child.as_ref().map(|c| c.id() as libc::pid_t)
    }

    /// Waits for `listening on http://ADDR`; returns the time since spawn.
    fn wait_listening(&mut self, log: &Path) -> Result<f64> {
        let deadline = self.spawned + START_TIMEOUT;
        loop {
            if crate::util::interrupted() {
                return Err(BenchError::Interrupted);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(BenchError::Workdir(format!(
                    "vouch serve did not start within {}s (log: {})",
                    START_TIMEOUT.as_secs(),
                    log.display()
                )));
            }
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(200)))
            {
                Ok((at, line)) => {
                    if let Some(t) = line.strip_prefix("admin token: ") {
                        self.token = Some(t.trim().to_owned());
                    } else if let Some(a) = line.strip_prefix("listening on http://") {
                        let addr = a.trim().parse().map_err(|_| {
                            BenchError::Workdir(format!("serve printed an odd address: {line:?}"))
                        })?;
                        self.addr = Some(addr);
                        return Ok(at.duration_since(self.spawned).as_secs_f64());
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(c) = self.child.as_mut() {
                        if let Ok(Some(status)) = c.try_wait() {
                            return Err(BenchError::ToolFailed {
                                tool: "vouch serve".into(),
                                step: "start".into(),
                                status: status.to_string(),
                                log: log.to_path_buf(),
                                tail: tail(log),
                            });
                        }
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(BenchError::ToolFailed {
                        tool: "vouch serve".into(),
                        step: "start".into(),
                        status: "closed its output".into(),
                        log: log.to_path_buf(),
                        tail: tail(log),
                    })
                }
            }
        }
    }

    fn addr(&self) -> Result<SocketAddr> {
        self.addr
            .ok_or_else(|| BenchError::Workdir("serve has no address yet".into()))
    }

    /// Polls `path` until it answers 200; returns the time since spawn and
    /// the body.
    fn wait_200(&self, path: &str, token: Option<&str>) -> Result<(f64, Vec<u8>)> {
        let addr = self.addr()?;
        let bytes = Request::get(path, token).bytes();
        let deadline = self.spawned + START_TIMEOUT;
        let mut conn = Conn::new(addr);
        while Instant::now() < deadline {
            if crate::util::interrupted() {
                return Err(BenchError::Interrupted);
            }
            if let Ok(r) = conn.get(&bytes) {
                if r.status == 200 {
                    return Ok((self.spawned.elapsed().as_secs_f64(), r.body));
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err(BenchError::Workdir(format!(
            "{path} did not answer 200 within {}s",
            START_TIMEOUT.as_secs()
        )))
    }

    fn peak_rss_mib(&self) -> f64 {
        let Some(pid) = self.pid() else {
            return 0.0;
        };
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            })
            .map_or(0.0, |kib| kib / 1024.0)
    }

    /// SIGTERM, then waits (SIGKILL after [`STOP_TIMEOUT`]); seconds taken.
    fn terminate(&mut self) -> Result<f64> {
        let Some(mut child) = self.child.take() else {
            return Ok(0.0);
        };
        let t = Instant::now();
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        while t.elapsed() < STOP_TIMEOUT {
            if let Ok(Some(_)) = child.try_wait() {
                return Ok(t.elapsed().as_secs_f64());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(BenchError::Workdir(format!(
            "vouch serve did not stop within {}s of SIGTERM",
            STOP_TIMEOUT.as_secs()
        )))
    }

    /// `kill -9`.
    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

fn now_unix_ns() -> i64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Copies the plain files of `from` into a new directory `to` (a log
/// directory: segment files and its head, no subdirectories).
fn copy_files(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).ctx(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).ctx(|| format!("listing {}", from.display()))? {
        let entry = entry.ctx(|| format!("listing {}", from.display()))?;
        let path = entry.path();
        if path.is_file() {
            std::fs::copy(&path, to.join(entry.file_name()))
                .ctx(|| format!("copying {}", path.display()))?;
        }
    }
    Ok(())
}

fn rm(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(BenchError::Io {
            context: format!("removing {}", path.display()),
            source: e,
        }),
    }
}

/// `vouch_recovery_points{state="x"} n` lines of a scrape.
pub fn points_from_metrics(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("vouch_recovery_points{state=\"") else {
            continue;
        };
        let Some((state, value)) = rest.split_once("\"}") else {
            continue;
        };
        if let Ok(v) = value.trim().parse::<f64>() {
            if v > 0.0 {
                out.insert(state.to_owned(), v as u64);
            }
        }
    }
    out
}

struct Run<'a> {
    o: &'a ServiceOptions,
    data: PathBuf,
    logs: PathBuf,
    starts: usize,
}

impl Run<'_> {
    fn say(&self, msg: &str) {
        if !self.o.quiet {
            eprintln!("[bench service] {msg}");
        }
    }

    fn spawn(&mut self, name: &str) -> Result<(Server, PathBuf)> {
        self.starts += 1;
        let log = self.logs.join(format!("serve-{}-{name}.log", self.starts));
        Ok((Server::spawn(&self.o.vouch, &self.data, &log)?, log))
    }

    /// The data directory with a repository, a token and the history.
    fn prepare(&mut self) -> Result<(HistorySummary, String, f64)> {
        let o = self.o;
        let marker_path = self.o.workdir.join("bench-data.json");
        let token_path = self.o.workdir.join("bench-admin-token");
        let pristine = self.o.workdir.join("generated-events");
        if o.reuse {
            if let (Ok(m), Ok(t)) = (
                std::fs::read(&marker_path),
                std::fs::read_to_string(&token_path),
            ) {
                if let Ok(m) = serde_json::from_slice::<Marker>(&m) {
                    if (m.events, m.points, m.plans) == (o.events, o.points, o.plans)
                        && m.repository == SYNTHETIC_REPOSITORY
                        && pristine.is_dir()
                    {
                        // Every run appends (starts, the writer's plans):
                        // each one starts from the generated log as it was.
                        self.say("reusing the generated log (a fresh copy of it)");
                        rm(&self.data.join("events"))?;
                        rm(&self.data.join("read-store"))?;
                        copy_files(&pristine, &self.data.join("events"))?;
                        return Ok((m.summary.into(), t.trim().to_owned(), 0.0));
                    }
                }
            }
        }
        let _ = std::fs::remove_file(&marker_path);
        rm(&self.data)?;
        std::fs::create_dir_all(&self.data).ctx(|| format!("creating {}", self.data.display()))?;
        self.say("first start on an empty data directory (repository, token)");
        let (mut s, log) = self.spawn("init")?;
        s.wait_listening(&log)?;
        s.wait_200("/readyz", None)?;
        // This build leaves the first token in a file; older ones (as
        // `--vouch-bin`) printed it.
        let token = match s.token.clone() {
            Some(t) => t,
            None => {
                std::fs::read_to_string(self.data.join(crate::cli::serve::INITIAL_ADMIN_TOKEN_FILE))
                    .map(|t| t.trim().to_owned())
                    .map_err(|e| {
                        BenchError::Workdir(format!(
                            "serve left no admin token on an empty data directory: {e}"
                        ))
                    })?
            }
        };
        s.terminate()?;
        drop(s);
        rm(&self.data.join("events"))?;
        rm(&self.data.join("read-store"))?;
        self.say(&format!(
            "writing {} events with {} points over {} plans",
            o.events, o.points, o.plans
        ));
        let t = Instant::now();
        let mut last = 0.0;
        let quiet = o.quiet;
        let summary = history::generate(
            &self.data.join("events"),
            &HistoryOptions {
                events: o.events,
                points: o.points,
                plans: o.plans,
                repository: SYNTHETIC_REPOSITORY.into(),
            },
            now_unix_ns(),
            &mut |share| {
                if !quiet && share - last >= 0.1 {
                    last = share;
                    eprintln!("[bench service] {:.0} %", share * 100.0);
                }
            },
        )?;
        let took = t.elapsed().as_secs_f64();
        rm(&pristine)?;
        copy_files(&self.data.join("events"), &pristine)?;
        let marker = Marker {
            events: o.events,
            points: o.points,
            plans: o.plans,
            repository: SYNTHETIC_REPOSITORY.into(),
            summary: (&summary).into(),
        };
        let json = serde_json::to_vec_pretty(&marker)
            .map_err(|e| BenchError::Workdir(format!("encoding the marker: {e}")))?;
        std::fs::write(&marker_path, json).ctx(|| format!("writing {}", marker_path.display()))?;
        write_private(&token_path, token.as_bytes())?;
        Ok((summary, token, took))
    }

    /// Starts serve and times it to `listening on`, `/readyz` and `/metrics`.
    fn start(&mut self, case: &str, token: &str) -> Result<(Server, RestartResult)> {
        let load = loadavg().map_or(0.0, |l| l[0]);
        self.say(&format!("start: {case}"));
        let (mut s, log) = self.spawn(case.split_whitespace().next().unwrap_or("start"))?;
        let listening_s = s.wait_listening(&log)?;
        let (ready_s, body) = s.wait_200("/readyz", None)?;
        let seq = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("seq")?.as_u64())
            .unwrap_or(0);
        let (metrics_s, _) = s.wait_200(METRICS_PATH, Some(token))?;
        Ok((
            s,
            RestartResult {
                case: case.into(),
                listening_s,
                ready_s,
                metrics_s,
                seq,
                loadavg_before: load,
                peak_rss_mib: 0.0,
                stopped_by: String::new(),
                stop_s: 0.0,
            },
        ))
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .ctx(|| format!("creating {}", path.display()))?;
    f.write_all(bytes)
        .ctx(|| format!("writing {}", path.display()))
}

/// Runs the whole benchmark.
pub fn run_service(o: &ServiceOptions) -> Result<ServiceReport> {
    std::fs::create_dir_all(&o.workdir).ctx(|| format!("creating {}", o.workdir.display()))?;
    let workdir = std::path::absolute(&o.workdir).ctx(|| "resolving the work directory".into())?;
    let conditions = ServiceConditions::record(&workdir, &o.vouch, &o.command_line);
    let logs = workdir.join("logs");
    std::fs::create_dir_all(&logs).ctx(|| format!("creating {}", logs.display()))?;
    let mut run = Run {
        o,
        data: workdir.join("data"),
        logs,
        starts: 0,
    };
    let (generated, token, generation_s) = run.prepare()?;
    let log_bytes = dir_size(&run.data.join("events"));
    let mut restarts = Vec::new();
    let mut loads = Vec::new();
    let mut checks = Checks::default();

    // 1. No read store: a full rebuild.
    rm(&run.data.join("read-store"))?;
    let (mut s, mut r) = run.start("first start, no read store (full rebuild)", &token)?;
    r.peak_rss_mib = s.peak_rss_mib();
    r.stop_s = s.terminate()?;
    r.stopped_by = "SIGTERM".into();
    restarts.push(r);
    drop(s);

    // 2. After a clean shutdown; then the load.
    let (mut s, mut r) = run.start("restart after SIGTERM", &token)?;
    let addr = s.addr()?;
    let page = Conn::new(addr)
        .get(&Request::get(POINTS_PATH, Some(&token)).bytes())
        .ctx(|| "reading the points list".into())?;
    if let Ok(serde_json::Value::Array(v)) = serde_json::from_slice(&page.body) {
        checks.points_page_len = v.len();
        checks.points_page_all_recoverable = v
            .iter()
            .all(|p| p.get("state").and_then(|s| s.as_str()) == Some("recoverable"));
    }
    for path in [POINTS_PATH, METRICS_PATH] {
        if crate::util::interrupted() {
            return Err(BenchError::Interrupted);
        }
        run.say(&format!(
            "load: {path}, {} clients, {:?} warm-up, up to {:?} or {} requests",
            o.load.clients, o.load.warmup, o.load.duration, o.load.max_requests
        ));
        loads.push(loadgen::run(
            addr,
            &Request::get(path, Some(&token)),
            &o.load,
        ));
    }
    // The points list again, while a writer appends (so that the read
    // model has changes to checkpoint, every CHECKPOINT_EVERY).
    run.say(&format!(
        "load: {POINTS_PATH} while a writer appends every {WRITE_EVERY:?}, checkpoints every {CHECKPOINT_EVERY}"
    ));
    let writer = Writer::start(addr, &token);
    let mut under_writes = loadgen::run(addr, &Request::get(POINTS_PATH, Some(&token)), &o.load);
    let writes = writer.stop();
    under_writes.endpoint = format!(
        "{POINTS_PATH} (beside {} writes: {} answered 201/200, checkpoints every {CHECKPOINT_EVERY})",
        writes.sent, writes.ok
    );
    checks.writes_ok = writes.sent > 0 && writes.ok == writes.sent;
    loads.push(under_writes);
    let (_, text) = s.wait_200(METRICS_PATH, Some(&token))?;
    checks.metrics_points_by_state = points_from_metrics(&String::from_utf8_lossy(&text));
    checks.points_match = checks.metrics_points_by_state == generated.points_by_state;
    checks.all_requests_ok = loads
        .iter()
        .all(|l| l.errors == 0 && l.ok == l.requests && l.requests > 0);
    r.peak_rss_mib = s.peak_rss_mib();
    // 3. kill -9 (the read store's checkpoint may be stale).
    s.kill9();
    r.stopped_by = "kill -9".into();
    restarts.push(r);
    drop(s);
    let (mut s, mut r) = run.start("restart after kill -9", &token)?;
    r.peak_rss_mib = s.peak_rss_mib();
    r.stop_s = s.terminate()?;
    r.stopped_by = "SIGTERM".into();
    restarts.push(r);
    drop(s);

    let mut targets = Vec::new();
    for r in &restarts {
        targets.push(TargetRow {
            what: format!("ready: {}", r.case),
            target: TARGET_READY_S,
            measured: r.ready_s,
            ratio: r.ready_s / TARGET_READY_S,
            unit: "s".into(),
        });
    }
    for l in &loads {
        let target = if l.endpoint == METRICS_PATH {
            TARGET_METRICS_P99_MS
        } else {
            TARGET_POINTS_P99_MS
        };
        targets.push(TargetRow {
            what: format!("p99 {} ({} clients)", l.endpoint, l.clients),
            target,
            measured: l.p99_ms,
            ratio: l.p99_ms / target,
            unit: "ms".into(),
        });
    }
    let mut notes = Vec::new();
    let load_max = restarts
        .iter()
        .map(|r| r.loadavg_before)
        .chain(loads.iter().map(|l| l.loadavg_before))
        .fold(0.0, f64::max);
    if load_max > 0.5 {
        notes.push(format!(
            "the 1-minute load average was up to {load_max:.2} before the steps: other work was running on the {} cores",
            conditions.cores
        ));
    }
    notes.push(
        "the load generator runs on the same machine as the server (one thread per client)".into(),
    );
    Ok(ServiceReport {
        conditions,
        events: o.events,
        points: o.points,
        data_dir_bytes: dir_size(&run.data),
        log_bytes,
        read_store_bytes: dir_size(&run.data.join("read-store")),
        generated,
        generation_s,
        restarts,
        loads,
        checks,
        targets,
        notes,
    })
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

impl ServiceReport {
    /// The Markdown report.
    pub fn to_markdown(&self) -> String {
        let c = &self.conditions;
        let mut s = String::new();
        s.push_str(&format!(
            "**Machine:** {}, {} cores, {} MiB RAM, {}. **Work directory:** `{}` on {} ({}). \
             **Date:** {}. **Load average at start:** {:.2} {:.2} {:.2}. **Build:** {} (`{}`).\n\n",
            c.cpu_model,
            c.cores,
            c.memory_mib,
            c.kernel,
            c.workdir,
            c.fs.fstype,
            c.fs.source,
            c.date_utc,
            c.loadavg_start[0],
            c.loadavg_start[1],
            c.loadavg_start[2],
            c.build_profile,
            c.vouch,
        ));
        let g = &self.generated;
        s.push_str(&format!(
            "**Data:** {} events ({} job runs, {} of them `job.progress`) over {} days, {} points over {} plans ({}); \
             log {:.1} MiB, read store {:.1} MiB, data directory {:.1} MiB; generated in {:.1} s ({} appends).\n\n",
            g.events,
            g.job_runs,
            g.progress_events,
            g.days,
            g.points(),
            g.plans,
            g.points_by_state
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
            mib(self.log_bytes),
            mib(self.read_store_bytes),
            mib(self.data_dir_bytes),
            self.generation_s,
            g.appends,
        ));
        s.push_str(&format!("Reproduce: `{}`\n\n", c.command_line));
        s.push_str("| start | to `listening on` | to `/readyz` 200 | to `/metrics` 200 | seq | peak RSS | stopped by | load before |\n|---|---|---|---|---|---|---|---|\n");
        for r in &self.restarts {
            s.push_str(&format!(
                "| {} | {:.2} s | {:.2} s | {:.2} s | {} | {:.0} MiB | {}{} | {:.2} |\n",
                r.case,
                r.listening_s,
                r.ready_s,
                r.metrics_s,
                r.seq,
                r.peak_rss_mib,
                r.stopped_by,
                if r.stop_s > 0.0 {
                    format!(" ({:.2} s)", r.stop_s)
                } else {
                    String::new()
                },
                r.loadavg_before,
            ));
        }
        s.push_str("\n| endpoint | clients | requests | 200 | errors | req/s | p50 ms | p90 ms | p99 ms | max ms | body | load before |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for l in &self.loads {
            s.push_str(&format!(
                "| `{}` | {} | {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} KiB | {:.2} |\n",
                l.endpoint,
                l.clients,
                l.requests,
                l.ok,
                l.errors,
                l.rps,
                l.p50_ms,
                l.p90_ms,
                l.p99_ms,
                l.max_ms,
                l.body_bytes as f64 / 1024.0,
                l.loadavg_before,
            ));
        }
        s.push_str("\n| target | limit | measured | measured / limit |\n|---|---|---|---|\n");
        for t in &self.targets {
            s.push_str(&format!(
                "| {} | {} {} | {:.2} {} | {:.2}{} |\n",
                t.what,
                t.target,
                t.unit,
                t.measured,
                t.unit,
                t.ratio,
                if t.ratio <= 1.0 { "" } else { " (missed)" }
            ));
        }
        let k = &self.checks;
        s.push_str(&format!(
            "\nChecks: points by state in `/metrics` {} the generated ones; a points page held {} entries, {}; {}; {}.\n",
            if k.points_match { "equal" } else { "DIFFER FROM" },
            k.points_page_len,
            if k.points_page_all_recoverable {
                "all recoverable"
            } else {
                "NOT all recoverable"
            },
            if k.all_requests_ok {
                "every measured request answered 200"
            } else {
                "SOME REQUESTS FAILED"
            },
            if k.writes_ok {
                "every write beside the load was answered"
            } else {
                "SOME WRITES FAILED"
            }
        ));
        for n in &self.notes {
            s.push_str(&format!("- {n}\n"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_read_from_a_scrape() {
        let text = "# TYPE vouch_recovery_points gauge\nvouch_recovery_points{state=\"expired\"} 3\nvouch_recovery_points{state=\"recoverable\"} 40\nvouch_recovery_points{state=\"corrupt\"} 0\nvouch_recovery_points_other 1\n";
        let m = points_from_metrics(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m["recoverable"], 40);
        assert_eq!(m["expired"], 3);
    }
}
