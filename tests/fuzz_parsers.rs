//! Fuzz targets for the parsers of on-disk input, on stable Rust: a small
//! mutation fuzzer (seeded, reproducible) over real files of a real
//! repository and a real event log, and over random bytes. Each target must
//! not panic, hang or allocate without bound on any input:
//!
//! - a panic fails the target; the input is written to
//!   `target/fuzz-inputs/<target>-<n>.bin` first (a regression test then
//!   names it);
//! - this test binary's allocator refuses any single allocation over
//!   [`ALLOC_CAP`] (256 MiB) and aborts with a message: an input whose
//!   parse asks for that much is a finding;
//! - an input that takes more than 5 s is a finding (a hang; the margin keeps a loaded CI machine from failing it).
//!
//! `VOUCH_FUZZ_SECS` sets the time per target (default 2; CI runs the
//! default), `VOUCH_FUZZ_SEED` the seed. Each target prints its count of
//! executions. Targets: pack trailer and header, pack header plaintext,
//! index file, tree, manifest (plaintext and sealed on disk), key file,
//! repository config, event-log segments (frames, envelopes, events).

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use vouch::backend::{FileKind, LocalBackend};
use vouch::format::{decode, encode, IndexFile, KeyFile, Manifest, PackHeader, Tree};
use vouch::id::{IndexId, PackId, SnapshotId};
use vouch::repo::{InitOptions, MasterIndex, Repository};

/// The largest single allocation any parser may make here.
const ALLOC_CAP: usize = 256 << 20;

struct Capped;

// SAFETY: forwards to the system allocator; refuses only (by aborting).
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_CAP {
            too_big();
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_CAP {
            too_big();
        }
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > ALLOC_CAP {
            too_big();
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

thread_local! {
    /// The input this thread's target is running on, for [`too_big`] to
    /// save without allocating (const-initialised: no allocation, no
    /// destructor, so the allocator may read it).
    static CURRENT_INPUT: std::cell::Cell<(*const u8, usize)> =
        const { std::cell::Cell::new((std::ptr::null(), 0)) };
}
/// The file [`too_big`] saves the input to (a C string).
static ABORT_FILE: OnceLock<std::ffi::CString> = OnceLock::new();

fn too_big() -> ! {
    let msg = b"fuzz: a parser asked for an allocation over 256 MiB; input saved to target/fuzz-inputs/alloc-abort.bin\n";
    // SAFETY: writes static buffers and the input being run (alive for
    // the whole call of the target) with plain system calls; no
    // allocation.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        let (input, len) = CURRENT_INPUT.with(std::cell::Cell::get);
        if let Some(path) = ABORT_FILE.get() {
            if !input.is_null() {
                let fd = libc::open(
                    path.as_ptr(),
                    libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
                    0o644,
                );
                if fd >= 0 {
                    libc::write(fd, input.cast(), len);
                    libc::close(fd);
                }
            }
        }
        libc::abort()
    }
}

#[global_allocator]
static ALLOC: Capped = Capped;

/// splitmix64: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Bytes that mean "length follows" or extremes in MessagePack, JSON and
/// little-endian lengths.
const INTERESTING: &[u8] = &[
    0x00, 0xff, 0x7f, 0x80, 0xc4, 0xc5, 0xc6, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0x9f, 0x8f,
    b'"', b'{', b'[', b'9', b'-', b'e',
];

/// One to four mutations of `seed`, or (one time in 16) random bytes.
fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    if rng.below(16) == 0 || seed.is_empty() {
        let n = rng.below(512);
        return (0..n).map(|_| rng.next() as u8).collect();
    }
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = b.len().max(1);
        match rng.below(8) {
            0 => {
                let i = rng.below(len);
                if let Some(x) = b.get_mut(i) {
                    *x ^= 1 << rng.below(8);
                }
            }
            1 => {
                let i = rng.below(len);
                let v = INTERESTING[rng.below(INTERESTING.len())];
                if let Some(x) = b.get_mut(i) {
                    *x = v;
                }
            }
            2 => b.truncate(rng.below(len)),
            3 => {
                // A large length: four 0xff bytes (u32::MAX either endian).
                let i = rng.below(len);
                for k in 0..4 {
                    if let Some(x) = b.get_mut(i + k) {
                        *x = 0xff;
                    }
                }
            }
            4 => {
                let i = rng.below(len);
                let j = (i + rng.below(64)).min(b.len());
                let piece = b.get(i..j).map(<[u8]>::to_vec).unwrap_or_default();
                let at = rng.below(b.len() + 1);
                b.splice(at..at, piece);
            }
            5 => {
                let at = rng.below(b.len() + 1);
                let n = 1 + rng.below(8);
                let junk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                b.splice(at..at, junk);
            }
            6 => {
                let i = rng.below(len);
                let n = rng.below(16);
                let end = (i + n).min(b.len());
                if i < end {
                    b.drain(i..end);
                }
            }
            _ => {
                let i = rng.below(len);
                if let Some(x) = b.get_mut(i) {
                    *x = x.wrapping_add(1 + rng.below(3) as u8);
                }
            }
        }
    }
    b
}

fn secs() -> Duration {
    let s = std::env::var("VOUCH_FUZZ_SECS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(s)
}

fn seed() -> u64 {
    std::env::var("VOUCH_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed)
}

fn inputs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-inputs")
}

/// Runs `target` on mutations of `seeds` for the time set; returns the
/// count of executions. A panic or a slow input is saved and fails.
fn fuzz(name: &str, seeds: &[Vec<u8>], mut target: impl FnMut(&[u8])) -> u64 {
    assert!(!seeds.is_empty(), "{name}: no seeds");
    ABORT_FILE.get_or_init(|| {
        let dir = inputs_dir();
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("alloc-abort.bin");
        std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL in the path")
    });
    let mut rng = Rng(seed()
        ^ name
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31) ^ u64::from(b)));
    let until = Instant::now() + secs();
    let mut execs = 0u64;
    // Every seed as it is, first.
    let mut queue: Vec<Vec<u8>> = seeds.to_vec();
    while Instant::now() < until || !queue.is_empty() {
        let input = match queue.pop() {
            Some(s) => s,
            None => {
                let pick = rng.below(seeds.len());
                mutate(&mut rng, &seeds[pick])
            }
        };
        let started = Instant::now();
        CURRENT_INPUT.with(|c| c.set((input.as_ptr(), input.len())));
        let outcome = catch_unwind(AssertUnwindSafe(|| target(&input)));
        CURRENT_INPUT.with(|c| c.set((std::ptr::null(), 0)));
        let took = started.elapsed();
        execs += 1;
        if outcome.is_err() || took > Duration::from_secs(5) {
            let dir = inputs_dir();
            let _ = std::fs::create_dir_all(&dir);
            let path = dir.join(format!("{name}-{execs}.bin"));
            let _ = std::fs::write(&path, &input);
            panic!(
                "{name}: {} on input {} ({took:?})",
                if outcome.is_err() { "panic" } else { "slow" },
                path.display()
            );
        }
    }
    println!("fuzz {name}: {execs} executions in {:?}", secs());
    execs
}

/// A real repository with a backup of a few files (cheap key derivation),
/// built once.
struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    repo: Repository,
    snapshot: SnapshotId,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        vouch::crypto::allow_weak_kdf();
        let dir = scratch();
        let root = dir.path().join("repo");
        let opts = InitOptions {
            kdf: vouch::crypto::KdfParams {
                memory_kib: 64,
                iterations: 1,
                parallelism: 1,
            },
            ..Default::default()
        };
        let repo =
            Repository::init(Arc::new(LocalBackend::new(&root)), b"pw", &opts).expect("init");
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("sub")).expect("src");
        for i in 0..6 {
            std::fs::write(
                src.join(if i % 2 == 0 { "sub" } else { "." })
                    .join(format!("f{i}")),
                format!("file {i} ").repeat(100 * (i + 1)),
            )
            .expect("file");
        }
        std::os::unix::fs::symlink("f1", src.join("link")).expect("symlink");
        let backup = vouch::backup::backup(
            &repo,
            &vouch::backup::BackupOptions {
                paths: vec![src],
                ..Default::default()
            },
            Arc::default(),
        )
        .expect("backup");
        Fixture {
            _dir: dir,
            root,
            repo,
            snapshot: backup.snapshot,
        }
    })
}

/// A scratch directory for targets that write their input to a file: on
/// tmpfs where there is one (a file rewritten on ext4 is flushed at close).
fn scratch() -> tempfile::TempDir {
    match tempfile::tempdir_in("/dev/shm") {
        Ok(d) => d,
        Err(_) => tempfile::tempdir().expect("tempdir"),
    }
}

fn files(root: &Path, sub: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.join(sub)];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("ls").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn fuzz_pack_trailer_and_header() {
    let f = fixture();
    let packs: Vec<(PackId, Vec<u8>)> = files(&f.root, "data")
        .iter()
        .map(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).expect("name");
            (
                PackId::from_hex(name).expect("pack id"),
                std::fs::read(p).expect("pack"),
            )
        })
        .collect();
    let id = packs[0].0;
    let seeds: Vec<Vec<u8>> = packs.iter().map(|(_, b)| b.clone()).collect();
    let key = f.repo.key().clone();
    fuzz("pack", &seeds, |bytes| {
        let _ = vouch::repo::pack::parse_trailer(bytes);
        let _ = vouch::repo::pack::read_whole(&key, id, bytes);
    });
    // The header's plaintext, as if it had authenticated.
    let headers: Vec<Vec<u8>> = packs
        .iter()
        .map(|(id, b)| {
            let p = vouch::repo::pack::read_whole(&key, *id, b).expect("a good pack");
            encode(&PackHeader { blobs: p.blobs })
        })
        .collect();
    fuzz("pack-header", &headers, |bytes| {
        let _ = decode::<PackHeader>(bytes);
    });
}

#[test]
fn fuzz_index_file() {
    let f = fixture();
    let index = f.repo.load_index().expect("index");
    let ids: std::collections::HashSet<PackId> = index.packs().iter().map(|p| p.id).collect();
    let file = IndexFile {
        packs: index.records_for(&ids),
        supersedes: vec![IndexId([3; 32])],
    };
    fuzz("index", &[encode(&file)], |bytes| {
        if let Ok(file) = decode::<IndexFile>(bytes) {
            let mut m = MasterIndex::default();
            m.add_file(IndexId([1; 32]), &file);
            let _ = m.len();
        }
    });
}

#[test]
fn fuzz_tree() {
    let f = fixture();
    let index = f.repo.load_index().expect("index");
    let manifest = f.repo.load_snapshot(&f.snapshot).expect("manifest");
    let root = vouch::tree::load(&f.repo, &index, &manifest.tree).expect("tree");
    let mut seeds = vec![encode(&root)];
    for n in &root.nodes {
        if let Some(sub) = n.subtree {
            seeds.push(encode(
                &vouch::tree::load(&f.repo, &index, &sub).expect("subtree"),
            ));
        }
    }
    fuzz("tree", &seeds, |bytes| {
        if let Ok(tree) = decode::<Tree>(bytes) {
            let _ = vouch::tree::check_tree(&manifest.tree, &tree);
            for n in &tree.nodes {
                let _ = n.mtime();
                let _ = n.display_name();
            }
        }
    });
}

#[test]
fn fuzz_manifest() {
    let f = fixture();
    let manifest = f.repo.load_snapshot(&f.snapshot).expect("manifest");
    fuzz("manifest", &[encode(&manifest)], |bytes| {
        let _ = decode::<Manifest>(bytes);
    });
    // The sealed file on disk, through the repository's own loader, named
    // by its hash as a real one is (so the name check passes and the
    // opening of the sealed bytes is what is fuzzed).
    let name = f.snapshot.to_hex();
    let backend = f.repo.backend().clone();
    let sealed = backend.read(FileKind::Snapshot, &name).expect("sealed");
    fuzz("manifest-file", &[sealed], |bytes| {
        let id = SnapshotId::hash_of(bytes);
        if id == f.snapshot {
            let _ = f.repo.load_snapshot(&id);
            return;
        }
        backend
            .write(
                FileKind::Snapshot,
                &id.to_hex(),
                bytes,
                vouch::backend::WriteSync::Deferred,
            )
            .expect("write");
        let _ = f.repo.load_snapshot(&id);
        let _ = backend.delete(FileKind::Snapshot, &id.to_hex());
    });
}

#[test]
fn fuzz_key_file() {
    let f = fixture();
    let seeds: Vec<Vec<u8>> = files(&f.root, "keys")
        .iter()
        .map(|p| std::fs::read(p).expect("key"))
        .collect();
    fuzz("key", &seeds, |bytes| {
        // Parsing and the bounds; the derivation itself is paid only within
        // them (engine finding 14), so it is not fuzzed here.
        if let Ok(k) = serde_json::from_slice::<KeyFile>(bytes) {
            let _ = k.params.check_readable();
        }
    });
}

#[test]
fn fuzz_config() {
    let f = fixture();
    let dir = scratch();
    let backend = LocalBackend::new(dir.path());
    std::fs::create_dir_all(dir.path()).expect("dir");
    let seed = std::fs::read(f.root.join("config")).expect("config");
    fuzz("config", &[seed], |bytes| {
        std::fs::write(dir.path().join("config"), bytes).expect("write");
        let _ = Repository::read_config(&backend);
    });
}

#[test]
fn fuzz_event_log_segments() {
    use vouch_events::{
        verify_chain, Event, EventLog, JobFinished, JobId, LogOptions, LogReader, ManualClock,
    };
    let dir = scratch();
    let log_dir = dir.path().join("log");
    {
        let mut log = EventLog::open(
            &log_dir,
            LogOptions::default(),
            Arc::new(ManualClock::new(1_000)),
        )
        .expect("log");
        for n in 0..8 {
            let e: Event = JobFinished {
                job: JobId::new(format!("job-{n}")),
            }
            .into();
            log.append(&[e]).expect("append");
        }
    }
    let segs: Vec<PathBuf> = files(&log_dir, ".")
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    let seg_name = segs[0].file_name().expect("name").to_owned();
    let seeds: Vec<Vec<u8>> = segs
        .iter()
        .map(|p| std::fs::read(p).expect("seg"))
        .collect();
    let work = dir.path().join("work");
    fuzz("event-segment", &seeds, |bytes| {
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).expect("dir");
        std::fs::write(work.join(&seg_name), bytes).expect("write");
        let _ = vouch_events::format::parse_segment_header(bytes);
        let _ = verify_chain(&work);
        if let Ok(replay) = LogReader::new(&work).replay_from(1) {
            for e in replay.take(10_000) {
                if e.is_err() {
                    break;
                }
            }
        }
    });
}

/// The harness bites: a target that panics on some inputs is found within
/// the time set, and its input is saved.
#[test]
fn fuzz_harness_finds_a_planted_panic() {
    let found = catch_unwind(|| {
        fuzz("planted", &[b"seed bytes".to_vec()], |bytes| {
            assert!(!bytes.contains(&0xff), "planted");
        })
    });
    let message = found
        .err()
        .and_then(|e| e.downcast_ref::<String>().cloned())
        .expect("the planted panic was found");
    assert!(message.contains("planted: panic on input"), "{message}");
    let saved = message
        .split("input ")
        .nth(1)
        .and_then(|r| r.split(" (").next())
        .expect("the saved input's path");
    assert!(std::fs::read(saved).expect("saved").contains(&0xff));
    let _ = std::fs::remove_file(saved);
}

/// Seeds as byte strings.
fn seeds_of(items: &[&str]) -> Vec<Vec<u8>> {
    items.iter().map(|s| s.as_bytes().to_vec()).collect()
}

#[test]
fn fuzz_plan_bodies() {
    let seeds = seeds_of(&[
        r#"{"id":"web-1","source":"/srv/www","schedule":"0 3 * * *","rpo":"26h"}"#,
        r#"{"id":"db","source":"agent:db-1:/var/lib/db","repository":"default","paused":true,
            "retention":{"last":7,"daily":14,"weekly":8,"monthly":12,"yearly":3,"within":"2d","tags":["keep"]},
            "verification":{"after_backup":true,"every":"7d","depth":"read-sample:10"},
            "restore_test":{"every":"1d","max_evidence_age":"8d","sample_files":100,"full_every":"30d"}}"#,
        r#"{"source":"/home/a","verification":{"every":null,"depth":"read-all"},"restore_test":{"every":null,"sample_files":null,"full_every":null}}"#,
        r#"{"id":"x","source":"/","retention":{"hourly":24.0},"restore_test":{"sample_files":1}}"#,
        r#"{"id":"a.b_c-d","source":"/srv/","schedule":"@hourly","retention":null,"verification":null}"#,
    ]);
    fuzz("plan-body", &seeds, vouch_web::fuzzing::plan_body);
}

#[test]
fn fuzz_lock_and_verify_report_bodies() {
    let point = "ab".repeat(32);
    let lock = seeds_of(&[
        r#"{"until":"2027-01-01T00:00:00Z"}"#,
        r#"{"until":"9999-12-31T23:59:59.999999999+14:00"}"#,
    ]);
    fuzz("lock-body", &lock, vouch_web::fuzzing::lock_body);
    let reports = vec![
        format!(r#"{{"points":[{{"id":"{point}","depth":"read-all"}}],"bytes_read":10,"blobs_checked":2}}"#)
            .into_bytes(),
        format!(
            r#"{{"points":[{{"id":"{point}","depth":"structure","damaged":["tree {point} unreadable"]}},{{"id":"{point}","depth":"read-sample:5"}}],"damaged_packs":["{point}"]}}"#
        )
        .into_bytes(),
    ];
    fuzz(
        "verify-report-body",
        &reports,
        vouch_web::fuzzing::verify_report_body,
    );
}

#[test]
fn fuzz_query_strings() {
    let seeds = seeds_of(&[
        "after=5&limit=100&type=backup.finished&plan=web-1",
        "state=open",
        "plan=db&limit=20&after=17",
        "path=%2Fetc%2Fhosts&offset=100&limit=50",
        "state=running&limit=1000",
    ]);
    fuzz("query", &seeds, vouch_web::fuzzing::query);
}

/// Each grammar accepts exactly what its OpenAPI pattern matches, and
/// every accepted string parses in the engine.
#[test]
fn fuzz_grammars_against_their_patterns() {
    let grammars = vouch_web::fuzzing::Grammars::new();
    let seeds = seeds_of(&[
        "26h",
        "1day 2h",
        "1h30m",
        "0s 1ns",
        "999999999years",
        "*/5 * * * *",
        "0 3 * * 1-5",
        "0-59/7,3 0-23/2 1-31 1-12 0-7",
        "@daily",
        "web-1.db_2",
        "defaults",
        "/home/user/x",
        "/srv/",
        "agent:web-1:/etc/.config/..x",
        "/a/./b",
        "read-sample:100",
        "structure",
        "read-all",
    ]);
    fuzz("grammars", &seeds, |bytes| grammars.check(bytes));
}

/// Run only by [`fuzz_harness_saves_the_input_of_a_huge_allocation`], in
/// a child process (the allocator aborts it).
#[test]
#[ignore = "aborts its process; run by fuzz_harness_saves_the_input_of_a_huge_allocation"]
fn planted_huge_allocation() {
    fuzz("planted-alloc", &[b"seed bytes".to_vec()], |bytes| {
        if bytes.contains(&0xff) {
            let v: Vec<u8> = Vec::with_capacity(ALLOC_CAP + 1);
            std::hint::black_box(v);
        }
    });
}

/// An allocation over the cap aborts the process, and the input that
/// caused it is saved first.
#[test]
fn fuzz_harness_saves_the_input_of_a_huge_allocation() {
    let saved = inputs_dir().join("alloc-abort.bin");
    let _ = std::fs::remove_file(&saved);
    let out = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "--exact",
            "planted_huge_allocation",
            "--ignored",
            "--test-threads=1",
        ])
        .env("VOUCH_FUZZ_SECS", "20")
        .output()
        .expect("child");
    assert!(!out.status.success(), "the child aborted");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("allocation over 256 MiB"), "{stderr}");
    let input = std::fs::read(&saved).expect("the input was saved");
    assert!(input.contains(&0xff), "{input:?}");
    let _ = std::fs::remove_file(&saved);
}
