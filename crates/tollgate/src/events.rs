//! A run's events as a live [`Stream`].

use crate::Event;
use futures_util::Stream;
use futures_util::stream::BoxStream;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tollgate_agent_protocol::RunId;
use tollgate_agent_runtime::{Follower, ReadError, Runtime};

/// How long the stream waits for a notice before it reads the store again while the store does not
/// announce other processes' commits (SQLite, or a PostgreSQL listener that is reconnecting): the
/// bound on how late it then sees a change made by another process on the same store.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(250);

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
    run_id: RunId,
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
    pub(crate) fn new(runtime: Runtime, run_id: RunId) -> Self {
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
            follower: self.runtime.follow(&self.run_id, self.after, self.poll_interval),
            buffered: std::collections::VecDeque::new(),
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
    follower: Follower,
    buffered: std::collections::VecDeque<Event>,
    /// The run ended or a read failed: the stream has ended.
    done: bool,
}

impl Follow {
    async fn next(&mut self) -> Option<Result<Event, ReadError>> {
        loop {
            if let Some(event) = self.buffered.pop_front() {
                return Some(Ok(event));
            }
            if self.done {
                return None;
            }
            match self.follower.next().await {
                Ok(Some(page)) => self.buffered.extend(page.iter().map(tollgate_agent_runtime::wire::event)),
                Ok(None) => self.done = true,
                Err(error) => {
                    self.done = true;
                    return Some(Err(error));
                }
            }
        }
    }
}
