//! Attack (issue 31, item 10): `tollgate edit` into arguments the operator's policy forbids exited 0, the
//! edit was recorded as the approver's, the call then did not run, and nothing said the edit was refused.
//! Now the edit is refused before anything is recorded — exit 2, naming the policy — in local mode and
//! through a server; the held call still waits, and the process's log (the CLI's stderr, the server's
//! log) says the decision was refused and why.

use anyhow::{Result, bail};
use std::path::{Path, PathBuf};
use std::process::Child;
use tollgate_agent_testkit::scratch_dir;

use crate::support::{Outcome, tollgate_in};

const FORBIDDEN: &str = r#"{"path": "keep/secret.txt", "content": "overwritten"}"#;

/// A folder with a writer agent whose policy forbids `fs_write` under `keep/`.
fn folder() -> Result<PathBuf> {
    let dir = scratch_dir("refused-edit");
    std::fs::write(
        dir.join("script.json"),
        r#"{"turns": [{"tool_calls": [{"name": "fs_write", "arguments": {"path": "note.txt", "content": "{{input}}"}}]},
                      {"text": "Saved.", "when_denied": {"text": "Not saved."}}]}"#,
    )?;
    std::fs::write(
        dir.join("tollgate.toml"),
        "[[providers]]\nname = \"script\"\nkind = \"scripted\"\nscript = \"script.json\"\n\n\
         [[agents]]\nname = \"writer\"\nprovider = \"script\"\ntools = [\"fs_write\"]\n\n\
         [[agents.policy]]\ntool = \"fs_write\"\nwhen = { \"/path\" = \"keep/**\" }\ngate = \"forbid\"\n",
    )?;
    Ok(dir)
}

fn expect(dir: &Path, code: i32, args: &[&str]) -> Result<Outcome> {
    let out = tollgate_in(dir, args, &[])?;
    if out.code != code {
        bail!("`tollgate {}` exited {} instead of {code}: {out:?}", args.join(" "), out.code);
    }
    Ok(out)
}

/// The run still waits on its held call, with no decision recorded anywhere in its log.
fn assert_still_waiting(dir: &Path, id: &str) -> Result<()> {
    let shown = expect(dir, 0, &["--json", "show", id, "--events"])?.json()?;
    assert_eq!(shown["status"], "waiting_for_approval", "{shown}");
    assert!(shown["pending"]["calls"][0]["decision"].is_null(), "{shown}");
    let kinds: Vec<&str> =
        shown["events"].as_array().into_iter().flatten().filter_map(|e| e["kind"].as_str()).collect();
    assert!(!kinds.contains(&"decision"), "nothing was recorded: {kinds:?}");
    assert!(!dir.join("workspace/keep/secret.txt").exists());
    Ok(())
}

#[test]
fn an_edit_into_forbidden_arguments_is_refused_locally() -> Result<()> {
    let dir = folder()?;
    let id = expect(&dir, 3, &["run", "hello"])?.waiting_id()?;
    let refused = expect(&dir, 2, &["edit", &id, "--call", "call_1", "--args", FORBIDDEN])?;
    assert!(
        refused.stderr.contains("policy forbids fs_write with them, so the edit is refused"),
        "the person is told why: {refused:?}"
    );
    assert!(refused.stderr.contains("decision refused") && refused.stderr.contains("actor=local"), "{refused:?}");
    assert_still_waiting(&dir, &id)?;

    // A schema-invalid edit is refused the same way; an allowed edit then goes through.
    expect(&dir, 2, &["edit", &id, "--call", "call_1", "--args", r#"{"path": 7}"#])?;
    let edited = expect(&dir, 0, &["edit", &id, "--call", "call_1", "--args", r#"{"path": "n.txt", "content": "x"}"#])?;
    assert_eq!(edited.stdout, "Saved.\n");
    assert_eq!(std::fs::read_to_string(dir.join("workspace/n.txt"))?, "x");
    Ok(())
}

/// A `tollgate serve` over a folder, its log kept in `serve.log`; stopped when dropped.
struct Served {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Served {
    fn start(dir: &Path) -> Result<Served> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log = dir.join("serve.log");
        let child =
            crate::support::serve_in(dir, &format!("127.0.0.1:{port}")).stderr(std::fs::File::create(&log)?).spawn()?;
        let served = Served { child, url: format!("http://127.0.0.1:{port}"), log };
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(served);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        bail!("the server never listened on port {port}")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_edit_into_forbidden_arguments_is_refused_through_a_server() -> Result<()> {
    let dir = folder()?;
    let served = Served::start(&dir)?;
    let client = scratch_dir("refused-edit-client");
    let remote = |code, args: &[&str]| {
        let mut all = vec!["--server", served.url.as_str()];
        all.extend_from_slice(args);
        expect(&client, code, &all)
    };
    let id = remote(3, &["run", "hello"])?.waiting_id()?;
    let refused = remote(2, &["edit", &id, "--call", "call_1", "--args", FORBIDDEN])?;
    assert!(refused.stderr.contains("policy forbids fs_write with them, so the edit is refused"), "{refused:?}");
    assert_still_waiting(&dir, &id)?;
    let log = std::fs::read_to_string(&served.log)?;
    assert!(
        log.lines().any(|l| l.contains("decision refused") && l.contains(&id) && l.contains("policy forbids fs_write")),
        "the server's log says so: {log}"
    );
    let edited = remote(0, &["edit", &id, "--call", "call_1", "--args", r#"{"path": "n.txt", "content": "x"}"#])?;
    assert_eq!(edited.stdout, "Saved.\n");
    Ok(())
}
