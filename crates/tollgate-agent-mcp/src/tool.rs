//! One MCP tool behind Tollgate's [`Tool`] port: our name, the server's description and schema, a gate
//! from its annotations, a preview for the approver, and calls that always end in a result the model can
//! read.
//!
//! A preview is built from what was listed at start and the call's arguments only, never by asking the
//! server: it must be ready while the turn is held, whatever state the server is in. It is at most
//! [`MAX_PREVIEW_BYTES`] long.
//!
//! A result's image blocks stay images ([`ToolOutput::with_image`]: PNG, JPEG, GIF and WebP within the
//! core's size limits; any other described on its line). rmcp drops a message over 16 MiB (its
//! `DEFAULT_MAX_LINE_LENGTH`), so no answer holds more in memory than that.
//!
//! Nothing of rmcp's leaves this module except through plain strings and `serde_json` values.

use crate::naming::tool_name;
use crate::server::{CallOutcome, Server};
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::{Value, json};
use std::sync::Arc;
use tollgate_agent_core::{BoxFuture, Gate, Tool, ToolContext, ToolError, ToolOutput};

/// Why a tool annotated `readOnlyHint: true` (and not `destructiveHint: true`) defaults to [`Gate::Allow`].
pub const GATE_REASON_READ_ONLY: &str = "annotation readOnlyHint";
/// Why a tool annotated both `readOnlyHint: true` and `destructiveHint: true` defaults to [`Gate::Ask`]:
/// the hints contradict each other, and the one that asks wins.
pub const GATE_REASON_DESTRUCTIVE: &str = "annotation destructiveHint (wins over readOnlyHint)";
/// Why every other MCP tool defaults to [`Gate::Ask`].
pub const GATE_REASON_DEFAULT: &str = "default for MCP tools";
/// The longest preview, in bytes; a longer one is cut on a character boundary and ends with
/// [`PREVIEW_CUT_MARKER`].
pub const MAX_PREVIEW_BYTES: usize = 2_000;
/// How a cut preview's last line starts.
pub const PREVIEW_CUT_MARKER: &str = "… [preview cut:";

/// A tool of an MCP server, offered to the model as `SERVER__TOOL`.
///
/// Its gate is the annotation-derived default ([`default_gate`](Self::default_gate)); operator policy is
/// applied by wrapping, elsewhere. Annotations are hints from the server, never trusted further than that.
pub struct McpTool {
    name: String,
    mcp_name: String,
    description: String,
    parameters: Value,
    default_gate: Gate,
    gate_reason: &'static str,
    /// The behaviour hints the server gave, by their MCP names, in the spec's order; only those present.
    hints: Vec<(&'static str, bool)>,
    server: Arc<Server>,
}

impl McpTool {
    pub(crate) fn from_listing(server: &Arc<Server>, listed: rmcp::model::Tool) -> Self {
        let annotations = listed.annotations.as_ref();
        let read_only = annotations.and_then(|a| a.read_only_hint) == Some(true);
        // The hints are the server's word, unchecked: a tool that calls itself both read-only and
        // destructive is taken at the word that asks a person.
        let destructive = annotations.and_then(|a| a.destructive_hint) == Some(true);
        let hints = annotations
            .map(|a| {
                [
                    ("readOnlyHint", a.read_only_hint),
                    ("destructiveHint", a.destructive_hint),
                    ("idempotentHint", a.idempotent_hint),
                    ("openWorldHint", a.open_world_hint),
                ]
                .into_iter()
                .filter_map(|(name, value)| value.map(|value| (name, value)))
                .collect()
            })
            .unwrap_or_default();
        let (default_gate, gate_reason) = match (read_only, destructive) {
            (true, false) => (Gate::Allow, GATE_REASON_READ_ONLY),
            (true, true) => (Gate::Ask, GATE_REASON_DESTRUCTIVE),
            (false, _) => (Gate::Ask, GATE_REASON_DEFAULT),
        };
        let description = listed
            .description
            .map(|d| d.into_owned())
            .or(listed.title)
            .unwrap_or_else(|| format!("Tool `{}` of MCP server `{}`.", listed.name, server.name()));
        Self {
            name: tool_name(server.name(), &listed.name),
            mcp_name: listed.name.into_owned(),
            description,
            parameters: object_schema(&listed.input_schema),
            default_gate,
            gate_reason,
            hints,
            server: server.clone(),
        }
    }

    /// The tool's name on its server, used in `tools/call`.
    pub fn mcp_name(&self) -> &str {
        &self.mcp_name
    }

    /// The configured name of the server the tool belongs to.
    pub fn server_name(&self) -> &str {
        self.server.name()
    }

    /// The gate before any operator policy: allow for `readOnlyHint: true` without `destructiveHint: true`,
    /// ask otherwise.
    pub fn default_gate(&self) -> Gate {
        self.default_gate
    }

    /// Why [`default_gate`](Self::default_gate) is what it is: [`GATE_REASON_READ_ONLY`],
    /// [`GATE_REASON_DESTRUCTIVE`] or [`GATE_REASON_DEFAULT`].
    pub fn gate_reason(&self) -> &'static str {
        self.gate_reason
    }
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.name)
            .field("mcp_name", &self.mcp_name)
            .field("server", &self.server.name())
            .field("default_gate", &self.default_gate)
            .finish_non_exhaustive()
    }
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    fn gate(&self, _args: &Value, _ctx: &ToolContext) -> Gate {
        self.default_gate
    }

    fn preview<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Option<String>> {
        Box::pin(std::future::ready(Some(preview(self.server.name(), &self.mcp_name, &self.hints, args))))
    }

    fn call<'a>(&'a self, args: Value, _ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let arguments = match args {
                Value::Object(map) => Some(map),
                Value::Null => None,
                other => {
                    return Ok(ToolOutput::error(format!(
                        "arguments of `{}` must be a JSON object, got {other}",
                        self.name
                    )));
                }
            };
            Ok(match self.server.call(&self.mcp_name, arguments).await {
                CallOutcome::Answered(result) => render(result),
                CallOutcome::Failed(message) => ToolOutput::error(message),
            })
        })
    }
}

/// What the approver reads: which server and tool, the server's hints, then the arguments as indented JSON,
/// all within [`MAX_PREVIEW_BYTES`]. The tool's name comes from the server, so it is escaped: a name with
/// a line break cannot pass for another line of the preview. The hints come first so that a cut never
/// hides them.
fn preview(server: &str, tool: &str, hints: &[(&str, bool)], args: &Value) -> String {
    let mut text = format!("MCP server `{server}`, tool `{}`\n", tool.escape_debug());
    if !hints.is_empty() {
        let hints: Vec<String> = hints.iter().map(|(name, value)| format!("{name}: {value}")).collect();
        text.push_str(&format!("annotations (hints from the server): {}\n", hints.join(", ")));
    }
    text.push_str("arguments:\n");
    text.push_str(&serde_json::to_string_pretty(args).unwrap_or_else(|_| args.to_string()));
    bounded(text)
}

/// `text` if it fits in [`MAX_PREVIEW_BYTES`], else its start, cut on a character boundary, and a last line
/// saying it was cut (the full arguments stay on the held call).
fn bounded(text: String) -> String {
    if text.len() <= MAX_PREVIEW_BYTES {
        return text;
    }
    let marker = format!("\n{PREVIEW_CUT_MARKER} {} bytes in full; the call's arguments hold all of them]", text.len());
    let end = text.floor_char_boundary(MAX_PREVIEW_BYTES.saturating_sub(marker.len()));
    format!("{}{marker}", &text[..end])
}

/// The server's schema if it is an object schema, else `{"type": "object"}` (any arguments).
fn object_schema(schema: &rmcp::model::JsonObject) -> Value {
    if schema.get("type").and_then(Value::as_str) == Some("object") {
        Value::Object(schema.clone())
    } else {
        json!({"type": "object"})
    }
}

/// What the model gets: text blocks as they are, other blocks summarized, one per line, in order; each
/// image block kept as an image for the providers that read images and described on its line
/// (`[image: image/png, 12 KB]`, or why it is not shown: [`ToolOutput::with_image`]); the structured
/// content when there is no block at all. `isError` makes it an error result.
fn render(result: CallToolResult) -> ToolOutput {
    let mut output = if result.is_error == Some(true) { ToolOutput::error("") } else { ToolOutput::text("") };
    if result.content.is_empty()
        && let Some(structured) = &result.structured_content
    {
        output.content = structured.to_string();
    }
    for block in result.content {
        if let ContentBlock::Image(image) = block {
            output = output.with_image(&image.mime_type, image.data);
            continue;
        }
        if !output.content.is_empty() {
            output.content.push('\n');
        }
        output.content.push_str(&describe_block(&block));
    }
    output
}

/// The line of a block that is not an image.
fn describe_block(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Audio(audio) => format!("[audio: {}]", audio.mime_type),
        ContentBlock::Resource(embedded) => match &embedded.resource {
            ResourceContents::TextResourceContents { uri, text, .. } => format!("[resource: {uri}]\n{text}"),
            ResourceContents::BlobResourceContents { uri, mime_type, .. } => {
                format!("[resource: {uri} ({})]", mime_type.as_deref().unwrap_or("binary"))
            }
            _ => "[resource]".to_owned(),
        },
        ContentBlock::ResourceLink(link) => format!("[resource link: {} {}]", link.name, link.uri),
        // A block kind newer than this code: say so rather than drop it silently.
        _ => "[unsupported content]".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_preview_is_whole() {
        let text = preview("s", "t", &[("openWorldHint", true)], &json!({"a": 1}));
        assert_eq!(
            text,
            "MCP server `s`, tool `t`\nannotations (hints from the server): openWorldHint: true\narguments:\n{\n  \"a\": 1\n}"
        );
    }

    #[test]
    fn a_long_preview_is_cut_on_a_character_boundary() {
        // Three-byte characters, so most byte offsets fall inside one.
        let text = preview("s", "t", &[], &json!({"a": "€".repeat(5_000)}));
        assert!(text.len() <= MAX_PREVIEW_BYTES, "{} bytes", text.len());
        let (kept, marker) = text.rsplit_once('\n').unwrap_or_else(|| panic!("no marker line in {text}"));
        assert!(kept.ends_with('€'), "{kept}");
        assert!(marker.starts_with(PREVIEW_CUT_MARKER), "{marker}");
        assert!(marker.contains("15049 bytes in full"), "{marker}");
    }

    #[test]
    fn a_tool_name_cannot_add_lines_to_the_preview() {
        let text = preview("s", "t\narguments:\n{}", &[], &json!({}));
        assert!(text.starts_with("MCP server `s`, tool `t\\narguments:\\n{}`\narguments:\n{}"), "{text}");
    }
}
