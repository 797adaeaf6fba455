//! Plans that admins need (issue 18): several paths into one point,
//! excludes, pre/post hooks from the server's hook directory, and a time
//! zone, end to end through `vouch serve`.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::served::{eventually, get, post, raw, sources_allow, start, Service};
use serde_json::{json, Value};

fn install_hook(dir: &Path, name: &str, script: &str) {
    let path = dir.join(name);
    fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

fn names(svc: &Service, point: &str, dir: &Path) -> Vec<String> {
    let list = get(
        svc,
        &format!("/api/v1/points/{point}/files?path={}", dir.display()),
    );
    list["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("a listing of {}: {list}", dir.display()))
        .iter()
        .map(|e| e["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn events(svc: &Service, kind: &str) -> Vec<Value> {
    get(svc, &format!("/api/v1/events?type={kind}&limit=1000"))["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_plan_backs_up_several_paths_with_excludes_between_its_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    let docs = root.join("docs");
    let more = root.join("more");
    fs::create_dir_all(docs.join("cache")).unwrap();
    fs::create_dir_all(docs.join("scratch/deep")).unwrap();
    fs::create_dir_all(&more).unwrap();
    fs::write(docs.join("keep.txt"), b"kept").unwrap();
    fs::write(docs.join("drop.tmp"), b"left out by name").unwrap();
    fs::write(docs.join("big.bin"), vec![7u8; 50_001]).unwrap();
    fs::write(
        docs.join("cache/CACHEDIR.TAG"),
        b"Signature: 8a477f597d28d172789f06886806bc55\n",
    )
    .unwrap();
    fs::write(docs.join("cache/blob"), b"cached").unwrap();
    fs::write(docs.join("scratch/.nobackup"), b"").unwrap();
    fs::write(docs.join("scratch/deep/file"), b"scratch").unwrap();
    fs::write(more.join("other.txt"), b"second path").unwrap();

    // The pre hook dumps "the database" into the source, so the point has
    // it; the post hook fails, which is recorded and alerted on, and the
    // point stands.
    let hooks = root.join("hooks");
    fs::create_dir_all(&hooks).unwrap();
    install_hook(
        &hooks,
        "dump-db",
        &format!(
            "echo \"dump of $VOUCH_PLAN for $1\" > {}/dump.sql",
            docs.display()
        ),
    );
    install_hook(&hooks, "notify", "echo 'mail server down' >&2; exit 4");
    let config = root.join("vouch.toml");
    fs::write(
        &config,
        format!(
            "{}[scheduler]\ntick = \"1s\"\nmax_jitter = \"0s\"\n\n[jobs]\nmin_every = \"1s\"\n\n\
             [security]\nevaluate_every = \"off\"\n\n[hooks]\ndir = {:?}\n",
            sources_allow(&root),
            hooks.to_str().unwrap()
        ),
    )
    .unwrap();
    let data = root.join("data");
    let svc = start(&data, &config, None);
    let plan = json!({
        "id": "docs", "source": docs, "schedule": "0 3 * * *", "rpo": "1h",
        "time_zone": "Europe/Berlin",
        "files": {
            "also": [more],
            "exclude": ["*.tmp"],
            "exclude_caches": true,
            "exclude_if_present": [".nobackup"],
            "exclude_larger_than": 50_000
        },
        "hooks": {
            "pre": {"name": "dump-db", "args": ["nightly"], "timeout": "30s"},
            "post": {"name": "notify"}
        }
    });
    let (status, body) = post(&svc, "/api/v1/plans", &plan);
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["time_zone"], "Europe/Berlin", "{body}");
    assert_eq!(body["files"]["exclude_larger_than"], 50_000, "{body}");
    assert_eq!(body["hooks"]["post"]["timeout"], "10m", "{body}");
    assert_eq!(body["schedule"], "0 3 * * *");

    let (status, body) = post(&svc, "/api/v1/plans/docs/run", &Value::Null);
    assert_eq!(status, 202, "{body}");
    let point = eventually("a recoverable point", || {
        let points = get(&svc, "/api/v1/points?plan=docs");
        let newest = points.as_array()?.first()?;
        (newest["state"] == "recoverable").then(|| newest["id"].as_str().unwrap().to_owned())
    });
    let in_docs = names(&svc, &point, &docs);
    for kept in ["keep.txt", "dump.sql", "cache", "scratch"] {
        assert!(in_docs.iter().any(|n| n == kept), "{kept}: {in_docs:?}");
    }
    for left in ["drop.tmp", "big.bin"] {
        assert!(!in_docs.iter().any(|n| n == left), "{left}: {in_docs:?}");
    }
    assert_eq!(names(&svc, &point, &docs.join("cache")), ["CACHEDIR.TAG"]);
    assert_eq!(names(&svc, &point, &docs.join("scratch")), [".nobackup"]);
    assert_eq!(names(&svc, &point, &more), ["other.txt"]);
    let (status, dump) = raw(
        svc.addr,
        "GET",
        &format!(
            "/api/v1/points/{point}/file?path={}/dump.sql",
            docs.display()
        ),
        &svc.token,
        &[],
        b"",
    );
    assert_eq!(status, 200, "{dump}");
    assert!(dump.contains("dump of docs for nightly"), "{dump}");

    let failed = eventually("the post hook's failure", || {
        events(&svc, "hook.failed").into_iter().next()
    });
    let e = &failed["data"];
    assert_eq!(e["phase"], "Post", "{failed}");
    assert_eq!(e["hook"], "notify");
    assert_eq!(e["exit_code"], 4);
    assert!(
        e["reason"].as_str().unwrap().contains("mail server down"),
        "{failed}"
    );
    eventually("a warning alert for the hook", || {
        let alerts = get(&svc, "/api/v1/alerts");
        alerts
            .as_array()?
            .iter()
            .find(|a| a["subject"] == "plan docs: post-backup hook failed")
            .cloned()
    });

    // A pre hook that fails stops the backup: the job fails saying why,
    // after its hook.failed; no new point.
    install_hook(&hooks, "dump-db", "echo 'db is down' >&2; exit 2");
    let (status, body) = post(&svc, "/api/v1/plans/docs/run", &Value::Null);
    assert_eq!(status, 202, "{body}");
    let failure = eventually("the failed backup", || {
        events(&svc, "job.failed").into_iter().next()
    });
    assert_eq!(
        failure["data"]["error_kind"], "pre_hook_failed",
        "{failure}"
    );
    let message = failure["data"]["message"].as_str().unwrap();
    assert!(message.contains("db is down"), "{message}");
    let pre = events(&svc, "hook.failed");
    assert!(pre.iter().any(|h| h["data"]["phase"] == "Pre"), "{pre:?}");
    let points = get(&svc, "/api/v1/points?plan=docs");
    assert_eq!(points.as_array().unwrap().len(), 1, "{points}");
}

/// What the API refuses, by field: a time zone not in the database, a glob
/// class, a relative `also` path, a hook named by a path. Hooks on a
/// guest's plan (a vzdump archive's) are accepted, since the document
/// cannot tie one field to another, and its backups fail saying why.
#[test]
fn plan_options_the_api_refuses_name_their_field() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    let config = root.join("vouch.toml");
    fs::write(&config, sources_allow(&root)).unwrap();
    let svc = start(&root.join("data"), &config, None);
    let src = root.join("src");
    for (body, field) in [
        (
            json!({"id": "b", "source": src, "time_zone": "Europe/Atlantis"}),
            "time_zone",
        ),
        (
            json!({"id": "c", "source": src, "files": {"exclude": ["*.[oa]"]}}),
            "files.exclude[0]",
        ),
        (
            json!({"id": "d", "source": src, "files": {"also": ["relative/path"]}}),
            "files.also[0]",
        ),
        (
            json!({"id": "e", "source": src, "hooks": {"pre": {"name": "../bin/sh"}}}),
            "hooks.pre.name",
        ),
    ] {
        let (status, answer) = post(&svc, "/api/v1/plans", &body);
        assert_eq!(status, 422, "{body}: {answer}");
        assert!(answer["fields"].get(field).is_some(), "{field} in {answer}");
    }
    let (status, body) = post(
        &svc,
        "/api/v1/plans",
        &json!({"id": "guest-hooked", "source": format!("vzdump:{}", src.join("vzdump-qemu-100.vma").display()),
                "schedule": "0 3 * * *", "hooks": {"pre": {"name": "dump-db"}}}),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = post(&svc, "/api/v1/plans/guest-hooked/run", &Value::Null);
    assert_eq!(status, 202, "{body}");
    let failed = eventually("the refused backup", || {
        events(&svc, "job.failed").into_iter().next()
    });
    assert_eq!(
        failed["data"]["error_kind"], "options_unsupported",
        "{failed}"
    );
    assert!(
        failed["data"]["message"]
            .as_str()
            .unwrap()
            .contains("hooks"),
        "{failed}"
    );
}
