//! Vouch's orchestration layer: what runs when, and what to do when an actor
//! fails.
//!
//! This crate decides; it neither chunks nor encrypts. Today it holds the
//! pure building blocks the scheduler and the supervision tree are made of:
//!
//! * [`Clock`], [`SystemClock`], [`ManualClock`]: the one clock abstraction,
//!   so tests and chaos runs move time by hand.
//! * [`Schedule`], [`next_after`], [`catch_up`], [`jitter`],
//!   [`PlanSchedule`], [`InFlight`]: cron schedules, one catch-up run after
//!   downtime, stable per-plan jitter, single flight per plan.
//! * [`BackoffPolicy`], [`Backoff`], [`RestartGate`]: exponential restart
//!   backoff for supervised actix actors.
//! * [`service`]: the running service — event store, read model,
//!   dispatcher, scheduler and alerter actors, started by
//!   [`service::start`] and driven through a [`service::ServiceHandle`].
//! * [`report`]: protection reports folded from the log (JSON, CSV,
//!   HTML with SVG charts, PDF through Chromium).

#![warn(missing_docs)]

mod clock;
pub mod report;
mod schedule;
pub mod service;
mod supervisor;

pub use clock::{
    duration_to_ns, now_utc, timer_delay, unix_ns_to_utc, Clock, ManualClock, SystemClock,
    NANOS_PER_SEC,
};
pub use schedule::{
    catch_up, jitter, next_after, time_zone, time_zone_names, utc_offsets, AlreadyRunning,
    Decision, InFlight, PlanSchedule, RunGuard, Schedule, ScheduleError, UtcOffsets,
    MAX_COUNTED_SLOTS,
};
pub use supervisor::{Backoff, BackoffPolicy, RestartGate, SupervisorError};
