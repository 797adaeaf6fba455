//! Prometheus metrics: every metric name of the service lives here.
//!
//! States (points by state, plan protection, last recoverable time,
//! verification coverage, the log's seq and size) are computed at scrape
//! time from the projections. Counts (job durations, bytes, webhook
//! deliveries) are observed from the event stream: rebuilt from the whole
//! log when the server starts, then followed live, so they survive restarts.
//!
//! `vouch_read_back_coverage_ratio{repository}` is the share of a
//! repository's packs (by slices of the pack-name space) read back intact
//! within the rolling read-back window; 0 until read, absent when the
//! read-back is off.
//!
//! `vouch_verification_coverage_ratio` is the share of live (not expired)
//! points whose latest verification passed within their plan's
//! verification window (`verification.every`; 7 days for points without a
//! plan or a plan without re-verification). With no live point it is 0:
//! nothing is covered, which must never read as good.
//!
//! How much each plan's proof covers (review finding H3), one series per
//! plan (never per point, so the series stay bounded):
//!
//! - The plan's *newest point* is its point of the current definition
//!   (recorded after the plan's creation and its latest source or
//!   repository change) recorded last. Its proof counts only while the
//!   point is `recoverable` (restore figures) or `verified`/`recoverable`
//!   (verified depth): a point held at `unknown`, `corrupt`,
//!   `unrecoverable`, forgotten or vanished proves nothing, and shows 0 and
//!   `none`. A plan without such a point has none of these series.
//! - `vouch_plan_newest_point_restore_coverage_ratio{plan,measure}`
//!   (`measure` is `files` or `bytes`): what the latest restore test of the
//!   newest point restored and compared, against what the point holds; 1
//!   for a complete test; 0 when it proves nothing (see above) or the
//!   point's totals are unknown (evidence of schema 1).
//! - `vouch_plan_newest_point_restore_complete{plan}`: 1 when that test
//!   restored and compared every file, else 0.
//! - `vouch_plan_newest_point_verified_depth{plan,depth}`: one-hot over
//!   `none`, `structure`, `read-sample`, `read-all`: how deep the latest
//!   verification of the newest point read, when it passed and counts.
//! - `vouch_plan_newest_point_verified_data_ratio{plan}`: the share of the
//!   newest point's data that verification read back (0 for `structure`
//!   and `none`, N/100 for `read-sample:N`, 1 for `read-all`).
//! - `vouch_plan_last_complete_restore_test_timestamp_seconds{plan}`: when
//!   (recorded time) a complete restore test last passed on a point of the
//!   plan's current definition that is still `recoverable`: what the proof
//!   policy (`restore_test.full_every`) counts. Absent when there is none,
//!   never 0.
//!
//! The copies in a plan's replica (one series per plan and repository):
//!
//! - `vouch_plan_copy_last_recoverable_timestamp_seconds{plan,repository}`:
//!   snapshot time of the newest `recoverable` copy there (proven by its
//!   own checks). Absent when there is none.
//! - `vouch_plan_copy_immutable{plan,repository}`: 1 when the newest live
//!   copy there is held now by a lock its storage enforces, else 0.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus::{
    Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};
use tokio::sync::watch;
use vouch_actors::service::{kind_name, ServiceHandle};
use vouch_events::{
    Envelope, Event, JobId, JobKind, PointState, Projections, Protection, VerifyDepth,
};

use crate::api::Ctx;
use crate::error::WebError;
use crate::views::{POINT_STATES, PROTECTIONS};

/// `vouch_build_info{version}`: always 1; the labels carry the build.
pub const BUILD_INFO: &str = "vouch_build_info";
/// `vouch_http_requests_total{route,status}`: HTTP requests answered, by
/// route pattern (never the raw path, so ids do not explode the series)
/// and status code.
pub const HTTP_REQUESTS_TOTAL: &str = "vouch_http_requests_total";
/// The `route` label of a request that matched no route.
pub const UNMATCHED_ROUTE: &str = "unmatched";
/// `vouch_recovery_points{state}`: points by state (every state, 0s too).
pub const RECOVERY_POINTS: &str = "vouch_recovery_points";
/// `vouch_plan_protection{plan,status}`: 1 for the plan's current status,
/// 0 for the others.
pub const PLAN_PROTECTION: &str = "vouch_plan_protection";
/// `vouch_security_check{check,status}`: 1 for each security-center
/// check's current status, 0 for the others (absent before the first
/// evaluation; `unknown` is a status of its own, never `ok`).
pub const SECURITY_CHECK: &str = "vouch_security_check";
/// `vouch_plan_last_recoverable_timestamp_seconds{plan}`: snapshot time of
/// the newest recoverable point (absent: none).
pub const PLAN_LAST_RECOVERABLE: &str = "vouch_plan_last_recoverable_timestamp_seconds";
/// `vouch_job_duration_seconds{kind,outcome}`: from `job.started` to its end.
pub const JOB_DURATION: &str = "vouch_job_duration_seconds";
/// `vouch_backup_bytes_read_total`: bytes committed backups read from their sources.
pub const BACKUP_BYTES_READ: &str = "vouch_backup_bytes_read_total";
/// `vouch_backup_bytes_added_total`: bytes new to the repository.
pub const BACKUP_BYTES_ADDED: &str = "vouch_backup_bytes_added_total";
/// `vouch_agent_last_seen_timestamp_seconds{agent}`: when each agent last
/// called in (server clock); an agent registered but never seen since has
/// its registration time.
pub const AGENT_LAST_SEEN: &str = "vouch_agent_last_seen_timestamp_seconds";
/// `vouch_event_log_last_seq`: seq of the last durable event.
pub const EVENT_LOG_LAST_SEQ: &str = "vouch_event_log_last_seq";
/// `vouch_event_log_head_seq`: the acknowledged head's seq (the log's
/// `HEAD`), to be anchored elsewhere with its hash.
pub const EVENT_LOG_HEAD_SEQ: &str = "vouch_event_log_head_seq";
/// `vouch_event_log_head_hash_prefix`: the first 48 bits of the hash of
/// the event at `vouch_event_log_head_seq`, as a number (exact in a
/// float). One series with no label, so a head that moves on every append
/// does not mint a series per scrape; the whole hash is in
/// `GET /api/v1/log/head`.
pub const EVENT_LOG_HEAD_HASH_PREFIX: &str = "vouch_event_log_head_hash_prefix";
/// `vouch_event_log_checkpoint_seq`: seq of the latest signed checkpoint
/// of the chain (0: none; the chain is not authenticated).
pub const EVENT_LOG_CHECKPOINT_SEQ: &str = "vouch_event_log_checkpoint_seq";
/// `vouch_log_append_healthy`: 1 while the event log takes appends, 0 after
/// an append failed (until one succeeds).
pub const LOG_APPEND_HEALTHY: &str = "vouch_log_append_healthy";
/// `vouch_event_log_bytes`: size of the log directory.
pub const EVENT_LOG_BYTES: &str = "vouch_event_log_bytes";
/// `vouch_webhook_deliveries_total{receiver,result}`: `delivered` or `failed`.
/// Counted from the log's `alert.delivered` and `alert.delivery_failed`
/// (receiver `<name>` and `<name>/resolved`), and, for receivers of
/// Alertmanager's API, from the service's re-sends of open alerts since it
/// started (receiver `<name>/resend`; not events).
pub const WEBHOOK_DELIVERIES: &str = "vouch_webhook_deliveries_total";
/// `vouch_read_back_coverage_ratio`: see the module docs.
pub const READ_BACK_COVERAGE: &str = "vouch_read_back_coverage_ratio";
/// `vouch_verification_coverage_ratio`: see the module docs.
pub const VERIFICATION_COVERAGE: &str = "vouch_verification_coverage_ratio";

/// `vouch_plan_copy_last_recoverable_timestamp_seconds{plan,repository}`:
/// see the module docs.
pub const PLAN_COPY_LAST_RECOVERABLE: &str = "vouch_plan_copy_last_recoverable_timestamp_seconds";
/// `vouch_plan_copy_immutable{plan,repository}`: see the module docs.
pub const PLAN_COPY_IMMUTABLE: &str = "vouch_plan_copy_immutable";
/// `vouch_plan_newest_point_restore_coverage_ratio{plan,measure}`: see the
/// module docs.
pub const PLAN_NEWEST_RESTORE_COVERAGE: &str = "vouch_plan_newest_point_restore_coverage_ratio";
/// `vouch_plan_newest_point_restore_complete{plan}`: see the module docs.
pub const PLAN_NEWEST_RESTORE_COMPLETE: &str = "vouch_plan_newest_point_restore_complete";
/// `vouch_plan_newest_point_verified_depth{plan,depth}`: see the module docs.
pub const PLAN_NEWEST_VERIFIED_DEPTH: &str = "vouch_plan_newest_point_verified_depth";
/// `vouch_plan_newest_point_verified_data_ratio{plan}`: see the module docs.
pub const PLAN_NEWEST_VERIFIED_DATA: &str = "vouch_plan_newest_point_verified_data_ratio";
/// `vouch_plan_last_complete_restore_test_timestamp_seconds{plan}`: see the
/// module docs.
pub const PLAN_LAST_COMPLETE_RESTORE: &str =
    "vouch_plan_last_complete_restore_test_timestamp_seconds";
/// The `measure` labels of [`PLAN_NEWEST_RESTORE_COVERAGE`].
pub const COVERAGE_MEASURES: [&str; 2] = ["files", "bytes"];
/// The `depth` labels of [`PLAN_NEWEST_VERIFIED_DEPTH`], shallowest first.
pub const VERIFIED_DEPTHS: [&str; 4] = ["none", "structure", "read-sample", "read-all"];

/// `vouch_http_request_duration_seconds{route}`: time to answer, by route
/// pattern (the live event stream counts until its first byte).
pub const HTTP_REQUEST_DURATION: &str = "vouch_http_request_duration_seconds";
/// `vouch_plan_rpo_seconds{plan}`: the plan's recovery point objective, so
/// rules compare `time() - vouch_plan_last_recoverable_timestamp_seconds`
/// with it without copying RPOs into Prometheus.
pub const PLAN_RPO: &str = "vouch_plan_rpo_seconds";
/// `vouch_plan_last_backup_success_timestamp_seconds{plan}`: when the
/// plan's latest backup job succeeded (recorded time; absent: never).
pub const PLAN_LAST_BACKUP_SUCCESS: &str = "vouch_plan_last_backup_success_timestamp_seconds";
/// `vouch_plan_last_backup_failure_timestamp_seconds{plan}`: when a backup
/// job of the plan last failed or was abandoned (absent: never).
pub const PLAN_LAST_BACKUP_FAILURE: &str = "vouch_plan_last_backup_failure_timestamp_seconds";
/// `vouch_jobs_running{kind}` and `vouch_jobs_queued{kind}`: jobs a worker
/// runs, and jobs scheduled but not started (every kind, 0s too).
pub const JOBS_RUNNING: &str = "vouch_jobs_running";
/// See [`JOBS_RUNNING`].
pub const JOBS_QUEUED: &str = "vouch_jobs_queued";
/// `vouch_alerts_firing{rule,severity}`: open alerts (only the pairs that
/// have one; `rule` is empty for alerts raised before rules had names).
pub const ALERTS_FIRING: &str = "vouch_alerts_firing";
/// `vouch_restore_test_bytes_total`: bytes restore tests restored and
/// compared (passed and failed), the cost of the proofs.
pub const RESTORE_TEST_BYTES: &str = "vouch_restore_test_bytes_total";
/// `vouch_read_back_bytes_total`: bytes the rolling read-back read.
pub const READ_BACK_BYTES: &str = "vouch_read_back_bytes_total";
/// `vouch_repository_size_bytes{repository}`: bytes of the repository's
/// packs on its storage.
pub const REPOSITORY_SIZE: &str = "vouch_repository_size_bytes";
/// `vouch_repository_packs{repository}`: pack files in it.
pub const REPOSITORY_PACKS: &str = "vouch_repository_packs";
/// `vouch_repository_snapshots{repository}`: snapshots in it.
pub const REPOSITORY_SNAPSHOTS: &str = "vouch_repository_snapshots";
/// `vouch_repository_free_bytes{repository}`: space left to unprivileged
/// writers on the file system that holds it (absent for object storage,
/// which has no such figure).
pub const REPOSITORY_FREE: &str = "vouch_repository_free_bytes";
/// `vouch_backup_warnings_total{plan}`: entries committed backups could
/// not read and left out (vanished or unreadable files, unlistable
/// directories), each a warning in the point's manifest.
pub const BACKUP_WARNINGS: &str = "vouch_backup_warnings_total";
/// `vouch_hook_failures_total{plan,phase}`: plans' hooks that failed.
pub const HOOK_FAILURES: &str = "vouch_hook_failures_total";
/// `vouch_prune_freed_bytes_total{repository}`: bytes the service's prune
/// jobs freed (net of what repacking wrote).
pub const PRUNE_FREED_BYTES: &str = "vouch_prune_freed_bytes_total";
/// `vouch_repository_last_prune_timestamp_seconds{repository}`: when the
/// latest prune job of the repository succeeded (absent: never).
pub const REPOSITORY_LAST_PRUNE: &str = "vouch_repository_last_prune_timestamp_seconds";
/// `vouch_event_log_mirrored_seq{repository}`: every event up to this seq
/// is in the repository's copy of the log (disaster recovery); compare
/// with `vouch_event_log_last_seq` for what losing the data directory
/// would lose.
pub const EVENT_LOG_MIRRORED_SEQ: &str = "vouch_event_log_mirrored_seq";
/// `vouch_repository_stats_age_seconds`: age of the repository figures
/// above (they are read at most every [`REPO_STATS_EVERY`], as listing a
/// store on every scrape would cost too much).
pub const REPOSITORY_STATS_AGE: &str = "vouch_repository_stats_age_seconds";
/// How old the repository figures may be before a scrape reads them again.
pub const REPO_STATS_EVERY: Duration = Duration::from_secs(60);

/// The verification window of points without one.
const DEFAULT_VERIFY_WINDOW: Duration = Duration::from_secs(7 * 86_400);
/// How long a scrape waits for the event follower to reach the log's head.
const FOLLOW_WAIT: Duration = Duration::from_secs(2);

/// What the event follower remembers between events.
#[derive(Debug, Default)]
struct Follow {
    applied: u64,
    kinds: HashMap<JobId, JobKind>,
    started: HashMap<JobId, i64>,
    /// The plan of each backup job.
    backup_plans: HashMap<JobId, vouch_events::PlanId>,
    /// Jobs scheduled and not ended: running (true) or queued.
    live_jobs: HashMap<JobId, bool>,
    /// Open alerts: rule and severity.
    open_alerts: HashMap<vouch_events::AlertId, (String, &'static str)>,
}

/// The service's metrics and the registry they are exposed from.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    http_requests: IntCounterVec,
    points: IntGaugeVec,
    protection: IntGaugeVec,
    security: IntGaugeVec,
    last_recoverable: GaugeVec,
    copy_last_recoverable: GaugeVec,
    copy_immutable: IntGaugeVec,
    agent_last_seen: GaugeVec,
    job_duration: HistogramVec,
    bytes_read: IntCounter,
    bytes_added: IntCounter,
    last_seq: IntGauge,
    append_healthy: IntGauge,
    log_bytes: IntGauge,
    head_seq: IntGauge,
    head_hash_prefix: IntGauge,
    checkpoint_seq: IntGauge,
    webhooks: IntCounterVec,
    coverage: Gauge,
    read_back: GaugeVec,
    newest_coverage: GaugeVec,
    newest_complete: IntGaugeVec,
    newest_depth: IntGaugeVec,
    newest_data: GaugeVec,
    last_complete: GaugeVec,
    http_duration: HistogramVec,
    plan_rpo: GaugeVec,
    backup_success: GaugeVec,
    backup_failure: GaugeVec,
    jobs_running: IntGaugeVec,
    jobs_queued: IntGaugeVec,
    alerts_firing: IntGaugeVec,
    restore_test_bytes: IntCounter,
    read_back_bytes: IntCounter,
    prune_freed: IntCounterVec,
    backup_warnings: IntCounterVec,
    hook_failures: IntCounterVec,
    last_prune: GaugeVec,
    repo_size: IntGaugeVec,
    repo_packs: IntGaugeVec,
    repo_snapshots: IntGaugeVec,
    repo_free: IntGaugeVec,
    log_mirrored: IntGaugeVec,
    repo_stats_age: Gauge,
    /// The repository figures and when they were read.
    repo_stats: tokio::sync::Mutex<Option<(std::time::Instant, Vec<crate::RepoStats>)>>,
    follow: Mutex<Follow>,
    /// The re-send counts of Alertmanager's API receivers already added to
    /// `webhooks`, by receiver: `(delivered, failed)`.
    resends_seen: Mutex<HashMap<String, (u64, u64)>>,
    applied: watch::Sender<u64>,
    /// Scrapes started so far (see [`Metrics::scrape`]).
    scrapes_started: AtomicU64,
    /// The latest scrape: which one it was and its text.
    scrape: tokio::sync::Mutex<(u64, Arc<String>)>,
}

fn reg<T: prometheus::core::Collector + Clone + 'static>(
    r: &Registry,
    c: T,
) -> Result<T, WebError> {
    r.register(Box::new(c.clone()))?;
    Ok(c)
}

impl Metrics {
    /// Registers every metric in a fresh registry; `version` goes into
    /// [`BUILD_INFO`].
    pub fn new(version: &str) -> Result<Self, WebError> {
        let registry = Registry::new();
        let build_info = IntGaugeVec::new(
            Opts::new(BUILD_INFO, "Build of the running Vouch service (always 1)."),
            &["version"],
        )?;
        build_info.with_label_values(&[version]).set(1);
        registry.register(Box::new(build_info))?;
        let r = &registry;
        let http_requests = reg(
            r,
            IntCounterVec::new(
                Opts::new(
                    HTTP_REQUESTS_TOTAL,
                    "HTTP requests answered, by route pattern and status code.",
                ),
                &["route", "status"],
            )?,
        )?;
        let points = reg(
            r,
            IntGaugeVec::new(
                Opts::new(RECOVERY_POINTS, "Recovery points by lifecycle state."),
                &["state"],
            )?,
        )?;
        let security = reg(
            r,
            IntGaugeVec::new(
                Opts::new(
                    SECURITY_CHECK,
                    "1 for each security-center check's current status, 0 for the others.",
                ),
                &["check", "status"],
            )?,
        )?;
        let protection = reg(
            r,
            IntGaugeVec::new(
                Opts::new(
                    PLAN_PROTECTION,
                    "1 for each plan's current protection status, 0 for the others.",
                ),
                &["plan", "status"],
            )?,
        )?;
        let last_recoverable = reg(
            r,
            GaugeVec::new(
                Opts::new(
                    PLAN_LAST_RECOVERABLE,
                    "Snapshot time of each plan's newest recoverable point.",
                ),
                &["plan"],
            )?,
        )?;
        let copy_last_recoverable = reg(
            r,
            GaugeVec::new(
                Opts::new(
                    PLAN_COPY_LAST_RECOVERABLE,
                    "Snapshot time of the newest recoverable copy of each plan's points, by repository.",
                ),
                &["plan", "repository"],
            )?,
        )?;
        let copy_immutable = reg(
            r,
            IntGaugeVec::new(
                Opts::new(
                    PLAN_COPY_IMMUTABLE,
                    "1 when the newest copy of each plan's points in a repository is held by a lock its storage enforces.",
                ),
                &["plan", "repository"],
            )?,
        )?;
        let agent_last_seen = reg(
            r,
            GaugeVec::new(
                Opts::new(
                    AGENT_LAST_SEEN,
                    "When each agent last called in (server clock).",
                ),
                &["agent"],
            )?,
        )?;
        let job_duration = reg(
            r,
            HistogramVec::new(
                HistogramOpts::new(JOB_DURATION, "Job run time, by kind and outcome.").buckets(
                    vec![
                        1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0,
                        43200.0, 86400.0,
                    ],
                ),
                &["kind", "outcome"],
            )?,
        )?;
        let bytes_read = reg(
            r,
            IntCounter::new(BACKUP_BYTES_READ, "Bytes committed backups read from their sources (an unchanged incremental reads about none).")?,
        )?;
        let bytes_added = reg(
            r,
            IntCounter::new(
                BACKUP_BYTES_ADDED,
                "Bytes of committed backups the repository did not have yet.",
            )?,
        )?;
        let last_seq = reg(
            r,
            IntGauge::new(EVENT_LOG_LAST_SEQ, "Seq of the last durable event.")?,
        )?;
        let append_healthy = reg(
            r,
            IntGauge::new(
                LOG_APPEND_HEALTHY,
                "1 while the event log takes appends, 0 after an append failed.",
            )?,
        )?;
        let log_bytes = reg(
            r,
            IntGauge::new(EVENT_LOG_BYTES, "Size of the event log directory in bytes.")?,
        )?;
        let head_seq = reg(
            r,
            IntGauge::new(
                EVENT_LOG_HEAD_SEQ,
                "Seq of the event log's acknowledged head (its HEAD file).",
            )?,
        )?;
        let head_hash_prefix = reg(
            r,
            IntGauge::new(
                EVENT_LOG_HEAD_HASH_PREFIX,
                "The first 48 bits of the hash of the event at vouch_event_log_head_seq (big-endian).",
            )?,
        )?;
        let checkpoint_seq = reg(
            r,
            IntGauge::new(
                EVENT_LOG_CHECKPOINT_SEQ,
                "Seq of the latest signed checkpoint of the event log's chain (0: none).",
            )?,
        )?;
        let webhooks = reg(
            r,
            IntCounterVec::new(
                Opts::new(
                    WEBHOOK_DELIVERIES,
                    "Webhook delivery attempts, by receiver and result.",
                ),
                &["receiver", "result"],
            )?,
        )?;
        let coverage = reg(
            r,
            Gauge::new(
                VERIFICATION_COVERAGE,
                "Share of live points verified (passed) within their plan's verification window.",
            )?,
        )?;
        let read_back = reg(
            r,
            GaugeVec::new(
                Opts::new(
                    READ_BACK_COVERAGE,
                    "Share of a repository's packs read back intact within the rolling read-back window.",
                ),
                &["repository"],
            )?,
        )?;
        let newest_coverage = reg(
            r,
            GaugeVec::new(
                Opts::new(
                    PLAN_NEWEST_RESTORE_COVERAGE,
                    "Share of the newest point's files or bytes its latest restore test restored and compared (0 when it proves nothing).",
                ),
                &["plan", "measure"],
            )?,
        )?;
        let newest_complete = reg(
            r,
            IntGaugeVec::new(
                Opts::new(
                    PLAN_NEWEST_RESTORE_COMPLETE,
                    "1 when the latest restore test of the plan's newest point restored every file and counts, else 0.",
                ),
                &["plan"],
            )?,
        )?;
        let newest_depth = reg(
            r,
            IntGaugeVec::new(
                Opts::new(
                    PLAN_NEWEST_VERIFIED_DEPTH,
                    "1 for the depth the latest passed verification of the plan's newest point read (none: no such verification counts), 0 for the others.",
                ),
                &["plan", "depth"],
            )?,
        )?;
        let newest_data = reg(
            r,
            GaugeVec::new(
                Opts::new(
                    PLAN_NEWEST_VERIFIED_DATA,
                    "Share of the newest point's data its latest passed verification read back.",
                ),
                &["plan"],
            )?,
        )?;
        let last_complete = reg(
            r,
            GaugeVec::new(
                Opts::new(
                    PLAN_LAST_COMPLETE_RESTORE,
                    "When a complete restore test last passed on a recoverable point of the plan's current definition.",
                ),
                &["plan"],
            )?,
        )?;
        let http_duration = reg(
            r,
            HistogramVec::new(
                HistogramOpts::new(
                    HTTP_REQUEST_DURATION,
                    "Time to answer HTTP requests, by route pattern.",
                )
                .buckets(vec![
                    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                ]),
                &["route"],
            )?,
        )?;
        let gauge_vec = |name: &str, help: &str, labels: &[&str]| -> Result<GaugeVec, WebError> {
            reg(r, GaugeVec::new(Opts::new(name, help), labels)?)
        };
        let int_gauge_vec =
            |name: &str, help: &str, labels: &[&str]| -> Result<IntGaugeVec, WebError> {
                reg(r, IntGaugeVec::new(Opts::new(name, help), labels)?)
            };
        let plan_rpo = gauge_vec(PLAN_RPO, "Each plan's recovery point objective.", &["plan"])?;
        let backup_success = gauge_vec(
            PLAN_LAST_BACKUP_SUCCESS,
            "When each plan's latest successful backup job ended.",
            &["plan"],
        )?;
        let backup_failure = gauge_vec(
            PLAN_LAST_BACKUP_FAILURE,
            "When a backup job of each plan last failed or was abandoned.",
            &["plan"],
        )?;
        let jobs_running = int_gauge_vec(JOBS_RUNNING, "Jobs a worker runs, by kind.", &["kind"])?;
        let jobs_queued = int_gauge_vec(
            JOBS_QUEUED,
            "Jobs scheduled and not started yet, by kind.",
            &["kind"],
        )?;
        for k in JobKind::ALL {
            jobs_running.with_label_values(&[kind_name(k)]).set(0);
            jobs_queued.with_label_values(&[kind_name(k)]).set(0);
        }
        let alerts_firing = int_gauge_vec(
            ALERTS_FIRING,
            "Open alerts, by rule and severity.",
            &["rule", "severity"],
        )?;
        let restore_test_bytes = reg(
            r,
            IntCounter::new(
                RESTORE_TEST_BYTES,
                "Bytes restore tests restored and compared.",
            )?,
        )?;
        let read_back_bytes = reg(
            r,
            IntCounter::new(READ_BACK_BYTES, "Bytes the rolling read-back read.")?,
        )?;
        let backup_warnings = reg(
            r,
            IntCounterVec::new(
                Opts::new(
                    BACKUP_WARNINGS,
                    "Entries committed backups of each plan could not read and left out (each a warning in its point's manifest).",
                ),
                &["plan"],
            )?,
        )?;
        let hook_failures = reg(
            r,
            IntCounterVec::new(
                Opts::new(
                    HOOK_FAILURES,
                    "Plans' hooks that failed, by phase (pre, post).",
                ),
                &["plan", "phase"],
            )?,
        )?;
        let prune_freed = reg(
            r,
            IntCounterVec::new(
                Opts::new(
                    PRUNE_FREED_BYTES,
                    "Bytes the service's prune jobs freed in each repository.",
                ),
                &["repository"],
            )?,
        )?;
        let last_prune = gauge_vec(
            REPOSITORY_LAST_PRUNE,
            "When each repository's latest prune job succeeded.",
            &["repository"],
        )?;
        let repo_size = int_gauge_vec(
            REPOSITORY_SIZE,
            "Bytes of each repository's packs on its storage.",
            &["repository"],
        )?;
        let repo_packs = int_gauge_vec(
            REPOSITORY_PACKS,
            "Pack files in each repository.",
            &["repository"],
        )?;
        let repo_snapshots = int_gauge_vec(
            REPOSITORY_SNAPSHOTS,
            "Snapshots in each repository.",
            &["repository"],
        )?;
        let repo_free = int_gauge_vec(
            REPOSITORY_FREE,
            "Bytes free on the file system holding each local repository.",
            &["repository"],
        )?;
        let log_mirrored = int_gauge_vec(
            EVENT_LOG_MIRRORED_SEQ,
            "Every event up to this seq is in the repository's copy of the event log.",
            &["repository"],
        )?;
        let repo_stats_age = reg(
            r,
            Gauge::new(
                REPOSITORY_STATS_AGE,
                "Age of the vouch_repository_* figures (read at most every 60 s).",
            )?,
        )?;
        // The standard process_* series (CPU, memory, open files, start
        // time), where the platform gives them.
        #[cfg(target_os = "linux")]
        registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        for s in POINT_STATES {
            points.with_label_values(&[s.as_str()]).set(0);
        }
        let (applied, _) = watch::channel(0);
        Ok(Metrics {
            registry,
            http_requests,
            points,
            protection,
            security,
            last_recoverable,
            copy_last_recoverable,
            copy_immutable,
            agent_last_seen,
            job_duration,
            bytes_read,
            bytes_added,
            last_seq,
            append_healthy,
            log_bytes,
            head_seq,
            head_hash_prefix,
            checkpoint_seq,
            webhooks,
            resends_seen: Mutex::new(HashMap::new()),
            coverage,
            read_back,
            newest_coverage,
            newest_complete,
            newest_depth,
            newest_data,
            last_complete,
            http_duration,
            plan_rpo,
            backup_success,
            backup_failure,
            jobs_running,
            jobs_queued,
            alerts_firing,
            restore_test_bytes,
            read_back_bytes,
            prune_freed,
            backup_warnings,
            hook_failures,
            last_prune,
            repo_size,
            repo_packs,
            repo_snapshots,
            repo_free,
            log_mirrored,
            repo_stats_age,
            repo_stats: tokio::sync::Mutex::new(None),
            follow: Mutex::new(Follow::default()),
            applied,
            scrapes_started: AtomicU64::new(0),
            scrape: tokio::sync::Mutex::new((0, Arc::new(String::new()))),
        })
    }

    /// The registry, for other parts of the service to register their own
    /// metrics in (their names belong in this module too).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Counts one answered request and the time it took.
    pub fn observe_request(&self, route: &str, status: u16, took: Duration) {
        self.http_requests
            .with_label_values(&[route, &status.to_string()])
            .inc();
        self.http_duration
            .with_label_values(&[route])
            .observe(took.as_secs_f64());
    }

    /// Folds one event into the counters (events at or below the last one
    /// folded are ignored, so overlapping replays are harmless).
    pub fn observe_event(&self, env: &Envelope) {
        let mut f = self.follow.lock().unwrap_or_else(PoisonError::into_inner);
        if env.seq <= f.applied {
            return;
        }
        f.applied = env.seq;
        let ended = |f: &mut Follow, job: &JobId, outcome: &str| {
            if let (Some(start), Some(kind)) = (f.started.remove(job), f.kinds.get(job)) {
                let secs = (env.recorded_unix_ns.saturating_sub(start)).max(0) as f64 / 1e9;
                self.job_duration
                    .with_label_values(&[kind_name(*kind), outcome])
                    .observe(secs);
            }
        };
        let at = env.recorded_unix_ns as f64 / 1e9;
        // A backup job's end sets its plan's success or failure time.
        let backup_ended = |f: &mut Follow, job: &JobId, ok: bool| {
            if let Some(plan) = f.backup_plans.remove(job) {
                let g = if ok {
                    &self.backup_success
                } else {
                    &self.backup_failure
                };
                g.with_label_values(&[plan.as_str()]).set(at);
            }
        };
        match &env.event {
            Event::JobScheduled(e) => {
                f.kinds.insert(e.job.clone(), e.kind);
                self.job_moved(&mut f, &e.job, Some(false));
                if let (JobKind::Backup, Some(plan)) = (e.kind, &e.plan) {
                    f.backup_plans.insert(e.job.clone(), plan.clone());
                }
            }
            Event::JobStarted(e) => {
                f.started.insert(e.job.clone(), env.recorded_unix_ns);
                self.job_moved(&mut f, &e.job, Some(true));
            }
            Event::JobFinished(e) => {
                ended(&mut f, &e.job, "succeeded");
                self.job_moved(&mut f, &e.job, None);
                backup_ended(&mut f, &e.job, true);
            }
            Event::JobFailed(e) => {
                ended(&mut f, &e.job, "failed");
                self.job_moved(&mut f, &e.job, None);
                backup_ended(&mut f, &e.job, false);
            }
            Event::JobAbandoned(e) => {
                ended(&mut f, &e.job, "abandoned");
                self.job_moved(&mut f, &e.job, None);
                backup_ended(&mut f, &e.job, false);
            }
            Event::PlanRemoved(e) => {
                let plan = [e.plan.as_str()];
                let _ = self.backup_success.remove_label_values(&plan);
                let _ = self.backup_failure.remove_label_values(&plan);
                let _ = self.backup_warnings.remove_label_values(&plan);
            }
            Event::BackupCommitted(e) => {
                self.bytes_read.inc_by(e.summary.bytes);
                self.bytes_added.inc_by(e.summary.added_bytes);
                if let (Some(plan), Some(n)) = (&e.plan, e.summary.warnings) {
                    self.backup_warnings
                        .with_label_values(&[plan.as_str()])
                        .inc_by(n);
                }
            }
            Event::HookFailed(e) => {
                self.hook_failures
                    .with_label_values(&[e.plan.as_str(), e.phase.as_str()])
                    .inc();
            }
            Event::RestoreTestPassed(e) => self.restore_test_bytes.inc_by(e.evidence.bytes),
            Event::RestoreTestFailed(e) => self.restore_test_bytes.inc_by(e.evidence.bytes),
            Event::PacksReadBack(e) => self.read_back_bytes.inc_by(e.bytes_read),
            Event::RepositoryPruned(e) => {
                let label = [e.repository.as_str()];
                self.prune_freed
                    .with_label_values(&label)
                    .inc_by(e.bytes_freed);
                self.last_prune.with_label_values(&label).set(at);
            }
            Event::AlertRaised(e) => {
                let severity = crate::views::severity(e.severity);
                f.open_alerts
                    .insert(e.alert.clone(), (e.rule.clone(), severity));
                self.set_alerts(&f);
            }
            Event::AlertResolved(e) if f.open_alerts.remove(&e.alert).is_some() => {
                self.set_alerts(&f);
            }
            Event::AlertDelivered(e) => self
                .webhooks
                .with_label_values(&[e.receiver.as_str(), "delivered"])
                .inc(),
            Event::AlertDeliveryFailed(e) => self
                .webhooks
                .with_label_values(&[e.receiver.as_str(), "failed"])
                .inc(),
            _ => {}
        }
        drop(f);
        self.applied.send_replace(env.seq);
    }

    /// Moves a job to running (`Some(true)`), queued (`Some(false)`) or out
    /// of both (`None`), and updates the two gauges of its kind.
    fn job_moved(&self, f: &mut Follow, job: &JobId, to: Option<bool>) {
        let Some(kind) = f.kinds.get(job).copied() else {
            return;
        };
        let label = [kind_name(kind)];
        let gauge = |running: bool| {
            if running {
                self.jobs_running.with_label_values(&label)
            } else {
                self.jobs_queued.with_label_values(&label)
            }
        };
        let before = match to {
            Some(state) => f.live_jobs.insert(job.clone(), state),
            None => f.live_jobs.remove(job),
        };
        if let Some(was) = before {
            gauge(was).dec();
        }
        if let Some(now) = to {
            gauge(now).inc();
        }
    }

    /// Sets `vouch_alerts_firing` from the open alerts.
    fn set_alerts(&self, f: &Follow) {
        let mut counts: HashMap<(&str, &str), i64> = HashMap::new();
        for (rule, severity) in f.open_alerts.values() {
            *counts.entry((rule.as_str(), severity)).or_default() += 1;
        }
        self.alerts_firing.reset();
        for ((rule, severity), n) in counts {
            self.alerts_firing
                .with_label_values(&[rule, severity])
                .set(n);
        }
    }

    /// Rebuilds the counters from the whole log, then follows the live
    /// stream (filling any gap from the log) until the service stops.
    pub async fn follow(self: std::sync::Arc<Self>, handle: ServiceHandle) {
        let mut live = handle.subscribe_events();
        if !self.catch_up(&handle).await {
            return;
        }
        loop {
            match live.recv().await {
                Ok(env) => {
                    let applied = *self.applied.borrow();
                    if env.seq > applied + 1 && !self.catch_up(&handle).await {
                        return;
                    }
                    self.observe_event(&env);
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    if !self.catch_up(&handle).await {
                        return;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    async fn catch_up(self: &std::sync::Arc<Self>, handle: &ServiceHandle) -> bool {
        let from = *self.applied.borrow() + 1;
        let me = self.clone();
        match handle
            .scan_events(from, move |it| it.for_each(|env| me.observe_event(&env)))
            .await
        {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "metrics: the log could not be read");
                false
            }
        }
    }

    /// Updates the states from the projections and renders everything.
    ///
    /// Concurrent scrapes share one computation (single flight): a scrape
    /// is answered with the text of a computation that *started after it
    /// arrived* (so it still sees every write made before it), and one
    /// computation serves every scrape that queued while the previous one
    /// ran. With 32 scrapers a scrape waits at most about two computations,
    /// not 32.
    pub(crate) async fn scrape(&self, ctx: &Ctx) -> Result<String, WebError> {
        let arrived = self.scrapes_started.load(Ordering::SeqCst);
        let mut last = self.scrape.lock().await;
        if last.0 > arrived {
            return Ok(last.1.as_str().to_owned());
        }
        let n = self.scrapes_started.fetch_add(1, Ordering::SeqCst) + 1;
        let text = Arc::new(self.compute(ctx).await?);
        *last = (n, text.clone());
        Ok(text.as_str().to_owned())
    }

    async fn compute(&self, ctx: &Ctx) -> Result<String, WebError> {
        if let Some(handle) = &ctx.service {
            self.append_healthy
                .set(i64::from(handle.append_status().healthy));
            self.observe_resends(&handle.alert_resends());
            let head = handle.last_seq();
            let mut rx = self.applied.subscribe();
            // Counts agree with the log as of this scrape (read your writes).
            let _ = tokio::time::timeout(FOLLOW_WAIT, rx.wait_for(|s| *s >= head)).await;
            let h = handle.clone();
            let window = handle.read_back_window().map(|w| (w.window, w.slices));
            let snap = handle
                .query(head, move |p| state_snapshot(p, h.now_unix_ns(), window))
                .await?;
            let StateSnapshot {
                states,
                plans,
                coverage,
                read_back,
                agents,
            } = snap;
            self.agent_last_seen.reset();
            for (agent, seen_ns) in agents {
                self.agent_last_seen
                    .with_label_values(&[agent.as_str()])
                    .set(seen_ns as f64 / 1e9);
            }
            self.read_back.reset();
            for (repository, ratio) in read_back {
                self.read_back
                    .with_label_values(&[repository.as_str()])
                    .set(ratio);
            }
            for (s, n) in POINT_STATES.iter().zip(states) {
                self.points.with_label_values(&[s.as_str()]).set(n);
            }
            self.protection.reset();
            self.last_recoverable.reset();
            self.copy_last_recoverable.reset();
            self.copy_immutable.reset();
            self.newest_coverage.reset();
            self.newest_complete.reset();
            self.newest_depth.reset();
            self.newest_data.reset();
            self.last_complete.reset();
            self.plan_rpo.reset();
            for pl in plans {
                self.set_plan(&pl);
            }
            self.coverage.set(coverage);
            self.security.reset();
            if let Some(report) = handle.latest_security().await? {
                for c in &report.checks {
                    for s in vouch_events::CheckStatus::ALL {
                        self.security
                            .with_label_values(&[c.id.as_str(), s.as_str()])
                            .set(i64::from(s == c.status));
                    }
                }
            }
            self.last_seq
                .set(i64::try_from(handle.last_seq()).unwrap_or(i64::MAX));
        }
        self.set_repositories(ctx).await;
        if let Some(dir) = ctx.log_dir.clone() {
            let (size, head, checkpoint) = actix_web::web::block(move || {
                (
                    dir_size(&dir),
                    vouch_events::read_log_head(&dir),
                    vouch_events::latest_checkpoint(&dir),
                )
            })
            .await
            .map_err(|e| WebError::Internal(e.to_string()))?;
            self.log_bytes.set(i64::try_from(size).unwrap_or(i64::MAX));
            // A HEAD that cannot be read leaves the series out (the log's
            // own checks report it) rather than failing the whole scrape.
            if let Ok(Some((seq, hash))) = head {
                self.head_seq.set(i64::try_from(seq).unwrap_or(i64::MAX));
                self.head_hash_prefix.set(hash_prefix(&hash.0));
            }
            let cp = checkpoint.ok().flatten().map_or(0, |c| c.seq);
            self.checkpoint_seq
                .set(i64::try_from(cp).unwrap_or(i64::MAX));
        }
        self.render()
    }

    /// Sets the `vouch_repository_*` series from figures at most
    /// [`REPO_STATS_EVERY`] old. Figures that cannot be read leave the
    /// previous ones (their age says how old) rather than failing the
    /// scrape: the repositories' own checks report what is wrong.
    async fn set_repositories(&self, ctx: &Ctx) {
        let Ok(browse) = ctx.browse() else { return };
        let mut cached = self.repo_stats.lock().await;
        let fresh = cached
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < REPO_STATS_EVERY);
        if !fresh {
            let browse = browse.clone();
            match actix_web::web::block(move || browse.repositories()).await {
                Ok(Ok(stats)) => *cached = Some((std::time::Instant::now(), stats)),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "metrics: the repositories' figures could not be read")
                }
                Err(e) => {
                    tracing::warn!(error = %e, "metrics: the repositories' figures could not be read")
                }
            }
        }
        let Some((at, stats)) = cached.as_ref() else {
            return;
        };
        self.repo_stats_age.set(at.elapsed().as_secs_f64());
        for g in [
            &self.repo_size,
            &self.repo_packs,
            &self.repo_snapshots,
            &self.repo_free,
            &self.log_mirrored,
        ] {
            g.reset();
        }
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        for s in stats {
            let label = [s.id.as_str()];
            self.repo_size
                .with_label_values(&label)
                .set(n(s.size_bytes));
            self.repo_packs.with_label_values(&label).set(n(s.packs));
            self.repo_snapshots
                .with_label_values(&label)
                .set(n(s.snapshots));
            if let Some(free) = s.free_bytes {
                self.repo_free.with_label_values(&label).set(n(free));
            }
            if let Some(seq) = s.log_mirrored_seq {
                self.log_mirrored.with_label_values(&label).set(n(seq));
            }
        }
    }

    /// Adds the re-sends to Alertmanager's API counted since the last scrape
    /// to `vouch_webhook_deliveries_total{receiver="<name>/resend"}`.
    fn observe_resends(&self, counts: &[(String, u64, u64)]) {
        let mut seen = self.resends_seen.lock().unwrap_or_else(|e| e.into_inner());
        for (receiver, delivered, failed) in counts {
            let before = seen.entry(receiver.clone()).or_default();
            let label = format!("{receiver}/resend");
            for (result, now, was) in [
                ("delivered", *delivered, &mut before.0),
                ("failed", *failed, &mut before.1),
            ] {
                self.webhooks
                    .with_label_values(&[label.as_str(), result])
                    .inc_by(now.saturating_sub(*was));
                *was = now.max(*was);
            }
        }
    }

    /// Sets one plan's series (after the per-plan families were reset).
    fn set_plan(&self, pl: &PlanSnapshot) {
        let plan = pl.plan.as_str();
        for s in PROTECTIONS {
            self.protection
                .with_label_values(&[plan, s.as_str()])
                .set(i64::from(s == pl.protection));
        }
        self.plan_rpo
            .with_label_values(&[plan])
            .set(pl.rpo.as_secs_f64());
        if let Some(ns) = pl.last_recoverable {
            self.last_recoverable
                .with_label_values(&[plan])
                .set(ns as f64 / 1e9);
        }
        if let Some(ns) = pl.last_complete_restore {
            self.last_complete
                .with_label_values(&[plan])
                .set(ns as f64 / 1e9);
        }
        for c in &pl.copies {
            let labels = [plan, c.repository.as_str()];
            if let Some(ns) = c.last_recoverable {
                self.copy_last_recoverable
                    .with_label_values(&labels)
                    .set(ns as f64 / 1e9);
            }
            self.copy_immutable
                .with_label_values(&labels)
                .set(i64::from(c.newest_immutable));
        }
        if let Some(n) = &pl.newest {
            for (measure, ratio) in COVERAGE_MEASURES.iter().zip([n.files_ratio, n.bytes_ratio]) {
                self.newest_coverage
                    .with_label_values(&[plan, measure])
                    .set(ratio);
            }
            self.newest_complete
                .with_label_values(&[plan])
                .set(i64::from(n.complete));
            for d in VERIFIED_DEPTHS {
                self.newest_depth
                    .with_label_values(&[plan, d])
                    .set(i64::from(d == n.depth));
            }
            self.newest_data
                .with_label_values(&[plan])
                .set(n.data_ratio);
        }
    }

    /// Everything registered, in the Prometheus text exposition format.
    pub fn render(&self) -> Result<String, WebError> {
        Ok(TextEncoder::new().encode_to_string(&self.registry.gather())?)
    }
}

/// What a scrape reads from the projections: points by state (in the
/// order of [`POINT_STATES`]), each plan's protection, newest recoverable
/// time and proof coverage, the verification coverage.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StateSnapshot {
    states: [i64; POINT_STATES.len()],
    plans: Vec<PlanSnapshot>,
    coverage: f64,
    /// Per repository in use, the read-back coverage (none when it is off).
    read_back: Vec<(String, f64)>,
    /// Per agent ever seen, when it last called in (Unix ns).
    agents: Vec<(String, i64)>,
}

/// One plan's series.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlanSnapshot {
    plan: String,
    protection: Protection,
    /// The plan's RPO.
    rpo: Duration,
    /// Snapshot time of the newest recoverable point.
    last_recoverable: Option<i64>,
    /// Recorded time of the latest complete restore test that counts.
    last_complete_restore: Option<i64>,
    /// What the newest point's proof covers (none: the plan has no point
    /// of its current definition).
    newest: Option<NewestProof>,
    /// Its copies, by repository.
    copies: Vec<CopiesSnapshot>,
}

/// The copies of one plan's points in one repository.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CopiesSnapshot {
    repository: String,
    /// Snapshot time of the newest recoverable copy.
    last_recoverable: Option<i64>,
    /// Whether the newest live copy is held by its storage now.
    newest_immutable: bool,
}

/// The copies of `pl`'s points at `now`, by repository (sorted).
fn copies_snapshot(p: &Projections, pl: &vouch_events::Plan, now: i64) -> Vec<CopiesSnapshot> {
    let mut by_repo: std::collections::BTreeMap<String, Vec<&vouch_events::Point>> =
        std::collections::BTreeMap::new();
    for pt in p.points.copies_of_plan(&pl.id) {
        if pt.expired.is_none() {
            by_repo
                .entry(pt.repository.to_string())
                .or_default()
                .push(pt);
        }
    }
    by_repo
        .into_iter()
        .map(|(repository, copies)| CopiesSnapshot {
            repository,
            last_recoverable: copies
                .iter()
                .filter(|pt| pt.state == PointState::Recoverable)
                .map(|pt| pt.snapshot_time_unix_ns)
                .max(),
            newest_immutable: copies
                .iter()
                .max_by_key(|pt| (pt.snapshot_time_unix_ns, pt.since.seq))
                .is_some_and(|pt| pt.immutable_at(now)),
        })
        .collect()
}

/// What a plan's newest point's proof covers (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NewestProof {
    files_ratio: f64,
    bytes_ratio: f64,
    complete: bool,
    /// One of [`VERIFIED_DEPTHS`].
    depth: &'static str,
    data_ratio: f64,
}

/// `done / of`, within 0..=1; 0 when `of` is unknown or 0.
fn share(done: u64, of: Option<u64>) -> f64 {
    match of {
        Some(of) if of > 0 => (done as f64 / of as f64).min(1.0),
        _ => 0.0,
    }
}

/// What `pt`'s proof covers, as it counts now: restore figures only while
/// the point is recoverable, the verified depth only while it is verified
/// or recoverable (unknown never looks good).
fn newest_proof(pt: &vouch_events::Point) -> NewestProof {
    let restore = pt
        .last_restore_test
        .as_ref()
        .filter(|r| pt.state == PointState::Recoverable && r.proves());
    let (files_ratio, bytes_ratio, complete) = match restore {
        Some(r) if r.is_complete() => (1.0, 1.0, true),
        Some(r) => (
            share(r.evidence.files, r.evidence.files_in_point),
            share(r.evidence.bytes, r.evidence.bytes_in_point),
            false,
        ),
        None => (0.0, 0.0, false),
    };
    let verified = pt
        .last_verification
        .as_ref()
        .filter(|v| v.passed && matches!(pt.state, PointState::Verified | PointState::Recoverable));
    let (depth, data_ratio) = match verified.map(|v| v.depth) {
        None => (VERIFIED_DEPTHS[0], 0.0),
        Some(VerifyDepth::Structure) => (VERIFIED_DEPTHS[1], 0.0),
        Some(d @ VerifyDepth::ReadSample(_)) => {
            (VERIFIED_DEPTHS[2], f64::from(d.permille()) / 1000.0)
        }
        Some(VerifyDepth::ReadAll) => (VERIFIED_DEPTHS[3], 1.0),
    };
    NewestProof {
        files_ratio,
        bytes_ratio,
        complete,
        depth,
        data_ratio,
    }
}

/// One plan's series, from its points (any order).
fn plan_snapshot<'a>(
    p: &Projections,
    pl: &vouch_events::Plan,
    points: impl Iterator<Item = &'a vouch_events::Point>,
    now: i64,
) -> PlanSnapshot {
    let mut last_recoverable = None;
    let mut last_complete_restore = None;
    let mut newest: Option<&vouch_events::Point> = None;
    for pt in points {
        if pt.state == PointState::Recoverable {
            last_recoverable = last_recoverable.max(Some(pt.snapshot_time_unix_ns));
        }
        // Points of the plan's current definition only (M7).
        if pt.since.seq <= pl.epoch.seq {
            continue;
        }
        if pt.state == PointState::Recoverable {
            last_complete_restore =
                last_complete_restore.max(pt.last_complete_restore.map(|at| at.unix_ns));
        }
        let key = |q: &vouch_events::Point| (q.since.seq, q.snapshot_time_unix_ns);
        if newest.is_none_or(|n| key(pt) > key(n)) {
            newest = Some(pt);
        }
    }
    PlanSnapshot {
        plan: pl.id.to_string(),
        protection: p.plan_protection(&pl.id, now).status,
        rpo: pl.definition.rpo,
        last_recoverable,
        last_complete_restore,
        newest: newest.map(newest_proof),
        copies: copies_snapshot(p, pl, now),
    }
}

fn state_index(s: PointState) -> usize {
    POINT_STATES.iter().position(|x| *x == s).unwrap_or(0)
}

/// Computes the scrape's states in O(points + plans): each plan's points
/// come from the per-plan index, so a plan's verification window is read
/// once per plan, not once per point.
/// `read_back` is the rolling read-back's window and slices, when it is on.
pub(crate) fn state_snapshot(
    p: &Projections,
    now: i64,
    read_back: Option<(Duration, u32)>,
) -> StateSnapshot {
    let mut states = [0i64; POINT_STATES.len()];
    for pt in p.points.points.values() {
        states[state_index(pt.state)] += 1;
    }
    let start_of =
        |window: Duration| now.saturating_sub(i64::try_from(window.as_nanos()).unwrap_or(i64::MAX));
    let verified_since = |pt: &vouch_events::Point, start: i64| {
        pt.last_verification
            .as_ref()
            .is_some_and(|v| v.passed && v.at.unix_ns >= start)
    };
    let (mut live, mut covered, mut seen) = (0u64, 0u64, 0usize);
    for pl in p.plans.plans.values() {
        let start = start_of(
            pl.definition
                .verification
                .every
                .unwrap_or(DEFAULT_VERIFY_WINDOW),
        );
        for pt in p
            .points
            .of_plan(&pl.id)
            .chain(p.points.copies_of_plan(&pl.id))
        {
            seen += 1;
            if pt.state == PointState::Expired {
                continue;
            }
            live += 1;
            covered += u64::from(verified_since(pt, start));
        }
    }
    if seen < p.points.points.len() {
        // Points without a plan the log knows: the default window.
        let start = start_of(DEFAULT_VERIFY_WINDOW);
        for pt in p.points.points.values() {
            let known = pt
                .plan
                .as_ref()
                .is_some_and(|id| p.plans.plans.contains_key(id));
            if known || pt.state == PointState::Expired {
                continue;
            }
            live += 1;
            covered += u64::from(verified_since(pt, start));
        }
    }
    let plans = p
        .plans
        .plans
        .values()
        .filter(|pl| pl.removed.is_none())
        .map(|pl| plan_snapshot(p, pl, p.points.of_plan(&pl.id), now))
        .collect();
    let coverage = if live == 0 {
        0.0
    } else {
        covered as f64 / live as f64
    };
    let read_back = read_back.map_or_else(Vec::new, |(window, slices)| {
        let window_ns = i64::try_from(window.as_nanos()).unwrap_or(i64::MAX);
        let mut in_use: std::collections::BTreeSet<String> = p
            .plans
            .plans
            .values()
            .filter(|pl| pl.removed.is_none())
            .map(|pl| pl.definition.repository.to_string())
            .collect();
        in_use.extend(p.read_back.repositories.keys().map(|r| r.to_string()));
        in_use
            .into_iter()
            .map(|repo| {
                let ratio = p
                    .read_back
                    .repositories
                    .get(&vouch_events::RepositoryId::new(repo.as_str()))
                    .filter(|r| r.of == slices)
                    .map_or(0.0, |r| r.coverage(now, window_ns));
                (repo, ratio)
            })
            .collect()
    });
    let agents = p
        .agents
        .agents
        .values()
        .filter_map(|a| a.last_seen_unix_ns.map(|t| (a.id.to_string(), t)))
        .collect();
    StateSnapshot {
        states,
        plans,
        coverage,
        read_back,
        agents,
    }
}

/// Bytes of the files under `dir` (what cannot be read counts 0).
fn dir_size(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// The first 48 bits of a hash, big-endian: the hex digits
/// `hash[..12]` read as one number, exact in a float64.
pub fn hash_prefix(hash: &[u8; 32]) -> i64 {
    hash[..6].iter().fold(0i64, |n, b| (n << 8) | i64::from(*b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scrape's states as they were computed before the per-plan
    /// index: one pass over every point, a plan lookup per point.
    fn state_snapshot_by_scan(p: &Projections, now: i64) -> StateSnapshot {
        let mut states = [0i64; POINT_STATES.len()];
        let (mut live, mut covered) = (0u64, 0u64);
        for pt in p.points.points.values() {
            states[state_index(pt.state)] += 1;
            if pt.state == PointState::Expired {
                continue;
            }
            live += 1;
            let window = pt
                .plan
                .as_ref()
                .and_then(|id| p.plans.plans.get(id))
                .and_then(|pl| pl.definition.verification.every)
                .unwrap_or(DEFAULT_VERIFY_WINDOW);
            let start = now.saturating_sub(i64::try_from(window.as_nanos()).unwrap_or(i64::MAX));
            if pt
                .last_verification
                .as_ref()
                .is_some_and(|v| v.passed && v.at.unix_ns >= start)
            {
                covered += 1;
            }
        }
        let plans = p
            .plans
            .plans
            .values()
            .filter(|pl| pl.removed.is_none())
            .map(|pl| {
                plan_snapshot(
                    p,
                    pl,
                    p.points
                        .points
                        .values()
                        .filter(|pt| pt.plan.as_ref() == Some(&pl.id)),
                    now,
                )
            })
            .collect();
        StateSnapshot {
            states,
            plans,
            coverage: if live == 0 {
                0.0
            } else {
                covered as f64 / live as f64
            },
            read_back: Vec::new(),
            agents: p
                .agents
                .agents
                .values()
                .filter_map(|a| a.last_seen_unix_ns.map(|t| (a.id.to_string(), t)))
                .collect(),
        }
    }

    /// Found by `vouch bench service`: the scrape's per-plan pass must give
    /// exactly what the per-point scan gave, points without a plan and of
    /// unknown plans included, after a fold and after a snapshot.
    #[test]
    fn scrape_states_equal_a_full_scan() {
        use std::time::Duration as D;
        use vouch_events::*;
        let sec = 1_000_000_000i64;
        let t0 = 1_800_000_000 * sec;
        let def = |every: Option<u64>| PlanDefinition {
            source: "/src".into(),
            schedule: "daily 02:00".into(),
            retention: KeepPolicy::default(),
            verification: VerificationPolicy {
                after_backup: true,
                every: every.map(D::from_secs),
                depth: VerifyDepth::Structure,
            },
            restore_test: RestoreTestPolicy {
                every: None,
                max_evidence_age: D::from_secs(86_400),
                sample_files: None,
                full_every: None,
                boot: None,
            },
            rpo: D::from_secs(86_400),
            repository: RepositoryId::new("main"),
            paused: false,
            replica: None,
            proxmox: None,
            anomaly_lock: None,
            files: Default::default(),
            hooks: Default::default(),
            time_zone: None,
        };
        let mut events: Vec<Event> = vec![
            PlanCreated {
                plan: PlanId::new("a"),
                definition: def(Some(60)),
            }
            .into(),
            PlanCreated {
                plan: PlanId::new("b"),
                definition: def(None),
            }
            .into(),
            PlanCreated {
                plan: PlanId::new("gone"),
                definition: def(Some(10)),
            }
            .into(),
        ];
        for i in 0..60u8 {
            let plan = match i % 5 {
                0 => None,
                1 => Some("a"),
                2 => Some("b"),
                3 => Some("gone"),
                _ => Some("never-created"),
            };
            let id = SnapshotId([i; 32]);
            events.push(
                BackupCommitted {
                    job: None,
                    plan: plan.map(PlanId::new),
                    repository: RepositoryId::new("main"),
                    snapshot: id,
                    snapshot_time_unix_ns: t0 + i64::from(i) * sec,
                    summary: BackupSummary::default(),
                    changes: None,
                }
                .into(),
            );
            if i % 2 == 0 {
                events.push(
                    VerificationPassed {
                        point: id,
                        job: None,
                        depth: VerifyDepth::Structure,
                        bytes_read: 1,
                        blobs_checked: 1,
                    }
                    .into(),
                );
            }
            if i % 4 == 0 {
                events.push(
                    RestoreTestPassed {
                        point: id,
                        job: None,
                        evidence: RestoreEvidence {
                            restored: vec![],
                            files: 1,
                            bytes: 1,
                            digests_compared: 1,
                            digests_matched: 1,
                            duration_ms: 1,
                            location: "x".into(),
                            files_in_point: Some(1),
                            bytes_in_point: Some(1),
                            complete: true,
                            guest: None,
                        },
                    }
                    .into(),
                );
            }
            if i % 9 == 0 {
                events.push(
                    PointForgotten {
                        point: id,
                        rule: "r".into(),
                    }
                    .into(),
                );
            }
        }
        events.push(
            PlanRemoved {
                plan: PlanId::new("gone"),
            }
            .into(),
        );
        let mut p = Projections::new();
        for (n, e) in events.iter().enumerate() {
            let seq = n as u64 + 1;
            p.apply_event(
                Recorded {
                    seq,
                    unix_ns: t0 + seq as i64 * sec,
                },
                e,
            );
        }
        let decoded = Projections::from_snapshot(&p.to_snapshot().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
        for now in [t0, t0 + 100 * sec, t0 + 10_000 * sec] {
            for q in [&p, &decoded] {
                let fast = state_snapshot(q, now, None);
                assert_eq!(fast, state_snapshot_by_scan(q, now), "at {now}");
                assert_eq!(fast.states.iter().sum::<i64>(), 60);
            }
        }
    }

    /// H3: the newest point is of the plan's current definition: after a
    /// source change, the old points' proof (complete restore test and
    /// all) stops showing until a point of the new source exists.
    #[test]
    fn a_plan_whose_source_changed_shows_no_proof_of_its_old_points() {
        use std::time::Duration as D;
        use vouch_events::*;
        let sec = 1_000_000_000i64;
        let t0 = 1_800_000_000 * sec;
        let def = |source: &str| PlanDefinition {
            source: source.into(),
            schedule: "daily 02:00".into(),
            retention: KeepPolicy::default(),
            verification: VerificationPolicy {
                after_backup: true,
                every: None,
                depth: VerifyDepth::ReadAll,
            },
            restore_test: RestoreTestPolicy {
                every: None,
                max_evidence_age: D::from_secs(86_400),
                sample_files: None,
                full_every: None,
                boot: None,
            },
            rpo: D::from_secs(86_400),
            repository: RepositoryId::new("main"),
            paused: false,
            replica: None,
            proxmox: None,
            anomaly_lock: None,
            files: Default::default(),
            hooks: Default::default(),
            time_zone: None,
        };
        let id = SnapshotId([1; 32]);
        let plan = PlanId::new("a");
        let events: Vec<Event> = vec![
            PlanCreated {
                plan: plan.clone(),
                definition: def("/old"),
            }
            .into(),
            BackupCommitted {
                job: None,
                plan: Some(plan.clone()),
                repository: RepositoryId::new("main"),
                snapshot: id,
                snapshot_time_unix_ns: t0,
                summary: BackupSummary {
                    files: 2,
                    bytes: 2,
                    ..BackupSummary::default()
                },
                changes: None,
            }
            .into(),
            VerificationPassed {
                point: id,
                job: None,
                depth: VerifyDepth::ReadAll,
                bytes_read: 2,
                blobs_checked: 2,
            }
            .into(),
            RestoreTestPassed {
                point: id,
                job: None,
                evidence: RestoreEvidence {
                    restored: vec!["/".into()],
                    files: 2,
                    bytes: 2,
                    digests_compared: 2,
                    digests_matched: 2,
                    duration_ms: 1,
                    location: "x".into(),
                    files_in_point: Some(2),
                    bytes_in_point: Some(2),
                    complete: true,
                    guest: None,
                },
            }
            .into(),
        ];
        let mut p = Projections::new();
        let mut seq = 0u64;
        let mut apply = |p: &mut Projections, e: &Event| {
            seq += 1;
            p.apply_event(
                Recorded {
                    seq,
                    unix_ns: t0 + seq as i64 * sec,
                },
                e,
            );
        };
        for e in &events {
            apply(&mut p, e);
        }
        let now = t0 + 100 * sec;
        let before = state_snapshot(&p, now, None);
        let proof = before.plans[0].newest.clone();
        assert_eq!(
            proof,
            Some(NewestProof {
                files_ratio: 1.0,
                bytes_ratio: 1.0,
                complete: true,
                depth: "read-all",
                data_ratio: 1.0,
            })
        );
        assert_eq!(before.plans[0].last_complete_restore, Some(t0 + 4 * sec));
        apply(
            &mut p,
            &PlanChanged {
                plan,
                definition: def("/new"),
            }
            .into(),
        );
        let after = state_snapshot(&p, now, None);
        assert_eq!(after.plans[0].newest, None);
        assert_eq!(after.plans[0].last_complete_restore, None);
    }

    #[test]
    fn renders_build_info_and_request_counts() {
        let m = match Metrics::new("1.2.3") {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        };
        m.observe_request("/healthz", 200, Duration::from_millis(3));
        m.observe_request("/healthz", 200, Duration::from_millis(3));
        m.observe_request(UNMATCHED_ROUTE, 404, Duration::from_millis(3));
        let text = m.render().unwrap_or_default();
        assert!(text.contains("# TYPE vouch_build_info gauge"), "{text}");
        assert!(
            text.contains("vouch_build_info{version=\"1.2.3\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE vouch_http_requests_total counter"),
            "{text}"
        );
        assert!(
            text.contains("vouch_http_requests_total{route=\"/healthz\",status=\"200\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("vouch_http_request_duration_seconds_count{route=\"/healthz\"} 2"),
            "{text}"
        );
        #[cfg(target_os = "linux")]
        assert!(text.contains("process_resident_memory_bytes"), "{text}");
        assert!(
            text.contains("vouch_http_requests_total{route=\"unmatched\",status=\"404\"} 1"),
            "{text}"
        );
    }

    /// Backup warnings add up per plan from `backup.committed` (an upcast
    /// event, warnings not counted, adds nothing); hook failures count per
    /// plan and phase.
    #[test]
    fn backup_warnings_and_hook_failures_count_per_plan() {
        let m = Metrics::new("1").unwrap_or_else(|e| panic!("{e}"));
        let committed = |warnings: Option<u64>| -> Event {
            vouch_events::BackupCommitted {
                job: None,
                plan: Some(vouch_events::PlanId::new("web")),
                repository: vouch_events::RepositoryId::new("main"),
                snapshot: vouch_events::SnapshotId([1; 32]),
                snapshot_time_unix_ns: 1,
                summary: vouch_events::BackupSummary {
                    warnings,
                    ..Default::default()
                },
                changes: None,
            }
            .into()
        };
        let env = |seq: u64, event: Event| Envelope {
            seq,
            recorded_unix_ns: 1,
            schema_version: 2,
            prev_hash: vouch_events::GENESIS_HASH,
            hash: vouch_events::GENESIS_HASH,
            event,
        };
        m.observe_event(&env(1, committed(Some(2))));
        m.observe_event(&env(2, committed(None)));
        m.observe_event(&env(3, committed(Some(3))));
        m.observe_event(&env(
            4,
            vouch_events::HookFailed {
                job: vouch_events::JobId::new("j"),
                plan: vouch_events::PlanId::new("web"),
                phase: vouch_events::HookPhase::Post,
                hook: "notify".into(),
                exit_code: Some(1),
                timed_out: false,
                reason: String::new(),
                took_ms: 1,
            }
            .into(),
        ));
        let text = m.render().unwrap_or_default();
        assert!(
            text.contains("vouch_backup_warnings_total{plan=\"web\"} 5"),
            "{text}"
        );
        assert!(
            text.contains("vouch_hook_failures_total{phase=\"post\",plan=\"web\"} 1"),
            "{text}"
        );
    }
}
