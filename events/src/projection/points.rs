//! The recovery-point lifecycle: a pure fold from events to the state of
//! every point. The transition table is in `docs/events.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::event::{
    AnomalySignal, BackupSummary, ChangeFigures, Event, LockEnforcement, RestoreEvidence,
    UnknownEvent,
};
use crate::ids::{JobId, PlanId, RepositoryId, SnapshotId};
use crate::plan::VerifyDepth;
use crate::projection::{Inconsistency, Recorded};

/// The state of a recovery point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PointState {
    /// No evidence: never committed in this log (found in a repository, or
    /// not known at all).
    Unknown,
    /// Committed; integrity not checked.
    Unverified,
    /// The latest verification passed.
    Verified,
    /// A restore test passed after a passed verification, nothing failed
    /// since.
    Recoverable,
    /// The latest verification failed.
    Corrupt,
    /// The latest restore test failed.
    Unrecoverable,
    /// Forgotten by retention.
    Expired,
    /// Its manifest is gone from the repository although retention did not
    /// forget it: it can never count again.
    Vanished,
}

impl PointState {
    /// The lower-case name used in the API and the docs.
    pub fn as_str(&self) -> &'static str {
        match self {
            PointState::Unknown => "unknown",
            PointState::Unverified => "unverified",
            PointState::Verified => "verified",
            PointState::Recoverable => "recoverable",
            PointState::Corrupt => "corrupt",
            PointState::Unrecoverable => "unrecoverable",
            PointState::Expired => "expired",
            PointState::Vanished => "vanished",
        }
    }
}

impl PointState {
    /// Every state, in the order of the API's documentation.
    pub const ALL: [PointState; 8] = [
        PointState::Unknown,
        PointState::Unverified,
        PointState::Verified,
        PointState::Recoverable,
        PointState::Corrupt,
        PointState::Unrecoverable,
        PointState::Expired,
        PointState::Vanished,
    ];

    /// How much a state vouches for a point, for the monotonicity rule (a
    /// negative fact never raises it): 0 for states that count for nothing
    /// (expired, vanished, corrupt, unrecoverable), then unknown, unverified,
    /// verified, recoverable.
    pub fn rank(&self) -> u8 {
        match self {
            PointState::Expired
            | PointState::Vanished
            | PointState::Corrupt
            | PointState::Unrecoverable => 0,
            PointState::Unknown => 1,
            PointState::Unverified => 2,
            PointState::Verified => 3,
            PointState::Recoverable => 4,
        }
    }

    /// Whether a point in this state may count towards a plan's protection.
    pub fn is_usable(&self) -> bool {
        matches!(
            self,
            PointState::Recoverable | PointState::Verified | PointState::Unverified
        )
    }
}

impl fmt::Display for PointState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the log learned about a point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PointOrigin {
    /// A `backup.committed` event.
    Committed,
    /// A `point.discovered` event (no history).
    Discovered,
    /// A `copy.committed` event: a copy of another point, in another
    /// repository (a plan's replica). It is checked on its own, like a
    /// committed point.
    Copied,
}

/// Where a copy came from and how it is kept (`copy.committed`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyFacts {
    /// The point it is a copy of.
    pub source: SnapshotId,
    /// Its repository's storage is off this host.
    pub off_host: bool,
    /// Who enforces locks in its repository.
    pub locks_enforced_by: LockEnforcement,
}

/// The outcome of the latest verification.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerificationOutcome {
    /// When it was recorded.
    pub at: Recorded,
    /// Whether it passed.
    pub passed: bool,
    /// How deep it read.
    pub depth: VerifyDepth,
    /// Bytes read back.
    pub bytes_read: u64,
    /// What is damaged (empty when passed).
    pub damaged: Vec<String>,
}

/// The outcome of the latest restore test.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreOutcome {
    /// When it was recorded.
    pub at: Recorded,
    /// Whether it passed.
    pub passed: bool,
    /// The evidence.
    pub evidence: RestoreEvidence,
    /// Why it failed (none when passed).
    pub reason: Option<String>,
    /// Whether the latest verification had passed when this test passed.
    pub after_passed_verification: bool,
}

impl RestoreOutcome {
    /// Whether this is a pass that proves something: it restored and
    /// compared at least one file.
    pub fn proves(&self) -> bool {
        self.passed && !self.evidence.is_vacuous()
    }

    /// Whether it restored and compared every file of the point.
    pub fn is_complete(&self) -> bool {
        self.proves() && self.evidence.complete
    }
}

/// A fact that keeps a point from counting as good until a later check
/// clears it (see `docs/events.md`, "Caps").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cap {
    /// When it was recorded.
    pub at: Recorded,
    /// What happened, for humans.
    pub reason: String,
}

/// Everything known about one recovery point.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    /// Its id.
    pub id: SnapshotId,
    /// Its repository.
    pub repository: RepositoryId,
    /// Its plan, if any.
    pub plan: Option<PlanId>,
    /// The snapshot's own time.
    pub snapshot_time_unix_ns: i64,
    /// How the log learned about it.
    pub origin: PointOrigin,
    /// When that was recorded.
    pub since: Recorded,
    /// Backup figures (committed points).
    pub summary: Option<BackupSummary>,
    /// What it is a copy of, for a copy (`PointOrigin::Copied`).
    pub copy: Option<CopyFacts>,
    /// The latest verification.
    pub last_verification: Option<VerificationOutcome>,
    /// The latest restore test.
    pub last_restore_test: Option<RestoreOutcome>,
    /// Locked against deletion until then.
    pub locked_until_unix_ns: Option<i64>,
    /// What changed since the point it was compared with (committed
    /// points of schema v2 that had a parent).
    pub changes: Option<ChangeFigures>,
    /// Signals of the ransomware heuristic.
    pub anomalies: Vec<AnomalySignal>,
    /// The paths that weighed most in its anomalies.
    pub anomaly_paths: Vec<String>,
    /// The latest failed check (verification or restore test): restore
    /// evidence older than this does not make the point recoverable.
    pub last_failed_check: Option<Recorded>,
    /// Forgotten: when, and by which rule.
    pub expired: Option<(Recorded, String)>,
    /// Events naming this point that this build cannot read (a newer
    /// version, e.g. of `verification.failed`): they may say the point is
    /// damaged, so while there is one the point is never better than
    /// `unknown`.
    pub unreadable: Vec<Recorded>,
    /// A verification that failed and was not cleared since by a pass at
    /// the same depth or deeper (a shallow pass never clears a deep
    /// failure).
    pub open_verification_failure: Option<VerificationOutcome>,
    /// A restore test that failed and was not cleared since by a complete
    /// restore test that passed (a sample may miss what failed).
    pub open_restore_failure: Option<RestoreOutcome>,
    /// A check job on this point started and ended without a verdict
    /// (failed or abandoned): nothing is known until a later check passes.
    pub unproven: Option<Cap>,
    /// A read-back found damage in a pack this point references (or in its
    /// repository, when the packs' points could not be told): nothing is
    /// known until a verification that reads all data, or a complete
    /// restore test, passes after it.
    pub suspect: Option<Cap>,
    /// The latest restore test that passed and restored every file.
    pub last_complete_restore: Option<Recorded>,
    /// Its manifest vanished from the repository: when, and how it was
    /// noticed.
    pub vanished: Option<(Recorded, String)>,
    /// The state, derived from the fields above by [`Point::derive_state`].
    pub state: PointState,
}

impl Point {
    fn new(
        id: SnapshotId,
        repository: RepositoryId,
        plan: Option<PlanId>,
        snapshot_time_unix_ns: i64,
        origin: PointOrigin,
        since: Recorded,
        summary: Option<BackupSummary>,
    ) -> Point {
        let mut p = Point {
            id,
            repository,
            plan,
            snapshot_time_unix_ns,
            origin,
            since,
            summary,
            copy: None,
            last_verification: None,
            last_restore_test: None,
            locked_until_unix_ns: None,
            changes: None,
            anomalies: Vec::new(),
            anomaly_paths: Vec::new(),
            last_failed_check: None,
            expired: None,
            unreadable: Vec::new(),
            open_verification_failure: None,
            open_restore_failure: None,
            unproven: None,
            suspect: None,
            last_complete_restore: None,
            vanished: None,
            state: PointState::Unknown,
        };
        p.state = p.derive_state();
        p
    }

    /// Whether the backup committed no file at all (an empty source: an
    /// unmounted share looks like this). Such a point is never
    /// `recoverable`.
    pub fn is_empty(&self) -> bool {
        self.summary.as_ref().is_some_and(|s| s.files == 0)
    }

    /// Why the point is capped at `unknown`, if it is (an unreadable event
    /// about it, a check job without a verdict, read-back damage).
    pub fn cap(&self) -> Option<String> {
        if let Some(at) = self.unreadable.first() {
            return Some(format!(
                "an event about it at seq {} cannot be read by this build",
                at.seq
            ));
        }
        if let Some(c) = &self.unproven {
            return Some(c.reason.clone());
        }
        self.suspect.as_ref().map(|c| c.reason.clone())
    }

    /// A full read of the point that began at seq `began` passed: it clears
    /// a suspicion recorded before that, not one recorded while it was
    /// reading (the damage may be in bytes it had read before they were
    /// damaged).
    fn clear_suspicion_read_since(&mut self, began: u64) {
        if self.suspect.as_ref().is_some_and(|c| c.at.seq < began) {
            self.suspect = None;
        }
    }

    /// The state the facts of this point support (see `docs/events.md`).
    pub fn derive_state(&self) -> PointState {
        let state = self.state_from_known_facts();
        if state.is_usable() && self.cap().is_some() {
            return PointState::Unknown;
        }
        state
    }

    fn state_from_known_facts(&self) -> PointState {
        if self.expired.is_some() {
            return PointState::Expired;
        }
        if self.vanished.is_some() {
            return PointState::Vanished;
        }
        let v = self.open_verification_failure.as_ref();
        let r = self.open_restore_failure.as_ref();
        match (v, r) {
            (Some(v), Some(r)) => {
                return if v.at.seq > r.at.seq {
                    PointState::Corrupt
                } else {
                    PointState::Unrecoverable
                };
            }
            (Some(_), None) => return PointState::Corrupt,
            (None, Some(_)) => return PointState::Unrecoverable,
            (None, None) => {}
        }
        let newer_than_failures =
            |r: &RestoreOutcome| self.last_failed_check.is_none_or(|f| r.at.seq > f.seq);
        let proven = self
            .last_restore_test
            .as_ref()
            .is_some_and(|r| r.proves() && r.after_passed_verification && newer_than_failures(r));
        if proven && !self.is_empty() {
            return PointState::Recoverable;
        }
        if self.last_verification.as_ref().is_some_and(|v| v.passed) {
            return PointState::Verified;
        }
        match self.origin {
            PointOrigin::Committed | PointOrigin::Copied => PointState::Unverified,
            PointOrigin::Discovered => PointState::Unknown,
        }
    }

    /// Whether the point has any anomaly flag.
    pub fn flagged(&self) -> bool {
        !self.anomalies.is_empty()
    }

    /// Whether it is a copy of another point (a replica's).
    pub fn is_copy(&self) -> bool {
        self.copy.is_some()
    }

    /// Whether its storage keeps it from deletion at `now_ns`: a lock in
    /// force that the storage itself enforces (only a copy records who
    /// enforces its repository's locks).
    pub fn immutable_at(&self, now_ns: i64) -> bool {
        self.copy
            .as_ref()
            .is_some_and(|c| c.locks_enforced_by == LockEnforcement::Storage)
            && self.locked_until_unix_ns.is_some_and(|u| u > now_ns)
    }
}

/// A check job that started: its point, and the seq of its `job.started`.
/// Its verdict is about what it read from then on, so it cannot clear a
/// suspicion recorded before that (damage found while it was reading).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct RunningCheck {
    point: SnapshotId,
    started_seq: u64,
}

/// The lifecycle of every point.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointsProjection {
    /// Every point the log knows, by id.
    pub points: BTreeMap<SnapshotId, Point>,
    /// Which point each verify / restore-test job works on.
    job_points: BTreeMap<JobId, SnapshotId>,
    /// Check jobs that started and have not reached a verdict or an end:
    /// one that fails or is abandoned from here caps its point.
    running_checks: BTreeMap<JobId, RunningCheck>,
    /// Index: the points of each plan. Derived from `points` (a point's
    /// plan never changes), so it is not part of snapshots (`serde(skip)`
    /// leaves their bytes as they were) and is rebuilt when one is read
    /// ([`PointsProjection::rebuild_index`]).
    #[serde(skip)]
    by_plan: BTreeMap<PlanId, BTreeSet<SnapshotId>>,
    /// Index: the copies of each plan's points. Derived like `by_plan`.
    #[serde(skip)]
    copies_by_plan: BTreeMap<PlanId, BTreeSet<SnapshotId>>,
    /// How many points `by_plan` holds (with or without a plan): when it
    /// differs from `points.len()`, the index is not trusted.
    #[serde(skip)]
    indexed: usize,
    /// Index: every point by the seq of the event that made it known
    /// (`since.seq`, unique per point). Derived like `by_plan`.
    #[serde(skip)]
    by_since: BTreeMap<u64, SnapshotId>,
}

impl PointsProjection {
    /// The points of `plan`, by id (the order of `points`): its own, not
    /// the copies in its replica ([`PointsProjection::copies_of_plan`]).
    /// Uses the per-plan index: O(points of the plan), not O(all points).
    pub fn of_plan<'a>(&'a self, plan: &PlanId) -> Box<dyn Iterator<Item = &'a Point> + 'a> {
        self.indexed_of(plan, false)
    }

    /// The copies of `plan`'s points (in any replica repository it had), by
    /// id.
    pub fn copies_of_plan<'a>(&'a self, plan: &PlanId) -> Box<dyn Iterator<Item = &'a Point> + 'a> {
        self.indexed_of(plan, true)
    }

    fn indexed_of<'a>(
        &'a self,
        plan: &PlanId,
        copies: bool,
    ) -> Box<dyn Iterator<Item = &'a Point> + 'a> {
        if self.indexed != self.points.len() {
            // Not indexed (built by hand): the same answer, the slow way.
            let plan = plan.clone();
            return Box::new(
                self.points
                    .values()
                    .filter(move |pt| pt.plan.as_ref() == Some(&plan) && pt.is_copy() == copies),
            );
        }
        let index = if copies {
            &self.copies_by_plan
        } else {
            &self.by_plan
        };
        match index.get(plan) {
            Some(ids) => Box::new(ids.iter().filter_map(|id| self.points.get(id))),
            None => Box::new(std::iter::empty()),
        }
    }

    /// Every point, the most recently recorded first (by `since.seq`,
    /// then snapshot time: the order of `GET /api/v1/points`), without a
    /// sort: a list that needs the newest `n` of a state stops after about
    /// `n / share of that state` points instead of sorting them all.
    pub fn newest_first<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Point> + 'a> {
        if self.indexed != self.points.len() {
            let mut v: Vec<&Point> = self.points.values().collect();
            v.sort_by_key(|pt| std::cmp::Reverse((pt.since.seq, pt.snapshot_time_unix_ns)));
            return Box::new(v.into_iter());
        }
        Box::new(
            self.by_since
                .values()
                .rev()
                .filter_map(|id| self.points.get(id)),
        )
    }

    /// Recomputes every point's state from its facts (after a snapshot is
    /// decoded: the rules may have changed since it was written).
    pub(crate) fn rederive(&mut self) {
        for p in self.points.values_mut() {
            p.state = p.derive_state();
        }
    }

    /// Rebuilds the derived indexes from `points` (after a snapshot is
    /// decoded).
    pub(crate) fn rebuild_index(&mut self) {
        self.by_plan.clear();
        self.copies_by_plan.clear();
        self.by_since.clear();
        for pt in self.points.values() {
            self.by_since.insert(pt.since.seq, pt.id);
            if let Some(plan) = &pt.plan {
                let index = if pt.is_copy() {
                    &mut self.copies_by_plan
                } else {
                    &mut self.by_plan
                };
                index.entry(plan.clone()).or_default().insert(pt.id);
            }
        }
        self.indexed = self.points.len();
    }

    fn index(&mut self, id: SnapshotId, plan: Option<&PlanId>, at: Recorded, copy: bool) {
        self.by_since.insert(at.seq, id);
        if let Some(plan) = plan {
            let index = if copy {
                &mut self.copies_by_plan
            } else {
                &mut self.by_plan
            };
            index.entry(plan.clone()).or_default().insert(id);
        }
        self.indexed += 1;
    }

    /// The state of a point; [`PointState::Unknown`] if the log has none.
    pub fn state_of(&self, id: &SnapshotId) -> PointState {
        self.points.get(id).map_or(PointState::Unknown, |p| p.state)
    }

    /// Takes note of an event this build cannot read. Returns whether its
    /// type is of a family that reports on points (`verification.*`,
    /// `restore_test.*`, `point.*`, `anomaly.*`) and, if its payload starts
    /// with a point id (as every version-1 payload of those families does)
    /// of a point the log knows, that point, which is then marked.
    pub(crate) fn apply_unknown(
        &mut self,
        at: Recorded,
        event: &UnknownEvent,
    ) -> (bool, Option<SnapshotId>) {
        let family = event.event_type.split('.').next().unwrap_or("");
        if !POINT_FAMILIES.contains(&family) {
            return (false, None);
        }
        let Some(id) = leading_point_id(&event.payload) else {
            return (true, None);
        };
        let Some(p) = self.points.get_mut(&id) else {
            return (true, None);
        };
        p.unreadable.push(at);
        p.state = p.derive_state();
        (true, Some(id))
    }

    /// Applies one event; an event that does not fit is returned as an
    /// inconsistency and changes nothing.
    pub(crate) fn apply(&mut self, at: Recorded, event: &Event) -> Option<Inconsistency> {
        let bad = |point: Option<SnapshotId>, message: String| {
            Some(Inconsistency {
                at,
                event_type: event.event_type().to_owned(),
                point,
                message,
            })
        };
        match event {
            Event::BackupCommitted(e) => {
                if let Some(p) = self.points.get_mut(&e.snapshot) {
                    // Found by a reconciliation before its commit was
                    // recorded (the manifest is written first): the log now
                    // learns its history. Anything else is a second commit.
                    if p.origin != PointOrigin::Discovered || p.summary.is_some() {
                        return bad(Some(e.snapshot), "point committed again".into());
                    }
                    if p.repository != e.repository {
                        return bad(
                            Some(e.snapshot),
                            "point committed to another repository than it was found in".into(),
                        );
                    }
                    p.origin = PointOrigin::Committed;
                    p.summary = Some(e.summary.clone());
                    p.changes = e.changes.clone();
                    if p.plan.is_none() {
                        p.plan = e.plan.clone();
                        if let Some(plan) = &e.plan {
                            self.by_plan
                                .entry(plan.clone())
                                .or_default()
                                .insert(e.snapshot);
                        }
                    }
                    p.state = p.derive_state();
                    return None;
                }
                let mut p = Point::new(
                    e.snapshot,
                    e.repository.clone(),
                    e.plan.clone(),
                    e.snapshot_time_unix_ns,
                    PointOrigin::Committed,
                    at,
                    Some(e.summary.clone()),
                );
                p.changes = e.changes.clone();
                self.points.insert(e.snapshot, p);
                self.index(e.snapshot, e.plan.as_ref(), at, false);
                None
            }
            Event::CopyCommitted(e) => {
                if e.snapshot == e.source {
                    return bad(Some(e.snapshot), "copy of a point onto itself".into());
                }
                match self.points.get(&e.source) {
                    None => {
                        return bad(
                            Some(e.snapshot),
                            "copy of a point the log never knew".into(),
                        )
                    }
                    Some(src) if src.repository == e.repository => {
                        return bad(
                            Some(e.snapshot),
                            "copy into the repository of its source".into(),
                        )
                    }
                    Some(_) => {}
                }
                let facts = CopyFacts {
                    source: e.source,
                    off_host: e.off_host,
                    locks_enforced_by: e.locks_enforced_by,
                };
                if let Some(p) = self.points.get_mut(&e.snapshot) {
                    // Found by a reconciliation of the replica before the
                    // copy's commit was recorded (its manifest is written
                    // first): the log now learns what it is.
                    if p.origin != PointOrigin::Discovered || p.summary.is_some() {
                        return bad(Some(e.snapshot), "point committed again".into());
                    }
                    if p.repository != e.repository {
                        return bad(
                            Some(e.snapshot),
                            "copy committed to another repository than it was found in".into(),
                        );
                    }
                    if let Some(plan) = &p.plan {
                        if let Some(ids) = self.by_plan.get_mut(plan) {
                            ids.remove(&e.snapshot);
                        }
                    }
                    p.origin = PointOrigin::Copied;
                    p.summary = Some(e.summary.clone());
                    p.copy = Some(facts);
                    p.plan = p.plan.take().or_else(|| e.plan.clone());
                    if let Some(plan) = &p.plan {
                        self.copies_by_plan
                            .entry(plan.clone())
                            .or_default()
                            .insert(e.snapshot);
                    }
                    if e.locked_until_unix_ns > p.locked_until_unix_ns {
                        p.locked_until_unix_ns = e.locked_until_unix_ns;
                    }
                    p.state = p.derive_state();
                    return None;
                }
                let mut p = Point::new(
                    e.snapshot,
                    e.repository.clone(),
                    e.plan.clone(),
                    e.snapshot_time_unix_ns,
                    PointOrigin::Copied,
                    at,
                    Some(e.summary.clone()),
                );
                p.copy = Some(facts);
                p.locked_until_unix_ns = e.locked_until_unix_ns;
                self.points.insert(e.snapshot, p);
                self.index(e.snapshot, e.plan.as_ref(), at, true);
                None
            }
            Event::PointDiscovered(e) => {
                // Finding a point the log already knows is normal (catalog
                // resync): nothing to do.
                if self.points.contains_key(&e.snapshot) {
                    return None;
                }
                self.index(e.snapshot, e.plan.as_ref(), at, false);
                self.points.insert(
                    e.snapshot,
                    Point::new(
                        e.snapshot,
                        e.repository.clone(),
                        e.plan.clone(),
                        e.snapshot_time_unix_ns,
                        PointOrigin::Discovered,
                        at,
                        None,
                    ),
                );
                None
            }
            Event::PointVanished(e) => {
                let Some(p) = self.points.get_mut(&e.point) else {
                    return bad(Some(e.point), "vanished point was never known".into());
                };
                if p.repository != e.repository {
                    return bad(
                        Some(e.point),
                        "point vanished from another repository than its own".into(),
                    );
                }
                // A forgotten point's manifest is meant to go; a second
                // notice changes nothing.
                if p.expired.is_none() && p.vanished.is_none() {
                    p.vanished = Some((at, e.reason.clone()));
                    p.state = p.derive_state();
                }
                None
            }
            Event::PacksReadBack(e) => {
                self.read_back_damage(at, e);
                None
            }
            Event::JobStarted(e) => {
                if let Some(point) = self.job_points.get(&e.job) {
                    let check = RunningCheck {
                        point: *point,
                        started_seq: at.seq,
                    };
                    self.running_checks.insert(e.job.clone(), check);
                }
                None
            }
            Event::JobFinished(e) => {
                self.running_checks.remove(&e.job);
                None
            }
            Event::JobFailed(e) => {
                let why = format!(
                    "check job {} failed without a verdict ({}: {})",
                    e.job, e.error_kind, e.message
                );
                self.check_ended_without_verdict(at, &e.job, why);
                None
            }
            Event::JobAbandoned(e) => {
                let why = format!(
                    "check job {} was abandoned without a verdict ({})",
                    e.job, e.reason
                );
                self.check_ended_without_verdict(at, &e.job, why);
                None
            }
            Event::JobScheduled(e) => {
                // A copy job reads its point but is no check of it: its
                // failure (the replica's storage down) says nothing about
                // the point.
                if let (Some(point), false) = (e.point, e.kind == crate::event::JobKind::Copy) {
                    self.job_points.insert(e.job.clone(), point);
                }
                None
            }
            Event::VerificationStarted(e) => self
                .check_started(&e.point, &e.job)
                .and_then(|msg| bad(Some(e.point), msg)),
            Event::RestoreTestStarted(e) => self
                .check_started(&e.point, &e.job)
                .and_then(|msg| bad(Some(e.point), msg)),
            Event::VerificationPassed(e) => self.verification(
                at,
                &e.point,
                &e.job,
                VerificationOutcome {
                    at,
                    passed: true,
                    depth: e.depth,
                    bytes_read: e.bytes_read,
                    damaged: Vec::new(),
                },
                event,
            ),
            Event::VerificationFailed(e) => self.verification(
                at,
                &e.point,
                &e.job,
                VerificationOutcome {
                    at,
                    passed: false,
                    depth: e.depth,
                    bytes_read: e.bytes_read,
                    damaged: e.damaged.clone(),
                },
                event,
            ),
            Event::RestoreTestPassed(e) => {
                if let Some(msg) = self
                    .check_live(&e.point)
                    .or_else(|| self.check_job(&e.job, &e.point))
                {
                    return bad(Some(e.point), msg);
                }
                let began = self.began(&e.job, at);
                let p = self.points.get_mut(&e.point)?;
                if p.last_verification.as_ref().is_some_and(|v| !v.passed) {
                    return bad(
                        Some(e.point),
                        "restore test passed on a point whose latest verification failed".into(),
                    );
                }
                let after_passed_verification =
                    p.last_verification.as_ref().is_some_and(|v| v.passed)
                        && p.open_verification_failure.is_none();
                let outcome = RestoreOutcome {
                    at,
                    passed: true,
                    evidence: e.evidence.clone(),
                    reason: None,
                    after_passed_verification,
                };
                if outcome.proves() {
                    p.unproven = None;
                }
                if outcome.is_complete() {
                    p.clear_suspicion_read_since(began);
                    p.open_restore_failure = None;
                    p.last_complete_restore = Some(at);
                }
                p.last_restore_test = Some(outcome);
                p.state = p.derive_state();
                if let Some(job) = &e.job {
                    self.running_checks.remove(job);
                }
                None
            }
            Event::RestoreTestFailed(e) => {
                if let Some(msg) = self
                    .check_live(&e.point)
                    .or_else(|| self.check_job(&e.job, &e.point))
                {
                    return bad(Some(e.point), msg);
                }
                let p = self.points.get_mut(&e.point)?;
                let outcome = RestoreOutcome {
                    at,
                    passed: false,
                    evidence: e.evidence.clone(),
                    reason: Some(e.reason.clone()),
                    after_passed_verification: false,
                };
                p.open_restore_failure = Some(outcome.clone());
                p.last_restore_test = Some(outcome);
                p.last_failed_check = Some(at);
                p.state = p.derive_state();
                if let Some(job) = &e.job {
                    self.running_checks.remove(job);
                }
                None
            }
            Event::PointForgotten(e) => {
                let Some(p) = self.points.get_mut(&e.point) else {
                    return bad(Some(e.point), "forgotten point was never known".into());
                };
                if p.expired.is_some() {
                    return bad(Some(e.point), "point forgotten twice".into());
                }
                if let Some(until) = p.locked_until_unix_ns.filter(|u| *u > at.unix_ns) {
                    return bad(
                        Some(e.point),
                        format!("point forgotten while locked until {until} (ns)"),
                    );
                }
                p.expired = Some((at, e.rule.clone()));
                p.state = p.derive_state();
                self.running_checks.retain(|_, c| c.point != e.point);
                None
            }
            Event::PointLocked(e) => {
                let Some(p) = self.points.get_mut(&e.point) else {
                    return bad(Some(e.point), "locked point was never known".into());
                };
                if p.locked_until_unix_ns.is_some_and(|u| u > e.until_unix_ns) {
                    return bad(Some(e.point), "a lock cannot be shortened".into());
                }
                p.locked_until_unix_ns = Some(e.until_unix_ns);
                None
            }
            Event::PointUnlocked(e) => {
                let Some(p) = self.points.get_mut(&e.point) else {
                    return bad(Some(e.point), "unlocked point was never known".into());
                };
                if p.locked_until_unix_ns.is_none() {
                    return bad(Some(e.point), "unlocked a point with no lock".into());
                }
                p.locked_until_unix_ns = None;
                None
            }
            Event::AnomalyDetected(e) => {
                let Some(p) = self.points.get_mut(&e.point) else {
                    return bad(Some(e.point), "anomaly on a point never known".into());
                };
                p.anomalies.extend(e.signals.iter().cloned());
                for path in &e.paths {
                    if !p.anomaly_paths.contains(path) {
                        p.anomaly_paths.push(path.clone());
                    }
                }
                None
            }
            _ => None,
        }
    }

    fn verification(
        &mut self,
        at: Recorded,
        point: &SnapshotId,
        job: &Option<JobId>,
        outcome: VerificationOutcome,
        event: &Event,
    ) -> Option<Inconsistency> {
        if let Some(message) = self
            .check_live(point)
            .or_else(|| self.check_job(job, point))
        {
            return Some(Inconsistency {
                at,
                event_type: event.event_type().to_owned(),
                point: Some(*point),
                message,
            });
        }
        let began = self.began(job, at);
        if let Some(job) = job {
            self.running_checks.remove(job);
        }
        let p = self.points.get_mut(point)?;
        if outcome.passed {
            p.unproven = None;
            if outcome.depth.covers(&VerifyDepth::ReadAll) {
                p.clear_suspicion_read_since(began);
            }
            if p.open_verification_failure
                .as_ref()
                .is_some_and(|f| outcome.depth.covers(&f.depth))
            {
                p.open_verification_failure = None;
            }
        } else {
            p.last_failed_check = Some(at);
            // The deeper of the open failure and this one stays open: a
            // shallow failure does not make a deep one easier to clear.
            let deeper = match &p.open_verification_failure {
                Some(f) if f.depth.permille() > outcome.depth.permille() => f.depth,
                _ => outcome.depth,
            };
            p.open_verification_failure = Some(VerificationOutcome {
                depth: deeper,
                ..outcome.clone()
            });
        }
        p.last_verification = Some(outcome);
        p.state = p.derive_state();
        None
    }

    /// A check job ended (failed or abandoned) after it started, without a
    /// verdict: its point is capped at `unknown` until a later check passes.
    fn check_ended_without_verdict(&mut self, at: Recorded, job: &JobId, reason: String) {
        let Some(RunningCheck { point, .. }) = self.running_checks.remove(job) else {
            return;
        };
        let Some(p) = self.points.get_mut(&point) else {
            return;
        };
        if p.expired.is_some() {
            return;
        }
        p.unproven = Some(Cap { at, reason });
        p.state = p.derive_state();
    }

    /// Read-back damage makes the points that reference a damaged pack
    /// suspect; when the read-back could not tell which points those are,
    /// every live point of the repository is.
    fn read_back_damage(&mut self, at: Recorded, e: &crate::event::PacksReadBack) {
        if e.damaged.is_empty() && e.damaged_packs.is_empty() {
            return;
        }
        let packs = if e.damaged_packs.is_empty() {
            "packs it could not name".to_owned()
        } else {
            let mut shown: Vec<&str> = e.damaged_packs.iter().take(3).map(String::as_str).collect();
            if e.damaged_packs.len() > 3 {
                shown.push("...");
            }
            format!("pack {}", shown.join(", "))
        };
        let affected: Vec<SnapshotId> = match &e.affected_points {
            Some(list) if !e.damaged_packs.is_empty() => list.clone(),
            _ => self
                .points
                .values()
                .filter(|p| p.repository == e.repository)
                .map(|p| p.id)
                .collect(),
        };
        for id in affected {
            let Some(p) = self.points.get_mut(&id) else {
                continue;
            };
            if p.repository != e.repository || p.expired.is_some() || p.vanished.is_some() {
                continue;
            }
            p.suspect = Some(Cap {
                at,
                reason: format!(
                    "the read-back at seq {} found damage in {packs} of repository {}",
                    at.seq, e.repository
                ),
            });
            p.state = p.derive_state();
        }
    }

    /// A verification or restore test started: ties its job to the point, or
    /// says why the event does not fit (and then changes nothing).
    fn check_started(&mut self, point: &SnapshotId, job: &Option<JobId>) -> Option<String> {
        if let Some(msg) = self
            .check_live(point)
            .or_else(|| self.check_job(job, point))
        {
            return Some(msg);
        }
        if let Some(job) = job {
            self.job_points.insert(job.clone(), *point);
        }
        None
    }

    /// The seq from which the check whose verdict is recorded `at` read the
    /// repository: its job's `job.started`, else (a verdict with no job, or
    /// a job whose start is not in the log) the verdict itself.
    fn began(&self, job: &Option<JobId>, at: Recorded) -> u64 {
        job.as_ref()
            .and_then(|j| self.running_checks.get(j))
            .map_or(at.seq, |c| c.started_seq)
    }

    /// Why a point cannot take a check result, if it cannot.
    fn check_live(&self, point: &SnapshotId) -> Option<String> {
        match self.points.get(point) {
            None => Some("point was never committed or discovered".into()),
            Some(p) if p.expired.is_some() => Some("point was already forgotten".into()),
            Some(_) => None,
        }
    }

    /// Why a result's job does not match its point, if it does not.
    fn check_job(&self, job: &Option<JobId>, point: &SnapshotId) -> Option<String> {
        let job = job.as_ref()?;
        match self.job_points.get(job) {
            Some(p) if p != point => Some(format!(
                "job {job} works on point {}, not this one",
                p.short()
            )),
            _ => None,
        }
    }
}

/// Event type families (the part before the first `.`) whose events report
/// on a recovery point.
pub(crate) const POINT_FAMILIES: &[&str] = &["verification", "restore_test", "point", "anomaly"];

/// The point id a payload starts with, if it is a msgpack array whose first
/// element is a 32-byte `bin 8` (`c4 20` + 32 bytes).
fn leading_point_id(payload: &[u8]) -> Option<SnapshotId> {
    let rest = match *payload.first()? {
        0x91..=0x9f => payload.get(1..)?,
        0xdc => payload.get(3..)?,
        0xdd => payload.get(5..)?,
        _ => return None,
    };
    if rest.get(..2)? != [0xc4, 0x20] {
        return None;
    }
    let bytes: [u8; 32] = rest.get(2..34)?.try_into().ok()?;
    Some(SnapshotId(bytes))
}
