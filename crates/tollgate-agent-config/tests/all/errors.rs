//! Every rule of the contract, broken once, gives a message naming the file, the key and what was expected.

use crate::support::{check, error, loader, parse};
use std::time::Duration;
use tollgate_agent_config::ConfigError;

const PROVIDER: &str = "[[providers]]\nname = \"local\"\nkind = \"openai\"\n";

/// `PROVIDER`, then an agent on it with `agent_extra` keys, then `rest`.
fn with_agent(agent_extra: &str, rest: &str) -> String {
    format!("{PROVIDER}\n[[agents]]\nname = \"writer\"\nprovider = \"local\"\nmodel = \"m\"\n{agent_extra}\n{rest}")
}

#[test]
fn enumerated_values() {
    check(&[
        (
            "on_expiry",
            with_agent("on_expiry = \"maybe\"", ""),
            r#"tollgate.toml: agents[0].on_expiry: expected "deny" or "cancel", got "maybe""#,
        ),
        (
            "on_expiry of the second agent",
            with_agent("", "[[agents]]\nname = \"b\"\nprovider = \"local\"\nmodel = \"m\"\non_expiry = 1\n"),
            r#"tollgate.toml: agents[1].on_expiry: expected "deny" or "cancel", got 1"#,
        ),
        (
            "gate",
            with_agent("[[agents.policy]]\ntool = \"shell\"\ngate = \"deny\"", ""),
            r#"tollgate.toml: agents[0].policy[0].gate: expected "allow", "ask" or "forbid", got "deny""#,
        ),
        (
            "provider kind",
            "[[providers]]\nname = \"x\"\nkind = \"ollama\"\n".into(),
            r#"tollgate.toml: providers[0].kind: expected "openai", "anthropic" or "scripted", got "ollama""#,
        ),
        (
            "role",
            "[[auth.tokens]]\nname = \"a\"\ntoken = \"t\"\nroles = [\"runner\", \"root\"]\n".into(),
            r#"tollgate.toml: auth.tokens[0].roles[1]: expected "runner", "approver" or "admin", got "root""#,
        ),
        (
            "webhook event",
            "[[webhooks]]\nurl = \"http://h/x\"\nevents = [\"run_done\"]\n".into(),
            "tollgate.toml: webhooks[0].events[0]: expected an event kind (run_started, model_request, \
             model_response, tool_started, tool_finished, approval_requested, decision, approval_escalated, run_resumed, \
             run_taken_over, run_completed, run_failed, run_cancelled, run_expired), got \"run_done\"",
        ),
    ]);
}

#[test]
fn references_and_uniqueness() {
    check(&[
        (
            "unknown provider",
            with_agent("", "[[agents]]\nname = \"b\"\nprovider = \"remote\"\n"),
            r#"tollgate.toml: agents[1].provider: expected the name of a provider defined in [[providers]] ("local"), got "remote""#,
        ),
        (
            "no provider at all",
            "[[agents]]\nname = \"a\"\nprovider = \"local\"\n".into(),
            r#"tollgate.toml: agents[0].provider: expected the name of a provider defined in [[providers]] (none is defined), got "local""#,
        ),
        (
            "duplicate agent",
            with_agent("", "[[agents]]\nname = \"writer\"\nprovider = \"local\"\n"),
            r#"tollgate.toml: agents[1].name: duplicate agent name "writer" (also agents[0].name)"#,
        ),
        (
            "duplicate provider",
            format!("{PROVIDER}{PROVIDER}"),
            r#"tollgate.toml: providers[1].name: duplicate provider name "local" (also providers[0].name)"#,
        ),
        (
            "duplicate MCP server",
            "[[mcp_servers]]\nname = \"f\"\ncommand = \"a\"\n[[mcp_servers]]\nname = \"f\"\ncommand = \"b\"\n".into(),
            r#"tollgate.toml: mcp_servers[1].name: duplicate MCP server name "f" (also mcp_servers[0].name)"#,
        ),
        (
            "duplicate token",
            "[[auth.tokens]]\nname = \"a\"\ntoken = \"same\"\nroles = [\"runner\"]\n\
             [[auth.tokens]]\nname = \"b\"\ntoken = \"same\"\nroles = [\"admin\"]\n"
                .into(),
            "tollgate.toml: auth.tokens[1].token: the same token as auth.tokens[0].token; tokens must differ",
        ),
    ]);
}

#[test]
fn required_keys() {
    check(&[
        (
            "model for an openai agent",
            format!("{PROVIDER}[[agents]]\nname = \"a\"\nprovider = \"local\"\n"),
            r#"tollgate.toml: agents[0].model: missing, expected a model name, since provider "local" (openai) sets no default model"#,
        ),
        (
            "script for a scripted provider",
            "[[providers]]\nname = \"s\"\nkind = \"scripted\"\n".into(),
            "tollgate.toml: providers[0].script: missing, expected the path of the JSON script",
        ),
        (
            "agent name",
            format!("{PROVIDER}[[agents]]\nprovider = \"local\"\n"),
            "tollgate.toml: agents[0].name: missing, expected the agent's name",
        ),
        (
            "token roles",
            "[[auth.tokens]]\nname = \"a\"\ntoken = \"t\"\n".into(),
            r#"tollgate.toml: auth.tokens[0].roles: missing, expected a list of roles ("runner", "approver", "admin")"#,
        ),
        (
            "policy gate",
            with_agent("[[agents.policy]]\ntool = \"shell\"", ""),
            r#"tollgate.toml: agents[0].policy[0].gate: missing, expected "allow", "ask" or "forbid""#,
        ),
        (
            "webhook url",
            "[[webhooks]]\nevents = [\"decision\"]\n".into(),
            "tollgate.toml: webhooks[0].url: missing, expected the http:// or https:// URL events are posted to",
        ),
    ]);
}

#[test]
fn values_out_of_range_or_of_the_wrong_type() {
    check(&[
        (
            "addr",
            "[server]\naddr = \"localhost\"\n".into(),
            r#"tollgate.toml: server.addr: expected an address like "127.0.0.1:8080" or "[::1]:8080", got "localhost""#,
        ),
        (
            "addr type",
            "[server]\naddr = 8080\n".into(),
            r#"tollgate.toml: server.addr: expected an address like "127.0.0.1:8080", got 8080"#,
        ),
        (
            "max_body_bytes zero",
            "[server]\nmax_body_bytes = 0\n".into(),
            "tollgate.toml: server.max_body_bytes: expected a positive integer, got 0",
        ),
        (
            "max_body_bytes as text",
            "[server]\nmax_body_bytes = \"1MB\"\n".into(),
            r#"tollgate.toml: server.max_body_bytes: expected a positive integer, got "1MB""#,
        ),
        (
            "lease without unit",
            "[server]\nlease = \"30\"\n".into(),
            r#"tollgate.toml: server.lease: expected a duration like "30s", "15m", "24h" or "30d", got "30""#,
        ),
        (
            "lease as integer",
            "[server]\nlease = 30\n".into(),
            r#"tollgate.toml: server.lease: expected a duration like "30s", "15m", "24h" or "30d", got 30"#,
        ),
        (
            "zero retention",
            "[retention]\nterminal_after = \"0d\"\n".into(),
            r#"tollgate.toml: retention.terminal_after: expected a duration greater than zero, got "0d""#,
        ),
        (
            "approval_ttl",
            with_agent("approval_ttl = \"1 day\"", ""),
            r#"tollgate.toml: agents[0].approval_ttl: expected a duration like "30s", "15m", "24h" or "30d", got "1 day""#,
        ),
        (
            "provider timeout",
            "[[providers]]\nname = \"p\"\nkind = \"openai\"\ntimeout = \"1.5s\"\n".into(),
            r#"tollgate.toml: providers[0].timeout: expected a duration like "30s", "15m", "24h" or "30d", got "1.5s""#,
        ),
        (
            "max_retries negative",
            "[[providers]]\nname = \"p\"\nkind = \"openai\"\nmax_retries = -1\n".into(),
            "tollgate.toml: providers[0].max_retries: expected a whole number of retries (0 or more), got -1",
        ),
        (
            "stream not a boolean",
            "[[providers]]\nname = \"p\"\nkind = \"anthropic\"\nstream = \"yes\"\n".into(),
            r#"tollgate.toml: providers[0].stream: expected true or false, got "yes""#,
        ),
        (
            "stream on a scripted provider",
            "[[providers]]\nname = \"p\"\nkind = \"scripted\"\nscript = \"s.json\"\nstream = false\n".into(),
            "tollgate.toml: providers[0].stream: not used by kind \"scripted\" (its keys: name, kind, model, script)",
        ),
        (
            "max_iterations zero",
            with_agent("max_iterations = 0", ""),
            "tollgate.toml: agents[0].max_iterations: expected a positive integer, got 0",
        ),
        (
            "max_tokens float",
            with_agent("max_tokens = 1.5", ""),
            "tollgate.toml: agents[0].max_tokens: expected a positive integer, got 1.5",
        ),
        (
            "forbid_self_approval",
            with_agent("forbid_self_approval = \"no\"", ""),
            r#"tollgate.toml: agents[0].forbid_self_approval: expected true or false, got "no""#,
        ),
        (
            "tools not a list",
            with_agent("tools = \"fs_read\"", ""),
            r#"tollgate.toml: agents[0].tools: expected a list of strings, got "fs_read""#,
        ),
        (
            "empty tool",
            with_agent("tools = [\"fs_read\", \"\"]", ""),
            r#"tollgate.toml: agents[0].tools[1]: expected a non-empty string, got """#,
        ),
        (
            "name with spaces",
            "[[providers]]\nname = \"my provider\"\nkind = \"openai\"\n".into(),
            r#"tollgate.toml: providers[0].name: expected a name without spaces, got "my provider""#,
        ),
        (
            "empty roles",
            "[[auth.tokens]]\nname = \"a\"\ntoken = \"t\"\nroles = []\n".into(),
            r#"tollgate.toml: auth.tokens[0].roles: expected at least one role ("runner", "approver", "admin"), got []"#,
        ),
        (
            "empty events",
            "[[webhooks]]\nurl = \"http://h/x\"\nevents = []\n".into(),
            "tollgate.toml: webhooks[0].events: expected at least one event kind (leave `events` out for all of them)",
        ),
        (
            "base_url",
            "[[providers]]\nname = \"p\"\nkind = \"openai\"\nbase_url = \"localhost:11434/v1\"\n".into(),
            r#"tollgate.toml: providers[0].base_url: expected an http:// or https:// URL, got "localhost:11434/v1""#,
        ),
        (
            "webhook url",
            "[[webhooks]]\nurl = \"ftp://h/x\"\n".into(),
            r#"tollgate.toml: webhooks[0].url: expected an http:// or https:// URL, got "ftp://h/x""#,
        ),
        (
            "store url",
            "[store]\nurl = \"tollgate.db\"\n".into(),
            r#"tollgate.toml: store.url: expected "sqlite://FILE", "sqlite:///ABSOLUTE/FILE" or "postgres://...", got "tollgate.db""#,
        ),
        (
            "json pointer",
            with_agent("[[agents.policy]]\ntool = \"fs_write\"\nwhen = { path = \"notes/**\" }\ngate = \"allow\"", ""),
            r#"tollgate.toml: agents[0].policy[0].when.path: expected a JSON pointer into the arguments, like "/path" (empty, or starting with "/"), got "path""#,
        ),
        (
            "when value",
            with_agent("[[agents.policy]]\ntool = \"fs_write\"\nwhen = { \"/path\" = 3 }\ngate = \"allow\"", ""),
            r#"tollgate.toml: agents[0].policy[0].when."/path": expected a glob for the argument's value, got 3"#,
        ),
        (
            "mcp env name",
            "[[mcp_servers]]\nname = \"m\"\ncommand = \"c\"\nenv = { \"A=B\" = \"x\" }\n".into(),
            r#"tollgate.toml: mcp_servers[0].env."A=B": expected an environment variable name (not empty, no '=')"#,
        ),
        (
            "mcp call_timeout without unit",
            "[[mcp_servers]]\nname = \"m\"\ncommand = \"c\"\ncall_timeout = 120\n".into(),
            r#"tollgate.toml: mcp_servers[0].call_timeout: expected a duration like "30s", "15m", "24h" or "30d", got 120"#,
        ),
        (
            "mcp call_timeout zero",
            "[[mcp_servers]]\nname = \"m\"\ncommand = \"c\"\ncall_timeout = \"0s\"\n".into(),
            r#"tollgate.toml: mcp_servers[0].call_timeout: expected a duration greater than zero, got "0s""#,
        ),
        (
            "mcp start_timeout with a fraction",
            "[[mcp_servers]]\nname = \"m\"\ncommand = \"c\"\nstart_timeout = \"1.5m\"\n".into(),
            r#"tollgate.toml: mcp_servers[0].start_timeout: expected a duration like "30s", "15m", "24h" or "30d", got "1.5m""#,
        ),
    ]);
}

#[test]
fn mcp_timeouts_take_durations_and_default_to_a_minute() {
    let config = parse(
        "[[mcp_servers]]\nname = \"slow\"\ncommand = \"c\"\ncall_timeout = \"10m\"\nstart_timeout = \"500ms\"\n\
         [[mcp_servers]]\nname = \"plain\"\ncommand = \"c\"\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let timeouts: Vec<_> = config.mcp_servers.iter().map(|s| (s.call_timeout, s.start_timeout)).collect();
    assert_eq!(
        timeouts,
        [
            (Duration::from_secs(600), Duration::from_millis(500)),
            (tollgate_agent_config::defaults::MCP_CALL_TIMEOUT, tollgate_agent_config::defaults::MCP_START_TIMEOUT),
        ]
    );
    assert_eq!(tollgate_agent_config::defaults::MCP_CALL_TIMEOUT, Duration::from_secs(60));
    assert_eq!(tollgate_agent_config::defaults::MCP_START_TIMEOUT, Duration::from_secs(60));
}

#[test]
fn a_mistyped_secret_is_not_echoed() {
    let message = error("[[auth.tokens]]\nname = \"a\"\ntoken = 123456789\nroles = [\"admin\"]\n");
    assert_eq!(
        message,
        r#"tollgate.toml: auth.tokens[0].token: expected a string (a literal or "env:NAME"), got an integer"#
    );
    assert!(!message.contains("123456789"));
    let message = error("[store]\nurl = \"postgres-ish://u:hunter2@db\"\n");
    assert!(!message.contains("hunter2"), "{message}");
}

#[test]
fn wrong_shapes_of_sections() {
    check(&[
        ("scalar section", "server = 1\n".into(), "tollgate.toml: server: expected a table ([server]), got 1"),
        (
            "scalar array",
            "agents = \"writer\"\n".into(),
            r#"tollgate.toml: agents: expected an array of tables ([[agents]]), got "writer""#,
        ),
        ("array of scalars", "providers = [1]\n".into(), "tollgate.toml: providers[0]: expected a table, got 1"),
        (
            "policy as a table",
            with_agent("policy = { tool = \"x\" }", ""),
            "tollgate.toml: agents[0].policy: expected an array of tables ([[agents.policy]]), got a table",
        ),
    ]);
}

#[test]
fn unknown_keys_are_named_with_the_known_ones() {
    check(&[
        (
            "top level",
            "storage = { url = \"x\" }\n".into(),
            "tollgate.toml: storage: unknown key (known keys here: store, server, retention, workspace, auth, \
             providers, mcp_servers, agents, webhooks, notify, sandbox, privacy, runtime, grants, telemetry)",
        ),
        (
            "in a section",
            "[server]\nport = 8080\n".into(),
            "tollgate.toml: server.port: unknown key (known keys here: addr, max_body_bytes, lease, header_read_timeout, idle_timeout, body_timeout, ready_timeout, max_connections, max_streams_per_client, public_url, link_secret)",
        ),
        (
            "in a provider (max_tokens is not in the contract)",
            "[[providers]]\nname = \"p\"\nkind = \"openai\"\nmax_tokens = 5\n".into(),
            "tollgate.toml: providers[0].max_tokens: unknown key (known keys here: name, kind, model, base_url, \
             api_key, timeout, max_retries, stream, script)",
        ),
        (
            "in an agent",
            with_agent("temperature = 0.2", ""),
            "tollgate.toml: agents[0].temperature: unknown key (known keys here: name, provider, model, \
             system_prompt, tools, max_iterations, max_tokens, approval_ttl, on_expiry, forbid_self_approval, shell_network, escalate_after, escalate_to, policy)",
        ),
        (
            "in an MCP server",
            "[[mcp_servers]]\nname = \"m\"\ncommand = \"c\"\ntimeout = \"5m\"\n".into(),
            "tollgate.toml: mcp_servers[0].timeout: unknown key (known keys here: name, command, args, env, \
             inherit_env, call_timeout, start_timeout)",
        ),
        (
            "in a policy rule",
            with_agent("[[agents.policy]]\ntool = \"shell\"\ngate = \"ask\"\nreason = \"x\"", ""),
            "tollgate.toml: agents[0].policy[0].reason: unknown key (known keys here: tool, when, gate, approvals, \
             grantable)",
        ),
        (
            "in auth",
            "[auth]\nenabled = true\n".into(),
            "tollgate.toml: auth.enabled: unknown key (known keys here: tokens)",
        ),
        (
            "a key of another provider kind",
            "[[providers]]\nname = \"p\"\nkind = \"openai\"\nscript = \"s.json\"\n".into(),
            "tollgate.toml: providers[0].script: not used by kind \"openai\" (its keys: name, kind, model, base_url, \
             api_key, timeout, max_retries, stream)",
        ),
        (
            "an http key on a scripted provider",
            "[[providers]]\nname = \"p\"\nkind = \"scripted\"\nscript = \"s.json\"\nbase_url = \"http://x\"\n".into(),
            "tollgate.toml: providers[0].base_url: not used by kind \"scripted\" (its keys: name, kind, model, script)",
        ),
    ]);
    let Err(ConfigError::UnknownKey { key, .. }) = parse("[workspace]\nroot = \"w\"\nrot = \"x\"\n") else {
        panic!("expected an unknown key")
    };
    assert_eq!(key, "workspace.rot");
}

#[test]
fn a_policy_rule_that_asks_may_need_a_quorum() -> anyhow::Result<()> {
    let config = parse(&with_agent(
        "[[agents.policy]]\ntool = \"pay\"\ngate = \"ask\"\napprovals = 2\n\
         [[agents.policy]]\ntool = \"refund\"\ngate = \"ask\"\n",
        "",
    ))?;
    let approvals: Vec<_> = config.agents[0].policy.iter().map(|rule| rule.approvals.map(|n| n.get())).collect();
    assert_eq!(approvals, [Some(2), None], "absent means a single decision");

    const EXPECTED: &str = "expected an integer of 2 or more (leave `approvals` out for a single decision)";
    let rule = |gate: &str, approvals: &str| {
        with_agent(&format!("[[agents.policy]]\ntool = \"pay\"\ngate = \"{gate}\"\napprovals = {approvals}"), "")
    };
    check(&[
        ("one", rule("ask", "1"), &format!("tollgate.toml: agents[0].policy[0].approvals: {EXPECTED}, got 1")),
        ("zero", rule("ask", "0"), &format!("tollgate.toml: agents[0].policy[0].approvals: {EXPECTED}, got 0")),
        ("negative", rule("ask", "-2"), &format!("tollgate.toml: agents[0].policy[0].approvals: {EXPECTED}, got -2")),
        (
            "a string",
            rule("ask", "\"2\""),
            &format!("tollgate.toml: agents[0].policy[0].approvals: {EXPECTED}, got \"2\""),
        ),
        ("a float", rule("ask", "2.5"), &format!("tollgate.toml: agents[0].policy[0].approvals: {EXPECTED}, got 2.5")),
        (
            "beyond 32 bits",
            rule("ask", "4294967296"),
            &format!("tollgate.toml: agents[0].policy[0].approvals: {EXPECTED}, got 4294967296"),
        ),
        (
            "on an allow rule",
            rule("allow", "2"),
            r#"tollgate.toml: agents[0].policy[0].approvals: only a rule with gate = "ask" takes approvals; this rule's gate is "allow""#,
        ),
        (
            "on the second rule, which forbids",
            with_agent(
                "[[agents.policy]]\ntool = \"pay\"\ngate = \"ask\"\napprovals = 3\n\
                 [[agents.policy]]\ntool = \"shell\"\ngate = \"forbid\"\napprovals = 2\n",
                "",
            ),
            r#"tollgate.toml: agents[0].policy[1].approvals: only a rule with gate = "ask" takes approvals; this rule's gate is "forbid""#,
        ),
    ]);
    Ok(())
}

#[test]
fn a_policy_rule_that_asks_may_refuse_grants() -> anyhow::Result<()> {
    let config = parse(&with_agent(
        "[[agents.policy]]\ntool = \"pay\"\ngate = \"ask\"\ngrantable = false\napprovals = 2\n\
         [[agents.policy]]\ntool = \"refund\"\ngate = \"ask\"\ngrantable = true\n\
         [[agents.policy]]\ntool = \"shell\"\ngate = \"ask\"\n\
         [[agents.policy]]\ntool = \"fs_read\"\ngate = \"allow\"\n",
        "",
    ))?;
    let grantable: Vec<bool> = config.agents[0].policy.iter().map(|rule| rule.grantable).collect();
    assert_eq!(grantable, [false, true, true, true], "absent means grantable, whatever the gate");

    let rule = |gate: &str, grantable: &str| {
        with_agent(&format!("[[agents.policy]]\ntool = \"pay\"\ngate = \"{gate}\"\ngrantable = {grantable}"), "")
    };
    check(&[
        (
            "not a boolean",
            rule("ask", "\"no\""),
            r#"tollgate.toml: agents[0].policy[0].grantable: expected true or false, got "no""#,
        ),
        (
            "on an allow rule",
            rule("allow", "false"),
            r#"tollgate.toml: agents[0].policy[0].grantable: only a rule with gate = "ask" takes grantable; this rule's gate is "allow""#,
        ),
        (
            "true on a forbid rule, said of the second rule",
            with_agent(
                "[[agents.policy]]\ntool = \"pay\"\ngate = \"ask\"\ngrantable = false\n\
                 [[agents.policy]]\ntool = \"shell\"\ngate = \"forbid\"\ngrantable = true\n",
                "",
            ),
            r#"tollgate.toml: agents[0].policy[1].grantable: only a rule with gate = "ask" takes grantable; this rule's gate is "forbid""#,
        ),
    ]);
    Ok(())
}

#[test]
fn grants_take_a_switch_and_two_lifetimes_in_order() -> anyhow::Result<()> {
    let config = parse("[grants]\nenabled = false\ndefault_ttl = \"1h\"\nmax_ttl = \"7d\"\n")?;
    assert_eq!(
        config.grants,
        tollgate_agent_config::GrantsConfig {
            enabled: false,
            default_ttl: Duration::from_secs(3_600),
            max_ttl: Duration::from_secs(7 * 86_400),
        }
    );
    let defaults = parse("")?.grants;
    assert_eq!(defaults, tollgate_agent_config::GrantsConfig::default());
    assert_eq!(
        (defaults.enabled, defaults.default_ttl, defaults.max_ttl),
        (true, Duration::from_secs(28_800), Duration::from_secs(2_592_000))
    );
    let equal = parse("[grants]\ndefault_ttl = \"2d\"\nmax_ttl = \"48h\"\n")?.grants;
    assert_eq!(
        (equal.default_ttl, equal.max_ttl),
        (Duration::from_secs(172_800), Duration::from_secs(172_800)),
        "equal is in order"
    );
    let short = parse("[grants]\nmax_ttl = \"8h\"\n")?.grants;
    assert_eq!(short.max_ttl, short.default_ttl, "a max equal to the default default");

    check(&[
        (
            "a default longer than the max",
            "[grants]\ndefault_ttl = \"30d\"\nmax_ttl = \"7d\"\n".into(),
            r#"tollgate.toml: grants.default_ttl: expected a duration of at most grants.max_ttl ("7d"), got "30d""#,
        ),
        (
            "a default longer than the default max",
            "[grants]\ndefault_ttl = \"31d\"\n".into(),
            r#"tollgate.toml: grants.default_ttl: expected a duration of at most grants.max_ttl (30d, the default), got "31d""#,
        ),
        (
            "a max shorter than the default default",
            "[grants]\nmax_ttl = \"1h\"\n".into(),
            r#"tollgate.toml: grants.max_ttl: expected a duration of at least grants.default_ttl (8h, the default), got "1h""#,
        ),
        (
            "a zero default",
            "[grants]\ndefault_ttl = \"0s\"\n".into(),
            r#"tollgate.toml: grants.default_ttl: expected a duration greater than zero, got "0s""#,
        ),
        (
            "a zero max",
            "[grants]\nmax_ttl = \"0d\"\n".into(),
            r#"tollgate.toml: grants.max_ttl: expected a duration greater than zero, got "0d""#,
        ),
        (
            "not a duration",
            "[grants]\nmax_ttl = 30\n".into(),
            r#"tollgate.toml: grants.max_ttl: expected a duration like "30s", "15m", "24h" or "30d", got 30"#,
        ),
        (
            "not a boolean",
            "[grants]\nenabled = \"yes\"\n".into(),
            r#"tollgate.toml: grants.enabled: expected true or false, got "yes""#,
        ),
        (
            "an unknown key",
            "[grants]\nttl = \"8h\"\n".into(),
            "tollgate.toml: grants.ttl: unknown key (known keys here: enabled, default_ttl, max_ttl)",
        ),
        ("not a table", "grants = true\n".into(), "tollgate.toml: grants: expected a table ([grants]), got true"),
    ]);
    Ok(())
}

#[test]
fn telemetry_is_off_unless_an_endpoint_is_set_and_checks_each_key() -> anyhow::Result<()> {
    let defaults = parse("")?.telemetry;
    assert_eq!(defaults, tollgate_agent_config::TelemetryConfig::default());
    assert_eq!(
        (defaults.endpoint.as_deref(), defaults.service_name.as_str(), defaults.sample_ratio, defaults.content),
        (None, "tollgate", 1.0, false)
    );
    assert_eq!(defaults.timeout, Duration::from_secs(10));
    let on = parse(
        "[telemetry]\nendpoint = \"http://collector:4318/\"\nservice_name = \"agents\"\nsample_ratio = 0.25\n\
         content = true\ntimeout = \"2s\"\n",
    )?
    .telemetry;
    assert_eq!(on.endpoint.as_deref(), Some("http://collector:4318/v1/traces"), "the traces path appended");
    assert_eq!((on.service_name.as_str(), on.sample_ratio, on.content), ("agents", 0.25, true));
    assert_eq!(on.timeout, Duration::from_secs(2));
    let full = parse("[telemetry]\nendpoint = \"https://otel.example/v1/traces\"\nsample_ratio = 0\n")?.telemetry;
    assert_eq!(full.endpoint.as_deref(), Some("https://otel.example/v1/traces"), "a full traces URL as written");
    assert_eq!(full.sample_ratio, 0.0, "an integer 0 or 1 is a ratio");
    let from_env = loader(&[
        ("TOLLGATE_TELEMETRY_ENDPOINT", "http://127.0.0.1:4318"),
        ("TOLLGATE_TELEMETRY_SAMPLE_RATIO", "0.01"),
        ("TOLLGATE_TELEMETRY_CONTENT", "true"),
    ])
    .load_str("tollgate.toml", "")?
    .telemetry;
    assert_eq!(from_env.endpoint.as_deref(), Some("http://127.0.0.1:4318/v1/traces"));
    assert_eq!((from_env.sample_ratio, from_env.content), (0.01, true));
    let bad_ratio = loader(&[("TOLLGATE_TELEMETRY_SAMPLE_RATIO", "lots")]).load_str("tollgate.toml", "").unwrap_err();
    assert_eq!(
        bad_ratio.to_string(),
        r#"TOLLGATE_TELEMETRY_SAMPLE_RATIO: telemetry.sample_ratio: expected a number from 0 to 1, got "lots""#
    );

    check(&[
        (
            "not an http URL",
            "[telemetry]\nendpoint = \"grpc://collector:4317\"\n".into(),
            r#"tollgate.toml: telemetry.endpoint: expected an http:// or https:// URL, got "grpc://collector:4317""#,
        ),
        (
            "a ratio above 1",
            "[telemetry]\nsample_ratio = 1.5\n".into(),
            "tollgate.toml: telemetry.sample_ratio: expected a number from 0 to 1, got 1.5",
        ),
        (
            "a negative ratio",
            "[telemetry]\nsample_ratio = -0.1\n".into(),
            "tollgate.toml: telemetry.sample_ratio: expected a number from 0 to 1, got -0.1",
        ),
        (
            "an empty service name",
            "[telemetry]\nservice_name = \" \"\n".into(),
            r#"tollgate.toml: telemetry.service_name: expected a non-empty string, got " ""#,
        ),
        (
            "content not a boolean",
            "[telemetry]\ncontent = \"yes\"\n".into(),
            r#"tollgate.toml: telemetry.content: expected true or false, got "yes""#,
        ),
        (
            "an unknown key",
            "[telemetry]\nratio = 1\n".into(),
            "tollgate.toml: telemetry.ratio: unknown key (known keys here: endpoint, service_name, sample_ratio, \
             content, timeout)",
        ),
    ]);
    Ok(())
}

#[test]
fn toml_syntax_errors_give_line_and_column() {
    let cases = [
        ("[server\naddr = \"x\"\n", 1),
        ("[server]\naddr = \"127.0.0.1:8080\"\naddr = \"127.0.0.1:9090\"\n", 3),
        ("[server]\n\nlease = 30s\n", 3),
    ];
    for (text, expected_line) in cases {
        let error = match parse(text) {
            Ok(config) => panic!("{text:?}: expected a syntax error, parsed {config:?}"),
            Err(error) => error,
        };
        let shown = error.to_string();
        let ConfigError::Syntax { origin, line, column, message } = error else {
            panic!("{text:?}: expected a syntax error, got {shown}")
        };
        assert_eq!((origin.as_str(), line), ("tollgate.toml", expected_line), "{text:?}: {message}");
        assert!(column >= 1 && !message.is_empty() && !message.contains('\n'));
        assert!(shown.starts_with(&format!("tollgate.toml:{line}:{column}: invalid TOML: ")), "{shown}");
    }
}

#[test]
fn defaults_of_optional_keys() -> anyhow::Result<()> {
    let config = parse(
        "[[providers]]\nname = \"oa\"\nkind = \"openai\"\nmodel = \"gpt-x\"\n\
         [[providers]]\nname = \"s\"\nkind = \"scripted\"\nscript = \"s.json\"\n\
         [[agents]]\nname = \"a\"\nprovider = \"oa\"\n\
         [[agents]]\nname = \"b\"\nprovider = \"s\"\n",
    )?;
    let tollgate_agent_config::ProviderKind::OpenAi(http) = &config.providers[0].kind else {
        anyhow::bail!("not openai")
    };
    assert_eq!(http.base_url, "https://api.openai.com/v1");
    assert_eq!(http.api_key, None);
    assert_eq!(http.timeout, std::time::Duration::from_secs(120));
    assert_eq!(http.max_retries, 3);
    let (a, b) = (&config.agents[0], &config.agents[1]);
    assert_eq!(a.model.as_deref(), Some("gpt-x"), "the provider's model is the agent's default");
    assert_eq!(b.model, None, "a scripted agent needs no model");
    assert_eq!((b.max_iterations, b.max_tokens, b.approval_ttl), (10, None, None));
    assert_eq!((b.on_expiry, b.forbid_self_approval), (tollgate_agent_config::OnExpiry::Deny, false));
    assert!(b.tools.is_empty() && b.policy.is_empty() && b.system_prompt.is_none());
    Ok(())
}

#[test]
fn security_keys() {
    let key = "0123456789abcdef".repeat(4);
    check(&[
        (
            "sandbox mode",
            "[sandbox]\nmode = \"strict\"\n".to_owned(),
            r#"tollgate.toml: sandbox.mode: expected "auto", "required" or "off", got "strict""#,
        ),
        (
            "privacy level",
            "[privacy]\nlevel = \"none\"\n".to_owned(),
            r#"tollgate.toml: privacy.level: expected "full", "redacted" or "metadata", got "none""#,
        ),
        (
            "a data key of the wrong length, never echoed",
            "[[privacy.keys]]\nid = \"k1\"\nkey = \"sk-not-hex-but-secret\"\n".to_owned(),
            "tollgate.toml: privacy.keys[0].key: expected 32 bytes as 64 hex digits (e.g. from `openssl rand -hex \
             32`), got 21 characters",
        ),
        (
            "duplicate key ids",
            format!("[[privacy.keys]]\nid = \"k1\"\nkey = \"{key}\"\n[[privacy.keys]]\nid = \"k1\"\nkey = \"{key}\"\n"),
            r#"tollgate.toml: privacy.keys[1].id: duplicate key id "k1" (also privacy.keys[0].id)"#,
        ),
        (
            "no workers",
            "[runtime]\nworkers = 0\n".to_owned(),
            "tollgate.toml: runtime.workers: expected a positive integer, got 0",
        ),
        (
            "no takeovers",
            "[runtime]\nmax_takeovers = 0\n".to_owned(),
            "tollgate.toml: runtime.max_takeovers: expected a positive integer, got 0",
        ),
        (
            "an unknown runtime key",
            "[runtime]\nthreads = 4\n".to_owned(),
            "tollgate.toml: runtime.threads: unknown key (known keys here: workers, max_takeovers)",
        ),
        (
            "shell_network",
            with_agent("shell_network = \"yes\"", ""),
            r#"tollgate.toml: agents[0].shell_network: expected true or false, got "yes""#,
        ),
    ]);
}

#[test]
fn security_keys_parse_and_secrets_are_listed() {
    let key = "0123456789abcdef".repeat(4);
    let text = format!(
        "[sandbox]\nmode = \"required\"\n[privacy]\nlevel = \"metadata\"\n[[privacy.keys]]\nid = \"k2\"\nkey = \"{key}\"\n\
         [[providers]]\nname = \"p\"\nkind = \"openai\"\napi_key = \"sk-provider-key-123\"\n\
         [[mcp_servers]]\nname = \"m\"\ncommand = \"srv\"\ninherit_env = true\nenv = {{ TOKEN = \"mcp-token-4567\" }}\n"
    );
    let config = parse(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.sandbox.mode, tollgate_agent_config::SandboxMode::Required);
    assert_eq!(config.privacy.level, tollgate_agent_config::PrivacyLevel::Metadata);
    assert_eq!(config.privacy.keys[0].id, "k2");
    assert_eq!(config.runtime.workers, None, "unset: the runtime's default for the cores");
    assert!(config.mcp_servers[0].inherit_env);
    let secrets = config.secret_values();
    for secret in [key.as_str(), "sk-provider-key-123", "mcp-token-4567"] {
        assert!(secrets.iter().any(|s| s == secret), "{secret} listed");
    }
    assert!(!format!("{config:?}").contains(&key), "Debug never shows a key");
}
