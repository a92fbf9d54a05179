//! # tollgate-agent-core
//!
//! The heart of Tollgate: a provider-neutral tool loop that gates every turn of a model's tool calls
//! before any of them runs, returns a run waiting for a person as a value ([`Outcome::Suspended`]), and
//! resumes it from per-call [`Decision`]s — in this process or another.
//!
//! This crate does no I/O of its own and knows nothing of HTTP, SQL, MCP or any provider's wire format.
//! Models and tools come in through the [`ModelClient`] and [`Tool`] ports; persistence hooks in through
//! [`LoopHooks`].
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use tollgate_agent_core::*;
//! # async fn demo(model: Arc<dyn ModelClient>, tools: ToolRegistry) -> Result<(), Box<dyn std::error::Error>> {
//! let agent = ToolLoop::new(model, Arc::new(tools), LoopConfig::default());
//! let scope = RunScope::new("run-1"); // with_metadata(...) hands per-run data to every tool call
//! match agent.start(&scope, "Save a note saying hello", &NoHooks).await? {
//!     Outcome::Completed(done) => println!("{:?}", done.output),
//!     Outcome::Suspended(suspension) => {
//!         let stored = suspension.to_json()?; // persist it anywhere
//!         let suspension = Suspension::from_json(&stored)?;
//!         let decisions: Decisions =
//!             suspension.decidable_calls().map(|c| (c.call_id.clone(), Decision::Approve)).collect();
//!         let outcome = agent.resume(&scope, suspension, &decisions, &NoHooks).await?;
//!         # let _ = outcome;
//!     }
//! }
//! # Ok(()) }
//! ```

pub mod canonical;
pub mod event;
#[doc(hidden)]
pub mod fuzzing;
pub mod metadata;
pub mod model;
pub mod redact;
pub mod run;
pub mod scripted;
pub mod store;
pub mod suspension;
pub mod tool;
pub mod tool_loop;
pub mod transcript;
pub mod typed;

pub use event::{ChainBreak, EventKind, NewEvent, StoredEvent, verify_chain};
pub use metadata::{Metadata, MetadataError, MetadataValueError};
pub use model::{FinishReason, ModelClient, ModelError, ModelRequest, ModelResponse};
pub use redact::Redactor;
pub use run::{
    HeldTurn, Lease, Millis, RecordedDecision, RunError, RunRecord, RunState, RunStatus, Transition, TransitionError,
    rfc3339,
};
pub use store::{Clock, Conflict, Guard, IdGen, IntegrityCheck, RunPage, RunQuery, RunStore, StoreError, SystemClock};
pub use suspension::{
    CallState, Decision, DecisionError, Decisions, HeldCall, SCHEMA_VERSION, StoredSuspension, Suspension,
    SuspensionError, TurnDigest,
};
pub use tool::{
    Gate, RegisteredTool, RegistryError, RunScope, Tool, ToolContext, ToolError, ToolOutput, ToolPin, ToolRegistry,
    ToolSpec,
};
pub use tool_loop::{
    AgentLoop, Completion, HookError, ITERATION_LIMIT_RESULT, LoopConfig, LoopError, LoopEvent, LoopHooks, NoHooks,
    Outcome, StartingCall, TerminationReason, ToolLoop, cap_result,
};
pub use transcript::{Counters, Invocation, Message, ToolCall, ToolResult, Usage};
pub use typed::{FnTool, IntoTool, Typed, TypedTool, args_schema, tool_fn};

/// A boxed, sendable future, the return type of the async methods of Tollgate's ports.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
