//! A fleet of simulated agents long-polling one `vouch serve`: what the
//! server costs while they idle, and how soon a due job reaches its agent.
//!
//! A stress target, not part of CI (it takes about three minutes):
//!
//! ```text
//! cargo test --release --test agent_fleet -- --ignored --nocapture
//! ```
//!
//! VOUCH_FLEET_AGENTS sets the fleet's size (default 200). Each simulated
//! agent registers with its own enrollment token exactly as `vouch agent`
//! does, then long-polls `GET /api/v1/agent/jobs?wait=30s` on its own
//! connection and answers every job it gets with a (non-retryable) failure,
//! so that the job ends. It runs no engine: the figures are the server's.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::served::{post, raw, start, vouch_token};
use serde_json::{json, Value};

/// CPU seconds (user + system) and RSS in KiB of a process.
fn cpu_and_rss(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) in parentheses.
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of stat: 11 and 12 after ')'.
    let hz = 100.0; // USER_HZ on Linux
    let cpu = (ticks(11) + ticks(12)) as f64 / hz;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (cpu, rss)
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One keep-alive HTTP/1.1 connection, as `vouch agent` keeps one: answers
/// are read by their Content-Length, so an answer counts as received when
/// its last byte is, not when the server closes the connection.
struct Conn {
    addr: SocketAddr,
    stream: Option<std::io::BufReader<std::net::TcpStream>>,
}

impl Conn {
    fn call(&mut self, method: &str, path: &str, token: &str, body: &str) -> (u16, String) {
        use std::io::{BufRead, Read, Write};
        for _ in 0..2 {
            if self.stream.is_none() {
                let s = std::net::TcpStream::connect(self.addr).expect("connect");
                s.set_read_timeout(Some(Duration::from_secs(90)))
                    .expect("timeout");
                self.stream = Some(std::io::BufReader::new(s));
            }
            let Some(r) = self.stream.as_mut() else {
                continue;
            };
            let req = format!(
                "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                self.addr,
                body.len()
            );
            if r.get_mut().write_all(req.as_bytes()).is_err() {
                self.stream = None;
                continue;
            }
            let mut status_line = String::new();
            if r.read_line(&mut status_line).unwrap_or(0) == 0 {
                // The server closed an idle connection: open another.
                self.stream = None;
                continue;
            }
            let status: u16 = status_line
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .expect("a status line");
            let (mut length, mut close) = (0usize, false);
            loop {
                let mut line = String::new();
                r.read_line(&mut line).expect("a header line");
                let line = line.trim_end().to_ascii_lowercase();
                if line.is_empty() {
                    break;
                }
                if let Some(v) = line.strip_prefix("content-length:") {
                    length = v.trim().parse().expect("a length");
                }
                if line == "connection: close" {
                    close = true;
                }
            }
            let mut answer = vec![0; length];
            r.read_exact(&mut answer).expect("the body");
            if close {
                self.stream = None;
            }
            return (status, String::from_utf8_lossy(&answer).into_owned());
        }
        panic!("{method} {path}: the connection failed twice");
    }
}

/// One simulated agent: long-polls until `stop`, records when each job
/// arrived (unix seconds), answers it with a failure.
fn poll_loop(
    addr: SocketAddr,
    token: String,
    stop: Arc<AtomicBool>,
    polling: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<(String, f64)>>>,
) {
    let mut counted = false;
    let mut conn = Conn { addr, stream: None };
    while !stop.load(Ordering::Relaxed) {
        if !counted {
            polling.fetch_add(1, Ordering::SeqCst);
            counted = true;
        }
        let (status, body) = conn.call("GET", "/api/v1/agent/jobs?wait=30s", &token, "");
        let at = unix_now();
        match status {
            200 => {
                let job: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                let id = job["job"].as_str().unwrap_or_default().to_owned();
                let plan = job["plan"].as_str().unwrap_or_default().to_owned();
                received.lock().expect("lock").push((plan, at));
                let lease = job["lease"].as_u64().unwrap_or(0);
                let result = json!({
                    "error_kind": "simulated",
                    "error": "a simulated agent runs no backup",
                    "retryable": false,
                });
                let (s, _) = conn.call(
                    "POST",
                    &format!("/api/v1/agent/leases/{lease}/result"),
                    &token,
                    &result.to_string(),
                );
                assert_eq!(s, 204, "the result of {id} was refused");
            }
            204 => {}
            other => panic!("a poll answered {other}: {body}"),
        }
    }
}

#[test]
#[ignore = "stress target: cargo test --release --test agent_fleet -- --ignored --nocapture"]
fn a_fleet_of_idle_agents_costs_the_server_little_and_due_jobs_reach_them_within_a_second() {
    let agents: usize = std::env::var("VOUCH_FLEET_AGENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("vouch.toml");
    std::fs::write(&config, common::served::sources_allow(dir.path())).expect("config");
    let data = dir.path().join("data");
    let svc = start(&data, &config, None);
    let pid = svc.child.id();
    let (_, rss_empty) = cpu_and_rss(pid);

    // Register the fleet, each agent with its own one-time token.
    let started = Instant::now();
    let enroll: Vec<String> = (0..agents)
        .map(|_| vouch_token(&data, &["create", "--role", "enroll", "--expires", "1h"]))
        .collect();
    std::thread::sleep(Duration::from_millis(1500)); // the service reloads its tokens
    let mut tokens = Vec::new();
    for (i, t) in enroll.iter().enumerate() {
        let body = json!({"name": format!("sim-{i:03}"), "hostname": format!("host-{i}"),
                          "os": "linux", "version": "simulated"})
        .to_string();
        let (status, answer) = raw(
            svc.addr,
            "POST",
            "/api/v1/agent/register",
            t,
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        );
        assert_eq!(status, 200, "registration {i}: {answer}");
        let reg: Value = serde_json::from_str(&answer).expect("registration");
        tokens.push(reg["token"].as_str().expect("token").to_owned());
    }
    let registered = started.elapsed();
    std::thread::sleep(Duration::from_millis(1500));

    let stop = Arc::new(AtomicBool::new(false));
    let polling = Arc::new(AtomicUsize::new(0));
    let received = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = tokens
        .into_iter()
        .map(|t| {
            let (stop, polling, received) = (stop.clone(), polling.clone(), received.clone());
            let addr = svc.addr;
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || poll_loop(addr, t, stop, polling, received))
                .expect("thread")
        })
        .collect();
    while polling.load(Ordering::SeqCst) < agents {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Idle: every agent holds a long poll (renewed every 30 s).
    std::thread::sleep(Duration::from_secs(5));
    let idle_window = Duration::from_secs(60);
    let (cpu0, _) = cpu_and_rss(pid);
    let mut rss_max = 0;
    let t0 = Instant::now();
    while t0.elapsed() < idle_window {
        std::thread::sleep(Duration::from_secs(1));
        rss_max = rss_max.max(cpu_and_rss(pid).1);
    }
    let (cpu1, rss_idle) = cpu_and_rss(pid);
    let idle_cpu = (cpu1 - cpu0) / t0.elapsed().as_secs_f64();

    // One plan per agent, every minute (each at its own stable jitter);
    // the API says when each is next due.
    for i in 0..agents {
        let (status, body) = post(
            &svc,
            "/api/v1/plans",
            &json!({"id": format!("p-{i:03}"), "source": format!("agent:sim-{i:03}:/srv"),
                    "schedule": "* * * * *", "verification": {"after_backup": false}}),
        );
        assert_eq!(status, 201, "plan {i}: {body}");
    }
    let created = unix_now();
    let mut due = std::collections::HashMap::new();
    for i in 0..agents {
        let plan = format!("p-{i:03}");
        let view = common::served::get(&svc, &format!("/api/v1/plans/{plan}"));
        let next = view["next_run_at"]
            .as_str()
            .expect("next_run_at")
            .to_owned();
        let at = humantime::parse_rfc3339_weak(&next)
            .expect("an RFC 3339 time")
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64();
        // A plan created before its first slot of the next minute was
        // read may already have been due: count from the next slot on.
        due.insert(plan, at.max(created));
    }
    let last_due = due.values().copied().fold(0.0, f64::max);
    eprintln!(
        "plans created; their first runs are due within the next {:.1} s",
        last_due - created
    );
    let deadline = Instant::now() + Duration::from_secs_f64(last_due - created + 30.0);
    let first_receipts = |received: &[(String, f64)]| {
        let mut first: std::collections::HashMap<String, f64> = std::collections::HashMap::new();
        for (plan, at) in received {
            if let Some(d) = due.get(plan) {
                if *at + 0.001 >= *d {
                    let e = first.entry(plan.clone()).or_insert(*at);
                    *e = e.min(*at);
                }
            }
        }
        first
    };
    loop {
        let got = first_receipts(&received.lock().expect("lock")).len();
        if got >= agents || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    let mut late: Vec<(f64, String, f64)> = first_receipts(&received.lock().expect("lock"))
        .into_iter()
        .map(|(plan, at)| (at - due[&plan], plan, at))
        .collect();
    late.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (l, plan, at) in late.iter().take(5) {
        eprintln!(
            "slowest: {plan} due {:.3} received {at:.3}: {l:.3} s",
            due[plan]
        );
    }
    let mut latencies: Vec<f64> = late.iter().map(|(l, _, _)| *l).collect();
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(f64::NAN)
    };
    eprintln!(
        "fleet of {agents} simulated agents against vouch serve (pid {pid}):\n\
         - registration of all: {:.1} s\n\
         - server RSS: {} KiB before, {} KiB idle with the fleet polling (max {} KiB)\n\
         - server CPU while the fleet idles: {:.2} % of one core over {} s\n\
         - jobs: one per agent, due within one minute; received {} within 30 s of due; from due to \
         the agent: p50 {:.3} s, p99 {:.3} s, max {:.3} s",
        registered.as_secs_f64(),
        rss_empty,
        rss_idle,
        rss_max,
        idle_cpu * 100.0,
        idle_window.as_secs(),
        latencies.len(),
        pct(0.5),
        pct(0.99),
        pct(1.0),
    );
    assert_eq!(latencies.len(), agents, "every due job reached its agent");
    assert!(
        pct(1.0) < 1.0,
        "a due job reaches its agent within 1 s (max {:.3} s)",
        pct(1.0)
    );
    // Each poller sees the stop at the end of its current poll.
    for t in threads {
        t.join().expect("a poller failed");
    }
}
