//! `vouch bench run`, `vouch bench primitives`, `vouch bench service` and
//! `vouch bench point`.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Subcommand};

use super::Ctx;
use crate::bench::{
    self, CachePolicy, LoadOptions, PrimitivesOptions, RunOptions, Scale, Scenario, ServiceOptions,
    Tool,
};
use crate::error::{exit_code, Result};

/// `vouch bench`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  vouch bench primitives --out primitives.md
  vouch bench run --workdir /var/tmp/vouch-bench-work --scale medium --peers restic,borg

EXIT STATUS
  0  measured; 1 it failed")]
pub struct BenchArgs {
    /// What to measure.
    #[command(subcommand)]
    pub command: BenchCommand,
}

/// `vouch bench` subcommands.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Run scenarios with real binaries, side by side with peers.
    Run(RunArgs),
    /// MiB/s of chunking, hashing, compression, encryption and the whole pipeline.
    Primitives(PrimitivesArgs),
    /// `vouch serve` at scale: restart to ready and latency under load, on a
    /// generated event log.
    Service(ServiceArgs),
    /// `vouch serve` handling one large point: one real backup through the
    /// service, the way to recoverable, the routes that read the point
    /// under load.
    Point(PointArgs),
}

/// `vouch bench point`.
#[derive(Args, Debug)]
pub struct PointArgs {
    /// Work directory: serve's data directory and log go there.
    #[arg(long)]
    pub workdir: PathBuf,
    /// The tree the service backs up (the million-files data set of
    /// `vouch bench run --scale large`, say).
    #[arg(long)]
    pub source: PathBuf,
    /// Concurrent keep-alive clients of the load generator.
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// Warm-up seconds per route (not measured).
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Longest measured seconds per route.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Most measured requests per route.
    #[arg(long, default_value_t = 5_000)]
    pub max_requests: u64,
    /// Longest wait for the backup, and again for the point to settle.
    #[arg(long, default_value = "30min", value_parser = humantime::parse_duration)]
    pub timeout: std::time::Duration,
    /// The vouch binary to measure (default: this one).
    #[arg(long)]
    pub vouch_bin: Option<PathBuf>,
    /// Write the Markdown report to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `vouch bench service`.
#[derive(Args, Debug)]
pub struct ServiceArgs {
    /// Work directory: the generated data directory and serve's logs go there.
    #[arg(long)]
    pub workdir: PathBuf,
    /// Events in the generated log.
    #[arg(long, default_value_t = 1_000_000)]
    pub events: u64,
    /// Recovery points in the generated log.
    #[arg(long, default_value_t = 10_000)]
    pub points: u64,
    /// Plans the points belong to.
    #[arg(long, default_value_t = 100)]
    pub plans: u64,
    /// Concurrent keep-alive clients of the load generator.
    #[arg(long, default_value_t = 32)]
    pub clients: usize,
    /// Warm-up seconds per endpoint (not measured).
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Longest measured seconds per endpoint.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Most measured requests per endpoint.
    #[arg(long, default_value_t = 20_000)]
    pub max_requests: u64,
    /// Reuse the data directory of an earlier run with the same sizes.
    #[arg(long)]
    pub reuse: bool,
    /// The vouch binary to measure (default: this one).
    #[arg(long)]
    pub vouch_bin: Option<PathBuf>,
    /// Write the Markdown report to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `vouch bench run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Work directory: data, repositories, logs and results go there.
    #[arg(long)]
    pub workdir: PathBuf,
    /// small (a few minutes), medium (the documented run), large (hours).
    #[arg(long, value_enum, default_value_t = Scale::Small)]
    pub scale: Scale,
    /// Peers to run side by side: restic, rustic, borg (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = clap::builder::TypedValueParser::try_map(
            clap::builder::PossibleValuesParser::new(["restic", "rustic", "borg"]),
            |s| s.parse::<Tool>()
        )
    )]
    pub peers: Vec<Tool>,
    /// Scenarios to run (repeatable or comma-separated; default: all).
    #[arg(long, value_delimiter = ',')]
    pub scenario: Vec<Scenario>,
    /// Real data for source-tree: a directory holding linux-6.1 and
    /// linux-6.12 (then backed up in turn at the same path), or any tree.
    /// Default: $VOUCH_BENCH_DIR or /var/tmp/vouch-bench.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Write the Markdown report to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The vouch binary to measure (default: this one).
    #[arg(long)]
    pub vouch_bin: Option<PathBuf>,
    /// Do not drop caches before steps (default: drop them when root).
    #[arg(long)]
    pub warm: bool,
    /// Memory limit of the low-memory scenario, in MiB.
    #[arg(long, default_value_t = 160)]
    pub memory_limit_mib: u64,
}

/// `vouch bench primitives`.
#[derive(Args, Debug)]
pub struct PrimitivesArgs {
    /// Real data: a directory whose files are concatenated (default: linux-6.1
    /// under $VOUCH_BENCH_DIR or /var/tmp/vouch-bench, if present).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Buffer per kind of data, in MiB.
    #[arg(long, default_value_t = 64)]
    pub buffer_mib: usize,
    /// zstd level (the repository default).
    #[arg(long, default_value_t = 3)]
    pub level: i32,
    /// Seconds per figure (at least one pass).
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Threads for the all-core column (0: all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Write the Markdown table to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs `vouch bench`.
pub fn run(ctx: &Ctx, a: BenchArgs) -> Result<i32> {
    let outcome = match a.command {
        BenchCommand::Run(r) => run_scenarios(ctx, r),
        BenchCommand::Primitives(p) => primitives(ctx, p),
        BenchCommand::Service(s) => service(ctx, s),
        BenchCommand::Point(p) => point(ctx, p),
    };
    match outcome {
        Ok(()) => Ok(exit_code::OK),
        Err(e) => {
            if ctx.out.json {
                ctx.out.json_line(&serde_json::json!({
                    "type": "error", "error": format!("{e:#}"), "exit_code": exit_code::FAILURE,
                }));
            }
            eprintln!("vouch bench: {e:#}");
            Ok(if crate::util::interrupted() {
                exit_code::INTERRUPTED
            } else {
                exit_code::FAILURE
            })
        }
    }
}

fn command_line() -> String {
    std::env::args()
        .map(|a| {
            if a.contains([' ', '"', '\'']) {
                format!("'{a}'")
            } else {
                a
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn emit(
    ctx: &Ctx,
    json: &impl serde::Serialize,
    md: String,
    out: Option<PathBuf>,
) -> anyhow::Result<()> {
    if let Some(path) = out {
        std::fs::write(&path, &md).with_context(|| format!("writing {}", path.display()))?;
    }
    if ctx.out.json {
        ctx.out.json_line(json);
    } else if !ctx.out.quiet {
        println!("{md}");
    }
    Ok(())
}

fn run_scenarios(ctx: &Ctx, a: RunArgs) -> anyhow::Result<()> {
    let vouch = match a.vouch_bin {
        Some(p) => p,
        None => std::env::current_exe().context("finding this vouch binary")?,
    };
    let o = RunOptions {
        workdir: a.workdir,
        scale: a.scale,
        peers: a.peers,
        vouch,
        scenarios: a.scenario,
        data: a.data,
        cache: if a.warm {
            CachePolicy::Warm
        } else {
            CachePolicy::Cold
        },
        memory_limit_mib: a.memory_limit_mib,
        command_line: command_line(),
        quiet: ctx.out.quiet || ctx.out.json,
    };
    let report = bench::run(&o).context("benchmark run")?;
    let md = report.to_markdown();
    emit(ctx, &report, md, a.out)
}

fn primitives(ctx: &Ctx, a: PrimitivesArgs) -> anyhow::Result<()> {
    let o = PrimitivesOptions {
        real_data: a.data,
        buffer_mib: a.buffer_mib,
        level: a.level,
        min_seconds: a.seconds,
        threads: a.threads,
    };
    let report = bench::run_primitives(&o, command_line()).context("primitives")?;
    let md = report.to_markdown();
    emit(ctx, &report, md, a.out)
}

fn seconds(s: f64, what: &str) -> anyhow::Result<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(s)
        .map_err(|_| anyhow::anyhow!("--{what} must be a number of seconds, not {s}"))
}

/// The vouch binary a service benchmark measures: `--vouch-bin`, else this one.
fn vouch_bin(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match given {
        Some(p) => Ok(p),
        None => std::env::current_exe().context("finding this vouch binary"),
    }
}

/// The load generator's bounds from the command line.
fn load_options(
    clients: usize,
    warmup: f64,
    secs: f64,
    max_requests: u64,
) -> anyhow::Result<LoadOptions> {
    Ok(LoadOptions {
        clients: clients.max(1),
        warmup: seconds(warmup, "warmup")?,
        duration: seconds(secs, "seconds")?,
        max_requests: max_requests.max(1),
    })
}

fn point(ctx: &Ctx, a: PointArgs) -> anyhow::Result<()> {
    let o = bench::PointOptions {
        workdir: a.workdir,
        source: a.source,
        load: load_options(a.clients, a.warmup, a.seconds, a.max_requests)?,
        timeout: a.timeout,
        vouch: vouch_bin(a.vouch_bin)?,
        command_line: command_line(),
        quiet: ctx.out.quiet || ctx.out.json,
    };
    let report = bench::run_point(&o).context("point benchmark")?;
    let md = report.to_markdown();
    emit(ctx, &report, md, a.out)
}

fn service(ctx: &Ctx, a: ServiceArgs) -> anyhow::Result<()> {
    let o = ServiceOptions {
        workdir: a.workdir,
        events: a.events,
        points: a.points,
        plans: a.plans,
        load: load_options(a.clients, a.warmup, a.seconds, a.max_requests)?,
        reuse: a.reuse,
        vouch: vouch_bin(a.vouch_bin)?,
        command_line: command_line(),
        quiet: ctx.out.quiet || ctx.out.json,
    };
    let report = bench::run_service(&o).context("service benchmark")?;
    let md = report.to_markdown();
    emit(ctx, &report, md, a.out)
}
