//! Plan hooks: programs a host's administrator installed in the host's
//! hook directory, run before and after a plan's backups.
//!
//! A plan names a hook, never a command line: the API can make a host run
//! only what its administrator put into that directory (`[hooks] dir` of
//! the server, `vouch agent run --hooks-dir` of an agent). A host without
//! a hook directory runs no hook, and a plan that asks for one fails there,
//! saying so.
//!
//! A hook runs in its own process group with standard input closed; its
//! standard output is discarded and the end of its standard error kept for
//! the `hook.failed` event. At its timeout the whole group gets SIGTERM,
//! then SIGKILL after [`KILL_GRACE`].

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vouch_events::{Hook, HookFailed, HookPhase, JobId, PlanId};

/// How long a hook has to exit after SIGTERM before it gets SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(5);

/// How much of a failed hook's standard error is kept.
const STDERR_TAIL: usize = 2048;

/// How often a running hook is looked at.
const POLL: Duration = Duration::from_millis(20);

/// What a hook run is for.
#[derive(Clone, Debug)]
pub struct HookContext<'a> {
    /// The backup job.
    pub job: &'a JobId,
    /// Its plan.
    pub plan: &'a PlanId,
    /// Before or after the backup.
    pub phase: HookPhase,
    /// After the backup: `ok` or `failed` (its `VOUCH_BACKUP_STATUS`).
    pub status: Option<&'a str>,
    /// After a committed backup: the point (its `VOUCH_SNAPSHOT`).
    pub snapshot: Option<String>,
}

/// Runs `hook` from `dir` (none: this host runs no hooks); `cancel` stops
/// it like its timeout. Ok when it exited 0; otherwise the `hook.failed`
/// event to record.
pub fn run_hook(
    dir: Option<&Path>,
    hook: &Hook,
    ctx: &HookContext<'_>,
    cancel: Option<&AtomicBool>,
) -> Result<(), HookFailed> {
    let started = Instant::now();
    let failed = |exit_code: Option<i32>, timed_out: bool, reason: String| HookFailed {
        job: ctx.job.clone(),
        plan: ctx.plan.clone(),
        phase: ctx.phase,
        hook: hook.name.clone(),
        exit_code,
        timed_out,
        reason,
        took_ms: started.elapsed().as_millis() as u64,
    };
    let program = match resolve(dir, &hook.name) {
        Ok(p) => p,
        Err(why) => return Err(failed(None, false, why)),
    };
    let _span =
        tracing::info_span!("hook", hook = %hook.name, phase = ctx.phase.as_str()).entered();
    let mut cmd = Command::new(&program);
    cmd.args(&hook.args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env("VOUCH_PLAN", ctx.plan.as_str())
        .env("VOUCH_JOB", ctx.job.as_str())
        .env("VOUCH_HOOK_PHASE", ctx.phase.as_str())
        .process_group(0);
    if let Some(dir) = program.parent() {
        cmd.current_dir(dir);
    }
    if let Some(status) = ctx.status {
        cmd.env("VOUCH_BACKUP_STATUS", status);
    }
    if let Some(snapshot) = &ctx.snapshot {
        cmd.env("VOUCH_SNAPSHOT", snapshot);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Err(failed(
                None,
                false,
                format!("{} could not be started: {e}", program.display()),
            ))
        }
    };
    let stderr = child.stderr.take().map(|mut pipe| {
        std::thread::spawn(move || {
            // Read to the end (a hook blocked on a full pipe never exits),
            // keeping the tail.
            let mut tail: Vec<u8> = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > 2 * STDERR_TAIL {
                    tail.drain(..tail.len() - STDERR_TAIL);
                }
            }
            let start = tail.len().saturating_sub(STDERR_TAIL);
            String::from_utf8_lossy(&tail[start..]).trim().to_owned()
        })
    });
    let deadline = started + hook.timeout;
    let outcome = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) => {}
            Err(e) => break Err((format!("waiting for it failed: {e}"), false)),
        }
        let stopped = cancel.is_some_and(|c| c.load(Ordering::Relaxed));
        if Instant::now() >= deadline || stopped {
            kill_group(&mut child);
            break Err(if stopped {
                ("stopped: the job was cancelled".to_owned(), false)
            } else {
                (
                    format!(
                        "killed after its timeout of {}",
                        humantime::format_duration(hook.timeout)
                    ),
                    true,
                )
            });
        }
        std::thread::sleep(POLL);
    };
    let tail = stderr
        .and_then(|t| t.join().ok())
        .filter(|t| !t.is_empty())
        .map(|t| format!(": {t}"))
        .unwrap_or_default();
    match outcome {
        Ok(status) if status.success() => {
            tracing::info!(
                took_ms = started.elapsed().as_millis() as u64,
                "hook succeeded"
            );
            Ok(())
        }
        Ok(status) => {
            let why = match (status.code(), status.signal()) {
                (Some(code), _) => format!("exited with status {code}"),
                (None, Some(sig)) => format!("killed by signal {sig}"),
                (None, None) => "ended abnormally".to_owned(),
            };
            tracing::warn!(status = %why, "hook failed");
            Err(failed(status.code(), false, format!("{why}{tail}")))
        }
        Err((why, timed_out)) => {
            tracing::warn!(reason = %why, "hook failed");
            Err(failed(None, timed_out, format!("{why}{tail}")))
        }
    }
}

/// A configured hook directory (`setting` names it in messages): it must
/// be an absolute path to a directory; a warning is logged when others
/// than its owner may write to it (anyone who can write there can run
/// programs as this process), or when it cannot be read yet (hooks then
/// fail until it can).
pub fn check_dir(dir: &Path, setting: &str) -> Result<PathBuf, String> {
    if !dir.is_absolute() {
        return Err(format!(
            "{setting} must be an absolute path, not {}",
            dir.display()
        ));
    }
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => {
            return Err(format!("{setting} {} is not a directory", dir.display()))
        }
        Ok(m) if m.permissions().mode() & 0o022 != 0 => tracing::warn!(
            dir = %dir.display(),
            "{setting} is writable by others than its owner: anyone who can write there can run programs as this process"
        ),
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "{setting} cannot be read: plans' hooks will fail until it can")
        }
    }
    Ok(dir.to_path_buf())
}

/// The hook's program: a regular, executable file of that name directly in
/// `dir`.
fn resolve(dir: Option<&Path>, name: &str) -> Result<PathBuf, String> {
    if !vouch_events::valid_hook_name(name) {
        return Err(format!("{name:?} is not a hook name"));
    }
    let Some(dir) = dir else {
        return Err(format!(
            "this host runs no hooks (no hook directory is configured: [hooks] dir on the server, --hooks-dir for an agent), so hook {name:?} cannot run"
        ));
    };
    let path = dir.join(name);
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(path),
        Ok(m) if m.is_file() => Err(format!(
            "{} is not executable (chmod +x it)",
            path.display()
        )),
        Ok(_) => Err(format!("{} is not a file", path.display())),
        Err(e) => Err(format!(
            "hook {name:?} is not installed: {}: {e}",
            path.display()
        )),
    }
}

/// SIGTERM to the hook's process group, SIGKILL after [`KILL_GRACE`].
fn kill_group(child: &mut Child) {
    let Ok(pid) = i32::try_from(child.id()) else {
        let _ = child.kill();
        return;
    };
    // SAFETY: kill(2) with a negative pid signals the process group the
    // hook leads (`process_group(0)`); no memory is involved.
    unsafe { libc::kill(-pid, libc::SIGTERM) };
    let until = Instant::now() + KILL_GRACE;
    while Instant::now() < until {
        if matches!(child.try_wait(), Ok(Some(_))) {
            // The leader is gone; its group may not be.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            return;
        }
        std::thread::sleep(POLL);
    }
    // SAFETY: as above.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn install(dir: &Path, name: &str, script: &str) {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn hook(name: &str, timeout_ms: u64) -> Hook {
        Hook {
            name: name.into(),
            args: vec!["first arg".into()],
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    fn ctx<'a>(job: &'a JobId, plan: &'a PlanId) -> HookContext<'a> {
        HookContext {
            job,
            plan,
            phase: HookPhase::Post,
            status: Some("ok"),
            snapshot: Some("ab".repeat(32)),
        }
    }

    #[test]
    fn a_hook_gets_its_arguments_and_environment() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("seen");
        install(
            dir.path(),
            "record",
            &format!(
                "echo \"$1|$VOUCH_PLAN|$VOUCH_JOB|$VOUCH_HOOK_PHASE|$VOUCH_BACKUP_STATUS|$VOUCH_SNAPSHOT\" > {}",
                out.display()
            ),
        );
        let (job, plan) = (JobId::new("j1"), PlanId::new("web"));
        run_hook(
            Some(dir.path()),
            &hook("record", 10_000),
            &ctx(&job, &plan),
            None,
        )
        .unwrap();
        let seen = std::fs::read_to_string(&out).unwrap();
        assert_eq!(
            seen.trim(),
            format!("first arg|web|j1|post|ok|{}", "ab".repeat(32))
        );
    }

    #[test]
    fn a_failing_hook_says_its_status_and_stderr() {
        let dir = tempfile::tempdir().unwrap();
        install(
            dir.path(),
            "fail",
            "echo 'pg_dump: connection refused' >&2; exit 3",
        );
        let (job, plan) = (JobId::new("j1"), PlanId::new("web"));
        let f = run_hook(
            Some(dir.path()),
            &hook("fail", 10_000),
            &ctx(&job, &plan),
            None,
        )
        .unwrap_err();
        assert_eq!(f.exit_code, Some(3));
        assert!(!f.timed_out);
        assert!(f.reason.contains("exited with status 3"), "{}", f.reason);
        assert!(f.reason.contains("connection refused"), "{}", f.reason);
        assert_eq!((f.hook.as_str(), f.phase), ("fail", HookPhase::Post));
    }

    /// The timeout kills the hook and what it started (its process group):
    /// the grandchild `sleep` must not outlive it.
    #[test]
    fn a_hook_past_its_timeout_is_killed_with_its_children() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("child.pid");
        install(
            dir.path(),
            "hang",
            &format!("sleep 600 & echo $! > {}; wait", pidfile.display()),
        );
        let (job, plan) = (JobId::new("j1"), PlanId::new("web"));
        let started = Instant::now();
        let f = run_hook(
            Some(dir.path()),
            &hook("hang", 300),
            &ctx(&job, &plan),
            None,
        )
        .unwrap_err();
        assert!(f.timed_out, "{f:?}");
        assert!(f.reason.contains("timeout"), "{}", f.reason);
        assert!(started.elapsed() < Duration::from_secs(30));
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Gone, or a zombie waiting for init to reap it: not running.
        let running = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit(')')
                        .next()
                        .map(|r| r.trim_start().starts_with(['R', 'S', 'D', 'T']))
                })
                .unwrap_or(false)
        };
        let until = Instant::now() + Duration::from_secs(5);
        while running() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!running(), "the hook's child {pid} outlived it");
    }

    #[test]
    fn only_installed_executables_of_the_hook_directory_run() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("plain"), "#!/bin/sh\n").unwrap();
        let (job, plan) = (JobId::new("j1"), PlanId::new("web"));
        let c = ctx(&job, &plan);
        let why = |d: Option<&Path>, name: &str| {
            run_hook(d, &hook(name, 1000), &c, None).unwrap_err().reason
        };
        assert!(why(None, "x").contains("no hook directory"));
        assert!(why(Some(dir.path()), "missing").contains("not installed"));
        assert!(why(Some(dir.path()), "plain").contains("not executable"));
        assert!(why(Some(dir.path()), "../etc/passwd").contains("not a hook name"));
        assert!(why(Some(dir.path()), ".hidden").contains("not a hook name"));
    }
}
