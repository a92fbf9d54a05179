//! The full example of docs/configuration.md (copied verbatim into `fixtures/tollgate.toml`) parses, and every key of it
//! lands where it should, with its secrets resolved and its paths made absolute.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::support::loader;
use tollgate_agent_config::{
    AgentConfig, ArgumentMatch, Config, ConfigSource, EventKind, Glob, HttpProviderConfig, McpCommand, McpServerConfig,
    OnExpiry, PolicyGate, PolicyRule, ProviderConfig, ProviderKind, Role, ScriptedProviderConfig, Secret, StoreBackend,
    TokenConfig, WebhookConfig,
};

const EXAMPLE: &str = include_str!("../fixtures/tollgate.toml");

fn example() -> anyhow::Result<Config> {
    let env = [("ALICE_TOKEN", "alice-secret"), ("OPENAI_API_KEY", "sk-local"), ("HOOK_SECRET", "hook-secret")];
    Ok(loader(&env).load_str("/etc/tollgate/tollgate.toml", EXAMPLE)?)
}

#[test]
fn single_table_sections() -> anyhow::Result<()> {
    let config = example()?;
    assert_eq!(config.source, ConfigSource::File(PathBuf::from("/etc/tollgate/tollgate.toml")));
    assert_eq!(config.base_dir, PathBuf::from("/etc/tollgate"));
    assert_eq!(config.store.url, "sqlite:///etc/tollgate/tollgate.db");
    assert_eq!(config.store.backend, StoreBackend::Sqlite { path: PathBuf::from("/etc/tollgate/tollgate.db") });
    assert_eq!(config.server.addr.to_string(), "127.0.0.1:8080");
    assert_eq!(config.server.max_body_bytes, 1_048_576);
    assert_eq!(config.server.lease, Duration::from_secs(30));
    assert_eq!(config.retention.terminal_after, Duration::from_secs(30 * 86_400));
    assert_eq!(config.retention.waiting_after, Duration::from_secs(90 * 86_400));
    assert_eq!(config.workspace.root, PathBuf::from("/etc/tollgate/workspace"));
    Ok(())
}

#[test]
fn tokens() -> anyhow::Result<()> {
    let config = example()?;
    assert_eq!(
        config.auth.tokens,
        [TokenConfig {
            name: "alice".into(),
            token: Secret::new("alice-secret"),
            roles: vec![Role::Runner, Role::Approver, Role::Admin],
        }]
    );
    Ok(())
}

#[test]
fn providers() -> anyhow::Result<()> {
    let config = example()?;
    assert_eq!(
        config.providers,
        [
            ProviderConfig {
                name: "local".into(),
                model: None,
                kind: ProviderKind::OpenAi(HttpProviderConfig {
                    base_url: "http://127.0.0.1:11434/v1".into(),
                    api_key: Some(Secret::new("sk-local")),
                    timeout: Duration::from_secs(60),
                    max_retries: 3,
                    stream: true,
                }),
            },
            ProviderConfig {
                name: "script".into(),
                model: None,
                kind: ProviderKind::Scripted(ScriptedProviderConfig {
                    script: PathBuf::from("/etc/tollgate/script.json"),
                }),
            },
        ]
    );
    assert_eq!(config.provider("script").map(|p| p.kind.as_str()), Some("scripted"));
    Ok(())
}

#[test]
fn mcp_servers() -> anyhow::Result<()> {
    let config = example()?;
    assert_eq!(
        config.mcp_servers,
        [McpServerConfig {
            name: "files".into(),
            command: McpCommand::Program("npx".into()),
            // `./workspace` is a path; the package name, though it contains `/`, is not.
            args: vec!["-y".into(), "@modelcontextprotocol/server-filesystem".into(), "/etc/tollgate/workspace".into()],
            env: BTreeMap::new(),
            inherit_env: false,
            call_timeout: Duration::from_secs(60),
            start_timeout: Duration::from_secs(60),
        }]
    );
    Ok(())
}

#[test]
fn agents_and_policy() -> anyhow::Result<()> {
    let config = example()?;
    assert!(config.defines_agents());
    let writer = AgentConfig {
        name: "writer".into(),
        provider: "local".into(),
        model: Some("llama3.1".into()),
        system_prompt: Some("You are careful.".into()),
        tools: ["fs_read", "fs_list", "fs_write", "files__*"].map(Glob::new).to_vec(),
        max_iterations: 10,
        max_tokens: Some(200_000),
        approval_ttl: Some(Duration::from_secs(86_400)),
        on_expiry: OnExpiry::Deny,
        forbid_self_approval: false,
        shell_network: false,
        escalate_after: None,
        escalate_after_text: None,
        escalate_to: vec![],
        policy: vec![PolicyRule {
            tool: Glob::new("fs_write"),
            when: vec![ArgumentMatch { pointer: "/path".into(), pattern: Glob::new("notes/**") }],
            gate: PolicyGate::Allow,
            approvals: None,
            grantable: true,
        }],
    };
    assert_eq!(config.agents, [writer]);
    let agent = config.agent("writer").ok_or_else(|| anyhow::anyhow!("no writer"))?;
    assert!(agent.offers_tool("files__read_file"));
    assert!(agent.offers_tool("fs_write"));
    assert!(!agent.offers_tool("shell"));
    Ok(())
}

#[test]
fn webhooks() -> anyhow::Result<()> {
    let config = example()?;
    assert_eq!(
        config.webhooks,
        [WebhookConfig {
            url: "http://127.0.0.1:9000/hook".into(),
            secret: Some(Secret::new("hook-secret")),
            events: vec![EventKind::ApprovalRequested, EventKind::RunCompleted, EventKind::RunFailed],
        }]
    );
    Ok(())
}

#[test]
fn debug_output_hides_every_secret() -> anyhow::Result<()> {
    let config = example()?;
    let debug = format!("{config:?}");
    for secret in ["alice-secret", "sk-local", "hook-secret"] {
        assert!(!debug.contains(secret), "{secret} leaked into {debug}");
    }
    assert!(debug.contains("***"));
    Ok(())
}

/// `stream` defaults to true for the HTTP kinds and can be turned off per provider.
#[test]
fn stream_is_on_unless_a_provider_turns_it_off() -> anyhow::Result<()> {
    let config = crate::support::parse(
        "[[providers]]\nname = \"a\"\nkind = \"openai\"\n\n[[providers]]\nname = \"b\"\nkind = \"anthropic\"\nstream = false\n",
    )?;
    let streams: Vec<bool> = config
        .providers
        .iter()
        .filter_map(|p| match &p.kind {
            ProviderKind::OpenAi(http) | ProviderKind::Anthropic(http) => Some(http.stream),
            ProviderKind::Scripted(_) => None,
        })
        .collect();
    assert_eq!(streams, [true, false]);
    Ok(())
}
