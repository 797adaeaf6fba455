//! The supervision tree's restart mechanism: an actor that panics in a
//! handler (or in a future it waits on), or that stops itself, is
//! restarted in place.
//!
//! actix's own `Supervisor` restarts an actor that *stops*, but a panic
//! unwinds through the arbiter's task and kills the actor for good: its
//! mailbox closes and every `Addr` to it fails from then on. [`start`] and
//! [`start_in_arbiter`] poll the actor inside `catch_unwind` instead. On a
//! panic the actor's context is reset exactly as on an actix restart (every
//! spawned and awaited future dropped), then [`Supervised::restarting`]
//! throws away what the actor derived (its queue, its caches) and
//! [`Actor::started`] rebuilds it from the log; a [`RestartGate`] inside
//! the actor holds its mailbox shut for the backoff delay. The `Addr` and
//! every `Recipient` made from it stay valid across restarts, and messages
//! sent meanwhile wait in the mailbox.
//!
//! Polling the context after a panic is sound: it is safe Rust, and the
//! only state the panic can have left half-done is the actor's, which
//! `restarting` discards.
//!
//! [`RestartGate`]: crate::RestartGate

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use actix::dev::channel;
use actix::dev::ContextFut;
use actix::prelude::*;

/// The mailbox size of a supervised actor (actix's default).
const MAILBOX: usize = 16;

/// Starts `A` on the current arbiter under supervision.
pub fn start<A, F>(name: &'static str, f: F) -> Addr<A>
where
    A: Actor<Context = Context<A>> + Supervised,
    F: FnOnce(&mut Context<A>) -> A,
{
    let mut ctx = Context::new();
    let act = f(&mut ctx);
    let addr = ctx.address();
    actix::spawn(Supervise {
        name,
        fut: ctx.into_future(act),
    });
    addr
}

/// Starts `A` on `arbiter` under supervision.
pub fn start_in_arbiter<A, F>(name: &'static str, arbiter: &ArbiterHandle, f: F) -> Addr<A>
where
    A: Actor<Context = Context<A>> + Supervised,
    F: FnOnce(&mut Context<A>) -> A + Send + 'static,
{
    let (tx, rx) = channel::channel(MAILBOX);
    arbiter.spawn_fn(move || {
        let mut ctx = Context::with_receiver(rx);
        let act = f(&mut ctx);
        actix::spawn(Supervise {
            name,
            fut: ctx.into_future(act),
        });
    });
    Addr::new(tx)
}

/// The future driving a supervised actor.
struct Supervise<A>
where
    A: Actor<Context = Context<A>>,
{
    name: &'static str,
    fut: ContextFut<A, Context<A>>,
}

impl<A> Future for Supervise<A>
where
    A: Actor<Context = Context<A>> + Supervised,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        // `ContextFut` is `Unpin`, so is `Supervise`.
        let this = self.get_mut();
        loop {
            let polled = catch_unwind(AssertUnwindSafe(|| Pin::new(&mut this.fut).poll(cx)));
            match polled {
                Ok(Poll::Pending) => return Poll::Pending,
                Ok(Poll::Ready(())) => {
                    // It stopped. With nobody left to talk to it, it is done;
                    // otherwise it is restarted, as actix's own supervisor does.
                    if !this.fut.restart() {
                        tracing::debug!(actor = this.name, "actor stopped");
                        return Poll::Ready(());
                    }
                    tracing::warn!(actor = this.name, "actor stopped itself; restarted");
                }
                Err(payload) => {
                    tracing::error!(
                        actor = this.name,
                        panic = %panic_message(payload.as_ref()),
                        "actor panicked; restarting it from the log"
                    );
                    if !this.fut.restart() {
                        return Poll::Ready(());
                    }
                }
            }
        }
    }
}

/// The text of a panic, when it has one.
pub fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;
    use crate::{BackoffPolicy, RestartGate};

    /// Counts what it handles; panics on `Boom`; `rebuilt` counts the
    /// times its derived state was rebuilt.
    struct Counter {
        handled: u32,
        rebuilt: Arc<AtomicU32>,
        gate: RestartGate,
    }

    impl Actor for Counter {
        type Context = Context<Self>;

        fn started(&mut self, ctx: &mut Self::Context) {
            self.rebuilt.fetch_add(1, Ordering::SeqCst);
            self.gate.started(ctx);
        }
    }

    impl Supervised for Counter {
        fn restarting(&mut self, _ctx: &mut Self::Context) {
            self.handled = 0;
            self.gate.restarting();
        }
    }

    #[derive(Message)]
    #[rtype(result = "u32")]
    struct Add;

    #[derive(Message)]
    #[rtype(result = "()")]
    struct Boom;

    impl Handler<Add> for Counter {
        type Result = u32;
        fn handle(&mut self, _: Add, _: &mut Self::Context) -> u32 {
            self.handled += 1;
            self.handled
        }
    }

    impl Handler<Boom> for Counter {
        type Result = ();
        fn handle(&mut self, _: Boom, _: &mut Self::Context) {
            panic!("boom on purpose");
        }
    }

    fn counter(rebuilt: Arc<AtomicU32>) -> Counter {
        let policy = BackoffPolicy::new(
            Duration::from_millis(20),
            2,
            Duration::from_secs(1),
            Duration::from_secs(60),
        )
        .expect("policy");
        Counter {
            handled: 0,
            rebuilt,
            gate: RestartGate::new(policy, Arc::new(ManualClock::new(0))),
        }
    }

    #[actix::test]
    async fn a_panicking_actor_is_restarted_behind_the_same_address() {
        let rebuilt = Arc::new(AtomicU32::new(0));
        let addr = start("counter", {
            let rebuilt = rebuilt.clone();
            |_| counter(rebuilt)
        });
        assert_eq!(addr.send(Add).await.expect("add"), 1);
        assert_eq!(addr.send(Add).await.expect("add"), 2);

        // The panicking message gets no answer; the actor survives it.
        assert!(addr.send(Boom).await.is_err());
        assert_eq!(addr.send(Add).await.expect("add after the panic"), 1);
        assert_eq!(rebuilt.load(Ordering::SeqCst), 2, "started again");

        // And again: the address keeps working after repeated failures.
        assert!(addr.send(Boom).await.is_err());
        assert_eq!(addr.send(Add).await.expect("add after two panics"), 1);
        assert_eq!(rebuilt.load(Ordering::SeqCst), 3);
    }

    #[actix::test]
    async fn restarts_wait_out_the_backoff_before_handling_messages() {
        let rebuilt = Arc::new(AtomicU32::new(0));
        let addr = start("counter", {
            let rebuilt = rebuilt.clone();
            |_| counter(rebuilt)
        });
        let _ = addr.send(Boom).await;
        let _ = addr.send(Boom).await; // second consecutive failure: 40 ms
        let t = std::time::Instant::now();
        assert_eq!(addr.send(Add).await.expect("add"), 1);
        assert!(
            t.elapsed() >= Duration::from_millis(35),
            "the mailbox stayed shut for the backoff ({:?})",
            t.elapsed()
        );
    }

    #[actix::test]
    async fn an_actor_on_another_arbiter_is_supervised_too() {
        let rebuilt = Arc::new(AtomicU32::new(0));
        let arbiter = Arbiter::new();
        let addr = start_in_arbiter("counter", &arbiter.handle(), {
            let rebuilt = rebuilt.clone();
            move |_| counter(rebuilt)
        });
        assert!(addr.send(Boom).await.is_err());
        assert_eq!(addr.send(Add).await.expect("add"), 1);
        assert_eq!(rebuilt.load(Ordering::SeqCst), 2);
        arbiter.stop();
    }
}
