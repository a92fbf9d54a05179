//! A run as every command sees it, whichever way it was read: the run object of docs/api.md; and a
//! grant, the grant object of docs/api.md.
//!
//! Local mode builds it from the stored record with [`tollgate_agent_runtime::view::run_view`], the very function
//! the HTTP API answers with; `--server` mode reads it from the API. So `--json` prints the same object in
//! both modes (the JSON is kept exactly as built or received), and the text output is drawn from the same
//! fields.

use serde_json::Value;
use tollgate_agent_core::{Actor, Millis, RunId, RunRecord, RunStatus};
use tollgate_agent_protocol::{Call, Grant, Pending, Run, RunError, Usage};

/// One run: the docs/api.md object as it is ([`RunView::json`]) and its fields, typed by
/// [`tollgate_agent_protocol::Run`].
#[derive(Clone, Debug)]
pub struct RunView {
    /// The run object exactly as built or received, for `--json`.
    pub json: Value,
    /// The run's id.
    pub id: RunId,
    /// The agent's name.
    pub agent: String,
    /// Its status.
    pub status: RunStatus,
    /// Its input.
    pub input: String,
    /// What its starter gave its tools (empty when nothing).
    pub metadata: serde_json::Map<String, Value>,
    /// The final output, once completed.
    pub output: Option<String>,
    /// Why it ended (`completed`, `max_iterations`, …), once terminal.
    pub termination_reason: Option<String>,
    /// Model calls so far.
    pub iterations: u32,
    /// Tokens so far.
    pub usage: Usage,
    /// Who started it.
    pub created_by: Actor,
    /// When it was started (RFC 3339).
    pub created_at: String,
    /// Its last change (RFC 3339).
    pub updated_at: String,
    /// When it ended (RFC 3339).
    pub finished_at: Option<String>,
    /// Why it failed.
    pub error: Option<RunError>,
    /// The held turn, while it waits for approval.
    pub pending: Option<Pending>,
}

impl RunView {
    /// Reads an docs/api.md run object; says what does not fit.
    pub fn from_json(json: Value) -> Result<RunView, String> {
        let run: Run = serde_json::from_value(json.clone()).map_err(|e| format!("not a run object: {e}"))?;
        Ok(RunView::new(json, run))
    }

    fn new(json: Value, run: Run) -> RunView {
        RunView {
            json,
            id: run.id,
            agent: run.agent,
            status: run.status,
            input: run.input,
            metadata: run.metadata,
            output: run.output,
            termination_reason: run.termination_reason.map(|r| r.as_str().to_owned()),
            iterations: run.iterations,
            usage: run.usage,
            created_by: run.created_by,
            created_at: run.created_at,
            updated_at: run.updated_at,
            finished_at: run.finished_at,
            error: run.error,
            pending: run.pending,
        }
    }

    /// The view of a stored run, as the API would show it.
    pub fn from_record(run: &RunRecord) -> Result<RunView, String> {
        let view = tollgate_agent_runtime::view::run_view(run);
        let json = serde_json::to_value(&view).map_err(|e| format!("cannot write run {}: {e}", run.id))?;
        Ok(RunView::new(json, view))
    }

    /// The calls of the held turn that still need a decision ([`Call::awaits_decision`]).
    pub fn awaiting_decision(&self) -> impl Iterator<Item = &Call> {
        self.pending.iter().flat_map(|p| p.calls.iter()).filter(|c| c.awaits_decision())
    }
}

/// One grant: the docs/api.md object as it is ([`GrantView::json`], for `--json`) and its fields.
#[derive(Clone, Debug)]
pub struct GrantView {
    /// The grant object exactly as built or received.
    pub json: Value,
    /// Its fields.
    pub grant: Grant,
}

impl GrantView {
    /// Reads a docs/api.md grant object; says what does not fit.
    pub fn from_json(json: Value) -> Result<GrantView, String> {
        let grant = serde_json::from_value(json.clone()).map_err(|e| format!("not a grant object: {e}"))?;
        Ok(GrantView { json, grant })
    }

    /// The view of a grant as the API answers it (built by [`tollgate_agent_runtime::wire::grant`], the
    /// function the HTTP API answers with).
    pub fn from_wire(grant: Grant) -> Result<GrantView, String> {
        let json = serde_json::to_value(&grant).map_err(|e| format!("cannot write grant {}: {e}", grant.id))?;
        Ok(GrantView { json, grant })
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
                 "in_doubt": false, "decision": null, "state": "allowed", "takes_decision": false, "result": null},
                {"call_id": "call_2", "tool": "fs_write", "arguments": {}, "gate": "ask", "preview": "p",
                 "in_doubt": false, "decision": null, "state": "waiting", "takes_decision": true, "result": null},
                {"call_id": "call_3", "tool": "fs_write", "arguments": {}, "gate": "ask", "preview": null,
                 "in_doubt": false, "decision": {"action": "approve", "actor": "local", "at": "2026-11-29T10:00:01.000Z"},
                 "state": "decided", "takes_decision": false, "result": null},
                {"call_id": "call_4", "tool": "fs_write", "arguments": {}, "gate": "ask", "preview": null,
                 "in_doubt": false, "decision": null, "state": "finished", "takes_decision": false,
                 "result": {"content": "wrote", "is_error": false}}
            ]}
        });
        let run = RunView::from_json(json.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run.status, RunStatus::WaitingForApproval);
        assert_eq!(run.json, json, "the object is kept as it came");
        let open: Vec<&str> = run.awaiting_decision().map(|c| c.call_id.as_str()).collect();
        assert_eq!(open, ["call_2"], "only the call that takes a decision: not the one that already ran");
        assert_eq!(millis(&run.created_at), Some(1_795_946_400_000));
        assert!(RunView::from_json(json!({"id": 3})).is_err());
    }
}
