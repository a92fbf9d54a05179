//! Grant suggestions (V2.md, "Settled details"): the narrowest useful `match` a built-in tool proposes
//! when a person approves one of its calls and asks for it to be remembered ([`Tool::suggested_match`]).
//!
//! - `fs_write`, `fs_delete`: the folder of the path as the tool resolves it, the way policy and grants
//!   judge it (`notes/../x` is `x`): `{"/path": "notes/*"}`, `{"/path": "*"}` for a file at the root.
//! - `shell`: the exact `argv`, `{"/argv": ["git", "status"]}`.
//! - `http_request`: the method and every URL of the same scheme and host (its port as given),
//!   `{"/method": "GET", "/url": "https://example.com/**"}`.
//!
//! The promise: a suggestion, compiled as a grant's match, matches the very call it was made for, and
//! never one that the tool would run elsewhere (another folder, another host). Where no suggestion can
//! keep both (arguments that do not parse, a URL with a user name, a spelling the glob language cannot
//! say), the tool proposes the default, every argument by equality ([`exact_match`]).
//!
//! A built-in tool made by [`builtin_tools`](crate::builtin_tools) or
//! [`builtin_tool`](crate::builtin_tool) carries its suggestion ([`Suggesting`]); one made with
//! `into_tool` proposes the default, since a [`TypedTool`] has no suggestion of its own to give.

use serde::Deserialize;
use serde_json::{Map, Value};
use std::sync::Arc;
use tollgate_agent_core::{
    BoxFuture, Gate, GrantMatch, PolicyPath, Preview, Requirement, Tool, ToolContext, ToolError, ToolOutput, Typed,
    TypedTool, exact_match,
};

/// A typed built-in tool's grant suggestion for its parsed arguments.
pub(crate) trait SuggestsMatch: TypedTool {
    /// The suggestion for a call with `args`; `None` for the default (every argument by equality).
    fn suggest(&self, args: &Self::Args) -> Option<Map<String, Value>>;
}

/// A typed built-in tool as a [`Tool`] that proposes its own grant match, and is otherwise the tool
/// exactly as [`Typed`] makes it.
pub(crate) struct Suggesting<T: TypedTool>(Typed<T>);

impl<T: SuggestsMatch + 'static> Suggesting<T> {
    /// The tool, shared, with its suggestion.
    pub(crate) fn tool(tool: T) -> Arc<dyn Tool> {
        Arc::new(Suggesting(Typed::new(tool)))
    }
}

impl<T: SuggestsMatch> Tool for Suggesting<T> {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn description(&self) -> &str {
        self.0.description()
    }

    fn parameters(&self) -> &Value {
        self.0.parameters()
    }

    fn validate<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Result<(), String>> {
        self.0.validate(args)
    }

    fn gate(&self, args: &Value) -> Gate {
        self.0.gate(args)
    }

    fn requirement(&self, args: &Value) -> Requirement {
        self.0.requirement(args)
    }

    fn preview<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Option<String>> {
        self.0.preview(args)
    }

    fn observed_preview<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Option<Preview>> {
        self.0.observed_preview(args)
    }

    fn policy_paths(&self, args: &Value) -> Vec<PolicyPath> {
        self.0.policy_paths(args)
    }

    fn grantable(&self, args: &Value) -> bool {
        self.0.grantable(args)
    }

    fn refuses_grants(&self) -> bool {
        self.0.refuses_grants()
    }

    /// The tool's suggestion, kept only when it matches this very call (paths judged as the tool resolves
    /// them); else the default.
    fn suggested_match(&self, args: &Value) -> Map<String, Value> {
        let suggested = T::Args::deserialize(args).ok().and_then(|parsed| self.0.inner().suggest(&parsed));
        let fits = |pattern: &Map<String, Value>| {
            GrantMatch::new(pattern.clone()).is_ok_and(|compiled| compiled.matches(args, &self.policy_paths(args)))
        };
        suggested.filter(fits).unwrap_or_else(|| exact_match(args))
    }

    fn call<'a>(&'a self, args: Value, ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        self.0.call(args, ctx)
    }
}

/// `{"/path": "DIR/*"}` for the first path of `paths` at `/path` (as the tool resolved it), `"*"` for one
/// at the root; `None` when there is none (a path that escapes the workspace).
pub(crate) fn same_folder(paths: &[PolicyPath]) -> Option<Map<String, Value>> {
    let path = paths.iter().find(|p| p.pointer == "/path")?;
    let pattern = match path.path.rsplit_once('/') {
        Some((folder, _)) => format!("{}/*", at_least(folder)),
        None => "*".to_owned(),
    };
    Some(Map::from_iter([("/path".to_owned(), Value::String(pattern))]))
}

/// A glob that matches `text`: the language has no escapes, so `*` and `?` become `?` (one character
/// other than `/`), which matches them and only names of the same length around them.
fn at_least(text: &str) -> String {
    text.replace(['*', '?'], "?")
}

/// A map of one pointer to one value.
pub(crate) fn one(pointer: &str, value: Value) -> Map<String, Value> {
    Map::from_iter([(pointer.to_owned(), value)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(path: &str) -> Vec<PolicyPath> {
        vec![PolicyPath { pointer: "/path".into(), path: path.into(), subtree: false }]
    }

    #[test]
    fn the_folder_of_the_resolved_path() {
        let pattern = |path: &str| same_folder(&resolved(path)).map(Value::Object);
        assert_eq!(pattern("notes/a.md"), Some(serde_json::json!({"/path": "notes/*"})));
        assert_eq!(pattern("a/b/c.md"), Some(serde_json::json!({"/path": "a/b/*"})));
        assert_eq!(pattern("a.md"), Some(serde_json::json!({"/path": "*"})));
        assert_eq!(pattern("we*rd?/a.md"), Some(serde_json::json!({"/path": "we?rd?/*"})));
        assert_eq!(same_folder(&[]), None);
    }
}
