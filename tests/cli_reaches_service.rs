//! The CLI and the service that owns a repository (review H1 and H2, issue
//! 12): `vouch serve` writes an ownership record into each repository it
//! serves; `vouch verify` run by hand sends its per-point findings to that
//! service; `forget` and `prune` refuse to act behind its back; a tampered
//! record is damage and is never followed. The real binary, a real
//! `vouch serve` on 127.0.0.1:0, plain HTTP/1.1.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const WAIT: Duration = Duration::from_secs(120);
/// `exit_code::DAMAGED`.
const DAMAGED: i32 = 13;
/// `exit_code::SERVICE_OWNED`.
const SERVICE_OWNED: i32 = 20;

/// A running `vouch serve`, killed on drop.
struct Service {
    child: Child,
    addr: SocketAddr,
    token: String,
    data: PathBuf,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path) -> Service {
    let config = dir.join("vouch.toml");
    // No rolling read-back: only the CLI may find the damage here.
    std::fs::write(
        &config,
        format!(
            "[sources]\nallow = [{:?}]\n\n[scheduler]\ntick = \"1s\"\nmax_jitter = \"0s\"\n\n[jobs]\nretry_initial = \"1s\"\nshutdown_grace = \"5s\"\n\n[alerting]\nevaluate_every = \"1s\"\n\n[verification]\nread_back_window = \"off\"\n",
            dir.to_str().expect("a UTF-8 temporary directory")
        ),
    )
    .expect("config written");
    let data = dir.join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_vouch"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .arg("--config")
        .arg(&config)
        .env("VOUCH_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("vouch serve starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("vouch serve printed its address before exiting")
            .expect("stdout readable");
        assert!(
            !line.contains("admin token"),
            "stdout is no terminal: the token stays in its file: {line}"
        );
        if let Some(a) = line.strip_prefix("listening on http://") {
            break a.trim().parse().expect("an address");
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Service {
        child,
        addr,
        token: std::fs::read_to_string(data.join("initial-admin-token"))
            .expect("the first start leaves its admin token in the data directory")
            .trim()
            .to_owned(),
        data,
    }
}

fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\nAuthorization: Bearer {token}\r\n",
        body.len()
    );
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str("\r\n");
    req.push_str(&body);
    s.write_all(req.as_bytes()).expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut s = rest;
        while let Some((size, r)) = s.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 || r.len() < n {
                break;
            }
            out.push_str(&r[..n]);
            s = r[n..].trim_start_matches("\r\n");
        }
        out
    } else {
        rest.to_owned()
    };
    (status, body)
}

fn get(svc: &Service, path: &str) -> Value {
    let (status, body) = http(svc.addr, "GET", path, &svc.token, None);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {body}"))
}

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

/// A served repository with one recoverable point; returns its id.
fn served_point(dir: &Path) -> (Service, String) {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("sub")).expect("mkdir");
    std::fs::write(src.join("hello.txt"), b"hello, vouch\n").expect("write");
    let mut big = vec![0u8; 300_000];
    for (i, b) in big.iter_mut().enumerate() {
        *b = (i.wrapping_mul(2654435761) >> 13) as u8;
    }
    std::fs::write(src.join("sub/data.bin"), &big).expect("write");
    let svc = start(dir);
    let plan =
        serde_json::json!({"id": "docs", "source": src, "schedule": "0 3 * * *", "rpo": "1h"});
    let (status, body) = http(svc.addr, "POST", "/api/v1/plans", &svc.token, Some(&plan));
    assert_eq!(status, 201, "plan created: {body}");
    let (status, body) = http(
        svc.addr,
        "POST",
        "/api/v1/plans/docs/run",
        &svc.token,
        Some(&Value::Null),
    );
    assert_eq!(status, 202, "run accepted: {body}");
    let id = eventually("the point to be recoverable", || {
        let points = get(&svc, "/api/v1/points?plan=docs");
        (points[0]["state"] == "recoverable")
            .then(|| points[0]["id"].as_str().map(str::to_owned))
            .flatten()
    });
    (svc, id)
}

/// `vouch` against the service's default repository, with its passphrase.
fn vouch(svc: &Service, token: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vouch"));
    c.env_remove("VOUCH_PASSWORD")
        .env_remove("VOUCH_PASSWORD_COMMAND")
        .env_remove("VOUCH_TOKEN")
        .env_remove("VOUCH_TOKEN_FILE")
        .env("VOUCH_REPOSITORY", svc.data.join("repository"))
        .env(
            "VOUCH_PASSWORD_FILE",
            svc.data.join("repository.passphrase"),
        )
        .stdin(Stdio::null())
        .args(args);
    if let Some(t) = token {
        c.env("VOUCH_TOKEN", t);
    }
    c.output().expect("vouch runs")
}

fn describe(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn damage_a_pack(svc: &Service) {
    let mut dirs = vec![svc.data.join("repository/data")];
    let mut packs = Vec::new();
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                packs.push(p);
            }
        }
    }
    packs.sort();
    // The largest pack holds the file content (every point references it).
    let victim = packs
        .iter()
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .expect("the backup wrote packs");
    let mut bytes = std::fs::read(victim).expect("read pack");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(victim, &bytes).expect("write pack");
}

/// Verification events of `point` recorded without a job (the CLI's).
fn cli_verdicts(svc: &Service, point: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for t in ["verification.failed", "verification.passed"] {
        let events = get(svc, &format!("/api/v1/events?type={t}&limit=1000"));
        out.extend(
            events["events"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|e| e["data"]["point"] == point && e["data"]["job"].is_null()),
        );
    }
    out
}

#[test]
fn a_cli_verify_that_finds_damage_reaches_the_service_and_demotes_the_point() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (svc, point) = served_point(dir.path());
    damage_a_pack(&svc);
    let out = vouch(&svc, Some(&svc.token), &["verify", "--read-data"]);
    assert_eq!(out.status.code(), Some(DAMAGED), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("reported to service"), "{stderr}");
    assert!(!stderr.contains("WARNING"), "{stderr}");
    let failed = eventually("the CLI's verification.failed in the log", || {
        let v = cli_verdicts(&svc, &point);
        (!v.is_empty()).then_some(v)
    });
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["type"], "verification.failed");
    assert_eq!(failed[0]["data"]["depth"], "ReadAll", "{}", failed[0]);
    let damaged = failed[0]["data"]["damaged"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        damaged
            .iter()
            .any(|d| d.as_str().is_some_and(|s| s.starts_with("pack "))),
        "the damaged pack is named: {damaged:?}"
    );
    let state = eventually("the point's state to follow", || {
        let p = get(&svc, &format!("/api/v1/points/{point}"));
        let s = p["state"].as_str().map(str::to_owned)?;
        (s != "recoverable" && s != "verified").then_some(s)
    });
    assert_ne!(state, "recoverable");

    // Reports are checked: a viewer may not send one, an unknown
    // repository is 404, a malformed report is 422.
    let viewer = {
        let o = Command::new(env!("CARGO_BIN_EXE_vouch"))
            .args(["token", "--data-dir"])
            .arg(&svc.data)
            .args(["create", "--name", "v", "--role", "viewer"])
            .output()
            .expect("vouch token");
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    };
    let body =
        serde_json::json!({"points": [{"point": point, "verdict": "passed", "depth": "read-all"}]});
    let path = "/api/v1/repositories/default/verify-reports";
    let forbidden = eventually("the viewer token to be known", || {
        let (s, _) = http(svc.addr, "POST", path, &viewer, Some(&body));
        (s != 401).then_some(s)
    });
    assert_eq!(forbidden, 403);
    let (s, b) = http(
        svc.addr,
        "POST",
        "/api/v1/repositories/nope/verify-reports",
        &svc.token,
        Some(&body),
    );
    assert_eq!(s, 404, "{b}");
    let bad = serde_json::json!({"points": [{"point": point, "verdict": "damaged", "depth": "read-all"}]});
    let (s, b) = http(svc.addr, "POST", path, &svc.token, Some(&bad));
    assert_eq!(s, 422, "{b}");
}

#[test]
fn without_a_token_verify_still_gives_its_verdict_and_warns_that_the_service_was_not_told() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (svc, point) = served_point(dir.path());
    damage_a_pack(&svc);
    let out = vouch(&svc, None, &["verify", "--read-data"]);
    assert_eq!(out.status.code(), Some(DAMAGED), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("WARNING") && stderr.contains("NOT told") && stderr.contains("VOUCH_TOKEN"),
        "a loud warning on stderr: {stderr}"
    );
    assert!(
        stderr.contains(&format!("{}", svc.addr)),
        "it names the service: {stderr}"
    );
    assert!(cli_verdicts(&svc, &point).is_empty());

    // A service that cannot be reached: the same verdict, the same warning.
    let stopped = vouch(&svc, Some("not-a-token"), &["verify"]);
    let stderr = String::from_utf8_lossy(&stopped.stderr);
    assert!(
        stderr.contains("NOT told"),
        "a refused token warns too: {stderr}"
    );
}

#[test]
fn forget_refuses_on_a_served_repository_unless_outside_service() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (svc, point) = served_point(dir.path());
    let out = vouch(&svc, None, &["forget", &point]);
    assert_eq!(out.status.code(), Some(SERVICE_OWNED), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("http://{}", svc.addr)) && stderr.contains("--outside-service"),
        "the refusal names the service and the way out: {stderr}"
    );
    let out = vouch(&svc, None, &["prune"]);
    assert_eq!(out.status.code(), Some(SERVICE_OWNED), "{}", describe(&out));
    assert!(svc.data.join("repository/snapshots").join(&point).exists());
    let out = vouch(&svc, None, &["forget", "--dry-run", &point]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a dry run changes nothing: {}",
        describe(&out)
    );

    let out = vouch(&svc, None, &["forget", "--outside-service", &point]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(!svc.data.join("repository/snapshots").join(&point).exists());
    let out = vouch(&svc, None, &["prune", "--outside-service"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
}

#[test]
fn a_tampered_ownership_record_is_damage_and_never_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (svc, point) = served_point(dir.path());
    let record = svc.data.join("repository/owner");
    let mut bytes = std::fs::read(&record).expect("vouch serve wrote an ownership record");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&record, &bytes).expect("tamper");

    let out = vouch(&svc, Some(&svc.token), &["verify"]);
    assert_eq!(out.status.code(), Some(DAMAGED), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ownership record"), "{stderr}");
    assert!(stderr.contains("not followed"), "{stderr}");
    assert!(!stderr.contains("reported to service"), "{stderr}");
    assert!(
        cli_verdicts(&svc, &point).is_empty(),
        "nothing reached the service"
    );

    let out = vouch(&svc, None, &["forget", &point]);
    assert_eq!(out.status.code(), Some(SERVICE_OWNED), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("damaged"));
}
