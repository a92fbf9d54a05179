//! `tollgate bench`, tiny: the table has a row per phase of the chosen workload, the end checks pass
//! (exit 0), and the configured store of the current folder is left alone.

use anyhow::{Context as _, Result, bail};
use std::process::{Command, Stdio};
use tollgate_testkit::scratch_dir;

/// Runs `tollgate ARGS` in a fresh folder; fails unless it exits 0. Returns stdout.
fn bench(args: &[&str]) -> Result<String> {
    let dir = scratch_dir("bench-cli");
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .current_dir(&dir)
        .stdin(Stdio::null())
        .env_remove("TOLLGATE_STORE_URL")
        .env_remove("TOLLGATE_CONFIG")
        .output()
        .context("cannot start tollgate")?;
    let stdout = String::from_utf8(output.stdout)?;
    if output.status.code() != Some(0) {
        bail!(
            "`tollgate {}` exited {:?}: {stdout}\n{}",
            args.join(" "),
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    if std::fs::read_dir(&dir)?.next().is_some() {
        bail!("bench created files in the current folder: the user's store must be left alone");
    }
    Ok(stdout)
}

/// The phase names of the table, in order.
fn phases(table: &str) -> Vec<String> {
    table.lines().skip(1).map(|line| line.split("  ").next().unwrap_or_default().trim().to_owned()).collect()
}

#[test]
fn workload_a_reports_both_phases_in_process_and_over_http() -> Result<()> {
    let table = bench(&["bench", "A", "--n", "20"])?;
    assert!(table.starts_with("phase "), "{table}");
    assert_eq!(
        phases(&table),
        [
            "A phase 1: start → waiting (c=1)",
            "A phase 2: load → approve → completed (c=1)",
            "SQLite floor: insert 1 KiB + COMMIT (c=1)",
            "A phase 1: start → waiting (c=32)",
            "A phase 2: load → approve → completed (c=32)",
            "A/HTTP phase 1: POST /v1/runs → waiting (c=32)",
            "A/HTTP phase 2: POST decisions → completed (c=32)",
        ]
    );
    for line in table.lines().skip(1) {
        assert!(line.contains(" 20 "), "each phase counts the 20 runs (the floor 20 commits): {line}");
    }
    Ok(())
}

#[test]
fn workload_b_counts_loop_iterations_and_json_holds_the_reports() -> Result<()> {
    let table = bench(&["bench", "B", "--n", "2"])?;
    assert_eq!(phases(&table), ["B: loop overhead (iterations)"]);
    assert!(table.lines().nth(1).is_some_and(|row| row.split_whitespace().any(|w| w == "102")), "2 × 51: {table}");

    let json: serde_json::Value = serde_json::from_str(&bench(&["bench", "b", "--n", "2", "--json"])?)?;
    assert_eq!(json["reports"][0]["name"], "B: loop overhead (iterations)");
    assert_eq!(json["reports"][0]["count"], 102);
    assert!(json["reports"][0]["per_sec"].as_f64().is_some_and(|r| r > 0.0));
    Ok(())
}
