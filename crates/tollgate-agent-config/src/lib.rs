//! # tollgate-agent-config
//!
//! Reads `tollgate.toml` (docs/configuration.md, the contract) into a typed, validated [`Config`]: defaults applied,
//! `TOLLGATE_*` overrides applied, `env:NAME` secrets resolved, relative paths made absolute.
//!
//! ```rust
//! use tollgate_agent_config::{ConfigLoader, EnvVars};
//!
//! let toml = r#"
//! [[providers]]
//! name = "openai"
//! kind = "openai"
//! api_key = "env:OPENAI_API_KEY"
//! [[agents]]
//! name = "writer"
//! provider = "openai"
//! model = "gpt-4o-mini"
//! "#;
//! // The environment and the current folder are values: nothing here reads the process's.
//! let env = EnvVars::new().with("OPENAI_API_KEY", "sk-test").with("TOLLGATE_SERVER_ADDR", "0.0.0.0:9000");
//! let loader = ConfigLoader::new(env, "/srv/app");
//! let config = loader.load_str("/srv/app/tollgate.toml", toml)?;
//! assert_eq!(config.agent("writer").and_then(|a| a.model.as_deref()), Some("gpt-4o-mini"));
//! assert_eq!(config.server.addr.port(), 9000); // the override wins
//! assert_eq!(config.store.url, "sqlite:///srv/app/tollgate.db"); // the default, made absolute
//! assert!(!format!("{config:?}").contains("sk-test")); // secrets print as ***
//!
//! let error = loader.load_str("tollgate.toml", "[server]\nlease = \"soon\"\n").unwrap_err();
//! assert!(error.to_string().starts_with("tollgate.toml: server.lease: expected a duration"));
//! # Ok::<(), tollgate_agent_config::ConfigError>(())
//! ```
//!
//! This crate knows nothing of how the rest of Tollgate uses the values; it promises that a [`Config`] it
//! returns satisfies every rule below, and that a [`ConfigError`] names the file (or variable), the key as a
//! dotted path and what was expected — `tollgate.toml: agents[0].on_expiry: expected "deny" or "cancel",
//! got "maybe"` — without ever printing a secret. The CLI exits 2 on it. A binary calls [`load`] instead,
//! with the process's environment and folder (`load(None)` when `--config` is not given), and adds the
//! built-in `demo` agent when [`Config::defines_agents`] is false.
//!
//! ## Discovery
//! `--config FILE` (passed to [`load`] / [`ConfigLoader::with_file`]), else the file named by
//! `TOLLGATE_CONFIG`, else `./tollgate.toml` if it exists, else the built-in defaults ([`defaults`]):
//! SQLite `sqlite://tollgate.db` (a PostgreSQL store waits 5s at most for a connection), server
//! `127.0.0.1:8080`, bodies up to 1 MiB read within 30s, a 30s lease, a 10s header-read and 60s idle timeout,
//! `/readyz` within 2s, 10,000 connections and 16 live-event streams per client, retention 30d
//! (terminal) / 90d (waiting), workspace `./workspace`, grants on (8h unless given, 30d at most), no
//! tokens, providers, MCP servers, agents, webhooks or notifiers. A file named by `--config` or
//! `TOLLGATE_CONFIG` must exist. [`ConfigLoader`] takes the environment and the current folder as values,
//! so tests never touch the process's.
//!
//! ## Overrides
//! The scalar keys of the single-table sections can be overridden by `TOLLGATE_<SECTION>_<KEY>`, which wins
//! over the file and the defaults:
//!
//! | key | variable |
//! |---|---|
//! | `store.url` | `TOLLGATE_STORE_URL` |
//! | `store.connect_timeout` | `TOLLGATE_STORE_CONNECT_TIMEOUT` |
//! | `server.addr` | `TOLLGATE_SERVER_ADDR` |
//! | `server.max_body_bytes` | `TOLLGATE_SERVER_MAX_BODY_BYTES` |
//! | `server.lease` | `TOLLGATE_SERVER_LEASE` |
//! | `server.header_read_timeout` | `TOLLGATE_SERVER_HEADER_READ_TIMEOUT` |
//! | `server.idle_timeout` | `TOLLGATE_SERVER_IDLE_TIMEOUT` |
//! | `server.body_timeout` | `TOLLGATE_SERVER_BODY_TIMEOUT` |
//! | `server.ready_timeout` | `TOLLGATE_SERVER_READY_TIMEOUT` |
//! | `server.max_connections` | `TOLLGATE_SERVER_MAX_CONNECTIONS` |
//! | `server.max_streams_per_client` | `TOLLGATE_SERVER_MAX_STREAMS_PER_CLIENT` |
//! | `server.public_url` | `TOLLGATE_SERVER_PUBLIC_URL` |
//! | `server.link_secret` | `TOLLGATE_SERVER_LINK_SECRET` |
//! | `retention.terminal_after` | `TOLLGATE_RETENTION_TERMINAL_AFTER` |
//! | `retention.waiting_after` | `TOLLGATE_RETENTION_WAITING_AFTER` |
//! | `workspace.root` | `TOLLGATE_WORKSPACE_ROOT` |
//! | `sandbox.mode` | `TOLLGATE_SANDBOX_MODE` |
//! | `privacy.level` | `TOLLGATE_PRIVACY_LEVEL` |
//! | `runtime.workers` | `TOLLGATE_RUNTIME_WORKERS` |
//! | `runtime.max_takeovers` | `TOLLGATE_RUNTIME_MAX_TAKEOVERS` |
//! | `grants.enabled` | `TOLLGATE_GRANTS_ENABLED` |
//! | `grants.default_ttl` | `TOLLGATE_GRANTS_DEFAULT_TTL` |
//! | `grants.max_ttl` | `TOLLGATE_GRANTS_MAX_TTL` |
//! | `telemetry.endpoint` | `TOLLGATE_TELEMETRY_ENDPOINT` |
//! | `telemetry.service_name` | `TOLLGATE_TELEMETRY_SERVICE_NAME` |
//! | `telemetry.sample_ratio` | `TOLLGATE_TELEMETRY_SAMPLE_RATIO` |
//! | `telemetry.content` | `TOLLGATE_TELEMETRY_CONTENT` |
//! | `telemetry.timeout` | `TOLLGATE_TELEMETRY_TIMEOUT` |
//!
//! A variable set to the empty string counts as unset. An override's value is taken literally (no `env:`),
//! is checked like the key it replaces (errors name the variable), and a relative path in it resolves
//! against the current folder, as for any path typed in a shell. Entries of arrays of tables —
//! `[[auth.tokens]]`, `[[providers]]`, `[[mcp_servers]]`, `[[agents]]` (and their `[[agents.policy]]`),
//! `[[webhooks]]`, `[[notify]]` — are **not** overridable: they have no stable name to address; their secrets take
//! `env:NAME` instead. Other `TOLLGATE_*` variables (e.g. `TOLLGATE_TOKEN`, used by the CLI) are ignored.
//!
//! ## Secrets
//! Every secret-valued key — `auth.tokens[].token`, `providers[].api_key`, `webhooks[].secret`, the values
//! of `mcp_servers[].env`, `privacy.keys[].key`, `server.link_secret`, `notify[].url` (a Slack webhook),
//! `notify[].password` (SMTP), and `store.url` (a PostgreSQL URL may hold a password) —
//! takes `env:NAME`,
//! resolved at load (an unset `NAME` is an error naming the key and the variable), or a literal. Secrets are
//! kept as [`Secret`], whose `Debug` and `Display` print `***`. Only MCP `env` values may be empty.
//!
//! ## Security keys (beyond docs/configuration.md)
//! `[sandbox] mode` (`auto` | `required` | `off`, default `auto`; override `TOLLGATE_SANDBOX_MODE`),
//! `agents[].shell_network` (default false), `mcp_servers[].inherit_env` (default false), `[privacy] level`
//! (`full` | `redacted` | `metadata`, default `full`; override `TOLLGATE_PRIVACY_LEVEL`) and
//! `[[privacy.keys]]` (`id`, unique; `key`, 64 hex digits, checked at load without echoing it). Every
//! configured secret's value is listed by [`Config::secret_values`] for the redactor.
//!
//! ## Paths
//! Relative paths — the SQLite file of `store.url`, `workspace.root`, a provider's `script`, an MCP
//! `command` containing `/`, and MCP `args` that are `.`, `..` or start with `./` or `../` — resolve against
//! the config file's folder, or the current folder without a file. `sqlite://tollgate.db` is relative,
//! `sqlite:///var/lib/tollgate.db` absolute; [`StoreConfig::url`] is always the resolved, absolute URL.
//! Files are not checked for existence here (the workspace may not exist yet; a provider reports a missing
//! script).
//!
//! ## Rules beyond the types
//! Unknown keys are errors (naming the key and listing the known ones), as are keys of another provider
//! kind (`script` on an `openai` provider). Names of providers, agents and MCP servers are non-empty, have
//! no spaces, and are unique in their list; token values are distinct. An agent's `provider` names a
//! configured provider, and an agent on an `openai` or `anthropic` provider has a model (its own `model`
//! or the provider's). Durations are positive. Webhook `events` name known event kinds (absent: all).
//! `grants.default_ttl` is at most `grants.max_ttl`. A policy rule's `approvals` (2 or more) and
//! `grantable` are taken only on a rule whose `gate` is `ask`.
//!
//! Notifications (V2.md section 4): `server.public_url` is an `http://` or `https://` URL without query
//! or fragment; `server.link_secret` has at least 32 bytes and is required once any `[[notify]]` is
//! configured. A notifier's `name` is unique and made of `[A-Za-z0-9_-]`; its keys are those of its
//! `kind` (`url` for `slack`; `host`, `port`, `starttls`, `username`, `password`, `from`, `to` for
//! `email`); `username` and `password` come together; `from` and each of `to` (at least one) is a
//! mailbox, `addr@domain` or `Name <addr@domain>` (the mail transport parses them fully); `on` lists
//! `approval_requested` and/or `escalation`; `as` names a token with the `approver` role (or `admin`)
//! when `[[auth.tokens]]` is configured. An agent's `escalate_after` and `escalate_to` come together,
//! and `escalate_to` names configured notifiers.
//!
//! Telemetry (docs/telemetry.md): `[telemetry]` is off unless `endpoint` is set, an `http://` or
//! `https://` OTLP/HTTP base URL (spans go to `{endpoint}/v1/traces`, or to `endpoint` itself when it
//! already ends in `/v1/traces`); `service_name` (default `tollgate`) is non-empty; `sample_ratio` is a
//! number from 0 to 1 (default 1); `content` is a boolean (default false); `timeout` a duration (default
//! 10s).

mod addr;
mod env;
mod error;
#[doc(hidden)]
pub mod fuzzing;

mod load;
mod model;
mod parse;
mod secret;

pub use addr::{AddrError, parse_addr};
pub use env::EnvVars;
pub use error::ConfigError;
pub use load::{ConfigFile, ConfigLoader, FoundBy, load};
pub use model::{
    AgentConfig, ArgumentMatch, AuthConfig, Config, ConfigSource, DataKeyConfig, EmailNotify, EventKind, GrantsConfig,
    HttpProviderConfig, McpCommand, McpServerConfig, NotifyConfig, NotifyKind, NotifyOn, OnExpiry, PolicyGate,
    PolicyRule, PrivacyConfig, PrivacyLevel, ProviderConfig, ProviderKind, RetentionConfig, Role, RuntimeConfig,
    SandboxConfig, SandboxMode, ScriptedProviderConfig, ServerConfig, SlackNotify, StoreBackend, StoreConfig,
    TelemetryConfig, TokenConfig, WebhookConfig, WorkspaceConfig,
};
pub use secret::Secret;
pub use tollgate_agent_protocol::{Actor, Glob};
pub use tollgate_agent_protocol::{DurationError, format_duration, parse_duration};

/// The built-in defaults, used for every key the file (and the environment) leaves out.
pub mod defaults {
    use std::net::{Ipv4Addr, SocketAddr};
    use std::time::Duration;

    /// The file looked for in the current folder.
    pub const CONFIG_FILE: &str = "tollgate.toml";
    /// The variable naming the config file when `--config` is not given.
    pub const CONFIG_ENV: &str = "TOLLGATE_CONFIG";
    /// `store.url`: a SQLite file next to the config file (or in the current folder).
    pub const STORE_URL: &str = "sqlite://tollgate.db";
    /// `server.addr`.
    pub const ADDR: &str = "127.0.0.1:8080";
    /// `server.max_body_bytes`: 1 MiB.
    pub const MAX_BODY_BYTES: u64 = 1_048_576;
    /// `server.lease`.
    pub const LEASE: Duration = Duration::from_secs(30);
    /// `server.header_read_timeout`: a request head must arrive within this once it has begun.
    pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
    /// `server.idle_timeout`: a connection with no request in progress is closed after this.
    pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
    /// `server.body_timeout`: reading one request's body may take this long.
    pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
    /// `server.ready_timeout`: `/readyz` answers within this, whatever the store does.
    pub const READY_TIMEOUT: Duration = Duration::from_secs(2);
    /// `store.connect_timeout`: how long a statement waits for a PostgreSQL connection.
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// `server.max_connections`: below a typical `ulimit -n` of a server host (the server lowers it further
    /// when the process's soft limit on open files is lower).
    pub const MAX_CONNECTIONS: u64 = 10_000;
    /// `server.max_streams_per_client`: live-event streams one client may hold open at once.
    pub const MAX_STREAMS_PER_CLIENT: u64 = 16;
    /// `retention.terminal_after`: 30 days.
    pub const TERMINAL_AFTER: Duration = Duration::from_secs(30 * 86_400);
    /// `retention.waiting_after`: 90 days.
    pub const WAITING_AFTER: Duration = Duration::from_secs(90 * 86_400);
    /// `workspace.root`.
    pub const WORKSPACE_ROOT: &str = "./workspace";
    /// `grants.enabled`.
    pub const GRANTS_ENABLED: bool = true;
    /// `grants.default_ttl`: the life of a grant made without one, 8 hours (a working day).
    pub const GRANT_DEFAULT_TTL: Duration = Duration::from_secs(8 * 3_600);
    /// `grants.max_ttl`: the longest life a grant may be given, 30 days.
    pub const GRANT_MAX_TTL: Duration = Duration::from_secs(30 * 86_400);
    /// `[telemetry] service_name`.
    pub const TELEMETRY_SERVICE_NAME: &str = "tollgate";
    /// `[telemetry] sample_ratio`: every run.
    pub const TELEMETRY_SAMPLE_RATIO: f64 = 1.0;
    /// `[telemetry] timeout`: how long one export of spans may take.
    pub const TELEMETRY_TIMEOUT: Duration = Duration::from_secs(10);
    /// `agents[].max_iterations`.
    pub const MAX_ITERATIONS: u32 = 10;
    /// `providers[].timeout` of one model request (generous: local models can be slow).
    pub const PROVIDER_TIMEOUT: Duration = Duration::from_secs(120);
    /// `providers[].max_retries`.
    pub const MAX_RETRIES: u32 = 3;
    /// `providers[].stream` of an `openai` or `anthropic` provider.
    pub const STREAM: bool = true;
    /// `mcp_servers[].call_timeout`: how long one MCP tool call may take.
    pub const MCP_CALL_TIMEOUT: Duration = Duration::from_secs(60);
    /// `mcp_servers[].start_timeout`: spawning, handshake and tool listing together (generous: `npx -y` may
    /// download the server first).
    pub const MCP_START_TIMEOUT: Duration = Duration::from_secs(60);
    /// `providers[].base_url` of an `openai` provider (includes `/v1`).
    pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
    /// `providers[].base_url` of an `anthropic` provider (without `/v1`).
    pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
    /// `notify[].agents`: every agent.
    pub const NOTIFY_AGENTS: &str = "*";
    /// `notify[].starttls` of an `email` notifier.
    pub const SMTP_STARTTLS: bool = true;
    /// `notify[].port` of an `email` notifier with `starttls = true` (the submission port).
    pub const SMTP_PORT_STARTTLS: u16 = 587;
    /// `notify[].port` of an `email` notifier with `starttls = false` (plain SMTP, a local relay).
    pub const SMTP_PORT_PLAIN: u16 = 25;
    /// The fewest bytes `server.link_secret` may have: an HMAC-SHA256 key of less than the hash's 32 bytes
    /// is weaker than the signature it makes.
    pub const LINK_SECRET_MIN_BYTES: usize = 32;

    /// [`ADDR`] as an address.
    pub fn addr() -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, 8080))
    }
}
