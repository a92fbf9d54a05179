//! The built-in tools' argument schemas, now derived from their argument types, are exactly the schemas
//! they had when they were written by hand: a suspension pins each tool's schema hash (sha256 of the
//! schema's canonical JSON), and a run stored by an older version resumes only if the hash still matches.
//!
//! The literals below are copied verbatim from the hand-written schemas (git history of `src/fs.rs`,
//! `search.rs`, `shell.rs`, `time.rs`, `http.rs`), with the constants they named written as values:
//! `DEFAULT_MAX_RESULTS` = 100, `MAX_TIMEOUT_SECS` = 600, `DEFAULT_TIMEOUT_SECS` = 30, `METHODS` = the six
//! methods. The hashes are the ones those schemas had (`fs_list`'s and `fs_write`'s are also in the frozen
//! v1 suspension, `fixtures/v1/suspension.json`).

use crate::support::Fixture;
use serde_json::{Value, json};
use tollgate_agent_core::canonical::canonical_sha256;
use tollgate_agent_core::{Gate, ToolContext};
use tollgate_agent_tools::BUILTIN_TOOL_NAMES;

/// Each built-in's hand-written schema and the hash a suspension pinned for it.
fn hand_written() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        (
            "fs_list",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Folder to list, relative to the workspace root.", "default": "."}
                },
                "additionalProperties": false
            }),
            "sha256:d704af9c825b2426f46859a4f305969a6957e3c26df69ccb661f84a34c6affc2",
        ),
        (
            "fs_read",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File to read, relative to the workspace root."},
                    "offset": {"type": "integer", "minimum": 0, "description": "Lines to skip from the start (0 = from the first line)."},
                    "limit": {"type": "integer", "minimum": 1, "description": "At most this many lines."}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
            "sha256:8ed940ec1b86a2e6648ef1658e4ec369e2c56cd37dd67ad5e13a38336f42379b",
        ),
        (
            "fs_search",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression (Rust `regex` syntax) matched against each line."},
                    "path": {"type": "string", "description": "File or folder to search, relative to the workspace root.", "default": "."},
                    "max_results": {"type": "integer", "minimum": 1, "default": 100, "description": "At most this many matching lines (values above 1000 count as 1000)."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
            "sha256:3183c45538bb46fb157211cdea6c048084f92492c5052dddedfeb2ba8968860f",
        ),
        (
            "time_now",
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
            "sha256:99334726611ccf58a148b0814696bfa6fe08c1b2d027e946beccf5a74331c9aa",
        ),
        (
            "fs_write",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File to write, relative to the workspace root."},
                    "content": {"type": "string", "description": "The whole new content of the file."}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
            "sha256:57bc5dcd57d388892016a02dd76236d385c669257757fd6d8607b22501a99f19",
        ),
        (
            "fs_delete",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File or folder to delete, relative to the workspace root."}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
            "sha256:98be0a1f0b653e7e866d1c3924cbce6df0e2e2a381ae7f053e7efa0efb9186f1",
        ),
        (
            "shell",
            json!({
                "type": "object",
                "properties": {
                    "argv": {
                        "type": "array",
                        "items": {"type": "string"},
                        "minItems": 1,
                        "description": "The program and its arguments, passed as they are (no shell: no globs, variables, pipes or redirections). A program name without `/` is looked up on PATH; with `/` it is a path in the workspace."
                    },
                    "timeout_secs": {"type": "integer", "minimum": 1, "maximum": 600, "default": 30, "description": "Seconds before the program is killed."}
                },
                "required": ["argv"],
                "additionalProperties": false
            }),
            "sha256:56b36bc4dc7940b2cae998ce6f7bc264654ee0f301e668c1fba8c951243c1e38",
        ),
        (
            "http_request",
            json!({
                "type": "object",
                "properties": {
                    "method": {"type": "string", "enum": ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"], "description": "The HTTP method."},
                    "url": {"type": "string", "description": "An absolute http:// or https:// URL."},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Request headers, name to value."},
                    "body": {"type": "string", "description": "The request body, sent as given."}
                },
                "required": ["method", "url"],
                "additionalProperties": false
            }),
            "sha256:df83c0cdabaa66179d6dcbc25da79e1efc7e4e45db2ba32416be69e092a4e18f",
        ),
    ]
}

#[test]
fn derived_schemas_equal_the_hand_written_ones() {
    let fx = Fixture::new();
    let registry = fx.registry();
    let expected = hand_written();
    let names: Vec<&str> = expected.iter().map(|(name, ..)| *name).collect();
    assert_eq!(names, BUILTIN_TOOL_NAMES, "every built-in is covered");
    for (name, schema, hash) in expected {
        let tool = fx.tool(name);
        assert_eq!(tool.parameters(), &schema, "{name}: derived schema");
        let pinned = format!("sha256:{}", canonical_sha256(&schema));
        assert_eq!(pinned, hash, "{name}: the hash of the hand-written schema");
        let registered = registry.get(name).map(|t| t.schema_hash().to_owned());
        assert_eq!(registered.as_deref(), Some(hash), "{name}: the hash a suspension pins");
    }
}

/// What a listing shows of each built-in (`tollgate tools`, the runtime's catalog, a policy's
/// explanation): its description, and its gate for the empty arguments `{}`, which most built-ins cannot
/// even read (a typed tool answers its declared gate for those).
#[test]
fn listings_show_the_same_gates_and_descriptions() {
    let fx = Fixture::new();
    let listed = [
        (
            "fs_list",
            Gate::Allow,
            "List the entries of a folder in the workspace, sorted; folders end with `/`, symlinks with `@`.",
        ),
        (
            "fs_read",
            Gate::Allow,
            "Read a text file in the workspace, whole or from line `offset` (lines to skip) for `limit` lines.",
        ),
        (
            "fs_search",
            Gate::Allow,
            "Search the text files under a workspace path for lines matching a regular expression; returns `path:line: text` lines.",
        ),
        ("time_now", Gate::Allow, "The current date and time in UTC, RFC 3339 (e.g. 2025-01-31T09:30:00.000Z)."),
        (
            "fs_write",
            Gate::Ask,
            "Create or replace a file in the workspace with the given content (folders are created as needed).",
        ),
        ("fs_delete", Gate::Ask, "Delete a file or a folder (with everything in it) in the workspace."),
        (
            "shell",
            Gate::Ask,
            "Run a program with arguments (no shell expansion) in the workspace root; returns the exit code, stdout and stderr. The program may be sandboxed: writes outside the workspace and $TMPDIR, reads of /proc and private files, and network access can be denied.",
        ),
        (
            "http_request",
            Gate::Ask,
            "Send an HTTP(S) request (GET, POST, PUT, PATCH, DELETE or HEAD) and return the status, main headers and body (redirects are not followed).",
        ),
    ];
    for (name, gate, description) in listed {
        let tool = fx.tool(name);
        assert_eq!(tool.gate(&json!({}), &ToolContext::listing()), gate, "{name}");
        assert_eq!(tool.description(), description, "{name}");
    }
}
