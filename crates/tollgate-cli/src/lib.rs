//! # tollgate-cli
//!
//! The `tollgate` command line (docs/cli.md) as a library: the binary parses [`args::Cli`], calls
//! [`execute`] and exits with its [`exit::Exit`] code, so a program or a test can run any command in process.
//!
//! ```rust
//! use clap::Parser;
//! use tollgate_cli::args::Cli;
//! use tollgate_cli::exit::Exit;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let config = dir.path().join("tollgate.toml");
//! # std::fs::write(&config, "[store]\nurl = \"sqlite://runs.db\"\n[workspace]\nroot = \"files\"\n")?;
//! # std::fs::create_dir_all(dir.path().join("files"))?;
//! # let config = config.to_str().unwrap_or_default();
//! // `tollgate --config tollgate.toml run --detach hello`, with no agents configured: the `demo` agent.
//! let cli = Cli::try_parse_from(["tollgate", "--config", config, "run", "--detach", "hello"])?;
//! let exit = tollgate_cli::execute(cli).await?; // prints the waiting line on stdout
//! assert_eq!((exit, exit.code()), (Exit::Waiting, 3)); // its `fs_write` call waits at the gate
//!
//! // A refused command is an error carrying its exit code and the message for stderr.
//! let cli = Cli::try_parse_from(["tollgate", "--server", "http://127.0.0.1:8080", "serve"])?;
//! let error = tollgate_cli::execute(cli).await.unwrap_err();
//! assert_eq!(error.exit, Exit::Usage);
//! # Ok(()) }
//! ```
//!
//! In local mode (the default) a command opens the store itself (SQLite `./tollgate.db` by default,
//! `TOLLGATE_STORE_URL` or the config to change it), drives runs in this process and ends once they
//! settle. With no configuration the built-in `demo` agent shows the whole approval cycle offline:
//!
//! ```text
//! $ tollgate run "hello"                # exit 3: run … is waiting for approval
//! $ tollgate approve 0193b0c6-2b1a-7c3d # exit 0: Saved note.txt.  (workspace/note.txt holds "hello")
//! ```
//!
//! With `--server URL` the same commands act through a Tollgate server's HTTP API (token from
//! `TOLLGATE_TOKEN`) and open no store ([`remote`]). `tollgate bench` runs docs/benchmarks.md's workloads
//! ([`mod@bench`]).
//!
//! A command that only reads, or changes only runs and grants that exist ([`args::Command::needs_existing_store`]:
//! all but `run`, `grant`, `serve` and `bench`), never creates the SQLite file: where it is missing, the
//! command answers as on an empty store (`no runs`, `no run matches …`) and the folder stays as it was.
//!
//! What it promises: data (and the waiting line) on stdout, messages on stderr, only JSON on stdout with
//! `--json`; exit codes per docs/cli.md ([`exit::Exit`]), the same in local and `--server` mode; and every
//! command that opens the store applies due deadlines first ([`tollgate_agent_runtime::Runtime::sweep`]).

/// `eprintln!` for what a person reads on the terminal: the text made safe to show
/// ([`tollgate_agent_core::terminal_safe`]), so no control or format character in it (from a model, a
/// tool, a provider, a server) acts on the terminal.
macro_rules! say {
    () => {
        eprintln!()
    };
    ($($arg:tt)*) => {
        eprintln!("{}", tollgate_agent_core::terminal_safe(&format!($($arg)*)))
    };
}

pub mod args;
pub mod backend;
pub mod bench;
pub mod commands;
mod context;
pub mod doctor;
pub mod duration;
pub mod exit;
pub mod local;
mod prompt;
pub mod remote;
pub mod render;
mod serve;
pub mod view;

use args::{Cli, Command};
use backend::Backend;
use commands::Context;
use exit::{CliError, Exit};
use local::{Local, StoreUse};
use remote::Remote;

/// Runs a parsed command line to its end and says how the process should exit.
pub async fn execute(cli: Cli) -> Result<Exit, CliError> {
    if let Some(server) = &cli.server {
        return match &cli.command {
            Command::Serve(_) | Command::Bench(_) => {
                Err(CliError::usage("--server is for the commands that act on runs, not for `serve` or `bench`"))
            }
            _ => {
                let remote = Remote::new(server, Remote::token_from_env())?;
                let ctx = Context::new(Backend::Remote(remote), cli.json, cli.quiet);
                commands::dispatch(&ctx, cli.command).await
            }
        };
    }
    if let Command::Bench(args) = &cli.command {
        return bench::bench(args, cli.json, cli.quiet).await;
    }
    let store_use = if cli.command.needs_existing_store() { StoreUse::Existing } else { StoreUse::Create };
    let local = Local::open(cli.config.as_deref(), store_use).await?;
    if let Command::Serve(serve) = &cli.command {
        let result = serve::serve(&local, serve).await;
        local.shutdown().await;
        return result;
    }
    if let Err(error) = local.runtime.sweep().await {
        // Deadlines are applied again by the next command; this one can still do its job.
        tracing::warn!(%error, "could not apply due deadlines");
    }
    let maintenance = local.spawn_maintenance();
    let ctx = Context::new(Backend::Local(Box::new(local)), cli.json, cli.quiet);
    let result = commands::dispatch(&ctx, cli.command).await;
    // Whatever this process started (a resume, a run taken over by the sweep) reaches its next durable
    // state before the process ends, its lease renewed meanwhile; no sweep takes on new work now.
    maintenance.wind_down();
    ctx.backend().drain().await;
    maintenance.stop();
    ctx.backend().shutdown().await;
    result
}

/// The process's redactor, set once the configuration is loaded: log lines and error messages pass
/// through it, so no configured secret (or a masked fragment of one) reaches the terminal.
static REDACTOR: std::sync::OnceLock<tollgate_agent_core::Redactor> = std::sync::OnceLock::new();

/// Installs the redactor of the loaded configuration (the first one installed stays).
pub fn install_redactor(redactor: tollgate_agent_core::Redactor) {
    let _ = REDACTOR.set(redactor);
}

/// `text` with every configured secret redacted (unchanged before a configuration is loaded).
pub fn redact(text: &str) -> std::borrow::Cow<'_, str> {
    match REDACTOR.get() {
        Some(redactor) => redactor.redact(text),
        None => std::borrow::Cow::Borrowed(text),
    }
}

/// stderr for log records, each record redacted and made safe for a terminal (the formatter writes a
/// record in one call): a line break, escape sequence or format character inside a field is shown as an
/// escape ([`tollgate_agent_core::terminal_safe_line`]), so a record stays one line and cannot repaint the
/// screen or forge another record. (The formatter itself writes no colours: tracing-subscriber's `ansi`
/// feature is off.)
struct RedactingStderr;

impl std::io::Write for RedactingStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let (record, end) = text.strip_suffix('\n').map_or((&*text, ""), |record| (record, "\n"));
        let clean = redact(record);
        let safe = tollgate_agent_core::terminal_safe_line(&clean);
        let mut stderr = std::io::stderr().lock();
        stderr.write_all(safe.as_bytes())?;
        stderr.write_all(end.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Sends log records to stderr: errors only with `-q`, warnings by default, more with each `-v`.
pub fn init_logging(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => tracing::Level::ERROR,
        (false, 0) => tracing::Level::WARN,
        (false, 1) => tracing::Level::INFO,
        (false, 2) => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(|| RedactingStderr)
        .with_max_level(level)
        .with_target(verbose > 1)
        .without_time()
        .try_init();
}
