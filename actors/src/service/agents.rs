//! The agents' job board: where a backup of an `agent:NAME:/path` plan
//! waits for its agent, and the leases of the jobs agents took.
//!
//! The dispatcher runs an agent's backup like any other job: it records
//! `job.started` and hands the command to the backup worker. That worker
//! (in the engine package) does not back anything up itself; it
//! [`offers`](AgentBoard::offer) the job here and waits. The agent's
//! long-poll ([`AgentBoard::next`]) claims it; the web layer appends
//! `agent.lease_granted` and [`grants`](AgentBoard::grant) the lease under
//! that event's seq, the fencing token every later upload and result must
//! carry. Leases run on this process's monotonic clock: an agent's clock,
//! however skewed, is never read. A lease not renewed in time
//! [expires](AgentBoard::expire_job): the job fails as retryable with
//! `agent.lease_expired` among its events, the dispatcher schedules the
//! next attempt, and anything the old lease sends later is refused.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, Notify};
use vouch_events::{Event, JobId, LeaseExpired, PlanId, RepositoryId};

use super::command::{JobFailure, JobOutput};

/// The `error_kind` of a backup whose agent's lease ran out.
pub const LEASE_EXPIRED: &str = "lease_expired";

/// The `error_kind` of a backup whose plan asks for what its source's
/// kind does not do (hooks or files of a guest), or its agent cannot (an
/// agent too old to run hooks).
pub const OPTIONS_UNSUPPORTED: &str = "options_unsupported";

/// What an agent is asked to do: back up one path of its host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentJob {
    /// The job.
    pub job: JobId,
    /// Its plan.
    pub plan: PlanId,
    /// The agent it is for.
    pub agent: String,
    /// The path on the agent's host (the part of the source after
    /// `agent:NAME:`).
    pub path: String,
    /// The repository to back up into.
    pub repository: RepositoryId,
    /// The tag the snapshot must carry (ties it to its plan).
    pub tag: String,
    /// Set for a restore job (then `path` is the path inside the point
    /// and `tag` is empty).
    pub restore: Option<AgentRestore>,
    /// A backup's further paths and exclusions (the plan's `files`).
    pub files: vouch_events::FileSelection,
    /// A backup's hooks, run from the agent's own hook directory (the
    /// plan's `hooks`).
    pub hooks: vouch_events::BackupHooks,
}

/// What a restore job asks of an agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentRestore {
    /// The point (64 hex digits).
    pub point: String,
    /// The directory on the agent's host to restore into.
    pub destination: String,
}

/// How a job ended, as the worker waiting on it learns.
pub type JobResult = Result<JobOutput, JobFailure>;

struct Offer {
    job: AgentJob,
    done: oneshot::Sender<JobResult>,
}

struct Lease {
    offer: Offer,
    expires: Instant,
    /// Snapshots committed under this lease.
    committed: Vec<Committed>,
}

/// A snapshot the server accepted under a lease, as it read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    /// Its id, 64 hex digits.
    pub id: String,
    /// When the server accepted it, by the server's clock (the manifest's
    /// own time is the agent's clock, which may be skewed).
    pub time_unix_ns: i64,
    /// Files in it.
    pub files: u64,
    /// Bytes the backup read from its source.
    pub bytes: u64,
    /// Bytes the backup found new.
    pub added_bytes: u64,
    /// Bytes of all files in it (its logical size), when known.
    pub total_bytes: Option<u64>,
    /// Entries the backup could not read and left out, when known.
    pub warnings: Option<u64>,
}

#[derive(Default)]
struct Board {
    queued: HashMap<String, VecDeque<Offer>>,
    leases: HashMap<u64, Lease>,
}

/// A job an agent's long-poll took off the queue, not yet leased: grant it
/// (or release it, if recording the grant failed).
pub struct Claim {
    offer: Offer,
}

impl Claim {
    /// The job claimed.
    pub fn job(&self) -> &AgentJob {
        &self.offer.job
    }

    /// Ends the claimed job with `failure` without leasing it (the agent
    /// that claimed it cannot run it).
    pub fn refuse(self, failure: JobFailure) {
        // A worker that stopped waiting has nothing to be told.
        let _ = self.offer.done.send(Err(failure));
    }
}

/// Why a lease-bound call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// No current lease has this fencing token: it expired, its job was
    /// cancelled or retried, or it never existed.
    #[error("lease {0} is not current (it expired, or its job was cancelled or given to another attempt): stop this job")]
    NotCurrent(u64),
    /// The lease is another agent's.
    #[error("lease {0} belongs to another agent")]
    NotYours(u64),
    /// A result names a snapshot not committed under this lease.
    #[error("snapshot {0} was not committed under this lease")]
    ForeignSnapshot(String),
}

/// The current state of one lease, for checks of uploads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseView {
    /// The job.
    pub job: AgentJob,
    /// Time left before it expires.
    pub remaining: Duration,
}

/// One lease as listed for the console and the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSummary {
    /// Its fencing token.
    pub fence: u64,
    /// The job.
    pub job: AgentJob,
    /// Time left before it expires.
    pub remaining: Duration,
}

/// The board. Shared (`Arc`) by the backup worker and the web layer.
#[derive(Default)]
pub struct AgentBoard {
    board: Mutex<Board>,
    arrived: Notify,
}

impl std::fmt::Debug for AgentBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBoard").finish_non_exhaustive()
    }
}

impl AgentBoard {
    /// An empty board.
    pub fn new() -> Self {
        Self::default()
    }

    fn board(&self) -> std::sync::MutexGuard<'_, Board> {
        self.board.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a job for its agent; the receiver gets its end.
    pub fn offer(&self, job: AgentJob) -> oneshot::Receiver<JobResult> {
        let (done, rx) = oneshot::channel();
        let agent = job.agent.clone();
        self.board()
            .queued
            .entry(agent)
            .or_default()
            .push_back(Offer { job, done });
        self.arrived.notify_waiters();
        rx
    }

    /// Takes a job back (the dispatcher cancelled it or gave up): from the
    /// queue, or from its lease, which is then no longer current.
    pub fn withdraw(&self, job: &JobId) {
        let mut b = self.board();
        for q in b.queued.values_mut() {
            q.retain(|o| &o.job.job != job);
        }
        b.leases.retain(|_, l| &l.offer.job.job != job);
    }

    /// The next job for `agent`, waiting up to `wait` for one to arrive.
    pub async fn next(&self, agent: &str, wait: Duration) -> Option<Claim> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            {
                let mut b = self.board();
                if let Some(q) = b.queued.get_mut(agent) {
                    // A waiter that gave up (its receiver dropped) is skipped.
                    while let Some(offer) = q.pop_front() {
                        if !offer.done.is_closed() {
                            return Some(Claim { offer });
                        }
                    }
                }
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return None;
            }
        }
    }

    /// Leases a claimed job under `fence` (the seq of its
    /// `agent.lease_granted`) for `ttl`.
    pub fn grant(&self, claim: Claim, fence: u64, ttl: Duration) -> AgentJob {
        let job = claim.offer.job.clone();
        self.board().leases.insert(
            fence,
            Lease {
                offer: claim.offer,
                expires: Instant::now() + ttl,
                committed: Vec::new(),
            },
        );
        job
    }

    /// Puts a claimed job back at the head of its agent's queue.
    pub fn release(&self, claim: Claim) {
        let agent = claim.offer.job.agent.clone();
        self.board()
            .queued
            .entry(agent)
            .or_default()
            .push_front(claim.offer);
        self.arrived.notify_waiters();
    }

    fn current<'a>(
        b: &'a mut Board,
        agent: &str,
        fence: u64,
        now: Instant,
    ) -> Result<&'a mut Lease, LeaseError> {
        let lease = b
            .leases
            .get_mut(&fence)
            .filter(|l| l.expires > now && !l.offer.done.is_closed())
            .ok_or(LeaseError::NotCurrent(fence))?;
        if lease.offer.job.agent != agent {
            return Err(LeaseError::NotYours(fence));
        }
        Ok(lease)
    }

    /// The lease `fence` of `agent`, if current.
    pub fn check(&self, agent: &str, fence: u64) -> Result<LeaseView, LeaseError> {
        let now = Instant::now();
        let mut b = self.board();
        let l = Self::current(&mut b, agent, fence, now)?;
        Ok(LeaseView {
            job: l.offer.job.clone(),
            remaining: l.expires - now,
        })
    }

    /// Extends a current lease to `ttl` from now.
    pub fn renew(&self, agent: &str, fence: u64, ttl: Duration) -> Result<AgentJob, LeaseError> {
        let now = Instant::now();
        let mut b = self.board();
        let l = Self::current(&mut b, agent, fence, now)?;
        l.expires = now + ttl;
        Ok(l.offer.job.clone())
    }

    /// Notes that a snapshot was committed under a current lease.
    pub fn committed(
        &self,
        agent: &str,
        fence: u64,
        snapshot: Committed,
    ) -> Result<(), LeaseError> {
        let now = Instant::now();
        let mut b = self.board();
        let l = Self::current(&mut b, agent, fence, now)?;
        l.committed.push(snapshot);
        Ok(())
    }

    /// What was committed as `snapshot` under the current lease `fence`,
    /// and the lease's job.
    pub fn committed_snapshot(
        &self,
        agent: &str,
        fence: u64,
        snapshot: &str,
    ) -> Result<(AgentJob, Committed), LeaseError> {
        let now = Instant::now();
        let mut b = self.board();
        let l = Self::current(&mut b, agent, fence, now)?;
        let c = l
            .committed
            .iter()
            .find(|c| c.id == snapshot)
            .cloned()
            .ok_or_else(|| LeaseError::ForeignSnapshot(snapshot.to_owned()))?;
        Ok((l.offer.job.clone(), c))
    }

    /// Ends a current lease with its job's result. A success must name a
    /// snapshot committed under this lease (`snapshot`); the worker gets
    /// `result`.
    pub fn finish(
        &self,
        agent: &str,
        fence: u64,
        snapshot: Option<&str>,
        result: JobResult,
    ) -> Result<AgentJob, LeaseError> {
        let now = Instant::now();
        let mut b = self.board();
        let l = Self::current(&mut b, agent, fence, now)?;
        if let Some(s) = snapshot {
            if !l.committed.iter().any(|c| c.id == s) {
                return Err(LeaseError::ForeignSnapshot(s.to_owned()));
            }
        }
        let lease = b
            .leases
            .remove(&fence)
            .ok_or(LeaseError::NotCurrent(fence))?;
        let job = lease.offer.job.clone();
        // The worker may have stopped waiting (cancelled) in between: the
        // result then has nobody to go to, which is what cancel means.
        let _ = lease.offer.done.send(result);
        Ok(job)
    }

    /// If the lease of `job` ran out, ends it: the waiting worker gets a
    /// retryable failure carrying `agent.lease_expired`. Returns whether it
    /// did. The backup worker calls this while it waits.
    pub fn expire_job(&self, job: &JobId) -> bool {
        let now = Instant::now();
        let mut b = self.board();
        let Some(fence) = b
            .leases
            .iter()
            .find(|(_, l)| &l.offer.job.job == job && l.expires <= now)
            .map(|(f, _)| *f)
        else {
            return false;
        };
        let Some(lease) = b.leases.remove(&fence) else {
            return false;
        };
        let agent = lease.offer.job.agent.clone();
        let failure = JobFailure {
            kind: LEASE_EXPIRED.into(),
            message: format!(
                "agent {agent} stopped renewing its lease (fencing token {fence}); the job is given to another attempt and anything the old lease sends is refused"
            ),
            retryable: true,
            events: vec![Event::from(LeaseExpired {
                agent: vouch_events::AgentId::new(&agent),
                job: job.clone(),
            })],
        };
        let _ = lease.offer.done.send(Err(failure));
        true
    }

    /// The current leases of `agent` (every agent's when `None`).
    pub fn leases(&self, agent: Option<&str>) -> Vec<LeaseSummary> {
        let now = Instant::now();
        let b = self.board();
        let mut out: Vec<LeaseSummary> = b
            .leases
            .iter()
            .filter(|(_, l)| l.expires > now)
            .filter(|(_, l)| agent.is_none_or(|a| l.offer.job.agent == a))
            .map(|(f, l)| LeaseSummary {
                fence: *f,
                job: l.offer.job.clone(),
                remaining: l.expires - now,
            })
            .collect();
        out.sort_by_key(|l| l.fence);
        out
    }

    /// Jobs waiting for `agent`.
    pub fn queued(&self, agent: &str) -> usize {
        self.board().queued.get(agent).map_or(0, |q| q.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(agent: &str, n: u8) -> AgentJob {
        AgentJob {
            job: JobId::new(format!("job-{n}")),
            plan: PlanId::new("p"),
            agent: agent.into(),
            path: "/etc".into(),
            repository: RepositoryId::new(format!("agent-{agent}")),
            tag: "vouch-plan:p".into(),
            restore: None,
            files: Default::default(),
            hooks: Default::default(),
        }
    }

    #[tokio::test]
    async fn a_job_reaches_only_its_agent_and_a_waiting_poll_wakes() {
        let board = std::sync::Arc::new(AgentBoard::new());
        let b = board.clone();
        let waiting = tokio::spawn(async move { b.next("web-1", Duration::from_secs(5)).await });
        tokio::task::yield_now().await;
        assert!(board
            .next("db-1", Duration::from_millis(10))
            .await
            .is_none());
        let _rx = board.offer(job("web-1", 1));
        let claim = waiting
            .await
            .unwrap()
            .expect("the waiting poll got the job");
        assert_eq!(claim.job().job, JobId::new("job-1"));
        assert!(board
            .next("db-1", Duration::from_millis(10))
            .await
            .is_none());
    }

    #[tokio::test]
    async fn only_the_current_lease_of_its_own_agent_may_finish() {
        let board = AgentBoard::new();
        let rx = board.offer(job("web-1", 1));
        let claim = board.next("web-1", Duration::ZERO).await.unwrap();
        board.grant(claim, 42, Duration::from_secs(60));
        assert_eq!(
            board.check("db-1", 42).unwrap_err(),
            LeaseError::NotYours(42)
        );
        assert_eq!(
            board.check("web-1", 41).unwrap_err(),
            LeaseError::NotCurrent(41)
        );
        assert!(matches!(
            board.finish("web-1", 42, Some("abc"), Ok(JobOutput::default())),
            Err(LeaseError::ForeignSnapshot(_))
        ));
        board
            .committed(
                "web-1",
                42,
                Committed {
                    id: "abc".into(),
                    time_unix_ns: 1,
                    files: 1,
                    bytes: 1,
                    added_bytes: 1,
                    total_bytes: Some(1),
                    warnings: Some(0),
                },
            )
            .unwrap();
        board
            .finish("web-1", 42, Some("abc"), Ok(JobOutput::default()))
            .unwrap();
        assert!(rx.await.unwrap().is_ok());
        // Finished: the same fence is no longer current.
        assert_eq!(
            board
                .renew("web-1", 42, Duration::from_secs(1))
                .unwrap_err(),
            LeaseError::NotCurrent(42)
        );
    }

    #[tokio::test]
    async fn an_expired_lease_fails_its_job_and_refuses_late_results() {
        let board = AgentBoard::new();
        let rx = board.offer(job("web-1", 1));
        let claim = board.next("web-1", Duration::ZERO).await.unwrap();
        board.grant(claim, 7, Duration::from_millis(20));
        assert!(!board.expire_job(&JobId::new("job-1")), "not yet expired");
        std::thread::sleep(Duration::from_millis(30));
        // Late results and renewals are refused even before the sweep.
        assert_eq!(
            board.renew("web-1", 7, Duration::from_secs(1)).unwrap_err(),
            LeaseError::NotCurrent(7)
        );
        assert!(board.expire_job(&JobId::new("job-1")));
        let failure = rx.await.unwrap().unwrap_err();
        assert_eq!(failure.kind, LEASE_EXPIRED);
        assert!(failure.retryable);
        assert_eq!(failure.events.len(), 1);
        assert!(board
            .finish("web-1", 7, None, Ok(JobOutput::default()))
            .is_err());
    }

    #[tokio::test]
    async fn a_released_claim_goes_back_first_and_a_withdrawn_job_is_gone() {
        let board = AgentBoard::new();
        let _a = board.offer(job("web-1", 1));
        let _b = board.offer(job("web-1", 2));
        let claim = board.next("web-1", Duration::ZERO).await.unwrap();
        board.release(claim);
        let again = board.next("web-1", Duration::ZERO).await.unwrap();
        assert_eq!(again.job().job, JobId::new("job-1"));
        board.grant(again, 9, Duration::from_secs(60));
        board.withdraw(&JobId::new("job-1"));
        assert!(board.check("web-1", 9).is_err());
        board.withdraw(&JobId::new("job-2"));
        assert_eq!(board.queued("web-1"), 0);
    }
}
