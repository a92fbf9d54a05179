//! OpenTelemetry traces (`[telemetry]`; docs/telemetry.md): the spans of a run, following the
//! OpenTelemetry semantic conventions for generative AI where they exist (`gen_ai.*`), and ours
//! (`tollgate.*`) for the wait at the gate, for which none exists.
//!
//! A run created while telemetry is on gets a trace context ([`TraceContext`], stored with the run):
//! a trace id, the id of its root span and the sampling decision, made once. Every process that drives,
//! decides or expires the run later reads it from the run and continues that trace, so a run suspended
//! in one process and resumed in another after a restart is one trace:
//!
//! - `invoke_agent {agent}`: a segment — one process driving the run from a start or a resume to its next
//!   durable state. The first segment is the root span (its id is the one stored); later segments are
//!   its children.
//! - `chat {model}`: a model call, a child of its segment.
//! - `execute_tool {tool}`: a tool call that ran, a child of its segment.
//! - `await_approval {agent}`: a held turn's wait, from its `approval_requested` to the vote that settled
//!   it (or its expiry, or the run's cancellation), a child of the root, made by the process that
//!   commits that vote.
//!
//! Spans carry no content (input, model text, arguments, results) unless `[telemetry] content = true`
//! and `[privacy] level = "full"`; content that does go out passes the redactor first.

use crate::privacy::PrivacyLevel;
use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId, TraceState,
    Tracer as _,
};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tollgate_agent_core::redact::Redactor;
use tollgate_agent_core::{
    CallId, Decision, FinishReason, Gate, GrantId, HeldTurn, Millis, ModelResponse, RunRecord, ToolResult,
    TraceContext, Usage,
};

/// Where a runtime sends its spans, and what they may carry (`[telemetry]`).
#[derive(Clone)]
pub struct Telemetry {
    tracer: Arc<BoxedTracer>,
    /// The share of new runs whose spans are recorded, 0.0 to 1.0 (`[telemetry] sample_ratio`).
    ratio: f64,
    /// `[telemetry] content`: prompts, model text, arguments and results go in spans (with
    /// `[privacy] level = "full"` only).
    content: bool,
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry").field("ratio", &self.ratio).field("content", &self.content).finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Spans go to `tracer` (an OpenTelemetry SDK tracer, say); `ratio` of new runs are sampled (clamped
    /// to 0.0–1.0; a NaN samples none); `content` lets content into spans when the privacy level is `full`.
    pub fn new<T>(tracer: T, ratio: f64, content: bool) -> Telemetry
    where
        T: opentelemetry::trace::Tracer + Send + Sync + 'static,
        T::Span: Send + Sync + 'static,
    {
        let ratio = if ratio.is_nan() { 0.0 } else { ratio.clamp(0.0, 1.0) };
        Telemetry { tracer: Arc::new(BoxedTracer::new(Box::new(tracer))), ratio, content }
    }

    /// A new run's trace context: fresh ids, sampled at the configured ratio; or, inside the caller's
    /// trace `parent`, a fresh root span id under the caller's span, sampled as the caller decided.
    pub(crate) fn new_trace(&self, parent: Option<TraceContext>) -> TraceContext {
        if let Some(caller) = parent {
            let mut span = [0u8; 8];
            span.copy_from_slice(&uuid::Uuid::new_v4().as_bytes()[..8]);
            return TraceContext::joining(caller, span);
        }
        // A v4 UUID is random but for its version (byte 6's high nibble) and variant (byte 8's high
        // bits): the ids take two whole, the sampling draw only the wholly random bytes of a third.
        let (ids, draw) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let mut random = [0u8; 32];
        random[..16].copy_from_slice(ids.as_bytes());
        random[16..24].copy_from_slice(&uuid::Uuid::new_v4().as_bytes()[..8]);
        let draw = draw.as_bytes();
        random[24..30].copy_from_slice(&draw[..6]);
        random[30..].copy_from_slice(&draw[9..11]);
        TraceContext::from_random(random, self.ratio)
    }
}

/// The telemetry of one runtime: the settings, with the content rule resolved against its privacy level.
#[derive(Clone, Debug)]
pub(crate) struct Tracing {
    telemetry: Telemetry,
    content: bool,
    /// Shared: each segment's spans hold a clone of this.
    redactor: Arc<Redactor>,
}

/// What a segment is, for its span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SegmentKind {
    /// The run's first segment: the root span, with the stored id.
    First,
    /// A later one (a resume, a takeover): a child of the root.
    Later,
}

/// How a held turn's wait ended, for its span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitEnd<'a> {
    /// A vote settled it: the vote's actor, and whether it came through a signed link.
    Settled { actor: &'a str, by_link: bool },
    /// Its deadline passed (`on_expiry`).
    Expired,
    /// The run was cancelled.
    Cancelled { actor: &'a str },
}

impl Tracing {
    pub(crate) fn new(telemetry: Telemetry, privacy: PrivacyLevel, redactor: Redactor) -> Tracing {
        let content = telemetry.content && privacy == PrivacyLevel::Full;
        Tracing { telemetry, content, redactor: Arc::new(redactor) }
    }

    /// A new run's trace context (see [`Telemetry::new_trace`]).
    pub(crate) fn new_trace(&self, parent: Option<TraceContext>) -> TraceContext {
        self.telemetry.new_trace(parent)
    }

    /// The span of a segment of `run` (agent model `model`; `provider`: its `gen_ai.system` and the
    /// server its requests go to, if any), or `None` when the run has no trace or is not sampled.
    pub(crate) fn segment(
        &self,
        run: &RunRecord,
        model: &str,
        provider: (&str, Option<(&str, u16)>),
        kind: SegmentKind,
    ) -> Option<SegmentTrace> {
        let (system, server) = provider;
        let trace = run.trace.filter(|t| t.sampled)?;
        let tracer = &self.telemetry.tracer;
        let mut builder = tracer
            .span_builder(format!("invoke_agent {}", run.agent))
            .with_kind(SpanKind::Internal)
            .with_attributes(vec![
                KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                KeyValue::new("gen_ai.agent.name", run.agent.clone()),
                KeyValue::new("gen_ai.conversation.id", run.id.to_string()),
                KeyValue::new("gen_ai.system", system.to_owned()),
                KeyValue::new("gen_ai.provider.name", system.to_owned()),
                KeyValue::new("gen_ai.request.model", model.to_owned()),
                KeyValue::new("tollgate.run.id", run.id.to_string()),
                KeyValue::new("tollgate.segment", if kind == SegmentKind::First { "start" } else { "resume" }),
            ]);
        let parent = match kind {
            SegmentKind::First => {
                builder = builder
                    .with_trace_id(TraceId::from_bytes(trace.trace_id))
                    .with_span_id(SpanId::from_bytes(trace.span_id));
                match trace.parent {
                    // The caller's span, whose trace the run joined.
                    Some(caller) => remote_parent(trace.trace_id, caller),
                    None => Context::new(),
                }
            }
            SegmentKind::Later => root_context(&trace),
        };
        if self.content && kind == SegmentKind::First {
            let input = self.redactor.redact(&run.input).into_owned();
            let messages = serde_json::json!([{"role": "user", "parts": [{"type": "text", "content": input}]}]);
            builder = builder.with_attributes(vec![KeyValue::new("gen_ai.input.messages", messages.to_string())]);
        }
        let span = builder.start_with_context(&**tracer, &parent);
        Some(SegmentTrace {
            tracing: self.clone(),
            cx: Context::new().with_span(span),
            model: model.to_owned(),
            system: system.to_owned(),
            server: server.map(|(host, port)| (host.to_owned(), port)),
            open: Mutex::new(Open::default()),
        })
    }

    /// Records the wait of `turn` (held by `run`), from its request to `end` at `now`, as a child of the
    /// run's root span; nothing when the run has no sampled trace.
    pub(crate) fn wait_ended(&self, run: &RunRecord, turn: &HeldTurn, end: WaitEnd<'_>, now: Millis) {
        let Some(trace) = run.trace.filter(|t| t.sampled) else { return };
        let requested = requested_at(turn).unwrap_or(run.updated_at);
        let wait_ms = now.saturating_sub(requested).max(0);
        let decisions: Vec<&Decision> = turn.approvals.iter().filter_map(|a| a.decision()).collect();
        let count =
            |action: &str| i64::try_from(decisions.iter().filter(|d| d.action() == action).count()).unwrap_or(0);
        let (approved, edited, denied, responded) = (count("approve"), count("edit"), count("deny"), count("respond"));
        let (actor, outcome, by_link) = match end {
            WaitEnd::Settled { actor, by_link } => {
                let outcome = if denied + responded == 0 {
                    "approved"
                } else if approved + edited == 0 && responded == 0 {
                    "denied"
                } else {
                    "mixed"
                };
                (actor, outcome, by_link)
            }
            WaitEnd::Expired => ("system", "expired", false),
            WaitEnd::Cancelled { actor } => (actor, "cancelled", false),
        };
        let tools: Vec<StringValue> = held_tools(turn).into_iter().map(StringValue::from).collect();
        let mut attributes = vec![
            KeyValue::new("tollgate.operation.name", "await_approval"),
            KeyValue::new("gen_ai.agent.name", run.agent.clone()),
            KeyValue::new("tollgate.run.id", run.id.to_string()),
            KeyValue::new("tollgate.turn.digest", turn.turn_digest.as_str().to_owned()),
            KeyValue::new("tollgate.approval.calls", i64::try_from(turn.approvals.len()).unwrap_or(i64::MAX)),
            KeyValue::new("tollgate.approval.tools", Value::Array(Array::String(tools))),
            KeyValue::new("tollgate.approval.actor", actor.to_owned()),
            KeyValue::new("tollgate.approval.outcome", outcome),
            KeyValue::new("tollgate.approval.wait_ms", wait_ms),
            KeyValue::new("tollgate.approval.approved", approved),
            KeyValue::new("tollgate.approval.edited", edited),
            KeyValue::new("tollgate.approval.denied", denied),
            KeyValue::new("tollgate.approval.responded", responded),
            KeyValue::new("tollgate.approval.escalated", turn.approvals.iter().any(|a| a.escalated().is_some())),
        ];
        if by_link {
            attributes.push(KeyValue::new("tollgate.approval.via", "link"));
        }
        let tracer = &self.telemetry.tracer;
        let mut span = tracer
            .span_builder(format!("await_approval {}", run.agent))
            .with_kind(SpanKind::Internal)
            .with_start_time(system_time(requested))
            .with_attributes(attributes)
            .start_with_context(&**tracer, &root_context(&trace));
        // Each vote, at its time: who voted what on which call (a quorum's votes one by one).
        for approval in &turn.approvals {
            for vote in &approval.votes {
                span.add_event_with_timestamp(
                    "tollgate.approval.vote",
                    system_time(vote.at),
                    vec![
                        KeyValue::new("tollgate.approval.actor", vote.actor.to_string()),
                        KeyValue::new("gen_ai.tool.call.id", approval.call_id.to_string()),
                        KeyValue::new("tollgate.approval.action", vote.decision.action()),
                    ],
                );
            }
        }
        span.end_with_timestamp(system_time(now));
    }
}

/// The calls' tools of a held turn, in the model's order (from its suspension; empty when it cannot
/// be read, which the span then simply does not list).
fn held_tools(turn: &HeldTurn) -> Vec<String> {
    match turn.suspension.parse() {
        Ok(suspension) => {
            turn.approvals.iter().filter_map(|a| suspension.call(&a.call_id).map(|call| call.tool.clone())).collect()
        }
        Err(_) => Vec::new(),
    }
}

/// When the turn's approvals were requested: the earliest of their ids' times (UUIDv7, written as the
/// turn is held; an approval kept by a recovery keeps its first request's time).
fn requested_at(turn: &HeldTurn) -> Option<Millis> {
    turn.approvals
        .iter()
        .filter_map(|a| uuid::Uuid::parse_str(a.id.as_str()).ok())
        .filter_map(|id| id.get_timestamp())
        .map(|ts| {
            let (secs, nanos) = ts.to_unix();
            i64::try_from(secs).unwrap_or(i64::MAX).saturating_mul(1000).saturating_add(i64::from(nanos / 1_000_000))
        })
        .min()
}

/// The run's root span as a remote parent.
fn root_context(trace: &TraceContext) -> Context {
    remote_parent(trace.trace_id, trace.span_id)
}

/// A sampled span of another process (or an earlier segment) as a parent.
fn remote_parent(trace_id: [u8; 16], span_id: [u8; 8]) -> Context {
    let parent = SpanContext::new(
        TraceId::from_bytes(trace_id),
        SpanId::from_bytes(span_id),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    Context::new().with_remote_span_context(parent)
}

fn system_time(at: Millis) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(at).unwrap_or_default())
}

/// The spans of one segment: the segment's own, and its model and tool calls as they go.
pub(crate) struct SegmentTrace {
    tracing: Tracing,
    /// Holds the segment's span: the parent of its calls.
    cx: Context,
    model: String,
    system: String,
    /// The provider's host and port (`server.address`, `server.port` on model calls).
    server: Option<(String, u16)>,
    open: Mutex<Open>,
}

/// The calls under way, and what the segment used.
#[derive(Default)]
struct Open {
    model: Option<BoxedSpan>,
    tools: HashMap<CallId, BoxedSpan>,
    usage: Usage,
}

impl SegmentTrace {
    fn open(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Model call `round` starts.
    pub(crate) fn model_request(&self, round: u32) {
        let tracer = &self.tracing.telemetry.tracer;
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.system", self.system.clone()),
            KeyValue::new("gen_ai.provider.name", self.system.clone()),
            KeyValue::new("gen_ai.request.model", self.model.clone()),
            KeyValue::new("tollgate.round", i64::from(round)),
        ];
        if let Some((host, port)) = &self.server {
            attributes.push(KeyValue::new("server.address", host.clone()));
            attributes.push(KeyValue::new("server.port", i64::from(*port)));
        }
        let span = tracer
            .span_builder(format!("chat {}", self.model))
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&**tracer, &self.cx);
        // A call still open (one that never answered) ends here, unfinished.
        if let Some(mut previous) = self.open().model.replace(span) {
            previous.end();
        }
    }

    /// The model answered.
    pub(crate) fn model_response(&self, response: &ModelResponse) {
        let mut open = self.open();
        open.usage.input_tokens = open.usage.input_tokens.saturating_add(response.usage.input_tokens);
        open.usage.output_tokens = open.usage.output_tokens.saturating_add(response.usage.output_tokens);
        let Some(mut span) = open.model.take() else { return };
        drop(open);
        span.set_attributes(vec![
            KeyValue::new("gen_ai.usage.input_tokens", i64::try_from(response.usage.input_tokens).unwrap_or(i64::MAX)),
            KeyValue::new(
                "gen_ai.usage.output_tokens",
                i64::try_from(response.usage.output_tokens).unwrap_or(i64::MAX),
            ),
            KeyValue::new(
                "gen_ai.response.finish_reasons",
                Value::Array(Array::String(vec![StringValue::from(finish_reason(&response.finish_reason))])),
            ),
        ]);
        if self.tracing.content {
            span.set_attribute(KeyValue::new("gen_ai.output.messages", self.output_messages(response)));
        }
        span.end();
    }

    /// The model's answer as the conventions' `gen_ai.output.messages` JSON, redacted.
    fn output_messages(&self, response: &ModelResponse) -> String {
        let redact = |text: &str| self.tracing.redactor.redact(text).into_owned();
        let mut parts = Vec::new();
        if let Some(text) = &response.text {
            parts.push(serde_json::json!({"type": "text", "content": redact(text)}));
        }
        for call in &response.tool_calls {
            let arguments = redact(&call.arguments.to_string());
            parts.push(
                serde_json::json!({"type": "tool_call", "id": call.call_id, "name": call.name, "arguments": arguments}),
            );
        }
        let reason = finish_reason(&response.finish_reason);
        serde_json::json!([{"role": "assistant", "parts": parts, "finish_reason": reason}]).to_string()
    }

    /// Tool call `call_id` starts.
    pub(crate) fn tool_started(
        &self,
        call_id: &CallId,
        tool: &str,
        arguments: &serde_json::Value,
        gate: Gate,
        grant: Option<&GrantId>,
    ) {
        let tracer = &self.tracing.telemetry.tracer;
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", tool.to_owned()),
            KeyValue::new("gen_ai.tool.call.id", call_id.to_string()),
            KeyValue::new("gen_ai.tool.type", "function"),
            KeyValue::new("tollgate.gate", gate.as_str()),
        ];
        if let Some(grant) = grant {
            attributes.push(KeyValue::new("tollgate.grant.id", grant.to_string()));
        }
        if self.tracing.content {
            attributes.push(KeyValue::new(
                "gen_ai.tool.call.arguments",
                self.tracing.redactor.redact(&arguments.to_string()).into_owned(),
            ));
        }
        let span = tracer
            .span_builder(format!("execute_tool {tool}"))
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes)
            .start_with_context(&**tracer, &self.cx);
        if let Some(mut previous) = self.open().tools.insert(call_id.clone(), span) {
            previous.end();
        }
    }

    /// A tool call ended (a call that never started — denied, answered by a person — has no span).
    pub(crate) fn tool_finished(&self, result: &ToolResult) {
        let Some(mut span) = self.open().tools.remove(&result.call_id) else { return };
        if result.is_error {
            span.set_attribute(KeyValue::new("error.type", if result.denied { "denied" } else { "tool_error" }));
            span.set_status(Status::error("the tool call did not produce a normal result"));
        }
        if self.tracing.content {
            span.set_attribute(KeyValue::new(
                "gen_ai.tool.call.result",
                self.tracing.redactor.redact(&result.content).into_owned(),
            ));
        }
        span.end();
    }

    /// The segment ended: with the run as committed (`Ok`), or why not (`Err`: the error's kind and text).
    pub(crate) fn end(&self, ended: Result<&RunRecord, (&str, String)>) {
        let span = self.cx.span();
        let mut open = self.open();
        // Calls still open never answered: the segment's failure is theirs.
        let failed_call = matches!(&ended, Ok(run) if run.error().is_some()) || ended.is_err();
        if let Some(mut model) = open.model.take() {
            if failed_call {
                model.set_status(Status::error("the model call failed"));
            }
            model.end();
        }
        for (_, mut tool) in open.tools.drain() {
            tool.end();
        }
        let usage = open.usage;
        drop(open);
        span.set_attribute(KeyValue::new(
            "gen_ai.usage.input_tokens",
            i64::try_from(usage.input_tokens).unwrap_or(i64::MAX),
        ));
        span.set_attribute(KeyValue::new(
            "gen_ai.usage.output_tokens",
            i64::try_from(usage.output_tokens).unwrap_or(i64::MAX),
        ));
        match ended {
            Ok(run) => {
                span.set_attribute(KeyValue::new("tollgate.run.status", run.status().as_str()));
                if let Some(error) = run.error() {
                    span.set_attribute(KeyValue::new("error.type", error.kind.as_str().to_owned()));
                    span.set_status(Status::error(error.message.clone()));
                }
                if self.tracing.content
                    && let Some(output) = run.output()
                {
                    let messages = serde_json::json!([{"role": "assistant", "parts": [{"type": "text", "content": self.tracing.redactor.redact(output).into_owned()}]}]);
                    span.set_attribute(KeyValue::new("gen_ai.output.messages", messages.to_string()));
                }
            }
            Err((kind, message)) => {
                span.set_attribute(KeyValue::new("error.type", kind.to_owned()));
                span.set_status(Status::error(message));
            }
        }
        span.end();
    }
}

fn finish_reason(reason: &FinishReason) -> String {
    match reason {
        FinishReason::Stop => "stop".to_owned(),
        FinishReason::ToolCalls => "tool_calls".to_owned(),
        FinishReason::Length => "length".to_owned(),
        FinishReason::ContentFilter => "content_filter".to_owned(),
        FinishReason::Other(other) => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::noop::NoopTracer;

    /// New runs are sampled at the configured ratio, at every ratio (the draw is made of random bytes
    /// only: a UUID's fixed version and variant bits once kept every ratio under 0.5 from sampling).
    #[test]
    fn new_traces_are_sampled_at_the_ratio() {
        for (ratio, low, high) in [(0.01, 15, 100), (0.3, 1_000, 2_000), (0.7, 3_000, 4_000), (1.0, 5_000, 5_000)] {
            let telemetry = Telemetry::new(NoopTracer::new(), ratio, false);
            let sampled = (0..5_000).filter(|_| telemetry.new_trace(None).sampled).count();
            assert!((low..=high).contains(&sampled), "ratio {ratio}: {sampled} of 5000 sampled");
        }
        let none = Telemetry::new(NoopTracer::new(), 0.0, false);
        assert!((0..1_000).all(|_| !none.new_trace(None).sampled));
        let at_one_percent = Telemetry::new(NoopTracer::new(), 0.01, false);
        assert!((0..20_000).any(|_| at_one_percent.new_trace(None).sampled), "1 % samples some");
    }
}
