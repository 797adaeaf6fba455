//! The end of a run: every fault healed, the service given time to settle,
//! then every invariant checked against the log, the repositories and the
//! processes' logs.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use super::observe::{self, inv, lock, Observed, Violation};
use super::workload::{Tree, TreeDigest};
use super::Run;

/// One invariant's result.
#[derive(Clone, Debug, Serialize)]
pub struct InvariantResult {
    /// Its name.
    pub name: String,
    /// What it demands.
    pub demands: String,
    /// How many checks were made.
    pub checks: u64,
    /// Whether it held: every check passed, and at least one was made.
    pub result: String,
    /// What broke it.
    pub violations: Vec<Violation>,
}

/// Alert rules that stand for damage.
const DAMAGE_RULES: &[&str] = &[
    "ReadBackDamaged",
    "VerificationFailed",
    "RestoreTestFailed",
    "LogDamaged",
    "PointVanished",
];

/// What every invariant demands, in report order.
pub fn demands() -> Vec<(&'static str, &'static str)> {
    vec![
        (inv::EVENTS, "no acknowledged event lost or changed; `vouch events verify` passes on the log"),
        (inv::SNAPSHOTS, "every snapshot in every repository passes `vouch check --read-data` and restores to exactly a tree the workload wrote"),
        (inv::DAMAGE, "every injected damage is found within the detection window, and no point it touches is `recoverable` while it stands"),
        (inv::PROOF, "at every sample, a `recoverable` point has a passed verification and a proving restore test, and a `protected` plan has a `recoverable` point"),
        (inv::ALERTS, "no alert raised twice or resolved twice; every found damage raised an alert, resolved once the damage was put back"),
        (inv::RECOVERY, "the service is ready within the recovery limit after every restart, full disk and fsync failure, and every plan backs up again once the faults are over"),
        (inv::JOBS, "no job started while it ran, and no job committed twice"),
        (inv::CLEAN, "no process panicked, exited by itself or hung; the service stops on SIGTERM"),
    ]
}

/// The checks of an attached run: the log read again, alerts and jobs.
pub fn attached(
    client: &super::http::Client,
    obs: &observe::Shared,
    t0: Instant,
) -> Vec<InvariantResult> {
    reread_log(client, obs, t0);
    results(&lock(obs))
}

/// Reads the whole log again: every event seen before must still be there
/// with its hash; then the alert and job checks over the log.
fn reread_log(client: &super::http::Client, obs: &observe::Shared, t0: Instant) {
    let fresh = observe::Shared::default();
    let reread = observe::read_events(client, &fresh, t0);
    let at = t0.elapsed().as_secs_f64();
    {
        let fresh = lock(&fresh);
        let mut o = lock(obs);
        if !reread {
            o.violated(
                inv::EVENTS,
                at,
                "the log could not be read again from seq 1 through the API at the end (see logs/server.log)".into(),
            );
        }
        let seen: Vec<(u64, String, String)> = o
            .events
            .iter()
            .map(|(s, e)| (*s, e.hash.clone(), e.kind.clone()))
            .collect();
        o.checked(inv::EVENTS, seen.len() as u64);
        for (seq, hash, kind) in seen {
            match fresh.events.get(&seq) {
                None if !reread => {}
                None => o.violated(
                    inv::EVENTS,
                    at,
                    format!("event {seq} ({kind}) was acknowledged and is gone"),
                ),
                Some(e) if e.hash != hash => o.violated(
                    inv::EVENTS,
                    at,
                    format!("event {seq} ({kind}) changed: {hash} is now {}", e.hash),
                ),
                _ => {}
            }
        }
        check_alerts(&mut o, at);
        check_jobs(&mut o, at);
    }
}

/// Heals, settles, checks; the per-invariant results.
pub fn finish(run: &mut Run) -> Vec<InvariantResult> {
    settle(run);
    // The whole log once more: every event seen during the run must still
    // be there with its hash.
    reread_log(run.client(), &run.obs, run.t0);
    let at = run.now_s();
    let stopped = run.dep.stop_all();
    {
        let mut o = lock(&run.obs);
        o.checked(inv::CLEAN, 1);
        if !stopped {
            o.violated(
                inv::CLEAN,
                at,
                "the service did not stop within 30 s of SIGTERM".into(),
            );
        }
    }
    verify_log(run);
    check_repositories(run);
    check_logs(run);
    keep_data(run);
    results(&lock(&run.obs))
}

/// A data directory on a file system of its own goes with it: copied
/// beside it first, so that the run can be inspected afterwards.
fn keep_data(run: &Run) {
    if run.dep.opts.own_fs_bytes.is_some() {
        let to = run.opts.work.join("data-after-run");
        let _ = std::process::Command::new("cp")
            .arg("-a")
            .arg(&run.dep.data)
            .arg(&to)
            .status();
    }
}

/// Every invariant's result from what was observed.
fn results(o: &Observed) -> Vec<InvariantResult> {
    demands()
        .into_iter()
        .map(|(name, demands)| {
            let violations: Vec<Violation> = o
                .violations
                .iter()
                .filter(|v| v.invariant == name)
                .cloned()
                .collect();
            let checks = o.checks.get(name).copied().unwrap_or(0);
            let result = if !violations.is_empty() {
                "violated"
            } else if checks == 0 {
                "not checked"
            } else {
                "held"
            };
            InvariantResult {
                name: name.to_owned(),
                demands: demands.to_owned(),
                checks,
                result: result.to_owned(),
                violations,
            }
        })
        .collect()
}

/// Waits for damage to be found and put back, for the runner's backups to
/// end, and for the alerts of put-back damage to resolve (at most the
/// detection window and two minutes more).
fn settle(run: &mut Run) {
    let limit = run.opts.detection_window + Duration::from_secs(120);
    let start = Instant::now();
    // Once every damage is put back, each plan backs up once more: the
    // service must not only answer after the faults, it must work.
    let mut last_round: BTreeMap<usize, String> = BTreeMap::new();
    while start.elapsed() < limit {
        run.tend();
        observe::sample(run.client(), &run.obs, run.t0);
        if run.heals.is_empty() {
            for i in 0..run.plans.len() {
                if last_round.contains_key(&i) || !plan_in_service(run, i) {
                    continue;
                }
                let pending = run.plans[i].jobs.last().is_some_and(|j| !ended(run, j));
                if pending {
                    continue;
                }
                let before = run.plans[i].jobs.len();
                super::nemesis::run_plan(run, i, run.opts.seed ^ i as u64);
                if run.plans[i].jobs.len() > before {
                    if let Some(j) = run.plans[i].jobs.last() {
                        last_round.insert(i, j.clone());
                    }
                }
            }
        }
        let backups_done = run
            .plans
            .iter()
            .all(|p| p.jobs.last().is_none_or(|j| ended(run, j)));
        let asked_all = (0..run.plans.len())
            .filter(|i| plan_in_service(run, *i))
            .all(|i| last_round.contains_key(&i));
        let open = open_damage_alerts(&lock(&run.obs));
        if run.heals.is_empty() && asked_all && backups_done && open.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    check_last_round(run, &last_round);
    let at = run.now_s();
    let mut o = lock(&run.obs);
    for (id, desc) in open_damage_alerts(&o) {
        o.violated(
            inv::ALERTS,
            at,
            format!(
                "alert {id} ({desc}) still open {} s after its damage was put back",
                limit.as_secs()
            ),
        );
    }
}

/// Whether plan `i` still has someone to back it up (an agent retired by
/// a revocation has not).
fn plan_in_service(run: &Run, i: usize) -> bool {
    run.plans[i]
        .agent
        .is_none_or(|a| !run.dep.agents[a].retired)
}

/// Every plan backed up once more after the faults (`recovery-time`): a
/// backup asked for once the damage was put back must succeed.
fn check_last_round(run: &Run, last_round: &BTreeMap<usize, String>) {
    let at = run.now_s();
    let mut problems = Vec::new();
    for i in (0..run.plans.len()).filter(|i| plan_in_service(run, *i)) {
        let id = &run.plans[i].id;
        let Some(job) = last_round.get(&i) else {
            problems.push(format!(
                "plan {id} could not be asked for a backup after the faults (one was still pending at the end)"
            ));
            continue;
        };
        let j = run
            .client()
            .get_json(&format!("/api/v1/jobs/{job}"))
            .unwrap_or(Value::Null);
        if j["state"] != "succeeded" {
            problems.push(format!(
                "plan {id}'s backup after the faults ({job}) ended {}: {}",
                j["state"].as_str().unwrap_or("unknown"),
                j["error"]["message"]
                    .as_str()
                    .unwrap_or("no error recorded")
            ));
        }
    }
    let mut o = lock(&run.obs);
    o.checked(inv::RECOVERY, last_round.len() as u64);
    for p in problems {
        o.violated(inv::RECOVERY, at, p);
    }
}

/// Whether a job the runner asked for has ended; one the log never
/// recorded (asked for while the log refused appends) counts as ended.
fn ended(run: &Run, job: &str) -> bool {
    match run
        .client()
        .call("GET", &format!("/api/v1/jobs/{job}"), None)
    {
        Ok((404, _)) => true,
        Ok((200, body)) => serde_json::from_slice::<Value>(&body).is_ok_and(|v| {
            matches!(
                v["state"].as_str(),
                Some("succeeded" | "failed" | "abandoned")
            )
        }),
        _ => false,
    }
}

/// Alerts with a damage rule raised and not resolved: id and a
/// description.
fn open_damage_alerts(o: &Observed) -> Vec<(String, String)> {
    let resolved: BTreeSet<String> = o
        .of_type("alert.resolved")
        .filter_map(|(_, e)| e.data["alert"].as_str().map(str::to_owned))
        .collect();
    o.of_type("alert.raised")
        .filter(|(_, e)| DAMAGE_RULES.contains(&e.data["rule"].as_str().unwrap_or_default()))
        .filter_map(|(_, e)| {
            let id = e.data["alert"].as_str()?.to_owned();
            (!resolved.contains(&id))
                .then(|| (id, format!("{} {}", e.data["rule"], e.data["labels"])))
        })
        .collect()
}

/// Alerts: raised once, resolved at most once and after their raising; no
/// second alert for the same rule and labels while one is open; every
/// found damage raised one.
fn check_alerts(o: &mut Observed, at: f64) {
    let mut raised: BTreeMap<String, u64> = BTreeMap::new();
    let mut open_by_key: BTreeMap<String, String> = BTreeMap::new();
    let mut key_of: BTreeMap<String, String> = BTreeMap::new();
    let mut resolved: BTreeSet<String> = BTreeSet::new();
    let mut problems = Vec::new();
    let mut checks = 0;
    for (seq, e) in o.events.iter() {
        let id = e.data["alert"].as_str().unwrap_or_default().to_owned();
        match e.kind.as_str() {
            "alert.raised" => {
                checks += 1;
                let key = format!("{} {}", e.data["rule"], e.data["labels"]);
                if raised.insert(id.clone(), *seq).is_some() {
                    problems.push(format!("alert {id} raised twice (seq {seq})"));
                }
                if let Some(other) = open_by_key.insert(key.clone(), id.clone()) {
                    problems.push(format!(
                        "alert {id} ({key}) raised at seq {seq} while {other} was open"
                    ));
                }
                key_of.insert(id, key);
            }
            "alert.resolved" => {
                checks += 1;
                if !raised.contains_key(&id) {
                    problems.push(format!("alert {id} resolved (seq {seq}) but never raised"));
                }
                if !resolved.insert(id.clone()) {
                    problems.push(format!("alert {id} resolved twice (seq {seq})"));
                }
                if let Some(key) = key_of.get(&id) {
                    open_by_key.remove(key);
                }
            }
            _ => {}
        }
    }
    // Every found damage raised an alert after it was injected.
    let incidents = o.incidents.clone();
    for inc in incidents.iter().filter(|i| i.detected_at_s.is_some()) {
        checks += 1;
        let any = o.of_type("alert.raised").any(|(_, e)| {
            DAMAGE_RULES.contains(&e.data["rule"].as_str().unwrap_or_default())
                && (inc.in_log
                    || e.data["labels"]["repository"].as_str() == inc.repository.as_deref()
                    || e.data["labels"]["repository"].is_null())
        });
        if !any {
            problems.push(format!(
                "{} was found ({}) but raised no alert",
                inc.what,
                inc.detected_by.clone().unwrap_or_default()
            ));
        }
    }
    o.checked(inv::ALERTS, checks);
    for p in problems {
        o.violated(inv::ALERTS, at, p);
    }
}

/// Jobs: no start while running, one commit at most.
fn check_jobs(o: &mut Observed, at: f64) {
    let mut running: BTreeSet<String> = BTreeSet::new();
    let mut committed: BTreeMap<String, u64> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut checks = 0;
    for (seq, e) in o.events.iter() {
        let job = e.data["job"].as_str().unwrap_or_default().to_owned();
        match e.kind.as_str() {
            "job.started" => {
                checks += 1;
                if !running.insert(job.clone()) {
                    problems.push(format!("job {job} started again at seq {seq} while it ran"));
                }
            }
            "job.finished" | "job.failed" | "job.abandoned" => {
                running.remove(&job);
            }
            "backup.committed" if !job.is_empty() => {
                checks += 1;
                if let Some(first) = committed.insert(job.clone(), *seq) {
                    problems.push(format!(
                        "job {job} committed twice (seqs {first} and {seq})"
                    ));
                }
            }
            _ => {}
        }
    }
    o.checked(inv::JOBS, checks);
    for p in problems {
        o.violated(inv::JOBS, at, p);
    }
}

fn verify_log(run: &mut Run) {
    let data = run.dep.data.to_string_lossy().into_owned();
    let out = run.vouch(&["events", "verify", "--data-dir", &data]);
    let at = run.now_s();
    let mut o = lock(&run.obs);
    o.checked(inv::EVENTS, 1);
    match out {
        Ok((0, _, _)) => {}
        Ok((code, stdout, stderr)) => o.violated(
            inv::EVENTS,
            at,
            format!(
                "vouch events verify exited {code}: {} {}",
                stdout.trim(),
                stderr.trim()
            ),
        ),
        Err(e) => o.violated(inv::EVENTS, at, format!("vouch events verify: {e}")),
    }
}

/// Every repository: `check --read-data`, then every snapshot restored
/// and compared with the trees the workload wrote at its path.
fn check_repositories(run: &mut Run) {
    let mut repos = vec![(
        run.dep.data.join("repository"),
        run.dep.data.join("repository.passphrase"),
    )];
    if let Some(s3) = &run.dep.s3 {
        // The end checks read it through the proxy, with no fault set.
        s3.proxy.set(crate::s3_faults::FaultPlan::default());
        repos.push((PathBuf::from(&s3.location), s3.passphrase.clone()));
    }
    for a in &run.dep.agents {
        let d = run.dep.data.join("agents").join(&a.name);
        if d.join("repository").is_dir() {
            repos.push((d.join("repository"), d.join("repository.passphrase")));
        }
    }
    let trees: Vec<&Tree> = run
        .plans
        .iter()
        .map(|p| &p.tree)
        .chain(run.other_trees.iter())
        .collect();
    let by_root: BTreeMap<PathBuf, &Tree> = trees.iter().map(|t| (t.root.clone(), *t)).collect();
    let scratch = run.opts.work.join("restore-check");
    let mut problems = Vec::new();
    let mut checks = 0u64;
    for (repo, pw) in &repos {
        let r = repo.to_string_lossy().into_owned();
        let p = pw.to_string_lossy().into_owned();
        checks += 1;
        match run.vouch(&["check", "--read-data", "--repo", &r, "--password-file", &p]) {
            Ok((0, _, _)) => {}
            Ok((code, out, err)) => problems.push(format!(
                "vouch check --read-data of {r} exited {code}: {}",
                last_lines(&format!("{out}\n{err}"), 6)
            )),
            Err(e) => problems.push(e.to_string()),
        }
        let snaps = match run.vouch(&["snapshots", "--json", "--repo", &r, "--password-file", &p]) {
            Ok((0, out, _)) => serde_json::from_str::<Value>(&out).unwrap_or(Value::Null),
            Ok((code, _, err)) => {
                problems.push(format!(
                    "vouch snapshots of {r} exited {code}: {}",
                    err.trim()
                ));
                continue;
            }
            Err(e) => {
                problems.push(e.to_string());
                continue;
            }
        };
        for s in snaps.as_array().into_iter().flatten() {
            let id = s["id"].as_str().unwrap_or_default();
            let Some(path) = s["paths"][0].as_str().map(PathBuf::from) else {
                continue;
            };
            let Some(tree) = by_root.get(&path) else {
                problems.push(format!(
                    "snapshot {id} of {r} is of {}, which no workload tree is",
                    path.display()
                ));
                continue;
            };
            checks += 1;
            let _ = fs::remove_dir_all(&scratch);
            match run.vouch(&[
                "restore",
                id,
                "--target",
                &scratch.to_string_lossy(),
                "--repo",
                &r,
                "--password-file",
                &p,
            ]) {
                Ok((0, _, _)) => {}
                Ok((code, out, err)) => {
                    problems.push(format!(
                        "restoring snapshot {id} of {r} exited {code}: {}",
                        last_lines(&format!("{out}\n{err}"), 4)
                    ));
                    continue;
                }
                Err(e) => {
                    problems.push(e.to_string());
                    continue;
                }
            }
            let restored_root = scratch.join(path.strip_prefix("/").unwrap_or(&path));
            match TreeDigest::of(&restored_root) {
                Ok(d) if tree.versions.contains(&d) => {}
                Ok(d) => {
                    let nearest = tree
                        .versions
                        .iter()
                        .min_by_key(|v| d.differences(v, usize::MAX).len())
                        .map(|v| d.differences(v, 5).join("; "))
                        .unwrap_or_default();
                    problems.push(format!(
                        "snapshot {id} of {r} restores to a tree the workload never wrote at {} (nearest version differs: {nearest})",
                        path.display()
                    ));
                }
                Err(e) => problems.push(format!("reading the restore of {id}: {e}")),
            }
        }
    }
    let _ = fs::remove_dir_all(&scratch);
    let at = run.now_s();
    let mut o = lock(&run.obs);
    o.checked(inv::SNAPSHOTS, checks);
    for p in problems {
        o.violated(inv::SNAPSHOTS, at, p);
    }
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// A panic in any process's log is a violation.
fn check_logs(run: &mut Run) {
    let logs = run.opts.work.join("logs");
    let mut problems = Vec::new();
    let mut checks = 0;
    for f in fs::read_dir(&logs).into_iter().flatten().flatten() {
        checks += 1;
        let text = fs::read_to_string(f.path()).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("panicked at")) {
            problems.push(format!("{}: {}", name_of(&f.path()), line.trim()));
        }
    }
    let at = run.now_s();
    let mut o = lock(&run.obs);
    o.checked(inv::CLEAN, checks);
    for p in problems {
        o.violated(inv::CLEAN, at, p);
    }
}

fn name_of(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
