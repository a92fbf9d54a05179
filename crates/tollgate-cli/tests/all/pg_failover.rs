//! A PostgreSQL failover under two running `tollgate serve` nodes, with the store's URL naming both
//! servers the way libpq's does (`postgres://…@standby,primary/…`, docs/nodes.md): the nodes open on
//! the primary although the standby is listed first; then the primary is stopped and the standby
//! promoted, and the nodes, with no restart and no change of configuration, go on on the new primary:
//! B decides the run A started before, A starts and completes another. The tool runs once per run.
//!
//! Two private clusters (Debian's postgresql-common): a primary, and a standby made from it with
//! `pg_basebackup -R` (streaming replication). Needs the server tools and root (the standby's files
//! are written as the `postgres` user with `runuser`): skipped with a note outside CI when they are
//! missing, a failure under CI (env `CI` set).

use crate::nodes::{Node, spawn, write_config};
use crate::pg_restart::{ClusterName, LEDGER, PgCluster, ledger_call, must, on_path, run_tool};
use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};
use tollgate_agent_testkit::scratch_dir;

const LEASE: Duration = Duration::from_secs(2);
/// How long after the promotion B must have decided the earlier run: a node looks for its host at
/// least once a second while statements fail or wait, and a waiting statement asks the pool in use
/// again each second, so it moves within about two; under the 10 s a statement may wait for a
/// connection, so a statement left waiting on the old host's pool fails this.
const RECOVERY_LIMIT: Duration = Duration::from_secs(8);

/// A standby of `primary`: a new cluster whose data directory is replaced by `pg_basebackup -R` of
/// the primary, started (it follows the primary by streaming replication).
fn standby_of(primary: &ClusterName) -> Result<PgCluster> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let name = format!("{}_standby", primary.name);
    let standby = PgCluster(ClusterName { version: primary.version.clone(), name, port });
    let (version, name, port_text) = (&standby.0.version, &standby.0.name, port.to_string());
    run_tool("pg_createcluster", &[version, name, "-p", &port_text, "--", "--auth=trust", "--no-sync"])?;
    let data = format!("/var/lib/postgresql/{version}/{name}");
    for entry in std::fs::read_dir(&data).with_context(|| format!("cannot list {data}"))? {
        let path = entry?.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    let primary_port = primary.port.to_string();
    run_tool(
        "runuser",
        &[
            "-u",
            "postgres",
            "--",
            "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            &primary_port,
            "-U",
            "postgres",
            "-D",
            &data,
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
        ],
    )?;
    standby.0.start()?;
    Ok(standby)
}

/// One query's single text answer, through `psql` on the cluster at `port`.
fn psql(port: u16, sql: &str) -> Result<String> {
    let output = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-d", "postgres", "-Atc", sql])
        .output()
        .context("cannot run psql")?;
    if !output.status.success() {
        bail!("psql on port {port}: {sql}: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Starts a run that waits at the gate; its id and turn digest.
async fn start(http: &reqwest::Client, node: &str, input: &str) -> Result<(String, Value)> {
    let run = must("start", http.post(format!("{node}/v1/runs")).json(&json!({"input": input, "wait": true}))).await?;
    if run["status"] != "waiting_for_approval" {
        bail!("the run does not wait at the gate: {run:#}");
    }
    let id = run["id"].as_str().context("a run id")?.to_owned();
    Ok((id, run["pending"]["turn_digest"].clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_follow_a_failover_to_the_promoted_standby() -> Result<()> {
    let _alone = crate::support::ALONE.lock().await;
    let root = Command::new("id").arg("-u").output().is_ok_and(|out| out.stdout.trim_ascii() == b"0");
    if !on_path("pg_basebackup") || !on_path("runuser") || !on_path("psql") || !root {
        if std::env::var_os("CI").is_some() {
            bail!("under CI this test needs pg_basebackup, runuser and psql on PATH, and root");
        }
        eprintln!(
            "note: pg_basebackup, runuser or psql is not on PATH, or this is not root; skipping the failover test"
        );
        return Ok(());
    }
    let Some(primary) = tokio::task::spawn_blocking(PgCluster::create).await?? else { return Ok(()) };
    let standby = {
        let primary = primary.0.clone();
        tokio::task::spawn_blocking(move || standby_of(&primary)).await??
    };
    assert_eq!(psql(standby.0.port, "SELECT pg_is_in_recovery()")?, "t", "the standby follows the primary");

    // The standby first, as a list of a cluster's members comes in any order.
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        standby.0.port, primary.0.port
    );
    let dir = scratch_dir("pg-failover");
    let script = json!({"turns": [{"tool_calls": [ledger_call()]}, {"text": "done"}]});
    let policy = "[[agents.policy]]\ntool = \"shell\"\ngate = \"ask\"";
    let (workspace, config) = write_config(&dir, &url, LEASE, &script, "[\"shell\"]", policy)?;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build()?;
    let mut a = spawn(&dir, &config, "a", &http).await?;
    let mut b = spawn(&dir, &config, "b", &http).await?;
    let logs = |a: &Node, b: &Node| format!("A's log:\n{}\nB's log:\n{}", a.log(), b.log());

    let (before, digest) = start(&http, &a.url, "before").await?;
    let on_primary = psql(primary.0.port, &format!("SELECT status FROM runs WHERE id = '{before}'"))?;
    assert_eq!(on_primary, "waiting_for_approval", "the node writes to the primary:\n{}", a.log());

    // The standby has everything the primary committed, then the primary goes and the standby is
    // promoted.
    let deadline = Instant::now() + Duration::from_secs(20);
    while psql(standby.0.port, &format!("SELECT count(*) FROM runs WHERE id = '{before}'"))? != "1" {
        if Instant::now() > deadline {
            bail!("the standby did not replay the run within 20 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    {
        let primary = primary.0.clone();
        tokio::task::spawn_blocking(move || primary.stop()).await??;
    }
    let promoting = Instant::now();
    {
        let standby = standby.0.clone();
        tokio::task::spawn_blocking(move || run_tool("pg_ctlcluster", &[&standby.version, &standby.name, "promote"]))
            .await??;
    }

    // B decides A's earlier run on the new primary: 503 meanwhile, then 200.
    let decisions = format!("{}/v1/runs/{before}/decisions", b.url);
    let body = json!({"turn_digest": digest, "approve_all": true, "wait": true});
    let mut answers = Vec::new();
    let decided = loop {
        let response = http.post(&decisions).json(&body).send().await;
        match response {
            Ok(response) if response.status().is_success() => break response.json::<Value>().await?,
            Ok(response) => {
                let status = response.status();
                answers.push(format!("{status}: {}", response.text().await.unwrap_or_default()));
                if status != reqwest::StatusCode::SERVICE_UNAVAILABLE {
                    bail!("a decision during the failover is answered 200 or 503, not {answers:#?}\n{}", logs(&a, &b));
                }
            }
            Err(error) => answers.push(format!("no answer: {error}")),
        }
        if promoting.elapsed() > RECOVERY_LIMIT {
            bail!(
                "no decision went through within {RECOVERY_LIMIT:?} of the promotion: {answers:#?}\n{}",
                logs(&a, &b)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("decided {:?} after the promotion; answers meanwhile: {answers:#?}", promoting.elapsed());
    assert_eq!(decided["status"], "completed", "{decided:#}");

    // A new run, start to end, on the new primary: started on A (which may need a moment more to find
    // it), decided on B.
    let (after, digest) = loop {
        match start(&http, &a.url, "after").await {
            Ok(started) => break started,
            Err(error) if promoting.elapsed() < RECOVERY_LIMIT && error.to_string().contains("503") => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => bail!("A cannot start a run after the failover: {error:#}\n{}", logs(&a, &b)),
        }
    };
    let body = json!({"turn_digest": digest, "approve_all": true, "wait": true});
    let completed = must("decide", http.post(format!("{}/v1/runs/{after}/decisions", b.url)).json(&body)).await?;
    assert_eq!(completed["status"], "completed", "{completed:#}");
    let statuses = psql(standby.0.port, "SELECT string_agg(status, ',' ORDER BY id) FROM runs")?;
    assert_eq!(statuses, "completed,completed", "both runs, on the promoted standby");

    // Each tool ran once.
    let ledger = std::fs::read_to_string(workspace.join(LEDGER))?;
    let mut lines: Vec<&str> = ledger.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["after", "before"], "the ledger: {ledger}");

    for (name, node) in [("A", &mut a), ("B", &mut b)] {
        if !node.alive()? {
            bail!("node {name} died:\n{}", node.log());
        }
        assert!(node.log().contains("has moved"), "node {name} says it moved to the new primary:\n{}", node.log());
        // /metrics names the promoted standby as the host in use and counts the move.
        let metrics = http.get(format!("{}/metrics", node.url)).send().await?.text().await?;
        let in_use = format!("tollgate_store_host{{host=\"127.0.0.1:{}\"}} 1\n", standby.0.port);
        let left = format!("tollgate_store_host{{host=\"127.0.0.1:{}\"}} 0\n", primary.0.port);
        assert!(metrics.contains(&in_use) && metrics.contains(&left), "node {name}'s hosts:\n{metrics}");
        assert!(metrics.contains("tollgate_store_host_moves_total 1\n"), "node {name} moved once:\n{metrics}");
    }
    drop(standby);
    drop(primary);
    Ok(())
}
