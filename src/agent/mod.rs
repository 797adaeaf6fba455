//! The agent (`vouch agent`, docs/agents.md): it protects the host it runs
//! on by *pulling* its jobs from a `vouch serve` (the host opens no port),
//! running the engine locally and writing into its own repository through
//! the repository protocol, under the job's lease.
//!
//! Its data directory holds what registration gave it, readable only by
//! its user:
//!
//! | file | what |
//! |---|---|
//! | `agent.json` | server URL, name, repository, pinned fingerprint |
//! | `credential` | its token (role `agent`), 0600 |
//! | `repository.passphrase` | its repository's passphrase, 0600 |
//! | `sessions/` | the journals of backups not yet committed (resume) |

#[cfg(unix)]
mod btrfs;
pub mod platform;

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::http::Method;
use serde::{Deserialize, Serialize};
use serde_json::json;
use zeroize::Zeroizing;

use crate::backend::http::HttpBackend;
use crate::backup::{backup, BackupOptions};
use crate::error::Error;
use crate::http_client::{split_url, Answer, ClientOptions, HttpClient, Request};
use crate::progress::Progress;
use crate::repo::Repository;
use crate::tls_pin::Pin;
use crate::workers::hooks::Hooked;
use vouch_actors::service::JobFailure;
use vouch_events::{Event, JobId, PlanId};
use vouch_web::LeasedJob;

/// `text` as a result's field takes it: control characters (but newlines
/// and tabs, where `keep_lines`) become spaces, and at most `max`
/// characters, the end cut.
fn wire_text(text: &str, max: usize, keep_lines: bool) -> String {
    let mut out: String = text
        .chars()
        .map(|c| {
            if c.is_control() && !(keep_lines && (c == '\n' || c == '\t')) {
                ' '
            } else {
                c
            }
        })
        .take(max)
        .collect();
    if out.trim().is_empty() {
        out = "(no message)".into();
    }
    out
}

/// The `hook_failures` of a result, from the job's `hook.failed` events.
fn hook_failures_json(events: &[Event]) -> serde_json::Value {
    events
        .iter()
        .filter_map(|e| match e {
            Event::HookFailed(h) => Some(json!({
                "phase": h.phase.as_str(),
                "hook": h.hook,
                "exit_code": h.exit_code,
                "timed_out": h.timed_out,
                "reason": wire_text(&h.reason, vouch_web::HOOK_REASON_MAX, true),
                "took_ms": h.took_ms,
            })),
            _ => None,
        })
        .collect()
}

/// The body of a failed job's result.
fn failure_body(f: &JobFailure) -> serde_json::Value {
    let mut body = json!({
        "error_kind": wire_text(&f.kind, vouch_web::RESULT_ERROR_KIND_MAX, false),
        "error": wire_text(&f.message, vouch_web::RESULT_ERROR_MAX, false),
        "retryable": f.retryable,
    });
    let hooks = hook_failures_json(&f.events);
    if hooks.as_array().is_some_and(|a| !a.is_empty()) {
        body["hook_failures"] = hooks;
    }
    body
}

/// Errors of the agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Its data directory is missing, damaged or not private.
    #[error("agent state in {dir}: {message}")]
    State {
        /// The data directory.
        dir: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Registration failed.
    #[error("registration failed: {0}")]
    Enroll(String),
    /// The server refused the agent's credential: it was revoked.
    #[error("the server refuses this agent's credential ({0}); it was revoked or the agent removed: register again with a new enrollment token")]
    Revoked(String),
    /// The server could not be reached or answered nonsense.
    #[error("{0}")]
    Server(String),
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] Error),
}

/// What registration gave the agent, besides its secrets.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AgentState {
    /// The server's base URL (`https://host:port`).
    pub server: String,
    /// The agent's name.
    pub name: String,
    /// Its repository's id (`agent-NAME`).
    pub repository: String,
    /// The server certificate's SHA-256, when pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}

const STATE_FILE: &str = "agent.json";
const CREDENTIAL_FILE: &str = "credential";
const PASSPHRASE_FILE: &str = "repository.passphrase";

/// How an agent runs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// How long one long-poll waits for a job.
    pub poll_wait: Duration,
    /// Stop after this many jobs (tests; `None`: run until interrupted).
    pub max_jobs: Option<u64>,
    /// Transport settings (timeouts, retries).
    pub client: ClientOptions,
    /// The directory of the programs plans may run as hooks (none: a
    /// plan with hooks fails its backups saying so).
    pub hooks_dir: Option<PathBuf>,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            poll_wait: Duration::from_secs(30),
            max_jobs: None,
            client: ClientOptions::default(),
            hooks_dir: None,
        }
    }
}

fn state_error(dir: &Path, message: impl Into<String>) -> AgentError {
    AgentError::State {
        dir: dir.to_path_buf(),
        message: message.into(),
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

fn read_private(dir: &Path, file: &str) -> Result<Zeroizing<String>, AgentError> {
    let path = dir.join(file);
    let meta = std::fs::metadata(&path)
        .map_err(|e| state_error(dir, format!("{file}: {e} (register with --enroll first)")))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(state_error(
            dir,
            format!(
                "{file} is readable by others (mode {:o}): chmod 600 it",
                meta.permissions().mode() & 0o777
            ),
        ));
    }
    let text =
        std::fs::read_to_string(&path).map_err(|e| state_error(dir, format!("{file}: {e}")))?;
    Ok(Zeroizing::new(text.trim().to_owned()))
}

/// Whether `dir` holds a registered agent.
pub fn is_registered(dir: &Path) -> bool {
    dir.join(STATE_FILE).exists()
}

fn client(
    server: &str,
    token: Zeroizing<String>,
    fingerprint: Option<&str>,
    options: &ClientOptions,
) -> Result<HttpClient, AgentError> {
    let pin = fingerprint
        .map(Pin::sha256)
        .transpose()
        .map_err(AgentError::Enroll)?;
    HttpClient::new(
        server,
        token,
        ClientOptions {
            pin,
            ..options.clone()
        },
    )
    .map_err(AgentError::Server)
}

/// Registers with `enroll_token` as `name`, and keeps what the server gave
/// in `dir` (made 0700).
pub fn enroll(
    dir: &Path,
    server: &str,
    enroll_token: &str,
    name: &str,
    fingerprint: Option<&str>,
) -> Result<AgentState, AgentError> {
    if is_registered(dir) {
        return Err(state_error(
            dir,
            "this directory holds a registered agent already; start it without --enroll, or use another --data-dir",
        ));
    }
    let (origin, _) = split_url(server).map_err(AgentError::Enroll)?;
    let c = client(
        &origin,
        Zeroizing::new(enroll_token.trim().to_owned()),
        fingerprint,
        &ClientOptions::default(),
    )?;
    let host = platform::current().hostname();
    let body = json!({
        "name": name,
        "hostname": host,
        "os": platform::current().os_name(),
        "version": env!("CARGO_PKG_VERSION"),
    });
    let a = c
        .call(&Request::new(Method::POST, "/api/v1/agent/register").json(&body))
        .map_err(AgentError::Enroll)?;
    if a.status != 200 {
        return Err(AgentError::Enroll(format!("{}: {}", a.status, a.message())));
    }
    #[derive(Deserialize)]
    struct Registration {
        agent: String,
        token: String,
        repository: String,
        repository_passphrase: String,
    }
    let r: Registration = serde_json::from_slice(&a.body)
        .map_err(|e| AgentError::Enroll(format!("the server's answer does not parse: {e}")))?;
    let r = (
        r.agent,
        Zeroizing::new(r.token),
        r.repository,
        Zeroizing::new(r.repository_passphrase),
    );
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| state_error(dir, e.to_string()))?;
    let state = AgentState {
        server: origin,
        name: r.0,
        repository: r.2,
        fingerprint: fingerprint.map(str::to_owned),
    };
    let io = |e: std::io::Error| state_error(dir, e.to_string());
    write_private(&dir.join(CREDENTIAL_FILE), r.1.as_bytes()).map_err(io)?;
    write_private(&dir.join(PASSPHRASE_FILE), r.3.as_bytes()).map_err(io)?;
    let text = serde_json::to_vec_pretty(&state).map_err(|e| state_error(dir, e.to_string()))?;
    // Written last: its presence means the registration is complete.
    write_private(&dir.join(STATE_FILE), &text).map_err(io)?;
    tracing::info!(agent = %state.name, repository = %state.repository, "registered");
    Ok(state)
}

/// A registered agent, ready to poll.
pub struct Agent {
    dir: PathBuf,
    state: AgentState,
    client: Arc<HttpClient>,
    passphrase: Zeroizing<String>,
    options: AgentOptions,
    repo: Option<Arc<Repository>>,
    backend: Option<Arc<HttpBackend>>,
}

impl Agent {
    /// The agent registered in `dir`.
    pub fn open(dir: &Path, options: AgentOptions) -> Result<Agent, AgentError> {
        let text = std::fs::read(dir.join(STATE_FILE)).map_err(|e| {
            state_error(
                dir,
                format!("{STATE_FILE}: {e} (register with --enroll first)"),
            )
        })?;
        let state: AgentState = serde_json::from_slice(&text)
            .map_err(|e| state_error(dir, format!("{STATE_FILE} is damaged: {e}")))?;
        let token = read_private(dir, CREDENTIAL_FILE)?;
        let passphrase = read_private(dir, PASSPHRASE_FILE)?;
        let client = client(
            &state.server,
            token,
            state.fingerprint.as_deref(),
            &options.client,
        )?;
        Ok(Agent {
            dir: dir.to_path_buf(),
            state,
            client: Arc::new(client),
            passphrase,
            options,
            repo: None,
            backend: None,
        })
    }

    /// Its registration.
    pub fn state(&self) -> &AgentState {
        &self.state
    }

    /// What its client moved so far (bytes sent and received, calls).
    pub fn traffic(&self) -> &crate::http_client::Traffic {
        self.client.traffic()
    }

    fn check_credential(&self, a: &Answer) -> Result<(), AgentError> {
        if a.status == 401 {
            return Err(AgentError::Revoked(a.message()));
        }
        Ok(())
    }

    /// Polls and runs jobs until interrupted (or `max_jobs` ran).
    pub fn run(&mut self) -> Result<u64, AgentError> {
        let mut done = 0u64;
        let mut pause = Duration::from_secs(1);
        tracing::info!(agent = %self.state.name, server = %self.state.server, "polling for jobs");
        while !crate::util::interrupted() && self.options.max_jobs.is_none_or(|m| done < m) {
            match self.poll_once() {
                Ok(true) => {
                    done += 1;
                    pause = Duration::from_secs(1);
                }
                Ok(false) => pause = Duration::from_secs(1),
                Err(e @ AgentError::Revoked(_)) => return Err(e),
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?pause, "polling failed");
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(60));
                }
            }
        }
        Ok(done)
    }

    /// One long-poll; runs the job it brings. Whether there was one.
    pub fn poll_once(&mut self) -> Result<bool, AgentError> {
        let wait = self.options.poll_wait.as_secs().max(1);
        let a = self
            .client
            .call(
                &Request::new(Method::GET, format!("/api/v1/agent/jobs?wait={wait}s"))
                    // Its clock and version, for the security center.
                    .header(
                        vouch_web::AGENT_CLOCK_HEADER,
                        std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_millis())
                            .to_string(),
                    )
                    .header(vouch_web::AGENT_VERSION_HEADER, env!("CARGO_PKG_VERSION"))
                    // What it can run beyond the first protocol: a job
                    // that needs what is not named is not leased to it.
                    .header(vouch_web::AGENT_FEATURES_HEADER, vouch_web::FEATURE_HOOKS),
            )
            .map_err(AgentError::Server)?;
        self.check_credential(&a)?;
        match a.status {
            204 => Ok(false),
            200 => {
                let job: LeasedJob = serde_json::from_slice(&a.body)
                    .map_err(|e| AgentError::Server(format!("a job that does not parse: {e}")))?;
                self.run_job(job)?;
                Ok(true)
            }
            s => Err(AgentError::Server(format!(
                "polling for jobs: {s}: {}",
                a.message()
            ))),
        }
    }

    fn repository(&mut self, id: &str) -> Result<(Arc<Repository>, Arc<HttpBackend>), AgentError> {
        if id != self.state.repository {
            return Err(AgentError::Server(format!(
                "the server asked for a backup into {id:?}, but this agent's repository is {:?}",
                self.state.repository
            )));
        }
        if let (Some(r), Some(b)) = (&self.repo, &self.backend) {
            return Ok((r.clone(), b.clone()));
        }
        let backend = Arc::new(HttpBackend::new(
            self.client.clone(),
            &format!("/repo/v1/{id}"),
        )?);
        let mut repo = Repository::open(backend.clone(), self.passphrase.as_bytes())?;
        // The repository's index, snapshots and trees, kept here: an
        // unchanged tree's second backup then fetches nothing but listings.
        match crate::repo::cache::Cache::open(&self.dir.join("cache"), &repo.config().id) {
            Ok(cache) => repo = repo.with_cache(Arc::new(cache)),
            Err(e) => tracing::warn!("working without a cache: {e}"),
        }
        let repo = Arc::new(repo);
        self.repo = Some(repo.clone());
        self.backend = Some(backend.clone());
        Ok((repo, backend))
    }

    fn run_job(&mut self, job: LeasedJob) -> Result<(), AgentError> {
        let span =
            tracing::info_span!("agent_job", job = %job.job, plan = %job.plan, lease = job.lease);
        let _enter = span.enter();
        tracing::info!(path = %job.path, "job leased");
        let lease = job.lease;
        let stop = Arc::new(AtomicBool::new(false));
        let lost = Arc::new(AtomicBool::new(false));
        let renewer = self.start_renewing(&job, stop.clone(), lost.clone());
        let traffic_before = self.client.traffic().totals();
        let outcome = if job.kind == "restore" {
            self.restore(&job)
                .map(|(files, bytes)| json!({"restored_files": files, "restored_bytes": bytes}))
                .map_err(|e| crate::workers::failure_of(&e, false))
        } else {
            self.back_up(&job, lost.clone())
        };
        stop.store(true, Ordering::SeqCst);
        let _ = renewer.join();
        if let Some(b) = &self.backend {
            b.set_lease(None);
        }
        let moved = self.client.traffic().totals().since(traffic_before);
        tracing::info!(
            sent = moved.sent,
            received = moved.received,
            requests = moved.requests,
            "network use of the job (bodies, renewals included)"
        );
        let body = match &outcome {
            Ok(body) => body.clone(),
            Err(f) => failure_body(f),
        };
        if lost.load(Ordering::SeqCst) {
            tracing::warn!(
                "the lease was lost: the result is not sent (the server would refuse it)"
            );
            return Ok(());
        }
        let a = self
            .client
            .call(
                &Request::new(Method::POST, format!("/api/v1/agent/leases/{lease}/result"))
                    .json(&body),
            )
            .map_err(AgentError::Server)?;
        self.check_credential(&a)?;
        match (a.status, &outcome) {
            (204, Ok(body)) => {
                tracing::info!(kind = %job.kind, result = %body, "job done; reported");
                Ok(())
            }
            (204, Err(f)) => {
                tracing::warn!(kind = %job.kind, error_kind = %f.kind, error = %f.message, "job failed; reported");
                Ok(())
            }
            (409, _) => {
                tracing::warn!(answer = %a.message(), "the server refused the result: the lease was no longer current");
                Ok(())
            }
            (s, _) => Err(AgentError::Server(format!(
                "reporting the result: {s}: {}",
                a.message()
            ))),
        }
    }

    /// Runs a leased backup between its hooks: the body of its result, or
    /// its failure (with the `hook.failed` of its hooks, if any failed).
    fn back_up(
        &mut self,
        job: &LeasedJob,
        lost: Arc<AtomicBool>,
    ) -> Result<serde_json::Value, JobFailure> {
        let started = Instant::now();
        if job.kind != "backup" {
            return Err(JobFailure::new(
                "unknown_job",
                format!(
                    "this agent does not know jobs of kind {:?}; update it",
                    job.kind
                ),
                false,
            ));
        }
        let (selection, hooks) = vouch_web::leased_options(job).map_err(|why| {
            JobFailure::new(
                "invalid_job",
                format!("the leased job's options do not validate on this agent ({why}): update the agent"),
                false,
            )
        })?;
        let (job_id, plan_id) = (JobId::new(&job.job), PlanId::new(&job.plan));
        let hooks_dir = self.options.hooks_dir.clone();
        let hooked = Hooked::new(
            hooks_dir.as_deref(),
            &hooks,
            &job_id,
            &plan_id,
            lost.clone(),
        );
        hooked.pre()?;
        let (snapshot, stored) = match self.back_up_files(job, &selection, lost) {
            Ok(done) => done,
            Err(e) => return Err(hooked.post_failed(crate::workers::failure_of(&e, false))),
        };
        let mut body = json!({
            "snapshot": snapshot,
            "stored_bytes": stored,
            "duration_ms": started.elapsed().as_millis() as u64,
        });
        let post: Vec<Event> = hooked.post_ok(&snapshot).into_iter().collect();
        if !post.is_empty() {
            body["hook_failures"] = hook_failures_json(&post);
        }
        Ok(body)
    }

    /// The backup itself: the snapshot committed, and bytes stored.
    fn back_up_files(
        &mut self,
        job: &LeasedJob,
        selection: &vouch_events::FileSelection,
        lost: Arc<AtomicBool>,
    ) -> Result<(String, u64), Error> {
        let (repo, backend) = self
            .repository(&job.repository)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        backend.set_lease(Some(job.lease));
        let progress = Arc::new(Progress::default());
        let source = PathBuf::from(&job.path);
        // A consistent view where the platform can make one (a btrfs
        // snapshot); it is removed when `frozen` drops, after the backup.
        let frozen = match platform::current().freeze(&source) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(path = %source.display(), "could not freeze the source, reading it live: {e}");
                None
            }
        };
        if let Some(f) = &frozen {
            tracing::info!(path = %source.display(), "reading from {}", f.describe());
        }
        // The further paths are read live: only the source's own path is
        // frozen.
        let selected = crate::workers::hooks::file_options(&job.path, selection);
        let opts = BackupOptions {
            read_from: frozen
                .iter()
                .map(|f| (source.clone(), f.read_path().to_path_buf()))
                .collect(),
            exclude_paths: frozen.iter().flat_map(|f| f.skip()).collect(),
            tags: vec![job.tag.clone()],
            host: Some(self.state.name.clone()),
            cancel: Some(lost),
            // One journal per plan: a killed agent's next attempt resumes.
            session_dir: Some(
                self.dir
                    .join("sessions")
                    .join(&blake3::hash(job.plan.as_bytes()).to_hex()[..32]),
            ),
            ..selected
        };
        let outcome = backup(&repo, &opts, progress.clone());
        drop(frozen);
        let outcome = outcome?;
        Ok((
            outcome.snapshot.to_hex(),
            Progress::get(&progress.bytes_stored),
        ))
    }

    /// Restores the leased point (or a path in it) into its destination on
    /// this host, resumably (an interrupted restore of the same point into
    /// the same directory continues where it stopped); files and bytes.
    /// The restore engine takes no cancel flag: a lease lost meanwhile
    /// only means its result is refused (the files are still right).
    fn restore(&mut self, job: &LeasedJob) -> Result<(u64, u64), Error> {
        let (Some(point), Some(destination)) = (&job.point, &job.destination) else {
            return Err(Error::InvalidArgument(
                "a restore job without a point or a destination".into(),
            ));
        };
        let (repo, backend) = self
            .repository(&job.repository)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        // Its lock file is written under the lease.
        backend.set_lease(Some(job.lease));
        let id = crate::id::SnapshotId::from_hex(point)
            .map_err(|e| Error::InvalidArgument(format!("point {point:?}: {e}")))?;
        let progress = Arc::new(Progress::default());
        let opts = crate::restore::RestoreOptions {
            target: PathBuf::from(destination),
            subpath: (job.path != "/").then(|| job.path.clone()),
            ..Default::default()
        };
        let summary = crate::restore::restore(&repo, &id, &opts, progress)?;
        Ok((summary.files, summary.total_bytes))
    }

    /// Renews the lease every third of its time until `stop`; sets `lost`
    /// when the server says it is no longer current (the backup then
    /// stops: nothing it commits could be reported).
    fn start_renewing(
        &self,
        job: &LeasedJob,
        stop: Arc<AtomicBool>,
        lost: Arc<AtomicBool>,
    ) -> std::thread::JoinHandle<()> {
        let client = self.client.clone();
        let lease = job.lease;
        let every = Duration::from_secs(job.lease_seconds.max(3) / 3);
        std::thread::spawn(move || {
            let mut next = Instant::now() + every;
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(100));
                if Instant::now() < next {
                    continue;
                }
                next = Instant::now() + every;
                match client.call(&Request::new(
                    Method::POST,
                    format!("/api/v1/agent/leases/{lease}/renew"),
                )) {
                    Ok(a) if a.ok() => tracing::debug!(lease, "lease renewed"),
                    Ok(a) if a.status == 409 || a.status == 403 || a.status == 401 => {
                        tracing::warn!(lease, answer = %a.message(), "the lease is lost; stopping the job");
                        lost.store(true, Ordering::SeqCst);
                        return;
                    }
                    Ok(a) => {
                        tracing::warn!(lease, status = a.status, "renewal failed; trying again")
                    }
                    Err(e) => tracing::warn!(lease, error = %e, "renewal failed; trying again"),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the server's result checks refuse never leaves the agent: a
    /// pre hook's stderr (newlines, escapes, any length) inside `error`.
    #[test]
    fn a_failure_body_passes_the_servers_text_rules() {
        let reason = format!(
            "exited with status 1: \u{1b}[31mlocked\u{1b}[0m\r\n{}",
            "x".repeat(5000)
        );
        let mut f = JobFailure::new(
            "pre_hook_failed",
            format!("the hook failed: {reason}"),
            true,
        );
        f.events.push(
            vouch_events::HookFailed {
                job: JobId::new("j"),
                plan: PlanId::new("p"),
                phase: vouch_events::HookPhase::Pre,
                hook: "dump-db".into(),
                exit_code: Some(1),
                timed_out: false,
                reason,
                took_ms: 5,
            }
            .into(),
        );
        let body = failure_body(&f);
        let error = body["error"].as_str().unwrap();
        assert_eq!(error.chars().count(), vouch_web::RESULT_ERROR_MAX);
        assert!(!error.chars().any(char::is_control), "{error:?}");
        let hook = &body["hook_failures"][0];
        assert_eq!(hook["phase"], "pre");
        assert_eq!(hook["exit_code"], 1);
        let reason = hook["reason"].as_str().unwrap();
        assert_eq!(reason.chars().count(), vouch_web::HOOK_REASON_MAX);
        assert!(reason.contains("locked [0m \n"), "{reason:?}");
        assert!(!reason.contains('\u{1b}') && !reason.contains('\r'));
        // Nothing to say is still something the server takes.
        assert_eq!(wire_text("\u{7}", 10, false), "(no message)");
        // A success names no hook failures.
        assert!(failure_body(&JobFailure::new("k", "m", false))
            .get("hook_failures")
            .is_none());
    }
}
