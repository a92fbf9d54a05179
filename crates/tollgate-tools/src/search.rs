//! `fs_search` (allow): the lines of workspace files that match a regular expression.
//!
//! The promise, on top of the workspace's: a search reads only regular files inside the root and returns
//! a bounded answer. The walk never follows a symlink that leads out of the workspace (nor a dangling
//! one), visits each real folder once (so a link to an ancestor cannot loop), skips files that are
//! binary, not UTF-8, or larger than [`MAX_FILE_BYTES`], stops after [`MAX_FILES_SCANNED`] files, and
//! returns at most `max_results` lines of at most [`MAX_LINE_BYTES`] each. Every cut and every skip is
//! said in a bracketed note after the results.

use crate::bounded::prefix_at_char_boundary;
use crate::call::{dot, parse};
use crate::workspace::{ResolvedPath, Workspace, io_message};
use regex::{Regex, RegexBuilder};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use tollgate_core::{BoxFuture, Gate, Tool, ToolContext, ToolError, ToolOutput};

/// Matching lines returned when `max_results` is not given.
const DEFAULT_MAX_RESULTS: u64 = 100;
/// `max_results` above this is lowered to it.
pub const MAX_RESULTS_CAP: u64 = 1000;
/// A file larger than this is skipped.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// The walk stops after reading this many files.
pub const MAX_FILES_SCANNED: usize = 20_000;
/// A matching line longer than this is cut (with `…`).
pub const MAX_LINE_BYTES: usize = 500;
/// The largest compiled pattern accepted, so that a pathological pattern fails fast instead of eating
/// memory.
const MAX_REGEX_BYTES: usize = 1024 * 1024;

/// `fs_search`: lines matching a regex in the files under a workspace path, as `path:line: text`.
pub struct FsSearch {
    workspace: Workspace,
    schema: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    pattern: String,
    #[serde(default = "dot")]
    path: String,
    #[serde(default = "default_max_results")]
    max_results: u64,
}

fn default_max_results() -> u64 {
    DEFAULT_MAX_RESULTS
}

/// A call whose arguments were checked: the compiled pattern and where to look.
struct Plan {
    regex: Regex,
    start: ResolvedPath,
    limit: usize,
}

impl FsSearch {
    /// The tool over this workspace.
    pub fn new(workspace: Workspace) -> Self {
        let schema = json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regular expression (Rust `regex` syntax) matched against each line."},
                "path": {"type": "string", "description": "File or folder to search, relative to the workspace root.", "default": "."},
                "max_results": {"type": "integer", "minimum": 1, "default": DEFAULT_MAX_RESULTS, "description": "At most this many matching lines (values above 1000 count as 1000)."}
            },
            "required": ["pattern"],
            "additionalProperties": false
        });
        Self { workspace, schema }
    }
}

fn check(workspace: &Workspace, args: &Value) -> Result<Plan, String> {
    let args: SearchArgs = parse(args)?;
    if args.max_results == 0 {
        return Err("invalid arguments: max_results must be at least 1".to_owned());
    }
    let regex = RegexBuilder::new(&args.pattern)
        .size_limit(MAX_REGEX_BYTES)
        .build()
        .map_err(|e| format!("invalid regex `{}`: {e}", args.pattern))?;
    let start = workspace.resolve(&args.path).map_err(|e| e.to_string())?;
    let limit = usize::try_from(args.max_results.min(MAX_RESULTS_CAP)).unwrap_or(usize::MAX);
    Ok(Plan { regex, start, limit })
}

fn search(workspace: &Workspace, args: &Value) -> Result<ToolOutput, ToolError> {
    let plan = match check(workspace, args) {
        Ok(plan) => plan,
        Err(e) => return Ok(ToolOutput::error(e)),
    };
    let root = workspace.canonical_root().map_err(|e| ToolError::new(e.to_string()))?;
    let meta = match std::fs::metadata(&plan.start.real) {
        Ok(meta) => meta,
        Err(e) => {
            let message = io_message(&e);
            return Ok(ToolOutput::error(format!("cannot search `{}`: {message}", plan.start.display())));
        }
    };
    let mut walk = Walk::new(&plan.regex, root, plan.limit);
    if meta.is_dir() {
        walk.visited.insert(plan.start.real.clone());
        walk.folder(&plan.start.real, &plan.start.relative);
    } else if meta.is_file() {
        walk.file(&plan.start.real, &plan.start.relative, meta.len());
    } else {
        return Ok(ToolOutput::error(format!("`{}` is neither a file nor a folder", plan.start.display())));
    }
    Ok(ToolOutput::text(walk.report(plan.regex.as_str(), plan.start.display())))
}

/// The state of one search: what was found, and what was skipped or cut.
struct Walk<'a> {
    regex: &'a Regex,
    root: PathBuf,
    limit: usize,
    hits: Vec<String>,
    /// A match beyond `limit` exists.
    more: bool,
    files_scanned: usize,
    /// The walk stopped at [`MAX_FILES_SCANNED`].
    stopped: bool,
    skipped_binary: usize,
    skipped_large: usize,
    skipped_links: usize,
    /// Real folders already walked: a symlink back to one of them is not walked again.
    visited: HashSet<PathBuf>,
}

impl<'a> Walk<'a> {
    fn new(regex: &'a Regex, root: PathBuf, limit: usize) -> Self {
        Self {
            regex,
            root,
            limit,
            hits: Vec::new(),
            more: false,
            files_scanned: 0,
            stopped: false,
            skipped_binary: 0,
            skipped_large: 0,
            skipped_links: 0,
            visited: HashSet::new(),
        }
    }

    fn done(&self) -> bool {
        self.more || self.stopped
    }

    /// Walks a real folder inside the root; `shown` is its workspace-relative path (empty for the root).
    fn folder(&mut self, real: &Path, shown: &str) {
        let Ok(entries) = std::fs::read_dir(real) else { return };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            if self.done() {
                return;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let child_shown = if shown.is_empty() { name } else { format!("{shown}/{name}") };
            let Ok(link_meta) = entry.path().symlink_metadata() else { continue };
            let (child_real, meta) = if link_meta.file_type().is_symlink() {
                // Dangling links and links out of the workspace are both skipped (and counted).
                let target = match entry.path().canonicalize() {
                    Ok(target) if target.starts_with(&self.root) => target,
                    _ => {
                        self.skipped_links += 1;
                        continue;
                    }
                };
                let Ok(meta) = std::fs::metadata(&target) else { continue };
                (target, meta)
            } else {
                (entry.path(), link_meta)
            };
            if meta.is_dir() {
                // Paths under the canonical root with every link replaced by its target are canonical.
                if self.visited.insert(child_real.clone()) {
                    self.folder(&child_real, &child_shown);
                }
            } else if meta.is_file() {
                self.file(&child_real, &child_shown, meta.len());
            }
            // Sockets, FIFOs and devices are never opened: reading a FIFO could block forever.
        }
    }

    fn file(&mut self, real: &Path, shown: &str, len: u64) {
        if self.files_scanned >= MAX_FILES_SCANNED {
            self.stopped = true;
            return;
        }
        self.files_scanned += 1;
        if len > MAX_FILE_BYTES {
            self.skipped_large += 1;
            return;
        }
        let Ok(bytes) = std::fs::read(real) else { return };
        // The file may have grown since its size was read.
        if bytes.len() as u64 > MAX_FILE_BYTES {
            self.skipped_large += 1;
            return;
        }
        let text = match String::from_utf8(bytes) {
            Ok(text) if !text.contains('\0') => text,
            _ => {
                self.skipped_binary += 1;
                return;
            }
        };
        for (index, line) in text.lines().enumerate() {
            if !self.regex.is_match(line) {
                continue;
            }
            if self.hits.len() == self.limit {
                self.more = true;
                return;
            }
            let kept = prefix_at_char_boundary(line, MAX_LINE_BYTES);
            let cut = if kept.len() < line.len() { "…" } else { "" };
            self.hits.push(format!("{shown}:{}: {kept}{cut}", index + 1));
        }
    }

    fn report(&self, pattern: &str, searched: &str) -> String {
        let mut lines = self.hits.clone();
        if lines.is_empty() {
            lines.push(format!("no matches for `{pattern}` in `{searched}`"));
        }
        if self.more {
            lines.push(format!(
                "[more matches not shown: stopped at {} results; narrow the pattern or the path, or raise max_results (at most {MAX_RESULTS_CAP})]",
                self.limit
            ));
        }
        if self.stopped {
            lines.push(format!("[search stopped after reading {MAX_FILES_SCANNED} files; narrow the path]"));
        }
        let mut skipped = Vec::new();
        if self.skipped_binary > 0 {
            skipped.push(format!("{} binary or non-UTF-8 file(s)", self.skipped_binary));
        }
        if self.skipped_large > 0 {
            skipped.push(format!("{} file(s) over {MAX_FILE_BYTES} bytes", self.skipped_large));
        }
        if self.skipped_links > 0 {
            skipped.push(format!("{} symlink(s) leading out of the workspace or nowhere", self.skipped_links));
        }
        if !skipped.is_empty() {
            lines.push(format!("[skipped {}]", skipped.join(", ")));
        }
        lines.join("\n")
    }
}

impl Tool for FsSearch {
    fn name(&self) -> &str {
        "fs_search"
    }

    fn description(&self) -> &str {
        "Search the text files under a workspace path for lines matching a regular expression; returns `path:line: text` lines."
    }

    fn parameters(&self) -> &Value {
        &self.schema
    }

    fn validate<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Result<(), String>> {
        let checked = (|| -> Result<(), String> {
            check(&self.workspace, args).map(drop)
        })();
        Box::pin(std::future::ready(checked))
    }

    fn gate(&self, _args: &Value) -> Gate {
        Gate::Allow
    }

    fn call<'a>(&'a self, args: Value, _ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        // A walk over a large tree is long blocking work: keep it off the async workers.
        let workspace = self.workspace.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || search(&workspace, &args))
                .await
                .map_err(|e| ToolError::new(format!("fs_search stopped: {e}")))?
        })
    }
}
