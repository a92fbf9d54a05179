//! Grants from the command line (V2.md section 1): `approve --remember`, `grant`, `grants` and
//! `revoke` on the real binary in a fresh folder (the built-in demo agent, whose `fs_write` call asks):
//! snapshots of what each prints, that a remembered approval lets the next run pass the gate, and the
//! exit codes of the refusals.

use anyhow::{Result, anyhow, bail};
use serde_json::Value;
use std::path::{Path, PathBuf};
use tollgate_agent_testkit::scratch_dir;

use crate::support::Outcome;

/// A fresh, empty folder used as the current folder of every invocation.
struct Sandbox {
    dir: PathBuf,
}

impl Sandbox {
    fn new() -> Self {
        Self { dir: scratch_dir("grants") }
    }

    /// A sandbox with `config` as its `tollgate.toml`.
    fn with_config(config: &str) -> Result<Self> {
        let sandbox = Self::new();
        std::fs::write(sandbox.dir.join("tollgate.toml"), config)?;
        Ok(sandbox)
    }

    fn tollgate(&self, args: &[&str]) -> Result<Outcome> {
        crate::support::tollgate_in(&self.dir, args, &[])
    }

    /// Runs and checks the exit code.
    fn expect(&self, code: i32, args: &[&str]) -> Result<Outcome> {
        let out = self.tollgate(args)?;
        if out.code != code {
            bail!("`tollgate {}` exited {} instead of {code}: {out:?}", args.join(" "), out.code);
        }
        Ok(out)
    }

    fn waiting_run(&self, input: &str) -> Result<String> {
        self.expect(3, &["run", input])?.waiting_id()
    }

    fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Ids (runs as `run-N`, grants as `grant-N`, in the order given), times and digests replaced by
/// placeholders.
fn settings(runs: &[String], grants: &[String]) -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    for (i, id) in runs.iter().enumerate() {
        settings.add_filter(&regex_escape(id), format!("run-{i}"));
    }
    for (i, id) in grants.iter().enumerate() {
        settings.add_filter(&regex_escape(id), format!("grant-{i}"));
    }
    settings.add_filter(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{3})?Z", "[TIME]");
    settings.set_prepend_module_to_snapshot(false);
    settings.set_snapshot_suffix("");
    settings
}

fn regex_escape(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_string() } else { format!("\\{c}") }).collect()
}

/// What a command printed, for a snapshot: the command, its exit code and its stdout.
fn printed(args: &[&str], out: &Outcome) -> String {
    format!("$ tollgate {}\n[exit {}]\n{}", args.join(" "), out.code, out.stdout)
}

/// The ids of the grants `tollgate grants --all --json` lists, oldest first.
fn grant_ids(sandbox: &Sandbox) -> Result<Vec<String>> {
    let listed = sandbox.expect(0, &["grants", "--all", "--json"])?.json()?;
    let grants = listed["grants"].as_array().ok_or_else(|| anyhow!("no grants in {listed}"))?;
    Ok(grants.iter().rev().filter_map(|g| g["id"].as_str().map(str::to_owned)).collect())
}

/// A remembered approval makes a grant (named on stderr and in the `decision` event) and lets the next
/// run of the agent pass the gate; `grant --apply-to-waiting` approves the waiting run it clears;
/// `grants`, `grant` and `revoke` print what the snapshots hold.
#[test]
fn grants_are_made_listed_used_and_revoked() -> Result<()> {
    let sandbox = Sandbox::new();
    let first = sandbox.waiting_run("hello")?;
    let waiting = sandbox.waiting_run("waits")?;

    // Approve and remember: the call's suggested pattern (`{"/path": "*"}`), for the default 8h.
    let approved = sandbox.expect(0, &["approve", &first, "--remember"])?;
    assert_eq!(approved.stdout, "Saved note.txt.\n");
    let shown = sandbox.expect(0, &["show", &first, "--events", "--json"])?.json()?;
    let decision = shown["events"]
        .as_array()
        .and_then(|events| events.iter().find(|e| e["kind"] == "decision"))
        .ok_or_else(|| anyhow!("no decision event in {shown}"))?;
    let remembered = decision["data"]["grant"].as_str().ok_or_else(|| anyhow!("no grant in {decision}"))?;
    assert!(
        approved.stderr.contains(&format!(
            "call_2: remembered as grant {remembered}: fs_write calls of agent demo whose arguments match \
             {{\"/path\":\"*\"}} pass the gate until "
        )),
        "{approved:?}"
    );

    // The next run passes the gate: its write is allowed by the grant, which counts the use.
    let passed = sandbox.expect(0, &["run", "again"])?;
    assert_eq!(passed.stdout, "Saved note.txt.\n");
    let listed = sandbox.expect(0, &["grants", "--json"])?.json()?;
    assert_eq!(listed["grants"][0]["id"], remembered);
    assert_eq!(listed["grants"][0]["uses"], 1);
    assert_eq!(listed["grants"][0]["match"], serde_json::json!({"/path": "*"}));
    assert_eq!(sandbox.expect(0, &["revoke", remembered])?.stdout, format!("grant {remembered} revoked\n"));

    // A grant made directly, applied to the run still waiting (its write is `note.txt`).
    let grant_args = [
        "grant",
        "--agent",
        "demo",
        "--tool",
        "fs_write",
        "--match",
        "/path=note.txt",
        "--for",
        "2h",
        "--reason",
        "notes are fine",
        "--apply-to-waiting",
    ];
    let made = sandbox.expect(0, &grant_args)?;
    let status = sandbox.expect(0, &["show", &waiting, "--json"])?.json()?;
    assert_eq!(status["status"], "completed", "the waiting run was approved and completed");
    let json_args = ["grant", "--agent", "demo", "--tool", "fs_list", "--json"];
    let made_json = sandbox.expect(0, &json_args)?;
    let listed_args = ["grants"];
    let listed = sandbox.expect(0, &listed_args)?;
    let listed_json_args = ["grants", "--json"];
    let listed_json = sandbox.expect(0, &listed_json_args)?;
    let newest = made_json.json()?["id"].as_str().unwrap_or_default().to_owned();
    let revoke_args = ["revoke", newest.as_str(), "--json"];
    let revoked = sandbox.expect(0, &revoke_args)?;
    let all_args = ["grants", "--all"];
    let all = sandbox.expect(0, &all_args)?;

    let grants = grant_ids(&sandbox)?;
    let settings = settings(&[first, waiting], &grants);
    let _guard = settings.bind_to_scope();
    insta::assert_snapshot!(
        "grants_grant",
        format!("{}\n{}", printed(&grant_args, &made), printed(&json_args, &made_json))
    );
    insta::assert_snapshot!(
        "grants_list",
        format!(
            "{}\n{}\n{}",
            printed(&listed_args, &listed),
            printed(&listed_json_args, &listed_json),
            printed(&all_args, &all)
        )
    );
    insta::assert_snapshot!("grants_revoke", printed(&revoke_args, &revoked));
    Ok(())
}

#[test]
fn refusals_exit_as_docs_cli_md_says() -> Result<()> {
    let sandbox = Sandbox::new();
    let run = sandbox.waiting_run("hello")?;

    // Unknown agent or tool: exit 1, named.
    let unknown = sandbox.expect(1, &["grant", "--agent", "nobody", "--tool", "fs_write"])?;
    assert!(unknown.stderr.contains("unknown agent `nobody`"), "{unknown:?}");
    let unknown = sandbox.expect(1, &["grant", "--agent", "demo", "--tool", "nothing"])?;
    assert!(unknown.stderr.contains("agent `demo` has no tool `nothing`"), "{unknown:?}");
    // Bad input: exit 2, nothing made.
    sandbox.expect(2, &["grant", "--agent", "demo", "--tool", "fs_write", "--match", "path=x"])?;
    let long = sandbox.expect(2, &["grant", "--agent", "demo", "--tool", "fs_write", "--for", "31d"])?;
    assert!(long.stderr.contains("at most 2592000"), "{long:?}");
    sandbox.expect(2, &["grant", "--agent", "demo", "--tool", "fs_write", "--scope", "run"])?;
    sandbox.expect(2, &["grant", "--agent", "demo", "--tool", "fs_write", "--scope", "agent", "--run", &run])?;
    sandbox.expect(2, &["grant", "--agent", "demo", "--tool", "fs_write", "--match", "/a=1", "--match", "/a=2"])?;
    // The options of --remember without it are a usage error; nothing is decided.
    for alone in [["--for", "2h"], ["--scope", "run"], ["--match", "/path=*"]] {
        sandbox.expect(2, &["approve", &run, alone[0], alone[1]])?;
    }
    sandbox.expect(2, &["approve", &run, "--remember", "--for", "0s"])?;
    sandbox.expect(2, &["approve", &run, "--remember", "--match", "/path~2=x"])?;
    assert_eq!(grant_ids(&sandbox)?, Vec::<String>::new(), "nothing was made");
    let still = sandbox.expect(0, &["show", &run, "--json"])?.json()?;
    assert_eq!(still["status"], "waiting_for_approval", "nothing was decided");

    // Scope run: the grant names the run, given by a prefix.
    let prefix = &run[..run.len() - 4];
    let made = sandbox.expect(0, &["grant", "--agent", "demo", "--tool", "fs_write", "--run", prefix, "--json"])?;
    let made = made.json()?;
    assert_eq!((made["scope"].as_str(), made["run_id"].as_str()), (Some("run"), Some(run.as_str())));
    let id = made["id"].as_str().unwrap_or_default().to_owned();

    // Revoke: an unknown id or prefix is 1, named; a second revoke is a conflict, 4.
    let unknown = sandbox.expect(1, &["revoke", "0193b0c6-0000-7000-8000-000000000001"])?;
    assert!(unknown.stderr.contains("no grant has id `0193b0c6-0000-7000-8000-000000000001`"), "{unknown:?}");
    let unknown = sandbox.expect(1, &["revoke", "ffff"])?;
    assert!(unknown.stderr.contains("no grant matches `ffff`"), "{unknown:?}");
    sandbox.expect(0, &["revoke", &id[..id.len() - 3]])?;
    let again = sandbox.expect(4, &["revoke", &id])?;
    assert!(again.stderr.contains(&format!("grant {id} is already revoked")), "{again:?}");
    let none = sandbox.expect(0, &["grants"])?;
    assert!(none.stdout.is_empty() && none.stderr.contains("no active grants"), "{none:?}");
    assert_eq!(sandbox.expect(0, &["grants", "--json"])?.json()?, serde_json::json!({"grants": []}));
    Ok(())
}

/// A call policy keeps from grants (`grantable = false`) and a quorum call cannot be remembered: the
/// whole request is refused (exit 2) and nothing is recorded; a grant for such a tool is refused too.
/// With grants off, nothing is made.
#[test]
fn what_policy_keeps_from_grants_is_refused_whole() -> Result<()> {
    let script = serde_json::json!({"turns": [
        {"text": "Writing.", "tool_calls": [
            {"name": "fs_write", "arguments": {"path": "a.txt", "content": "{{input}}"}},
            {"name": "fs_delete", "arguments": {"path": "b.txt"}}]},
        {"text": "Done."}
    ]});
    let sandbox = Sandbox::with_config(
        "[[providers]]\nname = \"script\"\nkind = \"scripted\"\nscript = \"script.json\"\n\n\
         [[agents]]\nname = \"writer\"\nprovider = \"script\"\ntools = [\"fs_write\", \"fs_delete\"]\n\n\
         [[agents.policy]]\ntool = \"fs_write\"\ngate = \"ask\"\ngrantable = false\n\n\
         [[agents.policy]]\ntool = \"fs_delete\"\ngate = \"ask\"\napprovals = 2\n",
    )?;
    std::fs::write(sandbox.dir().join("script.json"), script.to_string())?;
    let run = sandbox.expect(3, &["run", "--agent", "writer", "hi"])?.waiting_id()?;
    for call in ["call_1", "call_2"] {
        let refused = sandbox.expect(2, &["approve", &run, "--call", call, "--remember"])?;
        assert!(refused.stderr.contains(call), "{refused:?}");
    }
    let refused = sandbox.expect(2, &["approve", &run, "--remember"])?;
    assert!(refused.stderr.contains("call_1"), "the first call that cannot be remembered is named: {refused:?}");
    let shown = sandbox.expect(0, &["show", &run, "--json"])?.json()?;
    let decided: Vec<&Value> =
        shown["pending"]["calls"].as_array().into_iter().flatten().map(|c| &c["decision"]).collect();
    assert_eq!(decided, [&Value::Null, &Value::Null], "nothing was recorded");
    let refused = sandbox.expect(2, &["grant", "--agent", "writer", "--tool", "fs_write"])?;
    assert!(refused.stderr.contains("not grantable"), "{refused:?}");
    assert_eq!(grant_ids(&sandbox)?, Vec::<String>::new());

    let off = Sandbox::with_config("[grants]\nenabled = false\n")?;
    let run = off.waiting_run("hello")?;
    off.expect(2, &["approve", &run, "--remember"])?;
    off.expect(2, &["grant", "--agent", "demo", "--tool", "fs_write"])?;
    assert_eq!(off.expect(0, &["show", &run, "--json"])?.json()?["status"], "waiting_for_approval");
    Ok(())
}
