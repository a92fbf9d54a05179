//! A run's events as a live [`Stream`].

use crate::Event;
use futures_util::Stream;
use futures_util::stream::BoxStream;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tollgate_agent_runtime::{ReadError, Runtime};

/// How long the stream waits for a notice before it reads the store again while the store does not
/// announce other processes' commits (SQLite, or a PostgreSQL listener that is reconnecting): the
/// bound on how late it then sees a change made by another process on the same store.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Events read per store query.
const PAGE: u32 = 500;

/// A run's events in order, live: those already stored after the start point, then each new one as it
/// commits, until the run has ended and every event is delivered. From [`Tollgate::events`].
///
/// Changes made by this process arrive at once, and so do those of another node on the same PostgreSQL
/// database (announced by the store through LISTEN/NOTIFY; nothing polls then); changes made by another
/// process on a SQLite store (the `tollgate` CLI), or while the PostgreSQL listener reconnects, within
/// the [poll interval](Self::poll_interval). A
/// read error is yielded once and ends the stream; a new stream may start after the last seq seen.
///
/// [`Tollgate::events`]: crate::Tollgate::events
#[must_use = "a stream does nothing unless polled"]
pub struct EventStream {
    runtime: Runtime,
    run_id: String,
    after: u64,
    poll_interval: Duration,
    inner: Option<BoxStream<'static, Result<Event, ReadError>>>,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("run_id", &self.run_id)
            .field("after", &self.after)
            .field("poll_interval", &self.poll_interval)
            .finish_non_exhaustive()
    }
}

impl EventStream {
    pub(crate) fn new(runtime: Runtime, run_id: String) -> Self {
        Self { runtime, run_id, after: 0, poll_interval: DEFAULT_POLL_INTERVAL, inner: None }
    }

    /// Starts after this seq (events are numbered 1, 2, … per run): `after(0)`, the default, gives every
    /// event. Only before the first poll.
    pub fn after(mut self, seq: u64) -> Self {
        self.after = seq;
        self
    }

    /// How often the store is read again while nothing is announced and the store does not announce
    /// other processes' commits (default [`DEFAULT_POLL_INTERVAL`]; at least 10 ms).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval.max(Duration::from_millis(10));
        self
    }

    fn start(&mut self) -> BoxStream<'static, Result<Event, ReadError>> {
        let state = Follow {
            runtime: self.runtime.clone(),
            notices: self.runtime.subscribe(),
            run_id: self.run_id.clone(),
            cursor: self.after,
            poll_interval: self.poll_interval,
            buffered: std::collections::VecDeque::new(),
            ended: false,
            done: false,
        };
        Box::pin(futures_util::stream::unfold(state, |mut state| async move {
            let item = state.next().await?;
            Some((item, state))
        }))
    }
}

impl Stream for EventStream {
    type Item = Result<Event, ReadError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.inner.is_none() {
            let inner = self.start();
            self.inner = Some(inner);
        }
        match self.inner.as_mut() {
            Some(inner) => inner.as_mut().poll_next(cx),
            None => Poll::Ready(None),
        }
    }
}

struct Follow {
    runtime: Runtime,
    notices: tokio::sync::broadcast::Receiver<tollgate_agent_runtime::RunNotice>,
    run_id: String,
    cursor: u64,
    poll_interval: Duration,
    buffered: std::collections::VecDeque<Event>,
    /// The run was seen terminal: once the events read after that are delivered, the stream ends.
    ended: bool,
    /// A read failed: the stream has ended.
    done: bool,
}

impl Follow {
    async fn next(&mut self) -> Option<Result<Event, ReadError>> {
        loop {
            if let Some(event) = self.buffered.pop_front() {
                self.cursor = event.seq;
                return Some(Ok(event));
            }
            if self.done {
                return None;
            }
            let page = match self.read_page().await {
                Ok(page) => page,
                Err(error) => return Some(Err(error)),
            };
            if !page.is_empty() {
                self.buffered.extend(page);
                continue;
            }
            // Nothing new. A run seen terminal never changes again: the empty read after it was the last.
            if self.ended {
                return None;
            }
            match self.runtime.get(&self.run_id).await {
                Ok(run) if run.status().is_terminal() => {
                    self.ended = true;
                    continue;
                }
                Ok(_) => {}
                Err(error) => {
                    self.done = true;
                    return Some(Err(error));
                }
            }
            self.wait_for_change().await;
        }
    }

    /// The next events after the cursor (and after those already buffered); an error ends the stream.
    async fn read_page(&mut self) -> Result<Vec<Event>, ReadError> {
        let after = self.buffered.back().map_or(self.cursor, |event| event.seq);
        match self.runtime.events(&self.run_id, after, PAGE).await {
            Ok(page) => Ok(page.iter().map(tollgate_agent_runtime::wire::event).collect()),
            Err(error) => {
                self.done = true;
                Err(error)
            }
        }
    }

    /// Until a notice wakes the follower of the run or, while the store does not announce other
    /// processes' commits, the poll interval passes.
    async fn wait_for_change(&mut self) {
        self.runtime.wait_for_run(&mut self.notices, &self.run_id, self.cursor, self.poll_interval).await;
    }
}
