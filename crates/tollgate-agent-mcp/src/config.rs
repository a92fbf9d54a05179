//! How to start one MCP server: the plain data the config crate maps `[[mcp_servers]]` into.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One MCP server, started as a child process speaking MCP over stdio.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpServerConfig {
    /// The server's name: the `SERVER` in `SERVER__TOOL`, and how messages name it.
    pub name: String,
    /// The program: a path (already resolved, see [`resolve_command`]) or a name looked up on `PATH`.
    pub command: PathBuf,
    /// Arguments passed to the program as they are (no shell).
    pub args: Vec<String>,
    /// Variables added to the server's environment (after [`DEFAULT_ENV`], or after Tollgate's whole
    /// environment with [`inherit_env`](Self::inherit_env)).
    pub env: BTreeMap<String, String>,
    /// Start the server with Tollgate's whole environment. Off by default: a server gets only the
    /// variables of [`DEFAULT_ENV`] that are set, plus [`env`](Self::env), so provider keys and tokens
    /// never reach it (as the official MCP SDKs do).
    pub inherit_env: bool,
    /// The server's working directory; `None` keeps Tollgate's. The app sets the config file's folder, so
    /// relative paths in `args` mean what docs/configuration.md says they mean.
    pub working_dir: Option<PathBuf>,
    /// How long one `tools/call` may take before the model is told it timed out.
    pub call_timeout: Duration,
    /// How long spawning, the MCP handshake and the tool listing may take together.
    pub start_timeout: Duration,
}

/// The variables an MCP server gets from Tollgate's environment unless
/// [`inherit_env`](McpServerConfig::inherit_env) is set: what the official MCP SDKs pass on POSIX.
pub const DEFAULT_ENV: [&str; 6] = ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];

impl McpServerConfig {
    /// The default [`call_timeout`](Self::call_timeout).
    pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
    /// The default [`start_timeout`](Self::start_timeout); generous because `npx -y` may download first.
    pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(60);

    /// A server with no arguments, no extra environment and the default timeouts.
    pub fn new(name: impl Into<String>, command: impl Into<PathBuf>) -> Self {
        Self {
            name: name.into(),
            command: command.into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            inherit_env: false,
            working_dir: None,
            call_timeout: Self::DEFAULT_CALL_TIMEOUT,
            start_timeout: Self::DEFAULT_START_TIMEOUT,
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends several arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Adds one environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Starts the server with Tollgate's whole environment (see [`inherit_env`](Self::inherit_env)).
    pub fn inherit_env(mut self, inherit: bool) -> Self {
        self.inherit_env = inherit;
        self
    }

    /// Sets the working directory.
    pub fn working_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.working_dir = Some(dir.into());
        self
    }

    /// Sets the per-call timeout.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Sets the start timeout.
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }
}

/// Resolves a configured `command` per docs/configuration.md: one containing `/` is a path relative to `config_dir`
/// (an absolute path stays as it is); any other is a program name left for the `PATH` lookup.
///
/// Pass an absolute `config_dir`: a relative program path is ambiguous once the server runs in another
/// working directory.
pub fn resolve_command(command: &str, config_dir: &Path) -> PathBuf {
    if command.contains('/') { config_dir.join(command) } else { PathBuf::from(command) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_with_a_slash_is_relative_to_the_config_folder() {
        let dir = Path::new("/etc/tollgate");
        assert_eq!(resolve_command("./bin/server", dir), PathBuf::from("/etc/tollgate/./bin/server"));
        assert_eq!(resolve_command("bin/server", dir), PathBuf::from("/etc/tollgate/bin/server"));
        assert_eq!(resolve_command("/usr/bin/server", dir), PathBuf::from("/usr/bin/server"));
    }

    #[test]
    fn a_bare_command_is_left_for_the_path_lookup() {
        assert_eq!(resolve_command("npx", Path::new("/etc/tollgate")), PathBuf::from("npx"));
    }
}
