//! A fault-injecting HTTP proxy for S3 stores: put it between vouch and
//! the store (both on 127.0.0.1) and every `every`-th request meets the
//! next fault of a rotation, the way a real store and the network between
//! fail:
//!
//! - [`HttpFault::SlowDown`]: the store sheds load: `503 SlowDown` with
//!   S3's XML error, the request never reaching it;
//! - [`HttpFault::ResetUpload`]: a middlebox kills an upload midway: half
//!   the request body reaches the store, then both connections are reset
//!   (TCP RST), so the store sees a truncated upload and the client an
//!   `ECONNRESET`;
//! - [`HttpFault::TruncateAnswer`]: the answer is cut: its head (with the
//!   full `Content-Length`) and half its body arrive, then the connection
//!   closes;
//! - [`HttpFault::Stall`]: the store accepts the request and never answers
//!   within the client's patience (the proxy holds the answer, then closes).
//!
//! Unlike [`crate::proxy`], this one speaks HTTP/1.1: one request per
//! connection (it answers `Connection: close`), bodies framed by
//! `Content-Length` (what S3 clients send). Answers are relayed as the
//! store sends them, whatever their framing.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::{ChaosError, Result};

/// One kind of failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpFault {
    /// `503 SlowDown`, not forwarded.
    SlowDown,
    /// Half the request body forwarded, then both sides reset.
    ResetUpload,
    /// The answer's head and half its body, then a close.
    TruncateAnswer,
    /// The answer held this long, then the connection closed unanswered.
    Stall(Duration),
}

/// Which requests fail, and how.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// Every n-th request fails (0: none).
    pub every: u64,
    /// The faults, taken in turn by the failing requests.
    pub rotation: Vec<HttpFault>,
    /// Only requests of this method fail (`None`: any).
    pub method: Option<String>,
}

/// What the proxy saw and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Requests received.
    pub requests: u64,
    /// Answered 503 SlowDown.
    pub slow_downs: u64,
    /// Uploads reset midway.
    pub resets: u64,
    /// Answers truncated.
    pub truncations: u64,
    /// Answers withheld.
    pub stalls: u64,
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    eligible: AtomicU64,
    slow_downs: AtomicU64,
    resets: AtomicU64,
    truncations: AtomicU64,
    stalls: AtomicU64,
}

/// A running proxy on 127.0.0.1; stops when dropped.
pub struct S3FaultProxy {
    addr: SocketAddr,
    plan: Arc<Mutex<FaultPlan>>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
}

impl S3FaultProxy {
    /// Starts a proxy to `upstream` injecting no fault yet.
    pub fn start(upstream: SocketAddr) -> Result<S3FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| ChaosError::Io("binding the S3 fault proxy".into(), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| ChaosError::Io("the proxy's address".into(), e))?;
        let plan = Arc::new(Mutex::new(FaultPlan::default()));
        let counters = Arc::new(Counters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (p, c, s) = (plan.clone(), counters.clone(), stop.clone());
        std::thread::Builder::new()
            .name("s3-fault-proxy".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if s.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let (p, c) = (p.clone(), c.clone());
                    std::thread::spawn(move || {
                        let _ = serve(conn, upstream, &p, &c);
                    });
                }
            })
            .map_err(|e| ChaosError::Io("starting the proxy thread".into(), e))?;
        Ok(S3FaultProxy {
            addr,
            plan,
            counters,
            stop,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replaces the fault plan (applies to the next requests).
    pub fn set(&self, plan: FaultPlan) {
        *self.plan.lock().unwrap_or_else(|p| p.into_inner()) = plan;
        self.counters.eligible.store(0, Ordering::SeqCst);
    }

    /// The counters so far.
    pub fn stats(&self) -> FaultStats {
        let c = &self.counters;
        FaultStats {
            requests: c.requests.load(Ordering::SeqCst),
            slow_downs: c.slow_downs.load(Ordering::SeqCst),
            resets: c.resets.load(Ordering::SeqCst),
            truncations: c.truncations.load(Ordering::SeqCst),
            stalls: c.stalls.load(Ordering::SeqCst),
        }
    }
}

impl Drop for S3FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Resets a connection (RST): `SO_LINGER` 0, then close.
fn reset(stream: TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a descriptor we own, with a valid pointer and
    // length of a `linger`.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(stream);
}

/// A request or answer head with `Connection: close` in place of whatever
/// connection header it had.
fn closing(head: &str) -> String {
    let mut out = String::new();
    for line in head.split("\r\n").filter(|l| !l.is_empty()) {
        if !line.to_ascii_lowercase().starts_with("connection:") {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    out
}

/// Reads a head up to its blank line.
fn read_head(r: &mut impl BufRead) -> io::Result<String> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        if line == "\r\n" || line == "\n" {
            return Ok(head);
        }
        head.push_str(&line);
    }
}

fn content_length(head: &str) -> usize {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

fn choose(plan: &Mutex<FaultPlan>, counters: &Counters, method: &str) -> Option<HttpFault> {
    let plan = plan.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if plan.every == 0 || plan.rotation.is_empty() {
        return None;
    }
    if plan.method.as_deref().is_some_and(|m| m != method) {
        return None;
    }
    let n = counters.eligible.fetch_add(1, Ordering::SeqCst) + 1;
    n.is_multiple_of(plan.every)
        .then(|| plan.rotation[((n / plan.every - 1) as usize) % plan.rotation.len()])
}

fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    plan: &Mutex<FaultPlan>,
    counters: &Counters,
) -> io::Result<()> {
    let mut reader = BufReader::new(client.try_clone()?);
    let head = read_head(&mut reader)?;
    let mut body = vec![0u8; content_length(&head)];
    reader.read_exact(&mut body)?;
    counters.requests.fetch_add(1, Ordering::SeqCst);
    let method = head.split(' ').next().unwrap_or("").to_owned();
    let fault = choose(plan, counters, &method);
    let mut client = client;
    if fault == Some(HttpFault::SlowDown) {
        counters.slow_downs.fetch_add(1, Ordering::SeqCst);
        let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
        write!(
            client,
            "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{xml}",
            xml.len()
        )?;
        return client.shutdown(Shutdown::Both);
    }
    let mut up = TcpStream::connect(upstream)?;
    up.write_all(closing(&head).as_bytes())?;
    if fault == Some(HttpFault::ResetUpload) && !body.is_empty() {
        counters.resets.fetch_add(1, Ordering::SeqCst);
        up.write_all(&body[..body.len() / 2])?;
        up.flush()?;
        std::thread::sleep(Duration::from_millis(20));
        reset(up);
        reset(client);
        return Ok(());
    }
    up.write_all(&body)?;
    let mut answer = Vec::new();
    up.read_to_end(&mut answer)?;
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
        .unwrap_or(answer.len());
    let answer_head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let answer_body = &answer[split..];
    match fault {
        Some(HttpFault::Stall(d)) => {
            counters.stalls.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(d);
            client.shutdown(Shutdown::Both)
        }
        Some(HttpFault::TruncateAnswer) if answer_body.len() > 1 => {
            counters.truncations.fetch_add(1, Ordering::SeqCst);
            client.write_all(closing(&answer_head).as_bytes())?;
            client.write_all(&answer_body[..answer_body.len() / 2])?;
            client.flush()?;
            client.shutdown(Shutdown::Both)
        }
        _ => {
            client.write_all(closing(&answer_head).as_bytes())?;
            client.write_all(answer_body)?;
            client.flush()?;
            client.shutdown(Shutdown::Write)
        }
    }
}
