//! Tests of the workers against real repositories: a proof that cannot
//! complete because of the point's data is a verdict (C1), evidence says
//! how much it proves (H3), read-back damage names the points it touches
//! (H1), and retention decides before anything is deleted (H2, L8).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use vouch_actors::service::{CancelToken, JobCommand, JobFailure, JobOutput, ProgressCell, RunJob};
use vouch_actors::ManualClock;
use vouch_events::{
    Event, JobId, KeepPolicy, PlanId, RepositoryId, SnapshotId as PointId, VerifyDepth,
};

use super::{plan_tag, point_of, run, RepoSet, RepoSpec};
use crate::backend::{LocalBackend, WriteSync};
use crate::backup::{backup, BackupOptions};
use crate::crypto::KdfParams;
use crate::id::SnapshotId;
use crate::repo::{InitOptions, Repository};

pub(crate) const PW: &[u8] = b"pw";

/// A repository in `dir/repo` with a cheap key derivation.
pub(crate) fn new_repo(dir: &Path) -> Repository {
    crate::crypto::allow_weak_kdf();
    let opts = InitOptions {
        kdf: KdfParams {
            memory_kib: 1024,
            iterations: 1,
            parallelism: 1,
        },
        ..Default::default()
    };
    Repository::init(Arc::new(LocalBackend::new(dir.join("repo"))), PW, &opts)
        .unwrap_or_else(|e| panic!("init: {e}"))
}

/// Backs up `src` with the plan tag of `plan`.
pub(crate) fn backup_of(repo: &Repository, src: &Path, plan: &str) -> SnapshotId {
    let opts = BackupOptions {
        paths: vec![src.to_path_buf()],
        tags: vec![plan_tag(&PlanId::new(plan))],
        ..Default::default()
    };
    backup(repo, &opts, Arc::default())
        .unwrap_or_else(|e| panic!("backup: {e}"))
        .snapshot
}

/// A source of `n` files with distinct contents (`tag` in each).
pub(crate) fn source(dir: &Path, name: &str, n: usize, tag: &str) -> PathBuf {
    let src = dir.join(name);
    std::fs::create_dir_all(src.join("sub")).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..n {
        let d = if i % 2 == 0 {
            src.clone()
        } else {
            src.join("sub")
        };
        std::fs::write(
            d.join(format!("f{i}")),
            format!("{tag} file {i} ").repeat(50 + i),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    src
}

/// Every pack file of the repository in `dir/repo`.
pub(crate) fn pack_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.join("repo").join("data")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{e}")) {
            let p = e.unwrap_or_else(|e| panic!("{e}")).path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Flips one byte in the middle of `path`.
pub(crate) fn flip_byte(path: &Path) {
    let mut b = std::fs::read(path).unwrap_or_else(|e| panic!("{e}"));
    let at = b.len() / 3;
    b[at] ^= 0x55;
    std::fs::write(path, b).unwrap_or_else(|e| panic!("{e}"));
}

/// The pack file holding blob `id`.
pub(crate) fn pack_of(repo: &Repository, dir: &Path, id: &crate::id::BlobId) -> PathBuf {
    let index = repo.load_index().unwrap_or_else(|e| panic!("{e}"));
    let (pack, _) = index
        .get(id)
        .unwrap_or_else(|| panic!("blob not in the index"));
    let hex = pack.id.to_hex();
    pack_files(dir)
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy() == hex))
        .unwrap_or_else(|| panic!("no pack file {hex}"))
}

struct Fixture {
    dir: tempfile::TempDir,
    repo: Repository,
    repos: RepoSet,
}

const REPO: &str = "main";

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let repo = new_repo(dir.path());
    let repos = RepoSet::new(
        vec![RepoSpec {
            id: RepositoryId::new(REPO),
            storage: crate::backend::storage::Storage::Local(dir.path().join("repo")),
            passphrase: PW.to_vec().into(),
        }],
        dir.path().join("sandbox"),
        1 << 30,
        Vec::new(),
    );
    Fixture { dir, repo, repos }
}

fn job(
    command: JobCommand,
    repos: &RepoSet,
    clock: &dyn vouch_actors::Clock,
) -> Result<JobOutput, JobFailure> {
    run(
        repos,
        clock,
        RunJob {
            job: JobId::new("job-1"),
            command,
            cancel: CancelToken::default(),
            progress: ProgressCell::default(),
        },
    )
}

fn restore_test_job(
    f: &Fixture,
    point: &SnapshotId,
    sample: Option<u64>,
) -> Result<JobOutput, JobFailure> {
    job(
        JobCommand::RestoreTest {
            point: point_of(point),
            plan: None,
            repository: RepositoryId::new(REPO),
            sample_files: sample,
            boot: None,
        },
        &f.repos,
        &vouch_actors::SystemClock,
    )
}

fn verify_job(
    f: &Fixture,
    point: &SnapshotId,
    depth: VerifyDepth,
) -> Result<JobOutput, JobFailure> {
    job(
        JobCommand::Verify {
            point: point_of(point),
            plan: None,
            repository: RepositoryId::new(REPO),
            depth,
        },
        &f.repos,
        &vouch_actors::SystemClock,
    )
}

fn types(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.event_type()).collect()
}

fn failed_of(out: &JobOutput) -> &vouch_events::RestoreTestFailed {
    out.events
        .iter()
        .find_map(|e| match e {
            Event::RestoreTestFailed(f) => Some(f),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no restore_test.failed in {:?}", types(&out.events)))
}

fn ok(r: Result<JobOutput, JobFailure>) -> JobOutput {
    r.unwrap_or_else(|f| {
        panic!(
            "the job failed: {} {} (events {:?})",
            f.kind,
            f.message,
            types(&f.events)
        )
    })
}

#[test]
fn c1_restore_test_of_a_point_whose_packs_are_damaged_is_a_failed_test_not_a_failed_job() {
    let f = fixture();
    let src = source(f.dir.path(), "src", 6, "a");
    let snap = backup_of(&f.repo, &src, "docs");
    for p in pack_files(f.dir.path()) {
        flip_byte(&p);
    }
    let out = ok(restore_test_job(&f, &snap, None));
    assert_eq!(
        types(&out.events),
        ["restore_test.started", "restore_test.failed"]
    );
    let failed = failed_of(&out);
    assert_eq!(failed.cause, "damaged", "{failed:?}");
    assert!(
        failed.reason.contains("vouch verify --read-data"),
        "{}",
        failed.reason
    );
    assert!(!failed.evidence.complete);
}

#[test]
fn c1_restore_test_of_a_point_whose_tree_pack_is_gone_is_missing() {
    let f = fixture();
    let src = source(f.dir.path(), "src", 4, "a");
    let snap = backup_of(&f.repo, &src, "docs");
    let tree = f
        .repo
        .load_snapshot(&snap)
        .unwrap_or_else(|e| panic!("{e}"))
        .tree;
    std::fs::remove_file(pack_of(&f.repo, f.dir.path(), &tree)).unwrap_or_else(|e| panic!("{e}"));
    let out = ok(restore_test_job(&f, &snap, None));
    let failed = failed_of(&out);
    assert_eq!(failed.cause, "missing", "{failed:?}");
    assert!(failed.reason.starts_with("pack "), "{}", failed.reason);
    assert_eq!(
        failed.evidence.files_in_point, None,
        "the trees were never read"
    );
}

#[test]
fn c1_restore_test_of_a_point_whose_manifest_is_gone_is_missing_and_vanished() {
    let f = fixture();
    let src = source(f.dir.path(), "src", 2, "a");
    let snap = backup_of(&f.repo, &src, "docs");
    f.repo
        .delete_snapshot(&snap)
        .unwrap_or_else(|e| panic!("{e}"));
    let out = ok(restore_test_job(&f, &snap, None));
    assert_eq!(
        types(&out.events),
        [
            "restore_test.started",
            "restore_test.failed",
            "point.vanished"
        ]
    );
    assert_eq!(failed_of(&out).cause, "missing");
    match &out.events[2] {
        Event::PointVanished(v) => {
            assert_eq!(v.reason, "restore test: manifest missing");
            assert_eq!(v.point, point_of(&snap));
            assert_eq!(v.repository, RepositoryId::new(REPO));
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn c1_restore_test_of_a_corrupt_manifest_is_corrupt_metadata() {
    let f = fixture();
    let src = source(f.dir.path(), "src", 2, "a");
    let snap = backup_of(&f.repo, &src, "docs");
    let path = f
        .dir
        .path()
        .join("repo")
        .join("snapshots")
        .join(snap.to_hex());
    flip_byte(&path);
    let out = ok(restore_test_job(&f, &snap, None));
    assert_eq!(
        types(&out.events),
        ["restore_test.started", "restore_test.failed"]
    );
    assert_eq!(failed_of(&out).cause, "corrupt_metadata");
}

#[test]
fn c1_an_unwritable_sandbox_stays_a_job_failure() {
    let mut f = fixture();
    let src = source(f.dir.path(), "src", 2, "a");
    let snap = backup_of(&f.repo, &src, "docs");
    // The sandbox root is a file: nothing can be created below it.
    let blocker = f.dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"x").unwrap_or_else(|e| panic!("{e}"));
    f.repos = RepoSet::new(
        vec![RepoSpec {
            id: RepositoryId::new(REPO),
            storage: crate::backend::storage::Storage::Local(f.dir.path().join("repo")),
            passphrase: PW.to_vec().into(),
        }],
        blocker,
        1 << 30,
        Vec::new(),
    );
    match restore_test_job(&f, &snap, None) {
        Err(fail) => {
            assert_eq!(fail.kind, "io", "{}", fail.message);
            assert_eq!(types(&fail.events), ["restore_test.started"]);
        }
        Ok(out) => panic!(
            "a sandbox failure became a verdict: {:?}",
            types(&out.events)
        ),
    }
}

#[test]
fn c1_verification_of_damaged_or_missing_data_is_a_failed_verification() {
    let f = fixture();
    let src = source(f.dir.path(), "src", 4, "a");
    let snap = backup_of(&f.repo, &src, "docs");
    for p in pack_files(f.dir.path()) {
        flip_byte(&p);
    }
    let out = ok(verify_job(&f, &snap, VerifyDepth::ReadAll));
    assert_eq!(
        types(&out.events),
        ["verification.started", "verification.failed"]
    );
    match &out.events[1] {
        Event::VerificationFailed(v) => assert!(
            v.damaged
                .iter()
                .all(|d| ["tree:", "pack:", "blob:"].iter().any(|p| d.starts_with(p))),
            "{:?}",
            v.damaged
        ),
        e => panic!("{e:?}"),
    }
    // A manifest gone: a verdict naming the manifest, and the point vanished.
    f.repo
        .delete_snapshot(&snap)
        .unwrap_or_else(|e| panic!("{e}"));
    let out = ok(verify_job(&f, &snap, VerifyDepth::Structure));
    assert_eq!(
        types(&out.events),
        [
            "verification.started",
            "verification.failed",
            "point.vanished"
        ]
    );
    match &out.events[1] {
        Event::VerificationFailed(v) => {
            assert!(v.damaged[0].starts_with("manifest: "), "{:?}", v.damaged)
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn h3_restore_evidence_carries_the_points_coverage() {
    let f = fixture();
    let src = source(f.dir.path(), "src", 5, "a");
    let total: u64 = walkdir_bytes(&src);
    let snap = backup_of(&f.repo, &src, "docs");
    let out = ok(restore_test_job(&f, &snap, None));
    let passed = match &out.events[1] {
        Event::RestoreTestPassed(p) => p,
        e => panic!("{e:?}"),
    };
    let ev = &passed.evidence;
    assert_eq!(ev.files_in_point, Some(5));
    assert_eq!(ev.bytes_in_point, Some(total));
    assert_eq!(ev.files, 5);
    assert_eq!(ev.bytes, total);
    assert!(ev.complete);
    // A sample: coverage says so, the location no longer does.
    let out = ok(restore_test_job(&f, &snap, Some(2)));
    let ev = match &out.events[1] {
        Event::RestoreTestPassed(p) => p.evidence.clone(),
        e => panic!("{e:?}"),
    };
    assert_eq!(ev.files_in_point, Some(5));
    assert_eq!(ev.bytes_in_point, Some(total));
    assert!(ev.files < 5);
    assert!(!ev.complete);
    assert!(!ev.location.contains("sample"), "{}", ev.location);
}

/// Security review finding 4: a file larger than `restore_test_max_bytes`
/// (1 GiB here; the first file of the point) is compared in sampled
/// extents, and the evidence never calls that complete, even with every
/// file of the point compared.
#[test]
fn a_file_over_the_byte_budget_is_compared_in_ranges_and_never_complete() {
    use std::io::{Seek, SeekFrom, Write};
    let f = fixture();
    let src = f.dir.path().join("src");
    std::fs::create_dir(&src).unwrap_or_else(|e| panic!("{e}"));
    let mut big = std::fs::File::create(src.join("a-disk.img")).unwrap_or_else(|e| panic!("{e}"));
    big.write_all(b"boot sector")
        .unwrap_or_else(|e| panic!("{e}"));
    big.seek(SeekFrom::Start(1 << 30))
        .unwrap_or_else(|e| panic!("{e}"));
    big.write_all(b"data past the budget")
        .unwrap_or_else(|e| panic!("{e}"));
    big.set_len(3 << 30).unwrap_or_else(|e| panic!("{e}"));
    drop(big);
    std::fs::write(src.join("b-small"), b"small").unwrap_or_else(|e| panic!("{e}"));
    let snap = backup_of(&f.repo, &src, "vm");
    let out = ok(restore_test_job(&f, &snap, None));
    let ev = match &out.events[1] {
        Event::RestoreTestPassed(p) => p.evidence.clone(),
        e => panic!("{e:?}"),
    };
    assert_eq!(ev.files_in_point, Some(2));
    assert_eq!(ev.bytes_in_point, Some((3 << 30) + 5));
    assert_eq!(ev.files, 2, "both files compared, the big one in ranges");
    assert!(ev.bytes <= 1 << 30, "{} bytes compared", ev.bytes);
    assert!(
        !ev.complete,
        "a file compared in ranges is never a complete test"
    );
}

/// Distinct trees of a snapshot.
fn tree_count(repo: &Repository, snap: &SnapshotId) -> u64 {
    let root = repo
        .load_snapshot(snap)
        .unwrap_or_else(|e| panic!("{e}"))
        .tree;
    let index = repo.load_index().unwrap_or_else(|e| panic!("{e}"));
    let mut trees = std::collections::HashSet::from([root]);
    crate::tree::walk(repo, &index, &root, &mut |_, n| {
        trees.extend(n.subtree);
        Ok(true)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    trees.len() as u64
}

/// The first data blob of a snapshot.
fn first_data_blob(repo: &Repository, snap: &SnapshotId) -> crate::id::BlobId {
    let root = repo
        .load_snapshot(snap)
        .unwrap_or_else(|e| panic!("{e}"))
        .tree;
    let index = repo.load_index().unwrap_or_else(|e| panic!("{e}"));
    let mut found = None;
    crate::tree::walk(repo, &index, &root, &mut |_, n| {
        found = found.or_else(|| n.content.first().and_then(|e| e.blob));
        Ok(true)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    found.unwrap_or_else(|| panic!("no data blob"))
}

fn walkdir_bytes(dir: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{e}")) {
        let p = e.unwrap_or_else(|e| panic!("{e}")).path();
        n += if p.is_dir() {
            walkdir_bytes(&p)
        } else {
            std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0)
        };
    }
    n
}

#[test]
fn h3_a_point_with_no_files_is_recorded_as_a_vacuous_pass_over_zero_files() {
    let f = fixture();
    let src = f.dir.path().join("empty");
    std::fs::create_dir_all(&src).unwrap_or_else(|e| panic!("{e}"));
    let snap = backup_of(&f.repo, &src, "docs");
    let out = ok(restore_test_job(&f, &snap, None));
    assert_eq!(
        types(&out.events),
        ["restore_test.started", "restore_test.passed"]
    );
    let Some(vouch_events::Event::RestoreTestPassed(passed)) = out.events.get(1) else {
        panic!("{:?}", out.events);
    };
    // What it is: nothing restored out of nothing. The projection never
    // counts such a pass as proof (it is vacuous).
    assert_eq!(passed.evidence.files, 0);
    assert_eq!(passed.evidence.files_in_point, Some(0));
    assert!(passed.evidence.is_vacuous());
}

#[test]
fn h3_a_structure_verification_counts_only_what_it_read() {
    let f = fixture();
    let src = source(f.dir.path(), "src", 4, "a");
    backup_of(&f.repo, &src, "docs");
    // One new file of 1000 bytes; everything else is in the parent.
    std::fs::write(src.join("new"), vec![7u8; 1000]).unwrap_or_else(|e| panic!("{e}"));
    let snap = backup_of(&f.repo, &src, "docs");
    let trees = tree_count(&f.repo, &snap);
    let out = ok(verify_job(&f, &snap, VerifyDepth::Structure));
    match &out.events[1] {
        Event::VerificationPassed(v) => {
            assert_eq!(v.bytes_read, 1000);
            // Every tree loaded, and one data blob read.
            assert_eq!(v.blobs_checked, trees + 1);
        }
        e => panic!("{e:?}"),
    }
    let out = ok(verify_job(&f, &snap, VerifyDepth::ReadAll));
    match &out.events[1] {
        Event::VerificationPassed(v) => {
            assert_eq!(v.bytes_read, walkdir_bytes(&src));
            assert_eq!(v.blobs_checked, trees + 5);
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn h1_read_back_damage_names_the_full_pack_ids_and_the_points_that_use_them() {
    let f = fixture();
    let a = backup_of(&f.repo, &source(f.dir.path(), "a", 3, "a"), "docs");
    let packs_of_a = pack_files(f.dir.path());
    let b = backup_of(&f.repo, &source(f.dir.path(), "b", 3, "b"), "other");
    for p in &packs_of_a {
        flip_byte(p);
    }
    let out = ok(job(
        JobCommand::ReadBack {
            repository: RepositoryId::new(REPO),
            slices: vec![0],
            of: 1,
        },
        &f.repos,
        &vouch_actors::SystemClock,
    ));
    let damaged: Vec<_> = out
        .events
        .iter()
        .filter_map(|e| match e {
            Event::PacksReadBack(r) if !r.damaged.is_empty() => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(damaged.len(), 1, "{:?}", types(&out.events));
    let mut expected: Vec<String> = packs_of_a
        .iter()
        .map(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .collect();
    expected.sort();
    assert_eq!(damaged[0].damaged_packs, expected);
    assert!(expected.iter().all(|p| p.len() == 64));
    assert_eq!(damaged[0].affected_points, Some(vec![point_of(&a)]));
    assert_ne!(point_of(&a), point_of(&b));
}

#[test]
fn h1_snapshots_referencing_finds_users_of_tree_and_data_packs_and_says_when_it_cannot_tell() {
    let f = fixture();
    let src_a = source(f.dir.path(), "a", 3, "a");
    let a = backup_of(&f.repo, &src_a, "docs");
    let b = backup_of(&f.repo, &source(f.dir.path(), "b", 3, "b"), "docs");
    // c shares a's data (same content, another path) but has its own trees.
    let c = backup_of(&f.repo, &src_a, "again");
    let hex = |p: PathBuf| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let tree_b = f
        .repo
        .load_snapshot(&b)
        .unwrap_or_else(|e| panic!("{e}"))
        .tree;
    let tree_pack_b = hex(pack_of(&f.repo, f.dir.path(), &tree_b));
    let found = crate::proof::snapshots_referencing(&f.repo, &[tree_pack_b])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(found.contains(&b), "{found:?}");
    let tree_a = f
        .repo
        .load_snapshot(&a)
        .unwrap_or_else(|e| panic!("{e}"))
        .tree;
    let blob = first_data_blob(&f.repo, &a);
    let data_pack_a = hex(pack_of(&f.repo, f.dir.path(), &blob));
    let mut found =
        crate::proof::snapshots_referencing(&f.repo, std::slice::from_ref(&data_pack_a))
            .unwrap_or_else(|e| panic!("{e}"));
    found.sort();
    let mut expect = vec![a, c];
    if tree_pack_is(&f, &b, &data_pack_a) {
        expect.push(b);
    }
    expect.sort();
    assert_eq!(found, expect);
    assert!(
        crate::proof::snapshots_referencing(&f.repo, &["00".repeat(32)])
            .unwrap_or_else(|e| panic!("{e}"))
            .is_empty()
    );
    // A tree outside the damaged packs does not read: it cannot tell.
    std::fs::remove_file(pack_of(&f.repo, f.dir.path(), &tree_a)).unwrap_or_else(|e| panic!("{e}"));
    assert!(crate::proof::snapshots_referencing(&f.repo, &["00".repeat(32)]).is_err());
}

fn tree_pack_is(f: &Fixture, snap: &SnapshotId, pack: &str) -> bool {
    let tree = f
        .repo
        .load_snapshot(snap)
        .unwrap_or_else(|e| panic!("{e}"))
        .tree;
    pack_of(&f.repo, f.dir.path(), &tree)
        .file_name()
        .is_some_and(|n| n.to_string_lossy() == pack)
}

/// The points a job's events decide forgotten, in order.
fn forgotten_points(out: &JobOutput) -> Vec<PointId> {
    out.events
        .iter()
        .filter_map(|e| match e {
            Event::PointForgotten(p) => Some(p.point),
            _ => None,
        })
        .collect()
}

#[test]
fn h2_retention_decides_and_deletes_nothing() {
    let f = fixture();
    let src = source(f.dir.path(), "src", 2, "a");
    let snaps: Vec<SnapshotId> = (0..3).map(|_| backup_of(&f.repo, &src, "docs")).collect();
    let out = ok(job(
        JobCommand::Retention {
            plan: PlanId::new("docs"),
            repository: RepositoryId::new(REPO),
            time_zone: None,
            keep: KeepPolicy {
                last: Some(1),
                ..Default::default()
            },
            protect: Vec::new(),
        },
        &f.repos,
        &vouch_actors::SystemClock,
    ));
    assert_eq!(types(&out.events), ["point.forgotten", "point.forgotten"]);
    // Nothing deleted yet: the decision comes first.
    assert_eq!(
        f.repo
            .list_snapshots()
            .unwrap_or_else(|e| panic!("{e}"))
            .len(),
        3
    );
    let forgotten = forgotten_points(&out);
    assert!(!forgotten.contains(&point_of(&snaps[2])));
}

/// A lock stored in the repository (by `vouch lock` from the CLI, unknown
/// to the log) keeps retention from deciding the point forgotten: the
/// decision would be refused at deletion and the log would call a locked,
/// present point gone.
#[test]
fn retention_never_forgets_a_point_locked_in_the_repository() {
    let f = fixture();
    let src = source(f.dir.path(), "src", 2, "a");
    let snaps: Vec<SnapshotId> = (0..3).map(|_| backup_of(&f.repo, &src, "docs")).collect();
    let now = vouch_actors::Clock::now_unix_ns(&vouch_actors::SystemClock);
    f.repo
        .lock_point(&snaps[0], now + 3_600_000_000_000, "test")
        .unwrap_or_else(|e| panic!("{e}"));
    let out = ok(job(
        JobCommand::Retention {
            plan: PlanId::new("docs"),
            repository: RepositoryId::new(REPO),
            time_zone: None,
            keep: KeepPolicy {
                last: Some(1),
                ..Default::default()
            },
            protect: Vec::new(),
        },
        &f.repos,
        &vouch_actors::SystemClock,
    ));
    let forgotten = forgotten_points(&out);
    assert_eq!(forgotten, vec![point_of(&snaps[1])]);
}

#[test]
fn l8_retention_reads_the_jobs_clock() {
    let f = fixture();
    let src = source(f.dir.path(), "src", 2, "a");
    let day = 86_400 * 1_000_000_000i64;
    // A point dated ten days back, and a new one.
    let first = backup_of(&f.repo, &src, "docs");
    let mut m = f
        .repo
        .load_snapshot(&first)
        .unwrap_or_else(|e| panic!("{e}"));
    m.time_ns -= 10 * day;
    let old = f
        .repo
        .save_snapshot(&m, WriteSync::Now)
        .unwrap_or_else(|e| panic!("{e}"));
    f.repo
        .delete_snapshot(&first)
        .unwrap_or_else(|e| panic!("{e}"));
    backup_of(&f.repo, &src, "docs");
    let command = || JobCommand::Retention {
        plan: PlanId::new("docs"),
        repository: RepositoryId::new(REPO),
        time_zone: None,
        keep: KeepPolicy {
            within: Some(std::time::Duration::from_secs(3600)),
            ..Default::default()
        },
        protect: Vec::new(),
    };
    let forgotten = |out: JobOutput| forgotten_points(&out);
    let now = vouch_actors::Clock::now_unix_ns(&vouch_actors::SystemClock);
    // By a job clock reading ten days back (the window is measured from
    // the earlier of the newest point and now), the old point is kept.
    let earlier = ManualClock::new(now - 10 * day + 1800 * 1_000_000_000);
    let out = ok(job(command(), &f.repos, &earlier));
    assert_eq!(forgotten(out), Vec::<PointId>::new());
    // By a clock reading now, it is outside the window.
    let out = ok(job(command(), &f.repos, &ManualClock::new(now)));
    assert_eq!(forgotten(out), vec![point_of(&old)]);
}

/// Cost of `snapshots_referencing` on a generated tree (run with
/// `cargo test --lib bench_snapshots_referencing -- --ignored --nocapture`;
/// `VOUCH_BENCH_FILES` sets the file count, default 50 000).
#[test]
#[ignore]
fn bench_snapshots_referencing() {
    let files: usize = std::env::var("VOUCH_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let repo = new_repo(dir.path());
    let src = dir.path().join("src");
    let per_dir = 100;
    for i in 0..files {
        let d = src
            .join(format!("d{:03}", i / per_dir / 50))
            .join(format!("e{:03}", i / per_dir));
        if i % per_dir == 0 {
            std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::write(d.join(format!("f{i}")), format!("file {i} ").repeat(20))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let mut snaps = vec![backup_of(&repo, &src, "bench")];
    for k in 0..4 {
        std::fs::write(
            src.join(format!("d000/e000/changed{k}")),
            format!("change {k}"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        snaps.push(backup_of(&repo, &src, "bench"));
    }
    let packs = pack_files(dir.path());
    let victim = pack_of(&repo, dir.path(), &first_data_blob(&repo, &snaps[0]));
    let hex = victim
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let trees = tree_count(&repo, &snaps[0]);
    for round in 0..3 {
        let t = std::time::Instant::now();
        let found = crate::proof::snapshots_referencing(&repo, std::slice::from_ref(&hex))
            .unwrap_or_else(|e| panic!("{e}"));
        let el = t.elapsed();
        eprintln!(
            "snapshots_referencing round {round}: {files} files, {trees} trees per snapshot, {} snapshots, {} packs: {:?} ({} affected)",
            snaps.len(),
            packs.len(),
            el,
            found.len()
        );
    }
    let t = std::time::Instant::now();
    let none = crate::proof::snapshots_referencing(&repo, &["00".repeat(32)])
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "no damaged pack in use (every tree read): {:?} ({} affected)",
        t.elapsed(),
        none.len()
    );
}

/// Flips one byte in the middle of blob `id`'s sealed bytes in its pack.
fn damage_blob(f: &Fixture, id: &crate::id::BlobId) {
    use std::os::unix::fs::FileExt;
    let index = f.repo.load_index().unwrap_or_else(|e| panic!("{e}"));
    let (_, entry) = index.get(id).unwrap_or_else(|| panic!("indexed"));
    let pack = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(pack_of(&f.repo, f.dir.path(), id))
        .unwrap_or_else(|e| panic!("{e}"));
    let at = u64::from(entry.offset) + u64::from(entry.length / 2);
    let mut byte = [0u8; 1];
    pack.read_exact_at(&mut byte, at)
        .unwrap_or_else(|e| panic!("{e}"));
    pack.write_all_at(&[byte[0] ^ 0x55], at)
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Found by `cargo mutants` (the `includes` of a sampled restore test
/// deleted): a sampled restore test restores its sample only, so damage
/// in a file outside it is not this test's finding (a complete test or
/// the read-back finds it), and the sample passes.
#[test]
fn a_sampled_restore_test_restores_only_its_sample() {
    let f = fixture();
    let src = f.dir.path().join("ten");
    std::fs::create_dir(&src).unwrap_or_else(|e| panic!("{e}"));
    let content = |i: usize| format!("file {i} of ten. ").repeat(40);
    for i in 0..10 {
        std::fs::write(src.join(format!("f{i}")), content(i)).unwrap_or_else(|e| panic!("{e}"));
    }
    let snap = backup_of(&f.repo, &src, "docs");
    // A sample of one takes the first file; the last one is damaged.
    damage_blob(&f, &f.repo.key().blob_id(content(9).as_bytes()));
    let out = ok(restore_test_job(&f, &snap, Some(1)));
    assert_eq!(
        types(&out.events),
        ["restore_test.started", "restore_test.passed"],
        "{:?}",
        out.events
    );
    let out = ok(restore_test_job(&f, &snap, None));
    assert_eq!(
        types(&out.events),
        ["restore_test.started", "restore_test.failed"],
        "a complete test finds it"
    );
}

/// Found by `cargo mutants` (the `||` and the `!` of what a sampled
/// verification reads back): a sampled verification reads every data blob
/// the point added, whatever its share of the rest; damage to the one
/// blob a point added is found even at 1 %.
#[test]
fn a_sampled_verification_reads_every_blob_the_point_added() {
    use crate::format::BlobType;
    use std::collections::HashSet;
    let f = fixture();
    let src = source(f.dir.path(), "src", 4, "a");
    backup_of(&f.repo, &src, "docs");
    let data_blobs = |repo: &Repository| -> HashSet<crate::id::BlobId> {
        let index = repo.load_index().unwrap_or_else(|e| panic!("{e}"));
        index
            .iter()
            .filter(|(_, e)| e.kind == BlobType::Data)
            .map(|(_, e)| e.id)
            .collect()
    };
    let before = data_blobs(&f.repo);
    std::fs::write(src.join("added"), b"only in the second point".repeat(40))
        .unwrap_or_else(|e| panic!("{e}"));
    let second = backup_of(&f.repo, &src, "docs");
    let added: Vec<_> = data_blobs(&f.repo).difference(&before).copied().collect();
    assert_eq!(added.len(), 1, "the new file is one blob");
    damage_blob(&f, &added[0]);
    let out = ok(verify_job(&f, &second, VerifyDepth::ReadSample(1)));
    assert_eq!(
        types(&out.events),
        ["verification.started", "verification.failed"],
        "{:?}",
        out.events
    );
}

/// Found by the chaos harness: the read-back read packs only, so a
/// damaged index file or manifest of an older point stood unseen (only
/// checks of that point read its manifest). Both are read back now, and
/// the damage, naming no pack, makes every point of the repository
/// suspect.
#[test]
fn the_read_back_finds_a_damaged_index_file_and_a_damaged_manifest() {
    let f = fixture();
    let a = backup_of(&f.repo, &source(f.dir.path(), "a", 3, "a"), "docs");
    let files = |kind: &str| -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = std::fs::read_dir(f.dir.path().join("repo").join(kind))
            .unwrap_or_else(|e| panic!("{e}"))
            .map(|e| e.unwrap_or_else(|e| panic!("{e}")).path())
            .filter(|p| p.is_file())
            .collect();
        out.sort();
        out
    };
    let read_back = || -> Vec<vouch_events::PacksReadBack> {
        let out = ok(job(
            JobCommand::ReadBack {
                repository: RepositoryId::new(REPO),
                slices: vec![0],
                of: 1,
            },
            &f.repos,
            &vouch_actors::SystemClock,
        ));
        out.events
            .into_iter()
            .filter_map(|e| match e {
                Event::PacksReadBack(r) if !r.damaged.is_empty() => Some(r),
                _ => None,
            })
            .collect()
    };
    assert!(read_back().is_empty(), "an intact repository");
    for (kind, says) in [("index", "index file"), ("snapshots", "snapshot")] {
        let file = files(kind)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no {kind} file"));
        let original = std::fs::read(&file).unwrap_or_else(|e| panic!("{e}"));
        flip_byte(&file);
        let damaged = read_back();
        assert_eq!(damaged.len(), 1, "{kind}");
        assert!(
            damaged[0].damaged.iter().any(|d| d.starts_with(says)),
            "{kind}: {:?}",
            damaged[0].damaged
        );
        assert!(damaged[0].damaged_packs.is_empty(), "{kind}");
        assert_eq!(
            damaged[0].affected_points, None,
            "{kind}: every point is suspect"
        );
        std::fs::write(&file, original).unwrap_or_else(|e| panic!("{e}"));
        assert!(read_back().is_empty(), "{kind} put back");
    }
    let _ = a;
}
