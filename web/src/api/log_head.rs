//! `GET /api/v1/log/head`: the event log's acknowledged head (seq and
//! hash) and its latest signed checkpoint, for an external system to
//! anchor (security review finding 11, issue 13).

use actix_web::{web, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use super::Ctx;
use crate::auth::Principal;
use crate::error::{doc as errors, WebError};

/// How often a token's fetch of the head is recorded
/// (`log.head_exported`): an anchoring job polling every minute does not
/// fill the log.
pub(crate) const RECORD_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// The head of the event log.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LogHead {
    /// The seq of the last acknowledged event (from the log's `HEAD`); 0:
    /// none yet.
    pub seq: u64,
    /// BLAKE3 hash (hex) of that event's envelope: the head of the hash
    /// chain.
    pub hash: String,
    /// The latest signed checkpoint (`events/CHECKPOINTS`), if the service
    /// signs with a chain key. Its MAC is not checked here: check the log
    /// with `vouch events verify --chain-key-file`.
    pub checkpoint: Option<LogCheckpoint>,
}

/// A signed checkpoint of the chain.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LogCheckpoint {
    /// The checkpointed seq.
    pub seq: u64,
    /// The hash of event `seq` (hex).
    pub hash: String,
    /// Which chain key signed (hex, 8 bytes; reveals nothing of the key).
    pub key_id: String,
    /// Keyed BLAKE3 MAC of the checkpoint (hex).
    pub mac: String,
    /// When it was written (RFC 3339).
    pub recorded_at: String,
}

/// The event log's acknowledged head and latest signed checkpoint, to be
/// recorded elsewhere (an anchor): a later log that does not pass through
/// this seq and hash was rewritten or cut. Any role but `agent`.
#[utoipa::path(get, path = "/api/v1/log/head", tag = "events",
    responses((status = 200, body = LogHead), (status = 403, response = errors::Forbidden),
        (status = 503, response = errors::Unavailable), (status = 500, response = errors::Internal)),
    security(("bearer" = [])))]
pub(crate) async fn head(ctx: web::Data<Ctx>, who: Principal) -> Result<HttpResponse, WebError> {
    who.require_not_agent()?;
    let dir = ctx
        .log_dir
        .clone()
        .ok_or_else(|| WebError::Unavailable("no event log".into()))?;
    let (head, cp) = web::block(move || {
        let head = vouch_events::read_log_head(&dir)?;
        let cp = vouch_events::latest_checkpoint(&dir)?;
        Ok::<_, vouch_events::EventError>((head, cp))
    })
    .await
    .map_err(|e| WebError::Internal(e.to_string()))?
    .map_err(|e| WebError::Internal(e.to_string()))?;
    let (seq, hash) = head.unwrap_or((0, vouch_events::GENESIS_HASH));
    // The security center's `log-head-export` check reads this record.
    if seq > 0 && ctx.head_exports.due(&who.name) {
        if let Ok(service) = ctx.service() {
            let event = vouch_events::LogHeadExported {
                seq,
                signed: cp.is_some(),
                by: who.name.clone(),
            };
            if let Err(e) = service.append(vec![event.into()]).await {
                tracing::warn!(error = %e, "log.head_exported could not be recorded");
            }
        }
    }
    Ok(HttpResponse::Ok().json(LogHead {
        seq,
        hash: hash.to_hex(),
        checkpoint: cp.map(|c| LogCheckpoint {
            seq: c.seq,
            hash: c.hash.to_hex(),
            key_id: c.key_id.iter().map(|b| format!("{b:02x}")).collect(),
            mac: vouch_events::EventHash(c.mac).to_hex(),
            recorded_at: crate::views::rfc3339(c.recorded_unix_ns),
        }),
    }))
}
