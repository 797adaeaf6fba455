//! The oracles: simple, independent re-statements of the rules, checked
//! against the log and the live service after every step. None of them
//! calls the projection's own derivations (`Point::derive_state`,
//! `plan_protection`'s internals): they read the raw events.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use vouch_events::{
    Envelope, Event, JobKind, PlanDefinition, PlanId, PointState, Projections, Protection,
    RepositoryId, SnapshotId,
};

/// A finding of the review whose fix is not on this branch yet: oracle
/// failures it explains are expected, by name, unless `VOUCH_SIM_STRICT=1`.
pub const KNOWN_OPEN: &[&str] = &["C1", "H1", "H2", "H3", "M1", "M6", "M7", "L5"];

/// What an oracle found.
#[derive(Clone, Debug)]
pub struct Violation {
    /// The oracle.
    pub oracle: &'static str,
    /// The findings that explain it (empty: none known; a real failure).
    pub findings: BTreeSet<&'static str>,
    /// For humans.
    pub detail: String,
}

impl Violation {
    /// Whether a known-open finding explains it.
    pub fn expected(&self) -> bool {
        !self.findings.is_empty() && self.findings.iter().all(|f| KNOWN_OPEN.contains(f))
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tags: Vec<&str> = self.findings.iter().copied().collect();
        write!(
            f,
            "[{}] {} ({})",
            self.oracle,
            self.detail,
            if tags.is_empty() {
                "no known finding".into()
            } else {
                tags.join(",")
            }
        )
    }
}

fn violation(oracle: &'static str, findings: &[&'static str], detail: String) -> Violation {
    Violation {
        oracle,
        findings: findings.iter().copied().collect(),
        detail,
    }
}

/// Kinds of negative facts about a point.
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

impl Neg {
    fn finding(self) -> Option<&'static str> {
        match self {
            Neg::Verdict | Neg::Unknown => None,
            Neg::CheckJob => Some("C1"),
            Neg::ReadBack => Some("H1"),
            Neg::Vanished => Some("H2"),
        }
    }
}

#[derive(Default, Debug)]
struct PointFacts {
    repository: Option<RepositoryId>,
    files: Option<u64>,
    since: u64,
    negatives: Vec<(u64, Neg)>,
    verify_passes: Vec<u64>,
    /// Seq, and whether the evidence restored nothing.
    restore_passes: Vec<(u64, bool)>,
    forgotten: bool,
}

impl PointFacts {
    /// Whether the facts allow `recoverable`, counting the negative facts
    /// `counts` says count, and the empty-point rule if `empty_rule`.
    fn may_be_recoverable(&self, counts: &dyn Fn(Neg) -> bool, empty_rule: bool) -> bool {
        if self.forgotten || (empty_rule && self.files == Some(0)) {
            return false;
        }
        let last_neg = self
            .negatives
            .iter()
            .filter(|(_, k)| counts(*k))
            .map(|(s, _)| *s)
            .max()
            .unwrap_or(0);
        self.restore_passes.iter().any(|&(r, vacuous)| {
            r > last_neg
                && !(empty_rule && vacuous)
                && self.verify_passes.iter().any(|&v| v > last_neg && v < r)
        })
    }

    /// The known findings that make the difference between the strict and
    /// the relaxed rule for this point: those that alone explain it, or, if
    /// none does, every known one that may take part.
    fn explain(&self) -> BTreeSet<&'static str> {
        let kinds = [Neg::CheckJob, Neg::ReadBack, Neg::Vanished];
        let mut alone: BTreeSet<&'static str> = kinds
            .iter()
            .filter(|k| self.may_be_recoverable(&|x: Neg| x != **k, true))
            .filter_map(|k| k.finding())
            .collect();
        if self.may_be_recoverable(&|_| true, false) {
            alone.insert("H3");
        }
        if !alone.is_empty() {
            return alone;
        }
        let relaxed_last = self
            .negatives
            .iter()
            .filter(|(_, k)| k.finding().is_none())
            .map(|(s, _)| *s)
            .max()
            .unwrap_or(0);
        let mut out: BTreeSet<&'static str> = self
            .negatives
            .iter()
            .filter(|(s, _)| *s > relaxed_last)
            .filter_map(|(_, k)| k.finding())
            .collect();
        if self.files == Some(0) || self.restore_passes.iter().any(|r| r.1) {
            out.insert("H3");
        }
        out
    }
}

#[derive(Debug)]
struct PlanFacts {
    definition: PlanDefinition,
    /// Seq of the creation or the last change of source or repository.
    epoch: u64,
    /// An unreadable job/plan/backup/repository event may be about it.
    capped_by: Option<u64>,
}

/// The facts of a log, gathered in one pass.
#[derive(Default)]
pub struct Facts {
    points: BTreeMap<SnapshotId, PointFacts>,
    plans: BTreeMap<PlanId, PlanFacts>,
    /// Unreadable events that may be about any plan.
    all_capped_by: Option<u64>,
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
        // job -> (kind, point, plan, started)
        let mut jobs: HashMap<String, (JobKind, Option<SnapshotId>, Option<PlanId>, bool)> =
            HashMap::new();
        for env in envs {
            let seq = env.seq;
            let neg = |f: &mut Facts, point: &SnapshotId, kind: Neg| {
                if skip.contains(&seq) {
                    return;
                }
                if let Some(p) = f.points.get_mut(point) {
                    p.negatives.push((seq, kind));
                }
            };
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
                Event::VerificationPassed(e) if !skip.contains(&seq) => {
                    if let Some(p) = f.points.get_mut(&e.point) {
                        p.verify_passes.push(seq);
                    }
                }
                Event::RestoreTestPassed(e) if !skip.contains(&seq) => {
                    if let Some(p) = f.points.get_mut(&e.point) {
                        let vacuous = e.evidence.files == 0 || e.evidence.digests_compared == 0;
                        p.restore_passes.push((seq, vacuous));
                    }
                }
                Event::VerificationFailed(e) => neg(&mut f, &e.point, Neg::Verdict),
                Event::RestoreTestFailed(e) => neg(&mut f, &e.point, Neg::Verdict),
                Event::PointVanished(e) => neg(&mut f, &e.point, Neg::Vanished),
                Event::PointForgotten(e) if !skip.contains(&seq) => {
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
                    }
                }
                Event::JobFailed(_) | Event::JobAbandoned(_) => {
                    let id = match &env.event {
                        Event::JobFailed(e) => e.job.to_string(),
                        Event::JobAbandoned(e) => e.job.to_string(),
                        _ => unreachable!(),
                    };
                    if let Some(&(kind, Some(point), _, true)) = jobs.get(&id) {
                        if matches!(kind, JobKind::Verify | JobKind::RestoreTest) {
                            neg(&mut f, &point, Neg::CheckJob);
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
                        neg(&mut f, &id, Neg::ReadBack);
                    }
                }
                Event::PlanCreated(e) => {
                    f.plans.insert(
                        e.plan.clone(),
                        PlanFacts {
                            definition: e.definition.clone(),
                            epoch: seq,
                            capped_by: None,
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
                                neg(&mut f, &id, Neg::Unknown);
                            }
                        }
                        "job" | "plan" | "backup" | "repository" => {
                            let named = leading_str(&u.payload);
                            let plan = named.as_ref().and_then(|s| {
                                if f.plans.contains_key(&PlanId::new(s.as_str())) {
                                    Some(Some(PlanId::new(s.as_str())))
                                } else {
                                    jobs.get(s).map(|j| j.2.clone())
                                }
                            });
                            match plan {
                                Some(Some(plan)) => {
                                    if let Some(p) = f.plans.get_mut(&plan) {
                                        p.capped_by = Some(seq);
                                    }
                                }
                                _ => f.all_capped_by = Some(seq),
                            }
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        f
    }
}

/// Safety: no point `recoverable` without a restore-test pass after a
/// verification pass, both after its last negative fact; no empty point
/// `recoverable`; no plan `protected` from points recorded before its
/// epoch, or while an unreadable event may be about it.
pub fn safety(envs: &[Envelope], p: &Projections, now: i64) -> Vec<Violation> {
    let skip: BTreeSet<u64> = p.inconsistencies.iter().map(|i| i.at.seq).collect();
    let facts = Facts::gather(envs, &skip);
    let mut out = Vec::new();
    let strict = |_: Neg| true;
    let relaxed = |k: Neg| k.finding().is_none();
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
        if f.may_be_recoverable(&strict, true) {
            continue;
        }
        let known = if f.may_be_recoverable(&relaxed, false) {
            f.explain()
        } else {
            BTreeSet::new()
        };
        let tags: Vec<&'static str> = known.iter().copied().collect();
        out.push(violation(
            "point-safety",
            &tags,
            format!(
                "point {} is recoverable but its facts do not allow it (files {:?}, negatives {:?}, verify passes {:?}, restore passes {:?})",
                id.short(), f.files, f.negatives, f.verify_passes, f.restore_passes
            ),
        ));
    }
    for (id, plan) in &p.plans.plans {
        if plan.removed.is_some() {
            continue;
        }
        if p.plan_protection(id, now).status != Protection::Protected {
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
        let recoverable: Vec<&PointFacts> = p
            .points
            .of_plan(id)
            .filter(|pt| pt.state == PointState::Recoverable)
            .filter_map(|pt| facts.points.get(&pt.id))
            .collect();
        let ok = |rule: &dyn Fn(Neg) -> bool, empty: bool, epoch: bool| {
            recoverable
                .iter()
                .any(|f| f.may_be_recoverable(rule, empty) && (!epoch || f.since > pf.epoch))
        };
        let capped = pf.capped_by.or(facts.all_capped_by);
        if ok(&strict, true, true) && capped.is_none() {
            continue;
        }
        if !ok(&relaxed, false, false) {
            out.push(violation(
                "plan-safety",
                &[],
                format!("plan {id} is protected with no point that may be recoverable"),
            ));
            continue;
        }
        // Every known finding that may take part: the unreadable event
        // (M6), the epoch (M7), and what lets each recoverable point pass
        // only under the relaxed rule.
        let mut tags = BTreeSet::new();
        if capped.is_some() {
            tags.insert("M6");
        }
        if !ok(&relaxed, false, true) {
            tags.insert("M7");
        }
        for f in &recoverable {
            if !f.may_be_recoverable(&strict, true) {
                tags.extend(f.explain());
            }
        }
        let tags: Vec<&'static str> = tags.into_iter().collect();
        out.push(violation(
            "plan-safety",
            &tags,
            format!(
                "plan {id} is protected (epoch seq {}, unreadable event at {:?}) without a proper proof after its epoch",
                pf.epoch, capped
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
    let mut open: HashMap<String, String> = HashMap::new();
    let mut subject_of: HashMap<String, String> = HashMap::new();
    let mut out = Vec::new();
    for env in envs {
        match &env.event {
            Event::AlertRaised(a) => {
                if let Some(other) = open.get(&a.subject) {
                    out.push(violation(
                        "alerts",
                        &["L5"],
                        format!(
                            "seq {}: a second alert {} for the incident {:?} while {} is open",
                            env.seq, a.alert, a.subject, other
                        ),
                    ));
                }
                open.insert(a.subject.clone(), a.alert.to_string());
                subject_of.insert(a.alert.to_string(), a.subject.clone());
            }
            Event::AlertResolved(r) => {
                let subject = subject_of.get(r.alert.as_str()).cloned();
                match subject {
                    Some(s) if open.get(&s).map(String::as_str) == Some(r.alert.as_str()) => {
                        open.remove(&s);
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
    }
    out
}

/// After an evaluation, the open alerts are exactly the open incidents.
pub fn alerts_match(p: &Projections, now: i64) -> Vec<Violation> {
    let wanted: BTreeSet<String> =
        vouch_actors::service::incidents(p, now, std::time::Duration::from_secs(600))
            .into_iter()
            .map(|i| i.subject)
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
                &["L5"],
                format!("incident {s:?} has {n} open alerts"),
            )),
            _ => {}
        }
    }
    for s in open.keys() {
        if !wanted.contains(s) {
            out.push(violation(
                "alerts",
                &[],
                format!("alert {s:?} is open but its incident is over"),
            ));
        }
    }
    out
}

/// Every acknowledged event is in the log unchanged, unless the log says
/// it repaired itself (`service.log_repaired` with `lost_acknowledged`).
pub fn acknowledged(acked: &[(u64, [u8; 32])], envs: &[Envelope], rot: bool) -> Vec<Violation> {
    let by_seq: HashMap<u64, [u8; 32]> = envs.iter().map(|e| (e.seq, e.hash.0)).collect();
    let repaired = envs
        .iter()
        .any(|e| matches!(&e.event, Event::LogRepaired(r) if r.lost_acknowledged));
    let mut out = Vec::new();
    for (seq, hash) in acked {
        match by_seq.get(seq) {
            Some(h) if h == hash => {}
            _ if repaired => {}
            got => {
                let what = if got.is_some() { "changed" } else { "lost" };
                let tags: &[&'static str] = if rot { &["M1"] } else { &[] };
                out.push(violation(
                    "acknowledged",
                    tags,
                    format!("acknowledged event {seq} was {what} silently by a reopen"),
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
                },
                rpo: Duration::from_secs(86_400),
                repository: RepositoryId::new("main"),
                paused: false,
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
                },
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
        let log = envs(events);
        let p = Projections::fold(log.iter());
        let found = safety(&log, &p, NOW);
        if p.points.state_of(&point) == PointState::Recoverable {
            assert!(
                found.iter().any(|v| v.oracle == "point-safety"
                    && v.findings.contains("C1")
                    && v.expected()),
                "{found:?}"
            );
        } else {
            assert!(found.is_empty(), "{found:?}");
        }
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
            found
                .iter()
                .any(|v| v.oracle == "point-safety" && !v.expected()),
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
        assert!(found.len() == 1 && !found[0].expected(), "{found:?}");
        assert!(
            acknowledged(&acked, &log[..1], true)[0].expected(),
            "bit rot is M1"
        );
    }
}
