//! The CLI's link to the service that owns a repository: `vouch serve`
//! writes an ownership record into each repository it serves
//! ([`claim`]); `vouch verify` reads it and sends its per-point findings to
//! that service ([`send_report`]); `vouch forget` and `prune` refuse to act
//! behind the service's back ([`refuse_if_owned`]). See `docs/cli.md`,
//! "Repositories a service owns".
//!
//! The HTTP client is a plain HTTP/1.1 exchange over `std::net::TcpStream`
//! (one request, `Connection: close`), wrapped in rustls when the record's
//! URL is https. The certificate is pinned: the record (authenticated with
//! the repository's key) carries the BLAKE3 of the service's leaf
//! certificate and the client trusts exactly that certificate, so no CA
//! store is needed and a self-signed service certificate works.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use serde_json::{json, Value};

use crate::error::{exit_code, Result};
use crate::repo::owner::OwnerRecord;
use crate::repo::Repository;
use crate::verify::VerifyReport;
use crate::workers::RepoSet;

/// Where the service keeps its random id (in its data directory).
const SERVICE_ID_FILE: &str = "service.id";
/// Points per report request (the route takes at most 500).
const BATCH: usize = 200;
/// Damaged packs named per point (the route takes at most 20).
const POINT_PACKS: usize = 20;
/// Problems named per point (the route takes at most 5, 300 bytes each).
const POINT_PROBLEMS: usize = 5;
const PROBLEM_LEN: usize = 300;
/// Largest answer the client reads.
const MAX_ANSWER: u64 = 4 << 20;

/// The service's id: read from its data directory, made on first start.
fn service_id(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join(SERVICE_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(s) if !s.trim().is_empty() => return Ok(s.trim().to_owned()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(anyhow::anyhow!("reading {}: {e}", path.display())),
    }
    let id = hex::encode(crate::crypto::random_array::<16>());
    let tmp = data_dir.join(format!("{SERVICE_ID_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(id.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    Ok(id)
}

/// Makes `id` the service id of the data directory (a rebuilt server
/// keeps the id its repositories' ownership records name).
pub fn adopt_service_id(data_dir: &Path, id: &str) -> anyhow::Result<()> {
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        anyhow::bail!("the ownership record's service id {id:?} is not one vouch makes");
    }
    let tmp = data_dir.join(format!("{SERVICE_ID_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(id.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, data_dir.join(SERVICE_ID_FILE))?;
    Ok(())
}

/// The API's base URL as the CLI should reach it: the bound address, with
/// an unspecified IP (`0.0.0.0`, `::`) replaced by loopback.
pub fn base_url(scheme: &str, addr: std::net::SocketAddr) -> String {
    let mut addr = addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr.ip() {
            std::net::IpAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    format!("{scheme}://{addr}")
}

/// Writes (or refreshes) the ownership record of every repository `repos`
/// serves. A repository that cannot be opened or written is warned about
/// and skipped: the CLI then does not know the service owns it.
pub fn claim(
    repos: &RepoSet,
    data_dir: &Path,
    url: &str,
    tls_cert: Option<&Path>,
) -> anyhow::Result<()> {
    let id = service_id(data_dir)?;
    let digest = match tls_cert {
        Some(c) => Some(super::tls::leaf_digest(c)?),
        None => None,
    };
    for spec in repos.specs() {
        let result = repos.open(&spec.id).and_then(|repo| {
            // "Since" survives restarts of the same service at any URL.
            let since = match repo.read_owner() {
                Ok(Some(old)) if old.service_id == id && old.repository == spec.id.as_str() => {
                    old.since
                }
                _ => crate::util::now_rfc3339(),
            };
            repo.write_owner(&OwnerRecord {
                service_id: id.clone(),
                url: url.to_owned(),
                repository: spec.id.to_string(),
                since,
                tls_cert_blake3: digest.clone(),
            })
        });
        match result {
            Ok(()) => {
                tracing::info!(repository = %spec.id, %url, "ownership record written")
            }
            Err(e) => tracing::warn!(
                repository = %spec.id,
                "could not write the ownership record ({e}): the CLI will not know this service owns the repository"
            ),
        }
    }
    Ok(())
}

/// How the owner of a repository stands, for the CLI.
pub enum Ownership {
    /// No ownership record: no service claims the repository.
    Free,
    /// Owned by the service of this record.
    Owned(OwnerRecord),
    /// A record exists but does not authenticate or parse (damage or
    /// tampering): never followed.
    Damaged(String),
}

/// Reads the repository's ownership record.
pub fn ownership(repo: &Repository) -> Result<Ownership> {
    match repo.read_owner() {
        Ok(None) => Ok(Ownership::Free),
        Ok(Some(r)) => Ok(Ownership::Owned(r)),
        Err(
            e @ (crate::Error::CorruptMetadata { .. } | crate::Error::UnsupportedFormat { .. }),
        ) => Ok(Ownership::Damaged(e.to_string())),
        Err(e) => Err(e),
    }
}

/// For `forget` and `prune`: `Some(exit code)` (after explaining on
/// stderr) when the repository is service-owned, or its record is damaged,
/// and `--outside-service` was not given.
pub fn refuse_if_owned(repo: &Repository, command: &str, outside: bool) -> Result<Option<i32>> {
    match ownership(repo)? {
        Ownership::Free => Ok(None),
        Ownership::Owned(r) if outside => {
            eprintln!(
                "warning: {command} runs outside service {} ({}), which owns this repository (--outside-service); its reconciliation will record what vanished",
                r.service_id, r.url
            );
            Ok(None)
        }
        Ownership::Damaged(e) if outside => {
            eprintln!("warning: the ownership record is damaged ({e}); {command} runs anyway (--outside-service)");
            Ok(None)
        }
        Ownership::Owned(r) => {
            eprintln!(
                "error: refusing to {command}: repository {:?} of service {} at {} owns this repository (since {}).\n\
                 hint: {command} through the service instead (its API or console: retention runs there and honours its point locks), \
                 or stop the service first; to {command} anyway, behind the service's back, pass --outside-service \
                 (the service then records the points as vanished)",
                r.repository, r.service_id, r.url, r.since
            );
            Ok(Some(exit_code::SERVICE_OWNED))
        }
        Ownership::Damaged(e) => {
            eprintln!(
                "error: refusing to {command}: the repository's ownership record is damaged ({e}), so which service owns it cannot be told.\n\
                 hint: restart the service that serves this repository (it rewrites the record), or pass --outside-service to {command} anyway"
            );
            Ok(Some(exit_code::SERVICE_OWNED))
        }
    }
}

/// The API token from `VOUCH_TOKEN` or the file named by
/// `VOUCH_TOKEN_FILE` (never from an argument: it would show in `ps`).
pub fn token() -> std::result::Result<Option<String>, String> {
    if let Ok(t) = std::env::var("VOUCH_TOKEN") {
        let t = t.trim().to_owned();
        if !t.is_empty() {
            return Ok(Some(t));
        }
    }
    if let Ok(p) = std::env::var("VOUCH_TOKEN_FILE") {
        let t = std::fs::read_to_string(&p)
            .map_err(|e| format!("VOUCH_TOKEN_FILE {p}: {e}"))?
            .trim()
            .to_owned();
        if t.is_empty() {
            return Err(format!("VOUCH_TOKEN_FILE {p} is empty"));
        }
        return Ok(Some(t));
    }
    Ok(None)
}

/// The depth labels a run at this reading earns: a pass is labelled no
/// deeper than what was read (a sample below 1% is a structure pass), a
/// failure no shallower (so a later shallow pass never clears it).
fn depth_labels(read_data: bool, subset: Option<f64>) -> (String, String) {
    match (read_data, subset) {
        (false, _) => ("structure".into(), "structure".into()),
        (true, None) => ("read-all".into(), "read-all".into()),
        (true, Some(f)) if f >= 1.0 => ("read-all".into(), "read-all".into()),
        (true, Some(f)) => {
            let pct = f * 100.0;
            let floor = pct.floor().clamp(0.0, 100.0) as u8;
            let ceil = pct.ceil().clamp(1.0, 100.0) as u8;
            (
                if floor == 0 {
                    "structure".into()
                } else {
                    format!("read-sample:{floor}")
                },
                format!("read-sample:{ceil}"),
            )
        }
    }
}

fn clip(s: &str) -> String {
    let mut s: String = s.chars().filter(|c| !c.is_control()).collect();
    if s.len() > PROBLEM_LEN {
        let mut end = PROBLEM_LEN - 3;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    if s.is_empty() {
        "damaged".into()
    } else {
        s
    }
}

/// The per-point verdicts of a verify report, as request bodies of at most
/// [`BATCH`] points each.
pub fn report_bodies(report: &VerifyReport, read_data: bool, subset: Option<f64>) -> Vec<Value> {
    let (pass_depth, fail_depth) = depth_labels(read_data, subset);
    let mut points: Vec<(Value, Vec<String>)> = Vec::new();
    let affected: std::collections::HashMap<&str, &crate::verify::Affected> = report
        .affected
        .iter()
        .map(|a| (a.snapshot.as_str(), a))
        .collect();
    for id in &report.checked {
        let hex = id.to_hex();
        match affected.get(hex.as_str()) {
            None => points.push((
                json!({"point": hex, "verdict": "passed", "depth": pass_depth}),
                Vec::new(),
            )),
            Some(a) => {
                let packs: Vec<String> = a.packs.iter().take(POINT_PACKS).cloned().collect();
                let mut problems: Vec<String> = Vec::new();
                if a.packs.len() > POINT_PACKS {
                    problems.push(format!(
                        "and {} more damaged packs",
                        a.packs.len() - POINT_PACKS
                    ));
                }
                problems.push(clip(&format!("damaged paths: {}", a.path_count)));
                for p in a.paths.iter().take(POINT_PROBLEMS - problems.len()) {
                    problems.push(clip(&format!("path {p}")));
                }
                points.push((
                    json!({"point": hex, "verdict": "damaged", "depth": fail_depth,
                           "damaged_packs": packs, "problems": problems}),
                    packs,
                ));
            }
        }
    }
    for id in &report.unreadable_snapshots {
        points.push((
            json!({"point": id.to_hex(), "verdict": "damaged", "depth": fail_depth,
                   "problems": ["the snapshot's manifest does not read"]}),
            Vec::new(),
        ));
    }
    points
        .chunks(BATCH)
        .map(|batch| {
            let mut packs: Vec<&String> = batch.iter().flat_map(|(_, p)| p).collect();
            packs.sort();
            packs.dedup();
            json!({
                "points": batch.iter().map(|(v, _)| v).collect::<Vec<_>>(),
                "damaged_packs": packs,
                "bytes_read": report.bytes_read,
                "blobs_checked": report.blobs_read,
            })
        })
        .collect()
}

/// What the service recorded for a whole run.
#[derive(Debug, Default, serde::Serialize)]
pub struct Reported {
    /// Events recorded.
    pub recorded: u64,
    /// Of which `verification.failed`.
    pub failed: u64,
    /// Points the service does not know (nothing recorded for them).
    pub unknown: u64,
    /// Points it has forgotten.
    pub forgotten: u64,
}

/// Sends `bodies` to the owner's report route with `token`.
pub fn send_report(
    owner: &OwnerRecord,
    token: &str,
    bodies: &[Value],
) -> std::result::Result<Reported, String> {
    let path = format!(
        "/api/v1/repositories/{}/verify-reports",
        percent_encode(&owner.repository)
    );
    let mut out = Reported::default();
    for body in bodies {
        let (status, answer) = post(owner, &path, token, body.to_string().as_bytes())?;
        let answer: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
        if status != 200 {
            return Err(format!(
                "the service answered {status}: {}",
                answer["message"].as_str().unwrap_or("(no message)")
            ));
        }
        let count = |k: &str| answer[k].as_array().map_or(0, |a| a.len() as u64);
        out.recorded += count("recorded");
        out.unknown += count("unknown");
        out.forgotten += count("forgotten");
        out.failed += answer["recorded"].as_array().map_or(0, |a| {
            a.iter()
                .filter(|r| r["type"] == "verification.failed")
                .count() as u64
        });
    }
    Ok(out)
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `host:port` and whether TLS, from the record's base URL.
fn endpoint(url: &str) -> std::result::Result<(String, bool), String> {
    let (rest, tls) = if let Some(r) = url.strip_prefix("https://") {
        (r, true)
    } else if let Some(r) = url.strip_prefix("http://") {
        (r, false)
    } else {
        return Err(format!("{url:?} is not an http(s) URL"));
    };
    let host = rest.trim_end_matches('/');
    if host.is_empty() || host.contains('/') || host.contains('@') {
        return Err(format!("{url:?} is not a base URL"));
    }
    Ok((host.to_owned(), tls))
}

/// One POST; status and body.
fn post(
    owner: &OwnerRecord,
    path: &str,
    token: &str,
    body: &[u8],
) -> std::result::Result<(u16, Vec<u8>), String> {
    let (host, tls) = endpoint(&owner.url)?;
    let addr = host
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host} resolves to nothing"))?;
    let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .map_err(|e| format!("cannot connect to {}: {e}", owner.url))?;
    let io = |e: std::io::Error| format!("talking to {}: {e}", owner.url);
    tcp.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(io)?;
    tcp.set_write_timeout(Some(Duration::from_secs(60)))
        .map_err(io)?;
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\nAuthorization: Bearer ",
        body.len()
    )
    .into_bytes();
    head.extend_from_slice(token.as_bytes());
    head.extend_from_slice(b"\r\n\r\n");
    let raw = if tls {
        let digest = owner
            .tls_cert_blake3
            .clone()
            .ok_or_else(|| "the record names no certificate for its https URL".to_string())?;
        let config = crate::tls_pin::pinned_config(crate::tls_pin::Pin::Blake3(digest))?;
        let name = host
            .rsplit_once(':')
            .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
            .unwrap_or(&host)
            .to_owned();
        let name = ServerName::try_from(name).map_err(|e| e.to_string())?;
        let conn =
            rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
        let mut s = rustls::StreamOwned::new(conn, tcp);
        exchange(&mut s, &head, body).map_err(io)?
    } else {
        let mut s = tcp;
        exchange(&mut s, &head, body).map_err(io)?
    };
    parse_response(&raw)
}

fn exchange(s: &mut impl ReadWrite, head: &[u8], body: &[u8]) -> std::io::Result<Vec<u8>> {
    s.write_all(head)?;
    s.write_all(body)?;
    s.flush()?;
    let mut raw = Vec::new();
    match Read::take(&mut *s, MAX_ANSWER).read_to_end(&mut raw) {
        Ok(_) => {}
        // A TLS server may close without close_notify after a full answer.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e),
    }
    Ok(raw)
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn parse_response(raw: &[u8]) -> std::result::Result<(u16, Vec<u8>), String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| "the service's answer has no complete header".to_string())?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| "the service's answer has no status".to_string())?;
    let rest = &raw[split + 4..];
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    Ok((status, body))
}

fn dechunk(mut s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = s.windows(2).position(|w| w == b"\r\n") {
        let n = std::str::from_utf8(&s[..eol])
            .ok()
            .and_then(|h| usize::from_str_radix(h.trim(), 16).ok())
            .unwrap_or(0);
        let rest = &s[eol + 2..];
        if n == 0 || rest.len() < n {
            break;
        }
        out.extend_from_slice(&rest[..n]);
        s = rest[n..].strip_prefix(b"\r\n").unwrap_or(&rest[n..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_never_claim_more_depth_than_read_and_failures_never_less() {
        assert_eq!(
            depth_labels(false, None),
            ("structure".into(), "structure".into())
        );
        assert_eq!(
            depth_labels(true, None),
            ("read-all".into(), "read-all".into())
        );
        assert_eq!(
            depth_labels(true, Some(0.105)),
            ("read-sample:10".into(), "read-sample:11".into())
        );
        assert_eq!(
            depth_labels(true, Some(0.005)),
            ("structure".into(), "read-sample:1".into())
        );
    }

    #[test]
    fn base_urls_reach_loopback_for_unspecified_listeners() {
        assert_eq!(
            base_url("http", "0.0.0.0:8080".parse().unwrap()),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            base_url("https", "[::]:1".parse().unwrap()),
            "https://[::1]:1"
        );
        assert_eq!(
            endpoint("https://[::1]:1").unwrap(),
            ("[::1]:1".into(), true)
        );
        assert!(endpoint("http://evil@host:1").is_err());
        assert!(endpoint("ftp://host:1").is_err());
    }

    #[test]
    fn chunked_and_plain_answers_parse() {
        let (s, b) = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}").unwrap();
        assert_eq!((s, b.as_slice()), (200, &b"{}"[..]));
        let (s, b) = parse_response(
            b"HTTP/1.1 422 X\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!((s, b.as_slice()), (422, &b"{}"[..]));
    }
}
