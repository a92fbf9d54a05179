//! A real `ToolLoop` driven through each adapter and a mock server: a turn of four held calls, resumed with
//! approve, deny, edit and respond; a second turn held again and approved; then the answer. The exact body
//! of each request is snapshotted, and in each every tool call is answered exactly once, in call order.

use crate::support::*;
use serde_json::{Value, json};
use tollgate_agent_core::{AgentLoop, CallId, Decision, Decisions, Outcome, RunScope, Suspension, ToolLoop};
use tollgate_agent_testkit::RecordingHooks;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

/// One model turn, in provider-neutral terms: optional text and `(id, tool, arguments)` calls.
struct Turn {
    text: Option<&'static str>,
    calls: Vec<(&'static str, &'static str, Value)>,
}

fn script() -> Vec<Turn> {
    vec![
        Turn {
            text: Some("I'll save the note, clean up, look around and check the service."),
            calls: vec![
                ("call_w1", "fs_write", json!({"path": "note.txt", "content": "hello"})),
                ("call_d2", "fs_delete", json!({"path": "old.txt"})),
                ("call_s3", "shell", json!({"argv": ["ls", "-la"]})),
                ("call_h4", "http_request", json!({"method": "GET", "url": "https://example.com/status"})),
            ],
        },
        Turn {
            text: None,
            calls: vec![
                ("call_r5", "fs_read", json!({"path": "note.txt"})),
                ("call_w6", "fs_write", json!({"path": "note.txt", "content": "hello again"})),
            ],
        },
        Turn { text: Some("Done: the note is saved, old.txt is kept."), calls: vec![] },
    ]
}

impl Provider {
    /// A turn in this provider's documented answer format.
    fn answer(self, turn: &Turn) -> Value {
        match self {
            Provider::OpenAi if turn.calls.is_empty() => openai_text(turn.text.unwrap_or_default()),
            Provider::OpenAi => {
                let calls =
                    turn.calls.iter().map(|(id, name, args)| openai_call(id, name, &args.to_string())).collect();
                let mut answer = openai_calls(calls);
                answer["choices"][0]["message"]["content"] = json!(turn.text);
                answer
            }
            Provider::Anthropic => {
                let mut content: Vec<Value> = turn.text.map(anthropic_text).into_iter().collect();
                content.extend(turn.calls.iter().map(|(id, name, args)| anthropic_call(id, name, args.clone())));
                let stop_reason = if turn.calls.is_empty() { "end_turn" } else { "tool_use" };
                anthropic_answer(content, stop_reason)
            }
        }
    }

    fn assert_calls_answered(self, body: &Value) {
        match self {
            Provider::OpenAi => assert_openai_calls_answered(body),
            Provider::Anthropic => assert_anthropic_calls_answered(body),
        }
    }
}

fn decide(pairs: &[(&str, Decision)]) -> Decisions {
    pairs.iter().map(|(id, d)| (CallId::from(*id), d.clone())).collect()
}

async fn resume(agent: &ToolLoop, suspension: Suspension, decisions: &Decisions) -> anyhow::Result<Outcome> {
    Ok(agent.resume(&RunScope::new("run-1"), suspension, decisions, &RecordingHooks::default()).await?)
}

/// Runs the whole scenario through `provider` and snapshots the three request bodies.
async fn scenario(provider: Provider) -> anyhow::Result<()> {
    let server = MockServer::start().await;
    let answers: Vec<Value> = script().iter().map(|t| provider.answer(t)).collect();
    Mock::given(method("POST")).and(path(provider.path())).respond_with(by_turn(answers)).mount(&server).await;
    let tools = Tools::new();
    let agent = tool_loop(provider.model(&server)?, &tools, &format!("{}-test", provider.name()))?;

    let Outcome::Suspended(first) =
        agent.start(&RunScope::new("run-1"), "Save a note saying hello", &RecordingHooks::default()).await?
    else {
        anyhow::bail!("the first turn holds four ask-gated calls");
    };
    let held: Vec<&str> = first.decidable_calls().map(|c| c.call_id.as_str()).collect();
    assert_eq!(held, ["call_w1", "call_d2", "call_s3", "call_h4"]);
    // Through the store and back, as a resume in another process would see it.
    let first = Suspension::from_json(&first.to_json().unwrap_or_else(|e| panic!("{e}")))?;

    let edited = json!({"argv": ["ls"]});
    let decisions = decide(&[
        ("call_w1", Decision::Approve),
        ("call_d2", Decision::Deny { reason: "keep old.txt".into() }),
        ("call_s3", Decision::Edit { arguments: edited.clone() }),
        ("call_h4", Decision::Respond { result: "status: ok (answered by the approver)".into() }),
    ]);
    let Outcome::Suspended(second) = resume(&agent, first, &decisions).await? else {
        anyhow::bail!("the second turn holds an ask-gated write");
    };
    assert_eq!(
        tools.fs_write.calls(),
        vec![(CallId::from("call_w1"), json!({"path": "note.txt", "content": "hello"}))]
    );
    assert_eq!(tools.fs_delete.call_count(), 0, "denied");
    assert_eq!(tools.shell.calls(), vec![(CallId::from("call_s3"), edited)], "ran with the approver's arguments");
    assert_eq!(tools.http_request.call_count(), 0, "answered by the approver");
    assert_eq!(tools.fs_read.call_count(), 0, "nothing of a held turn runs, allowed calls included");

    let Outcome::Completed(done) = resume(&agent, second, &decide(&[("call_w6", Decision::Approve)])).await? else {
        anyhow::bail!("the third turn is text only");
    };
    assert_eq!(done.output.as_deref(), Some("Done: the note is saved, old.txt is kept."));
    assert_eq!(done.counters.iterations, 3);
    assert_eq!(done.counters.tool_invocations, 4, "write, edited shell, read, second write");

    let bodies = bodies(&server).await?;
    assert_eq!(bodies.len(), 3, "one request per model call, no retries");
    let names = ["first_turn", "resume_after_approve_deny_edit_respond", "resume_after_second_suspension"];
    for (name, body) in names.iter().zip(&bodies) {
        provider.assert_calls_answered(body);
        insta::assert_json_snapshot!(format!("{}__{name}", provider.name()), body);
    }
    Ok(())
}

#[tokio::test]
async fn openai_run_suspends_resumes_and_completes() -> anyhow::Result<()> {
    scenario(Provider::OpenAi).await
}

#[tokio::test]
async fn anthropic_run_suspends_resumes_and_completes() -> anyhow::Result<()> {
    scenario(Provider::Anthropic).await
}

#[test]
fn the_invariant_checks_catch_a_missing_or_reordered_answer() {
    let openai = |messages: Value| check_openai_calls_answered(&json!({"messages": messages}));
    let call = |id: &str| openai_call(id, "t", "{}");
    let assistant = json!({"role": "assistant", "content": null, "tool_calls": [call("a"), call("b")]});
    let tool = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": "x"});
    assert_eq!(openai(json!([assistant.clone(), tool("a"), tool("b")])), Ok(()));
    assert!(openai(json!([assistant.clone(), tool("b"), tool("a")])).is_err());
    assert!(openai(json!([assistant.clone(), tool("a")])).is_err());
    assert!(openai(json!([assistant, tool("a"), tool("b"), tool("b")])).is_err());

    let anthropic = |messages: Value| check_anthropic_calls_answered(&json!({"messages": messages}));
    let uses = json!({"role": "assistant", "content": [
        anthropic_call("a", "t", json!({})),
        anthropic_call("b", "t", json!({})),
    ]});
    let results = |ids: &[&str]| {
        let blocks: Vec<Value> =
            ids.iter().map(|id| json!({"type": "tool_result", "tool_use_id": id, "content": "x"})).collect();
        json!({"role": "user", "content": blocks})
    };
    assert_eq!(anthropic(json!([uses.clone(), results(&["a", "b"])])), Ok(()));
    assert!(anthropic(json!([uses.clone(), results(&["b", "a"])])).is_err());
    assert!(anthropic(json!([uses.clone(), results(&["a"])])).is_err());
    assert!(anthropic(json!([uses.clone()])).is_err());
    assert!(anthropic(json!([uses, results(&["a", "b", "b"])])).is_err());
}
