//! `shell` confinement: no process outlives its call (timeout, a background child, a cancelled call),
//! output caps that keep stderr, and on Linux the Landlock sandbox — no `/proc`, no writes outside the
//! workspace, no TCP unless allowed, no signals to Tollgate — plus the `Required` and `Off` modes.
//! The Landlock tests are skipped, with a printed reason, only where the kernel has no Landlock.

use crate::support::{Fixture, assert_refused, call};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate_agent_core::{IntoTool, Tool, ToolOutput};
use tollgate_agent_tools::{SandboxMode, SandboxSupport, Shell, ShellOptions, Workspace};

/// The live (not zombie) processes whose command line is exactly `argv`.
fn live_processes(argv: &[&str]) -> Vec<u32> {
    let wanted: Vec<u8> = argv.iter().flat_map(|arg| arg.bytes().chain([0])).collect();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| cmdline == wanted))
        .filter(|pid| {
            // The state follows the parenthesised command name; a killed orphan may linger as a zombie when
            // the machine's init does not reap.
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
        .collect()
}

/// Waits up to 5 s (SIGKILL takes effect asynchronously) for every process running `argv` to be gone.
async fn assert_gone(argv: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = live_processes(argv);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{argv:?} still running as {left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits up to 5 s for a process running `argv` to appear.
async fn wait_for(argv: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while live_processes(argv).is_empty() {
        assert!(Instant::now() < deadline, "{argv:?} never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn shell_with(fx: &Fixture, options: ShellOptions) -> Arc<dyn Tool> {
    Shell::with_options(Workspace::new(&fx.root), options).into_tool()
}

/// True when this kernel has Landlock; otherwise says why the test is skipped.
fn landlock_here() -> bool {
    match tollgate_agent_tools::sandbox_support() {
        SandboxSupport::Unavailable { reason } => {
            println!("skipped: no Landlock on this machine ({reason})");
            false
        }
        _ => true,
    }
}

async fn run(tool: &Arc<dyn Tool>, argv: Value) -> ToolOutput {
    call(tool, json!({"argv": argv, "timeout_secs": 10})).await
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group() {
    let fx = Fixture::new();
    let marker = ["sleep", "31.25"];
    let out =
        call(&fx.tool("shell"), json!({"argv": ["sh", "-c", "sleep 31.25 & sleep 31.25"], "timeout_secs": 1})).await;
    assert!(out.is_error && out.content.contains("its process group "), "{out:?}");
    let pgid = out.content.split("process group ").nth(1).and_then(|rest| rest.split([',', '\n']).next());
    let pgid = pgid.and_then(|id| id.parse::<i32>().ok()).and_then(rustix::process::Pid::from_raw);
    assert!(pgid.is_some(), "{out:?}");
    assert_gone(&marker).await;
    if let Some(pgid) = pgid {
        // Only zombies may be left (where init does not reap orphans), never a running member.
        let members = std::fs::read_dir("/proc")
            .map(|entries| {
                entries
                    .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
                    .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
                    .filter_map(|stat| stat.rsplit_once(") ").map(|(_, rest)| rest.to_owned()))
                    .filter(|rest| {
                        let fields: Vec<&str> = rest.split(' ').collect();
                        fields.get(2) == Some(&pgid.as_raw_nonzero().to_string().as_str()) && fields[0] != "Z"
                    })
                    .count()
            })
            .unwrap_or(0);
        assert_eq!(members, 0, "a live process is left in group {pgid:?}");
    }
}

#[tokio::test]
async fn a_background_child_does_not_hold_the_result_and_dies_with_the_call() {
    let fx = Fixture::new();
    let args = json!({"argv": ["sh", "-c", "sleep 1000.5 & echo started"], "timeout_secs": 30});
    let started = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(10), call(&fx.tool("shell"), args)).await;
    assert_eq!(out, Ok(ToolOutput::text("exit code 0\n--- stdout ---\nstarted\n")));
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_gone(&["sleep", "1000.5"]).await;
}

#[tokio::test]
async fn a_cancelled_call_kills_its_process_group() {
    let fx = Fixture::new();
    let marker = ["sleep", "33.25"];
    let args = json!({"argv": ["sh", "-c", "sleep 33.25 & sleep 33.25"], "timeout_secs": 60});
    let shell = fx.tool("shell");
    let cancelled = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::select! {
            out = call(&shell, args) => panic!("the command ended by itself: {out:?}"),
            () = wait_for(&marker) => {}
        }
    })
    .await;
    assert_eq!(cancelled, Ok(()));
    assert_gone(&marker).await;
}

#[tokio::test]
async fn stdout_and_stderr_are_capped_separately_under_the_result_cap() {
    let fx = Fixture::new();
    let shell = fx.tool("shell");
    // `seq 1 40000` prints 228894 bytes.
    let out = run(&shell, json!(["sh", "-c", "seq 1 40000; echo the-stderr-line >&2"])).await;
    assert!(!out.is_error, "{}", out.content.len());
    assert!(out.content.contains(" of 228894 bytes]\n--- stderr ---\nthe-stderr-line\n"), "{}", out.content.len());
    assert!(out.content.contains("\n[stdout cut: showing "), "{}", out.content.len());
    assert!(out.content.len() < 50_000, "{}", out.content.len());

    let out = run(&shell, json!(["sh", "-c", "seq 1 40000; seq 1 40000 >&2"])).await;
    assert!(out.content.contains("\n[stdout cut: showing 24000 of 228894 bytes]\n--- stderr ---\n1\n2\n"));
    assert!(out.content.ends_with("\n[stderr cut: showing 24000 of 228894 bytes]"));
    assert!(out.content.len() < 50_000, "{}", out.content.len());
}

#[tokio::test]
async fn a_sandboxed_command_cannot_read_proc() {
    if !landlock_here() {
        return;
    }
    let fx = Fixture::new();
    let shell = fx.tool("shell");
    let environ = format!("/proc/{}/environ", std::process::id());
    let out = run(&shell, json!(["cat", environ])).await;
    assert!(out.is_error && out.content.contains("Permission denied"), "{out:?}");
    assert!(!out.content.contains("PATH="), "{out:?}");
    let out = run(&shell, json!(["sh", "-c", "cat /proc/$PPID/environ"])).await;
    assert!(out.is_error && !out.content.contains("PATH="), "{out:?}");
    let out = run(&shell, json!(["cat", "/proc/self/status"])).await;
    assert!(out.is_error, "{out:?}");
}

#[tokio::test]
async fn a_sandboxed_command_writes_only_in_the_workspace_and_its_tmpdir() {
    if !landlock_here() {
        return;
    }
    let fx = Fixture::new();
    let shell = fx.tool("shell");
    let escape = std::env::temp_dir().join(format!("tollgate-escape-{}", std::process::id()));
    let out = run(&shell, json!(["touch", escape])).await;
    assert!(out.is_error, "{out:?}");
    assert!(!escape.exists());
    let out = run(&shell, json!(["sh", "-c", "echo x > ../outside.txt"])).await;
    assert!(out.is_error, "{out:?}");
    assert!(!fx.root.join("../outside.txt").exists());
    let out = run(&shell, json!(["cat", "../outside/secret.txt"])).await;
    assert!(out.is_error && !out.content.contains("top secret"), "{out:?}");

    let out = run(
        &shell,
        json!(["sh", "-c", "echo inside > made.txt && mkdir -p d && echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\""]),
    )
    .await;
    assert_eq!(out, ToolOutput::text("exit code 0\n--- stdout ---\nt\n"));
    assert_eq!(fx.read("made.txt").as_deref(), Some("inside\n"));
    let out = run(&shell, json!(["ls", "/usr"])).await;
    assert!(!out.is_error && out.content.contains("\nbin\n"), "{out:?}");
    let out = run(&shell, json!(["sh", "-c", "echo gone > /dev/null && head -c 4 /dev/urandom | wc -c"])).await;
    assert_eq!(out, ToolOutput::text("exit code 0\n--- stdout ---\n4\n"));

    // The private TMPDIR is removed after the call.
    let out = run(&shell, json!(["sh", "-c", "echo \"$TMPDIR\""])).await;
    let tmpdir = out.content.lines().nth(2).unwrap_or_default().to_owned();
    assert!(tmpdir.contains("tollgate-shell-"), "{out:?}");
    assert!(!Path::new(&tmpdir).exists(), "{tmpdir} is left behind");

    // Only the command's own thread was confined, never the caller's.
    std::fs::write(&escape, "the caller is free").unwrap_or_else(|e| panic!("{e}"));
    std::fs::remove_file(&escape).unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn a_sandboxed_command_cannot_signal_tollgate() {
    if !landlock_here() {
        return;
    }
    let fx = Fixture::new();
    // Signal 0 only checks permission: Tollgate (here the test process, the command's parent) survives
    // either way.
    let out = run(&fx.tool("shell"), json!(["sh", "-c", "kill -0 $PPID"])).await;
    assert!(out.is_error, "{out:?}");
    let off = shell_with(&fx, ShellOptions { sandbox: SandboxMode::Off, network: false });
    let out = run(&off, json!(["sh", "-c", "kill -0 $PPID"])).await;
    assert!(!out.is_error, "unconfined it may: {out:?}");
}

#[tokio::test]
async fn tcp_is_denied_unless_the_network_is_allowed() {
    if !landlock_here() {
        return;
    }
    let fx = Fixture::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    listener.set_nonblocking(true).unwrap_or_else(|e| panic!("{e}"));
    let port = listener.local_addr().unwrap_or_else(|e| panic!("{e}")).port();
    let connect = json!(["bash", "-c", format!("echo hi > /dev/tcp/127.0.0.1/{port}")]);

    let closed = fx.tool("shell");
    let preview = closed.preview(&json!({"argv": connect})).await.unwrap_or_default();
    assert!(preview.contains("network: off"), "{preview}");
    let out = run(&closed, connect.clone()).await;
    assert!(out.is_error, "{out:?}");
    assert!(listener.accept().is_err(), "no connection arrived");

    let open = shell_with(&fx, ShellOptions { sandbox: SandboxMode::Auto, network: true });
    let preview = open.preview(&json!({"argv": connect})).await.unwrap_or_default();
    assert!(preview.contains("network: on"), "{preview}");
    let out = run(&open, connect).await;
    assert!(!out.is_error, "{out:?}");
    assert!(listener.accept().is_ok(), "the connection arrived");
}

#[tokio::test]
async fn required_refuses_to_run_without_a_sandbox() {
    let fx = Fixture::new();
    let unavailable = SandboxSupport::Unavailable { reason: "a test kernel".to_owned() };
    let options = ShellOptions { sandbox: SandboxMode::Required, network: false };
    let required = Shell::with_sandbox_support(Workspace::new(&fx.root), options, unavailable.clone()).into_tool();
    let needle = "the shell sandbox is required but unavailable: a test kernel";
    assert_refused(&required, json!({"argv": ["touch", "made.txt"]}), needle).await;
    assert_eq!(fx.read("made.txt"), None, "nothing ran");

    // Auto runs such a command unconfined, and says so.
    let options = ShellOptions { sandbox: SandboxMode::Auto, network: false };
    let auto = Shell::with_sandbox_support(Workspace::new(&fx.root), options, unavailable).into_tool();
    let preview = auto.preview(&json!({"argv": ["true"]})).await.unwrap_or_default();
    assert!(preview.ends_with("\nsandbox: none (a test kernel)"), "{preview}");
    let out = run(&auto, json!(["cat", "/proc/self/status"])).await;
    assert!(!out.is_error, "{out:?}");

    if landlock_here() {
        let options = ShellOptions { sandbox: SandboxMode::Required, network: false };
        let out = run(&shell_with(&fx, options), json!(["cat", "/proc/self/status"])).await;
        assert!(out.is_error && out.content.contains("Permission denied"), "{out:?}");
    }
}

#[tokio::test]
async fn off_runs_unconfined_but_still_kills_the_group() {
    let fx = Fixture::new();
    let off = shell_with(&fx, ShellOptions { sandbox: SandboxMode::Off, network: false });
    let preview = off.preview(&json!({"argv": ["true"]})).await.unwrap_or_default();
    assert!(preview.ends_with("\nsandbox: none (turned off)"), "{preview}");
    let out = run(&off, json!(["cat", "../outside/secret.txt"])).await;
    assert_eq!(out, ToolOutput::text("exit code 0\n--- stdout ---\ntop secret\n"));
    let out = run(&off, json!(["sh", "-c", "sleep 1001.5 & echo started"])).await;
    assert_eq!(out, ToolOutput::text("exit code 0\n--- stdout ---\nstarted\n"));
    assert_gone(&["sleep", "1001.5"]).await;
}
