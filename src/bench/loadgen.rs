//! A small HTTP/1.1 load generator for `vouch bench service`: N client
//! threads, each with one keep-alive connection to 127.0.0.1, sending the
//! same GET back to back (closed loop), timing each request from the first
//! byte written to the last byte of the body read.
//!
//! Plain `std::net::TcpStream` on one OS thread per client rather than awc:
//! awc would run all clients on one single-threaded actix runtime, so the
//! client's own event loop (one core) would queue the 32 connections and
//! its waiting would be counted as server latency; with one thread per
//! connection and a minimal parser, the only queueing is the kernel's
//! scheduler, which is what a real client population has too. Both sides
//! share the machine's cores (stated with the figures).
//!
//! Everything is bounded: a request budget, a deadline, a per-request read
//! timeout, and a cap on response sizes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

/// Largest response body accepted (a points page is far below).
const MAX_BODY: usize = 64 << 20;
/// Per-request socket timeout.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// One GET with its headers.
#[derive(Clone, Debug)]
pub struct Request {
    /// Path and query.
    pub path: String,
    /// `Authorization: Bearer` token, if any.
    pub token: Option<String>,
    /// A JSON body: the request is a POST (a GET without one).
    pub json: Option<String>,
}

impl Request {
    /// A GET of `path`.
    pub fn get(path: &str, token: Option<&str>) -> Self {
        Request {
            path: path.into(),
            token: token.map(str::to_owned),
            json: None,
        }
    }

    /// The request's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let method = if self.json.is_some() { "POST" } else { "GET" };
        let mut s = format!(
            "{method} {} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: vouch-bench\r\nAccept: */*\r\n",
            self.path
        );
        if let Some(t) = &self.token {
            s.push_str("Authorization: Bearer ");
            s.push_str(t);
            s.push_str("\r\n");
        }
        if let Some(body) = &self.json {
            s.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ));
            return s.into_bytes();
        }
        s.push_str("\r\n");
        s.into_bytes()
    }
}

/// A response: status, body, and whether the server keeps the connection.
#[derive(Debug)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Body (de-chunked).
    pub body: Vec<u8>,
    keep_alive: bool,
}

/// One keep-alive connection.
pub struct Conn {
    addr: SocketAddr,
    stream: Option<BufReader<TcpStream>>,
    /// Connections opened (1 + reconnects).
    pub opened: u64,
}

fn bad(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.into())
}

impl Conn {
    /// A connection to `addr`, opened on first use.
    pub fn new(addr: SocketAddr) -> Self {
        Conn {
            addr,
            stream: None,
            opened: 0,
        }
    }

    fn stream(&mut self) -> std::io::Result<&mut BufReader<TcpStream>> {
        if self.stream.is_none() {
            let s = TcpStream::connect_timeout(&self.addr, IO_TIMEOUT)?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(IO_TIMEOUT))?;
            s.set_write_timeout(Some(IO_TIMEOUT))?;
            self.stream = Some(BufReader::with_capacity(64 << 10, s));
            self.opened += 1;
        }
        self.stream.as_mut().ok_or_else(|| bad("no connection"))
    }

    /// Sends `req` and reads the whole response. A connection the server
    /// closed between requests is reopened once.
    pub fn get(&mut self, req: &[u8]) -> std::io::Result<Response> {
        let fresh = self.stream.is_none();
        match self.try_get(req) {
            Ok(r) => Ok(r),
            Err(_) if !fresh => {
                self.stream = None;
                self.try_get(req)
            }
            Err(e) => {
                self.stream = None;
                Err(e)
            }
        }
    }

    fn try_get(&mut self, req: &[u8]) -> std::io::Result<Response> {
        let s = self.stream()?;
        s.get_mut().write_all(req)?;
        let r = read_response(s)?;
        if !r.keep_alive {
            self.stream = None;
        }
        Ok(r)
    }
}

fn read_line(r: &mut impl BufRead, line: &mut String) -> std::io::Result<()> {
    line.clear();
    let n = r.by_ref().take(16 << 10).read_line(line)?;
    if n == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    Ok(())
}

/// Reads one HTTP/1.1 response (Content-Length or chunked).
pub fn read_response(r: &mut impl BufRead) -> std::io::Result<Response> {
    let mut line = String::new();
    read_line(r, &mut line)?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(format!("not an HTTP status line: {line:?}")))?;
    let http10 = line.starts_with("HTTP/1.0");
    let (mut length, mut chunked, mut keep_alive) = (None, false, !http10);
    for _ in 0..200 {
        read_line(r, &mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let Some((name, value)) = l.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => {
                length = Some(
                    value
                        .parse::<usize>()
                        .map_err(|_| bad("bad content-length"))?,
                )
            }
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            "connection" => keep_alive = !value.eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        for _ in 0..1_000_000 {
            read_line(r, &mut line)?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| bad("bad chunk size"))?;
            if size == 0 {
                read_line(r, &mut line)?;
                break;
            }
            if body.len() + size > MAX_BODY {
                return Err(bad("response too large"));
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..])?;
            read_line(r, &mut line)?;
        }
    } else if let Some(n) = length {
        if n > MAX_BODY {
            return Err(bad("response too large"));
        }
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    } else if status >= 200 && status != 204 && status != 304 {
        // Delimited by close.
        r.take(MAX_BODY as u64).read_to_end(&mut body)?;
        keep_alive = false;
    }
    Ok(Response {
        status,
        body,
        keep_alive,
    })
}

/// How a load run is bounded.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Concurrent clients (one connection each).
    pub clients: usize,
    /// Warm-up time (not recorded).
    pub warmup: Duration,
    /// Longest measured time.
    pub duration: Duration,
    /// Most measured requests (all clients together).
    pub max_requests: u64,
}

/// Latency figures of one endpoint under load.
#[derive(Clone, Debug, Serialize)]
pub struct LoadResult {
    /// What was requested.
    pub endpoint: String,
    /// Concurrent clients.
    pub clients: usize,
    /// Measured requests answered (any status).
    pub requests: u64,
    /// Of them, answered 200.
    pub ok: u64,
    /// Requests that got no answer (I/O error or timeout).
    pub errors: u64,
    /// Warm-up requests (not in the figures).
    pub warmup_requests: u64,
    /// Connections opened (clients + reconnects).
    pub connections: u64,
    /// Measured wall time, seconds.
    pub seconds: f64,
    /// Requests per second.
    pub rps: f64,
    /// Percentiles in milliseconds (nearest rank over every sample).
    pub p50_ms: f64,
    /// 90th.
    pub p90_ms: f64,
    /// 99th.
    pub p99_ms: f64,
    /// Slowest.
    pub max_ms: f64,
    /// Mean.
    pub mean_ms: f64,
    /// Size of the last 200 body.
    pub body_bytes: usize,
    /// Load average (1 min) just before.
    pub loadavg_before: f64,
}

/// The `q` quantile (0 < q <= 1) of sorted samples, by nearest rank.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

struct ClientOutcome {
    samples: Vec<Duration>,
    ok: u64,
    errors: u64,
    warmup: u64,
    opened: u64,
    body_bytes: usize,
    last_status: Option<u16>,
}

/// Runs `clients` closed-loop clients against `addr` and summarises.
pub fn run(addr: SocketAddr, req: &Request, o: &LoadOptions) -> LoadResult {
    let loadavg_before = super::conditions::loadavg().map_or(0.0, |l| l[0]);
    let bytes = Arc::new(req.bytes());
    let budget = Arc::new(AtomicU64::new(o.max_requests));
    let measuring = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let warm_end = start + o.warmup;
    let end = warm_end + o.duration;
    let handles: Vec<_> = (0..o.clients.max(1))
        .map(|_| {
            let (bytes, budget, measuring) = (bytes.clone(), budget.clone(), measuring.clone());
            std::thread::spawn(move || {
                let mut conn = Conn::new(addr);
                let mut out = ClientOutcome {
                    samples: Vec::new(),
                    ok: 0,
                    errors: 0,
                    warmup: 0,
                    opened: 0,
                    body_bytes: 0,
                    last_status: None,
                };
                loop {
                    let now = Instant::now();
                    if now >= end {
                        break;
                    }
                    let warm = now < warm_end;
                    if !warm {
                        measuring.store(true, Ordering::Relaxed);
                        // Take one request from the shared budget.
                        if budget
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1))
                            .is_err()
                        {
                            break;
                        }
                    }
                    let t = Instant::now();
                    let res = conn.get(&bytes);
                    let took = t.elapsed();
                    if warm {
                        out.warmup += 1;
                        if res.is_err() {
                            // Do not spin on a dead server.
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        continue;
                    }
                    match res {
                        Ok(r) => {
                            out.samples.push(took);
                            out.last_status = Some(r.status);
                            if r.status == 200 {
                                out.ok += 1;
                                out.body_bytes = r.body.len();
                            }
                        }
                        Err(_) => {
                            out.errors += 1;
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                }
                out.opened = conn.opened;
                out
            })
        })
        .collect();
    let mut all = Vec::new();
    let (mut ok, mut errors, mut warmup, mut opened, mut body_bytes) = (0, 0, 0, 0, 0);
    for h in handles {
        match h.join() {
            Ok(c) => {
                all.extend(c.samples);
                ok += c.ok;
                errors += c.errors;
                warmup += c.warmup;
                opened += c.opened;
                body_bytes = body_bytes.max(c.body_bytes);
                let _ = c.last_status;
            }
            Err(_) => errors += 1,
        }
    }
    let measured = Instant::now().saturating_duration_since(warm_end.min(Instant::now()));
    let seconds = measured.as_secs_f64().max(1e-9);
    all.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean = if all.is_empty() {
        0.0
    } else {
        all.iter().map(|d| d.as_secs_f64()).sum::<f64>() / all.len() as f64 * 1e3
    };
    LoadResult {
        endpoint: req.path.clone(),
        clients: o.clients.max(1),
        requests: all.len() as u64,
        ok,
        errors,
        warmup_requests: warmup,
        connections: opened,
        seconds,
        rps: all.len() as f64 / seconds,
        p50_ms: ms(percentile(&all, 0.50)),
        p90_ms: ms(percentile(&all, 0.90)),
        p99_ms: ms(percentile(&all, 0.99)),
        max_ms: ms(all.last().copied().unwrap_or_default()),
        mean_ms: mean,
        body_bytes,
        loadavg_before,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 0.50), Duration::from_millis(50));
        assert_eq!(percentile(&v, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&v, 1.0), Duration::from_millis(100));
        assert_eq!(percentile(&v[..1], 0.99), Duration::from_millis(1));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }

    #[test]
    fn reads_length_and_chunked_responses() {
        let raw = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhelloHTTP/1.1 503 Service Unavailable\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        let mut r = BufReader::new(&raw[..]);
        let a = read_response(&mut r).expect("first");
        assert_eq!(
            (a.status, a.body.as_slice(), a.keep_alive),
            (200, &b"hello"[..], true)
        );
        let b = read_response(&mut r).expect("second");
        assert_eq!(
            (b.status, b.body.as_slice(), b.keep_alive),
            (503, &b"abcde"[..], false)
        );
    }
}
