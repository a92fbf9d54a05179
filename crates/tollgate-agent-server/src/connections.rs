//! Accepting and driving HTTP/1.1 connections, within limits (docs/api.md, "Limits").
//!
//! What it promises:
//! - **No connection waits forever for a request.** A connection with no request in progress is closed
//!   [`Limits::idle_timeout`] after it was accepted or its last response ended; once the first byte of a
//!   request head arrives, the whole head must arrive within [`Limits::header_read_timeout`]. While a
//!   request is being handled (a live-event stream included) the connection has no deadline here.
//! - **At most [`Limits::max_connections`] connections are served at once** — lowered to stay below the
//!   process's soft limit on open files. Past it, up to [`Limits::reserved`] more are accepted for one
//!   request each and closed after it: `GET /healthz` and requests carrying a valid bearer token are
//!   served (so a flood of idle or slow connections cannot lock out the operator or authenticated
//!   callers); anything else, and any live-event stream, gets `503 unavailable` with `Connection: close`
//!   and `Retry-After: 1`. With the reserve full too, a new connection is closed at once, unanswered.
//!   Both are counted (`tollgate_connections_refused_total`) and logged at most once a second.
//! - **The accept loop never spins or dies**: a failed accept (out of file descriptors, of memory) is
//!   counted, logged, and retried after a short pause.
//! - **Local mode has an owner**: with no tokens configured, each connection is attributed to its
//!   user when it is accepted ([`crate::owner`]), and the verdict rides on each of its requests for
//!   [`crate::auth`] to let the owner in as `local` and answer anyone else 403.
//! - **Graceful shutdown**: once `stop` turns true no connection is accepted; each open one finishes its
//!   request in flight and closes; [`serve`] returns when the last has closed.

use crate::auth::Auth;
use crate::metrics::Metrics;
use crate::owner::{Owner, Verdict};
use crate::problem::{ApiError, ProblemKind};
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Method, Request, Response, header};
use axum::response::IntoResponse;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;

/// How long the accept loop pauses after a failed accept (out of descriptors, of memory): long enough not
/// to spin, short enough to pick up again as soon as connections close.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// File descriptors left to everything but connections (the store's files and connections, MCP servers'
/// pipes, webhook and provider connections, the tools' files) when the cap is lowered to fit the soft
/// limit on open files.
const FD_HEADROOM: u64 = 128;

/// The connection limits of one server.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Once a request head has begun, how long it may take to arrive.
    pub(crate) header_read_timeout: Duration,
    /// How long a connection may stay open with no request in progress.
    pub(crate) idle_timeout: Duration,
    /// Connections served at once.
    pub(crate) max_connections: usize,
    /// Connections accepted past the cap, each for one request.
    pub(crate) reserved: usize,
}

/// What every connection task shares.
struct Shared {
    router: Router,
    auth: Arc<Auth>,
    metrics: Arc<Metrics>,
    limits: Limits,
    /// With auth off, the only user whose connections may use the API.
    owner: Option<Owner>,
}

/// Accepts connections on `listener` and serves `router` on them until `stop` turns true, then waits for
/// every connection to close.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    auth: Arc<Auth>,
    metrics: Arc<Metrics>,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) {
    let limits = Limits { max_connections: fit_open_file_limit(limits.max_connections, limits.reserved), ..limits };
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let reserve = Arc::new(Semaphore::new(limits.reserved));
    let owner = (!auth.is_on()).then(Owner::of_this_process);
    let shared = Arc::new(Shared { router, auth, metrics, limits, owner });
    // Every connection task holds a receiver; `closed()` completes when the last one is gone.
    let (open, _) = watch::channel(());
    let mut refusals = RefusalLog::default();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = crate::shutting_down(&mut stop) => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            // The client gave up before we took its connection: nothing to do.
            Err(e) if is_per_connection(&e) => continue,
            Err(e) => {
                shared.metrics.accept_error();
                tracing::warn!(error = %e, pause = ?ACCEPT_BACKOFF, "cannot accept connections; pausing");
                tokio::select! {
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                    () = crate::shutting_down(&mut stop) => break,
                }
            }
        };
        let (slot, reserved) = if let Ok(permit) = slots.clone().try_acquire_owned() {
            (permit, false)
        } else if let Ok(permit) = reserve.clone().try_acquire_owned() {
            (permit, true)
        } else {
            shared.metrics.connection_refused();
            refusals.note(peer, limits.max_connections, "closed at once: the reserve is full too");
            drop(stream);
            continue;
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        let task = Connection {
            shared: shared.clone(),
            peer,
            reserved,
            slot,
            _open: open.subscribe(),
            _counted: OpenConnection::new(shared.metrics.clone()),
            stop: stop.clone(),
        };
        tokio::spawn(task.run(stream));
    }
    drop(listener);
    open.closed().await;
}

/// Whether a failed accept concerns only the connection being accepted (retry at once), not the listener.
fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// `configured`, lowered (with a warning) to leave [`FD_HEADROOM`] and the reserve below the process's
/// soft limit on open files: past that limit accepting fails, and so does everything else that opens a
/// file.
fn fit_open_file_limit(configured: usize, reserved: usize) -> usize {
    let Some(soft) = rustix::process::getrlimit(rustix::process::Resource::Nofile).current else {
        return configured;
    };
    let room = soft.saturating_sub(FD_HEADROOM).saturating_sub(reserved as u64).max(1);
    let room = usize::try_from(room).unwrap_or(usize::MAX);
    if room < configured {
        tracing::warn!(
            max_connections = configured,
            open_file_limit = soft,
            serving = room,
            "[server] max_connections is above what the open-file limit allows; serving fewer (raise `ulimit -n` / LimitNOFILE)"
        );
        room
    } else {
        configured
    }
}

/// Logs refused connections at most once a second, with how many were refused since the last line.
#[derive(Default)]
struct RefusalLog {
    last: Option<Instant>,
    unlogged: u64,
}

impl RefusalLog {
    fn note(&mut self, peer: SocketAddr, cap: usize, how: &str) {
        self.unlogged += 1;
        if self.last.is_some_and(|at| at.elapsed() < Duration::from_secs(1)) {
            return;
        }
        tracing::warn!(%peer, max_connections = cap, refused = self.unlogged, "at the connection limit: {how}");
        self.last = Some(Instant::now());
        self.unlogged = 0;
    }
}

/// Counts a connection in `tollgate_connections_open` while it lives.
struct OpenConnection(Arc<Metrics>);

impl OpenConnection {
    fn new(metrics: Arc<Metrics>) -> Self {
        metrics.connection_opened();
        Self(metrics)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.connection_closed();
    }
}

struct Connection {
    shared: Arc<Shared>,
    peer: SocketAddr,
    /// Past `max_connections`, in the reserve: one request, served only for `/healthz` or a valid token.
    /// Otherwise within it: served fully, kept alive.
    reserved: bool,
    /// Its place within `max_connections` or the reserve, released when the connection is closed.
    slot: OwnedSemaphorePermit,
    _open: watch::Receiver<()>,
    _counted: OpenConnection,
    stop: watch::Receiver<bool>,
}

impl Connection {
    async fn run(mut self, stream: TcpStream) {
        let activity = Arc::new(Activity::new());
        // Once per connection: its user cannot change while it is open.
        let verdict = match self.shared.owner {
            Some(owner) => Some(owner.judge_connection(self.peer, stream.local_addr()).await),
            None => None,
        };
        if let Some(Verdict::Refused(why)) = &verdict {
            tracing::debug!(peer = %self.peer, %why, "a connection not from the owner: its API requests get 403");
        }
        let reserved = self.reserved;
        let limits = self.shared.limits;
        // A reserved connection is for one prompt request: it gets no idle time beyond the head's.
        let idle = if reserved { limits.header_read_timeout } else { limits.idle_timeout };
        let io = TokioIo::new(Watched { stream, activity: activity.clone() });
        let service = {
            let shared = self.shared.clone();
            let activity = activity.clone();
            let peer = self.peer;
            hyper::service::service_fn(move |request: Request<Incoming>| {
                let started = InFlight::start(activity.clone());
                let shared = shared.clone();
                let verdict = verdict.clone();
                async move {
                    let mut request = request.map(Body::new);
                    request.extensions_mut().insert(ConnectInfo(peer));
                    if let Some(verdict) = verdict {
                        request.extensions_mut().insert(verdict);
                    }
                    let response = if reserved && !admitted_past_cap(&request, &shared.auth) {
                        shared.metrics.connection_refused();
                        refusal(shared.limits.max_connections)
                    } else {
                        let mut router = shared.router.clone();
                        match tower_service::Service::call(&mut router, request).await {
                            Ok(response) => response,
                            Err(never) => match never {},
                        }
                    };
                    // The request counts as in flight until its response body is done or dropped.
                    Ok::<_, Infallible>(response.map(|body| Body::new(Tracked { body, _in_flight: started })))
                }
            })
        };
        let mut builder = http1::Builder::new();
        // The deadlines are ours (below): hyper's own header timeout also runs while a kept-alive
        // connection waits for its next request, which would make the idle timeout the header one.
        builder.timer(TokioTimer::new()).header_read_timeout(None).keep_alive(!reserved);
        // Boxed, so that it can be dropped (closing the socket) before the slot is freed.
        let mut connection = Box::pin(builder.serve_connection(io, service));
        let mut stopping = false;
        loop {
            let deadline = activity.deadline(idle, limits.header_read_timeout);
            let sleep = async {
                match deadline {
                    Some((at, _)) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                served = connection.as_mut() => {
                    if let Err(e) = served {
                        tracing::debug!(peer = %self.peer, error = %e, "connection ended with an error");
                    }
                    break;
                }
                () = activity.changed.notified() => {}
                () = sleep => {
                    if let Some((at, timeout)) = deadline && at <= Instant::now() {
                        self.shared.metrics.connection_timed_out(timeout);
                        tracing::debug!(peer = %self.peer, timeout = timeout.as_str(), "closing a connection past its deadline");
                        break;
                    }
                }
                () = crate::shutting_down(&mut self.stop), if !stopping => {
                    // Closes at once when idle; otherwise after the response in flight.
                    connection.as_mut().graceful_shutdown();
                    stopping = true;
                }
            }
        }
        // Close the socket first, then free its place.
        drop(connection);
        drop(self.slot);
    }
}

/// Past the cap, only `GET /healthz` and callers with a valid token (never a live-event stream, which
/// would hold the reserved connection for long) are served.
fn admitted_past_cap(request: &Request<Body>, auth: &Auth) -> bool {
    if request.method() == Method::GET && request.uri().path() == "/healthz" {
        return true;
    }
    let stream = request
        .headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("text/event-stream"));
    !stream && auth.vouches_for(request.headers())
}

/// The answer to a request refused past the cap.
fn refusal(cap: usize) -> Response<Body> {
    let error = ApiError::new(
        ProblemKind::Unavailable,
        format!("the server is at its connection limit ({cap} connections); retry shortly"),
    );
    let mut response = error.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// Which deadline closed a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Timeout {
    /// No request in progress for `idle_timeout`.
    Idle,
    /// A request head begun but not finished within `header_read_timeout`.
    HeaderRead,
}

impl Timeout {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Timeout::Idle => "idle",
            Timeout::HeaderRead => "header_read",
        }
    }
}

/// Where a connection is between requests; decides its deadline.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// No request in progress and no byte of the next one, since then.
    Idle(Instant),
    /// The first bytes of a request head arrived then; the head is not complete.
    Head(Instant),
    /// This many requests handed to the router whose responses are not done.
    Busy(usize),
}

/// A connection's [`Phase`], updated by its socket (bytes read) and its requests (started, done).
struct Activity {
    phase: Mutex<Phase>,
    /// Woken on every change of phase, so the connection task looks at its deadline again.
    changed: Notify,
}

impl Activity {
    fn new() -> Self {
        Self { phase: Mutex::new(Phase::Idle(Instant::now())), changed: Notify::new() }
    }

    fn update(&self, next: impl FnOnce(Phase) -> Option<Phase>) {
        let mut phase = self.phase.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(new) = next(*phase) {
            *phase = new;
            drop(phase);
            self.changed.notify_one();
        }
    }

    fn bytes_read(&self) {
        self.update(|phase| match phase {
            Phase::Idle(_) => Some(Phase::Head(Instant::now())),
            Phase::Head(_) | Phase::Busy(_) => None,
        });
    }

    fn request_started(&self) {
        self.update(|phase| match phase {
            Phase::Busy(n) => Some(Phase::Busy(n + 1)),
            Phase::Idle(_) | Phase::Head(_) => Some(Phase::Busy(1)),
        });
    }

    fn request_done(&self) {
        self.update(|phase| match phase {
            Phase::Busy(n) if n > 1 => Some(Phase::Busy(n - 1)),
            _ => Some(Phase::Idle(Instant::now())),
        });
    }

    /// When the connection is to be closed, and why; `None` while a request is in progress.
    fn deadline(&self, idle: Duration, header_read: Duration) -> Option<(Instant, Timeout)> {
        match *self.phase.lock().unwrap_or_else(PoisonError::into_inner) {
            Phase::Idle(since) => Some((since + idle, Timeout::Idle)),
            Phase::Head(since) => Some((since + header_read, Timeout::HeaderRead)),
            Phase::Busy(_) => None,
        }
    }
}

/// A request in progress, from the router's call to the end (or drop) of its response body.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: Arc<Activity>) -> Self {
        activity.request_started();
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_done();
    }
}

/// A response body that keeps its request [`InFlight`] until hyper is done with it.
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The socket, telling its [`Activity`] when bytes arrive.
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.bytes_read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_follows_the_phase() {
        let activity = Activity::new();
        let (idle, head) = (Duration::from_secs(60), Duration::from_secs(10));
        assert_eq!(activity.deadline(idle, head).map(|(_, why)| why), Some(Timeout::Idle));
        activity.bytes_read();
        let Some((head_at, Timeout::HeaderRead)) = activity.deadline(idle, head) else {
            panic!("the first byte starts the header-read deadline")
        };
        activity.bytes_read();
        assert_eq!(activity.deadline(idle, head).map(|(at, _)| at), Some(head_at), "later bytes do not extend it");
        activity.request_started();
        activity.request_started();
        assert_eq!(activity.deadline(idle, head), None, "no deadline while requests are in progress");
        activity.request_done();
        assert_eq!(activity.deadline(idle, head), None);
        activity.request_done();
        assert_eq!(activity.deadline(idle, head).map(|(_, why)| why), Some(Timeout::Idle));
    }

    #[test]
    fn the_cap_never_exceeds_what_was_configured() {
        assert!((1..=3).contains(&fit_open_file_limit(3, 2)));
    }
}
