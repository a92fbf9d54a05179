//! An image a tool returned, through a real `ToolLoop`, a suspension stored as JSON and read back (as a
//! resume in another process reads it), and each adapter against a mock server: Anthropic sends it as an
//! `image` block inside the `tool_result`, in every request after the tool ran, the resumed one included;
//! Chat Completions sends only the text that describes it.

use crate::support::*;
use serde_json::{Value, json};
use std::sync::Arc;
use tollgate_agent_core::{
    AgentLoop, BoxFuture, CallId, Decision, Decisions, Gate, Outcome, RunScope, Suspension, Tool, ToolContext,
    ToolError, ToolLoop, ToolOutput, ToolRegistry,
};
use tollgate_agent_testkit::{RecordingHooks, TestTool};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

/// A PNG: its signature, then 3,000 bytes (12 + 4,000 characters of base64).
fn screen_png() -> String {
    format!("iVBORw0KGgoA{}", "AAAA".repeat(1_000))
}

/// The line the result's text has for it.
const SCREEN_LINE: &str = "[image: image/png, 3 KB]";

/// An allowed tool that returns a line of text and [`screen_png`].
struct Screenshot {
    parameters: Value,
}

impl Tool for Screenshot {
    fn name(&self) -> &str {
        "screenshot"
    }

    fn description(&self) -> &str {
        "Takes a screenshot."
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    fn call<'a>(&'a self, _args: Value, _ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async { Ok(ToolOutput::text("the login page").with_image("image/png", screen_png())) })
    }
}

impl Provider {
    /// Turn 1 takes a screenshot (allowed, runs at once), turn 2 writes a note (asks), turn 3 answers.
    fn answers(self) -> Vec<Value> {
        let note = json!({"path": "note.txt", "content": "the login page"});
        match self {
            Provider::OpenAi => vec![
                openai_calls(vec![openai_call("call_s1", "screenshot", "{}")]),
                openai_calls(vec![openai_call("call_w2", "fs_write", &note.to_string())]),
                openai_text("Noted."),
            ],
            Provider::Anthropic => vec![
                anthropic_answer(vec![anthropic_call("call_s1", "screenshot", json!({}))], "tool_use"),
                anthropic_answer(vec![anthropic_call("call_w2", "fs_write", note)], "tool_use"),
                anthropic_answer(vec![anthropic_text("Noted.")], "end_turn"),
            ],
        }
    }
}

/// Runs the scenario through `provider`; the three request bodies.
async fn scenario(provider: Provider) -> anyhow::Result<Vec<Value>> {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(provider.path()))
        .respond_with(by_turn(provider.answers()))
        .mount(&server)
        .await;
    let fs_write = TestTool::new("fs_write").gate(Gate::Ask);
    let mut registry = ToolRegistry::new();
    registry.register(Arc::new(Screenshot { parameters: json!({"type": "object"}) }))?;
    registry.register(fs_write.shared())?;
    let config = tollgate_agent_core::LoopConfig { model: "m".into(), ..tollgate_agent_core::LoopConfig::default() };
    let agent = ToolLoop::new(provider.model(&server)?, Arc::new(registry), config);
    let scope = RunScope::new("run-1");

    let Outcome::Suspended(held) =
        agent.start(&scope, "Note what the login page shows", &RecordingHooks::default()).await?
    else {
        anyhow::bail!("turn 2 holds an ask-gated write");
    };
    // The stored suspension keeps the image, so the process that resumes the run can send it again.
    let stored = held.to_json()?;
    assert!(stored.contains(&screen_png()), "the suspension keeps the image's data");
    let held = Suspension::from_json(&stored)?;

    let decisions: Decisions = [(CallId::from("call_w2"), Decision::Approve)].into_iter().collect();
    let Outcome::Completed(done) = agent.resume(&scope, held, &decisions, &RecordingHooks::default()).await? else {
        anyhow::bail!("turn 3 is text only");
    };
    assert_eq!(done.output.as_deref(), Some("Noted."));
    assert_eq!(fs_write.call_count(), 1);
    let bodies = bodies(&server).await?;
    assert_eq!(bodies.len(), 3, "one request per model call");
    Ok(bodies)
}

#[tokio::test]
async fn anthropic_gets_the_image_in_its_tool_result_before_and_after_a_resume() -> anyhow::Result<()> {
    let bodies = scenario(Provider::Anthropic).await?;
    let expected = json!({"type": "tool_result", "tool_use_id": "call_s1", "content": [
        {"type": "text", "text": format!("the login page\n{SCREEN_LINE}")},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": screen_png()}},
    ]});
    // Request 2 (before the suspension) and request 3 (after the resume from the stored JSON).
    for body in &bodies[1..] {
        assert_anthropic_calls_answered(body);
        assert_eq!(body["messages"][2]["content"][0], expected);
    }
    Ok(())
}

#[tokio::test]
async fn chat_completions_gets_the_images_description_only() -> anyhow::Result<()> {
    let bodies = scenario(Provider::OpenAi).await?;
    for body in &bodies[1..] {
        assert_openai_calls_answered(body);
        let result = body["messages"].as_array().and_then(|m| m.iter().find(|m| m["tool_call_id"] == json!("call_s1")));
        assert_eq!(result.map(|m| &m["content"]), Some(&json!(format!("the login page\n{SCREEN_LINE}"))));
        assert!(!body.to_string().contains("iVBORw0KGgo"), "no image data in a Chat Completions request");
    }
    Ok(())
}
