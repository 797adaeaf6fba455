//! The API over a real service: a real event log and sled store in a
//! temporary directory, the real actors, a real HTTP server on
//! 127.0.0.1:0 and a real client. Only the workers are a test double
//! ([`FakeEngineWorker`]): the engine lives in the root package, whose
//! end-to-end tests run the real binary.

use std::net::{SocketAddr, TcpListener};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix_web::dev::ServerHandle;
use actix_web::http::{header, Method, StatusCode};
use serde_json::{json, Value};
use vouch_actors::service::{
    start, JobCommand, JobFailure, JobOutput, RunJob, ServiceConfig, ServiceHandle, Workers,
};
use vouch_events::{
    BackupCommitted, BackupSummary, EventLog, LogOptions, RestoreEvidence, RestoreTestPassed,
    SharedLog, SledStore, SnapshotId, VerificationFailed, VerificationPassed, VerifyDepth,
};
use vouch_web::{openapi_json_text, serve, AppState, Role, TokenHash, TokenStore};

const ADMIN: &str = "vouch_test_admin";
const OPERATOR: &str = "vouch_test_operator";
const VIEWER: &str = "vouch_test_viewer";
const AGENT: &str = "vouch_test_agent_web1";
const METRICS: &str = "vouch_test_metrics";
const RESTORE: &str = "vouch_test_restore";

/// TEST DOUBLE of the engine's workers: answers every job at once with
/// real event values (a made-up snapshot id derived from the job id).
struct FakeEngineWorker;

impl Actor for FakeEngineWorker {
    type Context = Context<Self>;
}

impl Handler<RunJob> for FakeEngineWorker {
    type Result = Result<JobOutput, JobFailure>;

    fn handle(&mut self, msg: RunJob, _: &mut Self::Context) -> Self::Result {
        let now = vouch_events::Clock::now_unix_ns(&vouch_events::SystemClock);
        let events = match msg.command {
            JobCommand::Backup {
                plan, definition, ..
            } => vec![BackupCommitted {
                job: Some(msg.job.clone()),
                plan: Some(plan),
                repository: definition.repository,
                snapshot: SnapshotId(*blake3::hash(msg.job.as_str().as_bytes()).as_bytes()),
                snapshot_time_unix_ns: now,
                summary: BackupSummary {
                    files: 3,
                    bytes: 3000,
                    added_bytes: 1000,
                    stored_bytes: 600,
                    duration_ms: 5,
                    total_bytes: None,
                    warnings: None,
                },
                changes: None,
            }
            .into()],
            JobCommand::Verify { point, depth, .. } => vec![VerificationPassed {
                point,
                job: Some(msg.job.clone()),
                depth,
                bytes_read: 600,
                blobs_checked: 3,
            }
            .into()],
            JobCommand::RestoreTest { point, .. } => vec![RestoreTestPassed {
                point,
                job: Some(msg.job.clone()),
                evidence: RestoreEvidence {
                    restored: vec!["/".into()],
                    files: 3,
                    bytes: 3000,
                    digests_compared: 3,
                    digests_matched: 3,
                    duration_ms: 2,
                    location: "test:/sandbox".into(),
                    files_in_point: Some(3),
                    bytes_in_point: Some(3000),
                    complete: true,
                    guest: None,
                },
            }
            .into()],
            JobCommand::Copy {
                plan,
                point,
                repository,
                ..
            } => vec![vouch_events::CopyCommitted {
                job: Some(msg.job.clone()),
                plan: Some(plan),
                source: point,
                repository,
                snapshot: SnapshotId(*blake3::hash(msg.job.as_str().as_bytes()).as_bytes()),
                snapshot_time_unix_ns: now,
                summary: BackupSummary {
                    files: 3,
                    bytes: 3000,
                    added_bytes: 0,
                    stored_bytes: 0,
                    duration_ms: 5,
                    total_bytes: None,
                    warnings: None,
                },
                off_host: true,
                locks_enforced_by: vouch_events::LockEnforcement::Storage,
                locked_until_unix_ns: Some(now + 86_400_000_000_000),
            }
            .into()],
            JobCommand::Retention { .. }
            | JobCommand::ReadBack { .. }
            | JobCommand::Reconcile { .. }
            | JobCommand::Prune { .. }
            | JobCommand::Restore { .. } => Vec::new(),
        };
        let _ = VerifyDepth::Structure;
        Ok(JobOutput { events })
    }
}

struct Server {
    addr: SocketAddr,
    handle: ServerHandle,
    service: ServiceHandle,
    log: Arc<SharedLog>,
    client: awc::Client,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start() -> Server {
        Server::start_with(None, ServiceConfig::default()).await
    }

    /// A server whose engine side (repositories, file browser) is `browse`,
    /// its service configured by `config`.
    async fn start_with(
        browse: Option<Arc<dyn vouch_web::Browse>>,
        config: ServiceConfig,
    ) -> Server {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let log_dir = dir.path().join("log");
        let log = EventLog::open(
            &log_dir,
            LogOptions::default(),
            Arc::new(vouch_events::SystemClock),
        )
        .unwrap_or_else(|e| panic!("log: {e}"));
        let store =
            SledStore::open(dir.path().join("read")).unwrap_or_else(|e| panic!("store: {e}"));
        let worker = FakeEngineWorker.start();
        let workers = Workers {
            backup: worker.clone().recipient(),
            verify: worker.clone().recipient(),
            restore_test: worker.clone().recipient(),
            retention: worker.recipient(),
        };
        let log = Arc::new(SharedLog::new(log));
        let service = start(
            log.clone(),
            store,
            workers,
            Arc::new(vouch_actors::SystemClock),
            ServiceConfig {
                version: "test".into(),
                ..config
            },
        )
        .await
        .unwrap_or_else(|e| panic!("service: {e}"));
        let mut tokens = TokenStore::new();
        tokens.insert(TokenHash::of(ADMIN), "root", Role::Admin);
        tokens.insert(TokenHash::of(OPERATOR), "ops", Role::Operator);
        tokens.insert(TokenHash::of(VIEWER), "dash", Role::Viewer);
        tokens.insert(TokenHash::of(AGENT), "web-1", Role::Agent);
        tokens.insert(TokenHash::of(METRICS), "prometheus", Role::Metrics);
        tokens.insert(TokenHash::of(RESTORE), "helpdesk", Role::Restore);
        let state = AppState::new(tokens)
            .unwrap_or_else(|e| panic!("state: {e}"))
            .with_service(service.clone())
            .with_log_dir(&log_dir);
        let state = match browse {
            Some(b) => state.with_browse(b),
            None => state,
        };
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("addr: {e}"));
        let server = serve(listener, state, None).unwrap_or_else(|e| panic!("serve: {e}"));
        let handle = server.handle();
        actix_web::rt::spawn(server);
        Server {
            addr,
            handle,
            service,
            log,
            client: awc::Client::builder()
                .timeout(Duration::from_secs(30))
                .finish(),
            _dir: dir,
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self
            .client
            .request(method.clone(), format!("http://{}{path}", self.addr));
        if let Some(t) = token {
            req = req.insert_header((header::AUTHORIZATION, format!("Bearer {t}")));
        }
        let mut res = match body {
            Some(b) => req.send_json(&b).await,
            None => req.send().await,
        }
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let bytes = res
            .body()
            .limit(16 << 20)
            .await
            .unwrap_or_else(|e| panic!("{method} {path} body: {e}"));
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (res.status(), value)
    }

    async fn get(&self, path: &str, token: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, Some(token), None).await
    }

    async fn post(&self, path: &str, token: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(token), Some(body)).await
    }

    async fn stop(self) {
        self.handle.stop(true).await;
    }
}

fn plan(id: &str, source: &str) -> Value {
    json!({"id": id, "source": source, "schedule": "0 3 * * *", "rpo": "26h"})
}

/// Polls `path` until `done` holds (bounded), returning the last answer.
async fn until(s: &Server, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..400 {
        let (_, v) = s.get(path, ADMIN).await;
        if done(&v) {
            return v;
        }
        actix_web::rt::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{path} never reached the expected state");
}

#[actix_web::test]
async fn every_route_but_the_open_ones_is_401_without_a_token() {
    let s = Server::start().await;
    let doc: Value = serde_json::from_str(&openapi_json_text()).unwrap_or(Value::Null);
    let paths = doc["paths"].as_object().cloned().unwrap_or_default();
    assert!(paths.len() >= 20, "{paths:?}");
    let open = ["/healthz", "/readyz", "/api/v1/openapi.json"];
    for (path, ops) in paths {
        for method in ops
            .as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            let concrete = path.replace("{id}", "x");
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap_or(Method::GET);
            let (status, body) = s.call(m.clone(), &concrete, None, None).await;
            if open.contains(&path.as_str()) {
                assert_ne!(status, StatusCode::UNAUTHORIZED, "{m} {path}");
            } else {
                assert_eq!(status, StatusCode::UNAUTHORIZED, "{m} {path}: {body}");
                // A HEAD answer has no body to carry the code.
                if m != Method::HEAD {
                    assert_eq!(body["code"], "unauthorized", "{m} {path}");
                }
            }
        }
    }
    s.stop().await;
}

#[actix_web::test]
async fn viewer_and_agent_cannot_change_anything() {
    let s = Server::start().await;
    let (status, _) = s.post("/api/v1/plans", ADMIN, plan("home", "/home")).await;
    assert_eq!(status, StatusCode::CREATED);
    let point = "0".repeat(64);
    for token in [VIEWER, AGENT] {
        for (m, path, body) in [
            (
                Method::POST,
                "/api/v1/plans".to_owned(),
                Some(plan("x", "/x")),
            ),
            (
                Method::PUT,
                "/api/v1/plans/home".to_owned(),
                Some(plan("home", "/h")),
            ),
            (Method::DELETE, "/api/v1/plans/home".to_owned(), None),
            (Method::POST, "/api/v1/plans/home/run".to_owned(), None),
            (Method::POST, "/api/v1/plans/home/pause".to_owned(), None),
            (Method::POST, "/api/v1/jobs/j/cancel".to_owned(), None),
            (
                Method::POST,
                format!("/api/v1/points/{point}/lock"),
                Some(json!({"until": "2030-01-01T00:00:00Z"})),
            ),
        ] {
            let (status, v) = s.call(m.clone(), &path, Some(token), body).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{m} {path}: {v}");
            assert_eq!(v["code"], "forbidden");
        }
    }
    // The plan is untouched; an operator may pause it.
    let (status, v) = s
        .post("/api/v1/plans/home/pause", OPERATOR, json!(null))
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["paused"], true);
    assert_eq!(v["next_run_at"], Value::Null);
    s.stop().await;
}

/// Security review finding 2: a `metrics` token (the one Prometheus keeps
/// in a readable scrape configuration) reads `/metrics` and nothing else;
/// the content of backed-up files needs an admin or restore token (a
/// viewer's or an operator's is refused before the point is even looked
/// up); agents cannot read `/metrics` (it names every plan).
#[actix_web::test]
async fn roles_fit_their_use_metrics_reads_only_metrics_and_content_needs_admin_or_restore() {
    let s = Server::start().await;
    let (status, _) = s.post("/api/v1/plans", ADMIN, plan("home", "/home")).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = s.get("/metrics", METRICS).await;
    assert_eq!(status, StatusCode::OK);
    for path in [
        "/api/v1/plans",
        "/api/v1/points",
        "/api/v1/events",
        "/api/v1/whoami",
        "/api/v1/overview",
    ] {
        let (status, v) = s.get(path, METRICS).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {v}");
        assert_eq!(v["code"], "forbidden");
    }
    let (status, _) = s.get("/metrics", AGENT).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    for token in [ADMIN, OPERATOR, VIEWER, RESTORE] {
        let (status, _) = s.get("/metrics", token).await;
        assert_eq!(status, StatusCode::OK, "{token}");
    }
    for route in ["file", "archive"] {
        let file = format!("/api/v1/points/{}/{route}?path=/etc", "0".repeat(64));
        for token in [OPERATOR, VIEWER, METRICS, AGENT] {
            let (status, v) = s.get(&file, token).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{route} {token}: {v}");
        }
        for token in [ADMIN, RESTORE] {
            let (status, v) = s.get(&file, token).await;
            assert_eq!(
                status,
                StatusCode::NOT_FOUND,
                "{route}: past the role check: {v}"
            );
        }
    }
    // A restore token reads, and changes nothing.
    let (status, _) = s.get("/api/v1/plans", RESTORE).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = s.post("/api/v1/plans/home/run", RESTORE, json!(null)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    s.stop().await;
}

#[actix_web::test]
async fn an_agent_sees_only_its_own_plans() {
    let s = Server::start().await;
    for (id, src) in [
        ("mine", "agent:web-1:/etc"),
        ("other", "/srv"),
        ("near", "agent:web-10:/etc"),
    ] {
        let (status, v) = s.post("/api/v1/plans", ADMIN, plan(id, src)).await;
        assert_eq!(status, StatusCode::CREATED, "{v}");
    }
    let (_, v) = s.get("/api/v1/plans", AGENT).await;
    let ids: Vec<_> = v
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p["id"].clone())
        .collect();
    assert_eq!(ids, [json!("mine")]);
    let (status, _) = s.get("/api/v1/plans/other", AGENT).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = s.get("/api/v1/plans/mine", AGENT).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = s.get("/api/v1/events", AGENT).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, v) = s.get("/api/v1/plans", VIEWER).await;
    assert_eq!(v.as_array().map(Vec::len), Some(3));
    s.stop().await;
}

/// Security finding 16: proof intervals below the service's minimum (1 h
/// by default) are refused, on creation and on change, naming each field;
/// the minimum itself is accepted, and a refused change changes nothing.
#[actix_web::test]
async fn proof_intervals_below_the_minimum_are_refused() {
    let s = Server::start().await;
    let mut body = plan("tight", "/home/tight");
    body["verification"] = json!({"every": "59m 59s"});
    body["restore_test"] = json!({"every": "1ns", "full_every": "30m"});
    let (status, v) = s.post("/api/v1/plans", OPERATOR, body).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    for f in [
        "verification.every",
        "restore_test.every",
        "restore_test.full_every",
    ] {
        assert!(v["fields"][f].is_string(), "{f} missing in {v}");
    }
    let mut body = plan("tight", "/home/tight");
    body["verification"] = json!({"every": "1h"});
    body["restore_test"] = json!({"every": "60m", "full_every": "1h"});
    let (status, v) = s.post("/api/v1/plans", OPERATOR, body.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    body["restore_test"] = json!({"every": "10s"});
    let (status, v) = s
        .call(
            Method::PUT,
            "/api/v1/plans/tight",
            Some(OPERATOR),
            Some(body),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(v["fields"]["restore_test.every"].is_string(), "{v}");
    let (_, v) = s.get("/api/v1/plans/tight", VIEWER).await;
    assert_eq!(v["restore_test"]["every"], "1h", "{v}");
    s.stop().await;
}

#[actix_web::test]
async fn plan_validation_names_every_bad_field_and_ids_are_unique() {
    let s = Server::start().await;
    let (status, v) = s
        .post(
            "/api/v1/plans",
            OPERATOR,
            json!({"id": "Not OK", "source": "home", "schedule": "sometimes", "rpo": "0s",
                   "verification": {"depth": "read-sample:101"}}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(v["code"], "invalid");
    for f in ["id", "source", "schedule", "rpo", "verification.depth"] {
        assert!(v["fields"][f].is_string(), "{f} missing in {v}");
    }
    let (status, v) = s.post("/api/v1/plans", OPERATOR, json!({"id": 5})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["code"], "bad_request");
    let (status, v) = s
        .post("/api/v1/plans", OPERATOR, plan("home", "/home"))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    assert_eq!(v["rpo"], "1day 2h");
    assert_eq!(v["verification"]["depth"], "structure");
    assert_eq!(v["protection"]["status"], "unknown");
    let (status, v) = s
        .post("/api/v1/plans", OPERATOR, plan("home", "/home"))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{v}");
    let (_, d) = s.get("/api/v1/plans/defaults", VIEWER).await;
    assert_eq!(d["restore_test"]["sample_files"], 1000);
    s.stop().await;
}

#[actix_web::test]
async fn create_run_and_the_job_the_point_the_events_and_metrics_agree() {
    let s = Server::start().await;
    let (status, _) = s
        .post("/api/v1/plans", OPERATOR, plan("home", "/home"))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, job) = s
        .post("/api/v1/plans/home/run", OPERATOR, json!(null))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{job}");
    assert_eq!(job["kind"], "backup");
    assert_eq!(job["plan"], "home");
    let id = job["id"].as_str().unwrap_or_default().to_owned();
    let done = until(&s, &format!("/api/v1/jobs/{id}"), |j| {
        j["state"] == "succeeded"
    })
    .await;
    assert_eq!(done["attempt"], 1);
    // The follow-ups (verify, restore test) make the point recoverable.
    let pts = until(&s, "/api/v1/points?state=recoverable", |v| {
        v.as_array().is_some_and(|a| a.len() == 1)
    })
    .await;
    let point = pts[0]["id"].as_str().unwrap_or_default().to_owned();
    let (status, detail) = s.get(&format!("/api/v1/points/{point}"), VIEWER).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(detail["restore_test"]["passed"], true);
    let types: Vec<_> = detail["history"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(types.first().map(String::as_str), Some("backup.committed"));
    assert!(
        types.iter().any(|t| t == "restore_test.passed"),
        "{types:?}"
    );
    let (_, jobs) = s.get("/api/v1/jobs?plan=home&kind=backup", VIEWER).await;
    assert_eq!(jobs.as_array().map(Vec::len), Some(1));
    // Every kind of the jobs' vocabulary filters (read-back and reconcile
    // were refused with 400 before); none of these jobs is of those kinds.
    for kind in ["read-back", "reconcile", "prune"] {
        let (status, jobs) = s
            .get(&format!("/api/v1/jobs?plan=home&kind={kind}"), VIEWER)
            .await;
        assert_eq!(status, StatusCode::OK, "{kind}: {jobs}");
        assert_eq!(jobs.as_array().map(Vec::len), Some(0), "{kind}");
    }
    // Lock the point.
    let (status, v) = s
        .post(
            &format!("/api/v1/points/{point}/lock"),
            OPERATOR,
            json!({"until": "2031-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["locked_until"], "2031-01-01T00:00:00Z");
    let (status, _) = s
        .post(
            "/api/v1/jobs/{id}/cancel".replace("{id}", &id).as_str(),
            OPERATOR,
            json!(null),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);

    // Events, paged: every seq once, in order.
    let last = s.service.last_seq();
    let mut seqs = Vec::new();
    let mut from = 1;
    loop {
        let (_, page) = s
            .get(&format!("/api/v1/events?from_seq={from}&limit=3"), VIEWER)
            .await;
        let evs = page["events"].as_array().cloned().unwrap_or_default();
        if evs.is_empty() {
            break;
        }
        seqs.extend(evs.iter().filter_map(|e| e["seq"].as_u64()));
        from = page["next_seq"].as_u64().unwrap_or(u64::MAX);
    }
    assert!(seqs.len() as u64 >= last);
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let (_, page) = s
        .get("/api/v1/events?type=backup.committed&plan=home", VIEWER)
        .await;
    assert_eq!(page["events"].as_array().map(Vec::len), Some(1));

    // Metrics agree with the API.
    let (status, text) = s.get("/metrics", VIEWER).await;
    assert_eq!(status, StatusCode::OK);
    let text = text.as_str().unwrap_or_default().to_owned();
    let has = |line: &str| text.lines().any(|l| l == line);
    for line in [
        "vouch_recovery_points{state=\"recoverable\"} 1",
        "vouch_recovery_points{state=\"corrupt\"} 0",
        "vouch_backup_bytes_read_total 3000",
        "vouch_backup_bytes_added_total 1000",
        "vouch_verification_coverage_ratio 1",
        "vouch_job_duration_seconds_count{kind=\"backup\",outcome=\"succeeded\"} 1",
    ] {
        assert!(has(line), "missing {line:?} in\n{text}");
    }
    let (_, home) = s.get("/api/v1/plans/home", VIEWER).await;
    let status = home["protection"]["status"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        has(&format!(
            "vouch_plan_protection{{plan=\"home\",status=\"{status}\"}} 1"
        )),
        "{text}"
    );
    for other in ["protected", "at-risk", "unprotected", "unknown"]
        .iter()
        .filter(|o| **o != status)
    {
        assert!(
            has(&format!(
                "vouch_plan_protection{{plan=\"home\",status=\"{other}\"}} 0"
            )),
            "{text}"
        );
    }
    assert!(text.contains("vouch_plan_last_recoverable_timestamp_seconds{plan=\"home\"}"));
    assert!(text
        .lines()
        .any(|l| l.starts_with("vouch_event_log_bytes ") && l != "vouch_event_log_bytes 0"));
    let (_, ov) = s.get("/api/v1/overview", VIEWER).await;
    assert_eq!(ov["protection"][status.as_str()], 1);
    let (status, ready) = s.get("/readyz", VIEWER).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ready["status"], "ready");
    s.stop().await;
}

/// Issue 13: the log head is published for anchoring, to every role but
/// agents and the metrics-only role, and it is the head of the log.
#[actix_web::test]
async fn log_head_names_the_last_event_for_every_role_but_agent() {
    let s = Server::start().await;
    let receipt = s
        .log
        .append(vec![vouch_events::JobFinished {
            job: vouch_events::JobId::new("anchor"),
        }
        .into()])
        .unwrap_or_else(|e| panic!("append: {e}"));
    let (status, head) = s.get("/api/v1/log/head", VIEWER).await;
    assert_eq!(status, StatusCode::OK, "{head}");
    let seq = head["seq"].as_u64().unwrap_or_default();
    assert!(seq >= receipt.last_seq, "{head}");
    if seq == receipt.last_seq {
        assert_eq!(head["hash"], receipt.last_hash.to_hex(), "{head}");
    }
    assert!(head["checkpoint"].is_null(), "no chain key: {head}");
    for token in [AGENT, METRICS] {
        let (status, _) = s.get("/api/v1/log/head", token).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
    }
    s.stop().await;
}

/// Reads SSE frames from `res` until `stop` says enough; returns the ids.
async fn read_ids<S>(res: &mut S, stop: impl Fn(&[u64]) -> bool) -> Vec<u64>
where
    S: futures_core::Stream<Item = Result<actix_web::web::Bytes, awc::error::PayloadError>> + Unpin,
{
    let mut buf = String::new();
    let mut ids = Vec::new();
    while !stop(&ids) {
        let chunk = std::future::poll_fn(|cx| Pin::new(&mut *res).poll_next(cx)).await;
        let Some(Ok(chunk)) = chunk else { break };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            if let Some(id) = frame.lines().find_map(|l| l.strip_prefix("id: ")) {
                ids.push(id.parse().unwrap_or(0));
            }
        }
    }
    ids
}

#[actix_web::test]
async fn the_stream_resumes_from_last_event_id_without_gap_or_duplicate() {
    let s = Server::start().await;
    for i in 0..3 {
        s.post("/api/v1/plans", ADMIN, plan(&format!("p{i}"), "/data"))
            .await;
    }
    let head = s.service.last_seq();
    let mut res = s
        .client
        .get(format!("http://{}/api/v1/events/stream?from_seq=1", s.addr))
        .insert_header((header::AUTHORIZATION, format!("Bearer {VIEWER}")))
        .send()
        .await
        .unwrap_or_else(|e| panic!("stream: {e}"));
    assert_eq!(res.status(), StatusCode::OK);
    let ct = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    // Stop in the middle of the log, then go away.
    let first = read_ids(&mut res, |ids| ids.len() as u64 >= head - 1).await;
    assert_eq!(first, (1..head).collect::<Vec<_>>());
    drop(res);
    // More events while disconnected, and more after reconnecting (live).
    for i in 3..6 {
        s.post("/api/v1/plans", ADMIN, plan(&format!("p{i}"), "/data"))
            .await;
    }
    let last_seen = first.last().copied().unwrap_or(0);
    let mut res = s
        .client
        .get(format!("http://{}/api/v1/events/stream", s.addr))
        .insert_header((header::AUTHORIZATION, format!("Bearer {VIEWER}")))
        .insert_header(("Last-Event-ID", last_seen.to_string()))
        .send()
        .await
        .unwrap_or_else(|e| panic!("stream: {e}"));
    let writer = {
        let addr = s.addr;
        actix_web::rt::spawn(async move {
            let c = awc::Client::default();
            for i in 6..9 {
                let _ = c
                    .post(format!("http://{addr}/api/v1/plans"))
                    .insert_header((header::AUTHORIZATION, format!("Bearer {ADMIN}")))
                    .send_json(&plan(&format!("p{i}"), "/data"))
                    .await;
            }
        })
    };
    let _ = writer.await;
    let target = s.service.last_seq();
    let second = read_ids(&mut res, |ids| ids.last().is_some_and(|l| *l >= target)).await;
    assert_eq!(second, (last_seen + 1..=target).collect::<Vec<_>>());
    drop(res);
    // The server notices a client that went away at its next write (a
    // keep-alive at the latest); do not wait for that here.
    s.handle.stop(false).await;
}

#[actix_web::test]
async fn docs_openapi_json_is_the_generated_document() {
    let generated = openapi_json_text();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");
    if std::env::var_os("VOUCH_UPDATE_OPENAPI").is_some() {
        std::fs::write(path, &generated).unwrap_or_else(|e| panic!("write {path}: {e}"));
    }
    let checked_in = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "docs/openapi.json differs from the API in the code; regenerate it with \
         `VOUCH_UPDATE_OPENAPI=1 cargo test -p vouch-web --test api docs_openapi` and review the diff"
    );
    let s = Server::start().await;
    let (status, served) = s
        .call(Method::GET, "/api/v1/openapi.json", None, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        served,
        serde_json::from_str::<Value>(&generated).unwrap_or(Value::Null)
    );
    s.stop().await;
}

/// Every operation of the document, as (method, path template, operation).
fn operations(doc: &Value) -> Vec<(Method, String, Value)> {
    let mut out = Vec::new();
    for (path, ops) in doc["paths"].as_object().cloned().unwrap_or_default() {
        for (method, op) in ops.as_object().cloned().unwrap_or_default() {
            if let Ok(m) = Method::from_bytes(method.to_uppercase().as_bytes()) {
                out.push((m, path.clone(), op));
            }
        }
    }
    out
}

fn declared(op: &Value, status: StatusCode) -> bool {
    op["responses"]
        .as_object()
        .is_some_and(|r| r.contains_key(status.as_str()))
}

impl Server {
    /// A request with a raw body and content type; the status, the `Allow`
    /// header and the body as JSON (or a string).
    async fn raw(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Option<String>, Value) {
        let mut req = self
            .client
            .request(method.clone(), format!("http://{}{path}", self.addr));
        if let Some(t) = token {
            req = req.insert_header((header::AUTHORIZATION, format!("Bearer {t}")));
        }
        if !content_type.is_empty() {
            req = req.insert_header((header::CONTENT_TYPE, content_type.to_owned()));
        }
        let mut res = req
            .send_body(body)
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let allow = res
            .headers()
            .get(header::ALLOW)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = res.body().limit(16 << 20).await.unwrap_or_default();
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (res.status(), allow, value)
    }
}

/// Regression (schemathesis ST103, undocumented status codes): provokes
/// every error each operation can answer -- no token, a token of each role,
/// an id nothing has, a body that is not JSON, not an object, too large or
/// invalid, a query value out of its schema -- and checks that the answer
/// is declared on that operation, with the JSON error body.
#[actix_web::test]
async fn every_status_the_server_answers_is_declared_in_the_document() {
    let s = Server::start().await;
    let doc: Value = serde_json::from_str(&openapi_json_text()).unwrap_or(Value::Null);
    // Something to conflict with and a job to cancel twice.
    let (status, _) = s.post("/api/v1/plans", ADMIN, plan("taken", "/data")).await;
    assert_eq!(status, StatusCode::CREATED);
    let absent = "0".repeat(64);
    let mut seen = std::collections::BTreeSet::new();
    for (method, template, op) in operations(&doc) {
        if template == "/api/v1/events/stream" {
            continue; // never ends; its errors are checked in its own test
        }
        let path = template.replace("{id}", &absent);
        let has_body = op.get("requestBody").is_some();
        let body = if template == "/api/v1/points/{id}/lock" {
            json!({"until": "2030-01-01T00:00:00Z"})
        } else if has_body {
            plan("taken", "/data")
        } else {
            Value::Null
        };
        let json_body = serde_json::to_vec(&body).unwrap_or_default();
        let mut tries: Vec<(Option<&str>, &str, Vec<u8>)> = vec![
            (None, "application/json", json_body.clone()),
            (Some(VIEWER), "application/json", json_body.clone()),
            (Some(AGENT), "application/json", json_body.clone()),
            (Some(ADMIN), "application/json", json_body.clone()),
        ];
        if has_body {
            tries.extend([
                (Some(ADMIN), "text/plain", json_body.clone()),
                (Some(ADMIN), "application/json", b"{not json".to_vec()),
                (Some(ADMIN), "application/json", b"[1, 2]".to_vec()),
                (
                    Some(ADMIN),
                    "application/json",
                    b"{\"id\": \"Bad Id\"}".to_vec(),
                ),
                (Some(ADMIN), "application/json", vec![b' '; 3 << 20]),
            ]);
        }
        let mut queries = vec![String::new()];
        for p in op["parameters"].as_array().cloned().unwrap_or_default() {
            if p["in"] == "query" {
                queries.push(format!(
                    "?{}=%00not-valid",
                    p["name"].as_str().unwrap_or("")
                ));
                queries.push(format!("?{}=-1", p["name"].as_str().unwrap_or("")));
            }
        }
        for q in &queries {
            for (token, ct, b) in &tries {
                let (status, allow, answer) = s
                    .raw(method.clone(), &format!("{path}{q}"), *token, ct, b.clone())
                    .await;
                assert!(
                    declared(&op, status),
                    "{method} {path}{q} ({ct}, token {token:?}) answered {status}, \
                     which {template} does not declare: {answer}"
                );
                assert_eq!(allow, None, "{method} {path}{q}");
                if !status.is_success() && method != Method::HEAD {
                    assert!(answer["code"].is_string(), "{method} {path}{q}: {answer}");
                }
                seen.insert(status.as_u16());
            }
        }
    }
    // The loop did provoke the errors it is about.
    for status in [400, 401, 403, 404, 409, 413, 415, 422] {
        assert!(seen.contains(&status), "{status} never answered: {seen:?}");
    }
    s.stop().await;
}

/// Regression (schemathesis ST204, wrong response to an undeclared
/// method): a known path answers a method the document does not list with
/// 405, an `Allow` header naming exactly the documented methods, and the
/// JSON error `method_not_allowed`.
#[actix_web::test]
async fn undeclared_methods_are_405_with_allow() {
    let s = Server::start().await;
    let doc: Value = serde_json::from_str(&openapi_json_text()).unwrap_or(Value::Null);
    let mut by_path: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (method, template, _) in operations(&doc) {
        by_path
            .entry(template)
            .or_default()
            .push(method.as_str().to_owned());
    }
    let mut checked = 0;
    for (template, mut methods) in by_path {
        methods.sort();
        let path = template.replace("{id}", &"0".repeat(64));
        for m in [
            "GET", "POST", "PUT", "DELETE", "PATCH", "TRACE", "OPTIONS", "HEAD",
        ] {
            if methods.iter().any(|d| d == m) {
                continue;
            }
            let method = Method::from_bytes(m.as_bytes()).unwrap_or(Method::GET);
            let (status, allow, body) = s.raw(method, &path, Some(ADMIN), "", Vec::new()).await;
            assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{m} {path}");
            let mut allowed: Vec<String> = allow
                .unwrap_or_default()
                .split(',')
                .map(|a| a.trim().to_owned())
                .collect();
            allowed.sort();
            assert_eq!(allowed, methods, "Allow of {m} {path}");
            if m != "HEAD" {
                assert_eq!(body["code"], "method_not_allowed", "{m} {path}: {body}");
            }
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked}");
    // Without a token the API does not say which methods exist.
    let (status, allow, _) = s
        .raw(Method::PATCH, "/api/v1/plans", None, "", Vec::new())
        .await;
    assert_eq!((status, allow), (StatusCode::UNAUTHORIZED, None));
    s.stop().await;
}

/// L7: concurrent creations of one plan: exactly one is created (201),
/// every other is refused (409), and the log holds one `plan.created`.
#[actix_web::test]
async fn concurrent_creations_of_one_plan_create_it_once() {
    let s = Server::start().await;
    let answers = futures_util::future::join_all(
        (0..12).map(|_| s.post("/api/v1/plans", ADMIN, plan("twice", "/srv"))),
    )
    .await;
    let created = answers
        .iter()
        .filter(|(st, _)| *st == StatusCode::CREATED)
        .count();
    let refused = answers
        .iter()
        .filter(|(st, v)| *st == StatusCode::CONFLICT && v["code"] == "conflict")
        .count();
    assert_eq!((created, refused), (1, 11), "{answers:?}");
    let (_, events) = s
        .get("/api/v1/events?type=plan.created&plan=twice", ADMIN)
        .await;
    let creations = events["events"].as_array().map_or(0, Vec::len);
    assert_eq!(creations, 1, "{events}");
    s.stop().await;
}

/// The value of the series `name{labels}` in a scrape (none: absent).
fn series(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(name_and_labels)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
    })
}

async fn scrape(s: &Server) -> String {
    let (status, text) = s.get("/metrics", VIEWER).await;
    assert_eq!(status, StatusCode::OK);
    text.as_str().unwrap_or_default().to_owned()
}

/// H3: `/metrics` says how much each plan's proof covers: the newest
/// point's restore coverage (files and bytes), whether that test was
/// complete, its verified depth, and when a complete restore test last
/// passed; a point whose proof no longer counts shows 0 and `none`, and
/// "never" is absent, not 0.
#[actix_web::test]
async fn metrics_show_each_plans_restore_coverage_and_verified_depth() {
    let s = Server::start().await;
    for id in ["home", "idle"] {
        let (status, _) = s.post("/api/v1/plans", OPERATOR, plan(id, "/home")).await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let (status, _) = s
        .post("/api/v1/plans/home/run", OPERATOR, json!(null))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let pts = until(&s, "/api/v1/points?state=recoverable", |v| {
        v.as_array().is_some_and(|a| a.len() == 1)
    })
    .await;
    let hex = pts[0]["id"].as_str().unwrap_or_default().to_owned();
    let (_, detail) = s.get(&format!("/api/v1/points/{hex}"), VIEWER).await;
    let complete_at = detail["last_complete_restore_at"]
        .as_str()
        .and_then(|t| {
            time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
        })
        .map(|t| t.unix_timestamp_nanos() as f64 / 1e9)
        .unwrap_or_else(|| panic!("no complete restore in {detail}"));
    let cov = |m: &str| {
        format!("vouch_plan_newest_point_restore_coverage_ratio{{measure=\"{m}\",plan=\"home\"}}")
    };
    let depth =
        |d: &str| format!("vouch_plan_newest_point_verified_depth{{depth=\"{d}\",plan=\"home\"}}");
    let complete = "vouch_plan_newest_point_restore_complete{plan=\"home\"}";
    let data = "vouch_plan_newest_point_verified_data_ratio{plan=\"home\"}";
    let last = "vouch_plan_last_complete_restore_test_timestamp_seconds{plan=\"home\"}";

    // The fake worker restores every file (complete) after a structure
    // verification.
    let text = scrape(&s).await;
    assert_eq!(series(&text, &cov("files")), Some(1.0), "{text}");
    assert_eq!(series(&text, &cov("bytes")), Some(1.0), "{text}");
    assert_eq!(series(&text, complete), Some(1.0), "{text}");
    assert_eq!(series(&text, &depth("structure")), Some(1.0), "{text}");
    for d in ["none", "read-sample", "read-all"] {
        assert_eq!(series(&text, &depth(d)), Some(0.0), "{d}: {text}");
    }
    assert_eq!(series(&text, data), Some(0.0), "{text}");
    let at = series(&text, last).unwrap_or_else(|| panic!("{last} missing in\n{text}"));
    assert!((at - complete_at).abs() < 1e-3, "{at} != {complete_at}");
    // A plan without a point has none of these series: never is absent.
    assert!(
        !text.lines().any(|l| l.contains("plan=\"idle\"")
            && (l.starts_with("vouch_plan_newest_point_")
                || l.starts_with("vouch_plan_last_complete_restore_test_"))),
        "{text}"
    );

    // A sample of one file of three, then a deeper verification.
    let point: SnapshotId = hex.parse().unwrap_or_else(|e| panic!("{e:?}"));
    s.service
        .append(vec![
            RestoreTestPassed {
                point,
                job: None,
                evidence: RestoreEvidence {
                    restored: vec!["/a".into()],
                    files: 1,
                    bytes: 750,
                    digests_compared: 1,
                    digests_matched: 1,
                    duration_ms: 1,
                    location: "test:/sandbox".into(),
                    files_in_point: Some(3),
                    bytes_in_point: Some(3000),
                    complete: false,
                    guest: None,
                },
            }
            .into(),
            VerificationPassed {
                point,
                job: None,
                depth: VerifyDepth::ReadSample(25),
                bytes_read: 150,
                blobs_checked: 1,
            }
            .into(),
        ])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let text = scrape(&s).await;
    let files = series(&text, &cov("files")).unwrap_or(-1.0);
    assert!((files - 1.0 / 3.0).abs() < 1e-9, "{text}");
    assert_eq!(series(&text, &cov("bytes")), Some(0.25), "{text}");
    assert_eq!(series(&text, complete), Some(0.0), "{text}");
    assert_eq!(series(&text, &depth("read-sample")), Some(1.0), "{text}");
    assert_eq!(series(&text, &depth("structure")), Some(0.0), "{text}");
    assert_eq!(series(&text, data), Some(0.25), "{text}");
    // The complete test still counts.
    assert_eq!(series(&text, last), Some(at), "{text}");

    // A failed verification: the point is corrupt and proves nothing.
    s.service
        .append(vec![VerificationFailed {
            point,
            job: None,
            depth: VerifyDepth::ReadAll,
            bytes_read: 10,
            damaged: vec!["pack 00".into()],
        }
        .into()])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let text = scrape(&s).await;
    assert_eq!(series(&text, &cov("files")), Some(0.0), "{text}");
    assert_eq!(series(&text, &cov("bytes")), Some(0.0), "{text}");
    assert_eq!(series(&text, complete), Some(0.0), "{text}");
    assert_eq!(series(&text, &depth("none")), Some(1.0), "{text}");
    assert_eq!(series(&text, data), Some(0.0), "{text}");
    assert_eq!(series(&text, last), None, "{text}");
    s.stop().await;
}

/// Commits a point of no plan straight into the log; returns its id.
async fn commit_point(s: &Server, n: u8) -> SnapshotId {
    let id = SnapshotId([n; 32]);
    s.service
        .append(vec![BackupCommitted {
            job: None,
            plan: None,
            repository: vouch_events::RepositoryId::new("default"),
            snapshot: id,
            snapshot_time_unix_ns: 1_800_000_000_000_000_000,
            summary: BackupSummary {
                files: 1,
                bytes: 1,
                added_bytes: 1,
                stored_bytes: 1,
                duration_ms: 1,
                total_bytes: None,
                warnings: None,
            },
            changes: None,
        }
        .into()])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    id
}

/// Finding 8: a point's history comes from its index of seqs, and is
/// exactly the events naming it, across gaps of thousands of events
/// between them (read in separate passes) and with other points' events
/// in between.
#[actix_web::test]
async fn a_points_history_is_every_event_naming_it_across_wide_gaps() {
    let s = Server::start().await;
    let a = commit_point(&s, 21).await;
    for i in 0..3 {
        commit_point(&s, 30 + i).await;
    }
    // A wide gap: 6000 events naming no point.
    for chunk in 0..6 {
        let filler: Vec<vouch_events::Event> = (0..1000)
            .map(|i| {
                vouch_events::JobFinished {
                    job: vouch_events::JobId::new(format!("filler-{chunk}-{i}")),
                }
                .into()
            })
            .collect();
        s.service
            .append(filler)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let path = format!("/api/v1/points/{a}/lock");
    let (status, v) = s
        .post(&path, OPERATOR, json!({"until": "2031-01-01T00:00:00Z"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    commit_point(&s, 40).await;
    let (status, detail) = s.get(&format!("/api/v1/points/{a}"), VIEWER).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let seqs: Vec<u64> = detail["history"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    let scanned = s
        .service
        .scan_events(1, move |it| {
            it.filter(|env| env.event.point() == Some(a))
                .map(|env| env.seq)
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(seqs, scanned);
    assert_eq!(seqs.len(), 2, "committed and locked: {detail}");
    s.stop().await;
}

/// Finding 8: `/jobs` pages through every job, newest first, with
/// `before_seq`, never listing one twice or skipping one.
#[actix_web::test]
async fn jobs_page_newest_first_with_before_seq() {
    let s = Server::start().await;
    let mut batch: Vec<vouch_events::Event> = Vec::new();
    for i in 0..250 {
        let job = vouch_events::JobId::new(format!("old-{i:03}"));
        batch.push(
            vouch_events::JobScheduled {
                job: job.clone(),
                kind: vouch_events::JobKind::Forget,
                plan: None,
                point: None,
                due_unix_ns: 0,
                attempt: 1,
                spec: Default::default(),
            }
            .into(),
        );
        batch.push(
            vouch_events::JobStarted {
                job: job.clone(),
                agent: None,
            }
            .into(),
        );
        batch.push(vouch_events::JobFinished { job }.into());
    }
    s.service
        .append(batch)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The read model folds the batch after the append returns.
    until(&s, "/api/v1/jobs/old-249", |j| j["state"] == "succeeded").await;
    let mut seen: Vec<(u64, String)> = Vec::new();
    let mut path = "/api/v1/jobs?limit=100".to_owned();
    let mut pages = 0;
    loop {
        let (status, page) = s.get(&path, VIEWER).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let page = page.as_array().cloned().unwrap_or_default();
        if page.is_empty() {
            break;
        }
        pages += 1;
        for j in &page {
            seen.push((
                j["scheduled_seq"].as_u64().unwrap_or_default(),
                j["id"].as_str().unwrap_or_default().to_owned(),
            ));
        }
        let last = seen.last().map(|(seq, _)| *seq).unwrap_or_default();
        path = format!("/api/v1/jobs?limit=100&before_seq={last}");
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 250);
    let (_, kinds) = s
        .get("/api/v1/jobs?kind=retention&limit=1000", VIEWER)
        .await;
    assert_eq!(kinds.as_array().map(Vec::len), Some(250), "{kinds}");
    assert!(seen.windows(2).all(|w| w[0].0 > w[1].0), "newest first");
    let mut ids: Vec<_> = seen.iter().map(|(_, id)| id.clone()).collect();
    assert_eq!(ids.first().map(String::as_str), Some("old-249"));
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 250);
    s.stop().await;
}

/// `/metrics` has each agent's last call-in (issue 14, "agents are
/// visible"): the recorded time of its latest `agent.seen`, by the
/// server's clock, one series per agent.
#[actix_web::test]
async fn metrics_show_when_each_agent_last_called_in() {
    let s = Server::start().await;
    let receipt = s
        .service
        .append(vec![
            vouch_events::AgentRegistered {
                agent: vouch_events::AgentId::new("web-1"),
                hostname: "web-1.example".into(),
                os: "linux".into(),
                version: "0.1.0".into(),
            }
            .into(),
            vouch_events::AgentSeen {
                agent: vouch_events::AgentId::new("web-1"),
                clock_skew_ms: None,
                version: None,
            }
            .into(),
        ])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let seen_ns = s
        .service
        .scan_events(receipt.last_seq, |it| it.next().map(|e| e.recorded_unix_ns))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_default();
    let (status, text) = s.get("/metrics", METRICS).await;
    assert_eq!(status, StatusCode::OK);
    let text = text.as_str().unwrap_or_default().to_owned();
    let line = text
        .lines()
        .find(|l| l.starts_with("vouch_agent_last_seen_timestamp_seconds{agent=\"web-1\"}"))
        .unwrap_or_else(|| panic!("no series for web-1: {text}"));
    let value: f64 = line
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_default();
    assert!(
        (value - seen_ns as f64 / 1e9).abs() < 1e-3,
        "{line} vs {seen_ns} ns"
    );
    s.stop().await;
}

/// The `until` of every `point.locked` in the log, in log order.
async fn locks_in_log(s: &Server) -> Vec<i64> {
    s.service
        .scan_events(1, |it| {
            it.filter_map(|env| match &env.event {
                vouch_events::Event::PointLocked(e) => Some(e.until_unix_ns),
                _ => None,
            })
            .collect()
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn inconsistencies(s: &Server) -> u64 {
    s.service
        .query(s.service.last_seq(), |p| p.inconsistencies_total)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// L7: a lock is never shortened: an earlier `until` is refused (409) and
/// appends nothing; the same `until` again is answered without a new event.
#[actix_web::test]
async fn a_lock_is_never_shortened() {
    let s = Server::start().await;
    let point = commit_point(&s, 7).await;
    let path = format!("/api/v1/points/{point}/lock");
    let (status, v) = s
        .post(&path, OPERATOR, json!({"until": "2031-01-01T00:00:00Z"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let (status, v) = s
        .post(&path, OPERATOR, json!({"until": "2030-01-01T00:00:00Z"}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["code"], "conflict");
    let (status, v) = s
        .post(&path, OPERATOR, json!({"until": "2031-01-01T00:00:00Z"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["locked_until"], "2031-01-01T00:00:00Z");
    assert_eq!(locks_in_log(&s).await.len(), 1);
    assert_eq!(inconsistencies(&s).await, 0);
    s.stop().await;
}

/// Security finding 16: only an administrator removes a lock before its
/// end, with a reason; the removal is recorded with who did it, a point
/// with no lock in force is answered 409, and the point can be locked again.
#[actix_web::test]
async fn only_an_admin_unlocks_a_point_and_it_is_recorded() {
    let s = Server::start().await;
    let point = commit_point(&s, 11).await;
    let lock = format!("/api/v1/points/{point}/lock");
    let unlock = format!("/api/v1/points/{point}/unlock");
    let (status, v) = s.post(&unlock, ADMIN, json!({"reason": "early"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "no lock yet: {v}");
    let (status, v) = s
        .post(&lock, OPERATOR, json!({"until": "2031-01-01T00:00:00Z"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    for token in [OPERATOR, VIEWER, RESTORE, METRICS, AGENT] {
        let (status, v) = s.post(&unlock, token, json!({"reason": "mine"})).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{token}: {v}");
    }
    for bad in [json!({"reason": ""}), json!({"reason": "a\nb"}), json!({})] {
        let (status, v) = s.post(&unlock, ADMIN, bad.clone()).await;
        assert!(
            status == StatusCode::UNPROCESSABLE_ENTITY || status == StatusCode::BAD_REQUEST,
            "{bad}: {status} {v}"
        );
    }
    let (status, v) = s
        .post(
            &unlock,
            ADMIN,
            json!({"reason": "legal hold lifted, ticket 4711"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert!(v["locked_until"].is_null(), "{v}");
    let (status, v) = s.post(&unlock, ADMIN, json!({"reason": "again"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "already unlocked: {v}");
    let recorded = s
        .service
        .scan_events(1, |it| {
            it.filter_map(|env| match &env.event {
                vouch_events::Event::PointUnlocked(e) => Some(format!("unlocked {}", e.reason)),
                vouch_events::Event::ActionAudited(e) if e.action == "point.unlock" => {
                    Some(format!("{} {} {}", e.principal, e.role, e.target))
                }
                _ => None,
            })
            .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        recorded,
        vec![
            "unlocked legal hold lifted, ticket 4711".to_owned(),
            format!("root admin {point}"),
        ]
    );
    let (status, v) = s
        .post(&lock, OPERATOR, json!({"until": "2030-01-01T00:00:00Z"}))
        .await;
    assert_eq!(status, StatusCode::OK, "locked again, earlier: {v}");
    assert_eq!(inconsistencies(&s).await, 0);
    s.stop().await;
}

/// L7: concurrent locks of one point with different ends: the final lock
/// is the latest asked for, every accepted lock was at least the one
/// before it (the log's locks never decrease), every refusal is a 409,
/// and the log holds no inconsistency.
#[actix_web::test]
async fn concurrent_locks_of_one_point_never_shorten_it() {
    let s = Server::start().await;
    let point = commit_point(&s, 9).await;
    let path = format!("/api/v1/points/{point}/lock");
    // Years in a scrambled order, so that appends in arrival order would
    // shorten the lock.
    let years = [
        2035, 2031, 2039, 2030, 2037, 2033, 2032, 2038, 2034, 2036, 2040, 2029,
    ];
    let answers = futures_util::future::join_all(years.iter().map(|y| {
        s.post(
            &path,
            OPERATOR,
            json!({"until": format!("{y}-01-01T00:00:00Z")}),
        )
    }))
    .await;
    for (st, v) in &answers {
        assert!(
            *st == StatusCode::OK || (*st == StatusCode::CONFLICT && v["code"] == "conflict"),
            "{st}: {v}"
        );
    }
    let accepted = answers
        .iter()
        .filter(|(st, _)| *st == StatusCode::OK)
        .count();
    let (_, v) = s.get(&format!("/api/v1/points/{point}"), VIEWER).await;
    assert_eq!(v["locked_until"], "2040-01-01T00:00:00Z", "{v}");
    let locks = locks_in_log(&s).await;
    assert_eq!(locks.len(), accepted, "{locks:?}");
    assert!(locks.windows(2).all(|w| w[0] < w[1]), "{locks:?}");
    assert_eq!(inconsistencies(&s).await, 0);
    s.stop().await;
}

/// TEST DOUBLE of the engine's side: serves one repository, `default`,
/// and browses nothing.
struct OneRepository;

impl vouch_web::Browse for OneRepository {
    fn list(
        &self,
        _: &str,
        _: &str,
        _: &str,
    ) -> Result<Vec<vouch_web::BrowseEntry>, vouch_web::BrowseError> {
        Err(vouch_web::BrowseError::NotFound("nothing to browse".into()))
    }

    fn read_file(
        &self,
        _: &str,
        _: &str,
        _: &str,
    ) -> Result<vouch_web::FileDownload, vouch_web::BrowseError> {
        Err(vouch_web::BrowseError::NotFound("nothing to read".into()))
    }

    fn repositories(&self) -> Result<Vec<vouch_web::RepoStats>, vouch_web::BrowseError> {
        Ok(vec![vouch_web::RepoStats {
            id: "default".into(),
            location: "test:/repo".into(),
            snapshots: 0,
            packs: 0,
            size_bytes: 0,
            free_bytes: None,
            log_mirrored_seq: None,
        }])
    }
}

/// L7: verify reports decided and appended with nothing in between: while
/// reports arrive, retention forgets their points; no verdict is recorded
/// after its point was forgotten (the log holds no inconsistency), and
/// every point of every report is answered either recorded or forgotten.
#[actix_web::test]
async fn verify_reports_racing_retention_never_judge_a_forgotten_point() {
    let s = Server::start_with(Some(Arc::new(OneRepository)), ServiceConfig::default()).await;
    let mut points = Vec::new();
    for n in 1..=20u8 {
        points.push(commit_point(&s, n).await);
    }
    let report = json!({
        "points": points
            .iter()
            .map(|p| json!({"point": p.to_string(), "verdict": "passed", "depth": "structure"}))
            .collect::<Vec<_>>(),
        "bytes_read": 10,
        "blobs_checked": 2,
    });
    // Each report is sent again when told to try again (503), as a client
    // must: a report that lost the race to the log eight times in a row is
    // answered 503, never recorded on a stale view.
    let reports = futures_util::future::join_all((0..12).map(|_| async {
        let mut tries = 0;
        loop {
            let answer = s
                .post(
                    "/api/v1/repositories/default/verify-reports",
                    OPERATOR,
                    report.clone(),
                )
                .await;
            tries += 1;
            let again =
                answer.0 == StatusCode::SERVICE_UNAVAILABLE && answer.1["code"] == "unavailable";
            if !again || tries == 50 {
                return answer;
            }
            actix_web::rt::task::yield_now().await;
        }
    }));
    let forgets = async {
        for p in &points {
            s.service
                .append(vec![vouch_events::PointForgotten {
                    point: *p,
                    rule: "keep-last 0".into(),
                }
                .into()])
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            actix_web::rt::task::yield_now().await;
        }
    };
    let (answers, ()) = futures_util::join!(reports, forgets);
    for (st, v) in &answers {
        assert_eq!(*st, StatusCode::OK, "{v}");
        let recorded = v["recorded"].as_array().map_or(0, Vec::len);
        let forgotten = v["forgotten"].as_array().map_or(0, Vec::len);
        assert_eq!(recorded + forgotten, points.len(), "{v}");
    }
    assert_eq!(inconsistencies(&s).await, 0);
    // And in the log: no verification after its point's forget.
    let late = s
        .service
        .scan_events(1, |it| {
            let mut gone = std::collections::BTreeSet::new();
            let mut late = 0;
            for env in it {
                match &env.event {
                    vouch_events::Event::PointForgotten(e) => {
                        gone.insert(e.point);
                    }
                    vouch_events::Event::VerificationPassed(e) if gone.contains(&e.point) => {
                        late += 1
                    }
                    _ => {}
                }
            }
            late
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(late, 0);
    s.stop().await;
}

/// M10: while the event log refuses appends, `/readyz` answers 503 with the
/// reason (a load balancer or supervisor stops sending work), and 200 once
/// appends go through again.
#[actix_web::test]
async fn readyz_is_503_with_the_reason_while_the_log_refuses_appends() {
    let s = Server::start().await;
    // The log's syncs fail for real (ENOSPC) until disarmed: any append,
    // ours or the service's own, fails.
    let faults = s.log.sync_faults();
    faults.fail_next(10_000, vouch_events::SyncFault::Enospc);
    let (status, _) = s
        .post("/api/v1/plans", OPERATOR, plan("home", "/home"))
        .await;
    assert!(status.is_server_error(), "{status}");
    let (status, ready) = s.call(Method::GET, "/readyz", None, None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{ready}");
    assert_eq!(ready["status"], "log_not_writable");
    let reason = ready["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("refuses appends") && reason.contains("No space left on device"),
        "{ready}"
    );
    faults.clear();
    let (status, _) = s
        .post("/api/v1/plans", OPERATOR, plan("home", "/home"))
        .await;
    assert_eq!(status, StatusCode::CREATED, "appends go through again");
    let (status, ready) = s.call(Method::GET, "/readyz", None, None).await;
    assert_eq!(status, StatusCode::OK, "{ready}");
    s.stop().await;
}

/// `/readyz` answers 503 `read_model_unavailable` with the reason while the
/// read model refuses queries (it failed and could not be reopened).
#[actix_web::test]
async fn readyz_is_503_while_the_read_model_cannot_reopen() {
    let s = Server::start_with(
        None,
        ServiceConfig {
            checkpoint_every: Duration::from_millis(20),
            ..ServiceConfig::default()
        },
    )
    .await;
    s.service
        .append(vec![vouch_events::ServiceStarted {
            version: "again".into(),
        }
        .into()])
        .await
        .unwrap_or_else(|e| panic!("append: {e}"));
    // A checkpoint of the read store, then the log out of reach: a reopen
    // finds the read store ahead of the log.
    actix_web::rt::time::sleep(Duration::from_millis(300)).await;
    let log = s._dir.path().join("log");
    let aside = s._dir.path().join("log-aside");
    std::fs::rename(&log, &aside).unwrap_or_else(|e| panic!("rename: {e}"));
    std::fs::create_dir(&log).unwrap_or_else(|e| panic!("mkdir: {e}"));
    let panicked = s
        .service
        .query(0, |_| -> u64 { panic!("simulated panic while folding") })
        .await;
    assert!(panicked.is_err());
    let _ = s.service.query(0, |p| p.last_seq).await;
    let (status, ready) = s.call(Method::GET, "/readyz", None, None).await;
    std::fs::remove_dir(&log).unwrap_or_else(|e| panic!("rmdir: {e}"));
    std::fs::rename(&aside, &log).unwrap_or_else(|e| panic!("rename: {e}"));
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{ready}");
    assert_eq!(ready["status"], "read_model_unavailable");
    assert!(
        ready["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("the read model refuses queries"),
        "{ready}"
    );
    s.stop().await;
}

/// Security review finding 16: a `PUT` or a pause that changes nothing
/// records nothing, so no-op requests cannot grow the log.
#[actix_web::test]
async fn a_change_that_changes_nothing_records_nothing() {
    let s = Server::start().await;
    let (status, _) = s.post("/api/v1/plans", ADMIN, plan("home", "/home")).await;
    assert_eq!(status, StatusCode::CREATED);
    let head = |v: &Value| v["next_seq"].as_u64().expect("next_seq");
    let (_, before) = s.get("/api/v1/events?limit=1000", ADMIN).await;
    for _ in 0..3 {
        let (status, v) = s
            .call(
                Method::PUT,
                "/api/v1/plans/home",
                Some(ADMIN),
                Some(plan("home", "/home")),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{v}");
    }
    let (_, after) = s.get("/api/v1/events?limit=1000", ADMIN).await;
    assert_eq!(head(&after), head(&before), "no plan.changed for nothing");
    // A real change is recorded once; pausing twice records one pause.
    let (status, _) = s
        .call(
            Method::PUT,
            "/api/v1/plans/home",
            Some(ADMIN),
            Some(plan("home", "/srv")),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    for _ in 0..2 {
        let (status, _) = s.post("/api/v1/plans/home/pause", ADMIN, json!(null)).await;
        assert_eq!(status, StatusCode::OK);
    }
    let (_, last) = s.get("/api/v1/events?limit=1000", ADMIN).await;
    // plan.changed and its audit.action, twice.
    assert_eq!(head(&last), head(&before) + 4, "{last}");
    s.stop().await;
}

/// Every action through the API is recorded with its principal and role,
/// in the same batch as what it caused.
#[actix_web::test]
async fn actions_through_the_api_leave_an_audit_trail_with_their_principal() {
    let s = Server::start().await;
    let (status, _) = s.post("/api/v1/plans", ADMIN, plan("home", "/home")).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = s
        .post("/api/v1/plans/home/pause", OPERATOR, json!(null))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = s
        .call(Method::DELETE, "/api/v1/plans/home", Some(OPERATOR), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, page) = s.get("/api/v1/events?limit=1000", ADMIN).await;
    let events = page["events"].as_array().expect("events");
    let audits: Vec<(String, String, String, String)> = events
        .iter()
        .filter(|e| e["type"] == "audit.action")
        .map(|e| {
            let d = &e["data"];
            let f = |k: &str| d[k].as_str().unwrap_or_default().to_owned();
            (f("principal"), f("role"), f("action"), f("target"))
        })
        .collect();
    let (admin, operator) = (
        principal_of(&s, ADMIN).await,
        principal_of(&s, OPERATOR).await,
    );
    assert_eq!(
        audits,
        vec![
            (admin, "admin".into(), "plan.create".into(), "home".into()),
            (
                operator.clone(),
                "operator".into(),
                "plan.pause".into(),
                "home".into()
            ),
            (
                operator,
                "operator".into(),
                "plan.remove".into(),
                "home".into()
            ),
        ],
        "{page}"
    );
    // Each audit record directly follows what it caused, in one batch.
    for (i, e) in events.iter().enumerate() {
        if e["type"] == "audit.action" {
            let before = &events[i - 1]["type"];
            assert!(
                before.as_str().is_some_and(|t| t.starts_with("plan.")),
                "{e} follows {before}"
            );
        }
    }
    s.stop().await;
}

async fn principal_of(s: &Server, token: &str) -> String {
    let (_, who) = s.get("/api/v1/whoami", token).await;
    who["name"].as_str().expect("a name").to_owned()
}

/// Security finding 8: `GET /events?type=` reads at most 10 000 events of
/// the log per request and says where to go on (`next_seq`), instead of
/// scanning the whole log for a type no event has.
#[actix_web::test]
async fn a_filtered_page_of_events_scans_a_bounded_part_of_the_log() {
    let s = Server::start().await;
    let first = s.service.last_seq() + 1;
    for batch in 0..11u32 {
        let events = (0..1000u32)
            .map(|i| {
                let n = batch * 1000 + i;
                let mut id = [0u8; 32];
                id[..4].copy_from_slice(&n.to_be_bytes());
                BackupCommitted {
                    job: None,
                    plan: None,
                    repository: vouch_events::RepositoryId::new("default"),
                    snapshot: SnapshotId(id),
                    snapshot_time_unix_ns: 1_800_000_000_000_000_000,
                    summary: BackupSummary {
                        files: 1,
                        bytes: 1,
                        added_bytes: 1,
                        stored_bytes: 1,
                        duration_ms: 1,
                        total_bytes: None,
                        warnings: None,
                    },
                    changes: None,
                }
                .into()
            })
            .collect();
        s.service
            .append(events)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let last = s.service.last_seq();
    assert!(last >= first + 10_999);
    let (status, v) = s
        .get(
            &format!("/api/v1/events?type=point.locked&from_seq={first}"),
            VIEWER,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["events"], json!([]));
    assert_eq!(v["next_seq"], first + 10_000, "stopped after 10 000 events");
    let (_, v) = s
        .get(
            &format!(
                "/api/v1/events?type=point.locked&from_seq={}",
                first + 10_000
            ),
            VIEWER,
        )
        .await;
    assert_eq!(
        v["next_seq"],
        last + 1,
        "the rest, to the end: {}",
        v["next_seq"]
    );
    s.stop().await;
}

/// Security review finding 13: a plan id used again (removed, then
/// created for an agent) does not hand the agent the earlier plan's points
/// or jobs; only what its own incarnation recorded.
#[actix_web::test]
async fn an_agent_sees_nothing_of_an_earlier_plan_with_the_same_id() {
    let s = Server::start().await;
    let (status, _) = s
        .post("/api/v1/plans", ADMIN, plan("web", "/srv/secret"))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, job) = s.post("/api/v1/plans/web/run", ADMIN, json!(null)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{job}");
    let pts = until(&s, "/api/v1/points?plan=web", |v| {
        v.as_array().is_some_and(|a| !a.is_empty())
    })
    .await;
    let old_point = pts[0]["id"].as_str().unwrap_or_default().to_owned();
    // Right after the run's burst of follow-ups (the fake worker ends its
    // jobs at once): the decision must wait the burst out, not fail 503.
    let (status, body) = s
        .call(Method::DELETE, "/api/v1/plans/web", Some(ADMIN), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, _) = s
        .post("/api/v1/plans", ADMIN, plan("web", "agent:web-1:/srv"))
        .await;
    assert_eq!(status, StatusCode::CREATED);

    let (_, mine) = s.get("/api/v1/points?plan=web", AGENT).await;
    assert_eq!(mine, json!([]), "none of the earlier plan's points");
    let (status, _) = s.get(&format!("/api/v1/points/{old_point}"), AGENT).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, jobs) = s.get("/api/v1/jobs?plan=web", AGENT).await;
    assert_eq!(jobs, json!([]), "none of its jobs");
    // An admin still sees the earlier point: it is kept, not hidden.
    let (status, _) = s.get(&format!("/api/v1/points/{old_point}"), ADMIN).await;
    assert_eq!(status, StatusCode::OK);
    s.stop().await;
}

#[actix_web::test]
async fn a_plan_with_a_replica_shows_its_copies_and_protection_waits_for_their_proof() {
    let s = Server::start().await;
    // What a replica may not be.
    let mut bad = plan("home", "/home");
    bad["repository"] = json!("main");
    bad["replica"] = json!({"repository": "main", "lock_for": "0s", "require": "maybe"});
    let (status, v) = s.post("/api/v1/plans", OPERATOR, bad).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    for f in ["replica.lock_for", "replica.require"] {
        assert!(v["fields"][f].is_string(), "{f} missing in {v}");
    }
    let mut good = plan("home", "/home");
    good["replica"] =
        json!({"repository": "offsite", "lock_for": "30days", "require": "immutable-off-host"});
    let (status, v) = s.post("/api/v1/plans", OPERATOR, good).await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    assert_eq!(v["replica"]["repository"], "offsite");
    assert_eq!(v["replica"]["lock_for"], "30days");
    assert_eq!(v["replica"]["require"], "immutable-off-host");
    // The replica is listed before any copy is there.
    assert_eq!(v["copies"][0]["repository"], "offsite");
    assert_eq!(v["copies"][0]["current"], true);
    assert_eq!(v["copies"][0]["live"], 0);
    assert!(v["copies"][0]["location"].is_null(), "{v}");
    // A plan read back and sent again keeps its replica.
    let (status, again) = s
        .call(
            Method::PUT,
            "/api/v1/plans/home",
            Some(OPERATOR),
            Some(v.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["replica"], v["replica"]);

    let (status, _) = s
        .post("/api/v1/plans/home/run", OPERATOR, json!(null))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // Backup, copy, and each is verified and restore-tested on its own.
    let plan_view = until(&s, "/api/v1/plans/home", |p| {
        p["copies"][0]["recoverable"] == 1 && p["protection"]["status"] == "protected"
    })
    .await;
    let copies = &plan_view["copies"][0];
    assert_eq!(copies["location"], "remote");
    assert_eq!(copies["locks_enforced_by"], "storage");
    assert_eq!(copies["newest"]["immutable"], true);
    assert_eq!(copies["newest"]["state"], "recoverable");
    let copy = copies["newest"]["point"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let source = copies["newest"]["source"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_ne!(copy, source);
    let (_, c) = s.get(&format!("/api/v1/points/{copy}"), VIEWER).await;
    assert_eq!(c["repository"], "offsite");
    assert_eq!(c["copy_of"]["source"], source.as_str());
    let (_, own) = s.get(&format!("/api/v1/points/{source}"), VIEWER).await;
    assert_eq!(own["repository"], "default");
    assert!(own["copy_of"].is_null());
    // Its own proof: a verification and a restore test of the copy.
    let types: Vec<String> = c["history"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect();
    for t in [
        "copy.committed",
        "verification.passed",
        "restore_test.passed",
    ] {
        assert!(types.iter().any(|x| x == t), "{t} missing in {types:?}");
    }
    let (_, jobs) = s.get("/api/v1/jobs?plan=home&kind=copy", VIEWER).await;
    assert_eq!(jobs.as_array().map(Vec::len), Some(1), "{jobs}");
    // Prometheus sees the copy proven and immutable.
    let text = scrape(&s).await;
    assert!(
        text.contains("vouch_plan_copy_immutable{plan=\"home\",repository=\"offsite\"} 1"),
        "{text}"
    );
    assert!(
        text.contains(
            "vouch_plan_copy_last_recoverable_timestamp_seconds{plan=\"home\",repository=\"offsite\"}"
        ),
        "{text}"
    );
    s.stop().await;
}
