//! Starting the service and talking to it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::broadcast;
use vouch_events::{
    AppendReceipt, Envelope, Event, JobId, LogReader, PlanDefinition, PlanId, Projections,
    ReadModel, ServiceStarted, SharedLog, SledStore,
};

use super::alerting::{
    Alerter, AlertingConfig, Evaluate, EvaluateAndWait, ReconfigureAlerting, ResendCounts,
};
use super::command::{JobCommand, Workers};
use super::dispatcher::{Cancel, DispatchConfig, Dispatcher, Drain, Enqueue, LiveProgress, Load};
use super::error::ServiceError;
use super::read_model::{Query, ReadModelActor, ReadModelHealth, CHECKPOINT_EVERY};
use super::scheduler::{next_run, PlansChanged, Scheduler, SchedulerConfig, Tick};
use super::scrub::{ScrubNow, Scrubber, SCRUB_EVERY};
use super::security::{
    EvaluateSecurity, LatestSecurity, SecurityPolicy, SecurityProbe, SecurityReport, SecurityWatch,
    SECURITY_EVERY,
};
use super::store::{
    Append, AppendExpecting, AppendHealth, AppendStatus, EventStore, Subscribe, LIVE_CAPACITY,
};
use super::supervise;
use crate::clock::Clock;
use crate::{BackoffPolicy, RestartGate};

/// Everything the service's actors are configured with.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// The job queue.
    pub dispatch: DispatchConfig,
    /// The scheduler.
    pub scheduler: SchedulerConfig,
    /// Alerting.
    pub alerting: AlertingConfig,
    /// How often the read model checkpoints its projections (when they
    /// changed).
    pub checkpoint_every: Duration,
    /// How a failed actor is restarted (see [`super::supervise`]).
    pub restart: BackoffPolicy,
    /// The version recorded in `service.started`.
    pub version: String,
    /// How often the whole event log is scrubbed (re-read and checked,
    /// `service.log_scrubbed`); none: never on a timer. The first scrub
    /// runs [`FIRST_SCRUB_AFTER`](crate::service::FIRST_SCRUB_AFTER) after the start at the latest.
    pub scrub_every: Option<Duration>,
    /// Seals the read store's snapshots with a key (given when the log
    /// has a chain key): a snapshot not sealed with it is rebuilt.
    pub read_store_seal_key: Option<vouch_events::SealKey>,
    /// Gathers the installation's facts for the security center (none:
    /// the checks that need them are `unknown`).
    pub security_probe: Option<Arc<dyn SecurityProbe>>,
    /// How often the security center is evaluated (none: only when
    /// asked).
    pub security_every: Option<Duration>,
    /// The security center's thresholds.
    pub security_policy: SecurityPolicy,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            dispatch: DispatchConfig::default(),
            scheduler: SchedulerConfig::default(),
            alerting: AlertingConfig::default(),
            checkpoint_every: CHECKPOINT_EVERY,
            restart: BackoffPolicy::default(),
            version: String::new(),
            scrub_every: Some(SCRUB_EVERY),
            read_store_seal_key: None,
            security_probe: None,
            security_every: Some(SECURITY_EVERY),
            security_policy: SecurityPolicy::default(),
        }
    }
}

/// How many times [`ServiceHandle::append_decided`] decides again after
/// other appends got in first.
pub const DECIDE_ATTEMPTS: usize = 8;
/// The door to the running service: cheap to clone, usable from any
/// arbiter (HTTP workers included).
#[derive(Clone)]
pub struct ServiceHandle {
    store: Addr<EventStore>,
    read: Addr<ReadModelActor>,
    dispatcher: Addr<Dispatcher>,
    scheduler: Addr<Scheduler>,
    alerter: Addr<Alerter>,
    scrubber: Addr<Scrubber>,
    security: Addr<SecurityWatch>,
    log: Arc<SharedLog>,
    live: broadcast::Sender<Arc<Envelope>>,
    progress: broadcast::Sender<Arc<LiveProgress>>,
    clock: Arc<dyn Clock>,
    health: Arc<AppendHealth>,
    read_health: Arc<ReadModelHealth>,
    resends: Arc<ResendCounts>,
    config: Arc<ServiceConfig>,
    stopping: Arc<AtomicBool>,
    /// Set when the HTTP side is about to stop: long-lived responses (the
    /// live event stream) end, so they never hold the shutdown.
    closing: Arc<tokio::sync::watch::Sender<bool>>,
}

/// Starts the actors inside the current actix system: the event store on
/// its own arbiter (its thread waits on the disk, nobody else's does), the
/// read model (opened from `read_store` and caught up with the log), the
/// dispatcher (which abandons and retries what the log says was running),
/// the scheduler and the alerter. Records `service.started`.
pub async fn start(
    log: Arc<SharedLog>,
    read_store: SledStore,
    workers: Workers,
    clock: Arc<dyn Clock>,
    config: ServiceConfig,
) -> Result<ServiceHandle, ServiceError> {
    let reader: LogReader = log.reader();
    let model = {
        let reader = reader.clone();
        let key = config.read_store_seal_key.clone();
        tokio::task::spawn_blocking(move || ReadModel::open_sealed(read_store, &reader, key))
            .await??
    };
    let (live, _) = broadcast::channel(LIVE_CAPACITY);
    let (progress, _) = broadcast::channel(256);

    let health = Arc::new(AppendHealth::default());
    let read_health = Arc::new(ReadModelHealth::default());
    let store_arbiter = Arbiter::new();
    let store = {
        let (log, live, health, c) = (log.clone(), live.clone(), health.clone(), clock.clone());
        let gate = RestartGate::new(config.restart, clock.clone());
        supervise::start_in_arbiter("event-store", &store_arbiter.handle(), move |_| {
            EventStore::new(log, live, health, c, gate)
        })
    };
    let read = {
        let (reader, gate) = (
            reader.clone(),
            RestartGate::new(config.restart, clock.clone()),
        );
        let every = config.checkpoint_every;
        let read_health = read_health.clone();
        // Its own thread: queries, catch-ups and rebuilds never hold up
        // the dispatcher, the scheduler or the alerter (review M4).
        let arbiter = Arbiter::new();
        supervise::start_in_arbiter("read-model", &arbiter.handle(), move |_| {
            ReadModelActor::new(model, reader, gate, every, read_health)
        })
    };
    store.send(Subscribe(read.clone().recipient())).await?;

    // A wall clock earlier than the log's last recorded event (by more
    // than a tolerance) is recorded once, with the start.
    let last_recorded = {
        let (reader, last) = (reader.clone(), log.last_seq());
        tokio::task::spawn_blocking(move || -> Option<i64> {
            if last == 0 {
                return None;
            }
            let mut replay = reader.replay_from(last).ok()?;
            replay.next()?.ok().map(|e| e.recorded_unix_ns)
        })
        .await?
    };
    let mut first: Vec<Event> = Vec::new();
    let now = clock.now_unix_ns();
    if let Some(previous) = last_recorded {
        if super::scheduler::stepped_back(previous, now) {
            tracing::warn!(
                previous,
                now,
                "the wall clock reads earlier than the log's last event"
            );
            first.push(
                vouch_events::ClockStepped {
                    previous_unix_ns: previous,
                    now_unix_ns: now,
                }
                .into(),
            );
        }
    }
    first.push(
        ServiceStarted {
            version: config.version.clone(),
        }
        .into(),
    );
    store.send(Append(first)).await??;

    let dispatcher = {
        let (store, read, clock, dispatch, progress) = (
            store.clone(),
            read.clone(),
            clock.clone(),
            config.dispatch.clone(),
            progress.clone(),
        );
        let gate = RestartGate::new(config.restart, clock.clone());
        let reader = reader.clone();
        supervise::start("dispatcher", move |_| {
            Dispatcher::new(
                store, read, reader, workers, clock, dispatch, progress, gate,
            )
        })
    };
    let scheduler = {
        let (read, dispatcher, store, clock, scheduling) = (
            read.clone(),
            dispatcher.clone(),
            store.clone(),
            clock.clone(),
            config.scheduler.clone(),
        );
        let gate = RestartGate::new(config.restart, clock.clone());
        supervise::start("scheduler", move |_| {
            Scheduler::new(read, dispatcher, store, clock, scheduling, gate)
        })
    };
    let resends = Arc::new(ResendCounts::default());
    let alerter = {
        let resends = resends.clone();
        let (store, read, clock, alerting) = (
            store.clone(),
            read.clone(),
            clock.clone(),
            config.alerting.clone(),
        );
        let gate = RestartGate::new(config.restart, clock.clone());
        let reader = reader.clone();
        let (append_health, read_health) = (health.clone(), read_health.clone());
        supervise::start("alerter", move |_| {
            Alerter::new(
                store,
                read,
                reader,
                clock,
                alerting,
                gate,
                append_health,
                read_health,
                resends.clone(),
            )
        })
    };
    store.send(Subscribe(alerter.clone().recipient())).await?;
    let scrubber = {
        let (log, store, every) = (log.clone(), store.clone(), config.scrub_every);
        let gate = RestartGate::new(config.restart, clock.clone());
        supervise::start("log-scrubber", move |_| {
            Scrubber::new(log, store, every, gate)
        })
    };
    let security = {
        let (store, read, clock) = (store.clone(), read.clone(), clock.clone());
        let (probe, every) = (config.security_probe.clone(), config.security_every);
        let mut policy = config.security_policy.clone();
        policy.agent_lost_after = config.alerting.agent_lost_after;
        let gate = RestartGate::new(config.restart, clock.clone());
        supervise::start("security-watch", move |_| {
            SecurityWatch::new(store, read, clock, probe, every, policy, gate)
        })
    };
    tracing::info!(seq = log.last_seq(), "service started");
    Ok(ServiceHandle {
        store,
        read,
        dispatcher,
        scheduler,
        alerter,
        scrubber,
        security,
        log,
        live,
        progress,
        clock,
        health,
        read_health,
        resends,
        config: Arc::new(config),
        stopping: Arc::new(AtomicBool::new(false)),
        closing: Arc::new(tokio::sync::watch::Sender::new(false)),
    })
}

impl ServiceHandle {
    /// The dispatcher (tests make it fail).
    #[cfg(test)]
    pub(crate) fn dispatcher(&self) -> &Addr<Dispatcher> {
        &self.dispatcher
    }

    /// The event store (tests make it fail).
    #[cfg(test)]
    pub(crate) fn event_store(&self) -> &Addr<EventStore> {
        &self.store
    }

    /// The read model (tests fill its mailbox).
    #[cfg(test)]
    pub(crate) fn read_model(&self) -> &Addr<ReadModelActor> {
        &self.read
    }

    /// The alerter (tests make it fail).
    #[cfg(test)]
    pub(crate) fn alerter(&self) -> &Addr<Alerter> {
        &self.alerter
    }

    /// Scrubs the whole event log now (re-reads every committed record)
    /// and records the result as `service.log_scrubbed`, which it returns.
    pub async fn scrub_log(&self) -> Result<vouch_events::LogScrubbed, ServiceError> {
        self.scrubber.send(ScrubNow).await?
    }

    /// The security center's report: the latest if it is younger than
    /// `fresh_within`, else a new evaluation (which records what changed).
    pub async fn security(
        &self,
        fresh_within: Duration,
    ) -> Result<Arc<SecurityReport>, ServiceError> {
        if let Some(latest) = self.security.send(LatestSecurity).await? {
            let age = self
                .clock
                .now_unix_ns()
                .saturating_sub(latest.evaluated_at_unix_ns);
            if age >= 0 && age < crate::duration_to_ns(fresh_within) {
                return Ok(latest);
            }
        }
        self.security.send(EvaluateSecurity::default()).await?
    }

    /// The latest security report without evaluating (none before the
    /// first evaluation): for the metrics.
    pub async fn latest_security(&self) -> Result<Option<Arc<SecurityReport>>, ServiceError> {
        Ok(self.security.send(LatestSecurity).await?)
    }

    /// Confirms that `by` holds an export of `repository`'s key: `code`
    /// must be the key's check code (compared in constant time). Records
    /// `key.export_confirmed` and evaluates the security center again.
    pub async fn confirm_key_export(
        &self,
        repository: vouch_events::RepositoryId,
        code: String,
        by: String,
    ) -> Result<Arc<SecurityReport>, ServiceError> {
        let probe = self.config.security_probe.clone().ok_or_else(|| {
            ServiceError::Unavailable("this service has no security probe".into())
        })?;
        let repo = repository.clone();
        let expected = tokio::task::spawn_blocking(move || probe.key_check(&repo))
            .await?
            .map_err(|why| {
                ServiceError::Unavailable(format!(
                    "the key of repository {repository} could not be read: {why}"
                ))
            })?
            .ok_or_else(|| ServiceError::NoSuchRepository(repository.clone()))?;
        let given = normalize_key_check(&code);
        if !constant_time_eq(given.as_bytes(), normalize_key_check(&expected).as_bytes()) {
            return Err(ServiceError::Mismatch(format!(
                "the check code does not match the key of repository {repository}: the export is of another key or was copied wrong"
            )));
        }
        let receipt = self
            .append(vec![vouch_events::KeyExportConfirmed {
                repository,
                key_check: expected,
                by,
            }
            .into()])
            .await?;
        self.security
            .send(EvaluateSecurity {
                min_seq: receipt.last_seq,
            })
            .await?
    }

    /// Appends events durably; answered once they are on disk.
    pub async fn append(&self, events: Vec<Event>) -> Result<AppendReceipt, ServiceError> {
        let plans = changes_plans(&events);
        let receipt = self.store.send(Append(events)).await??;
        if plans {
            self.scheduler.do_send(PlansChanged {
                seq: receipt.last_seq,
            });
        }
        Ok(receipt)
    }

    /// Decides on the newest state and appends what was decided, only if
    /// nothing was appended in between (optimistic concurrency, review
    /// finding L7): `decide` sees the projections and returns the events
    /// to append, or a refusal (`Ok(Err(..))`). When another append got in
    /// first, it decides again on the newer state, up to
    /// [`DECIDE_ATTEMPTS`] times. Two creations of one plan: one is
    /// appended, the other is refused by its own `decide`.
    pub async fn append_decided<E, F>(
        &self,
        decide: F,
    ) -> Result<Result<AppendReceipt, E>, ServiceError>
    where
        E: Send + 'static,
        F: Fn(&Projections) -> Result<Vec<Event>, E> + Clone + Send + 'static,
    {
        let mut min_seq = self.last_seq();
        for attempt in 0..DECIDE_ATTEMPTS {
            if attempt > 0 {
                // Another append got in first: a burst (a job's follow-ups
                // recorded in quick succession) is let pass before deciding
                // again, 1, 2, 4 ... 64 ms (127 ms in all), so that eight
                // attempts are not spent inside one burst.
                actix::clock::sleep(std::time::Duration::from_millis(1 << (attempt - 1))).await;
            }
            let d = decide.clone();
            let (decision, at) = self.query(min_seq, move |p| (d(p), p.last_seq)).await?;
            let events = match decision {
                Ok(events) => events,
                Err(refused) => return Ok(Err(refused)),
            };
            let plans = changes_plans(&events);
            let appended = self
                .store
                .send(AppendExpecting {
                    events,
                    expected_last_seq: at,
                })
                .await?;
            match appended {
                Ok(receipt) => {
                    if plans {
                        self.scheduler.do_send(PlansChanged {
                            seq: receipt.last_seq,
                        });
                    }
                    return Ok(Ok(receipt));
                }
                Err(ServiceError::Log(vouch_events::EventError::Conflict { actual, .. })) => {
                    min_seq = actual;
                }
                Err(e) => return Err(e),
            }
        }
        Err(ServiceError::Unavailable(format!(
            "the event log moved on {DECIDE_ATTEMPTS} times while this was being decided; try again"
        )))
    }

    /// Runs `f` over the projections once they include `min_seq`.
    pub async fn query<R, F>(&self, min_seq: u64, f: F) -> Result<R, ServiceError>
    where
        R: Send + 'static,
        F: FnOnce(&Projections) -> R + Send + 'static,
    {
        self.read.send(Query::new(min_seq, f)).await?
    }

    /// Schedules a job.
    pub async fn enqueue(&self, command: JobCommand) -> Result<JobId, ServiceError> {
        if self.is_stopping() {
            return Err(ServiceError::ShuttingDown);
        }
        self.dispatcher.send(Enqueue(command)).await?
    }

    /// Schedules a backup of `plan` now (paused plans too).
    pub async fn run_now(&self, plan: PlanId) -> Result<JobId, ServiceError> {
        let id = plan.clone();
        let def = self
            .query(0, move |p| {
                p.plans
                    .plans
                    .get(&id)
                    .filter(|pl| pl.removed.is_none())
                    .map(|pl| pl.definition.clone())
            })
            .await?
            .ok_or_else(|| ServiceError::NoSuchPlan(plan.clone()))?;
        self.enqueue(JobCommand::Backup {
            plan,
            definition: Box::new(def),
            history: Vec::new(),
            last_good: None,
        })
        .await
    }

    /// Cancels a job.
    pub async fn cancel(&self, job: JobId) -> Result<(), ServiceError> {
        self.dispatcher.send(Cancel(job)).await?
    }

    /// Up to `limit` events from `from_seq` on, oldest first, read from the
    /// log.
    pub async fn events(&self, from_seq: u64, limit: usize) -> Result<Vec<Envelope>, ServiceError> {
        let reader = self.log.reader();
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            for env in reader.replay_from(from_seq.max(1))? {
                out.push(env?);
                if out.len() >= limit {
                    break;
                }
            }
            Ok::<_, ServiceError>(out)
        })
        .await?
    }

    /// Reads the whole log through `f` (on the blocking pool). A record
    /// that cannot be read ends the iteration and the whole scan answers
    /// that error, never a silently short result (docs/events.md); a scan
    /// that `f` ends before the damage answers normally.
    pub async fn scan_events<R, F>(&self, from_seq: u64, f: F) -> Result<R, ServiceError>
    where
        R: Send + 'static,
        F: FnOnce(&mut dyn Iterator<Item = Envelope>) -> R + Send + 'static,
    {
        let reader = self.log.reader();
        tokio::task::spawn_blocking(move || {
            let replay = reader.replay_from(from_seq.max(1))?;
            let mut failed = None;
            let mut it = replay.map_while(|e| match e {
                Ok(env) => Some(env),
                Err(e) => {
                    failed = Some(e);
                    None
                }
            });
            let out = f(&mut it);
            drop(it);
            match failed {
                Some(e) => {
                    tracing::error!(error = %e, from_seq, "a scan of the event log met damage");
                    Err(ServiceError::LogUnreadable(e))
                }
                None => Ok(out),
            }
        })
        .await?
    }

    /// The events with these seqs (ascending), read from the log on the
    /// blocking pool: seqs close together are read in one pass, and a
    /// wide gap between them is skipped by starting a new read at the
    /// segment holding the next one, so the cost follows the events asked
    /// for, not the length of the log. A record that cannot be read is
    /// the answer (never a silently short list).
    pub async fn read_events(&self, seqs: Vec<u64>) -> Result<Vec<Envelope>, ServiceError> {
        /// Seqs at most this far apart are read in one pass.
        const GAP: u64 = 4096;
        let reader = self.log.reader();
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::with_capacity(seqs.len());
            let mut rest = seqs.as_slice();
            while let Some(&start) = rest.first() {
                let run = 1 + rest
                    .windows(2)
                    .take_while(|w| w[1] > w[0] && w[1] - w[0] <= GAP)
                    .count();
                let (wanted, later) = rest.split_at(run);
                rest = later;
                let end = wanted[wanted.len() - 1];
                let mut next = wanted.iter().peekable();
                for env in reader.replay_from(start)? {
                    let env = env.map_err(|e| {
                        tracing::error!(error = %e, start, "a read of the event log met damage");
                        ServiceError::LogUnreadable(e)
                    })?;
                    let seq = env.seq;
                    while next.next_if(|s| **s < seq).is_some() {}
                    if next.next_if(|s| **s == seq).is_some() {
                        out.push(env);
                    }
                    if seq >= end {
                        break;
                    }
                }
            }
            Ok(out)
        })
        .await?
    }

    /// Committed events as they happen (bounded: a receiver that lags gets
    /// `Lagged` and must re-read from the log).
    pub fn subscribe_events(&self) -> broadcast::Receiver<Arc<Envelope>> {
        self.live.subscribe()
    }

    /// Live progress of running jobs.
    pub fn subscribe_progress(&self) -> broadcast::Receiver<Arc<LiveProgress>> {
        self.progress.subscribe()
    }

    /// The seq of the last durable event.
    pub fn last_seq(&self) -> u64 {
        self.log.last_seq()
    }

    /// Whether the log takes writes (readiness, metrics, escalation).
    pub fn append_status(&self) -> AppendStatus {
        self.health.status()
    }

    /// Re-sends of open alerts to receivers of Alertmanager's API since the
    /// start: `(receiver, delivered, failed)` (metrics; they are not
    /// events).
    pub fn alert_resends(&self) -> Vec<(String, u64, u64)> {
        self.resends.snapshot()
    }

    /// Why the read model refuses queries, when it does (readiness).
    pub fn read_model_unavailable(&self) -> Option<String> {
        self.read_health.unavailable()
    }

    /// The health of appends, to mark it failing from a test of another
    /// crate (the web's readiness) without breaking a real disk. Not for
    /// anything but tests.
    #[doc(hidden)]
    pub fn append_health_for_tests(&self) -> Arc<AppendHealth> {
        self.health.clone()
    }

    /// The rolling read-back's window, when it is on.
    pub fn read_back_window(&self) -> Option<super::policy::ReadBackWindow> {
        self.config.scheduler.read_back
    }

    /// Now, by the service's clock.
    pub fn now_unix_ns(&self) -> i64 {
        self.clock.now_unix_ns()
    }

    /// When `plan`'s next backup is due after now.
    pub fn next_run(&self, plan: &PlanId, definition: &PlanDefinition) -> Option<i64> {
        next_run(
            definition,
            plan,
            self.config.scheduler.max_jitter,
            self.clock.now_unix_ns(),
        )
    }

    /// Jobs running and waiting.
    pub async fn load(&self) -> Result<(usize, usize), ServiceError> {
        Ok(self.dispatcher.send(Load).await?)
    }

    /// Evaluates schedules now; returns how many jobs were asked for.
    pub async fn tick(&self) -> Result<usize, ServiceError> {
        Ok(self.scheduler.send(Tick).await?)
    }

    /// Evaluates the alert rules now.
    pub async fn evaluate_alerts(&self) -> Result<(), ServiceError> {
        Ok(self.alerter.send(Evaluate).await?)
    }

    /// Evaluates the alert rules now and answers once the alerter has
    /// recorded what it decided and has no evaluation running or pending
    /// (an alert recorded after the event log failed resolves in a second
    /// evaluation: this waits for that one too).
    pub async fn evaluate_alerts_and_wait(&self) -> Result<(), ServiceError> {
        Ok(self.alerter.send(EvaluateAndWait).await?)
    }

    /// A test hook: makes `actor` panic in a handler, so its supervisor
    /// restarts it (the simulation's "restart of one actor"). Answers once
    /// the message was handled, i.e. once the actor panicked (the reply is
    /// dropped with the panic: `Ok` means it did).
    #[doc(hidden)]
    pub async fn panic_actor(&self, actor: super::ActorName) -> Result<(), ServiceError> {
        use super::fault::PanicForTest;
        use super::ActorName;
        let answered = match actor {
            ActorName::EventStore => self.store.send(PanicForTest).await,
            ActorName::ReadModel => self.read.send(PanicForTest).await,
            ActorName::Dispatcher => self.dispatcher.send(PanicForTest).await,
            ActorName::Scheduler => self.scheduler.send(PanicForTest).await,
            ActorName::Alerter => self.alerter.send(PanicForTest).await,
        };
        match answered {
            Err(_) => Ok(()),
            Ok(()) => Err(ServiceError::Unavailable(
                "the actor answered instead of panicking".into(),
            )),
        }
    }

    /// Whether a shutdown began.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Stops taking jobs and waits up to `grace` for running ones to end.
    /// Returns whether they all did (those that did not are abandoned and
    /// retried on the next start).
    pub async fn shutdown(&self, grace: Duration) -> bool {
        self.stopping.store(true, Ordering::SeqCst);
        let drained = actix::clock::timeout(grace, self.dispatcher.send(Drain)).await;
        matches!(drained, Ok(Ok(())))
    }

    /// Ends long-lived responses (the live event stream) and refuses new
    /// ones: called after the drain, before the HTTP server stops, so an
    /// open console never holds the shutdown.
    pub fn close_streams(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.closing.send_replace(true);
    }

    /// Whether [`ServiceHandle::close_streams`] was called.
    pub fn streams_closed(&self) -> bool {
        *self.closing.borrow()
    }

    /// Resolves once [`ServiceHandle::close_streams`] is called.
    pub fn streams_closing(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.closing.subscribe();
        async move {
            // An error means the sender is gone: the service is gone too.
            let _ = rx.wait_for(|closed| *closed).await;
        }
    }

    /// Replaces the alerter's receivers and settings (what `[[webhooks]]`
    /// and `[alerting]` say, reloaded on SIGHUP). Open alerts reach new
    /// receivers at the next evaluation, which this triggers.
    pub async fn reconfigure_alerting(&self, config: AlertingConfig) -> Result<(), ServiceError> {
        Ok(self.alerter.send(ReconfigureAlerting(config)).await?)
    }
}

/// Whether `events` create or change a plan (its schedule may have moved).
fn changes_plans(events: &[Event]) -> bool {
    events
        .iter()
        .any(|e| matches!(e, Event::PlanCreated(_) | Event::PlanChanged(_)))
}

/// A key check code as typed: lowercase hex digits only (dashes, spaces
/// and case are for humans).
fn normalize_key_check(code: &str) -> String {
    code.chars()
        .filter(char::is_ascii_hexdigit)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Compares two byte strings in time that depends only on their lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
