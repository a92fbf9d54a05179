//! `shell` (ask): runs one program with arguments, without a shell, in the workspace root.
//!
//! The promise: what the approver reads in the preview is what runs. `argv[0]` is resolved before the
//! gate — a name with `/` is a workspace path (refused if it escapes, symlinks included), a bare name is
//! looked up on the absolute entries of `PATH` (never the workspace, even if `PATH` says `.`) — and the
//! preview names the resolved program, the arguments quoted as a POSIX shell would need them, the working
//! directory and the timeout. Nothing is expanded: `*`, `$HOME` and `;` reach the program as written.
//!
//! The program runs with stdin closed, in the workspace root, with only a few environment variables
//! passed through ([`PASSED_ENV`]) so the runtime's own secrets (API keys, tokens) do not leak to a
//! command the model chose. stdout and stderr are each kept up to [`MAX_OUTPUT_BYTES`] and drained past
//! it, so a chatty program never blocks on a full pipe. At the timeout the process is killed and reaped.
//! Arguments are not path-checked: a command may name files outside the workspace, which is why the gate
//! asks. Processes the program itself starts in the background are not tracked.

use crate::bounded::CappedBytes;
use crate::call::parse;
use crate::workspace::{Workspace, io_message};
use serde::Deserialize;
use serde_json::{Value, json};
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tollgate_core::{BoxFuture, Gate, Tool, ToolContext, ToolError, ToolOutput};

/// Seconds a command may run when `timeout_secs` is not given.
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// The largest `timeout_secs` accepted.
pub const MAX_TIMEOUT_SECS: u64 = 600;
/// Bytes kept of each of stdout and stderr.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// The environment variables a command inherits; every other one is removed.
pub const PASSED_ENV: [&str; 9] = ["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"];

/// `shell`: runs `argv` (no shell expansion) in the workspace root, with a timeout and capped output.
pub struct Shell {
    workspace: Workspace,
    schema: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShellArgs {
    argv: Vec<String>,
    #[serde(default = "default_timeout_secs")]
    timeout_secs: u64,
}

fn default_timeout_secs() -> u64 {
    DEFAULT_TIMEOUT_SECS
}

/// Where `argv[0]` was found.
enum Program {
    /// A file in the workspace, named by a path with `/`.
    InWorkspace {
        /// Its real location.
        real: PathBuf,
        /// Its workspace-relative path.
        shown: String,
    },
    /// A program found on `PATH`.
    OnPath(PathBuf),
}

impl Program {
    fn real(&self) -> &Path {
        match self {
            Program::InWorkspace { real, .. } | Program::OnPath(real) => real,
        }
    }

    fn describe(&self) -> String {
        match self {
            Program::InWorkspace { shown, .. } => format!("{shown} (in the workspace)"),
            Program::OnPath(real) => format!("{} (found on PATH)", real.display()),
        }
    }
}

/// A call whose arguments were checked and whose program was found.
struct Plan {
    argv: Vec<String>,
    program: Program,
    cwd: PathBuf,
    timeout: Duration,
}

impl Plan {
    fn command_line(&self) -> String {
        self.argv.iter().map(|arg| quote_for_display(arg)).collect::<Vec<_>>().join(" ")
    }
}

impl Shell {
    /// The tool over this workspace.
    pub fn new(workspace: Workspace) -> Self {
        let schema = json!({
            "type": "object",
            "properties": {
                "argv": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 1,
                    "description": "The program and its arguments, passed as they are (no shell: no globs, variables, pipes or redirections). A program name without `/` is looked up on PATH; with `/` it is a path in the workspace."
                },
                "timeout_secs": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_SECS, "default": DEFAULT_TIMEOUT_SECS, "description": "Seconds before the program is killed."}
            },
            "required": ["argv"],
            "additionalProperties": false
        });
        Self { workspace, schema }
    }

    fn check(&self, args: &Value) -> Result<Plan, String> {
        let args: ShellArgs = parse(args)?;
        let Some(name) = args.argv.first() else {
            return Err("invalid arguments: argv must name at least the program".to_owned());
        };
        if name.is_empty() {
            return Err("invalid arguments: the program name (argv[0]) is empty".to_owned());
        }
        if args.argv.iter().any(|arg| arg.contains('\0')) {
            return Err("invalid arguments: an argument contains a NUL byte".to_owned());
        }
        if !(1..=MAX_TIMEOUT_SECS).contains(&args.timeout_secs) {
            return Err(format!("invalid arguments: timeout_secs must be between 1 and {MAX_TIMEOUT_SECS}"));
        }
        let program = if name.contains('/') {
            let resolved = self.workspace.resolve(name).map_err(|e| e.to_string())?;
            if !is_executable_file(&resolved.real) {
                return Err(format!("program `{name}` is not an executable file in the workspace"));
            }
            Program::InWorkspace { real: resolved.real, shown: resolved.relative }
        } else {
            let path = std::env::var_os("PATH").unwrap_or_default();
            Program::OnPath(find_on_path(name, &path).ok_or_else(|| format!("program `{name}` not found on PATH"))?)
        };
        let cwd = self.workspace.canonical_root().map_err(|e| e.to_string())?;
        Ok(Plan { argv: args.argv, program, cwd, timeout: Duration::from_secs(args.timeout_secs) })
    }

    async fn run(&self, args: &Value) -> Result<ToolOutput, ToolError> {
        let plan = match self.check(args) {
            Ok(plan) => plan,
            Err(e) => return Ok(ToolOutput::error(e)),
        };
        let shown = plan.command_line();
        let mut command = tokio::process::Command::new(plan.program.real());
        command
            .args(plan.argv.iter().skip(1))
            .current_dir(&plan.cwd)
            .env_clear()
            .envs(PASSED_ENV.iter().filter_map(|key| std::env::var_os(key).map(|value| (key, value))))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // The program sees argv[0] as the model wrote it, as it would from a shell.
        #[cfg(unix)]
        if let Some(name) = plan.argv.first() {
            command.arg0(name);
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => return Ok(ToolOutput::error(format!("cannot run `{shown}`: {}", io_message(&e)))),
        };
        let pid = child.id();
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let mut out = CappedBytes::new(MAX_OUTPUT_BYTES);
        let mut err = CappedBytes::new(MAX_OUTPUT_BYTES);
        let finished = tokio::time::timeout(plan.timeout, async {
            let (read_out, read_err, status) =
                tokio::join!(drain(stdout, &mut out), drain(stderr, &mut err), child.wait());
            read_out.and(read_err).and(status)
        })
        .await;
        let status = match finished {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                return Err(ToolError::new(format!("lost track of `{shown}`: {}", io_message(&e))));
            }
            Err(_elapsed) => {
                // Kill and reap now rather than leave it to the drop: the result says it is gone.
                let killed = child.start_kill().is_ok();
                let _ = child.wait().await;
                let what = match (pid, killed) {
                    (Some(pid), true) => format!("killed `{shown}` (pid {pid})"),
                    _ => format!("`{shown}` was stopped"),
                };
                let head = format!("timed out after {}s; {what}", plan.timeout.as_secs());
                return Ok(ToolOutput::error(report(&head, &out, &err)));
            }
        };
        let head = describe_status(status);
        let text = report(&head, &out, &err);
        Ok(if status.success() { ToolOutput::text(text) } else { ToolOutput::error(text) })
    }
}

/// Reads a pipe to its end into `into` (which keeps what fits and counts the rest).
async fn drain(pipe: Option<impl AsyncRead + Unpin>, into: &mut CappedBytes) -> std::io::Result<()> {
    let Some(mut pipe) = pipe else { return Ok(()) };
    let mut chunk = vec![0u8; 8192];
    loop {
        let n = pipe.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        into.push(&chunk[..n]);
    }
}

fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit code {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("killed by signal {signal}");
        }
    }
    format!("ended: {status}")
}

/// `head`, then each non-empty stream under its own header.
fn report(head: &str, out: &CappedBytes, err: &CappedBytes) -> String {
    if out.is_empty() && err.is_empty() {
        return format!("{head}, no output");
    }
    let mut text = head.to_owned();
    for (name, stream) in [("stdout", out), ("stderr", err)] {
        if !stream.is_empty() {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!("--- {name} ---\n"));
            text.push_str(&stream.text(name));
        }
    }
    text
}

/// The first executable file called `name` in the absolute entries of `path` (a `PATH` value).
/// Relative and empty entries are skipped: they would resolve against the workspace, where the model can
/// write.
fn find_on_path(name: &str, path: &std::ffi::OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable_file(candidate))
}

fn is_executable_file(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else { return false };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}

/// An argument as a POSIX shell would need it written: bare when it holds only safe characters, else in
/// single quotes, or as `$'…'` with escapes when it holds control characters (so a newline in an argument
/// cannot make the preview look like two commands).
fn quote_for_display(arg: &str) -> Cow<'_, str> {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_-+=/.,:@%".contains(c);
    if !arg.is_empty() && arg.chars().all(safe) {
        return Cow::Borrowed(arg);
    }
    if !arg.chars().any(char::is_control) {
        return Cow::Owned(format!("'{}'", arg.replace('\'', r"'\''")));
    }
    let mut quoted = String::from("$'");
    for c in arg.chars() {
        match c {
            '\n' => quoted.push_str(r"\n"),
            '\t' => quoted.push_str(r"\t"),
            '\r' => quoted.push_str(r"\r"),
            '\\' => quoted.push_str(r"\\"),
            '\'' => quoted.push_str(r"\'"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => quoted.push(c),
        }
    }
    quoted.push('\'');
    Cow::Owned(quoted)
}

impl Tool for Shell {
    fn name(&self) -> &str {
        "shell"
    }

    fn description(&self) -> &str {
        "Run a program with arguments (no shell expansion) in the workspace root; returns the exit code, stdout and stderr."
    }

    fn parameters(&self) -> &Value {
        &self.schema
    }

    fn validate<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Result<(), String>> {
        let checked = (|| -> Result<(), String> {
            self.check(args).map(drop)
        })();
        Box::pin(std::future::ready(checked))
    }

    fn gate(&self, _args: &Value) -> Gate {
        Gate::Ask
    }

    fn preview<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Option<String>> {
        let preview = (|| -> Option<String> {
            let plan = self.check(args).ok()?;
            Some(format!(
                "run: {}\nprogram: {}\nin: {} (the workspace root)\ntimeout: {}s",
                plan.command_line(),
                plan.program.describe(),
                plan.cwd.display(),
                plan.timeout.as_secs()
            ))
        })();
        Box::pin(std::future::ready(preview))
    }

    fn call<'a>(&'a self, args: Value, _ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move { self.run(&args).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_quoting_round_trips_through_a_shell_reader() {
        assert_eq!(quote_for_display("ls"), "ls");
        assert_eq!(quote_for_display("src/main.rs"), "src/main.rs");
        assert_eq!(quote_for_display(""), "''");
        assert_eq!(quote_for_display("a b"), "'a b'");
        assert_eq!(quote_for_display("*.rs"), "'*.rs'");
        assert_eq!(quote_for_display("$HOME;rm"), "'$HOME;rm'");
        assert_eq!(quote_for_display("it's"), r"'it'\''s'");
        assert_eq!(quote_for_display("a\nrm -rf x"), r"$'a\nrm -rf x'");
        assert_eq!(quote_for_display("bell\u{7}"), r"$'bell\u0007'");
    }

    #[test]
    fn path_lookup_skips_relative_entries() {
        let dir = tollgate_testkit::scratch_dir("path-lookup");
        let tool = dir.join("mytool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap_or_else(|e| panic!("{e}"));
        let path = std::env::join_paths([Path::new("relative"), &dir]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(find_on_path("mytool", &path), None, "not executable yet");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(find_on_path("mytool", &path), Some(tool));
        }
        assert_eq!(find_on_path("mytool", std::ffi::OsStr::new("relative")), None);
    }
}
