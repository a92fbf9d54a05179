//! The API key never appears in a log line, a loop event, an error message or `Debug` output — not even
//! when the provider echoes it back in an error body.

use crate::support::*;
use serde_json::json;
use std::sync::Arc;
use tollgate_agent_core::{AgentLoop, CallId, Decision, Decisions, LoopError, ModelClient, Outcome, RunScope};
use tollgate_agent_providers::{AnthropicModel, OpenAiModel};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Everything a run left behind that a person or a log shipper could read.
#[derive(Default)]
struct Trail {
    texts: Vec<String>,
}

impl Trail {
    fn add(&mut self, text: impl Into<String>) {
        self.texts.push(text.into());
    }

    fn assert_clean(&self) {
        for text in &self.texts {
            assert!(!text.contains(API_KEY), "the API key leaked into: {text}");
        }
    }
}

/// A full run through the OpenAI adapter: a 429 and a 500 that are retried (both echoing the key), a
/// suspension, an approval, the answer.
async fn openai_run(trail: &mut Trail) -> anyhow::Result<()> {
    let server = MockServer::start().await;
    let echo =
        json!({"error": {"message": format!("Rate limit reached for key {API_KEY}"), "code": "rate_limit_exceeded"}});
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "0").set_body_json(echo))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(500).set_body_string(format!("upstream failed for {API_KEY}")))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    let turns = vec![
        openai_calls(vec![openai_call("call_1", "fs_write", r#"{"path": "note.txt", "content": "hi"}"#)]),
        openai_text("Saved."),
    ];
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(by_turn(turns)).mount(&server).await;

    let model = Arc::new(OpenAiModel::new(settings(&format!("{}/v1", server.uri())))?);
    trail.add(format!("{model:?}"));
    let tools = Tools::new();
    let agent = tool_loop(model, &tools, "gpt-test")?;
    let hooks = DebugHooks::default();
    let outcome = agent.start(&RunScope::new("run-secret"), "save a note", &hooks).await?;
    trail.add(format!("{outcome:?}"));
    let Outcome::Suspended(suspension) = outcome else { anyhow::bail!("fs_write asks") };
    trail.add(suspension.to_json().unwrap_or_else(|e| panic!("{e}")));
    let decisions: Decisions = [(CallId::from("call_1"), Decision::Approve)].into_iter().collect();
    let done = agent.resume(&RunScope::new("run-secret"), suspension, &decisions, &hooks).await?;
    trail.add(format!("{done:?}"));
    assert!(matches!(done, Outcome::Completed(ref c) if c.output.as_deref() == Some("Saved.")));
    trail.texts.extend(hooks.events());

    let requests = server.received_requests().await.unwrap_or_default();
    assert_eq!(requests.len(), 4, "429, 500, then the two turns");
    let sent = requests
        .iter()
        .filter_map(|r| r.headers.get("authorization"))
        .filter(|v| *v == format!("Bearer {API_KEY}").as_str());
    assert_eq!(sent.count(), 4, "the key does travel, in its header");
    Ok(())
}

/// A run that fails on HTTP 401 whose body quotes the key.
async fn failing_run<M: ModelClient + std::fmt::Debug + 'static>(model: M, trail: &mut Trail) -> anyhow::Result<()> {
    trail.add(format!("{model:?}"));
    let model = Arc::new(model);
    let tools = Tools::new();
    let agent = tool_loop(model, &tools, "m")?;
    let hooks = DebugHooks::default();
    let error = match agent.start(&RunScope::new("run-401"), "hello", &hooks).await {
        Err(error) => error,
        Ok(outcome) => anyhow::bail!("expected a 401 failure, got {outcome:?}"),
    };
    let LoopError::Model { source, .. } = &error else { anyhow::bail!("expected a model error, got {error}") };
    assert_eq!(source.kind().as_str(), "model_auth");
    assert!(error.to_string().contains("[redacted]"), "the echo is replaced: {error}");
    trail.add(error.to_string());
    trail.add(format!("{error:?}"));
    trail.texts.extend(hooks.events());
    Ok(())
}

#[tokio::test]
async fn the_api_key_is_in_no_log_line_event_or_error() -> anyhow::Result<()> {
    let logs = LogCapture::default();
    let _installed = logs.install();
    let mut trail = Trail::default();

    openai_run(&mut trail).await?;

    let server = MockServer::start().await;
    let echo =
        json!({"error": {"message": format!("Incorrect API key provided: {API_KEY}."), "code": "invalid_api_key"}});
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(401).set_body_json(echo))
        .mount(&server)
        .await;
    let echo = json!({
        "type": "error",
        "error": {"type": "authentication_error", "message": format!("invalid x-api-key {API_KEY}")},
    });
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(401).set_body_json(echo))
        .mount(&server)
        .await;
    failing_run(OpenAiModel::new(settings(&format!("{}/v1", server.uri())))?, &mut trail).await?;
    failing_run(AnthropicModel::new(settings(&server.uri()))?, &mut trail).await?;
    let anthropic_request = server.received_requests().await.unwrap_or_default().pop();
    assert_eq!(
        anthropic_request.and_then(|r| r.headers.get("x-api-key").cloned()).as_ref().map(|v| v.as_bytes()),
        Some(API_KEY.as_bytes())
    );
    trail.add(format!("{:?}", settings("http://x")));

    let logged = logs.text();
    assert!(logged.contains("model call failed; retrying"), "the capture sees the adapters' logs:\n{logged}");
    assert!(logged.contains("model_auth"), "the 401 is logged:\n{logged}");
    trail.add(logged);
    trail.assert_clean();
    Ok(())
}
