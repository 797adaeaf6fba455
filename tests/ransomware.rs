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

    // Without `anomaly_lock`, nothing is locked.
    let before = second["data"]["snapshot"].as_str().expect("snapshot");
    let earlier = get(&svc, &format!("/api/v1/points/{before}"));
    assert!(earlier["locked_until"].is_null(), "{earlier}");

    // It reports, never acts: the plan still runs, and the next backup
    // (compared with the attacked point) is no new anomaly.
    let fourth = run_backup(&svc, "home");
    assert_eq!(fourth["data"]["changes"]["compared_with"], point.as_str());
    assert_eq!(anomalies(&svc).len(), 1);
}

/// A plan that opts in (`anomaly_lock`) has the last point before an
/// anomaly locked: in the repository (a record every tool honours) and in
/// the log (`point.locked`), for the plan's duration. The attacked point
/// itself and the earlier ones are left as they are.
#[test]
fn a_plan_that_opts_in_locks_the_last_point_before_an_anomaly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("home");
    ransom::project_tree(&src);
    let config = write_config(dir.path());
    let data = dir.path().join("data");
    let svc = start(&data, &config, None);
    let (status, body) = post(
        &svc,
        "/api/v1/plans",
        &serde_json::json!({"id": "home", "source": src, "schedule": "0 3 * * *", "rpo": "1h",
            "anomaly_lock": "30d"}),
    );
    assert_eq!(status, 201, "plan created: {body}");
    assert_eq!(body["anomaly_lock"], "30days", "{body}");
    let first = run_backup(&svc, "home");
    // An edit: no anomaly, no lock.
    let f = ransom::files_of(&src)[0].clone();
    std::fs::write(&f, b"edited\n").expect("edit");
    let second = run_backup(&svc, "home");
    let good = second["data"]["snapshot"]
        .as_str()
        .expect("snapshot")
        .to_owned();
    assert!(get(&svc, "/api/v1/events?type=point.locked")["events"]
        .as_array()
        .expect("events")
        .is_empty());
    ransom::attack(
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
    let attacked = third["data"]["snapshot"].as_str().expect("snapshot");
    assert_eq!(anomalies(&svc).len(), 1);
    let locked = get(&svc, "/api/v1/events?type=point.locked")["events"]
        .as_array()
        .cloned()
        .expect("events");
    assert_eq!(locked.len(), 1, "{locked:?}");
    assert_eq!(
        locked[0]["data"]["point"],
        good.as_str(),
        "the last point before the anomaly"
    );
    let view = get(&svc, &format!("/api/v1/points/{good}"));
    let until = view["locked_until"].as_str().expect("locked").to_owned();
    assert!(
        until.as_str() > "2026-12-30",
        "about 30 days from now: {until}"
    );
    let attacked_view = get(&svc, &format!("/api/v1/points/{attacked}"));
    assert!(attacked_view["locked_until"].is_null(), "{attacked_view}");
    let first_view = get(
        &svc,
        &format!(
            "/api/v1/points/{}",
            first["data"]["snapshot"].as_str().expect("id")
        ),
    );
    assert!(first_view["locked_until"].is_null(), "{first_view}");
    // The repository holds the lock itself: every tool honours it.
    drop(svc);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vouch"))
        .args(["forget", "--outside-service", "--repo"])
        .arg(data.join("repository"))
        .arg(&good)
        .env("VOUCH_PASSWORD_FILE", data.join("repository.passphrase"))
        .output()
        .expect("vouch forget runs");
    assert!(!out.status.success(), "a locked point cannot be forgotten");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("locked"), "{err}");
}

/// A container's dump (`vzdump:` source, a vzdump tar of its root file
/// system) is weighed like a directory: an attack inside the container
/// between two dumps is recorded as an anomaly of the second point, with
/// paths inside the container; the first dump has nothing to compare with.
#[test]
fn an_attack_inside_a_container_is_found_in_its_dumps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("ct-root");
    let project = root.join("home/user/project");
    ransom::project_tree(&project);
    std::fs::create_dir_all(root.join("etc/vzdump")).expect("mkdir");
    std::fs::write(root.join("etc/vzdump/pct.conf"), "hostname: ct300\n").expect("conf");
    let dumps = dir.path().join("dump");
    std::fs::create_dir_all(&dumps).expect("mkdir");
    let dump = |stamp: &str| {
        std::fs::write(
            dumps.join(format!("vzdump-lxc-300-{stamp}.tar")),
            common::guests::tar_of(&root),
        )
        .expect("archive written");
    };
    dump("2026_12_01-02_00_00");
    let config = write_config(dir.path());
    let svc = start(&dir.path().join("data"), &config, None);
    let (status, body) = post(
        &svc,
        "/api/v1/plans",
        &serde_json::json!({"id": "ct300", "source": format!("vzdump:{}", dumps.display()),
            "schedule": "0 3 * * *", "rpo": "1d"}),
    );
    assert_eq!(status, 201, "plan created: {body}");
    let first = run_backup(&svc, "ct300");
    assert!(first["data"]["changes"].is_null(), "{first}");

    ransom::attack(
        &project,
        Attack {
            permille: 100,
            rename_to: Some("locked"),
            replace_extension: false,
            notes: true,
            encrypt: true,
        },
    );
    dump("2026_12_02-02_00_00");
    let second = run_backup(&svc, "ct300");
    assert_eq!(
        second["data"]["changes"]["compared_with"], first["data"]["snapshot"],
        "{second}"
    );
    let found = anomalies(&svc);
    assert_eq!(found.len(), 1, "{found:?}");
    let a = &found[0]["data"];
    assert_eq!(a["point"], second["data"]["snapshot"]);
    let paths: Vec<&str> = a["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        !paths.is_empty() && paths.iter().all(|p| p.starts_with("/home/user/project/")),
        "paths inside the container: {paths:?}"
    );
}
