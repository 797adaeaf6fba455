//! Computes `VOUCH_PROJECTION_RULES`: a digest of the projection's source
//! code (tests excluded) and of the code whose meaning it folds: the event
//! types (`event.rs`), the plan definitions and depths (`plan.rs`) and the
//! upcasters (`upcast.rs`: what an old event means). A read-store
//! snapshot records it, and one folded by other rules is rebuilt from the
//! log (see `projection/mod.rs`). A change that does not alter the rules
//! (a comment) costs one rebuild at the next start, never a wrong state.

use std::fs;
use std::path::Path;

fn main() {
    let dir = Path::new("src/projection");
    let mut files: Vec<_> = match fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "rs"))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| !n.to_string_lossy().starts_with("tests"))
            })
            .collect(),
        Err(e) => panic!("cannot list {}: {e}", dir.display()),
    };
    // The code the fold depends on beyond its own module (review M9).
    files.extend(["src/event.rs", "src/plan.rs", "src/upcast.rs"].map(Into::into));
    files.sort();
    // FNV-1a, 64 bits: enough to tell one version of the rules from
    // another; this is not a security boundary.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let name = f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let body = fs::read(f).unwrap_or_else(|e| panic!("cannot read {}: {e}", f.display()));
        for b in name.bytes().chain([0]).chain(body).chain([0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    println!("cargo:rerun-if-changed=src/projection");
    println!("cargo:rustc-env=VOUCH_PROJECTION_RULES={h:016x}");
}
