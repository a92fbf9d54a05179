//! `[[notify]]`, `[server] public_url` / `link_secret` and `[[agents]] escalate_after` / `escalate_to`
//! (V2.md section 4): each kind parses to its typed settings with the defaults applied, every rule broken
//! once names the key, and the new secrets are listed for the redactor and never printed.

use std::time::Duration;

use crate::support::{check, loader, parse};
use tollgate_agent_config::{
    Actor, ConfigError, EmailNotify, Glob, NotifyConfig, NotifyKind, NotifyOn, Secret, SlackNotify, defaults,
};

/// A link secret of exactly the 32 bytes required.
const LINK_SECRET: &str = "0123456789abcdef0123456789abcdef";

/// `[server]` with [`LINK_SECRET`].
fn server() -> String {
    format!("[server]\nlink_secret = \"{LINK_SECRET}\"\n")
}

const TOKENS: &str = "[[auth.tokens]]\nname = \"alice\"\ntoken = \"alice-token\"\nroles = [\"approver\"]\n\
                      [[auth.tokens]]\nname = \"bob\"\ntoken = \"bob-token\"\nroles = [\"runner\"]\n\
                      [[auth.tokens]]\nname = \"root\"\ntoken = \"root-token\"\nroles = [\"admin\"]\n";

const SLACK: &str = "[[notify]]\nname = \"ops\"\nkind = \"slack\"\nurl = \"https://hooks.slack.com/services/T0/B0/xyz\"\n\
                     as = \"alice\"\n";

/// An email notifier with only its required keys, then `extra` keys.
fn email(extra: &str) -> String {
    format!(
        "[[notify]]\nname = \"mail\"\nkind = \"email\"\nhost = \"smtp.example.com\"\nfrom = \"t@example.com\"\n\
         to = [\"ops@example.com\"]\nas = \"alice\"\n{extra}\n"
    )
}

/// A notifier `text` with a link secret and no tokens (auth off).
fn with_secret(text: &str) -> String {
    format!("{}{text}", server())
}

const PROVIDER: &str = "[[providers]]\nname = \"s\"\nkind = \"scripted\"\nscript = \"s.json\"\n";

/// [`SLACK`] with a link secret, and an agent with `agent_extra` keys.
fn agent(agent_extra: &str) -> String {
    format!("{}{SLACK}{PROVIDER}[[agents]]\nname = \"writer\"\nprovider = \"s\"\n{agent_extra}\n", server())
}

#[test]
fn a_slack_notifier_parses_with_its_defaults() -> anyhow::Result<()> {
    let text = format!(
        "[server]\npublic_url = \"https://tollgate.example.com/base/\"\nlink_secret = \"env:TOLLGATE_LINK_SECRET\"\n\
         {TOKENS}\
         [[notify]]\nname = \"ops\"\nkind = \"slack\"\nurl = \"env:SLACK_WEBHOOK_URL\"\nas = \"alice\"\n\
         {PROVIDER}\
         [[agents]]\nname = \"writer\"\nprovider = \"s\"\nescalate_after = \"60m\"\nescalate_to = [\"ops\", \"ops\"]\n\
         [[agents]]\nname = \"quiet\"\nprovider = \"s\"\n"
    );
    let env = [
        ("TOLLGATE_LINK_SECRET", "a-link-secret-of-forty-bytes-0123456789"),
        ("SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T0/B0/secretpart"),
    ];
    let config = loader(&env).load_str("tollgate.toml", &text)?;
    assert_eq!(config.server.public_url.as_deref(), Some("https://tollgate.example.com/base"), "trailing / trimmed");
    assert_eq!(config.server.link_base(), "https://tollgate.example.com/base");
    assert_eq!(config.server.link_secret, Some(Secret::new("a-link-secret-of-forty-bytes-0123456789")));
    assert_eq!(
        config.notify,
        [NotifyConfig {
            name: "ops".into(),
            kind: NotifyKind::Slack(SlackNotify {
                url: Secret::new("https://hooks.slack.com/services/T0/B0/secretpart")
            }),
            agents: vec![Glob::new("*")],
            actor: Actor::new("alice"),
            on: vec![NotifyOn::ApprovalRequested, NotifyOn::Escalation],
        }]
    );
    let ops = config.notifier("ops").ok_or_else(|| anyhow::anyhow!("no notifier ops"))?;
    assert_eq!(ops.kind.as_str(), "slack");
    assert!(ops.covers_agent("writer") && ops.covers_agent("quiet"));
    assert!(ops.sends_on(NotifyOn::ApprovalRequested) && ops.sends_on(NotifyOn::Escalation));
    let (writer, quiet) = (&config.agents[0], &config.agents[1]);
    assert_eq!(
        (writer.escalate_after, writer.escalate_to.as_slice()),
        (Some(Duration::from_secs(3_600)), &["ops".to_owned()][..])
    );
    assert_eq!(writer.escalate_after_text.as_deref(), Some("60m"), "as written, for the event");
    assert_eq!((quiet.escalate_after, quiet.escalate_to.len()), (None, 0), "no escalation unless asked for");
    assert_eq!(quiet.escalate_after_text, None);
    Ok(())
}

#[test]
fn an_email_notifier_parses_and_its_port_follows_starttls() -> anyhow::Result<()> {
    let text = format!(
        "{TOKENS}{}\
         [[notify]]\nname = \"mail\"\nkind = \"email\"\nhost = \"smtp.example.com\"\nusername = \"tollgate\"\n\
         password = \"env:SMTP_PASSWORD\"\nfrom = \"Tollgate <tollgate@example.com>\"\n\
         to = [\"ops@example.com\", \"Jane Doe <jane@example.com>\"]\nagents = [\"writer\", \"billing-*\"]\n\
         as = \"root\"\non = [\"escalation\"]\n\
         [[notify]]\nname = \"relay\"\nkind = \"email\"\nhost = \"10.0.0.25\"\nstarttls = false\n\
         from = \"t@example.com\"\nto = [\"ops@example.com\"]\nas = \"alice\"\n\
         on = [\"approval_requested\", \"escalation\", \"approval_requested\"]\n\
         [[notify]]\nname = \"own_port\"\nkind = \"email\"\nhost = \"mail.example.com\"\nport = 2525\n\
         from = \"t@example.com\"\nto = [\"ops@example.com\"]\nas = \"alice\"\n",
        server()
    );
    let config = loader(&[("SMTP_PASSWORD", "smtp-password-123")]).load_str("tollgate.toml", &text)?;
    assert_eq!(config.server.public_url, None);
    assert_eq!(config.server.link_base(), "http://127.0.0.1:8080", "the default: http://ADDR");
    let mail = NotifyConfig {
        name: "mail".into(),
        kind: NotifyKind::Email(EmailNotify {
            host: "smtp.example.com".into(),
            port: 587,
            starttls: true,
            username: Some("tollgate".into()),
            password: Some(Secret::new("smtp-password-123")),
            from: "Tollgate <tollgate@example.com>".into(),
            to: vec!["ops@example.com".into(), "Jane Doe <jane@example.com>".into()],
        }),
        agents: vec![Glob::new("writer"), Glob::new("billing-*")],
        actor: Actor::new("root"),
        on: vec![NotifyOn::Escalation],
    };
    let relay = NotifyConfig {
        name: "relay".into(),
        kind: NotifyKind::Email(EmailNotify {
            host: "10.0.0.25".into(),
            port: 25,
            starttls: false,
            username: None,
            password: None,
            from: "t@example.com".into(),
            to: vec!["ops@example.com".into()],
        }),
        agents: vec![Glob::new("*")],
        actor: Actor::new("alice"),
        on: vec![NotifyOn::ApprovalRequested, NotifyOn::Escalation],
    };
    assert_eq!(config.notify[..2], [mail, relay]);
    let NotifyKind::Email(own_port) = &config.notify[2].kind else { anyhow::bail!("not email") };
    assert_eq!((own_port.port, own_port.starttls), (2525, true));
    assert!(config.notify[0].covers_agent("billing-eu") && !config.notify[0].covers_agent("support"));
    assert!(!config.notify[0].sends_on(NotifyOn::ApprovalRequested));
    assert_eq!((defaults::SMTP_PORT_STARTTLS, defaults::SMTP_PORT_PLAIN), (587, 25));
    Ok(())
}

#[test]
fn without_tokens_a_notifier_may_decide_as_any_name() -> anyhow::Result<()> {
    let config = parse(&with_secret(&SLACK.replace("as = \"alice\"", "as = \"on-call\"")))?;
    assert_eq!(config.notify[0].actor, Actor::new("on-call"));
    Ok(())
}

#[test]
fn the_server_keys_are_overridable() -> anyhow::Result<()> {
    let env = [("TOLLGATE_SERVER_PUBLIC_URL", "http://10.0.0.5:8080/"), ("TOLLGATE_SERVER_LINK_SECRET", LINK_SECRET)];
    let config = loader(&env).load_str("tollgate.toml", SLACK)?;
    assert_eq!(config.server.link_base(), "http://10.0.0.5:8080");
    assert_eq!(config.server.link_secret.as_ref().map(Secret::expose), Some(LINK_SECRET));

    let env = [("TOLLGATE_SERVER_LINK_SECRET", "too-short")];
    assert_eq!(
        loader(&env).load_str("tollgate.toml", SLACK).map_err(|e| e.to_string()).err().as_deref(),
        Some(
            "TOLLGATE_SERVER_LINK_SECRET: server.link_secret: expected a secret of at least 32 bytes (e.g. from \
             `openssl rand -hex 32`), got 9 bytes"
        )
    );
    let env = [("TOLLGATE_SERVER_PUBLIC_URL", "tollgate.example.com")];
    assert_eq!(
        loader(&env).load_str("tollgate.toml", "").map_err(|e| e.to_string()).err().as_deref(),
        Some(
            r#"TOLLGATE_SERVER_PUBLIC_URL: server.public_url: expected an http:// or https:// URL without a query or fragment, like "https://tollgate.example.com", got "tollgate.example.com""#
        )
    );
    Ok(())
}

#[test]
fn the_server_keys_are_checked() {
    const URL: &str = r#"tollgate.toml: server.public_url: expected an http:// or https:// URL without a query or fragment, like "https://tollgate.example.com", got"#;
    let public_url = |url: &str| format!("[server]\npublic_url = \"{url}\"\n");
    check(&[
        (
            "a notifier without a link secret",
            SLACK.to_owned(),
            r#"tollgate.toml: server.link_secret: missing, expected a secret of at least 32 bytes (a literal or "env:NAME") to sign the approval links of [[notify]] "ops""#,
        ),
        (
            "a short link secret, not echoed",
            "[server]\nlink_secret = \"sh0rt-but-secret\"\n".to_owned(),
            "tollgate.toml: server.link_secret: expected a secret of at least 32 bytes (e.g. from `openssl rand -hex \
             32`), got 16 bytes",
        ),
        (
            "an empty link secret",
            "[server]\nlink_secret = \"\"\n".to_owned(),
            r#"tollgate.toml: server.link_secret: expected a non-empty string (a literal or "env:NAME"), got """#,
        ),
        ("no scheme", public_url("tollgate.example.com"), &format!(r#"{URL} "tollgate.example.com""#)),
        ("another scheme", public_url("ftp://tollgate.example.com"), &format!(r#"{URL} "ftp://tollgate.example.com""#)),
        ("no host", public_url("https://"), &format!(r#"{URL} "https://""#)),
        ("a query", public_url("https://t.example.com/?a=1"), &format!(r#"{URL} "https://t.example.com/?a=1""#)),
        ("a fragment", public_url("https://t.example.com/#top"), &format!(r#"{URL} "https://t.example.com/#top""#)),
        ("credentials", public_url("https://u:p@t.example.com"), &format!(r#"{URL} "https://u:p@t.example.com""#)),
        ("a space", public_url("https://t.example.com/a b"), &format!(r#"{URL} "https://t.example.com/a b""#)),
        ("not a string", "[server]\npublic_url = 8080\n".to_owned(), &format!("{URL} 8080")),
    ]);
    let Err(error) = parse("[server]\nlink_secret = \"sh0rt-but-secret\"\n") else { panic!("a short secret loaded") };
    assert!(!error.to_string().contains("sh0rt"));
}

#[test]
fn every_notifier_rule_names_its_key() {
    let slack_with = |from: &str, to: &str| with_secret(&SLACK.replace(from, to));
    let email_with = |from: &str, to: &str| with_secret(&email("").replace(from, to));
    check(&[
        (
            "duplicate name",
            with_secret(&format!("{SLACK}{}", email("").replace("\"mail\"", "\"ops\""))),
            r#"tollgate.toml: notify[1].name: duplicate notifier name "ops" (also notify[0].name)"#,
        ),
        (
            "a name with a space",
            slack_with("\"ops\"", "\"ops team\""),
            r#"tollgate.toml: notify[0].name: expected a name of ASCII letters, digits, '_' and '-', got "ops team""#,
        ),
        (
            "no name",
            slack_with("name = \"ops\"\n", ""),
            "tollgate.toml: notify[0].name: missing, expected the notifier's name (ASCII letters, digits, '_' and '-')",
        ),
        (
            "unknown kind",
            slack_with("\"slack\"", "\"teams\""),
            r#"tollgate.toml: notify[0].kind: expected "slack" or "email", got "teams""#,
        ),
        (
            "no kind",
            slack_with("kind = \"slack\"\n", ""),
            r#"tollgate.toml: notify[0].kind: missing, expected "slack" or "email""#,
        ),
        (
            "an unknown key",
            with_secret(&format!("{SLACK}channel = \"#ops\"\n")),
            "tollgate.toml: notify[0].channel: unknown key (known keys here: name, kind, agents, as, on, url, host, \
             port, starttls, username, password, from, to)",
        ),
        (
            "an email key on a slack notifier",
            with_secret(&format!("{SLACK}host = \"smtp.example.com\"\n")),
            r#"tollgate.toml: notify[0].host: not used by kind "slack" (its keys: name, kind, agents, as, on, url)"#,
        ),
        (
            "a slack key on an email notifier",
            with_secret(&email("url = \"https://x\"")),
            r#"tollgate.toml: notify[0].url: not used by kind "email" (its keys: name, kind, agents, as, on, host, port, starttls, username, password, from, to)"#,
        ),
        (
            "slack without url",
            slack_with("url = \"https://hooks.slack.com/services/T0/B0/xyz\"\n", ""),
            r#"tollgate.toml: notify[0].url: missing, expected the Slack incoming-webhook URL (a literal or "env:NAME")"#,
        ),
        (
            "slack url of another scheme",
            slack_with("https://hooks", "ftp://hooks"),
            r#"tollgate.toml: notify[0].url: expected an http:// or https:// URL, got a URL with scheme "ftp""#,
        ),
        (
            "slack url without a scheme, not echoed",
            slack_with("https://hooks", "hooks"),
            "tollgate.toml: notify[0].url: expected an http:// or https:// URL, got a value that is not a URL (not \
             shown: the key is secret-valued)",
        ),
        (
            "email without host",
            email_with("host = \"smtp.example.com\"\n", ""),
            "tollgate.toml: notify[0].host: missing, expected the SMTP server's host name",
        ),
        (
            "email without from",
            email_with("from = \"t@example.com\"\n", ""),
            r#"tollgate.toml: notify[0].from: missing, expected the sender's mail address, like "Tollgate <tollgate@example.com>""#,
        ),
        (
            "email without to",
            email_with("to = [\"ops@example.com\"]\n", ""),
            r#"tollgate.toml: notify[0].to: missing, expected a list of the recipients' mail addresses, like ["ops@example.com"]"#,
        ),
        (
            "email with no recipient",
            email_with("to = [\"ops@example.com\"]", "to = []"),
            "tollgate.toml: notify[0].to: expected at least one mail address, got []",
        ),
        (
            "a bad sender",
            email_with("\"t@example.com\"", "\"Tollgate tollgate.example.com\""),
            r#"tollgate.toml: notify[0].from: expected a mail address like "ops@example.com" or "Ops <ops@example.com>", got "Tollgate tollgate.example.com""#,
        ),
        (
            "a bad second recipient",
            email_with("[\"ops@example.com\"]", "[\"ops@example.com\", \"Jane <jane@example.com\"]"),
            r#"tollgate.toml: notify[0].to[1]: expected a mail address like "ops@example.com" or "Ops <ops@example.com>", got "Jane <jane@example.com""#,
        ),
        (
            "a header smuggled into a recipient",
            email_with("[\"ops@example.com\"]", "[\"ops@example.com\\r\\nBcc: x@evil.example\"]"),
            r#"tollgate.toml: notify[0].to[0]: expected a mail address like "ops@example.com" or "Ops <ops@example.com>", got "ops@example.com\r\nBcc: x@evil.example""#,
        ),
        (
            "to as a single string",
            email_with("[\"ops@example.com\"]", "\"ops@example.com\""),
            r#"tollgate.toml: notify[0].to: expected a list of strings, got "ops@example.com""#,
        ),
        (
            "password without username",
            with_secret(&email("password = \"smtp-secret\"")),
            "tollgate.toml: notify[0].username: missing, expected the SMTP user name, since notify[0].password is set",
        ),
        (
            "username without password",
            with_secret(&email("username = \"tollgate\"")),
            r#"tollgate.toml: notify[0].password: missing, expected the SMTP password (a literal or "env:NAME"), since notify[0].username is set"#,
        ),
        (
            "port zero",
            with_secret(&email("port = 0")),
            "tollgate.toml: notify[0].port: expected a port number (1 to 65535), got 0",
        ),
        (
            "port too large",
            with_secret(&email("port = 65536")),
            "tollgate.toml: notify[0].port: expected a port number (1 to 65535), got 65536",
        ),
        (
            "starttls not a boolean",
            with_secret(&email("starttls = \"yes\"")),
            r#"tollgate.toml: notify[0].starttls: expected true or false, got "yes""#,
        ),
        (
            "an unknown on value",
            with_secret(&format!("{SLACK}on = [\"approval_requested\", \"run_failed\"]\n")),
            r#"tollgate.toml: notify[0].on[1]: expected "approval_requested" or "escalation", got "run_failed""#,
        ),
        (
            "on empty",
            with_secret(&format!("{SLACK}on = []\n")),
            r#"tollgate.toml: notify[0].on: expected at least one of "approval_requested" and "escalation" (leave `on` out for both)"#,
        ),
        (
            "agents empty",
            with_secret(&format!("{SLACK}agents = []\n")),
            "tollgate.toml: notify[0].agents: expected at least one agent name or glob (leave `agents` out for every \
             agent)",
        ),
        (
            "no as without tokens",
            slack_with("as = \"alice\"\n", ""),
            "tollgate.toml: notify[0].as: missing, expected the actor a decision made through the notifier's links is \
             recorded as",
        ),
        (
            "an empty as",
            slack_with("as = \"alice\"", "as = \" \""),
            r#"tollgate.toml: notify[0].as: expected a non-empty string, got " ""#,
        ),
        (
            "notify as a table",
            with_secret("[notify]\nname = \"ops\"\n"),
            "tollgate.toml: notify: expected an array of tables ([[notify]]), got a table",
        ),
    ]);
}

#[test]
fn with_tokens_as_names_a_token_that_may_approve() {
    let as_ = |name: &str| with_secret(&format!("{TOKENS}{}", SLACK.replace("as = \"alice\"", name)));
    check(&[
        (
            "a token without the approver role",
            as_("as = \"bob\""),
            r#"tollgate.toml: notify[0].as: expected the name of a token with the approver role, got "bob", whose token (auth.tokens[1]) has only runner; the notifier's links decide calls as this actor"#,
        ),
        (
            "no such token",
            as_("as = \"carol\""),
            r#"tollgate.toml: notify[0].as: expected the name of a token in [[auth.tokens]] with the approver role ("alice", "root"), got "carol""#,
        ),
        (
            "no as",
            as_(""),
            "tollgate.toml: notify[0].as: missing, expected the name of a token in [[auth.tokens]] with the approver \
             role: the actor the notifier's links decide as",
        ),
    ]);
    let only_runners =
        with_secret(&format!("[[auth.tokens]]\nname = \"bob\"\ntoken = \"bob-token\"\nroles = [\"runner\"]\n{SLACK}"));
    check(&[(
        "nobody may approve",
        only_runners,
        r#"tollgate.toml: notify[0].as: expected the name of a token in [[auth.tokens]] with the approver role (no token has it), got "alice""#,
    )]);
    // A name shared by a runner token and an approver token (one being rotated out) may decide.
    let shared = with_secret(&format!(
        "{TOKENS}[[auth.tokens]]\nname = \"bob\"\ntoken = \"bob-token-2\"\nroles = [\"approver\"]\n{}",
        SLACK.replace("as = \"alice\"", "as = \"bob\"")
    ));
    assert_eq!(parse(&shared).map(|c| c.notify[0].actor.clone()).ok(), Some(Actor::new("bob")));
}

#[test]
fn escalation_rules_name_their_key() {
    check(&[
        (
            "an unknown notifier",
            agent("escalate_after = \"1h\"\nescalate_to = [\"ops\", \"pager\"]"),
            r#"tollgate.toml: agents[0].escalate_to[1]: expected the name of a notifier defined in [[notify]] ("ops"), got "pager""#,
        ),
        (
            "no notifier at all",
            format!(
                "{PROVIDER}[[agents]]\nname = \"a\"\nprovider = \"s\"\nescalate_after = \"1h\"\nescalate_to = [\"ops\"]\n"
            ),
            r#"tollgate.toml: agents[0].escalate_to[0]: expected the name of a notifier defined in [[notify]] (none is defined), got "ops""#,
        ),
        (
            "escalate_to without escalate_after",
            agent("escalate_to = [\"ops\"]"),
            r#"tollgate.toml: agents[0].escalate_after: missing, expected a duration like "1h": how long a run waits before escalate_to is told (a duration like "30s", "15m", "24h" or "30d")"#,
        ),
        (
            "escalate_after without escalate_to",
            agent("escalate_after = \"1h\""),
            "tollgate.toml: agents[0].escalate_to: missing, expected the names of the [[notify]] entries to tell when \
             a run has waited escalate_after",
        ),
        (
            "an empty escalate_to",
            agent("escalate_after = \"1h\"\nescalate_to = []"),
            "tollgate.toml: agents[0].escalate_to: expected at least one notifier name (leave out escalate_to and \
             escalate_after for no escalation)",
        ),
        (
            "a zero escalate_after",
            agent("escalate_after = \"0s\"\nescalate_to = [\"ops\"]"),
            r#"tollgate.toml: agents[0].escalate_after: expected a duration greater than zero, got "0s""#,
        ),
        (
            "escalate_after not a duration",
            agent("escalate_after = 3600\nescalate_to = [\"ops\"]"),
            r#"tollgate.toml: agents[0].escalate_after: expected a duration like "30s", "15m", "24h" or "30d", got 3600"#,
        ),
    ]);
}

#[test]
fn notifier_secrets_are_resolved_listed_and_never_printed() -> anyhow::Result<()> {
    let text = format!(
        "[server]\nlink_secret = \"env:LINK\"\n\
         [[notify]]\nname = \"ops\"\nkind = \"slack\"\nurl = \"env:SLACK_URL\"\nas = \"alice\"\n{}",
        email("username = \"tollgate\"\npassword = \"env:SMTP_PASSWORD\"")
    );
    let env = [
        ("LINK", "link-secret-value-0123456789abcdef"),
        ("SLACK_URL", "https://hooks.slack.com/services/T0/B0/slack-secret"),
        ("SMTP_PASSWORD", "smtp-password-value"),
    ];
    let config = loader(&env).load_str("tollgate.toml", &text)?;
    let listed = config.secret_values();
    let debug = format!("{config:?}");
    for (_, secret) in env {
        assert!(listed.iter().any(|s| s == secret), "{secret} listed");
        assert!(!debug.contains(secret), "{secret} printed in {debug}");
    }

    for (missing, key) in
        [("LINK", "server.link_secret"), ("SLACK_URL", "notify[0].url"), ("SMTP_PASSWORD", "notify[1].password")]
    {
        let env: Vec<_> = env.iter().copied().filter(|(name, _)| *name != missing).collect();
        let result = loader(&env).load_str("tollgate.toml", &text);
        let Err(error) = result else { anyhow::bail!("{missing}: expected an error") };
        assert!(matches!(&error, ConfigError::MissingEnvVar { variable, .. } if variable == missing));
        assert_eq!(error.to_string(), format!("tollgate.toml: {key}: environment variable {missing} is not set"));
    }
    Ok(())
}
