//! The ransomware heuristic on real trees: a simulated attack is detected
//! at 2 %, 10 % and 50 %, by each of its signals; benign churn (an upgrade
//! of a source tree, a package upgrade of `/usr`, a compiler's build tree,
//! log rotation, new photos) raises nothing. Real files, a real repository,
//! real backups; the comparison reads only trees and the index.
//!
//! `VOUCH_ANOMALY_TREE=/path/to/linux-6.1 cargo test --release --test
//! anomaly -- --ignored --nocapture` runs the attack table on a large tree
//! (`docs/security.md` has its figures), and `VOUCH_ANOMALY_UPGRADE` names
//! the later tree to replace it with.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::ransom::{self, Attack};
use vouch::anomaly::{examine, Assessment, Profile};
use vouch::backend::LocalBackend;
use vouch::backup::{backup, BackupOptions};
use vouch::crypto::KdfParams;
use vouch::progress::Progress;
use vouch::repo::{InitOptions, Repository};

fn new_repo(dir: &Path) -> Repository {
    vouch::crypto::allow_weak_kdf();
    let opts = InitOptions {
        kdf: KdfParams {
            memory_kib: 1024,
            iterations: 1,
            parallelism: 1,
        },
        ..Default::default()
    };
    Repository::init(Arc::new(LocalBackend::new(dir.join("repo"))), b"pw", &opts)
        .unwrap_or_else(|e| panic!("init: {e}"))
}

fn summary_of(m: &vouch::format::Manifest) -> vouch_events::BackupSummary {
    vouch_events::BackupSummary {
        files: m.summary.files,
        bytes: m.summary.bytes_read,
        added_bytes: m.summary.bytes_added,
        stored_bytes: m.summary.bytes_stored,
        duration_ms: m.summary.duration_ms,
        total_bytes: Some(m.summary.total_bytes),
        warnings: None,
    }
}

/// Backs up `src` (the same path each time, so each backup's parent is the
/// one before) and compares it with its parent.
fn backup_and_examine(repo: &Repository, src: &Path) -> Option<(Profile, Assessment)> {
    timed_backup_and_examine(repo, src).0
}

/// [`backup_and_examine`], with the seconds the backup and the comparison
/// took.
fn timed_backup_and_examine(
    repo: &Repository,
    src: &Path,
) -> (Option<(Profile, Assessment)>, f64, f64) {
    let opts = BackupOptions {
        paths: vec![src.to_path_buf()],
        ..Default::default()
    };
    let t = std::time::Instant::now();
    let out = backup(repo, &opts, Arc::new(Progress::default()))
        .unwrap_or_else(|e| panic!("backup: {e}"));
    let backed_up = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    let found = examine(
        repo,
        &out.manifest,
        Some(&out.index),
        &[],
        &summary_of(&out.manifest),
    )
    .unwrap_or_else(|e| panic!("examine: {e}"));
    let took = t.elapsed().as_secs_f64();
    if std::env::var_os("VOUCH_ANOMALY_TREE").is_none() {
        // The backup's own index and the repository's give the same
        // figures (it holds every blob of both snapshots).
        let loaded = examine(repo, &out.manifest, None, &[], &summary_of(&out.manifest))
            .unwrap_or_else(|e| panic!("examine: {e}"));
        assert_eq!(
            found.as_ref().map(|(p, _)| &p.figures),
            loaded.as_ref().map(|(p, _)| &p.figures)
        );
    }
    (found, backed_up, took)
}

/// Backs up `src`, lets `change` act on it, backs it up again and returns
/// the second backup's comparison.
fn compare_after(src: &Path, change: impl FnOnce(&Path)) -> (Profile, Assessment) {
    let dir = tempfile::tempdir().unwrap();
    let repo = new_repo(dir.path());
    assert!(
        backup_and_examine(&repo, src).is_none(),
        "a first backup has no parent"
    );
    change(src);
    backup_and_examine(&repo, src).expect("the second backup has a parent")
}

/// One row of the table in `docs/security.md` (seen with `--nocapture`).
fn report(case: &str, p: &Profile, a: &Assessment) {
    let f = &p.figures;
    let sig: Vec<String> = a
        .signals
        .iter()
        .map(|s| format!("{} {}", s.kind, s.score_permille))
        .collect();
    println!(
        "| {case} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        f.files_before,
        f.changed,
        f.deleted,
        f.added,
        f.renamed,
        f.became_incompressible
            .map_or("unknown".into(), |n| n.to_string()),
        f.churn_files,
        f.note_dirs,
        sig.join(", "),
        if a.anomalous { "**yes**" } else { "no" },
    );
}

fn signal(a: &Assessment, kind: &str) -> u32 {
    a.signals
        .iter()
        .find(|s| s.kind == kind)
        .map_or(0, |s| s.score_permille)
}

fn project(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("tree");
    let n = ransom::project_tree(&src);
    assert!(n > 200, "the project tree has {n} files");
    src
}

#[test]
fn an_attack_that_encrypts_and_renames_is_detected_at_2_10_and_50_percent() {
    for permille in [20, 100, 500] {
        let dir = tempfile::tempdir().unwrap();
        let src = project(dir.path());
        let mut encrypted = 0;
        let (p, a) = compare_after(&src, |s| {
            encrypted = ransom::attack(
                s,
                Attack {
                    permille,
                    rename_to: Some("locked"),
                    replace_extension: false,
                    notes: false,
                    encrypt: true,
                },
            )
        });
        report(&format!("encrypt + rename {} %", permille / 10), &p, &a);
        let f = &p.figures;
        assert!(a.anomalous, "{permille} permille: {a:#?}\n{f:#?}");
        assert_eq!(f.churn_extension.as_deref(), Some("locked"));
        assert_eq!(f.churn_files, encrypted as u64, "{f:#?}");
        assert!(signal(&a, "extension-churn") >= 500);
        // Files of 1 KiB or more that compressed are the ones weighed.
        assert!(
            f.became_incompressible.unwrap_or(0) * 10 >= encrypted as u64 * 6,
            "{f:#?}"
        );
        assert_eq!(f.renamed, encrypted as u64);
        assert!(
            a.paths.iter().any(|p| p.ends_with(".locked")),
            "{:?}",
            a.paths
        );
    }
}

#[test]
fn an_attack_that_replaces_extensions_is_paired_as_renames() {
    let dir = tempfile::tempdir().unwrap();
    let src = project(dir.path());
    let mut encrypted = 0;
    let (p, a) = compare_after(&src, |s| {
        encrypted = ransom::attack(
            s,
            Attack {
                permille: 100,
                rename_to: Some("crypt"),
                replace_extension: true,
                notes: false,
                encrypt: true,
            },
        )
    });
    report("encrypt + replace extension 10 %", &p, &a);
    let f = &p.figures;
    assert!(a.anomalous, "{a:#?}");
    // `x.rs` -> `x.crypt`: paired with what it replaced, not an addition
    // and a deletion.
    assert_eq!(f.renamed, encrypted as u64, "{f:#?}");
    assert_eq!((f.added, f.deleted), (0, 0), "{f:#?}");
    assert_eq!(f.churn_extension.as_deref(), Some("crypt"));
    assert!(f.became_incompressible.unwrap_or(0) * 10 >= encrypted as u64 * 6);
}

#[test]
fn conversions_and_plain_renames_raise_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let src = project(dir.path());
    let (p, a) = compare_after(&src, |s| {
        for (i, f) in ransom::files_of(s).iter().enumerate().take(60) {
            let text = std::fs::read(f).expect("read");
            std::fs::remove_file(f).expect("remove");
            match i % 3 {
                // `.rs` -> `.ts`, edited: a conversion, still text.
                0 => {
                    let mut t = text.clone();
                    t.extend_from_slice(b"\nexport {};\n");
                    std::fs::write(f.with_extension("ts"), t).expect("write");
                }
                // `.rs` -> `.txt`-like rename, same bytes.
                1 => std::fs::write(f.with_extension("rstxt"), &text).expect("write"),
                // `.md` -> `.docx`: a zip container, which does not compress.
                _ => {
                    let mut z =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
                    std::io::Write::write_all(&mut z, &text).expect("deflate");
                    let mut out = z.finish().expect("deflate");
                    out.extend(common::random_bytes(text.len() / 2 + 1024, i as u64));
                    std::fs::write(f.with_extension("docx"), out).expect("write");
                }
            }
        }
    });
    report("conversions and renames (60 files)", &p, &a);
    let f = &p.figures;
    assert!(!a.anomalous, "{a:#?}\n{f:#?}");
    assert_eq!(f.renamed, 60, "{f:#?}");
    // Only a converted file under 1 KiB (too small to tell whether its new
    // content compresses) can count as churn.
    assert!(f.churn_files <= 2, "{f:#?}");
    assert_eq!(f.became_incompressible, Some(0), "{f:#?}");
}

#[test]
fn encryption_of_large_blocks_inside_files_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("big");
    std::fs::create_dir_all(&src).unwrap();
    // 24 text files of 8 MiB (several chunks each).
    for i in 0..24u64 {
        let mut t = Vec::with_capacity(8 << 20);
        let mut n = i * 1_000_003;
        while t.len() < 8 << 20 {
            n = n
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            t.extend_from_slice(
                format!(
                    "2026-12-06 03:{:02}:{:02} host{} service[{}]: request {} served in {} ms, status {}\n",
                    (n >> 8) % 60,
                    (n >> 16) % 60,
                    i,
                    (n >> 24) % 4000,
                    (n >> 32) % 100_000,
                    (n >> 40) % 900,
                    [200, 204, 301, 404, 500][((n >> 50) % 5) as usize]
                )
                .as_bytes(),
            );
        }
        std::fs::write(src.join(format!("log{i}.txt")), t).unwrap();
    }
    let (p, a) = compare_after(&src, |s| {
        // The first half of each file encrypted in place (as families that
        // encrypt a file's head in large blocks do); names kept, no notes.
        for f in ransom::files_of(s) {
            let mut data = std::fs::read(&f).unwrap();
            let noise = common::random_bytes(4 << 20, 77);
            for (d, n) in data[4 << 20..].iter_mut().zip(noise) {
                *d ^= n;
            }
            std::fs::write(&f, data).unwrap();
        }
    });
    report("half of each 8 MiB file encrypted", &p, &a);
    assert!(a.anomalous, "{a:#?}\n{:#?}", p.figures);
    // Most of them: where a chunk boundary leaves more text than
    // ciphertext in a file's changed chunks, it stays under the bar (0
    // with the whole file's ratio, before this rule). Chunk boundaries are
    // keyed per repository, and a repository's key is random, so the count
    // varies from run to run: 19 to 24 of 24 in 13 runs (CI once saw 19
    // against an earlier bar of 20). The bar is half the files.
    assert!(
        p.figures.became_incompressible.unwrap_or(0) >= 12,
        "{:#?}",
        p.figures
    );
}

#[test]
fn a_deep_tree_is_compared_without_exhausting_the_stack() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("deep");
    let mut at = src.clone();
    for _ in 0..1000 {
        at.push("d");
    }
    std::fs::create_dir_all(&at).unwrap();
    std::fs::write(at.join("f"), b"before").unwrap();
    let leaf = at.join("f");
    // Compared on a small stack, as a service's blocking thread has.
    let (p, _) = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || compare_after(&src, |_| std::fs::write(&leaf, b"after").unwrap()))
        .unwrap()
        .join()
        .expect("no stack overflow");
    assert_eq!(p.figures.changed, 1, "{:#?}", p.figures);
}

#[test]
fn encryption_in_place_without_renames_is_caught_by_the_entropy_jump() {
    for permille in [100, 500] {
        let dir = tempfile::tempdir().unwrap();
        let src = project(dir.path());
        let (p, a) = compare_after(&src, |s| {
            ransom::attack(
                s,
                Attack {
                    permille,
                    rename_to: None,
                    replace_extension: false,
                    notes: false,
                    encrypt: true,
                },
            );
        });
        report(&format!("encrypt in place {} %", permille / 10), &p, &a);
        assert!(a.anomalous, "{permille}: {a:#?}");
        assert!(signal(&a, "entropy-jump") >= 500, "{a:#?}");
        assert_eq!(signal(&a, "extension-churn"), 0);
        assert_eq!(p.figures.renamed, 0);
    }
}

#[test]
fn notes_dropped_in_the_directories_alone_are_detected() {
    let dir = tempfile::tempdir().unwrap();
    let src = project(dir.path());
    let (p, a) = compare_after(&src, |s| {
        ransom::attack(
            s,
            Attack {
                permille: 100,
                rename_to: None,
                replace_extension: false,
                notes: true,
                encrypt: false,
            },
        );
    });
    report("notes only", &p, &a);
    assert!(a.anomalous, "{a:#?}");
    assert_eq!(p.figures.note_name.as_deref(), Some(ransom::NOTE));
    assert!(p.figures.note_dirs >= 3, "{:?}", p.figures);
    assert!(a.paths.iter().all(|p| p.ends_with(ransom::NOTE)));
}

#[test]
fn an_upgrade_of_a_source_tree_raises_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let src = project(dir.path());
    let (p, a) = compare_after(&src, ransom::upgrade_sources);
    report("source tree upgraded", &p, &a);
    let f = &p.figures;
    assert!(!a.anomalous, "{a:#?}\n{f:#?}");
    // The upgrade did happen, and was seen.
    assert!(f.changed * 2 > f.files_before, "{f:#?}");
    assert!(f.deleted > 10 && f.added > 10, "{f:#?}");
    assert!(signal(&a, "mass-rewrite") >= 500, "{a:#?}");
}

#[test]
fn a_package_upgrade_of_usr_raises_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("usr");
    let n = ransom::usr_tree(&src, 120);
    assert!(n > 50, "this machine's /usr gave {n} files");
    let (p, a) = compare_after(&src, ransom::upgrade_usr);
    report("package upgrade of /usr", &p, &a);
    assert!(!a.anomalous, "{a:#?}\n{:#?}", p.figures);
    assert!(
        p.figures.changed * 2 > p.figures.files_before,
        "{:#?}",
        p.figures
    );
}

#[test]
fn a_rebuilt_build_tree_raises_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("project");
    ransom::build_tree(&src, 1);
    let (p, a) = compare_after(&src, |s| ransom::rebuild(s, 2));
    report("build tree rebuilt", &p, &a);
    assert!(!a.anomalous, "{a:#?}\n{:#?}", p.figures);
    assert!(
        p.figures.deleted >= 180 && p.figures.added >= 180,
        "{:#?}",
        p.figures
    );
}

#[test]
fn log_rotation_raises_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("log");
    ransom::log_tree(&src, 30);
    let (p, a) = compare_after(&src, |s| ransom::rotate_logs(s, 30));
    report("log rotation", &p, &a);
    let f = &p.figures;
    assert!(!a.anomalous, "{a:#?}\n{f:#?}");
    assert_eq!(
        f.churn_extension, None,
        "gz and rotation numbers are ordinary"
    );
    assert!(f.changed >= 90, "{f:#?}");
}

#[test]
fn new_photos_and_archives_raise_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let src = project(dir.path());
    let (p, a) = compare_after(&src, |s| ransom::add_photos(s, 150));
    report("new photos and archives", &p, &a);
    let f = &p.figures;
    assert!(!a.anomalous, "{a:#?}\n{f:#?}");
    assert_eq!(f.added, 150, "{f:#?}");
    assert_eq!(f.became_incompressible, Some(0), "{f:#?}");
    assert!(signal(&a, "dedup-miss") > 0, "{a:#?}");
}

#[test]
fn without_compression_nothing_is_known_about_entropy() {
    let dir = tempfile::tempdir().unwrap();
    vouch::crypto::allow_weak_kdf();
    let opts = InitOptions {
        kdf: KdfParams {
            memory_kib: 1024,
            iterations: 1,
            parallelism: 1,
        },
        compression_level: 0,
        ..Default::default()
    };
    let repo = Repository::init(
        Arc::new(LocalBackend::new(dir.path().join("repo"))),
        b"pw",
        &opts,
    )
    .unwrap();
    let src = project(dir.path());
    backup_and_examine(&repo, &src);
    ransom::attack(
        &src,
        Attack {
            permille: 500,
            rename_to: None,
            replace_extension: false,
            notes: false,
            encrypt: true,
        },
    );
    let (p, a) = backup_and_examine(&repo, &src).unwrap();
    assert_eq!(p.figures.became_incompressible, None);
    assert!(a.signals.iter().all(|s| s.kind != "entropy-jump"));
}

/// The table of `docs/security.md`: the attack at each level on a large
/// real tree, and the upgrade to a later release of it.
#[test]
#[ignore = "needs a large tree: VOUCH_ANOMALY_TREE (and VOUCH_ANOMALY_UPGRADE)"]
fn attack_table_on_a_large_tree() {
    let Some(tree) = std::env::var_os("VOUCH_ANOMALY_TREE") else {
        eprintln!("VOUCH_ANOMALY_TREE is not set");
        return;
    };
    let work = std::env::var_os("VOUCH_ANOMALY_WORK")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let copy = |to: &Path| {
        let st = std::process::Command::new("cp")
            .arg("-a")
            .arg(&tree)
            .arg(to)
            .status()
            .expect("cp");
        assert!(st.success());
    };
    println!("| case | files before | changed | deleted | added | renamed | stopped compressing | churn | notes | signals | anomaly | backup (s) | comparison (s) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let row = |name: &str, p: &Profile, a: &Assessment, backup: f64, secs: f64| {
        let f = &p.figures;
        let sig: Vec<String> = a
            .signals
            .iter()
            .map(|s| format!("{} {}", s.kind, s.score_permille))
            .collect();
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {backup:.1} | {secs:.2} |",
            f.files_before,
            f.changed,
            f.deleted,
            f.added,
            f.renamed,
            f.became_incompressible
                .map_or("unknown".into(), |n| n.to_string()),
            f.churn_files,
            f.note_dirs,
            sig.join(", "),
            if a.anomalous { "**yes**" } else { "no" },
        );
    };
    let mut cases: Vec<(String, Attack)> = Vec::new();
    for permille in [20, 100, 500] {
        cases.push((
            format!("encrypt+rename {} %", permille / 10),
            Attack {
                permille,
                rename_to: Some("locked"),
                replace_extension: false,
                notes: true,
                encrypt: true,
            },
        ));
        cases.push((
            format!("encrypt in place {} %, no notes", permille / 10),
            Attack {
                permille,
                rename_to: None,
                replace_extension: false,
                notes: false,
                encrypt: true,
            },
        ));
    }
    for (name, attack) in cases {
        let dir = tempfile::tempdir_in(&work).unwrap();
        let repo = new_repo(dir.path());
        let src = dir.path().join("tree");
        copy(&src);
        backup_and_examine(&repo, &src);
        ransom::attack(&src, attack);
        let (found, backup, compare) = timed_backup_and_examine(&repo, &src);
        let (p, a) = found.expect("a parent");
        row(&name, &p, &a, backup, compare);
    }
    if let Some(later) = std::env::var_os("VOUCH_ANOMALY_UPGRADE") {
        let dir = tempfile::tempdir_in(&work).unwrap();
        let repo = new_repo(dir.path());
        let src = dir.path().join("tree");
        copy(&src);
        backup_and_examine(&repo, &src);
        std::fs::remove_dir_all(&src).unwrap();
        let st = std::process::Command::new("cp")
            .arg("-a")
            .arg(&later)
            .arg(&src)
            .status()
            .expect("cp");
        assert!(st.success());
        let (found, backup, compare) = timed_backup_and_examine(&repo, &src);
        let (p, a) = found.expect("a parent");
        row("upgrade to the later release", &p, &a, backup, compare);
    }
}
