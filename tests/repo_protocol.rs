//! The repository protocol (`/repo/v1/`) end to end: a real `vouch serve`
//! on 127.0.0.1, the real CLI backing up, verifying and restoring through
//! it, and raw requests that try what the server must refuse.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::served::{get, raw, raw_bytes, start, vouch_token, Service};
use common::{describe, random_files};
use serde_json::Value;

fn serve(dir: &Path) -> Service {
    let config = dir.join("vouch.toml");
    std::fs::write(&config, common::served::sources_allow(dir)).expect("config");
    start(&dir.join("data"), &config, None)
}

/// `vouch` against the served default repository with `token`.
fn cli(svc: &Service, dir: &Path, token: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vouch"))
        .env_remove("VOUCH_PASSWORD")
        .env_remove("VOUCH_TOKEN_FILE")
        .env(
            "VOUCH_REPOSITORY",
            format!("http://{}/repo/v1/default", svc.addr),
        )
        .env("VOUCH_TOKEN", token)
        .env(
            "VOUCH_PASSWORD_FILE",
            dir.join("data/repository.passphrase"),
        )
        .env("VOUCH_CACHE_DIR", dir.join("cache"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("vouch runs")
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "vouch failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn snapshots(svc: &Service, dir: &Path, token: &str) -> usize {
    let listed = ok(cli(svc, dir, token, &["--json", "snapshots"]));
    let v: Value = serde_json::from_str(&listed).expect("a JSON list");
    v.as_array().map_or(0, Vec::len)
}

fn refusals(svc: &Service) -> Vec<Value> {
    get(svc, "/api/v1/events?type=audit.refused&limit=1000")["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn the_cli_backs_up_verifies_and_restores_through_the_protocol() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = serve(dir.path());
    let data = dir.path().join("data");
    let token = vouch_token(&data, &["create", "--role", "append", "--name", "laptop"]);
    let src = dir.path().join("src");
    random_files(&src, 40, 300_000, 7);
    std::fs::write(src.join("text.txt"), "hello ".repeat(50_000)).expect("text");
    ok(cli(
        &svc,
        dir.path(),
        &token,
        &["backup", src.to_str().unwrap()],
    ));
    // A second backup of the same tree stores no data: at most new trees
    // for the parents of the source (/tmp and the test's directory change
    // while other tests run), a few KB.
    let summary = backup_summary(&svc, dir.path(), &token, &[], &src);
    let stored = summary["summary"]["bytes_stored"]
        .as_u64()
        .expect("bytes_stored");
    assert!(
        stored < 64 * 1024,
        "an unchanged tree stored {stored} bytes"
    );
    assert_eq!(snapshots(&svc, dir.path(), &token), 2);
    ok(cli(&svc, dir.path(), &token, &["verify", "--read-data"]));
    let target = dir.path().join("restored");
    ok(cli(
        &svc,
        dir.path(),
        &token,
        &["restore", "latest", "--target", target.to_str().unwrap()],
    ));
    let restored = target.join(src.strip_prefix("/").expect("absolute"));
    assert_eq!(
        describe(&restored),
        describe(&src),
        "byte-identical restore"
    );
    // The append-only token cannot forget (a delete of a snapshot).
    let out = cli(
        &svc,
        dir.path(),
        &token,
        &["forget", "--keep-last", "1", "--outside-service"],
    );
    assert!(
        !out.status.success(),
        "forget through an append-only token must fail"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("append-only") || stderr.contains("never deletes"),
        "{stderr}"
    );
    assert_eq!(
        snapshots(&svc, dir.path(), &token),
        2,
        "nothing was forgotten"
    );
}

/// The summary line of a `vouch --json backup` of `src`.
fn backup_summary(svc: &Service, dir: &Path, token: &str, extra: &[&str], src: &Path) -> Value {
    let mut args = vec!["--json", "--quiet", "backup"];
    args.extend_from_slice(extra);
    args.push(src.to_str().expect("utf-8 path"));
    let out = ok(cli(svc, dir, token, &args));
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary line in {out}"))
}

/// The `network` figures of a `vouch --json backup`: (sent, received).
fn backup_traffic(
    svc: &Service,
    dir: &Path,
    token: &str,
    extra: &[&str],
    src: &Path,
) -> (u64, u64) {
    let summary = backup_summary(svc, dir, token, extra, src);
    let n = &summary["network"];
    (
        n["sent"].as_u64().expect("sent"),
        n["received"].as_u64().expect("received"),
    )
}

#[test]
fn a_warm_cache_makes_an_unchanged_backup_move_almost_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = serve(dir.path());
    let data = dir.path().join("data");
    let token = vouch_token(&data, &["create", "--role", "append", "--name", "laptop"]);
    // Many directories, so the parent's trees are a real part of what an
    // incremental backup must read.
    let src = dir.path().join("src");
    for d in 0..60u64 {
        random_files(&src.join(format!("dir-{d:02}")), 20, 4_000, d * 100);
    }
    let (first_sent, _) = backup_traffic(&svc, dir.path(), &token, &[], &src);
    assert!(
        first_sent > 4_000_000,
        "the first backup sent the data: {first_sent}"
    );

    // Unchanged, with the cache the first backup filled as it wrote: under
    // 1 % of the first's bytes, nearly all of it the new snapshot.
    let (sent, received) = backup_traffic(&svc, dir.path(), &token, &[], &src);
    assert!(
        (sent + received) * 100 < first_sent,
        "an unchanged backup moved {sent} + {received} bytes, the first sent {first_sent}"
    );
    // Without the cache the same backup reads the index, the snapshots and
    // every tree of the parent: what the cache saves.
    let (_, uncached) = backup_traffic(&svc, dir.path(), &token, &["--no-cache"], &src);
    eprintln!(
        "first backup sent {first_sent} B; unchanged: {sent} B sent, {received} B received; \
         without the cache {uncached} B received"
    );
    assert!(
        uncached > received * 4,
        "without the cache {uncached} bytes were read, with it {received}"
    );

    // A damaged cache costs a fetch, never a wrong backup: every byte of
    // every cached tree shadow and index file is changed, the next backup
    // still succeeds and the damaged entries are replaced.
    let cache = dir.path().join("cache/repos");
    let (mut shadows, mut indexes) = (0, 0);
    let mut stack = vec![cache.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("cache dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let kind = p
                .parent()
                .and_then(|k| k.file_name())
                .and_then(|k| k.to_str());
            match kind {
                Some("trees") => shadows += 1,
                Some("index") => indexes += 1,
                _ => continue,
            }
            let bytes: Vec<u8> = std::fs::read(&p)
                .expect("entry")
                .iter()
                .map(|b| b ^ 0x55)
                .collect();
            std::fs::write(&p, bytes).expect("damage");
        }
    }
    assert!(
        shadows >= 1 && indexes >= 1,
        "trees and the index were cached: {shadows} {indexes}"
    );
    std::fs::write(src.join("dir-00/new"), b"a new file").expect("new file");
    let (_, refetched) = backup_traffic(&svc, dir.path(), &token, &[], &src);
    assert!(refetched > received, "damaged entries were fetched again");
    ok(cli(&svc, dir.path(), &token, &["verify", "--read-data"]));
    let target = dir.path().join("restored");
    ok(cli(
        &svc,
        dir.path(),
        &token,
        &["restore", "latest", "--target", target.to_str().unwrap()],
    ));
    assert_eq!(
        describe(&target.join(src.strip_prefix("/").expect("absolute"))),
        describe(&src),
        "byte-identical restore after a backup over a damaged cache"
    );
}

#[test]
fn forged_incomplete_and_destructive_uploads_are_refused_and_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = serve(dir.path());
    let data = dir.path().join("data");
    let append = vouch_token(&data, &["create", "--role", "append", "--name", "script"]);
    let agent = vouch_token(&data, &["create", "--role", "agent", "--name", "web-2"]);
    let viewer = vouch_token(&data, &["create", "--role", "viewer", "--name", "eve"]);
    let src = dir.path().join("src");
    random_files(&src, 5, 100_000, 3);
    ok(cli(
        &svc,
        dir.path(),
        &append,
        &["backup", src.to_str().unwrap()],
    ));
    let repo = data.join("repository");
    let snapshot_name = std::fs::read_dir(repo.join("snapshots"))
        .expect("snapshots")
        .next()
        .expect("one snapshot")
        .expect("entry")
        .file_name()
        .into_string()
        .expect("utf-8");
    let snapshot = std::fs::read(repo.join("snapshots").join(&snapshot_name)).expect("read");
    let base = "/repo/v1/default";
    std::thread::sleep(Duration::from_millis(1200)); // tokens reload

    // A pack whose bytes do not hash to its name.
    let body = b"these bytes are not what the name says";
    let wrong = blake3::hash(b"something else").to_hex().to_string();
    let (status, text) = raw(
        svc.addr,
        "PUT",
        &format!("{base}/data/{wrong}"),
        &append,
        &[],
        body,
    );
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("do not hash to its name"), "{text}");
    // A snapshot that does not decrypt with the repository's key.
    let junk = b"not a sealed manifest";
    let name = blake3::hash(junk).to_hex().to_string();
    let (status, text) = raw(
        svc.addr,
        "PUT",
        &format!("{base}/snapshots/{name}"),
        &append,
        &[],
        junk,
    );
    assert_eq!(status, 409, "{text}");
    // Deletes of data by an append-only token.
    for (kind, name) in [
        ("snapshots", snapshot_name.as_str()),
        ("data", wrong.as_str()),
    ] {
        let (status, text) = raw(
            svc.addr,
            "DELETE",
            &format!("{base}/{kind}/{name}"),
            &append,
            &[],
            b"",
        );
        assert_eq!(status, 403, "DELETE {kind}: {text}");
    }
    assert!(repo.join("snapshots").join(&snapshot_name).exists());
    // Another agent's (or any agent's) use of a repository not its own,
    // and a role that has no business here.
    let (status, _) = raw(
        svc.addr,
        "GET",
        &format!("{base}/snapshots"),
        &agent,
        &[],
        b"",
    );
    assert_eq!(status, 403);
    let (status, _) = raw(
        svc.addr,
        "GET",
        &format!("{base}/snapshots"),
        &viewer,
        &[],
        b"",
    );
    assert_eq!(status, 403);
    // An append-only token reaches nothing of the API.
    let (status, _) = raw(svc.addr, "GET", "/api/v1/plans", &append, &[], b"");
    assert_eq!(status, 403);

    // Referential integrity: with one of its packs gone (an admin deleted
    // it), the same snapshot may not be committed again.
    let admin = svc.token.clone();
    let (status, _) = raw(
        svc.addr,
        "DELETE",
        &format!("{base}/snapshots/{snapshot_name}"),
        &admin,
        &[],
        b"",
    );
    assert_eq!(status, 204);
    let pack = common::served::pack_files(&data)
        .into_iter()
        .next()
        .expect("a pack");
    let pack_name = pack.file_name().unwrap().to_str().unwrap().to_owned();
    let (status, _) = raw(
        svc.addr,
        "DELETE",
        &format!("{base}/data/{pack_name}"),
        &admin,
        &[],
        b"",
    );
    assert_eq!(status, 204);
    let (status, text) = raw(
        svc.addr,
        "PUT",
        &format!("{base}/snapshots/{snapshot_name}"),
        &append,
        &[],
        &snapshot,
    );
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("not stored"), "{text}");
    assert!(!repo.join("snapshots").join(&snapshot_name).exists());

    // Each kind of refusal is in the log, naming who.
    let recorded = refusals(&svc);
    let seen = |who: &str, action: &str| {
        recorded
            .iter()
            .any(|e| e["data"]["principal"] == who && e["data"]["action"] == action)
    };
    assert!(seen("script", "repo.put"), "{recorded:#?}");
    assert!(seen("script", "repo.delete"), "{recorded:#?}");
    assert!(seen("web-2", "repo.read"), "{recorded:#?}");
    assert!(seen("eve", "repo.read"), "{recorded:#?}");
}

#[test]
fn ranges_heads_and_missing_answer_what_a_client_needs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = serve(dir.path());
    let data = dir.path().join("data");
    let append = vouch_token(&data, &["create", "--role", "append", "--name", "script"]);
    let src = dir.path().join("src");
    random_files(&src, 3, 50_000, 5);
    ok(cli(
        &svc,
        dir.path(),
        &append,
        &["backup", src.to_str().unwrap()],
    ));
    std::thread::sleep(Duration::from_millis(1200));
    let pack = common::served::pack_files(&data)
        .into_iter()
        .next()
        .expect("a pack");
    let name = pack.file_name().unwrap().to_str().unwrap().to_owned();
    let bytes = std::fs::read(&pack).expect("pack");
    let base = "/repo/v1/default";
    let (status, body) = raw_bytes(
        svc.addr,
        "GET",
        &format!("{base}/data/{name}"),
        &append,
        &[("Range", "bytes=10-19")],
        b"",
    );
    assert_eq!(status, 206);
    assert_eq!(body, &bytes[10..20]);
    let absent = "0".repeat(64);
    let (status, _) = raw(
        svc.addr,
        "HEAD",
        &format!("{base}/data/{absent}"),
        &append,
        &[],
        b"",
    );
    assert_eq!(status, 404);
    let ask = serde_json::json!({"kind": "data", "names": [name, absent]}).to_string();
    let (status, body) = raw(
        svc.addr,
        "POST",
        &format!("{base}/missing"),
        &append,
        &[("Content-Type", "application/json")],
        ask.as_bytes(),
    );
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(answer["missing"], serde_json::json!([absent]));
}

/// A lock stored in a served repository holds against every client: the
/// server refuses to delete the locked snapshot or the lock's record (even
/// to an admin token), and refuses a record that is not one.
#[test]
fn a_served_repository_refuses_to_delete_a_locked_snapshot_or_its_lock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = serve(dir.path());
    let admin = svc.token.clone();
    let src = dir.path().join("src");
    random_files(&src, 2, 10_000, 8);
    ok(cli(
        &svc,
        dir.path(),
        &admin,
        &["backup", src.to_str().unwrap()],
    ));
    let repo = dir.path().join("data/repository");
    let snapshot = std::fs::read_dir(repo.join("snapshots"))
        .expect("snapshots")
        .flatten()
        .next()
        .expect("one snapshot")
        .file_name()
        .into_string()
        .expect("utf-8");
    ok(cli(
        &svc,
        dir.path(),
        &admin,
        &["lock", &snapshot, "--until", "2100-01-01T00:00:00Z"],
    ));
    let record = std::fs::read_dir(repo.join("pointlocks"))
        .expect("pointlocks")
        .flatten()
        .next()
        .expect("one record")
        .file_name()
        .into_string()
        .expect("utf-8");
    let base = "/repo/v1/default";
    for (kind, name) in [("snapshots", &snapshot), ("pointlocks", &record)] {
        let (status, text) = raw(
            svc.addr,
            "DELETE",
            &format!("{base}/{kind}/{name}"),
            &admin,
            &[],
            b"",
        );
        assert_eq!(status, 409, "DELETE {kind}: {text}");
        assert!(text.contains("2100-01-01"), "{text}");
    }
    assert!(repo.join("snapshots").join(&snapshot).exists());
    // A "record" that does not read with the repository's key.
    let junk = b"not a lock record";
    let name = blake3::hash(junk).to_hex().to_string();
    let (status, text) = raw(
        svc.addr,
        "PUT",
        &format!("{base}/pointlocks/{name}"),
        &admin,
        &[],
        junk,
    );
    assert_eq!(status, 409, "{text}");
    // Through the CLI the refusal is the engine's own, before any request.
    let out = cli(
        &svc,
        dir.path(),
        &admin,
        &["forget", "--outside-service", &snapshot],
    );
    assert_eq!(
        out.status.code(),
        Some(21),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
