//! A command the `shell` tool runs cannot reach the API of the server that ran it (SECURITY.md, local
//! mode): an approved command leaves a `setsid` daemon behind, out of its process group, that tries for a
//! while to reach `serve`'s loopback port and approve the run's next held call. With the network off
//! (the default) the daemon inherits the sandbox, so no socket of any family opens: the held call stays
//! undecided. Through the real binary, on SQLite.

use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tollgate_agent_testkit::scratch_dir;

/// The daemon: tries 20 times, 100 ms apart, to connect to port `argv[1]` and ask for the runs; logs
/// each outcome to `daemon.log` in the workspace (which the sandbox lets it write), then exits.
const DAEMON: &str = r#"
import socket, sys, time
for attempt in range(20):
    try:
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
        s.sendall(b"GET /v1/runs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        line = "connected: " + s.recv(100).decode("latin-1").splitlines()[0]
    except Exception as error:
        line = "refused: " + repr(error)
    with open("daemon.log", "a") as log:
        log.write(line + "\n")
    time.sleep(0.1)
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_left_by_an_approved_command_cannot_reach_the_api() -> Result<()> {
    if !std::path::Path::new("/usr/bin/python3").exists() && std::env::var_os("CI").is_none() {
        eprintln!("skipped: no /usr/bin/python3");
        return Ok(());
    }
    let dir = scratch_dir("daemon");
    let daemon =
        json!({"name": "shell", "arguments": {"argv": ["setsid", "-f", "python3", "-c", DAEMON, "{{input}}"]}});
    let write = json!({"name": "fs_write", "arguments": {"path": "note.txt", "content": "approved by a daemon?"}});
    let script = json!({"turns": [{"tool_calls": [daemon]}, {"tool_calls": [write]}, {"text": "done"}]});
    let (workspace, config) = crate::nodes::write_config(
        &dir,
        "sqlite://tollgate.db",
        Duration::from_secs(30),
        &script,
        "[\"shell\", \"fs_write\"]",
        "",
    )?;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build()?;
    let node = crate::nodes::spawn(&dir, &config, "serve", &http).await?;
    let port = node.url.rsplit(':').next().ok_or_else(|| anyhow!("no port in {}", node.url))?.to_owned();

    let post = |path: String, body: Value| {
        let request = http.post(format!("{}{path}", node.url)).json(&body);
        async move {
            let response = request.send().await?;
            let status = response.status();
            let answer: Value = response.json().await?;
            if !status.is_success() {
                bail!("POST {path}: {status} {answer:#}");
            }
            Ok::<Value, anyhow::Error>(answer)
        }
    };
    let run = post("/v1/runs".into(), json!({"input": port, "wait": true})).await?;
    let id = run["id"].as_str().ok_or_else(|| anyhow!("no id in {run:#}"))?.to_owned();
    assert_eq!(run["pending"]["calls"][0]["tool"], "shell", "{run:#}");
    let approve = json!({"turn_digest": run["pending"]["turn_digest"], "approve_all": true, "wait": true});
    let next = post(format!("/v1/runs/{id}/decisions"), approve).await?;
    assert_eq!(next["status"], "waiting_for_approval", "the fs_write call is held: {next:#}");

    // The daemon outlives the command (its own session) and tries for about two seconds.
    let log = workspace.join("daemon.log");
    let deadline = Instant::now() + Duration::from_secs(15);
    let lines = loop {
        let lines: Vec<String> = std::fs::read_to_string(&log).unwrap_or_default().lines().map(str::to_owned).collect();
        if lines.len() >= 20 {
            break lines;
        }
        if Instant::now() > deadline {
            bail!("the daemon logged {lines:?} in 15 s\n{}", node.log());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(lines.iter().all(|l| l.starts_with("refused: ") && l.contains("Operation not permitted")), "{lines:?}");
    let now: Value = http.get(format!("{}/v1/runs/{id}", node.url)).send().await?.json().await?;
    assert_eq!(now["status"], "waiting_for_approval", "{now:#}");
    assert_eq!(now["pending"]["calls"][0]["tool"], "fs_write", "{now:#}");
    assert!(!workspace.join("note.txt").exists(), "nothing approved the write");
    Ok(())
}
