//! The example as its users run it: three separate processes on one database file.

use std::process::Command;

fn example(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_example-two-process"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("could not run the example: {e}"));
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.success(), text(&output.stdout), text(&output.stderr))
}

#[test]
fn a_run_started_in_one_process_is_approved_and_resumed_in_another_exactly_once() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let db = dir.path().join("runs.db");
    let db = db.to_str().unwrap_or_else(|| panic!("path"));

    let (ok, out, err) = example(&["start", db, "Delete the 2019 invoices"]);
    assert!(ok, "start failed: {err}");
    assert!(!out.contains("purge ran"), "the tool ran before anyone decided: {out}");
    let mut words = out.split_whitespace();
    let id = words.next().unwrap_or_else(|| panic!("no run id in {out:?}")).to_owned();
    assert_eq!(words.next(), Some("waiting_for_approval"), "{out}");

    let (ok, out, err) = example(&["show", db, &id]);
    assert!(ok, "show failed: {err}");
    assert!(out.starts_with("digest sha256:"), "{out}");
    assert!(out.contains("call_1 purge {\"pattern\":\"invoices/2019-*\"}"), "{out}");

    let (ok, out, err) = example(&["approve", db, &id]);
    assert!(ok, "approve failed: {err}");
    assert_eq!(out.matches("purge ran in process").count(), 1, "{out}");
    assert!(out.contains(&format!("{id} completed: The 2019 invoices are gone.")), "{out}");

    // Deciding again is refused: the run has moved on, and nothing runs twice.
    let (ok, out, err) = example(&["approve", db, &id]);
    assert!(!ok, "a second approval was accepted: {out}");
    assert!(err.contains("not waiting for approval"), "{err}");
    assert!(!out.contains("purge ran"), "{out}");
}
