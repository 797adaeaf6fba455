//! End-to-end tests of `vouch serve`: the real binary on 127.0.0.1:0 in a
//! temporary data directory, spoken to over plain HTTP/1.1, with real
//! webhook receivers on loopback. Every wait is bounded and polls the
//! service (or reads its SSE stream); nothing sleeps for correctness.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;

use common::served::*;

fn create_plan(svc: &Service, id: &str, source: &Path) {
    let (status, body) = post(
        svc,
        "/api/v1/plans",
        &serde_json::json!({"id": id, "source": source, "schedule": "0 3 * * *", "rpo": "1s"}),
    );
    assert_eq!(status, 201, "plan created: {body}");
}

fn run_plan(svc: &Service, id: &str) -> String {
    let (status, body) = post(svc, &format!("/api/v1/plans/{id}/run"), &Value::Null);
    assert_eq!(status, 202, "run accepted: {body}");
    body["id"].as_str().expect("a job id").to_owned()
}

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
            "{}[scheduler]\ntick = \"1s\"\nmax_jitter = \"0s\"\n\n[jobs]\nretry_initial = \"1s\"\nshutdown_grace = \"5s\"\n\n[alerting]\nevaluate_every = \"1s\"\n{webhooks}",
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

/// Reads the SSE stream until `stop` says so (bounded by `WAIT`).
fn follow_stream(svc: &Service, from_seq: u64, mut stop: impl FnMut(&Value) -> bool) -> Vec<Value> {
    let mut s = TcpStream::connect(svc.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    write!(
        s,
        "GET /api/v1/events/stream?from_seq={from_seq} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nAccept: text/event-stream\r\n\r\n",
        svc.addr, svc.token
    )
    .expect("send");
    let reader = BufReader::new(s);
    let until = Instant::now() + WAIT;
    let mut seen = Vec::new();
    for line in reader.lines() {
        assert!(Instant::now() < until, "timed out on the event stream");
        let line = line.expect("stream readable");
        if let Some(data) = line.strip_prefix("data: ") {
            let Ok(v) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            if v.get("seq").is_none() {
                continue; // live progress
            }
            let done = stop(&v);
            seen.push(v);
            if done {
                return seen;
            }
        }
    }
    panic!("the event stream ended early");
}

#[test]
fn a_plan_runs_and_its_point_becomes_recoverable_as_the_stream_and_metrics_say() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = source_tree(dir.path());
    let config = write_config(dir.path(), "");
    let svc = start(&dir.path().join("data"), &config, None);

    let (status, _) = http(svc.addr, "GET", "/api/v1/plans", None, None);
    assert_eq!(status, 401, "no token, no API");
    assert_eq!(http(svc.addr, "GET", "/healthz", None, None).0, 200);

    create_plan(&svc, "docs", &src);
    let from = get(&svc, "/api/v1/events?limit=1000")["next_seq"]
        .as_u64()
        .expect("next_seq");
    let job = run_plan(&svc, "docs");

    // The stream says, in order: committed, verified, restore-tested.
    let seen = follow_stream(&svc, from, |e| e["type"] == "restore_test.passed");
    let types: Vec<&str> = seen.iter().filter_map(|e| e["type"].as_str()).collect();
    let pos = |t: &str| {
        types
            .iter()
            .position(|x| *x == t)
            .unwrap_or_else(|| panic!("{t} in {types:?}"))
    };
    assert!(pos("backup.committed") < pos("verification.passed"));
    assert!(pos("verification.passed") < pos("restore_test.passed"));
    let seqs: Vec<u64> = seen.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "no gap, no duplicate: {seqs:?}"
    );

    let points = get(&svc, "/api/v1/points?plan=docs");
    let point = &points[0];
    assert_eq!(point["state"], "recoverable");
    let id = point["id"].as_str().expect("id");
    let detail = get(&svc, &format!("/api/v1/points/{id}"));
    let evidence = &detail["restore_test"]["evidence"];
    assert_eq!(
        evidence["files"], 2,
        "both files restored and compared: {detail}"
    );
    assert_eq!(evidence["digests_compared"], evidence["digests_matched"]);
    assert!(evidence["digests_compared"].as_u64().unwrap_or(0) >= 2);
    assert_eq!(
        get(&svc, &format!("/api/v1/jobs/{job}"))["state"],
        "succeeded"
    );

    // A file of the point reads back as the original (points keep the
    // absolute source paths).
    let (status, body) = http(
        svc.addr,
        "GET",
        &format!("/api/v1/points/{id}/file?path={}/hello.txt", src.display()),
        Some(&svc.token),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(body, "hello, vouch\n");

    // /metrics agrees with the API.
    let (status, metrics) = http(svc.addr, "GET", "/metrics", Some(&svc.token), None);
    assert_eq!(status, 200);
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in metrics:\n{metrics}"))
    };
    assert_eq!(value("vouch_recovery_points{state=\"recoverable\"}"), 1.0);
    assert_eq!(value("vouch_recovery_points{state=\"corrupt\"}"), 0.0);
    let last_seq = get(&svc, "/api/v1/events?limit=1")["events"][0]["seq"].as_u64();
    assert_eq!(last_seq, Some(1));
    assert!(value("vouch_event_log_last_seq") >= seqs.last().copied().unwrap_or(0) as f64);
}

/// A webhook receiver on loopback: records every body; answers `status`.
struct Receiver {
    addr: SocketAddr,
    bodies: Arc<Mutex<Vec<Value>>>,
}

fn receiver(status: u16) -> Receiver {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = bodies.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
            let mut reader = BufReader::new(conn.try_clone().expect("clone"));
            let mut len = 0usize;
            let mut line = String::new();
            while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                if line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0u8; len];
            if reader.read_exact(&mut body).is_ok() {
                if let Ok(v) = serde_json::from_slice(&body) {
                    seen.lock().expect("lock").push(v);
                }
            }
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    Receiver { addr, bodies }
}

#[test]
fn an_unreadable_source_alerts_alertmanager_once_then_resolves_and_a_failing_receiver_gets_retries()
{
    let dir = tempfile::tempdir().expect("tempdir");
    let good = receiver(200);
    let bad = receiver(500);
    let webhooks = format!(
        "\n[[webhooks]]\nname = \"am\"\nurl = \"http://{}/\"\nformat = \"alertmanager\"\nretry_initial = \"200ms\"\n\n[[webhooks]]\nname = \"down\"\nurl = \"http://{}/\"\nmax_attempts = 3\nretry_initial = \"200ms\"\n",
        good.addr, bad.addr
    );
    let config = write_config(dir.path(), &webhooks);
    let svc = start(&dir.path().join("data"), &config, None);
    let missing = dir.path().join("not-there-yet");
    create_plan(&svc, "broken", &missing);
    run_plan(&svc, "broken");

    let firing = eventually("a firing Alertmanager alert", || {
        let bodies = good.bodies.lock().expect("lock").clone();
        bodies.into_iter().find(|b| {
            b["status"] == "firing" && b["alerts"][0]["labels"]["alertname"] == "BackupFailed"
        })
    });
    assert_eq!(firing["version"], "4");
    assert_eq!(firing["receiver"], "am");
    assert_eq!(firing["alerts"][0]["labels"]["plan"], "broken");
    assert_eq!(firing["alerts"][0]["labels"]["severity"], "critical");

    // The receiver that answers 500 is tried max_attempts times, no more.
    eventually("three attempts at the failing receiver", || {
        let n = bad.bodies.lock().expect("lock").len();
        (n >= 3).then_some(())
    });
    let alerts = get(&svc, "/api/v1/alerts?state=open");
    let open: Vec<&Value> = alerts
        .as_array()
        .expect("array")
        .iter()
        .filter(|a| a["subject"] == "plan broken: backup failed")
        .collect();
    assert_eq!(open.len(), 1, "one alert per incident: {alerts}");

    // Fix the source; the next run succeeds and the alert resolves.
    std::fs::create_dir_all(&missing).expect("mkdir");
    std::fs::write(missing.join("f"), b"now readable").expect("write");
    eventually("a run of the fixed plan", || {
        let (status, _) = post(&svc, "/api/v1/plans/broken/run", &Value::Null);
        (status == 202).then_some(())
    });
    let resolved = eventually("the resolved message", || {
        let bodies = good.bodies.lock().expect("lock").clone();
        bodies.into_iter().find(|b| {
            b["status"] == "resolved"
                && b["alerts"][0]["annotations"]["summary"] == "plan broken: backup failed"
        })
    });
    assert_ne!(resolved["alerts"][0]["endsAt"], "0001-01-01T00:00:00Z");
    let firing_count = good
        .bodies
        .lock()
        .expect("lock")
        .iter()
        .filter(|b| {
            b["status"] == "firing"
                && b["alerts"][0]["annotations"]["summary"] == "plan broken: backup failed"
        })
        .count();
    assert_eq!(firing_count, 1, "the incident was announced once");
    let deliveries = get(&svc, "/api/v1/events?type=alert.delivery_failed&limit=1000");
    let failed = deliveries["events"].as_array().expect("array").len();
    assert!(
        failed >= 3,
        "every failed attempt is an event: {deliveries}"
    );
}

#[test]
fn kill_9_during_a_backup_keeps_every_committed_event_and_the_job_is_abandoned_and_retried() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("big");
    std::fs::create_dir_all(&src).expect("mkdir");
    // Enough incompressible data that the backup is still running when
    // the kill lands.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..48 {
        let mut buf = vec![0u8; 4 << 20];
        for chunk in buf.chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
        }
        std::fs::write(src.join(format!("f{i:02}")), &buf).expect("write");
    }
    let config = write_config(dir.path(), "");
    let data = dir.path().join("data");
    let mut svc = start(&data, &config, None);
    create_plan(&svc, "big", &src);
    let job = run_plan(&svc, "big");
    eventually("the backup running", || {
        (get(&svc, &format!("/api/v1/jobs/{job}"))["state"] == "running").then_some(())
    });
    let before = get(&svc, "/api/v1/events?limit=1000")["events"].clone();
    let token = svc.token.clone();
    svc.child.kill().expect("SIGKILL");
    svc.child.wait().expect("reaped");

    let svc = start(&data, &config, Some(&token));
    // Every event acknowledged before the kill is still there, unchanged.
    let after = get(&svc, "/api/v1/events?limit=1000")["events"].clone();
    let before = before.as_array().expect("array");
    let after_list = after.as_array().expect("array");
    assert!(after_list.len() > before.len());
    for (b, a) in before.iter().zip(after_list) {
        assert_eq!(b, a, "a committed event changed across the kill");
    }
    // The job is abandoned, then retried (attempt 2) to success. Recovery
    // runs once the service is up (it reads the log), not before readiness.
    let abandoned_of_ours = || {
        let abandoned = get(&svc, "/api/v1/events?type=job.abandoned&limit=100");
        let n = abandoned["events"]
            .as_array()
            .expect("array")
            .iter()
            .filter(|e| e["data"]["job"] == job.as_str())
            .count();
        (n, abandoned)
    };
    eventually("the killed job to be abandoned", || {
        (abandoned_of_ours().0 > 0).then_some(())
    });
    let done = eventually("the retried job to end", || {
        let j = get(&svc, &format!("/api/v1/jobs/{job}"));
        (j["state"] == "succeeded" || j["state"] == "failed").then_some(j)
    });
    let (n, abandoned) = abandoned_of_ours();
    assert_eq!(n, 1, "one job.abandoned for the killed job: {abandoned}");
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["attempt"], 2);
    eventually("the retried backup's point to be recoverable", || {
        let pts = get(&svc, "/api/v1/points?plan=big");
        (pts[0]["state"] == "recoverable").then_some(())
    });
    let states: BTreeMap<String, usize> = get(&svc, "/api/v1/points")
        .as_array()
        .expect("array")
        .iter()
        .fold(BTreeMap::new(), |mut m, p| {
            *m.entry(p["state"].as_str().unwrap_or("?").to_owned())
                .or_default() += 1;
            m
        });
    assert_eq!(states.get("recoverable"), Some(&1), "{states:?}");
}

fn read_backs(svc: &Service) -> Vec<Value> {
    get(svc, "/api/v1/events?type=repository.read_back&limit=1000")["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn the_rolling_read_back_reads_every_pack_within_its_window_and_alerts_on_a_damaged_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = source_tree(dir.path());
    // Two slices over 4 s: each slice's turn comes every 2 s.
    let config = write_config(
        dir.path(),
        "\n[verification]\nread_back_window = \"4s\"\nread_back_slices = 2\n",
    );
    let data = dir.path().join("data");
    let svc = start(&data, &config, None);
    create_plan(&svc, "docs", &src);
    run_plan(&svc, "docs");
    eventually("the point to be recoverable", || {
        let points = get(&svc, "/api/v1/points?plan=docs");
        (points[0]["state"] == "recoverable").then_some(())
    });
    let packs = pack_files(&data);
    assert!(!packs.is_empty(), "the backup wrote packs");

    // Both slices come back intact within one window of the backup, and
    // between them they read every pack. Read-backs of a slice that ran
    // before the backup stored its packs (the scheduler looks as soon as
    // the plan exists) read fewer: per slice, the largest count counts.
    let mut packs_read = 0;
    let intact = eventually("both slices to read back every pack intact", || {
        let events = read_backs(&svc);
        // Per set of slices read together, the largest count; a pack
        // belongs to one slice, so disjoint sets add up.
        let mut per_set: BTreeMap<Vec<u64>, u64> = BTreeMap::new();
        for e in events
            .iter()
            .filter(|e| e["data"]["damaged"].as_array().is_some_and(Vec::is_empty))
        {
            let mut set: Vec<u64> = e["data"]["slices"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_u64)
                .collect();
            set.sort_unstable();
            let m = per_set.entry(set).or_default();
            *m = (*m).max(e["data"]["packs"].as_u64().unwrap_or(0));
        }
        let whole = per_set.get(&vec![0, 1]).copied().unwrap_or(0);
        let halves = match (per_set.get(&vec![0]), per_set.get(&vec![1])) {
            (Some(a), Some(b)) => a + b,
            _ => 0,
        };
        packs_read = whole.max(halves);
        let per_slice: BTreeMap<u64, u64> = per_set.keys().flatten().map(|s| (*s, 0)).collect();
        (per_slice.keys().copied().collect::<Vec<_>>() == [0, 1]
            && packs_read >= packs.len() as u64)
            .then_some(events)
    });
    assert!(
        packs_read >= packs.len() as u64,
        "every pack was read back: {packs_read} of {}",
        packs.len()
    );
    for e in &intact {
        assert_eq!(e["data"]["of"], 2);
        assert_eq!(e["data"]["repository"], "default");
    }
    // The coverage gauge counts the slices read back within the window
    // (a slice whose next turn is a tick late may just have aged out).
    let (status, metrics) = http(svc.addr, "GET", "/metrics", Some(&svc.token), None);
    assert_eq!(status, 200);
    let coverage: f64 = metrics
        .lines()
        .find(|l| l.starts_with("vouch_read_back_coverage_ratio{repository=\"default\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("read-back coverage in metrics:\n{metrics}"));
    assert!((0.5..=1.0).contains(&coverage), "coverage {coverage}");

    // One flipped byte in a pack: the next turn of its slice finds it,
    // and a critical alert names the repository.
    let victim = &packs[0];
    let mut bytes = std::fs::read(victim).expect("read pack");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(victim, &bytes).expect("write pack");
    let name = victim
        .file_name()
        .and_then(|n| n.to_str())
        .expect("pack name")
        .to_owned();
    let damaged = eventually("the read-back to find the damaged pack", || {
        read_backs(&svc).into_iter().find(|e| {
            e["data"]["damaged"].as_array().is_some_and(|d| {
                d.iter()
                    .any(|x| x.as_str().is_some_and(|s| s.contains(&name)))
            })
        })
    });
    assert_eq!(damaged["data"]["slices"].as_array().map(Vec::len), Some(1));
    let alert = eventually("a read-back alert", || {
        get(&svc, "/api/v1/alerts?state=open")
            .as_array()
            .and_then(|alerts| {
                alerts
                    .iter()
                    .find(|a| {
                        a["subject"].as_str().is_some_and(|s| {
                            s.contains("repository default: read-back found damage")
                        })
                    })
                    .cloned()
            })
    });
    assert_eq!(alert["severity"], "critical");
    assert!(
        alert["message"].as_str().is_some_and(|m| m.contains(&name)),
        "the alert names the pack: {alert}"
    );
}

#[test]
fn tokens_made_and_revoked_with_the_cli_take_effect_in_a_running_service() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), "");
    let data = dir.path().join("data");
    let svc = start(&data, &config, None);

    let token = vouch_token(&data, &["create", "--name", "grafana", "--role", "viewer"]);
    let status = |t: &str| http(svc.addr, "GET", "/api/v1/plans", Some(t), None).0;
    eventually("the new token to be accepted", || {
        (status(&token) == 200).then_some(())
    });
    vouch_token(&data, &["revoke", "grafana"]);
    eventually("the revoked token to be refused", || {
        (status(&token) == 401).then_some(())
    });
    assert_eq!(status(&svc.token), 200, "the admin token still works");
}

/// Flips one byte of `marker` inside the log's segment files in place (the
/// service keeps appending to them; nothing else of the file is touched).
fn flip_in_log(events_dir: &Path, marker: &[u8]) -> bool {
    use std::io::{Seek, SeekFrom};
    let mut paths: Vec<PathBuf> = std::fs::read_dir(events_dir)
        .expect("events dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    paths.sort();
    for path in paths {
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        if let Some(at) = bytes.windows(marker.len()).position(|w| w == marker) {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .expect("open segment");
            f.seek(SeekFrom::Start(at as u64)).expect("seek");
            f.write_all(&[bytes[at] ^ 0x20]).expect("flip");
            f.sync_all().expect("sync");
            return true;
        }
    }
    false
}

/// Review L4, end to end: `[log] scrub_every` makes the running service
/// re-read its whole log and record `service.log_scrubbed`; a byte flipped
/// on disk in an acknowledged event before the tail is found by the next
/// scrub, and the critical `LogDamaged` alert, naming the event's seq,
/// reaches the webhook. (After the damage, readers that pass the damaged
/// record fail, so the alert is watched at the receiver, not in the API.)
#[test]
fn the_periodic_scrub_finds_a_damaged_acknowledged_event_and_alerts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = source_tree(dir.path());
    let am = receiver(200);
    let config = write_config(
        dir.path(),
        &format!(
            "\n[log]\nscrub_every = \"1s\"\n\n[[webhooks]]\nname = \"am\"\nurl = \"http://{}/\"\nformat = \"alertmanager\"\nretry_initial = \"200ms\"\n",
            am.addr
        ),
    );
    let data = dir.path().join("data");
    let svc = start(&data, &config, None);
    let marker = "plan-scrub-marker-5e1f";
    create_plan(&svc, marker, &src);
    let created = get(&svc, "/api/v1/events?type=plan.created&limit=10")["events"][0]["seq"]
        .as_u64()
        .expect("plan.created seq");
    let clean = eventually("a scrub past the plan's creation", || {
        get(&svc, "/api/v1/events?type=service.log_scrubbed&limit=1000")["events"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .find(|e| e["data"]["through_seq"].as_u64() >= Some(created))
    });
    assert_eq!(clean["data"]["problem"], Value::Null, "{clean}");
    assert_eq!(
        clean["data"]["events"], clean["data"]["through_seq"],
        "every committed event verified: {clean}"
    );
    let damaged_before = |bodies: &[Value]| {
        bodies
            .iter()
            .any(|b| b["alerts"][0]["labels"]["alertname"] == "LogDamaged")
    };
    assert!(
        !damaged_before(&am.bodies.lock().expect("lock")),
        "no damage alert for an intact log"
    );

    assert!(
        flip_in_log(&data.join("events"), marker.as_bytes()),
        "the plan's id is in a segment"
    );
    let firing = eventually("the LogDamaged alert at the receiver", || {
        let bodies = am.bodies.lock().expect("lock").clone();
        bodies.into_iter().find(|b| {
            b["status"] == "firing" && b["alerts"][0]["labels"]["alertname"] == "LogDamaged"
        })
    });
    assert_eq!(firing["alerts"][0]["labels"]["severity"], "critical");
    let description = firing["alerts"][0]["annotations"]["description"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        description.contains(&format!("at seq {created}")),
        "names the damaged event: {description}"
    );
}

/// Every file and directory under `dir` whose mode lets group or others
/// in, with that mode.
fn open_to_others(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut open = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(path) = todo.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue; // gone meanwhile (a sandbox, a temporary file)
        };
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            open.push(format!("{} {mode:o}", path.display()));
        }
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                todo.extend(entries.filter_map(Result::ok).map(|e| e.path()));
            }
        }
    }
    open
}

/// Security review findings 5 and 12: the data directory and everything
/// the service writes in it (log, read store, repository, tokens, the
/// restore test's sandbox) are the service user's alone; the first admin
/// token is left in a 0600 file and never printed to a stdout that is no
/// terminal (the start helper asserts that); a service whose tokens were
/// all revoked does not mint a new one when it restarts.
#[test]
fn the_service_keeps_its_files_private_and_its_first_token_out_of_its_output() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let src = source_tree(dir.path());
    let config = write_config(dir.path(), "");
    let data = dir.path().join("data");
    // Made by hand, open to others: the service closes it.
    std::fs::create_dir(&data).expect("data dir");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let svc = start(&data, &config, None);
    let mode = |p: &Path| std::fs::metadata(p).expect("exists").permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700, "the data directory");
    assert_eq!(mode(&data.join("initial-admin-token")), 0o600);

    create_plan(&svc, "docs", &src);
    let from = get(&svc, "/api/v1/events?limit=1000")["next_seq"]
        .as_u64()
        .expect("next_seq");
    run_plan(&svc, "docs");
    follow_stream(&svc, from, |e| e["type"] == "restore_test.passed");
    let open = open_to_others(&data);
    assert!(open.is_empty(), "open to group or others: {open:#?}");

    // Every token revoked: a restart makes none (and leaves no file).
    drop(svc);
    vouch_token(&data, &["revoke", "admin"]);
    std::fs::remove_file(data.join("initial-admin-token")).expect("removed");
    let svc = start(&data, &config, Some("revoked"));
    assert!(
        !data.join("initial-admin-token").exists(),
        "no token minted on a restart"
    );
    assert!(vouch_token(&data, &["list"]).is_empty(), "no token at all");
    assert_eq!(
        http(svc.addr, "GET", "/api/v1/plans", Some(&svc.token), None).0,
        401
    );
}

fn put(svc: &Service, path: &str, body: &Value) -> (u16, Value) {
    let (status, text) = http(svc.addr, "PUT", path, Some(&svc.token), Some(body));
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Security review finding 1: sources lie below the roots the
/// administrator allows, never over the service's own files, judged by
/// where they resolve, at creation, on change and when each backup starts.
#[test]
fn plan_sources_stay_inside_the_allowed_roots_and_away_from_the_services_own_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = source_tree(dir.path());
    let config = write_config(dir.path(), "");
    let data = dir.path().join("data");
    let svc = start(&data, &config, None);
    let refused = |body: Value, why: &str| {
        let (status, answer) = post(&svc, "/api/v1/plans", &body);
        assert_eq!(status, 422, "{body}: {answer}");
        let field = answer["fields"]["source"].as_str().unwrap_or_default();
        assert!(field.contains(why), "{body}: {why:?} in {answer}");
    };
    let plan = |id: &str, source: &Path| serde_json::json!({"id": id, "source": source, "schedule": "0 3 * * *", "rpo": "1d"});
    // The data directory (tokens, passphrase, log, repository), inside it,
    // around it, and the configuration file.
    refused(plan("data", &data), "data directory");
    refused(
        plan("pass", &data.join("repository.passphrase")),
        "data directory",
    );
    refused(plan("above", dir.path()), "data directory");
    refused(plan("conf", &config), "configuration file");
    // Where the repositories (and so the data directory) lie is for
    // administrators only.
    let repos = get(&svc, "/api/v1/repositories");
    assert!(
        repos[0]["location"]
            .as_str()
            .is_some_and(|l| l.starts_with(data.to_str().unwrap_or("?"))),
        "{repos}"
    );
    let viewer = vouch_token(&data, &["create", "--name", "looker", "--role", "viewer"]);
    let (status, text) = eventually("the viewer token", || {
        let (status, text) = http(svc.addr, "GET", "/api/v1/repositories", Some(&viewer), None);
        (status != 401).then_some((status, text))
    });
    assert_eq!(status, 200, "{text}");
    let body = text;
    let seen: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    assert!(seen[0]["id"].is_string(), "{body}");
    assert!(
        seen[0]["location"].is_null(),
        "a viewer sees no location: {body}"
    );
    assert!(!body.contains(data.to_str().unwrap_or("?")), "{body}");
    // Outside the allowed roots, spelled directly or through a symlink.
    refused(plan("etc", Path::new("/etc")), "outside the source roots");
    let link = dir.path().join("etc-link");
    std::os::unix::fs::symlink("/etc", &link).expect("symlink");
    refused(plan("link", &link.join("ssh")), "outside the source roots");
    refused(
        serde_json::json!({"id": "dots", "source": format!("{}/../../etc", src.display())}),
        "plain path",
    );

    // Allowed, then changed to what is not: refused, the plan unchanged.
    create_plan(&svc, "docs", &src);
    let (status, answer) = put(
        &svc,
        "/api/v1/plans/docs",
        &serde_json::json!({"source": data, "schedule": "0 3 * * *", "rpo": "1d"}),
    );
    assert_eq!(status, 422, "{answer}");
    assert_eq!(
        get(&svc, "/api/v1/plans/docs")["source"].as_str(),
        src.to_str()
    );

    // A symlink planted after the plan was accepted: the backup refuses
    // to start, says why, and is not retried.
    let moved = dir.path().join("src-real");
    std::fs::rename(&src, &moved).expect("rename");
    std::os::unix::fs::symlink("/etc", &src).expect("symlink");
    let job = run_plan(&svc, "docs");
    let failed = eventually("the backup fails", || {
        let j = get(&svc, &format!("/api/v1/jobs/{job}"));
        (j["state"] == "failed").then_some(j)
    });
    assert_eq!(failed["error"]["kind"], "source_refused", "{failed}");
    assert_eq!(failed["error"]["retryable"], false, "{failed}");
    assert!(
        get(&svc, "/api/v1/points?plan=docs")
            .as_array()
            .is_some_and(|p| p.is_empty()),
        "no point of /etc"
    );
}

/// Tokens can expire (`vouch token create --expires`), and an address that
/// keeps presenting refused tokens is answered 429 for the rest of the
/// minute, whatever it presents (security review finding 17).
#[test]
fn tokens_expire_and_an_address_guessing_tokens_is_slowed_down() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("vouch.toml");
    std::fs::write(
        &config,
        format!(
            "{}[api]\nfailed_auth_per_minute = 5\n",
            sources_allow(dir.path())
        ),
    )
    .expect("config");
    let data = dir.path().join("data");
    let svc = start(&data, &config, None);
    let status = |t: &str| http(svc.addr, "GET", "/api/v1/plans", Some(t), None);

    let short = vouch_token(
        &data,
        &[
            "create",
            "--name",
            "short",
            "--role",
            "viewer",
            "--expires",
            "3s",
        ],
    );
    let listed = vouch_token(&data, &["list"]);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("short\t") && l.contains("expires 20")),
        "{listed}"
    );
    eventually("the new token to be accepted", || {
        (status(&short).0 == 200).then_some(())
    });
    // Its use is recorded (when and from where) and listed within a few
    // seconds; a token nobody presented is "never used".
    eventually("the token's last use to be listed", || {
        let listed = vouch_token(&data, &["list"]);
        let line = listed.lines().find(|l| l.starts_with("short\t"))?;
        line.ends_with("from 127.0.0.1").then_some(())
    });
    let idle = vouch_token(&data, &["create", "--name", "idle", "--role", "viewer"]);
    assert!(idle.starts_with("vouch_"));
    let listed = vouch_token(&data, &["list"]);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("idle\t") && l.ends_with("never used")),
        "{listed}"
    );
    std::thread::sleep(Duration::from_secs(4));
    let (code, body) = status(&short);
    assert_eq!(code, 401, "an expired token is refused: {body}");
    assert!(body.contains("expired"), "{body}");

    // Refused tokens from one address: after the limit, 429 for all of it.
    let mut codes = Vec::new();
    for i in 0..8 {
        codes.push(status(&format!("vouch_guess{i}")).0);
    }
    assert!(codes.contains(&429), "{codes:?}");
    let (code, body) = status(&svc.token);
    assert_eq!(code, 429, "even a good token waits out the minute: {body}");
    assert!(body.contains("try again in"), "{body}");
    // Health stays open to the address meanwhile.
    assert_eq!(http(svc.addr, "GET", "/healthz", None, None).0, 200);
}
