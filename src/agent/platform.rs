//! The agent's platform layer: what differs between the operating systems
//! an agent runs on. Linux is implemented here; Windows code stays behind
//! `cfg(windows)` and is not built or tested on the machines this project
//! is built on (no Windows standard library there), so no Windows agent
//! is claimed to work (docs/agents.md, "Platform layer").

/// What the agent needs from its operating system.
pub trait Platform: Send + Sync {
    /// `linux`, `windows`.
    fn os_name(&self) -> &'static str;
    /// The host's name, as registration records it.
    fn hostname(&self) -> String;
    /// Freezes `path` before it is read (a btrfs snapshot; LVM and VSS
    /// later): the frozen copy to read instead, removed when dropped.
    /// `Ok(None)`: nothing to freeze it with, read it live. `Err`: it could
    /// have been frozen but was not (the caller reads live and says so).
    fn freeze(&self, path: &std::path::Path) -> Result<Option<Box<dyn Frozen>>, String>;
}

/// A frozen, read-only copy of a source, removed when dropped.
pub trait Frozen: Send {
    /// Where the source's contents are read.
    fn read_path(&self) -> &std::path::Path;
    /// What froze it, for the log (`btrfs snapshot /srv/.vouch-snapshot`).
    fn describe(&self) -> String;
    /// Paths inside the copy (as read) that the copy adds and the backup
    /// must skip.
    fn skip(&self) -> Vec<std::path::PathBuf>;
}

/// Linux: metadata through the Unix calls the engine already uses; a
/// source on btrfs is read from a read-only snapshot of its subvolume
/// (`super::btrfs`); other file systems (LVM snapshots are not taken
/// yet) are read live.
#[cfg(unix)]
pub struct Linux;

#[cfg(unix)]
impl Platform for Linux {
    fn os_name(&self) -> &'static str {
        if cfg!(target_os = "linux") {
            "linux"
        } else {
            "unix"
        }
    }

    fn hostname(&self) -> String {
        crate::util::host_name()
    }

    fn freeze(&self, path: &std::path::Path) -> Result<Option<Box<dyn Frozen>>, String> {
        Ok(super::btrfs::freeze(path)?.map(|s| Box::new(s) as Box<dyn Frozen>))
    }
}

/// The platform this agent runs on.
#[cfg(unix)]
pub fn current() -> &'static dyn Platform {
    &Linux
}

#[cfg(windows)]
compile_error!(
    "the Windows agent is not built yet: its platform layer (VSS, ACLs, service installation) \
     has no implementation, and none can be tested on the machines this project is built on"
);
