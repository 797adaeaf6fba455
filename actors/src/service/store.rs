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

use std::sync::Arc;

use actix::prelude::*;
use tokio::sync::broadcast;
use vouch_events::{AppendReceipt, Envelope, Event, SharedLog, Subscription};

use super::error::ServiceError;
use crate::RestartGate;

/// Append events; answered once they are durable.
#[derive(Message)]
#[rtype(result = "Result<AppendReceipt, ServiceError>")]
pub struct Append(pub Vec<Event>);

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

/// The single writer of the log.
pub struct EventStore {
    log: Arc<SharedLog>,
    /// Follows the log from the first unpublished event; reads only what
    /// was appended since the last publish.
    tail: Subscription,
    subscribers: Vec<Recipient<Committed>>,
    live: broadcast::Sender<Arc<Envelope>>,
    gate: RestartGate,
}

impl EventStore {
    /// The store over an open log; `live` feeds the web's event stream.
    pub fn new(
        log: Arc<SharedLog>,
        live: broadcast::Sender<Arc<Envelope>>,
        gate: RestartGate,
    ) -> Self {
        let tail = log.subscribe(log.last_seq() + 1);
        EventStore {
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

impl Handler<Append> for EventStore {
    type Result = ResponseActFuture<Self, Result<AppendReceipt, ServiceError>>;

    fn handle(&mut self, msg: Append, _ctx: &mut Self::Context) -> Self::Result {
        let log = self.log.clone();
        let write = async move {
            tokio::task::spawn_blocking(move || log.append(msg.0))
                .await
                .map_err(ServiceError::from)?
                .map_err(ServiceError::from)
        };
        Box::pin(write.into_actor(self).map(|res, act, _ctx| {
            if res.is_ok() {
                act.publish();
            }
            res
        }))
    }
}

impl Handler<Subscribe> for EventStore {
    type Result = ();

    fn handle(&mut self, msg: Subscribe, _ctx: &mut Self::Context) {
        self.subscribers.push(msg.0);
    }
}
