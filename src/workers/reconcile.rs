//! Reconciliation of a repository's manifests with the log's decisions:
//! retention records `point.forgotten` first (the decision), and this job
//! carries it out (deletes the manifests, idempotently), then compares what
//! the repository holds with what the log says is live. A point whose
//! manifest is gone is `point.vanished` (it can never count again); a
//! manifest the log does not know is `point.discovered`.

use std::collections::HashSet;

use vouch_actors::service::{JobFailure, JobOutput};
use vouch_events::{
    Event, PlanId, PointDiscovered, PointVanished, RepositoryId, SnapshotId as PointId,
};

use crate::backend::FileKind;
use crate::error::Result;
use crate::id::SnapshotId;
use crate::repo::Repository;

/// The reason of the `point.vanished` events this job records.
pub const VANISHED_REASON: &str = "reconciliation: manifest missing";

/// What a reconciliation found and did.
#[derive(Debug, Default)]
pub struct Reconciliation {
    /// `point.vanished` and `point.discovered` events.
    pub events: Vec<Event>,
    /// Expired points deleted now or before (their manifest is gone).
    pub deleted: Vec<PointId>,
    /// Expired points whose manifest could not be deleted, with the error;
    /// the decision stays recorded, and the next run tries again.
    pub not_deleted: Vec<(PointId, String)>,
}

impl Reconciliation {
    /// The job's outcome: the events, and a retryable failure (still
    /// carrying them) when a manifest could not be deleted.
    pub fn into_outcome(self) -> std::result::Result<JobOutput, JobFailure> {
        if self.not_deleted.is_empty() {
            return Ok(JobOutput {
                events: self.events,
            });
        }
        let (first, e) = &self.not_deleted[0];
        let mut f = JobFailure::new(
            "delete_failed",
            format!(
                "{} forgotten point(s) could not be deleted, first {}: {e} (check the \
                 repository's permissions and health; the decision is recorded and the \
                 deletion is retried)",
                self.not_deleted.len(),
                first.short()
            ),
            true,
        );
        f.events = self.events;
        Err(f)
    }
}

fn hex_of(p: &PointId) -> String {
    SnapshotId(p.0).to_hex()
}

/// Deletes the manifests of `expired` (a manifest already gone is fine),
/// then lists the repository's manifests: every `live` point whose manifest
/// is gone is `point.vanished`; every manifest in neither `expired` nor
/// `live` is `point.discovered` (its plan read from its `vouch-plan:` tag).
/// Errors are the listing's (nothing is known then); a failed deletion is
/// in [`Reconciliation::not_deleted`].
pub fn reconcile(
    repo: &Repository,
    repository: &RepositoryId,
    expired: &[PointId],
    live: &[PointId],
) -> Result<Reconciliation> {
    let _guard = repo.lock(false, "reconcile")?;
    let mut out = Reconciliation::default();
    for p in expired {
        match repo.delete_snapshot(&SnapshotId(p.0)) {
            Ok(()) => out.deleted.push(*p),
            Err(e) => {
                tracing::warn!(point = %p.short(), error = %e, "could not delete a forgotten point's manifest");
                out.not_deleted.push((*p, e.to_string()));
            }
        }
    }
    if !out.deleted.is_empty() {
        repo.backend().sync_deletes(FileKind::Snapshot)?;
    }
    let listed: HashSet<String> = repo
        .backend()
        .list(FileKind::Snapshot)?
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    for p in live {
        if !listed.contains(&hex_of(p)) {
            tracing::warn!(repository = %repository, point = %p.short(), "a live point's manifest is gone");
            out.events.push(
                PointVanished {
                    point: *p,
                    repository: repository.clone(),
                    reason: VANISHED_REASON.to_owned(),
                }
                .into(),
            );
        }
    }
    let known: HashSet<String> = expired.iter().chain(live).map(hex_of).collect();
    let mut new: Vec<&String> = listed.iter().filter(|n| !known.contains(*n)).collect();
    new.sort();
    for name in new {
        let Ok(id) = SnapshotId::from_hex(name) else {
            continue;
        };
        let m = match repo.load_snapshot(&id) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(snapshot = %id.short(), error = %e, "an unknown manifest does not read; not recorded");
                continue;
            }
        };
        let plan = m
            .tags
            .iter()
            .find_map(|t| t.strip_prefix("vouch-plan:"))
            .map(PlanId::new);
        out.events.push(
            PointDiscovered {
                repository: repository.clone(),
                snapshot: PointId(id.0),
                snapshot_time_unix_ns: m.time_ns,
                plan,
            }
            .into(),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::{Backend, LocalBackend, WriteSync};
    use crate::error::Error;
    use crate::workers::tests::{backup_of, new_repo, source, PW};

    fn point(id: &SnapshotId) -> PointId {
        PointId(id.0)
    }

    fn repo_id() -> RepositoryId {
        RepositoryId::new("main")
    }

    fn types(events: &[Event]) -> Vec<&str> {
        events.iter().map(|e| e.event_type()).collect()
    }

    #[test]
    fn h2_reconcile_deletes_the_expired_idempotently_and_finds_vanished_and_discovered_points() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let repo = new_repo(dir.path());
        let src = source(dir.path(), "src", 2, "a");
        let old = backup_of(&repo, &src, "docs");
        let kept = backup_of(&repo, &src, "docs");
        let gone = backup_of(&repo, &src, "docs");
        let unknown = backup_of(&repo, &src, "other-plan");
        repo.delete_snapshot(&gone)
            .unwrap_or_else(|e| panic!("{e}"));
        let expired = [point(&old)];
        let live = [point(&kept), point(&gone)];
        for round in 0..2 {
            let r = reconcile(&repo, &repo_id(), &expired, &live).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                r.not_deleted.is_empty(),
                "round {round}: {:?}",
                r.not_deleted
            );
            assert_eq!(r.deleted, expired, "round {round}");
            assert_eq!(
                types(&r.events),
                ["point.vanished", "point.discovered"],
                "round {round}"
            );
            match &r.events[0] {
                Event::PointVanished(v) => {
                    assert_eq!(v.point, point(&gone));
                    assert_eq!(v.reason, VANISHED_REASON);
                }
                e => panic!("{e:?}"),
            }
            match &r.events[1] {
                Event::PointDiscovered(d) => {
                    assert_eq!(d.snapshot, point(&unknown));
                    assert_eq!(d.plan, Some(PlanId::new("other-plan")));
                    assert_eq!(d.repository, repo_id());
                }
                e => panic!("{e:?}"),
            }
            assert!(r.into_outcome().is_ok());
        }
        let left: Vec<SnapshotId> = repo
            .list_snapshots()
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert!(!left.contains(&old));
        assert!(left.contains(&kept) && left.contains(&unknown));
    }

    /// A local directory whose deletions fail, as on a read-only mount.
    struct NoDelete(LocalBackend);

    impl Backend for NoDelete {
        fn location(&self) -> String {
            self.0.location()
        }
        fn create(&self) -> Result<()> {
            self.0.create()
        }
        fn exists(&self, kind: FileKind, name: &str) -> Result<bool> {
            self.0.exists(kind, name)
        }
        fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
            self.0.list(kind)
        }
        fn read(&self, kind: FileKind, name: &str) -> Result<Vec<u8>> {
            self.0.read(kind, name)
        }
        fn read_range(
            &self,
            kind: FileKind,
            name: &str,
            offset: u64,
            length: usize,
        ) -> Result<Vec<u8>> {
            self.0.read_range(kind, name, offset, length)
        }
        fn write(&self, kind: FileKind, name: &str, data: &[u8], sync: WriteSync) -> Result<()> {
            self.0.write(kind, name, data, sync)
        }
        fn delete(&self, kind: FileKind, name: &str) -> Result<()> {
            if kind == FileKind::Snapshot {
                return Err(Error::io(
                    format!("deleting {name}"),
                    std::io::Error::from(std::io::ErrorKind::PermissionDenied),
                ));
            }
            self.0.delete(kind, name)
        }
        fn sync_all(&self) -> Result<()> {
            self.0.sync_all()
        }
        fn sync_deletes(&self, kind: FileKind) -> Result<()> {
            self.0.sync_deletes(kind)
        }
        fn modified(&self, kind: FileKind, name: &str) -> Result<Option<std::time::SystemTime>> {
            self.0.modified(kind, name)
        }
        fn remove_temporary(&self) -> Result<usize> {
            self.0.remove_temporary()
        }
    }

    #[test]
    fn h2_a_manifest_that_fails_to_delete_keeps_the_decision_and_fails_retryably() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let repo = new_repo(dir.path());
        let src = source(dir.path(), "src", 2, "a");
        let snaps: Vec<SnapshotId> = (0..3).map(|_| backup_of(&repo, &src, "docs")).collect();
        let failing = Repository::open(
            Arc::new(NoDelete(LocalBackend::new(dir.path().join("repo")))),
            PW,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        // The decision: retention over the failing backend still decides.
        let decided = crate::workers::retention(
            &failing,
            &PlanId::new("docs"),
            &vouch_events::KeepPolicy {
                last: Some(1),
                ..Default::default()
            },
            &[],
            i64::MAX / 2,
            &vouch_actors::UtcOffsets::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(decided.len(), 2);
        let expired: Vec<PointId> = decided.iter().map(|(id, _)| point(id)).collect();
        let r = reconcile(&failing, &repo_id(), &expired, &[point(&snaps[2])])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.not_deleted.len(), 2);
        // Not deleted, and not mistaken for unknown manifests either.
        assert!(r.events.is_empty(), "{:?}", types(&r.events));
        assert_eq!(
            repo.list_snapshots()
                .unwrap_or_else(|e| panic!("{e}"))
                .len(),
            3
        );
        match r.into_outcome() {
            Err(f) => {
                assert_eq!(f.kind, "delete_failed");
                assert!(f.retryable);
            }
            Ok(_) => panic!("a failed deletion reported success"),
        }
    }
}
