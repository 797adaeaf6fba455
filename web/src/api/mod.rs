//! The `/api/v1` handlers. Thin: parse, authorise, ask the service, render.

pub(crate) mod agent;
pub(crate) mod download;
pub(crate) mod events;
pub(crate) mod grammar;
pub(crate) mod jobs;
pub(crate) mod log_head;
pub(crate) mod misc;
pub(crate) mod plans;
pub(crate) mod points;
pub(crate) mod repo;
pub(crate) mod reports;
pub(crate) mod security;
pub(crate) mod verify_reports;

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use actix_web::web::Bytes;
use tokio::sync::mpsc;
use vouch_actors::service::ServiceHandle;
use vouch_events::{PlanId, Projections};

use crate::auth::{Principal, Role};
use crate::browse::Browse;
use crate::error::WebError;

/// What the handlers reach the service through.
pub(crate) struct Ctx {
    pub(crate) service: Option<ServiceHandle>,
    pub(crate) browse: Option<Arc<dyn Browse>>,
    pub(crate) log_dir: Option<PathBuf>,
    /// Where plan sources may lie.
    pub(crate) sources: Arc<vouch_events::sources::SourcePolicy>,
    /// The shortest proof interval a plan may set.
    pub(crate) min_every: std::time::Duration,
    pub(crate) limits: crate::limits::Limits,
    /// The repository protocol's storage.
    pub(crate) repo_store: Option<Arc<dyn crate::repo_store::RepoStore>>,
    /// The agents' job board.
    pub(crate) agents: Option<Arc<vouch_actors::service::AgentBoard>>,
    /// Rate of recorded refusals.
    pub(crate) refusals: repo::RefusalLimiter,
    /// Rate of recorded `agent.seen`.
    pub(crate) agent_seen: agent::SeenLimiter,
    /// Rate of recorded `log.head_exported` (per token).
    pub(crate) head_exports: agent::SeenLimiter,
    /// How long an agent's lease lasts unless renewed.
    pub(crate) lease_ttl: std::time::Duration,
    /// The Chromium that prints PDF reports.
    pub(crate) chromium: PathBuf,
}

impl Ctx {
    /// The service, or 503 while there is none.
    pub(crate) fn service(&self) -> Result<&ServiceHandle, WebError> {
        self.service
            .as_ref()
            .ok_or_else(|| WebError::Unavailable("the service is starting".into()))
    }

    /// The engine's browser, or 503.
    pub(crate) fn browse(&self) -> Result<Arc<dyn Browse>, WebError> {
        self.browse
            .clone()
            .ok_or_else(|| WebError::Unavailable("no repository is open".into()))
    }
}

/// The audit record of `who` doing `action` to `target`, appended with the
/// events the action caused.
pub(crate) fn audited(who: &Principal, action: &str, target: &str) -> vouch_events::Event {
    vouch_events::ActionAudited {
        principal: who.name.clone(),
        role: who.role.as_str().to_owned(),
        action: action.to_owned(),
        target: target.to_owned(),
    }
    .into()
}

/// Whether `who` may see things of `plan` (agents: only their plans; a
/// thing without a plan is not theirs).
pub(crate) fn plan_visible(p: &Projections, who: &Principal, plan: Option<&PlanId>) -> bool {
    if who.role != Role::Agent {
        return true;
    }
    plan.and_then(|id| p.plans.plans.get(id))
        .is_some_and(|pl| who.sees_source(&pl.definition.source))
}

/// Whether `who` may see a thing of `plan` recorded at `seq`: as
/// [`plan_visible`], and for agents only things of the plan's current
/// incarnation (recorded after its creation and its latest change of source
/// or repository), so an agent handed a plan id that an earlier plan used
/// never sees that plan's points or jobs (security review finding 13).
pub(crate) fn recorded_visible(
    p: &Projections,
    who: &Principal,
    plan: Option<&PlanId>,
    seq: u64,
) -> bool {
    if who.role != Role::Agent {
        return true;
    }
    plan.and_then(|id| p.plans.plans.get(id)).is_some_and(|pl| {
        pl.removed.is_none() && who.sees_source(&pl.definition.source) && seq > pl.epoch.seq
    })
}

/// [`recorded_visible`] for a point.
pub(crate) fn point_visible(p: &Projections, who: &Principal, pt: &vouch_events::Point) -> bool {
    recorded_visible(p, who, pt.plan.as_ref(), pt.since.seq)
}

/// [`recorded_visible`] for a job.
pub(crate) fn job_visible(p: &Projections, who: &Principal, j: &vouch_events::Job) -> bool {
    recorded_visible(p, who, j.plan.as_ref(), j.scheduled.seq)
}

/// The default and the cap of `limit` query parameters.
pub(crate) const DEFAULT_LIMIT: usize = 100;
/// The cap of `limit`.
pub(crate) const MAX_LIMIT: usize = 1000;

pub(crate) fn limit(l: Option<usize>) -> usize {
    l.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT)
}

/// A response body fed through a bounded channel: when the client goes
/// away the body is dropped, the channel closes and the producer stops.
pub(crate) struct ChannelBody(pub(crate) mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl futures_core::Stream for ChannelBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

fn plan_id_schema() -> utoipa::openapi::Object {
    grammar::pattern_schema(
        "The plan id.",
        grammar::PLAN_ID_PATTERN,
        Some(grammar::PLAN_ID_MAX_LEN),
        false,
    )
}

fn point_id_schema() -> utoipa::openapi::Object {
    grammar::pattern_schema(
        "The point (snapshot) id: 64 lowercase hex digits.",
        grammar::POINT_ID_PATTERN,
        None,
        false,
    )
}

/// The `{id}` of a plan route, for the OpenAPI document (the handlers read
/// it as a `web::Path<String>`; an id no plan has is 404).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(crate) struct PlanIdParam {
    #[param(schema_with = plan_id_schema, required = true)]
    id: String,
}

/// The `{id}` of a job route, for the OpenAPI document.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(crate) struct JobIdParam {
    /// The job id (made by the server).
    id: String,
}

/// The `{id}` of a point route, for the OpenAPI document.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(crate) struct PointIdParam {
    #[param(schema_with = point_id_schema, required = true)]
    id: String,
}
