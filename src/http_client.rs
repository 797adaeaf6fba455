//! A blocking HTTP client for the engine's threads (the repository
//! protocol's backend, the agent): calls are handed to one transport
//! thread that runs `awc` on its own actix system, with kept-alive
//! connections and TLS pinned to the server's certificate (or Mozilla's
//! roots). Transient failures (connection refused or reset, timeouts, 502,
//! 503, 504, 429) are retried with backoff; every call and the bytes it
//! moved are counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::Method;
use actix_web::web::Bytes;
use tokio::sync::mpsc;
use zeroize::Zeroizing;

use crate::tls_pin::{pinned_config, public_roots_config, Pin};

/// Largest answer body read (a pack is at most 1 GiB; twice that).
const MAX_ANSWER: usize = 2 << 30;

/// How a client connects.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Trust exactly this certificate (else Mozilla's roots).
    pub pin: Option<Pin>,
    /// Time for one attempt, from sending to the end of the answer's head.
    pub timeout: Duration,
    /// Attempts of a call that fails transiently.
    pub attempts: u32,
    /// First pause between attempts (doubled each time, at most 30 s,
    /// each pause drawn between half and all of that: jitter, so clients
    /// failed together do not retry together).
    pub backoff: Duration,
    /// Answer statuses retried like transport failures.
    pub retry_statuses: &'static [u16],
}

/// The statuses a `vouch serve` answers when it is briefly unable to.
pub const SERVICE_RETRY_STATUSES: &[u16] = &[429, 502, 503, 504];

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            pin: None,
            timeout: Duration::from_secs(300),
            attempts: 6,
            backoff: Duration::from_millis(500),
            retry_statuses: SERVICE_RETRY_STATUSES,
        }
    }
}

/// One request.
#[derive(Clone, Debug)]
pub struct Request {
    /// Method.
    pub method: Method,
    /// Path and query below the client's origin (`/repo/v1/...`).
    pub path: String,
    /// Extra headers (the token is added by the client).
    pub headers: Vec<(&'static str, String)>,
    /// Body, with its content type.
    pub body: Option<(Bytes, &'static str)>,
}

impl Request {
    /// A request without body or extra headers.
    pub fn new(method: Method, path: impl Into<String>) -> Self {
        Request {
            method,
            path: path.into(),
            headers: Vec::new(),
            body: None,
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// Sets a JSON body.
    pub fn json(mut self, value: &serde_json::Value) -> Self {
        self.body = Some((Bytes::from(value.to_string()), "application/json"));
        self
    }

    /// Sets a binary body.
    pub fn octets(mut self, bytes: Bytes) -> Self {
        self.body = Some((bytes, "application/octet-stream"));
        self
    }
}

/// An answer.
#[derive(Clone, Debug)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// Headers this crate reads, lower-case names.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Bytes,
}

impl Answer {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The server's message of an error answer (`{"message": ...}`), or
    /// the body as text.
    pub fn message(&self) -> String {
        serde_json::from_slice::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
            .unwrap_or_else(|| {
                String::from_utf8_lossy(&self.body)
                    .chars()
                    .take(500)
                    .collect()
            })
    }

    /// Whether the status is 2xx.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Bytes and calls a client moved.
#[derive(Debug, Default)]
pub struct Traffic {
    /// Request bodies sent, in bytes.
    pub sent: AtomicU64,
    /// Answer bodies received, in bytes.
    pub received: AtomicU64,
    /// Calls made (retries included).
    pub calls: AtomicU64,
}

impl Traffic {
    /// The counts so far.
    pub fn totals(&self) -> crate::backend::Traffic {
        use std::sync::atomic::Ordering::Relaxed;
        crate::backend::Traffic {
            sent: self.sent.load(Relaxed),
            received: self.received.load(Relaxed),
            requests: self.calls.load(Relaxed),
        }
    }
}

struct Call {
    request: Request,
    reply: std::sync::mpsc::SyncSender<Result<Answer, String>>,
}

/// How a client proves who it is: called on every attempt (a retry is
/// signed afresh), after the request's own headers are set.
pub trait Authorize: Send + Sync {
    /// Adds the credentials to `request`.
    fn authorize(&self, request: &mut Request);
}

/// A bearer token (the service's API and repository protocol).
struct Bearer(Zeroizing<String>);

impl Authorize for Bearer {
    fn authorize(&self, request: &mut Request) {
        request
            .headers
            .push(("authorization", format!("Bearer {}", self.0.as_str())));
    }
}

/// The client. Cheap to share (`Arc`); dropping the last handle ends its
/// transport thread.
pub struct HttpClient {
    origin: String,
    auth: Arc<dyn Authorize>,
    options: ClientOptions,
    tx: mpsc::UnboundedSender<Call>,
    traffic: Arc<Traffic>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("origin", &self.origin)
            .field("auth", &"<redacted>")
            .finish()
    }
}

/// Splits `https://host:port/rest` into the origin and the rest.
pub fn split_url(url: &str) -> Result<(String, String), String> {
    let scheme_len = if url.starts_with("https://") {
        8
    } else if url.starts_with("http://") {
        7
    } else {
        return Err(format!("{url:?} is not an http:// or https:// URL"));
    };
    let rest = &url[scheme_len..];
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if host.is_empty() || host.contains('@') {
        return Err(format!(
            "{url:?} has no host (and credentials never go in a URL: use VOUCH_TOKEN)"
        ));
    }
    Ok((
        format!("{}{host}", &url[..scheme_len]),
        path.trim_end_matches('/').to_owned(),
    ))
}

impl HttpClient {
    /// A client of `origin` (`https://host:port`) presenting `token`.
    pub fn new(
        origin: &str,
        token: Zeroizing<String>,
        options: ClientOptions,
    ) -> Result<Self, String> {
        Self::with_auth(origin, Arc::new(Bearer(token)), options)
    }

    /// A client of `origin` whose requests `auth` authorizes.
    pub fn with_auth(
        origin: &str,
        auth: Arc<dyn Authorize>,
        options: ClientOptions,
    ) -> Result<Self, String> {
        let (origin, _) = split_url(origin)?;
        let tls = if origin.starts_with("https://") {
            Some(Arc::new(match &options.pin {
                Some(pin) => pinned_config(pin.clone())?,
                None => public_roots_config()?,
            }))
        } else {
            None
        };
        let (tx, rx) = mpsc::unbounded_channel::<Call>();
        let timeout = options.timeout;
        let traffic = Arc::new(Traffic::default());
        let t = traffic.clone();
        let base = origin.clone();
        std::thread::Builder::new()
            .name("vouch-http".into())
            .spawn(move || transport(base, tls, timeout, rx, t))
            .map_err(|e| format!("cannot start the HTTP thread: {e}"))?;
        Ok(HttpClient {
            origin,
            auth,
            options,
            tx,
            traffic,
        })
    }

    /// The origin (`https://host:port`).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// What this client moved so far.
    pub fn traffic(&self) -> &Traffic {
        &self.traffic
    }

    /// One attempt; `Err` for a transport failure (no answer).
    fn attempt(&self, request: &Request) -> Result<Answer, String> {
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        let mut request = request.clone();
        self.auth.authorize(&mut request);
        self.tx
            .send(Call { request, reply })
            .map_err(|_| "the HTTP thread stopped".to_string())?;
        answer
            .recv()
            .map_err(|_| "the HTTP thread stopped".to_string())?
    }

    /// Sends `request`, retrying transient failures; the answer of the last
    /// attempt (any status), or the last transport error.
    pub fn call(&self, request: &Request) -> Result<Answer, String> {
        let mut pause = self.options.backoff;
        let mut last = String::new();
        for attempt in 1..=self.options.attempts.max(1) {
            let started = std::time::Instant::now();
            let result = self.attempt(request);
            if let Ok(a) = &result {
                tracing::trace!(
                    method = %request.method,
                    path = %request.path,
                    status = a.status,
                    bytes = a.body.len(),
                    ms = started.elapsed().as_millis() as u64,
                    "request"
                );
            }
            match result {
                Ok(a) if self.options.retry_statuses.contains(&a.status) => {
                    last = format!("{} {}: {}", a.status, request.path, a.message());
                    if attempt == self.options.attempts.max(1) {
                        return Ok(a);
                    }
                }
                Ok(a) => return Ok(a),
                Err(e) => last = e,
            }
            tracing::debug!(attempt, path = %request.path, error = %last, "retrying");
            std::thread::sleep(jittered(pause));
            pause = (pause * 2).min(Duration::from_secs(30));
        }
        Err(format!(
            "{} {}{}: {last} (after {} attempts)",
            request.method, self.origin, request.path, self.options.attempts
        ))
    }
}

/// A pause between half and all of `pause`.
fn jittered(pause: Duration) -> Duration {
    let r = u64::from_le_bytes(crate::crypto::random_array::<8>());
    let millis = pause.as_millis() as u64;
    Duration::from_millis(millis / 2 + r % (millis / 2 + 1))
}

/// The transport thread: one actix system, one `awc` client, each call a
/// task on it.
fn transport(
    origin: String,
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Duration,
    mut rx: mpsc::UnboundedReceiver<Call>,
    traffic: Arc<Traffic>,
) {
    let system = actix_web::rt::System::new();
    system.block_on(async move {
        let mut connector = awc::Connector::new()
            .limit(64)
            .timeout(Duration::from_secs(10));
        if let Some(tls) = tls {
            connector = connector.rustls_0_23(tls);
        }
        let client = awc::Client::builder()
            .timeout(timeout)
            .disable_redirects()
            .connector(connector)
            .finish();
        while let Some(call) = rx.recv().await {
            let client = client.clone();
            let origin = origin.clone();
            let traffic = traffic.clone();
            actix_web::rt::spawn(async move {
                let result = perform(&client, &origin, call.request, &traffic).await;
                let _ = call.reply.send(result);
            });
        }
    });
}

async fn perform(
    client: &awc::Client,
    origin: &str,
    request: Request,
    traffic: &Traffic,
) -> Result<Answer, String> {
    traffic.calls.fetch_add(1, Ordering::Relaxed);
    let url = format!("{origin}{}", request.path);
    let mut req = client.request(request.method.clone(), &url);
    for (name, value) in &request.headers {
        req = req.insert_header((*name, value.as_str()));
    }
    let sent = match request.body {
        Some((bytes, content_type)) => {
            traffic
                .sent
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            req.insert_header(("content-type", content_type))
                .send_body(bytes)
                .await
        }
        None => req.send().await,
    };
    let mut res = sent.map_err(|e| e.to_string())?;
    let headers: Vec<(String, String)> = res
        .headers()
        .iter()
        .filter(|(n, _)| {
            matches!(
                n.as_str(),
                "content-length"
                    | "content-range"
                    | "etag"
                    | "last-modified"
                    | "x-amz-version-id"
                    | "x-vouch-modified-unix-ns"
                    | "x-vouch-size"
                    | "retry-after"
            )
        })
        .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let body = if request.method == Method::HEAD {
        Bytes::new()
    } else {
        res.body()
            .limit(MAX_ANSWER)
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
    };
    traffic
        .received
        .fetch_add(body.len() as u64, Ordering::Relaxed);
    // An answer cut short by a closed connection is a failed attempt,
    // never a shorter file (seen with a proxy cutting answers: the body
    // ended at the close and was taken whole).
    let declared = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<u64>().ok());
    if let Some(expected) = declared.filter(|_| request.method != Method::HEAD) {
        if body.len() as u64 != expected {
            return Err(format!(
                "the answer ended after {} of its {expected} bytes",
                body.len()
            ));
        }
    }
    Ok(Answer {
        status: res.status().as_u16(),
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_origin_and_path_and_refuse_credentials() {
        assert_eq!(
            split_url("https://h:8443/repo/v1/default/").unwrap(),
            ("https://h:8443".into(), "/repo/v1/default".into())
        );
        assert_eq!(
            split_url("http://127.0.0.1:1").unwrap(),
            ("http://127.0.0.1:1".into(), String::new())
        );
        assert!(split_url("https://user:secret@h/repo/v1/x").is_err());
        assert!(split_url("ftp://h/x").is_err());
        assert!(split_url("https:///x").is_err());
    }
}
