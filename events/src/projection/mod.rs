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

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

pub use agents::{Agent, AgentsProjection};
pub use alerts::{Alert, AlertsProjection, Delivery};
pub use jobs::{BackupOutcome, Job, JobError, JobState, JobsProjection};
pub use plans::{plan_protection, rollup, Plan, PlanProtection, PlansProjection, Protection};
pub use points::{
    Point, PointOrigin, PointState, PointsProjection, RestoreOutcome, VerificationOutcome,
};
pub use read_back::{ReadBackProjection, RepositoryReadBack, SliceDamage};

use crate::codec::Envelope;
use crate::error::{EventError, Result};
use crate::event::Event;
use crate::format::EventHash;
use crate::ids::{PlanId, SnapshotId};

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
}

/// Version of the snapshot encoding; a snapshot of another version is
/// ignored and the projections are rebuilt from the log.
/// 2: jobs keep the latest ended backup outcome of each plan (D2).
/// 3: the rolling read-back window ([`ReadBackProjection`]).
pub const PROJECTION_SNAPSHOT_VERSION: u16 = 3;

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
    /// Events that did not fit.
    pub inconsistencies: Vec<Inconsistency>,
    /// Events this build could not read.
    pub unknown_events: Vec<UnknownSeen>,
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
        if let Event::Unknown(u) = event {
            let (about_points, point) = self.points.apply_unknown(at, u);
            self.unknown_events.push(UnknownSeen {
                at,
                event_type: u.event_type.clone(),
                schema_version: u.schema_version,
                about_points,
                point,
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
                tracing::debug!(seq = at.seq, event_type = %inc.event_type, message = %inc.message, "inconsistent event");
                self.inconsistencies.push(inc);
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
        ];
        for inc in found.into_iter().flatten() {
            tracing::debug!(seq = at.seq, event_type = %inc.event_type, message = %inc.message, "inconsistent event");
            self.inconsistencies.push(inc);
        }
    }

    /// The protection of one plan at `now`.
    ///
    /// An unreadable event about points that names no point the log knows
    /// might be about any plan's: then no plan is better than `unknown`.
    pub fn plan_protection(&self, plan: &PlanId, now_unix_ns: i64) -> PlanProtection {
        let verdict = plan_protection(&self.plans, &self.points, &self.jobs, plan, now_unix_ns);
        let unattributed = self
            .unknown_events
            .iter()
            .find(|u| u.about_points && u.point.is_none());
        match unattributed {
            Some(u) if verdict.status > Protection::Unknown => PlanProtection {
                status: Protection::Unknown,
                reason: format!(
                    "{} (v{}) at seq {} is about a recovery point but this build cannot read it",
                    u.event_type, u.schema_version, u.at.seq
                ),
            },
            _ => verdict,
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
        rmp_serde::to_vec(&(PROJECTION_SNAPSHOT_VERSION, self)).map_err(|e| EventError::Encode {
            what: "projection snapshot".into(),
            message: e.to_string(),
        })
    }

    /// Decodes a snapshot; an error (including another version) means:
    /// rebuild from the log.
    pub fn from_snapshot(bytes: &[u8]) -> Result<Self> {
        let (version, p): (u16, Projections) =
            rmp_serde::from_slice(bytes).map_err(|e| EventError::Decode {
                what: "projection snapshot".into(),
                message: e.to_string(),
            })?;
        if version != PROJECTION_SNAPSHOT_VERSION {
            return Err(EventError::Decode {
                what: "projection snapshot".into(),
                message: format!(
                    "version {version}, this build reads {PROJECTION_SNAPSHOT_VERSION}"
                ),
            });
        }
        let mut p = p;
        p.points.rebuild_index();
        Ok(p)
    }
}
