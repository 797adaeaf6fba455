//! Simulated workers: every job handed to them waits in an inbox until the
//! simulator decides how it ends (succeeds, fails, finds damage, panics), or
//! hangs until the service goes away. Nothing here runs on a timer, so the
//! order in which jobs end is the simulator's choice, drawn from its seed.

use std::sync::{Arc, Mutex, PoisonError};

use actix::prelude::*;
use tokio::sync::oneshot;
use vouch_actors::service::{CancelToken, JobCommand, JobFailure, JobOutput, RunJob};
use vouch_events::JobId;

pub use super::outcome::Ending;

/// A job waiting for its ending.
pub struct Pending {
    /// The job.
    pub job: JobId,
    /// What it was asked to do.
    pub command: JobCommand,
    /// Whether the dispatcher asked it to stop.
    pub cancel: CancelToken,
    end: oneshot::Sender<Ending>,
}

impl Pending {
    /// Ends the job.
    pub fn end(self, ending: Ending) {
        // The dispatcher may be gone (a restart): nobody listens, fine.
        let _ = self.end.send(ending);
    }
}

/// The jobs handed to the workers and not ended yet, in arrival order.
#[derive(Clone, Default)]
pub struct Inbox(Arc<Mutex<Vec<Pending>>>);

impl Inbox {
    /// How many jobs wait.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// The ids and commands of the waiting jobs, in arrival order.
    pub fn list(&self) -> Vec<(JobId, JobCommand, bool)> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|p| (p.job.clone(), p.command.clone(), p.cancel.is_cancelled()))
            .collect()
    }

    /// Takes the `i`th waiting job out.
    pub fn take(&self, i: usize) -> Option<Pending> {
        let mut v = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        (i < v.len()).then(|| v.remove(i))
    }

    fn push(&self, p: Pending) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(p);
    }
}

/// One actor serves every kind of job.
pub struct SimWorker {
    /// Where jobs wait.
    pub inbox: Inbox,
}

impl Actor for SimWorker {
    type Context = Context<Self>;
}

impl Handler<RunJob> for SimWorker {
    type Result = ResponseFuture<Result<JobOutput, JobFailure>>;

    fn handle(&mut self, msg: RunJob, _: &mut Self::Context) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        self.inbox.push(Pending {
            job: msg.job,
            command: msg.command,
            cancel: msg.cancel,
            end: tx,
        });
        Box::pin(async move {
            match rx.await {
                Ok(Ending::Answer(a)) => a,
                Ok(Ending::Panic) => panic!("simulated worker panic"),
                // The simulator dropped the job (the service is going away).
                Err(_) => Err(JobFailure::new(
                    "lost",
                    "the simulated worker went away",
                    true,
                )),
            }
        })
    }
}
