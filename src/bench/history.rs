//! A realistic event history for `vouch bench service`: plans, backup,
//! verification, restore-test and retention jobs with their progress,
//! failures and retries, alerts, service restarts; written through the
//! events crate's own log writer, in time order, in batches.
//!
//! Every choice is a pure function of (day, plan) hashed with BLAKE3, so
//! the same `--events`/`--points`/`--plans` give the same log. The number
//! of events is exact: the structural events are counted first and the
//! rest are `job.progress` events spread over the job runs.
//!
//! So that the service started on it does not run a storm of real jobs
//! (which would measure the engine, not the service): every plan is paused
//! by a last `plan.changed` (the scheduler starts no backup of a paused
//! plan), the newest points of every plan are verified and restore-tested
//! within the last day (their `verification.every` is 7 days and
//! `restore_test.every` 30 days, so the periodic checks propose nothing),
//! and every job the log knows has ended (the dispatcher abandons and
//! retries nothing).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use vouch_events::{
    AlertDelivered, AlertId, AlertRaised, AlertResolved, BackupCommitted, BackupSummary, Event,
    EventLog, JobFailed, JobFinished, JobId, JobKind, JobProgress, JobScheduled, JobStarted,
    KeepPolicy, LogOptions, ManualClock, PlanChanged, PlanCreated, PlanDefinition, PlanId,
    PointDiscovered, PointForgotten, PointState, RepositoryId, RestoreEvidence, RestoreTestFailed,
    RestoreTestPassed, RestoreTestPolicy, RestoreTestStarted, ServiceStarted, Severity, SnapshotId,
    VerificationFailed, VerificationPassed, VerificationPolicy, VerificationStarted, VerifyDepth,
};

use super::{BenchError, Result};

const MINUTE: i64 = 60_000_000_000;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;
/// Events whose times fall in one window are appended together (one
/// `fdatasync`), stamped with the time of the first.
const WINDOW: i64 = 30 * MINUTE;
/// Points older than this many days may be forgotten by retention.
const FORGET_AFTER_DAYS: u64 = 7;

/// What to generate.
#[derive(Clone, Debug)]
pub struct HistoryOptions {
    /// Events in the log, exactly.
    pub events: u64,
    /// Recovery points (forgotten ones included).
    pub points: u64,
    /// Plans (at most `points`).
    pub plans: u64,
    /// The repository id of the points (serve's default repository).
    pub repository: String,
}

/// What was generated.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct HistorySummary {
    /// Events written.
    pub events: u64,
    /// Points, by the state the history gives them.
    pub points_by_state: BTreeMap<String, u64>,
    /// Plans.
    pub plans: u64,
    /// Days of history.
    pub days: u64,
    /// Job runs (attempts) of every kind.
    pub job_runs: u64,
    /// `job.progress` events among them.
    pub progress_events: u64,
    /// Appends (each one `fdatasync`).
    pub appends: u64,
    /// Recorded time of the last generated event.
    pub last_unix_ns: i64,
}

impl HistorySummary {
    /// Points of every state.
    pub fn points(&self) -> u64 {
        self.points_by_state.values().sum()
    }
}

/// What happens to one point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// Found by a catalog resync, never checked: unknown.
    Discovered,
    /// First backup attempt fails (alert), the retry succeeds: recoverable.
    RetriedRecoverable,
    /// The verify job starts and fails without a verdict (not the data):
    /// unknown, as long as no later check passes (a check that started and
    /// ended without a verdict caps the point, issue 12).
    Unverified,
    /// Verification finds damage: corrupt.
    Corrupt,
    /// The restore test fails: unrecoverable.
    Unrecoverable,
    /// Verified, not restore-tested (sampling): verified.
    Verified,
    /// The usual: recoverable.
    Recoverable,
}

impl Fate {
    fn state(self) -> PointState {
        match self {
            Fate::Discovered => PointState::Unknown,
            Fate::RetriedRecoverable | Fate::Recoverable => PointState::Recoverable,
            Fate::Unverified => PointState::Unknown,
            Fate::Corrupt => PointState::Corrupt,
            Fate::Unrecoverable => PointState::Unrecoverable,
            Fate::Verified => PointState::Verified,
        }
    }
}

/// One point's story.
#[derive(Clone, Copy, Debug)]
struct Chain {
    day: u64,
    plan: u64,
    fate: Fate,
    forgotten: bool,
}

fn hash(tag: &str, day: u64, plan: u64) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(b"vouch-bench-history");
    h.update(tag.as_bytes());
    h.update(&day.to_le_bytes());
    h.update(&plan.to_le_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&h.finalize().as_bytes()[..8]);
    u64::from_le_bytes(b)
}

/// The shape of the history, computed before any event is built.
struct Layout {
    o: HistoryOptions,
    days: u64,
    /// Start of day 0.
    base: i64,
    /// When the plans are paused (after every job).
    end: i64,
}

impl Layout {
    fn new(o: &HistoryOptions, now: i64) -> Result<Self> {
        if o.points == 0 || o.plans == 0 {
            return Err(BenchError::Workdir(
                "--points and --plans must be at least 1".into(),
            ));
        }
        let plans = o.plans.min(o.points);
        let days = o.points.div_ceil(plans);
        let o = HistoryOptions { plans, ..o.clone() };
        let end = now - 10 * MINUTE;
        // The last chain starts at base + (days-1) days + 22 h and ends
        // within about 3 h.
        let base = end - 3 * HOUR - 22 * HOUR - (days as i64 - 1) * DAY;
        Ok(Layout { o, days, base, end })
    }

    fn chain(&self, day: u64, plan: u64) -> Option<Chain> {
        if day * self.o.plans + plan >= self.o.points {
            return None;
        }
        let r = hash("fate", day, plan) % 1000;
        // The newest two days are always fully proven, so the periodic
        // checks find nothing due.
        let recent = day + 2 >= self.days;
        let fate = match r {
            _ if recent => Fate::Recoverable,
            0..10 => Fate::Discovered,
            10..40 => Fate::RetriedRecoverable,
            40..60 => Fate::Unverified,
            60..70 => Fate::Corrupt,
            70..80 => Fate::Unrecoverable,
            80..110 => Fate::Verified,
            _ => Fate::Recoverable,
        };
        let forgotten = !recent
            && day + FORGET_AFTER_DAYS + 2 < self.days
            && hash("forget", day, plan) % 100 < 5;
        Some(Chain {
            day,
            plan,
            fate,
            forgotten,
        })
    }

    fn start_of(&self, c: &Chain) -> i64 {
        self.base + c.day as i64 * DAY + (c.plan as i64 * 22 * HOUR) / self.o.plans as i64
    }

    /// Job runs of a chain that get progress events.
    fn runs(c: &Chain) -> u64 {
        match c.fate {
            Fate::Discovered => 0,
            Fate::RetriedRecoverable => 4,
            Fate::Unverified => 2,
            Fate::Corrupt | Fate::Verified => 2,
            Fate::Unrecoverable | Fate::Recoverable => 3,
        }
    }

    /// Events of a chain without progress events.
    fn structural(c: &Chain) -> u64 {
        // job: scheduled, started, finished/failed = 3; verify and restore
        // jobs add their started + passed/failed events.
        let backup = 3 + 1; // + backup.committed
        let verify = 3 + 2;
        let restore = 3 + 2;
        let alert = 3; // raised, delivered, resolved
        match c.fate {
            Fate::Discovered => 1,
            Fate::RetriedRecoverable => 3 + alert + backup + verify + restore,
            Fate::Unverified => backup + 3,
            Fate::Corrupt => backup + verify + alert,
            Fate::Verified => backup + verify,
            Fate::Unrecoverable => backup + verify + restore + alert,
            Fate::Recoverable => backup + verify + restore,
        }
    }

    fn plan_id(&self, plan: u64) -> PlanId {
        PlanId::new(format!("bench-{plan:03}"))
    }

    fn definition(&self, plan: u64, changed: bool, paused: bool) -> PlanDefinition {
        PlanDefinition {
            source: format!("/srv/bench/host-{plan:03}"),
            schedule: "daily 02:00".into(),
            retention: KeepPolicy {
                daily: Some(if changed { 60 } else { 30 }),
                weekly: Some(12),
                ..Default::default()
            },
            verification: VerificationPolicy {
                after_backup: true,
                every: Some(Duration::from_secs(7 * 86_400)),
                depth: VerifyDepth::ReadSample(10),
            },
            restore_test: RestoreTestPolicy {
                every: Some(Duration::from_secs(30 * 86_400)),
                max_evidence_age: Duration::from_secs(45 * 86_400),
                sample_files: Some(100),
                full_every: Some(Duration::from_secs(30 * 86_400)),
                boot: None,
            },
            rpo: Duration::from_secs(if changed { 30 } else { 36 } * 3600),
            repository: RepositoryId::new(self.o.repository.as_str()),
            paused,
            replica: None,
            proxmox: None,
            anomaly_lock: None,
            files: Default::default(),
            hooks: Default::default(),
            time_zone: None,
        }
    }
}

fn snapshot_id(day: u64, plan: u64) -> SnapshotId {
    let mut h = blake3::Hasher::new();
    h.update(b"vouch-bench-point");
    h.update(&day.to_le_bytes());
    h.update(&plan.to_le_bytes());
    SnapshotId(*h.finalize().as_bytes())
}

/// Events at one time.
struct Phase {
    at: i64,
    /// Order among phases at the same time.
    order: u64,
    events: Vec<Event>,
}

/// Builds the phases of chains, handing out progress events.
struct Builder<'a> {
    layout: &'a Layout,
    /// Progress events per run, and how many runs get one more.
    per_run: u64,
    extra_runs: u64,
    runs_done: u64,
    progress: u64,
    order: u64,
}

impl Builder<'_> {
    fn progress_for_run(&mut self) -> u64 {
        let n = self.per_run + u64::from(self.runs_done < self.extra_runs);
        self.runs_done += 1;
        self.progress += n;
        n
    }

    fn phase(&mut self, at: i64, events: Vec<Event>) -> Phase {
        self.order += 1;
        Phase {
            at,
            order: self.order,
            events,
        }
    }

    fn push_progress(job: &JobId, from: u64, to: u64, total: u64, out: &mut Vec<Event>) {
        for k in from..to {
            out.push(
                JobProgress {
                    job: job.clone(),
                    checkpoint: (k as u32).to_le_bytes().repeat(4),
                    done_bytes: (k + 1) * (total / (to.max(1))),
                    total_bytes: Some(total),
                }
                .into(),
            );
        }
    }

    /// A job run split in two phases: scheduled, started and half the
    /// progress at `at`; the rest, `result` and the end at `at + dur`.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &mut self,
        job: &JobId,
        kind: JobKind,
        plan: &PlanId,
        point: Option<SnapshotId>,
        attempt: u32,
        at: i64,
        dur: i64,
        started: Vec<Event>,
        result: Vec<Event>,
        end: Event,
        out: &mut Vec<Phase>,
    ) -> i64 {
        let n = self.progress_for_run();
        let total = 1 << 30;
        let mut a: Vec<Event> = vec![
            JobScheduled {
                job: job.clone(),
                kind,
                plan: Some(plan.clone()),
                point,
                due_unix_ns: at,
                attempt,
                spec: Default::default(),
            }
            .into(),
            JobStarted {
                job: job.clone(),
                agent: None,
            }
            .into(),
        ];
        a.extend(started);
        Self::push_progress(job, 0, n / 2, total, &mut a);
        let p = self.phase(at, a);
        out.push(p);
        let mut b = Vec::new();
        Self::push_progress(job, n / 2, n, total, &mut b);
        b.extend(result);
        b.push(end);
        let p = self.phase(at + dur, b);
        out.push(p);
        at + dur
    }

    fn chain(&mut self, c: &Chain, out: &mut Vec<Phase>) {
        let l = self.layout;
        let plan = l.plan_id(c.plan);
        let point = snapshot_id(c.day, c.plan);
        let t0 = l.start_of(c);
        let jitter = (hash("dur", c.day, c.plan) % 20) as i64;
        let repo = RepositoryId::new(l.o.repository.as_str());
        let job = |k: &str| JobId::new(format!("{}-d{}-{k}", plan, c.day));
        let alert = AlertId::new(format!("bench-{}-d{}", plan, c.day));
        let finished = |j: &JobId| -> Event { JobFinished { job: j.clone() }.into() };
        if c.fate == Fate::Discovered {
            let e = PointDiscovered {
                repository: repo,
                snapshot: point,
                snapshot_time_unix_ns: t0,
                plan: Some(plan),
            };
            let p = self.phase(t0, vec![e.into()]);
            out.push(p);
            return;
        }
        let backup = job("backup");
        let mut t = t0;
        let mut alert_open = false;
        let mut attempt = 1;
        if c.fate == Fate::RetriedRecoverable {
            let failed: Event = JobFailed {
                job: backup.clone(),
                error_kind: "source_unavailable".into(),
                message: "the source host did not answer".into(),
                retryable: true,
            }
            .into();
            t = self.run(
                &backup,
                JobKind::Backup,
                &plan,
                None,
                1,
                t,
                (5 + jitter) * MINUTE,
                vec![],
                vec![],
                failed,
                out,
            );
            self.alert_raised(
                &alert,
                Severity::Warning,
                &plan,
                "backup failed: the source host did not answer",
                t,
                out,
            );
            alert_open = true;
            t += 30 * MINUTE;
            attempt = 2;
        }
        let summary = BackupSummary {
            files: 20_000 + hash("files", c.day, c.plan) % 5000,
            bytes: (4 << 30) + (hash("bytes", c.day, c.plan) % (1 << 28)),
            added_bytes: 50 << 20,
            stored_bytes: 30 << 20,
            duration_ms: ((20 + jitter) * 60_000) as u64,
            total_bytes: Some(40 << 30),
            warnings: None,
        };
        let committed: Event = BackupCommitted {
            job: Some(backup.clone()),
            plan: Some(plan.clone()),
            repository: repo.clone(),
            snapshot: point,
            snapshot_time_unix_ns: t0,
            summary,
            changes: None,
        }
        .into();
        let end = finished(&backup);
        t = self.run(
            &backup,
            JobKind::Backup,
            &plan,
            None,
            attempt,
            t,
            (20 + jitter) * MINUTE,
            vec![],
            vec![committed],
            end,
            out,
        );
        let verify = job("verify");
        let depth = VerifyDepth::ReadSample(10);
        let started: Event = VerificationStarted {
            point,
            job: Some(verify.clone()),
            depth,
        }
        .into();
        match c.fate {
            Fate::Unverified => {
                let failed: Event = JobFailed {
                    job: verify.clone(),
                    error_kind: "repository_locked".into(),
                    message: "the repository was locked by another process".into(),
                    retryable: false,
                }
                .into();
                // The job failed before it read anything: no verification
                // event.
                self.run(
                    &verify,
                    JobKind::Verify,
                    &plan,
                    Some(point),
                    1,
                    t + MINUTE,
                    2 * MINUTE,
                    vec![],
                    vec![],
                    failed,
                    out,
                );
                return;
            }
            Fate::Corrupt => {
                let failed: Event = VerificationFailed {
                    point,
                    job: Some(verify.clone()),
                    depth,
                    bytes_read: 1 << 28,
                    damaged: vec!["pack 3f2a…: checksum mismatch".into()],
                }
                .into();
                let end = finished(&verify);
                t = self.run(
                    &verify,
                    JobKind::Verify,
                    &plan,
                    Some(point),
                    1,
                    t + MINUTE,
                    10 * MINUTE,
                    vec![started],
                    vec![failed],
                    end,
                    out,
                );
                self.alert_cycle(&alert, Severity::Critical, &plan, t, out);
                return;
            }
            _ => {}
        }
        let passed: Event = VerificationPassed {
            point,
            job: Some(verify.clone()),
            depth,
            bytes_read: 1 << 28,
            blobs_checked: 4000,
        }
        .into();
        let end = finished(&verify);
        t = self.run(
            &verify,
            JobKind::Verify,
            &plan,
            Some(point),
            1,
            t + MINUTE,
            10 * MINUTE,
            vec![started],
            vec![passed],
            end,
            out,
        );
        if c.fate == Fate::Verified {
            return;
        }
        let restore = job("restore");
        let evidence = RestoreEvidence {
            restored: vec![format!("/srv/bench/host-{:03}/etc", c.plan)],
            files: 100,
            bytes: 8 << 20,
            digests_compared: 100,
            digests_matched: if c.fate == Fate::Unrecoverable {
                97
            } else {
                100
            },
            duration_ms: 40_000,
            location: "server:sandbox".into(),
            files_in_point: Some(100),
            bytes_in_point: Some(8 << 20),
            complete: true,
            guest: None,
        };
        let result: Event = if c.fate == Fate::Unrecoverable {
            RestoreTestFailed {
                point,
                job: Some(restore.clone()),
                evidence,
                reason: "3 restored files differ from the snapshot".into(),
                cause: "mismatch".into(),
            }
            .into()
        } else {
            RestoreTestPassed {
                point,
                job: Some(restore.clone()),
                evidence,
            }
            .into()
        };
        let started: Event = RestoreTestStarted {
            point,
            job: Some(restore.clone()),
        }
        .into();
        let end = finished(&restore);
        t = self.run(
            &restore,
            JobKind::RestoreTest,
            &plan,
            Some(point),
            1,
            t + MINUTE,
            8 * MINUTE,
            vec![started],
            vec![result],
            end,
            out,
        );
        if c.fate == Fate::Unrecoverable {
            self.alert_cycle(&alert, Severity::Critical, &plan, t, out);
        } else if alert_open {
            let resolved: Event = AlertResolved { alert }.into();
            let p = self.phase(t + MINUTE, vec![resolved]);
            out.push(p);
        }
    }

    /// Raised about `plan` and delivered, a minute after `t`.
    fn alert_raised(
        &mut self,
        alert: &AlertId,
        severity: Severity,
        plan: &PlanId,
        message: &str,
        t: i64,
        out: &mut Vec<Phase>,
    ) {
        let raised: Event = AlertRaised {
            alert: alert.clone(),
            severity,
            subject: format!("plan {plan}"),
            message: message.into(),
            rule: "PlanNotProtected".into(),
            labels: [("plan".to_owned(), plan.to_string())]
                .into_iter()
                .collect(),
        }
        .into();
        let delivered: Event = AlertDelivered {
            alert: alert.clone(),
            receiver: "ops".into(),
            attempt: 1,
        }
        .into();
        let p = self.phase(t + MINUTE, vec![raised, delivered]);
        out.push(p);
    }

    /// Raised and delivered at `t`, resolved (acknowledged) an hour later.
    fn alert_cycle(
        &mut self,
        alert: &AlertId,
        severity: Severity,
        plan: &PlanId,
        t: i64,
        out: &mut Vec<Phase>,
    ) {
        let message = "a recovery point failed its check";
        self.alert_raised(alert, severity, plan, message, t, out);
        let resolved: Event = AlertResolved {
            alert: alert.clone(),
        }
        .into();
        let p = self.phase(t + HOUR, vec![resolved]);
        out.push(p);
    }

    /// The daily retention job of a plan: forgets the points of
    /// `FORGET_AFTER_DAYS` days ago that the history marks.
    fn retention(&mut self, day: u64, plan: u64, out: &mut Vec<Phase>) -> u64 {
        let l = self.layout;
        let Some(old_day) = day.checked_sub(FORGET_AFTER_DAYS) else {
            return 0;
        };
        let Some(old) = l.chain(old_day, plan) else {
            return 0;
        };
        if !old.forgotten {
            return 0;
        }
        let Some(today) = l.chain(day, plan) else {
            return 0;
        };
        let plan_id = l.plan_id(plan);
        let job = JobId::new(format!("{plan_id}-d{day}-forget"));
        // Two hours after the day's backup started.
        let at = l.start_of(&today) + 2 * HOUR;
        let events: Vec<Event> = vec![
            JobScheduled {
                job: job.clone(),
                kind: JobKind::Forget,
                plan: Some(plan_id.clone()),
                point: None,
                due_unix_ns: at,
                attempt: 1,
                spec: Default::default(),
            }
            .into(),
            JobStarted {
                job: job.clone(),
                agent: None,
            }
            .into(),
            PointForgotten {
                point: snapshot_id(old_day, plan),
                rule: "keep daily 30, weekly 12".into(),
            }
            .into(),
            JobFinished { job }.into(),
        ];
        let p = self.phase(at, events);
        out.push(p);
        4
    }
}

/// Writes the history into the log in `log_dir` (a new log, or one to
/// extend). `progress` is told the share done now and then.
pub fn generate(
    log_dir: &Path,
    o: &HistoryOptions,
    now_unix_ns: i64,
    progress: &mut dyn FnMut(f64),
) -> Result<HistorySummary> {
    let layout = Layout::new(o, now_unix_ns)?;
    let plans = layout.o.plans;
    // Pass 1: count.
    let mut structural = plans * 2; // created, and paused at the end; changed: below
    let changed: Vec<u64> = (0..plans)
        .filter(|p| hash("changed", 0, *p) % 10 < 3)
        .collect();
    structural += changed.len() as u64;
    let restarts = layout.days / 10;
    structural += restarts;
    let mut runs = 0u64;
    let mut summary = HistorySummary {
        plans,
        days: layout.days,
        ..Default::default()
    };
    for day in 0..layout.days {
        for plan in 0..plans {
            let Some(c) = layout.chain(day, plan) else {
                continue;
            };
            structural += Layout::structural(&c);
            runs += Layout::runs(&c);
            let state = if c.forgotten {
                PointState::Expired
            } else {
                c.fate.state()
            };
            *summary
                .points_by_state
                .entry(state.as_str().to_owned())
                .or_default() += 1;
            if c.forgotten {
                // The retention job that forgets it.
                structural += 4;
            }
        }
    }
    if o.events < structural {
        return Err(BenchError::Workdir(format!(
            "{} events are too few for {} points over {} plans: the history needs at least {structural}",
            o.events, o.points, plans
        )));
    }
    let spare = o.events - structural;
    let mut b = Builder {
        layout: &layout,
        per_run: spare.checked_div(runs).unwrap_or(0),
        extra_runs: spare.checked_rem(runs).unwrap_or(0),
        runs_done: 0,
        progress: 0,
        order: 0,
    };
    if runs == 0 && spare > 0 {
        return Err(BenchError::Workdir(
            "no job runs to carry the extra events: give more points".into(),
        ));
    }

    // Pass 2: build day by day, append in time order.
    std::fs::create_dir_all(log_dir).map_err(|e| BenchError::Io {
        context: format!("creating {}", log_dir.display()),
        source: e,
    })?;
    let clock = ManualClock::new(layout.base);
    let mut log = EventLog::open(log_dir, LogOptions::default(), Arc::new(clock.clone()))
        .map_err(|e| BenchError::Workdir(format!("opening the event log: {e}")))?;
    let mut pending: Vec<Phase> = Vec::new();
    let first: Vec<Event> = (0..plans)
        .map(|p| {
            PlanCreated {
                plan: layout.plan_id(p),
                definition: layout.definition(p, false, false),
            }
            .into()
        })
        .collect();
    let p = b.phase(layout.base - HOUR, first);
    pending.push(p);
    let half = layout.base + (layout.days as i64 / 2) * DAY;
    let changes: Vec<Event> = changed
        .iter()
        .map(|&p| {
            PlanChanged {
                plan: layout.plan_id(p),
                definition: layout.definition(p, true, false),
            }
            .into()
        })
        .collect();
    if !changes.is_empty() {
        let p = b.phase(half - HOUR, changes);
        pending.push(p);
    }
    for r in 0..restarts {
        let at = layout.base + (r as i64 * 10 + 5) * DAY - 2 * HOUR;
        let e: Event = ServiceStarted {
            version: "0.1.0".into(),
        }
        .into();
        let p = b.phase(at, vec![e]);
        pending.push(p);
    }
    let mut written = 0u64;
    let mut appends = 0u64;
    let mut last_at = i64::MIN;
    for day in 0..layout.days {
        for plan in 0..plans {
            if let Some(c) = layout.chain(day, plan) {
                b.chain(&c, &mut pending);
            }
            b.retention(day, plan, &mut pending);
        }
        // Later days start at or after this.
        let horizon = layout.base + (day as i64 + 1) * DAY;
        let (w, a, t) = flush(&mut log, &clock, &mut pending, Some(horizon))?;
        written += w;
        appends += a;
        last_at = last_at.max(t);
        progress((day + 1) as f64 / layout.days as f64);
    }
    let pause: Vec<Event> = (0..plans)
        .map(|p| {
            let changed = changed.contains(&p);
            PlanChanged {
                plan: layout.plan_id(p),
                definition: layout.definition(p, changed, true),
            }
            .into()
        })
        .collect();
    let p = b.phase(layout.end, pause);
    pending.push(p);
    let (w, a, t) = flush(&mut log, &clock, &mut pending, None)?;
    written += w;
    appends += a;
    last_at = last_at.max(t);
    if written != o.events {
        return Err(BenchError::Workdir(format!(
            "generated {written} events instead of {} (a bug in the generator)",
            o.events
        )));
    }
    summary.events = written;
    summary.job_runs = runs;
    summary.progress_events = b.progress;
    summary.appends = appends;
    summary.last_unix_ns = last_at;
    Ok(summary)
}

/// Appends the pending phases before `horizon` (all, without one) in time
/// order, one append per window. Returns events, appends, last time.
fn flush(
    log: &mut EventLog,
    clock: &ManualClock,
    pending: &mut Vec<Phase>,
    horizon: Option<i64>,
) -> Result<(u64, u64, i64)> {
    pending.sort_by_key(|p| (p.at, p.order));
    let cut = match horizon {
        Some(h) => pending.partition_point(|p| p.at < h),
        None => pending.len(),
    };
    let ready: Vec<Phase> = pending.drain(..cut).collect();
    let (mut events, mut appends, mut last) = (0u64, 0u64, i64::MIN);
    let mut batch: Vec<Event> = Vec::new();
    let mut window_start: Option<i64> = None;
    let mut append = |batch: &mut Vec<Event>, at: i64| -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        clock.set(at);
        log.append(batch)
            .map_err(|e| BenchError::Workdir(format!("appending to the event log: {e}")))?;
        events += batch.len() as u64;
        appends += 1;
        last = last.max(at);
        batch.clear();
        Ok(())
    };
    for phase in ready {
        match window_start {
            Some(w) if phase.at < w + WINDOW => {}
            Some(w) => {
                append(&mut batch, w)?;
                window_start = Some(phase.at);
            }
            None => window_start = Some(phase.at),
        }
        batch.extend(phase.events);
    }
    if let Some(w) = window_start {
        append(&mut batch, w)?;
    }
    Ok((events, appends, last))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vouch_events::{LogReader, Projections};

    #[test]
    fn the_history_has_exactly_the_events_and_points_asked_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let o = HistoryOptions {
            events: 3000,
            points: 60,
            plans: 4,
            repository: "default".into(),
        };
        let now = 1_800_000_000_000_000_000;
        let s = generate(&dir.path().join("events"), &o, now, &mut |_| {}).expect("generate");
        assert_eq!(s.events, 3000);
        assert_eq!(s.points(), 60);
        let envs: Vec<_> = LogReader::new(dir.path().join("events"))
            .replay_from(1)
            .expect("replay")
            .collect::<vouch_events::Result<Vec<_>>>()
            .expect("read");
        assert_eq!(envs.len(), 3000);
        assert!(envs
            .windows(2)
            .all(|w| w[0].recorded_unix_ns <= w[1].recorded_unix_ns));
        let p = Projections::fold(&envs);
        assert!(p.inconsistencies.is_empty(), "{:?}", p.inconsistencies);
        let mut states: BTreeMap<String, u64> = BTreeMap::new();
        for pt in p.points.points.values() {
            *states.entry(pt.state.as_str().to_owned()).or_default() += 1;
        }
        assert_eq!(states, s.points_by_state);
        assert!(p.jobs.jobs.values().all(|j| j.state.is_terminal()));
        assert!(p.alerts.open().next().is_none());
        assert!(p.plans.plans.values().all(|pl| pl.definition.paused));
        assert!(envs.last().is_some_and(|e| e.recorded_unix_ns < now));
    }
}
