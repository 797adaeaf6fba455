//! The read-model actor: the projections in memory, kept current from the
//! store's fan-out (or from the log when it fell behind), checkpointed to
//! the sled read store, answering queries.

use std::time::Duration;

use actix::prelude::*;
use vouch_events::{LogReader, Projections, ReadModel, SledStore};

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
    type Result = R;
}

/// How often the state is checkpointed to the read store.
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(30);

/// Holds the projections.
pub struct ReadModelActor {
    model: ReadModel<SledStore>,
    log: LogReader,
    gate: RestartGate,
}

impl ReadModelActor {
    /// Wraps a read model opened (and caught up) over `log`.
    pub fn new(model: ReadModel<SledStore>, log: LogReader, gate: RestartGate) -> Self {
        ReadModelActor { model, log, gate }
    }

    fn catch_up(&mut self) {
        if let Err(e) = self.model.catch_up(&self.log) {
            tracing::error!(error = %e, "read model could not catch up from the log");
        }
    }

    fn checkpoint(&mut self) {
        if let Err(e) = self.model.checkpoint() {
            tracing::warn!(error = %e, "read store checkpoint failed (it is rebuilt from the log)");
        }
    }
}

impl Actor for ReadModelActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(1024);
        self.gate.started(ctx);
        ctx.run_interval(CHECKPOINT_EVERY, |act, _| act.checkpoint());
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.checkpoint();
    }
}

impl Supervised for ReadModelActor {
    /// A panic in a query closure leaves the projections as they were (a
    /// query only borrows them), but one while an event was folded may
    /// have left it half-applied: the projections are opened again from
    /// the read store's last checkpoint and the log's tail. The query that
    /// panicked gets no answer (its caller sees an error).
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        let delay = self.gate.restarting();
        tracing::warn!(
            restarts = self.gate.restarts(),
            delay_ms = delay.as_millis() as u64,
            "read model restarting"
        );
        match ReadModel::open(self.model.store().clone(), &self.log) {
            Ok(model) => self.model = model,
            Err(e) => {
                tracing::error!(error = %e, "could not reopen the read model; going on with the projections in memory");
            }
        }
    }
}

impl Handler<Committed> for ReadModelActor {
    type Result = ();

    fn handle(&mut self, msg: Committed, _ctx: &mut Self::Context) {
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
        if self.model.projections().last_seq < msg.min_seq {
            self.catch_up();
        }
        MessageResult((msg.f)(self.model.projections()))
    }
}
