//! Who is calling: bearer tokens with roles (docs/api.md, "Auth").
//!
//! With no tokens configured every caller is the actor `local` with every role (and [`crate::serve`]
//! refuses any address but loopback), provided it is the OS user who started the server: a request on a
//! connection [`crate::owner`] attributed to anyone else gets 403 `forbidden` saying why. (A request
//! with no connection verdict — the router called in-process, or served by an embedder's own server —
//! is `local`: there is no peer to check, and the embedder authenticates.) With tokens, every route
//! that takes a [`Caller`] answers 401 to a missing or unknown token before it looks at anything else.
//! Tokens are compared as SHA-256 digests in constant time, so the comparison leaks neither a token's
//! length nor a prefix.

use crate::AppState;
use crate::owner::Verdict;
use crate::problem::{ApiError, ProblemKind};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};
use tollgate_agent_core::Actor;

/// A role a token grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Start runs, read every run, cancel the runs it started.
    Runner,
    /// Decide held calls (and read every run).
    Approver,
    /// Everything, purge and `/metrics` included.
    Admin,
}

impl Role {
    /// The lowercase name used in config.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Runner => "runner",
            Role::Approver => "approver",
            Role::Admin => "admin",
        }
    }
}

/// One configured API token (`[[auth.tokens]]` in docs/configuration.md).
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken {
    /// The actor recorded on the events this token causes.
    pub name: String,
    /// The secret presented as `Authorization: Bearer TOKEN`.
    pub token: String,
    /// What the token may do.
    pub roles: Vec<Role>,
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiToken")
            .field("name", &self.name)
            .field("token", &"<redacted>")
            .field("roles", &self.roles)
            .finish()
    }
}

/// The authenticated caller of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Caller {
    /// The actor name recorded on events.
    pub actor: Actor,
    roles: Vec<Role>,
}

impl Caller {
    /// True when the caller holds `role` (admin holds every role).
    pub(crate) fn has(&self, role: Role) -> bool {
        self.roles.contains(&Role::Admin) || self.roles.contains(&role)
    }

    /// 403 unless the caller holds `role`.
    pub(crate) fn require(&self, role: Role, to: &str) -> Result<(), ApiError> {
        if self.has(role) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!("{} needs the `{}` role to {to}", self.actor, role.as_str())))
        }
    }
}

/// The token table, built once.
pub(crate) struct Auth {
    /// `None`: auth is off (no tokens configured).
    tokens: Option<Vec<([u8; 32], Caller)>>,
}

/// The actor of every request when no tokens are configured.
pub const LOCAL_ACTOR: &str = "local";

impl Auth {
    pub(crate) fn new(tokens: &[ApiToken]) -> Self {
        if tokens.is_empty() {
            return Self { tokens: None };
        }
        // An empty secret never matches anything, but still keeps auth on.
        let table = tokens
            .iter()
            .filter(|t| !t.token.is_empty())
            .map(|t| (digest(&t.token), Caller { actor: Actor::from(&t.name), roles: t.roles.clone() }))
            .collect();
        Self { tokens: Some(table) }
    }

    /// Whether tokens are configured (auth is on).
    pub(crate) fn is_on(&self) -> bool {
        self.tokens.is_some()
    }

    /// Whether `actor` may decide held calls: with auth off, anyone; with auth on, only the name of a
    /// configured token with the `approver` role (or `admin`). A signed link decides as its actor only
    /// while this holds, so taking a person's token away takes their links too.
    pub(crate) fn may_decide(&self, actor: &Actor) -> bool {
        match &self.tokens {
            None => true,
            Some(table) => table.iter().any(|(_, caller)| &caller.actor == actor && caller.has(Role::Approver)),
        }
    }

    /// Whether these headers carry a valid token (always false with auth off: nobody is vouched for).
    pub(crate) fn vouches_for(&self, headers: &HeaderMap) -> bool {
        self.is_on() && self.caller_of(headers).is_ok()
    }

    fn caller(&self, parts: &Parts) -> Result<Caller, ApiError> {
        if !self.is_on()
            && let Some(Verdict::Refused(why)) = parts.extensions.get::<Verdict>()
        {
            return Err(ApiError::forbidden(why.to_string()));
        }
        self.caller_of(&parts.headers)
    }

    fn caller_of(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        let Some(table) = &self.tokens else {
            return Ok(Caller {
                actor: Actor::from(LOCAL_ACTOR),
                roles: vec![Role::Runner, Role::Approver, Role::Admin],
            });
        };
        let unauthorized = |detail: &str| ApiError::new(ProblemKind::Unauthorized, detail);
        let value = headers
            .get(header::AUTHORIZATION)
            .ok_or_else(|| unauthorized("this server requires `Authorization: Bearer TOKEN`"))?;
        let text = value.to_str().map_err(|_| unauthorized("the Authorization header is not valid text"))?;
        let token = text
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .ok_or_else(|| unauthorized("the Authorization header must be `Bearer TOKEN`"))?;
        let presented = digest(token);
        // Look at every entry, so the time taken does not say which one matched.
        let mut found = None;
        for (known, caller) in table {
            if constant_time_eq(known, &presented) && found.is_none() {
                found = Some(caller);
            }
        }
        found.cloned().ok_or_else(|| unauthorized("unknown token"))
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        state.auth.caller(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    fn parts(authorization: Option<&str>) -> Parts {
        let mut builder = Request::builder().uri("/v1/runs");
        if let Some(value) = authorization {
            builder = builder.header(header::AUTHORIZATION, value);
        }
        builder.body(()).map(|r| r.into_parts().0).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn only_an_approver_token_s_name_may_decide_with_auth_on() {
        assert!(Auth::new(&[]).may_decide(&Actor::from("anyone")), "auth off: anyone");
        let token = |name: &str, roles: Vec<Role>| ApiToken { name: name.into(), token: format!("{name}-t"), roles };
        let auth = Auth::new(&[
            token("alice", vec![Role::Runner]),
            token("bob", vec![Role::Approver]),
            token("root", vec![Role::Admin]),
        ]);
        assert!(auth.may_decide(&Actor::from("bob")) && auth.may_decide(&Actor::from("root")));
        assert!(!auth.may_decide(&Actor::from("alice")), "a runner decides nothing");
        assert!(!auth.may_decide(&Actor::from("mallory")), "no such token");
    }

    #[test]
    fn no_tokens_means_local_with_every_role() {
        let auth = Auth::new(&[]);
        let caller = auth.caller(&parts(None)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(caller.actor, "local");
        assert!(caller.has(Role::Admin) && caller.has(Role::Approver) && caller.has(Role::Runner));
    }

    #[test]
    fn without_tokens_a_connection_not_from_the_owner_is_forbidden() {
        let auth = Auth::new(&[]);
        let mut refused = parts(None);
        refused.extensions.insert(Verdict::Refused("this connection is from uid 65534".into()));
        let error = auth.caller(&refused).err().unwrap_or_else(|| panic!("another user is refused"));
        assert_eq!(error.kind, ProblemKind::Forbidden);
        assert!(error.detail.contains("uid 65534"), "{}", error.detail);
        let mut owner = parts(None);
        owner.extensions.insert(Verdict::Owner);
        assert_eq!(auth.caller(&owner).map(|c| c.actor).ok().as_deref(), Some("local"));
    }

    #[test]
    fn tokens_are_matched_exactly_and_roles_apply() {
        let auth = Auth::new(&[
            ApiToken { name: "alice".into(), token: "a-secret".into(), roles: vec![Role::Runner] },
            ApiToken { name: "root".into(), token: "r-secret".into(), roles: vec![Role::Admin] },
            ApiToken { name: "empty".into(), token: String::new(), roles: vec![Role::Admin] },
        ]);
        let alice = auth.caller(&parts(Some("Bearer a-secret"))).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(alice.actor, "alice");
        assert!(alice.has(Role::Runner) && !alice.has(Role::Approver));
        assert!(auth.caller(&parts(Some("bearer r-secret"))).is_ok_and(|c| c.has(Role::Approver)));
        for bad in [None, Some("Bearer a-secre"), Some("Basic a-secret"), Some("a-secret"), Some("Bearer ")] {
            let error = auth.caller(&parts(bad)).err().map(|e| e.kind);
            assert_eq!(error, Some(ProblemKind::Unauthorized), "{bad:?}");
        }
    }

    #[test]
    fn debug_never_prints_a_token() {
        let token = ApiToken { name: "alice".into(), token: "a-secret".into(), roles: vec![] };
        assert!(!format!("{token:?}").contains("a-secret"));
    }
}
