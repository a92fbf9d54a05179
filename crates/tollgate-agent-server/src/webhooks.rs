//! Webhooks (`[[webhooks]]` in docs/configuration.md): a POST to each target for each event of a listed kind.
//!
//! The body is `{"run_id": "...", "event": EVENT}`, `EVENT` being the event exactly as
//! `GET /v1/runs/{id}/events` serves it (`seq`, `at`, `kind`, `round`, `data`, `hash`). Headers:
//! `Content-Type: application/json`, `X-Tollgate-Signature: sha256=HEX` (lowercase hex HMAC-SHA256 of
//! the exact body bytes, keyed with the target's secret), `X-Tollgate-Event: KIND`, and
//! `X-Tollgate-Delivery: RUN_ID:SEQ` (stable across retries, so a receiver can drop duplicates).
//!
//! The same delivery is also signed in the Standard Webhooks form (<https://www.standardwebhooks.com>),
//! which binds the delivery id and the time to the body, so a captured delivery cannot be replayed under
//! another id or, by a receiver that checks the time, later: `webhook-id: RUN_ID:SEQ`,
//! `webhook-timestamp: UNIX_SECONDS` (of each attempt) and `webhook-signature: v1,BASE64`, the
//! HMAC-SHA256 of `{id}.{timestamp}.{body}` keyed with [`standard_key`] of the target's secret.
//!
//! Delivery is at least once and unordered: a non-2xx answer or a network error is retried with
//! exponential backoff; receivers dedupe by `X-Tollgate-Delivery` and order by `event.seq`. It never
//! blocks or fails a run.
//!
//! The events come from the store's commit log ([`ChangeFeed::committed`]), which holds every commit of
//! every process sharing the database, through its reader named `webhooks`, which one node at a time
//! holds ([`ChangeFeed::hold_reader`]) for the length of a run's lease, renewed while it runs. The
//! holder reads the log as commits are announced (and every second while some commit may go
//! unannounced: on SQLite, where another process such as the CLI announces nothing, while the
//! PostgreSQL listener is not listening, or while the last read found transactions under way), queues the
//! deliveries (bounded: it reads on only while the queue is at most half full, so the events wait in
//! the log instead; a delivery is dropped, and counted, only when one page of the log alone holds more
//! deliveries than the queue has room for), and stores its
//! position in the log as far as every delivery before it has ended (delivered, or failed after its
//! last retry). So a node that crashes, or whose hold lapses, leaves its position behind, and the
//! next holder delivers again from there: nothing committed is left undelivered, some deliveries may
//! be made twice. At shutdown the holder lets deliveries in flight finish for a few seconds, stores
//! its position and releases the reader, so another node continues at once. An event read more than a
//! day after its commit (a log that no node read for that long) is not delivered, and is counted as
//! expired.
//!
//! [`ChangeFeed::committed`]: tollgate_agent_core::ChangeFeed::committed
//! [`ChangeFeed::hold_reader`]: tollgate_agent_core::ChangeFeed::hold_reader

use crate::metrics::{Delivery, Metrics};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, broadcast, mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tollgate_agent_core::{Clock, EventKind, Millis, ReaderHold, StoreError, StoredEvent};
use tollgate_agent_runtime::{RunNotice, Runtime};

/// One webhook receiver.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookTarget {
    /// Where to POST.
    pub url: String,
    /// The HMAC-SHA256 key for `X-Tollgate-Signature` (as it is) and for `webhook-signature` (as
    /// [`standard_key`] reads it).
    pub secret: String,
    /// The event kinds to deliver (e.g. `approval_requested`, `run_completed`); `EventKind::ALL` for
    /// every kind.
    pub events: Vec<EventKind>,
}

impl std::fmt::Debug for WebhookTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookTarget")
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .field("events", &self.events)
            .finish()
    }
}

/// How deliveries are retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WebhookRetry {
    /// Attempts in all, the first included.
    pub attempts: u32,
    /// The wait before the second attempt; it doubles for each later one.
    pub first_delay: Duration,
    /// How long one attempt may take.
    pub timeout: Duration,
}

impl Default for WebhookRetry {
    fn default() -> Self {
        Self { attempts: 5, first_delay: Duration::from_millis(500), timeout: Duration::from_secs(10) }
    }
}

/// The header carrying the signature.
pub const SIGNATURE_HEADER: &str = "x-tollgate-signature";

/// `sha256=` + lowercase hex HMAC-SHA256 of `body` keyed with `secret`: the `X-Tollgate-Signature` value.
pub fn signature(secret: &str, body: &[u8]) -> String {
    // HMAC takes a key of any length, so this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The Standard Webhooks header carrying the delivery id (`RUN_ID:SEQ`, as `X-Tollgate-Delivery`).
pub const STANDARD_ID_HEADER: &str = "webhook-id";
/// The Standard Webhooks header carrying the attempt's time, in whole seconds since the Unix epoch.
pub const STANDARD_TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// The Standard Webhooks header carrying the signature, `v1,BASE64` ([`standard_signature`]).
pub const STANDARD_SIGNATURE_HEADER: &str = "webhook-signature";

/// The prefix of a secret given in the Standard Webhooks form: `whsec_` + the key in base64.
const STANDARD_SECRET_PREFIX: &str = "whsec_";

/// The key of the Standard Webhooks signature for a target's `secret`: for `whsec_BASE64` (the form
/// Standard Webhooks libraries hand out), the bytes BASE64 decodes to (padding optional); for any other
/// secret, its UTF-8 bytes as they are, the same key as `X-Tollgate-Signature`'s. A receiver using a
/// Standard Webhooks library gives it the `whsec_` secret as configured, or `whsec_` + the base64 of a
/// plain secret. `None` for a `whsec_` secret whose rest is not base64.
pub fn standard_key(secret: &str) -> Option<Vec<u8>> {
    match secret.strip_prefix(STANDARD_SECRET_PREFIX) {
        Some(encoded) => STANDARD_SECRET_BASE64.decode(encoded).ok(),
        None => Some(secret.as_bytes().to_vec()),
    }
}

/// Standard base64, its padding optional, as Standard Webhooks libraries read secrets.
const STANDARD_SECRET_BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// `v1,` + base64 (standard, padded) of the HMAC-SHA256 of `{id}.{timestamp}.{body}` keyed with `key`
/// (see [`standard_key`]): the `webhook-signature` value of a delivery.
pub fn standard_signature(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC takes a key of any length, so this cannot fail.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else { return String::new() };
    mac.update(id.as_bytes());
    mac.update(format!(".{timestamp}.").as_bytes());
    mac.update(body);
    format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes()))
}

const QUEUE: usize = 10_000;
const PARALLEL: usize = 16;
/// The reader of the commit log that webhook deliveries hold.
pub(crate) const READER: &str = "webhooks";
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
const MAX_AGE_MS: i64 = 24 * 60 * 60 * 1000;

struct Job {
    target: usize,
    body: Arc<Vec<u8>>,
    kind: &'static str,
    delivery: String,
    /// The deliveries of its page of the log still under way.
    page: Arc<AtomicUsize>,
}

/// The running dispatcher: stop it with [`Dispatcher::stop`].
pub(crate) struct Dispatcher {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Dispatcher {
    /// Stops reading the log, lets deliveries in flight finish for at most `flush`, stores the
    /// position and releases the reader.
    pub(crate) async fn stop(self, flush: Duration) {
        let _ = self.stop.send(());
        let mut task = self.task;
        // The reader bounds its own wait by `flush`; this bounds a store that does not answer.
        if tokio::time::timeout(flush + Duration::from_secs(2), &mut task).await.is_err() {
            tracing::warn!("the webhook dispatcher did not stop in time; undelivered events stay in the log");
            task.abort();
        }
    }
}

/// Starts the dispatcher; `None` when there is nothing to deliver to.
pub(crate) fn spawn(
    runtime: Runtime,
    targets: Vec<WebhookTarget>,
    retry: WebhookRetry,
    metrics: Arc<Metrics>,
    flush: Duration,
) -> Result<Option<Dispatcher>, String> {
    if targets.is_empty() {
        return Ok(None);
    }
    let mut keys = Vec::with_capacity(targets.len());
    for target in &targets {
        reqwest::Url::parse(&target.url).map_err(|e| format!("webhook url `{}` is not a URL: {e}", target.url))?;
        keys.push(standard_key(&target.secret).ok_or_else(|| {
            format!("the secret of webhook `{}` starts with `whsec_` but the rest is not base64", target.url)
        })?);
    }
    let client = reqwest::Client::builder()
        .timeout(retry.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot build the webhook HTTP client: {e}"))?;
    let targets = Arc::new(targets);
    let signer = Signer { keys: Arc::new(keys), clock: runtime.clock().clone() };
    let (queue, jobs) = mpsc::channel(QUEUE);
    let deliveries = tokio::spawn(dispatch(jobs, targets.clone(), signer, client, retry, metrics.clone()));
    let (stop, stopped) = oneshot::channel();
    let reader = Reader {
        notices: runtime.subscribe(),
        runtime,
        targets,
        metrics,
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
    Ok(Some(Dispatcher { stop, task }))
}

/// The holder's side: reads the log, queues deliveries, stores its position.
struct Reader {
    runtime: Runtime,
    notices: broadcast::Receiver<RunNotice>,
    targets: Arc<Vec<WebhookTarget>>,
    metrics: Arc<Metrics>,
    queue: Option<mpsc::Sender<Job>>,
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

impl Reader {
    async fn run(mut self, mut stop: oneshot::Receiver<()>, deliveries: JoinHandle<()>, flush: Duration) {
        let mut holding = false;
        loop {
            match self.take(&mut stop).await {
                Some(true) => {}
                Some(false) => continue,
                None => break,
            }
            holding = true;
            self.metrics.webhook_reader_held(true);
            match self.deliver(&mut stop).await {
                Stopped::Stop => break,
                Stopped::Lost => {
                    holding = false;
                    self.metrics.webhook_reader_held(false);
                    tracing::info!(
                        "another node holds the webhook reader of the commit log now; it delivers from here"
                    );
                }
            }
        }
        // No more reads: let the deliveries in flight end, then store how far they got and let go.
        self.queue = None;
        let mut deliveries = deliveries;
        if tokio::time::timeout(flush, &mut deliveries).await.is_err() {
            tracing::warn!("webhook deliveries still under way at shutdown were stopped; the next holder makes them");
            deliveries.abort();
        }
        if holding {
            self.advance();
            let _ = self.store(true).await;
            if let Err(error) = self.runtime.change_feed().release_reader(READER, self.runtime.node_id()).await {
                tracing::warn!(%error, "cannot release the webhook reader; another node takes it when its hold ends");
            }
            self.metrics.webhook_reader_held(false);
        }
    }

    /// Takes the reader: `Some(true)` once held (positioned where its last holder left it), `Some(false)`
    /// after waiting for another holder, `None` on shutdown.
    async fn take(&mut self, stop: &mut oneshot::Receiver<()>) -> Option<bool> {
        let now = self.runtime.clock().now();
        let until = now + millis(self.runtime.lease_length());
        let wait = match self.runtime.change_feed().hold_reader(READER, self.runtime.node_id(), None, until, now).await
        {
            Ok(ReaderHold::Held { position }) => match self.start(position).await {
                Ok(()) => return Some(true),
                Err(error) => {
                    tracing::warn!(%error, "cannot read the commit log for webhooks; retrying");
                    POLL
                }
            },
            Ok(ReaderHold::Elsewhere { until, .. }) => {
                let left = Duration::from_millis(u64::try_from(until - now).unwrap_or_default());
                left.clamp(Duration::from_millis(50), POLL)
            }
            Err(error) => {
                tracing::warn!(%error, "cannot take the webhook reader of the commit log; retrying");
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
                    tracing::warn!(%error, "the webhook reader's position is unreadable; delivering from now on");
                    self.pending = true;
                    match store.committed(None, 1).await {
                        Ok(end) => self.restart_at(end.next),
                        Err(error) => tracing::warn!(%error, "cannot read the commit log for webhooks; retrying"),
                    }
                    return Read::CaughtUp;
                }
                Err(error) => {
                    self.pending = true;
                    if !std::mem::replace(&mut self.warned, true) {
                        tracing::warn!(%error, "cannot read the commit log for webhooks; retrying");
                    }
                    return Read::CaughtUp;
                }
            };
            for (run_id, error) in &page.skipped {
                tracing::warn!(run = %run_id, %error, "an event in the commit log cannot be read; it is not delivered");
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

    /// Queues an event for every target that lists its kind. Never waits.
    fn offer(&self, run_id: &str, event: &StoredEvent, now: Millis, under_way: &Arc<AtomicUsize>) {
        let Some(queue) = &self.queue else { return };
        let kind = event.kind;
        let expired = too_old(&event.at, now);
        let mut body = None;
        for (i, target) in self.targets.iter().enumerate() {
            if !target.events.contains(&kind) {
                continue;
            }
            if expired {
                self.metrics.webhook(Delivery::Expired);
                continue;
            }
            let body = body
                .get_or_insert_with(|| {
                    Arc::new(
                        serde_json::to_vec(&serde_json::json!({"run_id": run_id, "event": event})).unwrap_or_default(),
                    )
                })
                .clone();
            under_way.fetch_add(1, Ordering::AcqRel);
            let job = Job {
                target: i,
                body,
                kind: kind.as_str(),
                delivery: format!("{run_id}:{}", event.seq),
                page: under_way.clone(),
            };
            self.metrics.webhook_queued(true);
            if queue.try_send(job).is_err() {
                self.metrics.webhook_queued(false);
                under_way.fetch_sub(1, Ordering::AcqRel);
                tracing::warn!(run = %run_id, seq = event.seq, url = %target.url, "webhook queue full; delivery dropped");
                self.metrics.webhook(Delivery::Dropped);
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
        match self.runtime.change_feed().hold_reader(READER, self.runtime.node_id(), Some(&position), until, now).await
        {
            Ok(ReaderHold::Held { .. }) => {
                self.stored = Some(position);
                self.last_store = Some(Instant::now());
                Ok(true)
            }
            Ok(ReaderHold::Elsewhere { .. }) => Err(Lost),
            Err(error) => {
                tracing::warn!(%error, "cannot store the webhook reader's position; retrying");
                Ok(false)
            }
        }
    }
}

/// Another node holds the reader.
struct Lost;

/// Whether an event committed at `at` (RFC 3339, as stored) is too old to deliver at `now`.
fn too_old(at: &str, now: Millis) -> bool {
    chrono::DateTime::parse_from_rfc3339(at).is_ok_and(|at| now.saturating_sub(at.timestamp_millis()) > MAX_AGE_MS)
}

fn millis(duration: Duration) -> Millis {
    Millis::try_from(duration.as_millis()).unwrap_or(Millis::MAX / 2)
}

/// What the Standard Webhooks signature of each attempt takes: each target's key (as [`standard_key`]
/// read it, in the order of the targets) and the clock of the attempt's time.
#[derive(Clone)]
struct Signer {
    keys: Arc<Vec<Vec<u8>>>,
    clock: Arc<dyn Clock>,
}

impl Signer {
    /// The `webhook-timestamp` and `webhook-signature` of an attempt, made now.
    fn sign(&self, job: &Job) -> (String, String) {
        let timestamp = self.clock.now().div_euclid(1000);
        let key = self.keys.get(job.target).map(Vec::as_slice).unwrap_or_default();
        (timestamp.to_string(), standard_signature(key, &job.delivery, timestamp, &job.body))
    }
}

async fn dispatch(
    mut jobs: mpsc::Receiver<Job>,
    targets: Arc<Vec<WebhookTarget>>,
    signer: Signer,
    client: reqwest::Client,
    retry: WebhookRetry,
    metrics: Arc<Metrics>,
) {
    let slots = Arc::new(Semaphore::new(PARALLEL));
    // Dropping the set (when this task is aborted at shutdown) aborts the deliveries in flight, whose
    // pages then never count as done.
    let mut deliveries = JoinSet::new();
    while let Some(job) = jobs.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else { break };
        let (targets, signer, client, metrics) = (targets.clone(), signer.clone(), client.clone(), metrics.clone());
        deliveries.spawn(async move {
            let outcome = deliver(&client, &targets[job.target], &signer, &job, retry).await;
            metrics.webhook(outcome);
            metrics.webhook_queued(false);
            job.page.fetch_sub(1, Ordering::AcqRel);
            drop(slot);
        });
        while deliveries.try_join_next().is_some() {}
    }
    // The queue closed (shutdown): finish what is in flight, retries included.
    while deliveries.join_next().await.is_some() {}
}

async fn deliver(
    client: &reqwest::Client,
    target: &WebhookTarget,
    signer: &Signer,
    job: &Job,
    retry: WebhookRetry,
) -> Delivery {
    let signature = signature(&target.secret, &job.body);
    let mut delay = retry.first_delay;
    for attempt in 1..=retry.attempts.max(1) {
        // Each attempt is signed at its own time, so a receiver's window on the timestamp holds for retries.
        let (timestamp, standard) = signer.sign(job);
        let result = client
            .post(&target.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(SIGNATURE_HEADER, &signature)
            .header("x-tollgate-event", job.kind)
            .header("x-tollgate-delivery", &job.delivery)
            .header(STANDARD_ID_HEADER, &job.delivery)
            .header(STANDARD_TIMESTAMP_HEADER, timestamp)
            .header(STANDARD_SIGNATURE_HEADER, standard)
            .body(job.body.as_ref().clone())
            .send()
            .await;
        let failure = match result {
            Ok(response) if response.status().is_success() => return Delivery::Delivered,
            Ok(response) => format!("answered {}", response.status()),
            Err(e) => e.to_string(),
        };
        tracing::debug!(url = %target.url, delivery = %job.delivery, attempt, %failure, "webhook attempt failed");
        if attempt < retry.attempts {
            tokio::time::sleep(delay).await;
            delay = delay.saturating_mul(2);
        } else {
            tracing::warn!(url = %target.url, delivery = %job.delivery, attempts = attempt, %failure, "webhook not delivered");
        }
    }
    Delivery::Failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_hmac_sha256_hex() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn the_standard_signature_covers_id_timestamp_and_body() {
        // The example of the Standard Webhooks specification (its `webhook-signature` for this message).
        let key = standard_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap_or_else(|| panic!("base64"));
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            standard_signature(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        let other = |id: &str, at: i64| standard_signature(&key, id, at, body);
        assert_ne!(
            other("msg_p5jXN8AQM9LWM0D4loKWxJeK", 1_614_265_330),
            other("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330)
        );
        assert_ne!(
            other("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_331),
            other("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330)
        );
    }

    #[test]
    fn a_plain_secret_is_its_own_key_and_a_whsec_secret_is_base64() {
        assert_eq!(standard_key("hook-secret"), Some(b"hook-secret".to_vec()));
        assert_eq!(standard_key("whsec_aG9vay1zZWNyZXQ="), Some(b"hook-secret".to_vec()));
        assert_eq!(standard_key("whsec_aG9vay1zZWNyZXQ"), Some(b"hook-secret".to_vec()), "padding is optional");
        assert_eq!(standard_key("whsec_not base64!"), None);
    }

    #[test]
    fn an_event_read_more_than_a_day_after_its_commit_is_too_old() {
        let at = "2025-11-29T10:00:00.000Z";
        let committed = 1_764_410_400_000;
        assert!(!too_old(at, committed));
        assert!(!too_old(at, committed + MAX_AGE_MS));
        assert!(too_old(at, committed + MAX_AGE_MS + 1));
        assert!(!too_old("not a time", committed + 10 * MAX_AGE_MS), "a time that cannot be read is delivered");
    }

    #[test]
    fn debug_never_prints_the_secret() {
        let target = WebhookTarget { url: "http://127.0.0.1:9/h".into(), secret: "s3cret".into(), events: Vec::new() };
        assert!(!format!("{target:?}").contains("s3cret"));
    }
}
