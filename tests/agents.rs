//! Agents end to end (docs/agents.md): a real `vouch serve` on 127.0.0.1
//! and real `vouch agent` processes, or an agent's calls made by hand to
//! play the parts a real agent never would (a lease left to expire, a
//! late result, another agent's commit).

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::served::{get, post, raw, start, vouch_token, Service, WAIT};
use common::{describe, random_files, stored_bytes};
use serde_json::{json, Value};

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

fn json_call(
    svc: &Service,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let text = body.map(|b| b.to_string()).unwrap_or_default();
    let headers: &[(&str, &str)] = if body.is_some() {
        &[("Content-Type", "application/json")]
    } else {
        &[]
    };
    let (status, answer) = raw(svc.addr, method, path, token, headers, text.as_bytes());
    (status, serde_json::from_str(&answer).unwrap_or(Value::Null))
}

fn serve(dir: &Path, extra: &str) -> Service {
    let config = dir.join("vouch.toml");
    std::fs::write(
        &config,
        format!(
            "{}{extra}\n[jobs]\nretry_initial = \"1s\"\n",
            common::served::sources_allow(dir)
        ),
    )
    .expect("config");
    start(&dir.join("data"), &config, None)
}

fn agent_cmd(svc: &Service, dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vouch"));
    c.arg("agent")
        .arg("--server")
        .arg(format!("http://{}", svc.addr))
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .env_remove("VOUCH_ENROLL_TOKEN")
        .env("VOUCH_LOG", "info")
        .stdin(Stdio::null());
    c
}

fn enroll(svc: &Service, data: &Path, agent_dir: &Path, name: &str) {
    let token = vouch_token(data, &["create", "--role", "enroll", "--expires", "1h"]);
    std::thread::sleep(Duration::from_millis(1200)); // the service reloads its tokens
    let out = agent_cmd(svc, agent_dir, &["--name", name, "--enroll-only"])
        .env("VOUCH_ENROLL_TOKEN", &token)
        .output()
        .expect("vouch agent runs");
    assert!(
        out.status.success(),
        "enrollment failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Used up: a second registration with it is refused.
    let again = agent_cmd(
        svc,
        &agent_dir.with_extension("again"),
        &["--name", "other", "--enroll-only"],
    )
    .env("VOUCH_ENROLL_TOKEN", &token)
    .output()
    .expect("vouch agent runs");
    assert!(!again.status.success(), "an enrollment token works once");
}

fn create_plan(svc: &Service, id: &str, source: &str) {
    let (status, body) = post(
        svc,
        "/api/v1/plans",
        &json!({"id": id, "source": source, "schedule": "0 0 1 1 *"}),
    );
    assert_eq!(status, 201, "{body}");
}

fn run_plan(svc: &Service, plan: &str) -> String {
    let (status, body) = post(svc, &format!("/api/v1/plans/{plan}/run"), &json!({}));
    assert!(status == 202 || status == 200, "{status} {body}");
    body["id"].as_str().expect("a job id").to_owned()
}

/// The point a succeeded backup job committed.
fn committed_by(svc: &Service, job_id: &str) -> Option<String> {
    let j = job(svc, job_id);
    if j["state"] != "succeeded" {
        return None;
    }
    events(svc, "backup.committed")
        .into_iter()
        .find(|e| e["data"]["job"] == job_id)
        .and_then(|e| e["data"]["snapshot"].as_str().map(str::to_owned))
}

fn job(svc: &Service, id: &str) -> Value {
    get(svc, &format!("/api/v1/jobs/{id}"))
}

fn events(svc: &Service, kind: &str) -> Vec<Value> {
    get(svc, &format!("/api/v1/events?type={kind}&limit=1000"))["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The CLI on an agent's repository, read on the server's disk.
fn on_server_repo(data: &Path, agent: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vouch"))
        .env_remove("VOUCH_PASSWORD")
        .env(
            "VOUCH_REPOSITORY",
            data.join(format!("agents/{agent}/repository")),
        )
        .env(
            "VOUCH_PASSWORD_FILE",
            data.join(format!("agents/{agent}/repository.passphrase")),
        )
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("vouch runs")
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "vouch failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `text` without terminal colour codes.
fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for e in chars.by_ref() {
                if e.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).expect("stat").permissions().mode() & 0o777
}

#[test]
fn an_agent_backs_up_its_host_and_the_point_is_proven_on_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = serve(dir.path(), "");
    let data = dir.path().join("data");
    let agent_dir = dir.path().join("agent");
    enroll(&svc, &data, &agent_dir, "web-1");
    assert_eq!(mode(&agent_dir), 0o700);
    for f in ["credential", "repository.passphrase", "agent.json"] {
        assert_eq!(mode(&agent_dir.join(f)), 0o600, "{f}");
    }
    let src = dir.path().join("host-files");
    random_files(&src, 30, 200_000, 11);
    std::fs::write(src.join("notes.txt"), "the agent's own file\n".repeat(1000)).expect("write");
    create_plan(&svc, "web", &format!("agent:web-1:{}", src.display()));
    let plan = get(&svc, "/api/v1/plans/web");
    assert_eq!(plan["repository"], "agent-web-1", "{plan}");
    let job_id = run_plan(&svc, "web");
    let out = agent_cmd(&svc, &agent_dir, &["--jobs", "1", "--poll-wait", "5s"])
        .output()
        .expect("agent runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let point = eventually("the backup to finish", || committed_by(&svc, &job_id));
    // The service proves it like any point: verified and restore-tested.
    eventually("the point to be recoverable", || {
        let p = get(&svc, &format!("/api/v1/points/{point}"));
        (p["state"] == "recoverable").then_some(())
    });
    // Its lease was recorded, and the agent is listed, seen and idle.
    assert!(!events(&svc, "agent.lease_granted").is_empty());
    let agents = get(&svc, "/api/v1/agents");
    assert_eq!(agents["agents"][0]["name"], "web-1", "{agents}");
    assert!(agents["agents"][0]["last_seen"].is_string(), "{agents}");
    assert_eq!(agents["agents"][0]["leases"], json!([]), "{agents}");
    // Byte-identical, read back from the server's own disk.
    ok(on_server_repo(&data, "web-1", &["verify", "--read-data"]));
    let target = dir.path().join("restored");
    ok(on_server_repo(
        &data,
        "web-1",
        &["restore", &point, "--target", target.to_str().unwrap()],
    ));
    let restored = target.join(src.strip_prefix("/").expect("absolute"));
    assert_eq!(describe(&restored), describe(&src));
}

/// A job leased by hand (as an agent would) and then left alone: its lease
/// expires on the server's clock, the job fails as retryable with
/// `agent.lease_expired` and gets another attempt, and anything sent under
/// the old lease is refused and recorded.
#[test]
fn an_expired_lease_loses_its_job_and_its_late_calls_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = serve(dir.path(), "[agents]\nlease_ttl = \"2s\"\n");
    let data = dir.path().join("data");
    let agent_dir = dir.path().join("agent");
    enroll(&svc, &data, &agent_dir, "web-1");
    let token = std::fs::read_to_string(agent_dir.join("credential")).expect("credential");
    let src = dir.path().join("host-files");
    random_files(&src, 3, 10_000, 1);
    create_plan(&svc, "web", &format!("agent:web-1:{}", src.display()));
    let job_id = run_plan(&svc, "web");
    let (status, leased) = json_call(&svc, "GET", "/api/v1/agent/jobs?wait=10s", &token, None);
    assert_eq!(status, 200, "{leased}");
    assert_eq!(leased["job"], job_id.as_str());
    assert_eq!(leased["lease_seconds"], 2);
    let fence = leased["lease"].as_u64().expect("a fencing token");
    // Renewed once, then left to expire.
    let (status, _) = json_call(
        &svc,
        "POST",
        &format!("/api/v1/agent/leases/{fence}/renew"),
        &token,
        None,
    );
    assert_eq!(status, 200);
    eventually("the lease to expire", || {
        let expired = events(&svc, "agent.lease_expired");
        (!expired.is_empty()).then_some(())
    });
    let failed = events(&svc, "job.failed");
    assert!(
        failed
            .iter()
            .any(|e| e["data"]["job"] == job_id.as_str()
                && e["data"]["error_kind"] == "lease_expired"),
        "{failed:#?}"
    );
    // A late renewal, upload and result under the old lease: all refused.
    let (status, _) = json_call(
        &svc,
        "POST",
        &format!("/api/v1/agent/leases/{fence}/renew"),
        &token,
        None,
    );
    assert_eq!(status, 409);
    let pack = b"late bytes";
    let name = blake3::hash(pack).to_hex().to_string();
    let (status, _) = raw(
        svc.addr,
        "PUT",
        &format!("/repo/v1/agent-web-1/data/{name}"),
        &token,
        &[("x-vouch-lease", &fence.to_string())],
        pack,
    );
    assert_eq!(status, 409);
    let (status, _) = json_call(
        &svc,
        "POST",
        &format!("/api/v1/agent/leases/{fence}/result"),
        &token,
        Some(&json!({"error": "too late", "error_kind": "test"})),
    );
    assert_eq!(status, 409);
    let refused = events(&svc, "audit.refused");
    for action in ["lease.renew", "repo.put", "lease.result"] {
        assert!(
            refused
                .iter()
                .any(|e| e["data"]["action"] == action && e["data"]["principal"] == "web-1"),
            "{action}: {refused:#?}"
        );
    }
    // The job got another attempt, which a real agent now completes.
    let out = agent_cmd(&svc, &agent_dir, &["--jobs", "1", "--poll-wait", "5s"])
        .output()
        .expect("agent runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually("the retried backup to succeed", || {
        let j = job(&svc, &job_id);
        (j["state"] == "succeeded" && j["attempt"].as_u64() >= Some(2)).then_some(())
    });
}

/// A second agent cannot use the first's repository, lease or plan.
#[test]
fn another_agent_can_neither_write_nor_finish_the_first_agents_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = serve(dir.path(), "");
    let data = dir.path().join("data");
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    enroll(&svc, &data, &a_dir, "web-1");
    enroll(&svc, &data, &b_dir, "web-2");
    let a = std::fs::read_to_string(a_dir.join("credential")).expect("credential");
    let b = std::fs::read_to_string(b_dir.join("credential")).expect("credential");
    let src = dir.path().join("host-files");
    random_files(&src, 3, 10_000, 2);
    create_plan(&svc, "web", &format!("agent:web-1:{}", src.display()));
    let job_id = run_plan(&svc, "web");
    // web-2 polls and gets nothing: the job is web-1's.
    let (status, _) = json_call(&svc, "GET", "/api/v1/agent/jobs?wait=1s", &b, None);
    assert_eq!(status, 204);
    let (status, leased) = json_call(&svc, "GET", "/api/v1/agent/jobs?wait=10s", &a, None);
    assert_eq!(status, 200, "{leased}");
    let fence = leased["lease"].as_u64().expect("fence").to_string();
    // web-2, with web-1's fencing token: renew, upload, result, delete.
    let (status, _) = json_call(
        &svc,
        "POST",
        &format!("/api/v1/agent/leases/{fence}/renew"),
        &b,
        None,
    );
    assert_eq!(status, 403);
    let (status, _) = json_call(
        &svc,
        "POST",
        &format!("/api/v1/agent/leases/{fence}/result"),
        &b,
        Some(&json!({"error": "not mine", "error_kind": "test"})),
    );
    assert_eq!(status, 403);
    let pack = b"web-2's bytes";
    let name = blake3::hash(pack).to_hex().to_string();
    for repo in ["agent-web-1", "default"] {
        let (status, _) = raw(
            svc.addr,
            "PUT",
            &format!("/repo/v1/{repo}/data/{name}"),
            &b,
            &[("x-vouch-lease", &fence)],
            pack,
        );
        assert_eq!(status, 403, "{repo}");
    }
    // web-1 itself may not delete data, even under its lease.
    let (status, _) = raw(
        svc.addr,
        "DELETE",
        &format!("/repo/v1/agent-web-1/keys/{}", "0".repeat(64)),
        &a,
        &[("x-vouch-lease", &fence)],
        b"",
    );
    assert_eq!(status, 403);
    let refused = events(&svc, "audit.refused");
    assert!(refused
        .iter()
        .any(|e| e["data"]["principal"] == "web-2" && e["data"]["action"] == "lease.renew"));
    assert!(refused
        .iter()
        .any(|e| e["data"]["principal"] == "web-2" && e["data"]["action"] == "repo.put"));
    assert!(refused
        .iter()
        .any(|e| e["data"]["principal"] == "web-1" && e["data"]["action"] == "repo.delete"));
    // The job is still web-1's to finish.
    let (status, _) = json_call(
        &svc,
        "POST",
        &format!("/api/v1/agent/leases/{fence}/result"),
        &a,
        Some(&json!({"error": "source gone", "error_kind": "source_missing", "retryable": false})),
    );
    assert_eq!(status, 204);
    eventually("the job to fail as reported", || {
        let j = job(&svc, &job_id);
        (j["state"] == "failed").then_some(())
    });
}

/// kill -9 of the agent in the middle of a backup: its lease expires, the
/// job is retried, and a restarted agent commits a point that verifies and
/// restores byte-identically.
#[test]
fn a_killed_agent_s_job_is_retried_and_completes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = serve(dir.path(), "[agents]\nlease_ttl = \"2s\"\n");
    let data = dir.path().join("data");
    let agent_dir = dir.path().join("agent");
    enroll(&svc, &data, &agent_dir, "web-1");
    let src = dir.path().join("host-files");
    random_files(&src, 200, 250_000, 21);
    create_plan(&svc, "web", &format!("agent:web-1:{}", src.display()));
    let job_id = run_plan(&svc, "web");
    let mut child: Child = agent_cmd(&svc, &agent_dir, &["--poll-wait", "5s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("agent starts");
    // Killed once two stored packs are in its session journal.
    let packs = data.join("agents/web-1/repository/data");
    let records = || journal_records(&agent_dir);
    eventually("the agent's first packs", || (records() >= 2).then_some(()));
    child.kill().expect("kill -9");
    let journaled = records();
    let _ = child.wait();
    let out = agent_cmd(&svc, &agent_dir, &["--jobs", "1", "--poll-wait", "10s"])
        .output()
        .expect("agent runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let point = eventually("the retried backup to succeed", || {
        committed_by(&svc, &job_id)
    });
    assert!(
        job(&svc, &job_id)["attempt"].as_u64() >= Some(2),
        "the killed attempt never committed; another one did"
    );
    assert_eq!(events(&svc, "backup.committed").len(), 1);
    // Resumed, not sent again: every pack the killed run journaled is
    // reused by the retry (it sends again at most what was in flight).
    let log = strip_ansi(&String::from_utf8_lossy(&out.stderr));
    let resumed: usize = log
        .lines()
        .find(|l| l.contains("resuming an interrupted backup"))
        .and_then(|l| l.split("resumed=").nth(1))
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        resumed >= journaled && resumed >= 2,
        "{journaled} packs were journaled by the killed run, {resumed} resumed: {log}"
    );
    let (total, _) = stored_bytes(&packs);
    assert_eq!(records(), 0, "the journal outlived its commit");
    assert!(total > 0);
    ok(on_server_repo(&data, "web-1", &["verify", "--read-data"]));
    let target: PathBuf = dir.path().join("restored");
    ok(on_server_repo(
        &data,
        "web-1",
        &["restore", &point, "--target", target.to_str().unwrap()],
    ));
    assert_eq!(
        describe(&target.join(src.strip_prefix("/").expect("absolute"))),
        describe(&src)
    );
}

/// `AgentLost` fires when an agent stops calling in for longer than
/// `agent_lost_after`, never while it polls, and resolves once it is back.
#[test]
fn agent_lost_fires_when_an_agent_stops_polling_and_resolves_when_it_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = serve(
        dir.path(),
        "[alerting]\nevaluate_every = \"200ms\"\nagent_lost_after = \"3s\"\n",
    );
    let data = dir.path().join("data");
    let agent_dir = dir.path().join("agent");
    enroll(&svc, &data, &agent_dir, "web-1");
    let open_lost = || -> bool {
        get(&svc, "/api/v1/alerts?state=open")
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a["subject"] == "agent web-1: lost")
    };
    let spawn = || {
        agent_cmd(&svc, &agent_dir, &["--poll-wait", "1s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("agent starts")
    };
    let mut agent = spawn();
    // Polling for twice the threshold: never lost.
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        assert!(!open_lost(), "a polling agent was taken for lost");
        std::thread::sleep(Duration::from_millis(250));
    }
    agent.kill().expect("kill");
    let _ = agent.wait();
    eventually("AgentLost to fire", || open_lost().then_some(()));
    let mut agent = spawn();
    eventually("AgentLost to resolve", || (!open_lost()).then_some(()));
    agent.kill().expect("kill");
    let _ = agent.wait();
    let gauge = common::served::http(svc.addr, "GET", "/metrics", Some(&svc.token), None).1;
    assert!(
        gauge.contains("vouch_agent_last_seen_timestamp_seconds{agent=\"web-1\"}"),
        "{gauge}"
    );
}

/// Found by the chaos harness: the backup of a plan whose agent never
/// takes it (revoked, gone) stayed `running` after the plan was removed,
/// until the service stopped. Removing a plan cancels its backups: the
/// job ends, and the agent's board no longer offers it.
#[test]
fn removing_a_plan_cancels_its_backup_waiting_for_an_agent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = serve(dir.path(), "");
    let data = dir.path().join("data");
    let agent_dir = dir.path().join("agent");
    enroll(&svc, &data, &agent_dir, "web-1");
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).expect("src");
    create_plan(&svc, "web", &format!("agent:web-1:{}", src.display()));
    let job_id = run_plan(&svc, "web");
    eventually("the job to wait for its agent", || {
        (job(&svc, &job_id)["state"] == "running").then_some(())
    });
    let (status, body) = json_call(&svc, "DELETE", "/api/v1/plans/web", &svc.token, None);
    assert_eq!(status, 204, "{body}");
    let ended = eventually("the removed plan's backup to end", || {
        let j = job(&svc, &job_id);
        matches!(j["state"].as_str(), Some("failed" | "abandoned")).then_some(j)
    });
    assert!(ended.to_string().contains("cancel"), "{ended}");
    // Nothing is left for the agent to take.
    let (status, body) = json_call(&svc, "GET", "/api/v1/agents", &svc.token, None);
    assert_eq!(status, 200, "{body}");
    assert!(!body.to_string().contains(&job_id), "{body}");
}

/// Through the fault proxy: 50 ms of latency, a stall (blackhole) and a
/// network cut (every connection reset) in the middle of the uploads. The
/// agent's client retries, the lease survives, and the committed point
/// verifies and restores byte-identically.
#[test]
fn a_backup_survives_latency_a_stall_and_a_network_cut() {
    use vouch_chaos::proxy::{FaultProxy, Faults};
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = serve(dir.path(), "[agents]\nlease_ttl = \"10s\"\n");
    let data = dir.path().join("data");
    let proxy = FaultProxy::start(svc.addr).expect("proxy");
    let agent_dir = dir.path().join("agent");
    // Registered through the proxy: it is the agent's server from now on.
    let token = vouch_token(&data, &["create", "--role", "enroll"]);
    std::thread::sleep(Duration::from_millis(1200));
    let out = Command::new(env!("CARGO_BIN_EXE_vouch"))
        .args([
            "agent",
            "--server",
            &format!("http://{}", proxy.addr()),
            "--name",
            "web-1",
            "--enroll-only",
            "--data-dir",
        ])
        .arg(&agent_dir)
        .env("VOUCH_ENROLL_TOKEN", &token)
        .output()
        .expect("agent runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let src = dir.path().join("host-files");
    random_files(&src, 100, 400_000, 31);
    create_plan(&svc, "web", &format!("agent:web-1:{}", src.display()));
    let job_id = run_plan(&svc, "web");
    proxy.set(Faults {
        latency: Duration::from_millis(50),
        ..Faults::default()
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_vouch"))
        .args(["agent", "--jobs", "1", "--poll-wait", "5s", "--data-dir"])
        .arg(&agent_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agent starts");
    eventually("uploads to be under way", || {
        (proxy.stats().bytes_to_upstream > 8 << 20).then_some(())
    });
    // A stall of 2 s, then a cut of every connection.
    proxy.set(Faults {
        latency: Duration::from_millis(50),
        blackhole: true,
        ..Faults::default()
    });
    std::thread::sleep(Duration::from_secs(2));
    proxy.set(Faults {
        latency: Duration::from_millis(50),
        ..Faults::default()
    });
    proxy.reset_all();
    let status = child.wait().expect("agent ends");
    let mut log = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut log);
    }
    assert!(status.success(), "{log}");
    assert!(proxy.stats().connections_reset > 0, "the cut happened");
    let point = eventually("the backup to succeed", || committed_by(&svc, &job_id));
    assert_eq!(
        job(&svc, &job_id)["attempt"],
        1,
        "no retry of the job was needed"
    );
    ok(on_server_repo(&data, "web-1", &["verify", "--read-data"]));
    let target = dir.path().join("restored");
    ok(on_server_repo(
        &data,
        "web-1",
        &["restore", &point, "--target", target.to_str().unwrap()],
    ));
    assert_eq!(
        describe(&target.join(src.strip_prefix("/").expect("absolute"))),
        describe(&src)
    );
}

/// An agent whose clock is two days ahead, then one two days behind (run
/// under `faketime`): leases, renewals and results work the same, and the
/// point is timed by the server's clock, not the agent's.
#[test]
fn a_skewed_agent_clock_changes_nothing() {
    if Command::new("faketime").arg("--version").output().is_err() {
        eprintln!("SKIPPED: faketime is not installed (apt-get install faketime; .ci/run does)");
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install faketime for this test"
        );
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = serve(
        dir.path(),
        "[agents]\nlease_ttl = \"3s\"\n\n[security]\nevaluate_every = \"1s\"\n",
    );
    let data = dir.path().join("data");
    let agent_dir = dir.path().join("agent");
    enroll(&svc, &data, &agent_dir, "web-1");
    let src = dir.path().join("host-files");
    random_files(&src, 200, 100_000, 41);
    create_plan(&svc, "web", &format!("agent:web-1:{}", src.display()));
    for skew in ["+2d", "-2d"] {
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let job_id = run_plan(&svc, "web");
        // A 3 s lease, renewed every second by the skewed agent.
        let out = Command::new("faketime")
            .arg("-f")
            .arg(skew)
            .arg(env!("CARGO_BIN_EXE_vouch"))
            .args(["agent", "--jobs", "1", "--poll-wait", "5s", "--data-dir"])
            .arg(&agent_dir)
            .env("VOUCH_LOG", "info")
            .output()
            .expect("faketime runs the agent");
        assert!(
            out.status.success(),
            "{skew}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let point = eventually("the backup to succeed", || committed_by(&svc, &job_id));
        assert_eq!(
            job(&svc, &job_id)["attempt"],
            1,
            "{skew}: no lease was lost"
        );
        let p = get(&svc, &format!("/api/v1/points/{point}"));
        let at = p["snapshot_at"].as_str().expect("snapshot_at").to_owned();
        let year_day = |s: &str| s.get(..10).map(str::to_owned);
        let today = {
            let out = Command::new("date")
                .args(["-u", "-d", &format!("@{before}"), "+%Y-%m-%d"])
                .output()
                .expect("date runs");
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        assert_eq!(
            year_day(&at).as_deref(),
            Some(today.as_str()),
            "{skew}: the point is timed by the server's clock ({at})"
        );
        eventually("the point to be recoverable", || {
            let p = get(&svc, &format!("/api/v1/points/{point}"));
            (p["state"] == "recoverable").then_some(())
        });
        if skew == "+2d" {
            // The agent told its clock when it asked for the job: the
            // skew is recorded, and the security center says it.
            let seen = get(&svc, "/api/v1/events?type=agent.seen&limit=1000");
            let told = seen["events"]
                .as_array()
                .expect("events")
                .iter()
                .filter_map(|e| e["data"]["clock_skew_ms"].as_i64())
                .next_back()
                .expect("an agent.seen with the agent's clock");
            let two_days: i64 = 2 * 86_400 * 1000;
            assert!(
                (told - two_days).abs() < 60_000,
                "the skew told is about two days ahead: {told} ms"
            );
            let check = eventually("the security center to see the skew", || {
                get(&svc, "/api/v1/security")["checks"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["id"] == "agent/web-1").cloned())
                    .filter(|c| c["reason"].as_str().unwrap_or("").contains("ahead of"))
            });
            assert_eq!(check["status"], "warning", "{check}");
        }
    }
}

/// A point restores onto the agent that made it (by default) or onto the
/// server (below the allowed roots only), as a job with `restore.completed`
/// recorded; only roles that may read contents may ask.
#[test]
fn a_point_restores_onto_its_agent_or_onto_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = serve(dir.path(), "");
    let data = dir.path().join("data");
    let agent_dir = dir.path().join("agent");
    enroll(&svc, &data, &agent_dir, "web-1");
    let src = dir.path().join("host-files");
    random_files(&src, 20, 100_000, 51);
    std::fs::create_dir_all(src.join("sub")).expect("mkdir");
    std::fs::write(src.join("sub/inner.txt"), "inner\n").expect("write");
    create_plan(&svc, "web", &format!("agent:web-1:{}", src.display()));
    let job_id = run_plan(&svc, "web");
    let run_agent = || {
        let out = agent_cmd(&svc, &agent_dir, &["--jobs", "1", "--poll-wait", "5s"])
            .output()
            .expect("agent runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run_agent();
    let point = eventually("the backup", || committed_by(&svc, &job_id));
    let restore_path = format!("/api/v1/points/{point}/restore");
    // Roles that may not read contents may not restore either.
    let viewer = vouch_token(&data, &["create", "--role", "viewer", "--name", "eve"]);
    let operator = vouch_token(&data, &["create", "--role", "operator", "--name", "op"]);
    std::thread::sleep(Duration::from_millis(1200));
    let onto_agent = dir.path().join("onto-agent");
    let body = json!({"destination": onto_agent.to_str().unwrap()});
    for token in [&viewer, &operator] {
        let (status, _) = json_call(&svc, "POST", &restore_path, token, Some(&body));
        assert_eq!(status, 403);
    }
    // Onto the agent (the default for its point).
    let (status, job) = json_call(&svc, "POST", &restore_path, &svc.token, Some(&body));
    assert_eq!(status, 202, "{job}");
    let restore_job = job["id"].as_str().expect("job id").to_owned();
    assert_eq!(job["kind"], "restore");
    run_agent();
    eventually("the restore onto the agent", || {
        (self::job(&svc, &restore_job)["state"] == "succeeded").then_some(())
    });
    let rel = src.strip_prefix("/").expect("absolute");
    assert_eq!(describe(&onto_agent.join(rel)), describe(&src));
    let done = events(&svc, "restore.completed");
    assert_eq!(done.len(), 1, "{done:#?}");
    assert_eq!(done[0]["data"]["agent"], "web-1");
    assert_eq!(done[0]["data"]["files"], 21);
    // Onto the server, one directory of it.
    let onto_server = dir.path().join("onto-server");
    let sub = format!("{}/sub", src.display());
    let (status, job) = json_call(
        &svc,
        "POST",
        &restore_path,
        &svc.token,
        Some(&json!({"destination": onto_server.to_str().unwrap(), "host": "server", "path": sub})),
    );
    assert_eq!(status, 202, "{job}");
    let server_job = job["id"].as_str().expect("job id").to_owned();
    eventually("the restore onto the server", || {
        (self::job(&svc, &server_job)["state"] == "succeeded").then_some(())
    });
    assert_eq!(
        std::fs::read_to_string(onto_server.join("sub/inner.txt"))
            .or_else(|_| std::fs::read_to_string(onto_server.join("inner.txt")))
            .expect("the restored file"),
        "inner\n"
    );
    // Never onto the server outside the allowed roots.
    let (status, job) = json_call(
        &svc,
        "POST",
        &restore_path,
        &svc.token,
        Some(&json!({"destination": "/var/lib/vouch-test-not-allowed", "host": "server"})),
    );
    assert_eq!(status, 202, "{job}");
    let refused_job = job["id"].as_str().expect("job id").to_owned();
    let failed = eventually("the refused restore to fail", || {
        let j = self::job(&svc, &refused_job);
        (j["state"] == "failed").then_some(j)
    });
    assert_eq!(failed["error"]["kind"], "source_refused", "{failed}");
    assert!(!Path::new("/var/lib/vouch-test-not-allowed").exists());
    // A relative destination is refused before any job exists.
    let (status, answer) = json_call(
        &svc,
        "POST",
        &restore_path,
        &svc.token,
        Some(&json!({"destination": "relative/dir", "host": "server"})),
    );
    assert_eq!(status, 422, "{answer}");
    assert!(answer["fields"]["destination"].is_string(), "{answer}");
    // A directory that holds files fails the job at once, with a hint a
    // job can follow, and is not retried (it would not empty itself).
    let (status, job) = json_call(
        &svc,
        "POST",
        &restore_path,
        &svc.token,
        Some(&json!({"destination": onto_server.to_str().unwrap(), "host": "server"})),
    );
    assert_eq!(status, 202, "{job}");
    let occupied_job = job["id"].as_str().expect("job id").to_owned();
    let failed = eventually("the restore into a non-empty directory to fail", || {
        let j = self::job(&svc, &occupied_job);
        (j["state"] == "failed").then_some(j)
    });
    assert_eq!(failed["error"]["kind"], "target_not_empty", "{failed}");
    assert_eq!(failed["error"]["retryable"], false, "{failed}");
    assert_eq!(failed["attempt"], 1, "{failed}");
    let message = failed["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("never replaces files") && !message.contains("--overwrite"),
        "{message}"
    );
}

/// Counts the records of an agent's session journals (packs it stored in an
/// unfinished backup).
fn journal_records(agent_dir: &Path) -> usize {
    std::fs::read_dir(agent_dir.join("sessions"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .filter(|f| !f.file_name().to_string_lossy().starts_with('.'))
        .count()
}

/// Every point of the agent's repository verifies with --read-data, and
/// `point` restores byte-identically to `src`.
fn assert_repository_sound(dir: &Path, data: &Path, src: &Path, point: &str, round: u64) {
    ok(on_server_repo(data, "web-1", &["verify", "--read-data"]));
    let target = dir.join(format!("restored-{round}"));
    ok(on_server_repo(
        data,
        "web-1",
        // The agent's host, not the server's: `latest` is per host.
        &[
            "restore",
            point,
            "--host",
            "web-1",
            "--target",
            target.to_str().unwrap(),
        ],
    ));
    assert_eq!(
        describe(&target.join(src.strip_prefix("/").expect("absolute"))),
        describe(src),
        "round {round}: point {point} restores byte-identically"
    );
    std::fs::remove_dir_all(&target).expect("clean up the restore");
}

/// kill -9 of the agent at a random moment of each of several backups
/// (before its poll, while it reads, uploads, commits or reports): every
/// job still ends with one committed point, and after each round every
/// point verifies with --read-data and the latest restores byte-identically.
/// Rounds: VOUCH_STRESS_ROUNDS (default 3; the stress run uses 30 or more);
/// seed: VOUCH_STRESS_SEED (printed, to replay a failure).
#[test]
fn agents_killed_at_random_moments_never_leave_a_bad_point() {
    let rounds: u64 = std::env::var("VOUCH_STRESS_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let seed = std::env::var("VOUCH_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(vouch_chaos::Rng::seed_from_clock);
    eprintln!("agent kill rounds: {rounds}, seed {seed} (VOUCH_STRESS_SEED={seed} replays them)");
    let mut rng = vouch_chaos::Rng::new(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = serve(dir.path(), "[agents]\nlease_ttl = \"2s\"\n");
    let data = dir.path().join("data");
    let agent_dir = dir.path().join("agent");
    enroll(&svc, &data, &agent_dir, "web-1");
    let src = dir.path().join("host-files");
    random_files(&src.join("base"), 40, 200_000, seed);
    create_plan(&svc, "web", &format!("agent:web-1:{}", src.display()));
    let packs = data.join("agents/web-1/repository/data");
    let mut moments = std::collections::BTreeMap::<&str, u64>::new();
    for round in 0..rounds {
        // New data every round, so every backup uploads.
        random_files(
            &src.join(format!("round-{round}")),
            16,
            250_000,
            seed.wrapping_add(1000 * (round + 1)),
        );
        let job_id = run_plan(&svc, "web");
        let packs_before = vouch_chaos::files_below(&packs).len();
        let mut child = agent_cmd(&svc, &agent_dir, &["--poll-wait", "5s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("agent starts");
        let delay = Duration::from_millis(rng.below(1800));
        std::thread::sleep(delay);
        let _ = child.kill();
        let _ = child.wait();
        let j = job(&svc, &job_id);
        let state = j["state"].as_str().unwrap_or("unknown").to_owned();
        let leased = !events(&svc, "agent.lease_granted")
            .iter()
            .all(|e| e["data"]["job"] != job_id.as_str());
        let stored = vouch_chaos::files_below(&packs).len() > packs_before;
        let moment = match (state.as_str(), leased, stored) {
            ("succeeded", _, _) => "after its report",
            (_, false, _) => "before it leased the job",
            (_, true, false) => "while it read or uploaded (no new pack stored yet)",
            (_, true, true) => "after a pack was stored, before its report",
        };
        *moments.entry(moment).or_default() += 1;
        eprintln!("round {round}: killed after {delay:?}, {moment} (job {state})");
        if state != "succeeded" {
            let out = agent_cmd(&svc, &agent_dir, &["--jobs", "1", "--poll-wait", "10s"])
                .output()
                .expect("agent runs");
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        eventually("the round's point", || committed_by(&svc, &job_id));
        assert_eq!(
            events(&svc, "backup.committed").len() as u64,
            round + 1,
            "round {round}: one point per job, never two"
        );
        assert_repository_sound(dir.path(), &data, &src, "latest", round);
    }
    eprintln!("agent kill moments over {rounds} rounds: {moments:?}");
}

/// kill -9 of the server while an agent uploads: once it is back (same
/// address), the lease it forgot is refused, the job is retried, the agent
/// resumes from its journal, and the point verifies and restores.
#[test]
fn a_server_killed_mid_upload_loses_nothing_and_the_job_completes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut svc = serve(dir.path(), "[agents]\nlease_ttl = \"3s\"\n");
    let data = dir.path().join("data");
    let agent_dir = dir.path().join("agent");
    enroll(&svc, &data, &agent_dir, "web-1");
    let src = dir.path().join("host-files");
    random_files(&src, 200, 250_000, 77);
    create_plan(&svc, "web", &format!("agent:web-1:{}", src.display()));
    let job_id = run_plan(&svc, "web");
    let mut agent = agent_cmd(&svc, &agent_dir, &["--poll-wait", "5s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("agent starts");
    eventually("the agent's first packs", || {
        (journal_records(&agent_dir) >= 2).then_some(())
    });
    // Killed in the middle of the upload; back on the same address.
    let _ = svc.child.kill();
    let _ = svc.child.wait();
    let addr = svc.addr;
    let token = svc.token.clone();
    std::thread::sleep(Duration::from_millis(500));
    svc = common::served::start_on(
        &data,
        &dir.path().join("vouch.toml"),
        Some(&token),
        &addr.to_string(),
    );
    let point = eventually("the job to complete after the restart", || {
        committed_by(&svc, &job_id)
    });
    let _ = agent.kill();
    let _ = agent.wait();
    assert!(
        job(&svc, &job_id)["attempt"].as_u64() >= Some(2),
        "the attempt the server lost never committed: {}",
        job(&svc, &job_id)
    );
    assert_eq!(events(&svc, "backup.committed").len(), 1);
    assert_eq!(
        journal_records(&agent_dir),
        0,
        "the journal ended with the commit"
    );
    assert_repository_sound(dir.path(), &data, &src, &point, 0);
}

/// A loop-mounted btrfs file system, unmounted and removed on drop.
struct LoopBtrfs {
    mount: PathBuf,
}

impl LoopBtrfs {
    /// `None` (with why) where it cannot be made: not root, no btrfs-progs,
    /// no loop devices.
    fn make(dir: &Path) -> Result<LoopBtrfs, String> {
        if !common::is_root() {
            return Err("needs root to mount".into());
        }
        let image = dir.join("btrfs.img");
        let f = std::fs::File::create(&image).map_err(|e| e.to_string())?;
        f.set_len(160 << 20).map_err(|e| e.to_string())?;
        let run = |cmd: &mut Command| -> Result<(), String> {
            let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{cmd:?}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        run(Command::new("mkfs.btrfs").arg("-q").arg(&image))?;
        let mount = dir.join("mnt");
        std::fs::create_dir_all(&mount).map_err(|e| e.to_string())?;
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&mount))?;
        Ok(LoopBtrfs { mount })
    }
}

impl Drop for LoopBtrfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
    }
}

/// On btrfs, the agent reads a read-only snapshot of the source's
/// subvolume, records the source's own paths, skips the snapshot's
/// placeholder, and deletes the snapshot afterwards.
#[test]
fn an_agent_reads_a_btrfs_source_from_a_snapshot_it_removes_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = match LoopBtrfs::make(dir.path()) {
        Ok(fs) => fs,
        Err(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI installs btrfs-progs and runs as root: {why}"
            );
            eprintln!("SKIPPED: no btrfs to test on: {why}");
            return;
        }
    };
    let volume = fs.mount.join("vol");
    let out = Command::new("btrfs")
        .args(["subvolume", "create"])
        .arg(&volume)
        .output()
        .expect("btrfs runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    random_files(&volume.join("data"), 20, 100_000, 3);
    std::fs::write(volume.join("top.txt"), "at the subvolume's root\n").expect("write");
    let svc = serve(dir.path(), "");
    let data = dir.path().join("data");
    let agent_dir = dir.path().join("agent");
    enroll(&svc, &data, &agent_dir, "web-1");
    // The source is the subvolume itself: the placeholder of the snapshot
    // inside the snapshot must not end up in the point.
    create_plan(&svc, "vol", &format!("agent:web-1:{}", volume.display()));
    let job_id = run_plan(&svc, "vol");
    let out = agent_cmd(&svc, &agent_dir, &["--jobs", "1", "--poll-wait", "5s"])
        .output()
        .expect("agent runs");
    let log = strip_ansi(&String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("reading from btrfs snapshot"),
        "the agent read a snapshot: {log}"
    );
    let point = eventually("the backup", || committed_by(&svc, &job_id));
    assert!(
        !volume.join(".vouch-snapshot").exists(),
        "the snapshot is deleted after the backup"
    );
    let target = dir.path().join("restored");
    ok(on_server_repo(
        &data,
        "web-1",
        &["restore", &point, "--target", target.to_str().unwrap()],
    ));
    let restored = target.join(volume.strip_prefix("/").expect("absolute"));
    assert_eq!(
        describe(&restored),
        describe(&volume),
        "recorded under the source's own path, byte-identical, without the placeholder"
    );
}

/// An agent's host being encrypted is seen too: the server weighs the
/// agent's backup against its parent in the agent's own repository, as it
/// does its own backups. An ordinary edit records change figures and no
/// anomaly; an attack between two runs records `anomaly.detected` with
/// the host's paths, and a plan that opted in (`anomaly_lock`) has the
/// point before it locked.
#[test]
fn an_attack_on_an_agents_host_is_found_in_its_backup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = serve(dir.path(), "");
    let data = dir.path().join("data");
    let agent_dir = dir.path().join("agent");
    enroll(&svc, &data, &agent_dir, "web-1");
    let src = dir.path().join("host-files");
    common::ransom::project_tree(&src);
    let (status, body) = post(
        &svc,
        "/api/v1/plans",
        &json!({"id": "web", "source": format!("agent:web-1:{}", src.display()),
            "schedule": "0 0 1 1 *", "anomaly_lock": "7d"}),
    );
    assert_eq!(status, 201, "{body}");
    let run_once = || {
        let job_id = run_plan(&svc, "web");
        let out = agent_cmd(&svc, &agent_dir, &["--jobs", "1", "--poll-wait", "5s"])
            .output()
            .expect("agent runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let point = eventually("the backup to finish", || committed_by(&svc, &job_id));
        let committed = events(&svc, "backup.committed")
            .into_iter()
            .find(|e| e["data"]["job"] == job_id.as_str())
            .expect("its backup.committed");
        (point, committed)
    };
    let (_, first) = run_once();
    assert!(
        first["data"]["changes"].is_null(),
        "a first backup: {first}"
    );
    for f in common::ransom::files_of(&src).iter().take(3) {
        let mut text = std::fs::read(f).expect("read");
        text.extend_from_slice(b"\n// edited\n");
        std::fs::write(f, text).expect("edit");
    }
    let (good, second) = run_once();
    assert_eq!(second["data"]["changes"]["changed"], 3, "{second}");
    assert!(events(&svc, "anomaly.detected").is_empty());
    common::ransom::attack(
        &src,
        common::ransom::Attack {
            permille: 100,
            rename_to: Some("locked"),
            replace_extension: false,
            notes: true,
            encrypt: true,
        },
    );
    let (attacked, third) = run_once();
    assert_eq!(
        third["data"]["changes"]["compared_with"],
        good.as_str(),
        "{third}"
    );
    let found = events(&svc, "anomaly.detected");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["data"]["point"], attacked.as_str());
    let paths: Vec<&str> = found[0]["data"]["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        !paths.is_empty() && paths.iter().all(|p| p.starts_with(&*src.to_string_lossy())),
        "the host's paths: {paths:?}"
    );
    let locked = events(&svc, "point.locked");
    assert_eq!(locked.len(), 1, "{locked:?}");
    assert_eq!(locked[0]["data"]["point"], good.as_str());
}

fn install_hook(dir: &Path, name: &str, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).expect("hook");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn create_hooked_plan(svc: &Service, id: &str, source: &str, hooks: Value) {
    let (status, body) = post(
        svc,
        "/api/v1/plans",
        &json!({"id": id, "source": source, "schedule": "0 0 1 1 *", "hooks": hooks}),
    );
    assert_eq!(status, 201, "{body}");
}

/// Waits for the `job.failed` of `job_id`; asserts its kind and that its
/// message says `says`.
fn job_failed(svc: &Service, job_id: &str, kind: &str, says: &str) {
    let failure = eventually("the job to fail", || {
        events(svc, "job.failed")
            .into_iter()
            .find(|e| e["data"]["job"] == job_id)
    });
    assert_eq!(failure["data"]["error_kind"], kind, "{failure}");
    let message = failure["data"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(says), "{failure}");
}

/// Runs the agent in `agent_dir` for one job with the hooks of `hooks`.
fn run_agent_once_with_hooks(svc: &Service, agent_dir: &Path, hooks: &Path) {
    let hooks = hooks.to_str().expect("utf-8");
    let out = agent_cmd(
        svc,
        agent_dir,
        &["--jobs", "1", "--poll-wait", "5s", "--hooks-dir", hooks],
    )
    .output()
    .expect("agent runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A plan's hooks run on its agent, from the agent's own `--hooks-dir`:
/// the pre hook's dump lands in the point, the post hook is told the
/// point, and their failures reach the server as `hook.failed` (a failed
/// pre hook stops the backup with `pre_hook_failed`; a failed post hook
/// leaves the point standing). An agent that does not name the `hooks`
/// feature is never leased a hooked job: it fails, saying why.
#[test]
fn an_agent_runs_its_plans_hooks_and_reports_their_failures() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = serve(dir.path(), "");
    let data = dir.path().join("data");
    let agent_dir = dir.path().join("agent");
    enroll(&svc, &data, &agent_dir, "db-1");
    let src = dir.path().join("host-files");
    random_files(&src, 3, 10_000, 4);
    let hooks = dir.path().join("agent-hooks");
    std::fs::create_dir(&hooks).expect("hooks dir");
    let seen = dir.path().join("seen");
    install_hook(
        &hooks,
        "dump-db",
        &format!(
            "echo \"$VOUCH_HOOK_PHASE $VOUCH_PLAN $*\" >> {seen}\necho 'CREATE TABLE t;' > {src}/dump.sql",
            seen = seen.display(),
            src = src.display()
        ),
    );
    install_hook(
        &hooks,
        "notify",
        &format!(
            "echo \"$VOUCH_HOOK_PHASE $VOUCH_BACKUP_STATUS $VOUCH_SNAPSHOT\" >> {}\necho 'the notifier is down' >&2\nexit 3",
            seen.display()
        ),
    );
    install_hook(&hooks, "refuse", "echo 'database locked' >&2\nexit 1");
    let source = format!("agent:db-1:{}", src.display());
    create_hooked_plan(
        &svc,
        "db",
        &source,
        json!({"pre": {"name": "dump-db", "args": ["--all"]}, "post": {"name": "notify"}}),
    );
    let job_id = run_plan(&svc, "db");
    run_agent_once_with_hooks(&svc, &agent_dir, &hooks);
    let point = eventually("the backup to commit", || committed_by(&svc, &job_id));
    let ran = std::fs::read_to_string(&seen).expect("the hooks ran");
    assert_eq!(ran, format!("pre db --all\npost ok {point}\n"));
    let failed = events(&svc, "hook.failed");
    assert_eq!(failed.len(), 1, "{failed:#?}");
    let f = &failed[0]["data"];
    assert_eq!(f["job"], job_id.as_str(), "{f}");
    assert_eq!(f["phase"], "Post", "{f}");
    assert_eq!(f["hook"], "notify", "{f}");
    assert_eq!(f["exit_code"], 3, "{f}");
    assert!(
        f["reason"]
            .as_str()
            .unwrap()
            .contains("the notifier is down"),
        "{f}"
    );
    // The pre hook's dump is in the point.
    let listing = ok(on_server_repo(&data, "db-1", &["ls", &point]));
    assert!(listing.contains("dump.sql"), "{listing}");
    // The failed post hook is a warning alert.
    eventually("a warning alert for the hook", || {
        get(&svc, "/api/v1/alerts")
            .as_array()?
            .iter()
            .find(|a| a["subject"] == "plan db: post-backup hook failed")
            .cloned()
    });

    // A failing pre hook: no backup, the job fails saying which hook.
    create_hooked_plan(
        &svc,
        "db-locked",
        &source,
        json!({"pre": {"name": "refuse"}}),
    );
    let job_id = run_plan(&svc, "db-locked");
    run_agent_once_with_hooks(&svc, &agent_dir, &hooks);
    job_failed(&svc, &job_id, "pre_hook_failed", "database locked");
    let pre = events(&svc, "hook.failed");
    assert!(
        pre.iter().any(|e| e["data"]["job"] == job_id.as_str()
            && e["data"]["phase"] == "Pre"
            && e["data"]["exit_code"] == 1),
        "{pre:#?}"
    );
    assert!(
        !events(&svc, "backup.committed")
            .iter()
            .any(|e| e["data"]["job"] == job_id.as_str()),
        "a backup ran after its pre hook failed"
    );

    // An agent that does not name the `hooks` feature (one that predates
    // it) is not leased the job: it fails rather than run without hooks.
    let token = std::fs::read_to_string(agent_dir.join("credential")).expect("credential");
    let job_id = run_plan(&svc, "db");
    let (status, answer) = json_call(&svc, "GET", "/api/v1/agent/jobs?wait=5s", &token, None);
    assert_eq!(status, 204, "{answer}");
    job_failed(&svc, &job_id, "options_unsupported", "too old");
    // A result may name only the job's own hooks.
    let job_id = run_plan(&svc, "db");
    let (status, leased) = raw(
        svc.addr,
        "GET",
        "/api/v1/agent/jobs?wait=5s",
        &token,
        &[("x-vouch-agent-features", "hooks")],
        b"",
    );
    assert_eq!(status, 200, "{leased}");
    let leased: Value = serde_json::from_str(&leased).expect("json");
    assert_eq!(leased["job"], job_id.as_str());
    assert_eq!(leased["hooks"]["pre"]["name"], "dump-db", "{leased}");
    assert_eq!(leased["hooks"]["pre"]["args"], json!(["--all"]), "{leased}");
    let fence = leased["lease"].as_u64().expect("fence");
    let (status, answer) = json_call(
        &svc,
        "POST",
        &format!("/api/v1/agent/leases/{fence}/result"),
        &token,
        Some(&json!({"error": "x", "hook_failures": [
            {"phase": "pre", "hook": "rm-rf", "reason": "made up", "took_ms": 1}]})),
    );
    assert_eq!(status, 422, "{answer}");
    assert!(answer["fields"]["hook_failures"].is_string(), "{answer}");
}
