//! The grant `match` each built-in tool proposes for a held call (V2.md, "Settled details"): the folder
//! of a write or delete, the exact command, the method and the URL's scheme and host. Each, compiled as a
//! grant's match, matches the call it was proposed for, judged as a grant judges it (paths as the tool
//! resolves them), and no call the tool would run elsewhere.

use proptest::prelude::*;
use serde_json::{Value, json};
use std::sync::Arc;
use tollgate_agent_core::{GrantMatch, Tool};
use tollgate_agent_tools::builtin_tool;

/// A built-in tool over a workspace that need not exist: suggesting and judging read nothing on disk.
fn tool(name: &str) -> Arc<dyn Tool> {
    builtin_tool("/nonexistent-workspace", name).unwrap_or_else(|| panic!("no tool {name}"))
}

fn suggestion(tool: &dyn Tool, args: &Value) -> Value {
    Value::Object(tool.suggested_match(args))
}

/// Whether the grant `match` `pattern` allows a call of `tool` with `args`, as the gate judges it.
fn allows(tool: &dyn Tool, pattern: &Value, args: &Value) -> bool {
    let Value::Object(pattern) = pattern else { panic!("not an object: {pattern}") };
    let compiled = GrantMatch::new(pattern.clone()).unwrap_or_else(|e| panic!("{e}"));
    compiled.matches(args, &tool.policy_paths(args))
}

#[test]
fn a_write_is_remembered_for_its_folder_as_resolved() {
    let write = tool("fs_write");
    let call = |path: &str| json!({"path": path, "content": "x"});
    let cases = [
        ("notes/a.md", "notes/*"),
        ("./notes//a.md", "notes/*"),
        ("x/../notes/a.md", "notes/*"),
        ("notes/sub/deep.md", "notes/sub/*"),
        ("a.md", "*"),
        ("notes/../a.md", "*"),
    ];
    for (path, folder) in cases {
        let suggested = suggestion(write.as_ref(), &call(path));
        assert_eq!(suggested, json!({"/path": folder}), "{path}");
        assert!(allows(write.as_ref(), &suggested, &call(path)), "{path}: the suggestion matches its own call");
    }

    let notes = suggestion(write.as_ref(), &call("notes/a.md"));
    for path in ["notes/b.md", "./notes/b.md", "other/../notes/b.md"] {
        assert!(allows(write.as_ref(), &notes, &call(path)), "{path} is in notes/");
    }
    for path in ["notes/../x", "notes/./../x", "notes/sub/a.md", "notesx/a.md", "x"] {
        assert!(!allows(write.as_ref(), &notes, &call(path)), "{path} is not in notes/");
    }
}

#[test]
fn a_delete_is_remembered_for_its_folder_as_resolved() {
    let delete = tool("fs_delete");
    let call = |path: &str| json!({"path": path});
    for (path, folder) in [("tmp/old.log", "tmp/*"), ("tmp/cache/", "tmp/*"), ("./x/../tmp//a", "tmp/*"), ("old", "*")]
    {
        let suggested = suggestion(delete.as_ref(), &call(path));
        assert_eq!(suggested, json!({"/path": folder}), "{path}");
        assert!(allows(delete.as_ref(), &suggested, &call(path)), "{path}");
    }
    let tmp = suggestion(delete.as_ref(), &call("tmp/old.log"));
    assert!(!allows(delete.as_ref(), &tmp, &call("tmp/../notes")), "tmp/../notes is notes");
    assert!(!allows(delete.as_ref(), &tmp, &call("tmp")), "the folder itself is not in it");
}

#[test]
fn a_folder_the_glob_language_cannot_spell_is_narrowed_to_names_of_its_length() {
    let write = tool("fs_write");
    let call = |path: &str| json!({"path": path, "content": "x"});
    let suggested = suggestion(write.as_ref(), &call("a*b/x.md"));
    assert_eq!(suggested, json!({"/path": "a?b/*"}));
    assert!(allows(write.as_ref(), &suggested, &call("a*b/x.md")));
    assert!(!allows(write.as_ref(), &suggested, &call("a-long-b/x.md")), "a * in a name is not a wildcard");
}

#[test]
fn a_path_outside_the_workspace_gets_the_exact_arguments() {
    let write = tool("fs_write");
    let args = json!({"path": "../x", "content": "y"});
    assert_eq!(suggestion(write.as_ref(), &args), json!({"/path": "../x", "/content": "y"}));
}

#[test]
fn a_command_is_remembered_exactly() {
    let shell = tool("shell");
    let args = json!({"argv": ["git", "status", "--short"], "timeout_secs": 5});
    let suggested = suggestion(shell.as_ref(), &args);
    assert_eq!(suggested, json!({"/argv": ["git", "status", "--short"]}));
    assert!(allows(shell.as_ref(), &suggested, &args));
    assert!(allows(shell.as_ref(), &suggested, &json!({"argv": ["git", "status", "--short"]})), "any timeout");
    for argv in [json!(["git", "status"]), json!(["git", "status", "--short", "x"]), json!(["git", "push"])] {
        assert!(!allows(shell.as_ref(), &suggested, &json!({"argv": argv})), "{argv}");
    }
    let wild = json!({"argv": ["rm", "*"]});
    let suggested = suggestion(shell.as_ref(), &wild);
    assert!(!allows(shell.as_ref(), &suggested, &json!({"argv": ["rm", "x"]})), "an argv is matched by equality");
}

#[test]
fn a_request_is_remembered_for_its_method_scheme_and_host() {
    let http = tool("http_request");
    let call = |method: &str, url: &str| json!({"method": method, "url": url});
    let cases = [
        ("https://example.com/a/b?q=1#top", "https://example.com/**"),
        ("https://example.com", "https://example.com/**"),
        ("http://localhost:8080/v1/items", "http://localhost:8080/**"),
        ("https://example.com:443/x", "https://example.com:443/**"),
        ("http://[::1]:9000/", "http://[::1]:9000/**"),
    ];
    for (url, prefix) in cases {
        let args = call("GET", url);
        let suggested = suggestion(http.as_ref(), &args);
        assert_eq!(suggested, json!({"/method": "GET", "/url": prefix}), "{url}");
        assert!(allows(http.as_ref(), &suggested, &args), "{url}: the suggestion matches its own call");
    }

    let example = suggestion(http.as_ref(), &call("POST", "https://example.com/a"));
    assert!(allows(http.as_ref(), &example, &call("POST", "https://example.com/other/path?x=1")));
    for (method, url) in [
        ("GET", "https://example.com/a"),
        ("POST", "http://example.com/a"),
        ("POST", "https://example.com:8443/a"),
        ("POST", "https://example.com.evil.org/a"),
        ("POST", "https://example.comx/a"),
        ("POST", "https://evil.org/https://example.com/a"),
        ("POST", "https://example.com@evil.org/a"),
    ] {
        assert!(!allows(http.as_ref(), &example, &call(method, url)), "{method} {url}");
    }
}

#[test]
fn a_url_that_cannot_be_judged_by_its_host_gets_the_exact_arguments() {
    let http = tool("http_request");
    for url in [
        "not a url",
        "ftp://example.com/x",
        "https://user:secret@example.com/x",
        "https://example.com@evil.org/x",
        "https://example.com\\evil/x",
        "https://example.com?q=1",
        "https:example.com/x",
    ] {
        let args = json!({"method": "GET", "url": url});
        let suggested = suggestion(http.as_ref(), &args);
        assert_eq!(suggested, json!({"/method": "GET", "/url": url}), "{url}");
    }
}

#[test]
fn other_tools_propose_every_argument_by_equality() {
    let read = tool("fs_read");
    let args = json!({"path": "notes/a.md", "limit": 10});
    assert_eq!(suggestion(read.as_ref(), &args), json!({"/path": "notes/a.md", "/limit": 10}));
    assert_eq!(suggestion(tool("time_now").as_ref(), &json!({})), json!({}));
}

/// A relative path of a few segments, some of them `.`, `..` or empty.
fn spelled_path() -> impl Strategy<Value = String> {
    let segment = prop_oneof![Just("a"), Just("b"), Just("notes"), Just("."), Just(".."), Just(""), Just("x*y")];
    prop::collection::vec(segment, 1..6).prop_map(|segments| segments.join("/"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_file_suggestion_matches_its_own_call(path in spelled_path(), name in prop_oneof![Just("fs_write"), Just("fs_delete")]) {
        let tool = tool(name);
        let args = if name == "fs_write" { json!({"path": path, "content": "x"}) } else { json!({"path": path}) };
        let suggested = suggestion(tool.as_ref(), &args);
        prop_assert!(allows(tool.as_ref(), &suggested, &args), "{} {}: {}", name, path, suggested);
    }
}
