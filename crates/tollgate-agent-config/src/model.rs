//! The typed configuration: what a valid `tollgate.toml` (plus `TOLLGATE_*` overrides) means, with every
//! default applied, every `env:NAME` secret resolved and every relative path made absolute. A value of
//! these types built by the loader has passed every check of the contract; nothing here is re-validated.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use crate::{Actor, Glob, Secret};

/// The whole configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where the configuration came from.
    pub source: ConfigSource,
    /// The folder relative paths of the file were resolved against: the config file's folder, or the
    /// current folder when there is no file.
    pub base_dir: PathBuf,
    /// `[store]`.
    pub store: StoreConfig,
    /// `[server]`.
    pub server: ServerConfig,
    /// `[retention]`.
    pub retention: RetentionConfig,
    /// `[workspace]`.
    pub workspace: WorkspaceConfig,
    /// `[[auth.tokens]]`.
    pub auth: AuthConfig,
    /// `[[providers]]`, in file order.
    pub providers: Vec<ProviderConfig>,
    /// `[[mcp_servers]]`, in file order.
    pub mcp_servers: Vec<McpServerConfig>,
    /// `[[agents]]`, in file order (the first is the default agent).
    pub agents: Vec<AgentConfig>,
    /// `[[webhooks]]`, in file order.
    pub webhooks: Vec<WebhookConfig>,
    /// `[[notify]]`, in file order: where people are told a run waits for them. Names are unique; when
    /// there is any, `server.link_secret` is set.
    pub notify: Vec<NotifyConfig>,
    /// `[sandbox]`.
    pub sandbox: SandboxConfig,
    /// `[privacy]`.
    pub privacy: PrivacyConfig,
    /// `[runtime]`.
    pub runtime: RuntimeConfig,
    /// `[grants]`.
    pub grants: GrantsConfig,
    /// `[telemetry]`: OpenTelemetry traces, off unless an endpoint is set.
    pub telemetry: TelemetryConfig,
}

impl Config {
    /// Whether the configuration defines any agent. When it does not, the caller adds the built-in `demo`
    /// agent (docs/configuration.md: "The `demo` agent exists only when the config defines no agents").
    pub fn defines_agents(&self) -> bool {
        !self.agents.is_empty()
    }

    /// The agent named `name`.
    pub fn agent(&self, name: &str) -> Option<&AgentConfig> {
        self.agents.iter().find(|a| a.name == name)
    }

    /// The provider named `name`. Every agent's `provider` names one that exists.
    pub fn provider(&self, name: &str) -> Option<&ProviderConfig> {
        self.providers.iter().find(|p| p.name == name)
    }

    /// Every configured secret's value — provider keys, bearer tokens, webhook secrets, MCP `env` values,
    /// data keys, the store URL's password, the link secret, Slack webhook URLs and SMTP passwords — for the redactor that keeps them out of errors, events,
    /// logs and output. Empty values are left out.
    pub fn secret_values(&self) -> Vec<String> {
        let mut values: Vec<String> = Vec::new();
        let mut add = |secret: &Secret| {
            if !secret.is_empty() {
                values.push(secret.expose().to_owned());
            }
        };
        for token in &self.auth.tokens {
            add(&token.token);
        }
        for provider in &self.providers {
            if let ProviderKind::OpenAi(http) | ProviderKind::Anthropic(http) = &provider.kind
                && let Some(key) = &http.api_key
            {
                add(key);
            }
        }
        for server in &self.mcp_servers {
            server.env.values().for_each(&mut add);
        }
        for webhook in &self.webhooks {
            if let Some(secret) = &webhook.secret {
                add(secret);
            }
        }
        for key in &self.privacy.keys {
            add(&key.key);
        }
        if let Some(secret) = &self.server.link_secret {
            add(secret);
        }
        for notifier in &self.notify {
            match &notifier.kind {
                NotifyKind::Slack(slack) => add(&slack.url),
                NotifyKind::Email(email) => {
                    if let Some(password) = &email.password {
                        add(password);
                    }
                }
            }
        }
        if let Some(password) = url_password(&self.store.url) {
            values.push(password);
        }
        values.sort();
        values.dedup();
        values
    }

    /// The notifier (`[[notify]]` entry) named `name`. Every agent's `escalate_to` names ones that exist.
    pub fn notifier(&self, name: &str) -> Option<&NotifyConfig> {
        self.notify.iter().find(|n| n.name == name)
    }

    /// The MCP server named `name`.
    pub fn mcp_server(&self, name: &str) -> Option<&McpServerConfig> {
        self.mcp_servers.iter().find(|s| s.name == name)
    }
}

/// Where a [`Config`] came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// This file (an absolute path), plus any `TOLLGATE_*` overrides.
    File(PathBuf),
    /// No file: the built-in defaults, plus any `TOLLGATE_*` overrides.
    Defaults,
}

/// `[store]`: the database runs are kept in.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The resolved URL: a SQLite file is always absolute here (`sqlite:///abs/tollgate.db`); a PostgreSQL
    /// URL is as given. It may hold a password: print [`StoreConfig::redacted_url`] instead.
    pub url: String,
    /// Which backend the URL selects.
    pub backend: StoreBackend,
    /// `connect_timeout`: how long a statement waits for a PostgreSQL connection (from the pool, or a
    /// new one) before it fails as unavailable (SQLite ignores it).
    pub connect_timeout: Duration,
}

impl StoreConfig {
    /// The URL with any password replaced by `***`, for logs and messages.
    pub fn redacted_url(&self) -> String {
        redact_url_password(&self.url)
    }
}

impl fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreConfig")
            .field("url", &self.redacted_url())
            .field("backend", &self.backend)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// The store backend a URL selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreBackend {
    /// A SQLite file at this absolute path.
    Sqlite {
        /// The database file.
        path: PathBuf,
    },
    /// An in-memory SQLite database (`sqlite::memory:`), gone when the process ends.
    SqliteInMemory,
    /// PostgreSQL (`postgres://` or `postgresql://`).
    Postgres,
}

/// `[server]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// `addr`: where `serve` listens.
    pub addr: SocketAddr,
    /// `max_body_bytes`: the largest request body accepted.
    pub max_body_bytes: u64,
    /// `lease`: how long a running run's lease lasts before another process may take it over.
    pub lease: Duration,
    /// `header_read_timeout`: once a request's first byte arrives, how long its whole head may take.
    pub header_read_timeout: Duration,
    /// `idle_timeout`: how long a connection may stay open with no request in progress.
    pub idle_timeout: Duration,
    /// `body_timeout`: how long reading one request's body may take (then 408 `request-timeout`).
    pub body_timeout: Duration,
    /// `ready_timeout`: how long `/readyz` waits for the store's write probe before answering 503.
    pub ready_timeout: Duration,
    /// `max_connections`: how many connections are served at once (more are refused).
    pub max_connections: u64,
    /// `max_streams_per_client`: how many live-event streams one client (token name, else peer IP) may hold.
    pub max_streams_per_client: u64,
    /// `public_url`: the address people reach this server at, which signed approval links and review links
    /// start with (`{public_url}/approve/{token}`); an `http://` or `https://` URL without query or fragment,
    /// trailing `/` removed. `None` when not given: [`ServerConfig::link_base`] then uses `http://ADDR`.
    pub public_url: Option<String>,
    /// `link_secret`: the HMAC-SHA256 key signed approval links are made and checked with, at least 32
    /// bytes. Always set when any `[[notify]]` is configured.
    pub link_secret: Option<Secret>,
}

impl ServerConfig {
    /// The URL links to this server start with: `public_url` when given, else `http://` and `addr` (the
    /// configured listen address; a `serve --addr` given on the command line is not known here). No
    /// trailing `/`.
    pub fn link_base(&self) -> String {
        match &self.public_url {
            Some(url) => url.clone(),
            None => format!("http://{}", self.addr),
        }
    }
}

/// `[retention]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionConfig {
    /// `terminal_after`: terminal runs older than this (by when they finished) are purged.
    pub terminal_after: Duration,
    /// `waiting_after`: waiting runs older than this (by their last update) are purged.
    pub waiting_after: Duration,
}

/// `[workspace]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceConfig {
    /// `root`, absolute: the only folder the `fs_*` and `shell` tools can touch. It need not exist yet.
    pub root: PathBuf,
}

/// `[sandbox]`: how the `shell` tool's commands are confined by the operating system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SandboxConfig {
    /// `mode` (default `auto`).
    pub mode: SandboxMode,
}

/// `[sandbox] mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxMode {
    /// `auto`: Landlock where the kernel has it; elsewhere commands run unconfined and `serve` warns once.
    #[default]
    Auto,
    /// `required`: `shell` refuses to run a command it cannot confine.
    Required,
    /// `off`: commands run unconfined (still in their own process group, with a scrubbed environment).
    Off,
}

/// `[runtime]`: how this process drives runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RuntimeConfig {
    /// `workers`: how many runs this process drives at once; `None` (unset) means the runtime's default
    /// for the machine's cores (32 per core).
    pub workers: Option<u64>,
    /// `max_takeovers`: how many takeovers in a row without a new step a run is given before the next
    /// fails it (`crash_loop`); `None` (unset) means the runtime's default (3).
    pub max_takeovers: Option<u64>,
}

/// `[grants]`: standing approvals a person gives (V2.md section 1): whether they apply, and how long
/// they last. `default_ttl` is at most `max_ttl`, and both are positive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantsConfig {
    /// `enabled` (default true): grants are made and allow calls. Off, none is made and none stored
    /// allows a call.
    pub enabled: bool,
    /// `default_ttl` (default 8 hours): the life of a grant made without a ttl of its own.
    pub default_ttl: Duration,
    /// `max_ttl` (default 30 days): the longest life a grant may be given.
    pub max_ttl: Duration,
}

impl Default for GrantsConfig {
    fn default() -> Self {
        GrantsConfig {
            enabled: crate::defaults::GRANTS_ENABLED,
            default_ttl: crate::defaults::GRANT_DEFAULT_TTL,
            max_ttl: crate::defaults::GRANT_MAX_TTL,
        }
    }
}

/// `[telemetry]`: where the runs' OpenTelemetry spans go (docs/telemetry.md).
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// `endpoint`: the OTLP/HTTP traces URL (`{endpoint}/v1/traces`, already appended); `None`: off.
    pub endpoint: Option<String>,
    /// `service_name` (default `tollgate`): the `service.name` of the spans' resource.
    pub service_name: String,
    /// `sample_ratio` (default 1): the share of new runs whose spans are recorded, 0 to 1.
    pub sample_ratio: f64,
    /// `content` (default false): prompts, model text, arguments and results go in spans, when
    /// `[privacy] level` is `full`.
    pub content: bool,
    /// `timeout` (default 10s): how long one export may take.
    pub timeout: Duration,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            endpoint: None,
            service_name: crate::defaults::TELEMETRY_SERVICE_NAME.to_owned(),
            sample_ratio: crate::defaults::TELEMETRY_SAMPLE_RATIO,
            content: false,
            timeout: crate::defaults::TELEMETRY_TIMEOUT,
        }
    }
}

/// `[privacy]`: what the event log keeps of prompts, arguments and results, and encryption at rest.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrivacyConfig {
    /// `level` (default `full`).
    pub level: PrivacyLevel,
    /// `[[privacy.keys]]`, in file order: the first encrypts new data, every one decrypts. Empty means
    /// nothing is encrypted.
    pub keys: Vec<DataKeyConfig>,
}

/// `[privacy] level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PrivacyLevel {
    /// `full`: events keep prompts, arguments and results as they were.
    #[default]
    Full,
    /// `redacted`: events keep the shape and size of each text, not the text.
    Redacted,
    /// `metadata`: events keep kinds, ids, tool names and counts only.
    Metadata,
}

/// One `[[privacy.keys]]` entry: an AES-256-GCM key for suspensions and event payloads at rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataKeyConfig {
    /// `id`: stored beside each encrypted value, so an old key still decrypts after rotation.
    pub id: String,
    /// `key`: 32 bytes as 64 hex digits (a secret; usually `env:NAME`). Checked at load.
    pub key: Secret,
}

/// `[auth]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthConfig {
    /// `[[auth.tokens]]`; empty means auth is off. Token values are distinct.
    pub tokens: Vec<TokenConfig>,
}

/// One `[[auth.tokens]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenConfig {
    /// `name`: the actor recorded on events for requests bearing this token. Several tokens may share a name
    /// (e.g. while one is rotated out).
    pub name: String,
    /// `token`: the bearer token, never empty.
    pub token: Secret,
    /// `roles`: at least one, each once, in the order runner, approver, admin.
    pub roles: Vec<Role>,
}

/// A role a token grants (docs/api.md, Auth).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// `runner`: start, read, cancel own runs.
    Runner,
    /// `approver`: decide held calls.
    Approver,
    /// `admin`: everything, purge included.
    Admin,
}

impl Role {
    /// Every role, in canonical order.
    pub const ALL: [Role; 3] = [Role::Runner, Role::Approver, Role::Admin];

    /// The name used in the config and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Runner => "runner",
            Role::Approver => "approver",
            Role::Admin => "admin",
        }
    }

    /// The role named `name`, if any.
    pub fn parse(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == name)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `[[providers]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// `name`, unique among providers.
    pub name: String,
    /// `model`: the model used by agents on this provider that name none.
    pub model: Option<String>,
    /// `kind` and the keys that belong to it.
    pub kind: ProviderKind,
}

/// A provider's kind with its kind-specific settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderKind {
    /// `kind = "openai"`: any Chat Completions-compatible server; requests go to `{base_url}/chat/completions`.
    OpenAi(HttpProviderConfig),
    /// `kind = "anthropic"`: the Messages API; requests go to `{base_url}/v1/messages`.
    Anthropic(HttpProviderConfig),
    /// `kind = "scripted"`: replays a JSON script (tests, benchmarks, offline demos).
    Scripted(ScriptedProviderConfig),
}

impl ProviderKind {
    /// The `kind` value as written in the config.
    pub fn as_str(&self) -> &'static str {
        match self {
            ProviderKind::OpenAi(_) => "openai",
            ProviderKind::Anthropic(_) => "anthropic",
            ProviderKind::Scripted(_) => "scripted",
        }
    }
}

/// Settings of a provider reached over HTTP (`openai`, `anthropic`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpProviderConfig {
    /// `base_url`, without a trailing `/`. Defaults: `https://api.openai.com/v1` for `openai`,
    /// `https://api.anthropic.com` for `anthropic`.
    pub base_url: String,
    /// `api_key`, when given (optional for local servers).
    pub api_key: Option<Secret>,
    /// `timeout` of one request (default 120s).
    pub timeout: Duration,
    /// `max_retries` on 429 / 5xx / connection errors (default 3).
    pub max_retries: u32,
    /// `stream`: ask for streamed answers, whose text live viewers see as it arrives (default true).
    pub stream: bool,
}

/// Settings of the `scripted` provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedProviderConfig {
    /// `script`: the JSON script, absolute. Not read by the loader: the provider reports a missing or bad one.
    pub script: PathBuf,
}

/// One `[[mcp_servers]]` entry: a stdio MCP server whose tools become `SERVER__TOOL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// `name`, unique among MCP servers.
    pub name: String,
    /// `command`.
    pub command: McpCommand,
    /// `args`, with each one that is a relative path (`.`, `..`, or starting with `./` or `../`) made
    /// absolute; the others as given.
    pub args: Vec<String>,
    /// `env`: extra environment variables for the server process; values are secrets.
    pub env: BTreeMap<String, Secret>,
    /// `inherit_env` (default false): start the server with Tollgate's whole environment instead of only
    /// `HOME`, `LOGNAME`, `PATH`, `SHELL`, `TERM` and `USER` (plus `env`).
    pub inherit_env: bool,
    /// `call_timeout` (default 60s): how long one tool call may take before it is cancelled on the server
    /// and the model is told it timed out.
    pub call_timeout: Duration,
    /// `start_timeout` (default 60s): how long spawning, the MCP handshake and the tool listing may take
    /// together, at start and at each restart.
    pub start_timeout: Duration,
}

/// What `command` of an MCP server names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpCommand {
    /// A `command` containing `/`: a file, made absolute against the config file's folder.
    Path(PathBuf),
    /// Any other `command`: a program looked up on `PATH` when started.
    Program(String),
}

/// One `[[agents]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    /// `name`, unique among agents.
    pub name: String,
    /// `provider`: the name of a configured provider.
    pub provider: String,
    /// The model: the agent's `model`, else its provider's `model`. Always set for `openai` and `anthropic`
    /// providers; may be `None` only on a `scripted` one.
    pub model: Option<String>,
    /// `system_prompt`, when given.
    pub system_prompt: Option<String>,
    /// `tools`: names or globs (MCP tools are `SERVER__TOOL`); empty means no tools.
    pub tools: Vec<Glob>,
    /// `max_iterations` (default 10, at least 1): model calls over the whole run.
    pub max_iterations: u32,
    /// `max_tokens`: the run's token budget (input + output), when given.
    pub max_tokens: Option<u64>,
    /// `approval_ttl`: how long a run may wait at the gate, when given.
    pub approval_ttl: Option<Duration>,
    /// `on_expiry` (default `deny`).
    pub on_expiry: OnExpiry,
    /// `forbid_self_approval` (default false): the actor who started a run may not decide its calls.
    pub forbid_self_approval: bool,
    /// `shell_network` (default false): the agent's sandboxed `shell` commands may open TCP connections.
    pub shell_network: bool,
    /// `[[agents.policy]]`, in file order: the first rule that matches a call wins.
    pub policy: Vec<PolicyRule>,
    /// `escalate_after`: how long a run may wait at the gate before the notifiers of `escalate_to` are told
    /// (once per held turn). Positive; set exactly when `escalate_to` is not empty.
    pub escalate_after: Option<Duration>,
    /// `escalate_after` as written in the file (`"1h"`, `"24h"`): what the `approval_escalated` event
    /// says its turn waited. Set exactly when `escalate_after` is.
    pub escalate_after_text: Option<String>,
    /// `escalate_to`: names of `[[notify]]` entries, each once, in config order; every one exists. Empty
    /// exactly when `escalate_after` is `None`.
    pub escalate_to: Vec<String>,
}

impl AgentConfig {
    /// Whether one of the agent's `tools` entries (a name or a glob) matches the tool `name`.
    pub fn offers_tool(&self, name: &str) -> bool {
        self.tools.iter().any(|glob| glob.is_match(name))
    }
}

/// What happens when a waiting run's `approval_ttl` passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnExpiry {
    /// `deny`: every undecided call is denied by `system` and the run resumes.
    #[default]
    Deny,
    /// `cancel`: the run becomes `expired`.
    Cancel,
}

impl OnExpiry {
    /// The value as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            OnExpiry::Deny => "deny",
            OnExpiry::Cancel => "cancel",
        }
    }
}

/// One `[[agents.policy]]` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRule {
    /// `tool`: a name or glob the call's tool must match.
    pub tool: Glob,
    /// `when`: every entry must match the call's arguments; empty means the rule applies to every call of
    /// the tool. Ordered by pointer.
    pub when: Vec<ArgumentMatch>,
    /// `gate`: the gate for a matching call, overriding the tool's own.
    pub gate: PolicyGate,
    /// `approvals`: how many distinct people must `approve` a matching call before it runs (a quorum: one
    /// `deny` denies it, and it takes no `edit` or `respond`). `None` when the key is absent: one decision,
    /// of any kind, settles the call. When set it is at least 2 and `gate` is [`PolicyGate::Ask`]: a rule
    /// that allows or forbids puts nothing to people.
    pub approvals: Option<NonZeroU32>,
    /// `grantable` (default true): whether a grant may allow a call this rule decides. False makes its
    /// calls ask every time, and no grant can be made for a tool the rule names. Only a rule whose `gate`
    /// is [`PolicyGate::Ask`] may set the key: a call allowed or forbidden is never put to a grant.
    pub grantable: bool,
}

/// One `when` entry of a policy rule: a JSON pointer into the call's arguments and a glob for the value there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgumentMatch {
    /// A JSON pointer (RFC 6901), e.g. `/path`; `""` is the whole arguments object.
    pub pointer: String,
    /// The glob the value at `pointer` must match.
    pub pattern: Glob,
}

/// The gate a policy rule sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyGate {
    /// `allow`: the call runs without asking.
    Allow,
    /// `ask`: the run stops at the gate for a person's decision.
    Ask,
    /// `forbid`: the call is refused with an error result.
    Forbid,
}

impl PolicyGate {
    /// The value as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyGate::Allow => "allow",
            PolicyGate::Ask => "ask",
            PolicyGate::Forbid => "forbid",
        }
    }
}

/// One `[[webhooks]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// `url` (`http://` or `https://`).
    pub url: String,
    /// `secret` for the `X-Tollgate-Signature` HMAC, when given.
    pub secret: Option<Secret>,
    /// `events`: the event kinds delivered, each once, in config order; every kind when the key is absent.
    pub events: Vec<EventKind>,
}

/// One `[[notify]]` entry: a notifier that tells people a run of one of its agents waits for them, with
/// signed links to decide each held call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyConfig {
    /// `name`: unique among notifiers, of ASCII letters, digits, `_` and `-` (it appears in metrics labels,
    /// signed links and `escalate_to`).
    pub name: String,
    /// `kind` and the keys that belong to it.
    pub kind: NotifyKind,
    /// `agents`: names or globs of the agents whose runs this notifier announces; `*` (every agent) when
    /// the key is absent. Never empty.
    pub agents: Vec<Glob>,
    /// `as`: the actor a decision made through this notifier's signed links is recorded as. With
    /// `[[auth.tokens]]` configured, the name of a token with the `approver` role (or `admin`, which
    /// includes it).
    pub actor: Actor,
    /// `on`: what this notifier is sent, each once, in config order; both when the key is absent. Never
    /// empty. (An agent's `escalate_to` sends the escalation to the notifiers it names whatever this says.)
    pub on: Vec<NotifyOn>,
}

impl NotifyConfig {
    /// Whether one of `agents` (a name or a glob) matches the agent `name`.
    pub fn covers_agent(&self, name: &str) -> bool {
        self.agents.iter().any(|glob| glob.is_match(name))
    }

    /// Whether `on` lists `occasion`.
    pub fn sends_on(&self, occasion: NotifyOn) -> bool {
        self.on.contains(&occasion)
    }
}

/// A notifier's kind with its kind-specific settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotifyKind {
    /// `kind = "slack"`: a Block Kit message posted to an incoming webhook.
    Slack(SlackNotify),
    /// `kind = "email"`: a text and HTML mail sent through an SMTP server.
    Email(EmailNotify),
}

impl NotifyKind {
    /// The `kind` value as written in the config.
    pub fn as_str(&self) -> &'static str {
        match self {
            NotifyKind::Slack(_) => "slack",
            NotifyKind::Email(_) => "email",
        }
    }
}

/// Settings of a `slack` notifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackNotify {
    /// `url`: the incoming-webhook URL, `http://` or `https://`, as given. A secret: whoever has it can post
    /// to the channel, so it is never printed or logged.
    pub url: Secret,
}

/// Settings of an `email` notifier. `username` and `password` are both set or both absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmailNotify {
    /// `host`: the SMTP server's host name or IP address.
    pub host: String,
    /// `port` (default 587 with `starttls`, else 25).
    pub port: u16,
    /// `starttls` (default true): the connection must be upgraded with STARTTLS before anything is sent;
    /// false sends in plain text (a relay on the local network).
    pub starttls: bool,
    /// `username` for SMTP authentication, when given.
    pub username: Option<String>,
    /// `password` for SMTP authentication, given exactly when `username` is.
    pub password: Option<Secret>,
    /// `from`: the sender's mailbox, `addr@domain` or `Name <addr@domain>`, as given (trimmed).
    pub from: String,
    /// `to`: the recipients' mailboxes, at least one, each in the form of `from`, in config order.
    pub to: Vec<String>,
}

/// What a notifier is sent (`on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NotifyOn {
    /// `approval_requested`: a run started waiting at the gate.
    ApprovalRequested,
    /// `escalation`: a run is still waiting after its agent's `escalate_after`.
    Escalation,
}

impl NotifyOn {
    /// Every value, in the order the config documents them (the default of `on`).
    pub const ALL: [NotifyOn; 2] = [NotifyOn::ApprovalRequested, NotifyOn::Escalation];

    /// The value as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyOn::ApprovalRequested => "approval_requested",
            NotifyOn::Escalation => "escalation",
        }
    }

    /// The value named `name`, if any.
    pub fn parse(name: &str) -> Option<NotifyOn> {
        NotifyOn::ALL.into_iter().find(|on| on.as_str() == name)
    }
}

impl fmt::Display for NotifyOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event kind a webhook can subscribe to (docs/events.md): the wire's `EventKind`, the one list of kinds.
pub use tollgate_agent_protocol::EventKind;

/// The password of `scheme://user:password@host/...`, when there is one.
fn url_password(url: &str) -> Option<String> {
    let rest = &url[url.find("://")? + 3..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let credentials = &authority[..authority.rfind('@')?];
    let password = &credentials[credentials.find(':')? + 1..];
    (!password.is_empty()).then(|| password.to_owned())
}

/// `scheme://user:password@host/...` → `scheme://user:***@host/...`; anything else unchanged.
pub(crate) fn redact_url_password(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else { return url.to_owned() };
    let authority_start = scheme_end + 3;
    let rest = &url[authority_start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_len];
    let Some(at) = authority.rfind('@') else { return url.to_owned() };
    let Some(colon) = authority[..at].find(':') else { return url.to_owned() };
    format!("{}{}***{}", &url[..authority_start], &authority[..=colon], &url[authority_start + at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_only_the_password() {
        assert_eq!(redact_url_password("postgres://u:pw@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact_url_password("postgres://u:p@w@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact_url_password("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url_password("postgres://h/db?x=a@b:c"), "postgres://h/db?x=a@b:c");
        assert_eq!(redact_url_password("sqlite:///var/lib/t.db"), "sqlite:///var/lib/t.db");
    }

    #[test]
    fn names_round_trip() {
        for role in Role::ALL {
            assert_eq!(Role::parse(role.as_str()), Some(role));
        }
        assert_eq!(Role::parse("root"), None);
        for on in NotifyOn::ALL {
            assert_eq!(NotifyOn::parse(on.as_str()), Some(on));
        }
        assert_eq!(NotifyOn::parse("run_failed"), None);
    }
}
