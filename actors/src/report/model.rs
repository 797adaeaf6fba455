//! What a protection report says, computed by folding the event log up to
//! the period's end and nothing else: the same log prefix gives the same
//! report, whenever and however often it is asked for.

use std::collections::BTreeMap;

use serde::Serialize;
use vouch_events::{
    CheckStatus, Envelope, Event, JobKind, PlanId, PointState, Projections, SnapshotId,
};

use super::period::Period;
use super::rfc3339;
use crate::clock::duration_to_ns;
use crate::service::kind_name;
use crate::service::security::RETIRED;

/// The version of the report's shape (JSON fields, CSV columns). Raised
/// when a field changes meaning or goes; new fields and sections do not
/// raise it.
pub const REPORT_FORMAT: u32 = 1;

/// Most failures, restore tests and anomalies listed one by one (the
/// counts are always complete).
pub const MAX_LINES: usize = 500;

/// Which plans a report covers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", content = "plan", rename_all = "lowercase")]
pub enum Scope {
    /// Every plan that existed during the period.
    Installation,
    /// One plan.
    Plan(PlanId),
}

impl Scope {
    fn covers(&self, plan: Option<&PlanId>) -> bool {
        match self {
            Scope::Installation => true,
            Scope::Plan(p) => plan == Some(p),
        }
    }

    /// Whether a security check about `subject` is in scope: all of them
    /// for the installation; a plan's own checks (those whose subject is
    /// the plan) for a plan.
    fn covers_security(&self, subject: &str) -> bool {
        match self {
            Scope::Installation => true,
            Scope::Plan(p) => subject == p.as_str(),
        }
    }

    /// `installation` or the plan's id (file names, subjects).
    pub fn name(&self) -> &str {
        match self {
            Scope::Installation => "installation",
            Scope::Plan(p) => p.as_str(),
        }
    }
}

/// A protection report.
///
/// Sections are fields of their own, each computed by its own function of
/// the fold; a new section (the security center's, for one) is a new
/// field and a new function, and needs no change to the others.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// [`REPORT_FORMAT`].
    pub format: u32,
    /// The period.
    pub period: PeriodView,
    /// What it covers.
    pub scope: Scope,
    /// The log it was folded from: its events up to the period's end.
    pub log: LogExtent,
    /// Figures over every plan in scope.
    pub totals: Totals,
    /// One line per plan in scope.
    pub plans: Vec<PlanLine>,
    /// Failed jobs, verifications and restore tests, oldest first.
    pub failures: Vec<Failure>,
    /// Restore tests that ended in the period, oldest first.
    pub restore_tests: Vec<RestoreTestLine>,
    /// Points the ransomware heuristic flagged in the period.
    pub anomalies: Vec<AnomalyLine>,
    /// Activity per hour (daily reports) or per day, for the charts.
    pub series: Vec<Bucket>,
    /// The security center as the log recorded it: its state at the
    /// period's end and the changes within the period.
    pub security: SecurityPart,
}

/// The security center in a report (`security.check_changed`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SecurityPart {
    /// Checks by status at the period's end (`ok`, `warning`, `failed`,
    /// `unknown`; every status present, 0s too). Retired checks (no longer
    /// evaluated) are left out. No check recorded yet: every count is 0,
    /// which says nothing is known, never that all is well.
    pub counts: BTreeMap<String, u64>,
    /// The checks that were not `ok` at the period's end, worst first.
    pub not_ok: Vec<SecurityLine>,
    /// Changes recorded in the period, oldest first (at most
    /// [`MAX_LINES`]).
    pub changes: Vec<SecurityChange>,
}

/// One check at the period's end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SecurityLine {
    /// Its id.
    pub check: String,
    /// Its status.
    pub status: String,
    /// Why.
    pub reason: String,
    /// What to do.
    pub action: String,
    /// Since when (RFC 3339).
    pub since: String,
}

/// One recorded change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SecurityChange {
    /// When (RFC 3339).
    pub at: String,
    /// Its seq.
    pub seq: u64,
    /// The check.
    pub check: String,
    /// Its new status.
    pub status: String,
    /// Why.
    pub reason: String,
}

/// The period, in words and times.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PeriodView {
    /// `daily`, `weekly` or `monthly`.
    pub kind: String,
    /// `2026-12-06`, `2026-W49`, `2026-12`.
    pub label: String,
    /// First instant (RFC 3339, UTC).
    pub start: String,
    /// First instant after it.
    pub end: String,
}

/// The part of the log a report reflects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LogExtent {
    /// The seq of the last event folded (recorded before the end).
    pub last_seq: u64,
    /// Its hash (hex): a report names the exact log it was made from.
    pub last_hash: String,
    /// Events recorded in the period.
    pub events_in_period: u64,
}

/// Figures over every plan in scope.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Plans in scope.
    pub plans: u64,
    /// Of which met their RPO during the whole period.
    pub plans_rpo_met: u64,
    /// Points committed in the period.
    pub points_made: u64,
    /// Of those, recoverable at the period's end.
    pub points_made_recoverable: u64,
    /// Backup jobs that failed in the period.
    pub backups_failed: u64,
    /// Failures of any kind in the period (jobs, verifications, restore
    /// tests), all counted even when [`MAX_LINES`] are listed.
    pub failures: u64,
    /// Restore tests that passed in the period.
    pub restore_tests_passed: u64,
    /// Restore tests that failed in the period.
    pub restore_tests_failed: u64,
    /// Verifications that failed in the period.
    pub verifications_failed: u64,
    /// Points flagged by the ransomware heuristic in the period.
    pub anomalies: u64,
    /// Bytes written to repositories by backups up to the period's start.
    pub stored_bytes_at_start: u64,
    /// The same up to its end.
    pub stored_bytes_at_end: u64,
}

/// One plan's period.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlanLine {
    /// The plan.
    pub plan: String,
    /// What it backs up.
    pub source: String,
    /// Where.
    pub repository: String,
    /// Removed during the period (or before its end).
    pub removed: bool,
    /// Its RPO (seconds), as defined at the period's end.
    pub rpo_seconds: u64,
    /// Its protection at the period's end, as the service judges it.
    pub protection_at_end: String,
    /// Why.
    pub protection_reason: String,
    /// Points committed in the period.
    pub points_made: u64,
    /// Of those, recoverable at the period's end.
    pub points_made_recoverable: u64,
    /// Of those, restore-tested (passed, complete or sampled) by the end.
    pub points_made_restore_tested: u64,
    /// Its points recoverable at the period's end (any age).
    pub points_recoverable_at_end: u64,
    /// Seconds of the period the plan existed (from its creation to its
    /// removal).
    pub existed_seconds: u64,
    /// Whether the RPO held for the whole time the plan existed in the
    /// period.
    pub rpo_met: bool,
    /// Seconds of the period during which it did not.
    pub rpo_missed_seconds: u64,
    /// The longest single stretch of those.
    pub rpo_longest_miss_seconds: u64,
    /// Backup jobs that failed in the period.
    pub backups_failed: u64,
    /// Restore tests that passed in the period.
    pub restore_tests_passed: u64,
    /// Restore tests that failed in the period.
    pub restore_tests_failed: u64,
    /// Of the restore tests that passed, those that restored every file.
    pub restore_tests_complete: u64,
    /// Verifications that failed in the period.
    pub verifications_failed: u64,
    /// Points flagged by the ransomware heuristic in the period.
    pub anomalies: u64,
    /// Bytes its backups wrote to the repository, up to the period's start.
    pub stored_bytes_at_start: u64,
    /// The same up to its end.
    pub stored_bytes_at_end: u64,
    /// Logical size of its newest point committed by the end (none: not
    /// recorded for points made before `backup.committed` v3).
    pub newest_point_bytes: Option<u64>,
}

/// A failure in the period.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// When it was recorded (RFC 3339).
    pub at: String,
    /// Its seq in the log.
    pub seq: u64,
    /// `backup`, `verify`, `restore-test`, ... for a job; `verification` or
    /// `restore_test` for a check's verdict.
    pub what: String,
    /// The plan, if any.
    pub plan: Option<String>,
    /// The point, if any.
    pub point: Option<String>,
    /// A stable kind (`io`, `mismatch`, `damaged`, ...).
    pub kind: String,
    /// Why, in words.
    pub reason: String,
}

/// A restore test that ended in the period.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RestoreTestLine {
    /// When (RFC 3339).
    pub at: String,
    /// Its seq.
    pub seq: u64,
    /// The plan.
    pub plan: Option<String>,
    /// The point.
    pub point: String,
    /// Whether it passed.
    pub passed: bool,
    /// Files restored.
    pub files: u64,
    /// Files in the point, when known.
    pub files_in_point: Option<u64>,
    /// Bytes restored.
    pub bytes: u64,
    /// Digests compared / matched.
    pub digests_compared: u64,
    /// Of which matched.
    pub digests_matched: u64,
    /// Every file restored and compared.
    pub complete: bool,
    /// Restored files per thousand files of the point, when known.
    pub coverage_permille: Option<u64>,
    /// Why it failed, for a failure.
    pub reason: Option<String>,
}

/// A point the ransomware heuristic flagged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AnomalyLine {
    /// When (RFC 3339).
    pub at: String,
    /// Its seq.
    pub seq: u64,
    /// The plan.
    pub plan: Option<String>,
    /// The point.
    pub point: String,
    /// The signals (`kind:score‰`), strongest first.
    pub signals: Vec<String>,
    /// The strongest score (0-1000; 500 is a signal's threshold).
    pub max_score_permille: u32,
    /// The paths that weighed most (at most 5).
    pub paths: Vec<String>,
}

/// Activity in one slice of the period (charts).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Bucket {
    /// Its start (RFC 3339).
    pub start: String,
    /// Points committed.
    pub points_made: u64,
    /// Failures of any kind.
    pub failures: u64,
    /// Bytes written by backups.
    pub stored_bytes: u64,
}

/// What is gathered from one plan's events in the period.
#[derive(Default)]
struct PlanTally {
    points_made: Vec<SnapshotId>,
    backups_failed: u64,
    restore_passed: u64,
    restore_failed: u64,
    restore_complete: u64,
    verifications_failed: u64,
    anomalies: u64,
    stored_at_start: u64,
    stored_at_end: u64,
}

/// The fold: the projections plus the period's facts.
struct Fold<'a> {
    period: Period,
    scope: &'a Scope,
    p: Projections,
    stored_at_start_taken: bool,
    tallies: BTreeMap<PlanId, PlanTally>,
    /// Bytes written by backups without a plan (installation scope only).
    stored_unplanned: (u64, u64),
    failures: Vec<Failure>,
    failures_total: u64,
    restore_tests: Vec<RestoreTestLine>,
    anomalies: Vec<AnomalyLine>,
    security_changes: Vec<SecurityChange>,
    buckets: Vec<(i64, i64)>,
    series: Vec<Bucket>,
    events_in_period: u64,
}

fn opt_str(p: Option<&PlanId>) -> Option<String> {
    p.map(|p| p.as_str().to_owned())
}

fn push_capped<T>(v: &mut Vec<T>, line: T) {
    if v.len() < MAX_LINES {
        v.push(line);
    }
}

impl Fold<'_> {
    fn bucket(&mut self, at_ns: i64) -> Option<&mut Bucket> {
        let i = self
            .buckets
            .iter()
            .position(|(s, e)| *s <= at_ns && at_ns < *e)?;
        self.series.get_mut(i)
    }

    fn point_plan(&self, point: &SnapshotId) -> Option<PlanId> {
        self.p
            .points
            .points
            .get(point)
            .and_then(|pt| pt.plan.clone())
    }

    fn tally(&mut self, plan: &PlanId) -> &mut PlanTally {
        self.tallies.entry(plan.clone()).or_default()
    }

    /// Folds an event recorded before the period.
    fn before(&mut self, env: &Envelope) {
        if let Event::BackupCommitted(b) = &env.event {
            if self.scope.covers(b.plan.as_ref()) {
                let bytes = b.summary.stored_bytes;
                match &b.plan {
                    Some(plan) => {
                        let t = self.tally(plan);
                        t.stored_at_start = t.stored_at_start.saturating_add(bytes);
                        t.stored_at_end = t.stored_at_end.saturating_add(bytes);
                    }
                    None => {
                        self.stored_unplanned.0 = self.stored_unplanned.0.saturating_add(bytes);
                        self.stored_unplanned.1 = self.stored_unplanned.1.saturating_add(bytes);
                    }
                }
            }
        }
        self.p.apply(env);
    }

    /// Folds an event recorded in the period, noting what it says.
    fn during(&mut self, env: &Envelope) {
        self.events_in_period = self.events_in_period.saturating_add(1);
        // The job's plan and kind as the log knew them before it ended.
        let job_facts = match &env.event {
            Event::JobFailed(f) => self
                .p
                .jobs
                .jobs
                .get(&f.job)
                .map(|j| (j.kind, j.plan.clone(), j.point)),
            _ => None,
        };
        self.p.apply(env);
        let at = rfc3339(env.recorded_unix_ns);
        let seq = env.seq;
        let t_ns = env.recorded_unix_ns;
        match &env.event {
            Event::BackupCommitted(b) => {
                if !self.scope.covers(b.plan.as_ref()) {
                    return;
                }
                let bytes = b.summary.stored_bytes;
                match &b.plan {
                    Some(plan) => {
                        let t = self.tally(plan);
                        t.points_made.push(b.snapshot);
                        t.stored_at_end = t.stored_at_end.saturating_add(bytes);
                    }
                    None => self.stored_unplanned.1 = self.stored_unplanned.1.saturating_add(bytes),
                }
                if let Some(bk) = self.bucket(t_ns) {
                    bk.points_made += 1;
                    bk.stored_bytes = bk.stored_bytes.saturating_add(bytes);
                }
            }
            Event::JobFailed(f) => {
                let (kind, plan, point) = match job_facts {
                    Some(facts) => facts,
                    None => return, // not a job the log knew: an inconsistency, not a failure
                };
                if !self.scope.covers(plan.as_ref()) {
                    return;
                }
                if let (JobKind::Backup, Some(plan)) = (kind, &plan) {
                    self.tally(plan).backups_failed += 1;
                }
                self.failure(Failure {
                    at,
                    seq,
                    what: kind_name(kind).to_owned(),
                    plan: opt_str(plan.as_ref()),
                    point: point.map(|p| p.to_hex()),
                    kind: f.error_kind.clone(),
                    reason: f.message.clone(),
                });
                if let Some(bk) = self.bucket(t_ns) {
                    bk.failures += 1;
                }
            }
            Event::VerificationFailed(v) => {
                let plan = self.point_plan(&v.point);
                if !self.scope.covers(plan.as_ref()) {
                    return;
                }
                if let Some(plan) = &plan {
                    self.tally(plan).verifications_failed += 1;
                }
                let shown: Vec<&str> = v.damaged.iter().take(5).map(String::as_str).collect();
                self.failure(Failure {
                    at,
                    seq,
                    what: "verification".into(),
                    plan: opt_str(plan.as_ref()),
                    point: Some(v.point.to_hex()),
                    kind: "damaged".into(),
                    reason: format!("{} damaged item(s): {}", v.damaged.len(), shown.join(", ")),
                });
                if let Some(bk) = self.bucket(t_ns) {
                    bk.failures += 1;
                }
            }
            Event::RestoreTestPassed(r) => {
                let plan = self.point_plan(&r.point);
                if !self.scope.covers(plan.as_ref()) {
                    return;
                }
                if let Some(plan) = &plan {
                    let t = self.tally(plan);
                    t.restore_passed += 1;
                    if r.evidence.complete {
                        t.restore_complete += 1;
                    }
                }
                let line = restore_line(at, seq, plan.as_ref(), r.point, &r.evidence, None);
                push_capped(&mut self.restore_tests, line);
            }
            Event::RestoreTestFailed(r) => {
                let plan = self.point_plan(&r.point);
                if !self.scope.covers(plan.as_ref()) {
                    return;
                }
                if let Some(plan) = &plan {
                    self.tally(plan).restore_failed += 1;
                }
                let line = restore_line(
                    at.clone(),
                    seq,
                    plan.as_ref(),
                    r.point,
                    &r.evidence,
                    Some(r.reason.clone()),
                );
                push_capped(&mut self.restore_tests, line);
                self.failure(Failure {
                    at,
                    seq,
                    what: "restore_test".into(),
                    plan: opt_str(plan.as_ref()),
                    point: Some(r.point.to_hex()),
                    kind: r.cause.clone(),
                    reason: r.reason.clone(),
                });
                if let Some(bk) = self.bucket(t_ns) {
                    bk.failures += 1;
                }
            }
            Event::SecurityCheckChanged(c)
                if self.scope.covers_security(&c.subject) && c.reason != RETIRED =>
            {
                push_capped(
                    &mut self.security_changes,
                    SecurityChange {
                        at: at.clone(),
                        seq,
                        check: c.check.clone(),
                        status: c.status.as_str().to_owned(),
                        reason: c.reason.clone(),
                    },
                );
            }
            Event::AnomalyDetected(a) => {
                let plan = self.point_plan(&a.point);
                if !self.scope.covers(plan.as_ref()) {
                    return;
                }
                if let Some(plan) = &plan {
                    self.tally(plan).anomalies += 1;
                }
                let mut signals: Vec<_> = a.signals.iter().collect();
                signals.sort_by(|x, y| {
                    y.score_permille
                        .cmp(&x.score_permille)
                        .then_with(|| x.kind.cmp(&y.kind))
                });
                let line = AnomalyLine {
                    at,
                    seq,
                    plan: opt_str(plan.as_ref()),
                    point: a.point.to_hex(),
                    max_score_permille: signals.first().map_or(0, |s| s.score_permille),
                    signals: signals
                        .iter()
                        .map(|s| format!("{}:{}", s.kind, s.score_permille))
                        .collect(),
                    paths: a.paths.iter().take(5).cloned().collect(),
                };
                push_capped(&mut self.anomalies, line);
            }
            _ => {}
        }
    }

    fn failure(&mut self, f: Failure) {
        self.failures_total = self.failures_total.saturating_add(1);
        push_capped(&mut self.failures, f);
    }
}

fn restore_line(
    at: String,
    seq: u64,
    plan: Option<&PlanId>,
    point: SnapshotId,
    e: &vouch_events::RestoreEvidence,
    reason: Option<String>,
) -> RestoreTestLine {
    RestoreTestLine {
        at,
        seq,
        plan: opt_str(plan),
        point: point.to_hex(),
        passed: reason.is_none(),
        files: e.files,
        files_in_point: e.files_in_point,
        bytes: e.bytes,
        digests_compared: e.digests_compared,
        digests_matched: e.digests_matched,
        complete: e.complete,
        coverage_permille: e
            .files_in_point
            .filter(|n| *n > 0)
            .map(|n| e.files.min(n).saturating_mul(1000) / n),
        reason,
    }
}

/// The stretches of `[from, to)` not covered by `cover` (sorted or not),
/// as (total, longest) nanoseconds.
fn uncovered(from: i64, to: i64, mut cover: Vec<(i64, i64)>) -> (i64, i64) {
    cover.sort_unstable();
    let (mut total, mut longest, mut at) = (0i64, 0i64, from);
    for (s, e) in cover {
        if e <= at {
            continue;
        }
        if s > at {
            let gap = s.min(to).saturating_sub(at);
            total = total.saturating_add(gap.max(0));
            longest = longest.max(gap);
        }
        at = at.max(e);
        if at >= to {
            break;
        }
    }
    if at < to {
        let gap = to.saturating_sub(at);
        total = total.saturating_add(gap);
        longest = longest.max(gap);
    }
    (total, longest)
}

fn secs(ns: i64) -> u64 {
    u64::try_from(ns / 1_000_000_000).unwrap_or(0)
}

/// Builds the report of `period` for `scope` from the log's envelopes,
/// oldest first. Only the envelopes recorded before the period's end are
/// read: the first one recorded at or after it ends the fold, so events
/// appended later (even by a clock that stepped back) never change a
/// report.
///
/// Returns `None` when `scope` names a plan the log did not know by the
/// period's end.
pub fn build(
    period: Period,
    scope: &Scope,
    envelopes: &mut dyn Iterator<Item = Envelope>,
) -> Option<Report> {
    let buckets = period.buckets();
    let series = buckets
        .iter()
        .map(|(s, _)| Bucket {
            start: rfc3339(*s),
            points_made: 0,
            failures: 0,
            stored_bytes: 0,
        })
        .collect();
    let mut fold = Fold {
        period,
        scope,
        p: Projections::new(),
        stored_at_start_taken: false,
        tallies: BTreeMap::new(),
        stored_unplanned: (0, 0),
        failures: Vec::new(),
        failures_total: 0,
        restore_tests: Vec::new(),
        anomalies: Vec::new(),
        security_changes: Vec::new(),
        buckets,
        series,
        events_in_period: 0,
    };
    for env in envelopes {
        if env.recorded_unix_ns >= period.end_unix_ns {
            break;
        }
        if env.recorded_unix_ns < period.start_unix_ns && !fold.stored_at_start_taken {
            fold.before(&env);
        } else {
            // Once in the period, always in it (a clock that stepped back
            // does not move events out again).
            fold.stored_at_start_taken = true;
            fold.during(&env);
        }
    }
    fold.finish()
}

impl Fold<'_> {
    fn finish(self) -> Option<Report> {
        let Fold {
            period,
            scope,
            p,
            mut tallies,
            stored_unplanned,
            failures,
            failures_total,
            restore_tests,
            anomalies,
            series,
            events_in_period,
            security_changes,
            ..
        } = self;
        if let Scope::Plan(id) = scope {
            if !p.plans.plans.contains_key(id) {
                return None;
            }
        }
        let end = period.end_unix_ns;
        let mut plans = Vec::new();
        let mut totals = Totals {
            failures: failures_total,
            ..Totals::default()
        };
        for plan in p.plans.plans.values() {
            if !scope.covers(Some(&plan.id)) {
                continue;
            }
            // Removed before the period began: not part of it.
            if plan
                .removed
                .is_some_and(|r| r.unix_ns < period.start_unix_ns)
            {
                continue;
            }
            let t = tallies.remove(&plan.id).unwrap_or_default();
            let rpo_ns = duration_to_ns(plan.definition.rpo);
            // The RPO holds at t when a point committed by t has a snapshot
            // time within the RPO before t, and the point still counts at
            // the period's end (usable, or forgotten by retention): a point
            // found corrupt or unrecoverable later never covered anything.
            let cover: Vec<(i64, i64)> = p
                .points
                .of_plan(&plan.id)
                .filter(|pt| pt.state.is_usable() || pt.state == PointState::Expired)
                .map(|pt| {
                    (
                        pt.since.unix_ns,
                        pt.snapshot_time_unix_ns.saturating_add(rpo_ns),
                    )
                })
                .collect();
            let from = period.start_unix_ns.max(plan.created.unix_ns);
            let to = plan.removed.map_or(end, |r| r.unix_ns.min(end));
            let (missed, longest) = if from < to {
                uncovered(from, to, cover)
            } else {
                (0, 0)
            };
            let made_state = |id: &SnapshotId| p.points.points.get(id);
            let made_recoverable = t
                .points_made
                .iter()
                .filter(|id| made_state(id).is_some_and(|pt| pt.state == PointState::Recoverable))
                .count() as u64;
            let made_tested = t
                .points_made
                .iter()
                .filter(|id| {
                    made_state(id).is_some_and(|pt| {
                        pt.last_restore_test.as_ref().is_some_and(|r| r.passed)
                            || pt.last_complete_restore.is_some()
                    })
                })
                .count() as u64;
            let recoverable_at_end = p
                .points
                .of_plan(&plan.id)
                .filter(|pt| pt.state == PointState::Recoverable)
                .count() as u64;
            let newest_point_bytes = p
                .points
                .of_plan(&plan.id)
                .filter(|pt| pt.summary.is_some())
                .max_by_key(|pt| (pt.snapshot_time_unix_ns, pt.id))
                .and_then(|pt| pt.summary.as_ref().and_then(|s| s.total_bytes));
            let protection = p.plan_protection(&plan.id, end.saturating_sub(1));
            let line = PlanLine {
                plan: plan.id.as_str().to_owned(),
                source: plan.definition.source.clone(),
                repository: plan.definition.repository.as_str().to_owned(),
                removed: plan.removed.is_some(),
                rpo_seconds: plan.definition.rpo.as_secs(),
                protection_at_end: if plan.removed.is_some() {
                    "removed".into()
                } else {
                    protection.status.as_str().to_owned()
                },
                protection_reason: protection.reason,
                points_made: t.points_made.len() as u64,
                points_made_recoverable: made_recoverable,
                points_made_restore_tested: made_tested,
                points_recoverable_at_end: recoverable_at_end,
                existed_seconds: secs(to.saturating_sub(from).max(0)),
                rpo_met: missed == 0,
                rpo_missed_seconds: secs(missed),
                rpo_longest_miss_seconds: secs(longest),
                backups_failed: t.backups_failed,
                restore_tests_passed: t.restore_passed,
                restore_tests_failed: t.restore_failed,
                restore_tests_complete: t.restore_complete,
                verifications_failed: t.verifications_failed,
                anomalies: t.anomalies,
                stored_bytes_at_start: t.stored_at_start,
                stored_bytes_at_end: t.stored_at_end,
                newest_point_bytes,
            };
            totals.plans += 1;
            totals.plans_rpo_met += u64::from(line.rpo_met);
            totals.points_made += line.points_made;
            totals.points_made_recoverable += line.points_made_recoverable;
            totals.backups_failed += line.backups_failed;
            totals.restore_tests_passed += line.restore_tests_passed;
            totals.restore_tests_failed += line.restore_tests_failed;
            totals.verifications_failed += line.verifications_failed;
            totals.anomalies += line.anomalies;
            totals.stored_bytes_at_start = totals
                .stored_bytes_at_start
                .saturating_add(line.stored_bytes_at_start);
            totals.stored_bytes_at_end = totals
                .stored_bytes_at_end
                .saturating_add(line.stored_bytes_at_end);
            plans.push(line);
        }
        // Backups of plans no longer in scope's list (removed before the
        // period) and of no plan still count towards the storage.
        for t in tallies.values() {
            totals.stored_bytes_at_start = totals
                .stored_bytes_at_start
                .saturating_add(t.stored_at_start);
            totals.stored_bytes_at_end = totals.stored_bytes_at_end.saturating_add(t.stored_at_end);
        }
        totals.stored_bytes_at_start = totals
            .stored_bytes_at_start
            .saturating_add(stored_unplanned.0);
        totals.stored_bytes_at_end = totals
            .stored_bytes_at_end
            .saturating_add(stored_unplanned.1);
        Some(Report {
            format: REPORT_FORMAT,
            period: PeriodView {
                kind: period.kind.as_str().to_owned(),
                label: period.label(),
                start: rfc3339(period.start_unix_ns),
                end: rfc3339(period.end_unix_ns),
            },
            scope: scope.clone(),
            log: LogExtent {
                last_seq: p.last_seq,
                last_hash: p.last_hash.to_hex(),
                events_in_period,
            },
            totals,
            plans,
            failures,
            restore_tests,
            anomalies,
            series,
            security: security_part(&p, scope, security_changes),
        })
    }
}

/// The security center at the period's end, from the folded state.
fn security_part(p: &Projections, scope: &Scope, changes: Vec<SecurityChange>) -> SecurityPart {
    let mut counts: BTreeMap<String, u64> = CheckStatus::ALL
        .iter()
        .map(|s| (s.as_str().to_owned(), 0))
        .collect();
    let mut not_ok: Vec<(&CheckStatus, SecurityLine)> = Vec::new();
    for (id, c) in &p.security.checks {
        if c.reason == RETIRED || !scope.covers_security(&c.subject) {
            continue;
        }
        *counts.entry(c.status.as_str().to_owned()).or_default() += 1;
        if c.status != CheckStatus::Ok {
            not_ok.push((
                &c.status,
                SecurityLine {
                    check: id.clone(),
                    status: c.status.as_str().to_owned(),
                    reason: c.reason.clone(),
                    action: c.action.clone(),
                    since: rfc3339(c.since.unix_ns),
                },
            ));
        }
    }
    not_ok.sort_by(|a, b| {
        b.0.badness()
            .cmp(&a.0.badness())
            .then_with(|| a.1.check.cmp(&b.1.check))
    });
    SecurityPart {
        counts,
        not_ok: not_ok.into_iter().map(|(_, l)| l).collect(),
        changes,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use vouch_events::{
        BackupCommitted, BackupSummary, EventHash, JobFailed, JobScheduled, JobSpec, PlanCreated,
        PlanDefinition, RepositoryId, VerifyDepth,
    };

    use super::*;
    use crate::report::{parse_instant, PeriodKind};

    const H: i64 = 3_600_000_000_000;

    fn definition() -> PlanDefinition {
        PlanDefinition {
            source: "/srv".into(),
            schedule: "0 3 * * *".into(),
            retention: vouch_events::KeepPolicy::default(),
            verification: vouch_events::VerificationPolicy {
                after_backup: true,
                every: None,
                depth: VerifyDepth::Structure,
            },
            restore_test: vouch_events::RestoreTestPolicy {
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
        }
    }

    fn log(events: Vec<(i64, Event)>) -> Vec<Envelope> {
        events
            .into_iter()
            .enumerate()
            .map(|(i, (at, event))| Envelope {
                seq: i as u64 + 1,
                recorded_unix_ns: at,
                schema_version: event.schema_version(),
                prev_hash: EventHash([0; 32]),
                hash: EventHash([i as u8 + 1; 32]),
                event,
            })
            .collect()
    }

    fn commit(n: u8, at: i64, stored: u64) -> Event {
        BackupCommitted {
            job: None,
            plan: Some(PlanId::new("p")),
            repository: RepositoryId::new("main"),
            snapshot: SnapshotId([n; 32]),
            snapshot_time_unix_ns: at,
            summary: BackupSummary {
                stored_bytes: stored,
                ..BackupSummary::default()
            },
            changes: None,
        }
        .into()
    }

    /// Given a plan made the day before, a backup at 06:00 and a failed
    /// one at 12:00 of the day, then events after the day's end (one of
    /// them dated inside the day by a clock that stepped back): the day's
    /// report counts what the day did, and the later events change
    /// nothing.
    #[test]
    fn a_day_is_folded_from_the_log_up_to_its_end_only() {
        let day = parse_instant("2026-03-02").expect("day");
        let job = vouch_events::JobId::new("b1");
        let mut events = vec![
            (
                day - 2 * H,
                PlanCreated {
                    plan: PlanId::new("p"),
                    definition: definition(),
                }
                .into(),
            ),
            (day - H, commit(1, day - H, 100)),
            (day + 6 * H, commit(2, day + 6 * H, 40)),
            (
                day + 12 * H,
                JobScheduled {
                    job: job.clone(),
                    kind: JobKind::Backup,
                    plan: Some(PlanId::new("p")),
                    point: None,
                    due_unix_ns: day + 12 * H,
                    attempt: 1,
                    spec: JobSpec::default(),
                }
                .into(),
            ),
            (
                day + 12 * H + 1,
                JobFailed {
                    job,
                    error_kind: "io".into(),
                    message: "disk gone".into(),
                    retryable: false,
                }
                .into(),
            ),
        ];
        let period = Period::containing(PeriodKind::Daily, day);
        let scope = Scope::Installation;
        let before = build(period, &scope, &mut log(events.clone()).into_iter()).expect("report");
        events.push((day + 25 * H, commit(3, day + 25 * H, 7)));
        events.push((day + 13 * H, commit(4, day + 13 * H, 9)));
        let after = build(period, &scope, &mut log(events).into_iter()).expect("report");
        assert_eq!(before, after, "later events change nothing");
        let t = &after.totals;
        assert_eq!(
            (t.plans, t.points_made, t.backups_failed, t.failures),
            (1, 1, 1, 1)
        );
        assert_eq!((t.stored_bytes_at_start, t.stored_bytes_at_end), (100, 140));
        let p = &after.plans[0];
        // Covered: [day-1h, day) by point 1, [06:00, 07:00) by point 2.
        assert_eq!(p.rpo_missed_seconds, (6 + 17) * 3600);
        assert_eq!(p.rpo_longest_miss_seconds, 17 * 3600);
        assert_eq!(p.existed_seconds, 24 * 3600);
        assert_eq!(after.failures[0].reason, "disk gone");
        assert_eq!(after.failures[0].what, "backup");
        assert_eq!(after.series[6].points_made, 1);
        assert_eq!(after.series[12].failures, 1);
        assert_eq!(after.log.last_seq, 5);
        // One plan's scope; an unknown plan has no report.
        let one = build(
            period,
            &Scope::Plan(PlanId::new("p")),
            &mut log(vec![]).into_iter(),
        );
        assert!(one.is_none());
    }

    #[test]
    fn uncovered_time_is_what_no_interval_covers() {
        assert_eq!(uncovered(0, 100, vec![]), (100, 100));
        assert_eq!(uncovered(0, 100, vec![(0, 100)]), (0, 0));
        assert_eq!(uncovered(0, 100, vec![(-50, 30), (60, 200)]), (30, 30));
        assert_eq!(
            uncovered(0, 100, vec![(60, 70), (10, 20), (15, 40)]),
            (60, 30)
        );
        assert_eq!(uncovered(0, 100, vec![(200, 300)]), (100, 100));
    }
}
