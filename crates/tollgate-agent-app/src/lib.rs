//! # tollgate-agent-app
//!
//! Assembles one Tollgate process from a loaded [`tollgate_agent_config::Config`]: [`App::build`] answers
//! a [`Runtime`] running the configured agents. The CLI's local mode and `tollgate serve` both start here.
//!
//! ```rust
//! use tollgate_agent_app::App;
//! use tollgate_agent_config::{ConfigLoader, EnvVars};
//! use tollgate_agent_core::{Actor, RunStatus};
//! use tollgate_agent_runtime::{DecisionSet, StartRun};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tollgate_agent_testkit::scratch_dir("app-front-page");
//! // No `[[agents]]`: the built-in `demo` agent (scripted, offline) is there instead.
//! let toml = "[store]\nurl = \"sqlite::memory:\"\n[workspace]\nroot = \"files\"\n";
//! let config = ConfigLoader::new(EnvVars::new(), &dir).load_str(dir.join("tollgate.toml"), toml)?;
//! let app = App::build(config).await?;
//! # std::fs::create_dir_all(&app.workspace)?;
//!
//! let run = app.runtime.start_and_wait(StartRun::new("hello", "alice")).await?;
//! assert_eq!(run.status(), RunStatus::WaitingForApproval); // its `fs_write` call waits at the gate
//! let digest = run.held_turn().map(|held| held.turn_digest.as_str().to_owned()).unwrap_or_default();
//! let done = app.runtime.decide_and_wait(&run, &digest, DecisionSet::ApproveAll, &Actor::from("bob")).await?;
//! assert_eq!(done.output(), Some("Saved note.txt."));
//! assert_eq!(std::fs::read_to_string(app.workspace.join("note.txt"))?, "hello");
//! app.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Building opens the store, builds each provider, the built-in workspace tools and the tools of every MCP
//! server, applies each agent's operator policy over every tool's own gate, and hands the agents to the
//! runtime, so the CLI and the server run exactly the same agents. With no agents configured, the built-in
//! `demo` agent exists (docs/design.md, "The built-in demo agent").

pub mod policy;
pub mod telemetry;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tollgate_agent_config::{Config, McpCommand, ProviderKind};
use tollgate_agent_core::{LoopConfig, ModelClient, Redactor, SystemClock, Tool, ToolLoop, ToolRegistry};
use tollgate_agent_mcp::McpSource;
use tollgate_agent_providers::{AnthropicModel, ApiKey, OpenAiModel, ProviderSettings, ScriptedModel};
use tollgate_agent_runtime::{
    AgentSpec, EscalationRule, OnExpiry, PrivacyLevel, Runtime, RuntimeOptions, ToolInfo, UuidV7Ids,
};
use tollgate_agent_tools::{BuiltinOptions, SandboxMode, ShellOptions};

/// Why a process could not be assembled. Each is a configuration problem (the CLI exits 2).
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The store could not be opened.
    #[error("cannot open the store {url}: {message}")]
    Store {
        /// The store URL, password hidden.
        url: String,
        /// Why.
        message: String,
    },
    /// A provider could not be built.
    #[error("provider `{name}`: {message}")]
    Provider {
        /// The provider.
        name: String,
        /// Why.
        message: String,
    },
    /// A tool of the embedder's own cannot be added.
    #[error("tool `{name}`: {message}")]
    Tool {
        /// The tool.
        name: String,
        /// Why.
        message: String,
    },
    /// An agent's tools could not be registered.
    #[error("agent `{name}`: {message}")]
    Agent {
        /// The agent.
        name: String,
        /// Why.
        message: String,
    },
    /// The OpenTelemetry exporter of `[telemetry]` could not be built.
    #[error("telemetry endpoint {endpoint}: {message}")]
    Telemetry {
        /// The traces URL.
        endpoint: String,
        /// Why.
        message: String,
    },
}

/// A tool the process knows, with the reason for its own gate.
struct KnownTool {
    tool: Arc<dyn Tool>,
    reason: &'static str,
}

/// An assembled process.
pub struct App {
    /// The configuration it was built from.
    pub config: Config,
    /// The runtime over the store, with every agent.
    pub runtime: Runtime,
    /// The workspace root the built-in tools are confined to.
    pub workspace: PathBuf,
    /// MCP servers that started (stopped by [`App::shutdown`]).
    mcp: Vec<McpSource>,
    /// The span exporter of `[telemetry]`, when on (flushed by [`App::shutdown`]).
    exporter: Option<telemetry::Exporter>,
}

/// Why a built-in tool has its gate.
const BUILTIN_REASON: &str = "default";

/// The name of the agent that exists when the configuration defines none.
pub const DEMO_AGENT: &str = "demo";

impl App {
    /// Why `shell` commands will not be confined as `[sandbox] mode` asks, if they will not be: a sentence
    /// for `serve` to print once at start. `None` when the sandbox is fully available or turned off.
    pub fn sandbox_warning(&self) -> Option<String> {
        let support = tollgate_agent_tools::sandbox_support();
        match (self.config.sandbox.mode, &support) {
            (tollgate_agent_config::SandboxMode::Off, _) | (_, tollgate_agent_tools::SandboxSupport::Full { .. }) => {
                None
            }
            (tollgate_agent_config::SandboxMode::Required, _) => Some(format!(
                "the shell sandbox is required ([sandbox] mode = \"required\") but {support}: shell calls will be refused"
            )),
            (tollgate_agent_config::SandboxMode::Auto, _) => Some(format!(
                "{support}: shell commands run without the full sandbox (see SECURITY.md; [sandbox] mode = \"required\" refuses them instead)"
            )),
        }
    }

    /// Builds the process. MCP servers that fail to start are logged and left out (their tools are then
    /// unknown to the model); everything else that fails is an error.
    pub async fn build(config: Config) -> Result<App, AppError> {
        Self::build_with_tools(config, Vec::new()).await
    }

    /// Builds the process with tools of the embedder's own beside the built-in and MCP ones. Each is
    /// offered to the agents whose `tools` list names it (the `demo` agent offers only its two built-ins),
    /// under the agent's `policy` like any other tool, and listed with its own gate. A name that a
    /// built-in or an MCP tool already has is an error.
    pub async fn build_with_tools(config: Config, tools: Vec<Arc<dyn Tool>>) -> Result<App, AppError> {
        let store_failed = |message: String| AppError::Store { url: config.store.redacted_url(), message };
        let options = store_options(&config).map_err(store_failed)?;
        let store = tollgate_agent_store::open_with(&config.store.url, options)
            .await
            .map_err(|e| AppError::Store { url: config.store.redacted_url(), message: e.to_string() })?;
        let workspace = config.workspace.root.clone();

        let builtin = builtin_options(&config, false);
        let mut known: Vec<KnownTool> = tollgate_agent_tools::builtin_tools_with(&workspace, &builtin)
            .into_iter()
            .map(|tool| KnownTool { tool, reason: BUILTIN_REASON })
            .collect();
        let mut mcp = Vec::new();
        for server in &config.mcp_servers {
            match McpSource::start(mcp_settings(&config, server)).await {
                Ok(source) => {
                    for tool in source.mcp_tools() {
                        let reason = tool.gate_reason();
                        known.push(KnownTool { tool: Arc::clone(tool) as Arc<dyn Tool>, reason });
                    }
                    mcp.push(source);
                }
                Err(error) => tracing::warn!(server = %server.name, %error, "MCP server left out"),
            }
        }

        for tool in tools {
            if known.iter().any(|k| k.tool.name() == tool.name()) {
                return Err(AppError::Tool {
                    name: tool.name().to_owned(),
                    message: "a built-in or MCP tool already has this name".into(),
                });
            }
            known.push(KnownTool { tool, reason: BUILTIN_REASON });
        }

        let catalog: Vec<ToolInfo> = known.iter().map(|k| ToolInfo::of(k.tool.as_ref(), k.reason)).collect();
        let agents = if config.defines_agents() {
            config.agents.iter().map(|agent| build_agent(&config, agent, &known)).collect::<Result<Vec<_>, _>>()?
        } else {
            vec![demo_agent(&known)?]
        };
        let options = RuntimeOptions {
            lease: config.server.lease,
            catalog,
            privacy: privacy_level(config.privacy.level),
            redactor: redactor(&config),
            grants: tollgate_agent_runtime::GrantSettings {
                enabled: config.grants.enabled,
                default_ttl: config.grants.default_ttl,
                max_ttl: config.grants.max_ttl,
            },
            ..RuntimeOptions::default()
        };
        let (telemetry, exporter) = telemetry::start(&config.telemetry)?.unzip();
        let options = RuntimeOptions { telemetry, ..options };
        let options = match config.runtime.workers {
            Some(workers) => RuntimeOptions { workers: usize::try_from(workers).unwrap_or(usize::MAX), ..options },
            None => options,
        };
        let options = match config.runtime.max_takeovers {
            Some(n) => RuntimeOptions { max_takeovers: u32::try_from(n).unwrap_or(u32::MAX), ..options },
            None => options,
        };
        let runtime = Runtime::new(store, agents, Arc::new(SystemClock), Arc::new(UuidV7Ids), options);
        Ok(App { config, runtime, workspace, mcp, exporter })
    }

    /// Kills every `shell` command still running (its whole process group), stops the MCP servers and
    /// sends the spans still queued for `[telemetry]`.
    pub async fn shutdown(&self) {
        let killed = tollgate_agent_tools::kill_running_commands();
        if killed > 0 {
            tracing::warn!(killed, "killed shell commands still running at shutdown");
        }
        for source in &self.mcp {
            source.shutdown().await;
        }
        if let Some(exporter) = &self.exporter {
            exporter.shutdown().await;
        }
    }
}

fn build_agent(
    config: &Config,
    agent: &tollgate_agent_config::AgentConfig,
    known: &[KnownTool],
) -> Result<AgentSpec, AppError> {
    let provider = config.provider(&agent.provider).ok_or_else(|| AppError::Agent {
        name: agent.name.clone(),
        message: format!("unknown provider `{}`", agent.provider),
    })?;
    let model = model_client(provider)?;
    let mut registry = ToolRegistry::new();
    let mut infos = Vec::new();
    for known in known.iter().filter(|k| agent.offers_tool(k.tool.name())) {
        // An agent whose commands may use the network gets a `shell` of its own.
        let own = match known.tool.name() {
            "shell" if agent.shell_network && known.reason == BUILTIN_REASON => {
                tollgate_agent_tools::builtin_tool_with(&config.workspace.root, "shell", &builtin_options(config, true))
            }
            _ => None,
        };
        let base = own.unwrap_or_else(|| Arc::clone(&known.tool));
        let (gate, why) = policy::explain(base.as_ref(), known.reason, &agent.policy);
        let tool = policy::apply(base, &agent.policy);
        let mut info = ToolInfo::of(tool.as_ref(), why);
        info.gate = gate;
        infos.push(info);
        registry.register(tool).map_err(|e| AppError::Agent { name: agent.name.clone(), message: e.to_string() })?;
    }
    let model_name = agent.model.clone().or_else(|| provider.model.clone()).unwrap_or_default();
    let loop_config = LoopConfig {
        model: model_name.clone(),
        system_prompt: agent.system_prompt.clone(),
        max_iterations: agent.max_iterations,
        max_tokens: agent.max_tokens,
        redactor: redactor(config),
        ..LoopConfig::default()
    };
    let agent_loop = ToolLoop::new(model, Arc::new(registry), loop_config);
    Ok(AgentSpec {
        name: agent.name.clone(),
        model: if model_name.is_empty() { provider.kind.as_str().to_owned() } else { model_name },
        agent_loop: Arc::new(agent_loop),
        tools: infos,
        approval_ttl: agent.approval_ttl,
        on_expiry: match agent.on_expiry {
            tollgate_agent_config::OnExpiry::Deny => OnExpiry::Deny,
            tollgate_agent_config::OnExpiry::Cancel => OnExpiry::Cancel,
        },
        forbid_self_approval: agent.forbid_self_approval,
        escalation: escalation(config, agent),
    })
}

/// How to start one `[[mcp_servers]]` entry: in the config file's folder, so relative paths in its `args`
/// mean what docs/configuration.md says.
fn mcp_settings(
    config: &Config,
    server: &tollgate_agent_config::McpServerConfig,
) -> tollgate_agent_mcp::McpServerConfig {
    let command = match &server.command {
        McpCommand::Path(path) => path.clone(),
        McpCommand::Program(program) => PathBuf::from(program),
    };
    let mut settings = tollgate_agent_mcp::McpServerConfig::new(server.name.clone(), command)
        .args(server.args.iter().cloned())
        .working_dir(config.base_dir.clone())
        .inherit_env(server.inherit_env)
        .call_timeout(server.call_timeout)
        .start_timeout(server.start_timeout);
    for (key, value) in &server.env {
        settings = settings.env(key.clone(), value.expose().to_owned());
    }
    settings
}

/// The store's options: the data keys of `[[privacy.keys]]` (first one encrypting), SQLite's
/// `secure_delete` below privacy level `full`, and `[store] connect_timeout`. An invalid key is the message to show.
pub fn store_options(config: &Config) -> Result<tollgate_agent_store::StoreOptions, String> {
    // Below `full`, what a purge or a rewrite removes must not stay in the database file's free pages.
    let secure_delete = config.privacy.level != tollgate_agent_config::PrivacyLevel::Full;
    let connect_timeout = config.store.connect_timeout;
    if config.privacy.keys.is_empty() {
        return Ok(tollgate_agent_store::StoreOptions { data_keys: None, secure_delete, connect_timeout });
    }
    let keys = config
        .privacy
        .keys
        .iter()
        .map(|k| tollgate_agent_store::DataKey::from_hex(k.id.clone(), k.key.expose()))
        .collect::<Result<Vec<_>, _>>()
        .and_then(tollgate_agent_store::DataKeys::new)
        .map_err(|e| format!("privacy.keys: {e}"))?;
    Ok(tollgate_agent_store::StoreOptions { data_keys: Some(Arc::new(keys)), secure_delete, connect_timeout })
}

/// How the built-in tools are set up: the `shell` sandbox from `[sandbox] mode`, network as given.
fn builtin_options(config: &Config, network: bool) -> BuiltinOptions {
    let sandbox = match config.sandbox.mode {
        tollgate_agent_config::SandboxMode::Auto => SandboxMode::Auto,
        tollgate_agent_config::SandboxMode::Required => SandboxMode::Required,
        tollgate_agent_config::SandboxMode::Off => SandboxMode::Off,
    };
    BuiltinOptions { shell: ShellOptions { sandbox, network } }
}

/// The one redactor of this process: every configured secret (see [`Config::secret_values`]).
pub fn redactor(config: &Config) -> Redactor {
    Redactor::new(config.secret_values())
}

fn privacy_level(level: tollgate_agent_config::PrivacyLevel) -> PrivacyLevel {
    match level {
        tollgate_agent_config::PrivacyLevel::Full => PrivacyLevel::Full,
        tollgate_agent_config::PrivacyLevel::Redacted => PrivacyLevel::Redacted,
        tollgate_agent_config::PrivacyLevel::Metadata => PrivacyLevel::Metadata,
    }
}

fn model_client(provider: &tollgate_agent_config::ProviderConfig) -> Result<Arc<dyn ModelClient>, AppError> {
    let failed = |message: String| AppError::Provider { name: provider.name.clone(), message };
    let http = |c: &tollgate_agent_config::HttpProviderConfig| ProviderSettings {
        base_url: Some(c.base_url.clone()),
        api_key: c.api_key.as_ref().map(|k| ApiKey::new(k.expose())),
        timeout: c.timeout,
        max_retries: c.max_retries,
        stream: c.stream,
        ..ProviderSettings::default()
    };
    Ok(match &provider.kind {
        ProviderKind::OpenAi(c) => Arc::new(OpenAiModel::new(http(c)).map_err(|e| failed(e.to_string()))?),
        ProviderKind::Anthropic(c) => Arc::new(AnthropicModel::new(http(c)).map_err(|e| failed(e.to_string()))?),
        ProviderKind::Scripted(c) => Arc::new(ScriptedModel::new(
            tollgate_agent_providers::scripted::from_file(&c.script).map_err(|e| failed(e.to_string()))?,
        )),
    })
}

/// The built-in `demo` agent: the scripted demo script, tools `fs_list` and `fs_write`.
fn demo_agent(known: &[KnownTool]) -> Result<AgentSpec, AppError> {
    let by_name: BTreeMap<&str, &KnownTool> = known.iter().map(|k| (k.tool.name(), k)).collect();
    let mut registry = ToolRegistry::new();
    let mut infos = Vec::new();
    for name in ["fs_list", "fs_write"] {
        let Some(known) = by_name.get(name) else { continue };
        infos.push(ToolInfo::of(known.tool.as_ref(), known.reason));
        registry
            .register(Arc::clone(&known.tool))
            .map_err(|e| AppError::Agent { name: DEMO_AGENT.into(), message: e.to_string() })?;
    }
    let config = LoopConfig { model: "scripted".into(), max_iterations: 10, ..LoopConfig::default() };
    let model = ScriptedModel::new(tollgate_agent_providers::scripted::demo_script());
    Ok(AgentSpec {
        name: DEMO_AGENT.into(),
        model: "scripted".into(),
        agent_loop: Arc::new(ToolLoop::new(Arc::new(model), Arc::new(registry), config)),
        tools: infos,
        approval_ttl: None,
        on_expiry: OnExpiry::Deny,
        forbid_self_approval: false,
        escalation: None,
    })
}

/// The escalation of `agent` (V2.md section 4), when it has `escalate_after`: its `escalate_to`, then
/// every other notifier covering it whose `on` lists `escalation`, each once.
fn escalation(config: &Config, agent: &tollgate_agent_config::AgentConfig) -> Option<EscalationRule> {
    let after = agent.escalate_after?;
    let mut notify = agent.escalate_to.clone();
    for notifier in &config.notify {
        let listening =
            notifier.sends_on(tollgate_agent_config::NotifyOn::Escalation) && notifier.covers_agent(&agent.name);
        if listening && !notify.contains(&notifier.name) {
            notify.push(notifier.name.clone());
        }
    }
    let after_text = agent.escalate_after_text.clone().unwrap_or_else(|| tollgate_agent_config::format_duration(after));
    Some(EscalationRule { after, after_text, notify })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tollgate_agent_config::{ConfigLoader, EnvVars};

    fn mcp_settings_of(toml: &str) -> tollgate_agent_mcp::McpServerConfig {
        let loader = ConfigLoader::new(EnvVars::new().with("TOKEN", "t0k"), "/etc/tollgate");
        let config = loader.load_str("/etc/tollgate/tollgate.toml", toml).unwrap_or_else(|e| panic!("{e}"));
        mcp_settings(&config, &config.mcp_servers[0])
    }

    #[test]
    fn an_mcp_server_entry_maps_every_key() {
        let settings = mcp_settings_of(
            "[[mcp_servers]]\nname = \"files\"\ncommand = \"./srv\"\nargs = [\"-v\", \"./data\"]\n\
             env = { TOKEN = \"env:TOKEN\" }\ninherit_env = true\ncall_timeout = \"5m\"\nstart_timeout = \"90s\"\n",
        );
        let expected = tollgate_agent_mcp::McpServerConfig::new("files", "/etc/tollgate/srv")
            .args(["-v", "/etc/tollgate/data"])
            .env("TOKEN", "t0k")
            .inherit_env(true)
            .working_dir("/etc/tollgate")
            .call_timeout(Duration::from_secs(300))
            .start_timeout(Duration::from_secs(90));
        assert_eq!(settings, expected);
    }

    #[test]
    fn an_mcp_server_entry_without_timeouts_gets_the_defaults() {
        let settings = mcp_settings_of("[[mcp_servers]]\nname = \"files\"\ncommand = \"npx\"\n");
        assert_eq!(settings.call_timeout, tollgate_agent_mcp::McpServerConfig::DEFAULT_CALL_TIMEOUT);
        assert_eq!(settings.start_timeout, tollgate_agent_mcp::McpServerConfig::DEFAULT_START_TIMEOUT);
        assert_eq!(settings.call_timeout, tollgate_agent_config::defaults::MCP_CALL_TIMEOUT);
        assert_eq!(settings.start_timeout, tollgate_agent_config::defaults::MCP_START_TIMEOUT);
    }
}
