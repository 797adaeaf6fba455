//! `vouch-fault-proxy`: the fault proxy as a process, for benchmarks and
//! manual experiments (`vouch bench`'s `slow-target` starts it between a
//! client and its server).
//!
//! ```text
//! vouch-fault-proxy --upstream 127.0.0.1:8443 [--latency 50ms] [--bandwidth 1048576]
//! ```
//!
//! It prints `listening on 127.0.0.1:PORT` once it accepts connections.
//! Then it reads commands, one per line, from its standard input and
//! answers each with one line on its standard output:
//!
//! - `stats`: the counters so far, as one JSON object
//!   (`bytes_to_upstream`, `bytes_to_client`, `connections_accepted`,
//!   `connections_refused`, `connections_reset`);
//! - `reset`: resets every open connection (a network cut), answers `ok`.
//!
//! It stops at the end of its standard input.

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use vouch_chaos::proxy::{FaultProxy, Faults};

fn usage() -> ExitCode {
    eprintln!(
        "usage: vouch-fault-proxy --upstream HOST:PORT [--latency DURATION] [--bandwidth BYTES_PER_S]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut upstream: Option<SocketAddr> = None;
    let mut faults = Faults::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let value = args.next();
        let parsed = match (a.as_str(), value.as_deref()) {
            ("--upstream", Some(v)) => v.parse().map(|u| upstream = Some(u)).ok(),
            ("--latency", Some(v)) => parse_duration(v).map(|d| faults.latency = d),
            ("--bandwidth", Some(v)) => v.parse().map(|b| faults.bandwidth = Some(b)).ok(),
            _ => None,
        };
        if parsed.is_none() {
            eprintln!(
                "vouch-fault-proxy: cannot use {a} {}",
                value.unwrap_or_default()
            );
            return usage();
        }
    }
    let Some(upstream) = upstream else {
        return usage();
    };
    let proxy = match FaultProxy::start(upstream) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("vouch-fault-proxy: {e}");
            return ExitCode::FAILURE;
        }
    };
    proxy.set(faults);
    let mut out = std::io::stdout().lock();
    if writeln!(out, "listening on {}", proxy.addr())
        .and_then(|()| out.flush())
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let answer = match line.trim() {
            "stats" => {
                let s = proxy.stats();
                format!(
                    "{{\"bytes_to_upstream\":{},\"bytes_to_client\":{},\"connections_accepted\":{},\"connections_refused\":{},\"connections_reset\":{}}}",
                    s.bytes_to_upstream,
                    s.bytes_to_client,
                    s.connections_accepted,
                    s.connections_refused,
                    s.connections_reset
                )
            }
            "reset" => {
                proxy.reset_all();
                "ok".into()
            }
            other => format!("error: unknown command {other:?} (stats, reset)"),
        };
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            break;
        }
    }
    ExitCode::SUCCESS
}

/// `50ms`, `1s`, `250us` or a bare number of milliseconds.
fn parse_duration(v: &str) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
    let n: u64 = digits.parse().ok()?;
    match unit {
        "" | "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "us" => Some(Duration::from_micros(n)),
        _ => None,
    }
}
