//! Taking over a run whose lease expired (its process crashed or stalled).
//!
//! The rule: an ask-gated call whose `tool_started` was committed but whose `tool_finished` was not may
//! or may not have taken effect, so it is never run again by itself. The run goes back to waiting with
//! that call marked in doubt, and a person approves (run again), responds (give the result) or denies.
//! Calls that finished keep their recorded result; allow-gated calls are safe to repeat and simply run.

use crate::{Runtime, RuntimeError, Work, decisions_for, events, suspend_transition};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use tollgate_core::{EventKind, Guard, RunRecord, StoredEvent, ToolResult, Transition};

pub(crate) async fn take_over(runtime: &Runtime, run: &RunRecord) -> Result<(), RuntimeError> {
    let inner = runtime.inner();
    let now = inner.clock.now();
    let spec = crate::spec_arc(inner, &run.agent)?;
    let claimed = inner
        .store
        .transition(
            &run.id,
            Guard::Version(run.version),
            Transition::Claim { lease: inner.lease(now) },
            Vec::new(),
            now,
        )
        .await?;
    inner.notify(&claimed);
    tracing::info!(run = %run.id, "took over a run whose lease expired");

    let Some(pending) = claimed.held_turn().cloned() else {
        // Nothing was held yet: every call so far was allow-gated and safe to repeat. Start again.
        inner.spawn_drive(claimed, spec, Work::Start, None);
        return Ok(());
    };
    let mut suspension = match pending.suspension.parse() {
        Ok(s) => s,
        Err(e) => {
            inner.fail_corrupt(&claimed, &e.to_string()).await;
            return Ok(());
        }
    };
    let ledger = ledger_since_resume(runtime, &run.id, suspension.round).await?;
    let mut in_doubt = Vec::new();
    for call in suspension.calls.clone() {
        if !call.takes_decision() {
            continue;
        }
        match ledger.get(&call.call_id) {
            Some(Some(result)) => {
                suspension.settle(result.clone());
            }
            Some(None) => {
                suspension.mark_in_doubt(&call.call_id);
                in_doubt.push(call.call_id.clone());
            }
            None => {}
        }
    }
    if in_doubt.is_empty() {
        let decisions = decisions_for(&suspension, Some(&pending));
        inner.spawn_drive(claimed, spec, Work::Resume { suspension, decisions, started: None }, None);
        return Ok(());
    }
    // Keep the decisions of calls that never started; the in-doubt ones need a person again.
    let doubtful: HashSet<&String> = in_doubt.iter().collect();
    let kept: BTreeMap<_, _> = pending
        .decisions
        .iter()
        .filter(|(id, _)| !doubtful.contains(id) && suspension.call(id).is_some_and(|c| c.takes_decision()))
        .map(|(id, d)| (id.clone(), d.clone()))
        .collect();
    let event = events::approval_requested(now, &suspension, pending.expires_at);
    let transition = match suspend_transition(&suspension, kept, pending.expires_at) {
        Ok(transition) => transition,
        Err(e) => {
            inner.fail_corrupt(&claimed, &e.to_string()).await;
            return Ok(());
        }
    };
    let next = inner.store.transition(&run.id, Guard::Lease(inner.node.clone()), transition, vec![event], now).await?;
    inner.notify(&next);
    tracing::warn!(run = %run.id, calls = ?in_doubt, "calls in doubt after a crash; the run waits for a person");
    Ok(())
}

/// For each call of the held round since the last resume: `Some(result)` when it finished,
/// `None` when it started and never finished.
async fn ledger_since_resume(
    runtime: &Runtime,
    run_id: &str,
    round: u32,
) -> Result<BTreeMap<String, Option<ToolResult>>, RuntimeError> {
    let store = &runtime.inner().store;
    let mut events: Vec<StoredEvent> = Vec::new();
    loop {
        let page = store.events(run_id, events.len() as u64, 1000).await?;
        let done = page.len() < 1000;
        events.extend(page);
        if done {
            break;
        }
    }
    let start = events.iter().rposition(|e| e.kind == EventKind::RunResumed).map_or(0, |i| i + 1);
    let mut ledger = BTreeMap::new();
    for event in &events[start..] {
        if event.round != round {
            continue;
        }
        let text = |key: &str| event.data.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        match event.kind {
            EventKind::ToolStarted => {
                ledger.insert(text("call_id"), None);
            }
            EventKind::ToolFinished => {
                let result = ToolResult {
                    call_id: text("call_id"),
                    tool: text("tool"),
                    content: text("result"),
                    is_error: event.data.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                    denied: false,
                };
                ledger.insert(result.call_id.clone(), Some(result));
            }
            _ => {}
        }
    }
    Ok(ledger)
}
