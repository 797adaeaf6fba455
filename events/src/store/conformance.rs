//! One conformance suite every [`ReadStore`] passes. `reopen` must return a
//! handle on the same stored content (a fresh open of the same path).

use crate::store::ReadStore;

pub(crate) fn run<S: ReadStore>(mut reopen: impl FnMut() -> S) {
    let s = reopen();
    assert_eq!(s.last_applied_seq().expect("seq"), 0);
    assert_eq!(s.load_snapshot().expect("snap"), None);

    s.store(7, b"snap-7").expect("store");
    s.flush().expect("flush");
    drop(s);

    let s = reopen();
    assert_eq!(s.last_applied_seq().expect("seq"), 7);
    let snap = s.load_snapshot().expect("snap").expect("some");
    assert_eq!((snap.seq, snap.bytes.as_slice()), (7, &b"snap-7"[..]));

    // A later state replaces the snapshot and its tag together.
    s.store(9, b"snap-9, longer than the first").expect("store");
    s.flush().expect("flush");
    drop(s);
    let s = reopen();
    assert_eq!(s.last_applied_seq().expect("seq"), 9);
    let snap = s.load_snapshot().expect("snap").expect("some");
    assert_eq!(
        (snap.seq, snap.bytes.as_slice()),
        (9, &b"snap-9, longer than the first"[..])
    );

    // An empty snapshot is a snapshot (not "none").
    s.store(10, b"").expect("store");
    let snap = s.load_snapshot().expect("snap").expect("some");
    assert_eq!((snap.seq, snap.bytes.len()), (10, 0));
}

#[test]
fn memory_store_conforms() {
    let store = crate::store::MemoryStore::new();
    run(|| store.clone());
}

#[test]
fn sled_store_conforms() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store");
    run(|| crate::store::SledStore::open(&path).expect("open"));
}
