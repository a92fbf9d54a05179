//! The command line as CLI.md defines it, parsed with clap. Global options may stand before or after
//! the command.

use crate::duration::parse_duration;
use clap::{ArgAction, Args, Parser, Subcommand};
use std::time::Duration;

/// The `tollgate` command line.
#[derive(Debug, Parser)]
#[command(
    name = "tollgate",
    version,
    about = "A durable agent runtime: runs stop at the gate until a person decides.",
    after_help = "Exit codes: 0 done, 1 failed, 2 usage or configuration error, 3 waiting for approval, 4 conflict.\n\
                  Store: sqlite://tollgate.db in the current folder, or TOLLGATE_STORE_URL."
)]
pub struct Cli {
    /// The configuration file (else TOLLGATE_CONFIG, else ./tollgate.toml, else built-in defaults).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,

    /// Machine-readable output: stdout holds only JSON.
    #[arg(long, global = true)]
    pub json: bool,

    /// More detail on stderr (repeat for more).
    #[arg(short, long, action = ArgAction::Count, global = true, conflicts_with = "quiet")]
    pub verbose: u8,

    /// Only errors on stderr.
    #[arg(short, long, global = true)]
    pub quiet: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the HTTP API and the playground.
    Serve(ServeArgs),
    /// Start a run and follow it until it waits for approval or ends.
    Run(RunArgs),
    /// List runs, newest first.
    Runs(RunsArgs),
    /// Show one run: status, output, held calls with previews.
    Show(ShowArgs),
    /// Approve the named held calls, or every undecided one.
    Approve(ApproveArgs),
    /// Deny the named held calls, or every undecided one, with a reason for the model.
    Deny(DenyArgs),
    /// Approve one call with new arguments.
    Edit(EditArgs),
    /// Answer one call in the tool's place.
    Respond(RespondArgs),
    /// Cancel a run that has not finished.
    Cancel(CancelArgs),
    /// Apply retention now: delete old finished runs (and very old waiting ones).
    Purge(PurgeArgs),
    /// Each tool of an agent with its effective gate and why.
    Tools(ToolsArgs),
    /// Check a run's hash chain.
    Verify(VerifyArgs),
}

/// `tollgate serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on (default: `[server] addr` of the config, `127.0.0.1:8080`).
    #[arg(long, value_name = "HOST:PORT")]
    pub addr: Option<std::net::SocketAddr>,
}

/// `tollgate run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The agent (default: the first one, `demo` without a config).
    #[arg(long)]
    pub agent: Option<String>,
    /// Leave a run that reaches the gate waiting instead of asking on the terminal.
    #[arg(long)]
    pub detach: bool,
    /// The run's input.
    pub input: String,
}

/// `tollgate runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Only runs with this status (e.g. waiting_for_approval, completed).
    #[arg(long, value_parser = parse_status)]
    pub status: Option<tollgate_core::RunStatus>,
    /// Only runs of this agent.
    #[arg(long)]
    pub agent: Option<String>,
    /// At most this many runs (1 to 500).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub limit: u32,
}

/// `tollgate show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The run's id or a unique prefix of it.
    pub run: String,
    /// Also show the event log.
    #[arg(long)]
    pub events: bool,
}

/// `tollgate approve`.
#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The run's id or a unique prefix of it.
    pub run: String,
    /// A held call to approve (repeatable); without it, every undecided call.
    #[arg(long = "call", value_name = "ID")]
    pub calls: Vec<String>,
}

/// `tollgate deny`.
#[derive(Debug, Args)]
pub struct DenyArgs {
    /// The run's id or a unique prefix of it.
    pub run: String,
    /// A held call to deny (repeatable); without it, every undecided call.
    #[arg(long = "call", value_name = "ID")]
    pub calls: Vec<String>,
    /// Why, passed to the model.
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
}

/// `tollgate edit`.
#[derive(Debug, Args)]
pub struct EditArgs {
    /// The run's id or a unique prefix of it.
    pub run: String,
    /// The held call to run with new arguments.
    #[arg(long = "call", value_name = "ID")]
    pub call: String,
    /// The new arguments, a JSON object.
    #[arg(long = "args", value_name = "JSON")]
    pub arguments: String,
}

/// `tollgate respond`.
#[derive(Debug, Args)]
pub struct RespondArgs {
    /// The run's id or a unique prefix of it.
    pub run: String,
    /// The held call to answer.
    #[arg(long = "call", value_name = "ID")]
    pub call: String,
    /// The result the model receives in the tool's place.
    #[arg(long, value_name = "TEXT")]
    pub result: String,
}

/// `tollgate cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The run's id or a unique prefix of it.
    pub run: String,
    /// Why, recorded on the event.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

/// `tollgate purge`.
#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// Delete finished runs older than this (default 30d); waiting runs go after 90d.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub older_than: Option<Duration>,
}

/// `tollgate tools`.
#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// The agent (default: the first one).
    #[arg(long)]
    pub agent: Option<String>,
}

/// `tollgate verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The run's id or a unique prefix of it.
    pub run: String,
}

fn parse_status(text: &str) -> Result<tollgate_core::RunStatus, String> {
    tollgate_core::RunStatus::parse(text).ok_or_else(|| {
        let known: Vec<&str> = tollgate_core::RunStatus::ALL.iter().map(|s| s.as_str()).collect();
        format!("unknown status `{text}`; one of: {}", known.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn global_options_go_before_or_after_the_command() {
        let before = Cli::try_parse_from(["tollgate", "--json", "-q", "runs"]);
        let after = Cli::try_parse_from(["tollgate", "runs", "--json", "-q"]);
        for parsed in [before, after] {
            let cli = parsed.unwrap_or_else(|e| panic!("{e}"));
            assert!(cli.json && cli.quiet);
        }
    }

    #[test]
    fn deny_needs_a_reason_and_status_must_be_known() {
        assert!(Cli::try_parse_from(["tollgate", "deny", "abc"]).is_err());
        assert!(Cli::try_parse_from(["tollgate", "runs", "--status", "sleeping"]).is_err());
        assert!(Cli::try_parse_from(["tollgate", "runs", "--limit", "501"]).is_err());
        assert!(Cli::try_parse_from(["tollgate", "approve", "abc", "--call", "call_1", "--call", "call_2"]).is_ok());
    }
}
