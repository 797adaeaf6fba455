//! What the runner sees of the service while faults hit it: every event it
//! was acknowledged (to check later that none was lost or changed), the
//! damage it injected and when the service noticed, and the proof rules
//! checked on every sample of points and plans.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::runner::http::Client;

/// An invariant's name, as reports show it.
pub mod inv {
    /// No acknowledged event lost or changed; the log's chain verifies.
    pub const EVENTS: &str = "acknowledged-events";
    /// Every committed snapshot verifies and restores byte-identically.
    pub const SNAPSHOTS: &str = "snapshots-restore";
    /// Every injected damage is found within the window, and the points
    /// it touches are not `recoverable` meanwhile.
    pub const DAMAGE: &str = "damage-detected";
    /// No point `recoverable` and no plan `protected` without proof.
    pub const PROOF: &str = "proof-rules";
    /// Every incident raised exactly one alert, resolved once.
    pub const ALERTS: &str = "alerts-once";
    /// The service came back within the limit after each fault.
    pub const RECOVERY: &str = "recovery-time";
    /// No job ran twice or committed twice.
    pub const JOBS: &str = "jobs-once";
    /// No process panicked; clients failed with a clear error or not at all.
    pub const CLEAN: &str = "clean-failures";
}

/// One broken invariant.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    /// The invariant.
    pub invariant: String,
    /// Seconds since the run began.
    pub at_s: f64,
    /// What was seen.
    pub detail: String,
}

/// An event as the runner was first told of it.
#[derive(Clone, Debug)]
pub struct SeenEvent {
    /// Its hash.
    pub hash: String,
    /// Its type.
    pub kind: String,
    /// Its data, for the types the end checks read (else null).
    pub data: Value,
    /// When it was recorded (the service's clock).
    pub recorded_at: String,
}

/// Damage the runner injected.
#[derive(Clone, Debug, Serialize)]
pub struct Incident {
    /// Its number in the run.
    pub id: usize,
    /// What was damaged, for humans.
    pub what: String,
    /// The repository (`default`, `agent-agent-1`), or none for the log.
    pub repository: Option<String>,
    /// The pack's id, when a pack was damaged.
    pub pack: Option<String>,
    /// A file name an error naming the damage would contain.
    pub file_name: String,
    /// Whether the damage is in the event log.
    pub in_log: bool,
    /// Seconds since the run began.
    pub injected_at_s: f64,
    /// When the service noticed, and by which event.
    pub detected_at_s: Option<f64>,
    /// The event (type and seq) that told.
    pub detected_by: Option<String>,
    /// That event's seq.
    pub detected_seq: Option<u64>,
    /// The seq of the first event that made points suspect or failed them
    /// for it (a read-back naming it, a failed check of a point of its
    /// repository): from then on the points it touches may not be
    /// `recoverable`. A job that merely failed on it (a prune, a backup)
    /// tells the service of no point.
    pub suspected_seq: Option<u64>,
    /// The points the service said it touches (none: every point of the
    /// repository).
    pub affected: Option<Vec<String>>,
    /// When the runner put the bytes back.
    pub healed_at_s: Option<f64>,
}

impl Incident {
    /// Damage just injected at `at_s`, not found yet; its id is given when
    /// it is registered.
    pub fn injected(
        what: String,
        repository: Option<String>,
        pack: Option<String>,
        file_name: String,
        at_s: f64,
    ) -> Incident {
        Incident {
            id: 0,
            what,
            in_log: repository.is_none(),
            repository,
            pack,
            file_name,
            injected_at_s: at_s,
            detected_at_s: None,
            detected_by: None,
            detected_seq: None,
            suspected_seq: None,
            affected: None,
            healed_at_s: None,
        }
    }
}

/// Everything observed; shared between the runner and its sampler.
#[derive(Debug, Default)]
pub struct Observed {
    /// Events by seq.
    pub events: BTreeMap<u64, SeenEvent>,
    /// Where the next read of the log starts.
    pub next_seq: u64,
    /// Broken invariants.
    pub violations: Vec<Violation>,
    /// Checks made, per invariant.
    pub checks: BTreeMap<String, u64>,
    /// Injected damage.
    pub incidents: Vec<Incident>,
    /// Samples taken, and how many found the service unreachable.
    pub samples: u64,
    /// Samples that could not reach the service.
    pub unreachable: u64,
    /// Recoverable points whose proof was checked, by id (state seen).
    pub proven_points: BTreeMap<String, String>,
    /// (incident, point) pairs a sample found recoverable although the
    /// damage touches the point and no full check read it since: a
    /// violation when the next sample finds the same (the read model may
    /// lag the log by a moment).
    pub suspicious: BTreeSet<(usize, String)>,
}

impl Observed {
    /// Counts `n` checks of `invariant`.
    pub fn checked(&mut self, invariant: &str, n: u64) {
        *self.checks.entry(invariant.to_owned()).or_default() += n;
    }

    /// Records a violation.
    pub fn violated(&mut self, invariant: &str, at_s: f64, detail: String) {
        self.violations.push(Violation {
            invariant: invariant.to_owned(),
            at_s,
            detail,
        });
    }

    /// Events of one type, oldest first.
    pub fn of_type<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = (u64, &'a SeenEvent)> {
        self.events
            .iter()
            .filter(move |(_, e)| e.kind == kind)
            .map(|(s, e)| (*s, e))
    }
}

/// The shared observations.
pub type Shared = Arc<Mutex<Observed>>;

/// Locks the observations (a panicked sampler leaves them readable).
pub fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Observed> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Event types whose data the end checks read.
fn keeps_data(kind: &str) -> bool {
    kind.starts_with("alert.raised")
        || kind.starts_with("alert.resolved")
        || matches!(
            kind,
            "job.scheduled"
                | "job.started"
                | "job.finished"
                | "job.failed"
                | "job.abandoned"
                | "backup.committed"
                | "repository.read_back"
                | "verification.passed"
                | "restore_test.passed"
                | "verification.failed"
                | "restore_test.failed"
                | "point.vanished"
                | "point.forgotten"
                | "service.log_scrubbed"
                | "service.log_repaired"
        )
}

/// Reads the log from where the last read ended: new events are recorded;
/// an event whose hash changed is a violation. Returns whether the service
/// answered.
pub fn read_events(client: &Client, obs: &Shared, t0: Instant) -> bool {
    for _ in 0..50 {
        let from = lock(obs).next_seq;
        let page = match client.get_json(&format!("/api/v1/events?from_seq={from}&limit=1000")) {
            Ok(p) => p,
            Err(_) => return false,
        };
        let events = page["events"].as_array().cloned().unwrap_or_default();
        let next = page["next_seq"].as_u64().unwrap_or(from);
        let mut o = lock(obs);
        let at = t0.elapsed().as_secs_f64();
        for e in &events {
            let Some(seq) = e["seq"].as_u64() else {
                continue;
            };
            let hash = e["hash"].as_str().unwrap_or_default().to_owned();
            let kind = e["type"].as_str().unwrap_or_default().to_owned();
            if let Some(old) = o.events.get(&seq) {
                if old.hash != hash {
                    let detail = format!(
                        "event {seq} was {} ({}) and is now {kind} ({hash})",
                        old.kind, old.hash
                    );
                    o.violated(inv::EVENTS, at, detail);
                }
                continue;
            }
            let data = if keeps_data(&kind) {
                e["data"].clone()
            } else {
                Value::Null
            };
            let recorded_at = e["recorded_at"].as_str().unwrap_or_default().to_owned();
            notice_damage(&mut o, seq, &kind, &data, at);
            o.events.insert(
                seq,
                SeenEvent {
                    hash,
                    kind,
                    data,
                    recorded_at,
                },
            );
        }
        o.next_seq = next.max(from);
        if events.is_empty() || next <= from {
            return true;
        }
    }
    true
}

/// Marks the open incidents an event tells of as detected.
fn notice_damage(o: &mut Observed, seq: u64, kind: &str, data: &Value, at: f64) {
    let repo_of = |d: &Value| d["repository"].as_str().map(str::to_owned);
    for inc in o.incidents.iter_mut() {
        if inc.healed_at_s.is_some() {
            continue;
        }
        let same_repo = inc.repository.is_some() && inc.repository == repo_of(data);
        let found = match kind {
            "repository.read_back" if same_repo => {
                let packs = data["damaged_packs"].as_array();
                let named = packs.is_some_and(|p| {
                    p.iter()
                        .any(|x| Some(x.as_str().unwrap_or_default()) == inc.pack.as_deref())
                });
                let unnamed = data["damaged"]
                    .as_array()
                    .is_some_and(|d| d.iter().any(|x| x.to_string().contains(&inc.file_name)));
                if named || unnamed {
                    let affected = data["affected_points"].as_array().map(|a| {
                        a.iter()
                            .filter_map(|p| p.as_str().map(str::to_owned))
                            .collect::<Vec<_>>()
                    });
                    if inc.suspected_seq.is_none() {
                        inc.affected = affected;
                    } else if let (Some(now), Some(new)) = (inc.affected.as_mut(), affected) {
                        now.extend(new);
                    } else {
                        inc.affected = None;
                    }
                }
                named || unnamed
            }
            "verification.failed" | "restore_test.failed" | "point.vanished" if same_repo => {
                if let Some(p) = data["point"].as_str() {
                    if let Some(a) = inc.affected.as_mut() {
                        a.push(p.to_owned());
                    } else if inc.suspected_seq.is_none() {
                        inc.affected = Some(vec![p.to_owned()]);
                    }
                }
                true
            }
            "service.log_scrubbed" if inc.in_log => !data["problem"].is_null(),
            "job.failed" => data.to_string().contains(&inc.file_name),
            _ => false,
        };
        if found && kind != "job.failed" && inc.suspected_seq.is_none() {
            inc.suspected_seq = Some(seq);
        }
        if found && inc.detected_at_s.is_none() {
            inc.detected_at_s = Some(at);
            inc.detected_by = Some(format!("{kind} (seq {seq})"));
            inc.detected_seq = Some(seq);
        }
    }
}

/// One sample: the log, then every point and plan against the proof
/// rules and the open damage.
pub fn sample(client: &Client, obs: &Shared, t0: Instant) {
    lock(obs).samples += 1;
    if !read_events(client, obs, t0) {
        lock(obs).unreachable += 1;
        return;
    }
    let Ok(points) = client.get_json("/api/v1/points?limit=1000") else {
        lock(obs).unreachable += 1;
        return;
    };
    let Ok(plans) = client.get_json("/api/v1/plans") else {
        lock(obs).unreachable += 1;
        return;
    };
    let points = points.as_array().cloned().unwrap_or_default();
    let at = t0.elapsed().as_secs_f64();
    let recoverable: Vec<&Value> = points
        .iter()
        .filter(|p| p["state"] == "recoverable")
        .collect();
    // Each recoverable point's proof, read from its detail.
    for p in &recoverable {
        let id = p["id"].as_str().unwrap_or_default();
        let Ok(detail) = client.get_json(&format!("/api/v1/points/{id}")) else {
            continue;
        };
        let problem = proof_problem(&detail);
        let mut o = lock(obs);
        o.checked(inv::PROOF, 1);
        if let Some(why) = problem {
            o.violated(
                inv::PROOF,
                at,
                format!("point {id} is recoverable but {why}"),
            );
        }
        o.proven_points.insert(id.to_owned(), "recoverable".into());
    }
    let mut o = lock(obs);
    // A protected plan rests on a recoverable point of its own.
    for plan in plans.as_array().into_iter().flatten() {
        if plan["protection"]["status"] != "protected" {
            continue;
        }
        o.checked(inv::PROOF, 1);
        let id = &plan["id"];
        if !recoverable.iter().any(|p| &p["plan"] == id) {
            o.violated(
                inv::PROOF,
                at,
                format!("plan {id} is protected but none of its points is recoverable"),
            );
        }
    }
    drop(o);
    // Points touched by damage the service knows of are not recoverable,
    // unless a full check of the point that began after the detection
    // passed (the damage is in bytes the point does not use). The log is
    // read again first: the checks that made a point recoverable are in
    // it by now.
    read_events(client, obs, t0);
    let mut o = lock(obs);
    let open: Vec<Incident> = o
        .incidents
        .iter()
        .filter(|i| i.suspected_seq.is_some() && i.healed_at_s.is_none() && !i.in_log)
        .cloned()
        .collect();
    let mut now_suspicious = BTreeSet::new();
    for inc in open {
        let cleared = fully_read_since(&o, inc.suspected_seq.unwrap_or(0));
        for p in &recoverable {
            let id = p["id"].as_str().unwrap_or_default();
            let touched = match &inc.affected {
                Some(list) => list.iter().any(|a| a == id),
                None => p["repository"].as_str() == inc.repository.as_deref(),
            };
            o.checked(inv::DAMAGE, 1);
            if !touched || cleared.contains(id) {
                continue;
            }
            let key = (inc.id, id.to_owned());
            if o.suspicious.contains(&key) {
                o.violated(
                    inv::DAMAGE,
                    at,
                    format!(
                        "point {id} is recoverable although the service found damage it touches ({}, {}) and no full check of it began since",
                        inc.what,
                        inc.detected_by.clone().unwrap_or_default()
                    ),
                );
            }
            now_suspicious.insert(key);
        }
    }
    o.suspicious = now_suspicious;
}

/// The points a full check cleared that began after seq `since`: a
/// `ReadAll` verification or a complete restore test that passed, whose
/// job's `job.started` is after `since` (a check that began before may have
/// read the bytes before they were damaged).
pub fn fully_read_since(o: &Observed, since: u64) -> BTreeSet<String> {
    let mut started = BTreeSet::new();
    let mut cleared = BTreeSet::new();
    for (_, e) in o.events.range(since + 1..) {
        let job = e.data["job"].as_str().unwrap_or_default();
        let full = match e.kind.as_str() {
            "job.started" => {
                started.insert(job.to_owned());
                false
            }
            "verification.passed" => e.data["depth"] == "ReadAll",
            "restore_test.passed" => e.data["evidence"]["complete"] == true,
            _ => false,
        };
        if full && started.contains(job) {
            if let Some(point) = e.data["point"].as_str() {
                cleared.insert(point.to_owned());
            }
        }
    }
    cleared
}

/// Why a recoverable point's detail does not show the proof the rules
/// require (none: it does).
pub fn proof_problem(detail: &Value) -> Option<String> {
    let rt = &detail["restore_test"];
    let v = &detail["verification"];
    if rt.is_null() {
        return Some("it has no restore test".into());
    }
    if rt["passed"] != true {
        return Some(format!("its latest restore test did not pass: {rt}"));
    }
    let ev = &rt["evidence"];
    let compared = ev["digests_compared"].as_u64().unwrap_or(0);
    let matched = ev["digests_matched"].as_u64().unwrap_or(0);
    if compared == 0 || matched != compared {
        return Some(format!(
            "its restore test compared {compared} digests and matched {matched}"
        ));
    }
    if v.is_null() || v["passed"] != true {
        return Some(format!("its latest verification did not pass: {v}"));
    }
    None
}

/// Samples every `every` until `stop`.
pub fn sampler(
    client: Client,
    obs: Shared,
    t0: Instant,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            sample(&client, &obs, t0);
            let until = Instant::now() + every;
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_recoverable_point_needs_a_proving_restore_test_after_a_passed_verification() {
        let good = json!({
            "restore_test": {"passed": true, "evidence": {"digests_compared": 3, "digests_matched": 3}},
            "verification": {"passed": true}
        });
        assert_eq!(proof_problem(&good), None);
        let mut vacuous = good.clone();
        vacuous["restore_test"]["evidence"]["digests_compared"] = json!(0);
        assert!(proof_problem(&vacuous).is_some());
        let mut mismatch = good.clone();
        mismatch["restore_test"]["evidence"]["digests_matched"] = json!(2);
        assert!(proof_problem(&mismatch).is_some());
        let mut failed = good.clone();
        failed["verification"]["passed"] = json!(false);
        assert!(proof_problem(&failed).is_some());
        assert!(proof_problem(&json!({"verification": {"passed": true}})).is_some());
    }

    #[test]
    fn damage_is_detected_by_the_read_back_that_names_its_pack() {
        let mut o = Observed::default();
        o.incidents.push(Incident::injected(
            "bit rot".into(),
            Some("default".into()),
            Some("ab".into()),
            "ab".into(),
            1.0,
        ));
        let other = json!({"repository": "default", "damaged_packs": ["cd"], "damaged": []});
        notice_damage(&mut o, 5, "repository.read_back", &other, 2.0);
        assert!(o.incidents[0].detected_at_s.is_none());
        let other_repo = json!({"repository": "agent-x", "damaged_packs": ["ab"]});
        notice_damage(&mut o, 6, "repository.read_back", &other_repo, 2.5);
        assert!(o.incidents[0].detected_at_s.is_none());
        let it =
            json!({"repository": "default", "damaged_packs": ["ab"], "affected_points": ["p1"]});
        notice_damage(&mut o, 7, "repository.read_back", &it, 3.0);
        assert_eq!(o.incidents[0].detected_at_s, Some(3.0));
        assert_eq!(o.incidents[0].affected, Some(vec!["p1".to_owned()]));
    }

    fn seen(o: &mut Observed, seq: u64, kind: &str, data: Value) {
        let e = SeenEvent {
            hash: String::new(),
            kind: kind.to_owned(),
            data,
            recorded_at: String::new(),
        };
        o.events.insert(seq, e);
    }

    #[test]
    fn only_a_full_check_that_began_after_the_detection_clears_a_point() {
        let mut o = Observed::default();
        // Job a began before the detection (seq 10), b and c after; c read
        // only a sample.
        seen(&mut o, 8, "job.started", json!({"job": "a"}));
        seen(&mut o, 11, "job.started", json!({"job": "b"}));
        seen(&mut o, 12, "job.started", json!({"job": "c"}));
        let passed = |job: &str, point: &str, depth: &str| json!({"job": job, "point": point, "depth": depth});
        seen(
            &mut o,
            13,
            "verification.passed",
            passed("a", "p1", "ReadAll"),
        );
        seen(
            &mut o,
            14,
            "verification.passed",
            passed("c", "p3", "ReadSample"),
        );
        seen(
            &mut o,
            15,
            "verification.passed",
            passed("b", "p2", "ReadAll"),
        );
        let complete = json!({"job": "c", "point": "p4", "evidence": {"complete": true}});
        seen(&mut o, 16, "restore_test.passed", complete);
        let sampled = json!({"job": "b", "point": "p5", "evidence": {"complete": false}});
        seen(&mut o, 17, "restore_test.passed", sampled);
        let cleared = fully_read_since(&o, 10);
        let want: BTreeSet<String> = ["p2", "p4"].into_iter().map(String::from).collect();
        assert_eq!(cleared, want);
        // Seen from before job a began, its check counts too.
        assert!(fully_read_since(&o, 7).contains("p1"));
    }

    #[test]
    fn a_job_that_failed_on_the_damage_detects_it_but_names_no_point() {
        let mut o = Observed::default();
        o.incidents.push(Incident::injected(
            "cut".into(),
            Some("default".into()),
            Some("ab".into()),
            "ab".into(),
            1.0,
        ));
        let failed = json!({"job": "prune-1", "message": "pack ab is shorter than its index says"});
        notice_damage(&mut o, 5, "job.failed", &failed, 2.0);
        assert_eq!(o.incidents[0].detected_at_s, Some(2.0));
        assert_eq!(o.incidents[0].suspected_seq, None);
        let it =
            json!({"repository": "default", "damaged_packs": ["ab"], "affected_points": ["p1"]});
        notice_damage(&mut o, 9, "repository.read_back", &it, 3.0);
        assert_eq!(o.incidents[0].detected_at_s, Some(2.0), "first noticed");
        assert_eq!(o.incidents[0].suspected_seq, Some(9));
        assert_eq!(o.incidents[0].affected, Some(vec!["p1".to_owned()]));
    }
}
