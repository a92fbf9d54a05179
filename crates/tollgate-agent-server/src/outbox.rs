//! The outbox: deliveries made from the store's commit log, at least once, by one node at a time — the
//! one reading, holding and positioning logic behind webhooks (`webhooks.rs`, reader `webhooks`) and
//! notifications (`notify.rs`, reader `notifications`). A [`Consumer`] says which deliveries each
//! committed event asks for and makes one; this module reads, queues and keeps the position.
//!
//! The events come from the store's commit log ([`ChangeFeed::committed`]), which holds every commit of
//! every process sharing the database, through the consumer's named reader, which one node at a time
//! holds ([`ChangeFeed::hold_reader`]) for the length of a run's lease, renewed while it runs. The
//! holder reads the log as commits are announced (and every second while some commit may go
//! unannounced: on SQLite, where another process such as the CLI announces nothing, while the
//! PostgreSQL listener is not listening, or while the last read found transactions under way), queues the
//! deliveries (bounded: it reads on only while the queue is at most half full, so the events wait in
//! the log instead; a delivery is dropped, and counted, only when one page of the log alone holds more
//! deliveries than the queue has room for), and stores its position in the log as far as every
//! delivery before it has ended (made, or failed after its last retry). So a node that crashes, or
//! whose hold lapses, leaves its position behind, and the next holder delivers again from there:
//! nothing committed is left undelivered, some deliveries may be made twice. At shutdown the holder
//! lets deliveries in flight finish for a few seconds, stores its position and releases the reader, so
//! another node continues at once. An event read more than a day after its commit (a log that no node
//! read for that long) is handed to the consumer as too old: it makes no delivery of it, and counts it
//! as expired.
//!
//! [`ChangeFeed::committed`]: tollgate_agent_core::ChangeFeed::committed
//! [`ChangeFeed::hold_reader`]: tollgate_agent_core::ChangeFeed::hold_reader

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, broadcast, mpsc, oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use tollgate_agent_core::{Millis, ReaderHold, RunId, StoreError, StoredEvent};
use tollgate_agent_runtime::{RunNotice, Runtime};

/// What the outbox delivers for: the deliveries each committed event asks for, and how one is made.
pub(crate) trait Consumer: Send + Sync + 'static {
    /// One delivery.
    type Job: Send + Sync + 'static;

    /// The deliveries `event` of run `run_id` asks for (none for most events). `too_old`: the event was
    /// read more than a day after its commit, and is not to be delivered: the consumer counts it as
    /// expired and answers none. Never waits.
    fn jobs(&self, run_id: &RunId, event: &StoredEvent, too_old: bool) -> Vec<Self::Job>;

    /// Makes one delivery, its retries included. It logs and counts its own outcome: the outbox only
    /// learns that it has ended.
    fn deliver(&self, job: &Self::Job) -> impl Future<Output = ()> + Send;

    /// A delivery was not queued: the queue had no room (logged and counted by the consumer).
    fn dropped(&self, job: &Self::Job);

    /// Whether this process holds the consumer's reader now (a gauge).
    fn reader_held(&self, held: bool);

    /// A delivery was queued (`true`) or has ended (`false`) (a gauge of deliveries under way).
    fn queued(&self, queued: bool);
}

/// How many deliveries may wait in the queue.
const QUEUE: usize = 10_000;
/// How many deliveries are made at once.
const PARALLEL: usize = 16;
/// How many commits one page of the log holds at most.
const PAGE: u32 = 100;
/// How many pages one read takes before the holder renews its hold (when due) and reads on.
const PAGES_PER_READ: usize = 10;
/// How long the holder waits when its queue is more than half full before it reads on.
const QUEUE_FULL_PAUSE: Duration = Duration::from_millis(50);
/// How often the holder reads the log when no commit was announced while some may go unannounced (a
/// store that announces nothing, a lost listener, transactions under way; see [`Reader::deliver`]), and
/// how often a node that does not hold the reader tries to take it.
const POLL: Duration = Duration::from_secs(1);
/// How often, at most, the holder stores a position that moved (it renews its hold more often only
/// when its lease is shorter).
const STORE_EVERY: Duration = Duration::from_secs(1);
/// An event read later than this after its commit is not delivered.
pub(crate) const MAX_AGE_MS: i64 = 24 * 60 * 60 * 1000;

/// A queued delivery and the count of its page of the log still under way.
struct Envelope<J> {
    job: J,
    page: Arc<AtomicUsize>,
}

/// Whose outbox it is: the commit log's reader it holds (`webhooks`, `notifications`) and what its
/// deliveries are called in log lines (`webhook`, `notification`).
#[derive(Clone, Copy)]
pub(crate) struct Names {
    pub(crate) reader: &'static str,
    pub(crate) what: &'static str,
}

/// The running outbox of one consumer: stop it with [`Dispatcher::stop`].
pub(crate) struct Dispatcher {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    what: &'static str,
    /// Turns true once the first attempt to take the reader has ended: held and positioned, or found
    /// elsewhere (or the reader has stopped: its sender is gone).
    positioned: watch::Receiver<bool>,
}

impl Dispatcher {
    /// Waits, at most `within`, until the first attempt to take the reader has ended: held and
    /// positioned (a reader with no stored position starts at the end of the log, so a commit made before
    /// then is not delivered), held by another node, or failed. A server awaits it before it accepts work.
    /// The future owns what it waits on, so it may be awaited after the dispatcher moved on.
    pub(crate) fn positioned(&self, within: Duration) -> impl Future<Output = ()> + Send + 'static {
        let mut positioned = self.positioned.clone();
        let what = self.what;
        async move {
            if tokio::time::timeout(within, positioned.wait_for(|done| *done)).await.is_err() {
                tracing::warn!(
                    "the {what} reader is not positioned yet; serving anyway, it delivers from where it starts"
                );
            }
        }
    }

    /// Stops reading the log, lets deliveries in flight finish for at most `flush`, stores the
    /// position and releases the reader.
    pub(crate) async fn stop(self, flush: Duration) {
        let _ = self.stop.send(());
        let mut task = self.task;
        // The reader bounds its own wait by `flush`; this bounds a store that does not answer.
        if tokio::time::timeout(flush + Duration::from_secs(2), &mut task).await.is_err() {
            let what = self.what;
            tracing::warn!("the {what} dispatcher did not stop in time; undelivered events stay in the log");
            task.abort();
        }
    }
}

/// Starts delivering for `consumer` from the commit log through the reader `names` gives; `flush` bounds
/// the wait for deliveries under way when it stops.
pub(crate) fn spawn<C: Consumer>(runtime: Runtime, consumer: C, names: Names, flush: Duration) -> Dispatcher {
    let consumer = Arc::new(consumer);
    let (queue, jobs) = mpsc::channel(QUEUE);
    let deliveries = tokio::spawn(dispatch(jobs, consumer.clone()));
    let (stop, stopped) = oneshot::channel();
    let (positioned, first_take) = watch::channel(false);
    let reader = Reader {
        positioned: Some(positioned),
        names,
        notices: runtime.subscribe(),
        runtime,
        consumer,
        queue: Some(queue),
        pages: VecDeque::new(),
        read_to: String::new(),
        done_to: String::new(),
        stored: None,
        last_store: None,
        warned: false,
        pending: false,
    };
    let task = tokio::spawn(reader.run(stopped, deliveries, flush));
    Dispatcher { stop, task, what: names.what, positioned: first_take }
}

/// The holder's side: reads the log, queues deliveries, stores its position.
struct Reader<C: Consumer> {
    names: Names,
    /// Told once the first attempt to take the reader has ended ([`Dispatcher::positioned`]).
    positioned: Option<watch::Sender<bool>>,
    runtime: Runtime,
    notices: broadcast::Receiver<RunNotice>,
    consumer: Arc<C>,
    queue: Option<mpsc::Sender<Envelope<C::Job>>>,
    /// Pages read whose deliveries are under way, oldest first: where the log continues after each,
    /// and how many of its deliveries have not ended.
    pages: VecDeque<(String, Arc<AtomicUsize>)>,
    /// Where the next read continues.
    read_to: String,
    /// How far every delivery has ended: the position to store.
    done_to: String,
    /// The position last stored, and when.
    stored: Option<String>,
    last_store: Option<Instant>,
    /// A read failure was logged (once until a read succeeds).
    warned: bool,
    /// The last read may have left commits that no announcement will name (see
    /// [`CommittedPage::pending`](tollgate_agent_core::CommittedPage::pending)), or failed.
    pending: bool,
}

/// How a read of the log ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Read {
    /// At the end of the log (or the store failed): wait for a commit.
    CaughtUp,
    /// More can be read at once.
    More,
    /// The queue has too little room: wait for deliveries to end.
    QueueFull,
}

/// Why the holder stopped reading.
enum Stopped {
    /// Shutdown.
    Stop,
    /// Another node holds the reader now.
    Lost,
}

impl<C: Consumer> Reader<C> {
    async fn run(mut self, mut stop: oneshot::Receiver<()>, deliveries: JoinHandle<()>, flush: Duration) {
        let Names { reader, what } = self.names;
        let mut holding = false;
        loop {
            let taken = self.take(&mut stop).await;
            if let Some(positioned) = self.positioned.take() {
                positioned.send_replace(true);
            }
            match taken {
                Some(true) => {}
                Some(false) => continue,
                None => break,
            }
            holding = true;
            self.consumer.reader_held(true);
            match self.deliver(&mut stop).await {
                Stopped::Stop => break,
                Stopped::Lost => {
                    holding = false;
                    self.consumer.reader_held(false);
                    tracing::info!(
                        "another node holds the {reader} reader of the commit log now; it delivers from here"
                    );
                }
            }
        }
        // No more reads: let the deliveries in flight end, then store how far they got and let go.
        self.queue = None;
        let mut deliveries = deliveries;
        if tokio::time::timeout(flush, &mut deliveries).await.is_err() {
            tracing::warn!("{what} deliveries still under way at shutdown were stopped; the next holder makes them");
            deliveries.abort();
        }
        if holding {
            self.advance();
            let _ = self.store(true).await;
            if let Err(error) = self.runtime.change_feed().release_reader(reader, self.runtime.node_id()).await {
                tracing::warn!(%error, "cannot release the {reader} reader; another node takes it when its hold ends");
            }
            self.consumer.reader_held(false);
        }
    }

    /// Takes the reader: `Some(true)` once held (positioned where its last holder left it), `Some(false)`
    /// after waiting for another holder, `None` on shutdown.
    async fn take(&mut self, stop: &mut oneshot::Receiver<()>) -> Option<bool> {
        let reader = self.names.reader;
        let now = self.runtime.clock().now();
        let until = now + millis(self.runtime.lease_length());
        let wait = match self.runtime.change_feed().hold_reader(reader, self.runtime.node_id(), None, until, now).await
        {
            Ok(ReaderHold::Held { position }) => match self.start(position).await {
                Ok(()) => return Some(true),
                Err(error) => {
                    tracing::warn!(%error, "cannot read the commit log for the {reader} reader; retrying");
                    POLL
                }
            },
            Ok(ReaderHold::Elsewhere { until, .. }) => {
                let left = Duration::from_millis(u64::try_from(until - now).unwrap_or_default());
                left.clamp(Duration::from_millis(50), POLL)
            }
            Err(error) => {
                tracing::warn!(%error, "cannot take the {reader} reader of the commit log; retrying");
                POLL
            }
        };
        tokio::select! {
            _ = stop => None,
            () = tokio::time::sleep(wait) => Some(false),
        }
    }

    /// Starts reading at the reader's stored `position`, or at the end of the log when it has none (a
    /// position the log cannot read is found by the first read, which then starts at the end).
    async fn start(&mut self, position: Option<String>) -> Result<(), StoreError> {
        let at = match position {
            Some(position) => position,
            None => self.runtime.change_feed().committed(None, 1).await?.next,
        };
        self.restart_at(at);
        // Another node taking the reader meanwhile is found at the next store.
        let _ = self.store(true).await;
        Ok(())
    }

    /// Reads on from `at`, forgetting the pages under way (their deliveries go on; they no longer hold
    /// the position back), and stores `at` at the next store.
    fn restart_at(&mut self, at: String) {
        self.pages.clear();
        self.read_to = at.clone();
        self.done_to = at;
        self.stored = None;
    }

    /// Holds the reader: reads, queues, stores, until shutdown or until another node holds it.
    async fn deliver(&mut self, stop: &mut oneshot::Receiver<()>) -> Stopped {
        let renew_every = (self.runtime.lease_length() / 3).min(Duration::from_secs(10));
        let mut renewed = Instant::now();
        loop {
            let read = self.read().await;
            self.advance();
            let renew = renewed.elapsed() >= renew_every;
            match self.store(renew).await {
                Ok(true) => renewed = Instant::now(),
                Ok(false) => {}
                Err(Lost) => return Stopped::Lost,
            }
            let wait = match read {
                // Announcements wake it; only what they may miss is polled for.
                Read::CaughtUp if self.pending || self.runtime.recheck_after(POLL).is_some() => POLL,
                Read::CaughtUp => renew_every,
                Read::More => Duration::ZERO,
                Read::QueueFull => QUEUE_FULL_PAUSE,
            };
            tokio::select! {
                _ = &mut *stop => return Stopped::Stop,
                () = self.woken(), if read == Read::CaughtUp => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Waits for an announced commit, then takes every notice waiting, so a burst wakes one read.
    async fn woken(&mut self) {
        match self.notices.recv().await {
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
        }
        while let Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) = self.notices.try_recv() {}
    }

    /// Reads the log from where it continues, queueing each event's deliveries: until a page is not
    /// full, [`PAGES_PER_READ`] pages (so the hold is renewed between them), or the queue has too little
    /// room for another page (the events wait in the log meanwhile, rather than be dropped).
    async fn read(&mut self) -> Read {
        let reader = self.names.reader;
        let store = self.runtime.change_feed().clone();
        for _ in 0..PAGES_PER_READ {
            if self.queue.as_ref().is_none_or(|queue| queue.capacity() < QUEUE / 2) {
                return Read::QueueFull;
            }
            let page = match store.committed(Some(&self.read_to), PAGE).await {
                Ok(page) => {
                    self.warned = false;
                    self.pending = page.pending;
                    page
                }
                Err(error @ StoreError::Corrupt { .. }) => {
                    // A position the log can no longer read (the database was replaced): from the end.
                    tracing::warn!(%error, "the {reader} reader's position is unreadable; delivering from now on");
                    self.pending = true;
                    match store.committed(None, 1).await {
                        Ok(end) => self.restart_at(end.next),
                        Err(error) => {
                            tracing::warn!(%error, "cannot read the commit log for the {reader} reader; retrying")
                        }
                    }
                    return Read::CaughtUp;
                }
                Err(error) => {
                    self.pending = true;
                    if !std::mem::replace(&mut self.warned, true) {
                        tracing::warn!(%error, "cannot read the commit log for the {reader} reader; retrying");
                    }
                    return Read::CaughtUp;
                }
            };
            for (run_id, error) in &page.skipped {
                tracing::warn!(run = %run_id, %error, "an event in the commit log cannot be read; the {reader} reader skips it");
            }
            let under_way = Arc::new(AtomicUsize::new(0));
            let now = self.runtime.clock().now();
            for (run_id, event) in &page.events {
                self.offer(run_id, event, now, &under_way);
            }
            self.read_to = page.next.clone();
            match self.pages.back_mut() {
                // Nothing of this page under way: it ends where the page before it ends.
                Some((next, _)) if under_way.load(Ordering::Acquire) == 0 => *next = page.next,
                _ => self.pages.push_back((page.next, under_way)),
            }
            if !page.more {
                return Read::CaughtUp;
            }
        }
        Read::More
    }

    /// Queues the deliveries an event asks for. Never waits.
    fn offer(&self, run_id: &RunId, event: &StoredEvent, now: Millis, under_way: &Arc<AtomicUsize>) {
        let Some(queue) = &self.queue else { return };
        for job in self.consumer.jobs(run_id, event, too_old(&event.at, now)) {
            under_way.fetch_add(1, Ordering::AcqRel);
            self.consumer.queued(true);
            if let Err(full) = queue.try_send(Envelope { job, page: under_way.clone() }) {
                self.consumer.queued(false);
                under_way.fetch_sub(1, Ordering::AcqRel);
                let envelope = match full {
                    mpsc::error::TrySendError::Full(envelope) | mpsc::error::TrySendError::Closed(envelope) => envelope,
                };
                self.consumer.dropped(&envelope.job);
            }
        }
    }

    /// Moves `done_to` past every page whose deliveries have all ended.
    fn advance(&mut self) {
        while let Some((next, under_way)) = self.pages.front() {
            if under_way.load(Ordering::Acquire) > 0 {
                break;
            }
            self.done_to = next.clone();
            self.pages.pop_front();
        }
        if self.pages.is_empty() {
            self.done_to = self.read_to.clone();
        }
    }

    /// Stores `done_to` with the hold (renewing it) when it moved and [`STORE_EVERY`] has passed, or
    /// when `renew`. `Ok(true)` when it wrote, `Err(Lost)` when another node holds the reader now.
    async fn store(&mut self, renew: bool) -> Result<bool, Lost> {
        let moved = self.stored.as_ref() != Some(&self.done_to);
        let due = self.last_store.is_none_or(|at| at.elapsed() >= STORE_EVERY);
        if !(renew || (moved && due)) {
            return Ok(false);
        }
        let now = self.runtime.clock().now();
        let until = now + millis(self.runtime.lease_length());
        let position = self.done_to.clone();
        let holder = self.runtime.node_id();
        let reader = self.names.reader;
        match self.runtime.change_feed().hold_reader(reader, holder, Some(&position), until, now).await {
            Ok(ReaderHold::Held { .. }) => {
                self.stored = Some(position);
                self.last_store = Some(Instant::now());
                Ok(true)
            }
            Ok(ReaderHold::Elsewhere { .. }) => Err(Lost),
            Err(error) => {
                tracing::warn!(%error, "cannot store the {reader} reader's position; retrying");
                Ok(false)
            }
        }
    }
}

/// Another node holds the reader.
struct Lost;

/// Whether an event committed at `at` (RFC 3339, as stored) is too old to deliver at `now`.
pub(crate) fn too_old(at: &str, now: Millis) -> bool {
    chrono::DateTime::parse_from_rfc3339(at).is_ok_and(|at| now.saturating_sub(at.timestamp_millis()) > MAX_AGE_MS)
}

/// `duration` in milliseconds.
pub(crate) fn millis(duration: Duration) -> Millis {
    Millis::try_from(duration.as_millis()).unwrap_or(Millis::MAX / 2)
}

/// Makes the queued deliveries, [`PARALLEL`] at a time, until the queue closes; then finishes those in
/// flight, retries included.
async fn dispatch<C: Consumer>(mut jobs: mpsc::Receiver<Envelope<C::Job>>, consumer: Arc<C>) {
    let slots = Arc::new(Semaphore::new(PARALLEL));
    // Dropping the set (when this task is aborted at shutdown) aborts the deliveries in flight, whose
    // pages then never count as done.
    let mut deliveries = JoinSet::new();
    while let Some(envelope) = jobs.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else { break };
        let consumer = consumer.clone();
        deliveries.spawn(async move {
            consumer.deliver(&envelope.job).await;
            consumer.queued(false);
            envelope.page.fetch_sub(1, Ordering::AcqRel);
            drop(slot);
        });
        while deliveries.try_join_next().is_some() {}
    }
    while deliveries.join_next().await.is_some() {}
}

/// What one attempt of a delivery (or of a read it needs) came to.
pub(crate) enum Attempt<T> {
    /// Done, with what it gave.
    Done(T),
    /// Failed, for this reason; `retryable` when a later attempt may get through.
    Failed {
        /// Why, for a log line.
        failure: String,
        /// Whether to try again.
        retryable: bool,
    },
}

/// Makes up to `attempts` attempts (at least one), waiting `first_delay` before the second and twice
/// as long before each later one, until one is [`Attempt::Done`] or fails for good. `Err` holds how
/// many attempts were made and the last failure.
pub(crate) async fn with_retries<T, F, Fut>(
    attempts: u32,
    first_delay: Duration,
    mut attempt: F,
) -> Result<T, (u32, String)>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Attempt<T>>,
{
    let attempts = attempts.max(1);
    let mut delay = first_delay;
    let mut made = 0;
    loop {
        made += 1;
        match attempt(made).await {
            Attempt::Done(done) => return Ok(done),
            Attempt::Failed { failure, retryable } if !retryable || made >= attempts => return Err((made, failure)),
            Attempt::Failed { .. } => {
                tokio::time::sleep(delay).await;
                delay = delay.saturating_mul(2);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_read_more_than_a_day_after_its_commit_is_too_old() {
        let at = "2025-11-29T10:00:00.000Z";
        let committed = 1_764_410_400_000;
        assert!(!too_old(at, committed));
        assert!(!too_old(at, committed + MAX_AGE_MS));
        assert!(too_old(at, committed + MAX_AGE_MS + 1));
        assert!(!too_old("not a time", committed + 10 * MAX_AGE_MS), "a time that cannot be read is delivered");
    }

    #[tokio::test]
    async fn retries_back_off_and_stop_at_the_first_success_or_permanent_failure() {
        let started = std::time::Instant::now();
        let mut seen = Vec::new();
        let result = with_retries(5, Duration::from_millis(40), |n| {
            seen.push((n, started.elapsed()));
            async move {
                if n < 3 { Attempt::Failed { failure: format!("try {n}"), retryable: true } } else { Attempt::Done(n) }
            }
        })
        .await;
        assert_eq!(result, Ok(3));
        let attempts: Vec<u32> = seen.iter().map(|(n, _)| *n).collect();
        assert_eq!(attempts, vec![1, 2, 3], "stops at the first success");
        // 40 ms before the second attempt, then 80 ms before the third.
        assert!(seen[1].1 >= Duration::from_millis(40), "{seen:?}");
        assert!(seen[2].1 - seen[1].1 >= Duration::from_millis(80), "{seen:?}");

        let result: Result<(), _> = with_retries(5, Duration::from_millis(100), |n| async move {
            Attempt::Failed { failure: format!("no {n}"), retryable: false }
        })
        .await;
        assert_eq!(result, Err((1, "no 1".to_owned())), "a permanent failure is not tried again");

        let result: Result<(), _> = with_retries(3, Duration::from_millis(10), |n| async move {
            Attempt::Failed { failure: format!("down {n}"), retryable: true }
        })
        .await;
        assert_eq!(result, Err((3, "down 3".to_owned())));
        let result = with_retries(0, Duration::ZERO, |_| async { Attempt::Done(()) }).await;
        assert_eq!(result, Ok(()), "zero attempts still makes one");
    }
}
