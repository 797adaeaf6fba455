//! The client of the repository protocol (`/repo/v1/{repo}`, see
//! `docs/agents.md`): a [`Backend`] over HTTP, so every engine command
//! works on a repository a service serves, as on a local one. The server
//! checks what is written (names against BLAKE3, referential integrity of
//! snapshots, append-only rights); this side only maps calls and errors.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use actix_web::http::Method;
use actix_web::web::Bytes;
use serde::Deserialize;

use super::{Backend, FileKind, WriteSync};
use crate::error::{Error, Result};
use crate::http_client::{Answer, HttpClient, Request};

/// The lease header an agent's writes carry (see `vouch_web`).
pub const LEASE_HEADER: &str = "x-vouch-lease";

/// A repository served by a `vouch serve` elsewhere.
pub struct HttpBackend {
    client: Arc<HttpClient>,
    /// `/repo/v1/REPO`.
    base: String,
    /// The fencing token of the lease the writes are made under (agents).
    lease: Mutex<Option<u64>>,
}

#[derive(Deserialize)]
struct FileEntry {
    name: String,
    size: u64,
}

fn segment(kind: FileKind) -> &'static str {
    match kind {
        FileKind::Config => "config",
        FileKind::Owner => "owner",
        FileKind::Key => "keys",
        FileKind::Pack => "data",
        FileKind::Index => "index",
        FileKind::Snapshot => "snapshots",
        FileKind::Lock => "locks",
        FileKind::PointLock => "pointlocks",
        FileKind::LogMirror => "eventlog",
    }
}

impl HttpBackend {
    /// The repository at `path` (`/repo/v1/REPO`) of `client`'s server.
    pub fn new(client: Arc<HttpClient>, path: &str) -> Result<Self> {
        let repo = path
            .strip_prefix("/repo/v1/")
            .filter(|r| !r.is_empty() && !r.contains('/'))
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{}{path} is not a repository URL: expected https://HOST:PORT/repo/v1/REPOSITORY",
                    client.origin()
                ))
            })?;
        Ok(HttpBackend {
            client,
            base: format!("/repo/v1/{repo}"),
            lease: Mutex::new(None),
        })
    }

    /// Makes every later write under the lease `fence` (agents).
    pub fn set_lease(&self, fence: Option<u64>) {
        *self.lease.lock().unwrap_or_else(PoisonError::into_inner) = fence;
    }

    /// The client, for its traffic counters.
    pub fn client(&self) -> &Arc<HttpClient> {
        &self.client
    }

    fn url(&self, kind: FileKind, name: &str) -> String {
        if name.is_empty() {
            format!("{}/{}", self.base, segment(kind))
        } else {
            format!("{}/{}/{name}", self.base, segment(kind))
        }
    }

    fn leased(&self, r: Request) -> Request {
        match *self.lease.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(fence) => r.header(LEASE_HEADER, fence.to_string()),
            None => r,
        }
    }

    fn call(&self, r: Request) -> Result<Answer> {
        let what = format!("{} {}{}", r.method, self.client.origin(), r.path);
        self.client.call(&r).map_err(|e| {
            Error::io(
                what,
                std::io::Error::new(std::io::ErrorKind::ConnectionAborted, e),
            )
        })
    }

    /// An error for an answer that is not what the call needed.
    fn refused(&self, a: &Answer, what: &str) -> Error {
        let message = a.message();
        let io = |kind| Error::io(what.to_owned(), std::io::Error::new(kind, message.clone()));
        match a.status {
            401 => Error::InvalidArgument(format!(
                "the server refused the token ({what}): {message} (set VOUCH_TOKEN or VOUCH_TOKEN_FILE)"
            )),
            403 => Error::InvalidArgument(format!("the server forbids {what}: {message}")),
            404 => io(std::io::ErrorKind::NotFound),
            409 => Error::InvalidArgument(format!("the server refused {what}: {message}")),
            413 => Error::InvalidArgument(format!("too large for the server ({what}): {message}")),
            507 => Error::DiskFull(format!("the server's storage is full ({what}): {message}")),
            _ => io(std::io::ErrorKind::Other),
        }
    }
}

impl Backend for HttpBackend {
    fn location(&self) -> String {
        format!("{}{}", self.client.origin(), self.base)
    }

    fn create(&self) -> Result<()> {
        Err(Error::InvalidArgument(format!(
            "{} is served by a vouch service: repositories are created on the server (its configuration, or an agent's registration), not over the protocol",
            self.location()
        )))
    }

    fn exists(&self, kind: FileKind, name: &str) -> Result<bool> {
        let a = self.call(Request::new(Method::HEAD, self.url(kind, name)))?;
        match a.status {
            200 => Ok(true),
            404 => Ok(false),
            _ => Err(self.refused(&a, &format!("HEAD {}", self.url(kind, name)))),
        }
    }

    fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
        let path = format!("{}/{}", self.base, segment(kind));
        let a = self.call(Request::new(Method::GET, &path))?;
        if !a.ok() {
            return Err(self.refused(&a, &format!("listing {path}")));
        }
        let files: Vec<FileEntry> = serde_json::from_slice(&a.body)
            .map_err(|e| Error::corrupt(format!("the listing of {path}"), e))?;
        Ok(files.into_iter().map(|f| (f.name, f.size)).collect())
    }

    fn read(&self, kind: FileKind, name: &str) -> Result<Vec<u8>> {
        let path = self.url(kind, name);
        let a = self.call(Request::new(Method::GET, &path))?;
        if a.status != 200 {
            return Err(self.refused(&a, &format!("reading {path}")));
        }
        if matches!(kind, FileKind::Config | FileKind::Key | FileKind::Lock)
            && a.body.len() as u64 > super::MAX_SMALL_FILE
        {
            return Err(Error::corrupt(
                path,
                format!(
                    "{} bytes, more than a {} file may hold",
                    a.body.len(),
                    segment(kind)
                ),
            ));
        }
        Ok(a.body.to_vec())
    }

    fn read_range(
        &self,
        kind: FileKind,
        name: &str,
        offset: u64,
        length: usize,
    ) -> Result<Vec<u8>> {
        let path = self.url(kind, name);
        if length == 0 {
            return Ok(Vec::new());
        }
        let last = offset + length as u64 - 1;
        let a = self.call(
            Request::new(Method::GET, &path).header("range", format!("bytes={offset}-{last}")),
        )?;
        if a.status != 206 {
            return Err(self.refused(&a, &format!("reading bytes {offset}-{last} of {path}")));
        }
        if a.body.len() != length {
            return Err(Error::io(
                format!("reading bytes {offset}-{last} of {path}"),
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("{} bytes came, {length} were asked for", a.body.len()),
                ),
            ));
        }
        Ok(a.body.to_vec())
    }

    fn write(&self, kind: FileKind, name: &str, data: &[u8], sync: WriteSync) -> Result<()> {
        self.put(kind, name, Bytes::copy_from_slice(data), sync)
    }

    fn write_owned(
        &self,
        kind: FileKind,
        name: &str,
        data: Vec<u8>,
        sync: WriteSync,
    ) -> Result<()> {
        // The body is the caller's buffer itself: retries share it.
        self.put(kind, name, Bytes::from(data), sync)
    }

    fn delete(&self, kind: FileKind, name: &str) -> Result<()> {
        let path = self.url(kind, name);
        let a = self.call(self.leased(Request::new(Method::DELETE, &path)))?;
        match a.status {
            204 | 200 | 404 => Ok(()),
            _ => Err(self.refused(&a, &format!("deleting {path}"))),
        }
    }

    fn sync_all(&self) -> Result<()> {
        self.sync(None)
    }

    fn sync_deletes(&self, kind: FileKind) -> Result<()> {
        self.sync(Some(kind))
    }

    fn modified(&self, kind: FileKind, name: &str) -> Result<Option<SystemTime>> {
        let a = self.call(Request::new(Method::HEAD, self.url(kind, name)))?;
        match a.status {
            200 => Ok(a
                .header("x-vouch-modified-unix-ns")
                .and_then(|v| v.parse::<u64>().ok())
                .map(|ns| SystemTime::UNIX_EPOCH + Duration::from_nanos(ns))),
            404 => Ok(None),
            _ => Err(self.refused(&a, &format!("HEAD {}", self.url(kind, name)))),
        }
    }

    fn remove_temporary(&self) -> Result<usize> {
        // The server's own prune removes its temporary files.
        Ok(0)
    }

    fn traffic(&self) -> Option<super::Traffic> {
        Some(self.client.traffic().totals())
    }
}

impl HttpBackend {
    /// `PUT` of `body` as the file `kind/name`.
    fn put(&self, kind: FileKind, name: &str, body: Bytes, sync: WriteSync) -> Result<()> {
        let path = self.url(kind, name);
        let mut r = Request::new(Method::PUT, &path).octets(body);
        if sync == WriteSync::Now {
            r = r.header("x-vouch-sync", "now");
        }
        let a = self.call(self.leased(r))?;
        if a.ok() {
            return Ok(());
        }
        Err(self.refused(&a, &format!("writing {path}")))
    }

    fn sync(&self, deletes: Option<FileKind>) -> Result<()> {
        let path = format!("{}/sync", self.base);
        let body = match deletes {
            Some(k) => serde_json::json!({ "deletes": segment(k) }),
            None => serde_json::json!({}),
        };
        let a = self.call(self.leased(Request::new(Method::POST, &path).json(&body)))?;
        if a.ok() {
            return Ok(());
        }
        Err(self.refused(&a, &format!("syncing {path}")))
    }

    /// Of `names` (files of `kind`), those the server lacks, asked in
    /// batches.
    pub fn missing(&self, kind: FileKind, names: &[String]) -> Result<Vec<String>> {
        let path = format!("{}/missing", self.base);
        let mut out = Vec::new();
        for batch in names.chunks(5_000) {
            let body = serde_json::json!({ "kind": segment(kind), "names": batch });
            let a = self.call(Request::new(Method::POST, &path).json(&body))?;
            if !a.ok() {
                return Err(self.refused(&a, &format!("asking {path}")));
            }
            #[derive(Deserialize)]
            struct Missing {
                missing: Vec<String>,
            }
            let m: Missing = serde_json::from_slice(&a.body)
                .map_err(|e| Error::corrupt(format!("the answer of {path}"), e))?;
            out.extend(m.missing);
        }
        Ok(out)
    }
}
