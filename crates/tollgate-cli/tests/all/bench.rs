//! `tollgate bench`, tiny: the table has a `runs/s` column and a row per phase of the chosen workload, the
//! end checks pass (exit 0) and are printed each on a line of their own after the table, and the
//! configured store of the current folder is left alone.

use anyhow::{Context as _, Result, bail};
use std::process::{Command, Stdio};
use tollgate_agent_testkit::scratch_dir;

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

/// The table's rows: the lines after the header, up to the check lines.
fn rows(table: &str) -> Vec<&str> {
    table.lines().skip(1).take_while(|line| !line.starts_with("check ")).collect()
}

/// The phase names of the table, in order.
fn phases(table: &str) -> Vec<String> {
    rows(table).iter().map(|line| line.split("  ").next().unwrap_or_default().trim().to_owned()).collect()
}

/// The lines after the table: one per end check.
fn checks(table: &str) -> Vec<&str> {
    table.lines().skip(1).skip_while(|line| !line.starts_with("check ")).collect()
}

/// The header's column names (separated by two spaces or more).
fn columns(table: &str) -> Vec<&str> {
    table.lines().next().unwrap_or_default().split("  ").map(str::trim).filter(|c| !c.is_empty()).collect()
}

#[test]
fn workload_a_reports_both_phases_in_process_and_over_http() -> Result<()> {
    let table = bench(&["bench", "A", "--n", "20"])?;
    assert!(table.starts_with("phase "), "{table}");
    assert_eq!(
        columns(&table),
        ["phase", "count", "wall s", "runs/s", "p50 µs", "p99 µs", "cpu µs", "sys µs", "rss MiB", "susp B"]
    );
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
    for line in rows(&table) {
        assert!(line.contains(" 20 "), "each phase counts the 20 runs (the floor 20 commits): {line}");
    }
    assert_eq!(
        checks(&table),
        [
            "check A (c=1): 20 runs completed, the tool ran 20 times, each text once — ok",
            "check A (c=32): 20 runs completed, the tool ran 20 times, each text once — ok",
            "check A/HTTP (c=32): 20 runs completed, the tool ran 20 times, each text once — ok",
        ],
        "{table}"
    );
    Ok(())
}

#[test]
fn workload_c_checks_that_the_tool_never_ran() -> Result<()> {
    let table = bench(&["bench", "C", "--n", "5"])?;
    assert_eq!(
        phases(&table),
        [
            "C phase 1: start → waiting (c=1)",
            "C phase 2: load → deny → completed (c=1)",
            "SQLite floor: insert 1 KiB + COMMIT (c=1)",
            "C phase 1: start → waiting (c=32)",
            "C phase 2: load → deny → completed (c=32)",
        ]
    );
    assert_eq!(
        checks(&table),
        [
            "check C (c=1): 5 runs completed, the tool never ran — ok",
            "check C (c=32): 5 runs completed, the tool never ran — ok",
        ],
        "{table}"
    );
    Ok(())
}

#[test]
fn workload_b_counts_loop_iterations_and_json_holds_the_reports() -> Result<()> {
    let table = bench(&["bench", "B", "--n", "2"])?;
    assert_eq!(phases(&table), ["B: loop overhead (iterations)"]);
    assert!(table.lines().nth(1).is_some_and(|row| row.split_whitespace().any(|w| w == "102")), "2 × 51: {table}");
    assert_eq!(checks(&table), ["check B: 2 runs completed, each after 50 tool calls — ok"]);

    let json: serde_json::Value = serde_json::from_str(&bench(&["bench", "b", "--n", "2", "--json"])?)?;
    assert_eq!(json["reports"][0]["name"], "B: loop overhead (iterations)");
    assert_eq!(json["reports"][0]["count"], 102);
    assert!(json["reports"][0]["per_sec"].as_f64().is_some_and(|r| r > 0.0));
    assert_eq!(json["reports"][0]["check"], "B: 2 runs completed, each after 50 tool calls");
    Ok(())
}

/// `--traces`: A's phase 1 with tracing off, on at 100 % and at 1 %, at c=1 and at `--concurrency`, the
/// floor after c=1; the traced phases name the untraced one and count the spans their runs sent.
#[test]
fn workload_a_with_traces_compares_the_traced_sides_with_the_untraced_one() -> Result<()> {
    let stdout = bench(&["bench", "A", "--traces", "--n", "8", "--concurrency", "2", "--json"])?;
    let json: serde_json::Value = serde_json::from_str(&stdout).with_context(|| format!("not JSON: {stdout}"))?;
    let reports = json["reports"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = reports.iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "A phase 1, tracing off (c=1)",
            "A phase 1, tracing on, 100 % sampled (c=1)",
            "A phase 1, tracing on, 1 % sampled (c=1)",
            "SQLite floor: insert 1 KiB + COMMIT (c=1)",
            "A phase 1, tracing off (c=2)",
            "A phase 1, tracing on, 100 % sampled (c=2)",
            "A phase 1, tracing on, 1 % sampled (c=2)",
        ]
    );
    for (c, at) in [(1, 0), (2, 4)] {
        let rounds = 6;
        assert!(reports[at].get("spans").is_none(), "{:#}", reports[at]);
        for traced in &reports[at + 1..at + 3] {
            assert_eq!(traced["count"], rounds * 8, "{traced:#}");
            assert_eq!(traced["versus"]["of"], format!("A phase 1, tracing off (c={c})"), "{traced:#}");
            assert_eq!(traced["versus"]["rounds"], rounds, "{traced:#}");
        }
        let spans = reports[at + 1]["spans"].as_u64().unwrap_or_default();
        assert!(spans >= 48 && spans % 48 == 0, "each of the 48 runs sent a whole trace: {spans}");
        let check = reports[at + 2]["check"].as_str().unwrap_or_default();
        assert!(check.contains("at 100 % the OTLP receiver had 48 traces"), "{check}");
    }
    let usage = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["bench", "C", "--traces"])
        .current_dir(scratch_dir("bench-traces-usage"))
        .stdin(Stdio::null())
        .output()
        .context("cannot start tollgate")?;
    assert_eq!(usage.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("--traces goes with workload A in process"));
    Ok(())
}

#[test]
fn workload_a_on_two_nodes_resumes_every_run_on_the_node_that_did_not_start_it() -> Result<()> {
    let Some(url) = tollgate_agent_testkit::postgres_url() else { return Ok(()) };
    let stdout = bench(&["bench", "A", "--nodes", "2", "--store", &url, "--n", "20", "--concurrency", "4", "--json"])?;
    let json: serde_json::Value = serde_json::from_str(&stdout).with_context(|| format!("not JSON: {stdout}"))?;
    let names: Vec<&str> =
        json["reports"].as_array().into_iter().flatten().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "A/HTTP×2 phase 1: POST /v1/runs → waiting (c=4)",
            "A/HTTP×2 phase 2: POST decisions → completed (c=4)",
            "PostgreSQL floor: insert 1 KiB, autocommit (c=4)",
        ]
    );
    for report in json["reports"].as_array().into_iter().flatten() {
        assert_eq!(report["count"], 20, "every run started, then completed: {report:#}");
        assert!(report["per_sec"].as_f64().is_some_and(|r| r > 0.0), "{report:#}");
    }
    assert_eq!(
        json["reports"][1]["check"],
        "A/HTTP×2 (c=4): 20 runs completed, the tool ran 20 times, each text once; each started on node i % 2 \
         and resumed on node (i + 1) % 2"
    );
    let nodes = json["nodes"].as_array().cloned().unwrap_or_default();
    assert_eq!(nodes.len(), 2, "{json:#}");
    for node in &nodes {
        // Runs i and i + 1 alternate: each node started 10, was sent the other's 10 decisions, and ran
        // their 10 tool calls in its own workspace.
        for key in ["started", "decided", "resumed"] {
            assert_eq!(node[key], 10, "{key}: {node:#}");
        }
        assert_eq!(node["exit_code"], 0, "each node exits 0 on SIGTERM: {node:#}");
        let pid = node["pid"].as_u64().unwrap_or_default();
        assert!(pid > 0 && !std::path::Path::new(&format!("/proc/{pid}")).exists(), "node reaped: {node:#}");
    }
    Ok(())
}

/// On PostgreSQL each concurrency level's phases are followed by the floor measured at that level. The
/// URL names a host that refuses before the test database's (a highly available cluster's list): the
/// bench measures on the one that will do, the floor too.
#[test]
fn workload_c_on_postgres_prints_the_floor_of_each_concurrency() -> Result<()> {
    let Some(base) = tollgate_agent_testkit::postgres_url() else { return Ok(()) };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let schema = runtime.block_on(tollgate_agent_store::ScratchSchema::create(&base, "tollgate_test_bench"))?;
    let url = schema.url();
    let (scheme, rest) = url.split_once("://").context("a URL")?;
    let hosts = match rest.split_once('@') {
        Some((user, rest)) => format!("{scheme}://{user}@127.0.0.1:1,{rest}"),
        None => format!("{scheme}://127.0.0.1:1,{rest}"),
    };
    let table = bench(&["bench", "C", "--n", "5", "--concurrency", "3", "--store", &hosts]);
    runtime.block_on(schema.drop_all())?;
    let table = table?;
    assert_eq!(
        phases(&table),
        [
            "C phase 1: start → waiting (c=1)",
            "C phase 2: load → deny → completed (c=1)",
            "PostgreSQL floor: insert 1 KiB, autocommit (c=1)",
            "C phase 1: start → waiting (c=3)",
            "C phase 2: load → deny → completed (c=3)",
            "PostgreSQL floor: insert 1 KiB, autocommit (c=3)",
        ],
        "{table}"
    );
    Ok(())
}

#[test]
fn two_nodes_without_postgres_are_a_usage_error() -> Result<()> {
    let dir = scratch_dir("bench-nodes-usage");
    let store = format!("sqlite://{}", dir.join("bench.db").display());
    for args in [vec!["bench", "A", "--nodes", "2"], vec!["bench", "A", "--nodes", "2", "--store", &store]] {
        let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(&args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .env_remove("TOLLGATE_STORE_URL")
            .env_remove("TOLLGATE_CONFIG")
            .output()
            .context("cannot start tollgate")?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("--nodes 2 needs a postgres://"), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
    assert!(std::fs::read_dir(&dir)?.next().is_none(), "nothing was started or created");
    Ok(())
}
