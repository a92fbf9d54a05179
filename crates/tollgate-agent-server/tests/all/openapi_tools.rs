//! The committed `openapi.json` against a live server, through tools that know nothing of our code:
//! - schemathesis (PyPI) sends positive and negative data generated from the document (`--mode all`) and
//!   fails on any answer the document does not allow, or any body it declares invalid that the server
//!   accepts;
//! - openapi-python-client (PyPI) generates a client from the document, which drives start → edit +
//!   approve → completed, gets problems back as the generated `Problem`, and cancels with a `null` body
//!   (`tests/python/client_roundtrip.py`);
//! - openapi-typescript and openapi-fetch (npm) make a TypeScript client of it, checked by `tsc` with
//!   `strict` and run by node, which drives start → edit + approve → completed with a body typed as the
//!   document's `DecideRequest` (`tests/typescript/client_roundtrip.ts`).
//!
//! The PyPI tools are pinned in `.ci/python/requirements.txt` (installed by `./scripts/test` into
//! `.ci/python/venv`), the npm ones in `.ci/npm/package.json` (installed by `./scripts/test` into
//! `.ci/npm/node_modules` with `npm ci`). Without them these tests print a note and pass, unless `CI` is
//! set: then they fail.

use crate::common;
use serde_json::json;
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

/// The folder of the npm packages the TypeScript client needs (`.ci/npm/node_modules`) when they and
/// `node` are there; `None` with a note outside CI, a panic under CI.
fn typescript_tools() -> Option<PathBuf> {
    let modules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/npm/node_modules");
    let packages = [
        "openapi-typescript/bin/cli.js",
        "openapi-fetch/package.json",
        "typescript/bin/tsc",
        "@types/node/package.json",
    ];
    let mut missing: Vec<String> = packages
        .iter()
        .filter(|file| !modules.join(file).is_file())
        .map(|file| modules.join(file).display().to_string())
        .collect();
    if !Command::new("node").arg("--version").output().is_ok_and(|out| out.status.success()) {
        missing.push("`node` on PATH (Debian: apt-get install nodejs)".into());
    }
    if missing.is_empty() {
        return std::fs::canonicalize(&modules).ok();
    }
    let note = format!(
        "the TypeScript client test needs {} (./scripts/test installs the packages: npm ci --prefix .ci/npm)",
        missing.join(", ")
    );
    if std::env::var_os("CI").is_some() {
        panic!("{note}; CI runs this test");
    }
    eprintln!("skipped: {note}");
    None
}

/// `node` running `script` in `dir`.
fn node(dir: &Path, script: &Path) -> Command {
    let mut command = Command::new("node");
    command.arg(script).current_dir(dir);
    command
}

#[tokio::test(flavor = "multi_thread")]
async fn a_generated_typescript_client_starts_decides_and_completes_a_run() {
    let Some(modules) = typescript_tools() else { return };
    let server = common::Server::start(common::Config { tokens: common::tokens(), ..Default::default() }).await;
    let work = tollgate_agent_testkit::scratch_dir("typescript-client");
    let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/typescript");
    for file in ["client_roundtrip.ts", "tsconfig.json", "package.json"] {
        std::fs::copy(sources.join(file), work.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    }
    std::os::unix::fs::symlink(&modules, work.join("node_modules")).unwrap_or_else(|e| panic!("{e}"));

    // The types, from the committed document: no free-form object typed as an empty one.
    let mut generate = node(&work, &modules.join("openapi-typescript/bin/cli.js"));
    generate.arg(committed_document()).args(["--output", "schema.d.ts"]);
    run_to_success(generate, "openapi-typescript").await;
    let types = std::fs::read_to_string(work.join("schema.d.ts")).unwrap_or_else(|e| panic!("{e}"));
    // openapi-typescript writes `export type webhooks = Record<string, never>;` (and `$defs`) for the
    // document's sections it does not have; any other `Record<string, never>` is a schema no value fits.
    let empty: Vec<&str> = types
        .lines()
        .filter(|line| line.contains("Record<string, never>") && !line.trim_start().starts_with("export type "))
        .collect();
    assert!(empty.is_empty(), "objects typed as empty: {empty:#?}");
    assert!(types.contains("DecideRequest:"), "the document's DecideRequest is typed");

    // Checked strictly (`tests/typescript/tsconfig.json`), then compiled without checking again, and run.
    let tsc = modules.join("typescript/bin/tsc");
    let mut check = node(&work, &tsc);
    check.args(["--noEmit", "-p", "tsconfig.json"]);
    run_to_success(check, "tsc --noEmit").await;
    let mut compile = node(&work, &tsc);
    compile.args(["--noCheck", "-p", "tsconfig.json"]);
    run_to_success(compile, "tsc").await;
    let mut client = node(&work, Path::new("out/client_roundtrip.js"));
    client.args([server.url("").as_str(), "carol-token", common::PAIR]);
    run_to_success(client, "the TypeScript client").await;

    // The edit reached the tool: the first call ran with the client's arguments, the second as held.
    let calls: Vec<serde_json::Value> = server.tools.write.calls().into_iter().map(|(_, args)| args).collect();
    assert_eq!(calls, vec![json!({"text": "edited by the typescript client"}), json!({"text": "b"})]);
    server.stop().await;
}
