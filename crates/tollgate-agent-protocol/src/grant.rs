//! Grants on the wire (V2.md section 1; docs/api.md, "Grants"): a standing approval of one tool of one
//! agent for calls whose arguments match a pattern, until it expires or is revoked.

use crate::ids::{Actor, GrantId, RunId};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// Which runs a grant applies to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum GrantScope {
    /// Every run of the agent.
    #[default]
    Agent,
    /// Only the run named by the grant's `run_id`.
    Run,
}

impl GrantScope {
    /// The scope's name: `agent` or `run`.
    pub fn as_str(self) -> &'static str {
        match self {
            GrantScope::Agent => "agent",
            GrantScope::Run => "run",
        }
    }

    /// The scope named `text`, if any.
    pub fn parse(text: &str) -> Option<GrantScope> {
        match text {
            "agent" => Some(GrantScope::Agent),
            "run" => Some(GrantScope::Run),
            _ => None,
        }
    }
}

impl std::fmt::Display for GrantScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A grant, as `POST /v1/grants`, `GET /v1/grants` and `DELETE /v1/grants/{id}` answer it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Grant {
    /// The grant's id (a UUIDv7).
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub id: GrantId,
    /// The agent whose calls it allows.
    pub agent: String,
    /// The tool whose calls it allows.
    pub tool: String,
    /// JSON pointer into the arguments → pattern: a string is a glob over the string there (a path of a
    /// workspace tool as resolved), any other value matches by equality; `{}` matches any arguments.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub r#match: Map<String, Value>,
    /// `agent` (every run of the agent) or `run` (only `run_id`).
    pub scope: GrantScope,
    /// The run, for scope `run`; null for scope `agent`.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, required = true))]
    pub run_id: Option<RunId>,
    /// Why it was given, if said.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub reason: Option<String>,
    /// Who gave it.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub created_by: Actor,
    /// When (RFC 3339 UTC).
    pub created_at: String,
    /// When it stops allowing calls (RFC 3339 UTC); always set.
    pub expires_at: String,
    /// When it was revoked (RFC 3339 UTC); null until then.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub revoked_at: Option<String>,
    /// Who revoked it; null until then.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, required = true))]
    pub revoked_by: Option<Actor>,
    /// How many calls it allowed since it was made (the decision that made it is not one).
    pub uses: u64,
    /// With `apply_to_waiting`: the waiting runs it approved, each as a normal decision by its creator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<String>>))]
    pub applied_to: Option<Vec<RunId>>,
}

/// `GET /v1/grants`: a page of grants, newest first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct GrantPage {
    /// The grants.
    pub grants: Vec<Grant>,
    /// Where the next page starts; null on the last one.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub next_cursor: Option<String>,
}

/// `POST /v1/grants`: a grant made directly (not from a decision).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateGrantRequest {
    /// The agent.
    pub agent: String,
    /// The tool.
    pub tool: String,
    /// The pattern (default `{}`: any arguments).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub r#match: Option<Map<String, Value>>,
    /// `agent` (default) or `run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<GrantScope>,
    /// The run, with scope `run` (required there, refused with scope `agent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub run_id: Option<RunId>,
    /// How long it lasts (`30m`, `8h`, `7d`; default `[grants] default_ttl`, at most `max_ttl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
    /// Why, for the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Also approve every waiting run of the agent whose held calls the grant now all allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_to_waiting: Option<bool>,
}

/// `remember` on an `approve` decision: a grant made in the same transaction as the decision.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Remember {
    /// `agent` (default) or `run` (the decided run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<GrantScope>,
    /// The pattern (default: the call's `suggested_match`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub r#match: Option<Map<String, Value>>,
    /// How long it lasts (default `[grants] default_ttl`, at most `max_ttl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
    /// Why, for the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Why a grant `match` is refused: each key must be a JSON pointer (empty, or `/` followed by
/// segments in which `~` is followed by `0` or `1`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{pointer}` in `match` is not a JSON pointer (one is empty or starts with `/`; `~` is written `~0`, `/` inside a key `~1`)"
)]
pub struct MatchError {
    /// The key as given.
    pub pointer: String,
}

/// Checks that every key of a grant `match` is a JSON pointer.
///
/// # Errors
/// [`MatchError`] naming the first key that is not.
pub fn check_match(pattern: &Map<String, Value>) -> Result<(), MatchError> {
    match pattern.keys().find(|key| !is_json_pointer(key)) {
        Some(key) => Err(MatchError { pointer: key.clone() }),
        None => Ok(()),
    }
}

/// True for a JSON pointer (RFC 6901): empty, or `/`-prefixed segments whose `~` escapes are `~0`/`~1`.
pub fn is_json_pointer(text: &str) -> bool {
    if text.is_empty() {
        return true;
    }
    if !text.starts_with('/') {
        return false;
    }
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointers_are_checked() {
        for good in ["", "/path", "/a/b", "/a~1b", "/~0", "/"] {
            assert!(is_json_pointer(good), "{good}");
        }
        for bad in ["path", "/a~", "/a~2", "~0"] {
            assert!(!is_json_pointer(bad), "{bad}");
        }
        let pattern = json!({"/path": "notes/*", "bad": 1});
        let Value::Object(pattern) = pattern else { unreachable!() };
        assert_eq!(check_match(&pattern), Err(MatchError { pointer: "bad".into() }));
    }

    #[test]
    fn a_grant_reads_and_writes_its_json() {
        let text = r#"{"id":"g1","agent":"notes","tool":"fs_write","match":{"/path":"notes/*"},"scope":"agent","run_id":null,"reason":null,"created_by":"alice","created_at":"2026-12-05T08:00:00.000Z","expires_at":"2026-12-05T16:00:00.000Z","revoked_at":null,"revoked_by":null,"uses":0}"#;
        let grant: Grant = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(grant.r#match.get("/path"), Some(&json!("notes/*")));
        assert_eq!(serde_json::to_string(&grant).unwrap_or_default(), text);
    }
}
