//! The steps of a run as a person at the terminal reads them, one or a few lines per event of the run's
//! log: model turns with their text and calls, results (shortened), the gate, decisions, the end.
//!
//! Pure functions of [`StoredEvent`]s, so the terminal shows exactly what the audit record says and
//! nothing the log does not. The final answer is not repeated here: `run` prints it on stdout.

use crate::render::{approvals_count, one_line};
use std::collections::HashSet;
use tollgate_agent_core::{EventKind, StoredEvent};
use tollgate_agent_protocol::event_data::{self as data, LoggedDecision};
use tollgate_agent_protocol::{CallId, EventData, Gate};

/// A model's text longer than this many characters is cut.
const TEXT_WIDTH: usize = 160;
/// A call's arguments longer than this many characters (as compact JSON) are cut.
const ARGUMENTS_WIDTH: usize = 96;
/// A result longer than this many characters is cut.
const RESULT_WIDTH: usize = 72;

/// The event's data typed by its kind; a line saying so when it cannot be read.
fn typed(event: &StoredEvent) -> Result<EventData, String> {
    EventData::from_kind(event.kind, event.data.clone())
        .map_err(|e| format!("? event {} cannot be read: {e}", event.seq))
}

/// The calls the log read so far shows ran to their end, by round. A held turn listed again after a
/// crash still names a call that finished before it (the event keeps the v1 shape: gate `ask`, not in
/// doubt); that call is not held, and the line at the gate leaves it out.
#[derive(Debug, Default)]
pub(super) struct Ran(HashSet<(u32, CallId)>);

impl Ran {
    /// Remembers the call a `tool_finished` event names.
    pub(super) fn note(&mut self, event: &StoredEvent) {
        if event.kind == EventKind::ToolFinished
            && let Ok(EventData::ToolFinished(finished)) = typed(event)
        {
            self.0.insert((event.round, finished.call_id));
        }
    }

    fn contains(&self, round: u32, call_id: &CallId) -> bool {
        self.0.contains(&(round, call_id.clone()))
    }
}

/// The text of a `model_response` event (as stored: redacted); `None` for other events and turns without
/// text.
pub(super) fn model_text(event: &StoredEvent) -> Option<String> {
    match typed(event) {
        Ok(EventData::ModelResponse(response)) => response.text,
        _ => None,
    }
}

/// The lines to print for one event (none for events that only mark progress), given the calls that
/// already ran.
pub(super) fn lines(event: &StoredEvent, ran: &Ran) -> Vec<String> {
    let data = match typed(event) {
        Ok(data) => data,
        Err(line) => return vec![line],
    };
    match data {
        EventData::ModelResponse(response) => model_turn(event.round, &response),
        // Allow-gated calls are declared safe to repeat and show up with their result; a gated call is
        // shown as it starts, since this is the side effect a person decided on.
        EventData::ToolStarted(started) if started.gate != Gate::Allow => match started.grant.flatten() {
            Some(grant) => vec![format!("  ▸ {} {} running, allowed by grant {grant}", started.call_id, started.tool)],
            None => vec![format!("  ▸ {} {} running", started.call_id, started.tool)],
        },
        EventData::ToolFinished(finished) => vec![tool_result(&finished)],
        EventData::ApprovalRequested(requested) => {
            let held: Vec<String> = requested
                .calls
                .iter()
                .filter(|c| c.gate == Gate::Ask && !ran.contains(event.round, &c.call_id))
                .map(|c| format!("{} {}{}", c.call_id, c.tool, if c.in_doubt { " (in doubt)" } else { "" }))
                .collect();
            vec![format!("⏸ held at the gate: {}", held.join(", "))]
        }
        EventData::Decision(made) => vec![decision(&made)],
        EventData::ApprovalEscalated(escalated) => vec![format!(
            "⏫ still waiting after {}: escalated to {}",
            escalated.after,
            if escalated.notified.is_empty() { "nobody".to_owned() } else { escalated.notified.join(", ") }
        )],
        EventData::RunResumed(resumed) => vec![format!("▶ resumed by {}", resumed.actor)],
        EventData::RunTakenOver(taken) => {
            vec![format!("↻ taken over by {} (the lease of {} expired)", taken.owner, taken.previous_owner)]
        }
        EventData::RunCompleted(completed) => match completed.termination_reason {
            tollgate_agent_protocol::TerminationReason::Completed => vec!["✓ run completed".to_owned()],
            reason => vec![format!("✓ run ended: {}", reason.as_str())],
        },
        // How a run failed or was cancelled is said once, by the command's closing report.
        EventData::RunStarted(_)
        | EventData::ModelRequest(_)
        | EventData::ToolStarted(_)
        | EventData::RunFailed(_)
        | EventData::RunCancelled(_)
        | EventData::RunExpired(_) => Vec::new(),
    }
}

/// What the run is busy with after this event, for the spinner; `None` when the event says nothing new.
pub(super) fn activity(event: &StoredEvent) -> Option<String> {
    match event.kind {
        EventKind::RunStarted => Some("waiting for the model".to_owned()),
        EventKind::ModelRequest => Some(format!("waiting for the model (round {})", event.round)),
        EventKind::ToolStarted => match typed(event) {
            Ok(EventData::ToolStarted(started)) => Some(format!("running {} {}", started.call_id, started.tool)),
            _ => Some("running a tool".to_owned()),
        },
        EventKind::RunResumed | EventKind::ToolFinished => Some("working".to_owned()),
        _ => None,
    }
}

fn model_turn(round: u32, response: &data::ModelResponse) -> Vec<String> {
    let calls = &response.tool_calls;
    let said = response.text.as_deref().map(str::trim).filter(|t| !t.is_empty());
    let mut out = Vec::with_capacity(calls.len() + 1);
    out.push(match (said, calls.is_empty()) {
        // A turn without calls is the final answer, which `run` prints on stdout.
        (_, true) => format!("round {round} · model answered"),
        (Some(said), false) => format!("round {round} · model: {}", one_line(said, TEXT_WIDTH)),
        (None, false) => format!("round {round} · model asks for {} call(s)", calls.len()),
    });
    out.extend(calls.iter().map(|call| {
        format!("  → {} {} {}", call.call_id, call.tool, one_line(&call.arguments.to_string(), ARGUMENTS_WIDTH))
    }));
    out
}

fn tool_result(finished: &data::ToolFinished) -> String {
    let result = finished.result.as_deref().unwrap_or_default().trim();
    let shown = if result.is_empty() { "(empty)".to_owned() } else { one_line(result, RESULT_WIDTH) };
    let (mark, verb) = if finished.is_error { ("✗", " failed") } else { ("←", "") };
    format!("  {mark} {} {}{verb}: {shown}", finished.call_id, finished.tool)
}

/// One decision as a line; one made through a signed link from a notification (its `link`) says so after
/// the actor (`approved by ops via signed link`); on a quorum call, with the call's approvals after it
/// (` · 1 of 2 approvals (alice)`); an approval that made a grant names it (` · remembered as grant ID`).
fn decision(made: &data::DecisionMade) -> String {
    let call = &made.call_id;
    let actor = match &made.link {
        Some(_) => format!("{} via signed link", made.actor),
        None => made.actor.to_string(),
    };
    let line = match &made.decision {
        LoggedDecision::Approve => format!("✓ {call} approved by {actor}"),
        LoggedDecision::Deny { reason } => {
            format!("✗ {call} denied by {actor}: {}", one_line(reason.as_deref().unwrap_or_default(), TEXT_WIDTH))
        }
        LoggedDecision::Edit { arguments } => {
            format!("✎ {call} edited by {actor}: {}", one_line(&arguments.to_string(), ARGUMENTS_WIDTH))
        }
        LoggedDecision::Respond { result } => {
            format!("↩ {call} answered by {actor}: {}", one_line(result.as_deref().unwrap_or_default(), RESULT_WIDTH))
        }
    };
    let line = match &made.approvals {
        Some(approvals) => format!("{line} · {}", approvals_count(approvals)),
        None => line,
    };
    match &made.grant {
        Some(grant) => format!("{line} · remembered as grant {grant}"),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn lines_of(event: &StoredEvent) -> Vec<String> {
        lines(event, &Ran::default())
    }

    fn event(kind: EventKind, round: u32, data: Value) -> StoredEvent {
        StoredEvent { seq: 1, at: "2025-01-01T00:00:00.000Z".into(), kind, round, data, hash: String::new() }
    }

    #[test]
    fn a_turn_with_calls_shows_its_text_and_each_call_with_arguments() {
        let turn = event(
            EventKind::ModelResponse,
            1,
            json!({"text": "Let me look.\nThen write.", "usage": {"input_tokens": 1, "output_tokens": 2},
                   "tool_calls": [{"call_id": "call_1", "tool": "fs_list", "arguments": {"path": "."}},
                                  {"call_id": "call_2", "tool": "fs_write", "arguments": {"path": "n.txt"}}]}),
        );
        assert_eq!(
            lines_of(&turn),
            [
                "round 1 · model: Let me look. Then write.",
                "  → call_1 fs_list {\"path\":\".\"}",
                "  → call_2 fs_write {\"path\":\"n.txt\"}"
            ]
        );
    }

    #[test]
    fn the_final_answer_is_left_to_stdout() {
        let last = event(
            EventKind::ModelResponse,
            2,
            json!({"text": "Saved note.txt.", "tool_calls": [], "usage": {"input_tokens": 1, "output_tokens": 2}}),
        );
        assert_eq!(lines_of(&last), ["round 2 · model answered"]);
    }

    #[test]
    fn results_are_shortened_to_one_line_and_errors_marked() {
        let long = "x".repeat(500);
        let ok =
            event(EventKind::ToolFinished, 1, json!({"call_id": "c", "tool": "t", "is_error": false, "result": long}));
        let shown = lines_of(&ok).concat();
        assert!(shown.starts_with("  ← c t: xxx") && shown.ends_with('…'), "{shown}");
        assert!(shown.chars().count() < 120, "{shown}");
        let failed = event(
            EventKind::ToolFinished,
            1,
            json!({"call_id": "c", "tool": "t", "is_error": true, "result": "no\nway"}),
        );
        assert_eq!(lines_of(&failed), ["  ✗ c t failed: no way"]);
        let empty =
            event(EventKind::ToolFinished, 1, json!({"call_id": "c", "tool": "t", "is_error": false, "result": ""}));
        assert_eq!(lines_of(&empty), ["  ← c t: (empty)"]);
    }

    #[test]
    fn the_gate_and_every_kind_of_decision_are_shown() {
        let held = event(
            EventKind::ApprovalRequested,
            1,
            json!({"turn_digest": "sha256:00", "expires_at": null, "calls": [
                {"call_id": "call_1", "tool": "fs_list", "arguments": {}, "gate": "allow", "preview": null, "in_doubt": false},
                {"call_id": "call_2", "tool": "fs_write", "arguments": {}, "gate": "ask", "preview": null, "in_doubt": false}]}),
        );
        assert_eq!(lines_of(&held), ["⏸ held at the gate: call_2 fs_write"]);
        // Held again after a crash: call_1 finished before it (the log says so), call_2 is in doubt.
        let again = event(
            EventKind::ApprovalRequested,
            1,
            json!({"turn_digest": "sha256:01", "expires_at": null, "calls": [
                {"call_id": "call_1", "tool": "fs_write", "arguments": {}, "gate": "ask", "preview": null, "in_doubt": false},
                {"call_id": "call_2", "tool": "fs_write", "arguments": {}, "gate": "ask", "preview": null, "in_doubt": true}]}),
        );
        let finished = |round| {
            let data = json!({"call_id": "call_1", "tool": "fs_write", "is_error": false, "result": "ok"});
            let mut ran = Ran::default();
            ran.note(&event(EventKind::ToolFinished, round, data));
            ran
        };
        assert_eq!(lines(&again, &finished(1)), ["⏸ held at the gate: call_2 fs_write (in doubt)"]);
        assert_eq!(
            lines(&again, &finished(2)),
            ["⏸ held at the gate: call_1 fs_write, call_2 fs_write (in doubt)"],
            "another round's call_1 is another call"
        );
        let decided = |data: Value| lines_of(&event(EventKind::Decision, 1, data)).concat();
        assert_eq!(decided(json!({"action": "approve", "call_id": "c", "actor": "local"})), "✓ c approved by local");
        assert_eq!(
            decided(json!({"action": "deny", "reason": "not today", "call_id": "c", "actor": "local"})),
            "✗ c denied by local: not today"
        );
        assert_eq!(
            decided(json!({"action": "edit", "arguments": {"path": "e"}, "call_id": "c", "actor": "ann"})),
            "✎ c edited by ann: {\"path\":\"e\"}"
        );
        assert_eq!(
            decided(json!({"action": "respond", "result": "done", "call_id": "c", "actor": "local"})),
            "↩ c answered by local: done"
        );
    }

    #[test]
    fn a_vote_on_a_quorum_call_shows_the_count_after_it() {
        let decided = |data: Value| lines_of(&event(EventKind::Decision, 1, data)).concat();
        assert_eq!(
            decided(json!({"action": "approve", "call_id": "c", "actor": "alice",
                           "approvals": {"required": 2, "given": ["alice"]}})),
            "✓ c approved by alice · 1 of 2 approvals (alice)"
        );
        assert_eq!(
            decided(json!({"action": "approve", "call_id": "c", "actor": "bob",
                           "approvals": {"required": 2, "given": ["alice", "bob"]}})),
            "✓ c approved by bob · 2 of 2 approvals (alice, bob)"
        );
        assert_eq!(
            decided(json!({"action": "deny", "reason": "no", "call_id": "c", "actor": "carol",
                           "approvals": {"required": 3, "given": ["alice"]}})),
            "✗ c denied by carol: no · 1 of 3 approvals (alice)"
        );
    }

    #[test]
    fn only_gated_calls_are_shown_as_they_start() {
        let allowed = event(
            EventKind::ToolStarted,
            1,
            json!({"call_id": "c", "tool": "fs_list", "arguments": {}, "gate": "allow", "idempotency_key": "r:c"}),
        );
        assert!(lines_of(&allowed).is_empty());
        let asked = event(
            EventKind::ToolStarted,
            1,
            json!({"call_id": "c", "tool": "fs_write", "arguments": {}, "gate": "ask", "idempotency_key": "r:c"}),
        );
        assert_eq!(lines_of(&asked), ["  ▸ c fs_write running"]);
        assert_eq!(activity(&asked).as_deref(), Some("running c fs_write"));
        let granted = event(
            EventKind::ToolStarted,
            1,
            json!({"call_id": "c", "tool": "fs_write", "arguments": {}, "gate": "ask", "idempotency_key": "r:c",
                   "grant": "g-1"}),
        );
        assert_eq!(lines_of(&granted), ["  ▸ c fs_write running, allowed by grant g-1"]);
    }

    #[test]
    fn an_approval_that_made_a_grant_names_it() {
        let decided = event(
            EventKind::Decision,
            1,
            json!({"action": "approve", "call_id": "call_2", "actor": "local", "grant": "g-1"}),
        );
        assert_eq!(lines_of(&decided), ["✓ call_2 approved by local · remembered as grant g-1"]);
    }

    #[test]
    fn a_decision_made_through_a_signed_link_says_so_and_an_escalation_names_who_was_told() {
        let link = "0123456789abcdef0123456789abcdef";
        let decided = |data: Value| lines_of(&event(EventKind::Decision, 1, data)).concat();
        assert_eq!(
            decided(json!({"action": "approve", "call_id": "call_1", "actor": "ops", "link": link})),
            "✓ call_1 approved by ops via signed link"
        );
        assert_eq!(
            decided(json!({"action": "deny", "reason": "not now", "call_id": "call_1", "actor": "ops", "link": link})),
            "✗ call_1 denied by ops via signed link: not now"
        );
        assert_eq!(
            decided(json!({"action": "approve", "call_id": "c", "actor": "ops", "link": link,
                           "approvals": {"required": 2, "given": ["ops"]}})),
            "✓ c approved by ops via signed link · 1 of 2 approvals (ops)"
        );
        let escalated = event(
            EventKind::ApprovalEscalated,
            1,
            json!({"turn_digest": "sha256:00", "after": "1h", "notified": ["ops", "oncall"]}),
        );
        assert_eq!(lines_of(&escalated), ["⏫ still waiting after 1h: escalated to ops, oncall"]);
    }

    #[test]
    fn the_end_is_marked_and_an_early_end_names_its_reason() {
        let done = event(EventKind::RunCompleted, 2, json!({"output": "x", "termination_reason": "completed"}));
        assert_eq!(lines_of(&done), ["✓ run completed"]);
        let capped = event(EventKind::RunCompleted, 9, json!({"output": "x", "termination_reason": "max_iterations"}));
        assert_eq!(lines_of(&capped), ["✓ run ended: max_iterations"]);
        let failed = event(EventKind::RunFailed, 1, json!({"error": {"kind": "model", "message": "boom"}}));
        assert!(lines_of(&failed).is_empty(), "the closing report says why a run failed");
    }

    #[test]
    fn events_kept_at_privacy_level_metadata_still_show() {
        let finished =
            event(EventKind::ToolFinished, 1, json!({"call_id": "c", "tool": "t", "is_error": false, "result": null}));
        assert_eq!(lines_of(&finished), ["  ← c t: (empty)"]);
        let denied =
            event(EventKind::Decision, 1, json!({"action": "deny", "reason": null, "call_id": "c", "actor": "a"}));
        assert_eq!(lines_of(&denied), ["✗ c denied by a: "]);
        let broken = event(EventKind::ToolFinished, 1, json!({"tool": "t"}));
        assert!(lines_of(&broken).concat().starts_with("? event 1 cannot be read"), "{:?}", lines_of(&broken));
    }
}
