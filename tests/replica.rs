//! A plan's second copy in a real `vouch serve`: each new point is copied
//! into the replica repository, the copy is verified and restore-tested
//! on its own (its own evidence), the plan's keep rules apply there too,
//! and a replica policy holds `protected` back until the copy is proven
//! (and, on an Object Lock bucket, immutable: the store refuses to delete
//! it).

mod common;

use std::fs;
use std::path::Path;

use common::served::{get, post, sources_allow, start, Service};
use common::{random_files, Env};
use serde_json::{json, Value};

/// A service whose configuration adds `repositories` (TOML) to the default
/// repository in its data directory.
fn serve(dir: &Path, repositories: &str) -> Service {
    let config = dir.join("vouch.toml");
    fs::write(
        &config,
        format!(
            "{}[scheduler]\ntick = \"1s\"\nmax_jitter = \"0s\"\n\n{repositories}",
            sources_allow(dir)
        ),
    )
    .unwrap();
    start(&dir.join("data"), &config, None)
}

/// Runs the plan and waits until its newest copy is a new one (not
/// `previous`) and recoverable; returns the plan as the API shows it then.
fn run_until_copy_proven(svc: &Service, plan: &str, previous: Option<&str>) -> Value {
    let (status, body) = post(svc, &format!("/api/v1/plans/{plan}/run"), &Value::Null);
    assert_eq!(status, 202, "{body}");
    common::served::eventually("the new copy proven", || {
        let p = get(svc, &format!("/api/v1/plans/{plan}"));
        let newest = &p["copies"][0]["newest"];
        (newest["state"] == "recoverable" && newest["point"].as_str() != previous).then_some(p)
    })
}

fn newest_copy(plan: &Value) -> String {
    plan["copies"][0]["newest"]["point"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn history_types(svc: &Service, point: &str) -> Vec<String> {
    get(svc, &format!("/api/v1/points/{point}"))["history"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn each_point_is_copied_and_the_copy_proven_on_its_own_and_kept_by_the_plans_rules() {
    let replica = Env::new();
    replica.init();
    let dir = replica.dir.path();
    let src = dir.join("src");
    random_files(&src, 6, 120_000, 41);
    fs::write(dir.join("pw"), common::PASSWORD).unwrap();
    let svc = serve(
        dir,
        &format!(
            "[[repositories]]\nid = \"second\"\npath = {:?}\npassphrase_file = {:?}\n",
            replica.repo.to_str().unwrap(),
            dir.join("pw").to_str().unwrap()
        ),
    );
    let (status, body) = post(
        &svc,
        "/api/v1/plans",
        &json!({"id": "docs", "source": src, "schedule": "0 3 * * *", "rpo": "1h",
            "retention": {"last": 1},
            "replica": {"repository": "second", "require": "proven"}}),
    );
    assert_eq!(status, 201, "{body}");
    let plan = run_until_copy_proven(&svc, "docs", None);
    assert_eq!(plan["protection"]["status"], "protected", "{plan}");
    let copies = &plan["copies"][0];
    assert_eq!(copies["repository"], "second");
    assert_eq!(copies["location"], "local");
    assert_eq!(copies["locks_enforced_by"], "vouch");
    assert_eq!(copies["newest"]["immutable"], false);
    let first_copy = copies["newest"]["point"].as_str().unwrap().to_owned();
    let first_source = copies["newest"]["source"].as_str().unwrap().to_owned();

    // The copy's own proof, in its own history; the source's is its own.
    let copy_history = history_types(&svc, &first_copy);
    for t in [
        "copy.committed",
        "verification.passed",
        "restore_test.passed",
    ] {
        assert!(
            copy_history.iter().any(|x| x == t),
            "{t} missing: {copy_history:?}"
        );
    }
    let point = get(&svc, &format!("/api/v1/points/{first_copy}"));
    assert_eq!(point["repository"], "second");
    assert_eq!(point["copy_of"]["source"], first_source.as_str());
    assert_eq!(
        point["restore_test"]["passed"], true,
        "the copy was restore-tested: {point}"
    );
    // The copy is a snapshot of the replica, which verifies and restores
    // with the CLI, outside the service.
    let snaps: Value = serde_json::from_str(replica.ok(&["snapshots", "--json"]).trim()).unwrap();
    let ids: Vec<&str> = snaps
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(ids, vec![first_copy.as_str()]);
    let out = replica.ok(&["verify", "--read-data"]);
    assert!(out.contains("no damage found"), "{out}");

    // Two more runs with `keep last 1`: the plan's rules apply in the
    // replica too (never forgetting its newest recoverable copy), and the
    // reconciliation deletes what they forgot from it.
    fs::write(src.join("new-1"), common::random_bytes(90_000, 42)).unwrap();
    let second = newest_copy(&run_until_copy_proven(&svc, "docs", Some(&first_copy)));
    fs::write(src.join("new-2"), common::random_bytes(90_000, 43)).unwrap();
    run_until_copy_proven(&svc, "docs", Some(&second));
    let gone = common::served::eventually("the first copy forgotten and deleted", || {
        let p = get(&svc, &format!("/api/v1/points/{first_copy}"));
        let listed: Value =
            serde_json::from_str(replica.ok(&["snapshots", "--json"]).trim()).unwrap();
        let still_there = listed
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == first_copy.as_str());
        (p["state"] == "expired" && !still_there).then_some(p)
    });
    assert_eq!(gone["repository"], "second");
    let plan = get(&svc, "/api/v1/plans/docs");
    assert!(
        plan["copies"][0]["live"].as_u64().is_some_and(|n| n <= 2),
        "{plan}"
    );
    let jobs = get(&svc, "/api/v1/jobs?plan=docs&kind=copy");
    assert_eq!(jobs.as_array().map(Vec::len), Some(3), "{jobs}");
    assert!(
        jobs.as_array()
            .unwrap()
            .iter()
            .all(|j| j["state"] == "succeeded"),
        "{jobs}"
    );
}

#[test]
fn a_copy_on_an_object_lock_bucket_is_immutable_and_makes_the_plan_protected() {
    use vouch::backend::{Backend, FileKind};
    let Some(mut remote) = Env::s3() else { return };
    let endpoint = common::s3_endpoint().unwrap();
    let bucket = format!("vouch-replica-{}", common::hex_id());
    remote.repo = format!("s3:{endpoint}/{bucket}/repo").into();
    let location = remote.repo.to_str().unwrap().to_owned();
    remote.ok(&[
        "init",
        "--object-lock",
        "--insecure-kdf",
        "--kdf-memory-kib",
        "1024",
        "--kdf-iterations",
        "1",
        "--pack-size-mib",
        "1",
    ]);
    let dir = remote.dir.path();
    let src = dir.join("src");
    random_files(&src, 4, 150_000, 51);
    fs::write(dir.join("pw"), common::PASSWORD).unwrap();
    let svc = serve(
        dir,
        &format!(
            "[[repositories]]\nid = \"offsite\"\nlocation = {location:?}\npassphrase_file = {:?}\n",
            dir.join("pw").to_str().unwrap()
        ),
    );
    let (status, body) = post(
        &svc,
        "/api/v1/plans",
        &json!({"id": "vault", "source": src, "schedule": "0 3 * * *", "rpo": "1h",
            "replica": {"repository": "offsite", "lock_for": "2h",
                        "require": "immutable-off-host"}}),
    );
    assert_eq!(status, 201, "{body}");
    let plan = run_until_copy_proven(&svc, "vault", None);
    let newest = &plan["copies"][0]["newest"];
    assert_eq!(plan["copies"][0]["location"], "remote", "{plan}");
    assert_eq!(plan["copies"][0]["locks_enforced_by"], "storage", "{plan}");
    assert_eq!(newest["immutable"], true, "{plan}");
    let plan = common::served::eventually("the plan protected", || {
        let p = get(&svc, "/api/v1/plans/vault");
        (p["protection"]["status"] == "protected").then_some(p)
    });
    assert!(plan["protection"]["reason"].is_string(), "{plan}");
    // The store refuses to delete the copy's manifest, whoever asks.
    let copy = newest["point"].as_str().unwrap();
    let s3 = vouch::backend::s3::S3Backend::from_environment(&location).unwrap();
    let retention = s3
        .retention(FileKind::Snapshot, copy)
        .unwrap()
        .expect("the copy's manifest is retained");
    assert_eq!(retention.mode, "COMPLIANCE");
    let version = s3.version_of(FileKind::Snapshot, copy).unwrap().unwrap();
    let err = s3
        .delete_version(FileKind::Snapshot, copy, &version)
        .unwrap_err();
    assert!(err.to_string().contains("AccessDenied"), "{err}");
    assert!(!s3.list(FileKind::Pack).unwrap().is_empty());
}
