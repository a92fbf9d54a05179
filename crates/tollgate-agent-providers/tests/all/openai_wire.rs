//! The OpenAI-compatible adapter against a local mock server answering in the Chat Completions format.

use crate::support::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tollgate_agent_core::{
    AgentLoop, FinishReason, Message, ModelClient, ModelError, ModelRequest, ModelResponse, NoHooks, Outcome, RunScope,
    ToolCall, Usage,
};
use tollgate_agent_providers::{OpenAiModel, ProviderSettings};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const PATH: &str = "/v1/chat/completions";

async fn server() -> MockServer {
    MockServer::start().await
}

fn model(server: &MockServer) -> anyhow::Result<OpenAiModel> {
    model_with(server, |s| s)
}

fn model_with(
    server: &MockServer,
    adjust: impl FnOnce(ProviderSettings) -> ProviderSettings,
) -> anyhow::Result<OpenAiModel> {
    Ok(OpenAiModel::new(adjust(settings(&format!("{}/v1", server.uri()))))?)
}

async fn ask(model: &OpenAiModel) -> Result<ModelResponse, ModelError> {
    let messages = [Message::system("You are careful."), Message::user("Save a note saying hi")];
    let tools = specs();
    model.complete(ModelRequest { model: "gpt-test", messages: &messages, tools: &tools }).await
}

async fn answer_with(server: &MockServer, template: ResponseTemplate) {
    Mock::given(method("POST")).and(path(PATH)).respond_with(template).mount(server).await;
}

async fn request_count(server: &MockServer) -> usize {
    server.received_requests().await.map_or(0, |r| r.len())
}

#[tokio::test]
async fn single_call() -> anyhow::Result<()> {
    let server = server().await;
    let calls = vec![openai_call("call_Ab12", "fs_read", r#"{"path": "notes.txt"}"#)];
    Mock::given(method("POST"))
        .and(path(PATH))
        .and(header("authorization", format!("Bearer {API_KEY}").as_str()))
        .and(header("content-type", "application/json"))
        .respond_with(ResponseTemplate::new(200).set_body_json(openai_calls(calls)))
        .expect(1)
        .mount(&server)
        .await;
    let response = ask(&model(&server)?).await?;
    assert_eq!(response.tool_calls, vec![ToolCall::new("call_Ab12", "fs_read", json!({"path": "notes.txt"}))]);
    assert_eq!(response.text, None);
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(response.usage, Usage { input_tokens: 120, output_tokens: 30 });
    let body = &bodies(&server).await?[0];
    assert_eq!(body["model"], json!("gpt-test"));
    assert_eq!(body["messages"][0], json!({"role": "system", "content": "You are careful."}));
    assert_eq!(body["tools"][0]["type"], json!("function"));
    assert_eq!(body["tools"][0]["function"]["name"], json!("fs_read"));
    Ok(())
}

#[tokio::test]
async fn two_calls_in_one_turn() -> anyhow::Result<()> {
    let server = server().await;
    let calls = vec![
        openai_call("call_1a", "fs_read", r#"{"path": "a.txt"}"#),
        openai_call("call_2b", "fs_write", r#"{"path": "b.txt", "content": "hi"}"#),
    ];
    let mut answer = openai_calls(calls);
    answer["choices"][0]["message"]["content"] = json!("Reading, then writing.");
    answer_with(&server, ResponseTemplate::new(200).set_body_json(answer)).await;
    let response = ask(&model(&server)?).await?;
    assert_eq!(response.text.as_deref(), Some("Reading, then writing."));
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall::new("call_1a", "fs_read", json!({"path": "a.txt"})),
            ToolCall::new("call_2b", "fs_write", json!({"path": "b.txt", "content": "hi"})),
        ]
    );
    Ok(())
}

#[tokio::test]
async fn text_only() -> anyhow::Result<()> {
    let server = server().await;
    answer_with(&server, ResponseTemplate::new(200).set_body_json(openai_text("Hello there."))).await;
    let response = ask(&model(&server)?).await?;
    assert_eq!(response.text.as_deref(), Some("Hello there."));
    assert!(response.tool_calls.is_empty());
    assert_eq!(response.finish_reason, FinishReason::Stop);
    Ok(())
}

#[tokio::test]
async fn malformed_arguments_are_flagged_not_fatal() -> anyhow::Result<()> {
    let server = server().await;
    let raw = r#"{"path": "a.txt", "content": "unterminated"#;
    answer_with(
        &server,
        ResponseTemplate::new(200).set_body_json(openai_calls(vec![openai_call("call_x", "fs_write", raw)])),
    )
    .await;
    let response = ask(&model(&server)?).await?;
    let call = &response.tool_calls[0];
    assert_eq!(call.arguments, Value::String(raw.into()));
    assert!(call.malformed_arguments.as_deref().is_some_and(|m| m.contains("EOF")), "{call:?}");
    Ok(())
}

#[tokio::test]
async fn malformed_arguments_become_an_error_result_fed_back_to_the_model() -> anyhow::Result<()> {
    let server = server().await;
    let raw = r#"{"path": "note.txt", "content": "#;
    let turns = vec![
        openai_calls(vec![openai_call("call_bad", "fs_write", raw)]),
        openai_text("Sorry, my arguments were broken."),
    ];
    Mock::given(method("POST")).and(path(PATH)).respond_with(by_turn(turns)).mount(&server).await;
    let tools = Tools::new();
    let agent = tool_loop(Arc::new(model(&server)?), &tools, "gpt-test")?;
    let Outcome::Completed(done) = agent.start(&RunScope::new("run-malformed"), "write a note", &NoHooks).await? else {
        anyhow::bail!("a malformed call is refused before the gate, so nothing waits");
    };
    assert_eq!(done.output.as_deref(), Some("Sorry, my arguments were broken."));
    assert_eq!(tools.fs_write.call_count(), 0);
    let second = &bodies(&server).await?[1];
    assert_openai_calls_answered(second);
    let messages = second["messages"].as_array().cloned().unwrap_or_default();
    assert_eq!(messages[2]["tool_calls"][0]["function"]["arguments"], json!(raw), "the model's own text goes back");
    assert_eq!(messages[3]["tool_call_id"], json!("call_bad"));
    let result = messages[3]["content"].as_str().unwrap_or_default();
    assert!(result.starts_with("Tool fs_write was not run: its arguments are not valid JSON"), "{result}");
    Ok(())
}

#[tokio::test]
async fn missing_and_duplicate_call_ids_are_replaced() -> anyhow::Result<()> {
    let server = server().await;
    let calls = vec![
        json!({"type": "function", "function": {"name": "fs_read", "arguments": "{\"path\": \"a\"}"}}),
        openai_call("same", "fs_read", r#"{"path": "b"}"#),
        openai_call("same", "fs_read", r#"{"path": "c"}"#),
    ];
    answer_with(&server, ResponseTemplate::new(200).set_body_json(openai_calls(calls))).await;
    let response = ask(&model(&server)?).await?;
    let ids: Vec<&str> = response.tool_calls.iter().map(|c| c.call_id.as_str()).collect();
    assert_eq!(ids, ["call_1", "same", "call_2"]);
    Ok(())
}

#[tokio::test]
async fn rate_limited_then_success() -> anyhow::Result<()> {
    let server = server().await;
    Mock::given(method("POST"))
        .and(path(PATH))
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "0").set_body_json(
            json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}),
        ))
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    answer_with(&server, ResponseTemplate::new(200).set_body_json(openai_text("after the wait"))).await;
    let response = ask(&model(&server)?).await?;
    assert_eq!(response.text.as_deref(), Some("after the wait"));
    assert_eq!(request_count(&server).await, 2);
    Ok(())
}

#[tokio::test]
async fn rate_limit_longer_than_the_backoff_cap_is_returned_not_waited_for() -> anyhow::Result<()> {
    let server = server().await;
    answer_with(
        &server,
        ResponseTemplate::new(429)
            .insert_header("retry-after", "30")
            .set_body_json(json!({"error": {"message": "slow down"}})),
    )
    .await;
    let error = ask(&model(&server)?).await.err();
    assert_eq!(
        error,
        Some(ModelError::RateLimited { message: "slow down".into(), retry_after: Some(Duration::from_secs(30)) })
    );
    assert_eq!(request_count(&server).await, 1);
    Ok(())
}

#[tokio::test]
async fn server_error_exhausts_the_retries() -> anyhow::Result<()> {
    let server = server().await;
    answer_with(
        &server,
        ResponseTemplate::new(500)
            .set_body_json(json!({"error": {"message": "The server had an error", "type": "server_error"}})),
    )
    .await;
    let error = ask(&model(&server)?).await.err();
    assert_eq!(error, Some(ModelError::Server { status: 500, message: "The server had an error".into() }));
    assert_eq!(request_count(&server).await, 3, "one attempt and max_retries = 2 retries");
    Ok(())
}

#[tokio::test]
async fn unauthorized_is_not_retried() -> anyhow::Result<()> {
    let server = server().await;
    answer_with(
        &server,
        ResponseTemplate::new(401).set_body_json(json!({"error": {
            "message": "Incorrect API key provided: sk-tolle***4086.",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }})),
    )
    .await;
    let error = ask(&model(&server)?).await.err();
    assert!(matches!(&error, Some(ModelError::Auth { status: 401, .. })), "{error:?}");
    assert!(error.is_some_and(|e| !e.is_retryable()));
    assert_eq!(request_count(&server).await, 1);
    Ok(())
}

#[tokio::test]
async fn bad_requests_are_not_retried() -> anyhow::Result<()> {
    for (status, expected) in [(400, "model_bad_request"), (403, "model_auth"), (404, "model_bad_request")] {
        let server = server().await;
        answer_with(&server, ResponseTemplate::new(status).set_body_json(json!({"error": {"message": "no"}}))).await;
        let error = ask(&model(&server)?).await.err();
        assert_eq!(error.as_ref().map(|e| e.kind().to_string()).as_deref(), Some(expected), "HTTP {status}: {error:?}");
        assert_eq!(request_count(&server).await, 1, "HTTP {status}");
    }
    Ok(())
}

#[tokio::test]
async fn context_length_is_its_own_kind() -> anyhow::Result<()> {
    let server = server().await;
    let message =
        "This model's maximum context length is 128000 tokens. However, your messages resulted in 130012 tokens.";
    answer_with(
        &server,
        ResponseTemplate::new(400).set_body_json(json!({"error": {
            "message": message, "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded",
        }})),
    )
    .await;
    assert_eq!(ask(&model(&server)?).await.err(), Some(ModelError::ContextLength(message.into())));
    assert_eq!(request_count(&server).await, 1);
    Ok(())
}

#[tokio::test]
async fn timeout() -> anyhow::Result<()> {
    let server = server().await;
    answer_with(
        &server,
        ResponseTemplate::new(200).set_body_json(openai_text("too late")).set_delay(Duration::from_secs(3)),
    )
    .await;
    let model = model_with(&server, |s| ProviderSettings { timeout: Duration::from_millis(200), max_retries: 1, ..s })?;
    assert_eq!(ask(&model).await.err(), Some(ModelError::Timeout(Duration::from_millis(200))));
    assert_eq!(request_count(&server).await, 2, "a timeout is retried");
    Ok(())
}

#[tokio::test]
async fn connection_failure_is_retried_then_reported() -> anyhow::Result<()> {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let model = OpenAiModel::new(settings(&format!("http://127.0.0.1:{port}/v1")))?;
    let error = ask(&model).await.err();
    assert!(matches!(&error, Some(ModelError::Connection(m)) if m.contains("127.0.0.1")), "{error:?}");
    Ok(())
}

#[tokio::test]
async fn refusal_empty_and_truncated_answers_are_typed_errors() -> anyhow::Result<()> {
    let refusal = openai_answer(
        json!({"role": "assistant", "content": null, "refusal": "I can't help with that request."}),
        "stop",
    );
    let cases = [
        (ResponseTemplate::new(200).set_body_json(refusal), "model_refusal"),
        (ResponseTemplate::new(200).set_body_json(json!({"id": "x", "choices": []})), "model_invalid_response"),
        (ResponseTemplate::new(200).set_body_json(json!({"choices": [{"index": 0}]})), "model_invalid_response"),
        (
            ResponseTemplate::new(200).set_body_string(r#"{"choices": [{"index": 0, "message": {"#),
            "model_invalid_response",
        ),
        (ResponseTemplate::new(200).set_body_string(""), "model_invalid_response"),
    ];
    for (template, expected) in cases {
        let server = server().await;
        answer_with(&server, template).await;
        let error = ask(&model(&server)?).await.err();
        assert_eq!(error.as_ref().map(|e| e.kind().to_string()).as_deref(), Some(expected), "{error:?}");
        assert_eq!(request_count(&server).await, 1, "{error:?} is not retried");
    }
    Ok(())
}

#[tokio::test]
async fn local_servers_need_no_key() -> anyhow::Result<()> {
    let server = server().await;
    answer_with(&server, ResponseTemplate::new(200).set_body_json(openai_text("from ollama"))).await;
    let model = model_with(&server, |s| ProviderSettings { api_key: None, ..s })?;
    assert_eq!(ask(&model).await?.text.as_deref(), Some("from ollama"));
    let requests = server.received_requests().await.unwrap_or_default();
    assert!(requests[0].headers.get("authorization").is_none());
    Ok(())
}
