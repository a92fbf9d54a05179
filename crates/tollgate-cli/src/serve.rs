//! `tollgate serve`: the HTTP API and the playground over the configured runtime, until SIGINT/SIGTERM.
//!
//! It refuses to start when an agent's `shell` may use the network (`shell_network = true`) and no
//! `[[auth.tokens]]` are configured: the commands run as the user who started the server, whom local mode
//! lets in as `local` with every role, so an approved command could reach the API and decide the run's
//! next held call itself.

use crate::args::ServeArgs;
use crate::exit::{CliError, Exit};
use crate::local::Local;
use std::time::Duration;
use tollgate_agent_config::{Config, ConfigSource, NotifyConfig, NotifyKind, NotifyOn, Role as ConfigRole};
use tollgate_agent_server::{
    ApiToken, EmailNotifier, EmailSettings, LinkSecret, Notifier, Retention, Role, ServerOptions, SlackNotifier,
    Transport, WebhookTarget,
};

/// How long one attempt to send a notification may take (connection, TLS and conversation together).
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(10);

/// Maps the configuration onto the server's options and serves until a shutdown signal.
pub(crate) async fn serve(local: &Local, args: &ServeArgs) -> Result<Exit, CliError> {
    let config = &local.config;
    refuse_networked_shell_without_tokens(config)?;
    // A damaged database is refused before anything is served from it (SQLite's `quick_check`).
    crate::doctor::refuse_corrupt(local.runtime.health().as_ref()).await?;
    // Runs started over HTTP use the workspace tools: the folder must exist before any call is checked.
    local.ensure_workspace()?;
    let addr = args.addr.unwrap_or(config.server.addr);
    let agents: Vec<&str> = local.runtime.agents().map(|agent| agent.name.as_str()).collect();
    let options = ServerOptions {
        addr,
        // Links start with `public_url`; without one, with the address served (`--addr` included).
        public_url: Some(config.server.public_url.clone().unwrap_or_else(|| format!("http://{addr}"))),
        link_secret: match &config.server.link_secret {
            Some(secret) => Some(
                LinkSecret::new(secret.expose().as_bytes().to_vec())
                    .map_err(|e| CliError::usage(format!("[server] link_secret: {e}")))?,
            ),
            None => None,
        },
        notifiers: config.notify.iter().map(|n| notifier(n, &agents)).collect::<Result<_, _>>()?,
        max_body_bytes: usize::try_from(config.server.max_body_bytes).unwrap_or(usize::MAX),
        header_read_timeout: config.server.header_read_timeout,
        idle_timeout: config.server.idle_timeout,
        body_timeout: config.server.body_timeout,
        ready_timeout: config.server.ready_timeout,
        max_connections: usize::try_from(config.server.max_connections).unwrap_or(usize::MAX),
        max_streams_per_client: usize::try_from(config.server.max_streams_per_client).unwrap_or(usize::MAX),
        tokens: config
            .auth
            .tokens
            .iter()
            .map(|t| ApiToken {
                name: t.name.clone(),
                token: t.token.expose().to_owned(),
                roles: t
                    .roles
                    .iter()
                    .map(|r| match r {
                        ConfigRole::Runner => Role::Runner,
                        ConfigRole::Approver => Role::Approver,
                        ConfigRole::Admin => Role::Admin,
                    })
                    .collect(),
            })
            .collect(),
        webhooks: config
            .webhooks
            .iter()
            .map(|w| WebhookTarget {
                url: w.url.clone(),
                secret: w.secret.as_ref().map(|s| s.expose().to_owned()).unwrap_or_default(),
                events: w.events.clone(),
            })
            .collect(),
        retention: Retention {
            terminal_after: config.retention.terminal_after,
            waiting_after: config.retention.waiting_after,
        },
        ..ServerOptions::default()
    };
    if let Some(warning) = local.app.sandbox_warning() {
        say!("tollgate: warning: {warning}");
    }
    eprintln!("tollgate: serving the API and the playground on http://{}", options.addr);
    tollgate_agent_server::serve(local.runtime.clone(), options, tollgate_agent_server::shutdown_signal())
        .await
        .map_err(|e| CliError::usage(format!("cannot serve: {e}")))?;
    Ok(Exit::Done)
}

/// The server's notifier for a `[[notify]]` entry: its transport built from the settings and secrets, and
/// the configured agents its globs cover when its `on` lists `approval_requested`.
fn notifier(config: &NotifyConfig, agents: &[&str]) -> Result<Notifier, CliError> {
    let refused = |e: tollgate_agent_server::SetupError| CliError::usage(format!("notify `{}`: {e}", config.name));
    let transport = match &config.kind {
        NotifyKind::Slack(slack) => {
            Transport::Slack(SlackNotifier::new(slack.url.expose().to_owned(), NOTIFY_TIMEOUT).map_err(refused)?)
        }
        NotifyKind::Email(email) => Transport::Email(
            EmailNotifier::new(EmailSettings {
                host: email.host.clone(),
                port: email.port,
                starttls: email.starttls,
                credentials: email
                    .username
                    .clone()
                    .map(|user| (user, email.password.as_ref().map(|p| p.expose().to_owned()).unwrap_or_default())),
                from: email.from.clone(),
                to: email.to.clone(),
                timeout: NOTIFY_TIMEOUT,
            })
            .map_err(refused)?,
        ),
    };
    let agents = if config.sends_on(NotifyOn::ApprovalRequested) {
        agents.iter().filter(|name| config.covers_agent(name)).map(|name| (*name).to_owned()).collect()
    } else {
        Vec::new()
    };
    Ok(Notifier { name: config.name.clone(), transport, actor: config.actor.clone(), agents })
}

/// A configuration error when an agent offers the built-in `shell` with `shell_network = true` and no
/// tokens are configured (see the module's header).
fn refuse_networked_shell_without_tokens(config: &Config) -> Result<(), CliError> {
    if !config.auth.tokens.is_empty() {
        return Ok(());
    }
    let networked =
        config.agents.iter().enumerate().find(|(_, agent)| agent.shell_network && agent.offers_tool("shell"));
    let Some((index, agent)) = networked else { return Ok(()) };
    Err(CliError::usage(format!(
        "{}: agents[{index}] (`{}`) has shell_network = true, and with no [[auth.tokens]] configured its shell \
         commands (run as this same user) could reach this server's API as `local` and decide held calls; \
         configure [[auth.tokens]] (docs/configuration.md) to serve it, or set shell_network = false",
        match &config.source {
            ConfigSource::File(path) => path.display().to_string(),
            ConfigSource::Defaults => "the configuration".to_owned(),
        },
        agent.name
    )))
}
