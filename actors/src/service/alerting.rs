//! Alerting: rules over the projections decide which incidents are open;
//! each incident gets one `alert.raised` while it lasts and one
//! `alert.resolved` when it clears. Every raised and resolved alert is
//! delivered to every webhook receiver, in the receiver's format (a plain
//! JSON event, or Alertmanager's webhook format version 4), with retries and
//! exponential backoff; each attempt's outcome is an event. Delivery runs
//! in this actor, apart from the job queue: a receiver that is down never
//! slows a job.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use serde::Serialize;
use vouch_events::{
    AlertDelivered, AlertDeliveryFailed, AlertId, AlertRaised, AlertResolved, Envelope, Event,
    JobKind, JobState, LogReader, PlanId, PointState, Projections, Protection, RepositoryId,
    Severity, SnapshotId,
};

use super::error::ServiceError;
use super::policy;
use super::read_model::{Query, ReadModelActor};
use super::store::{Append, Committed, EventStore};
use crate::clock::{duration_to_ns, unix_ns_to_utc, Clock};
use crate::RestartGate;

/// The body a receiver gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    /// `{"status": "firing"|"resolved", "alert": {...}}`.
    Json,
    /// Alertmanager's webhook payload, version 4.
    Alertmanager,
}

/// One webhook receiver.
#[derive(Clone, Debug)]
pub struct Receiver {
    /// Its name (in events and metrics).
    pub name: String,
    /// Where to POST.
    pub url: String,
    /// The body's format.
    pub format: WebhookFormat,
    /// Attempts per message before giving up.
    pub max_attempts: u32,
    /// Delay before the second attempt; doubles each time, at most 5 min.
    pub retry_initial: Duration,
    /// Time allowed for one attempt.
    pub timeout: Duration,
}

/// How alerting runs.
#[derive(Clone, Debug)]
pub struct AlertingConfig {
    /// Receivers.
    pub receivers: Vec<Receiver>,
    /// How often the rules are evaluated (also after new events).
    pub evaluate_every: Duration,
    /// An agent not seen for this long is lost.
    pub agent_lost_after: Duration,
    /// The service's own URL, for links in alerts.
    pub external_url: String,
}

impl Default for AlertingConfig {
    fn default() -> Self {
        AlertingConfig {
            receivers: Vec::new(),
            evaluate_every: Duration::from_secs(30),
            agent_lost_after: Duration::from_secs(600),
            external_url: String::new(),
        }
    }
}

/// A condition that needs attention, as the rules see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incident {
    /// What it is about; stable while the incident lasts (the key that
    /// makes one alert per incident).
    pub subject: String,
    /// How bad.
    pub severity: Severity,
    /// For humans.
    pub message: String,
    /// The rule's name (`BackupFailed`, ...).
    pub rule: &'static str,
    /// Labels for routing (plan, point).
    pub labels: BTreeMap<String, String>,
}

fn labels(pairs: &[(&str, String)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// How long a one-off fact (a log repair, a clock step) keeps its alert
/// open after it was recorded.
pub const ONE_OFF_ALERT_FOR: Duration = Duration::from_secs(24 * 3600);

/// Facts the alert rules need that the projections do not keep, folded
/// from the log by the alerter (rebuilt from the whole log when it starts,
/// then kept current from the committed events): the rule and labels of
/// every alert raised, points whose manifest vanished, log repairs and
/// clock steps.
#[derive(Clone, Debug, Default)]
pub struct AlertFacts {
    /// The last seq folded.
    pub seq: u64,
    /// The rule and labels of each alert, as `alert.raised` recorded them.
    pub rules: HashMap<AlertId, (String, BTreeMap<String, String>)>,
    /// Points whose manifest is gone, with their repository and why (until
    /// the point is forgotten or found again).
    pub vanished: BTreeMap<SnapshotId, (RepositoryId, String)>,
    /// Log repairs: when, and the event.
    pub repairs: Vec<(i64, vouch_events::LogRepaired)>,
    /// Clock steps: when, and the event.
    pub clock_steps: Vec<(i64, vouch_events::ClockStepped)>,
}

impl AlertFacts {
    /// Folds one event (in seq order).
    pub fn apply(&mut self, env: &Envelope) {
        if env.seq <= self.seq {
            return;
        }
        self.seq = env.seq;
        match &env.event {
            Event::AlertRaised(a) => {
                self.rules
                    .insert(a.alert.clone(), (a.rule.clone(), a.labels.clone()));
            }
            Event::PointVanished(v) => {
                self.vanished
                    .insert(v.point, (v.repository.clone(), v.reason.clone()));
            }
            Event::PointDiscovered(d) => {
                self.vanished.remove(&d.snapshot);
            }
            Event::PointForgotten(f) => {
                self.vanished.remove(&f.point);
            }
            Event::LogRepaired(r) => {
                self.repairs.push((env.recorded_unix_ns, r.clone()));
                if self.repairs.len() > 16 {
                    self.repairs.remove(0);
                }
            }
            Event::ClockStepped(c) => {
                self.clock_steps.push((env.recorded_unix_ns, c.clone()));
                if self.clock_steps.len() > 16 {
                    self.clock_steps.remove(0);
                }
            }
            _ => {}
        }
    }

    /// Folds the log from `self.seq + 1` on.
    pub fn catch_up(&mut self, log: &LogReader) -> Result<(), ServiceError> {
        for env in log.replay_from(self.seq + 1)? {
            self.apply(&env?);
        }
        Ok(())
    }
}

/// Vanished points named in an alert's message (the rest are counted).
const VANISHED_NAMED: usize = 10;

/// The rules over the log's facts (see [`AlertFacts`]): vanished points
/// (critical, one alert per repository), a log repair (critical when it lost acknowledged events,
/// warning otherwise), a clock step (warning); one-off facts stay open for
/// [`ONE_OFF_ALERT_FOR`].
pub fn fact_incidents(facts: &AlertFacts, now_ns: i64) -> Vec<Incident> {
    let mut out = Vec::new();
    // One alert per repository, however many of its points vanished (a
    // replaced or emptied repository loses all of them at once: one page,
    // not thousands).
    let mut by_repository: BTreeMap<&RepositoryId, Vec<(&SnapshotId, &str)>> = BTreeMap::new();
    for (point, (repository, reason)) in &facts.vanished {
        by_repository
            .entry(repository)
            .or_default()
            .push((point, reason.as_str()));
    }
    for (repository, points) in by_repository {
        let shown: Vec<String> = points
            .iter()
            .take(VANISHED_NAMED)
            .map(|(p, reason)| format!("{} ({reason})", p.to_hex()))
            .collect();
        let more = points.len().saturating_sub(VANISHED_NAMED);
        out.push(Incident {
            subject: format!("repository {repository}: recovery points vanished"),
            severity: Severity::Critical,
            message: format!(
                "{} live point(s) of repository {repository} have no manifest any more: {}{}",
                points.len(),
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ),
            rule: "PointVanished",
            // The count is in the message, not a label: labels are the
            // alert's identity (Alertmanager), and it must not change as
            // more points are found gone.
            labels: labels(&[("repository", repository.to_string())]),
        });
    }
    let fresh = |at: i64| now_ns.saturating_sub(at) < duration_to_ns(ONE_OFF_ALERT_FOR);
    for (at, r) in facts.repairs.iter().filter(|(at, _)| fresh(*at)) {
        out.push(Incident {
            subject: format!("event log repaired from seq {}", r.from_seq),
            severity: if r.lost_acknowledged {
                Severity::Critical
            } else {
                Severity::Warning
            },
            message: format!(
                "the event log was repaired at {} from seq {} ({} bytes set aside{}): {}",
                rfc3339(*at),
                r.from_seq,
                r.bytes,
                if r.lost_acknowledged {
                    format!(
                        "; acknowledged events up to seq {} were lost",
                        r.acknowledged_seq
                    )
                } else {
                    String::new()
                },
                r.reason
            ),
            rule: "LogRepaired",
            labels: labels(&[("from_seq", r.from_seq.to_string())]),
        });
    }
    for (at, c) in facts.clock_steps.iter().filter(|(at, _)| fresh(*at)) {
        out.push(Incident {
            subject: format!("clock stepped back at {}", rfc3339(*at)),
            severity: Severity::Warning,
            message: format!(
                "the wall clock read {} after the log had recorded {}: times and freshness are suspect until it catches up",
                rfc3339(c.now_unix_ns),
                rfc3339(c.previous_unix_ns)
            ),
            rule: "ClockStepped",
            labels: BTreeMap::new(),
        });
    }
    out
}

/// The rules: job failed (a plan's latest backup failed or was abandoned),
/// verification failed, restore test failed, plan not protected (no
/// recoverable point inside its RPO, once the plan is older than its RPO),
/// a repository's read-back found damage, agent lost, anomaly detected.
///
/// Also: a verify or restore-test job of a live point that ended failed or
/// abandoned with no later check of the point (warning; critical when not
/// retryable), a plan whose newest point backed up no file (the source came
/// back empty), and a plan `unknown` or `at-risk` since longer than its RPO
/// (`not_protected_since` holds when each plan was first seen so).
pub fn incidents(p: &Projections, now_ns: i64, agent_lost_after: Duration) -> Vec<Incident> {
    incidents_with(p, now_ns, agent_lost_after, &HashMap::new())
}

/// [`incidents`], with when each plan was first seen not protected.
pub fn incidents_with(
    p: &Projections,
    now_ns: i64,
    agent_lost_after: Duration,
    not_protected_since: &HashMap<PlanId, i64>,
) -> Vec<Incident> {
    let mut out = Vec::new();
    out.extend(failed_checks(p));
    for plan in policy::active_plans(p) {
        let id = plan.id.to_string();
        if let Some(last) = p.jobs.last_ended_backup(&plan.id) {
            if matches!(last.state, JobState::Failed | JobState::Abandoned) {
                let why = p
                    .jobs
                    .jobs
                    .get(&last.job)
                    .and_then(|j| j.last_error.as_ref())
                    .map_or_else(|| "no reason recorded".to_owned(), |e| e.message.clone());
                out.push(Incident {
                    subject: format!("plan {id}: backup failed"),
                    severity: Severity::Critical,
                    message: format!(
                        "the latest backup of plan {id} ({}) failed: {why}",
                        last.job
                    ),
                    rule: "BackupFailed",
                    labels: labels(&[("plan", id.clone())]),
                });
            }
        }
        let age = now_ns.saturating_sub(plan.created.unix_ns);
        let protection = p.plan_protection(&plan.id, now_ns);
        if protection.status == Protection::Unprotected
            && age >= duration_to_ns(plan.definition.rpo)
        {
            out.push(Incident {
                subject: format!("plan {id}: not protected"),
                severity: Severity::Critical,
                message: format!("plan {id} is not protected: {}", protection.reason),
                rule: "PlanNotProtected",
                labels: labels(&[("plan", id.clone())]),
            });
        }
        if matches!(protection.status, Protection::Unknown | Protection::AtRisk) {
            let since = not_protected_since.get(&plan.id).copied().unwrap_or(now_ns);
            if now_ns.saturating_sub(since) >= duration_to_ns(plan.definition.rpo) {
                out.push(Incident {
                    subject: format!("plan {id}: {} too long", protection.status.as_str()),
                    severity: Severity::Warning,
                    message: format!(
                        "plan {id} has been {} for longer than its RPO: {}",
                        protection.status.as_str(),
                        protection.reason
                    ),
                    rule: "PlanNotProven",
                    labels: labels(&[("plan", id.clone())]),
                });
            }
        }
        let live = policy::live_points(p, &plan.id);
        if let Some(newest) = live.first() {
            if newest.summary.as_ref().is_some_and(|s| s.files == 0) {
                out.push(Incident {
                    subject: format!("plan {id}: source empty"),
                    severity: Severity::Critical,
                    message: format!(
                        "the newest backup of plan {id} ({}) holds no file: the source came back empty: is it mounted?",
                        newest.id.short()
                    ),
                    rule: "SourceEmpty",
                    labels: labels(&[("plan", id.clone()), ("point", newest.id.to_hex())]),
                });
            }
        }
        for pt in live {
            let point = pt.id.to_hex();
            let short = pt.id.short();
            match pt.state {
                PointState::Corrupt => out.push(Incident {
                    subject: format!("point {short} of plan {id}: verification failed"),
                    severity: Severity::Critical,
                    message: format!(
                        "verification of point {point} failed: {}",
                        pt.last_verification
                            .as_ref()
                            .map(|v| v.damaged.join("; "))
                            .unwrap_or_default()
                    ),
                    rule: "VerificationFailed",
                    labels: labels(&[("plan", id.clone()), ("point", point.clone())]),
                }),
                PointState::Unrecoverable => out.push(Incident {
                    subject: format!("point {short} of plan {id}: restore test failed"),
                    severity: Severity::Critical,
                    message: format!(
                        "the restore test of point {point} failed: {}",
                        pt.last_restore_test
                            .as_ref()
                            .and_then(|r| r.reason.clone())
                            .unwrap_or_default()
                    ),
                    rule: "RestoreTestFailed",
                    labels: labels(&[("plan", id.clone()), ("point", point.clone())]),
                }),
                _ => {}
            }
            if pt.flagged() {
                let kinds: Vec<&str> = pt.anomalies.iter().map(|a| a.kind.as_str()).collect();
                out.push(Incident {
                    subject: format!("point {short} of plan {id}: anomaly detected"),
                    severity: Severity::Warning,
                    message: format!("point {point} looks unusual: {}", kinds.join(", ")),
                    rule: "AnomalyDetected",
                    labels: labels(&[("plan", id.clone()), ("point", point)]),
                });
            }
        }
    }
    for (repository, r) in &p.read_back.repositories {
        if r.damaged.is_empty() {
            continue;
        }
        let mut damage: Vec<&str> = r
            .damaged
            .values()
            .flat_map(|d| d.damaged.iter().map(String::as_str))
            .collect();
        damage.dedup();
        let shown: Vec<&str> = damage.iter().take(5).copied().collect();
        let more = damage.len().saturating_sub(shown.len());
        out.push(Incident {
            subject: format!("repository {repository}: read-back found damage"),
            severity: Severity::Critical,
            message: format!(
                "reading back the packs of repository {repository} found damage in {} of {} slices: {}{} (run `vouch verify --read-data` to see which points and paths it hits)",
                r.damaged.len(),
                r.of,
                shown.join("; "),
                if more > 0 { format!("; and {more} more") } else { String::new() }
            ),
            rule: "ReadBackDamaged",
            labels: labels(&[("repository", repository.to_string())]),
        });
    }
    for agent in p.agents.agents.values() {
        if let Some(seen) = agent.last_seen_unix_ns {
            if now_ns.saturating_sub(seen) > duration_to_ns(agent_lost_after) {
                out.push(Incident {
                    subject: format!("agent {}: lost", agent.id),
                    severity: Severity::Warning,
                    message: format!(
                        "agent {} was last seen at {}",
                        agent.id,
                        unix_ns_to_utc(seen)
                    ),
                    rule: "AgentLost",
                    labels: labels(&[("agent", agent.id.to_string())]),
                });
            }
        }
    }
    out
}

/// Verify and restore-test jobs of live points that ended failed or
/// abandoned, with no later check of that point (the latest such job per
/// point and kind).
fn failed_checks(p: &Projections) -> Vec<Incident> {
    let mut latest: BTreeMap<(SnapshotId, bool), &vouch_events::Job> = BTreeMap::new();
    for j in p.jobs.jobs.values() {
        let restore = match j.kind {
            JobKind::Verify => false,
            JobKind::RestoreTest => true,
            _ => continue,
        };
        let Some(point) = j.point else { continue };
        let e = latest.entry((point, restore)).or_insert(j);
        if j.updated.seq > e.updated.seq {
            *e = j;
        }
    }
    let mut out = Vec::new();
    for ((point, restore), j) in latest {
        if !matches!(j.state, JobState::Failed | JobState::Abandoned) {
            continue;
        }
        let Some(pt) = p
            .points
            .points
            .get(&point)
            .filter(|pt| pt.expired.is_none())
        else {
            continue;
        };
        let checked_after = if restore {
            pt.last_restore_test.as_ref().map(|r| r.at.seq)
        } else {
            pt.last_verification.as_ref().map(|v| v.at.seq)
        }
        .is_some_and(|seq| seq > j.updated.seq);
        if checked_after {
            continue;
        }
        let (what, rule) = if restore {
            ("restore test", "RestoreTestJobFailed")
        } else {
            ("verification", "VerificationJobFailed")
        };
        let retryable = j.last_error.as_ref().is_none_or(|e| e.retryable);
        let why = j.last_error.as_ref().map_or_else(
            || "no reason recorded".to_owned(),
            |e| format!("{}: {}", e.kind, e.message),
        );
        let mut l = vec![("point", point.to_hex())];
        if let Some(plan) = &pt.plan {
            l.push(("plan", plan.to_string()));
        }
        out.push(Incident {
            subject: format!("point {}: {what} job failed", point.short()),
            severity: if retryable {
                Severity::Warning
            } else {
                Severity::Critical
            },
            message: format!(
                "the {what} of point {} ({}) could not finish: {why}",
                point.to_hex(),
                j.id
            ),
            rule,
            labels: labels(&l),
        });
    }
    out
}

/// One message to deliver.
#[derive(Clone, Debug, Serialize)]
pub struct Notification {
    /// The alert.
    pub alert: AlertId,
    /// `firing` or `resolved`.
    pub status: &'static str,
    /// What it is about.
    pub subject: String,
    /// For humans.
    pub message: String,
    /// `info`, `warning`, `critical`.
    pub severity: &'static str,
    /// The rule's name.
    pub rule: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// When it was raised (RFC 3339).
    pub starts_at: String,
    /// When it was resolved (RFC 3339), if it was.
    pub ends_at: Option<String>,
}

fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Info => "info",
        Severity::Warning => "warning",
        Severity::Critical => "critical",
    }
}

fn rfc3339(ns: i64) -> String {
    unix_ns_to_utc(ns)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// The body sent to a receiver of `format`.
pub fn render(
    n: &Notification,
    format: WebhookFormat,
    receiver: &str,
    external_url: &str,
) -> serde_json::Value {
    match format {
        WebhookFormat::Json => serde_json::json!({
            "version": "1",
            "status": n.status,
            "alert": n,
        }),
        WebhookFormat::Alertmanager => {
            let mut labels = n.labels.clone();
            labels.insert("alertname".into(), n.rule.clone());
            labels.insert("severity".into(), n.severity.into());
            labels.insert("service".into(), "vouch".into());
            let fingerprint = blake3::hash(n.subject.as_bytes()).to_hex()[..16].to_owned();
            serde_json::json!({
                "version": "4",
                "groupKey": format!("{{}}:{{alertname=\"{}\"}}", n.rule),
                "truncatedAlerts": 0,
                "status": n.status,
                "receiver": receiver,
                "groupLabels": {"alertname": n.rule},
                "commonLabels": labels,
                "commonAnnotations": {"summary": n.subject, "description": n.message},
                "externalURL": external_url,
                "alerts": [{
                    "status": n.status,
                    "labels": labels,
                    "annotations": {"summary": n.subject, "description": n.message},
                    "startsAt": n.starts_at,
                    "endsAt": n.ends_at.clone().unwrap_or_else(|| "0001-01-01T00:00:00Z".into()),
                    "generatorURL": external_url,
                    "fingerprint": fingerprint,
                }],
            })
        }
    }
}

/// The name a delivery is recorded under: the receiver's for the firing
/// message, `<receiver>/resolved` for the resolved one (each is delivered
/// once).
pub fn delivery_name(receiver: &str, status: &str) -> String {
    if status == "resolved" {
        format!("{receiver}/resolved")
    } else {
        receiver.to_owned()
    }
}

/// Evaluate the rules now (tests send it after moving the clock).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Evaluate;

/// An open alert, as the projections hold it.
struct OpenAlert {
    id: AlertId,
    subject: String,
    severity: Severity,
    message: String,
    raised_ns: i64,
}

/// Raises, resolves and delivers alerts.
pub struct Alerter {
    store: Addr<EventStore>,
    read: Addr<ReadModelActor>,
    log: LogReader,
    clock: Arc<dyn Clock>,
    config: AlertingConfig,
    evaluating: bool,
    again: bool,
    in_flight: HashSet<(AlertId, String)>,
    /// Folded from the log (rules and labels of raised alerts among them).
    facts: AlertFacts,
    /// Whether `facts` missed committed events (rebuilt from the log on the
    /// next evaluation).
    facts_behind: bool,
    /// The seq of this alerter's latest append: its queries read at least
    /// up to it, so it never raises twice what it just raised.
    seen_seq: u64,
    /// When each plan was first seen `unknown` or `at-risk` (in this run).
    not_protected_since: HashMap<PlanId, i64>,
    /// Raised alerts that were delivered but could not be recorded (the
    /// log refused the append), by subject: recorded when the log takes
    /// writes again, and not delivered twice.
    unrecorded: BTreeMap<String, AlertRaised>,
    /// Resolutions delivered but not recorded.
    unrecorded_resolved: HashSet<AlertId>,
    gate: RestartGate,
}

impl Alerter {
    /// An alerter recording to `store`, reading `read` and `log`.
    pub fn new(
        store: Addr<EventStore>,
        read: Addr<ReadModelActor>,
        log: LogReader,
        clock: Arc<dyn Clock>,
        config: AlertingConfig,
        gate: RestartGate,
    ) -> Self {
        Alerter {
            gate,
            store,
            read,
            log,
            clock,
            config,
            evaluating: false,
            again: false,
            in_flight: HashSet::new(),
            facts: AlertFacts::default(),
            facts_behind: true,
            seen_seq: 0,
            not_protected_since: HashMap::new(),
            unrecorded: BTreeMap::new(),
            unrecorded_resolved: HashSet::new(),
        }
    }

    fn new_alert_id(&self, subject: &str, now: i64) -> AlertId {
        let h = blake3::hash(format!("{subject}\0{now}").as_bytes());
        AlertId::new(format!("alert-{}", &h.to_hex()[..12]))
    }

    fn evaluate(&mut self, ctx: &mut Context<Self>) {
        if self.evaluating {
            self.again = true;
            return;
        }
        self.evaluating = true;
        if self.facts_behind {
            // Rebuild the facts from the log (from where they stopped), off
            // the actor thread, then evaluate.
            let mut facts = std::mem::take(&mut self.facts);
            let log = self.log.clone();
            let task = tokio::task::spawn_blocking(move || {
                let res = facts.catch_up(&log);
                (facts, res)
            });
            ctx.wait(task.into_actor(self).map(|res, act, ctx| {
                match res {
                    Ok((facts, Ok(()))) => {
                        act.facts = facts;
                        act.facts_behind = false;
                    }
                    Ok((facts, Err(e))) => {
                        act.facts = facts;
                        tracing::error!(error = %e, "alerting could not read the log's facts");
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "alerting could not read the log's facts")
                    }
                }
                act.evaluating = false;
                act.query(ctx);
            }));
            return;
        }
        self.query(ctx);
    }

    fn query(&mut self, ctx: &mut Context<Self>) {
        self.evaluating = true;
        let now = self.clock.now_unix_ns();
        let lost = self.config.agent_lost_after;
        let receivers: Vec<String> = self
            .config
            .receivers
            .iter()
            .map(|r| r.name.clone())
            .collect();
        let since = self.not_protected_since.clone();
        let mut from_facts = fact_incidents(&self.facts, now);
        let query = self.read.send(Query::new(self.seen_seq, move |p| {
            let mut wanted = incidents_with(p, now, lost, &since);
            wanted.append(&mut from_facts);
            let statuses: Vec<(PlanId, Protection)> = policy::active_plans(p)
                .map(|pl| (pl.id.clone(), p.plan_protection(&pl.id, now).status))
                .collect();
            let open: Vec<OpenAlert> = p
                .alerts
                .open()
                .map(|a| OpenAlert {
                    id: a.id.clone(),
                    subject: a.subject.clone(),
                    severity: a.severity,
                    message: a.message.clone(),
                    raised_ns: a.raised.unix_ns,
                })
                .collect();
            // Messages not delivered yet (after a restart, or a new receiver).
            let mut undelivered = Vec::new();
            let recent =
                |ns: i64| now.saturating_sub(ns) < duration_to_ns(Duration::from_secs(3600));
            for a in p.alerts.alerts.values() {
                if a.resolved.is_some_and(|r| !recent(r.unix_ns)) {
                    continue;
                }
                let status = if a.resolved.is_some() {
                    "resolved"
                } else {
                    "firing"
                };
                for r in &receivers {
                    let name = delivery_name(r, status);
                    let done = a
                        .deliveries
                        .get(&name)
                        .is_some_and(|d| d.delivered.is_some() || !d.will_retry && d.attempts > 0);
                    if !done {
                        undelivered.push((
                            r.clone(),
                            Notification {
                                alert: a.id.clone(),
                                status,
                                subject: a.subject.clone(),
                                message: a.message.clone(),
                                severity: severity_name(a.severity),
                                rule: String::new(),
                                labels: BTreeMap::new(),
                                starts_at: rfc3339(a.raised.unix_ns),
                                ends_at: a.resolved.map(|r| rfc3339(r.unix_ns)),
                            },
                        ));
                    }
                }
            }
            (wanted, open, undelivered, statuses)
        }));
        ctx.spawn(query.into_actor(self).map(move |res, act, ctx| {
            act.evaluating = false;
            let (wanted, open, undelivered, statuses) =
                match res.map_err(super::ServiceError::from).and_then(|r| r) {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!(error = %e, "alerting could not read the projections");
                        return;
                    }
                };
            let mut seen = HashMap::new();
            for (plan, status) in statuses {
                if matches!(status, Protection::Unknown | Protection::AtRisk) {
                    let at = act.not_protected_since.get(&plan).copied().unwrap_or(now);
                    seen.insert(plan, at);
                }
            }
            act.not_protected_since = seen;
            // An evaluation asked for meanwhile runs once this one's events
            // are recorded (`apply` sees to it): started now, it would read
            // at the seq before them and raise or resolve a second time.
            act.apply(ctx, now, wanted, open, undelivered);
        }));
    }

    /// Runs the evaluation that was asked for while one was under way.
    fn evaluate_again(&mut self, ctx: &mut Context<Self>) {
        if std::mem::take(&mut self.again) {
            self.evaluate(ctx);
        }
    }

    /// Fills in a notification's rule and labels from what `alert.raised`
    /// recorded (`VouchAlert` and no labels for an alert of a v1 log).
    fn identify(&self, n: &mut Notification) {
        if !n.rule.is_empty() {
            return;
        }
        match self.facts.rules.get(&n.alert) {
            Some((rule, labels)) if !rule.is_empty() => {
                n.rule = rule.clone();
                n.labels = labels.clone();
            }
            _ => n.rule = "VouchAlert".into(),
        }
    }

    fn apply(
        &mut self,
        ctx: &mut Context<Self>,
        now: i64,
        wanted: Vec<Incident>,
        open: Vec<OpenAlert>,
        undelivered: Vec<(String, Notification)>,
    ) {
        let open_subjects: HashSet<&str> = open.iter().map(|a| a.subject.as_str()).collect();
        let wanted_subjects: HashSet<&str> = wanted.iter().map(|i| i.subject.as_str()).collect();
        let mut events: Vec<Event> = Vec::new();
        let mut notes = Vec::new();
        // Raises delivered before but not recorded: try to record them
        // again (same id), without delivering them twice.
        let unrecorded = std::mem::take(&mut self.unrecorded);
        let mut retrying: BTreeMap<String, AlertRaised> = BTreeMap::new();
        for (subject, raised) in unrecorded {
            if open_subjects.contains(subject.as_str()) {
                continue;
            }
            if wanted_subjects.contains(subject.as_str()) {
                events.push(raised.clone().into());
                retrying.insert(subject, raised);
            }
        }
        for inc in &wanted {
            if open_subjects.contains(inc.subject.as_str()) || retrying.contains_key(&inc.subject) {
                continue;
            }
            let id = self.new_alert_id(&inc.subject, now);
            tracing::warn!(alert = %id, subject = %inc.subject, rule = inc.rule, "alert raised");
            let raised = AlertRaised {
                alert: id.clone(),
                severity: inc.severity,
                subject: inc.subject.clone(),
                message: inc.message.clone(),
                rule: inc.rule.to_owned(),
                labels: inc.labels.clone(),
            };
            retrying.insert(inc.subject.clone(), raised.clone());
            events.push(raised.into());
            notes.push(Notification {
                alert: id,
                status: "firing",
                subject: inc.subject.clone(),
                message: inc.message.clone(),
                severity: severity_name(inc.severity),
                rule: inc.rule.into(),
                labels: inc.labels.clone(),
                starts_at: rfc3339(now),
                ends_at: None,
            });
        }
        let mut resolving = Vec::new();
        for a in &open {
            if wanted_subjects.contains(a.subject.as_str()) {
                continue;
            }
            tracing::info!(alert = %a.id, subject = %a.subject, "alert resolved");
            events.push(
                AlertResolved {
                    alert: a.id.clone(),
                }
                .into(),
            );
            resolving.push(a.id.clone());
            if self.unrecorded_resolved.contains(&a.id) {
                continue;
            }
            // Rendered from the projection's alert and the rule and labels
            // its `alert.raised` recorded: the same identity as the firing
            // message, so Alertmanager matches it.
            let mut n = Notification {
                alert: a.id.clone(),
                status: "resolved",
                subject: a.subject.clone(),
                message: a.message.clone(),
                severity: severity_name(a.severity),
                rule: String::new(),
                labels: BTreeMap::new(),
                starts_at: rfc3339(a.raised_ns),
                ends_at: Some(rfc3339(now)),
            };
            self.identify(&mut n);
            notes.push(n);
        }
        for (receiver, mut n) in undelivered {
            self.identify(&mut n);
            self.deliver(ctx, receiver, n);
        }
        if events.is_empty() {
            self.evaluate_again(ctx);
            return;
        }
        let send = self.store.send(Append(events));
        ctx.wait(send.into_actor(self).map(move |res, act, ctx| {
            match res.map_err(ServiceError::from).and_then(|r| r) {
                Ok(receipt) => {
                    act.seen_seq = act.seen_seq.max(receipt.last_seq);
                    for id in &resolving {
                        act.unrecorded_resolved.remove(id);
                    }
                    for n in notes {
                        for r in act.config.receivers.clone() {
                            act.deliver(ctx, r.name, n.clone());
                        }
                    }
                }
                Err(e) => {
                    // Deliver first, record when possible: the log is not
                    // taking writes, the receivers still hear of it.
                    tracing::error!(error = %e, "could not record alerts; delivering them anyway, recording them when the log takes writes again");
                    act.unrecorded = retrying;
                    act.unrecorded_resolved.extend(resolving);
                    for n in notes {
                        for r in act.config.receivers.clone() {
                            act.deliver(ctx, r.name, n.clone());
                        }
                    }
                }
            }
            act.evaluate_again(ctx);
        }));
    }

    /// Delivers one message to one receiver, retrying with backoff.
    fn deliver(&mut self, ctx: &mut Context<Self>, receiver: String, mut n: Notification) {
        let Some(r) = self
            .config
            .receivers
            .iter()
            .find(|r| r.name == receiver)
            .cloned()
        else {
            return;
        };
        let name = delivery_name(&r.name, n.status);
        if !self.in_flight.insert((n.alert.clone(), name.clone())) {
            return;
        }
        self.identify(&mut n);
        let body = render(&n, r.format, &r.name, &self.config.external_url);
        let store = self.store.clone();
        let alert = n.alert.clone();
        let task = async move {
            let client = awc::Client::builder().timeout(r.timeout).finish();
            let mut delay = r.retry_initial;
            for attempt in 1..=r.max_attempts.max(1) {
                let result = client.post(&r.url).send_json(&body).await;
                let outcome = match result {
                    Ok(resp) if resp.status().is_success() => Ok(()),
                    Ok(resp) => Err(format!("the receiver answered {}", resp.status())),
                    Err(e) => Err(format!("could not reach the receiver: {e}")),
                };
                let event: Event = match &outcome {
                    Ok(()) => AlertDelivered {
                        alert: alert.clone(),
                        receiver: name.clone(),
                        attempt,
                    }
                    .into(),
                    Err(msg) => AlertDeliveryFailed {
                        alert: alert.clone(),
                        receiver: name.clone(),
                        attempt,
                        error: msg.clone(),
                        will_retry: attempt < r.max_attempts,
                    }
                    .into(),
                };
                match &outcome {
                    Ok(()) => {
                        tracing::info!(alert = %alert, receiver = %name, attempt, "alert delivered")
                    }
                    Err(msg) => {
                        tracing::warn!(alert = %alert, receiver = %name, attempt, error = %msg, "alert delivery failed")
                    }
                }
                if let Err(e) = store
                    .send(Append(vec![event]))
                    .await
                    .map_err(ServiceError::from)
                    .and_then(|r| r)
                {
                    tracing::error!(error = %e, "could not record an alert delivery");
                }
                if outcome.is_ok() {
                    break;
                }
                actix::clock::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(300));
            }
            (alert, name)
        };
        ctx.spawn(task.into_actor(self).map(|(alert, name), act, _| {
            act.in_flight.remove(&(alert, name));
        }));
    }
}

impl Actor for Alerter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(256);
        self.gate.started(ctx);
        ctx.run_interval(self.config.evaluate_every, |act, ctx| act.evaluate(ctx));
        self.evaluate(ctx);
    }
}

impl Supervised for Alerter {
    /// Deliveries in flight were dropped with the old context: the first
    /// evaluation after the restart finds them undelivered in the log and
    /// sends them again (receivers deduplicate by alert id and status).
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        let delay = self.gate.restarting();
        tracing::warn!(
            restarts = self.gate.restarts(),
            delay_ms = delay.as_millis() as u64,
            "alerter restarting"
        );
        self.evaluating = false;
        self.again = false;
        self.in_flight.clear();
        // Rebuilt from the log, not trusted from before the failure.
        self.facts = AlertFacts::default();
        self.facts_behind = true;
    }
}

impl Handler<Committed> for Alerter {
    type Result = ();

    fn handle(&mut self, msg: Committed, ctx: &mut Self::Context) {
        if !self.facts_behind {
            for env in msg.0.iter() {
                if env.seq > self.facts.seq + 1 {
                    // A batch was dropped on a full mailbox: re-read the log.
                    self.facts_behind = true;
                    break;
                }
                self.facts.apply(env);
            }
        }
        // Only events that can change an incident trigger an evaluation
        // (not the alerter's own delivery records).
        let relevant = msg.0.iter().any(|e| {
            !matches!(
                e.event,
                Event::AlertDelivered(_)
                    | Event::AlertDeliveryFailed(_)
                    | Event::AlertRaised(_)
                    | Event::AlertResolved(_)
                    | Event::JobProgress(_)
            )
        });
        if relevant {
            self.evaluate(ctx);
        }
    }
}

impl Handler<Evaluate> for Alerter {
    type Result = ();

    fn handle(&mut self, _msg: Evaluate, ctx: &mut Self::Context) {
        self.evaluate(ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vouch_events::{
        BackupCommitted, BackupSummary, JobFailed, JobId, JobScheduled, JobStarted, KeepPolicy,
        PlanCreated, PlanDefinition, PlanId, Recorded, RepositoryId, RestoreTestPolicy,
        VerificationPolicy, VerifyDepth,
    };

    const S: i64 = 1_000_000_000;

    fn state(events: Vec<Event>) -> Projections {
        let mut p = Projections::new();
        for (i, e) in events.iter().enumerate() {
            p.apply_event(
                Recorded {
                    seq: i as u64 + 1,
                    unix_ns: (i as i64 + 1) * S,
                },
                e,
            );
        }
        p
    }

    fn plan() -> Event {
        PlanCreated {
            plan: PlanId::new("docs"),
            definition: PlanDefinition {
                source: "/srv".into(),
                schedule: "hourly".into(),
                retention: KeepPolicy::default(),
                verification: VerificationPolicy {
                    after_backup: true,
                    every: None,
                    depth: VerifyDepth::Structure,
                },
                restore_test: RestoreTestPolicy {
                    every: None,
                    max_evidence_age: Duration::from_secs(3600),
                    sample_files: None,
                    full_every: None,
                },
                rpo: Duration::from_secs(3600),
                repository: RepositoryId::new("main"),
                paused: false,
            },
        }
        .into()
    }

    fn commit(files: u64) -> Event {
        BackupCommitted {
            job: None,
            plan: Some(PlanId::new("docs")),
            repository: RepositoryId::new("main"),
            snapshot: SnapshotId([1; 32]),
            snapshot_time_unix_ns: S,
            summary: BackupSummary {
                files,
                ..Default::default()
            },
        }
        .into()
    }

    fn rules(p: &Projections) -> Vec<(&'static str, Severity)> {
        incidents(p, 10 * S, Duration::from_secs(600))
            .into_iter()
            .map(|i| (i.rule, i.severity))
            .collect()
    }

    fn failed_verify(retryable: bool) -> Vec<Event> {
        let job = JobId::new("verify-1");
        vec![
            JobScheduled {
                job: job.clone(),
                kind: JobKind::Verify,
                plan: Some(PlanId::new("docs")),
                point: Some(SnapshotId([1; 32])),
                due_unix_ns: 0,
                attempt: 1,
                spec: Default::default(),
            }
            .into(),
            JobStarted {
                job: job.clone(),
                agent: None,
            }
            .into(),
            JobFailed {
                job,
                error_kind: "damaged".into(),
                message: "a pack fails authentication".into(),
                retryable,
            }
            .into(),
        ]
    }

    #[test]
    fn a_failed_check_job_alerts_critical_when_it_cannot_be_retried() {
        let mut events = vec![plan(), commit(3)];
        events.extend(failed_verify(false));
        let p = state(events);
        assert!(rules(&p).contains(&("VerificationJobFailed", Severity::Critical)));
        let mut events = vec![plan(), commit(3)];
        events.extend(failed_verify(true));
        let p = state(events);
        assert!(rules(&p).contains(&("VerificationJobFailed", Severity::Warning)));
    }

    #[test]
    fn an_empty_newest_point_alerts_that_the_source_came_back_empty() {
        let p = state(vec![plan(), commit(0)]);
        let inc = incidents(&p, 10 * S, Duration::from_secs(600));
        let empty = inc.iter().find(|i| i.rule == "SourceEmpty").expect("alert");
        assert_eq!(empty.severity, Severity::Critical);
        assert!(empty.message.contains("is it mounted?"));
        let p = state(vec![plan(), commit(3)]);
        assert!(!rules(&p).iter().any(|(r, _)| *r == "SourceEmpty"));
    }

    #[test]
    fn a_plan_unproven_for_longer_than_its_rpo_alerts() {
        let p = state(vec![plan(), commit(3)]);
        let status = p.plan_protection(&PlanId::new("docs"), 10 * S).status;
        assert!(
            matches!(status, Protection::Unknown | Protection::AtRisk),
            "{status:?}"
        );
        let at = |first_seen: i64| {
            let mut since = HashMap::new();
            since.insert(PlanId::new("docs"), first_seen);
            incidents_with(&p, 10 * S, Duration::from_secs(600), &since)
                .into_iter()
                .any(|i| i.rule == "PlanNotProven")
        };
        assert!(!at(10 * S - 3599 * S), "not yet an RPO long");
        assert!(at(10 * S - 3600 * S), "an RPO long");
    }

    fn env(seq: u64, at: i64, event: Event) -> Envelope {
        Envelope {
            seq,
            recorded_unix_ns: at,
            schema_version: 2,
            prev_hash: vouch_events::GENESIS_HASH,
            hash: vouch_events::GENESIS_HASH,
            event,
        }
    }

    #[test]
    fn facts_from_the_log_raise_vanished_repair_and_clock_alerts() {
        let mut f = AlertFacts::default();
        f.apply(&env(
            1,
            S,
            vouch_events::PointVanished {
                point: SnapshotId([7; 32]),
                repository: RepositoryId::new("main"),
                reason: "manifest missing".into(),
            }
            .into(),
        ));
        f.apply(&env(
            2,
            S,
            vouch_events::LogRepaired {
                from_seq: 9,
                bytes: 10,
                acknowledged_seq: 12,
                lost_acknowledged: true,
                reason: "checksum".into(),
            }
            .into(),
        ));
        f.apply(&env(
            3,
            S,
            vouch_events::ClockStepped {
                previous_unix_ns: 5 * S,
                now_unix_ns: S,
            }
            .into(),
        ));
        f.apply(&env(
            4,
            S,
            vouch_events::PointVanished {
                point: SnapshotId([8; 32]),
                repository: RepositoryId::new("main"),
                reason: "manifest missing".into(),
            }
            .into(),
        ));
        let vanished: Vec<Incident> = fact_incidents(&f, 2 * S)
            .into_iter()
            .filter(|i| i.rule == "PointVanished")
            .collect();
        assert_eq!(vanished.len(), 1, "one alert per repository: {vanished:?}");
        assert!(
            vanished[0]
                .message
                .starts_with("2 live point(s) of repository main"),
            "{}",
            vanished[0].message
        );
        assert!(vanished[0].message.contains(&SnapshotId([8; 32]).to_hex()));
        assert_eq!(
            vanished[0].labels.keys().collect::<Vec<_>>(),
            vec!["repository"]
        );
        let got: Vec<(&str, Severity)> = fact_incidents(&f, 2 * S)
            .into_iter()
            .map(|i| (i.rule, i.severity))
            .collect();
        assert_eq!(
            got,
            vec![
                ("PointVanished", Severity::Critical),
                ("LogRepaired", Severity::Critical),
                ("ClockStepped", Severity::Warning),
            ]
        );
        // One-off facts close after their window; a vanished point stays
        // until it is found again.
        let later = S + duration_to_ns(ONE_OFF_ALERT_FOR);
        assert_eq!(fact_incidents(&f, later).len(), 1);
        f.apply(&env(
            5,
            later,
            vouch_events::PointDiscovered {
                repository: RepositoryId::new("main"),
                snapshot: SnapshotId([7; 32]),
                snapshot_time_unix_ns: S,
                plan: None,
            }
            .into(),
        ));
        let left = fact_incidents(&f, later);
        assert_eq!(left.len(), 1);
        assert!(
            left[0].message.starts_with("1 live point(s)"),
            "{}",
            left[0].message
        );
        f.apply(&env(
            6,
            later,
            vouch_events::PointForgotten {
                point: SnapshotId([8; 32]),
                rule: "retention".into(),
            }
            .into(),
        ));
        assert!(fact_incidents(&f, later).is_empty());
    }
}
