//! The deployment a run controls: one `vouch serve`, its agents behind the
//! fault proxy, their data directories, and the preloaded libraries that
//! let the nemeses move clocks (libfaketime) and fail system calls
//! (libfiu). Everything lives below one work directory and is stopped when
//! the [`Deployment`] is dropped.

use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::loopfs::LoopXfs;
use crate::proxy::FaultProxy;
use crate::runner::http::Client;
use crate::runner::RunError;
use crate::s3_faults::S3FaultProxy;
use crate::Tmpfs;

/// libfaketime's multi-threaded library (Debian's `faketime`).
pub const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
/// libfiu's preloads (Debian's `fiu-utils`).
pub const FIU_RUN_LIB: &str = "/usr/lib/fiu/fiu_run_preload.so";
/// libfiu's POSIX wrappers.
pub const FIU_POSIX_LIB: &str = "/usr/lib/fiu/fiu_posix_preload.so";

/// How the deployment is built.
#[derive(Clone, Debug)]
pub struct DeployOptions {
    /// The `vouch` binary.
    pub vouch: PathBuf,
    /// The work directory (created; everything of the run lives below).
    pub work: PathBuf,
    /// How many agents.
    pub agents: usize,
    /// Run the service and agents under libfaketime (clock steps).
    pub faketime: bool,
    /// Run the service under libfiu (fsync EIO).
    pub fiu: bool,
    /// Put the data directory on a file system of its own of this many
    /// bytes (root only), so that a ballast file can fill it: a tmpfs, or
    /// with `power_cut` an XFS in a loop-mounted image.
    pub own_fs_bytes: Option<u64>,
    /// The data directory's own file system can lose power (an XFS in a
    /// loop-mounted image: `xfs_io shutdown`).
    pub power_cut: bool,
    /// An S3 store for a repository of the service's, reached through the
    /// S3 fault proxy.
    pub s3: Option<S3Store>,
}

/// An S3 store (`.ci/s3-server.sh start` prints one), from the
/// environment: `VOUCH_S3_ENDPOINT` (plain HTTP on a loopback address:
/// the fault proxy speaks HTTP/1.1 without TLS) and the `AWS_*` keys.
#[derive(Clone, Debug)]
pub struct S3Store {
    /// Where it listens.
    pub upstream: SocketAddr,
    /// `AWS_ACCESS_KEY_ID`.
    pub access_key: String,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret_key: String,
}

impl S3Store {
    /// The store the environment names, if it names one the runner can
    /// put its proxy in front of.
    pub fn from_env() -> Option<S3Store> {
        let endpoint = std::env::var("VOUCH_S3_ENDPOINT").ok()?;
        let upstream = endpoint
            .strip_prefix("http://")?
            .trim_end_matches('/')
            .parse::<SocketAddr>()
            .ok()
            .filter(|a| a.ip().is_loopback())?;
        Some(S3Store {
            upstream,
            access_key: std::env::var("AWS_ACCESS_KEY_ID").ok()?,
            secret_key: std::env::var("AWS_SECRET_ACCESS_KEY").ok()?,
        })
    }
}

/// The service's S3 repository (`s3`), behind the S3 fault proxy.
pub struct S3Repo {
    /// The proxy between the service (and the runner's checks) and the
    /// store.
    pub proxy: S3FaultProxy,
    /// `s3:http://PROXY/BUCKET/PREFIX`.
    pub location: String,
    /// Its passphrase file.
    pub passphrase: PathBuf,
    /// The environment a `vouch` reaching it needs.
    pub env: Vec<(String, String)>,
}

/// How long one S3 request may take before the client gives up on it (and
/// retries): short, so that a stalled answer costs seconds.
pub const S3_TIMEOUT: &str = "10s";

/// One agent: its name, directory, tree and process.
pub struct AgentProc {
    /// Its name (`agent:NAME:/path` sources).
    pub name: String,
    /// Its data directory.
    pub dir: PathBuf,
    /// Its clock offset file (libfaketime).
    pub clock_file: PathBuf,
    /// The running process.
    pub child: Option<Child>,
    /// Stopped for good (its credential was revoked).
    pub retired: bool,
}

/// A running deployment.
pub struct Deployment {
    /// The options it was built with.
    pub opts: DeployOptions,
    /// The service's data directory.
    pub data: PathBuf,
    /// Its configuration file.
    pub config: PathBuf,
    /// Where the service listens (the same port across restarts).
    pub listen: SocketAddr,
    /// An admin client (its token from the first start).
    pub client: Client,
    /// The proxy the agents reach the service through.
    pub proxy: FaultProxy,
    /// The service's clock offset file (libfaketime).
    pub clock_file: PathBuf,
    /// The prefix of the service's libfiu control fifos.
    pub fiu_prefix: PathBuf,
    /// The agents.
    pub agents: Vec<AgentProc>,
    /// The S3 repository, when there is a store.
    pub s3: Option<S3Repo>,
    server: Option<Child>,
    // Dropped after the processes (fields drop in order).
    data_fs: Option<DataFs>,
}

/// The data directory's own file system.
enum DataFs {
    Tmpfs { _mount: Tmpfs },
    Xfs(LoopXfs),
}

/// The service's configuration for a run: fast schedules so that every
/// mechanism (verification, restore tests, read-back, scrub, prune, log
/// mirror) turns many times in a few minutes; the grace periods that
/// protect data (`prune_grace`) keep their defaults.
pub fn service_config(work: &Path) -> String {
    format!(
        "[sources]\nallow = [{:?}]\n\n\
         [scheduler]\ntick = \"1s\"\nmax_jitter = \"0s\"\n\n\
         [jobs]\nmax_concurrent = 2\nmax_attempts = 3\nretry_initial = \"2s\"\n\
         shutdown_grace = \"10s\"\nmin_every = \"1s\"\n\n\
         [alerting]\nevaluate_every = \"2s\"\n\n\
         [agents]\nlease_ttl = \"20s\"\n\n\
         [verification]\nread_back_window = \"60s\"\nread_back_slices = 4\n\n\
         [read_store]\ncheckpoint_every = \"5s\"\n\n\
         [log]\nscrub_every = \"20s\"\nmirror_every = \"10s\"\n\n\
         [maintenance]\nprune_every = \"30s\"\n",
        work.to_string_lossy()
    )
}

impl Deployment {
    /// Makes the directories, starts the service (and waits until it is
    /// ready), enrols and starts the agents.
    pub fn start(opts: DeployOptions) -> Result<Deployment, RunError> {
        let io = |what: &str, e| RunError::Io(what.to_owned(), e);
        fs::create_dir_all(opts.work.join("logs")).map_err(|e| io("creating logs", e))?;
        let data = opts.work.join("data");
        let data_fs = match opts.own_fs_bytes {
            Some(bytes) if opts.power_cut => Some(DataFs::Xfs(
                LoopXfs::mount(&opts.work.join("data.xfs"), &data, bytes)
                    .map_err(RunError::Chaos)?,
            )),
            Some(bytes) => Some(DataFs::Tmpfs {
                _mount: Tmpfs::mount(&data, bytes).map_err(RunError::Chaos)?,
            }),
            None => {
                fs::create_dir_all(&data).map_err(|e| io("creating data", e))?;
                None
            }
        };
        let s3 = match &opts.s3 {
            Some(store) => Some(s3_repository(&opts, store)?),
            None => None,
        };
        let config = opts.work.join("vouch.toml");
        let mut text = service_config(&opts.work);
        if let Some(r) = &s3 {
            text.push_str(&format!(
                "\n[[repositories]]\nid = \"s3\"\nlocation = {:?}\npassphrase_file = {:?}\n",
                r.location,
                r.passphrase.to_string_lossy()
            ));
        }
        fs::write(&config, text).map_err(|e| io("writing config", e))?;
        let clock_file = opts.work.join("clock-server");
        fs::write(&clock_file, "+0\n").map_err(|e| io("writing clock file", e))?;
        let listen = free_port().map_err(|e| io("finding a free port", e))?;
        let proxy = FaultProxy::start(listen).map_err(RunError::Chaos)?;
        let mut d = Deployment {
            fiu_prefix: opts.work.join("fiu-server"),
            opts,
            data,
            config,
            listen,
            client: Client {
                addr: listen,
                token: String::new(),
                timeout: Duration::from_secs(10),
            },
            proxy,
            clock_file,
            agents: Vec::new(),
            s3,
            server: None,
            data_fs,
        };
        d.start_server(&[])?;
        if d.wait_ready(Duration::from_secs(60)).is_none() {
            return Err(RunError::Deployment(
                "the service did not become ready within 60 s of its first start (see logs/server.log)"
                    .into(),
            ));
        }
        let token_file = d.data.join("initial-admin-token");
        d.client.token = fs::read_to_string(&token_file)
            .map_err(|e| io("reading the initial admin token", e))?
            .trim()
            .to_owned();
        for i in 0..d.opts.agents {
            d.enrol_agent(&format!("host{}", i + 1))?;
        }
        Ok(d)
    }

    /// The environment of the service or of an agent: the preloads the
    /// run's nemeses need.
    fn preload_env(&self, clock_file: &Path, fiu: bool) -> Vec<(String, String)> {
        let mut libs = Vec::new();
        let mut env = Vec::new();
        if self.opts.faketime {
            libs.push(FAKETIME_LIB.to_owned());
            env.push((
                "FAKETIME_TIMESTAMP_FILE".into(),
                clock_file.to_string_lossy().into_owned(),
            ));
            env.push(("FAKETIME_NO_CACHE".into(), "1".into()));
            // A step of the wall clock, as NTP or an operator makes it: the
            // monotonic clock goes on, and the times files carry stay what
            // they are (libfaketime would shift every stat() by the
            // offset, which no real clock step does: restore tests then
            // see every restored mtime differ from the manifest).
            env.push(("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()));
            env.push(("NO_FAKE_STAT".into(), "1".into()));
        }
        if fiu && self.opts.fiu {
            libs.push(FIU_RUN_LIB.to_owned());
            libs.push(FIU_POSIX_LIB.to_owned());
            env.push((
                "FIU_CTRL_FIFO".into(),
                self.fiu_prefix.to_string_lossy().into_owned(),
            ));
            env.push(("FIU_ENABLE".into(), String::new()));
        }
        if !libs.is_empty() {
            env.push(("LD_PRELOAD".into(), libs.join(" ")));
        }
        env
    }

    fn log_file(&self, name: &str) -> Result<fs::File, RunError> {
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.opts.work.join("logs").join(name))
            .map_err(|e| RunError::Io(format!("opening logs/{name}"), e))
    }

    /// Starts the service with `extra` environment (a failpoint); it must
    /// not be running.
    pub fn start_server(&mut self, extra: &[(&str, &str)]) -> Result<(), RunError> {
        let out = self.log_file("server.log")?;
        let err = out
            .try_clone()
            .map_err(|e| RunError::Io("cloning the log".into(), e))?;
        let child = Command::new(&self.opts.vouch)
            .arg("serve")
            .arg("--listen")
            .arg(self.listen.to_string())
            .arg("--data-dir")
            .arg(&self.data)
            .arg("--config")
            .arg(&self.config)
            .envs(self.preload_env(&self.clock_file.clone(), true))
            .envs(self.s3_env())
            .envs(extra.iter().copied())
            .env("VOUCH_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| RunError::Io(format!("starting {}", self.opts.vouch.display()), e))?;
        self.server = Some(child);
        Ok(())
    }

    /// The environment a `vouch` needs to reach the S3 repository (none
    /// without one).
    pub fn s3_env(&self) -> Vec<(String, String)> {
        self.s3.as_ref().map(|r| r.env.clone()).unwrap_or_default()
    }

    /// The service's pid, while it runs.
    pub fn server_pid(&self) -> Option<u32> {
        self.server.as_ref().map(Child::id)
    }

    /// Whether the service's process has exited (reaped if so).
    pub fn server_exited(&mut self) -> bool {
        match self.server.as_mut().map(Child::try_wait) {
            Some(Ok(Some(_))) | None => {
                self.server = None;
                true
            }
            _ => false,
        }
    }

    /// Waits until `/readyz` answers 200: how long it took, or `None`
    /// after `limit`.
    pub fn wait_ready(&mut self, limit: Duration) -> Option<Duration> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if self.client.ready() {
                return Some(start.elapsed());
            }
            if self.server_exited() {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    /// The data directory's file system loses power under the running
    /// service: stopped without a flush (`xfs_io shutdown`), the service
    /// killed, then unmounted and mounted again (its log replayed). The
    /// caller restarts the service.
    pub fn power_cut(&mut self) -> Result<(), RunError> {
        let cut = |d: &Deployment| match &d.data_fs {
            Some(DataFs::Xfs(fs)) => fs.power_cut().map_err(RunError::Chaos),
            _ => Err(RunError::Deployment(
                "the data directory is not on a file system that can lose power".into(),
            )),
        };
        cut(self)?;
        self.kill_server();
        match &self.data_fs {
            Some(DataFs::Xfs(fs)) => fs.remount(Duration::from_secs(5)).map_err(RunError::Chaos),
            _ => Ok(()),
        }
    }

    /// SIGKILL to the service, reaped.
    pub fn kill_server(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM to the service, then SIGKILL after `grace`; whether it
    /// stopped by itself.
    pub fn stop_server(&mut self, grace: Duration) -> bool {
        let Some(mut c) = self.server.take() else {
            return true;
        };
        signal(c.id(), libc::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < grace {
            if let Ok(Some(_)) = c.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = c.kill();
        let _ = c.wait();
        false
    }

    /// Registers an agent with a one-time enrollment token and starts it.
    pub fn enrol_agent(&mut self, name: &str) -> Result<(), RunError> {
        let token = self.vouch_token(&["create", "--role", "enroll", "--expires", "1h"])?;
        let dir = self.opts.work.join("agents").join(name);
        let clock_file = self.opts.work.join(format!("clock-{name}"));
        fs::write(&clock_file, "+0\n").map_err(|e| RunError::Io("clock file".into(), e))?;
        // The service reloads its tokens about once a second.
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let out = Command::new(&self.opts.vouch)
                .arg("agent")
                .arg("--server")
                .arg(format!("http://{}", self.proxy.addr()))
                .arg("--data-dir")
                .arg(&dir)
                .args(["--name", name, "--enroll-only"])
                .env("VOUCH_ENROLL_TOKEN", &token)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| RunError::Io("running vouch agent --enroll-only".into(), e))?;
            if out.status.success() {
                break;
            }
            if Instant::now() > until {
                return Err(RunError::Deployment(format!(
                    "agent {name} could not enrol: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        self.agents.push(AgentProc {
            name: name.to_owned(),
            dir,
            clock_file,
            child: None,
            retired: false,
        });
        let i = self.agents.len() - 1;
        self.start_agent(i, &[])
    }

    /// Starts agent `i` (it must not be running).
    pub fn start_agent(&mut self, i: usize, extra: &[(&str, &str)]) -> Result<(), RunError> {
        let name = self.agents[i].name.clone();
        let out = self.log_file(&format!("{name}.log"))?;
        let err = out
            .try_clone()
            .map_err(|e| RunError::Io("cloning the log".into(), e))?;
        let env = self.preload_env(&self.agents[i].clock_file.clone(), false);
        let child = Command::new(&self.opts.vouch)
            .arg("agent")
            .arg("--server")
            .arg(format!("http://{}", self.proxy.addr()))
            .arg("--data-dir")
            .arg(&self.agents[i].dir)
            .args(["--poll-wait", "5s"])
            .envs(env)
            .envs(extra.iter().copied())
            .env_remove("VOUCH_ENROLL_TOKEN")
            .env("VOUCH_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| RunError::Io("starting vouch agent".into(), e))?;
        self.agents[i].child = Some(child);
        Ok(())
    }

    /// Whether agent `i`'s process has exited (reaped if so).
    pub fn agent_exited(&mut self, i: usize) -> bool {
        match self.agents[i].child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(_))) | None => {
                self.agents[i].child = None;
                true
            }
            _ => false,
        }
    }

    /// SIGKILL to agent `i`, reaped.
    pub fn kill_agent(&mut self, i: usize) {
        if let Some(mut c) = self.agents[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Restarts every agent that exited (after a crash at a failpoint, or
    /// because it gave up).
    pub fn revive_agents(&mut self) -> Result<Vec<String>, RunError> {
        let mut revived = Vec::new();
        for i in 0..self.agents.len() {
            if self.agents[i].retired {
                continue;
            }
            if self.agent_exited(i) {
                self.start_agent(i, &[])?;
                revived.push(self.agents[i].name.clone());
            }
        }
        Ok(revived)
    }

    /// Runs `vouch token --data-dir DATA ARGS`: its output, trimmed.
    pub fn vouch_token(&self, args: &[&str]) -> Result<String, RunError> {
        let out = Command::new(&self.opts.vouch)
            .arg("token")
            .arg("--data-dir")
            .arg(&self.data)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| RunError::Io("running vouch token".into(), e))?;
        if !out.status.success() {
            return Err(RunError::Deployment(format!(
                "vouch token {args:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Stops everything: agents first, then the service (SIGTERM, then
    /// SIGKILL after 30 s); whether the service stopped by itself.
    pub fn stop_all(&mut self) -> bool {
        for i in 0..self.agents.len() {
            if let Some(c) = self.agents[i].child.as_ref() {
                signal(c.id(), libc::SIGTERM);
            }
        }
        for a in &mut self.agents {
            if let Some(mut c) = a.child.take() {
                let start = Instant::now();
                while start.elapsed() < Duration::from_secs(15) {
                    if let Ok(Some(_)) = c.try_wait() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        self.stop_server(Duration::from_secs(30))
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        for a in &mut self.agents {
            if let Some(mut c) = a.child.take() {
                signal(c.id(), libc::SIGCONT);
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if let Some(mut c) = self.server.take() {
            signal(c.id(), libc::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sends `sig` to `pid`.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a pid of a child this process started.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// A port on 127.0.0.1 nobody listens on now.
/// Starts the S3 fault proxy in front of `store` and makes a repository
/// there (a prefix of its own in the `vouch-chaos` bucket).
fn s3_repository(opts: &DeployOptions, store: &S3Store) -> Result<S3Repo, RunError> {
    let proxy = S3FaultProxy::start(store.upstream).map_err(RunError::Chaos)?;
    let mut name = [0u8; 6];
    crate::Rng::new(crate::Rng::seed_from_clock()).fill(&mut name);
    let prefix: String = name.iter().map(|b| format!("{b:02x}")).collect();
    let location = format!("s3:http://{}/vouch-chaos/run-{prefix}", proxy.addr());
    let passphrase = opts.work.join("s3.passphrase");
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&passphrase)?;
        writeln!(f, "chaos-{prefix}-{}", std::process::id())
    };
    write().map_err(|e| RunError::Io("writing the S3 repository's passphrase".into(), e))?;
    let env = vec![
        ("AWS_ACCESS_KEY_ID".to_owned(), store.access_key.clone()),
        ("AWS_SECRET_ACCESS_KEY".to_owned(), store.secret_key.clone()),
        ("VOUCH_S3_TIMEOUT".to_owned(), S3_TIMEOUT.to_owned()),
    ];
    let out = Command::new(&opts.vouch)
        .args(["init", "--repo", &location, "--password-file"])
        .arg(&passphrase)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| RunError::Io("running vouch init".into(), e))?;
    if !out.status.success() {
        return Err(RunError::Deployment(format!(
            "vouch init {location}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(S3Repo {
        proxy,
        location,
        passphrase,
        env,
    })
}

fn free_port() -> std::io::Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    l.local_addr()
}
