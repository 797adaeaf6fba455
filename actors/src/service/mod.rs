//! The service: the supervision tree of actors that runs Vouch.
//!
//! ```text
//!              +-------------+   Committed (try_send, bounded)   +--------------+
//!  appends --> | EventStore  | --------------------------------> | ReadModel    | <-- queries
//!              | (own thread)| ----> broadcast (live stream)     +--------------+
//!              +-------------+ ----> Alerter (rules, webhooks)
//!                     ^
//!   Scheduler --> Dispatcher --> RunJob --> workers (handed in; engine threads)
//! ```
//!
//! [`start`] builds it inside a running actix system and returns a
//! [`ServiceHandle`], the one door the web layer and the binary use.

mod alerting;
mod command;
mod dispatcher;
mod error;
mod handle;
mod policy;
mod read_model;
mod scheduler;
mod store;
mod supervise;
#[cfg(test)]
mod tests;

pub use alerting::{
    delivery_name, fact_incidents, incidents, incidents_with, render, AlertFacts, AlertingConfig,
    Evaluate, Incident, Notification, Receiver, WebhookFormat, ONE_OFF_ALERT_FOR,
};
pub use command::{
    CancelToken, JobCommand, JobFailure, JobOutput, ProgressCell, ProgressReading, RunJob, Workers,
};
pub use dispatcher::{kind_name, DispatchConfig, JobTimeouts, LiveProgress};
pub use error::ServiceError;
pub use handle::{start, ServiceConfig, ServiceHandle};
pub use policy::{
    follow_ups, live_points, periodic_checks, read_back_due, reconcile_lists, repositories_in_use,
    restore_sample, retention_protects, ReadBackWindow, SUSPECT_POINTS_BOUND,
};
pub use read_model::CHECKPOINT_EVERY;
pub use scheduler::{next_run, SchedulerConfig};
pub use store::{AppendHealth, AppendStatus, LIVE_CAPACITY};
