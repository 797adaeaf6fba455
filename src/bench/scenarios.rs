//! Running the scenarios: data, fresh repositories, measured steps.
//!
//! Layout of the work directory: `data/` (generated random data, kept and
//! reused), `repos/<scenario>-<tool>` (reset at every run unless a scenario
//! reuses one), `logs/` (each tool's output per step), `cache/` (restic's
//! and borg's caches, reset per run), `results/<run id>.json`.

mod scale;
mod slow_target;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::conditions::{loadavg, Conditions};
use super::data::{ensure_random_file, ensure_random_files, Incompressible, RealData};
use super::measure::{self, dir_size, drop_caches, CacheState, LimitedGroup, MemoryLimiter};
use super::report::{Report, ScenarioResult, StepResult, ToolResult};
use super::tools::Tool;
use super::{BenchError, CachePolicy, Ctx, Result, RunOptions, Scale, Scenario};

/// Load average above which a step is flagged as disturbed.
const LOAD_WARN: f64 = 0.5;

struct Runner<'a> {
    o: &'a RunOptions,
    tools: Vec<Tool>,
    warnings: Vec<String>,
    /// The source-tree repositories and borg's last archive per tool.
    tree_repos: Vec<(Tool, PathBuf, String)>,
    run_stamp: String,
    steps_measured: usize,
    steps_loaded: usize,
    max_load: f64,
}

/// Runs the planned scenarios and returns the report (also written as JSON
/// to `results/<run id>.json` in the work directory).
pub fn run(o: &RunOptions) -> Result<Report> {
    fs::create_dir_all(&o.workdir).ctx(|| format!("creating {}", o.workdir.display()))?;
    let workdir =
        fs::canonicalize(&o.workdir).ctx(|| format!("resolving {}", o.workdir.display()))?;
    let o = &RunOptions {
        workdir,
        ..o.clone()
    };
    for d in ["data", "repos", "logs", "results"] {
        let p = o.workdir.join(d);
        fs::create_dir_all(&p).ctx(|| format!("creating {}", p.display()))?;
    }
    let cache = o.workdir.join("cache");
    if cache.exists() {
        fs::remove_dir_all(&cache).ctx(|| format!("resetting {}", cache.display()))?;
    }
    let mut tools = vec![Tool::Vouch(o.vouch.clone())];
    tools.extend(
        o.peers
            .iter()
            .filter(|t| !matches!(t, Tool::Vouch(_)))
            .cloned(),
    );
    let conditions = Conditions::record(
        &o.workdir,
        o.scale,
        o.cache,
        tools.iter().map(Tool::info).collect(),
        o.command_line.clone(),
    );
    let stamp = conditions
        .date_utc
        .replace([':', '-'], "")
        .trim_end_matches('Z')
        .to_string();
    let mut r = Runner {
        o,
        tools,
        warnings: Vec::new(),
        tree_repos: Vec::new(),
        run_stamp: stamp.clone(),
        steps_measured: 0,
        steps_loaded: 0,
        max_load: 0.0,
    };
    if conditions.cache_policy == CachePolicy::Cold && !conditions.root {
        r.warnings
            .push("not root: caches could not be dropped, every step ran warm".into());
    }
    let mut scenarios = Vec::new();
    for s in o.planned() {
        if crate::util::interrupted() {
            return Err(BenchError::Interrupted);
        }
        r.say(&format!("== {}", s.name()));
        let res = match s {
            Scenario::LargeFile => r.large_file(),
            Scenario::ManySmall => r.many_small(),
            Scenario::RerunUnchanged => r.rerun_unchanged(),
            Scenario::SourceTree => r.source_tree(),
            Scenario::Restore => r.restore(),
            Scenario::Verify => r.verify(),
            Scenario::Concurrent => r.concurrent(),
            Scenario::LowMemory => r.low_memory(),
            Scenario::SlowTarget => r.slow_target(),
            Scenario::MillionFiles => r.million_files(),
            Scenario::Scale => r.scale(),
        }?;
        if let Some(why) = &res.skipped {
            r.say(&format!("   skipped: {why}"));
        }
        scenarios.push(res);
    }
    if r.steps_loaded > 0 {
        r.warnings.push(format!(
            "the 1-minute load average was above {LOAD_WARN} before {} of {} measured steps \
             (at most {:.2}): other work was running (see the load column)",
            r.steps_loaded, r.steps_measured, r.max_load
        ));
    }
    let report = Report {
        run_id: format!("bench-{stamp}"),
        conditions,
        scenarios,
        warnings: r.warnings,
    };
    let json = o
        .workdir
        .join("results")
        .join(format!("{}.json", report.run_id));
    if let Ok(s) = serde_json::to_string_pretty(&report) {
        fs::write(&json, s).ctx(|| format!("writing {}", json.display()))?;
    }
    Ok(report)
}

/// Large-file sizes per scale.
fn large_file_bytes(scale: Scale) -> u64 {
    match scale {
        Scale::Small => 128 << 20,
        Scale::Medium => 512 << 20,
        Scale::Large => 4 << 30,
    }
}

/// Small-file counts per scale (16 KiB each).
fn many_small_count(scale: Scale) -> u64 {
    match scale {
        Scale::Small => 1000,
        Scale::Medium => 4000,
        Scale::Large => 100_000,
    }
}

impl Runner<'_> {
    fn say(&self, line: &str) {
        if !self.o.quiet {
            eprintln!("{line}");
        }
    }

    fn work(&self) -> &Path {
        &self.o.workdir
    }

    /// A fresh, initialised repository for `scenario` and `tool`.
    fn fresh_repo(&self, scenario: &str, tool: &Tool) -> Result<PathBuf> {
        let repo = self
            .work()
            .join("repos")
            .join(format!("{scenario}-{}", tool.name()));
        if repo.exists() {
            fs::remove_dir_all(&repo).ctx(|| format!("resetting {}", repo.display()))?;
        }
        self.unmeasured(
            tool,
            &format!("{scenario}-init"),
            tool.init(self.work(), &repo),
        )?;
        Ok(repo)
    }

    fn log(&self, tool: &Tool, step: &str) -> PathBuf {
        let safe: String = step
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        self.work()
            .join("logs")
            .join(format!("{}-{safe}-{}.log", self.run_stamp, tool.name()))
    }

    fn check_exit(&self, tool: &Tool, step: &str, code: i32, log: &Path) -> Result<()> {
        if tool.ok_exit(code) {
            return Ok(());
        }
        let text = fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(15).collect();
        Err(BenchError::ToolFailed {
            tool: tool.name().into(),
            step: step.into(),
            status: format!("exit code {code}"),
            log: log.to_path_buf(),
            tail: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        })
    }

    fn unmeasured(&self, tool: &Tool, step: &str, cmd: Command) -> Result<()> {
        let log = self.log(tool, step);
        let u = measure::start(cmd, &log)?.wait()?;
        self.check_exit(tool, step, u.exit_code, &log)
    }

    /// Cache and load before a measured step.
    fn prepare(&mut self, cold: bool) -> (CacheState, f64) {
        let cache = if cold && self.o.cache == CachePolicy::Cold {
            drop_caches()
        } else {
            CacheState::Warm
        };
        let load = loadavg().map_or(0.0, |l| l[0]);
        self.steps_measured += 1;
        if load > LOAD_WARN {
            self.steps_loaded += 1;
            self.max_load = self.max_load.max(load);
        }
        (cache, load)
    }

    /// Runs one measured step of one tool.
    #[allow(clippy::too_many_arguments)]
    fn measured(
        &mut self,
        tool: &Tool,
        step: &str,
        cmd: Command,
        repo: &Path,
        source: (u64, u64),
        cold: bool,
        limit: Option<(&MemoryLimiter, u64)>,
    ) -> Result<ToolResult> {
        let (cache, load) = self.prepare(cold);
        let before = dir_size(repo);
        let log = self.log(tool, step);
        let (group, cmd) = match limit {
            Some((l, mib)) => {
                let (g, c) = LimitedGroup::apply(l, mib, tool.name(), cmd)?;
                (Some(g), c)
            }
            None => (None, cmd),
        };
        let usage = measure::start(cmd, &log)?.wait()?;
        let memory = match (group, limit) {
            (Some(g), Some((l, mib))) => Some(g.finish(l, mib)),
            _ => None,
        };
        if memory.is_none() {
            self.check_exit(tool, step, usage.exit_code, &log)?;
        }
        let after = dir_size(repo);
        let mut r = ToolResult::from_usage(
            tool.name(),
            &[usage],
            usage.wall_s,
            source.0,
            source.1,
            before,
            after,
            cache,
            load,
        );
        r.memory = memory;
        self.say(&format!(
            "   {step:<32} {:<7} {:>8.2} s  cpu {:>6.1} s  {:>5.0} MiB RSS  exit {}",
            tool.name(),
            r.wall_s,
            r.user_s + r.sys_s,
            r.peak_rss_mib,
            usage.exit_code
        ));
        Ok(r)
    }

    fn large_file_data(&self) -> Result<Incompressible> {
        let bytes = large_file_bytes(self.o.scale);
        let dir = self
            .work()
            .join("data")
            .join(format!("large-file-{}", self.o.scale));
        ensure_random_file(&dir.join("random.bin"), bytes)?;
        Incompressible::check(&dir, format!("one file of {} MiB random data", bytes >> 20))
    }

    fn many_small_data(&self) -> Result<Incompressible> {
        let n = many_small_count(self.o.scale);
        let dir = self.work().join("data").join(format!("many-small-{n}"));
        ensure_random_files(&dir, n, 16 * 1024, 1000)?;
        Incompressible::check(&dir, format!("{n} files of 16 KiB random data"))
    }

    /// One backup per tool into a fresh repository.
    fn one_backup(
        &mut self,
        scenario: &str,
        step: &str,
        data: &Incompressible,
    ) -> Result<ScenarioResult> {
        let mut sc = ScenarioResult::new(scenario);
        sc.data.push(data.data().clone());
        let mut st = StepResult::throughput(step, data);
        for tool in self.tools.clone() {
            let repo = self.fresh_repo(scenario, &tool)?;
            let d = data.data();
            let cmd = tool.backup(self.work(), &repo, &d.path, "s1");
            st.push(self.measured(&tool, step, cmd, &repo, (d.bytes, d.files), true, None)?);
        }
        sc.steps.push(st);
        Ok(sc)
    }

    fn large_file(&mut self) -> Result<ScenarioResult> {
        let data = self.large_file_data()?;
        let step = format!("backup, one {} MiB file", data.data().bytes >> 20);
        self.one_backup("large-file", &step, &data)
    }

    fn many_small(&mut self) -> Result<ScenarioResult> {
        let data = self.many_small_data()?;
        let step = format!("backup, {} × 16 KiB", data.data().files);
        self.one_backup("many-small", &step, &data)
    }

    fn rerun_unchanged(&mut self) -> Result<ScenarioResult> {
        let data = self.many_small_data()?;
        let mut sc = ScenarioResult::new("rerun-unchanged");
        sc.data.push(data.data().clone());
        sc.notes.push(
            "source: the many-small data set; first backup unmeasured, same repository".into(),
        );
        let step = format!("unchanged re-run, {} files", data.data().files);
        let mut st = StepResult::throughput(&step, &data);
        for tool in self.tools.clone() {
            let repo = self.fresh_repo("rerun-unchanged", &tool)?;
            let d = data.data();
            let first = tool.backup(self.work(), &repo, &d.path, "s1");
            self.unmeasured(&tool, "rerun-first", first)?;
            let cmd = tool.backup(self.work(), &repo, &d.path, "s2");
            st.push(self.measured(&tool, &step, cmd, &repo, (d.bytes, d.files), true, None)?);
        }
        sc.steps.push(st);
        Ok(sc)
    }

    fn data_root(&self) -> PathBuf {
        self.o.data.clone().unwrap_or_else(|| {
            std::env::var_os("VOUCH_BENCH_DIR")
                .map_or_else(|| PathBuf::from("/var/tmp/vouch-bench"), PathBuf::from)
        })
    }

    fn source_tree(&mut self) -> Result<ScenarioResult> {
        let root = self.data_root();
        let mut sc = ScenarioResult::new("source-tree");
        let kernels = root.join("linux-6.1").is_dir() && root.join("linux-6.12").is_dir();
        if !root.is_dir() {
            return Ok(ScenarioResult::skipped(
                "source-tree",
                format!(
                    "no data at {}: run ../shared/bench/fetch-data.sh or give --data DIR",
                    root.display()
                ),
            ));
        }
        // Small scale: the fs/ subtree of each kernel, to finish in minutes.
        let sub = if self.o.scale == Scale::Small {
            "fs"
        } else {
            ""
        };
        let src = self.work().join("src");
        let mut steps: Vec<(String, Option<PathBuf>)> = Vec::new();
        if kernels {
            let (a, b) = (
                root.join("linux-6.1").join(sub),
                root.join("linux-6.12").join(sub),
            );
            let what = if sub.is_empty() {
                String::new()
            } else {
                format!("/{sub}")
            };
            steps.push((format!("first backup, linux-6.1{what}"), Some(a)));
            steps.push((format!("linux-6.12{what} at the same path"), Some(b)));
            steps.push(("unchanged re-run".into(), None));
        } else {
            steps.push(("first backup".into(), Some(root.clone())));
            steps.push(("unchanged re-run".into(), None));
        }
        let mut repos = Vec::new();
        for tool in self.tools.clone() {
            repos.push((tool.clone(), self.fresh_repo("source-tree", &tool)?));
        }
        let mut archive_no = 0;
        let mut current: Option<MovedTree> = None;
        for (name, tree) in steps {
            let source_path = if kernels {
                if let Some(t) = tree {
                    drop(current.take()); // moves the previous tree back
                    current = Some(MovedTree::new(&t, &src)?);
                }
                src.clone()
            } else {
                root.clone()
            };
            let data = RealData::check(
                &source_path,
                match &current {
                    Some(m) => format!("real source tree {}", m.origin.display()),
                    None => format!("real source tree {}", root.display()),
                },
            )?;
            if !sc
                .data
                .iter()
                .any(|d| d.description == data.data().description)
            {
                sc.data.push(data.data().clone());
            }
            archive_no += 1;
            let archive = format!("s{archive_no}-{}", self.run_stamp);
            let mut st = StepResult::real(&name, &data);
            for (tool, repo) in &repos {
                let cmd = tool.backup(self.work(), repo, &source_path, &archive);
                let d = data.data();
                st.push(self.measured(tool, &name, cmd, repo, (d.bytes, d.files), true, None)?);
            }
            sc.steps.push(st);
            self.tree_repos = repos
                .iter()
                .map(|(t, r)| (t.clone(), r.clone(), archive.clone()))
                .collect();
        }
        drop(current);
        Ok(sc)
    }

    /// The data set of the last source-tree step (for restore and verify).
    fn tree_data(&self) -> Result<Option<RealData>> {
        let root = self.data_root();
        let kernels = root.join("linux-6.1").is_dir() && root.join("linux-6.12").is_dir();
        let sub = if self.o.scale == Scale::Small {
            "fs"
        } else {
            ""
        };
        let p = if kernels {
            root.join("linux-6.12").join(sub)
        } else {
            root
        };
        if !p.is_dir() {
            return Ok(None);
        }
        RealData::check(&p, format!("real source tree {}", p.display())).map(Some)
    }

    fn restore(&mut self) -> Result<ScenarioResult> {
        if self.tree_repos.is_empty() {
            return Ok(ScenarioResult::skipped(
                "restore",
                "source-tree did not run",
            ));
        }
        let Some(data) = self.tree_data()? else {
            return Ok(ScenarioResult::skipped(
                "restore",
                "source tree data missing",
            ));
        };
        let mut sc = ScenarioResult::new("restore");
        sc.data.push(data.data().clone());
        let step = "full restore of the latest snapshot";
        let mut st = StepResult::real(step, &data);
        let mut targets = Vec::new();
        for (tool, repo, archive) in self.tree_repos.clone() {
            let target = self.work().join(format!("restore-{}", tool.name()));
            if target.exists() {
                fs::remove_dir_all(&target).ctx(|| format!("removing {}", target.display()))?;
            }
            fs::create_dir_all(&target).ctx(|| format!("creating {}", target.display()))?;
            let cmd = tool.restore(self.work(), &repo, &target, &archive);
            let d = data.data();
            let mut r = self.measured(&tool, step, cmd, &repo, (d.bytes, d.files), true, None)?;
            let restored = dir_size(&target);
            if restored < d.bytes {
                self.warnings.push(format!(
                    "{} restored {restored} bytes of {} expected",
                    tool.name(),
                    d.bytes
                ));
            }
            r.repo_added_mib = 0.0;
            st.push(r);
            targets.push(target);
        }
        // Removed only once every tool has restored: ext4 then scans the
        // inodes deleted in the last seconds before reusing one
        // (`recently_deleted`), which made whichever tool restored right
        // after a removal of 86 000 files pay for it (16 % of a restore's
        // CPU in a profile).
        for target in targets {
            fs::remove_dir_all(&target).ctx(|| format!("removing {}", target.display()))?;
        }
        sc.steps.push(st);
        Ok(sc)
    }

    fn verify(&mut self) -> Result<ScenarioResult> {
        if self.tree_repos.is_empty() {
            return Ok(ScenarioResult::skipped("verify", "source-tree did not run"));
        }
        let Some(data) = self.tree_data()? else {
            return Ok(ScenarioResult::skipped(
                "verify",
                "source tree data missing",
            ));
        };
        let mut sc = ScenarioResult::new("verify");
        sc.notes.push(
            "vouch verify --read-data, restic and rustic check --read-data, borg check --verify-data; \
             MiB/s and files/s refer to the last source tree, not to the repository"
                .into(),
        );
        let mut st = StepResult::real("read back and check all data", &data);
        for (tool, repo, _) in self.tree_repos.clone() {
            let cmd = tool.verify(self.work(), &repo);
            let d = data.data();
            st.push(self.measured(
                &tool,
                tool.verify_name(),
                cmd,
                &repo,
                (d.bytes, d.files),
                true,
                None,
            )?);
        }
        sc.steps.push(st);
        Ok(sc)
    }

    fn concurrent(&mut self) -> Result<ScenarioResult> {
        let each = large_file_bytes(self.o.scale) / 4;
        let base = self
            .work()
            .join("data")
            .join(format!("concurrent-{}", self.o.scale));
        let mut sets = Vec::new();
        for i in 0..4 {
            let dir = base.join(format!("src{i}"));
            ensure_random_file(&dir.join("random.bin"), each)?;
            sets.push(Incompressible::check(
                &dir,
                format!("source {i}: one file of {} MiB random data", each >> 20),
            )?);
        }
        let all = Incompressible::check(&base, format!("4 × {} MiB random data", each >> 20))?;
        let mut sc = ScenarioResult::new("concurrent");
        sc.data.push(all.data().clone());
        sc.notes.push(
            "four processes started together, each backing up its own random file; \
             wall = first start to last exit, CPU summed, RSS of the largest"
                .into(),
        );
        for shared in [false, true] {
            let step = if shared {
                "4 backups into 1 shared repository"
            } else {
                "4 backups into 4 repositories"
            };
            let mut st = StepResult::throughput(step, &all);
            for tool in self.tools.clone() {
                if shared && tool == Tool::Borg {
                    sc.notes.push(
                        "borg: not measured into one shared repository: borg allows one \
                         writer per repository (the others wait for its lock; a trial run \
                         took minutes of lock waiting for seconds of work)"
                            .into(),
                    );
                    continue;
                }
                let repos: Vec<PathBuf> = if shared {
                    vec![self.fresh_repo("concurrent-shared", &tool)?; 4]
                } else {
                    (0..4)
                        .map(|i| self.fresh_repo(&format!("concurrent-{i}"), &tool))
                        .collect::<Result<_>>()?
                };
                let (cache, load) = self.prepare(true);
                let before: u64 = unique(&repos).iter().map(|r| dir_size(r)).sum();
                let start = Instant::now();
                let mut running = Vec::new();
                for (i, set) in sets.iter().enumerate() {
                    let archive = format!("c{i}-{}", self.run_stamp);
                    let cmd = tool.backup(self.work(), &repos[i], &set.data().path, &archive);
                    let log = self.log(&tool, &format!("{step}-{i}"));
                    running.push((measure::start(cmd, &log)?, log));
                }
                let mut usages = Vec::new();
                for (r, log) in running {
                    let u = r.wait()?;
                    self.check_exit(&tool, step, u.exit_code, &log)?;
                    usages.push(u);
                }
                let wall = start.elapsed().as_secs_f64();
                let after: u64 = unique(&repos).iter().map(|r| dir_size(r)).sum();
                let a = all.data();
                let r = ToolResult::from_usage(
                    tool.name(),
                    &usages,
                    wall,
                    a.bytes,
                    a.files,
                    before,
                    after,
                    cache,
                    load,
                );
                self.say(&format!(
                    "   {step:<32} {:<7} {:>8.2} s  cpu {:>6.1} s  {:>5.0} MiB RSS",
                    tool.name(),
                    r.wall_s,
                    r.user_s + r.sys_s,
                    r.peak_rss_mib
                ));
                st.push(r);
            }
            sc.steps.push(st);
        }
        Ok(sc)
    }

    fn low_memory(&mut self) -> Result<ScenarioResult> {
        let Some((limiter, tried)) = MemoryLimiter::detect() else {
            return Ok(ScenarioResult::skipped(
                "low-memory",
                "no way to limit memory here: systemd-run --scope failed and no cgroup \
                 (v2 or v1 memory) directory could be created (needs root)",
            ));
        };
        let limit = self.o.memory_limit_mib;
        let data = self.large_file_data()?;
        let mut sc = ScenarioResult::new("low-memory");
        sc.data.push(data.data().clone());
        sc.notes
            .push(format!("limit applied with {}", limiter.describe(limit)));
        for t in tried {
            sc.notes.push(format!("tried first: {t}"));
        }
        let step = format!(
            "backup, one {} MiB file, {limit} MiB memory limit",
            data.data().bytes >> 20
        );
        let mut st = StepResult::throughput(&step, &data);
        for tool in self.tools.clone() {
            let repo = self.fresh_repo("low-memory", &tool)?;
            let d = data.data();
            let cmd = tool.backup(self.work(), &repo, &d.path, "s1");
            let r = self.measured(
                &tool,
                &step,
                cmd,
                &repo,
                (d.bytes, d.files),
                true,
                Some((&limiter, limit)),
            )?;
            let m = r.memory.clone().unwrap_or_default();
            let ok = r.repo_added_mib > 0.0 && m.oom_kills.unwrap_or(0) == 0;
            sc.notes.push(format!(
                "{}: {} — peak RSS {:.0} MiB, group peak {} (page cache included), limit hit {} times, {} OOM kills",
                tool.name(),
                if ok { "finished inside the limit" } else { "FAILED under the limit" },
                r.peak_rss_mib,
                m.group_peak_mib.map_or("unknown".into(), |p| format!("{p:.0} MiB")),
                m.limit_hits.map_or("?".into(), |x| x.to_string()),
                m.oom_kills.map_or("?".into(), |x| x.to_string()),
            ));
            st.push(r);
        }
        sc.steps.push(st);
        Ok(sc)
    }

    fn million_files(&mut self) -> Result<ScenarioResult> {
        if self.o.scale != Scale::Large {
            return Ok(ScenarioResult::skipped(
                "million-files",
                "large scale only (--scale large)",
            ));
        }
        let dir = scale::files_dir(self.work(), 1_000_000);
        ensure_random_files(&dir, 1_000_000, 1024, scale::FILES_PER_DIR)?;
        let data = Incompressible::check(
            &dir,
            format!(
                "1 000 000 files of 1 KiB random data, {} per directory",
                scale::FILES_PER_DIR
            ),
        )?;
        let mut sc = ScenarioResult::new("million-files");
        sc.data.push(data.data().clone());
        let mut first = StepResult::throughput("first backup", &data);
        let mut again = StepResult::throughput("unchanged re-run", &data);
        for tool in self.tools.clone() {
            let repo = self.fresh_repo("million-files", &tool)?;
            let d = data.data();
            let cmd = tool.backup(self.work(), &repo, &d.path, "s1");
            first.push(self.measured(
                &tool,
                "first backup",
                cmd,
                &repo,
                (d.bytes, d.files),
                true,
                None,
            )?);
            let cmd = tool.backup(self.work(), &repo, &d.path, "s2");
            again.push(self.measured(
                &tool,
                "unchanged re-run",
                cmd,
                &repo,
                (d.bytes, d.files),
                true,
                None,
            )?);
        }
        sc.steps.push(first);
        sc.steps.push(again);
        Ok(sc)
    }
}

fn unique(repos: &[PathBuf]) -> Vec<PathBuf> {
    let mut v = repos.to_vec();
    v.sort();
    v.dedup();
    v
}

/// A data tree renamed to `<workdir>/src` so each version is backed up at
/// the same path; moved back on drop. A marker records the origin, so an
/// interrupted run is repaired by the next one.
struct MovedTree {
    origin: PathBuf,
    at: PathBuf,
}

impl MovedTree {
    fn marker(at: &Path) -> PathBuf {
        at.with_extension("origin")
    }

    fn new(origin: &Path, at: &Path) -> Result<Self> {
        let marker = Self::marker(at);
        if fs::symlink_metadata(at).is_ok() {
            // Left behind by an interrupted run: put it back first.
            let back = fs::read_to_string(&marker).map_err(|_| {
                BenchError::Workdir(format!(
                    "{} exists but {} does not say where it came from; move it back by hand",
                    at.display(),
                    marker.display()
                ))
            })?;
            let back = PathBuf::from(back.trim());
            if back.exists() {
                return Err(BenchError::Workdir(format!(
                    "{} and its origin {} both exist; remove one by hand",
                    at.display(),
                    back.display()
                )));
            }
            fs::rename(at, &back).ctx(|| format!("moving {} back", at.display()))?;
        }
        fs::write(&marker, origin.as_os_str().as_encoded_bytes())
            .ctx(|| format!("writing {}", marker.display()))?;
        fs::rename(origin, at).map_err(|e| {
            let _ = fs::remove_file(&marker);
            BenchError::Workdir(format!(
                "cannot move {} to {} ({e}); the data and the work directory must be on the same file system",
                origin.display(),
                at.display()
            ))
        })?;
        Ok(Self {
            origin: origin.to_path_buf(),
            at: at.to_path_buf(),
        })
    }
}

impl Drop for MovedTree {
    fn drop(&mut self) {
        if fs::rename(&self.at, &self.origin).is_ok() {
            let _ = fs::remove_file(Self::marker(&self.at));
        } else {
            eprintln!(
                "warning: could not move {} back to {}; the next run will try again",
                self.at.display(),
                self.origin.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moved_trees_go_back_even_after_an_interrupted_run() {
        let d = tempfile::tempdir().unwrap();
        let origin = d.path().join("linux");
        fs::create_dir(&origin).unwrap();
        fs::write(origin.join("f"), "x").unwrap();
        let at = d.path().join("src");
        {
            let _m = MovedTree::new(&origin, &at).unwrap();
            assert!(at.join("f").exists() && !origin.exists());
        }
        assert!(origin.join("f").exists() && !at.exists());
        // Simulate a crash: moved, never moved back.
        let m = MovedTree::new(&origin, &at).unwrap();
        std::mem::forget(m);
        let other = d.path().join("other");
        fs::create_dir(&other).unwrap();
        let m = MovedTree::new(&other, &at).unwrap();
        assert!(origin.join("f").exists(), "the stray tree went home");
        drop(m);
        assert!(other.exists() && !at.exists());
    }

    #[test]
    fn scales_have_the_documented_sizes() {
        assert_eq!(large_file_bytes(Scale::Small), 128 << 20);
        assert_eq!(large_file_bytes(Scale::Medium), 512 << 20);
        assert_eq!(many_small_count(Scale::Medium), 4000);
        assert_eq!(many_small_count(Scale::Large), 100_000);
    }
}
