//! What every command works with: where the runs are (the [`Backend`]) and the output options, and the
//! ways a command prints (data on stdout, notes on stderr).

use crate::backend::Backend;
use crate::exit::{CliError, Exit};
use crate::render;
use crate::view::RunView;
use serde_json::Value;
use std::io::Write;
use tollgate_agent_core::{CallId, Decision, EventKind, GrantId, RunId, RunStatus};
use tollgate_agent_runtime::DecisionSet;
use tollgate_agent_runtime::decide::RememberSpec;

/// What every command works with: the backend and the output options.
pub struct Context {
    pub(crate) backend: Backend,
    pub(crate) json: bool,
    pub(crate) quiet: bool,
}

impl Context {
    /// A context over a backend.
    pub fn new(backend: Backend, json: bool, quiet: bool) -> Self {
        Self { backend, json, quiet }
    }

    /// Where the runs are.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// True with `-q`: only errors on stderr.
    pub fn is_quiet(&self) -> bool {
        self.quiet
    }

    /// A message for people on stderr (not with `-q`), made safe for a terminal.
    pub fn note(&self, text: &str) {
        if !self.quiet {
            say!("{text}");
        }
    }

    /// Text for people on stdout, made safe for a terminal ([`tollgate_agent_core::terminal_safe`]): line
    /// breaks and tabs kept, every other control or format character shown as an escape.
    pub(crate) fn data(&self, text: &str) {
        write_stdout(&tollgate_agent_core::terminal_safe(text));
    }

    /// JSON on stdout, exact: JSON escapes control characters itself, and a program reads it.
    pub(crate) fn print_json(&self, value: &Value) {
        let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
        write_stdout(&format!("{text}\n"));
    }

    /// The full id of the one run whose id starts with `prefix`.
    pub async fn resolve(&self, prefix: &str) -> Result<RunId, CliError> {
        if prefix.trim().is_empty() {
            return Err(CliError::usage("a run id (or a unique prefix of one) is required"));
        }
        self.backend.resolve(prefix).await
    }

    /// Records decisions for the run `prefix` names, on the held turn as it is now, and waits until the
    /// run settles if they completed the set. With `remember`, each approval of the set makes a grant
    /// in the same transaction (every call the set approves, `approve` without `--call` naming each
    /// undecided call of the turn as read), and the grants made are said on stderr. Returns the run as it
    /// settled (or still waiting).
    pub async fn decide_and_settle(
        &self,
        prefix: &str,
        set: DecisionSet,
        remember: Option<RememberSpec>,
    ) -> Result<RunView, CliError> {
        let id = self.resolve(prefix).await?;
        let run = self.backend.get(&id).await?;
        let (set, remember) = match remember {
            None => (set, Vec::new()),
            Some(spec) => {
                // The API's `approve_all` carries no `remember`: the calls are named. (With none to name,
                // the set stays as it was, and is refused as it would be without `remember`.)
                let open: Vec<(CallId, Decision)> =
                    run.awaiting_decision().map(|call| (call.call_id.clone(), Decision::Approve)).collect();
                let set = match set {
                    DecisionSet::ApproveAll if !open.is_empty() => DecisionSet::Each(open),
                    other => other,
                };
                let remember = match &set {
                    DecisionSet::Each(list) => list
                        .iter()
                        .filter(|(_, decision)| matches!(decision, Decision::Approve))
                        .map(|(call_id, _)| (call_id.clone(), spec.clone()))
                        .collect(),
                    DecisionSet::ApproveAll | DecisionSet::DenyAll { .. } => Vec::new(),
                };
                (set, remember)
            }
        };
        let after = self.backend.decide(&run, &set, &remember).await?;
        if !remember.is_empty() {
            self.note_grants_made(&id, &remember).await;
        }
        if after.status == RunStatus::WaitingForApproval {
            return Ok(after);
        }
        self.note(&format!("run {id} resumed"));
        self.backend.wait_settled(&id).await
    }

    /// Says on stderr which grant each remembered approval made (the `decision` events name them), so
    /// the person knows what to revoke. What cannot be read is left unsaid: the decisions stand.
    async fn note_grants_made(&self, run_id: &RunId, remember: &[(CallId, RememberSpec)]) {
        let events = match self.backend.events(run_id, 0).await {
            Ok(events) => events,
            Err(error) => {
                tracing::warn!(run = %run_id, error = %error.message, "cannot read which grants were made");
                return;
            }
        };
        for (call_id, _) in remember {
            // The call's latest decision: the one just recorded.
            let made = events
                .iter()
                .rev()
                .find(|e| e.kind == EventKind::Decision && e.data["call_id"].as_str() == Some(call_id.as_str()))
                .and_then(|e| e.data["grant"].as_str())
                .map(GrantId::from);
            let Some(grant_id) = made else { continue };
            match self.backend.grant(&grant_id).await {
                Ok(grant) => self.note(&format!("{call_id}: {}", render::grant_sentence(&grant.grant))),
                Err(error) => tracing::warn!(grant = %grant_id, error = %error.message, "cannot read the grant made"),
            }
        }
    }

    /// Prints a settled run (its output, or the waiting line and how to decide, or why it ended) and
    /// returns the exit code its state calls for.
    pub(crate) fn report(&self, run: &RunView) -> Exit {
        if self.json {
            self.print_json(&run.json);
        } else {
            match run.status {
                RunStatus::Completed => {
                    if let Some(output) = &run.output {
                        self.data(&format!("{output}\n"));
                    }
                    if let Some(reason) = run.termination_reason.as_deref().filter(|r| *r != "completed") {
                        self.note(&format!("run {} ended early: {reason}", run.id));
                    }
                }
                RunStatus::WaitingForApproval => {
                    self.note(render::held_calls_summary(run).trim_end());
                    self.data(&render::waiting_lines(run));
                }
                _ => say!("{}", render::unfinished_reason(run)),
            }
        }
        Exit::for_status(run.status)
    }
}

fn write_stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}
