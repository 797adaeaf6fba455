//! A killed local backup resumes (issue 14): the session journal in the
//! cache directory names the packs it stored, so the next run sends again
//! at most what was in flight.

mod common;

use std::time::{Duration, Instant};

use common::{random_files, stored_bytes, Env};

#[test]
fn a_killed_local_backup_resumes_instead_of_storing_everything_again() {
    let env = Env::new();
    env.init(); // 1 MiB packs
    let src = env.path("src");
    random_files(&src, 120, 200_000, 9); // 24 MB, incompressible
    let cache = env.path("cache");
    let mut child = env
        .cmd()
        .args(["backup", "--read-threads", "1", src.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("backup starts");
    let packs = env.repo.join("data");
    let until = Instant::now() + Duration::from_secs(60);
    while stored_bytes(&packs).1 < 6 {
        assert!(Instant::now() < until, "the backup stored no packs");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("kill -9");
    let _ = child.wait();
    let (killed, _) = stored_bytes(&packs);
    let out = env
        .cmd()
        .args(["backup", "--json", src.to_str().unwrap()])
        .output()
        .expect("backup runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (total, _) = stored_bytes(&packs);
    let source = 120 * 200_000u64;
    assert!(killed > 0);
    // Leftovers of the killed run are reused; without the journal the
    // second run stores the whole source again.
    assert!(
        total < source + source / 5,
        "{total} bytes stored for {source} of incompressible source ({killed} by the killed run)"
    );
    env.ok(&["verify", "--read-data"]);
    // The journal is emptied by the commit.
    let left: usize = std::fs::read_dir(cache.join("sessions"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|r| std::fs::read_dir(r.path()).into_iter().flatten().flatten())
        .flat_map(|s| std::fs::read_dir(s.path()).into_iter().flatten().flatten())
        .count();
    assert_eq!(left, 0, "the journal outlived its commit");
}
