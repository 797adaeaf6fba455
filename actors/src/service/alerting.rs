//! Alerting: rules over the projections decide which incidents are open;
//! each incident gets one `alert.raised` while it lasts and one
//! `alert.resolved` when it clears. Every raised and resolved alert is
//! delivered to every webhook receiver, in the receiver's format (a plain
//! JSON event, Alertmanager's outgoing webhook payload version 4, or
//! Alertmanager's own API), with retries and exponential backoff; each
//! attempt's outcome is an event. A receiver of Alertmanager's API also
//! gets every open alert again each `evaluate_every` (not recorded as
//! events; counted in metrics), as Alertmanager resolves an alert nobody
//! re-sends. Delivery runs in this actor, apart from the job queue: a
//! receiver that is down never slows a job.

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

use super::alertmanager::{alertmanager_labels, api_alert, generator_url};
use super::error::ServiceError;
use super::policy;
use super::read_model::{Query, ReadModelActor, ReadModelHealth};
use super::store::{Append, AppendHealth, AppendStatus, Committed, EventStore};
use super::webhook::{self, ReceiverAuth};
use crate::clock::{duration_to_ns, unix_ns_to_utc, Clock};
use crate::RestartGate;

/// The body a receiver gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WebhookFormat {
    /// `{"status": "firing"|"resolved", "alert": {...}}`.
    Json,
    /// The payload Alertmanager itself sends to *its* webhook receivers
    /// (version 4: `receiver`, `groupKey`, `alerts[]`), for receivers that
    /// accept that payload. Alertmanager does not take it in.
    AlertmanagerWebhook,
    /// Alertmanager's API (`POST /api/v2/alerts`): a JSON array of
    /// `{labels, annotations, startsAt, endsAt, generatorURL}`; open alerts
    /// are re-sent every `evaluate_every` with `endsAt` [`KEEP_FOR`](crate::service::KEEP_FOR)
    /// intervals ahead, a resolution carries its own time as `endsAt`.
    AlertmanagerApi,
}

impl WebhookFormat {
    /// Its name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookFormat::Json => "json",
            WebhookFormat::AlertmanagerWebhook => "alertmanager-webhook",
            WebhookFormat::AlertmanagerApi => "alertmanager-api",
        }
    }
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
    /// Trust anchors of an `https://` receiver besides Mozilla's roots (a
    /// private CA).
    pub ca_certs: Vec<rustls_pki_types::CertificateDer<'static>>,
    /// How the receiver knows the POST is ours.
    pub auth: Option<ReceiverAuth>,
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
    /// The newest scrub of the log: when, and what it found.
    pub last_scrub: Option<(i64, vouch_events::LogScrubbed)>,
    /// The subject of each open alert (what an evaluation without the read
    /// model must not raise again, after a restart of the alerter too).
    pub open: HashMap<AlertId, String>,
    /// Each open alert as its `alert.raised` recorded it, with when it was
    /// recorded: what is re-sent to Alertmanager's API, with the same
    /// identity after a restart.
    pub open_raised: BTreeMap<AlertId, (i64, AlertRaised)>,
    /// The security center's checks as last recorded, by id.
    pub security: BTreeMap<String, vouch_events::SecurityCheckChanged>,
    /// Report deliveries that gave up, by (delivery, target), with the
    /// periods not delivered (until a later delivery of that period).
    pub reports_given_up: BTreeMap<(String, String), BTreeMap<String, String>>,
    /// The latest failed post-backup hook of each plan, with when it was
    /// recorded, until a later backup of the plan commits (and its own
    /// post hook, recorded after its commit, does not fail). A failed pre
    /// hook fails its backup: `BackupFailed` says it.
    pub post_hook_failures: BTreeMap<vouch_events::PlanId, (i64, vouch_events::HookFailed)>,
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
                self.open.insert(a.alert.clone(), a.subject.clone());
                self.open_raised
                    .insert(a.alert.clone(), (env.recorded_unix_ns, a.clone()));
            }
            Event::AlertResolved(r) => {
                self.open.remove(&r.alert);
                self.open_raised.remove(&r.alert);
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
            Event::LogScrubbed(s) => {
                self.last_scrub = Some((env.recorded_unix_ns, s.clone()));
            }
            Event::SecurityCheckChanged(c) => {
                self.security.insert(c.check.clone(), c.clone());
            }
            Event::ReportDeliveryFailed(f) if !f.will_retry => {
                self.reports_given_up
                    .entry((f.delivery.clone(), f.target.clone()))
                    .or_default()
                    .insert(format!("{} {}", f.scope, f.label), f.error.clone());
            }
            Event::ReportDelivered(d) => {
                let key = (d.delivery.clone(), d.target.clone());
                if let Some(periods) = self.reports_given_up.get_mut(&key) {
                    periods.remove(&format!("{} {}", d.scope, d.label));
                    if periods.is_empty() {
                        self.reports_given_up.remove(&key);
                    }
                }
            }
            Event::HookFailed(h) if h.phase == vouch_events::HookPhase::Post => {
                self.post_hook_failures
                    .insert(h.plan.clone(), (env.recorded_unix_ns, h.clone()));
            }
            Event::PlanRemoved(r) => {
                self.post_hook_failures.remove(&r.plan);
            }
            Event::BackupCommitted(b) => {
                if let Some(plan) = &b.plan {
                    let later = self
                        .post_hook_failures
                        .get(plan)
                        .is_some_and(|(_, h)| b.job.as_ref() != Some(&h.job));
                    if later {
                        self.post_hook_failures.remove(plan);
                    }
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
    let mut out = vanished_incidents(&facts.vanished, &|_| false);
    out.extend(one_off_incidents(facts, now_ns));
    out
}

/// A point the read model knows as forgotten by retention (its manifest is
/// meant to go).
pub fn forgotten_in(p: &Projections, point: &SnapshotId) -> bool {
    p.points
        .points
        .get(point)
        .is_some_and(|pt| pt.expired.is_some())
}

/// Points whose manifest is gone: one critical alert per repository. A
/// point `forgotten` says retention forgot is left out: a check scheduled
/// before the forget and run after the prune finds its manifest gone, as
/// meant, and such an alert could never resolve (found by the chaos
/// harness).
pub fn vanished_incidents(
    vanished: &BTreeMap<SnapshotId, (RepositoryId, String)>,
    forgotten: &dyn Fn(&SnapshotId) -> bool,
) -> Vec<Incident> {
    let mut out = Vec::new();
    // One alert per repository, however many of its points vanished (a
    // replaced or emptied repository loses all of them at once: one page,
    // not thousands).
    let mut by_repository: BTreeMap<&RepositoryId, Vec<(&SnapshotId, &str)>> = BTreeMap::new();
    for (point, (repository, reason)) in vanished.iter().filter(|(p, _)| !forgotten(p)) {
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
    out
}

/// The one-off facts (a log repair, a clock step, ...) of
/// [`fact_incidents`], and the other rules over the log's facts.
fn one_off_incidents(facts: &AlertFacts, now_ns: i64) -> Vec<Incident> {
    let mut out = Vec::new();
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
    for (plan, (at, h)) in &facts.post_hook_failures {
        out.push(Incident {
            subject: format!("plan {plan}: post-backup hook failed"),
            severity: Severity::Warning,
            message: format!(
                "the post-backup hook {:?} of plan {plan} failed at {} (job {}): {}; the backup itself stands",
                h.hook,
                rfc3339(*at),
                h.job,
                h.reason
            ),
            rule: "HookFailed",
            labels: labels(&[("plan", plan.to_string()), ("hook", h.hook.clone())]),
        });
    }
    for (at, c) in facts.clock_steps.iter().filter(|(at, _)| fresh(*at)) {
        out.push(Incident {
            subject: format!("clock stepped back at {}", rfc3339(*at)),
            severity: Severity::Warning,
            message: format!(
                "the wall clock read {} after it had read {} (the log's last event at start, or the scheduler's previous tick): schedules, times and freshness are suspect until it catches up",
                rfc3339(c.now_unix_ns),
                rfc3339(c.previous_unix_ns)
            ),
            rule: "ClockStepped",
            // Each step is its own alert: two open at once must not be one
            // in Alertmanager, whose identity is the labels (found by the
            // chaos harness: three steps within a day were one alert there).
            labels: labels(&[("stepped_at", rfc3339(*at))]),
        });
    }
    // A security-center check that failed stays open until it is
    // recorded with another status (a new reason alone keeps the alert).
    for c in facts
        .security
        .values()
        .filter(|c| c.status == vouch_events::CheckStatus::Failed)
    {
        out.push(Incident {
            subject: format!("security check {} failed", c.check),
            severity: Severity::Critical,
            message: format!(
                "security check {} failed: {}{}",
                c.check,
                c.reason,
                if c.action.is_empty() {
                    String::new()
                } else {
                    format!(". What to do: {}", c.action)
                }
            ),
            rule: "SecurityCheckFailed",
            labels: labels(&[("check", c.check.clone())]),
        });
    }
    // A report delivery that gave up stays open until that period is
    // delivered (after a restart, which tries again).
    for ((delivery, target), periods) in &facts.reports_given_up {
        let shown: Vec<String> = periods
            .iter()
            .take(5)
            .map(|(period, error)| format!("{period} ({error})"))
            .collect();
        out.push(Incident {
            subject: format!("report delivery {delivery} to {target} failed"),
            severity: Severity::Warning,
            message: format!(
                "{} report(s) of delivery {delivery} could not be sent to {target} after every attempt: {}{}. They are sent again after a restart of the service; the reports themselves are in the API (GET /api/v1/reports)",
                periods.len(),
                shown.join("; "),
                if periods.len() > 5 { "; ..." } else { "" }
            ),
            rule: "ReportNotDelivered",
            labels: labels(&[("delivery", delivery.clone()), ("target", target.clone())]),
        });
    }
    // Damage found by the newest scrub stays open until a scrub passes:
    // an acknowledged event went bad, and nothing but a repair (and the
    // scrub after it) makes the log whole again.
    if let Some((at, s)) = facts.last_scrub.as_ref().filter(|(_, s)| !s.ok()) {
        out.push(Incident {
            subject: "event log damaged".into(),
            severity: Severity::Critical,
            message: format!(
                "the scrub of the event log at {} found damage{}: {}. The states shown may rest on lost events; stop the service, keep a copy of the data directory, and see docs/operations.md (event log damage)",
                rfc3339(*at),
                s.damaged_seq
                    .map(|q| format!(" at seq {q}"))
                    .unwrap_or_default(),
                s.problem.as_deref().unwrap_or("unknown")
            ),
            rule: "LogDamaged",
            labels: BTreeMap::new(),
        });
    }
    out
}

/// The rule raised while the event log refuses appends.
pub const LOG_NOT_WRITABLE: &str = "LogNotWritable";
/// The rule raised while the read model refuses queries.
pub const READ_MODEL_UNAVAILABLE: &str = "ReadModelUnavailable";

/// The rules over the service's own health, evaluated without the read
/// model (which may be what failed): the event log refuses appends
/// (`LogNotWritable`: delivered at once even though it cannot be recorded,
/// recorded once the log takes writes again, and resolved then) and the
/// read model refuses queries (`ReadModelUnavailable`). Both critical.
pub fn health_incidents(append: &AppendStatus, read_unavailable: Option<&str>) -> Vec<Incident> {
    let mut out = Vec::new();
    if !append.healthy {
        out.push(Incident {
            subject: "event log not writable".into(),
            severity: Severity::Critical,
            message: format!(
                "the event log refuses appends{} ({} failed in a row): {}; nothing the service decides can be recorded until it takes writes again, and `vouch serve` stops after a while so that its supervisor restarts it",
                append
                    .failing_since_unix_ns
                    .map(|t| format!(" since {}", rfc3339(t)))
                    .unwrap_or_default(),
                append.consecutive_failures,
                append.reason.as_deref().unwrap_or("no reason recorded")
            ),
            rule: LOG_NOT_WRITABLE,
            labels: BTreeMap::new(),
        });
    }
    if let Some(why) = read_unavailable {
        out.push(Incident {
            subject: "read model unavailable".into(),
            severity: Severity::Critical,
            message: format!(
                "the read model refuses queries (the API answers 503 and the rules over the projections are not evaluated): {why}"
            ),
            rule: READ_MODEL_UNAVAILABLE,
            labels: BTreeMap::new(),
        });
    }
    out
}

/// An anomaly signal counts from this score on (the heuristic's threshold,
/// `vouch::anomaly::assess::THRESHOLD`).
const ANOMALY_THRESHOLD: u32 = 500;

/// The rules: job failed (a plan's latest backup failed or was abandoned),
/// verification failed, restore test failed, plan not protected (no
/// recoverable point inside its RPO, once the plan is older than its RPO),
/// a repository's read-back found damage, agent lost, anomaly detected.
///
/// Also: a verify or restore-test job of a live point that ended failed or
/// abandoned with no later check of the point (warning; critical when not
/// retryable), a plan whose newest point backed up no file (the source came
/// back empty), and a plan `unknown` or `at-risk` since longer than its RPO
/// (since the earlier of `not_protected_since`, when this alerter first saw
/// it so, and [`protected_at_most_until`], from the log).
pub fn incidents(p: &Projections, now_ns: i64, agent_lost_after: Duration) -> Vec<Incident> {
    incidents_with(p, now_ns, agent_lost_after, &HashMap::new())
}

/// The latest instant `plan` can have been `protected`, from the log alone
/// (so a restart of the alerter or the service does not reset a plan's
/// `PlanNotProven` timer): its epoch (creation, or the latest change of its
/// source or repository), or later the end of what a point of it with a
/// restore test could prove: a point protects only while it is within the
/// RPO (`min(snapshot time, recorded time) + rpo`), its restore evidence
/// within `max_evidence_age`, and it is not forgotten. An upper bound: a
/// failed check may have ended the protection earlier (the alert is then
/// late, never early).
pub fn protected_at_most_until(p: &Projections, plan: &vouch_events::Plan) -> i64 {
    let rpo = duration_to_ns(plan.definition.rpo);
    let max_age = duration_to_ns(plan.definition.restore_test.max_evidence_age);
    let mut until = plan.epoch.unix_ns;
    for pt in p.points.of_plan(&plan.id) {
        if pt.since.seq < plan.epoch.seq {
            continue;
        }
        let Some(test) = &pt.last_restore_test else {
            continue;
        };
        let mut u = pt
            .snapshot_time_unix_ns
            .min(pt.since.unix_ns)
            .saturating_add(rpo)
            .min(test.at.unix_ns.saturating_add(max_age));
        if let Some((at, _)) = &pt.expired {
            u = u.min(at.unix_ns);
        }
        until = until.max(u);
    }
    until
}

/// `CopyFailed`: the latest copy job of `plan` that ended failed or was
/// abandoned (a later success clears it). Critical when the plan's
/// protection requires its copies, a warning otherwise.
fn copy_failed(p: &Projections, plan: &vouch_events::Plan) -> Option<Incident> {
    let replica = plan.definition.replica.as_ref()?;
    let last = p
        .jobs
        .jobs
        .values()
        .filter(|j| j.kind == vouch_events::JobKind::Copy && j.plan.as_ref() == Some(&plan.id))
        .filter(|j| j.state.is_terminal())
        .max_by_key(|j| j.updated.seq)?;
    if !matches!(last.state, JobState::Failed | JobState::Abandoned) {
        return None;
    }
    let id = plan.id.to_string();
    let why = last
        .last_error
        .as_ref()
        .map_or_else(|| "no reason recorded".to_owned(), |e| e.message.clone());
    Some(Incident {
        subject: format!("plan {id}: copy to {} failed", replica.repository),
        severity: if replica.require == vouch_events::ReplicaRequirement::Nothing {
            Severity::Warning
        } else {
            Severity::Critical
        },
        message: format!(
            "the latest copy of a point of plan {id} into {} ({}) failed: {why}",
            replica.repository, last.id
        ),
        rule: "CopyFailed",
        labels: labels(&[
            ("plan", id.clone()),
            ("repository", replica.repository.to_string()),
        ]),
    })
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
            // Since when: what this alerter saw, or what the log says
            // (which survives restarts), whichever is earlier.
            let since = not_protected_since
                .get(&plan.id)
                .copied()
                .unwrap_or(now_ns)
                .min(protected_at_most_until(p, plan));
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
        if let Some(incident) = copy_failed(p, plan) {
            out.push(incident);
        }
        // Copies in its replica are points of their own: their checks
        // alert as the plan's own points' do.
        let copies: Vec<&vouch_events::Point> = p
            .points
            .copies_of_plan(&plan.id)
            .filter(|pt| pt.expired.is_none())
            .collect();
        for pt in live.into_iter().chain(copies) {
            let point = pt.id.to_hex();
            let short = match &pt.copy {
                Some(_) => format!("{} (copy in {})", pt.id.short(), pt.repository),
                None => pt.id.short(),
            };
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
                let signals: Vec<String> = pt
                    .anomalies
                    .iter()
                    .filter(|a| a.score_permille >= ANOMALY_THRESHOLD)
                    .map(|a| format!("{} ({})", a.kind, a.detail))
                    .collect();
                let paths: Vec<&str> = pt
                    .anomaly_paths
                    .iter()
                    .take(5)
                    .map(String::as_str)
                    .collect();
                out.push(Incident {
                    subject: format!("point {short} of plan {id}: files look encrypted (anomaly)"),
                    // A host being encrypted is what wakes people up.
                    severity: Severity::Critical,
                    message: format!(
                        "point {point} looks like files being encrypted: {}{}. The heuristic reports, it never acts: check the host; earlier points are untouched",
                        signals.join("; "),
                        if paths.is_empty() {
                            String::new()
                        } else {
                            format!("; e.g. {}", paths.join(", "))
                        }
                    ),
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

pub(crate) fn rfc3339(ns: i64) -> String {
    unix_ns_to_utc(ns)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// How a body is rendered: for whom, and (Alertmanager's API) when and
/// how often open alerts are re-sent.
#[derive(Clone, Copy, Debug)]
pub struct RenderContext<'a> {
    /// The receiver's name.
    pub receiver: &'a str,
    /// The service's own URL (`[alerting] external_url`).
    pub external_url: &'a str,
    /// Now (a firing alert's `endsAt` for Alertmanager's API).
    pub now_ns: i64,
    /// The re-send interval (`evaluate_every`).
    pub every: Duration,
}

/// The body sent to a receiver of `format`.
pub fn render(n: &Notification, format: WebhookFormat, at: RenderContext<'_>) -> serde_json::Value {
    match format {
        WebhookFormat::Json => serde_json::json!({
            "version": "1",
            "status": n.status,
            "alert": n,
        }),
        WebhookFormat::AlertmanagerWebhook => {
            let labels = alertmanager_labels(n);
            let fingerprint = blake3::hash(n.subject.as_bytes()).to_hex()[..16].to_owned();
            serde_json::json!({
                "version": "4",
                "groupKey": format!("{{}}:{{alertname=\"{}\"}}", n.rule),
                "truncatedAlerts": 0,
                "status": n.status,
                "receiver": at.receiver,
                "groupLabels": {"alertname": n.rule},
                "commonLabels": labels,
                "commonAnnotations": {"summary": n.subject, "description": n.message},
                "externalURL": at.external_url,
                "alerts": [{
                    "status": n.status,
                    "labels": labels,
                    "annotations": {"summary": n.subject, "description": n.message},
                    "startsAt": n.starts_at,
                    "endsAt": n.ends_at.clone().unwrap_or_else(|| "0001-01-01T00:00:00Z".into()),
                    "generatorURL": at.external_url,
                    "fingerprint": fingerprint,
                }],
            })
        }
        WebhookFormat::AlertmanagerApi => serde_json::Value::Array(vec![api_alert(
            n,
            &generator_url(at.external_url),
            at.now_ns,
            at.every,
        )]),
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

/// Evaluate the rules now and answer once that evaluation, and every one
/// asked for while it ran, has recorded what it decided: the alerter is
/// then idle (deliveries may still be under way; their outcomes are
/// recorded by their own appends).
#[derive(Message)]
#[rtype(result = "()")]
pub struct EvaluateAndWait;

/// Replaces the receivers and settings (SIGHUP reloads `[[webhooks]]` and
/// `[alerting]`), then evaluates: open alerts not yet delivered to a new
/// receiver are sent to it as after a restart.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReconfigureAlerting(pub AlertingConfig);

/// An open alert, as the projections hold it.
struct OpenAlert {
    id: AlertId,
    subject: String,
    severity: Severity,
    message: String,
    raised_ns: i64,
}

/// Re-sends of open alerts to receivers of Alertmanager's API, per
/// receiver: how many POSTs were answered 2xx and how many failed since
/// the service started. Re-sends are not events (one per receiver and
/// interval would flood the log); the metrics read these counts.
#[derive(Debug, Default)]
pub struct ResendCounts(std::sync::Mutex<BTreeMap<String, (u64, u64)>>);

impl ResendCounts {
    fn count(&self, receiver: &str, delivered: bool) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let c = m.entry(receiver.to_owned()).or_default();
        if delivered {
            c.0 += 1;
        } else {
            c.1 += 1;
        }
    }

    /// `(receiver, delivered, failed)` per receiver.
    pub fn snapshot(&self) -> Vec<(String, u64, u64)> {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.iter().map(|(r, (d, f))| (r.clone(), *d, *f)).collect()
    }
}

/// A firing message rebuilt from what `alert.raised` recorded (recorded at
/// `at`): the identity of the first delivery, after a restart too.
fn firing_of(raised: &AlertRaised, at: i64) -> Notification {
    Notification {
        alert: raised.alert.clone(),
        status: "firing",
        subject: raised.subject.clone(),
        message: raised.message.clone(),
        severity: severity_name(raised.severity),
        rule: raised.rule.clone(),
        labels: raised.labels.clone(),
        starts_at: rfc3339(at),
        ends_at: None,
    }
}

/// Delivery outcomes kept for recording while the log refuses writes.
pub const UNRECORDED_DELIVERIES: usize = 1024;

/// The first retry after a failed read of the projections.
pub const RETRY_FIRST: Duration = Duration::from_millis(200);
/// The longest wait between retries of a failed read.
pub const RETRY_MAX: Duration = Duration::from_secs(30);

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
    /// The seq its queries read at least up to: its own latest append (so
    /// it never raises twice what it just raised) and the last committed
    /// batch it was told of (so the evaluation a commit triggers sees that
    /// commit, even when the read model's copy of the batch was dropped on
    /// a full mailbox).
    seen_seq: u64,
    /// The delay before the next try after a failed read of the
    /// projections (zero: the last one succeeded).
    retry_delay: Duration,
    /// A retry after a failed read is scheduled.
    retry_pending: bool,
    /// When each plan was first seen `unknown` or `at-risk` (in this run;
    /// the rule also derives it from the log, which survives restarts).
    not_protected_since: HashMap<PlanId, i64>,
    /// Raised alerts that were delivered but could not be recorded (the
    /// log refused the append), by subject, with when they were raised:
    /// recorded when the log takes writes again (with their resolution,
    /// when the incident is over by then), and not delivered twice.
    unrecorded: BTreeMap<String, (AlertRaised, i64)>,
    /// Subjects of the alerts open as of the last read of the projections
    /// and this alerter's own appends since: what an evaluation without
    /// the read model must not raise again.
    known_open: HashSet<String>,
    append_health: Arc<AppendHealth>,
    read_health: Arc<ReadModelHealth>,
    /// Delivery outcomes the log refused to record.
    unrecorded_deliveries: Vec<Event>,
    /// Resolutions delivered but not recorded.
    unrecorded_resolved: HashSet<AlertId>,
    /// Callers of [`EvaluateAndWait`], answered once no evaluation runs or
    /// is pending.
    idle_waiters: Vec<tokio::sync::oneshot::Sender<()>>,
    /// The periodic evaluation (re-armed when its interval is reloaded).
    tick: Option<SpawnHandle>,
    gate: RestartGate,
    /// Re-sends to Alertmanager's API, counted for the metrics.
    resends: Arc<ResendCounts>,
    /// Receivers of Alertmanager's API with a re-send under way (the next
    /// interval's waits for it: one POST at a time per receiver, so a
    /// later one never overtakes an earlier one).
    resending: HashSet<String>,
    /// Receivers whose latest re-send failed (logged once, not every
    /// interval).
    resend_failing: HashSet<String>,
    /// Resolutions to send once more with the next re-send, per receiver
    /// of Alertmanager's API: a re-send in flight when the alert resolved
    /// would otherwise open it again there for [`KEEP_FOR`](crate::service::KEEP_FOR) intervals.
    echo: HashMap<String, Vec<Notification>>,
    /// Alerts this alerter resolved, until the fold of the log has the
    /// resolution too: never re-sent as firing.
    resolved_here: HashSet<AlertId>,
    /// Firing deliveries to Alertmanager's API still retrying, by alert:
    /// set when the alert resolves, so a late retry does not open it again.
    firing_over: HashMap<AlertId, Arc<std::sync::atomic::AtomicBool>>,
}

impl Alerter {
    /// An alerter recording to `store`, reading `read` and `log`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Addr<EventStore>,
        read: Addr<ReadModelActor>,
        log: LogReader,
        clock: Arc<dyn Clock>,
        config: AlertingConfig,
        gate: RestartGate,
        append_health: Arc<AppendHealth>,
        read_health: Arc<ReadModelHealth>,
        resends: Arc<ResendCounts>,
    ) -> Self {
        Alerter {
            gate,
            resends,
            resending: HashSet::new(),
            resend_failing: HashSet::new(),
            echo: HashMap::new(),
            resolved_here: HashSet::new(),
            firing_over: HashMap::new(),
            known_open: HashSet::new(),
            append_health,
            read_health,
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
            retry_delay: Duration::ZERO,
            retry_pending: false,
            not_protected_since: HashMap::new(),
            unrecorded: BTreeMap::new(),
            unrecorded_resolved: HashSet::new(),
            unrecorded_deliveries: Vec::new(),
            idle_waiters: Vec::new(),
            tick: None,
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
        let health = health_incidents(
            &self.append_health.status(),
            self.read_health.unavailable().as_deref(),
        );
        let mut from_facts = one_off_incidents(&self.facts, now);
        from_facts.extend(health.iter().cloned());
        let vanished = self.facts.vanished.clone();
        let query = self.read.send(Query::new(self.seen_seq, move |p| {
            let mut wanted = incidents_with(p, now, lost, &since);
            wanted.extend(vanished_incidents(&vanished, &|pt| forgotten_in(p, pt)));
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
                        tracing::error!(error = %e, "alerting could not read the projections; trying again");
                        act.retry_later(ctx);
                        // The rules over the service's health need no
                        // projections: raise what they find now.
                        let new: Vec<Incident> = health
                            .into_iter()
                            .filter(|i| {
                                !act.known_open.contains(&i.subject)
                                    && !act.facts.open.values().any(|s| *s == i.subject)
                            })
                            .collect();
                        act.apply(ctx, now, new, Vec::new(), Vec::new(), true);
                        return;
                    }
                };
            act.retry_delay = Duration::ZERO;
            act.known_open = open.iter().map(|a| a.subject.clone()).collect();
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
            act.apply(ctx, now, wanted, open, undelivered, false);
        }));
    }

    /// Evaluates again after a failed read of the projections, with a
    /// backoff (from [`RETRY_FIRST`] doubling up to [`RETRY_MAX`]), rather
    /// than leaving what the failed evaluation was for (a commit's
    /// resolution, say) to the next periodic one.
    fn retry_later(&mut self, ctx: &mut Context<Self>) {
        if std::mem::replace(&mut self.retry_pending, true) {
            return;
        }
        self.retry_delay = if self.retry_delay.is_zero() {
            RETRY_FIRST
        } else {
            (self.retry_delay * 2).min(RETRY_MAX)
        };
        ctx.run_later(self.retry_delay, |act, ctx| {
            act.retry_pending = false;
            act.evaluate(ctx);
        });
    }

    /// Runs the evaluation that was asked for while one was under way.
    /// Every evaluation ends here: the next one starts if one was asked
    /// for meanwhile, else whoever waits for the alerter to be idle is
    /// answered.
    fn evaluate_again(&mut self, ctx: &mut Context<Self>) {
        if std::mem::take(&mut self.again) {
            self.evaluate(ctx);
        } else {
            for w in self.idle_waiters.drain(..) {
                let _ = w.send(());
            }
        }
    }

    /// Remembers the rule and labels of an alert this alerter raises, at
    /// once: the fold of the log learns them only when the committed event
    /// comes back, and an evaluation in between that resolves the alert
    /// (it is open in the projections already) must not render it as
    /// `VouchAlert`, which Alertmanager would not match with its firing
    /// message (seen in CI: `LogNotWritable` resolved as `VouchAlert`).
    fn know_rule(&mut self, raised: &AlertRaised) {
        self.facts
            .rules
            .entry(raised.alert.clone())
            .or_insert_with(|| (raised.rule.clone(), raised.labels.clone()));
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

    /// Raises what is `wanted` and not `open`, resolves what is `open`
    /// and not `wanted`, and delivers. `blind`: the projections could not
    /// be read; `wanted` holds only the health rules' new incidents, and
    /// nothing else is decided.
    fn apply(
        &mut self,
        ctx: &mut Context<Self>,
        now: i64,
        wanted: Vec<Incident>,
        open: Vec<OpenAlert>,
        undelivered: Vec<(String, Notification)>,
        blind: bool,
    ) {
        let open_subjects: HashSet<&str> = open.iter().map(|a| a.subject.as_str()).collect();
        let wanted_subjects: HashSet<&str> = wanted.iter().map(|i| i.subject.as_str()).collect();
        let mut events: Vec<Event> = Vec::new();
        let mut notes = Vec::new();
        let mut resolving = Vec::new();
        let mut closed: Vec<String> = Vec::new();
        // Raises delivered before but not recorded: try to record them
        // again (same id), without delivering them twice; one whose
        // incident is over is recorded with its resolution, and receivers
        // are told it is resolved.
        let unrecorded = std::mem::take(&mut self.unrecorded);
        let mut retrying: BTreeMap<String, (AlertRaised, i64)> = BTreeMap::new();
        for (subject, (raised, at)) in unrecorded {
            self.know_rule(&raised);
            if open_subjects.contains(subject.as_str()) {
                continue;
            }
            if wanted_subjects.contains(subject.as_str()) {
                events.push(raised.clone().into());
            } else if !blind {
                events.push(raised.clone().into());
                events.push(
                    AlertResolved {
                        alert: raised.alert.clone(),
                    }
                    .into(),
                );
                tracing::info!(alert = %raised.alert, subject = %subject, "alert resolved (recorded with its raise)");
                resolving.push(raised.alert.clone());
                closed.push(subject.clone());
                if !self.unrecorded_resolved.contains(&raised.alert) {
                    notes.push(Notification {
                        alert: raised.alert.clone(),
                        status: "resolved",
                        subject: subject.clone(),
                        message: raised.message.clone(),
                        severity: severity_name(raised.severity),
                        rule: raised.rule.clone(),
                        labels: raised.labels.clone(),
                        starts_at: rfc3339(at),
                        ends_at: Some(rfc3339(now)),
                    });
                }
            }
            retrying.insert(subject, (raised, at));
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
            retrying.insert(inc.subject.clone(), (raised.clone(), now));
            self.know_rule(&raised);
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
            closed.push(a.subject.clone());
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
        // Deliveries whose outcome could not be recorded, after the raises
        // they are about: recorded, a delivery made while the log refused
        // writes is not made again.
        let deliveries = if blind {
            Vec::new()
        } else {
            std::mem::take(&mut self.unrecorded_deliveries)
        };
        events.extend(deliveries.iter().cloned());
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
                    for (subject, (raised, _)) in &retrying {
                        act.known_open.insert(subject.clone());
                        // A health alert recorded: its own append may be
                        // what shows the log takes writes again, and no
                        // commit of another event asks for the evaluation
                        // that resolves it.
                        if [LOG_NOT_WRITABLE, READ_MODEL_UNAVAILABLE]
                            .contains(&raised.rule.as_str())
                        {
                            act.again = true;
                        }
                    }
                    for subject in &closed {
                        act.known_open.remove(subject);
                    }
                    for n in notes {
                        act.resolved(&n);
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
                    act.keep_unrecorded_deliveries(deliveries);
                    for n in notes {
                        act.resolved(&n);
                        for r in act.config.receivers.clone() {
                            act.deliver(ctx, r.name, n.clone());
                        }
                    }
                }
            }
            act.evaluate_again(ctx);
        }));
    }

    /// Notes a resolution about to be delivered (nothing for a firing
    /// message): its alert is re-sent as firing no more, a retry of its
    /// firing delivery to Alertmanager's API stops, and the resolution goes
    /// once more with the next re-send to each receiver of that API.
    fn resolved(&mut self, n: &Notification) {
        if n.status != "resolved" {
            return;
        }
        self.resolved_here.insert(n.alert.clone());
        if let Some(over) = self.firing_over.remove(&n.alert) {
            over.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let mut n = n.clone();
        self.identify(&mut n);
        for r in &self.config.receivers {
            if r.format == WebhookFormat::AlertmanagerApi {
                self.echo.entry(r.name.clone()).or_default().push(n.clone());
            }
        }
    }

    /// Sends every open alert to each receiver of Alertmanager's API, as
    /// one array, with `endsAt` [`KEEP_FOR`](crate::service::KEEP_FOR) intervals ahead (and the
    /// resolutions since the last re-send, once). One attempt: the next
    /// interval is the retry. Not recorded as events; counted in
    /// [`ResendCounts`] and logged when a receiver starts or stops failing.
    fn resend(&mut self, ctx: &mut Context<Self>) {
        let now = self.clock.now_unix_ns();
        let every = self.config.evaluate_every;
        // The alerter's own resolutions, until the fold has them.
        let folded = &self.facts.open_raised;
        self.resolved_here.retain(|id| folded.contains_key(id));
        let skip =
            |id: &AlertId| self.resolved_here.contains(id) || self.unrecorded_resolved.contains(id);
        let mut firing: Vec<Notification> = self
            .facts
            .open_raised
            .iter()
            .filter(|(id, _)| !skip(id))
            .map(|(_, (at, raised))| firing_of(raised, *at))
            .collect();
        // Raised and delivered while the log refused writes: open too.
        firing.extend(
            self.unrecorded
                .values()
                .filter(|(raised, _)| {
                    !skip(&raised.alert) && !self.facts.open_raised.contains_key(&raised.alert)
                })
                .map(|(raised, at)| firing_of(raised, *at)),
        );
        for n in &mut firing {
            self.identify(n);
        }
        let generator = generator_url(&self.config.external_url);
        for r in self.config.receivers.clone() {
            if r.format != WebhookFormat::AlertmanagerApi || self.resending.contains(&r.name) {
                continue;
            }
            let mut batch = firing.clone();
            batch.extend(self.echo.remove(&r.name).unwrap_or_default());
            if batch.is_empty() {
                continue;
            }
            self.resending.insert(r.name.clone());
            let body = serde_json::Value::Array(
                batch
                    .iter()
                    .map(|n| api_alert(n, &generator, now, every))
                    .collect(),
            );
            let body = serde_json::to_vec(&body).unwrap_or_default();
            let alerts = batch.len();
            let task = async move {
                let outcome = match webhook::client(&r.name, &r.ca_certs, r.timeout) {
                    Ok(client) => post(&client, &r, &body, now).await,
                    Err(e) => Err(e.to_string()),
                };
                (r.name, outcome)
            };
            ctx.spawn(task.into_actor(self).map(move |(name, outcome), act, _| {
                act.resending.remove(&name);
                act.resends.count(&name, outcome.is_ok());
                match outcome {
                    Ok(()) => {
                        if act.resend_failing.remove(&name) {
                            tracing::info!(receiver = %name, alerts, "re-sending open alerts works again");
                        }
                    }
                    Err(msg) => {
                        if act.resend_failing.insert(name.clone()) {
                            tracing::warn!(receiver = %name, alerts, error = %msg, "re-sending open alerts failed; trying again every evaluate_every (Alertmanager resolves them by itself after a few missed re-sends)");
                        } else {
                            tracing::debug!(receiver = %name, alerts, error = %msg, "re-sending open alerts failed again");
                        }
                    }
                }
            }));
        }
    }

    /// Keeps delivery outcomes the log refused, to record them with the
    /// alerter's next append (the newest [`UNRECORDED_DELIVERIES`]).
    fn keep_unrecorded_deliveries(&mut self, mut events: Vec<Event>) {
        events.append(&mut self.unrecorded_deliveries);
        let excess = events.len().saturating_sub(UNRECORDED_DELIVERIES);
        events.drain(..excess);
        self.unrecorded_deliveries = events;
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
        // A firing alert for Alertmanager's API stops retrying once it is
        // resolved: a late attempt would open it again there.
        let over = (r.format == WebhookFormat::AlertmanagerApi && n.status == "firing")
            .then(|| self.firing_over.entry(n.alert.clone()).or_default().clone());
        let external_url = self.config.external_url.clone();
        let every = self.config.evaluate_every;
        let store = self.store.clone();
        let clock = self.clock.clone();
        let alert = n.alert.clone();
        let task = async move {
            let mut unrecorded: Vec<Event> = Vec::new();
            let client = webhook::client(&r.name, &r.ca_certs, r.timeout);
            let mut delay = r.retry_initial;
            for attempt in 1..=r.max_attempts.max(1) {
                if over
                    .as_ref()
                    .is_some_and(|o| o.load(std::sync::atomic::Ordering::SeqCst))
                {
                    break;
                }
                // Rendered at each attempt: a firing alert's `endsAt` for
                // Alertmanager's API counts from the attempt.
                let now = clock.now_unix_ns();
                let body = render(
                    &n,
                    r.format,
                    RenderContext {
                        receiver: &r.name,
                        external_url: &external_url,
                        now_ns: now,
                        every,
                    },
                );
                let body = serde_json::to_vec(&body).unwrap_or_default();
                let outcome = match &client {
                    Ok(client) => post(client, &r, &body, now).await,
                    Err(e) => Err(e.to_string()),
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
                        // A client that cannot be built never will be:
                        // no retry, and the alerter does not deliver it
                        // again at its next evaluation either.
                        will_retry: attempt < r.max_attempts && client.is_ok(),
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
                    .send(Append(vec![event.clone()]))
                    .await
                    .map_err(ServiceError::from)
                    .and_then(|r| r)
                {
                    tracing::error!(error = %e, "could not record an alert delivery; recording it with the next alert");
                    unrecorded.push(event);
                }
                // A receiver that cannot be reached with this
                // configuration never will be: no retry.
                if outcome.is_ok() || client.is_err() {
                    break;
                }
                actix::clock::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(300));
            }
            (alert, name, unrecorded)
        };
        ctx.spawn(
            task.into_actor(self)
                .map(|(alert, name, unrecorded), act, _| {
                    act.in_flight.remove(&(alert, name));
                    act.keep_unrecorded_deliveries(unrecorded);
                }),
        );
    }
}

/// One POST of `body` to `r`: JSON, with `r`'s credentials; a success is
/// a 2xx answer (a redirect is not followed and counts as a failure).
async fn post(client: &awc::Client, r: &Receiver, body: &[u8], now_ns: i64) -> Result<(), String> {
    let headers = webhook::auth_headers(
        &r.name,
        r.auth.as_ref(),
        now_ns.div_euclid(1_000_000_000),
        body,
    )
    .map_err(|e| e.to_string())?;
    let mut req = client
        .post(&r.url)
        .insert_header(("Content-Type", "application/json"));
    for h in headers {
        req = req.insert_header(h);
    }
    match req.send_body(body.to_vec()).await {
        Ok(resp) if resp.status().is_success() => Ok(()),
        Ok(resp) if resp.status().is_redirection() => Err(format!(
            "the receiver answered {} (redirects are not followed: configure the final URL)",
            resp.status()
        )),
        Ok(resp) => Err(format!("the receiver answered {}", resp.status())),
        Err(e) => Err(format!("could not reach the receiver: {e}")),
    }
}

impl Alerter {
    /// The periodic work, every `evaluate_every`: evaluate the rules, then
    /// re-send open alerts to `alertmanager-api` receivers (none: nothing
    /// to do), so a receiver of that format added by a reload is kept fed.
    fn arm_tick(&mut self, ctx: &mut Context<Self>) {
        self.tick = Some(ctx.run_interval(self.config.evaluate_every, |act, ctx| {
            act.evaluate(ctx);
            act.resend(ctx);
        }));
    }
}

impl Actor for Alerter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(256);
        self.gate.started(ctx);
        self.arm_tick(ctx);
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
        self.retry_pending = false;
        self.retry_delay = Duration::ZERO;
        self.in_flight.clear();
        self.known_open.clear();
        // Re-sends in flight were dropped with the old context.
        self.resending.clear();
        // Rebuilt from the log, not trusted from before the failure.
        self.facts = AlertFacts::default();
        self.facts_behind = true;
    }
}

impl Handler<Committed> for Alerter {
    type Result = ();

    fn handle(&mut self, msg: Committed, ctx: &mut Self::Context) {
        // The evaluation this batch triggers reads projections that include
        // it (the read model catches up from the log if its own copy of the
        // batch was dropped or is still queued).
        if let Some(last) = msg.0.last() {
            self.seen_seq = self.seen_seq.max(last.seq);
        }
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

impl Handler<ReconfigureAlerting> for Alerter {
    type Result = ();

    fn handle(&mut self, msg: ReconfigureAlerting, ctx: &mut Self::Context) {
        let every = msg.0.evaluate_every;
        let names = |c: &AlertingConfig| {
            c.receivers
                .iter()
                .map(|r| r.name.clone())
                .collect::<Vec<_>>()
        };
        tracing::info!(
            receivers = ?names(&msg.0),
            before = ?names(&self.config),
            evaluate_every_s = every.as_secs_f64(),
            "alerting reconfigured"
        );
        let rearm = every != self.config.evaluate_every;
        self.config = msg.0;
        if rearm {
            if let Some(h) = self.tick.take() {
                ctx.cancel_future(h);
            }
            self.arm_tick(ctx);
        }
        self.evaluate(ctx);
    }
}

impl Handler<EvaluateAndWait> for Alerter {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _msg: EvaluateAndWait, ctx: &mut Self::Context) -> Self::Result {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.idle_waiters.push(tx);
        self.evaluate(ctx);
        // A dropped sender (the alerter stopped) also ends the wait.
        Box::pin(async move {
            let _ = rx.await;
        })
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
                    boot: None,
                },
                rpo: Duration::from_secs(3600),
                repository: RepositoryId::new("main"),
                paused: false,
                replica: None,
                proxmox: None,
                anomaly_lock: None,
                files: Default::default(),
                hooks: Default::default(),
                time_zone: None,
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
            changes: None,
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

    fn replicated(require: vouch_events::ReplicaRequirement) -> Event {
        let Event::PlanCreated(mut c) = plan() else {
            unreachable!()
        };
        c.definition.replica = Some(vouch_events::ReplicaPolicy {
            repository: RepositoryId::new("offsite"),
            lock_for: None,
            require,
        });
        c.into()
    }

    fn copy_job(ending: Event) -> Vec<Event> {
        vec![
            JobScheduled {
                job: JobId::new("copy-1"),
                kind: JobKind::Copy,
                plan: Some(PlanId::new("docs")),
                point: Some(SnapshotId([1; 32])),
                due_unix_ns: 0,
                attempt: 1,
                spec: Default::default(),
            }
            .into(),
            JobStarted {
                job: JobId::new("copy-1"),
                agent: None,
            }
            .into(),
            ending,
        ]
    }

    #[test]
    fn a_failed_copy_alerts_critically_when_the_plan_requires_its_copies() {
        let failed: Event = JobFailed {
            job: JobId::new("copy-1"),
            error_kind: "io".into(),
            message: "the store did not answer".into(),
            retryable: false,
        }
        .into();
        for (require, severity) in [
            (vouch_events::ReplicaRequirement::Nothing, Severity::Warning),
            (vouch_events::ReplicaRequirement::Proven, Severity::Critical),
        ] {
            let mut events = vec![replicated(require), commit(3)];
            events.extend(copy_job(failed.clone()));
            let p = state(events);
            let inc = incidents(&p, 10 * S, Duration::from_secs(600));
            let copy = inc.iter().find(|i| i.rule == "CopyFailed").expect("alert");
            assert_eq!(copy.severity, severity, "{require:?}");
            assert!(
                copy.message.contains("the store did not answer"),
                "{}",
                copy.message
            );
            assert_eq!(
                copy.labels.get("repository").map(String::as_str),
                Some("offsite")
            );
        }
        let mut events = vec![
            replicated(vouch_events::ReplicaRequirement::Proven),
            commit(3),
        ];
        events.extend(copy_job(
            vouch_events::JobFinished {
                job: JobId::new("copy-1"),
            }
            .into(),
        ));
        assert!(!rules(&state(events))
            .iter()
            .any(|(r, _)| *r == "CopyFailed"));
    }

    #[test]
    fn a_copy_whose_own_verification_failed_alerts() {
        let p = state(vec![
            replicated(vouch_events::ReplicaRequirement::Nothing),
            commit(3),
            vouch_events::CopyCommitted {
                job: None,
                plan: Some(PlanId::new("docs")),
                source: SnapshotId([1; 32]),
                repository: RepositoryId::new("offsite"),
                snapshot: SnapshotId([2; 32]),
                snapshot_time_unix_ns: S,
                summary: BackupSummary {
                    files: 3,
                    ..Default::default()
                },
                off_host: true,
                locks_enforced_by: vouch_events::LockEnforcement::Storage,
                locked_until_unix_ns: None,
            }
            .into(),
            vouch_events::VerificationFailed {
                point: SnapshotId([2; 32]),
                job: None,
                depth: VerifyDepth::ReadAll,
                bytes_read: 1,
                damaged: vec!["pack 01: bad".into()],
            }
            .into(),
        ]);
        let inc = incidents(&p, 10 * S, Duration::from_secs(600));
        let failed = inc
            .iter()
            .find(|i| i.rule == "VerificationFailed")
            .expect("the copy's failure alerts");
        assert!(
            failed.subject.contains("copy in offsite"),
            "{}",
            failed.subject
        );
        assert_eq!(
            failed.labels.get("point").map(String::as_str),
            Some(SnapshotId([2; 32]).to_hex().as_str())
        );
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

    #[test]
    fn the_health_rules_need_no_projections() {
        let healthy = AppendHealth::default();
        assert!(health_incidents(&healthy.status(), None).is_empty());
        let failing = AppendHealth::default();
        failing.failed("no space left on device".into(), 5 * S);
        let got = health_incidents(&failing.status(), Some("read store ahead of the log"));
        let rules: Vec<(&str, Severity)> = got.iter().map(|i| (i.rule, i.severity)).collect();
        assert_eq!(
            rules,
            vec![
                (LOG_NOT_WRITABLE, Severity::Critical),
                (READ_MODEL_UNAVAILABLE, Severity::Critical)
            ]
        );
        assert!(
            got[0].message.contains("no space left on device"),
            "{}",
            got[0].message
        );
        assert!(
            got[1].message.contains("read store ahead"),
            "{}",
            got[1].message
        );
        // The subject is the alert's identity: stable while appends fail.
        failing.failed("input/output error".into(), 9 * S);
        let again = health_incidents(&failing.status(), None);
        assert_eq!(again[0].subject, got[0].subject);
    }

    #[test]
    fn how_long_a_plan_can_have_been_protected_comes_from_the_log() {
        let plan_of = |p: &Projections| p.plans.plans[&PlanId::new("docs")].clone();
        // No restore test: never protected since its creation (at 1 s).
        let p = state(vec![plan(), commit(3)]);
        assert_eq!(protected_at_most_until(&p, &plan_of(&p)), S);
        // A restore test recorded at 3 s proves for max_evidence_age (1 h);
        // the point (snapshot at 1 s) is within the RPO (1 h) until 1 s + 1 h.
        let p = state(vec![
            plan(),
            commit(3),
            vouch_events::RestoreTestPassed {
                point: SnapshotId([1; 32]),
                job: None,
                evidence: vouch_events::RestoreEvidence {
                    files: 3,
                    files_in_point: Some(3),
                    complete: true,
                    ..Default::default()
                },
            }
            .into(),
        ]);
        assert_eq!(protected_at_most_until(&p, &plan_of(&p)), S + 3600 * S);
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

    /// A failed post hook raises a warning that stays until a later backup
    /// of the plan commits; a later one failing again keeps it open.
    #[test]
    fn a_failed_post_hook_alerts_until_a_later_backup_commits() {
        let committed = |job: &str| -> Event {
            vouch_events::BackupCommitted {
                job: Some(JobId::new(job)),
                plan: Some(PlanId::new("web")),
                repository: RepositoryId::new("main"),
                snapshot: SnapshotId([1; 32]),
                snapshot_time_unix_ns: S,
                summary: vouch_events::BackupSummary::default(),
                changes: None,
            }
            .into()
        };
        let hook_failed = |job: &str, phase| -> Event {
            vouch_events::HookFailed {
                job: JobId::new(job),
                plan: PlanId::new("web"),
                phase,
                hook: "notify".into(),
                exit_code: Some(1),
                timed_out: false,
                reason: "exited with status 1".into(),
                took_ms: 5,
            }
            .into()
        };
        let hook_rules = |f: &AlertFacts| -> Vec<Incident> {
            fact_incidents(f, 2 * S)
                .into_iter()
                .filter(|i| i.rule == "HookFailed")
                .collect()
        };
        let mut f = AlertFacts::default();
        f.apply(&env(1, S, hook_failed("j0", vouch_events::HookPhase::Pre)));
        assert!(
            hook_rules(&f).is_empty(),
            "a pre hook fails its backup instead"
        );
        f.apply(&env(2, S, committed("j1")));
        f.apply(&env(3, S, hook_failed("j1", vouch_events::HookPhase::Post)));
        let open = hook_rules(&f);
        assert_eq!(open.len(), 1, "{open:?}");
        assert_eq!(open[0].severity, Severity::Warning);
        assert!(open[0].message.contains("notify"), "{}", open[0].message);
        assert_eq!(open[0].labels["plan"], "web");
        f.apply(&env(4, S, committed("j2")));
        f.apply(&env(5, S, hook_failed("j2", vouch_events::HookPhase::Post)));
        assert_eq!(hook_rules(&f).len(), 1, "failed again: still open");
        f.apply(&env(6, S, committed("j3")));
        assert!(
            hook_rules(&f).is_empty(),
            "a later backup whose hook did not fail"
        );
        // A removed plan's failure closes with it.
        f.apply(&env(7, S, hook_failed("j3", vouch_events::HookPhase::Post)));
        assert_eq!(hook_rules(&f).len(), 1);
        f.apply(&env(
            8,
            S,
            vouch_events::PlanRemoved {
                plan: PlanId::new("web"),
            }
            .into(),
        ));
        assert!(hook_rules(&f).is_empty(), "the plan is gone");
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

    fn scrubbed(damaged_seq: Option<u64>) -> Event {
        vouch_events::LogScrubbed {
            through_seq: 10,
            events: damaged_seq.map_or(10, |s| s - 1),
            segments: 1,
            bytes: 1_000,
            head_hash: "00".repeat(32),
            damaged_seq,
            problem: damaged_seq.map(|s| format!("record {s} fails its checksum")),
            took_ms: 1,
        }
        .into()
    }

    /// A scrub that found damage keeps `LogDamaged` open (critical, naming
    /// the seq) however old it is, until a later scrub verifies the log.
    #[test]
    fn scrub_damage_stays_open_until_a_scrub_passes() {
        let mut f = AlertFacts::default();
        f.apply(&env(1, S, scrubbed(None)));
        assert!(fact_incidents(&f, 2 * S).is_empty(), "a clean scrub");
        f.apply(&env(2, 2 * S, scrubbed(Some(4))));
        let much_later = 2 * S + 10 * duration_to_ns(ONE_OFF_ALERT_FOR);
        let open = fact_incidents(&f, much_later);
        assert_eq!(open.len(), 1, "{open:?}");
        assert_eq!(
            (open[0].rule, open[0].severity),
            ("LogDamaged", Severity::Critical)
        );
        assert!(open[0].message.contains("at seq 4"), "{}", open[0].message);
        f.apply(&env(3, much_later, scrubbed(None)));
        assert!(fact_incidents(&f, much_later).is_empty());
    }

    fn security(status: vouch_events::CheckStatus, reason: &str) -> Event {
        vouch_events::SecurityCheckChanged {
            check: "tls/0.0.0.0:8443".into(),
            kind: "tls".into(),
            subject: "0.0.0.0:8443".into(),
            status,
            reason: reason.into(),
            action: "renew it".into(),
        }
        .into()
    }

    /// A security check recorded `failed` raises `SecurityCheckFailed`
    /// (critical, labelled with the check) with the same subject however
    /// its reason changes, and resolves when the check is recorded with
    /// another status; `warning` and `unknown` raise nothing.
    #[test]
    fn a_failed_security_check_alerts_until_it_changes() {
        use vouch_events::CheckStatus;
        let mut f = AlertFacts::default();
        f.apply(&env(
            1,
            S,
            security(CheckStatus::Warning, "expires in 20 days"),
        ));
        f.apply(&env(2, S, security(CheckStatus::Unknown, "unreadable")));
        assert!(
            fact_incidents(&f, S).is_empty(),
            "warning and unknown do not page"
        );
        f.apply(&env(
            3,
            S,
            security(CheckStatus::Failed, "expires in 3 days"),
        ));
        let open = fact_incidents(&f, 2 * S);
        assert_eq!(open.len(), 1, "{open:?}");
        assert_eq!(
            (open[0].rule, open[0].severity),
            ("SecurityCheckFailed", Severity::Critical)
        );
        assert_eq!(open[0].labels["check"], "tls/0.0.0.0:8443");
        assert!(
            open[0].message.contains("expires in 3 days"),
            "{}",
            open[0].message
        );
        assert!(open[0].message.contains("renew it"), "{}", open[0].message);
        f.apply(&env(
            4,
            S,
            security(CheckStatus::Failed, "expires in 2 days"),
        ));
        let again = fact_incidents(&f, 2 * S);
        assert_eq!(again[0].subject, open[0].subject, "one alert per check");
        f.apply(&env(5, S, security(CheckStatus::Ok, "renewed")));
        assert!(fact_incidents(&f, 2 * S).is_empty());
    }

    /// A report delivery that gave up raises `ReportNotDelivered` (a
    /// warning, one per delivery and target) until that period is
    /// delivered; failures that will be retried raise nothing.
    #[test]
    fn a_report_delivery_that_gave_up_alerts_until_delivered() {
        let failed = |will_retry: bool, label: &str| -> Event {
            vouch_events::ReportDeliveryFailed {
                delivery: "daily-ops".into(),
                period: "daily".into(),
                label: label.into(),
                scope: "installation".into(),
                target: "email".into(),
                attempt: 3,
                error: "connection refused".into(),
                will_retry,
            }
            .into()
        };
        let mut f = AlertFacts::default();
        f.apply(&env(1, S, failed(true, "2026-12-05")));
        assert!(fact_incidents(&f, S).is_empty(), "still retrying");
        f.apply(&env(2, S, failed(false, "2026-12-05")));
        f.apply(&env(3, S, failed(false, "2026-12-06")));
        let open = fact_incidents(&f, S);
        assert_eq!(open.len(), 1, "{open:?}");
        assert_eq!(
            (open[0].rule, open[0].severity),
            ("ReportNotDelivered", Severity::Warning)
        );
        assert!(
            open[0].message.starts_with("2 report(s)"),
            "{}",
            open[0].message
        );
        for (seq, label) in [(4, "2026-12-05"), (5, "2026-12-06")] {
            f.apply(&env(
                seq,
                S,
                vouch_events::ReportDelivered {
                    delivery: "daily-ops".into(),
                    period: "daily".into(),
                    label: label.into(),
                    scope: "installation".into(),
                    target: "email".into(),
                    attempt: 1,
                    digest: "00".repeat(32),
                }
                .into(),
            ));
        }
        assert!(fact_incidents(&f, S).is_empty());
    }

    #[test]
    fn each_clock_step_is_an_alert_of_its_own_identity() {
        let mut f = AlertFacts::default();
        for (seq, at) in [(1, S), (2, 5 * S)] {
            f.apply(&env(
                seq,
                at,
                vouch_events::ClockStepped {
                    previous_unix_ns: at + 60 * S,
                    now_unix_ns: at,
                }
                .into(),
            ));
        }
        let steps: Vec<Incident> = fact_incidents(&f, 6 * S)
            .into_iter()
            .filter(|i| i.rule == "ClockStepped")
            .collect();
        assert_eq!(steps.len(), 2);
        assert_ne!(steps[0].labels, steps[1].labels);
        assert_eq!(steps[0].labels["stepped_at"], rfc3339(S));
    }
}
