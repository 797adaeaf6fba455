//! `vouch bench`: reproducible performance figures, side by side with the
//! tools users compare Vouch with (restic, borg), each with its conditions.
//!
//! The harness runs real binaries as child processes and measures each with
//! `wait4` (wall time, user and system CPU, peak RSS, blocks read) and
//! `/proc/<pid>/io` (bytes read). The data model refuses a throughput figure
//! measured on compressible data: the only way to get a throughput scenario
//! is an [`Incompressible`] data set, which only a passing compressibility
//! check constructs.
//!
//! `primitives` measures the engine's own per-chunk building blocks
//! (chunking, keyed BLAKE3, zstd, AES-256-GCM, the whole pipeline) so the
//! distance between an end-to-end figure and the machine's limit is visible.
//!
//! `service` measures `vouch serve` at scale: restart to ready on a large
//! generated event log, and latency under concurrent load.

mod conditions;
mod data;
mod history;
mod loadgen;
mod measure;
mod primitives;
mod report;
mod scenarios;
mod service;
mod tools;

use std::path::PathBuf;

pub use conditions::{
    parse_cpu_model, parse_findmnt_json, parse_loadavg, parse_mem_total_kib, Conditions, FsInfo,
};
pub use data::{
    check_samples, generate_random_file, DataKind, DataSet, Incompressible, RealData, SampleStats,
    MIN_INCOMPRESSIBLE_RATIO, MIN_REAL_RATIO,
};
pub use history::{generate as generate_history, HistoryOptions, HistorySummary};
pub use loadgen::{percentile, LoadOptions, LoadResult};
pub use measure::{drop_caches, CacheState, MemoryLimiter, Usage};
pub use primitives::{run_primitives, PrimitiveRow, PrimitivesOptions, PrimitivesReport};
pub use report::{ratios, Ratio, Report, ScenarioResult, StepResult, ToolResult};
pub use scenarios::run;
pub use service::{
    points_from_metrics, run_point, run_service, Checks, PointOptions, PointReport, RestartResult,
    ServiceConditions, ServiceOptions, ServiceReport, TargetRow,
};
pub use tools::Tool;

/// Everything that can go wrong in a benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A throughput scenario was given data that compresses.
    #[error(
        "refusing {what} as throughput data: a zstd sample compresses to {ratio:.3} of its size \
         (must be at least {min}); throughput is measured on incompressible (random) data only"
    )]
    Compressible {
        /// The data set.
        what: String,
        /// compressed / raw of the sample.
        ratio: f64,
        /// The threshold.
        min: f64,
    },
    /// The data repeats itself (identical sample pieces): periodic test data.
    #[error(
        "refusing {what}: {duplicates} of its sampled pieces are identical (periodic data \
         produces fake ratios; use random data for throughput, real data for real-world figures)"
    )]
    Periodic {
        /// The data set.
        what: String,
        /// How many sampled pieces were duplicates.
        duplicates: usize,
    },
    /// A real-world data set compressed so well it cannot be real data.
    #[error(
        "refusing {what} as real data: a zstd sample compresses to {ratio:.4} of its size, \
         which only synthetic (periodic) data does"
    )]
    NotReal {
        /// The data set.
        what: String,
        /// compressed / raw.
        ratio: f64,
    },
    /// A data set is empty or missing.
    #[error("no data in {0}")]
    NoData(PathBuf),
    /// A tool exited with a failure.
    #[error("{tool} failed during {step} with {status} (log: {log}):\n{tail}")]
    ToolFailed {
        /// The tool.
        tool: String,
        /// The step.
        step: String,
        /// Exit status description.
        status: String,
        /// Log file.
        log: PathBuf,
        /// Last lines of its output.
        tail: String,
    },
    /// A tool could not be started.
    #[error("cannot run {program}: {source} (is it installed and on PATH?)")]
    Spawn {
        /// Program.
        program: String,
        /// Cause.
        source: std::io::Error,
    },
    /// An unknown name on the command line.
    #[error("unknown {kind} {name:?}; known: {known}")]
    Unknown {
        /// What kind of name.
        kind: &'static str,
        /// The name given.
        name: String,
        /// The known names.
        known: String,
    },
    /// Something in the work directory is in the way.
    #[error("{0}")]
    Workdir(String),
    /// Interrupted by the user.
    #[error("interrupted")]
    Interrupted,
    /// I/O with context.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Cause.
        source: std::io::Error,
    },
}

/// Result of the bench module.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;

/// Adds context to I/O errors.
pub(crate) trait Ctx<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Ctx<T> for std::io::Result<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| BenchError::Io {
            context: context(),
            source,
        })
    }
}

/// Size of a benchmark run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// A few minutes here.
    Small,
    /// The documented run.
    Medium,
    /// Hours; includes `million-files`.
    Large,
}

impl std::str::FromStr for Scale {
    type Err = BenchError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "small" => Ok(Scale::Small),
            "medium" => Ok(Scale::Medium),
            "large" => Ok(Scale::Large),
            _ => Err(BenchError::Unknown {
                kind: "scale",
                name: s.into(),
                known: "small, medium, large".into(),
            }),
        }
    }
}

impl std::fmt::Display for Scale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Scale::Small => "small",
            Scale::Medium => "medium",
            Scale::Large => "large",
        })
    }
}

/// The scenarios, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// One large random file.
    LargeFile,
    /// Many small random files.
    ManySmall,
    /// The same source again into the same repository.
    RerunUnchanged,
    /// A real source tree, in steps.
    SourceTree,
    /// Full restore of the source tree's latest snapshot.
    Restore,
    /// `verify --read-data` of the source tree's repository.
    Verify,
    /// Four backups at once.
    Concurrent,
    /// The large file under a memory limit.
    LowMemory,
    /// The repository behind a bandwidth limit.
    SlowTarget,
    /// One million small files (large scale only).
    MillionFiles,
    /// Cost against the size of the work: files, bytes, a mixed tree
    /// (large scale only).
    Scale,
}

impl Scenario {
    /// All scenarios in run order.
    pub const ALL: [Scenario; 11] = [
        Scenario::LargeFile,
        Scenario::ManySmall,
        Scenario::RerunUnchanged,
        Scenario::SourceTree,
        Scenario::Restore,
        Scenario::Verify,
        Scenario::Concurrent,
        Scenario::LowMemory,
        Scenario::SlowTarget,
        Scenario::MillionFiles,
        Scenario::Scale,
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::LargeFile => "large-file",
            Scenario::ManySmall => "many-small",
            Scenario::RerunUnchanged => "rerun-unchanged",
            Scenario::SourceTree => "source-tree",
            Scenario::Restore => "restore",
            Scenario::Verify => "verify",
            Scenario::Concurrent => "concurrent",
            Scenario::LowMemory => "low-memory",
            Scenario::SlowTarget => "slow-target",
            Scenario::MillionFiles => "million-files",
            Scenario::Scale => "scale",
        }
    }
}

impl std::str::FromStr for Scenario {
    type Err = BenchError;
    fn from_str(s: &str) -> Result<Self> {
        Scenario::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| BenchError::Unknown {
                kind: "scenario",
                name: s.into(),
                known: Scenario::ALL.map(Scenario::name).join(", "),
            })
    }
}

/// How caches are treated before each measured step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CachePolicy {
    /// `sync; echo 3 > /proc/sys/vm/drop_caches` when allowed (root), else warm and stated.
    Cold,
    /// Leave the caches as they are.
    Warm,
}

/// What `vouch bench run` should do.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Where data, repositories, logs and results go.
    pub workdir: PathBuf,
    /// Size of the run.
    pub scale: Scale,
    /// Peers to run side by side (restic, rustic, borg).
    pub peers: Vec<Tool>,
    /// The vouch binary to measure.
    pub vouch: PathBuf,
    /// Scenarios (empty: all).
    pub scenarios: Vec<Scenario>,
    /// Real data for `source-tree` (default `$VOUCH_BENCH_DIR` or /var/tmp/vouch-bench).
    pub data: Option<PathBuf>,
    /// Cache policy.
    pub cache: CachePolicy,
    /// Memory limit of `low-memory`, in MiB.
    pub memory_limit_mib: u64,
    /// The command line, recorded with the results.
    pub command_line: String,
    /// Progress lines (stderr in the CLI).
    pub quiet: bool,
}

impl RunOptions {
    /// The scenarios to run, in order, with the ones `restore` and `verify` need.
    pub fn planned(&self) -> Vec<Scenario> {
        let mut want: Vec<Scenario> = if self.scenarios.is_empty() {
            Scenario::ALL.to_vec()
        } else {
            self.scenarios.clone()
        };
        if (want.contains(&Scenario::Restore) || want.contains(&Scenario::Verify))
            && !want.contains(&Scenario::SourceTree)
        {
            want.push(Scenario::SourceTree);
        }
        Scenario::ALL
            .into_iter()
            .filter(|s| want.contains(s))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for s in Scenario::ALL {
            assert_eq!(s.name().parse::<Scenario>().unwrap(), s);
        }
        let e = "fast".parse::<Scenario>().unwrap_err().to_string();
        assert!(e.contains("large-file"), "{e}");
        assert_eq!("medium".parse::<Scale>().unwrap(), Scale::Medium);
        assert!("huge".parse::<Scale>().is_err());
    }

    #[test]
    fn restore_and_verify_pull_in_the_source_tree() {
        let o = RunOptions {
            workdir: "/tmp/x".into(),
            scale: Scale::Small,
            peers: vec![],
            vouch: "vouch".into(),
            scenarios: vec![Scenario::Verify, Scenario::LargeFile],
            data: None,
            cache: CachePolicy::Warm,
            memory_limit_mib: 160,
            command_line: String::new(),
            quiet: true,
        };
        assert_eq!(
            o.planned(),
            vec![Scenario::LargeFile, Scenario::SourceTree, Scenario::Verify]
        );
    }
}
