//! What the event log keeps: the privacy level applied to every event before it is stored, and the
//! redactor that keeps configured secrets out of events, run errors and outputs.
//!
//! Both work as a layer over the store's run rows (`filtered`), the one concern that writes events, so
//! every event of every writer passes through it and no writer can forget them. They act before the store chains the events: the hash chain
//! covers exactly what is stored, and `verify` holds. The suspension (the held turn) is not touched — the
//! approver still sees the held calls in full — and neither are the run's own input and output columns
//! (encrypt them at rest with `[[privacy.keys]]` instead).
//!
//! | level | what events keep of prompts, model text, arguments, results, previews and decisions' texts |
//! |---|---|
//! | `full` | everything |
//! | `redacted` | the shape and size: strings become `"[string: N bytes]"`, numbers `"[number]"`, booleans `"[boolean]"`; object keys and array lengths stay |
//! | `metadata` | nothing: those fields are `null`; kinds, ids, tool names, gates, flags, usage and actors stay |

use std::sync::Arc;
use tollgate_agent_core::RunId;

use serde_json::{Map, Value};
use tollgate_agent_core::redact::Redactor;
use tollgate_agent_core::{
    BoxFuture, EventKind, Guard, Millis, NewEvent, RunPage, RunQuery, RunRecord, RunRows, RunState, RunStore,
    StoreError, Transition,
};

/// How much of the content of runs the event log keeps (`[privacy] level`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PrivacyLevel {
    /// Everything.
    #[default]
    Full,
    /// Shapes and sizes, not the text.
    Redacted,
    /// Kinds and ids only.
    Metadata,
}

/// The fields of an event's data that hold content (a prompt, text, arguments, a result, a preview, a
/// person's words), by kind. Paths are keys; `[]` applies the rest to every element of an array.
fn content_fields(kind: EventKind) -> &'static [&'static [&'static str]] {
    match kind {
        EventKind::RunStarted => &[&["input"]],
        EventKind::ModelResponse => &[&["text"], &["tool_calls", "[]", "arguments"]],
        EventKind::ToolStarted => &[&["arguments"]],
        EventKind::ToolFinished => &[&["result"]],
        EventKind::ApprovalRequested => &[&["calls", "[]", "arguments"], &["calls", "[]", "preview"]],
        EventKind::Decision => &[&["arguments"], &["result"], &["reason"]],
        EventKind::RunCompleted => &[&["output"]],
        EventKind::ModelRequest
        | EventKind::ApprovalEscalated
        | EventKind::RunResumed
        | EventKind::RunTakenOver
        | EventKind::RunFailed
        | EventKind::RunCancelled
        | EventKind::RunExpired => &[],
    }
}

/// Applies `level` to one event's data, in place.
pub fn keep(level: PrivacyLevel, kind: EventKind, data: &mut Value) {
    if level == PrivacyLevel::Full {
        return;
    }
    for path in content_fields(kind) {
        apply_at(data, path, level);
    }
}

fn apply_at(value: &mut Value, path: &[&str], level: PrivacyLevel) {
    match path.split_first() {
        None => {
            *value = match level {
                PrivacyLevel::Full => return,
                PrivacyLevel::Redacted => shape(value),
                PrivacyLevel::Metadata => Value::Null,
            }
        }
        Some((&"[]", rest)) => {
            if let Value::Array(items) = value {
                items.iter_mut().for_each(|item| apply_at(item, rest, level));
            }
        }
        Some((key, rest)) => {
            if let Some(field) = value.as_object_mut().and_then(|map| map.get_mut(*key)) {
                apply_at(field, rest, level);
            }
        }
    }
}

/// The shape and size of a value, without its text.
fn shape(value: &Value) -> Value {
    match value {
        Value::Null => Value::Null,
        Value::Bool(_) => Value::String("[boolean]".into()),
        Value::Number(_) => Value::String("[number]".into()),
        Value::String(text) => Value::String(format!("[string: {} bytes]", text.len())),
        Value::Array(items) => Value::Array(items.iter().map(shape).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), shape(v))).collect::<Map<_, _>>()),
    }
}

/// The run rows of `store` with the privacy level and the redactor applied to everything written through
/// them; `store`'s rows themselves when there is nothing to apply (level `full`, no secrets), so the
/// default costs nothing. Only rows write events: the other concerns of the store need no layer.
pub(crate) fn filtered(store: Arc<dyn RunStore>, level: PrivacyLevel, redactor: Redactor) -> Arc<dyn RunRows> {
    if level == PrivacyLevel::Full && redactor.is_empty() {
        return store;
    }
    Arc::new(FilteredRows { inner: store, level, redactor })
}

struct FilteredRows {
    inner: Arc<dyn RunRows>,
    level: PrivacyLevel,
    redactor: Redactor,
}

impl FilteredRows {
    fn events(&self, mut events: Vec<NewEvent>) -> Vec<NewEvent> {
        for event in &mut events {
            self.redactor.redact_value(&mut event.data);
            keep(self.level, event.kind, &mut event.data);
        }
        events
    }

    fn record(&self, mut run: RunRecord) -> RunRecord {
        match &mut run.state {
            RunState::Failed { error, .. } => self.redactor.redact_string(&mut error.message),
            RunState::Completed { output: Some(output), .. } => self.redactor.redact_string(output),
            _ => {}
        }
        run
    }

    fn transition(&self, mut transition: Transition) -> Transition {
        match &mut transition {
            Transition::Fail { error } => self.redactor.redact_string(&mut error.message),
            Transition::Complete { output: Some(output), .. } => self.redactor.redact_string(output),
            _ => {}
        }
        transition
    }
}

impl RunRows for FilteredRows {
    fn create(&self, run: RunRecord, events: Vec<NewEvent>) -> BoxFuture<'_, Result<RunRecord, StoreError>> {
        let (run, events) = (self.record(run), self.events(events));
        self.inner.create(run, events)
    }

    fn get<'a>(&'a self, id: &'a RunId) -> BoxFuture<'a, Result<RunRecord, StoreError>> {
        self.inner.get(id)
    }

    fn resolve_prefix<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<RunId, StoreError>> {
        self.inner.resolve_prefix(prefix)
    }

    fn list(&self, query: RunQuery) -> BoxFuture<'_, Result<RunPage, StoreError>> {
        self.inner.list(query)
    }

    fn transition<'a>(
        &'a self,
        id: &'a RunId,
        guard: Guard,
        transition: Transition,
        events: Vec<NewEvent>,
        now: Millis,
    ) -> BoxFuture<'a, Result<RunRecord, StoreError>> {
        let (transition, events) = (self.transition(transition), self.events(events));
        self.inner.transition(id, guard, transition, events, now)
    }

    fn append<'a>(
        &'a self,
        id: &'a RunId,
        owner: &'a str,
        events: Vec<NewEvent>,
        lease_until: Millis,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        let events = self.events(events);
        self.inner.append(id, owner, events, lease_until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool_started() -> Value {
        json!({"call_id": "call_1", "tool": "pay", "arguments": {"to": "alice", "amount": 120, "memo": ["rent"]},
               "gate": "ask", "idempotency_key": "r:call_1"})
    }

    #[test]
    fn full_keeps_everything() {
        let mut data = tool_started();
        keep(PrivacyLevel::Full, EventKind::ToolStarted, &mut data);
        assert_eq!(data, tool_started());
    }

    #[test]
    fn redacted_keeps_shapes_and_sizes() {
        let mut data = tool_started();
        keep(PrivacyLevel::Redacted, EventKind::ToolStarted, &mut data);
        assert_eq!(
            data,
            json!({"call_id": "call_1", "tool": "pay",
                   "arguments": {"to": "[string: 5 bytes]", "amount": "[number]", "memo": ["[string: 4 bytes]"]},
                   "gate": "ask", "idempotency_key": "r:call_1"})
        );
    }

    #[test]
    fn metadata_keeps_kinds_and_ids() {
        let mut data = tool_started();
        keep(PrivacyLevel::Metadata, EventKind::ToolStarted, &mut data);
        assert_eq!(
            data,
            json!({"call_id": "call_1", "tool": "pay", "arguments": null, "gate": "ask", "idempotency_key": "r:call_1"})
        );
        let mut held = json!({"turn_digest": "sha256:x", "expires_at": null,
                              "calls": [{"call_id": "c1", "tool": "t", "arguments": {"a": 1}, "gate": "ask",
                                         "preview": "diff", "in_doubt": false}]});
        keep(PrivacyLevel::Metadata, EventKind::ApprovalRequested, &mut held);
        assert_eq!(held["calls"][0]["arguments"], Value::Null);
        assert_eq!(held["calls"][0]["preview"], Value::Null);
        assert_eq!(held["calls"][0]["call_id"], "c1");
        let mut response = json!({"text": "hi", "tool_calls": [{"call_id": "c1", "tool": "t", "arguments": {}}],
                                  "usage": {"input_tokens": 3, "output_tokens": 4}});
        keep(PrivacyLevel::Metadata, EventKind::ModelResponse, &mut response);
        assert_eq!(
            response,
            json!({"text": null, "tool_calls": [{"call_id": "c1", "tool": "t", "arguments": null}],
                   "usage": {"input_tokens": 3, "output_tokens": 4}})
        );
    }
}
