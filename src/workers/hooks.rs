//! What a plan's file selection and hooks mean for one backup job on the
//! host that runs it (the server here; an agent runs the same for its own
//! plans, `crate::agent`).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use vouch_actors::service::JobFailure;
use vouch_events::{BackupHooks, Event, FileSelection, HookFailed, HookPhase, JobId, PlanId};

use crate::backup::BackupOptions;
use crate::hooks::{run_hook, HookContext};

/// The `error_kind` of a backup stopped by its failed pre hook.
pub const PRE_HOOK_FAILED: &str = "pre_hook_failed";

pub use vouch_actors::service::OPTIONS_UNSUPPORTED;

/// Refuses a plan whose source's kind does not do what it asks: its
/// backups fail saying why rather than skip a hook or an exclusion.
pub fn supported(definition: &vouch_events::PlanDefinition) -> Result<(), JobFailure> {
    let source = definition.source.as_str();
    let guest = source.starts_with("pve:") || source.starts_with("vzdump:");
    let hooked = definition.hooks.pre.is_some() || definition.hooks.post.is_some();
    let why = if guest && !definition.files.is_default() {
        "a guest's backup selects no files: remove the plan's `files`"
    } else if guest && hooked {
        "hooks run around file-system backups (the server's own, or an agent's), not a guest's: remove the plan's `hooks`, or run the work in the guest"
    } else {
        return Ok(());
    };
    Err(JobFailure::new(OPTIONS_UNSUPPORTED, why, false))
}

/// The backup options a plan's file selection asks for: its source's path
/// and the `also` paths, with its exclusions.
pub fn file_options(source: &str, files: &FileSelection) -> BackupOptions {
    BackupOptions {
        paths: std::iter::once(source)
            .chain(files.also.iter().map(String::as_str))
            .map(PathBuf::from)
            .collect(),
        excludes: files.exclude.clone(),
        exclude_files: files.exclude_files.iter().map(PathBuf::from).collect(),
        exclude_caches: files.exclude_caches,
        one_file_system: files.one_file_system,
        exclude_if_present: files.exclude_if_present.clone(),
        exclude_larger_than: files.exclude_larger_than,
        ..BackupOptions::default()
    }
}

/// A backup job's hooks, run around it.
pub struct Hooked<'a> {
    dir: Option<&'a Path>,
    hooks: &'a BackupHooks,
    job: &'a JobId,
    plan: &'a PlanId,
    cancel: Arc<AtomicBool>,
}

impl<'a> Hooked<'a> {
    /// The hooks of `plan` for `job`, from `dir`; a running hook is
    /// stopped when `cancel` is set.
    pub fn new(
        dir: Option<&'a Path>,
        hooks: &'a BackupHooks,
        job: &'a JobId,
        plan: &'a PlanId,
        cancel: Arc<AtomicBool>,
    ) -> Self {
        Hooked {
            dir,
            hooks,
            job,
            plan,
            cancel,
        }
    }

    fn run(
        &self,
        phase: HookPhase,
        status: Option<&str>,
        snapshot: Option<&str>,
    ) -> Result<(), HookFailed> {
        let hook = match phase {
            HookPhase::Pre => &self.hooks.pre,
            HookPhase::Post => &self.hooks.post,
        };
        let Some(hook) = hook else { return Ok(()) };
        let ctx = HookContext {
            job: self.job,
            plan: self.plan,
            phase,
            status,
            snapshot: snapshot.map(str::to_owned),
        };
        run_hook(self.dir, hook, &ctx, Some(&self.cancel))
    }

    /// Runs the pre hook: a failure stops the backup, with its
    /// `hook.failed` (the post hook still runs, told the backup failed).
    pub fn pre(&self) -> Result<(), JobFailure> {
        let Err(failed) = self.run(HookPhase::Pre, None, None) else {
            return Ok(());
        };
        let mut f = JobFailure::new(
            PRE_HOOK_FAILED,
            format!(
                "the pre-backup hook {:?} failed, so the backup did not run: {} (fix the hook, or the plan's hooks.pre)",
                failed.hook, failed.reason
            ),
            // Whatever it waits for (a database, a mount) may be back on
            // the next attempt.
            true,
        );
        f.events.push(failed.into());
        Err(self.post_failed(f))
    }

    /// Runs the post hook after a failed backup, adding its own failure to
    /// the job's.
    pub fn post_failed(&self, mut failure: JobFailure) -> JobFailure {
        if let Err(hook) = self.run(HookPhase::Post, Some("failed"), None) {
            failure.events.push(hook.into());
        }
        failure
    }

    /// Runs the post hook after a committed backup: its failure is an event
    /// to record after the commit, the backup stands.
    pub fn post_ok(&self, snapshot: &str) -> Option<Event> {
        self.run(HookPhase::Post, Some("ok"), Some(snapshot))
            .err()
            .map(Event::from)
    }
}
