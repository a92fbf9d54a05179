//! Attacks on the file tools' confinement, each of which worked against a check-the-name-then-reopen
//! design: a folder swapped for a symlink while calls run, a hard link to a file outside, FIFOs and
//! sockets planted in the workspace, a write that lands through a link. And a property: no sequence of
//! operations over planted links, hard links, FIFOs and `..` changes anything outside the root or returns
//! what is there.

use crate::support;

use crate::support::{Fixture, call, mkfifo, promptly, snapshot};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tollgate_agent_core::{Tool, ToolOutput};

const OUTSIDE_SECRET: &str = "top secret";

/// Swaps the workspace entries `a` and `b` (a folder and a symlink pointing out) as fast as it can, on
/// its own thread, until stopped; the number of swaps is returned by `stop`.
struct Swapper {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Swapper {
    fn start(fx: &Fixture, a: &str, b: &str) -> Self {
        let (a, b) = (fx.root.join(a), fx.root.join(b));
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let (stop_flag, counter) = (stop.clone(), swaps.clone());
        let thread = std::thread::spawn(move || {
            while !stop_flag.load(Ordering::Relaxed) {
                let cwd = rustix::fs::CWD;
                rustix::fs::renameat_with(cwd, &a, cwd, &b, rustix::fs::RenameFlags::EXCHANGE)
                    .unwrap_or_else(|e| panic!("RENAME_EXCHANGE: {e}"));
                counter.fetch_add(1, Ordering::Relaxed);
            }
        });
        Self { stop, swaps, thread: Some(thread) }
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap_or_else(|_| panic!("the swapping thread panicked"));
        }
        self.swaps.load(Ordering::Relaxed)
    }
}

/// Calls made while a folder is swapped: at most this many rounds, for at most this long.
const RACE_ROUNDS: usize = 400;
const RACE_TIME: Duration = Duration::from_secs(2);

#[tokio::test]
async fn a_folder_swapped_for_a_symlink_never_leads_a_write_out() {
    let fx = Fixture::new();
    fx.put("d/secret.txt", "inside\n");
    fx.plant_link("swap", &fx.outside);
    let outside_before = snapshot(&fx.outside);
    let write = fx.tool("fs_write");

    let swapper = Swapper::start(&fx, "d", "swap");
    let started = Instant::now();
    let (mut written, mut refused) = (0, 0);
    for round in 0..RACE_ROUNDS {
        if started.elapsed() > RACE_TIME {
            break;
        }
        for path in ["d/secret.txt".to_owned(), format!("d/new-{round}.txt"), format!("d/sub/new-{round}.txt")] {
            let out = call(&write, json!({"path": path, "content": "overwritten"})).await;
            if out.is_error { refused += 1 } else { written += 1 }
        }
    }
    let swaps = swapper.stop();

    assert!(swaps > 0, "the folder was never swapped");
    assert_eq!(snapshot(&fx.outside), outside_before, "{written} writes, {refused} refused, {swaps} swaps");
}

#[tokio::test]
async fn a_folder_swapped_for_a_symlink_never_leads_a_read_out() {
    let fx = Fixture::new();
    fx.put("d/secret.txt", "inside\n");
    fx.plant_link("swap", &fx.outside);
    let (read, search) = (fx.tool("fs_read"), fx.tool("fs_search"));

    let swapper = Swapper::start(&fx, "d", "swap");
    let started = Instant::now();
    let mut answers = Vec::new();
    for _ in 0..RACE_ROUNDS {
        if started.elapsed() > RACE_TIME {
            break;
        }
        answers.push(call(&read, json!({"path": "d/secret.txt"})).await);
        answers.push(call(&read, json!({"path": "d/secret.txt", "offset": 0, "limit": 5})).await);
        answers.push(call(&search, json!({"pattern": "secret", "path": "d"})).await);
    }
    let swaps = swapper.stop();

    assert!(swaps > 0, "the folder was never swapped");
    let leaked: Vec<&ToolOutput> = answers.iter().filter(|out| out.content.contains(OUTSIDE_SECRET)).collect();
    assert!(leaked.is_empty(), "{} of {} answers read outside: {:?}", leaked.len(), answers.len(), leaked[0]);
}

#[tokio::test]
async fn a_hard_link_to_a_file_outside_is_neither_read_nor_written() {
    let fx = Fixture::new();
    std::fs::hard_link(fx.outside.join("secret.txt"), fx.root.join("linked.txt")).unwrap_or_else(|e| panic!("{e}"));
    let needle = "has 2 hard links";

    let read = fx.tool("fs_read");
    for args in [json!({"path": "linked.txt"}), json!({"path": "linked.txt", "offset": 0, "limit": 1})] {
        let refused = read.validate(&args).await;
        assert!(refused.as_ref().is_err_and(|e| e.contains(needle)), "{refused:?}");
        let out = call(&read, args).await;
        assert!(out.is_error && out.content.contains(needle) && !out.content.contains(OUTSIDE_SECRET), "{out:?}");
    }
    support::assert_refused(&fx.tool("fs_write"), json!({"path": "linked.txt", "content": "overwritten"}), needle)
        .await;
    support::assert_refused(&fx.tool("fs_search"), json!({"pattern": "secret", "path": "linked.txt"}), needle).await;
    let out = call(&fx.tool("fs_search"), json!({"pattern": "secret"})).await;
    assert_eq!(out.content, "no matches for `secret` in `.`\n[skipped 1 file(s) with more than one hard link]");
    assert_eq!(std::fs::read_to_string(fx.outside.join("secret.txt")).ok().as_deref(), Some("top secret\n"));

    // Deleting removes the workspace's name only.
    assert_eq!(
        call(&fx.tool("fs_delete"), json!({"path": "linked.txt"})).await,
        ToolOutput::text("deleted linked.txt")
    );
    assert_eq!(std::fs::read_to_string(fx.outside.join("secret.txt")).ok().as_deref(), Some("top secret\n"));
}

/// Calls `tool` on its own thread, failing the test if it does not answer promptly.
fn call_promptly(tool: &Arc<dyn Tool>, args: Value) -> ToolOutput {
    let (tool, what) = (tool.clone(), format!("{} {args}", tool.name()));
    promptly(&what, move || async move { call(&tool, args).await })
}

fn validate_promptly(tool: &Arc<dyn Tool>, args: Value) -> Result<(), String> {
    let (tool, what) = (tool.clone(), format!("{} validate {args}", tool.name()));
    promptly(&what, move || async move { tool.validate(&args).await })
}

fn preview_promptly(tool: &Arc<dyn Tool>, args: Value) -> Option<String> {
    let (tool, what) = (tool.clone(), format!("{} preview {args}", tool.name()));
    promptly(&what, move || async move { tool.preview(&args).await })
}

/// Asserts that every file tool refuses the special file at `path` (of `kind`) promptly, lists it
/// marked, skips it in a search, and would delete only its name.
fn assert_special_file_refused(fx: &Fixture, path: &str, kind: &str) {
    let needle = format!("`{path}` is a {kind}; the file tools only read and write regular files and folders");
    let refused = |result: Result<(), String>, what: &str| {
        assert!(result.as_ref().is_err_and(|e| e.contains(&needle)), "{what}: {result:?}");
    };
    let failed =
        |out: ToolOutput, what: &str| assert!(out.is_error && out.content.contains(&needle), "{what}: {out:?}");

    let read = fx.tool("fs_read");
    refused(validate_promptly(&read, json!({"path": path})), "fs_read validate");
    failed(call_promptly(&read, json!({"path": path})), "fs_read");
    failed(call_promptly(&read, json!({"path": path, "offset": 1, "limit": 2})), "fs_read by lines");

    let write = fx.tool("fs_write");
    let args = json!({"path": path, "content": "x"});
    refused(validate_promptly(&write, args.clone()), "fs_write validate");
    assert_eq!(preview_promptly(&write, args.clone()), None, "fs_write preview");
    failed(call_promptly(&write, args), "fs_write");

    let list = fx.tool("fs_list");
    refused(validate_promptly(&list, json!({"path": path})), "fs_list validate");
    let out = call_promptly(&list, json!({}));
    assert!(out.content.lines().any(|line| line == format!("{path} ({kind})")), "{out:?}");

    let search = fx.tool("fs_search");
    refused(validate_promptly(&search, json!({"pattern": "x", "path": path})), "fs_search validate");
    let out = call_promptly(&search, json!({"pattern": "x"}));
    assert!(out.content.contains("[skipped 1 FIFO(s), socket(s) or device(s)]"), "{out:?}");

    let delete = fx.tool("fs_delete");
    let preview = preview_promptly(&delete, json!({"path": path}));
    assert_eq!(preview, Some(format!("delete {path} ({kind})")));
}

#[test]
fn a_fifo_is_refused_without_ever_being_opened() {
    let fx = Fixture::new();
    mkfifo(&fx.root.join("pipe"));
    assert_special_file_refused(&fx, "pipe", "fifo");
    // Still a FIFO: nothing replaced it.
    let meta = fx.root.join("pipe").symlink_metadata().unwrap_or_else(|e| panic!("{e}"));
    use std::os::unix::fs::FileTypeExt;
    assert!(meta.file_type().is_fifo());
    let out = call_promptly(&fx.tool("fs_delete"), json!({"path": "pipe"}));
    assert_eq!(out, ToolOutput::text("deleted pipe"));
}

#[test]
fn a_socket_is_refused() {
    let fx = Fixture::new();
    let _listener =
        std::os::unix::net::UnixListener::bind(fx.root.join("sock")).unwrap_or_else(|e| panic!("bind: {e}"));
    assert_special_file_refused(&fx, "sock", "socket");
}

#[tokio::test]
async fn writes_replace_the_file_through_a_temporary_one() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let fx = Fixture::new();
    fx.put("notes/keep.txt", "old\n");
    std::fs::set_permissions(fx.root.join("notes/keep.txt"), std::fs::Permissions::from_mode(0o640))
        .unwrap_or_else(|e| panic!("{e}"));
    let meta = |path: &str| fx.root.join(path).metadata().unwrap_or_else(|e| panic!("{e}"));
    let inode_before = meta("notes/keep.txt").ino();
    let write = fx.tool("fs_write");

    let out = call(&write, json!({"path": "notes/keep.txt", "content": "new\n"})).await;
    assert_eq!(out, ToolOutput::text("replaced notes/keep.txt (4 bytes)"));
    assert_eq!(fx.read("notes/keep.txt").as_deref(), Some("new\n"));
    // A new inode (renamed into place, not rewritten in place), with the old permissions.
    assert_ne!(meta("notes/keep.txt").ino(), inode_before);
    assert_eq!(meta("notes/keep.txt").permissions().mode() & 0o777, 0o640);

    let out = call(&write, json!({"path": "notes/fresh.txt", "content": "x"})).await;
    assert_eq!(out, ToolOutput::text("created notes/fresh.txt (1 bytes)"));
    assert_eq!(meta("notes/fresh.txt").permissions().mode() & 0o133, 0, "at most 0644");

    let mut names: Vec<String> = std::fs::read_dir(fx.root.join("notes"))
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|entry| entry.unwrap_or_else(|e| panic!("{e}")).file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["fresh.txt", "keep.txt"], "no temporary file is left behind");
}

#[tokio::test]
async fn a_symlink_as_the_last_component_is_neither_written_through_nor_replaced() {
    let fx = Fixture::new();
    fx.put("notes/plan.txt", "the plan\n");
    fx.plant_link("plan-link.txt", &fx.root.join("notes/plan.txt"));
    let needle = "`plan-link.txt` is a symlink; the file tools never follow a symlink inside the workspace";
    support::assert_refused(&fx.tool("fs_write"), json!({"path": "plan-link.txt", "content": "x"}), needle).await;
    support::assert_refused(&fx.tool("fs_read"), json!({"path": "plan-link.txt"}), needle).await;
    assert_eq!(fx.read("notes/plan.txt").as_deref(), Some("the plan\n"));
    let link = fx.root.join("plan-link.txt").symlink_metadata().unwrap_or_else(|e| panic!("{e}"));
    assert!(link.file_type().is_symlink(), "the link is left as it was");
}

#[tokio::test]
async fn a_folder_delete_never_follows_a_symlink_inside() {
    let fx = Fixture::new();
    fx.put("trash/a.txt", "a");
    std::os::unix::fs::symlink(&fx.outside, fx.root.join("trash/exit")).unwrap_or_else(|e| panic!("{e}"));
    let outside_before = snapshot(&fx.outside);
    let delete = fx.tool("fs_delete");
    assert_eq!(
        delete.preview(&json!({"path": "trash"})).await.as_deref(),
        Some(
            "delete the folder trash/ and everything in it: 2 file(s), 0 folder(s), 1 bytes\n  trash/a.txt (1 bytes)\n  trash/exit (symlink)"
        )
    );
    assert_eq!(call(&delete, json!({"path": "trash"})).await, ToolOutput::text("deleted the folder trash/"));
    assert!(!fx.root.join("trash").exists());
    assert_eq!(snapshot(&fx.outside), outside_before);
}

// ------------------------------------------------------------------------------------------- property

/// Path components the model might use: real entries, planted traps, `.` and `..`.
const NAMES: [&str; 11] = ["a", "dir", "out", "secret-link", "hard", "fifo", "..", ".", "up", "secret.txt", "outside"];

#[derive(Clone, Debug)]
enum Op {
    Write(String, &'static str),
    Read(String),
    Delete(String),
    List(String),
    Search(String),
}

fn path() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(&NAMES[..]), 1..4).prop_map(|parts| parts.join("/"))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (path(), prop::sample::select(&["x", "hello\n", ""][..])).prop_map(|(p, c)| Op::Write(p, c)),
        path().prop_map(Op::Read),
        path().prop_map(Op::Delete),
        path().prop_map(Op::List),
        path().prop_map(Op::Search),
    ]
}

/// A workspace with traps: a symlink to the outside folder (`out`, and `dir/out`), one to the outside
/// secret, one back to the root (`dir/up`), a hard link to a file outside, a FIFO.
fn trapped() -> Fixture {
    let fx = Fixture::new();
    fx.put("a", "plain\n");
    fx.put("dir/a", "nested\n");
    std::fs::write(fx.outside.join("hard-target.txt"), "hard secret\n").unwrap_or_else(|e| panic!("{e}"));
    fx.plant_link("out", &fx.outside);
    fx.plant_link("secret-link", &fx.outside.join("secret.txt"));
    std::os::unix::fs::symlink(&fx.outside, fx.root.join("dir/out")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(&fx.root, fx.root.join("dir/up")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::hard_link(fx.outside.join("hard-target.txt"), fx.root.join("hard")).unwrap_or_else(|e| panic!("{e}"));
    mkfifo(&fx.root.join("fifo"));
    fx
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn no_sequence_of_operations_touches_or_reveals_the_outside(ops in prop::collection::vec(op(), 1..10)) {
        let fx = trapped();
        let outside_before = snapshot(&fx.outside);
        for op in &ops {
            let (name, args) = match op {
                Op::Write(path, content) => ("fs_write", json!({"path": path, "content": content})),
                Op::Read(path) => ("fs_read", json!({"path": path})),
                Op::Delete(path) => ("fs_delete", json!({"path": path})),
                Op::List(path) => ("fs_list", json!({"path": path})),
                Op::Search(path) => ("fs_search", json!({"pattern": "secret", "path": path})),
            };
            let tool = fx.tool(name);
            let preview = preview_promptly(&tool, args.clone()).unwrap_or_default();
            let out = call_promptly(&tool, args.clone());
            for text in [&preview, &out.content] {
                prop_assert!(
                    !text.contains(OUTSIDE_SECRET) && !text.contains("hard secret"),
                    "{name} {args} revealed the outside: {text}"
                );
            }
            prop_assert_eq!(&snapshot(&fx.outside), &outside_before, "{} {} changed the outside", name, args);
        }
    }
}
