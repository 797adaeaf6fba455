//! Round trip of a real source tree (the Linux kernel sources that
//! `../shared/bench/fetch-data.sh` prepares): backup, then restore, gives a
//! byte- and metadata-identical copy. Not run in CI (benchmark data stays
//! out of it); run with
//! `VOUCH_BENCH_DIR=/var/tmp/vouch-bench cargo test --release --test realdata -- --ignored`.

mod common;

use std::path::PathBuf;

use common::{describe, Env};

#[test]
#[ignore]
fn kernel_tree_round_trip_is_identical() {
    let data = PathBuf::from(
        std::env::var("VOUCH_BENCH_DIR").unwrap_or_else(|_| "/var/tmp/vouch-bench".into()),
    );
    let src = data.join("linux-6.12");
    assert!(
        src.is_dir(),
        "run ../shared/bench/fetch-data.sh first ({} missing)",
        src.display()
    );
    let env = Env::new();
    env.init();
    let snap = env.backup(&[&src]);
    let target = env.path("restored");
    env.ok(&[
        "restore",
        &format!("{snap}:{}", src.display()),
        "--target",
        target.to_str().unwrap(),
        "--verify",
    ]);
    assert_eq!(describe(&src), describe(&target));
    env.ok(&["verify", "--read-data"]);
}
