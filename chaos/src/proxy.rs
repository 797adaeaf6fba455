//! A fault-injecting TCP proxy: put it between a backup agent and its
//! server (both on 127.0.0.1) and break the network between them on
//! command, while they run.
//!
//! The proxy forwards bytes and nothing else: it never parses HTTP or TLS,
//! so it works the same for the repository protocol, the agent's long polls
//! and anything else spoken over TCP. The agent is pointed at
//! [`FaultProxy::addr`] instead of the server; every accepted connection is
//! paired with a fresh connection to the upstream address.
//!
//! Faults are switched on and off live with [`FaultProxy::set`]; a change
//! applies to the connections already open as well as to new ones. What each
//! fault of [`Faults`] models:
//!
//! - **`latency`**: a long path (a WAN link, a satellite hop). Every chunk is
//!   delivered `latency` after the proxy read it, in both directions, so a
//!   request/response round trip costs at least twice the latency. Order is
//!   preserved, and chunks are pipelined: latency alone does not cut the
//!   throughput of a bulk transfer (up to 1 MiB in flight per direction and
//!   connection).
//! - **`bandwidth`**: a slow link (a home uplink, a saturated VPN). A token
//!   bucket per direction, shared by every connection going that way, lets
//!   through at most that many bytes per second on average, with a burst of
//!   a tenth of a second. `Some(0)` lets nothing through (a stall).
//! - **`blackhole`**: a path that silently stops carrying packets (a route
//!   withdrawn, a stateful firewall dropping a flow, a peer frozen) without
//!   telling either end: no FIN, no RST, the connections stay open and the
//!   peers only see their own timeouts. Nothing is forwarded in either
//!   direction while it is set; data is held (in the proxy and in the
//!   kernel's socket buffers, which then fill and push back on the writers),
//!   never dropped, and flows again, in order, once it is cleared. This is
//!   also how to express a *stall*.
//! - **`refuse`**: a server that is down or shedding load. New connections
//!   are accepted and closed at once, before anything is read and without
//!   connecting upstream: the client sees an end of stream (or a reset if it
//!   had already sent something). Open connections are not affected. (A
//!   listening proxy cannot make `connect` itself fail with
//!   `ECONNREFUSED`; this is the closest a live socket gets.)
//! - **`reset_after`**: a middlebox or load balancer that kills a long
//!   upload midway. Each connection is reset once exactly that many bytes
//!   of its client→upstream stream have been forwarded (the proxy reads no
//!   more than that): both ends get a TCP RST (`SO_LINGER` 0, then close),
//!   so their next read or write fails with `ECONNRESET`. The count is per
//!   connection and from its start; lowering the limit below what an open
//!   connection already forwarded resets it at once.
//! - **[`FaultProxy::reset_all`]**: a network cut or a server restart:
//!   every connection open right now is reset, both ends; new connections
//!   work again.
//!
//! There is no randomness: the same faults and the same traffic give the
//! same behaviour, up to the scheduling of the operating system.
//!
//! A connection that fails on one side (a reset or an error from the client
//! or from the server) is reset on the other side too, as a real path would
//! show it; an end of stream is forwarded as a half close, after the data
//! before it.
//!
//! ```no_run
//! use std::time::Duration;
//! use vouch_chaos::proxy::{FaultProxy, Faults};
//!
//! # fn main() -> vouch_chaos::Result<()> {
//! # let server: std::net::SocketAddr = "127.0.0.1:8443".parse().unwrap();
//! let proxy = FaultProxy::start(server)?;
//! // ... point the agent at proxy.addr() ...
//! proxy.set(Faults {
//!     latency: Duration::from_millis(100),
//!     bandwidth: Some(256 * 1024),
//!     ..Faults::default()
//! });
//! proxy.reset_all();
//! println!("{:?}", proxy.stats());
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::{ChaosError, Result};

/// Largest chunk read and forwarded at once.
const CHUNK: usize = 16 * 1024;
/// Chunks in flight per direction and connection (between the read and the
/// delayed write): 64 × 16 KiB = 1 MiB.
const QUEUE: usize = 64;
/// Burst of the bandwidth bucket, in seconds of the rate.
const BURST_SECS: f64 = 0.1;

/// The faults a [`FaultProxy`] injects. `Faults::default()` injects none.
///
/// See the [module documentation](self) for what each one models.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// One-way delay added to every chunk, in both directions (order kept).
    pub latency: Duration,
    /// Bytes per second per direction, shared by all connections
    /// (`None`: unlimited, `Some(0)`: nothing passes).
    pub bandwidth: Option<u64>,
    /// Forward nothing, either way, while set; data is held, not dropped.
    pub blackhole: bool,
    /// Accept new connections and close them at once.
    pub refuse: bool,
    /// Reset each connection once it has forwarded this many bytes
    /// client→upstream.
    pub reset_after: Option<u64>,
}

/// Counters of a [`FaultProxy`] since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Bytes forwarded from clients to the upstream.
    pub bytes_to_upstream: u64,
    /// Bytes forwarded from the upstream to clients.
    pub bytes_to_client: u64,
    /// Connections accepted (refused ones included).
    pub connections_accepted: u64,
    /// Connections closed at once because `refuse` was set.
    pub connections_refused: u64,
    /// Connections the proxy reset: by `reset_after`, by
    /// [`FaultProxy::reset_all`], because the upstream could not be reached,
    /// or because the other side failed.
    pub connections_reset: u64,
}

/// A running fault-injecting proxy on 127.0.0.1.
///
/// It runs its own tokio runtime on a background thread, so it can be used
/// from blocking tests. Dropping it stops the runtime and closes the
/// listener and every connection, both ends (a plain close, not a
/// deliberate reset), before `drop` returns.
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Binds 127.0.0.1 on a free port and forwards every connection to
    /// `upstream`, with no faults until [`FaultProxy::set`].
    pub fn start(upstream: SocketAddr) -> Result<FaultProxy> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ChaosError::Io("building the proxy's runtime".into(), e))?;
        let std_listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| ChaosError::Io("binding the proxy on 127.0.0.1".into(), e))?;
        let addr = std_listener
            .local_addr()
            .map_err(|e| ChaosError::Io("reading the proxy's address".into(), e))?;
        std_listener
            .set_nonblocking(true)
            .map_err(|e| ChaosError::Io("setting the proxy's listener non-blocking".into(), e))?;
        let listener = {
            let _guard = runtime.enter();
            TcpListener::from_std(std_listener)
                .map_err(|e| ChaosError::Io("registering the proxy's listener".into(), e))?
        };
        let shared = Arc::new(Shared::new());
        let (shutdown, shutdown_rx) = oneshot::channel();
        let task_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    tokio::select! {
                        _ = accept_loop(listener, upstream, task_shared) => {}
                        _ = shutdown_rx => {}
                    }
                });
                // Dropping the runtime drops every connection task, which
                // closes their sockets, before the thread ends.
                drop(runtime);
            })
            .map_err(|e| ChaosError::Io("spawning the proxy's thread".into(), e))?;
        Ok(FaultProxy {
            addr,
            upstream,
            shared,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// Where clients connect (127.0.0.1, the port chosen at start).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where connections are forwarded.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Replaces the faults; open connections follow at once.
    pub fn set(&self, faults: Faults) {
        self.shared.faults.send_replace(faults);
    }

    /// The faults in force.
    pub fn faults(&self) -> Faults {
        self.shared.faults.borrow().clone()
    }

    /// Resets every open connection now, both ends (a network cut).
    pub fn reset_all(&self) {
        self.shared.cut.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The counters so far.
    pub fn stats(&self) -> ProxyStats {
        let s = &self.shared;
        ProxyStats {
            bytes_to_upstream: s.bytes_up.load(Ordering::Relaxed),
            bytes_to_client: s.bytes_down.load(Ordering::Relaxed),
            connections_accepted: s.accepted.load(Ordering::Relaxed),
            connections_refused: s.refused.load(Ordering::Relaxed),
            connections_reset: s.resets.load(Ordering::Relaxed),
        }
    }
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.upstream)
            .field("faults", &self.faults())
            .field("stats", &self.stats())
            .finish()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// State shared by the handle and the runtime.
struct Shared {
    faults: watch::Sender<Faults>,
    /// Bumped by `reset_all`.
    cut: watch::Sender<u64>,
    up_bucket: Bucket,
    down_bucket: Bucket,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    accepted: AtomicU64,
    refused: AtomicU64,
    resets: AtomicU64,
}

impl Shared {
    fn new() -> Self {
        Shared {
            faults: watch::Sender::new(Faults::default()),
            cut: watch::Sender::new(0),
            up_bucket: Bucket::default(),
            down_bucket: Bucket::default(),
            bytes_up: AtomicU64::new(0),
            bytes_down: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            resets: AtomicU64::new(0),
        }
    }
}

/// A token bucket that may go into debt: a chunk is taken whole, and its
/// taker waits until the debt is paid back at the rate. Takers that come
/// later wait behind it, so the rate holds across connections.
#[derive(Default)]
struct Bucket {
    state: Mutex<BucketState>,
}

#[derive(Default)]
struct BucketState {
    tokens: f64,
    last: Option<Instant>,
}

impl Bucket {
    /// Takes `n` bytes at `rate` (> 0) bytes per second; returns how long
    /// to wait before forwarding them.
    fn take(&self, n: usize, rate: u64) -> Duration {
        let rate = rate.max(1) as f64;
        let burst = (rate * BURST_SECS).max(1.0);
        let now = Instant::now();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let refilled = match s.last {
            Some(last) => s.tokens + now.duration_since(last).as_secs_f64() * rate,
            None => burst,
        };
        s.tokens = refilled.min(burst) - n as f64;
        s.last = Some(now);
        if s.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-s.tokens / rate)
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Client → upstream.
    Up,
    /// Upstream → client.
    Down,
}

impl Direction {
    fn bucket(self, shared: &Shared) -> &Bucket {
        match self {
            Direction::Up => &shared.up_bucket,
            Direction::Down => &shared.down_bucket,
        }
    }

    fn counter(self, shared: &Shared) -> &AtomicU64 {
        match self {
            Direction::Up => &shared.bytes_up,
            Direction::Down => &shared.bytes_down,
        }
    }
}

/// A chunk read, and when to write it.
struct Chunk {
    due: Instant,
    data: Vec<u8>,
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((client, _)) => {
                shared.accepted.fetch_add(1, Ordering::Relaxed);
                if shared.faults.borrow().refuse {
                    shared.refused.fetch_add(1, Ordering::Relaxed);
                    drop(client);
                    continue;
                }
                tokio::spawn(serve(client, upstream, Arc::clone(&shared)));
            }
            // Out of descriptors or an aborted handshake: transient, and
            // nobody to report it to; try again shortly.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Resets a socket: `SO_LINGER` 0 then close sends an RST.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// Forwards one connection until both directions end, or resets it.
async fn serve(mut client: TcpStream, upstream: SocketAddr, shared: Arc<Shared>) {
    let mut cut = shared.cut.subscribe();
    let connected = tokio::select! {
        r = TcpStream::connect(upstream) => r.ok(),
        Ok(()) = cut.changed() => None,
    };
    let Some(mut server) = connected else {
        shared.resets.fetch_add(1, Ordering::Relaxed);
        reset(client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);

    let aborted = {
        // Bytes forwarded client→upstream on this connection.
        let forwarded = AtomicU64::new(0);
        let (client_r, client_w) = client.split();
        let (server_r, server_w) = server.split();
        let both = async {
            tokio::try_join!(
                pipe(Direction::Up, client_r, server_w, &shared, &forwarded),
                pipe(Direction::Down, server_r, client_w, &shared, &forwarded),
            )
        };
        let mut faults = shared.faults.subscribe();
        // `reset_after` lowered below what was already forwarded.
        let limit_lowered = async {
            while faults.changed().await.is_ok() {
                let limit = faults.borrow_and_update().reset_after;
                if limit.is_some_and(|n| forwarded.load(Ordering::Relaxed) >= n) {
                    return;
                }
            }
            std::future::pending::<()>().await
        };
        tokio::select! {
            r = both => r.is_err(),
            Ok(()) = cut.changed() => true,
            () = limit_lowered => true,
        }
    };
    if aborted {
        shared.resets.fetch_add(1, Ordering::Relaxed);
        reset(client);
        reset(server);
    }
}

/// One direction: a reader and a writer joined by a queue of chunks, so
/// that latency delays data without throttling it. Returns an error when
/// the connection must be reset.
async fn pipe(
    dir: Direction,
    from: ReadHalf<'_>,
    to: WriteHalf<'_>,
    shared: &Shared,
    forwarded: &AtomicU64,
) -> io::Result<()> {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::try_join!(
        read_side(dir, from, tx, shared),
        write_side(dir, to, rx, shared, forwarded),
    )?;
    Ok(())
}

async fn read_side(
    dir: Direction,
    mut from: ReadHalf<'_>,
    tx: mpsc::Sender<Chunk>,
    shared: &Shared,
) -> io::Result<()> {
    let mut faults = shared.faults.subscribe();
    let mut buf = vec![0u8; CHUNK];
    let mut read_total: u64 = 0;
    loop {
        // Wait until this direction may read, and find how much.
        let max = loop {
            let f = faults.borrow_and_update().clone();
            let mut max = CHUNK;
            let mut open = !f.blackhole && f.bandwidth != Some(0);
            if let Some(rate) = f.bandwidth {
                // Small chunks under a low rate, so one chunk never costs
                // more than a twentieth of a second of it.
                max = max.min(usize::try_from(rate / 20).unwrap_or(CHUNK).max(1));
            }
            if dir == Direction::Up {
                if let Some(limit) = f.reset_after {
                    let left = limit.saturating_sub(read_total);
                    open &= left > 0;
                    max = max.min(usize::try_from(left).unwrap_or(CHUNK));
                }
            }
            if open {
                break max;
            }
            if faults.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let n = from.read(&mut buf[..max]).await?;
        if n == 0 {
            // End of stream: dropping `tx` lets the writer half-close after
            // the chunks still queued.
            return Ok(());
        }
        read_total += n as u64;
        // The faults may have changed while the read was pending: the chunk
        // gets those in force now (and waits out a zero bandwidth).
        let now = faults
            .wait_for(|f| f.bandwidth != Some(0))
            .await
            .map(|f| f.clone());
        let Ok(f) = now else {
            // The handle is gone: the runtime is shutting down.
            return Ok(());
        };
        if let Some(rate) = f.bandwidth {
            let wait = dir.bucket(shared).take(n, rate);
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
        let chunk = Chunk {
            due: Instant::now() + f.latency,
            data: buf[..n].to_vec(),
        };
        if tx.send(chunk).await.is_err() {
            return Ok(());
        }
    }
}

async fn write_side(
    dir: Direction,
    mut to: WriteHalf<'_>,
    mut rx: mpsc::Receiver<Chunk>,
    shared: &Shared,
    forwarded: &AtomicU64,
) -> io::Result<()> {
    let mut faults = shared.faults.subscribe();
    while let Some(chunk) = rx.recv().await {
        if chunk.due > Instant::now() {
            tokio::time::sleep_until(chunk.due).await;
        }
        // Hold the chunk while blackholed.
        if faults.wait_for(|f| !f.blackhole).await.is_err() {
            std::future::pending::<()>().await;
        }
        to.write_all(&chunk.data).await?;
        let n = chunk.data.len() as u64;
        dir.counter(shared).fetch_add(n, Ordering::Relaxed);
        if dir == Direction::Up {
            let total = forwarded.fetch_add(n, Ordering::Relaxed) + n;
            if faults
                .borrow()
                .reset_after
                .is_some_and(|limit| total >= limit)
            {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "reset_after reached",
                ));
            }
        }
    }
    to.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener as StdListener, TcpStream as StdStream};
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc as std_mpsc;
    use std::time::Instant as StdInstant;

    const TIMEOUT: Duration = Duration::from_secs(10);

    /// An echo server; returns its address and how many connections it
    /// accepted.
    fn echo_server() -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = StdListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&count);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                seen.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 8192];
                    loop {
                        match conn.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if conn.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                    let _ = conn.shutdown(Shutdown::Write);
                });
            }
        });
        (addr, count)
    }

    /// A sink: reads each connection to its end (or error), reports the
    /// byte count on the channel, then replies with it (8 bytes, LE).
    fn sink_server() -> (SocketAddr, std_mpsc::Receiver<u64>) {
        let listener = StdListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = std_mpsc::channel();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    let mut total = 0u64;
                    while let Ok(n @ 1..) = conn.read(&mut buf) {
                        total += n as u64;
                    }
                    let _ = tx.send(total);
                    let _ = conn.write_all(&total.to_le_bytes());
                });
            }
        });
        (addr, rx)
    }

    fn connect(proxy: &FaultProxy) -> StdStream {
        let s = StdStream::connect(proxy.addr()).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s.set_write_timeout(Some(TIMEOUT)).unwrap();
        s
    }

    fn round_trip(s: &mut StdStream, msg: &[u8]) -> Vec<u8> {
        s.write_all(msg).unwrap();
        let mut back = vec![0u8; msg.len()];
        s.read_exact(&mut back).unwrap();
        back
    }

    /// Polls `cond` until it holds or a few seconds pass.
    fn eventually(mut cond: impl FnMut() -> bool) -> bool {
        let deadline = StdInstant::now() + Duration::from_secs(5);
        while StdInstant::now() < deadline {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        cond()
    }

    fn random(len: usize, seed: u64) -> Vec<u8> {
        let mut data = vec![0u8; len];
        crate::Rng::new(seed).fill(&mut data);
        data
    }

    #[test]
    fn bytes_pass_unchanged_both_ways_and_eof_is_forwarded() {
        let (echo, _) = echo_server();
        let proxy = FaultProxy::start(echo).unwrap();
        let data = random(1 << 20, 1);
        let mut s = connect(&proxy);
        let mut w = s.try_clone().unwrap();
        let sent = data.clone();
        let writer = std::thread::spawn(move || {
            w.write_all(&sent).unwrap();
            w.shutdown(Shutdown::Write).unwrap();
        });
        let mut back = Vec::new();
        // read_to_end returns only at the EOF the proxy forwarded back.
        s.read_to_end(&mut back).unwrap();
        writer.join().unwrap();
        assert!(back == data, "echoed bytes differ");
        assert!(eventually(|| proxy.stats().bytes_to_client == 1 << 20));
        let st = proxy.stats();
        assert_eq!(st.bytes_to_upstream, 1 << 20);
        assert_eq!(st.connections_accepted, 1);
        assert_eq!(st.connections_reset, 0);
    }

    #[test]
    fn stats_count_bytes_per_direction() {
        let (sink, counts) = sink_server();
        let proxy = FaultProxy::start(sink).unwrap();
        assert_eq!(proxy.stats(), ProxyStats::default());
        let mut s = connect(&proxy);
        s.write_all(&random(12_345, 2)).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut reply = Vec::new();
        s.read_to_end(&mut reply).unwrap();
        assert_eq!(reply, 12_345u64.to_le_bytes());
        assert_eq!(counts.recv_timeout(TIMEOUT).unwrap(), 12_345);
        assert!(eventually(|| proxy.stats().bytes_to_client == 8));
        assert_eq!(
            proxy.stats(),
            ProxyStats {
                bytes_to_upstream: 12_345,
                bytes_to_client: 8,
                connections_accepted: 1,
                connections_refused: 0,
                connections_reset: 0,
            }
        );
    }

    #[test]
    fn latency_delays_a_round_trip_and_keeps_order() {
        let (echo, _) = echo_server();
        let proxy = FaultProxy::start(echo).unwrap();
        let mut s = connect(&proxy);
        assert_eq!(round_trip(&mut s, b"warm"), b"warm");
        let latency = Duration::from_millis(150);
        proxy.set(Faults {
            latency,
            ..Faults::default()
        });
        let t = StdInstant::now();
        assert_eq!(round_trip(&mut s, b"hello"), b"hello");
        let rtt = t.elapsed();
        assert!(rtt >= 2 * latency, "round trip {rtt:?} < 2 × {latency:?}");

        // Many small writes under latency come back whole and in order.
        let data = random(256 * 1024, 3);
        let mut w = s.try_clone().unwrap();
        let sent = data.clone();
        let writer = std::thread::spawn(move || {
            for piece in sent.chunks(1000) {
                w.write_all(piece).unwrap();
            }
        });
        let mut back = vec![0u8; data.len()];
        s.read_exact(&mut back).unwrap();
        writer.join().unwrap();
        assert!(back == data, "data reordered or altered under latency");
    }

    /// Sends `per_conn` bytes on each of `conns` connections at once
    /// through a proxy capped at 1 MiB/s; returns the time until the sink
    /// has seen the end of every one.
    fn timed_capped_upload(conns: usize, per_conn: usize) -> Duration {
        let (sink, counts) = sink_server();
        let proxy = FaultProxy::start(sink).unwrap();
        proxy.set(Faults {
            bandwidth: Some(1 << 20),
            ..Faults::default()
        });
        let t = StdInstant::now();
        let clients: Vec<_> = (0..conns)
            .map(|i| {
                let mut s = connect(&proxy);
                let data = random(per_conn, 10 + i as u64);
                std::thread::spawn(move || {
                    s.write_all(&data).unwrap();
                    s.shutdown(Shutdown::Write).unwrap();
                    let mut reply = Vec::new();
                    let _ = s.read_to_end(&mut reply);
                })
            })
            .collect();
        for _ in 0..conns {
            let got = counts.recv_timeout(Duration::from_secs(30)).unwrap();
            assert_eq!(got, per_conn as u64);
        }
        let elapsed = t.elapsed();
        for c in clients {
            c.join().unwrap();
        }
        assert_eq!(proxy.stats().bytes_to_upstream, (conns * per_conn) as u64);
        elapsed
    }

    #[test]
    fn bandwidth_cap_slows_a_transfer() {
        // 2 MiB at 1 MiB/s with a 0.1 s burst: at least 1.9 s.
        let elapsed = timed_capped_upload(1, 2 << 20);
        assert!(elapsed >= Duration::from_millis(1800), "took {elapsed:?}");
    }

    #[test]
    fn bandwidth_cap_is_shared_by_connections() {
        // Two connections of 1 MiB each share the same 1 MiB/s.
        let elapsed = timed_capped_upload(2, 1 << 20);
        assert!(elapsed >= Duration::from_millis(1800), "took {elapsed:?}");
    }

    #[test]
    fn blackhole_holds_data_until_released() {
        let (echo, _) = echo_server();
        let proxy = FaultProxy::start(echo).unwrap();
        let mut s = connect(&proxy);
        assert_eq!(round_trip(&mut s, b"before"), b"before");
        // The counter moves just after the write the client already saw.
        assert!(eventually(|| proxy.stats().bytes_to_client == 6));
        let before = proxy.stats();

        proxy.set(Faults {
            blackhole: true,
            ..Faults::default()
        });
        s.write_all(b"ping").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut buf = [0u8; 4];
        let err = s.read(&mut buf).expect_err("data crossed a blackhole");
        assert!(
            matches!(
                err.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "{err}"
        );
        assert_eq!(proxy.stats(), before, "bytes forwarded while blackholed");

        proxy.set(Faults::default());
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping", "held data not delivered after release");
        assert_eq!(proxy.stats().connections_reset, 0);
    }

    #[test]
    fn reset_after_resets_the_client_at_the_limit() {
        const LIMIT: u64 = 50_000;
        let (sink, counts) = sink_server();
        let proxy = FaultProxy::start(sink).unwrap();
        proxy.set(Faults {
            reset_after: Some(LIMIT),
            ..Faults::default()
        });
        let mut s = connect(&proxy);
        let outcome = s.write_all(&random(1 << 20, 4)).and_then(|()| {
            let mut b = [0u8; 1];
            s.read(&mut b)
        });
        let err = outcome.expect_err("no reset seen by the client");
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{err}");
        // The upstream got no more than the limit, and the proxy forwarded
        // exactly the limit.
        assert!(counts.recv_timeout(TIMEOUT).unwrap() <= LIMIT);
        assert!(eventually(|| proxy.stats().connections_reset == 1));
        assert_eq!(proxy.stats().bytes_to_upstream, LIMIT);
    }

    #[test]
    fn refuse_closes_new_connections_without_reaching_upstream() {
        let (echo, upstream_conns) = echo_server();
        let proxy = FaultProxy::start(echo).unwrap();
        proxy.set(Faults {
            refuse: true,
            ..Faults::default()
        });
        let mut s = connect(&proxy);
        let mut buf = [0u8; 1];
        match s.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
            other => panic!("refused connection stayed open: {other:?}"),
        }
        assert_eq!(upstream_conns.load(Ordering::SeqCst), 0);

        proxy.set(Faults::default());
        let mut s = connect(&proxy);
        assert_eq!(round_trip(&mut s, b"again"), b"again");
        assert_eq!(upstream_conns.load(Ordering::SeqCst), 1);
        let st = proxy.stats();
        assert_eq!((st.connections_accepted, st.connections_refused), (2, 1));
    }

    #[test]
    fn reset_all_cuts_open_connections_only() {
        let (echo, _) = echo_server();
        let proxy = FaultProxy::start(echo).unwrap();
        let mut a = connect(&proxy);
        let mut b = connect(&proxy);
        assert_eq!(round_trip(&mut a, b"a"), b"a");
        assert_eq!(round_trip(&mut b, b"b"), b"b");
        proxy.reset_all();
        for s in [&mut a, &mut b] {
            let mut buf = [0u8; 1];
            let err = s.read(&mut buf).expect_err("connection survived the cut");
            assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{err}");
        }
        assert!(eventually(|| proxy.stats().connections_reset == 2));
        let mut c = connect(&proxy);
        assert_eq!(round_trip(&mut c, b"after"), b"after");
    }

    #[test]
    fn dropping_the_proxy_closes_its_connections() {
        let (echo, _) = echo_server();
        let proxy = FaultProxy::start(echo).unwrap();
        let mut s = connect(&proxy);
        assert_eq!(round_trip(&mut s, b"x"), b"x");
        drop(proxy);
        let mut buf = [0u8; 1];
        match s.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
            other => panic!("connection outlived the proxy: {other:?}"),
        }
    }

    #[test]
    fn bucket_charges_debt_at_the_rate() {
        let b = Bucket::default();
        // The first 100 ms of the rate pass at once (the burst) ...
        assert_eq!(b.take(10, 100), Duration::ZERO);
        // ... then 50 more bytes at 100 B/s cost half a second, less what
        // refilled between the two calls.
        let wait = b.take(50, 100);
        assert!(wait >= Duration::from_millis(400), "{wait:?}");
    }
}
