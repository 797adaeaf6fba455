//! Where the S3 keys come from: the environment (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), else a credentials file in
//! the AWS CLI's format (`AWS_SHARED_CREDENTIALS_FILE`, else
//! `~/.aws/credentials`), profile `AWS_PROFILE` or `default`. The service
//! names a credentials file per repository instead. Never from a URL.

use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

use crate::error::{Error, Result};

/// A key pair (and session token), wiped from memory when dropped.
#[derive(Clone)]
pub struct Credentials {
    /// Access key id (not secret, shown in messages).
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: Zeroizing<String>,
    /// Temporary credentials' session token.
    pub session_token: Option<Zeroizing<String>>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .finish()
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Credentials {
    /// From the environment, else the shared credentials file.
    pub fn from_environment() -> Result<Credentials> {
        if let (Some(id), Some(secret)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
            return Ok(Credentials {
                access_key_id: id.trim().to_owned(),
                secret_access_key: Zeroizing::new(secret.trim().to_owned()),
                session_token: env("AWS_SESSION_TOKEN").map(Zeroizing::new),
            });
        }
        let file = env("AWS_SHARED_CREDENTIALS_FILE")
            .map(PathBuf::from)
            .or_else(|| env("HOME").map(|h| Path::new(&h).join(".aws/credentials")));
        let profile = env("AWS_PROFILE").unwrap_or_else(|| "default".into());
        match file {
            Some(f) if f.exists() => Credentials::from_file(&f, &profile),
            _ => Err(Error::InvalidArgument(
                "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or write them to ~/.aws/credentials (AWS_PROFILE picks a profile)".into(),
            )),
        }
    }

    /// Profile `profile` of a credentials file in the AWS CLI's INI format.
    pub fn from_file(path: &Path, profile: &str) -> Result<Credentials> {
        let text = Zeroizing::new(
            std::fs::read_to_string(path)
                .map_err(|e| Error::io(format!("reading {}", path.display()), e))?,
        );
        let mut section = String::new();
        let (mut id, mut secret, mut token) = (None, None, None);
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.trim().trim_start_matches("profile ").to_owned();
                continue;
            }
            if section != profile {
                continue;
            }
            if let Some((k, v)) = line.split_once('=') {
                let v = v.trim().to_owned();
                match k.trim() {
                    "aws_access_key_id" => id = Some(v),
                    "aws_secret_access_key" => secret = Some(Zeroizing::new(v)),
                    "aws_session_token" => token = Some(Zeroizing::new(v)),
                    _ => {}
                }
            }
        }
        match (id, secret) {
            (Some(access_key_id), Some(secret_access_key)) => Ok(Credentials {
                access_key_id,
                secret_access_key,
                session_token: token,
            }),
            _ => Err(Error::InvalidArgument(format!(
                "{} has no aws_access_key_id and aws_secret_access_key in profile [{profile}]",
                path.display()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_is_read_from_a_credentials_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("credentials");
        std::fs::write(
            &f,
            "[default]\naws_access_key_id = AK1\naws_secret_access_key = S1\n\n# other\n[profile backup]\naws_access_key_id=AK2\naws_secret_access_key=S2\naws_session_token = T2\n",
        )
        .unwrap();
        let d = Credentials::from_file(&f, "default").unwrap();
        assert_eq!(
            (d.access_key_id.as_str(), d.secret_access_key.as_str()),
            ("AK1", "S1")
        );
        assert!(d.session_token.is_none());
        let b = Credentials::from_file(&f, "backup").unwrap();
        assert_eq!(b.access_key_id, "AK2");
        assert_eq!(b.session_token.as_deref().map(String::as_str), Some("T2"));
        let err = Credentials::from_file(&f, "missing").unwrap_err();
        assert!(err.to_string().contains("[missing]"), "{err}");
        assert!(
            !format!("{d:?}").contains("S1"),
            "the secret leaked into Debug"
        );
    }
}
