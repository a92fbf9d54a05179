//! Frozen fixtures (`fixtures/v1/`): a suspension and the events of six runs, written by Tollgate v1 and
//! committed once, never regenerated. Every build must still read them exactly: a change to the
//! suspension format or to the event JSON that stored runs rely on fails here.

use std::collections::BTreeMap;
use tollgate_agent_core::{EventKind, StoredEvent, Suspension, verify_chain};

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/v1").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_v1_suspension_reads_and_writes_back_byte_for_byte() {
    let text = fixture("suspension.json");
    let suspension = Suspension::from_json(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(suspension.round, 1);
    let ids: Vec<&str> = suspension.calls.iter().map(|c| c.call_id.as_str()).collect();
    assert_eq!(ids, ["call_1", "call_2"]);
    let decidable: Vec<&str> = suspension.decidable_calls().map(|c| c.call_id.as_str()).collect();
    assert_eq!(decidable, ["call_2"], "fs_write asks, fs_list is allowed");
    assert_eq!(
        suspension.to_json().unwrap_or_else(|e| panic!("{e}")),
        text.trim_end(),
        "the suspension format is unchanged"
    );
}

#[test]
fn the_v1_event_logs_verify_and_their_json_is_unchanged() {
    let mut runs: BTreeMap<String, Vec<StoredEvent>> = BTreeMap::new();
    for line in fixture("events.jsonl").lines() {
        let mut value: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let run_id = value["run_id"].as_str().unwrap_or_default().to_owned();
        if let Some(map) = value.as_object_mut() {
            map.remove("run_id");
        }
        let event: StoredEvent = serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}: {line}"));
        runs.entry(run_id).or_default().push(event);
    }
    assert_eq!(runs.len(), 6);
    for (run_id, events) in &runs {
        let last = events.last().unwrap_or_else(|| panic!("{run_id} has no events"));
        verify_chain(events, last.seq, &last.hash).unwrap_or_else(|e| panic!("{run_id}: {e}"));
        assert_eq!(events[0].kind, EventKind::RunStarted, "{run_id}");
    }
    let kinds: std::collections::BTreeSet<&str> = runs.values().flatten().map(|e| e.kind.as_str()).collect();
    for kind in ["decision", "run_resumed", "tool_started", "tool_finished", "approval_requested", "run_cancelled"] {
        assert!(kinds.contains(kind), "the fixtures hold a {kind} event");
    }
}
