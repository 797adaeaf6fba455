//! `vouch agent`: registers with a service (first start, with a one-time
//! enrollment token) and then pulls and runs its jobs. See
//! `docs/agents.md`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use crate::agent::{self, Agent, AgentOptions};

/// Options of `vouch agent`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch agent --server https://vouch.example:8420 --enroll TOKEN --fingerprint SHA256
  vouch agent                                  after enrolling: pulls its jobs
  vouch agent --hooks-dir /etc/vouch/hooks

EXIT STATUS
  0  stopped cleanly; 1 it failed (the log says why); 2 wrong usage")]
pub struct AgentArgs {
    /// The service's URL (`https://HOST:PORT`).
    #[arg(long, env = "VOUCH_SERVER")]
    pub server: Option<String>,
    /// Where the agent keeps its credential and its repository's
    /// passphrase (made 0700).
    #[arg(long, env = "VOUCH_AGENT_DIR", default_value = "vouch-agent")]
    pub data_dir: PathBuf,
    /// A one-time enrollment token (`vouch token create --role enroll` on
    /// the server), for the first start only; better passed in
    /// VOUCH_ENROLL_TOKEN, which `ps` does not show.
    #[arg(long, env = "VOUCH_ENROLL_TOKEN", hide_env_values = true)]
    pub enroll: Option<String>,
    /// The agent's name, for the first start only: `[a-z0-9][a-z0-9._-]*`;
    /// its plans' sources are `agent:NAME:/path`.
    #[arg(long)]
    pub name: Option<String>,
    /// The SHA-256 fingerprint of the server's certificate (as `vouch
    /// serve` prints it), pinned at the first start; without it the
    /// system's public roots are trusted.
    #[arg(long)]
    pub fingerprint: Option<String>,
    /// How long one poll waits for a job.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub poll_wait: Duration,
    /// The directory of the programs this host runs as plans' hooks (an
    /// absolute path; only its administrator should be able to write to
    /// it). A plan names a file here, never a command line; without it,
    /// a plan with hooks fails its backups saying so.
    #[arg(long, env = "VOUCH_AGENT_HOOKS_DIR")]
    pub hooks_dir: Option<PathBuf>,
    /// Exit after this many jobs (default: run until interrupted).
    #[arg(long)]
    pub jobs: Option<u64>,
    /// Register and exit.
    #[arg(long)]
    pub enroll_only: bool,
}

/// Runs `vouch agent`.
pub fn run(a: AgentArgs) -> anyhow::Result<i32> {
    if let Some(token) = &a.enroll {
        let server = a
            .server
            .as_deref()
            .context("--server is needed to register")?;
        let name = a.name.as_deref().context("--name is needed to register")?;
        let state = agent::enroll(&a.data_dir, server, token, name, a.fingerprint.as_deref())?;
        eprintln!(
            "registered as agent {:?}; its backups go into repository {:?}. Its credential is in {} (mode 0600).",
            state.name,
            state.repository,
            a.data_dir.display()
        );
        if a.enroll_only {
            return Ok(0);
        }
    } else if !agent::is_registered(&a.data_dir) {
        anyhow::bail!(
            "{} holds no registered agent: start it once with --server URL --enroll TOKEN --name NAME",
            a.data_dir.display()
        );
    }
    let hooks_dir = a
        .hooks_dir
        .as_deref()
        .map(|d| crate::hooks::check_dir(d, "--hooks-dir"))
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let mut agent = Agent::open(
        &a.data_dir,
        AgentOptions {
            poll_wait: a.poll_wait,
            max_jobs: a.jobs,
            hooks_dir,
            ..AgentOptions::default()
        },
    )?;
    if a.server
        .as_deref()
        .is_some_and(|s| s.trim_end_matches('/') != agent.state().server)
    {
        tracing::warn!(
            registered = %agent.state().server,
            "--server differs from the server this agent registered with; the registered one is used"
        );
    }
    // Under systemd (`Type=notify`): ready once registered and about to
    // poll; stopping when it leaves its loop.
    let _ = sd_notify::notify(
        false,
        &[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status("polling for jobs"),
        ],
    );
    let ran = agent.run();
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    let jobs = ran?;
    tracing::info!(jobs, "agent stopped");
    Ok(0)
}
