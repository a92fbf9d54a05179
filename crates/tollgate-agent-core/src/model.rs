//! The `ModelClient` port: one model call from a transcript and a set of offered tools.

use crate::BoxFuture;
use crate::tool::ToolSpec;
use crate::transcript::{Message, ToolCall, Usage};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tollgate_agent_protocol::RunErrorKind;

/// One request to a model.
#[derive(Clone, Copy, Debug)]
pub struct ModelRequest<'a> {
    /// The model name the agent is configured with (may be empty for the scripted provider).
    pub model: &'a str,
    /// The whole transcript so far.
    pub messages: &'a [Message],
    /// The tools offered; empty for the closing completion at the iteration cap.
    pub tools: &'a [ToolSpec],
}

/// Why the model stopped producing output.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end of the answer.
    #[default]
    Stop,
    /// The model asked for tool calls.
    ToolCalls,
    /// The output hit the model's token limit.
    Length,
    /// Content filtering stopped the output.
    ContentFilter,
    /// Anything else, as the provider named it.
    Other(String),
}

/// One model response.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    /// Text, if any.
    pub text: Option<String>,
    /// Tool calls in the model's order.
    pub tool_calls: Vec<ToolCall>,
    /// Tokens used by this call.
    pub usage: Usage,
    /// Why the model stopped.
    pub finish_reason: FinishReason,
}

/// A failed model call. Adapters retry the retryable kinds themselves before returning one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The connection failed or was reset. Retryable.
    #[error("could not reach the model provider: {0}")]
    Connection(String),
    /// No answer in time. Retryable.
    #[error("the model provider did not answer within {0:?}")]
    Timeout(Duration),
    /// 429: too many requests. Retryable.
    #[error("the model provider is rate limiting requests: {message}")]
    RateLimited {
        /// The provider's message.
        message: String,
        /// The provider's `Retry-After`, if it gave one.
        retry_after: Option<Duration>,
    },
    /// 5xx from the provider. Retryable.
    #[error("the model provider failed with HTTP {status}: {message}")]
    Server {
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// 401/403: the key is missing, wrong or lacks access. Not retryable.
    #[error("the model provider refused the credentials (HTTP {status}): {message}")]
    Auth {
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The transcript no longer fits the model's context window. Not retryable.
    #[error("the conversation is longer than the model's context window: {0}")]
    ContextLength(String),
    /// 400/404 and other requests the provider will never accept. Not retryable.
    #[error("the model provider rejected the request (HTTP {status}): {message}")]
    BadRequest {
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The response could not be understood (empty, truncated, unknown shape). Not retryable.
    #[error("the model provider sent a response Tollgate cannot use: {0}")]
    InvalidResponse(String),
    /// The model refused to answer. Not retryable.
    #[error("the model refused: {0}")]
    Refusal(String),
    /// A scripted provider's script has no turn for this model call, or cannot be read. Not retryable.
    #[error("script error: {0}")]
    Script(String),
}

impl ModelError {
    /// True when trying the same request again may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ModelError::Connection(_)
                | ModelError::Timeout(_)
                | ModelError::RateLimited { .. }
                | ModelError::Server { .. }
        )
    }

    /// A stable short name for the kind, used in events and API errors.
    pub fn kind(&self) -> RunErrorKind {
        match self {
            ModelError::Connection(_) => RunErrorKind::ModelConnection,
            ModelError::Timeout(_) => RunErrorKind::ModelTimeout,
            ModelError::RateLimited { .. } => RunErrorKind::ModelRateLimited,
            ModelError::Server { .. } => RunErrorKind::ModelServerError,
            ModelError::Auth { .. } => RunErrorKind::ModelAuth,
            ModelError::ContextLength(_) => RunErrorKind::ModelContextLength,
            ModelError::BadRequest { .. } => RunErrorKind::ModelBadRequest,
            ModelError::InvalidResponse(_) => RunErrorKind::ModelInvalidResponse,
            ModelError::Refusal(_) => RunErrorKind::ModelRefusal,
            ModelError::Script(_) => RunErrorKind::Script,
        }
    }
}

/// What a streaming model call sends while its answer arrives. Live only: never stored, never chained,
/// never replayed; the [`ModelResponse`] the call returns is the whole turn, as without streaming.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelDelta<'a> {
    /// More of the answer's text, in order.
    Text(&'a str),
    /// The call is being tried again (its stream was cut): the text sent so far for it is void.
    Reset,
}

/// Where a streaming model call sends its [`ModelDelta`]s, as they arrive.
pub trait ModelDeltas: Send + Sync {
    /// Takes one delta. Called on the model call's task: it must not block.
    fn delta(&self, delta: ModelDelta<'_>);
}

/// Deltas nobody reads.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoDeltas;

impl ModelDeltas for NoDeltas {
    fn delta(&self, _delta: ModelDelta<'_>) {}
}

/// A model the loop can call.
pub trait ModelClient: Send + Sync {
    /// The provider, as traces name it (`gen_ai.system`: `openai`, `anthropic`, ...); `unknown` unless
    /// the client says.
    fn system(&self) -> &str {
        "unknown"
    }

    /// The provider's server, as traces name it (`server.address`, `server.port`): the host and port
    /// requests go to; `None` (the default) for a model that is not reached over the network.
    fn server(&self) -> Option<(&str, u16)> {
        None
    }

    /// Makes one model call.
    fn complete<'a>(&'a self, request: ModelRequest<'a>) -> BoxFuture<'a, Result<ModelResponse, ModelError>>;

    /// Makes one model call, sending its text to `deltas` as it arrives when this client streams. The
    /// answer is the same as [`complete`](Self::complete)'s; a client that does not stream (the default)
    /// sends nothing.
    fn complete_streaming<'a>(
        &'a self,
        request: ModelRequest<'a>,
        deltas: &'a dyn ModelDeltas,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        let _ = deltas;
        self.complete(request)
    }
}
