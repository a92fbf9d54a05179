//! The workspace file tools: `fs_list` and `fs_read` (allow), `fs_write` and `fs_delete` (ask).
//!
//! Each checks its path in [`Tool::validate`] (a path escaping the workspace is refused before any gate)
//! and again when it runs, because the file system may have changed while the call waited for a person.
//! Problems the model can act on (a missing file, a directory where a file was expected) are error
//! results for the model; only failures of the tool itself are [`ToolError`]s.
//!
//! The file operations are synchronous: they are short, and this keeps the tools independent of any
//! async runtime.

use crate::bounded::cap_preview;
use crate::call::{dot, parse, ready};
use crate::diff::unified_diff;
use crate::workspace::{PathError, ResolvedPath, Workspace, io_message};
use serde::Deserialize;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use tollgate_core::{BoxFuture, Gate, Tool, ToolContext, ToolError, ToolOutput};

/// A file larger than this is read whole only with `offset`/`limit`.
const MAX_WHOLE_READ_BYTES: u64 = 10 * 1024 * 1024;
/// A file larger than this is summarised, not diffed, in a write preview.
const MAX_DIFF_BYTES: u64 = 1024 * 1024;
/// At most this many entries are named in a delete preview of a folder.
const MAX_PREVIEW_ENTRIES: usize = 50;

fn escape_message(error: &PathError) -> String {
    error.to_string()
}

// ---------------------------------------------------------------------------------------------- fs_list

/// `fs_list`: the entries of a workspace folder, sorted, folders with a trailing `/`.
pub struct FsList {
    workspace: Workspace,
    schema: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    #[serde(default = "dot")]
    path: String,
}

impl FsList {
    /// The tool over this workspace.
    pub fn new(workspace: Workspace) -> Self {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Folder to list, relative to the workspace root.", "default": "."}
            },
            "additionalProperties": false
        });
        Self { workspace, schema }
    }

    fn list(&self, args: &Value) -> ToolOutput {
        let args: ListArgs = match parse(args) {
            Ok(a) => a,
            Err(e) => return ToolOutput::error(e),
        };
        let target = match self.workspace.resolve(&args.path) {
            Ok(t) => t,
            Err(e) => return ToolOutput::error(escape_message(&e)),
        };
        let entries = match std::fs::read_dir(&target.real) {
            Ok(entries) => entries,
            Err(e) => return ToolOutput::error(format!("cannot list `{}`: {}", args.path, io_message(&e))),
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                // Follow symlinks to tell folders apart; a dangling link lists as a plain entry.
                if std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir()) { format!("{name}/") } else { name }
            })
            .collect();
        names.sort();
        if names.is_empty() {
            return ToolOutput::text(format!("`{}` is empty", target.display()));
        }
        ToolOutput::text(names.join("\n"))
    }
}

impl Tool for FsList {
    fn name(&self) -> &str {
        "fs_list"
    }

    fn description(&self) -> &str {
        "List the entries of a folder in the workspace, sorted; folders end with `/`."
    }

    fn parameters(&self) -> &Value {
        &self.schema
    }

    fn validate<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Result<(), String>> {
        let checked = (|| -> Result<(), String> {
            let args: ListArgs = parse(args)?;
            self.workspace.resolve(&args.path).map(drop).map_err(|e| escape_message(&e))
        })();
        Box::pin(std::future::ready(checked))
    }

    fn gate(&self, _args: &Value) -> Gate {
        Gate::Allow
    }

    fn call<'a>(&'a self, args: Value, _ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        ready(Ok(self.list(&args)))
    }
}

// ---------------------------------------------------------------------------------------------- fs_read

/// `fs_read`: a workspace file's text, whole or a range of lines.
pub struct FsRead {
    workspace: Workspace,
    schema: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    path: String,
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    limit: Option<u64>,
}

impl FsRead {
    /// The tool over this workspace.
    pub fn new(workspace: Workspace) -> Self {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File to read, relative to the workspace root."},
                "offset": {"type": "integer", "minimum": 0, "description": "Lines to skip from the start (0 = from the first line)."},
                "limit": {"type": "integer", "minimum": 1, "description": "At most this many lines."}
            },
            "required": ["path"],
            "additionalProperties": false
        });
        Self { workspace, schema }
    }

    fn read(&self, args: &Value) -> Result<ToolOutput, ToolError> {
        let args: ReadArgs = match parse(args) {
            Ok(a) => a,
            Err(e) => return Ok(ToolOutput::error(e)),
        };
        let target = match self.workspace.resolve(&args.path) {
            Ok(t) => t,
            Err(e) => return Ok(ToolOutput::error(escape_message(&e))),
        };
        let meta = match std::fs::metadata(&target.real) {
            Ok(m) => m,
            Err(e) => return Ok(ToolOutput::error(format!("cannot read `{}`: {}", args.path, io_message(&e)))),
        };
        if meta.is_dir() {
            return Ok(ToolOutput::error(format!("`{}` is a folder; use fs_list", args.path)));
        }
        if args.offset.is_none() && args.limit.is_none() {
            if meta.len() > MAX_WHOLE_READ_BYTES {
                return Ok(ToolOutput::error(format!(
                    "`{}` is {} bytes; read it in parts with offset and limit",
                    args.path,
                    meta.len()
                )));
            }
            return match std::fs::read(&target.real) {
                Ok(bytes) => Ok(ToolOutput::bytes(&bytes)),
                Err(e) => Ok(ToolOutput::error(format!("cannot read `{}`: {}", args.path, io_message(&e)))),
            };
        }
        let file = std::fs::File::open(&target.real)
            .map_err(|e| ToolError::new(format!("cannot open {}: {}", target.real.display(), io_message(&e))))?;
        let skip = args.offset.unwrap_or(0);
        let limit = args.limit.unwrap_or(u64::MAX);
        let mut reader = BufReader::new(file);
        let mut line = Vec::new();
        let mut out = Vec::new();
        let (mut seen, mut taken, mut more) = (0u64, 0u64, false);
        loop {
            line.clear();
            let n = reader
                .read_until(b'\n', &mut line)
                .map_err(|e| ToolError::new(format!("cannot read {}: {}", target.real.display(), io_message(&e))))?;
            if n == 0 {
                break;
            }
            seen += 1;
            if seen <= skip {
                continue;
            }
            if taken == limit {
                more = true;
                break;
            }
            taken += 1;
            out.extend_from_slice(&line);
            if out.len() as u64 > MAX_WHOLE_READ_BYTES {
                more = true;
                break;
            }
        }
        let mut text = String::from_utf8_lossy(&out).into_owned();
        if taken == 0 {
            text = format!("[`{}` has {seen} line(s); nothing after line {skip}]", args.path);
        } else if more || skip > 0 {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            let first = skip + 1;
            let last = skip + taken;
            let tail = if more { ", more follow" } else { ", end of file" };
            text.push_str(&format!("[lines {first}-{last}{tail}]"));
        }
        Ok(ToolOutput::text(text))
    }
}

impl Tool for FsRead {
    fn name(&self) -> &str {
        "fs_read"
    }

    fn description(&self) -> &str {
        "Read a text file in the workspace, whole or from line `offset` (lines to skip) for `limit` lines."
    }

    fn parameters(&self) -> &Value {
        &self.schema
    }

    fn validate<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Result<(), String>> {
        let checked = (|| -> Result<(), String> {
            let args: ReadArgs = parse(args)?;
            self.workspace.resolve(&args.path).map(drop).map_err(|e| escape_message(&e))
        })();
        Box::pin(std::future::ready(checked))
    }

    fn gate(&self, _args: &Value) -> Gate {
        Gate::Allow
    }

    fn call<'a>(&'a self, args: Value, _ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        ready(self.read(&args))
    }
}

// --------------------------------------------------------------------------------------------- fs_write

/// `fs_write`: creates or replaces a workspace file (creating its folders). Asks first, with a diff.
pub struct FsWrite {
    workspace: Workspace,
    schema: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
}

impl FsWrite {
    /// The tool over this workspace.
    pub fn new(workspace: Workspace) -> Self {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File to write, relative to the workspace root."},
                "content": {"type": "string", "description": "The whole new content of the file."}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        });
        Self { workspace, schema }
    }

    fn check(&self, args: &WriteArgs) -> Result<ResolvedPath, String> {
        let target = self.workspace.resolve(&args.path).map_err(|e| escape_message(&e))?;
        if target.is_root() || std::fs::metadata(&target.real).is_ok_and(|m| m.is_dir()) {
            return Err(format!("`{}` is a folder, not a file", args.path));
        }
        Ok(target)
    }

    fn write(&self, args: &Value) -> ToolOutput {
        let args: WriteArgs = match parse(args) {
            Ok(a) => a,
            Err(e) => return ToolOutput::error(e),
        };
        let target = match self.check(&args) {
            Ok(t) => t,
            Err(e) => return ToolOutput::error(e),
        };
        let existed = target.real.exists();
        if let Some(parent) = target.real.parent()
            && let Err(e) = std::fs::create_dir_all(parent)
        {
            return ToolOutput::error(format!("cannot create the folders for `{}`: {}", args.path, io_message(&e)));
        }
        match std::fs::write(&target.real, args.content.as_bytes()) {
            Ok(()) => {
                let verb = if existed { "replaced" } else { "created" };
                ToolOutput::text(format!("{verb} {} ({} bytes)", target.display(), args.content.len()))
            }
            Err(e) => ToolOutput::error(format!("cannot write `{}`: {}", args.path, io_message(&e))),
        }
    }
}

/// What a write would do to the file at `real`, shown as `shown`.
fn write_preview(real: &Path, shown: &str, content: &str) -> String {
    let meta = match std::fs::metadata(real) {
        Ok(m) => m,
        Err(_) => return format!("create {shown} ({} bytes)", content.len()),
    };
    let replace = || format!("replace {shown}: {} bytes with {} bytes", meta.len(), content.len());
    if meta.len() > MAX_DIFF_BYTES {
        return replace();
    }
    let old = match std::fs::read(real).map(String::from_utf8) {
        Ok(Ok(old)) => old,
        _ => return replace(),
    };
    if old == content {
        return format!("no change: {shown} already holds these {} bytes", content.len());
    }
    match unified_diff(shown, &old, content) {
        Some(diff) => cap_preview(diff),
        None => replace(),
    }
}

impl Tool for FsWrite {
    fn name(&self) -> &str {
        "fs_write"
    }

    fn description(&self) -> &str {
        "Create or replace a file in the workspace with the given content (folders are created as needed)."
    }

    fn parameters(&self) -> &Value {
        &self.schema
    }

    fn validate<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Result<(), String>> {
        let checked = (|| -> Result<(), String> {
            let args: WriteArgs = parse(args)?;
            self.check(&args).map(drop)
        })();
        Box::pin(std::future::ready(checked))
    }

    fn gate(&self, _args: &Value) -> Gate {
        Gate::Ask
    }

    fn preview<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Option<String>> {
        let preview = (|| -> Option<String> {
            let args: WriteArgs = parse(args).ok()?;
            let target = self.check(&args).ok()?;
            Some(write_preview(&target.real, target.display(), &args.content))
        })();
        Box::pin(std::future::ready(preview))
    }

    fn call<'a>(&'a self, args: Value, _ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        ready(Ok(self.write(&args)))
    }
}

// -------------------------------------------------------------------------------------------- fs_delete

/// `fs_delete`: removes a workspace file, symlink or folder (with everything in it). Asks first.
pub struct FsDelete {
    workspace: Workspace,
    schema: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteArgs {
    path: String,
}

/// What a delete would remove: the path as the approver should read it, after the final symlink (if any)
/// is left unresolved — deleting a link removes the link, not what it points to.
struct DeleteTarget {
    /// The entry to remove.
    entry: std::path::PathBuf,
    /// How it is shown.
    shown: String,
}

impl FsDelete {
    /// The tool over this workspace.
    pub fn new(workspace: Workspace) -> Self {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File or folder to delete, relative to the workspace root."}
            },
            "required": ["path"],
            "additionalProperties": false
        });
        Self { workspace, schema }
    }

    fn check(&self, args: &DeleteArgs) -> Result<DeleteTarget, String> {
        // The whole path, symlinks included, must stay inside: a link pointing out is refused outright.
        let full = self.workspace.resolve(&args.path).map_err(|e| escape_message(&e))?;
        if full.is_root() {
            return Err("refusing to delete the workspace root".to_owned());
        }
        // Then resolve only the parent, so that a final symlink is removed itself.
        let path = Path::new(&args.path);
        let (parent, name) = match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) => (parent, name),
            // A path ending in `..` or `.`: its parent is already fully resolved in `full`.
            _ => return Ok(DeleteTarget { entry: full.real.clone(), shown: full.display().to_owned() }),
        };
        let parent = self.workspace.resolve(&parent.to_string_lossy()).map_err(|e| escape_message(&e))?;
        let shown = if parent.is_root() {
            name.to_string_lossy().into_owned()
        } else {
            format!("{}/{}", parent.relative, name.to_string_lossy())
        };
        Ok(DeleteTarget { entry: parent.real.join(name), shown })
    }

    fn preview_of(target: &DeleteTarget) -> String {
        let meta = match std::fs::symlink_metadata(&target.entry) {
            Ok(m) => m,
            Err(_) => return format!("nothing to delete: {} does not exist", target.shown),
        };
        if meta.file_type().is_symlink() {
            return format!("delete the symlink {} (not what it points to)", target.shown);
        }
        if !meta.is_dir() {
            return format!("delete {} ({} bytes)", target.shown, meta.len());
        }
        let mut entries = Vec::new();
        let (mut files, mut folders, mut bytes) = (0u64, 0u64, 0u64);
        walk(&target.entry, &target.shown, &mut |shown, meta| {
            if meta.is_dir() {
                folders += 1;
            } else {
                files += 1;
                bytes += meta.len();
            }
            if entries.len() < MAX_PREVIEW_ENTRIES {
                let line =
                    if meta.is_dir() { format!("  {shown}/") } else { format!("  {shown} ({} bytes)", meta.len()) };
                entries.push(line);
            }
        });
        let mut text = format!(
            "delete the folder {}/ and everything in it: {files} file(s), {folders} folder(s), {bytes} bytes",
            target.shown
        );
        for line in &entries {
            text.push('\n');
            text.push_str(line);
        }
        let listed = entries.len() as u64;
        if files + folders > listed {
            text.push_str(&format!("\n  … and {} more", files + folders - listed));
        }
        text
    }

    fn delete(&self, args: &Value) -> ToolOutput {
        let args: DeleteArgs = match parse(args) {
            Ok(a) => a,
            Err(e) => return ToolOutput::error(e),
        };
        let target = match self.check(&args) {
            Ok(t) => t,
            Err(e) => return ToolOutput::error(e),
        };
        let meta = match std::fs::symlink_metadata(&target.entry) {
            Ok(m) => m,
            Err(e) => return ToolOutput::error(format!("cannot delete `{}`: {}", args.path, io_message(&e))),
        };
        let removed = if meta.is_dir() {
            std::fs::remove_dir_all(&target.entry).map(|()| format!("deleted the folder {}/", target.shown))
        } else {
            std::fs::remove_file(&target.entry).map(|()| format!("deleted {}", target.shown))
        };
        match removed {
            Ok(message) => ToolOutput::text(message),
            Err(e) => ToolOutput::error(format!("cannot delete `{}`: {}", args.path, io_message(&e))),
        }
    }
}

/// Visits everything below `dir` (not following symlinks), in sorted order.
fn walk(dir: &Path, shown: &str, visit: &mut dyn FnMut(&str, &std::fs::Metadata)) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let Ok(meta) = entry.path().symlink_metadata() else { continue };
        let child = format!("{shown}/{}", entry.file_name().to_string_lossy());
        visit(&child, &meta);
        if meta.is_dir() {
            walk(&entry.path(), &child, visit);
        }
    }
}

impl Tool for FsDelete {
    fn name(&self) -> &str {
        "fs_delete"
    }

    fn description(&self) -> &str {
        "Delete a file or a folder (with everything in it) in the workspace."
    }

    fn parameters(&self) -> &Value {
        &self.schema
    }

    fn validate<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Result<(), String>> {
        let checked = (|| -> Result<(), String> {
            let args: DeleteArgs = parse(args)?;
            self.check(&args).map(drop)
        })();
        Box::pin(std::future::ready(checked))
    }

    fn gate(&self, _args: &Value) -> Gate {
        Gate::Ask
    }

    fn preview<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Option<String>> {
        let preview = (|| -> Option<String> {
            let args: DeleteArgs = parse(args).ok()?;
            let target = self.check(&args).ok()?;
            Some(cap_preview(Self::preview_of(&target)))
        })();
        Box::pin(std::future::ready(preview))
    }

    fn call<'a>(&'a self, args: Value, _ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        ready(Ok(self.delete(&args)))
    }
}
