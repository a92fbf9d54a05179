//! Snapshots (insta) of what each command prints on stdout, as text and with `--json`, for one scripted
//! sequence from an empty folder: ids, times, digests, hashes and ages are replaced by placeholders.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use tollgate_agent_testkit::scratch_dir;

struct Printed {
    code: i32,
    stdout: String,
}

fn tollgate(dir: &Path, args: &[&str]) -> Printed {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .env_remove("TOLLGATE_STORE_URL")
        .env_remove("TOLLGATE_WORKSPACE_ROOT")
        .env_remove("TOLLGATE_CONFIG")
        .output()
        .unwrap_or_else(|e| panic!("cannot run tollgate: {e}"));
    Printed { code: output.status.code().unwrap_or(-1), stdout: String::from_utf8_lossy(&output.stdout).into_owned() }
}

fn settings(ids: &[String]) -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    for (i, id) in ids.iter().enumerate() {
        settings.add_filter(&regex_escape(id), format!("run-{i}"));
    }
    settings.add_filter(r#""idempotency_key":"[0-9a-f:_-]*…"#, r#""idempotency_key":"[KEY]…"#);
    settings.add_filter(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{3})?Z", "[TIME]");
    settings.add_filter(r"sha256:[0-9a-f]{64}", "sha256:[DIGEST]");
    settings.add_filter(r"\b[0-9a-f]{64}\b", "[HASH]");
    settings.add_filter(r"\b\d+s( ago)?\b", "[AGE]");
    settings.set_prepend_module_to_snapshot(false);
    settings.set_snapshot_suffix("");
    settings
}

fn regex_escape(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_string() } else { format!("\\{c}") }).collect()
}

/// Every command's stdout, text then `--json`, in one document per command.
#[test]
fn each_command_prints_what_clients_rely_on() {
    let dir = scratch_dir("outputs");
    let mut ids: Vec<String> = Vec::new();
    let mut start = |input: &str| {
        let printed = tollgate(&dir, &["run", "--json", input]);
        assert_eq!(printed.code, 3, "{}", printed.stdout);
        let run: Value = serde_json::from_str(&printed.stdout).unwrap_or_else(|e| panic!("{e}: {}", printed.stdout));
        let id = run["id"].as_str().unwrap_or_default().to_owned();
        ids.push(id.clone());
        (id, printed.stdout)
    };
    let (a, run_a) = start("approve me");
    let (b, _) = start("deny me");
    let (c, _) = start("edit me");
    let (d, _) = start("respond to me");
    let (e, _) = start("cancel me");
    let run_text = tollgate(&dir, &["run", "text output"]);
    ids.push(run_text.stdout.split_whitespace().nth(1).unwrap_or_default().to_owned());

    let steps: Vec<(&str, Vec<&str>)> = vec![
        ("show_waiting", vec!["show", &a]),
        ("approve", vec!["approve", &a]),
        ("deny", vec!["deny", &b, "--reason", "not today"]),
        ("edit", vec!["edit", &c, "--call", "call_2", "--args", r#"{"path": "edited.txt", "content": "edited"}"#]),
        ("respond", vec!["respond", &d, "--call", "call_2", "--result", "I wrote it myself."]),
        ("cancel", vec!["cancel", &e, "--reason", "changed my mind"]),
        ("show_completed", vec!["show", &a]),
        ("show_events", vec!["show", &a, "--events"]),
        ("runs", vec!["runs", "--limit", "3"]),
        ("tools", vec!["tools", "--agent", "demo"]),
        ("verify", vec!["verify", &a]),
        ("purge", vec!["purge", "--older-than", "30d"]),
    ];
    let settings = settings(&ids);
    let _guard = settings.bind_to_scope();
    insta::assert_snapshot!("output_run_json", run_a);
    insta::assert_snapshot!("output_run_text", run_text.stdout);
    for (name, args) in steps {
        // Deciding and cancelling change the run: the --json form is taken from `show` afterwards.
        let changes = ["approve", "deny", "edit", "respond", "cancel"].contains(&name);
        let text = tollgate(&dir, &args);
        let json_args: Vec<&str> =
            if changes { vec!["show", args[1], "--json"] } else { args.iter().copied().chain(["--json"]).collect() };
        let json = tollgate(&dir, &json_args);
        let document = format!(
            "$ tollgate {}\n[exit {}]\n{}\n$ tollgate {}\n[exit {}]\n{}",
            args.join(" "),
            text.code,
            text.stdout,
            json_args.join(" "),
            json.code,
            json.stdout
        );
        insta::assert_snapshot!(format!("output_{name}"), document);
    }
}
