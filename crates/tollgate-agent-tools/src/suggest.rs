//! Grant suggestions (V2.md, "Settled details"): the narrowest useful `match` a built-in tool proposes
//! when a person approves one of its calls and asks for it to be remembered ([`Tool::suggested_match`](tollgate_agent_core::Tool::suggested_match)).
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
//! say), the tool proposes the default, every argument by equality ([`exact_match_resolved`](tollgate_agent_core::exact_match_resolved)).
//!
//! Each tool gives it as its [`TypedTool::suggested_match`](tollgate_agent_core::TypedTool::suggested_match); [`Typed`](tollgate_agent_core::Typed) keeps
//! it only when it matches the call it was made for, else proposes the default.

use serde_json::{Map, Value};
use tollgate_agent_core::PolicyPath;

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
