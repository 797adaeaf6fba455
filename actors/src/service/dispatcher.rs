//! The dispatcher: the job queue. It records every step of a job as events
//! before acting on it (`job.scheduled`, `job.started`, then the worker's
//! events with `job.finished` or `job.failed`), keeps one backup per plan at
//! a time, bounds how many jobs run at once, retries what may succeed on a
//! second try, starts the follow-ups the policies ask for, and reports live
//! progress.
//!
//! On start it reads the log: a job that was scheduled or running when the
//! service stopped (or was killed) gets `job.abandoned` and is scheduled
//! again while its attempts last.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::broadcast;
use vouch_events::{
    AppendReceipt, Event, JobAbandoned, JobFailed, JobFinished, JobId, JobKind, JobProgress,
    JobScheduled, JobStarted, JobState, PlanId, Projections,
};

use super::command::{
    CancelToken, JobCommand, JobFailure, JobOutput, ProgressCell, ProgressReading, RunJob, Workers,
};
use super::error::ServiceError;
use super::policy;
use super::read_model::{Query, ReadModelActor};
use super::store::{Append, EventStore};
use crate::clock::Clock;
use crate::supervisor::{BackoffPolicy, RestartGate};

/// How the dispatcher runs jobs.
#[derive(Clone, Debug)]
pub struct DispatchConfig {
    /// Jobs running at once.
    pub max_concurrent: usize,
    /// Attempts of a job before it stays failed.
    pub max_attempts: u32,
    /// Delay before a retry (by attempt).
    pub retry_backoff: BackoffPolicy,
    /// How often live progress is sent to watchers.
    pub progress_every: Duration,
    /// How often progress is also recorded in the log (`job.progress`).
    pub progress_event_every: Duration,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            max_concurrent: 2,
            max_attempts: 3,
            retry_backoff: BackoffPolicy::new(
                Duration::from_secs(30),
                2,
                Duration::from_secs(3600),
                Duration::from_secs(3600),
            )
            .unwrap_or_default(),
            progress_every: Duration::from_secs(1),
            progress_event_every: Duration::from_secs(15),
        }
    }
}

/// Live progress of a running job (not recorded in the log).
#[derive(Clone, Debug, serde::Serialize)]
pub struct LiveProgress {
    /// The job.
    pub job: JobId,
    /// Its plan.
    pub plan: Option<PlanId>,
    /// Its kind (`backup`, `verify`, `restore-test`, `retention`).
    pub kind: &'static str,
    /// Files done.
    pub files: u64,
    /// Bytes done.
    pub bytes: u64,
    /// Bytes expected, when known.
    pub bytes_total: Option<u64>,
    /// Recent rate.
    pub bytes_per_sec: f64,
    /// Seconds left at that rate, when the total is known.
    pub eta_seconds: Option<u64>,
}

/// The API name of a job kind.
pub fn kind_name(kind: JobKind) -> &'static str {
    match kind {
        JobKind::Backup => "backup",
        JobKind::Verify => "verify",
        JobKind::RestoreTest => "restore-test",
        JobKind::Forget => "retention",
        JobKind::Prune => "prune",
        JobKind::ReadBack => "read-back",
        JobKind::Reconcile => "reconcile",
    }
}

/// Schedule a job. A backup of a plan that already has one scheduled or
/// running is refused ([`ServiceError::AlreadyRunning`]); a verification,
/// restore test or retention that is already open is not doubled: its id is
/// returned.
#[derive(Message)]
#[rtype(result = "Result<JobId, ServiceError>")]
pub struct Enqueue(pub JobCommand);

/// Cancel a job: a scheduled one is abandoned at once, a running one is
/// asked to stop and ends `failed` with kind `cancelled`.
#[derive(Message)]
#[rtype(result = "Result<(), ServiceError>")]
pub struct Cancel(pub JobId);

/// Stop starting jobs; answered once no job runs any more.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Drain;

/// How many jobs run and wait.
#[derive(Message)]
#[rtype(result = "(usize, usize)")]
pub struct Load;

struct Queued {
    job: JobId,
    command: JobCommand,
    attempt: u32,
}

struct Running {
    command: JobCommand,
    attempt: u32,
    cancel: CancelToken,
    progress: ProgressCell,
    last: Option<(Instant, u64)>,
    rate: f64,
    last_event: Instant,
}

/// The job queue.
pub struct Dispatcher {
    store: Addr<EventStore>,
    read: Addr<ReadModelActor>,
    workers: Workers,
    clock: Arc<dyn Clock>,
    config: DispatchConfig,
    live: broadcast::Sender<Arc<LiveProgress>>,
    queue: VecDeque<Queued>,
    running: HashMap<JobId, Running>,
    draining: Vec<tokio::sync::oneshot::Sender<()>>,
    stopping: bool,
    next_id: u64,
    /// The last sequence number this dispatcher recorded: after a restart
    /// it reads the jobs from projections that include it.
    seen_seq: u64,
    /// The commands of the jobs a restart cut short: the retry runs the
    /// very same command (the log cannot rebuild every kind, e.g. a
    /// read-back's slices).
    orphans: HashMap<JobId, JobCommand>,
    gate: RestartGate,
}

impl Dispatcher {
    /// A dispatcher sending work to `workers`.
    pub fn new(
        store: Addr<EventStore>,
        read: Addr<ReadModelActor>,
        workers: Workers,
        clock: Arc<dyn Clock>,
        config: DispatchConfig,
        live: broadcast::Sender<Arc<LiveProgress>>,
        gate: RestartGate,
    ) -> Self {
        Dispatcher {
            gate,
            seen_seq: 0,
            orphans: HashMap::new(),
            store,
            read,
            workers,
            clock,
            config,
            live,
            queue: VecDeque::new(),
            running: HashMap::new(),
            draining: Vec::new(),
            stopping: false,
            next_id: 0,
        }
    }

    fn new_job_id(&mut self, command: &JobCommand) -> JobId {
        self.next_id += 1;
        let now = crate::clock::unix_ns_to_utc(self.clock.now_unix_ns());
        let what = match command {
            JobCommand::Backup { plan, .. } | JobCommand::Retention { plan, .. } => {
                plan.to_string()
            }
            JobCommand::Verify { point, .. } | JobCommand::RestoreTest { point, .. } => {
                point.short()
            }
            JobCommand::ReadBack { repository, .. } => format!("read-back-{repository}"),
        };
        let salt = blake3::hash(format!("{}{}", self.clock.now_unix_ns(), self.next_id).as_bytes());
        JobId::new(format!(
            "{}-{}-{:04}{:02}{:02}T{:02}{:02}{:02}Z-{}",
            kind_name(command.kind()),
            what,
            now.year(),
            u8::from(now.month()),
            now.day(),
            now.hour(),
            now.minute(),
            now.second(),
            &salt.to_hex()[..6]
        ))
    }

    /// Appends `events`, then runs `then` with the outcome; the actor
    /// handles no other message in between, so the order of the log is the
    /// order of decisions.
    fn record<F>(&self, ctx: &mut Context<Self>, events: Vec<Event>, then: F)
    where
        F: FnOnce(&mut Self, &mut Context<Self>, Result<AppendReceipt, ServiceError>) + 'static,
    {
        let send = self.store.send(Append(events));
        ctx.wait(send.into_actor(self).map(move |res, act, ctx| {
            let res = res.map_err(ServiceError::from).and_then(|r| r);
            if let Ok(receipt) = &res {
                act.seen_seq = act.seen_seq.max(receipt.last_seq);
            }
            then(act, ctx, res)
        }));
    }

    /// Reads the projections (at least up to `min_seq`), then runs `then`.
    fn with_projections<R, Q, F>(&self, ctx: &mut Context<Self>, min_seq: u64, q: Q, then: F)
    where
        R: Send + 'static,
        Q: FnOnce(&Projections) -> R + Send + 'static,
        F: FnOnce(&mut Self, &mut Context<Self>, Result<R, ServiceError>) + 'static,
    {
        let send = self.read.send(Query::new(min_seq, q));
        ctx.wait(
            send.into_actor(self)
                .map(move |res, act, ctx| then(act, ctx, res.map_err(ServiceError::from))),
        );
    }

    fn is_open(&self, f: impl Fn(&JobCommand) -> bool) -> Option<JobId> {
        self.queue
            .iter()
            .find(|q| f(&q.command))
            .map(|q| q.job.clone())
            .or_else(|| {
                self.running
                    .iter()
                    .find(|(_, r)| f(&r.command))
                    .map(|(id, _)| id.clone())
            })
    }

    /// The open job this command would duplicate, if any.
    fn duplicate_of(&self, command: &JobCommand) -> Option<JobId> {
        let kind = command.kind();
        let plan = command.plan().cloned();
        let point = command.point();
        self.is_open(|c| {
            c.kind() == kind
                && match kind {
                    // A read-back has no point: one per repository.
                    JobKind::Verify | JobKind::RestoreTest => {
                        c.point() == point && c.repository() == command.repository()
                    }
                    _ => c.plan().cloned() == plan,
                }
        })
    }

    /// Records `job.scheduled` and queues the job.
    fn schedule(
        &mut self,
        ctx: &mut Context<Self>,
        job: JobId,
        command: JobCommand,
        attempt: u32,
        reply: Option<tokio::sync::oneshot::Sender<Result<JobId, ServiceError>>>,
    ) {
        let event = JobScheduled {
            job: job.clone(),
            kind: command.kind(),
            plan: command.plan().cloned(),
            point: command.point(),
            due_unix_ns: self.clock.now_unix_ns(),
            attempt,
            spec: Default::default(),
        };
        tracing::info!(job = %job, kind = kind_name(command.kind()), attempt, "job scheduled");
        self.record(ctx, vec![event.into()], move |act, ctx, res| {
            let answer = res.map(|_| job.clone());
            if answer.is_ok() {
                act.queue.push_back(Queued {
                    job,
                    command,
                    attempt,
                });
                act.dispatch(ctx);
            }
            if let Some(reply) = reply {
                let _ = reply.send(answer);
            }
        });
    }

    /// Starts queued jobs while there is room (never two backups of one
    /// plan).
    fn dispatch(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        while self.running.len() < self.config.max_concurrent.max(1) {
            let busy_plans: Vec<PlanId> = self
                .running
                .values()
                .filter(|r| r.command.kind() == JobKind::Backup)
                .filter_map(|r| r.command.plan().cloned())
                .collect();
            let pos = self.queue.iter().position(|q| {
                q.command.kind() != JobKind::Backup
                    || q.command.plan().is_none_or(|p| !busy_plans.contains(p))
            });
            let Some(pos) = pos else { break };
            let Some(q) = self.queue.remove(pos) else {
                break;
            };
            self.start(ctx, q);
        }
    }

    fn start(&mut self, ctx: &mut Context<Self>, mut q: Queued) {
        // What retention must never forget (locked points, the plan's last
        // recoverable one) is read now, at the start, whatever the job
        // carried when it was queued or rebuilt from the log after a crash.
        if let JobCommand::Retention { plan, protect, .. } = &mut q.command {
            let (plan, now) = (plan.clone(), self.clock.now_unix_ns());
            *protect = Vec::new();
            let job = q.job.clone();
            // Hold the slot while the projections are read.
            self.running.insert(job.clone(), self.running_entry(&q));
            self.with_projections(
                ctx,
                0,
                move |p| policy::retention_protects(p, &plan, now),
                move |act, ctx, res| {
                    act.running.remove(&job);
                    match res {
                        Ok(keep) => {
                            if let JobCommand::Retention { protect, .. } = &mut q.command {
                                *protect = keep;
                            }
                            act.launch(ctx, q);
                        }
                        Err(e) => {
                            tracing::error!(job = %job, error = %e, "could not read what retention must keep; it is not run");
                            act.after_change(ctx);
                        }
                    }
                },
            );
            return;
        }
        self.launch(ctx, q);
    }

    fn running_entry(&self, q: &Queued) -> Running {
        Running {
            command: q.command.clone(),
            attempt: q.attempt,
            cancel: CancelToken::default(),
            progress: ProgressCell::default(),
            last: None,
            rate: 0.0,
            last_event: Instant::now(),
        }
    }

    fn launch(&mut self, ctx: &mut Context<Self>, q: Queued) {
        let cancel = CancelToken::default();
        let progress = ProgressCell::default();
        let now = Instant::now();
        let mut entry = self.running_entry(&q);
        entry.cancel = cancel.clone();
        entry.progress = progress.clone();
        entry.last_event = now;
        self.running.insert(q.job.clone(), entry);
        let started = JobStarted {
            job: q.job.clone(),
            agent: None,
        };
        let job = q.job.clone();
        self.record(ctx, vec![started.into()], move |act, ctx, res| {
            if let Err(e) = res {
                tracing::error!(job = %job, error = %e, "could not record the start of a job; it is not run");
                act.running.remove(&job);
                return;
            }
            tracing::info!(job = %job, kind = kind_name(q.command.kind()), "job started");
            let recipient = act.workers.for_command(&q.command).clone();
            let run = recipient.send(RunJob {
                job: job.clone(),
                command: q.command,
                cancel,
                progress,
            });
            ctx.spawn(run.into_actor(act).map(move |res, act, ctx| {
                let outcome = match res {
                    Ok(outcome) => outcome,
                    Err(e) => Err(JobFailure::new(
                        "worker_unavailable",
                        format!("the worker for this job is not available: {e}"),
                        true,
                    )),
                };
                act.finished(ctx, job, outcome);
            }));
        });
    }

    /// Records how a job ended, then retries or starts its follow-ups.
    fn finished(
        &mut self,
        ctx: &mut Context<Self>,
        job: JobId,
        outcome: Result<JobOutput, JobFailure>,
    ) {
        let Some(run) = self.running.remove(&job) else {
            return;
        };
        let kind = run.command.kind();
        let (mut events, failure) = match outcome {
            Ok(out) => (out.events, None),
            Err(f) => (f.events.clone(), Some(f)),
        };
        let produced = events.clone();
        match &failure {
            None => {
                tracing::info!(job = %job, kind = kind_name(kind), "job finished");
                events.push(JobFinished { job: job.clone() }.into());
            }
            Some(f) => {
                tracing::warn!(job = %job, kind = kind_name(kind), error_kind = %f.kind, message = %f.message, "job failed");
                events.push(
                    JobFailed {
                        job: job.clone(),
                        error_kind: f.kind.clone(),
                        message: f.message.clone(),
                        retryable: f.retryable,
                    }
                    .into(),
                );
            }
        }
        self.record(ctx, events, move |act, ctx, res| {
            let receipt = match res {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(job = %job, error = %e, "could not record the end of a job; it is abandoned on the next start");
                    act.after_change(ctx);
                    return;
                }
            };
            let retry = failure
                .as_ref()
                .is_some_and(|f| f.retryable && run.attempt < act.config.max_attempts);
            if retry && !act.stopping {
                let delay = act.config.retry_backoff.delay(run.attempt);
                tracing::info!(job = %job, attempt = run.attempt + 1, delay_ms = delay.as_millis() as u64, "job will be retried");
                let command = run.command.clone();
                let attempt = run.attempt + 1;
                ctx.run_later(delay, move |act, ctx| {
                    if act.duplicate_of(&command).is_none() && !act.stopping {
                        act.schedule(ctx, job, command, attempt, None);
                    }
                });
            }
            if failure.is_none() {
                act.with_projections(
                    ctx,
                    receipt.last_seq,
                    move |p| policy::follow_ups(p, kind, &produced),
                    |act, ctx, res| match res {
                        Ok(next) => {
                            for command in next {
                                act.enqueue_internal(ctx, command);
                            }
                        }
                        Err(e) => tracing::error!(error = %e, "could not plan follow-up jobs"),
                    },
                );
            }
            act.after_change(ctx);
        });
    }

    fn after_change(&mut self, ctx: &mut Context<Self>) {
        self.dispatch(ctx);
        if self.stopping && self.running.is_empty() {
            for tx in self.draining.drain(..) {
                let _ = tx.send(());
            }
        }
    }

    /// Schedules a job the service itself decided on (follow-ups, periodic
    /// checks, retries); duplicates are dropped.
    fn enqueue_internal(&mut self, ctx: &mut Context<Self>, command: JobCommand) {
        if self.stopping || self.duplicate_of(&command).is_some() {
            return;
        }
        let job = self.new_job_id(&command);
        self.schedule(ctx, job, command, 1, None);
    }

    /// Sends live progress and, now and then, records it.
    fn tick_progress(&mut self, ctx: &mut Context<Self>) {
        let now = Instant::now();
        let mut record = Vec::new();
        for (job, run) in self.running.iter_mut() {
            let Some(reading) = run.progress.read() else {
                continue;
            };
            let ProgressReading {
                files,
                bytes,
                bytes_total,
            } = reading;
            if let Some((t, b)) = run.last {
                let dt = now.duration_since(t).as_secs_f64();
                if dt > 0.0 {
                    let inst = bytes.saturating_sub(b) as f64 / dt;
                    run.rate = if run.rate == 0.0 {
                        inst
                    } else {
                        0.7 * run.rate + 0.3 * inst
                    };
                }
            }
            run.last = Some((now, bytes));
            let eta_seconds = match bytes_total {
                Some(total) if run.rate > 0.0 && total >= bytes => {
                    Some(((total - bytes) as f64 / run.rate).ceil() as u64)
                }
                _ => None,
            };
            let _ = self.live.send(Arc::new(LiveProgress {
                job: job.clone(),
                plan: run.command.plan().cloned(),
                kind: kind_name(run.command.kind()),
                files,
                bytes,
                bytes_total,
                bytes_per_sec: run.rate,
                eta_seconds,
            }));
            if now.duration_since(run.last_event) >= self.config.progress_event_every {
                run.last_event = now;
                record.push(
                    JobProgress {
                        job: job.clone(),
                        checkpoint: Vec::new(),
                        done_bytes: bytes,
                        total_bytes: bytes_total,
                    }
                    .into(),
                );
            }
        }
        if !record.is_empty() {
            // Progress is advisory: a failure to record it is only logged.
            let send = self.store.send(Append(record));
            ctx.spawn(send.into_actor(self).map(|res, _, _| {
                if let Ok(Err(e)) | Err(e) = res.map_err(ServiceError::from) {
                    tracing::warn!(error = %e, "could not record job progress");
                }
            }));
        }
    }

    /// After a start: every job the log says was scheduled or running is
    /// abandoned (its worker died with the old process) and retried.
    fn recover(&mut self, ctx: &mut Context<Self>) {
        self.with_projections(
            ctx,
            self.seen_seq,
            |p| {
                p.jobs
                    .jobs
                    .values()
                    .filter(|j| !j.state.is_terminal())
                    .map(|j| (j.clone(), rebuild_command(p, j)))
                    .collect::<Vec<_>>()
            },
            |act, ctx, res| {
                let jobs = match res {
                    Ok(j) => j,
                    Err(e) => {
                        tracing::error!(error = %e, "could not read unfinished jobs");
                        return;
                    }
                };
                let restarted = act.gate.restarts() > 0;
                let mut orphans = std::mem::take(&mut act.orphans);
                for (job, rebuilt) in jobs {
                    let command = orphans.remove(&job.id).or(rebuilt);
                    let reason = match (restarted, job.state) {
                        (false, JobState::Running) => "the service stopped while the job was running",
                        (false, _) => "the service stopped before the job started",
                        (true, JobState::Running) => "the dispatcher failed and was restarted while the job was running",
                        (true, _) => "the dispatcher failed and was restarted before the job started",
                    };
                    tracing::warn!(job = %job.id, reason, "job abandoned");
                    let abandoned = JobAbandoned {
                        job: job.id.clone(),
                        reason: reason.into(),
                    };
                    let attempt = job.attempt;
                    let max = act.config.max_attempts;
                    act.record(ctx, vec![abandoned.into()], move |act, ctx, res| {
                        if res.is_err() {
                            return;
                        }
                        match command {
                            Some(_) if act.stopping => {}
                            Some(command) if attempt < max => {
                                act.schedule(ctx, job.id, command, attempt + 1, None)
                            }
                            _ => tracing::warn!(job = %job.id, "abandoned job is not retried (no attempts left or its plan is gone)"),
                        }
                    });
                }
            },
        );
    }
}

fn repository_of(p: &Projections, point: &vouch_events::SnapshotId) -> vouch_events::RepositoryId {
    p.points.points.get(point).map_or_else(
        || vouch_events::RepositoryId::new("default"),
        |pt| pt.repository.clone(),
    )
}

/// The command of a job as the log describes it (none when its plan is
/// gone).
fn rebuild_command(p: &Projections, j: &vouch_events::Job) -> Option<JobCommand> {
    let plan = j
        .plan
        .as_ref()
        .and_then(|id| p.plans.plans.get(id))
        .filter(|pl| pl.removed.is_none());
    match j.kind {
        JobKind::Backup => plan.map(|pl| JobCommand::Backup {
            plan: pl.id.clone(),
            definition: pl.definition.clone(),
        }),
        JobKind::Verify => j.point.map(|point| JobCommand::Verify {
            point,
            plan: j.plan.clone(),
            repository: repository_of(p, &point),
            depth: plan.map_or(vouch_events::VerifyDepth::Structure, |pl| {
                pl.definition.verification.depth
            }),
        }),
        JobKind::RestoreTest => j.point.map(|point| JobCommand::RestoreTest {
            point,
            plan: j.plan.clone(),
            repository: repository_of(p, &point),
            sample_files: plan.and_then(|pl| pl.definition.restore_test.sample_files),
        }),
        JobKind::Forget => plan.map(|pl| JobCommand::Retention {
            plan: pl.id.clone(),
            repository: pl.definition.repository.clone(),
            keep: pl.definition.retention.clone(),
            protect: Vec::new(),
        }),
        JobKind::Prune | JobKind::ReadBack | JobKind::Reconcile => None,
    }
}

impl Actor for Dispatcher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.gate.started(ctx);
        self.recover(ctx);
        ctx.run_interval(self.config.progress_every, |act, ctx| {
            act.tick_progress(ctx)
        });
        // A restart during a drain: nothing runs any more.
        self.after_change(ctx);
    }
}

impl Supervised for Dispatcher {
    /// Throws away the queue and the table of running jobs (derived
    /// state a failure may have left half-updated) and asks every running
    /// worker to stop: their answers would arrive at a context that no
    /// longer exists. [`Actor::started`] then rebuilds from the log, as
    /// after a crash: every unfinished job gets `job.abandoned` and is
    /// scheduled again as its next attempt.
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        let delay = self.gate.restarting();
        tracing::warn!(
            restarts = self.gate.restarts(),
            delay_ms = delay.as_millis() as u64,
            running = self.running.len(),
            queued = self.queue.len(),
            "dispatcher restarting"
        );
        for (job, run) in self.running.drain() {
            run.cancel.cancel();
            self.orphans.insert(job, run.command);
        }
        for q in self.queue.drain(..) {
            self.orphans.insert(q.job, q.command);
        }
    }
}

impl Handler<Enqueue> for Dispatcher {
    type Result = ResponseFuture<Result<JobId, ServiceError>>;

    fn handle(&mut self, msg: Enqueue, ctx: &mut Self::Context) -> Self::Result {
        let command = msg.0;
        if self.stopping {
            return Box::pin(async { Err(ServiceError::ShuttingDown) });
        }
        if let Some(existing) = self.duplicate_of(&command) {
            if let (JobKind::Backup, Some(plan)) = (command.kind(), command.plan()) {
                let plan = plan.clone();
                return Box::pin(async move { Err(ServiceError::AlreadyRunning(plan)) });
            }
            return Box::pin(async move { Ok(existing) });
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job = self.new_job_id(&command);
        self.schedule(ctx, job, command, 1, Some(tx));
        Box::pin(async move {
            rx.await
                .map_err(|_| ServiceError::Unavailable("the dispatcher restarted".into()))?
        })
    }
}

impl Handler<Cancel> for Dispatcher {
    type Result = ResponseFuture<Result<(), ServiceError>>;

    fn handle(&mut self, msg: Cancel, ctx: &mut Self::Context) -> Self::Result {
        let job = msg.0;
        if let Some(run) = self.running.get(&job) {
            tracing::info!(job = %job, "cancelling a running job");
            run.cancel.cancel();
            return Box::pin(async { Ok(()) });
        }
        if let Some(pos) = self.queue.iter().position(|q| q.job == job) {
            self.queue.remove(pos);
            let (tx, rx) = tokio::sync::oneshot::channel();
            let abandoned = JobAbandoned {
                job: job.clone(),
                reason: "cancelled before it started".into(),
            };
            self.record(ctx, vec![abandoned.into()], move |_, _, res| {
                let _ = tx.send(res.map(|_| ()));
            });
            return Box::pin(async move {
                rx.await
                    .map_err(|_| ServiceError::Unavailable("the dispatcher restarted".into()))?
            });
        }
        let read = self.read.clone();
        Box::pin(async move {
            let id = job.clone();
            let state = read
                .send(Query::new(0, move |p| {
                    p.jobs.jobs.get(&id).map(|j| j.state)
                }))
                .await?;
            match state {
                Some(_) => Err(ServiceError::AlreadyEnded(job)),
                None => Err(ServiceError::NoSuchJob(job)),
            }
        })
    }
}

impl Handler<Drain> for Dispatcher {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _msg: Drain, _ctx: &mut Self::Context) -> Self::Result {
        self.stopping = true;
        self.queue.clear();
        if self.running.is_empty() {
            return Box::pin(async {});
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.draining.push(tx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

impl Handler<Load> for Dispatcher {
    type Result = MessageResult<Load>;

    fn handle(&mut self, _msg: Load, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult((self.running.len(), self.queue.len()))
    }
}

/// Internal: schedule what the periodic policies or the scheduler found due.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EnqueueMany(pub Vec<JobCommand>);

impl Handler<EnqueueMany> for Dispatcher {
    type Result = ();

    fn handle(&mut self, msg: EnqueueMany, ctx: &mut Self::Context) {
        for command in msg.0 {
            self.enqueue_internal(ctx, command);
        }
    }
}
