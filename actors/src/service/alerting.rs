//! Alerting: rules over the projections decide which incidents are open;
//! each incident gets one `alert.raised` while it lasts and one
//! `alert.resolved` when it clears. Every raised and resolved alert is
//! delivered to every webhook receiver, in the receiver's format (a plain
//! JSON event, or Alertmanager's webhook format version 4), with retries and
//! exponential backoff; each attempt's outcome is an event. Delivery runs
//! in this actor, apart from the job queue: a receiver that is down never
//! slows a job.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use serde::Serialize;
use vouch_events::{
    AlertDelivered, AlertDeliveryFailed, AlertId, AlertRaised, AlertResolved, Event, JobState,
    PointState, Projections, Protection, Severity,
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

/// The rules: job failed (a plan's latest backup failed or was abandoned),
/// verification failed, restore test failed, plan not protected (no
/// recoverable point inside its RPO, once the plan is older than its RPO),
/// a repository's read-back found damage, agent lost, anomaly detected.
pub fn incidents(p: &Projections, now_ns: i64, agent_lost_after: Duration) -> Vec<Incident> {
    let mut out = Vec::new();
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
        for pt in policy::live_points(p, &plan.id) {
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

/// Raises, resolves and delivers alerts.
pub struct Alerter {
    store: Addr<EventStore>,
    read: Addr<ReadModelActor>,
    clock: Arc<dyn Clock>,
    config: AlertingConfig,
    evaluating: bool,
    again: bool,
    in_flight: HashSet<(AlertId, String)>,
    rules: BTreeMap<AlertId, (&'static str, BTreeMap<String, String>)>,
    gate: RestartGate,
}

impl Alerter {
    /// An alerter recording to `store` and reading `read`.
    pub fn new(
        store: Addr<EventStore>,
        read: Addr<ReadModelActor>,
        clock: Arc<dyn Clock>,
        config: AlertingConfig,
        gate: RestartGate,
    ) -> Self {
        Alerter {
            gate,
            store,
            read,
            clock,
            config,
            evaluating: false,
            again: false,
            in_flight: HashSet::new(),
            rules: BTreeMap::new(),
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
        let now = self.clock.now_unix_ns();
        let lost = self.config.agent_lost_after;
        let receivers: Vec<String> = self
            .config
            .receivers
            .iter()
            .map(|r| r.name.clone())
            .collect();
        let query = self.read.send(Query::new(0, move |p| {
            let wanted = incidents(p, now, lost);
            let open: Vec<(AlertId, String)> = p
                .alerts
                .open()
                .map(|a| (a.id.clone(), a.subject.clone()))
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
            (wanted, open, undelivered)
        }));
        ctx.spawn(query.into_actor(self).map(move |res, act, ctx| {
            act.evaluating = false;
            let (wanted, open, undelivered) = match res {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(error = %e, "alerting could not read the projections");
                    return;
                }
            };
            act.apply(ctx, now, wanted, open, undelivered);
            if std::mem::take(&mut act.again) {
                act.evaluate(ctx);
            }
        }));
    }

    fn apply(
        &mut self,
        ctx: &mut Context<Self>,
        now: i64,
        wanted: Vec<Incident>,
        open: Vec<(AlertId, String)>,
        undelivered: Vec<(String, Notification)>,
    ) {
        let open_subjects: HashSet<&str> = open.iter().map(|(_, s)| s.as_str()).collect();
        let wanted_subjects: HashSet<&str> = wanted.iter().map(|i| i.subject.as_str()).collect();
        let mut events: Vec<Event> = Vec::new();
        let mut notes = Vec::new();
        for inc in &wanted {
            if open_subjects.contains(inc.subject.as_str()) {
                continue;
            }
            let id = self.new_alert_id(&inc.subject, now);
            tracing::warn!(alert = %id, subject = %inc.subject, "alert raised");
            self.rules
                .insert(id.clone(), (inc.rule, inc.labels.clone()));
            events.push(
                AlertRaised {
                    alert: id.clone(),
                    severity: inc.severity,
                    subject: inc.subject.clone(),
                    message: inc.message.clone(),
                    rule: inc.rule.to_owned(),
                    labels: inc.labels.clone(),
                }
                .into(),
            );
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
        for (id, subject) in &open {
            if wanted_subjects.contains(subject.as_str()) {
                continue;
            }
            tracing::info!(alert = %id, subject = %subject, "alert resolved");
            events.push(AlertResolved { alert: id.clone() }.into());
            notes.push(Notification {
                alert: id.clone(),
                status: "resolved",
                subject: subject.clone(),
                message: format!("resolved: {subject}"),
                severity: "info",
                rule: String::new(),
                labels: BTreeMap::new(),
                starts_at: String::new(),
                ends_at: Some(rfc3339(now)),
            });
        }
        for (receiver, n) in undelivered {
            self.deliver(ctx, receiver, n);
        }
        if events.is_empty() {
            return;
        }
        let send = self.store.send(Append(events));
        ctx.wait(send.into_actor(self).map(move |res, act, ctx| {
            match res.map_err(ServiceError::from).and_then(|r| r) {
                Ok(_) => {
                    for n in notes {
                        for r in act.config.receivers.clone() {
                            act.deliver(ctx, r.name, n.clone());
                        }
                    }
                }
                Err(e) => tracing::error!(error = %e, "could not record alerts; they are raised again on the next evaluation"),
            }
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
        if n.rule.is_empty() {
            if let Some((rule, labels)) = self.rules.get(&n.alert) {
                n.rule = (*rule).to_owned();
                n.labels = labels.clone();
            } else {
                n.rule = "VouchAlert".into();
            }
        }
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
    }
}

impl Handler<Committed> for Alerter {
    type Result = ();

    fn handle(&mut self, msg: Committed, ctx: &mut Self::Context) {
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
