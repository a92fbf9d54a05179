//! `--server URL` mode: the commands act through a Tollgate server's HTTP API (docs/api.md) instead of opening
//! a store, with the token of `TOLLGATE_TOKEN` (sent as `Authorization: Bearer …` when set).
//!
//! What it promises: the same output and exit codes as local mode. The server's answers map onto the
//! exit codes of docs/cli.md: 400, 401, 403, 413, 415 and 422 are arguments the server rejects (2, nothing was
//! done); 404 for a run is an unknown run (1) and for an agent an unknown agent (2, as locally); 409 is a
//! conflict (4); a server that cannot be reached, or answers 5xx, is a failure (1).
//!
//! Where the API has no counterpart of a local operation, this module does the work on the client side:
//! - **Id prefixes.** The API looks runs up by full id only. A full id costs one `GET /v1/runs/{id}`; a
//!   shorter prefix is resolved by listing every run (`GET /v1/runs`, pages of 500, newest first) and
//!   matching ids, so it costs one request per 500 runs on the server: fine for hundreds or thousands of
//!   runs, slow for millions (give the full id there).
//! - **Following a run.** `run` and the deciding commands send their request without `wait`, then follow
//!   the run's live events (`GET /v1/runs/{id}/events` as SSE) as a wake-up signal, reading the run
//!   after each burst of events (and every few seconds regardless) until it waits or ends.
//! - **Verify.** There is no verify endpoint and the run object carries no chain head, so `verify` reads
//!   every event and checks, with [`tollgate_agent_core::verify_chain`], that seqs run 1, 2, … without a gap
//!   and that each hash matches the event and the hash before it. Unlike local mode it cannot see
//!   events cut off the end of the log (the recorded head is not served), and it trusts the server to
//!   serve the log as stored.
//! - **Unknown `--call`.** Checked against the held turn before anything is sent, so that it is exit 1
//!   naming the call, as locally (the API answers 422 for it).

use crate::backend::{GrantFilter, GrantsPage};
use crate::exit::DecisionRefused;
use crate::exit::{CliError, Exit};
use crate::view::{GrantView, RunView};
use reqwest::{Method, StatusCode, Url};
use serde_json::Value;
use std::time::{Duration, Instant};
use tollgate_agent_core::{
    CallId, ChainBreak, Decision, GrantId, RunId, RunStatus, StoredEvent, TraceContext, verify_chain,
};
use tollgate_agent_protocol::{
    ApproveDecision, CallDecision, CancelRequest, CreateGrantRequest, DecisionRequest, DenyDecision, EditDecision,
    Problem, PurgeRequest, PurgeResult, Remember, RespondDecision, RunPage, StartRunRequest,
};
use tollgate_agent_runtime::decide::RememberSpec;
use tollgate_agent_runtime::{DecisionSet, LiveText, NewGrant};

/// The environment variable holding the API token.
pub const TOKEN_ENV: &str = "TOLLGATE_TOKEN";
/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one ordinary request may take (live event streams have no such bound).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Runs are listed in pages of this size when resolving a prefix, and grants when listing them (the
/// API's largest `limit`).
const LIST_PAGE: u32 = 500;
/// How long the live stream may stay quiet before the run is read again anyway.
const LOOK_AGAIN: Duration = Duration::from_secs(2);
/// After a first new event, how long to keep reading so that a burst of events is one wake-up.
const COALESCE: Duration = Duration::from_millis(25);
/// The pause before opening the live stream again after it failed or ended early.
const RECONNECT: Duration = Duration::from_millis(250);

/// A client of one Tollgate server. Cheap to clone. (Not `Debug`: it holds the token.)
#[derive(Clone)]
pub struct Remote {
    /// The server's URL, its path ending in `/`, without query or fragment.
    base: Url,
    /// The URL for messages: as given, without a password.
    shown: String,
    token: Option<String>,
    client: reqwest::Client,
}

/// An answer other than the one asked for.
#[derive(Debug)]
enum HttpError {
    /// No answer: the server cannot be reached, or the connection broke.
    Unreachable(String),
    /// A non-2xx answer: its status and the problem's `detail` (or the body's text).
    Refused {
        /// The HTTP status.
        status: StatusCode,
        /// What the server said.
        detail: String,
    },
    /// A 2xx answer whose body is not what docs/api.md says.
    Unexpected(String),
}

impl Remote {
    /// A client of the server at `url` (`http://` or `https://`), with `token` (from `TOLLGATE_TOKEN`).
    pub fn new(url: &str, token: Option<String>) -> Result<Remote, CliError> {
        let mut base = Url::parse(url).map_err(|e| CliError::usage(format!("--server `{url}` is not a URL: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") || base.host_str().is_none() {
            return Err(CliError::usage(format!(
                "--server `{url}` must be an http:// or https:// URL, e.g. http://127.0.0.1:8080"
            )));
        }
        // A server behind a path prefix (e.g. a reverse proxy's `/tollgate`) keeps it.
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        base.set_query(None);
        base.set_fragment(None);
        let mut shown = base.clone();
        let _ = shown.set_password(None);
        let shown = shown.as_str().trim_end_matches('/').to_owned();
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("tollgate-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| CliError::failed(format!("cannot set up the HTTP client: {e}")))?;
        let token = token.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
        Ok(Remote { base, shown, token, client })
    }

    /// The token from `TOLLGATE_TOKEN`, when set and not blank.
    pub fn token_from_env() -> Option<String> {
        std::env::var(TOKEN_ENV).ok().filter(|t| !t.trim().is_empty())
    }

    /// The URL of an API path (`v1/runs`, …) on this server, with query parameters.
    fn url(&self, path: &str, query: &[(&str, &str)]) -> Url {
        let mut url = self.base.clone();
        url.set_path(&format!("{}{path}", self.base.path()));
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        url
    }

    fn request(&self, method: Method, url: Url) -> reqwest::RequestBuilder {
        let request = self.client.request(method, url);
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends one request and returns the JSON body of a 2xx answer.
    async fn call(&self, method: Method, url: Url, body: Option<&Value>) -> Result<Value, HttpError> {
        self.send(self.request(method, url), body).await
    }

    /// Sends `request` (with `body` as JSON, if any) and returns the JSON body of a 2xx answer.
    async fn send(&self, request: reqwest::RequestBuilder, body: Option<&Value>) -> Result<Value, HttpError> {
        let mut request = request.timeout(REQUEST_TIMEOUT);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| HttpError::Unreachable(cause(&e.without_url())))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| HttpError::Unreachable(cause(&e.without_url())))?;
        if !status.is_success() {
            let detail = serde_json::from_str::<Problem>(&text)
                .map(|problem| problem.detail)
                .unwrap_or_else(|_| text.trim().chars().take(300).collect());
            return Err(HttpError::Refused { status, detail });
        }
        serde_json::from_str(&text).map_err(|e| HttpError::Unexpected(format!("the answer is not JSON: {e}")))
    }

    /// The CLI's error for an answer that was not the one asked for; `not_found` says what a 404 means.
    fn error(&self, error: HttpError, not_found: impl FnOnce(String) -> CliError) -> CliError {
        match error {
            HttpError::Unreachable(why) => {
                CliError::failed(format!("cannot reach the Tollgate server at {}: {why}", self.shown))
            }
            HttpError::Unexpected(why) => {
                CliError::failed(format!("the server at {} answered unexpectedly: {why}", self.shown))
            }
            HttpError::Refused { status, detail } => match status {
                StatusCode::UNAUTHORIZED => CliError::usage(match &self.token {
                    None => format!(
                        "the server at {} needs a token: set {TOKEN_ENV} to an API token ({detail})",
                        self.shown
                    ),
                    Some(_) => format!("the server at {} refused the token in {TOKEN_ENV}: {detail}", self.shown),
                }),
                StatusCode::FORBIDDEN => CliError::usage(format!("not allowed: {detail}")),
                StatusCode::NOT_FOUND => not_found(detail),
                StatusCode::CONFLICT => CliError::new(Exit::Conflict, detail),
                s if s.is_client_error() => CliError::usage(detail),
                s => CliError::failed(format!("the server answered {s}: {detail}")),
            },
        }
    }

    /// The error for a request about run `id`: a 404 means the run is gone.
    fn run_error(&self, error: HttpError, id: &RunId) -> CliError {
        self.error(error, |_| CliError::failed(format!("run {id} not found")))
    }

    async fn run_call(
        &self,
        method: Method,
        path: &str,
        id: &RunId,
        body: Option<&Value>,
    ) -> Result<RunView, CliError> {
        let json = self.call(method, self.url(path, &[]), body).await.map_err(|e| self.run_error(e, id))?;
        self.view(json)
    }

    fn view(&self, json: Value) -> Result<RunView, CliError> {
        RunView::from_json(json)
            .map_err(|e| CliError::failed(format!("the server at {} answered unexpectedly: {e}", self.shown)))
    }

    /// Starts a run (`POST /v1/runs`, not waiting: the caller follows it), inside the caller's trace
    /// `trace_parent` when there is one (sent as `traceparent`).
    pub async fn start(
        &self,
        agent: Option<&str>,
        input: &str,
        metadata: serde_json::Map<String, Value>,
        trace_parent: Option<TraceContext>,
    ) -> Result<RunView, CliError> {
        let body = request_body(&StartRunRequest {
            agent: agent.map(str::to_owned),
            input: input.to_owned(),
            // Left out when empty: the smallest body that says what it means (and one an older server takes).
            metadata: (!metadata.is_empty()).then_some(metadata),
            wait: None,
        });
        let mut request = self.request(Method::POST, self.url("v1/runs", &[]));
        if let Some(parent) = trace_parent {
            request = request.header("traceparent", parent.to_string());
        }
        let answer = self.send(request, Some(&body)).await;
        let json = match answer {
            Ok(json) => json,
            // As locally: an unknown agent is a usage error naming it.
            Err(HttpError::Refused { status: StatusCode::NOT_FOUND, detail }) => {
                return Err(CliError::usage(match agent {
                    Some(name) => format!("unknown agent `{name}`"),
                    None => detail,
                }));
            }
            Err(error) => return Err(self.error(error, CliError::usage)),
        };
        self.view(json)
    }

    /// Reads one run.
    pub async fn get(&self, id: &RunId) -> Result<RunView, CliError> {
        self.run_call(Method::GET, &format!("v1/runs/{id}"), id, None).await
    }

    /// The full id of the one run whose id starts with `prefix` (see the module's notes on the cost).
    pub async fn resolve(&self, prefix: &str) -> Result<RunId, CliError> {
        let none = || CliError::failed(format!("no run matches `{prefix}`"));
        if is_full_id(prefix) {
            return match self.call(Method::GET, self.url(&format!("v1/runs/{prefix}"), &[]), None).await {
                Ok(_) => Ok(RunId::from(prefix)),
                Err(error) => Err(self.error(error, |_| none())),
            };
        }
        // Ids are lowercase hex and hyphens: anything else matches no run, without asking.
        if !prefix.chars().all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c)) {
            return Err(none());
        }
        let mut matches = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let limit = LIST_PAGE.to_string();
            let mut query = vec![("limit", limit.as_str())];
            if let Some(cursor) = &cursor {
                query.push(("cursor", cursor.as_str()));
            }
            let url = self.url("v1/runs", &query);
            let page = self.call(Method::GET, url, None).await.map_err(|e| self.error(e, CliError::failed))?;
            let page: RunPage = serde_json::from_value(page)
                .map_err(|e| self.unexpected(&format!("the list of runs does not read: {e}")))?;
            matches.extend(page.runs.iter().map(|r| &r.id).filter(|id| id.starts_with(prefix)).cloned());
            match page.next_cursor {
                Some(next) if !page.runs.is_empty() => cursor = Some(next),
                _ => break,
            }
        }
        match matches.len() {
            0 => Err(none()),
            1 => Ok(matches.remove(0)),
            n => Err(CliError::failed(format!("the prefix `{prefix}` matches {n} runs; give more characters"))),
        }
    }

    fn unexpected(&self, why: &str) -> CliError {
        CliError::failed(format!("the server at {} answered unexpectedly: {why}", self.shown))
    }

    /// Waits until run `id` waits for approval or has ended, following its live events.
    pub async fn wait_settled(&self, id: &RunId) -> Result<RunView, CliError> {
        let mut feed = self.feed(id);
        loop {
            let run = self.get(id).await?;
            if run.status == RunStatus::WaitingForApproval || run.status.is_terminal() {
                return Ok(run);
            }
            feed.changed().await;
        }
    }

    /// Lists runs, newest first (one page).
    pub async fn list(
        &self,
        status: Option<RunStatus>,
        agent: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RunView>, CliError> {
        let limit = limit.to_string();
        let mut query = vec![("limit", limit.as_str())];
        if let Some(status) = status {
            query.push(("status", status.as_str()));
        }
        if let Some(agent) = agent {
            query.push(("agent", agent));
        }
        let url = self.url("v1/runs", &query);
        let page = self.call(Method::GET, url, None).await.map_err(|e| self.error(e, CliError::failed))?;
        let runs = page["runs"].as_array().ok_or_else(|| self.unexpected("no `runs` in the list"))?;
        runs.iter().map(|r| self.view(r.clone())).collect()
    }

    /// A run's events after seq `after` (the server answers them all).
    pub async fn events(&self, id: &RunId, after: u64) -> Result<Vec<StoredEvent>, CliError> {
        let url = self.url(&format!("v1/runs/{id}/events"), &[("after", &after.to_string())]);
        let answer = self.call(Method::GET, url, None).await.map_err(|e| self.run_error(e, id))?;
        serde_json::from_value(answer["events"].clone())
            .map_err(|e| self.unexpected(&format!("the events do not read: {e}")))
    }

    /// Sends decisions for the held turn of `run` (as read just before), naming its turn digest, with a
    /// `remember` on each approval `remember` names.
    pub async fn decide(
        &self,
        run: &RunView,
        set: &DecisionSet,
        remember: &[(CallId, RememberSpec)],
    ) -> Result<RunView, DecisionRefused> {
        let digest = run.pending.as_ref().map(|p| p.turn_digest.clone()).unwrap_or_default();
        let request = match set {
            DecisionSet::ApproveAll => DecisionRequest::approve_all(digest),
            DecisionSet::DenyAll { reason } => DecisionRequest::deny_all(digest, reason.clone()),
            DecisionSet::Each(list) => {
                if let Some(pending) = &run.pending
                    && let Some((unknown, _)) =
                        list.iter().find(|(id, _)| !pending.calls.iter().any(|c| &c.call_id == id))
                {
                    return Err(DecisionRefused::Invalid(CliError::failed(format!("no held call has id `{unknown}`"))));
                }
                let remembered = |id: &CallId| remember.iter().find(|(call, _)| call == id).map(|(_, spec)| spec);
                let items = list.iter().map(|(id, d)| call_decision(id, d, remembered(id))).collect();
                DecisionRequest::each(digest, items)
            }
        };
        let body = request_body(&request);
        let url = self.url(&format!("v1/runs/{}/decisions", run.id), &[]);
        match self.call(Method::POST, url, Some(&body)).await {
            Ok(json) => self.view(json).map_err(DecisionRefused::Failed),
            Err(HttpError::Refused { status: StatusCode::CONFLICT, detail }) => Err(DecisionRefused::Conflict(detail)),
            Err(HttpError::Refused { status: StatusCode::FORBIDDEN, detail }) => {
                Err(DecisionRefused::Forbidden(CliError::usage(format!("not allowed: {detail}"))))
            }
            Err(HttpError::Refused { status: StatusCode::UNPROCESSABLE_ENTITY, detail }) => {
                Err(DecisionRefused::Invalid(CliError::usage(detail)))
            }
            Err(error) => Err(DecisionRefused::Failed(self.run_error(error, &run.id))),
        }
    }

    /// Makes a grant (`POST /v1/grants`).
    pub async fn create_grant(&self, new: NewGrant) -> Result<GrantView, CliError> {
        let body = request_body(&CreateGrantRequest {
            agent: new.agent,
            tool: new.tool,
            // Left out when empty or the default: the smallest body that says what it means.
            r#match: (!new.pattern.is_empty()).then_some(new.pattern),
            scope: Some(new.scope),
            run_id: new.run_id,
            ttl: new.ttl.map(ttl_text),
            reason: new.reason,
            apply_to_waiting: new.apply_to_waiting.then_some(true),
        });
        // A 404 names the unknown agent, tool or run (exit 1, as locally).
        let json = self
            .call(Method::POST, self.url("v1/grants", &[]), Some(&body))
            .await
            .map_err(|e| self.error(e, CliError::failed))?;
        self.grant_view(json)
    }

    /// One page of grants (`GET /v1/grants`), newest first.
    pub async fn grants(&self, filter: GrantFilter<'_>, cursor: Option<&str>) -> Result<GrantsPage, CliError> {
        let limit = LIST_PAGE.to_string();
        let mut query = vec![("limit", limit.as_str()), ("active", if filter.active { "true" } else { "false" })];
        if let Some(agent) = filter.agent {
            query.push(("agent", agent));
        }
        if let Some(tool) = filter.tool {
            query.push(("tool", tool));
        }
        if let Some(cursor) = cursor {
            query.push(("cursor", cursor));
        }
        let url = self.url("v1/grants", &query);
        let mut page = self.call(Method::GET, url, None).await.map_err(|e| self.error(e, CliError::failed))?;
        let listed = match page.get_mut("grants").map(Value::take) {
            Some(Value::Array(listed)) => listed,
            _ => return Err(self.unexpected("no `grants` in the list")),
        };
        let grants = listed.into_iter().map(|g| self.grant_view(g)).collect::<Result<_, _>>()?;
        let next_cursor = page["next_cursor"].as_str().map(str::to_owned);
        Ok(GrantsPage { grants, next_cursor })
    }

    /// One grant (`GET /v1/grants/{id}`).
    pub async fn grant(&self, id: &GrantId) -> Result<GrantView, CliError> {
        let url = self.url(&format!("v1/grants/{id}"), &[]);
        let json = self.call(Method::GET, url, None).await.map_err(|e| self.grant_error(e, id))?;
        self.grant_view(json)
    }

    /// Revokes a grant (`DELETE /v1/grants/{id}`): a 409 when it is already revoked or expired.
    pub async fn revoke_grant(&self, id: &GrantId) -> Result<GrantView, CliError> {
        let url = self.url(&format!("v1/grants/{id}"), &[]);
        let json = self.call(Method::DELETE, url, None).await.map_err(|e| self.grant_error(e, id))?;
        self.grant_view(json)
    }

    /// The error for a request about grant `id`: a 404 means no grant has it (named as locally).
    fn grant_error(&self, error: HttpError, id: &GrantId) -> CliError {
        self.error(error, |_| CliError::failed(format!("no grant has id `{id}`")))
    }

    fn grant_view(&self, json: Value) -> Result<GrantView, CliError> {
        GrantView::from_json(json).map_err(|e| self.unexpected(&e))
    }

    /// Cancels a run that has not finished.
    pub async fn cancel(&self, id: &RunId, reason: Option<&str>) -> Result<RunView, CliError> {
        let body = request_body(&CancelRequest { reason: reason.map(str::to_owned) });
        self.run_call(Method::POST, &format!("v1/runs/{id}/cancel"), id, Some(&body)).await
    }

    /// Applies retention now: terminal runs older than `older_than` (else the server's window) and the
    /// waiting runs of the server's window go. Returns how many went.
    pub async fn purge(&self, older_than: Option<Duration>) -> Result<u64, CliError> {
        let body =
            request_body(&PurgeRequest { older_than: older_than.map(|window| format!("{}s", window.as_secs())) });
        let answer = self
            .call(Method::POST, self.url("v1/purge", &[]), Some(&body))
            .await
            .map_err(|e| self.error(e, CliError::failed))?;
        let purged: PurgeResult =
            serde_json::from_value(answer).map_err(|_| self.unexpected("no `deleted_runs` in the answer"))?;
        Ok(purged.deleted_runs)
    }

    /// The tools of an agent with their effective gates, or every tool the server knows; each as the API
    /// lists it.
    pub async fn tools(&self, agent: Option<&str>) -> Result<Vec<Value>, CliError> {
        let url = match agent {
            Some(agent) => self.url("v1/tools", &[("agent", agent)]),
            None => self.url("v1/tools", &[]),
        };
        match self.call(Method::GET, url, None).await {
            Ok(answer) => {
                answer["tools"].as_array().cloned().ok_or_else(|| self.unexpected("no `tools` in the answer"))
            }
            Err(HttpError::Refused { status: StatusCode::NOT_FOUND, .. }) => {
                // As locally: name the agents there are.
                let known = self.agent_names().await.unwrap_or_default();
                Err(CliError::usage(format!(
                    "unknown agent `{}`; known agents: {}",
                    agent.unwrap_or_default(),
                    known.join(", ")
                )))
            }
            Err(error) => Err(self.error(error, CliError::usage)),
        }
    }

    async fn agent_names(&self) -> Result<Vec<String>, HttpError> {
        let answer = self.call(Method::GET, self.url("v1/agents", &[]), None).await?;
        Ok(answer["agents"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["name"].as_str().map(str::to_owned))
            .collect())
    }

    /// Checks run `id`'s hash chain as served (see the module's notes): the number of events when it is
    /// intact, else where it breaks.
    pub async fn verify(&self, id: &RunId) -> Result<Result<u64, ChainBreak>, CliError> {
        let events = self.events(id, 0).await?;
        let head = events.last().map(|e| e.hash.clone()).unwrap_or_default();
        let count = events.len() as u64;
        Ok(verify_chain(&events, count, &head).map(|()| count))
    }

    /// A follower of run `id`'s live events, from its first.
    pub fn feed(&self, id: &RunId) -> EventFeed {
        EventFeed {
            remote: self.clone(),
            run_id: id.clone(),
            last_seq: 0,
            response: None,
            buffer: Vec::new(),
            text: Vec::new(),
        }
    }

    /// Opens the live stream after `after`, with the model's live text (`deltas=true`); `None` when the
    /// run has ended and every event was sent (204).
    async fn open_stream(&self, id: &RunId, after: u64) -> Result<Option<reqwest::Response>, String> {
        let url = self.url(&format!("v1/runs/{id}/events"), &[("deltas", "true")]);
        let mut request = self.request(Method::GET, url).header(reqwest::header::ACCEPT, "text/event-stream");
        if after > 0 {
            request = request.header("Last-Event-ID", after.to_string());
        }
        let response = request.send().await.map_err(|e| cause(&e.without_url()))?;
        match response.status() {
            StatusCode::NO_CONTENT => Ok(None),
            s if s.is_success() => Ok(Some(response)),
            s => Err(format!("the live event stream answered {s}")),
        }
    }
}

/// Follows a run's live events (SSE) as a signal that the run changed; the caller reads the run itself.
pub struct EventFeed {
    remote: Remote,
    run_id: RunId,
    /// The seq of the last event received: a new stream starts after it.
    last_seq: u64,
    response: Option<reqwest::Response>,
    /// Received bytes not yet ending in a blank line.
    buffer: Vec<u8>,
    /// The model's live text received (`model_delta` events) and not taken yet.
    text: Vec<(u32, LiveText)>,
}

impl EventFeed {
    /// Waits until new events arrived (a burst counts once), or a while passed: the run may have changed
    /// (true); or until live text of the model came first (false; see [`take_text`](Self::take_text)).
    pub async fn changed(&mut self) -> bool {
        let mut deadline = Instant::now() + LOOK_AGAIN;
        let mut seen = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            let response = match &mut self.response {
                Some(response) => response,
                None if seen => return true,
                None => match self.remote.open_stream(&self.run_id, self.last_seq).await {
                    Ok(Some(response)) => self.response.insert(response),
                    // The run has ended and every event was sent: the caller reads the run.
                    Ok(None) => return true,
                    Err(why) => {
                        tracing::debug!(run = %self.run_id, %why, "cannot follow the run's live events");
                        tokio::time::sleep(RECONNECT.min(left)).await;
                        return true;
                    }
                },
            };
            match tokio::time::timeout(left, response.chunk()).await {
                Err(_) => return true,
                Ok(Ok(Some(bytes))) => {
                    if self.take(&bytes) > 0 && !seen {
                        seen = true;
                        deadline = Instant::now() + COALESCE;
                    }
                    if !seen && !self.text.is_empty() {
                        return false;
                    }
                }
                // The stream ended (after the run's terminal event, or the server is going away).
                Ok(Ok(None)) | Ok(Err(_)) => {
                    self.response = None;
                    if !seen {
                        tokio::time::sleep(RECONNECT.min(left)).await;
                    }
                    return true;
                }
            }
        }
    }

    /// The live text received since the last call, by round.
    pub fn take_text(&mut self) -> Vec<(u32, LiveText)> {
        std::mem::take(&mut self.text)
    }

    /// Takes received bytes; returns how many whole events they completed.
    fn take(&mut self, bytes: &[u8]) -> usize {
        self.buffer.extend_from_slice(bytes);
        let mut events = 0;
        while let Some(end) = find_blank_line(&self.buffer) {
            let block: Vec<u8> = self.buffer.drain(..end.1).collect();
            let text = String::from_utf8_lossy(&block[..end.0]);
            let mut data = None;
            let mut delta = false;
            for line in text.lines() {
                if let Some(id) = line.strip_prefix("id:") {
                    if let Ok(seq) = id.trim().parse::<u64>() {
                        self.last_seq = self.last_seq.max(seq);
                    }
                } else if let Some(value) = line.strip_prefix("data:") {
                    data = Some(value.trim_start().to_owned());
                } else if line.strip_prefix("event:").is_some_and(|name| name.trim() == "model_delta") {
                    delta = true;
                }
            }
            match (delta, data) {
                // The model's live text: not an event of the log, nothing to read again for it.
                (true, Some(data)) => self.text.extend(live_text(&data)),
                // Comment-only blocks are keep-alives.
                (false, Some(_)) => events += 1,
                (_, None) => {}
            }
        }
        events
    }
}

/// A `model_delta` event's data as (round, text), or `None` when it is not one.
fn live_text(data: &str) -> Option<(u32, LiveText)> {
    let delta: Value = serde_json::from_str(data).ok()?;
    let round = u32::try_from(delta.get("round")?.as_u64()?).ok()?;
    if delta.get("reset").and_then(Value::as_bool) == Some(true) {
        return Some((round, LiveText::Reset));
    }
    Some((round, LiveText::Text(delta.get("text")?.as_str()?.to_owned())))
}

/// The end of the first SSE block in `buffer`: (where its text ends, where the next block starts).
fn find_blank_line(buffer: &[u8]) -> Option<(usize, usize)> {
    let lf = buffer.windows(2).position(|w| w == b"\n\n").map(|i| (i, i + 2));
    let crlf = buffer.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, i + 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// A request body as JSON (the protocol's request types are strings, booleans and JSON values, which
/// always serialise).
fn request_body<T: serde::Serialize>(request: &T) -> Value {
    serde_json::to_value(request).unwrap_or(Value::Null)
}

/// A duration as the API writes it: whole seconds (`28800s`).
fn ttl_text(ttl: Duration) -> String {
    format!("{}s", ttl.as_secs())
}

/// One decision of a `decisions` body; an approval with its `remember`, when it has one.
fn call_decision(call_id: &CallId, decision: &Decision, remember: Option<&RememberSpec>) -> CallDecision {
    let call_id = call_id.clone();
    match decision {
        Decision::Approve => CallDecision::Approve(ApproveDecision {
            call_id,
            remember: remember.map(|spec| Remember {
                scope: Some(spec.scope),
                r#match: spec.pattern.clone(),
                ttl: spec.ttl.map(ttl_text),
                reason: spec.reason.clone(),
            }),
        }),
        Decision::Edit { arguments } => CallDecision::Edit(EditDecision { call_id, arguments: arguments.clone() }),
        Decision::Deny { reason } => CallDecision::Deny(DenyDecision { call_id, reason: Some(reason.clone()) }),
        Decision::Respond { result } => CallDecision::Respond(RespondDecision { call_id, result: result.clone() }),
    }
}

/// True for a whole run or grant id: a lowercase, hyphenated UUID.
pub(crate) fn is_full_id(text: &str) -> bool {
    text.len() == 36
        && text.char_indices().all(|(i, c)| {
            if matches!(i, 8 | 13 | 18 | 23) { c == '-' } else { c.is_ascii_digit() || ('a'..='f').contains(&c) }
        })
}

/// The innermost cause of a transport error, which says what actually went wrong (e.g. "Connection
/// refused"), after the outer message.
fn cause(error: &reqwest::Error) -> String {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    let mut last = None;
    while let Some(inner) = source {
        last = Some(inner.to_string());
        source = inner.source();
    }
    if let Some(last) = last.filter(|l| !message.contains(l.as_str())) {
        message.push_str(": ");
        message.push_str(&last);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls_with_a_host_are_servers() {
        assert!(Remote::new("http://127.0.0.1:8080", None).is_ok());
        assert!(Remote::new("https://tollgate.example/", Some("t".into())).is_ok());
        for bad in ["127.0.0.1:8080", "ftp://x", "http://", "not a url"] {
            let error = Remote::new(bad, None).err().map(|e| e.exit);
            assert_eq!(error, Some(Exit::Usage), "{bad}");
        }
    }

    #[test]
    fn api_paths_keep_the_servers_path_prefix() {
        let url = |server: &str| {
            let remote = Remote::new(server, None).unwrap_or_else(|e| panic!("{e}"));
            remote.url("v1/runs", &[("limit", "5"), ("status", "waiting_for_approval")]).to_string()
        };
        assert_eq!(url("http://127.0.0.1:8080"), "http://127.0.0.1:8080/v1/runs?limit=5&status=waiting_for_approval");
        assert_eq!(url("https://h/tollgate/?x=1"), "https://h/tollgate/v1/runs?limit=5&status=waiting_for_approval");
        assert_eq!(url("http://h/tollgate"), "http://h/tollgate/v1/runs?limit=5&status=waiting_for_approval");
    }

    #[test]
    fn full_ids_are_lowercase_hyphenated_uuids() {
        assert!(is_full_id("0193b0c6-0000-7000-8000-000000000001"));
        assert!(!is_full_id("0193B0C6-0000-7000-8000-000000000001"));
        assert!(!is_full_id("0193b0c6-0000-7000-8000"));
        assert!(!is_full_id("0193b0c6a0000a7000a8000a000000000001"));
    }

    #[test]
    fn sse_blocks_count_events_and_track_the_last_seq() {
        let Ok(remote) = Remote::new("http://127.0.0.1:1", None) else { panic!("a valid URL") };
        let mut feed = remote.feed(&RunId::from("r"));
        assert_eq!(feed.take(b": keep-alive\n\n"), 0, "a comment is no event");
        assert_eq!(feed.take(b"id: 3\nevent: decision\ndata: {}\n\nid: 4\nevent: run_resumed\nda"), 1);
        assert_eq!(feed.last_seq, 3);
        assert_eq!(feed.take(b"ta: {}\n\n"), 1, "an event split across chunks counts once it is whole");
        assert_eq!(feed.last_seq, 4);
        assert_eq!(feed.take(b"id: 5\r\ndata: {}\r\n\r\n"), 1);
        assert_eq!(feed.last_seq, 5);
    }
}
