//! `kill_running_commands` at shutdown kills every running `shell` command's process group. A test binary
//! of its own: the kill is process-wide and would hit other tests' commands.

#[path = "all/support/mod.rs"]
mod support;

use serde_json::json;
use std::time::{Duration, Instant};
use support::{Fixture, call};

/// The live (not zombie) processes whose command line is exactly `argv`.
fn live_processes(argv: &[&str]) -> usize {
    let wanted: Vec<u8> = argv.iter().flat_map(|arg| arg.bytes().chain([0])).collect();
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| cmdline == wanted))
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
        .count()
}

#[tokio::test]
async fn kill_running_commands_ends_every_group() {
    let fx = Fixture::new();
    let marker = ["sleep", "34.75"];
    let shell = fx.tool("shell");
    let running = tokio::spawn(async move {
        call(&shell, json!({"argv": ["sh", "-c", "sleep 34.75 & sleep 34.75"], "timeout_secs": 60})).await
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while live_processes(&marker) < 2 {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(tollgate_agent_tools::kill_running_commands(), 1);
    let out = tokio::time::timeout(Duration::from_secs(5), running).await;
    let out = out.unwrap_or_else(|e| panic!("{e}")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.content, "killed by signal 9, no output");
    let deadline = Instant::now() + Duration::from_secs(5);
    while live_processes(&marker) > 0 {
        assert!(Instant::now() < deadline, "a sleep survived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(tollgate_agent_tools::kill_running_commands(), 0, "the group is forgotten");
}
