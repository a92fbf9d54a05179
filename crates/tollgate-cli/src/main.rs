//! The `tollgate` binary: parses the command line and hands it to [`tollgate_cli::execute`].

use clap::Parser;
use std::process::ExitCode;
use tollgate_cli::args::Cli;
use tollgate_cli::exit::Exit;

/// mimalloc rather than the system allocator: a run allocates many small values (JSON, events, rows),
/// and glibc's malloc took a fifth of a run's user CPU in the benchmarks.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Usage errors exit 2 here, before anything is opened.
    let cli = Cli::parse();
    // sqlx reaches PostgreSQL over rustls, which needs one process-wide crypto provider: the aws-lc-rs one
    // it was built with. An error only means one is installed already.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    tollgate_cli::init_logging(cli.verbose, cli.quiet);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("tollgate: cannot start the async runtime: {error}");
            return ExitCode::from(Exit::Failed.code());
        }
    };
    match runtime.block_on(tollgate_cli::execute(cli)) {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(error) => {
            let message = tollgate_cli::redact(&error.message);
            eprintln!("tollgate: {}", tollgate_agent_core::terminal_safe(&message));
            ExitCode::from(error.exit.code())
        }
    }
}
