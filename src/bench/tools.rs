//! The tools under test and how each is invoked. Encryption and zstd are on
//! for every tool: vouch default (AES-256-GCM, zstd 3), restic (repository
//! v2, compression auto), rustic (its defaults: restic's format v2, zstd 3),
//! borg (repokey-blake2, `-C zstd,3`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

use super::conditions::ToolInfo;
use super::BenchError;

/// Passphrase of every benchmark repository.
pub const PASSPHRASE: &str = "vouch-bench-passphrase";

/// A tool under test.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tool {
    /// This binary (or another vouch build).
    Vouch(PathBuf),
    /// restic from PATH.
    Restic,
    /// borg from PATH.
    Borg,
    /// rustic from PATH, or where `install-peers.sh` builds it.
    Rustic,
}

/// rustic's binary: on `PATH`, else where `../shared/bench/install-peers.sh`
/// puts it (`$VOUCH_BENCH_DIR/rustic/bin`, default `/var/tmp/vouch-bench`).
pub fn rustic_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("rustic"))
            .find(|c| c.is_file())
    });
    on_path.unwrap_or_else(|| {
        let dir = std::env::var_os("VOUCH_BENCH_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/tmp/vouch-bench"));
        dir.join("rustic/bin/rustic")
    })
}

impl std::str::FromStr for Tool {
    type Err = BenchError;
    fn from_str(s: &str) -> Result<Self, BenchError> {
        match s {
            "restic" => Ok(Tool::Restic),
            "borg" => Ok(Tool::Borg),
            "rustic" => Ok(Tool::Rustic),
            _ => Err(BenchError::Unknown {
                kind: "peer",
                name: s.into(),
                known: "restic, rustic, borg".into(),
            }),
        }
    }
}

impl Tool {
    /// Short name.
    pub fn name(&self) -> &'static str {
        match self {
            Tool::Vouch(_) => "vouch",
            Tool::Restic => "restic",
            Tool::Borg => "borg",
            Tool::Rustic => "rustic",
        }
    }

    fn program(&self) -> Command {
        match self {
            Tool::Vouch(bin) => Command::new(bin),
            Tool::Restic => Command::new("restic"),
            Tool::Borg => Command::new("borg"),
            Tool::Rustic => Command::new(rustic_binary()),
        }
    }

    fn command(&self, work: &Path) -> Command {
        let mut c = self.program();
        if *self == Tool::Rustic {
            // Global options go before the subcommand.
            c.arg("--no-progress")
                .args(["--log-level", "warn", "--cache-dir"])
                .arg(work.join("cache/rustic"));
        }
        c.env("VOUCH_PASSWORD", PASSPHRASE)
            .env("RESTIC_PASSWORD", PASSPHRASE)
            .env("RUSTIC_PASSWORD", PASSPHRASE)
            .env("BORG_PASSPHRASE", PASSPHRASE)
            .env("BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK", "yes")
            .env("BORG_RELOCATED_REPO_ACCESS_IS_OK", "yes")
            .env("BORG_CACHE_DIR", work.join("cache/borg"))
            .env("BORG_CONFIG_DIR", work.join("cache/borg-config"))
            .env("BORG_SECURITY_DIR", work.join("cache/borg-security"))
            .env("RESTIC_CACHE_DIR", work.join("cache/restic"))
            .env_remove("VOUCH_REPOSITORY")
            .env_remove("RESTIC_REPOSITORY")
            .env_remove("RUSTIC_REPOSITORY");
        c
    }

    /// Creates a repository.
    pub fn init(&self, work: &Path, repo: &Path) -> Command {
        let mut c = self.command(work);
        match self {
            Tool::Vouch(_) => c.arg("-r").arg(repo).args(["init", "-q"]),
            Tool::Restic => c.arg("-r").arg(repo).args(["init", "-q"]),
            Tool::Rustic => c.arg("-r").arg(repo).arg("init"),
            Tool::Borg => c.args(["init", "-e", "repokey-blake2"]).arg(repo),
        };
        c
    }

    /// Backs up `source`; `archive` names borg's archive.
    pub fn backup(&self, work: &Path, repo: &Path, source: &Path, archive: &str) -> Command {
        let mut c = self.command(work);
        match self {
            Tool::Vouch(_) => c.arg("-r").arg(repo).args(["backup", "-q"]).arg(source),
            Tool::Restic => c.arg("-r").arg(repo).args(["backup", "-q"]).arg(source),
            Tool::Rustic => c.arg("-r").arg(repo).arg("backup").arg(source),
            Tool::Borg => c
                .args(["create", "--lock-wait", "3600", "-C", "zstd,3"])
                .arg(format!("{}::{archive}", repo.display()))
                .arg(source),
        };
        c
    }

    /// Restores the latest snapshot (borg: `archive`) into `target`.
    pub fn restore(&self, work: &Path, repo: &Path, target: &Path, archive: &str) -> Command {
        let mut c = self.command(work);
        match self {
            Tool::Vouch(_) | Tool::Restic => c
                .arg("-r")
                .arg(repo)
                .args(["restore", "-q", "latest", "--target"])
                .arg(target),
            Tool::Rustic => c
                .arg("-r")
                .arg(repo)
                .args(["restore", "latest"])
                .arg(target),
            Tool::Borg => c
                .arg("extract")
                .arg(format!("{}::{archive}", repo.display()))
                .current_dir(target),
        };
        c
    }

    /// Reads back and checks all data.
    pub fn verify(&self, work: &Path, repo: &Path) -> Command {
        let mut c = self.command(work);
        match self {
            Tool::Vouch(_) => c.arg("-r").arg(repo).args(["verify", "-q", "--read-data"]),
            Tool::Restic => c.arg("-r").arg(repo).args(["check", "-q", "--read-data"]),
            Tool::Rustic => c.arg("-r").arg(repo).args(["check", "--read-data"]),
            Tool::Borg => c.args(["check", "--verify-data"]).arg(repo),
        };
        c
    }

    /// The verify command's name for the report.
    pub fn verify_name(&self) -> &'static str {
        match self {
            Tool::Vouch(_) => "verify --read-data",
            Tool::Restic | Tool::Rustic => "check --read-data",
            Tool::Borg => "check --verify-data",
        }
    }

    /// Version and settings.
    pub fn info(&self) -> ToolInfo {
        let (args, settings): (&[&str], &str) = match self {
            Tool::Vouch(_) => (
                &["--version"],
                "release build, defaults: AES-256-GCM, zstd 3, chunks 512 KiB / 1 MiB / 8 MiB, \
                 16 MiB packs, sync level filesystem, Argon2id 64 MiB × 3",
            ),
            Tool::Restic => (
                &["version"],
                "repository v2, compression auto, AES-256 + Poly1305",
            ),
            Tool::Borg => (&["--version"], "repokey-blake2, -C zstd,3"),
            Tool::Rustic => (
                &["--version"],
                "defaults: repository v2, zstd 3, AES-256 + Poly1305",
            ),
        };
        let mut c = self.program();
        let version = c
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_string()
            })
            .unwrap_or_else(|| "not found".into());
        ToolInfo {
            name: self.name().into(),
            version,
            settings: settings.into(),
        }
    }

    /// Exit codes that mean success (3: snapshot made with warnings).
    pub fn ok_exit(&self, code: i32) -> bool {
        match self {
            Tool::Vouch(_) | Tool::Restic => code == 0 || code == 3,
            Tool::Rustic => code == 0,
            Tool::Borg => code == 0 || code == 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(c: &Command) -> Vec<String> {
        c.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn invocations_match_each_tool() {
        let w = Path::new("/w");
        let r = Path::new("/w/repo");
        let v = Tool::Vouch("/bin/vouch".into());
        assert_eq!(
            args(&v.backup(w, r, Path::new("/src"), "a")),
            ["-r", "/w/repo", "backup", "-q", "/src"]
        );
        assert_eq!(
            args(&Tool::Borg.backup(w, r, Path::new("/src"), "s1")),
            [
                "create",
                "--lock-wait",
                "3600",
                "-C",
                "zstd,3",
                "/w/repo::s1",
                "/src"
            ]
        );
        assert_eq!(
            args(&Tool::Restic.verify(w, r)),
            ["-r", "/w/repo", "check", "-q", "--read-data"]
        );
        let envs: Vec<_> = v.init(w, r).get_envs().map(|(k, _)| k.to_owned()).collect();
        assert!(envs.iter().any(|k| k == "VOUCH_PASSWORD"));
        assert_eq!(
            args(&Tool::Rustic.restore(w, r, Path::new("/t"), "a"))[5..],
            ["-r", "/w/repo", "restore", "latest", "/t"]
        );
        assert!("kopia".parse::<Tool>().is_err());
        assert_eq!("borg".parse::<Tool>().unwrap(), Tool::Borg);
    }
}
