//! A full disk under a running server: the SQLite file on a small file system of the test's own (a
//! tmpfs of 8 MiB), runs started and acknowledged (201), the disk filled to the last byte while their
//! tools run, then space freed again.
//!
//! What must hold (docs/nodes.md, "When the store fails"): a full disk is the operator's to fix, not the
//! run's fault, so no run fails for it. Every run answered 201 before or during the outage completes
//! once space returns, its tool run exactly once (one ledger line); a start refused while the disk is
//! full is answered 507 `disk-full` and created no run; the runs' drives did meet the full disk (the
//! server counts the waits, `tollgate_store_outage_waits_total`); every hash chain verifies.
//!
//! Needs the right to mount a tmpfs (root, as in CI): skipped with a note without it, a failure under
//! CI (env `CI` set).

use crate::nodes::{spawn, write_config};
use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tollgate_agent_testkit::scratch_dir;

const LEDGER: &str = "ledger.txt";
/// Runs started before the disk fills.
const RUNS: usize = 24;
/// How long after space returns every run must have completed.
const RECOVERY_LIMIT: Duration = Duration::from_secs(60);

/// A tmpfs mounted at `path`, unmounted when dropped.
struct SmallDisk {
    path: PathBuf,
}

impl SmallDisk {
    /// `None` when this process may not mount (not root, or no such right in this container).
    fn mount(path: &Path, size: &str) -> Result<Option<Self>> {
        std::fs::create_dir_all(path)?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tollgate-test", &path.display().to_string()])
            .output()
            .context("cannot run mount")?;
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            if std::env::var_os("CI").is_some() {
                bail!("cannot mount a tmpfs for the full-disk test: {why}");
            }
            eprintln!("skipped: cannot mount a tmpfs ({why})");
            return Ok(None);
        }
        Ok(Some(Self { path: path.to_owned() }))
    }

    /// Writes a file until the disk is full (ENOSPC); answers its path.
    fn fill(&self) -> Result<PathBuf> {
        let filler = self.path.join("filler");
        let mut file = std::fs::File::create(&filler)?;
        let chunk = vec![0xA5_u8; 4096];
        loop {
            match file.write_all(&chunk) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => return Err(e.into()),
            }
        }
        // The last partial block too: not one byte is left.
        while file.write_all(&[0]).is_ok() {}
        let _ = file.flush();
        Ok(filler)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// A `shell` call appending the run's input to the ledger, then sleeping a second (allow-gated: its
/// start and result are stored with the run's next write, which meets the full disk).
fn script() -> Value {
    let command = format!("echo \"$0\" >> {LEDGER}; sleep 1");
    json!({"turns": [
        {"tool_calls": [{"name": "shell", "arguments": {"argv": ["sh", "-c", command, "{{input}}"]}}]},
        {"text": "done"}
    ]})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_fails_no_run_and_every_acknowledged_run_completes_once_space_returns() -> Result<()> {
    let _alone = crate::support::ALONE.lock().await;
    let dir = scratch_dir("disk-full");
    let Some(disk) = SmallDisk::mount(&dir.join("disk"), "8m")? else { return Ok(()) };
    let url = format!("sqlite://{}", disk.path.join("tollgate.db").display());
    let policy = "[[agents.policy]]\ntool = \"shell\"\ngate = \"allow\"\n\n[sandbox]\nmode = \"off\"";
    let (workspace, config) = write_config(&dir, &url, Duration::from_secs(2), &script(), "[\"shell\"]", policy)?;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    let node = spawn(&dir, &config, "node", &http).await?;

    let mut started: BTreeMap<String, String> = BTreeMap::new();
    for n in 0..RUNS {
        let input = format!("before {n}");
        let (status, run) = post_run(&http, &node.url, &input).await?;
        assert_eq!(status, 201, "{run:#}\n{}", node.log());
        started.insert(id_of(&run)?, input);
    }
    // The tools sleep a second: every run is between its first model call and its next write.
    let filler = disk.fill()?;
    let mut refused = 0;
    for n in 0..8 {
        let input = format!("during {n}");
        let (status, run) = post_run(&http, &node.url, &input).await?;
        match status {
            201 => {
                started.insert(id_of(&run)?, input);
            }
            507 => {
                assert_eq!(run["type"], "https://tollgate.dev/problems/disk-full", "{run:#}");
                refused += 1;
            }
            other => bail!("a start while the disk is full answered {other}: {run:#}"),
        }
    }
    // Long enough for every tool to end and its run's next write to meet the full disk, and wait.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for id in started.keys() {
        let run = get_run(&http, &node.url, id).await?;
        assert_ne!(run["status"], "failed", "no run fails while the disk is full: {run:#}");
    }
    let waits = outage_waits(&http, &node.url).await?;
    assert!(waits > 0.0, "the runs' writes met the full disk and waited:\n{}", node.log());

    std::fs::remove_file(&filler)?;
    let deadline = Instant::now() + RECOVERY_LIMIT;
    for (id, input) in &started {
        loop {
            let run = get_run(&http, &node.url, id).await?;
            match run["status"].as_str() {
                Some("completed") => break,
                Some("failed" | "cancelled" | "expired" | "waiting_for_approval") => {
                    bail!("run {id} ({input}) ended {}: {run:#}\n{}", run["status"], node.log())
                }
                _ if Instant::now() > deadline => {
                    bail!(
                        "run {id} ({input}) still {} {RECOVERY_LIMIT:?} after space returned\n{}",
                        run["status"],
                        node.log()
                    )
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    let ledger = std::fs::read_to_string(workspace.join(LEDGER))?;
    let mut lines: BTreeMap<&str, usize> = BTreeMap::new();
    for line in ledger.lines() {
        *lines.entry(line).or_default() += 1;
    }
    for input in started.values() {
        assert_eq!(lines.get(input.as_str()), Some(&1), "run {input}'s tool ran once: {lines:?}");
    }
    assert_eq!(lines.len(), started.len(), "no ledger line of a run that was not acknowledged: {lines:?}");

    let report = crate::support::doctor_report(&dir, &config)?;
    assert_eq!(report["chains_intact"], started.len(), "{report:#}");
    eprintln!(
        "{} runs acknowledged ({refused} starts refused 507 while full), {waits} waits for the store, all completed",
        started.len()
    );
    drop(node);
    Ok(())
}

async fn post_run(http: &reqwest::Client, url: &str, input: &str) -> Result<(u16, Value)> {
    let response = http.post(format!("{url}/v1/runs")).json(&json!({"input": input, "agent": "agent"})).send().await?;
    let status = response.status().as_u16();
    Ok((status, response.json().await?))
}

async fn get_run(http: &reqwest::Client, url: &str, id: &str) -> Result<Value> {
    Ok(http.get(format!("{url}/v1/runs/{id}")).send().await?.json().await?)
}

fn id_of(run: &Value) -> Result<String> {
    run["id"].as_str().map(str::to_owned).ok_or_else(|| anyhow!("no id in {run:#}"))
}

/// `tollgate_store_outage_waits_total` from `/metrics`.
async fn outage_waits(http: &reqwest::Client, url: &str) -> Result<f64> {
    let text = http.get(format!("{url}/metrics")).send().await?.text().await?;
    text.lines()
        .find_map(|line| line.strip_prefix("tollgate_store_outage_waits_total "))
        .ok_or_else(|| anyhow!("no tollgate_store_outage_waits_total in /metrics:\n{text}"))?
        .trim()
        .parse()
        .context("not a number")
}
