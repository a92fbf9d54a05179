//! The committed `openapi.json` against a live server, through two tools that know nothing of our code
//! (PyPI, pinned in `.ci/python/requirements.txt`, installed by `./scripts/test` into `.ci/python/venv`):
//! - schemathesis sends positive and negative data generated from the document (`--mode all`) and fails on
//!   any answer the document does not allow, or any body it declares invalid that the server accepts;
//! - openapi-python-client generates a client from the document, which drives start → edit + approve →
//!   completed, and a cancel with a `null` body (`tests/python/client_roundtrip.py`).
//!
//! Without the Python tools these tests print a note and pass, unless `CI` is set: then they fail.

use crate::common;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The documented false positives: `tests/python/schemathesis.toml` lets POST /v1/runs/{id}/decisions
/// answer 422 to schema-valid bodies that do not fit the held turn (a `call_id` given twice or unknown,
/// a call that takes no decision, edited arguments failing the tool's schema), which depend on the run's
/// state and which JSON Schema cannot state. docs/api.md, "The OpenAPI document", lists the same.
fn schemathesis_config() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/schemathesis.toml")
}

/// The Python of the venv holding schemathesis and openapi-python-client ([`common::python`]).
fn python() -> Option<PathBuf> {
    common::python(&["schemathesis", "openapi_python_client"])
}

fn committed_document() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json")
}

/// Runs `command` off the async runtime (the server under test answers meanwhile) and fails with its
/// output unless it succeeded.
async fn run_to_success(mut command: Command, what: &str) {
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed ({}):\n{text}", out.status);
}

#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_the_server_and_the_document_agree() {
    let Some(python) = python() else { return };
    // Auth on, so the document's `security` is checked too (a request without the token must be 401).
    let server = common::Server::start(common::Config { tokens: common::tokens(), ..Default::default() }).await;
    let bin = python.parent().map(|dir| dir.join("st")).unwrap_or_else(|| PathBuf::from("st"));
    let reports = tollgate_agent_testkit::scratch_dir("schemathesis");
    let mut command = Command::new(bin);
    command
        .arg("--config-file")
        .arg(schemathesis_config())
        .arg("run")
        .arg(committed_document())
        .args(["--url", &server.url("")])
        .args(["--header", "Authorization: Bearer root-token"])
        .args(["--mode", "all", "--max-examples", "20", "--seed", "20261129", "--generation-deterministic"])
        .args(["--checks", "all", "--workers", "1", "--request-timeout", "10", "--no-color"])
        .args(["--report-dir"])
        .arg(&reports)
        .current_dir(&reports);
    run_to_success(command, "schemathesis").await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_generated_python_client_starts_decides_and_completes_a_run() {
    let Some(python) = python() else { return };
    let server = common::Server::start(common::Config { tokens: common::tokens(), ..Default::default() }).await;
    let work = tollgate_agent_testkit::scratch_dir("python-client");
    let mut command = Command::new(python);
    command
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/client_roundtrip.py"))
        .arg(committed_document())
        .arg(&work)
        .arg(server.url(""))
        .args(["carol-token", common::PAIR]);
    run_to_success(command, "the generated Python client").await;
    server.stop().await;
}
