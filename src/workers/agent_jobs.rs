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

use super::plan_tag;

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
