//! `shell` (ask): runs one program with arguments, without a shell, in the workspace root.
//!
//! The promise: what the approver reads in the preview is what runs, and under what confinement. `argv[0]`
//! is resolved before the gate — a name with `/` is a workspace path (refused if it escapes, symlinks
//! included), a bare name is looked up on the absolute entries of `PATH` (never the workspace, even if
//! `PATH` says `.`) — and the preview names the resolved program, the arguments quoted as a POSIX shell
//! would need them, the working directory, the timeout and the sandbox. Nothing is expanded: `*`, `$HOME`
//! and `;` reach the program as written.
//!
//! The program runs with stdin closed, in the workspace root, with only a few environment variables
//! passed through ([`PASSED_ENV`]) so the runtime's own secrets (API keys, tokens) do not leak to a
//! command the model chose, and `TMPDIR` set to a private folder removed after the call. It leads its own
//! process group and, on Linux, runs under Landlock unless the options turn that off: it may write only in
//! the workspace and that folder and cannot read `/proc` or Tollgate's files; unless the options allow the
//! network, a seccomp filter beside Landlock leaves it no socket of any family (TCP, UDP, Unix sockets by
//! path or abstract, netlink, …). The preview's `sandbox:` line says what this kernel confines and names
//! every channel left open (see [`crate::sandbox`]). The result comes when the program exits: its output
//! is read for up to [`OUTPUT_GRACE`] more (a background child may hold the pipes), then whatever it left
//! running in its group is killed. At the timeout the whole group is killed and the leader reaped.
//! stdout and stderr are capped separately, each with its own cut marker, so that a result stays under
//! the core's 50,000-byte result cap and stderr is never crowded out; both are drained past the cap, so
//! a chatty program never blocks on a full pipe. Arguments are not path-checked: a command may name files
//! outside the workspace (the sandbox, where enforced, decides what it can touch), which is why the gate
//! asks.

use crate::bounded::{CappedBytes, prefix_at_char_boundary};
use crate::sandbox::{self, Confinement, Grant, SandboxMode, SandboxSupport};
use crate::suggest::one;
use crate::workspace::{Workspace, io_message};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tollgate_agent_core::{Gate, ToolContext, ToolError, ToolOutput, TypedTool};

/// Seconds a command may run when `timeout_secs` is not given.
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// The largest `timeout_secs` accepted.
pub const MAX_TIMEOUT_SECS: u64 = 600;
/// Bytes of stdout and stderr shown in one result, together: each stream gets half, or more when the
/// other needs less. With the status line, headers and cut markers a result stays under the core's
/// 50,000-byte result cap.
pub const MAX_OUTPUT_BYTES: usize = 48_000;
/// How long output is still read after the program exited, for what a background child keeps writing
/// (or holds open) before its group is killed.
pub const OUTPUT_GRACE: Duration = Duration::from_millis(500);
/// The environment variables a command inherits; every other one is removed. `TMPDIR` is then set to the
/// call's private temporary folder.
pub const PASSED_ENV: [&str; 9] = ["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"];
/// The longest command line quoted in a result's status line.
const MAX_SHOWN_COMMAND_BYTES: usize = 200;

/// How `shell` confines its commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShellOptions {
    /// Landlock and the seccomp filter, or not (default [`SandboxMode::Auto`]).
    pub sandbox: SandboxMode,
    /// A sandboxed command may open sockets of every family (default false: the seccomp filter refuses
    /// them all). Unconfined commands always can.
    pub network: bool,
}

/// `shell`: runs `argv` (no shell expansion) in the workspace root, with a timeout, capped output and,
/// where the kernel has it, a sandbox of Landlock and a seccomp filter.
pub struct Shell {
    workspace: Workspace,
    options: ShellOptions,
    support: SandboxSupport,
}

/// The arguments of `shell`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellArgs {
    #[schemars(
        length(min = 1),
        description = "The program and its arguments, passed as they are (no shell: no globs, variables, pipes or \
                       redirections). A program name without `/` is looked up on PATH; with `/` it is a path in the \
                       workspace."
    )]
    argv: Vec<String>,
    /// Seconds before the program is killed.
    #[serde(default = "default_timeout_secs")]
    #[schemars(range(min = 1, max = MAX_TIMEOUT_SECS))]
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
    confinement: Confinement,
}

impl Plan {
    fn command_line(&self) -> String {
        self.argv.iter().map(|arg| quote_for_display(arg)).collect::<Vec<_>>().join(" ")
    }
}

/// How the program's run ended.
enum Ending {
    /// It exited (or was killed by someone else); its group was killed after the grace.
    Exited(ExitStatus),
    /// The timeout passed and its group was killed.
    TimedOut {
        /// The group id, when a process was still there to kill.
        killed: Option<i32>,
    },
}

impl Shell {
    /// The tool over this workspace, with the default options: sandboxed where the kernel allows, no
    /// network.
    pub fn new(workspace: Workspace) -> Self {
        Self::with_options(workspace, ShellOptions::default())
    }

    /// The tool over this workspace with these options, on this machine's [`sandbox::sandbox_support`].
    pub fn with_options(workspace: Workspace, options: ShellOptions) -> Self {
        Self::with_sandbox_support(workspace, options, sandbox::sandbox_support())
    }

    /// The tool as if the kernel offered `support` (for a caller that probed it already, and for tests).
    /// A command that then cannot be confined as promised is refused when it runs.
    pub fn with_sandbox_support(workspace: Workspace, options: ShellOptions, support: SandboxSupport) -> Self {
        Self { workspace, options, support }
    }

    fn check(&self, args: &ShellArgs) -> Result<Plan, String> {
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
        let confinement = Confinement::decide(self.options.sandbox, self.options.network, &self.support)?;
        Ok(Plan { argv: args.argv.clone(), program, cwd, timeout: Duration::from_secs(args.timeout_secs), confinement })
    }

    async fn run(&self, args: &ShellArgs) -> Result<ToolOutput, ToolError> {
        let plan = match self.check(args) {
            Ok(plan) => plan,
            Err(e) => return Ok(ToolOutput::error(e)),
        };
        let mut shown = plan.command_line();
        if shown.len() > MAX_SHOWN_COMMAND_BYTES {
            shown = format!("{}…", prefix_at_char_boundary(&shown, MAX_SHOWN_COMMAND_BYTES));
        }
        // Declared before the command, so it is removed only after the command's group is dead.
        let temp = match tempfile::Builder::new().prefix("tollgate-shell-").tempdir() {
            Ok(temp) => temp,
            Err(e) => return Ok(ToolOutput::error(format!("cannot create a temporary folder: {}", io_message(&e)))),
        };
        let mut command = tokio::process::Command::new(plan.program.real());
        command
            .args(plan.argv.iter().skip(1))
            .current_dir(&plan.cwd)
            .env_clear()
            .envs(PASSED_ENV.iter().filter_map(|key| std::env::var_os(key).map(|value| (key, value))))
            .env("TMPDIR", temp.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // The program sees argv[0] as the model wrote it, as it would from a shell.
        #[cfg(unix)]
        if let Some(name) = plan.argv.first() {
            command.arg0(name);
        }
        let grant = Grant { workspace: &plan.cwd, temp: temp.path(), program: plan.program.real() };
        let mut running = match sandbox::spawn(command, &plan.confinement, grant).await {
            Ok(running) => running,
            Err(e) => return Ok(ToolOutput::error(format!("cannot run `{shown}`: {e}"))),
        };
        let (stdout, stderr) = (running.child().stdout.take(), running.child().stderr.take());
        let mut out = CappedBytes::new(MAX_OUTPUT_BYTES);
        let mut err = CappedBytes::new(MAX_OUTPUT_BYTES);
        let ending = {
            let streams = async {
                let (read_out, read_err) = tokio::join!(drain(stdout, &mut out), drain(stderr, &mut err));
                read_out.and(read_err)
            };
            tokio::pin!(streams);
            let mut read: Option<std::io::Result<()>> = None;
            let deadline = tokio::time::sleep(plan.timeout);
            tokio::pin!(deadline);
            let exited = loop {
                tokio::select! {
                    result = &mut streams, if read.is_none() => read = Some(result),
                    exited = running.leader_exited() => break Some(exited),
                    () = &mut deadline => break None,
                }
            };
            let ending = match exited {
                Some(Ok(status)) => {
                    // The pipes stay open while a background child holds them: read what comes within the
                    // grace, then kill the group.
                    if read.is_none() {
                        read = tokio::time::timeout(OUTPUT_GRACE, &mut streams).await.ok();
                    }
                    running.kill_group();
                    Ok(Ending::Exited(status))
                }
                Some(Err(e)) => Err(e),
                None => {
                    let pgid = running.pgid();
                    let killed = running.kill_group();
                    // The group is dead, so the pipes end at once unless a process left the group.
                    if read.is_none() {
                        read = tokio::time::timeout(OUTPUT_GRACE, &mut streams).await.ok();
                    }
                    running.reap().await.map(|_| Ending::TimedOut { killed: pgid.filter(|_| killed) })
                }
            };
            match read {
                Some(Err(e)) => Err(e),
                _ => ending,
            }
        };
        let ending = match ending {
            Ok(ending) => ending,
            Err(e) => {
                let _ = running.reap().await;
                return Err(ToolError::new(format!("lost track of `{shown}`: {}", io_message(&e))));
            }
        };
        drop(running);
        drop(temp);
        Ok(match ending {
            Ending::Exited(status) => {
                let text = report(&describe_status(status), &out, &err);
                if status.success() { ToolOutput::text(text) } else { ToolOutput::error(text) }
            }
            Ending::TimedOut { killed } => {
                let what = match killed {
                    Some(pgid) => format!("killed `{shown}` and its process group {pgid}"),
                    None => format!("`{shown}` was stopped"),
                };
                ToolOutput::error(report(&format!("timed out after {}s; {what}", plan.timeout.as_secs()), &out, &err))
            }
        })
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

/// `head`, then each non-empty stream under its own header, each cut to its share of
/// [`MAX_OUTPUT_BYTES`] with its own marker.
fn report(head: &str, out: &CappedBytes, err: &CappedBytes) -> String {
    if out.is_empty() && err.is_empty() {
        return format!("{head}, no output");
    }
    let half = MAX_OUTPUT_BYTES / 2;
    let (out_share, err_share) = match (out.text_len(), err.text_len()) {
        (o, e) if o + e <= MAX_OUTPUT_BYTES => (o, e),
        (o, _) if o <= half => (o, MAX_OUTPUT_BYTES - o),
        (_, e) if e <= half => (MAX_OUTPUT_BYTES - e, e),
        _ => (half, half),
    };
    let mut text = head.to_owned();
    for (name, stream, share) in [("stdout", out, out_share), ("stderr", err, err_share)] {
        if !stream.is_empty() {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!("--- {name} ---\n"));
            text.push_str(&stream.text(name, share));
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

impl TypedTool for Shell {
    type Args = ShellArgs;
    const NAME: &str = "shell";
    const DESCRIPTION: &str = "Run a program with arguments (no shell expansion) in the workspace root; returns the exit code, stdout and stderr. The program may be sandboxed: writes outside the workspace and $TMPDIR, reads of /proc and private files, and network access can be denied.";
    const GATE: Gate = Gate::Ask;

    async fn validate(&self, args: &ShellArgs) -> Result<(), String> {
        self.check(args).map(drop)
    }

    async fn preview(&self, args: &ShellArgs) -> Option<String> {
        let plan = self.check(args).ok()?;
        Some(format!(
            "run: {}\nprogram: {}\nin: {} (the workspace root)\ntimeout: {}s\nsandbox: {}",
            plan.command_line(),
            plan.program.describe(),
            plan.cwd.display(),
            plan.timeout.as_secs(),
            plan.confinement.describe()
        ))
    }

    async fn call(&self, args: ShellArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        self.run(&args).await
    }

    /// The exact command: `{"/argv": ["git", "status"]}` (any `timeout_secs`).
    fn suggested_match(&self, args: &ShellArgs) -> Option<Map<String, Value>> {
        Some(one("/argv", Value::from(args.argv.clone())))
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
        let dir = tollgate_agent_testkit::scratch_dir("path-lookup");
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
