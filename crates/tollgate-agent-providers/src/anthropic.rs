//! The Anthropic Messages adapter (`kind = "anthropic"`).
//!
//! Requests go to `POST {base_url}/v1/messages` with `x-api-key` and `anthropic-version: 2023-06-01`.
//! The system prompt is the top-level `system` field; an assistant turn is a list of `text` and `tool_use`
//! blocks; and the results of a turn's calls all go, as `tool_result` blocks in call order (`is_error` set
//! for denials, refusals and failures), into the one user message that follows it. The API wants user and
//! assistant messages to alternate, so consecutive messages of one role are merged into one.
//!
//! A result that carries images ([`tollgate_agent_core::image`]) has a list as its `content`: its text
//! block, then an `image` block (`source.type = "base64"`) per image. One request carries at most
//! [`MAX_REQUEST_IMAGES`] images and [`MAX_REQUEST_IMAGE_BYTES`] of their base64, the newest first;
//! older images are left out (a text block says how many), their description still in the result's
//! text, so a long run of screenshots never outgrows the API's request limit.

use crate::answer::{RawArguments, assign_call_ids, empty_answer, tool_call};
use crate::http::{Endpoint, FixedHeader, ProviderError, ProviderFailure, ProviderSettings};
use crate::stream::{Assembler, Flow, event_json};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::fmt;
use tollgate_agent_core::{
    BoxFuture, CallId, FinishReason, Message, ModelClient, ModelDelta, ModelDeltas, ModelError, ModelRequest,
    ModelResponse, NoDeltas, ToolResult, ToolSpec, Usage,
};

/// Anthropic's own endpoint, used when the settings name no `base_url`.
pub const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The API version this adapter speaks, sent as `anthropic-version`.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The most images one request carries: past 20 the API refuses images over 2000 pixels a side.
pub const MAX_REQUEST_IMAGES: usize = 20;

/// The most base64 text the images of one request may have in all (the API takes 32 MB a request).
pub const MAX_REQUEST_IMAGE_BYTES: usize = 16 * 1024 * 1024;

/// A model behind the Anthropic Messages API.
pub struct AnthropicModel {
    endpoint: Endpoint,
    max_output_tokens: u32,
}

impl fmt::Debug for AnthropicModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicModel")
            .field("endpoint", &self.endpoint)
            .field("max_output_tokens", &self.max_output_tokens)
            .finish()
    }
}

impl AnthropicModel {
    /// An adapter for the server the settings describe ([`ANTHROPIC_DEFAULT_BASE_URL`] when they name none).
    pub fn new(settings: ProviderSettings) -> Result<Self, ProviderError> {
        let mut headers =
            vec![FixedHeader { name: "anthropic-version", value: ANTHROPIC_VERSION.to_owned(), secret: false }];
        if let Some(key) = &settings.api_key {
            headers.push(FixedHeader { name: "x-api-key", value: key.expose().to_owned(), secret: true });
        }
        let endpoint = Endpoint::new(
            "anthropic",
            &settings,
            ANTHROPIC_DEFAULT_BASE_URL,
            "/v1/messages",
            headers,
            is_context_length,
        )?;
        Ok(Self { endpoint, max_output_tokens: settings.max_output_tokens })
    }

    /// The address requests go to.
    pub fn url(&self) -> &str {
        self.endpoint.url()
    }

    async fn call(&self, request: ModelRequest<'_>, deltas: &dyn ModelDeltas) -> Result<ModelResponse, ModelError> {
        let body = request_body(&request, self.max_output_tokens);
        let answer = self.endpoint.answer::<StreamedMessage>(request.model, body, deltas).await?;
        self.response(answer, request.messages)
    }

    /// Our response from the provider's JSON answer; anything an error quotes from it is redacted.
    fn response(&self, answer: Value, transcript: &[Message]) -> Result<ModelResponse, ModelError> {
        parse_response(answer, transcript).map_err(|e| self.endpoint.redact_error(e))
    }

    /// What a streamed call makes of a whole event-stream body (the entry point of the stream fuzz
    /// target, [`crate::fuzzing`]).
    pub(crate) fn read_stream(
        &self,
        body: &[u8],
        transcript: &[Message],
        deltas: &dyn ModelDeltas,
    ) -> Result<ModelResponse, ModelError> {
        let answer =
            crate::stream::assemble::<StreamedMessage>(body, deltas).map_err(|e| self.endpoint.redact_error(e))?;
        self.response(answer, transcript)
    }

    /// What [`ModelClient::complete`] makes of one HTTP answer, its status and body as received (the
    /// entry point of the fuzz targets, [`crate::fuzzing`]).
    pub(crate) fn read_answer(
        &self,
        status: u16,
        body: &[u8],
        transcript: &[Message],
    ) -> Result<ModelResponse, ModelError> {
        let answer = self.endpoint.read_answer(status, body, None)?;
        self.response(answer, transcript)
    }
}

impl ModelClient for AnthropicModel {
    fn system(&self) -> &str {
        "anthropic"
    }

    fn server(&self) -> Option<(&str, u16)> {
        Some(self.endpoint.server())
    }

    fn complete<'a>(&'a self, request: ModelRequest<'a>) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(self.call(request, &NoDeltas))
    }

    fn complete_streaming<'a>(
        &'a self,
        request: ModelRequest<'a>,
        deltas: &'a dyn ModelDeltas,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(self.call(request, deltas))
    }
}

/// The most content blocks one streamed message may have.
const MAX_STREAMED_BLOCKS: usize = 256;

/// A streamed message (`stream: true`), built back into the plain answer: `message_start` (its usage),
/// each `content_block_start` with its `content_block_delta`s (`text_delta` text, `input_json_delta`
/// pieces of a `tool_use` input, parsed when the message ends), `message_delta` (`stop_reason`, output
/// usage), up to `message_stop`. An `error` event ends the call with its error; `ping` and unknown
/// events are ignored.
#[derive(Default)]
struct StreamedMessage {
    started: bool,
    usage: Map<String, Value>,
    blocks: Vec<StreamedBlock>,
    stop_reason: Option<String>,
}

enum StreamedBlock {
    Text(String),
    ToolUse { id: Option<String>, name: String, input: String },
    Other(Value),
}

impl Assembler for StreamedMessage {
    fn ask_for_stream(body: &mut Map<String, Value>) {
        body.insert("stream".into(), Value::Bool(true));
    }

    fn event(&mut self, name: Option<&str>, data: &str, deltas: &dyn ModelDeltas) -> Result<Flow, ModelError> {
        let event = event_json(data)?;
        let kind = name.or_else(|| event.get("type").and_then(Value::as_str)).unwrap_or_default();
        match kind {
            "message_start" => {
                self.started = true;
                if let Some(Value::Object(usage)) = event.get("message").and_then(|m| m.get("usage")) {
                    self.usage.extend(usage.clone());
                }
            }
            "content_block_start" => {
                let index = event.get("index").and_then(Value::as_u64).and_then(|i| usize::try_from(i).ok());
                if index != Some(self.blocks.len()) || self.blocks.len() >= MAX_STREAMED_BLOCKS {
                    return Err(ModelError::InvalidResponse(format!(
                        "a streamed content block starts at index {index:?}, after {} blocks",
                        self.blocks.len()
                    )));
                }
                let block = event.get("content_block").cloned().unwrap_or(Value::Null);
                let text_of = |key: &str| block.get(key).and_then(Value::as_str).map(str::to_owned);
                self.blocks.push(match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        // The plain answer's text blocks are joined by a line break: so is the live text.
                        if self.blocks.iter().any(|b| matches!(b, StreamedBlock::Text(_))) {
                            deltas.delta(ModelDelta::Text("\n"));
                        }
                        let text = text_of("text").unwrap_or_default();
                        deltas.delta(ModelDelta::Text(&text));
                        StreamedBlock::Text(text)
                    }
                    Some("tool_use") => StreamedBlock::ToolUse {
                        id: text_of("id"),
                        name: text_of("name").unwrap_or_default(),
                        input: String::new(),
                    },
                    _ => StreamedBlock::Other(block),
                });
            }
            "content_block_delta" => {
                let index = event.get("index").and_then(Value::as_u64).and_then(|i| usize::try_from(i).ok());
                let delta = event.get("delta").cloned().unwrap_or(Value::Null);
                let piece = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or_default();
                match (index.and_then(|i| self.blocks.get_mut(i)), delta.get("type").and_then(Value::as_str)) {
                    (Some(StreamedBlock::Text(text)), Some("text_delta")) => {
                        deltas.delta(ModelDelta::Text(piece("text")));
                        text.push_str(piece("text"));
                    }
                    (Some(StreamedBlock::ToolUse { input, .. }), Some("input_json_delta")) => {
                        input.push_str(piece("partial_json"));
                    }
                    (Some(_), _) => {}
                    (None, _) => {
                        return Err(ModelError::InvalidResponse(format!(
                            "a streamed delta names content block {index:?}, which has not started"
                        )));
                    }
                }
            }
            "message_delta" => {
                if let Some(reason) = event.get("delta").and_then(|d| d.get("stop_reason")).and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(Value::Object(usage)) = event.get("usage") {
                    self.usage.extend(usage.clone());
                }
            }
            "message_stop" => return Ok(Flow::Done),
            "error" => return Err(stream_error(event.get("error").unwrap_or(&event))),
            // `ping`, `content_block_stop` and events added later.
            _ => {}
        }
        Ok(Flow::More)
    }

    fn finish(self) -> Result<Value, ModelError> {
        if !self.started {
            return Err(ModelError::InvalidResponse("the stream has no message_start".into()));
        }
        let mut content = Vec::with_capacity(self.blocks.len());
        for (index, block) in self.blocks.into_iter().enumerate() {
            content.push(match block {
                StreamedBlock::Text(text) => json!({"type": "text", "text": text}),
                StreamedBlock::ToolUse { id, name, input } => {
                    let input: Value = if input.trim().is_empty() {
                        json!({})
                    } else {
                        serde_json::from_str(&input).map_err(|_| {
                            ModelError::InvalidResponse(format!(
                                "the streamed input of content block {} is not JSON",
                                index + 1
                            ))
                        })?
                    };
                    json!({"type": "tool_use", "id": id, "name": name, "input": input})
                }
                StreamedBlock::Other(block) => block,
            });
        }
        Ok(json!({
            "type": "message",
            "content": content,
            "stop_reason": self.stop_reason,
            "usage": self.usage,
        }))
    }
}

/// An `error` event of a stream: overloaded and internal errors are server failures (retried), rate
/// limits are rate limits, anything else an invalid response naming the provider's message.
fn stream_error(error: &Value) -> ModelError {
    let message = error.get("message").and_then(Value::as_str).unwrap_or("no message").to_owned();
    match error.get("type").and_then(Value::as_str) {
        Some("overloaded_error") => ModelError::Server { status: 529, message },
        Some("api_error") => ModelError::Server { status: 500, message },
        Some("rate_limit_error") => ModelError::RateLimited { message, retry_after: None },
        _ => ModelError::InvalidResponse(format!("the provider answered with an error: {message}")),
    }
}

/// Anthropic answers an over-long transcript with HTTP 400 `prompt is too long: N tokens > M maximum`.
fn is_context_length(failure: &ProviderFailure) -> bool {
    let message = failure.message.to_lowercase();
    failure.status == 400
        && ["prompt is too long", "exceed context limit", "context window"].iter().any(|p| message.contains(p))
}

/// The messages of a request, merged so that roles alternate.
struct Conversation {
    messages: Vec<(&'static str, Vec<Value>)>,
}

impl Conversation {
    fn push(&mut self, role: &'static str, blocks: Vec<Value>) {
        if blocks.is_empty() {
            return;
        }
        match self.messages.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => self.messages.push((role, blocks)),
        }
    }
}

/// The JSON body for one request.
pub(crate) fn request_body(request: &ModelRequest<'_>, max_output_tokens: u32) -> Value {
    let mut system: Vec<&str> = Vec::new();
    let mut conversation = Conversation { messages: Vec::new() };
    let mut called_tools: Vec<&str> = Vec::new();
    let first_sent = first_sent_image(request.messages);
    for (index, message) in request.messages.iter().enumerate() {
        match message {
            Message::System { content } => system.push(content),
            Message::User { content } => conversation.push("user", text_block(content).into_iter().collect()),
            Message::Assistant { content, tool_calls } => {
                let mut blocks: Vec<Value> = content.as_deref().and_then(text_block).into_iter().collect();
                for call in tool_calls {
                    if !called_tools.contains(&call.name.as_str()) {
                        called_tools.push(&call.name);
                    }
                    // The API takes only an object as `input`; a call whose arguments were not one was
                    // answered with an error result explaining that, so an empty object loses nothing.
                    let input = if call.arguments.is_object() && call.malformed_arguments.is_none() {
                        call.arguments.clone()
                    } else {
                        Value::Object(Map::new())
                    };
                    blocks.push(json!({"type": "tool_use", "id": call.call_id, "name": call.name, "input": input}));
                }
                conversation.push("assistant", blocks);
            }
            Message::Tool(result) => {
                let content = if result.images.is_empty() {
                    json!(result.content)
                } else {
                    let sent = |image: usize| (index, image) >= first_sent;
                    result_blocks(result, sent)
                };
                let mut block = json!({"type": "tool_result", "tool_use_id": result.call_id, "content": content});
                if result.is_error {
                    block["is_error"] = Value::Bool(true);
                }
                conversation.push("user", vec![block]);
            }
        }
    }

    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("max_tokens".into(), json!(max_output_tokens));
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    let messages: Vec<Value> =
        conversation.messages.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect();
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        body.insert("tools".into(), Value::Array(request.tools.iter().map(wire_tool).collect()));
    } else if !called_tools.is_empty() {
        // The API refuses `tool_use` blocks in a request that defines no tools. The closing completion at
        // the iteration cap offers none, so the tools already called are declared and none may be used.
        let declared = called_tools
            .iter()
            .map(|name| {
                json!({
                    "name": name,
                    "description": "Not available in this request.",
                    "input_schema": {"type": "object"},
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(declared));
        body.insert("tool_choice".into(), json!({"type": "none"}));
    }
    Value::Object(body)
}

/// Where the images a request carries start, as (message index, image index): every image at or after it
/// is sent, newest first until [`MAX_REQUEST_IMAGES`] or [`MAX_REQUEST_IMAGE_BYTES`] is reached.
fn first_sent_image(messages: &[Message]) -> (usize, usize) {
    let mut first = (messages.len(), 0);
    let (mut count, mut bytes) = (0, 0);
    for (index, message) in messages.iter().enumerate().rev() {
        let Message::Tool(result) = message else { continue };
        for (image_index, image) in result.images.iter().enumerate().rev() {
            let len = image.base64().len();
            if count == MAX_REQUEST_IMAGES || bytes + len > MAX_REQUEST_IMAGE_BYTES {
                return first;
            }
            count += 1;
            bytes += len;
            first = (index, image_index);
        }
    }
    first
}

/// A result's content as blocks: its text, an `image` block per image `sent` admits, and a line for
/// those it left out.
fn result_blocks(result: &ToolResult, sent: impl Fn(usize) -> bool) -> Value {
    let mut blocks: Vec<Value> = text_block(&result.content).into_iter().collect();
    let mut left_out = 0;
    for (index, image) in result.images.iter().enumerate() {
        if !sent(index) {
            left_out += 1;
            continue;
        }
        blocks.push(json!({
            "type": "image",
            "source": {"type": "base64", "media_type": image.media_type(), "data": image.base64()},
        }));
    }
    if left_out > 0 {
        let images = if left_out == 1 { "1 image" } else { &format!("{left_out} images") };
        blocks.push(json!({"type": "text", "text": format!(
            "[{images} of this result not attached: a request carries at most the newest {MAX_REQUEST_IMAGES} \
             images, 16 MB of them]"
        )}));
    }
    Value::Array(blocks)
}

/// The API rejects empty text blocks, so empty text is left out.
fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

fn wire_tool(tool: &ToolSpec) -> Value {
    json!({"name": tool.name, "description": tool.description, "input_schema": tool.parameters})
}

#[derive(Deserialize)]
struct MessagesResponse {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    content: Option<Vec<Block>>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    ToolUse {
        #[serde(default)]
        id: Option<CallId>,
        name: String,
        #[serde(default)]
        input: Value,
    },
    /// Thinking and server-side blocks carry nothing the loop uses.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

/// Reads a Messages answer into our response.
pub(crate) fn parse_response(answer: Value, transcript: &[Message]) -> Result<ModelResponse, ModelError> {
    let response: MessagesResponse = serde_json::from_value(answer)
        .map_err(|e| ModelError::InvalidResponse(format!("not a Messages response: {e}")))?;
    if response.kind.as_deref() == Some("error") {
        let message = response
            .error
            .as_ref()
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("no message")
            .to_owned();
        return Err(ModelError::InvalidResponse(format!("the provider answered with an error: {message}")));
    }
    let blocks = response.content.ok_or_else(|| ModelError::InvalidResponse("the answer has no content".into()))?;
    let mut texts: Vec<String> = Vec::new();
    let mut tool_calls = Vec::new();
    for block in blocks {
        match block {
            Block::Text { text } => texts.push(text),
            Block::ToolUse { id, name, input } => tool_calls.push(tool_call(id, name, RawArguments::Value(input))),
            Block::Other => {}
        }
    }
    assign_call_ids(&mut tool_calls, transcript);
    let text = Some(texts.join("\n")).filter(|t| !t.is_empty());
    let finish_reason = match response.stop_reason.as_deref() {
        Some("end_turn" | "stop_sequence") => FinishReason::Stop,
        Some("tool_use") => FinishReason::ToolCalls,
        Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
        Some("refusal") => {
            return Err(ModelError::Refusal(
                text.unwrap_or_else(|| "the model declined to answer (stop_reason `refusal`)".into()),
            ));
        }
        Some(other) => {
            tracing::warn!(provider = "anthropic", stop_reason = other, "unknown stop reason");
            FinishReason::Other(other.to_owned())
        }
        None if tool_calls.is_empty() => FinishReason::Stop,
        None => FinishReason::ToolCalls,
    };
    if text.is_none() && tool_calls.is_empty() {
        return Err(empty_answer(&finish_reason));
    }
    let usage = response.usage.map_or_else(Usage::default, |u| Usage {
        // Cached prompt tokens are prompt tokens too; the budget counts them.
        input_tokens: u
            .input_tokens
            .unwrap_or_default()
            .saturating_add(u.cache_creation_input_tokens.unwrap_or_default())
            .saturating_add(u.cache_read_input_tokens.unwrap_or_default()),
        output_tokens: u.output_tokens.unwrap_or_default(),
    });
    Ok(ModelResponse { text, tool_calls, usage, finish_reason })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_agent_core::image::MAX_IMAGE_BASE64_BYTES;
    use tollgate_agent_core::{ToolCall, ToolImage};

    fn result(call_id: &str, content: &str, is_error: bool) -> Message {
        Message::Tool(ToolResult {
            call_id: call_id.into(),
            tool: "t".into(),
            content: content.into(),
            is_error,
            denied: false,
            images: Vec::new(),
        })
    }

    #[test]
    fn results_share_one_user_message_and_same_roles_merge() {
        let messages = [
            Message::system("be brief"),
            Message::user("hi"),
            Message::user("and more"),
            Message::Assistant {
                content: Some("calling".into()),
                tool_calls: vec![ToolCall::new("a", "t", json!({"x": 1})), ToolCall::new("b", "t", json!({}))],
            },
            result("a", "one", false),
            result("b", "two", true),
        ];
        let body = request_body(&ModelRequest { model: "m", messages: &messages, tools: &[] }, 100);
        assert_eq!(body["system"], json!("be brief"));
        assert_eq!(body["max_tokens"], json!(100));
        let sent = body["messages"].as_array().map(Vec::len);
        assert_eq!(sent, Some(3));
        assert_eq!(body["messages"][0]["content"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            body["messages"][2],
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "one"},
                {"type": "tool_result", "tool_use_id": "b", "content": "two", "is_error": true},
            ]})
        );
        // No tools offered (the closing completion) yet tool_use in the history: declared, none usable.
        assert_eq!(body["tool_choice"], json!({"type": "none"}));
        assert_eq!(body["tools"][0]["name"], json!("t"));
    }

    /// A PNG of `9 + 3 * groups` bytes (its signature, then zeros), in base64.
    fn png(groups: usize) -> ToolImage {
        let base64 = format!("iVBORw0KGgoA{}", "AAAA".repeat(groups));
        ToolImage::new("image/png", base64).unwrap_or_else(|e| panic!("{e}"))
    }

    fn with_images(call_id: &str, content: &str, images: Vec<ToolImage>) -> Message {
        let Message::Tool(mut result) = result(call_id, content, false) else { unreachable!("a tool result") };
        result.images = images;
        Message::Tool(result)
    }

    fn calls(ids: &[&str]) -> Message {
        Message::Assistant {
            content: None,
            tool_calls: ids.iter().map(|id| ToolCall::new(*id, "t", json!({}))).collect(),
        }
    }

    #[test]
    fn a_results_images_follow_its_text_as_image_blocks() {
        let messages = [
            Message::user("look"),
            calls(&["a", "b"]),
            with_images("a", "before\n[image: image/png, 12 bytes]\nafter", vec![png(1)]),
            with_images("b", "", vec![png(0)]),
        ];
        let body = request_body(&ModelRequest { model: "m", messages: &messages, tools: &[] }, 100);
        let image = |data: &str| json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}});
        assert_eq!(
            body["messages"][2]["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "a", "content": [
                    {"type": "text", "text": "before\n[image: image/png, 12 bytes]\nafter"},
                    image("iVBORw0KGgoAAAAA"),
                ]},
                // No empty text block: the API refuses them.
                {"type": "tool_result", "tool_use_id": "b", "content": [image("iVBORw0KGgoA")]},
            ])
        );
    }

    #[test]
    fn a_request_carries_the_newest_images_within_its_budget() {
        // 21 images over three results: the oldest one is left out, and its result says so.
        let mut messages = vec![Message::user("look"), calls(&["a", "b", "c"])];
        messages.push(with_images("a", "a", (0..7).map(png).collect()));
        messages.push(with_images("b", "b", (0..7).map(png).collect()));
        messages.push(with_images("c", "c", (0..7).map(png).collect()));
        let body = request_body(&ModelRequest { model: "m", messages: &messages, tools: &[] }, 100);
        let results = &body["messages"][2]["content"];
        let kinds = |result: &Value| -> Vec<String> {
            result["content"].as_array().map_or_else(Vec::new, |blocks| {
                blocks.iter().map(|b| b["type"].as_str().unwrap_or_default().to_owned()).collect()
            })
        };
        let sent: usize = (0..3).map(|i| kinds(&results[i]).iter().filter(|k| *k == "image").count()).sum();
        assert_eq!(sent, MAX_REQUEST_IMAGES);
        assert_eq!(kinds(&results[0]), ["text", "image", "image", "image", "image", "image", "image", "text"]);
        assert_eq!(
            results[0]["content"][1]["source"]["data"],
            json!("iVBORw0KGgoAAAAA"),
            "the first image is left out"
        );
        assert_eq!(
            results[0]["content"][7]["text"],
            json!(
                "[1 image of this result not attached: a request carries at most the newest 20 images, 16 MB of them]"
            )
        );

        // Four of the largest images: 20 MB of base64, so only the newest three go.
        let largest = (MAX_IMAGE_BASE64_BYTES - 12) / 4;
        let messages = [
            calls(&["a", "b"]),
            with_images("a", "a", vec![png(largest)]),
            with_images("b", "b", vec![png(largest); 3]),
        ];
        let body = request_body(&ModelRequest { model: "m", messages: &messages, tools: &[] }, 100);
        let results = &body["messages"][1]["content"];
        assert_eq!(kinds(&results[0]), ["text", "text"]);
        assert_eq!(kinds(&results[1]), ["text", "image", "image", "image"]);
    }

    #[test]
    fn stop_reasons_are_typed() {
        let answer = |reason: &str| {
            parse_response(
                json!({"type": "message", "content": [{"type": "text", "text": "x"}], "stop_reason": reason}),
                &[],
            )
        };
        assert_eq!(answer("end_turn").map(|r| r.finish_reason), Ok(FinishReason::Stop));
        assert_eq!(answer("stop_sequence").map(|r| r.finish_reason), Ok(FinishReason::Stop));
        assert_eq!(answer("max_tokens").map(|r| r.finish_reason), Ok(FinishReason::Length));
        assert_eq!(answer("pause_turn").map(|r| r.finish_reason), Ok(FinishReason::Other("pause_turn".into())));
        assert_eq!(answer("refusal"), Err(ModelError::Refusal("x".into())));
    }

    #[test]
    fn empty_or_odd_answers_are_typed_errors() {
        let parse = |v| parse_response(v, &[]);
        assert!(matches!(parse(json!({"type": "message"})), Err(ModelError::InvalidResponse(_))));
        assert!(matches!(
            parse(json!({"type": "message", "content": [], "stop_reason": "end_turn"})),
            Err(ModelError::InvalidResponse(_))
        ));
        assert!(matches!(
            parse(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
            Err(ModelError::InvalidResponse(m)) if m.contains("Overloaded")
        ));
        let thinking_only = json!({"type": "message", "content": [{"type": "thinking", "thinking": "..."}],
            "stop_reason": "max_tokens"});
        assert!(matches!(parse(thinking_only), Err(ModelError::InvalidResponse(m)) if m.contains("token limit")));
    }

    #[test]
    fn context_length_needs_a_400_and_the_words() {
        let failure = |status, message: &str| ProviderFailure { status, message: message.into(), code: None };
        assert!(is_context_length(&failure(400, "prompt is too long: 210000 tokens > 200000 maximum")));
        assert!(!is_context_length(&failure(400, "max_tokens: must be at least 1")));
        assert!(!is_context_length(&failure(404, "prompt is too long")));
    }
}
