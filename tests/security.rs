//! The security center in a running `vouch serve`: the checks are
//! evaluated from the log, the configuration and the repositories; a key
//! export is confirmed only with the key's own check code; the log's head
//! export is recorded; a check that fails raises a critical alert and
//! resolves when fixed; the metrics carry every check's status; every
//! change is in the log. And the key export itself: a paper key brings a
//! repository back when its passphrase is lost.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::served::*;
use serde_json::{json, Value};

fn write_config(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("vouch.toml");
    std::fs::write(
        &path,
        format!(
            "{}[alerting]\nevaluate_every = \"1s\"\n\n[security]\nevaluate_every = \"1s\"\n",
            sources_allow(dir)
        ),
    )
    .expect("config written");
    path
}

fn check(svc: &Service, id: &str) -> Value {
    let s = get(svc, "/api/v1/security");
    s["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no check {id} in {s:#}"))
}

/// Waits until check `id` has `status` (the center is evaluated every
/// second and answered at most 30 s old; a new evaluation is asked for by
/// waiting it out on the recorded events).
fn until_status(svc: &Service, id: &str, status: &str) -> Value {
    until_recorded(svc, id, status, "")
}

/// [`until_status`], with a reason that says `says`.
fn until_recorded(svc: &Service, id: &str, status: &str, says: &str) -> Value {
    eventually(&format!("check {id} to be {status} ({says})"), || {
        let events = get(svc, "/api/v1/events?type=security.check_changed&limit=1000");
        events["events"]
            .as_array()
            .expect("events")
            .iter()
            .rev()
            .find(|e| e["data"]["check"] == id)
            .filter(|e| {
                e["data"]["status"] == status
                    && e["data"]["reason"].as_str().unwrap_or("").contains(says)
            })
            .map(|e| e["data"].clone())
    })
}

fn vouch(args: &[&str], envs: &[(&str, &str)], stdin: Option<&str>) -> (bool, String, String) {
    use std::io::Write;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vouch"));
    cmd.args(args)
        .env_remove("VOUCH_PASSWORD")
        .env_remove("VOUCH_PASSWORD_FILE")
        .env_remove("VOUCH_NEW_PASSWORD")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("vouch runs");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(s) = stdin {
        input.write_all(s.as_bytes()).expect("stdin written");
    }
    drop(input);
    let out = child.wait_with_output().expect("vouch ends");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_security_center_tells_the_truth_and_alerts_on_a_failed_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let config = write_config(dir.path());
    let svc = start(&data, &config, None);

    let s = get(&svc, "/api/v1/security");
    let counts = &s["counts"];
    let total: u64 = ["ok", "warning", "failed", "unknown"]
        .iter()
        .map(|k| counts[k].as_u64().expect("a count"))
        .sum();
    assert_eq!(
        total as usize,
        s["checks"].as_array().expect("checks").len()
    );
    assert_ne!(
        s["status"], "ok",
        "a fresh installation has things to do: {s:#}"
    );

    // What a fresh default installation is, said as it is.
    let enc = check(&svc, "encryption/default");
    assert_eq!(enc["status"], "ok", "{enc}");
    assert!(
        enc["reason"]
            .as_str()
            .expect("reason")
            .contains("AES-256-GCM"),
        "{enc}"
    );
    let loc = check(&svc, "key-location/default");
    assert_eq!(loc["status"], "warning", "{loc}");
    assert!(
        loc["reason"]
            .as_str()
            .expect("reason")
            .contains("same disk"),
        "{loc}"
    );
    assert_eq!(check(&svc, "key-export/default")["status"], "warning");
    let tls = check(&svc, &format!("tls/{}", svc.addr));
    assert_eq!(tls["status"], "ok", "loopback plain HTTP: {tls}");
    let expiry = check(&svc, "tokens-expiry");
    assert_eq!(
        expiry["status"], "warning",
        "the first admin token never expires: {expiry}"
    );
    assert_eq!(check(&svc, "log-head-export")["status"], "warning");
    for c in s["checks"].as_array().expect("checks") {
        assert!(!c["reason"].as_str().unwrap_or("").is_empty(), "{c}");
        if c["status"] != "ok" {
            assert!(
                !c["action"].as_str().unwrap_or("").is_empty(),
                "what to do: {c}"
            );
        }
    }

    // An agent token cannot read it.
    let agent_token = vouch_token(&data, &["create", "--role", "agent", "--name", "probe-1"]);
    // (A new token is taken up within seconds of its file changing.)
    let code = eventually("the agent token to be known", || {
        let (code, _) = http(
            svc.addr,
            "GET",
            "/api/v1/security",
            Some(&agent_token),
            None,
        );
        (code != 401).then_some(code)
    });
    assert_eq!(code, 403);

    // A key export: a wrong check code is refused and recorded nowhere; the
    // key's own is confirmed.
    let pass_file = data.join("repository.passphrase");
    let repo = data.join("repository");
    let repo_arg = repo.to_str().expect("utf-8");
    let pass_arg = pass_file.to_str().expect("utf-8");
    let (ok, paper, err) = vouch(
        &["key", "export", "--paper", "--repo", repo_arg],
        &[("VOUCH_PASSWORD_FILE", pass_arg)],
        None,
    );
    assert!(ok, "{err}");
    assert!(paper.starts_with("VOUCH PAPER KEY v1"), "{paper}");
    let code_line = paper
        .lines()
        .find_map(|l| l.strip_prefix("check "))
        .expect("the check code")
        .to_owned();
    assert!(err.contains(&code_line), "the check code is said: {err}");
    let (status, body) = post(
        &svc,
        "/api/v1/security/key-exports",
        &json!({"repository": "default", "check": "0000-0000-0000-0000"}),
    );
    assert_eq!(status, 409, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("does not match"),
        "{body}"
    );
    let (status, body) = post(
        &svc,
        "/api/v1/security/key-exports",
        &json!({"repository": "nope", "check": code_line}),
    );
    assert_eq!(status, 404, "{body}");
    let operator = vouch_token(&data, &["create", "--role", "operator", "--name", "op"]);
    let status = eventually("the operator token to be known", || {
        let (status, _) = http(
            svc.addr,
            "POST",
            "/api/v1/security/key-exports",
            Some(&operator),
            Some(&json!({"repository": "default", "check": code_line})),
        );
        (status != 401).then_some(status)
    });
    assert_eq!(status, 403, "admin only");
    let (status, body) = post(
        &svc,
        "/api/v1/security/key-exports",
        &json!({"repository": "default", "check": code_line.to_uppercase()}),
    );
    assert_eq!(status, 200, "{body}");
    let export = body["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["id"] == "key-export/default")
        .cloned()
        .expect("key-export check");
    assert_eq!(export["status"], "ok", "{export}");
    let confirmed = get(&svc, "/api/v1/events?type=key.export_confirmed&limit=10");
    let confirmed = confirmed["events"].as_array().expect("events");
    assert_eq!(confirmed.len(), 1, "{confirmed:?}");
    assert_eq!(confirmed[0]["data"]["by"], "admin");

    // The head, fetched to be kept elsewhere, is recorded (once an hour
    // per token) and the check follows.
    let head = get(&svc, "/api/v1/log/head");
    assert!(head["seq"].as_u64().expect("seq") > 0, "{head}");
    let _ = get(&svc, "/api/v1/log/head");
    let exported = get(&svc, "/api/v1/events?type=log.head_exported&limit=10");
    assert_eq!(
        exported["events"].as_array().expect("events").len(),
        1,
        "{exported}"
    );
    let recorded = until_recorded(
        &svc,
        "log-head-export",
        "warning",
        "was last exported by admin",
    );
    assert!(
        recorded["reason"]
            .as_str()
            .expect("reason")
            .contains("without a signed checkpoint"),
        "exported, but no chain key signs it: {recorded}"
    );

    // A passphrase file others can read fails its check: a critical
    // alert, resolved once it is fixed.
    std::fs::set_permissions(&pass_file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let failed = until_status(&svc, "key-location/default", "failed");
    assert!(
        failed["action"]
            .as_str()
            .expect("action")
            .contains("chmod 600"),
        "{failed}"
    );
    let subject = "security check key-location/default failed";
    let alert = eventually("the SecurityCheckFailed alert", || {
        get(&svc, "/api/v1/alerts?state=open")
            .as_array()
            .and_then(|a| a.iter().find(|a| a["subject"] == subject).cloned())
    });
    assert_eq!(alert["severity"], "critical", "{alert}");
    let metrics = http_text(&svc, "/metrics");
    assert!(
        metrics
            .contains("vouch_security_check{check=\"key-location/default\",status=\"failed\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("vouch_security_check{check=\"key-location/default\",status=\"ok\"} 0"),
        "every status has its series"
    );
    std::fs::set_permissions(&pass_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    until_status(&svc, "key-location/default", "warning");
    eventually("the alert to resolve", || {
        let open = get(&svc, "/api/v1/alerts?state=open");
        (!open
            .as_array()
            .expect("alerts")
            .iter()
            .any(|a| a["subject"] == subject))
        .then_some(())
    });

    // Lost passphrase: the paper key brings the repository back. The
    // service is stopped first (it holds the repository).
    drop(svc);
    std::fs::remove_file(&pass_file).expect("the passphrase is lost");
    let (ok, _, err) = vouch(
        &[
            "key",
            "recover",
            "--from",
            "-",
            "--repo",
            repo_arg,
            "--insecure-kdf",
            "--kdf-memory-kib",
            "8192",
            "--kdf-iterations",
            "1",
        ],
        &[("VOUCH_NEW_PASSWORD", "found again")],
        Some(&paper),
    );
    assert!(ok, "{err}");
    let (ok, _, err) = vouch(
        &["key", "list", "--repo", repo_arg],
        &[("VOUCH_PASSWORD", "found again")],
        None,
    );
    assert!(ok, "the new passphrase opens the repository: {err}");
    // A paper key with a mistyped digit is refused, naming its line.
    let typo: String = paper
        .lines()
        .map(|l| {
            if let Some(rest) = l.strip_prefix(" 2: ") {
                let first = if rest.starts_with('0') { "1" } else { "0" };
                format!(" 2: {first}{}\n", &rest[1..])
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let (ok, _, err) = vouch(
        &["key", "recover", "--from", "-", "--repo", repo_arg],
        &[("VOUCH_NEW_PASSWORD", "x")],
        Some(&typo),
    );
    assert!(!ok && err.contains("line 2"), "{err}");
}

fn http_text(svc: &Service, path: &str) -> String {
    let (status, body) = http(svc.addr, "GET", path, Some(&svc.token), None);
    assert_eq!(status, 200);
    body
}
