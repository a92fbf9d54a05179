//! Taking over a run whose lease expired (its process crashed or stalled).
//!
//! The rule: an ask-gated call whose `tool_started` was committed but whose `tool_finished` was not may
//! or may not have taken effect, so it is never run again by itself. The run goes back to waiting with
//! that call marked in doubt, and a person approves (run again), responds (give the result) or denies.
//! Calls that finished keep their recorded result; allow-gated calls are safe to repeat and simply run.
//!
//! A takeover is committed with the claim as a `run_taken_over` event, so the log says which process
//! continued the run and how many takeovers in a row it has had without reaching a new step. A segment
//! that stops every process driving it (a tool exhausting memory, a crash in a dependency) would
//! otherwise be taken over after every restart, for ever: once `max_takeovers` takeovers in a row have
//! committed nothing else, the next one fails the run (`crash_loop`) instead of driving it again.

use crate::error::SweepError;
use crate::workers::Slot;
use crate::{Runtime, Work, events, suspend_transition};
use std::collections::BTreeMap;
use tollgate_agent_core::{Approval, EventKind, Guard, RunRecord, StoredEvent, ToolResult, Transition};
use tollgate_agent_core::{CallId, RunId};
use tollgate_agent_protocol::{EventData, EventDataError};

/// Takes over a running run whose lease expired, with one of this process's workers; without a free
/// worker (or while shutting down) it is left for the next sweep or another node.
pub(crate) async fn take_over(runtime: &Runtime, run: &RunRecord) -> Result<(), SweepError> {
    let inner = runtime.inner();
    // A run this process still drives is not taken over by it: its lease lapsed only because the store
    // could not renew it (an outage the drive is waiting out), and the drive goes on once the store
    // takes writes. Taking it over here would drive it twice under one lease owner.
    if inner.in_flight.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(&run.id) {
        return Ok(());
    }
    let Some(slot) = inner.pool.try_slot() else { return Ok(()) };
    crate::spec_arc(inner, &run.agent)?;
    let before = takeovers_in_a_row(&events_of(runtime, &run.id).await?);
    let now = inner.clock.now();
    let previous_owner = run.lease().map_or("", |l| l.owner.as_str());
    let takeovers = before.saturating_add(1);
    let taken = events::run_taken_over(now, run.iterations, &inner.node, previous_owner, takeovers);
    let claimed = inner
        .store
        .rows
        .transition(
            &run.id,
            Guard::Version(run.version),
            Transition::Claim { lease: inner.lease(now) },
            vec![taken],
            now,
        )
        .await?;
    inner.notify(&claimed);
    if before >= inner.max_takeovers {
        tracing::warn!(run = %run.id, takeovers = before, "a run keeps stopping the process driving it: failing it");
        inner.fail_crash_loop(&claimed, before).await;
        return Ok(());
    }
    tracing::info!(run = %run.id, takeovers, "took over a run whose lease expired");
    resume_claimed(runtime, claimed, slot).await
}

/// How many `run_taken_over` events end the log with nothing else after them: the takeovers in a row
/// whose segment committed no new step before its process stopped.
fn takeovers_in_a_row(events: &[StoredEvent]) -> u32 {
    let taken = events.iter().rev().take_while(|e| e.kind == EventKind::RunTakenOver).count();
    u32::try_from(taken).unwrap_or(u32::MAX)
}

/// Drives a queued run this process's worker claimed (see [`crate::workers`]); failures are logged
/// (the run stays as the failed step left it: queued runs are claimed again, a held lease expires).
pub(crate) async fn continue_claimed(runtime: &Runtime, claimed: RunRecord, slot: Slot) {
    let id = claimed.id.clone();
    if let Err(error) = resume_claimed(runtime, claimed, slot).await {
        tracing::warn!(run = %id, %error, "could not continue a claimed run");
    }
}

/// Continues a run this process has just claimed (running under its lease): from its input when it
/// never held a turn, else from its held turn with what the log says already ran — a call started and
/// never finished puts the run back to waiting with that call in doubt.
async fn resume_claimed(runtime: &Runtime, claimed: RunRecord, slot: Slot) -> Result<(), SweepError> {
    let inner = runtime.inner();
    let now = inner.clock.now();
    let run = &claimed;
    // Claims are of this node's agents only (`claim_queued`, and a takeover checks first).
    let spec = crate::spec_arc(inner, &run.agent)?;
    let Some(pending) = claimed.held_turn().cloned() else {
        // Nothing was held yet: every call so far was allow-gated and safe to repeat. Start again.
        inner.spawn_drive(claimed, spec, Work::Start, None, slot);
        return Ok(());
    };
    let mut suspension = match pending.suspension.parse() {
        Ok(s) => s,
        Err(e) => {
            inner.fail_corrupt(&claimed, &e.to_string()).await;
            return Ok(());
        }
    };
    let ledger = match ledger(&events_of(runtime, &run.id).await?, suspension.round) {
        Ok(ledger) => ledger,
        Err(e) => {
            // The log this runtime wrote cannot be read: which calls ran is unknown, so nothing may
            // run again; the run fails rather than guess.
            inner.fail_corrupt(&claimed, &format!("event {}: {}", e.0, e.1)).await;
            return Ok(());
        }
    };
    let mut in_doubt = Vec::new();
    for call in suspension.calls.clone() {
        // A call a grant allowed ran like an approved one: its start committed, so it is in doubt too.
        if !call.takes_decision() && call.grant().is_none() {
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
        inner.spawn_drive(claimed, spec, Work::Resume { suspension, plan: None }, None, slot);
        return Ok(());
    }
    // Keep the approvals of calls that never started; the in-doubt ones need people again.
    let kept: Vec<Approval> = pending
        .approvals
        .iter()
        .filter(|a| !in_doubt.contains(&a.call_id) && suspension.call(&a.call_id).is_some_and(|c| c.takes_decision()))
        .cloned()
        .collect();
    let (transition, requested) = match suspend_transition(&run.id, &suspension, kept, pending.expires_at, now) {
        Ok(suspended) => suspended,
        Err(e) => {
            inner.fail_corrupt(&claimed, &e.to_string()).await;
            return Ok(());
        }
    };
    let guard = Guard::Lease(inner.node.clone());
    let next = inner.store.rows.transition(&run.id, guard, transition, vec![requested], now).await?;
    inner.notify(&next);
    tracing::warn!(run = %run.id, calls = ?in_doubt, "calls in doubt after a crash; the run waits for a person");
    Ok(())
}

/// Every event of a run, in order.
async fn events_of(runtime: &Runtime, run_id: &RunId) -> Result<Vec<StoredEvent>, SweepError> {
    Ok(tollgate_agent_core::store::events_after(&*runtime.inner().store.log, run_id, 0).await?)
}

/// For each call of the held round since the last resume: `Some(result)` when it finished, `None`
/// when it started and never finished. Reads every event's data typed by its kind, so it holds at every
/// privacy level; an event whose data does not fit its kind is named by its seq.
fn ledger(events: &[StoredEvent], round: u32) -> Result<BTreeMap<CallId, Option<ToolResult>>, (u64, EventDataError)> {
    let start = events.iter().rposition(|e| e.kind == EventKind::RunResumed).map_or(0, |i| i + 1);
    let mut ledger = BTreeMap::new();
    for event in events[start..].iter().filter(|e| e.round == round) {
        if !matches!(event.kind, EventKind::ToolStarted | EventKind::ToolFinished) {
            continue;
        }
        let data = EventData::from_kind(event.kind, event.data.clone()).map_err(|e| (event.seq, e))?;
        match data {
            EventData::ToolStarted(started) => {
                ledger.insert(started.call_id, None);
            }
            EventData::ToolFinished(finished) => {
                // The log keeps no result under `[privacy] level = "metadata"` (and only its size under
                // `redacted`): the call still finished, and is settled with what the log kept. The log
                // keeps no image data either: a result's images are left as its text describes them.
                let result = ToolResult {
                    call_id: finished.call_id,
                    tool: finished.tool,
                    content: finished.result.unwrap_or_default(),
                    is_error: finished.is_error,
                    denied: false,
                    images: Vec::new(),
                };
                ledger.insert(result.call_id.clone(), Some(result));
            }
            EventData::RunStarted(_)
            | EventData::ModelRequest(_)
            | EventData::ModelResponse(_)
            | EventData::ApprovalRequested(_)
            | EventData::Decision(_)
            | EventData::ApprovalEscalated(_)
            | EventData::RunResumed(_)
            | EventData::RunTakenOver(_)
            | EventData::RunCompleted(_)
            | EventData::RunFailed(_)
            | EventData::RunCancelled(_)
            | EventData::RunExpired(_) => {}
        }
    }
    Ok(ledger)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy::{PrivacyLevel, keep};
    use serde_json::{Value, json};

    fn stored(seq: u64, kind: EventKind, round: u32, mut data: Value, level: PrivacyLevel) -> StoredEvent {
        keep(level, kind, &mut data);
        StoredEvent { seq, at: String::new(), kind, round, data, hash: String::new() }
    }

    /// Crash recovery reads the ledger from events as stored, whatever the privacy level kept of them.
    #[test]
    fn the_ledger_tells_finished_from_in_doubt_at_every_privacy_level() {
        for level in [PrivacyLevel::Full, PrivacyLevel::Redacted, PrivacyLevel::Metadata] {
            let started = |seq, call: &str| {
                let data = json!({"call_id": call, "tool": "write", "arguments": {"text": "hi"}, "gate": "ask",
                                  "idempotency_key": format!("r:{call}")});
                stored(seq, EventKind::ToolStarted, 1, data, level)
            };
            let events = vec![
                stored(1, EventKind::RunResumed, 1, json!({"actor": "bob"}), level),
                started(2, "call_1"),
                stored(
                    3,
                    EventKind::ToolFinished,
                    1,
                    json!({"call_id": "call_1", "tool": "write", "is_error": true, "result": "disk full"}),
                    level,
                ),
                started(4, "call_2"),
            ];
            let held = ledger(&events, 1).unwrap_or_else(|(seq, e)| panic!("{level:?}: event {seq}: {e}"));
            let finished = held.get("call_1").cloned().flatten();
            assert_eq!(finished.as_ref().map(|r| (r.tool.as_str(), r.is_error)), Some(("write", true)), "{level:?}");
            let kept = finished.map(|r| r.content).unwrap_or_default();
            match level {
                PrivacyLevel::Full => assert_eq!(kept, "disk full"),
                PrivacyLevel::Redacted => assert_eq!(kept, "[string: 9 bytes]"),
                PrivacyLevel::Metadata => assert_eq!(kept, ""),
            }
            assert_eq!(held.get("call_2"), Some(&None), "{level:?}: started, never finished: in doubt");
            assert!(ledger(&events, 2).is_ok_and(|l| l.is_empty()), "{level:?}: another round is not this one");
        }
        let broken = [stored(1, EventKind::ToolStarted, 1, json!({"tool": "write"}), PrivacyLevel::Full)];
        assert!(matches!(ledger(&broken, 1), Err((1, _))), "data that does not fit is refused, not guessed");
    }
}
