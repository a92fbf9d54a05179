//! One MCP tool behind Tollgate's [`Tool`] port: our name, the server's description and schema, a gate
//! from its annotations, and calls that always end in a result the model can read.
//!
//! Nothing of rmcp's leaves this module except through plain strings and `serde_json` values.

use crate::naming::tool_name;
use crate::server::{CallOutcome, Server};
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::{Value, json};
use std::sync::Arc;
use tollgate_core::{BoxFuture, Gate, Tool, ToolContext, ToolError, ToolOutput};

/// Why a tool annotated `readOnlyHint: true` defaults to [`Gate::Allow`].
pub const GATE_REASON_READ_ONLY: &str = "annotation readOnlyHint";
/// Why every other MCP tool defaults to [`Gate::Ask`].
pub const GATE_REASON_DEFAULT: &str = "default for MCP tools";

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
    server: Arc<Server>,
}

impl McpTool {
    pub(crate) fn from_listing(server: &Arc<Server>, listed: rmcp::model::Tool) -> Self {
        let read_only = listed.annotations.as_ref().and_then(|a| a.read_only_hint) == Some(true);
        let (default_gate, gate_reason) =
            if read_only { (Gate::Allow, GATE_REASON_READ_ONLY) } else { (Gate::Ask, GATE_REASON_DEFAULT) };
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

    /// The gate before any operator policy: allow for `readOnlyHint: true`, ask otherwise.
    pub fn default_gate(&self) -> Gate {
        self.default_gate
    }

    /// Why [`default_gate`](Self::default_gate) is what it is: [`GATE_REASON_READ_ONLY`] or
    /// [`GATE_REASON_DEFAULT`].
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

    fn gate(&self, _args: &Value) -> Gate {
        self.default_gate
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

/// The server's schema if it is an object schema, else `{"type": "object"}` (any arguments).
fn object_schema(schema: &rmcp::model::JsonObject) -> Value {
    if schema.get("type").and_then(Value::as_str) == Some("object") {
        Value::Object(schema.clone())
    } else {
        json!({"type": "object"})
    }
}

/// The text the model reads: text blocks as they are, other blocks summarized, joined by newlines; the
/// structured content when there is no block at all. `isError` makes it an error result.
fn render(result: CallToolResult) -> ToolOutput {
    let mut parts: Vec<String> = result.content.iter().map(describe_block).collect();
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    if result.is_error == Some(true) { ToolOutput::error(text) } else { ToolOutput::text(text) }
}

fn describe_block(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => format!("[image: {}]", image.mime_type),
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
