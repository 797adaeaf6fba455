//! Regression tests for the engine review's finding 1 (restore trusted the
//! names in trees and followed symlinks it had made itself), finding 5
//! (`--overwrite` wrote into inodes shared with files outside the target)
//! and finding 16 (hard-link groups trusted `(device, inode)` alone).
//!
//! The malicious snapshots are built with the engine's public API, as a
//! holder of the repository key could: seal blobs and trees into a pack,
//! index it, commit a manifest. A restore of such a snapshot must fail as
//! damage and leave everything outside the target exactly as it was; verify
//! must report the damage.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{summary_of, Env, PASSWORD};
use vouch::backend::{FileKind, LocalBackend, WriteSync};
use vouch::format::{
    encode, BlobType, Compression, Extent, IndexFile, Manifest, Node, NodeKind, Summary, Tree,
};
use vouch::id::BlobId;
use vouch::repo::pack::PackBuilder;
use vouch::repo::Repository;

/// Builds snapshots by hand: blobs go into one pack written by `commit`.
struct Forge {
    repo: Repository,
    pack: Option<PackBuilder>,
}

impl Forge {
    fn new(env: &Env) -> Forge {
        let repo =
            Repository::open(Arc::new(LocalBackend::new(&env.repo)), PASSWORD.as_bytes()).unwrap();
        let pack = Some(PackBuilder::new(repo.key(), 1 << 20));
        Forge { repo, pack }
    }

    fn blob(&mut self, kind: BlobType, data: &[u8]) -> BlobId {
        let id = self.repo.key().blob_id(data);
        if let Some(p) = self.pack.as_mut() {
            p.add(id, kind, data.len(), Compression::None, data);
        }
        id
    }

    /// A file node with `data` as its one extent.
    fn file(&mut self, name: &[u8], mode: u32, data: &[u8]) -> Node {
        let blob = self.blob(BlobType::Data, data);
        Node {
            kind: NodeKind::File,
            mode: 0o100000 | mode,
            size: data.len() as u64,
            content: vec![Extent {
                blob: Some(blob),
                length: data.len() as u64,
            }],
            ..node(name)
        }
    }

    /// A directory node holding `nodes` (kept in the order given).
    fn dir(&mut self, name: &[u8], nodes: Vec<Node>) -> Node {
        let tree = self.tree(nodes);
        Node {
            kind: NodeKind::Dir,
            mode: 0o040755,
            subtree: Some(tree),
            ..node(name)
        }
    }

    fn tree(&mut self, nodes: Vec<Node>) -> BlobId {
        self.blob(BlobType::Tree, &encode(&Tree { nodes }))
    }

    /// Writes the pack and index and commits a snapshot of `root`.
    fn commit(mut self, root: Vec<Node>) -> String {
        let tree = self.tree(root);
        let fp = self.pack.take().map(PackBuilder::finish).unwrap();
        let backend = self.repo.backend();
        backend
            .write(FileKind::Pack, &fp.id.to_hex(), &fp.bytes, WriteSync::Now)
            .unwrap();
        self.repo
            .save_index(
                &IndexFile {
                    packs: vec![fp.index],
                    supersedes: Vec::new(),
                },
                WriteSync::Now,
            )
            .unwrap();
        let manifest = Manifest {
            time_ns: 1,
            host: "forge".into(),
            paths: vec!["/".into()],
            tags: Vec::new(),
            parent: None,
            tree,
            user: "root".into(),
            program: "forge".into(),
            summary: Summary::default(),
            warnings: Vec::new(),
            copied_from: None,
            original: None,
        };
        self.repo
            .save_snapshot(&manifest, WriteSync::Now)
            .unwrap()
            .to_hex()
    }
}

fn node(name: &[u8]) -> Node {
    Node {
        mode: 0o100644,
        mtime_ns: 1_000_000_000,
        ..Node::new(name, NodeKind::File)
    }
}

fn symlink_node(name: &[u8], to: &Path) -> Node {
    Node {
        kind: NodeKind::Symlink,
        mode: 0o120777,
        target: Some(to.as_os_str().as_encoded_bytes().to_vec()),
        ..node(name)
    }
}

/// Everything under `dir`: path -> kind, mode, owner, content.
fn listing(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for p in vouch_chaos::files_below(dir)
        .into_iter()
        .chain(dirs_below(dir))
    {
        let m = fs::symlink_metadata(&p).unwrap();
        let content = if m.is_file() {
            blake3::hash(&fs::read(&p).unwrap()).to_hex().to_string()
        } else if m.file_type().is_symlink() {
            fs::read_link(&p).unwrap().display().to_string()
        } else {
            String::new()
        };
        out.insert(
            p.display().to_string(),
            format!(
                "mode={:o} uid={} ino={} nlink={} {content}",
                m.mode(),
                m.uid(),
                m.ino(),
                m.nlink()
            ),
        );
    }
    out
}

fn dirs_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if let Ok(rd) = fs::read_dir(&out[i]) {
            for e in rd.flatten() {
                let p = e.path();
                let m = fs::symlink_metadata(&p).unwrap();
                if m.is_dir() {
                    out.push(p);
                } else if !m.is_file() {
                    // Symlinks and specials are listed as well.
                    out.push(p);
                }
            }
        }
        i += 1;
    }
    out.retain(|p| {
        fs::symlink_metadata(p)
            .map(|m| !m.is_file())
            .unwrap_or(false)
    });
    out
}

/// A scratch area: a repository, an outside directory with a victim file
/// and a victim directory, and a restore target three levels down.
struct Scene {
    env: Env,
    outside: PathBuf,
    target: PathBuf,
}

impl Scene {
    fn new() -> Scene {
        let env = Env::new();
        env.init();
        let outside = env.path("outside");
        fs::create_dir_all(outside.join("etc")).unwrap();
        fs::write(outside.join("victim"), b"victim\n").unwrap();
        fs::set_permissions(outside.join("victim"), fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(outside.join("etc/passwd"), b"root:x:0:0\n").unwrap();
        let target = env.path("t/a/b");
        Scene {
            env,
            outside,
            target,
        }
    }

    fn forge(&self) -> Forge {
        Forge::new(&self.env)
    }

    /// Restores `snap` (as root, like an admin would) and asserts that it
    /// fails as damage, names `expect`, and leaves the outside untouched;
    /// then that verify reports damage too.
    fn assert_refused(&self, snap: &str, expect: &str) {
        let before = listing(&self.outside);
        let out = self
            .env
            .run(&["restore", snap, "--target", self.target.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let after = listing(&self.outside);
        assert_eq!(before, after, "the outside changed; restore said: {stderr}");
        assert!(
            !self.env.path("t/a").join("pwned").exists() && !self.env.path("pwned").exists(),
            "something escaped: {stderr}"
        );
        assert_eq!(
            out.status.code(),
            Some(vouch::exit_code::DAMAGED),
            "restore of a malicious snapshot: {stderr}"
        );
        assert!(stderr.contains(expect), "{expect:?} not in {stderr}");
        let v = self.env.run(&["verify", "--json"]);
        assert_eq!(v.status.code(), Some(vouch::exit_code::DAMAGED), "verify");
        let report = summary_of(&String::from_utf8_lossy(&v.stdout));
        let damage = report["report"]["damage"].to_string();
        assert!(damage.contains(expect), "{expect:?} not in {damage}");
    }
}

#[test]
fn traversal_names_are_damage_and_write_nothing_outside() {
    let s = Scene::new();
    let mut f = s.forge();
    // target t/a/b: four levels up is the scratch directory.
    let pwned = f.file(b"../../../outside/pwned", 0o644, b"* * * * * root evil\n");
    let snap = f.commit(vec![pwned]);
    s.assert_refused(&snap, "a name with a /");
    assert!(!s.outside.join("pwned").exists());
}

#[test]
fn absolute_names_are_damage() {
    let s = Scene::new();
    let mut f = s.forge();
    let name = s.outside.join("abs");
    let abs = f.file(name.as_os_str().as_encoded_bytes(), 0o644, b"abs\n");
    let snap = f.commit(vec![abs]);
    s.assert_refused(&snap, "a name with a /");
    assert!(!s.outside.join("abs").exists());
}

#[test]
fn dot_dotdot_empty_nul_and_slash_names_are_damage() {
    for (name, why) in [
        (&b"."[..], "a name that is . or .."),
        (b"..", "a name that is . or .."),
        (b"", "an empty name"),
        (b"nul\0byte", "a name with a NUL byte"),
        (b"sub/dir", "a name with a /"),
    ] {
        let s = Scene::new();
        let mut f = s.forge();
        let inner = f.file(b"x", 0o644, b"x");
        let bad = f.dir(name, vec![inner]);
        let ok = f.file(b"zz-fine", 0o644, b"fine");
        // Nested one level: the check holds for every tree, not only the root.
        let top = f.dir(b"top", vec![bad, ok]);
        let snap = f.commit(vec![top]);
        s.assert_refused(&snap, why);
    }
}

/// File `x` (setuid, world-writable) then Symlink `x` -> victim: the old
/// restore chmod'ed the victim through the symlink.
#[test]
fn duplicate_names_are_damage_and_no_chmod_goes_through_a_symlink() {
    let s = Scene::new();
    let mut f = s.forge();
    let file = f.file(b"x", 0o4777, b"payload");
    let link = symlink_node(b"x", &s.outside.join("victim"));
    let snap = f.commit(vec![file, link]);
    s.assert_refused(&snap, "twice");
    let mode = fs::metadata(s.outside.join("victim")).unwrap().mode();
    assert_eq!(mode & 0o7777, 0o600);
}

/// Dir `d` with `passwd`, Symlink `d` -> outside/etc, and the hard-link
/// group `a`, `d/passwd`: the old restore unlinked outside/etc/passwd and
/// linked the attacker's file in its place.
#[test]
fn dir_and_symlink_of_one_name_cannot_redirect_a_hard_link() {
    let s = Scene::new();
    let mut f = s.forge();
    let mut a = f.file(b"a", 0o644, b"evil::0:0\n");
    a.links = 2;
    a.inode = 42;
    a.device = 7;
    let mut passwd = a.clone();
    passwd.name = b"passwd".to_vec();
    let d = f.dir(b"d", vec![passwd]);
    let link = symlink_node(b"d", &s.outside.join("etc"));
    let snap = f.commit(vec![a, d, link]);
    s.assert_refused(&snap, "twice");
    assert_eq!(
        fs::read(s.outside.join("etc/passwd")).unwrap(),
        b"root:x:0:0\n"
    );
}

/// Names out of order are damage (the backup writes them sorted by bytes):
/// a symlink `a` -> outside, then a directory `a` whose file is written
/// through it, put in the "wrong" order.
#[test]
fn unsorted_names_are_damage() {
    let s = Scene::new();
    let mut f = s.forge();
    let inner = f.file(b"planted", 0o644, b"through the link");
    let d = f.dir(b"b", vec![inner]);
    let link = symlink_node(b"a", &s.outside);
    let snap = f.commit(vec![d, link]);
    s.assert_refused(&snap, "out of order");
    assert!(!s.outside.join("planted").exists());
}

/// A symlink already in an `--overwrite` target is replaced, never written
/// through: the old restore opened `T/f` (a symlink to the victim) and
/// wrote the snapshot's `f` into the victim.
#[test]
fn overwrite_never_writes_through_a_symlink_in_the_target() {
    let s = Scene::new();
    let mut f = s.forge();
    let file = f.file(b"f", 0o644, b"snapshot content");
    let inner = f.file(b"g", 0o644, b"inner");
    let d = f.dir(b"d", vec![inner]);
    let snap = f.commit(vec![d, file]);
    fs::create_dir_all(&s.target).unwrap();
    symlink(s.outside.join("victim"), s.target.join("f")).unwrap();
    symlink(s.outside.join("etc"), s.target.join("d")).unwrap();
    let before = listing(&s.outside);
    s.env.ok(&[
        "restore",
        &snap,
        "--target",
        s.target.to_str().unwrap(),
        "--overwrite",
        "--verify",
    ]);
    assert_eq!(before, listing(&s.outside));
    assert_eq!(fs::read(s.target.join("f")).unwrap(), b"snapshot content");
    assert!(fs::symlink_metadata(s.target.join("d")).unwrap().is_dir());
    assert_eq!(fs::read(s.target.join("d/g")).unwrap(), b"inner");
}

/// Finding 16: two nodes claim one `(device, inode)` but hold different
/// content. Each is restored with its own content, and `--verify` checks
/// every path, linked ones included.
#[test]
fn hard_link_group_with_different_content_restores_both_contents() {
    let s = Scene::new();
    let mut f = s.forge();
    let mut one = f.file(b"one", 0o644, b"first content");
    let mut two = f.file(b"two", 0o644, b"second, different content");
    for n in [&mut one, &mut two] {
        n.links = 2;
        n.device = 9;
        n.inode = 99;
    }
    // And a genuine pair, which stays one inode.
    let mut x = f.file(b"x", 0o644, b"linked");
    x.links = 2;
    x.device = 9;
    x.inode = 100;
    let mut y = x.clone();
    y.name = b"y".to_vec();
    let snap = f.commit(vec![one, two, x, y]);
    let out = s.env.ok(&[
        "restore",
        &snap,
        "--target",
        s.target.to_str().unwrap(),
        "--verify",
        "--json",
    ]);
    let t = &s.target;
    assert_eq!(fs::read(t.join("one")).unwrap(), b"first content");
    assert_eq!(
        fs::read(t.join("two")).unwrap(),
        b"second, different content"
    );
    let (mx, my) = (
        fs::metadata(t.join("x")).unwrap(),
        fs::metadata(t.join("y")).unwrap(),
    );
    assert_eq!(mx.ino(), my.ino(), "a true hard-link pair stays linked");
    assert_ne!(
        fs::metadata(t.join("one")).unwrap().ino(),
        fs::metadata(t.join("two")).unwrap().ino()
    );
    let v = summary_of(&out);
    assert_eq!(v["summary"]["files_verified"], 4, "{v}");
    // Verify calls the inconsistent group out.
    let out = s.env.run(&["verify", "--json"]);
    assert_eq!(out.status.code(), Some(vouch::exit_code::DAMAGED));
    assert!(String::from_utf8_lossy(&out.stdout).contains("hard-linked"));
}

/// Verify checks that extents add up to the size and match their blobs.
#[test]
fn verify_reports_extents_that_do_not_match_sizes_or_blobs() {
    let s = Scene::new();
    let mut f = s.forge();
    let mut short = f.file(b"short", 0o644, b"0123456789");
    short.size = 4;
    let mut long = f.file(b"wrong-extent", 0o644, b"abc");
    long.content[0].length = 30;
    long.size = 30;
    let snap = f.commit(vec![short, long]);
    let out = s.env.run(&["verify", "--json"]);
    assert_eq!(out.status.code(), Some(vouch::exit_code::DAMAGED));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("the size is 4"), "{text}");
    assert!(text.contains("names blob"), "{text}");
    let out = s
        .env
        .run(&["restore", &snap, "--target", s.target.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(vouch::exit_code::DAMAGED));
}

/// Finding 5: `cp -al`-style trees share inodes with the target. A restore
/// with `--overwrite` replaces files by rename, so the other tree keeps its
/// content, and two target files linked to each other become two files.
#[test]
fn overwrite_does_not_change_files_hard_linked_from_elsewhere() {
    let env = Env::new();
    env.init();
    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"version one").unwrap();
    fs::write(src.join("g"), b"gee").unwrap();
    env.backup(&[&src]);
    let t = env.path("t");
    let spec = format!("latest:{}", src.display());
    env.ok(&["restore", &spec, "--target", t.to_str().unwrap()]);
    // cp -al t t.prev
    let prev = env.path("t.prev");
    fs::create_dir_all(&prev).unwrap();
    fs::hard_link(t.join("f"), prev.join("f")).unwrap();
    fs::hard_link(t.join("g"), prev.join("g")).unwrap();
    // And t/g becomes a link to t/f: two snapshot files, one inode.
    fs::remove_file(t.join("g")).unwrap();
    fs::hard_link(t.join("f"), t.join("g")).unwrap();

    fs::write(src.join("f"), b"version two, longer").unwrap();
    env.backup(&[&src]);
    env.ok(&[
        "restore",
        &spec,
        "--target",
        t.to_str().unwrap(),
        "--overwrite",
        "--verify",
    ]);
    assert_eq!(fs::read(t.join("f")).unwrap(), b"version two, longer");
    assert_eq!(fs::read(t.join("g")).unwrap(), b"gee");
    assert_eq!(fs::read(prev.join("f")).unwrap(), b"version one");
    assert_eq!(fs::read(prev.join("g")).unwrap(), b"gee");
    assert_ne!(
        fs::metadata(t.join("f")).unwrap().ino(),
        fs::metadata(t.join("g")).unwrap().ino()
    );
}

/// A snapshot entry named like the resume marker at the top is skipped with
/// a warning; the rest restores.
#[test]
fn an_entry_named_like_the_marker_does_not_collide() {
    let s = Scene::new();
    let mut f = s.forge();
    let m = f.file(b".vouch-restore-in-progress", 0o644, b"not a marker");
    let other = f.file(b"other", 0o644, b"other");
    let snap = f.commit(vec![m, other]);
    let out = s.env.ok(&[
        "restore",
        &snap,
        "--target",
        s.target.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.contains("reserved for the restore marker"), "{out}");
    assert_eq!(fs::read(s.target.join("other")).unwrap(), b"other");
    assert!(!s.target.join(".vouch-restore-in-progress").exists());
}

/// Finding 18: a tree that names the same subtree twice, 64 levels deep,
/// expands to 2^64 entries. Restore and ls refuse it as damage at once
/// instead of running out of memory or time.
#[test]
fn a_crafted_dag_is_refused_not_expanded() {
    let s = Scene::new();
    let mut f = s.forge();
    let mut level = vec![f.file(b"leaf", 0o644, b"leaf")];
    for _ in 0..64 {
        let a = f.dir(b"a", level.clone());
        let b = f.dir(b"b", level);
        level = vec![a, b];
    }
    let snap = f.commit(level);
    let started = std::time::Instant::now();
    let out = s
        .env
        .run(&["restore", &snap, "--target", s.target.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(vouch::exit_code::DAMAGED));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expand"));
    assert!(started.elapsed().as_secs() < 60);
}
