//! The read-model actor: the projections in memory, kept current from the
//! store's fan-out (or from the log when it fell behind), checkpointed to
//! the sled read store, answering queries.
//!
//! It runs on its own arbiter (thread), so a long query, a catch-up from
//! the log or a rebuild never holds up the dispatcher, the scheduler or the
//! alerter. A checkpoint takes a copy of the projections here and encodes
//! and writes it on the blocking pool, one at a time, so queries are
//! answered while it is written (review finding M4).

use std::time::{Duration, Instant};

use actix::prelude::*;
use vouch_events::{Checkpoint, LogReader, Projections, ReadModel, SledStore};

use super::error::ServiceError;
use super::store::Committed;
use crate::RestartGate;

/// A query over the projections, answered once they include `min_seq`
/// (read your own writes: pass the seq of the append you just made).
pub struct Query<R: 'static> {
    min_seq: u64,
    f: Box<dyn FnOnce(&Projections) -> R + Send>,
}

impl<R: 'static> Query<R> {
    /// A query seeing at least every event up to `min_seq`.
    pub fn new(min_seq: u64, f: impl FnOnce(&Projections) -> R + Send + 'static) -> Self {
        Query {
            min_seq,
            f: Box::new(f),
        }
    }
}

impl<R: 'static> Message for Query<R> {
    type Result = Result<R, ServiceError>;
}

/// How often the state is checkpointed to the read store by default.
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(30);

/// How long after a failed reopen the read model tries again.
const REOPEN_AGAIN_AFTER: Duration = Duration::from_secs(5);

/// Whether the read model answers queries: set by the read-model actor
/// when its projections become untrusted (a failed reopen, a read store
/// ahead of the log) and when a reopen succeeds; read by readiness and by
/// the alerter, which cannot ask the read model itself then.
#[derive(Debug, Default)]
pub struct ReadModelHealth {
    unavailable: std::sync::Mutex<Option<String>>,
}

impl ReadModelHealth {
    /// Why queries are refused, when they are.
    pub fn unavailable(&self) -> Option<String> {
        self.unavailable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set(&self, why: Option<String>) {
        *self
            .unavailable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = why;
    }
}

/// Holds the projections.
pub struct ReadModelActor {
    model: ReadModel<SledStore>,
    log: LogReader,
    gate: RestartGate,
    every: Duration,
    /// A checkpoint is being written on the blocking pool.
    writing: bool,
    /// The projections may be half-applied (a panic while folding) and
    /// could not be reopened: queries are refused until a reopen succeeds.
    untrusted: Option<String>,
    health: std::sync::Arc<ReadModelHealth>,
}

impl ReadModelActor {
    /// Wraps a read model opened (and caught up) over `log`.
    pub fn new(
        model: ReadModel<SledStore>,
        log: LogReader,
        gate: RestartGate,
        every: Duration,
        health: std::sync::Arc<ReadModelHealth>,
    ) -> Self {
        health.set(None);
        ReadModelActor {
            model,
            log,
            gate,
            every,
            writing: false,
            untrusted: None,
            health,
        }
    }

    /// Marks the projections untrusted (`Some(why)`) or trusted again.
    fn set_untrusted(&mut self, why: Option<String>) {
        self.health.set(why.clone());
        self.untrusted = why;
    }

    fn catch_up(&mut self) {
        if let Err(e) = self.model.catch_up(&self.log) {
            tracing::error!(error = %e, "read model could not catch up from the log");
        }
    }

    /// Starts a checkpoint of the current state on the blocking pool
    /// unless one is being written or the state is already stored.
    fn checkpoint_in_background(&mut self, ctx: &mut Context<Self>) {
        if self.writing || self.untrusted.is_some() {
            return;
        }
        let copied = Instant::now();
        let Some(job): Option<Checkpoint<SledStore>> = self.model.take_checkpoint() else {
            return;
        };
        let copy_ms = copied.elapsed().as_millis() as u64;
        let seq = job.seq();
        self.writing = true;
        let write = async move {
            let started = Instant::now();
            let res = tokio::task::spawn_blocking(move || job.write()).await;
            (res, started.elapsed())
        };
        ctx.spawn(write.into_actor(self).map(move |(res, took), act, _| {
            act.writing = false;
            match res {
                Ok(Ok(w)) => {
                    act.model.checkpoint_written(&w);
                    tracing::debug!(
                        seq,
                        bytes = w.bytes,
                        copy_ms,
                        write_ms = took.as_millis() as u64,
                        "read store checkpoint written"
                    );
                }
                Ok(Err(e)) => {
                    tracing::warn!(seq, error = %e, "read store checkpoint failed (it is rebuilt from the log)")
                }
                Err(e) => {
                    tracing::warn!(seq, error = %e, "read store checkpoint task failed (it is rebuilt from the log)")
                }
            }
        }));
    }

    /// Opens the projections again from the read store and the log. On
    /// failure they stay untrusted (queries get 503) and it is tried again
    /// later.
    fn reopen(&mut self, ctx: &mut Context<Self>) {
        match ReadModel::open_sealed(self.model.store().clone(), &self.log, self.model.seal_key()) {
            Ok(model) => {
                if self.untrusted.is_some() {
                    self.set_untrusted(None);
                    tracing::info!(
                        seq = model.projections().last_seq,
                        "read model reopened; answering queries again"
                    );
                }
                self.model = model;
            }
            Err(e) => {
                tracing::error!(error = %e, "could not reopen the read model; queries are refused until it reopens");
                self.set_untrusted(Some(e.to_string()));
                ctx.run_later(REOPEN_AGAIN_AFTER, |act, ctx| act.reopen(ctx));
            }
        }
    }
}

impl Actor for ReadModelActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(1024);
        self.gate.started(ctx);
        ctx.run_interval(self.every, |act, ctx| act.checkpoint_in_background(ctx));
        if self.untrusted.is_some() {
            ctx.run_later(REOPEN_AGAIN_AFTER, |act, ctx| act.reopen(ctx));
        }
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        if self.untrusted.is_some() {
            return;
        }
        if let Err(e) = self.model.checkpoint() {
            tracing::warn!(error = %e, "read store checkpoint failed (it is rebuilt from the log)");
        }
    }
}

impl Supervised for ReadModelActor {
    /// A panic in a query closure leaves the projections as they were (a
    /// query only borrows them), but one while an event was folded may
    /// have left it half-applied: the projections are opened again from
    /// the read store's last checkpoint and the log's tail. If that fails
    /// they are not trusted: queries are refused (503) until a reopen,
    /// tried again every few seconds, succeeds (review finding L10). The
    /// query that panicked gets no answer (its caller sees an error).
    fn restarting(&mut self, ctx: &mut Self::Context) {
        let delay = self.gate.restarting();
        tracing::warn!(
            restarts = self.gate.restarts(),
            delay_ms = delay.as_millis() as u64,
            "read model restarting"
        );
        // The context's futures were dropped: a checkpoint being written
        // finishes on its own, unobserved.
        self.writing = false;
        match ReadModel::open_sealed(self.model.store().clone(), &self.log, self.model.seal_key()) {
            Ok(model) => {
                self.set_untrusted(None);
                self.model = model;
            }
            Err(e) => {
                tracing::error!(error = %e, "could not reopen the read model; queries are refused until it reopens");
                self.set_untrusted(Some(e.to_string()));
            }
        }
        let _ = ctx;
    }
}

impl Handler<Committed> for ReadModelActor {
    type Result = ();

    fn handle(&mut self, msg: Committed, _ctx: &mut Self::Context) {
        if self.untrusted.is_some() {
            // Folded after the reopen, from the log.
            return;
        }
        for env in msg.0.iter() {
            let last = self.model.projections().last_seq;
            if env.seq <= last {
                continue;
            }
            if env.seq != last + 1 {
                // A batch was dropped on a full mailbox: read the gap.
                self.catch_up();
                continue;
            }
            self.model.apply(env);
        }
    }
}

impl<R: 'static> Handler<Query<R>> for ReadModelActor {
    type Result = MessageResult<Query<R>>;

    fn handle(&mut self, msg: Query<R>, _ctx: &mut Self::Context) -> Self::Result {
        if let Some(why) = &self.untrusted {
            return MessageResult(Err(ServiceError::Unavailable(format!(
                "the read model could not be reopened after a failure ({why}); it is tried again every few seconds"
            ))));
        }
        if self.model.projections().last_seq < msg.min_seq {
            self.catch_up();
        }
        MessageResult(Ok((msg.f)(self.model.projections())))
    }
}
