//! The Anthropic adapter against a local mock server answering in the Messages format.

use crate::support::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tollgate_agent_core::{
    AgentLoop, FinishReason, Message, ModelClient, ModelError, ModelRequest, ModelResponse, NoHooks, Outcome, RunScope,
    ToolCall, Usage,
};
use tollgate_agent_providers::{ANTHROPIC_VERSION, AnthropicModel, ProviderSettings};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const PATH: &str = "/v1/messages";

fn model(server: &MockServer) -> anyhow::Result<AnthropicModel> {
    model_with(server, |s| s)
}

fn model_with(
    server: &MockServer,
    adjust: impl FnOnce(ProviderSettings) -> ProviderSettings,
) -> anyhow::Result<AnthropicModel> {
    // Anthropic's base_url has no `/v1`: the adapter adds `/v1/messages`.
    Ok(AnthropicModel::new(adjust(settings(&server.uri())))?)
}

async fn ask(model: &AnthropicModel) -> Result<ModelResponse, ModelError> {
    let messages = [Message::system("You are careful."), Message::user("Save a note saying hi")];
    let tools = specs();
    model.complete(ModelRequest { model: "claude-test", messages: &messages, tools: &tools }).await
}

async fn answer_with(server: &MockServer, template: ResponseTemplate) {
    Mock::given(method("POST")).and(path(PATH)).respond_with(template).mount(server).await;
}

fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

async fn request_count(server: &MockServer) -> usize {
    server.received_requests().await.map_or(0, |r| r.len())
}

#[tokio::test]
async fn single_call() -> anyhow::Result<()> {
    let server = MockServer::start().await;
    let answer =
        anthropic_answer(vec![anthropic_call("toolu_01A", "fs_read", json!({"path": "notes.txt"}))], "tool_use");
    Mock::given(method("POST"))
        .and(path(PATH))
        .and(header("x-api-key", API_KEY))
        .and(header("anthropic-version", ANTHROPIC_VERSION))
        .and(header("content-type", "application/json"))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer))
        .expect(1)
        .mount(&server)
        .await;
    let response = ask(&model(&server)?).await?;
    assert_eq!(response.tool_calls, vec![ToolCall::new("toolu_01A", "fs_read", json!({"path": "notes.txt"}))]);
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(response.usage, Usage { input_tokens: 200, output_tokens: 40 });
    let body = &bodies(&server).await?[0];
    assert_eq!(body["system"], json!("You are careful."));
    assert_eq!(body["max_tokens"], json!(1024));
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "Save a note saying hi"}]}])
    );
    assert_eq!(body["tools"][0]["input_schema"]["required"], json!(["path"]));
    let requests = server.received_requests().await.unwrap_or_default();
    assert!(requests[0].headers.get("authorization").is_none(), "Anthropic takes the key in x-api-key only");
    Ok(())
}

#[tokio::test]
async fn two_calls_in_one_turn() -> anyhow::Result<()> {
    let server = MockServer::start().await;
    let answer = anthropic_answer(
        vec![
            anthropic_text("Reading, then writing."),
            anthropic_call("toolu_01A", "fs_read", json!({"path": "a.txt"})),
            anthropic_call("toolu_01B", "fs_write", json!({"path": "b.txt", "content": "hi"})),
        ],
        "tool_use",
    );
    answer_with(&server, ResponseTemplate::new(200).set_body_json(answer)).await;
    let response = ask(&model(&server)?).await?;
    assert_eq!(response.text.as_deref(), Some("Reading, then writing."));
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall::new("toolu_01A", "fs_read", json!({"path": "a.txt"})),
            ToolCall::new("toolu_01B", "fs_write", json!({"path": "b.txt", "content": "hi"})),
        ]
    );
    Ok(())
}

#[tokio::test]
async fn text_only() -> anyhow::Result<()> {
    let server = MockServer::start().await;
    let answer = anthropic_answer(vec![anthropic_text("Hello"), anthropic_text("there.")], "end_turn");
    answer_with(&server, ResponseTemplate::new(200).set_body_json(answer)).await;
    let response = ask(&model(&server)?).await?;
    assert_eq!(response.text.as_deref(), Some("Hello\nthere."));
    assert_eq!(response.finish_reason, FinishReason::Stop);
    Ok(())
}

#[tokio::test]
async fn malformed_arguments_are_flagged_and_answered_with_an_error_result() -> anyhow::Result<()> {
    // The Messages API parses `input` itself; what can still go wrong is an input that is not an object.
    let server = MockServer::start().await;
    let turns = vec![
        anthropic_answer(vec![anthropic_call("toolu_bad", "fs_write", json!("path=note.txt"))], "tool_use"),
        anthropic_answer(vec![anthropic_text("I will fix my arguments.")], "end_turn"),
    ];
    Mock::given(method("POST")).and(path(PATH)).respond_with(by_turn(turns)).mount(&server).await;
    let first = ask(&model(&server)?).await?;
    assert_eq!(first.tool_calls[0].arguments, json!("path=note.txt"));
    assert_eq!(first.tool_calls[0].malformed_arguments.as_deref(), Some("expected a JSON object, got a string"));

    let tools = Tools::new();
    let agent = tool_loop(Arc::new(model(&server)?), &tools, "claude-test")?;
    let Outcome::Completed(done) = agent.start(&RunScope::new("run-malformed"), "write a note", &NoHooks).await? else {
        anyhow::bail!("a malformed call is refused before the gate, so nothing waits");
    };
    assert_eq!(done.output.as_deref(), Some("I will fix my arguments."));
    assert_eq!(tools.fs_write.call_count(), 0);
    let second = bodies(&server).await?.pop().unwrap_or_default();
    assert_anthropic_calls_answered(&second);
    assert_eq!(second["messages"][1]["content"][0]["input"], json!({}), "the API takes only an object");
    let result = &second["messages"][2]["content"][0];
    assert_eq!(result["is_error"], json!(true));
    assert!(result["content"].as_str().is_some_and(|c| c.contains("not valid JSON")), "{result}");
    Ok(())
}

#[tokio::test]
async fn rate_limited_then_success() -> anyhow::Result<()> {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "0")
                .set_body_json(error_body("rate_limit_error", "Number of request tokens has exceeded your rate limit")),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    let answer = anthropic_answer(vec![anthropic_text("after the wait")], "end_turn");
    answer_with(&server, ResponseTemplate::new(200).set_body_json(answer)).await;
    assert_eq!(ask(&model(&server)?).await?.text.as_deref(), Some("after the wait"));
    assert_eq!(request_count(&server).await, 2);
    Ok(())
}

#[tokio::test]
async fn server_error_exhausts_the_retries() -> anyhow::Result<()> {
    let server = MockServer::start().await;
    answer_with(&server, ResponseTemplate::new(500).set_body_json(error_body("api_error", "Internal server error")))
        .await;
    let error = ask(&model(&server)?).await.err();
    assert_eq!(error, Some(ModelError::Server { status: 500, message: "Internal server error".into() }));
    assert_eq!(request_count(&server).await, 3);
    Ok(())
}

#[tokio::test]
async fn overloaded_is_retried_like_any_5xx() -> anyhow::Result<()> {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ResponseTemplate::new(529).set_body_json(error_body("overloaded_error", "Overloaded")))
        .up_to_n_times(2)
        .mount(&server)
        .await;
    let answer = anthropic_answer(vec![anthropic_text("ok")], "end_turn");
    answer_with(&server, ResponseTemplate::new(200).set_body_json(answer)).await;
    assert_eq!(ask(&model(&server)?).await?.text.as_deref(), Some("ok"));
    assert_eq!(request_count(&server).await, 3);
    Ok(())
}

#[tokio::test]
async fn unauthorized_is_not_retried() -> anyhow::Result<()> {
    let server = MockServer::start().await;
    answer_with(
        &server,
        ResponseTemplate::new(401).set_body_json(error_body("authentication_error", "invalid x-api-key")),
    )
    .await;
    let error = ask(&model(&server)?).await.err();
    assert_eq!(error, Some(ModelError::Auth { status: 401, message: "invalid x-api-key".into() }));
    assert_eq!(request_count(&server).await, 1);
    Ok(())
}

#[tokio::test]
async fn bad_requests_are_not_retried() -> anyhow::Result<()> {
    for (status, kind, expected) in [
        (400, "invalid_request_error", "model_bad_request"),
        (403, "permission_error", "model_auth"),
        (404, "not_found_error", "model_bad_request"),
    ] {
        let server = MockServer::start().await;
        answer_with(&server, ResponseTemplate::new(status).set_body_json(error_body(kind, "no"))).await;
        let error = ask(&model(&server)?).await.err();
        assert_eq!(error.as_ref().map(|e| e.kind().to_string()).as_deref(), Some(expected), "HTTP {status}: {error:?}");
        assert_eq!(request_count(&server).await, 1, "HTTP {status}");
    }
    Ok(())
}

#[tokio::test]
async fn prompt_too_long_is_a_context_length_error() -> anyhow::Result<()> {
    let server = MockServer::start().await;
    let message = "prompt is too long: 208310 tokens > 200000 maximum";
    answer_with(&server, ResponseTemplate::new(400).set_body_json(error_body("invalid_request_error", message))).await;
    assert_eq!(ask(&model(&server)?).await.err(), Some(ModelError::ContextLength(message.into())));
    assert_eq!(request_count(&server).await, 1);
    Ok(())
}

#[tokio::test]
async fn timeout() -> anyhow::Result<()> {
    let server = MockServer::start().await;
    let answer = anthropic_answer(vec![anthropic_text("too late")], "end_turn");
    answer_with(&server, ResponseTemplate::new(200).set_body_json(answer).set_delay(Duration::from_secs(3))).await;
    let model = model_with(&server, |s| ProviderSettings { timeout: Duration::from_millis(200), max_retries: 1, ..s })?;
    assert_eq!(ask(&model).await.err(), Some(ModelError::Timeout(Duration::from_millis(200))));
    assert_eq!(request_count(&server).await, 2, "a timeout is retried");
    Ok(())
}

#[tokio::test]
async fn refusal_and_empty_answers_are_typed_errors() -> anyhow::Result<()> {
    let cases = [
        (anthropic_answer(vec![], "refusal"), "model_refusal"),
        (anthropic_answer(vec![], "end_turn"), "model_invalid_response"),
        (json!({"type": "message", "role": "assistant"}), "model_invalid_response"),
    ];
    for (answer, expected) in cases {
        let server = MockServer::start().await;
        answer_with(&server, ResponseTemplate::new(200).set_body_json(answer)).await;
        let error = ask(&model(&server)?).await.err();
        assert_eq!(error.as_ref().map(|e| e.kind().to_string()).as_deref(), Some(expected), "{error:?}");
        assert_eq!(request_count(&server).await, 1);
    }
    Ok(())
}
