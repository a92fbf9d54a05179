//! Webhooks (`[[webhooks]]` in docs/configuration.md): a POST to each target for each event of a listed kind.
//!
//! The body is `{"run_id": "...", "event": EVENT}`, `EVENT` being the event exactly as
//! `GET /v1/runs/{id}/events` serves it (`seq`, `at`, `kind`, `round`, `data`, `hash`). Headers:
//! `Content-Type: application/json`, `X-Tollgate-Signature: sha256=HEX` (lowercase hex HMAC-SHA256 of
//! the exact body bytes, keyed with the target's secret), `X-Tollgate-Event: KIND`, and
//! `X-Tollgate-Delivery: RUN_ID:SEQ` (stable across retries, so a receiver can drop duplicates).
//!
//! Delivery is at least once and unordered: a non-2xx answer or a network error is retried with
//! exponential backoff; receivers dedupe by `X-Tollgate-Delivery` and order by `event.seq`. It never
//! blocks or fails a run: events are queued (bounded; when the queue is full the delivery is dropped
//! and counted), and deliveries run in background tasks. At shutdown the queue is flushed for a few
//! seconds at most; what is still undelivered then is lost.

use crate::metrics::{Delivery, Metrics};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::{JoinHandle, JoinSet};
use tollgate_agent_core::StoredEvent;

/// One webhook receiver.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookTarget {
    /// Where to POST.
    pub url: String,
    /// The HMAC-SHA256 key for `X-Tollgate-Signature`.
    pub secret: String,
    /// The event kinds to deliver (e.g. `approval_requested`, `run_completed`); `*` means every kind.
    pub events: Vec<String>,
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

const QUEUE: usize = 10_000;
const PARALLEL: usize = 16;

struct Job {
    target: usize,
    body: Arc<Vec<u8>>,
    kind: &'static str,
    delivery: String,
}

/// The queue into the dispatcher.
#[derive(Clone)]
pub(crate) struct Webhooks {
    targets: Arc<Vec<WebhookTarget>>,
    queue: mpsc::Sender<Job>,
    metrics: Arc<Metrics>,
}

impl Webhooks {
    /// Queues an event for every target that lists its kind. Never waits.
    pub(crate) fn offer(&self, run_id: &str, event: &StoredEvent) {
        let kind = event.kind.as_str();
        let mut body = None;
        for (i, target) in self.targets.iter().enumerate() {
            if !target.events.iter().any(|e| e == kind || e == "*") {
                continue;
            }
            let body = body
                .get_or_insert_with(|| {
                    Arc::new(
                        serde_json::to_vec(&serde_json::json!({"run_id": run_id, "event": event})).unwrap_or_default(),
                    )
                })
                .clone();
            let job = Job { target: i, body, kind, delivery: format!("{run_id}:{}", event.seq) };
            if self.queue.try_send(job).is_err() {
                tracing::warn!(run = %run_id, seq = event.seq, url = %target.url, "webhook queue full; delivery dropped");
                self.metrics.webhook(Delivery::Dropped);
            }
        }
    }
}

/// Starts the dispatcher; `None` when there is nothing to deliver to.
pub(crate) fn spawn(
    targets: Vec<WebhookTarget>,
    retry: WebhookRetry,
    metrics: Arc<Metrics>,
) -> Result<Option<(Webhooks, JoinHandle<()>)>, String> {
    if targets.is_empty() {
        return Ok(None);
    }
    for target in &targets {
        reqwest::Url::parse(&target.url).map_err(|e| format!("webhook url `{}` is not a URL: {e}", target.url))?;
    }
    let client = reqwest::Client::builder()
        .timeout(retry.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot build the webhook HTTP client: {e}"))?;
    let targets = Arc::new(targets);
    let (queue, jobs) = mpsc::channel(QUEUE);
    let handle = tokio::spawn(dispatch(jobs, targets.clone(), client, retry, metrics.clone()));
    Ok(Some((Webhooks { targets, queue, metrics }, handle)))
}

async fn dispatch(
    mut jobs: mpsc::Receiver<Job>,
    targets: Arc<Vec<WebhookTarget>>,
    client: reqwest::Client,
    retry: WebhookRetry,
    metrics: Arc<Metrics>,
) {
    let slots = Arc::new(Semaphore::new(PARALLEL));
    // Dropping the set (when this task is aborted at shutdown) aborts the deliveries in flight.
    let mut deliveries = JoinSet::new();
    while let Some(job) = jobs.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else { break };
        let (targets, client, metrics) = (targets.clone(), client.clone(), metrics.clone());
        deliveries.spawn(async move {
            let outcome = deliver(&client, &targets[job.target], &job, retry).await;
            metrics.webhook(outcome);
            drop(slot);
        });
        while deliveries.try_join_next().is_some() {}
    }
    // The queue closed (shutdown): finish what is in flight, retries included.
    while deliveries.join_next().await.is_some() {}
}

async fn deliver(client: &reqwest::Client, target: &WebhookTarget, job: &Job, retry: WebhookRetry) -> Delivery {
    let signature = signature(&target.secret, &job.body);
    let mut delay = retry.first_delay;
    for attempt in 1..=retry.attempts.max(1) {
        let result = client
            .post(&target.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(SIGNATURE_HEADER, &signature)
            .header("x-tollgate-event", job.kind)
            .header("x-tollgate-delivery", &job.delivery)
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
    fn debug_never_prints_the_secret() {
        let target = WebhookTarget { url: "http://127.0.0.1:9/h".into(), secret: "s3cret".into(), events: vec![] };
        assert!(!format!("{target:?}").contains("s3cret"));
    }
}
