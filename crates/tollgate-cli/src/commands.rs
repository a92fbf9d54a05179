//! The commands of docs/cli.md: each one resolves the run it names, acts through the
//! [`Backend`](crate::backend::Backend) (this process's runtime, or a server's HTTP API with `--server`),
//! prints data on stdout (JSON only with `--json`) and messages on stderr, and answers with its exit code.
//! The output does not depend on the backend.
//!
//! `run` and the deciding commands wait until the run settles (waits for approval again, or ends) and
//! exit per the state it reached, so a script can chain them.

use crate::args::{
    ApproveArgs, CancelArgs, Command, DenyArgs, EditArgs, GrantArgs, GrantsArgs, PurgeArgs, RespondArgs, RevokeArgs,
    RunArgs, RunsArgs, SealArgs, ShowArgs, ToolsArgs, VerifyArgs,
};
use crate::backend::GrantFilter;
pub use crate::context::Context;
use crate::exit::{CliError, Exit};
pub use crate::local::ACTOR;
use crate::view::GrantView;
use crate::{prompt, render};
use serde_json::{Map, Value, json};
use tollgate_agent_core::{Clock, Decision, GrantId, GrantScope, SystemClock};
use tollgate_agent_runtime::decide::RememberSpec;
use tollgate_agent_runtime::{DecisionSet, NewGrant};

/// Runs one command.
pub async fn dispatch(ctx: &Context, command: Command) -> Result<Exit, CliError> {
    match command {
        // `serve` and `bench` are handled before a command context exists (see `execute`).
        Command::Serve(_) | Command::Bench(_) => Ok(Exit::Done),
        Command::Run(args) => run(ctx, args).await,
        Command::Runs(args) => runs(ctx, args).await,
        Command::Show(args) => show(ctx, args).await,
        Command::Approve(args) => approve(ctx, args).await,
        Command::Deny(args) => deny(ctx, args).await,
        Command::Edit(args) => edit(ctx, args).await,
        Command::Respond(args) => respond(ctx, args).await,
        Command::Cancel(args) => cancel(ctx, args).await,
        Command::Purge(args) => purge(ctx, args).await,
        Command::Tools(args) => tools(ctx, args).await,
        Command::Verify(args) => verify(ctx, args).await,
        Command::Grants(args) => grants(ctx, args).await,
        Command::Grant(args) => grant(ctx, args).await,
        Command::Revoke(args) => revoke(ctx, args).await,
        Command::Doctor => crate::doctor::doctor(ctx).await,
        Command::Seal(args) => seal(ctx, args).await,
    }
}

async fn run(ctx: &Context, args: RunArgs) -> Result<Exit, CliError> {
    let metadata: serde_json::Map<String, Value> = args.meta.into_iter().collect();
    let started = ctx.backend.start(args.agent.as_deref(), &args.input, metadata).await?;
    ctx.note(&format!("started run {} (agent {})", started.id, started.agent));
    let run = if !args.detach && prompt::is_interactive() {
        prompt::follow_on_terminal(ctx, &started.id).await?
    } else {
        ctx.backend.wait_settled(&started.id).await?
    };
    Ok(ctx.report(&run))
}

async fn runs(ctx: &Context, args: RunsArgs) -> Result<Exit, CliError> {
    let runs = ctx.backend.list(args.status, args.agent.as_deref(), args.limit).await?;
    if ctx.json {
        let runs: Vec<&Value> = runs.iter().map(|r| &r.json).collect();
        ctx.print_json(&json!({ "runs": runs }));
    } else if runs.is_empty() {
        ctx.note("no runs");
    } else {
        ctx.data(&render::runs_table(&runs, SystemClock.now()));
    }
    Ok(Exit::Done)
}

async fn show(ctx: &Context, args: ShowArgs) -> Result<Exit, CliError> {
    let id = ctx.resolve(&args.run).await?;
    let run = ctx.backend.get(&id).await?;
    let events = if args.events { Some(ctx.backend.events(&id, 0).await?) } else { None };
    if ctx.json {
        let mut view = run.json.clone();
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
    // Checked before anything is read or written: a bad pattern changes nothing.
    let remember = if args.remember {
        let pattern = if args.matches.is_empty() { None } else { Some(pattern(args.matches)?) };
        Some(RememberSpec { scope: args.scope.unwrap_or_default(), pattern, ttl: args.ttl, reason: None })
    } else {
        None
    };
    let set = if args.calls.is_empty() {
        DecisionSet::ApproveAll
    } else {
        DecisionSet::Each(args.calls.into_iter().map(|c| (c, Decision::Approve)).collect())
    };
    let run = ctx.decide_and_settle(&args.run, set, remember).await?;
    Ok(ctx.report(&run))
}

/// The grant pattern of `--match /POINTER=GLOB` options: each pointer once.
fn pattern(matches: Vec<(String, String)>) -> Result<Map<String, Value>, CliError> {
    let mut pattern = Map::new();
    for (pointer, glob) in matches {
        if pattern.insert(pointer.clone(), Value::String(glob)).is_some() {
            return Err(CliError::usage(format!("--match names `{pointer}` twice")));
        }
    }
    Ok(pattern)
}

async fn deny(ctx: &Context, args: DenyArgs) -> Result<Exit, CliError> {
    let set = if args.calls.is_empty() {
        DecisionSet::DenyAll { reason: args.reason }
    } else {
        let reason = args.reason;
        DecisionSet::Each(args.calls.into_iter().map(|c| (c, Decision::Deny { reason: reason.clone() })).collect())
    };
    let run = ctx.decide_and_settle(&args.run, set, None).await?;
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
    let run = ctx.decide_and_settle(&args.run, set, None).await?;
    Ok(ctx.report(&run))
}

async fn respond(ctx: &Context, args: RespondArgs) -> Result<Exit, CliError> {
    let set = DecisionSet::Each(vec![(args.call, Decision::Respond { result: args.result })]);
    let run = ctx.decide_and_settle(&args.run, set, None).await?;
    Ok(ctx.report(&run))
}

async fn cancel(ctx: &Context, args: CancelArgs) -> Result<Exit, CliError> {
    let id = ctx.resolve(&args.run).await?;
    let run = ctx.backend.cancel(&id, args.reason.as_deref()).await?;
    if ctx.json {
        ctx.print_json(&run.json);
    } else {
        ctx.data(&format!("run {} cancelled\n", run.id));
    }
    Ok(Exit::Done)
}

async fn purge(ctx: &Context, args: PurgeArgs) -> Result<Exit, CliError> {
    let deleted = ctx.backend.purge(args.older_than).await?;
    if ctx.json {
        ctx.print_json(&json!({ "deleted_runs": deleted }));
    } else {
        ctx.data(&format!("purged {deleted} run(s)\n"));
    }
    Ok(Exit::Done)
}

async fn tools(ctx: &Context, args: ToolsArgs) -> Result<Exit, CliError> {
    let listed = ctx.backend.tools(args.agent.as_deref()).await?;
    if ctx.json {
        ctx.print_json(&json!({ "tools": listed }));
    } else {
        let heading = match &args.agent {
            Some(name) => format!("agent {name}"),
            None => "every known tool (own default gates)".to_owned(),
        };
        let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
        let mut rows = vec![vec!["TOOL".to_owned(), "GATE".to_owned(), "WHY".to_owned(), "DESCRIPTION".to_owned()]];
        rows.extend(
            listed.iter().map(|t| vec![text(&t["name"]), text(&t["gate"]), text(&t["why"]), text(&t["description"])]),
        );
        ctx.data(&format!("{heading}\n{}", render::table(&rows)));
    }
    Ok(Exit::Done)
}

async fn verify(ctx: &Context, args: VerifyArgs) -> Result<Exit, CliError> {
    let id = ctx.resolve(&args.run).await?;
    match ctx.backend.verify(&id).await? {
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

/// Every grant `filter` selects, newest first, page after page.
async fn all_grants(ctx: &Context, filter: GrantFilter<'_>) -> Result<Vec<GrantView>, CliError> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = ctx.backend.grants(filter, cursor.as_deref()).await?;
        let last = page.grants.is_empty();
        all.extend(page.grants);
        match page.next_cursor {
            Some(next) if !last => cursor = Some(next),
            _ => return Ok(all),
        }
    }
}

async fn grants(ctx: &Context, args: GrantsArgs) -> Result<Exit, CliError> {
    let filter = GrantFilter { agent: args.agent.as_deref(), tool: args.tool.as_deref(), active: !args.all };
    let listed = all_grants(ctx, filter).await?;
    if ctx.json {
        let grants: Vec<&Value> = listed.iter().map(|g| &g.json).collect();
        ctx.print_json(&json!({ "grants": grants }));
    } else if listed.is_empty() {
        ctx.note(if args.all { "no grants" } else { "no active grants" });
    } else {
        ctx.data(&render::grants_table(&listed, SystemClock.now()));
    }
    Ok(Exit::Done)
}

async fn grant(ctx: &Context, args: GrantArgs) -> Result<Exit, CliError> {
    // Checked before anything is read or written.
    let pattern = pattern(args.matches)?;
    let scope = match (args.scope, &args.run) {
        (Some(GrantScope::Run) | None, Some(_)) => GrantScope::Run,
        (Some(GrantScope::Agent), Some(_)) => {
            return Err(CliError::usage("--run goes with --scope run: a grant of scope agent covers every run"));
        }
        (Some(GrantScope::Run), None) => return Err(CliError::usage("--scope run needs --run RUN")),
        (Some(GrantScope::Agent) | None, None) => GrantScope::Agent,
    };
    let run_id = match &args.run {
        Some(prefix) => Some(ctx.resolve(prefix).await?),
        None => None,
    };
    let any_arguments = pattern.is_empty();
    let new = NewGrant {
        agent: args.agent,
        tool: args.tool,
        pattern,
        scope,
        run_id,
        ttl: args.ttl,
        reason: args.reason,
        apply_to_waiting: args.apply_to_waiting,
    };
    let made = ctx.backend.create_grant(new).await?;
    if any_arguments {
        ctx.note(&format!(
            "without --match, the grant allows every call of {}, whatever its arguments",
            made.grant.tool
        ));
    }
    if ctx.json {
        ctx.print_json(&made.json);
    } else {
        ctx.data(&render::grant_details(&made.grant, SystemClock.now()));
    }
    Ok(Exit::Done)
}

async fn revoke(ctx: &Context, args: RevokeArgs) -> Result<Exit, CliError> {
    let id = resolve_grant(ctx, &args.grant).await?;
    let revoked = ctx.backend.revoke_grant(&id).await?;
    if ctx.json {
        ctx.print_json(&revoked.json);
    } else {
        ctx.data(&format!("grant {id} revoked\n"));
    }
    Ok(Exit::Done)
}

/// The full id of the one grant whose id starts with `prefix` (a whole id as it is; a shorter prefix
/// by listing every grant); exit 1 naming it when none or several match.
async fn resolve_grant(ctx: &Context, prefix: &str) -> Result<GrantId, CliError> {
    let prefix = prefix.trim();
    if prefix.is_empty() {
        return Err(CliError::usage("a grant id (or a unique prefix of one) is required"));
    }
    if crate::remote::is_full_id(prefix) {
        return Ok(GrantId::from(prefix));
    }
    let every = GrantFilter { active: false, ..GrantFilter::default() };
    let mut matches: Vec<GrantId> = all_grants(ctx, every)
        .await?
        .into_iter()
        .map(|g| g.grant.id)
        .filter(|id| id.as_str().starts_with(prefix))
        .collect();
    match matches.len() {
        0 => Err(CliError::failed(format!("no grant matches `{prefix}`"))),
        1 => Ok(matches.remove(0)),
        n => Err(CliError::failed(format!("the prefix `{prefix}` matches {n} grants; give more characters"))),
    }
}

/// `tollgate seal`: the migration of docs/cli.md, on the configured store, in batches, reporting each
/// one on stderr. Exit 1 when a run was refused (its values look planted; see `tollgate_agent_store::seal`).
async fn seal(ctx: &Context, args: SealArgs) -> Result<Exit, CliError> {
    let crate::backend::Backend::Local(local) = ctx.backend() else {
        return Err(CliError::usage("`seal` works on the store itself: run it where the store is, without --server"));
    };
    let options = tollgate_agent_app::store_options(&local.config).map_err(CliError::usage)?;
    if options.data_keys.is_none() {
        return Err(CliError::usage("`seal` needs [[privacy.keys]]: configure the key to seal with first"));
    }
    let progress = |batch: &tollgate_agent_store::seal::SealReport| {
        ctx.note(&format!(
            "checked {} run(s): sealed {} value(s) of {} run(s) and {} event(s)",
            batch.runs_checked, batch.columns_sealed, batch.runs_sealed, batch.events_sealed
        ));
    };
    let report = tollgate_agent_store::seal_unsealed(&local.config.store.url, options, args.batch, progress)
        .await
        .map_err(|e| CliError::failed(e.to_string()))?;
    if ctx.json {
        ctx.print_json(&serde_json::to_value(&report).unwrap_or_default());
    } else {
        let mut text = format!(
            "runs checked: {}\nruns sealed: {}\nrun values sealed: {}\nevents sealed: {}\nruns refused: {}\n",
            report.runs_checked,
            report.runs_sealed,
            report.columns_sealed,
            report.events_sealed,
            report.refused.len()
        );
        for refused in &report.refused {
            text.push_str(&format!("  {}: {}\n", refused.id, refused.reason));
        }
        ctx.data(&text);
    }
    Ok(if report.refused.is_empty() { Exit::Done } else { Exit::Failed })
}
