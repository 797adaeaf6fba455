//! Jobs: scheduled -> running -> succeeded | failed | abandoned, retries
//! counted.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::event::{Event, JobKind};
use crate::ids::{AgentId, JobId, PlanId, SnapshotId};
use crate::projection::{Inconsistency, Recorded};

/// Where a job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum JobState {
    /// Waiting to run.
    Scheduled,
    /// A worker runs it.
    Running,
    /// Done, successfully.
    Succeeded,
    /// Failed (see its error; it may be scheduled again).
    Failed,
    /// Its worker vanished.
    Abandoned,
}

impl JobState {
    /// Whether the job is over (until it is scheduled again).
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Abandoned
        )
    }

    /// The lower-case name used in the API.
    pub fn as_str(&self) -> &'static str {
        match self {
            JobState::Scheduled => "scheduled",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Abandoned => "abandoned",
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job's latest error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobError {
    /// Machine-readable kind.
    pub kind: String,
    /// For humans.
    pub message: String,
    /// Whether trying again may help.
    pub retryable: bool,
}

/// Everything known about one job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Its id.
    pub id: JobId,
    /// What it does.
    pub kind: JobKind,
    /// Its plan.
    pub plan: Option<PlanId>,
    /// The point it works on.
    pub point: Option<SnapshotId>,
    /// Where it is.
    pub state: JobState,
    /// Times a worker started it.
    pub starts: u32,
    /// The attempt number of the latest scheduling.
    pub attempt: u32,
    /// The agent of the latest start.
    pub agent: Option<AgentId>,
    /// Bytes done / total at the latest checkpoint.
    pub progress: Option<(u64, Option<u64>)>,
    /// The latest checkpoint's resume state.
    pub checkpoint: Option<Vec<u8>>,
    /// The latest error (failed or abandoned).
    pub last_error: Option<JobError>,
    /// When it was scheduled first.
    pub scheduled: Recorded,
    /// When its state last changed.
    pub updated: Recorded,
}

impl Job {
    /// Retries so far: starts after the first.
    pub fn retries(&self) -> u32 {
        self.starts.saturating_sub(1)
    }
}

/// How the latest backup job of a plan that ended, ended. Kept apart from
/// the job itself so that rescheduling or restarting a failed job under the
/// same id does not hide the failure: it stays until a later backup job of
/// the plan ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupOutcome {
    /// The job.
    pub job: JobId,
    /// `Succeeded`, `Failed` or `Abandoned`.
    pub state: JobState,
    /// When it ended.
    pub at: Recorded,
}

/// Every job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobsProjection {
    /// By id.
    pub jobs: BTreeMap<JobId, Job>,
    /// The latest ended backup job of each plan.
    pub last_backup: BTreeMap<PlanId, BackupOutcome>,
}

impl JobsProjection {
    pub(crate) fn apply(&mut self, at: Recorded, event: &Event) -> Option<Inconsistency> {
        let bad = |message: String| {
            Some(Inconsistency {
                at,
                event_type: event.event_type().to_owned(),
                point: None,
                message,
            })
        };
        match event {
            Event::JobScheduled(e) => {
                match self.jobs.get_mut(&e.job) {
                    Some(j) if !j.state.is_terminal() || j.state == JobState::Succeeded => {
                        return bad(format!("job {} scheduled again while {}", e.job, j.state));
                    }
                    Some(j) => {
                        j.state = JobState::Scheduled;
                        j.attempt = e.attempt;
                        j.updated = at;
                    }
                    None => {
                        self.jobs.insert(
                            e.job.clone(),
                            Job {
                                id: e.job.clone(),
                                kind: e.kind,
                                plan: e.plan.clone(),
                                point: e.point,
                                state: JobState::Scheduled,
                                starts: 0,
                                attempt: e.attempt,
                                agent: None,
                                progress: None,
                                checkpoint: None,
                                last_error: None,
                                scheduled: at,
                                updated: at,
                            },
                        );
                    }
                }
                None
            }
            Event::JobStarted(e) => {
                let Some(j) = self.jobs.get_mut(&e.job) else {
                    return bad(format!("job {} started but never scheduled", e.job));
                };
                // A failed or abandoned job may be restarted directly (retry).
                if matches!(j.state, JobState::Running | JobState::Succeeded) {
                    return bad(format!("job {} started while {}", e.job, j.state));
                }
                j.state = JobState::Running;
                j.starts += 1;
                j.agent = e.agent.clone();
                j.updated = at;
                None
            }
            Event::JobProgress(e) => {
                let Some(j) = self.jobs.get_mut(&e.job) else {
                    return bad(format!("progress of unknown job {}", e.job));
                };
                if j.state != JobState::Running {
                    return bad(format!("progress of job {} while {}", e.job, j.state));
                }
                j.progress = Some((e.done_bytes, e.total_bytes));
                j.checkpoint = Some(e.checkpoint.clone());
                None
            }
            Event::JobFinished(e) => self.finish(at, &e.job, JobState::Succeeded, None, event),
            Event::JobFailed(e) => self.finish(
                at,
                &e.job,
                JobState::Failed,
                Some(JobError {
                    kind: e.error_kind.clone(),
                    message: e.message.clone(),
                    retryable: e.retryable,
                }),
                event,
            ),
            Event::JobAbandoned(e) => self.finish(
                at,
                &e.job,
                JobState::Abandoned,
                Some(JobError {
                    kind: "abandoned".into(),
                    message: e.reason.clone(),
                    retryable: true,
                }),
                event,
            ),
            _ => None,
        }
    }

    fn finish(
        &mut self,
        at: Recorded,
        job: &JobId,
        state: JobState,
        error: Option<JobError>,
        event: &Event,
    ) -> Option<Inconsistency> {
        let bad = |message: String| {
            Some(Inconsistency {
                at,
                event_type: event.event_type().to_owned(),
                point: None,
                message,
            })
        };
        let Some(j) = self.jobs.get_mut(job) else {
            return bad(format!("job {job} ended but never scheduled"));
        };
        // Abandoning a scheduled job (its lease ran out before it started) is
        // allowed; finishing or failing one that never started is not.
        let ok = j.state == JobState::Running
            || state == JobState::Abandoned && j.state == JobState::Scheduled;
        if !ok {
            return bad(format!("job {job} cannot become {state} while {}", j.state));
        }
        j.state = state;
        if error.is_some() {
            j.last_error = error;
        }
        j.updated = at;
        if let (JobKind::Backup, Some(plan)) = (j.kind, j.plan.clone()) {
            self.last_backup.insert(
                plan,
                BackupOutcome {
                    job: job.clone(),
                    state,
                    at,
                },
            );
        }
        None
    }

    /// How the latest backup job of `plan` that ended, ended, if one did. A
    /// failure stays the answer while the job is scheduled or running again;
    /// only a later end (success or not) replaces it.
    pub fn last_ended_backup(&self, plan: &PlanId) -> Option<&BackupOutcome> {
        self.last_backup.get(plan)
    }
}
