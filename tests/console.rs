//! The web console in a real browser (headless Debian chromium driven over
//! WebDriver), against the real `vouch serve` binary on 127.0.0.1:0.
//!
//! Skipped with a loud message when chromium is not installed, unless `CI`
//! is set (then it fails). Screenshots land in `target/console-artifacts/`.

mod common;
#[path = "common/webdriver.rs"]
mod webdriver;

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use actix_web::{App, HttpServer};
use serde_json::{json, Value};
use webdriver::{browser_available, Driver, Session};

const SHORT: Duration = Duration::from_secs(20);
const LONG: Duration = Duration::from_secs(120);

fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/console-artifacts");
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// Pseudo-random bytes (xorshift), so the files do not compress to nothing.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// `vouch serve` as a child process; killed on drop.
struct Serve {
    child: Child,
    addr: String,
    token: String,
}

impl Serve {
    fn start(data_dir: &Path) -> Serve {
        Serve::start_with(data_dir, "")
    }

    /// [`Serve::start`] with more configuration (e.g. `[[repositories]]`).
    fn start_with(data_dir: &Path, extra_config: &str) -> Serve {
        let help = Command::new(env!("CARGO_BIN_EXE_vouch"))
            .args(["serve", "--help"])
            .output()
            .unwrap_or_else(|e| panic!("run vouch serve --help: {e}"));
        assert!(
            help.status.success(),
            "`vouch serve` is not available (issue 5): {}",
            String::from_utf8_lossy(&help.stderr)
        );
        // Plans may back up what lies beside the data directory (the
        // test's temporary directory), nothing else.
        let parent = data_dir.parent().expect("the data directory has a parent");
        let config = parent.join("vouch.toml");
        std::fs::write(
            &config,
            format!(
                "[sources]\nallow = [{:?}]\n\n{extra_config}",
                parent.to_str().expect("a UTF-8 temporary directory")
            ),
        )
        .expect("config written");
        let mut child = Command::new(env!("CARGO_BIN_EXE_vouch"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start vouch serve: {e}"));
        let out = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        // Keeps reading for the whole run so the pipe never fills up.
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                println!("[vouch serve] {line}");
                let _ = tx.send(line);
            }
        });
        let mut addr = None;
        let deadline = Instant::now() + LONG;
        while addr.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match rx.recv_timeout(left) {
                Ok(l) => l,
                Err(e) => {
                    let _ = child.kill();
                    panic!("vouch serve did not print its address ({e})");
                }
            };
            if let Some(a) = line.trim().strip_prefix("listening on http://") {
                addr = Some(a.trim().to_owned());
            }
        }
        Serve {
            child,
            addr: addr.unwrap_or_default(),
            token: std::fs::read_to_string(data_dir.join("initial-admin-token"))
                .expect("the first start leaves its admin token in the data directory")
                .trim()
                .to_owned(),
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn set_field(s: &Session, css: &str, value: &str) {
    let e = s.wait_css(css, SHORT).await;
    s.clear(&e)
        .await
        .unwrap_or_else(|err| panic!("clear {css}: {err}"));
    s.send_keys(&e, value)
        .await
        .unwrap_or_else(|err| panic!("type into {css}: {err}"));
}

async fn click(s: &Session, css: &str) {
    let e = s.wait_css(css, SHORT).await;
    s.click(&e)
        .await
        .unwrap_or_else(|err| panic!("click {css}: {err}"));
}

async fn go(s: &Session, base: &str, hash: &str) {
    s.goto(&format!("{base}/{hash}"))
        .await
        .unwrap_or_else(|e| panic!("navigate to {hash}: {e}"));
}

async fn shot(s: &Session, name: &str) {
    let path = artifacts().join(name);
    s.save_screenshot(&path)
        .await
        .unwrap_or_else(|e| panic!("screenshot {name}: {e}"));
    println!("screenshot: {}", path.display());
}

/// Signs in with `token` and waits for the overview and the live stream.
async fn sign_in(s: &Session, base: &str, token: &str) {
    go(s, base, "").await;
    set_field(s, "#token", token).await;
    click(s, "#signin-submit").await;
    s.wait_for("the overview after sign-in", SHORT, "return location.hash === '#/overview' && !document.getElementById('nav').hidden && document.querySelector('main h1') && document.querySelector('main h1').textContent.startsWith('Overview')").await;
    s.wait_for(
        "the live event stream",
        SHORT,
        "return document.getElementById('live').dataset.state === 'live'",
    )
    .await;
}

/// Registers a real agent named `name` against `serve`: a one-time
/// enrollment token from `vouch token`, then `vouch agent --enroll-only`
/// (retried until the service has reloaded its tokens, at most LONG).
fn register_agent(serve: &Serve, data_dir: &Path, agent_dir: &Path, name: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_vouch"))
        .arg("token")
        .arg("--data-dir")
        .arg(data_dir)
        .args(["create", "--role", "enroll", "--expires", "1h"])
        .output()
        .unwrap_or_else(|e| panic!("run vouch token create: {e}"));
    assert!(
        out.status.success(),
        "vouch token create --role enroll: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(!token.is_empty(), "vouch token create printed no token");
    let deadline = Instant::now() + LONG;
    loop {
        let out = Command::new(env!("CARGO_BIN_EXE_vouch"))
            .arg("agent")
            .arg("--server")
            .arg(format!("http://{}", serve.addr))
            .arg("--data-dir")
            .arg(agent_dir)
            .args(["--name", name, "--enroll-only"])
            .env("VOUCH_ENROLL_TOKEN", &token)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run vouch agent --enroll-only: {e}"));
        if out.status.success() {
            return;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            Instant::now() < deadline,
            "vouch agent --enroll-only kept failing: {err}"
        );
        // The service picks a new token up within about a second.
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Every entry below `dir` by its path relative to `dir`: a file with its
/// bytes, a directory as `None`.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.expect("a directory entry").path();
            let rel = p.strip_prefix(dir).expect("below dir").to_path_buf();
            let meta = fs::symlink_metadata(&p).expect("metadata");
            if meta.is_dir() {
                out.insert(rel, None);
                todo.push(p);
            } else {
                let bytes = fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                out.insert(rel, Some(bytes));
            }
        }
    }
    out
}

/// A new token of `role` from `vouch token create` (the service picks it
/// up within about a second).
fn create_token(data_dir: &Path, name: &str, role: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_vouch"))
        .arg("token")
        .arg("--data-dir")
        .arg(data_dir)
        .args(["create", "--name", name, "--role", role, "--expires", "1h"])
        .output()
        .unwrap_or_else(|e| panic!("run vouch token create: {e}"));
    assert!(
        out.status.success(),
        "vouch token create --role {role}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(!token.is_empty(), "vouch token create printed no token");
    token
}

/// The console's assets alone, served by `configure_console` on a test
/// server: the page loads in chromium, the sign-in form is accessible, and
/// a sign-in that the server cannot confirm keeps no token.
#[actix_web::test]
async fn console_sign_in_page_renders_from_the_embedded_assets() {
    if !browser_available("console_sign_in_page_renders_from_the_embedded_assets") {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr: SocketAddr = listener.local_addr().expect("local addr");
    let server = HttpServer::new(|| App::new().configure(vouch_web::configure_console))
        .workers(1)
        .listen(listener)
        .expect("listen")
        .run();
    let handle = server.handle();
    actix_web::rt::spawn(server);

    let tmp = tempfile::tempdir().expect("tempdir");
    let driver = Driver::start().await;
    let s = driver.session(tmp.path()).await;
    let base = format!("http://{addr}");
    go(&s, &base, "").await;

    s.wait_for(
        "the sign-in page",
        SHORT,
        "return location.hash.startsWith('#/signin') && document.querySelector('#token') !== null",
    )
    .await;
    let h1 = s.find("main h1").await.expect("h1");
    assert_eq!(s.text(&h1).await.unwrap(), "Sign in to Vouch");
    let label = s
        .find("label[for=token]")
        .await
        .expect("a label for the token field");
    assert_eq!(s.text(&label).await.unwrap(), "API token");
    let nav_shown = s
        .execute("return ['nav', 'who'].map(id => getComputedStyle(document.getElementById(id)).display !== 'none')", vec![])
        .await
        .unwrap();
    assert_eq!(
        nav_shown,
        json!([false, false]),
        "no navigation nor sign-out before sign-in"
    );

    click(&s, "#signin-submit").await;
    s.wait_for(
        "the empty-token error",
        SHORT,
        "return document.getElementById('token-error').textContent",
    )
    .await;

    set_field(&s, "#token", "not-a-real-token").await;
    click(&s, "#signin-submit").await;
    let msg = s
        .wait_for("a sign-in error", SHORT, "const t = document.getElementById('token-error').textContent; return t.startsWith('Cannot sign in') || t.includes('not valid') ? t : null")
        .await;
    println!("sign-in error shown: {msg}");
    let kept = s
        .execute("return sessionStorage.getItem('vouch.token')", vec![])
        .await
        .unwrap();
    assert_eq!(kept, Value::Null, "a rejected token is not kept");
    let local = s
        .execute("return localStorage.length", vec![])
        .await
        .unwrap();
    assert_eq!(local, json!(0), "nothing goes to localStorage");
    shot(&s, "signin.png").await;

    s.quit().await.expect("quit");
    handle.stop(true).await;
}

/// Issue 6, end to end: sign in with the printed admin token, create a plan
/// through the form (a bad schedule first, to see the API's field error),
/// run it, watch the job, see the point become recoverable, open its
/// evidence and history, browse its files and download two of them (compared
/// byte for byte with the originals), see an alert for a plan whose source
/// does not exist, screenshot the overview and the point, sign out.
#[actix_web::test]
async fn console_end_to_end_against_vouch_serve() {
    if !browser_available("console_end_to_end_against_vouch_serve") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let src = tmp.path().join("source");
    let downloads = tmp.path().join("downloads");
    fs::create_dir_all(src.join("docs/deep")).unwrap();
    fs::create_dir_all(&downloads).unwrap();
    let hello = b"Hello from the Vouch console test.\n".to_vec();
    let blob = noise(3 << 20, 7);
    fs::write(src.join("hello.txt"), &hello).unwrap();
    fs::write(src.join("random.bin"), &blob).unwrap();
    for i in 0..40 {
        fs::write(
            src.join(format!("docs/note-{i:02}.txt")),
            format!("note {i}\n").repeat(200),
        )
        .unwrap();
    }
    for i in 0..6 {
        fs::write(
            src.join(format!("docs/deep/chunk-{i}.bin")),
            noise(4 << 20, 100 + i),
        )
        .unwrap();
    }

    let serve = Serve::start(&data);
    let base = format!("http://{}", serve.addr);
    let driver = Driver::start().await;
    let s = driver.session(&downloads).await;

    // Sign in.
    go(&s, &base, "").await;
    set_field(&s, "#token", &serve.token).await;
    click(&s, "#signin-submit").await;
    s.wait_for("the overview after sign-in", SHORT, "return location.hash === '#/overview' && !document.getElementById('nav').hidden && document.querySelector('main h1') && document.querySelector('main h1').textContent.startsWith('Overview')").await;
    let who = s.find("#who-name").await.unwrap();
    assert!(
        s.text(&who).await.unwrap().contains("admin"),
        "the role is shown"
    );
    let stored = s
        .execute("return sessionStorage.getItem('vouch.token')", vec![])
        .await
        .unwrap();
    assert_eq!(
        stored.as_str(),
        Some(serve.token.as_str()),
        "token kept for the session"
    );
    s.wait_for(
        "the live event stream",
        SHORT,
        "return document.getElementById('live').dataset.state === 'live'",
    )
    .await;

    // Create a plan through the form; the API's 422 shows by its field.
    go(&s, &base, "#/plans/new").await;
    s.wait_css("#plan-form", SHORT).await;
    set_field(&s, "#f-id", "docs").await;
    set_field(&s, "#f-source", &src.to_string_lossy()).await;
    set_field(&s, "#f-schedule", "this is not cron").await;
    click(&s, "#plan-save").await;
    let err = s
        .wait_for(
            "a field error on the schedule",
            SHORT,
            "return document.querySelector('[data-field=schedule] .field-error').textContent",
        )
        .await;
    println!("schedule error shown by the field: {err}");
    let invalid = s
        .execute(
            "return document.getElementById('f-schedule').getAttribute('aria-invalid')",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(invalid, json!("true"));
    set_field(&s, "#f-schedule", "0 3 * * *").await;
    click(&s, "#plan-save").await;
    s.wait_for("the new plan's page", SHORT, "return location.hash === '#/plans/docs' && document.querySelector('button[data-run=docs]') !== null").await;

    // Run it and watch the job.
    click(&s, "button[data-run=docs]").await;
    go(&s, &base, "#/jobs?plan=docs").await;
    let seen = s
        .wait_for(
            "the backup job on the jobs page",
            LONG,
            "const r = document.querySelector('#jobs-running tr[data-state=running]');\
             if (r) { const p = r.querySelector('.prog'); return 'running: ' + (p ? p.textContent : ''); }\
             const h = document.querySelector('#jobs-history tr[data-state]');\
             return h ? 'finished: ' + h.dataset.state : null;",
        )
        .await;
    println!("jobs page first showed the backup as {seen}");
    if seen.as_str().is_some_and(|v| v.starts_with("running")) {
        // Live progress through the SSE stream: bytes text appears.
        let p = s
            .wait_for(
                "live progress or the end of the job",
                LONG,
                "const r = document.querySelector('#jobs-running tr[data-state=running] .prog');\
                 if (r && /B/.test(r.textContent)) return 'progress: ' + r.textContent;\
                 return document.querySelector('#jobs-history tr[data-state]') ? 'ended' : null;",
            )
            .await;
        println!("job progress seen: {p}");
    }
    let outcome = s
        .wait_for("the backup job's outcome", LONG, "const h = [...document.querySelectorAll('#jobs-history tr[data-state]')].find(r => r.children[1].textContent === 'backup'); return h ? h.dataset.state + ' ' + h.innerText : null")
        .await;
    assert!(
        outcome
            .as_str()
            .unwrap_or_default()
            .starts_with("succeeded"),
        "backup job: {outcome}"
    );

    // The point becomes recoverable (the list follows the live stream).
    go(&s, &base, "#/points?plan=docs").await;
    let point = s
        .wait_for("a recoverable point of plan docs", LONG, "const r = document.querySelector('tr[data-point][data-state=recoverable]'); return r ? r.dataset.point : null")
        .await;
    let point = point.as_str().unwrap().to_owned();
    click(&s, &format!("tr[data-point=\"{point}\"] a")).await;
    s.wait_css("[data-evidence=passed]", SHORT).await;
    for kind in ["backup.committed", "restore_test.passed"] {
        s.wait_css(&format!("ol.timeline li[data-type=\"{kind}\"]"), SHORT)
            .await;
    }
    let evidence = s.find("[data-evidence=passed]").await.unwrap();
    let evidence = s.text(&evidence).await.unwrap();
    println!("evidence: {evidence}");
    assert!(
        evidence.to_lowercase().contains("digests matched"),
        "evidence shows digests: {evidence}"
    );

    // Browse down to the source's files, then download two of them.
    let parts: Vec<String> = src
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    s.wait_css("#pt-files table.files, #pt-files p", SHORT)
        .await;
    for _ in 0..parts.len() + 1 {
        let here = s
            .execute("return [...document.querySelectorAll('#pt-files tr[data-entry]')].map(r => r.dataset.entry)", vec![])
            .await
            .unwrap();
        let names: Vec<&str> = here
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if names.contains(&"hello.txt") {
            break;
        }
        let next = parts
            .iter()
            .find(|p| names.contains(&p.as_str()))
            .cloned()
            .or_else(|| (names.len() == 1).then(|| names[0].to_owned()))
            .unwrap_or_else(|| {
                panic!("cannot find the source in the point's root listing: {names:?}")
            });
        click(
            &s,
            &format!("#pt-files tr[data-entry=\"{next}\"] button[data-dir]"),
        )
        .await;
        s.wait_for("the directory listing", SHORT, &format!("return document.querySelector('#pt-files .crumbs') && document.querySelector('#pt-files .crumbs').textContent.includes({})", json!(next))).await;
    }
    s.wait_css("#pt-files tr[data-entry=\"docs\"][data-kind=dir]", SHORT)
        .await;
    shot(&s, "point.png").await;
    for (name, want) in [("hello.txt", &hello), ("random.bin", &blob)] {
        click(
            &s,
            &format!("#pt-files tr[data-entry=\"{name}\"] button[data-download]"),
        )
        .await;
        let path = downloads.join(name);
        let deadline = Instant::now() + LONG;
        loop {
            if let Ok(got) = fs::read(&path) {
                if got.len() == want.len() {
                    assert!(
                        got == *want,
                        "{name}: downloaded bytes differ from the original"
                    );
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{name} was not downloaded to {}",
                downloads.display()
            );
            actix_web::rt::time::sleep(Duration::from_millis(100)).await;
        }
    }
    s.execute(
        "document.querySelector('#pt-files button[data-dir]').click()",
        vec![],
    )
    .await
    .unwrap();

    // A broken plan: its source does not exist. An alert appears.
    go(&s, &base, "#/plans/new").await;
    s.wait_css("#plan-form", SHORT).await;
    set_field(&s, "#f-id", "broken").await;
    set_field(
        &s,
        "#f-source",
        &tmp.path().join("does-not-exist").to_string_lossy(),
    )
    .await;
    click(&s, "#plan-save").await;
    s.wait_for("the broken plan's page", SHORT, "return location.hash === '#/plans/broken' && document.querySelector('button[data-run=broken]') !== null").await;
    click(&s, "button[data-run=broken]").await;
    go(&s, &base, "#/alerts").await;
    let alert = s
        .wait_for("an open alert about plan broken", LONG, "const r = [...document.querySelectorAll('#alerts-open tr[data-alert]')].find(r => r.innerText.includes('broken')); return r ? r.innerText : null")
        .await;
    println!("alert: {alert}");

    // The overview: one protected plan, the broken one not, the alert.
    go(&s, &base, "#/overview").await;
    s.wait_for("the overview with both plans and the alert", SHORT, "return document.querySelector('tr[data-plan=docs]') && document.querySelector('tr[data-plan=broken]') && document.querySelector('ul.alerts li')").await;
    let docs = s
        .execute(
            "return document.querySelector('tr[data-plan=docs]').dataset.status",
            vec![],
        )
        .await
        .unwrap();
    let broken = s
        .execute(
            "return document.querySelector('tr[data-plan=broken]').dataset.status",
            vec![],
        )
        .await
        .unwrap();
    println!("overview: docs is {docs}, broken is {broken}");
    assert_eq!(
        docs,
        json!("protected"),
        "a plan with a fresh recoverable point is protected"
    );
    assert_ne!(
        broken,
        json!("protected"),
        "a plan that never ran is not protected"
    );
    shot(&s, "overview.png").await;

    // Charts draw SVG from the same API.
    go(&s, &base, "#/charts").await;
    s.wait_css("figure.chart svg rect.bar-dur", SHORT).await;
    shot(&s, "charts.png").await;

    // The plan's files, hooks and time zone through the form: a pattern the
    // API refuses shows by its own field, a size the form cannot read is
    // refused before sending; then saved, and shown again as saved.
    go(&s, &base, "#/plans/docs").await;
    s.wait_css("#plan-form #f-files-exclude", SHORT).await;
    set_field(&s, "#f-time_zone", "Europe/Berlin").await;
    set_field(&s, "#f-files-exclude", "*.tmp\n*.[oa]").await;
    set_field(&s, "#f-files-exclude_larger_than", "lots").await;
    click(&s, "#f-files-exclude_caches").await;
    set_field(&s, "#f-hooks-post-name", "notify").await;
    set_field(&s, "#f-hooks-post-args", "--to\nops").await;
    click(&s, "#plan-save").await;
    s.wait_for("the size refused by the form", SHORT, "return document.querySelector('[data-field=\"files.exclude_larger_than\"] .field-error').textContent || null").await;
    set_field(&s, "#f-files-exclude_larger_than", "2GiB").await;
    click(&s, "#plan-save").await;
    let refused = s
        .wait_for("the API's error by the exclude field", SHORT, "return document.querySelector('[data-field=\"files.exclude\"] .field-error').textContent || null")
        .await;
    println!("exclude error shown by its field: {refused}");
    set_field(&s, "#f-files-exclude", "*.tmp\n/cache").await;
    click(&s, "#plan-save").await;
    s.wait_for(
        "the saved plan",
        SHORT,
        "return location.hash === '#/plans/docs' && document.getElementById('form-errors').hidden",
    )
    .await;
    go(&s, &base, "#/plans").await;
    s.wait_for("the list with the plan's time zone", SHORT, "const r = document.querySelector('tr[data-plan=docs]'); return r && r.innerText.includes('Europe/Berlin') ? true : null").await;
    go(&s, &base, "#/plans/docs").await;
    s.wait_css("#plan-form #f-files-exclude", SHORT).await;
    let shown = s
        .execute(
            "const v = (id) => document.getElementById(id); \
             return [v('f-time_zone').value, v('f-files-exclude').value, \
                     v('f-files-exclude_larger_than').value, v('f-files-exclude_caches').checked, \
                     v('f-hooks-post-name').value, v('f-hooks-post-args').value, v('f-hooks-post-timeout').value, \
                     v('f-hooks-pre-name').value];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        shown,
        json!([
            "Europe/Berlin",
            "*.tmp\n/cache",
            "2GiB",
            true,
            "notify",
            "--to\nops",
            "10m",
            ""
        ]),
        "the plan as saved"
    );
    s.execute(
        "document.querySelector('[data-field=files]').scrollIntoView()",
        vec![],
    )
    .await
    .unwrap();
    shot(&s, "plan-files-hooks.png").await;

    // Sign out: the token is gone and the sign-in form is back.
    click(&s, "#signout").await;
    s.wait_css("#token", SHORT).await;
    let gone = s
        .execute("return sessionStorage.getItem('vouch.token')", vec![])
        .await
        .unwrap();
    assert_eq!(gone, Value::Null, "sign-out forgets the token");

    s.quit().await.expect("quit");
    drop(driver);
    drop(serve);
}

/// The point page's "Restore to a host" form against the real `vouch
/// serve`: a point of a plan backing up a directory under `[sources]
/// allow`; the file browser's **Restore…** fills the form's path with the
/// source; a relative destination is refused by the form by its field
/// (nothing is sent); a non-empty destination starts a job whose failure
/// (the server's message) shows in the form, and the restore is cancelled
/// from there with the directory untouched; then a restore into a new
/// directory under the test's temporary directory runs on the server, the
/// page follows the job until it succeeds, and the restored tree is
/// byte-identical to the source. An operator token (no content access) sees
/// why it cannot restore instead of the form.
#[actix_web::test]
async fn console_restore_form_restores_a_point_onto_the_server() {
    if !browser_available("console_restore_form_restores_a_point_onto_the_server") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let src = tmp.path().join("source");
    let restored = tmp.path().join("restored");
    let occupied = tmp.path().join("occupied");
    let downloads = tmp.path().join("downloads");
    fs::create_dir_all(src.join("docs/deep")).unwrap();
    fs::create_dir_all(&occupied).unwrap();
    fs::create_dir_all(&downloads).unwrap();
    fs::write(src.join("hello.txt"), b"Restored by the Vouch console.\n").unwrap();
    fs::write(src.join("empty.txt"), b"").unwrap();
    fs::write(src.join("random.bin"), noise(2 << 20, 11)).unwrap();
    for i in 0..20 {
        fs::write(
            src.join(format!("docs/note-{i:02}.txt")),
            format!("note {i}\n").repeat(150),
        )
        .unwrap();
    }
    fs::write(src.join("docs/deep/chunk.bin"), noise(5 << 20, 12)).unwrap();
    fs::write(occupied.join("keep.txt"), b"already here\n").unwrap();
    let occupied_before = tree(&occupied);

    // The server may back up, and restore onto, what lies beside its data
    // directory: the source and both destinations are there.
    let serve = Serve::start(&data);
    let base = format!("http://{}", serve.addr);
    let driver = Driver::start().await;
    let s = driver.session(&downloads).await;
    sign_in(&s, &base, &serve.token).await;

    // A point: plan docs backs up the source once (the end-to-end test
    // does this through the forms).
    let src_text = src.to_str().expect("a UTF-8 temporary directory");
    let ran = s
        .execute(
            "const h = { Authorization: 'Bearer ' + sessionStorage.getItem('vouch.token'), 'Content-Type': 'application/json' };\
             return fetch('/api/v1/plans', { method: 'POST', headers: h,\
                 body: JSON.stringify({ id: 'docs', source: arguments[0], schedule: '0 0 1 1 *' }) })\
               .then(r => r.status === 201 ? fetch('/api/v1/plans/docs/run', { method: 'POST', headers: h, body: '{}' }) : r)\
               .then(r => r.status);",
            vec![json!(src_text)],
        )
        .await
        .unwrap();
    assert!(
        ran == json!(200) || ran == json!(202),
        "create and run plan docs: {ran}"
    );
    go(&s, &base, "#/points?plan=docs").await;
    let point = s
        .wait_for(
            "a point of plan docs",
            LONG,
            "const r = document.querySelector('tr[data-point]'); return r ? r.dataset.point : null",
        )
        .await;
    let point = point.as_str().expect("a point id").to_owned();

    // Its page, the file browser at the source's parent: Restore… on the
    // source fills the form's path and moves the focus there.
    let parent = tmp.path().to_str().expect("a UTF-8 temporary directory");
    s.execute(
        "location.hash = '#/points/' + arguments[0] + '?path=' + encodeURIComponent(arguments[1])",
        vec![json!(point), json!(parent)],
    )
    .await
    .unwrap();
    s.wait_css("#restore-form", SHORT).await;
    let filled = s
        .execute(
            "const f = document.getElementById('r-path'); return [f.value, document.querySelector('label[for=r-path]').textContent, document.querySelector('label[for=r-dest]').textContent, document.querySelector('#restore-form [data-host]') ? document.querySelector('#restore-form [data-host]').dataset.host : null, document.querySelectorAll('#restore-form input[name=host]').length]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        filled,
        json!([
            "/",
            "Path inside the point",
            "Destination directory on the host",
            "server",
            0
        ]),
        "the form starts at /, its fields are labelled, and a point of a local plan is restored on the server (no host choice)"
    );
    click(
        &s,
        "#pt-files tr[data-entry=\"source\"] button[data-restore-path]",
    )
    .await;
    let picked = s
        .wait_for(
            "Restore… filling the path",
            SHORT,
            "const f = document.getElementById('r-path'); return f.value !== '/' && document.activeElement === f ? f.value : null",
        )
        .await;
    assert_eq!(
        picked,
        json!(src_text),
        "Restore… fills in the source's path"
    );

    // A relative destination: the form says so by its field and sends nothing.
    set_field(&s, "#r-dest", "restored-here").await;
    click(&s, "#restore-submit").await;
    let refused = s
        .wait_for(
            "the form refusing a relative destination",
            SHORT,
            "return document.getElementById('r-dest-error').textContent",
        )
        .await;
    println!("relative destination: {refused}");
    assert!(
        refused.as_str().unwrap_or_default().contains("relative"),
        "the field says why: {refused}"
    );
    let state = s
        .execute(
            "return [document.getElementById('r-dest').getAttribute('aria-invalid'), document.activeElement.id, document.getElementById('restore-job').innerHTML]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        state,
        json!(["true", "r-dest", ""]),
        "the field is marked invalid and focused; no job was started"
    );

    // A directory that is not empty: the job fails at once (retrying would
    // not empty it) and the server's message shows in the form.
    set_field(&s, "#r-dest", occupied.to_str().unwrap()).await;
    click(&s, "#restore-submit").await;
    let failed = s
        .wait_for(
            "the restore into a non-empty directory failing",
            LONG,
            "const e = document.querySelector('#restore-job [data-outcome=failed]'); return e ? e.innerText : null",
        )
        .await;
    let failed = failed.as_str().unwrap_or_default().to_owned();
    println!("restore into a non-empty directory: {failed}");
    assert!(
        failed.contains("not empty") && failed.contains(occupied.to_str().unwrap()),
        "the server's error shows in the form: {failed}"
    );
    assert_eq!(
        s.execute(
            "return document.getElementById('r-dest').getAttribute('aria-invalid')",
            vec![]
        )
        .await
        .unwrap(),
        Value::Null,
        "the earlier field error is gone"
    );
    let said = s
        .execute(
            "return document.getElementById('restore-said').textContent",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        said.as_str().is_some_and(|t| t.contains("not empty")),
        "the live region says it: {said}"
    );
    s.execute(
        "document.getElementById('restore-job').scrollIntoView({ block: 'center' })",
        vec![],
    )
    .await
    .unwrap();
    shot(&s, "point-restore-failed.png").await;
    assert!(
        failed.contains("never replaces files") && !failed.contains("--overwrite"),
        "the hint fits a job, not the CLI: {failed}"
    );
    let cancelled = s
        .wait_for(
            "the failed restore's job",
            SHORT,
            "const e = document.querySelector('#restore-job .restore-status'); return e && e.dataset.state === 'failed' ? [e.dataset.job, e.dataset.state] : null",
        )
        .await;
    println!("failed restore: {cancelled}");
    assert_eq!(
        tree(&occupied),
        occupied_before,
        "a refused restore leaves the directory as it was"
    );

    // Into a new directory: the page follows the job until it succeeds.
    set_field(&s, "#r-dest", restored.to_str().unwrap()).await;
    click(&s, "#restore-submit").await;
    let outcome = s
        .wait_for(
            "the restore's outcome",
            LONG,
            &format!(
                "const e = document.querySelector('#restore-job .restore-status');\
                 return e && e.dataset.job !== {} && ['succeeded', 'failed', 'abandoned'].includes(e.dataset.state)\
                   ? {{ state: e.dataset.state, text: e.innerText, job: e.dataset.job }} : null",
                cancelled[0]
            ),
        )
        .await;
    println!("restore: {outcome}");
    assert_eq!(
        outcome["state"],
        json!("succeeded"),
        "restore job: {outcome}"
    );
    let text = outcome["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("Restored") && text.contains(restored.to_str().unwrap()),
        "the outcome names where it went: {text}"
    );
    let job = outcome["job"].as_str().unwrap_or_default();
    let kind = s
        .execute(
            "return fetch('/api/v1/jobs/' + encodeURIComponent(arguments[0]), { headers: { Authorization: 'Bearer ' + sessionStorage.getItem('vouch.token') } }).then(r => r.json()).then(j => [j.kind, j.point]);",
            vec![json!(job)],
        )
        .await
        .unwrap();
    assert_eq!(
        kind,
        json!(["restore", point]),
        "a restore job of this point"
    );
    assert!(
        !restored.join(".vouch-restore-in-progress").exists(),
        "the restore marker is gone"
    );
    let (want, got) = (tree(&src), tree(&restored));
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "the restored tree has the source's entries"
    );
    for (path, bytes) in &want {
        assert!(
            got[path] == *bytes,
            "{}: restored bytes differ from the source",
            path.display()
        );
    }
    // The point's history records it (the page follows the live stream).
    s.wait_css("ol.timeline li[data-type=\"restore.completed\"]", SHORT)
        .await;
    s.execute(
        "document.getElementById('pt-restore-section').scrollIntoView({ block: 'start' })",
        vec![],
    )
    .await
    .unwrap();
    shot(&s, "point-restore.png").await;

    // An operator may run plans but not read contents: no form, a reason.
    let operator = create_token(&data, "ops", "operator");
    s.wait_for(
        "the service accepting the new operator token",
        SHORT,
        &format!(
            "return fetch('/api/v1/whoami', {{ headers: {{ Authorization: 'Bearer ' + {} }} }}).then(r => r.ok)",
            json!(operator)
        ),
    )
    .await;
    click(&s, "#signout").await;
    s.wait_css("#token", SHORT).await;
    sign_in(&s, &base, &operator).await;
    go(&s, &base, &format!("#/points/{point}")).await;
    let why = s
        .wait_for(
            "the reason an operator cannot restore",
            SHORT,
            "const e = document.querySelector('[data-restore=forbidden]'); return e ? e.textContent : null",
        )
        .await;
    println!("operator: {why}");
    assert!(
        why.as_str().is_some_and(|t| t.contains("operator")),
        "it names the role: {why}"
    );
    let offered = s
        .execute(
            "return [document.getElementById('restore-form') !== null, document.querySelectorAll('button[data-restore-path]').length]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        offered,
        json!([false, 0]),
        "no restore form nor Restore… buttons"
    );

    s.quit().await.expect("quit");
    drop(driver);
    drop(serve);
}

/// Issue 14: the Agents page against the real `vouch serve`. Before any
/// agent it says how to add one; a real `vouch agent --enroll-only`
/// registers, and the page (following the live stream) lists it with its
/// name, this machine's host name, OS, version, a relative last-seen time
/// with the exact time as its title, and the status badge `idle`; a run of
/// a plan `agent:NAME:/path` while the agent does not poll shows as queued;
/// once the agent takes it under a lease, the agent is `working` on it.
#[actix_web::test]
async fn console_agents_page_lists_a_registered_agent() {
    if !browser_available("console_agents_page_lists_a_registered_agent") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let agent_dir = tmp.path().join("agent");
    let downloads = tmp.path().join("downloads");
    fs::create_dir_all(&downloads).unwrap();
    let serve = Serve::start(&data);
    let base = format!("http://{}", serve.addr);
    let driver = Driver::start().await;
    let s = driver.session(&downloads).await;
    sign_in(&s, &base, &serve.token).await;

    // The navigation links the page; with no agent it says how to add one.
    click(&s, "#nav a[href='#/agents']").await;
    let empty = s
        .wait_for(
            "the agents page's empty state",
            SHORT,
            "const e = document.getElementById('agents-empty'); return location.hash === '#/agents' && e ? e.innerText : null",
        )
        .await;
    let empty = empty.as_str().unwrap_or_default();
    for needle in [
        "vouch token",
        "--role enroll",
        "VOUCH_ENROLL_TOKEN",
        "vouch agent",
        "--enroll-only",
        &base,
    ] {
        assert!(
            empty.contains(needle),
            "the empty state shows {needle:?}: {empty}"
        );
    }
    let h1 = s.find("main h1").await.expect("h1");
    assert!(s.text(&h1).await.unwrap().starts_with("Agents"));
    let current = s
        .execute(
            "return document.querySelector('#nav a[aria-current=page]').getAttribute('href')",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(current, json!("#/agents"), "the nav marks the agents page");
    shot(&s, "agents-empty.png").await;

    // A real agent registers; the open page shows it without a reload.
    let name = "web-1";
    register_agent(&serve, &data, &agent_dir, name);
    let row = format!("#main table.agents tr[data-agent={name}]");
    s.wait_css(&row, SHORT).await;
    let cells = s
        .execute(
            "const r = document.querySelector(arguments[0]);\
             const t = (c) => r.querySelector(c).textContent.trim();\
             const time = r.querySelector('td.seen time');\
             return { name: t('th[scope=row]'), host: t('td.host'), os: t('td.os'), version: t('td.version'),\
                      badge: t('td.status .badge'), status: r.querySelector('td.status .badge').dataset.status,\
                      seen: t('td.seen'), seen_title: time ? time.getAttribute('title') : null,\
                      jobs: t('td.jobs'), queued: t('td.queued'),\
                      headers: [...document.querySelectorAll('table.agents thead th[scope=col]')].map(h => h.textContent) };",
            vec![json!(row)],
        )
        .await
        .unwrap();
    println!("agents page row: {cells}");
    let host = fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("this machine's host name")
        .trim()
        .to_owned();
    assert_eq!(cells["name"], json!(name), "the agent's name");
    assert_eq!(cells["host"], json!(host), "the agent's host name");
    assert_eq!(cells["os"], json!("linux"));
    assert_eq!(cells["version"], json!(env!("CARGO_PKG_VERSION")));
    assert_eq!(
        cells["badge"],
        json!("idle"),
        "a registered agent without a lease is idle"
    );
    assert_eq!(cells["status"], json!("idle"));
    assert!(
        cells["seen"].as_str().is_some_and(|t| t.ends_with("ago")),
        "last seen is relative: {}",
        cells["seen"]
    );
    assert!(
        cells["seen_title"]
            .as_str()
            .is_some_and(|t| t.ends_with("UTC")),
        "the exact last-seen time is its title: {}",
        cells["seen_title"]
    );
    assert_eq!(cells["jobs"], json!("none"));
    assert_eq!(cells["queued"], json!("0"));
    assert_eq!(
        cells["headers"],
        json!([
            "Agent",
            "Host",
            "OS",
            "Version",
            "Last seen",
            "Status",
            "Running jobs",
            "Queued jobs"
        ]),
        "every column has a header"
    );
    shot(&s, "agents.png").await;

    // A run of the agent's plan waits for it (it is not polling): queued.
    let created = s
        .execute(
            "const h = { Authorization: 'Bearer ' + sessionStorage.getItem('vouch.token'), 'Content-Type': 'application/json' };\
             return fetch('/api/v1/plans', { method: 'POST', headers: h,\
                 body: JSON.stringify({ id: 'web', source: 'agent:' + arguments[0] + ':/etc', schedule: '0 0 1 1 *' }) })\
               .then(r => r.status === 201 ? fetch('/api/v1/plans/web/run', { method: 'POST', headers: h, body: '{}' }) : r)\
               .then(r => r.status);",
            vec![json!(name)],
        )
        .await
        .unwrap();
    assert!(
        created == json!(200) || created == json!(202),
        "create and run plan web: {created}"
    );
    let queued = s
        .wait_for(
            "the queued job on the agents page",
            SHORT,
            &format!(
                "const r = document.querySelector({});\
                 return r && r.querySelector('td.queued').textContent.trim() === '1' ? r.querySelector('td.status .badge').textContent : null;",
                json!(row)
            ),
        )
        .await;
    assert_eq!(
        queued,
        json!("idle"),
        "a queued job alone does not make it working"
    );

    // The agent takes the job (its own credential, as `vouch agent` would
    // call): the lease makes it working, the job is listed with its plan
    // and lease time, linked to the jobs page, and nothing is queued.
    let credential = fs::read_to_string(agent_dir.join("credential"))
        .expect("the agent keeps its credential")
        .trim()
        .to_owned();
    let leased = s
        .execute(
            "return fetch('/api/v1/agent/jobs?wait=5s', { headers: { Authorization: 'Bearer ' + arguments[0] } })\
               .then(r => r.status === 200 ? r.json() : { status: r.status });",
            vec![json!(credential)],
        )
        .await
        .unwrap();
    let job = leased["job"]
        .as_str()
        .unwrap_or_else(|| panic!("the agent got its job: {leased}"))
        .to_owned();
    let working = s
        .wait_for(
            "the agent working on its job",
            SHORT,
            &format!(
                "const r = document.querySelector({});\
                 const li = r && r.querySelector('td.jobs li[data-job]');\
                 if (!li || r.dataset.status !== 'working') return null;\
                 return {{ badge: r.querySelector('td.status .badge').textContent, job: li.dataset.job,\
                          href: li.querySelector('a').getAttribute('href'), text: li.innerText,\
                          queued: r.querySelector('td.queued').textContent.trim() }};",
                json!(row)
            ),
        )
        .await;
    println!("agents page while working: {working}");
    assert_eq!(working["badge"], json!("working"));
    assert_eq!(working["job"], json!(job));
    assert_eq!(
        working["href"],
        json!(format!("#/jobs?job={job}")),
        "the job links to the jobs page"
    );
    let text = working["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("plan web") && text.contains(" left"),
        "the lease shows its plan and time left: {text}"
    );
    assert_eq!(working["queued"], json!("0"));
    shot(&s, "agents-working.png").await;

    s.quit().await.expect("quit");
    drop(driver);
    drop(serve);
}

/// A plan's second copy through the console: the form takes the replica,
/// the plan's page shows where the copies are and that the newest is
/// proven, and the copy's page names its source.
#[actix_web::test]
async fn console_plan_with_a_replica_shows_its_proven_copy() {
    if !browser_available("console_plan_with_a_replica_shows_its_proven_copy") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let src = tmp.path().join("source");
    let second = tmp.path().join("second");
    let downloads = tmp.path().join("downloads");
    fs::create_dir_all(&src).unwrap();
    fs::create_dir_all(&downloads).unwrap();
    fs::write(src.join("hello.txt"), b"copied twice\n").unwrap();
    fs::write(src.join("random.bin"), noise(1 << 20, 21)).unwrap();
    // The replica: an existing repository with its own passphrase.
    let pass = tmp.path().join("second.pass");
    fs::write(&pass, "a second passphrase").unwrap();
    let init = Command::new(env!("CARGO_BIN_EXE_vouch"))
        .args([
            "init",
            "--insecure-kdf",
            "--kdf-memory-kib",
            "1024",
            "--kdf-iterations",
            "1",
        ])
        .env("VOUCH_REPOSITORY", &second)
        .env("VOUCH_PASSWORD", "a second passphrase")
        .output()
        .expect("vouch init");
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let serve = Serve::start_with(
        &data,
        &format!(
            "[[repositories]]\nid = \"second\"\npath = {:?}\npassphrase_file = {:?}\n",
            second.to_str().unwrap(),
            pass.to_str().unwrap()
        ),
    );
    let base = format!("http://{}", serve.addr);
    let driver = Driver::start().await;
    let s = driver.session(&downloads).await;
    sign_in(&s, &base, &serve.token).await;

    go(&s, &base, "#/plans/new").await;
    s.wait_css("#plan-form", SHORT).await;
    set_field(&s, "#f-id", "twice").await;
    set_field(&s, "#f-source", &src.to_string_lossy()).await;
    set_field(&s, "#f-replica-repository", "default").await;
    click(&s, "#plan-save").await;
    // The replica cannot be the plan's own repository: said by its field.
    let err = s
        .wait_for(
            "a field error on the replica",
            SHORT,
            "const e = document.querySelector('[data-field=\"replica.repository\"] .field-error'); return e && e.textContent ? e.textContent : null",
        )
        .await;
    assert!(
        err.as_str().unwrap_or_default().contains("own repository"),
        "{err}"
    );
    set_field(&s, "#f-replica-repository", "second").await;
    set_field(&s, "#f-replica-require", "proven").await;
    click(&s, "#plan-save").await;
    s.wait_for("the new plan's page", SHORT, "return location.hash === '#/plans/twice' && document.querySelector('button[data-run=twice]') !== null").await;
    let kept = s
        .execute("return [document.getElementById('f-replica-repository').value, document.getElementById('f-replica-require').value]", vec![])
        .await
        .unwrap();
    assert_eq!(kept, json!(["second", "proven"]));
    click(&s, "button[data-run=twice]").await;
    // Backup, copy, and the copy's own verification and restore test.
    s.wait_for(
        "the copy proven",
        LONG,
        "return fetch('/api/v1/plans/twice', { headers: { Authorization: 'Bearer ' + sessionStorage.getItem('vouch.token') } })\
           .then(r => r.json()).then(p => p.copies[0].newest && p.copies[0].newest.state === 'recoverable' ? true : null)",
    )
    .await;
    go(&s, &base, "#/plans").await;
    go(&s, &base, "#/plans/twice").await;
    let fact = s
        .wait_for(
            "the proven copy on the plan's page",
            LONG,
            "const d = document.querySelector('[data-copies=second] dd'); return d && /1 of 1 recoverable/.test(d.textContent) && d.querySelector('.badge') ? d.textContent : null",
        )
        .await;
    let fact = fact.as_str().unwrap_or_default().to_owned();
    assert!(fact.contains("on this host"), "{fact}");
    assert!(fact.contains("locks enforced by vouch"), "{fact}");
    shot(&s, "plan-with-replica.png").await;
    // The copy's own page names its source.
    click(&s, "[data-copies=second] dd a").await;
    let copy_of = s
        .wait_for(
            "the copy's page",
            SHORT,
            "const dt = [...document.querySelectorAll('dl dt')].find(d => d.textContent === 'Copy of'); return dt ? dt.nextElementSibling.textContent : null",
        )
        .await;
    assert!(
        copy_of
            .as_str()
            .unwrap_or_default()
            .contains("on this host"),
        "{copy_of}"
    );
    s.quit().await.expect("quit");
    drop(driver);
    drop(serve);
}

/// The plan form's boot check and Proxmox VE dump policy: set through the
/// form, kept when another field is edited, removed by emptying the
/// marker.
#[actix_web::test]
async fn console_plan_form_takes_a_boot_check_and_a_dump_policy() {
    if !browser_available("console_plan_form_takes_a_boot_check_and_a_dump_policy") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let dump = tmp.path().join("dump");
    let downloads = tmp.path().join("downloads");
    fs::create_dir_all(&dump).unwrap();
    fs::create_dir_all(&downloads).unwrap();
    let serve = Serve::start(&data);
    let base = format!("http://{}", serve.addr);
    let driver = Driver::start().await;
    let s = driver.session(&downloads).await;
    sign_in(&s, &base, &serve.token).await;
    let plan_js = "return fetch('/api/v1/plans/vm', { headers: { Authorization: 'Bearer ' + sessionStorage.getItem('vouch.token') } })\
        .then(r => r.json()).then(p => [p.rpo, p.restore_test.boot, p.proxmox])";

    go(&s, &base, "#/plans/new").await;
    s.wait_css("#plan-form", SHORT).await;
    set_field(&s, "#f-id", "vm").await;
    set_field(&s, "#f-source", &format!("vzdump:{}", dump.display())).await;
    set_field(&s, "#f-restore_test-boot-marker", "login:").await;
    set_field(&s, "#f-restore_test-boot-timeout", "2m").await;
    set_field(&s, "#f-restore_test-boot-memory_mib", "256").await;
    set_field(&s, "#f-proxmox-mode", "stop").await;
    click(&s, "#f-proxmox-remove_dump").await;
    click(&s, "#plan-save").await;
    s.wait_for("the new plan's page", SHORT, "return location.hash === '#/plans/vm' && document.querySelector('button[data-run=vm]') !== null").await;
    let saved = s.execute(plan_js, vec![]).await.unwrap();
    assert_eq!(
        saved,
        json!(["1day 2h", {"marker": "login:", "timeout": "2m", "memory_mib": 256},
            {"mode": "stop", "remove_dump": true}]),
        "{saved}"
    );
    // Another field edited: the boot check and the dump policy stay.
    s.wait_css("#f-restore_test-boot-marker", SHORT).await;
    set_field(&s, "#f-rpo", "2h").await;
    click(&s, "#plan-save").await;
    let kept = s
        .wait_for(
            "the RPO saved",
            SHORT,
            &format!(
                "{} .then(v => v[0] === '2h' ? v : null)",
                plan_js.trim_end_matches(';')
            ),
        )
        .await;
    assert_eq!(kept[1]["marker"], "login:", "{kept}");
    assert_eq!(kept[2]["remove_dump"], true, "{kept}");
    // No marker: no boot.
    s.wait_css("#f-restore_test-boot-marker", SHORT).await;
    set_field(&s, "#f-restore_test-boot-marker", "").await;
    click(&s, "#plan-save").await;
    let gone = s
        .wait_for(
            "the boot check removed",
            SHORT,
            &format!(
                "{} .then(v => v[1] === null ? v : null)",
                plan_js.trim_end_matches(';')
            ),
        )
        .await;
    assert_eq!(gone[2]["mode"], "stop", "{gone}");
    s.quit().await.expect("quit");
    drop(driver);
    drop(serve);
}

/// A container point's restore test ran `/bin/true` in the restored root:
/// the point's page says so, with the command and its output.
#[actix_web::test]
async fn console_point_shows_the_started_guest() {
    if !browser_available("console_point_shows_the_started_guest") {
        return;
    }
    if !common::is_root() {
        // chroot needs root; CI runs as root.
        assert!(std::env::var_os("CI").is_none(), "CI runs as root");
        eprintln!("SKIPPED: console_point_shows_the_started_guest needs root (chroot)");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let dump = tmp.path().join("dump");
    let root = tmp.path().join("ct-root");
    let downloads = tmp.path().join("downloads");
    fs::create_dir_all(&dump).unwrap();
    fs::create_dir_all(&downloads).unwrap();
    common::guests::container_root(&root);
    fs::write(
        dump.join("vzdump-lxc-200-2026_12_03-02_00_00.tar.gz"),
        common::guests::gzip(&common::guests::tar_of(&root)),
    )
    .unwrap();
    let serve = Serve::start(&data);
    let base = format!("http://{}", serve.addr);
    let driver = Driver::start().await;
    let s = driver.session(&downloads).await;
    sign_in(&s, &base, &serve.token).await;
    let point = s
        .wait_for(
            "the container's point recoverable",
            LONG,
            &format!(
                "const h = {{ Authorization: 'Bearer ' + sessionStorage.getItem('vouch.token'), 'Content-Type': 'application/json' }};\
                 if (!window.__ct) {{ window.__ct = fetch('/api/v1/plans', {{ method: 'POST', headers: h,\
                   body: JSON.stringify({{ id: 'ct', source: {:?}, schedule: '0 3 * * *', rpo: '1h' }}) }})\
                   .then(r => fetch('/api/v1/plans/ct/run', {{ method: 'POST', headers: h, body: '{{}}' }})); }}\
                 return window.__ct.then(() => fetch('/api/v1/points?plan=ct', {{ headers: h }})).then(r => r.json())\
                   .then(a => a.length && a[0].state === 'recoverable' ? a[0].id : null)",
                format!("vzdump:{}", dump.display())
            ),
        )
        .await;
    let point = point.as_str().unwrap().to_owned();
    go(&s, &base, &format!("#/points/{point}")).await;
    let up = s
        .wait_for(
            "the started guest in the evidence",
            SHORT,
            "const e = document.querySelector('[data-guest=up]'); return e ? e.closest('dd').textContent : null",
        )
        .await;
    assert!(
        up.as_str().unwrap_or_default().contains("ran /bin/true"),
        "{up}"
    );
    let cmd = s
        .execute(
            "const d = document.querySelector('[data-guest-console] code'); return d ? d.textContent : null",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        cmd.as_str().unwrap_or_default().starts_with("chroot "),
        "{cmd}"
    );
    shot(&s, "point-guest-started.png").await;
    s.quit().await.expect("quit");
    drop(driver);
    drop(serve);
}

/// A backup that looks like files being encrypted: the point's page shows
/// the heuristic's signals, the paths that weighed most and what changed;
/// the plans list and the plan's page show the anomaly badge.
#[actix_web::test]
async fn console_shows_an_anomaly_on_the_point_and_its_plan() {
    if !browser_available("console_shows_an_anomaly_on_the_point_and_its_plan") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let downloads = tmp.path().join("downloads");
    fs::create_dir_all(&downloads).unwrap();
    let home = tmp.path().join("home");
    common::ransom::project_tree(&home);
    let serve = Serve::start(&data);
    let base = format!("http://{}", serve.addr);
    let driver = Driver::start().await;
    let s = driver.session(&downloads).await;
    sign_in(&s, &base, &serve.token).await;
    // Runs the plan (creating it the first time) until it has `n` points.
    let run_until = |n: usize| {
        format!(
            "const h = {{ Authorization: 'Bearer ' + sessionStorage.getItem('vouch.token'), 'Content-Type': 'application/json' }};\
             if (!window.__run{n}) {{ window.__run{n} = (window.__plan || (window.__plan = fetch('/api/v1/plans', {{ method: 'POST', headers: h,\
               body: JSON.stringify({{ id: 'home', source: {:?}, schedule: '0 3 * * *', rpo: '1h' }}) }})))\
               .then(() => fetch('/api/v1/plans/home/run', {{ method: 'POST', headers: h, body: '{{}}' }})); }}\
             return window.__run{n}.then(() => fetch('/api/v1/points?plan=home', {{ headers: h }})).then(r => r.json())\
               .then(a => a.length >= {n} ? a.sort((x, y) => y.snapshot_at.localeCompare(x.snapshot_at))[0].id : null)",
            home.display().to_string()
        )
    };
    s.wait_for("the first point", LONG, &run_until(1)).await;
    common::ransom::attack(
        &home,
        common::ransom::Attack {
            permille: 100,
            rename_to: Some("locked"),
            replace_extension: false,
            notes: true,
            encrypt: true,
        },
    );
    let point = s.wait_for("the attacked point", LONG, &run_until(2)).await;
    let point = point.as_str().unwrap().to_owned();
    go(&s, &base, &format!("#/points/{point}")).await;
    let kinds = s
        .wait_for(
            "the anomaly's signals",
            SHORT,
            "const l = [...document.querySelectorAll('[data-anomalies] .badge.anomaly')].map(e => e.textContent); return l.length ? l.join(',') : null",
        )
        .await;
    for k in ["entropy-jump", "extension-churn", "ransom-note"] {
        assert!(
            kinds.as_str().unwrap_or_default().contains(k),
            "{k} in {kinds}"
        );
    }
    let paths = s
        .execute(
            "const e = document.querySelector('[data-anomaly-paths]'); return e ? e.textContent : null",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        paths.as_str().unwrap_or_default().contains(".locked"),
        "{paths}"
    );
    let changes = s
        .execute(
            "const e = document.querySelector('[data-changes]'); if (!e) return null; e.open = true; return e.textContent",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        changes.as_str().unwrap_or_default().contains(".locked"),
        "{changes}"
    );
    shot(&s, "point-anomaly.png").await;
    go(&s, &base, "#/plans").await;
    let badge = s
        .wait_for(
            "the plan's anomaly badge",
            SHORT,
            "const e = document.querySelector('tr[data-plan=home] [data-plan-anomaly]'); return e ? e.getAttribute('href') : null",
        )
        .await;
    assert_eq!(badge.as_str(), Some(format!("#/points/{point}").as_str()));
    shot(&s, "plans-anomaly.png").await;
    s.quit().await.expect("quit");
    drop(driver);
    drop(serve);
}

/// The security page: every check with its status badge (unknown grey and
/// dashed, never green), the worst first; an admin confirms a key export
/// with the check code `vouch key export` printed (a wrong code is
/// refused and said), and the check turns ok.
#[actix_web::test]
async fn console_security_page_shows_the_checks_and_confirms_a_key_export() {
    if !browser_available("console_security_page_shows_the_checks_and_confirms_a_key_export") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let downloads = tmp.path().join("downloads");
    fs::create_dir_all(&downloads).unwrap();
    let home = tmp.path().join("home");
    fs::create_dir_all(&home).unwrap();
    fs::write(home.join("a.txt"), b"hello").unwrap();
    let serve = Serve::start(&data);
    let base = format!("http://{}", serve.addr);
    let driver = Driver::start().await;
    let s = driver.session(&downloads).await;
    sign_in(&s, &base, &serve.token).await;
    // A plan with no point yet: its restore tests cannot be told.
    s.wait_for(
        "the plan",
        SHORT,
        &format!(
            "if (!window.__plan) {{ window.__plan = fetch('/api/v1/plans', {{ method: 'POST', headers: {{ Authorization: 'Bearer ' + sessionStorage.getItem('vouch.token'), 'Content-Type': 'application/json' }}, body: JSON.stringify({{ id: 'home', source: {:?}, schedule: '0 3 * * *', rpo: '1h' }}) }}).then(r => r.status); }} return window.__plan",
            home.display().to_string()
        ),
    )
    .await;
    go(&s, &base, "#/security").await;
    let status = s
        .wait_for(
            "the key-export check",
            SHORT,
            "const r = document.querySelector('tr[data-check=\"key-export/default\"]'); return r ? r.dataset.status : null",
        )
        .await;
    assert_eq!(status.as_str(), Some("warning"));
    // The worst first.
    let order = s
        .execute(
            "const order = { failed: 0, warning: 1, unknown: 2, ok: 3 }; return [...document.querySelectorAll('tr[data-check]')].map(r => order[r.dataset.status])",
            vec![],
        )
        .await
        .unwrap();
    let order: Vec<u64> = order
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_u64())
        .collect();
    assert!(
        order.len() > 5 && order.windows(2).all(|w| w[0] <= w[1]),
        "{order:?}"
    );

    // A wrong code is refused, and said.
    set_field(&s, "#ke-check", "0000-0000-0000-0000").await;
    click(&s, "#key-export-form button[type=submit]").await;
    let said = s
        .wait_for(
            "the refusal",
            SHORT,
            "const f = document.querySelector('#flash .flash.error'); return f ? f.textContent : null",
        )
        .await;
    assert!(
        said.as_str().unwrap_or("").contains("does not match"),
        "{said}"
    );

    // The right one, from `vouch key export`.
    let out = Command::new(env!("CARGO_BIN_EXE_vouch"))
        .args(["key", "export", "--paper", "--repo"])
        .arg(data.join("repository"))
        .env("VOUCH_PASSWORD_FILE", data.join("repository.passphrase"))
        .env_remove("VOUCH_PASSWORD")
        .output()
        .expect("vouch key export runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let paper = String::from_utf8_lossy(&out.stdout).into_owned();
    let code = paper
        .lines()
        .find_map(|l| l.strip_prefix("check "))
        .expect("a check code")
        .to_owned();
    set_field(&s, "#ke-check", &code).await;
    click(&s, "#key-export-form button[type=submit]").await;
    s.wait_for(
        "the key-export check to turn ok",
        SHORT,
        "const r = document.querySelector('tr[data-check=\"key-export/default\"]'); return r && r.dataset.status === 'ok' ? true : null",
    )
    .await;
    let unknown = s
        .wait_for(
            "the plan's restore-test check, unknown",
            SHORT,
            "const r = document.querySelector('tr[data-check=\"restore-tests/home\"]'); if (!r) return null; const b = r.querySelector('.badge'); return [r.dataset.status, b.className, getComputedStyle(b).borderStyle].join(' ')",
        )
        .await;
    assert_eq!(
        unknown.as_str(),
        Some("unknown badge c-unknown dashed"),
        "unknown is grey and dashed, never green"
    );
    s.execute("window.scrollTo(0, 0); return null", vec![])
        .await
        .unwrap();
    shot(&s, "security.png").await;
    s.quit().await.expect("quit");
    drop(driver);
    drop(serve);
}

/// Issue 17, reports: a day of work done under libfaketime on 2026-01-15
/// (a plan, one backup), then the console on the real clock shows that
/// day's report (the plan's line, the totals), downloads its CSV (what the
/// API gives, byte for byte), and says why a day that has not ended has no
/// report yet.
#[actix_web::test]
async fn console_reports_page_shows_and_downloads_a_past_day() {
    if !browser_available("console_reports_page_shows_and_downloads_a_past_day") {
        return;
    }
    let Some(lib) = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists()) else {
        eprintln!("SKIPPED: libfaketime is not installed (apt-get install faketime; .ci/run does)");
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install faketime for this test"
        );
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let downloads = tmp.path().join("downloads");
    let home = tmp.path().join("home");
    fs::create_dir_all(&downloads).unwrap();
    fs::create_dir_all(&home).unwrap();
    for i in 0..10 {
        fs::write(
            home.join(format!("f{i}.txt")),
            format!("file {i}\n").repeat(100),
        )
        .unwrap();
    }
    {
        let config = tmp.path().join("faked.toml");
        fs::write(
            &config,
            format!(
                "[sources]\nallow = [{:?}]\n",
                tmp.path().to_str().expect("UTF-8")
            ),
        )
        .unwrap();
        let svc = common::served::start_with_env(
            &[
                ("LD_PRELOAD", lib),
                ("FAKETIME", "@2026-01-15 10:00:00"),
                ("NO_FAKE_STAT", "1"),
            ],
            &data,
            &config,
            None,
        );
        let (status, body) = common::served::post(
            &svc,
            "/api/v1/plans",
            &json!({"id": "home", "source": home, "schedule": "0 3 * * *", "rpo": "1h"}),
        );
        assert_eq!(status, 201, "{body}");
        let (status, body) = common::served::post(&svc, "/api/v1/plans/home/run", &Value::Null);
        assert_eq!(status, 202, "{body}");
        common::served::eventually("the backup", || {
            let pts = common::served::get(&svc, "/api/v1/points?plan=home");
            (pts.as_array().map(Vec::len) == Some(1)).then_some(())
        });
    }
    let serve = Serve::start(&data);
    let base = format!("http://{}", serve.addr);
    let driver = Driver::start().await;
    let s = driver.session(&downloads).await;
    sign_in(&s, &base, &serve.token).await;
    click(&s, "#nav a[data-section=reports]").await;
    s.wait_css("#report-form", SHORT).await;
    go(&s, &base, "#/reports?period=daily&at=2026-01-15").await;
    let made = s
        .wait_for(
            "the plan's line of the day",
            SHORT,
            // The report shown before the navigation (yesterday's) stays in
            // the page until the new one replaces it: read the row only
            // under the asked day's title.
            "const t = document.querySelector('#report-title'); const r = document.querySelector('#report-plans tr[data-plan=home]'); return t && t.textContent.includes('2026-01-15') && r ? r.children[3].textContent : null",
        )
        .await;
    assert_eq!(made.as_str(), Some("1"), "one point made that day");
    let title = s
        .execute(
            "return document.querySelector('#report-title').textContent",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(title.as_str(), Some("daily 2026-01-15 · installation"));
    shot(&s, "reports.png").await;
    click(&s, "#report button[data-format=csv]").await;
    let path = downloads.join("vouch-report-daily-2026-01-15-installation.csv");
    let want = common::served::raw_bytes(
        serve.addr.parse().expect("an address"),
        "GET",
        "/api/v1/reports?period=daily&at=2026-01-15&format=csv",
        &serve.token,
        &[],
        b"",
    );
    assert_eq!(want.0, 200);
    let deadline = Instant::now() + LONG;
    loop {
        if let Ok(got) = fs::read(&path) {
            if got.len() == want.1.len() {
                assert_eq!(got, want.1, "the CSV downloaded is the API's");
                break;
            }
        }
        assert!(Instant::now() < deadline, "the CSV was not downloaded");
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
    go(&s, &base, "#/reports?period=daily&at=2999-01-01").await;
    let err = s
        .wait_for(
            "why there is no report",
            SHORT,
            "const e = document.querySelector('#report .error'); return e ? e.textContent : null",
        )
        .await;
    assert!(
        err.as_str().unwrap_or_default().contains("has not ended"),
        "{err}"
    );
    s.quit().await.expect("quit");
    drop(driver);
    drop(serve);
}
