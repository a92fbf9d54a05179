//! # Tollgate
//!
//! A durable agent runtime with human approval of tool calls. When a model asks for a tool that writes,
//! deletes, pays or sends, the run stops at the gate and waits — in the store, not in memory — until a
//! person decides per call: approve, edit the arguments, deny with a reason, or answer in the tool's place.
//! The run then resumes, in this process or another one after a restart, exactly once, with every
//! decision on a hash-chained record.
//!
//! ```
//! use tollgate::{Agent, Gate, Model, Tollgate, ToolContext, ToolError, ToolOutput, TypedTool};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//!
//! /// Pay someone.
//! #[derive(Deserialize, JsonSchema)]
//! struct TransferArgs {
//!     /// Who is paid.
//!     to: String,
//!     /// How much, in cents.
//!     cents: u64,
//! }
//!
//! struct Transfer;
//!
//! impl TypedTool for Transfer {
//!     type Args = TransferArgs;
//!     const NAME: &str = "transfer";
//!     const DESCRIPTION: &str = "Transfers money to someone.";
//!     const GATE: Gate = Gate::Ask; // what listings show; per call:
//!     fn gate(&self, args: &TransferArgs, _ctx: &ToolContext) -> Gate {
//!         if args.cents > 10_000 { Gate::Ask } else { Gate::Allow }
//!     }
//!     async fn call(&self, args: TransferArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
//!         Ok(format!("sent {} cents to {}", args.cents, args.to).into())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let model = Model::scripted_json(r#"{"turns": [{"tool_calls": [{"name": "transfer",
//! #     "arguments": {"to": "bob", "cents": 25000}}]}, {"text": "Done."}]}"#);
//! let tollgate = Tollgate::builder()
//!     .store("sqlite::memory:")
//!     .agent(Agent::new("bank").model(model).tool(Transfer))
//!     .build()
//!     .await?;
//!
//! let run = tollgate.start("Pay Bob 250 dollars").wait().await?;
//! let held = tollgate.pending(&run.id).await?;          // the turn at the gate, as a value
//! for call in held.awaiting() {
//!     println!("{} wants {}: {}", call.tool, call.arguments, call.call_id);
//! }
//! let run = tollgate.decide(held.approve_all()).by("alice").wait().await?;
//! assert_eq!(run.output.as_deref(), Some("Done."));
//! # Ok(()) }
//! ```
//!
//! ## What is where
//! - [`Tollgate::builder`] assembles the runtime: the store (SQLite by default; PostgreSQL with the
//!   `postgres` feature), the [`Agent`]s with their [`Model`] and tools.
//! - Tools: a [`TypedTool`] (arguments as a `serde` + `schemars` struct, the schema derived), a
//!   [`tool_fn`] from a closure, the built-ins of `tools` (feature `tools`, default), an MCP server's
//!   (`mcp`, feature `mcp`), or any [`Tool`] for dynamic cases. A gate sees the call's
//!   [`ToolContext`] (the run's metadata), and `?` works in a tool ([`ToolError`], [`ErrorContext`]).
//! - Runs: [`Tollgate::start`], [`Tollgate::get`], [`Tollgate::list`], [`Tollgate::cancel`],
//!   [`Tollgate::verify`]; waiting runs: [`Tollgate::pending`] gives a [`Held`] turn, whose
//!   [`Decisions`] go to [`Tollgate::decide`]; [`Tollgate::events`] is a live [`EventStream`], and
//!   [`Tollgate::run_deltas`] a run's live model text.
//! - Processes: every Tollgate drives the runs it starts and those its decisions resume; one built
//!   with [`Builder::workers`] also claims the runs queued on the store by any process.
//! - Runs, calls and events are the types of Tollgate's HTTP API ([`wire`]), so what your code sees is
//!   what an HTTP client sees.
//! - With the `server` feature, `Tollgate::router` is Tollgate's whole HTTP API, live events and
//!   playground as an axum router to mount in your own service.
//!
//! ## Tools that see the run, and `?` inside them
//! A gate gets the call's [`ToolContext`], so it can decide by the run's metadata (what the model must
//! not choose: the customer, the tenant) as well as by the arguments; a tool's own failures convert
//! from any error with `?`, and [`ErrorContext::context`] says what the tool was doing. Such a
//! [`ToolError`] is logged; the model is told only that the tool failed (an error the model should read
//! is `Ok(ToolOutput::error(..))`).
//!
//! ```
//! use std::collections::HashMap;
//! use tollgate::{
//!     Agent, ErrorContext, Gate, Model, RunStatus, Tollgate, ToolContext, ToolError, ToolOutput, TypedTool,
//! };
//!
//! /// Refund an order.
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct RefundArgs {
//!     /// The order, e.g. `A-1042`.
//!     order: String,
//!     /// Euros.
//!     amount: u32,
//! }
//!
//! /// Refunds without asking up to each customer's limit; above it, or for a customer without one,
//! /// a person decides.
//! struct Refund {
//!     limits: HashMap<&'static str, u32>,
//! }
//!
//! impl TypedTool for Refund {
//!     type Args = RefundArgs;
//!     const NAME: &str = "refund";
//!     const DESCRIPTION: &str = "Refunds an order.";
//!     const GATE: Gate = Gate::Ask;
//!     fn gate(&self, args: &RefundArgs, ctx: &ToolContext) -> Gate {
//!         let customer = ctx.metadata.get("customer").and_then(|c| c.as_str()).unwrap_or_default();
//!         let limit = self.limits.get(customer).copied().unwrap_or(0);
//!         if args.amount <= limit { Gate::Allow } else { Gate::Ask }
//!     }
//!     async fn call(&self, args: RefundArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
//!         let digits = args.order.strip_prefix("A-").context("an order id starts with A-")?;
//!         let number: u64 = digits.parse().with_context(|| format!("order {}", args.order))?;
//!         Ok(format!("refunded {} EUR on order {number}", args.amount).into())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let refund = || Refund { limits: HashMap::from([("c-gold", 100), ("c-new", 20)]) };
//! let model = Model::scripted_json(r#"{"turns": [
//!     {"tool_calls": [{"name": "refund", "arguments": {"order": "A-1042", "amount": 80}}]},
//!     {"text": "Refunded."}
//! ]}"#);
//! let tollgate = Tollgate::builder()
//!     .store("sqlite::memory:")
//!     .agent(Agent::new("support").model(model).tool(refund()))
//!     .build()
//!     .await?;
//!
//! let gold = tollgate.start("Refund A-1042").metadata("customer", "c-gold").wait().await?;
//! assert_eq!(gold.status, RunStatus::Completed); // 80 is within c-gold's 100
//! let new = tollgate.start("Refund A-1042").metadata("customer", "c-new").wait().await?;
//! assert_eq!(new.status, RunStatus::WaitingForApproval); // above c-new's 20: a person decides
//!
//! // The failures `?` and `.context(..)` made, as the log gets them:
//! use tollgate::IntoTool;
//! let tool = refund().into_tool();
//! let failed = |order: &str| {
//!     let call = tool.call(serde_json::json!({"order": order, "amount": 5}), ToolContext::new("run-1", "call_1"));
//!     async move { call.await.err().map(|e| e.message) }
//! };
//! assert_eq!(failed("B-7").await.as_deref(), Some("an order id starts with A-"));
//! assert_eq!(failed("A-x7").await.as_deref(), Some("order A-x7: invalid digit found in string"));
//! # Ok(()) }
//! ```
//!
//! ## Features
//! | feature | default | what it adds |
//! |---|---|---|
//! | `sqlite` | yes | the SQLite store (`sqlite://FILE`) |
//! | `tools` | yes | the built-in workspace tools (`tools`) |
//! | `http-tool` | | the built-in `http_request` tool too |
//! | `postgres` | | the PostgreSQL store (`postgres://…`), for several processes or nodes |
//! | `openai` | | `Model::openai`: OpenAI-compatible Chat Completions |
//! | `anthropic` | | `Model::anthropic`: Anthropic Messages |
//! | `mcp` | | `mcp`: MCP servers as tool sources |
//! | `server` | | `Tollgate::router`: the HTTP API and playground |
//!
//! ## One vocabulary
//! Every type inside a public item of this crate (an error's variants and fields, a method's arguments,
//! a trait's methods) is nameable from it, and each name is one type: the [`Gate`] a tool answers is the
//! one a held [`Call`] carries, the [`RunStatus`] in [`DecideError::NotWaiting`] is the one a [`Run`]
//! carries, the [`Decision`] given to [`Held::decide_each`] is the one a call's recorded decision holds,
//! the [`Usage`] a [`ModelClient`] reports is the one a run adds up. These doc tests hold the crate to it:
//!
//! ```
//! # use tollgate::{Held, Run};
//! // A held call's gate, compared with the crate's `Gate`; a recorded decision with its `Decision`.
//! fn asks(held: &Held) -> Vec<&str> {
//!     held.awaiting().filter(|call| call.gate == tollgate::Gate::Ask).map(|c| c.call_id.as_str()).collect()
//! }
//! fn approved(held: &Held) -> bool {
//!     held.calls.iter().flat_map(|c| &c.decision).any(|r| r.decision == tollgate::Decision::Approve)
//! }
//! fn approve_asks(held: &Held) -> tollgate::Decisions {
//!     held.decide_each(|call| match call.gate {
//!         tollgate::Gate::Ask => tollgate::Decision::Approve,
//!         _ => tollgate::Decision::Deny { reason: "not asked".into() },
//!     })
//! }
//! fn tokens(run: &Run, response: &tollgate::ModelResponse) -> tollgate::Usage {
//!     let mut usage: tollgate::Usage = run.usage;
//!     usage.add(response.usage);
//!     usage
//! }
//! ```
//! ```
//! use tollgate::{DecideError, DecisionError, RunStatus, StoreError, TurnDigest};
//! // Every error told apart by its variants, the types inside them named through this crate.
//! fn explain(error: &DecideError) -> String {
//!     match error {
//!         DecideError::NotWaiting { status: RunStatus::Completed, .. } => "it has completed".into(),
//!         DecideError::NotWaiting { status, .. } => format!("it is {status}"),
//!         DecideError::StaleDigest { current } => format!("it moved on to {}", TurnDigest::as_str(current)),
//!         DecideError::Invalid(DecisionError::UnknownCall(id)) => format!("no call {id}"),
//!         DecideError::Invalid(DecisionError::InvalidEdit { call_id, message }) => format!("{call_id}: {message}"),
//!         DecideError::Store(StoreError::Conflict { conflict: tollgate::Conflict::StaleVersion { .. }, .. }) => {
//!             "someone acted on it first".into()
//!         }
//!         DecideError::Store(StoreError::Transition(tollgate::TransitionError::NotAllowed { from, .. })) => {
//!             format!("not from {from}")
//!         }
//!         other => other.to_string(),
//!     }
//! }
//! fn metadata(error: &tollgate::StartError) -> Option<usize> {
//!     match error {
//!         tollgate::StartError::InvalidMetadata(tollgate::MetadataError::TooLarge { bytes, .. }) => Some(*bytes),
//!         _ => None,
//!     }
//! }
//! fn duplicate_tool(error: &tollgate::BuildError) -> Option<&str> {
//!     match error {
//!         tollgate::BuildError::Agent {
//!             error: tollgate::AgentError::Tool(tollgate::RegistryError::Duplicate(tool)), ..
//!         } => Some(tool),
//!         _ => None,
//!     }
//! }
//! ```
//! ```
//! use tollgate::{BoxFuture, FinishReason, Model, ModelClient, ModelError, ModelRequest, ModelResponse, Usage};
//! // A model client of your own, named and implemented through this crate alone.
//! struct Echo;
//! impl ModelClient for Echo {
//!     fn complete<'a>(&'a self, request: ModelRequest<'a>) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
//!         let text = format!("{} messages", request.messages.len());
//!         Box::pin(async move {
//!             Ok(ModelResponse {
//!                 text: Some(text),
//!                 tool_calls: Vec::new(),
//!                 usage: Usage::default(),
//!                 finish_reason: FinishReason::Stop,
//!             })
//!         })
//!     }
//! }
//! let model = Model::custom(Echo, "echo");
//! # let _ = model;
//! ```
//! A quorum's refusals are matchable, a tool can ask for one, and a held call and a failed run say what
//! they carry in this crate's types:
//! ```
//! use tollgate::{ApprovalError, Call, DecideError, Requirement, Tool};
//! use tollgate::wire::{Approvals, RunError, RunErrorKind};
//! fn second_approval(error: &DecideError) -> Option<&str> {
//!     match error {
//!         DecideError::Vote(ApprovalError::AlreadyApproved { actor, .. }) => Some(actor),
//!         DecideError::Vote(refused) if !refused.is_conflict() => None, // an edit on a quorum call: 422
//!         _ => None,
//!     }
//! }
//! fn missing(call: &Call) -> u32 {
//!     call.approvals.as_ref().map_or(0, Approvals::missing)
//! }
//! fn crashed(error: &RunError) -> bool {
//!     error.kind == RunErrorKind::CrashLoop
//! }
//! fn needs_two(tool: &dyn Tool, args: &serde_json::Value) -> bool {
//!     tool.requirement(args) == Requirement::new(std::num::NonZeroU32::MIN.saturating_add(1))
//! }
//! # let _ = (second_approval, missing, crashed, needs_two);
//! ```
//! ```compile_fail,E0599
//! use tollgate::wire::RunError;
//! fn kind(error: &RunError) -> usize {
//!     error.kind.len() // a failed run's kind is a `RunErrorKind`, not a string
//! }
//! ```
//! Identifiers are typed ([`RunId`], [`CallId`], [`Actor`], [`ApprovalId`]): the same JSON strings as
//! ever, but one cannot be passed where another is meant:
//! ```
//! use tollgate::{Held, Run, Tollgate};
//! async fn reread(tollgate: &Tollgate, held: &Held) -> Result<Run, tollgate::ReadError> {
//!     tollgate.get(&held.run_id).await
//! }
//! ```
//! ```compile_fail,E0308
//! use tollgate::{Held, Run, Tollgate};
//! async fn reread(tollgate: &Tollgate, held: &Held) -> Result<Run, tollgate::ReadError> {
//!     tollgate.get(&held.calls[0].call_id).await // a call id is not a run id
//! }
//! ```
//! What will grow is `#[non_exhaustive]`: the errors an embedder handles but no Tollgate crate must
//! handle variant by variant ([`VerifyError`], [`PendingError`], [`BuildError`], [`AgentError`],
//! [`ApprovalError`], [`TransitionError`], [`ModelError`], ...), [`OnExpiry`], a failed run's
//! [`wire::RunErrorKind`], and the structs this crate hands out ([`Held`], [`LiveDelta`], [`ListQuery`]:
//! start from `ListQuery::default()` and set its fields). A match on one needs a `_` arm:
//! ```compile_fail,E0004
//! fn broken(error: &tollgate::VerifyError) -> bool {
//!     match error {
//!         tollgate::VerifyError::Read(_) => false,
//!         tollgate::VerifyError::Broken(_) => true,
//!     }
//! }
//! ```
//! The wire's closed sets stay exhaustive on purpose (docs/embedding.md, "What may grow"): a run's
//! [`RunStatus`], a call's [`Gate`] and [`CallState`], a [`Decision`], a
//! [`TerminationReason`](wire::TerminationReason), and the enums every consumer must handle one by one
//! ([`EventKind`], the runtime's operation errors such as [`DecideError`]): a new value is a breaking
//! change, and the compiler shows every match that must take it.
//! ```
//! fn settled(status: tollgate::RunStatus) -> bool {
//!     use tollgate::RunStatus::*;
//!     match status {
//!         Queued | Running => false,
//!         WaitingForApproval | Completed | Failed | Cancelled | Expired => true,
//!     }
//! }
//! # let _ = settled;
//! ```
//! The wire's listings of agents and tools are [`wire::AgentInfo`] and [`wire::ToolInfo`], so `Agent`
//! and `Tool` name only the builder's agent and the tool trait:
//! ```compile_fail,E0432
//! use tollgate::wire::Agent; // the builder's `Agent` is the only one
//! ```
//! ```compile_fail,E0432
//! use tollgate::wire::Tool; // the `Tool` trait is the only one
//! ```
//!
//! ## What is not public
//! The store port, the transition types and the stored row are not part of this crate's API: every
//! change to a run goes through the runtime's compare-and-set rules, so no embedder can write a run
//! behind the exactly-once rule. Each pair below differs only in the forbidden part; the first of each
//! compiles, the second must not (these are doc tests):
//!
//! ```
//! use tollgate::{Run, Tollgate};
//! fn reads(tollgate: &Tollgate, run: &Run) -> (Vec<String>, u64) {
//!     (tollgate.agent_names(), run.version)
//! }
//! ```
//! ```compile_fail,E0599
//! use tollgate::{Run, Tollgate};
//! fn reads(tollgate: &Tollgate, run: &Run) -> (Vec<String>, u64) {
//!     let _store = tollgate.store(); // no store port behind the runtime
//!     (tollgate.agent_names(), run.version)
//! }
//! ```
//! ```compile_fail,E0432
//! use tollgate::RunStore; // the store port is not re-exported
//! ```
//! ```compile_fail,E0609
//! use tollgate::{Run, Tollgate};
//! fn reads(tollgate: &Tollgate, run: &Run) -> (Vec<String>, u64, String) {
//!     (tollgate.agent_names(), run.version, run.last_hash.clone()) // no stored-row internals on a run
//! }
//! ```
//! ```compile_fail,E0432
//! use tollgate::Transition; // nor the transitions
//! ```
//! Nor are the checks the fuzz targets run: the implementation crates compile them only with their
//! `fuzzing` feature, which nothing of this crate enables.
//! ```compile_fail,E0432
//! use tollgate::wire::fuzzing;
//! ```

mod builder;
mod events;
mod held;

pub use builder::{Agent, AgentError, Builder, DEFAULT_STORE, Model};
pub use events::{DEFAULT_POLL_INTERVAL, EventStream};
pub use held::{Decisions, Held};

// Every type inside a public item of this crate is nameable from here, under one name each: the enums a
// run, a held call or an event carries (`Gate`, `RunStatus`, `Decision`, `Usage`, ...) are the wire's
// types, which the runtime's errors and the tools' gates use too.
pub use tollgate_agent_core::scripted::{Script, ScriptError};
pub use tollgate_agent_core::{ApprovalError, DecisionError, Requirement, TurnDigest};
pub use tollgate_agent_core::{BoxFuture, Clock, Millis, SystemClock, TraceContext, TraceContextError};
pub use tollgate_agent_core::{ChainBreak, ChainKey, ChainKeys, Conflict, StoreError, TransitionError};
pub use tollgate_agent_core::{
    ErrorContext, PolicyPath, Preview, RegistryError, Tool, ToolContext, ToolError, ToolOutput,
};
pub use tollgate_agent_core::{
    FinishReason, Message, ModelClient, ModelDelta, ModelDeltas, ModelError, ModelRequest, ModelResponse, ToolCall,
    ToolResult, ToolSpec,
};
pub use tollgate_agent_core::{FnTool, IntoTool, Metadata, Typed, TypedTool, tool_fn};
pub use tollgate_agent_core::{MetadataError, MetadataValueError};
pub use tollgate_agent_runtime::{
    CancelError, DecideError, LiveDelta, LiveText, OnExpiry, PrivacyLevel, ReadError, ResolveError, Retention,
    RunDeltas, StartError, Telemetry,
};
pub use tollgate_agent_store::{DataKey, DataKeyError, DataKeys};

/// The `schemars` crate the typed tools derive their schemas with (`#[derive(JsonSchema)]` needs
/// `schemars` as a dependency of your own, same major version, or `#[schemars(crate = "tollgate::schemars")]`).
pub use tollgate_agent_core::typed::{JsonSchema, schemars};

/// The JSON types of runs, calls and events, as Tollgate's HTTP API carries them (docs/api.md).
///
/// Named as in docs/api.md, except where the name is taken by another type of this crate: the agent
/// and tool listings are [`AgentInfo`](wire::AgentInfo) and [`ToolInfo`](wire::ToolInfo) (not the builder's
/// [`Agent`] or the [`Tool`] trait), and the data of the `model_request` and `model_response` events is
/// [`ModelRequestData`](wire::event_data::ModelRequestData) and
/// [`ModelResponseData`](wire::event_data::ModelResponseData) (not a [`ModelClient`]'s [`ModelRequest`] and
/// [`ModelResponse`]).
pub mod wire {
    pub use tollgate_agent_protocol::{
        Agent as AgentInfo, AgentList, Approvals, ApproveDecision, Call, CallDecision, CallResult, CallState,
        CancelRequest, Decision, DecisionRequest, DenyDecision, EditDecision, Event, EventData, EventDataError,
        EventKind, EventPage, Gate, Health, PROBLEM_BASE, PROBLEM_JSON, Pending, Problem, ProblemType, PurgeRequest,
        PurgeResult, RecordedDecision, RespondDecision, Run, RunError, RunErrorKind, RunPage, RunStatus,
        StartRunRequest, TerminationReason, Tool as ToolInfo, ToolList, Usage,
    };

    /// The typed `data` of each event kind ([`EventData::from_kind`]).
    pub mod event_data {
        pub use tollgate_agent_protocol::event_data::{
            ApprovalRequested, DecisionMade, EventData, EventDataError, GatedCall, LoggedDecision,
            ModelRequest as ModelRequestData, ModelResponse as ModelResponseData, ModelToolCall, RunCancelled,
            RunCompleted, RunExpired, RunFailed, RunResumed, RunStarted, RunTakenOver, ToolFinished, ToolStarted,
        };
    }
}
pub use tollgate_agent_protocol::{
    Actor, ApprovalId, Approvals, Call, CallId, CallResult, CallState, Decision, Event, EventKind, Gate,
    RecordedDecision, Run, RunId, RunStatus, Usage,
};

/// The built-in tools, confined to a workspace folder: `fs_list`, `fs_read`, `fs_search`, `fs_write`,
/// `fs_delete`, `time_now`, `shell` (sandboxed with Landlock where the kernel allows), and with the
/// `http-tool` feature `http_request`.
#[cfg(feature = "tools")]
pub mod tools {
    pub use tollgate_agent_tools::*;
}

/// MCP servers (stdio child processes) as tool sources: start one with `mcp::McpSource::start` and
/// offer its tools with [`Agent::tools`].
#[cfg(feature = "mcp")]
pub mod mcp {
    pub use tollgate_agent_mcp::{McpServerConfig, McpSource, McpTool, StartError as McpStartError, StartFailure};
}

/// Tollgate's HTTP API as a router of your service ([`Tollgate::router_with`]): its options, API tokens
/// and roles, webhooks, notifiers and their signed links.
#[cfg(feature = "server")]
pub mod server {
    pub use tollgate_agent_server::{
        ApiToken, EmailNotifier, EmailSettings, LOCAL_ACTOR, LinkSecret, Notifier, NotifyRetry, Role, Router,
        SIGNATURE_HEADER, ServerError, ServerOptions, SetupError, ShortLinkSecret, SlackNotifier, Transport,
        WebhookRetry, WebhookTarget, signature,
    };
}

/// The HTTP model providers' settings.
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub mod providers {
    #[cfg(feature = "anthropic")]
    pub use tollgate_agent_providers::AnthropicModel;
    #[cfg(feature = "openai")]
    pub use tollgate_agent_providers::OpenAiModel;
    pub use tollgate_agent_providers::{ApiKey, ProviderError, ProviderSettings};
}

use std::future::IntoFuture;
use std::sync::{Arc, Mutex, PoisonError};
use tollgate_agent_runtime::maintenance::Maintenance;
use tollgate_agent_runtime::{DecisionSet, Runtime};

/// The actor named on the record when none is given: `local`, as for the CLI and a server without
/// tokens.
pub const DEFAULT_ACTOR: &str = "local";

/// The runs listed per page when no limit is given.
pub const DEFAULT_PAGE: u32 = 50;

/// Why [`Builder::build`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No agent was added.
    #[error("no agent: add one with `.agent(Agent::new(..))`")]
    NoAgent,
    /// An agent cannot be built: no model, a model that failed to set up, two tools with one name, an
    /// invalid argument schema, two agents with one name.
    #[error("agent `{name}`: {error}")]
    Agent {
        /// The agent.
        name: String,
        /// What is wrong.
        error: AgentError,
    },
    /// The store cannot be opened (its URL, without a password, and why).
    #[error("store {url}: {error}")]
    Store {
        /// The store URL, password hidden.
        url: String,
        /// Why.
        error: StoreError,
    },
}

/// Why [`Tollgate::pending`] has no held turn to give.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PendingError {
    /// No run has this id.
    #[error("run {0} not found")]
    NotFound(RunId),
    /// The run is not waiting for approval (it runs, or has ended).
    #[error("run {id} is {}, not waiting for approval", status.as_str())]
    NotWaiting {
        /// The run.
        id: RunId,
        /// Its status.
        status: RunStatus,
    },
    /// The store failed (retryable when the store error is).
    #[error(transparent)]
    Store(StoreError),
}

impl PendingError {
    /// True when the same request may succeed later: only when the store failed in a way that may pass
    /// (a run that is not found, or not waiting, stays so until someone acts on it).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let tollgate = tollgate::Tollgate::builder()
    /// #     .store("sqlite::memory:")
    /// #     .agent(tollgate::Agent::new("chat").model(tollgate::Model::scripted_json(r#"{"turns": [{"text": "hi"}]}"#)))
    /// #     .build()
    /// #     .await?;
    /// let run = tollgate.start("hello").wait().await?; // completed: nothing to decide
    /// let error = tollgate.pending(&run.id).await.err();
    /// assert!(matches!(error, Some(tollgate::PendingError::NotWaiting { .. })));
    /// assert!(error.is_some_and(|e| !e.is_retryable()));
    /// # Ok(()) }
    /// ```
    pub fn is_retryable(&self) -> bool {
        match self {
            PendingError::NotFound(_) | PendingError::NotWaiting { .. } => false,
            PendingError::Store(error) => error.is_retryable(),
        }
    }
}

impl From<ReadError> for PendingError {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::NotFound(id) => PendingError::NotFound(id),
            ReadError::Store(error) => PendingError::Store(error),
        }
    }
}

/// Why a run's hash chain could not be checked, or where it breaks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The run could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The chain breaks at this event: the record was altered.
    #[error("the run's event chain is broken: {0}")]
    Broken(ChainBreak),
}

/// Which runs [`Tollgate::list`] gives.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListQuery {
    /// Only runs with this status.
    pub status: Option<RunStatus>,
    /// Only runs of this agent.
    pub agent: Option<String>,
    /// At most this many (default [`DEFAULT_PAGE`], at most 1,000).
    pub limit: u32,
    /// Continue after this cursor (a previous page's `next_cursor`).
    pub cursor: Option<String>,
}

impl Default for ListQuery {
    fn default() -> Self {
        Self { status: None, agent: None, limit: DEFAULT_PAGE, cursor: None }
    }
}

impl ListQuery {
    /// Runs with this status, newest first.
    pub fn status(status: RunStatus) -> Self {
        Self { status: Some(status), ..Self::default() }
    }
}

/// The runtime, embedded: start runs, read them, decide the calls held at the gate, follow their events.
/// Cheap to clone; clones share one runtime.
#[derive(Clone)]
pub struct Tollgate {
    runtime: Runtime,
    maintenance: Arc<Mutex<Option<Maintenance>>>,
    /// The webhook deliveries of the routers made with webhooks ([`Tollgate::router_with`]).
    #[cfg(feature = "server")]
    webhooks: Arc<Mutex<Vec<tollgate_agent_server::WebhookDelivery>>>,
}

impl std::fmt::Debug for Tollgate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tollgate").field("agents", &self.agent_names()).finish_non_exhaustive()
    }
}

impl Tollgate {
    /// Starts assembling a runtime.
    pub fn builder() -> Builder {
        Builder::default()
    }

    pub(crate) fn assemble(runtime: Runtime, maintenance: Option<Maintenance>) -> Self {
        Self {
            runtime,
            maintenance: Arc::new(Mutex::new(maintenance)),
            #[cfg(feature = "server")]
            webhooks: Arc::default(),
        }
    }

    /// The agents' names, the default first.
    pub fn agent_names(&self) -> Vec<String> {
        self.runtime.agents().map(|a| a.name.clone()).collect()
    }

    /// Starts a run of the default agent on `input`. Configure it with the [`Start`] methods, then
    /// `.await` it: the answer is the run as created (`running`, driven in the background by this
    /// process; `queued` when all of its workers ([`Builder::workers`]) are busy, driven as one comes
    /// free, here or by another worker process), or with [`Start::wait`] the run once it waits for
    /// approval or has ended.
    pub fn start(&self, input: impl Into<String>) -> Start<'_> {
        Start {
            tollgate: self,
            input: input.into(),
            agent: None,
            actor: Actor::from(DEFAULT_ACTOR),
            metadata: serde_json::Map::new(),
            trace_parent: None,
            wait: false,
        }
    }

    /// The run with this id.
    pub async fn get(&self, id: &RunId) -> Result<Run, ReadError> {
        let run = self.runtime.get(id).await?;
        Ok(tollgate_agent_runtime::wire::run(&run))
    }

    /// The full id of the one run whose id starts with `prefix` (at least 4 characters).
    pub async fn resolve(&self, prefix: &str) -> Result<RunId, ResolveError> {
        self.runtime.resolve(prefix).await
    }

    /// A page of runs, newest first. Runs whose stored data cannot be read are left out of the page (read
    /// one by id for its error).
    pub async fn list(&self, query: ListQuery) -> Result<wire::RunPage, StoreError> {
        let page = self
            .runtime
            .list(tollgate_agent_core::RunQuery {
                status: query.status,
                agent: query.agent,
                limit: query.limit.clamp(1, 1000),
                cursor: query.cursor,
            })
            .await?;
        Ok(wire::RunPage {
            runs: page.runs.iter().map(tollgate_agent_runtime::wire::run).collect(),
            next_cursor: page.next_cursor,
        })
    }

    /// Waits until the run waits for approval or has ended, and gives it.
    pub async fn wait(&self, id: &RunId) -> Result<Run, ReadError> {
        let run = self.runtime.wait_settled(id).await?;
        Ok(tollgate_agent_runtime::wire::run(&run))
    }

    /// The turn a waiting run holds at the gate, with every call, its preview and where it stands.
    pub async fn pending(&self, id: &RunId) -> Result<Held, PendingError> {
        let run = self.get(id).await?;
        match run.pending {
            Some(held) if run.status == RunStatus::WaitingForApproval => Ok(Held {
                run_id: run.id,
                digest: held.turn_digest,
                expires_at: held.expires_at,
                started_by: run.created_by,
                calls: held.calls,
            }),
            _ => Err(PendingError::NotWaiting { id: run.id, status: run.status }),
        }
    }

    /// Records decisions on a held turn. Configure with the [`Decide`] methods, then `.await`: the
    /// answer is the run after the decisions were recorded (`running` when they completed the set and
    /// resumed it), or with [`Decide::wait`] the run once it waits again or has ended.
    pub fn decide(&self, decisions: Decisions) -> Decide<'_> {
        Decide { tollgate: self, decisions, actor: Actor::from(DEFAULT_ACTOR), wait: false }
    }

    /// Cancels a run that has not ended; `reason` goes on the record.
    pub async fn cancel(&self, id: &RunId, reason: Option<&str>) -> Result<Run, CancelError> {
        self.cancel_by(id, &Actor::from(DEFAULT_ACTOR), reason).await
    }

    /// Cancels a run on behalf of `actor`.
    pub async fn cancel_by(&self, id: &RunId, actor: &Actor, reason: Option<&str>) -> Result<Run, CancelError> {
        let run = self.runtime.cancel(id, actor, reason).await?;
        Ok(tollgate_agent_runtime::wire::run(&run))
    }

    /// A run's events, live (see [`EventStream`]); `.after(seq)` to start later.
    pub fn events(&self, id: &RunId) -> EventStream {
        EventStream::new(self.runtime.clone(), id.clone())
    }

    /// The model's live text, as this process's streaming model calls receive it: every run's deltas
    /// (filter by [`LiveDelta::run_id`]). Live only: never stored, never replayed, and a receiver that
    /// falls behind loses some; each round's `model_response` event holds the whole text.
    pub fn deltas(&self) -> tokio::sync::broadcast::Receiver<Arc<LiveDelta>> {
        self.runtime.deltas()
    }

    /// Run `id`'s live model text from now on: [`deltas`](Self::deltas) with other runs' left out, as
    /// Tollgate's HTTP API streams it (`GET /v1/runs/{id}/events?deltas=true`) and the CLI prints it.
    /// [`RunDeltas::next`] waits for the next delta, [`RunDeltas::try_next`] takes one already received.
    /// The same promises as `deltas`: this process's model calls only, live only (a receiver that falls
    /// behind loses some), sent only at privacy level `full` and through the redactor; a
    /// [`LiveText::Reset`] voids the round's text so far (the call is tried again).
    ///
    /// A run started without [`Start::wait`] is driven at once, in the background: to miss none of its
    /// first model call, subscribe before starting it and filter later, `RunDeltas::new(tollgate.deltas(),
    /// &run.id)`.
    ///
    /// ```
    /// # use tollgate::{Agent, Gate, LiveText, Model, Tollgate, ToolOutput, tool_fn};
    /// # #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// # struct NoArgs {}
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // A scripted model streams a turn's text in `stream_chunks` deltas, as a streaming provider would.
    /// let model = Model::scripted_json(r#"{"turns": [
    ///     {"tool_calls": [{"name": "pay"}]},
    ///     {"text": "Paid Bob 250 dollars.", "stream_chunks": 3}
    /// ]}"#);
    /// let pay = tool_fn("pay", "Pays Bob.", |_: NoArgs, _| async { Ok(ToolOutput::text("paid")) })
    ///     .gate(|_, _| Gate::Ask);
    /// let tollgate =
    ///     Tollgate::builder().store("sqlite::memory:").agent(Agent::new("bank").model(model).tool(pay)).build().await?;
    ///
    /// let run = tollgate.start("Pay Bob").wait().await?; // waits at the gate
    /// let mut deltas = tollgate.run_deltas(&run.id); // before the resume: nothing of it is missed
    /// let held = tollgate.pending(&run.id).await?;
    /// let run = tollgate.decide(held.approve_all()).wait().await?;
    ///
    /// let mut streamed = Vec::new();
    /// while let Some(delta) = deltas.try_next() {
    ///     if let LiveText::Text(text) = &delta.text {
    ///         streamed.push(text.clone());
    ///     }
    /// }
    /// assert_eq!(streamed.len(), 3);
    /// assert_eq!(Some(streamed.concat()), run.output); // the deltas add up to the turn's text
    /// # Ok(()) }
    /// ```
    pub fn run_deltas(&self, id: &RunId) -> RunDeltas {
        self.runtime.run_deltas(id)
    }

    /// Checks a run's hash-chained event log from the first event to the run's recorded head; the answer
    /// is the number of events checked.
    pub async fn verify(&self, id: &RunId) -> Result<u64, VerifyError> {
        self.runtime.verify(id).await?.map_err(VerifyError::Broken)
    }

    /// Tollgate's HTTP API (docs/api.md), live events over SSE and the playground, as an axum router to
    /// serve or to nest under a path of your own service. No authentication is configured: put it behind
    /// yours, or use the `tollgate serve` binary with `[[auth.tokens]]`. The process becomes a worker
    /// ([`Builder::workers`]): the API queues the runs it starts, and this process claims them.
    #[cfg(feature = "server")]
    pub fn router(&self) -> server::Router {
        tollgate_agent_server::router(self.runtime.clone(), &server::ServerOptions::default())
    }

    /// [`router`](Self::router) with options: API tokens and their roles (with tokens, every request but
    /// `/healthz` needs `Authorization: Bearer TOKEN`, and each role may do only its part), webhooks,
    /// notifiers with their link secret and `public_url`, the body limit, the live streams per client.
    /// Fields about listening (`addr`, timeouts, connection caps) do not apply: your server listens.
    /// Webhooks and notifications are sent as `tollgate serve` sends them (from the store's commit log,
    /// by one process on the store at a time) until [`shutdown`](Self::shutdown); await
    /// [`deliveries_positioned`](Self::deliveries_positioned) before serving. Set `public_url` to where
    /// your service serves this router, which the signed links in notifications start with.
    ///
    /// # Errors
    /// [`server::ServerError::Options`] for a webhook URL that is not a URL, or notifiers without a link
    /// secret, with two of the same name, deciding as an actor no approver token has, or a `public_url`
    /// that is not an `http(s)://` URL.
    #[cfg(feature = "server")]
    pub fn router_with(&self, options: &server::ServerOptions) -> Result<server::Router, server::ServerError> {
        let (router, delivery) = tollgate_agent_server::router_with_webhooks(self.runtime.clone(), options)?;
        if let Some(delivery) = delivery {
            self.webhooks.lock().unwrap_or_else(PoisonError::into_inner).push(delivery);
        }
        Ok(router)
    }

    /// Waits (at most 5 s) until the webhook deliveries and notifications of the routers made with
    /// [`router_with`](Self::router_with) hold their place in the store's commit log. A place taken for
    /// the first time is the log's end, so a run committed before it is not delivered: await this before
    /// your service takes its first request.
    #[cfg(feature = "server")]
    pub async fn deliveries_positioned(&self) {
        let waits: Vec<_> = {
            let deliveries = self.webhooks.lock().unwrap_or_else(PoisonError::into_inner);
            deliveries.iter().map(tollgate_agent_server::WebhookDelivery::positioned).collect()
        };
        for wait in waits {
            wait.await;
        }
    }

    /// Stops taking on work and gives back the runs this process is driving: each stops at its next
    /// step boundary (once the model call or tool call under way has returned), keeps what it did, and
    /// is queued for the next worker process on the store ([`Builder::workers`]; this one after a
    /// restart, if it is one); shell commands still running are killed. Runs waiting for approval are
    /// unaffected: they stay in the store for any process to resume. The webhook deliveries of
    /// `router_with` (feature `server`) get up to 5 s to finish; where they got is stored, and another
    /// process on the store continues.
    pub async fn shutdown(&self) {
        self.runtime.stop_taking_work();
        let maintenance = self.maintenance.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(maintenance) = &maintenance {
            maintenance.wind_down();
        }
        self.runtime.drain().await;
        if let Some(maintenance) = maintenance {
            maintenance.stop();
        }
        #[cfg(feature = "server")]
        {
            let deliveries = std::mem::take(&mut *self.webhooks.lock().unwrap_or_else(PoisonError::into_inner));
            for delivery in deliveries {
                delivery.stop().await;
            }
        }
        #[cfg(feature = "tools")]
        tollgate_agent_tools::kill_running_commands();
    }
}

/// A run about to start; `.await` it. From [`Tollgate::start`].
#[must_use = "a run starts only when this is awaited"]
pub struct Start<'a> {
    tollgate: &'a Tollgate,
    input: String,
    agent: Option<String>,
    actor: Actor,
    metadata: serde_json::Map<String, serde_json::Value>,
    trace_parent: Option<TraceContext>,
    wait: bool,
}

impl Start<'_> {
    /// Runs this agent instead of the default one.
    pub fn agent(mut self, name: impl Into<String>) -> Self {
        self.agent = Some(name.into());
        self
    }

    /// Who starts it, on the record (default [`DEFAULT_ACTOR`]).
    pub fn by(mut self, actor: impl Into<Actor>) -> Self {
        self.actor = actor.into();
        self
    }

    /// Data of yours for the run's tools (`ToolContext::metadata`), stored with the run: which
    /// customer, which tenant. A JSON object of at most 16 KiB.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<serde_json::Value>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Answers once the run waits for approval or has ended, instead of as soon as it is created.
    pub fn wait(mut self) -> Self {
        self.wait = true;
        self
    }

    /// Joins your trace: with [`Builder::telemetry`] set, the run's spans go into the trace of `parent`
    /// (your current span's W3C `traceparent`, parsed) as children of that span, and are recorded only
    /// if it was sampled. Without it the run starts a trace of its own. docs/telemetry.md.
    ///
    /// ```
    /// # async fn demo(tollgate: &tollgate::Tollgate) -> Result<(), Box<dyn std::error::Error>> {
    /// use tollgate::TraceContext;
    /// let parent = TraceContext::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")?;
    /// let run = tollgate.start("Refund order 42").trace_parent(parent).await?;
    /// # let _ = run;
    /// # Ok(()) }
    /// ```
    pub fn trace_parent(mut self, parent: TraceContext) -> Self {
        self.trace_parent = Some(parent);
        self
    }
}

impl<'a> IntoFuture for Start<'a> {
    type Output = Result<Run, StartError>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let runtime = &self.tollgate.runtime;
            let request = tollgate_agent_runtime::StartRun {
                agent: self.agent.as_deref(),
                input: &self.input,
                actor: self.actor,
                metadata: self.metadata,
                trace_parent: self.trace_parent,
            };
            let run = if self.wait { runtime.start_and_wait(request).await? } else { runtime.start(request).await? };
            Ok(tollgate_agent_runtime::wire::run(&run))
        })
    }
}

/// Decisions about to be recorded; `.await` it. From [`Tollgate::decide`].
#[must_use = "decisions are recorded only when this is awaited"]
pub struct Decide<'a> {
    tollgate: &'a Tollgate,
    decisions: Decisions,
    actor: Actor,
    wait: bool,
}

impl Decide<'_> {
    /// Who decides, on the record (default [`DEFAULT_ACTOR`]).
    pub fn by(mut self, actor: impl Into<Actor>) -> Self {
        self.actor = actor.into();
        self
    }

    /// When the decisions resume the run, answers once it waits again or has ended.
    pub fn wait(mut self) -> Self {
        self.wait = true;
        self
    }
}

impl<'a> IntoFuture for Decide<'a> {
    type Output = Result<Run, DecideError>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let runtime = &self.tollgate.runtime;
            let digest = self.decisions.digest.clone();
            let id = self.decisions.run_id.clone();
            let set: DecisionSet = self.decisions.into_set();
            let run = if self.wait {
                let loaded = runtime.get(&id).await.map_err(DecideError::from)?;
                runtime.decide_and_wait(&loaded, &digest, set, &self.actor).await?
            } else {
                runtime.decide(&id, &digest, set, &self.actor).await?
            };
            Ok(tollgate_agent_runtime::wire::run(&run))
        })
    }
}

/// Picks the process-wide TLS provider that sqlx's and reqwest's rustls use (aws-lc-rs), once; a
/// provider the embedder installed first is kept.
fn install_crypto_provider() {
    #[cfg(any(feature = "postgres", feature = "openai", feature = "anthropic", feature = "http-tool"))]
    {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
}
