//! The periodic scrub of the event log: every `scrub_every` the whole log
//! up to the committed seq is re-read on the blocking pool (checksums,
//! seqs, the hash chain, segments without gaps) while appends go on, and
//! the result is recorded as `service.log_scrubbed`, damage or not. Damage
//! at or below the committed seq is an acknowledged event gone bad: the
//! alerter raises `LogDamaged` from that event (review finding L4; the log
//! itself only looks at its tail when it opens).

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use vouch_events::{LogScrubbed, ScrubReport, SharedLog};

use super::error::ServiceError;
use super::store::{Append, EventStore};
use crate::RestartGate;

/// How often the log is scrubbed by default.
pub const SCRUB_EVERY: Duration = Duration::from_secs(24 * 3600);

/// How long after a start the first scrub runs (at most; sooner when
/// `scrub_every` is shorter): a service restarted more often than daily
/// still gets its log checked.
pub const FIRST_SCRUB_AFTER: Duration = Duration::from_secs(15 * 60);

/// Scrub the log now and record the result; answered with what was
/// recorded.
#[derive(Message)]
#[rtype(result = "Result<LogScrubbed, ServiceError>")]
pub struct ScrubNow;

/// The actor that scrubs the log on a timer.
pub struct Scrubber {
    log: Arc<SharedLog>,
    store: Addr<EventStore>,
    every: Option<Duration>,
    busy: bool,
    gate: RestartGate,
}

impl Scrubber {
    /// A scrubber of `log` that records through `store`, every `every`
    /// (none: only when asked with [`ScrubNow`]).
    pub fn new(
        log: Arc<SharedLog>,
        store: Addr<EventStore>,
        every: Option<Duration>,
        gate: RestartGate,
    ) -> Self {
        Scrubber {
            log,
            store,
            every,
            busy: false,
            gate,
        }
    }
}

/// The event that records `report` (or a log that could not be read).
pub fn scrub_event(
    through_seq: u64,
    report: Result<ScrubReport, vouch_events::EventError>,
    took: Duration,
) -> LogScrubbed {
    let took_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
    match report {
        Ok(r) => LogScrubbed {
            through_seq,
            events: r.events,
            segments: r.segments as u64,
            bytes: r.bytes,
            head_hash: r.head.to_hex(),
            damaged_seq: r.problem.as_ref().map(|p| p.seq),
            problem: r.problem.map(|p| {
                format!(
                    "{} (segment {}, offset {})",
                    p.message,
                    p.segment.file_name().map_or_else(
                        || p.segment.display().to_string(),
                        |n| { n.to_string_lossy().into_owned() }
                    ),
                    p.offset
                )
            }),
            took_ms,
        },
        Err(e) => LogScrubbed {
            through_seq,
            events: 0,
            segments: 0,
            bytes: 0,
            head_hash: String::new(),
            damaged_seq: None,
            problem: Some(format!("the log could not be read: {e}")),
            took_ms,
        },
    }
}

impl Actor for Scrubber {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.gate.started(ctx);
        if let Some(every) = self.every {
            ctx.run_later(every.min(FIRST_SCRUB_AFTER), move |_, ctx| {
                ctx.address().do_send(ScrubNow);
                ctx.run_interval(every, |_, ctx| ctx.address().do_send(ScrubNow));
            });
        }
    }
}

impl Supervised for Scrubber {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        let delay = self.gate.restarting();
        tracing::warn!(
            restarts = self.gate.restarts(),
            delay_ms = delay.as_millis() as u64,
            "log scrubber restarting"
        );
        self.busy = false;
    }
}

impl Handler<ScrubNow> for Scrubber {
    type Result = ResponseActFuture<Self, Result<LogScrubbed, ServiceError>>;

    fn handle(&mut self, _msg: ScrubNow, _ctx: &mut Self::Context) -> Self::Result {
        if self.busy {
            return Box::pin(actix::fut::ready(Err(ServiceError::Unavailable(
                "a scrub of the event log is already running".into(),
            ))));
        }
        self.busy = true;
        let (log, store) = (self.log.clone(), self.store.clone());
        let work = async move {
            let span = tracing::info_span!("log_scrub");
            let scrubbed = tokio::task::spawn_blocking(move || {
                let _enter = span.enter();
                let began = Instant::now();
                let through = log.committed_seq();
                let report = log.scrub();
                scrub_event(through, report, began.elapsed())
            })
            .await?;
            if let Some(problem) = &scrubbed.problem {
                tracing::error!(
                    through_seq = scrubbed.through_seq,
                    damaged_seq = scrubbed.damaged_seq,
                    problem = %problem,
                    "the event log scrub found damage"
                );
            } else {
                tracing::info!(
                    events = scrubbed.events,
                    bytes = scrubbed.bytes,
                    took_ms = scrubbed.took_ms,
                    "the event log scrub verified every committed event"
                );
            }
            store.send(Append(vec![scrubbed.clone().into()])).await??;
            Ok(scrubbed)
        };
        Box::pin(work.into_actor(self).map(|res, act, _| {
            act.busy = false;
            res
        }))
    }
}
