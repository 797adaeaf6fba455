//! Backups of `agent:NAME:/path` plans: the service never reads that path
//! on its own host (security review finding 14). The worker offers the job
//! on the [`AgentBoard`], where the agent's long-poll takes it under a
//! lease, and waits for the agent's result, the lease's expiry, or a
//! cancellation, whichever comes first.

use std::sync::Arc;
use std::time::Duration;

use vouch_actors::service::{AgentBoard, AgentJob, AgentRestore, JobFailure, JobOutput, RunJob};
use vouch_events::sources::agent_repository;
use vouch_events::PlanId;

use super::{plan_tag, RepoSet};

/// How often a waiting job looks at its cancel flag and its lease.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// The job's repository if it is `agent`'s own (an agent reads and
/// writes no other); a failure saying what to do otherwise.
fn own_repository(
    msg: &RunJob,
    agent: &str,
    what_to_do: &str,
) -> Result<vouch_events::RepositoryId, JobFailure> {
    let repository = msg.command.repository().clone();
    let own = agent_repository(agent);
    if repository.as_str() == own {
        return Ok(repository);
    }
    Err(JobFailure::new(
        "agent_repository",
        format!(
            "agent {agent} uses only its own repository {own:?}, and this job's is {:?}: {what_to_do}",
            repository.as_str()
        ),
        false,
    ))
}

/// Offers one restore to its agent and waits for its end.
pub(crate) async fn restore_on_agent(
    board: Arc<AgentBoard>,
    msg: RunJob,
    agent: &str,
    point: &vouch_events::SnapshotId,
    spec: &vouch_events::RestoreSpec,
) -> Result<JobOutput, JobFailure> {
    let repository = own_repository(
        &msg,
        agent,
        "this point is in another: restore it on the server instead",
    )?;
    let job = AgentJob {
        job: msg.job.clone(),
        plan: msg
            .command
            .plan()
            .cloned()
            .unwrap_or_else(|| PlanId::new("")),
        agent: agent.to_owned(),
        path: spec.path.clone(),
        repository,
        tag: String::new(),
        restore: Some(AgentRestore {
            point: point.to_hex(),
            destination: spec.destination.clone(),
        }),
        files: Default::default(),
        hooks: Default::default(),
    };
    wait_for_agent(board, msg, job).await
}

/// Offers one backup to its agent and waits for its end.
pub(crate) async fn run_on_agent(
    board: Arc<AgentBoard>,
    msg: RunJob,
    plan: PlanId,
    agent: &str,
    path: &str,
    files: vouch_events::FileSelection,
    hooks: vouch_events::BackupHooks,
) -> Result<JobOutput, JobFailure> {
    let repository = own_repository(&msg, agent, "change the plan's repository")?;
    let job = AgentJob {
        job: msg.job.clone(),
        tag: plan_tag(&plan),
        plan,
        agent: agent.to_owned(),
        path: path.to_owned(),
        repository,
        restore: None,
        files,
        hooks,
    };
    wait_for_agent(board, msg, job).await
}

/// Offers `offered` on the board and waits for the agent's result, the
/// lease's expiry, or a cancellation.
async fn wait_for_agent(
    board: Arc<AgentBoard>,
    msg: RunJob,
    offered: AgentJob,
) -> Result<JobOutput, JobFailure> {
    let job = msg.job.clone();
    let span = tracing::info_span!("agent_job", job = %job, agent = %offered.agent);
    let _enter = span.enter();
    tracing::info!("offered to the agent");
    let mut done = board.offer(offered);
    let mut tick = tokio::time::interval(CHECK_EVERY);
    loop {
        tokio::select! {
            result = &mut done => {
                return result.unwrap_or_else(|_| {
                    Err(JobFailure::new(
                        "internal",
                        "the agents' job board dropped this job; it is retried",
                        true,
                    ))
                });
            }
            _ = tick.tick() => {
                if msg.cancel.is_cancelled() {
                    board.withdraw(&job);
                    return Err(JobFailure::new("cancelled", "cancelled by request", false));
                }
                // An expired lease sends its failure on `done`.
                board.expire_job(&job);
            }
        }
    }
}

/// What the server weighs an agent's backup against once the agent says
/// it committed it: the ransomware heuristic runs here, on the agent's own
/// repository (which the server holds the key of), exactly as on a backup
/// the server made, so an agent's host being encrypted is seen too.
pub(crate) struct AgentWeigh {
    pub(crate) repos: Arc<RepoSet>,
    pub(crate) plan: PlanId,
    pub(crate) history: vouch_actors::service::BackupHistory,
    pub(crate) anomaly_lock: Option<Duration>,
    pub(crate) last_good: Option<vouch_events::SnapshotId>,
}

impl AgentWeigh {
    /// `out` with its `backup.committed` given the change figures, and
    /// the `anomaly.detected` (and the plan's anomaly lock) when the
    /// backup looks like files being encrypted. A comparison that cannot
    /// run leaves the result as the agent gave it (logged).
    pub(crate) async fn weigh(self, out: JobOutput) -> JobOutput {
        let fallback = out.clone();
        match tokio::task::spawn_blocking(move || self.weigh_blocking(out)).await {
            Ok(out) => out,
            Err(e) => {
                tracing::warn!(error = %e, "the comparison of the agent's backup stopped; recorded without it");
                fallback
            }
        }
    }

    fn weigh_blocking(self, mut out: JobOutput) -> JobOutput {
        let Some((i, committed)) = out.events.iter().enumerate().find_map(|(i, e)| match e {
            vouch_events::Event::BackupCommitted(b) => Some((i, b.clone())),
            _ => None,
        }) else {
            return out;
        };
        let _span = tracing::info_span!("ransomware_heuristic", snapshot = %committed.snapshot.short(), agent_backup = true).entered();
        let repo = match self.repos.open(&committed.repository) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "the agent's repository cannot be opened; its backup is not compared");
                return out;
            }
        };
        let manifest = match repo.load_snapshot(&crate::id::SnapshotId(committed.snapshot.0)) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "the agent's snapshot cannot be read; its backup is not compared");
                return out;
            }
        };
        let (changes, anomaly) =
            super::compare_manifest(&repo, &manifest, None, &self.history, &committed.summary);
        if let vouch_events::Event::BackupCommitted(b) = &mut out.events[i] {
            b.changes = changes;
        }
        let weigh = super::Weigh {
            history: &self.history,
            anomaly_lock: self.anomaly_lock,
            last_good: self.last_good,
        };
        super::push_anomaly(
            &mut out.events,
            &repo,
            &self.plan,
            committed.snapshot,
            anomaly,
            &weigh,
        );
        out
    }
}
