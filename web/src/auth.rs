//! API tokens: stored only as hashes, checked in constant time.
//!
//! Every route under `/api/v1` sits behind [`require_token`], which wants
//! `Authorization: Bearer <token>`; health and metrics stay open. Tokens
//! are long random strings, so a fast keyed hash is enough (no password
//! KDF): the store holds the BLAKE3 hash, derived with a context string of
//! its own, and a presented token is hashed and compared with
//! `blake3::Hash`'s constant-time equality.

use std::fmt;
use std::future::{ready, Ready};

use actix_web::body::MessageBody;
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::header::AUTHORIZATION;
use actix_web::middleware::Next;
use actix_web::{web, Error, FromRequest, HttpMessage, HttpRequest};
use serde::Serialize;

use crate::error::WebError;

/// Domain separation of token hashes; changing it invalidates every token.
const TOKEN_CONTEXT: &str = "vouch 2026 api token v1";

/// The stored form of an API token.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenHash(blake3::Hash);

impl TokenHash {
    /// The hash of a token as presented by a client.
    pub fn of(token: &str) -> Self {
        TokenHash(blake3::Hash::from(blake3::derive_key(
            TOKEN_CONTEXT,
            token.as_bytes(),
        )))
    }

    /// Reads a hash written by [`TokenHash::to_hex`].
    pub fn from_hex(hex: &str) -> Option<Self> {
        blake3::Hash::from_hex(hex).ok().map(TokenHash)
    }

    /// 64 lowercase hex digits, for configuration files.
    pub fn to_hex(&self) -> String {
        self.0.to_hex().to_string()
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only a prefix: enough to tell tokens apart in logs.
        write!(f, "TokenHash({}…)", &self.to_hex()[..8])
    }
}

/// What a token may do (enforced per route from issue 5 on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything, including token management.
    Admin,
    /// Plans and jobs: create, run, cancel.
    Operator,
    /// Read only.
    Viewer,
    /// A backup agent: its own jobs only.
    Agent,
}

/// The authenticated caller of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Principal {
    /// The token's name.
    pub name: String,
    /// The token's role.
    pub role: Role,
}

/// The known tokens, by hash.
#[derive(Debug, Clone, Default)]
pub struct TokenStore {
    tokens: Vec<(TokenHash, Principal)>,
}

impl TokenStore {
    /// A store that accepts no token.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a token by its hash.
    pub fn insert(&mut self, hash: TokenHash, name: impl Into<String>, role: Role) {
        self.tokens.push((
            hash,
            Principal {
                name: name.into(),
                role,
            },
        ));
    }

    /// The caller holding `presented`, if it matches a stored hash.
    ///
    /// Every stored hash is compared, in constant time each, whether or not
    /// an earlier one matched.
    pub fn authenticate(&self, presented: &str) -> Option<&Principal> {
        let hash = TokenHash::of(presented);
        self.tokens.iter().fold(None, |found, (stored, who)| {
            let matches = *stored == hash;
            found.or(matches.then_some(who))
        })
    }
}

/// The token of an `Authorization: Bearer <token>` header value.
fn bearer_token(req: &ServiceRequest) -> Result<&str, WebError> {
    let value = req
        .headers()
        .get(AUTHORIZATION)
        .ok_or(WebError::Unauthorized("missing bearer token"))?
        .to_str()
        .map_err(|_| WebError::Unauthorized("malformed Authorization header"))?;
    // HTTP strips trailing spaces, so `Bearer ` arrives as `Bearer`.
    let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
    // The auth scheme is case-insensitive (RFC 9110, section 11.1).
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(WebError::Unauthorized("expected a Bearer token"));
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(WebError::Unauthorized("missing bearer token"));
    }
    Ok(token)
}

/// Middleware (for `middleware::from_fn`) that lets a request through only
/// with a valid bearer token, and records its [`Principal`] in the request
/// extensions.
pub async fn require_token(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let store = req
        .app_data::<web::Data<TokenStore>>()
        .ok_or(WebError::Misconfigured("no token store"))?;
    let token = bearer_token(&req)?;
    let principal = store
        .authenticate(token)
        .cloned()
        .ok_or(WebError::Unauthorized("unknown or revoked token"))?;
    req.extensions_mut().insert(principal);
    next.call(req).await
}

impl FromRequest for Principal {
    type Error = WebError;
    type Future = Ready<Result<Self, Self::Error>>;

    /// The caller recorded by [`require_token`]; a handler outside the
    /// protected scope gets 401.
    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(
            req.extensions()
                .get::<Principal>()
                .cloned()
                .ok_or(WebError::Unauthorized("missing bearer token")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> TokenStore {
        let mut s = TokenStore::new();
        s.insert(TokenHash::of("s3cret-admin"), "root", Role::Admin);
        s.insert(TokenHash::of("s3cret-viewer"), "dash", Role::Viewer);
        s
    }

    #[test]
    fn authenticates_by_hash() {
        let s = store();
        assert_eq!(
            s.authenticate("s3cret-admin").map(|p| p.role),
            Some(Role::Admin)
        );
        assert_eq!(
            s.authenticate("s3cret-viewer").map(|p| p.name.as_str()),
            Some("dash")
        );
        assert_eq!(s.authenticate("s3cret-admin "), None);
        assert_eq!(s.authenticate(""), None);
        assert_eq!(TokenStore::new().authenticate("s3cret-admin"), None);
    }

    /// Changing the derivation would invalidate every stored token.
    const GOLDEN_S3CRET_ADMIN: &str =
        "e47ba852278f868c42c403f6656bb5e78e1aae0bba46f5e57442c9876b5cf411";

    #[test]
    fn hash_round_trips_through_hex_and_is_pinned() {
        let h = TokenHash::of("s3cret-admin");
        let hex = h.to_hex();
        assert_eq!(hex, GOLDEN_S3CRET_ADMIN);
        assert_eq!(TokenHash::from_hex(&hex), Some(h.clone()));
        assert_eq!(TokenHash::from_hex("zz"), None);
        // Not a plain BLAKE3 of the token: the context separates it.
        assert_ne!(hex, blake3::hash(b"s3cret-admin").to_hex().to_string());
        assert!(!format!("{h:?}").contains(&hex));
    }
}
