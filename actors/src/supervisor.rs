//! Restart policy of the supervision tree: exponential backoff.
//!
//! [`Backoff`] is pure bookkeeping over times read from a
//! [`Clock`](crate::Clock): after the n-th consecutive failure it asks for a
//! delay of `initial * factor^(n-1)`, capped at `max`; an actor that stayed
//! up for `reset_after` before failing starts again from `initial`.
//!
//! [`RestartGate`] plugs that policy into an actix [`Supervised`] actor:
//! call [`RestartGate::restarting`] from [`Supervised::restarting`] and
//! [`RestartGate::started`] from [`Actor::started`]. The restarted actor
//! then holds its mailbox shut for the backoff delay (messages queue, none
//! are lost) before handling anything.
//!
//! [`Supervised`]: actix::Supervised
//! [`Supervised::restarting`]: actix::Supervised::restarting
//! [`Actor::started`]: actix::Actor::started

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, AsyncContext, Context};

use crate::clock::{duration_to_ns, Clock};

/// An invalid [`BackoffPolicy`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SupervisorError {
    /// `factor` must be at least 1 (1 means a constant delay).
    #[error("backoff factor must be at least 1, got {0}")]
    Factor(u32),
    /// `initial` must not exceed `max`.
    #[error("initial backoff {initial:?} exceeds the maximum {max:?}")]
    InitialAboveMax {
        /// The initial delay given.
        initial: Duration,
        /// The maximum delay given.
        max: Duration,
    },
}

/// How long to wait before restarting a failed actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffPolicy {
    initial: Duration,
    factor: u32,
    max: Duration,
    reset_after: Duration,
}

impl Default for BackoffPolicy {
    /// 1 s, doubling, at most 5 minutes; reset after 10 minutes of uptime.
    fn default() -> Self {
        BackoffPolicy {
            initial: Duration::from_secs(1),
            factor: 2,
            max: Duration::from_secs(300),
            reset_after: Duration::from_secs(600),
        }
    }
}

impl BackoffPolicy {
    /// A policy: first delay `initial`, multiplied by `factor` after each
    /// further consecutive failure, never above `max`; an actor that ran for
    /// `reset_after` without failing is considered stable again.
    pub fn new(
        initial: Duration,
        factor: u32,
        max: Duration,
        reset_after: Duration,
    ) -> Result<Self, SupervisorError> {
        if factor == 0 {
            return Err(SupervisorError::Factor(factor));
        }
        if initial > max {
            return Err(SupervisorError::InitialAboveMax { initial, max });
        }
        Ok(BackoffPolicy {
            initial,
            factor,
            max,
            reset_after,
        })
    }

    /// The first delay.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The growth factor between consecutive delays.
    pub fn factor(&self) -> u32 {
        self.factor
    }

    /// The largest delay.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The uptime after which the failure count starts over.
    pub fn reset_after(&self) -> Duration {
        self.reset_after
    }

    /// The delay after `failures` consecutive failures: zero for none,
    /// `initial * factor^(failures-1)` capped at `max` otherwise.
    pub fn delay(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let growth = u128::from(self.factor).checked_pow(failures - 1);
        match growth.and_then(|g| self.initial.as_nanos().checked_mul(g)) {
            Some(ns) if ns < self.max.as_nanos() => {
                // ns < max, which fits a Duration.
                Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
            }
            _ => self.max,
        }
    }
}

/// The failure bookkeeping of one supervised actor.
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: BackoffPolicy,
    failures: u32,
    started_unix_ns: Option<i64>,
}

impl Backoff {
    /// No failures yet.
    pub fn new(policy: BackoffPolicy) -> Self {
        Backoff {
            policy,
            failures: 0,
            started_unix_ns: None,
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> &BackoffPolicy {
        &self.policy
    }

    /// Consecutive failures counted so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Records that the actor (re)started at `now_unix_ns`.
    pub fn started(&mut self, now_unix_ns: i64) {
        self.started_unix_ns = Some(now_unix_ns);
    }

    /// Records a failure at `now_unix_ns` and returns the delay to wait
    /// before the next start.
    ///
    /// If the actor had been up for at least `reset_after`, the earlier
    /// failures are forgotten first, so the delay is `initial` again.
    pub fn failed(&mut self, now_unix_ns: i64) -> Duration {
        if let Some(started) = self.started_unix_ns.take() {
            let uptime = now_unix_ns.saturating_sub(started);
            if uptime >= duration_to_ns(self.policy.reset_after) {
                self.failures = 0;
            }
        }
        self.failures = self.failures.saturating_add(1);
        self.policy.delay(self.failures)
    }
}

/// Applies a [`Backoff`] to an actix supervised actor.
///
/// Keep it inside the actor (the struct survives a restart, only its
/// context is renewed), call [`restarting`](Self::restarting) from
/// `Supervised::restarting` and [`started`](Self::started) from
/// `Actor::started`.
pub struct RestartGate {
    backoff: Backoff,
    clock: Arc<dyn Clock>,
    pending: Duration,
    restarts: u64,
}

impl std::fmt::Debug for RestartGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestartGate")
            .field("backoff", &self.backoff)
            .field("pending", &self.pending)
            .field("restarts", &self.restarts)
            .finish_non_exhaustive()
    }
}

impl RestartGate {
    /// A gate reading time from `clock`.
    pub fn new(policy: BackoffPolicy, clock: Arc<dyn Clock>) -> Self {
        RestartGate {
            backoff: Backoff::new(policy),
            clock,
            pending: Duration::ZERO,
            restarts: 0,
        }
    }

    /// Records the failure that led to this restart; returns the delay the
    /// next [`started`](Self::started) will wait.
    pub fn restarting(&mut self) -> Duration {
        self.restarts = self.restarts.saturating_add(1);
        self.pending = self.backoff.failed(self.clock.now_unix_ns());
        self.pending
    }

    /// Records the start and, after a failure, keeps the actor from handling
    /// messages until the backoff delay has passed (they wait in the
    /// mailbox).
    pub fn started<A>(&mut self, ctx: &mut Context<A>)
    where
        A: Actor<Context = Context<A>>,
    {
        self.backoff.started(self.clock.now_unix_ns());
        let delay = std::mem::take(&mut self.pending);
        if !delay.is_zero() {
            tracing::warn!(delay_ms = delay.as_millis() as u64, "restart backoff");
            ctx.wait(actix::fut::wrap_future::<_, A>(actix::clock::sleep(delay)));
        }
    }

    /// How many times the actor was restarted.
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// Consecutive failures, as the backoff counts them.
    pub fn failures(&self) -> u32 {
        self.backoff.failures()
    }
}

#[cfg(test)]
mod tests;
