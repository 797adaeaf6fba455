//! From a domain [`Event`] to a persisted envelope body and back, upcasting
//! older schema versions on the way in.

use std::borrow::Cow;

use crate::error::{EventError, Result};
use crate::event::{Event, UnknownEvent};
use crate::format::{EventHash, PersistedEnvelope};
use crate::upcast::upcast;

/// An event as read from (or appended to) the log, with its envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// Sequence number (1-based, no gaps).
    pub seq: u64,
    /// When the server recorded it (its clock).
    pub recorded_unix_ns: i64,
    /// The schema version it was *written* with (before any upcast).
    pub schema_version: u16,
    /// Hash of the previous envelope.
    pub prev_hash: EventHash,
    /// Hash of this envelope's body.
    pub hash: EventHash,
    /// The event, upcast to the current version (or [`Event::Unknown`]).
    pub event: Event,
}

/// Encodes the body of an envelope.
pub fn encode_body(
    seq: u64,
    recorded_unix_ns: i64,
    prev_hash: &EventHash,
    event: &Event,
) -> Result<Vec<u8>> {
    let payload = event.encode_payload().map_err(|e| EventError::Encode {
        what: format!("{} payload", event.event_type()),
        message: e.to_string(),
    })?;
    let env = PersistedEnvelope {
        seq,
        recorded_unix_ns,
        event_type: Cow::Borrowed(event.event_type()),
        schema_version: event.schema_version(),
        prev_hash: prev_hash.0,
        payload: Cow::Owned(payload),
    };
    rmp_serde::to_vec(&env).map_err(|e| EventError::Encode {
        what: "envelope".into(),
        message: e.to_string(),
    })
}

/// Decodes the persisted envelope of `body` without decoding the event.
pub fn decode_persisted(body: &[u8]) -> Result<PersistedEnvelope<'_>> {
    rmp_serde::from_slice(body).map_err(|e| EventError::Decode {
        what: "envelope".into(),
        message: e.to_string(),
    })
}

/// Decodes a whole envelope; `hash` is the record's (already checked) hash.
pub fn decode_envelope(body: &[u8], hash: EventHash) -> Result<Envelope> {
    let p = decode_persisted(body)?;
    let event = decode_event(&p.event_type, p.schema_version, &p.payload);
    Ok(Envelope {
        seq: p.seq,
        recorded_unix_ns: p.recorded_unix_ns,
        schema_version: p.schema_version,
        prev_hash: EventHash(p.prev_hash),
        hash,
        event,
    })
}

/// Decodes a payload, upcasting older versions. A type or version this build
/// does not know, or a payload that does not decode, becomes
/// [`Event::Unknown`] (with a warning for the latter): never dropped.
pub fn decode_event(event_type: &str, version: u16, payload: &[u8]) -> Event {
    let unknown = || {
        Event::Unknown(UnknownEvent {
            event_type: event_type.to_owned(),
            schema_version: version,
            payload: payload.to_vec(),
        })
    };
    let decoded = match Event::decode_current(event_type, version, payload) {
        Some(r) => r,
        None => match upcast(event_type, version, payload) {
            Some(Ok((v, lifted))) => match Event::decode_current(event_type, v, &lifted) {
                Some(r) => r,
                None => return unknown(),
            },
            Some(Err(message)) => {
                tracing::warn!(event_type, version, %message, "cannot upcast event; kept as unknown");
                return unknown();
            }
            None => return unknown(),
        },
    };
    match decoded {
        Ok(e) => e,
        Err(err) => {
            tracing::warn!(event_type, version, error = %err, "event payload does not decode; kept as unknown");
            unknown()
        }
    }
}
