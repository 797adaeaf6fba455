//! The `[reports]` section of `vouch serve`'s configuration
//! (docs/operations.md, "Reports").

use std::path::PathBuf;

use serde::Deserialize;

/// `[reports]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportsSection {
    /// The Chromium that prints PDF reports (default: the first of
    /// `chromium`, `chromium-browser`, `google-chrome` on `PATH`).
    pub chromium: Option<PathBuf>,
}
