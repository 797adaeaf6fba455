//! Plans and their protection status.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::event::Event;
use crate::ids::PlanId;
use crate::plan::{PlanDefinition, ReplicaRequirement};
use crate::projection::jobs::{JobState, JobsProjection};
use crate::projection::points::{Point, PointState, PointsProjection};
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
    /// Since when its definition protects what it protects now: its
    /// creation, or the latest change of its source or repository. Only
    /// points recorded after it count for the plan (older ones are of
    /// another source, or of another plan that had the same id).
    pub epoch: Recorded,
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
                        epoch: at,
                    },
                );
                None
            }
            Event::PlanChanged(e) => match self.plans.get_mut(&e.plan) {
                Some(p) if p.removed.is_none() => {
                    if p.definition.source != e.definition.source
                        || p.definition.repository != e.definition.repository
                    {
                        p.epoch = at;
                    }
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

/// How far in the future (after `now`) the log's newest recorded time may
/// lie before it is taken for a clock that stepped back: evidence dated
/// after now proves nothing about now.
pub const CLOCK_TOLERANCE_NS: i64 = 5 * 60 * 1_000_000_000;

/// The protection of `plan` at `now` (pure: the caller passes the clock's
/// time), by its plan, points and jobs alone. See the rules in
/// `docs/events.md`. The caps that read the whole log — a clock that
/// stepped back (M8) and unreadable events (M6) — are applied by
/// [`Projections::plan_protection`](crate::Projections::plan_protection),
/// which is what everything outside this module calls.
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
    let ns = |d: std::time::Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    let window_start = now_unix_ns.saturating_sub(ns(p.definition.rpo));
    let evidence_start = now_unix_ns.saturating_sub(ns(p.definition.restore_test.max_evidence_age));
    // Points of the plan's current definition only: recorded after its
    // creation and after the latest change of its source or repository.
    let current: Vec<_> = points
        .of_plan(plan)
        .filter(|pt| pt.since.seq > p.epoch.seq)
        .collect();
    let in_window: Vec<_> = current
        .iter()
        // The snapshot's time comes from the client's clock: a time after
        // the server recorded the point is clamped to that record, so a
        // future-dated point cannot stay inside the RPO forever.
        .filter(|pt| pt.snapshot_time_unix_ns.min(pt.since.unix_ns) >= window_start)
        .copied()
        .collect();
    // The newest point says what the source looks like now: empty means
    // an unmounted share or a wiped directory, whatever older points say.
    // (Forgotten or vanished, it still said what the source was then.)
    let newest = current.iter().max_by_key(|pt| pt.since.seq);
    let empty_newest = newest.filter(|pt| pt.is_empty() && pt.since.unix_ns >= window_start);
    let found = points_verdict(
        p,
        &current,
        &in_window,
        now_unix_ns,
        evidence_start,
        window_start,
    );
    let found = match empty_newest {
        Some(newest) if found.status >= Protection::AtRisk => verdict(
            Protection::AtRisk,
            format!(
                "the newest point {} is empty: the source came back empty (is it mounted?)",
                newest.id.short()
            ),
        ),
        _ => found,
    };
    if found.status < Protection::Protected {
        return found;
    }
    match missing_copy(p, points, now_unix_ns, window_start, evidence_start) {
        Some(why) => verdict(Protection::AtRisk, why),
        None => found,
    }
}

/// What the plan's replica policy requires for `protected` and its copies
/// lack (none: nothing is required, or a copy meets it): a copy in the
/// replica repository, recorded after the plan's epoch, taken within the
/// RPO, `recoverable` with restore evidence of its own within
/// `max_evidence_age`; for `ImmutableOffHost` also off this host and held
/// by a lock its storage enforces, in force now.
fn missing_copy(
    p: &Plan,
    points: &PointsProjection,
    now_unix_ns: i64,
    window_start: i64,
    evidence_start: i64,
) -> Option<String> {
    let replica = p.definition.replica.as_ref()?;
    let immutable = match replica.require {
        ReplicaRequirement::Nothing => return None,
        ReplicaRequirement::Proven => false,
        ReplicaRequirement::ImmutableOffHost => true,
    };
    let candidates: Vec<&Point> = points
        .copies_of_plan(&p.id)
        .filter(|pt| pt.since.seq > p.epoch.seq && pt.repository == replica.repository)
        .filter(|pt| pt.snapshot_time_unix_ns.min(pt.since.unix_ns) >= window_start)
        .collect();
    let proven = |pt: &&&Point| {
        pt.state == PointState::Recoverable
            && pt
                .last_restore_test
                .as_ref()
                .is_some_and(|r| r.at.unix_ns >= evidence_start)
    };
    let repo = replica.repository.as_str();
    let Some(_) = candidates.iter().find(proven) else {
        return Some(if candidates.is_empty() {
            format!("the plan requires a proven copy in {repo} inside the RPO, and it has no copy there inside the RPO")
        } else {
            format!("the plan requires a proven copy in {repo} inside the RPO: its copies there are not proven restorable (or the proof is stale)")
        });
    };
    if !immutable {
        return None;
    }
    let fit = candidates
        .iter()
        .filter(proven)
        .any(|pt| pt.copy.as_ref().is_some_and(|c| c.off_host) && pt.immutable_at(now_unix_ns));
    if fit {
        return None;
    }
    let why = if candidates
        .iter()
        .filter(proven)
        .all(|pt| !pt.copy.as_ref().is_some_and(|c| c.off_host))
    {
        "is on this host"
    } else {
        "is not locked by its storage now (no lock in force, or locks enforced only by Vouch)"
    };
    Some(format!(
        "the plan requires an immutable off-host copy in {repo}: its proven copy inside the RPO {why}"
    ))
}

/// What the plan's points of its current definition say.
fn points_verdict(
    p: &Plan,
    current: &[&Point],
    in_window: &[&Point],
    now_unix_ns: i64,
    evidence_start: i64,
    window_start: i64,
) -> PlanProtection {
    let ns = |d: std::time::Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    let fresh_recoverable: Vec<_> = in_window
        .iter()
        .filter(|pt| {
            pt.state == PointState::Recoverable
                && pt
                    .last_restore_test
                    .as_ref()
                    .is_some_and(|r| r.at.unix_ns >= evidence_start)
        })
        .collect();
    if !fresh_recoverable.is_empty() {
        // The proof policy: a complete restore test within `full_every`.
        let Some(full_every) = p.definition.restore_test.full_every else {
            return verdict(
                Protection::Protected,
                "a recoverable point with fresh restore evidence is inside the RPO \
                 (the plan accepts sampled restore tests)",
            );
        };
        let full_start = now_unix_ns.saturating_sub(ns(full_every));
        let complete = current.iter().any(|pt| {
            pt.state == PointState::Recoverable
                && pt
                    .last_complete_restore
                    .is_some_and(|at| at.unix_ns >= full_start)
        });
        if complete {
            return verdict(
                Protection::Protected,
                "a recoverable point with fresh restore evidence is inside the RPO, \
                 and a complete restore test passed within the proof policy's period",
            );
        }
        return verdict(
            Protection::AtRisk,
            "points inside the RPO are proven only by sampled restore tests: \
             no complete restore test passed within the proof policy's period",
        );
    }
    let usable = in_window.iter().any(|pt| pt.state.is_usable());
    if usable {
        return verdict(
            Protection::AtRisk,
            "points inside the RPO are not proven restorable (or the proof is stale)",
        );
    }
    if in_window.iter().any(|pt| pt.state == PointState::Unknown) {
        return verdict(
            Protection::Unknown,
            "points inside the RPO are in an unknown state (an unreadable event, \
             a check without a verdict, or read-back damage)",
        );
    }
    if !in_window.is_empty() {
        return verdict(Protection::Unprotected, "no usable point inside the RPO");
    }
    if p.epoch != p.created {
        return verdict(
            Protection::Unprotected,
            "no point of the plan's current source or repository inside the RPO",
        );
    }
    // The grace of a new plan; a changed source gets none (its old points
    // stopped counting: that must never make the plan look better).
    if p.epoch == p.created && p.created.unix_ns > window_start {
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
