//! From a TOML table (plus `TOLLGATE_<SECTION>_<KEY>` overrides) to a validated [`Config`].
//!
//! The table is walked by hand rather than through `serde` derives so that every error can name the key as a
//! dotted path, say what was expected in the contract's own words, name the environment variable when an
//! override supplied the value, and never echo a secret. The first error found wins; sections are checked
//! in the order docs/configuration.md lists them.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use toml::{Table, Value};

use crate::model::{
    AgentConfig, ArgumentMatch, AuthConfig, Config, ConfigSource, DataKeyConfig, EmailNotify, EventKind, GrantsConfig,
    HttpProviderConfig, McpCommand, McpServerConfig, NotifyConfig, NotifyKind, NotifyOn, OnExpiry, PolicyGate,
    PolicyRule, PrivacyConfig, PrivacyLevel, ProviderConfig, ProviderKind, RetentionConfig, Role, RuntimeConfig,
    SandboxConfig, SandboxMode, ScriptedProviderConfig, ServerConfig, SlackNotify, StoreBackend, StoreConfig,
    TelemetryConfig, TokenConfig, WebhookConfig, WorkspaceConfig,
};
use crate::{Actor, ConfigError, EnvVars, Glob, Secret, defaults, format_duration, parse_addr, parse_duration};
use tollgate_agent_protocol::EXPECTED_DURATION;

type Result<T> = std::result::Result<T, ConfigError>;

const TOP_KEYS: &[&str] = &[
    "store",
    "server",
    "retention",
    "workspace",
    "auth",
    "providers",
    "mcp_servers",
    "agents",
    "webhooks",
    "notify",
    "sandbox",
    "privacy",
    "runtime",
    "grants",
    "telemetry",
];
const PROVIDER_KEYS: &[&str] =
    &["name", "kind", "model", "base_url", "api_key", "timeout", "max_retries", "stream", "script"];
const MCP_SERVER_KEYS: &[&str] = &["name", "command", "args", "env", "inherit_env", "call_timeout", "start_timeout"];
const HTTP_PROVIDER_KEYS: &[&str] = &["base_url", "api_key", "timeout", "max_retries", "stream"];
const SCRIPTED_PROVIDER_KEYS: &[&str] = &["script"];
const AGENT_KEYS: &[&str] = &[
    "name",
    "provider",
    "model",
    "system_prompt",
    "tools",
    "max_iterations",
    "max_tokens",
    "approval_ttl",
    "on_expiry",
    "forbid_self_approval",
    "shell_network",
    "escalate_after",
    "escalate_to",
    "policy",
];
const NOTIFY_COMMON_KEYS: &[&str] = &["name", "kind", "agents", "as", "on"];
const SLACK_NOTIFY_KEYS: &[&str] = &["url"];
const EMAIL_NOTIFY_KEYS: &[&str] = &["host", "port", "starttls", "username", "password", "from", "to"];
const NOTIFY_KEYS: &[&str] =
    &["name", "kind", "agents", "as", "on", "url", "host", "port", "starttls", "username", "password", "from", "to"];
/// What a mailbox must look like, as error messages say it.
const EXPECTED_MAILBOX: &str = r#"a mail address like "ops@example.com" or "Ops <ops@example.com>""#;

/// What the parser needs besides the table: names for messages, variables, and the folders paths are
/// resolved against.
pub(crate) struct Parser<'a> {
    /// The config file as it was named (or a placeholder when there is none), for messages.
    pub origin: &'a str,
    /// Overrides and `env:NAME` secrets.
    pub env: &'a EnvVars,
    /// Relative paths in the file resolve against this folder.
    pub base_dir: &'a Path,
    /// Relative paths given through `TOLLGATE_*` variables resolve against this folder.
    pub current_dir: &'a Path,
}

/// Where a value sits (dotted key) and where it came from (file or variable).
#[derive(Clone, Debug)]
struct At {
    origin: String,
    key: String,
    from_env: bool,
}

impl At {
    fn child(&self, key: &str) -> At {
        let segment = if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            key.to_owned()
        } else {
            format!("{key:?}")
        };
        let key = if self.key.is_empty() { segment } else { format!("{}.{segment}", self.key) };
        At { key, ..self.clone() }
    }

    fn index(&self, i: usize) -> At {
        At { key: format!("{}[{i}]", self.key), ..self.clone() }
    }

    fn invalid(&self, problem: impl Into<String>) -> ConfigError {
        ConfigError::Invalid { origin: self.origin.clone(), key: self.key.clone(), problem: problem.into() }
    }

    fn expected(&self, what: &str, got: &Value) -> ConfigError {
        self.invalid(format!("expected {what}, got {}", describe(got)))
    }

    fn missing(&self, expected: impl Into<String>) -> ConfigError {
        ConfigError::MissingKey { origin: self.origin.clone(), key: self.key.clone(), expected: expected.into() }
    }
}

/// A TOML table at a known place.
struct Section<'t> {
    table: &'t Table,
    at: At,
}

impl<'t> Section<'t> {
    fn of(value: &'t Value, at: At, what: &str) -> Result<Section<'t>> {
        match value {
            Value::Table(table) => Ok(Section { table, at }),
            other => Err(at.expected(what, other)),
        }
    }

    fn check_keys(&self, known: &[&str]) -> Result<()> {
        match self.table.keys().find(|key| !known.contains(&key.as_str())) {
            Some(key) => Err(ConfigError::UnknownKey {
                origin: self.at.origin.clone(),
                key: self.at.child(key).key,
                known: known.join(", "),
            }),
            None => Ok(()),
        }
    }

    fn get(&self, key: &str) -> Option<(&'t Value, At)> {
        self.table.get(key).map(|value| (value, self.at.child(key)))
    }

    fn require(&self, key: &str, expected: &str) -> Result<(&'t Value, At)> {
        self.get(key).ok_or_else(|| self.at.child(key).missing(expected))
    }

    /// The optional array of tables at `key`, each entry as a section; `header` is how the file writes one
    /// entry's header (`agents.policy` for `[[agents.policy]]`).
    fn entries(&self, key: &str, header: &str) -> Result<Vec<Section<'t>>> {
        let Some((value, at)) = self.get(key) else { return Ok(Vec::new()) };
        let Value::Array(items) = value else {
            return Err(at.expected(&format!("an array of tables ([[{header}]])"), value));
        };
        items.iter().enumerate().map(|(i, item)| Section::of(item, at.index(i), "a table")).collect()
    }
}

impl Parser<'_> {
    /// Builds the configuration from `root`, the parsed file (an empty table when there is no file).
    pub(crate) fn build(&self, root: &Table, source: ConfigSource) -> Result<Config> {
        let root =
            Section { table: root, at: At { origin: self.origin.to_owned(), key: String::new(), from_env: false } };
        root.check_keys(TOP_KEYS)?;
        let section = |name: &str| -> Result<Option<Section<'_>>> {
            root.get(name).map(|(value, at)| Section::of(value, at, &format!("a table ([{name}])"))).transpose()
        };
        let store = self.store(section("store")?.as_ref())?;
        let server = self.server(section("server")?.as_ref())?;
        let retention = self.retention(section("retention")?.as_ref())?;
        let workspace = self.workspace(section("workspace")?.as_ref())?;
        let auth = match section("auth")? {
            Some(auth) => self.auth(&auth)?,
            None => AuthConfig::default(),
        };
        let providers = self.providers(&root)?;
        let mcp_servers = self.mcp_servers(&root)?;
        // Before the agents: their `escalate_to` names notifiers.
        let notify = self.notify(&root, &auth)?;
        if let Some(first) = notify.first()
            && server.link_secret.is_none()
        {
            let at = At { origin: self.origin.to_owned(), key: "server.link_secret".into(), from_env: false };
            return Err(at.missing(format!(
                r#"a secret of at least {} bytes (a literal or "env:NAME") to sign the approval links of [[notify]] {:?}"#,
                defaults::LINK_SECRET_MIN_BYTES,
                first.name
            )));
        }
        let agents = self.agents(&root, &providers, &notify)?;
        let webhooks = self.webhooks(&root)?;
        let sandbox = self.sandbox(section("sandbox")?.as_ref())?;
        let privacy = self.privacy(section("privacy")?.as_ref())?;
        let runtime = self.runtime(section("runtime")?.as_ref())?;
        let grants = self.grants(section("grants")?.as_ref())?;
        let telemetry = self.telemetry(section("telemetry")?.as_ref())?;
        Ok(Config {
            source,
            base_dir: self.base_dir.to_path_buf(),
            store,
            server,
            retention,
            workspace,
            auth,
            providers,
            mcp_servers,
            agents,
            webhooks,
            notify,
            sandbox,
            privacy,
            runtime,
            grants,
            telemetry,
        })
    }

    fn telemetry(&self, section: Option<&Section<'_>>) -> Result<TelemetryConfig> {
        if let Some(section) = section {
            section.check_keys(&["endpoint", "service_name", "sample_ratio", "content", "timeout"])?;
        }
        let mut telemetry = TelemetryConfig::default();
        if let Some((value, at)) = self.scalar(section, "telemetry", "endpoint") {
            let url = http_url(&value, &at)?;
            telemetry.endpoint = Some(if url.ends_with("/v1/traces") { url } else { format!("{url}/v1/traces") });
        }
        if let Some((value, at)) = self.scalar(section, "telemetry", "service_name") {
            telemetry.service_name = non_empty(&value, &at)?.to_owned();
        }
        if let Some((value, at)) = self.scalar(section, "telemetry", "sample_ratio") {
            telemetry.sample_ratio = ratio(&value, &at)?;
        }
        if let Some((value, at)) = self.scalar(section, "telemetry", "content") {
            telemetry.content = boolean(&value, &at)?;
        }
        if let Some((value, at)) = self.scalar(section, "telemetry", "timeout") {
            telemetry.timeout = duration(&value, &at)?;
        }
        Ok(telemetry)
    }

    fn grants(&self, section: Option<&Section<'_>>) -> Result<GrantsConfig> {
        if let Some(section) = section {
            section.check_keys(&["enabled", "default_ttl", "max_ttl"])?;
        }
        let enabled = match self.scalar(section, "grants", "enabled") {
            Some((value, at)) => boolean(&value, &at)?,
            None => defaults::GRANTS_ENABLED,
        };
        let default_ttl = self.scalar(section, "grants", "default_ttl");
        let max_ttl = self.scalar(section, "grants", "max_ttl");
        let ttl = |given: &Option<(Cow<'_, Value>, At)>, default: Duration| match given {
            Some((value, at)) => duration(value, at),
            None => Ok(default),
        };
        let grants = GrantsConfig {
            enabled,
            default_ttl: ttl(&default_ttl, defaults::GRANT_DEFAULT_TTL)?,
            max_ttl: ttl(&max_ttl, defaults::GRANT_MAX_TTL)?,
        };
        if grants.default_ttl > grants.max_ttl {
            // The key written is at fault: a `max_ttl` below the default `default_ttl` is the max's doing.
            let shown = |given: &Option<(Cow<'_, Value>, At)>, duration: Duration| match given {
                Some((value, _)) => describe(value),
                None => format!("{}, the default", format_duration(duration)),
            };
            if let Some((value, at)) = &default_ttl {
                return Err(at.invalid(format!(
                    "expected a duration of at most grants.max_ttl ({}), got {}",
                    shown(&max_ttl, grants.max_ttl),
                    describe(value)
                )));
            }
            if let Some((value, at)) = &max_ttl {
                return Err(at.invalid(format!(
                    "expected a duration of at least grants.default_ttl ({}), got {}",
                    shown(&default_ttl, grants.default_ttl),
                    describe(value)
                )));
            }
        }
        Ok(grants)
    }

    fn runtime(&self, section: Option<&Section<'_>>) -> Result<RuntimeConfig> {
        if let Some(section) = section {
            section.check_keys(&["workers", "max_takeovers"])?;
        }
        let workers = match self.scalar(section, "runtime", "workers") {
            Some((value, at)) => Some(positive_integer(&value, &at)?),
            None => None,
        };
        let max_takeovers = match self.scalar(section, "runtime", "max_takeovers") {
            Some((value, at)) => Some(positive_integer(&value, &at)?),
            None => None,
        };
        Ok(RuntimeConfig { workers, max_takeovers })
    }

    fn sandbox(&self, section: Option<&Section<'_>>) -> Result<SandboxConfig> {
        if let Some(section) = section {
            section.check_keys(&["mode"])?;
        }
        let modes = [("auto", SandboxMode::Auto), ("required", SandboxMode::Required), ("off", SandboxMode::Off)];
        let mode = match self.scalar(section, "sandbox", "mode") {
            Some((value, at)) => choice(&value, &at, &modes)?,
            None => SandboxMode::default(),
        };
        Ok(SandboxConfig { mode })
    }

    fn privacy(&self, section: Option<&Section<'_>>) -> Result<PrivacyConfig> {
        if let Some(section) = section {
            section.check_keys(&["level", "keys"])?;
        }
        let levels =
            [("full", PrivacyLevel::Full), ("redacted", PrivacyLevel::Redacted), ("metadata", PrivacyLevel::Metadata)];
        let level = match self.scalar(section, "privacy", "level") {
            Some((value, at)) => choice(&value, &at, &levels)?,
            None => PrivacyLevel::default(),
        };
        let mut keys: Vec<DataKeyConfig> = Vec::new();
        if let Some(section) = section {
            for entry in section.entries("keys", "privacy.keys")? {
                entry.check_keys(&["id", "key"])?;
                let (value, at) = entry.require("id", "the key's id, stored beside what it encrypts")?;
                let id = name(value, &at)?;
                if let Some(i) = keys.iter().position(|k| k.id == id) {
                    return Err(at.invalid(format!("duplicate key id {id:?} (also privacy.keys[{i}].id)")));
                }
                let (value, at) = entry.require("key", r#"32 bytes as 64 hex digits (a literal or "env:NAME")"#)?;
                let key = self.secret(value, &at)?;
                let text = key.expose();
                if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
                    // Only the length: the value is a secret.
                    return Err(at.invalid(format!(
                        "expected 32 bytes as 64 hex digits (e.g. from `openssl rand -hex 32`), got {} characters",
                        text.len()
                    )));
                }
                keys.push(DataKeyConfig { id, key });
            }
        }
        Ok(PrivacyConfig { level, keys })
    }

    /// The value of `[section] key`, or of `TOLLGATE_<SECTION>_<KEY>` when that is set and not empty.
    fn scalar<'t>(&self, section: Option<&Section<'t>>, name: &str, key: &str) -> Option<(Cow<'t, Value>, At)> {
        let var = format!("TOLLGATE_{}_{}", name.to_ascii_uppercase(), key.to_ascii_uppercase());
        if let Some(text) = self.env.get_non_empty(&var) {
            let at = At { origin: var, key: format!("{name}.{key}"), from_env: true };
            return Some((Cow::Owned(Value::String(text.to_owned())), at));
        }
        section.and_then(|s| s.get(key)).map(|(value, at)| (Cow::Borrowed(value), at))
    }

    fn base_for(&self, at: &At) -> &Path {
        if at.from_env { self.current_dir } else { self.base_dir }
    }

    fn store(&self, section: Option<&Section<'_>>) -> Result<StoreConfig> {
        if let Some(section) = section {
            section.check_keys(&["url", "connect_timeout"])?;
        }
        let connect_timeout = match self.scalar(section, "store", "connect_timeout") {
            Some((value, at)) => duration(&value, &at)?,
            None => defaults::CONNECT_TIMEOUT,
        };
        let store = match self.scalar(section, "store", "url") {
            Some((value, at)) => {
                // A PostgreSQL URL may carry a password, so the file may say `env:NAME` here too.
                let url = if at.from_env {
                    string(&value, &at)?.to_owned()
                } else {
                    self.secret(&value, &at)?.expose().to_owned()
                };
                store_url(&url, self.base_for(&at)).map_err(|problem| at.invalid(problem))
            }
            None => store_url(defaults::STORE_URL, self.base_dir).map_err(|problem| {
                At { origin: self.origin.to_owned(), key: "store.url".into(), from_env: false }.invalid(problem)
            }),
        }?;
        Ok(StoreConfig { connect_timeout, ..store })
    }

    fn server(&self, section: Option<&Section<'_>>) -> Result<ServerConfig> {
        if let Some(section) = section {
            section.check_keys(&[
                "addr",
                "max_body_bytes",
                "lease",
                "header_read_timeout",
                "idle_timeout",
                "body_timeout",
                "ready_timeout",
                "max_connections",
                "max_streams_per_client",
                "public_url",
                "link_secret",
            ])?;
        }
        let addr = match self.scalar(section, "server", "addr") {
            Some((value, at)) => parse_addr(string_as(&value, &at, r#"an address like "127.0.0.1:8080""#)?)
                .map_err(|e| at.invalid(e.to_string()))?,
            None => defaults::addr(),
        };
        let max_body_bytes = match self.scalar(section, "server", "max_body_bytes") {
            Some((value, at)) => positive_integer(&value, &at)?,
            None => defaults::MAX_BODY_BYTES,
        };
        let lease = match self.scalar(section, "server", "lease") {
            Some((value, at)) => duration(&value, &at)?,
            None => defaults::LEASE,
        };
        let timeout = |key: &str, default: Duration| match self.scalar(section, "server", key) {
            Some((value, at)) => duration(&value, &at),
            None => Ok(default),
        };
        let header_read_timeout = timeout("header_read_timeout", defaults::HEADER_READ_TIMEOUT)?;
        let idle_timeout = timeout("idle_timeout", defaults::IDLE_TIMEOUT)?;
        let body_timeout = timeout("body_timeout", defaults::BODY_TIMEOUT)?;
        let ready_timeout = timeout("ready_timeout", defaults::READY_TIMEOUT)?;
        let count = |key: &str, default: u64| match self.scalar(section, "server", key) {
            Some((value, at)) => positive_integer(&value, &at),
            None => Ok(default),
        };
        let max_connections = count("max_connections", defaults::MAX_CONNECTIONS)?;
        let max_streams_per_client = count("max_streams_per_client", defaults::MAX_STREAMS_PER_CLIENT)?;
        let public_url =
            self.scalar(section, "server", "public_url").map(|(value, at)| public_url(&value, &at)).transpose()?;
        let link_secret = self
            .scalar(section, "server", "link_secret")
            .map(|(value, at)| self.link_secret(&value, &at))
            .transpose()?;
        Ok(ServerConfig {
            addr,
            max_body_bytes,
            lease,
            header_read_timeout,
            idle_timeout,
            body_timeout,
            ready_timeout,
            max_connections,
            max_streams_per_client,
            public_url,
            link_secret,
        })
    }

    /// `server.link_secret`: a secret of at least [`defaults::LINK_SECRET_MIN_BYTES`] bytes.
    fn link_secret(&self, value: &Value, at: &At) -> Result<Secret> {
        let secret = self.secret(value, at)?;
        let bytes = secret.expose().len();
        if bytes < defaults::LINK_SECRET_MIN_BYTES {
            // Only the length: the value is a secret.
            return Err(at.invalid(format!(
                "expected a secret of at least {} bytes (e.g. from `openssl rand -hex 32`), got {bytes} bytes",
                defaults::LINK_SECRET_MIN_BYTES
            )));
        }
        Ok(secret)
    }

    fn retention(&self, section: Option<&Section<'_>>) -> Result<RetentionConfig> {
        if let Some(section) = section {
            section.check_keys(&["terminal_after", "waiting_after"])?;
        }
        let window = |key: &str, default: Duration| match self.scalar(section, "retention", key) {
            Some((value, at)) => duration(&value, &at),
            None => Ok(default),
        };
        Ok(RetentionConfig {
            terminal_after: window("terminal_after", defaults::TERMINAL_AFTER)?,
            waiting_after: window("waiting_after", defaults::WAITING_AFTER)?,
        })
    }

    fn workspace(&self, section: Option<&Section<'_>>) -> Result<WorkspaceConfig> {
        if let Some(section) = section {
            section.check_keys(&["root"])?;
        }
        let root = match self.scalar(section, "workspace", "root") {
            Some((value, at)) => resolve(self.base_for(&at), non_empty(&value, &at)?),
            None => resolve(self.base_dir, defaults::WORKSPACE_ROOT),
        };
        Ok(WorkspaceConfig { root })
    }

    fn auth(&self, auth: &Section<'_>) -> Result<AuthConfig> {
        auth.check_keys(&["tokens"])?;
        let mut tokens: Vec<TokenConfig> = Vec::new();
        for entry in auth.entries("tokens", "auth.tokens")? {
            entry.check_keys(&["name", "token", "roles"])?;
            let (value, at) = entry.require("name", "the actor name recorded on events")?;
            let name = non_empty(value, &at)?.to_owned();
            let (value, token_at) = entry.require("token", r#"the bearer token (a literal or "env:NAME")"#)?;
            let token = self.secret(value, &token_at)?;
            if let Some(i) = tokens.iter().position(|t| t.token == token) {
                return Err(token_at.invalid(format!("the same token as auth.tokens[{i}].token; tokens must differ")));
            }
            let (value, at) = entry.require("roles", r#"a list of roles ("runner", "approver", "admin")"#)?;
            let roles = roles(value, &at)?;
            tokens.push(TokenConfig { name, token, roles });
        }
        Ok(AuthConfig { tokens })
    }

    fn providers(&self, root: &Section<'_>) -> Result<Vec<ProviderConfig>> {
        let mut providers: Vec<ProviderConfig> = Vec::new();
        for entry in root.entries("providers", "providers")? {
            entry.check_keys(PROVIDER_KEYS)?;
            let (value, at) = entry.require("name", "the provider's name")?;
            let name = name(value, &at)?;
            if let Some(i) = providers.iter().position(|p| p.name == name) {
                return Err(at.invalid(format!("duplicate provider name {name:?} (also providers[{i}].name)")));
            }
            let kinds = [("openai", "openai"), ("anthropic", "anthropic"), ("scripted", "scripted")];
            let (value, at) = entry.require("kind", r#""openai", "anthropic" or "scripted""#)?;
            let kind = choice(value, &at, &kinds)?;
            let model = entry.get("model").map(|(value, at)| non_empty(value, &at).map(str::to_owned)).transpose()?;
            let (allowed, foreign) = match kind {
                "scripted" => (SCRIPTED_PROVIDER_KEYS, HTTP_PROVIDER_KEYS),
                _ => (HTTP_PROVIDER_KEYS, SCRIPTED_PROVIDER_KEYS),
            };
            if let Some(key) = foreign.iter().find(|key| entry.table.contains_key(**key)) {
                let takes = ["name", "kind", "model"].iter().chain(allowed).copied().collect::<Vec<_>>().join(", ");
                return Err(entry.at.child(key).invalid(format!("not used by kind {kind:?} (its keys: {takes})")));
            }
            let kind = match kind {
                "scripted" => {
                    let (value, at) = entry.require("script", "the path of the JSON script")?;
                    ProviderKind::Scripted(ScriptedProviderConfig {
                        script: resolve(self.base_dir, non_empty(value, &at)?),
                    })
                }
                "anthropic" => ProviderKind::Anthropic(self.http_provider(&entry, defaults::ANTHROPIC_BASE_URL)?),
                _ => ProviderKind::OpenAi(self.http_provider(&entry, defaults::OPENAI_BASE_URL)?),
            };
            providers.push(ProviderConfig { name, model, kind });
        }
        Ok(providers)
    }

    fn http_provider(&self, entry: &Section<'_>, default_base_url: &str) -> Result<HttpProviderConfig> {
        let base_url = match entry.get("base_url") {
            Some((value, at)) => http_url(value, &at)?,
            None => default_base_url.to_owned(),
        };
        let api_key = entry.get("api_key").map(|(value, at)| self.secret(value, &at)).transpose()?;
        let timeout = entry.get("timeout").map(|(value, at)| duration(value, &at)).transpose()?;
        let max_retries = match entry.get("max_retries") {
            Some((value, at)) => {
                let n = integer(value, &at, "a whole number of retries (0 or more)", 0)?;
                u32::try_from(n).map_err(|_| at.expected("a whole number of retries (0 or more)", value))?
            }
            None => defaults::MAX_RETRIES,
        };
        let stream = entry.get("stream").map(|(value, at)| boolean(value, &at)).transpose()?;
        Ok(HttpProviderConfig {
            base_url,
            api_key,
            timeout: timeout.unwrap_or(defaults::PROVIDER_TIMEOUT),
            max_retries,
            stream: stream.unwrap_or(defaults::STREAM),
        })
    }

    fn mcp_servers(&self, root: &Section<'_>) -> Result<Vec<McpServerConfig>> {
        let mut servers: Vec<McpServerConfig> = Vec::new();
        for entry in root.entries("mcp_servers", "mcp_servers")? {
            entry.check_keys(MCP_SERVER_KEYS)?;
            let (value, at) = entry.require("name", "the server's name (its tools are SERVER__TOOL)")?;
            let name = name(value, &at)?;
            if let Some(i) = servers.iter().position(|s| s.name == name) {
                return Err(at.invalid(format!("duplicate MCP server name {name:?} (also mcp_servers[{i}].name)")));
            }
            let (value, at) = entry.require("command", "the program to start, or a path to it")?;
            let command = non_empty(value, &at)?;
            let command = if command.contains('/') {
                McpCommand::Path(resolve(self.base_dir, command))
            } else {
                McpCommand::Program(command.to_owned())
            };
            let mut args = Vec::new();
            if let Some((value, at)) = entry.get("args") {
                for (arg, at) in string_list(value, &at)? {
                    args.push(self.mcp_arg(arg, &at)?);
                }
            }
            let mut env = BTreeMap::new();
            if let Some((value, at)) = entry.get("env") {
                let table = Section::of(value, at, "a table of environment variables")?;
                for (key, value) in table.table {
                    let at = table.at.child(key);
                    if key.is_empty() || key.contains(['=', '\0']) {
                        return Err(at.invalid("expected an environment variable name (not empty, no '=')"));
                    }
                    env.insert(key.clone(), self.secret_allowing_empty(value, &at)?);
                }
            }
            let inherit_env = match entry.get("inherit_env") {
                Some((value, at)) => boolean(value, &at)?,
                None => false,
            };
            let timeout = |key: &str, default: Duration| match entry.get(key) {
                Some((value, at)) => duration(value, &at),
                None => Ok(default),
            };
            let call_timeout = timeout("call_timeout", defaults::MCP_CALL_TIMEOUT)?;
            let start_timeout = timeout("start_timeout", defaults::MCP_START_TIMEOUT)?;
            servers.push(McpServerConfig { name, command, args, env, inherit_env, call_timeout, start_timeout });
        }
        Ok(servers)
    }

    /// An argument that is a relative path (`.`, `..`, `./…`, `../…`) is made absolute; other arguments,
    /// `@scope/package` names included, are passed as written.
    fn mcp_arg(&self, arg: &str, at: &At) -> Result<String> {
        let is_relative_path = arg == "." || arg == ".." || arg.starts_with("./") || arg.starts_with("../");
        if !is_relative_path {
            return Ok(arg.to_owned());
        }
        let path = resolve(self.base_dir, arg);
        path.to_str()
            .map(str::to_owned)
            .ok_or_else(|| at.invalid(format!("the resolved path {} is not valid Unicode", path.display())))
    }

    fn agents(
        &self,
        root: &Section<'_>,
        providers: &[ProviderConfig],
        notifiers: &[NotifyConfig],
    ) -> Result<Vec<AgentConfig>> {
        let mut agents: Vec<AgentConfig> = Vec::new();
        for entry in root.entries("agents", "agents")? {
            entry.check_keys(AGENT_KEYS)?;
            let (value, at) = entry.require("name", "the agent's name")?;
            let name = name(value, &at)?;
            if let Some(i) = agents.iter().position(|a| a.name == name) {
                return Err(at.invalid(format!("duplicate agent name {name:?} (also agents[{i}].name)")));
            }
            let (value, at) = entry.require("provider", "the name of a provider defined in [[providers]]")?;
            let provider_name = string(value, &at)?;
            let provider = providers.iter().find(|p| p.name == provider_name).ok_or_else(|| {
                let defined = if providers.is_empty() {
                    "none is defined".to_owned()
                } else {
                    providers.iter().map(|p| format!("{:?}", p.name)).collect::<Vec<_>>().join(", ")
                };
                at.expected(&format!("the name of a provider defined in [[providers]] ({defined})"), value)
            })?;
            let model = entry.get("model").map(|(value, at)| non_empty(value, &at).map(str::to_owned)).transpose()?;
            let model = model.or_else(|| provider.model.clone());
            if model.is_none() && !matches!(provider.kind, ProviderKind::Scripted(_)) {
                return Err(entry.at.child("model").missing(format!(
                    "a model name, since provider {:?} ({}) sets no default model",
                    provider.name,
                    provider.kind.as_str()
                )));
            }
            let system_prompt =
                entry.get("system_prompt").map(|(value, at)| string(value, &at).map(str::to_owned)).transpose()?;
            let tools = match entry.get("tools") {
                Some((value, at)) => string_list(value, &at)?
                    .into_iter()
                    .map(|(text, at)| non_empty_str(text, &at).map(Glob::new))
                    .collect::<Result<Vec<_>>>()?,
                None => Vec::new(),
            };
            let max_iterations = match entry.get("max_iterations") {
                Some((value, at)) => {
                    let n = positive_integer(value, &at)?;
                    u32::try_from(n).map_err(|_| at.expected("a positive integer", value))?
                }
                None => defaults::MAX_ITERATIONS,
            };
            let max_tokens = entry.get("max_tokens").map(|(value, at)| positive_integer(value, &at)).transpose()?;
            let approval_ttl = entry.get("approval_ttl").map(|(value, at)| duration(value, &at)).transpose()?;
            let on_expiry = match entry.get("on_expiry") {
                Some((value, at)) => choice(value, &at, &[("deny", OnExpiry::Deny), ("cancel", OnExpiry::Cancel)])?,
                None => OnExpiry::default(),
            };
            let forbid_self_approval = match entry.get("forbid_self_approval") {
                Some((value, at)) => boolean(value, &at)?,
                None => false,
            };
            let shell_network = match entry.get("shell_network") {
                Some((value, at)) => boolean(value, &at)?,
                None => false,
            };
            let (escalate_after, escalate_to) = escalation(&entry, notifiers)?;
            let policy =
                entry.entries("policy", "agents.policy")?.iter().map(policy_rule).collect::<Result<Vec<_>>>()?;
            agents.push(AgentConfig {
                name,
                provider: provider.name.clone(),
                model,
                system_prompt,
                tools,
                max_iterations,
                max_tokens,
                approval_ttl,
                on_expiry,
                forbid_self_approval,
                shell_network,
                policy,
                escalate_after_text: escalate_after.as_ref().map(|(_, text)| text.clone()),
                escalate_after: escalate_after.map(|(after, _)| after),
                escalate_to,
            });
        }
        Ok(agents)
    }

    fn webhooks(&self, root: &Section<'_>) -> Result<Vec<WebhookConfig>> {
        let mut webhooks = Vec::new();
        for entry in root.entries("webhooks", "webhooks")? {
            entry.check_keys(&["url", "secret", "events"])?;
            let (value, at) = entry.require("url", "the http:// or https:// URL events are posted to")?;
            let url = http_url(value, &at)?;
            let secret = entry.get("secret").map(|(value, at)| self.secret(value, &at)).transpose()?;
            let events = match entry.get("events") {
                Some((value, at)) => {
                    let mut events: Vec<EventKind> = Vec::new();
                    for (name, at) in string_list(value, &at)? {
                        let event = EventKind::parse(name).ok_or_else(|| {
                            let known = EventKind::ALL.map(EventKind::as_str).join(", ");
                            at.invalid(format!("expected an event kind ({known}), got {name:?}"))
                        })?;
                        if !events.contains(&event) {
                            events.push(event);
                        }
                    }
                    if events.is_empty() {
                        return Err(at.invalid("expected at least one event kind (leave `events` out for all of them)"));
                    }
                    events
                }
                None => EventKind::ALL.to_vec(),
            };
            webhooks.push(WebhookConfig { url, secret, events });
        }
        Ok(webhooks)
    }

    fn notify(&self, root: &Section<'_>, auth: &AuthConfig) -> Result<Vec<NotifyConfig>> {
        let mut notifiers: Vec<NotifyConfig> = Vec::new();
        for entry in root.entries("notify", "notify")? {
            entry.check_keys(NOTIFY_KEYS)?;
            let (value, at) = entry.require("name", "the notifier's name (ASCII letters, digits, '_' and '-')")?;
            let name = notifier_name(value, &at)?;
            if let Some(i) = notifiers.iter().position(|n| n.name == name) {
                return Err(at.invalid(format!("duplicate notifier name {name:?} (also notify[{i}].name)")));
            }
            let (value, at) = entry.require("kind", r#""slack" or "email""#)?;
            let kind = choice(value, &at, &[("slack", "slack"), ("email", "email")])?;
            let (allowed, foreign) = match kind {
                "slack" => (SLACK_NOTIFY_KEYS, EMAIL_NOTIFY_KEYS),
                _ => (EMAIL_NOTIFY_KEYS, SLACK_NOTIFY_KEYS),
            };
            if let Some(key) = foreign.iter().find(|key| entry.table.contains_key(**key)) {
                let takes = NOTIFY_COMMON_KEYS.iter().chain(allowed).copied().collect::<Vec<_>>().join(", ");
                return Err(entry.at.child(key).invalid(format!("not used by kind {kind:?} (its keys: {takes})")));
            }
            let agents = match entry.get("agents") {
                Some((value, at)) => {
                    let agents = string_list(value, &at)?
                        .into_iter()
                        .map(|(text, at)| non_empty_str(text, &at).map(Glob::new))
                        .collect::<Result<Vec<_>>>()?;
                    if agents.is_empty() {
                        return Err(
                            at.invalid("expected at least one agent name or glob (leave `agents` out for every agent)")
                        );
                    }
                    agents
                }
                None => vec![Glob::new(defaults::NOTIFY_AGENTS)],
            };
            let actor = notify_actor(&entry, auth)?;
            let on = match entry.get("on") {
                Some((value, at)) => {
                    let options = NotifyOn::ALL.map(|on| (on.as_str(), on));
                    let mut on: Vec<NotifyOn> = Vec::new();
                    for (name, at) in string_list(value, &at)? {
                        let occasion = choice(&Value::String(name.to_owned()), &at, &options)?;
                        if !on.contains(&occasion) {
                            on.push(occasion);
                        }
                    }
                    if on.is_empty() {
                        return Err(at.invalid(
                            r#"expected at least one of "approval_requested" and "escalation" (leave `on` out for both)"#,
                        ));
                    }
                    on
                }
                None => NotifyOn::ALL.to_vec(),
            };
            let kind = match kind {
                "slack" => NotifyKind::Slack(self.slack_notify(&entry)?),
                _ => NotifyKind::Email(self.email_notify(&entry)?),
            };
            notifiers.push(NotifyConfig { name, kind, agents, actor, on });
        }
        Ok(notifiers)
    }

    fn slack_notify(&self, entry: &Section<'_>) -> Result<SlackNotify> {
        let (value, at) = entry.require("url", r#"the Slack incoming-webhook URL (a literal or "env:NAME")"#)?;
        let url = self.secret(value, &at)?;
        if let Some(problem) = secret_url_problem(url.expose()) {
            return Err(at.invalid(format!("expected an http:// or https:// URL, got {problem}")));
        }
        Ok(SlackNotify { url })
    }

    fn email_notify(&self, entry: &Section<'_>) -> Result<EmailNotify> {
        let (value, at) = entry.require("host", "the SMTP server's host name")?;
        let host = non_empty(value, &at)?;
        if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(at.invalid(format!("expected a host name without spaces, got {}", describe(value))));
        }
        let starttls = match entry.get("starttls") {
            Some((value, at)) => boolean(value, &at)?,
            None => defaults::SMTP_STARTTLS,
        };
        let port = match entry.get("port") {
            Some((value, at)) => {
                const WHAT: &str = "a port number (1 to 65535)";
                let n = integer(value, &at, WHAT, 1)?;
                u16::try_from(n).map_err(|_| at.expected(WHAT, value))?
            }
            None if starttls => defaults::SMTP_PORT_STARTTLS,
            None => defaults::SMTP_PORT_PLAIN,
        };
        let username = entry.get("username").map(|(value, at)| non_empty(value, &at).map(str::to_owned)).transpose()?;
        let password = entry.get("password").map(|(value, at)| self.secret(value, &at)).transpose()?;
        match (&username, &password) {
            (Some(_), None) => {
                return Err(entry.at.child("password").missing(format!(
                    r#"the SMTP password (a literal or "env:NAME"), since {}.username is set"#,
                    entry.at.key
                )));
            }
            (None, Some(_)) => {
                return Err(entry
                    .at
                    .child("username")
                    .missing(format!("the SMTP user name, since {}.password is set", entry.at.key)));
            }
            _ => {}
        }
        let (value, at) =
            entry.require("from", r#"the sender's mail address, like "Tollgate <tollgate@example.com>""#)?;
        let from = mailbox(string_as(value, &at, EXPECTED_MAILBOX)?, &at)?;
        let (value, at) =
            entry.require("to", r#"a list of the recipients' mail addresses, like ["ops@example.com"]"#)?;
        let to =
            string_list(value, &at)?.into_iter().map(|(text, at)| mailbox(text, &at)).collect::<Result<Vec<_>>>()?;
        if to.is_empty() {
            return Err(at.invalid("expected at least one mail address, got []"));
        }
        Ok(EmailNotify { host: host.to_owned(), port, starttls, username, password, from, to })
    }

    /// A secret-valued key: `env:NAME` (resolved now; unset is an error naming both) or a literal. Never
    /// empty. A value from a `TOLLGATE_*` override is always literal.
    fn secret(&self, value: &Value, at: &At) -> Result<Secret> {
        let secret = self.secret_allowing_empty(value, at)?;
        if secret.is_empty() {
            return Err(match value.as_str().and_then(|text| text.strip_prefix("env:")) {
                Some(variable) if !at.from_env => at.invalid(format!("environment variable {variable} is empty")),
                _ => at.invalid(r#"expected a non-empty string (a literal or "env:NAME"), got """#),
            });
        }
        Ok(secret)
    }

    fn secret_allowing_empty(&self, value: &Value, at: &At) -> Result<Secret> {
        let Value::String(text) = value else {
            // Only the type: a mistyped secret is still a secret.
            return Err(at.invalid(format!(r#"expected a string (a literal or "env:NAME"), got {}"#, type_name(value))));
        };
        match text.strip_prefix("env:") {
            Some(variable) if !at.from_env => {
                if variable.is_empty() {
                    return Err(at.invalid(r#"expected "env:NAME" with a variable name, got "env:""#));
                }
                match self.env.get(variable) {
                    Some(resolved) => Ok(Secret::new(resolved)),
                    None => Err(ConfigError::MissingEnvVar {
                        origin: at.origin.clone(),
                        key: at.key.clone(),
                        variable: variable.to_owned(),
                    }),
                }
            }
            _ => Ok(Secret::new(text.as_str())),
        }
    }
}

/// A notifier's `as`: with tokens configured, the name of one that may decide calls (the `approver` role,
/// or `admin`, which holds every role); without, any non-empty name.
fn notify_actor(entry: &Section<'_>, auth: &AuthConfig) -> Result<Actor> {
    let may_decide = |roles: &[Role]| roles.contains(&Role::Approver) || roles.contains(&Role::Admin);
    if auth.tokens.is_empty() {
        let (value, at) =
            entry.require("as", "the actor a decision made through the notifier's links is recorded as")?;
        return Ok(Actor::new(non_empty(value, &at)?));
    }
    let (value, at) = entry.require(
        "as",
        "the name of a token in [[auth.tokens]] with the approver role: the actor the notifier's links decide as",
    )?;
    let name = non_empty(value, &at)?;
    let named: Vec<(usize, &TokenConfig)> = auth.tokens.iter().enumerate().filter(|(_, t)| t.name == name).collect();
    if named.iter().any(|(_, token)| may_decide(&token.roles)) {
        return Ok(Actor::new(name));
    }
    if let Some((i, token)) = named.first() {
        let roles = token.roles.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", ");
        return Err(at.invalid(format!(
            "expected the name of a token with the approver role, got {name:?}, whose token (auth.tokens[{i}]) \
             has only {roles}; the notifier's links decide calls as this actor"
        )));
    }
    let mut approvers: Vec<String> = Vec::new();
    for token in auth.tokens.iter().filter(|t| may_decide(&t.roles)) {
        let quoted = format!("{:?}", token.name);
        if !approvers.contains(&quoted) {
            approvers.push(quoted);
        }
    }
    let approvers = if approvers.is_empty() { "no token has it".to_owned() } else { approvers.join(", ") };
    Err(at.expected(&format!("the name of a token in [[auth.tokens]] with the approver role ({approvers})"), value))
}

/// An agent's `escalate_after` (with its text as written) and `escalate_to`.
type Escalation = (Option<(Duration, String)>, Vec<String>);

/// An agent's `escalate_after` and `escalate_to`, which come together: one says when, the other whom to tell.
fn escalation(entry: &Section<'_>, notifiers: &[NotifyConfig]) -> Result<Escalation> {
    let escalate_after = entry
        .get("escalate_after")
        .map(|(value, at)| duration(value, &at).map(|d| (d, value.as_str().unwrap_or_default().trim().to_owned())))
        .transpose()?;
    let mut escalate_to: Vec<String> = Vec::new();
    if let Some((value, at)) = entry.get("escalate_to") {
        for (name, at) in string_list(value, &at)? {
            if !notifiers.iter().any(|n| n.name == name) {
                let defined = if notifiers.is_empty() {
                    "none is defined".to_owned()
                } else {
                    notifiers.iter().map(|n| format!("{:?}", n.name)).collect::<Vec<_>>().join(", ")
                };
                return Err(at.invalid(format!(
                    "expected the name of a notifier defined in [[notify]] ({defined}), got {}",
                    describe(&Value::String(name.to_owned()))
                )));
            }
            if !escalate_to.iter().any(|n| n == name) {
                escalate_to.push(name.to_owned());
            }
        }
        if escalate_to.is_empty() {
            return Err(at.invalid(
                "expected at least one notifier name (leave out escalate_to and escalate_after for no escalation)",
            ));
        }
    }
    match (&escalate_after, escalate_to.is_empty()) {
        (Some(_), true) => Err(entry
            .at
            .child("escalate_to")
            .missing("the names of the [[notify]] entries to tell when a run has waited escalate_after")),
        (None, false) => Err(entry.at.child("escalate_after").missing(format!(
            r#"a duration like "1h": how long a run waits before escalate_to is told ({EXPECTED_DURATION})"#
        ))),
        _ => Ok((escalate_after, escalate_to)),
    }
}

/// A notifier's `name`: it appears in metrics labels, signed links and `escalate_to`.
fn notifier_name(value: &Value, at: &At) -> Result<String> {
    const WHAT: &str = "a name of ASCII letters, digits, '_' and '-'";
    let text = string_as(value, at, WHAT)?;
    if text.is_empty() || !text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(at.expected(WHAT, value));
    }
    Ok(text.to_owned())
}

/// `text` as a mailbox, trimmed; see [`is_mailbox`].
fn mailbox(text: &str, at: &At) -> Result<String> {
    if !is_mailbox(text) {
        return Err(at.invalid(format!("expected {EXPECTED_MAILBOX}, got {}", describe(&Value::String(text.into())))));
    }
    Ok(text.trim().to_owned())
}

/// `local@domain`, or `Display Name <local@domain>` (the name may be empty or quoted). A shape check only,
/// so that a typo fails at load rather than at the first mail: exactly one `@` with text on both sides, no
/// spaces or angle brackets in the address, no control character anywhere (a line break would start a new
/// mail header). The mail transport parses the mailbox fully when it sends.
fn is_mailbox(text: &str) -> bool {
    if text.chars().any(char::is_control) {
        return false;
    }
    let text = text.trim();
    let address = match text.strip_suffix('>') {
        Some(rest) => match rest.rsplit_once('<') {
            Some((name, address)) if !name.contains(['<', '>']) => address,
            _ => return false,
        },
        None => text,
    };
    let Some((local, domain)) = address.split_once('@') else { return false };
    !local.is_empty()
        && !domain.is_empty()
        && !domain.contains('@')
        && !address.chars().any(|c| c.is_whitespace() || matches!(c, '<' | '>' | ','))
}

/// What is wrong with a secret-valued URL that should be `http://` or `https://` with a host, said
/// without repeating the URL (only its scheme): `None` when nothing is.
fn secret_url_problem(url: &str) -> Option<String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Some("a value that is not a URL (not shown: the key is secret-valued)".to_owned());
    };
    if !matches!(scheme, "http" | "https") {
        if !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) {
            return Some(format!("a URL with scheme {scheme:?}"));
        }
        return Some("a value that is not a URL (not shown: the key is secret-valued)".to_owned());
    }
    if rest.is_empty() || rest.starts_with('/') || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some(format!("a {scheme}:// URL without a host, or with spaces (not shown: the key is secret-valued)"));
    }
    None
}

/// `server.public_url`: where people reach the server, which links start with. `http://` or `https://`,
/// a host, no user name or password, no query or fragment (a path is appended to it), no spaces; a
/// trailing `/` is dropped.
fn public_url(value: &Value, at: &At) -> Result<String> {
    const WHAT: &str = "an http:// or https:// URL without a query or fragment, like \"https://tollgate.example.com\"";
    let url = string_as(value, at, WHAT)?;
    let Some(rest) = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://")) else {
        return Err(at.expected(WHAT, value));
    };
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let fine = !authority.is_empty()
        && !authority.starts_with(':')
        && !authority.contains('@')
        && !url.contains(['?', '#'])
        && !url.chars().any(|c| c.is_whitespace() || c.is_control());
    if !fine {
        return Err(at.expected(WHAT, value));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

fn policy_rule(entry: &Section<'_>) -> Result<PolicyRule> {
    entry.check_keys(&["tool", "when", "gate", "approvals", "grantable"])?;
    let (value, at) = entry.require("tool", "a tool name or glob")?;
    let tool = Glob::new(non_empty(value, &at)?);
    let mut when = Vec::new();
    if let Some((value, at)) = entry.get("when") {
        let table = Section::of(value, at, r#"a table of JSON pointer = glob, e.g. { "/path" = "notes/**" }"#)?;
        for (pointer, pattern) in table.table {
            let at = table.at.child(pointer);
            if !is_json_pointer(pointer) {
                return Err(at.invalid(format!(
                    r#"expected a JSON pointer into the arguments, like "/path" (empty, or starting with "/"), got {pointer:?}"#
                )));
            }
            let pattern = Glob::new(string_as(pattern, &at, "a glob for the argument's value")?);
            when.push(ArgumentMatch { pointer: pointer.clone(), pattern });
        }
    }
    let gates = [("allow", PolicyGate::Allow), ("ask", PolicyGate::Ask), ("forbid", PolicyGate::Forbid)];
    let (value, at) = entry.require("gate", r#""allow", "ask" or "forbid""#)?;
    let gate = choice(value, &at, &gates)?;
    let approvals = entry.get("approvals").map(|(value, at)| quorum(value, &at, gate)).transpose()?;
    let grantable = match entry.get("grantable") {
        Some((value, at)) => {
            let grantable = boolean(value, &at)?;
            if gate != PolicyGate::Ask {
                // A call the rule allows or forbids never reaches a grant, so the key would say nothing.
                return Err(at.invalid(format!(
                    r#"only a rule with gate = "ask" takes grantable; this rule's gate is "{}""#,
                    gate.as_str()
                )));
            }
            grantable
        }
        None => true,
    };
    Ok(PolicyRule { tool, when, gate, approvals, grantable })
}

/// A rule's `approvals`: 2 or more, on a rule that asks. 1 is refused rather than taken as the default it
/// equals, so that a rule that says `approvals` always means a quorum.
fn quorum(value: &Value, at: &At, gate: PolicyGate) -> Result<NonZeroU32> {
    const WHAT: &str = "an integer of 2 or more (leave `approvals` out for a single decision)";
    let n = integer(value, at, WHAT, 2)?;
    let n = u32::try_from(n).ok().and_then(NonZeroU32::new).ok_or_else(|| at.expected(WHAT, value))?;
    if gate != PolicyGate::Ask {
        // A call the rule allows or forbids is put to nobody, so there is no one to count.
        return Err(at.invalid(format!(
            r#"only a rule with gate = "ask" takes approvals; this rule's gate is "{}""#,
            gate.as_str()
        )));
    }
    Ok(n)
}

/// RFC 6901: empty, or `/`-separated tokens where `~` appears only as `~0` or `~1`.
fn is_json_pointer(pointer: &str) -> bool {
    if pointer.is_empty() {
        return true;
    }
    if !pointer.starts_with('/') {
        return false;
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return false;
        }
    }
    true
}

fn roles(value: &Value, at: &At) -> Result<Vec<Role>> {
    let names = string_list(value, at)?;
    if names.is_empty() {
        return Err(at.invalid(r#"expected at least one role ("runner", "approver", "admin"), got []"#));
    }
    let options = Role::ALL.map(|role| (role.as_str(), role));
    let mut roles = names
        .into_iter()
        .map(|(name, at)| choice(&Value::String(name.to_owned()), &at, &options))
        .collect::<Result<Vec<_>>>()?;
    roles.sort();
    roles.dedup();
    Ok(roles)
}

/// Resolves a store URL: a relative SQLite file against `base`; PostgreSQL as is. The problem text never
/// repeats the URL beyond its scheme, since URLs may hold passwords.
fn store_url(url: &str, base: &Path) -> std::result::Result<StoreConfig, String> {
    const EXPECTED: &str = r#"expected "sqlite://FILE", "sqlite:///ABSOLUTE/FILE" or "postgres://...""#;
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(StoreConfig {
            url: url.to_owned(),
            backend: StoreBackend::Postgres,
            connect_timeout: defaults::CONNECT_TIMEOUT,
        });
    }
    let Some(rest) = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")) else {
        return Err(match url.split_once(':') {
            Some((scheme, _)) => format!("{EXPECTED}, got a URL with scheme {scheme:?}"),
            None => format!("{EXPECTED}, got {url:?}"),
        });
    };
    let (file, query) = match rest.split_once('?') {
        Some((file, query)) => (file, Some(query)),
        None => (rest, None),
    };
    if file == ":memory:" {
        return Ok(StoreConfig {
            url: url.to_owned(),
            backend: StoreBackend::SqliteInMemory,
            connect_timeout: defaults::CONNECT_TIMEOUT,
        });
    }
    if file.is_empty() {
        return Err(format!("{EXPECTED}, got a SQLite URL without a file name"));
    }
    let decoded =
        percent_decode(file).ok_or_else(|| format!("{EXPECTED}, got a SQLite file name with bad %-escapes"))?;
    let path = resolve(base, &decoded);
    let text =
        path.to_str().ok_or_else(|| format!("the SQLite file {} is not a valid Unicode path", path.display()))?;
    let mut resolved = format!("sqlite://{}", percent_encode(text));
    if let Some(query) = query {
        resolved.push('?');
        resolved.push_str(query);
    }
    Ok(StoreConfig {
        url: resolved,
        backend: StoreBackend::Sqlite { path },
        connect_timeout: defaults::CONNECT_TIMEOUT,
    })
}

/// `%XX` escapes, as sqlx decodes the file part of a SQLite URL.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Escapes what would otherwise end or alter the file part of a SQLite URL.
fn percent_encode(path: &str) -> String {
    path.replace('%', "%25").replace('?', "%3F").replace('#', "%23")
}

/// `base/path` (or `path` when absolute), without `.` components.
pub(crate) fn resolve(base: &Path, path: impl AsRef<Path>) -> PathBuf {
    base.join(path).components().filter(|c| !matches!(c, Component::CurDir)).collect()
}

fn http_url(value: &Value, at: &At) -> Result<String> {
    const WHAT: &str = "an http:// or https:// URL";
    let url = string_as(value, at, WHAT)?;
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => Ok(url.trim_end_matches('/').to_owned()),
        _ => Err(at.expected(WHAT, value)),
    }
}

fn string<'v>(value: &'v Value, at: &At) -> Result<&'v str> {
    string_as(value, at, "a string")
}

fn string_as<'v>(value: &'v Value, at: &At, what: &str) -> Result<&'v str> {
    match value {
        Value::String(text) => Ok(text),
        other => Err(at.expected(what, other)),
    }
}

fn non_empty<'v>(value: &'v Value, at: &At) -> Result<&'v str> {
    non_empty_str(string_as(value, at, "a non-empty string")?, at)
}

fn non_empty_str<'v>(text: &'v str, at: &At) -> Result<&'v str> {
    if text.trim().is_empty() {
        return Err(at.invalid(format!("expected a non-empty string, got {text:?}")));
    }
    Ok(text)
}

/// Names of agents, providers and MCP servers appear in URLs, tool names and command lines: no spaces.
fn name(value: &Value, at: &At) -> Result<String> {
    let text = non_empty(value, at)?;
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(at.invalid(format!("expected a name without spaces, got {text:?}")));
    }
    Ok(text.to_owned())
}

fn string_list<'v>(value: &'v Value, at: &At) -> Result<Vec<(&'v str, At)>> {
    let Value::Array(items) = value else { return Err(at.expected("a list of strings", value)) };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let at = at.index(i);
            string(item, &at).map(|text| (text, at))
        })
        .collect()
}

fn choice<T: Copy>(value: &Value, at: &At, options: &[(&str, T)]) -> Result<T> {
    let names: Vec<String> = options.iter().map(|(name, _)| format!("{name:?}")).collect();
    let expected = match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => "nothing".to_owned(),
    };
    let text = string_as(value, at, &expected)?;
    options.iter().find(|(name, _)| *name == text).map(|(_, v)| *v).ok_or_else(|| at.expected(&expected, value))
}

/// A number from 0 to 1 (an integer 0 or 1 too); from a `TOLLGATE_*` variable, its decimal text.
fn ratio(value: &Value, at: &At) -> Result<f64> {
    const WHAT: &str = "a number from 0 to 1";
    let n = match value {
        Value::Float(n) => Some(*n),
        Value::Integer(n) => Some(*n as f64),
        Value::String(text) if at.from_env => text.trim().parse::<f64>().ok(),
        _ => None,
    };
    match n {
        Some(n) if (0.0..=1.0).contains(&n) => Ok(n),
        _ => Err(at.expected(WHAT, value)),
    }
}

/// `true` or `false`; from a `TOLLGATE_*` variable, that text.
fn boolean(value: &Value, at: &At) -> Result<bool> {
    match value {
        Value::Boolean(b) => Ok(*b),
        Value::String(text) if at.from_env && matches!(text.as_str(), "true" | "false") => Ok(text == "true"),
        other => Err(at.expected("true or false", other)),
    }
}

/// A positive duration: zero would make a lease, a timeout or a window meaningless.
fn duration(value: &Value, at: &At) -> Result<Duration> {
    let text = string_as(value, at, EXPECTED_DURATION)?;
    let duration = parse_duration(text).map_err(|e| at.invalid(e.to_string()))?;
    if duration.is_zero() {
        return Err(at.invalid(format!("expected a duration greater than zero, got {text:?}")));
    }
    Ok(duration)
}

fn positive_integer(value: &Value, at: &At) -> Result<u64> {
    integer(value, at, "a positive integer", 1)
}

/// An integer of at least `min`; from a `TOLLGATE_*` variable, its decimal text.
fn integer(value: &Value, at: &At, what: &str, min: i64) -> Result<u64> {
    let n = match value {
        Value::Integer(n) => Some(*n),
        Value::String(text) if at.from_env => text.parse::<i64>().ok(),
        _ => None,
    };
    match n {
        Some(n) if n >= min => u64::try_from(n).map_err(|_| at.expected(what, value)),
        _ => Err(at.expected(what, value)),
    }
}

/// A value as an error message shows it: scalars as written (strings quoted, long ones cut), containers by
/// kind.
fn describe(value: &Value) -> String {
    match value {
        Value::String(text) if text.chars().count() > 80 => {
            format!("{:?}…", text.chars().take(80).collect::<String>())
        }
        Value::String(text) => format!("{text:?}"),
        Value::Integer(n) => n.to_string(),
        Value::Float(x) => x.to_string(),
        Value::Boolean(b) => b.to_string(),
        Value::Datetime(d) => d.to_string(),
        Value::Array(_) | Value::Table(_) => type_name(value).to_owned(),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a datetime",
        Value::Array(_) => "an array",
        Value::Table(_) => "a table",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_pointers() {
        for ok in ["", "/", "/path", "/a/b", "/a~0b", "/a~1b", "/0"] {
            assert!(is_json_pointer(ok), "{ok:?}");
        }
        for bad in ["path", "a/b", "/a~", "/a~2", "~0"] {
            assert!(!is_json_pointer(bad), "{bad:?}");
        }
    }

    #[test]
    fn mailboxes() {
        for ok in [
            "ops@example.com",
            "a@b",
            " ops@example.com ",
            "Tollgate <tollgate@example.com>",
            "<ops@example.com>",
            "\"Doe, Jane\" <jane@example.com>",
            "first.last+tag@sub.example.co.uk",
        ] {
            assert!(is_mailbox(ok), "{ok:?}");
        }
        for bad in [
            "",
            "ops",
            "@example.com",
            "ops@",
            "a@b@c",
            "ops @example.com",
            "a@b, c@d",
            "Ops <ops@example.com",
            "Ops ops@example.com>",
            "Ops <>",
            "A <b> <c@d>",
            "Ops <ops@example.com>\r\nBcc: x@y",
            "ops@example.com\n",
        ] {
            assert!(!is_mailbox(bad), "{bad:?}");
        }
    }

    #[test]
    fn secret_urls_are_judged_without_being_repeated() {
        assert_eq!(secret_url_problem("https://hooks.slack.com/services/T/B/x"), None);
        assert_eq!(secret_url_problem("http://127.0.0.1:9/x"), None);
        assert_eq!(secret_url_problem("ftp://h/x").as_deref(), Some(r#"a URL with scheme "ftp""#));
        for bad in ["hooks.slack.com/services/T/B/x", "https://", "https:///x", "https://h/a b"] {
            let problem = secret_url_problem(bad).unwrap_or_default();
            assert!(!problem.is_empty() && !problem.contains("slack") && !problem.contains("a b"), "{bad}: {problem}");
        }
    }

    #[test]
    fn sqlite_urls_resolve_against_the_base() {
        let base = Path::new("/etc/tollgate");
        let cases = [
            ("sqlite://tollgate.db", "sqlite:///etc/tollgate/tollgate.db", "/etc/tollgate/tollgate.db"),
            ("sqlite://./data/t.db", "sqlite:///etc/tollgate/data/t.db", "/etc/tollgate/data/t.db"),
            ("sqlite://../t.db", "sqlite:///etc/tollgate/../t.db", "/etc/tollgate/../t.db"),
            ("sqlite:///var/lib/tollgate.db", "sqlite:///var/lib/tollgate.db", "/var/lib/tollgate.db"),
            ("sqlite:t.db?mode=rwc", "sqlite:///etc/tollgate/t.db?mode=rwc", "/etc/tollgate/t.db"),
            ("sqlite://a%3Fb.db", "sqlite:///etc/tollgate/a%3Fb.db", "/etc/tollgate/a?b.db"),
        ];
        for (url, resolved, path) in cases {
            let store = store_url(url, base);
            assert_eq!(
                store,
                Ok(StoreConfig {
                    url: resolved.to_owned(),
                    backend: StoreBackend::Sqlite { path: PathBuf::from(path) },
                    connect_timeout: defaults::CONNECT_TIMEOUT,
                }),
                "{url}"
            );
        }
        let odd_base = Path::new("/srv/50%#1");
        assert_eq!(store_url("sqlite://t.db", odd_base).map(|s| s.url), Ok("sqlite:///srv/50%25%231/t.db".to_owned()));
    }

    #[test]
    fn other_store_urls() {
        let base = Path::new("/x");
        assert_eq!(store_url("sqlite::memory:", base).map(|s| s.backend), Ok(StoreBackend::SqliteInMemory));
        assert_eq!(store_url("sqlite://:memory:", base).map(|s| s.backend), Ok(StoreBackend::SqliteInMemory));
        let pg = "postgresql://u:pw@db:5432/tollgate";
        assert_eq!(
            store_url(pg, base),
            Ok(StoreConfig {
                url: pg.to_owned(),
                backend: StoreBackend::Postgres,
                connect_timeout: defaults::CONNECT_TIMEOUT
            })
        );
        assert_eq!(
            store_url("mysql://root:hunter2@db/x", base),
            Err(r#"expected "sqlite://FILE", "sqlite:///ABSOLUTE/FILE" or "postgres://...", got a URL with scheme "mysql""#.to_owned())
        );
        assert!(store_url("sqlite://", base).is_err());
        assert!(store_url("sqlite://%zz", base).is_err());
    }
}
