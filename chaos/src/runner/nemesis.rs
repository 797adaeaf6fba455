//! The nemeses: each fault as the runner injects it into the deployment,
//! and the tending between steps (damage put back once found, agents that
//! exited restarted, an unplanned exit of the service noticed).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;

use super::deploy::signal;
use super::observe::{inv, lock, read_events, Incident};
use super::scenario::{FaultKind, AGENT_STEPS, SERVER_STEPS};
use super::workload::Tree;
use super::Run;
use crate::proxy::Faults;
use crate::Rng;

/// Damaged bytes to put back once the service found them.
pub struct Heal {
    /// The incident.
    pub incident: usize,
    /// The damaged file.
    pub path: PathBuf,
    /// Where the damage starts; none: the whole file (a pack, which
    /// nothing rewrites).
    pub offset: Option<u64>,
    /// The bytes there before the damage (a whole pack; one byte of a log
    /// segment, which appends keep changing after it).
    pub original: Vec<u8>,
    /// The bytes there after (put back only if still so).
    pub damaged: Vec<u8>,
}

impl Heal {
    /// Puts the original bytes back if the damage is still there as it was
    /// left; whether it did.
    fn put_back(&self) -> bool {
        use std::os::unix::fs::FileExt;
        let Ok(f) = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
        else {
            return false;
        };
        let Some(offset) = self.offset else {
            return fs::read(&self.path).is_ok_and(|now| now == self.damaged)
                && fs::write(&self.path, &self.original).is_ok();
        };
        let mut now = vec![0u8; self.damaged.len()];
        f.read_exact_at(&mut now, offset).is_ok()
            && now == self.damaged
            && f.write_all_at(&self.original, offset).is_ok()
    }
}

/// How long a revoked credential may still be honoured.
const REVOCATION_GRACE: Duration = Duration::from_secs(2);

/// How long found damage stays in place before it is put back, so that
/// samples see what the service made of it.
const HOLD_AFTER_DETECTION: Duration = Duration::from_secs(10);

/// Injects one fault of `kind`, its choices made from `seed`.
pub fn inject(run: &mut Run, kind: FaultKind, seed: u64) {
    use FaultKind::*;
    let mut rng = Rng::new(seed);
    let restarts = matches!(
        kind,
        KillServer | CrashAtStep | PowerCut | DiskFull | FsyncEio
    );
    if restarts && run.heals.iter().any(|h| is_log(run, h)) {
        run.record(
            kind,
            "-".into(),
            "deferred: damage injected into the event log is still open, and a restart would cut the log there".into(),
            None,
            false,
        );
        return;
    }
    match kind {
        KillServer => kill_server(run),
        KillAgent => kill_agent(run, &mut rng),
        CrashAtStep => crash_at_step(run, &mut rng),
        AgentCrashAtStep => agent_crash_at_step(run, &mut rng),
        PowerCut => power_cut(run, &mut rng),
        BitRotRepository | TruncateRepositoryFile => damage_repository(run, kind, &mut rng),
        BitRotLog => damage_log(run, &mut rng),
        DiskFull => disk_full(run, &mut rng),
        FsyncEio => fsync_eio(run, &mut rng),
        ClockStepServer | ClockStepAgent => clock_step(run, kind, &mut rng),
        NetReset | NetBlackhole | NetLatency | NetBandwidth | NetRefuse => {
            network(run, kind, &mut rng)
        }
        S3Faults => s3_faults(run, &mut rng),
        PauseWriterAcrossPrune => pause_writer_across_prune(run, &mut rng),
        ConcurrentClients => concurrent_clients(run, &mut rng),
        RevokeAgent => revoke_agent(run, &mut rng),
    }
}

fn is_log(run: &Run, h: &Heal) -> bool {
    lock(&run.obs)
        .incidents
        .get(h.incident)
        .is_some_and(|i| i.in_log)
}

/// Between steps: damage found (and held a little) or not found within
/// the window is put back; exited agents are restarted; an exit of the
/// service nobody caused is a violation.
pub fn tend(run: &mut Run) {
    let now = run.now_s();
    let window = run.opts.detection_window.as_secs_f64();
    let mut i = 0;
    while i < run.heals.len() {
        let id = run.heals[i].incident;
        let (detected, injected) = {
            let o = lock(&run.obs);
            let inc = &o.incidents[id];
            (inc.detected_at_s, inc.injected_at_s)
        };
        let due = match detected {
            Some(at) => now - at >= HOLD_AFTER_DETECTION.as_secs_f64(),
            None => now - injected >= window,
        };
        if !due {
            i += 1;
            continue;
        }
        let h = run.heals.remove(i);
        let gone = !h.path.exists();
        let put_back = h.put_back();
        let mut o = lock(&run.obs);
        if detected.is_none() && gone {
            // Pruned (or repacked) before its slice's turn: nothing is
            // left to find, nothing to put back, and no point needs it.
            o.incidents[id]
                .what
                .push_str(" (its file was deleted by prune before it was read back)");
            o.incidents[id].healed_at_s = Some(now);
            continue;
        }
        if detected.is_none() {
            let what = o.incidents[id].what.clone();
            o.checked(inv::DAMAGE, 1);
            o.violated(
                inv::DAMAGE,
                now,
                format!("{what} was not found within {window} s"),
            );
        } else {
            o.checked(inv::DAMAGE, 1);
        }
        let inc = &mut o.incidents[id];
        inc.healed_at_s = Some(now);
        if !put_back {
            inc.what
                .push_str(" (gone or rewritten before it was put back)");
        }
    }
    let _ = run.dep.revive_agents();
    run.ensure_server("between steps");
}

/// Puts back every open damage of the event log at once (before a
/// restart, which would refuse a damaged log).
pub fn heal_log_now(run: &mut Run) {
    let now = run.now_s();
    let mut i = 0;
    while i < run.heals.len() {
        if !is_log(run, &run.heals[i]) {
            i += 1;
            continue;
        }
        let h = run.heals.remove(i);
        let put_back = h.put_back();
        let mut o = lock(&run.obs);
        let inc = &mut o.incidents[h.incident];
        inc.healed_at_s = Some(now);
        inc.what.push_str(if put_back {
            " (put back early: the service was restarting)"
        } else {
            " (gone or rewritten before it was put back)"
        });
    }
}

fn kill_server(run: &mut Run) {
    let pid = run.dep.server_pid().unwrap_or_default();
    run.dep.kill_server();
    if let Err(e) = run.dep.start_server(&[]) {
        run.notes
            .push(format!("restarting the service failed: {e}"));
    }
    let took = run.await_recovery("kill -9");
    run.record(
        FaultKind::KillServer,
        format!("vouch serve (pid {pid})"),
        ready_text("killed", took),
        took,
        true,
    );
}

/// The power goes out under the data directory while a backup of the
/// service's own plan writes: what was not synced is lost, what was being
/// written is torn. The file system comes back (its log replayed), then
/// the service.
fn power_cut(run: &mut Run, rng: &mut Rng) {
    if !run.dep.opts.power_cut {
        run.record(
            FaultKind::PowerCut,
            "data directory".into(),
            "not run: needs root and xfsprogs (the data directory on a loop-mounted XFS)".into(),
            None,
            false,
        );
        return;
    }
    // Every plan of the service's own is asked for a backup, so that
    // writes are in flight when the power goes.
    for i in 0..run.plans.len() {
        if run.plans[i].agent.is_none() {
            run_plan(run, i, rng.next_u64());
        }
    }
    std::thread::sleep(Duration::from_millis(100 + rng.below(900)));
    let pid = run.dep.server_pid().unwrap_or_default();
    let running: Vec<String> = run
        .client()
        .get_json("/api/v1/jobs?state=running&limit=20")
        .ok()
        .and_then(|j| j.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|j| j["kind"].as_str().map(str::to_owned))
        .collect();
    let cut = run.dep.power_cut();
    if let Err(e) = &cut {
        run.notes.push(format!("power cut: {e}"));
    }
    if run.dep.server_pid().is_none() {
        if let Err(e) = run.dep.start_server(&[]) {
            run.notes
                .push(format!("restarting the service failed: {e}"));
        }
    }
    let took = run.await_recovery("a power cut");
    let what = match cut {
        Ok(()) => format!(
            "power lost with {} running; the file system mounted again (its log replayed)",
            if running.is_empty() {
                "no job".to_owned()
            } else {
                running.join(", ")
            }
        ),
        Err(e) => format!("the power cut failed: {e}"),
    };
    let injected = !what.starts_with("the power cut failed");
    run.record(
        FaultKind::PowerCut,
        format!("data directory of vouch serve (pid {pid})"),
        ready_text(&what, took),
        took,
        injected,
    );
}

fn ready_text(what: &str, took: Option<Duration>) -> String {
    match took {
        Some(d) => format!("{what}; ready again after {:.1} s", d.as_secs_f64()),
        None => format!("{what}; not ready within the limit"),
    }
}

/// An agent still in service, chosen by `rng`; none (recorded as a fault
/// that could not run) when every agent was retired.
fn pick_agent(run: &mut Run, kind: FaultKind, rng: &mut Rng) -> Option<usize> {
    let live: Vec<usize> = (0..run.dep.agents.len())
        .filter(|i| !run.dep.agents[*i].retired)
        .collect();
    if live.is_empty() {
        run.record(kind, "-".into(), "no agent".into(), None, false);
        return None;
    }
    Some(live[rng.below(live.len() as u64) as usize])
}

fn kill_agent(run: &mut Run, rng: &mut Rng) {
    let Some(i) = pick_agent(run, FaultKind::KillAgent, rng) else {
        return;
    };
    // Its plan gets a run first, so the kill often lands mid-job.
    run_plan_of_agent(run, i);
    std::thread::sleep(Duration::from_millis(rng.below(3_000)));
    run.dep.kill_agent(i);
    let down = Duration::from_millis(500 + rng.below(3_000));
    std::thread::sleep(down);
    let restarted = run.dep.start_agent(i, &[]).is_ok();
    let name = run.dep.agents[i].name.clone();
    run.record(
        FaultKind::KillAgent,
        format!("agent {name}"),
        format!(
            "killed; restarted after {:.1} s{}",
            down.as_secs_f64(),
            if restarted {
                ""
            } else {
                " (the restart failed)"
            }
        ),
        None,
        true,
    );
}

/// Runs the plan of a server-local tree now (its tree changed first when
/// no backup of it is pending).
fn run_local_plan(run: &mut Run) {
    if let Some(i) = run.plans.iter().position(|p| p.agent.is_none()) {
        run_plan(run, i, run.now_s().to_bits());
    }
}

fn run_plan_of_agent(run: &mut Run, agent: usize) {
    if let Some(i) = run.plans.iter().position(|p| p.agent == Some(agent)) {
        run_plan(run, i, run.now_s().to_bits());
    }
}

/// Changes plan `i`'s tree and runs it, when no backup of it is pending
/// (so that every backup reads a tree nothing changes under it).
pub(crate) fn run_plan(run: &mut Run, i: usize, seed: u64) {
    let id = run.plans[i].id.clone();
    let idle = run
        .client()
        .get_json(&format!("/api/v1/jobs?plan={id}&kind=backup&limit=5"))
        .is_ok_and(|jobs| {
            !jobs
                .as_array()
                .into_iter()
                .flatten()
                .any(|j| matches!(j["state"].as_str(), Some("scheduled") | Some("running")))
        });
    if !idle {
        return;
    }
    if let Err(e) = run.plans[i].tree.mutate(&mut Rng::new(seed)) {
        run.notes
            .push(format!("changing the tree of {id} failed: {e}"));
        return;
    }
    if let Ok((202, job)) = run
        .client()
        .post_json(&format!("/api/v1/plans/{id}/run"), &json!({}))
    {
        if let Some(j) = job["id"].as_str() {
            run.plans[i].jobs.push(j.to_owned());
        }
    }
}

fn crash_at_step(run: &mut Run, rng: &mut Rng) {
    let step = SERVER_STEPS[rng.below(SERVER_STEPS.len() as u64) as usize];
    run.dep.kill_server();
    if let Err(e) = run.dep.start_server(&[("VOUCH_FAILPOINT", step)]) {
        run.notes.push(format!("starting the service failed: {e}"));
        return;
    }
    let started = Instant::now();
    // Whatever reaches the step: a backup (and the retention after it);
    // prune comes every 30 s; any append reaches the log's steps.
    let mut asked = false;
    let mut crashed = None;
    while started.elapsed() < Duration::from_secs(90) {
        if run.dep.server_exited() {
            crashed = Some(started.elapsed());
            break;
        }
        if !asked && run.client().ready() {
            run_local_plan(run);
            asked = true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    run.dep.kill_server();
    if let Err(e) = run.dep.start_server(&[]) {
        run.notes
            .push(format!("restarting the service failed: {e}"));
    }
    let took = run.await_recovery(&format!("a crash at {step}"));
    let outcome = match crashed {
        Some(d) => ready_text(
            &format!(
                "killed itself at {step} {:.1} s after its start",
                d.as_secs_f64()
            ),
            took,
        ),
        None => ready_text(&format!("{step} not reached within 90 s; killed"), took),
    };
    run.record(
        FaultKind::CrashAtStep,
        format!("vouch serve at {step}"),
        outcome,
        took,
        true,
    );
}

fn agent_crash_at_step(run: &mut Run, rng: &mut Rng) {
    let Some(i) = pick_agent(run, FaultKind::AgentCrashAtStep, rng) else {
        return;
    };
    let step = AGENT_STEPS[rng.below(AGENT_STEPS.len() as u64) as usize];
    run.dep.kill_agent(i);
    if run
        .dep
        .start_agent(i, &[("VOUCH_FAILPOINT", step)])
        .is_err()
    {
        return;
    }
    run_plan_of_agent(run, i);
    let started = Instant::now();
    let mut crashed = None;
    while started.elapsed() < Duration::from_secs(90) {
        if run.dep.agent_exited(i) {
            crashed = Some(started.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    run.dep.kill_agent(i);
    let _ = run.dep.start_agent(i, &[]);
    let name = run.dep.agents[i].name.clone();
    let outcome = match crashed {
        Some(d) => format!(
            "killed itself at {step} after {:.1} s; restarted",
            d.as_secs_f64()
        ),
        None => format!("{step} not reached within 90 s; restarted"),
    };
    run.record(
        FaultKind::AgentCrashAtStep,
        format!("agent {name} at {step}"),
        outcome,
        None,
        true,
    );
}

/// The repositories on the service's disk: id and path.
fn repositories(run: &Run) -> Vec<(String, PathBuf)> {
    let mut out = vec![("default".to_owned(), run.dep.data.join("repository"))];
    // A revoked agent's plan is removed: nothing verifies its points
    // again, so damage there could never be seen repaired.
    for a in run.dep.agents.iter().filter(|a| !a.retired) {
        let p = run.dep.data.join("agents").join(&a.name).join("repository");
        if p.is_dir() {
            out.push((format!("agent-{}", a.name), p));
        }
    }
    out
}

fn files_older_than(dir: &Path, age: Duration) -> Vec<PathBuf> {
    let now = SystemTime::now();
    let mut out: Vec<PathBuf> = crate::files_below(dir)
        .into_iter()
        .filter(|p| {
            fs::metadata(p)
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).unwrap_or_default() >= age)
        })
        .collect();
    out.sort();
    out
}

fn register(
    run: &mut Run,
    mut inc: Incident,
    path: PathBuf,
    offset: Option<u64>,
    original: Vec<u8>,
    damaged: Vec<u8>,
) {
    let mut o = lock(&run.obs);
    inc.id = o.incidents.len();
    let id = inc.id;
    o.incidents.push(inc);
    drop(o);
    run.heals.push(Heal {
        incident: id,
        path,
        offset,
        original,
        damaged,
    });
}

/// Damage to a file of a repository older than 10 s: a pack (three times
/// in five), an index file or a snapshot manifest; one bit flipped, or the
/// file cut to half its length.
fn damage_repository(run: &mut Run, kind: FaultKind, rng: &mut Rng) {
    let repos = repositories(run);
    let (repo, path) = &repos[rng.below(repos.len() as u64) as usize];
    let (dir, what_file) = match rng.below(5) {
        0 => ("index", "index file"),
        1 => ("snapshots", "manifest"),
        _ => ("data", "pack"),
    };
    let files = files_older_than(&path.join(dir), Duration::from_secs(10));
    let open: Vec<PathBuf> = run.heals.iter().map(|h| h.path.clone()).collect();
    let files: Vec<PathBuf> = files.into_iter().filter(|p| !open.contains(p)).collect();
    if files.is_empty() {
        run.record(
            kind,
            repo.clone(),
            format!("no {what_file} older than 10 s yet"),
            None,
            false,
        );
        return;
    }
    let file = files[rng.below(files.len() as u64) as usize].clone();
    let Ok(original) = fs::read(&file) else {
        return;
    };
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let what = if kind == FaultKind::TruncateRepositoryFile {
        let len = original.len() as u64 / 2;
        if crate::truncate(&file, len).is_err() {
            return;
        }
        format!(
            "{what_file} {name} of {repo} cut from {} to {len} bytes",
            original.len()
        )
    } else {
        match crate::flip_random_bit(&file, rng) {
            Ok((off, bit)) => {
                format!("bit {bit} of byte {off} of {what_file} {name} of {repo} flipped")
            }
            Err(_) => return,
        }
    };
    let pack = (dir == "data").then(|| name.clone());
    let inc = Incident::injected(what.clone(), Some(repo.clone()), pack, name, run.now_s());
    let damaged = fs::read(&file).unwrap_or_default();
    register(run, inc, file, None, original, damaged);
    run.record(kind, repo.clone(), what, None, true);
}

fn damage_log(run: &mut Run, rng: &mut Rng) {
    let events = run.dep.data.join("events");
    let mut segs: Vec<PathBuf> = fs::read_dir(&events)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .filter(|p| fs::metadata(p).is_ok_and(|m| m.len() > 8192))
        .collect();
    segs.sort();
    let Some(seg) = segs
        .get(rng.below(segs.len().max(1) as u64) as usize)
        .cloned()
    else {
        run.record(
            FaultKind::BitRotLog,
            "events/".into(),
            "no segment longer than 8 KiB yet".into(),
            None,
            false,
        );
        return;
    };
    let Ok(original) = fs::read(&seg) else {
        return;
    };
    // Past the header, and not in the last 4 KiB that appends may still
    // be writing.
    let off = 24 + rng.below(original.len() as u64 - 24 - 4096);
    let bit = rng.below(8) as u8;
    if crate::flip_bit(&seg, off, bit).is_err() {
        return;
    }
    let name = seg
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let what = format!("bit {bit} of byte {off} of log segment {name} flipped");
    let inc = Incident::injected(what.clone(), None, None, name.clone(), run.now_s());
    let was = original[off as usize];
    register(run, inc, seg, Some(off), vec![was], vec![was ^ (1 << bit)]);
    run.record(
        FaultKind::BitRotLog,
        format!("events/{name}"),
        what,
        None,
        true,
    );
}

fn disk_full(run: &mut Run, rng: &mut Rng) {
    if run.dep.opts.own_fs_bytes.is_none() {
        run.record(
            FaultKind::DiskFull,
            "data directory".into(),
            "not run: needs root (the data directory on a small file system of its own)".into(),
            None,
            false,
        );
        return;
    }
    let ballast = run.dep.data.join("chaos-ballast");
    let free = free_bytes(&run.dep.data).unwrap_or(0);
    let size = free.saturating_sub(64 * 1024);
    let filled = fill(&ballast, size);
    let hold = Duration::from_secs(10 + rng.below(20));
    run_local_plan(run);
    if let Some(i) = run.plans.iter().position(|p| p.agent.is_some()) {
        run_plan(run, i, run.now_s().to_bits());
    }
    std::thread::sleep(hold);
    let _ = fs::remove_file(&ballast);
    let exited = run.dep.server_exited();
    if exited {
        let _ = run.dep.start_server(&[]);
    }
    let took = run.await_recovery("a full disk");
    let outcome = format!(
        "{} of {} free bytes filled for {} s{}; {}",
        if filled { size } else { 0 },
        free,
        hold.as_secs(),
        if exited {
            "; the service exited and was restarted"
        } else {
            ""
        },
        ready_text("space freed", took)
    );
    if exited {
        let at = run.now_s();
        lock(&run.obs).violated(
            inv::CLEAN,
            at,
            "the service exited on a full disk instead of refusing writes until there was space"
                .into(),
        );
    }
    run.record(
        FaultKind::DiskFull,
        "data directory (tmpfs)".into(),
        outcome,
        took,
        filled,
    );
}

fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the struct it is given from a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

fn fill(path: &Path, size: u64) -> bool {
    use std::io::Write;
    let Ok(mut f) = fs::File::create(path) else {
        return false;
    };
    let chunk = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        if f.write_all(&chunk[..n]).is_err() {
            break;
        }
        left -= n as u64;
    }
    true
}

fn fiu_ctrl(run: &Run, commands: &[&str]) -> bool {
    let Some(pid) = run.dep.server_pid() else {
        return false;
    };
    let mut cmd = Command::new("fiu-ctrl");
    cmd.arg("-f").arg(&run.dep.fiu_prefix);
    for c in commands {
        cmd.arg("-c").arg(c);
    }
    cmd.arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn fsync_eio(run: &mut Run, rng: &mut Rng) {
    if !run.dep.opts.fiu {
        run.record(
            FaultKind::FsyncEio,
            "vouch serve".into(),
            "not run: libfiu (Debian's fiu-utils) is not installed".into(),
            None,
            false,
        );
        return;
    }
    let on = fiu_ctrl(
        run,
        &[
            "enable_random name=posix/io/sync/fsync,probability=0.5,failinfo=5",
            "enable_random name=posix/io/sync/fdatasync,probability=0.5,failinfo=5",
        ],
    );
    let hold = Duration::from_secs(10 + rng.below(15));
    run_local_plan(run);
    std::thread::sleep(hold);
    let off = fiu_ctrl(
        run,
        &[
            "disable name=posix/io/sync/fsync",
            "disable name=posix/io/sync/fdatasync",
        ],
    );
    let exited = run.dep.server_exited();
    if exited {
        let at = run.now_s();
        lock(&run.obs).violated(
            inv::CLEAN,
            at,
            "the service exited while fsync failed with EIO".into(),
        );
        let _ = run.dep.start_server(&[]);
    }
    let took = run.await_recovery("fsync EIO");
    run.record(
        FaultKind::FsyncEio,
        "vouch serve: fsync and fdatasync".into(),
        format!(
            "half of the syncs failed with EIO for {} s{}{}; {}",
            hold.as_secs(),
            if on { "" } else { " (arming failed)" },
            if off { "" } else { " (disarming failed)" },
            ready_text("syncs work again", took)
        ),
        took,
        on,
    );
}

fn clock_step(run: &mut Run, kind: FaultKind, rng: &mut Rng) {
    if !run.dep.opts.faketime {
        run.record(
            kind,
            "-".into(),
            "not run: libfaketime (Debian's faketime) is not installed".into(),
            None,
            false,
        );
        return;
    }
    let offsets: [i64; 6] = [90, -90, 600, -600, 7200, -3600];
    let offset = offsets[rng.below(offsets.len() as u64) as usize];
    let (file, target) = if kind == FaultKind::ClockStepServer {
        (run.dep.clock_file.clone(), "vouch serve".to_owned())
    } else {
        let Some(i) = pick_agent(run, kind, rng) else {
            return;
        };
        run_plan_of_agent(run, i);
        (
            run.dep.agents[i].clock_file.clone(),
            format!("agent {}", run.dep.agents[i].name),
        )
    };
    let hold = Duration::from_secs(10 + rng.below(20));
    let seq = lock(&run.obs).next_seq;
    let ok = fs::write(&file, format!("{offset:+}\n")).is_ok();
    run_local_plan(run);
    std::thread::sleep(hold);
    let back = fs::write(&file, "+0\n").is_ok();
    std::thread::sleep(Duration::from_secs(3));
    let noticed = lock(&run.obs)
        .of_type("service.clock_stepped")
        .any(|(s, _)| s >= seq);
    run.record(
        kind,
        target,
        format!(
            "wall clock {offset:+} s for {} s, then back{}{}",
            hold.as_secs(),
            if back { "" } else { " (failed to step back)" },
            if noticed {
                "; service.clock_stepped recorded"
            } else {
                ""
            }
        ),
        None,
        ok,
    );
}

/// For 10 to 35 s, every 2nd to 5th request between the service and its
/// S3 store fails, in turn: 503 SlowDown, the upload reset midway, the
/// answer truncated, the answer withheld past the client's timeout. A
/// backup of the S3 plan is asked for first, so that uploads meet them.
fn s3_faults(run: &mut Run, rng: &mut Rng) {
    use crate::s3_faults::{FaultPlan, HttpFault};
    if run.dep.s3.is_none() {
        run.record(
            FaultKind::S3Faults,
            "service ↔ S3".into(),
            "not run: no S3 store (VOUCH_S3_ENDPOINT and the AWS keys of `.ci/s3-server.sh start`)"
                .into(),
            None,
            false,
        );
        return;
    }
    if let Some(i) = run.plans.iter().position(|p| p.id == "local-s3") {
        run_plan(run, i, rng.next_u64());
    }
    let mut rotation = vec![
        HttpFault::SlowDown,
        HttpFault::ResetUpload,
        HttpFault::TruncateAnswer,
        HttpFault::Stall(Duration::from_secs(12)),
    ];
    rotation.rotate_left(rng.below(4) as usize);
    let plan = FaultPlan {
        every: 2 + rng.below(4),
        rotation,
        method: None,
    };
    let hold = Duration::from_secs(10 + rng.below(25));
    let Some(s3) = &run.dep.s3 else {
        return;
    };
    let before = s3.proxy.stats();
    s3.proxy.set(plan.clone());
    std::thread::sleep(hold);
    s3.proxy.set(FaultPlan::default());
    let after = s3.proxy.stats();
    run.record(
        FaultKind::S3Faults,
        "service ↔ S3 store".into(),
        format!(
            "every {}th request failed in turn ({:?}) for {} s: of {} requests, {} answered 503 SlowDown, {} uploads reset, {} answers truncated, {} withheld",
            plan.every,
            plan.rotation,
            hold.as_secs(),
            after.requests - before.requests,
            after.slow_downs - before.slow_downs,
            after.resets - before.resets,
            after.truncations - before.truncations,
            after.stalls - before.stalls
        ),
        None,
        true,
    );
}

fn network(run: &mut Run, kind: FaultKind, rng: &mut Rng) {
    use FaultKind::*;
    for i in 0..run.dep.agents.len() {
        if !run.dep.agents[i].retired {
            run_plan_of_agent(run, i);
        }
    }
    std::thread::sleep(Duration::from_millis(rng.below(2_000)));
    let hold = Duration::from_secs(10 + rng.below(25));
    let faults = match kind {
        NetBlackhole => Faults {
            blackhole: true,
            ..Faults::default()
        },
        NetLatency => Faults {
            latency: Duration::from_millis(300),
            ..Faults::default()
        },
        NetBandwidth => Faults {
            bandwidth: Some(32 * 1024),
            ..Faults::default()
        },
        NetRefuse => Faults {
            refuse: true,
            ..Faults::default()
        },
        _ => Faults::default(),
    };
    let before = run.dep.proxy.stats();
    let what = if kind == NetReset {
        run.dep.proxy.reset_all();
        "every agent connection reset".to_owned()
    } else {
        if kind == NetRefuse {
            // Open connections would outlive the refusal: cut them, so
            // that every agent has to connect again meanwhile.
            run.dep.proxy.reset_all();
        }
        run.dep.proxy.set(faults.clone());
        std::thread::sleep(hold);
        run.dep.proxy.set(Faults::default());
        format!("{faults:?} for {} s", hold.as_secs())
    };
    let after = run.dep.proxy.stats();
    run.record(
        kind,
        "agents ↔ service".into(),
        format!(
            "{what}; {} connections reset, {} refused meanwhile",
            after.connections_reset - before.connections_reset,
            after.connections_refused - before.connections_refused
        ),
        None,
        true,
    );
}

/// `vouch backup` of `tree` into the service's default repository, as a
/// second client would run it.
fn cli_backup(run: &Run, tree: &Path) -> std::io::Result<Child> {
    Command::new(&run.opts.vouch)
        .arg("backup")
        .arg("--repo")
        .arg(run.dep.data.join("repository"))
        .arg("--password-file")
        .arg(run.dep.data.join("repository.passphrase"))
        .arg("--json")
        .arg(tree)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
}

/// Waits for a client: its exit code and the last line of its stderr; a
/// panic is a violation.
fn finish_client(run: &Run, child: Child, what: &str, limit: Duration) -> String {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(limit) {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return format!("{what}: waiting failed: {e}"),
        Err(_) => {
            signal(pid, libc::SIGKILL);
            let at = run.now_s();
            lock(&run.obs).violated(
                inv::CLEAN,
                at,
                format!("{what} did not finish within {} s", limit.as_secs()),
            );
            return format!("{what}: hung; killed");
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("panicked") {
        let at = run.now_s();
        lock(&run.obs).violated(
            inv::CLEAN,
            at,
            format!("{what} panicked: {}", stderr.trim()),
        );
    }
    let code = out.status.code().unwrap_or(-1);
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    if code == 0 {
        format!("{what}: exit 0")
    } else {
        format!("{what}: exit {code} ({})", last.trim())
    }
}

fn client_tree(run: &mut Run, rng: &mut Rng) -> Option<PathBuf> {
    let t: &mut Tree = run.other_trees.first_mut()?;
    t.mutate(rng).ok()?;
    Some(t.root.clone())
}

fn pause_writer_across_prune(run: &mut Run, rng: &mut Rng) {
    let Some(tree) = client_tree(run, rng) else {
        return;
    };
    let child = match cli_backup(run, &tree) {
        Ok(c) => c,
        Err(e) => {
            run.notes.push(format!("vouch backup could not start: {e}"));
            return;
        }
    };
    let pid = child.id();
    let delay = Duration::from_millis(100 + rng.below(500));
    std::thread::sleep(delay);
    signal(pid, libc::SIGSTOP);
    let seq = lock(&run.obs).next_seq;
    let started = Instant::now();
    let mut pruned = false;
    while started.elapsed() < Duration::from_secs(70) {
        pruned = lock(&run.obs)
            .of_type("repository.pruned")
            .any(|(s, _)| s >= seq);
        if pruned {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let paused = started.elapsed();
    signal(pid, libc::SIGCONT);
    let result = finish_client(
        run,
        child,
        "the paused vouch backup",
        Duration::from_secs(180),
    );
    run.record(
        FaultKind::PauseWriterAcrossPrune,
        "vouch backup into the default repository".into(),
        format!(
            "stopped {} ms after its start for {:.1} s, {}; {result}",
            delay.as_millis(),
            paused.as_secs_f64(),
            if pruned {
                "across a prune of the service"
            } else {
                "no prune ran meanwhile"
            }
        ),
        None,
        true,
    );
}

fn concurrent_clients(run: &mut Run, rng: &mut Rng) {
    let Some(tree) = client_tree(run, rng) else {
        return;
    };
    let backup = cli_backup(run, &tree);
    let check = Command::new(&run.opts.vouch)
        .arg("check")
        .arg("--repo")
        .arg(run.dep.data.join("repository"))
        .arg("--password-file")
        .arg(run.dep.data.join("repository.passphrase"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    run_local_plan(run);
    let mut results = Vec::new();
    if let Ok(c) = backup {
        results.push(finish_client(
            run,
            c,
            "vouch backup",
            Duration::from_secs(180),
        ));
    }
    if let Ok(c) = check {
        results.push(finish_client(
            run,
            c,
            "vouch check",
            Duration::from_secs(180),
        ));
    }
    run.record(
        FaultKind::ConcurrentClients,
        "the default repository: the service, vouch backup and vouch check".into(),
        results.join("; "),
        None,
        true,
    );
}

fn revoke_agent(run: &mut Run, rng: &mut Rng) {
    run.revoked += 1;
    let name = format!("revoked{}", run.revoked);
    if let Err(e) = run.dep.enrol_agent(&name) {
        run.record(
            FaultKind::RevokeAgent,
            name,
            format!("could not enrol: {e}"),
            None,
            false,
        );
        return;
    }
    let i = run.dep.agents.len() - 1;
    let root = run.opts.work.join("trees").join(&name);
    let mut trng = Rng::new(rng.next_u64());
    let Ok(tree) = Tree::generate(&root, 200, &mut trng) else {
        return;
    };
    let plan = format!("plan-{name}");
    if run
        .create_plan(&plan, &format!("agent:{name}:{}", root.display()))
        .is_err()
    {
        return;
    }
    run.other_trees.push(tree);
    let job = match run
        .client()
        .post_json(&format!("/api/v1/plans/{plan}/run"), &json!({}))
    {
        Ok((202, j)) => j["id"].as_str().unwrap_or_default().to_owned(),
        _ => String::new(),
    };
    // Revoked while the agent works on it: as soon as the job runs (its
    // lease granted), after 0 to 300 ms more.
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        let state = run
            .client()
            .get_json(&format!("/api/v1/jobs/{job}"))
            .ok()
            .and_then(|j| j["state"].as_str().map(str::to_owned));
        if state.as_deref() != Some("scheduled") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(rng.below(300)));
    let state_then = run
        .client()
        .get_json(&format!("/api/v1/jobs/{job}"))
        .ok()
        .and_then(|j| j["state"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into());
    let revoked = run.dep.vouch_token(&["revoke", &name]).is_ok();
    // The service reloads its tokens about once a second (docs/agents.md):
    // a commit recorded within REVOCATION_GRACE of the revocation may
    // still be the credential's; one recorded after the log's end as read
    // then is not. The log's order, not its clock, decides: the clock
    // nemesis may have stepped the service's clock.
    std::thread::sleep(REVOCATION_GRACE);
    let fence = read_events(run.client(), &run.obs, run.t0).then(|| lock(&run.obs).next_seq);
    // The job must end without a commit after the revocation.
    let started = Instant::now();
    let mut end_state = String::from("still open after 90 s");
    while started.elapsed() < Duration::from_secs(90) {
        if let Ok(j) = run.client().get_json(&format!("/api/v1/jobs/{job}")) {
            let s = j["state"].as_str().unwrap_or_default();
            if matches!(s, "succeeded" | "failed" | "abandoned") {
                end_state = s.to_owned();
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(2));
    read_events(run.client(), &run.obs, run.t0);
    let late_commit = fence.is_some_and(|fence| {
        lock(&run.obs)
            .of_type("backup.committed")
            .any(|(seq, e)| e.data["job"].as_str() == Some(job.as_str()) && seq >= fence)
    });
    if late_commit {
        let at = run.now_s();
        lock(&run.obs).violated(
            inv::CLEAN,
            at,
            format!("job {job} committed after its agent's credential was revoked"),
        );
    }
    let exited = run.dep.agent_exited(i);
    run.dep.agents[i].retired = true;
    run.dep.kill_agent(i);
    let _ = run
        .client()
        .call("DELETE", &format!("/api/v1/plans/{plan}"), None);
    run.record(
        FaultKind::RevokeAgent,
        format!("agent {name}"),
        format!(
            "credential revoked{} while its job was {state_then}; the job ended {end_state}; the agent {}",
            if revoked { "" } else { " (the revocation failed)" },
            if exited { "exited by itself" } else { "kept running and was stopped" }
        ),
        None,
        revoked,
    );
}
