//! A run as every command sees it, whichever way it was read: the run object of API.md.
//!
//! Local mode builds it from the stored record with [`tollgate_runtime::view::run_json`], the very function
//! the HTTP API answers with; `--server` mode reads it from the API. So `--json` prints the same object in
//! both modes (the JSON is kept exactly as built or received), and the text output is drawn from the same
//! fields.

use serde::Deserialize;
use serde_json::Value;
use tollgate_core::{Millis, RunError, RunRecord, RunStatus, Usage};

/// One run: the API.md object as it is ([`RunView::json`]) and its fields, typed.
#[derive(Clone, Debug)]
pub struct RunView {
    /// The run object exactly as built or received, for `--json`.
    pub json: Value,
    /// The run's id.
    pub id: String,
    /// The agent's name.
    pub agent: String,
    /// Its status.
    pub status: RunStatus,
    /// Its input.
    pub input: String,
    /// The final output, once completed.
    pub output: Option<String>,
    /// Why it ended (`completed`, `max_iterations`, …), once terminal.
    pub termination_reason: Option<String>,
    /// Model calls so far.
    pub iterations: u32,
    /// Tokens so far.
    pub usage: Usage,
    /// Who started it.
    pub created_by: String,
    /// When it was started (RFC 3339).
    pub created_at: String,
    /// Its last change (RFC 3339).
    pub updated_at: String,
    /// When it ended (RFC 3339).
    pub finished_at: Option<String>,
    /// Why it failed.
    pub error: Option<RunError>,
    /// The held turn, while it waits for approval.
    pub pending: Option<PendingView>,
}

/// The held turn of a waiting run.
#[derive(Clone, Debug, Deserialize)]
pub struct PendingView {
    /// The digest a decision must name.
    pub turn_digest: String,
    /// The approval deadline (RFC 3339), if any.
    pub expires_at: Option<String>,
    /// Every call of the turn, allow-gated ones too.
    pub calls: Vec<CallView>,
}

/// One call of a held turn.
#[derive(Clone, Debug, Deserialize)]
pub struct CallView {
    /// The model's id for the call.
    pub call_id: String,
    /// The tool named.
    pub tool: String,
    /// The model's arguments.
    pub arguments: Value,
    /// The gate's verdict: `allow`, `ask` or `forbid`.
    pub gate: String,
    /// What the approver sees.
    pub preview: Option<String>,
    /// Started before a crash; may already have run.
    #[serde(default)]
    pub in_doubt: bool,
    /// The decision recorded for it so far.
    pub decision: Option<Value>,
}

impl CallView {
    /// True when the call still needs a person's decision: it is ask-gated or in doubt, and undecided.
    /// (The API does not say whether a call was settled before a crash; such a call is refused when
    /// decided, and the refusal is shown.)
    pub fn awaits_decision(&self) -> bool {
        self.decision.is_none() && (self.gate == "ask" || self.in_doubt)
    }
}

/// The typed fields of the run object.
#[derive(Deserialize)]
struct Fields {
    id: String,
    agent: String,
    status: RunStatus,
    input: String,
    output: Option<String>,
    termination_reason: Option<String>,
    iterations: u32,
    usage: Usage,
    created_by: String,
    created_at: String,
    updated_at: String,
    finished_at: Option<String>,
    error: Option<RunError>,
    pending: Option<PendingView>,
}

impl RunView {
    /// Reads an API.md run object; says what does not fit.
    pub fn from_json(json: Value) -> Result<RunView, String> {
        let f: Fields = Fields::deserialize(&json).map_err(|e| format!("not a run object: {e}"))?;
        Ok(RunView {
            json,
            id: f.id,
            agent: f.agent,
            status: f.status,
            input: f.input,
            output: f.output,
            termination_reason: f.termination_reason,
            iterations: f.iterations,
            usage: f.usage,
            created_by: f.created_by,
            created_at: f.created_at,
            updated_at: f.updated_at,
            finished_at: f.finished_at,
            error: f.error,
            pending: f.pending,
        })
    }

    /// The view of a stored run, as the API would show it.
    pub fn from_record(run: &RunRecord) -> Result<RunView, String> {
        Self::from_json(tollgate_runtime::view::run_json(run))
    }

    /// The calls of the held turn that still need a decision.
    pub fn awaiting_decision(&self) -> impl Iterator<Item = &CallView> {
        self.pending.iter().flat_map(|p| p.calls.iter()).filter(|c| c.awaits_decision())
    }
}

/// Milliseconds since the epoch of an RFC 3339 time; `None` when it is not one.
pub fn millis(rfc3339: &str) -> Option<Millis> {
    chrono::DateTime::parse_from_rfc3339(rfc3339).ok().map(|t| t.timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_waiting_run_object_reads_with_its_held_calls() {
        let json = json!({
            "id": "0193b0c6-0000-7000-8000-000000000001", "agent": "demo", "status": "waiting_for_approval",
            "input": "hello", "output": null, "termination_reason": null, "iterations": 1,
            "usage": {"input_tokens": 3, "output_tokens": 4}, "version": 3, "created_by": "local",
            "created_at": "2026-11-29T10:00:00.000Z", "updated_at": "2026-11-29T10:00:01.000Z",
            "finished_at": null, "error": null,
            "pending": {"turn_digest": "sha256:00", "expires_at": null, "calls": [
                {"call_id": "call_1", "tool": "fs_list", "arguments": {}, "gate": "allow", "preview": null,
                 "in_doubt": false, "decision": null},
                {"call_id": "call_2", "tool": "fs_write", "arguments": {}, "gate": "ask", "preview": "p",
                 "in_doubt": false, "decision": null},
                {"call_id": "call_3", "tool": "fs_write", "arguments": {}, "gate": "ask", "preview": null,
                 "in_doubt": false, "decision": {"action": "approve", "actor": "local"}}
            ]}
        });
        let run = RunView::from_json(json.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run.status, RunStatus::WaitingForApproval);
        assert_eq!(run.json, json, "the object is kept as it came");
        let open: Vec<&str> = run.awaiting_decision().map(|c| c.call_id.as_str()).collect();
        assert_eq!(open, ["call_2"]);
        assert_eq!(millis(&run.created_at), Some(1_795_946_400_000));
        assert!(RunView::from_json(json!({"id": 3})).is_err());
    }
}
