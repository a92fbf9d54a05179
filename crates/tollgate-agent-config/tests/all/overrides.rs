//! `TOLLGATE_<SECTION>_<KEY>` overrides and `env:NAME` secrets.

use std::path::PathBuf;
use std::time::Duration;

use crate::support::{CWD, loader};
use tollgate_agent_config::{ConfigError, ConfigSource, Secret, StoreBackend};

const FILE: &str = r#"
[store]
url = "sqlite://file.db"

[server]
addr = "127.0.0.1:8080"
max_body_bytes = 1000
lease = "30s"

[retention]
terminal_after = "30d"
waiting_after = "90d"

[workspace]
root = "file-workspace"
"#;

const EVERY_OVERRIDE: [(&str, &str); 19] = [
    ("TOLLGATE_STORE_URL", "postgres://tollgate@db:5432/tollgate"),
    ("TOLLGATE_STORE_CONNECT_TIMEOUT", "3s"),
    ("TOLLGATE_SERVER_ADDR", "0.0.0.0:9000"),
    ("TOLLGATE_SERVER_MAX_BODY_BYTES", "2048"),
    ("TOLLGATE_SERVER_LEASE", "2m"),
    ("TOLLGATE_SERVER_HEADER_READ_TIMEOUT", "5s"),
    ("TOLLGATE_SERVER_IDLE_TIMEOUT", "2m"),
    ("TOLLGATE_SERVER_BODY_TIMEOUT", "45s"),
    ("TOLLGATE_SERVER_READY_TIMEOUT", "1s"),
    ("TOLLGATE_SERVER_MAX_CONNECTIONS", "500"),
    ("TOLLGATE_SERVER_MAX_STREAMS_PER_CLIENT", "4"),
    ("TOLLGATE_RETENTION_TERMINAL_AFTER", "7d"),
    ("TOLLGATE_RETENTION_WAITING_AFTER", "14d"),
    ("TOLLGATE_WORKSPACE_ROOT", "/data/workspace"),
    ("TOLLGATE_RUNTIME_WORKERS", "12"),
    ("TOLLGATE_RUNTIME_MAX_TAKEOVERS", "5"),
    ("TOLLGATE_GRANTS_ENABLED", "false"),
    ("TOLLGATE_GRANTS_DEFAULT_TTL", "1h"),
    ("TOLLGATE_GRANTS_MAX_TTL", "2h"),
];

#[test]
fn every_scalar_key_is_overridable_over_the_file() -> anyhow::Result<()> {
    let config = loader(&EVERY_OVERRIDE).load_str("/etc/tollgate/tollgate.toml", FILE)?;
    assert_eq!(config.store.url, "postgres://tollgate@db:5432/tollgate");
    assert_eq!(config.store.backend, StoreBackend::Postgres);
    assert_eq!(config.store.connect_timeout, Duration::from_secs(3));
    assert_eq!(config.server.addr.to_string(), "0.0.0.0:9000");
    assert_eq!(config.server.max_body_bytes, 2048);
    assert_eq!(config.server.lease, Duration::from_secs(120));
    assert_eq!(config.server.header_read_timeout, Duration::from_secs(5));
    assert_eq!(config.server.idle_timeout, Duration::from_secs(120));
    assert_eq!(config.server.body_timeout, Duration::from_secs(45));
    assert_eq!(config.server.ready_timeout, Duration::from_secs(1));
    assert_eq!(config.server.max_connections, 500);
    assert_eq!(config.server.max_streams_per_client, 4);
    assert_eq!(config.retention.terminal_after, Duration::from_secs(7 * 86_400));
    assert_eq!(config.retention.waiting_after, Duration::from_secs(14 * 86_400));
    assert_eq!(config.workspace.root, PathBuf::from("/data/workspace"));
    assert_eq!(config.runtime.workers, Some(12));
    assert_eq!(config.runtime.max_takeovers, Some(5));
    assert!(!config.grants.enabled);
    assert_eq!(
        (config.grants.default_ttl, config.grants.max_ttl),
        (Duration::from_secs(3_600), Duration::from_secs(7_200))
    );
    Ok(())
}

#[test]
fn overrides_apply_without_a_file_too() -> anyhow::Result<()> {
    let config = loader(&EVERY_OVERRIDE).defaults()?;
    assert_eq!(config.source, ConfigSource::Defaults);
    assert_eq!(config.server.addr.to_string(), "0.0.0.0:9000");
    assert_eq!(config.server.max_body_bytes, 2048);
    assert_eq!(config.workspace.root, PathBuf::from("/data/workspace"));
    Ok(())
}

#[test]
fn a_relative_path_in_an_override_resolves_against_the_current_folder() -> anyhow::Result<()> {
    let env = [("TOLLGATE_STORE_URL", "sqlite://env.db"), ("TOLLGATE_WORKSPACE_ROOT", "env-workspace")];
    let config = loader(&env).load_str("/etc/tollgate/tollgate.toml", FILE)?;
    assert_eq!(config.store.url, format!("sqlite://{CWD}/env.db"));
    assert_eq!(config.workspace.root, PathBuf::from(CWD).join("env-workspace"));
    Ok(())
}

#[test]
fn a_blank_override_changes_nothing() -> anyhow::Result<()> {
    let config =
        loader(&[("TOLLGATE_SERVER_ADDR", ""), ("TOLLGATE_SERVER_LEASE", "")]).load_str("tollgate.toml", FILE)?;
    assert_eq!(config.server.addr.to_string(), "127.0.0.1:8080");
    assert_eq!(config.server.lease, Duration::from_secs(30));
    Ok(())
}

#[test]
fn a_bad_override_is_an_error_naming_the_variable() {
    let cases = [
        (
            ("TOLLGATE_SERVER_ADDR", "somewhere"),
            r#"TOLLGATE_SERVER_ADDR: server.addr: expected an address like "127.0.0.1:8080" or "[::1]:8080", got "somewhere""#,
        ),
        (
            ("TOLLGATE_SERVER_MAX_BODY_BYTES", "1MB"),
            r#"TOLLGATE_SERVER_MAX_BODY_BYTES: server.max_body_bytes: expected a positive integer, got "1MB""#,
        ),
        (
            ("TOLLGATE_SERVER_MAX_BODY_BYTES", "0"),
            r#"TOLLGATE_SERVER_MAX_BODY_BYTES: server.max_body_bytes: expected a positive integer, got "0""#,
        ),
        (
            ("TOLLGATE_SERVER_MAX_CONNECTIONS", "0"),
            r#"TOLLGATE_SERVER_MAX_CONNECTIONS: server.max_connections: expected a positive integer, got "0""#,
        ),
        (
            ("TOLLGATE_SERVER_IDLE_TIMEOUT", "soon"),
            r#"TOLLGATE_SERVER_IDLE_TIMEOUT: server.idle_timeout: expected a duration like "30s", "15m", "24h" or "30d", got "soon""#,
        ),
        (
            ("TOLLGATE_RETENTION_WAITING_AFTER", "forever"),
            r#"TOLLGATE_RETENTION_WAITING_AFTER: retention.waiting_after: expected a duration like "30s", "15m", "24h" or "30d", got "forever""#,
        ),
        (
            ("TOLLGATE_GRANTS_ENABLED", "yes"),
            r#"TOLLGATE_GRANTS_ENABLED: grants.enabled: expected true or false, got "yes""#,
        ),
        (
            ("TOLLGATE_GRANTS_MAX_TTL", "1h"),
            r#"TOLLGATE_GRANTS_MAX_TTL: grants.max_ttl: expected a duration of at least grants.default_ttl (8h, the default), got "1h""#,
        ),
        (
            ("TOLLGATE_STORE_URL", "mysql://root:hunter2@db/x"),
            r#"TOLLGATE_STORE_URL: store.url: expected "sqlite://FILE", "sqlite:///ABSOLUTE/FILE" or "postgres://...", got a URL with scheme "mysql""#,
        ),
    ];
    for ((name, value), expected) in cases {
        let result = loader(&[(name, value)]).load_str("tollgate.toml", FILE);
        assert_eq!(result.map_err(|e| e.to_string()).err().as_deref(), Some(expected), "{name}={value}");
    }
}

#[test]
fn other_tollgate_variables_are_ignored() -> anyhow::Result<()> {
    let env = [("TOLLGATE_TOKEN", "abc"), ("TOLLGATE_SERVER_PORT", "1"), ("TOLLGATE_AGENTS_WRITER_MODEL", "x")];
    assert_eq!(loader(&env).load_str("tollgate.toml", FILE)?.server.addr.port(), 8080);
    Ok(())
}

const SECRETS: &str = r#"
[store]
url = "env:DATABASE_URL"

[[auth.tokens]]
name = "alice"
token = "env:ALICE_TOKEN"
roles = ["approver", "runner", "approver"]

[[auth.tokens]]
name = "bot"
token = "literal-token"
roles = ["runner"]

[[providers]]
name = "claude"
kind = "anthropic"
api_key = "env:ANTHROPIC_API_KEY"
model = "claude-sonnet-4-5"

[[mcp_servers]]
name = "gh"
command = "github-mcp"
env = { GITHUB_TOKEN = "env:GH_TOKEN", DEBUG = "" }

[[webhooks]]
url = "https://hooks.example.com/tollgate/"
secret = "env:HOOK_SECRET"
"#;

fn secrets_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("DATABASE_URL", "postgres://u:pw@db/tollgate"),
        ("ALICE_TOKEN", "alice-secret"),
        ("ANTHROPIC_API_KEY", "sk-ant"),
        ("GH_TOKEN", "ghp_x"),
        ("HOOK_SECRET", "hook"),
    ]
}

#[test]
fn env_secrets_are_resolved_and_literals_kept() -> anyhow::Result<()> {
    let config = loader(&secrets_env()).load_str("tollgate.toml", SECRETS)?;
    assert_eq!(config.store.url, "postgres://u:pw@db/tollgate");
    assert_eq!(config.store.redacted_url(), "postgres://u:***@db/tollgate");
    assert!(!format!("{:?}", config.store).contains("pw@"));
    assert_eq!(config.auth.tokens[0].token, Secret::new("alice-secret"));
    assert_eq!(
        config.auth.tokens[0].roles,
        [tollgate_agent_config::Role::Runner, tollgate_agent_config::Role::Approver]
    );
    assert_eq!(config.auth.tokens[1].token.expose(), "literal-token");
    let tollgate_agent_config::ProviderKind::Anthropic(claude) = &config.providers[0].kind else {
        anyhow::bail!("expected anthropic, got {:?}", config.providers[0].kind)
    };
    assert_eq!(claude.api_key.as_ref().map(Secret::expose), Some("sk-ant"));
    assert_eq!(claude.base_url, "https://api.anthropic.com");
    assert_eq!(config.mcp_servers[0].env.get("GITHUB_TOKEN").map(Secret::expose), Some("ghp_x"));
    assert_eq!(config.mcp_servers[0].env.get("DEBUG").map(Secret::expose), Some(""));
    assert_eq!(config.webhooks[0].secret.as_ref().map(Secret::expose), Some("hook"));
    assert_eq!(config.webhooks[0].url, "https://hooks.example.com/tollgate", "trailing slash trimmed");
    assert_eq!(config.webhooks[0].events, tollgate_agent_config::EventKind::ALL, "no events key: every kind");
    Ok(())
}

#[test]
fn a_missing_env_secret_names_the_key_and_the_variable() {
    let cases = [
        ("DATABASE_URL", "tollgate.toml: store.url: environment variable DATABASE_URL is not set"),
        ("ALICE_TOKEN", "tollgate.toml: auth.tokens[0].token: environment variable ALICE_TOKEN is not set"),
        ("ANTHROPIC_API_KEY", "tollgate.toml: providers[0].api_key: environment variable ANTHROPIC_API_KEY is not set"),
        ("GH_TOKEN", "tollgate.toml: mcp_servers[0].env.GITHUB_TOKEN: environment variable GH_TOKEN is not set"),
        ("HOOK_SECRET", "tollgate.toml: webhooks[0].secret: environment variable HOOK_SECRET is not set"),
    ];
    for (missing, expected) in cases {
        let env: Vec<_> = secrets_env().into_iter().filter(|(name, _)| *name != missing).collect();
        let result = loader(&env).load_str("tollgate.toml", SECRETS);
        let Err(error) = result else { panic!("{missing}: expected an error") };
        assert!(matches!(&error, ConfigError::MissingEnvVar { variable, .. } if variable == missing));
        assert_eq!(error.to_string(), expected);
    }
}

#[test]
fn an_empty_env_secret_is_an_error_but_not_for_mcp_env() {
    let mut env = secrets_env();
    env.push(("ALICE_TOKEN", ""));
    let result = loader(&env).load_str("tollgate.toml", SECRETS).map_err(|e| e.to_string());
    assert_eq!(
        result.err().as_deref(),
        Some("tollgate.toml: auth.tokens[0].token: environment variable ALICE_TOKEN is empty")
    );

    let mut env = secrets_env();
    env.push(("GH_TOKEN", ""));
    assert!(loader(&env).load_str("tollgate.toml", SECRETS).is_ok());
}

#[test]
fn an_override_value_is_never_read_as_env_name() -> anyhow::Result<()> {
    let result = loader(&[("TOLLGATE_STORE_URL", "env:DATABASE_URL"), ("DATABASE_URL", "postgres://h/db")])
        .load_str("tollgate.toml", "");
    let Err(error) = result else { anyhow::bail!("expected an error, got {result:?}") };
    assert_eq!(
        error.to_string(),
        r#"TOLLGATE_STORE_URL: store.url: expected "sqlite://FILE", "sqlite:///ABSOLUTE/FILE" or "postgres://...", got a URL with scheme "env""#
    );
    Ok(())
}
