//! A planted folder 10,000 levels deep, and one of more entries than a walk visits: searched, listed,
//! previewed for a delete and deleted, each answers with a clear result, nothing is removed, and none
//! overflows a stack. The tools run on a runtime whose threads (the blocking
//! pool's included, where the file tools work) have a 256 KiB stack, so a walk that recursed per level
//! would crash the test binary instead of answering.

use crate::support::{Fixture, call};
use rustix::fd::OwnedFd;
use rustix::fs::{AtFlags, CWD, Mode, OFlags};
use serde_json::json;
use std::path::Path;
use tollgate_agent_core::ToolOutput;
use tollgate_agent_tools::walk::{MAX_WALK_DEPTH, MAX_WALK_ENTRIES};

/// Levels of the planted tree: far past PATH_MAX, so it is made one level at a time through folder fds.
const LEVELS: usize = 10_000;

fn open_dir(dir: &OwnedFd, name: &str) -> OwnedFd {
    rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW, Mode::empty())
        .unwrap_or_else(|e| panic!("open {name}: {e}"))
}

/// Makes `root/deep/d/d/…` (`LEVELS` folders below `deep`) with a file `bottom.txt` at the bottom.
fn plant_deep_tree(root: &Path) {
    let mut dir = rustix::fs::openat(CWD, root, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
        .unwrap_or_else(|e| panic!("{e}"));
    rustix::fs::mkdirat(&dir, "deep", Mode::from_raw_mode(0o755)).unwrap_or_else(|e| panic!("{e}"));
    dir = open_dir(&dir, "deep");
    for _ in 0..LEVELS {
        rustix::fs::mkdirat(&dir, "d", Mode::from_raw_mode(0o755)).unwrap_or_else(|e| panic!("{e}"));
        dir = open_dir(&dir, "d");
    }
    let file = rustix::fs::openat(&dir, "bottom.txt", OFlags::WRONLY | OFlags::CREATE, Mode::from_raw_mode(0o644))
        .unwrap_or_else(|e| panic!("{e}"));
    rustix::io::write(&file, b"needle\n").unwrap_or_else(|e| panic!("{e}"));
}

/// The bottom folder of `root/deep`, opened by walking down through folder fds, and how deep it is.
fn bottom_of_deep_tree(root: &Path) -> (OwnedFd, usize) {
    let mut dir = rustix::fs::openat(CWD, root.join("deep"), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
        .unwrap_or_else(|e| panic!("{e}"));
    let mut depth = 0;
    while let Ok(sub) =
        rustix::fs::openat(&dir, "d", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW, Mode::empty())
    {
        dir = sub;
        depth += 1;
    }
    (dir, depth)
}

/// Removes `root/deep` from the bottom up, one level at a time through `..` (nobody swaps folders in this
/// test), without recursion and without long paths.
fn remove_deep_tree(root: &Path) {
    let (mut dir, depth) = bottom_of_deep_tree(root);
    rustix::fs::unlinkat(&dir, "bottom.txt", AtFlags::empty()).unwrap_or_else(|e| panic!("{e}"));
    for _ in 0..depth {
        dir = open_dir(&dir, "..");
        rustix::fs::unlinkat(&dir, "d", AtFlags::REMOVEDIR).unwrap_or_else(|e| panic!("{e}"));
    }
    std::fs::remove_dir(root.join("deep")).unwrap_or_else(|e| panic!("{e}"));
}

/// Runs `work` on a thread and a runtime whose threads have a 256 KiB stack.
fn on_a_small_stack<F: std::future::Future<Output = ()>>(work: impl FnOnce() -> F + Send + 'static) {
    const STACK: usize = 256 * 1024;
    std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_stack_size(STACK)
                .build()
                .unwrap_or_else(|e| panic!("runtime: {e}"));
            runtime.block_on(work());
        })
        .unwrap_or_else(|e| panic!("{e}"))
        .join()
        .unwrap_or_else(|_| panic!("the tools' thread panicked"));
}

#[test]
fn a_tree_ten_thousand_levels_deep_gets_clear_answers_and_crashes_nothing() {
    let fx = Fixture::new();
    plant_deep_tree(&fx.root);
    fx.put("old.log", "x");
    let root = fx.root.clone();
    on_a_small_stack(move || async move {
        let fx = Fixture { root, outside: std::env::temp_dir() };
        let limit = format!("more than {MAX_WALK_DEPTH} folders deep");

        let searched = call(&fx.tool("fs_search"), json!({"pattern": "needle"})).await;
        assert!(searched.is_error, "{searched:?}");
        assert!(searched.content.starts_with("search of `.` stopped: `deep/d/d/"), "{searched:?}");
        assert!(searched.content.contains(&limit), "{searched:?}");

        let listed = call(&fx.tool("fs_list"), json!({})).await;
        assert_eq!(listed.content, "deep/\nold.log");
        // A path naming the bottom is walked one component at a time too.
        let bottom = format!("deep/{}", vec!["d"; LEVELS].join("/"));
        let listed = call(&fx.tool("fs_list"), json!({"path": bottom})).await;
        assert_eq!(listed.content, "bottom.txt");

        let delete = fx.tool("fs_delete");
        let preview = delete.observed_preview(&json!({"path": "deep"})).await.unwrap_or_else(|| panic!("no preview"));
        assert!(preview.text.starts_with("cannot delete the folder deep/: `deep/d/d/"), "{}", preview.text);
        assert!(
            preview.text.contains(&limit) && preview.text.ends_with("the delete will be refused"),
            "{}",
            preview.text
        );
        assert_eq!(preview.observed, None);

        let deleted = call(&delete, json!({"path": "deep"})).await;
        assert!(deleted.is_error && deleted.content.starts_with("not deleted: `deep/d/d/"), "{deleted:?}");
        assert!(deleted.content.contains(&limit), "{deleted:?}");
        // The rest of the workspace is still served.
        assert_eq!(call(&delete, json!({"path": "old.log"})).await.content, "deleted old.log");
    });
    assert_eq!(bottom_of_deep_tree(&fx.root).1, LEVELS, "nothing of the tree was removed");
    remove_deep_tree(&fx.root);
}

#[tokio::test]
async fn a_folder_past_the_entry_limit_gets_clear_answers_and_loses_nothing() {
    let fx = Fixture::new();
    let wide = fx.root.join("wide");
    std::fs::create_dir(&wide).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..=MAX_WALK_ENTRIES {
        std::fs::File::create(wide.join(i.to_string())).unwrap_or_else(|e| panic!("{e}"));
    }
    let limit = format!("more than {MAX_WALK_ENTRIES} entries");

    let listed = call(&fx.tool("fs_list"), json!({"path": "wide"})).await;
    assert!(listed.is_error && listed.content.contains(&limit), "{listed:?}");
    let searched = call(&fx.tool("fs_search"), json!({"pattern": "x"})).await;
    assert_eq!(
        searched,
        ToolOutput::error(format!(
            "search of `.` stopped: `.` holds {limit} (the limit of a walk); search a folder inside it"
        ))
    );
    let delete = fx.tool("fs_delete");
    let preview = delete.preview(&json!({"path": "wide"})).await.unwrap_or_default();
    assert_eq!(
        preview,
        format!(
            "cannot delete the folder wide/: `wide` holds {limit} (the limit of a walk); the delete will be refused"
        )
    );
    let deleted = call(&delete, json!({"path": "wide"})).await;
    assert_eq!(deleted, ToolOutput::error(format!("not deleted: `wide` holds {limit} (the limit of a walk)")));
    assert_eq!(std::fs::read_dir(&wide).map(Iterator::count).unwrap_or_default(), MAX_WALK_ENTRIES + 1);
    std::fs::remove_dir_all(&wide).unwrap_or_else(|e| panic!("{e}"));
}
