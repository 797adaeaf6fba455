//! `vouch bench`: the harness logic (refusal of compressible data, condition
//! recording, ratios, rendering) and one small smoke run without peers.

use std::path::Path;
use std::process::Command;

use vouch::bench::{
    ratios, BenchError, CacheState, Conditions, Incompressible, RealData, Report, ScenarioResult,
    StepResult, ToolResult, Usage,
};

fn usage(wall: f64, cpu: f64) -> Usage {
    Usage {
        wall_s: wall,
        user_s: cpu,
        sys_s: 0.0,
        max_rss_kib: 80 * 1024,
        disk_read_bytes: 0,
        read_bytes: 0,
        exit_code: 0,
    }
}

fn result(tool: &str, wall: f64, repo: u64) -> ToolResult {
    ToolResult::from_usage(
        tool,
        &[usage(wall, wall * 1.5)],
        wall,
        512 << 20,
        1,
        0,
        repo,
        CacheState::Cold,
        0.1,
    )
}

fn random_file(dir: &Path, bytes: usize) {
    let mut buf = vec![0u8; bytes];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for b in buf.iter_mut() {
        // xorshift: not cryptographic, but incompressible for zstd.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = (x >> 24) as u8;
    }
    std::fs::write(dir.join("random.bin"), buf).unwrap();
}

#[test]
fn throughput_data_must_be_incompressible() {
    let d = tempfile::tempdir().unwrap();
    random_file(d.path(), 1 << 20);
    let ok = Incompressible::check(d.path(), "random").unwrap();
    assert!(ok.data().sample_ratio > 0.95);
    assert_eq!(ok.data().files, 1);
    assert_eq!(ok.data().bytes, 1 << 20);

    let text = tempfile::tempdir().unwrap();
    let t: String = (0..60_000)
        .map(|i| format!("int x{i} = {};\n", i % 17))
        .collect();
    std::fs::write(text.path().join("a.c"), &t).unwrap();
    match Incompressible::check(text.path(), "source text") {
        Err(BenchError::Compressible { ratio, .. }) => assert!(ratio < 0.5, "{ratio}"),
        other => panic!("text accepted as throughput data: {other:?}"),
    }
    // The same text is fine as real data.
    RealData::check(text.path(), "source text").unwrap();
}

#[test]
fn periodic_data_is_refused_even_if_each_period_is_random() {
    let d = tempfile::tempdir().unwrap();
    // 64 copies of one random MiB: each sample piece looks random.
    random_file(d.path(), 1 << 20);
    let one = std::fs::read(d.path().join("random.bin")).unwrap();
    let mut all = Vec::new();
    for _ in 0..64 {
        all.extend_from_slice(&one);
    }
    std::fs::write(d.path().join("random.bin"), all).unwrap();
    let e = Incompressible::check(d.path(), "periodic").unwrap_err();
    assert!(matches!(e, BenchError::Periodic { .. }), "{e}");
}

#[test]
fn ratios_are_vouch_over_each_peer() {
    let rs = vec![
        result("vouch", 2.0, 100 << 20),
        result("restic", 4.0, 200 << 20),
        result("borg", 8.0, 50 << 20),
    ];
    let r = ratios(&rs);
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].peer, "restic");
    assert_eq!(r[0].wall, Some(0.5));
    assert_eq!(r[0].repo_size, Some(0.5));
    assert_eq!(r[1].wall, Some(0.25));
    assert_eq!(r[1].repo_size, Some(2.0));
    // No vouch, no ratios; a zero figure gives no ratio rather than infinity.
    assert!(ratios(&rs[1..]).is_empty());
    let z = ratios(&[result("vouch", 1.0, 0), result("borg", 1.0, 0)]);
    assert_eq!(z[0].repo_size, None);
    let t = &rs[0];
    assert_eq!(t.cores_used, 1.5);
    assert_eq!(t.mib_per_s, 256.0);
    assert_eq!(t.repo_added_mib, 100.0);
}

#[test]
fn report_renders_markdown_and_json_with_conditions() {
    let d = tempfile::tempdir().unwrap();
    random_file(d.path(), 1 << 20);
    let data = Incompressible::check(d.path(), "one random file").unwrap();
    let mut st = StepResult::throughput("backup, one 1 MiB file", &data);
    st.push(result("vouch", 1.0, 1 << 20));
    st.push(result("restic", 2.0, 1 << 20));
    let mut sc = ScenarioResult::new("large-file");
    sc.data.push(data.data().clone());
    sc.steps.push(st);
    let report = Report {
        run_id: "bench-test".into(),
        conditions: Conditions::record(
            d.path(),
            vouch::bench::Scale::Small,
            vouch::bench::CachePolicy::Cold,
            vec![],
            "vouch bench run --workdir /x".into(),
        ),
        scenarios: vec![
            sc,
            ScenarioResult::skipped("slow-target", "no HTTP backend yet"),
        ],
        warnings: vec!["load average 1.20 before x (vouch): other work was running".into()],
    };
    let md = report.to_markdown();
    assert!(
        md.contains("| scenario | step | data | vouch | restic | vouch/restic |"),
        "{md}"
    );
    assert!(
        md.contains("| large-file | backup, one 1 MiB file | random, 1 files, 1 MiB |"),
        "{md}"
    );
    assert!(md.contains("1.00 s (cpu 1.5 s, 80 MiB; 512 MiB/s)"), "{md}");
    assert!(md.contains("| 0.50 |"), "{md}");
    assert!(
        md.contains("`slow-target` skipped: no HTTP backend yet"),
        "{md}"
    );
    assert!(md.contains("warning: load average 1.20"), "{md}");
    assert!(
        md.contains("Reproduce: `vouch bench run --workdir /x`"),
        "{md}"
    );
    assert!(md.contains("**Machine:**"), "{md}");
    let v: serde_json::Value = serde_json::to_value(&report).unwrap();
    assert_eq!(v["scenarios"][0]["steps"][0]["data_kind"], "incompressible");
    assert_eq!(v["scenarios"][0]["steps"][0]["ratios"][0]["wall"], 0.5);
    assert_eq!(v["scenarios"][1]["skipped"], "no HTTP backend yet");
    assert!(v["conditions"]["cores"].as_u64().unwrap() >= 1);
    assert!(v["conditions"]["kernel"]
        .as_str()
        .unwrap()
        .starts_with("Linux"));
    assert!(v["conditions"]["fs"]["fstype"].as_str().is_some());
}

#[test]
fn unknown_scenarios_and_peers_are_usage_errors() {
    let out = Command::new(env!("CARGO_BIN_EXE_vouch"))
        .args(["bench", "run", "--workdir", "/tmp/x", "--scenario", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("large-file"));
}

/// The smoke test: the small scale of `many-small` (1000 × 16 KiB), vouch
/// only, warm caches, JSON out. A few seconds in the dev profile.
#[test]
fn smoke_many_small_small_scale_without_peers() {
    let work = tempfile::tempdir().unwrap();
    let md = work.path().join("out.md");
    let out = Command::new(env!("CARGO_BIN_EXE_vouch"))
        .args([
            "--json",
            "bench",
            "run",
            "--scale",
            "small",
            "--scenario",
            "many-small",
            "--warm",
        ])
        .arg("--workdir")
        .arg(work.path())
        .arg("--out")
        .arg(&md)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sc = &v["scenarios"][0];
    assert_eq!(sc["name"], "many-small");
    let r = &sc["steps"][0]["results"][0];
    assert_eq!(r["tool"], "vouch");
    assert_eq!(sc["steps"][0]["data_files"], 1000);
    assert!(r["repo_added_mib"].as_f64().unwrap() > 15.0, "{r}");
    assert_eq!(v["conditions"]["cache_policy"], "warm");
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(
        text.contains("| many-small | backup, 1000 × 16 KiB |"),
        "{text}"
    );
    // Results are kept as JSON in the work directory too, and a second run
    // reuses the data but starts from a fresh repository.
    assert_eq!(
        std::fs::read_dir(work.path().join("results"))
            .unwrap()
            .count(),
        1
    );
}

/// The smoke test of `vouch bench service`: a tiny history (3000 events,
/// 60 points), the real `vouch serve` started three times, 4 clients for a
/// moment per endpoint. Asserts the report is coherent, never a timing.
#[test]
fn smoke_service_tiny_scale() {
    let work = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vouch"))
        .args([
            "--json",
            "bench",
            "service",
            "--events",
            "3000",
            "--points",
            "60",
            "--plans",
            "4",
            "--clients",
            "4",
            "--warmup",
            "0.2",
            "--seconds",
            "1",
            "--max-requests",
            "300",
        ])
        .arg("--workdir")
        .arg(work.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let g = &v["generated"];
    assert_eq!(g["events"], 3000);
    let by_state = g["points_by_state"].as_object().unwrap();
    assert_eq!(
        by_state.values().map(|n| n.as_u64().unwrap()).sum::<u64>(),
        60
    );
    let checks = &v["checks"];
    assert_eq!(checks["metrics_points_by_state"], g["points_by_state"]);
    assert_eq!(checks["points_match"], true);
    assert_eq!(checks["all_requests_ok"], true);
    assert_eq!(checks["points_page_all_recoverable"], true);
    assert_eq!(
        checks["points_page_len"].as_u64().unwrap(),
        by_state["recoverable"].as_u64().unwrap().min(100)
    );
    let restarts = v["restarts"].as_array().unwrap();
    assert_eq!(restarts.len(), 3);
    for r in restarts {
        let (l, ready) = (
            r["listening_s"].as_f64().unwrap(),
            r["ready_s"].as_f64().unwrap(),
        );
        assert!(l > 0.0 && ready >= l, "{r}");
        // Every event generated, plus at least serve's `service.started`.
        assert!(r["seq"].as_u64().unwrap() > 3000, "{r}");
    }
    let loads = v["loads"].as_array().unwrap();
    // The points list, /metrics, and the points list beside a writer.
    assert_eq!(loads.len(), 3);
    assert_eq!(checks["writes_ok"], true, "{checks}");
    for l in loads {
        let n = l["requests"].as_u64().unwrap();
        assert!(n > 0 && n <= 300, "{l}");
        assert_eq!(l["ok"], l["requests"], "{l}");
        assert_eq!(l["errors"], 0, "{l}");
        let p = |k: &str| l[k].as_f64().unwrap();
        assert!(
            p("p50_ms") <= p("p90_ms") && p("p90_ms") <= p("p99_ms") && p("p99_ms") <= p("max_ms"),
            "{l}"
        );
    }
    assert!(v["conditions"]["cores"].as_u64().unwrap() >= 1);
    assert!(v["log_bytes"].as_u64().unwrap() > 0);
}

/// The smoke test of `vouch bench point`: the real `vouch serve` backs up a
/// small tree, the point becomes recoverable through the service's own
/// verification and restore test, and every route that reads it answers
/// 200 under load. Asserts the report, never a timing.
#[test]
fn smoke_point_small_tree() {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    for d in ["a", "b"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
        for i in 0..20 {
            std::fs::write(
                src.join(d).join(format!("f{i}")),
                format!("{d}{i}").repeat(50),
            )
            .unwrap();
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_vouch"))
        .args([
            "--json",
            "bench",
            "point",
            "--clients",
            "2",
            "--warmup",
            "0.1",
            "--seconds",
            "0.5",
            "--max-requests",
            "100",
            "--timeout",
            "5min",
        ])
        .arg("--workdir")
        .arg(work.path().join("work"))
        .arg("--source")
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "recoverable", "{v}");
    assert_eq!(v["files"], 40, "{v}");
    assert_eq!(v["restore_test"]["passed"], true, "{v}");
    assert_eq!(v["restore_test"]["evidence"]["files"], 40, "{v}");
    let loads = v["loads"].as_array().unwrap();
    let routes: Vec<&str> = loads
        .iter()
        .map(|l| l["endpoint"].as_str().unwrap())
        .collect();
    // The detail, the source's listing, its first directory's, the plan's
    // points, the overview, /metrics.
    assert_eq!(routes.len(), 6, "{routes:?}");
    assert!(routes[2].ends_with("/src/a"), "{routes:?}");
    for l in loads {
        let n = l["requests"].as_u64().unwrap();
        assert!(n > 0 && n <= 100, "{l}");
        assert_eq!(l["ok"], l["requests"], "{l}");
        assert!(l["body_bytes"].as_u64().unwrap() > 0, "{l}");
    }
    assert!(v["serve_peak_rss_mib"].as_f64().unwrap() > 0.0);
}
