//! The frozen v1 database (`fixtures/v1/tollgate.db`: six demo runs — approved, waiting, denied, answered,
//! cancelled, edited — written by Tollgate v1, committed once, never regenerated). Every build must open
//! it, verify every run's chain, show its runs, and finish the waiting one.

use anyhow::{Context as _, Result, bail};
use std::path::Path;
use tollgate_agent_testkit::scratch_dir;

use crate::support::Outcome;

const WAITING: &str = "01a22fb8-f047-7091-a426-f0f641394406";

fn tollgate(dir: &Path, args: &[&str]) -> Result<Outcome> {
    let outcome = crate::support::tollgate_in(dir, args, &[])?;
    if outcome.code != 0 {
        bail!("`tollgate {}` failed: {outcome:?}", args.join(" "));
    }
    Ok(outcome)
}

#[test]
fn the_v1_database_opens_verifies_and_resumes() -> Result<()> {
    let dir = scratch_dir("frozen-v1");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/v1/tollgate.db");
    std::fs::copy(&fixture, dir.join("tollgate.db")).context("copy the fixture")?;

    let listed = tollgate(&dir, &["runs", "--json"])?.json()?;
    let runs = listed["runs"].as_array().context("runs")?;
    let mut statuses: Vec<&str> = runs.iter().filter_map(|r| r["status"].as_str()).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, ["cancelled", "completed", "completed", "completed", "completed", "waiting_for_approval"]);
    for run in runs {
        let id = run["id"].as_str().context("id")?;
        assert_eq!(run["metadata"], serde_json::json!({}), "{id}: a v1 run has no metadata");
        tollgate(&dir, &["verify", id])?;
    }

    let waiting = tollgate(&dir, &["show", WAITING, "--json"])?.json()?;
    assert_eq!(waiting["pending"]["calls"][1]["preview"], "create note.txt (15 bytes)");
    let approved = tollgate(&dir, &["approve", WAITING])?;
    assert_eq!(approved.stdout, "Saved note.txt.\n");
    assert_eq!(std::fs::read_to_string(dir.join("workspace/note.txt"))?, "keep me waiting");
    tollgate(&dir, &["verify", WAITING])?;
    Ok(())
}
