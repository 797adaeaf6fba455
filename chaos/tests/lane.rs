//! The CI lane of the chaos harness: `vouch-chaos run` with fixed seeds
//! against the real `vouch` binary (a service, agents, their repositories),
//! every scenario, about six minutes in all. Each run must end with every
//! invariant held, faults of several kinds injected, and the invariants
//! that every run reaches actually checked. A failure prints the report,
//! whose replay command reruns the same schedule.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// The `vouch` binary the workspace built beside this one (`cargo test
/// --workspace` builds it for the root package's tests).
fn vouch() -> PathBuf {
    let chaos = PathBuf::from(env!("CARGO_BIN_EXE_vouch-chaos"));
    let vouch = chaos.with_file_name("vouch");
    assert!(
        vouch.exists(),
        "{} is missing: run the workspace's tests (`cargo test --workspace`), which build it",
        vouch.display()
    );
    vouch
}

fn run(seed: u64, duration: &str) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_vouch-chaos"))
        .args(["run", "--seed", &seed.to_string(), "--duration", duration])
        .args(["--agents", "2", "--quiet", "--json"])
        .arg("--vouch")
        .arg(vouch())
        .arg("--work-dir")
        .arg(dir.path().join("work"))
        .arg("--report")
        .arg(&report)
        .output()
        .expect("vouch-chaos runs");
    let md = std::fs::read_to_string(report.with_extension("md")).unwrap_or_default();
    assert!(
        out.status.success(),
        "seed {seed}: exit {:?}\n{md}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("a JSON report on stdout");
    assert_eq!(v["verdict"], "held", "{md}");
    for must in [
        "acknowledged-events",
        "snapshots-restore",
        "proof-rules",
        "jobs-once",
        "clean-failures",
    ] {
        let inv = v["invariants"]
            .as_array()
            .and_then(|a| a.iter().find(|i| i["name"] == must))
            .unwrap_or_else(|| panic!("no invariant {must} in the report"));
        assert!(
            inv["checks"].as_u64().unwrap_or(0) > 0,
            "{must} was never checked\n{md}"
        );
    }
    v
}

#[test]
fn fixed_seeds_keep_every_invariant() {
    let mut kinds = std::collections::BTreeSet::new();
    for seed in [28, 179] {
        let v = run(seed, "150s");
        for f in v["faults"].as_array().into_iter().flatten() {
            if f["injected"] == true {
                kinds.insert(f["fault"].as_str().unwrap_or_default().to_owned());
            }
        }
    }
    assert!(kinds.len() >= 8, "only {kinds:?} were injected");
    // CI runs as root with xfsprogs and an S3 store: power cuts and S3
    // faults must have run there, not been skipped.
    if std::env::var_os("CI").is_some() {
        for must in ["power-cut", "s3-faults", "fsync-eio", "clock-step-server"] {
            assert!(kinds.contains(must), "{must} did not run: {kinds:?}");
        }
    }
}

#[test]
fn list_and_replay_name_what_they_do() {
    let out = Command::new(env!("CARGO_BIN_EXE_vouch-chaos"))
        .args(["list", "--json"])
        .output()
        .expect("vouch-chaos runs");
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let names: Vec<&str> = v
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, ["crash", "disk", "clock", "network", "concurrency"]);
    // A replay of a file that is no report says so, exit 2.
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{}").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_vouch-chaos"))
        .arg("replay")
        .arg(&bad)
        .output()
        .expect("vouch-chaos runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("replay"));
    // A schedule is shown without running anything.
    let plan = |seed: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_vouch-chaos"))
            .args(["run", "--seed", seed, "--duration", "10m", "--dry-run"])
            .output()
            .expect("vouch-chaos runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(plan("5"), plan("5"));
    assert_ne!(plan("5"), plan("6"));
    // Ten minutes of every scenario: a fault every 15 to 45 s, each named.
    let p5 = plan("5");
    let faults: Vec<&str> = p5.lines().skip(1).collect();
    assert!((10..=40).contains(&faults.len()), "{p5}");
    let kinds: Vec<String> = v
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["faults"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f.as_str().map(str::to_owned))
        .collect();
    assert!(
        faults
            .iter()
            .all(|l| kinds.iter().any(|k| l.trim_end().ends_with(k.as_str()))),
        "{p5}"
    );
}

/// SIGTERM to a run stops its deployment: exit 130, and no process of it
/// is left running.
#[test]
fn an_interrupted_run_leaves_nothing_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");
    let child = Command::new(env!("CARGO_BIN_EXE_vouch-chaos"))
        .args(["run", "--seed", "3", "--duration", "10m", "--agents", "1"])
        .args(["--quiet", "--no-real-tree", "--scenario", "network"])
        .arg("--vouch")
        .arg(vouch())
        .arg("--work-dir")
        .arg(&work)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("vouch-chaos runs");
    // Until the deployment runs: the agent's log appears after the
    // service is ready.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !work.join("logs/host1.log").exists() {
        assert!(
            std::time::Instant::now() < until,
            "the deployment never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().expect("it ends");
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted"));
    let ps = Command::new("ps")
        .args(["-eo", "args"])
        .output()
        .expect("ps");
    let left: Vec<String> = String::from_utf8_lossy(&ps.stdout)
        .lines()
        .filter(|l| l.contains(work.to_str().unwrap_or("-")) && l.contains("vouch"))
        .map(str::to_owned)
        .collect();
    assert!(left.is_empty(), "left running: {left:?}");
}
