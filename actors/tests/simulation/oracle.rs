//! The oracles: simple, independent re-statements of the rules, checked
//! against the log and the live service after every step. None of them
//! calls the projection's own derivations (`Point::derive_state`,
//! `plan_protection`'s internals): they read the raw events.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use vouch_events::{
    Envelope, Event, JobKind, PlanDefinition, PlanId, PointState, Projections, Protection,
    RepositoryId, SnapshotId, VerifyDepth,
};

/// What an oracle found. Every violation fails the test: the findings of
/// the review that the oracles were written against (C1, H1, H2, H3, M1,
/// M6, M7, L5) are fixed, so a violation that names one means its fix is
/// incomplete or has regressed.
#[derive(Clone, Debug)]
pub struct Violation {
    /// The oracle.
    pub oracle: &'static str,
    /// The findings of the review it touches (for humans; none: a failure
    /// of a rule no finding named).
    pub findings: BTreeSet<&'static str>,
    /// For humans.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tags: Vec<&str> = self.findings.iter().copied().collect();
        write!(f, "[{}] {}", self.oracle, self.detail)?;
        if !tags.is_empty() {
            write!(f, " (finding {})", tags.join(","))?;
        }
        Ok(())
    }
}

fn violation(oracle: &'static str, findings: &[&'static str], detail: String) -> Violation {
    Violation {
        oracle,
        findings: findings.iter().copied().collect(),
        detail,
    }
}

/// Kinds of negative facts about a point (for the monotonicity steps and
/// the messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Neg {
    /// `verification.failed` or `restore_test.failed`.
    Verdict,
    /// A check job that started and then failed or was abandoned (C1).
    CheckJob,
    /// Read-back damage naming its pack or its repository (H1).
    ReadBack,
    /// `point.vanished` (H2).
    Vanished,
    /// An unreadable event naming the point.
    Unknown,
}

#[derive(Default, Debug)]
struct PointFacts {
    repository: Option<RepositoryId>,
    files: Option<u64>,
    since: u64,
    negatives: Vec<(u64, Neg)>,
    /// Seq and depth of each `verification.failed`.
    verify_fails: Vec<(u64, VerifyDepth)>,
    /// Seq of each `restore_test.failed`.
    restore_fails: Vec<u64>,
    /// Seq and depth of each `verification.passed`.
    verify_passes: Vec<(u64, VerifyDepth)>,
    /// Seq, whether the evidence restored nothing, whether it was complete.
    restore_passes: Vec<(u64, bool, bool)>,
    /// For each passed full read (a `ReadAll` verification, a complete
    /// restore test that restored something): the seq its job began at
    /// (its `job.started`), else the verdict's own.
    full_reads: Vec<u64>,
    forgotten: bool,
}

impl PointFacts {
    /// Why the facts do not allow `recoverable` (none: they do), by the
    /// rules of `docs/events.md` ("Recovery-point lifecycle", "Caps"),
    /// restated over the raw events.
    fn not_recoverable(&self) -> Option<(&'static [&'static str], String)> {
        if self.forgotten {
            return Some((&[], "it was forgotten".into()));
        }
        if let Some((s, _)) = self.negatives.iter().find(|(_, k)| *k == Neg::Vanished) {
            return Some((&["H2"], format!("its manifest vanished at seq {s}")));
        }
        if let Some((s, _)) = self.negatives.iter().find(|(_, k)| *k == Neg::Unknown) {
            return Some((&["M6"], format!("an unreadable event names it at seq {s}")));
        }
        if self.files == Some(0) {
            return Some((&["H3"], "its backup committed no file".into()));
        }
        // The latest restore test must be a pass that proves something.
        let last_fail = self.restore_fails.iter().copied().max().unwrap_or(0);
        let Some(&(r, vacuous, _)) = self.restore_passes.iter().max_by_key(|x| x.0) else {
            return Some((&[], "no restore test passed".into()));
        };
        if last_fail > r {
            return Some((
                &[],
                format!("its latest restore test (seq {last_fail}) failed"),
            ));
        }
        if vacuous {
            return Some((
                &["H3"],
                format!("its latest restore test (seq {r}) restored nothing"),
            ));
        }
        // ... newer than every failed check ...
        if let Some(&(f, _)) = self
            .verify_fails
            .iter()
            .filter(|x| x.0 > r)
            .max_by_key(|x| x.0)
        {
            return Some((
                &[],
                format!("a verification failed at seq {f}, after its restore test"),
            ));
        }
        // ... after a passed verification, with no verification failure
        // left open then (a pass at least as deep clears one) ...
        let Some(&(v, _)) = self
            .verify_passes
            .iter()
            .filter(|x| x.0 < r)
            .max_by_key(|x| x.0)
        else {
            return Some((
                &[],
                format!("no verification passed before its restore test (seq {r})"),
            ));
        };
        if let Some(&(f, _)) = self
            .verify_fails
            .iter()
            .filter(|x| x.0 < r)
            .max_by_key(|x| x.0)
        {
            if f > v {
                return Some((
                    &[],
                    format!("the latest verification before seq {r} failed (seq {f})"),
                ));
            }
        }
        for &(f, depth) in self.verify_fails.iter().filter(|x| x.0 < r) {
            let cleared = self
                .verify_passes
                .iter()
                .any(|&(p, d)| p > f && p < r && d.covers(&depth));
            if !cleared {
                return Some((&[], format!("the verification failure at seq {f} ({depth:?}) was open at its restore test")));
            }
        }
        // ... with no restore failure left open (a complete pass clears one).
        for &f in &self.restore_fails {
            if !self
                .restore_passes
                .iter()
                .any(|&(p, _, complete)| p > f && complete)
            {
                return Some((&[], format!("the restore failure at seq {f} was never cleared by a complete restore test")));
            }
        }
        // Caps: a check without a verdict is cleared by any later passed
        // verification or proving restore test; read-back damage by a
        // verification that reads all data or a complete restore test
        // whose job began after it.
        for &(c, k) in &self.negatives {
            let cleared = match k {
                Neg::CheckJob => {
                    self.verify_passes.iter().any(|&(p, _)| p > c)
                        || self.restore_passes.iter().any(|&(p, vac, _)| p > c && !vac)
                }
                // ... by a full read whose job began after it.
                Neg::ReadBack => self.full_reads.iter().any(|&b| b > c),
                _ => true,
            };
            if !cleared {
                let (tag, what): (&'static [&'static str], &str) = if k == Neg::CheckJob {
                    (&["C1"], "a check job without a verdict")
                } else {
                    (&["H1"], "read-back damage")
                };
                return Some((tag, format!("{what} at seq {c} was never cleared")));
            }
        }
        None
    }
}

#[derive(Debug)]
struct PlanFacts {
    definition: PlanDefinition,
    /// Seq of the creation or the last change of source or repository.
    epoch: u64,
}

/// The facts of a log, gathered in one pass.
#[derive(Default)]
pub struct Facts {
    points: BTreeMap<SnapshotId, PointFacts>,
    plans: BTreeMap<PlanId, PlanFacts>,
    /// Unreadable events that may be about any plan.
    all_capped_by: Option<u64>,
    /// The first unreadable job/plan/backup event about each plan (by the
    /// rules of `docs/events.md`, M6: the plan it names or its job's).
    plan_caps: HashMap<PlanId, u64>,
    /// Job id -> (kind, point, plan, started without a verdict yet).
    jobs: HashMap<String, (JobKind, Option<SnapshotId>, Option<PlanId>, bool)>,
    /// Check jobs running: the seq of their `job.started`.
    check_started: HashMap<String, u64>,
}

/// The point id a payload starts with (the documented rule for unknown
/// point events: an array whose first element is `c4 20` + 32 bytes).
fn leading_point(payload: &[u8]) -> Option<SnapshotId> {
    let rest = match *payload.first()? {
        0x91..=0x9f => payload.get(1..)?,
        0xdc => payload.get(3..)?,
        _ => return None,
    };
    if rest.get(..2)? != [0xc4, 0x20] {
        return None;
    }
    Some(SnapshotId(rest.get(2..34)?.try_into().ok()?))
}

/// The string a payload starts with (a job or plan id), if any.
fn leading_str(payload: &[u8]) -> Option<String> {
    let rest = match *payload.first()? {
        0x91..=0x9f => payload.get(1..)?,
        _ => return None,
    };
    let (len, from) = match *rest.first()? {
        b @ 0xa0..=0xbf => (usize::from(b & 0x1f), 1),
        0xd9 => (usize::from(*rest.get(1)?), 2),
        _ => return None,
    };
    String::from_utf8(rest.get(from..from + len)?.to_vec()).ok()
}

impl Facts {
    /// Gathers the facts of `envs`, skipping negative facts the projection
    /// found inconsistent (`skip`: their seqs): an event that does not fit
    /// changes nothing, by the documented rule.
    pub fn gather(envs: &[Envelope], skip: &BTreeSet<u64>) -> Facts {
        let mut f = Facts::default();
        for env in envs {
            f.apply(env, skip.contains(&env.seq));
        }
        f
    }

    /// Folds one more event (in seq order); `skipped`: the projection
    /// found it inconsistent. The fast tier folds its facts this way, one
    /// event at a time, instead of gathering the whole log every step.
    pub fn apply(&mut self, env: &Envelope, skipped: bool) {
        let mut jobs = std::mem::take(&mut self.jobs);
        let f: &mut Facts = self;
        {
            let seq = env.seq;
            let neg = |f: &mut Facts, point: &SnapshotId, kind: Neg| {
                if skipped {
                    return;
                }
                if let Some(p) = f.points.get_mut(point) {
                    p.negatives.push((seq, kind));
                }
            };
            // A verdict of a check job ends its "started without a verdict"
            // (docs/events.md, "Caps"): a later `job.abandoned` of it (its
            // `job.finished` lost to a repaired log, say) caps nothing.
            let verdict_job = match &env.event {
                Event::VerificationPassed(e) => e.job.as_ref(),
                Event::VerificationFailed(e) => e.job.as_ref(),
                Event::RestoreTestPassed(e) => e.job.as_ref(),
                Event::RestoreTestFailed(e) => e.job.as_ref(),
                _ => None,
            };
            if let Some(j) = verdict_job.filter(|_| !skipped) {
                if let Some(entry) = jobs.get_mut(j.as_str()) {
                    entry.3 = false;
                }
            }
            // Where the check that reached this verdict began reading: a
            // full read clears read-back damage recorded before that only.
            let began = verdict_job
                .filter(|_| !skipped)
                .and_then(|j| f.check_started.remove(j.as_str()))
                .unwrap_or(seq);
            match &env.event {
                Event::BackupCommitted(e) => {
                    f.points.entry(e.snapshot).or_insert(PointFacts {
                        repository: Some(e.repository.clone()),
                        files: Some(e.summary.files),
                        since: seq,
                        ..Default::default()
                    });
                }
                Event::PointDiscovered(e) => {
                    f.points.entry(e.snapshot).or_insert(PointFacts {
                        repository: Some(e.repository.clone()),
                        since: seq,
                        ..Default::default()
                    });
                }
                Event::VerificationPassed(e) if !skipped => {
                    if let Some(p) = f.points.get_mut(&e.point) {
                        p.verify_passes.push((seq, e.depth));
                        if e.depth.covers(&VerifyDepth::ReadAll) {
                            p.full_reads.push(began);
                        }
                    }
                }
                Event::RestoreTestPassed(e) if !skipped => {
                    if let Some(p) = f.points.get_mut(&e.point) {
                        let vacuous = e.evidence.files == 0 || e.evidence.digests_compared == 0;
                        p.restore_passes.push((seq, vacuous, e.evidence.complete));
                        if !vacuous && e.evidence.complete {
                            p.full_reads.push(began);
                        }
                    }
                }
                Event::VerificationFailed(e) => {
                    neg(f, &e.point, Neg::Verdict);
                    if let Some(p) = f.points.get_mut(&e.point).filter(|_| !skipped) {
                        p.verify_fails.push((seq, e.depth));
                    }
                }
                Event::RestoreTestFailed(e) => {
                    neg(f, &e.point, Neg::Verdict);
                    if let Some(p) = f.points.get_mut(&e.point).filter(|_| !skipped) {
                        p.restore_fails.push(seq);
                    }
                }
                Event::PointVanished(e) => neg(f, &e.point, Neg::Vanished),
                Event::PointForgotten(e) if !skipped => {
                    if let Some(p) = f.points.get_mut(&e.point) {
                        p.forgotten = true;
                    }
                }
                Event::JobScheduled(e) => {
                    let entry = jobs.entry(e.job.to_string()).or_insert((
                        e.kind,
                        e.point,
                        e.plan.clone(),
                        false,
                    ));
                    entry.3 = false;
                }
                Event::JobStarted(e) => {
                    if let Some(j) = jobs.get_mut(e.job.as_str()) {
                        j.3 = true;
                        if j.1.is_some() && j.0 != JobKind::Copy {
                            f.check_started.insert(e.job.to_string(), seq);
                        }
                    }
                }
                Event::JobFinished(e) => {
                    f.check_started.remove(e.job.as_str());
                }
                Event::JobFailed(_) | Event::JobAbandoned(_) => {
                    let id = match &env.event {
                        Event::JobFailed(e) => e.job.to_string(),
                        Event::JobAbandoned(e) => e.job.to_string(),
                        _ => unreachable!(),
                    };
                    f.check_started.remove(&id);
                    if let Some(&(kind, Some(point), _, true)) = jobs.get(&id) {
                        if matches!(kind, JobKind::Verify | JobKind::RestoreTest) {
                            neg(f, &point, Neg::CheckJob);
                        }
                    }
                }
                Event::PacksReadBack(e) if !e.damaged_packs.is_empty() || !e.damaged.is_empty() => {
                    let hit: Vec<SnapshotId> = match &e.affected_points {
                        Some(list) => list.clone(),
                        None => f
                            .points
                            .iter()
                            .filter(|(_, p)| p.repository.as_ref() == Some(&e.repository))
                            .map(|(id, _)| *id)
                            .collect(),
                    };
                    for id in hit {
                        neg(f, &id, Neg::ReadBack);
                    }
                }
                // A plan event that does not fit (created twice, changed
                // while it does not exist) changes nothing.
                Event::PlanCreated(_) | Event::PlanChanged(_) if skipped => {}
                Event::PlanCreated(e) => {
                    f.plans.insert(
                        e.plan.clone(),
                        PlanFacts {
                            definition: e.definition.clone(),
                            epoch: seq,
                        },
                    );
                }
                Event::PlanChanged(e) => {
                    if let Some(p) = f.plans.get_mut(&e.plan) {
                        if p.definition.source != e.definition.source
                            || p.definition.repository != e.definition.repository
                        {
                            p.epoch = seq;
                        }
                        p.definition = e.definition.clone();
                    }
                }
                Event::Unknown(u) => {
                    let family = u.event_type.split('.').next().unwrap_or("");
                    match family {
                        "verification" | "restore_test" | "point" | "anomaly" => {
                            if let Some(id) = leading_point(&u.payload) {
                                neg(f, &id, Neg::Unknown);
                            }
                        }
                        // The plan it names, whether or not it exists
                        // yet (the cap outlives a removal and a
                        // re-creation: the event stays in the log).
                        "plan" => match leading_str(&u.payload) {
                            Some(s) => {
                                f.plan_caps.entry(PlanId::new(s.as_str())).or_insert(seq);
                            }
                            None => f.all_capped_by = Some(seq),
                        },
                        // Its job's plan; a job of no plan is about no
                        // plan; a job the log does not know, about any.
                        "job" | "backup" => {
                            match leading_str(&u.payload).map(|s| jobs.get(&s).map(|j| j.2.clone()))
                            {
                                Some(Some(Some(plan))) => {
                                    f.plan_caps.entry(plan).or_insert(seq);
                                }
                                Some(Some(None)) => {}
                                _ => f.all_capped_by = Some(seq),
                            }
                        }
                        "repository" => f.all_capped_by = Some(seq),
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        f.jobs = jobs;
    }
}

/// Safety: no point `recoverable` unless its facts allow it (see
/// [`PointFacts::not_recoverable`]); no plan `protected` without such a
/// point recorded after its epoch (its creation, re-creation, or last
/// change of source or repository: M7), nor while an unreadable event may
/// be about it (M6).
pub fn safety(envs: &[Envelope], p: &Projections, now: i64) -> Vec<Violation> {
    let skip: BTreeSet<u64> = p.inconsistencies.iter().map(|i| i.at.seq).collect();
    safety_of(&Facts::gather(envs, &skip), p, now)
}

/// [`safety`] over facts already gathered (the fast tier folds them one
/// event at a time).
pub fn safety_of(facts: &Facts, p: &Projections, _now: i64) -> Vec<Violation> {
    let mut out = Vec::new();
    for (id, pt) in &p.points.points {
        if pt.state != PointState::Recoverable {
            continue;
        }
        let Some(f) = facts.points.get(id) else {
            out.push(violation(
                "point-safety",
                &[],
                format!(
                    "point {} is recoverable but the log never recorded it",
                    id.short()
                ),
            ));
            continue;
        };
        if let Some((tags, why)) = f.not_recoverable() {
            out.push(violation(
                "point-safety",
                tags,
                format!(
                    "point {} is recoverable but {why} (files {:?}, negatives {:?}, verify passes {:?}, restore passes {:?})",
                    id.short(), f.files, f.negatives, f.verify_passes, f.restore_passes
                ),
            ));
        }
    }
    for (id, plan) in &p.plans.plans {
        if plan.removed.is_some() {
            continue;
        }
        if p.plan_protection(id, _now).status != Protection::Protected {
            continue;
        }
        let Some(pf) = facts.plans.get(id) else {
            out.push(violation(
                "plan-safety",
                &[],
                format!("plan {id} is protected but was never created"),
            ));
            continue;
        };
        if let Some(at) = facts.plan_caps.get(id).copied().or(facts.all_capped_by) {
            out.push(violation(
                "plan-safety",
                &["M6"],
                format!(
                    "plan {id} is protected while an unreadable event at seq {at} may be about it"
                ),
            ));
            continue;
        }
        let proven: Vec<&PointFacts> = p
            .points
            .of_plan(id)
            .filter(|pt| pt.state == PointState::Recoverable)
            .filter_map(|pt| facts.points.get(&pt.id))
            .filter(|f| f.not_recoverable().is_none())
            .collect();
        if proven.iter().any(|f| f.since > pf.epoch) {
            continue;
        }
        let tags: &[&'static str] = if proven.is_empty() { &[] } else { &["M7"] };
        out.push(violation(
            "plan-safety",
            tags,
            format!(
                "plan {id} is protected with no point proven after its epoch (seq {})",
                pf.epoch
            ),
        ));
    }
    out
}

/// The order on point states of the monotonicity oracle.
pub fn rank(s: PointState) -> u8 {
    match s {
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

/// Monotonicity: `with` is `without` plus negative facts; nothing may
/// stand higher in `with`.
pub fn monotone(what: &str, without: &Projections, with: &Projections, now: i64) -> Vec<Violation> {
    let mut out = Vec::new();
    for (id, pt) in &without.points.points {
        let after = with.points.state_of(id);
        if rank(after) > rank(pt.state) {
            out.push(violation(
                "monotonicity",
                &[],
                format!(
                    "{what} raised point {} from {} to {}",
                    id.short(),
                    pt.state,
                    after
                ),
            ));
        }
    }
    for id in without.plans.plans.keys() {
        let (a, b) = (
            without.plan_protection(id, now).status,
            with.plan_protection(id, now).status,
        );
        if b > a {
            out.push(violation(
                "monotonicity",
                &[],
                format!("{what} raised plan {id} from {a} to {b}"),
            ));
        }
    }
    out
}

/// One alert per incident: never two open for one subject, never resolved
/// twice (read from the log).
pub fn alerts_in_log(envs: &[Envelope]) -> Vec<Violation> {
    let mut log = AlertLog::default();
    envs.iter().flat_map(|env| log.apply(env)).collect()
}

/// [`alerts_in_log`] one event at a time: the alerts open by the log.
#[derive(Clone, Debug, Default)]
pub struct AlertLog {
    /// Subject -> the open alert's id.
    open: HashMap<String, String>,
    /// Alert id -> its subject.
    subject_of: HashMap<String, String>,
}

impl AlertLog {
    /// Folds one event; what it breaks.
    pub fn apply(&mut self, env: &Envelope) -> Vec<Violation> {
        let mut out = Vec::new();
        match &env.event {
            Event::AlertRaised(a) => {
                if let Some(other) = self.open.get(&a.subject) {
                    out.push(violation(
                        "alerts",
                        &["L5"],
                        format!(
                            "seq {}: a second alert {} for the incident {:?} while {} is open",
                            env.seq, a.alert, a.subject, other
                        ),
                    ));
                }
                self.open.insert(a.subject.clone(), a.alert.to_string());
                self.subject_of
                    .insert(a.alert.to_string(), a.subject.clone());
            }
            Event::AlertResolved(r) => {
                let subject = self.subject_of.get(r.alert.as_str()).cloned();
                match subject {
                    Some(s) if self.open.get(&s).map(String::as_str) == Some(r.alert.as_str()) => {
                        self.open.remove(&s);
                    }
                    // The alerter's re-evaluation reads projections that
                    // do not hold its own last batch yet (a stale read, L5).
                    _ => out.push(violation(
                        "alerts",
                        &["L5"],
                        format!("seq {}: alert {} resolved but not open", env.seq, r.alert),
                    )),
                }
            }
            _ => {}
        }
        out
    }
}

/// After an evaluation, the open alerts are exactly the open incidents:
/// those of the rules over the projections and those of the rules over the
/// log's facts (`facts`: vanished points, log repairs, clock steps, folded
/// by the harness from the same log). The one rule that reads the
/// alerter's memory (`PlanNotProven`: a plan `unknown` or `at-risk` since
/// longer than its RPO, timed from when the alerter first saw it so in its
/// current run) is checked from one side only: such an alert may be open
/// only while its plan is still in that state.
pub fn alerts_match(
    p: &Projections,
    facts: &vouch_actors::service::AlertFacts,
    now: i64,
) -> Vec<Violation> {
    let mut wanted: BTreeSet<String> =
        vouch_actors::service::incidents(p, now, std::time::Duration::from_secs(600))
            .into_iter()
            .map(|i| i.subject)
            .collect();
    wanted.extend(
        vouch_actors::service::fact_incidents(facts, now)
            .into_iter()
            .map(|i| i.subject),
    );
    let not_proven: BTreeSet<String> = p
        .plans
        .plans
        .values()
        .filter(|pl| pl.removed.is_none())
        .filter_map(|pl| {
            let status = p.plan_protection(&pl.id, now).status;
            matches!(status, Protection::Unknown | Protection::AtRisk)
                .then(|| format!("plan {}: {} too long", pl.id, status.as_str()))
        })
        .collect();
    let mut open: BTreeMap<String, usize> = BTreeMap::new();
    for a in p.alerts.open() {
        *open.entry(a.subject.clone()).or_default() += 1;
    }
    let mut out = Vec::new();
    for s in &wanted {
        match open.get(s) {
            None => out.push(violation(
                "alerts",
                &[],
                format!("incident {s:?} has no open alert"),
            )),
            Some(n) if *n > 1 => out.push(violation(
                "alerts",
                &[],
                format!("incident {s:?} has {n} open alerts"),
            )),
            _ => {}
        }
    }
    for (s, n) in &open {
        if wanted.contains(s) {
            continue;
        }
        if not_proven.contains(s) {
            if *n > 1 {
                out.push(violation(
                    "alerts",
                    &[],
                    format!("incident {s:?} has {n} open alerts"),
                ));
            }
            continue;
        }
        out.push(violation(
            "alerts",
            &[],
            format!("alert {s:?} is open but its incident is over"),
        ));
    }
    out
}

/// Every acknowledged event is in the log unchanged, unless this reopen
/// recorded that it cut it: a `service.log_repaired` with
/// `lost_acknowledged` that was not acknowledged before the reopen (an
/// older repair excuses nothing new) and whose cut starts at or below the
/// lost seq.
pub fn acknowledged(acked: &[(u64, [u8; 32])], envs: &[Envelope], rot: bool) -> Vec<Violation> {
    let by_seq: HashMap<u64, [u8; 32]> = envs.iter().map(|e| (e.seq, e.hash.0)).collect();
    let before: HashMap<u64, [u8; 32]> = acked.iter().copied().collect();
    let repaired_from = envs
        .iter()
        .filter(|e| before.get(&e.seq) != Some(&e.hash.0))
        .filter_map(|e| match &e.event {
            Event::LogRepaired(r) if r.lost_acknowledged => Some(r.from_seq),
            _ => None,
        })
        .min();
    let mut out = Vec::new();
    for (seq, hash) in acked {
        match by_seq.get(seq) {
            Some(h) if h == hash => {}
            _ if repaired_from.is_some_and(|from| from <= *seq) => {}
            got => {
                let what = if got.is_some() { "changed" } else { "lost" };
                out.push(violation(
                    "acknowledged",
                    &[],
                    format!(
                        "acknowledged event {seq} was {what} silently by a reopen{}",
                        if rot {
                            " (after bit rot of the last acknowledged record)"
                        } else {
                            ""
                        }
                    ),
                ));
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    //! The oracles catch what they must, independently of the projection.

    use std::time::Duration;

    use vouch_events::{
        AlertId, AlertRaised, BackupCommitted, BackupSummary, EventHash, JobFailed, JobId,
        JobScheduled, JobStarted, KeepPolicy, PlanCreated, RestoreEvidence, RestoreTestPassed,
        RestoreTestPolicy, Severity, VerificationFailed, VerificationPassed, VerificationPolicy,
        VerificationStarted, VerifyDepth,
    };

    use super::*;

    const NOW: i64 = 1_800_000_000 * 1_000_000_000;

    fn envs(events: Vec<Event>) -> Vec<Envelope> {
        events
            .into_iter()
            .enumerate()
            .map(|(i, event)| Envelope {
                seq: i as u64 + 1,
                recorded_unix_ns: NOW,
                schema_version: 1,
                prev_hash: EventHash([0; 32]),
                hash: EventHash([i as u8; 32]),
                event,
            })
            .collect()
    }

    fn plan() -> Event {
        PlanCreated {
            plan: PlanId::new("p"),
            definition: PlanDefinition {
                source: "/data".into(),
                schedule: "0 * * * *".into(),
                retention: KeepPolicy::default(),
                verification: VerificationPolicy {
                    after_backup: true,
                    every: None,
                    depth: VerifyDepth::Structure,
                },
                restore_test: RestoreTestPolicy {
                    every: Some(Duration::from_secs(3600)),
                    max_evidence_age: Duration::from_secs(86_400),
                    sample_files: None,
                    full_every: None,
                    boot: None,
                },
                rpo: Duration::from_secs(86_400),
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

    fn proven(point: SnapshotId, files: u64) -> Vec<Event> {
        vec![
            plan(),
            BackupCommitted {
                job: None,
                plan: Some(PlanId::new("p")),
                repository: RepositoryId::new("main"),
                snapshot: point,
                snapshot_time_unix_ns: NOW,
                summary: BackupSummary {
                    files,
                    bytes: files,
                    added_bytes: 0,
                    stored_bytes: 0,
                    duration_ms: 0,
                    total_bytes: None,
                    warnings: None,
                },
                changes: None,
            }
            .into(),
            VerificationPassed {
                point,
                job: None,
                depth: VerifyDepth::ReadAll,
                bytes_read: 1,
                blobs_checked: 1,
            }
            .into(),
            RestoreTestPassed {
                point,
                job: None,
                evidence: RestoreEvidence {
                    files,
                    digests_compared: files,
                    digests_matched: files,
                    ..RestoreEvidence::default()
                },
            }
            .into(),
        ]
    }

    #[test]
    fn a_proven_point_passes() {
        let log = envs(proven(SnapshotId([1; 32]), 10));
        let p = Projections::fold(log.iter());
        assert_eq!(
            p.points.state_of(&SnapshotId([1; 32])),
            PointState::Recoverable
        );
        assert!(safety(&log, &p, NOW).is_empty());
    }

    #[test]
    fn a_failed_check_job_after_the_proof_is_c1() {
        let point = SnapshotId([1; 32]);
        let job = JobId::new("verify-1");
        let mut events = proven(point, 10);
        events.extend([
            JobScheduled {
                job: job.clone(),
                kind: JobKind::Verify,
                plan: Some(PlanId::new("p")),
                point: Some(point),
                due_unix_ns: NOW,
                attempt: 1,
                spec: Default::default(),
            }
            .into(),
            JobStarted {
                job: job.clone(),
                agent: None,
            }
            .into(),
            VerificationStarted {
                point,
                job: Some(job.clone()),
                depth: VerifyDepth::ReadAll,
            }
            .into(),
            JobFailed {
                job,
                error_kind: "damaged".into(),
                message: "a pack fails authentication".into(),
                retryable: false,
            }
            .into(),
        ]);
        let log = envs(events.clone());
        let mut p = Projections::fold(log.iter());
        // The projection caps it (C1 is fixed) ...
        assert_eq!(p.points.state_of(&point), PointState::Unknown);
        assert!(safety(&log, &p, NOW).is_empty());
        // ... and a projection that did not would be caught.
        if let Some(pt) = p.points.points.get_mut(&point) {
            pt.state = PointState::Recoverable;
        }
        let found = safety(&log, &p, NOW);
        assert!(
            found
                .iter()
                .any(|v| v.oracle == "point-safety" && v.findings.contains("C1")),
            "{found:?}"
        );
        // A later proving restore test clears the cap (docs/events.md,
        // "Caps"): the verification before the failed job still counts.
        events.push(
            RestoreTestPassed {
                point,
                job: None,
                evidence: RestoreEvidence {
                    files: 10,
                    digests_compared: 10,
                    digests_matched: 10,
                    ..RestoreEvidence::default()
                },
            }
            .into(),
        );
        let log = envs(events);
        let p = Projections::fold(log.iter());
        assert_eq!(p.points.state_of(&point), PointState::Recoverable);
        assert!(
            safety(&log, &p, NOW).is_empty(),
            "{:?}",
            safety(&log, &p, NOW)
        );
    }

    /// A check job whose verdict is recorded and which is then abandoned
    /// (its `job.finished` lost to a repaired log) caps nothing: the
    /// simulation, seed 82 at step 118, once read it as C1.
    #[test]
    fn a_job_abandoned_after_its_verdict_caps_nothing() {
        let point = SnapshotId([5; 32]);
        let job = JobId::new("restore-1");
        let mut events = proven(point, 10);
        events.truncate(3); // plan, commit, verification passed
        events.extend([
            JobScheduled {
                job: job.clone(),
                kind: JobKind::RestoreTest,
                plan: Some(PlanId::new("p")),
                point: Some(point),
                due_unix_ns: NOW,
                attempt: 1,
                spec: Default::default(),
            }
            .into(),
            JobStarted {
                job: job.clone(),
                agent: None,
            }
            .into(),
            RestoreTestPassed {
                point,
                job: Some(job.clone()),
                evidence: RestoreEvidence {
                    files: 10,
                    digests_compared: 10,
                    digests_matched: 10,
                    ..RestoreEvidence::default()
                },
            }
            .into(),
            vouch_events::JobAbandoned {
                job,
                reason: "the service stopped while the job was running".into(),
            }
            .into(),
        ]);
        let log = envs(events);
        let p = Projections::fold(log.iter());
        assert_eq!(p.points.state_of(&point), PointState::Recoverable);
        assert!(
            safety(&log, &p, NOW).is_empty(),
            "{:?}",
            safety(&log, &p, NOW)
        );
    }

    /// A second `plan.created` of a live plan is an inconsistency: it does
    /// not move the plan's epoch, so the points before it still protect it.
    #[test]
    fn a_plan_created_twice_keeps_its_epoch() {
        let point = SnapshotId([6; 32]);
        let mut events = proven(point, 10);
        events.push(plan());
        let log = envs(events);
        let p = Projections::fold(log.iter());
        assert_eq!(p.inconsistencies.len(), 1);
        assert_eq!(
            p.plan_protection(&PlanId::new("p"), NOW).status,
            Protection::Protected
        );
        assert!(
            safety(&log, &p, NOW).is_empty(),
            "{:?}",
            safety(&log, &p, NOW)
        );
    }

    /// Read-back damage is cleared only by a verification that reads all
    /// data or a complete restore test: a sampled restore test is not
    /// enough.
    #[test]
    fn read_back_damage_needs_a_deep_check() {
        let point = SnapshotId([4; 32]);
        let mut events = proven(point, 10);
        events.push(
            vouch_events::PacksReadBack {
                repository: RepositoryId::new("main"),
                job: None,
                slices: vec![0],
                of: 1,
                packs: 1,
                bytes_read: 1,
                damaged: vec!["pack 00".into()],
                damaged_packs: vec!["00".repeat(32)],
                affected_points: Some(vec![point]),
            }
            .into(),
        );
        events.push(
            RestoreTestPassed {
                point,
                job: None,
                evidence: RestoreEvidence {
                    files: 5,
                    digests_compared: 5,
                    digests_matched: 5,
                    files_in_point: Some(10),
                    complete: false,
                    ..RestoreEvidence::default()
                },
            }
            .into(),
        );
        let log = envs(events);
        let mut p = Projections::fold(log.iter());
        assert_eq!(p.points.state_of(&point), PointState::Unknown);
        if let Some(pt) = p.points.points.get_mut(&point) {
            pt.state = PointState::Recoverable;
        }
        let found = safety(&log, &p, NOW);
        assert!(found.iter().any(|v| v.findings.contains("H1")), "{found:?}");
    }

    #[test]
    fn an_empty_point_is_h3() {
        let log = envs(proven(SnapshotId([2; 32]), 0));
        let p = Projections::fold(log.iter());
        let found = safety(&log, &p, NOW);
        if p.points.state_of(&SnapshotId([2; 32])) == PointState::Recoverable {
            assert!(found.iter().any(|v| v.findings.contains("H3")), "{found:?}");
        }
    }

    /// A projection that says `recoverable` after a failed verification
    /// (as a bug in `derive_state` would) is caught, as no known finding.
    #[test]
    fn a_projection_bug_is_caught_and_not_excused() {
        let point = SnapshotId([3; 32]);
        let mut events = proven(point, 10);
        events.push(
            VerificationFailed {
                point,
                job: None,
                depth: VerifyDepth::ReadAll,
                bytes_read: 1,
                damaged: vec!["x".into()],
            }
            .into(),
        );
        let log = envs(events);
        let mut p = Projections::fold(log.iter());
        assert_ne!(p.points.state_of(&point), PointState::Recoverable);
        if let Some(pt) = p.points.points.get_mut(&point) {
            pt.state = PointState::Recoverable;
        }
        let found = safety(&log, &p, NOW);
        assert!(
            found.iter().any(|v| v.oracle == "point-safety"),
            "{found:?}"
        );
        // And monotonicity sees the raise.
        let before = Projections::fold(log.iter());
        assert!(!monotone("the bug", &before, &p, NOW).is_empty());
    }

    #[test]
    fn two_alerts_for_one_incident_and_lost_acknowledged_events_are_caught() {
        let raise = |id: &str| -> Event {
            AlertRaised {
                alert: AlertId::new(id),
                severity: Severity::Critical,
                subject: "plan p: backup failed".into(),
                message: String::new(),
                rule: "BackupFailed".into(),
                labels: Default::default(),
            }
            .into()
        };
        let log = envs(vec![raise("a"), raise("b")]);
        assert_eq!(alerts_in_log(&log).len(), 1);
        let acked: Vec<(u64, [u8; 32])> = log.iter().map(|e| (e.seq, e.hash.0)).collect();
        assert!(acknowledged(&acked, &log, false).is_empty());
        let found = acknowledged(&acked, &log[..1], false);
        assert_eq!(found.len(), 1, "{found:?}");
        // Bit rot lost silently is a failure too (M1 is fixed).
        let found = acknowledged(&acked, &log[..1], true);
        assert_eq!(found.len(), 1, "{found:?}");
    }

    fn repaired(from_seq: u64) -> Event {
        vouch_events::LogRepaired {
            from_seq,
            bytes: 10,
            acknowledged_seq: from_seq,
            lost_acknowledged: true,
            reason: "bit rot".into(),
        }
        .into()
    }

    /// A loss is excused by the repair this reopen recorded, from its
    /// `from_seq` on; not by one recorded before, nor below its cut.
    #[test]
    fn only_the_reopens_own_repair_excuses_a_lost_acknowledged_event() {
        let raise = || -> Event {
            vouch_events::ServiceStarted {
                version: "x".into(),
            }
            .into()
        };
        let acked_log = envs(vec![raise(), raise(), raise()]);
        let acked: Vec<(u64, [u8; 32])> = acked_log.iter().map(|e| (e.seq, e.hash.0)).collect();
        // Cut from seq 3: the repair is recorded at seq 3 (a new hash).
        let mut after = envs(vec![raise(), raise(), repaired(3)]);
        after[2].hash = EventHash([99; 32]);
        assert!(acknowledged(&acked, &after, true).is_empty());
        // Its cut starts at 3: losing seq 2 is not excused.
        let mut lost_two = envs(vec![raise(), repaired(3)]);
        lost_two[1].hash = EventHash([98; 32]);
        assert_eq!(acknowledged(&acked, &lost_two, true).len(), 1);
        // A repair acknowledged before this reopen excuses nothing new.
        let old = envs(vec![raise(), repaired(1), raise()]);
        let acked_old: Vec<(u64, [u8; 32])> = old.iter().map(|e| (e.seq, e.hash.0)).collect();
        assert_eq!(acknowledged(&acked_old, &old[..2], false).len(), 1);
    }
}
