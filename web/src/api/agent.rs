//! The agents' side of the API (docs/agents.md): registration with a
//! one-time enrollment token, the long-poll for jobs, lease renewal and
//! results; and the list of agents for everyone else.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;
use vouch_actors::service::{AgentBoard, JobFailure, JobOutput, LeaseError, OPTIONS_UNSUPPORTED};
use vouch_events::sources::agent_repository;
use vouch_events::{
    AgentId, AgentRegistered, AgentSeen, BackupCommitted, BackupSummary, LeaseGranted,
    RestoreCompleted, SnapshotId,
};

use super::{audited, repo::refuse, Ctx};
use crate::auth::{LiveTokens, Principal, Role, TokenError};
use crate::error::{doc as errors, WebError};

/// How long a lease lasts unless renewed (`[agents] lease_ttl`).
pub const LEASE_TTL: Duration = Duration::from_secs(60);
/// Longest long-poll.
pub const MAX_WAIT: Duration = Duration::from_secs(60);
/// An agent's calls are recorded as `agent.seen` at most this often by
/// default (`vouch serve` makes it a quarter of `agent_lost_after` when
/// that is shorter, so a polling agent is never taken for lost).
pub const SEEN_EVERY: Duration = Duration::from_secs(30);

/// When each agent's call was last recorded.
#[derive(Debug)]
pub(crate) struct SeenLimiter {
    every: Duration,
    last: Mutex<HashMap<String, Instant>>,
}

impl SeenLimiter {
    pub(crate) fn new(every: Duration) -> Self {
        SeenLimiter {
            every,
            last: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn due(&self, agent: &str) -> bool {
        let mut m = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match m.get(agent) {
            Some(at) if now.duration_since(*at) < self.every => false,
            _ => {
                m.insert(agent.to_owned(), now);
                true
            }
        }
    }
}

fn board(ctx: &Ctx) -> Result<&std::sync::Arc<AgentBoard>, WebError> {
    ctx.agents
        .as_ref()
        .ok_or_else(|| WebError::Unavailable("this service takes no agents".into()))
}

fn require_agent(who: &Principal) -> Result<(), WebError> {
    if who.role == Role::Agent {
        Ok(())
    } else {
        Err(WebError::Forbidden(format!(
            "only an agent's own token calls this, not a token with role {}",
            who.role
        )))
    }
}

/// The header in which an agent tells its clock (Unix milliseconds) when
/// it asks for a job.
pub const AGENT_CLOCK_HEADER: &str = "x-vouch-agent-clock";
/// The header in which an agent tells its software version.
pub const AGENT_VERSION_HEADER: &str = "x-vouch-agent-version";
/// The header in which an agent names what it can do beyond the first
/// protocol, comma-separated (today: `hooks`). A leased job that needs
/// what the agent does not name fails rather than run without it.
pub const AGENT_FEATURES_HEADER: &str = "x-vouch-agent-features";
/// The feature of an agent that runs plans' hooks.
pub const FEATURE_HOOKS: &str = "hooks";

/// What an agent told of itself in its request's headers: how far its
/// clock is from the server's (milliseconds) and its version. A malformed
/// header is ignored (the facts are for display, nothing is decided on
/// them).
#[derive(Debug, Default)]
struct Told {
    clock_skew_ms: Option<i64>,
    version: Option<String>,
}

fn told(req: &HttpRequest, now_unix_ns: i64) -> Told {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let clock_skew_ms = header(AGENT_CLOCK_HEADER)
        .and_then(|v| v.parse::<i64>().ok())
        .map(|agent_ms| agent_ms.saturating_sub(now_unix_ns / 1_000_000));
    let version = header(AGENT_VERSION_HEADER)
        .filter(|v| !v.is_empty() && v.len() <= 64 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned);
    Told {
        clock_skew_ms,
        version,
    }
}

/// Records that `who` called in (at most every [`SEEN_EVERY`]).
async fn seen(ctx: &Ctx, who: &Principal) {
    seen_telling(ctx, who, Told::default()).await;
}

/// [`seen`], with what the agent told of itself.
async fn seen_telling(ctx: &Ctx, who: &Principal, told: Told) {
    if !ctx.agent_seen.due(&who.name) {
        return;
    }
    if let Ok(service) = ctx.service() {
        let event = AgentSeen {
            agent: AgentId::new(&who.name),
            clock_skew_ms: told.clock_skew_ms,
            version: told.version,
        };
        if let Err(e) = service.append(vec![event.into()]).await {
            tracing::warn!(error = %e, agent = %who.name, "agent.seen could not be recorded");
        }
    }
}

/// The body of `POST /api/v1/agent/register`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterInput {
    /// The agent's name: `[a-z0-9][a-z0-9._-]{0,62}`; its plans' sources
    /// are `agent:NAME:/path`.
    #[schema(pattern = "^[a-z0-9][a-z0-9._-]{0,62}$")]
    pub name: String,
    /// Its host name.
    #[schema(
        min_length = 1,
        max_length = 255,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]+$"
    )]
    pub hostname: String,
    /// Its operating system (`linux`, `windows`).
    #[schema(
        min_length = 1,
        max_length = 255,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]+$"
    )]
    pub os: String,
    /// Its version.
    #[schema(
        min_length = 1,
        max_length = 255,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]+$"
    )]
    pub version: String,
}

/// What a registered agent keeps (in files of mode 0600): shown once.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Registration {
    /// Its name.
    pub agent: String,
    /// Its own token (role `agent`).
    pub token: String,
    /// Its own repository's id (`agent-NAME`).
    pub repository: String,
    /// That repository's passphrase.
    pub repository_passphrase: String,
}

fn agent_name_ok(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(c))
}

fn text_ok(s: &str, max: usize) -> bool {
    !s.is_empty() && s.chars().count() <= max && !s.chars().any(char::is_control)
}

/// Registers an agent with a one-time enrollment token (which this uses
/// up): makes its own token and its own repository, and records
/// `agent.registered`.
#[utoipa::path(post, path = "/api/v1/agent/register", tag = "agents",
    request_body = RegisterInput,
    responses((status = 200, body = Registration),
        (status = 400, response = errors::BadRequest), (status = 403, response = errors::Forbidden),
        (status = 409, response = errors::Conflict), (status = 413, response = errors::PayloadTooLarge),
        (status = 415, response = errors::UnsupportedMediaType), (status = 422, response = errors::Invalid),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn register(
    ctx: web::Data<Ctx>,
    tokens: web::Data<LiveTokens>,
    who: Principal,
    body: web::Json<RegisterInput>,
) -> Result<HttpResponse, WebError> {
    if who.role != Role::Enroll {
        return Err(WebError::Forbidden(format!(
            "registering an agent needs an enrollment token (`vouch token create --role enroll`), not {}",
            who.role
        )));
    }
    let input = body.into_inner();
    let mut fields = std::collections::BTreeMap::new();
    if !agent_name_ok(&input.name) {
        fields.insert(
            "name".to_owned(),
            "must match [a-z0-9][a-z0-9._-]{0,62}".to_owned(),
        );
    }
    for (field, value) in [
        ("hostname", &input.hostname),
        ("os", &input.os),
        ("version", &input.version),
    ] {
        if !text_ok(value, 255) {
            fields.insert(
                field.to_owned(),
                "1 to 255 characters, no control characters".to_owned(),
            );
        }
    }
    if !fields.is_empty() {
        return Err(WebError::Invalid {
            message: "the registration does not validate".into(),
            fields,
        });
    }
    let service = ctx.service()?.clone();
    let store = ctx
        .repo_store
        .clone()
        .ok_or_else(|| WebError::Unavailable("this service serves no repositories".into()))?;
    let name = input.name.clone();
    if store.has(&agent_repository(&name)) {
        return Err(WebError::Conflict(format!(
            "an agent named {name:?} registered before; pick another name, or revoke and remove the old one"
        )));
    }
    // The enrollment token is used up and the agent's token made in one
    // change of the token file: two registrations with one token cannot
    // both pass.
    let enroll = who.name.clone();
    let t = tokens.clone();
    let n = name.clone();
    let token = web::block(move || {
        t.update(|store| {
            if store.list().iter().any(|e| e.name == n) {
                return Err(TokenError::NameTaken(n.clone()));
            }
            if !store.revoke(&enroll) {
                return Err(TokenError::Format {
                    path: "tokens".into(),
                    message: "the enrollment token was used up meanwhile".into(),
                });
            }
            store.create(&n, Role::Agent)
        })
    })
    .await
    .map_err(|e| WebError::Internal(e.to_string()))?
    .map_err(|e| match e {
        TokenError::NameTaken(_) | TokenError::Format { .. } => WebError::Conflict(e.to_string()),
        TokenError::BadName(_) => WebError::BadRequest(e.to_string()),
        e => WebError::Internal(e.to_string()),
    })?;
    let n = name.clone();
    let made = web::block(move || store.create_agent_repository(&n))
        .await
        .map_err(|e| WebError::Internal(e.to_string()))?;
    let repository = match made {
        Ok(r) => r,
        Err(e) => {
            // Without its repository the agent's token is of no use.
            let n = name.clone();
            let _ = web::block(move || tokens.update(|s| Ok(s.revoke(&n)))).await;
            return Err(WebError::Unavailable(format!(
                "the agent's repository could not be made ({e}); its token was revoked again: make a new enrollment token and retry"
            )));
        }
    };
    service
        .append(vec![
            AgentRegistered {
                agent: AgentId::new(&name),
                hostname: input.hostname,
                os: input.os,
                version: input.version,
            }
            .into(),
            audited(&who, "agent.register", &name),
        ])
        .await?;
    tracing::info!(agent = %name, repository = %repository.id, "agent registered");
    Ok(HttpResponse::Ok().json(Registration {
        agent: name,
        token,
        repository: repository.id,
        repository_passphrase: repository.passphrase.to_string(),
    }))
}

/// The query of `GET /api/v1/agent/jobs`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct JobsQuery {
    /// How long to wait for a job (a duration such as `30s`; at most 60 s;
    /// default 30 s).
    #[param(value_type = String, required = false)]
    wait: Option<String>,
}

/// A job leased to the calling agent.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LeasedJob {
    /// The job.
    pub job: String,
    /// Its plan.
    pub plan: String,
    /// What to do: `backup`, or `restore`.
    pub kind: String,
    /// `backup`: the path to back up on the agent's host; `restore`: the
    /// path inside the point to restore.
    pub path: String,
    /// `restore`: the point to restore (64 hex digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point: Option<String>,
    /// `restore`: the directory on the agent's host to restore into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// The repository to back up into (the agent's own).
    pub repository: String,
    /// The tag the snapshot must carry.
    pub tag: String,
    /// The lease's fencing token: send it in `X-Vouch-Lease` with every
    /// upload, and to renew and report.
    pub lease: u64,
    /// Seconds the lease lasts unless renewed (renew well before: a third
    /// of it is a good interval). The server's clock decides.
    pub lease_seconds: u64,
    /// `backup`: further paths of this host into the same point, and what
    /// is left out (the plan's `files`; an agent that predates it backs up
    /// `path` alone, with nothing left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<crate::plan_files::FilesInput>,
    /// `backup`: the programs to run from the agent's own hook directory
    /// before and after the backup (the plan's `hooks`). Only leased to an
    /// agent that names the `hooks` feature; for any other, the job fails
    /// with `options_unsupported`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<crate::plan_files::HooksInput>,
}

/// Whether the polling request names `feature` in its features header.
fn has_feature(req: &HttpRequest, feature: &str) -> bool {
    req.headers()
        .get_all(AGENT_FEATURES_HEADER)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|f| f.trim().eq_ignore_ascii_case(feature))
}

/// The calling agent's next job, waiting up to `wait` for one: 200 with
/// the job under a new lease (`agent.lease_granted`), or 204 when none
/// came.
#[utoipa::path(get, path = "/api/v1/agent/jobs", tag = "agents", params(JobsQuery),
    responses((status = 200, body = LeasedJob), (status = 204, description = "no job came in time"),
        (status = 400, response = errors::BadRequest), (status = 403, response = errors::Forbidden),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn next_job(
    ctx: web::Data<Ctx>,
    who: Principal,
    q: web::Query<JobsQuery>,
    req: HttpRequest,
) -> Result<HttpResponse, WebError> {
    require_agent(&who)?;
    let wait = match &q.wait {
        None => Duration::from_secs(30),
        Some(w) => humantime::parse_duration(w)
            .map_err(|e| WebError::BadRequest(format!("wait={w:?}: {e}")))?,
    }
    .min(MAX_WAIT);
    let board = board(&ctx)?.clone();
    let service = ctx.service()?.clone();
    seen_telling(&ctx, &who, told(&req, service.now_unix_ns())).await;
    let Some(claim) = board.next(&who.name, wait).await else {
        seen(&ctx, &who).await;
        return Ok(HttpResponse::NoContent().finish());
    };
    let hooked = claim.job().hooks.pre.is_some() || claim.job().hooks.post.is_some();
    if hooked && !has_feature(&req, FEATURE_HOOKS) {
        tracing::warn!(agent = %who.name, job = %claim.job().job, "the agent runs no hooks; its hooked job fails");
        claim.refuse(JobFailure::new(
            OPTIONS_UNSUPPORTED,
            format!(
                "agent {} is too old to run the plan's hooks (it does not name the `{FEATURE_HOOKS}` feature): upgrade it, or remove the plan's `hooks`",
                who.name
            ),
            false,
        ));
        return Ok(HttpResponse::NoContent().finish());
    }
    let ttl = ctx.lease_ttl;
    let job = claim.job().clone();
    let expires = service
        .now_unix_ns()
        .saturating_add(i64::try_from(ttl.as_nanos()).unwrap_or(i64::MAX));
    let granted = service
        .append(vec![LeaseGranted {
            agent: AgentId::new(&who.name),
            job: job.job.clone(),
            expires_unix_ns: expires,
        }
        .into()])
        .await;
    let receipt = match granted {
        Ok(r) => r,
        Err(e) => {
            board.release(claim);
            return Err(e.into());
        }
    };
    let fence = receipt.last_seq;
    board.grant(claim, fence, ttl);
    tracing::info!(agent = %who.name, job = %job.job, fence, "lease granted");
    let (kind, point, destination) = match &job.restore {
        Some(r) => (
            "restore",
            Some(r.point.clone()),
            Some(r.destination.clone()),
        ),
        None => ("backup", None, None),
    };
    Ok(HttpResponse::Ok().json(LeasedJob {
        job: job.job.to_string(),
        plan: job.plan.to_string(),
        kind: kind.into(),
        point,
        destination,
        path: job.path,
        repository: job.repository.to_string(),
        files: (job.restore.is_none() && !job.files.is_default())
            .then(|| crate::plan_files::files_input(&job.files)),
        hooks: (job.restore.is_none() && hooked)
            .then(|| crate::plan_files::hooks_input(&job.hooks)),
        tag: job.tag,
        lease: fence,
        lease_seconds: ttl.as_secs(),
    }))
}

/// The answer of a renewal.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Renewed {
    /// Seconds the lease lasts from now unless renewed again.
    pub lease_seconds: u64,
}

fn lease_refusal(e: LeaseError) -> WebError {
    match e {
        LeaseError::NotYours(_) => WebError::Forbidden(e.to_string()),
        _ => WebError::Conflict(e.to_string()),
    }
}

/// Extends the calling agent's lease; 409 when it is no longer current
/// (stop the job: its results will be refused).
#[utoipa::path(post, path = "/api/v1/agent/leases/{lease}/renew", tag = "agents",
    params(("lease" = u64, Path, description = "the lease's fencing token")),
    responses((status = 200, body = Renewed),
        (status = 400, response = errors::BadRequest), (status = 403, response = errors::Forbidden),
        (status = 409, response = errors::Conflict),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn renew(
    ctx: web::Data<Ctx>,
    who: Principal,
    lease: web::Path<u64>,
) -> Result<HttpResponse, WebError> {
    require_agent(&who)?;
    let fence = lease.into_inner();
    seen(&ctx, &who).await;
    match board(&ctx)?.renew(&who.name, fence, ctx.lease_ttl) {
        Ok(_) => Ok(HttpResponse::Ok().json(Renewed {
            lease_seconds: ctx.lease_ttl.as_secs(),
        })),
        Err(e) => Err(refuse(
            &ctx,
            &who,
            "lease.renew",
            &fence.to_string(),
            lease_refusal(e),
        )
        .await),
    }
}

/// What an agent reports at the end of a job.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResultInput {
    /// The snapshot committed, when the backup succeeded (64 hex digits;
    /// it must have been committed under this lease).
    #[serde(default)]
    #[schema(pattern = "^[0-9a-fA-F]{64}$")]
    pub snapshot: Option<String>,
    /// Bytes the agent stored (after compression and deduplication).
    #[serde(default, deserialize_with = "crate::validate::whole_u64")]
    #[schema(minimum = 0, maximum = 9007199254740991_u64)]
    pub stored_bytes: u64,
    /// How long the backup ran on the agent, in milliseconds.
    #[serde(default, deserialize_with = "crate::validate::whole_u64")]
    #[schema(minimum = 0, maximum = 9007199254740991_u64)]
    pub duration_ms: u64,
    /// When it failed: a stable kind (`source_missing`, ...).
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]+$"
    )]
    pub error_kind: Option<String>,
    /// When it failed: what happened and what to do.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 2000,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]+$"
    )]
    pub error: Option<String>,
    /// When it failed: whether trying again may help.
    #[serde(default)]
    pub retryable: bool,
    /// A restore that succeeded: files restored.
    #[serde(default, deserialize_with = "crate::validate::whole_u64")]
    #[schema(minimum = 0, maximum = 9007199254740991_u64)]
    pub restored_files: u64,
    /// A restore that succeeded: bytes of file content restored.
    #[serde(default, deserialize_with = "crate::validate::whole_u64")]
    #[schema(minimum = 0, maximum = 9007199254740991_u64)]
    pub restored_bytes: u64,
    /// A backup: the plan's hooks that failed on the agent (recorded as
    /// `hook.failed`). With `error`: a failed `pre` hook stopped the
    /// backup; with `snapshot`: the `post` hook failed after the commit and
    /// the point stands.
    #[serde(default)]
    #[schema(max_items = 2)]
    pub hook_failures: Vec<HookFailureInput>,
}

/// When a hook ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HookPhaseInput {
    /// Before the backup.
    Pre,
    /// After the backup.
    Post,
}

/// One hook that failed on an agent.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HookFailureInput {
    /// Before or after the backup.
    pub phase: HookPhaseInput,
    /// The hook's name: the one the leased job gave for this phase.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$"
    )]
    pub hook: String,
    /// Its exit status, when it exited (none: killed, or never started).
    #[serde(default, deserialize_with = "crate::validate::whole_i32")]
    #[schema(minimum = -2147483648, maximum = 2147483647)]
    pub exit_code: Option<i32>,
    /// Killed at its timeout.
    #[serde(default)]
    pub timed_out: bool,
    /// What happened, with the end of its standard error (newlines and
    /// tabs allowed, no other control characters).
    #[schema(
        min_length = 1,
        max_length = 4096,
        pattern = "^[^\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f]+$"
    )]
    pub reason: String,
    /// How long it ran, in milliseconds.
    #[serde(default, deserialize_with = "crate::validate::whole_u64")]
    #[schema(minimum = 0, maximum = 9007199254740991_u64)]
    pub took_ms: u64,
}

/// The longest `error` of a result, in characters (its schema says the
/// same).
pub const RESULT_ERROR_MAX: usize = 2000;
/// The longest `error_kind` of a result, in characters.
pub const RESULT_ERROR_KIND_MAX: usize = 64;

/// The longest `reason` of a reported hook failure, in characters.
pub const HOOK_REASON_MAX: usize = 4096;

/// The `hook.failed` events of an agent's reported hook failures, each
/// checked against the hooks its leased job named.
fn hook_failures(
    job: &vouch_actors::service::AgentJob,
    reported: &[HookFailureInput],
) -> Result<Vec<vouch_events::Event>, WebError> {
    let invalid = |why: String| WebError::Invalid {
        message: "the result does not validate".into(),
        fields: [("hook_failures".to_owned(), why)].into(),
    };
    reported
        .iter()
        .map(|f| {
            let (phase, named) = match f.phase {
                HookPhaseInput::Pre => (vouch_events::HookPhase::Pre, &job.hooks.pre),
                HookPhaseInput::Post => (vouch_events::HookPhase::Post, &job.hooks.post),
            };
            if named.as_ref().is_none_or(|h| h.name != f.hook) {
                return Err(invalid(format!(
                    "the job has no {} hook named {:?}",
                    phase.as_str(),
                    f.hook
                )));
            }
            // Standard error may hold newlines and tabs; other control
            // characters are refused.
            let clean = |c: char| !c.is_control() || c == '\n' || c == '\t';
            if f.reason.is_empty()
                || f.reason.chars().count() > HOOK_REASON_MAX
                || !f.reason.chars().all(clean)
            {
                return Err(invalid(format!(
                    "a reason of 1 to {HOOK_REASON_MAX} characters, no control characters but newlines and tabs"
                )));
            }
            Ok(vouch_events::HookFailed {
                job: job.job.clone(),
                plan: job.plan.clone(),
                phase,
                hook: f.hook.clone(),
                exit_code: f.exit_code,
                timed_out: f.timed_out,
                reason: f.reason.clone(),
                took_ms: f.took_ms,
            }
            .into())
        })
        .collect()
}

/// Ends the calling agent's lease with its job's result: a snapshot
/// committed under it, or a failure. 409 when the lease is no longer
/// current (the result is not applied).
#[utoipa::path(post, path = "/api/v1/agent/leases/{lease}/result", tag = "agents",
    params(("lease" = u64, Path, description = "the lease's fencing token")),
    request_body = ResultInput,
    responses((status = 204, description = "applied"),
        (status = 400, response = errors::BadRequest), (status = 403, response = errors::Forbidden),
        (status = 409, response = errors::Conflict), (status = 413, response = errors::PayloadTooLarge),
        (status = 415, response = errors::UnsupportedMediaType), (status = 422, response = errors::Invalid),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn result(
    ctx: web::Data<Ctx>,
    who: Principal,
    lease: web::Path<u64>,
    body: web::Json<ResultInput>,
) -> Result<HttpResponse, WebError> {
    require_agent(&who)?;
    let fence = lease.into_inner();
    let input = body.into_inner();
    let board = board(&ctx)?.clone();
    seen(&ctx, &who).await;
    let target = fence.to_string();
    let leased = match board.check(&who.name, fence) {
        Ok(l) => l.job,
        Err(e) => return Err(refuse(&ctx, &who, "lease.result", &target, lease_refusal(e)).await),
    };
    let hooks_failed = hook_failures(&leased, &input.hook_failures)?;
    let outcome = match (&input.snapshot, &input.error, &leased.restore) {
        (None, None, Some(r)) => {
            let point: SnapshotId = r.point.parse().map_err(|_| {
                WebError::Internal(format!("the leased restore names no point: {}", r.point))
            })?;
            Ok(JobOutput {
                events: vec![RestoreCompleted {
                    job: leased.job.clone(),
                    point,
                    path: leased.path.clone(),
                    destination: r.destination.clone(),
                    agent: Some(who.name.clone()),
                    files: input.restored_files,
                    bytes: input.restored_bytes,
                }
                .into()],
            })
        }
        (Some(_), None, Some(_)) => {
            return Err(WebError::Invalid {
                message: "a restore's result names no snapshot".into(),
                fields: [("snapshot".to_owned(), "only for backups".to_owned())].into(),
            })
        }
        (Some(snapshot), None, None) => {
            let point: SnapshotId = snapshot.parse().map_err(|_| WebError::Invalid {
                message: "the result does not validate".into(),
                fields: [("snapshot".to_owned(), "64 hex digits".to_owned())].into(),
            })?;
            let (job, c) = match board.committed_snapshot(&who.name, fence, snapshot) {
                Ok(v) => v,
                Err(e) => {
                    return Err(refuse(&ctx, &who, "lease.result", &target, lease_refusal(e)).await)
                }
            };
            let mut events = vec![BackupCommitted {
                job: Some(job.job.clone()),
                plan: Some(job.plan.clone()),
                repository: job.repository.clone(),
                snapshot: point,
                snapshot_time_unix_ns: c.time_unix_ns,
                summary: BackupSummary {
                    files: c.files,
                    bytes: c.bytes,
                    added_bytes: c.added_bytes,
                    stored_bytes: input.stored_bytes,
                    duration_ms: input.duration_ms,
                    total_bytes: c.total_bytes,
                    warnings: c.warnings,
                },
                changes: None,
            }
            .into()];
            // After the commit: the point stands whatever the post hook did.
            events.extend(hooks_failed);
            Ok(JobOutput { events })
        }
        (None, Some(error), _) => {
            let kind = input.error_kind.clone().unwrap_or_else(|| "agent".into());
            if !text_ok(&kind, RESULT_ERROR_KIND_MAX) || !text_ok(error, RESULT_ERROR_MAX) {
                return Err(WebError::Invalid {
                    message: "the result does not validate".into(),
                    fields: [(
                        "error".to_owned(),
                        format!("error_kind 1-{RESULT_ERROR_KIND_MAX} and error 1-{RESULT_ERROR_MAX} characters, no control characters"),
                    )]
                    .into(),
                });
            }
            let mut failure = JobFailure::new(kind, error.clone(), input.retryable);
            failure.events.extend(hooks_failed);
            Err(failure)
        }
        _ => {
            return Err(WebError::Invalid {
                message: "a result names a snapshot or an error, not both or neither".into(),
                fields: [(
                    "snapshot".to_owned(),
                    "give either snapshot or error".to_owned(),
                )]
                .into(),
            })
        }
    };
    match board.finish(&who.name, fence, input.snapshot.as_deref(), outcome) {
        Ok(job) => {
            tracing::info!(agent = %who.name, job = %job.job, fence, "agent result applied");
            Ok(HttpResponse::NoContent().finish())
        }
        Err(e) => Err(refuse(&ctx, &who, "lease.result", &target, lease_refusal(e)).await),
    }
}

/// One agent as listed.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AgentView {
    /// Its name.
    pub name: String,
    /// Its host name.
    pub hostname: Option<String>,
    /// Its operating system.
    pub os: Option<String>,
    /// Its version.
    pub version: Option<String>,
    /// When it last called in (RFC 3339), if ever.
    pub last_seen: Option<String>,
    /// Its current leases.
    pub leases: Vec<LeaseView>,
    /// Jobs waiting for it.
    pub queued: usize,
}

/// A current lease.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LeaseView {
    /// Its fencing token.
    pub lease: u64,
    /// The job.
    pub job: String,
    /// Its plan.
    pub plan: String,
    /// Seconds until it expires unless renewed.
    pub remaining_seconds: u64,
}

/// The agents list.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AgentList {
    /// The agents, by name.
    pub agents: Vec<AgentView>,
}

/// Every registered agent (an agent sees only itself): name, host,
/// version, last call, current leases and queued jobs.
#[utoipa::path(get, path = "/api/v1/agents", tag = "agents",
    responses((status = 200, body = AgentList), (status = 403, response = errors::Forbidden),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn list(ctx: web::Data<Ctx>, who: Principal) -> Result<HttpResponse, WebError> {
    let service = ctx.service()?;
    let only = (who.role == Role::Agent).then(|| who.name.clone());
    let agents = service
        .query(0, move |p| {
            p.agents
                .agents
                .values()
                .filter(|a| only.as_ref().is_none_or(|o| a.id.as_str() == o))
                .map(|a| {
                    (
                        a.id.to_string(),
                        a.hostname.clone(),
                        a.os.clone(),
                        a.version.clone(),
                        a.last_seen_unix_ns,
                    )
                })
                .collect::<Vec<_>>()
        })
        .await?;
    let board = ctx.agents.clone();
    let views = agents
        .into_iter()
        .map(|(name, hostname, os, version, seen)| {
            let (leases, queued) = match &board {
                Some(b) => (
                    b.leases(Some(&name))
                        .into_iter()
                        .map(|l| LeaseView {
                            lease: l.fence,
                            job: l.job.job.to_string(),
                            plan: l.job.plan.to_string(),
                            remaining_seconds: l.remaining.as_secs(),
                        })
                        .collect(),
                    b.queued(&name),
                ),
                None => (Vec::new(), 0),
            };
            AgentView {
                last_seen: seen.map(crate::views::rfc3339),
                name,
                hostname,
                os,
                version,
                leases,
                queued,
            }
        })
        .collect();
    Ok(HttpResponse::Ok().json(AgentList { agents: views }))
}
