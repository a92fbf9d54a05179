//! The `tollgate` binary: parses the command line and hands it to [`tollgate_cli::execute`].

use clap::Parser;
use std::process::ExitCode;
use tollgate_cli::args::Cli;
use tollgate_cli::exit::Exit;

/// mimalloc rather than the system allocator: a run allocates many small values (JSON, events, rows),
/// and glibc's malloc took a fifth of a run's user CPU in the benchmarks.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's options for `serve` (see [`restart_with_allocator_options`]): freed memory goes back to the
/// operating system 10 ms after it was freed, and no transparent huge pages.
const SERVE_ALLOCATOR_OPTIONS: [(&str, &str); 2] = [("MIMALLOC_PURGE_DELAY", "10"), ("MIMALLOC_ALLOW_THP", "0")];

fn main() -> ExitCode {
    // Usage errors exit 2 here, before anything is opened.
    let cli = Cli::parse();
    if matches!(cli.command, tollgate_cli::args::Command::Serve(_)) {
        restart_with_allocator_options();
    }
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

/// For `serve`: this same process started again (`exec`: same pid, arguments and environment) with
/// [`SERVE_ALLOCATOR_OPTIONS`] set, each unless the operator set it already.
///
/// mimalloc gives freed memory back to the operating system `purge_delay` after it was freed (1 s by
/// default), but only when an allocation or a free comes along after that: a server gone quiet after a
/// burst of 7,500 connections kept the 145 MiB they had used for as long as it stayed quiet. With 10 ms,
/// what the burst frees goes back while its own connections are still closing. And with transparent huge
/// pages (mimalloc asks for them by default), the kernel's `khugepaged` filled the holes the purge had
/// left, 2 MiB at a time, every 10 s, until the memory was resident again; without them the peak is lower
/// too (docs/benchmarks.md, "Memory after a burst of connections"). mimalloc reads its options from the
/// environment once, before `main`; setting one otherwise (`mi_option_set`) would take unsafe code, which
/// the workspace forbids. Returns when every option is set already, or when the process could not be
/// started again (it then serves as it is).
fn restart_with_allocator_options() {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let missing: Vec<(&str, &str)> =
            SERVE_ALLOCATOR_OPTIONS.into_iter().filter(|(name, _)| std::env::var_os(name).is_none()).collect();
        if missing.is_empty() {
            return;
        }
        let Ok(binary) = std::env::current_exe() else { return };
        let mut args = std::env::args_os();
        let mut again = std::process::Command::new(binary);
        if let Some(name) = args.next() {
            again.arg0(name);
        }
        let error = again.args(args).envs(missing).exec();
        eprintln!("tollgate: note: serving with mimalloc's default options (cannot start again: {error})");
    }
}
