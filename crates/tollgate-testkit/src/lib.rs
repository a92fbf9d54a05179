//! # tollgate-testkit
//!
//! Test doubles for Tollgate's ports, in one place so no test file grows its own: a configurable
//! [`TestTool`] that records every invocation, and [`RecordingHooks`] that keep the loop's events.

use serde_json::{Value, json};
use std::sync::{Arc, Mutex, PoisonError};
use tollgate_core::{
    BoxFuture, Gate, HookError, LoopEvent, LoopHooks, Tool, ToolContext, ToolError, ToolOutput,
};

/// What a [`TestTool`] does when called.
#[derive(Clone, Debug)]
pub enum Behaviour {
    /// Returns `ran NAME with ARGS`.
    Echo,
    /// Returns this text.
    Output(String),
    /// Returns this text as an error result for the model.
    ModelError(String),
    /// Fails internally with this message (which must not reach the model).
    Fail(String),
    /// Panics with this message.
    Panic(String),
}

type GateFn = Arc<dyn Fn(&Value) -> Gate + Send + Sync>;

/// A tool for tests: fixed or computed gate, optional preview, chosen behaviour, and a shared log of calls.
#[derive(Clone)]
pub struct TestTool {
    name: String,
    description: String,
    schema: Value,
    gate: GateFn,
    preview: Option<String>,
    behaviour: Behaviour,
    calls: Arc<Mutex<Vec<(String, Value)>>>,
}

impl TestTool {
    /// An allow-gated tool taking any object, echoing its arguments.
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        Self {
            description: format!("test tool {name}"),
            name,
            schema: json!({"type": "object"}),
            gate: Arc::new(|_| Gate::Allow),
            preview: None,
            behaviour: Behaviour::Echo,
            calls: Arc::default(),
        }
    }

    /// Sets a fixed gate.
    pub fn gate(mut self, gate: Gate) -> Self {
        self.gate = Arc::new(move |_| gate);
        self
    }

    /// Sets a gate computed from the arguments.
    pub fn gate_fn(mut self, gate: impl Fn(&Value) -> Gate + Send + Sync + 'static) -> Self {
        self.gate = Arc::new(gate);
        self
    }

    /// Sets the argument schema.
    pub fn schema(mut self, schema: Value) -> Self {
        self.schema = schema;
        self
    }

    /// Sets the preview.
    pub fn preview(mut self, preview: impl Into<String>) -> Self {
        self.preview = Some(preview.into());
        self
    }

    /// Sets the behaviour.
    pub fn behaviour(mut self, behaviour: Behaviour) -> Self {
        self.behaviour = behaviour;
        self
    }

    /// Every invocation so far: (call id, arguments).
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many times the tool ran.
    pub fn call_count(&self) -> usize {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// The tool as a registry entry (sharing this handle's call log).
    pub fn shared(&self) -> Arc<dyn Tool> {
        Arc::new(self.clone())
    }
}

impl Tool for TestTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> &Value {
        &self.schema
    }

    fn gate(&self, args: &Value) -> Gate {
        (self.gate)(args)
    }

    fn preview(&self, _args: &Value) -> Option<String> {
        self.preview.clone()
    }

    fn call<'a>(&'a self, args: Value, ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            self.calls.lock().unwrap_or_else(PoisonError::into_inner).push((ctx.call_id.clone(), args.clone()));
            match &self.behaviour {
                Behaviour::Echo => Ok(ToolOutput::text(format!("ran {} with {}", self.name, args))),
                Behaviour::Output(text) => Ok(ToolOutput::text(text.clone())),
                Behaviour::ModelError(text) => Ok(ToolOutput::error(text.clone())),
                Behaviour::Fail(message) => Err(ToolError::new(message.clone())),
                Behaviour::Panic(message) => panic!("{message}"),
            }
        })
    }
}

/// Hooks that record each loop event as one line of text, e.g. `tool_started 2 call_1 fs_write ask`.
#[derive(Clone, Default)]
pub struct RecordingHooks {
    lines: Arc<Mutex<Vec<String>>>,
}

impl RecordingHooks {
    /// The events so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl LoopHooks for RecordingHooks {
    fn on_event<'a>(&'a self, event: LoopEvent<'a>) -> BoxFuture<'a, Result<(), HookError>> {
        let line = match event {
            LoopEvent::ModelRequest { round, messages, tools } => {
                format!("model_request {round} messages={messages} tools={}", tools.len())
            }
            LoopEvent::ModelResponse { round, response } => {
                format!("model_response {round} calls={}", response.tool_calls.len())
            }
            LoopEvent::ToolStarted { round, call_id, tool, gate, .. } => {
                format!("tool_started {round} {call_id} {tool} {gate}")
            }
            LoopEvent::ToolFinished { round, result } => {
                format!("tool_finished {round} {} {} error={}", result.call_id, result.tool, result.is_error)
            }
        };
        self.lines.lock().unwrap_or_else(PoisonError::into_inner).push(line);
        Box::pin(std::future::ready(Ok(())))
    }
}
