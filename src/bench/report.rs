//! The results model and its Markdown rendering. A step's data kind comes
//! from a checked data set ([`Incompressible`] or [`RealData`]), so a
//! throughput row cannot exist without incompressible data behind it.

use std::fmt::Write as _;

use serde::Serialize;

use super::conditions::Conditions;
use super::data::{DataKind, DataSet, Incompressible, Mixed, RealData};
use super::measure::{CacheState, MemoryOutcome, Usage};

const MIB: f64 = 1048576.0;

/// One tool's figures for one step.
#[derive(Clone, Debug, Serialize)]
pub struct ToolResult {
    /// Tool name.
    pub tool: String,
    /// Processes measured (4 for `concurrent`).
    pub processes: usize,
    /// Wall time in seconds (first start to last exit).
    pub wall_s: f64,
    /// User CPU seconds (sum).
    pub user_s: f64,
    /// System CPU seconds (sum).
    pub sys_s: f64,
    /// (user + sys) / wall.
    pub cores_used: f64,
    /// Peak RSS in MiB (largest process).
    pub peak_rss_mib: f64,
    /// MiB read from block devices (rusage inblock).
    pub disk_read_mib: f64,
    /// MiB read by read-like calls (/proc/pid/io rchar, sampled: a lower bound).
    pub read_mib: f64,
    /// MiB added to the repository by this step.
    pub repo_added_mib: f64,
    /// Repository size after the step in MiB.
    pub repo_size_mib: f64,
    /// Source files per second.
    pub files_per_s: f64,
    /// Source MiB per second.
    pub mib_per_s: f64,
    /// Cache state before the step.
    pub cache: CacheState,
    /// 1-minute load average just before the step.
    pub load_before: f64,
    /// Memory group figures (`low-memory`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryOutcome>,
    /// MiB that crossed the network, both directions (`slow-target`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_mib: Option<f64>,
}

impl ToolResult {
    /// Builds a result from the usage of its processes.
    #[allow(clippy::too_many_arguments)]
    pub fn from_usage(
        tool: &str,
        usages: &[Usage],
        wall_s: f64,
        source_bytes: u64,
        source_files: u64,
        repo_before: u64,
        repo_after: u64,
        cache: CacheState,
        load_before: f64,
    ) -> Self {
        let user_s: f64 = usages.iter().map(|u| u.user_s).sum();
        let sys_s: f64 = usages.iter().map(|u| u.sys_s).sum();
        let per_s = |x: f64| if wall_s > 0.0 { x / wall_s } else { 0.0 };
        Self {
            tool: tool.into(),
            processes: usages.len(),
            wall_s,
            user_s,
            sys_s,
            cores_used: per_s(user_s + sys_s),
            peak_rss_mib: usages.iter().map(|u| u.max_rss_kib).max().unwrap_or(0) as f64 / 1024.0,
            disk_read_mib: usages.iter().map(|u| u.disk_read_bytes).sum::<u64>() as f64 / MIB,
            read_mib: usages.iter().map(|u| u.read_bytes).sum::<u64>() as f64 / MIB,
            repo_added_mib: repo_after.saturating_sub(repo_before) as f64 / MIB,
            repo_size_mib: repo_after as f64 / MIB,
            files_per_s: per_s(source_files as f64),
            mib_per_s: per_s(source_bytes as f64 / MIB),
            cache,
            load_before,
            memory: None,
            network_mib: None,
        }
    }
}

/// Vouch against one peer on one step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ratio {
    /// The peer.
    pub peer: String,
    /// vouch wall / peer wall (below 1: vouch is faster).
    pub wall: Option<f64>,
    /// vouch repository size / peer's (below 1: vouch is smaller).
    pub repo_size: Option<f64>,
}

/// The ratios of vouch to each other tool in `results`.
pub fn ratios(results: &[ToolResult]) -> Vec<Ratio> {
    let Some(v) = results.iter().find(|r| r.tool == "vouch") else {
        return Vec::new();
    };
    let div = |a: f64, b: f64| (a > 0.0 && b > 0.0).then(|| a / b);
    results
        .iter()
        .filter(|r| r.tool != "vouch")
        .map(|p| Ratio {
            peer: p.tool.clone(),
            wall: div(v.wall_s, p.wall_s),
            repo_size: div(v.repo_size_mib, p.repo_size_mib),
        })
        .collect()
}

/// One measured step of a scenario.
#[derive(Clone, Debug, Serialize)]
pub struct StepResult {
    /// What was done.
    pub name: String,
    /// Kind of data (from the checked data set).
    pub data_kind: DataKind,
    /// Source bytes.
    pub data_bytes: u64,
    /// Source files.
    pub data_files: u64,
    /// Per tool.
    pub results: Vec<ToolResult>,
    /// vouch / peer.
    pub ratios: Vec<Ratio>,
}

impl StepResult {
    /// A throughput step: only incompressible data qualifies.
    pub fn throughput(name: impl Into<String>, data: &Incompressible) -> Self {
        Self::new(name.into(), data.data())
    }

    /// A real-world step on real data.
    pub fn real(name: impl Into<String>, data: &RealData) -> Self {
        Self::new(name.into(), data.data())
    }

    /// A scale step on a generated mixed tree.
    pub fn mixed(name: impl Into<String>, data: &Mixed) -> Self {
        Self::new(name.into(), data.data())
    }

    fn new(name: String, d: &DataSet) -> Self {
        Self {
            name,
            data_kind: d.kind,
            data_bytes: d.bytes,
            data_files: d.files,
            results: Vec::new(),
            ratios: Vec::new(),
        }
    }

    /// Adds a tool's result and recomputes the ratios.
    pub fn push(&mut self, r: ToolResult) {
        self.results.push(r);
        self.ratios = ratios(&self.results);
    }
}

/// One scenario.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioResult {
    /// Its name.
    pub name: String,
    /// The data sets it used.
    pub data: Vec<DataSet>,
    /// Why it did not run, if it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Remarks (how a limit was applied, ...).
    pub notes: Vec<String>,
    /// Its steps.
    pub steps: Vec<StepResult>,
}

impl ScenarioResult {
    /// An empty scenario result.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            data: Vec::new(),
            skipped: None,
            notes: Vec::new(),
            steps: Vec::new(),
        }
    }

    /// A scenario that did not run, with the reason.
    pub fn skipped(name: &str, why: impl Into<String>) -> Self {
        Self {
            skipped: Some(why.into()),
            ..Self::new(name)
        }
    }
}

/// A whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `bench-<UTC time>`.
    pub run_id: String,
    /// Conditions.
    pub conditions: Conditions,
    /// Scenarios in run order.
    pub scenarios: Vec<ScenarioResult>,
    /// Warnings (load, cache state).
    pub warnings: Vec<String>,
}

fn mib(x: f64) -> String {
    if x >= 10240.0 {
        format!("{:.1} GiB", x / 1024.0)
    } else {
        format!("{x:.0} MiB")
    }
}

fn cell(r: &ToolResult, throughput: bool) -> String {
    let mut s = format!(
        "{:.2} s (cpu {:.1} s, {:.0} MiB",
        r.wall_s,
        r.user_s + r.sys_s,
        r.peak_rss_mib
    );
    if throughput {
        let _ = write!(s, "; {:.0} MiB/s", r.mib_per_s);
    }
    s.push(')');
    s
}

fn ratio(x: Option<f64>) -> String {
    x.map_or_else(|| "–".into(), |x| format!("{x:.2}"))
}

impl Report {
    /// Tool names in column order (vouch first).
    fn tools(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for sc in &self.scenarios {
            for st in &sc.steps {
                for r in &st.results {
                    if !names.contains(&r.tool) {
                        names.push(r.tool.clone());
                    }
                }
            }
        }
        // vouch first, the peers in the order they ran.
        names.sort_by_key(|n| n != "vouch");
        names
    }

    /// The Markdown that `docs/performance.md` embeds: conditions, the side
    /// by side table, repository sizes, skipped scenarios, the details.
    pub fn to_markdown(&self) -> String {
        let tools = self.tools();
        let peers: Vec<&String> = tools.iter().filter(|t| *t != "vouch").collect();
        let mut md = String::new();
        let _ = writeln!(md, "{}\n", self.conditions.to_markdown());
        let _ = writeln!(md, "Reproduce: `{}`\n", self.conditions.command_line);
        let _ = writeln!(
            md,
            "Cells: wall time (user + system CPU of the tool's processes, peak RSS; MiB/s of \
             source data for throughput steps). Ratios: vouch's wall time / the peer's (below 1: \
             vouch is faster).\n"
        );
        let mut head = String::from("| scenario | step | data |");
        let mut rule = String::from("|---|---|---|");
        for t in &tools {
            let _ = write!(head, " {t} |");
            rule.push_str("---|");
        }
        for p in &peers {
            let _ = write!(head, " vouch/{p} |");
            rule.push_str("---|");
        }
        let _ = writeln!(md, "{head}\n{rule}");
        for sc in &self.scenarios {
            for st in &sc.steps {
                let throughput = st.data_kind != DataKind::Real;
                let data = format!(
                    "{}, {} files, {}",
                    match st.data_kind {
                        DataKind::Incompressible => "random",
                        DataKind::Real => "real",
                        DataKind::Mixed => "mixed",
                    },
                    st.data_files,
                    mib(st.data_bytes as f64 / MIB)
                );
                let _ = write!(md, "| {} | {} | {} |", sc.name, st.name, data);
                for t in &tools {
                    let c = st
                        .results
                        .iter()
                        .find(|r| &r.tool == t)
                        .map_or_else(String::new, |r| cell(r, throughput));
                    let _ = write!(md, " {c} |");
                }
                for p in &peers {
                    let r = st
                        .ratios
                        .iter()
                        .find(|r| &r.peer == *p)
                        .and_then(|r| r.wall);
                    let _ = write!(md, " {} |", ratio(r));
                }
                md.push('\n');
            }
        }
        // Repository sizes after the last step of each scenario.
        let _ = writeln!(md, "\nRepository size after each scenario's last step:\n");
        let mut head = String::from("| scenario |");
        let mut rule = String::from("|---|");
        for t in &tools {
            let _ = write!(head, " {t} |");
            rule.push_str("---|");
        }
        for p in &peers {
            let _ = write!(head, " vouch/{p} |");
            rule.push_str("---|");
        }
        let _ = writeln!(md, "{head}\n{rule}");
        for sc in &self.scenarios {
            // restore and verify use the source-tree repositories.
            if matches!(sc.name.as_str(), "restore" | "verify") {
                continue;
            }
            let Some(st) = sc.steps.last() else { continue };
            if st.results.iter().all(|r| r.repo_size_mib == 0.0) {
                continue;
            }
            let _ = write!(md, "| {} |", sc.name);
            for t in &tools {
                let c = st
                    .results
                    .iter()
                    .find(|r| &r.tool == t)
                    .map_or_else(String::new, |r| mib(r.repo_size_mib));
                let _ = write!(md, " {c} |");
            }
            for p in &peers {
                let r = st
                    .ratios
                    .iter()
                    .find(|r| &r.peer == *p)
                    .and_then(|r| r.repo_size);
                let _ = write!(md, " {} |", ratio(r));
            }
            md.push('\n');
        }
        let notes: Vec<String> = self
            .scenarios
            .iter()
            .flat_map(|sc| {
                sc.skipped
                    .iter()
                    .map(move |s| format!("- `{}` skipped: {s}", sc.name))
                    .chain(
                        sc.notes
                            .iter()
                            .map(move |n| format!("- `{}`: {n}", sc.name)),
                    )
            })
            .chain(self.warnings.iter().map(|w| format!("- warning: {w}")))
            .collect();
        if !notes.is_empty() {
            let _ = writeln!(md, "\n{}", notes.join("\n"));
        }
        let _ = writeln!(
            md,
            "\n<details><summary>All figures per tool and step</summary>\n\n\
             | scenario | step | tool | wall s | user s | sys s | cores | peak RSS MiB | disk read MiB | read MiB | added MiB | repo MiB | files/s | MiB/s | network MiB | cache | load |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for sc in &self.scenarios {
            for st in &sc.steps {
                for r in &st.results {
                    let _ = writeln!(
                        md,
                        "| {} | {} | {} | {:.2} | {:.1} | {:.1} | {:.2} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.0} | {:.0} | {} | {} | {:.2} |",
                        sc.name,
                        st.name,
                        r.tool,
                        r.wall_s,
                        r.user_s,
                        r.sys_s,
                        r.cores_used,
                        r.peak_rss_mib,
                        r.disk_read_mib,
                        r.read_mib,
                        r.repo_added_mib,
                        r.repo_size_mib,
                        r.files_per_s,
                        r.mib_per_s,
                        r.network_mib.map_or_else(String::new, |n| format!("{n:.2}")),
                        match r.cache {
                            CacheState::Cold => "cold",
                            CacheState::Warm => "warm",
                        },
                        r.load_before
                    );
                }
            }
        }
        let _ = writeln!(md, "\n</details>");
        md
    }
}
