//! The error type of the service's actors and of [`ServiceHandle`](super::ServiceHandle).

use vouch_events::{EventError, JobId, PlanId, RepositoryId};

/// What can go wrong when asking the service to do something.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The event log refused or failed a write; nothing was acknowledged.
    #[error("the event log could not record this: {0}")]
    Log(#[from] EventError),
    /// A read of the event log met a record it cannot read: the answer
    /// would be incomplete, so there is none (never a silently short one).
    #[error("the event log could not be read to the end (the answer would be incomplete): {0}")]
    LogUnreadable(EventError),
    /// An actor is gone (the service is stopping, or it crashed and is
    /// being restarted): retry in a moment.
    #[error("the service is not available: {0}")]
    Unavailable(String),
    /// No such plan.
    #[error("no plan named {0:?}")]
    NoSuchPlan(PlanId),
    /// No such job.
    #[error("no job {0}")]
    NoSuchJob(JobId),
    /// A backup of this plan is already scheduled or running.
    #[error("a backup of plan {0} is already scheduled or running")]
    AlreadyRunning(PlanId),
    /// The job already ended.
    #[error("job {0} already ended")]
    AlreadyEnded(JobId),
    /// No such repository.
    #[error("no repository {0}")]
    NoSuchRepository(RepositoryId),
    /// What was given does not match what the service holds (a key
    /// export's check code that is not the repository's key's).
    #[error("{0}")]
    Mismatch(String),
    /// The service is shutting down and takes no new jobs.
    #[error("the service is shutting down and takes no new jobs")]
    ShuttingDown,
}

impl From<actix::MailboxError> for ServiceError {
    fn from(e: actix::MailboxError) -> Self {
        ServiceError::Unavailable(e.to_string())
    }
}

impl From<tokio::task::JoinError> for ServiceError {
    fn from(e: tokio::task::JoinError) -> Self {
        ServiceError::Unavailable(format!("a background task failed: {e}"))
    }
}
