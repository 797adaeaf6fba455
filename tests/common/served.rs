//! A running `vouch serve` for end-to-end tests: the binary on
//! 127.0.0.1:0, plain HTTP/1.1 requests, bounded waits.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

pub const WAIT: Duration = Duration::from_secs(120);

/// A running `vouch serve`, killed on drop.
pub struct Service {
    pub child: Child,
    pub addr: SocketAddr,
    pub token: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start(data_dir: &Path, config: &Path, token: Option<&str>) -> Service {
    start_on(data_dir, config, token, "127.0.0.1:0")
}

/// [`start`] on a given address (to restart a service where its clients
/// expect it).
pub fn start_on(data_dir: &Path, config: &Path, token: Option<&str>, listen: &str) -> Service {
    start_command(
        Command::new(env!("CARGO_BIN_EXE_vouch")),
        data_dir,
        config,
        token,
        listen,
    )
}

/// [`start`] with `env` added to the service's environment (e.g.
/// `LD_PRELOAD` of libfaketime: the service is its own child, so dropping
/// the [`Service`] stops it, which a wrapper process would not).
pub fn start_with_env(
    env: &[(&str, &str)],
    data_dir: &Path,
    config: &Path,
    token: Option<&str>,
) -> Service {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vouch"));
    cmd.envs(env.iter().copied());
    start_command(cmd, data_dir, config, token, "127.0.0.1:0")
}

fn start_command(
    mut cmd: Command,
    data_dir: &Path,
    config: &Path,
    token: Option<&str>,
    listen: &str,
) -> Service {
    let mut child = cmd
        .args(["serve", "--listen", listen, "--data-dir"])
        .arg(data_dir)
        .arg("--config")
        .arg(config)
        .env("VOUCH_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("vouch serve starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let token = token.map(str::to_owned);
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
    // Keep draining stdout so the service never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Service {
        child,
        addr,
        token: token.unwrap_or_else(|| initial_admin_token(data_dir)),
    }
}

/// The `[sources]` section that lets plans back up anything below `dir`
/// (a test's temporary directory; its data directory inside stays
/// protected).
pub fn sources_allow(dir: &Path) -> String {
    // TOML basic strings escape like Rust's Debug of a plain path.
    format!(
        "[sources]\nallow = [{:?}]\n\n",
        dir.to_str().expect("a UTF-8 temporary directory")
    )
}

/// Runs `vouch token --data-dir DATA_DIR ARGS...` and returns its stdout,
/// trimmed (a new token for `create`); panics with its stderr if it fails.
pub fn vouch_token(data_dir: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_vouch"))
        .arg("token")
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .output()
        .expect("vouch token runs");
    assert!(
        out.status.success(),
        "vouch token {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The admin token the first start left in the data directory.
pub fn initial_admin_token(data_dir: &Path) -> String {
    let path = data_dir.join("initial-admin-token");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| {
            panic!(
                "the first start leaves its admin token in {}: {e}",
                path.display()
            )
        })
        .trim()
        .to_owned()
}

/// One HTTP/1.1 exchange (Connection: close): status and body.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
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
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    (status, body)
}

pub fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

pub fn get(svc: &Service, path: &str) -> Value {
    let (status, body) = http(svc.addr, "GET", path, Some(&svc.token), None);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {body}"))
}

pub fn post(svc: &Service, path: &str, body: &Value) -> (u16, Value) {
    let (status, text) = http(svc.addr, "POST", path, Some(&svc.token), Some(body));
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Every pack file of the service's default repository.
pub fn pack_files(data_dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![data_dir.join("repository/data")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// One HTTP/1.1 exchange (Connection: close) with a raw body and extra
/// headers: status and body as bytes (a chunked body dechunked).
pub fn raw_bytes(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(90)))
        .expect("timeout");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\nAuthorization: Bearer {token}\r\n",
        body.len()
    );
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).expect("send");
    s.write_all(body).expect("send body");
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).expect("read");
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head");
    let head = String::from_utf8_lossy(&answer[..split]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    let mut rest = &answer[split + 4..];
    if !head.contains("transfer-encoding: chunked") {
        return (status, rest.to_vec());
    }
    let mut out = Vec::new();
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let n = std::str::from_utf8(&rest[..eol])
            .ok()
            .and_then(|h| usize::from_str_radix(h.trim(), 16).ok())
            .unwrap_or(0);
        let chunk = &rest[eol + 2..];
        if n == 0 || chunk.len() < n {
            break;
        }
        out.extend_from_slice(&chunk[..n]);
        rest = chunk[n..].strip_prefix(b"\r\n").unwrap_or(&chunk[n..]);
    }
    (status, out)
}

/// [`raw_bytes`] with the body as text.
pub fn raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let (status, body) = raw_bytes(addr, method, path, token, headers, body);
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// `f`'s first `Some`, asked every 100 ms; fails the test after [`WAIT`]
/// naming `what`.
pub fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let until = std::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            std::time::Instant::now() < until,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
