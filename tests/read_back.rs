//! End to end, against the real `vouch serve` and a real repository on
//! disk: damage that the rolling read-back finds in a pack demotes the
//! points that reference it at once, a follow-up verification of each such
//! point is scheduled and confirms the damage (`verification.failed`, the
//! point `corrupt`), and an alert fires (review H1, issue 12).

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

/// A fast scheduler, and the rolling read-back reading the whole
/// repository (one slice) every 3 s.
fn write_config(dir: &Path) -> PathBuf {
    let path = dir.join("vouch.toml");
    std::fs::write(
        &path,
        format!(
            "{}[scheduler]\ntick = \"1s\"\nmax_jitter = \"0s\"\n\n\
             [jobs]\nretry_initial = \"1s\"\nshutdown_grace = \"5s\"\n\n\
             [alerting]\nevaluate_every = \"1s\"\n\n\
             [verification]\nread_back_window = \"3s\"\nread_back_slices = 1\n",
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

fn events_of(svc: &Service, kind: &str) -> Vec<Value> {
    get(svc, &format!("/api/v1/events?type={kind}&limit=1000"))["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn point(svc: &Service, id: &str) -> Value {
    get(svc, &format!("/api/v1/points/{id}"))
}

fn flip_byte(path: &Path) {
    let mut bytes = std::fs::read(path).expect("read pack");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(path, &bytes).expect("write pack");
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

#[test]
fn h1_a_pack_damaged_on_disk_is_found_by_the_read_back_and_its_point_is_proven_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = source_tree(dir.path());
    let config = write_config(dir.path());
    let data = dir.path().join("data");
    let svc = start(&data, &config, None);
    // A restore test right after the backup, then not again for an hour:
    // only the read-back can find the damage.
    let (status, body) = post(
        &svc,
        "/api/v1/plans",
        &serde_json::json!({
            "id": "docs", "source": src, "schedule": "0 3 * * *", "rpo": "1h",
            "restore_test": {"every": "1h"}
        }),
    );
    assert_eq!(status, 201, "plan created: {body}");
    let (status, body) = post(&svc, "/api/v1/plans/docs/run", &Value::Null);
    assert_eq!(status, 202, "run accepted: {body}");
    let id = eventually("the point to be recoverable", || {
        let pts = get(&svc, "/api/v1/points?plan=docs");
        let p = pts.as_array()?.first()?.clone();
        (p["state"] == "recoverable").then(|| p["id"].as_str().map(str::to_owned))?
    });

    // The read-back reads the repository intact first.
    let intact = eventually("an intact read-back", || {
        events_of(&svc, "repository.read_back")
            .into_iter()
            .find(|e| strings(&e["data"]["damaged_packs"]).is_empty())
    });
    let after = intact["seq"].as_u64().expect("seq");

    // Damage one pack file on disk: the largest, whose middle lies inside
    // the point's file data. (The first by name, as before, could be the
    // small pack of a tree and `hello.txt`, whose middle may be its
    // header: the read-back then finds the damage, but every blob still
    // reads and the follow-up verification rightly passes, so the test
    // failed now and then, depending on the random pack names.)
    let mut packs = pack_files(&data);
    assert!(!packs.is_empty(), "the backup wrote packs");
    packs.sort_by_key(|p| std::cmp::Reverse(std::fs::metadata(p).map_or(0, |m| m.len())));
    let victim = &packs[0];
    let victim_id = victim
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a pack file name")
        .to_owned();
    flip_byte(victim);

    // (a) The read-back names the damaged pack and the affected point.
    let found = eventually("a read-back that finds the damage", || {
        events_of(&svc, "repository.read_back")
            .into_iter()
            .find(|e| {
                e["seq"].as_u64() > Some(after) && !strings(&e["data"]["damaged_packs"]).is_empty()
            })
    });
    assert_eq!(
        strings(&found["data"]["damaged_packs"]),
        vec![victim_id.clone()],
        "{found}"
    );
    assert_eq!(
        strings(&found["data"]["affected_points"]),
        vec![id.clone()],
        "{found}"
    );
    let found_seq = found["seq"].as_u64().expect("seq");

    // (b) The point no longer counts as recoverable: capped until the
    // follow-up verification speaks (or already corrupt if it was quick).
    let p = eventually("the point to leave recoverable", || {
        let p = point(&svc, &id);
        (p["state"] != "recoverable").then_some(p)
    });
    assert!(
        p["state"] == "corrupt"
            || (p["state"] == "unknown"
                && p["held_unknown_because"]
                    .as_str()
                    .is_some_and(|r| r.contains(&victim_id[..8]) || r.contains("read-back"))),
        "capped by the read-back, or already proven corrupt: {p}"
    );

    // (c) A follow-up verification of that point was scheduled after the
    // read-back, ran, and recorded `verification.failed`: the point is
    // corrupt.
    let failed = eventually("the follow-up verification to fail", || {
        events_of(&svc, "verification.failed")
            .into_iter()
            .find(|e| e["data"]["point"] == id.as_str() && e["seq"].as_u64() > Some(found_seq))
    });
    let job = failed["data"]["job"]
        .as_str()
        .expect("the verification ran as a job")
        .to_owned();
    let scheduled = events_of(&svc, "job.scheduled")
        .into_iter()
        .find(|e| e["data"]["job"] == job.as_str())
        .expect("the verification was scheduled");
    assert!(scheduled["seq"].as_u64() > Some(found_seq), "{scheduled}");
    assert!(
        !strings(&failed["data"]["damaged"]).is_empty(),
        "the failure says what is damaged: {failed}"
    );
    assert_eq!(failed["data"]["depth"], "ReadAll", "{failed}");
    let job_view = get(&svc, &format!("/api/v1/jobs/{job}"));
    assert_eq!(job_view["kind"], "verify", "{job_view}");
    assert_eq!(job_view["point"], id.as_str(), "{job_view}");
    eventually("the point to be corrupt", || {
        (point(&svc, &id)["state"] == "corrupt").then_some(())
    });

    // (d) Someone is told: the read-back's critical alert names the pack.
    let alert = eventually("a critical read-back alert", || {
        get(&svc, "/api/v1/alerts?state=open")
            .as_array()
            .and_then(|a| {
                a.iter()
                    .find(|a| {
                        a["severity"] == "critical"
                            && a["message"]
                                .as_str()
                                .is_some_and(|m| m.contains(&victim_id[..12]))
                    })
                    .cloned()
            })
    });
    assert!(alert["resolved_at"].is_null(), "{alert}");
    assert!(
        alert["subject"]
            .as_str()
            .is_some_and(|s| s.contains("read-back")),
        "{alert}"
    );
}
