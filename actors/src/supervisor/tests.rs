use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, ActorContext, Context, Handler, Message, Supervised, Supervisor};
use proptest::prelude::*;

use super::*;
use crate::clock::{ManualClock, NANOS_PER_SEC};

fn policy(initial_s: u64, factor: u32, max_s: u64, reset_s: u64) -> BackoffPolicy {
    match BackoffPolicy::new(
        Duration::from_secs(initial_s),
        factor,
        Duration::from_secs(max_s),
        Duration::from_secs(reset_s),
    ) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn rejects_invalid_policies() {
    let s = Duration::from_secs;
    assert_eq!(
        BackoffPolicy::new(s(1), 0, s(10), s(60)),
        Err(SupervisorError::Factor(0))
    );
    assert_eq!(
        BackoffPolicy::new(s(11), 2, s(10), s(60)),
        Err(SupervisorError::InitialAboveMax {
            initial: s(11),
            max: s(10)
        })
    );
}

#[test]
fn delays_grow_exponentially_up_to_the_max() {
    let p = policy(1, 2, 60, 600);
    let secs: Vec<u64> = (0..10).map(|n| p.delay(n).as_secs()).collect();
    assert_eq!(secs, [0, 1, 2, 4, 8, 16, 32, 60, 60, 60]);
    // Huge failure counts saturate instead of overflowing.
    assert_eq!(p.delay(u32::MAX), Duration::from_secs(60));
    // Factor 1 is a constant delay.
    assert_eq!(policy(5, 1, 60, 600).delay(40), Duration::from_secs(5));
}

#[test]
fn backoff_resets_after_a_stable_period() {
    let clock = ManualClock::new(0);
    let mut b = Backoff::new(policy(1, 2, 60, 600));
    b.started(clock.now_unix_ns());
    clock.advance(crate::duration_to_ns(Duration::from_secs(5)));
    assert_eq!(b.failed(clock.now_unix_ns()), Duration::from_secs(1));
    b.started(clock.now_unix_ns());
    clock.advance(crate::duration_to_ns(Duration::from_secs(5)));
    assert_eq!(b.failed(clock.now_unix_ns()), Duration::from_secs(2));
    b.started(clock.now_unix_ns());
    clock.advance(crate::duration_to_ns(Duration::from_secs(599)));
    assert_eq!(b.failed(clock.now_unix_ns()), Duration::from_secs(4));
    assert_eq!(b.failures(), 3);
    // Up for exactly reset_after: stable, so back to the initial delay.
    b.started(clock.now_unix_ns());
    clock.advance(crate::duration_to_ns(Duration::from_secs(600)));
    assert_eq!(b.failed(clock.now_unix_ns()), Duration::from_secs(1));
    assert_eq!(b.failures(), 1);
}

#[test]
fn failing_without_a_recorded_start_keeps_counting() {
    let mut b = Backoff::new(policy(1, 3, 60, 600));
    assert_eq!(b.failed(0), Duration::from_secs(1));
    assert_eq!(b.failed(1_000 * NANOS_PER_SEC), Duration::from_secs(3));
}

proptest! {
    /// Delays never shrink as failures accumulate and never exceed the max.
    #[test]
    fn delays_are_monotone_and_bounded(
        initial_ms in 0u64..10_000,
        factor in 1u32..10,
        extra_ms in 0u64..1_000_000,
        n in 0u32..200,
    ) {
        let max = Duration::from_millis(initial_ms + extra_ms);
        let p = BackoffPolicy::new(Duration::from_millis(initial_ms), factor, max, Duration::from_secs(1))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(p.delay(n) <= p.delay(n + 1));
        prop_assert!(p.delay(n + 1) <= max);
        prop_assert!(p.delay(1) == p.initial());
    }
}

// ---- An actix supervised actor restarted with the backoff ----

/// A job for the test actor; a panicking job brings the actor down.
struct Run(Box<dyn FnOnce() -> u32 + Send>);

impl Message for Run {
    type Result = Result<u32, &'static str>;
}

/// Restarts seen from outside the actor.
#[derive(Default)]
struct Seen {
    starts: std::sync::atomic::AtomicU32,
}

struct Flaky {
    gate: RestartGate,
    seen: Arc<Seen>,
}

impl Actor for Flaky {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.seen
            .starts
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.gate.started(ctx);
    }
}

impl Supervised for Flaky {
    fn restarting(&mut self, _ctx: &mut Context<Self>) {
        self.gate.restarting();
    }
}

impl Handler<Run> for Flaky {
    type Result = Result<u32, &'static str>;

    fn handle(&mut self, msg: Run, ctx: &mut Context<Self>) -> Self::Result {
        // actix does not catch panics: turn one into a stop, which the
        // supervisor answers with a restart.
        match catch_unwind(AssertUnwindSafe(msg.0)) {
            Ok(v) => Ok(v),
            Err(_) => {
                ctx.stop();
                Err("job panicked")
            }
        }
    }
}

/// The paused tokio clock jumped by the backoff delay (to the millisecond).
fn assert_waited(since: tokio::time::Instant, secs: u64) {
    let waited = since.elapsed();
    let want = Duration::from_secs(secs);
    assert!(
        waited >= want && waited < want + Duration::from_millis(5),
        "waited {waited:?}, expected {want:?}"
    );
}

fn ok(v: u32) -> Run {
    Run(Box::new(move || v))
}

fn boom() -> Run {
    Run(Box::new(|| {
        panic!("injected failure (expected in this test)")
    }))
}

#[actix::test]
async fn panicking_actor_is_restarted_with_backoff() {
    tokio::time::pause();
    let clock = ManualClock::new(0);
    let seen = Arc::new(Seen::default());
    let gate = RestartGate::new(policy(1, 2, 60, 600), Arc::new(clock.clone()));
    let s2 = seen.clone();
    let addr = Supervisor::start(move |_| Flaky { gate, seen: s2 });
    let starts = || seen.starts.load(std::sync::atomic::Ordering::SeqCst);

    assert_eq!(addr.send(ok(1)).await.ok(), Some(Ok(1)));
    assert_eq!(starts(), 1);

    // First failure: restarted, then holds its mailbox for 1 s.
    assert_eq!(addr.send(boom()).await.ok(), Some(Err("job panicked")));
    let t0 = tokio::time::Instant::now();
    assert_eq!(addr.send(ok(2)).await.ok(), Some(Ok(2)));
    assert_eq!(starts(), 2);
    assert_waited(t0, 1);

    // Second failure shortly after: the delay doubles.
    clock.advance(crate::duration_to_ns(Duration::from_secs(10)));
    assert_eq!(addr.send(boom()).await.ok(), Some(Err("job panicked")));
    let t1 = tokio::time::Instant::now();
    assert_eq!(addr.send(ok(3)).await.ok(), Some(Ok(3)));
    assert_eq!(starts(), 3);
    assert_waited(t1, 2);

    // After a stable period the delay starts over.
    clock.advance(crate::duration_to_ns(Duration::from_secs(600)));
    assert_eq!(addr.send(boom()).await.ok(), Some(Err("job panicked")));
    let t2 = tokio::time::Instant::now();
    assert_eq!(addr.send(ok(4)).await.ok(), Some(Ok(4)));
    assert_eq!(starts(), 4);
    assert_waited(t2, 1);
}
