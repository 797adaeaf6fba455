//! Agents: registration, last seen, leases.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::Event;
use crate::ids::{AgentId, JobId};
use crate::projection::{Inconsistency, Recorded};

/// Everything known about one agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    /// Its id.
    pub id: AgentId,
    /// Host name, OS and version from its registration (none if it was
    /// seen without registering).
    pub hostname: Option<String>,
    /// Its OS.
    pub os: Option<String>,
    /// Its version.
    pub version: Option<String>,
    /// When it last called in (server clock).
    pub last_seen_unix_ns: Option<i64>,
    /// How far its clock was ahead of the server's when it last told
    /// (milliseconds; negative: behind).
    #[serde(default)]
    pub clock_skew_ms: Option<i64>,
    /// Jobs leased to it, with the lease's end.
    pub leases: BTreeMap<JobId, i64>,
}

/// Every agent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentsProjection {
    /// By id.
    pub agents: BTreeMap<AgentId, Agent>,
}

impl AgentsProjection {
    fn entry(&mut self, id: &AgentId) -> &mut Agent {
        self.agents.entry(id.clone()).or_insert_with(|| Agent {
            id: id.clone(),
            hostname: None,
            os: None,
            version: None,
            last_seen_unix_ns: None,
            clock_skew_ms: None,
            leases: BTreeMap::new(),
        })
    }

    pub(crate) fn apply(&mut self, at: Recorded, event: &Event) -> Option<Inconsistency> {
        let bad = |message: String| {
            Some(Inconsistency {
                at,
                event_type: event.event_type().to_owned(),
                point: None,
                message,
            })
        };
        match event {
            Event::AgentRegistered(e) => {
                let a = self.entry(&e.agent);
                a.hostname = Some(e.hostname.clone());
                a.os = Some(e.os.clone());
                a.version = Some(e.version.clone());
                a.last_seen_unix_ns = Some(at.unix_ns);
                None
            }
            Event::AgentSeen(e) => {
                // An inconsistent event changes nothing: an agent seen
                // before registering is only flagged.
                match self.agents.get_mut(&e.agent) {
                    Some(a) => {
                        a.last_seen_unix_ns = Some(at.unix_ns);
                        if e.clock_skew_ms.is_some() {
                            a.clock_skew_ms = e.clock_skew_ms;
                        }
                        if let Some(v) = &e.version {
                            a.version = Some(v.clone());
                        }
                        None
                    }
                    None => bad(format!("agent {} seen before registering", e.agent)),
                }
            }
            Event::LeaseGranted(e) => {
                self.entry(&e.agent)
                    .leases
                    .insert(e.job.clone(), e.expires_unix_ns);
                None
            }
            Event::LeaseExpired(e) => {
                let removed = self
                    .agents
                    .get_mut(&e.agent)
                    .and_then(|a| a.leases.remove(&e.job));
                if removed.is_none() {
                    return bad(format!(
                        "lease of job {} by agent {} expired but was never granted",
                        e.job, e.agent
                    ));
                }
                None
            }
            Event::JobFinished(_) | Event::JobFailed(_) | Event::JobAbandoned(_) => {
                let job = match event {
                    Event::JobFinished(e) => &e.job,
                    Event::JobFailed(e) => &e.job,
                    Event::JobAbandoned(e) => &e.job,
                    _ => return None,
                };
                for a in self.agents.values_mut() {
                    a.leases.remove(job);
                }
                None
            }
            _ => None,
        }
    }
}
