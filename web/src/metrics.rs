//! Prometheus metrics: every metric name of the service lives here.
//!
//! States (points by state, plan protection, last recoverable time,
//! verification coverage, the log's seq and size) are computed at scrape
//! time from the projections. Counts (job durations, bytes, webhook
//! deliveries) are observed from the event stream: rebuilt from the whole
//! log when the server starts, then followed live, so they survive restarts.
//!
//! `vouch_verification_coverage_ratio` is the share of live (not expired)
//! points whose latest verification passed within their plan's
//! verification window (`verification.every`; 7 days for points without a
//! plan or a plan without re-verification). With no live point it is 0:
//! nothing is covered, which must never read as good.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use prometheus::{
    Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};
use tokio::sync::watch;
use vouch_actors::service::{kind_name, ServiceHandle};
use vouch_events::{Envelope, Event, JobId, JobKind, PointState};

use crate::api::Ctx;
use crate::error::WebError;
use crate::views::{last_recoverable_ns, POINT_STATES, PROTECTIONS};

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
/// `vouch_plan_last_recoverable_timestamp_seconds{plan}`: snapshot time of
/// the newest recoverable point (absent: none).
pub const PLAN_LAST_RECOVERABLE: &str = "vouch_plan_last_recoverable_timestamp_seconds";
/// `vouch_job_duration_seconds{kind,outcome}`: from `job.started` to its end.
pub const JOB_DURATION: &str = "vouch_job_duration_seconds";
/// `vouch_backup_bytes_read_total`: logical bytes of committed backups.
pub const BACKUP_BYTES_READ: &str = "vouch_backup_bytes_read_total";
/// `vouch_backup_bytes_added_total`: bytes new to the repository.
pub const BACKUP_BYTES_ADDED: &str = "vouch_backup_bytes_added_total";
/// `vouch_event_log_last_seq`: seq of the last durable event.
pub const EVENT_LOG_LAST_SEQ: &str = "vouch_event_log_last_seq";
/// `vouch_event_log_bytes`: size of the log directory.
pub const EVENT_LOG_BYTES: &str = "vouch_event_log_bytes";
/// `vouch_webhook_deliveries_total{receiver,result}`: `delivered` or `failed`.
pub const WEBHOOK_DELIVERIES: &str = "vouch_webhook_deliveries_total";
/// `vouch_verification_coverage_ratio`: see the module docs.
pub const VERIFICATION_COVERAGE: &str = "vouch_verification_coverage_ratio";

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
}

/// The service's metrics and the registry they are exposed from.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    http_requests: IntCounterVec,
    points: IntGaugeVec,
    protection: IntGaugeVec,
    last_recoverable: GaugeVec,
    job_duration: HistogramVec,
    bytes_read: IntCounter,
    bytes_added: IntCounter,
    last_seq: IntGauge,
    log_bytes: IntGauge,
    webhooks: IntCounterVec,
    coverage: Gauge,
    follow: Mutex<Follow>,
    applied: watch::Sender<u64>,
    scrape: tokio::sync::Mutex<()>,
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
            IntCounter::new(BACKUP_BYTES_READ, "Logical bytes of committed backups.")?,
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
        let log_bytes = reg(
            r,
            IntGauge::new(EVENT_LOG_BYTES, "Size of the event log directory in bytes.")?,
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
        for s in POINT_STATES {
            points.with_label_values(&[s.as_str()]).set(0);
        }
        let (applied, _) = watch::channel(0);
        Ok(Metrics {
            registry,
            http_requests,
            points,
            protection,
            last_recoverable,
            job_duration,
            bytes_read,
            bytes_added,
            last_seq,
            log_bytes,
            webhooks,
            coverage,
            follow: Mutex::new(Follow::default()),
            applied,
            scrape: tokio::sync::Mutex::new(()),
        })
    }

    /// The registry, for other parts of the service to register their own
    /// metrics in (their names belong in this module too).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Counts one answered request.
    pub fn observe_request(&self, route: &str, status: u16) {
        self.http_requests
            .with_label_values(&[route, &status.to_string()])
            .inc();
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
        match &env.event {
            Event::JobScheduled(e) => {
                f.kinds.insert(e.job.clone(), e.kind);
            }
            Event::JobStarted(e) => {
                f.started.insert(e.job.clone(), env.recorded_unix_ns);
            }
            Event::JobFinished(e) => ended(&mut f, &e.job, "succeeded"),
            Event::JobFailed(e) => ended(&mut f, &e.job, "failed"),
            Event::JobAbandoned(e) => ended(&mut f, &e.job, "abandoned"),
            Event::BackupCommitted(e) => {
                self.bytes_read.inc_by(e.summary.bytes);
                self.bytes_added.inc_by(e.summary.added_bytes);
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
    pub(crate) async fn scrape(&self, ctx: &Ctx) -> Result<String, WebError> {
        let _one_at_a_time = self.scrape.lock().await;
        if let Some(handle) = &ctx.service {
            let head = handle.last_seq();
            let mut rx = self.applied.subscribe();
            // Counts agree with the log as of this scrape (read your writes).
            let _ = tokio::time::timeout(FOLLOW_WAIT, rx.wait_for(|s| *s >= head)).await;
            let h = handle.clone();
            let snap = handle
                .query(head, move |p| {
                    let now = h.now_unix_ns();
                    let mut states: HashMap<PointState, i64> = HashMap::new();
                    let (mut live, mut covered) = (0u64, 0u64);
                    for pt in p.points.points.values() {
                        *states.entry(pt.state).or_default() += 1;
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
                        let start = now
                            .saturating_sub(i64::try_from(window.as_nanos()).unwrap_or(i64::MAX));
                        if pt
                            .last_verification
                            .as_ref()
                            .is_some_and(|v| v.passed && v.at.unix_ns >= start)
                        {
                            covered += 1;
                        }
                    }
                    let plans: Vec<_> = p
                        .plans
                        .plans
                        .values()
                        .filter(|pl| pl.removed.is_none())
                        .map(|pl| {
                            (
                                pl.id.to_string(),
                                p.plan_protection(&pl.id, now).status,
                                last_recoverable_ns(p, &pl.id),
                            )
                        })
                        .collect();
                    let ratio = if live == 0 {
                        0.0
                    } else {
                        covered as f64 / live as f64
                    };
                    (states, plans, ratio)
                })
                .await?;
            let (states, plans, ratio) = snap;
            for s in POINT_STATES {
                self.points
                    .with_label_values(&[s.as_str()])
                    .set(states.get(&s).copied().unwrap_or(0));
            }
            self.protection.reset();
            self.last_recoverable.reset();
            for (plan, status, last) in plans {
                for s in PROTECTIONS {
                    self.protection
                        .with_label_values(&[plan.as_str(), s.as_str()])
                        .set(i64::from(s == status));
                }
                if let Some(ns) = last {
                    self.last_recoverable
                        .with_label_values(&[plan.as_str()])
                        .set(ns as f64 / 1e9);
                }
            }
            self.coverage.set(ratio);
            self.last_seq
                .set(i64::try_from(handle.last_seq()).unwrap_or(i64::MAX));
        }
        if let Some(dir) = ctx.log_dir.clone() {
            let size = actix_web::web::block(move || dir_size(&dir))
                .await
                .map_err(|e| WebError::Internal(e.to_string()))?;
            self.log_bytes.set(i64::try_from(size).unwrap_or(i64::MAX));
        }
        self.render()
    }

    /// Everything registered, in the Prometheus text exposition format.
    pub fn render(&self) -> Result<String, WebError> {
        Ok(TextEncoder::new().encode_to_string(&self.registry.gather())?)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_build_info_and_request_counts() {
        let m = match Metrics::new("1.2.3") {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        };
        m.observe_request("/healthz", 200);
        m.observe_request("/healthz", 200);
        m.observe_request(UNMATCHED_ROUTE, 404);
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
            text.contains("vouch_http_requests_total{route=\"unmatched\",status=\"404\"} 1"),
            "{text}"
        );
    }
}
