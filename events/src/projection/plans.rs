//! Plans and their protection status.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::event::Event;
use crate::ids::PlanId;
use crate::plan::PlanDefinition;
use crate::projection::jobs::{JobState, JobsProjection};
use crate::projection::points::{PointState, PointsProjection};
use crate::projection::{Inconsistency, Recorded};

/// A plan as the log knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Its id.
    pub id: PlanId,
    /// Its current definition.
    pub definition: PlanDefinition,
    /// When it was created.
    pub created: Recorded,
    /// When it was removed, if it was.
    pub removed: Option<Recorded>,
}

/// Every plan.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlansProjection {
    /// By id.
    pub plans: BTreeMap<PlanId, Plan>,
}

impl PlansProjection {
    pub(crate) fn apply(&mut self, at: Recorded, event: &Event) -> Option<Inconsistency> {
        let bad = |message: String| {
            Some(Inconsistency {
                at,
                event_type: event.event_type().to_owned(),
                point: None,
                message,
            })
        };
        match event {
            Event::PlanCreated(e) => {
                if self.plans.get(&e.plan).is_some_and(|p| p.removed.is_none()) {
                    return bad(format!("plan {} created twice", e.plan));
                }
                self.plans.insert(
                    e.plan.clone(),
                    Plan {
                        id: e.plan.clone(),
                        definition: e.definition.clone(),
                        created: at,
                        removed: None,
                    },
                );
                None
            }
            Event::PlanChanged(e) => match self.plans.get_mut(&e.plan) {
                Some(p) if p.removed.is_none() => {
                    p.definition = e.definition.clone();
                    None
                }
                _ => bad(format!("plan {} changed but does not exist", e.plan)),
            },
            Event::PlanRemoved(e) => match self.plans.get_mut(&e.plan) {
                Some(p) if p.removed.is_none() => {
                    p.removed = Some(at);
                    None
                }
                _ => bad(format!("plan {} removed but does not exist", e.plan)),
            },
            _ => None,
        }
    }
}

/// How well a plan is protected. Ordered from weakest to strongest, so a
/// rollup is the minimum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Protection {
    /// Nothing usable inside the RPO, or the last backup job failed.
    Unprotected,
    /// Not enough history to say (never counted as good).
    Unknown,
    /// Only verified or unverified points (or stale evidence) inside the RPO.
    AtRisk,
    /// A recoverable point inside the RPO with fresh restore evidence.
    Protected,
}

impl Protection {
    /// The name used in the API (`at-risk`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            Protection::Unprotected => "unprotected",
            Protection::Unknown => "unknown",
            Protection::AtRisk => "at-risk",
            Protection::Protected => "protected",
        }
    }
}

impl fmt::Display for Protection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A plan's protection and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanProtection {
    /// The status.
    pub status: Protection,
    /// Why, for humans.
    pub reason: String,
}

fn verdict(status: Protection, reason: impl Into<String>) -> PlanProtection {
    PlanProtection {
        status,
        reason: reason.into(),
    }
}

/// The protection of `plan` at `now` (pure: the caller passes the clock's
/// time). See the rules in `docs/events.md`.
pub fn plan_protection(
    plans: &PlansProjection,
    points: &PointsProjection,
    jobs: &JobsProjection,
    plan: &PlanId,
    now_unix_ns: i64,
) -> PlanProtection {
    let Some(p) = plans.plans.get(plan) else {
        return verdict(Protection::Unknown, "no such plan in the log");
    };
    if p.removed.is_some() {
        return verdict(Protection::Unknown, "plan was removed");
    }
    if let Some(last) = jobs.last_ended_backup(plan) {
        if matches!(last.state, JobState::Failed | JobState::Abandoned) {
            return verdict(
                Protection::Unprotected,
                format!(
                    "last backup job {} {} and no backup job of the plan succeeded since",
                    last.job, last.state
                ),
            );
        }
    }
    let rpo_ns = i64::try_from(p.definition.rpo.as_nanos()).unwrap_or(i64::MAX);
    let window_start = now_unix_ns.saturating_sub(rpo_ns);
    let max_age_ns =
        i64::try_from(p.definition.restore_test.max_evidence_age.as_nanos()).unwrap_or(i64::MAX);
    let evidence_start = now_unix_ns.saturating_sub(max_age_ns);
    let in_window: Vec<_> = points
        .of_plan(plan)
        // The snapshot's time comes from the client's clock: a time after
        // the server recorded the point is clamped to that record, so a
        // future-dated point cannot stay inside the RPO forever.
        .filter(|pt| pt.snapshot_time_unix_ns.min(pt.since.unix_ns) >= window_start)
        .collect();
    let fresh_recoverable = in_window.iter().any(|pt| {
        pt.state == PointState::Recoverable
            && pt
                .last_restore_test
                .as_ref()
                .is_some_and(|r| r.at.unix_ns >= evidence_start)
    });
    if fresh_recoverable {
        return verdict(
            Protection::Protected,
            "a recoverable point with fresh restore evidence is inside the RPO",
        );
    }
    let usable = in_window.iter().any(|pt| {
        matches!(
            pt.state,
            PointState::Recoverable | PointState::Verified | PointState::Unverified
        )
    });
    if usable {
        return verdict(
            Protection::AtRisk,
            "points inside the RPO are not proven restorable (or the proof is stale)",
        );
    }
    if !in_window.is_empty() {
        return verdict(Protection::Unprotected, "no usable point inside the RPO");
    }
    if p.created.unix_ns > window_start {
        return verdict(
            Protection::Unknown,
            "plan is younger than its RPO and has no point yet",
        );
    }
    verdict(Protection::Unprotected, "no point inside the RPO")
}

/// A rollup is as weak as its weakest member; an empty rollup is unknown.
pub fn rollup(statuses: impl IntoIterator<Item = Protection>) -> Protection {
    statuses.into_iter().min().unwrap_or(Protection::Unknown)
}
