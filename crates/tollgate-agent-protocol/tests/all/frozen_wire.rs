//! The types against JSON that Tollgate has already written: the frozen v1 events
//! (`fixtures/v1/events.jsonl`, never regenerated) and the API objects in the workspace's insta snapshots.
//! Each value is read into its type and written back, and the text must be identical: same keys, same
//! order, same `null`s.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use tollgate_agent_protocol::{Event, EventData, EventKind, Problem, PurgeResult, Run, ToolList};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

#[test]
fn every_frozen_v1_event_data_is_written_back_byte_for_byte() {
    let path = workspace().join("fixtures/v1/events.jsonl");
    let text = read(&path);
    let mut kinds = BTreeSet::new();
    let mut actions = BTreeSet::new();
    let mut lines = 0;
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let at = format!("{}:{}", path.display(), n + 1);
        let line: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{at}: not JSON: {e}"));
        let kind = line["kind"].as_str().unwrap_or_else(|| panic!("{at}: no kind"));
        let data = EventData::from_kind_and_value(kind, line["data"].clone()).unwrap_or_else(|e| panic!("{at}: {e}"));
        assert_eq!(data.kind().as_str(), kind, "{at}");
        let expected = serde_json::to_string(&line["data"]).unwrap_or_else(|e| panic!("{at}: {e}"));
        let written = serde_json::to_string(&data.to_value()).unwrap_or_else(|e| panic!("{at}: {e}"));
        assert_eq!(written, expected, "{at}: to_value");
        let direct = serde_json::to_string(&data).unwrap_or_else(|e| panic!("{at}: {e}"));
        assert_eq!(direct, expected, "{at}: Serialize");

        // The line is also an API event (plus its `run_id`, which an answer does not carry and a reader
        // ignores), and reads typed through it.
        let event: Event = serde_json::from_value(line.clone()).unwrap_or_else(|e| panic!("{at}: {e}"));
        assert_eq!(event.typed_data().ok().as_ref(), Some(&data), "{at}");

        kinds.insert(kind.to_owned());
        if let EventData::Decision(d) = &data {
            actions.insert(d.decision.action());
        }
        lines += 1;
    }
    assert!(lines >= 50, "the fixture has {lines} events");
    // v1 wrote these kinds; the others (run_failed, run_expired, and run_taken_over and
    // approval_escalated, which v1 never wrote) are covered by the unit tests.
    let expected_kinds: BTreeSet<String> = EventKind::ALL
        .iter()
        .filter(|k| {
            !matches!(
                k,
                EventKind::RunFailed | EventKind::RunExpired | EventKind::RunTakenOver | EventKind::ApprovalEscalated
            )
        })
        .map(|k| k.as_str().to_owned())
        .collect();
    assert_eq!(kinds, expected_kinds);
    assert_eq!(actions, BTreeSet::from(["approve", "deny", "edit", "respond"]));
}

/// The JSON objects in an insta snapshot: its content after the header, either one pretty-printed
/// value or a CLI transcript with values printed at column 0 (`{` ... `}` on lines of their own).
fn snapshot_objects(text: &str) -> Vec<String> {
    let content = text.splitn(3, "---\n").nth(2).unwrap_or_default();
    let mut objects = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in content.lines() {
        match (&mut current, line) {
            (None, "{") => current = Some(vec![line]),
            (Some(lines), "}") => {
                lines.push(line);
                objects.push(lines.join("\n"));
                current = None;
            }
            (Some(lines), _) => lines.push(line),
            (None, _) => {}
        }
    }
    objects
}

fn written_back<T: Serialize + DeserializeOwned>(text: &str, at: &str) -> String {
    let value: T = serde_json::from_str(text).unwrap_or_else(|e| panic!("{at}: {e}\n{text}"));
    serde_json::to_string_pretty(&value).unwrap_or_else(|e| panic!("{at}: {e}"))
}

fn compact<T: Serialize>(value: &T, at: &str) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| panic!("{at}: {e}"))
}

#[test]
fn every_api_object_in_the_server_and_cli_snapshots_is_written_back_identically() {
    let mut runs = 0;
    let mut waiting = 0;
    let mut problems = 0;
    let mut events = 0;
    let mut others = 0;
    for dir in ["crates/tollgate-agent-server/tests/all/snapshots", "crates/tollgate-cli/tests/all/snapshots"] {
        let dir = workspace().join(dir);
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for path in paths.iter().filter(|p| p.extension().is_some_and(|e| e == "snap")) {
            for (i, object) in snapshot_objects(&read(path)).iter().enumerate() {
                let at = format!("{} object {}", path.display(), i + 1);
                let value: Value = serde_json::from_str(object).unwrap_or_else(|e| panic!("{at}: {e}\n{object}"));
                if value.get("status").is_some_and(Value::is_string) && value.get("pending").is_some() {
                    if let Some(Value::Array(shown)) = value.get("events") {
                        // `show --json`: the run object with its events appended (a CLI shape).
                        let mut run = value.clone();
                        if let Value::Object(map) = &mut run {
                            map.remove("events");
                        }
                        let typed: Run = serde_json::from_value(run.clone()).unwrap_or_else(|e| panic!("{at}: {e}"));
                        assert_eq!(compact(&typed, &at), compact(&run, &at), "{at}");
                        for event in shown {
                            let typed: Event =
                                serde_json::from_value(event.clone()).unwrap_or_else(|e| panic!("{at}: {e}"));
                            assert_eq!(compact(&typed, &at), compact(event, &at), "{at}");
                            let data = typed.typed_data().unwrap_or_else(|e| panic!("{at}: {e}"));
                            assert_eq!(compact(&data, &at), compact(&event["data"], &at), "{at}");
                            events += 1;
                        }
                    } else {
                        assert_eq!(written_back::<Run>(object, &at), *object, "{at}");
                    }
                    runs += 1;
                    if !value["pending"].is_null() {
                        waiting += 1;
                    }
                } else if value.get("type").is_some() && value.get("title").is_some() {
                    assert_eq!(written_back::<Problem>(object, &at), *object, "{at}");
                    problems += 1;
                } else if let Some(Value::Array(listed)) = value.get("runs") {
                    // `runs --json` prints the runs without the API's `next_cursor`.
                    for run in listed {
                        let typed: Run = serde_json::from_value(run.clone()).unwrap_or_else(|e| panic!("{at}: {e}"));
                        assert_eq!(compact(&typed, &at), compact(run, &at), "{at}");
                        runs += 1;
                    }
                } else if value.get("tools").is_some() {
                    assert_eq!(written_back::<ToolList>(object, &at), *object, "{at}");
                    others += 1;
                } else if value.get("deleted_runs").is_some() {
                    assert_eq!(written_back::<PurgeResult>(object, &at), *object, "{at}");
                    others += 1;
                }
            }
        }
    }
    assert!(runs >= 5, "found {runs} run objects");
    assert!(waiting >= 1, "found {waiting} waiting runs");
    assert!(problems >= 3, "found {problems} problems");
    assert!(events >= 10, "found {events} events");
    assert_eq!(others, 2, "the tool list and the purge answer");
    // No snapshot holds a run with a recorded decision: `tests/shapes.rs` covers that shape.
}
