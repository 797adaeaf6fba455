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
    /// Prepares a consistent view of `path` before it is read (an LVM or
    /// btrfs snapshot, VSS), returning the path to read instead; `None`
    /// reads `path` itself, live.
    fn snapshot(&self, path: &std::path::Path) -> Option<std::path::PathBuf>;
}

/// Linux: metadata through the Unix calls the engine already uses; live
/// reads (snapshots of LVM and btrfs volumes are not taken yet).
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

    fn snapshot(&self, _path: &std::path::Path) -> Option<std::path::PathBuf> {
        None
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
