//! # tollgate-agent-core
//!
//! The heart of Tollgate: a provider-neutral tool loop that gates every turn of a model's tool calls
//! before any of them runs, returns a run waiting for a person as a value ([`Outcome::Suspended`]), and
//! resumes it from per-call [`Decision`]s — in this process or another.
//!
//! ```
//! # use std::sync::Arc;
//! # use schemars::JsonSchema;
//! # use serde::Deserialize;
//! # use tollgate_agent_core::scripted::{Script, ScriptedModel};
//! # use tollgate_agent_core::*;
//! #[derive(Deserialize, JsonSchema)]
//! struct Note { text: String }
//! struct SaveNote;
//! impl TypedTool for SaveNote {
//!     type Args = Note;
//!     const NAME: &str = "save_note";
//!     const DESCRIPTION: &str = "Saves a note.";
//!     const GATE: Gate = Gate::Ask; // every call waits for a person
//!     async fn call(&self, note: Note, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
//!         Ok(format!("saved {:?}", note.text).into())
//!     }
//! }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let script = Script::from_json(r#"{"turns": [
//!     {"tool_calls": [{"name": "save_note", "arguments": {"text": "hello"}}]}, {"text": "Saved."}]}"#)?;
//! let tools = ToolRegistry::new().with(SaveNote.into_tool())?;
//! let agent = ToolLoop::new(Arc::new(ScriptedModel::new(script)), Arc::new(tools), LoopConfig::default());
//! let scope = RunScope::new("run-1"); // .with_metadata(..): per-run data every tool call gets
//! let Outcome::Suspended(held) = agent.start(&scope, "Note: hello", &NoHooks).await? else { panic!() };
//! let stored = held.to_json()?; // the held turn as JSON: persist it anywhere; nothing of it ran
//! let held = Suspension::from_json(&stored)?; // later, perhaps in another process
//! let decisions = Decisions::from([("call_1".into(), Decision::Approve)]);
//! let Outcome::Completed(done) = agent.resume(&scope, held, &decisions, &NoHooks).await? else { panic!() };
//! assert_eq!(done.output.as_deref(), Some("Saved."));
//! # Ok(()) }
//! ```
//!
//! This crate does no I/O of its own and knows nothing of HTTP, SQL, MCP or any provider's wire format.
//! Models and tools come in through the [`ModelClient`] and [`Tool`] ports (a [`TypedTool`] or a
//! [`tool_fn`] becomes a [`Tool`] with [`IntoTool::into_tool`]); persistence hooks in through
//! [`LoopHooks`], and a run's [`Metadata`] reaches every call in its [`ToolContext`] through the
//! [`RunScope`]. The durable runtime (`tollgate-agent-runtime`) and the `tollgate` facade build on it.

pub mod approval;
pub mod canonical;
pub mod display;
pub mod event;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod grant;
pub mod image;
pub mod metadata;
pub mod model;
pub mod redact;
pub mod run;
pub mod scripted;
pub mod store;
pub mod suspension;
pub mod tool;
pub mod tool_loop;
pub mod trace;
pub mod transcript;
pub mod typed;

pub use approval::{Approval, ApprovalCommand, ApprovalError, ApprovalId, ApprovalState, Escalation, Requirement};
pub use display::{error_chain, terminal_safe, terminal_safe_line};
pub use event::{ChainBreak, ChainKey, ChainKeys, EventKind, NewEvent, StoredEvent, verify_chain, verify_chain_with};
pub use grant::{
    GrantMatch, GrantPage, GrantQuery, GrantRecord, GrantStatus, exact_match, exact_match_resolved, first_allowing,
};
pub use image::{ImageRefused, ImageType, ToolImage};
pub use metadata::{Metadata, MetadataError, MetadataValueError};
pub use model::{
    FinishReason, ModelClient, ModelDelta, ModelDeltas, ModelError, ModelRequest, ModelResponse, NoDeltas,
};
pub use redact::{RedactedStream, Redactor};
pub use run::{
    HeldTurn, Lease, Millis, RunError, RunErrorKind, RunRecord, RunState, RunStatus, Transition, TransitionError, Vote,
    rfc3339,
};
pub use store::{
    ChangeFeed, Claimed, Clock, CommitTap, CommittedPage, Conflict, EventLog, Grants, Guard, IdGen, IntegrityCheck,
    ReaderHold, RunPage, RunQuery, RunQueue, RunRows, RunStore, Schedules, StoreChange, StoreError, StoreHealth,
    StoreHosts, SystemClock,
};
pub use suspension::{
    Decision, DecisionError, Decisions, HeldCall, HeldCallState, SCHEMA_VERSION, StoredSuspension, Suspension,
    SuspensionError, TurnDigest,
};
pub use tollgate_agent_protocol::{Actor, CallId, GrantId, GrantScope, RunId};
pub use tool::{
    ErrorContext, Gate, PolicyPath, Preview, RegisteredTool, RegistryError, RunScope, Tool, ToolContext, ToolError,
    ToolOutput, ToolPin, ToolRegistry, ToolSpec,
};
pub use tool_loop::{
    AgentLoop, Completion, HookError, ITERATION_LIMIT_RESULT, LoopConfig, LoopError, LoopEvent, LoopHooks, NoHooks,
    Outcome, ResumePlan, StartingCall, TerminationReason, ToolLoop, cap_result,
};
pub use trace::{TraceContext, TraceContextError};
pub use transcript::{Counters, Invocation, Message, ToolCall, ToolResult, Usage};
pub use typed::{FnTool, IntoTool, Typed, TypedTool, args_schema, tool_fn};

/// A boxed, sendable future, the return type of the async methods of Tollgate's ports.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
