//! The tool loop: model call → gate the whole turn → run the calls or suspend → repeat.
//!
//! Invariants this module keeps (docs/design.md, "The loop"):
//! - a turn is gated as a whole before any of its calls runs; if one call asks, nothing of the turn runs
//!   and the loop returns [`Outcome::Suspended`];
//! - an ask-gated call runs only with an `approve` or `edit` decision for its `call_id`;
//! - before the model is called again, every call of the previous turn has exactly one result;
//! - no failure of a tool (error, panic, unknown name, bad arguments) aborts the run: it becomes an error
//!   result for the model, and the tool's internal error text goes to the log only.

use crate::BoxFuture;
use crate::approval::Requirement;
use crate::grant::{GrantRecord, first_allowing};
use crate::model::{ModelClient, ModelDelta, ModelDeltas, ModelError, ModelRequest, ModelResponse};
use crate::redact::Redactor;
use crate::suspension::{Decision, DecisionError, Decisions, HeldCall, HeldCallState, Suspension};
use crate::tool::{Gate, Preview, RegisteredTool, RunScope, ToolContext, ToolOutput, ToolPin, ToolRegistry, ToolSpec};
use crate::transcript::{Counters, Invocation, Message, ToolCall, ToolResult};
use futures_util::{FutureExt, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tollgate_agent_protocol::{CallId, GrantId};

/// The error result a call gets when the iteration cap is reached with calls still pending.
pub const ITERATION_LIMIT_RESULT: &str = "not executed: iteration limit reached";

/// The error result each call of the last turn gets when the token budget ends the run.
pub const BUDGET_RESULT: &str = "not executed: token budget exhausted";

/// How one agent's loop behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopConfig {
    /// The model name passed to the provider.
    pub model: String,
    /// The system prompt, if any.
    pub system_prompt: Option<String>,
    /// Model calls allowed over the whole run (every segment); at least 1.
    pub max_iterations: u32,
    /// Token budget (input + output) over the whole run.
    pub max_tokens: Option<u64>,
    /// A tool result longer than this many bytes is cut, with a visible marker.
    pub result_cap_bytes: usize,
    /// How many allow-gated calls of one turn may run at once.
    pub concurrency: usize,
    /// Removes configured secrets from every tool result before the model, the transcript or an event
    /// sees it (empty: nothing to remove).
    pub redactor: Redactor,
}

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            model: String::new(),
            system_prompt: None,
            max_iterations: 10,
            max_tokens: None,
            result_cap_bytes: 50_000,
            concurrency: 8,
            redactor: Redactor::default(),
        }
    }
}

/// Why a run ended: the wire's type, as a run object's `termination_reason` carries it.
pub use tollgate_agent_protocol::TerminationReason;

/// A finished run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    /// The final text (null when the last response had none).
    pub output: Option<String>,
    /// Why it ended.
    pub reason: TerminationReason,
    /// The whole transcript.
    pub transcript: Vec<Message>,
    /// Counters over every segment.
    pub counters: Counters,
    /// Every tool invocation over every segment.
    pub trace: Vec<Invocation>,
}

/// What a segment of the loop returns.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The run finished.
    Completed(Completion),
    /// The run waits at the gate; nothing of the held turn ran.
    Suspended(Suspension),
}

/// Something the loop reports as it goes, so an outer layer can persist it.
#[derive(Debug)]
pub enum LoopEvent<'a> {
    /// About to call the model.
    ModelRequest {
        /// The model call this is (1-based; the closing completion is max_iterations + 1).
        round: u32,
        /// Messages sent.
        messages: usize,
        /// Tools offered.
        tools: &'a [ToolSpec],
    },
    /// The model answered.
    ModelResponse {
        /// The model call.
        round: u32,
        /// Its response.
        response: &'a ModelResponse,
    },
    /// A call is about to run. For an ask-gated call the hook must make this durable before returning:
    /// the call runs only after it returns `Ok`.
    ToolStarted {
        /// The model call whose turn holds the call.
        round: u32,
        /// The call's id.
        call_id: &'a CallId,
        /// The tool.
        tool: &'a str,
        /// The arguments it will run with.
        arguments: &'a Value,
        /// Its gate (`ask` for calls a person approved or a grant allowed).
        gate: Gate,
        /// The grant that allowed the call, if one did (V2.md, grants).
        grant: Option<&'a GrantId>,
    },
    /// A call ran.
    ToolFinished {
        /// The model call whose turn holds the call.
        round: u32,
        /// Its result as the model will see it.
        result: &'a ToolResult,
    },
}

/// A hook that could not do its job (e.g. the store was unreachable); the loop stops.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HookError(pub String);

/// Observes a loop's progress; the durable runtime persists through it.
pub trait LoopHooks: Send + Sync {
    /// Called for each event, in order. An `Err` stops the loop with [`LoopError::Hook`].
    fn on_event<'a>(&'a self, event: LoopEvent<'a>) -> BoxFuture<'a, Result<(), HookError>>;

    /// Called for each delta of model call `round` while a streaming model answers (between its
    /// [`LoopEvent::ModelRequest`] and [`LoopEvent::ModelResponse`]). Live only: nothing of it is part of
    /// the run's record. Must not block; does nothing by default.
    fn on_delta(&self, round: u32, delta: ModelDelta<'_>) {
        let _ = (round, delta);
    }

    /// The grants in force for this run now (V2.md, grants): active, of the run's agent, for every run of
    /// it or this one, and usable on this run (not a grant its agent's `forbid_self_approval` bars on a
    /// run its creator started), oldest first. Read when a turn reaches the gate with calls that ask, so a
    /// revocation committed before is honoured; none by default. Shared (`Arc`), so that a reader that
    /// keeps an agent's grants decoded between gate checks hands out the same list each time.
    fn grants_in_force(&self) -> BoxFuture<'_, Result<Arc<[GrantRecord]>, HookError>> {
        Box::pin(std::future::ready(Ok(Arc::from(Vec::new()))))
    }
}

/// A model call's deltas, handed to the hooks with the call's round.
struct RoundDeltas<'a> {
    hooks: &'a dyn LoopHooks,
    round: u32,
}

impl ModelDeltas for RoundDeltas<'_> {
    fn delta(&self, delta: ModelDelta<'_>) {
        self.hooks.on_delta(self.round, delta);
    }
}

/// Hooks that do nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHooks;

impl LoopHooks for NoHooks {
    fn on_event<'a>(&'a self, _event: LoopEvent<'a>) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// Why a segment could not finish or suspend.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    /// A model call failed (after the adapter's own retries).
    #[error("model call {round} failed: {source}")]
    Model {
        /// The model call.
        round: u32,
        /// What failed.
        source: ModelError,
    },
    /// The decisions cannot resume the suspension; nothing ran.
    #[error(transparent)]
    Decision(#[from] DecisionError),
    /// A hook failed; the loop stopped.
    #[error("could not record the run's progress: {0}")]
    Hook(#[from] HookError),
}

/// A loop the runtime can drive; implemented by [`ToolLoop`] and by test doubles.
pub trait AgentLoop: Send + Sync {
    /// The model provider, as traces name it (`gen_ai.system`); `unknown` unless the loop says.
    fn system(&self) -> &str {
        "unknown"
    }

    /// The model provider's server (`server.address`, `server.port`); `None` unless the loop says.
    fn server(&self) -> Option<(&str, u16)> {
        None
    }

    /// Starts a run on an input. Every tool call of the segment gets a context made from `scope`.
    fn start<'a>(
        &'a self,
        scope: &'a RunScope,
        input: &'a str,
        hooks: &'a dyn LoopHooks,
    ) -> BoxFuture<'a, Result<Outcome, LoopError>>;

    /// Checks one decision against a suspension without resuming (see [`ToolLoop::check_decision`]).
    /// `scope` is the run's: the gate of an edit is asked in the call's context.
    fn check_decision<'a>(
        &'a self,
        scope: &'a RunScope,
        suspension: &'a Suspension,
        call_id: &'a CallId,
        decision: &'a Decision,
    ) -> BoxFuture<'a, Result<(), DecisionError>>;

    /// Plans resuming `suspension` with a decision for every call that takes one, once ([`ResumePlan`]).
    /// Refuses decisions that do not fit the turn (an unknown call, one that takes no decision, one
    /// missing); edited arguments the live tool refuses are planned as that call's error result, and
    /// said by [`ResumePlan::refused_edit`]. `grants` are the grants in force for the run now
    /// ([`LoopHooks::grants_in_force`]): a call a grant allowed when the turn was held runs only if that
    /// grant still allows it, else it is its own error result. `scope` is the run's, as at its start: the
    /// gates asked again get each call's context from it.
    fn plan_resume<'a>(
        &'a self,
        scope: &'a RunScope,
        suspension: &'a Suspension,
        decisions: &'a Decisions,
        grants: &'a [GrantRecord],
    ) -> BoxFuture<'a, Result<ResumePlan, DecisionError>>;

    /// The grant among `grants` that would allow `call` at the gate now, if one would: the call asks (not
    /// in doubt, not a quorum) and its tool lets a grant allow it, matched on its arguments as the tool
    /// resolves them. What `apply_to_waiting` asks of each held call of a waiting run.
    fn granted(&self, call: &HeldCall, grants: &[GrantRecord]) -> Option<GrantId>;

    /// Executes a plan made by [`plan_resume`](Self::plan_resume) for `suspension`: the held turn's calls
    /// as planned, then the loop goes on. `scope` is the run's, as at its start: the suspension does not
    /// carry it.
    fn resume_planned<'a>(
        &'a self,
        scope: &'a RunScope,
        suspension: Suspension,
        plan: ResumePlan,
        hooks: &'a dyn LoopHooks,
    ) -> BoxFuture<'a, Result<Outcome, LoopError>>;

    /// Resumes a suspension with a decision for every call that takes one: plans it, refusing edited
    /// arguments the live tool refuses ([`DecisionError::InvalidEdit`]), and executes the plan. `scope`
    /// is the run's, as at its start: the suspension does not carry it. No grant is in force: a call a
    /// grant allowed is planned as its error result (use [`plan_resume`](Self::plan_resume) with the
    /// grants).
    fn resume<'a>(
        &'a self,
        scope: &'a RunScope,
        suspension: Suspension,
        decisions: &'a Decisions,
        hooks: &'a dyn LoopHooks,
    ) -> BoxFuture<'a, Result<Outcome, LoopError>> {
        Box::pin(async move {
            let plan = self.plan_resume(scope, &suspension, decisions, &[]).await?;
            // Arguments failing the tool's schema or checks refuse the resume; arguments the gate forbids
            // are the call's error result, as any gate that changed since the turn was held.
            if let Some((call_id, refusal)) = plan.refused.iter().find(|(_, r)| !r.forbidden) {
                let (call_id, message) = (call_id.clone(), refusal.message.clone());
                return Err(DecisionError::InvalidEdit { call_id, message }.into());
            }
            self.resume_planned(scope, suspension, plan, hooks).await
        })
    }
}

/// A call about to run, as [`LoopEvent::ToolStarted`] will announce it.
#[derive(Clone, Debug, PartialEq)]
pub struct StartingCall {
    /// The call's id.
    pub call_id: CallId,
    /// The tool.
    pub tool: String,
    /// The arguments it will run with (an edit's, when edited).
    pub arguments: Value,
    /// Its gate.
    pub gate: Gate,
    /// The grant that allows it, if one does.
    pub grant: Option<GrantId>,
}

/// The transcript, counters and trace carried through a segment.
struct LoopState {
    transcript: Vec<Message>,
    counters: Counters,
    trace: Vec<Invocation>,
}

impl LoopState {
    fn finish(self, output: Option<String>, reason: TerminationReason) -> Outcome {
        Outcome::Completed(Completion {
            output,
            reason,
            transcript: self.transcript,
            counters: self.counters,
            trace: self.trace,
        })
    }
}

/// What cleared a call of a held turn to run, as the resume's recheck weighs it.
#[derive(Clone, Copy)]
enum Cleared<'a> {
    /// People, under this requirement; `None` for a call that took no decision (its gate allowed it).
    Decided(Option<Requirement>),
    /// This grant, which must still be among the grants in force and allow the call.
    Granted { grant: &'a GrantId, in_force: &'a [GrantRecord] },
}

/// A call of a turn on its way to exactly one result. `observed` is what the preview a person approved
/// the call on observed: `None` for an allowed call and for edited arguments (never previewed).
#[derive(Clone, Debug, PartialEq)]
enum Step {
    Settled(ToolResult),
    Run {
        call_id: CallId,
        tool: String,
        arguments: Value,
        gate: Gate,
        edited: bool,
        observed: Option<Value>,
        grant: Option<GrantId>,
    },
}

/// A call about to be invoked: what its `tool_started` names, and what its context carries.
/// `announced`: its `tool_started` was committed already (with the claim of the resume), so the hook is
/// not told again.
struct Invoked<'a> {
    call_id: &'a CallId,
    tool: &'a str,
    gate: Gate,
    grant: Option<&'a GrantId>,
    edited: bool,
    observed: Option<Value>,
    announced: bool,
}

impl<'a> Invoked<'a> {
    /// An allow-gated call: nothing observed to check, its start announced as it starts.
    fn allowed(call_id: &'a CallId, tool: &'a str, edited: bool) -> Invoked<'a> {
        Invoked { call_id, tool, gate: Gate::Allow, grant: None, edited, observed: None, announced: false }
    }
}

/// What resuming a held turn does, planned once ([`AgentLoop::plan_resume`]) from the suspension and a
/// decision for every call that takes one, against the live tools: each call of the turn runs (with the
/// arguments it runs with) or has its result (a denial, a response, a refusal). Executed by
/// [`AgentLoop::resume_planned`] as it is, without planning or checking anything again.
///
/// A call that cannot run as decided when the plan is made — its tool gone or changed, its gate now
/// `forbid`, its policy now asking for more approvals, edited arguments its tool now refuses — is planned
/// as its own error result, so the rest of the turn runs and the run goes on.
#[derive(Clone, Debug, PartialEq)]
pub struct ResumePlan {
    steps: Vec<Step>,
    /// Edits the live tool refused while planning, by call id, with why: each such call ends as its
    /// error result.
    refused: BTreeMap<CallId, Refusal>,
    /// The call whose `tool_started` was committed with the claim of the resume (see
    /// [`ResumePlan::commit_first_start`]).
    started: Option<CallId>,
}

impl ResumePlan {
    /// The call the plan runs first, when a person decided it (approved or edited) and nothing runs
    /// before it: its `tool_started` may be committed together with the claim of the resume.
    pub fn first_decided(&self) -> Option<StartingCall> {
        match self.steps.iter().find(|step| matches!(step, Step::Run { .. }))? {
            Step::Run { call_id, tool, arguments, gate, grant, .. } if *gate != Gate::Allow => Some(StartingCall {
                call_id: call_id.clone(),
                tool: tool.clone(),
                arguments: arguments.clone(),
                gate: *gate,
                grant: grant.clone(),
            }),
            _ => None,
        }
    }

    /// Marks the start of [`first_decided`](Self::first_decided) as committed (with the claim): the
    /// loop runs the call without announcing its `tool_started` again. Answers that call, if any.
    pub fn commit_first_start(&mut self) -> Option<StartingCall> {
        let first = self.first_decided()?;
        self.started = Some(first.call_id.clone());
        Some(first)
    }

    /// Why the live tool refused the edited arguments of `call_id` when the plan was made (they fail its
    /// schema or checks, or its gate forbids them), if it did.
    pub fn refused_edit(&self, call_id: &CallId) -> Option<&str> {
        self.refused.get(call_id).map(|r| r.message.as_str())
    }
}

/// An edit the live tool refused while planning a resume.
#[derive(Clone, Debug, PartialEq)]
struct Refusal {
    /// Why.
    message: String,
    /// The tool's gate forbids the arguments (a policy matter, which the resume's recheck reports as the
    /// call's error result), rather than the arguments failing its schema or checks.
    forbidden: bool,
}

/// The provider-neutral tool loop.
pub struct ToolLoop {
    model: Arc<dyn ModelClient>,
    tools: Arc<ToolRegistry>,
    specs: Vec<ToolSpec>,
    config: LoopConfig,
}

impl ToolLoop {
    /// A loop over a model and a set of tools.
    pub fn new(model: Arc<dyn ModelClient>, tools: Arc<ToolRegistry>, config: LoopConfig) -> Self {
        let specs = tools.specs();
        Self { model, tools, specs, config }
    }

    /// The configuration.
    pub fn config(&self) -> &LoopConfig {
        &self.config
    }

    /// The tools offered.
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// Checks one decision against a suspension without resuming: the call exists and takes a decision,
    /// and edited arguments pass the live tool's schema and checks and are not ones its gate (policy
    /// included) forbids in the run's `scope`.
    pub async fn check_decision(
        &self,
        scope: &RunScope,
        suspension: &Suspension,
        call_id: &CallId,
        decision: &Decision,
    ) -> Result<(), DecisionError> {
        self.check_decided(suspension, call_id, decision).await?;
        self.forbidden_edit(scope, suspension, call_id, decision).map_or(Ok(()), Err)
    }

    /// An edit into arguments its tool's gate (policy included) forbids: refused before anything is
    /// recorded, rather than recorded as the approver's and then not run. (A gate that changes after the
    /// decision was taken is the resume's recheck: the call then gets an error result.)
    fn forbidden_edit(
        &self,
        scope: &RunScope,
        suspension: &Suspension,
        call_id: &CallId,
        decision: &Decision,
    ) -> Option<DecisionError> {
        let Decision::Edit { arguments } = decision else { return None };
        let call = suspension.call(call_id)?;
        let registered = self.tools.get(&call.tool)?;
        let invalid = |message| DecisionError::InvalidEdit { call_id: call_id.clone(), message };
        match guarded(|| registered.tool().gate(arguments, &scope.tool_context(call_id.clone()))) {
            Some(Gate::Forbid) => {
                Some(invalid(format!("policy forbids {} with them, so the edit is refused", call.tool)))
            }
            None => Some(invalid(format!("tool {} failed to check the arguments", call.tool))),
            Some(Gate::Allow | Gate::Ask) => None,
        }
    }

    /// What a decision must pass to resume a suspension: the call exists and takes a decision, and edited
    /// arguments pass the live tool's schema and checks.
    async fn check_decided(
        &self,
        suspension: &Suspension,
        call_id: &CallId,
        decision: &Decision,
    ) -> Result<(), DecisionError> {
        self.check_decision_shape(suspension, call_id, decision)?;
        if let Decision::Edit { arguments } = decision
            && let Some(call) = suspension.call(call_id)
            && let Some(registered) = self.tools.get(&call.tool)
        {
            let invalid = |message| DecisionError::InvalidEdit { call_id: call_id.clone(), message };
            guarded_future(|| registered.tool().validate(arguments))
                .await
                .unwrap_or_else(|| Err(format!("tool {} failed to check the arguments", call.tool)))
                .map_err(invalid)?;
        }
        Ok(())
    }

    /// The part of [`check_decision`](Self::check_decision) that needs no tool to look at the world: the
    /// call exists and takes a decision, and edited arguments pass the live tool's schema.
    fn check_decision_shape(
        &self,
        suspension: &Suspension,
        call_id: &CallId,
        decision: &Decision,
    ) -> Result<(), DecisionError> {
        let call = suspension.call(call_id).ok_or_else(|| DecisionError::UnknownCall(call_id.clone()))?;
        if let Some(refused) = call.refuse_decision() {
            return Err(refused);
        }
        if let Decision::Edit { arguments } = decision {
            // A vanished tool is reported when the call would run; there is no schema to check against.
            if let Some(registered) = self.tools.get(&call.tool) {
                let invalid = |message| DecisionError::InvalidEdit { call_id: call_id.clone(), message };
                registered.check_arguments(arguments).map_err(invalid)?;
            }
        }
        Ok(())
    }

    /// Checks a complete set of decisions: each names a decidable held call, and every decidable call has one.
    pub async fn check_decisions(&self, suspension: &Suspension, decisions: &Decisions) -> Result<(), DecisionError> {
        for (call_id, decision) in decisions {
            self.check_decided(suspension, call_id, decision).await?;
        }
        missing_decisions(suspension, decisions)
    }

    async fn start_run(&self, scope: &RunScope, input: &str, hooks: &dyn LoopHooks) -> Result<Outcome, LoopError> {
        let mut transcript = Vec::with_capacity(2 * self.config.max_iterations as usize + 2);
        if let Some(prompt) = &self.config.system_prompt {
            transcript.push(Message::system(prompt.clone()));
        }
        transcript.push(Message::user(input));
        let state = LoopState { transcript, counters: Counters::default(), trace: Vec::new() };
        self.drive(scope, state, hooks).await
    }

    /// [`AgentLoop::plan_resume`]: the decisions checked against the turn, each edit against the live
    /// tool (once: a refusal becomes the call's error result), and the steps re-checked against the live
    /// tool set.
    async fn plan_resume_of(
        &self,
        scope: &RunScope,
        suspension: &Suspension,
        decisions: &Decisions,
        grants: &[GrantRecord],
    ) -> Result<ResumePlan, DecisionError> {
        for call_id in decisions.keys() {
            let call = suspension.call(call_id).ok_or_else(|| DecisionError::UnknownCall(call_id.clone()))?;
            if let Some(refused) = call.refuse_decision() {
                return Err(refused);
            }
        }
        missing_decisions(suspension, decisions)?;
        let mut refused = BTreeMap::new();
        for (call_id, decision) in decisions.iter().filter(|(_, d)| matches!(d, Decision::Edit { .. })) {
            match self.check_decided(suspension, call_id, decision).await {
                Err(DecisionError::InvalidEdit { message, .. }) => {
                    refused.insert(call_id.clone(), Refusal { message, forbidden: false });
                }
                Err(other) => return Err(other),
                // Arguments the gate forbids: the recheck of the steps makes the call its error result.
                Ok(()) => {
                    if let Some(DecisionError::InvalidEdit { message, .. }) =
                        self.forbidden_edit(scope, suspension, call_id, decision)
                    {
                        refused.insert(call_id.clone(), Refusal { message, forbidden: true });
                    }
                }
            }
        }
        let mut steps = self.plan_resumed_turn(scope, suspension.calls.clone(), decisions, &suspension.tools, grants);
        // An edit refused for its arguments is its call's error result instead of running.
        for step in &mut steps {
            if let Step::Run { call_id, tool, .. } = step
                && let Some(Refusal { message, forbidden: false }) = refused.get(call_id.as_str())
            {
                let content =
                    format!("Tool {tool} was not run: the approver's edited arguments are refused: {message}");
                let content = cap_result(content, self.config.result_cap_bytes);
                let (call_id, tool) = (call_id.clone(), tool.clone());
                *step = Step::Settled(ToolResult {
                    call_id,
                    tool,
                    content,
                    is_error: true,
                    denied: false,
                    images: Vec::new(),
                });
            }
        }
        Ok(ResumePlan { steps, refused, started: None })
    }

    async fn resume_run(
        &self,
        scope: &RunScope,
        suspension: Suspension,
        plan: ResumePlan,
        hooks: &dyn LoopHooks,
    ) -> Result<Outcome, LoopError> {
        let Suspension { round, transcript, counters, trace, .. } = suspension;
        let mut state = LoopState { transcript, counters, trace };
        let ResumePlan { steps, started, .. } = plan;
        self.execute_turn(scope, round, &mut state, steps, started.as_deref(), hooks).await?;
        self.drive(scope, state, hooks).await
    }

    async fn drive(&self, scope: &RunScope, mut state: LoopState, hooks: &dyn LoopHooks) -> Result<Outcome, LoopError> {
        let max_iterations = self.config.max_iterations.max(1);
        loop {
            if state.counters.iterations >= max_iterations {
                return self.close_at_cap(state, hooks).await;
            }
            let round = state.counters.iterations + 1;
            let response = self.call_model(round, &state.transcript, &self.specs, hooks).await?;
            state.counters.iterations = round;
            state.counters.usage.add(response.usage);
            let ModelResponse { text, tool_calls, .. } = response;
            state.transcript.push(Message::Assistant { content: text.clone(), tool_calls: tool_calls.clone() });

            if tool_calls.is_empty() {
                return Ok(state.finish(text, TerminationReason::Completed));
            }
            if self.config.max_tokens.is_some_and(|budget| state.counters.usage.total() >= budget) {
                for call in &tool_calls {
                    state.transcript.push(Message::Tool(error_result(call, BUDGET_RESULT.to_owned())));
                }
                return Ok(state.finish(text, TerminationReason::BudgetExhausted));
            }
            if round >= max_iterations {
                for call in &tool_calls {
                    state.transcript.push(Message::Tool(error_result(call, ITERATION_LIMIT_RESULT.to_owned())));
                }
                return self.close_at_cap(state, hooks).await;
            }

            let mut seen = std::collections::HashSet::with_capacity(tool_calls.len());
            let mut held: Vec<HeldCall> = Vec::with_capacity(tool_calls.len());
            for call in &tool_calls {
                if seen.insert(call.call_id.as_str()) {
                    held.push(self.check_call(scope, call).await);
                } else {
                    // A decision is keyed by call_id: a second call with the same id could ride on the
                    // first one's approval, so it never runs (and is not checked).
                    let refusal = format!(
                        "Tool {} was not run: call id `{}` is used twice in one turn.",
                        call.name, call.call_id
                    );
                    held.push(held_call(
                        call,
                        HeldCallState::Refused(error_result(call, refusal)),
                        Requirement::SINGLE,
                    ));
                }
            }
            if held.iter().any(HeldCall::takes_decision) {
                self.apply_grants(&mut held, hooks).await?;
            }
            // A turn with a call a grant allowed is held too: committed, it records which grant let what
            // run, and a crash while a granted call runs leaves that call in doubt rather than run twice.
            // The runtime resumes a turn that needs nobody at once.
            if held.iter().any(|c| c.takes_decision() || c.grant().is_some()) {
                return Ok(Outcome::Suspended(self.suspend(round, state, held).await));
            }
            let steps = held.into_iter().map(|c| self.step_without_decision(c)).collect();
            self.execute_turn(scope, round, &mut state, steps, None, hooks).await?;
        }
    }

    async fn call_model(
        &self,
        round: u32,
        transcript: &[Message],
        tools: &[ToolSpec],
        hooks: &dyn LoopHooks,
    ) -> Result<ModelResponse, LoopError> {
        hooks.on_event(LoopEvent::ModelRequest { round, messages: transcript.len(), tools }).await?;
        let request = ModelRequest { model: &self.config.model, messages: transcript, tools };
        let deltas = RoundDeltas { hooks, round };
        let response = self
            .model
            .complete_streaming(request, &deltas)
            .await
            .map_err(|source| LoopError::Model { round, source })?;
        hooks.on_event(LoopEvent::ModelResponse { round, response: &response }).await?;
        Ok(response)
    }

    /// The closing completion at the iteration cap: no tools offered, any calls it makes are dropped.
    async fn close_at_cap(&self, mut state: LoopState, hooks: &dyn LoopHooks) -> Result<Outcome, LoopError> {
        let round = state.counters.iterations + 1;
        let response = self.call_model(round, &state.transcript, &[], hooks).await?;
        state.counters.usage.add(response.usage);
        state.transcript.push(Message::Assistant { content: response.text.clone(), tool_calls: Vec::new() });
        Ok(state.finish(response.text, TerminationReason::MaxIterations))
    }

    async fn suspend(&self, round: u32, state: LoopState, mut held: Vec<HeldCall>) -> Suspension {
        for call in held.iter_mut().filter(|c| c.settled().is_none()) {
            if let Some(registered) = self.tools.get(&call.tool) {
                if matches!(call.state, HeldCallState::Asks) && !call.requirement.is_quorum() {
                    let tool = registered.tool();
                    let may_grant = guarded(|| !tool.refuses_grants() && tool.grantable(&call.arguments));
                    if may_grant == Some(true) {
                        call.suggested_match = guarded(|| tool.suggested_match(&call.arguments));
                    }
                }
                let preview = guarded_future(|| registered.tool().observed_preview(&call.arguments)).await.flatten();
                if let Some(Preview { text, observed }) = preview {
                    call.preview = Some(text);
                    // A null would not survive being stored (it reads back as none) and break the digest.
                    call.observed = observed.filter(|o| !o.is_null());
                }
            }
        }
        Suspension::new(round, state.transcript, held, state.counters, state.trace, self.tools.pins())
    }

    /// Lets the grants in force for the run allow the calls that ask (V2.md, grants): only a call that asks
    /// (never one in doubt, refused or forbidden) of one person (never a quorum), whose tool says a grant
    /// may allow it (a policy rule's `grantable = false` says no), matched on its arguments as the tool
    /// resolves them.
    async fn apply_grants(&self, held: &mut [HeldCall], hooks: &dyn LoopHooks) -> Result<(), HookError> {
        let grants = hooks.grants_in_force().await?;
        if grants.is_empty() {
            return Ok(());
        }
        // A quorum asks several people by design: one person's standing approval never stands in for it.
        for call in held.iter_mut().filter(|c| matches!(c.state, HeldCallState::Asks) && !c.requirement.is_quorum()) {
            if let Some(grant) = self.grant_for(&call.tool, &call.arguments, &grants) {
                call.state = HeldCallState::Granted(grant);
            }
        }
        Ok(())
    }

    /// The grant among `grants` that allows a call of `tool` with `arguments`, if the tool lets one.
    fn grant_for(&self, tool: &str, arguments: &Value, grants: &[GrantRecord]) -> Option<GrantId> {
        let tool_impl = self.tools.get(tool)?.tool();
        if !guarded(|| tool_impl.grantable(arguments))? {
            return None;
        }
        let paths = guarded(|| tool_impl.policy_paths(arguments))?;
        first_allowing(grants, tool, arguments, &paths).map(|grant| grant.id.clone())
    }

    /// Gates one call: refusals are settled at once with their error result; the rest are allowed or ask.
    async fn check_call(&self, scope: &RunScope, call: &ToolCall) -> HeldCall {
        match self.gate_of(scope, call).await {
            Ok((state, requirement)) => held_call(call, state, requirement),
            Err(message) => held_call(call, HeldCallState::Refused(error_result(call, message)), Requirement::SINGLE),
        }
    }

    /// Where a call stands after its checks and its gate (allowed or asks, with how many people must
    /// approve it), or why it is refused.
    async fn gate_of(&self, scope: &RunScope, call: &ToolCall) -> Result<(HeldCallState, Requirement), String> {
        let name = &call.name;
        if let Some(problem) = &call.malformed_arguments {
            return Err(format!("Tool {name} was not run: its arguments are not valid JSON ({problem})."));
        }
        let Some(registered) = self.tools.get(name) else {
            return Err(format!("Tool {name} does not exist. Available tools: {}.", self.tool_names()));
        };
        registered
            .check_arguments(&call.arguments)
            .map_err(|problems| format!("Tool {name} was not run: invalid arguments: {problems}."))?;
        let tool = registered.tool();
        let failed = || format!("Tool {name} failed to check its arguments.");
        guarded_future(|| tool.validate(&call.arguments))
            .await
            .ok_or_else(failed)?
            .map_err(|problem| format!("Tool {name} was not run: {problem}"))?;
        let ctx = scope.tool_context(call.call_id.clone());
        match guarded(|| tool.gate(&call.arguments, &ctx)).ok_or_else(failed)? {
            Gate::Allow => Ok((HeldCallState::Allowed, Requirement::SINGLE)),
            Gate::Ask => Ok((HeldCallState::Asks, guarded(|| tool.requirement(&call.arguments)).ok_or_else(failed)?)),
            Gate::Forbid => Err(format!("Tool {name} is forbidden by policy and was not run.")),
        }
    }

    fn tool_names(&self) -> String {
        let names: Vec<&str> = self.specs.iter().map(|s| s.name.as_str()).collect();
        if names.is_empty() { "none".to_owned() } else { names.join(", ") }
    }

    fn step_without_decision(&self, call: HeldCall) -> Step {
        let gate = call.gate();
        // Only a person's approval is bound to what the preview showed; an allowed call runs on what is
        // there when it runs.
        let observed = if gate == Gate::Allow { None } else { call.observed };
        match call.state {
            HeldCallState::Refused(result) | HeldCallState::Finished(result) => Step::Settled(result),
            HeldCallState::Allowed | HeldCallState::Asks | HeldCallState::InDoubt => Step::Run {
                call_id: call.call_id,
                tool: call.tool,
                arguments: call.arguments,
                gate,
                edited: false,
                observed,
                grant: None,
            },
            // No person saw the preview: nothing observed is bound to the call.
            HeldCallState::Granted(grant) => Step::Run {
                call_id: call.call_id,
                tool: call.tool,
                arguments: call.arguments,
                gate,
                edited: false,
                observed: None,
                grant: Some(grant),
            },
        }
    }

    /// Turns the held calls and their decisions into steps, re-checking each call that would run against
    /// the live tool set: a tool that vanished, changed its schema, or is now gated differently is
    /// reported to the model, never run in place of what was approved.
    fn plan_resumed_turn(
        &self,
        scope: &RunScope,
        calls: Vec<HeldCall>,
        decisions: &Decisions,
        pins: &[ToolPin],
        grants: &[GrantRecord],
    ) -> Vec<Step> {
        calls
            .into_iter()
            .map(|call| {
                // What people approved the call under (none when it needs no decision).
                let decided = call.takes_decision().then_some(call.requirement);
                let step = match (decisions.get(&call.call_id), call.settled().is_some()) {
                    (_, true) | (None, _) => self.step_without_decision(call.clone()),
                    (Some(Decision::Deny { reason }), false) => Step::Settled(ToolResult {
                        call_id: call.call_id.clone(),
                        tool: call.tool.clone(),
                        content: cap_result(
                            format!("Tool {} was denied by the approver: {reason}", call.tool),
                            self.config.result_cap_bytes,
                        ),
                        is_error: true,
                        denied: true,
                        images: Vec::new(),
                    }),
                    (Some(Decision::Respond { result }), false) => Step::Settled(ToolResult {
                        call_id: call.call_id.clone(),
                        tool: call.tool.clone(),
                        content: cap_result(result.clone(), self.config.result_cap_bytes),
                        is_error: false,
                        denied: false,
                        images: Vec::new(),
                    }),
                    (Some(Decision::Approve), false) => self.step_without_decision(call.clone()),
                    (Some(Decision::Edit { arguments }), false) => Step::Run {
                        call_id: call.call_id.clone(),
                        tool: call.tool.clone(),
                        arguments: arguments.clone(),
                        gate: call.gate(),
                        edited: true,
                        observed: None,
                        grant: None,
                    },
                };
                match step {
                    Step::Run { call_id, tool, arguments, gate, edited, observed, grant } => {
                        let cleared = match &grant {
                            Some(granted) => Cleared::Granted { grant: granted, in_force: grants },
                            None => Cleared::Decided(decided),
                        };
                        let ctx = scope.tool_context(call_id.clone());
                        match self.recheck(&tool, &arguments, &ctx, pins, cleared) {
                            Some(problem) => Step::Settled(ToolResult {
                                call_id,
                                tool,
                                content: problem,
                                is_error: true,
                                denied: false,
                                images: Vec::new(),
                            }),
                            None => Step::Run { call_id, tool, arguments, gate, edited, observed, grant },
                        }
                    }
                    settled => settled,
                }
            })
            .collect()
    }

    /// Why a call that was cleared at suspension must not run now, if it must not: by people (under the
    /// requirement they approved it under), by a grant, or by its gate alone.
    fn recheck(
        &self,
        tool: &str,
        arguments: &Value,
        ctx: &ToolContext,
        pins: &[ToolPin],
        cleared: Cleared<'_>,
    ) -> Option<String> {
        let Some(registered) = self.tools.get(tool) else {
            return Some(format!("Tool {tool} is no longer available; the call was not run."));
        };
        let pinned = pins.iter().find(|p| p.name == tool).map(|p| p.schema_hash.as_str());
        if pinned != Some(registered.schema_hash()) {
            return Some(format!("Tool {tool} changed since the call was checked; the call was not run."));
        }
        match guarded(|| registered.tool().gate(arguments, ctx)) {
            None => Some(format!("Tool {tool} failed to check its arguments.")),
            Some(Gate::Forbid) => Some(format!("Tool {tool} is forbidden by policy and was not run.")),
            Some(Gate::Ask) => match cleared {
                Cleared::Decided(None) => {
                    Some(format!("Tool {tool} now requires approval and was not run; call it again to ask."))
                }
                Cleared::Granted { grant, in_force } => {
                    let allowed = guarded(|| registered.tool().grantable(arguments)).unwrap_or(false)
                        && guarded(|| registered.tool().policy_paths(arguments))
                            .and_then(|paths| first_allowing(in_force, tool, arguments, &paths).map(|g| &g.id == grant))
                            .unwrap_or(false);
                    (!allowed).then(|| {
                        format!(
                            "Tool {tool} was allowed by grant {grant}, which no longer allows it (revoked, expired \
                             or narrowed by policy); the call was not run. Call it again to ask."
                        )
                    })
                }
                Cleared::Decided(Some(approved)) => {
                    let Some(now) = guarded(|| registered.tool().requirement(arguments)) else {
                        return Some(format!("Tool {tool} failed to check its arguments."));
                    };
                    (now.approvals() > approved.approvals()).then(|| {
                        format!(
                            "Tool {tool} now requires {} approvals and was not run; call it again to ask.",
                            now.approvals()
                        )
                    })
                }
            },
            Some(Gate::Allow) => None,
        }
    }

    /// Runs the steps of one turn and appends exactly one result per call, in the model's order.
    /// Consecutive allow-gated calls run concurrently (bounded); a call a person approved runs alone.
    async fn execute_turn(
        &self,
        scope: &RunScope,
        round: u32,
        state: &mut LoopState,
        steps: Vec<Step>,
        started: Option<&str>,
        hooks: &dyn LoopHooks,
    ) -> Result<(), LoopError> {
        let mut results: Vec<ToolResult> = Vec::with_capacity(steps.len());
        let mut steps = steps.into_iter().peekable();
        while let Some(step) = steps.next() {
            match step {
                Step::Settled(result) => results.push(result),
                Step::Run { call_id, tool, arguments, gate: Gate::Allow, edited, .. } => {
                    let mut batch = vec![(call_id, tool, arguments, edited)];
                    while let Some(Step::Run { gate: Gate::Allow, .. }) = steps.peek() {
                        if let Some(Step::Run { call_id, tool, arguments, edited, .. }) = steps.next() {
                            batch.push((call_id, tool, arguments, edited));
                        }
                    }
                    if batch.len() == 1 {
                        let (call_id, tool, arguments, edited) = batch.remove(0);
                        let call = Invoked::allowed(&call_id, &tool, edited);
                        let result = self.invoke(scope, round, call, arguments, hooks).await?;
                        record(state, round, &result.1, result.0, &mut results);
                    } else {
                        let outcomes: Vec<Result<(ToolResult, Value), HookError>> = futures_util::stream::iter(
                            batch.into_iter().map(|(call_id, tool, arguments, edited)| async move {
                                self.invoke(scope, round, Invoked::allowed(&call_id, &tool, edited), arguments, hooks)
                                    .await
                            }),
                        )
                        .buffered(self.config.concurrency.max(1))
                        .collect()
                        .await;
                        for outcome in outcomes {
                            let (result, arguments) = outcome?;
                            record(state, round, &arguments, result, &mut results);
                        }
                    }
                }
                Step::Run { call_id, tool, arguments, gate, edited, observed, grant } => {
                    let announced = started == Some(&call_id);
                    let call = Invoked {
                        call_id: &call_id,
                        tool: &tool,
                        gate,
                        grant: grant.as_ref(),
                        edited,
                        observed,
                        announced,
                    };
                    let (result, arguments) = self.invoke(scope, round, call, arguments, hooks).await?;
                    record(state, round, &arguments, result, &mut results);
                }
            }
        }
        state.transcript.extend(results.into_iter().map(Message::Tool));
        Ok(())
    }

    /// Runs one call: the `tool_started` hook first (durable for ask-gated calls), then the tool with any
    /// panic caught, then the capped result and the `tool_finished` hook.
    async fn invoke(
        &self,
        scope: &RunScope,
        round: u32,
        call: Invoked<'_>,
        arguments: Value,
        hooks: &dyn LoopHooks,
    ) -> Result<(ToolResult, Value), HookError> {
        let Invoked { call_id, tool, gate, grant, edited, observed, announced } = call;
        if !announced {
            hooks.on_event(LoopEvent::ToolStarted { round, call_id, tool, arguments: &arguments, gate, grant }).await?;
        }
        let (content, is_error, images) = match self.tools.get(tool) {
            Some(registered) => {
                let ctx = scope.tool_context(call_id).with_observed(observed);
                self.run_tool(registered, call_id, ctx, arguments.clone()).await.into_parts()
            }
            None => (format!("Tool {tool} is no longer available; the call was not run."), true, Vec::new()),
        };
        let mut content = cap_result(self.config.redactor.redact(&content).into_owned(), self.config.result_cap_bytes);
        if edited {
            content = format!("[arguments edited by the approver: {arguments}]\n{content}");
        }
        let result =
            ToolResult { call_id: call_id.clone(), tool: tool.to_owned(), content, is_error, denied: false, images };
        hooks.on_event(LoopEvent::ToolFinished { round, result: &result }).await?;
        Ok((result, arguments))
    }

    /// Runs the tool with the call's context (made for `call_id`).
    async fn run_tool(
        &self,
        registered: &RegisteredTool,
        call_id: &CallId,
        ctx: ToolContext,
        arguments: Value,
    ) -> ToolOutput {
        let name = registered.tool().name();
        let failed = || ToolOutput::error(format!("Tool {name} failed."));
        let Some(future) = guarded(|| registered.tool().call(arguments, ctx)) else {
            tracing::error!(tool = name, %call_id, "tool panicked");
            return failed();
        };
        match AssertUnwindSafe(future).catch_unwind().await {
            Ok(Ok(output)) => output,
            Ok(Err(error)) => {
                tracing::warn!(tool = name, %call_id, %error, "tool failed");
                failed()
            }
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!(tool = name, %call_id, panic = %message, "tool panicked");
                failed()
            }
        }
    }
}

impl AgentLoop for ToolLoop {
    fn system(&self) -> &str {
        self.model.system()
    }

    fn server(&self) -> Option<(&str, u16)> {
        self.model.server()
    }

    fn check_decision<'a>(
        &'a self,
        scope: &'a RunScope,
        suspension: &'a Suspension,
        call_id: &'a CallId,
        decision: &'a Decision,
    ) -> BoxFuture<'a, Result<(), DecisionError>> {
        Box::pin(ToolLoop::check_decision(self, scope, suspension, call_id, decision))
    }

    fn start<'a>(
        &'a self,
        scope: &'a RunScope,
        input: &'a str,
        hooks: &'a dyn LoopHooks,
    ) -> BoxFuture<'a, Result<Outcome, LoopError>> {
        Box::pin(self.start_run(scope, input, hooks))
    }

    fn plan_resume<'a>(
        &'a self,
        scope: &'a RunScope,
        suspension: &'a Suspension,
        decisions: &'a Decisions,
        grants: &'a [GrantRecord],
    ) -> BoxFuture<'a, Result<ResumePlan, DecisionError>> {
        Box::pin(self.plan_resume_of(scope, suspension, decisions, grants))
    }

    fn resume_planned<'a>(
        &'a self,
        scope: &'a RunScope,
        suspension: Suspension,
        plan: ResumePlan,
        hooks: &'a dyn LoopHooks,
    ) -> BoxFuture<'a, Result<Outcome, LoopError>> {
        Box::pin(self.resume_run(scope, suspension, plan, hooks))
    }

    fn granted(&self, call: &HeldCall, grants: &[GrantRecord]) -> Option<GrantId> {
        let asks = matches!(call.state, HeldCallState::Asks) && !call.requirement.is_quorum();
        if asks { self.grant_for(&call.tool, &call.arguments, grants) } else { None }
    }
}

fn record(state: &mut LoopState, round: u32, arguments: &Value, result: ToolResult, results: &mut Vec<ToolResult>) {
    state.counters.tool_invocations += 1;
    state.trace.push(Invocation {
        round,
        call_id: result.call_id.clone(),
        tool: result.tool.clone(),
        arguments: arguments.clone(),
        is_error: result.is_error,
    });
    results.push(result);
}

/// A call of the turn being held, in this state, without a preview yet.
fn held_call(call: &ToolCall, state: HeldCallState, requirement: Requirement) -> HeldCall {
    HeldCall {
        call_id: call.call_id.clone(),
        tool: call.name.clone(),
        arguments: call.arguments.clone(),
        preview: None,
        observed: None,
        state,
        requirement,
        suggested_match: None,
    }
}

fn error_result(call: &ToolCall, content: String) -> ToolResult {
    ToolResult {
        call_id: call.call_id.clone(),
        tool: call.name.clone(),
        content,
        is_error: true,
        denied: false,
        images: Vec::new(),
    }
}

/// Runs a synchronous tool method, turning a panic into `None`.
fn guarded<T>(f: impl FnOnce() -> T) -> Option<T> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).ok()
}

/// Runs an asynchronous tool method, turning a panic (building or polling its future) into `None`.
async fn guarded_future<'a, T>(f: impl FnOnce() -> BoxFuture<'a, T>) -> Option<T> {
    let future = guarded(f)?;
    AssertUnwindSafe(future).catch_unwind().await.ok()
}

/// The decidable calls without a decision, as an error naming them.
fn missing_decisions(suspension: &Suspension, decisions: &Decisions) -> Result<(), DecisionError> {
    let missing: Vec<CallId> = suspension
        .decidable_calls()
        .filter(|c| !decisions.contains_key(&c.call_id))
        .map(|c| c.call_id.clone())
        .collect();
    if missing.is_empty() { Ok(()) } else { Err(DecisionError::Missing(missing)) }
}

/// Cuts a result to at most `cap` bytes of content on a character boundary, with a visible marker.
pub fn cap_result(content: String, cap: usize) -> String {
    if content.len() <= cap {
        return content;
    }
    let mut end = cap;
    while !content.is_char_boundary(end) {
        end -= 1;
    }
    let total = content.len();
    let mut cut = content;
    cut.truncate(end);
    cut.push_str(&format!("\n[output truncated: showing {end} of {total} bytes]"));
    cut
}
