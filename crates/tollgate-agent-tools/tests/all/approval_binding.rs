//! An approval is bound to what its preview saw: a file replaced, grown, rewritten or created between the
//! preview of `fs_write` / `fs_delete` and the approved call is left as it is, and the call's error result
//! says what changed. Each test previews as the loop does (`observed_preview`), changes the disk as
//! another process would, then calls with the observation the approved call gets.

use crate::support::{Fixture, snapshot};
use serde_json::{Value, json};
use std::sync::Arc;
use tollgate_agent_core::{Tool, ToolContext, ToolOutput};

/// Previews `args`, returning the text and the observation.
async fn preview(tool: &Arc<dyn Tool>, args: &Value) -> (String, Option<Value>) {
    let preview = tool.observed_preview(args).await.unwrap_or_else(|| panic!("no preview of {args}"));
    (preview.text, preview.observed)
}

/// Calls `tool` as an approval of a preview that observed `observed`.
async fn call_approved(tool: &Arc<dyn Tool>, args: Value, observed: Option<Value>) -> ToolOutput {
    let ctx = ToolContext::new("run-1", "call_1").with_observed(observed);
    tool.call(args, ctx).await.unwrap_or_else(|e| panic!("tool failed internally: {e}"))
}

#[tokio::test]
async fn a_file_replaced_by_a_folder_after_the_delete_preview_is_not_deleted() {
    let fx = Fixture::new();
    fx.put("old.log", "13 bytes here");
    let delete = fx.tool("fs_delete");
    let args = json!({"path": "old.log"});
    let (text, observed) = preview(&delete, &args).await;
    assert_eq!(text, "delete old.log (13 bytes)");
    assert!(observed.is_some());

    std::fs::remove_file(fx.root.join("old.log")).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..200 {
        fx.put(&format!("old.log/f{i:03}.txt"), "precious");
    }
    let before = snapshot(&fx.root);
    let out = call_approved(&delete, args, observed).await;
    assert_eq!(
        out,
        ToolOutput::error(
            "not deleted: `old.log` changed since the preview: it was a file of 13 bytes, it is now a folder of 200 entries"
        )
    );
    assert_eq!(snapshot(&fx.root), before, "nothing was deleted");
}

#[tokio::test]
async fn a_folder_that_changed_after_the_delete_preview_is_not_deleted() {
    let fx = Fixture::new();
    fx.put("drafts/a.txt", "aa");
    let delete = fx.tool("fs_delete");
    let args = json!({"path": "drafts"});
    let (text, observed) = preview(&delete, &args).await;
    assert!(text.starts_with("delete the folder drafts/ and everything in it: 1 file(s)"), "{text}");

    fx.put("drafts/deeper/new.txt", "written after the preview");
    let out = call_approved(&delete, args.clone(), observed.clone()).await;
    assert_eq!(
        out,
        ToolOutput::error(
            "not deleted: `drafts` changed since the preview: it was a folder of 1 entries, it is now a folder of 3 entries"
        )
    );
    assert_eq!(fx.read("drafts/deeper/new.txt").as_deref(), Some("written after the preview"));

    // The same count, other bytes: still a change.
    std::fs::remove_dir_all(fx.root.join("drafts/deeper")).unwrap_or_else(|e| panic!("{e}"));
    fx.put("drafts/a.txt", "longer than before");
    let out = call_approved(&delete, args, observed).await;
    assert!(
        out.is_error && out.content.ends_with("what is in it changed (it is still a folder of 1 entries)"),
        "{out:?}"
    );
    assert!(fx.root.join("drafts/a.txt").exists());
}

#[tokio::test]
async fn lines_appended_after_the_write_preview_are_not_overwritten() {
    let fx = Fixture::new();
    fx.put("notes.txt", "one\n");
    let write = fx.tool("fs_write");
    let args = json!({"path": "notes.txt", "content": "one\ntwo\n"});
    let (text, observed) = preview(&write, &args).await;
    assert!(text.contains("+two"), "{text}");

    let mut file =
        std::fs::OpenOptions::new().append(true).open(fx.root.join("notes.txt")).unwrap_or_else(|e| panic!("{e}"));
    std::io::Write::write_all(&mut file, b"mine\n").unwrap_or_else(|e| panic!("{e}"));
    drop(file);
    let out = call_approved(&write, args, observed).await;
    assert_eq!(
        out,
        ToolOutput::error(
            "not written: `notes.txt` changed since the preview: it was a file of 4 bytes, it is now a file of 9 bytes"
        )
    );
    assert_eq!(fx.read("notes.txt").as_deref(), Some("one\nmine\n"));
}

#[tokio::test]
async fn a_same_size_rewrite_after_the_write_preview_is_caught_by_the_content_hash() {
    let fx = Fixture::new();
    fx.put("notes.txt", "one\n");
    let write = fx.tool("fs_write");
    let args = json!({"path": "notes.txt", "content": "one\ntwo\n"});
    let (_, observed) = preview(&write, &args).await;
    // Same size, and the modification time kept: only the content says it changed.
    let modified =
        std::fs::metadata(fx.root.join("notes.txt")).and_then(|m| m.modified()).unwrap_or_else(|e| panic!("{e}"));
    let file =
        std::fs::OpenOptions::new().write(true).open(fx.root.join("notes.txt")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::FileExt::write_all_at(&file, b"ONE\n", 0).unwrap_or_else(|e| panic!("{e}"));
    file.set_modified(modified).unwrap_or_else(|e| panic!("{e}"));
    drop(file);

    let out = call_approved(&write, args, observed).await;
    assert_eq!(
        out,
        ToolOutput::error(
            "not written: `notes.txt` changed since the preview: its content changed (it is still a file of 4 bytes)"
        )
    );
    assert_eq!(fx.read("notes.txt").as_deref(), Some("ONE\n"));
}

#[tokio::test]
async fn a_file_created_where_the_preview_saw_nothing_is_not_overwritten() {
    let fx = Fixture::new();
    let write = fx.tool("fs_write");
    let args = json!({"path": "sub/new.txt", "content": "from the model"});
    let (text, observed) = preview(&write, &args).await;
    assert_eq!(text, "create sub/new.txt (14 bytes)");

    fx.put("sub/new.txt", "someone else's");
    let out = call_approved(&write, args, observed).await;
    assert_eq!(
        out,
        ToolOutput::error(
            "not written: `sub/new.txt` changed since the preview: it was nothing, it is now a file of 14 bytes"
        )
    );
    assert_eq!(fx.read("sub/new.txt").as_deref(), Some("someone else's"));
}

#[tokio::test]
async fn a_file_deleted_with_its_folder_after_the_write_preview_is_not_recreated() {
    let fx = Fixture::new();
    fx.put("sub/kept.txt", "old");
    let write = fx.tool("fs_write");
    let args = json!({"path": "sub/kept.txt", "content": "new"});
    let (_, observed) = preview(&write, &args).await;
    std::fs::remove_dir_all(fx.root.join("sub")).unwrap_or_else(|e| panic!("{e}"));
    let out = call_approved(&write, args, observed).await;
    assert_eq!(
        out,
        ToolOutput::error(
            "not written: `sub/kept.txt` changed since the preview: it was a file of 3 bytes, it is now nothing"
        )
    );
    assert!(!fx.root.join("sub").exists(), "not even its folder was made again");
}

#[tokio::test]
async fn what_did_not_change_is_written_and_deleted_as_previewed() {
    let fx = Fixture::new();
    fx.put("notes.txt", "one\n");
    fx.put("old.log", "x");
    fx.put("drafts/a/b.txt", "bb");
    let (write, delete) = (fx.tool("fs_write"), fx.tool("fs_delete"));

    for (path, content) in [("notes.txt", "one\ntwo\n"), ("fresh/new.txt", "new")] {
        let args = json!({"path": path, "content": content});
        let (_, observed) = preview(&write, &args).await;
        assert!(!call_approved(&write, args, observed).await.is_error, "{path}");
        assert_eq!(fx.read(path).as_deref(), Some(content));
    }
    for path in ["old.log", "drafts", "ghost"] {
        let args = json!({"path": path});
        let (_, observed) = preview(&delete, &args).await;
        let out = call_approved(&delete, args, observed).await;
        assert_eq!(out.is_error, path == "ghost", "{path}: {out:?}");
        assert!(!fx.root.join(path).exists(), "{path}");
    }
}

#[tokio::test]
async fn an_unreadable_observation_touches_nothing() {
    let fx = Fixture::new();
    fx.put("old.log", "x");
    let delete = fx.tool("fs_delete");
    let out = call_approved(&delete, json!({"path": "old.log"}), Some(json!({"kind": "spaceship"}))).await;
    assert!(
        out.is_error
            && out.content.starts_with("not deleted: the record of what the preview of `old.log` saw is unreadable"),
        "{out:?}"
    );
    assert!(fx.root.join("old.log").exists());
}
