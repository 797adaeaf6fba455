//! `vouch serve` under systemd's `Type=notify` protocol (issue 18): READY
//! once it listens, WATCHDOG while its event loop turns (when a watchdog
//! is asked for), STOPPING when a SIGTERM starts the drain. The test plays
//! systemd's part with a datagram socket of its own.

mod common;

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use common::served::{sources_allow, start_with_env};

/// The notifications received within `wait`, until `until` is among them.
fn receive_until(socket: &UnixDatagram, until: &str, wait: Duration) -> Vec<String> {
    let deadline = Instant::now() + wait;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if let Ok(n) = socket.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            let done = msg.lines().any(|l| l == until);
            got.push(msg);
            if done {
                break;
            }
        }
    }
    got
}

#[test]
fn serve_tells_systemd_ready_feeds_the_watchdog_and_says_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let config = dir.path().join("vouch.toml");
    std::fs::write(&config, sources_allow(dir.path())).unwrap();
    let mut svc = start_with_env(
        &[
            ("NOTIFY_SOCKET", path.to_str().unwrap()),
            // 400 ms: fed every 200 ms.
            ("WATCHDOG_USEC", "400000"),
        ],
        &dir.path().join("data"),
        &config,
        None,
    );
    let first = receive_until(&socket, "READY=1", Duration::from_secs(10));
    let ready = first.last().cloned().unwrap_or_default();
    assert!(ready.lines().any(|l| l == "READY=1"), "{first:?}");
    assert!(
        ready.contains(&format!("STATUS=listening on http://{}", svc.addr)),
        "{ready:?}"
    );
    let fed = receive_until(&socket, "WATCHDOG=1", Duration::from_secs(5));
    assert!(fed.iter().any(|m| m.contains("WATCHDOG=1")), "{fed:?}");

    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(
        unsafe { libc::kill(svc.child.id() as i32, libc::SIGTERM) },
        0
    );
    let stopping = receive_until(&socket, "STOPPING=1", Duration::from_secs(10));
    assert!(
        stopping
            .iter()
            .any(|m| m.lines().any(|l| l == "STOPPING=1")),
        "{stopping:?}"
    );
    assert!(svc.child.wait().unwrap().success());
}
