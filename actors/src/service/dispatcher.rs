//! The dispatcher: the job queue. It records every step of a job as events
//! before acting on it (`job.scheduled`, `job.started`, then the worker's
//! events with `job.finished` or `job.failed`), keeps one backup per plan at
//! a time, bounds how many jobs run at once, retries what may succeed on a
//! second try, starts the follow-ups the policies ask for, and reports live
//! progress.
//!
//! A retry is a recorded decision: `job.failed` and `job.scheduled
//! {attempt + 1, due_unix_ns = now + delay, spec}` go to the log in one
//! batch, and the job waits in the queue until its due time (read from the
//! injected clock, re-checked on every scheduler tick and on a wake-up
//! timer). On start it reads the log: a job that was only scheduled is
//! queued again at its due time, as it was (no attempt is consumed); a job
//! that was running when the service stopped (or was killed) gets
//! `job.abandoned` and is scheduled again as its next attempt while its
//! attempts last. Its command is rebuilt from `job.scheduled.spec`.
//!
//! Every running job carries a fencing token, the seq of its `job.started`:
//! a result is accepted only from the run the dispatcher is waiting for,
//! and a run that outlives its kind's timeout is abandoned and its slot
//! freed.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::broadcast;
use vouch_events::{
    AppendReceipt, Event, JobAbandoned, JobFailed, JobFinished, JobId, JobKind, JobProgress,
    JobScheduled, JobSpec, JobStarted, JobState, LogReader, PlanId, Projections, RepositoryId,
    SnapshotId, VerifyDepth,
};

use super::command::{
    CancelToken, JobCommand, JobFailure, JobOutput, ProgressCell, ProgressReading, RunJob, Workers,
};
use super::error::ServiceError;
use super::policy;
use super::read_model::{Query, ReadModelActor};
use super::results;
use super::store::{Append, EventStore};
use crate::clock::{duration_to_ns, timer_delay, Clock};
use crate::supervisor::{BackoffPolicy, RestartGate};

/// How long a job of each kind may run before it is abandoned (its worker
/// is asked to stop, its slot freed, and it is retried while its attempts
/// last).
#[derive(Clone, Debug)]
pub struct JobTimeouts {
    /// Backups.
    pub backup: Duration,
    /// Verifications.
    pub verify: Duration,
    /// Restore tests.
    pub restore_test: Duration,
    /// Retention.
    pub retention: Duration,
    /// Read-backs.
    pub read_back: Duration,
    /// Reconciliations.
    pub reconcile: Duration,
}

impl Default for JobTimeouts {
    fn default() -> Self {
        const HOUR: u64 = 3600;
        JobTimeouts {
            backup: Duration::from_secs(24 * HOUR),
            verify: Duration::from_secs(12 * HOUR),
            restore_test: Duration::from_secs(12 * HOUR),
            retention: Duration::from_secs(HOUR),
            read_back: Duration::from_secs(6 * HOUR),
            reconcile: Duration::from_secs(HOUR),
        }
    }
}

impl JobTimeouts {
    /// The timeout of a kind of job.
    pub fn of(&self, kind: JobKind) -> Duration {
        match kind {
            JobKind::Backup | JobKind::Copy => self.backup,
            JobKind::Verify => self.verify,
            JobKind::RestoreTest | JobKind::Restore => self.restore_test,
            JobKind::Forget | JobKind::Prune => self.retention,
            JobKind::ReadBack => self.read_back,
            JobKind::Reconcile => self.reconcile,
        }
    }
}

/// The longest a wake-up timer waits before the queue is looked at again
/// (the clock may have moved by more than real time did).
const WAKE_CAP: Duration = Duration::from_secs(30);

/// How long to wait before starting again a job whose `job.started` could
/// not be recorded (the store may be restarting).
const START_AGAIN_AFTER: Duration = Duration::from_secs(1);

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
    /// How long each kind of job may run.
    pub timeouts: JobTimeouts,
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
            timeouts: JobTimeouts::default(),
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
        JobKind::Restore => "restore",
        JobKind::Copy => "copy",
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

/// Look at the queue now: start what is due by the clock (the scheduler
/// sends it on every tick).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Wake;

#[derive(Clone)]
struct Queued {
    job: JobId,
    command: JobCommand,
    attempt: u32,
    /// Not started before this time, by the clock.
    due_unix_ns: i64,
}

struct Running {
    command: JobCommand,
    attempt: u32,
    /// The seq of this run's `job.started` (0 while it is being recorded):
    /// only this run's result is accepted.
    token: u64,
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
    /// The commands of the jobs a restart cut short (the log's spec
    /// rebuilds them too; these are exact).
    orphans: HashMap<JobId, JobCommand>,
    /// Reads `job.scheduled` specs on recovery.
    log: LogReader,
    /// The pending wake-up for the earliest job not yet due.
    wake: Option<(i64, SpawnHandle)>,
    gate: RestartGate,
}

impl Dispatcher {
    /// A dispatcher sending work to `workers`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Addr<EventStore>,
        read: Addr<ReadModelActor>,
        log: LogReader,
        workers: Workers,
        clock: Arc<dyn Clock>,
        config: DispatchConfig,
        live: broadcast::Sender<Arc<LiveProgress>>,
        gate: RestartGate,
    ) -> Self {
        Dispatcher {
            gate,
            log,
            wake: None,
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
            JobCommand::Verify { point, .. }
            | JobCommand::RestoreTest { point, .. }
            | JobCommand::Restore { point, .. }
            | JobCommand::Copy { point, .. } => point.short(),
            JobCommand::ReadBack { repository, .. }
            | JobCommand::Reconcile { repository, .. }
            | JobCommand::Prune { repository } => repository.to_string(),
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
        ctx.wait(send.into_actor(self).map(move |res, act, ctx| {
            then(act, ctx, res.map_err(ServiceError::from).and_then(|r| r))
        }));
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
                    JobKind::Verify | JobKind::RestoreTest | JobKind::Copy => {
                        c.point() == point && c.repository() == command.repository()
                    }
                    // No point, no plan: one per repository.
                    JobKind::ReadBack | JobKind::Reconcile | JobKind::Prune => {
                        c.repository() == command.repository()
                    }
                    // One retention of a plan per repository: its own,
                    // and its replica's.
                    JobKind::Forget => {
                        c.plan().cloned() == plan && c.repository() == command.repository()
                    }
                    // The same restore asked twice.
                    JobKind::Restore => {
                        c.point() == point && c.spec("").restore == command.spec("").restore
                    }
                    _ => c.plan().cloned() == plan,
                }
        })
    }

    /// The `job.scheduled` of a job's attempt.
    fn scheduled_event(
        job: &JobId,
        command: &JobCommand,
        attempt: u32,
        due_unix_ns: i64,
        why: &str,
    ) -> Event {
        JobScheduled {
            job: job.clone(),
            kind: command.kind(),
            plan: command.plan().cloned(),
            point: command.point(),
            due_unix_ns,
            attempt,
            spec: command.spec(why),
        }
        .into()
    }

    /// Records `job.scheduled` and queues the job (due now).
    fn schedule(
        &mut self,
        ctx: &mut Context<Self>,
        job: JobId,
        command: JobCommand,
        attempt: u32,
        why: &str,
        reply: Option<tokio::sync::oneshot::Sender<Result<JobId, ServiceError>>>,
    ) {
        let due_unix_ns = self.clock.now_unix_ns();
        let event = Self::scheduled_event(&job, &command, attempt, due_unix_ns, why);
        tracing::info!(job = %job, kind = kind_name(command.kind()), attempt, why, "job scheduled");
        self.record(ctx, vec![event], move |act, ctx, res| {
            let answer = res.map(|_| job.clone());
            if answer.is_ok() {
                act.queue.push_back(Queued {
                    job,
                    command,
                    attempt,
                    due_unix_ns,
                });
                act.dispatch(ctx);
            }
            if let Some(reply) = reply {
                let _ = reply.send(answer);
            }
        });
    }

    /// Whether `q` may start now beside what runs: never two backups of one
    /// plan, never a reconciliation beside a backup into the same
    /// repository, nor beside a copy out of or into it (a copy's manifest
    /// is written before its commit is recorded, and the point it reads
    /// must not be deleted under it).
    fn may_start(&self, q: &Queued) -> bool {
        let kind = q.command.kind();
        let repo = q.command.repository();
        let copy_touches = |c: &JobCommand, repo: &RepositoryId| match c {
            JobCommand::Copy {
                source_repository,
                repository,
                ..
            } => source_repository == repo || repository == repo,
            _ => false,
        };
        // Everything a job reads or writes in the repositories it touches.
        let touches =
            |c: &JobCommand, repo: &RepositoryId| c.repository() == repo || copy_touches(c, repo);
        self.running.values().all(|r| {
            let rk = r.command.kind();
            let same_repo = r.command.repository() == repo;
            // A prune rewrites and deletes packs: alone in its repository.
            if kind == JobKind::Prune {
                return !touches(&r.command, repo);
            }
            if rk == JobKind::Prune {
                return !touches(&q.command, r.command.repository());
            }
            match (kind, rk) {
                (JobKind::Backup, JobKind::Backup) => {
                    q.command.plan().is_none() || q.command.plan() != r.command.plan()
                }
                (JobKind::Backup, JobKind::Reconcile) | (JobKind::Reconcile, JobKind::Backup) => {
                    !same_repo
                }
                (JobKind::Copy, JobKind::Reconcile) => {
                    !copy_touches(&q.command, r.command.repository())
                }
                (JobKind::Reconcile, JobKind::Copy) => !copy_touches(&r.command, repo),
                _ => true,
            }
        })
    }

    /// Whether `q` may start as far as capacity goes: a job of the server's
    /// own needs one of its `max_concurrent` slots; a job that runs on an
    /// agent needs none (it only waits for the agent), but an agent runs one
    /// job at a time, so a second one for it waits its turn here, in order.
    fn has_room(&self, q: &Queued) -> bool {
        match q.command.agent() {
            Some(agent) => !self
                .running
                .values()
                .any(|r| r.command.agent() == Some(agent)),
            None => {
                self.running
                    .values()
                    .filter(|r| r.command.agent().is_none())
                    .count()
                    < self.config.max_concurrent.max(1)
            }
        }
    }

    /// Starts queued jobs that are due while there is room, and arms a
    /// wake-up for the earliest one that is not due yet.
    fn dispatch(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        let now = self.clock.now_unix_ns();
        loop {
            let pos = self
                .queue
                .iter()
                .position(|q| q.due_unix_ns <= now && self.has_room(q) && self.may_start(q));
            let Some(pos) = pos else { break };
            let Some(q) = self.queue.remove(pos) else {
                break;
            };
            self.start(ctx, q);
        }
        let earliest = self
            .queue
            .iter()
            .filter(|q| q.due_unix_ns > now)
            .map(|q| q.due_unix_ns)
            .min();
        if let Some(due) = earliest {
            if self.wake.as_ref().is_none_or(|(at, _)| *at != due) {
                if let Some((_, h)) = self.wake.take() {
                    ctx.cancel_future(h);
                }
                let delay = timer_delay(self.clock.as_ref(), due, WAKE_CAP);
                let h = ctx.run_later(delay, |act, ctx| {
                    act.wake = None;
                    act.dispatch(ctx);
                });
                self.wake = Some((due, h));
            }
        }
    }

    fn start(&mut self, ctx: &mut Context<Self>, mut q: Queued) {
        // What retention must never forget (locked points, the plan's last
        // recoverable one) is read now, at the start, whatever the job
        // carried when it was queued or rebuilt from the log after a crash.
        if let JobCommand::Retention {
            plan,
            protect,
            repository,
            ..
        } = &mut q.command
        {
            let (plan, now) = (plan.clone(), self.clock.now_unix_ns());
            let repository = repository.clone();
            *protect = Vec::new();
            let job = q.job.clone();
            // Hold the slot while the projections are read.
            self.running.insert(job.clone(), self.running_entry(&q));
            self.with_projections(
                ctx,
                self.seen_seq,
                move |p| policy::retention_protects(p, &plan, &repository, now),
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
        if let JobCommand::Backup { plan, .. } = &q.command {
            let plan = plan.clone();
            let job = q.job.clone();
            self.running.insert(job.clone(), self.running_entry(&q));
            self.with_projections(
                ctx,
                self.seen_seq,
                move |p| {
                    (
                        policy::backup_history(p, &plan),
                        policy::last_unflagged_point(p, &plan),
                    )
                },
                move |act, ctx, res| {
                    act.running.remove(&job);
                    match res {
                        Ok((h, good)) => {
                            if let JobCommand::Backup {
                                history, last_good, ..
                            } = &mut q.command
                            {
                                *history = h;
                                *last_good = good;
                            }
                        }
                        // The heuristic then measures against no history,
                        // which only lowers its thresholds to their floors.
                        Err(e) => {
                            tracing::warn!(job = %job, error = %e, "could not read the plan's recent backups; the ransomware heuristic runs without its baseline")
                        }
                    }
                    act.launch(ctx, q);
                },
            );
            return;
        }
        if let JobCommand::Reconcile { repository, .. } = &q.command {
            let repository = repository.clone();
            let job = q.job.clone();
            self.running.insert(job.clone(), self.running_entry(&q));
            self.with_projections(
                ctx,
                self.seen_seq,
                move |p| policy::reconcile_lists(p, &repository),
                move |act, ctx, res| {
                    act.running.remove(&job);
                    match res {
                        Ok((e, l)) => {
                            if let JobCommand::Reconcile { expired, live, .. } = &mut q.command {
                                *expired = e;
                                *live = l;
                            }
                            act.launch(ctx, q);
                        }
                        Err(e) => {
                            tracing::error!(job = %job, error = %e, "could not read the points to reconcile; it is not run");
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
            token: 0,
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
            let receipt = match res {
                Ok(r) => r,
                Err(e) => {
                    // Ambiguous: the store may have written `job.started`
                    // before failing. The job is not dropped: it is queued
                    // again (a second start is recorded as a retry of the
                    // same attempt) and the queue goes on.
                    tracing::error!(job = %job, error = %e, "could not record the start of a job; it is queued again");
                    act.running.remove(&job);
                    let mut again = q;
                    again.due_unix_ns = act
                        .clock
                        .now_unix_ns()
                        .saturating_add(duration_to_ns(START_AGAIN_AFTER));
                    act.queue.push_front(again);
                    act.after_change(ctx);
                    return;
                }
            };
            let token = receipt.last_seq;
            match act.running.get_mut(&job) {
                Some(r) => r.token = token,
                None => return,
            }
            let kind = q.command.kind();
            let span = tracing::info_span!("job", job = %job, kind = kind_name(kind), attempt = q.attempt, token);
            let _enter = span.enter();
            tracing::info!("job started");
            let recipient = act.workers.for_command(&q.command).clone();
            let limit = act.config.timeouts.of(kind);
            let run = actix::clock::timeout(
                limit,
                recipient.send(RunJob {
                    job: job.clone(),
                    command: q.command,
                    cancel,
                    progress,
                }),
            );
            ctx.spawn(run.into_actor(act).map(move |res, act, ctx| match res {
                Ok(Ok(outcome)) => act.finished(ctx, job, token, outcome),
                Ok(Err(e)) => act.finished(
                    ctx,
                    job,
                    token,
                    Err(JobFailure::new(
                        "worker_unavailable",
                        format!("the worker for this job is not available: {e}"),
                        true,
                    )),
                ),
                Err(_) => act.timed_out(ctx, job, token, limit),
            }));
        });
    }

    /// A run outlived its kind's timeout: it is asked to stop, abandoned,
    /// its slot freed, and scheduled again while its attempts last (the run
    /// consumed one). A result it sends later is dropped (its token is
    /// stale).
    fn timed_out(&mut self, ctx: &mut Context<Self>, job: JobId, token: u64, limit: Duration) {
        if self.running.get(&job).is_none_or(|r| r.token != token) {
            return;
        }
        let Some(run) = self.running.remove(&job) else {
            return;
        };
        run.cancel.cancel();
        let reason = format!(
            "the job ran longer than its timeout ({} s); its worker was asked to stop",
            limit.as_secs()
        );
        tracing::warn!(job = %job, reason, "job abandoned");
        let mut events: Vec<Event> = vec![JobAbandoned {
            job: job.clone(),
            reason,
        }
        .into()];
        let retry = run.attempt < self.config.max_attempts;
        let due = self.clock.now_unix_ns();
        if retry {
            events.push(Self::scheduled_event(
                &job,
                &run.command,
                run.attempt + 1,
                due,
                "retry after a timeout",
            ));
        }
        self.record(ctx, events, move |act, ctx, res| {
            if res.is_ok() && retry && !act.stopping {
                act.queue.push_back(Queued {
                    job,
                    command: run.command,
                    attempt: run.attempt + 1,
                    due_unix_ns: due,
                });
            }
            act.after_change(ctx);
        });
    }

    /// Records how a job ended, then retries or starts its follow-ups.
    fn finished(
        &mut self,
        ctx: &mut Context<Self>,
        job: JobId,
        token: u64,
        outcome: Result<JobOutput, JobFailure>,
    ) {
        // Fencing: only the run this dispatcher waits for may end the job.
        if self.running.get(&job).is_none_or(|r| r.token != token) {
            tracing::warn!(job = %job, token, "result of a superseded run dropped");
            return;
        }
        let Some(run) = self.running.remove(&job) else {
            return;
        };
        let kind = run.command.kind();
        let (mut events, mut failure) = match outcome {
            Ok(out) => (out.events, None),
            Err(f) => (f.events.clone(), Some(f)),
        };
        // Results must name their job (L3): events about another job,
        // point or repository are not recorded, and the job failed.
        if let Some(why) = results::foreign(&job, &run.command, &events) {
            tracing::error!(job = %job, kind = kind_name(kind), reason = %why, "the worker's result is not about this job; refused");
            events.clear();
            failure = Some(JobFailure::new(
                results::FOREIGN_RESULT,
                format!("the worker's result was refused: {why}"),
                false,
            ));
        }
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
        // A retry is a decision recorded with the failure, in one batch:
        // `job.scheduled {attempt + 1, due = now + delay}`.
        let retry = failure
            .as_ref()
            .filter(|f| f.retryable && run.attempt < self.config.max_attempts)
            .map(|f| {
                let delay = self.config.retry_backoff.delay(run.attempt);
                let due = self
                    .clock
                    .now_unix_ns()
                    .saturating_add(duration_to_ns(delay));
                (due, delay, format!("retry after {}", f.kind))
            });
        if let Some((due, delay, why)) = &retry {
            tracing::info!(job = %job, attempt = run.attempt + 1, delay_ms = delay.as_millis() as u64, "job will be retried");
            events.push(Self::scheduled_event(
                &job,
                &run.command,
                run.attempt + 1,
                *due,
                why,
            ));
        }
        let end = EndOfJob {
            job,
            command: run.command,
            attempt: run.attempt,
            kind,
            produced,
            succeeded: failure.is_none(),
            retry_due: retry.map(|(due, _, _)| due),
        };
        self.record_end(ctx, end, events, 0);
    }

    /// Records a job's end (`events`), then queues its retry or plans its
    /// follow-ups. An end the log refuses (a failing disk) is kept and
    /// recorded again with a backoff until the log takes it: the job would
    /// otherwise stay `running` in the log, and its retry never run, until
    /// the next start (found by the chaos lane). When the service stops
    /// meanwhile, the next start abandons the job, as after a crash.
    fn record_end(
        &mut self,
        ctx: &mut Context<Self>,
        end: EndOfJob,
        events: Vec<Event>,
        tries: u32,
    ) {
        let again = events.clone();
        self.record(ctx, events, move |act, ctx, res| {
            let receipt = match res {
                Ok(r) => r,
                Err(e) if act.stopping => {
                    tracing::error!(job = %end.job, error = %e, "could not record the end of a job while stopping; it is abandoned on the next start");
                    act.after_change(ctx);
                    return;
                }
                Err(e) => {
                    let delay = END_RECORD_RETRY
                        .saturating_mul(1 << tries.min(5))
                        .min(END_RECORD_RETRY_MAX);
                    tracing::error!(job = %end.job, error = %e, retry_in_ms = delay.as_millis() as u64, "could not record the end of a job; trying again");
                    ctx.run_later(delay, move |act, ctx| {
                        act.record_end(ctx, end, again, tries.saturating_add(1));
                    });
                    act.after_change(ctx);
                    return;
                }
            };
            if let Some(due) = end.retry_due {
                // Stopping: the log holds the decision; the next start
                // queues it at its due time.
                if !act.stopping {
                    act.queue.push_back(Queued {
                        job: end.job,
                        command: end.command.clone(),
                        attempt: end.attempt + 1,
                        due_unix_ns: due,
                    });
                }
            }
            if end.succeeded {
                let (seq, now) = (receipt.last_seq, act.clock.now_unix_ns());
                let (kind, produced) = (end.kind, end.produced);
                act.with_projections(
                    ctx,
                    receipt.last_seq,
                    move |p| policy::follow_ups(p, kind, &produced, seq, now),
                    |act, ctx, res| match res {
                        Ok(next) => {
                            for (command, why) in next {
                                act.enqueue_internal(ctx, command, &why);
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
    fn enqueue_internal(&mut self, ctx: &mut Context<Self>, command: JobCommand, why: &str) {
        if self.stopping || self.duplicate_of(&command).is_some() {
            return;
        }
        let job = self.new_job_id(&command);
        self.schedule(ctx, job, command, 1, why, None);
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

    /// After a start (or a restart of this actor): every job the log says
    /// is open is taken up again. One that was only scheduled is queued at
    /// its recorded due time with its recorded attempt (nothing was lost,
    /// no attempt is consumed). One that was running was lost with its
    /// worker: `job.abandoned`, and it is scheduled again as its next
    /// attempt while its attempts last. Commands are rebuilt from the
    /// latest `job.scheduled.spec` of each job.
    fn recover(&mut self, ctx: &mut Context<Self>) {
        self.with_projections(
            ctx,
            self.seen_seq,
            |p| {
                p.jobs
                    .jobs
                    .values()
                    .filter(|j| !j.state.is_terminal())
                    .cloned()
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
                if jobs.is_empty() {
                    act.orphans.clear();
                    return;
                }
                let from = jobs.iter().map(|j| j.scheduled.seq).min().unwrap_or(1);
                let wanted: std::collections::HashSet<JobId> =
                    jobs.iter().map(|j| j.id.clone()).collect();
                let log = act.log.clone();
                let read = tokio::task::spawn_blocking(move || latest_schedules(&log, from, &wanted));
                ctx.wait(read.into_actor(act).map(move |res, act, ctx| {
                    let specs = match res {
                        Ok(Ok(specs)) => specs,
                        Ok(Err(e)) => {
                            tracing::error!(error = %e, "could not read the schedules of unfinished jobs from the log");
                            HashMap::new()
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "could not read the schedules of unfinished jobs from the log");
                            HashMap::new()
                        }
                    };
                    act.with_projections(
                        ctx,
                        act.seen_seq,
                        move |p| {
                            jobs.into_iter()
                                .map(|j| {
                                    let sched = specs.get(&j.id).cloned();
                                    let cmd = rebuild_command(p, &j, sched.as_ref().map(|s| &s.spec));
                                    let due = sched.map_or(j.updated.unix_ns, |s| s.due_unix_ns);
                                    (j, cmd, due)
                                })
                                .collect::<Vec<_>>()
                        },
                        |act, ctx, res| match res {
                            Ok(jobs) => act.take_up(ctx, jobs),
                            Err(e) => tracing::error!(error = %e, "could not rebuild unfinished jobs"),
                        },
                    );
                }));
            },
        );
    }

    fn take_up(
        &mut self,
        ctx: &mut Context<Self>,
        jobs: Vec<(vouch_events::Job, Option<JobCommand>, i64)>,
    ) {
        let restarted = self.gate.restarts() > 0;
        let mut orphans = std::mem::take(&mut self.orphans);
        for (job, rebuilt, due) in jobs {
            let command = orphans.remove(&job.id).or(rebuilt);
            if self.queue.iter().any(|q| q.job == job.id) || self.running.contains_key(&job.id) {
                continue;
            }
            if job.state != JobState::Running {
                match command {
                    Some(command) => {
                        if self.stopping {
                            continue;
                        }
                        tracing::info!(job = %job.id, attempt = job.attempt, due, "scheduled job queued again at its due time");
                        self.queue.push_back(Queued {
                            job: job.id,
                            command,
                            attempt: job.attempt.max(1),
                            due_unix_ns: due,
                        });
                    }
                    None => {
                        let abandoned = JobAbandoned {
                            job: job.id.clone(),
                            reason: "its plan is gone, its point was forgotten, or the log does not say what it was to do"
                                .into(),
                        };
                        tracing::warn!(job = %job.id, "scheduled job cannot be rebuilt; abandoned");
                        self.record(ctx, vec![abandoned.into()], |_, _, _| {});
                    }
                }
                continue;
            }
            let reason = if restarted {
                "the dispatcher failed and was restarted while the job was running"
            } else {
                "the service stopped while the job was running"
            };
            tracing::warn!(job = %job.id, reason, "job abandoned");
            let mut events: Vec<Event> = vec![JobAbandoned {
                job: job.id.clone(),
                reason: reason.into(),
            }
            .into()];
            let attempt = job.attempt.max(1);
            let retry = command.filter(|_| attempt < self.config.max_attempts && !self.stopping);
            let now = self.clock.now_unix_ns();
            if let Some(command) = &retry {
                events.push(Self::scheduled_event(
                    &job.id,
                    command,
                    attempt + 1,
                    now,
                    "retry: its run was lost",
                ));
            } else {
                tracing::warn!(job = %job.id, "abandoned job is not retried (no attempts left, its plan is gone or its point was forgotten)");
            }
            let id = job.id;
            self.record(ctx, events, move |act, ctx, res| {
                if let (Ok(_), Some(command)) = (res, retry) {
                    act.queue.push_back(Queued {
                        job: id,
                        command,
                        attempt: attempt + 1,
                        due_unix_ns: now,
                    });
                }
                act.after_change(ctx);
            });
        }
        self.after_change(ctx);
    }
}

/// The latest `job.scheduled` of each job in `wanted`, read from the log
/// from `from` on.
fn latest_schedules(
    log: &LogReader,
    from: u64,
    wanted: &std::collections::HashSet<JobId>,
) -> Result<HashMap<JobId, JobScheduled>, ServiceError> {
    let mut out = HashMap::new();
    for env in log.replay_from(from.max(1))? {
        if let Event::JobScheduled(s) = env?.event {
            if wanted.contains(&s.job) {
                out.insert(s.job.clone(), s);
            }
        }
    }
    Ok(out)
}

fn repository_of(p: &Projections, point: &SnapshotId) -> RepositoryId {
    p.points
        .points
        .get(point)
        .map_or_else(|| RepositoryId::new("default"), |pt| pt.repository.clone())
}

/// The command of a job as the log describes it: its kind, plan and point,
/// and the spec of its latest `job.scheduled` (none when its plan is gone,
/// when it checks a point retention forgot, or when a log from before `job.scheduled` v2 does not say enough, e.g. a
/// read-back's slices). A v1 spec is empty: the plan's current definition
/// fills in depth and sample.
pub fn rebuild_command(
    p: &Projections,
    j: &vouch_events::Job,
    spec: Option<&JobSpec>,
) -> Option<JobCommand> {
    let plan = j
        .plan
        .as_ref()
        .and_then(|id| p.plans.plans.get(id))
        .filter(|pl| pl.removed.is_none());
    let v2 = spec.filter(|s| s.repository.is_some());
    let repository =
        |fallback: RepositoryId| v2.and_then(|s| s.repository.clone()).unwrap_or(fallback);
    // A check of a point retention forgot has nothing left to check (its
    // manifest goes with the next prune): not run again.
    if matches!(j.kind, JobKind::Verify | JobKind::RestoreTest)
        && j.point
            .is_some_and(|pt| super::alerting::forgotten_in(p, &pt))
    {
        return None;
    }
    match j.kind {
        JobKind::Backup => plan.map(|pl| JobCommand::Backup {
            plan: pl.id.clone(),
            definition: Box::new(pl.definition.clone()),
            history: Vec::new(),
            last_good: None,
        }),
        JobKind::Verify => match j.point {
            Some(point) => Some(JobCommand::Verify {
                point,
                plan: j.plan.clone(),
                repository: repository(repository_of(p, &point)),
                depth: v2.and_then(|s| s.depth).unwrap_or_else(|| {
                    plan.map_or(VerifyDepth::Structure, |pl| {
                        pl.definition.verification.depth
                    })
                }),
            }),
            // A v1 read-back: a verification with no point.
            None => read_back_of(v2),
        },
        JobKind::RestoreTest => j.point.map(|point| JobCommand::RestoreTest {
            point,
            plan: j.plan.clone(),
            repository: repository(repository_of(p, &point)),
            sample_files: match v2 {
                Some(s) => s.sample_files,
                None => plan.and_then(|pl| pl.definition.restore_test.sample_files),
            },
            boot: plan.and_then(|pl| pl.definition.restore_test.boot.clone()),
        }),
        JobKind::Forget => plan.map(|pl| JobCommand::Retention {
            plan: pl.id.clone(),
            repository: repository(pl.definition.repository.clone()),
            keep: pl.definition.retention.clone(),
            time_zone: pl.definition.time_zone.clone(),
            protect: Vec::new(),
        }),
        JobKind::ReadBack => read_back_of(v2),
        JobKind::Reconcile => {
            v2.and_then(|s| s.repository.clone())
                .map(|repository| JobCommand::Reconcile {
                    repository,
                    expired: Vec::new(),
                    live: Vec::new(),
                })
        }
        JobKind::Restore => match (j.point, spec.and_then(|s| s.restore.clone())) {
            (Some(point), Some(r)) => Some(JobCommand::Restore {
                point,
                plan: j.plan.clone(),
                repository: repository(repository_of(p, &point)),
                spec: r,
            }),
            _ => None,
        },
        // The plan's replica policy as it is now (the lock); none when the
        // plan no longer names a replica: nothing is copied then.
        JobKind::Copy => {
            let pl = plan?;
            let replica = pl.definition.replica.as_ref()?;
            let point = j.point?;
            Some(JobCommand::Copy {
                plan: pl.id.clone(),
                point,
                source_repository: repository_of(p, &point),
                repository: repository(replica.repository.clone()),
                lock_for: replica.lock_for,
            })
        }
        JobKind::Prune => v2
            .and_then(|s| s.repository.clone())
            .map(|repository| JobCommand::Prune { repository }),
    }
}

fn read_back_of(spec: Option<&JobSpec>) -> Option<JobCommand> {
    let s = spec.filter(|s| s.of > 0 && !s.slices.is_empty())?;
    Some(JobCommand::ReadBack {
        repository: s.repository.clone()?,
        slices: s.slices.clone(),
        of: s.of,
    })
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
        self.wake = None;
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
        self.schedule(ctx, job, command, 1, "asked for", Some(tx));
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
                .await??;
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

/// A job's end on its way into the log, with what follows it.
struct EndOfJob {
    job: JobId,
    command: JobCommand,
    attempt: u32,
    kind: JobKind,
    /// The worker's events (follow-ups are planned from them).
    produced: Vec<Event>,
    succeeded: bool,
    /// When its retry is due, if it is retried.
    retry_due: Option<i64>,
}

/// The first wait before recording a refused job end again; it doubles up
/// to [`END_RECORD_RETRY_MAX`].
const END_RECORD_RETRY: Duration = Duration::from_millis(500);
/// The longest wait between attempts to record a job's end.
const END_RECORD_RETRY_MAX: Duration = Duration::from_secs(15);

/// Internal: schedule what the periodic policies or the scheduler found due.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EnqueueMany(pub Vec<JobCommand>);

impl Handler<EnqueueMany> for Dispatcher {
    type Result = ();

    fn handle(&mut self, msg: EnqueueMany, ctx: &mut Self::Context) {
        for command in msg.0 {
            self.enqueue_internal(ctx, command, "schedule");
        }
        self.dispatch(ctx);
    }
}

impl Handler<Wake> for Dispatcher {
    type Result = ();

    fn handle(&mut self, _msg: Wake, ctx: &mut Self::Context) {
        self.dispatch(ctx);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use vouch_events::{
        BackupCommitted, BackupSummary, JobScheduled, PlanCreated, PlanDefinition, PlanId,
        Projections, Recorded, ReplicaPolicy, ReplicaRequirement,
    };

    use super::*;

    fn definition(replica: Option<ReplicaPolicy>) -> PlanDefinition {
        PlanDefinition {
            source: "/srv".into(),
            schedule: "0 3 * * *".into(),
            retention: vouch_events::KeepPolicy::default(),
            verification: vouch_events::VerificationPolicy {
                after_backup: true,
                every: None,
                depth: VerifyDepth::Structure,
            },
            restore_test: vouch_events::RestoreTestPolicy {
                every: None,
                max_evidence_age: Duration::from_secs(3600),
                sample_files: None,
                full_every: None,
                boot: None,
            },
            rpo: Duration::from_secs(3600),
            repository: RepositoryId::new("main"),
            paused: false,
            replica,
            proxmox: None,
            anomaly_lock: None,
            files: Default::default(),
            hooks: Default::default(),
            time_zone: None,
        }
    }

    fn projections(events: Vec<Event>) -> Projections {
        let mut p = Projections::new();
        for (i, e) in events.iter().enumerate() {
            let seq = i as u64 + 1;
            p.apply_event(
                Recorded {
                    seq,
                    unix_ns: seq as i64,
                },
                e,
            );
        }
        p
    }

    /// A plan `p`, its point `point` committed, and job `job` of `kind`
    /// scheduled on it.
    fn plan_point_and_job(
        def: PlanDefinition,
        point: SnapshotId,
        job: &str,
        kind: JobKind,
        spec: JobSpec,
    ) -> Vec<Event> {
        vec![
            PlanCreated {
                plan: PlanId::new("p"),
                definition: def,
            }
            .into(),
            BackupCommitted {
                job: None,
                plan: Some(PlanId::new("p")),
                repository: RepositoryId::new("main"),
                snapshot: point,
                snapshot_time_unix_ns: 1,
                summary: BackupSummary::default(),
                changes: None,
            }
            .into(),
            JobScheduled {
                job: JobId::new(job),
                kind,
                plan: Some(PlanId::new("p")),
                point: Some(point),
                due_unix_ns: 3,
                attempt: 1,
                spec,
            }
            .into(),
        ]
    }

    /// A copy job cut short by a restart is rebuilt from the log: its
    /// point, the point's repository as source, the replica it was
    /// scheduled for, and the plan's current lock time; none once the plan
    /// names no replica.
    #[test]
    fn a_copy_job_is_rebuilt_from_the_log_after_a_restart() {
        let replica = ReplicaPolicy {
            repository: RepositoryId::new("offsite"),
            lock_for: Some(Duration::from_secs(600)),
            require: ReplicaRequirement::Proven,
        };
        let point = SnapshotId([7; 32]);
        let spec = JobSpec {
            repository: Some(RepositoryId::new("offsite")),
            why: "after backup".into(),
            ..JobSpec::default()
        };
        let events =
            |def: PlanDefinition| plan_point_and_job(def, point, "c", JobKind::Copy, spec.clone());
        let p = projections(events(definition(Some(replica.clone()))));
        let job = &p.jobs.jobs[&JobId::new("c")];
        match rebuild_command(&p, job, Some(&spec)) {
            Some(JobCommand::Copy {
                plan,
                point: pt,
                source_repository,
                repository,
                lock_for,
            }) => {
                assert_eq!(plan, PlanId::new("p"));
                assert_eq!(pt, point);
                assert_eq!(source_repository, RepositoryId::new("main"));
                assert_eq!(repository, RepositoryId::new("offsite"));
                assert_eq!(lock_for, Some(Duration::from_secs(600)));
            }
            other => panic!("rebuilt as {other:?}"),
        }
        let p = projections(events(definition(None)));
        let job = &p.jobs.jobs[&JobId::new("c")];
        assert!(rebuild_command(&p, job, Some(&spec)).is_none());
    }

    /// Found by the chaos harness: a verification cut short by a restart
    /// was run again after retention forgot its point, found the manifest
    /// gone and recorded it vanished. A check of a forgotten point is not
    /// rebuilt; one of a live point is.
    #[test]
    fn a_check_of_a_point_retention_forgot_is_not_rebuilt_after_a_restart() {
        let point = SnapshotId([9; 32]);
        for kind in [JobKind::Verify, JobKind::RestoreTest] {
            let mut events =
                plan_point_and_job(definition(None), point, "v", kind, JobSpec::default());
            let p = projections(events.clone());
            let job = &p.jobs.jobs[&JobId::new("v")];
            assert!(rebuild_command(&p, job, None).is_some(), "{kind:?}");
            events.push(
                vouch_events::PointForgotten {
                    point,
                    rule: "keep-last 1".into(),
                }
                .into(),
            );
            let p = projections(events);
            let job = &p.jobs.jobs[&JobId::new("v")];
            assert!(rebuild_command(&p, job, None).is_none(), "{kind:?}");
        }
    }
}
