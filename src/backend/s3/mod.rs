//! A repository in an S3 bucket (AWS S3, Ceph's RADOS Gateway, MinIO,
//! Garage, Backblaze B2, Wasabi...): `s3:https://HOST[:PORT]/BUCKET/PREFIX`.
//!
//! - The layout below the prefix is a local repository's (`config`,
//!   `keys/`, `data/XX/`, `index/`, `snapshots/`, `locks/`).
//! - Requests go over the engine's blocking HTTP client (awc and rustls on
//!   ring, the service's own stack), signed with AWS Signature Version 4 in
//!   headers, each attempt afresh. Bodies are signed by their SHA-256, so
//!   the store refuses a body that was cut or changed on the way.
//! - Writes are atomic for readers, as S3 makes every PUT: a file appears
//!   whole or not at all. Files above a threshold go up as a multipart
//!   upload, which is invisible until completed; one that fails is
//!   aborted, and uploads a killed writer left behind are aborted by
//!   `prune` (`remove_temporary`).
//! - 500, 503 (SlowDown), 429, timeouts and resets are retried with
//!   exponential backoff and jitter.
//! - Object Lock: [`S3Backend::retain_until`] gives an object a
//!   compliance-mode retention (see `docs/format.md`).
//!
//! Addressing is path-style (`http://HOST/BUCKET/KEY`), which every store
//! above serves.

pub mod credentials;
pub mod sigv4;
mod xml;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use actix_web::http::Method;
use actix_web::web::Bytes;

use self::credentials::Credentials;
use super::{Backend, FileKind, Traffic, WriteSync, MAX_SMALL_FILE};
use crate::error::{Error, Result};
use crate::http_client::{Answer, Authorize, ClientOptions, HttpClient, Request};

/// Where a repository lives in S3.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Location {
    /// `http(s)://HOST[:PORT]`.
    pub endpoint: String,
    /// Bucket.
    pub bucket: String,
    /// Key prefix, without leading or trailing `/` (may be empty).
    pub prefix: String,
}

impl S3Location {
    /// Parses `s3:https://HOST[:PORT]/BUCKET[/PREFIX]`.
    pub fn parse(location: &str) -> Result<S3Location> {
        let bad = |why: &str| {
            Error::InvalidArgument(format!(
                "{location:?} is not an S3 location ({why}): expected s3:https://HOST[:PORT]/BUCKET[/PREFIX]"
            ))
        };
        let url = location
            .strip_prefix("s3:")
            .ok_or_else(|| bad("no s3: prefix"))?;
        let (endpoint, path) = crate::http_client::split_url(url).map_err(|e| bad(&e))?;
        let path = path.trim_matches('/');
        let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !valid_bucket {
            return Err(bad(
                "a bucket name is 3 to 63 lower-case letters, digits, '-' or '.'",
            ));
        }
        if prefix.split('/').any(|s| s == "." || s == "..") || prefix.contains("//") {
            return Err(bad("the prefix has an empty, '.' or '..' segment"));
        }
        Ok(S3Location {
            endpoint,
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
        })
    }
}

impl S3Location {
    /// The origin requests go to: the endpoint, or with virtual-hosted
    /// addressing the bucket's own host below it.
    pub fn origin(&self, virtual_hosted: bool) -> String {
        if !virtual_hosted {
            return self.endpoint.clone();
        }
        match self.endpoint.split_once("://") {
            Some((scheme, host)) => format!("{scheme}://{}.{host}", self.bucket),
            None => self.endpoint.clone(),
        }
    }
}

impl std::fmt::Display for S3Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3:{}/{}", self.endpoint, self.bucket)?;
        if !self.prefix.is_empty() {
            write!(f, "/{}", self.prefix)?;
        }
        Ok(())
    }
}

/// How the backend talks to the store.
#[derive(Clone, Debug)]
pub struct S3Options {
    /// Signing region (`AWS_REGION`, `AWS_DEFAULT_REGION`, else `us-east-1`,
    /// which RGW, MinIO and Garage accept by default).
    pub region: String,
    /// Files larger than this go up in parts.
    pub multipart_threshold: u64,
    /// Size of each part (S3's minimum is 5 MiB, but the last).
    pub part_size: u64,
    /// Keys per listing page (`None`: the store's default, 1000 on S3).
    pub page_size: Option<u32>,
    /// Virtual-hosted-style addressing (`https://BUCKET.HOST/KEY`) instead
    /// of path-style (`https://HOST/BUCKET/KEY`): `VOUCH_S3_VIRTUAL_HOSTED=1`
    /// or `s3_virtual_hosted = true`, for stores that refuse path-style.
    pub virtual_hosted: bool,
    /// Attempts, backoff and timeouts of each request.
    pub client: ClientOptions,
}

/// Statuses an S3 store answers when it is briefly unable to: 500
/// InternalError and 503 SlowDown are retryable by S3's own rules.
pub const S3_RETRY_STATUSES: &[u16] = &[429, 500, 502, 503, 504];

impl Default for S3Options {
    fn default() -> Self {
        let region = ["AWS_REGION", "AWS_DEFAULT_REGION"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|r| !r.trim().is_empty()))
            .unwrap_or_else(|| "us-east-1".into());
        // Time for one request to be answered (`VOUCH_S3_TIMEOUT`, a
        // humantime duration; 300 s by default).
        let timeout = std::env::var("VOUCH_S3_TIMEOUT")
            .ok()
            .and_then(|t| humantime::parse_duration(t.trim()).ok())
            .unwrap_or(Duration::from_secs(300));
        S3Options {
            region,
            multipart_threshold: 64 << 20,
            part_size: 16 << 20,
            page_size: None,
            virtual_hosted: std::env::var("VOUCH_S3_VIRTUAL_HOSTED").is_ok_and(|v| v == "1"),
            client: ClientOptions {
                retry_statuses: S3_RETRY_STATUSES,
                timeout,
                ..ClientOptions::default()
            },
        }
    }
}

/// Signs each attempt with SigV4.
struct Signer {
    credentials: Credentials,
    region: String,
    /// The `Host` header: the endpoint's authority.
    host: String,
}

impl Authorize for Signer {
    fn authorize(&self, request: &mut Request) {
        let payload = match request
            .headers
            .iter()
            .find(|(n, _)| *n == "x-amz-content-sha256")
        {
            Some((_, v)) => v.clone(),
            None => {
                let hash = match &request.body {
                    Some((body, _)) => sigv4::sha256_hex(body),
                    None => sigv4::EMPTY_SHA256.to_owned(),
                };
                request.headers.push(("x-amz-content-sha256", hash.clone()));
                hash
            }
        };
        let date = sigv4::amz_date(SystemTime::now());
        request.headers.push(("host", self.host.clone()));
        request.headers.push(("x-amz-date", date.clone()));
        if let Some(token) = &self.credentials.session_token {
            request
                .headers
                .push(("x-amz-security-token", token.as_str().to_owned()));
        }
        let (path, query) = request
            .path
            .split_once('?')
            .unwrap_or((request.path.as_str(), ""));
        let signed: Vec<(String, String)> = request
            .headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect();
        let auth = sigv4::authorization(
            &sigv4::SigningKey {
                access_key_id: &self.credentials.access_key_id,
                secret_access_key: &self.credentials.secret_access_key,
                region: &self.region,
            },
            &sigv4::ToSign {
                method: request.method.as_str(),
                path,
                query,
                headers: &signed,
                payload_sha256: &payload,
                amz_date: &date,
            },
        );
        request.headers.push(("authorization", auth));
    }
}

/// A repository in an S3 bucket.
pub struct S3Backend {
    client: Arc<HttpClient>,
    location: S3Location,
    options: S3Options,
    /// Whether the bucket has Object Lock, once asked.
    object_lock: std::sync::OnceLock<bool>,
}

/// What the store said about an object's retention.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRetention {
    /// `COMPLIANCE` or `GOVERNANCE`.
    pub mode: String,
    /// Until when (RFC 3339, as the store wrote it).
    pub until: String,
}

fn dir(kind: FileKind) -> &'static str {
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

/// Whether an error is the store's "no such object".
fn not_found(what: String) -> Error {
    Error::io(
        what,
        std::io::Error::new(std::io::ErrorKind::NotFound, "no such object"),
    )
}

impl S3Backend {
    /// A backend for `location`, signing with `credentials`.
    pub fn new(location: S3Location, credentials: Credentials, options: S3Options) -> Result<Self> {
        let origin = location.origin(options.virtual_hosted);
        let host = origin
            .split_once("://")
            .map(|(_, h)| h.to_owned())
            .unwrap_or_default();
        let signer = Signer {
            credentials,
            region: options.region.clone(),
            host,
        };
        let client = HttpClient::with_auth(&origin, Arc::new(signer), options.client.clone())
            .map_err(Error::InvalidArgument)?;
        Ok(S3Backend {
            client: Arc::new(client),
            location,
            options,
            object_lock: std::sync::OnceLock::new(),
        })
    }

    /// A backend for `location` with the credentials of the environment.
    pub fn from_environment(location: &str) -> Result<Self> {
        S3Backend::new(
            S3Location::parse(location)?,
            Credentials::from_environment()?,
            S3Options::default(),
        )
    }

    /// Where it is.
    pub fn s3_location(&self) -> &S3Location {
        &self.location
    }

    /// The key of a file.
    fn key(&self, kind: FileKind, name: &str) -> String {
        let rel = match kind {
            FileKind::Config | FileKind::Owner => dir(kind).to_owned(),
            FileKind::Pack => format!("data/{}/{name}", name.get(..2).unwrap_or("00")),
            _ => format!("{}/{name}", dir(kind)),
        };
        self.prefixed(&rel)
    }

    fn prefixed(&self, rel: &str) -> String {
        if self.location.prefix.is_empty() {
            rel.to_owned()
        } else {
            format!("{}/{rel}", self.location.prefix)
        }
    }

    /// `/BUCKET/KEY?QUERY`, encoded.
    fn path(&self, key: &str, query: &[(&str, &str)]) -> String {
        let mut path = if self.options.virtual_hosted {
            format!("/{}", sigv4::uri_encode(key, true))
        } else {
            let mut p = format!("/{}/{}", self.location.bucket, sigv4::uri_encode(key, true));
            if key.is_empty() {
                p.pop();
            }
            p
        };
        if !query.is_empty() {
            let pairs: Vec<(String, String)> = query
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            path.push('?');
            path.push_str(&sigv4::canonical_query(&pairs));
        }
        path
    }

    fn call(&self, request: Request) -> Result<Answer> {
        // The client's error names the request.
        self.client.call(&request).map_err(|e| {
            Error::io(
                "the S3 store did not answer",
                std::io::Error::new(std::io::ErrorKind::ConnectionAborted, e),
            )
        })
    }

    /// The error for an answer that is not what `what` needed.
    fn refused(&self, a: &Answer, what: &str) -> Error {
        let e: xml::S3Error = xml::parse(&a.body).unwrap_or_default();
        let detail = if e.code.is_empty() {
            format!("HTTP {}", a.status)
        } else {
            format!("HTTP {} {}: {}", a.status, e.code, e.message)
        };
        let io = |kind| Error::io(what.to_owned(), std::io::Error::new(kind, detail.clone()));
        match (a.status, e.code.as_str()) {
            (404, _) => io(std::io::ErrorKind::NotFound),
            (_, "QuotaExceeded") => Error::DiskFull(format!("the store's quota is reached ({what}): {detail}")),
            (401, _) | (_, "InvalidAccessKeyId") | (_, "SignatureDoesNotMatch") => {
                Error::InvalidArgument(format!(
                    "the store refused the credentials ({what}): {detail} (check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and the region, AWS_REGION)"
                ))
            }
            (_, "RequestTimeTooSkewed") => Error::InvalidArgument(format!(
                "the store says this machine's clock is wrong ({what}): {detail}; set the clock (NTP) and retry"
            )),
            (403, _) => Error::InvalidArgument(format!("the store forbids {what}: {detail}")),
            _ => io(std::io::ErrorKind::Other),
        }
    }

    fn get_ok(&self, request: Request, what: &str) -> Result<Answer> {
        let a = self.call(request)?;
        if a.ok() {
            Ok(a)
        } else {
            Err(self.refused(&a, what))
        }
    }

    /// A successful answer's XML document. An answer that does not parse
    /// is retried like a failed request: a chunked answer cut by a closed
    /// connection reaches here as a shorter, ill-formed document (seen with
    /// a proxy cutting listings).
    fn get_xml<T: for<'de> serde::Deserialize<'de>>(
        &self,
        request: Request,
        what: &str,
    ) -> Result<T> {
        let attempts = self.options.client.attempts.max(1);
        let mut pause = self.options.client.backoff;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let a = self.get_ok(request.clone(), what)?;
            match xml::parse::<T>(&a.body) {
                Ok(doc) => return Ok(doc),
                Err(e) if attempt >= attempts => {
                    return Err(Error::io(what.to_owned(), std::io::Error::other(e)))
                }
                Err(e) => {
                    tracing::debug!(attempt, what, error = %e, "retrying an answer that does not parse");
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(30));
                }
            }
        }
    }

    /// Whether the bucket exists (and these credentials may see it).
    pub fn bucket_exists(&self) -> Result<bool> {
        let a = self.call(Request::new(Method::HEAD, self.path("", &[])))?;
        match a.status {
            200 => Ok(true),
            404 => Ok(false),
            _ => Err(self.refused(&a, &format!("checking bucket {}", self.location.bucket))),
        }
    }

    /// Creates the bucket, with Object Lock enabled when asked (which also
    /// turns on versioning; it cannot be turned on later on every store).
    pub fn create_bucket(&self, object_lock: bool) -> Result<()> {
        let mut r = Request::new(Method::PUT, self.path("", &[]));
        if object_lock {
            r = r.header("x-amz-bucket-object-lock-enabled", "true");
        }
        if self.options.region != "us-east-1" {
            let body = format!(
                "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><LocationConstraint>{}</LocationConstraint></CreateBucketConfiguration>",
                xml::escape(&self.options.region)
            );
            r.body = Some((Bytes::from(body), "application/xml"));
        }
        let a = self.call(r)?;
        let e: xml::S3Error = xml::parse(&a.body).unwrap_or_default();
        if a.ok() || e.code == "BucketAlreadyOwnedByYou" {
            Ok(())
        } else {
            Err(self.refused(&a, &format!("creating bucket {}", self.location.bucket)))
        }
    }

    /// Whether the bucket has Object Lock enabled.
    pub fn object_lock_enabled(&self) -> Result<bool> {
        let a = self.call(Request::new(
            Method::GET,
            self.path("", &[("object-lock", "")]),
        ))?;
        match a.status {
            200 => Ok(xml::parse::<xml::ObjectLockConfiguration>(&a.body)
                .map(|c| c.object_lock_enabled == "Enabled")
                .unwrap_or(false)),
            // ObjectLockConfigurationNotFoundError (404), or a store
            // without the feature (400, 501).
            400 | 404 | 501 => Ok(false),
            _ => Err(self.refused(&a, "reading the bucket's Object Lock configuration")),
        }
    }

    /// Gives a file a compliance-mode retention until `until` (never
    /// shortened: the store refuses that, and so does this, by reading the
    /// current one first).
    pub fn retain_until(&self, kind: FileKind, name: &str, until: SystemTime) -> Result<()> {
        if let Some(current) = self.retention(kind, name)? {
            let held = humantime::parse_rfc3339(&current.until).ok();
            if current.mode == "COMPLIANCE"
                && held.is_some_and(|t| t + Duration::from_secs(1) > until)
            {
                return Ok(());
            }
        }
        let until = humantime::format_rfc3339_seconds(until).to_string();
        let body = xml::retention(&until);
        let md5 = {
            use base64::Engine;
            use md5::Digest;
            base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(body.as_bytes()))
        };
        let key = self.key(kind, name);
        let mut r = Request::new(Method::PUT, self.path(&key, &[("retention", "")]))
            .header("content-md5", md5);
        r.body = Some((Bytes::from(body), "application/xml"));
        self.get_ok(r, &format!("setting the retention of {key}"))?;
        Ok(())
    }

    /// A file's retention, if it has one.
    pub fn retention(&self, kind: FileKind, name: &str) -> Result<Option<ObjectRetention>> {
        let key = self.key(kind, name);
        let a = self.call(Request::new(
            Method::GET,
            self.path(&key, &[("retention", "")]),
        ))?;
        let e: xml::S3Error = xml::parse(&a.body).unwrap_or_default();
        if a.status == 404 && e.code != "NoSuchKey" {
            // NoSuchObjectLockConfiguration: no retention set.
            return Ok(None);
        }
        if !a.ok() {
            return Err(self.refused(&a, &format!("reading the retention of {key}")));
        }
        let r: xml::Retention =
            xml::parse(&a.body).map_err(|e| Error::io(key.clone(), std::io::Error::other(e)))?;
        Ok(Some(ObjectRetention {
            mode: r.mode,
            until: r.retain_until_date,
        }))
    }

    /// Deletes every version of a file (what an attacker with the keys
    /// would try on a versioned bucket; Object Lock refuses it for a
    /// retained version). For tests and `docs/operations.md`'s drill.
    pub fn delete_version(&self, kind: FileKind, name: &str, version: &str) -> Result<()> {
        let key = self.key(kind, name);
        self.get_ok(
            Request::new(Method::DELETE, self.path(&key, &[("versionId", version)])),
            &format!("deleting version {version} of {key}"),
        )?;
        Ok(())
    }

    /// The current version id of a file (versioned buckets).
    pub fn version_of(&self, kind: FileKind, name: &str) -> Result<Option<String>> {
        let key = self.key(kind, name);
        let a = self.get_ok(
            Request::new(Method::HEAD, self.path(&key, &[])),
            &format!("checking {key}"),
        )?;
        Ok(a.header("x-amz-version-id").map(str::to_owned))
    }

    /// Keys and sizes below `prefix` (paginated).
    fn list_prefix(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page_size = self.options.page_size.map(|n| n.to_string());
            let mut query = vec![("list-type", "2"), ("prefix", prefix)];
            if let Some(n) = &page_size {
                query.push(("max-keys", n.as_str()));
            }
            if let Some(t) = &token {
                query.push(("continuation-token", t.as_str()));
            }
            let page: xml::ListBucketResult = self.get_xml(
                Request::new(Method::GET, self.path("", &query)),
                &format!("listing {prefix}"),
            )?;
            out.extend(page.contents.into_iter().map(|o| (o.key, o.size)));
            match page.next_continuation_token {
                Some(t) if page.is_truncated && token.as_deref() != Some(t.as_str()) => {
                    token = Some(t)
                }
                _ => break,
            }
        }
        Ok(out)
    }

    fn put(&self, key: &str, body: Bytes) -> Result<()> {
        let hash = sigv4::sha256_hex(&body);
        let r = Request::new(Method::PUT, self.path(key, &[]))
            .header("x-amz-content-sha256", hash)
            .octets(body);
        self.get_ok(r, &format!("writing {key}"))?;
        Ok(())
    }

    fn put_multipart(&self, key: &str, data: &[u8]) -> Result<()> {
        let a = self.get_ok(
            Request::new(Method::POST, self.path(key, &[("uploads", "")])),
            &format!("starting the upload of {key}"),
        )?;
        let upload: xml::InitiateMultipartUploadResult = xml::parse(&a.body).map_err(|e| {
            Error::io(
                format!("starting the upload of {key}"),
                std::io::Error::other(e),
            )
        })?;
        let id = upload.upload_id;
        let result = (|| {
            let mut etags = Vec::new();
            for (i, part) in data
                .chunks(self.options.part_size.max(5 << 20) as usize)
                .enumerate()
            {
                let number = (i + 1).to_string();
                let body = Bytes::copy_from_slice(part);
                let hash = sigv4::sha256_hex(&body);
                let r = Request::new(
                    Method::PUT,
                    self.path(key, &[("partNumber", &number), ("uploadId", &id)]),
                )
                .header("x-amz-content-sha256", hash)
                .octets(body);
                let a = self.get_ok(r, &format!("writing part {number} of {key}"))?;
                let etag = a.header("etag").ok_or_else(|| {
                    Error::io(
                        format!("writing part {number} of {key}"),
                        std::io::Error::other("the store answered without an ETag"),
                    )
                })?;
                etags.push(etag.to_owned());
            }
            let mut r = Request::new(Method::POST, self.path(key, &[("uploadId", &id)]));
            r.body = Some((
                Bytes::from(xml::complete_multipart(&etags)),
                "application/xml",
            ));
            let a = self.call(r)?;
            if !a.ok() {
                // A completion whose answer was lost is retried, and the
                // retry finds the upload gone: the object tells.
                let e: xml::S3Error = xml::parse(&a.body).unwrap_or_default();
                if e.code == "NoSuchUpload" && self.has_size(key, data.len() as u64)? {
                    return Ok(());
                }
                return Err(self.refused(&a, &format!("completing the upload of {key}")));
            }
            // A completion can fail after a 200: the error is in the body.
            if let Ok(e) = xml::parse::<xml::S3Error>(&a.body) {
                if !e.code.is_empty() {
                    return Err(Error::io(
                        format!("completing the upload of {key}"),
                        std::io::Error::other(format!("{}: {}", e.code, e.message)),
                    ));
                }
            }
            Ok(())
        })();
        if result.is_err() {
            let _ = self.call(Request::new(
                Method::DELETE,
                self.path(key, &[("uploadId", &id)]),
            ));
        }
        result
    }

    /// Whether `key` exists with `size` bytes.
    fn has_size(&self, key: &str, size: u64) -> Result<bool> {
        let a = self.call(Request::new(Method::HEAD, self.path(key, &[])))?;
        Ok(a.ok()
            && a.header("content-length")
                .and_then(|l| l.parse::<u64>().ok())
                == Some(size))
    }

    /// Multipart uploads in progress below the prefix: (key, upload id).
    pub fn uploads_in_progress(&self) -> Result<Vec<(String, String)>> {
        let prefix = self.prefixed("");
        let mut out = Vec::new();
        let (mut key_marker, mut id_marker) = (String::new(), String::new());
        loop {
            let page_size = self.options.page_size.map(|n| n.to_string());
            let mut query = vec![("uploads", ""), ("prefix", prefix.as_str())];
            if let Some(n) = &page_size {
                query.push(("max-uploads", n.as_str()));
            }
            if !key_marker.is_empty() {
                query.push(("key-marker", key_marker.as_str()));
                query.push(("upload-id-marker", id_marker.as_str()));
            }
            let page: xml::ListMultipartUploadsResult = self.get_xml(
                Request::new(Method::GET, self.path("", &query)),
                "listing uploads in progress",
            )?;
            out.extend(page.upload.into_iter().map(|u| (u.key, u.upload_id)));
            match (
                page.is_truncated,
                page.next_key_marker,
                page.next_upload_id_marker,
            ) {
                (true, Some(k), Some(u))
                    if (k.as_str(), u.as_str()) != (key_marker.as_str(), id_marker.as_str()) =>
                {
                    key_marker = k;
                    id_marker = u;
                }
                _ => break,
            }
        }
        Ok(out)
    }

    /// HEAD of a file: its answer, or `None` when it does not exist.
    fn head(&self, kind: FileKind, name: &str) -> Result<Option<Answer>> {
        let key = self.key(kind, name);
        let a = self.call(Request::new(Method::HEAD, self.path(&key, &[])))?;
        match a.status {
            200 => Ok(Some(a)),
            404 => Ok(None),
            _ => Err(self.refused(&a, &format!("checking {key}"))),
        }
    }
}

impl Backend for S3Backend {
    fn location(&self) -> String {
        self.location.to_string()
    }

    fn create(&self) -> Result<()> {
        if !self.bucket_exists()? {
            self.create_bucket(false)?;
        }
        let prefix = self.prefixed("");
        let page: xml::ListBucketResult = self.get_xml(
            Request::new(
                Method::GET,
                self.path(
                    "",
                    &[("list-type", "2"), ("prefix", &prefix), ("max-keys", "1")],
                ),
            ),
            &format!("listing {prefix}"),
        )?;
        if !page.contents.is_empty() {
            return Err(Error::NotEmpty(self.location.to_string().into()));
        }
        Ok(())
    }

    fn exists(&self, kind: FileKind, name: &str) -> Result<bool> {
        Ok(self.head(kind, name)?.is_some())
    }

    fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
        if matches!(kind, FileKind::Config | FileKind::Owner) {
            let size = self
                .head(kind, "")?
                .and_then(|a| a.header("content-length").and_then(|l| l.parse().ok()));
            return Ok(size
                .map(|s| (dir(kind).to_owned(), s))
                .into_iter()
                .collect());
        }
        let prefix = self.prefixed(&format!("{}/", dir(kind)));
        let mut out: Vec<(String, u64)> = self
            .list_prefix(&prefix)?
            .into_iter()
            .filter_map(|(key, size)| {
                let rel = key.strip_prefix(&prefix)?;
                let name = match kind {
                    FileKind::Pack => rel.split_once('/').map(|(_, n)| n)?,
                    _ => rel,
                };
                (!name.is_empty() && !name.contains('/')).then(|| (name.to_owned(), size))
            })
            .collect();
        out.sort();
        Ok(out)
    }

    fn read(&self, kind: FileKind, name: &str) -> Result<Vec<u8>> {
        let key = self.key(kind, name);
        let small = matches!(
            kind,
            FileKind::Config | FileKind::Key | FileKind::Lock | FileKind::Owner
        );
        let mut r = Request::new(Method::GET, self.path(&key, &[]));
        if small {
            r = r.header("range", format!("bytes=0-{MAX_SMALL_FILE}"));
        }
        let a = self.call(r)?;
        // A range of an empty object is unsatisfiable: the object is empty.
        if small && a.status == 416 {
            return Ok(Vec::new());
        }
        if !a.ok() {
            return Err(self.refused(&a, &format!("reading {key}")));
        }
        if small && a.body.len() as u64 > MAX_SMALL_FILE {
            return Err(Error::corrupt(
                key,
                format!("larger than {MAX_SMALL_FILE} bytes; this file is small JSON"),
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
        let key = self.key(kind, name);
        if length == 0 {
            return if self.exists(kind, name)? {
                Ok(Vec::new())
            } else {
                Err(not_found(format!("reading {key}")))
            };
        }
        let end = offset + length as u64 - 1;
        let a = self.call(
            Request::new(Method::GET, self.path(&key, &[]))
                .header("range", format!("bytes={offset}-{end}")),
        )?;
        let what = format!("reading {length} bytes at {offset} of {key}");
        if a.status == 416 {
            return Err(Error::io(
                what,
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the file is shorter"),
            ));
        }
        if !a.ok() {
            return Err(self.refused(&a, &what));
        }
        // A store that ignored the range answers 200 with the whole file.
        let body = if a.status == 200 {
            a.body
                .get(offset as usize..)
                .map(|b| &b[..length.min(b.len())])
                .unwrap_or_default()
                .to_vec()
        } else {
            a.body.to_vec()
        };
        if body.len() != length {
            return Err(Error::io(
                what,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("got {} bytes: the file is shorter", body.len()),
                ),
            ));
        }
        Ok(body)
    }

    fn write(&self, kind: FileKind, name: &str, data: &[u8], _sync: WriteSync) -> Result<()> {
        // A PUT is durable when the store answers: nothing to defer.
        let key = self.key(kind, name);
        if data.len() as u64 > self.options.multipart_threshold {
            self.put_multipart(&key, data)
        } else {
            self.put(&key, Bytes::copy_from_slice(data))
        }
    }

    fn write_owned(
        &self,
        kind: FileKind,
        name: &str,
        data: Vec<u8>,
        _sync: WriteSync,
    ) -> Result<()> {
        let key = self.key(kind, name);
        if data.len() as u64 > self.options.multipart_threshold {
            self.put_multipart(&key, &data)
        } else {
            // The body is the caller's buffer itself (a pack: 16 MiB).
            self.put(&key, Bytes::from(data))
        }
    }

    fn delete(&self, kind: FileKind, name: &str) -> Result<()> {
        let key = self.key(kind, name);
        let a = self.call(Request::new(Method::DELETE, self.path(&key, &[])))?;
        if a.ok() || a.status == 404 {
            Ok(())
        } else {
            Err(self.refused(&a, &format!("deleting {key}")))
        }
    }

    fn sync_all(&self) -> Result<()> {
        Ok(())
    }

    fn sync_deletes(&self, _kind: FileKind) -> Result<()> {
        Ok(())
    }

    fn modified(&self, kind: FileKind, name: &str) -> Result<Option<SystemTime>> {
        Ok(self.head(kind, name)?.and_then(|a| {
            a.header("last-modified")
                .and_then(|m| httpdate::parse_http_date(m).ok())
        }))
    }

    fn remove_temporary(&self) -> Result<usize> {
        let uploads = self.uploads_in_progress()?;
        for (key, id) in &uploads {
            let a = self.call(Request::new(
                Method::DELETE,
                self.path(key, &[("uploadId", id)]),
            ))?;
            if !a.ok() && a.status != 404 {
                return Err(self.refused(&a, &format!("aborting the upload of {key}")));
            }
        }
        Ok(uploads.len())
    }

    fn traffic(&self) -> Option<Traffic> {
        Some(self.client.traffic().totals())
    }

    fn retention_support(&self) -> Result<super::Retained> {
        let enabled = match self.object_lock.get() {
            Some(&e) => e,
            None => {
                let e = self.object_lock_enabled()?;
                *self.object_lock.get_or_init(|| e)
            }
        };
        Ok(if enabled {
            super::Retained::ByStorage
        } else {
            super::Retained::ByVouch
        })
    }

    fn retain_until(&self, kind: FileKind, name: &str, until: SystemTime) -> Result<()> {
        S3Backend::retain_until(self, kind, name, until)
    }
}

#[cfg(test)]
mod tests;
