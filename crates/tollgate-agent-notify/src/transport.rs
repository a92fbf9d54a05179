//! How a notification leaves the process: a Slack incoming webhook ([`SlackNotifier`]) or a mail over SMTP
//! ([`EmailNotifier`]), one attempt per [`send`](Transport::send); the caller retries (at least once, with
//! backoff) when the [`SendError`] says the failure may pass.
//!
//! The invariant: no error, `Debug` output or log line of this module holds a secret — the Slack webhook
//! URL (its path is the credential) or the SMTP password.

use std::sync::Arc;
use std::time::Duration;

use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::message::{Notification, email_message, slack_message};
use crate::text::{is_web_url, line, shorten};

/// The most characters of a Slack error response kept in a [`SendError`].
const RESPONSE_EXCERPT: usize = 200;

/// A notification that was not delivered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SendError {
    /// What went wrong, for a log line (never a secret).
    pub message: String,
    /// True when the same notification may get through later: a timeout, a refused or broken connection, a
    /// server error (HTTP 5xx, SMTP 4xx), HTTP 429. False when it will fail the same way again.
    pub retryable: bool,
}

impl SendError {
    fn retryable(message: impl Into<String>) -> SendError {
        SendError { message: message.into(), retryable: true }
    }

    fn permanent(message: impl Into<String>) -> SendError {
        SendError { message: message.into(), retryable: false }
    }
}

/// A notifier that cannot be made from its settings.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// The Slack webhook URL is not an `http(s)` URL (the URL itself is a secret and is not shown).
    #[error("the Slack webhook URL is not an http(s) URL")]
    SlackUrl,
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(String),
    /// A sender or recipient is not a mailbox.
    #[error("`{value}` is not a mailbox ({field}): {reason}")]
    Mailbox {
        /// `from` or `to`.
        field: &'static str,
        /// The text given.
        value: String,
        /// Why it does not parse.
        reason: String,
    },
    /// A mail needs at least one recipient.
    #[error("a mail notifier needs at least one recipient in `to`")]
    NoRecipients,
    /// The TLS settings for STARTTLS could not be made.
    #[error("cannot set up STARTTLS for `{host}`: {reason}")]
    Tls {
        /// The SMTP host.
        host: String,
        /// Why.
        reason: String,
    },
}

/// Posts a notification's Block Kit message to a Slack incoming webhook.
#[derive(Clone)]
pub struct SlackNotifier {
    url: String,
    client: reqwest::Client,
    timeout: Duration,
}

impl std::fmt::Debug for SlackNotifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackNotifier").field("url", &"[secret]").field("timeout", &self.timeout).finish()
    }
}

impl SlackNotifier {
    /// A notifier posting to the webhook `url` (a secret), each attempt given up after `timeout`. Redirects
    /// are not followed.
    pub fn new(url: String, timeout: Duration) -> Result<SlackNotifier, SetupError> {
        if !is_web_url(&url) || reqwest::Url::parse(&url).is_err() {
            return Err(SetupError::SlackUrl);
        }
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| SetupError::HttpClient(tollgate_agent_core::error_chain(&e.without_url())))?;
        Ok(SlackNotifier { url, client, timeout })
    }

    /// Posts `notification` once: a 2xx answer is delivered; any other answer or failure is an error.
    pub async fn send(&self, notification: &Notification) -> Result<(), SendError> {
        let response = self
            .client
            .post(&self.url)
            .json(&slack_message(notification))
            .send()
            .await
            .map_err(|e| self.request_error(e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        // Slack says why in a short text body (`invalid_payload`, `no_service`); a bounded excerpt of it.
        let body = match response.bytes().await {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes[..bytes.len().min(RESPONSE_EXCERPT * 4)]).into_owned();
                line(&shorten(text.trim(), RESPONSE_EXCERPT)).into_owned()
            }
            Err(_) => String::new(),
        };
        let message = if body.is_empty() {
            format!("Slack answered HTTP {}", status.as_u16())
        } else {
            format!("Slack answered HTTP {}: {body}", status.as_u16())
        };
        let retryable = status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS;
        Err(SendError { message, retryable })
    }

    fn request_error(&self, error: reqwest::Error) -> SendError {
        if error.is_timeout() {
            return SendError::retryable(format!("Slack did not answer within {:?}", self.timeout));
        }
        let what = if error.is_connect() { "cannot connect to Slack" } else { "the request to Slack failed" };
        // `without_url`: reqwest's errors name the URL, which is the webhook's secret.
        let detail = self.scrub(&tollgate_agent_core::error_chain(&error.without_url()));
        SendError::retryable(format!("{what}: {detail}"))
    }

    /// `text` with the webhook URL, were it to appear, replaced.
    fn scrub(&self, text: &str) -> String {
        text.replace(&self.url, "[slack webhook url]")
    }
}

/// How to reach an SMTP server and whom to write to.
#[derive(Clone)]
pub struct EmailSettings {
    /// The SMTP server's host name (also the name its TLS certificate must carry).
    pub host: String,
    /// Its port (587 for STARTTLS, 25 without, by the config's defaults).
    pub port: u16,
    /// Upgrade the connection with STARTTLS, and refuse to send without it.
    pub starttls: bool,
    /// The user name and password to log in with, if the server wants them.
    pub credentials: Option<(String, String)>,
    /// The sender: a mailbox such as `Tollgate <tollgate@example.com>`.
    pub from: String,
    /// The recipients, each a mailbox; at least one.
    pub to: Vec<String>,
    /// How long one attempt may take, connection and conversation together.
    pub timeout: Duration,
}

impl std::fmt::Debug for EmailSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailSettings")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("starttls", &self.starttls)
            .field("username", &self.credentials.as_ref().map(|(user, _)| user))
            .field("from", &self.from)
            .field("to", &self.to)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Sends a notification as a mail (plain text and HTML alternatives) over SMTP.
#[derive(Clone)]
pub struct EmailNotifier {
    transport: Arc<AsyncSmtpTransport<Tokio1Executor>>,
    from: Mailbox,
    to: Vec<Mailbox>,
    /// The password, kept only to be scrubbed from error texts.
    password: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for EmailNotifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailNotifier")
            .field("from", &self.from.to_string())
            .field("to", &self.to.iter().map(ToString::to_string).collect::<Vec<_>>())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl EmailNotifier {
    /// A notifier for `settings`; refuses a sender or recipient that is not a mailbox, and an empty `to`.
    pub fn new(settings: EmailSettings) -> Result<EmailNotifier, SetupError> {
        let mailbox = |field: &'static str, value: &str| {
            value.parse::<Mailbox>().map_err(|e| SetupError::Mailbox {
                field,
                value: value.to_owned(),
                reason: e.to_string(),
            })
        };
        let from = mailbox("from", &settings.from)?;
        let to = settings.to.iter().map(|to| mailbox("to", to)).collect::<Result<Vec<_>, _>>()?;
        if to.is_empty() {
            return Err(SetupError::NoRecipients);
        }
        let tls = if settings.starttls {
            let parameters = TlsParameters::new(settings.host.clone())
                .map_err(|e| SetupError::Tls { host: settings.host.clone(), reason: e.to_string() })?;
            Tls::Required(parameters)
        } else {
            Tls::None
        };
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(settings.host.as_str())
            .port(settings.port)
            .tls(tls)
            .timeout(Some(settings.timeout));
        let mut password = None;
        if let Some((username, secret)) = settings.credentials {
            password = Some(secret.clone()).filter(|p| !p.is_empty());
            builder = builder.credentials(Credentials::new(username, secret));
        }
        Ok(EmailNotifier { transport: Arc::new(builder.build()), from, to, password, timeout: settings.timeout })
    }

    /// Sends `notification` once, as one mail to every recipient; the whole attempt (connection, TLS, login
    /// and conversation) is given up after the settings' timeout.
    pub async fn send(&self, notification: &Notification) -> Result<(), SendError> {
        let content = email_message(notification);
        let mut builder = Message::builder().from(self.from.clone()).subject(content.subject);
        for to in &self.to {
            builder = builder.to(to.clone());
        }
        let message = builder
            .multipart(MultiPart::alternative_plain_html(content.text, content.html))
            .map_err(|e| SendError::permanent(format!("cannot build the mail: {e}")))?;
        match tokio::time::timeout(self.timeout, self.transport.send(message)).await {
            Err(_) => Err(SendError::retryable(format!("the SMTP server did not finish within {:?}", self.timeout))),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(self.smtp_error(&error)),
        }
    }

    fn smtp_error(&self, error: &lettre::transport::smtp::Error) -> SendError {
        let detail = tollgate_agent_core::error_chain(error);
        let detail = match &self.password {
            Some(password) => detail.replace(password.as_str(), "[password]"),
            None => detail,
        };
        let detail = line(&shorten(&detail, 500)).into_owned();
        // A 4xx reply, a broken or refused connection and a timeout may pass; a 5xx reply (a refused login,
        // an unknown recipient), a TLS failure or a client error will fail the same way again.
        let retryable = error.is_transient()
            || error.is_timeout()
            || !(error.is_permanent() || error.is_tls() || error.is_client());
        SendError { message: format!("mail not sent: {detail}"), retryable }
    }
}

/// One configured notifier, whichever its kind.
#[derive(Clone, Debug)]
pub enum Transport {
    /// A Slack incoming webhook.
    Slack(SlackNotifier),
    /// Mail over SMTP.
    Email(EmailNotifier),
}

impl Transport {
    /// Sends `notification` once through this notifier.
    pub async fn send(&self, notification: &Notification) -> Result<(), SendError> {
        match self {
            Transport::Slack(slack) => slack.send(notification).await,
            Transport::Email(email) => email.send(notification).await,
        }
    }
}
