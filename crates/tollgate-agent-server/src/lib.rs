//! # tollgate-agent-server
//!
//! The HTTP API of `docs/api.md` over a [`Runtime`]: start, list, read, follow (SSE), decide and cancel
//! runs; agents and tools; purge; `/healthz` (alive), `/readyz` (the store can write: a committed
//! probe within [`ServerOptions::ready_timeout`], its answer cached one second), `/metrics` (Prometheus text) and `/openapi.json`
//! (OpenAPI 3.1, generated from this crate's code: [`openapi_json`] with tokens configured,
//! [`openapi_json_without_tokens`] without, which declares no bearer security); the playground's mount
//! point at `/`.
//!
//! ```rust
//! use axum::body::{Body, to_bytes};
//! use axum::http::{Request, StatusCode};
//! use tollgate_agent_protocol::AgentList;
//! use tollgate_agent_server::{ServerOptions, openapi_json, router};
//! use tower_service::Service;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # use std::sync::Arc;
//! # use tollgate_agent_core::{LoopConfig, SystemClock, ToolLoop, ToolRegistry, scripted};
//! # use tollgate_agent_runtime::{AgentSpec, OnExpiry, Runtime, RuntimeOptions, UuidV7Ids};
//! # let model = Arc::new(scripted::ScriptedModel::new(scripted::demo_script()));
//! # let agent_loop = Arc::new(ToolLoop::new(model, Arc::new(ToolRegistry::new()), LoopConfig::default()));
//! # let demo = AgentSpec { name: "demo".into(), model: "scripted".into(), agent_loop, tools: Vec::new(),
//! #     approval_ttl: None, on_expiry: OnExpiry::Deny, forbid_self_approval: false, escalation: None };
//! # let store = tollgate_agent_store::open("sqlite::memory:").await?;
//! # let options = RuntimeOptions::default();
//! # let runtime = Runtime::new(store, vec![demo], Arc::new(SystemClock), Arc::new(UuidV7Ids), options);
//! // `runtime`: a `tollgate_agent_runtime::Runtime` over a store, with one agent, `demo`.
//! let mut api = router(runtime, &ServerOptions::default()); // no tokens: every caller is `local`
//! let response = api.call(Request::get("/v1/agents").body(Body::empty())?).await?;
//! assert_eq!(response.status(), StatusCode::OK);
//! let list: AgentList = serde_json::from_slice(&to_bytes(response.into_body(), 1 << 20).await?)?;
//! assert_eq!(list.agents[0].name, "demo");
//!
//! // The OpenAPI document of every route, as `GET /openapi.json` serves it with tokens configured
//! // (`openapi_json_without_tokens` is the one served without).
//! let openapi: serde_json::Value = serde_json::from_str(&openapi_json())?;
//! assert_eq!(openapi["openapi"], "3.1.0");
//! # Ok(()) }
//! ```
//!
//! [`router`] is the API alone, to embed or test; [`serve`] binds [`ServerOptions::addr`] and adds the
//! background work (deadline sweeps, retention, webhooks, notifications, metrics) and graceful shutdown.
//!
//! What it promises:
//! - **Bad input writes nothing.** Every body and query is checked before the runtime sees it; malformed
//!   JSON is 400, wrong types / missing / unknown fields and bad query parameters 422, a body over
//!   [`ServerOptions::max_body_bytes`] 413, a body declared as something other than JSON 415. Errors are
//!   `application/problem+json`; their `type` is `https://tollgate.dev/problems/` + a slug of
//!   [`ProblemKind`] (stable: clients may branch on it).
//! - **Auth as docs/api.md says.** With [`ServerOptions::tokens`] empty every caller is the actor `local` with
//!   every role, and [`serve`] refuses any address but loopback; [`serve`] and [`serve_on`] also serve
//!   `/v1` and `/metrics` only to connections from the OS user running the server (found in the kernel's
//!   socket table when each connection is accepted), and answer anyone else 403 `forbidden` saying why
//!   ([`router`] alone has no connections to check: whoever serves it decides who reaches it). Otherwise a bearer token names the
//!   actor recorded on every event it causes, and its [`Role`]s decide what it may do (401 / 403).
//! - **Exactly-once resume holds over HTTP**: concurrent decision requests on one run get 200 or 409,
//!   and the run resumes once (the runtime's compare-and-set does it; the server adds no state).
//! - **The server never blocks a run**: live events and webhooks read what the runtime committed;
//!   a slow SSE client or a failing webhook receiver costs the run nothing.
//! - **Graceful shutdown**: [`serve`] stops accepting, stops taking work ([`Runtime::stop_taking_work`]:
//!   new runs and resumes queue for other nodes' workers, runs driven here are given back at their next
//!   step boundary), ends live streams, lets in-flight requests and the steps they started commit
//!   ([`Runtime::drain`]), and returns; every run stays resumable, and a given-back run is claimed by
//!   another node at once, not after its lease.
//! - **Queued runs**: `POST /v1/runs` without `wait` answers `queued`; the runtime's worker pool
//!   ([`Runtime::start_workers`], started by [`router`] and [`serve`]) claims queued runs, oldest first.
//! - **No unbounded connections** (`connections.rs`): a connection with no request in progress is closed
//!   after [`ServerOptions::idle_timeout`], a request head must arrive within
//!   [`ServerOptions::header_read_timeout`] of its first byte, a body within
//!   [`ServerOptions::body_timeout`] of the head (else 408 `request-timeout`, and the connection is
//!   closed), at most [`ServerOptions::max_connections`] are served (kept below the soft limit on open
//!   files), and each client holds at most [`ServerOptions::max_streams_per_client`] live-event streams.
//! - **Readiness answers in bounded time**: `/readyz` waits at most [`ServerOptions::ready_timeout`] for
//!   the store's write probe (then 503 `unavailable`), and reuses a failed answer for a second as it
//!   does a successful one.
//!
//! ## Limits
//! Past `max_connections`, up to [`ServerOptions::reserved_connections`] more connections are accepted for
//! one request each: `GET /healthz` and requests with a valid bearer token are served, anything else
//! (and any live-event stream) gets `503 unavailable` with `Connection: close` and `Retry-After: 1`; with
//! those taken too, a new connection is closed unanswered. A live-event stream past its client's cap gets
//! `429 too-many-requests` with `Retry-After: 5`. A failed accept (out of file descriptors) pauses the
//! accept loop for 100 ms; it never spins or stops.
//!
//!
//! ## Problem types
//! `https://tollgate.dev/problems/` + `malformed-json` (400), `unauthorized` (401), `forbidden` (403),
//! `not-found` (404), `method-not-allowed` (405), `request-timeout` (408: the body did not arrive within
//! [`ServerOptions::body_timeout`]), `conflict` (409), `payload-too-large` (413),
//! `unsupported-media-type` (415), `invalid-request` (422: body or query does not fit),
//! `invalid-decision` (422: unknown `call_id`, a call that takes no decision, edited arguments failing
//! the tool's schema), `too-many-requests` (429: a client's live-event streams at their cap), `internal`
//! (500), `unavailable` (503: the store cannot be reached, or the server is at its connection limit);
//! and one per store failure (`problem.rs`): `disk-full` (507), `read-only` (503), `corrupt-run` (500,
//! naming the run), `corrupt-database` (500).
//!
//! ## Live events
//! `GET /v1/runs/{id}/events` with `Accept: text/event-stream`: `id:` = seq, `event:` = kind, `data:` =
//! the event JSON; starts after `Last-Event-ID` (else `?after=`); ends after the terminal event; a
//! reconnect with nothing left gets 204 (an `EventSource` stops reconnecting); keep-alive comments every
//! [`ServerOptions::sse_keep_alive`].
//!
//! ## Webhooks
//! For each event whose kind a [`WebhookTarget`] lists (`*` for all), a `POST` with the body
//! `{"run_id": "...", "event": EVENT}` (`EVENT` exactly as the events endpoint serves it: `seq`, `at`,
//! `kind`, `round`, `data`, `hash`) and the headers `Content-Type: application/json`,
//! `X-Tollgate-Signature: sha256=HEX` (lowercase hex HMAC-SHA256 of the exact body bytes keyed with the
//! target's secret; see [`signature`]), `X-Tollgate-Event: KIND` and `X-Tollgate-Delivery: RUN_ID:SEQ`;
//! and the same delivery signed in the Standard Webhooks form: `webhook-id: RUN_ID:SEQ`,
//! `webhook-timestamp: UNIX_SECONDS` (each attempt's) and `webhook-signature: v1,BASE64` over
//! `{id}.{timestamp}.{body}` (see [`standard_signature`] and [`standard_key`]), so a receiver that checks
//! it refuses a captured delivery replayed under another id or, past its window, at another time.
//! At least once and unordered: a non-2xx answer or a network error is retried with exponential
//! backoff ([`WebhookRetry`]); receivers dedupe by `X-Tollgate-Delivery` and order by `event.seq`.
//! Deliveries run in the background from a bounded queue, which the log fills only while it has room: a
//! slow or failing receiver never blocks or fails a run, and a backlog waits in the log. The events come from the store's commit log
//! ([`ChangeFeed::committed`](tollgate_agent_core::ChangeFeed::committed)), through its `webhooks` reader,
//! which one node at a time holds: every process's commits are delivered, once by whichever node holds
//! it, and a crash or a restart leaves the stored position behind the deliveries not yet ended, so the
//! next holder makes them.
//!
//! ## Notifications and signed decision links
//! Each [`Notifier`] ([`ServerOptions::notifiers`]) is sent a Slack message or a mail when a run of one of
//! its agents starts waiting, and the notifiers an `approval_escalated` event names are sent one when it
//! is escalated: the run, its input, each held call with its preview and signed Approve / Deny links
//! (`{public_url}/approve/{token}`, signed with [`ServerOptions::link_secret`]). They are sent by [`serve`]
//! (and beside a router of [`router_with_webhooks`], until its [`WebhookDelivery`] stops) from the store's
//! commit log through its `notifications` reader, at least once, with retries on
//! failures that may pass ([`NotifyRetry`]), never blocking or failing a run (docs/notifications.md).
//! `GET /approve/{token}` shows the link's confirm page and decides nothing; the page's
//! `POST /approve/{token}` decides once, as the link's actor. These routes take no bearer token (the
//! token is the capability) and answer HTML pages: 403 tampered, 410 expired, 404 run not found, 409 used
//! or stale, 422 refused (docs/api.md, "Signed decision links"). Every router serves them when a link
//! secret is set.
//!
//! ## Metrics (`GET /metrics`, admin)
//! `tollgate_runs{status}` and `tollgate_waiting_runs` (counted by the store with one `GROUP BY status`
//! query when scraped, cached 5 s);
//! `tollgate_decisions_total{action}`, `tollgate_events_total{kind}`,
//! `tollgate_model_call_duration_seconds` and `tollgate_tool_call_duration_seconds{tool}` histograms
//! (from the events this process commits, measured between their `at` times);
//! `tollgate_webhook_deliveries_total{outcome}` (`delivered`, `failed`, `dropped`, `expired`);
//! `tollgate_webhook_reader_held` and `tollgate_webhook_queue_depth` (gauges);
//! `tollgate_notifications_total{notifier,outcome}` (`sent`, `failed`, `skipped`, `expired`, `dropped`),
//! `tollgate_notification_reader_held` and `tollgate_notification_queue_depth` (gauges),
//! `tollgate_approval_wait_seconds` (histogram: `approval_requested` to the `run_resumed` of the decision
//! that completed the turn, for the turns this process resumed);
//! `tollgate_connections_open`, `tollgate_connections_refused_total`,
//! `tollgate_connections_timed_out_total{timeout}` (`idle`, `header_read`), `tollgate_accept_errors_total`,
//! `tollgate_sse_streams_open`, `tollgate_sse_streams_refused_total`.

mod approve;
mod auth;
mod connections;
mod duration;
mod feed;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod grants;
mod input;
mod metrics;
mod notify;
mod openapi;
mod outbox;
mod owner;
mod playground;
mod problem;
mod routes;
mod sse;
mod webhooks;

pub use auth::{ApiToken, LOCAL_ACTOR, Role};
pub use duration::parse as parse_duration;
pub use notify::{LinkSecret, Notifier, NotifyRetry, ShortLinkSecret};
pub use openapi::{openapi_json, openapi_json_without_tokens};
pub use problem::{ApiError, PROBLEM_BASE, PROBLEM_JSON, ProblemKind};
pub use routes::{DEFAULT_DENY_REASON, DEFAULT_LIMIT, MAX_LIMIT};
/// How a notifier's messages leave: the transports of `tollgate-agent-notify`, for building [`Notifier`]s.
pub use tollgate_agent_notify::transport::{
    EmailNotifier, EmailSettings, SendError, SetupError, SlackNotifier, Transport,
};
pub use webhooks::{
    SIGNATURE_HEADER, STANDARD_ID_HEADER, STANDARD_SIGNATURE_HEADER, STANDARD_TIMESTAMP_HEADER, WebhookRetry,
    WebhookTarget, signature, standard_key, standard_signature,
};

/// The axum router [`router`] answers (the embedder's axum must be the same major version).
pub use axum::Router;
use axum::routing::{get, post};
use metrics::Metrics;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tollgate_agent_core::StoreError;
pub use tollgate_agent_runtime::Retention;
use tollgate_agent_runtime::{Runtime, Schedule};

/// Everything the server takes from configuration.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Where [`serve`] listens (`[server] addr`).
    pub addr: SocketAddr,
    /// The largest request body accepted (`[server] max_body_bytes`, default 1 MiB).
    pub max_body_bytes: usize,
    /// API tokens (`[[auth.tokens]]`); empty means auth is off and only loopback may be bound.
    pub tokens: Vec<ApiToken>,
    /// Webhook receivers (`[[webhooks]]`).
    pub webhooks: Vec<WebhookTarget>,
    /// How webhook deliveries are retried.
    pub webhook_retry: WebhookRetry,
    /// Notifiers (`[[notify]]`): told when a run starts waiting, and when its wait is escalated. Names
    /// are unique; they need [`ServerOptions::link_secret`].
    pub notifiers: Vec<Notifier>,
    /// How notifications are retried.
    pub notify_retry: NotifyRetry,
    /// The key of signed decision links (`[server] link_secret`); without it `/approve/{token}` accepts
    /// no link.
    pub link_secret: Option<LinkSecret>,
    /// The URL people reach this server at (`[server] public_url`), which links start with; `None`:
    /// `http://` and the address the server listens on.
    pub public_url: Option<String>,
    /// Retention windows (`[retention]`), applied once an hour and by `POST /v1/purge` without a body.
    pub retention: Retention,
    /// How long shutdown waits for in-flight steps to commit before it returns anyway (the runs stay
    /// resumable: their leases expire and a later process takes them over).
    pub shutdown_grace: Duration,
    /// How often a quiet live-event stream sends a keep-alive comment (default 15 s).
    pub sse_keep_alive: Duration,
    /// Once the first byte of a request head arrives, how long the whole head may take before the
    /// connection is closed (`[server] header_read_timeout`, default 10 s).
    pub header_read_timeout: Duration,
    /// How long a connection may stay open with no request in progress — after it was accepted or its last
    /// response ended — before it is closed (`[server] idle_timeout`, default 60 s).
    pub idle_timeout: Duration,
    /// How many connections are served at once (`[server] max_connections`, default 10,000; lowered to
    /// stay below the process's soft limit on open files).
    pub max_connections: usize,
    /// How many connections past `max_connections` are accepted for one request each, served only for
    /// `GET /healthz` or a valid token (default 32; not in the config file).
    pub reserved_connections: usize,
    /// How many live-event streams one client (the token's name with auth on, else the peer's IP address)
    /// may hold at once (`[server] max_streams_per_client`, default 16).
    pub max_streams_per_client: usize,
    /// How long reading one request's body may take, from the end of its head; past it the answer is
    /// 408 `request-timeout` and the connection is closed (`[server] body_timeout`, default 30 s).
    pub body_timeout: Duration,
    /// How long `/readyz` waits for the store's write probe before answering 503 `unavailable`
    /// (`[server] ready_timeout`, default 2 s).
    pub ready_timeout: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_body_bytes: 1024 * 1024,
            tokens: Vec::new(),
            webhooks: Vec::new(),
            webhook_retry: WebhookRetry::default(),
            notifiers: Vec::new(),
            notify_retry: NotifyRetry::default(),
            link_secret: None,
            public_url: None,
            retention: Retention::default(),
            shutdown_grace: Duration::from_secs(30),
            sse_keep_alive: Duration::from_secs(15),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 10_000,
            reserved_connections: 32,
            max_streams_per_client: 16,
            body_timeout: Duration::from_secs(30),
            ready_timeout: Duration::from_secs(2),
        }
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// No tokens are configured and the address is not loopback: anyone who can reach it would act as
    /// `local` with every role. Not retryable: configure `[[auth.tokens]]` or bind 127.0.0.1.
    #[error(
        "refusing to listen on {0} without auth: with no [[auth.tokens]] configured only a loopback address (127.0.0.1, ::1) is allowed"
    )]
    NoAuthOnPublicAddress(SocketAddr),
    /// The address could not be bound (in use, not permitted). Retryable once it is free.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The options are not usable (e.g. a webhook URL that is not a URL). Not retryable.
    #[error("invalid server options: {0}")]
    Options(String),
    /// Serving failed.
    #[error("server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Shared by every handler.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) runtime: Runtime,
    pub(crate) auth: Arc<auth::Auth>,
    pub(crate) max_body_bytes: usize,
    /// How long reading one request's body may take.
    pub(crate) body_timeout: Duration,
    /// How long `/readyz` waits for the store's write probe.
    pub(crate) ready_timeout: Duration,
    pub(crate) retention: Retention,
    pub(crate) metrics: Arc<Metrics>,
    /// Turns true when the server shuts down: live streams end, waits answer at once.
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) openapi: Arc<str>,
    pub(crate) sse_keep_alive: Duration,
    /// Live-event streams per client, capped.
    pub(crate) streams: Arc<sse::StreamCounts>,
    /// Signed decision links, when a link secret is configured.
    pub(crate) links: Option<Arc<notify::Links>>,
}

/// What [`serve_on`] needs besides the router.
struct Built {
    router: Router,
    auth: Arc<auth::Auth>,
    metrics: Arc<Metrics>,
    shutdown: watch::Sender<bool>,
    links: Option<Arc<notify::Links>>,
}

/// The router and what the background work shares with it; links start with `public_url`, else with
/// `http://` and `listening` (the address the server listens on).
fn build(runtime: Runtime, options: &ServerOptions, listening: SocketAddr) -> Built {
    // Runs started without `wait` are queued: the worker pool's claim loop drives them.
    runtime.start_workers();
    let metrics = Arc::new(Metrics::default());
    let (shutdown, shutdown_rx) = watch::channel(false);
    let auth = Arc::new(auth::Auth::new(&options.tokens));
    let public_url = options.public_url.clone().unwrap_or_else(|| format!("http://{listening}"));
    let links = options.link_secret.clone().map(|secret| Arc::new(notify::Links::new(secret, &public_url)));
    let state = AppState {
        runtime,
        auth: auth.clone(),
        max_body_bytes: options.max_body_bytes,
        body_timeout: options.body_timeout,
        ready_timeout: options.ready_timeout,
        retention: options.retention,
        metrics: metrics.clone(),
        shutdown: shutdown_rx,
        // Without tokens no operation needs a bearer token, and the document served says so.
        openapi: Arc::from(if options.tokens.is_empty() { openapi_json_without_tokens() } else { openapi_json() }),
        sse_keep_alive: options.sse_keep_alive,
        streams: Arc::new(sse::StreamCounts::new(options.max_streams_per_client, metrics.clone())),
        links: links.clone(),
    };
    let api = Router::new()
        .route("/v1/runs", get(routes::list_runs).post(routes::create_run))
        .route("/v1/runs/{id}", get(routes::get_run))
        .route("/v1/runs/{id}/events", get(routes::run_events))
        .route("/v1/runs/{id}/decisions", post(routes::decide))
        .route("/v1/runs/{id}/cancel", post(routes::cancel_run))
        .route("/v1/grants", get(grants::list_grants).post(grants::create_grant))
        .route("/v1/grants/{id}", get(grants::get_grant).delete(grants::revoke_grant))
        .route("/v1/agents", get(routes::agents))
        .route("/v1/tools", get(routes::tools))
        .route("/v1/purge", post(routes::purge))
        .route("/healthz", get(routes::healthz))
        .route("/readyz", routes::readyz_route())
        .route("/metrics", get(routes::metrics))
        .route("/openapi.json", get(routes::openapi));
    let router = api
        // MOUNT POINT of the playground: `/` and its static files (see `playground.rs`).
        .merge(playground::routes())
        // Signed decision links: outside `/v1` and its bearer auth (the token is the capability).
        .merge(approve::routes())
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state);
    Built { router, auth, metrics, shutdown, links }
}

/// The API's router over a runtime, without the background work of [`serve`] (sweeps, retention,
/// webhooks, event metrics), but with the runtime's worker pool started (it needs a Tokio runtime), so
/// queued runs are driven. For tests and for embedding in another server; [`router_with_webhooks`]
/// delivers `options.webhooks` as well.
pub fn router(runtime: Runtime, options: &ServerOptions) -> Router {
    build(runtime, options, options.addr).router
}

/// [`router`], plus the deliveries of `options.webhooks` and the notifications of `options.notifiers`
/// (`None` when there are neither), counted in the router's `/metrics`: as `serve` sends them, from the
/// store's commit log, by the one process on the store holding its `webhooks` (`notifications`) reader.
/// The links in notifications start with [`ServerOptions::public_url`] — set it to where your service
/// serves this router — else with `http://` and [`ServerOptions::addr`]. They run until
/// [`WebhookDelivery::stop`] or until the [`WebhookDelivery`] is dropped. A reader taken for the first
/// time starts at the end of the log: await [`WebhookDelivery::positioned`] before serving, so a run
/// started by the first request is delivered too.
///
/// # Errors
/// [`ServerError::Options`] for a webhook URL that is not a URL, or notifiers without a link secret,
/// with two of the same name, deciding as an actor no approver token has, or a `public_url` that is not
/// an `http(s)://` URL.
pub fn router_with_webhooks(
    runtime: Runtime,
    options: &ServerOptions,
) -> Result<(Router, Option<WebhookDelivery>), ServerError> {
    check_notify(options)?;
    let built = build(runtime.clone(), options, options.addr);
    let outboxes: Vec<_> = start_webhooks(runtime.clone(), options, &built)?
        .into_iter()
        .chain(start_notifications(runtime, options, &built))
        .collect();
    Ok((built.router, (!outboxes.is_empty()).then_some(WebhookDelivery(outboxes))))
}

/// The notifications of `options.notifiers`, counting in `built`'s metrics; `None` when there are none
/// or links cannot be signed (no link secret: refused by [`check_notify`] first).
fn start_notifications(runtime: Runtime, options: &ServerOptions, built: &Built) -> Option<outbox::Dispatcher> {
    let links = built.links.clone()?;
    notify::spawn(runtime, options.notifiers.clone(), links, options.notify_retry, built.metrics.clone(), WEBHOOK_FLUSH)
}

/// The dispatcher of `options.webhooks`, counting in `built`'s metrics; `None` when there are none.
fn start_webhooks(
    runtime: Runtime,
    options: &ServerOptions,
    built: &Built,
) -> Result<Option<outbox::Dispatcher>, ServerError> {
    webhooks::spawn(runtime, options.webhooks.clone(), options.webhook_retry, built.metrics.clone(), WEBHOOK_FLUSH)
        .map_err(ServerError::Options)
}

/// Webhook deliveries and notifications running beside a router served by another server
/// ([`router_with_webhooks`]). Dropping it stops them as [`WebhookDelivery::stop`] does, in the
/// background.
pub struct WebhookDelivery(Vec<outbox::Dispatcher>);

impl std::fmt::Debug for WebhookDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookDelivery").finish_non_exhaustive()
    }
}

impl WebhookDelivery {
    /// Waits (at most 5 s each) until the commit-log readers hold their positions, so that every commit
    /// from then on is delivered: await it before the router takes its first request. The future owns
    /// what it waits on (it does not borrow this).
    pub fn positioned(&self) -> impl Future<Output = ()> + Send + 'static {
        let waits: Vec<_> = self.0.iter().map(|outbox| outbox.positioned(POSITION_WITHIN)).collect();
        async move {
            for wait in waits {
                wait.await;
            }
        }
    }

    /// Stops reading the commit log, lets the deliveries (and notifications) under way finish for up to
    /// 5 s, stores how far they got and releases the readers, so another process on the store continues
    /// from there at once (including the deliveries that did not finish). Webhooks and notifications
    /// stop together, so the wait is 5 s at most for both.
    pub async fn stop(self) {
        futures_util::future::join_all(self.0.into_iter().map(|outbox| outbox.stop(WEBHOOK_FLUSH))).await;
    }
}

/// Binds [`ServerOptions::addr`] and serves until `shutdown` completes. See [`serve_on`].
pub async fn serve(
    runtime: Runtime,
    options: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    refuse_public_without_auth(options.addr, &options)?;
    let listener =
        TcpListener::bind(options.addr).await.map_err(|source| ServerError::Bind { addr: options.addr, source })?;
    serve_on(listener, runtime, options, shutdown).await
}

/// Serves on a bound listener until `shutdown` completes: the API, plus the runtime's maintenance
/// ([`Runtime::spawn_maintenance`] with [`Schedule::server`]: deadlines, escalations and takeovers every
/// second, lease renewal, retention once an hour), the event feed (metrics), the webhook dispatcher and the
/// notifications (links start with [`ServerOptions::public_url`], else `http://` and the listener's
/// address), whose commit-log readers are positioned (for at most 5 s) before the first connection is
/// accepted, so a run started by the first request is delivered too; connections
/// within the limits of [`ServerOptions`] (see the crate's "Limits"). On shutdown it stops accepting, ends
/// live streams, waits for in-flight requests, then for in-flight steps to commit (at most
/// [`ServerOptions::shutdown_grace`]), and returns.
pub async fn serve_on(
    listener: TcpListener,
    runtime: Runtime,
    options: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let local = listener.local_addr()?;
    refuse_public_without_auth(local, &options)?;
    let limits = limits(&options)?;
    check_notify(&options)?;
    let built = build(runtime.clone(), &options, local);
    let dispatcher = start_webhooks(runtime.clone(), &options, &built)?;
    let notifications = start_notifications(runtime.clone(), &options, &built);
    // A reader taken for the first time starts at the end of the log: position it before accepting
    // work, so a run started by the first request is delivered too.
    for outbox in [&dispatcher, &notifications].into_iter().flatten() {
        outbox.positioned(POSITION_WITHIN).await;
    }
    let (stop_feed, feed_stopped) = tokio::sync::oneshot::channel();
    let mut feed = feed::spawn(runtime.clone(), built.metrics.clone(), feed_stopped);
    // Deadlines and takeovers every second, lease renewal, retention hourly: the runtime's one
    // maintenance scheduler, as every CLI command runs it (with its own schedule).
    let maintenance = runtime.spawn_maintenance(Schedule::server(options.retention));
    tracing::info!(addr = %local, auth = !options.tokens.is_empty(), "serving the Tollgate API");

    let stop = built.shutdown;
    let stopping = stop.subscribe();
    let giving_back = runtime.clone();
    let signal = async move {
        shutdown.await;
        tracing::info!("shutting down: no new connections; live streams end; runs driven here are given back");
        let _ = stop.send(true);
        // New runs and resumes queue for other nodes; runs driven here are released at their next step.
        giving_back.stop_taking_work();
        // Keep the sender (and so the signal) alive until the connections are done.
        std::future::pending::<()>().await;
    };
    let serving = connections::serve(listener, built.router, built.auth, built.metrics.clone(), limits, stopping);
    tokio::select! {
        () = serving => {}
        () = signal => {}
    }

    // No new work from sweeps or retention; keep the leases of what is still running while it commits.
    maintenance.wind_down();
    if tokio::time::timeout(options.shutdown_grace, runtime.drain()).await.is_err() {
        tracing::warn!(
            grace = ?options.shutdown_grace,
            "some steps were still running at shutdown; their runs will be taken over when their leases expire"
        );
    }
    maintenance.stop();
    // Count the last commits' events; let webhook deliveries under way finish, for a bounded time,
    // then store how far they got and release the webhook reader for another node.
    let _ = stop_feed.send(());
    if tokio::time::timeout(WEBHOOK_FLUSH, &mut feed).await.is_err() {
        feed.abort();
    }
    let stopping = async {
        if let Some(dispatcher) = dispatcher {
            dispatcher.stop(WEBHOOK_FLUSH).await;
        }
    };
    let notifying = async {
        if let Some(notifications) = notifications {
            notifications.stop(WEBHOOK_FLUSH).await;
        }
    };
    tokio::join!(stopping, notifying);
    Ok(())
}

/// Notifiers need a link secret, unique names and (with tokens) an approver to decide as; a public URL
/// must be an `http(s)` URL.
fn check_notify(options: &ServerOptions) -> Result<(), ServerError> {
    if !options.notifiers.is_empty() && options.link_secret.is_none() {
        return Err(ServerError::Options("notifiers need a link secret ([server] link_secret)".into()));
    }
    let auth = auth::Auth::new(&options.tokens);
    for (index, notifier) in options.notifiers.iter().enumerate() {
        if options.notifiers[..index].iter().any(|n| n.name == notifier.name) {
            return Err(ServerError::Options(format!("two notifiers are named `{}`", notifier.name)));
        }
        if !auth.may_decide(&notifier.actor) {
            return Err(ServerError::Options(format!(
                "notifier `{}` decides as `{}`, which is not the name of a token with the approver role",
                notifier.name, notifier.actor
            )));
        }
    }
    if let Some(url) = &options.public_url {
        let parsed = reqwest::Url::parse(url).map_err(|e| ServerError::Options(format!("public_url `{url}`: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(ServerError::Options(format!(
                "public_url `{url}` must be an http:// or https:// URL without query or fragment"
            )));
        }
    }
    Ok(())
}

/// The connection limits of `options`, checked.
fn limits(options: &ServerOptions) -> Result<connections::Limits, ServerError> {
    let timeouts = [options.header_read_timeout, options.idle_timeout, options.body_timeout, options.ready_timeout];
    if timeouts.iter().any(Duration::is_zero) {
        return Err(ServerError::Options(
            "header_read_timeout, idle_timeout, body_timeout and ready_timeout must be positive".into(),
        ));
    }
    if options.max_connections == 0 || options.max_streams_per_client == 0 {
        return Err(ServerError::Options("max_connections and max_streams_per_client must be at least 1".into()));
    }
    Ok(connections::Limits {
        header_read_timeout: options.header_read_timeout,
        idle_timeout: options.idle_timeout,
        max_connections: options.max_connections,
        reserved: options.reserved_connections,
    })
}

fn refuse_public_without_auth(addr: SocketAddr, options: &ServerOptions) -> Result<(), ServerError> {
    if options.tokens.is_empty() && !addr.ip().is_loopback() {
        return Err(ServerError::NoAuthOnPublicAddress(addr));
    }
    Ok(())
}

/// Completes on SIGINT (Ctrl-C) or, on Unix, SIGTERM: pass it to [`serve`].
pub async fn shutdown_signal() {
    let interrupt = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
}

/// Completes once the server shuts down (never, for a router without [`serve_on`]).
pub(crate) async fn shutting_down(shutdown: &mut watch::Receiver<bool>) {
    if shutdown.wait_for(|stopping| *stopping).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Purges terminal runs finished more than `terminal_after` ago and waiting runs untouched for more
/// than `waiting_after`, on the runtime's clock (`POST /v1/purge`).
pub(crate) async fn apply_retention(
    runtime: &Runtime,
    terminal_after: Duration,
    waiting_after: Duration,
) -> Result<u64, StoreError> {
    runtime.apply_retention(terminal_after, waiting_after).await
}

/// How long shutdown waits for webhook deliveries under way (what is left is delivered by the next
/// holder of the webhook reader, from the position stored).
const WEBHOOK_FLUSH: Duration = Duration::from_secs(5);

/// How long a server waits, before it accepts work, for its webhook and notification readers to be
/// positioned in the commit log.
const POSITION_WITHIN: Duration = Duration::from_secs(5);
