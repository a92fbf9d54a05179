//! Live events over Server-Sent Events (`GET /v1/runs/{id}/events` with `Accept: text/event-stream`).
//!
//! Each event goes out as `id: SEQ`, `event: KIND`, `data: EVENT_JSON`. The stream starts after
//! `Last-Event-ID` (or `?after=`; the header wins), reads the store from there, then waits for this
//! process's notices about the run, looking at the store again every second for runs driven by another
//! process. It ends right after the run's terminal event; a reconnect after that gets `204 No Content`,
//! which tells an `EventSource` to stop reconnecting. A comment line goes out as a keep-alive whenever
//! the stream has been quiet for `ServerOptions::sse_keep_alive` (15 s by default). The stream only
//! reads: a client that goes away just drops it, costing nothing and changing nothing about the run.

use crate::problem::ApiError;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::{broadcast, watch};
use tollgate_core::StoredEvent;
use tollgate_runtime::{ReadError, RunNotice, Runtime};

/// How often a quiet stream looks at the store again (runs driven by another process send no notice).
const RECHECK: Duration = Duration::from_secs(1);
const PAGE: u32 = 500;

/// Answers the SSE form of the events endpoint.
pub(crate) async fn respond(
    runtime: Runtime,
    id: String,
    after: u64,
    shutdown: watch::Receiver<bool>,
    keep_alive: Duration,
) -> Result<Response, ApiError> {
    // Subscribe before the first read, so a change committed in between still wakes the stream.
    let notices = runtime.subscribe();
    let run = runtime.get(&id).await?;
    if run.status().is_terminal() && run.last_seq <= after {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let tail = Tail { runtime, id, cursor: after, notices, buffer: VecDeque::new(), done: false, shutdown };
    let stream = futures_util::stream::unfold(tail, |mut tail| async move {
        tail.next().await.map(|e| (Ok::<_, Infallible>(e), tail))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(keep_alive)).into_response())
}

struct Tail {
    runtime: Runtime,
    id: String,
    cursor: u64,
    notices: broadcast::Receiver<RunNotice>,
    buffer: VecDeque<StoredEvent>,
    done: bool,
    shutdown: watch::Receiver<bool>,
}

impl Tail {
    /// The next SSE event, or `None` when the stream ends.
    async fn next(&mut self) -> Option<Event> {
        loop {
            if self.done {
                return None;
            }
            if let Some(event) = self.buffer.pop_front() {
                self.cursor = event.seq;
                self.done = event.kind.is_terminal();
                return Some(sse_event(&event));
            }
            match self.runtime.store().events(&self.id, self.cursor, PAGE).await {
                Ok(page) if !page.is_empty() => {
                    self.buffer.extend(page);
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(run = %self.id, error = %e, "event stream cannot read events; ending it");
                    return None;
                }
            }
            // Nothing new. A run that ended (its terminal event already sent or skipped) or vanished ends
            // the stream.
            match self.runtime.get(&self.id).await {
                Ok(run) if run.status().is_terminal() && run.last_seq <= self.cursor => return None,
                Ok(_) => {}
                Err(ReadError::NotFound(_)) => return None,
                Err(e) => tracing::debug!(run = %self.id, error = %e, "event stream cannot read its run"),
            }
            let id = self.id.clone();
            let cursor = self.cursor;
            let notices = &mut self.notices;
            let woken = async move {
                loop {
                    match notices.recv().await {
                        Ok(notice) if notice.run_id == id && notice.last_seq > cursor => return,
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(_)) => return,
                        Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
                    }
                }
            };
            let shutdown = crate::shutting_down(&mut self.shutdown);
            tokio::select! {
                _ = tokio::time::timeout(RECHECK, woken) => {}
                _ = shutdown => return None,
            }
        }
    }
}

fn sse_event(event: &StoredEvent) -> Event {
    let data = serde_json::to_string(event).unwrap_or_default();
    Event::default().id(event.seq.to_string()).event(event.kind.as_str()).data(data)
}
