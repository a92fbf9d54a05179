//! What the tool tests share: a scratch workspace next to a folder outside it, and a way to call a tool.
// Each test binary uses part of this module.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tollgate_agent_core::{Tool, ToolContext, ToolOutput, ToolRegistry};
use tollgate_agent_testkit::scratch_dir;

/// A fresh workspace folder, and a folder beside it (outside the workspace) holding `secret.txt`.
pub(crate) struct Fixture {
    pub root: PathBuf,
    pub outside: PathBuf,
}

impl Fixture {
    pub(crate) fn new() -> Self {
        let base = scratch_dir("tools");
        let root = base.join("workspace");
        let outside = base.join("outside");
        for dir in [&root, &outside] {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::write(outside.join("secret.txt"), "top secret\n").unwrap_or_else(|e| panic!("{e}"));
        Self { root, outside }
    }

    /// The built-in tool `name` over this workspace.
    pub(crate) fn tool(&self, name: &str) -> Arc<dyn Tool> {
        tollgate_agent_tools::builtin_tool(&self.root, name).unwrap_or_else(|| panic!("no tool {name}"))
    }

    /// Writes a workspace file, creating its folders.
    pub(crate) fn put(&self, path: &str, content: impl AsRef<[u8]>) {
        put_file(&self.root.join(path), content);
    }

    /// Writes an executable file (mode 755) at `path`, absolute or inside the workspace.
    pub(crate) fn put_executable(&self, path: &Path, content: &str) {
        let path = self.root.join(path);
        put_file(&path, content);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap_or_else(|e| panic!("{e}"));
    }

    pub(crate) fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(path)).ok()
    }

    /// Plants a symlink `name` in the workspace root pointing at `target`.
    pub(crate) fn plant_link(&self, name: &str, target: &Path) {
        std::os::unix::fs::symlink(target, self.root.join(name)).unwrap_or_else(|e| panic!("{e}"));
    }

    /// The workspace root with symlinks resolved, as tools show it.
    pub(crate) fn canonical_root(&self) -> PathBuf {
        self.root.canonicalize().unwrap_or_else(|e| panic!("{e}"))
    }

    /// A registry of every built-in tool over this workspace.
    pub(crate) fn registry(&self) -> ToolRegistry {
        let mut registry = ToolRegistry::new();
        for tool in tollgate_agent_tools::builtin_tools(&self.root) {
            registry.register(tool).unwrap_or_else(|e| panic!("{e}"));
        }
        registry
    }
}

fn put_file(path: &Path, content: impl AsRef<[u8]>) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
    }
    std::fs::write(path, content).unwrap_or_else(|e| panic!("{e}"));
}

/// Calls a tool; a failure of the tool itself (not an error result) fails the test.
pub(crate) async fn call(tool: &Arc<dyn Tool>, args: Value) -> ToolOutput {
    let ctx = ToolContext::new("run-1", "call_1");
    tool.call(args, ctx).await.unwrap_or_else(|e| panic!("tool failed internally: {e}"))
}

/// Asserts that `validate` refuses `args` with a message containing `needle`, that there is no preview
/// of what cannot run, and that a call made anyway is an error result saying the same.
pub(crate) async fn assert_refused(tool: &Arc<dyn Tool>, args: Value, needle: &str) {
    let name = tool.name().to_owned();
    let refused = tool.validate(&args).await;
    assert!(refused.as_ref().is_err_and(|e| e.contains(needle)), "{name} {args}: {refused:?}");
    assert_eq!(tool.preview(&args).await, None, "{name} {args}: no preview of what cannot run");
    let out = call(tool, args.clone()).await;
    assert!(out.is_error && out.content.contains(needle), "{name} {args}: {out:?}");
}

/// How long a file tool may take in the tests that plant something that could block it.
pub(crate) const PROMPT: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs `work` on its own thread and runtime and returns its output, failing the test if it takes longer
/// than [`PROMPT`]. A tool blocked inside a synchronous call (a FIFO opened for reading) would block a
/// runtime's timer too; on its own thread it is abandoned instead, and the test fails rather than hangs.
pub(crate) fn promptly<T, F>(what: &str, work: impl FnOnce() -> F + Send + 'static) -> T
where
    T: Send + 'static,
    F: std::future::Future<Output = T>,
{
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"));
        let _ = sender.send(runtime.block_on(work()));
    });
    receiver.recv_timeout(PROMPT).unwrap_or_else(|e| panic!("{what} did not answer within {PROMPT:?}: {e}"))
}

/// Every entry below `dir` (symlinks not followed) with the content of each regular file, to compare a
/// folder before and after.
pub(crate) fn snapshot(dir: &Path) -> std::collections::BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut seen = std::collections::BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder).unwrap_or_else(|e| panic!("{}: {e}", folder.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            let meta = path.symlink_metadata().unwrap_or_else(|e| panic!("{e}"));
            let content = if meta.is_file() { std::fs::read(&path).ok() } else { None };
            if meta.is_dir() {
                pending.push(path.clone());
            }
            seen.insert(path.strip_prefix(dir).unwrap_or(&path).to_path_buf(), content);
        }
    }
    seen
}

/// Makes a FIFO at `path`.
pub(crate) fn mkfifo(path: &Path) {
    let mode = rustix::fs::Mode::from_raw_mode(0o644);
    rustix::fs::mknodat(rustix::fs::CWD, path, rustix::fs::FileType::Fifo, mode, 0)
        .unwrap_or_else(|e| panic!("mkfifo {}: {e}", path.display()));
}
