//! Assembling a [`Tollgate`]: the store, the agents, their models and tools.

use crate::{BuildError, Tollgate};
use std::sync::Arc;
use std::time::Duration;
use tollgate_agent_core::scripted::{Script, ScriptedModel};
use tollgate_agent_core::{
    LoopConfig, ModelClient, Redactor, RegistryError, SystemClock, Tool, ToolLoop, ToolRegistry,
};
use tollgate_agent_runtime::{
    AgentSpec, EscalationRule, OnExpiry, PrivacyLevel, Retention, Runtime, RuntimeOptions, Schedule, ToolInfo,
    UuidV7Ids,
};

/// The store a builder opens when none is named: `tollgate.db` in the current folder, as the CLI does.
pub const DEFAULT_STORE: &str = "sqlite://tollgate.db";

/// A model for an agent: the client that talks to a provider and the model name it is asked for.
#[derive(Clone)]
pub struct Model {
    client: Result<Arc<dyn ModelClient>, String>,
    name: String,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("name", &self.name).field("ready", &self.client.is_ok()).finish()
    }
}

impl Model {
    /// Any [`ModelClient`] of your own, asked for the model `name`.
    pub fn custom(client: impl ModelClient + 'static, name: impl Into<String>) -> Self {
        Self { client: Ok(Arc::new(client)), name: name.into() }
    }

    /// A model that plays a script of responses: for tests, demos and benchmarks, with no network.
    /// See [`Script`] for the format.
    ///
    /// ```
    /// use tollgate::{Agent, Model, Script};
    /// let script = Script::from_value(serde_json::json!({"turns": [
    ///     {"text": "Hello, {{input}}."}
    /// ]}))?;
    /// let agent = Agent::new("greeter").model(Model::scripted(script));
    /// # let _ = agent;
    /// # Ok::<(), tollgate::ScriptError>(())
    /// ```
    pub fn scripted(script: Script) -> Self {
        Self { client: Ok(Arc::new(ScriptedModel::new(script))), name: "scripted".into() }
    }

    /// A scripted model from the script's JSON text ([`Script`]); an invalid script fails
    /// [`Builder::build`] with [`AgentError::Model`] saying what is wrong.
    pub fn scripted_json(json: &str) -> Self {
        match Script::from_json(json) {
            Ok(script) => Self::scripted(script),
            Err(error) => Self { client: Err(error.to_string()), name: "scripted".into() },
        }
    }

    /// An OpenAI-compatible Chat Completions model (OpenAI, Ollama, vLLM, OpenRouter, ...) with default
    /// settings: the API key from `OPENAI_API_KEY`, the base URL from `OPENAI_BASE_URL` or OpenAI's.
    #[cfg(feature = "openai")]
    pub fn openai(name: impl Into<String>) -> Self {
        Self::openai_with(settings_from_env("OPENAI"), name)
    }

    /// An OpenAI-compatible model with explicit settings (base URL, key, timeout, retries).
    #[cfg(feature = "openai")]
    pub fn openai_with(settings: crate::providers::ProviderSettings, name: impl Into<String>) -> Self {
        Self::http(crate::providers::OpenAiModel::new(settings), name.into())
    }

    /// An Anthropic Messages model with default settings: the API key from `ANTHROPIC_API_KEY`, the base
    /// URL from `ANTHROPIC_BASE_URL` or Anthropic's.
    #[cfg(feature = "anthropic")]
    pub fn anthropic(name: impl Into<String>) -> Self {
        Self::anthropic_with(settings_from_env("ANTHROPIC"), name)
    }

    /// An Anthropic Messages model with explicit settings.
    #[cfg(feature = "anthropic")]
    pub fn anthropic_with(settings: crate::providers::ProviderSettings, name: impl Into<String>) -> Self {
        Self::http(crate::providers::AnthropicModel::new(settings), name.into())
    }

    /// An HTTP provider's model, or why it could not be set up (reported by [`Builder::build`]).
    #[cfg(any(feature = "openai", feature = "anthropic"))]
    fn http<M: ModelClient + 'static>(made: Result<M, crate::providers::ProviderError>, name: String) -> Self {
        let client = made.map(|m| Arc::new(m) as Arc<dyn ModelClient>).map_err(|e| e.to_string());
        Self { client, name }
    }

    /// The model name sent to the provider.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Why an [`Agent`] cannot be built ([`BuildError::Agent`]). Not retryable: the agent must be changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// No model was given.
    #[error("no model: call `.model(..)`")]
    NoModel,
    /// The model could not be set up: an invalid script, an HTTP provider's client that failed to build.
    #[error("model `{model}`: {message}")]
    Model {
        /// The model name.
        model: String,
        /// Why.
        message: String,
    },
    /// A tool cannot be offered: two tools share a name, or an argument schema is not a valid JSON schema.
    #[error(transparent)]
    Tool(RegistryError),
    /// Another agent of the builder has this name.
    #[error("two agents share this name")]
    DuplicateName,
}

/// One agent: a name, a model, the tools it is offered and the rules of its approvals.
///
/// The agent is offered exactly the tools added with [`tool`](Self::tool) and [`tools`](Self::tools),
/// each with its own gate.
pub struct Agent {
    name: String,
    model: Option<Model>,
    tools: Vec<Arc<dyn Tool>>,
    system_prompt: Option<String>,
    max_iterations: u32,
    max_tokens: Option<u64>,
    approval_ttl: Option<Duration>,
    on_expiry: OnExpiry,
    forbid_self_approval: bool,
    escalation: Option<EscalationRule>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tools: Vec<&str> = self.tools.iter().map(|t| t.name()).collect();
        f.debug_struct("Agent")
            .field("name", &self.name)
            .field("model", &self.model)
            .field("tools", &tools)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// An agent with this name, no model yet and no tools.
    pub fn new(name: impl Into<String>) -> Self {
        let defaults = LoopConfig::default();
        Self {
            name: name.into(),
            model: None,
            tools: Vec::new(),
            system_prompt: None,
            max_iterations: defaults.max_iterations,
            max_tokens: defaults.max_tokens,
            approval_ttl: None,
            on_expiry: OnExpiry::Deny,
            forbid_self_approval: false,
            escalation: None,
        }
    }

    /// The model it talks to (required).
    pub fn model(mut self, model: Model) -> Self {
        self.model = Some(model);
        self
    }

    /// Offers a tool: a [`TypedTool`](crate::TypedTool), a [`tool_fn`](crate::tool_fn), a built-in or
    /// any [`Tool`].
    pub fn tool(mut self, tool: impl crate::IntoTool) -> Self {
        self.tools.push(tool.into_tool());
        self
    }

    /// Offers several tools already shared (e.g. an MCP server's, or the built-in ones).
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// The system prompt.
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// Model calls allowed over a whole run (default 10; at least 1).
    pub fn max_iterations(mut self, n: u32) -> Self {
        self.max_iterations = n.max(1);
        self
    }

    /// Token budget (input + output) over a whole run (default none).
    pub fn max_tokens(mut self, tokens: u64) -> Self {
        self.max_tokens = Some(tokens);
        self
    }

    /// How long a run may wait for a decision; then `on_expiry` applies (default: no deadline).
    pub fn approval_ttl(mut self, ttl: Duration) -> Self {
        self.approval_ttl = Some(ttl);
        self
    }

    /// What happens when the approval deadline passes: deny every undecided call (the default) or end
    /// the run as `expired`.
    pub fn on_expiry(mut self, on_expiry: OnExpiry) -> Self {
        self.on_expiry = on_expiry;
        self
    }

    /// Whether the actor who started a run is refused as its approver (default false).
    pub fn forbid_self_approval(mut self, forbid: bool) -> Self {
        self.forbid_self_approval = forbid;
        self
    }

    /// Escalates a held turn nobody settled within `after` of its last change (default: never): once
    /// per held turn, an `approval_escalated` event names `notify` (the names a notifier of the
    /// embedder's reads from the event, as the server's `[[notify]]` entries do), and each open approval
    /// is marked escalated. It keeps waiting and taking decisions.
    pub fn escalate_after(mut self, after: Duration, notify: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.escalation = Some(EscalationRule::new(after, notify.into_iter().map(Into::into).collect()));
        self
    }

    fn into_spec(self, redactor: &Redactor) -> Result<AgentSpec, BuildError> {
        let name = self.name;
        let failed = |error: AgentError| BuildError::Agent { name: name.clone(), error };
        let Some(model) = self.model else { return Err(failed(AgentError::NoModel)) };
        let client =
            model.client.map_err(|message| failed(AgentError::Model { model: model.name.clone(), message }))?;
        let mut registry = ToolRegistry::new();
        let mut infos = Vec::new();
        for tool in self.tools {
            infos.push(ToolInfo::of(tool.as_ref(), "default"));
            registry.register(tool).map_err(|e| failed(AgentError::Tool(e)))?;
        }
        let config = LoopConfig {
            model: model.name.clone(),
            system_prompt: self.system_prompt,
            max_iterations: self.max_iterations,
            max_tokens: self.max_tokens,
            redactor: redactor.clone(),
            ..LoopConfig::default()
        };
        Ok(AgentSpec {
            name: name.clone(),
            model: model.name,
            agent_loop: Arc::new(ToolLoop::new(client, Arc::new(registry), config)),
            tools: infos,
            approval_ttl: self.approval_ttl,
            on_expiry: self.on_expiry,
            forbid_self_approval: self.forbid_self_approval,
            escalation: self.escalation,
        })
    }
}

/// Builds a [`Tollgate`]; from [`Tollgate::builder`].
#[derive(Debug, Default)]
#[must_use = "a builder does nothing until `.build().await`"]
pub struct Builder {
    store: Option<String>,
    data_keys: Option<Arc<tollgate_agent_store::DataKeys>>,
    agents: Vec<Agent>,
    lease: Option<Duration>,
    workers: Option<usize>,
    max_takeovers: Option<u32>,
    node_id: Option<String>,
    privacy: Option<PrivacyLevel>,
    secrets: Vec<String>,
    retention: Option<Retention>,
    no_maintenance: bool,
    telemetry: Option<tollgate_agent_runtime::Telemetry>,
}

impl Builder {
    /// Where runs are kept: `sqlite://FILE`, `sqlite::memory:` (gone with the process), or (feature
    /// `postgres`) `postgres://USER@HOST:PORT/DB`. Default [`DEFAULT_STORE`].
    pub fn store(mut self, url: impl Into<String>) -> Self {
        self.store = Some(url.into());
        self
    }

    /// Encrypts suspensions, decisions and event data at rest (AES-256-GCM; the first key seals, all
    /// open).
    pub fn data_keys(mut self, keys: tollgate_agent_store::DataKeys) -> Self {
        self.data_keys = Some(Arc::new(keys));
        self
    }

    /// Adds an agent; the first one added is the default agent.
    pub fn agent(mut self, agent: Agent) -> Self {
        self.agents.push(agent);
        self
    }

    /// How long this process's claim on a run it drives lasts without renewal (default 30 s): after a
    /// crash, another process takes the run over once it passes.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Makes this process a worker of the store, driving up to `workers` runs at once (at least 1): as
    /// well as the runs it starts and those its decisions resume, it claims the runs queued on the store
    /// by any process, oldest first — started while every worker of their process was busy, or given
    /// back by a process that shut down ([`Tollgate::shutdown`]).
    ///
    /// Without it, the process claims no queued run: a process that only lists runs and decides on
    /// them never takes on a run another process queued (its maintenance, like every process's, takes
    /// over a run only once the process driving it died and its lease ran out). It still drives up to 32
    /// runs per CPU core at once; more wait `queued` (nothing is refused or dropped), and once it has
    /// queued a run itself it claims queued runs like a worker, so that its own are not stranded. A
    /// service whose runs must be continued after it restarts (those it gave back at shutdown) is a
    /// worker. (`Tollgate::router`, feature `server`, makes the process a worker too: the HTTP API
    /// queues the runs it starts.)
    ///
    /// ```
    /// # use tollgate::{Agent, Model, Tollgate};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// # let store = format!("sqlite://{}", dir.path().join("runs.db").display());
    /// # let agent = || Agent::new("bank").model(Model::scripted_json(r#"{"turns": [{"text": "hi"}]}"#));
    /// // The service: starts runs, and drives whatever is queued on the store, 8 at a time.
    /// let service = Tollgate::builder().store(&store).agent(agent()).workers(8).build().await?;
    /// // An approvals page in another process: reads and decides, drives only what it resumes.
    /// let approvals = Tollgate::builder().store(&store).agent(agent()).build().await?;
    /// # let _ = (service, approvals);
    /// # Ok(()) }
    /// ```
    ///
    /// [`Tollgate::shutdown`]: crate::Tollgate::shutdown
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = Some(workers);
        self
    }

    /// OpenTelemetry traces of the runs (docs/telemetry.md): a span per segment, model call and tool
    /// call (the GenAI semantic conventions) and per wait at the gate, in one trace per run stored with
    /// the run, so a resume in another process continues it. Pass the tracer of the `TracerProvider` your
    /// application already runs (opentelemetry 0.31). Off by default.
    ///
    /// ```
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use opentelemetry::trace::TracerProvider as _;
    /// use tollgate::{Agent, Model, Telemetry, Tollgate};
    /// let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    /// // Every run traced (sample ratio 1.0); no prompt or argument content in spans.
    /// let telemetry = Telemetry::new(provider.tracer("my-service"), 1.0, false);
    /// let agent = Agent::new("bank").model(Model::scripted_json(r#"{"turns": [{"text": "hi"}]}"#));
    /// let tollgate = Tollgate::builder().store("sqlite::memory:").agent(agent).telemetry(telemetry).build().await?;
    /// # let _ = tollgate;
    /// # Ok(()) }
    /// ```
    pub fn telemetry(mut self, telemetry: tollgate_agent_runtime::Telemetry) -> Self {
        self.telemetry = Some(telemetry);
        self
    }

    /// How many times in a row a run may be taken over (its lease expired because the process driving
    /// it stopped) without reaching a new step before the next takeover fails it as `crash_loop`
    /// (default 3, at least 1): a run whose segment stops every process that drives it is not driven
    /// for ever.
    pub fn max_takeovers(mut self, max_takeovers: u32) -> Self {
        self.max_takeovers = Some(max_takeovers);
        self
    }

    /// This process's lease owner id (default: `node-` and a UUIDv7). Unique per process.
    pub fn node_id(mut self, id: impl Into<String>) -> Self {
        self.node_id = Some(id.into());
        self
    }

    /// What the event log keeps of prompts, arguments and results (default full).
    pub fn privacy(mut self, level: PrivacyLevel) -> Self {
        self.privacy = Some(level);
        self
    }

    /// A secret (an API key, a token) replaced by `[redacted]` wherever it would be stored or shown:
    /// tool results, events, run errors and outputs.
    pub fn secret(mut self, value: impl Into<String>) -> Self {
        self.secrets.push(value.into());
        self
    }

    /// Purges terminal and waiting runs past these ages, hourly (default: keep everything).
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = Some(retention);
        self
    }

    /// Does not start the background maintenance (approval deadlines, takeover of runs whose process
    /// died, lease renewal, retention). For a process that only reads; a process that drives runs needs
    /// it.
    pub fn without_maintenance(mut self) -> Self {
        self.no_maintenance = true;
        self
    }

    /// Opens the store (applying its migrations), builds the agents, starts the maintenance and, for a
    /// worker ([`workers`](Self::workers)), the claim of queued runs. Must be called within a Tokio
    /// runtime.
    pub async fn build(self) -> Result<Tollgate, BuildError> {
        crate::install_crypto_provider();
        if self.agents.is_empty() {
            return Err(BuildError::NoAgent);
        }
        let mut names = std::collections::HashSet::new();
        if let Some(agent) = self.agents.iter().find(|a| !names.insert(a.name.clone())) {
            return Err(BuildError::Agent { name: agent.name.clone(), error: AgentError::DuplicateName });
        }
        let redactor = Redactor::new(self.secrets);
        let agents = self.agents.into_iter().map(|a| a.into_spec(&redactor)).collect::<Result<Vec<_>, _>>()?;
        let url = self.store.unwrap_or_else(|| DEFAULT_STORE.to_owned());
        let options = tollgate_agent_store::StoreOptions {
            data_keys: self.data_keys,
            // Below `full`, what a purge or a rewrite removes must not stay in SQLite's free pages.
            secure_delete: self.privacy.is_some_and(|level| level != PrivacyLevel::Full),
            ..tollgate_agent_store::StoreOptions::default()
        };
        let store = tollgate_agent_store::open_with(&url, options)
            .await
            .map_err(|error| BuildError::Store { url: tollgate_agent_store::redact_url(&url), error })?;
        let catalog = agents.iter().flat_map(|a| a.tools.iter().cloned()).collect();
        let defaults = RuntimeOptions::default();
        let options = RuntimeOptions {
            node_id: self.node_id.unwrap_or(defaults.node_id),
            lease: self.lease.unwrap_or(defaults.lease),
            catalog,
            privacy: self.privacy.unwrap_or(defaults.privacy),
            redactor,
            workers: self.workers.unwrap_or(defaults.workers),
            max_takeovers: self.max_takeovers.unwrap_or(defaults.max_takeovers),
            grants: defaults.grants,
            telemetry: self.telemetry,
        };
        let runtime = Runtime::new(store, agents, Arc::new(SystemClock), Arc::new(UuidV7Ids), options);
        // Queued runs (started while every worker was busy, or given back by a process that shut down)
        // are claimed only by a worker: a process that reads and decides takes on no other process's runs.
        if self.workers.is_some() {
            runtime.start_workers();
        }
        let maintenance = (!self.no_maintenance).then(|| {
            let mut schedule = Schedule::server(self.retention.unwrap_or_default());
            if self.retention.is_none() {
                schedule.retention = None;
            }
            runtime.spawn_maintenance(schedule)
        });
        Ok(Tollgate::assemble(runtime, maintenance))
    }
}

/// Provider settings from `{PREFIX}_API_KEY` and `{PREFIX}_BASE_URL` (each optional), the rest default.
#[cfg(any(feature = "openai", feature = "anthropic"))]
fn settings_from_env(prefix: &str) -> crate::providers::ProviderSettings {
    crate::providers::ProviderSettings {
        base_url: std::env::var(format!("{prefix}_BASE_URL")).ok(),
        api_key: std::env::var(format!("{prefix}_API_KEY")).ok().map(crate::providers::ApiKey::new),
        ..crate::providers::ProviderSettings::default()
    }
}

#[cfg(test)]
mod tests {
    use tollgate_agent_store::redact_url;

    #[test]
    fn a_store_url_loses_its_password_in_errors() {
        assert_eq!(redact_url("postgres://app:s3cret@db:5432/x"), "postgres://app:***@db:5432/x");
        assert_eq!(redact_url("postgres://app@db/x"), "postgres://app@db/x");
        assert_eq!(redact_url("sqlite://runs.db"), "sqlite://runs.db");
    }
}
