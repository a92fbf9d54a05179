//! What every command works with: where the runs are (the [`Backend`]) and the output options, and the
//! ways a command prints (data on stdout, notes on stderr).

use crate::backend::Backend;
use crate::exit::{CliError, Exit};
use crate::render;
use crate::view::RunView;
use serde_json::Value;
use std::io::Write;
use tollgate_agent_core::{RunId, RunStatus};
use tollgate_agent_runtime::DecisionSet;

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
    /// run settles if they completed the set. Returns the run as it settled (or still waiting).
    pub async fn decide_and_settle(&self, prefix: &str, set: DecisionSet) -> Result<RunView, CliError> {
        let id = self.resolve(prefix).await?;
        let run = self.backend.get(&id).await?;
        let after = self.backend.decide(&run, &set).await?;
        if after.status == RunStatus::WaitingForApproval {
            return Ok(after);
        }
        self.note(&format!("run {id} resumed"));
        self.backend.wait_settled(&id).await
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
