//! Projections: pure folds from events to state. No I/O.
//!
//! [`Projections`] holds them all and applies envelopes in order; it can be
//! snapshotted with the seq it reflects ([`Projections::to_snapshot`]) so a
//! restart replays only the tail.

mod agents;
mod alerts;
mod jobs;
mod plans;
mod points;
mod read_back;
mod security;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_copies;
#[cfg(test)]
mod tests_findings;

use std::collections::BTreeMap;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

pub use agents::{Agent, AgentsProjection};
pub use alerts::{Alert, AlertsProjection, Delivery};
pub use jobs::{BackupOutcome, Job, JobError, JobState, JobsProjection};
pub use plans::{
    plan_protection, rollup, Plan, PlanProtection, PlansProjection, Protection, CLOCK_TOLERANCE_NS,
};
pub use points::{
    Cap, CopyFacts, Point, PointOrigin, PointState, PointsProjection, RestoreOutcome,
    VerificationOutcome,
};
pub use read_back::{ReadBackProjection, RepositoryReadBack, SliceDamage};
pub use security::{HeadExport, KeyExport, RecordedCheck, ScrubSeen, SecurityProjection};

use crate::codec::Envelope;
use crate::error::{EventError, Result};
use crate::event::Event;
use crate::format::EventHash;
use crate::ids::{JobId, PlanId, RepositoryId, SnapshotId};

/// Where in the log something was recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Recorded {
    /// The event's seq.
    pub seq: u64,
    /// The event's recorded time.
    pub unix_ns: i64,
}

/// An event that did not fit the state it met. It changed nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inconsistency {
    /// The event.
    pub at: Recorded,
    /// Its type.
    pub event_type: String,
    /// The point it was about, if any.
    pub point: Option<SnapshotId>,
    /// What did not fit.
    pub message: String,
}

/// An event this build could not read, as shown to users.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnknownSeen {
    /// Where.
    pub at: Recorded,
    /// Its type.
    pub event_type: String,
    /// Its version.
    pub schema_version: u16,
    /// Whether its type is of a family that reports on recovery points.
    pub about_points: bool,
    /// The point it names, if that could be told (see `docs/events.md`).
    pub point: Option<SnapshotId>,
    /// Which plans it keeps from being better than `unknown`.
    pub caps: UnknownScope,
}

/// The plans an unreadable event may be about, and so keeps at `unknown`
/// at best (unknown is never good, in every family).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnknownScope {
    /// None: its family does not feed protection (`alert.*`, `agent.*`,
    /// `service.*`), or it names a point (the point itself is capped) or a
    /// job without a plan.
    Nothing,
    /// One plan (named by the event, or the plan of the job it names).
    Plan(PlanId),
    /// The plans that write to this repository.
    Repository(RepositoryId),
    /// Every plan: it could be about any.
    All,
}

/// Families whose events never bear on a point's state or a plan's
/// protection.
const NEUTRAL_FAMILIES: &[&str] = &[
    "alert", "agent", "service", "audit", "security", "key", "log", "report",
];

/// The first element of a msgpack array payload if it is a string.
fn leading_str(payload: &[u8]) -> Option<&str> {
    let rest = match *payload.first()? {
        0x91..=0x9f => payload.get(1..)?,
        0xdc => payload.get(3..)?,
        0xdd => payload.get(5..)?,
        _ => return None,
    };
    let (len, start): (usize, usize) = match *rest.first()? {
        b @ 0xa0..=0xbf => (usize::from(b & 0x1f), 1),
        0xd9 => (usize::from(*rest.get(1)?), 2),
        0xda => (
            usize::from(u16::from_be_bytes([*rest.get(1)?, *rest.get(2)?])),
            3,
        ),
        _ => return None,
    };
    std::str::from_utf8(rest.get(start..start.checked_add(len)?)?).ok()
}

/// Version of the snapshot encoding; a snapshot of another version is
/// ignored and the projections are rebuilt from the log.
/// 2: jobs keep the latest ended backup outcome of each plan (D2).
/// 3: the rolling read-back window ([`ReadBackProjection`]).
/// 4: caps, open failures and coverage on points, plan epochs, unknown
///    scopes, the rules tag ([`PROJECTION_RULES`]).
/// 5: the newest recorded time (`latest_recorded_unix_ns`, the clock cap).
/// 6: copies (`copy.committed`: `Point::copy`, `PointOrigin::Copied`).
/// 7: change figures and anomaly paths on points (`Point::changes`,
///    `Point::anomaly_paths`).
/// 8: the seq each running check started at (a check cannot clear a
///    suspicion recorded while it was reading).
pub const PROJECTION_SNAPSHOT_VERSION: u16 = 8;

/// A digest of the projection's source code, computed by the build
/// script: a snapshot folded by other rules is not trusted (its derived
/// state could be what an older, wrong rule made of the facts) and the
/// projections are rebuilt from the log. No one has to remember to bump it.
pub const PROJECTION_RULES: &str = env!("VOUCH_PROJECTION_RULES");

/// Inconsistencies kept (the newest); older ones are counted only.
pub const MAX_INCONSISTENCIES: usize = 1000;

/// Every projection, folded together.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Projections {
    /// The seq of the last event applied (0: none).
    pub last_seq: u64,
    /// The hash of the last envelope applied (zero if applied without an
    /// envelope): ties a snapshot to the exact log it was folded from.
    pub last_hash: EventHash,
    /// Recovery points.
    pub points: PointsProjection,
    /// Plans.
    pub plans: PlansProjection,
    /// Jobs.
    pub jobs: JobsProjection,
    /// Agents.
    pub agents: AgentsProjection,
    /// Alerts.
    pub alerts: AlertsProjection,
    /// The rolling read-back of every repository's packs.
    pub read_back: ReadBackProjection,
    /// The security center's recorded checks, key exports, head exports
    /// and scrubs.
    #[serde(default)]
    pub security: SecurityProjection,
    /// Events that did not fit (the newest [`MAX_INCONSISTENCIES`]).
    pub inconsistencies: Vec<Inconsistency>,
    /// How many events did not fit, in all.
    pub inconsistencies_total: u64,
    /// Events this build could not read.
    pub unknown_events: Vec<UnknownSeen>,
    /// The newest `recorded_unix_ns` folded. A clock that reads earlier
    /// than this by more than [`CLOCK_TOLERANCE_NS`] stepped back (M8):
    /// every plan is at most `unknown` until it catches up. A new fact can
    /// only move it forward, so the cap is monotone.
    #[serde(default)]
    pub latest_recorded_unix_ns: i64,
    /// The seqs of the events naming each point ([`Event::point`]), in
    /// order: a point's history is read from these, never by scanning the
    /// whole log. Eight bytes per such event.
    #[serde(default)]
    pub point_history: BTreeMap<SnapshotId, Vec<u64>>,
}

impl Projections {
    /// Empty state (before the first event).
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds `envelopes` from empty state.
    pub fn fold<'a>(envelopes: impl IntoIterator<Item = &'a Envelope>) -> Self {
        let mut p = Self::new();
        for e in envelopes {
            p.apply(e);
        }
        p
    }

    /// Applies one envelope. Envelopes at or below `last_seq` are ignored
    /// (so replaying an overlap is harmless).
    pub fn apply(&mut self, env: &Envelope) {
        if env.seq > self.last_seq {
            self.last_hash = env.hash;
        }
        self.apply_event(
            Recorded {
                seq: env.seq,
                unix_ns: env.recorded_unix_ns,
            },
            &env.event,
        );
    }

    /// Applies one event recorded at `at`.
    pub fn apply_event(&mut self, at: Recorded, event: &Event) {
        if at.seq <= self.last_seq {
            return;
        }
        self.last_seq = at.seq;
        self.latest_recorded_unix_ns = self.latest_recorded_unix_ns.max(at.unix_ns);
        if let Some(point) = event.point() {
            self.point_history.entry(point).or_default().push(at.seq);
        }
        if let Event::Unknown(u) = event {
            let (about_points, point) = self.points.apply_unknown(at, u);
            let caps = self.scope_of_unknown(u, about_points, point);
            self.unknown_events.push(UnknownSeen {
                at,
                event_type: u.event_type.clone(),
                schema_version: u.schema_version,
                about_points,
                point,
                caps,
            });
            return;
        }
        // Job events are read by several projections; the jobs projection
        // decides whether one fits. One that does not changes nothing else
        // (no lease ends, no job is tied to a point).
        let job_event = matches!(
            event,
            Event::JobScheduled(_)
                | Event::JobStarted(_)
                | Event::JobProgress(_)
                | Event::JobFinished(_)
                | Event::JobFailed(_)
                | Event::JobAbandoned(_)
        );
        if job_event {
            if let Some(inc) = self.jobs.apply(at, event) {
                self.inconsistent(inc);
                return;
            }
        }
        let found = [
            self.points.apply(at, event),
            self.plans.apply(at, event),
            if job_event {
                None // applied above
            } else {
                self.jobs.apply(at, event)
            },
            self.agents.apply(at, event),
            self.alerts.apply(at, event),
            self.read_back.apply(at, event),
            self.security.apply(at, event),
        ];
        for inc in found.into_iter().flatten() {
            self.inconsistent(inc);
        }
    }

    fn inconsistent(&mut self, inc: Inconsistency) {
        tracing::debug!(seq = inc.at.seq, event_type = %inc.event_type, message = %inc.message, "inconsistent event");
        self.inconsistencies_total = self.inconsistencies_total.saturating_add(1);
        if self.inconsistencies.len() >= MAX_INCONSISTENCIES {
            self.inconsistencies.remove(0);
        }
        self.inconsistencies.push(inc);
    }

    /// Which plans an unreadable event keeps at `unknown` (M6): the plan it
    /// names or its job's, the plans of the repository it names, or all
    /// when it cannot be told.
    fn scope_of_unknown(
        &self,
        u: &crate::event::UnknownEvent,
        about_points: bool,
        point: Option<SnapshotId>,
    ) -> UnknownScope {
        let family = u.event_type.split('.').next().unwrap_or("");
        if about_points {
            // The point is capped itself; one that cannot be told might be
            // any plan's.
            return if point.is_some() {
                UnknownScope::Nothing
            } else {
                UnknownScope::All
            };
        }
        if NEUTRAL_FAMILIES.contains(&family) {
            return UnknownScope::Nothing;
        }
        let job_scope =
            |job: Option<&str>| match job.and_then(|j| self.jobs.jobs.get(&JobId::new(j))) {
                Some(job) => match &job.plan {
                    Some(plan) => UnknownScope::Plan(plan.clone()),
                    None => UnknownScope::Nothing,
                },
                None => UnknownScope::All,
            };
        match family {
            "job" => job_scope(leading_str(&u.payload)),
            // `backup.*` payloads lead with an optional job: `[job?, ...]`
            // (nil when none, which `leading_str` reads as no string).
            "backup" | "copy" => job_scope(leading_str(&u.payload)),
            // `hook.*` payloads lead with their backup job.
            "hook" => job_scope(leading_str(&u.payload)),
            "plan" => match leading_str(&u.payload) {
                Some(plan) => UnknownScope::Plan(PlanId::new(plan)),
                None => UnknownScope::All,
            },
            "repository" => match leading_str(&u.payload) {
                Some(repo) => UnknownScope::Repository(RepositoryId::new(repo)),
                None => UnknownScope::All,
            },
            _ => UnknownScope::All,
        }
    }

    /// The protection of one plan at `now`.
    ///
    /// An unreadable event that may be about this plan (see
    /// [`UnknownScope`]) keeps it from being better than `unknown`.
    pub fn plan_protection(&self, plan: &PlanId, now_unix_ns: i64) -> PlanProtection {
        let verdict = plan_protection(&self.plans, &self.points, &self.jobs, plan, now_unix_ns);
        if verdict.status <= Protection::Unknown {
            return verdict;
        }
        // A clock that stepped back makes old evidence look fresh: nothing
        // is trusted while the log holds a record dated after now. (A cap,
        // not a verdict: it never lifts an `unprotected` plan, and a new
        // fact can only move the newest record forward.)
        if self.latest_recorded_unix_ns > now_unix_ns.saturating_add(CLOCK_TOLERANCE_NS) {
            return PlanProtection {
                status: Protection::Unknown,
                reason: "the log holds events recorded after the clock's now: the wall clock \
                         stepped back, and times and freshness are suspect until it catches up"
                    .into(),
            };
        }
        let repository = self.plans.plans.get(plan).map(|p| &p.definition.repository);
        let capping = self.unknown_events.iter().find(|u| match &u.caps {
            UnknownScope::Nothing => false,
            UnknownScope::Plan(p) => p == plan,
            UnknownScope::Repository(r) => Some(r) == repository,
            UnknownScope::All => true,
        });
        match capping {
            Some(u) => PlanProtection {
                status: Protection::Unknown,
                reason: format!(
                    "{} (v{}) at seq {} may be about this plan but this build cannot read it",
                    u.event_type, u.schema_version, u.at.seq
                ),
            },
            None => verdict,
        }
    }

    /// The rollup over every plan not removed (unknown when there is none).
    pub fn overall_protection(&self, now_unix_ns: i64) -> Protection {
        rollup(
            self.plans
                .plans
                .values()
                .filter(|p| p.removed.is_none())
                .map(|p| self.plan_protection(&p.id, now_unix_ns).status),
        )
    }

    /// Encodes a snapshot of the state (version-tagged).
    pub fn to_snapshot(&self) -> Result<Vec<u8>> {
        rmp_serde::to_vec(&(PROJECTION_SNAPSHOT_VERSION, PROJECTION_RULES, self)).map_err(|e| {
            EventError::Encode {
                what: "projection snapshot".into(),
                message: e.to_string(),
            }
        })
    }

    /// Decodes a snapshot; an error (including another version) means:
    /// rebuild from the log.
    pub fn from_snapshot(bytes: &[u8]) -> Result<Self> {
        let decode_error = |message: String| EventError::Decode {
            what: "projection snapshot".into(),
            message,
        };
        // The version first, alone: a snapshot of another version may not
        // decode as this one's shape.
        let (version,): (u16,) = match rmp_serde::from_slice::<(u16, IgnoredAny, IgnoredAny)>(bytes)
        {
            Ok((v, _, _)) => (v,),
            Err(_) => match rmp_serde::from_slice::<(u16, IgnoredAny)>(bytes) {
                Ok((v, _)) => (v,),
                Err(e) => return Err(decode_error(e.to_string())),
            },
        };
        if version != PROJECTION_SNAPSHOT_VERSION {
            return Err(decode_error(format!(
                "version {version}, this build reads {PROJECTION_SNAPSHOT_VERSION}"
            )));
        }
        let (_, rules, mut p): (u16, String, Projections) =
            rmp_serde::from_slice(bytes).map_err(|e| decode_error(e.to_string()))?;
        if rules != PROJECTION_RULES {
            return Err(decode_error(format!(
                "folded by rules {rules}, this build's are {PROJECTION_RULES}"
            )));
        }
        p.points.rebuild_index();
        // Derived state is recomputed from the facts, never trusted.
        p.points.rederive();
        Ok(p)
    }
}
