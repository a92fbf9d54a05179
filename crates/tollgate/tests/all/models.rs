//! `Model::openai_with`: an agent on an OpenAI-compatible server (a mock on loopback).

use super::*;
use tollgate::providers::{ApiKey, ProviderSettings};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// First a `pay` call of 500.00 to bob, then (once the tool's result is in the request) "paid".
struct Completions;

impl Respond for Completions {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let answered = body["messages"].as_array().is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        let message = if answered {
            serde_json::json!({"role": "assistant", "content": "paid"})
        } else {
            serde_json::json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "pay", "arguments": "{\"to\":\"bob\",\"cents\":50000}"}}]})
        };
        ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "id": "x", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": if answered { "stop" } else { "tool_calls" }}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5}
        }))
    }
}

#[tokio::test]
async fn an_openai_compatible_model_drives_a_run_through_the_gate() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("authorization", "Bearer sk-test"))
        .respond_with(Completions)
        .mount(&server)
        .await;
    let settings = ProviderSettings {
        base_url: Some(format!("{}/v1", server.uri())),
        api_key: Some(ApiKey::new("sk-test")),
        max_retries: 0,
        ..ProviderSettings::default()
    };
    let pay = Pay::default();
    let tollgate = Tollgate::builder()
        .store("sqlite::memory:")
        .agent(Agent::new("bank").model(Model::openai_with(settings, "gpt-test")).tool(pay.clone()))
        .build()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let run = tollgate.start("pay bob").wait().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.status, tollgate::RunStatus::WaitingForApproval);
    let held = tollgate.pending(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    let done = tollgate.decide(held.approve_all()).wait().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((done.status, done.output.as_deref()), (tollgate::RunStatus::Completed, Some("paid")));
    assert_eq!(pay.runs.load(Ordering::SeqCst), 1);
    let requests = server.received_requests().await.unwrap_or_default();
    let first: serde_json::Value = serde_json::from_slice(&requests[0].body).unwrap_or_default();
    assert_eq!(first["model"], "gpt-test");
    assert_eq!(first["tools"][0]["function"]["name"], "pay");
}

#[tokio::test]
async fn a_model_that_cannot_be_set_up_fails_the_build_naming_the_agent() {
    let settings = ProviderSettings { base_url: Some("not a url".into()), ..ProviderSettings::default() };
    let error = Tollgate::builder()
        .store("sqlite::memory:")
        .agent(Agent::new("bank").model(Model::openai_with(settings, "gpt-test")))
        .build()
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(error.starts_with("agent `bank`: model `gpt-test`:"), "{error}");
}
