//! Disaster recovery of the server itself (issue 18): a real `vouch serve`
//! mirrors its event log into its repositories; its data directory is
//! deleted; `vouch dr rebuild` makes a new one from a repository alone;
//! the rebuilt service shows the same plans, points, states, locks and
//! alerts, runs its next scheduled job, knows a point whose events were
//! lost as `point.discovered` (unknown), and accepts only its new token.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::served::{eventually, get, http, post, sources_allow, start, Service};
use common::{random_files, Env, PASSWORD};
use serde_json::{json, Value};

fn write_config(dir: &Path, offsite: &Path, second: &Path) -> PathBuf {
    let pw = dir.join("pw");
    fs::write(&pw, PASSWORD).unwrap();
    let config = dir.join("vouch.toml");
    fs::write(
        &config,
        format!(
            "{}[scheduler]\ntick = \"1s\"\nmax_jitter = \"0s\"\n\n[jobs]\nretry_initial = \"1s\"\n\
             max_attempts = 1\nshutdown_grace = \"10s\"\nmin_every = \"1s\"\n\n[alerting]\n\
             evaluate_every = \"1s\"\n\n[security]\nevaluate_every = \"off\"\n\n\
             [log]\nmirror_every = \"1s\"\n\n\
             [[repositories]]\nid = \"offsite\"\npath = {:?}\npassphrase_file = {:?}\n\n\
             [[repositories]]\nid = \"second\"\npath = {:?}\npassphrase_file = {:?}\n",
            sources_allow(dir),
            offsite.to_str().unwrap(),
            pw.to_str().unwrap(),
            second.to_str().unwrap(),
            pw.to_str().unwrap(),
        ),
    )
    .unwrap();
    config
}

fn create_plan(svc: &Service, body: Value) {
    let (status, answer) = post(svc, "/api/v1/plans", &body);
    assert_eq!(status, 201, "plan created: {answer}");
}

fn run_plan(svc: &Service, id: &str) {
    let (status, body) = post(svc, &format!("/api/v1/plans/{id}/run"), &Value::Null);
    assert_eq!(status, 202, "run accepted: {body}");
}

fn points(svc: &Service) -> Vec<Value> {
    get(svc, "/api/v1/points?limit=1000")
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn points_of(svc: &Service, plan: &str) -> Vec<Value> {
    points(svc)
        .into_iter()
        .filter(|p| p["plan"] == plan)
        .collect()
}

/// What must survive a rebuild: per point its plan, repository, state,
/// lock and proofs; per plan its definition and protection; the open
/// alerts.
fn state_of(svc: &Service) -> (BTreeMap<String, Value>, BTreeMap<String, Value>, Vec<Value>) {
    let points = points(svc)
        .into_iter()
        .map(|p| {
            let id = p["id"].as_str().unwrap().to_owned();
            let kept = json!({
                "plan": p["plan"], "repository": p["repository"], "state": p["state"],
                "locked_until": p["locked_until"], "snapshot_time": p["snapshot_time"],
                "size_bytes": p["size_bytes"],
            });
            (id, kept)
        })
        .collect();
    let plans = get(svc, "/api/v1/plans")
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let id = p["id"].as_str().unwrap().to_owned();
            let kept = json!({
                "definition": p["definition"], "source": p["source"],
                "schedule": p["schedule"], "repository": p["repository"],
                "paused": p["paused"], "protection": p["protection"]["status"],
            });
            (id, kept)
        })
        .collect();
    let mut alerts: Vec<Value> = get(svc, "/api/v1/alerts?state=open")
        .as_array()
        .unwrap()
        .iter()
        .map(|a| json!({"id": a["id"], "rule": a["rule"], "subject": a["subject"], "severity": a["severity"]}))
        .collect();
    alerts.sort_by_key(|a| a["id"].to_string());
    (points, plans, alerts)
}

fn flip_packs(repo: &Path) {
    for shard in fs::read_dir(repo.join("data")).unwrap().flatten() {
        for pack in fs::read_dir(shard.path()).unwrap().flatten() {
            let mut bytes = fs::read(pack.path()).unwrap();
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0x40;
            fs::write(pack.path(), &bytes).unwrap();
        }
    }
}

/// SIGTERM, then waits for the service to exit (its last mirror pass
/// included).
fn stop(mut svc: Service) {
    let pid = svc.child.id() as i32;
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = svc.child.wait().expect("the service exits");
    assert!(status.success(), "the service stopped cleanly: {status}");
}

fn vouch(repo: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vouch"))
        .env("VOUCH_PASSWORD", PASSWORD)
        .env_remove("VOUCH_PASSWORD_FILE")
        .env_remove("VOUCH_PASSWORD_COMMAND")
        .arg("--repo")
        .arg(repo)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("vouch runs")
}

#[test]
fn a_server_rebuilt_from_its_repository_shows_the_same_states_and_runs_on() {
    let offsite = Env::new();
    offsite.init();
    let second = Env::new();
    second.init();
    let dir = offsite.dir.path();
    let docs = dir.join("docs");
    random_files(&docs, 5, 60_000, 7);
    let fragile = dir.join("fragile");
    random_files(&fragile, 3, 50_000, 8);
    let config = write_config(dir, &offsite.repo, &second.repo);
    let data = dir.join("data");
    let svc = start(&data, &config, None);

    // docs: every minute into offsite, restore-tested once per point.
    create_plan(
        &svc,
        json!({"id": "docs", "source": docs, "schedule": "* * * * *", "rpo": "1h",
               "repository": "offsite", "retention": {"last": 20},
               "restore_test": {"every": "1h"}}),
    );
    // fragile: into second, whose packs get damaged: unrecoverable.
    create_plan(
        &svc,
        json!({"id": "fragile", "source": fragile, "schedule": "0 3 * * *", "rpo": "1h",
               "repository": "second", "restore_test": {"every": "2s"}}),
    );
    // missing: its source does not exist: the backup fails, an alert opens.
    create_plan(
        &svc,
        json!({"id": "missing", "source": dir.join("nowhere"), "schedule": "0 3 * * *",
               "rpo": "1h", "repository": "offsite"}),
    );
    run_plan(&svc, "docs");
    run_plan(&svc, "fragile");
    run_plan(&svc, "missing");
    let docs_point = eventually("a recoverable docs point", || {
        points_of(&svc, "docs")
            .into_iter()
            .find(|p| p["state"] == "recoverable")
    });
    let docs_point = docs_point["id"].as_str().unwrap().to_owned();
    eventually("a recoverable fragile point", || {
        points_of(&svc, "fragile")
            .into_iter()
            .find(|p| p["state"] == "recoverable")
    });
    flip_packs(&second.repo);
    eventually("the fragile point unrecoverable", || {
        points_of(&svc, "fragile")
            .into_iter()
            .find(|p| p["state"] == "unrecoverable" || p["state"] == "corrupt")
    });
    let (status, body) = post(
        &svc,
        &format!("/api/v1/points/{docs_point}/lock"),
        &json!({"until": "2099-01-01T00:00:00Z"}),
    );
    assert_eq!(status, 200, "locked: {body}");
    eventually("the failed backup's alert", || {
        get(&svc, "/api/v1/alerts?state=open")
            .as_array()
            .and_then(|a| {
                a.iter()
                    .find(|a| a["subject"].as_str().is_some_and(|s| s.contains("missing")))
                    .cloned()
            })
    });
    // The mirror has caught up (every second): the repositories say so.
    let last_seq = get(&svc, "/api/v1/events?limit=1&order=desc")["events"][0]["seq"]
        .as_u64()
        .unwrap_or(0);
    eventually("the mirror to reach the log's head", || {
        get(&svc, "/api/v1/repositories")
            .as_array()
            .and_then(|r| r.iter().find(|r| r["id"] == "offsite").cloned())
            .filter(|r| r["log_mirrored_seq"].as_u64() >= Some(last_seq))
    });
    let before = state_of(&svc);
    let old_token = svc.token.clone();
    let states: Vec<&str> = before
        .0
        .values()
        .filter_map(|p| p["state"].as_str())
        .collect();
    assert!(
        states.contains(&"recoverable")
            && states
                .iter()
                .any(|s| *s == "unrecoverable" || *s == "corrupt"),
        "{states:?}"
    );
    stop(svc);

    // While the server is down, a point is made with the CLI: the log
    // never hears of it.
    let lost = vouch(&offsite.repo, &["backup", "--json", docs.to_str().unwrap()]);
    assert!(
        lost.status.success(),
        "{}",
        String::from_utf8_lossy(&lost.stderr)
    );

    // The disaster: the data directory is gone.
    fs::remove_dir_all(&data).unwrap();

    let status_out = vouch(&offsite.repo, &["dr", "status", "--json"]);
    assert!(status_out.status.success());
    let logs: Value = serde_json::from_slice(&status_out.stdout).unwrap();
    assert_eq!(logs["logs"].as_array().unwrap().len(), 1, "{logs}");
    assert!(
        logs["logs"][0]["recovers_to_seq"].as_u64() >= Some(last_seq),
        "{logs}"
    );

    let rebuilt = vouch(
        &offsite.repo,
        &[
            "--json",
            "dr",
            "rebuild",
            "--data-dir",
            data.to_str().unwrap(),
        ],
    );
    assert!(
        rebuilt.status.success(),
        "{}",
        String::from_utf8_lossy(&rebuilt.stderr)
    );
    let report: Value = serde_json::from_slice(&rebuilt.stdout).unwrap();
    assert_eq!(report["repository"], "offsite", "{report}");
    assert!(
        report["recovered_seq"].as_u64() >= Some(last_seq),
        "{report}"
    );
    let repos = report["repositories_in_plans"].as_array().unwrap();
    assert!(
        repos.contains(&json!("offsite")) && repos.contains(&json!("second")),
        "{report}"
    );
    // A second rebuild into the same directory is refused, never merged.
    let again = vouch(
        &offsite.repo,
        &["dr", "rebuild", "--data-dir", data.to_str().unwrap()],
    );
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("is not empty"));

    let svc = start(&data, &config, None);
    assert_ne!(svc.token, old_token, "a new admin token");
    let (refused, _) = http(svc.addr, "GET", "/api/v1/plans", Some(&old_token), None);
    assert_eq!(refused, 401, "tokens of the old server are not restored");
    let rebuilt_event = get(&svc, "/api/v1/events?type=service.rebuilt");
    assert_eq!(
        rebuilt_event["events"][0]["data"]["repository"], "offsite",
        "{rebuilt_event}"
    );

    let after = state_of(&svc);
    for (id, p) in &before.0 {
        assert_eq!(after.0.get(id), Some(p), "point {id} after the rebuild");
    }
    assert_eq!(after.1, before.1, "plans after the rebuild");
    assert_eq!(after.2, before.2, "open alerts after the rebuild");

    // The point made while the server was down: found, unknown until
    // proven (or proven since, by the rebuilt server's own tests).
    let discovered = eventually("the lost point discovered", || {
        get(&svc, "/api/v1/events?type=point.discovered")["events"]
            .as_array()
            .and_then(|e| e.first().cloned())
    });
    let found = discovered["data"]["snapshot"]
        .as_str()
        .or(discovered["point"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(
        !before.0.contains_key(&found),
        "a point the old log never knew: {discovered}"
    );

    // The next scheduled backup of docs runs (every minute).
    eventually("a scheduled docs backup after the rebuild", || {
        points_of(&svc, "docs").into_iter().find(|p| {
            !before.0.contains_key(p["id"].as_str().unwrap_or_default())
                && p["id"].as_str() != Some(found.as_str())
        })
    });
    // And the mirror goes on, under the rebuilt log's own name (its history
    // parts from the old one's after the recovered seq); `dr status` lists
    // it first, as the most recent.
    let recovered = report["recovered_seq"].as_u64().unwrap();
    let logs = eventually("the rebuilt log mirrored past the recovered seq", || {
        let out = vouch(&offsite.repo, &["dr", "status", "--json"]);
        let logs: Value = serde_json::from_slice(&out.stdout).ok()?;
        (logs["logs"][0]["log"] == report["mirrored_as"]
            && logs["logs"][0]["recovers_to_seq"].as_u64() > Some(recovered))
        .then_some(logs)
    });
    assert_eq!(
        logs["logs"].as_array().unwrap().len(),
        2,
        "the old copy stays: {logs}"
    );
}
