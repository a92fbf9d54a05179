//! The run object of API.md, as the HTTP API and the CLI's `--json` print it.

use crate::events::held_call_json;
use serde_json::{Value, json};
use tollgate_core::{RunRecord, RunState, rfc3339};

/// The API.md "Run" JSON for a record. A held turn whose suspension cannot be read shows no calls (and
/// is logged); deciding on it fails the run as `corrupt_suspension`.
pub fn run_json(run: &RunRecord) -> Value {
    let pending = match &run.state {
        RunState::Waiting(pending) => {
            let calls: Vec<Value> = pending
                .suspension
                .parse()
                .inspect_err(|error| tracing::warn!(run = %run.id, %error, "the held turn cannot be read"))
                .map(|s| {
                    s.calls
                        .iter()
                        .map(|call| {
                            let mut value = held_call_json(call);
                            let decision = pending.decisions.get(&call.call_id).map(|d| {
                                let mut v = serde_json::to_value(&d.decision).unwrap_or(Value::Null);
                                if let Value::Object(map) = &mut v {
                                    map.insert("actor".into(), json!(d.actor));
                                    map.insert("at".into(), json!(rfc3339(d.at)));
                                }
                                v
                            });
                            if let Value::Object(map) = &mut value {
                                map.insert("decision".into(), decision.unwrap_or(Value::Null));
                            }
                            value
                        })
                        .collect()
                })
                .unwrap_or_default();
            json!({"turn_digest": pending.turn_digest, "expires_at": pending.expires_at.map(rfc3339), "calls": calls})
        }
        _ => Value::Null,
    };
    json!({
        "id": run.id,
        "agent": run.agent,
        "status": run.status(),
        "input": run.input,
        "output": run.output(),
        "termination_reason": run.termination_reason(),
        "iterations": run.iterations,
        "usage": run.usage,
        "version": run.version,
        "created_by": run.created_by,
        "created_at": rfc3339(run.created_at),
        "updated_at": rfc3339(run.updated_at),
        "finished_at": run.finished_at().map(rfc3339),
        "error": run.error(),
        "pending": pending,
    })
}
