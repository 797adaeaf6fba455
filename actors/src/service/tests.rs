//! The service's supervision, end to end inside one actix system: a real
//! event log and sled read store in a temporary directory, a worker that
//! holds its first attempt until it is cancelled.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use vouch_events::{
    Event, EventLog, JobId, LogOptions, PacksReadBack, PointState, RepositoryId, SharedLog,
    SledStore, SnapshotId, VerificationPassed, VerifyDepth,
};

use super::command::{JobCommand, JobFailure, JobOutput, RunJob, Workers};
use super::dispatcher::Dispatcher;
use super::error::ServiceError;
use super::handle::{start, ServiceConfig, ServiceHandle};
use crate::BackoffPolicy;

/// Holds a job's first attempt until it is cancelled (as a worker whose
/// dispatcher went away must be); later attempts succeed.
struct HoldingWorker {
    attempts: Arc<AtomicU32>,
    cancelled: Arc<AtomicU32>,
}

impl Actor for HoldingWorker {
    type Context = Context<Self>;
}

impl Handler<RunJob> for HoldingWorker {
    type Result = ResponseFuture<Result<JobOutput, JobFailure>>;

    fn handle(&mut self, msg: RunJob, _: &mut Self::Context) -> Self::Result {
        let attempt = self.attempts.fetch_add(1, Ordering::SeqCst) + 1;
        let cancelled = self.cancelled.clone();
        Box::pin(async move {
            let JobCommand::ReadBack {
                repository,
                slices,
                of,
            } = msg.command
            else {
                return Err(JobFailure::new("unexpected", "not a read-back", false));
            };
            if attempt == 1 {
                let until = Instant::now() + Duration::from_secs(30);
                while !msg.cancel.is_cancelled() && Instant::now() < until {
                    actix::clock::sleep(Duration::from_millis(10)).await;
                }
                if msg.cancel.is_cancelled() {
                    cancelled.fetch_add(1, Ordering::SeqCst);
                }
                return Err(JobFailure::new("cancelled", "cancelled by request", false));
            }
            Ok(JobOutput {
                events: vec![PacksReadBack {
                    repository,
                    job: Some(msg.job),
                    slices,
                    of,
                    packs: 0,
                    bytes_read: 0,
                    damaged: Vec::new(),
                    damaged_packs: Vec::new(),
                    affected_points: Some(Vec::new()),
                }
                .into()],
            })
        })
    }
}

/// Makes the dispatcher panic in its handler.
#[derive(Message)]
#[rtype(result = "()")]
struct PanicNow;

impl Handler<PanicNow> for super::alerting::Alerter {
    type Result = ();

    fn handle(&mut self, _: PanicNow, _: &mut Self::Context) {
        panic!("a bug in the alerter (test)");
    }
}

impl Handler<PanicNow> for super::store::EventStore {
    type Result = ();

    fn handle(&mut self, _: PanicNow, _: &mut Self::Context) {
        panic!("simulated event store panic");
    }
}

impl Handler<PanicNow> for Dispatcher {
    type Result = ();

    fn handle(&mut self, _: PanicNow, _: &mut Self::Context) {
        panic!("a bug in the dispatcher (test)");
    }
}

async fn service(dir: &std::path::Path, worker: Addr<HoldingWorker>) -> ServiceHandle {
    service_with(
        dir,
        worker,
        Arc::new(crate::SystemClock),
        ServiceConfig::default(),
    )
    .await
}

/// A service whose log and actors read `clock` (one clock end to end).
async fn service_with<W>(
    dir: &std::path::Path,
    worker: Addr<W>,
    clock: Arc<dyn crate::Clock>,
    config: ServiceConfig,
) -> ServiceHandle
where
    W: Actor<Context = Context<W>> + Handler<RunJob>,
{
    let log =
        EventLog::open(dir.join("events"), LogOptions::default(), clock.clone()).expect("log");
    let store = SledStore::open(dir.join("read")).expect("read store");
    let workers = Workers {
        backup: worker.clone().recipient(),
        verify: worker.clone().recipient(),
        restore_test: worker.clone().recipient(),
        retention: worker.recipient(),
    };
    let config = ServiceConfig {
        restart: BackoffPolicy::new(
            Duration::from_millis(20),
            2,
            Duration::from_secs(1),
            Duration::from_secs(60),
        )
        .expect("policy"),
        version: "test".into(),
        ..config
    };
    start(Arc::new(SharedLog::new(log)), store, workers, clock, config)
        .await
        .expect("service")
}

/// Polls the log until `f` finds what it wants (at most 30 s).
async fn wait_for<T>(svc: &ServiceHandle, what: &str, f: impl Fn(&[Event]) -> Option<T>) -> T {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let events: Vec<Event> = svc
            .events(1, 10_000)
            .await
            .expect("events")
            .into_iter()
            .map(|e| e.event)
            .collect();
        if let Some(v) = f(&events) {
            return v;
        }
        assert!(
            Instant::now() < until,
            "timed out waiting for {what}: {events:#?}"
        );
        actix::clock::sleep(Duration::from_millis(20)).await;
    }
}

#[actix::test]
async fn a_panicking_dispatcher_is_restarted_and_its_running_job_is_abandoned_and_retried() {
    let dir = tempfile::tempdir().expect("tempdir");
    let attempts = Arc::new(AtomicU32::new(0));
    let cancelled = Arc::new(AtomicU32::new(0));
    let worker = HoldingWorker {
        attempts: attempts.clone(),
        cancelled: cancelled.clone(),
    }
    .start();
    let svc = service(dir.path(), worker).await;

    let job: JobId = svc
        .enqueue(JobCommand::ReadBack {
            repository: RepositoryId::new("default"),
            slices: vec![0],
            of: 1,
        })
        .await
        .expect("enqueued");
    let until = Instant::now() + Duration::from_secs(30);
    while attempts.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < until, "the worker never got the job");
        actix::clock::sleep(Duration::from_millis(10)).await;
    }

    // The panic loses the dispatcher's answer; the actor lives on.
    assert!(svc.dispatcher().send(PanicNow).await.is_err());

    let reason = wait_for(&svc, "job.abandoned", |events| {
        events.iter().find_map(|e| match e {
            Event::JobAbandoned(a) if a.job == job => Some(a.reason.clone()),
            _ => None,
        })
    })
    .await;
    assert!(
        reason.contains("dispatcher failed and was restarted"),
        "the reason says what happened: {reason}"
    );
    wait_for(&svc, "the retried attempt to finish", |events| {
        let rescheduled = events
            .iter()
            .position(|e| matches!(e, Event::JobScheduled(s) if s.job == job && s.attempt == 2))?;
        let read_back = events
            .iter()
            .position(|e| matches!(e, Event::PacksReadBack(r) if r.job.as_ref() == Some(&job)))?;
        let finished = events
            .iter()
            .position(|e| matches!(e, Event::JobFinished(f) if f.job == job))?;
        (rescheduled < read_back && read_back < finished).then_some(())
    })
    .await;
    assert_eq!(
        cancelled.load(Ordering::SeqCst),
        1,
        "the orphaned first attempt was asked to stop"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 2, "exactly one retry");

    // The same address keeps serving.
    let (queued, running) = svc.load().await.expect("load");
    assert_eq!((queued, running), (0, 0));
    // One attempt's end was recorded by nobody: no job.failed for it.
    let events = svc.events(1, 10_000).await.expect("events");
    assert!(!events
        .iter()
        .any(|e| matches!(&e.event, Event::JobFailed(f) if f.job == job)));
}

#[actix::test]
async fn a_query_that_panics_fails_alone_and_the_read_model_lives_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = HoldingWorker {
        attempts: Arc::new(AtomicU32::new(0)),
        cancelled: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let svc = service(dir.path(), worker).await;
    let before = svc.query(0, |p| p.last_seq).await.expect("query");
    assert!(before >= 1, "service.started is folded");

    let failed = svc
        .query(0, |_| -> u64 { panic!("a bug in a query (test)") })
        .await;
    assert!(
        failed.is_err(),
        "the caller of the panicking query gets an error"
    );

    let receipt = svc
        .append(vec![vouch_events::ServiceStarted {
            version: "after".into(),
        }
        .into()])
        .await
        .expect("append");
    let after = svc
        .query(receipt.last_seq, |p| p.last_seq)
        .await
        .expect("the read model answers again, with the new event");
    assert_eq!(after, receipt.last_seq);
}

/// How a [`ScriptedWorker`] answers its n-th job.
type Answer = Box<dyn Fn(u32, &RunJob) -> Result<JobOutput, JobFailure> + Send>;

/// A worker that answers every job at once, as its script says.
struct ScriptedWorker {
    answer: Answer,
    calls: Arc<AtomicU32>,
}

impl Actor for ScriptedWorker {
    type Context = Context<Self>;
}

impl Handler<RunJob> for ScriptedWorker {
    type Result = Result<JobOutput, JobFailure>;

    fn handle(&mut self, msg: RunJob, _: &mut Self::Context) -> Self::Result {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        (self.answer)(n, &msg)
    }
}

const T0: i64 = 1_800_000_000 * crate::NANOS_PER_SEC;

#[actix::test]
async fn one_manual_clock_drives_the_log_and_the_dispatcher() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = crate::ManualClock::new(T0);
    let calls = Arc::new(AtomicU32::new(0));
    let worker = ScriptedWorker {
        answer: Box::new(|_, _| Ok(JobOutput::default())),
        calls: calls.clone(),
    }
    .start();
    let svc = service_with(
        dir.path(),
        worker,
        Arc::new(clock.clone()),
        ServiceConfig::default(),
    )
    .await;
    let first = svc.events(1, 10).await.expect("events");
    assert_eq!(
        first[0].recorded_unix_ns, T0,
        "service.started at the manual time"
    );

    clock.advance(3_600 * crate::NANOS_PER_SEC);
    let job = svc
        .enqueue(JobCommand::ReadBack {
            repository: RepositoryId::new("default"),
            slices: vec![0],
            of: 1,
        })
        .await
        .expect("enqueued");
    let scheduled = wait_for(&svc, "job.scheduled", |events| {
        events.iter().find_map(|e| match e {
            Event::JobScheduled(s) if s.job == job => Some(s.clone()),
            _ => None,
        })
    })
    .await;
    assert_eq!(scheduled.due_unix_ns, T0 + 3_600 * crate::NANOS_PER_SEC);
    assert!(
        job.as_str().contains("20270115T"),
        "the job id carries the manual date: {job}"
    );
    let all = svc.events(1, 100).await.expect("events");
    let rec = all
        .iter()
        .find(|e| matches!(&e.event, Event::JobScheduled(s) if s.job == job))
        .expect("recorded");
    assert_eq!(rec.recorded_unix_ns, T0 + 3_600 * crate::NANOS_PER_SEC);
}

fn read_back_ok(job: &JobId, command: &JobCommand) -> JobOutput {
    let JobCommand::ReadBack {
        repository,
        slices,
        of,
    } = command.clone()
    else {
        return JobOutput::default();
    };
    JobOutput {
        events: vec![PacksReadBack {
            repository,
            job: Some(job.clone()),
            slices,
            of,
            packs: 0,
            bytes_read: 0,
            damaged: Vec::new(),
            damaged_packs: Vec::new(),
            affected_points: Some(Vec::new()),
        }
        .into()],
    }
}

fn scheduled_attempts(events: &[vouch_events::Envelope], job: &JobId) -> Vec<u32> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::JobScheduled(s) if &s.job == job => Some(s.attempt),
            _ => None,
        })
        .collect()
}

#[actix::test]
async fn a_retry_is_recorded_with_its_due_time_and_survives_a_dispatcher_restart_without_consuming_an_attempt(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = crate::ManualClock::new(T0);
    let calls = Arc::new(AtomicU32::new(0));
    let worker = ScriptedWorker {
        answer: Box::new(|n, msg| {
            if n == 1 {
                Err(JobFailure::new("io", "the disk hiccuped", true))
            } else {
                Ok(read_back_ok(&msg.job, &msg.command))
            }
        }),
        calls: calls.clone(),
    }
    .start();
    let config = ServiceConfig::default();
    let delay = config.dispatch.retry_backoff.delay(1);
    let svc = service_with(dir.path(), worker, Arc::new(clock.clone()), config).await;
    let job = svc
        .enqueue(JobCommand::ReadBack {
            repository: RepositoryId::new("default"),
            slices: vec![0, 2],
            of: 4,
        })
        .await
        .expect("enqueued");

    // job.failed and the retry's job.scheduled, one after the other.
    let (failed_seq, retry) = wait_for(&svc, "the recorded retry", |events| {
        let f = events
            .iter()
            .position(|e| matches!(e, Event::JobFailed(f) if f.job == job))?;
        match events.get(f + 1) {
            Some(Event::JobScheduled(s)) if s.job == job => Some((f, s.clone())),
            _ => None,
        }
    })
    .await;
    assert!(failed_seq > 0);
    assert_eq!(retry.attempt, 2);
    assert_eq!(
        retry.due_unix_ns,
        T0 + crate::duration_to_ns(delay),
        "due after the backoff, by the clock"
    );
    assert_eq!(retry.kind, vouch_events::JobKind::ReadBack);
    assert_eq!(retry.spec.slices, vec![0, 2]);
    assert_eq!(retry.spec.of, 4);
    assert_eq!(retry.spec.repository, Some(RepositoryId::new("default")));

    // Not due yet: the worker is not called again, whatever real time does.
    actix::clock::sleep(Duration::from_millis(300)).await;
    svc.tick().await.expect("tick");
    actix::clock::sleep(Duration::from_millis(100)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // The dispatcher fails: the retry waits in the log, not in a timer.
    assert!(svc.dispatcher().send(PanicNow).await.is_err());
    actix::clock::sleep(Duration::from_millis(300)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "still not due");

    clock.advance(crate::duration_to_ns(delay));
    svc.tick().await.expect("tick");
    wait_for(&svc, "the retry to finish", |events| {
        events
            .iter()
            .any(|e| matches!(e, Event::JobFinished(f) if f.job == job))
            .then_some(())
    })
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let events = svc.events(1, 10_000).await.expect("events");
    assert_eq!(
        scheduled_attempts(&events, &job),
        vec![1, 2],
        "the restart consumed no attempt"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(&e.event, Event::JobAbandoned(a) if a.job == job)),
        "a job that was only scheduled is not abandoned"
    );
}

#[actix::test]
async fn a_hung_job_is_abandoned_after_its_timeout_and_its_slot_freed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let attempts = Arc::new(AtomicU32::new(0));
    let cancelled = Arc::new(AtomicU32::new(0));
    let worker = HoldingWorker {
        attempts: attempts.clone(),
        cancelled: cancelled.clone(),
    }
    .start();
    let mut config = ServiceConfig::default();
    config.dispatch.max_concurrent = 1;
    config.dispatch.timeouts.read_back = Duration::from_millis(300);
    let svc = service_with(dir.path(), worker, Arc::new(crate::SystemClock), config).await;
    let job = svc
        .enqueue(JobCommand::ReadBack {
            repository: RepositoryId::new("default"),
            slices: vec![0],
            of: 1,
        })
        .await
        .expect("enqueued");
    let reason = wait_for(&svc, "job.abandoned", |events| {
        events.iter().find_map(|e| match e {
            Event::JobAbandoned(a) if a.job == job => Some(a.reason.clone()),
            _ => None,
        })
    })
    .await;
    assert!(reason.contains("timeout"), "{reason}");
    // The one slot is free again: the retry runs and finishes.
    wait_for(&svc, "the retry to finish", |events| {
        events
            .iter()
            .any(|e| matches!(e, Event::JobFinished(f) if f.job == job))
            .then_some(())
    })
    .await;
    let events = svc.events(1, 10_000).await.expect("events");
    assert_eq!(scheduled_attempts(&events, &job), vec![1, 2]);
    assert!(
        !events
            .iter()
            .any(|e| matches!(&e.event, Event::JobFailed(f) if f.job == job)),
        "the hung run's late answer is not recorded"
    );
    let until = Instant::now() + Duration::from_secs(5);
    while cancelled.load(Ordering::SeqCst) == 0 && Instant::now() < until {
        actix::clock::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        cancelled.load(Ordering::SeqCst),
        1,
        "the hung run was asked to stop"
    );
}

/// A webhook receiver on the loopback that keeps every body it is sent.
async fn webhook() -> (String, Arc<std::sync::Mutex<Vec<serde_json::Value>>>) {
    use actix_web::{web, App, HttpResponse, HttpServer};
    let bodies: Arc<std::sync::Mutex<Vec<serde_json::Value>>> = Arc::default();
    let kept = bodies.clone();
    let server = HttpServer::new(move || {
        let kept = kept.clone();
        App::new().route(
            "/hook",
            web::post().to(move |body: web::Json<serde_json::Value>| {
                let kept = kept.clone();
                async move {
                    kept.lock().expect("lock").push(body.into_inner());
                    HttpResponse::Ok().finish()
                }
            }),
        )
    })
    .workers(1)
    .bind(("127.0.0.1", 0))
    .expect("bind");
    let addr = server.addrs()[0];
    actix::spawn(server.run());
    (format!("http://{addr}/hook"), bodies)
}

fn damaged_read(damaged: bool) -> Event {
    PacksReadBack {
        repository: RepositoryId::new("default"),
        job: None,
        slices: vec![0],
        of: 1,
        packs: 1,
        bytes_read: 1,
        damaged: if damaged {
            vec!["pack 00: bad".into()]
        } else {
            Vec::new()
        },
        damaged_packs: if damaged {
            vec!["00".into()]
        } else {
            Vec::new()
        },
        affected_points: Some(Vec::new()),
    }
    .into()
}

#[actix::test]
async fn a_resolved_notification_after_an_alerter_restart_carries_the_firing_identity() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, bodies) = webhook().await;
    let worker = ScriptedWorker {
        answer: Box::new(|_, _| Ok(JobOutput::default())),
        calls: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let mut config = ServiceConfig::default();
    config.alerting.receivers = vec![super::alerting::Receiver {
        name: "am".into(),
        url,
        format: super::alerting::WebhookFormat::AlertmanagerWebhook,
        max_attempts: 3,
        retry_initial: Duration::from_millis(50),
        timeout: Duration::from_secs(5),
        ca_certs: Vec::new(),
        auth: None,
    }];
    config.scheduler.read_back = None;
    let clock = crate::ManualClock::new(T0);
    let svc = service_with(dir.path(), worker, Arc::new(clock.clone()), config).await;

    svc.append(vec![damaged_read(true)]).await.expect("append");
    svc.evaluate_alerts().await.expect("evaluate");
    let firing = wait_for_body(&bodies, "firing").await;

    // The alerter fails and is restarted: what it knew in memory is gone.
    assert!(svc.alerter().send(PanicNow).await.is_err());
    actix::clock::sleep(Duration::from_millis(200)).await;

    svc.append(vec![damaged_read(false)]).await.expect("append");
    clock.advance(crate::NANOS_PER_SEC);
    svc.evaluate_alerts().await.expect("evaluate");
    let resolved = wait_for_body(&bodies, "resolved").await;

    let labels = |b: &serde_json::Value| b["alerts"][0]["labels"].clone();
    assert_eq!(labels(&firing)["alertname"], "ReadBackDamaged");
    assert_eq!(labels(&firing)["repository"], "default");
    assert_eq!(
        labels(&resolved),
        labels(&firing),
        "the resolved message has the firing one's identity"
    );
    assert_eq!(
        resolved["alerts"][0]["startsAt"],
        firing["alerts"][0]["startsAt"]
    );
}

/// The alerts of `alertname` in the bodies an Alertmanager API receiver
/// got (each body an array), in order.
fn api_alerts(
    bodies: &std::sync::Mutex<Vec<serde_json::Value>>,
    alertname: &str,
) -> Vec<serde_json::Value> {
    bodies
        .lock()
        .expect("lock")
        .iter()
        .flat_map(|b| {
            b.as_array()
                .unwrap_or_else(|| panic!("not an array: {b}"))
                .clone()
        })
        .filter(|a| a["labels"]["alertname"] == alertname)
        .collect()
}

async fn wait_for_api_alerts(
    bodies: &std::sync::Mutex<Vec<serde_json::Value>>,
    what: &str,
    enough: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = api_alerts(bodies, "ReadBackDamaged");
        if enough(&seen) {
            return seen;
        }
        assert!(
            Instant::now() < until,
            "timed out waiting for {what}: {seen:?}"
        );
        actix::clock::sleep(Duration::from_millis(20)).await;
    }
}

#[actix::test]
async fn alertmanager_api_receivers_get_open_alerts_again_with_one_identity_across_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, bodies) = webhook().await;
    let worker = ScriptedWorker {
        answer: Box::new(|_, _| Ok(JobOutput::default())),
        calls: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let every = Duration::from_millis(150);
    let mut config = ServiceConfig::default();
    config.alerting.evaluate_every = every;
    config.alerting.external_url = "https://admin:pw@vouch.example.org/?t=1".into();
    config.alerting.receivers = vec![super::alerting::Receiver {
        name: "am".into(),
        url,
        format: super::alerting::WebhookFormat::AlertmanagerApi,
        max_attempts: 3,
        retry_initial: Duration::from_millis(50),
        timeout: Duration::from_secs(5),
        ca_certs: Vec::new(),
        auth: None,
    }];
    config.scheduler.read_back = None;
    let clock = crate::ManualClock::new(T0);
    let svc = service_with(dir.path(), worker, Arc::new(clock.clone()), config).await;
    let rfc = super::alerting::rfc3339;
    let firing_ends = rfc(T0 + 4 * 150 * 1_000_000);

    svc.append(vec![damaged_read(true)]).await.expect("append");
    svc.evaluate_alerts().await.expect("evaluate");
    // The first delivery and re-sends, every interval.
    let seen =
        wait_for_api_alerts(&bodies, "three sends of the open alert", |s| s.len() >= 3).await;
    let first = seen[0].clone();
    assert_eq!(first["labels"]["repository"], "default");
    assert_eq!(first["labels"]["severity"], "critical");
    assert_eq!(first["endsAt"], firing_ends, "now + 4 intervals");
    assert_eq!(
        first["generatorURL"], "https://vouch.example.org/#/alerts",
        "no credentials or query in the link"
    );
    for a in &seen {
        assert_eq!(a["labels"], first["labels"]);
        assert_eq!(a["endsAt"], firing_ends);
    }

    // The alerter fails and is restarted: the re-sends go on, from the log.
    assert!(svc.alerter().send(PanicNow).await.is_err());
    let n = seen.len();
    let seen =
        wait_for_api_alerts(&bodies, "re-sends after the restart", |s| s.len() >= n + 2).await;
    for a in &seen[n..] {
        assert_eq!(
            a["labels"], first["labels"],
            "the same identity after a restart"
        );
        assert_eq!(a["startsAt"], seen[n]["startsAt"]);
    }

    // Resolved: sent with its own time as endsAt (and once more with the
    // next re-send), then no more.
    svc.append(vec![damaged_read(false)]).await.expect("append");
    clock.advance(crate::NANOS_PER_SEC);
    svc.evaluate_alerts().await.expect("evaluate");
    let resolved_at = rfc(T0 + crate::NANOS_PER_SEC);
    let is_resolved = |a: &serde_json::Value| a["endsAt"] == resolved_at;
    wait_for_api_alerts(&bodies, "the resolution, twice", |s| {
        s.iter().filter(|a| is_resolved(a)).count() >= 2
    })
    .await;
    actix::clock::sleep(every * 4).await;
    let seen = api_alerts(&bodies, "ReadBackDamaged");
    let first_resolved = seen.iter().position(is_resolved).expect("resolved");
    for a in &seen[first_resolved..] {
        assert!(is_resolved(a), "nothing firing after the resolution: {a}");
        assert_eq!(a["labels"], first["labels"], "the resolution's identity");
    }
    assert_eq!(
        seen.iter().filter(|a| is_resolved(a)).count(),
        2,
        "the resolution and its one echo"
    );
    // Re-sends are not events: one delivery recorded per message.
    let delivered: Vec<String> = svc
        .events(1, 10_000)
        .await
        .expect("events")
        .into_iter()
        .filter_map(|e| match e.event {
            Event::AlertDelivered(d) => Some(d.receiver),
            _ => None,
        })
        .collect();
    assert_eq!(delivered, ["am", "am/resolved"]);
    let counts = svc.alert_resends();
    assert_eq!(counts.len(), 1);
    assert!(counts[0].1 >= 3 && counts[0].2 == 0, "{counts:?}");
}

async fn wait_for_body(
    bodies: &std::sync::Mutex<Vec<serde_json::Value>>,
    status: &str,
) -> serde_json::Value {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(b) = bodies
            .lock()
            .expect("lock")
            .iter()
            .find(|b| b["status"] == status)
        {
            return b.clone();
        }
        assert!(Instant::now() < until, "no {status} notification arrived");
        actix::clock::sleep(Duration::from_millis(20)).await;
    }
}

#[actix::test]
async fn a_clock_behind_the_log_is_recorded_once_as_a_clock_step() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        // An earlier run whose clock ran a day fast.
        let ahead = crate::ManualClock::new(T0 + 86_400 * crate::NANOS_PER_SEC);
        let log = EventLog::open(
            dir.path().join("events"),
            LogOptions::default(),
            Arc::new(ahead),
        )
        .expect("log");
        let shared = SharedLog::new(log);
        shared
            .append(vec![vouch_events::ServiceStarted {
                version: "before".into(),
            }
            .into()])
            .expect("append");
    }
    let worker = ScriptedWorker {
        answer: Box::new(|_, _| Ok(JobOutput::default())),
        calls: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let svc = service_with(
        dir.path(),
        worker,
        Arc::new(crate::ManualClock::new(T0)),
        ServiceConfig::default(),
    )
    .await;
    let steps: Vec<vouch_events::ClockStepped> = svc
        .events(1, 100)
        .await
        .expect("events")
        .into_iter()
        .filter_map(|e| match e.event {
            Event::ClockStepped(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert_eq!(
        steps[0].previous_unix_ns,
        T0 + 86_400 * crate::NANOS_PER_SEC
    );
    assert_eq!(steps[0].now_unix_ns, T0);
}

/// L10: a read model that panicked while folding and cannot be reopened
/// refuses queries (the service is unavailable) instead of answering from
/// projections a panic may have half-applied, and answers again once a
/// reopen succeeds.
#[actix::test]
async fn a_read_model_that_cannot_reopen_refuses_queries_until_it_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let attempts = Arc::new(AtomicU32::new(0));
    let worker = HoldingWorker {
        attempts: attempts.clone(),
        cancelled: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let svc = service(dir.path(), worker).await;
    let last = svc.query(0, |p| p.last_seq).await.expect("query");
    assert!(last > 0);

    // The log's files go away (an unmounted disk): a reopen fails.
    let events = dir.path().join("events");
    let aside = dir.path().join("events-aside");
    std::fs::rename(&events, &aside).expect("move the log away");
    std::fs::create_dir(&events).expect("empty log directory");
    let panicked = svc
        .query(0, |_| -> u64 { panic!("simulated panic while folding") })
        .await;
    assert!(panicked.is_err(), "the query that panicked gets no answer");
    let refused = svc.query(0, |p| p.last_seq).await;
    match refused {
        Err(ServiceError::Unavailable(why)) => {
            assert!(why.contains("could not be reopened"), "{why}")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }

    // The disk comes back: within the retry interval, queries are answered.
    std::fs::remove_dir(&events).expect("rmdir");
    std::fs::rename(&aside, &events).expect("move the log back");
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        match svc.query(0, |p| p.last_seq).await {
            Ok(seq) => {
                // The alerter may have recorded `ReadModelUnavailable`
                // meanwhile.
                assert!(
                    seq >= last && seq <= svc.last_seq(),
                    "the reopened state is the log's: {seq}"
                );
                break;
            }
            Err(ServiceError::Unavailable(_)) => {
                assert!(Instant::now() < until, "never reopened");
                actix::clock::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
}

/// L6: an append in flight when the event store panics (and is restarted)
/// is answered with the truth: its events are durable, so its caller gets
/// the receipt, not an error; and the store publishes after the restart.
#[actix::test]
async fn an_append_in_flight_across_a_store_restart_is_acknowledged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = HoldingWorker {
        attempts: Arc::new(AtomicU32::new(0)),
        cancelled: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let svc = service(dir.path(), worker).await;
    let before = svc.last_seq();
    let events: Vec<Event> = (0..2000)
        .map(|i| {
            vouch_events::JobFinished {
                job: JobId::new(format!("job-{i}")),
            }
            .into()
        })
        .collect();
    // The append is handled (its write starts on the blocking pool), then
    // the panic restarts the store while the write is still going.
    let store = svc.event_store().clone();
    let append = store.send(super::store::Append(events));
    let panic = store.send(PanicNow);
    let (appended, panicked) = tokio::join!(append, panic);
    assert!(panicked.is_err(), "the panic loses its own answer");
    let receipt = appended
        .expect("the store's mailbox survives the restart")
        .expect("durable events are acknowledged");
    assert_eq!(receipt.first_seq, before + 1);
    assert_eq!(receipt.last_seq, before + 2000);
    // Published after the restart: the read model sees them.
    let seen = svc
        .query(receipt.last_seq, |p| p.last_seq)
        .await
        .expect("query");
    assert!(seen >= receipt.last_seq);
}

/// An evaluation asked for while another one reads the projections runs
/// after the first one's `alert.raised` is recorded, and reads at least up
/// to it: an incident gets one alert, not two with the same id (L5; the
/// simulation found it, seed 0 at step 9).
#[actix::test]
async fn an_evaluation_asked_for_during_another_does_not_raise_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = ScriptedWorker {
        answer: Box::new(|_, _| Ok(JobOutput::default())),
        calls: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let mut config = ServiceConfig::default();
    config.scheduler.read_back = None;
    let clock = crate::ManualClock::new(T0);
    let svc = service_with(dir.path(), worker, Arc::new(clock.clone()), config).await;
    for round in 0..20 {
        // Damage found (its commit asks for an evaluation), then more
        // evaluations at once: each later one finds the first in flight.
        svc.append(vec![damaged_read(round % 2 == 0)])
            .await
            .expect("append");
        let _ = tokio::join!(
            svc.evaluate_alerts(),
            svc.evaluate_alerts(),
            svc.evaluate_alerts()
        );
        clock.advance(crate::NANOS_PER_SEC);
    }
    actix::clock::sleep(Duration::from_millis(300)).await;
    let events = svc.events(1, 10_000).await.expect("events");
    let mut open: std::collections::HashMap<String, String> = Default::default();
    for e in &events {
        match &e.event {
            Event::AlertRaised(a) => {
                if let Some(other) = open.insert(a.subject.clone(), a.alert.to_string()) {
                    panic!(
                        "seq {}: a second alert {} for {:?} while {other} is open",
                        e.seq, a.alert, a.subject
                    );
                }
            }
            Event::AlertResolved(r) => {
                let before = open.len();
                open.retain(|_, id| id.as_str() != r.alert.as_str());
                assert_eq!(
                    open.len() + 1,
                    before,
                    "seq {}: {} resolved but not open",
                    e.seq,
                    r.alert
                );
            }
            _ => {}
        }
    }
}

/// Flips one byte of the first occurrence of `marker` in the log's segment
/// files; returns whether it was found.
fn flip_in_segments(events_dir: &std::path::Path, marker: &[u8]) -> bool {
    let mut entries: Vec<_> = std::fs::read_dir(events_dir)
        .expect("log dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        let Ok(mut bytes) = std::fs::read(&path) else {
            continue;
        };
        if let Some(at) = bytes.windows(marker.len()).position(|w| w == marker) {
            bytes[at] ^= 0x20;
            std::fs::write(&path, bytes).expect("write segment");
            return true;
        }
    }
    false
}

/// Review L4: the log's open only looks at its tail, so damage to an
/// acknowledged event in the middle of the log went unseen. The scrub
/// re-reads every committed record: a clean log is recorded as verified,
/// a flipped byte in an old event as `service.log_scrubbed` naming its
/// seq, and the alerter raises the critical `LogDamaged` alert.
#[actix::test]
async fn a_scrub_finds_damage_to_an_acknowledged_event_and_raises_log_damaged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = ScriptedWorker {
        answer: Box::new(|_, _| Ok(JobOutput::default())),
        calls: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let svc = service_with(
        dir.path(),
        worker,
        Arc::new(crate::ManualClock::new(T0)),
        ServiceConfig {
            scrub_every: None,
            ..ServiceConfig::default()
        },
    )
    .await;
    let marker = "marker-7f3a9c-in-the-middle";
    let marked = svc
        .append(vec![vouch_events::ServiceStarted {
            version: marker.into(),
        }
        .into()])
        .await
        .expect("append")
        .last_seq;
    svc.append(vec![vouch_events::ServiceStarted {
        version: "after".into(),
    }
    .into()])
        .await
        .expect("append");

    let clean = svc.scrub_log().await.expect("scrub");
    assert!(clean.ok(), "an intact log verifies: {clean:?}");
    assert_eq!(clean.events, clean.through_seq, "every committed event");
    assert!(clean.through_seq > marked);
    assert_eq!(clean.damaged_seq, None);

    assert!(
        flip_in_segments(&dir.path().join("events"), marker.as_bytes()),
        "the marker is in a segment"
    );
    let found = svc.scrub_log().await.expect("scrub");
    assert!(!found.ok(), "the flipped byte is found: {found:?}");
    assert_eq!(found.damaged_seq, Some(marked), "{found:?}");
    assert_eq!(found.events, marked - 1, "the events before it verified");
    svc.evaluate_alerts().await.expect("evaluate");
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let open: Vec<(String, vouch_events::Severity)> = svc
            .query(0, |p| {
                p.alerts
                    .open()
                    .map(|a| (a.subject.clone(), a.severity))
                    .collect()
            })
            .await
            .expect("query");
        if open.iter().any(|(s, _)| s == "event log damaged") {
            assert!(open.contains(&(
                "event log damaged".to_owned(),
                vouch_events::Severity::Critical
            )));
            break;
        }
        assert!(Instant::now() < until, "no LogDamaged alert: {open:?}");
        actix::clock::sleep(Duration::from_millis(20)).await;
    }
}

/// A service whose ticks come from the test only, with one paused plan
/// (so a tick proposes only repository jobs) into repository `main`.
async fn paused_plan_service(
    dir: &std::path::Path,
    clock: Arc<crate::ManualClock>,
    scheduler: super::scheduler::SchedulerConfig,
) -> ServiceHandle {
    use vouch_events::{
        KeepPolicy, PlanCreated, PlanDefinition, PlanId, RestoreTestPolicy, VerificationPolicy,
        VerifyDepth,
    };
    let worker = ScriptedWorker {
        answer: Box::new(|_, _| Ok(JobOutput::default())),
        calls: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let day = Duration::from_secs(24 * 3600);
    let svc = service_with(
        dir,
        worker,
        clock,
        ServiceConfig {
            scheduler: super::scheduler::SchedulerConfig {
                // Ticks come from the test only.
                tick: Duration::from_secs(365 * 24 * 3600),
                read_back: None,
                ..scheduler
            },
            scrub_every: None,
            ..ServiceConfig::default()
        },
    )
    .await;
    let seq = svc
        .append(vec![PlanCreated {
            plan: PlanId::new("docs"),
            definition: PlanDefinition {
                source: "/srv".into(),
                schedule: "0 3 * * *".into(),
                retention: KeepPolicy::default(),
                verification: VerificationPolicy {
                    after_backup: true,
                    every: None,
                    depth: VerifyDepth::Structure,
                },
                restore_test: RestoreTestPolicy {
                    every: None,
                    max_evidence_age: day,
                    sample_files: None,
                    full_every: None,
                    boot: None,
                },
                rpo: day,
                repository: RepositoryId::new("main"),
                paused: true,
                replica: None,
                proxmox: None,
                anomaly_lock: None,
                files: Default::default(),
                hooks: Default::default(),
                time_zone: None,
            },
        }
        .into()])
        .await
        .expect("plan")
        .last_seq;
    svc.query(seq, |_| ()).await.expect("folded");
    svc
}

/// Issue 18: every repository in use is pruned an hour after a start (or
/// `prune_every`, when shorter), then every `prune_every`; never with
/// `prune_every` off.
#[actix::test]
async fn repositories_are_pruned_an_hour_after_start_then_every_prune_every() {
    use super::scheduler::SchedulerConfig;
    use vouch_events::JobKind;
    let hour = Duration::from_secs(3600);
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(crate::ManualClock::new(T0));
    let svc = paused_plan_service(
        dir.path(),
        clock.clone(),
        SchedulerConfig {
            reconcile_every: None,
            prune_every: Some(24 * hour),
            ..SchedulerConfig::default()
        },
    )
    .await;
    let prunes = |n: usize| {
        move |events: &[Event]| {
            let got = events
                .iter()
                .filter(|e| matches!(e, Event::JobScheduled(s) if s.kind == JobKind::Prune && s.spec.repository == Some(RepositoryId::new("main"))))
                .count();
            (got >= n).then_some(got)
        }
    };
    // The first tick reconciles (always, at start); no prune yet.
    assert_eq!(
        svc.tick().await.expect("tick"),
        1,
        "the first tick: reconcile only"
    );
    clock.advance(crate::duration_to_ns(hour) - 1);
    assert_eq!(svc.tick().await.expect("tick"), 0, "not before an hour");
    clock.advance(1);
    assert_eq!(
        svc.tick().await.expect("tick"),
        1,
        "an hour after the start"
    );
    assert_eq!(wait_for(&svc, "the first prune", prunes(1)).await, 1);
    // Ended before the next is due: an open prune is not doubled.
    wait_for(&svc, "the first prune to end", |events: &[Event]| {
        events
            .iter()
            .any(|e| matches!(e, Event::JobFinished(f) if f.job.as_str().starts_with("prune-")))
            .then_some(())
    })
    .await;
    clock.advance(crate::duration_to_ns(12 * hour));
    assert_eq!(svc.tick().await.expect("tick"), 0, "not before prune_every");
    clock.advance(crate::duration_to_ns(12 * hour));
    assert_eq!(svc.tick().await.expect("tick"), 1, "prune_every later");
    assert_eq!(wait_for(&svc, "the second prune", prunes(2)).await, 2);

    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(crate::ManualClock::new(T0));
    let svc = paused_plan_service(
        dir.path(),
        clock.clone(),
        SchedulerConfig {
            reconcile_every: None,
            prune_every: None,
            ..SchedulerConfig::default()
        },
    )
    .await;
    assert_eq!(svc.tick().await.expect("tick"), 1);
    clock.advance(crate::duration_to_ns(48 * hour));
    assert_eq!(svc.tick().await.expect("tick"), 0, "prune_every off: never");
}

/// Review H2: every repository in use is reconciled with the log on the
/// first tick after a start, not again on the next tick, and again once
/// `reconcile_every` passed (by the service's clock).
#[actix::test]
async fn repositories_are_reconciled_at_start_and_every_reconcile_every() {
    use super::scheduler::SchedulerConfig;
    use vouch_events::JobKind;
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(crate::ManualClock::new(T0));
    let day = Duration::from_secs(24 * 3600);
    let svc = paused_plan_service(
        dir.path(),
        clock.clone(),
        SchedulerConfig {
            reconcile_every: Some(day),
            prune_every: None,
            ..SchedulerConfig::default()
        },
    )
    .await;
    let reconciles = |n: usize| {
        move |events: &[Event]| {
            let got: Vec<&RepositoryId> = events
                .iter()
                .filter_map(|e| match e {
                    Event::JobScheduled(s) if s.kind == JobKind::Reconcile => {
                        s.spec.repository.as_ref()
                    }
                    _ => None,
                })
                .collect();
            (got.len() >= n).then_some(got.len())
        }
    };
    // A tick answers with how many jobs it proposed (the plan is paused:
    // only reconciliations).
    assert_eq!(svc.tick().await.expect("tick"), 1, "the first tick");
    assert_eq!(
        wait_for(&svc, "the first reconcile", reconciles(1)).await,
        1
    );
    assert_eq!(svc.tick().await.expect("tick"), 0, "not on the next tick");
    clock.advance(crate::duration_to_ns(day / 2));
    assert_eq!(
        svc.tick().await.expect("tick"),
        0,
        "not before reconcile_every"
    );
    clock.advance(crate::duration_to_ns(day / 2));
    assert_eq!(svc.tick().await.expect("tick"), 1, "after reconcile_every");
    assert_eq!(
        wait_for(&svc, "the periodic reconcile", reconciles(2)).await,
        2
    );
}

fn commit(point: SnapshotId) -> Event {
    vouch_events::BackupCommitted {
        job: None,
        plan: None,
        repository: RepositoryId::new("default"),
        snapshot: point,
        snapshot_time_unix_ns: T0,
        summary: vouch_events::BackupSummary {
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
}

/// L3: a worker's result must be about the job that ran. A verification
/// of point A that returns a pass of point B, and one that returns the
/// `job.finished` of another job, are refused: nothing they say is
/// appended, the job failed with `foreign_result`, point B is untouched and
/// point A, whose check ended without a verdict, is held at `unknown`.
#[actix::test]
async fn a_result_about_another_point_or_job_is_refused_and_the_job_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (SnapshotId([0xa; 32]), SnapshotId([0xb; 32]));
    let worker = ScriptedWorker {
        answer: Box::new(move |n, msg| {
            let events = if n == 1 {
                vec![VerificationPassed {
                    point: b,
                    job: Some(msg.job.clone()),
                    depth: VerifyDepth::Structure,
                    bytes_read: 1,
                    blobs_checked: 1,
                }
                .into()]
            } else {
                vec![vouch_events::JobFinished {
                    job: JobId::new("someone-else"),
                }
                .into()]
            };
            Ok(JobOutput { events })
        }),
        calls: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let svc = service_with(
        dir.path(),
        worker,
        Arc::new(crate::SystemClock),
        ServiceConfig::default(),
    )
    .await;
    svc.append(vec![commit(a), commit(b)])
        .await
        .expect("commit");
    let verify = || JobCommand::Verify {
        point: a,
        plan: None,
        repository: RepositoryId::new("default"),
        depth: VerifyDepth::Structure,
    };
    for (i, expected) in ["about point", "names job someone-else"].iter().enumerate() {
        let job = svc.enqueue(verify()).await.expect("enqueued");
        let failed = wait_for(&svc, "job.failed", |events| {
            events.iter().find_map(|e| match e {
                Event::JobFailed(f) if f.job == job => Some(f.clone()),
                _ => None,
            })
        })
        .await;
        assert_eq!(failed.error_kind, super::FOREIGN_RESULT, "run {i}");
        assert!(!failed.retryable);
        assert!(
            failed.message.contains(expected),
            "run {i}: {}",
            failed.message
        );
    }
    let events = svc.events(1, 10_000).await.expect("events");
    assert!(
        !events.iter().any(|e| matches!(
            &e.event,
            Event::VerificationPassed(_) | Event::JobFinished(_)
        )),
        "a refused result was appended: {events:#?}"
    );
    let (state_a, state_b, inconsistent) = svc
        .query(svc.last_seq(), move |p| {
            (
                p.points.points.get(&a).map(|pt| pt.state),
                p.points.points.get(&b).map(|pt| pt.state),
                p.inconsistencies_total,
            )
        })
        .await
        .expect("query");
    assert_eq!(state_b, Some(PointState::Unverified));
    assert_eq!(state_a, Some(PointState::Unknown));
    assert_eq!(inconsistent, 0);
}

/// A service whose periodic evaluations and ticks are an hour apart: only
/// commits trigger evaluations in a test's time.
fn slow_config() -> ServiceConfig {
    let mut config = ServiceConfig::default();
    config.scheduler.read_back = None;
    config.scheduler.tick = Duration::from_secs(3600);
    config.alerting.evaluate_every = Duration::from_secs(3600);
    config
}

/// Open lead of the simulation (seed 95): the evaluation a commit triggers
/// read the projections at the alerter's own last append, not at the
/// commit. With the read model's copy of the batch dropped on a full
/// mailbox, it read projections without the commit, and the incident stayed
/// open until the next periodic evaluation.
#[actix::test]
async fn an_alert_resolves_within_the_commit_that_ends_its_incident() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = ScriptedWorker {
        answer: Box::new(|_, _| Ok(JobOutput::default())),
        calls: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let clock = crate::ManualClock::new(T0);
    let svc = service_with(dir.path(), worker, Arc::new(clock.clone()), slow_config()).await;

    svc.append(vec![damaged_read(true)]).await.expect("append");
    let raised = wait_for(&svc, "alert.raised", |events| {
        events.iter().find_map(|e| match e {
            Event::AlertRaised(a) if a.rule == "ReadBackDamaged" => Some(a.alert.clone()),
            _ => None,
        })
    })
    .await;

    // Hold the read model on a query and fill its mailbox: the store's
    // fan-out of the next batch to it is dropped.
    let (release, held) = std::sync::mpsc::channel::<()>();
    let read = svc.read_model().clone();
    let holding = read.send(super::read_model::Query::new(0, move |_| {
        let _ = held.recv_timeout(Duration::from_secs(30));
    }));
    let holding = actix::spawn(holding);
    let mut filled = 0;
    while read
        .try_send(super::read_model::Query::new(0, |_| ()))
        .is_ok()
    {
        filled += 1;
        assert!(filled < 100_000, "the read model's mailbox never filled");
    }
    // The first batch takes the store's own slot in the full mailbox
    // (actix lets each sender past a full mailbox once); the later ones,
    // the last of which ends the incident, are dropped. Each is waited
    // for on the live stream, which the store feeds just before it hands
    // the batch to its subscribers.
    let mut live = svc.subscribe_events();
    for i in 0..4 {
        if i == 3 {
            clock.advance(crate::NANOS_PER_SEC);
        }
        let event: Event = if i == 3 {
            damaged_read(false)
        } else {
            vouch_events::ServiceStarted {
                version: "filler".into(),
            }
            .into()
        };
        let receipt = svc.append(vec![event]).await.expect("append");
        while live.recv().await.expect("live").seq < receipt.last_seq {}
    }
    // The store's hand-over to its subscribers follows the live stream at
    // once, on its own thread.
    actix::clock::sleep(Duration::from_millis(100)).await;
    release.send(()).expect("release");
    let _ = holding.await;

    wait_for(&svc, "alert.resolved", |events| {
        events.iter().find_map(|e| match e {
            Event::AlertResolved(r) if r.alert == raised => Some(()),
            _ => None,
        })
    })
    .await;
}

/// A failed read of the projections (the read model cannot reopen) is
/// tried again with a backoff: the commit's resolution is not left to the
/// next periodic evaluation.
#[actix::test]
async fn an_evaluation_that_could_not_read_the_projections_is_retried() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = ScriptedWorker {
        answer: Box::new(|_, _| Ok(JobOutput::default())),
        calls: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let clock = crate::ManualClock::new(T0);
    let config = ServiceConfig {
        checkpoint_every: Duration::from_millis(20),
        ..slow_config()
    };
    let svc = service_with(dir.path(), worker, Arc::new(clock.clone()), config).await;
    svc.append(vec![damaged_read(true)]).await.expect("append");
    let raised = wait_for(&svc, "alert.raised", |events| {
        events.iter().find_map(|e| match e {
            Event::AlertRaised(a) if a.rule == "ReadBackDamaged" => Some(a.alert.clone()),
            _ => None,
        })
    })
    .await;
    // A checkpoint of the read store holds the alert (so a reopen over an
    // empty log is refused as the read store being ahead).
    actix::clock::sleep(Duration::from_millis(300)).await;

    // The read model fails and cannot reopen (its log is out of reach).
    let events = dir.path().join("events");
    let aside = dir.path().join("events-aside");
    std::fs::rename(&events, &aside).expect("move the log away");
    std::fs::create_dir(&events).expect("empty log directory");
    let panicked = svc
        .query(0, |_| -> u64 { panic!("simulated panic while folding") })
        .await;
    assert!(panicked.is_err());
    assert!(matches!(
        svc.query(0, |p| p.last_seq).await,
        Err(ServiceError::Unavailable(_))
    ));
    // The commit that ends the incident: its evaluation cannot read.
    clock.advance(crate::NANOS_PER_SEC);
    std::fs::remove_dir(&events).expect("rmdir");
    std::fs::rename(&aside, &events).expect("move the log back");
    svc.append(vec![damaged_read(false)]).await.expect("append");

    wait_for(&svc, "alert.resolved", |events| {
        events.iter().find_map(|e| match e {
            Event::AlertResolved(r) if r.alert == raised => Some(()),
            _ => None,
        })
    })
    .await;
}

fn receiver(url: String) -> super::alerting::Receiver {
    super::alerting::Receiver {
        name: "hook".into(),
        url,
        format: super::alerting::WebhookFormat::Json,
        max_attempts: 3,
        retry_initial: Duration::from_millis(50),
        timeout: Duration::from_secs(5),
        ca_certs: Vec::new(),
        auth: None,
    }
}

/// The JSON bodies of `rule` with `status`.
fn bodies_of(
    bodies: &std::sync::Mutex<Vec<serde_json::Value>>,
    rule: &str,
    status: &str,
) -> Vec<serde_json::Value> {
    bodies
        .lock()
        .expect("lock")
        .iter()
        .filter(|b| b["alert"]["rule"] == rule && b["status"] == status)
        .cloned()
        .collect()
}

async fn wait_for_rule(
    bodies: &std::sync::Mutex<Vec<serde_json::Value>>,
    rule: &str,
    status: &str,
) -> serde_json::Value {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(b) = bodies_of(bodies, rule, status).pop() {
            return b;
        }
        assert!(
            Instant::now() < until,
            "no {status} {rule} arrived: {:#?}",
            bodies.lock().expect("lock")
        );
        actix::clock::sleep(Duration::from_millis(20)).await;
    }
}

/// M10: while the log refuses appends, receivers are told (the alert
/// cannot be recorded); once it takes writes again the alert is recorded
/// with its resolution and receivers are told it is resolved, once each.
#[actix::test]
async fn a_log_that_refuses_appends_alerts_the_receivers_and_records_it_afterwards() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, bodies) = webhook().await;
    let worker = ScriptedWorker {
        answer: Box::new(|_, _| Ok(JobOutput::default())),
        calls: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let mut config = slow_config();
    config.alerting.receivers = vec![receiver(url)];
    let clock = crate::ManualClock::new(T0);
    let svc = service_with(dir.path(), worker, Arc::new(clock.clone()), config).await;

    let health = svc.append_health_for_tests();
    health.refuse_appends(true);
    assert!(svc.append(vec![damaged_read(false)]).await.is_err());
    assert!(!svc.append_status().healthy);
    svc.evaluate_alerts().await.expect("evaluate");
    let firing = wait_for_rule(&bodies, "LogNotWritable", "firing").await;
    assert_eq!(firing["alert"]["severity"], "critical");
    // Evaluations while it lasts neither record nor deliver it again.
    clock.advance(crate::NANOS_PER_SEC);
    svc.evaluate_alerts().await.expect("evaluate");
    svc.evaluate_alerts().await.expect("evaluate");
    let in_log = |events: &[Event]| {
        events
            .iter()
            .any(|e| matches!(e, Event::AlertRaised(a) if a.rule == "LogNotWritable"))
    };
    let events: Vec<Event> = svc
        .events(1, 10_000)
        .await
        .expect("events")
        .into_iter()
        .map(|e| e.event)
        .collect();
    assert!(!in_log(&events), "it could not be recorded");

    // The disk has room again: another append goes through first.
    health.refuse_appends(false);
    clock.advance(crate::NANOS_PER_SEC);
    svc.append(vec![damaged_read(false)]).await.expect("append");
    let resolved = wait_for_rule(&bodies, "LogNotWritable", "resolved").await;
    assert_eq!(resolved["alert"]["alert"], firing["alert"]["alert"]);
    let id = firing["alert"]["alert"].as_str().expect("id").to_owned();
    let (raised, ended) = wait_for(&svc, "the alert recorded and resolved", |events| {
        let raised = events
            .iter()
            .filter(|e| matches!(e, Event::AlertRaised(a) if a.alert.as_str() == id))
            .count();
        let ended = events
            .iter()
            .filter(|e| matches!(e, Event::AlertResolved(r) if r.alert.as_str() == id))
            .count();
        (raised > 0 && ended > 0).then_some((raised, ended))
    })
    .await;
    assert_eq!((raised, ended), (1, 1));
    actix::clock::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        bodies_of(&bodies, "LogNotWritable", "firing").len(),
        1,
        "{:#?}",
        bodies.lock().expect("lock")
    );
    assert_eq!(bodies_of(&bodies, "LogNotWritable", "resolved").len(), 1);
}

/// M10: a read model that refuses queries (it could not be reopened) is an
/// alert, raised without it, and resolved once it answers again.
#[actix::test]
async fn a_read_model_that_refuses_queries_raises_an_alert_without_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, bodies) = webhook().await;
    let worker = ScriptedWorker {
        answer: Box::new(|_, _| Ok(JobOutput::default())),
        calls: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let mut config = ServiceConfig {
        checkpoint_every: Duration::from_millis(20),
        ..slow_config()
    };
    config.alerting.receivers = vec![receiver(url)];
    let clock = crate::ManualClock::new(T0);
    let svc = service_with(dir.path(), worker, Arc::new(clock.clone()), config).await;
    svc.append(vec![damaged_read(false)]).await.expect("append");
    // A checkpoint ahead of an empty log makes a reopen fail.
    actix::clock::sleep(Duration::from_millis(300)).await;
    assert_eq!(svc.read_model_unavailable(), None);

    let events = dir.path().join("events");
    let aside = dir.path().join("events-aside");
    std::fs::rename(&events, &aside).expect("move the log away");
    std::fs::create_dir(&events).expect("empty log directory");
    assert!(svc
        .query(0, |_| -> u64 { panic!("simulated panic while folding") })
        .await
        .is_err());
    assert!(matches!(
        svc.query(0, |p| p.last_seq).await,
        Err(ServiceError::Unavailable(_))
    ));
    assert!(svc.read_model_unavailable().is_some());
    std::fs::remove_dir(&events).expect("rmdir");
    std::fs::rename(&aside, &events).expect("move the log back");
    svc.evaluate_alerts().await.expect("evaluate");
    let firing = wait_for_rule(&bodies, "ReadModelUnavailable", "firing").await;
    assert_eq!(firing["alert"]["severity"], "critical");
    let id = firing["alert"]["alert"].as_str().expect("id").to_owned();
    wait_for(&svc, "the alert recorded", |events| {
        events
            .iter()
            .any(|e| matches!(e, Event::AlertRaised(a) if a.alert.as_str() == id))
            .then_some(())
    })
    .await;
    // The alerter restarts while the read model is still out: what is open
    // comes from the log, so it does not raise the alert a second time.
    assert!(svc.alerter().send(PanicNow).await.is_err());
    actix::clock::sleep(Duration::from_millis(200)).await;
    svc.evaluate_alerts().await.expect("evaluate");
    actix::clock::sleep(Duration::from_millis(200)).await;
    assert!(svc.read_model_unavailable().is_some(), "still out");
    // Reopened (every 5 s): resolved by the retried evaluation.
    let resolved = wait_for_rule(&bodies, "ReadModelUnavailable", "resolved").await;
    let raises = svc
        .events(1, 10_000)
        .await
        .expect("events")
        .into_iter()
        .filter(|e| matches!(&e.event, Event::AlertRaised(a) if a.rule == "ReadModelUnavailable"))
        .count();
    assert_eq!(raises, 1, "one alert for one incident");
    assert_eq!(resolved["alert"]["alert"], firing["alert"]["alert"]);
    assert_eq!(svc.read_model_unavailable(), None);
    assert_eq!(
        bodies_of(&bodies, "ReadModelUnavailable", "firing").len(),
        1
    );
}

/// M8 while running: the wall clock going back more than a minute between
/// two ticks of the scheduler is recorded once as `service.clock_stepped`
/// and raises a `ClockStepped` alert; moving forward records nothing.
#[actix::test]
async fn a_clock_stepping_back_while_running_is_recorded_once_and_alerts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = ScriptedWorker {
        answer: Box::new(|_, _| Ok(JobOutput::default())),
        calls: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let clock = crate::ManualClock::new(T0);
    let svc = service_with(dir.path(), worker, Arc::new(clock.clone()), slow_config()).await;
    let steps = |events: &[vouch_events::Envelope]| -> Vec<vouch_events::ClockStepped> {
        events
            .iter()
            .filter_map(|e| match &e.event {
                Event::ClockStepped(c) => Some(c.clone()),
                _ => None,
            })
            .collect()
    };
    svc.tick().await.expect("tick");
    clock.advance(3_600 * crate::NANOS_PER_SEC);
    svc.tick().await.expect("tick");
    // Back by less than the tolerance: nothing.
    clock.set(T0 + 3_550 * crate::NANOS_PER_SEC);
    svc.tick().await.expect("tick");
    let events = svc.events(1, 10_000).await.expect("events");
    assert!(steps(&events).is_empty(), "{:?}", steps(&events));

    // Back by ten minutes.
    clock.set(T0 + 2_950 * crate::NANOS_PER_SEC);
    svc.tick().await.expect("tick");
    clock.advance(crate::NANOS_PER_SEC);
    svc.tick().await.expect("tick");
    let raised = wait_for(&svc, "the ClockStepped alert", |events| {
        events.iter().find_map(|e| match e {
            Event::AlertRaised(a) if a.rule == "ClockStepped" => Some(a.clone()),
            _ => None,
        })
    })
    .await;
    assert_eq!(raised.severity, vouch_events::Severity::Warning);
    let events = svc.events(1, 10_000).await.expect("events");
    let got = steps(&events);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].previous_unix_ns, T0 + 3_550 * crate::NANOS_PER_SEC);
    assert_eq!(got[0].now_unix_ns, T0 + 2_950 * crate::NANOS_PER_SEC);
}

fn docs_plan() -> Event {
    use vouch_events::{
        KeepPolicy, PlanCreated, PlanDefinition, PlanId, RestoreTestPolicy, VerificationPolicy,
        VerifyDepth,
    };
    PlanCreated {
        plan: PlanId::new("docs"),
        definition: PlanDefinition {
            source: "/srv".into(),
            schedule: "hourly".into(),
            retention: KeepPolicy::default(),
            verification: VerificationPolicy {
                after_backup: false,
                every: None,
                depth: VerifyDepth::Structure,
            },
            restore_test: RestoreTestPolicy {
                every: None,
                max_evidence_age: Duration::from_secs(3600),
                sample_files: None,
                full_every: None,
                boot: None,
            },
            rpo: Duration::from_secs(3600),
            repository: RepositoryId::new("main"),
            paused: true,
            replica: None,
            proxmox: None,
            anomaly_lock: None,
            files: Default::default(),
            hooks: Default::default(),
            time_zone: None,
        },
    }
    .into()
}

/// A plan `unknown` for longer than its RPO alerts even when the alerter
/// (or the service) restarted meanwhile: the timer is derived from the
/// log, not kept in memory.
#[actix::test]
async fn a_plan_unproven_across_an_alerter_restart_still_alerts_after_its_rpo() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = ScriptedWorker {
        answer: Box::new(|_, _| Ok(JobOutput::default())),
        calls: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let clock = crate::ManualClock::new(T0);
    let svc = service_with(dir.path(), worker, Arc::new(clock.clone()), slow_config()).await;
    svc.append(vec![
        docs_plan(),
        vouch_events::BackupCommitted {
            job: None,
            plan: Some(vouch_events::PlanId::new("docs")),
            repository: RepositoryId::new("main"),
            snapshot: vouch_events::SnapshotId([1; 32]),
            snapshot_time_unix_ns: T0,
            summary: vouch_events::BackupSummary {
                files: 3,
                ..Default::default()
            },
            changes: None,
        }
        .into(),
    ])
    .await
    .expect("append");
    let unproven = |events: &[Event]| {
        events
            .iter()
            .any(|e| matches!(e, Event::AlertRaised(a) if a.rule == "PlanNotProven"))
    };
    let status = svc
        .query(svc.last_seq(), move |p| {
            p.plan_protection(&vouch_events::PlanId::new("docs"), T0)
                .status
        })
        .await
        .expect("query");
    assert!(
        matches!(
            status,
            vouch_events::Protection::Unknown | vouch_events::Protection::AtRisk
        ),
        "{status:?}"
    );

    // Half the RPO later, the alerter fails and is restarted.
    clock.advance(1_800 * crate::NANOS_PER_SEC);
    svc.evaluate_alerts().await.expect("evaluate");
    assert!(svc.alerter().send(PanicNow).await.is_err());
    actix::clock::sleep(Duration::from_millis(200)).await;
    let events: Vec<Event> = svc
        .events(1, 10_000)
        .await
        .expect("events")
        .into_iter()
        .map(|e| e.event)
        .collect();
    assert!(!unproven(&events), "not yet an RPO long");
    // A newer backup keeps a point within the RPO: still no restore test.
    svc.append(vec![vouch_events::BackupCommitted {
        job: None,
        plan: Some(vouch_events::PlanId::new("docs")),
        repository: RepositoryId::new("main"),
        snapshot: vouch_events::SnapshotId([2; 32]),
        snapshot_time_unix_ns: T0 + 1_800 * crate::NANOS_PER_SEC,
        summary: vouch_events::BackupSummary {
            files: 3,
            ..Default::default()
        },
        changes: None,
    }
    .into()])
        .await
        .expect("append");

    // Past the RPO since the plan was created: the alert fires.
    clock.advance(1_900 * crate::NANOS_PER_SEC);
    svc.evaluate_alerts().await.expect("evaluate");
    wait_for(&svc, "PlanNotProven", |events| {
        unproven(events).then_some(())
    })
    .await;
}

/// A plan whose source is `agent:<name>:...` is scheduled like any other
/// (issue 14); what keeps the server from backing up its own path of that
/// name (security review finding 14) is the engine's worker, which only
/// offers such a job to its agent (`src/workers/tests.rs`).
#[actix::test]
async fn the_scheduler_schedules_an_agents_plan_like_any_other() {
    use vouch_events::PlanId;
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = crate::ManualClock::new(T0);
    let worker = ScriptedWorker {
        answer: Box::new(|_, _| Ok(JobOutput::default())),
        calls: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let svc = service_with(
        dir.path(),
        worker,
        Arc::new(clock.clone()),
        ServiceConfig::default(),
    )
    .await;
    let plan = |id: &str, source: &str| {
        let Event::PlanCreated(mut p) = docs_plan() else {
            unreachable!("docs_plan makes a plan.created")
        };
        p.plan = PlanId::new(id);
        p.definition.source = source.into();
        p.definition.schedule = "0 * * * *".into();
        p.definition.paused = false;
        Event::PlanCreated(p)
    };
    let receipt = svc
        .append(vec![
            plan("local", "/srv"),
            plan("remote", "agent:web-1:/srv"),
        ])
        .await
        .expect("plans");
    // The scheduler reads the projections as folded: wait for the plans.
    svc.query(receipt.last_seq, |_| ()).await.expect("folded");
    clock.advance(2 * 3_600 * crate::NANOS_PER_SEC);
    svc.tick().await.expect("tick");
    let backups = |events: &[Event]| -> Vec<String> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::JobScheduled(s) if s.kind == vouch_events::JobKind::Backup => {
                    s.plan.as_ref().map(|p| p.to_string())
                }
                _ => None,
            })
            .collect()
    };
    // Its job goes to the backup worker, which offers it to the agent
    // (the engine's worker never runs an agent's source itself).
    wait_for(&svc, "both plans' backups", |events| {
        let b = backups(events);
        (b.contains(&"local".to_owned()) && b.contains(&"remote".to_owned())).then_some(())
    })
    .await;
}

/// Holds every job until released, and keeps which ones run at once.
struct GateWorker {
    running: Arc<std::sync::Mutex<Vec<String>>>,
    most: Arc<std::sync::Mutex<Vec<String>>>,
    release: Arc<std::sync::atomic::AtomicBool>,
}

impl Actor for GateWorker {
    type Context = Context<Self>;
}

impl Handler<RunJob> for GateWorker {
    type Result = ResponseFuture<Result<JobOutput, JobFailure>>;

    fn handle(&mut self, msg: RunJob, _: &mut Self::Context) -> Self::Result {
        let who = match msg.command.agent() {
            Some(agent) => format!("agent:{agent}"),
            None => "server".to_owned(),
        };
        let (running, most, release) = (
            self.running.clone(),
            self.most.clone(),
            self.release.clone(),
        );
        Box::pin(async move {
            {
                let mut r = running.lock().expect("lock");
                r.push(who.clone());
                let mut m = most.lock().expect("lock");
                if r.len() > m.len() {
                    *m = r.clone();
                }
            }
            while !release.load(Ordering::SeqCst) {
                actix::clock::sleep(Duration::from_millis(5)).await;
            }
            let mut r = running.lock().expect("lock");
            if let Some(i) = r.iter().position(|w| *w == who) {
                r.remove(i);
            }
            Err(JobFailure::new("held", "released by the test", false))
        })
    }
}

/// Jobs that run on agents hold none of the server's slots (seen before:
/// 200 agents' jobs due at once went out two at a time, p50 11 s late), but
/// each agent runs one job at a time, in order.
#[actix::test]
async fn agent_jobs_wait_for_their_agent_not_for_the_servers_slots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let running = Arc::new(std::sync::Mutex::new(Vec::new()));
    let most = Arc::new(std::sync::Mutex::new(Vec::new()));
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = GateWorker {
        running: running.clone(),
        most: most.clone(),
        release: release.clone(),
    }
    .start();
    let mut config = ServiceConfig::default();
    config.dispatch.max_concurrent = 1;
    let svc = service_with(dir.path(), worker, Arc::new(crate::SystemClock), config).await;
    let restore = |agent: Option<&str>| JobCommand::Restore {
        point: SnapshotId([7; 32]),
        plan: None,
        repository: RepositoryId::new("default"),
        spec: vouch_events::RestoreSpec {
            path: "/".into(),
            destination: "/restore".into(),
            agent: agent.map(str::to_owned),
        },
    };
    let mut jobs = Vec::new();
    for cmd in [
        restore(None),
        restore(None),
        restore(Some("a")),
        restore(Some("b")),
        restore(Some("c")),
        restore(Some("a")),
    ] {
        jobs.push(svc.enqueue(cmd).await.expect("enqueued"));
    }
    let until = Instant::now() + Duration::from_secs(10);
    while running.lock().expect("lock").len() < 4 && Instant::now() < until {
        actix::clock::sleep(Duration::from_millis(10)).await;
    }
    // Settle: nothing more may start while the first ones hold.
    actix::clock::sleep(Duration::from_millis(300)).await;
    let mut at_once = most.lock().expect("lock").clone();
    at_once.sort();
    assert_eq!(
        at_once,
        ["agent:a", "agent:b", "agent:c", "server"],
        "one server job (max_concurrent 1) beside one job per agent"
    );
    release.store(true, Ordering::SeqCst);
    for job in &jobs {
        let job = job.clone();
        wait_for(&svc, "every job to end", move |events| {
            events
                .iter()
                .any(|e| matches!(e, Event::JobFailed(f) if f.job == job))
                .then_some(())
        })
        .await;
    }
}

/// Found by the chaos harness: a verification scheduled before retention
/// forgot its point ran after the forget (retried after a restart) and
/// recorded `point.vanished` once the prune had deleted the manifest. The
/// manifest of a forgotten point is meant to go: no `PointVanished` alert
/// (it could never resolve). A live point that vanishes still alerts.
#[actix::test]
async fn a_forgotten_point_whose_manifest_is_gone_raises_no_vanished_alert() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker = ScriptedWorker {
        answer: Box::new(|_, _| Ok(JobOutput::default())),
        calls: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let clock = crate::ManualClock::new(T0);
    let svc = service_with(dir.path(), worker, Arc::new(clock), slow_config()).await;
    let forgotten = SnapshotId([0x41; 32]);
    let live = SnapshotId([0x42; 32]);
    let mut live_commit = commit(live);
    if let Event::BackupCommitted(c) = &mut live_commit {
        c.repository = RepositoryId::new("other");
    }
    let vanished = |point: SnapshotId, repo: &str| -> Event {
        vouch_events::PointVanished {
            point,
            repository: RepositoryId::new(repo),
            reason: "verification: manifest missing".into(),
        }
        .into()
    };
    svc.append(vec![
        commit(forgotten),
        live_commit,
        vouch_events::PointForgotten {
            point: forgotten,
            rule: "not kept by the plan's keep rules".into(),
        }
        .into(),
    ])
    .await
    .expect("append");
    svc.append(vec![vanished(forgotten, "default")])
        .await
        .expect("append");
    svc.append(vec![vanished(live, "other")])
        .await
        .expect("append");
    let raised = wait_for(&svc, "the live point's PointVanished", |events| {
        let vanished: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                Event::AlertRaised(a) if a.rule == "PointVanished" => Some(a.clone()),
                _ => None,
            })
            .collect();
        vanished
            .iter()
            .any(|a| a.labels.get("repository").map(String::as_str) == Some("other"))
            .then_some(vanished)
    })
    .await;
    assert_eq!(raised.len(), 1, "{raised:#?}");
    assert!(
        !raised[0].message.contains(&forgotten.to_hex()),
        "{}",
        raised[0].message
    );
}

/// Found by the chaos lane: a job whose end could not be recorded (the
/// log refused the append: fsync EIO) stayed `running` in the log until
/// the service restarted, and its retry never ran. The end is recorded
/// again, with a backoff, once the log takes appends.
#[actix::test]
async fn a_job_end_the_log_refused_is_recorded_once_the_log_takes_appends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let health: Arc<std::sync::OnceLock<Arc<super::store::AppendHealth>>> = Arc::default();
    let refuse = health.clone();
    let worker = ScriptedWorker {
        answer: Box::new(move |_, msg| {
            // The disk fails while the job runs: its end cannot be written.
            if let Some(h) = refuse.get() {
                h.refuse_appends(true);
            }
            Ok(read_back_ok(&msg.job, &msg.command))
        }),
        calls: Arc::new(AtomicU32::new(0)),
    }
    .start();
    let clock = crate::ManualClock::new(T0);
    let svc = service_with(dir.path(), worker, Arc::new(clock), slow_config()).await;
    let _ = health.set(svc.append_health_for_tests());
    let job = svc
        .enqueue(JobCommand::ReadBack {
            repository: RepositoryId::new("default"),
            slices: vec![0],
            of: 4,
        })
        .await
        .expect("enqueued");
    // The end was refused at least once.
    let until = Instant::now() + Duration::from_secs(10);
    while svc.append_status().healthy {
        assert!(
            Instant::now() < until,
            "the log never refused the job's end"
        );
        actix::clock::sleep(Duration::from_millis(20)).await;
    }
    actix::clock::sleep(Duration::from_millis(300)).await;
    health.get().expect("health").refuse_appends(false);
    let finished = wait_for(&svc, "the job's end recorded", |events| {
        let read = events
            .iter()
            .filter(|e| matches!(e, Event::PacksReadBack(r) if r.job.as_ref() == Some(&job)))
            .count();
        let ended = events
            .iter()
            .filter(|e| matches!(e, Event::JobFinished(f) if f.job == job))
            .count();
        (ended > 0).then_some((read, ended))
    })
    .await;
    assert_eq!(finished, (1, 1), "recorded once, with its result");
}
