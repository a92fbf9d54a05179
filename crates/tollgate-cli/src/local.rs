//! Local mode: the store and agents this process drives itself, assembled from the configuration, and
//! the operations the commands need ([`crate::backend::Backend`]) done through the [`Runtime`].
//!
//! The configuration comes from `--config FILE`, else `TOLLGATE_CONFIG`, else `./tollgate.toml`, else the
//! built-in defaults (docs/configuration.md): the store `sqlite://tollgate.db` in the current folder, the workspace
//! `./workspace`, and the built-in `demo` agent (docs/design.md). `TOLLGATE_<SECTION>_<KEY>` overrides any key.

use crate::backend::{GrantFilter, GrantsPage};
use crate::exit::CliError;
use crate::exit::DecisionRefused;
use crate::view::{GrantView, RunView};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tollgate_agent_app::App;
use tollgate_agent_config::{Config, ConfigLoader, StoreBackend, StoreConfig};
use tollgate_agent_core::{
    Actor, CallId, ChainBreak, Clock, Decision, GrantId, GrantQuery, GrantRecord, RunId, RunQuery, RunRecord,
    RunStatus, StoredEvent, SystemClock, TraceContext,
};
use tollgate_agent_runtime::decide::RememberSpec;
use tollgate_agent_runtime::{
    DecideError as Refused, DecisionSet, GrantError, LiveDelta, LiveText, Maintenance, NewGrant, RunDeltas, RunNotice,
    Runtime, Schedule, StartRun, wire,
};

/// The actor recorded on events for everything done from this command line in local mode (docs/api.md: with
/// no tokens, every caller is `local`). Through a server, the actor is the name of the token.
pub const ACTOR: &str = "local";

/// How long to wait for a notice before looking at the store anyway, where the store does not announce
/// other processes' commits (another process may drive the run).
const LOOK_AGAIN: Duration = Duration::from_millis(500);

/// The runtime of this process and what it was built from.
pub struct Local {
    /// The runtime over the store, with every agent.
    pub runtime: Runtime,
    /// The workspace root the file tools are confined to.
    pub workspace: PathBuf,
    /// The configuration in force.
    pub config: Config,
    pub(crate) app: App,
    /// [`ACTOR`], as the runtime takes it.
    actor: Actor,
    /// The model's live text, subscribed to before the last run was started (so its first model call's
    /// text is not missed), for the watch of that run.
    early_text: std::sync::Mutex<Option<broadcast::Receiver<Arc<LiveDelta>>>>,
}

/// What a command does with the store, which decides whether a missing SQLite file is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreUse {
    /// It may add to the store (`run`, `grant`, `serve`): a missing SQLite file is created.
    Create,
    /// It reads, or changes only what is there already ([`crate::args::Command::needs_existing_store`]):
    /// a missing SQLite file stays missing, and the command works on an empty store in memory instead,
    /// so it answers as it would on an empty file (`no runs`, `no run matches …`) and leaves the folder
    /// as it was.
    Existing,
}

impl Local {
    /// Loads the configuration (`--config`, `TOLLGATE_CONFIG`, `./tollgate.toml`, or the built-in defaults),
    /// opens the store (as `store_use` says) and builds the agents. Any problem is a configuration error
    /// (exit 2).
    pub async fn open(config_file: Option<&Path>, store_use: StoreUse) -> Result<Local, CliError> {
        let mut config = ConfigLoader::from_process()
            .map_err(|e| CliError::usage(e.to_string()))?
            .with_file(config_file.map(Path::to_path_buf))
            .load()
            .map_err(|e| CliError::usage(e.to_string()))?;
        if store_use == StoreUse::Existing && names_missing_file(&config.store) {
            config.store = StoreConfig {
                url: IN_MEMORY.to_owned(),
                backend: StoreBackend::SqliteInMemory,
                connect_timeout: config.store.connect_timeout,
            };
        }
        crate::install_redactor(tollgate_agent_app::redactor(&config));
        let app = App::build(config.clone()).await.map_err(|e| CliError::usage(e.to_string()))?;
        Ok(Local {
            runtime: app.runtime.clone(),
            workspace: app.workspace.clone(),
            config,
            app,
            actor: Actor::new(ACTOR),
            early_text: std::sync::Mutex::new(None),
        })
    }

    /// The actor everything done from this command line is recorded as: [`ACTOR`].
    pub fn actor(&self) -> &Actor {
        &self.actor
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

    /// While a command runs, until the handle is stopped: the runtime's maintenance scheduler with the
    /// command line's schedule ([`Schedule::command_line`]) renews the leases of the runs this process
    /// drives, and applies due deadlines and takes over abandoned runs now and then, so that waiting for
    /// a run another process abandoned does not wait forever. The caller sweeps once at the start.
    pub fn spawn_maintenance(&self) -> Maintenance {
        self.runtime.spawn_maintenance(Schedule::command_line())
    }
}

/// The store a command that needs an existing one works on when the configured SQLite file is missing.
const IN_MEMORY: &str = "sqlite::memory:";

/// Whether `store` is a SQLite file that does not exist (yet). A path that cannot be looked at (a folder
/// without search permission) counts as present: opening it says what is wrong.
fn names_missing_file(store: &StoreConfig) -> bool {
    match &store.backend {
        StoreBackend::Sqlite { path } => matches!(path.try_exists(), Ok(false)),
        StoreBackend::SqliteInMemory | StoreBackend::Postgres => false,
    }
}

/// The view of a stored run.
fn view(run: &RunRecord) -> Result<RunView, CliError> {
    RunView::from_record(run).map_err(CliError::failed)
}

/// The view of a stored grant, as the API answers it.
fn grant_view(grant: &GrantRecord) -> Result<GrantView, CliError> {
    GrantView::from_wire(wire::grant(grant)).map_err(CliError::failed)
}

/// Grants are listed in pages of this size (the API's largest `limit`).
const GRANT_PAGE: u32 = 500;

/// The operations of [`crate::backend::Backend`], on this process's runtime. Everything is recorded with
/// the actor [`ACTOR`].
impl Local {
    /// Starts a run, driven in this process (inside the caller's trace `trace_parent`, if any); returns
    /// it as created.
    pub async fn start(
        &self,
        agent: Option<&str>,
        input: &str,
        metadata: serde_json::Map<String, Value>,
        trace_parent: Option<TraceContext>,
    ) -> Result<RunView, CliError> {
        self.ensure_workspace()?;
        *self.early_text.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(self.runtime.deltas());
        let request = StartRun { agent, input, actor: self.actor.clone(), metadata, trace_parent };
        view(&self.runtime.start(request).await?)
    }

    /// Reads one run.
    pub async fn get(&self, id: &RunId) -> Result<RunView, CliError> {
        view(&self.runtime.get(id).await?)
    }

    /// The full id of the one run whose id starts with `prefix` (the store looks it up by index).
    pub async fn resolve(&self, prefix: &str) -> Result<RunId, CliError> {
        Ok(self.runtime.resolve(prefix).await?)
    }

    /// Waits until run `id` waits for approval or has ended.
    pub async fn wait_settled(&self, id: &RunId) -> Result<RunView, CliError> {
        view(&self.runtime.wait_settled(id).await?)
    }

    /// Lists runs, newest first (one page).
    pub async fn list(
        &self,
        status: Option<RunStatus>,
        agent: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RunView>, CliError> {
        let query = RunQuery { status, agent: agent.map(str::to_owned), limit, cursor: None };
        self.runtime.list(query).await?.runs.iter().map(view).collect()
    }

    /// A run's events after seq `after`.
    pub async fn events(&self, id: &RunId, after: u64) -> Result<Vec<StoredEvent>, CliError> {
        Ok(self.runtime.all_events(id, after).await?)
    }

    /// Records decisions for the held turn of `run` (as read just before), naming its turn digest, with
    /// the grants `remember` asks for.
    pub async fn decide(
        &self,
        run: &RunView,
        set: &DecisionSet,
        remember: &[(CallId, RememberSpec)],
    ) -> Result<RunView, DecisionRefused> {
        self.ensure_workspace().map_err(DecisionRefused::Failed)?;
        let digest = run.pending.as_ref().map(|p| p.turn_digest.clone()).unwrap_or_default();
        match self.runtime.decide_remembering(&run.id, &digest, set.clone(), &self.actor, remember).await {
            Ok(next) => view(&next).map_err(DecisionRefused::Failed),
            Err(error) => Err(match &error {
                Refused::NotWaiting { .. }
                | Refused::StaleDigest { .. }
                | Refused::AlreadyDecided { .. }
                | Refused::NothingToDecide
                | Refused::CorruptSuspension { .. }
                | Refused::LostRace { .. } => DecisionRefused::Conflict(error.to_string()),
                Refused::Vote(refused) if refused.is_conflict() => DecisionRefused::Conflict(error.to_string()),
                Refused::Invalid(_) | Refused::Vote(_) | Refused::NoDecisions | Refused::DecidedTwice { .. } => {
                    DecisionRefused::Invalid(error.into())
                }
                Refused::SelfApprovalForbidden { .. } => DecisionRefused::Forbidden(error.into()),
                Refused::Remember { refused: GrantError::Disabled, .. } => DecisionRefused::Forbidden(error.into()),
                Refused::Remember { refused: GrantError::Store(_), .. } => DecisionRefused::Failed(error.into()),
                Refused::Remember { .. } => DecisionRefused::Invalid(error.into()),
                Refused::NotFound(_) | Refused::UnknownAgent(_) | Refused::Store(_) => {
                    DecisionRefused::Failed(error.into())
                }
            }),
        }
    }

    /// Cancels a run that has not finished.
    pub async fn cancel(&self, id: &RunId, reason: Option<&str>) -> Result<RunView, CliError> {
        view(&self.runtime.cancel(id, &self.actor, reason).await?)
    }

    /// Applies retention now: terminal runs older than `older_than` (else the configured window) and
    /// waiting runs past the configured window go. Returns how many went.
    pub async fn purge(&self, older_than: Option<Duration>) -> Result<u64, CliError> {
        let retention = &self.config.retention;
        let terminal_after = older_than.unwrap_or(retention.terminal_after);
        Ok(self.runtime.apply_retention(terminal_after, retention.waiting_after).await?)
    }

    /// As `GET /v1/tools`: with an agent, its tools and their effective gates (a tool whose every call
    /// an active grant of the agent allows shows `allow` and why `grant ID`, as the server's handler
    /// does); without, every tool this process knows with its own default gate.
    pub async fn tools(&self, agent: Option<&str>) -> Result<Vec<Value>, CliError> {
        let to_json = |tool: tollgate_agent_protocol::Tool| {
            serde_json::to_value(tool).map_err(|e| CliError::failed(format!("cannot list tools: {e}")))
        };
        let Some(name) = agent else { return self.runtime.catalog().iter().map(wire::tool).map(to_json).collect() };
        let Some(tools) = self.runtime.effective_tools(name).await? else {
            let known: Vec<&str> = self.runtime.agents().map(|a| a.name.as_str()).collect();
            return Err(CliError::usage(format!("unknown agent `{name}`; known agents: {}", known.join(", "))));
        };
        tools.iter().map(wire::tool).map(to_json).collect()
    }

    /// Makes a grant as [`ACTOR`] (and with `apply_to_waiting` approves the waiting runs it clears,
    /// driven in this process).
    pub async fn create_grant(&self, new: NewGrant) -> Result<GrantView, CliError> {
        if new.apply_to_waiting {
            self.ensure_workspace()?;
        }
        let made = self.runtime.create_grant(new, &self.actor).await?;
        let mut grant = wire::grant(&made.grant);
        grant.applied_to = made.applied_to;
        GrantView::from_wire(grant).map_err(CliError::failed)
    }

    /// One page of grants, newest first.
    pub async fn grants(&self, filter: GrantFilter<'_>, cursor: Option<&str>) -> Result<GrantsPage, CliError> {
        let query = GrantQuery {
            agent: filter.agent.map(str::to_owned),
            tool: filter.tool.map(str::to_owned),
            active_at: filter.active.then(|| SystemClock.now()),
            limit: GRANT_PAGE,
            cursor: cursor.map(str::to_owned),
        };
        let page = self.runtime.list_grants(query).await?;
        let grants = page.grants.iter().map(grant_view).collect::<Result<_, _>>()?;
        Ok(GrantsPage { grants, next_cursor: page.next_cursor })
    }

    /// One grant.
    pub async fn grant(&self, id: &GrantId) -> Result<GrantView, CliError> {
        let grant = self.runtime.grant(id).await.map_err(|e| crate::exit::grant_store_error(&e))?;
        grant_view(&grant)
    }

    /// Revokes an active grant as [`ACTOR`].
    pub async fn revoke_grant(&self, id: &GrantId) -> Result<GrantView, CliError> {
        let revoked =
            self.runtime.revoke_grant(id, &self.actor).await.map_err(|e| crate::exit::grant_store_error(&e))?;
        grant_view(&revoked)
    }

    /// Checks run `id`'s hash chain against its recorded head: the number of events when it is intact,
    /// else where it breaks.
    pub async fn verify(&self, id: &RunId) -> Result<Result<u64, ChainBreak>, CliError> {
        Ok(self.runtime.verify(id).await?)
    }

    /// A watch on run `id`'s changes in this process.
    pub fn watch(&self, id: &RunId) -> LocalWatch {
        let early = self.early_text.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        LocalWatch {
            notices: self.runtime.subscribe(),
            deltas: RunDeltas::new(early.unwrap_or_else(|| self.runtime.deltas()), id),
            text: Vec::new(),
            run_id: id.clone(),
            runtime: self.runtime.clone(),
        }
    }

    /// Whether this command line (the actor [`ACTOR`]) may decide `run`, as the runtime rules it.
    pub fn may_decide(&self, run: &RunView) -> Result<(), String> {
        self.runtime.check_decider(&run.agent, &run.created_by, &self.actor).map_err(|error| match error {
            Refused::UnknownAgent(agent) => {
                format!("run {} belongs to agent `{agent}`, which this configuration does not have", run.id)
            }
            other => other.to_string(),
        })
    }

    /// Checks a decision against the held turn of run `run_id` as the runtime would (the call takes a
    /// decision, edited arguments pass the tool's checks), before it is sent.
    pub async fn check_decision(&self, run_id: &RunId, call_id: &CallId, decision: &Decision) -> Result<(), String> {
        self.runtime.check_decision(run_id, call_id, decision).await.map_err(|e| e.to_string())
    }
}

/// Notices of one run's changes: committed in this process, or announced by other processes where the
/// store announces them (PostgreSQL with its listener connected).
pub struct LocalWatch {
    notices: broadcast::Receiver<RunNotice>,
    /// The run's live text.
    deltas: RunDeltas,
    /// This run's live text received and not taken yet.
    text: Vec<(u32, LiveText)>,
    run_id: RunId,
    runtime: Runtime,
}

impl LocalWatch {
    /// Waits until the run changes (true), or live text of its model came (false; see
    /// [`take_text`](Self::take_text)). Where the store does not announce other processes' commits
    /// (SQLite, or PostgreSQL while its listener is down), also until a moment passes: another process
    /// may drive the run. With announcements, a notice alone ends the wait (no polling).
    pub async fn changed(&mut self) -> bool {
        let LocalWatch { notices, deltas, text, run_id, runtime } = self;
        tokio::select! {
            _ = runtime.wait_for_run(notices, run_id, 0, LOOK_AGAIN) => true,
            delta = deltas.next() => {
                text.push((delta.round, delta.text.clone()));
                false
            }
        }
    }

    /// The live text received since the last call, by round.
    pub fn take_text(&mut self) -> Vec<(u32, LiveText)> {
        std::mem::take(&mut self.text)
    }
}
