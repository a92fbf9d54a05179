//! What every built-in tool does around a call: read its arguments into a typed struct, and hand back a
//! result that is already computed as the future the [`tollgate_core::Tool`] port expects.

use serde::de::DeserializeOwned;
use serde_json::Value;
use tollgate_core::{BoxFuture, ToolError, ToolOutput};

/// The arguments as `T`; the error is the message the model reads.
pub(crate) fn parse<T: DeserializeOwned>(args: &Value) -> Result<T, String> {
    T::deserialize(args).map_err(|e| format!("invalid arguments: {e}"))
}

/// A result computed synchronously, as a future.
pub(crate) fn ready<'a>(output: Result<ToolOutput, ToolError>) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
    Box::pin(std::future::ready(output))
}

/// The default `path` of the tools that take a folder: the workspace root.
pub(crate) fn dot() -> String {
    ".".to_owned()
}
