//! Local mode: the store and agents this process drives itself, from the built-in defaults.
//!
//! With no configuration (the only mode so far): the store is `sqlite://tollgate.db` in the current folder
//! (`TOLLGATE_STORE_URL` overrides it), the workspace is `./workspace` (`TOLLGATE_WORKSPACE_ROOT` overrides
//! it; relative paths are relative to the current folder), and the one agent is `demo` (DESIGN.md, "The
//! built-in demo agent"): the scripted provider replaying `demo_script()`, tools `fs_list` and `fs_write`,
//! at most 10 iterations.

use crate::exit::CliError;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tollgate_core::{LoopConfig, SystemClock, Tool, ToolLoop, ToolRegistry};
use tollgate_providers::ScriptedModel;
use tollgate_providers::scripted::demo_script;
use tollgate_runtime::{AgentSpec, OnExpiry, Runtime, RuntimeOptions, ToolInfo, UuidV7Ids};

/// The store used when nothing else is configured.
pub const DEFAULT_STORE_URL: &str = "sqlite://tollgate.db";
/// The workspace used when nothing else is configured.
pub const DEFAULT_WORKSPACE: &str = "workspace";
/// How long this process's lease on a run it drives lasts without renewal.
const LEASE: Duration = Duration::from_secs(30);
/// Why a tool has its gate when no policy decides it (`ToolInfo::why`).
const DEFAULT_GATE: &str = "default";
/// How often a command that keeps running (e.g. waiting for a run) applies deadlines again.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// The runtime of this process and what it was built from.
pub struct Local {
    /// The runtime over the store, with every agent.
    pub runtime: Runtime,
    /// The workspace root the file tools are confined to.
    pub workspace: PathBuf,
}

impl Local {
    /// Opens the store and builds the agents. A store that cannot be opened is a configuration error.
    pub async fn open() -> Result<Local, CliError> {
        let cwd =
            std::env::current_dir().map_err(|e| CliError::usage(format!("cannot read the current folder: {e}")))?;
        let url = env_or("TOLLGATE_STORE_URL", DEFAULT_STORE_URL);
        let workspace = cwd.join(env_or("TOLLGATE_WORKSPACE_ROOT", DEFAULT_WORKSPACE));
        let store = tollgate_store::open(&url)
            .await
            .map_err(|e| CliError::usage(format!("cannot open the store {}: {e}", shown_url(&url))))?;
        let demo = demo_agent(&workspace)?;
        let catalog =
            tollgate_tools::builtin_tools(&workspace).iter().map(|t| ToolInfo::of(t.as_ref(), DEFAULT_GATE)).collect();
        let options = RuntimeOptions { lease: LEASE, catalog, ..RuntimeOptions::default() };
        let runtime = Runtime::new(store, vec![demo], Arc::new(SystemClock), Arc::new(UuidV7Ids), options);
        Ok(Local { runtime, workspace })
    }

    /// Creates the workspace folder if it does not exist yet (before anything may run a tool).
    pub fn ensure_workspace(&self) -> Result<(), CliError> {
        std::fs::create_dir_all(&self.workspace)
            .map_err(|e| CliError::usage(format!("cannot create the workspace {}: {e}", self.workspace.display())))
    }

    /// While a command runs, until aborted: renews the leases of the runs this process drives (every third
    /// of the lease), and applies due deadlines and takes over abandoned runs now and then, so that waiting
    /// for a run another process abandoned does not wait forever. The caller sweeps once at the start.
    pub fn spawn_background(&self) -> tokio::task::JoinHandle<()> {
        let runtime = self.runtime.clone();
        tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            let mut renew = tokio::time::interval_at(start + LEASE / 3, LEASE / 3);
            let mut sweep = tokio::time::interval_at(start + SWEEP_EVERY, SWEEP_EVERY);
            loop {
                tokio::select! {
                    _ = renew.tick() => runtime.renew_leases().await,
                    _ = sweep.tick() => {
                        if let Err(error) = runtime.sweep().await {
                            tracing::warn!(%error, "could not apply due deadlines");
                        }
                    }
                }
            }
        })
    }
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| default.to_owned())
}

/// A store URL fit for a message: any password replaced.
fn shown_url(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, rest)), Some(at)) if at > scheme.len() => {
            let credentials = &url[scheme.len() + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{scheme}://{user}:***@{}", &url[at + 1..]),
                None => format!("{scheme}://{rest}"),
            }
        }
        _ => url.to_owned(),
    }
}

/// The built-in `demo` agent over `workspace`.
fn demo_agent(workspace: &Path) -> Result<AgentSpec, CliError> {
    let tools: Vec<Arc<dyn Tool>> =
        ["fs_list", "fs_write"].into_iter().filter_map(|name| tollgate_tools::builtin_tool(workspace, name)).collect();
    let mut registry = ToolRegistry::new();
    for tool in &tools {
        registry
            .register(Arc::clone(tool))
            .map_err(|e| CliError::usage(format!("the demo agent's tools cannot be registered: {e}")))?;
    }
    let registry = Arc::new(registry);
    let config = LoopConfig { model: "scripted".into(), max_iterations: 10, ..LoopConfig::default() };
    let agent_loop = ToolLoop::new(Arc::new(ScriptedModel::new(demo_script())), Arc::clone(&registry), config);
    let spec = AgentSpec {
        name: "demo".into(),
        model: "scripted".into(),
        agent_loop: Arc::new(agent_loop),
        // No operator policy exists yet: each tool's own gate is the effective one.
        tools: registry.iter().map(|t| ToolInfo::of(t.tool().as_ref(), DEFAULT_GATE)).collect(),
        approval_ttl: None,
        on_expiry: OnExpiry::Deny,
        forbid_self_approval: false,
    };
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(shown_url("postgres://bob:hunter2@db:5432/t"), "postgres://bob:***@db:5432/t");
        assert_eq!(shown_url("postgres://bob@db/t"), "postgres://bob@db/t");
        assert_eq!(shown_url("sqlite://tollgate.db"), "sqlite://tollgate.db");
    }
}
