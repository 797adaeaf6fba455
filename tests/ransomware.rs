//! The ransomware heuristic in a running `vouch serve`: a plan backs up a
//! real tree; an ordinary edit raises nothing; a simulated attack (10 % of
//! the files encrypted with AES-256-GCM and renamed, notes dropped) is
//! recorded as `anomaly.detected` with its signals and paths, raises a
//! critical alert, and shows on the point. Nothing is stopped: the next
//! jobs of the plan run as usual.

mod common;

use std::path::Path;

use common::ransom::{self, Attack};
use common::served::*;
use serde_json::Value;

fn write_config(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("vouch.toml");
    std::fs::write(
        &path,
        format!(
            "{}[scheduler]\ntick = \"1s\"\nmax_jitter = \"0s\"\n\n[alerting]\nevaluate_every = \"1s\"\n",
            sources_allow(dir)
        ),
    )
    .expect("config written");
    path
}

/// Runs the plan and waits for its backup job to succeed; returns the
/// `backup.committed` it recorded.
fn run_backup(svc: &Service, plan: &str) -> Value {
    let (status, body) = post(svc, &format!("/api/v1/plans/{plan}/run"), &Value::Null);
    assert_eq!(status, 202, "run accepted: {body}");
    let job = body["id"].as_str().expect("a job id").to_owned();
    eventually(&format!("backup job {job} to end"), || {
        let j = get(svc, &format!("/api/v1/jobs/{job}"));
        match j["state"].as_str() {
            Some("succeeded") => Some(()),
            Some("failed") | Some("abandoned") => panic!("the backup failed: {j}"),
            _ => None,
        }
    });
    let events = get(svc, "/api/v1/events?type=backup.committed&limit=1000");
    events["events"]
        .as_array()
        .expect("events")
        .iter()
        .find(|e| e["data"]["job"] == job.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("backup.committed of {job} in {events}"))
}

fn anomalies(svc: &Service) -> Vec<Value> {
    get(svc, "/api/v1/events?type=anomaly.detected&limit=1000")["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn an_attack_on_a_plans_source_is_reported_alerted_and_shown_and_nothing_is_stopped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("home");
    let files = ransom::project_tree(&src);
    let config = write_config(dir.path());
    let svc = start(&dir.path().join("data"), &config, None);
    let (status, body) = post(
        &svc,
        "/api/v1/plans",
        &serde_json::json!({"id": "home", "source": src, "schedule": "0 3 * * *", "rpo": "1h"}),
    );
    assert_eq!(status, 201, "plan created: {body}");

    // A first backup has nothing to compare with.
    let first = run_backup(&svc, "home");
    assert!(first["data"]["changes"].is_null(), "{first}");

    // An ordinary day: a few files edited.
    for f in ransom::files_of(&src).iter().take(5) {
        let mut text = std::fs::read(f).expect("read");
        text.extend_from_slice(b"\n// edited\n");
        std::fs::write(f, text).expect("edit");
    }
    let second = run_backup(&svc, "home");
    let changes = &second["data"]["changes"];
    assert_eq!(changes["changed"], 5, "{second}");
    assert_eq!(changes["files_before"], files as u64, "{second}");
    assert!(anomalies(&svc).is_empty(), "an ordinary edit is no anomaly");

    // The attack.
    let encrypted = ransom::attack(
        &src,
        Attack {
            permille: 100,
            rename_to: Some("locked"),
            replace_extension: false,
            notes: true,
            encrypt: true,
        },
    );
    let third = run_backup(&svc, "home");
    let changes = &third["data"]["changes"];
    assert_eq!(changes["churn_extension"], "locked", "{third}");
    assert_eq!(changes["churn_files"], encrypted as u64, "{third}");
    let point = third["data"]["snapshot"]
        .as_str()
        .expect("snapshot")
        .to_owned();
    let found = anomalies(&svc);
    assert_eq!(found.len(), 1, "{found:?}");
    let a = &found[0]["data"];
    assert_eq!(a["point"], point.as_str());
    assert_eq!(a["compared_with"], second["data"]["snapshot"]);
    let kinds: Vec<&str> = a["signals"]
        .as_array()
        .expect("signals")
        .iter()
        .filter(|s| s["score_permille"].as_u64().unwrap_or(0) >= 500)
        .filter_map(|s| s["kind"].as_str())
        .collect();
    for k in ["extension-churn", "entropy-jump", "ransom-note"] {
        assert!(kinds.contains(&k), "{k} in {a}");
    }
    let paths: Vec<&str> = a["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(!paths.is_empty() && paths.len() <= 20, "{paths:?}");
    assert!(
        paths.iter().all(|p| p.starts_with(&*src.to_string_lossy())),
        "paths are the source's: {paths:?}"
    );

    // The point shows it; its state is what its checks say, not changed.
    let view = get(&svc, &format!("/api/v1/points/{point}"));
    assert!(
        !view["anomalies"].as_array().expect("anomalies").is_empty(),
        "{view}"
    );
    assert_eq!(
        view["anomaly_paths"].as_array().map(Vec::len),
        Some(paths.len())
    );
    assert_eq!(view["changes"]["churn_files"], encrypted as u64);

    // So does its plan.
    let plan = get(&svc, "/api/v1/plans/home");
    assert_eq!(
        plan["anomalous_points"],
        serde_json::json!([point.as_str()]),
        "{plan}"
    );

    // A critical alert names it.
    let alert = eventually("the anomaly alert", || {
        get(&svc, "/api/v1/alerts").as_array().and_then(|l| {
            l.iter()
                .find(|a| a["subject"].as_str().is_some_and(|s| s.contains("anomaly")))
                .cloned()
        })
    });
    assert_eq!(alert["severity"], "critical", "{alert}");
    assert!(
        alert["message"].as_str().unwrap_or("").contains(".locked"),
        "the alert names a path: {alert}"
    );

    // It reports, never acts: the plan still runs, and the next backup
    // (compared with the attacked point) is no new anomaly.
    let fourth = run_backup(&svc, "home");
    assert_eq!(fourth["data"]["changes"]["compared_with"], point.as_str());
    assert_eq!(anomalies(&svc).len(), 1);
}
