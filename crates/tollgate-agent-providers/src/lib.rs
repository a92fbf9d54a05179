//! # tollgate-agent-providers
//!
//! Model providers behind [`tollgate_agent_core::ModelClient`]. Each adapter translates Tollgate's own
//! transcript types to a provider's wire format and back; nothing of a provider's format is ever persisted.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # #[cfg(feature = "openai")] {
//! use std::{sync::Arc, time::Duration};
//! use tollgate_agent_core::ModelClient;
//! use tollgate_agent_providers::{ApiKey, OpenAiModel, ProviderSettings};
//!
//! let settings = ProviderSettings {
//!     base_url: Some("http://127.0.0.1:11434/v1".into()), // Ollama; `None` is api.openai.com
//!     api_key: Some(ApiKey::new("sk-example")),            // e.g. from OPENAI_API_KEY
//!     timeout: Duration::from_secs(120),
//!     ..ProviderSettings::default()
//! };
//! let model = OpenAiModel::new(settings)?; // nothing is sent until the loop asks the model
//! assert_eq!(model.url(), "http://127.0.0.1:11434/v1/chat/completions");
//! assert!(!format!("{model:?}").contains("sk-example")); // the key never shows
//! let model: Arc<dyn ModelClient> = Arc::new(model); // what `ToolLoop::new` takes
//! # let _ = model;
//! # }
//! # Ok(()) }
//! ```
//!
//! Cargo features: `openai` and `anthropic` (both default) each bring in their adapter and the HTTP
//! client (reqwest, rustls on aws-lc-rs); the scripted provider is always there.
//!
//! - [`openai`]: OpenAI-compatible Chat Completions (OpenAI, Ollama, vLLM, llama.cpp server, LM Studio,
//!   OpenRouter, Groq, Mistral).
//! - [`anthropic`]: Anthropic Messages.
//! - [`scripted`]: replays a JSON script, for tests, benchmarks and the offline demo.
//!
//! The two HTTP adapters are built from one [`ProviderSettings`] (what a `[[providers]]` entry of
//! `tollgate.toml` maps into) and share its promises: typed errors, retries with backoff for the retryable
//! ones, and an API key that never shows up in a log line, an error or `Debug` output.

#[cfg(any(feature = "openai", feature = "anthropic"))]
mod answer;
#[cfg(feature = "anthropic")]
pub mod anthropic;
#[cfg(any(feature = "openai", feature = "anthropic"))]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub mod http;
#[cfg(feature = "openai")]
pub mod openai;
pub mod scripted;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod stream;

#[cfg(feature = "anthropic")]
pub use anthropic::{ANTHROPIC_DEFAULT_BASE_URL, ANTHROPIC_VERSION, AnthropicModel};
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub use http::{ApiKey, ProviderError, ProviderSettings};
#[cfg(feature = "openai")]
pub use openai::{OPENAI_DEFAULT_BASE_URL, OpenAiModel};
pub use scripted::{Script, ScriptError, ScriptedModel};
