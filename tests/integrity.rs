//! Damage detection, index repair, keys, forget and prune.

mod common;

use std::fs;

use common::{random_bytes, summary_of, Env};

fn populated() -> (Env, std::path::PathBuf) {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    fs::create_dir_all(src.join("d")).unwrap();
    for i in 0..12 {
        fs::write(
            src.join(format!("d/f{i}")),
            random_bytes(150_000 + i * 1000, i as u64),
        )
        .unwrap();
    }
    fs::write(src.join("text"), b"lorem ipsum ".repeat(50_000)).unwrap();
    env.backup(&[&src]);
    (env, src)
}

/// A single flipped bit anywhere in any pack is found, and the report names
/// the affected snapshot.
#[test]
fn every_flipped_bit_is_found() {
    let (env, _) = populated();
    let packs = vouch_chaos::files_below(&env.repo.join("data"));
    let seed = vouch_chaos::Rng::seed_from_clock();
    eprintln!("seed {seed}");
    let mut rng = vouch_chaos::Rng::new(seed);
    for round in 0..12 {
        let pack = &packs[rng.below(packs.len() as u64) as usize];
        let original = fs::read(pack).unwrap();
        let (offset, bit) = vouch_chaos::flip_random_bit(pack, &mut rng).unwrap();
        let out = env.run(&["verify", "--read-data", "--json"]);
        assert_eq!(
            out.status.code(),
            Some(13),
            "round {round}: flip at {offset}:{bit} of {} not found (seed {seed})",
            pack.display()
        );
        let v = summary_of(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(v["damaged"], true);
        let damage = v["report"]["damage"].as_array().unwrap();
        let pack_name = pack.file_name().unwrap().to_str().unwrap();
        assert!(
            damage.iter().any(|d| d["pack"] == pack_name),
            "the pack is not named: {v}"
        );
        // A flip inside a blob hits data: the snapshot and its paths are named.
        // A flip in the header or trailer leaves every blob intact: only the
        // pack is reported (regression: found by this test's random seeds).
        if damage.iter().any(|d| !d["blob"].is_null()) {
            assert!(
                !v["report"]["affected"].as_array().unwrap().is_empty(),
                "no affected snapshot named: {v}"
            );
        }
        fs::write(pack, original).unwrap();
    }
    env.ok(&["verify", "--read-data"]);
}

#[test]
fn repair_index_rebuilds_from_packs() {
    let (env, src) = populated();
    for f in vouch_chaos::files_below(&env.repo.join("index")) {
        fs::remove_file(f).unwrap();
    }
    assert_eq!(env.run(&["verify"]).status.code(), Some(13));
    env.ok(&["repair", "index"]);
    env.ok(&["verify", "--read-data"]);
    let t = env.path("t");
    env.ok(&[
        "restore",
        &format!("latest:{}", src.display()),
        "--target",
        t.to_str().unwrap(),
        "--verify",
    ]);
}

#[test]
fn keys_add_list_remove_passwd() {
    let (env, _) = populated();
    // `key add` / `key passwd` with a new passphrase, cheap KDF settings.
    let new_key = |action: &str, passphrase: &str| {
        let out = env
            .cmd()
            .env("VOUCH_NEW_PASSWORD", passphrase)
            .args([
                "key",
                action,
                "--insecure-kdf",
                "--kdf-memory-kib",
                "1024",
                "--kdf-iterations",
                "1",
            ])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let open_with = |passphrase: &str| {
        env.cmd()
            .env("VOUCH_PASSWORD", passphrase)
            .arg("snapshots")
            .output()
            .unwrap()
            .status
            .code()
    };
    new_key("add", "second");
    let keys: serde_json::Value =
        serde_json::from_str(env.ok(&["key", "list", "--json"]).trim()).unwrap();
    let keys = keys.as_array().unwrap();
    assert_eq!(keys.len(), 2);
    assert_eq!(open_with("second"), Some(0));
    // The key in use cannot be removed; the other one can.
    let id_of = |current: bool| {
        keys.iter().find(|k| k["current"] == current).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        env.run(&["key", "remove", &id_of(true)[..8]]).status.code(),
        Some(2)
    );
    env.ok(&["key", "remove", &id_of(false)[..8]]);
    assert_eq!(open_with("second"), Some(12));
    // passwd replaces the key in use.
    new_key("passwd", "third");
    assert_eq!(
        open_with(common::PASSWORD),
        Some(12),
        "old passphrase must stop working"
    );
    assert_eq!(open_with("third"), Some(0));
}

#[test]
fn forget_and_prune_free_space_and_keep_the_rest_restorable() {
    let (env, src) = populated();
    for i in 0..3 {
        fs::write(src.join(format!("new{i}")), random_bytes(400_000, 1000 + i)).unwrap();
        env.backup(&[&src]);
    }
    let dry = env.ok(&["forget", "--keep-last", "2", "--dry-run", "--json"]);
    let v = summary_of(&dry);
    let decisions = v["groups"][0]["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 4);
    assert_eq!(decisions.iter().filter(|d| d["keep"] == true).count(), 2);
    assert_eq!(
        vouch_chaos::files_below(&env.repo.join("snapshots")).len(),
        4,
        "dry run must not delete"
    );
    assert_eq!(
        env.run(&["forget"]).status.code(),
        Some(2),
        "no rules must be refused"
    );

    env.ok(&["forget", "--keep-last", "1"]);
    let before: u64 = vouch_chaos::files_below(&env.repo.join("data"))
        .iter()
        .map(|p| fs::metadata(p).unwrap().len())
        .sum();
    let out = env.ok(&["prune", "--json"]);
    let after: u64 = vouch_chaos::files_below(&env.repo.join("data"))
        .iter()
        .map(|p| fs::metadata(p).unwrap().len())
        .sum();
    let r = summary_of(&out);
    assert!(after <= before, "{r}");
    env.ok(&["verify", "--read-data"]);
    let t = env.path("t");
    env.ok(&[
        "restore",
        &format!("latest:{}", src.display()),
        "--target",
        t.to_str().unwrap(),
        "--verify",
    ]);
    assert_eq!(common::describe(&src), common::describe(&t));
    // Forgetting everything and pruning leaves (almost) nothing.
    let snaps: serde_json::Value =
        serde_json::from_str(env.ok(&["snapshots", "--json"]).trim()).unwrap();
    let id = snaps[0]["id"].as_str().unwrap().to_string();
    env.ok(&["forget", &id]);
    env.ok(&["prune"]);
    assert!(vouch_chaos::files_below(&env.repo.join("data")).is_empty());
    env.ok(&["verify"]);
}

#[test]
fn prune_repacks_partly_used_packs() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("keep"), random_bytes(300_000, 1)).unwrap();
    fs::write(src.join("drop"), random_bytes(900_000, 2)).unwrap();
    let first = env.backup(&[&src]);
    fs::remove_file(src.join("drop")).unwrap();
    env.backup(&[&src]);
    env.ok(&["forget", &first]);
    let before: u64 = vouch_chaos::files_below(&env.repo.join("data"))
        .iter()
        .map(|p| fs::metadata(p).unwrap().len())
        .sum();
    let r = summary_of(&env.ok(&["prune", "--repack-below", "100", "--json"]));
    assert!(r["report"]["packs_repacked"].as_u64().unwrap() >= 1, "{r}");
    assert!(r["report"]["packs_written"].as_u64().unwrap() >= 1, "{r}");
    let after: u64 = vouch_chaos::files_below(&env.repo.join("data"))
        .iter()
        .map(|p| fs::metadata(p).unwrap().len())
        .sum();
    assert!(after + 800_000 < before, "{before} -> {after}: {r}");
    env.ok(&["verify", "--read-data"]);
    let t = env.path("t");
    env.ok(&[
        "restore",
        &format!("latest:{}", src.display()),
        "--target",
        t.to_str().unwrap(),
    ]);
    assert_eq!(common::describe(&src), common::describe(&t));
}
