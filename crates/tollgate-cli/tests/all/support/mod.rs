//! What the CLI's integration tests share: the outcome of one invocation of the real binary.

#![allow(dead_code)] // Each test file uses the part it needs.

use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

/// What one invocation of the binary gave back.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    pub(crate) fn json(&self) -> Result<Value> {
        serde_json::from_str(&self.stdout).with_context(|| format!("stdout is not JSON: {self:?}"))
    }

    /// The run id of the waiting line `run ID is waiting for approval`.
    pub(crate) fn waiting_id(&self) -> Result<String> {
        let line = self
            .stdout
            .lines()
            .find(|l| l.ends_with(" is waiting for approval"))
            .ok_or_else(|| anyhow!("no waiting line in {self:?}"))?;
        let id = line.trim_start_matches("run ").trim_end_matches(" is waiting for approval");
        if !is_uuid_v7(id) {
            bail!("`{id}` is not a UUIDv7");
        }
        Ok(id.to_owned())
    }
}

pub(crate) fn is_uuid_v7(id: &str) -> bool {
    let groups: Vec<&str> = id.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && id.chars().all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c))
        && groups[2].starts_with('7')
}

/// The real `tollgate` binary in `dir`, stdin not a terminal, with none of the ambient `TOLLGATE_*`
/// variables that would point it elsewhere (nor a `TRACEPARENT`), plus `env`.
pub(crate) fn tollgate_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<Outcome> {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .env_remove("TOLLGATE_STORE_URL")
        .env_remove("TOLLGATE_WORKSPACE_ROOT")
        .env_remove("TOLLGATE_CONFIG")
        .env_remove("TOLLGATE_TOKEN")
        .env_remove("TRACEPARENT")
        .envs(env.iter().copied())
        .output()
        .context("cannot start tollgate")?;
    Ok(Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout)?,
        stderr: String::from_utf8(output.stderr)?,
    })
}

/// `tollgate serve --addr ADDR` in `dir`, stdin not a terminal, its output discarded, with none of the
/// ambient `TOLLGATE_*` variables that would point it elsewhere; spawn it (after any change).
pub(crate) fn serve_in(dir: &Path, addr: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command
        .args(["serve", "--addr", addr])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .env_remove("TOLLGATE_STORE_URL")
        .env_remove("TOLLGATE_WORKSPACE_ROOT")
        .env_remove("TOLLGATE_CONFIG")
        .env_remove("TOLLGATE_TOKEN")
        .env_remove("TRACEPARENT");
    command
}

/// `tollgate --config CONFIG --json doctor` in `dir`: its report.
pub(crate) fn doctor_report(dir: &Path, config: &Path) -> Result<Value> {
    let doctor = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("--config")
        .arg(config)
        .args(["--json", "doctor"])
        .current_dir(dir)
        .env_remove("TOLLGATE_STORE_URL")
        .env_remove("TOLLGATE_CONFIG")
        .output()
        .context("cannot run tollgate doctor")?;
    serde_json::from_slice(&doctor.stdout)
        .with_context(|| format!("doctor's stdout is not JSON: {}", String::from_utf8_lossy(&doctor.stderr)))
}

/// Held by the tests that load the machine most — real servers under traffic with a database or a disk
/// failing under them, and the soak — so that no two of them run at once on a small CI machine: each
/// bounds how long an answer may take, and two at once on two cores starved each other's servers.
pub(crate) static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
