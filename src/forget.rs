//! Forget: applies keep rules to the snapshots of each group (same host and
//! paths) and deletes the manifests of those not kept. Data stays until
//! `prune`.

use std::collections::BTreeMap;

use serde::Serialize;
use vouch_events::retention::{apply_retention, KeepPolicy, RetentionCandidate};

use crate::error::{Error, Result};
use crate::format::Manifest;
use crate::id::SnapshotId;

use crate::repo::Repository;

/// What the keep rules see: which snapshots, and how they are grouped.
#[derive(Clone, Debug)]
pub struct ForgetScope {
    /// Only snapshots of one of these hosts (none: every host).
    pub hosts: Vec<String>,
    /// Only snapshots that have every tag of at least one of these lists
    /// (none: any tags).
    pub tags: Vec<Vec<String>>,
    /// Only snapshots whose sources include every one of these paths.
    pub paths: Vec<String>,
    /// Group by host.
    pub by_host: bool,
    /// Group by the set of paths.
    pub by_paths: bool,
    /// Group by the set of tags.
    pub by_tags: bool,
}

impl Default for ForgetScope {
    /// Every snapshot, grouped by host and paths.
    fn default() -> Self {
        ForgetScope {
            hosts: Vec::new(),
            tags: Vec::new(),
            paths: Vec::new(),
            by_host: true,
            by_paths: true,
            by_tags: false,
        }
    }
}

impl ForgetScope {
    /// Reads a `--group-by` value: a comma-separated subset of `host`,
    /// `paths` and `tags`, or empty for one group of everything.
    pub fn set_group_by(&mut self, spec: &str) -> Result<()> {
        self.by_host = false;
        self.by_paths = false;
        self.by_tags = false;
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "host" => self.by_host = true,
                "paths" | "path" => self.by_paths = true,
                "tags" | "tag" => self.by_tags = true,
                other => {
                    return Err(Error::InvalidArgument(format!(
                        "--group-by {other:?}: a comma-separated list of host, paths and tags (or \"\" for no grouping)"
                    )))
                }
            }
        }
        Ok(())
    }

    fn includes(&self, m: &Manifest) -> bool {
        (self.hosts.is_empty() || self.hosts.contains(&m.host))
            && (self.tags.is_empty()
                || self
                    .tags
                    .iter()
                    .any(|all| all.iter().all(|t| m.tags.contains(t))))
            && self.paths.iter().all(|p| m.paths.contains(p))
    }

    fn key(&self, m: &Manifest) -> GroupKey {
        let mut tags = m.tags.clone();
        tags.sort();
        tags.dedup();
        (
            if self.by_host {
                m.host.clone()
            } else {
                String::new()
            },
            if self.by_paths {
                m.paths.clone()
            } else {
                Vec::new()
            },
            if self.by_tags { tags } else { Vec::new() },
        )
    }
}

/// A group's host, paths and tags (empty when not grouped by them).
type GroupKey = (String, Vec<String>, Vec<String>);

/// The decision for one snapshot.
#[derive(Clone, Debug, Serialize)]
pub struct ForgetDecision {
    /// Snapshot id.
    pub snapshot: String,
    /// When it was taken (RFC 3339).
    pub time: String,
    /// Kept or not.
    pub keep: bool,
    /// Why it is kept (empty when removed).
    pub reasons: Vec<String>,
}

/// Decisions for one group.
#[derive(Clone, Debug, Serialize)]
pub struct ForgetGroup {
    /// Host of the group (empty when not grouped by host).
    pub host: String,
    /// Paths of the group (empty when not grouped by paths).
    pub paths: Vec<String>,
    /// Tags of the group (empty when not grouped by tags).
    pub tags: Vec<String>,
    /// Decisions, newest first.
    pub decisions: Vec<ForgetDecision>,
}

/// Applies `policy` to each group of the snapshots in `scope`; deletes
/// unless `dry_run`. Snapshots outside the scope are never touched.
pub fn forget(
    repo: &Repository,
    policy: &KeepPolicy,
    scope: &ForgetScope,
    dry_run: bool,
    now_ns: i64,
) -> Result<Vec<ForgetGroup>> {
    if policy.is_empty() {
        return Err(Error::InvalidArgument(
            "no keep rule given: refusing to forget every snapshot (give --keep-* rules, or snapshot ids)".into(),
        ));
    }
    let _guard = if dry_run {
        None
    } else {
        Some(repo.lock(false, "forget")?)
    };
    let mut locks = repo.point_locks()?;
    let mut groups: BTreeMap<GroupKey, Vec<(SnapshotId, Manifest)>> = BTreeMap::new();
    for (id, m) in repo.list_snapshots()? {
        if scope.includes(&m) {
            groups.entry(scope.key(&m)).or_default().push((id, m));
        }
    }
    let mut out = Vec::new();
    for ((host, paths, tags), snaps) in groups {
        let candidates: Vec<RetentionCandidate<SnapshotId>> = snaps
            .iter()
            .map(|(id, m)| RetentionCandidate {
                id: *id,
                time_unix_ns: m.time_ns,
                tags: m.tags.clone(),
            })
            .collect();
        let decisions = apply_retention(policy, &candidates, now_ns);
        let mut group = ForgetGroup {
            host,
            paths,
            tags,
            decisions: Vec::new(),
        };
        for d in decisions {
            // A locked snapshot stays, whatever the rules say.
            let lock = locks.in_force(&d.id, now_ns);
            let keep = d.keep || lock.is_some();
            let mut reasons: Vec<String> = d.reasons.iter().map(|r| r.to_string()).collect();
            if let Some(until) = lock {
                reasons.push(format!("locked until {}", crate::util::rfc3339(until)));
            }
            let time = snaps
                .iter()
                .find(|(id, _)| *id == d.id)
                .map(|(_, m)| crate::util::rfc3339(m.time_ns))
                .unwrap_or_default();
            if !keep && !dry_run {
                repo.delete_snapshot_checked(&d.id, &mut locks)?;
                crate::failpoint::crash("forget-one-deleted");
            }
            group.decisions.push(ForgetDecision {
                snapshot: d.id.to_hex(),
                time,
                keep,
                reasons,
            });
        }
        out.push(group);
    }
    if !dry_run {
        // Durable before anyone (prune) relies on the snapshot being gone.
        repo.backend()
            .sync_deletes(crate::backend::FileKind::Snapshot)?;
    }
    Ok(out)
}

/// Deletes the named snapshots.
pub fn forget_ids(repo: &Repository, specs: &[String], dry_run: bool) -> Result<Vec<SnapshotId>> {
    let _guard = if dry_run {
        None
    } else {
        Some(repo.lock(false, "forget")?)
    };
    let mut ids = Vec::new();
    for s in specs {
        let (id, _) = repo.find_snapshot(s)?;
        ids.push(id);
    }
    // All or nothing: a locked one among them stops the command before
    // anything is deleted.
    let mut locks = repo.point_locks()?;
    for id in &ids {
        locks.check_deletable(id, crate::util::now_ns())?;
    }
    if !dry_run {
        for id in &ids {
            repo.delete_snapshot_checked(id, &mut locks)?;
            crate::failpoint::crash("forget-one-deleted");
        }
        repo.backend()
            .sync_deletes(crate::backend::FileKind::Snapshot)?;
    }
    Ok(ids)
}
