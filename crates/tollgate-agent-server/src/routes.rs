//! The handlers of docs/api.md's endpoints. Each checks, in this order: the token (401), the role (403), the
//! body and query (400 / 413 / 415 / 422), then asks the runtime, whose refusals map to 404 / 409 /
//! 422 / 403. Nothing reaches the runtime before the request is known to be well-formed.

use crate::auth::{Caller, Role};
use crate::input::{RawBody, RunPath, is_run_id, parse_json, parse_optional_json, parse_query};
use crate::problem::{ApiError, ProblemKind};
use crate::{AppState, duration};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::sync::broadcast;
use tollgate_agent_core::{CallId, Decision, RunQuery, RunRecord, RunStatus};
use tollgate_agent_protocol::{
    AgentList, CallDecision, CancelRequest, DecisionRequest, EventPage, Health, Problem, PurgeRequest, PurgeResult,
    Run, RunPage, StartRunRequest, ToolList,
};
use tollgate_agent_runtime::decide::RememberSpec;
use tollgate_agent_runtime::view::run_view;
use tollgate_agent_runtime::{DecisionSet, RunNotice, StartRun, wire};
use utoipa::IntoParams;

/// `limit` when none is given.
pub const DEFAULT_LIMIT: u32 = RunQuery::DEFAULT_LIMIT;
/// The largest `limit`.
pub const MAX_LIMIT: u32 = 500;
/// The reason recorded for a denial given without one.
pub const DEFAULT_DENY_REASON: &str = "no reason given";

pub(crate) type ApiResult = Result<Response, ApiError>;

impl AppState {
    /// Waits until `run` waits for approval or has ended; at shutdown, answers with the run as it is.
    /// The run is already committed, so a failure to follow it (the store gone for a moment) is no
    /// failure of the request: it answers with `run` as committed, and the client reads on from there.
    /// `run`, as the request's own call committed it, once it waits for approval or has ended (or as
    /// stored when the server begins to shut down); `notices` were subscribed before that call.
    async fn settle(&self, run: RunRecord, notices: broadcast::Receiver<RunNotice>) -> RunRecord {
        let mut shutdown = self.shutdown.clone();
        let settled = tokio::select! {
            settled = self.runtime.wait_settled_from(run.clone(), notices) => settled,
            _ = crate::shutting_down(&mut shutdown) => self.runtime.get(&run.id).await,
        };
        settled.unwrap_or_else(|error| {
            tracing::warn!(run = %run.id, %error, "cannot follow a committed run; answering it as committed");
            run
        })
    }
}

/// Start a run.
#[utoipa::path(
    post, path = "/v1/runs", tag = "runs", request_body = StartRunRequest,
    params(
        ("traceparent" = Option<String>, Header, description = "The caller's W3C trace context: with `[telemetry]` on, the run's spans join that trace under the caller's span and follow its sampling decision. One that is not valid is ignored, as W3C Trace Context says (the run starts its own trace)."),
    ),
    responses(
        (status = 201, description = "The run as created: `queued` for a worker of any node; with `wait`, once it waits for approval or has ended", body = Run),
        (status = 403, description = "Lacks the runner role", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown agent", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Wrong types, missing or unknown fields, empty input, metadata that is not an object, over 16 KiB or nested over 16 levels", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn create_run(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> ApiResult {
    caller.require(Role::Runner, "start runs")?;
    let StartRunRequest { agent, input, metadata, wait } = parse_json(&body)?;
    let actor = caller.actor.clone();
    let start = StartRun {
        agent: agent.as_deref(),
        input: &input,
        actor,
        metadata: metadata.unwrap_or_default(),
        trace_parent: caller_trace(&headers),
    };
    // With `wait`, driven here at once when a worker is free; without, queued for the first free worker
    // of any node (answered `queued`, with no wait for a worker).
    let run = if wait == Some(true) {
        let notices = state.runtime.subscribe();
        let run = state.runtime.start(start).await?;
        state.settle(run, notices).await
    } else {
        state.runtime.enqueue(start).await?
    };
    let location = HeaderValue::from_str(&format!("/v1/runs/{}", run.id)).ok();
    let mut response = (StatusCode::CREATED, Json(run_view(&run))).into_response();
    if let Some(location) = location {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// The caller's trace context: its one `traceparent` header, when valid. A later version than `00` is
/// read by its first four fields, as W3C Trace Context says; anything else (absent, repeated, malformed,
/// version `ff`) is ignored, as it requires: the run starts a trace of its own.
fn caller_trace(headers: &HeaderMap) -> Option<tollgate_agent_core::TraceContext> {
    let mut values = headers.get_all("traceparent").iter();
    let (Some(value), None) = (values.next(), values.next()) else { return None };
    tollgate_agent_core::TraceContext::parse_received(value.to_str().ok()?).ok()
}

/// Query of `GET /v1/runs`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// Only runs with this status.
    #[param(value_type = Option<tollgate_agent_protocol::RunStatus>)]
    status: Option<String>,
    /// Only runs of this agent.
    agent: Option<String>,
    /// At most this many, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
    /// `next_cursor` of the previous page (a run id).
    #[param(pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    cursor: Option<String>,
}

/// List runs, newest first.
#[utoipa::path(
    get, path = "/v1/runs", tag = "runs", params(ListQuery),
    responses(
        (status = 200, description = "One page of runs, newest first", body = RunPage),
        (status = 422, description = "Bad query parameters (unknown status, limit over 500, bad cursor)", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn list_runs(State(state): State<AppState>, _caller: Caller, uri: Uri) -> ApiResult {
    let query: ListQuery = parse_query(&uri)?;
    let status = match query.status.as_deref() {
        None => None,
        Some(text) => Some(RunStatus::parse(text).ok_or_else(|| {
            let known: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::invalid(format!("unknown status `{text}`; expected one of {}", known.join(", ")))
        })?),
    };
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(format!("limit must be between 1 and {MAX_LIMIT}, not {limit}")));
    }
    if let Some(cursor) = &query.cursor
        && !is_run_id(cursor)
    {
        return Err(ApiError::invalid(format!("`{cursor}` is not a cursor from a previous page")));
    }
    let page = state.runtime.list(RunQuery { status, agent: query.agent, limit, cursor: query.cursor }).await?;
    let runs = page.runs.iter().map(run_view).collect();
    Ok(Json(RunPage { runs, next_cursor: page.next_cursor }).into_response())
}

/// Read one run.
#[utoipa::path(
    get, path = "/v1/runs/{id}", tag = "runs",
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "The run", body = Run),
        (status = 404, description = "No such run", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn get_run(State(state): State<AppState>, _caller: Caller, RunPath(id): RunPath) -> ApiResult {
    let run = state.runtime.get(&id).await?;
    Ok(Json(run_view(&run)).into_response())
}

/// Query of `GET /v1/runs/{id}/events`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct EventsQuery {
    /// Only events with a greater seq (for SSE, like `Last-Event-ID`, which wins when both are given).
    #[param(minimum = 0, maximum = 9_223_372_036_854_775_807_i64)]
    after: Option<u64>,
    /// SSE: also send the model's text as it arrives, as `model_delta` events without an `id:` line
    /// (live only, never stored; see docs/api.md). Ignored by the JSON form.
    deltas: Option<bool>,
}

/// The largest event seq a client may name (`after`, `Last-Event-ID`): seqs are stored as signed 64-bit
/// integers, and the document declares both as `int64`.
const MAX_SEQ: u64 = i64::MAX as u64;

/// `seq` if a stored seq can have it, else 422 naming `what`.
fn seq_in_range(seq: u64, what: &str) -> Result<u64, ApiError> {
    if seq > MAX_SEQ {
        return Err(ApiError::invalid(format!("{what} must be between 0 and {MAX_SEQ}, not {seq}")));
    }
    Ok(seq)
}

/// A run's events, as JSON or (with `Accept: text/event-stream`) live over SSE.
#[utoipa::path(
    get, path = "/v1/runs/{id}/events", tag = "runs",
    params(
        ("id" = String, Path, description = "The run's id"),
        EventsQuery,
        ("Last-Event-ID" = Option<u64>, Header, description = "SSE: resume after this seq", nullable = false, minimum = 0, maximum = 9_223_372_036_854_775_807_i64),
    ),
    responses(
        (status = 200, description = "The events after `after`; or an SSE stream (`id:` seq, `event:` kind, `data:` the event JSON) ending after the terminal event, with `deltas=true` also `model_delta` events (no `id:`, `data:` `{\"round\", \"text\"}` or `{\"round\", \"reset\": true}`)",
            content((EventPage = "application/json"), (String = "text/event-stream"))),
        (status = 204, description = "SSE: the run has ended and every event was already sent"),
        (status = 404, description = "No such run", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad `after` or `Last-Event-ID`", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "SSE: the caller already holds `[server] max_streams_per_client` streams", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn run_events(
    State(state): State<AppState>,
    caller: Caller,
    RunPath(id): RunPath,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    headers: HeaderMap,
    uri: Uri,
) -> ApiResult {
    let query: EventsQuery = parse_query(&uri)?;
    let after = query.after.map(|seq| seq_in_range(seq, "`after`")).transpose()?;
    // Checked on every request, as the document declares it, though only a stream reads it.
    let last_event_id = last_event_id(&headers)?;
    if wants_event_stream(&headers) {
        let after = match last_event_id {
            Some(seq) => seq,
            None => after.unwrap_or(0),
        };
        // A stream counts against its token's name; with auth off, against the peer's address.
        let client = match peer {
            _ if state.auth.is_on() => format!("token:{}", caller.actor),
            Some(axum::Extension(axum::extract::ConnectInfo(addr))) => format!("ip:{}", addr.ip()),
            None => format!("local:{}", caller.actor),
        };
        let client = crate::sse::StreamClient { counts: state.streams.clone(), client };
        let stream = crate::sse::Stream {
            after,
            deltas: query.deltas.unwrap_or(false),
            shutdown: state.shutdown.clone(),
            keep_alive: state.sse_keep_alive,
        };
        return crate::sse::respond(state.runtime.clone(), id, stream, client).await;
    }
    let events = state.runtime.all_events(&id, after.unwrap_or(0)).await?;
    Ok(Json(EventPage { events: events.iter().map(wire::event).collect() }).into_response())
}

fn wants_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("text/event-stream")))
}

/// The `Last-Event-ID` header as docs/api.md states it: absent, or one event seq (ASCII digits, 0 to
/// 2^63−1). Anything else — empty, not ASCII, not a number, given twice — is 422, never taken as absent.
fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let mut values = headers.get_all("last-event-id").iter();
    let Some(value) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(ApiError::invalid("Last-Event-ID is given more than once; give one event seq"));
    }
    let text = value
        .to_str()
        .map_err(|_| ApiError::invalid("Last-Event-ID is not ASCII text; give an event seq (a number)"))?
        .trim();
    if text.is_empty() {
        return Err(ApiError::invalid("Last-Event-ID is empty; give an event seq, or leave the header out"));
    }
    let seq = text
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| text.parse::<u64>().ok())
        .flatten()
        .ok_or_else(|| ApiError::invalid(format!("Last-Event-ID `{text}` is not an event seq")))?;
    seq_in_range(seq, "Last-Event-ID").map(Some)
}

/// Decide held calls.
#[utoipa::path(
    post, path = "/v1/runs/{id}/decisions", tag = "runs", request_body = DecisionRequest,
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "The run after the decisions (still waiting while held calls remain undecided; with `wait`, once it waits again or has ended)", body = Run),
        (status = 403, description = "Lacks the approver role, or the agent forbids self-approval", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not waiting, stale digest, call already decided, or lost a race", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad body, unknown call_id, a call that takes no decision, edited arguments failing the schema", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn decide(
    State(state): State<AppState>,
    caller: Caller,
    RunPath(id): RunPath,
    RawBody(body): RawBody,
) -> ApiResult {
    caller.require(Role::Approver, "decide held calls")?;
    let request: DecisionRequest = parse_json(&body)?;
    let set = decision_set(&request)?;
    let remember = remembered(&request)?;
    // Subscribed first, so that the wait sees every commit after the decision's without reading it.
    let notices = (request.wait == Some(true)).then(|| state.runtime.subscribe());
    let run = state.runtime.decide_remembering(&id, &request.turn_digest, set, &caller.actor, &remember).await?;
    let run = if let Some(notices) = notices
        && matches!(run.status(), RunStatus::Running | RunStatus::Queued)
    {
        state.settle(run, notices).await
    } else {
        run
    };
    Ok(Json(run_view(&run)).into_response())
}

/// The grants a request's approvals ask to make (`remember`), their ttl text read.
fn remembered(request: &DecisionRequest) -> Result<Vec<(CallId, RememberSpec)>, ApiError> {
    let approvals = request.decisions.iter().flatten().filter_map(|item| match item {
        CallDecision::Approve(approve) => approve.remember.as_ref().map(|r| (&approve.call_id, r)),
        CallDecision::Edit(_) | CallDecision::Deny(_) | CallDecision::Respond(_) => None,
    });
    approvals
        .map(|(call_id, remember)| {
            let ttl = match remember.ttl.as_deref() {
                None => None,
                Some(text) => Some(
                    duration::parse(text)
                        .map_err(|e| ApiError::invalid(format!("`remember.ttl` of call {call_id}: {e}")))?,
                ),
            };
            let spec = RememberSpec {
                scope: remember.scope.unwrap_or_default(),
                pattern: remember.r#match.clone(),
                ttl,
                reason: remember.reason.clone(),
            };
            Ok((call_id.clone(), spec))
        })
        .collect()
}

/// The runtime's decision set for a request, enforcing docs/api.md's rules on how they combine.
pub(crate) fn decision_set(request: &DecisionRequest) -> Result<DecisionSet, ApiError> {
    let approve_all = request.approve_all == Some(true);
    let deny_all = request.deny_all == Some(true);
    if approve_all && deny_all {
        return Err(ApiError::invalid("`approve_all` and `deny_all` exclude each other"));
    }
    if request.reason.is_some() && !deny_all {
        return Err(ApiError::invalid("`reason` goes with `deny_all`; a single denial carries its own `reason`"));
    }
    match &request.decisions {
        Some(_) if approve_all || deny_all => {
            Err(ApiError::invalid("`decisions` cannot be combined with `approve_all` or `deny_all`"))
        }
        Some(list) if list.is_empty() => Err(ApiError::invalid("`decisions` must not be empty")),
        Some(list) if list.iter().any(|d| matches!(d, CallDecision::Edit(edit) if !edit.arguments.is_object())) => {
            Err(ApiError::invalid("an edit's `arguments` must be a JSON object"))
        }
        Some(list) => Ok(DecisionSet::Each(list.iter().map(decision).collect())),
        None if approve_all => Ok(DecisionSet::ApproveAll),
        None if deny_all => Ok(DecisionSet::DenyAll {
            reason: request.reason.clone().unwrap_or_else(|| DEFAULT_DENY_REASON.to_owned()),
        }),
        None => Err(ApiError::invalid("give `decisions`, or `approve_all: true`, or `deny_all: true`")),
    }
}

fn decision(item: &CallDecision) -> (CallId, Decision) {
    let decision = match item {
        CallDecision::Approve(_) => Decision::Approve,
        CallDecision::Edit(edit) => Decision::Edit { arguments: edit.arguments.clone() },
        CallDecision::Deny(deny) => {
            Decision::Deny { reason: deny.reason.clone().unwrap_or_else(|| DEFAULT_DENY_REASON.to_owned()) }
        }
        CallDecision::Respond(respond) => Decision::Respond { result: respond.result.clone() },
    };
    (item.call_id().clone(), decision)
}

/// Cancel a run that has not finished.
#[utoipa::path(
    post, path = "/v1/runs/{id}/cancel", tag = "runs", request_body(content = Option<CancelRequest>, description = "Optional; an empty body is fine"),
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "The cancelled run", body = Run),
        (status = 403, description = "Lacks the runner role, or a runner cancelling a run it did not start", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Already terminal", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Wrong types or unknown fields", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn cancel_run(
    State(state): State<AppState>,
    caller: Caller,
    RunPath(id): RunPath,
    RawBody(body): RawBody,
) -> ApiResult {
    caller.require(Role::Runner, "cancel runs")?;
    let request: CancelRequest = parse_optional_json(&body)?;
    let run = state.runtime.get(&id).await?;
    if !caller.has(Role::Admin) && run.created_by != caller.actor {
        return Err(ApiError::forbidden(format!(
            "{} may cancel only the runs it started; run {id} was started by {}",
            caller.actor, run.created_by
        )));
    }
    let run = state.runtime.cancel(&id, &caller.actor, request.reason.as_deref()).await?;
    Ok(Json(run_view(&run)).into_response())
}

/// List the agents.
#[utoipa::path(
    get, path = "/v1/agents", tag = "agents",
    responses(
        (status = 200, description = "The configured agents, the default first", body = AgentList),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn agents(State(state): State<AppState>, _caller: Caller) -> ApiResult {
    Ok(Json(AgentList { agents: state.runtime.agents().map(wire::agent).collect() }).into_response())
}

/// Query of `GET /v1/tools`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ToolsQuery {
    /// List this agent's tools with their effective gates (policy applied).
    agent: Option<String>,
}

/// List tools and their gates.
#[utoipa::path(
    get, path = "/v1/tools", tag = "agents", params(ToolsQuery),
    responses(
        (status = 200, description = "With `agent`: its tools and effective gates; without: every tool the server knows with its own default gate", body = ToolList),
        (status = 404, description = "Unknown agent", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad query parameters", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn tools(State(state): State<AppState>, _caller: Caller, uri: Uri) -> ApiResult {
    let query: ToolsQuery = parse_query(&uri)?;
    let Some(name) = query.agent.as_deref() else {
        return Ok(Json(ToolList { tools: state.runtime.catalog().iter().map(wire::tool).collect() }).into_response());
    };
    // A tool whose every call an active grant of the agent allows (`match` = {}) shows it (V2.md).
    let tools = state
        .runtime
        .effective_tools(name)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no agent is named `{name}`")))?;
    Ok(Json(ToolList { tools: tools.iter().map(wire::tool).collect() }).into_response())
}

/// Apply retention now.
#[utoipa::path(
    post, path = "/v1/purge", tag = "admin", request_body(content = Option<PurgeRequest>, description = "Optional; an empty body applies the configured windows"),
    responses(
        (status = 200, description = "How many runs went", body = PurgeResult),
        (status = 403, description = "Not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad `older_than`, wrong types or unknown fields", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn purge(State(state): State<AppState>, caller: Caller, RawBody(body): RawBody) -> ApiResult {
    caller.require(Role::Admin, "purge runs")?;
    let request: PurgeRequest = parse_optional_json(&body)?;
    let terminal_after = match request.older_than.as_deref() {
        Some(text) => duration::parse(text).map_err(ApiError::invalid)?,
        None => state.retention.terminal_after,
    };
    let deleted = crate::apply_retention(&state.runtime, terminal_after, state.retention.waiting_after).await?;
    Ok(Json(PurgeResult { deleted_runs: deleted }).into_response())
}

/// Liveness.
#[utoipa::path(get, path = "/healthz", tag = "meta", responses((status = 200, description = "The server is up", body = Health)))]
pub(crate) async fn healthz() -> Response {
    Json(Health { status: "ok".to_owned() }).into_response()
}

/// How long `/readyz` answers with its last write probe before it probes again: a load balancer
/// polling every instance often costs the store one small write a second.
const READY_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// The last write probe of one router and when it ended. The lock is held across the probe, so
/// requests arriving meanwhile wait for its answer (at most the probe's bound) instead of probing too.
#[derive(Default)]
pub(crate) struct Readiness {
    last: tokio::sync::Mutex<Option<(std::time::Instant, Result<(), ApiError>)>>,
}

impl Readiness {
    /// The answer of a probe that ended at most [`READY_FOR`] before `now`, else of `probe` run now for
    /// at most `bound` (past it: `unavailable`). A failure is reused like a success, and from when the
    /// probe ended: a store that hangs costs one bounded probe a second, not one per request.
    pub(crate) async fn check(
        &self,
        now: std::time::Instant,
        bound: std::time::Duration,
        probe: impl std::future::Future<Output = Result<(), ApiError>>,
    ) -> Result<(), ApiError> {
        let mut last = self.last.lock().await;
        if let Some((at, answer)) = last.as_ref()
            && now.saturating_duration_since(*at) < READY_FOR
        {
            return answer.clone();
        }
        let started = std::time::Instant::now();
        let answer = tokio::time::timeout(bound, probe).await.unwrap_or_else(|_elapsed| {
            tracing::warn!(?bound, "the store's write probe did not answer in time: not ready");
            Err(ApiError::new(
                ProblemKind::Unavailable,
                format!("the run store did not answer the write probe within {} ms; try again", bound.as_millis()),
            ))
        });
        *last = Some((now + started.elapsed(), answer.clone()));
        answer
    }
}

/// `GET /readyz`, with the probe cache of this router.
pub(crate) fn readyz_route() -> axum::routing::MethodRouter<AppState> {
    let readiness = std::sync::Arc::new(Readiness::default());
    axum::routing::get(move |State(state): State<AppState>| readyz(state, readiness.clone()))
}

/// Readiness: the store can write now (a committed write probe within `[server] ready_timeout`, one a second).
#[utoipa::path(
    get, path = "/readyz", tag = "meta",
    responses(
        (status = 200, description = "The store can write", body = Health),
        (status = 503, description = "The store cannot write, or did not answer within `[server] ready_timeout` (default 2 s); `type` says why: `disk-full`, `read-only`, `corrupt-database`, `unavailable`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn readyz(state: AppState, readiness: std::sync::Arc<Readiness>) -> Response {
    let probe = async { state.runtime.health().probe_write().await.map_err(ApiError::from) };
    match readiness.check(std::time::Instant::now(), state.ready_timeout, probe).await {
        Ok(()) => Json(Health { status: "ready".to_owned() }).into_response(),
        Err(problem) => problem.not_ready(),
    }
}

/// Prometheus metrics.
#[utoipa::path(
    get, path = "/metrics", tag = "meta",
    responses(
        (status = 200, description = "Prometheus text exposition", body = String, content_type = "text/plain"),
        (status = 403, description = "Not an admin", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn metrics(State(state): State<AppState>, caller: Caller) -> ApiResult {
    caller.require(Role::Admin, "read metrics")?;
    let text = state.metrics.render(&state.runtime).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response())
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "meta", responses((status = 200, description = "The OpenAPI 3.1 document of this API: with tokens configured this one, without them the same without security requirements or 401 answers", content_type = "application/json")))]
pub(crate) async fn openapi(State(state): State<AppState>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], state.openapi.to_string()).into_response()
}

/// Unknown paths: 404.
pub(crate) async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::not_found(format!("no route for {method} {}", uri.path()))
}

/// Known paths with a wrong method: 405.
pub(crate) async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(ProblemKind::MethodNotAllowed, format!("{} does not take {method}", uri.path()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace_of(values: &[&str]) -> Option<String> {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append("traceparent", HeaderValue::from_str(value).unwrap_or_else(|e| panic!("{e}")));
        }
        caller_trace(&headers).map(|t| t.to_string())
    }

    #[test]
    fn a_callers_traceparent_is_read_as_w3c_says() {
        let valid = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert_eq!(trace_of(&[valid]).as_deref(), Some(valid));
        assert_eq!(trace_of(&[&format!(" {valid}\t")]).as_deref(), Some(valid), "white space around");
        let later = "cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-comes-next";
        assert_eq!(trace_of(&[later]).as_deref(), Some(valid), "a later version by its first fields");
        assert_eq!(trace_of(&["cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"]).as_deref(), Some(valid));
        for ignored in [
            &[][..],
            &[valid, valid],
            &["ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"],
            &["00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra"],
            &["cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x"],
            &["00-00000000000000000000000000000000-b7ad6b7169203331-01"],
            &["00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01"],
            &["not a trace"],
            &[""],
        ] {
            assert_eq!(trace_of(ignored), None, "{ignored:?}");
        }
    }

    /// One probe a second at most, whatever it answered; the next second probes again.
    #[tokio::test]
    async fn readiness_probes_at_most_once_a_second() {
        use std::sync::atomic::{AtomicU32, Ordering};
        let readiness = Readiness::default();
        let bound = std::time::Duration::from_secs(30);
        let probes = AtomicU32::new(0);
        let failing = || async {
            probes.fetch_add(1, Ordering::SeqCst);
            Err(ApiError::new(ProblemKind::DiskFull, "full"))
        };
        let start = std::time::Instant::now();
        assert!(readiness.check(start, bound, failing()).await.is_err());
        let cached = readiness.check(start + std::time::Duration::from_millis(999), bound, failing()).await;
        assert_eq!(cached.map_err(|e| e.kind), Err(ProblemKind::DiskFull));
        assert_eq!(probes.load(Ordering::SeqCst), 1);
        let later = start + READY_FOR + std::time::Duration::from_millis(500);
        assert!(readiness.check(later, bound, async { Ok(()) }).await.is_ok());
        assert_eq!(probes.load(Ordering::SeqCst), 1, "the second probe was the one that succeeded");
    }

    /// A probe that never answers is cut at its bound: `unavailable`, and that answer is reused like
    /// any other (the next request within the second does not probe again).
    #[tokio::test]
    async fn a_hung_probe_answers_unavailable_at_its_bound_and_is_reused() {
        let readiness = Readiness::default();
        let bound = std::time::Duration::from_millis(20);
        let start = std::time::Instant::now();
        let hung = readiness.check(start, bound, std::future::pending()).await;
        assert_eq!(hung.as_ref().map_err(|e| e.kind), Err(ProblemKind::Unavailable), "{hung:?}");
        let never = async { panic!("a cached answer must not probe again") };
        let cached = readiness.check(start, bound, never).await;
        assert_eq!(cached.map_err(|e| e.kind), Err(ProblemKind::Unavailable));
    }
    use serde_json::{Value, json};

    fn request(body: Value) -> DecisionRequest {
        serde_json::from_value(body).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn decision_sets_combine_as_api_md_says() {
        let d = "sha256:00";
        let bad = [
            json!({"turn_digest": d}),
            json!({"turn_digest": d, "decisions": []}),
            json!({"turn_digest": d, "decisions": [{"call_id": "c", "action": "approve"}], "approve_all": true}),
            json!({"turn_digest": d, "decisions": [{"call_id": "c", "action": "approve"}], "deny_all": true}),
            json!({"turn_digest": d, "approve_all": true, "deny_all": true}),
            json!({"turn_digest": d, "approve_all": true, "reason": "x"}),
            json!({"turn_digest": d, "approve_all": false}),
        ];
        for body in bad {
            assert_eq!(
                decision_set(&request(body.clone())).err().map(|e| e.kind),
                Some(ProblemKind::InvalidRequest),
                "{body}"
            );
        }
        assert_eq!(
            decision_set(&request(json!({"turn_digest": d, "approve_all": true}))).ok(),
            Some(DecisionSet::ApproveAll)
        );
        assert_eq!(
            decision_set(&request(json!({"turn_digest": d, "deny_all": true, "reason": "no"}))).ok(),
            Some(DecisionSet::DenyAll { reason: "no".into() })
        );
        let each = request(json!({"turn_digest": d, "approve_all": null, "decisions": [
            {"call_id": "a", "action": "edit", "arguments": {"x": 1}},
            {"call_id": "b", "action": "respond", "result": "42"},
            {"call_id": "c", "action": "deny"}
        ]}));
        assert_eq!(
            decision_set(&each).ok(),
            Some(DecisionSet::Each(vec![
                ("a".into(), Decision::Edit { arguments: json!({"x": 1}) }),
                ("b".into(), Decision::Respond { result: "42".into() }),
                ("c".into(), Decision::Deny { reason: DEFAULT_DENY_REASON.into() }),
            ]))
        );
    }

    #[test]
    fn decision_items_reject_unknown_fields_and_actions() {
        for item in [
            json!({"call_id": "a", "action": "approve", "extra": 1}),
            json!({"call_id": "a", "action": "launch"}),
            json!({"call_id": "a", "action": "respond", "result": 42}),
            json!({"action": "approve"}),
        ] {
            assert!(serde_json::from_value::<CallDecision>(item.clone()).is_err(), "{item}");
        }
    }

    #[test]
    fn accept_and_last_event_id_are_read_strictly() {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream;q=0.9"));
        assert!(wants_event_stream(&headers));
        headers.insert("last-event-id", HeaderValue::from_static("7"));
        assert_eq!(last_event_id(&headers).ok(), Some(Some(7)));
        for bad in [&b"seven"[..], b"", b"  ", b"+7", b"-1", b"7 8", b"\xe2\x80\x8b7", b"9223372036854775808"] {
            let value = HeaderValue::from_bytes(bad).unwrap_or_else(|e| panic!("{e}"));
            headers.insert("last-event-id", value);
            let refused = last_event_id(&headers).err().map(|e| e.kind);
            assert_eq!(refused, Some(ProblemKind::InvalidRequest), "{}", String::from_utf8_lossy(bad));
        }
        headers.insert("last-event-id", HeaderValue::from_static("9223372036854775807"));
        assert_eq!(last_event_id(&headers).ok(), Some(Some(9_223_372_036_854_775_807)));
        headers.append("last-event-id", HeaderValue::from_static("8"));
        assert!(last_event_id(&headers).is_err(), "given twice");
        assert!(!wants_event_stream(&HeaderMap::new()));
    }
}
