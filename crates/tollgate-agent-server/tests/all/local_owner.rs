//! Local mode has an owner: with no tokens, the server's `/v1` routes and `/metrics` answer only the OS
//! user who runs it. Through a real socket: the owner's plain requests act as `local`; `curl` run as
//! `nobody` (uid 65534, by util-linux's `setpriv`) gets 403 `forbidden` naming both users and changes
//! nothing, while the health endpoints, the OpenAPI document and the playground stay open to it.
//!
//! Switching users needs root, `setpriv` and `curl`: without them the second-user part prints a note and
//! passes, unless `CI` is set (CI runs as root): then it fails.

use crate::common::{Config, SCRIBE, Server, digest, id};
use serde_json::{Value, json};
use std::process::Command;

const NOBODY: &str = "65534";

/// Whether this test can run a command as `nobody`: `None` when it can, else why not.
fn cannot_switch_users() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("the tests do not run as root, so they cannot run a client as another user".into());
    }
    for tool in ["setpriv", "curl"] {
        let found = Command::new(tool).arg("--version").output().is_ok_and(|out| out.status.success());
        if !found {
            return Some(format!("`{tool}` is not on PATH (Debian: apt-get install util-linux curl)"));
        }
    }
    None
}

/// `METHOD url` with an optional JSON body, sent by `curl` running as uid and gid 65534 with no
/// supplementary groups; the status and the body (JSON when it parses).
async fn as_nobody(method: &str, url: String, body: Option<Value>) -> (u16, Value) {
    let mut command = Command::new("setpriv");
    command.args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", "curl", "-sS", "-X", method]).args([
        "-o",
        "-",
        "-w",
        "\n%{http_code}",
    ]);
    if let Some(body) = body {
        command.args(["-H", "content-type: application/json", "--data-binary", &body.to_string()]);
    }
    command.arg(url);
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("cannot run setpriv: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "curl as nobody failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    let (body, status) = text.rsplit_once('\n').unwrap_or_else(|| panic!("no status line: {text}"));
    let status = status.trim().parse().unwrap_or_else(|e| panic!("status `{status}`: {e}"));
    (status, serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned())))
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_user_who_started_the_server_may_use_it_without_tokens() {
    let server = Server::start(Config::default()).await;
    let owner = rustix::process::geteuid().as_raw();

    // The owner's v1 clients work unchanged: no token, actor `local`.
    let run = server.waiting_run(SCRIBE, "from the owner").await;
    assert_eq!(run["created_by"], "local", "{run}");
    assert_eq!(server.get("/metrics").await.status, 200);

    if let Some(why) = cannot_switch_users() {
        assert!(std::env::var_os("CI").is_none(), "{why}; CI runs this test as root");
        eprintln!("skipped the second user: {why}");
        server.stop().await;
        return;
    }
    let before = server.run_count().await;
    let decide = format!("/v1/runs/{}/decisions", id(&run));
    let approve = json!({"turn_digest": digest(&run), "approve_all": true, "wait": true});
    let refused = [
        ("GET", "/v1/runs".to_owned(), None),
        ("GET", format!("/v1/runs/{}", id(&run)), None),
        ("GET", format!("/v1/runs/{}/events", id(&run)), None),
        ("POST", "/v1/runs".to_owned(), Some(json!({"agent": SCRIBE, "input": "from nobody", "wait": true}))),
        ("POST", decide, Some(approve)),
        ("POST", format!("/v1/runs/{}/cancel", id(&run)), None),
        ("POST", "/v1/purge".to_owned(), None),
        ("GET", "/v1/agents".to_owned(), None),
        ("GET", "/v1/tools".to_owned(), None),
        ("GET", "/metrics".to_owned(), None),
    ];
    for (method, path, body) in refused {
        let (status, problem) = as_nobody(method, server.url(&path), body).await;
        assert_eq!(status, 403, "{method} {path} as nobody: {problem}");
        assert_eq!(problem["type"], "https://tollgate.dev/problems/forbidden", "{problem}");
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("no tokens configured")
                && detail.contains(&format!("(uid {owner})"))
                && detail.contains(&format!("from uid {NOBODY}")),
            "the answer says why: {detail}"
        );
    }
    // Nothing the other user sent took effect: no run started, the held call still waits.
    assert_eq!(server.run_count().await, before);
    assert_eq!(server.get(&format!("/v1/runs/{}", id(&run))).await.body["status"], "waiting_for_approval");

    // Health, the document and the playground's files are open to every local user, as before.
    for path in ["/healthz", "/readyz", "/openapi.json", "/"] {
        let (status, body) = as_nobody("GET", server.url(path), None).await;
        assert_eq!(status, 200, "GET {path} as nobody: {body}");
    }

    // The owner still decides.
    assert_eq!(server.approve_and_wait(&run).await.body["status"], "completed");
    server.stop().await;
}
