//! Which plan sources the service may back up (security review finding 1).
//!
//! The service runs as root so that it can read what it backs up; a plan's
//! source therefore decides which of the host's files any holder of a
//! token that may write plans gets a copy of. The administrator, not the
//! token holder, decides where sources may lie:
//!
//! - **Allowed roots.** A source must lie at or below one of the roots the
//!   configuration allows (`[sources] allow`; `/home` and `/srv` when the
//!   configuration says nothing, so that a fresh install never hands out
//!   `/etc` or `/root`).
//! - **Protected paths.** A source must neither be, contain nor lie inside a
//!   path the service itself depends on: its data directory (tokens, event
//!   log, default repository, restore-test sandbox), its configuration file,
//!   its TLS certificate and key, the passphrase files and every repository.
//! - **Resolved, not spelled.** Both checks compare resolved paths
//!   (`realpath` of the longest existing ancestor, the rest appended), so a
//!   symlink (`/home/evil/etc -> /etc`) or `/proc/self/root/...` does not
//!   reach past them. Sources are checked when a plan is created or changed
//!   and again when each backup starts, so a symlink planted later is caught
//!   too.
//!
//! `agent:<name>:<path>` sources name a path on the agent's own host: the
//! service never resolves or backs them up itself.

use std::fmt;
use std::path::{Path, PathBuf};

/// The roots allowed when the configuration names none.
pub const DEFAULT_SOURCE_ROOTS: [&str; 2] = ["/home", "/srv"];

/// A path no source may overlap, and what it is (for the error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Protected {
    /// What the path is: "the data directory", "the TLS key", ...
    pub what: String,
    /// The path, resolved when the policy is built.
    pub path: PathBuf,
}

/// Why a source is refused. The messages say what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SourceRefusal {
    /// Not an absolute path of plain components.
    #[error("{given:?} is not a plain absolute path (no `.`, `..` or empty components)")]
    NotPlain {
        /// The source as given.
        given: String,
    },
    /// Outside every allowed root.
    #[error(
        "{given:?} (resolved: {}) lies outside the source roots the administrator allows ({}); an administrator adds a root to `[sources] allow` in the configuration",
        resolved.display(),
        allowed
    )]
    NotAllowed {
        /// The source as given.
        given: String,
        /// The source resolved.
        resolved: PathBuf,
        /// The allowed roots, for the message.
        allowed: RootList,
    },
    /// Is, contains or lies inside a protected path.
    #[error(
        "{given:?} (resolved: {}) overlaps {what} ({}): the service never backs up its own secrets, data or repositories; choose a source that neither contains nor lies inside it",
        resolved.display(),
        protected.display()
    )]
    Overlaps {
        /// The source as given.
        given: String,
        /// The source resolved.
        resolved: PathBuf,
        /// What it overlaps.
        what: String,
        /// The protected path.
        protected: PathBuf,
    },
    /// A `pve:` source names a cluster the configuration does not have.
    #[error(
        "{given:?} names the Proxmox VE cluster {cluster:?}, which the configuration does not have (configured: {known}); an administrator adds it as a [[proxmox]] section"
    )]
    UnknownCluster {
        /// The source as given.
        given: String,
        /// The cluster it names.
        cluster: String,
        /// The configured clusters, for the message.
        known: String,
    },
    /// A `pve:` source spelled wrong.
    #[error("{given:?} is not pve:CLUSTER/qemu/VMID or pve:CLUSTER/lxc/VMID")]
    NotAGuest {
        /// The source as given.
        given: String,
    },
    /// An `agent:` source reached the service's own backup.
    #[error(
        "{given:?} is backed up by its agent on the agent's host, never by the service itself"
    )]
    AgentSource {
        /// The source as given.
        given: String,
    },
}

/// The allowed roots, printed as a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootList(pub Vec<PathBuf>);

impl fmt::Display for RootList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", r.display())?;
        }
        Ok(())
    }
}

/// The administrator's rules over plan sources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourcePolicy {
    allow: Vec<PathBuf>,
    protected: Vec<Protected>,
    clusters: Option<Vec<String>>,
}

/// The agent and the path on its host of an `agent:NAME:/path` source;
/// `None` for any other source.
pub fn agent_source(source: &str) -> Option<(&str, &str)> {
    let (name, path) = source.strip_prefix("agent:")?.split_once(':')?;
    (!name.is_empty() && path.starts_with('/')).then_some((name, path))
}

/// The dump directory or archive of a `vzdump:/path` source (Proxmox VE
/// guests from their vzdump archives on this host); `None` for any other
/// source.
pub fn vzdump_source(source: &str) -> Option<&str> {
    source
        .strip_prefix("vzdump:")
        .filter(|p| p.starts_with('/'))
}

/// A Proxmox VE guest a configured cluster backs up through its API:
/// `pve:CLUSTER/qemu/VMID` or `pve:CLUSTER/lxc/VMID`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PveSource<'a> {
    /// The cluster's name in the configuration (`[[proxmox]] name`).
    pub cluster: &'a str,
    /// `qemu` or `lxc`.
    pub kind: &'a str,
    /// The guest's id (100 to 999999999, as Proxmox VE allows).
    pub vmid: u32,
}

/// The cluster, type and guest of a `pve:` source; `None` for any other
/// source, or one spelled wrong.
pub fn pve_source(source: &str) -> Option<PveSource<'_>> {
    let rest = source.strip_prefix("pve:")?;
    let mut parts = rest.split('/');
    let (cluster, kind, vmid) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !is_cluster_name(cluster) || !["qemu", "lxc"].contains(&kind) {
        return None;
    }
    if vmid.starts_with('0') || !vmid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let vmid: u32 = vmid
        .parse()
        .ok()
        .filter(|v| (100..=999_999_999).contains(v))?;
    Some(PveSource {
        cluster,
        kind,
        vmid,
    })
}

/// A cluster's name: 1-64 of `A-Z a-z 0-9 . _ -`.
pub fn is_cluster_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// The repository an agent's backups go into: its own (`agent-NAME`),
/// made when it registers (see `docs/agents.md`).
pub fn agent_repository(agent: &str) -> String {
    format!("agent-{agent}")
}

impl SourcePolicy {
    /// Sources below `allow` (resolved now), overlapping none of
    /// `protected` (resolved now).
    pub fn new(allow: &[PathBuf], protected: Vec<Protected>) -> Self {
        SourcePolicy {
            allow: allow.iter().map(|p| resolve(p)).collect(),
            protected: protected
                .into_iter()
                .map(|p| Protected {
                    path: resolve(&p.path),
                    what: p.what,
                })
                .collect(),
            clusters: Some(Vec::new()),
        }
    }

    /// `pve:` sources may name these clusters (the `[[proxmox]]` sections).
    pub fn with_clusters(mut self, clusters: Vec<String>) -> Self {
        self.clusters = Some(clusters);
        self
    }

    /// Any source at all: for library users and tests that run no service.
    pub fn unrestricted() -> Self {
        SourcePolicy {
            allow: vec![PathBuf::from("/")],
            protected: Vec::new(),
            clusters: None,
        }
    }

    /// The allowed roots, resolved.
    pub fn allowed_roots(&self) -> &[PathBuf] {
        &self.allow
    }

    /// The protected paths, resolved.
    pub fn protected(&self) -> &[Protected] {
        &self.protected
    }

    /// Checks a plan's source as the API receives it: a path on this host
    /// must pass [`SourcePolicy::check_local`]; an `agent:` source names a
    /// path on another host and is left to its agent.
    pub fn check_plan_source(&self, source: &str) -> Result<(), SourceRefusal> {
        if source.starts_with("agent:") {
            return Ok(());
        }
        if source.starts_with("pve:") {
            return self.check_guest(source).map(|_| ());
        }
        // A dump storage is judged by its path, as any local source.
        self.check_local(vzdump_source(source).unwrap_or(source))
            .map(|_| ())
    }

    /// Checks a `pve:` source: well spelled, naming a configured cluster
    /// (any cluster when the policy is unrestricted).
    pub fn check_guest<'a>(&self, source: &'a str) -> Result<PveSource<'a>, SourceRefusal> {
        let guest = pve_source(source).ok_or_else(|| SourceRefusal::NotAGuest {
            given: source.to_owned(),
        })?;
        match &self.clusters {
            Some(known) if !known.iter().any(|c| c == guest.cluster) => {
                Err(SourceRefusal::UnknownCluster {
                    given: source.to_owned(),
                    cluster: guest.cluster.to_owned(),
                    known: if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    },
                })
            }
            _ => Ok(guest),
        }
    }

    /// Checks a source the service itself is about to back up and returns
    /// it resolved.
    pub fn check_local(&self, source: &str) -> Result<PathBuf, SourceRefusal> {
        if source.starts_with("agent:") {
            return Err(SourceRefusal::AgentSource {
                given: source.to_owned(),
            });
        }
        let path = Path::new(source);
        // `Path::components` would drop a `.` and merge `//`: judge the
        // spelling itself (one trailing `/` is allowed).
        let inner = source
            .strip_prefix('/')
            .map(|s| s.strip_suffix('/').unwrap_or(s));
        let plain = match inner {
            _ if source == "/" => true,
            Some(inner) => inner
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != ".."),
            None => false,
        };
        if !plain {
            return Err(SourceRefusal::NotPlain {
                given: source.to_owned(),
            });
        }
        let resolved = resolve(path);
        if !self.allow.iter().any(|root| resolved.starts_with(root)) {
            return Err(SourceRefusal::NotAllowed {
                given: source.to_owned(),
                resolved,
                allowed: RootList(self.allow.clone()),
            });
        }
        if let Some(p) = self
            .protected
            .iter()
            .find(|p| resolved.starts_with(&p.path) || p.path.starts_with(&resolved))
        {
            return Err(SourceRefusal::Overlaps {
                given: source.to_owned(),
                resolved,
                what: p.what.clone(),
                protected: p.path.clone(),
            });
        }
        Ok(resolved)
    }
}

/// `path` as the kernel would reach it: the longest existing ancestor
/// resolved (`realpath`: symlinks, `.` and `..`), the components below it
/// appended as given. A path not yet created (a mount point to come, say)
/// is judged by where it would be.
pub fn resolve(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            let mut out = real;
            for name in rest.iter().rev() {
                out.push(name);
            }
            return out;
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                at = parent;
            }
            // Nothing of it exists (a relative path in an empty working
            // directory, say): as given.
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(dir: &Path) -> SourcePolicy {
        SourcePolicy::new(
            &[dir.join("allowed")],
            vec![Protected {
                what: "the data directory".into(),
                path: dir.join("allowed/data"),
            }],
        )
    }

    #[test]
    fn guest_sources_name_a_configured_cluster_and_a_real_vmid() {
        assert_eq!(
            pve_source("pve:pve-1/qemu/101"),
            Some(PveSource {
                cluster: "pve-1",
                kind: "qemu",
                vmid: 101
            })
        );
        assert_eq!(
            pve_source("pve:c/lxc/999999999").map(|g| g.vmid),
            Some(999_999_999)
        );
        for bad in [
            "pve:c/qemu/99",
            "pve:c/qemu/0101",
            "pve:c/qemu/1000000000",
            "pve:c/vm/101",
            "pve:/qemu/101",
            "pve:c/qemu/101/",
            "pve:c/qemu/+101",
            "pve:c d/qemu/101",
        ] {
            assert_eq!(pve_source(bad), None, "{bad}");
        }
        let p = SourcePolicy::new(&[PathBuf::from("/srv")], Vec::new())
            .with_clusters(vec!["pve-1".into()]);
        assert!(p.check_plan_source("pve:pve-1/lxc/200").is_ok());
        let unknown = p.check_plan_source("pve:other/lxc/200").unwrap_err();
        assert!(matches!(unknown, SourceRefusal::UnknownCluster { .. }));
        assert!(unknown.to_string().contains("[[proxmox]]"), "{unknown}");
        assert!(matches!(
            p.check_plan_source("pve:pve-1/lxc/20"),
            Err(SourceRefusal::NotAGuest { .. })
        ));
        // No cluster configured: every `pve:` source is refused.
        let none = SourcePolicy::new(&[PathBuf::from("/srv")], Vec::new());
        assert!(none.check_plan_source("pve:pve-1/qemu/101").is_err());
    }

    #[test]
    fn a_source_must_lie_below_an_allowed_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("allowed/home")).unwrap();
        let p = policy(dir.path());
        let ok = dir.path().join("allowed/home");
        assert!(p.check_local(ok.to_str().unwrap()).is_ok());
        // Not yet existing: judged by where it would be.
        let later = dir.path().join("allowed/mnt/later");
        assert!(p.check_local(later.to_str().unwrap()).is_ok());
        let outside = dir.path().join("elsewhere");
        assert!(matches!(
            p.check_local(outside.to_str().unwrap()),
            Err(SourceRefusal::NotAllowed { .. })
        ));
        // A prefix of the name is not a parent.
        let sibling = dir.path().join("allowed2");
        assert!(matches!(
            p.check_local(sibling.to_str().unwrap()),
            Err(SourceRefusal::NotAllowed { .. })
        ));
    }

    #[test]
    fn a_symlink_does_not_reach_past_the_roots() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("allowed")).unwrap();
        std::fs::create_dir_all(dir.path().join("secret")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), dir.path().join("allowed/link"))
            .unwrap();
        let p = policy(dir.path());
        let via = dir.path().join("allowed/link/inner");
        let e = p.check_local(via.to_str().unwrap()).unwrap_err();
        assert!(
            matches!(&e, SourceRefusal::NotAllowed { resolved, .. } if resolved.starts_with(dir.path().join("secret").canonicalize().unwrap())),
            "{e}"
        );
    }

    #[test]
    fn protected_paths_may_be_neither_contained_nor_entered() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("allowed/data/events")).unwrap();
        let p = policy(dir.path());
        for s in ["allowed", "allowed/data", "allowed/data/events"] {
            let e = p
                .check_local(dir.path().join(s).to_str().unwrap())
                .unwrap_err();
            assert!(
                matches!(&e, SourceRefusal::Overlaps { what, .. } if what == "the data directory"),
                "{s}: {e}"
            );
            assert!(e.to_string().contains("neither contains nor lies inside"));
        }
        // A sibling of the protected path is fine.
        std::fs::create_dir_all(dir.path().join("allowed/database")).unwrap();
        assert!(p
            .check_local(dir.path().join("allowed/database").to_str().unwrap())
            .is_ok());
    }

    #[test]
    fn only_plain_absolute_paths_and_agents_on_their_own_host() {
        let p = SourcePolicy::unrestricted();
        for bad in ["relative", "/a/../etc", "/a/./b", "/a//b", "//", "/a//"] {
            assert!(
                matches!(p.check_local(bad), Err(SourceRefusal::NotPlain { .. })),
                "{bad}"
            );
        }
        assert!(p.check_plan_source("agent:web-1:/etc").is_ok());
        assert!(matches!(
            p.check_local("agent:web-1:/etc"),
            Err(SourceRefusal::AgentSource { .. })
        ));
        assert!(p.check_local("/").is_ok());
    }
}
