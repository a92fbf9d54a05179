//! Streamed answers (`stream = true`) of both HTTP adapters against local servers: the text reaches the
//! deltas as it arrives; the response is the one the plain answer gives; a stream cut by the connection,
//! or that ends cleanly before its final event, is a connection failure, retried after a reset; a stream
//! whose tool arguments are not JSON is an invalid response; a server that ignores `stream: true` is read
//! as a plain answer.

use crate::support::*;
use serde_json::{Value, json};
use std::sync::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate_agent_core::{
    FinishReason, Message, ModelClient, ModelDelta, ModelDeltas, ModelError, ModelRequest, ModelResponse, ToolCall,
    Usage,
};
use tollgate_agent_providers::{AnthropicModel, OpenAiModel};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Deltas kept as text pieces, `<reset>` for a reset.
#[derive(Default)]
struct Kept(Mutex<Vec<String>>);

impl ModelDeltas for Kept {
    fn delta(&self, delta: ModelDelta<'_>) {
        let piece = match delta {
            ModelDelta::Text(text) => text.to_owned(),
            ModelDelta::Reset => "<reset>".to_owned(),
        };
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(piece);
    }
}

impl Kept {
    fn pieces(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

fn sse(events: &[(Option<&str>, Value)], done: bool) -> String {
    let mut body = String::new();
    for (name, data) in events {
        if let Some(name) = name {
            body.push_str(&format!("event: {name}\n"));
        }
        body.push_str(&format!("data: {data}\n\n"));
    }
    if done {
        body.push_str("data: [DONE]\n\n");
    }
    body
}

fn event_stream(body: String) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body.into_bytes(), "text/event-stream")
}

async fn mock(body: ResponseTemplate, at: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST")).and(path(at)).respond_with(body).mount(&server).await;
    server
}

fn openai(base: &str) -> OpenAiModel {
    OpenAiModel::new(ProviderSettings { stream: true, ..settings(base) }).unwrap_or_else(|e| panic!("{e}"))
}

fn anthropic(base: &str) -> AnthropicModel {
    AnthropicModel::new(ProviderSettings { stream: true, ..settings(base) }).unwrap_or_else(|e| panic!("{e}"))
}

use tollgate_agent_providers::ProviderSettings;

async fn ask(model: &dyn ModelClient, kept: &Kept) -> Result<ModelResponse, ModelError> {
    let messages = [Message::user("Save a note saying hi")];
    let tools = specs();
    model.complete_streaming(ModelRequest { model: "m", messages: &messages, tools: &tools }, kept).await
}

fn chunk(delta: Value) -> (Option<&'static str>, Value) {
    (None, json!({"choices": [{"index": 0, "delta": delta, "finish_reason": null}]}))
}

/// The OpenAI stream of a turn with text and one tool call split over chunks, then usage.
fn openai_turn() -> Vec<(Option<&'static str>, Value)> {
    vec![
        chunk(json!({"role": "assistant", "content": ""})),
        chunk(json!({"content": "Saving "})),
        chunk(json!({"content": "it."})),
        chunk(json!({"tool_calls": [{"index": 0, "id": "call_X1", "type": "function",
                                      "function": {"name": "fs_write", "arguments": ""}}]})),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\": \"a.txt\", "}}]})),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"content\": \"hi\"}"}}]})),
        (None, json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
        (None, json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 7}})),
    ]
}

#[tokio::test]
async fn openai_streams_text_and_assembles_the_same_response() {
    let server = mock(event_stream(sse(&openai_turn(), true)), "/v1/chat/completions").await;
    let kept = Kept::default();
    let response = ask(&openai(&format!("{}/v1", server.uri())), &kept).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(kept.pieces(), ["Saving ", "it."]);
    assert_eq!(response.text.as_deref(), Some("Saving it."));
    assert_eq!(
        response.tool_calls,
        vec![ToolCall::new("call_X1", "fs_write", json!({"path": "a.txt", "content": "hi"}))]
    );
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(response.usage, Usage { input_tokens: 12, output_tokens: 7 });
    let requests = server.received_requests().await.unwrap_or_default();
    let body: Value = serde_json::from_slice(&requests[0].body).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn anthropic_streams_text_and_assembles_the_same_response() {
    let events = vec![
        (
            Some("message_start"),
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "content": [], "usage": {"input_tokens": 20, "output_tokens": 1}}}),
        ),
        (
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ),
        (Some("ping"), json!({"type": "ping"})),
        (
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "Saving "}}),
        ),
        (
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "it."}}),
        ),
        (Some("content_block_stop"), json!({"type": "content_block_stop", "index": 0})),
        (
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "fs_write", "input": {}}}),
        ),
        (
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"a.txt\","}}),
        ),
        (
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": " \"content\": \"hi\"}"}}),
        ),
        (Some("content_block_stop"), json!({"type": "content_block_stop", "index": 1})),
        (
            Some("message_delta"),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 9}}),
        ),
        (Some("message_stop"), json!({"type": "message_stop"})),
    ];
    let server = mock(event_stream(sse(&events, false)), "/v1/messages").await;
    let kept = Kept::default();
    let response = ask(&anthropic(&server.uri()), &kept).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(kept.pieces(), ["Saving ", "it."]);
    assert_eq!(response.text.as_deref(), Some("Saving it."));
    assert_eq!(
        response.tool_calls,
        vec![ToolCall::new("toolu_1", "fs_write", json!({"path": "a.txt", "content": "hi"}))]
    );
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(response.usage, Usage { input_tokens: 20, output_tokens: 9 });
    let requests = server.received_requests().await.unwrap_or_default();
    let body: Value = serde_json::from_slice(&requests[0].body).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(body["stream"], json!(true));

    // An error event mid-stream: overloaded is a server failure (retried, then returned).
    let failing = vec![
        events[0].clone(),
        (Some("error"), json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
    ];
    let server = mock(event_stream(sse(&failing, false)), "/v1/messages").await;
    let error = ask(&anthropic(&server.uri()), &Kept::default()).await.err();
    assert!(matches!(error, Some(ModelError::Server { status: 529, .. })), "{error:?}");
    assert_eq!(server.received_requests().await.map_or(0, |r| r.len()), 3, "two retries");
}

/// The Anthropic stream of a turn with text only, `message_stop` last.
fn anthropic_turn() -> Vec<(Option<&'static str>, Value)> {
    vec![
        (
            Some("message_start"),
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "content": [], "usage": {"input_tokens": 20, "output_tokens": 1}}}),
        ),
        (
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Saving "}}),
        ),
        (
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "it."}}),
        ),
        (Some("content_block_stop"), json!({"type": "content_block_stop", "index": 0})),
        (
            Some("message_delta"),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}),
        ),
        (Some("message_stop"), json!({"type": "message_stop"})),
    ]
}

/// A stream that ends cleanly without its final event (OpenAI's `[DONE]`, Anthropic's `message_stop`) was
/// cut on the way, as a proxy ends a cut stream: a connection failure, tried again under `max_retries`
/// after a reset of the deltas; the next whole answer is the response. Out of retries, the error is the
/// connection failure, never an invalid response.
#[tokio::test]
async fn a_stream_that_ends_before_its_final_event_is_retried_after_a_reset() {
    let cut_openai = sse(&openai_turn()[..2], false);
    let whole_openai = sse(&openai_turn(), true);
    let anthropic_events = anthropic_turn();
    let cut_anthropic = sse(&anthropic_events[..3], false);
    let whole_anthropic = sse(&anthropic_events, false);
    for (provider, at, cut, whole) in [
        ("openai", "/v1/chat/completions", &cut_openai, &whole_openai),
        ("anthropic", "/v1/messages", &cut_anthropic, &whole_anthropic),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path(at))
            .respond_with(event_stream(cut.clone()))
            .up_to_n_times(1)
            .mount(&server)
            .await;
        Mock::given(method("POST")).and(path(at)).respond_with(event_stream(whole.clone())).mount(&server).await;
        let model: Box<dyn ModelClient> = match provider {
            "openai" => Box::new(openai(&format!("{}/v1", server.uri()))),
            _ => Box::new(anthropic(&server.uri())),
        };
        let kept = Kept::default();
        let response = ask(model.as_ref(), &kept).await.unwrap_or_else(|e| panic!("{provider}: {e}"));
        assert_eq!(response.text.as_deref(), Some("Saving it."), "{provider}");
        assert_eq!(kept.pieces(), ["Saving ", "<reset>", "Saving ", "it."], "{provider}");
        assert_eq!(server.received_requests().await.map_or(0, |r| r.len()), 2, "{provider}");

        // Cut every time: each retry resets, and the last failure is returned as a connection failure.
        let server = mock(event_stream(cut.clone()), at).await;
        let model: Box<dyn ModelClient> = match provider {
            "openai" => Box::new(openai(&format!("{}/v1", server.uri()))),
            _ => Box::new(anthropic(&server.uri())),
        };
        let kept = Kept::default();
        let error = ask(model.as_ref(), &kept).await.err();
        assert!(matches!(&error, Some(ModelError::Connection(m)) if m.contains("final event")), "{error:?}");
        assert_eq!(error.map(|e| e.kind().to_string()).as_deref(), Some("model_connection"));
        assert_eq!(server.received_requests().await.map_or(0, |r| r.len()), 3, "{provider}: two retries");
        assert_eq!(kept.pieces(), ["Saving ", "<reset>", "Saving ", "<reset>", "Saving "], "{provider}");
    }
}

/// A stream whose tool arguments are not JSON, or with an event that is not JSON, is an invalid response,
/// not retried; a server that ignores `stream: true` and answers JSON is read as usual.
#[tokio::test]
async fn broken_arguments_are_invalid_and_plain_answers_are_read() {
    let base = |server: &MockServer| format!("{}/v1", server.uri());
    let mut broken = openai_turn();
    broken.remove(5);
    let server = mock(event_stream(sse(&broken, true)), "/v1/chat/completions").await;
    let error = ask(&openai(&base(&server)), &Kept::default()).await.err();
    assert!(matches!(&error, Some(ModelError::InvalidResponse(m)) if m.contains("not JSON")), "{error:?}");
    assert_eq!(server.received_requests().await.map_or(0, |r| r.len()), 1, "not retried");

    let server = mock(event_stream("data: {not json\n\n".into()), "/v1/chat/completions").await;
    let error = ask(&openai(&base(&server)), &Kept::default()).await.err();
    assert!(matches!(error, Some(ModelError::InvalidResponse(_))), "{error:?}");

    let plain = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "plain"},
                                   "finish_reason": "stop"}]});
    let server = mock(ResponseTemplate::new(200).set_body_json(plain), "/v1/chat/completions").await;
    let kept = Kept::default();
    let response = ask(&openai(&base(&server)), &kept).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((response.text.as_deref(), kept.pieces().len()), (Some("plain"), 0));

    let server = mock(
        ResponseTemplate::new(401).set_body_json(json!({"error": {"message": "bad key"}})),
        "/v1/chat/completions",
    )
    .await;
    let error = ask(&openai(&base(&server)), &Kept::default()).await.err();
    assert!(matches!(error, Some(ModelError::Auth { status: 401, .. })), "{error:?}");
}

/// A stream cut by the connection after some text is a connection failure: the call is tried again,
/// and the deltas are told to reset first, then get the new attempt's text.
#[tokio::test]
async fn a_stream_cut_after_deltas_resets_them_and_is_retried() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let whole = sse(&openai_turn(), true);
    let first = sse(&openai_turn()[..2], false);
    tokio::spawn(async move {
        for attempt in 0..2 {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let mut request = vec![0u8; 65536];
            let mut read = 0;
            // Read the request head and its body (Content-Length) before answering.
            loop {
                let Ok(n) = socket.read(&mut request[read..]).await else { return };
                read += n;
                if tollgate_agent_testkit::http_message_len(&request[..read]).is_some() {
                    break;
                }
                if n == 0 {
                    return;
                }
            }
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
            let body = if attempt == 0 { &first } else { &whole };
            let chunk = format!("{:x}\r\n{body}\r\n", body.len());
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(chunk.as_bytes()).await;
            if attempt == 1 {
                let _ = socket.write_all(b"0\r\n\r\n").await;
            }
            // The first answer stops mid-body: the connection closes without the last chunk.
            let _ = socket.flush().await;
            drop(socket);
        }
    });
    let kept = Kept::default();
    let response = ask(&openai(&format!("http://{addr}/v1")), &kept).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response.text.as_deref(), Some("Saving it."));
    assert_eq!(kept.pieces(), ["Saving ", "<reset>", "Saving ", "it."]);
}
