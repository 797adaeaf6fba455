//! Where a repository the service works on lives, as its configuration
//! names it: a local directory, or an S3 bucket with the keys to sign with.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::s3::credentials::Credentials;
use super::s3::{S3Backend, S3Location, S3Options};
use super::{Backend, LocalBackend};
use crate::error::Result;

/// A repository's storage.
#[derive(Clone, Debug)]
pub enum Storage {
    /// A directory.
    Local(PathBuf),
    /// An S3 bucket and prefix.
    S3(Box<S3Storage>),
}

/// An S3 repository's place and keys.
#[derive(Clone, Debug)]
pub struct S3Storage {
    /// Where.
    pub location: S3Location,
    /// With which keys (never logged: `Credentials`' Debug redacts).
    pub credentials: Credentials,
    /// Region and request settings.
    pub options: S3Options,
}

impl Storage {
    /// A backend on it.
    pub fn open(&self) -> Result<Arc<dyn Backend>> {
        Ok(match self {
            Storage::Local(path) => Arc::new(LocalBackend::new(path)),
            Storage::S3(s3) => Arc::new(S3Backend::new(
                s3.location.clone(),
                s3.credentials.clone(),
                s3.options.clone(),
            )?),
        })
    }

    /// The directory, for a local repository.
    pub fn local_path(&self) -> Option<&Path> {
        match self {
            Storage::Local(path) => Some(path),
            Storage::S3(_) => None,
        }
    }

    /// Whether the repository is off this host.
    pub fn is_remote(&self) -> bool {
        !matches!(self, Storage::Local(_))
    }
}

impl std::fmt::Display for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Storage::Local(path) => write!(f, "{}", path.display()),
            Storage::S3(s3) => write!(f, "{}", s3.location),
        }
    }
}
