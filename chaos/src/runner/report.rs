//! The verdict of a run, as JSON and as Markdown: the faults with their
//! times, each invariant with what was checked and the result, recovery
//! times, and the command that replays the run.

use serde::{Deserialize, Serialize};

use super::checks::InvariantResult;
use super::observe::{lock, Incident, Observed};
use super::scenario::{Planned, Scenario};
use super::{FaultRecord, Run};

/// What a replay needs: the same seed, duration and scenarios make the
/// same schedule.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ReplayKey {
    /// The seed.
    pub seed: u64,
    /// Seconds of faults.
    pub duration_s: u64,
    /// The scenarios.
    pub scenarios: Vec<Scenario>,
    /// Agents.
    pub agents: usize,
}

/// What a report is made of.
pub struct Parts<'a> {
    /// How to run it again.
    pub replay: ReplayKey,
    /// The command line that does.
    pub replay_command: String,
    /// Where the files stayed.
    pub work_dir: String,
    /// Seconds it took.
    pub took_s: f64,
    /// Faults the seed planned.
    pub planned_faults: usize,
    /// The faults.
    pub faults: Vec<FaultRecord>,
    /// What the sampler and the checks saw.
    pub observed: &'a Observed,
    /// The invariants' results.
    pub invariants: Vec<InvariantResult>,
    /// Notes.
    pub notes: Vec<String>,
}

/// A run's report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `held` when no invariant was violated, else `violated`.
    pub verdict: String,
    /// The build of vouch-chaos that ran.
    pub version: String,
    /// How to run it again.
    pub replay: ReplayKey,
    /// The replay command line.
    pub replay_command: String,
    /// Where the deployment's files and logs stayed.
    pub work_dir: String,
    /// Seconds the run took, checks included.
    pub took_s: f64,
    /// Faults planned by the seed.
    pub planned_faults: usize,
    /// Faults injected (others could not run here, see their outcome).
    pub injected_faults: usize,
    /// Every fault.
    pub faults: Vec<FaultRecord>,
    /// Every damage injected, and when the service found it.
    pub incidents: Vec<Incident>,
    /// Every invariant.
    pub invariants: Vec<InvariantResult>,
    /// Samples of the service, and how many could not reach it.
    pub samples: u64,
    /// Samples that found the service unreachable (down, paused).
    pub unreachable_samples: u64,
    /// Events of the log the runner was acknowledged.
    pub events_seen: usize,
    /// Times the service took to be ready after a fault (seconds): the
    /// longest, and the median.
    pub recovery_max_s: Option<f64>,
    /// The median recovery time.
    pub recovery_median_s: Option<f64>,
    /// Steps skipped and why.
    pub notes: Vec<String>,
}

impl Report {
    /// Gathers a finished run.
    pub fn new(run: &Run, schedule: &[Planned], invariants: Vec<InvariantResult>) -> Report {
        let replay = ReplayKey {
            seed: run.opts.seed,
            duration_s: run.opts.duration.as_secs(),
            scenarios: run.opts.scenarios.clone(),
            agents: run.opts.agents,
        };
        let o = lock(&run.obs);
        Report::from_parts(Parts {
            replay_command: replay_command(&replay),
            replay,
            work_dir: run.opts.work.display().to_string(),
            took_s: run.now_s(),
            planned_faults: schedule.iter().filter(|p| p.fault.is_some()).count(),
            faults: run.faults.clone(),
            observed: &o,
            invariants,
            notes: run.notes.clone(),
        })
    }

    /// A report of what was observed.
    pub fn from_parts(p: Parts<'_>) -> Report {
        let mut rec: Vec<f64> = p.faults.iter().filter_map(|f| f.recovery_s).collect();
        rec.sort_by(f64::total_cmp);
        // An invariant no check reached (no damage injected) is shown as
        // such; only a violation breaks the verdict.
        let verdict = if p.invariants.iter().all(|i| i.violations.is_empty()) {
            "held"
        } else {
            "violated"
        };
        Report {
            verdict: verdict.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            replay_command: p.replay_command,
            replay: p.replay,
            work_dir: p.work_dir,
            took_s: p.took_s,
            planned_faults: p.planned_faults,
            injected_faults: p.faults.iter().filter(|f| f.injected).count(),
            faults: p.faults,
            incidents: p.observed.incidents.clone(),
            invariants: p.invariants,
            samples: p.observed.samples,
            unreachable_samples: p.observed.unreachable,
            events_seen: p.observed.events.len(),
            recovery_max_s: rec.last().copied(),
            recovery_median_s: rec.get(rec.len() / 2).copied(),
            notes: p.notes,
        }
    }

    /// Whether every invariant held.
    pub fn held(&self) -> bool {
        self.verdict == "held"
    }

    /// The report as Markdown.
    pub fn markdown(&self) -> String {
        let mut m = String::new();
        let what = if self.replay.scenarios.is_empty() {
            format!(
                "- attached: watched for {} s, nothing injected",
                self.replay.duration_s
            )
        } else {
            format!(
                "- seed {}, {} s of faults, scenarios {}, {} agents",
                self.replay.seed,
                self.replay.duration_s,
                self.replay
                    .scenarios
                    .iter()
                    .map(|s| s.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                self.replay.agents
            )
        };
        m.push_str(&format!(
            "# vouch chaos run: {}\n\n{what}\n- {} faults planned, {} injected; {} samples ({} could not reach the service); {} events seen\n- recovery after faults: median {}, longest {}\n- took {:.0} s; files and logs in `{}`\n- replay: `{}`\n\n",
            self.verdict,
            self.planned_faults,
            self.injected_faults,
            self.samples,
            self.unreachable_samples,
            self.events_seen,
            secs(self.recovery_median_s),
            secs(self.recovery_max_s),
            self.took_s,
            self.work_dir,
            self.replay_command,
        ));
        m.push_str(
            "## Invariants\n\n| invariant | checks | result | demands |\n|---|---|---|---|\n",
        );
        for i in &self.invariants {
            m.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                i.name, i.checks, i.result, i.demands
            ));
        }
        if self.invariants.iter().any(|i| !i.violations.is_empty()) {
            m.push_str("\n## Violations\n\n");
            for i in &self.invariants {
                for v in i.violations.iter().take(MAX_SHOWN) {
                    m.push_str(&format!(
                        "- at {:.1} s, {}: {}\n",
                        v.at_s, v.invariant, v.detail
                    ));
                }
                if i.violations.len() > MAX_SHOWN {
                    m.push_str(&format!(
                        "- ... and {} more of {} (all in the JSON report)\n",
                        i.violations.len() - MAX_SHOWN,
                        i.name
                    ));
                }
            }
        }
        if !self.faults.is_empty() {
            m.push_str(
                "\n## Faults\n\n| # | at (s) | fault | target | outcome |\n|---|---|---|---|---|\n",
            );
        }
        for f in &self.faults {
            m.push_str(&format!(
                "| {} | {:.1} | {}{} | {} | {} |\n",
                f.n,
                f.at_s,
                f.fault,
                if f.injected { "" } else { " (not injected)" },
                f.target.replace('|', "\\|"),
                f.outcome.replace('|', "\\|")
            ));
        }
        if !self.incidents.is_empty() {
            m.push_str("\n## Injected damage\n\n| # | what | injected (s) | found (s) | by | put back (s) |\n|---|---|---|---|---|---|\n");
            for i in &self.incidents {
                m.push_str(&format!(
                    "| {} | {} | {:.1} | {} | {} | {} |\n",
                    i.id,
                    i.what,
                    i.injected_at_s,
                    i.detected_at_s
                        .map(|s| format!("{s:.1}"))
                        .unwrap_or_else(|| "never".into()),
                    i.detected_by.clone().unwrap_or_default(),
                    i.healed_at_s
                        .map(|s| format!("{s:.1}"))
                        .unwrap_or_else(|| "-".into()),
                ));
            }
        }
        if !self.notes.is_empty() {
            m.push_str("\n## Notes\n\n");
            for n in &self.notes {
                m.push_str(&format!("- {n}\n"));
            }
        }
        m
    }
}

/// Violations of one invariant the Markdown report lists.
const MAX_SHOWN: usize = 20;

fn secs(s: Option<f64>) -> String {
    s.map(|s| format!("{s:.1} s")).unwrap_or_else(|| "-".into())
}

/// The one-line command that reruns a run with the same schedule.
pub fn replay_command(k: &ReplayKey) -> String {
    let mut c = format!(
        "vouch chaos run --seed {} --duration {}s --agents {}",
        k.seed, k.duration_s, k.agents
    );
    for s in &k.scenarios {
        c.push_str(&format!(" --scenario {}", s.name()));
    }
    c
}

/// Reads what a replay needs from a report written by `--report FILE`
/// (the JSON one).
pub fn replay_key(json: &str) -> Result<ReplayKey, String> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("not a JSON report: {e}"))?;
    serde_json::from_value(v["replay"].clone())
        .map_err(|e| format!("the report has no usable \"replay\" object: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_names_its_replay() {
        let k = ReplayKey {
            seed: 42,
            duration_s: 120,
            scenarios: vec![Scenario::Crash, Scenario::Network],
            agents: 2,
        };
        assert_eq!(
            replay_command(&k),
            "vouch chaos run --seed 42 --duration 120s --agents 2 --scenario crash --scenario network"
        );
        let json = serde_json::json!({"verdict": "held", "replay": k}).to_string();
        assert_eq!(replay_key(&json), Ok(k));
        assert!(replay_key("{}").is_err());
        assert!(replay_key("not json").is_err());
    }
}
