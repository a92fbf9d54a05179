//! What the provider tests share: fast settings, the tool set of the resume scenarios, wire-format
//! answers, the "every call answered exactly once, in order" checks, and a tracing capture.

// Each test file uses part of this module.
#![allow(dead_code)]

use serde_json::{Value, json};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tollgate_agent_core::ModelClient;
use tollgate_agent_core::{Gate, LoopConfig, ToolLoop, ToolRegistry, ToolSpec};
use tollgate_agent_providers::{AnthropicModel, ApiKey, OpenAiModel, ProviderSettings};
use tollgate_agent_testkit::TestTool;
use wiremock::{Request, ResponseTemplate};

/// The key the tests configure; no log line, error or event may contain it.
pub(crate) const API_KEY: &str = "sk-tollgate-test-7f3a9c1e5b2d4086";

/// Settings that keep tests fast: short backoff, a short timeout, two retries; plain (not streamed)
/// answers, as the wire-format tests expect (`streaming.rs` turns streaming on).
pub(crate) fn settings(base_url: &str) -> ProviderSettings {
    ProviderSettings {
        base_url: Some(base_url.to_owned()),
        api_key: Some(ApiKey::new(API_KEY)),
        timeout: Duration::from_secs(5),
        max_retries: 2,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(20),
        max_output_tokens: 1024,
        stream: false,
    }
}

/// Two tools offered in the single-request tests.
pub(crate) fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "fs_read".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        },
        ToolSpec {
            name: "fs_write".into(),
            description: "Write a file".into(),
            parameters: json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            }),
        },
    ]
}

/// The tools of the resume scenarios: four that ask, one that is allowed.
pub(crate) struct Tools {
    pub fs_write: TestTool,
    pub fs_delete: TestTool,
    pub shell: TestTool,
    pub http_request: TestTool,
    pub fs_read: TestTool,
}

impl Tools {
    pub(crate) fn new() -> Self {
        let asks = |name: &str| TestTool::new(name).gate(Gate::Ask);
        Self {
            fs_write: asks("fs_write"),
            fs_delete: asks("fs_delete"),
            shell: asks("shell"),
            http_request: asks("http_request"),
            fs_read: TestTool::new("fs_read"),
        }
    }

    pub(crate) fn registry(&self) -> anyhow::Result<Arc<ToolRegistry>> {
        let mut registry = ToolRegistry::new();
        for tool in [&self.fs_write, &self.fs_delete, &self.shell, &self.http_request, &self.fs_read] {
            registry.register(tool.shared())?;
        }
        Ok(Arc::new(registry))
    }
}

/// The two HTTP adapters, for the scenarios run through each.
#[derive(Clone, Copy)]
pub(crate) enum Provider {
    OpenAi,
    Anthropic,
}

impl Provider {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
        }
    }

    /// The path its requests go to on the mock server.
    pub(crate) fn path(self) -> &'static str {
        match self {
            Provider::OpenAi => "/v1/chat/completions",
            Provider::Anthropic => "/v1/messages",
        }
    }

    /// The adapter, pointed at `server`.
    pub(crate) fn model(self, server: &wiremock::MockServer) -> anyhow::Result<Arc<dyn ModelClient>> {
        Ok(match self {
            Provider::OpenAi => Arc::new(OpenAiModel::new(settings(&format!("{}/v1", server.uri())))?),
            Provider::Anthropic => Arc::new(AnthropicModel::new(settings(&server.uri()))?),
        })
    }
}

/// A loop over `model` with the scenario tools.
pub(crate) fn tool_loop(
    model: Arc<dyn tollgate_agent_core::ModelClient>,
    tools: &Tools,
    name: &str,
) -> anyhow::Result<ToolLoop> {
    let config =
        LoopConfig { model: name.to_owned(), system_prompt: Some("You are careful.".into()), ..LoopConfig::default() };
    Ok(ToolLoop::new(model, tools.registry()?, config))
}

/// A Chat Completions answer with one choice.
pub(crate) fn openai_answer(message: Value, finish_reason: &str) -> Value {
    json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
    })
}

/// One entry of a Chat Completions `tool_calls` array.
pub(crate) fn openai_call(id: &str, name: &str, arguments: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

/// A Chat Completions answer carrying these calls.
pub(crate) fn openai_calls(calls: Vec<Value>) -> Value {
    openai_answer(json!({"role": "assistant", "content": null, "tool_calls": calls, "refusal": null}), "tool_calls")
}

/// A Chat Completions text answer.
pub(crate) fn openai_text(text: &str) -> Value {
    openai_answer(json!({"role": "assistant", "content": text, "refusal": null}), "stop")
}

/// A Messages answer.
pub(crate) fn anthropic_answer(content: Vec<Value>, stop_reason: &str) -> Value {
    json!({
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": {"input_tokens": 200, "output_tokens": 40},
    })
}

/// A `tool_use` block.
pub(crate) fn anthropic_call(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input})
}

/// A `text` block.
pub(crate) fn anthropic_text(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// A responder that answers the Nth request with `turns[N]`, where N is the number of assistant messages
/// in the request body (both wire formats name the role `assistant`), so it follows the run statelessly.
pub(crate) fn by_turn(turns: Vec<Value>) -> impl Fn(&Request) -> ResponseTemplate + Send + Sync {
    move |request: &Request| {
        let body: Value = request.body_json().unwrap_or_default();
        let done =
            body["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == json!("assistant")).count());
        match turns.get(done) {
            Some(turn) => ResponseTemplate::new(200).set_body_json(turn),
            None => ResponseTemplate::new(500).set_body_string("the test script has no turn for this request"),
        }
    }
}

/// The JSON bodies the mock server received, in order.
pub(crate) async fn bodies(server: &wiremock::MockServer) -> anyhow::Result<Vec<Value>> {
    let requests = server.received_requests().await.ok_or_else(|| anyhow::anyhow!("request recording is off"))?;
    requests.iter().map(|r| Ok(r.body_json::<Value>()?)).collect()
}

/// Chat Completions: every `tool_calls` entry is answered by exactly one `tool` message, in call order,
/// right after its assistant message, and no other `tool` message appears.
pub(crate) fn check_openai_calls_answered(body: &Value) -> Result<(), String> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let mut i = 0;
    while i < messages.len() {
        let message = &messages[i];
        i += 1;
        let Some(calls) = message["tool_calls"].as_array() else {
            if message["role"] == json!("tool") {
                return Err(format!("a tool message answers no call: {message}"));
            }
            continue;
        };
        for call in calls {
            let answer = messages.get(i).unwrap_or(&Value::Null);
            if answer["role"] != json!("tool") || answer["tool_call_id"] != call["id"] {
                return Err(format!("call {} is not answered in place; found {answer}", call["id"]));
            }
            i += 1;
        }
    }
    Ok(())
}

/// Panics unless [`check_openai_calls_answered`] passes.
pub(crate) fn assert_openai_calls_answered(body: &Value) {
    if let Err(problem) = check_openai_calls_answered(body) {
        panic!("{problem}");
    }
}

/// Messages: roles alternate, and the `tool_use` blocks of each assistant message are answered by exactly
/// one `tool_result` block each, in call order, at the start of the user message that follows; no
/// `tool_result` answers anything else.
pub(crate) fn check_anthropic_calls_answered(body: &Value) -> Result<(), String> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if messages.windows(2).any(|pair| pair[0]["role"] == pair[1]["role"]) {
        return Err("roles must alternate".into());
    }
    let blocks = |m: &Value| m["content"].as_array().cloned().unwrap_or_default();
    let ids = |m: &Value, kind: &str, key: &str| -> Vec<Value> {
        blocks(m).iter().filter(|b| b["type"] == json!(kind)).map(|b| b[key].clone()).collect()
    };
    for (index, message) in messages.iter().enumerate() {
        let answered = ids(message, "tool_result", "tool_use_id");
        if message["role"] == json!("assistant") {
            if !answered.is_empty() {
                return Err("an assistant message carries tool_result blocks".into());
            }
            let used = ids(message, "tool_use", "id");
            let next = messages.get(index + 1).map(|m| ids(m, "tool_result", "tool_use_id")).unwrap_or_default();
            if used != next {
                return Err(format!("tool_use {used:?} answered by {next:?}"));
            }
        } else {
            let previous_uses = index.checked_sub(1).map(|p| ids(&messages[p], "tool_use", "id")).unwrap_or_default();
            if answered != previous_uses {
                return Err(format!("tool_result {answered:?} does not answer the previous turn {previous_uses:?}"));
            }
            if blocks(message).iter().take(answered.len()).any(|b| b["type"] != json!("tool_result")) {
                return Err("tool_result blocks must come first".into());
            }
        }
    }
    Ok(())
}

/// Panics unless [`check_anthropic_calls_answered`] passes.
pub(crate) fn assert_anthropic_calls_answered(body: &Value) {
    if let Err(problem) = check_anthropic_calls_answered(body) {
        panic!("{problem}");
    }
}

/// Everything tracing writes on this thread while installed, as text.
///
/// One process-wide subscriber (installed once) writes each record into the buffer of the thread that
/// emitted it: a scoped (`set_default`) subscriber per test raced with the other tests of this binary
/// over tracing's per-callsite interest cache, and a record was sometimes lost.
#[derive(Clone, Default)]
pub(crate) struct LogCapture {
    buffer: Arc<Mutex<Vec<u8>>>,
}

thread_local! {
    static CAPTURE: std::cell::RefCell<Option<Arc<Mutex<Vec<u8>>>>> = const { std::cell::RefCell::new(None) };
}

struct ThreadWriter;

impl std::io::Write for ThreadWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|capture| {
            if let Some(buffer) = capture.borrow().as_ref() {
                buffer.lock().unwrap_or_else(PoisonError::into_inner).extend_from_slice(bytes);
            }
        });
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Stops capturing on this thread when dropped.
pub(crate) struct CaptureGuard;

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        CAPTURE.with(|capture| capture.borrow_mut().take());
    }
}

impl LogCapture {
    /// Captures this thread's records, at the most verbose level, until the guard drops.
    pub(crate) fn install(&self) -> CaptureGuard {
        static GLOBAL: std::sync::Once = std::sync::Once::new();
        GLOBAL.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_writer(|| ThreadWriter)
                .with_max_level(tracing::Level::TRACE)
                .with_ansi(false)
                .finish();
            let _ = tracing::subscriber::set_global_default(subscriber);
        });
        CAPTURE.with(|capture| *capture.borrow_mut() = Some(self.buffer.clone()));
        CaptureGuard
    }

    /// What was written so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.buffer.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }
}

/// Hooks that keep the full `Debug` text of every loop event, the raw material of a run's event log.
#[derive(Clone, Default)]
pub(crate) struct DebugHooks {
    events: Arc<Mutex<Vec<String>>>,
}

impl DebugHooks {
    /// Every event so far.
    pub(crate) fn events(&self) -> Vec<String> {
        self.events.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl tollgate_agent_core::LoopHooks for DebugHooks {
    fn on_event<'a>(
        &'a self,
        event: tollgate_agent_core::LoopEvent<'a>,
    ) -> tollgate_agent_core::BoxFuture<'a, Result<(), tollgate_agent_core::HookError>> {
        self.events.lock().unwrap_or_else(PoisonError::into_inner).push(format!("{event:?}"));
        Box::pin(std::future::ready(Ok(())))
    }
}
