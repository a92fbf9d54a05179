//! `fs_search` (allow): the lines of workspace files that match a regular expression.
//!
//! The promise, on top of the workspace's: a search reads only regular files inside the root and returns
//! a bounded answer. The walk goes through folder fds by the workspace rules (see [`crate::workspace`]):
//! it never follows a symlink, never opens a FIFO, socket or device, and skips files with more than one
//! hard link; it visits each folder once (by device and inode, so a bind mount cannot loop), skips files
//! that are binary, not UTF-8, or larger than [`MAX_FILE_BYTES`], stops after [`MAX_FILES_SCANNED`]
//! files, and returns at most `max_results` lines of at most [`MAX_LINE_BYTES`] each. Every cut and every
//! skip is said in a bracketed note after the results. The walk is iterative and bounded (see
//! [`crate::walk`]): a tree deeper than [`MAX_WALK_DEPTH`](crate::walk::MAX_WALK_DEPTH) levels or with
//! more than [`MAX_WALK_ENTRIES`](crate::walk::MAX_WALK_ENTRIES) entries ends the search with an error
//! result saying so. The whole search runs on the blocking pool within a time bound (10 s).

use crate::bounded::prefix_at_char_boundary;
use crate::call::{blocking_call, blocking_validate, dot};
use crate::fs::policy_path;
use crate::walk::{Visit, Visited, walk};
use crate::workspace::{Entry, Located, PathError, Workspace, WorkspacePath, check_regular, links, open_regular, size};
use regex::{Regex, RegexBuilder};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::HashSet;
use std::ffi::OsStr;
use std::io::Read;
use tollgate_agent_core::{PolicyPath, ToolContext, ToolError, ToolOutput, TypedTool};

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
}

/// The arguments of `fs_search`.
#[derive(Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// Regular expression (Rust `regex` syntax) matched against each line.
    pattern: String,
    /// File or folder to search, relative to the workspace root.
    #[serde(default = "dot")]
    path: String,
    /// At most this many matching lines (values above 1000 count as 1000).
    #[serde(default = "default_max_results")]
    #[schemars(range(min = 1))]
    max_results: u64,
}

fn default_max_results() -> u64 {
    DEFAULT_MAX_RESULTS
}

/// A call whose arguments were checked: the compiled pattern and where to look.
struct Plan {
    regex: Regex,
    start: WorkspacePath,
    limit: usize,
}

impl FsSearch {
    /// The tool over this workspace.
    pub fn new(workspace: Workspace) -> Self {
        Self { workspace }
    }
}

fn check(workspace: &Workspace, args: &SearchArgs) -> Result<Plan, String> {
    if args.max_results == 0 {
        return Err("invalid arguments: max_results must be at least 1".to_owned());
    }
    let regex = RegexBuilder::new(&args.pattern)
        .size_limit(MAX_REGEX_BYTES)
        .build()
        .map_err(|e| format!("invalid regex `{}`: {e}", args.pattern))?;
    let start = workspace.path(&args.path).map_err(|e| e.to_string())?;
    let limit = usize::try_from(args.max_results.min(MAX_RESULTS_CAP)).unwrap_or(usize::MAX);
    Ok(Plan { regex, start, limit })
}

/// Where a search starts, opened by the walk.
enum Start {
    /// A folder, to walk.
    Folder(OwnedFd),
    /// A regular file with one name, in this opened folder.
    File(OwnedFd),
}

fn open_start(workspace: &Workspace, path: &WorkspacePath) -> Result<Start, PathError> {
    match workspace.locate(path)? {
        Located::Root(root) => Ok(Start::Folder(root)),
        Located::Entry { parent, entry: Entry::Folder(_) } => {
            Workspace::open_last_folder(parent.as_fd(), path).map(Start::Folder)
        }
        Located::Entry { parent, entry } => check_regular(&entry, path.given()).map(|_| Start::File(parent)),
    }
}

fn search(workspace: &Workspace, args: &SearchArgs) -> Result<ToolOutput, ToolError> {
    let plan = match check(workspace, args) {
        Ok(plan) => plan,
        Err(e) => return Ok(ToolOutput::error(e)),
    };
    let shown = plan.start.shown();
    let start = match open_start(workspace, &plan.start) {
        Ok(start) => start,
        Err(e) if e.is_not_found() => {
            return Ok(ToolOutput::error(format!("cannot search `{shown}`: no such file or folder")));
        }
        Err(e) => return Ok(ToolOutput::error(e.to_string())),
    };
    let mut walk = Walk::new(&plan.regex, plan.limit);
    let relative = if plan.start.is_root() { String::new() } else { shown.clone() };
    match start {
        Start::Folder(dir) => {
            if let Ok(stat) = rustix::fs::fstat(&dir) {
                walk.visited.insert((stat.st_dev, stat.st_ino));
            }
            if let Err(limit) = walk.folder(dir, &relative) {
                return Ok(ToolOutput::error(format!(
                    "search of `{shown}` stopped: {limit}; search a folder inside it"
                )));
            }
        }
        Start::File(parent) => {
            let name: &OsStr = plan.start.name().unwrap_or_default().as_ref();
            walk.file(parent.as_fd(), name, &relative);
        }
    }
    Ok(ToolOutput::text(walk.report(plan.regex.as_str(), &shown)))
}

/// The state of one search: what was found, and what was skipped or cut.
struct Walk<'a> {
    regex: &'a Regex,
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
    skipped_special: usize,
    skipped_hard_linked: usize,
    /// Folders already walked, by (device, inode).
    visited: HashSet<(u64, u64)>,
}

impl<'a> Walk<'a> {
    fn new(regex: &'a Regex, limit: usize) -> Self {
        Self {
            regex,
            limit,
            hits: Vec::new(),
            more: false,
            files_scanned: 0,
            stopped: false,
            skipped_binary: 0,
            skipped_large: 0,
            skipped_links: 0,
            skipped_special: 0,
            skipped_hard_linked: 0,
            visited: HashSet::new(),
        }
    }

    fn done(&self) -> bool {
        self.more || self.stopped
    }

    /// Walks an opened folder; `shown` is its workspace-relative path (empty for the root).
    fn folder(&mut self, dir: OwnedFd, shown: &str) -> Result<(), crate::walk::WalkLimit> {
        walk(dir, shown, &mut |visited| self.visit(visited))
    }

    /// One entry met by the walk: a folder is entered once, a file searched, anything else counted.
    fn visit(&mut self, visited: &Visited<'_>) -> Visit {
        if self.done() {
            return Visit::Stop;
        }
        match visited.entry {
            Entry::Folder(stat) => {
                #[allow(clippy::useless_conversion)] // The field types differ between targets.
                let key = (u64::from(stat.st_dev), u64::from(stat.st_ino));
                return if self.visited.insert(key) { Visit::Enter } else { Visit::Skip };
            }
            Entry::File(stat) if links(stat) > 1 => self.skipped_hard_linked += 1,
            Entry::File(_) => self.file(visited.dir, visited.name, visited.shown),
            Entry::Symlink => self.skipped_links += 1,
            // Never opened: opening a FIFO could block forever.
            Entry::Special(_) => self.skipped_special += 1,
            Entry::Missing => {}
        }
        Visit::Enter
    }

    /// Searches the regular file `name` of the opened folder `dir`.
    fn file(&mut self, dir: BorrowedFd<'_>, name: &OsStr, shown: &str) {
        if self.files_scanned >= MAX_FILES_SCANNED {
            self.stopped = true;
            return;
        }
        self.files_scanned += 1;
        // Checked again on the opened fd: a file swapped meanwhile is skipped.
        let Ok((file, stat)) = open_regular(dir, name, shown) else { return };
        if size(&stat) > MAX_FILE_BYTES {
            self.skipped_large += 1;
            return;
        }
        let mut bytes = Vec::new();
        if file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).is_err() {
            return;
        }
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
            skipped.push(format!("{} symlink(s) (never followed)", self.skipped_links));
        }
        if self.skipped_special > 0 {
            skipped.push(format!("{} FIFO(s), socket(s) or device(s)", self.skipped_special));
        }
        if self.skipped_hard_linked > 0 {
            skipped.push(format!("{} file(s) with more than one hard link", self.skipped_hard_linked));
        }
        if !skipped.is_empty() {
            lines.push(format!("[skipped {}]", skipped.join(", ")));
        }
        lines.join("\n")
    }
}

impl TypedTool for FsSearch {
    type Args = SearchArgs;
    const NAME: &str = "fs_search";
    const DESCRIPTION: &str = "Search the text files under a workspace path for lines matching a regular expression; returns `path:line: text` lines.";

    async fn validate(&self, args: &SearchArgs) -> Result<(), String> {
        let (workspace, args) = (self.workspace.clone(), args.clone());
        blocking_validate(move || {
            let plan = check(&workspace, &args)?;
            // A missing path passes: the call says so.
            match open_start(&workspace, &plan.start) {
                Ok(_) => Ok(()),
                Err(e) if e.is_not_found() => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        })
        .await
    }

    fn policy_paths(&self, args: &SearchArgs) -> Vec<PolicyPath> {
        policy_path(&self.workspace, &args.path, true)
    }

    async fn call(&self, args: SearchArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let workspace = self.workspace.clone();
        blocking_call(move || search(&workspace, &args)).await
    }
}
