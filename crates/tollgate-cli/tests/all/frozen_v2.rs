//! The frozen v2 database (`fixtures/v2/`: two runs of the agent `pair`, each waiting with one of its two
//! calls decided, written by the last build that kept one decision per call inside the held turn,
//! committed once, never regenerated). Every build must open and migrate it, show each recorded decision
//! as its call's decided approval, resume each run once the other call is decided, and verify every chain.

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};
use std::path::Path;
use tollgate_agent_testkit::scratch_dir;

use crate::support::Outcome;

const APPROVED_FIRST: &str = "01a24498-37a8-7515-bd29-d1cb012c5e1c";
const DENIED_SECOND: &str = "01a24498-37c2-72b5-9771-06027f9b2af7";

fn tollgate(dir: &Path, args: &[&str]) -> Result<Outcome> {
    let outcome = crate::support::tollgate_in(dir, args, &[])?;
    if outcome.code != 0 {
        bail!("`tollgate {}` failed: {outcome:?}", args.join(" "));
    }
    Ok(outcome)
}

/// Each call of a run's held turn: id, state, action decided and by whom.
fn calls(run: &Value) -> Vec<Value> {
    let calls = run["pending"]["calls"].as_array().cloned().unwrap_or_default();
    calls
        .iter()
        .map(|c| json!([c["call_id"], c["state"], c["decision"]["action"], c["decision"]["actor"], c["approvals"]]))
        .collect()
}

#[test]
fn the_v2_database_opens_migrates_and_resumes_each_partial_decision() -> Result<()> {
    let dir = scratch_dir("frozen-v2");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/v2");
    for file in ["tollgate.db", "tollgate.toml", "script.json"] {
        std::fs::copy(fixture.join(file), dir.join(file)).with_context(|| format!("copy {file}"))?;
    }

    let first = tollgate(&dir, &["show", APPROVED_FIRST, "--json"])?.json()?;
    assert_eq!(
        calls(&first),
        [json!(["call_1", "decided", "approve", "local", null]), json!(["call_2", "waiting", null, null, null]),],
        "{first:#}"
    );
    let second = tollgate(&dir, &["show", DENIED_SECOND, "--json"])?.json()?;
    assert_eq!(
        calls(&second),
        [json!(["call_1", "waiting", null, null, null]), json!(["call_2", "decided", "deny", "local", null])],
        "{second:#}"
    );
    // The call decided before the upgrade is still decided: deciding it again is a conflict.
    let again = crate::support::tollgate_in(&dir, &["approve", APPROVED_FIRST, "--call", "call_1"], &[])?;
    assert_ne!(again.code, 0, "{again:?}");
    assert!(again.stderr.contains("already decided"), "{again:?}");

    let done = tollgate(&dir, &["approve", APPROVED_FIRST, "--call", "call_2"])?;
    assert_eq!(done.stdout, "done\n", "{done:?}");
    assert_eq!(std::fs::read_to_string(dir.join("workspace/a.txt"))?, "first one");
    assert_eq!(std::fs::read_to_string(dir.join("workspace/b.txt"))?, "second one");

    let done = tollgate(&dir, &["approve", DENIED_SECOND, "--call", "call_1"])?;
    assert_eq!(done.stdout, "Understood.\n", "the model heard of the denial: {done:?}");
    // Its approver saw "create a.txt" when no a.txt existed; the first run wrote one since, so the write
    // bound to that view does not run over it.
    assert_eq!(std::fs::read_to_string(dir.join("workspace/a.txt"))?, "first one");
    assert_eq!(std::fs::read_to_string(dir.join("workspace/b.txt"))?, "second one", "the denied write never ran");

    for id in [APPROVED_FIRST, DENIED_SECOND] {
        tollgate(&dir, &["verify", id])?;
        let run = tollgate(&dir, &["show", id, "--json"])?.json()?;
        assert_eq!(run["status"], "completed", "{run:#}");
    }
    Ok(())
}
