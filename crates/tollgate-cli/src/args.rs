//! The command line as docs/cli.md defines it, parsed with clap. Global options may stand before or after
//! the command.

use crate::duration::parse_duration;
use clap::{ArgAction, Args, Parser, Subcommand};
use std::time::Duration;
use tollgate_agent_core::{CallId, GrantScope};

/// The `tollgate` command line.
#[derive(Debug, Parser)]
#[command(
    name = "tollgate",
    version,
    about = "A durable agent runtime: runs stop at the gate until a person decides.",
    after_help = "Exit codes: 0 done, 1 failed, 2 usage or configuration error, 3 waiting for approval, 4 conflict.\n\
                  Store: sqlite://tollgate.db in the current folder, or TOLLGATE_STORE_URL.\n\
                  With --server URL the commands act through that server's HTTP API instead (token: TOLLGATE_TOKEN)."
)]
pub struct Cli {
    /// The configuration file (else TOLLGATE_CONFIG, else ./tollgate.toml, else built-in defaults).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,

    /// Act through the HTTP API of the Tollgate server at this URL instead of opening the store (the token
    /// comes from TOLLGATE_TOKEN). Same output and exit codes; not for `serve` and `bench`.
    #[arg(long, global = true, value_name = "URL")]
    pub server: Option<String>,

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
    /// List grants (standing approvals), newest first: active ones, or all with --all.
    Grants(GrantsArgs),
    /// Make a grant: calls of one tool of one agent whose arguments match pass the gate until it expires.
    Grant(GrantArgs),
    /// Revoke a grant: from now on it allows nothing.
    Revoke(RevokeArgs),
    /// Check the store: the database's integrity, then every run's hash chain (exit 1 if anything is wrong).
    Doctor,
    /// Seal, with the first `[[privacy.keys]]` key, what encryption at rest refuses to read: values
    /// written before it was turned on, and run values sealed by versions before 0.2 (`enc:v1`).
    Seal(SealArgs),
    /// Run the benchmark workloads of docs/benchmarks.md and print one table.
    #[command(long_about = BENCH_ABOUT)]
    Bench(BenchArgs),
}

impl Command {
    /// Whether the command only reads, or changes only what the store already holds (a run, a grant, a
    /// value to seal): in a folder without its SQLite file it has nothing to act on, so the file is not
    /// created for it ([`crate::local::StoreUse::Existing`]). `run` and `grant` make something new,
    /// `serve` takes work; `bench` opens stores of its own.
    pub fn needs_existing_store(&self) -> bool {
        !matches!(self, Command::Serve(_) | Command::Run(_) | Command::Grant(_) | Command::Bench(_))
    }
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
    /// Metadata for the run's tools, stored with the run (repeatable): the value is JSON when it parses
    /// as JSON (`seats=3`, `tenant={"id":7}`), else the text itself (`customer=acme`).
    #[arg(long = "meta", value_name = "KEY=VALUE", value_parser = parse_meta)]
    pub meta: Vec<(String, serde_json::Value)>,
    /// The run's input.
    pub input: String,
}

/// `tollgate runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Only runs with this status (e.g. waiting_for_approval, completed).
    #[arg(long, value_parser = parse_status)]
    pub status: Option<tollgate_agent_core::RunStatus>,
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
    pub calls: Vec<CallId>,
    /// Also make a grant with each approval, in the same transaction: later calls of the tool whose
    /// arguments match pass the gate without asking (the pattern: the call's suggested one, or --match).
    #[arg(long)]
    pub remember: bool,
    /// How long the grants last (default: the `[grants] default_ttl`, 8h).
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration, requires = "remember")]
    pub ttl: Option<Duration>,
    /// `agent` (every run of the agent, the default) or `run` (only this run).
    #[arg(long, value_name = "SCOPE", value_parser = parse_scope, requires = "remember")]
    pub scope: Option<GrantScope>,
    /// The pattern instead of the suggested one: the string at a JSON pointer into the arguments must
    /// match a glob (repeatable; `*` stays within one `/` segment, `**` crosses them).
    #[arg(long = "match", value_name = "/POINTER=GLOB", value_parser = parse_match, requires = "remember")]
    pub matches: Vec<(String, String)>,
}

/// `tollgate deny`.
#[derive(Debug, Args)]
pub struct DenyArgs {
    /// The run's id or a unique prefix of it.
    pub run: String,
    /// A held call to deny (repeatable); without it, every undecided call.
    #[arg(long = "call", value_name = "ID")]
    pub calls: Vec<CallId>,
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
    pub call: CallId,
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
    pub call: CallId,
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

/// `tollgate grants`.
#[derive(Debug, Args)]
pub struct GrantsArgs {
    /// Only this agent's grants.
    #[arg(long)]
    pub agent: Option<String>,
    /// Only this tool's grants.
    #[arg(long)]
    pub tool: Option<String>,
    /// Also the grants revoked or expired.
    #[arg(long)]
    pub all: bool,
}

/// `tollgate grant`.
#[derive(Debug, Args)]
pub struct GrantArgs {
    /// The agent whose calls it allows.
    #[arg(long)]
    pub agent: String,
    /// The tool whose calls it allows.
    #[arg(long)]
    pub tool: String,
    /// The string at a JSON pointer into the arguments must match a glob (repeatable; `*` stays within
    /// one `/` segment, `**` crosses them). Without it the grant allows every call of the tool.
    #[arg(long = "match", value_name = "/POINTER=GLOB", value_parser = parse_match)]
    pub matches: Vec<(String, String)>,
    /// How long it lasts (default: the `[grants] default_ttl`, 8h; at most `max_ttl`, 30d).
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration)]
    pub ttl: Option<Duration>,
    /// `agent` (every run of the agent; the default without --run) or `run` (only the run of --run).
    #[arg(long, value_name = "SCOPE", value_parser = parse_scope)]
    pub scope: Option<GrantScope>,
    /// The one run it applies to (its id or a unique prefix); implies --scope run.
    #[arg(long, value_name = "RUN")]
    pub run: Option<String>,
    /// Why, for the record.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Also approve every waiting run of the agent whose held calls the grants now all allow.
    #[arg(long)]
    pub apply_to_waiting: bool,
}

/// `tollgate revoke`.
#[derive(Debug, Args)]
pub struct RevokeArgs {
    /// The grant's id or a unique prefix of it.
    pub grant: String,
}

/// `tollgate seal`.
#[derive(Debug, Args)]
pub struct SealArgs {
    /// Runs sealed per transaction.
    #[arg(long, value_name = "N", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,
}

/// `tollgate verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The run's id or a unique prefix of it.
    pub run: String,
}

/// `tollgate bench`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    /// `soak` instead of a workload.
    #[command(subcommand)]
    pub command: Option<BenchCommand>,
    /// The workload (all of them when omitted).
    #[arg(value_enum, ignore_case = true)]
    pub workload: Option<Workload>,
    /// N: runs for A, C and D (default 1000, D's waiting runs); repeats of the 50-turn run for B (default 200).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub n: Option<u64>,
    /// The store to measure (default: a fresh SQLite file in a temporary folder, removed afterwards).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Runs in flight for the concurrent phases, and HTTP clients for A over HTTP.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub concurrency: u64,
    /// Workload A over HTTP only, on N `tollgate serve` processes started from this binary (2 or more need
    /// a postgres:// --store, which gets a fresh schema): each run starts on node i % N and is decided on
    /// node (i + 1) % N. Without it, A over HTTP runs against a server in the bench's own process.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=64))]
    pub nodes: Option<u64>,
    /// Workload A only: what grants cost instead of A's usual phases — A with N active grants that match
    /// no call against none, and runs a matching grant completes against allow-gated ones, in alternating
    /// rounds (docs/benchmarks.md, "What grants cost").
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub grants: Option<u64>,
    /// Workload A only: what notifications cost instead of A's usual phases — A's phase 1 with two
    /// notifiers (a Slack webhook and an SMTP relay, loopback receivers in this process) against none, in
    /// alternating rounds (docs/benchmarks.md, "What notifications cost").
    #[arg(long)]
    pub notifiers: bool,
    /// Workload A only: what tracing costs instead of A's usual phases — A's phase 1 with OpenTelemetry
    /// tracing on (every run sampled, and 1 %; spans sent over OTLP/HTTP to a loopback receiver in this
    /// process) against off, in rounds taking turns (docs/benchmarks.md, "What tracing costs").
    #[arg(long)]
    pub traces: bool,
    /// Workload D only: M of the N waiting runs write a note one grant matches; the grant is then made
    /// with apply_to_waiting, and the time until it has decided them, then until they completed, measured.
    #[arg(long, value_name = "M", value_parser = clap::value_parser!(u64).range(1..))]
    pub apply_to_waiting: Option<u64>,
}

/// What `tollgate bench` does besides the workloads.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Kill a real `tollgate serve` again and again under load, then check that no run was lost,
    /// duplicated or stuck and that every hash chain verifies (exit 1 if not).
    #[command(long_about = SOAK_ABOUT)]
    Soak(SoakArgs),
}

/// `tollgate bench soak`.
#[derive(Debug, Args)]
pub struct SoakArgs {
    /// How long the clients run, seconds.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub secs: u64,
    /// The store (default: a fresh SQLite file in a temporary folder; a postgres:// URL gets a fresh schema).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Concurrent HTTP clients.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub clients: u64,
    /// Seconds between two SIGKILLs of the server.
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub kill_every: u64,
}

/// The workloads of docs/benchmarks.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// The approval cycle: N runs wait at the gate, then each is loaded, approved and completed.
    #[value(name = "A")]
    A,
    /// Loop overhead: a run of 50 allow-gated tool turns, repeated N times, no store.
    #[value(name = "B")]
    B,
    /// As A, but each call is denied.
    #[value(name = "C")]
    C,
    /// Scale: the approval cycle and the waiting list with N runs waiting.
    #[value(name = "D")]
    D,
}

/// The long help of `tollgate bench`.
const BENCH_ABOUT: &str = "\
Run the benchmark workloads of docs/benchmarks.md with the scripted provider (instant answers, no network) and
print one table of their phases (--json: the reports).

A  the approval cycle: in process one run at a time (c=1), then 32 in flight, then through the HTTP API
   (32 clients on loopback). Phase 1 starts N runs that wait at the gate; phase 2 loads each one, approves
   it and lets it complete.
B  loop overhead: a run of 50 allow-gated tool turns and a final answer, repeated N times (default 200),
   no store.
C  as A in process, denying each call with reason `not allowed`.
D  scale: fills the store with N waiting runs (default 1,000; many in flight), then measures the p99 of
   \"load one waiting run by id, decide, complete\" over 200 of them, the latency of listing
   status=waiting_for_approval limit=50, and the peak RSS. docs/benchmarks.md's criterion (within 2x, and a peak
   RSS that does not grow) compares a run with --n 1000 against one with --n 1000000, which takes minutes
   and a few GB of disk: the million runs are really started and suspended. --apply-to-waiting M: M of them
   write a note one grant matches, and the grant, made with apply_to_waiting once all wait, is timed until
   it has decided them and until they completed.

A --grants N measures what grants cost instead of A's usual phases, in process at c=1 and c=32, in 4
alternating rounds: A with N active grants on the tool that match no call against none, and runs one
matching grant completes without a person against the same runs with the tool's gate `allow`. After the
table, one line per comparison: CPU per run and runs/s as ratios to the baseline.

Each phase reports wall time, runs/s, per-run latency p50/p99, CPU time per run, peak RSS of the process
and the mean bytes of persisted suspension. The default store is a fresh SQLite file per workload in a
temporary folder (WAL, synchronous=FULL: the production settings), removed afterwards; --store measures
another one (e.g. PostgreSQL; every workload then shares it; a URL naming several hosts is measured on the
one that will do now). Exit 1 when a workload's end check fails.

--concurrency N (default 32) sets the runs in flight of the concurrent phases and the HTTP clients. --nodes N
runs only A over HTTP, on N `tollgate serve` processes started from this binary on loopback ports, sharing
the store (2 or more need a postgres:// --store; it gets a fresh schema, dropped when the check passes): run
i starts on node i % N and its decision goes to node (i + 1) % N, so every resume happens on a node that did
not start the run. Prints, after the table, per node: runs started, decisions, runs resumed, peak RSS and
exit code (each node gets SIGTERM at the end).

`tollgate bench soak --secs N` is a reliability check rather than a workload: see `tollgate bench soak --help`.";

/// The long help of `tollgate bench soak`.
const SOAK_ABOUT: &str = "\
Kill a real `tollgate serve` again and again under load, then audit every run (docs/benchmarks.md, \"The soak\").

The soak starts this binary as `tollgate serve` on a free loopback port, over its own store (a fresh SQLite
file in a temporary folder; --store postgres://... gets a fresh schema, dropped when the soak passes) with a
2 s lease and an agent whose two ask-gated `shell` calls append one line per execution to a ledger in the
workspace. --clients HTTP clients start runs, decide held calls (by the digest the API served), cancel and
read, retrying with backoff while the server is down. Every --kill-every seconds the server gets SIGKILL and
is started again on the same database. At the end the clients stop, the server is killed and restarted once
more, every waiting call is approved (in-doubt calls too) until no run is unfinished (at most 60 s, or --secs
when longer), and every run is checked:

  lost        runs a client saw created (201) that the store does not hold
  duplicated  calls that ran (ledger lines) more often than their tool_started events
  stuck       runs not terminal at the end
  chains      every run's hash chain verifies against its recorded head

It prints runs, kills, lost, duplicated, stuck, chains verified and the server's RSS (start, peak, end;
--json: the report with every sample). Exit 1 on any lost, duplicated or stuck run or broken chain.";

/// `KEY=VALUE` of `run --meta`: the value as JSON when it parses, else as a string.
fn parse_meta(text: &str) -> Result<(String, serde_json::Value), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => {
            let value = serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_owned()));
            Ok((key.to_owned(), value))
        }
        _ => Err(format!("`{text}` is not KEY=VALUE")),
    }
}

/// `/POINTER=GLOB` of `--match`: a JSON pointer into the arguments and the glob (text) the string
/// there must match. The pointer ends at the first `=`.
fn parse_match(text: &str) -> Result<(String, String), String> {
    let Some((pointer, glob)) = text.split_once('=') else {
        return Err(format!("`{text}` is not /POINTER=GLOB (e.g. /path=notes/*)"));
    };
    if pointer.is_empty() || !tollgate_agent_protocol::is_json_pointer(pointer) {
        return Err(format!(
            "`{pointer}` is not a JSON pointer into the arguments: it starts with `/` (e.g. /path=notes/*), \
             and `~` is written `~0`, `/` inside a key `~1`"
        ));
    }
    Ok((pointer.to_owned(), glob.to_owned()))
}

/// `agent` or `run`.
fn parse_scope(text: &str) -> Result<GrantScope, String> {
    GrantScope::parse(text).ok_or_else(|| format!("unknown scope `{text}`; one of: agent, run"))
}

fn parse_status(text: &str) -> Result<tollgate_agent_core::RunStatus, String> {
    tollgate_agent_core::RunStatus::parse(text).ok_or_else(|| {
        let known: Vec<&str> = tollgate_agent_core::RunStatus::ALL.iter().map(|s| s.as_str()).collect();
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

    #[test]
    fn server_is_global_and_bench_takes_a_workload() {
        let cli = Cli::try_parse_from(["tollgate", "runs", "--server", "http://127.0.0.1:8080"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cli.server.as_deref(), Some("http://127.0.0.1:8080"));
        let cli = Cli::try_parse_from(["tollgate", "bench", "a", "--n", "20"]).unwrap_or_else(|e| panic!("{e}"));
        match cli.command {
            Command::Bench(args) => assert_eq!((args.workload, args.n), (Some(Workload::A), Some(20))),
            other => panic!("{other:?}"),
        }
        assert!(Cli::try_parse_from(["tollgate", "bench", "E"]).is_err());
        for (argv, grants, apply) in [
            (["bench", "A", "--grants", "100"], Some(100), None),
            (["bench", "D", "--apply-to-waiting", "10"], None, Some(10)),
        ] {
            let cli = Cli::try_parse_from(std::iter::once("tollgate").chain(argv)).unwrap_or_else(|e| panic!("{e}"));
            match cli.command {
                Command::Bench(args) => assert_eq!((args.grants, args.apply_to_waiting), (grants, apply)),
                other => panic!("{other:?}"),
            }
        }
        assert!(Cli::try_parse_from(["tollgate", "bench", "A", "--grants", "0"]).is_err());
        assert!(Cli::try_parse_from(["tollgate", "bench", "B", "--n", "0"]).is_err());
        let cli = Cli::try_parse_from(["tollgate", "bench", "A", "--nodes", "2", "--concurrency", "8"])
            .unwrap_or_else(|e| panic!("{e}"));
        match cli.command {
            Command::Bench(args) => assert_eq!((args.nodes, args.concurrency), (Some(2), 8)),
            other => panic!("{other:?}"),
        }
        for zero in ["--nodes", "--concurrency"] {
            assert!(Cli::try_parse_from(["tollgate", "bench", "A", zero, "0"]).is_err(), "{zero} 0");
        }
    }

    #[test]
    fn bench_soak_takes_its_own_options_and_no_workload() {
        let cli =
            Cli::try_parse_from(["tollgate", "bench", "soak", "--secs", "6", "--kill-every", "2", "--clients", "8"])
                .unwrap_or_else(|e| panic!("{e}"));
        match cli.command {
            Command::Bench(BenchArgs { command: Some(BenchCommand::Soak(soak)), workload: None, .. }) => {
                assert_eq!((soak.secs, soak.kill_every, soak.clients, soak.store), (6, 2, 8, None));
            }
            other => panic!("{other:?}"),
        }
        let cli = Cli::try_parse_from(["tollgate", "bench", "soak", "--secs", "60"]).unwrap_or_else(|e| panic!("{e}"));
        match cli.command {
            Command::Bench(BenchArgs { command: Some(BenchCommand::Soak(soak)), .. }) => {
                assert_eq!((soak.kill_every, soak.clients), (10, 32));
            }
            other => panic!("{other:?}"),
        }
        assert!(Cli::try_parse_from(["tollgate", "bench", "soak"]).is_err(), "--secs is required");
        assert!(Cli::try_parse_from(["tollgate", "bench", "soak", "--secs", "5", "--kill-every", "0"]).is_err());
        assert!(Cli::try_parse_from(["tollgate", "bench", "A", "soak", "--secs", "5"]).is_err());
        assert!(Cli::try_parse_from(["tollgate", "bench", "--n", "5", "soak", "--secs", "5"]).is_err());
    }

    #[test]
    fn remember_takes_its_options_and_they_need_it() {
        let cli = Cli::try_parse_from([
            "tollgate",
            "approve",
            "abc",
            "--remember",
            "--for",
            "2h",
            "--scope",
            "run",
            "--match",
            "/path=notes/*",
            "--match",
            "/mode=a=b",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        match cli.command {
            Command::Approve(args) => {
                assert!(args.remember);
                assert_eq!((args.ttl, args.scope), (Some(Duration::from_secs(7200)), Some(GrantScope::Run)));
                let expected = [("/path", "notes/*"), ("/mode", "a=b")].map(|(p, g)| (p.to_owned(), g.to_owned()));
                assert_eq!(args.matches, expected, "the pointer ends at the first `=`");
            }
            other => panic!("{other:?}"),
        }
        for alone in [["--for", "2h"], ["--scope", "run"], ["--match", "/path=x"]] {
            let refused = Cli::try_parse_from(["tollgate", "approve", "abc", alone[0], alone[1]]);
            assert!(refused.is_err_and(|e| e.exit_code() == 2), "{alone:?} without --remember");
        }
        for bad in [["--match", "path=x"], ["--match", "/path"], ["--match", "/a~2=x"], ["--scope", "all"]] {
            assert!(
                Cli::try_parse_from(["tollgate", "approve", "abc", "--remember", bad[0], bad[1]]).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn grant_needs_an_agent_and_a_tool() {
        assert!(Cli::try_parse_from(["tollgate", "grant", "--agent", "demo"]).is_err());
        assert!(Cli::try_parse_from(["tollgate", "grant", "--tool", "fs_write"]).is_err());
        let cli = Cli::try_parse_from([
            "tollgate",
            "grant",
            "--agent",
            "demo",
            "--tool",
            "fs_write",
            "--match",
            "/path=notes/*",
            "--for",
            "30m",
            "--apply-to-waiting",
            "--json",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(cli.json);
        match cli.command {
            Command::Grant(args) => {
                assert_eq!((args.agent.as_str(), args.tool.as_str()), ("demo", "fs_write"));
                assert_eq!((args.ttl, args.apply_to_waiting), (Some(Duration::from_secs(1800)), true));
            }
            other => panic!("{other:?}"),
        }
        assert!(Cli::try_parse_from(["tollgate", "revoke"]).is_err(), "revoke names the grant");
        assert!(Cli::try_parse_from(["tollgate", "grants", "--all", "--agent", "demo"]).is_ok());
    }

    #[test]
    fn doctor_takes_only_the_global_options() {
        let cli = Cli::try_parse_from(["tollgate", "doctor", "--json"]).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(cli.command, Command::Doctor) && cli.json);
        assert!(Cli::try_parse_from(["tollgate", "doctor", "abc"]).is_err());
    }
}
