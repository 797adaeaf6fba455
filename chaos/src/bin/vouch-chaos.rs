//! `vouch-chaos` (also run as `vouch chaos`): the chaos harness. `run`
//! breaks a deployment it controls on purpose and checks that nothing was
//! lost; `list` names the scenarios; `replay` reruns a report's schedule.
//! See docs/chaos.md.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use vouch_chaos::runner::{self, report, scenario::Scenario, RunOptions};

/// Breaks a Vouch deployment on purpose and checks that nothing was lost.
#[derive(Parser, Debug)]
#[command(
    name = "vouch chaos",
    bin_name = "vouch chaos",
    version,
    after_help = "EXIT STATUS:\n  0  every invariant held\n  1  an invariant was violated (the report says which, and how to replay)\n  2  usage error\n  3  the run could not be made (the deployment did not start)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a deployment, inject faults for a while, check every invariant.
    #[command(
        after_help = "Examples:\n  vouch chaos run --seed 1 --duration 10m\n  vouch chaos run --seed 7 --duration 2m --scenario crash --scenario network --report /tmp/chaos.json\n  vouch chaos run --duration 1h --report soak.json   # an hour-long soak"
    )]
    Run(RunArgs),
    /// Name the scenarios and their faults.
    List {
        /// JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Run a report's schedule again (same seed, duration, scenarios, agents).
    #[command(after_help = "Examples:\n  vouch chaos replay /tmp/chaos.json")]
    Replay {
        /// A JSON report written by `run --report`.
        file: PathBuf,
        #[command(flatten)]
        common: CommonArgs,
    },
}

#[derive(Args, Debug)]
struct RunArgs {
    /// The seed (default: from the clock; printed, and in the report).
    #[arg(long)]
    seed: Option<u64>,
    /// How long faults are injected; the end checks come after.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// A scenario (repeatable; default: all). `vouch chaos list` names them.
    #[arg(long = "scenario", value_name = "NAME")]
    scenarios: Vec<Scenario>,
    /// Agents in the deployment.
    #[arg(long, default_value_t = 2)]
    agents: usize,
    /// Print the schedule the seed makes (the faults and when), run nothing.
    #[arg(long)]
    dry_run: bool,
    /// Watch a deployment you run instead of starting one
    /// (`http://HOST:PORT`; plain HTTP, e.g. through an SSH tunnel): nothing
    /// is injected, the API-level invariants are checked for --duration.
    #[arg(long, requires = "token_file", value_name = "URL")]
    server: Option<String>,
    /// The token for --server (a viewer token suffices).
    #[arg(long, requires = "server", value_name = "FILE")]
    token_file: Option<PathBuf>,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Args, Debug)]
struct CommonArgs {
    /// The `vouch` binary (default: the one `vouch chaos` was run as, else
    /// the one beside this program, else PATH).
    #[arg(long, env = "VOUCH_BIN")]
    vouch: Option<PathBuf>,
    /// Where the deployment lives; kept after the run with every log
    /// (default: a new directory in the temporary directory).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Write the report here as JSON, and as Markdown beside it (.md).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Print the JSON report on stdout instead of the Markdown one.
    #[arg(long)]
    json: bool,
    /// How long the service may take to be ready after a fault.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    recovery_limit: Duration,
    /// How long the service may take to find injected damage.
    #[arg(long, default_value = "150s", value_parser = humantime::parse_duration)]
    detection_window: Duration,
    /// A real directory copied as one plan's source (default: /usr/share/doc).
    #[arg(long)]
    real_tree: Option<PathBuf>,
    /// No plan on a real directory.
    #[arg(long, conflicts_with = "real_tree")]
    no_real_tree: bool,
    /// Print nothing while the run goes on.
    #[arg(long, short)]
    quiet: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The first SIGINT or SIGTERM stops the deployment and ends the run
    // (no processes or mounts left behind); a second exits at once.
    let _ = ctrlc::set_handler(|| {
        if vouch::util::interrupted() {
            std::process::exit(130);
        }
        vouch::util::set_interrupted();
    });
    match cli.command {
        Command::List { json } => {
            list(json);
            ExitCode::SUCCESS
        }
        Command::Run(a) => {
            let seed = a.seed.unwrap_or_else(vouch_chaos::Rng::seed_from_clock);
            let scenarios = if a.scenarios.is_empty() {
                Scenario::ALL.to_vec()
            } else {
                a.scenarios
            };
            if a.dry_run {
                print_schedule(seed, a.duration, &scenarios);
                return ExitCode::SUCCESS;
            }
            if let (Some(url), Some(token_file)) = (&a.server, &a.token_file) {
                return watch(url, token_file, a.duration, &a.common);
            }
            go(seed, a.duration, scenarios, a.agents, a.common)
        }
        Command::Replay { file, common } => {
            let key = match std::fs::read_to_string(&file)
                .map_err(|e| e.to_string())
                .and_then(|t| report::replay_key(&t))
            {
                Ok(k) => k,
                Err(e) => {
                    eprintln!("vouch chaos replay: {}: {e}", file.display());
                    return ExitCode::from(2);
                }
            };
            go(
                key.seed,
                Duration::from_secs(key.duration_s),
                key.scenarios,
                key.agents,
                common,
            )
        }
    }
}

fn watch(url: &str, token_file: &PathBuf, duration: Duration, c: &CommonArgs) -> ExitCode {
    let addr = url
        .strip_prefix("http://")
        .map(|rest| rest.trim_end_matches('/'))
        .and_then(|hp| {
            use std::net::ToSocketAddrs;
            hp.to_socket_addrs().ok().and_then(|mut a| a.next())
        });
    let Some(server) = addr else {
        eprintln!(
            "vouch chaos: --server takes http://HOST:PORT (plain HTTP; reach an HTTPS service \
             through a local listener or an SSH tunnel)"
        );
        return ExitCode::from(2);
    };
    let token = match std::fs::read_to_string(token_file) {
        Ok(t) => t.trim().to_owned(),
        Err(e) => {
            eprintln!("vouch chaos: reading {}: {e}", token_file.display());
            return ExitCode::from(2);
        }
    };
    let opts = runner::AttachOptions {
        server,
        token,
        duration,
        sample_every: Duration::from_secs(3),
    };
    match runner::attach(opts) {
        Ok(report) => emit(&report, c),
        Err(e) => {
            eprintln!("vouch chaos: {e}");
            ExitCode::from(3)
        }
    }
}

fn print_schedule(seed: u64, duration: Duration, scenarios: &[Scenario]) {
    let plan = vouch_chaos::runner::scenario::schedule(seed, duration, scenarios);
    let steps = plan.iter().filter(|p| p.fault.is_none()).count();
    println!(
        "seed {seed}, {}: {steps} workload steps and these faults:",
        humantime::format_duration(duration)
    );
    for p in plan {
        if let Some(f) = p.fault {
            println!("{:8.1} s  {}", p.at_ms as f64 / 1000.0, f.name());
        }
    }
}

fn list(json: bool) {
    if json {
        let v: Vec<_> = Scenario::ALL
            .iter()
            .map(|s| {
                serde_json::json!({
                    "name": s.name(),
                    "description": s.describe(),
                    "faults": s.faults().iter().map(|f| f.name()).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(v));
        return;
    }
    for s in Scenario::ALL {
        let faults: Vec<String> = s.faults().iter().map(|f| f.name()).collect();
        println!(
            "{:<12} {}\n{:<12} faults: {}",
            s.name(),
            s.describe(),
            "",
            faults.join(", ")
        );
    }
}

fn go(
    seed: u64,
    duration: Duration,
    mut scenarios: Vec<Scenario>,
    agents: usize,
    c: CommonArgs,
) -> ExitCode {
    scenarios.sort();
    scenarios.dedup();
    let work = c.work_dir.clone().unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        std::env::temp_dir().join(format!("vouch-chaos-{seed}-{secs}"))
    });
    if work.exists() && std::fs::read_dir(&work).is_ok_and(|mut d| d.next().is_some()) {
        eprintln!(
            "vouch chaos: {} is not empty; give a new --work-dir",
            work.display()
        );
        return ExitCode::from(2);
    }
    let work = match std::fs::create_dir_all(&work).and_then(|()| std::path::absolute(&work)) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("vouch chaos: creating {}: {e}", work.display());
            return ExitCode::from(3);
        }
    };
    let opts = RunOptions {
        seed,
        duration,
        scenarios,
        vouch: c.vouch.clone().unwrap_or_else(runner::default_vouch),
        work: work.clone(),
        agents,
        recovery_limit: c.recovery_limit,
        detection_window: c.detection_window,
        real_tree: if c.no_real_tree {
            None
        } else {
            c.real_tree.clone().or_else(runner::default_real_tree)
        },
        sample_every: Duration::from_secs(3),
        progress: !c.quiet,
    };
    if !c.quiet {
        eprintln!(
            "vouch chaos: seed {seed}, {} of faults, work directory {}",
            humantime::format_duration(duration),
            work.display()
        );
    }
    let report = match runner::run(opts) {
        Ok(r) => r,
        Err(e @ runner::RunError::Interrupted(_)) => {
            eprintln!("vouch chaos: {e}");
            return ExitCode::from(130);
        }
        Err(e) => {
            eprintln!("vouch chaos: the run could not be made: {e}");
            return ExitCode::from(3);
        }
    };
    emit(&report, &c)
}

/// Writes the report where asked; the exit code of its verdict.
fn emit(report: &report::Report, c: &CommonArgs) -> ExitCode {
    let json = serde_json::to_string_pretty(report).unwrap_or_default();
    let md = report.markdown();
    if let Some(path) = &c.report {
        let written = std::fs::write(path, &json)
            .and_then(|()| std::fs::write(path.with_extension("md"), &md));
        if let Err(e) = written {
            eprintln!("vouch chaos: writing {}: {e}", path.display());
        }
    }
    if c.json {
        println!("{json}");
    } else {
        println!("{md}");
    }
    if report.held() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
