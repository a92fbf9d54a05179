//! The workspace file tools: `fs_list` and `fs_read` (allow), `fs_write` and `fs_delete` (ask).
//!
//! Each reaches its path by the workspace walk (see [`crate::workspace`]): through directory fds, never
//! following a symlink beneath the root, reading and writing only regular files with a single name. It
//! checks in [`TypedTool::validate`] (an escape, a symlink on the way, a FIFO, socket or device, a file with
//! several hard links are refused before any gate) and walks again when it runs, because the file system
//! may have changed while the call waited for a person; whatever changes in between, the call only acts
//! on what it opened itself. Problems the model can act on (a missing file, a folder where a file was
//! expected) are error results for the model; only failures of the tool itself are [`ToolError`]s.
//!
//! - `fs_list` shows folders as `name/`, symlinks as `name@` (never followed), FIFOs, sockets and devices
//!   as `name (fifo)`, `name (socket)`, `name (character device)`, `name (block device)`.
//! - `fs_write` refuses a path whose last component is a symlink (it neither writes through the link nor
//!   replaces it), a folder, a special file or a file with several hard links. It writes a temporary file
//!   `.tollgate-XXXXXXXX.tmp` in the same folder (the replaced file's permission bits, else 0644 less the
//!   umask), syncs it and renames it over the target, so a reader never sees half a file; the temporary
//!   file is removed on any error. A replaced file gets a new inode (owner and hard links are not kept,
//!   which is why a multiply-linked file is refused rather than silently split).
//! - `fs_delete` removes a symlink itself (not what it points to), a file or special file by its name,
//!   and a folder recursively through folder fds, never following a symlink found inside.
//!
//! The previews of `fs_write` and `fs_delete` record what they saw (`observed.rs`); a call run
//! on a person's approval checks it still holds, through the folder fd it acts through, and touches
//! nothing if it does not: its error result says what changed. Policy judges each tool's `path` as
//! normalised ([`TypedTool::policy_paths`]); a delete acts on everything beneath its path. A grant
//! remembered on a write or a delete is proposed for its folder, resolved the same way (`crate::suggest`).
//!
//! `fs_list` lists at most [`MAX_WALK_ENTRIES`] entries, and a delete and
//! its preview walk a folder within the bounds of [`crate::walk`]: past them the delete is refused before
//! anything is removed. Every `validate`, `preview` and `call` runs on the blocking pool within a time
//! bound (10 s).

use crate::bounded::cap_preview;
use crate::call::{blocking_call, blocking_preview, blocking_validate, dot};
use crate::diff::unified_diff;
use crate::observed::{Seen, content_hash, recheck};
use crate::suggest::same_folder;
use crate::walk::{MAX_WALK_ENTRIES, TreeCount, Visit, remove_tree, walk};
use crate::workspace::{
    Entry, Located, PathError, Workspace, WorkspacePath, check_regular, entry_at, folder_names_capped, io_message,
    open_folder_at, open_regular, permissions, size,
};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::ffi::OsStr;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, BufRead, BufReader, Read, Write};
use tollgate_agent_core::{Gate, PolicyPath, Preview, ToolContext, ToolError, ToolOutput, TypedTool};

/// A file larger than this is read whole only with `offset`/`limit`.
const MAX_WHOLE_READ_BYTES: u64 = 10 * 1024 * 1024;
/// A file larger than this is summarised, not diffed, in a write preview.
const MAX_DIFF_BYTES: u64 = 1024 * 1024;
/// At most this many entries are named in a delete preview of a folder.
const MAX_PREVIEW_ENTRIES: usize = 50;

/// The workspace path of `given`, or the message refusing it.
fn workspace_path(workspace: &Workspace, given: &str) -> Result<WorkspacePath, String> {
    workspace.path(given).map_err(|e| e.to_string())
}

/// The `path` argument as operator policy judges it: normalised (`.` for the root); `subtree` when the
/// call acts on everything beneath it. None for a path that escapes the workspace, which `validate`
/// refuses before any gate.
pub(crate) fn policy_path(workspace: &Workspace, given: &str, subtree: bool) -> Vec<PolicyPath> {
    match workspace.path(given) {
        Ok(path) => vec![PolicyPath { pointer: "/path".to_owned(), path: path.shown(), subtree }],
        Err(_) => Vec::new(),
    }
}

// ---------------------------------------------------------------------------------------------- fs_list

/// `fs_list`: the entries of a workspace folder, sorted, folders with a trailing `/`.
pub struct FsList {
    workspace: Workspace,
}

/// The arguments of `fs_list`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Folder to list, relative to the workspace root.
    #[serde(default = "dot")]
    path: String,
}

impl FsList {
    /// The tool over this workspace.
    pub fn new(workspace: Workspace) -> Self {
        Self { workspace }
    }
}

/// Opens the folder to list; a missing one is `Err(None)` (validate lets it pass, the call reports it).
fn list_folder(workspace: &Workspace, path: &WorkspacePath) -> Result<OwnedFd, Option<String>> {
    let refuse = |e: PathError| if e.is_not_found() { None } else { Some(e.to_string()) };
    match workspace.locate(path).map_err(refuse)? {
        Located::Root(root) => Ok(root),
        Located::Entry { parent, entry: Entry::Folder(_) } => {
            Workspace::open_last_folder(parent.as_fd(), path).map_err(refuse)
        }
        Located::Entry { entry: Entry::Missing, .. } => Err(None),
        Located::Entry { entry: Entry::File(_), .. } => {
            Err(Some(format!("`{}` is a file, not a folder; use fs_read", path.given())))
        }
        Located::Entry { entry, .. } => Err(check_regular(&entry, path.given()).err().map(|e| e.to_string())),
    }
}

fn list(workspace: &Workspace, args: &ListArgs) -> ToolOutput {
    let path = match workspace_path(workspace, &args.path) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    let dir = match list_folder(workspace, &path) {
        Ok(dir) => dir,
        Err(Some(refused)) => return ToolOutput::error(refused),
        Err(None) => return ToolOutput::error(format!("cannot list `{}`: no such folder", args.path)),
    };
    let names = match folder_names_capped(dir.as_fd(), MAX_WALK_ENTRIES) {
        Ok(Some(names)) => names,
        Ok(None) => {
            return ToolOutput::error(format!(
                "cannot list `{}`: it holds more than {MAX_WALK_ENTRIES} entries; list a folder inside it or use fs_search",
                args.path
            ));
        }
        Err(e) => return ToolOutput::error(format!("cannot list `{}`: {}", args.path, io_message(&e))),
    };
    let lines: Vec<String> = names
        .iter()
        .filter_map(|name| {
            let shown = name.to_string_lossy();
            Some(match entry_at(dir.as_fd(), name) {
                Ok(Entry::Folder(_)) => format!("{shown}/"),
                Ok(Entry::Symlink) => format!("{shown}@"),
                Ok(Entry::Special(kind)) => format!("{shown} ({kind})"),
                // Removed since the folder was read.
                Ok(Entry::Missing) => return None,
                Ok(Entry::File(_)) | Err(_) => shown.into_owned(),
            })
        })
        .collect();
    if lines.is_empty() {
        return ToolOutput::text(format!("`{}` is empty", path.shown()));
    }
    ToolOutput::text(lines.join("\n"))
}

impl TypedTool for FsList {
    type Args = ListArgs;
    const NAME: &str = "fs_list";
    const DESCRIPTION: &str =
        "List the entries of a folder in the workspace, sorted; folders end with `/`, symlinks with `@`.";

    async fn validate(&self, args: &ListArgs) -> Result<(), String> {
        let (workspace, given) = (self.workspace.clone(), args.path.clone());
        blocking_validate(move || {
            let path = workspace_path(&workspace, &given)?;
            match list_folder(&workspace, &path) {
                Ok(_) | Err(None) => Ok(()),
                Err(Some(refused)) => Err(refused),
            }
        })
        .await
    }

    fn policy_paths(&self, args: &ListArgs) -> Vec<PolicyPath> {
        policy_path(&self.workspace, &args.path, false)
    }

    async fn call(&self, args: ListArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let workspace = self.workspace.clone();
        blocking_call(move || Ok(list(&workspace, &args))).await
    }
}

// ---------------------------------------------------------------------------------------------- fs_read

/// `fs_read`: a workspace file's text, whole or a range of lines.
pub struct FsRead {
    workspace: Workspace,
}

/// The arguments of `fs_read`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// File to read, relative to the workspace root.
    path: String,
    /// Lines to skip from the start (0 = from the first line).
    offset: Option<u64>,
    /// At most this many lines.
    #[schemars(range(min = 1))]
    limit: Option<u64>,
}

impl FsRead {
    /// The tool over this workspace.
    pub fn new(workspace: Workspace) -> Self {
        Self { workspace }
    }
}

/// Opens the regular file `path` names by the walk, for reading.
fn open_file(workspace: &Workspace, path: &WorkspacePath) -> Result<(File, rustix::fs::Stat), PathError> {
    let parent = workspace.open_parent(path, false)?;
    open_regular(parent.as_fd(), path.name().unwrap_or_default().as_ref(), path.given())
}

/// What `fs_read` says when it cannot open a file.
fn read_refusal(error: &PathError) -> String {
    match error {
        PathError::Folder { path } => format!("`{path}` is a folder; use fs_list"),
        PathError::NotFound { path } => format!("cannot read `{path}`: no such file"),
        other => other.to_string(),
    }
}

fn read(workspace: &Workspace, args: &ReadArgs) -> Result<ToolOutput, ToolError> {
    let path = match workspace_path(workspace, &args.path) {
        Ok(p) => p,
        Err(e) => return Ok(ToolOutput::error(e)),
    };
    let (file, stat) = match open_file(workspace, &path) {
        Ok(opened) => opened,
        Err(e) => return Ok(ToolOutput::error(read_refusal(&e))),
    };
    let cannot_read = |e: &io::Error| format!("cannot read `{}`: {}", args.path, io_message(e));
    if args.offset.is_none() && args.limit.is_none() {
        let len = size(&stat);
        if len > MAX_WHOLE_READ_BYTES {
            return Ok(ToolOutput::error(format!(
                "`{}` is {len} bytes; read it in parts with offset and limit",
                args.path
            )));
        }
        let mut bytes = Vec::new();
        // The file may grow while it is read: never more than the cap.
        return match file.take(MAX_WHOLE_READ_BYTES).read_to_end(&mut bytes) {
            Ok(_) => Ok(ToolOutput::bytes(&bytes)),
            Err(e) => Ok(ToolOutput::error(cannot_read(&e))),
        };
    }
    let skip = args.offset.unwrap_or(0);
    let limit = args.limit.unwrap_or(u64::MAX);
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    let mut out = Vec::new();
    let (mut seen, mut taken, mut more) = (0u64, 0u64, false);
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(|e| ToolError::new(cannot_read(&e)))?;
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

impl TypedTool for FsRead {
    type Args = ReadArgs;
    const NAME: &str = "fs_read";
    const DESCRIPTION: &str =
        "Read a text file in the workspace, whole or from line `offset` (lines to skip) for `limit` lines.";

    async fn validate(&self, args: &ReadArgs) -> Result<(), String> {
        let (workspace, given) = (self.workspace.clone(), args.path.clone());
        blocking_validate(move || {
            let path = workspace_path(&workspace, &given)?;
            // A missing file passes: the call says so.
            match open_file(&workspace, &path) {
                Ok(_) => Ok(()),
                Err(e) if e.is_not_found() => Ok(()),
                Err(e) => Err(read_refusal(&e)),
            }
        })
        .await
    }

    fn policy_paths(&self, args: &ReadArgs) -> Vec<PolicyPath> {
        policy_path(&self.workspace, &args.path, false)
    }

    async fn call(&self, args: ReadArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let workspace = self.workspace.clone();
        blocking_call(move || read(&workspace, &args)).await
    }
}

// --------------------------------------------------------------------------------------------- fs_write

/// `fs_write`: creates or replaces a workspace file (creating its folders). Asks first, with a diff.
pub struct FsWrite {
    workspace: Workspace,
}

/// The arguments of `fs_write`.
#[derive(Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// File to write, relative to the workspace root.
    path: String,
    /// The whole new content of the file.
    content: String,
}

/// What is at the path a write would go to.
enum WriteTarget {
    /// Nothing yet (perhaps not even its folders).
    New,
    /// A regular file with one name, to be replaced.
    Replace(rustix::fs::Stat),
}

impl FsWrite {
    /// The tool over this workspace.
    pub fn new(workspace: Workspace) -> Self {
        Self { workspace }
    }
}

/// What is at `path` in its opened folder: nothing, or a file that may be replaced.
fn write_target_at(parent: BorrowedFd<'_>, path: &WorkspacePath) -> Result<WriteTarget, PathError> {
    let name = path.name().ok_or_else(|| PathError::Folder { path: path.given().to_owned() })?;
    let entry = entry_at(parent, name.as_ref())
        .map_err(|e| PathError::Unreadable { path: path.given().to_owned(), message: io_message(&e) })?;
    match entry {
        Entry::Missing => Ok(WriteTarget::New),
        other => check_regular(&other, path.given()).map(WriteTarget::Replace),
    }
}

/// Checks a write without changing anything: the folders on the way may be missing.
fn check_write(workspace: &Workspace, path: &WorkspacePath) -> Result<WriteTarget, String> {
    match workspace.open_parent(path, false) {
        Ok(parent) => write_target_at(parent.as_fd(), path).map_err(|e| e.to_string()),
        Err(e) if e.is_not_found() => Ok(WriteTarget::New),
        Err(e) => Err(e.to_string()),
    }
}

/// Writes the file, after checking that what is at its path is what the approved preview saw
/// (`observed`): through the folder fd the write goes through when that folder exists, and as nothing
/// when it does not (it is created only after the check).
fn write(workspace: &Workspace, args: &WriteArgs, observed: Option<&Value>) -> ToolOutput {
    let path = match workspace_path(workspace, &args.path) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    let name = path.name().unwrap_or_default();
    let checked = match workspace.open_parent(&path, false) {
        Ok(parent) => {
            recheck(parent.as_fd(), name.as_ref(), &path.shown(), observed, "not written").map(|_| Some(parent))
        }
        Err(e) if e.is_not_found() => unchanged_missing(&path, observed, "not written").map(|()| None),
        Err(e) => Err(e.to_string()),
    };
    let parent = match checked {
        Ok(Some(parent)) => parent,
        Ok(None) => match workspace.open_parent(&path, true) {
            Ok(parent) => parent,
            Err(e) => return ToolOutput::error(e.to_string()),
        },
        Err(refused) => return ToolOutput::error(refused),
    };
    let target = match write_target_at(parent.as_fd(), &path) {
        Ok(target) => target,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    let (verb, mode) = match &target {
        WriteTarget::New => ("created", None),
        WriteTarget::Replace(stat) => ("replaced", Some(permissions(stat))),
    };
    match replace_file(parent.as_fd(), name.as_ref(), args.content.as_bytes(), mode) {
        Ok(()) => ToolOutput::text(format!("{verb} {} ({} bytes)", path.shown(), args.content.len())),
        Err(e) => ToolOutput::error(format!("cannot write `{}`: {}", args.path, io_message(&e))),
    }
}

/// Writes `content` to a temporary file in `dir`, syncs it and renames it to `name`: the name points at
/// the old content or the new, never at half of it, and nothing is ever written through a link.
fn replace_file(dir: BorrowedFd<'_>, name: &OsStr, content: &[u8], mode: Option<Mode>) -> io::Result<()> {
    let (temp, fd) = create_temp(dir)?;
    let written = (|| -> io::Result<()> {
        let mut file = File::from(fd);
        if let Some(mode) = mode {
            rustix::fs::fchmod(&file, mode)?;
        }
        file.write_all(content)?;
        file.sync_all()?;
        rustix::fs::renameat(dir, temp.as_str(), dir, name)?;
        Ok(())
    })();
    if written.is_err() {
        // Best effort: the write already failed, and that is what the model is told.
        let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
    }
    written?;
    // Makes the rename itself durable; the new content is in place whether or not this succeeds.
    let _ = rustix::fs::fsync(dir);
    Ok(())
}

/// Creates a fresh temporary file in `dir` (never following a link, never reusing a name).
fn create_temp(dir: BorrowedFd<'_>) -> io::Result<(String, OwnedFd)> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for attempt in 0..16u32 {
        let name = temp_name(attempt);
        match rustix::fs::openat(dir, name.as_str(), flags, Mode::from_raw_mode(0o644)) {
            Ok(fd) => return Ok((name, fd)),
            Err(Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(Errno::EXIST.into())
}

/// `.tollgate-XXXXXXXX.tmp`, with eight hex digits from a randomly keyed hash.
fn temp_name(attempt: u32) -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(attempt);
    hasher.write_u32(std::process::id());
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos());
    hasher.write_u128(nanos.unwrap_or(0));
    format!(".tollgate-{:08x}.tmp", hasher.finish() & 0xffff_ffff)
}

/// Checks, where the folder of `path` does not exist, that the approved preview saw nothing there either.
fn unchanged_missing(path: &WorkspacePath, observed: Option<&Value>, verb: &str) -> Result<(), String> {
    let Some(observed) = observed else { return Ok(()) };
    match Seen::deserialize(observed) {
        Ok(Seen::Missing) => Ok(()),
        Ok(before) => {
            let change = before.change_to(&Seen::Missing).unwrap_or_default();
            Err(format!("{verb}: `{}` changed since the preview: {change}", path.shown()))
        }
        Err(e) => Err(format!("{verb}: the record of what the preview of `{}` saw is unreadable ({e})", path.shown())),
    }
}

/// A preview's text with what it saw.
fn seen(text: String, seen: &Seen) -> Preview {
    let preview = Preview::new(text);
    match seen.to_value() {
        Some(value) => preview.with_observed(value),
        None => preview,
    }
}

/// What a write of `content` to `path` would do, and what is there now: nothing, or a file (with the
/// hash of its content when it was read to diff).
fn write_preview(workspace: &Workspace, path: &WorkspacePath, content: &str) -> Option<Preview> {
    let shown = path.shown();
    let stat = match check_write(workspace, path).ok()? {
        WriteTarget::New => return Some(seen(format!("create {shown} ({} bytes)", content.len()), &Seen::Missing)),
        WriteTarget::Replace(stat) => stat,
    };
    let replace = |len: u64| format!("replace {shown}: {len} bytes with {} bytes", content.len());
    if size(&stat) > MAX_DIFF_BYTES {
        return Some(seen(replace(size(&stat)), &Seen::file(&stat, None)));
    }
    let (file, opened) = open_file(workspace, path).ok()?;
    let mut old = Vec::new();
    if file.take(MAX_DIFF_BYTES + 1).read_to_end(&mut old).is_err() || old.len() as u64 > MAX_DIFF_BYTES {
        return Some(seen(replace(size(&opened)), &Seen::file(&opened, None)));
    }
    let saw = Seen::file(&opened, Some(content_hash(&old)));
    let Ok(old) = String::from_utf8(old) else { return Some(seen(replace(size(&opened)), &saw)) };
    if old == content {
        return Some(seen(format!("no change: {shown} already holds these {} bytes", content.len()), &saw));
    }
    let text = match unified_diff(&shown, &old, content) {
        Some(diff) => cap_preview(diff),
        None => replace(size(&opened)),
    };
    Some(seen(text, &saw))
}

impl TypedTool for FsWrite {
    type Args = WriteArgs;
    const NAME: &str = "fs_write";
    const DESCRIPTION: &str =
        "Create or replace a file in the workspace with the given content (folders are created as needed).";
    const GATE: Gate = Gate::Ask;

    async fn validate(&self, args: &WriteArgs) -> Result<(), String> {
        let (workspace, given) = (self.workspace.clone(), args.path.clone());
        blocking_validate(move || {
            let path = workspace_path(&workspace, &given)?;
            check_write(&workspace, &path).map(drop)
        })
        .await
    }

    async fn observed_preview(&self, args: &WriteArgs) -> Option<Preview> {
        let (workspace, args) = (self.workspace.clone(), args.clone());
        blocking_preview(move || {
            let path = workspace.path(&args.path).ok()?;
            write_preview(&workspace, &path, &args.content)
        })
        .await
    }

    fn policy_paths(&self, args: &WriteArgs) -> Vec<PolicyPath> {
        policy_path(&self.workspace, &args.path, false)
    }

    async fn call(&self, args: WriteArgs, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let workspace = self.workspace.clone();
        blocking_call(move || Ok(write(&workspace, &args, ctx.observed.as_ref()))).await
    }

    /// Writes in the same folder: `{"/path": "notes/*"}`.
    fn suggested_match(&self, args: &WriteArgs) -> Option<Map<String, Value>> {
        same_folder(&self.policy_paths(args))
    }
}

// -------------------------------------------------------------------------------------------- fs_delete

/// `fs_delete`: removes a workspace file, symlink or folder (with everything in it). Asks first.
pub struct FsDelete {
    workspace: Workspace,
}

/// The arguments of `fs_delete`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteArgs {
    /// File or folder to delete, relative to the workspace root.
    path: String,
}

impl FsDelete {
    /// The tool over this workspace.
    pub fn new(workspace: Workspace) -> Self {
        Self { workspace }
    }
}

/// The folder holding what a delete removes, opened by the walk; `None` when a folder on the way does
/// not exist (there is nothing to delete).
fn delete_parent(workspace: &Workspace, path: &WorkspacePath) -> Result<Option<OwnedFd>, String> {
    if path.is_root() {
        return Err("refusing to delete the workspace root".to_owned());
    }
    match workspace.open_parent(path, false) {
        Ok(parent) => Ok(Some(parent)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// What deleting `path` would remove, read the same way the delete walks, and what it saw: nothing, a
/// file, a link or special file, or a folder with every entry beneath it counted.
fn delete_preview(workspace: &Workspace, path: &WorkspacePath) -> Option<Preview> {
    let shown = path.shown();
    let missing = || seen(format!("nothing to delete: {shown} does not exist"), &Seen::Missing);
    let Some(parent) = delete_parent(workspace, path).ok()? else { return Some(missing()) };
    let name: &OsStr = path.name()?.as_ref();
    let stat = match rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(Errno::NOENT) => return Some(missing()),
        Err(_) => return None,
    };
    if let Some(node) = Seen::node(&stat) {
        let text = match &node {
            Seen::File { size, .. } => format!("delete {shown} ({size} bytes)"),
            Seen::Other { what, .. } if what == "symlink" => {
                format!("delete the symlink {shown} (not what it points to)")
            }
            Seen::Other { what, .. } => format!("delete {shown} ({what})"),
            Seen::Missing | Seen::Folder { .. } => return None,
        };
        return Some(seen(text, &node));
    }
    let folder = open_folder_at(parent.as_fd(), name).ok()?;
    let stat = rustix::fs::fstat(&folder).ok()?;
    let mut entries = Vec::new();
    let mut count = TreeCount::default();
    let walked = walk(folder, &shown, &mut |visited| {
        count.add(visited.entry);
        let child = visited.shown;
        let line = match visited.entry {
            Entry::Folder(_) => format!("  {child}/"),
            Entry::File(stat) => format!("  {child} ({} bytes)", size(stat)),
            Entry::Symlink => format!("  {child} (symlink)"),
            Entry::Special(kind) => format!("  {child} ({kind})"),
            Entry::Missing => return Visit::Enter,
        };
        if entries.len() < MAX_PREVIEW_ENTRIES {
            entries.push(line);
        }
        Visit::Enter
    });
    if let Err(limit) = walked {
        // Nothing observed: the delete counts the folder again and refuses it the same way.
        return Some(Preview::new(format!("cannot delete the folder {shown}/: {limit}; the delete will be refused")));
    }
    let TreeCount { files, folders, bytes } = count;
    let mut text =
        format!("delete the folder {shown}/ and everything in it: {files} file(s), {folders} folder(s), {bytes} bytes");
    for line in &entries {
        text.push('\n');
        text.push_str(line);
    }
    let listed = entries.len() as u64;
    if files + folders > listed {
        text.push_str(&format!("\n  … and {} more", files + folders - listed));
    }
    Some(seen(cap_preview(text), &Seen::folder(&stat, &count)))
}

/// Deletes what `args.path` names, after checking that it is what the approved preview saw
/// (`observed`) through the folder fd the delete goes through: a folder is counted first, so one past the
/// walk's bounds is refused before anything is removed, and a file's name is removed only with
/// `unlinkat` without `AT_REMOVEDIR`, which never removes a folder.
fn delete(workspace: &Workspace, args: &DeleteArgs, observed: Option<&Value>) -> ToolOutput {
    let path = match workspace_path(workspace, &args.path) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    let missing = || ToolOutput::error(format!("cannot delete `{}`: no such file or folder", args.path));
    let parent = match delete_parent(workspace, &path) {
        Ok(Some(parent)) => parent,
        Ok(None) => {
            return unchanged_missing(&path, observed, "not deleted").map_or_else(ToolOutput::error, |()| missing());
        }
        Err(e) => return ToolOutput::error(e),
    };
    let name: &OsStr = path.name().unwrap_or_default().as_ref();
    let shown = path.shown();
    let removed = match recheck(parent.as_fd(), name, &shown, observed, "not deleted") {
        Err(refused) => return ToolOutput::error(refused),
        Ok(Seen::Missing) => return missing(),
        Ok(Seen::Folder { .. }) => remove_tree(parent.as_fd(), name, &shown)
            .map(|()| format!("deleted the folder {shown}/"))
            .map_err(|e| e.to_string()),
        // A file, a symlink (itself, never what it points to) or a special file: only the name goes.
        Ok(_) => rustix::fs::unlinkat(&parent, name, AtFlags::empty())
            .map(|()| format!("deleted {shown}"))
            .map_err(|e| io_message(&e.into())),
    };
    match removed {
        Ok(message) => ToolOutput::text(message),
        Err(e) => ToolOutput::error(format!("cannot delete `{}`: {e}", args.path)),
    }
}

impl TypedTool for FsDelete {
    type Args = DeleteArgs;
    const NAME: &str = "fs_delete";
    const DESCRIPTION: &str = "Delete a file or a folder (with everything in it) in the workspace.";
    const GATE: Gate = Gate::Ask;

    async fn validate(&self, args: &DeleteArgs) -> Result<(), String> {
        let (workspace, given) = (self.workspace.clone(), args.path.clone());
        blocking_validate(move || {
            let path = workspace_path(&workspace, &given)?;
            delete_parent(&workspace, &path).map(drop)
        })
        .await
    }

    async fn observed_preview(&self, args: &DeleteArgs) -> Option<Preview> {
        let (workspace, given) = (self.workspace.clone(), args.path.clone());
        blocking_preview(move || {
            let path = workspace.path(&given).ok()?;
            delete_preview(&workspace, &path)
        })
        .await
    }

    fn policy_paths(&self, args: &DeleteArgs) -> Vec<PolicyPath> {
        policy_path(&self.workspace, &args.path, true)
    }

    async fn call(&self, args: DeleteArgs, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let workspace = self.workspace.clone();
        blocking_call(move || Ok(delete(&workspace, &args, ctx.observed.as_ref()))).await
    }

    /// Deletes in the same folder: `{"/path": "notes/*"}` (a folder there goes with all it holds).
    fn suggested_match(&self, args: &DeleteArgs) -> Option<Map<String, Value>> {
        same_folder(&self.policy_paths(args))
    }
}
