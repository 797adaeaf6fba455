//! `/metrics` as Prometheus users expect it (ecosystem review §2), and the
//! shipped rules and dashboard (`contrib/`): a real service backs up, fails
//! a backup, proves a point; the scrape has the per-plan, per-repository,
//! job, alert, proof-cost, HTTP and process series; every metric the rules
//! and the dashboard name exists; `promtool` checks and unit-tests the
//! rules.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

/// The value of the first sample of `series` (name with its labels, as
/// printed), if any.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn scrape(svc: &common::served::Service) -> String {
    let (status, text) = common::served::raw(svc.addr, "GET", "/metrics", &svc.token, &[], b"");
    assert_eq!(status, 200, "{text}");
    text
}

/// Metric family names of a scrape (`# TYPE` lines).
fn families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_owned)
        .collect()
}

/// Every `vouch_*` or `process_*` metric name in `text`, with a
/// histogram's `_bucket`, `_count` and `_sum` taken back to its family.
fn names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    for prefix in ["vouch_", "process_"] {
        let mut from = 0;
        while let Some(i) = text[from..].find(prefix) {
            let start = from + i;
            let mut end = start;
            while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
                end += 1;
            }
            // Not inside a longer identifier (e.g. `my_vouch_x`).
            let standalone = start == 0
                || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
            if standalone {
                let mut name = &text[start..end];
                for suffix in ["_bucket", "_count", "_sum"] {
                    if let Some(base) = name.strip_suffix(suffix) {
                        if base.ends_with("_seconds") {
                            name = base;
                        }
                    }
                }
                out.insert(name.to_owned());
            }
            from = end.max(start + 1);
        }
    }
    out
}

fn contrib(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("contrib")
        .join(rel)
}

#[test]
fn metrics_cover_plans_repositories_jobs_alerts_and_the_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("mkdir");
    for i in 0..20 {
        std::fs::write(
            home.join(format!("f{i}")),
            format!("file {i}\n").repeat(500),
        )
        .expect("write");
    }
    let cfg = dir.path().join("vouch.toml");
    std::fs::write(
        &cfg,
        format!(
            "{}[alerting]\nevaluate_every = \"1s\"\n\n[jobs]\nmax_attempts = 1\n",
            common::served::sources_allow(dir.path())
        ),
    )
    .expect("config");
    let svc = common::served::start(&dir.path().join("data"), &cfg, None);
    for (id, source) in [
        ("home", home.clone()),
        ("broken", dir.path().join("missing")),
    ] {
        let (status, body) = common::served::post(
            &svc,
            "/api/v1/plans",
            &json!({"id": id, "source": source, "schedule": "0 3 * * *", "rpo": "1d"}),
        );
        assert_eq!(status, 201, "{body}");
        let (status, body) =
            common::served::post(&svc, &format!("/api/v1/plans/{id}/run"), &Value::Null);
        assert_eq!(status, 202, "{body}");
    }
    // Backed up, verified and restore-tested: recoverable.
    common::served::eventually("a recoverable point of home", || {
        let pts = common::served::get(&svc, "/api/v1/points?plan=home&state=recoverable");
        (pts.as_array().map(Vec::len) == Some(1)).then_some(())
    });
    let text = common::served::eventually("the failed backup and the idle queue", || {
        let text = scrape(&svc);
        let failed = sample(
            &text,
            "vouch_plan_last_backup_failure_timestamp_seconds{plan=\"broken\"}",
        )
        .is_some();
        let idle = ["backup", "verify", "restore-test"].iter().all(|k| {
            sample(&text, &format!("vouch_jobs_running{{kind=\"{k}\"}}")) == Some(0.0)
                && sample(&text, &format!("vouch_jobs_queued{{kind=\"{k}\"}}")) == Some(0.0)
        });
        let alert = text
            .lines()
            .any(|l| l.starts_with("vouch_alerts_firing{") && !l.ends_with(" 0"));
        (failed && idle && alert).then_some(text)
    });
    assert_eq!(
        sample(&text, "vouch_plan_rpo_seconds{plan=\"home\"}"),
        Some(86400.0)
    );
    let success = sample(
        &text,
        "vouch_plan_last_backup_success_timestamp_seconds{plan=\"home\"}",
    )
    .expect("home's last success");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    assert!(
        (now - success).abs() < 600.0,
        "success at {success}, now {now}"
    );
    assert_eq!(
        sample(
            &text,
            "vouch_plan_last_backup_success_timestamp_seconds{plan=\"broken\"}"
        ),
        None,
        "a plan that never succeeded has no success time"
    );
    for series in [
        "vouch_repository_size_bytes{repository=\"default\"}",
        "vouch_repository_packs{repository=\"default\"}",
        "vouch_repository_snapshots{repository=\"default\"}",
        "vouch_repository_free_bytes{repository=\"default\"}",
        "vouch_restore_test_bytes_total",
        "process_resident_memory_bytes",
        "process_start_time_seconds",
    ] {
        let v = sample(&text, series).unwrap_or_else(|| panic!("no {series}:\n{text}"));
        assert!(v > 0.0, "{series} = {v}");
    }
    assert_eq!(
        sample(&text, "vouch_repository_snapshots{repository=\"default\"}"),
        Some(1.0)
    );
    assert!(
        text.contains("vouch_http_request_duration_seconds_bucket{route=\"/api/v1/plans\""),
        "{text}"
    );

    // What the shipped rules and dashboard name exists: in this scrape, or
    // (families with no series here, e.g. agents, webhooks) declared as a
    // metric name in web/src/metrics.rs, where every name lives.
    let mut have = families(&text);
    let declared =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("web/src/metrics.rs"))
            .expect("web/src/metrics.rs");
    have.extend(
        declared
            .lines()
            .filter_map(|l| l.trim().strip_prefix("pub const "))
            .filter_map(|l| l.split('"').nth(1))
            .filter(|n| n.starts_with("vouch_"))
            .map(str::to_owned),
    );
    for file in ["prometheus/vouch.rules.yml", "grafana/vouch-dashboard.json"] {
        let body = std::fs::read_to_string(contrib(file)).expect("contrib file");
        if file.ends_with(".json") {
            serde_json::from_str::<Value>(&body).expect("the dashboard is JSON");
        }
        let named = names_in(&body);
        assert!(named.len() > 5, "{file}: {named:?}");
        let missing: Vec<_> = named.iter().filter(|n| !have.contains(*n)).collect();
        assert!(
            missing.is_empty(),
            "{file} names metrics the service does not export: {missing:?}"
        );
    }
}

/// `promtool` (Debian's `prometheus`) accepts the rules and their unit
/// tests pass.
#[test]
fn the_shipped_alert_rules_pass_promtool() {
    let Ok(out) = Command::new("promtool").arg("--version").output() else {
        eprintln!("SKIPPED: promtool is not installed (apt-get install prometheus; .ci/run does)");
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install promtool for this test"
        );
        return;
    };
    assert!(out.status.success());
    let dir = contrib("prometheus");
    for args in [
        vec!["check", "rules", "vouch.rules.yml"],
        vec!["test", "rules", "vouch.rules.test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(&args)
            .current_dir(&dir)
            .output()
            .expect("promtool runs");
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
