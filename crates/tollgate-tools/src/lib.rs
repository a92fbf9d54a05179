//! # tollgate-tools
//!
//! Tollgate's built-in tools behind the [`tollgate_core::Tool`] port, confined to a workspace folder:
//!
//! | tool | arguments | gate | preview |
//! |---|---|---|---|
//! | `fs_list` | `path` (default `.`) | allow | |
//! | `fs_read` | **`path`**, `offset` (lines to skip), `limit` (lines) | allow | |
//! | `fs_write` | **`path`**, **`content`** | ask | a unified diff, or `create PATH (N bytes)` |
//! | `fs_delete` | **`path`** | ask | what goes |
//!
//! The promise: no tool reads or writes outside the workspace root. A path that escapes it — absolute,
//! `..` above the root, or through a symlink pointing out — is refused by [`Tool::validate`] before any
//! gate, with a message saying the path escapes the workspace, and checked again when the call runs.
//!
//! ```
//! let tools = tollgate_tools::builtin_tools("./workspace");
//! assert_eq!(tools.len(), 4);
//! assert!(tollgate_tools::builtin_tool("./workspace", "fs_write").is_some());
//! ```

mod diff;
pub mod fs;
pub mod workspace;

pub use fs::{FsDelete, FsList, FsRead, FsWrite};
pub use workspace::{PathError, ResolvedPath, Workspace};

use std::path::PathBuf;
use std::sync::Arc;
use tollgate_core::Tool;

/// The names of the built-in tools, in the order [`builtin_tools`] returns them.
pub const BUILTIN_TOOL_NAMES: [&str; 4] = ["fs_list", "fs_read", "fs_write", "fs_delete"];

/// Every built-in tool, confined to `root`.
pub fn builtin_tools(root: impl Into<PathBuf>) -> Vec<Arc<dyn Tool>> {
    let workspace = Workspace::new(root);
    BUILTIN_TOOL_NAMES.iter().filter_map(|name| tool_named(&workspace, name)).collect()
}

/// The built-in tool with this name, confined to `root`; `None` for a name that is not built in.
pub fn builtin_tool(root: impl Into<PathBuf>, name: &str) -> Option<Arc<dyn Tool>> {
    tool_named(&Workspace::new(root), name)
}

fn tool_named(workspace: &Workspace, name: &str) -> Option<Arc<dyn Tool>> {
    let workspace = workspace.clone();
    let tool: Arc<dyn Tool> = match name {
        "fs_list" => Arc::new(FsList::new(workspace)),
        "fs_read" => Arc::new(FsRead::new(workspace)),
        "fs_write" => Arc::new(FsWrite::new(workspace)),
        "fs_delete" => Arc::new(FsDelete::new(workspace)),
        _ => return None,
    };
    Some(tool)
}
