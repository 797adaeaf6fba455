//! One run of the fast tier: a seed, a few hundred steps, the service's
//! pure decision code in memory, on one thread.
//!
//! What runs is the real code: the projections (`vouch_events::Projections`,
//! folded event by event as the read model does), the policies
//! (`service::periodic_checks`, `follow_ups`, `read_back_due`,
//! `retention_protects`, `reconcile_lists`, `restore_sample` through
//! them), the schedule (`PlanSchedule::catch_up`), the alert rules
//! (`incidents_with`, `fact_incidents`) and the rebuilding of jobs after a
//! restart (`rebuild_command`). What is a model is the glue the actors
//! are: the dispatcher's queue (single flight, concurrency bound, retries
//! with backoff, timeouts, fencing by the run, recovery after a restart),
//! the scheduler's tick and the alerter's raise/resolve, restated here in
//! a few lines each from `service/dispatcher.rs`, `scheduler.rs` and
//! `alerting.rs`. The log is a vector: an append is acknowledged at once.
//! Nothing here exercises actix, the event store's threads or the disk;
//! the full tier (`simulation.rs`) does.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use vouch_actors::service::{
    active_plans, fact_incidents, follow_ups, incidents_with, last_backups_scheduled,
    periodic_checks, read_back_due, rebuild_command, reconcile_lists, repositories_in_use,
    retention_protects, AlertFacts, JobCommand, JobFailure, JobOutput, JobTimeouts, ReadBackWindow,
    CLOCK_STEP_TOLERANCE,
};
use vouch_actors::{duration_to_ns, BackoffPolicy, Decision, PlanSchedule, Schedule};
use vouch_events::{
    AlertId, AlertRaised, AlertResolved, ClockStepped, Envelope, Event, EventHash, JobAbandoned,
    JobFailed, JobFinished, JobId, JobKind, JobScheduled, JobSpec, JobStarted, JobState,
    KeepPolicy, PlanChanged, PlanCreated, PlanDefinition, PlanId, PlanRemoved, PointVanished,
    Projections, Protection, Recorded, RepositoryId, RestoreTestPolicy, ServiceStarted, SnapshotId,
    VerificationPolicy, VerifyDepth,
};

use crate::oracle::{self, AlertLog, Facts, Violation};
use crate::outcome::{self, Ending};
use crate::rng::Rng;

const HOUR: u64 = 3600;
const START_NS: i64 = 1_800_000_000 * 1_000_000_000;
const MAX_CONCURRENT: usize = 3;
const MAX_ATTEMPTS: u32 = 3;
const MAX_JITTER: Duration = Duration::from_secs(300);
const AGENT_LOST_AFTER: Duration = Duration::from_secs(600);
const RECONCILE_EVERY: Duration = Duration::from_secs(24 * 3600);

/// A deliberately wrong rule, for the self-tests: the oracles must catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// The read model never folds `verification.failed` (a projection
    /// that forgets a negative fact).
    ReadModelDropsFailedVerifications,
    /// The alerter never resolves an alert.
    AlerterNeverResolves,
}

/// What a run found.
#[derive(Debug, Default)]
pub struct Report {
    /// Steps run.
    pub steps: usize,
    /// Events in the log at the end.
    pub events: u64,
    /// Restarts of the whole process and of single actors.
    pub restarts: usize,
    /// Violations, each with the step it was first seen at.
    pub violations: Vec<(usize, Violation)>,
    /// The hash of the log's head (the same seed writes the same log).
    pub head: [u8; 32],
}

#[derive(Debug)]
enum Action {
    Advance(Duration),
    Tick,
    RunNow(PlanId),
    Complete(usize),
    Cancel(usize),
    ChangePlan(PlanId, bool),
    RemovePlan(PlanId),
    CreatePlan(PlanId),
    Vanish(SnapshotId),
    Unknown,
    /// The whole process: memory gone, projections from a snapshot.
    Restart {
        clock_back: Option<Duration>,
    },
    RestartDispatcher,
    RestartScheduler,
    RestartAlerter,
    RestartReadModel,
}

#[derive(Clone, Debug)]
struct Queued {
    job: JobId,
    command: JobCommand,
    attempt: u32,
    due: i64,
}

#[derive(Clone, Debug)]
struct Running {
    job: JobId,
    command: JobCommand,
    attempt: u32,
    started: i64,
    cancelled: bool,
}

/// One run.
pub struct Model {
    seed: u64,
    rng: Rng,
    step: usize,
    steps: usize,
    verbose: bool,
    mutation: Option<Mutation>,
    /// Whether a restart may find the wall clock stepped back
    /// (`VOUCH_MODEL_SIM_CLOCK_BACK=0`: never).
    clock_back: bool,
    now: i64,
    log: Vec<Envelope>,
    /// The read model: folded one event at a time.
    proj: Projections,
    /// The oracles' facts and alert log, folded one event at a time.
    facts: Facts,
    alert_log: AlertLog,
    // The dispatcher.
    queue: Vec<Queued>,
    running: Vec<Running>,
    next_id: u64,
    backoff: BackoffPolicy,
    timeouts: JobTimeouts,
    // The scheduler.
    fired: HashMap<PlanId, i64>,
    read_back_proposed: HashMap<RepositoryId, (Vec<u32>, i64)>,
    reconciled: HashMap<RepositoryId, i64>,
    read_back: ReadBackWindow,
    // The alerter.
    alert_facts: AlertFacts,
    not_protected_since: HashMap<PlanId, i64>,
    // The simulator.
    plans: Vec<(PlanId, Option<PlanDefinition>, u32)>,
    injected: u64,
    unknown_injected: bool,
    seen: BTreeSet<String>,
    report: Report,
}

impl Model {
    /// A run of `steps` steps for `seed`.
    pub fn new(seed: u64, steps: usize, verbose: bool, mutation: Option<Mutation>) -> Model {
        let mut rng = Rng::new(seed);
        let now = START_NS + (rng.below(86_400) as i64) * 1_000_000_000;
        Model {
            seed,
            rng,
            step: 0,
            steps,
            verbose,
            mutation,
            clock_back: std::env::var("VOUCH_MODEL_SIM_CLOCK_BACK").map_or(true, |v| v != "0"),
            now,
            log: Vec::new(),
            proj: Projections::new(),
            facts: Facts::default(),
            alert_log: AlertLog::default(),
            queue: Vec::new(),
            running: Vec::new(),
            next_id: 0,
            backoff: BackoffPolicy::new(
                Duration::from_secs(300),
                2,
                Duration::from_secs(HOUR),
                Duration::from_secs(HOUR),
            )
            .expect("backoff policy"),
            timeouts: JobTimeouts::default(),
            fired: HashMap::new(),
            read_back_proposed: HashMap::new(),
            reconciled: HashMap::new(),
            read_back: ReadBackWindow {
                window: Duration::from_secs(6 * HOUR),
                slices: 4,
            },
            alert_facts: AlertFacts::default(),
            not_protected_since: HashMap::new(),
            plans: (0..3)
                .map(|i| (PlanId::new(format!("plan-{i}")), None, 0))
                .collect(),
            injected: 0,
            unknown_injected: false,
            seen: BTreeSet::new(),
            report: Report::default(),
        }
    }

    fn note(&self, line: impl FnOnce() -> String) {
        if self.verbose {
            eprintln!("seed {} step {}: {}", self.seed, self.step, line());
        }
    }

    fn found(&mut self, v: Violation) {
        let key = format!("{}|{}", v.oracle, v.detail);
        if self.seen.insert(key) {
            if self.verbose {
                eprintln!("seed {} step {}: VIOLATION {v}", self.seed, self.step);
            }
            self.report.violations.push((self.step, v));
        }
    }

    /// Runs every step; stops at the first step with a violation (the
    /// rest would be its consequences).
    pub fn run(mut self) -> Report {
        self.append(vec![ServiceStarted {
            version: "model".into(),
        }
        .into()]);
        for i in 0..1 + self.rng.below(3) {
            let id = self.plans[i].0.clone();
            self.create_plan(id);
        }
        self.evaluate();
        self.check();
        while self.step < self.steps && self.report.violations.is_empty() {
            self.step += 1;
            let action = self.choose();
            self.note(|| format!("{action:?}"));
            self.act(action);
            self.evaluate();
            self.check();
        }
        self.report.steps = self.step;
        self.report.events = self.log.len() as u64;
        self.report.head = self.log.last().map_or([0; 32], |e| e.hash.0);
        self.report
    }

    // ---- the log and the read model ----

    /// Appends `events` (acknowledged at once) and folds them; returns the
    /// seq of the last.
    fn append(&mut self, events: Vec<Event>) -> u64 {
        for event in events {
            let prev = self.log.last().map_or(EventHash([0; 32]), |e| e.hash);
            let seq = self.log.len() as u64 + 1;
            let mut key = [0u8; 40];
            key[..32].copy_from_slice(&prev.0);
            key[32..].copy_from_slice(&seq.to_le_bytes());
            let env = Envelope {
                seq,
                recorded_unix_ns: self.now,
                schema_version: 1,
                prev_hash: prev,
                hash: EventHash(*blake3::hash(&key).as_bytes()),
                event,
            };
            if self.verbose {
                eprintln!(
                    "    {:>5} {} {:?}",
                    env.seq, env.recorded_unix_ns, env.event
                );
            }
            self.fold(&env);
            for v in self.alert_log.apply(&env) {
                self.found(v);
            }
            self.alert_facts.apply(&env);
            self.log.push(env);
        }
        self.log.last().map_or(0, |e| e.seq)
    }

    fn fold(&mut self, env: &Envelope) {
        let before = self.proj.inconsistencies_total;
        let drop = self.mutation == Some(Mutation::ReadModelDropsFailedVerifications)
            && matches!(env.event, Event::VerificationFailed(_));
        if drop {
            // The wrong rule: the event is seen (its seq) but not applied.
            self.proj.apply_event(
                Recorded {
                    seq: env.seq,
                    unix_ns: env.recorded_unix_ns,
                },
                &Event::ServiceStarted(ServiceStarted {
                    version: "mutation".into(),
                }),
            );
            self.proj.last_hash = env.hash;
        } else {
            self.proj.apply(env);
        }
        let skipped = self.proj.inconsistencies_total > before;
        self.facts.apply(env, skipped);
    }

    // ---- the dispatcher (service/dispatcher.rs, restated) ----

    fn new_job_id(&mut self, command: &JobCommand) -> JobId {
        self.next_id += 1;
        JobId::new(format!(
            "{}-{}-{}",
            vouch_actors::service::kind_name(command.kind()),
            self.now / 1_000_000_000,
            self.next_id
        ))
    }

    fn scheduled_event(
        job: &JobId,
        command: &JobCommand,
        attempt: u32,
        due: i64,
        why: &str,
    ) -> Event {
        JobScheduled {
            job: job.clone(),
            kind: command.kind(),
            plan: command.plan().cloned(),
            point: command.point(),
            due_unix_ns: due,
            attempt,
            spec: command.spec(why),
        }
        .into()
    }

    fn duplicate_of(&self, command: &JobCommand) -> Option<JobId> {
        let kind = command.kind();
        let same = |c: &JobCommand| {
            c.kind() == kind
                && match kind {
                    JobKind::Verify | JobKind::RestoreTest => {
                        c.point() == command.point() && c.repository() == command.repository()
                    }
                    JobKind::ReadBack | JobKind::Reconcile => {
                        c.repository() == command.repository()
                    }
                    _ => c.plan() == command.plan(),
                }
        };
        self.queue
            .iter()
            .find(|q| same(&q.command))
            .map(|q| q.job.clone())
            .or_else(|| {
                self.running
                    .iter()
                    .find(|r| same(&r.command))
                    .map(|r| r.job.clone())
            })
    }

    /// Schedules a job (duplicates dropped, as `enqueue_internal` does).
    fn enqueue(&mut self, command: JobCommand, why: &str) -> Option<JobId> {
        if self.duplicate_of(&command).is_some() {
            return None;
        }
        let job = self.new_job_id(&command);
        let ev = Self::scheduled_event(&job, &command, 1, self.now, why);
        self.append(vec![ev]);
        self.queue.push(Queued {
            job: job.clone(),
            command,
            attempt: 1,
            due: self.now,
        });
        Some(job)
    }

    fn may_start(&self, q: &Queued) -> bool {
        let kind = q.command.kind();
        self.running.iter().all(|r| {
            let rk = r.command.kind();
            let same_repo = r.command.repository() == q.command.repository();
            match (kind, rk) {
                (JobKind::Backup, JobKind::Backup) => {
                    q.command.plan().is_none() || q.command.plan() != r.command.plan()
                }
                (JobKind::Backup, JobKind::Reconcile) | (JobKind::Reconcile, JobKind::Backup) => {
                    !same_repo
                }
                _ => true,
            }
        })
    }

    fn dispatch(&mut self) {
        while self.running.len() < MAX_CONCURRENT {
            let now = self.now;
            let Some(pos) = self
                .queue
                .iter()
                .position(|q| q.due <= now && self.may_start(q))
            else {
                break;
            };
            let mut q = self.queue.remove(pos);
            // Read at the start, whatever the job carried.
            match &mut q.command {
                JobCommand::Retention {
                    plan,
                    protect,
                    repository,
                    ..
                } => {
                    *protect = retention_protects(&self.proj, plan, repository, now);
                }
                JobCommand::Reconcile {
                    repository,
                    expired,
                    live,
                } => {
                    let (e, l) = reconcile_lists(&self.proj, repository);
                    *expired = e;
                    *live = l;
                }
                _ => {}
            }
            self.append(vec![JobStarted {
                job: q.job.clone(),
                agent: None,
            }
            .into()]);
            self.running.push(Running {
                job: q.job,
                command: q.command,
                attempt: q.attempt,
                started: now,
                cancelled: false,
            });
        }
    }

    /// A worker ends the `i`th running job.
    fn complete(&mut self, i: usize) {
        if i >= self.running.len() {
            return;
        }
        let run = self.running.remove(i);
        let ending = outcome::ending(
            &mut self.rng,
            &self.proj,
            &run.job,
            &run.command,
            run.cancelled,
            self.now,
        );
        let result = match ending {
            Ending::Answer(a) => a,
            // The worker's reply is dropped: the dispatcher reads it as an
            // unavailable worker.
            Ending::Panic => Err(JobFailure::new(
                "worker_unavailable",
                "the worker for this job is not available: simulated panic",
                true,
            )),
        };
        self.finished(run, result);
    }

    fn finished(&mut self, run: Running, result: Result<JobOutput, JobFailure>) {
        let kind = run.command.kind();
        let (mut events, failure) = match result {
            Ok(out) => (out.events, None),
            Err(f) => (f.events.clone(), Some(f)),
        };
        let produced = events.clone();
        match &failure {
            None => events.push(
                JobFinished {
                    job: run.job.clone(),
                }
                .into(),
            ),
            Some(f) => events.push(
                JobFailed {
                    job: run.job.clone(),
                    error_kind: f.kind.clone(),
                    message: f.message.clone(),
                    retryable: f.retryable,
                }
                .into(),
            ),
        }
        let retry = failure
            .as_ref()
            .filter(|f| f.retryable && run.attempt < MAX_ATTEMPTS)
            .map(|f| {
                let delay = self.backoff.delay(run.attempt);
                (
                    self.now.saturating_add(duration_to_ns(delay)),
                    format!("retry after {}", f.kind),
                )
            });
        if let Some((due, why)) = &retry {
            events.push(Self::scheduled_event(
                &run.job,
                &run.command,
                run.attempt + 1,
                *due,
                why,
            ));
        }
        let seq = self.append(events);
        if let Some((due, _)) = retry {
            self.queue.push(Queued {
                job: run.job.clone(),
                command: run.command.clone(),
                attempt: run.attempt + 1,
                due,
            });
        }
        if failure.is_none() {
            for (command, why) in follow_ups(&self.proj, kind, &produced, seq, self.now) {
                self.enqueue(command, &why);
            }
        }
        self.dispatch();
    }

    /// Runs that outlived their kind's timeout are abandoned and retried.
    fn time_out(&mut self) {
        let now = self.now;
        let mut i = 0;
        while i < self.running.len() {
            let limit = duration_to_ns(self.timeouts.of(self.running[i].command.kind()));
            if now.saturating_sub(self.running[i].started) < limit {
                i += 1;
                continue;
            }
            let run = self.running.remove(i);
            let mut events: Vec<Event> = vec![JobAbandoned {
                job: run.job.clone(),
                reason: "the job ran longer than its timeout".into(),
            }
            .into()];
            let retry = run.attempt < MAX_ATTEMPTS;
            if retry {
                events.push(Self::scheduled_event(
                    &run.job,
                    &run.command,
                    run.attempt + 1,
                    now,
                    "retry after a timeout",
                ));
            }
            self.append(events);
            if retry {
                self.queue.push(Queued {
                    job: run.job,
                    command: run.command,
                    attempt: run.attempt + 1,
                    due: now,
                });
            }
        }
    }

    fn cancel(&mut self, i: usize) {
        // Running jobs first (as the inbox lists them), then queued ones.
        if let Some(r) = self.running.get_mut(i) {
            r.cancelled = true;
            return;
        }
        let j = i - self.running.len();
        if j < self.queue.len() {
            let q = self.queue.remove(j);
            self.append(vec![JobAbandoned {
                job: q.job,
                reason: "cancelled before it started".into(),
            }
            .into()]);
        }
    }

    /// The dispatcher starts (again): every job the log says is open is
    /// taken up, as `Dispatcher::recover` does; `orphans` are the commands
    /// an actor restart kept.
    fn recover(&mut self, mut orphans: HashMap<JobId, JobCommand>, restarted: bool) {
        let open: Vec<vouch_events::Job> = self
            .proj
            .jobs
            .jobs
            .values()
            .filter(|j| !j.state.is_terminal())
            .cloned()
            .collect();
        if open.is_empty() {
            return;
        }
        let wanted: BTreeSet<&JobId> = open.iter().map(|j| &j.id).collect();
        let mut specs: HashMap<JobId, (JobSpec, i64)> = HashMap::new();
        for env in &self.log {
            if let Event::JobScheduled(s) = &env.event {
                if wanted.contains(&s.job) {
                    specs.insert(s.job.clone(), (s.spec.clone(), s.due_unix_ns));
                }
            }
        }
        let now = self.now;
        for j in open {
            let spec = specs.get(&j.id);
            let command = orphans
                .remove(&j.id)
                .or_else(|| rebuild_command(&self.proj, &j, spec.map(|s| &s.0)));
            if j.state != JobState::Running {
                match command {
                    Some(command) => self.queue.push(Queued {
                        job: j.id.clone(),
                        command,
                        attempt: j.attempt.max(1),
                        due: spec.map_or(j.updated.unix_ns, |s| s.1),
                    }),
                    None => {
                        self.append(vec![JobAbandoned {
                            job: j.id.clone(),
                            reason: "its plan is gone, or the log does not say what it was to do"
                                .into(),
                        }
                        .into()]);
                    }
                }
                continue;
            }
            let reason = if restarted {
                "the dispatcher failed and was restarted while the job was running"
            } else {
                "the service stopped while the job was running"
            };
            let attempt = j.attempt.max(1);
            let retry = command.filter(|_| attempt < MAX_ATTEMPTS);
            let mut events: Vec<Event> = vec![JobAbandoned {
                job: j.id.clone(),
                reason: reason.into(),
            }
            .into()];
            if let Some(c) = &retry {
                events.push(Self::scheduled_event(
                    &j.id,
                    c,
                    attempt + 1,
                    now,
                    "retry: its run was lost",
                ));
            }
            self.append(events);
            if let Some(command) = retry {
                self.queue.push(Queued {
                    job: j.id,
                    command,
                    attempt: attempt + 1,
                    due: now,
                });
            }
        }
        self.dispatch();
    }

    // ---- the scheduler (service/scheduler.rs, restated) ----

    fn tick(&mut self) {
        let now = self.now;
        self.dispatch();
        let last_runs = last_backups_scheduled(&self.proj);
        let plans: Vec<(PlanId, PlanDefinition, i64)> = active_plans(&self.proj)
            .map(|pl| (pl.id.clone(), pl.definition.clone(), pl.created.unix_ns))
            .collect();
        let mut commands = Vec::new();
        for (id, definition, created) in plans {
            if definition.paused {
                continue;
            }
            let Ok(schedule) = Schedule::parse(&definition.schedule) else {
                continue;
            };
            let ps = PlanSchedule::new(schedule, id.as_str().as_bytes(), MAX_JITTER);
            let last = match (last_runs.get(&id), self.fired.get(&id)) {
                (Some(&a), Some(&b)) => Some(a.max(b)),
                (a, b) => a.or(b).copied(),
            };
            if let Ok(Decision::Due { slot_unix_ns, .. }) = ps.catch_up(last, created, now) {
                self.fired.insert(id.clone(), now.max(slot_unix_ns));
                commands.push(JobCommand::Backup {
                    plan: id,
                    definition: Box::new(definition),
                    history: Vec::new(),
                    last_good: None,
                });
            }
        }
        commands.extend(periodic_checks(&self.proj, now));
        let turn =
            (duration_to_ns(self.read_back.window) / i64::from(self.read_back.slices)).max(1);
        for c in read_back_due(&self.proj, now, &self.read_back) {
            if let JobCommand::ReadBack {
                repository, slices, ..
            } = &c
            {
                let again = self
                    .read_back_proposed
                    .get(repository)
                    .is_some_and(|(s, at)| s == slices && now.saturating_sub(*at) < turn);
                if again {
                    continue;
                }
                self.read_back_proposed
                    .insert(repository.clone(), (slices.clone(), now));
            }
            commands.push(c);
        }
        for repository in repositories_in_use(&self.proj) {
            let due = match self.reconciled.get(&repository) {
                None => true,
                Some(&at) => now.saturating_sub(at) >= duration_to_ns(RECONCILE_EVERY),
            };
            if due {
                self.reconciled.insert(repository.clone(), now);
                commands.push(JobCommand::Reconcile {
                    repository,
                    expired: Vec::new(),
                    live: Vec::new(),
                });
            }
        }
        for c in commands {
            self.enqueue(c, "schedule");
        }
        self.dispatch();
    }

    // ---- the alerter (service/alerting.rs, restated) ----

    fn evaluate(&mut self) {
        let now = self.now;
        let mut wanted =
            incidents_with(&self.proj, now, AGENT_LOST_AFTER, &self.not_protected_since);
        wanted.extend(fact_incidents(&self.alert_facts, now));
        let mut seen = HashMap::new();
        for pl in active_plans(&self.proj) {
            let status = self.proj.plan_protection(&pl.id, now).status;
            if matches!(status, Protection::Unknown | Protection::AtRisk) {
                let at = self.not_protected_since.get(&pl.id).copied().unwrap_or(now);
                seen.insert(pl.id.clone(), at);
            }
        }
        self.not_protected_since = seen;
        let open: Vec<(AlertId, String)> = self
            .proj
            .alerts
            .open()
            .map(|a| (a.id.clone(), a.subject.clone()))
            .collect();
        let open_subjects: BTreeSet<&str> = open.iter().map(|a| a.1.as_str()).collect();
        let wanted_subjects: BTreeSet<&str> = wanted.iter().map(|i| i.subject.as_str()).collect();
        let mut events: Vec<Event> = Vec::new();
        let mut raised: BTreeSet<&str> = BTreeSet::new();
        for inc in &wanted {
            if open_subjects.contains(inc.subject.as_str()) || !raised.insert(&inc.subject) {
                continue;
            }
            let h = blake3::hash(format!("{}\0{now}", inc.subject).as_bytes());
            events.push(
                AlertRaised {
                    alert: AlertId::new(format!("alert-{}", &h.to_hex()[..12])),
                    severity: inc.severity,
                    subject: inc.subject.clone(),
                    message: inc.message.clone(),
                    rule: inc.rule.to_owned(),
                    labels: inc.labels.clone(),
                }
                .into(),
            );
        }
        if self.mutation != Some(Mutation::AlerterNeverResolves) {
            for (id, subject) in &open {
                if !wanted_subjects.contains(subject.as_str()) {
                    events.push(AlertResolved { alert: id.clone() }.into());
                }
            }
        }
        if !events.is_empty() {
            self.append(events);
        }
    }

    // ---- restarts ----

    /// The whole process: every actor's memory is gone; the read model
    /// comes back from a snapshot (encoded and decoded), which must equal
    /// both the live projections and a replay of the log.
    fn restart(&mut self, clock_back: Option<Duration>) {
        self.report.restarts += 1;
        self.read_model_from_snapshot();
        self.queue.clear();
        self.running.clear();
        self.fired.clear();
        self.read_back_proposed.clear();
        self.reconciled.clear();
        self.not_protected_since.clear();
        self.alert_facts = AlertFacts::default();
        for e in &self.log {
            self.alert_facts.apply(e);
        }
        let previous = self.log.last().map(|e| e.recorded_unix_ns);
        if let Some(back) = clock_back {
            self.now -= duration_to_ns(back);
        }
        let mut first: Vec<Event> = Vec::new();
        if let Some(previous) = previous {
            if self.now < previous.saturating_sub(duration_to_ns(CLOCK_STEP_TOLERANCE)) {
                first.push(
                    ClockStepped {
                        previous_unix_ns: previous,
                        now_unix_ns: self.now,
                    }
                    .into(),
                );
            }
        }
        first.push(
            ServiceStarted {
                version: "model".into(),
            }
            .into(),
        );
        self.append(first);
        self.recover(HashMap::new(), false);
    }

    fn read_model_from_snapshot(&mut self) {
        let replay = Projections::fold(self.log.iter());
        if replay != self.proj {
            self.found(oracle_violation(
                "replay",
                format!(
                    "replaying the log to seq {} differs from the read model in {}",
                    self.proj.last_seq,
                    differences(&replay, &self.proj)
                ),
            ));
        }
        match self
            .proj
            .to_snapshot()
            .and_then(|b| Projections::from_snapshot(&b))
        {
            Ok(p) => {
                if p != self.proj {
                    let d = differences(&p, &self.proj);
                    self.found(oracle_violation(
                        "snapshot",
                        format!("a snapshot's round trip differs from what it was taken of in {d}"),
                    ));
                }
                self.proj = p;
            }
            Err(e) => self.found(oracle_violation(
                "snapshot",
                format!("the projections' snapshot does not round-trip: {e}"),
            )),
        }
    }

    fn restart_dispatcher(&mut self) {
        self.report.restarts += 1;
        let mut orphans = HashMap::new();
        for r in self.running.drain(..) {
            orphans.insert(r.job, r.command);
        }
        for q in self.queue.drain(..) {
            orphans.insert(q.job, q.command);
        }
        self.recover(orphans, true);
    }

    // ---- the simulator ----

    fn choose(&mut self) -> Action {
        let pending = self.running.len();
        let cancellable = self.running.len() + self.queue.len();
        let active: Vec<PlanId> = self
            .plans
            .iter()
            .filter(|p| p.1.is_some())
            .map(|p| p.0.clone())
            .collect();
        let free: Vec<PlanId> = self
            .plans
            .iter()
            .filter(|p| p.1.is_none())
            .map(|p| p.0.clone())
            .collect();
        let live: Vec<SnapshotId> = self
            .proj
            .points
            .points
            .values()
            .filter(|p| p.expired.is_none())
            .map(|p| p.id)
            .collect();
        // A fixed step, not a share of the run: a shorter replay
        // (VOUCH_MODEL_SIM_STEPS) must take the same first steps.
        let late = self.step >= 130 && !self.unknown_injected;
        let w = |ok: bool, w: u32| if ok { w } else { 0 };
        let weights = [
            w(pending > 0, 30),       // 0 complete
            16,                       // 1 advance
            6,                        // 2 tick
            w(!active.is_empty(), 8), // 3 run now
            w(cancellable > 0, 3),    // 4 cancel
            w(!active.is_empty(), 3), // 5 change plan
            w(active.len() > 1, 1),   // 6 remove plan
            w(!free.is_empty(), 2),   // 7 create plan
            w(!live.is_empty(), 1),   // 8 vanish
            w(late, 2),               // 9 unknown event
            3,                        // 10 restart of the process
            4,                        // 11 restart of one actor
        ];
        match self.rng.weighted(&weights) {
            0 => Action::Complete(self.rng.below(pending)),
            1 => {
                let mins = [1u64, 5, 10, 30, 60, 180, 360, 1440];
                let i = self.rng.weighted(&[3, 4, 4, 4, 3, 2, 1, 1]);
                Action::Advance(Duration::from_secs(mins[i] * 60))
            }
            2 => Action::Tick,
            3 => Action::RunNow(self.rng.pick(&active).cloned().expect("a plan")),
            4 => Action::Cancel(self.rng.below(cancellable)),
            5 => {
                let source = self.rng.chance(2, 3);
                Action::ChangePlan(self.rng.pick(&active).cloned().expect("a plan"), source)
            }
            6 => Action::RemovePlan(self.rng.pick(&active).cloned().expect("a plan")),
            7 => Action::CreatePlan(self.rng.pick(&free).cloned().expect("a slot")),
            8 => Action::Vanish(*self.rng.pick(&live).expect("a point")),
            9 => Action::Unknown,
            10 => Action::Restart {
                clock_back: self
                    .rng
                    .chance(1, 4)
                    .then(|| Duration::from_secs(60 * (5 + self.rng.below(240) as u64))),
            },
            _ => match self.rng.below(4) {
                0 => Action::RestartDispatcher,
                1 => Action::RestartScheduler,
                2 => Action::RestartAlerter,
                _ => Action::RestartReadModel,
            },
        }
    }

    fn definition(&mut self, id: &PlanId, generation: u32) -> PlanDefinition {
        let depth = [
            VerifyDepth::Structure,
            VerifyDepth::ReadSample(10),
            VerifyDepth::ReadAll,
        ][self.rng.below(3)];
        PlanDefinition {
            source: format!("/data/{id}/{generation}"),
            schedule: ["0 * * * *", "0 */2 * * *", "30 */6 * * *"][self.rng.below(3)].into(),
            retention: KeepPolicy {
                last: Some(2 + self.rng.below(3) as u32),
                ..KeepPolicy::default()
            },
            verification: VerificationPolicy {
                after_backup: self.rng.chance(9, 10),
                every: Some(Duration::from_secs(6 * HOUR)),
                depth,
            },
            restore_test: RestoreTestPolicy {
                every: Some(Duration::from_secs(6 * HOUR)),
                max_evidence_age: Duration::from_secs(12 * HOUR),
                sample_files: if self.rng.chance(1, 2) {
                    Some(100)
                } else {
                    None
                },
                full_every: if self.rng.chance(1, 2) {
                    Some(Duration::from_secs(24 * HOUR))
                } else {
                    None
                },
                boot: None,
            },
            rpo: Duration::from_secs([2 * HOUR, 6 * HOUR, 12 * HOUR][self.rng.below(3)]),
            repository: RepositoryId::new(["main", "offsite"][self.rng.below(2)]),
            paused: self.rng.chance(1, 20),
            replica: None,
            proxmox: None,
            anomaly_lock: None,
            files: Default::default(),
            hooks: Default::default(),
            time_zone: None,
        }
    }

    fn create_plan(&mut self, id: PlanId) {
        let Some(slot) = self.plans.iter().position(|p| p.0 == id) else {
            return;
        };
        let generation = self.plans[slot].2 + 1;
        let def = self.definition(&id, generation);
        self.append(vec![PlanCreated {
            plan: id,
            definition: def.clone(),
        }
        .into()]);
        self.plans[slot].1 = Some(def);
        self.plans[slot].2 = generation;
    }

    fn act(&mut self, action: Action) {
        match action {
            Action::Advance(d) => {
                self.now += duration_to_ns(d);
                // What tokio's timers do when time moves: the timeouts,
                // the wake-ups of retries, the scheduler's tick.
                self.time_out();
                self.tick();
            }
            Action::Tick => self.tick(),
            Action::RunNow(plan) => {
                let def = self
                    .proj
                    .plans
                    .plans
                    .get(&plan)
                    .map(|p| p.definition.clone());
                if let Some(definition) = def {
                    let r = self.enqueue(
                        JobCommand::Backup {
                            plan,
                            definition: Box::new(definition),
                            history: Vec::new(),
                            last_good: None,
                        },
                        "asked for",
                    );
                    self.note(|| format!("run now: {r:?}"));
                    self.dispatch();
                }
            }
            Action::Complete(i) => self.complete(i),
            Action::Cancel(i) => self.cancel(i),
            Action::ChangePlan(plan, source) => {
                let Some(slot) = self.plans.iter().position(|p| p.0 == plan) else {
                    return;
                };
                let generation = self.plans[slot].2 + 1;
                let Some(old) = self.plans[slot].1.clone() else {
                    return;
                };
                let def = if source {
                    PlanDefinition {
                        source: format!("/data/{plan}/{generation}"),
                        ..old
                    }
                } else {
                    let fresh = self.definition(&plan, generation);
                    PlanDefinition {
                        source: old.source,
                        repository: old.repository,
                        ..fresh
                    }
                };
                self.append(vec![PlanChanged {
                    plan,
                    definition: def.clone(),
                }
                .into()]);
                self.plans[slot].1 = Some(def);
                self.plans[slot].2 = generation;
            }
            Action::RemovePlan(plan) => {
                self.append(vec![PlanRemoved { plan: plan.clone() }.into()]);
                if let Some(slot) = self.plans.iter_mut().find(|p| p.0 == plan) {
                    slot.1 = None;
                }
            }
            Action::CreatePlan(plan) => self.create_plan(plan),
            Action::Vanish(point) => {
                let repository = self
                    .proj
                    .points
                    .points
                    .get(&point)
                    .map(|p| p.repository.clone());
                if let Some(repository) = repository {
                    self.append(vec![PointVanished {
                        point,
                        repository,
                        reason: "its manifest is gone (simulated reconciliation)".into(),
                    }
                    .into()]);
                }
            }
            Action::Unknown => {
                self.unknown_injected = true;
                let plans: Vec<PlanId> = self.plans.iter().map(|p| p.0.clone()).collect();
                let ev = outcome::unknown_event(&mut self.rng, &plans, &self.proj);
                self.append(vec![ev]);
            }
            Action::Restart { clock_back } => {
                let clock_back = clock_back.filter(|_| self.clock_back);
                self.restart(clock_back)
            }
            Action::RestartDispatcher => self.restart_dispatcher(),
            Action::RestartScheduler => {
                self.report.restarts += 1;
                self.fired.clear();
                self.read_back_proposed.clear();
            }
            Action::RestartAlerter => {
                self.report.restarts += 1;
                self.alert_facts = AlertFacts::default();
                for e in &self.log {
                    self.alert_facts.apply(e);
                }
            }
            Action::RestartReadModel => {
                self.report.restarts += 1;
                self.read_model_from_snapshot();
            }
        }
    }

    /// The oracles, after every step.
    fn check(&mut self) {
        let now = self.now;
        // Replay = live: a fold of the whole log every 8th step (and at
        // every restart); the per-step checks below read the live one.
        if self.step.is_multiple_of(8) || self.step == self.steps {
            let replay = Projections::fold(self.log.iter());
            if replay != self.proj {
                let d = differences(&replay, &self.proj);
                self.found(oracle_violation(
                    "replay",
                    format!(
                        "replaying the log to seq {} differs from the read model in {d}",
                        self.proj.last_seq
                    ),
                ));
            }
        }
        for v in oracle::safety_of(&self.facts, &self.proj, now) {
            self.found(v);
        }
        for v in oracle::alerts_match(&self.proj, &self.alert_facts, now) {
            self.found(v);
        }
        // Monotonicity: a negative fact at the end of the log ...
        let plan_ids: Vec<PlanId> = self.plans.iter().map(|p| p.0.clone()).collect();
        if let Some((what, events)) = outcome::negative_fact(
            &mut self.rng,
            &mut self.injected,
            &plan_ids,
            &self.proj,
            now,
        ) {
            let mut with = self.proj.clone();
            for (seq, e) in (self.proj.last_seq + 1..).zip(events.iter()) {
                with.apply_event(Recorded { seq, unix_ns: now }, e);
            }
            for v in oracle::monotone(&format!("adding {what} at the end"), &self.proj, &with, now)
            {
                self.found(v);
            }
        }
        // ... and every eighth step in the middle of it.
        if self.step % 8 == 4 && self.log.len() > 2 {
            let k = 1 + self.rng.below(self.log.len() - 1);
            let prefix = Projections::fold(self.log[..k].iter());
            let at_ns = self.log[k - 1].recorded_unix_ns;
            if let Some((what, events)) =
                outcome::negative_fact(&mut self.rng, &mut self.injected, &plan_ids, &prefix, at_ns)
            {
                let mut with = prefix;
                for (seq, e) in (with.last_seq + 1..).zip(events.iter()) {
                    with.apply_event(
                        Recorded {
                            seq,
                            unix_ns: at_ns,
                        },
                        e,
                    );
                }
                let shift = events.len() as u64;
                for e in &self.log[k..] {
                    with.apply_event(
                        Recorded {
                            seq: e.seq + shift,
                            unix_ns: e.recorded_unix_ns,
                        },
                        &e.event,
                    );
                }
                let what = format!("inserting {what} after seq {}", self.log[k - 1].seq);
                for v in oracle::monotone(&what, &self.proj, &with, now) {
                    self.found(v);
                }
            }
        }
    }
}

fn oracle_violation(oracle: &'static str, detail: String) -> Violation {
    Violation {
        oracle,
        findings: BTreeSet::new(),
        detail,
    }
}

fn differences(a: &Projections, b: &Projections) -> String {
    let mut d = Vec::new();
    if a.last_hash != b.last_hash {
        d.push("last_hash");
    }
    if a.points.points != b.points.points {
        d.push("points");
    }
    if a.plans != b.plans {
        d.push("plans");
    }
    if a.jobs != b.jobs {
        d.push("jobs");
    }
    if a.alerts != b.alerts {
        d.push("alerts");
    }
    if a.read_back != b.read_back {
        d.push("read_back");
    }
    if a.inconsistencies != b.inconsistencies {
        d.push("inconsistencies");
    }
    if a.unknown_events != b.unknown_events {
        d.push("unknown_events");
    }
    if d.is_empty() {
        d.push("derived indexes");
    }
    d.join(", ")
}
