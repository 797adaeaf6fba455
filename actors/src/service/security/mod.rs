//! The security center: checks of the installation's protection, each
//! `ok`, `warning`, `failed` or `unknown` with its reason and what to do
//! ([`checks`]), over the log's state and facts a [`SecurityProbe`]
//! gathers ([`facts`]). The [`watch`] actor evaluates them on a timer and
//! records every change as `security.check_changed`; the alerter raises
//! `SecurityCheckFailed` from those events.

pub mod checks;
pub mod facts;
mod watch;

pub use checks::{evaluate, rollup, Check, SecurityPolicy};
pub use facts::{
    CertificateFacts, InstallationFacts, KeyFacts, ListenerFacts, RepositoryFacts, Retention,
    SecurityProbe, TokenFacts,
};
pub use watch::{changes, SecurityReport, RETIRED, SECURITY_EVERY};
pub(crate) use watch::{EvaluateSecurity, LatestSecurity, SecurityWatch};

#[cfg(test)]
mod tests;
