//! `vouch chaos run`: starts a deployment it controls (a `vouch serve`,
//! agents behind the fault proxy, their repositories), runs a workload of
//! plans on trees that change between runs, injects the faults of the
//! chosen scenarios on a schedule the seed fixes, samples the service
//! against the proof rules while it runs, and checks every invariant at
//! the end (docs/chaos.md).

pub mod checks;
pub mod deploy;
pub mod http;
pub mod nemesis;
pub mod observe;
pub mod report;
pub mod scenario;
pub mod workload;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use serde_json::json;

use crate::Rng;
use deploy::{DeployOptions, Deployment};
use observe::{inv, lock, Shared};
use report::Report;
use scenario::{FaultKind, Planned, Scenario};
use workload::Tree;

/// Why a run could not be made (not a broken invariant: those are in the
/// report).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// An I/O error with what was being done.
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    /// A chaos primitive failed.
    #[error(transparent)]
    Chaos(#[from] crate::ChaosError),
    /// The deployment could not be set up.
    #[error("{0}")]
    Deployment(String),
    /// SIGINT or SIGTERM: the deployment was stopped and the run ended
    /// without a verdict.
    #[error("interrupted: the deployment was stopped; its files and logs are in {0}")]
    Interrupted(PathBuf),
}

/// What `vouch chaos run` was asked to do.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The seed of the schedule and of every choice.
    pub seed: u64,
    /// How long faults are injected (the checks at the end come after).
    pub duration: Duration,
    /// The scenarios.
    pub scenarios: Vec<Scenario>,
    /// The `vouch` binary.
    pub vouch: PathBuf,
    /// Where the deployment lives (kept after the run for inspection).
    pub work: PathBuf,
    /// How many agents.
    pub agents: usize,
    /// How long the service may take to be ready after a fault.
    pub recovery_limit: Duration,
    /// How long the service may take to find injected damage.
    pub detection_window: Duration,
    /// A real directory copied as one plan's source (none: no real tree).
    pub real_tree: Option<PathBuf>,
    /// How often the service is sampled.
    pub sample_every: Duration,
    /// Print each fault on stderr as it happens.
    pub progress: bool,
}

/// One fault as it was injected.
#[derive(Clone, Debug, Serialize)]
pub struct FaultRecord {
    /// Its number in the run.
    pub n: usize,
    /// Seconds since the run began.
    pub at_s: f64,
    /// The runner's wall clock (RFC 3339).
    pub at: String,
    /// The nemesis.
    pub fault: String,
    /// What it hit.
    pub target: String,
    /// What happened.
    pub outcome: String,
    /// How long the service took to be ready again, when it was down.
    pub recovery_s: Option<f64>,
    /// Whether it could run here (else `outcome` says why not).
    pub injected: bool,
}

/// A plan of the workload.
pub struct WorkPlan {
    /// Its id.
    pub id: String,
    /// Its tree.
    pub tree: Tree,
    /// The agent that backs it up (none: the service).
    pub agent: Option<usize>,
    /// Backup jobs the runner asked for.
    pub jobs: Vec<String>,
}

/// A running chaos run.
pub struct Run {
    /// Its options.
    pub opts: RunOptions,
    /// The deployment.
    pub dep: Deployment,
    /// What the sampler and the runner saw.
    pub obs: Shared,
    /// When it began.
    pub t0: Instant,
    /// The faults so far.
    pub faults: Vec<FaultRecord>,
    /// The workload's plans.
    pub plans: Vec<WorkPlan>,
    /// Trees written by CLI clients and temporary agents (their snapshots
    /// are checked like the plans').
    pub other_trees: Vec<Tree>,
    /// Scheduled steps skipped or deferred, and why.
    pub notes: Vec<String>,
    /// Agents enrolled for revocation so far.
    pub revoked: usize,
    /// The bytes each open incident damaged, to put back.
    pub heals: Vec<nemesis::Heal>,
}

impl Run {
    /// Seconds since the run began.
    pub fn now_s(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Records a fault.
    pub fn record(
        &mut self,
        fault: FaultKind,
        target: String,
        outcome: String,
        recovery: Option<Duration>,
        injected: bool,
    ) {
        let n = self.faults.len() + 1;
        let rec = FaultRecord {
            n,
            at_s: self.now_s(),
            at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            fault: fault.name(),
            target,
            outcome,
            recovery_s: recovery.map(|d| d.as_secs_f64()),
            injected,
        };
        if self.opts.progress {
            eprintln!(
                "[{:7.1} s] fault {n} {}: {}: {}",
                rec.at_s, rec.fault, rec.target, rec.outcome
            );
        }
        self.faults.push(rec);
    }

    /// Waits for the service after a restart: the time it took, and a
    /// violation of `recovery-time` when it took longer than the limit.
    pub fn await_recovery(&mut self, what: &str) -> Option<Duration> {
        let limit = self.opts.recovery_limit;
        let took = self.dep.wait_ready(limit);
        let at = self.now_s();
        let mut o = lock(&self.obs);
        o.checked(inv::RECOVERY, 1);
        if took.is_none() {
            o.violated(
                inv::RECOVERY,
                at,
                format!(
                    "the service was not ready within {} s after {what}",
                    limit.as_secs()
                ),
            );
        }
        took
    }

    /// Makes sure the service runs: restarts it when it exited (a crash
    /// nobody planned is a violation of `clean-failures`).
    pub fn ensure_server(&mut self, why: &str) {
        if self.dep.server_exited() {
            // Damage the runner left in the log would make the restart
            // refuse to open it: put it back first.
            nemesis::heal_log_now(self);
            let at = self.now_s();
            lock(&self.obs).violated(
                inv::CLEAN,
                at,
                format!("the service had exited by itself ({why}); restarted"),
            );
            if self.dep.start_server(&[]).is_ok() {
                self.await_recovery("an unplanned exit");
            }
        }
    }

    /// After SIGINT or SIGTERM: the sampler and the deployment stopped,
    /// and the run ends without a verdict.
    fn stop_if_interrupted(&mut self, sampler: &AtomicBool) -> Result<(), RunError> {
        if !vouch::util::interrupted() {
            return Ok(());
        }
        sampler.store(true, Ordering::Relaxed);
        self.dep.stop_all();
        Err(RunError::Interrupted(self.opts.work.clone()))
    }

    /// The client of the service.
    pub fn client(&self) -> &http::Client {
        &self.dep.client
    }

    /// Runs `vouch` with `args`: exit code, stdout, stderr.
    pub fn vouch(&self, args: &[&str]) -> Result<(i32, String, String), RunError> {
        let out = Command::new(&self.opts.vouch)
            .args(args)
            .envs(self.dep.s3_env())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| RunError::Io(format!("running vouch {}", args.join(" ")), e))?;
        Ok((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// A workload step: one plan whose backups have all ended gets a
    /// change of its tree and a new run.
    pub fn workload_step(&mut self, seed: u64) {
        let mut rng = Rng::new(seed);
        let i = rng.below(self.plans.len() as u64) as usize;
        nemesis::run_plan(self, i, rng.next_u64());
    }

    /// Between steps (see [`nemesis::tend`]).
    pub fn tend(&mut self) {
        nemesis::tend(self);
    }

    /// Creates a plan of the run's shape for `source`.
    pub fn create_plan(&mut self, id: &str, source: &str) -> Result<(), RunError> {
        self.create_plan_in(id, source, None)
    }

    /// Creates a plan of the run's shape for `source` into `repository`
    /// (none: the service's choice, which for an agent's source is the
    /// agent's own repository).
    pub fn create_plan_in(
        &mut self,
        id: &str,
        source: &str,
        repository: Option<&str>,
    ) -> Result<(), RunError> {
        let mut plan = json!({
            "id": id,
            "source": source,
            // Never due by itself: the runner starts every backup, so each
            // is one the runner knows the tree of.
            "schedule": "0 0 1 1 *",
            "rpo": "1h",
            "retention": {"last": 4, "hourly": null, "daily": null, "weekly": null,
                          "monthly": null, "yearly": null, "within": null},
            "verification": {"after_backup": true, "every": "30s", "depth": "read-all"},
            "restore_test": {"every": "15s", "max_evidence_age": "1h",
                             "sample_files": 1000, "full_every": null},
        });
        if let Some(r) = repository {
            plan["repository"] = json!(r);
        }
        match self.client().post_json("/api/v1/plans", &plan) {
            Ok((201, _)) => Ok(()),
            Ok((status, body)) => Err(RunError::Deployment(format!(
                "creating plan {id}: {status} {body}"
            ))),
            Err(e) => Err(RunError::Deployment(format!("creating plan {id}: {e}"))),
        }
    }
}

/// The `vouch` binary next to this one (how `vouch chaos` finds it and
/// how the installed pair is laid out), else `vouch` on PATH.
pub fn default_vouch() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("vouch")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("vouch"))
}

/// The first real directory of a Debian system worth backing up.
pub fn default_real_tree() -> Option<PathBuf> {
    ["/usr/share/doc", "/usr/share/common-licenses", "/etc"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_dir())
}

/// What the machine lets the run do, for the scenarios chosen.
fn deploy_options(opts: &RunOptions) -> DeployOptions {
    let wants = |s| opts.scenarios.contains(&s);
    DeployOptions {
        vouch: opts.vouch.clone(),
        work: opts.work.clone(),
        agents: opts.agents,
        faketime: wants(Scenario::Clock) && Path::new(deploy::FAKETIME_LIB).exists(),
        fiu: wants(Scenario::Disk)
            && Path::new(deploy::FIU_RUN_LIB).exists()
            && Path::new(deploy::FIU_POSIX_LIB).exists(),
        own_fs_bytes: ((wants(Scenario::Disk) || wants(Scenario::Crash)) && crate::is_root())
            .then_some(3 << 30),
        power_cut: wants(Scenario::Crash) && crate::loopfs::available(),
        s3: deploy::S3Store::from_env(),
    }
}

/// Runs the whole thing: deployment, workload, faults, end checks.
pub fn run(opts: RunOptions) -> Result<Report, RunError> {
    let schedule = scenario::schedule(opts.seed, opts.duration, &opts.scenarios);
    let dep = Deployment::start(deploy_options(&opts))?;
    let t0 = Instant::now();
    let mut run = Run {
        dep,
        obs: Shared::default(),
        t0,
        faults: Vec::new(),
        plans: Vec::new(),
        other_trees: Vec::new(),
        notes: Vec::new(),
        revoked: 0,
        heals: Vec::new(),
        opts,
    };
    set_up_workload(&mut run)?;
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = observe::sampler(
        run.dep.client.clone(),
        run.obs.clone(),
        t0,
        run.opts.sample_every,
        stop.clone(),
    );
    for step in &schedule {
        let due = t0 + Duration::from_millis(step.at_ms);
        while Instant::now() < due {
            run.stop_if_interrupted(&stop)?;
            run.tend();
            std::thread::sleep(
                Duration::from_millis(200).min(due.saturating_duration_since(Instant::now())),
            );
        }
        run.tend();
        execute(&mut run, step);
    }
    let end = t0 + run.opts.duration;
    while Instant::now() < end {
        run.stop_if_interrupted(&stop)?;
        run.tend();
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let checks = checks::finish(&mut run);
    Ok(Report::new(&run, &schedule, checks))
}

/// What `vouch chaos run --server URL --token-file F` watches.
#[derive(Clone, Debug)]
pub struct AttachOptions {
    /// The service (plain HTTP: a loopback listener, or a tunnel to one).
    pub server: std::net::SocketAddr,
    /// An admin or viewer token.
    pub token: String,
    /// How long to watch.
    pub duration: Duration,
    /// How often to sample.
    pub sample_every: Duration,
}

/// Watches a deployment the runner does not control: it injects nothing
/// (the operator breaks what they want meanwhile) and checks what can be
/// checked from the API: events never lost or changed, the proof rules at
/// every sample, alerts and jobs once. The other invariants need the
/// processes and files and are reported as not checked.
pub fn attach(opts: AttachOptions) -> Result<Report, RunError> {
    let client = http::Client {
        addr: opts.server,
        token: opts.token,
        timeout: Duration::from_secs(10),
    };
    match client.get_json("/api/v1/whoami") {
        Ok(_) => {}
        Err(e) => {
            return Err(RunError::Deployment(format!(
                "the service at {} does not answer with this token: {e}",
                opts.server
            )))
        }
    }
    let t0 = Instant::now();
    let obs = Shared::default();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = observe::sampler(
        client.clone(),
        obs.clone(),
        t0,
        opts.sample_every,
        stop.clone(),
    );
    std::thread::sleep(opts.duration);
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let invariants = checks::attached(&client, &obs, t0);
    let o = lock(&obs);
    Ok(Report::from_parts(report::Parts {
        replay: report::ReplayKey {
            seed: 0,
            duration_s: opts.duration.as_secs(),
            scenarios: Vec::new(),
            agents: 0,
        },
        replay_command: "(attached to a deployment: nothing was injected, nothing to replay)"
            .into(),
        work_dir: String::new(),
        took_s: t0.elapsed().as_secs_f64(),
        planned_faults: 0,
        faults: Vec::new(),
        observed: &o,
        invariants,
        notes: vec![format!("attached to http://{}", opts.server)],
    }))
}

fn execute(run: &mut Run, step: &Planned) {
    match step.fault {
        None => run.workload_step(step.seed),
        Some(kind) => nemesis::inject(run, kind, step.seed),
    }
}

/// The plans and trees: two on the service's host (a generated tree and,
/// when there is one, a copy of a real directory), one per agent.
fn set_up_workload(run: &mut Run) -> Result<(), RunError> {
    let io = |what: &str, e| RunError::Io(what.to_owned(), e);
    let trees = run.opts.work.join("trees");
    let mut rng = Rng::new(run.opts.seed ^ 0x5eed);
    let gen = Tree::generate(&trees.join("local-gen"), 80, &mut rng)
        .map_err(|e| io("generating a tree", e))?;
    run.create_plan("local-gen", &gen.root.to_string_lossy())?;
    run.plans.push(WorkPlan {
        id: "local-gen".into(),
        tree: gen,
        agent: None,
        jobs: Vec::new(),
    });
    if let Some(real) = run.opts.real_tree.clone() {
        let t = Tree::copy_of(&real, &trees.join("local-real"), 1500, 24 << 20)
            .map_err(|e| io("copying the real tree", e))?;
        run.create_plan("local-real", &t.root.to_string_lossy())?;
        run.plans.push(WorkPlan {
            id: "local-real".into(),
            tree: t,
            agent: None,
            jobs: Vec::new(),
        });
    }
    if run.dep.s3.is_some() {
        let t = Tree::generate(&trees.join("local-s3"), 40, &mut rng)
            .map_err(|e| io("generating a tree", e))?;
        run.create_plan_in("local-s3", &t.root.to_string_lossy(), Some("s3"))?;
        run.plans.push(WorkPlan {
            id: "local-s3".into(),
            tree: t,
            agent: None,
            jobs: Vec::new(),
        });
    }
    for i in 0..run.dep.agents.len() {
        let name = run.dep.agents[i].name.clone();
        let t = Tree::generate(&trees.join(&name), 40, &mut rng)
            .map_err(|e| io("generating a tree", e))?;
        let id = format!("on-{name}");
        run.create_plan(&id, &format!("agent:{name}:{}", t.root.display()))?;
        run.plans.push(WorkPlan {
            id,
            tree: t,
            agent: Some(i),
            jobs: Vec::new(),
        });
    }
    let client = Tree::generate(&trees.join("cli-client"), 30, &mut rng)
        .map_err(|e| io("generating a tree", e))?;
    run.other_trees.push(client);
    // A first backup of every plan.
    for p in 0..run.plans.len() {
        let id = run.plans[p].id.clone();
        if let Ok((202, job)) = run
            .client()
            .post_json(&format!("/api/v1/plans/{id}/run"), &json!({}))
        {
            if let Some(j) = job["id"].as_str() {
                run.plans[p].jobs.push(j.to_owned());
            }
        }
    }
    Ok(())
}
