//! Where `vouch serve`, `vouch token` and `vouch events` look when neither
//! a flag nor an environment variable says (docs/operations.md, "Where
//! things are"):
//!
//! - **From a checkout** (the binary runs from `DIR/target/<profile>/` and
//!   `DIR/Cargo.toml` exists: `cargo run -- serve`): `./vouch-data`, and no
//!   configuration file, so the README's two commands need nothing else.
//! - **As root** (an installed service): `/etc/vouch/vouch.toml` when it
//!   exists, and `/var/lib/vouch`.
//! - **As anyone else:** `$XDG_CONFIG_HOME/vouch/vouch.toml` (else
//!   `~/.config/vouch/vouch.toml`) when it exists, and
//!   `$XDG_DATA_HOME/vouch` (else `~/.local/share/vouch`).

use std::path::{Path, PathBuf};

/// The defaults in force, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Defaults {
    /// The configuration file read when none is named (it exists).
    pub config: Option<PathBuf>,
    /// The data directory used when none is named.
    pub data_dir: PathBuf,
    /// Which rule chose them: `checkout`, `root` or `user`.
    pub rule: &'static str,
}

/// Whether `exe` runs from a Cargo build directory of a checkout: its
/// directory is `DIR/target/<profile>` (or `.../deps`) and `DIR/Cargo.toml`
/// exists.
pub fn checkout_of(exe: &Path) -> Option<PathBuf> {
    exe.ancestors()
        .skip(1)
        .take(4)
        .find(|d| d.file_name().is_some_and(|n| n == "target"))
        .and_then(Path::parent)
        .filter(|root| root.join("Cargo.toml").is_file())
        .map(Path::to_path_buf)
}

/// The defaults for this process.
pub fn defaults() -> Defaults {
    let exe = std::env::current_exe().ok();
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    decide(
        exe.as_deref().and_then(checkout_of).is_some(),
        crate::util::is_root(),
        env("XDG_CONFIG_HOME"),
        env("XDG_DATA_HOME"),
        env("HOME"),
        |p| p.is_file(),
    )
}

/// The rule itself, with its inputs given (so tests can ask it anything).
pub fn decide(
    from_checkout: bool,
    root: bool,
    xdg_config: Option<PathBuf>,
    xdg_data: Option<PathBuf>,
    home: Option<PathBuf>,
    exists: impl Fn(&Path) -> bool,
) -> Defaults {
    if from_checkout {
        return Defaults {
            config: None,
            data_dir: PathBuf::from("vouch-data"),
            rule: "checkout",
        };
    }
    if root {
        let config = PathBuf::from("/etc/vouch/vouch.toml");
        return Defaults {
            config: exists(&config).then_some(config),
            data_dir: PathBuf::from("/var/lib/vouch"),
            rule: "root",
        };
    }
    let config_home = xdg_config.or_else(|| home.as_ref().map(|h| h.join(".config")));
    let data_home = xdg_data.or_else(|| home.as_ref().map(|h| h.join(".local/share")));
    let config = config_home
        .map(|d| d.join("vouch/vouch.toml"))
        .filter(|p| exists(p));
    Defaults {
        config,
        // Without a home directory: the current one, as before.
        data_dir: data_home.map_or_else(|| PathBuf::from("vouch-data"), |d| d.join("vouch")),
        rule: "user",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkout_root_and_users_get_their_own_places() {
        let none = |_: &Path| false;
        let all = |_: &Path| true;
        let home = Some(PathBuf::from("/home/ann"));
        let d = decide(true, true, None, None, home.clone(), all);
        assert_eq!(
            (d.config, d.data_dir, d.rule),
            (None, "vouch-data".into(), "checkout")
        );
        let d = decide(false, true, None, None, home.clone(), all);
        assert_eq!(d.config, Some("/etc/vouch/vouch.toml".into()));
        assert_eq!(d.data_dir, PathBuf::from("/var/lib/vouch"));
        let d = decide(false, true, None, None, home.clone(), none);
        assert_eq!(
            d.config, None,
            "a configuration file only when there is one"
        );
        let d = decide(false, false, None, None, home.clone(), all);
        assert_eq!(d.config, Some("/home/ann/.config/vouch/vouch.toml".into()));
        assert_eq!(d.data_dir, PathBuf::from("/home/ann/.local/share/vouch"));
        let d = decide(
            false,
            false,
            Some("/x/conf".into()),
            Some("/x/data".into()),
            home,
            all,
        );
        assert_eq!(d.config, Some("/x/conf/vouch/vouch.toml".into()));
        assert_eq!(d.data_dir, PathBuf::from("/x/data/vouch"));
        let d = decide(false, false, None, None, None, all);
        assert_eq!(d.data_dir, PathBuf::from("vouch-data"));
    }

    #[test]
    fn a_checkout_is_a_target_directory_beside_a_cargo_toml() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Cargo.toml"), "[package]\n").unwrap();
        let exe = dir.path().join("target/release/vouch");
        assert_eq!(checkout_of(&exe), Some(dir.path().to_path_buf()));
        let deps = dir.path().join("target/debug/deps/vouch-0123");
        assert_eq!(checkout_of(&deps), Some(dir.path().to_path_buf()));
        assert_eq!(checkout_of(Path::new("/usr/bin/vouch")), None);
        let other = tempfile::tempdir().unwrap();
        assert_eq!(
            checkout_of(&other.path().join("target/release/vouch")),
            None,
            "no Cargo.toml"
        );
    }
}
