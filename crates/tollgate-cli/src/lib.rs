//! # tollgate-cli
//!
//! The `tollgate` command line (CLI.md), in local mode: it opens the store itself (SQLite
//! `./tollgate.db` by default, `TOLLGATE_STORE_URL` to change it), drives runs in this process and exits
//! once they settle. There is no `--server` and no config file yet; with no configuration the built-in
//! `demo` agent shows the whole approval cycle offline:
//!
//! ```text
//! $ tollgate run "hello"            # exit 3: run … is waiting for approval
//! $ tollgate approve 0193b0c6       # exit 0: Saved note.txt.  (workspace/note.txt holds "hello")
//! ```
//!
//! What it promises: data (and the waiting line) on stdout, messages on stderr, only JSON on stdout with
//! `--json`; exit codes per CLI.md ([`exit::Exit`]); and every command that opens the store applies due
//! deadlines first ([`tollgate_runtime::Runtime::sweep`]).

pub mod args;
pub mod commands;
pub mod duration;
pub mod exit;
pub mod local;
mod prompt;
pub mod render;
mod serve;

use args::Cli;
use commands::Context;
use exit::{CliError, Exit};
use local::Local;

/// Runs a parsed command line to its end and says how the process should exit.
pub async fn execute(cli: Cli) -> Result<Exit, CliError> {
    let local = Local::open(cli.config.as_deref()).await?;
    if let args::Command::Serve(serve) = &cli.command {
        let result = serve::serve(&local, serve).await;
        local.shutdown().await;
        return result;
    }
    if let Err(error) = local.runtime.sweep().await {
        // Deadlines are applied again by the next command; this one can still do its job.
        tracing::warn!(%error, "could not apply due deadlines");
    }
    let background = local.spawn_background();
    let ctx = Context::new(local, cli.json, cli.quiet);
    let result = commands::dispatch(&ctx, cli.command).await;
    // Whatever this process started (a resume, a run taken over by the sweep) reaches its next durable
    // state before the process ends.
    ctx.runtime().drain().await;
    background.abort();
    ctx.shutdown().await;
    result
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
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(verbose > 1)
        .without_time()
        .try_init();
}
