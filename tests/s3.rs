//! Repositories in S3, against a real store: Ceph's RADOS Gateway started
//! by `.ci/s3-server.sh start` (its line of variables in the environment).
//! A full backup / verify / restore / forget / prune cycle, and `kill -9`
//! at random moments of a backup and at every crash point of prune: after
//! each, every committed snapshot verifies and restores to exactly the tree
//! it was taken from.
//!
//! Without `VOUCH_S3_ENDPOINT` the tests say so and pass, except under CI.
//! `VOUCH_STRESS_ROUNDS=N` runs N kill rounds instead of CI's few.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::Duration;

use common::{describe, random_bytes, random_files, Env};
use vouch_chaos::{run_and_kill, KillOutcome, Rng};

type Tree = BTreeMap<String, String>;

fn rounds(ci: usize) -> usize {
    std::env::var("VOUCH_STRESS_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(ci)
}

/// Restores `snapshot` into a fresh directory and returns its tree.
fn restored(env: &Env, snapshot: &str, source: &Path) -> Tree {
    let target = env.path(&format!("restore-{snapshot}-{}", common::hex_id()));
    env.ok(&["restore", snapshot, "--target", target.to_str().unwrap()]);
    let inside = target.join(source.strip_prefix("/").unwrap());
    let tree = describe(&inside);
    fs::remove_dir_all(&target).unwrap();
    tree
}

/// Every snapshot verifies (data read back) and restores to its tree.
fn assert_sound(env: &Env, source: &Path, trees: &BTreeMap<String, Tree>) {
    let out = env.ok(&["verify", "--read-data"]);
    assert!(out.contains("no damage found"), "{out}");
    for id in env.snapshot_ids() {
        let full = trees
            .iter()
            .find(|(k, _)| k.starts_with(&id) || id.starts_with(k.as_str()))
            .map(|(_, t)| t)
            .unwrap_or_else(|| panic!("snapshot {id} was never reported committed"));
        assert_eq!(
            &restored(env, &id, source),
            full,
            "snapshot {id} restores differently"
        );
    }
}

#[test]
fn a_repository_in_s3_backs_up_verifies_restores_and_prunes() {
    let Some(env) = Env::s3() else { return };
    env.init();
    let src = env.path("src");
    random_files(&src, 20, 300_000, 1);
    fs::write(src.join("big"), random_bytes(5 << 20, 9)).unwrap();
    let first = env.backup(&[&src]);
    let first_tree = describe(&src);
    fs::write(src.join("f3"), random_bytes(1000, 77)).unwrap();
    fs::remove_file(src.join("f4")).unwrap();
    let second = env.backup(&[&src]);
    let second_tree = describe(&src);
    let trees = BTreeMap::from([(first.clone(), first_tree), (second.clone(), second_tree)]);
    assert_sound(&env, &src, &trees);

    // An unchanged backup sends almost nothing: the metadata cache answers.
    let out = env.ok(&["backup", "--json", src.to_str().unwrap()]);
    let summary = common::summary_of(&out);
    assert!(
        summary["network"]["sent"].as_u64().unwrap() < 64 * 1024,
        "an unchanged backup to S3 sent {}",
        summary["network"]
    );

    env.ok(&["forget", "--keep-last", "1", "--prune"]);
    assert_eq!(env.snapshot_ids().len(), 1);
    let out = env.ok(&["verify", "--read-data"]);
    assert!(out.contains("no damage found"), "{out}");
    assert_eq!(restored(&env, "latest", &src), trees[&second]);
}

#[test]
fn a_backup_to_s3_killed_at_random_moments_leaves_only_whole_snapshots() {
    let Some(env) = Env::s3() else { return };
    env.init();
    let src = env.path("src");
    let seed = Rng::seed_from_clock();
    eprintln!("seed {seed} (VOUCH_STRESS_SEED replays it)");
    let seed = std::env::var("VOUCH_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(seed);
    let mut rng = Rng::new(seed);
    let mut trees = BTreeMap::new();
    let mut killed = 0;
    for round in 0..rounds(4) {
        random_files(&src, 12, 400_000, seed + round as u64 * 100);
        let tree = describe(&src);
        let mut cmd = env.cmd();
        cmd.args(["backup", "--json", src.to_str().unwrap()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        let delay = Duration::from_millis(50 + rng.below(600));
        match run_and_kill(&mut cmd, delay).unwrap() {
            KillOutcome::Killed => killed += 1,
            KillOutcome::Finished(code) => assert_eq!(code, 0, "round {round}"),
        }
        // Whatever committed is whole; what did not is invisible.
        let ids = env.snapshot_ids();
        if let Some(new) = ids.iter().find(|id| !trees.contains_key(*id)) {
            trees.insert(new.clone(), tree.clone());
        }
        assert_sound(&env, &src, &trees);
        // And the next backup completes.
        let id = env.backup(&[&src]);
        trees.insert(id, tree);
    }
    eprintln!("{killed} backups killed mid-way");
    assert_sound(&env, &src, &trees);
}

#[test]
fn prune_on_s3_killed_at_each_crash_point_loses_nothing() {
    let Some(env) = Env::s3() else { return };
    env.init();
    let src = env.path("src");
    let mut trees = BTreeMap::new();
    for (i, stage) in [
        "prune-index-written",
        "prune-index-half-deleted",
        "prune-index-deleted",
        "prune-packs-half-deleted",
    ]
    .into_iter()
    .enumerate()
    {
        // Two versions; the older one forgotten, so prune has packs to
        // delete and to repack.
        random_files(&src, 8, 200_000, 1000 + i as u64 * 10);
        let old = env.backup(&[&src]);
        fs::write(src.join("f1"), random_bytes(200_000, 5000 + i as u64)).unwrap();
        let new = env.backup(&[&src]);
        trees.insert(new.clone(), describe(&src));
        env.ok(&["forget", &old]);
        let out = env
            .cmd()
            .args(["prune", "--repack-below", "90"])
            .env("VOUCH_FAILPOINT", stage)
            .output()
            .unwrap();
        assert_ne!(
            out.status.code(),
            Some(0),
            "prune was not killed at {stage}"
        );
        assert_sound(&env, &src, &trees);
        env.ok(&["prune", "--repack-below", "90"]);
        assert_sound(&env, &src, &trees);
    }
}

/// The S3 API as an attacker holding the repository's keys would use it.
fn store(location: &str) -> vouch::backend::s3::S3Backend {
    vouch::backend::s3::S3Backend::from_environment(location).unwrap()
}

#[test]
fn a_locked_point_on_an_object_lock_bucket_cannot_be_deleted_through_s3() {
    use vouch::backend::{Backend, FileKind};
    let Some(mut env) = Env::s3() else { return };
    // A bucket of its own, created with Object Lock (which versions it).
    let endpoint = common::s3_endpoint().unwrap();
    let bucket = format!("vouch-locked-{}", common::hex_id());
    env.repo = format!("s3:{endpoint}/{bucket}/repo").into();
    let location = env.repo.to_str().unwrap().to_owned();
    let s3 = store(&location);
    // `init --object-lock` creates the bucket with Object Lock.
    env.ok(&[
        "init",
        "--object-lock",
        "--insecure-kdf",
        "--kdf-memory-kib",
        "1024",
        "--kdf-iterations",
        "1",
        "--pack-size-mib",
        "1",
    ]);
    assert!(s3.object_lock_enabled().unwrap());
    let src = env.path("src");
    random_files(&src, 4, 300_000, 11);
    let id = env.backup(&[&src]);
    let until =
        humantime::format_rfc3339_seconds(std::time::SystemTime::now() + Duration::from_secs(3600))
            .to_string();
    let out = env.ok(&["lock", &id, "--until", &until, "--json"]);
    let lock = common::summary_of(&out);
    assert_eq!(lock["enforced_by"], "by_storage", "{lock}");
    let retained = lock["files_retained"].as_u64().unwrap();
    let packs = s3.list(FileKind::Pack).unwrap();
    let indexes = s3.list(FileKind::Index).unwrap();
    // The manifest, the record, every pack and every index file.
    assert_eq!(
        retained,
        2 + packs.len() as u64 + indexes.len() as u64,
        "{lock}"
    );

    // Every file of the point: the store refuses to delete any version.
    let mut files: Vec<(FileKind, String)> = vec![(FileKind::Snapshot, id.clone())];
    files.extend(
        s3.list(FileKind::PointLock)
            .unwrap()
            .into_iter()
            .map(|(n, _)| (FileKind::PointLock, n)),
    );
    files.extend(packs.into_iter().map(|(n, _)| (FileKind::Pack, n)));
    files.extend(indexes.into_iter().map(|(n, _)| (FileKind::Index, n)));
    for (kind, name) in &files {
        let retention = s3.retention(*kind, name).unwrap().expect("a retention");
        assert_eq!(retention.mode, "COMPLIANCE");
        let version = s3.version_of(*kind, name).unwrap().expect("a version id");
        let err = s3.delete_version(*kind, name, &version).unwrap_err();
        assert!(
            err.to_string().contains("AccessDenied"),
            "{kind:?} {name}: {err}"
        );
    }
    // And vouch itself refuses to forget it.
    env.expect_stderr(&["forget", &id], 21);

    // Prune rewrites the index: the new index file, which describes the
    // locked point's packs, is retained too.
    fs::write(src.join("f0"), random_bytes(300_000, 12)).unwrap();
    let other = env.backup(&[&src]);
    env.ok(&["forget", &other]);
    let out = env.ok(&["prune", "--json"]);
    let report = &common::summary_of(&out)["report"];
    assert!(report["files_retained"].as_u64().unwrap() > 0, "{report}");
    for (name, _) in s3.list(FileKind::Index).unwrap() {
        assert!(
            s3.retention(FileKind::Index, &name).unwrap().is_some(),
            "index {name}"
        );
    }
    let out = env.ok(&["verify", "--read-data"]);
    assert!(out.contains("no damage found"), "{out}");

    // What is not retained can be deleted with the same keys: the refusal
    // above is the retention's, not a missing permission.
    let version = s3.version_of(FileKind::Config, "").unwrap().unwrap();
    s3.delete_version(FileKind::Config, "", &version).unwrap();
}

#[test]
fn a_service_backs_up_to_s3_proves_the_point_and_stores_its_lock_there() {
    use common::served::{get, post, sources_allow, start};
    use vouch::backend::{Backend, FileKind};
    let Some(env) = Env::s3() else { return };
    env.init();
    let location = env.repo.to_str().unwrap().to_owned();
    let dir = env.dir.path();
    let src = env.path("src");
    random_files(&src, 5, 100_000, 21);
    fs::write(dir.join("pw"), common::PASSWORD).unwrap();
    // The keys come from a credentials file, as a service would keep them.
    let creds = dir.join("s3-credentials");
    fs::write(
        &creds,
        format!(
            "[backup]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            std::env::var("AWS_ACCESS_KEY_ID").unwrap(),
            std::env::var("AWS_SECRET_ACCESS_KEY").unwrap()
        ),
    )
    .unwrap();
    let config = dir.join("vouch.toml");
    fs::write(
        &config,
        format!(
            "{}[scheduler]\ntick = \"1s\"\nmax_jitter = \"0s\"\n\n[[repositories]]\nid = \"offsite\"\nlocation = {location:?}\ns3_credentials_file = {:?}\ns3_profile = \"backup\"\npassphrase_file = {:?}\n",
            sources_allow(dir),
            creds.to_str().unwrap(),
            dir.join("pw").to_str().unwrap()
        ),
    )
    .unwrap();
    let svc = start(&dir.join("data"), &config, None);
    let (status, body) = post(
        &svc,
        "/api/v1/plans",
        &serde_json::json!({"id": "offsite", "source": src, "repository": "offsite",
            "schedule": "0 3 * * *", "rpo": "1h"}),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = post(&svc, "/api/v1/plans/offsite/run", &serde_json::Value::Null);
    assert_eq!(status, 202, "{body}");
    let point = common::served::eventually("a recoverable point in S3", || {
        let points = get(&svc, "/api/v1/points?plan=offsite");
        points
            .as_array()
            .and_then(|a| a.first())
            .filter(|p| p["state"] == "recoverable")
            .cloned()
    });
    let id = point["id"].as_str().unwrap().to_owned();
    assert_eq!(point["repository"], "offsite");

    // The API's lock is stored in the bucket first.
    let (status, body) = post(
        &svc,
        &format!("/api/v1/points/{id}/lock"),
        &serde_json::json!({"until": "2100-01-01T00:00:00Z"}),
    );
    assert_eq!(status, 200, "{body}");
    let records = store(&location).list(FileKind::PointLock).unwrap();
    assert_eq!(records.len(), 1, "the lock is a record in the repository");
    // So the CLI honours it (even behind the service's back), and the
    // service cannot undo it.
    env.expect_stderr(&["forget", "--outside-service", &id], 21);
    let (status, body) = post(
        &svc,
        &format!("/api/v1/points/{id}/unlock"),
        &serde_json::json!({"reason": "try"}),
    );
    assert_eq!(status, 409, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("stored in repository"),
        "{body}"
    );
}

#[test]
fn a_full_cycle_through_a_failing_s3_path_retries_and_loses_nothing() {
    use vouch_chaos::s3_faults::{FaultPlan, HttpFault, S3FaultProxy};
    let Some(mut env) = Env::s3() else { return };
    let endpoint = common::s3_endpoint().unwrap();
    let upstream: std::net::SocketAddr = endpoint
        .trim_start_matches("http://")
        .parse()
        .expect("the test store is http://IP:PORT");
    let proxy = S3FaultProxy::start(upstream).unwrap();
    let direct = env.repo.clone();
    env.repo = direct
        .to_str()
        .unwrap()
        .replace(&endpoint, &format!("http://{}", proxy.addr()))
        .into();
    env.init();
    // Every third request fails, each time the next way.
    proxy.set(FaultPlan {
        every: 3,
        rotation: vec![
            HttpFault::SlowDown,
            HttpFault::ResetUpload,
            HttpFault::TruncateAnswer,
            HttpFault::Stall(Duration::from_secs(3)),
        ],
        method: None,
    });
    let src = env.path("src");
    random_files(&src, 10, 200_000, 31);
    let mut trees = BTreeMap::new();
    let first = env.backup(&[&src]);
    trees.insert(first.clone(), describe(&src));
    fs::write(src.join("f2"), random_bytes(150_000, 32)).unwrap();
    let second = env.backup(&[&src]);
    trees.insert(second.clone(), describe(&src));
    assert_sound(&env, &src, &trees);
    env.ok(&["forget", &first, "--prune"]);
    trees.remove(&first);
    let stats = proxy.stats();
    eprintln!("{stats:?}");
    assert!(stats.slow_downs > 0 && stats.resets > 0, "{stats:?}");
    assert!(stats.truncations > 0 && stats.stalls > 0, "{stats:?}");
    // Straight to the store: every snapshot whole.
    env.repo = direct;
    assert_sound(&env, &src, &trees);
}

#[test]
fn a_truncated_answer_is_an_error_never_short_data() {
    use vouch::backend::{Backend, FileKind, WriteSync};
    use vouch_chaos::s3_faults::{FaultPlan, HttpFault, S3FaultProxy};
    let Some(env) = Env::s3() else { return };
    let endpoint = common::s3_endpoint().unwrap();
    let upstream: std::net::SocketAddr = endpoint.trim_start_matches("http://").parse().unwrap();
    let proxy = S3FaultProxy::start(upstream).unwrap();
    let direct = store(env.repo.to_str().unwrap());
    let quick = vouch::backend::s3::S3Options {
        client: vouch::http_client::ClientOptions {
            attempts: 3,
            backoff: Duration::from_millis(20),
            ..vouch::backend::s3::S3Options::default().client
        },
        ..vouch::backend::s3::S3Options::default()
    };
    let via_proxy = vouch::backend::s3::S3Backend::new(
        vouch::backend::s3::S3Location::parse(
            &env.repo
                .to_str()
                .unwrap()
                .replace(&endpoint, &format!("http://{}", proxy.addr())),
        )
        .unwrap(),
        vouch::backend::s3::credentials::Credentials::from_environment().unwrap(),
        quick,
    )
    .unwrap();
    direct.create().unwrap();
    let name = "ab".to_string() + &"9".repeat(62);
    let data = random_bytes(300_000, 5);
    direct
        .write(FileKind::Pack, &name, &data, WriteSync::Now)
        .unwrap();
    // Every GET cut in half.
    proxy.set(FaultPlan {
        every: 1,
        rotation: vec![HttpFault::TruncateAnswer],
        method: Some("GET".into()),
    });
    for read in [
        via_proxy.read(FileKind::Pack, &name),
        via_proxy.read_range(FileKind::Pack, &name, 10, 200_000),
    ] {
        match read {
            Err(e) => eprintln!("refused as it should be: {e}"),
            Ok(got) => panic!(
                "a cut answer was taken for the file: {} of {} bytes",
                got.len(),
                data.len()
            ),
        }
    }
    assert!(proxy.stats().truncations >= 2);
}

#[test]
fn a_local_repository_is_copied_into_s3_with_its_locks() {
    let Some(dest) = Env::s3() else { return };
    let src_env = Env::new();
    src_env.init();
    dest.init();
    let src = src_env.path("src");
    random_files(&src, 6, 200_000, 41);
    let id = src_env.backup(&[&src]);
    let tree = describe(&src);
    let until =
        humantime::format_rfc3339_seconds(std::time::SystemTime::now() + Duration::from_secs(3600))
            .to_string();
    src_env.ok(&["lock", &id, "--until", &until]);
    // Same test passphrase on both sides.
    let out = common::stdout_of(
        src_env
            .cmd()
            .env("VOUCH_TO_PASSWORD", common::PASSWORD)
            .args(["copy", "--json", "--to", dest.repo.to_str().unwrap()]),
    );
    let report = common::summary_of(&out);
    let copy = report["snapshots"][0]["copy"].as_str().unwrap().to_owned();
    assert_eq!(
        report["snapshots"][0]["locked_until"],
        until.as_str(),
        "{report}"
    );
    let out = dest.ok(&["verify", "--read-data"]);
    assert!(out.contains("no damage found"), "{out}");
    let trees = BTreeMap::from([(copy.clone(), tree)]);
    assert_sound(&dest, &src, &trees);
    dest.expect_stderr(&["forget", &copy], 21);
}
