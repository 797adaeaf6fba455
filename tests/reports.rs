//! Protection reports from a running `vouch serve`. The service first runs
//! under `faketime` on 2026-01-15 (a day, an ISO week and a month that are
//! long over by the real clock): a plan backs up a real tree three times
//! (the third after a simulated ransomware attack), another plan's backup
//! fails. Then it restarts on the real clock and the reports of that day,
//! week and month are checked against what was done: numbers, RPO misses,
//! failures with reasons, restore-test evidence, the anomaly, the storage;
//! the same period twice (and after more events) gives the same bytes; CSV
//! matches JSON; the HTML is self-contained with SVG charts; the PDF is a
//! PDF.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use common::ransom::{self, Attack};
use common::served::*;
use serde_json::Value;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// The day the work is done on (by `faketime`).
const DAY: &str = "2026-01-15";

/// Where Debian's faketime keeps its library.
const LIBFAKETIME: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
];

fn libfaketime() -> Option<&'static str> {
    let found = LIBFAKETIME.iter().copied().find(|p| Path::new(p).exists());
    if found.is_none() {
        eprintln!("SKIPPED: libfaketime is not installed (apt-get install faketime; .ci/run does)");
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install faketime for this test"
        );
    }
    found
}

fn have(program: &str, what: &str) -> bool {
    if Command::new(program).arg("--version").output().is_ok() {
        return true;
    }
    eprintln!("SKIPPED: {program} is not installed ({what}; .ci/run installs it)");
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must install {program} for this test"
    );
    false
}

fn write_config(dir: &Path, extra: &str) -> std::path::PathBuf {
    let path = dir.join("vouch.toml");
    std::fs::write(
        &path,
        format!(
            "{}[scheduler]\ntick = \"1s\"\nmax_jitter = \"0s\"\n\n[jobs]\nmax_attempts = 1\n\n{extra}",
            sources_allow(dir)
        ),
    )
    .expect("config written");
    path
}

/// Runs `plan` and waits for its backup job to end; returns the job.
fn run(svc: &Service, plan: &str) -> Value {
    let (status, body) = post(svc, &format!("/api/v1/plans/{plan}/run"), &Value::Null);
    assert_eq!(status, 202, "run accepted: {body}");
    let job = body["id"].as_str().expect("a job id").to_owned();
    eventually(&format!("backup job {job} to end"), || {
        let j = get(svc, &format!("/api/v1/jobs/{job}"));
        matches!(j["state"].as_str(), Some("succeeded" | "failed")).then_some(j)
    })
}

fn events(svc: &Service, kind: &str) -> Vec<Value> {
    get(svc, &format!("/api/v1/events?type={kind}&limit=1000"))["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn ns(rfc3339: &str) -> i128 {
    OffsetDateTime::parse(rfc3339, &Rfc3339)
        .unwrap_or_else(|e| panic!("{rfc3339}: {e}"))
        .unix_timestamp_nanos()
}

fn report(svc: &Service, query: &str) -> (u16, Vec<u8>) {
    raw_bytes(
        svc.addr,
        "GET",
        &format!("/api/v1/reports?{query}"),
        &svc.token,
        &[],
        b"",
    )
}

fn report_ok(svc: &Service, query: &str) -> Vec<u8> {
    let (status, body) = report(svc, query);
    assert_eq!(status, 200, "{query}: {}", String::from_utf8_lossy(&body));
    body
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).expect("a JSON report")
}

/// What the day did, as the service's own API shows it.
struct Done {
    points: Vec<Value>,
    attacked: String,
    stored: u64,
    created_ns: i128,
    failed_job: String,
}

/// The work of the day, under `faketime` (file times are not faked, so
/// restore tests compare them as usual).
fn a_day_of_work(dir: &Path, libfaketime: &str) -> Done {
    let src = dir.join("home");
    ransom::project_tree(&src);
    let config = write_config(dir, "");
    let at = format!("@{DAY} 10:00:00");
    let svc = start_with_env(
        &[
            ("LD_PRELOAD", libfaketime),
            ("FAKETIME", &at),
            ("NO_FAKE_STAT", "1"),
        ],
        &dir.join("data"),
        &config,
        None,
    );
    for (id, source) in [
        ("home", src.display().to_string()),
        ("gone", dir.join("not-there").display().to_string()),
    ] {
        let (status, body) = post(
            &svc,
            "/api/v1/plans",
            &serde_json::json!({"id": id, "source": source, "schedule": "0 3 * * *", "rpo": "1h"}),
        );
        assert_eq!(status, 201, "plan created: {body}");
    }
    let failed = run(&svc, "gone");
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(run(&svc, "home")["state"], "succeeded");
    for f in ransom::files_of(&src).iter().take(5) {
        let mut text = std::fs::read(f).expect("read");
        text.extend_from_slice(b"\n// edited\n");
        std::fs::write(f, text).expect("edit");
    }
    assert_eq!(run(&svc, "home")["state"], "succeeded");
    ransom::attack(
        &src,
        Attack {
            permille: 100,
            rename_to: Some("locked"),
            replace_extension: false,
            notes: true,
            encrypt: true,
        },
    );
    assert_eq!(run(&svc, "home")["state"], "succeeded");
    // Each point is verified, then restore-tested (the follow-ups).
    let points = eventually("three recoverable points", || {
        let pts = get(&svc, "/api/v1/points?plan=home");
        let pts = pts.as_array().cloned().unwrap_or_default();
        (pts.len() == 3 && pts.iter().all(|p| p["state"] == "recoverable")).then_some(pts)
    });
    let anomalies = events(&svc, "anomaly.detected");
    assert_eq!(anomalies.len(), 1, "{anomalies:?}");
    let attacked = anomalies[0]["data"]["point"]
        .as_str()
        .expect("point")
        .to_owned();
    let stored = events(&svc, "backup.committed")
        .iter()
        .map(|e| {
            e["data"]["summary"]["stored_bytes"]
                .as_u64()
                .expect("bytes")
        })
        .sum();
    let created = events(&svc, "plan.created");
    let created_ns = ns(created
        .iter()
        .find(|e| e["data"]["plan"] == "home")
        .and_then(|e| e["recorded_at"].as_str())
        .expect("plan.created of home"));
    for p in &points {
        let at = p["committed_at"].as_str().expect("committed_at");
        assert!(at.starts_with(DAY), "faketime holds: {at}");
    }
    // The security center, evaluated that day (and its changes recorded).
    let security = get(&svc, "/api/v1/security");
    assert!(
        security["evaluated_at"]
            .as_str()
            .is_some_and(|t| t.starts_with(DAY)),
        "{security}"
    );
    Done {
        points,
        attacked,
        stored,
        created_ns,
        failed_job: failed["id"].as_str().expect("id").to_owned(),
    }
}

#[test]
fn reports_tell_what_a_past_day_did_and_never_change() {
    let Some(libfaketime) = libfaketime() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let done = a_day_of_work(dir.path(), libfaketime);
    // The real clock: that day, week and month are over.
    let config = write_config(dir.path(), "");
    let svc = start(&dir.path().join("data"), &config, None);

    let daily = report_ok(&svc, &format!("period=daily&at={DAY}"));
    let r = json(&daily);
    assert_eq!(r["period"]["label"], DAY);
    assert_eq!(r["period"]["start"], format!("{DAY}T00:00:00Z"));
    assert_eq!(r["period"]["end"], "2026-01-16T00:00:00Z");
    assert_eq!(r["scope"]["kind"], "installation");
    let t = &r["totals"];
    assert_eq!(t["plans"], 2, "{t}");
    assert_eq!(t["points_made"], 3, "{t}");
    assert_eq!(t["points_made_recoverable"], 3, "{t}");
    assert_eq!(t["backups_failed"], 1, "{t}");
    assert_eq!(t["failures"], 1, "{t}");
    assert!(t["restore_tests_passed"].as_u64() >= Some(3), "{t}");
    assert_eq!(t["restore_tests_failed"], 0, "{t}");
    assert_eq!(t["anomalies"], 1, "{t}");
    assert_eq!(t["stored_bytes_at_start"], 0, "{t}");
    assert_eq!(t["stored_bytes_at_end"], done.stored, "{t}");
    assert_eq!(
        t["plans_rpo_met"], 0,
        "an RPO of 1 h is missed for most of the day"
    );

    let plans = r["plans"].as_array().expect("plans");
    let line = |id: &str| {
        plans
            .iter()
            .find(|p| p["plan"] == id)
            .unwrap_or_else(|| panic!("plan {id} in {plans:?}"))
    };
    let home = line("home");
    assert_eq!(home["points_made"], 3);
    assert_eq!(home["points_made_restore_tested"], 3);
    assert_eq!(home["points_recoverable_at_end"], 3);
    assert_eq!(home["anomalies"], 1);
    assert_eq!(home["rpo_seconds"], 3600);
    assert_eq!(home["protection_at_end"], "unprotected", "{home}");
    // Missed: from the plan's creation to its first commit, and from an
    // hour after the newest snapshot to the day's end.
    let first_commit = done
        .points
        .iter()
        .map(|p| ns(p["committed_at"].as_str().expect("committed_at")))
        .min()
        .expect("points");
    let newest = done
        .points
        .iter()
        .map(|p| ns(p["snapshot_at"].as_str().expect("snapshot_at")))
        .max()
        .expect("points");
    let end = ns("2026-01-16T00:00:00Z");
    let expected =
        ((first_commit - done.created_ns) + (end - (newest + 3_600_000_000_000))) / 1_000_000_000;
    let missed = i128::from(home["rpo_missed_seconds"].as_u64().expect("missed"));
    assert!(
        (missed - expected).abs() <= 2,
        "missed {missed} s, expected about {expected} s: {home}"
    );
    assert_eq!(home["rpo_met"], false);
    let existed = ns(r["period"]["end"].as_str().expect("end")) - done.created_ns;
    assert_eq!(
        i128::from(home["existed_seconds"].as_u64().expect("existed")),
        existed / 1_000_000_000
    );
    let gone = line("gone");
    assert_eq!(gone["points_made"], 0);
    assert_eq!(gone["backups_failed"], 1);
    assert_eq!(gone["protection_at_end"], "unprotected");

    let failures = r["failures"].as_array().expect("failures");
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0]["what"], "backup");
    assert_eq!(failures[0]["plan"], "gone");
    assert_eq!(failures[0]["kind"], "source_missing", "{failures:?}");
    assert!(
        failures[0]["reason"]
            .as_str()
            .is_some_and(|m| m.contains("not-there")),
        "{failures:?}"
    );
    let _ = done.failed_job;
    let tests = r["restore_tests"].as_array().expect("restore tests");
    for point in &done.points {
        let id = point["id"].as_str().expect("id");
        let t = tests
            .iter()
            .find(|t| t["point"] == id && t["passed"] == true)
            .unwrap_or_else(|| panic!("a passed restore test of {id} in {tests:?}"));
        assert_eq!(t["complete"], true, "{t}");
        assert_eq!(t["coverage_permille"], 1000, "{t}");
        assert_eq!(t["files"], point["coverage"]["files_in_point"], "{t}");
    }
    let anomalies = r["anomalies"].as_array().expect("anomalies");
    assert_eq!(anomalies.len(), 1);
    assert_eq!(anomalies[0]["point"], done.attacked.as_str());
    assert_eq!(anomalies[0]["plan"], "home");
    assert!(anomalies[0]["max_score_permille"].as_u64() >= Some(500));
    assert!(!anomalies[0]["paths"].as_array().expect("paths").is_empty());
    // The security center as the log had it at the day's end.
    let sec = &r["security"];
    let counted: u64 = ["ok", "warning", "failed", "unknown"]
        .iter()
        .map(|k| sec["counts"][k].as_u64().expect("a count"))
        .sum();
    assert!(counted > 5, "{sec}");
    let not_ok = sec["not_ok"].as_array().expect("not_ok");
    let export = not_ok
        .iter()
        .find(|c| c["check"] == "key-export/default")
        .unwrap_or_else(|| panic!("key-export/default in {not_ok:?}"));
    assert_eq!(export["status"], "warning");
    assert!(export["since"].as_str().is_some_and(|t| t.starts_with(DAY)));
    assert!(
        sec["changes"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["check"] == "key-export/default")),
        "{sec}"
    );
    let series = r["series"].as_array().expect("series");
    assert_eq!(series.len(), 24, "hours of the day");
    assert_eq!(series[10]["points_made"], 3, "made between 10:00 and 11:00");
    assert_eq!(series[10]["failures"], 1);

    // The week and the month hold the same day.
    for (period, label, buckets) in [("weekly", "2026-W03", 7), ("monthly", "2026-01", 31)] {
        let w = json(&report_ok(
            &svc,
            &format!("period={period}&at={DAY}T12:00:00Z"),
        ));
        assert_eq!(w["period"]["label"], label);
        assert_eq!(w["series"].as_array().map(Vec::len), Some(buckets));
        for k in [
            "points_made",
            "backups_failed",
            "anomalies",
            "stored_bytes_at_end",
        ] {
            assert_eq!(w["totals"][k], t[k], "{period} {k}");
        }
    }
    // The day before knew nothing yet.
    let before = json(&report_ok(&svc, "period=daily&at=2026-01-14"));
    assert_eq!(before["totals"]["plans"], 0);
    assert_eq!(before["log"]["last_seq"], 0);

    // One plan.
    let one = json(&report_ok(
        &svc,
        &format!("period=daily&at={DAY}&plan=home"),
    ));
    assert_eq!(one["scope"]["plan"], "home");
    assert_eq!(one["plans"].as_array().map(Vec::len), Some(1));
    assert_eq!(one["plans"][0], *home);
    assert_eq!(one["failures"].as_array().map(Vec::len), Some(0));
    let own = one["security"]["not_ok"].as_array().expect("not_ok");
    assert!(
        !own.is_empty()
            && own
                .iter()
                .all(|c| c["check"].as_str().is_some_and(|id| id.ends_with("/home"))),
        "a plan's report holds its own checks: {own:?}"
    );
    let (status, _) = report(&svc, &format!("period=daily&at={DAY}&plan=nope"));
    assert_eq!(status, 404);

    // Refusals: a period not over, a bad period, a bad date, no token.
    let (status, body) = report(&svc, "period=daily&at=2999-01-01");
    assert_eq!(status, 409, "{}", String::from_utf8_lossy(&body));
    assert_eq!(report(&svc, "period=hourly").0, 400);
    assert_eq!(report(&svc, "period=daily&at=2026-02-30").0, 400);
    assert_eq!(report(&svc, "period=daily&format=xml").0, 400);
    let (status, _) = http(svc.addr, "GET", "/api/v1/reports?period=daily", None, None);
    assert_eq!(status, 401);

    // The same period again, after more events: the same bytes.
    let (status, body) = post(
        &svc,
        "/api/v1/plans",
        &serde_json::json!({"id": "later", "source": dir.path().join("home"), "schedule": "0 3 * * *", "rpo": "1h"}),
    );
    assert_eq!(status, 201, "{body}");
    run(&svc, "later");
    let csv = report_ok(&svc, &format!("period=daily&at={DAY}&format=csv"));
    let html = report_ok(&svc, &format!("period=daily&at={DAY}&format=html"));
    drop(svc);
    let svc = start(&dir.path().join("data"), &config, None);
    assert_eq!(report_ok(&svc, &format!("period=daily&at={DAY}")), daily);
    assert_eq!(
        report_ok(&svc, &format!("period=daily&at={DAY}T23:59:59Z&format=csv")),
        csv
    );
    assert_eq!(
        report_ok(&svc, &format!("period=daily&at={DAY}&format=html")),
        html
    );

    // CSV: a header, then the JSON's plans in order, column by column.
    let text = String::from_utf8(csv).expect("UTF-8 CSV");
    let rows: Vec<Vec<&str>> = text
        .split("\r\n")
        .filter(|l| !l.is_empty())
        .map(|l| l.split(',').collect())
        .collect();
    let header = &rows[0];
    assert_eq!(header[0], "period");
    assert_eq!(rows.len(), 1 + plans.len());
    for (row, plan) in rows[1..].iter().zip(plans) {
        assert_eq!(row.len(), header.len());
        for (name, cell) in header.iter().zip(row) {
            let want = match *name {
                "period" => r["period"]["kind"].clone(),
                "label" | "start" | "end" => r["period"][*name].clone(),
                _ => plan[*name].clone(),
            };
            let want = match want {
                Value::String(s) => s,
                Value::Null => String::new(),
                v => v.to_string(),
            };
            assert_eq!(*cell, want, "column {name} of {}", plan["plan"]);
        }
    }

    // HTML: self-contained, with SVG charts, the numbers and the reasons.
    let page = String::from_utf8(html).expect("UTF-8 HTML");
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.matches("<svg").count() >= 3, "three charts");
    assert!(
        page.contains("<h2>Security center</h2>") && page.contains("key-export/default"),
        "the security center's state at the day's end"
    );
    for external in [
        "http:", "https:", "<script", "src=", "href=", "url(", "@import",
    ] {
        assert!(
            !page.contains(external),
            "no external reference: {external}"
        );
    }
    assert!(page.contains("not-there"), "the failure's reason is shown");
    assert!(page.contains(&done.attacked[..12]), "the anomaly is shown");

    // PDF, printed by Chromium.
    if have("chromium", "reports print to PDF with headless Chromium") {
        let pdf = report_ok(&svc, &format!("period=weekly&at={DAY}&format=pdf"));
        assert!(pdf.starts_with(b"%PDF"), "a PDF");
    }
}

/// Without Chromium a PDF is refused with what to install, and the other
/// formats still work.
#[test]
fn a_pdf_without_chromium_says_what_to_install() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        "[reports]\nchromium = \"/nonexistent/chromium\"\n",
    );
    let svc = start(&dir.path().join("data"), &config, None);
    let (status, body) = report(&svc, "period=daily&format=pdf");
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("apt-get install chromium"), "{body}");
    assert_eq!(report(&svc, "period=daily&format=html").0, 200);
}

// ---- Delivery: a webhook receiver and an SMTP sink on 127.0.0.1 ----

/// One request a receiver got.
#[derive(Clone, Debug)]
struct Posted {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// A plain-HTTP receiver on loopback: records every request; the first
/// `fail_first` are answered 500, the rest 200.
fn http_receiver(fail_first: usize) -> (std::net::SocketAddr, Arc<Mutex<Vec<Posted>>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        let mut n = 0;
        for conn in listener.incoming() {
            let Ok(mut tcp) = conn else { continue };
            let _ = tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)));
            let mut reader = BufReader::new(&mut tcp);
            let mut line = String::new();
            let mut headers = Vec::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((k, v)) = line.trim_end().split_once(':') {
                    headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
                }
            }
            let len: usize = headers
                .iter()
                .find(|(k, _)| k == "content-length")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0u8; len];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            n += 1;
            let status = if n <= fail_first {
                "500 Internal Server Error"
            } else {
                "200 OK"
            };
            if n > fail_first {
                log.lock().expect("lock").push(Posted { headers, body });
            }
            let _ = tcp.write_all(
                format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            );
        }
    });
    (addr, seen)
}

/// The Python that has aiosmtpd: `VOUCH_AIOSMTPD_PYTHON` (.ci/run makes a
/// venv), else `python3` if it can import it.
fn aiosmtpd_python() -> Option<String> {
    let candidates = std::env::var("VOUCH_AIOSMTPD_PYTHON")
        .into_iter()
        .chain(["python3".to_owned()]);
    for py in candidates {
        let ok = Command::new(&py)
            .args(["-c", "import aiosmtpd"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(py);
        }
    }
    eprintln!("SKIPPED: aiosmtpd is not installed (pip install aiosmtpd, or set VOUCH_AIOSMTPD_PYTHON; .ci/run does)");
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must provide aiosmtpd for this test"
    );
    None
}

/// The SMTP sink, stopped (stdin closed, then killed) on drop.
struct SmtpSink {
    child: std::process::Child,
    port: u16,
    out: std::path::PathBuf,
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the sink with a certificate for 127.0.0.1 signed by a CA of the
/// test; returns it and the CA's PEM file (what Vouch is told to trust).
fn smtp_sink(
    python: &str,
    dir: &Path,
    user: &str,
    password: &str,
) -> (SmtpSink, std::path::PathBuf) {
    use std::io::BufRead;
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "vouch test SMTP CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA");
    let leaf_key = rcgen::KeyPair::generate().expect("key");
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".into()])
        .expect("params")
        .signed_by(&leaf_key, &ca)
        .expect("leaf");
    let (cert, key, ca_pem) = (
        dir.join("smtp.crt"),
        dir.join("smtp.key"),
        dir.join("smtp-ca.pem"),
    );
    std::fs::write(&cert, leaf.pem()).expect("cert");
    std::fs::write(&key, leaf_key.serialize_pem()).expect("key");
    std::fs::write(&ca_pem, ca.pem()).expect("CA");
    let out = dir.join("mail");
    std::fs::create_dir_all(&out).expect("mail dir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/common/smtp_sink.py");
    let mut child = Command::new(python)
        .arg(script)
        .args([&cert, &key, &out])
        .args([user, password, "300"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the SMTP sink starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the sink prints its port");
    let port = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("a port, not {line:?}"));
    (SmtpSink { child, port, out }, ca_pem)
}

fn delivered(svc: &Service) -> Vec<(String, String)> {
    events(svc, "report.delivered")
        .iter()
        .map(|e| {
            (
                e["data"]["label"].as_str().unwrap_or("").to_owned(),
                e["data"]["target"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// Daily reports go to a webhook (whose first answer is a 500: retried)
/// and by e-mail through STARTTLS with a login, with the CSV attached. A
/// fresh delivery sends the newest ended day; a restart three days later
/// sends the three missed days once each, and nothing twice. What the
/// webhook got is byte for byte what the API gives for that day.
#[test]
fn reports_are_delivered_by_webhook_and_email_once_per_period() {
    let Some(libfaketime) = libfaketime() else {
        return;
    };
    let Some(python) = aiosmtpd_python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (hook, posted) = http_receiver(1);
    let password = "correct horse battery staple";
    let (sink, ca) = smtp_sink(&python, dir.path(), "vouch", password);
    let password_file = dir.path().join("smtp.pass");
    std::fs::write(&password_file, format!("{password}\n")).expect("password file");
    let config = write_config(
        dir.path(),
        &format!(
            "[[webhooks]]\nname = \"ops\"\nurl = \"http://{hook}/reports\"\nretry_initial = \"1s\"\n\n\
             [reports]\ncheck_every = \"1s\"\n\n\
             [reports.smtp]\nhost = \"127.0.0.1\"\nport = {}\nfrom = \"Vouch <vouch@example.org>\"\n\
             username = \"vouch\"\npassword_file = {:?}\nca_file = {:?}\ntimeout = \"10s\"\n\n\
             [[reports.deliveries]]\nname = \"daily-ops\"\nperiod = \"daily\"\nwebhooks = [\"ops\"]\n\
             email = [\"ops@example.org\"]\nattach = [\"csv\"]\n",
            sink.port,
            password_file.to_str().expect("UTF-8"),
            ca.to_str().expect("UTF-8"),
        ),
    );
    let data = dir.path().join("data");
    let at = |day: &str| format!("@{day} 10:00:00");
    let faked = |day: &str| {
        start_with_env(
            &[
                ("LD_PRELOAD", libfaketime),
                ("FAKETIME", &at(day)),
                ("NO_FAKE_STAT", "1"),
            ],
            &data,
            &config,
            None,
        )
    };

    // A fresh delivery: the newest ended day, 2026-01-14.
    let svc = faked(DAY);
    let got = eventually("the first day delivered to both targets", || {
        let d = delivered(&svc);
        (d.len() == 2).then_some(d)
    });
    assert!(
        got.iter().all(|(label, _)| label == "2026-01-14"),
        "{got:?}"
    );
    let failed = events(&svc, "report.delivery_failed");
    assert_eq!(failed.len(), 1, "the webhook's 500: {failed:?}");
    assert_eq!(failed[0]["data"]["will_retry"], true);
    assert_eq!(failed[0]["data"]["target"], "webhook:ops");
    let first = posted.lock().expect("lock")[0].clone();
    assert!(first
        .headers
        .iter()
        .any(|(k, v)| k == "x-vouch-report" && v == "daily-ops/2026-01-14"));
    drop(svc);

    // Three days later: the missed days, once each.
    let svc = faked("2026-01-18");
    let got = eventually("the missed days delivered", || {
        let d = delivered(&svc);
        (d.len() == 8).then_some(d)
    });
    let mut labels: Vec<&str> = got.iter().map(|(l, _)| l.as_str()).collect();
    labels.sort_unstable();
    labels.dedup();
    assert_eq!(
        labels,
        ["2026-01-14", "2026-01-15", "2026-01-16", "2026-01-17"]
    );
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(delivered(&svc).len(), 8, "nothing is sent twice");
    let posts = posted.lock().expect("lock").clone();
    assert_eq!(posts.len(), 4, "one POST per day");
    drop(svc);

    // What the webhook got is what the API gives (the real clock now, and
    // no deliveries: the mails below are the ones of the faked days).
    let plain = dir.path().join("plain");
    std::fs::create_dir_all(&plain).expect("dir");
    let svc = start(&data, &write_config(&plain, ""), None);
    for p in &posts {
        let label = p
            .headers
            .iter()
            .find(|(k, _)| k == "x-vouch-report")
            .and_then(|(_, v)| v.strip_prefix("daily-ops/"))
            .expect("the report header")
            .to_owned();
        assert_eq!(
            report_ok(&svc, &format!("period=daily&at={label}")),
            p.body,
            "{label}"
        );
        let digest = events(&svc, "report.delivered")
            .iter()
            .find(|e| e["data"]["label"] == label.as_str() && e["data"]["target"] == "webhook:ops")
            .map(|e| e["data"]["digest"].as_str().unwrap_or("").to_owned());
        assert_eq!(digest, Some(blake3::hash(&p.body).to_hex().to_string()));
    }

    // The e-mails: over STARTTLS, logged in, HTML inline, CSV attached.
    let mut mails: Vec<String> = std::fs::read_dir(&sink.out)
        .expect("mail dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "eml"))
        .map(|e| std::fs::read_to_string(e.path()).expect("mail"))
        .collect();
    mails.sort();
    assert_eq!(mails.len(), 4, "one e-mail per day");
    for m in &mails {
        let facts = m.lines().next().unwrap_or("");
        assert!(
            facts.starts_with("tls=True auth=True from=vouch@example.org to=ops@example.org"),
            "{facts}"
        );
        assert!(m.contains("Content-Type: text/html"), "HTML inline");
        assert!(m.contains("vouch-report-daily-2026-01-1"), "CSV attached");
        assert!(m.contains("text/csv"), "CSV attached");
        assert!(!m.contains(password), "the password is not in the mail");
    }
    drop(sink);
}
