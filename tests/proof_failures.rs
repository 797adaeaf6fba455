//! End-to-end tests of failing proofs against the real `vouch serve`
//! (review findings C1 and H3a): a point whose data is damaged or gone
//! stops counting as recoverable and raises a critical alert; an empty
//! source never yields a recoverable point. The helpers are those of
//! `tests/service.rs` (the binary on 127.0.0.1:0, plain HTTP/1.1, bounded
//! polling).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;

use common::served::*;

/// Polls `f` until it gives `Some`, at most `WAIT`.
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn write_config(dir: &Path, webhooks: &str) -> PathBuf {
    let path = dir.join("vouch.toml");
    std::fs::write(
        &path,
        format!(
            "{}[scheduler]\ntick = \"1s\"\nmax_jitter = \"0s\"\n\n[jobs]\nretry_initial = \"1s\"\nshutdown_grace = \"5s\"\nmin_every = \"1s\"\n\n[alerting]\nevaluate_every = \"1s\"\n{webhooks}",
            sources_allow(dir)
        ),
    )
    .expect("config written");
    path
}

fn source_tree(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("sub")).expect("mkdir");
    std::fs::write(src.join("hello.txt"), b"hello, vouch\n").expect("write");
    let mut big = vec![0u8; 300_000];
    for (i, b) in big.iter_mut().enumerate() {
        *b = (i.wrapping_mul(2654435761) >> 13) as u8;
    }
    std::fs::write(src.join("sub/data.bin"), &big).expect("write");
    src
}

/// A plan that restore-tests its newest point every 2 s.
fn create_plan(svc: &Service, id: &str, source: &Path) {
    let (status, body) = post(
        svc,
        "/api/v1/plans",
        &serde_json::json!({
            "id": id, "source": source, "schedule": "0 3 * * *", "rpo": "1h",
            "restore_test": {"every": "2s"}
        }),
    );
    assert_eq!(status, 201, "plan created: {body}");
}

fn run_plan(svc: &Service, id: &str) {
    let (status, body) = post(svc, &format!("/api/v1/plans/{id}/run"), &Value::Null);
    assert_eq!(status, 202, "run accepted: {body}");
}

fn events_of(svc: &Service, kind: &str) -> Vec<Value> {
    get(svc, &format!("/api/v1/events?type={kind}&limit=1000"))["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn point_state(svc: &Service, plan: &str) -> Option<String> {
    get(svc, &format!("/api/v1/points?plan={plan}"))[0]["state"]
        .as_str()
        .map(str::to_owned)
}

fn flip_byte(path: &Path) {
    let mut bytes = std::fs::read(path).expect("read pack");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(path, &bytes).expect("write pack");
}

#[test]
fn c1_a_recoverable_point_whose_packs_are_all_damaged_becomes_not_recoverable_with_a_critical_alert(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = source_tree(dir.path());
    let config = write_config(dir.path(), "");
    let data = dir.path().join("data");
    let svc = start(&data, &config, None);
    create_plan(&svc, "docs", &src);
    run_plan(&svc, "docs");
    eventually("the point to be recoverable", || {
        (point_state(&svc, "docs").as_deref() == Some("recoverable")).then_some(())
    });
    let packs = pack_files(&data);
    assert!(!packs.is_empty());
    for p in &packs {
        flip_byte(p);
    }
    // The next periodic restore test is stopped by the damage: a verdict,
    // and the job itself finishes.
    let failed = eventually("a failed restore test", || {
        events_of(&svc, "restore_test.failed").into_iter().next()
    });
    assert_eq!(failed["data"]["cause"], "damaged", "{failed}");
    let state = eventually("the point to leave recoverable", || {
        point_state(&svc, "docs").filter(|s| s != "recoverable")
    });
    assert!(
        state == "unrecoverable" || state == "corrupt",
        "the point is {state}"
    );
    let alert = eventually("a critical alert", || {
        get(&svc, "/api/v1/alerts?state=open")
            .as_array()
            .and_then(|a| a.iter().find(|a| a["severity"] == "critical").cloned())
    });
    assert!(alert["subject"].as_str().is_some(), "{alert}");
}

#[test]
fn h3_a_plan_whose_source_is_an_empty_directory_never_shows_a_recoverable_point() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("empty");
    std::fs::create_dir_all(&src).expect("mkdir");
    let config = write_config(dir.path(), "");
    let svc = start(&dir.path().join("data"), &config, None);
    create_plan(&svc, "empty", &src);
    run_plan(&svc, "empty");
    // Wait for the restore test to have run (whatever it decided).
    let tested = eventually("a restore test of the empty point", || {
        events_of(&svc, "restore_test.failed")
            .into_iter()
            .chain(events_of(&svc, "restore_test.passed"))
            .next()
    });
    // Recorded as what it is, a pass over 0 files, which the projection
    // refuses as proof (vacuous): the point stays `verified` at best and
    // the plan is at risk because its source came back empty.
    assert_eq!(tested["type"], "restore_test.passed", "{tested}");
    assert_eq!(tested["data"]["evidence"]["files"], 0);
    // Give a second periodic test its turn, then look.
    std::thread::sleep(Duration::from_secs(3));
    for p in get(&svc, "/api/v1/points?plan=empty")
        .as_array()
        .expect("points")
    {
        assert_ne!(p["state"], "recoverable", "{p}");
    }
    // The plan is at risk for the right reason, and someone is told.
    let plan = eventually("the plan to be at risk because its source is empty", || {
        let plan = get(&svc, "/api/v1/plans/empty");
        (plan["protection"]["status"] == "at-risk"
            && plan["protection"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("empty")))
        .then_some(plan)
    });
    assert_eq!(plan["protection"]["status"], "at-risk", "{plan}");
    let alert = eventually("an alert that the source came back empty", || {
        get(&svc, "/api/v1/alerts?state=open")
            .as_array()
            .and_then(|a| {
                a.iter()
                    .find(|a| a["message"].as_str().is_some_and(|m| m.contains("empty")))
                    .cloned()
            })
    });
    assert_eq!(alert["severity"], "critical", "{alert}");
}

#[test]
fn c1_a_restore_test_of_a_point_whose_tree_pack_was_deleted_records_restore_test_failed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = source_tree(dir.path());
    let config = write_config(dir.path(), "");
    let data = dir.path().join("data");
    let svc = start(&data, &config, None);
    create_plan(&svc, "docs", &src);
    run_plan(&svc, "docs");
    eventually("the point to be recoverable", || {
        (point_state(&svc, "docs").as_deref() == Some("recoverable")).then_some(())
    });
    // Every pack, so the one holding the root tree is gone too.
    for p in pack_files(&data) {
        std::fs::remove_file(&p).expect("delete pack");
    }
    let failed = eventually("a failed restore test", || {
        events_of(&svc, "restore_test.failed").into_iter().next()
    });
    assert_eq!(failed["data"]["cause"], "missing", "{failed}");
    assert!(
        failed["data"]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("pack ")),
        "{failed}"
    );
    // The job finished with its verdict: no job.failed for the test.
    let job = failed["data"]["job"].as_str().expect("a job id").to_owned();
    assert!(
        !events_of(&svc, "job.failed")
            .iter()
            .any(|e| e["data"]["job"] == job.as_str()),
        "the restore test's job failed instead of finishing"
    );
    eventually("the point to leave recoverable", || {
        point_state(&svc, "docs").filter(|s| s != "recoverable")
    });
}
