//! Scenarios (named sets of nemeses) and the schedule a seed makes of them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Rng;

/// A named set of faults `vouch chaos run --scenario` selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// kill -9 of the service and of agents at random times, and at each
    /// commit step of backup, retention, prune and log append; the data
    /// directory's file system losing power (root, xfsprogs).
    Crash,
    /// Bit rot and truncation in packs, index files, manifests and log
    /// segments; the data
    /// directory full (root: it lies on a small tmpfs); fsync EIO
    /// (libfiu).
    Disk,
    /// The wall clock stepped forward and back on the service and on an
    /// agent (libfaketime).
    Clock,
    /// Resets, blackholes, latency, bandwidth limits and refused
    /// connections between the agents and the service; 503s, reset
    /// uploads, truncated and stalled answers between the service and its
    /// S3 store.
    Network,
    /// A writer paused (SIGSTOP) across a prune; concurrent clients on one
    /// repository; an agent whose credential is revoked mid-job.
    Concurrency,
}

impl Scenario {
    /// Every scenario, in the order `list` shows them.
    pub const ALL: [Scenario; 5] = [
        Scenario::Crash,
        Scenario::Disk,
        Scenario::Clock,
        Scenario::Network,
        Scenario::Concurrency,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Crash => "crash",
            Scenario::Disk => "disk",
            Scenario::Clock => "clock",
            Scenario::Network => "network",
            Scenario::Concurrency => "concurrency",
        }
    }

    /// What it does, one line.
    pub fn describe(self) -> &'static str {
        match self {
            Scenario::Crash => "kill -9 of the service and agents, at random and at each commit step (backup, retention, prune, log append); power lost under the data directory (root, xfsprogs)",
            Scenario::Disk => "bit rot and truncation in packs, index files, manifests and log segments, a full data directory (root), fsync EIO (libfiu)",
            Scenario::Clock => "wall-clock steps forward and back on the service and an agent (libfaketime)",
            Scenario::Network => "resets, blackholes, latency, bandwidth limits and refused connections between agents and service; 503s, reset uploads, truncated and stalled answers from S3",
            Scenario::Concurrency => "a writer paused across a prune, concurrent clients on one repository, an agent revoked mid-job",
        }
    }

    /// The faults it may inject.
    pub fn faults(self) -> &'static [FaultKind] {
        use FaultKind::*;
        match self {
            Scenario::Crash => &[
                KillServer,
                KillAgent,
                CrashAtStep,
                AgentCrashAtStep,
                PowerCut,
            ],
            Scenario::Disk => &[
                BitRotRepository,
                TruncateRepositoryFile,
                BitRotLog,
                DiskFull,
                FsyncEio,
            ],
            Scenario::Clock => &[ClockStepServer, ClockStepAgent],
            Scenario::Network => &[
                NetReset,
                NetBlackhole,
                NetLatency,
                NetBandwidth,
                NetRefuse,
                S3Faults,
            ],
            Scenario::Concurrency => &[PauseWriterAcrossPrune, ConcurrentClients, RevokeAgent],
        }
    }
}

impl std::str::FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Scenario::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Scenario::ALL.iter().map(|x| x.name()).collect();
                format!("no scenario {s:?}; there are {}", names.join(", "))
            })
    }
}

/// One kind of fault (a nemesis).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGKILL to the service, restarted at once.
    KillServer,
    /// SIGKILL to an agent, restarted after a moment.
    KillAgent,
    /// The service restarted with a failpoint that kills it at one commit
    /// step.
    CrashAtStep,
    /// An agent restarted with a failpoint on a backup commit step.
    AgentCrashAtStep,
    /// The data directory's file system loses power under the service
    /// mid-backup (an XFS shut down without a flush: unsynced writes lost,
    /// writes in flight torn), is mounted again, and the service restarts.
    PowerCut,
    /// One bit flipped in a file of a repository: a pack, an index file or
    /// a snapshot manifest.
    BitRotRepository,
    /// A file of a repository (a pack, an index file, a manifest) cut to
    /// half its length.
    TruncateRepositoryFile,
    /// One bit flipped in a segment of the event log.
    BitRotLog,
    /// The data directory's file system filled to the last 64 KiB.
    DiskFull,
    /// fsync and fdatasync fail with EIO half of the time.
    FsyncEio,
    /// The service's wall clock stepped.
    ClockStepServer,
    /// An agent's wall clock stepped.
    ClockStepAgent,
    /// Every agent connection reset.
    NetReset,
    /// Nothing passes between agents and service.
    NetBlackhole,
    /// 300 ms each way.
    NetLatency,
    /// 32 KiB/s each way.
    NetBandwidth,
    /// New connections closed at once.
    NetRefuse,
    /// Requests between the service and its S3 store fail in turn: 503
    /// SlowDown, an upload reset midway, an answer truncated, an answer
    /// withheld past the client's timeout.
    S3Faults,
    /// A CLI backup into the service's repository, SIGSTOPped across a
    /// prune.
    PauseWriterAcrossPrune,
    /// Two CLI clients and the service on one repository at once.
    ConcurrentClients,
    /// A new agent's credential revoked while its backup runs.
    RevokeAgent,
}

impl FaultKind {
    /// Its name in reports.
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// The commit steps of the service a crash can hit (`VOUCH_FAILPOINT`).
pub const SERVER_STEPS: &[&str] = &[
    "backup-index-written",
    "backup-manifest-written",
    "forget-one-deleted",
    "prune-index-written",
    "prune-index-half-deleted",
    "prune-index-deleted",
    "prune-packs-half-deleted",
    "log-batch-written",
    "log-batch-synced",
    "log-head-written",
];

/// The commit steps of an agent's backup.
pub const AGENT_STEPS: &[&str] = &["backup-index-written", "backup-manifest-written"];

/// One planned action.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Planned {
    /// When, from the run's start.
    pub at_ms: u64,
    /// A fault, or a workload step when none.
    pub fault: Option<FaultKind>,
    /// The action's own seed (targets, durations, offsets).
    pub seed: u64,
}

/// The schedule a seed makes for a duration: a workload step every 3 to 8
/// s, a fault every 15 to 45 s among the scenarios' faults. The same seed,
/// duration and scenarios make the same schedule (`vouch chaos replay`).
pub fn schedule(seed: u64, duration: Duration, scenarios: &[Scenario]) -> Vec<Planned> {
    let faults: Vec<FaultKind> = scenarios
        .iter()
        .flat_map(|s| s.faults().iter().copied())
        .collect();
    let mut rng = Rng::new(seed);
    let end = duration.as_millis() as u64;
    let mut out = Vec::new();
    let mut next_work = 1_000;
    let mut next_fault = 10_000 + rng.below(10_000);
    // Faults stop a little before the end, so that the last one's
    // detection and recovery are seen within the run.
    let fault_end = end.saturating_sub(20_000);
    loop {
        let work_first = next_work <= next_fault || faults.is_empty() || next_fault > fault_end;
        let at = if work_first { next_work } else { next_fault };
        if at >= end {
            break;
        }
        if work_first {
            out.push(Planned {
                at_ms: at,
                fault: None,
                seed: rng.next_u64(),
            });
            next_work += 3_000 + rng.below(5_000);
        } else {
            let kind = faults[rng.below(faults.len() as u64) as usize];
            out.push(Planned {
                at_ms: at,
                fault: Some(kind),
                seed: rng.next_u64(),
            });
            next_fault += 15_000 + rng.below(30_000);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_makes_one_schedule_of_the_chosen_faults() {
        let d = Duration::from_secs(600);
        let a = schedule(7, d, &Scenario::ALL);
        assert_eq!(a, schedule(7, d, &Scenario::ALL));
        assert_ne!(a, schedule(8, d, &Scenario::ALL));
        let faults = a.iter().filter(|p| p.fault.is_some()).count();
        assert!((10..=40).contains(&faults), "{faults} faults in 10 min");
        assert!(a.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
        assert!(a.iter().all(|p| p.at_ms < 600_000));
        let net = schedule(7, d, &[Scenario::Network]);
        assert!(net
            .iter()
            .filter_map(|p| p.fault)
            .all(|f| Scenario::Network.faults().contains(&f)));
        for s in Scenario::ALL {
            assert_eq!(s.name().parse::<Scenario>(), Ok(s));
        }
        assert!("nope".parse::<Scenario>().is_err());
    }
}
