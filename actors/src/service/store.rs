//! The event-store actor: the single writer of the log.
//!
//! Appends run on the blocking pool, so several in flight share one
//! `fdatasync` ([`SharedLog`]'s group commit) and the actor's own arbiter
//! never waits on the disk. A caller's `Append` is answered only once its
//! events are durable. Committed events are then fanned out, in sequence
//! order, to the subscribers: actors get them with `try_send` (their
//! mailboxes are bounded, and one that is full catches up from the log
//! later), the web's live stream through a bounded broadcast channel (a
//! receiver that lags re-reads the log).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use actix::prelude::*;
use tokio::sync::broadcast;
use vouch_events::{AppendReceipt, Envelope, Event, SharedLog, Subscription};

use super::error::ServiceError;
use crate::RestartGate;

/// Append events; answered once they are durable.
#[derive(Message)]
#[rtype(result = "Result<AppendReceipt, ServiceError>")]
pub struct Append(pub Vec<Event>);

/// Append events only if the log then ends at `expected_last_seq`
/// (optimistic concurrency: the state the caller decided on is still the
/// newest); otherwise nothing is written and the answer is
/// `EventError::Conflict`.
#[derive(Message)]
#[rtype(result = "Result<AppendReceipt, ServiceError>")]
pub struct AppendExpecting {
    /// The events.
    pub events: Vec<Event>,
    /// Where the log must end for them to be appended.
    pub expected_last_seq: u64,
}

/// Publish what was committed (sent by an append's own future to the
/// store once its events are durable).
#[derive(Message)]
#[rtype(result = "()")]
struct Published;

/// Committed events, in order, sent to subscribers.
#[derive(Message, Clone)]
#[rtype(result = "()")]
pub struct Committed(pub Arc<Vec<Arc<Envelope>>>);

/// Adds a subscriber actor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Subscribe(pub Recipient<Committed>);

/// Capacity of the live broadcast channel.
pub const LIVE_CAPACITY: usize = 4096;

/// Whether the log takes writes: set by the event store after every
/// append, read by readiness, metrics and the binary (which exits, so its
/// supervisor restarts it and the log is reopened and repaired, once
/// appends have failed for too long).
#[derive(Debug, Default)]
pub struct AppendHealth {
    failing: AtomicBool,
    consecutive_failures: AtomicU64,
    failing_since_unix_ns: AtomicI64,
    reason: Mutex<Option<String>>,
    /// Tests: the store refuses appends (as a full disk would) while set.
    #[cfg(test)]
    refuse: AtomicBool,
}

/// What [`AppendHealth`] says now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendStatus {
    /// The last append succeeded (or none was tried).
    pub healthy: bool,
    /// Appends that failed in a row.
    pub consecutive_failures: u64,
    /// Since when appends fail (by the service's clock), when they do.
    pub failing_since_unix_ns: Option<i64>,
    /// The last failure, when appends fail.
    pub reason: Option<String>,
}

impl AppendStatus {
    /// Whether appends have failed for at least `after` at `now_unix_ns`:
    /// the service cannot record anything and has not recovered by itself
    /// (a poisoned writer is reopened at most once a second, and that has
    /// kept failing), so it should stop and be restarted.
    pub fn should_escalate(&self, now_unix_ns: i64, after: std::time::Duration) -> bool {
        self.failing_since_unix_ns
            .is_some_and(|t| now_unix_ns.saturating_sub(t) >= crate::duration_to_ns(after))
    }
}

impl AppendHealth {
    /// Records a successful append.
    pub fn succeeded(&self) {
        if self.failing.swap(false, Ordering::SeqCst) {
            tracing::info!("the event log takes writes again");
        }
        self.consecutive_failures.store(0, Ordering::SeqCst);
        *self.reason.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Records a failed append at `now_unix_ns`.
    pub fn failed(&self, reason: String, now_unix_ns: i64) {
        if !self.failing.swap(true, Ordering::SeqCst) {
            self.failing_since_unix_ns
                .store(now_unix_ns, Ordering::SeqCst);
        }
        let n = self.consecutive_failures.fetch_add(1, Ordering::SeqCst) + 1;
        tracing::error!(consecutive_failures = n, reason = %reason, "an append to the event log failed");
        *self.reason.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason);
    }

    /// Tests: makes the store refuse appends (without touching the log)
    /// until called again with `false`.
    #[cfg(test)]
    pub(crate) fn refuse_appends(&self, refuse: bool) {
        self.refuse.store(refuse, Ordering::SeqCst);
    }

    /// The status now.
    pub fn status(&self) -> AppendStatus {
        let failing = self.failing.load(Ordering::SeqCst);
        AppendStatus {
            healthy: !failing,
            consecutive_failures: self.consecutive_failures.load(Ordering::SeqCst),
            failing_since_unix_ns: failing
                .then(|| self.failing_since_unix_ns.load(Ordering::SeqCst)),
            reason: self
                .reason
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }
}

/// The single writer of the log.
pub struct EventStore {
    log: Arc<SharedLog>,
    /// Follows the log from the first unpublished event; reads only what
    /// was appended since the last publish.
    tail: Subscription,
    subscribers: Vec<Recipient<Committed>>,
    live: broadcast::Sender<Arc<Envelope>>,
    health: Arc<AppendHealth>,
    clock: Arc<dyn crate::Clock>,
    gate: RestartGate,
}

impl EventStore {
    /// The store over an open log; `live` feeds the web's event stream.
    pub fn new(
        log: Arc<SharedLog>,
        live: broadcast::Sender<Arc<Envelope>>,
        health: Arc<AppendHealth>,
        clock: Arc<dyn crate::Clock>,
        gate: RestartGate,
    ) -> Self {
        let tail = log.subscribe(log.last_seq() + 1);
        EventStore {
            health,
            clock,
            log,
            tail,
            subscribers: Vec::new(),
            live,
            gate,
        }
    }

    /// Publishes everything durable not published yet, in order.
    fn publish(&mut self) {
        let batch: Vec<Arc<Envelope>> = match self.tail.drain() {
            Ok(envs) => envs.into_iter().map(Arc::new).collect(),
            Err(e) => {
                // Subscribers catch up from the log on their own; nothing is lost.
                tracing::error!(error = %e, next = self.tail.next_seq(), "could not read back committed events to publish");
                return;
            }
        };
        if batch.is_empty() {
            return;
        }
        for env in &batch {
            // No receiver (nobody watching) is fine.
            let _ = self.live.send(env.clone());
        }
        let msg = Committed(Arc::new(batch));
        self.subscribers.retain(|s| match s.try_send(msg.clone()) {
            Ok(()) => true,
            Err(SendError::Full(_)) => {
                tracing::warn!("a subscriber's mailbox is full; it will catch up from the log");
                true
            }
            Err(SendError::Closed(_)) => false,
        });
    }
}

impl Actor for EventStore {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        tracing::info!(seq = self.log.last_seq(), "event store started");
        self.gate.started(ctx);
    }
}

impl Supervised for EventStore {
    /// The log is the state: appends that were in flight either reached it
    /// (their callers saw an error, never a false acknowledgement) or not.
    /// Publishing resumes after the last event handed out; a subscriber
    /// that missed a batch cut short catches up from the log.
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        let delay = self.gate.restarting();
        tracing::warn!(
            restarts = self.gate.restarts(),
            delay_ms = delay.as_millis() as u64,
            "event store restarting"
        );
        self.tail = self.log.subscribe(self.tail.next_seq());
    }
}

impl EventStore {
    /// Runs `write` on the blocking pool, answering its caller from a
    /// future of its own (not of the actor's context): a restart of the
    /// store (a panic elsewhere in it) drops the actor's futures, and an
    /// append in flight would then answer "error" for events that are
    /// durable (review finding L6). Health is recorded and publishing is
    /// requested from that future.
    fn write(
        &self,
        ctx: &mut Context<Self>,
        write: impl FnOnce(&SharedLog) -> vouch_events::Result<AppendReceipt> + Send + 'static,
    ) -> ResponseFuture<Result<AppendReceipt, ServiceError>> {
        let (log, health, clock, me) = (
            self.log.clone(),
            self.health.clone(),
            self.clock.clone(),
            ctx.address(),
        );
        Box::pin(async move {
            #[cfg(test)]
            if health.refuse.load(Ordering::SeqCst) {
                let e = ServiceError::Unavailable("no space left on device (test)".into());
                health.failed(e.to_string(), clock.now_unix_ns());
                return Err(e);
            }
            let res = tokio::task::spawn_blocking(move || write(&log))
                .await
                .map_err(ServiceError::from)
                .and_then(|r| r.map_err(ServiceError::from));
            match &res {
                Ok(_) => {
                    health.succeeded();
                    me.do_send(Published);
                }
                // A refused expectation is an answer, not a failing log.
                Err(ServiceError::Log(vouch_events::EventError::Conflict { .. })) => {}
                Err(e) => health.failed(e.to_string(), clock.now_unix_ns()),
            }
            res
        })
    }
}

impl Handler<Append> for EventStore {
    type Result = ResponseFuture<Result<AppendReceipt, ServiceError>>;

    fn handle(&mut self, msg: Append, ctx: &mut Self::Context) -> Self::Result {
        self.write(ctx, move |log| log.append(msg.0))
    }
}

impl Handler<AppendExpecting> for EventStore {
    type Result = ResponseFuture<Result<AppendReceipt, ServiceError>>;

    fn handle(&mut self, msg: AppendExpecting, ctx: &mut Self::Context) -> Self::Result {
        self.write(ctx, move |log| {
            log.append_expecting(msg.events, msg.expected_last_seq)
        })
    }
}

impl Handler<Published> for EventStore {
    type Result = ();

    fn handle(&mut self, _msg: Published, _ctx: &mut Self::Context) {
        self.publish();
    }
}

impl Handler<Subscribe> for EventStore {
    type Result = ();

    fn handle(&mut self, msg: Subscribe, _ctx: &mut Self::Context) {
        self.subscribers.push(msg.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn append_health_follows_the_appends_and_escalates_after_a_while() {
        let h = AppendHealth::default();
        assert!(h.status().healthy);
        h.failed("no space left on device".into(), 100);
        h.failed("no space left on device".into(), 200);
        let st = h.status();
        assert!(!st.healthy);
        assert_eq!(st.consecutive_failures, 2);
        assert_eq!(
            st.failing_since_unix_ns,
            Some(100),
            "since the first failure"
        );
        assert_eq!(st.reason.as_deref(), Some("no space left on device"));
        assert!(!st.should_escalate(150, Duration::from_nanos(100)));
        assert!(st.should_escalate(200, Duration::from_nanos(100)));
        h.succeeded();
        let st = h.status();
        assert!(st.healthy && st.reason.is_none() && st.consecutive_failures == 0);
        assert!(!st.should_escalate(i64::MAX, Duration::ZERO));
    }
}
