//! The README's tour, run as written: every `$ tollgate …` line of its shell blocks (and `$ cargo run
//! --release -p tollgate-cli -- …`, the same binary; but `serve`, which `tests/cli.rs` starts itself) runs
//! in a fresh folder with no config, in order, with the README's example id (or a prefix of it) replaced
//! by the real one. Every output line the README shows after a command (but `…`, which stands for lines
//! left out) must be in what the command printed, the example id read as the real one: the README's
//! outputs are the binary's.

use std::path::Path;
use std::process::{Command, Stdio};
use tollgate_agent_testkit::scratch_dir;

/// The run id of the README's examples: the one its copied outputs were made with.
const EXAMPLE_ID: &str = "01a2465f-fe55-738e-8ecb-e0c72ea30745";

/// How the README's first command runs the binary.
const CARGO_RUN: &str = "cargo run --release -p tollgate-cli -- ";

struct Step {
    command: String,
    shown: Vec<String>,
}

fn tour() -> Vec<Step> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
        .unwrap_or_else(|e| panic!("cannot read README.md: {e}"));
    let mut steps: Vec<Step> = Vec::new();
    let mut in_shell = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_shell = line == "```sh";
            continue;
        }
        if !in_shell {
            continue;
        }
        if let Some(command) = line.strip_prefix("$ ") {
            let command = command.split(" # ").next().unwrap_or(command).trim();
            let command =
                command.strip_prefix(CARGO_RUN).map_or_else(|| command.to_owned(), |rest| format!("tollgate {rest}"));
            steps.push(Step { command, shown: Vec::new() });
        } else if let Some(step) = steps.last_mut() {
            step.shown.push(line.trim_end().to_owned());
        }
    }
    steps.retain(|s| s.command.starts_with("tollgate ") && !s.command.starts_with("tollgate serve"));
    steps
}

fn words(command: &str) -> Vec<String> {
    // The README's commands quote with double quotes only.
    let mut words = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in command.chars() {
        match c {
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if !current.is_empty() {
                    words.push(std::mem::take(&mut current));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

#[test]
fn the_readme_tour_runs_as_written() {
    let steps = tour();
    assert!(steps.len() >= 4, "the README's tour has its tollgate commands: {}", steps.len());
    let dir = scratch_dir("readme");
    let mut id = String::new();
    for step in &steps {
        let mut args = words(&step.command);
        args.remove(0);
        for arg in &mut args {
            if arg.len() >= 8 && EXAMPLE_ID.starts_with(arg.as_str()) {
                *arg = id.chars().take(arg.len()).collect();
            }
        }
        let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(&args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .env_remove("TOLLGATE_STORE_URL")
            .env_remove("TOLLGATE_WORKSPACE_ROOT")
            .env_remove("TOLLGATE_CONFIG")
            .output()
            .unwrap_or_else(|e| panic!("cannot run tollgate: {e}"));
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let expected = if args.first().map(String::as_str) == Some("run") { 3 } else { 0 };
        assert_eq!(output.status.code(), Some(expected), "`{}`: {stdout}{stderr}", step.command);
        if args.first().map(String::as_str) == Some("run") {
            id = stdout.split_whitespace().nth(1).unwrap_or_else(|| panic!("no run id in {stdout}")).to_owned();
        }
        for shown in step.shown.iter().filter(|l| !l.trim().is_empty() && l.trim() != "…") {
            let shown = shown.replace(EXAMPLE_ID, &id);
            assert!(
                stdout.contains(&shown) || stderr.contains(&shown),
                "`{}` should show `{shown}`:\n{stderr}{stdout}",
                step.command
            );
        }
    }
    assert_eq!(std::fs::read_to_string(dir.join("workspace/note.txt")).ok().as_deref(), Some("hello"));
}
