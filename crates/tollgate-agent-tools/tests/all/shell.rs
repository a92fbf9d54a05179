//! `shell` through the `Tool` port: argv without expansion in the workspace root, exit codes, the preview
//! an approver reads, bad arguments, program paths that would lead out (including a planted symlink),
//! capped output and the timeout. The sandbox and process groups: `shell_security.rs`.

use crate::support::{Fixture, assert_refused, call};
use serde_json::json;
use std::path::Path;
use tollgate_agent_core::{Gate, ToolContext, ToolOutput};
use tollgate_agent_tools::shell::{MAX_OUTPUT_BYTES, PASSED_ENV};
use tollgate_agent_tools::{SandboxMode, SandboxSupport};

#[tokio::test]
async fn runs_argv_without_expansion_in_the_workspace_root() {
    let fx = Fixture::new();
    fx.put("a.txt", "alpha\n");
    let shell = fx.tool("shell");
    let out = call(&shell, json!({"argv": ["echo", "hello", "*", "$HOME", "a; rm -rf /"]})).await;
    assert_eq!(out, ToolOutput::text("exit code 0\n--- stdout ---\nhello * $HOME a; rm -rf /\n"));
    let out = call(&shell, json!({"argv": ["pwd"]})).await;
    assert_eq!(out.content, format!("exit code 0\n--- stdout ---\n{}\n", fx.canonical_root().display()));
    let out = call(&shell, json!({"argv": ["cat", "a.txt"]})).await;
    assert_eq!(out, ToolOutput::text("exit code 0\n--- stdout ---\nalpha\n"));
    let out = call(&shell, json!({"argv": ["true"]})).await;
    assert_eq!(out, ToolOutput::text("exit code 0, no output"));
    // stdin is closed: a program reading it sees the end at once instead of hanging.
    let out = call(&shell, json!({"argv": ["cat"], "timeout_secs": 5})).await;
    assert_eq!(out, ToolOutput::text("exit code 0, no output"));
}

#[tokio::test]
async fn a_failing_command_is_an_error_result_with_its_stderr() {
    let fx = Fixture::new();
    let out = call(&fx.tool("shell"), json!({"argv": ["sh", "-c", "echo partial; echo oops >&2; exit 3"]})).await;
    assert_eq!(out, ToolOutput::error("exit code 3\n--- stdout ---\npartial\n--- stderr ---\noops\n"));
    let out = call(&fx.tool("shell"), json!({"argv": ["cat", "missing.txt"]})).await;
    assert!(out.is_error && out.content.starts_with("exit code 1\n--- stderr ---\n"), "{out:?}");
}

#[tokio::test]
async fn only_a_few_environment_variables_reach_the_command() {
    let fx = Fixture::new();
    let out = call(&fx.tool("shell"), json!({"argv": ["env"]})).await;
    assert!(!out.is_error, "{out:?}");
    // The test process has many more (cargo sets CARGO_*); none of them may leak.
    let names: Vec<&str> =
        out.content.lines().skip(2).filter_map(|line| line.split_once('=')).map(|(k, _)| k).collect();
    assert!(names.contains(&"PATH"), "{names:?}");
    assert!(names.iter().all(|name| PASSED_ENV.contains(name)), "{names:?}");
}

#[tokio::test]
async fn the_preview_shows_the_command_program_folder_and_timeout() {
    let fx = Fixture::new();
    let shell = fx.tool("shell");
    let args = json!({"argv": ["echo", "a b", "it's", "line\nbreak"], "timeout_secs": 5});
    assert_eq!(shell.gate(&args, &ToolContext::listing()), Gate::Ask);
    assert_eq!(shell.validate(&args).await, Ok(()));
    let preview = shell.preview(&args).await.unwrap_or_default();
    let lines: Vec<&str> = preview.lines().collect();
    assert_eq!(lines[0], r"run: echo 'a b' 'it'\''s' $'line\nbreak'");
    assert!(lines[1].starts_with("program: /") && lines[1].ends_with("/echo (found on PATH)"), "{preview}");
    assert_eq!(lines[2], format!("in: {} (the workspace root)", fx.canonical_root().display()));
    assert_eq!(lines[3], "timeout: 5s");
    let sandbox =
        tollgate_agent_tools::describe_confinement(SandboxMode::Auto, false, &tollgate_agent_tools::sandbox_support())
            .unwrap_or_else(|e| panic!("{e}"));
    if let SandboxSupport::Full { abi } = tollgate_agent_tools::sandbox_support() {
        assert_eq!(
            sandbox,
            format!(
                "landlock ABI {abi} + seccomp (writes: workspace and a private TMPDIR only; network: off — no socket \
                 of any family)"
            )
        );
    }
    assert_eq!(lines[4], format!("sandbox: {sandbox}"));
    assert_eq!(lines.len(), 5, "{preview}");
    let default = shell.preview(&json!({"argv": ["ls"]})).await.unwrap_or_default();
    assert!(default.contains("\ntimeout: 30s\n"), "{default}");
}

#[tokio::test]
async fn bad_arguments_are_refused() {
    let fx = Fixture::new();
    fx.put("notes.txt", "not a program");
    let shell = fx.tool("shell");
    let registry = fx.registry();
    let check = |args| registry.get("shell").map(|t| t.check_arguments(&args).is_ok());
    assert_eq!(check(json!({"argv": ["ls", "-l"], "timeout_secs": 600})), Some(true));
    assert_eq!(check(json!({})), Some(false), "argv is required");
    assert_eq!(check(json!({"argv": []})), Some(false));
    assert_eq!(check(json!({"argv": "ls -l"})), Some(false), "a string is not an argv");
    assert_eq!(check(json!({"argv": ["ls", 3]})), Some(false));
    assert_eq!(check(json!({"argv": ["ls"], "timeout_secs": 0})), Some(false));
    assert_eq!(check(json!({"argv": ["ls"], "timeout_secs": 601})), Some(false));
    assert_eq!(check(json!({"argv": ["ls"], "cwd": "/"})), Some(false));

    let cases = [
        (json!({"argv": []}), "at least the program"),
        (json!({"argv": [""]}), "is empty"),
        (json!({"argv": "ls -l"}), "invalid arguments"),
        (json!({"argv": ["ls"], "timeout_secs": 601}), "between 1 and 600"),
        (json!({"argv": ["ls"], "cwd": "/"}), "unknown field `cwd`"),
        (json!({"argv": ["echo", "a\u{0}b"]}), "NUL byte"),
        (json!({"argv": ["no-such-program-tollgate"]}), "not found on PATH"),
        (json!({"argv": ["./notes.txt"]}), "not an executable file"),
        (json!({"argv": ["./absent.sh"]}), "not an executable file"),
    ];
    for (args, needle) in cases {
        assert_refused(&shell, args, needle).await;
    }
}

#[tokio::test]
async fn program_paths_resolve_inside_the_workspace_only() {
    let fx = Fixture::new();
    let marker = fx.outside.join("ran.txt");
    let evil = format!("#!/bin/sh\necho pwned > '{}'\n", marker.display());
    fx.put_executable(&fx.outside.join("evil.sh"), &evil);
    fx.put_executable(Path::new("bin/hello.sh"), "#!/bin/sh\necho \"hello $1\"\n");
    // A program in the workspace is not found by its bare name, even though it runs there.
    fx.put_executable(Path::new("workspace-only"), &evil);
    fx.plant_link("evil", &fx.outside.join("evil.sh"));
    fx.plant_link("tools", &fx.outside);
    let shell = fx.tool("shell");

    let out = call(&shell, json!({"argv": ["bin/hello.sh", "x"]})).await;
    assert_eq!(out, ToolOutput::text("exit code 0\n--- stdout ---\nhello x\n"));
    let out = call(&shell, json!({"argv": ["./bin/../bin/hello.sh"]})).await;
    assert!(!out.is_error, "{out:?}");
    let preview = shell.preview(&json!({"argv": ["./bin/hello.sh"]})).await.unwrap_or_default();
    assert!(preview.contains("\nprogram: bin/hello.sh (in the workspace)\n"), "{preview}");

    for program in ["../outside/evil.sh", "/bin/echo", "./evil", "tools/evil.sh", "bin/../../outside/evil.sh"] {
        assert_refused(&shell, json!({"argv": [program]}), "escapes the workspace").await;
    }
    assert_refused(&shell, json!({"argv": ["workspace-only"]}), "not found on PATH").await;
    assert!(!marker.exists(), "no program outside the workspace ran");
}

#[tokio::test]
async fn output_is_capped_with_a_marker() {
    let fx = Fixture::new();
    let shell = fx.tool("shell");
    // `seq 1 50000` prints 288894 bytes.
    let out = call(&shell, json!({"argv": ["seq", "1", "50000"]})).await;
    assert!(!out.is_error, "exit code 0 even when cut");
    assert!(out.content.starts_with("exit code 0\n--- stdout ---\n1\n2\n"), "{}", &out.content[..40]);
    assert!(
        out.content.ends_with(&format!("\n[stdout cut: showing {MAX_OUTPUT_BYTES} of 288894 bytes]")),
        "{}",
        out.content.len()
    );
    assert!(out.content.len() < 50_000, "{}", out.content.len());

    // A short stdout leaves its share to stderr.
    let out = call(&shell, json!({"argv": ["sh", "-c", "seq 1 50000 >&2; echo done"]})).await;
    assert!(out.content.contains("--- stdout ---\ndone\n--- stderr ---\n1\n"), "{}", &out.content[..60]);
    assert!(out.content.ends_with(&format!("\n[stderr cut: showing {} of 288894 bytes]", MAX_OUTPUT_BYTES - 5)));
    assert!(out.content.len() < 50_000, "{}", out.content.len());
}

#[tokio::test]
async fn a_command_past_its_timeout_is_killed() {
    let fx = Fixture::new();
    let out = call(&fx.tool("shell"), json!({"argv": ["sleep", "5"], "timeout_secs": 1})).await;
    assert!(out.is_error, "{out:?}");
    assert!(out.content.starts_with("timed out after 1s; killed `sleep 5` and its process group "), "{out:?}");
    let pid =
        out.content.split("process group ").nth(1).and_then(|rest| rest.split([',', '\n']).next()).unwrap_or_default();
    assert!(pid.parse::<u32>().is_ok(), "{out:?}");
    // Killed and reaped: the process is gone, not left running or a zombie.
    if Path::new("/proc/self").exists() {
        assert!(!Path::new("/proc").join(pid).exists(), "process {pid} still exists");
    }
}

#[tokio::test]
async fn output_before_a_timeout_is_kept() {
    let fx = Fixture::new();
    let out =
        call(&fx.tool("shell"), json!({"argv": ["sh", "-c", "echo started; exec sleep 5"], "timeout_secs": 1})).await;
    assert!(out.is_error && out.content.starts_with("timed out after 1s"), "{out:?}");
    assert!(out.content.ends_with("\n--- stdout ---\nstarted\n"), "{out:?}");
}
