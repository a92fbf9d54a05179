//! What the HTTP adapters share: their settings, the API key, and one POST with typed errors and retries.
//!
//! Promises kept here for every adapter:
//! - the API key travels only in a request header marked sensitive; it is never logged, never part of an
//!   error message (any echo of it in a provider's answer is replaced by `[redacted]`) and never printed by
//!   a `Debug` implementation;
//! - 429, 5xx, connection failures (a stream cut, or ended before its final event, included) and timeouts
//!   are retried with exponential backoff and jitter, honouring `Retry-After`, up to `max_retries` times;
//!   every other failure is returned at once;
//! - redirects are not followed, so a key sent in a custom header never reaches another host.

use crate::stream::{Assembler, Counted, Flow, SseReader, ended_early};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};
use tollgate_agent_core::{ModelDeltas, ModelError};

/// What replaces the API key wherever a provider's answer echoes it.
const REDACTED: &str = "[redacted]";

/// The longest provider message kept in an error, in bytes.
pub(crate) const MAX_MESSAGE_BYTES: usize = 1_000;

/// An API key. Its `Debug` output is redacted and it has no `Display`, so it cannot end up in a log line
/// or an error message by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key (already resolved from `env:NAME` or a literal by the caller).
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key itself, for the one header that carries it.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(")?;
        f.write_str(REDACTED)?;
        f.write_str(")")
    }
}

/// How to reach one provider: the plain settings a `[[providers]]` entry of `tollgate.toml` maps into.
///
/// `Default` gives the vendor's own endpoint, no key, a 60 s timeout, 3 retries starting at 500 ms and
/// capped at 60 s, 4096 output tokens, and streamed answers.
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderSettings {
    /// The API's base address, following each vendor SDK's convention: OpenAI-compatible includes `/v1`
    /// (requests go to `{base_url}/chat/completions`), Anthropic does not (requests go to
    /// `{base_url}/v1/messages`). `None` means the vendor's own endpoint.
    pub base_url: Option<String>,
    /// The API key; optional for local servers.
    pub api_key: Option<ApiKey>,
    /// How long one attempt may take, from sending the request to reading the whole answer.
    pub timeout: Duration,
    /// How many times a retryable failure is retried (so at most `max_retries + 1` attempts).
    pub max_retries: u32,
    /// The backoff before the first retry; it doubles with each further retry.
    pub initial_backoff: Duration,
    /// The longest backoff. A `Retry-After` longer than this is not waited for: the rate-limit error is
    /// returned instead, with the provider's `retry_after`.
    pub max_backoff: Duration,
    /// The most tokens a response may have. Anthropic requires it on every request; the OpenAI-compatible
    /// adapter leaves the choice to the server and does not send it.
    pub max_output_tokens: u32,
    /// Ask for a streamed answer and send its text to the loop's deltas as it arrives
    /// ([`ModelClient::complete_streaming`](tollgate_agent_core::ModelClient::complete_streaming)); the
    /// response and the stored events are the same either way.
    pub stream: bool,
}

impl Default for ProviderSettings {
    fn default() -> Self {
        Self {
            base_url: None,
            api_key: None,
            timeout: Duration::from_secs(60),
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(60),
            max_output_tokens: 4096,
            stream: true,
        }
    }
}

impl fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderSettings")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| REDACTED))
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("max_output_tokens", &self.max_output_tokens)
            .field("stream", &self.stream)
            .finish()
    }
}

/// A provider adapter that cannot be built from its settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// `base_url` is not an absolute `http` or `https` address.
    #[error("invalid base_url `{url}`: {reason}")]
    InvalidBaseUrl {
        /// The address as configured.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The API key cannot be sent in an HTTP header (e.g. it contains a line break).
    #[error("the API key contains characters that cannot be sent in an HTTP header")]
    InvalidApiKey,
    /// The HTTP client could not be set up (e.g. TLS could not be initialised).
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
}

/// A header the adapter sends with every request; `secret` ones carry the key.
pub(crate) struct FixedHeader {
    pub(crate) name: &'static str,
    pub(crate) value: String,
    pub(crate) secret: bool,
}

/// A provider's failure answer, as far as it could be read.
pub(crate) struct ProviderFailure {
    /// The HTTP status.
    pub(crate) status: u16,
    /// The provider's message, redacted and cut to a sane length.
    pub(crate) message: String,
    /// The provider's machine-readable code or error type, if it gave one (`error.code`, `error.type`).
    #[cfg_attr(not(feature = "openai"), allow(dead_code))]
    pub(crate) code: Option<String>,
}

/// Decides whether a provider's 4xx answer means the transcript is too long for the model.
pub(crate) type ContextLengthRule = fn(&ProviderFailure) -> bool;

/// One provider endpoint: a POST of a JSON body, with typed errors and retries.
pub(crate) struct Endpoint {
    provider: &'static str,
    client: reqwest::Client,
    url: String,
    /// The host and port of `url` (for traces' `server.address` and `server.port`).
    server: (String, u16),
    key: Option<ApiKey>,
    timeout: Duration,
    max_retries: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    is_context_length: ContextLengthRule,
    /// Ask for streamed answers ([`ProviderSettings::stream`]).
    stream: bool,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("provider", &self.provider)
            .field("url", &self.url)
            .field("api_key", &self.key.as_ref().map(|_| REDACTED))
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// An endpoint at `{base_url}{path}` (`default_base` when the settings name none).
    pub(crate) fn new(
        provider: &'static str,
        settings: &ProviderSettings,
        default_base: &str,
        path: &str,
        headers: Vec<FixedHeader>,
        is_context_length: ContextLengthRule,
    ) -> Result<Self, ProviderError> {
        let base = settings.base_url.as_deref().unwrap_or(default_base);
        let url = join_url(base, path)?;
        let server = reqwest::Url::parse(&url)
            .ok()
            // An IPv6 host without its brackets, as `server.address` takes it.
            .and_then(|parsed| {
                let host = parsed.host_str()?.trim_start_matches('[').trim_end_matches(']').to_owned();
                Some((host, parsed.port_or_known_default()?))
            })
            .ok_or_else(|| ProviderError::InvalidBaseUrl { url: base.to_owned(), reason: "it names no host".into() })?;
        let mut header_map = HeaderMap::new();
        for header in headers {
            let mut value = HeaderValue::from_str(&header.value).map_err(|_| {
                if header.secret {
                    ProviderError::InvalidApiKey
                } else {
                    ProviderError::Client(format!("header {} has an invalid value", header.name))
                }
            })?;
            value.set_sensitive(header.secret);
            header_map.insert(HeaderName::from_static(header.name), value);
        }
        let client = reqwest::Client::builder()
            .default_headers(header_map)
            .user_agent(concat!("tollgate/", env!("CARGO_PKG_VERSION")))
            .timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ProviderError::Client(tollgate_agent_core::error_chain(&e)))?;
        Ok(Self {
            provider,
            client,
            url,
            server,
            key: settings.api_key.clone(),
            timeout: settings.timeout,
            max_retries: settings.max_retries,
            initial_backoff: settings.initial_backoff,
            max_backoff: settings.max_backoff,
            is_context_length,
            stream: settings.stream,
        })
    }

    /// The address requests go to.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The host and port requests go to.
    pub(crate) fn server(&self) -> (&str, u16) {
        (&self.server.0, self.server.1)
    }

    /// Sends `body`, retrying retryable failures, and returns the provider's JSON answer.
    async fn post(&self, model: &str, body: &Value) -> Result<Value, ModelError> {
        self.with_retries(model, || self.attempt(body)).await
    }

    /// Sends `body`, retrying retryable failures, and returns the provider's plain JSON answer. With
    /// `stream` set the request asks for a stream ([`Assembler::ask_for_stream`]), the text goes to
    /// `deltas` as it arrives, and `A` builds the plain answer back from the events ([`crate::stream`]).
    pub(crate) async fn answer<A: Assembler>(
        &self,
        model: &str,
        mut body: Value,
        deltas: &dyn ModelDeltas,
    ) -> Result<Value, ModelError> {
        if !self.stream {
            return self.post(model, &body).await;
        }
        if let Value::Object(fields) = &mut body {
            A::ask_for_stream(fields);
        }
        let counted = Counted::new(deltas);
        self.with_retries(model, || {
            counted.reset();
            self.attempt_streaming::<A>(&body, &counted)
        })
        .await
    }

    /// Makes `attempt` until it answers, a failure is not retryable, or `max_retries` retries were made.
    async fn with_retries<F, Fut>(&self, model: &str, mut attempt: F) -> Result<Value, ModelError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Value, ModelError>>,
    {
        let mut retries = 0;
        loop {
            let started = Instant::now();
            let error = match attempt().await {
                Ok(answer) => {
                    tracing::debug!(
                        provider = self.provider,
                        model,
                        elapsed_ms = elapsed_ms(started),
                        retries,
                        "model call answered"
                    );
                    return Ok(answer);
                }
                Err(error) => error,
            };
            let delay = match self.backoff(&error, retries) {
                Some(delay) => delay,
                None => {
                    tracing::warn!(
                        provider = self.provider,
                        model,
                        kind = %error.kind(),
                        retries,
                        error = %error,
                        "model call failed"
                    );
                    return Err(error);
                }
            };
            retries += 1;
            tracing::warn!(
                provider = self.provider,
                model,
                kind = %error.kind(),
                retry = retries,
                of = self.max_retries,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error = %error,
                "model call failed; retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }

    /// How long to wait before retrying after `error`, or `None` when it must not be retried.
    fn backoff(&self, error: &ModelError, retries_so_far: u32) -> Option<Duration> {
        if !error.is_retryable() || retries_so_far >= self.max_retries {
            return None;
        }
        if let ModelError::RateLimited { retry_after: Some(wait), .. } = error {
            return (*wait <= self.max_backoff).then_some(*wait);
        }
        let exponential = self
            .initial_backoff
            .checked_mul(2u32.saturating_pow(retries_so_far))
            .unwrap_or(self.max_backoff)
            .min(self.max_backoff);
        // "Equal jitter": half the delay is fixed, the other half random, so many clients that failed
        // together do not come back together.
        let half = exponential / 2;
        let jitter_range = u64::try_from((exponential - half).as_nanos()).unwrap_or(u64::MAX);
        let jitter = if jitter_range == 0 { 0 } else { random_u64() % (jitter_range + 1) };
        Some(half + Duration::from_nanos(jitter))
    }

    async fn attempt(&self, body: &Value) -> Result<Value, ModelError> {
        let response = self.client.post(&self.url).json(body).send().await.map_err(|e| self.transport_error(&e))?;
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers());
        let bytes = response.bytes().await.map_err(|e| self.transport_error(&e))?;
        self.read_answer(status, &bytes, retry_after)
    }

    /// One streamed attempt: the events of a 2xx `text/event-stream` answer through `A`; any other answer
    /// as [`read_answer`](Self::read_answer) reads it (a server that ignores `stream: true` answers JSON).
    async fn attempt_streaming<A: Assembler>(
        &self,
        body: &Value,
        deltas: &dyn ModelDeltas,
    ) -> Result<Value, ModelError> {
        let mut response = self.client.post(&self.url).json(body).send().await.map_err(|e| self.transport_error(&e))?;
        let status = response.status().as_u16();
        let event_stream = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.trim_start().to_ascii_lowercase().starts_with("text/event-stream"));
        if !(200..300).contains(&status) || !event_stream {
            let retry_after = retry_after(response.headers());
            let bytes = response.bytes().await.map_err(|e| self.transport_error(&e))?;
            return self.read_answer(status, &bytes, retry_after);
        }
        let mut reader = SseReader::default();
        let mut assembler = A::default();
        loop {
            let Some(chunk) = response.chunk().await.map_err(|e| self.transport_error(&e))? else {
                return Err(ended_early());
            };
            for event in reader.push(&chunk)? {
                let flow =
                    assembler.event(event.name.as_deref(), &event.data, deltas).map_err(|e| self.redact_error(e))?;
                if flow == Flow::Done {
                    return assembler.finish().map_err(|e| self.redact_error(e));
                }
            }
        }
    }

    /// An answer as received: the JSON of a 2xx body, or the typed error its status and body stand for.
    pub(crate) fn read_answer(
        &self,
        status: u16,
        bytes: &[u8],
        retry_after: Option<Duration>,
    ) -> Result<Value, ModelError> {
        if (200..300).contains(&status) {
            return serde_json::from_slice(bytes).map_err(|e| {
                ModelError::InvalidResponse(format!("the answer is not valid JSON ({e}); it may have been cut off"))
            });
        }
        let failure = self.failure(status, bytes);
        Err(self.classify(failure, retry_after))
    }

    /// Reads a failure answer: the provider's message and code where it gave them, else the raw text.
    fn failure(&self, status: u16, bytes: &[u8]) -> ProviderFailure {
        let parsed: Option<Value> = serde_json::from_slice(bytes).ok();
        let error = parsed.as_ref().map(|v| v.get("error").unwrap_or(v));
        let text_at = |key: &str| match error.and_then(|e| e.get(key)) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        let message = text_at("message")
            .or_else(|| error.and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(bytes).trim().to_owned());
        let message = if message.is_empty() { format!("HTTP {status} with an empty body") } else { message };
        ProviderFailure {
            status,
            message: self.redact(message),
            code: text_at("code").or_else(|| text_at("type")).map(|c| self.redact(c)),
        }
    }

    fn classify(&self, failure: ProviderFailure, retry_after: Option<Duration>) -> ModelError {
        let ProviderFailure { status, message, .. } = &failure;
        let status = *status;
        match status {
            429 => ModelError::RateLimited { message: message.clone(), retry_after },
            500..=599 => ModelError::Server { status, message: message.clone() },
            401 | 403 => ModelError::Auth { status, message: message.clone() },
            300..=399 => ModelError::BadRequest {
                status,
                message: format!(
                    "the provider redirected the request, which Tollgate does not follow; set base_url to the \
                     final address ({message})"
                ),
            },
            400..=499 if (self.is_context_length)(&failure) => ModelError::ContextLength(failure.message),
            400..=499 => ModelError::BadRequest { status, message: failure.message },
            _ => ModelError::InvalidResponse(format!("unexpected HTTP status {status}: {message}")),
        }
    }

    fn transport_error(&self, error: &reqwest::Error) -> ModelError {
        if error.is_timeout() {
            ModelError::Timeout(self.timeout)
        } else {
            ModelError::Connection(self.redact(tollgate_agent_core::error_chain(error)))
        }
    }

    /// Applies [`Endpoint::redact`] to an error built from an answer's body, which may quote it (a
    /// streamed answer's error event can be any kind).
    pub(crate) fn redact_error(&self, error: ModelError) -> ModelError {
        match error {
            ModelError::InvalidResponse(m) => ModelError::InvalidResponse(self.redact(m)),
            ModelError::Refusal(m) => ModelError::Refusal(self.redact(m)),
            ModelError::ContextLength(m) => ModelError::ContextLength(self.redact(m)),
            ModelError::Server { status, message } => ModelError::Server { status, message: self.redact(message) },
            ModelError::RateLimited { message, retry_after } => {
                ModelError::RateLimited { message: self.redact(message), retry_after }
            }
            other => other,
        }
    }

    /// Replaces every occurrence of the API key, and the masked echo of it a provider prints
    /// (`sk-PRO...3456`, with [`tollgate_agent_core::Redactor`]'s rule), and cuts the text to a length fit for
    /// an error message.
    pub(crate) fn redact(&self, text: String) -> String {
        let text = match &self.key {
            Some(key) if !key.expose().is_empty() => {
                let text = if text.contains(key.expose()) { text.replace(key.expose(), REDACTED) } else { text };
                match tollgate_agent_core::Redactor::new([key.expose()]).redact(&text) {
                    std::borrow::Cow::Owned(clean) => clean,
                    std::borrow::Cow::Borrowed(_) => text,
                }
            }
            _ => text,
        };
        truncate(text, MAX_MESSAGE_BYTES)
    }
}

/// `{base}{path}`, checking that the base is an absolute http(s) address.
fn join_url(base: &str, path: &str) -> Result<String, ProviderError> {
    let invalid = |reason: &str| ProviderError::InvalidBaseUrl { url: base.to_owned(), reason: reason.to_owned() };
    let parsed = reqwest::Url::parse(base).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid("the scheme must be http or https"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(invalid("it must not have a query or a fragment"));
    }
    Ok(format!("{}{path}", base.trim_end_matches('/')))
}

/// `Retry-After` in seconds (OpenAI's `retry-after-ms` too). An HTTP-date is ignored: the backoff applies.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok();
    let seconds = number("retry-after-ms").map(|ms| ms / 1000.0).or_else(|| number("retry-after"))?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(86_400.0)))
}

fn truncate(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
    text
}

fn elapsed_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// A random number for jitter: std seeds every `RandomState` with fresh random keys, so the hash of
/// nothing is a new random value each time, without a dependency on a random number crate.
fn random_u64() -> u64 {
    std::collections::hash_map::RandomState::new().build_hasher().finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(settings: ProviderSettings) -> Endpoint {
        Endpoint::new("test", &settings, "http://127.0.0.1:1", "/x", Vec::new(), |_| false)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn debug_output_redacts_the_key() {
        let settings = ProviderSettings { api_key: Some(ApiKey::new("sk-secret-123")), ..Default::default() };
        let printed = format!("{settings:?} {:?} {:?}", settings.api_key, endpoint(settings.clone()));
        assert!(!printed.contains("sk-secret-123"), "{printed}");
        assert!(printed.contains(REDACTED), "{printed}");
    }

    #[test]
    fn base_url_must_be_absolute_http() {
        let with = |base: &str| ProviderSettings { base_url: Some(base.into()), ..Default::default() };
        for bad in ["127.0.0.1:11434/v1", "ftp://example.com", "http://h/v1?key=1"] {
            let result = Endpoint::new("test", &with(bad), "", "/x", Vec::new(), |_| false);
            assert!(matches!(result, Err(ProviderError::InvalidBaseUrl { .. })), "{bad}");
        }
        let ok = endpoint(with("http://127.0.0.1:11434/v1/"));
        assert_eq!(ok.url(), "http://127.0.0.1:11434/v1/x");
        assert_eq!(ok.server(), ("127.0.0.1", 11434));
        assert_eq!(endpoint(with("https://api.example.com/v1")).server(), ("api.example.com", 443));
        assert_eq!(endpoint(with("http://[::1]:8080")).server(), ("::1", 8080));
    }

    #[test]
    fn backoff_doubles_with_jitter_and_stops_at_max_retries() {
        let settings = ProviderSettings {
            max_retries: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(300),
            ..Default::default()
        };
        let endpoint = endpoint(settings);
        let server = ModelError::Server { status: 503, message: String::new() };
        let in_range = |retries, low, high| {
            let delay = endpoint.backoff(&server, retries).unwrap_or_default();
            assert!(
                delay >= Duration::from_millis(low) && delay <= Duration::from_millis(high),
                "retry {retries}: {delay:?}"
            );
        };
        in_range(0, 50, 100);
        in_range(1, 100, 200);
        in_range(2, 150, 300);
        assert_eq!(endpoint.backoff(&server, 3), None);
        assert_eq!(endpoint.backoff(&ModelError::Auth { status: 401, message: String::new() }, 0), None);
    }

    #[test]
    fn retry_after_is_honoured_up_to_max_backoff() {
        let endpoint = endpoint(ProviderSettings { max_backoff: Duration::from_secs(5), ..Default::default() });
        let limited = |secs| ModelError::RateLimited { message: String::new(), retry_after: Some(secs) };
        assert_eq!(endpoint.backoff(&limited(Duration::from_secs(2)), 0), Some(Duration::from_secs(2)));
        assert_eq!(endpoint.backoff(&limited(Duration::from_secs(30)), 0), None);
    }

    #[test]
    fn reads_retry_after_headers() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(150)));
        headers.clear();
        headers.insert("retry-after", HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"));
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn failure_messages_are_redacted_and_cut() {
        let endpoint = endpoint(ProviderSettings { api_key: Some(ApiKey::new("sk-abc")), ..Default::default() });
        let body =
            br#"{"error": {"message": "bad key sk-abc", "type": "invalid_request_error", "code": "invalid_api_key"}}"#;
        let failure = endpoint.failure(401, body);
        assert_eq!(failure.message, "bad key [redacted]");
        assert_eq!(failure.code.as_deref(), Some("invalid_api_key"));
        let long = "x".repeat(5_000);
        assert!(endpoint.failure(500, long.as_bytes()).message.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8());
        assert_eq!(endpoint.failure(502, b"").message, "HTTP 502 with an empty body");
    }
}
