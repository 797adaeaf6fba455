//! A small blocking HTTP/1.1 client for the runner's calls to the service
//! under test: one connection per request, bounded by a timeout, so a
//! stopped or blackholed service costs a sample, never the runner.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;

/// Why a call got no answer.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// Connecting, sending or reading failed (the service is down, paused
    /// or cut off).
    #[error("{method} {path}: {source}")]
    Io {
        /// The method.
        method: String,
        /// The path.
        path: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The answer was no HTTP/1.1 answer, or its body no JSON.
    #[error("{method} {path}: malformed answer: {why}")]
    Malformed {
        /// The method.
        method: String,
        /// The path.
        path: String,
        /// What was wrong.
        why: String,
    },
}

/// A service's address and the bearer token the runner calls it with.
#[derive(Clone, Debug)]
pub struct Client {
    /// Where the service listens (plain HTTP on loopback).
    pub addr: SocketAddr,
    /// An admin token.
    pub token: String,
    /// How long one call may take.
    pub timeout: Duration,
}

impl Client {
    /// One exchange: the status and the raw body.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Vec<u8>), HttpError> {
        let io = |source| HttpError::Io {
            method: method.to_owned(),
            path: path.to_owned(),
            source,
        };
        let mut s = TcpStream::connect_timeout(&self.addr, self.timeout).map_err(io)?;
        s.set_read_timeout(Some(self.timeout)).map_err(io)?;
        s.set_write_timeout(Some(self.timeout)).map_err(io)?;
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
             Authorization: Bearer {}\r\nContent-Length: {}\r\n",
            self.addr,
            self.token,
            body.len()
        );
        if !body.is_empty() {
            req.push_str("Content-Type: application/json\r\n");
        }
        req.push_str("\r\n");
        req.push_str(&body);
        s.write_all(req.as_bytes()).map_err(io)?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).map_err(io)?;
        parse_answer(&raw).map_err(|why| HttpError::Malformed {
            method: method.to_owned(),
            path: path.to_owned(),
            why,
        })
    }

    /// A GET whose answer must be 200 with a JSON body.
    pub fn get_json(&self, path: &str) -> Result<Value, HttpError> {
        let (status, body) = self.call("GET", path, None)?;
        json_of("GET", path, status, &body, &[200])
    }

    /// A POST with a JSON body; the status and the JSON answer (null when
    /// the answer has no JSON body).
    pub fn post_json(&self, path: &str, body: &Value) -> Result<(u16, Value), HttpError> {
        let (status, raw) = self.call("POST", path, Some(body))?;
        Ok((status, serde_json::from_slice(&raw).unwrap_or(Value::Null)))
    }

    /// The status of `GET /readyz` (no token needed, sent anyway).
    pub fn ready(&self) -> bool {
        matches!(self.call("GET", "/readyz", None), Ok((200, _)))
    }
}

fn json_of(
    method: &str,
    path: &str,
    status: u16,
    body: &[u8],
    ok: &[u16],
) -> Result<Value, HttpError> {
    let malformed = |why: String| HttpError::Malformed {
        method: method.to_owned(),
        path: path.to_owned(),
        why,
    };
    if !ok.contains(&status) {
        return Err(malformed(format!(
            "status {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        )));
    }
    serde_json::from_slice(body).map_err(|e| malformed(format!("not JSON: {e}")))
}

/// Status and body of a complete HTTP/1.1 answer (a chunked body
/// dechunked).
fn parse_answer(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no complete head")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("no status line")?;
    let mut rest = &raw[split + 4..];
    if !head.contains("transfer-encoding: chunked") {
        return Ok((status, rest.to_vec()));
    }
    let mut out = Vec::new();
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let n = std::str::from_utf8(&rest[..eol])
            .ok()
            .and_then(|h| usize::from_str_radix(h.trim(), 16).ok())
            .ok_or("a bad chunk size")?;
        let chunk = &rest[eol + 2..];
        if n == 0 {
            return Ok((status, out));
        }
        if chunk.len() < n {
            return Err("a chunk cut short".into());
        }
        out.extend_from_slice(&chunk[..n]);
        rest = chunk[n..].strip_prefix(b"\r\n").unwrap_or(&chunk[n..]);
    }
    Err("a chunked body without its last chunk".into())
}

#[cfg(test)]
mod tests {
    use super::parse_answer;

    #[test]
    fn answers_plain_and_chunked_and_refuses_cut_ones() {
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(parse_answer(plain), Ok((200, b"ok".to_vec())));
        let chunked =
            b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n";
        assert_eq!(parse_answer(chunked), Ok((201, b"abc".to_vec())));
        let cut = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab";
        assert!(parse_answer(cut).is_err());
        assert!(parse_answer(b"HTTP/1.1 200").is_err());
    }
}
