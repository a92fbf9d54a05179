//! The shapes no stored fixture holds: event kinds v1 never wrote, a run with recorded decisions, the
//! request bodies, and the OpenAPI components. Each expected value is written the way the code that
//! produces it today writes it (`json!` in tollgate-agent-runtime's `events.rs` and `view.rs`, the bodies in
//! tollgate-cli's `remote.rs`), so the comparison is of the exact text, key order included.

use serde_json::{Value, json};
use tollgate_agent_protocol::event_data::{
    ApprovalEscalated, ApprovalRequested, DecisionMade, GatedCall, ModelResponse, RunCancelled, RunExpired, RunFailed,
    RunTakenOver, ToolFinished,
};
use tollgate_agent_protocol::{
    ApproveDecision, CallDecision, CallResult, CallState, CancelRequest, Decision, DecisionRequest, DenyDecision,
    EditDecision, EventData, EventDataError, EventKind, Gate, RespondDecision, Run, RunError, StartRunRequest, Usage,
};

fn text<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| panic!("{e}"))
}

/// Writes `data` as an event of its kind, reads it back from the expected JSON, and compares both ways.
fn same_as_written(data: EventData, expected: Value) {
    let kind = data.kind();
    assert_eq!(text(&data.to_value()), text(&expected), "{kind:?} written");
    let read = EventData::from_kind_and_value(kind.as_str(), expected).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read, data, "{kind:?} read");
}

#[test]
fn the_kinds_v1_never_wrote_and_the_null_fields_are_written_as_today() {
    // events.rs `run_failed`: json!({"error": error}) with RunError {kind, message}.
    same_as_written(
        RunFailed { error: RunError { kind: "model_timeout".into(), message: "no answer in 60s".into() } }.into(),
        json!({"error": {"kind": "model_timeout", "message": "no answer in 60s"}}),
    );
    // `run_expired`: json!({"deadline": rfc3339(deadline)}).
    same_as_written(
        RunExpired { deadline: "2026-11-29T10:00:00.000Z".into() }.into(),
        json!({"deadline": "2026-11-29T10:00:00.000Z"}),
    );
    // `model_response` with no text: `text` is null, not absent.
    same_as_written(
        ModelResponse { text: None, tool_calls: vec![], usage: Usage { input_tokens: 5, output_tokens: 0 } }.into(),
        json!({"text": null, "tool_calls": [], "usage": {"input_tokens": 5, "output_tokens": 0}}),
    );
    same_as_written(
        ToolFinished { call_id: "c".into(), tool: "shell".into(), is_error: true, result: Some("exit 1".into()) }
            .into(),
        json!({"call_id": "c", "tool": "shell", "is_error": true, "result": "exit 1"}),
    );
    same_as_written(
        RunCancelled { actor: "ana".into(), reason: Some("wrong input".into()) }.into(),
        json!({"actor": "ana", "reason": "wrong input"}),
    );
    // `approval_escalated` (maintenance.rs): the held turn, its agent's `escalate_after`, the notifiers.
    same_as_written(
        ApprovalEscalated { turn_digest: "sha256:ab".into(), after: "1h".into(), notified: vec!["ops".into()] }.into(),
        json!({"turn_digest": "sha256:ab", "after": "1h", "notified": ["ops"]}),
    );
    // A decision made through a signed link names the link.
    same_as_written(
        DecisionMade {
            decision: Decision::Approve.into(),
            call_id: "call_1".into(),
            actor: "alice".into(),
            approvals: None,
            grant: None,
            link: Some("0123456789abcdef0123456789abcdef".into()),
        }
        .into(),
        json!({"action": "approve", "call_id": "call_1", "actor": "alice", "link": "0123456789abcdef0123456789abcdef"}),
    );
    // `run_taken_over` (recovery.rs): written with the claim of a run whose lease expired.
    same_as_written(
        RunTakenOver { owner: "node-b".into(), previous_owner: "node-a".into(), takeovers: 2 }.into(),
        json!({"owner": "node-b", "previous_owner": "node-a", "takeovers": 2}),
    );
    // `approval_requested` with a deadline and an in-doubt call (`held_call_json` for each call).
    same_as_written(
        ApprovalRequested {
            turn_digest: "sha256:00".into(),
            calls: vec![GatedCall {
                call_id: "c".into(),
                tool: "fs_write".into(),
                arguments: json!({"path": "a", "content": "b"}),
                gate: Gate::Ask,
                preview: Some("create a".into()),
                in_doubt: true,
                approvals: None,
            }],
            expires_at: Some("2026-11-29T11:00:00.000Z".into()),
        }
        .into(),
        json!({"turn_digest": "sha256:00", "calls": [{"call_id": "c", "tool": "fs_write",
               "arguments": {"path": "a", "content": "b"}, "gate": "ask", "preview": "create a", "in_doubt": true}],
               "expires_at": "2026-11-29T11:00:00.000Z"}),
    );
    // events.rs `decision`: the decision's own JSON, then `call_id` and `actor` inserted after it.
    for (decision, own) in [
        (Decision::Approve, json!({"action": "approve"})),
        (
            Decision::Edit { arguments: json!({"z": 1, "a": 2}) },
            json!({"action": "edit", "arguments": {"z": 1, "a": 2}}),
        ),
        (
            Decision::Deny { reason: "approval deadline passed".into() },
            json!({"action": "deny", "reason": "approval deadline passed"}),
        ),
        (Decision::Respond { result: "42".into() }, json!({"action": "respond", "result": "42"})),
    ] {
        let mut expected = own;
        if let Value::Object(map) = &mut expected {
            map.insert("call_id".into(), json!("call_2"));
            map.insert("actor".into(), json!("system"));
        }
        same_as_written(
            DecisionMade {
                decision: decision.into(),
                call_id: "call_2".into(),
                actor: "system".into(),
                approvals: None,
                grant: None,
                link: None,
            }
            .into(),
            expected,
        );
    }
}

#[test]
fn event_data_that_does_not_fit_says_which_kind() {
    assert!(matches!(
        EventData::from_kind_and_value("run_paused", json!({})),
        Err(EventDataError::UnknownKind(kind)) if kind == "run_paused"
    ));
    let wrong = EventData::from_kind_and_value("tool_finished", json!({"call_id": "c", "tool": "t", "is_error": "no"}));
    assert!(matches!(&wrong, Err(EventDataError::Invalid { kind: EventKind::ToolFinished, .. })), "{wrong:?}");
    let unknown_action =
        EventData::from_kind_and_value("decision", json!({"action": "defer", "call_id": "c", "actor": "a"}));
    assert!(unknown_action.is_err());
    // A key a newer writer added is ignored when reading.
    let newer = EventData::from_kind_and_value("run_resumed", json!({"actor": "a", "node": "n2"}));
    assert_eq!(newer.ok().map(|d| d.kind()), Some(EventKind::RunResumed));
}

#[test]
fn a_waiting_run_with_recorded_decisions_is_written_as_run_json_writes_it() {
    // view.rs `run_json`: each call is the held call plus `decision` (the decision's own JSON with `actor`
    // and `at` inserted after it, null when undecided), then `state`, `takes_decision` and `result`.
    let text_in = r#"{"id":"0193b0c6-0000-7000-8000-000000000001","agent":"demo","status":"waiting_for_approval","input":"hello","metadata":{"customer":"acme"},"output":null,"termination_reason":null,"iterations":1,"usage":{"input_tokens":3,"output_tokens":4},"version":4,"created_by":"local","created_at":"2026-11-29T10:00:00.000Z","updated_at":"2026-11-29T10:00:01.000Z","finished_at":null,"error":null,"pending":{"turn_digest":"sha256:00","expires_at":"2026-11-29T11:00:00.000Z","calls":[{"call_id":"call_1","tool":"fs_list","arguments":{},"gate":"allow","preview":null,"in_doubt":false,"decision":null,"state":"allowed","takes_decision":false,"result":null},{"call_id":"call_2","tool":"fs_write","arguments":{"path":"a"},"gate":"ask","preview":"create a","in_doubt":false,"decision":{"action":"edit","arguments":{"path":"b"},"actor":"ana","at":"2026-11-29T10:00:01.000Z"},"state":"decided","takes_decision":false,"result":null},{"call_id":"call_3","tool":"shell","arguments":{},"gate":"ask","preview":null,"in_doubt":true,"decision":{"action":"deny","reason":"no","actor":"bo","at":"2026-11-29T10:00:01.000Z"},"state":"decided","takes_decision":false,"result":null},{"call_id":"call_4","tool":"fs_write","arguments":{},"gate":"ask","preview":null,"in_doubt":false,"decision":null,"state":"waiting","takes_decision":true,"result":null},{"call_id":"call_5","tool":"fs_write","arguments":{},"gate":"ask","preview":null,"in_doubt":false,"decision":null,"state":"finished","takes_decision":false,"result":{"content":"wrote a","is_error":false}}]}}"#;
    let run: Run = serde_json::from_str(text_in).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(text(&run), text_in);
    let calls = run.pending.as_ref().map(|p| p.calls.as_slice()).unwrap_or_default();
    assert_eq!(
        calls[1].decision.as_ref().map(|d| &d.decision),
        Some(&Decision::Edit { arguments: json!({"path": "b"}) })
    );
    let open: Vec<&str> = run.awaiting_decision().map(|c| c.call_id.as_str()).collect();
    assert_eq!(open, ["call_4"], "allow-gated, decided and finished calls take no decision");
    assert_eq!(calls[4].state, CallState::Finished);
    assert_eq!(calls[4].result, Some(CallResult { content: "wrote a".into(), is_error: false }));
}

#[test]
fn the_decisions_body_of_api_md_reads_into_one_named_type_per_action() {
    let body = json!({
        "turn_digest": "sha256:9f2c",
        "decisions": [
            {"call_id": "call_1", "action": "approve"},
            {"call_id": "call_2", "action": "deny", "reason": "not on a Friday"},
            {"call_id": "call_3", "action": "edit", "arguments": {"path": "draft.txt", "content": "hi"}},
            {"call_id": "call_4", "action": "respond", "result": "The answer is 42"}
        ],
        "wait": true
    });
    let request: DecisionRequest = serde_json::from_value(body).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        request.decisions,
        Some(vec![
            CallDecision::Approve(ApproveDecision { call_id: "call_1".into(), remember: None }),
            CallDecision::Deny(DenyDecision { call_id: "call_2".into(), reason: Some("not on a Friday".into()) }),
            CallDecision::Edit(EditDecision {
                call_id: "call_3".into(),
                arguments: json!({"path": "draft.txt", "content": "hi"})
            }),
            CallDecision::Respond(RespondDecision { call_id: "call_4".into(), result: "The answer is 42".into() }),
        ])
    );
    assert_eq!(request.wait, Some(true));
    // A denial may leave its reason out (the server fills in its default); null means absent.
    let bare: Result<CallDecision, _> =
        serde_json::from_value(json!({"call_id": "c", "action": "deny", "reason": null}));
    assert_eq!(bare.ok(), Some(CallDecision::Deny(DenyDecision { call_id: "c".into(), reason: None })));
}

#[test]
fn request_bodies_reject_unknown_fields_and_actions() {
    for item in [
        json!({"call_id": "c", "action": "approve", "reason": "x"}),
        json!({"call_id": "c", "action": "respond", "result": "r", "arguments": {}}),
        json!({"call_id": "c", "action": "defer"}),
        json!({"call_id": "c"}),
        json!({"action": "approve"}),
        json!({"call_id": "c", "action": "respond", "result": 42}),
    ] {
        assert!(serde_json::from_value::<CallDecision>(item.clone()).is_err(), "{item}");
    }
    assert!(
        serde_json::from_value::<DecisionRequest>(json!({"turn_digest": "d", "approve_all": true, "force": true}))
            .is_err()
    );
    assert!(serde_json::from_value::<StartRunRequest>(json!({"input": "x", "priority": 1})).is_err());
    assert!(serde_json::from_value::<StartRunRequest>(json!({"agent": "demo"})).is_err(), "input is required");
    assert!(
        serde_json::from_value::<StartRunRequest>(json!({"input": "x", "metadata": ["a"]})).is_err(),
        "metadata is an object"
    );
    assert!(serde_json::from_value::<CancelRequest>(json!({"why": "x"})).is_err());
}

#[test]
fn client_bodies_are_the_smallest_that_say_what_they_mean() {
    // As remote.rs sends them today.
    assert_eq!(text(&DecisionRequest::approve_all("d")), r#"{"turn_digest":"d","approve_all":true}"#);
    assert_eq!(text(&DecisionRequest::deny_all("d", "no")), r#"{"turn_digest":"d","deny_all":true,"reason":"no"}"#);
    assert_eq!(text(&CancelRequest::default()), "{}");
    assert_eq!(text(&CancelRequest { reason: Some("r".into()) }), r#"{"reason":"r"}"#);
    assert_eq!(text(&StartRunRequest { input: "hi".into(), ..Default::default() }), r#"{"input":"hi"}"#);
    let with_metadata: StartRunRequest =
        serde_json::from_value(json!({"input": "hi", "metadata": {"customer": "acme"}, "agent": null}))
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(text(&with_metadata), r#"{"input":"hi","metadata":{"customer":"acme"}}"#);
    let null: StartRunRequest =
        serde_json::from_value(json!({"input": "hi", "metadata": null})).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(null.metadata, None, "null means absent");
    let each = DecisionRequest::each(
        "d",
        vec![CallDecision::Approve(ApproveDecision { call_id: "c".into(), remember: None })],
    );
    assert_eq!(text(&each), r#"{"turn_digest":"d","decisions":[{"action":"approve","call_id":"c"}]}"#);
    assert_eq!(serde_json::from_str::<DecisionRequest>(&text(&each)).ok(), Some(each));
}

/// `[privacy] level = "metadata"` writes every content field as null (tollgate-agent-runtime's `privacy.rs`): the
/// data of each kind still reads, and writes back to the same text.
#[test]
fn event_data_reads_with_its_content_fields_null() {
    let usage = json!({"input_tokens": 1, "output_tokens": 2});
    for (kind, data) in [
        ("run_started", json!({"agent": "demo", "input": null, "actor": "local"})),
        (
            "model_response",
            json!({"text": null, "tool_calls": [{"call_id": "c", "tool": "t", "arguments": null}], "usage": usage}),
        ),
        (
            "tool_started",
            json!({"call_id": "c", "tool": "t", "arguments": null, "gate": "ask", "idempotency_key": "r:c"}),
        ),
        ("tool_finished", json!({"call_id": "c", "tool": "t", "is_error": false, "result": null})),
        (
            "approval_requested",
            json!({"turn_digest": "sha256:00", "calls": [{"call_id": "c", "tool": "t", "arguments": null,
                   "gate": "ask", "preview": null, "in_doubt": false}], "expires_at": null}),
        ),
        ("decision", json!({"action": "edit", "arguments": null, "call_id": "c", "actor": "a"})),
        ("decision", json!({"action": "deny", "reason": null, "call_id": "c", "actor": "a"})),
        ("decision", json!({"action": "respond", "result": null, "call_id": "c", "actor": "a"})),
        ("run_completed", json!({"output": null, "termination_reason": "completed"})),
    ] {
        let read = EventData::from_kind_and_value(kind, data.clone()).unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(text(&read.to_value()), text(&data), "{kind}");
    }
}
