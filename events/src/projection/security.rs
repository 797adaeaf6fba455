//! What the log says about the installation's security: each
//! security-center check's recorded status and since when
//! (`security.check_changed`), confirmed key exports
//! (`key.export_confirmed`), the newest export of the log's head
//! (`log.head_exported`) and the newest scrub of the log
//! (`service.log_scrubbed`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::{CheckStatus, Event};
use crate::ids::RepositoryId;
use crate::projection::{Inconsistency, Recorded};

/// A check as the log last recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedCheck {
    /// What it checks.
    pub kind: String,
    /// What it is about.
    pub subject: String,
    /// Its status.
    pub status: CheckStatus,
    /// Why.
    pub reason: String,
    /// What to do.
    pub action: String,
    /// When it took this status (a change of reason alone keeps it).
    pub since: Recorded,
}

/// A confirmed export of a repository's key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyExport {
    /// The key's check code.
    pub key_check: String,
    /// Who confirmed.
    pub by: String,
    /// When.
    pub at: Recorded,
}

/// The newest export of the log's head.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadExport {
    /// The seq handed out.
    pub seq: u64,
    /// Whether a signed checkpoint went with it.
    pub signed: bool,
    /// Who asked.
    pub by: String,
    /// When.
    pub at: Recorded,
}

/// The newest scrub of the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubSeen {
    /// When.
    pub at: Recorded,
    /// The seq it was bounded by.
    pub through_seq: u64,
    /// What it found wrong (none: the log verified whole).
    pub problem: Option<String>,
}

/// The security projection.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityProjection {
    /// By check id.
    pub checks: BTreeMap<String, RecordedCheck>,
    /// The newest confirmed export of each repository's key.
    pub key_exports: BTreeMap<RepositoryId, KeyExport>,
    /// The newest export of the log's head.
    pub head_export: Option<HeadExport>,
    /// The newest scrub of the log.
    pub last_scrub: Option<ScrubSeen>,
}

impl SecurityProjection {
    /// Folds one event.
    pub(crate) fn apply(&mut self, at: Recorded, event: &Event) -> Option<Inconsistency> {
        match event {
            Event::SecurityCheckChanged(c) => {
                let since = match self.checks.get(&c.check) {
                    Some(old) if old.status == c.status => old.since,
                    _ => at,
                };
                self.checks.insert(
                    c.check.clone(),
                    RecordedCheck {
                        kind: c.kind.clone(),
                        subject: c.subject.clone(),
                        status: c.status,
                        reason: c.reason.clone(),
                        action: c.action.clone(),
                        since,
                    },
                );
            }
            Event::KeyExportConfirmed(k) => {
                self.key_exports.insert(
                    k.repository.clone(),
                    KeyExport {
                        key_check: k.key_check.clone(),
                        by: k.by.clone(),
                        at,
                    },
                );
            }
            Event::LogHeadExported(h) => {
                self.head_export = Some(HeadExport {
                    seq: h.seq,
                    signed: h.signed,
                    by: h.by.clone(),
                    at,
                });
            }
            Event::LogScrubbed(s) => {
                self.last_scrub = Some(ScrubSeen {
                    at,
                    through_seq: s.through_seq,
                    problem: s.problem.clone(),
                });
            }
            _ => {}
        }
        None
    }
}
