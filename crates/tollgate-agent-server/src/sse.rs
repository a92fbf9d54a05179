//! Live events over Server-Sent Events (`GET /v1/runs/{id}/events` with `Accept: text/event-stream`).
//!
//! Each event goes out as `id: SEQ`, `event: KIND`, `data: EVENT_JSON`. The stream starts after
//! `Last-Event-ID` (or `?after=`; the header wins), reads the store from there, then waits for the
//! runtime's notices about the run: this process's commits and, on PostgreSQL, other nodes' (announced
//! by the store, see `ChangeFeed::changes`). It follows the run with a [`Follower`]: one read of events
//! per change it is woken for, a read of the run only after a resync notice or a lag, and polling
//! (every second) only while the store does not announce other processes' commits
//! (`Runtime::recheck_after`: SQLite, or a PostgreSQL listener that is down). It ends right after the
//! run's terminal event; a reconnect after that gets `204 No Content`,
//! which tells an `EventSource` to stop reconnecting. A comment line goes out as a keep-alive whenever
//! the stream has been quiet for `ServerOptions::sse_keep_alive` (15 s by default). The stream only
//! reads: a client that goes away just drops it, costing nothing and changing nothing about the run.
//!
//! With `deltas=true` it also sends, between stored events, the model's text as this process's
//! streaming model calls receive it: `event: model_delta`, `data: {"round": N, "text": "..."}` (or
//! `{"round": N, "reset": true}` when a call is tried again), and no `id:` line
//! ([`tollgate_agent_runtime::live`]).
//!
//! One client — the token's name with auth on, else the peer's IP address — holds at most
//! `ServerOptions::max_streams_per_client` streams at once ([`StreamCounts`]); the next is refused with
//! `429 too-many-requests` and `Retry-After`, and the client's other streams go on.

use crate::metrics::Metrics;
use crate::problem::{ApiError, ProblemKind};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tollgate_agent_core::{RunId, StoredEvent};
use tollgate_agent_runtime::{Follower, LiveDelta, LiveText, ReadError, RunDeltas, Runtime};

/// How often a quiet stream looks at the store again while another process's commits are not
/// announced (SQLite, or a PostgreSQL listener that is reconnecting).
const RECHECK: Duration = Duration::from_secs(1);

/// What a refused stream is told to wait before trying again, in seconds.
const RETRY_AFTER_SECS: &str = "5";

/// The live-event streams open per client, each client capped.
pub(crate) struct StreamCounts {
    per_client: usize,
    open: Mutex<HashMap<String, usize>>,
    metrics: Arc<Metrics>,
}

impl StreamCounts {
    pub(crate) fn new(per_client: usize, metrics: Arc<Metrics>) -> Self {
        Self { per_client, open: Mutex::new(HashMap::new()), metrics }
    }

    /// A slot for one more stream of `client`, or `None` when it holds `per_client` already.
    fn open(self: &Arc<Self>, client: String) -> Option<StreamSlot> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(client.clone()).or_default();
        if *count >= self.per_client {
            drop(open);
            self.metrics.stream_refused();
            return None;
        }
        *count += 1;
        drop(open);
        self.metrics.stream_opened();
        Some(StreamSlot { counts: self.clone(), client })
    }
}

/// One open stream of a client; freed when the stream ends or its client goes away.
struct StreamSlot {
    counts: Arc<StreamCounts>,
    client: String,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.counts.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.client) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.client);
            }
        }
        drop(open);
        self.counts.metrics.stream_closed();
    }
}

/// Who a stream counts against, and the caps.
pub(crate) struct StreamClient {
    pub(crate) counts: Arc<StreamCounts>,
    /// `token:NAME` with auth on, else `ip:ADDRESS`.
    pub(crate) client: String,
}

/// What a stream sends: the events after `after`, and the model's live text when `deltas`.
pub(crate) struct Stream {
    pub(crate) after: u64,
    pub(crate) deltas: bool,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) keep_alive: Duration,
}

/// Answers the SSE form of the events endpoint.
pub(crate) async fn respond(
    runtime: Runtime,
    id: RunId,
    stream: Stream,
    client: StreamClient,
) -> Result<Response, ApiError> {
    let Stream { after, deltas, shutdown, keep_alive } = stream;
    // Subscribe before the first read, so a change committed in between still wakes the stream (and
    // no delta sent after it is missed).
    let mut follower = runtime.follow(&id, after, RECHECK);
    let deltas = deltas.then(|| runtime.run_deltas(&id));
    let run = runtime.get(&id).await?;
    follower.seen(&run);
    if run.status().is_terminal() && run.last_seq <= after {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let Some(slot) = client.counts.open(client.client) else {
        let detail = format!(
            "this client already holds {} live-event streams, as many as it may ([server] max_streams_per_client); close one or retry later",
            client.counts.per_client
        );
        let mut response = ApiError::new(ProblemKind::TooManyRequests, detail).into_response();
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECS));
        return Ok(response);
    };
    let tail = Tail { id, follower, deltas, buffer: VecDeque::new(), done: false, shutdown, _slot: slot };
    let stream = futures_util::stream::unfold(tail, |mut tail| async move {
        tail.next().await.map(|e| (Ok::<_, Infallible>(e), tail))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(keep_alive)).into_response())
}

struct Tail {
    id: RunId,
    follower: Follower,
    /// The live text of the run's model calls, when asked for (`deltas=true`).
    deltas: Option<RunDeltas>,
    buffer: VecDeque<StoredEvent>,
    done: bool,
    shutdown: watch::Receiver<bool>,
    _slot: StreamSlot,
}

impl Tail {
    /// The next SSE event, or `None` when the stream ends.
    async fn next(&mut self) -> Option<Event> {
        loop {
            if self.done {
                return None;
            }
            // Deltas already received go first: each was sent before the commit of its round's
            // `model_response`, which may be in the buffer.
            if let Some(delta) = pending_delta(&mut self.deltas) {
                return Some(delta);
            }
            if let Some(event) = self.buffer.pop_front() {
                self.done = event.kind.is_terminal();
                return Some(sse_event(&event));
            }
            let shutdown = crate::shutting_down(&mut self.shutdown);
            let next = tokio::select! {
                next = self.follower.next() => next,
                delta = next_delta(&mut self.deltas) => return Some(delta),
                _ = shutdown => return None,
            };
            match next {
                Ok(Some(page)) => self.buffer.extend(page),
                // The run ended (its terminal event already sent or skipped), or vanished.
                Ok(None) | Err(ReadError::NotFound(_)) => return None,
                Err(e) => {
                    tracing::warn!(run = %self.id, error = %e, "event stream cannot read events; ending it");
                    return None;
                }
            }
        }
    }
}

/// The run's next delta as an SSE event (pending for ever without deltas). A receiver that fell
/// behind skips what it lost: deltas are live only, and the stored `model_response` holds the whole text.
async fn next_delta(deltas: &mut Option<RunDeltas>) -> Event {
    match deltas {
        Some(deltas) => delta_event(&*deltas.next().await),
        None => std::future::pending().await,
    }
}

/// A delta of the run already received, if any.
fn pending_delta(deltas: &mut Option<RunDeltas>) -> Option<Event> {
    deltas.as_mut()?.try_next().map(|delta| delta_event(&delta))
}

/// `event: model_delta` with `data: {"round": N, "text": "..."}` or `{"round": N, "reset": true}`, and
/// no `id:` line, so `Last-Event-ID` stays the last stored event's seq.
fn delta_event(delta: &LiveDelta) -> Event {
    let data = match &delta.text {
        LiveText::Text(text) => serde_json::json!({"round": delta.round, "text": text}),
        LiveText::Reset => serde_json::json!({"round": delta.round, "reset": true}),
    };
    Event::default().event("model_delta").data(data.to_string())
}

fn sse_event(event: &StoredEvent) -> Event {
    let data = serde_json::to_string(event).unwrap_or_default();
    Event::default().id(event.seq.to_string()).event(event.kind.as_str()).data(data)
}
