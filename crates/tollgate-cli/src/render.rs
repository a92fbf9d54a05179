//! Text output for people: the runs table, one run, its event log, the lines printed when a run
//! waits for approval, and grants. Pure functions of the runs and grants (as [`RunView`]s and
//! [`GrantView`]s, the same in local and `--server` mode) and the current time, so they are easy to test.

use crate::view::{GrantView, RunView, millis};
use serde_json::Value;
use tollgate_agent_core::{Millis, RunStatus, StoredEvent};
use tollgate_agent_protocol::{Approvals, CallState, Decision, Escalated, Grant, GrantScope, Pending};

/// Input longer than this many characters is cut in the runs table.
const INPUT_WIDTH: usize = 40;
/// An event's data longer than this many characters is cut in the event log.
const EVENT_DATA_WIDTH: usize = 100;

/// How long ago `then` was, in the largest whole unit: `5s`, `3m`, `2h`, `4d`.
pub fn age(now: Millis, then: Millis) -> String {
    let seconds = (now - then).max(0) / 1000;
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// How long from `now` until `then`, in the largest whole unit, rounded to the nearest (a grant made for
/// 8h shows `8h`, not `7h`, a moment later): `45s`, `30m`, `8h`, `7d`.
pub fn time_left(now: Millis, then: Millis) -> String {
    let seconds = (then - now).max(0) / 1000;
    let nearest = |unit: i64| (seconds + unit / 2) / unit;
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 - 30 => format!("{}m", nearest(60)),
        s if s < 86_400 - 1800 => format!("{}h", nearest(3600)),
        _ => format!("{}d", nearest(86_400)),
    }
}

/// How long ago an RFC 3339 time was ([`age`]); `?` when the time cannot be read.
fn age_of(now: Millis, then: &str) -> String {
    millis(then).map_or_else(|| "?".to_owned(), |then| age(now, then))
}

/// Text on one line, at most `width` characters, with `…` when cut: line breaks and tabs become spaces,
/// and every other control or format character a visible escape
/// ([`tollgate_agent_core::terminal_safe_line`]), so nothing in it acts on the terminal.
pub(crate) fn one_line(text: &str, width: usize) -> String {
    let flat: String = text.chars().map(|c| if c == '\n' || c == '\t' { ' ' } else { c }).collect();
    let flat = tollgate_agent_core::terminal_safe_line(&flat).into_owned();
    if flat.chars().count() <= width {
        return flat;
    }
    let mut cut: String = flat.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Rows padded into columns, two spaces apart; the last column is not padded.
pub fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|cell| cell.chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(widths[c] - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The `runs` table: id, agent, status (`waiting_for_approval (escalated)` once the held turn was
/// escalated), age, input. Empty text when there are no runs.
pub fn runs_table(runs: &[RunView], now: Millis) -> String {
    if runs.is_empty() {
        return String::new();
    }
    let mut rows = vec![vec!["ID".into(), "AGENT".into(), "STATUS".into(), "AGE".into(), "INPUT".into()]];
    rows.extend(runs.iter().map(|run| {
        vec![
            run.id.to_string(),
            run.agent.clone(),
            match run.pending.as_ref().and_then(|p| p.escalated.as_ref()) {
                Some(_) => format!("{} (escalated)", run.status),
                None => run.status.to_string(),
            },
            age_of(now, &run.created_at),
            one_line(&run.input, INPUT_WIDTH),
        ]
    }));
    table(&rows)
}

/// One run as `show` prints it: its fields, then the held turn with each call's preview and decision.
pub fn run_details(run: &RunView, now: Millis) -> String {
    let mut rows: Vec<Vec<String>> = vec![
        vec!["run".into(), run.id.to_string()],
        vec!["agent".into(), run.agent.clone()],
        vec!["status".into(), run.status.to_string()],
        vec!["input".into(), one_line(&run.input, 200)],
    ];
    if !run.metadata.is_empty() {
        rows.push(vec!["metadata".into(), one_line(&Value::Object(run.metadata.clone()).to_string(), 200)]);
    }
    rows.push(vec![
        "created".into(),
        format!("{} ({} ago, by {})", run.created_at, age_of(now, &run.created_at), run.created_by),
    ]);
    rows.push(vec!["updated".into(), run.updated_at.clone()]);
    if let Some(finished) = &run.finished_at {
        rows.push(vec!["finished".into(), finished.clone()]);
    }
    rows.push(vec!["iterations".into(), run.iterations.to_string()]);
    rows.push(vec!["tokens".into(), format!("{} in, {} out", run.usage.input_tokens, run.usage.output_tokens)]);
    if let Some(reason) = &run.termination_reason {
        rows.push(vec!["ended".into(), reason.clone()]);
    }
    if let Some(output) = &run.output {
        rows.push(vec!["output".into(), one_line(output, 200)]);
    }
    if let Some(error) = &run.error {
        let error = format!("{}: {}", error.kind, error.message);
        rows.push(vec!["error".into(), tollgate_agent_core::terminal_safe_line(&error).into_owned()]);
    }
    let mut out = table(&rows);
    if let Some(pending) = &run.pending {
        out.push_str(&held_turn(pending));
    }
    out
}

/// The held turn of a run: digest, deadline, its escalation, and every call.
fn held_turn(pending: &Pending) -> String {
    let mut out = format!("\nheld turn {}\n", pending.turn_digest);
    if let Some(expires) = &pending.expires_at {
        out.push_str(&format!("decide before {expires}\n"));
    }
    if let Some(escalated) = &pending.escalated {
        out.push_str(&format!("{}\n", escalation_line(escalated)));
    }
    for call in &pending.calls {
        let doubt = "  IN DOUBT: it may already have run";
        let note = match call.state {
            CallState::InDoubt => doubt,
            CallState::Decided if call.in_doubt => doubt,
            CallState::Finished => "  FINISHED: it ran before a crash; its result stands",
            CallState::Waiting | CallState::Decided | CallState::Allowed | CallState::Refused => "",
        };
        out.push_str(&format!(
            "\n  {}  {}  gate {}{note}\n    arguments {}\n",
            call.call_id,
            call.tool,
            call.gate.as_str(),
            call.arguments
        ));
        if let Some(preview) = &call.preview {
            out.push_str("    preview\n");
            for line in preview.lines() {
                out.push_str(&format!("      {line}\n"));
            }
        }
        if let Some(result) = &call.result {
            let failed = if result.is_error { " (the tool failed)" } else { "" };
            out.push_str(&format!("    result{failed}\n"));
            if result.content.is_empty() {
                out.push_str("      (empty)\n");
            }
            for line in result.content.lines() {
                out.push_str(&format!("      {line}\n"));
            }
        }
        if let Some(approvals) = &call.approvals {
            out.push_str(&format!("    {}\n", approvals_count(approvals)));
        }
        if let Some(grant) = &call.grant {
            out.push_str(&format!("    allowed by grant {grant}\n"));
        }
        if let Some(pattern) = call.suggested_match.as_ref().filter(|_| call.takes_decision) {
            out.push_str(&format!("    suggested match {}\n", Value::Object(pattern.clone())));
        }
        if let Some(recorded) = &call.decision {
            let detail = match &recorded.decision {
                Decision::Approve => String::new(),
                Decision::Deny { reason } => format!(": {reason}"),
                Decision::Respond { result } => format!(": {result}"),
                Decision::Edit { arguments } => format!(": {}", text_of(arguments)),
            };
            out.push_str(&format!("    decided {} by {}{detail}\n", recorded.decision.action(), recorded.actor));
        } else if call.takes_decision {
            out.push_str("    awaiting a decision\n");
        }
    }
    out
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The event log, one event per line: seq, time, kind, round and the data (cut).
pub fn events_table(events: &[StoredEvent]) -> String {
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                e.seq.to_string(),
                e.at.clone(),
                e.kind.as_str().to_owned(),
                format!("r{}", e.round),
                one_line(&e.data.to_string(), EVENT_DATA_WIDTH),
            ]
        })
        .collect();
    table(&rows)
}

/// A quorum call's approvals (V2.md §4, a policy rule's `approvals = N`) as people read them: how many
/// of how many, and who approved so far, in order: `1 of 2 approvals (alice)`, `0 of 2 approvals`.
pub(crate) fn approvals_count(approvals: &Approvals) -> String {
    let count = format!("{} of {} approvals", approvals.given.len(), approvals.required);
    if approvals.given.is_empty() { count } else { format!("{count} ({})", approvals.given.join(", ")) }
}

/// A held turn's escalation (`pending.escalated`, V2.md §4) as people read it: when, and the notifiers
/// told, in order: `escalated at 2026-12-05T09:00:00.000Z · notified ops, oncall`.
pub(crate) fn escalation_line(escalated: &Escalated) -> String {
    let notified = if escalated.notified.is_empty() { "nobody".to_owned() } else { escalated.notified.join(", ") };
    format!("escalated at {} · notified {}", one_line(&escalated.at, 40), one_line(&notified, 200))
}

/// What `run` and the deciding commands print on stdout when a run waits: CLI.md's waiting line, as it
/// is, then each quorum call still open with its count on a line of its own (so a run that waits after
/// an approval says it waits for more approvers, not that the approval was lost), then the turn's
/// escalation once it was escalated, then the commands that decide it.
pub fn waiting_lines(run: &RunView) -> String {
    let id = &run.id;
    let quorums: String = run
        .awaiting_decision()
        .filter_map(|call| call.approvals.as_ref().map(|a| format!("{} has {}\n", call.call_id, approvals_count(a))))
        .collect();
    let escalated = match run.pending.as_ref().and_then(|p| p.escalated.as_ref()) {
        Some(escalated) => format!("{}\n", escalation_line(escalated)),
        None => String::new(),
    };
    format!(
        "run {id} is waiting for approval\n\
         {quorums}\
         {escalated}\
         approve: tollgate approve {id}\n\
         deny:    tollgate deny {id} --reason TEXT\n\
         details: tollgate show {id}\n"
    )
}

/// What is printed on stderr when a run waits: each call that needs a decision, with its preview.
pub fn held_calls_summary(run: &RunView) -> String {
    let mut out = String::new();
    for call in run.awaiting_decision() {
        let count = call.approvals.as_ref().map(|a| format!(", with {}", approvals_count(a))).unwrap_or_default();
        out.push_str(&format!("{} {} wants to run{count}: {}\n", call.call_id, call.tool, call.arguments));
        if let Some(preview) = &call.preview {
            for line in preview.lines() {
                out.push_str(&format!("  {line}\n"));
            }
        }
    }
    out
}

/// Grants listed in the `grants` table: the match cut to this many characters.
const MATCH_WIDTH: usize = 60;

/// A grant's `match` on one line: compact JSON, or `any arguments` for `{}`.
fn match_text(grant: &Grant) -> String {
    if grant.r#match.is_empty() { "any arguments".to_owned() } else { Value::Object(grant.r#match.clone()).to_string() }
}

/// Whether a grant still allows calls at `now`, and until when, as the `EXPIRES` column says it:
/// `in 8h`, `expired`, `revoked`.
fn grant_state(grant: &Grant, now: Millis) -> String {
    if grant.revoked_at.is_some() {
        return "revoked".to_owned();
    }
    match millis(&grant.expires_at) {
        Some(expires) if expires > now => format!("in {}", time_left(now, expires)),
        Some(_) => "expired".to_owned(),
        None => "?".to_owned(),
    }
}

/// The agent a grant allows calls of, and for scope `run` the run (its whole id: the first characters
/// of ids made in the same minute are the same).
fn grant_agent(grant: &Grant) -> String {
    match (&grant.scope, &grant.run_id) {
        (GrantScope::Run, Some(run)) => format!("{} (run {run})", grant.agent),
        _ => grant.agent.clone(),
    }
}

/// The `grants` table: id, agent, tool, match, expires, uses, creator. Empty text when there are none.
pub fn grants_table(grants: &[GrantView], now: Millis) -> String {
    if grants.is_empty() {
        return String::new();
    }
    let mut rows = vec![["ID", "AGENT", "TOOL", "MATCH", "EXPIRES", "USES", "CREATOR"].map(str::to_owned).to_vec()];
    rows.extend(grants.iter().map(|view| {
        let grant = &view.grant;
        vec![
            grant.id.to_string(),
            one_line(&grant_agent(grant), 100),
            one_line(&grant.tool, 40),
            one_line(&match_text(grant), MATCH_WIDTH),
            grant_state(grant, now),
            grant.uses.to_string(),
            one_line(grant.created_by.as_str(), 40),
        ]
    }));
    table(&rows)
}

/// One grant as `grant` prints it: its fields, then (with `--apply-to-waiting`) the runs it approved.
pub fn grant_details(grant: &Grant, now: Millis) -> String {
    let mut rows: Vec<Vec<String>> = vec![
        vec!["grant".into(), grant.id.to_string()],
        vec!["agent".into(), one_line(&grant.agent, 200)],
        vec!["tool".into(), one_line(&grant.tool, 200)],
        vec!["match".into(), one_line(&match_text(grant), 400)],
        vec![
            "scope".into(),
            match &grant.run_id {
                Some(run) => format!("run {run}"),
                None => format!("{} (every run of {})", grant.scope, one_line(&grant.agent, 200)),
            },
        ],
    ];
    if let Some(reason) = &grant.reason {
        rows.push(vec!["reason".into(), one_line(reason, 200)]);
    }
    rows.push(vec!["created".into(), format!("{} by {}", grant.created_at, one_line(grant.created_by.as_str(), 200))]);
    rows.push(vec!["expires".into(), format!("{} ({})", grant.expires_at, grant_state(grant, now))]);
    if let Some(revoked) = &grant.revoked_at {
        let by = grant.revoked_by.as_ref().map(|a| format!(" by {}", one_line(a.as_str(), 200))).unwrap_or_default();
        rows.push(vec!["revoked".into(), format!("{revoked}{by}")]);
    }
    rows.push(vec!["uses".into(), grant.uses.to_string()]);
    let mut out = table(&rows);
    match grant.applied_to.as_deref() {
        None => {}
        Some([]) => out.push_str("applied to no waiting run\n"),
        Some(runs) => {
            out.push_str(&format!("applied to {} waiting run(s):\n", runs.len()));
            for run in runs {
                out.push_str(&format!("  {run}\n"));
            }
        }
    }
    out
}

/// A grant in one sentence, for stderr after a decision made it: `remembered as grant ID: fs_write calls of
/// agent demo whose arguments match {"/path":"notes/*"} pass the gate until TIME`.
pub fn grant_sentence(grant: &Grant) -> String {
    let arguments = if grant.r#match.is_empty() {
        "whatever their arguments".to_owned()
    } else {
        format!("whose arguments match {}", match_text(grant))
    };
    let runs = match &grant.run_id {
        Some(run) => format!(" in run {run}"),
        None => String::new(),
    };
    format!(
        "remembered as grant {}: {} calls of agent {} {arguments} pass the gate{runs} until {}",
        grant.id, grant.tool, grant.agent, grant.expires_at
    )
}

/// A sentence for a run that ended without completing, for stderr.
pub fn unfinished_reason(run: &RunView) -> String {
    match run.status {
        RunStatus::Failed => match &run.error {
            Some(error) => format!("run {} failed: {} ({})", run.id, error.message, error.kind),
            None => format!("run {} failed", run.id),
        },
        RunStatus::Cancelled => format!("run {} was cancelled", run.id),
        RunStatus::Expired => format!("run {} expired: its approval deadline passed", run.id),
        other => format!("run {} is {other}", run.id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_agent_core::Actor;

    #[test]
    fn ages_use_the_largest_whole_unit() {
        assert_eq!(age(59_999, 0), "59s");
        assert_eq!(age(60_000, 0), "1m");
        assert_eq!(age(7_200_000, 0), "2h");
        assert_eq!(age(3 * 86_400_000 + 5, 0), "3d");
        assert_eq!(age(0, 5_000), "0s", "a clock behind the record is not a negative age");
    }

    #[test]
    fn a_held_turn_after_a_crash_shows_what_ran_with_its_result_and_what_is_in_doubt() {
        let pending: Pending = serde_json::from_value(serde_json::json!({
            "turn_digest": "sha256:01", "expires_at": null, "calls": [
                {"call_id": "call_1", "tool": "write", "arguments": {"text": "a"}, "gate": "ask", "preview": null,
                 "in_doubt": false, "decision": null, "state": "finished", "takes_decision": false,
                 "result": {"content": "wrote a", "is_error": false}},
                {"call_id": "call_2", "tool": "write", "arguments": {"text": "b"}, "gate": "ask", "preview": null,
                 "in_doubt": true, "decision": null, "state": "in_doubt", "takes_decision": true, "result": null}]
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            held_turn(&pending),
            "\nheld turn sha256:01\n\
             \n  call_1  write  gate ask  FINISHED: it ran before a crash; its result stands\n\
             \x20   arguments {\"text\":\"a\"}\n\
             \x20   result\n\
             \x20     wrote a\n\
             \n  call_2  write  gate ask  IN DOUBT: it may already have run\n\
             \x20   arguments {\"text\":\"b\"}\n\
             \x20   awaiting a decision\n"
        );
    }

    /// A run waiting on `calls` (JSON call objects of docs/api.md).
    fn waiting_run(calls: serde_json::Value) -> RunView {
        RunView::from_json(serde_json::json!({
            "id": "run-1", "agent": "demo", "status": "waiting_for_approval", "input": "hello", "output": null,
            "termination_reason": null, "iterations": 1, "usage": {"input_tokens": 1, "output_tokens": 1},
            "version": 3, "created_by": "local", "created_at": "2026-11-29T10:00:00.000Z",
            "updated_at": "2026-11-29T10:00:01.000Z", "finished_at": null, "error": null,
            "pending": {"turn_digest": "sha256:02", "expires_at": null, "calls": calls}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A held `fs_write` call that waits, with `approvals` (null for a single decision).
    fn open_call(id: &str, approvals: serde_json::Value) -> serde_json::Value {
        serde_json::json!({"call_id": id, "tool": "fs_write", "arguments": {"path": "n"}, "gate": "ask",
            "preview": null, "in_doubt": false, "decision": null, "state": "waiting", "takes_decision": true,
            "result": null, "approvals": approvals})
    }

    #[test]
    fn a_quorum_count_says_how_many_of_how_many_and_who() {
        let count = |required, given: &[&str]| {
            approvals_count(&Approvals { required, given: given.iter().copied().map(Actor::from).collect() })
        };
        assert_eq!(count(2, &[]), "0 of 2 approvals");
        assert_eq!(count(2, &["alice"]), "1 of 2 approvals (alice)");
        assert_eq!(count(3, &["alice", "bob"]), "2 of 3 approvals (alice, bob)");
    }

    #[test]
    fn a_quorum_call_shows_its_count_in_show_and_when_the_run_waits() {
        let run = waiting_run(serde_json::json!([
            open_call("call_1", serde_json::json!({"required": 2, "given": ["alice"]})),
            open_call("call_2", serde_json::json!({"required": 3, "given": []})),
            open_call("call_3", serde_json::Value::Null),
        ]));
        let shown = held_turn(run.pending.as_ref().unwrap_or_else(|| panic!("no held turn")));
        assert_eq!(
            shown,
            "\nheld turn sha256:02\n\
             \n  call_1  fs_write  gate ask\n\
             \x20   arguments {\"path\":\"n\"}\n\
             \x20   1 of 2 approvals (alice)\n\
             \x20   awaiting a decision\n\
             \n  call_2  fs_write  gate ask\n\
             \x20   arguments {\"path\":\"n\"}\n\
             \x20   0 of 3 approvals\n\
             \x20   awaiting a decision\n\
             \n  call_3  fs_write  gate ask\n\
             \x20   arguments {\"path\":\"n\"}\n\
             \x20   awaiting a decision\n"
        );
        assert_eq!(
            waiting_lines(&run).lines().take(3).collect::<Vec<_>>(),
            ["run run-1 is waiting for approval", "call_1 has 1 of 2 approvals (alice)", "call_2 has 0 of 3 approvals"]
        );
        assert_eq!(
            held_calls_summary(&run),
            "call_1 fs_write wants to run, with 1 of 2 approvals (alice): {\"path\":\"n\"}\n\
             call_2 fs_write wants to run, with 0 of 3 approvals: {\"path\":\"n\"}\n\
             call_3 fs_write wants to run: {\"path\":\"n\"}\n"
        );
    }

    #[test]
    fn a_run_without_a_quorum_keeps_the_plain_waiting_line() {
        let run = waiting_run(serde_json::json!([open_call("call_1", serde_json::Value::Null)]));
        assert_eq!(
            waiting_lines(&run),
            "run run-1 is waiting for approval\n\
             approve: tollgate approve run-1\n\
             deny:    tollgate deny run-1 --reason TEXT\n\
             details: tollgate show run-1\n"
        );
    }

    #[test]
    fn a_settled_quorum_call_shows_who_approved_it_beside_its_decision() {
        let mut decided = open_call("call_1", serde_json::json!({"required": 2, "given": ["alice", "bob"]}));
        decided["state"] = "decided".into();
        decided["takes_decision"] = false.into();
        decided["decision"] =
            serde_json::json!({"action": "approve", "actor": "bob", "at": "2026-11-29T10:00:02.000Z"});
        let run = waiting_run(serde_json::json!([decided, open_call("call_2", serde_json::Value::Null)]));
        let shown = held_turn(run.pending.as_ref().unwrap_or_else(|| panic!("no held turn")));
        assert!(shown.contains("    2 of 2 approvals (alice, bob)\n    decided approve by bob\n"), "{shown}");
        assert_eq!(
            waiting_lines(&run).lines().next(),
            Some("run run-1 is waiting for approval"),
            "only a quorum call still open is named"
        );
    }

    /// [`waiting_run`] with its held turn escalated to `notified`.
    fn escalated_run(calls: serde_json::Value, notified: &[&str]) -> RunView {
        let mut json = waiting_run(calls).json;
        json["pending"]["escalated"] = serde_json::json!({"at": "2026-11-29T11:00:01.000Z", "notified": notified});
        RunView::from_json(json).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_escalated_turn_says_when_and_who_was_told_in_show_the_waiting_lines_and_the_runs_table() {
        let run = escalated_run(serde_json::json!([open_call("call_1", serde_json::Value::Null)]), &["ops", "oncall"]);
        let shown = held_turn(run.pending.as_ref().unwrap_or_else(|| panic!("no held turn")));
        assert!(
            shown.starts_with(
                "\nheld turn sha256:02\nescalated at 2026-11-29T11:00:01.000Z · notified ops, oncall\n\n  call_1"
            ),
            "{shown}"
        );
        assert_eq!(
            waiting_lines(&run),
            "run run-1 is waiting for approval\n\
             escalated at 2026-11-29T11:00:01.000Z · notified ops, oncall\n\
             approve: tollgate approve run-1\n\
             deny:    tollgate deny run-1 --reason TEXT\n\
             details: tollgate show run-1\n"
        );
        let quiet = waiting_run(serde_json::json!([open_call("call_1", serde_json::Value::Null)]));
        let now = millis("2026-11-29T12:00:00.000Z").unwrap_or_default();
        assert_eq!(
            runs_table(&[run, quiet], now),
            "ID     AGENT  STATUS                            AGE  INPUT\n\
             run-1  demo   waiting_for_approval (escalated)  2h   hello\n\
             run-1  demo   waiting_for_approval              2h   hello\n"
        );
        // Names the server sent are shown on one line, whatever they hold; nobody told is said so.
        let odd = escalated_run(serde_json::json!([]), &["ops\nx\u{1b}[2J"]);
        assert!(waiting_lines(&odd).contains("· notified ops x\\x1b[2J\n"), "{}", waiting_lines(&odd));
        let nobody = escalated_run(serde_json::json!([]), &[]);
        assert!(waiting_lines(&nobody).contains("escalated at 2026-11-29T11:00:01.000Z · notified nobody\n"));
    }

    #[test]
    fn time_left_rounds_to_the_nearest_whole_unit() {
        let hour = 3_600_000;
        assert_eq!(time_left(0, 8 * hour - 2_000), "8h", "a grant for 8h shows 8h a moment later");
        assert_eq!(time_left(0, 30 * 24 * hour), "30d");
        assert_eq!(time_left(0, 90 * 60_000), "2h");
        assert_eq!(time_left(0, 29 * 60_000), "29m");
        assert_eq!(time_left(0, 45_000), "45s");
        assert_eq!(time_left(5_000, 0), "0s", "never negative");
    }

    /// A grant object of docs/api.md with `changes` applied.
    fn grant_view(changes: serde_json::Value) -> GrantView {
        let mut json = serde_json::json!({
            "id": "0193b0c6-0000-7000-8000-000000000009", "agent": "demo", "tool": "fs_write",
            "match": {"/path": "notes/*"}, "scope": "agent", "run_id": null, "reason": null, "created_by": "alice",
            "created_at": "2026-12-05T08:00:00.000Z", "expires_at": "2026-12-05T16:00:00.000Z",
            "revoked_at": null, "revoked_by": null, "uses": 3
        });
        if let (Value::Object(json), Value::Object(changes)) = (&mut json, changes) {
            json.extend(changes);
        }
        GrantView::from_json(json).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_grants_table_says_what_each_allows_until_when() {
        let now = millis("2026-12-05T09:00:00.000Z").unwrap_or_default();
        let active = grant_view(serde_json::json!({}));
        let any_of_one_run = grant_view(serde_json::json!({"id": "0193b0c6-0000-7000-8000-00000000000a",
            "match": {}, "scope": "run", "run_id": "0193b0c5-1111-7000-8000-000000000001", "uses": 0}));
        let revoked = grant_view(serde_json::json!({"id": "0193b0c6-0000-7000-8000-00000000000b",
            "revoked_at": "2026-12-05T08:30:00.000Z", "revoked_by": "bob"}));
        let expired = grant_view(serde_json::json!({"id": "0193b0c6-0000-7000-8000-00000000000c",
            "expires_at": "2026-12-05T08:59:00.000Z", "created_by": "local"}));
        assert_eq!(
            grants_table(&[active, any_of_one_run, revoked, expired], now),
            "ID                                    AGENT                                            TOOL      MATCH                EXPIRES  USES  CREATOR\n\
             0193b0c6-0000-7000-8000-000000000009  demo                                             fs_write  {\"/path\":\"notes/*\"}  in 7h    3     alice\n\
             0193b0c6-0000-7000-8000-00000000000a  demo (run 0193b0c5-1111-7000-8000-000000000001)  fs_write  any arguments        in 7h    0     alice\n\
             0193b0c6-0000-7000-8000-00000000000b  demo                                             fs_write  {\"/path\":\"notes/*\"}  revoked  3     alice\n\
             0193b0c6-0000-7000-8000-00000000000c  demo                                             fs_write  {\"/path\":\"notes/*\"}  expired  3     local\n"
        );
        assert_eq!(grants_table(&[], now), "");
    }

    #[test]
    fn a_grant_shows_its_fields_and_the_runs_it_was_applied_to() {
        let now = millis("2026-12-05T09:00:00.000Z").unwrap_or_default();
        let made = grant_view(serde_json::json!({"reason": "notes are fine", "uses": 0,
            "applied_to": ["0193b0c5-1111-7000-8000-000000000001"]}));
        assert_eq!(
            grant_details(&made.grant, now),
            "grant    0193b0c6-0000-7000-8000-000000000009\n\
             agent    demo\n\
             tool     fs_write\n\
             match    {\"/path\":\"notes/*\"}\n\
             scope    agent (every run of demo)\n\
             reason   notes are fine\n\
             created  2026-12-05T08:00:00.000Z by alice\n\
             expires  2026-12-05T16:00:00.000Z (in 7h)\n\
             uses     0\n\
             applied to 1 waiting run(s):\n\
             \x20 0193b0c5-1111-7000-8000-000000000001\n"
        );
        let revoked = grant_view(serde_json::json!({"revoked_at": "2026-12-05T08:30:00.000Z", "revoked_by": "bob",
            "applied_to": []}));
        let shown = grant_details(&revoked.grant, now);
        assert!(
            shown.contains("expires  2026-12-05T16:00:00.000Z (revoked)\nrevoked  2026-12-05T08:30:00.000Z by bob\n"),
            "{shown}"
        );
        assert!(shown.ends_with("uses     3\napplied to no waiting run\n"), "{shown}");
        assert_eq!(
            grant_sentence(&made.grant),
            "remembered as grant 0193b0c6-0000-7000-8000-000000000009: fs_write calls of agent demo whose arguments \
             match {\"/path\":\"notes/*\"} pass the gate until 2026-12-05T16:00:00.000Z"
        );
    }

    #[test]
    fn long_and_multiline_input_is_cut_to_one_line() {
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("abcdefghijkl", 5), "abcd…");
        assert_eq!(one_line("héllo", 5), "héllo");
    }

    #[test]
    fn one_line_shows_control_and_format_characters_as_escapes() {
        assert_eq!(one_line("a\u{1b}[2Jb\rc\u{7}d\u{9b}e\u{202e}f", 80), "a\\x1b[2Jb\\rc\\x07d\\u{9b}e\\u{202e}f");
    }
}
