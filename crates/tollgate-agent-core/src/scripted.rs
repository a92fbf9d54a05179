//! The scripted model: replays a JSON script of model turns (docs/configuration.md, "The scripted
//! provider's script"). Tollgate's own format, pure data and no I/O, so it lives in core: the loop's
//! tests, the benchmarks and the offline `demo` agent all use it (`tollgate-agent-providers` re-exports it and
//! adds reading a script from a file).
//!
//! It keeps no state. A run's Nth model call gets turn N, where N is counted from the assistant turns already
//! in the transcript it is sent, so a run suspended in one process resumes correctly in another. Call ids
//! are `call_1`, `call_2`, … per run, numbered from the calls already in the transcript.

use crate::{
    BoxFuture, FinishReason, Message, ModelClient, ModelDelta, ModelDeltas, ModelError, ModelRequest, ModelResponse,
    ToolCall, Usage,
};
use serde::Deserialize;
use serde_json::Value;

/// A script that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// The file could not be read.
    #[error("cannot read script {path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        message: String,
    },
    /// The text is not a valid script.
    #[error("invalid script: {0}")]
    Invalid(String),
}

/// The turns a [`ScriptedModel`] plays, one per model call: what a model would answer, written down, so a
/// run goes the same way every time with no provider (tests, demos, benchmarks). Read from JSON with
/// [`from_json`](Self::from_json) or [`from_value`](Self::from_value); unknown fields are errors.
///
/// ```json
/// {"turns": [
///   {"text": "Paying.", "tool_calls": [{"name": "pay", "arguments": {"to": "bob", "cents": 25000}}]},
///   {"text": "Paid Bob.", "when_denied": {"text": "Understood, I did not pay."}}
/// ]}
/// ```
///
/// - `turns`: the answers, in order. The run's Nth model call gets turn N, N counted from the assistant
///   turns in the transcript it is sent (so a run resumed in another process picks up where it was), and
///   a call past the last turn fails the run with an error saying so.
/// - A turn has `text` (what the model says; absent: nothing), `tool_calls` (each a `name` and its
///   `arguments`, a JSON object, `{}` when absent; ids are `call_1`, `call_2`, … per run), `usage`
///   (`input_tokens` and `output_tokens`; absent: estimated from the text, about four bytes a token)
///   and `stream_chunks` (N: the text is streamed to live viewers in N deltas of near equal length, as a
///   streaming provider sends it; 0 or 1 is one delta; absent: none).
/// - `when_denied` and `when_approved`: a whole turn to play instead when a person denied a call of the
///   previous turn, or when nobody did.
/// - In any string, `{{input}}` is the run's input, and `{{input_after:MARK}}` the part of the input
///   after its first `MARK` (all of it when `MARK` is not in it).
/// - A model offered no tools gets no tool calls (the closing call at the iteration limit).
///
/// ```
/// use tollgate_agent_core::scripted::Script;
///
/// let script = Script::from_json(r#"{"turns": [
///     {"tool_calls": [{"name": "save_note", "arguments": {"text": "{{input}}"}}]},
///     {"text": "Saved.", "when_denied": {"text": "Not saved."}}
/// ]}"#)?;
/// assert_eq!(script.len(), 2);
///
/// let typo = Script::from_json(r#"{"turns": [{"txt": "hello"}]}"#).map(|_| ()).map_err(|e| e.to_string());
/// assert!(typo.is_err_and(|e| e.starts_with("invalid script: unknown field `txt`")));
/// # Ok::<(), tollgate_agent_core::scripted::ScriptError>(())
/// ```
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    turns: Vec<Turn>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Turn {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ScriptedCall>,
    #[serde(default)]
    usage: Option<ScriptedUsage>,
    #[serde(default)]
    when_denied: Option<Box<Turn>>,
    #[serde(default)]
    when_approved: Option<Box<Turn>>,
    /// Streams the turn's text in this many deltas (of near equal length, split between characters)
    /// before answering; 0 or 1 sends it as one delta, absent sends none (as a provider that does not
    /// stream).
    #[serde(default)]
    stream_chunks: Option<u32>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedCall {
    name: String,
    #[serde(default = "empty_object")]
    arguments: Value,
}

#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedUsage {
    input_tokens: u64,
    output_tokens: u64,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

impl Script {
    /// Parses a script from JSON text.
    pub fn from_json(text: &str) -> Result<Self, ScriptError> {
        let script: Script = serde_json::from_str(text).map_err(|e| ScriptError::Invalid(e.to_string()))?;
        script.check()?;
        Ok(script)
    }

    /// Parses a script from a JSON value.
    pub fn from_value(value: Value) -> Result<Self, ScriptError> {
        let script: Script = serde_json::from_value(value).map_err(|e| ScriptError::Invalid(e.to_string()))?;
        script.check()?;
        Ok(script)
    }

    /// How many turns the script has.
    pub fn len(&self) -> usize {
        self.turns.len()
    }

    /// True for a script without turns.
    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }

    fn check(&self) -> Result<(), ScriptError> {
        for (i, turn) in self.turns.iter().enumerate() {
            for variant in
                [Some(turn), turn.when_denied.as_deref(), turn.when_approved.as_deref()].into_iter().flatten()
            {
                if let Some(call) = variant.tool_calls.iter().find(|c| !c.arguments.is_object()) {
                    return Err(ScriptError::Invalid(format!(
                        "turn {}: arguments of `{}` must be a JSON object",
                        i + 1,
                        call.name
                    )));
                }
            }
        }
        Ok(())
    }
}

/// The script the built-in `demo` agent replays: list the workspace and write the input to `note.txt` in
/// one turn (the write waits at the gate), then report what happened.
pub fn demo_script() -> Script {
    let turns = vec![
        Turn {
            text: Some("I'll look at the workspace and save your note.".into()),
            tool_calls: vec![
                ScriptedCall { name: "fs_list".into(), arguments: serde_json::json!({"path": "."}) },
                ScriptedCall {
                    name: "fs_write".into(),
                    arguments: serde_json::json!({"path": "note.txt", "content": "{{input}}"}),
                },
            ],
            ..Turn::default()
        },
        Turn {
            when_approved: Some(Box::new(Turn { text: Some("Saved note.txt.".into()), ..Turn::default() })),
            when_denied: Some(Box::new(Turn {
                text: Some("Understood — I did not write the note.".into()),
                ..Turn::default()
            })),
            ..Turn::default()
        },
    ];
    Script { turns }
}

/// A model that replays a [`Script`].
#[derive(Clone, Debug)]
pub struct ScriptedModel {
    script: Script,
}

impl ScriptedModel {
    /// A model replaying this script.
    pub fn new(script: Script) -> Self {
        Self { script }
    }

    /// The turn's response, and the deltas its text streams in (`None`: it does not stream).
    fn respond(&self, request: &ModelRequest<'_>) -> Result<(ModelResponse, Option<u32>), ModelError> {
        let messages = request.messages;
        let done_turns = messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).count();
        let turn = self.script.turns.get(done_turns).ok_or_else(|| {
            ModelError::Script(format!(
                "the script has {} turn(s) and model call {} has none left",
                self.script.turns.len(),
                done_turns + 1
            ))
        })?;
        let turn = choose_variant(turn, previous_turn_denied(messages));
        let input = messages.iter().find_map(|m| match m {
            Message::User { content } => Some(content.as_str()),
            _ => None,
        });
        let fill = |text: &str| match input {
            Some(input) if text.contains("{{input") => fill_input(text, input),
            _ => text.to_owned(),
        };
        let offered = !request.tools.is_empty();
        let mut next_id = calls_so_far(messages);
        let tool_calls: Vec<ToolCall> = if offered {
            turn.tool_calls
                .iter()
                .map(|call| {
                    next_id += 1;
                    ToolCall::new(format!("call_{next_id}"), call.name.clone(), fill_value(&call.arguments, &fill))
                })
                .collect()
        } else {
            Vec::new()
        };
        let text = turn.text.as_deref().map(fill);
        let usage = match turn.usage {
            Some(u) => Usage { input_tokens: u.input_tokens, output_tokens: u.output_tokens },
            None => estimate_usage(messages, text.as_deref(), &tool_calls),
        };
        let finish_reason = if tool_calls.is_empty() { FinishReason::Stop } else { FinishReason::ToolCalls };
        Ok((ModelResponse { text, tool_calls, usage, finish_reason }, turn.stream_chunks))
    }
}

impl ModelClient for ScriptedModel {
    fn system(&self) -> &str {
        "tollgate.scripted"
    }

    fn complete<'a>(&'a self, request: ModelRequest<'a>) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(std::future::ready(self.respond(&request).map(|(response, _)| response)))
    }

    fn complete_streaming<'a>(
        &'a self,
        request: ModelRequest<'a>,
        deltas: &'a dyn ModelDeltas,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        let answered = self.respond(&request).map(|(response, chunks)| {
            if let (Some(chunks), Some(text)) = (chunks, response.text.as_deref().filter(|t| !t.is_empty())) {
                for piece in split_in(text, chunks) {
                    deltas.delta(ModelDelta::Text(piece));
                }
            }
            response
        });
        Box::pin(std::future::ready(answered))
    }
}

/// `text` in `chunks` pieces of near equal length (at least one, none empty unless `text` is), split
/// between characters.
fn split_in(text: &str, chunks: u32) -> Vec<&str> {
    let chars: Vec<usize> = text.char_indices().map(|(at, _)| at).collect();
    let count = usize::try_from(chunks).unwrap_or(usize::MAX).clamp(1, chars.len().max(1));
    let mut pieces = Vec::with_capacity(count);
    let mut from = 0;
    for i in 1..=count {
        let to = if i == count { text.len() } else { chars[i * chars.len() / count] };
        pieces.push(&text[from..to]);
        from = to;
    }
    pieces
}

fn choose_variant(turn: &Turn, denied: bool) -> &Turn {
    let chosen = if denied { turn.when_denied.as_deref() } else { turn.when_approved.as_deref() };
    chosen.unwrap_or(turn)
}

/// Whether any result after the last assistant turn is a person's denial.
fn previous_turn_denied(messages: &[Message]) -> bool {
    messages
        .iter()
        .rev()
        .take_while(|m| !matches!(m, Message::Assistant { .. }))
        .any(|m| matches!(m, Message::Tool(result) if result.denied))
}

fn calls_so_far(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|m| match m {
            Message::Assistant { tool_calls, .. } => tool_calls.len(),
            _ => 0,
        })
        .sum()
}

/// `text` with `{{input}}` replaced by `input`, and `{{input_after:MARK}}` by the part of `input` after
/// its first `MARK` (all of it when `MARK` is not in it). Anything else is left as written.
fn fill_input(text: &str, input: &str) -> String {
    const AFTER: &str = "{{input_after:";
    let mut filled = String::with_capacity(text.len() + input.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{input") {
        filled.push_str(&rest[..start]);
        let tail = &rest[start..];
        if let Some(after) = tail.strip_prefix("{{input}}") {
            filled.push_str(input);
            rest = after;
        } else if let Some((mark, after)) = tail.strip_prefix(AFTER).and_then(|spec| spec.split_once("}}")) {
            filled.push_str(input.split_once(mark).map_or(input, |(_, part)| part));
            rest = after;
        } else {
            filled.push_str("{{input");
            rest = &tail["{{input".len()..];
        }
    }
    filled.push_str(rest);
    filled
}

fn fill_value(value: &Value, fill: &impl Fn(&str) -> String) -> Value {
    match value {
        Value::String(s) => Value::String(fill(s)),
        Value::Array(items) => Value::Array(items.iter().map(|v| fill_value(v, fill)).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), fill_value(v, fill))).collect()),
        other => other.clone(),
    }
}

/// A deterministic stand-in for a real tokenizer: one token per four bytes of text, at least one.
fn estimate_usage(messages: &[Message], text: Option<&str>, calls: &[ToolCall]) -> Usage {
    let input_bytes: usize = messages
        .iter()
        .map(|m| match m {
            Message::System { content } | Message::User { content } => content.len(),
            Message::Assistant { content, tool_calls } => {
                content.as_ref().map_or(0, String::len) + tool_calls.len() * 16
            }
            Message::Tool(result) => result.content.len(),
        })
        .sum();
    let output_bytes = text.map_or(0, str::len) + calls.len() * 16;
    Usage { input_tokens: (input_bytes / 4).max(1) as u64, output_tokens: (output_bytes / 4).max(1) as u64 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolResult;
    use serde_json::json;

    fn request(messages: &[Message]) -> ModelResponse {
        let tools = [crate::ToolSpec { name: "t".into(), description: String::new(), parameters: json!({}) }];
        ScriptedModel::new(demo_script())
            .respond(&ModelRequest { model: "", messages, tools: &tools })
            .map(|(response, _)| response)
            .unwrap_or_default()
    }

    #[test]
    fn first_turn_fills_input_and_numbers_calls() {
        let response = request(&[Message::user("hello")]);
        assert_eq!(response.tool_calls.len(), 2);
        assert_eq!(response.tool_calls[0].call_id, "call_1");
        assert_eq!(response.tool_calls[1].call_id, "call_2");
        assert_eq!(response.tool_calls[1].arguments, json!({"path": "note.txt", "content": "hello"}));
    }

    #[test]
    fn input_and_the_input_after_a_mark_are_filled_in() {
        let input = "Save a note saying hello 7";
        assert_eq!(fill_input("{{input}}", input), input);
        assert_eq!(fill_input("{{input_after:saying }}", input), "hello 7");
        assert_eq!(
            fill_input("<{{input_after:note }}|{{input}}>", input),
            "<saying hello 7|Save a note saying hello 7>"
        );
        assert_eq!(fill_input("{{input_after:absent}}", input), input, "a mark not in the input: all of it");
        assert_eq!(fill_input("{{input_after:hello 7}}", input), "");
        for kept in ["{{inputs}}", "{{input_after:unclosed", "{{input", "no template"] {
            assert_eq!(fill_input(kept, input), kept);
        }
    }

    #[test]
    fn second_turn_depends_on_denial() {
        let assistant = Message::Assistant { content: None, tool_calls: request(&[Message::user("x")]).tool_calls };
        let result = |denied| {
            Message::Tool(ToolResult {
                call_id: "call_2".into(),
                tool: "fs_write".into(),
                content: "...".into(),
                is_error: denied,
                denied,
                images: Vec::new(),
            })
        };
        let approved = request(&[Message::user("x"), assistant.clone(), result(false)]);
        assert_eq!(approved.text.as_deref(), Some("Saved note.txt."));
        let denied = request(&[Message::user("x"), assistant, result(true)]);
        assert_eq!(denied.text.as_deref(), Some("Understood — I did not write the note."));
    }

    #[test]
    fn running_out_is_a_clear_error() {
        let script = Script::from_json(r#"{"turns": [{"text": "only"}]}"#).unwrap_or_else(|e| panic!("{e}"));
        let messages = [Message::user("x"), Message::Assistant { content: Some("only".into()), tool_calls: vec![] }];
        let err = ScriptedModel::new(script).respond(&ModelRequest { model: "", messages: &messages, tools: &[] });
        assert_eq!(err, Err(ModelError::Script("the script has 1 turn(s) and model call 2 has none left".into())));
    }

    #[test]
    fn rejects_unknown_fields_and_non_object_arguments() {
        assert!(Script::from_json(r#"{"turns": [{"txt": "typo"}]}"#).is_err());
        assert!(Script::from_json(r#"{"turns": [{"tool_calls": [{"name": "a", "arguments": 3}]}]}"#).is_err());
        assert!(Script::from_json(r#"{"steps": []}"#).is_err());
    }
    /// Deltas that remember what they were sent.
    #[derive(Default)]
    struct Kept(std::sync::Mutex<Vec<String>>);

    impl ModelDeltas for Kept {
        fn delta(&self, delta: ModelDelta<'_>) {
            let kept = match delta {
                ModelDelta::Text(text) => text.to_owned(),
                ModelDelta::Reset => "<reset>".to_owned(),
            };
            self.0.lock().unwrap_or_else(|e| e.into_inner()).push(kept);
        }
    }

    fn streamed(script: Value) -> (Option<String>, Vec<String>) {
        let model = ScriptedModel::new(Script::from_value(script).unwrap_or_else(|e| panic!("{e}")));
        let messages = [Message::User { content: "héllo wörld".into() }];
        let kept = Kept::default();
        let request = ModelRequest { model: "", messages: &messages, tools: &[] };
        let response = futures_util::FutureExt::now_or_never(model.complete_streaming(request, &kept))
            .unwrap_or_else(|| panic!("the scripted model answers at once"))
            .unwrap_or_else(|e| panic!("{e}"));
        let pieces = kept.0.into_inner().unwrap_or_else(|e| e.into_inner());
        (response.text, pieces)
    }

    #[test]
    fn stream_chunks_streams_the_text_in_that_many_pieces() {
        let (text, pieces) = streamed(json!({"turns": [{"text": "said: {{input}}", "stream_chunks": 4}]}));
        assert_eq!(text.as_deref(), Some("said: héllo wörld"));
        assert_eq!(pieces.len(), 4, "{pieces:?}");
        assert!(pieces.iter().all(|p| !p.is_empty()), "{pieces:?}");
        assert_eq!(pieces.concat(), "said: héllo wörld");

        // More chunks than characters: one per character. Zero: one piece.
        let (_, pieces) = streamed(json!({"turns": [{"text": "abc", "stream_chunks": 10}]}));
        assert_eq!(pieces, ["a", "b", "c"]);
        let (_, pieces) = streamed(json!({"turns": [{"text": "abc", "stream_chunks": 0}]}));
        assert_eq!(pieces, ["abc"]);

        // Without it, or without text, nothing streams; the answer is the same.
        let (text, pieces) = streamed(json!({"turns": [{"text": "abc"}]}));
        assert_eq!((text.as_deref(), pieces.len()), (Some("abc"), 0));
        let (text, pieces) = streamed(json!({"turns": [{"text": "", "stream_chunks": 3}]}));
        assert_eq!((text.as_deref(), pieces.len()), (Some(""), 0));
    }
}
