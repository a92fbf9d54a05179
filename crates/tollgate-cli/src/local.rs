//! Local mode: the store and agents this process drives itself, assembled from the configuration.
//!
//! The configuration comes from `--config FILE`, else `TOLLGATE_CONFIG`, else `./tollgate.toml`, else the
//! built-in defaults (CONFIG.md): the store `sqlite://tollgate.db` in the current folder, the workspace
//! `./workspace`, and the built-in `demo` agent (DESIGN.md). `TOLLGATE_<SECTION>_<KEY>` overrides any key.

use crate::exit::CliError;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tollgate_app::App;
use tollgate_config::{Config, ConfigLoader};
use tollgate_runtime::Runtime;

/// How often a command that keeps running (e.g. waiting for a run) applies deadlines again.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// The runtime of this process and what it was built from.
pub struct Local {
    /// The runtime over the store, with every agent.
    pub runtime: Runtime,
    /// The workspace root the file tools are confined to.
    pub workspace: PathBuf,
    /// The configuration in force.
    pub config: Config,
    app: App,
}

impl Local {
    /// Loads the configuration (`--config`, `TOLLGATE_CONFIG`, `./tollgate.toml`, or the built-in defaults),
    /// opens the store and builds the agents. Any problem is a configuration error (exit 2).
    pub async fn open(config_file: Option<&Path>) -> Result<Local, CliError> {
        let config = ConfigLoader::from_process()
            .map_err(|e| CliError::usage(e.to_string()))?
            .with_file(config_file.map(Path::to_path_buf))
            .load()
            .map_err(|e| CliError::usage(e.to_string()))?;
        let app = App::build(config.clone()).await.map_err(|e| CliError::usage(e.to_string()))?;
        Ok(Local { runtime: app.runtime.clone(), workspace: app.workspace.clone(), config, app })
    }

    /// Stops what the process started (MCP servers).
    pub async fn shutdown(&self) {
        self.app.shutdown().await;
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
        let runtime_lease = self.config.server.lease.max(Duration::from_secs(3));
        tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            let third = runtime_lease / 3;
            let mut renew = tokio::time::interval_at(start + third, third);
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
