//! `tollgate bench soak`, short: a real `tollgate serve` child killed with SIGKILL every 2 s under 8
//! clients on SQLite; the soak exits 0 and its JSON report shows at least two kills, runs started and
//! decided through them, and nothing lost, duplicated or stuck, every chain verified.

use anyhow::{Context as _, Result, bail};
use serde_json::Value;
use std::process::{Command, Stdio};
use tollgate_agent_testkit::scratch_dir;

#[test]
fn a_short_soak_with_kills_loses_duplicates_and_strands_nothing() -> Result<()> {
    let _alone = crate::support::ALONE.blocking_lock();
    let dir = scratch_dir("soak-cli");
    let started = std::time::Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["bench", "soak", "--secs", "6", "--kill-every", "2", "--clients", "8", "--json"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .env_remove("TOLLGATE_STORE_URL")
        .env_remove("TOLLGATE_CONFIG")
        .output()
        .context("cannot start tollgate")?;
    let stdout = String::from_utf8(output.stdout)?;
    if output.status.code() != Some(0) {
        bail!("the soak exited {:?}: {stdout}\n{}", output.status.code(), String::from_utf8_lossy(&output.stderr));
    }
    let report: Value = serde_json::from_str(&stdout).with_context(|| format!("not JSON: {stdout}"))?;
    let count = |key: &str| report[key].as_u64().unwrap_or_else(|| panic!("no `{key}` in {report:#}"));
    assert!(count("kills") >= 2, "{report:#}");
    for key in ["lost", "duplicated", "unaccounted", "stuck", "chains_broken", "unreadable"] {
        assert_eq!(count(key), 0, "{key}: {report:#}");
    }
    // The soak did real work through the kills, and checked every run it found.
    assert!(count("runs_seen_created") > 0 && count("runs") >= count("runs_seen_created"), "{report:#}");
    assert_eq!(count("chains_verified"), count("runs"), "{report:#}");
    assert!(report["requests"]["decisions"].as_u64().is_some_and(|n| n > 0), "{report:#}");
    assert!(count("tool_executions") > 0, "{report:#}");
    assert!(report["rss"]["peak_mib"].as_f64().is_some_and(|mib| mib > 0.0), "{report:#}");
    assert!(std::fs::read_dir(&dir)?.next().is_none(), "the soak works in a temporary folder of its own");
    assert!(started.elapsed().as_secs() < 60, "the soak is bounded: it took {:?}", started.elapsed());
    Ok(())
}
