//! `http_request` (ask): one HTTP(S) request, its response returned as a status line, a few headers and
//! the body.
//!
//! The promise: the request that runs is the one the approver read, and nothing the model chose is hidden
//! from them. The preview shows the method, the URL in full (a password in it included), every header with
//! its value (`Authorization`, `X-Api-Key` and cookies included: the model chose them, and they may carry
//! data out) and the body whole up to [`PREVIEW_BODY_BYTES`]; a longer body is shown up to there, with its
//! length and a line saying the whole of it is the call's `body` argument (which every surface keeps and
//! shows in full). Nothing is masked because Tollgate adds no secret of its own to a request (only its
//! `User-Agent`); secrets configured for redaction are masked by the runtime's redactor, as everywhere.
//! Redirects are not followed — a redirect is returned to the model with its `Location`, so a
//! request to another address needs its own approval. The whole exchange, body included, is bounded by a
//! timeout, and at most [`MAX_BODY_BYTES`] of the response body are read. A response outside 2xx is an
//! error result, with the same text.
//!
//! TLS is rustls with the aws-lc-rs provider (the workspace's `reqwest`), never native-tls.

use crate::bounded::{CappedBytes, cap_preview, prefix_at_char_boundary};
use crate::suggest::one;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;
use tollgate_agent_core::{Gate, ToolContext, ToolError, ToolOutput, TypedTool};

/// How long a request may take, response body included, unless the tool is built with another.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes of the response body returned to the model.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// The methods a call may use.
pub const METHODS: [&str; 6] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"];
/// Bytes of the request body shown in a preview: a longer one is shown up to here, with a line saying so.
/// With the rest of a preview it stays under the 20,000 bytes a preview may take.
pub const PREVIEW_BODY_BYTES: usize = 16_000;
/// The response headers returned to the model (others, like `set-cookie`, are left out).
const SHOWN_RESPONSE_HEADERS: [&str; 7] =
    ["content-type", "content-length", "content-encoding", "location", "retry-after", "etag", "last-modified"];

/// `http_request`: sends one HTTP(S) request and returns the response, bounded.
pub struct HttpRequest {
    timeout: Duration,
    /// Built on first use: building can fail (TLS setup), and a tool constructor cannot.
    client: OnceLock<reqwest::Client>,
}

/// The arguments of `http_request`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpArgs {
    /// The HTTP method.
    #[schemars(extend("enum" = METHODS))]
    method: String,
    /// An absolute http:// or https:// URL.
    url: String,
    /// Request headers, name to value.
    // JSON values in the order given, so that `check` can name a header whose value is not a string. No
    // `default` (`{}`) in the schema (`skip_serializing_if`): the hand-written schema it replaces had none.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    #[schemars(with = "BTreeMap<String, String>")]
    headers: Map<String, Value>,
    /// The request body, sent as given.
    body: Option<String>,
}

/// A call whose arguments were checked.
struct Plan {
    method: Method,
    url: Url,
    /// The headers in the order given, as names and values.
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Option<String>,
}

impl Default for HttpRequest {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpRequest {
    /// The tool with the [`DEFAULT_TIMEOUT`].
    pub fn new() -> Self {
        Self::with_timeout(DEFAULT_TIMEOUT)
    }

    /// The tool with another timeout for the whole exchange.
    pub fn with_timeout(timeout: Duration) -> Self {
        Self { timeout, client: OnceLock::new() }
    }

    fn check(args: &HttpArgs) -> Result<Plan, String> {
        if !METHODS.contains(&args.method.as_str()) {
            return Err(format!("invalid arguments: method `{}` is not one of {}", args.method, METHODS.join(", ")));
        }
        let method = Method::from_bytes(args.method.as_bytes())
            .map_err(|e| format!("invalid arguments: method `{}`: {e}", args.method))?;
        let url = Url::parse(&args.url).map_err(|e| format!("invalid arguments: url `{}`: {e}", args.url))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("invalid arguments: url `{}` must be http:// or https://", args.url));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(format!("invalid arguments: url `{}` has no host", args.url));
        }
        let mut headers = Vec::with_capacity(args.headers.len());
        for (name, value) in &args.headers {
            let Value::String(value) = value else {
                return Err(format!("invalid arguments: header `{name}` must be a string"));
            };
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("invalid arguments: `{name}` is not a valid header name"))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| format!("invalid arguments: the value of header `{name}` is not a valid header value"))?;
            headers.push((name, value));
        }
        Ok(Plan { method, url, headers, body: args.body.clone() })
    }

    fn client(&self) -> Result<&reqwest::Client, ToolError> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("tollgate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                ToolError::new(format!("cannot set up the HTTP client: {}", tollgate_agent_core::error_chain(&e)))
            })?;
        // Two first calls may race to build; either client is as good.
        Ok(self.client.get_or_init(|| client))
    }

    async fn send(&self, args: &HttpArgs) -> Result<ToolOutput, ToolError> {
        let plan = match Self::check(args) {
            Ok(plan) => plan,
            Err(e) => return Ok(ToolOutput::error(e)),
        };
        let shown = format!("{} {}", plan.method, plan.url);
        let headers: HeaderMap = plan.headers.into_iter().collect();
        let mut request = self.client()?.request(plan.method, plan.url).headers(headers).timeout(self.timeout);
        if let Some(body) = plan.body {
            request = request.body(body);
        }
        let timed_out = || ToolOutput::error(format!("request timed out after {}: {shown}", seconds(self.timeout)));
        let failed = |e: &reqwest::Error| {
            if e.is_timeout() {
                timed_out()
            } else {
                ToolOutput::error(format!("{shown} failed: {}", tollgate_agent_core::error_chain(e)))
            }
        };
        let mut response = match request.send().await {
            Ok(response) => response,
            Err(e) => return Ok(failed(&e)),
        };
        let status = response.status();
        let mut text =
            format!("{:?} {} {}", response.version(), status.as_str(), status.canonical_reason().unwrap_or_default())
                .trim_end()
                .to_owned();
        for name in SHOWN_RESPONSE_HEADERS {
            for value in response.headers().get_all(name) {
                text.push_str(&format!("\n{name}: {}", String::from_utf8_lossy(value.as_bytes())));
            }
        }
        let announced = response.content_length();
        let mut body = CappedBytes::new(MAX_BODY_BYTES);
        while !body.is_cut() {
            match response.chunk().await {
                Ok(Some(chunk)) => body.push(&chunk),
                Ok(None) => break,
                Err(e) => return Ok(failed(&e)),
            }
        }
        // Stop reading here: dropping the response closes the connection on the rest of a long body.
        drop(response);
        text.push_str("\n\n");
        text.push_str(&body_text(&body, announced));
        Ok(if status.is_success() { ToolOutput::text(text) } else { ToolOutput::error(text) })
    }

    fn preview_of(&self, plan: &Plan) -> String {
        let mut text = format!("{} {}", plan.method, plan.url);
        for (name, value) in &plan.headers {
            text.push_str(&format!("\n{name}: {}", String::from_utf8_lossy(value.as_bytes())));
        }
        match &plan.body {
            None => text.push_str("\nno body"),
            Some(body) => {
                let start = prefix_at_char_boundary(body, PREVIEW_BODY_BYTES);
                if start.len() == body.len() {
                    text.push_str(&format!("\nbody ({} bytes):\n{body}", body.len()));
                } else {
                    text.push_str(&format!(
                        "\nbody ({} bytes, the first {} shown):\n{start}\n[body cut at {} of {} bytes: the whole body \
                         is this call's `body` argument]",
                        body.len(),
                        start.len(),
                        start.len(),
                        body.len()
                    ));
                }
            }
        }
        text.push_str(&format!("\ntimeout: {}", seconds(self.timeout)));
        cap_preview(text)
    }
}

/// The response body for the model: text, or a note for binary content, with a marker when it was cut.
fn body_text(body: &CappedBytes, announced: Option<u64>) -> String {
    let kept = body.kept();
    let text = match std::str::from_utf8(kept) {
        Ok(text) => Some(text),
        // A character split by the cap is not binary content.
        Err(e) if body.is_cut() && e.error_len().is_none() => std::str::from_utf8(&kept[..e.valid_up_to()]).ok(),
        Err(_) => None,
    };
    let mut shown = match text {
        Some(text) if !text.contains('\0') => {
            if text.is_empty() && !body.is_cut() {
                return "(empty body)".to_owned();
            }
            text.to_owned()
        }
        _ => format!("[binary body: {} bytes not shown]", body.total()),
    };
    if body.is_cut() {
        if !shown.ends_with('\n') {
            shown.push('\n');
        }
        let total = match announced {
            Some(total) => format!("{total} bytes in all"),
            None => "more followed".to_owned(),
        };
        shown.push_str(&format!("[body cut at {MAX_BODY_BYTES} bytes; {total}]"));
    }
    shown
}

fn seconds(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs.fract() == 0.0 { format!("{secs:.0}s") } else { format!("{secs}s") }
}

impl TypedTool for HttpRequest {
    type Args = HttpArgs;
    const NAME: &str = "http_request";
    const DESCRIPTION: &str = "Send an HTTP(S) request (GET, POST, PUT, PATCH, DELETE or HEAD) and return the status, main headers and body (redirects are not followed).";
    const GATE: Gate = Gate::Ask;

    async fn validate(&self, args: &HttpArgs) -> Result<(), String> {
        Self::check(args).map(drop)
    }

    async fn preview(&self, args: &HttpArgs) -> Option<String> {
        Self::check(args).ok().map(|plan| self.preview_of(&plan))
    }

    async fn call(&self, args: HttpArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        self.send(&args).await
    }

    /// The same method to the same scheme and host: `{"/method": "GET", "/url": "https://example.com/**"}`
    /// (the port as given, if given); `None` for a URL `origin_prefix` cannot judge.
    fn suggested_match(&self, args: &HttpArgs) -> Option<Map<String, Value>> {
        let origin = origin_prefix(&args.url)?;
        let mut pattern = one("/method", Value::String(args.method.clone()));
        pattern.insert("/url".to_owned(), Value::String(format!("{origin}/**")));
        Some(pattern)
    }
}

/// The start of `url` up to the end of its host and port, as written (`https://example.com:8443`), when
/// every URL that starts with it and goes on with `/` (or ends there) is sent to the same scheme, host
/// and port as `url`: an http(s) URL without a user name or password, whose prefix holds no glob
/// wildcard (`*`, `?`) and nothing a URL parser reads otherwise (`\`, `#`, `@`). `None` otherwise.
fn origin_prefix(url: &str) -> Option<&str> {
    let parsed = Url::parse(url).ok()?;
    if !matches!(parsed.scheme(), "http" | "https") || !parsed.username().is_empty() || parsed.password().is_some() {
        return None;
    }
    let host_start = url.find("://")? + 3;
    let host_end = url[host_start..].find('/').map_or(url.len(), |at| host_start + at);
    let prefix = &url[..host_end];
    if prefix.contains(['*', '?', '#', '@', '\\']) {
        return None;
    }
    let origin = Url::parse(prefix).ok()?;
    let same = origin.scheme() == parsed.scheme()
        && origin.host() == parsed.host()
        && origin.port_or_known_default() == parsed.port_or_known_default()
        && origin.username().is_empty()
        && origin.password().is_none()
        && origin.path() == "/"
        && origin.query().is_none();
    same.then_some(prefix)
}
