//! `vouch serve` and the signals a service manager sends (ecosystem review
//! D6, D7): SIGTERM stops it cleanly and promptly even with a console's
//! live stream open, SIGHUP reloads `[[webhooks]]` and `[alerting]` instead
//! of stopping it, and `--log-format json` writes nothing but JSON lines.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A `vouch serve` whose stdout (the address) and stderr (the log) are
/// read by threads; killed on drop.
struct Serve {
    child: Child,
    addr: SocketAddr,
    token: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    fn start(data: &Path, config: &Path, json_logs: bool) -> Serve {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vouch"));
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data)
            .arg("--config")
            .arg(config)
            .env("VOUCH_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if json_logs {
            cmd.args(["--log-format", "json"]);
        }
        let mut child = cmd.spawn().expect("vouch serve starts");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("stderr");
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    eprintln!("serve: {line}");
                    log.lock().expect("log").push(line);
                }
            });
        }
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let addr = loop {
            let line = lines
                .next()
                .expect("vouch serve printed its address before exiting")
                .expect("stdout readable");
            if let Some(a) = line.strip_prefix("listening on http://") {
                break a.trim().parse().expect("an address");
            }
        };
        std::thread::spawn(move || for _ in lines {});
        let token = common::served::initial_admin_token(data);
        Serve {
            child,
            addr,
            token,
            log,
        }
    }

    fn signal(&self, sig: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid");
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig})");
    }

    /// Waits up to `limit` for the process to end.
    fn wait_exit(&mut self, limit: Duration) -> Option<(ExitStatus, Duration)> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some((status, start.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    fn log_has(&self, needle: &str) -> bool {
        self.log
            .lock()
            .expect("log")
            .iter()
            .any(|l| l.contains(needle))
    }
}

/// Sends one request; returns the status and the parsed body.
fn request(s: &Serve, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let body = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    let (status, bytes) = common::served::raw_bytes(
        s.addr,
        method,
        path,
        &s.token,
        &[("Content-Type", "application/json")],
        body.as_slice(),
    );
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Waits (bounded) for `f` to give a value.
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn config(dir: &Path, extra: &str) -> std::path::PathBuf {
    let path = dir.join("vouch.toml");
    std::fs::write(
        &path,
        format!("{}\n{extra}", common::served::sources_allow(dir)),
    )
    .expect("config");
    path
}

/// Opens the live event stream and reads its response head.
fn open_stream(s: &Serve) -> TcpStream {
    let mut conn = TcpStream::connect(s.addr).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        conn,
        "GET /api/v1/events/stream HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nAccept: text/event-stream\r\n\r\n",
        s.addr, s.token
    )
    .expect("request");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = conn.read(&mut byte).expect("response head");
        assert_eq!(n, 1, "the stream closed before its head");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    conn
}

/// SIGTERM with a console's live stream open: the service drains, ends
/// the stream (the client reads its end, not a reset), and exits 0 within
/// a few seconds. Before, the open stream held the HTTP shutdown for up to
/// 30 s (actix's own signal handling and shutdown timeout).
#[test]
fn sigterm_with_a_live_stream_open_stops_promptly_and_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), "");
    let mut s = Serve::start(&dir.path().join("data"), &cfg, false);
    let mut stream = open_stream(&s);
    s.signal(libc::SIGTERM);
    let (status, took) = s
        .wait_exit(Duration::from_secs(60))
        .expect("vouch serve stopped within a minute of SIGTERM");
    assert!(status.success(), "exit status {status:?}");
    assert!(
        took < Duration::from_secs(10),
        "SIGTERM took {took:?} with a live stream open"
    );
    // The stream was ended by the server: the client reads to its end.
    let mut rest = Vec::new();
    let read = stream.read_to_end(&mut rest);
    assert!(read.is_ok(), "the stream ended with {read:?}");
    assert!(s.log_has("stop asked"), "the signal is logged");
    assert!(s.log_has("stopped"), "the end is logged");
}

/// A second SIGTERM (or SIGINT) during the drain stops at once; SIGINT
/// alone stops as SIGTERM does.
#[test]
fn sigint_stops_the_service_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), "");
    let mut s = Serve::start(&dir.path().join("data"), &cfg, false);
    s.signal(libc::SIGINT);
    let (status, _) = s
        .wait_exit(Duration::from_secs(60))
        .expect("vouch serve stopped after SIGINT");
    assert!(status.success(), "exit status {status:?}");
}

/// A webhook receiver on loopback that records the bodies it is sent.
struct Receiver {
    addr: SocketAddr,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let keep = bodies.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { break };
                let keep = keep.clone();
                std::thread::spawn(move || {
                    if let Some(body) = read_request(&mut conn) {
                        if let Ok(v) = serde_json::from_slice::<Value>(&body) {
                            keep.lock().expect("bodies").push(v);
                        }
                    }
                    let _ = conn.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                });
            }
        });
        Receiver { addr, bodies }
    }

    fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().expect("bodies").clone()
    }
}

/// Reads one HTTP/1.1 request with a Content-Length body.
fn read_request(conn: &mut TcpStream) -> Option<Vec<u8>> {
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    Some(body)
}

/// SIGHUP reloads `[[webhooks]]`: the service keeps running (before, it
/// stopped), a receiver added to the file gets the alert that is open,
/// and a file that does not load changes nothing and says why.
#[test]
fn sighup_reloads_webhooks_and_keeps_the_service_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), "[alerting]\nevaluate_every = \"1s\"\n");
    let mut s = Serve::start(&dir.path().join("data"), &cfg, false);
    // An alert that stays open: a plan whose source does not exist fails
    // its backup.
    let (status, body) = request(
        &s,
        "POST",
        "/api/v1/plans",
        &json!({"id": "gone", "source": dir.path().join("no-such-dir"), "schedule": "0 3 * * *", "rpo": "1h"}),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = request(&s, "POST", "/api/v1/plans/gone/run", &Value::Null);
    assert_eq!(status, 202, "{body}");
    let alert = eventually("an open alert", || {
        let (_, alerts) = request(&s, "GET", "/api/v1/alerts?state=open", &Value::Null);
        alerts.as_array().and_then(|a| a.first().cloned())
    });
    let alert_id = alert["id"].as_str().expect("an alert id").to_owned();

    // A file that does not load: the service keeps its configuration.
    std::fs::write(&cfg, "this is [not toml").expect("config");
    s.signal(libc::SIGHUP);
    eventually("the refused reload in the log", || {
        s.log_has("the configuration was not reloaded")
            .then_some(())
    });
    assert!(
        s.child.try_wait().expect("try_wait").is_none(),
        "SIGHUP stopped the service"
    );

    // A receiver added to the file: reloaded, it gets the open alert.
    let receiver = Receiver::start();
    std::fs::write(
        &cfg,
        format!(
            "{}[alerting]\nevaluate_every = \"1s\"\n\n[[webhooks]]\nname = \"added\"\nurl = \"http://{}/hook\"\n",
            common::served::sources_allow(dir.path()),
            receiver.addr
        ),
    )
    .expect("config");
    s.signal(libc::SIGHUP);
    eventually("the open alert at the receiver added by SIGHUP", || {
        receiver
            .bodies()
            .iter()
            .any(|b| b.to_string().contains(&alert_id))
            .then_some(())
    });
    assert!(s.log_has("reloaded"), "the reload is logged");
    let (status, _) = request(&s, "GET", "/api/v1/plans", &Value::Null);
    assert_eq!(status, 200, "the service still answers after SIGHUP");
    s.signal(libc::SIGTERM);
    let (status, _) = s
        .wait_exit(Duration::from_secs(60))
        .expect("vouch serve stopped after SIGTERM");
    assert!(status.success(), "exit status {status:?}");
}

/// `--log-format json`: every line on stderr is one JSON object, the
/// first start's notices (the generated passphrase, the first admin
/// token) and the stop included.
#[test]
fn json_logs_are_only_json_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), "");
    let mut s = Serve::start(&dir.path().join("data"), &cfg, true);
    s.signal(libc::SIGTERM);
    let (status, _) = s
        .wait_exit(Duration::from_secs(60))
        .expect("vouch serve stopped after SIGTERM");
    assert!(status.success(), "exit status {status:?}");
    // The reader thread ends with the pipe: give it a moment.
    eventually("the last log line", || {
        s.log
            .lock()
            .expect("log")
            .iter()
            .any(|l| l.contains("\"stopped\""))
            .then_some(())
    });
    let log = s.log.lock().expect("log").clone();
    assert!(
        log.iter().any(|l| l.contains("passphrase")),
        "the passphrase notice is logged: {log:#?}"
    );
    let not_json: Vec<&String> = log
        .iter()
        .filter(|l| serde_json::from_str::<serde_json::Map<String, Value>>(l).is_err())
        .collect();
    assert!(
        not_json.is_empty(),
        "lines that are not JSON: {not_json:#?}"
    );
}
