//! The fuzz targets' entry points (`fuzz/`, targets `openai_response`, `anthropic_response`,
//! `openai_stream` and `anthropic_stream`), shared with the tests that replay their corpora
//! (`tests/all/fuzz_corpus.rs`). Not part of the API.
//!
//! Each check feeds a body, byte for byte as it could come off the wire, to the adapter's real reading
//! path — [`crate::OpenAiModel`] / [`crate::AnthropicModel`] with an API key, as a 2xx answer and as each
//! kind of failure status — and checks the promises made on what comes out: a value or a typed error,
//! never a panic; an answer with text or calls, never an empty success; call ids non-empty and unique in
//! the whole transcript; arguments an object unless marked malformed; and no error that quotes the key or
//! runs on without bound. A streamed body (an event stream, `stream = true`) is read the same way by the
//! stream checks, which also check that the live text sent to the deltas is the response's text.

#[cfg(feature = "anthropic")]
use crate::AnthropicModel;
#[cfg(feature = "openai")]
use crate::OpenAiModel;
use crate::{ApiKey, ProviderSettings};
use serde_json::json;
use std::collections::HashSet;
use std::sync::OnceLock;
use tollgate_agent_core::{CallId, Message, ModelDelta, ModelDeltas, ModelError, ModelResponse, ToolCall};

/// The API key the checks' adapters hold; an error that contains it breaks the redaction promise.
pub const FUZZ_API_KEY: &str = "sk-fuzz-0123456789abcdef";

/// The statuses each body is read under: success, then each failure class the adapters tell apart.
const STATUSES: [u16; 9] = [200, 204, 302, 400, 401, 404, 413, 429, 529];

/// The longest error text a check accepts: the provider's message is cut to
/// [`crate::http::MAX_MESSAGE_BYTES`], and our own wording around it is short.
const MAX_ERROR_BYTES: usize = crate::http::MAX_MESSAGE_BYTES + 400;

/// Reads `body` as the OpenAI-compatible adapter would and checks the promises; `Err` says which broke.
#[cfg(feature = "openai")]
pub fn check_openai_response(body: &[u8]) -> Result<(), String> {
    static MODEL: OnceLock<Result<OpenAiModel, String>> = OnceLock::new();
    let model = MODEL.get_or_init(|| OpenAiModel::new(settings("http://127.0.0.1:9/v1")).map_err(|e| e.to_string()));
    let model = model.as_ref().map_err(Clone::clone)?;
    check_answers(body, |status, body, transcript| model.read_answer(status, body, transcript))
}

/// Reads `body` as the Anthropic adapter would and checks the promises; `Err` says which broke.
#[cfg(feature = "anthropic")]
pub fn check_anthropic_response(body: &[u8]) -> Result<(), String> {
    static MODEL: OnceLock<Result<AnthropicModel, String>> = OnceLock::new();
    let model = MODEL.get_or_init(|| AnthropicModel::new(settings("http://127.0.0.1:9")).map_err(|e| e.to_string()));
    let model = model.as_ref().map_err(Clone::clone)?;
    check_answers(body, |status, body, transcript| model.read_answer(status, body, transcript))
}

/// Reads `body` as the OpenAI-compatible adapter reads a streamed answer and checks the promises.
#[cfg(feature = "openai")]
pub fn check_openai_stream(body: &[u8]) -> Result<(), String> {
    static MODEL: OnceLock<Result<OpenAiModel, String>> = OnceLock::new();
    let model = MODEL.get_or_init(|| OpenAiModel::new(settings("http://127.0.0.1:9/v1")).map_err(|e| e.to_string()));
    let model = model.as_ref().map_err(Clone::clone)?;
    check_stream(body, |body, transcript, deltas| model.read_stream(body, transcript, deltas))
}

/// Reads `body` as the Anthropic adapter reads a streamed answer and checks the promises.
#[cfg(feature = "anthropic")]
pub fn check_anthropic_stream(body: &[u8]) -> Result<(), String> {
    static MODEL: OnceLock<Result<AnthropicModel, String>> = OnceLock::new();
    let model = MODEL.get_or_init(|| AnthropicModel::new(settings("http://127.0.0.1:9")).map_err(|e| e.to_string()));
    let model = model.as_ref().map_err(Clone::clone)?;
    check_stream(body, |body, transcript, deltas| model.read_stream(body, transcript, deltas))
}

/// The live text a stream sent.
#[derive(Default)]
struct LiveText(std::sync::Mutex<String>);

impl ModelDeltas for LiveText {
    fn delta(&self, delta: ModelDelta<'_>) {
        let mut text = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match delta {
            ModelDelta::Text(piece) => text.push_str(piece),
            ModelDelta::Reset => text.clear(),
        }
    }
}

fn check_stream(
    body: &[u8],
    read: impl Fn(&[u8], &[Message], &dyn ModelDeltas) -> Result<ModelResponse, ModelError>,
) -> Result<(), String> {
    let transcript = transcript();
    let live = LiveText::default();
    match read(body, &transcript, &live) {
        Ok(response) => {
            check_response(&response, &transcript)?;
            let live = live.0.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
            if live != response.text.clone().unwrap_or_default() {
                return Err(format!("the live text {live:?} is not the response's text {:?}", response.text));
            }
            Ok(())
        }
        Err(error) => check_error(&error, 200),
    }
}

fn settings(base_url: &str) -> ProviderSettings {
    ProviderSettings {
        base_url: Some(base_url.to_owned()),
        api_key: Some(ApiKey::new(FUZZ_API_KEY)),
        ..ProviderSettings::default()
    }
}

/// A transcript whose earlier turn already used the ids a provider likes to repeat.
fn transcript() -> Vec<Message> {
    vec![
        Message::system("be brief"),
        Message::user("hi"),
        Message::Assistant {
            content: None,
            tool_calls: vec![
                ToolCall::new("call_1", "fs_read", json!({})),
                ToolCall::new("toolu_01", "fs_read", json!({})),
                ToolCall::new("call_abc", "fs_read", json!({})),
            ],
        },
    ]
}

fn check_answers(
    body: &[u8],
    read: impl Fn(u16, &[u8], &[Message]) -> Result<ModelResponse, ModelError>,
) -> Result<(), String> {
    let transcript = transcript();
    for status in STATUSES {
        match read(status, body, &transcript) {
            Ok(response) if (200..300).contains(&status) => check_response(&response, &transcript)?,
            Ok(_) => return Err(format!("HTTP {status} was read as a response")),
            Err(error) => check_error(&error, status)?,
        }
    }
    Ok(())
}

fn check_response(response: &ModelResponse, transcript: &[Message]) -> Result<(), String> {
    if response.text.as_deref() == Some("") {
        return Err("the response has empty text instead of none".into());
    }
    if response.text.is_none() && response.tool_calls.is_empty() {
        return Err("the response has neither text nor tool calls".into());
    }
    let mut ids: HashSet<&CallId> = transcript
        .iter()
        .flat_map(|m| match m {
            Message::Assistant { tool_calls, .. } => tool_calls.iter().map(|c| &c.call_id).collect(),
            _ => Vec::new(),
        })
        .collect();
    for call in &response.tool_calls {
        if call.call_id.is_empty() || !ids.insert(&call.call_id) {
            return Err(format!("call id `{}` is empty or already used", call.call_id));
        }
        if call.malformed_arguments.is_none() && !call.arguments.is_object() {
            return Err(format!(
                "call `{}` has arguments that are not an object yet not marked malformed",
                call.call_id
            ));
        }
    }
    Ok(())
}

fn check_error(error: &ModelError, status: u16) -> Result<(), String> {
    let text = error.to_string();
    if text.contains(FUZZ_API_KEY) {
        return Err(format!("the error for HTTP {status} quotes the API key: {text}"));
    }
    if text.len() > MAX_ERROR_BYTES {
        return Err(format!("the error for HTTP {status} is {} bytes long", text.len()));
    }
    Ok(())
}
