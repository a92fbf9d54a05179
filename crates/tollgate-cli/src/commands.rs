//! The commands of CLI.md in local mode: each one resolves the run it names, acts through the
//! [`Runtime`], prints data on stdout (JSON only with `--json`) and messages on stderr, and answers with
//! its exit code.
//!
//! `run` and the deciding commands wait until the run settles (waits for approval again, or ends) and
//! exit per the state it reached, so a script can chain them.

use crate::args::{
    ApproveArgs, CancelArgs, Command, DenyArgs, EditArgs, PurgeArgs, RespondArgs, RunArgs, RunsArgs, ShowArgs,
    ToolsArgs, VerifyArgs,
};
use crate::exit::{CliError, Exit};
use crate::local::Local;
use crate::{prompt, render};
use serde_json::{Value, json};
use std::io::Write;
use std::time::Duration;
use tollgate_core::{Clock, Decision, RunQuery, RunRecord, RunStatus, StoredEvent, SystemClock, TerminationReason};
use tollgate_runtime::view::run_json;
use tollgate_runtime::{DecisionSet, Runtime, RuntimeError};

/// The actor recorded on events for everything done from this command line (API.md: with no tokens,
/// every caller is `local`).
pub const ACTOR: &str = "local";
/// Events are read in pages of this size.
const EVENT_PAGE: u32 = 1000;

/// What every command works with: the local runtime and the output options.
pub struct Context {
    local: Local,
    json: bool,
    quiet: bool,
}

impl Context {
    /// A context over the local runtime.
    pub fn new(local: Local, json: bool, quiet: bool) -> Self {
        Self { local, json, quiet }
    }

    /// The runtime.
    /// Stops what the process started.
    pub async fn shutdown(&self) {
        self.local.shutdown().await;
    }

    /// The runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.local.runtime
    }

    /// True with `-q`: only errors on stderr.
    pub fn is_quiet(&self) -> bool {
        self.quiet
    }

    /// A message for people on stderr (not with `-q`).
    pub fn note(&self, text: &str) {
        if !self.quiet {
            eprintln!("{text}");
        }
    }

    fn data(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }

    fn print_json(&self, value: &Value) {
        let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
        self.data(&format!("{text}\n"));
    }

    /// The full id of the one run whose id starts with `prefix`.
    pub async fn resolve(&self, prefix: &str) -> Result<String, CliError> {
        if prefix.trim().is_empty() {
            return Err(CliError::usage("a run id (or a unique prefix of one) is required"));
        }
        match self.runtime().resolve(prefix).await {
            Ok(id) => Ok(id),
            Err(RuntimeError::NotFound(_)) => Err(CliError::failed(format!("no run matches `{prefix}`"))),
            // The store says how many runs the prefix matches.
            Err(RuntimeError::Invalid(detail)) => Err(CliError::failed(detail)),
            Err(other) => Err(other.into()),
        }
    }

    /// Records decisions for the run `prefix` names, on the held turn as it is now, and waits until the
    /// run settles if they completed the set. Returns the run as it settled (or still waiting).
    pub async fn decide_and_settle(&self, prefix: &str, set: DecisionSet) -> Result<RunRecord, CliError> {
        let id = self.resolve(prefix).await?;
        self.local.ensure_workspace()?;
        let run = self.runtime().get(&id).await?;
        let digest = run.pending.as_ref().map(|p| p.turn_digest.0.clone()).unwrap_or_default();
        let after = self.runtime().decide(&id, &digest, set, ACTOR).await?;
        if after.status == RunStatus::WaitingForApproval {
            return Ok(after);
        }
        self.note(&format!("run {id} resumed"));
        Ok(self.runtime().wait_settled(&id).await?)
    }

    /// Prints a settled run (its output, or the waiting line and how to decide, or why it ended) and
    /// returns the exit code its state calls for.
    fn report(&self, run: &RunRecord) -> Exit {
        if self.json {
            self.print_json(&run_json(run));
        } else {
            match run.status {
                RunStatus::Completed => {
                    if let Some(output) = &run.output {
                        self.data(&format!("{output}\n"));
                    }
                    if let Some(reason) = run.termination_reason.filter(|r| *r != TerminationReason::Completed) {
                        self.note(&format!("run {} ended early: {}", run.id, reason.as_str()));
                    }
                }
                RunStatus::WaitingForApproval => {
                    self.note(render::held_calls_summary(run).trim_end());
                    self.data(&render::waiting_lines(run));
                }
                _ => eprintln!("{}", render::unfinished_reason(run)),
            }
        }
        Exit::for_status(run.status)
    }

    async fn all_events(&self, id: &str) -> Result<Vec<StoredEvent>, CliError> {
        let mut all = Vec::new();
        loop {
            let page = self.runtime().events(id, all.len() as u64, EVENT_PAGE).await?;
            let done = page.len() < EVENT_PAGE as usize;
            all.extend(page);
            if done {
                return Ok(all);
            }
        }
    }
}

/// Runs one command.
pub async fn dispatch(ctx: &Context, command: Command) -> Result<Exit, CliError> {
    match command {
        // `serve` is handled before a command context exists (see `execute`).
        Command::Serve(_) => Ok(Exit::Done),
        Command::Run(args) => run(ctx, args).await,
        Command::Runs(args) => runs(ctx, args).await,
        Command::Show(args) => show(ctx, args).await,
        Command::Approve(args) => approve(ctx, args).await,
        Command::Deny(args) => deny(ctx, args).await,
        Command::Edit(args) => edit(ctx, args).await,
        Command::Respond(args) => respond(ctx, args).await,
        Command::Cancel(args) => cancel(ctx, args).await,
        Command::Purge(args) => purge(ctx, args).await,
        Command::Tools(args) => tools(ctx, args),
        Command::Verify(args) => verify(ctx, args).await,
    }
}

async fn run(ctx: &Context, args: RunArgs) -> Result<Exit, CliError> {
    ctx.local.ensure_workspace()?;
    let started = ctx.runtime().start(args.agent.as_deref(), &args.input, ACTOR).await?;
    ctx.note(&format!("started run {} (agent {})", started.id, started.agent));
    let run = if !args.detach && prompt::is_interactive() {
        prompt::follow_on_terminal(ctx, &started.id).await?
    } else {
        ctx.runtime().wait_settled(&started.id).await?
    };
    Ok(ctx.report(&run))
}

async fn runs(ctx: &Context, args: RunsArgs) -> Result<Exit, CliError> {
    let query = RunQuery { status: args.status, agent: args.agent, limit: args.limit, cursor: None };
    let page = ctx.runtime().list(query).await?;
    if ctx.json {
        let runs: Vec<Value> = page.runs.iter().map(run_json).collect();
        ctx.print_json(&json!({ "runs": runs }));
    } else if page.runs.is_empty() {
        ctx.note("no runs");
    } else {
        ctx.data(&render::runs_table(&page.runs, SystemClock.now()));
    }
    Ok(Exit::Done)
}

async fn show(ctx: &Context, args: ShowArgs) -> Result<Exit, CliError> {
    let id = ctx.resolve(&args.run).await?;
    let run = ctx.runtime().get(&id).await?;
    let events = if args.events { Some(ctx.all_events(&id).await?) } else { None };
    if ctx.json {
        let mut view = run_json(&run);
        if let (Some(events), Value::Object(map)) = (&events, &mut view) {
            map.insert("events".into(), serde_json::to_value(events).unwrap_or(Value::Null));
        }
        ctx.print_json(&view);
    } else {
        let mut text = render::run_details(&run, SystemClock.now());
        if let Some(events) = &events {
            text.push_str("\nevents\n");
            text.push_str(&render::events_table(events));
        }
        ctx.data(&text);
    }
    Ok(Exit::Done)
}

async fn approve(ctx: &Context, args: ApproveArgs) -> Result<Exit, CliError> {
    let set = if args.calls.is_empty() {
        DecisionSet::ApproveAll
    } else {
        DecisionSet::Each(args.calls.into_iter().map(|c| (c, Decision::Approve)).collect())
    };
    let run = ctx.decide_and_settle(&args.run, set).await?;
    Ok(ctx.report(&run))
}

async fn deny(ctx: &Context, args: DenyArgs) -> Result<Exit, CliError> {
    let set = if args.calls.is_empty() {
        DecisionSet::DenyAll { reason: args.reason }
    } else {
        let reason = args.reason;
        DecisionSet::Each(args.calls.into_iter().map(|c| (c, Decision::Deny { reason: reason.clone() })).collect())
    };
    let run = ctx.decide_and_settle(&args.run, set).await?;
    Ok(ctx.report(&run))
}

async fn edit(ctx: &Context, args: EditArgs) -> Result<Exit, CliError> {
    // Checked before anything is read or written: bad arguments change nothing.
    let arguments: Value =
        serde_json::from_str(&args.arguments).map_err(|e| CliError::usage(format!("--args is not valid JSON: {e}")))?;
    if !arguments.is_object() {
        return Err(CliError::usage("--args must be a JSON object of the tool's arguments"));
    }
    let set = DecisionSet::Each(vec![(args.call, Decision::Edit { arguments })]);
    let run = ctx.decide_and_settle(&args.run, set).await?;
    Ok(ctx.report(&run))
}

async fn respond(ctx: &Context, args: RespondArgs) -> Result<Exit, CliError> {
    let set = DecisionSet::Each(vec![(args.call, Decision::Respond { result: args.result })]);
    let run = ctx.decide_and_settle(&args.run, set).await?;
    Ok(ctx.report(&run))
}

async fn cancel(ctx: &Context, args: CancelArgs) -> Result<Exit, CliError> {
    let id = ctx.resolve(&args.run).await?;
    let run = ctx.runtime().cancel(&id, ACTOR, args.reason.as_deref()).await?;
    if ctx.json {
        ctx.print_json(&run_json(&run));
    } else {
        ctx.data(&format!("run {} cancelled\n", run.id));
    }
    Ok(Exit::Done)
}

async fn purge(ctx: &Context, args: PurgeArgs) -> Result<Exit, CliError> {
    let now = SystemClock.now();
    let before = |window: Duration| now.saturating_sub(i64::try_from(window.as_millis()).unwrap_or(i64::MAX));
    let retention = &ctx.local.config.retention;
    let terminal_before = before(args.older_than.unwrap_or(retention.terminal_after));
    let deleted = ctx.runtime().purge(terminal_before, before(retention.waiting_after)).await?;
    if ctx.json {
        ctx.print_json(&json!({ "deleted_runs": deleted }));
    } else {
        ctx.data(&format!("purged {deleted} run(s)\n"));
    }
    Ok(Exit::Done)
}

fn tools(ctx: &Context, args: ToolsArgs) -> Result<Exit, CliError> {
    // As `GET /v1/tools`: with an agent, its tools and their effective gates; without, every tool this
    // process knows with its own default gate.
    let (heading, listed) = match &args.agent {
        Some(name) => {
            let spec = ctx.runtime().agent(name).ok_or_else(|| {
                let known: Vec<&str> = ctx.runtime().agents().map(|a| a.name.as_str()).collect();
                CliError::usage(format!("unknown agent `{name}`; known agents: {}", known.join(", ")))
            })?;
            (format!("agent {name}"), spec.tools.as_slice())
        }
        None => ("every known tool (own default gates)".to_owned(), ctx.runtime().catalog()),
    };
    if ctx.json {
        let tools = serde_json::to_value(listed).unwrap_or(Value::Null);
        ctx.print_json(&json!({ "tools": tools }));
    } else {
        let mut rows = vec![vec!["TOOL".to_owned(), "GATE".to_owned(), "WHY".to_owned(), "DESCRIPTION".to_owned()]];
        rows.extend(
            listed
                .iter()
                .map(|t| vec![t.name.clone(), t.gate.as_str().to_owned(), t.why.clone(), t.description.clone()]),
        );
        ctx.data(&format!("{heading}\n{}", render::table(&rows)));
    }
    Ok(Exit::Done)
}

async fn verify(ctx: &Context, args: VerifyArgs) -> Result<Exit, CliError> {
    let id = ctx.resolve(&args.run).await?;
    match ctx.runtime().verify(&id).await? {
        Ok(events) => {
            if ctx.json {
                ctx.print_json(&json!({"id": id, "ok": true, "events": events}));
            } else {
                ctx.data(&format!("run {id}: {events} events, the hash chain is intact\n"));
            }
            Ok(Exit::Done)
        }
        Err(broken) => {
            let seq = broken.seq();
            if ctx.json {
                ctx.print_json(&json!({"id": id, "ok": false, "first_bad_seq": seq, "message": broken.to_string()}));
            } else {
                ctx.data(&format!("run {id}: the hash chain breaks at seq {seq}: {broken}\n"));
            }
            Ok(Exit::Failed)
        }
    }
}
