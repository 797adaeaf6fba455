//! The actor that evaluates the security center on a timer: it gathers the
//! installation's facts on the blocking pool, evaluates the checks on the
//! read model's state, keeps the latest report for the API and the
//! metrics, and records each check whose status or reason changed as
//! `security.check_changed` (so the log says since when, and the alerter
//! and reports read it from there).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use serde::Serialize;
use vouch_events::{Event, RecordedCheck, SecurityCheckChanged};

use super::checks::{evaluate, Check, SecurityPolicy};
use super::facts::{InstallationFacts, SecurityProbe};
use crate::clock::Clock;
use crate::service::error::ServiceError;
use crate::service::read_model::{Query, ReadModelActor};
use crate::service::store::{Append, EventStore};
use crate::RestartGate;

/// How often the checks are evaluated by default.
pub const SECURITY_EVERY: Duration = Duration::from_secs(300);

/// How soon after a start the first evaluation runs.
const FIRST_AFTER: Duration = Duration::from_secs(5);

/// One evaluation of every check.
#[derive(Clone, Debug, Serialize)]
pub struct SecurityReport {
    /// When it was evaluated (Unix ns).
    pub evaluated_at_unix_ns: i64,
    /// The log's seq it saw.
    pub seq: u64,
    /// The checks, by id.
    pub checks: Vec<Check>,
    /// Since when each check has had its status, as the log recorded it
    /// (Unix ns; by id).
    pub since_unix_ns: BTreeMap<String, i64>,
}

/// The reason recorded for a check that is no longer evaluated.
pub const RETIRED: &str =
    "no longer checked: what it was about is gone (a removed plan, repository or agent, another listener)";

/// The checks of `current` to record: new ones, and those whose status,
/// reason or action differs from what the log last recorded; and each
/// recorded check that is no longer evaluated, retired as `unknown` (so a
/// failed check of a removed plan does not keep its alert open forever).
pub fn changes(recorded: &BTreeMap<String, RecordedCheck>, current: &[Check]) -> Vec<Event> {
    let evaluated: std::collections::BTreeSet<&str> =
        current.iter().map(|c| c.id.as_str()).collect();
    let retired = recorded
        .iter()
        .filter(|(id, r)| {
            let already = r.status == vouch_events::CheckStatus::Unknown && r.reason == RETIRED;
            !evaluated.contains(id.as_str()) && !already
        })
        .map(|(id, r)| {
            SecurityCheckChanged {
                check: id.clone(),
                kind: r.kind.clone(),
                subject: r.subject.clone(),
                status: vouch_events::CheckStatus::Unknown,
                reason: RETIRED.to_owned(),
                action: String::new(),
            }
            .into()
        });
    current
        .iter()
        .filter(|c| {
            recorded.get(&c.id).is_none_or(|r| {
                r.status != c.status || r.reason != c.reason || r.action != c.action
            })
        })
        .map(|c| {
            SecurityCheckChanged {
                check: c.id.clone(),
                kind: c.kind.clone(),
                subject: c.subject.clone(),
                status: c.status,
                reason: c.reason.clone(),
                action: c.action.clone(),
            }
            .into()
        })
        .chain(retired)
        .collect()
}

/// Evaluate now on a state that has seen at least event `min_seq`,
/// record the changes, answer with the report.
#[derive(Message, Default)]
#[rtype(result = "Result<Arc<SecurityReport>, ServiceError>")]
pub(crate) struct EvaluateSecurity {
    pub(crate) min_seq: u64,
}

/// The latest report (none before the first evaluation).
#[derive(Message)]
#[rtype(result = "Option<Arc<SecurityReport>>")]
pub(crate) struct LatestSecurity;

/// The security center's actor.
pub(crate) struct SecurityWatch {
    store: Addr<EventStore>,
    read: Addr<ReadModelActor>,
    clock: Arc<dyn Clock>,
    probe: Option<Arc<dyn SecurityProbe>>,
    every: Option<Duration>,
    policy: SecurityPolicy,
    latest: Option<Arc<SecurityReport>>,
    gate: RestartGate,
}

impl SecurityWatch {
    pub(crate) fn new(
        store: Addr<EventStore>,
        read: Addr<ReadModelActor>,
        clock: Arc<dyn Clock>,
        probe: Option<Arc<dyn SecurityProbe>>,
        every: Option<Duration>,
        policy: SecurityPolicy,
        gate: RestartGate,
    ) -> Self {
        SecurityWatch {
            store,
            read,
            clock,
            probe,
            every,
            policy,
            latest: None,
            gate,
        }
    }
}

impl Actor for SecurityWatch {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.gate.started(ctx);
        if let Some(every) = self.every {
            ctx.run_later(every.min(FIRST_AFTER), move |_, ctx| {
                ctx.address().do_send(EvaluateSecurity::default());
                ctx.run_interval(every, |_, ctx| {
                    ctx.address().do_send(EvaluateSecurity::default())
                });
            });
        }
    }
}

impl Supervised for SecurityWatch {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        let delay = self.gate.restarting();
        tracing::warn!(
            restarts = self.gate.restarts(),
            delay_ms = delay.as_millis() as u64,
            "security watch restarting"
        );
    }
}

impl Handler<LatestSecurity> for SecurityWatch {
    type Result = Option<Arc<SecurityReport>>;

    fn handle(&mut self, _msg: LatestSecurity, _ctx: &mut Self::Context) -> Self::Result {
        self.latest.clone()
    }
}

impl Handler<EvaluateSecurity> for SecurityWatch {
    // One evaluation at a time: two at once would record the same change
    // twice.
    type Result = AtomicResponse<Self, Result<Arc<SecurityReport>, ServiceError>>;

    fn handle(&mut self, msg: EvaluateSecurity, _ctx: &mut Self::Context) -> Self::Result {
        let (store, read, clock, probe, policy) = (
            self.store.clone(),
            self.read.clone(),
            self.clock.clone(),
            self.probe.clone(),
            self.policy.clone(),
        );
        let work = async move {
            let span = tracing::info_span!("security_evaluation");
            let facts: Option<InstallationFacts> = match probe {
                Some(probe) => {
                    let span = span.clone();
                    Some(
                        tokio::task::spawn_blocking(move || {
                            let _enter = span.enter();
                            probe.probe()
                        })
                        .await?,
                    )
                }
                None => None,
            };
            let now = clock.now_unix_ns();
            let (checks, events, seq) = read
                .send(Query::new(msg.min_seq, move |p| {
                    let checks = evaluate(p, facts.as_ref(), now, &policy);
                    let events = changes(&p.security.checks, &checks);
                    (checks, events, p.last_seq)
                }))
                .await??;
            let changed = events.len();
            let mut seq = seq;
            if !events.is_empty() {
                let receipt = store.send(Append(events)).await??;
                seq = receipt.last_seq;
            }
            let since = read
                .send(Query::new(seq, |p| {
                    p.security
                        .checks
                        .iter()
                        .map(|(id, c)| (id.clone(), c.since.unix_ns))
                        .collect::<BTreeMap<_, _>>()
                }))
                .await??;
            let _enter = span.enter();
            let failed = checks
                .iter()
                .filter(|c| c.status == vouch_events::CheckStatus::Failed)
                .count();
            tracing::info!(
                checks = checks.len(),
                failed,
                changed,
                "security center evaluated"
            );
            Ok(Arc::new(SecurityReport {
                evaluated_at_unix_ns: now,
                seq,
                checks,
                since_unix_ns: since,
            }))
        };
        AtomicResponse::new(Box::pin(work.into_actor(self).map(|res, act, _| {
            if let Ok(report) = &res {
                act.latest = Some(report.clone());
            }
            res
        })))
    }
}
