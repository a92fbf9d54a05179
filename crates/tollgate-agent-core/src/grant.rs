//! Grants: standing approvals a person gives for one tool of one agent, limited by an argument pattern
//! and an expiry, stored, revocable, and recorded on every call they let through (V2.md section 1;
//! docs/design.md, "Grants").
//!
//! Where a grant sits at the gate ([`ToolLoop`](crate::ToolLoop) applies it): the tool's own gate, then
//! operator policy (both in [`Tool::gate`](crate::Tool::gate)), then grants. Only a call that asks can be
//! allowed by a grant, and only when its tool says it may be
//! ([`Tool::grantable`](crate::Tool::grantable): a policy rule with `grantable = false` says no); a
//! call the policy forbids is never allowed, and neither is a call in doubt. A grant's `match` judges the
//! arguments as the tool resolves them ([`Tool::policy_paths`](crate::Tool::policy_paths)), exactly as
//! operator policy does, so no spelling of a path (`notes/../x`) passes a grant on `notes/*`.

use crate::run::Millis;
use crate::tool::PolicyPath;
use serde_json::{Map, Value};
use tollgate_agent_protocol::{Actor, Glob, GrantId, GrantScope, MatchError, RunId, check_match};

/// A grant's argument pattern: JSON pointer → a glob over the string there (a string pattern) or a value
/// matched by equality (any other JSON value). Empty: any arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct GrantMatch {
    /// The pattern as given, in its order (its JSON form).
    pattern: Map<String, Value>,
    /// Each pointer with its compiled matcher, in the same order.
    matchers: Vec<(String, Matcher)>,
    /// Each pointer's reference tokens, unescaped once here (`~1` is `/`, `~0` is `~`), so that a gate
    /// checking many grants looks values up without allocating.
    tokens: Vec<Vec<String>>,
}

#[derive(Clone, Debug, PartialEq)]
enum Matcher {
    Glob(Glob),
    Equals(Value),
}

impl GrantMatch {
    /// The pattern `{}`: any arguments.
    pub fn any() -> GrantMatch {
        GrantMatch { pattern: Map::new(), matchers: Vec::new(), tokens: Vec::new() }
    }

    /// Compiles a pattern.
    ///
    /// # Errors
    /// [`MatchError`] when a key is not a JSON pointer (every string is a valid glob).
    pub fn new(pattern: Map<String, Value>) -> Result<GrantMatch, MatchError> {
        check_match(&pattern)?;
        let matchers = pattern
            .iter()
            .map(|(pointer, value)| {
                let matcher = match value {
                    Value::String(glob) => Matcher::Glob(Glob::new(glob)),
                    other => Matcher::Equals(other.clone()),
                };
                (pointer.clone(), matcher)
            })
            .collect();
        let tokens = pattern
            .keys()
            .map(|pointer| {
                pointer.split('/').skip(1).map(|token| token.replace("~1", "/").replace("~0", "~")).collect()
            })
            .collect();
        Ok(GrantMatch { pattern, matchers, tokens })
    }

    /// The pattern's JSON form (what the API shows and the store keeps).
    pub fn pattern(&self) -> &Map<String, Value> {
        &self.pattern
    }

    /// True for `{}`: the grant allows every call of its tool.
    pub fn is_any(&self) -> bool {
        self.matchers.is_empty()
    }

    /// Whether a call with `args` matches, its path arguments judged as the tool resolved them (`paths`,
    /// from [`Tool::policy_paths`](crate::Tool::policy_paths)): a glob on a resolved path reads the
    /// normalised workspace path, never the spelling; any other glob reads the string at its pointer (a
    /// missing or non-string value never matches); an equality reads the value at its pointer.
    pub fn matches(&self, args: &Value, paths: &[PolicyPath]) -> bool {
        self.matchers.iter().zip(&self.tokens).all(|((pointer, matcher), tokens)| {
            if let Some(path) = paths.iter().find(|p| &p.pointer == pointer) {
                return match matcher {
                    Matcher::Glob(glob) => glob.is_match(&path.path),
                    Matcher::Equals(value) => value.as_str() == Some(path.path.as_str()),
                };
            }
            match (matcher, lookup(args, tokens)) {
                (Matcher::Glob(glob), Some(Value::String(text))) => glob.is_match(text),
                (Matcher::Equals(value), Some(found)) => value == found,
                _ => false,
            }
        })
    }
}

/// The value at a JSON pointer given as its unescaped reference tokens (RFC 6901, as
/// `serde_json::Value::pointer` reads it: an array index is decimal digits without a leading zero).
fn lookup<'a>(value: &'a Value, tokens: &[String]) -> Option<&'a Value> {
    tokens.iter().try_fold(value, |target, token| match target {
        Value::Object(fields) => fields.get(token.as_str()),
        Value::Array(items) => {
            let index =
                (token == "0" || !token.starts_with(['0', '+'])).then(|| token.parse::<usize>().ok()).flatten()?;
            items.get(index)
        }
        _ => None,
    })
}

/// A grant as the store keeps it (the wire's [`Grant`](tollgate_agent_protocol::Grant) with times in
/// milliseconds).
#[derive(Clone, Debug, PartialEq)]
pub struct GrantRecord {
    /// Its id.
    pub id: GrantId,
    /// The agent whose calls it allows.
    pub agent: String,
    /// The tool whose calls it allows.
    pub tool: String,
    /// Which calls of the tool.
    pub matcher: GrantMatch,
    /// Every run of the agent, or one run ([`GrantRecord::run_id`]).
    pub scope: GrantScope,
    /// The run, for scope `run`.
    pub run_id: Option<RunId>,
    /// Why it was given.
    pub reason: Option<String>,
    /// Who gave it.
    pub created_by: Actor,
    /// When.
    pub created_at: Millis,
    /// When it stops allowing calls (exclusive).
    pub expires_at: Millis,
    /// When it was revoked, and by whom.
    pub revoked: Option<(Millis, Actor)>,
    /// Calls it allowed since it was made.
    pub uses: u64,
}

/// Where a grant stands at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrantStatus {
    /// It allows calls.
    Active,
    /// Revoked (by a person): it allows nothing more.
    Revoked,
    /// Past its expiry: it allows nothing more.
    Expired,
}

impl GrantStatus {
    /// The status's name: `active`, `revoked` or `expired`.
    pub fn as_str(self) -> &'static str {
        match self {
            GrantStatus::Active => "active",
            GrantStatus::Revoked => "revoked",
            GrantStatus::Expired => "expired",
        }
    }
}

impl std::fmt::Display for GrantStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl GrantRecord {
    /// Its status at `now`: revoked beats expired.
    pub fn status(&self, now: Millis) -> GrantStatus {
        if self.revoked.is_some() {
            GrantStatus::Revoked
        } else if now >= self.expires_at {
            GrantStatus::Expired
        } else {
            GrantStatus::Active
        }
    }

    /// Whether it applies to calls of `agent` in run `run` (its scope), whatever the call.
    pub fn covers(&self, agent: &str, run: &RunId) -> bool {
        self.agent == agent
            && match self.scope {
                GrantScope::Agent => true,
                GrantScope::Run => self.run_id.as_ref() == Some(run),
            }
    }

    /// Whether, active at `now`, it allows a call of `tool` with `args` (paths resolved as `paths`) in run
    /// `run` of `agent`. The gate's other rules (only a call that asks, never one in doubt or whose policy
    /// says `grantable = false`) are the loop's.
    pub fn allows(
        &self,
        agent: &str,
        run: &RunId,
        tool: &str,
        args: &Value,
        paths: &[PolicyPath],
        now: Millis,
    ) -> bool {
        self.status(now) == GrantStatus::Active
            && self.tool == tool
            && self.covers(agent, run)
            && self.matcher.matches(args, paths)
    }
}

/// The first of `grants` (those in force for one run at one gate check, as
/// [`LoopHooks::grants_in_force`](crate::LoopHooks::grants_in_force) reads them, oldest first) whose tool
/// and `match` allow a call of `tool` with `args` (paths resolved as `paths`), if any.
pub fn first_allowing<'g>(
    grants: &'g [GrantRecord],
    tool: &str,
    args: &Value,
    paths: &[PolicyPath],
) -> Option<&'g GrantRecord> {
    grants.iter().find(|grant| grant.tool == tool && grant.matcher.matches(args, paths))
}

/// The suggestion every tool without its own makes: each top-level argument by equality (`{"/to":
/// "bob", "/cents": 100}`), so the grant allows this call again and little else. A string is a glob
/// (V2.md), and the glob language has no escape: a `*` in a value is written `?` (one character), so no
/// value turns into a pattern that matches anything.
pub fn exact_match(args: &Value) -> Map<String, Value> {
    match args {
        Value::Object(fields) => fields
            .iter()
            .map(|(key, value)| {
                let value = match value {
                    Value::String(text) => Value::String(literal_glob(text)),
                    other => other.clone(),
                };
                (format!("/{}", escape(key)), value)
            })
            .collect(),
        _ => Map::new(),
    }
}

/// [`exact_match`] with each path argument written as the tool resolves it (`paths`, from
/// [`Tool::policy_paths`](crate::Tool::policy_paths)): a grant judges the resolved path, so `./a.md`
/// is suggested as `a.md` and the suggestion matches the call it was made for.
pub fn exact_match_resolved(args: &Value, paths: &[PolicyPath]) -> Map<String, Value> {
    let mut pattern = exact_match(args);
    for path in paths {
        pattern.insert(path.pointer.clone(), Value::String(literal_glob(&path.path)));
    }
    pattern
}

/// `text` as a glob that matches it: every `*` written `?`.
fn literal_glob(text: &str) -> String {
    text.replace('*', "?")
}

/// A key as one JSON pointer segment (`~` → `~0`, `/` → `~1`).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// What to list ([`Grants::list_grants`](crate::Grants::list_grants)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GrantQuery {
    /// Only this agent's grants.
    pub agent: Option<String>,
    /// Only this tool's grants.
    pub tool: Option<String>,
    /// Only grants active at this time (`None`: all, active or not).
    pub active_at: Option<Millis>,
    /// At most this many (the store caps it at 1000).
    pub limit: u32,
    /// Continue after this cursor (a previous page's `next_cursor`).
    pub cursor: Option<String>,
}

/// One page of grants, newest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GrantPage {
    /// The grants.
    pub grants: Vec<GrantRecord>,
    /// Where the next page starts, when there is one.
    pub next_cursor: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A pointer is read as `serde_json::Value::pointer` reads it, escapes, array indexes and all.
    #[test]
    fn a_pointer_reads_as_serde_json_reads_it() {
        let args = json!({"a/b": {"m~n": [10, 20, {"": "empty key"}]}, "list": ["x", "y"], "": 1});
        let pointers = [
            "/a~1b/m~0n/1",
            "/a~1b/m~0n/2/",
            "/list/0",
            "/list/1",
            "/list/01",
            "/list/+1",
            "/list/2",
            "/list/-",
            "/",
            "/a~1b/m~0n",
            "/missing/x",
            "/list/0/deeper",
        ];
        for pointer in pointers {
            let tokens: Vec<String> =
                pointer.split('/').skip(1).map(|t| t.replace("~1", "/").replace("~0", "~")).collect();
            assert_eq!(lookup(&args, &tokens), args.pointer(pointer), "{pointer}");
        }
    }

    fn pattern(value: Value) -> GrantMatch {
        match value {
            Value::Object(map) => GrantMatch::new(map).unwrap_or_else(|e| panic!("{e}")),
            other => panic!("not an object: {other}"),
        }
    }

    fn grant(tool: &str, matcher: GrantMatch) -> GrantRecord {
        GrantRecord {
            id: GrantId::from("g1"),
            agent: "notes".into(),
            tool: tool.into(),
            matcher,
            scope: GrantScope::Agent,
            run_id: None,
            reason: None,
            created_by: Actor::from("alice"),
            created_at: 0,
            expires_at: 1_000,
            revoked: None,
            uses: 0,
        }
    }

    fn resolved(path: &str) -> Vec<PolicyPath> {
        vec![PolicyPath { pointer: "/path".into(), path: path.into(), subtree: false }]
    }

    #[test]
    fn a_path_glob_judges_the_resolved_path() {
        let notes = pattern(json!({"/path": "notes/*"}));
        assert!(notes.matches(&json!({"path": "notes/a.md"}), &resolved("notes/a.md")));
        // Spelled inside notes, resolved outside: refused.
        assert!(!notes.matches(&json!({"path": "notes/../x"}), &resolved("x")));
        // Spelled oddly, resolved inside: allowed.
        assert!(notes.matches(&json!({"path": "./notes//a.md"}), &resolved("notes/a.md")));
        assert!(
            !notes.matches(&json!({"path": "notes/deep/a.md"}), &resolved("notes/deep/a.md")),
            "* stays in one segment"
        );
    }

    #[test]
    fn other_values_match_by_glob_or_equality() {
        let pay = pattern(json!({"/to": "bo*", "/cents": 100}));
        assert!(pay.matches(&json!({"to": "bob", "cents": 100}), &[]));
        assert!(!pay.matches(&json!({"to": "bob", "cents": 101}), &[]));
        assert!(!pay.matches(&json!({"to": 7, "cents": 100}), &[]), "a glob reads strings only");
        assert!(!pay.matches(&json!({"cents": 100}), &[]), "missing never matches");
        assert!(GrantMatch::any().matches(&json!({"anything": true}), &[]));
        let argv = pattern(json!({"/argv": ["git", "status"]}));
        assert!(argv.matches(&json!({"argv": ["git", "status"]}), &[]));
        assert!(!argv.matches(&json!({"argv": ["git", "push"]}), &[]));
    }

    #[test]
    fn a_revoked_or_expired_grant_allows_nothing() {
        let run = RunId::from("r1");
        let mut g = grant("fs_write", GrantMatch::any());
        assert!(g.allows("notes", &run, "fs_write", &json!({}), &[], 999));
        assert!(!g.allows("notes", &run, "fs_write", &json!({}), &[], 1_000), "expiry is exclusive");
        assert!(!g.allows("notes", &run, "fs_delete", &json!({}), &[], 0), "another tool");
        assert!(!g.allows("other", &run, "fs_write", &json!({}), &[], 0), "another agent");
        g.revoked = Some((5, Actor::from("bob")));
        assert_eq!(g.status(0), GrantStatus::Revoked);
        assert!(!g.allows("notes", &run, "fs_write", &json!({}), &[], 0));
    }

    #[test]
    fn a_run_scoped_grant_covers_its_run_only() {
        let mut g = grant("fs_write", GrantMatch::any());
        g.scope = GrantScope::Run;
        g.run_id = Some(RunId::from("r1"));
        assert!(g.covers("notes", &RunId::from("r1")));
        assert!(!g.covers("notes", &RunId::from("r2")));
    }

    #[test]
    fn the_exact_suggestion_never_matches_anything_and_judges_resolved_paths() {
        let star = pattern(Value::Object(exact_match(&json!({"q": "*"}))));
        assert!(star.matches(&json!({"q": "*"}), &[]));
        assert!(!star.matches(&json!({"q": "anything"}), &[]), "a * value is not a wildcard");
        let args = json!({"path": "./notes//a.md"});
        let suggested = pattern(Value::Object(exact_match_resolved(&args, &resolved("notes/a.md"))));
        assert!(suggested.matches(&args, &resolved("notes/a.md")), "matches the call it was made for");
    }

    #[test]
    fn the_exact_suggestion_escapes_keys() {
        let suggested = exact_match(&json!({"to": "bob", "a/b": 1, "t~": 2}));
        assert_eq!(Value::Object(suggested), json!({"/to": "bob", "/a~1b": 1, "/t~0": 2}));
        let compiled = pattern(Value::Object(exact_match(&json!({"a/b": 1}))));
        assert!(compiled.matches(&json!({"a/b": 1}), &[]));
    }
}
