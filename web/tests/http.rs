//! The HTTP surface over a real server on 127.0.0.1:0 and a real client.

use std::net::{SocketAddr, TcpListener};

use actix_web::dev::ServerHandle;
use actix_web::http::header;
use actix_web::http::StatusCode;
use serde_json::{json, Value};
use vouch_web::{serve, AppState, Role, TokenHash, TokenStore, VERSION};

const ADMIN_TOKEN: &str = "vouch-test-admin-token-0123456789abcdef";
const VIEWER_TOKEN: &str = "vouch-test-viewer-token-fedcba9876543210";

/// A running server; stopped (gracefully) by [`Server::stop`].
struct Server {
    addr: SocketAddr,
    handle: ServerHandle,
    client: awc::Client,
}

impl Server {
    fn start() -> Server {
        let mut tokens = TokenStore::new();
        tokens.insert(TokenHash::of(ADMIN_TOKEN), "admin", Role::Admin);
        tokens.insert(TokenHash::of(VIEWER_TOKEN), "console", Role::Viewer);
        let state = AppState::new(tokens).unwrap_or_else(|e| panic!("state: {e}"));
        let listener =
            TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind loopback: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("local addr: {e}"));
        let server = serve(listener, state, None).unwrap_or_else(|e| panic!("serve: {e}"));
        let handle = server.handle();
        actix_web::rt::spawn(server);
        Server {
            addr,
            handle,
            client: awc::Client::default(),
        }
    }

    /// GET `path` with an optional raw `Authorization` value.
    async fn get(&self, path: &str, authorization: Option<&str>) -> (StatusCode, String, String) {
        let mut req = self.client.get(format!("http://{}{path}", self.addr));
        if let Some(a) = authorization {
            req = req.insert_header((header::AUTHORIZATION, a));
        }
        let mut res = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let content_type = res
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = res
            .body()
            .await
            .unwrap_or_else(|e| panic!("GET {path} body: {e}"));
        let body = String::from_utf8(body.to_vec()).unwrap_or_else(|e| panic!("utf-8: {e}"));
        (res.status(), content_type, body)
    }

    async fn stop(self) {
        self.handle.stop(true).await;
    }
}

fn parse(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

#[actix_web::test]
async fn healthz_is_open_and_reports_the_version() {
    let s = Server::start();
    let (status, ct, body) = s.get("/healthz", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ct, "application/json");
    assert_eq!(parse(&body), json!({"status": "ok", "version": VERSION}));
    s.stop().await;
}

#[actix_web::test]
async fn api_without_a_valid_token_is_401_with_a_json_error() {
    let s = Server::start();
    let cases: [(Option<&str>, &str); 7] = [
        (None, "missing bearer token"),
        (
            Some("Bearer wrong-token"),
            "unknown, expired or revoked token",
        ),
        (
            Some(&format!("Basic {ADMIN_TOKEN}")),
            "expected a Bearer token",
        ),
        (Some("Bearer "), "missing bearer token"),
        (Some(ADMIN_TOKEN), "expected a Bearer token"),
        (Some("Bearer"), "missing bearer token"),
        (
            Some(&format!("Bearer {ADMIN_TOKEN}x")),
            "unknown, expired or revoked token",
        ),
    ];
    for (auth, message) in cases {
        let mut req = s.client.get(format!("http://{}/api/v1/whoami", s.addr));
        if let Some(a) = auth {
            req = req.insert_header((header::AUTHORIZATION, a));
        }
        let mut res = req.send().await.unwrap_or_else(|e| panic!("send: {e}"));
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED, "{auth:?}");
        let challenge = res
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        assert_eq!(challenge.as_deref(), Some("Bearer realm=\"vouch\""));
        let body = res.body().await.unwrap_or_else(|e| panic!("body: {e}"));
        let body: Value = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("not JSON: {e}"));
        assert_eq!(
            body,
            json!({"code": "unauthorized", "message": message}),
            "{auth:?}"
        );
    }
    s.stop().await;
}

#[actix_web::test]
async fn non_ascii_authorization_is_401_malformed() {
    let s = Server::start();
    let value = header::HeaderValue::from_bytes(b"Bearer caf\xe9")
        .unwrap_or_else(|e| panic!("header value: {e}"));
    let mut res = s
        .client
        .get(format!("http://{}/api/v1/whoami", s.addr))
        .insert_header((header::AUTHORIZATION, value))
        .send()
        .await
        .unwrap_or_else(|e| panic!("send: {e}"));
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    let body = res.body().await.unwrap_or_else(|e| panic!("body: {e}"));
    let body: Value = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("not JSON: {e}"));
    assert_eq!(
        body,
        json!({"code": "unauthorized", "message": "malformed Authorization header"})
    );
    s.stop().await;
}

#[actix_web::test]
async fn whoami_answers_the_token_holder() {
    let s = Server::start();
    let (status, _, body) = s
        .get("/api/v1/whoami", Some(&format!("Bearer {ADMIN_TOKEN}")))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(parse(&body), json!({"name": "admin", "role": "admin"}));
    // The scheme is case-insensitive.
    let (status, _, body) = s
        .get("/api/v1/whoami", Some(&format!("bearer {VIEWER_TOKEN}")))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(parse(&body), json!({"name": "console", "role": "viewer"}));
    s.stop().await;
}

#[actix_web::test]
async fn unknown_api_routes_do_not_leak_without_a_token() {
    let s = Server::start();
    let (status, _, _) = s.get("/api/v1/no-such-route", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let (status, _, _) = s.get("/api/v1/no-such-route", Some(&auth)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    s.stop().await;
}

#[actix_web::test]
async fn metrics_need_a_token_and_count_requests_by_route_and_status() {
    let s = Server::start();
    let auth = format!("Bearer {ADMIN_TOKEN}");
    s.get("/healthz", None).await;
    s.get("/healthz", None).await;
    s.get("/api/v1/whoami", Some(&auth)).await;
    s.get("/api/v1/whoami", None).await;
    s.get("/nowhere", None).await;
    let (status, _, _) = s.get("/metrics", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let (status, ct, text) = s.get("/metrics", Some(&auth)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(ct.starts_with("text/plain"), "{ct}");
    assert!(ct.contains("version=0.0.4"), "{ct}");
    for line in [
        format!("vouch_build_info{{version=\"{VERSION}\"}} 1"),
        "vouch_http_requests_total{route=\"/healthz\",status=\"200\"} 2".to_owned(),
        "vouch_http_requests_total{route=\"/api/v1/whoami\",status=\"200\"} 1".to_owned(),
        "vouch_http_requests_total{route=\"/api/v1/whoami\",status=\"401\"} 1".to_owned(),
        "vouch_http_requests_total{route=\"/metrics\",status=\"401\"} 1".to_owned(),
        "vouch_http_requests_total{route=\"unmatched\",status=\"404\"} 1".to_owned(),
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in:\n{text}"
        );
    }
    // This scrape itself is counted after it is answered.
    let (_, _, text) = s.get("/metrics", Some(&auth)).await;
    assert!(text
        .lines()
        .any(|l| l == "vouch_http_requests_total{route=\"/metrics\",status=\"200\"} 1"));
    s.stop().await;
}

#[actix_web::test]
async fn without_a_service_the_api_is_503_and_readyz_says_starting() {
    let s = Server::start();
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let (status, _, body) = s.get("/api/v1/plans", Some(&auth)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(parse(&body)["code"], "unavailable");
    let (status, _, body) = s.get("/readyz", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(parse(&body), json!({"status": "starting"}));
    s.stop().await;
}

/// Regression (schemathesis ST103): without a service every API operation
/// answers 503 `unavailable` or another status it declares; each answer is
/// declared in the document.
#[actix_web::test]
async fn without_a_service_every_answer_is_declared() {
    let s = Server::start();
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let doc: Value = parse(&vouch_web::openapi_json_text());
    let mut unavailable = 0;
    for (template, ops) in doc["paths"].as_object().cloned().unwrap_or_default() {
        let path = template.replace("{id}", &"0".repeat(64));
        for (method, op) in ops.as_object().cloned().unwrap_or_default() {
            if method != "get" || template == "/api/v1/events/stream" {
                continue;
            }
            let (status, _, body) = s.get(&path, Some(&auth)).await;
            assert!(
                op["responses"]
                    .as_object()
                    .is_some_and(|r| r.contains_key(status.as_str())),
                "GET {path} answered {status}, not declared: {body}"
            );
            if status == StatusCode::SERVICE_UNAVAILABLE && path.starts_with("/api/") {
                assert_eq!(parse(&body)["code"], "unavailable", "{path}");
                unavailable += 1;
            }
        }
    }
    assert!(unavailable >= 10, "{unavailable}");
    s.stop().await;
}
