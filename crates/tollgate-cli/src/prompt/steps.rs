//! The steps of a run as a person at the terminal reads them, one or a few lines per event of the run's
//! log: model turns with their text and calls, results (shortened), the gate, decisions, the end.
//!
//! Pure functions of [`StoredEvent`]s, so the terminal shows exactly what the audit record says and
//! nothing the log does not. The final answer is not repeated here: `run` prints it on stdout.

use crate::render::one_line;
use serde_json::Value;
use tollgate_core::{EventKind, StoredEvent};

/// A model's text longer than this many characters is cut.
const TEXT_WIDTH: usize = 160;
/// A call's arguments longer than this many characters (as compact JSON) are cut.
const ARGUMENTS_WIDTH: usize = 96;
/// A result longer than this many characters is cut.
const RESULT_WIDTH: usize = 72;

/// The lines to print for one event (none for events that only mark progress).
pub(super) fn lines(event: &StoredEvent) -> Vec<String> {
    let data = &event.data;
    match event.kind {
        EventKind::ModelResponse => model_turn(event.round, data),
        EventKind::ToolStarted if data["gate"] != "allow" => {
            // Allow-gated calls are declared safe to repeat and show up with their result; a gated call
            // is shown as it starts, since this is the side effect a person decided on.
            vec![format!("  ▸ {} {} running", text(&data["call_id"]), text(&data["tool"]))]
        }
        EventKind::ToolFinished => vec![tool_result(data)],
        EventKind::ApprovalRequested => {
            let held: Vec<String> = data["calls"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c["gate"] == "ask" || c["in_doubt"] == true)
                .map(|c| format!("{} {}", text(&c["call_id"]), text(&c["tool"])))
                .collect();
            vec![format!("⏸ held at the gate: {}", held.join(", "))]
        }
        EventKind::Decision => vec![decision(data)],
        EventKind::RunResumed => vec![format!("▶ resumed by {}", text(&data["actor"]))],
        EventKind::RunCompleted => match data["termination_reason"].as_str() {
            Some("completed") | None => vec!["✓ run completed".to_owned()],
            Some(reason) => vec![format!("✓ run ended: {reason}")],
        },
        // How a run failed or was cancelled is said once, by the command's closing report.
        EventKind::RunStarted
        | EventKind::ModelRequest
        | EventKind::ToolStarted
        | EventKind::RunFailed
        | EventKind::RunCancelled
        | EventKind::RunExpired => Vec::new(),
    }
}

/// What the run is busy with after this event, for the spinner; `None` when the event says nothing new.
pub(super) fn activity(event: &StoredEvent) -> Option<String> {
    match event.kind {
        EventKind::RunStarted => Some("waiting for the model".to_owned()),
        EventKind::ModelRequest => Some(format!("waiting for the model (round {})", event.round)),
        EventKind::ToolStarted => {
            Some(format!("running {} {}", text(&event.data["call_id"]), text(&event.data["tool"])))
        }
        EventKind::RunResumed | EventKind::ToolFinished => Some("working".to_owned()),
        _ => None,
    }
}

fn model_turn(round: u32, data: &Value) -> Vec<String> {
    let calls = data["tool_calls"].as_array().cloned().unwrap_or_default();
    let said = data["text"].as_str().map(str::trim).filter(|t| !t.is_empty());
    let mut out = Vec::with_capacity(calls.len() + 1);
    out.push(match (said, calls.is_empty()) {
        // A turn without calls is the final answer, which `run` prints on stdout.
        (_, true) => format!("round {round} · model answered"),
        (Some(said), false) => format!("round {round} · model: {}", one_line(said, TEXT_WIDTH)),
        (None, false) => format!("round {round} · model asks for {} call(s)", calls.len()),
    });
    out.extend(calls.iter().map(|call| {
        format!(
            "  → {} {} {}",
            text(&call["call_id"]),
            text(&call["tool"]),
            one_line(&call["arguments"].to_string(), ARGUMENTS_WIDTH)
        )
    }));
    out
}

fn tool_result(data: &Value) -> String {
    let result = text(&data["result"]);
    let shown = if result.trim().is_empty() { "(empty)".to_owned() } else { one_line(result.trim(), RESULT_WIDTH) };
    let (mark, verb) = if data["is_error"] == true { ("✗", " failed") } else { ("←", "") };
    format!("  {mark} {} {}{verb}: {shown}", text(&data["call_id"]), text(&data["tool"]))
}

fn decision(data: &Value) -> String {
    let call = text(&data["call_id"]);
    let actor = text(&data["actor"]);
    match data["action"].as_str() {
        Some("approve") => format!("✓ {call} approved by {actor}"),
        Some("deny") => format!("✗ {call} denied by {actor}: {}", one_line(&text(&data["reason"]), TEXT_WIDTH)),
        Some("edit") => {
            format!("✎ {call} edited by {actor}: {}", one_line(&data["arguments"].to_string(), ARGUMENTS_WIDTH))
        }
        Some("respond") => {
            format!("↩ {call} answered by {actor}: {}", one_line(&text(&data["result"]), RESULT_WIDTH))
        }
        _ => format!("{call} decided by {actor}"),
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(kind: EventKind, round: u32, data: Value) -> StoredEvent {
        StoredEvent { seq: 1, at: "2025-01-01T00:00:00.000Z".into(), kind, round, data, hash: String::new() }
    }

    #[test]
    fn a_turn_with_calls_shows_its_text_and_each_call_with_arguments() {
        let turn = event(
            EventKind::ModelResponse,
            1,
            json!({"text": "Let me look.\nThen write.", "usage": {},
                   "tool_calls": [{"call_id": "call_1", "tool": "fs_list", "arguments": {"path": "."}},
                                  {"call_id": "call_2", "tool": "fs_write", "arguments": {"path": "n.txt"}}]}),
        );
        assert_eq!(
            lines(&turn),
            [
                "round 1 · model: Let me look. Then write.",
                "  → call_1 fs_list {\"path\":\".\"}",
                "  → call_2 fs_write {\"path\":\"n.txt\"}"
            ]
        );
    }

    #[test]
    fn the_final_answer_is_left_to_stdout() {
        let last = event(EventKind::ModelResponse, 2, json!({"text": "Saved note.txt.", "tool_calls": []}));
        assert_eq!(lines(&last), ["round 2 · model answered"]);
    }

    #[test]
    fn results_are_shortened_to_one_line_and_errors_marked() {
        let long = "x".repeat(500);
        let ok =
            event(EventKind::ToolFinished, 1, json!({"call_id": "c", "tool": "t", "is_error": false, "result": long}));
        let shown = lines(&ok).concat();
        assert!(shown.starts_with("  ← c t: xxx") && shown.ends_with('…'), "{shown}");
        assert!(shown.chars().count() < 120, "{shown}");
        let failed = event(
            EventKind::ToolFinished,
            1,
            json!({"call_id": "c", "tool": "t", "is_error": true, "result": "no\nway"}),
        );
        assert_eq!(lines(&failed), ["  ✗ c t failed: no way"]);
        let empty =
            event(EventKind::ToolFinished, 1, json!({"call_id": "c", "tool": "t", "is_error": false, "result": ""}));
        assert_eq!(lines(&empty), ["  ← c t: (empty)"]);
    }

    #[test]
    fn the_gate_and_every_kind_of_decision_are_shown() {
        let held = event(
            EventKind::ApprovalRequested,
            1,
            json!({"calls": [{"call_id": "call_1", "tool": "fs_list", "gate": "allow", "in_doubt": false},
                             {"call_id": "call_2", "tool": "fs_write", "gate": "ask", "in_doubt": false}]}),
        );
        assert_eq!(lines(&held), ["⏸ held at the gate: call_2 fs_write"]);
        let decided = |data: Value| lines(&event(EventKind::Decision, 1, data)).concat();
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
    fn only_gated_calls_are_shown_as_they_start() {
        let allowed = event(EventKind::ToolStarted, 1, json!({"call_id": "c", "tool": "fs_list", "gate": "allow"}));
        assert!(lines(&allowed).is_empty());
        let asked = event(EventKind::ToolStarted, 1, json!({"call_id": "c", "tool": "fs_write", "gate": "ask"}));
        assert_eq!(lines(&asked), ["  ▸ c fs_write running"]);
        assert_eq!(activity(&asked).as_deref(), Some("running c fs_write"));
    }

    #[test]
    fn the_end_is_marked_and_an_early_end_names_its_reason() {
        let done = event(EventKind::RunCompleted, 2, json!({"output": "x", "termination_reason": "completed"}));
        assert_eq!(lines(&done), ["✓ run completed"]);
        let capped = event(EventKind::RunCompleted, 9, json!({"output": "x", "termination_reason": "max_iterations"}));
        assert_eq!(lines(&capped), ["✓ run ended: max_iterations"]);
        let failed = event(EventKind::RunFailed, 1, json!({"error": {"kind": "model", "message": "boom"}}));
        assert!(lines(&failed).is_empty(), "the closing report says why a run failed");
    }
}
