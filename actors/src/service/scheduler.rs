//! The scheduler: on every tick it reads the plans from the read model and
//! asks the dispatcher for what is due: a plan's backup when a slot of its
//! cron schedule (plus its stable jitter) passed since its last run (one
//! run for any number of missed slots), and the periodic re-verifications
//! and restore tests the plans' policies ask for. Its clock is injected, so
//! tests move time by hand and call [`Tick`] themselves.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use vouch_events::{PlanDefinition, PlanId, RepositoryId};

use super::command::JobCommand;
use super::dispatcher::{Dispatcher, EnqueueMany, Wake};
use super::policy::{self, ReadBackWindow};
use super::read_model::{Query, ReadModelActor};
use super::store::{Append, EventStore};
use crate::clock::{duration_to_ns, timer_delay, Clock};
use crate::schedule::{Decision, PlanSchedule, Schedule};
use crate::RestartGate;

/// Evaluate schedules now.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct Tick;

/// The plans changed at `seq` (one created, changed or resumed): look
/// again as soon as the read model holds that event, so a plan whose first
/// slot comes before the next tick is not late by up to a tick.
#[derive(Message)]
#[rtype(result = "()")]
pub struct PlansChanged {
    /// The seq of the last event that changed them.
    pub seq: u64,
}

/// How the scheduler runs.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// How often it looks (it also looks when told with [`Tick`]).
    pub tick: Duration,
    /// Largest jitter added to a plan's slots.
    pub max_jitter: Duration,
    /// The rolling read-back of every repository's packs (none: off).
    pub read_back: Option<ReadBackWindow>,
    /// How often every repository in use is reconciled with the log (none:
    /// only after retention). Each repository is also reconciled on the
    /// first tick after the service starts.
    pub reconcile_every: Option<Duration>,
    /// How often every repository in use is pruned (none: never; the
    /// service then never frees the space retention gives up). The first
    /// prune of a repository comes [`first_prune_after`] after the start.
    pub prune_every: Option<Duration>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            tick: Duration::from_secs(10),
            max_jitter: Duration::from_secs(300),
            read_back: Some(ReadBackWindow::default()),
            reconcile_every: Some(Duration::from_secs(24 * 3600)),
            prune_every: Some(PRUNE_EVERY),
        }
    }
}

/// How often repositories are pruned unless configured.
pub const PRUNE_EVERY: Duration = Duration::from_secs(24 * 3600);

/// When a repository's first prune comes after a start: `prune_every`,
/// at most an hour (a service restarted daily still prunes daily, and a
/// restart loop does not prune on every start).
pub fn first_prune_after(prune_every: Duration) -> Duration {
    prune_every.min(Duration::from_secs(3600))
}

struct PlanView {
    id: PlanId,
    definition: PlanDefinition,
    created_ns: i64,
    last_run_ns: Option<i64>,
}

/// When the next backup of a plan is due, for the API (none: paused, or a
/// schedule that never fires).
pub fn next_run(
    definition: &PlanDefinition,
    plan: &PlanId,
    max_jitter: Duration,
    after_ns: i64,
) -> Option<i64> {
    if definition.paused {
        return None;
    }
    let schedule = Schedule::of_plan(definition).ok()?;
    PlanSchedule::new(schedule, plan.as_str().as_bytes(), max_jitter)
        .next_after(after_ns)
        .ok()
}

/// Decides when plans run.
pub struct Scheduler {
    read: Addr<ReadModelActor>,
    dispatcher: Addr<Dispatcher>,
    clock: Arc<dyn Clock>,
    config: SchedulerConfig,
    /// The slot each plan last fired for in this process (the log's
    /// `job.scheduled` may not be folded yet on the next tick).
    fired: HashMap<PlanId, i64>,
    /// The slices last proposed for read-back per repository, and when: the
    /// same slices (their job failed) are proposed again only a slice's
    /// turn later.
    read_back_proposed: HashMap<RepositoryId, (Vec<u32>, i64)>,
    /// When each repository was last proposed for reconciliation in this
    /// process (none yet: on the first tick after start).
    reconciled: HashMap<RepositoryId, i64>,
    /// When each repository's next prune is due (in this process).
    prune_due: HashMap<RepositoryId, i64>,
    busy: bool,
    /// A tick came while one was running: run another when it ends.
    again: bool,
    /// A look at the plans only is running.
    plans_busy: bool,
    /// A look at the plans came while one was running.
    again_plans: bool,
    /// The earliest slot of any plan that was not due at the last tick.
    next_slot_ns: Option<i64>,
    /// The timer that ticks at that slot, when it comes before the next
    /// regular tick: a job is scheduled when it is due, not up to a tick
    /// later.
    slot_timer: Option<(i64, SpawnHandle)>,
    /// The next look waits for the read model to hold this seq.
    min_seq: u64,
    gate: RestartGate,
    store: Addr<EventStore>,
    /// The clock's reading at the previous tick: a tick that reads more
    /// than [`CLOCK_STEP_TOLERANCE`] earlier records `service.clock_stepped`.
    last_tick_ns: Option<i64>,
}

/// How far the wall clock may go back between two readings (at start: the
/// log's last recorded event; while running: the scheduler's previous tick)
/// before `service.clock_stepped` is recorded.
pub const CLOCK_STEP_TOLERANCE: Duration = Duration::from_secs(60);

/// Whether `now_ns` is a step back from `previous_ns` (more than
/// [`CLOCK_STEP_TOLERANCE`] earlier).
pub fn stepped_back(previous_ns: i64, now_ns: i64) -> bool {
    now_ns < previous_ns.saturating_sub(duration_to_ns(CLOCK_STEP_TOLERANCE))
}

impl Scheduler {
    /// A scheduler reading plans from `read` and sending jobs to `dispatcher`.
    pub fn new(
        read: Addr<ReadModelActor>,
        dispatcher: Addr<Dispatcher>,
        store: Addr<EventStore>,
        clock: Arc<dyn Clock>,
        config: SchedulerConfig,
        gate: RestartGate,
    ) -> Self {
        Scheduler {
            store,
            last_tick_ns: None,
            read,
            dispatcher,
            clock,
            config,
            fired: HashMap::new(),
            read_back_proposed: HashMap::new(),
            reconciled: HashMap::new(),
            prune_due: HashMap::new(),
            busy: false,
            again: false,
            plans_busy: false,
            again_plans: false,
            next_slot_ns: None,
            slot_timer: None,
            min_seq: 0,
            gate,
        }
    }

    /// Drops a read-back whose very slices were proposed less than a
    /// slice's turn ago (its job failed: the repository may be out of
    /// reach), so a failing repository gets one attempt per turn, not one
    /// per tick.
    fn throttle_read_backs(&mut self, read_backs: Vec<JobCommand>, now: i64) -> Vec<JobCommand> {
        let Some(cfg) = self.config.read_back else {
            return Vec::new();
        };
        let turn = (duration_to_ns(cfg.window) / i64::from(cfg.slices.max(1))).max(1);
        read_backs
            .into_iter()
            .filter(|c| {
                let JobCommand::ReadBack {
                    repository, slices, ..
                } = c
                else {
                    return true;
                };
                let again = self
                    .read_back_proposed
                    .get(repository)
                    .is_some_and(|(s, at)| s == slices && now.saturating_sub(*at) < turn);
                if !again {
                    self.read_back_proposed
                        .insert(repository.clone(), (slices.clone(), now));
                }
                !again
            })
            .collect()
    }

    /// Reconciliations due: every repository in use on the first tick, then
    /// every `reconcile_every`.
    fn reconciles(&mut self, repositories: Vec<RepositoryId>, now: i64) -> Vec<JobCommand> {
        let every = self.config.reconcile_every.map(duration_to_ns);
        let mut out = Vec::new();
        for repository in repositories {
            let due = match self.reconciled.get(&repository) {
                None => true,
                Some(&at) => every.is_some_and(|e| now.saturating_sub(at) >= e),
            };
            if due {
                self.reconciled.insert(repository.clone(), now);
                out.push(JobCommand::Reconcile {
                    repository,
                    expired: Vec::new(),
                    live: Vec::new(),
                });
            }
        }
        out
    }

    /// Prunes due: each repository in use [`first_prune_after`] the first
    /// tick that saw it, then every `prune_every` after it was proposed
    /// (the dispatcher runs it when nothing else works in the repository).
    fn prunes(&mut self, repositories: &[RepositoryId], now: i64) -> Vec<JobCommand> {
        let Some(every) = self.config.prune_every else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for repository in repositories {
            let due = *self
                .prune_due
                .entry(repository.clone())
                .or_insert_with(|| now.saturating_add(duration_to_ns(first_prune_after(every))));
            if now >= due {
                self.prune_due.insert(
                    repository.clone(),
                    now.saturating_add(duration_to_ns(every)),
                );
                out.push(JobCommand::Prune {
                    repository: repository.clone(),
                });
            }
        }
        out
    }

    fn due(&mut self, plans: Vec<PlanView>, now: i64) -> Vec<JobCommand> {
        let mut out = Vec::new();
        self.next_slot_ns = None;
        for plan in plans {
            if plan.definition.paused {
                continue;
            }
            // An `agent:<name>:<path>` source is scheduled here like any
            // other: the backup worker never runs it on the server
            // (security review finding 14) but offers it to its agent,
            // which long-polls for it (`AgentBoard`).
            let schedule = match Schedule::of_plan(&plan.definition) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(plan = %plan.id, error = %e, "plan has an invalid schedule; it never runs");
                    continue;
                }
            };
            let ps = PlanSchedule::new(
                schedule,
                plan.id.as_str().as_bytes(),
                self.config.max_jitter,
            );
            let last = match (plan.last_run_ns, self.fired.get(&plan.id)) {
                (Some(a), Some(&b)) => Some(a.max(b)),
                (a, b) => a.or(b.copied()),
            };
            match ps.catch_up(last, plan.created_ns, now) {
                Ok(Decision::Due {
                    slot_unix_ns,
                    slots,
                    ..
                }) => {
                    if slots > 1 {
                        tracing::info!(plan = %plan.id, missed = slots - 1, "catching up: one run for the missed slots");
                    }
                    self.fired.insert(plan.id.clone(), now.max(slot_unix_ns));
                    out.push(JobCommand::Backup {
                        plan: plan.id,
                        definition: Box::new(plan.definition),
                        history: Vec::new(),
                        last_good: None,
                    });
                }
                Ok(Decision::NotDue { next_unix_ns }) => {
                    self.next_slot_ns = Some(
                        self.next_slot_ns
                            .map_or(next_unix_ns, |n| n.min(next_unix_ns)),
                    );
                }
                Err(e) => {
                    tracing::warn!(plan = %plan.id, error = %e, "schedule could not be evaluated")
                }
            }
        }
        out
    }
}

impl Scheduler {
    /// Records `service.clock_stepped` once when the wall clock reads more
    /// than [`CLOCK_STEP_TOLERANCE`] earlier than at the previous tick (M8
    /// while running: schedules, freshness and evidence ages are suspect
    /// until it catches up, and an alert says so).
    fn notice_clock_step(&mut self, now: i64, ctx: &mut Context<Self>) {
        let previous = self.last_tick_ns.replace(now);
        let Some(previous) = previous.filter(|&p| stepped_back(p, now)) else {
            return;
        };
        tracing::warn!(previous, now, "the wall clock stepped back while running");
        let event = vouch_events::ClockStepped {
            previous_unix_ns: previous,
            now_unix_ns: now,
        };
        let append = self.store.send(Append(vec![event.into()]));
        ctx.spawn(append.into_actor(self).map(|res, _, _| {
            if let Err(e) = res
                .map_err(crate::service::ServiceError::from)
                .and_then(|r| r)
            {
                tracing::error!(error = %e, "could not record the clock step");
            }
        }));
    }
}

impl Actor for Scheduler {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.gate.started(ctx);
        ctx.run_interval(self.config.tick, |_, ctx| {
            ctx.address().do_send(Tick);
        });
    }
}

impl Supervised for Scheduler {
    /// Forgets the slots fired in this incarnation: the log's
    /// `job.scheduled` events say when each plan last ran, and the
    /// dispatcher drops a second backup of a plan that has one open.
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        let delay = self.gate.restarting();
        tracing::warn!(
            restarts = self.gate.restarts(),
            delay_ms = delay.as_millis() as u64,
            "scheduler restarting"
        );
        self.fired.clear();
        self.read_back_proposed.clear();
        self.busy = false;
        self.plans_busy = false;
    }
}

impl Handler<Tick> for Scheduler {
    type Result = ResponseActFuture<Self, usize>;

    fn handle(&mut self, _msg: Tick, ctx: &mut Self::Context) -> Self::Result {
        self.look(true, ctx)
    }
}

/// Looks at the plans only (not the checks, read-backs and
/// reconciliations of a full tick): at a plan's slot, and when plans
/// changed.
#[derive(Message)]
#[rtype(result = "usize")]
struct LookAtPlans;

impl Handler<LookAtPlans> for Scheduler {
    type Result = ResponseActFuture<Self, usize>;

    fn handle(&mut self, _msg: LookAtPlans, ctx: &mut Self::Context) -> Self::Result {
        self.look(false, ctx)
    }
}

impl Handler<PlansChanged> for Scheduler {
    type Result = ();

    fn handle(&mut self, msg: PlansChanged, ctx: &mut Self::Context) {
        self.min_seq = self.min_seq.max(msg.seq);
        ctx.notify(LookAtPlans);
    }
}

impl Scheduler {
    /// Reads the projections and schedules what is due: every kind of job
    /// (`full`, a tick) or the plans' backups only.
    fn look(&mut self, full: bool, ctx: &mut Context<Self>) -> ResponseActFuture<Self, usize> {
        // A tick and a look at the plans may overlap: each decides when its
        // answer arrives, in turn on this actor, against `fired` as the
        // other left it, so a slot fires once.
        let busy = if full {
            &mut self.busy
        } else {
            &mut self.plans_busy
        };
        if *busy {
            if full {
                self.again = true;
            } else {
                self.again_plans = true;
            }
            return Box::pin(actix::fut::ready(0));
        }
        *busy = true;
        let now = self.clock.now_unix_ns();
        if full {
            self.notice_clock_step(now, ctx);
        }
        let read_back = self.config.read_back.filter(|_| full);
        let query = self.read.send(Query::new(self.min_seq, move |p| {
            let last_runs = policy::last_backups_scheduled(p);
            let plans: Vec<PlanView> = policy::active_plans(p)
                .map(|pl| PlanView {
                    id: pl.id.clone(),
                    definition: pl.definition.clone(),
                    created_ns: pl.created.unix_ns,
                    last_run_ns: last_runs.get(&pl.id).copied(),
                })
                .collect();
            if !full {
                return (plans, Vec::new(), Vec::new(), Vec::new());
            }
            let read_backs = read_back
                .map(|cfg| policy::read_back_due(p, now, &cfg))
                .unwrap_or_default();
            let repositories: Vec<RepositoryId> =
                policy::repositories_in_use(p).into_iter().collect();
            (
                plans,
                policy::periodic_checks(p, now),
                read_backs,
                repositories,
            )
        }));
        if full {
            // Jobs waiting for their due time are looked at on every tick.
            self.dispatcher.do_send(Wake);
        }
        Box::pin(query.into_actor(self).map(move |res, act, ctx| {
            if full {
                act.busy = false;
                if std::mem::take(&mut act.again) {
                    ctx.notify(Tick);
                }
            } else {
                act.plans_busy = false;
                if std::mem::take(&mut act.again_plans) {
                    ctx.notify(LookAtPlans);
                }
            }
            let (plans, checks, read_backs, repositories) = match res
                .map_err(crate::service::ServiceError::from)
                .and_then(|r| r)
            {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(error = %e, "scheduler could not read the plans");
                    return 0;
                }
            };
            let mut commands = act.due(plans, now);
            if full {
                commands.extend(checks);
                commands.extend(act.throttle_read_backs(read_backs, now));
                commands.extend(act.prunes(&repositories, now));
                commands.extend(act.reconciles(repositories, now));
            }
            let n = commands.len();
            if n > 0 {
                act.dispatcher.do_send(EnqueueMany(commands));
            }
            act.arm_slot_timer(ctx);
            n
        }))
    }
}

impl Scheduler {
    /// Ticks at the earliest plan slot when it comes before the next
    /// regular tick (a millisecond after it, so that it is due).
    fn arm_slot_timer(&mut self, ctx: &mut Context<Self>) {
        let Some(slot) = self.next_slot_ns else {
            return;
        };
        if self.slot_timer.as_ref().is_some_and(|(at, _)| *at == slot) {
            return;
        }
        if let Some((_, h)) = self.slot_timer.take() {
            ctx.cancel_future(h);
        }
        let delay = timer_delay(self.clock.as_ref(), slot, self.config.tick);
        if delay >= self.config.tick {
            return;
        }
        let h = ctx.run_later(delay + Duration::from_millis(1), |act, ctx| {
            act.slot_timer = None;
            ctx.notify(LookAtPlans);
        });
        self.slot_timer = Some((slot, h));
    }
}
