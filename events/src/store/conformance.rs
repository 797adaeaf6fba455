//! One conformance suite every [`ReadStore`] passes. `reopen` must return a
//! handle on the same stored content (a fresh open of the same path).

use crate::ids::PlanId;
use crate::projection::PointState;
use crate::store::{PointRow, ReadStore};
use crate::testkit::sid;

fn row(n: u8, plan: Option<&str>, state: PointState, t: i64) -> PointRow {
    PointRow {
        id: sid(n),
        plan: plan.map(PlanId::new),
        state,
        time_unix_ns: t,
    }
}

pub(crate) fn run<S: ReadStore>(mut reopen: impl FnMut() -> S) {
    let s = reopen();
    assert_eq!(s.last_applied_seq().expect("seq"), 0);
    assert_eq!(s.load_snapshot().expect("snap"), None);
    assert!(s
        .points_by_state(PointState::Unverified)
        .expect("q")
        .is_empty());
    assert!(s.points_between(i64::MIN, i64::MAX).expect("q").is_empty());

    let rows = vec![
        row(3, Some("p1"), PointState::Unverified, 30),
        row(1, Some("p1"), PointState::Recoverable, -5),
        row(2, Some("p10"), PointState::Unverified, 10),
        row(4, None, PointState::Corrupt, i64::MIN),
    ];
    s.store(7, b"snap-7", &rows).expect("store");
    s.flush().expect("flush");
    drop(s);

    let s = reopen();
    assert_eq!(s.last_applied_seq().expect("seq"), 7);
    let snap = s.load_snapshot().expect("snap").expect("some");
    assert_eq!((snap.seq, snap.bytes.as_slice()), (7, &b"snap-7"[..]));
    assert_eq!(
        s.points_by_state(PointState::Unverified).expect("q"),
        vec![sid(2), sid(3)]
    );
    assert_eq!(
        s.points_by_state(PointState::Recoverable).expect("q"),
        vec![sid(1)]
    );
    assert!(s
        .points_by_state(PointState::Expired)
        .expect("q")
        .is_empty());
    // "p1" must not match "p10".
    assert_eq!(
        s.points_by_plan(&PlanId::new("p1")).expect("q"),
        vec![sid(1), sid(3)]
    );
    assert_eq!(
        s.points_by_plan(&PlanId::new("p10")).expect("q"),
        vec![sid(2)]
    );
    // Oldest first; negative times sort before positive ones; `to` excluded.
    assert_eq!(
        s.points_between(i64::MIN, 30).expect("q"),
        vec![sid(4), sid(1), sid(2)]
    );
    assert_eq!(
        s.points_between(-5, 31).expect("q"),
        vec![sid(1), sid(2), sid(3)]
    );
    assert!(s.points_between(31, 0).expect("q").is_empty());

    // A later state replaces the indexes entirely.
    let rows = vec![
        row(3, Some("p1"), PointState::Verified, 30),
        row(5, Some("p2"), PointState::Unverified, 50),
    ];
    s.store(9, b"snap-9", &rows).expect("store");
    s.flush().expect("flush");
    drop(s);
    let s = reopen();
    assert_eq!(s.last_applied_seq().expect("seq"), 9);
    assert_eq!(
        s.points_by_state(PointState::Unverified).expect("q"),
        vec![sid(5)]
    );
    assert_eq!(
        s.points_by_state(PointState::Verified).expect("q"),
        vec![sid(3)]
    );
    assert!(s
        .points_by_state(PointState::Recoverable)
        .expect("q")
        .is_empty());
    assert_eq!(
        s.points_by_plan(&PlanId::new("p1")).expect("q"),
        vec![sid(3)]
    );
    assert_eq!(
        s.points_between(i64::MIN, i64::MAX).expect("q"),
        vec![sid(3), sid(5)]
    );
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
