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

mod agents;
mod alerting;
mod alertmanager;
mod command;
mod dispatcher;
mod error;
mod fault;
mod handle;
mod policy;
mod read_model;
mod reporter;
mod results;
mod scheduler;
mod scrub;
pub mod security;
mod store;
mod supervise;
#[cfg(test)]
mod tests;
mod webhook;

pub use agents::{
    AgentBoard, AgentJob, AgentRestore, Claim, Committed, JobResult, LeaseError, LeaseSummary,
    LeaseView, LEASE_EXPIRED, OPTIONS_UNSUPPORTED,
};
pub use alerting::{
    delivery_name, fact_incidents, health_incidents, incidents, incidents_with,
    protected_at_most_until, render, AlertFacts, AlertingConfig, Evaluate, Incident, Notification,
    Receiver, RenderContext, ResendCounts, WebhookFormat, LOG_NOT_WRITABLE, ONE_OFF_ALERT_FOR,
    READ_MODEL_UNAVAILABLE,
};
pub use alertmanager::{alertmanager_labels, api_alert, generator_url, KEEP_FOR};
pub use command::{
    BackupHistory, CancelToken, JobCommand, JobFailure, JobOutput, ProgressCell, ProgressReading,
    RunJob, Workers,
};
pub use dispatcher::{kind_name, rebuild_command, DispatchConfig, JobTimeouts, LiveProgress};
pub use error::ServiceError;
#[doc(hidden)]
pub use fault::ActorName;
pub use handle::{start, ServiceConfig, ServiceHandle};
pub use policy::{
    active_plans, follow_ups, last_backups_scheduled, last_unflagged_point, live_points,
    periodic_checks, read_back_due, reconcile_lists, repositories_in_use, restore_sample,
    retention_protects, ReadBackWindow, SUSPECT_POINTS_BOUND,
};
pub use read_model::{ReadModelHealth, CHECKPOINT_EVERY};
pub use reporter::{
    due_periods, mail_of, run_reports, Delivery, Mail, Mailer, ReportsConfig, Target, MAX_CATCH_UP,
    SETTLE,
};
pub use results::FOREIGN_RESULT;
pub use scheduler::{
    first_prune_after, next_run, SchedulerConfig, CLOCK_STEP_TOLERANCE, PRUNE_EVERY,
};
pub use scrub::{scrub_event, FIRST_SCRUB_AFTER, SCRUB_EVERY};
pub use store::{AppendHealth, AppendStatus, LIVE_CAPACITY};
pub use webhook::{ReceiverAuth, Secret, WebhookError, SIGNATURE_HEADER};
