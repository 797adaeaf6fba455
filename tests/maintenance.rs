//! The service maintains its repositories (issue 18): scheduled prune jobs
//! free what retention gave up, alone in their repository, keeping packs
//! in no index that are younger than the grace period, with events and
//! metrics.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::random_files;
use common::served::{eventually, get, post, raw, sources_allow, start, Service};
use serde_json::{json, Value};

fn events(svc: &Service, kind: &str) -> Vec<Value> {
    get(svc, &format!("/api/v1/events?type={kind}&limit=1000"))["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Runs the plan; waits until its newest point is a new one (not
/// `previous`) and recoverable.
fn run_and_wait_recoverable(svc: &Service, previous: Option<&str>) -> String {
    let (status, body) = post(svc, "/api/v1/plans/docs/run", &Value::Null);
    assert_eq!(status, 202, "{body}");
    eventually("a new recoverable point", || {
        let points = get(svc, "/api/v1/points?plan=docs");
        let newest = points.as_array()?.first()?;
        (newest["id"].as_str() != previous && newest["state"] == "recoverable")
            .then(|| newest["id"].as_str().unwrap_or_default().to_owned())
    })
}

fn packs(repo: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for shard in fs::read_dir(repo.join("data")).unwrap().flatten() {
        for p in fs::read_dir(shard.path()).unwrap().flatten() {
            out.push(p.path());
        }
    }
    out
}

#[test]
fn prune_jobs_free_what_retention_gave_up_alone_in_their_repository() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("docs");
    // Seeds far apart: `random_files` seeds file i with seed + i, and the
    // three versions must share no file (else the first point's pack stays
    // mostly used, and prune rightly keeps it).
    random_files(&src, 4, 300_000, 100);
    let config = dir.path().join("vouch.toml");
    fs::write(
        &config,
        format!(
            "{}[scheduler]\ntick = \"1s\"\nmax_jitter = \"0s\"\n\n[jobs]\nmin_every = \"1s\"\n\n\
             [security]\nevaluate_every = \"off\"\n\n\
             [maintenance]\nprune_every = \"2s\"\nprune_grace = \"1h\"\n",
            sources_allow(dir.path())
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let repo = data.join("repository");
    let svc = start(&data, &config, None);
    let (status, body) = post(
        &svc,
        "/api/v1/plans",
        &json!({"id": "docs", "source": src, "schedule": "0 3 * * *", "rpo": "1h",
                "retention": {"last": 1}}),
    );
    assert_eq!(status, 201, "{body}");
    let first = run_and_wait_recoverable(&svc, None);
    // New content: the first point's data is needed by nothing once
    // retention forgets it.
    fs::remove_dir_all(&src).unwrap();
    random_files(&src, 4, 300_000, 200);
    let second = run_and_wait_recoverable(&svc, Some(&first));
    assert_ne!(first, second);
    // Retention never forgets the plan's last recoverable point: the run
    // after the second one is proven lets the first go.
    fs::remove_dir_all(&src).unwrap();
    random_files(&src, 4, 300_000, 300);
    let third = run_and_wait_recoverable(&svc, Some(&second));
    assert_ne!(third, second);
    eventually("the first point forgotten", || {
        events(&svc, "point.forgotten")
            .iter()
            .any(|e| e["data"]["point"] == first.as_str())
            .then_some(())
    });

    // Two copies of a pack under names no index knows (what an interrupted
    // writer leaves): one written two hours ago, one just now.
    let some_pack = packs(&repo)[0].clone();
    let plant = |name: &str| {
        let dir = repo.join("data").join(&name[..2]);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        fs::copy(&some_pack, &path).unwrap();
        path
    };
    let old = plant(&"c".repeat(64));
    let young = plant(&"d".repeat(64));
    let touched = std::process::Command::new("touch")
        .args(["-d", "2 hours ago"])
        .arg(&old)
        .status()
        .unwrap();
    assert!(touched.success());

    let pruned = eventually("a prune that freed the first point's data", || {
        events(&svc, "repository.pruned").into_iter().find(|e| {
            let d = &e["data"];
            let rewritten = d["packs_deleted"].as_u64().unwrap_or(0)
                + d["packs_repacked"].as_u64().unwrap_or(0);
            rewritten >= 1 && !old.exists()
        })
    });
    let d = &pruned["data"];
    assert_eq!(d["repository"], "default", "{pruned}");
    assert!(d["bytes_freed"].as_u64() > Some(0), "{pruned}");
    let leftovers_removed: u64 = events(&svc, "repository.pruned")
        .iter()
        .filter_map(|e| e["data"]["leftover_packs"].as_u64())
        .sum();
    assert_eq!(leftovers_removed, 1, "the old pack in no index went, once");
    assert!(
        young.exists(),
        "a pack in no index younger than the grace period is kept"
    );
    let kept_young = events(&svc, "repository.pruned")
        .iter()
        .any(|e| e["data"]["young_packs_kept"].as_u64() >= Some(1));
    assert!(kept_young, "the kept pack is counted");
    // The newest point is untouched.
    assert_eq!(
        get(&svc, &format!("/api/v1/points/{third}"))["state"],
        "recoverable"
    );

    // A prune never runs beside another job of its repository (by seq:
    // the log orders every start and end).
    let mut spans: Vec<(i64, i64, String, String)> = Vec::new();
    let mut started: std::collections::HashMap<String, (i64, String)> = Default::default();
    let all = get(&svc, "/api/v1/events?limit=1000");
    for e in all["events"].as_array().unwrap() {
        let at = e["seq"].as_i64().unwrap_or_default();
        let job = e["data"]["job"].as_str().unwrap_or_default().to_owned();
        match e["type"].as_str().unwrap_or_default() {
            "job.started" => {
                started.insert(
                    job.clone(),
                    (at, job.split('-').next().unwrap_or_default().to_owned()),
                );
            }
            "job.finished" | "job.failed" | "job.abandoned" => {
                if let Some((from, kind)) = started.remove(&job) {
                    spans.push((from, at, kind, job));
                }
            }
            _ => {}
        }
    }
    let prunes: Vec<_> = spans.iter().filter(|s| s.2 == "prune").collect();
    assert!(!prunes.is_empty(), "prune jobs ran: {spans:?}");
    for p in &prunes {
        for o in spans.iter().filter(|o| o.3 != p.3) {
            assert!(
                o.1 <= p.0 || o.0 >= p.1,
                "{} ran beside {}: {spans:?}",
                o.3,
                p.3
            );
        }
    }

    let (status, text) = raw(svc.addr, "GET", "/metrics", &svc.token, &[], b"");
    assert_eq!(status, 200);
    let freed = text
        .lines()
        .find(|l| l.starts_with("vouch_prune_freed_bytes_total{repository=\"default\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(freed > 0.0, "{text}");
    assert!(text.contains("vouch_repository_last_prune_timestamp_seconds{repository=\"default\"}"));
}
