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
//! The events come from the store's commit log, through its reader named `webhooks`, which one node at a
//! time holds: the outbox (`outbox.rs`) reads, queues and keeps the position; this module says which
//! deliveries an event asks for and makes them. So every process's commits are delivered, at least
//! once, by whichever node holds the reader; an event read more than a day after its commit is not
//! delivered, and is counted as expired.

use crate::metrics::{Delivery, Metrics};
use crate::outbox::{self, Attempt, Consumer, Dispatcher};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::sync::Arc;
use std::time::Duration;
use tollgate_agent_core::{Clock, EventKind, RunId, StoredEvent};
use tollgate_agent_runtime::Runtime;

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

/// One delivery: an event for one target.
pub(crate) struct Job {
    target: usize,
    body: Arc<Vec<u8>>,
    kind: &'static str,
    delivery: String,
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
    let signer = Signer { keys, clock: runtime.clock().clone() };
    let webhooks = Webhooks { targets, signer, client, retry, metrics };
    let names = outbox::Names { reader: "webhooks", what: "webhook" };
    Ok(Some(outbox::spawn(runtime, webhooks, names, flush)))
}

/// The webhook targets as the outbox's consumer.
struct Webhooks {
    targets: Vec<WebhookTarget>,
    signer: Signer,
    client: reqwest::Client,
    retry: WebhookRetry,
    metrics: Arc<Metrics>,
}

impl Consumer for Webhooks {
    type Job = Job;

    /// A delivery to every target that lists the event's kind.
    fn jobs(&self, run_id: &RunId, event: &StoredEvent, too_old: bool) -> Vec<Job> {
        let kind = event.kind;
        let mut body = None;
        let mut jobs = Vec::new();
        for (target, _) in self.targets.iter().enumerate().filter(|(_, t)| t.events.contains(&kind)) {
            if too_old {
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
            jobs.push(Job { target, body, kind: kind.as_str(), delivery: format!("{run_id}:{}", event.seq) });
        }
        jobs
    }

    async fn deliver(&self, job: &Job) {
        let outcome = deliver(&self.client, &self.targets[job.target], &self.signer, job, self.retry).await;
        self.metrics.webhook(outcome);
    }

    fn dropped(&self, job: &Job) {
        let url = &self.targets[job.target].url;
        tracing::warn!(delivery = %job.delivery, %url, "webhook queue full; delivery dropped");
        self.metrics.webhook(Delivery::Dropped);
    }

    fn reader_held(&self, held: bool) {
        self.metrics.webhook_outbox.held(held);
    }

    fn queued(&self, queued: bool) {
        self.metrics.webhook_outbox.queued(queued);
    }
}

/// What the Standard Webhooks signature of each attempt takes: each target's key (as [`standard_key`]
/// read it, in the order of the targets) and the clock of the attempt's time.
struct Signer {
    keys: Vec<Vec<u8>>,
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

async fn deliver(
    client: &reqwest::Client,
    target: &WebhookTarget,
    signer: &Signer,
    job: &Job,
    retry: WebhookRetry,
) -> Delivery {
    let signature = signature(&target.secret, &job.body);
    let made = outbox::with_retries(retry.attempts, retry.first_delay, |attempt| {
        // Each attempt is signed at its own time, so a receiver's window on the timestamp holds for retries.
        let (timestamp, standard) = signer.sign(job);
        let request = client
            .post(&target.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(SIGNATURE_HEADER, &signature)
            .header("x-tollgate-event", job.kind)
            .header("x-tollgate-delivery", &job.delivery)
            .header(STANDARD_ID_HEADER, &job.delivery)
            .header(STANDARD_TIMESTAMP_HEADER, timestamp)
            .header(STANDARD_SIGNATURE_HEADER, standard)
            .body(job.body.as_ref().clone());
        async move {
            let failure = match request.send().await {
                Ok(response) if response.status().is_success() => return Attempt::Done(()),
                Ok(response) => format!("answered {}", response.status()),
                Err(e) => e.to_string(),
            };
            tracing::debug!(url = %target.url, delivery = %job.delivery, attempt, %failure, "webhook attempt failed");
            Attempt::Failed { failure, retryable: true }
        }
    })
    .await;
    match made {
        Ok(()) => Delivery::Delivered,
        Err((attempts, failure)) => {
            tracing::warn!(url = %target.url, delivery = %job.delivery, attempts, %failure, "webhook not delivered");
            Delivery::Failed
        }
    }
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
    fn debug_never_prints_the_secret() {
        let target = WebhookTarget { url: "http://127.0.0.1:9/h".into(), secret: "s3cret".into(), events: Vec::new() };
        assert!(!format!("{target:?}").contains("s3cret"));
    }
}
