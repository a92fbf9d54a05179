//! The built-in file tools through the `Tool` port: normal use, bad arguments, workspace escapes, symlinks
//! planted inside the workspace (never followed) and the previews an approver reads.

use crate::support::{Fixture, call};
use serde_json::{Value, json};
use tollgate_agent_core::{Gate, ToolContext, ToolOutput};

#[test]
fn builtins_register_with_their_gates_and_schemas() {
    let fx = Fixture::new();
    let registry = fx.registry();
    let names: Vec<String> = registry.specs().into_iter().map(|s| s.name).collect();
    assert_eq!(names, tollgate_agent_tools::BUILTIN_TOOL_NAMES);
    let gate = |name: &str, args: Value| fx.tool(name).gate(&args, &ToolContext::listing());
    assert_eq!(gate("fs_list", json!({})), Gate::Allow);
    assert_eq!(gate("fs_read", json!({"path": "a"})), Gate::Allow);
    assert_eq!(gate("fs_write", json!({"path": "a", "content": ""})), Gate::Ask);
    assert_eq!(gate("fs_delete", json!({"path": "a"})), Gate::Ask);
    assert_eq!(gate("fs_search", json!({"pattern": "a"})), Gate::Allow);
    assert_eq!(gate("time_now", json!({})), Gate::Allow);
    assert_eq!(gate("shell", json!({"argv": ["ls"]})), Gate::Ask);
    assert_eq!(gate("http_request", json!({"method": "GET", "url": "http://127.0.0.1/"})), Gate::Ask);
    assert!(tollgate_agent_tools::builtin_tool(&fx.root, "fs_move").is_none());
    for spec in registry.specs() {
        assert_eq!(spec.parameters["additionalProperties"], json!(false), "{}", spec.name);
    }
}

#[tokio::test]
async fn schemas_reject_missing_wrong_and_unknown_arguments() {
    let fx = Fixture::new();
    let registry = fx.registry();
    let check = |name: &str, args: Value| registry.get(name).map(|t| t.check_arguments(&args).is_ok());
    assert_eq!(check("fs_list", json!({})), Some(true));
    assert_eq!(check("fs_list", json!({"path": 3})), Some(false));
    assert_eq!(check("fs_read", json!({})), Some(false), "path is required");
    assert_eq!(check("fs_read", json!({"path": "a", "offset": -1})), Some(false));
    assert_eq!(check("fs_read", json!({"path": "a", "limit": 0})), Some(false));
    assert_eq!(check("fs_write", json!({"path": "a"})), Some(false), "content is required");
    assert_eq!(check("fs_write", json!({"path": "a", "content": "x", "mode": "append"})), Some(false));
    assert_eq!(check("fs_delete", json!({"path": "a", "recursive": true})), Some(false));
    // validate repeats the shape check, so a tool used without a registry refuses bad arguments too.
    assert!(fx.tool("fs_write").validate(&json!({"path": "a"})).await.is_err());
}

#[tokio::test]
async fn list_sorts_and_marks_folders() {
    let fx = Fixture::new();
    fx.put("b.txt", "b");
    fx.put("a.txt", "a");
    fx.put("docs/readme.md", "r");
    let out = call(&fx.tool("fs_list"), json!({})).await;
    assert_eq!(out, ToolOutput::text("a.txt\nb.txt\ndocs/"));
    let out = call(&fx.tool("fs_list"), json!({"path": "docs"})).await;
    assert_eq!(out, ToolOutput::text("readme.md"));
    let out = call(&fx.tool("fs_list"), json!({"path": "nope"})).await;
    assert!(out.is_error && out.content.contains("nope"), "{out:?}");
    std::fs::create_dir_all(fx.root.join("empty")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(call(&fx.tool("fs_list"), json!({"path": "empty"})).await, ToolOutput::text("`empty` is empty"));
    let out = call(&fx.tool("fs_list"), json!({"path": "a.txt"})).await;
    assert_eq!(out, ToolOutput::error("`a.txt` is a file, not a folder; use fs_read"));
}

#[tokio::test]
async fn list_marks_symlinks_without_following_them() {
    let fx = Fixture::new();
    fx.put("docs/readme.md", "r");
    fx.plant_link("docs-link", &fx.root.join("docs"));
    fx.plant_link("exit", &fx.outside);
    let out = call(&fx.tool("fs_list"), json!({})).await;
    assert_eq!(out, ToolOutput::text("docs/\ndocs-link@\nexit@"));
}

#[tokio::test]
async fn read_whole_and_by_lines() {
    let fx = Fixture::new();
    fx.put("lines.txt", "one\ntwo\nthree\nfour\n");
    let read = fx.tool("fs_read");
    assert_eq!(call(&read, json!({"path": "lines.txt"})).await, ToolOutput::text("one\ntwo\nthree\nfour\n"));
    assert_eq!(
        call(&read, json!({"path": "lines.txt", "offset": 1, "limit": 2})).await,
        ToolOutput::text("two\nthree\n[lines 2-3, more follow]")
    );
    assert_eq!(
        call(&read, json!({"path": "lines.txt", "offset": 3})).await,
        ToolOutput::text("four\n[lines 4-4, end of file]")
    );
    let past = call(&read, json!({"path": "lines.txt", "offset": 9})).await;
    assert!(past.content.contains("has 4 line(s)"), "{past:?}");
    let missing = call(&read, json!({"path": "missing.txt"})).await;
    assert!(missing.is_error && missing.content.contains("missing.txt"), "{missing:?}");
    let folder = call(&read, json!({"path": "."})).await;
    assert!(folder.is_error && folder.content.contains("fs_list"), "{folder:?}");
}

#[tokio::test]
async fn write_creates_folders_and_replaces() {
    let fx = Fixture::new();
    let write = fx.tool("fs_write");
    let args = json!({"path": "notes/today/note.txt", "content": "hello"});
    assert_eq!(write.validate(&args).await, Ok(()));
    assert_eq!(write.preview(&args).await.as_deref(), Some("create notes/today/note.txt (5 bytes)"));
    assert_eq!(call(&write, args).await, ToolOutput::text("created notes/today/note.txt (5 bytes)"));
    assert_eq!(fx.read("notes/today/note.txt").as_deref(), Some("hello"));

    let again = json!({"path": "notes/today/note.txt", "content": "hello\nworld\n"});
    assert_eq!(call(&write, again).await, ToolOutput::text("replaced notes/today/note.txt (12 bytes)"));
    assert_eq!(fx.read("notes/today/note.txt").as_deref(), Some("hello\nworld\n"));

    let onto_folder = json!({"path": "notes", "content": "x"});
    assert!(write.validate(&onto_folder).await.is_err_and(|e| e.contains("is a folder")));
}

#[tokio::test]
async fn write_preview_is_a_unified_diff() {
    let fx = Fixture::new();
    fx.put("poem.txt", "roses are red\nviolets are blue\nsugar is sweet\n");
    let write = fx.tool("fs_write");
    let args = json!({"path": "./poem.txt", "content": "roses are red\nviolets are violet\nsugar is sweet\n"});
    let preview = write.preview(&args).await.unwrap_or_default();
    assert_eq!(
        preview,
        "--- a/poem.txt\n+++ b/poem.txt\n@@ -1,3 +1,3 @@\n roses are red\n-violets are blue\n+violets are violet\n sugar is sweet\n"
    );
    let same = json!({"path": "poem.txt", "content": "roses are red\nviolets are blue\nsugar is sweet\n"});
    assert!(write.preview(&same).await.unwrap_or_default().starts_with("no change"));
}

#[tokio::test]
async fn write_preview_summarises_big_and_binary_files() {
    let fx = Fixture::new();
    let big: String = (0..200_000).map(|i| format!("line {i}\n")).collect();
    fx.put("big.txt", &big);
    let preview = fx.tool("fs_write").preview(&json!({"path": "big.txt", "content": "tiny"})).await.unwrap_or_default();
    assert_eq!(preview, format!("replace big.txt: {} bytes with 4 bytes", big.len()));
    std::fs::write(fx.root.join("blob.bin"), [0xff, 0xfe, 0x00]).unwrap_or_else(|e| panic!("{e}"));
    let preview =
        fx.tool("fs_write").preview(&json!({"path": "blob.bin", "content": "text"})).await.unwrap_or_default();
    assert_eq!(preview, "replace blob.bin: 3 bytes with 4 bytes");
}

#[tokio::test]
async fn delete_previews_and_removes() {
    let fx = Fixture::new();
    fx.put("old.txt", "12345");
    fx.put("drafts/a.txt", "aa");
    fx.put("drafts/deeper/b.txt", "bbb");
    let delete = fx.tool("fs_delete");

    assert_eq!(delete.preview(&json!({"path": "old.txt"})).await.as_deref(), Some("delete old.txt (5 bytes)"));
    assert_eq!(
        delete.preview(&json!({"path": "drafts"})).await.as_deref(),
        Some(
            "delete the folder drafts/ and everything in it: 2 file(s), 1 folder(s), 5 bytes\n  drafts/a.txt (2 bytes)\n  drafts/deeper/\n  drafts/deeper/b.txt (3 bytes)"
        )
    );
    assert_eq!(
        delete.preview(&json!({"path": "ghost.txt"})).await.as_deref(),
        Some("nothing to delete: ghost.txt does not exist")
    );

    assert_eq!(call(&delete, json!({"path": "old.txt"})).await, ToolOutput::text("deleted old.txt"));
    assert!(!fx.root.join("old.txt").exists());
    assert_eq!(call(&delete, json!({"path": "drafts"})).await, ToolOutput::text("deleted the folder drafts/"));
    assert!(!fx.root.join("drafts").exists());
    assert!(call(&delete, json!({"path": "ghost.txt"})).await.is_error);
    assert!(delete.validate(&json!({"path": "."})).await.is_err_and(|e| e.contains("workspace root")));
    assert!(fx.root.exists());
}

#[tokio::test]
async fn delete_of_an_inner_symlink_removes_the_link_only() {
    let fx = Fixture::new();
    fx.put("real.txt", "keep me");
    fx.plant_link("alias.txt", &fx.root.join("real.txt"));
    let delete = fx.tool("fs_delete");
    assert_eq!(
        delete.preview(&json!({"path": "alias.txt"})).await.as_deref(),
        Some("delete the symlink alias.txt (not what it points to)")
    );
    assert_eq!(call(&delete, json!({"path": "alias.txt"})).await, ToolOutput::text("deleted alias.txt"));
    assert_eq!(fx.read("real.txt").as_deref(), Some("keep me"));
}

#[tokio::test]
async fn escapes_are_refused_by_every_tool() {
    let fx = Fixture::new();
    let cases: [(&str, Value); 8] = [
        ("fs_list", json!({"path": ".."})),
        ("fs_list", json!({"path": "/"})),
        ("fs_read", json!({"path": "../outside/secret.txt"})),
        ("fs_read", json!({"path": "/etc/passwd"})),
        ("fs_write", json!({"path": "a/../../evil.txt", "content": "x"})),
        ("fs_write", json!({"path": fx.root.join("abs.txt").display().to_string(), "content": "x"})),
        ("fs_delete", json!({"path": "../outside/secret.txt"})),
        ("fs_delete", json!({"path": "sub/../.."})),
    ];
    for (name, args) in cases {
        let tool = fx.tool(name);
        let refused = tool.validate(&args).await;
        assert!(refused.as_ref().is_err_and(|e| e.contains("escapes the workspace")), "{name} {args}: {refused:?}");
        let out = call(&tool, args.clone()).await;
        assert!(out.is_error && out.content.contains("escapes the workspace"), "{name} {args}: {out:?}");
    }
    assert!(!fx.root.join("abs.txt").exists());
    assert!(!fx.root.parent().map(|p| p.join("evil.txt").exists()).unwrap_or(true));
    assert!(fx.outside.join("secret.txt").exists());
}

#[tokio::test]
async fn a_symlink_planted_in_the_workspace_is_never_followed() {
    let fx = Fixture::new();
    fx.put("notes/plan.txt", "inside");
    fx.plant_link("exit", &fx.outside);
    fx.plant_link("secret-link.txt", &fx.outside.join("secret.txt"));
    fx.plant_link("fresh.txt", &fx.outside.join("not-yet.txt"));
    // A link that stays inside is refused as well: the rule is about links, not where they point.
    fx.plant_link("alias", &fx.root.join("notes"));
    let cases: [(&str, Value); 10] = [
        ("fs_list", json!({"path": "exit"})),
        ("fs_list", json!({"path": "alias"})),
        ("fs_read", json!({"path": "exit/secret.txt"})),
        ("fs_read", json!({"path": "secret-link.txt"})),
        ("fs_read", json!({"path": "alias/plan.txt"})),
        ("fs_write", json!({"path": "exit/planted.txt", "content": "x"})),
        ("fs_write", json!({"path": "secret-link.txt", "content": "overwritten"})),
        // A dangling link would create the file outside when written through.
        ("fs_write", json!({"path": "fresh.txt", "content": "x"})),
        ("fs_write", json!({"path": "alias/plan.txt", "content": "x"})),
        ("fs_delete", json!({"path": "exit/secret.txt"})),
    ];
    for (name, args) in cases {
        let tool = fx.tool(name);
        let refused = tool.validate(&args).await;
        assert!(refused.as_ref().is_err_and(|e| e.contains("never follow a symlink")), "{name} {args}: {refused:?}");
        assert_eq!(tool.preview(&args).await, None, "{name} {args}: no preview of what cannot run");
        let out = call(&tool, args.clone()).await;
        assert!(out.is_error && out.content.contains("never follow a symlink"), "{name} {args}: {out:?}");
    }
    assert_eq!(std::fs::read_to_string(fx.outside.join("secret.txt")).ok().as_deref(), Some("top secret\n"));
    assert!(!fx.outside.join("planted.txt").exists());
    assert!(!fx.outside.join("not-yet.txt").exists());
    assert_eq!(fx.read("notes/plan.txt").as_deref(), Some("inside"));
    // The links themselves are left alone.
    assert!(fx.root.join("secret-link.txt").symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()));
}

#[tokio::test]
async fn a_symlink_planted_after_approval_is_caught_when_the_call_runs() {
    let fx = Fixture::new();
    let write = fx.tool("fs_write");
    let args = json!({"path": "later/note.txt", "content": "x"});
    assert_eq!(write.validate(&args).await, Ok(()));
    // While the call waits for a person, someone replaces the folder with a link pointing out.
    fx.plant_link("later", &fx.outside);
    let out = call(&write, args).await;
    assert!(out.is_error && out.content.contains("passes through a symlink (`later`)"), "{out:?}");
    assert!(!fx.outside.join("note.txt").exists());
}
