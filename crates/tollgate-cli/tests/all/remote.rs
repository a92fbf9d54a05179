//! `--server URL`: the real `tollgate serve` on a free loopback port in a fresh folder, and the real
//! `tollgate` binary driving it from another, empty folder through the HTTP API — the scenarios of
//! tests/cli.rs (the demo agent's approval cycle, exit codes, `--json`, id prefixes), output identical to
//! local mode on the same store, and tokens: a missing one, a bad one, a runner's that may not decide.

use anyhow::{Result, anyhow, bail};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;
use tollgate_agent_testkit::scratch_dir;

use crate::support::Outcome;

/// `tollgate` with a clean environment in `dir`.
fn tollgate(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<Outcome> {
    crate::support::tollgate_in(dir, args, env)
}

/// A `tollgate serve` in its own folder, stopped when dropped.
struct Server {
    dir: PathBuf,
    url: String,
    child: Child,
}

impl Server {
    /// Serves from a fresh folder holding `config` as `tollgate.toml` (none when empty).
    fn start(config: &str) -> Result<Server> {
        Server::start_with(config, &[])
    }

    /// Serves from a fresh folder holding `config` as `tollgate.toml` (none when empty) and `files` (name
    /// and content) beside it.
    fn start_with(config: &str, files: &[(&str, &str)]) -> Result<Server> {
        let dir = scratch_dir("remote-server");
        if !config.is_empty() {
            std::fs::write(dir.join("tollgate.toml"), config)?;
        }
        for (name, content) in files {
            std::fs::write(dir.join(name), content)?;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = crate::support::serve_in(&dir, &format!("127.0.0.1:{port}")).spawn()?;
        let server = Server { dir, url: format!("http://127.0.0.1:{port}"), child };
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!("the server never listened on port {port}")
    }

    fn workspace_file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join("workspace").join(name)).ok()
    }

    /// `tollgate` on the server's own store, in local mode.
    fn local(&self, args: &[&str]) -> Result<Outcome> {
        tollgate(&self.dir, args, &[])
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The command line, in an empty folder of its own, acting through a server.
struct Client {
    dir: PathBuf,
    server: String,
    token: Option<String>,
}

impl Client {
    fn of(server: &Server) -> Client {
        Client { dir: scratch_dir("remote-client"), server: server.url.clone(), token: None }
    }

    fn with_token(server: &Server, token: &str) -> Client {
        Client { token: Some(token.to_owned()), ..Client::of(server) }
    }

    fn tollgate(&self, args: &[&str]) -> Result<Outcome> {
        let mut all = vec!["--server", self.server.as_str()];
        all.extend_from_slice(args);
        let env: Vec<(&str, &str)> = self.token.iter().map(|t| ("TOLLGATE_TOKEN", t.as_str())).collect();
        tollgate(&self.dir, &all, &env)
    }

    /// Runs and checks the exit code.
    fn expect(&self, code: i32, args: &[&str]) -> Result<Outcome> {
        let out = self.tollgate(args)?;
        if out.code != code {
            bail!("`tollgate --server … {}` exited {} instead of {code}: {out:?}", args.join(" "), out.code);
        }
        Ok(out)
    }

    fn waiting_run(&self, input: &str) -> Result<String> {
        self.expect(3, &["run", input])?.waiting_id()
    }
}

#[test]
fn hello_waits_at_the_gate_and_approve_writes_the_note() -> Result<()> {
    let server = Server::start("")?;
    let client = Client::of(&server);
    let run = client.expect(3, &["run", "hello"])?;
    let id = run.waiting_id()?;
    assert!(run.stdout.contains(&format!("tollgate approve {id}")), "{run:?}");
    assert!(run.stderr.contains(&format!("started run {id} (agent demo)")), "{run:?}");
    assert!(run.stderr.contains("create note.txt (5 bytes)"), "the preview is shown: {run:?}");
    assert_eq!(server.workspace_file("note.txt"), None, "nothing is written before the decision");

    let approved = client.expect(0, &["approve", &id])?;
    assert_eq!(approved.stdout, "Saved note.txt.\n");
    assert!(approved.stderr.contains(&format!("run {id} resumed")), "{approved:?}");
    assert_eq!(server.workspace_file("note.txt").as_deref(), Some("hello"));
    let verified = client.expect(0, &["verify", &id])?;
    assert!(verified.stdout.contains("the hash chain is intact"), "{verified:?}");
    assert!(
        std::fs::read_dir(&client.dir)?.next().is_none(),
        "through a server, nothing is created where the command runs (no store, no workspace)"
    );
    Ok(())
}

#[test]
fn meta_options_reach_the_server_and_its_refusals_are_usage_errors() -> Result<()> {
    let server = Server::start("")?;
    let client = Client::of(&server);
    let waiting = client.expect(3, &["--json", "run", "--meta", "customer=acme", "hi"])?.json()?;
    assert_eq!(waiting["metadata"], serde_json::json!({"customer": "acme"}));
    let big = format!("blob={}", "x".repeat(17_000));
    let refused = client.expect(2, &["run", "--meta", &big, "hi"])?;
    assert!(refused.stderr.contains("metadata must be at most 16384 bytes"), "{refused:?}");
    Ok(())
}

#[test]
fn deny_with_a_reason_leaves_no_note() -> Result<()> {
    let server = Server::start("")?;
    let client = Client::of(&server);
    let id = client.waiting_run("hello")?;
    let denied = client.expect(0, &["deny", &id, "--reason", "not today"])?;
    assert_eq!(denied.stdout, "Understood — I did not write the note.\n");
    assert_eq!(server.workspace_file("note.txt"), None);

    let shown = client.expect(0, &["show", &id, "--events", "--json"])?.json()?;
    let decision = shown["events"]
        .as_array()
        .and_then(|events| events.iter().find(|e| e["kind"] == "decision"))
        .ok_or_else(|| anyhow!("no decision event in {shown}"))?;
    assert_eq!(decision["data"]["action"], "deny");
    assert_eq!(decision["data"]["reason"], "not today");
    assert_eq!(decision["data"]["actor"], "local", "a server without tokens records every caller as local");
    Ok(())
}

#[test]
fn output_is_the_same_as_local_mode_on_the_same_store() -> Result<()> {
    let server = Server::start("")?;
    let client = Client::of(&server);
    let waiting = client.expect(3, &["--json", "run", "hello"])?.json()?;
    let id = waiting["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(waiting["status"], "waiting_for_approval");
    assert_eq!(waiting["pending"]["calls"][1]["call_id"], "call_2");
    // The run object of `run --json` is the one local mode prints for the same run.
    assert_eq!(waiting, server.local(&["show", &id, "--json"])?.json()?);

    let done = client.expect(0, &["approve", &id, "--json"])?.json()?;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"], "Saved note.txt.");
    let second = client.waiting_run("second")?;
    // Grants through the server: one remembered with an approval, one for every write (so `tools` shows
    // it), one made and revoked; and the refusals, exiting as locally.
    let remember = ["approve", &second, "--remember", "--scope", "run", "--for", "2h", "--match", "/path=*.txt"];
    let remembered = client.expect(0, &remember)?;
    assert!(remembered.stderr.contains("call_2: remembered as grant "), "{remembered:?}");
    let every = client.expect(0, &["grant", "--agent", "demo", "--tool", "fs_write", "--reason", "all", "--json"])?;
    assert_eq!(every.json()?["match"], serde_json::json!({}));
    let gone = client.expect(0, &["grant", "--agent", "demo", "--tool", "fs_list", "--json"])?.json()?;
    let gone = gone["id"].as_str().unwrap_or_default();
    assert_eq!(client.expect(0, &["revoke", gone])?.stdout, format!("grant {gone} revoked\n"));
    let again = client.expect(4, &["revoke", gone])?;
    assert!(again.stderr.contains(&format!("grant {gone} is already revoked")), "{again:?}");
    let unknown = client.expect(1, &["revoke", "0193b0c6-0000-7000-8000-000000000001"])?;
    assert!(unknown.stderr.contains("no grant has id `0193b0c6-0000-7000-8000-000000000001`"), "{unknown:?}");
    let unknown = client.expect(1, &["grant", "--agent", "nobody", "--tool", "fs_write"])?;
    assert!(unknown.stderr.contains("unknown agent `nobody`"), "{unknown:?}");
    client.expect(1, &["grant", "--agent", "demo", "--tool", "nothing"])?;
    client.expect(2, &["grant", "--agent", "demo", "--tool", "fs_write", "--for", "31d"])?;
    // A grant made through the server prints as one made locally.
    let grant = ["grant", "--agent", "demo", "--tool", "fs_write", "--match", "/path=notes/*", "--for", "1d"];
    for args in [grant.to_vec(), [grant.as_slice(), &["--json"]].concat()] {
        let (remote, local) = (client.expect(0, &args)?, server.local(&args)?);
        assert_eq!(without_ids_and_times(&remote.stdout), without_ids_and_times(&local.stdout), "{}", args.join(" "));
    }

    // Byte for byte, the same output whichever way the runs are read.
    for args in [
        vec!["show", id.as_str(), "--json"],
        vec!["show", id.as_str(), "--events", "--json"],
        vec!["show", id.as_str(), "--events"],
        vec!["show", second.as_str(), "--events", "--json"],
        vec!["runs", "--json"],
        vec!["runs", "--status", "completed", "--json"],
        vec!["tools", "--json"],
        vec!["tools", "--agent", "demo"],
        vec!["tools", "--agent", "demo", "--json"],
        vec!["verify", id.as_str(), "--json"],
        vec!["grants"],
        vec!["grants", "--json"],
        vec!["grants", "--all"],
        vec!["grants", "--all", "--json"],
        vec!["grants", "--agent", "demo", "--tool", "fs_list", "--all", "--json"],
    ] {
        let remote = client.expect(0, &args)?;
        let local = server.local(&args)?;
        assert!(local.code == 0 && !local.stdout.is_empty(), "{local:?}");
        assert_eq!(without_age(&remote.stdout), without_age(&local.stdout), "`{}`", args.join(" "));
    }
    let remote = client.expect(0, &["runs"])?;
    let local = server.local(&["runs"])?;
    assert_eq!(runs_rows(&remote.stdout), runs_rows(&local.stdout));
    assert_eq!(remote.stdout.lines().count(), 3, "a heading and two runs: {remote:?}");
    Ok(())
}

/// `watcher` writes two notes in one turn (both ask); a turn of it held a second is escalated to the
/// notifiers `ops` and `oncall` (V2.md §4), whose Slack URLs lead nowhere: their messages fail, which
/// never holds up a run.
const ESCALATING: &str = r#"
[server]
link_secret = "0123456789abcdef0123456789abcdef0123456789abcdef"

[[notify]]
name = "ops"
kind = "slack"
url = "http://127.0.0.1:9/ops"
as = "ops-desk"
on = ["escalation"]

[[notify]]
name = "oncall"
kind = "slack"
url = "http://127.0.0.1:9/oncall"
as = "ops-desk"
on = ["escalation"]

[[providers]]
name = "script"
kind = "scripted"
script = "script.json"

[[agents]]
name = "watcher"
provider = "script"
tools = ["fs_write"]
escalate_after = "1s"
escalate_to = ["ops", "oncall"]
"#;

const WATCHER_SCRIPT: &str = r#"{"turns": [
  {"tool_calls": [
    {"name": "fs_write", "arguments": {"path": "w1.txt", "content": "one"}},
    {"name": "fs_write", "arguments": {"path": "w2.txt", "content": "two"}}
  ]},
  {"text": "done"}
]}"#;

#[test]
fn an_escalated_run_says_so_in_show_runs_and_the_waiting_lines_alike_through_a_server_and_locally() -> Result<()> {
    let server = Server::start_with(ESCALATING, &[("script.json", WATCHER_SCRIPT)])?;
    let client = Client::of(&server);
    let id = client.expect(3, &["run", "--agent", "watcher", "watch me"])?.waiting_id()?;
    // The server's sweep escalates the turn once it has waited a second.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let escalated = loop {
        let run = client.expect(0, &["show", &id, "--json"])?.json()?;
        if !run["pending"]["escalated"].is_null() {
            break run["pending"]["escalated"].clone();
        }
        if std::time::Instant::now() > deadline {
            bail!("run {id} was not escalated within 30 s: {run}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(escalated["notified"], serde_json::json!(["ops", "oncall"]));
    let at = escalated["at"].as_str().ok_or_else(|| anyhow!("no time in {escalated}"))?;
    let line = format!("escalated at {at} · notified ops, oncall");

    // `show`: the line under the held turn's digest, the same through the server and locally.
    let shown = client.expect(0, &["show", &id])?;
    let held = shown.stdout.lines().skip_while(|l| !l.starts_with("held turn ")).nth(1);
    assert_eq!(held, Some(line.as_str()), "{shown:?}");
    assert_eq!(without_age(&shown.stdout), without_age(&server.local(&["show", &id])?.stdout));

    // `runs`: the status says it, the same both ways (but the ages, which may tick between the two).
    let listed = ["runs", "--status", "waiting_for_approval"];
    let rows = |text: &str| -> Vec<String> {
        text.lines()
            .map(|l| l.split_whitespace().filter(|w| w.trim_end_matches(['s', 'm', 'h', 'd']).parse::<u64>().is_err()))
            .map(|words| words.collect::<Vec<_>>().join(" "))
            .collect()
    };
    let remote = client.expect(0, &listed)?.stdout;
    assert_eq!(rows(&remote), rows(&server.local(&listed)?.stdout));
    assert_eq!(
        rows(&remote),
        ["ID AGENT STATUS AGE INPUT", &format!("{id} watcher waiting_for_approval (escalated) watch me")]
    );

    // A decision that leaves the turn waiting: the waiting line as it is, then the escalation.
    let approved = client.expect(3, &["approve", &id, "--call", "call_1"])?;
    let lines: Vec<&str> = approved.stdout.lines().take(3).collect();
    assert_eq!(
        lines,
        [format!("run {id} is waiting for approval").as_str(), &line, &format!("approve: tollgate approve {id}")]
    );

    // As people read them (snapshots): `show`, `runs` and the waiting lines.
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z", "[TIME]");
    settings.add_filter(r"sha256:[0-9a-f]{64}", "sha256:[DIGEST]");
    settings.add_filter(r"\(\d+s ago", "([AGE] ago");
    settings.add_filter(r"\b\d+s +", "[AGE]  ");
    settings.set_prepend_module_to_snapshot(false);
    let _guard = settings.bind_to_scope();
    let named = |text: &str| text.replace(&id, "run-e000-0000-7000-8000-000000000000");
    insta::assert_snapshot!("show_escalated", named(&client.expect(0, &["show", &id])?.stdout));
    insta::assert_snapshot!("runs_escalated", named(&remote));
    insta::assert_snapshot!("approve_escalated_stdout", named(&approved.stdout));

    let local = server.local(&["deny", &id, "--call", "call_2", "--reason", "enough"])?;
    assert_eq!(local.code, 0, "{local:?}");
    assert!(!server.local(&["show", &id])?.stdout.contains("escalated"), "a run that moved on is not escalated");
    Ok(())
}

/// Text with each grant or run id (a UUIDv7) written `ID` and each time `TIME`.
fn without_ids_and_times(text: &str) -> String {
    let word = |word: &str| {
        let bare = word.trim_matches(|c| c == '"' || c == ',');
        if crate::support::is_uuid_v7(bare) {
            word.replace(bare, "ID")
        } else if chrono::DateTime::parse_from_rfc3339(bare).is_ok() {
            word.replace(bare, "TIME")
        } else {
            word.to_owned()
        }
    };
    text.lines().map(|line| line.split(' ').map(word).collect::<Vec<_>>().join(" ")).collect::<Vec<_>>().join("\n")
}

/// Text without the line that says how long ago the run was created: a second may tick between two
/// commands.
fn without_age(text: &str) -> String {
    text.lines().filter(|line| !line.starts_with("created ")).collect::<Vec<_>>().join("\n")
}

/// The words of each row of the `runs` table, but the AGE column.
fn runs_rows(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .map(|line| line.split_whitespace().enumerate().filter(|(i, _)| *i != 3).map(|(_, w)| w).collect())
        .collect()
}

#[test]
fn ids_prefixes_conflicts_and_rejected_arguments() -> Result<()> {
    let server = Server::start("")?;
    let client = Client::of(&server);
    let first = client.waiting_run("one")?;
    let second = client.waiting_run("two")?;

    // A unique prefix works; a shared one is ambiguous; an unknown one, or a whole unknown id, is named.
    let common = first.chars().zip(second.chars()).take_while(|(a, b)| a == b).count();
    let ambiguous = &first[..common.min(4)];
    let out = client.expect(1, &["show", ambiguous])?;
    assert!(out.stderr.contains(&format!("`{ambiguous}` matches 2 runs")), "{out:?}");
    let unknown = client.expect(1, &["approve", "ffffffff"])?;
    assert!(unknown.stderr.contains("no run matches `ffffffff`"), "{unknown:?}");
    let whole = "0193b0c6-0000-7000-8000-000000000001";
    let unknown = client.expect(1, &["show", whole])?;
    assert!(unknown.stderr.contains(&format!("no run matches `{whole}`")), "{unknown:?}");

    // Rejected arguments change nothing (exit 2), and an unknown call is named (exit 1).
    let bad_json = client.expect(2, &["edit", &first, "--call", "call_2", "--args", "{path:"])?;
    assert!(bad_json.stderr.contains("--args is not valid JSON"), "{bad_json:?}");
    let bad_schema = client.expect(2, &["edit", &first, "--call", "call_2", "--args", r#"{"path": 3}"#])?;
    assert!(bad_schema.stderr.contains("call_2"), "{bad_schema:?}");
    let escape =
        client.expect(2, &["edit", &first, "--call", "call_2", "--args", r#"{"path": "../x", "content": ""}"#])?;
    assert!(escape.stderr.contains("escapes the workspace"), "{escape:?}");
    client.expect(2, &["approve", &first, "--call", "call_1"])?;
    let unknown_call = client.expect(1, &["approve", &first, "--call", "call_9"])?;
    assert!(unknown_call.stderr.contains("call_9"), "{unknown_call:?}");
    client.expect(2, &["tools", "--agent", "nobody"])?;
    client.expect(2, &["run", "--agent", "nobody", "hello"])?;
    let still = client.expect(0, &["show", &first, "--json"])?.json()?;
    assert_eq!(still["status"], "waiting_for_approval");
    assert_eq!(still["pending"]["calls"][1]["decision"], Value::Null, "nothing was recorded");

    // Edit with valid arguments by a unique prefix: the edited call runs.
    let prefix = &first[..first.len() - 4];
    let edited = client
        .expect(0, &["edit", prefix, "--call", "call_2", "--args", r#"{"path": "edited.txt", "content": "hi"}"#])?;
    assert_eq!(edited.stdout, "Saved note.txt.\n");
    assert_eq!(server.workspace_file("edited.txt").as_deref(), Some("hi"));

    // A finished run takes no decision and cannot be cancelled: conflict.
    client.expect(4, &["approve", &first])?;
    client.expect(4, &["cancel", &first])?;

    // Respond answers in the tool's place; cancel a waiting run, then it conflicts.
    let answered = client.expect(0, &["respond", &second, "--call", "call_2", "--result", "done elsewhere"])?;
    assert_eq!(answered.stdout, "Saved note.txt.\n");
    let third = client.waiting_run("three")?;
    let cancelled = client.expect(0, &["cancel", &third, "--reason", "changed my mind"])?;
    assert_eq!(cancelled.stdout, format!("run {third} cancelled\n"));
    client.expect(4, &["cancel", &third])?;
    let waiting = client.expect(0, &["runs", "--status", "waiting_for_approval", "--json"])?.json()?;
    assert_eq!(waiting["runs"].as_array().map(Vec::len), Some(0));

    // Purge through the API: the finished runs go.
    let purged = client.expect(0, &["purge", "--older-than", "0s", "--json"])?.json()?;
    assert_eq!(purged, serde_json::json!({"deleted_runs": 3}));
    client.expect(1, &["show", &first])?;
    Ok(())
}

#[test]
fn tokens_are_required_and_roles_enforced() -> Result<()> {
    let server = Server::start(
        "[[auth.tokens]]\nname = \"alice\"\ntoken = \"alice-secret\"\nroles = [\"runner\", \"approver\", \"admin\"]\n\n\
         [[auth.tokens]]\nname = \"bob\"\ntoken = \"bob-secret\"\nroles = [\"runner\"]\n",
    )?;
    let anonymous = Client::of(&server);
    let missing = anonymous.expect(2, &["runs"])?;
    assert!(missing.stderr.contains("TOLLGATE_TOKEN"), "the message says where the token goes: {missing:?}");
    let wrong = Client::with_token(&server, "guess").expect(2, &["runs"])?;
    assert!(wrong.stderr.contains("refused the token"), "{wrong:?}");

    // A runner starts runs and reads them, but may not decide them: the server refuses, nothing is done.
    let bob = Client::with_token(&server, "bob-secret");
    let id = bob.waiting_run("hello")?;
    let refused = bob.expect(2, &["approve", &id])?;
    assert!(refused.stderr.contains("not allowed"), "{refused:?}");
    bob.expect(2, &["purge"])?;
    let shown = bob.expect(0, &["show", &id, "--json"])?.json()?;
    assert_eq!(shown["created_by"], "bob");
    assert_eq!(shown["pending"]["calls"][1]["decision"], Value::Null);

    // An approver decides; the decision is recorded under the token's name.
    let alice = Client::with_token(&server, "alice-secret");
    assert_eq!(alice.expect(0, &["approve", &id])?.stdout, "Saved note.txt.\n");
    let events = alice.expect(0, &["show", &id, "--events", "--json"])?.json()?;
    let decision = events["events"]
        .as_array()
        .and_then(|events| events.iter().find(|e| e["kind"] == "decision"))
        .ok_or_else(|| anyhow!("no decision event in {events}"))?;
    assert_eq!(decision["data"]["actor"], "alice");
    Ok(())
}

#[test]
fn an_unreachable_server_fails_clearly_and_serve_takes_no_server() -> Result<()> {
    let dir = scratch_dir("remote-unreachable");
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let url = format!("http://127.0.0.1:{port}");
    let out = tollgate(&dir, &["--server", &url, "runs"], &[])?;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains(&format!("cannot reach the Tollgate server at {url}")), "{out:?}");
    let not_a_url = tollgate(&dir, &["--server", "localhost:8080", "runs"], &[])?;
    assert_eq!(not_a_url.code, 2, "{not_a_url:?}");
    let serve = tollgate(&dir, &["--server", &url, "serve"], &[])?;
    assert_eq!(serve.code, 2, "{serve:?}");
    assert!(std::fs::read_dir(&dir)?.next().is_none(), "nothing was opened or created");
    Ok(())
}
