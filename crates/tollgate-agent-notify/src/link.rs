//! Signed decision links: a token that lets whoever holds it decide one held call of one turn, as one
//! actor, until it expires — and nothing else.
//!
//! A token is `t1.` + the claims as base64url JSON + `.` + base64url HMAC-SHA256 of everything before the
//! second dot, keyed with `[server] link_secret`. The invariant: [`verify`] returns claims only for a token
//! this secret signed, unchanged to the byte; anything else — a changed, cut, padded or foreign token —
//! is [`LinkError::Tampered`], and a signed token whose time has come is [`LinkError::Expired`]. The MAC is
//! checked before anything in the payload is read, in constant time.
//!
//! A token is not single-use by itself: [`link_id`] names it, the decision it makes records that name, and
//! the server refuses a second use of it.
//!
//! ```
//! use tollgate_agent_notify::link::{LinkAction, LinkClaims, LinkError, sign, verify};
//!
//! let claims = LinkClaims {
//!     run: "0193b0c6-0000-7000-8000-000000000001".into(),
//!     digest: "sha256:ab12".into(),
//!     call: "call_1".into(),
//!     action: LinkAction::Approve,
//!     actor: "alice".into(),
//!     expires_at: 1_700_000_000_000,
//!     notifier: "ops".into(),
//! };
//! let secret = b"a link secret of at least 32 bytes!";
//! let token = sign(secret, &claims);
//! assert_eq!(verify(secret, &token, 1_600_000_000_000), Ok(claims.clone()));
//! assert_eq!(verify(b"another secret of at least 32 bytes", &token, 0), Err(LinkError::Tampered));
//! assert_eq!(verify(secret, &token, 1_700_000_000_000), Err(LinkError::Expired { claims: Box::new(claims) }));
//! ```

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tollgate_agent_core::{Actor, CallId, Millis, RunId};

/// The prefix of every token of this format, and the first part of what its MAC covers.
const PREFIX: &str = "t1.";

/// The longest token [`verify`] reads; a longer one is refused before any decoding.
pub const MAX_TOKEN_LEN: usize = 2048;

/// How long a link lasts when the run has no deadline: seven days from when it is sent.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// The decision a link makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkAction {
    /// Approve the call.
    Approve,
    /// Deny the call; the page asks for the reason.
    Deny,
}

impl LinkAction {
    /// The action as its wire word: `approve` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkAction::Approve => "approve",
            LinkAction::Deny => "deny",
        }
    }
}

impl std::fmt::Display for LinkAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a token binds: one decision on one call of one held turn, by one actor, until a time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkClaims {
    /// The run waiting at the gate.
    pub run: RunId,
    /// The held turn's digest: the link is stale once the run holds another turn.
    pub digest: String,
    /// The held call the link decides.
    pub call: CallId,
    /// Approve or deny.
    pub action: LinkAction,
    /// Whom the decision is recorded as (the notifier's `as`).
    pub actor: Actor,
    /// When the link stops working, in milliseconds since the Unix epoch (the first instant it is expired).
    pub expires_at: Millis,
    /// The `[[notify]]` entry that sent the link.
    pub notifier: String,
}

/// Why a token gives no claims.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// Not a token this secret signed, or not one unchanged: nothing in it can be trusted.
    #[error("the link is not valid")]
    Tampered,
    /// A genuine token past its expiry; its claims name the run so a page can say which.
    #[error("the link expired")]
    Expired {
        /// The token's claims, verified.
        claims: Box<LinkClaims>,
    },
}

/// The claims as they are signed: short keys, in this order.
#[derive(Serialize)]
struct SignedPayload<'a> {
    run: &'a str,
    digest: &'a str,
    call: &'a str,
    action: LinkAction,
    actor: &'a str,
    exp: Millis,
    notifier: &'a str,
}

/// The claims as they are read back; any other shape is a tampered token.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadPayload {
    run: String,
    digest: String,
    call: String,
    action: LinkAction,
    actor: String,
    exp: Millis,
    notifier: String,
}

/// The MAC of `signed` under `secret`, or `None` if HMAC refused the key — which it never does: it takes a
/// key of any length.
fn mac_of(secret: &[u8], signed: &str) -> Option<Hmac<Sha256>> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).ok()?;
    mac.update(signed.as_bytes());
    Some(mac)
}

/// The token for `claims`, signed with `secret`.
pub fn sign(secret: &[u8], claims: &LinkClaims) -> String {
    let payload = SignedPayload {
        run: claims.run.as_str(),
        digest: &claims.digest,
        call: claims.call.as_str(),
        action: claims.action,
        actor: claims.actor.as_str(),
        exp: claims.expires_at,
        notifier: &claims.notifier,
    };
    // Serialising a struct of strings and integers cannot fail; were it to, the empty payload below
    // would only make a token that `verify` refuses.
    let json = serde_json::to_vec(&payload).unwrap_or_default();
    let mut token = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(json));
    // Without a MAC (which cannot happen, see `mac_of`) the token fails closed: verify wants 32 bytes.
    let tag = mac_of(secret, &token).map(|mac| URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())).unwrap_or_default();
    token.push('.');
    token.push_str(&tag);
    token
}

/// The claims of `token` if `secret` signed it and it has not expired at `now` (milliseconds since the
/// Unix epoch): [`LinkError::Expired`] once `now >= expires_at`, checked only after the MAC.
pub fn verify(secret: &[u8], token: &str, now: Millis) -> Result<LinkClaims, LinkError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(LinkError::Tampered);
    }
    let (signed, tag) = token.rsplit_once('.').ok_or(LinkError::Tampered)?;
    let payload = signed.strip_prefix(PREFIX).ok_or(LinkError::Tampered)?;
    if payload.contains('.') {
        return Err(LinkError::Tampered);
    }
    let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| LinkError::Tampered)?;
    let mac = mac_of(secret, signed).ok_or(LinkError::Tampered)?;
    // `verify_slice` compares in constant time and refuses a tag of any other length.
    mac.verify_slice(&tag).map_err(|_| LinkError::Tampered)?;
    let json = URL_SAFE_NO_PAD.decode(payload).map_err(|_| LinkError::Tampered)?;
    let read: ReadPayload = serde_json::from_slice(&json).map_err(|_| LinkError::Tampered)?;
    if [&read.run, &read.digest, &read.call, &read.actor, &read.notifier].iter().any(|field| field.is_empty()) {
        return Err(LinkError::Tampered);
    }
    let claims = LinkClaims {
        run: RunId::new(read.run),
        digest: read.digest,
        call: CallId::new(read.call),
        action: read.action,
        actor: Actor::new(read.actor),
        expires_at: read.exp,
        notifier: read.notifier,
    };
    if now >= claims.expires_at {
        return Err(LinkError::Expired { claims: Box::new(claims) });
    }
    Ok(claims)
}

/// The name of one token, recorded with the decision it makes (`"link": ID`) so a second use is
/// recognised: the first 16 bytes of the SHA-256 of the whole token, as 32 lowercase hex digits.
pub fn link_id(token: &str) -> String {
    hex::encode(&Sha256::digest(token.as_bytes())[..16])
}

/// The page a token opens: `{public_url}/approve/{token}` (a trailing `/` of `public_url` is not doubled).
/// A token's characters are all URL-safe, so it goes in as it is.
pub fn link_url(public_url: &str, token: &str) -> String {
    format!("{}/approve/{token}", public_url.trim_end_matches('/'))
}

/// When a link sent at `sent_at` expires: the run's deadline if it has one, else [`DEFAULT_LIFETIME`]
/// after sending.
pub fn expires_at(sent_at: Millis, deadline: Option<Millis>) -> Millis {
    deadline.unwrap_or_else(|| {
        let lifetime = Millis::try_from(DEFAULT_LIFETIME.as_millis()).unwrap_or(Millis::MAX);
        sent_at.saturating_add(lifetime)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
    const NOW: Millis = 1_750_000_000_000;

    fn claims() -> LinkClaims {
        LinkClaims {
            run: RunId::new("0193b0c6-1f2e-7a3b-8c4d-5e6f70819203"),
            digest: "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
            call: CallId::new("call_Xy12AbCdEf34"),
            action: LinkAction::Deny,
            actor: Actor::new("alice"),
            expires_at: NOW + 60_000,
            notifier: "ops".into(),
        }
    }

    /// `token` with the character at `index` replaced by another base64url character.
    fn flip(token: &str, index: usize) -> String {
        let mut bytes = token.as_bytes().to_vec();
        bytes[index] = if bytes[index] == b'A' { b'B' } else { b'A' };
        String::from_utf8(bytes).unwrap_or_default()
    }

    #[test]
    fn a_signed_token_verifies_to_its_claims() {
        let token = sign(SECRET, &claims());
        assert!(token.starts_with("t1."));
        assert_eq!(verify(SECRET, &token, NOW), Ok(claims()));
        let approve = LinkClaims { action: LinkAction::Approve, ..claims() };
        assert_eq!(verify(SECRET, &sign(SECRET, &approve), NOW), Ok(approve));
    }

    #[test]
    fn the_payload_is_the_designed_json() -> Result<(), Box<dyn std::error::Error>> {
        let token = sign(SECRET, &claims());
        let payload = token.split('.').nth(1).ok_or("no payload")?;
        let json: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload)?)?;
        assert_eq!(
            json,
            serde_json::json!({"run": "0193b0c6-1f2e-7a3b-8c4d-5e6f70819203",
                "digest": claims().digest, "call": "call_Xy12AbCdEf34", "action": "deny", "actor": "alice",
                "exp": NOW + 60_000, "notifier": "ops"})
        );
        Ok(())
    }

    #[test]
    fn a_token_stays_short_enough_for_a_url_and_a_mail() {
        let token = sign(SECRET, &claims());
        assert!(token.len() < 400, "{} bytes", token.len());
        assert!(token.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)), "{token}");
    }

    #[test]
    fn every_changed_byte_of_payload_or_mac_is_tampered() {
        let token = sign(SECRET, &claims());
        for index in PREFIX.len()..token.len() {
            if token.as_bytes()[index] == b'.' {
                continue;
            }
            assert_eq!(verify(SECRET, &flip(&token, index), NOW), Err(LinkError::Tampered), "byte {index}");
        }
    }

    #[test]
    fn anything_but_the_signed_token_is_tampered() {
        let token = sign(SECRET, &claims());
        let foreign = sign(b"another secret, also 32 bytes long", &claims());
        let (signed, tag) = token.rsplit_once('.').unwrap_or_default();
        let over_long = format!("{token}{}", "A".repeat(MAX_TOKEN_LEN));
        let cases = [
            foreign.as_str(),
            &token[..token.len() - 1],
            &token[..token.len() - 10],
            signed,
            &token[PREFIX.len()..],
            "",
            "t1.",
            "t1..",
            "garbage",
            "t1.not base64!.also not",
            &over_long,
            &format!("{token}A"),
            &format!("{token}="),
            &format!("t2.{}", &token[PREFIX.len()..]),
            &format!("{signed}.{tag}.{tag}"),
            &format!("{signed}.{}", &tag[..tag.len() - 2]),
        ];
        for case in cases {
            assert_eq!(verify(SECRET, case, NOW), Err(LinkError::Tampered), "{case:?}");
        }
    }

    #[test]
    fn a_validly_signed_payload_of_another_shape_is_tampered() {
        let shapes = [
            serde_json::json!({"run": "r", "digest": "d", "call": "c", "action": "edit", "actor": "a", "exp": NOW + 1, "notifier": "n"}),
            serde_json::json!({"run": "r", "digest": "d", "call": "c", "action": "approve", "actor": "a", "exp": NOW + 1}),
            serde_json::json!({"run": "r", "digest": "d", "call": "c", "action": "approve", "actor": "a", "exp": NOW + 1, "notifier": "n", "extra": 1}),
            serde_json::json!({"run": "", "digest": "d", "call": "c", "action": "approve", "actor": "a", "exp": NOW + 1, "notifier": "n"}),
            serde_json::json!({"run": "r", "digest": "d", "call": "c", "action": "approve", "actor": "a", "exp": "soon", "notifier": "n"}),
            serde_json::json!(["r", "d"]),
        ];
        for shape in shapes {
            let signed = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(shape.to_string()));
            let tag = mac_of(SECRET, &signed).map(|mac| URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()));
            let token = format!("{signed}.{}", tag.unwrap_or_default());
            assert_eq!(verify(SECRET, &token, NOW), Err(LinkError::Tampered), "{shape}");
        }
    }

    #[test]
    fn a_token_expires_at_its_expiry_and_not_before() {
        let token = sign(SECRET, &claims());
        let expires_at = claims().expires_at;
        assert_eq!(verify(SECRET, &token, expires_at - 1), Ok(claims()));
        assert_eq!(verify(SECRET, &token, expires_at), Err(LinkError::Expired { claims: Box::new(claims()) }));
        assert_eq!(verify(SECRET, &token, expires_at + 1), Err(LinkError::Expired { claims: Box::new(claims()) }));
        // The MAC comes first: an expired token that is also changed is tampered, and says nothing.
        assert_eq!(verify(SECRET, &flip(&token, 10), expires_at + 1), Err(LinkError::Tampered));
    }

    #[test]
    fn link_id_names_one_token() {
        let token = sign(SECRET, &claims());
        let id = link_id(&token);
        assert_eq!(id.len(), 32);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()), "{id}");
        assert_eq!(link_id(&token), id);
        assert_eq!(id, hex::encode(&Sha256::digest(token.as_bytes())[..16]));
        let approve = sign(SECRET, &LinkClaims { action: LinkAction::Approve, ..claims() });
        assert_ne!(link_id(&approve), id);
        let later = sign(SECRET, &LinkClaims { expires_at: claims().expires_at + 1, ..claims() });
        assert_ne!(link_id(&later), id);
    }

    #[test]
    fn link_url_joins_the_public_url_and_the_token() {
        assert_eq!(link_url("https://tollgate.example.com", "t1.a.b"), "https://tollgate.example.com/approve/t1.a.b");
        assert_eq!(link_url("http://127.0.0.1:8080/", "t1.a.b"), "http://127.0.0.1:8080/approve/t1.a.b");
        assert_eq!(link_url("https://example.com/tollgate", "t1.a.b"), "https://example.com/tollgate/approve/t1.a.b");
    }

    #[test]
    fn expiry_is_the_deadline_or_seven_days() {
        assert_eq!(expires_at(NOW, Some(NOW + 5)), NOW + 5);
        assert_eq!(expires_at(NOW, None), NOW + 7 * 24 * 3_600_000);
        assert_eq!(expires_at(Millis::MAX - 1, None), Millis::MAX);
    }
}
