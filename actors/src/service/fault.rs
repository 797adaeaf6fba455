//! A test hook: make one supervised actor panic in a handler, so its
//! supervisor restarts it (`supervise.rs`). The deterministic simulation
//! (`actors/tests/simulation.rs`) uses it for its "restart of one actor"
//! steps. Not part of the product's API: hidden from the docs, and nothing
//! outside tests calls it.

use actix::prelude::*;

use super::alerting::Alerter;
use super::dispatcher::Dispatcher;
use super::read_model::ReadModelActor;
use super::scheduler::Scheduler;
use super::store::EventStore;

/// Which actor [`ServiceHandle::panic_actor`](super::ServiceHandle::panic_actor)
/// makes panic.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActorName {
    /// The event store (on its own arbiter).
    EventStore,
    /// The read model (on its own arbiter).
    ReadModel,
    /// The dispatcher.
    Dispatcher,
    /// The scheduler.
    Scheduler,
    /// The alerter.
    Alerter,
}

/// Panic now (the message of a test hook).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct PanicForTest;

macro_rules! panics {
    ($actor:ty, $name:literal) => {
        impl Handler<PanicForTest> for $actor {
            type Result = ();

            fn handle(&mut self, _: PanicForTest, _: &mut Self::Context) {
                panic!(concat!("simulated panic of the ", $name, " (test hook)"));
            }
        }
    };
}

panics!(EventStore, "event store");
panics!(ReadModelActor, "read model");
panics!(Dispatcher, "dispatcher");
panics!(Scheduler, "scheduler");
panics!(Alerter, "alerter");
