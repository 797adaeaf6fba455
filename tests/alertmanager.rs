//! `format = "alertmanager-api"` against a real Alertmanager (Debian's
//! `prometheus-alertmanager`, ecosystem review D2): a failed backup's alert
//! shows in Alertmanager with its labels, stays active past the time its
//! `endsAt` would have ended it without re-sends, and is resolved when the
//! plan's next backup succeeds. Alertmanager and `vouch serve` both on
//! 127.0.0.1, both stopped by the test.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::served::*;
use serde_json::Value;

const ALERTMANAGER: &str = "prometheus-alertmanager";

/// A running Alertmanager, killed on drop.
struct Alertmanager {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether Alertmanager is installed; with `CI` set, it must be.
fn have_alertmanager() -> bool {
    if Command::new(ALERTMANAGER)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return true;
    }
    eprintln!(
        "SKIPPED: {ALERTMANAGER} is not installed (apt-get install prometheus-alertmanager; .ci/run does)"
    );
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must install prometheus-alertmanager for this test"
    );
    false
}

/// A free port on 127.0.0.1 (free when asked; Alertmanager binds it next).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Starts Alertmanager on loopback with a configuration of its own and a
/// storage directory under `dir`; clustering off (no gossip port).
fn start_alertmanager(dir: &Path) -> Alertmanager {
    let config = dir.join("alertmanager.yml");
    std::fs::write(
        &config,
        "global:\n  resolve_timeout: 5m\nroute:\n  receiver: blackhole\n  group_wait: 1s\nreceivers:\n  - name: blackhole\n",
    )
    .expect("alertmanager config");
    let storage = dir.join("alertmanager-data");
    std::fs::create_dir_all(&storage).expect("storage dir");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("an address");
    let log = std::fs::File::create(dir.join("alertmanager.log")).expect("log file");
    let child = Command::new(ALERTMANAGER)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.path={}", storage.display()))
        .arg(format!("--web.listen-address={addr}"))
        .arg("--cluster.listen-address=")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("alertmanager starts");
    let am = Alertmanager { child, addr };
    eventually("Alertmanager ready", || {
        std::net::TcpStream::connect(addr).ok()?;
        (http(addr, "GET", "/-/ready", None, None).0 == 200).then_some(())
    });
    am
}

/// Alertmanager's alerts (`GET /api/v2/alerts`: active ones, and ones
/// whose `endsAt` has not passed) named `alertname`.
fn alerts(am: &Alertmanager, alertname: &str) -> Vec<Value> {
    let (status, body) = http(am.addr, "GET", "/api/v2/alerts", None, None);
    assert_eq!(status, 200, "GET /api/v2/alerts: {body}");
    let list: Value = serde_json::from_str(&body).expect("JSON");
    list.as_array()
        .expect("an array")
        .iter()
        .filter(|a| a["labels"]["alertname"] == alertname)
        .cloned()
        .collect()
}

fn time(v: &Value) -> time::OffsetDateTime {
    time::OffsetDateTime::parse(
        v.as_str().expect("a time"),
        &time::format_description::well_known::Rfc3339,
    )
    .expect("RFC 3339")
}

#[test]
fn a_failed_backup_fires_in_a_real_alertmanager_stays_active_while_resent_and_resolves() {
    if !have_alertmanager() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let am = start_alertmanager(dir.path());
    let config = dir.path().join("vouch.toml");
    std::fs::write(
        &config,
        format!(
            "{}[scheduler]\ntick = \"1s\"\nmax_jitter = \"0s\"\n\n[jobs]\nretry_initial = \"1s\"\nshutdown_grace = \"5s\"\n\n\
             [alerting]\nevaluate_every = \"1s\"\nexternal_url = \"http://admin:hunter2@127.0.0.1:1/console?token=abc\"\n\n\
             [[webhooks]]\nname = \"am\"\nurl = \"http://{}/api/v2/alerts\"\nformat = \"alertmanager-api\"\nretry_initial = \"200ms\"\n",
            sources_allow(dir.path()),
            am.addr
        ),
    )
    .expect("config");
    let svc = start(&dir.path().join("data"), &config, None);
    let missing = dir.path().join("not-there-yet");
    let (status, body) = post(
        &svc,
        "/api/v1/plans",
        &serde_json::json!({"id": "broken", "source": missing, "schedule": "0 3 * * *", "rpo": "1d"}),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = post(&svc, "/api/v1/plans/broken/run", &Value::Null);
    assert_eq!(status, 202, "{body}");

    // Firing in Alertmanager, with its labels.
    let first = eventually("BackupFailed in Alertmanager", || {
        alerts(&am, "BackupFailed").into_iter().next()
    });
    assert_eq!(first["status"]["state"], "active", "{first}");
    assert_eq!(first["labels"]["plan"], "broken", "{first}");
    assert_eq!(first["labels"]["severity"], "critical", "{first}");
    assert_eq!(first["labels"]["service"], "vouch", "{first}");
    assert_eq!(
        first["annotations"]["summary"], "plan broken: backup failed",
        "{first}"
    );
    assert_eq!(
        first["generatorURL"], "http://127.0.0.1:1/console/#/alerts",
        "no credentials or query in the link: {first}"
    );
    let first_end = time(&first["endsAt"]);
    let left = first_end - time::OffsetDateTime::now_utc();
    assert!(
        left > time::Duration::ZERO && left <= time::Duration::seconds(5),
        "endsAt about 4 intervals (4s) ahead: {first}"
    );

    // Past the first endsAt it is still active: re-sends moved it on.
    let until = Instant::now() + Duration::from_secs(6);
    let mut later = first.clone();
    while Instant::now() < until {
        let now = alerts(&am, "BackupFailed");
        assert_eq!(now.len(), 1, "one alert, never dropped meanwhile: {now:?}");
        later = now[0].clone();
        assert_eq!(later["status"]["state"], "active", "{later}");
        assert_eq!(later["labels"], first["labels"], "the same identity");
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        time::OffsetDateTime::now_utc() > first_end,
        "waited past the first endsAt"
    );
    assert!(
        time(&later["endsAt"]) > first_end,
        "re-sent with a later endsAt: {later}"
    );
    assert_eq!(later["startsAt"], first["startsAt"], "{later}");
    // Re-sends are not events: the firing message is delivered (recorded)
    // once.
    let delivered = get(&svc, "/api/v1/events?type=alert.delivered&limit=1000");
    let firing_records = delivered["events"]
        .as_array()
        .expect("array")
        .iter()
        .filter(|e| e["data"]["receiver"] == "am")
        .count();
    assert_eq!(firing_records, 1, "{delivered}");

    // Fix the source; the next backup succeeds, the alert resolves.
    std::fs::create_dir_all(&missing).expect("mkdir");
    std::fs::write(missing.join("f"), b"now readable").expect("write");
    eventually("a run of the fixed plan", || {
        let (status, _) = post(&svc, "/api/v1/plans/broken/run", &Value::Null);
        (status == 202).then_some(())
    });
    eventually("the resolution delivered", || {
        let delivered = get(&svc, "/api/v1/events?type=alert.delivered&limit=1000");
        delivered["events"]
            .as_array()?
            .iter()
            .any(|e| e["data"]["receiver"] == "am/resolved")
            .then_some(())
    });
    // Gone at once (its endsAt is the resolution's time), not 4 intervals
    // later when a missed re-send would have let it lapse.
    let still = alerts(&am, "BackupFailed");
    assert!(
        still.is_empty(),
        "resolved in Alertmanager as soon as it is delivered: {still:?}"
    );
    // And it stays resolved: no late re-send opens it again.
    std::thread::sleep(Duration::from_secs(3));
    let still = alerts(&am, "BackupFailed");
    assert!(still.is_empty(), "still resolved: {still:?}");

    // Re-sends are counted in the metrics, none failed.
    let (status, metrics) = http(svc.addr, "GET", "/metrics", Some(&svc.token), None);
    assert_eq!(status, 200);
    let resent = metrics
        .lines()
        .find(|l| {
            l.starts_with("vouch_webhook_deliveries_total")
                && l.contains("receiver=\"am/resend\"")
                && l.contains("result=\"delivered\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("re-sends in the metrics:\n{metrics}"));
    assert!(resent >= 4.0, "a re-send a second: {resent}");
    assert!(
        !metrics.contains("receiver=\"am/resend\",result=\"failed\"")
            || metrics.contains("receiver=\"am/resend\",result=\"failed\"} 0"),
        "{metrics}"
    );
}
