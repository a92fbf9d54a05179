//! # tollgate-agent-tools
//!
//! Tollgate's built-in tools, confined to a workspace folder: each is a
//! [`TypedTool`](tollgate_agent_core::TypedTool) that [`IntoTool::into_tool`] (or [`builtin_tools`], all
//! at once) turns into a [`Tool`] a registry takes.
//!
//! ```
//! # use serde_json::json;
//! # use tollgate_agent_core::{Gate, IntoTool, Tool, ToolContext};
//! # use tollgate_agent_tools::{BUILTIN_TOOL_NAMES, BuiltinOptions, FsRead, FsWrite, Workspace, builtin_tools_with};
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let workspace = Workspace::new(dir.path()); // no tool reads or writes outside this folder
//! let write = FsWrite::new(workspace.clone()).into_tool();
//! let read = FsRead::new(workspace).into_tool();
//!
//! let args = json!({"path": "note.txt", "content": "hello\n"});
//! assert_eq!(write.gate(&args, &ToolContext::new("run-1", "call_1")), Gate::Ask); // a person approves each write, having seen:
//! assert_eq!(write.preview(&args).await.as_deref(), Some("create note.txt (6 bytes)"));
//! write.call(args, ToolContext::new("run-1", "call_1")).await?;
//! let note = read.call(json!({"path": "note.txt"}), ToolContext::new("run-1", "call_2")).await?;
//! assert_eq!(note.content, "hello\n");
//! assert!(read.validate(&json!({"path": "../secret"})).await.is_err()); // escapes the workspace
//!
//! let all = builtin_tools_with(dir.path(), &BuiltinOptions::default()); // every built-in tool
//! assert_eq!(all.len(), BUILTIN_TOOL_NAMES.len());
//! # Ok(()) }
//! ```
//!
//! The tools (`http_request` only with the Cargo feature `http`, default):
//!
//! | tool | arguments | gate | preview |
//! |---|---|---|---|
//! | `fs_list` | `path` (default `.`) | allow | |
//! | `fs_read` | **`path`**, `offset` (lines to skip), `limit` (lines) | allow | |
//! | `fs_search` | **`pattern`** (regex), `path` (default `.`), `max_results` (default 100, at most 1000) | allow | |
//! | `time_now` | none | allow | |
//! | `fs_write` | **`path`**, **`content`** | ask | a unified diff, or `create PATH (N bytes)` |
//! | `fs_delete` | **`path`** | ask | what goes |
//! | `shell` | **`argv`** (program and arguments, no shell), `timeout_secs` (default 30, at most 600) | ask | the command, program, working directory, timeout, and what the sandbox confines on this kernel with every channel left open |
//! | `http_request` | **`method`**, **`url`**, `headers`, `body` | ask | method, URL and every header in full (nothing masked: the model chose them), the body whole up to 16,000 bytes, else its length and start |
//!
//! The promise: no tool reads or writes outside the workspace root. The file tools reach a path through
//! directory fds opened from the root, one component at a time, and never follow a symlink beneath the
//! root; they read and write only regular files with a single name (never a FIFO, socket or device,
//! which are not even opened, nor a file hard-linked from elsewhere), and `fs_write` replaces a file by
//! renaming a temporary one into place. A path that is absolute or climbs above the root with `..` is
//! refused by [`Tool::validate`] before any gate with a message saying it escapes the workspace; one that
//! is or passes through a symlink, or names a special or multiply-linked file, is refused the same way
//! saying so. The walk is done again when the call runs, which acts only on what it opened itself, so a
//! swap made meanwhile cannot lead it out. File system work runs off the async workers, bounded in time.
//! An approved `fs_write` or `fs_delete` acts only on what its preview saw: the preview records the state
//! of its path ([`Tool::observed_preview`]) and the call, on any difference, touches nothing and says what
//! changed. Operator policy judges every file tool's `path` normalised ([`Tool::policy_paths`]). Walks of
//! folder trees are iterative and bounded ([`walk`]): no tree overflows a stack.
//! `shell` runs in the root and resolves a program path with `/` inside it (its arguments are the
//! approver's to judge); `http_request` touches no files. Everything a tool returns is bounded, and a cut
//! is marked in the text.
//!
//! A held call's grant suggestion ([`Tool::suggested_match`]): `fs_write` and `fs_delete` propose the
//! folder of the resolved path (`{"/path": "notes/*"}`), `shell` the exact `argv`, `http_request` the
//! method and the URL's scheme and host (`{"/method": "GET", "/url": "https://example.com/**"}`); the
//! others every argument by equality. Each matches the call it was made for. The tools made by
//! [`builtin_tools`] and [`builtin_tool`] carry these; one made with `into_tool` proposes the default.

// `kept` and `total` of its capped buffer are for `http_request` (Cargo feature `http`).
#[cfg_attr(not(feature = "http"), allow(dead_code))]
mod bounded;
mod call;
mod diff;
pub mod fs;
#[cfg(feature = "http")]
pub mod http;
mod observed;
pub mod sandbox;
pub mod search;
pub mod shell;
mod suggest;
pub mod time;
pub mod walk;
pub mod workspace;

pub use fs::{FsDelete, FsList, FsRead, FsWrite};
#[cfg(feature = "http")]
pub use http::HttpRequest;
pub use sandbox::{
    SandboxMode, SandboxSupport, SeccompSupport, describe_confinement, kill_running_commands, sandbox_support,
};
pub use search::FsSearch;
pub use shell::{Shell, ShellOptions};
pub use time::TimeNow;
pub use workspace::{PathError, ResolvedPath, Workspace};

use std::path::PathBuf;
use std::sync::Arc;
use tollgate_agent_core::{IntoTool, SystemClock, Tool};

/// The names of the built-in tools, in the order [`builtin_tools`] returns them: the ones that only read
/// (gate allow) first, then the ones that change something (gate ask).
#[cfg(feature = "http")]
pub const BUILTIN_TOOL_NAMES: [&str; 8] =
    ["fs_list", "fs_read", "fs_search", "time_now", "fs_write", "fs_delete", "shell", "http_request"];
/// The names of the built-in tools, in the order [`builtin_tools`] returns them (this build has no
/// `http_request`: Cargo feature `http`).
#[cfg(not(feature = "http"))]
pub const BUILTIN_TOOL_NAMES: [&str; 7] =
    ["fs_list", "fs_read", "fs_search", "time_now", "fs_write", "fs_delete", "shell"];

/// How the built-in tools are set up beyond their workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BuiltinOptions {
    /// The `shell` tool's sandbox and network.
    pub shell: ShellOptions,
}

/// Every built-in tool, confined to `root`, reading the system clock, with the default options.
pub fn builtin_tools(root: impl Into<PathBuf>) -> Vec<Arc<dyn Tool>> {
    builtin_tools_with(root, &BuiltinOptions::default())
}

/// Every built-in tool, confined to `root`, reading the system clock, set up by `options`.
pub fn builtin_tools_with(root: impl Into<PathBuf>, options: &BuiltinOptions) -> Vec<Arc<dyn Tool>> {
    let workspace = Workspace::new(root);
    BUILTIN_TOOL_NAMES.iter().filter_map(|name| tool_named(&workspace, name, options)).collect()
}

/// The built-in tool with this name, confined to `root`, with the default options; `None` for a name that
/// is not built in.
pub fn builtin_tool(root: impl Into<PathBuf>, name: &str) -> Option<Arc<dyn Tool>> {
    builtin_tool_with(root, name, &BuiltinOptions::default())
}

/// The built-in tool with this name, confined to `root`, set up by `options`; `None` for a name that is
/// not built in.
pub fn builtin_tool_with(root: impl Into<PathBuf>, name: &str, options: &BuiltinOptions) -> Option<Arc<dyn Tool>> {
    tool_named(&Workspace::new(root), name, options)
}

fn tool_named(workspace: &Workspace, name: &str, options: &BuiltinOptions) -> Option<Arc<dyn Tool>> {
    let workspace = workspace.clone();
    let tool: Arc<dyn Tool> = match name {
        "fs_list" => FsList::new(workspace).into_tool(),
        "fs_read" => FsRead::new(workspace).into_tool(),
        "fs_search" => FsSearch::new(workspace).into_tool(),
        "time_now" => TimeNow::new(Arc::new(SystemClock)).into_tool(),
        "fs_write" => FsWrite::new(workspace).into_tool(),
        "fs_delete" => FsDelete::new(workspace).into_tool(),
        "shell" => Shell::with_options(workspace, options.shell).into_tool(),
        #[cfg(feature = "http")]
        "http_request" => HttpRequest::new().into_tool(),
        _ => return None,
    };
    Some(tool)
}
