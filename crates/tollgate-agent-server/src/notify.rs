//! Notifications (`[[notify]]`, V2.md section 4; docs/notifications.md): a message to Slack or by mail when
//! a run starts waiting at the gate, and again when its wait is escalated, with a signed Approve and
//! Deny link for each held call (`approve.rs` serves them).
//!
//! What is sent, and to whom:
//! - an `approval_requested` event goes to every notifier that is told of requests for the run's agent
//!   ([`Notifier::agents`]), once the run is read (as `GET /v1/runs/{id}` shows it: its held calls with
//!   their previews). A run no longer waiting on that turn by then is not announced (outcome `skipped`).
//! - an `approval_escalated` event goes to the notifiers it names (`notified`: the runtime's sweep chose
//!   them), whatever their agents; a name no notifier of this process has is logged.
//!
//! Each link binds the run, the held turn's digest, the call, the action, the notifier's actor and an
//! expiry (the run's approval deadline, else [`DEFAULT_LIFETIME`](tollgate_agent_notify::link::DEFAULT_LIFETIME)
//! after sending). The review link is the run's page in the playground, `{public_url}/#/runs/{id}`.
//!
//! Delivery is the outbox's (`outbox.rs`): from the store's commit log, through its reader named
//! `notifications`, which one node at a time holds — at least once, never blocking or failing a run. A
//! send that fails in a way that may pass (a timeout, a refused connection, HTTP 5xx or 429, an SMTP 4xx
//! reply) is tried again with exponential backoff ([`NotifyRetry`]); one that will fail the same way
//! again is not. Every outcome is counted in `tollgate_notifications_total{notifier,outcome}`.

use crate::metrics::{Metrics, Notified};
use crate::outbox::{self, Attempt, Consumer};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use tollgate_agent_core::{Actor, EventKind, Millis, RunId, RunStatus, StoredEvent};
use tollgate_agent_notify::link::{self, LinkAction, LinkClaims};
use tollgate_agent_notify::message::{Notification, NotifyCall, NotifyEvent};
use tollgate_agent_notify::transport::Transport;
use tollgate_agent_protocol::event_data as data;
use tollgate_agent_protocol::{Call, Run};
use tollgate_agent_runtime::view::run_view;
use tollgate_agent_runtime::{ReadError, Runtime};

/// One notifier (`[[notify]]`): where its messages go, whom its links decide as, and which agents' runs
/// it is told of when they start waiting.
#[derive(Clone, Debug)]
pub struct Notifier {
    /// Its name (`name`): in its links, in `escalate_to` and in the metrics' `notifier` label.
    pub name: String,
    /// How a message leaves: a Slack incoming webhook or mail over SMTP.
    pub transport: Transport,
    /// Whom a decision made through its links is recorded as (`as`). With tokens configured, the name of
    /// a token with the `approver` role (or `admin`).
    pub actor: Actor,
    /// The agents (by name) whose runs it is told of when they start waiting: those its `agents` globs
    /// cover, or none when its `on` leaves out `approval_requested`. (Escalations reach the notifiers
    /// their event names, whatever this says.)
    pub agents: Vec<String>,
}

/// How a notification is tried again after a failure that may pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotifyRetry {
    /// Attempts in all, the first included (at least one is made).
    pub attempts: u32,
    /// The wait before the second attempt; it doubles for each later one.
    pub first_delay: Duration,
}

impl Default for NotifyRetry {
    /// Five attempts, 1, 2, 4 and 8 s apart: with the 10 s a transport gives one attempt, three attempts
    /// are made within 60 s.
    fn default() -> Self {
        NotifyRetry { attempts: 5, first_delay: Duration::from_secs(1) }
    }
}

/// The key signed links are made and checked with (`[server] link_secret`): at least
/// [`LinkSecret::MIN_LEN`] bytes. Its `Debug` shows nothing of it.
#[derive(Clone)]
pub struct LinkSecret(Arc<[u8]>);

/// A link secret shorter than [`LinkSecret::MIN_LEN`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a link secret must have at least {min} bytes, not {0}", min = LinkSecret::MIN_LEN)]
pub struct ShortLinkSecret(pub usize);

impl LinkSecret {
    /// The fewest bytes a link secret has (HMAC-SHA256's block of security).
    pub const MIN_LEN: usize = 32;

    /// The secret `bytes`, refused when shorter than [`LinkSecret::MIN_LEN`].
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<LinkSecret, ShortLinkSecret> {
        let bytes = bytes.into();
        if bytes.len() < Self::MIN_LEN {
            return Err(ShortLinkSecret(bytes.len()));
        }
        Ok(LinkSecret(Arc::from(bytes)))
    }

    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for LinkSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkSecret(<redacted>)")
    }
}

/// What signed links take: the secret and the URL people reach the server at.
pub(crate) struct Links {
    secret: LinkSecret,
    /// `public_url`, without a trailing `/`.
    base: String,
}

impl Links {
    pub(crate) fn new(secret: LinkSecret, public_url: &str) -> Links {
        Links { secret, base: public_url.trim_end_matches('/').to_owned() }
    }

    /// The claims of `token` at `now`, or why it gives none.
    pub(crate) fn verify(&self, token: &str, now: Millis) -> Result<LinkClaims, link::LinkError> {
        link::verify(self.secret.bytes(), token, now)
    }

    /// The page of a signed link for `claims`.
    fn url(&self, claims: &LinkClaims) -> String {
        link::link_url(&self.base, &link::sign(self.secret.bytes(), claims))
    }

    /// The run's page in the playground.
    pub(crate) fn review_url(&self, run: &RunId) -> String {
        format!("{}/#/runs/{run}", self.base)
    }
}

/// Why a notification is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Occasion {
    /// The run started waiting.
    Requested,
    /// The run still waits, after `after`.
    Escalated { after: Duration },
}

/// One notification job: one event, to the notifiers it may go to.
pub(crate) struct Job {
    run_id: RunId,
    /// The held turn the event is about.
    digest: String,
    /// When the event was committed (milliseconds since the Unix epoch; 0 when unreadable).
    at: Millis,
    occasion: Occasion,
    /// The notifiers (indexes) it may go to: for a request, every notifier told of any agent's requests
    /// (the run's agent picks among them); for an escalation, those its event names.
    notifiers: Vec<usize>,
    /// Read more than a day after its commit: counted as expired, not sent.
    too_old: bool,
}

/// Starts sending notifications; `None` when there are no notifiers.
pub(crate) fn spawn(
    runtime: Runtime,
    notifiers: Vec<Notifier>,
    links: Arc<Links>,
    retry: NotifyRetry,
    metrics: Arc<Metrics>,
    flush: Duration,
) -> Option<outbox::Dispatcher> {
    if notifiers.is_empty() {
        return None;
    }
    metrics.notifiers(notifiers.iter().map(|n| n.name.as_str()));
    let engine = Notifications { runtime: runtime.clone(), notifiers, links, retry, metrics };
    let names = outbox::Names { reader: "notifications", what: "notification" };
    Some(outbox::spawn(runtime, engine, names, flush))
}

/// The notifiers as the outbox's consumer.
struct Notifications {
    runtime: Runtime,
    notifiers: Vec<Notifier>,
    links: Arc<Links>,
    retry: NotifyRetry,
    metrics: Arc<Metrics>,
}

impl Notifications {
    /// An `approval_requested` event's turn, for every notifier told of any agent's requests.
    fn requested(&self, data: &serde_json::Value) -> Option<(String, Occasion, Vec<usize>)> {
        let requested = data::ApprovalRequested::deserialize(data).ok()?;
        let notifiers = self.notifiers.iter().enumerate().filter(|(_, n)| !n.agents.is_empty()).map(|(i, _)| i);
        Some((requested.turn_digest, Occasion::Requested, notifiers.collect()))
    }

    /// An `approval_escalated` event's turn and wait, for the notifiers it names (a name this process has
    /// no notifier for is logged).
    fn escalated(&self, run_id: &RunId, data: &serde_json::Value) -> Option<(String, Occasion, Vec<usize>)> {
        let escalated = data::ApprovalEscalated::deserialize(data).ok()?;
        let mut notifiers = Vec::new();
        for name in &escalated.notified {
            match self.notifiers.iter().position(|n| &n.name == name) {
                Some(index) if !notifiers.contains(&index) => notifiers.push(index),
                Some(_) => {}
                None => tracing::warn!(
                    run = %run_id, notifier = %name,
                    "an escalation names a notifier this process does not have; it is not sent there"
                ),
            }
        }
        let after = tollgate_agent_protocol::parse_duration(&escalated.after).unwrap_or_else(|error| {
            tracing::warn!(run = %run_id, %error, "an escalation's `after` does not read");
            Duration::ZERO
        });
        Some((escalated.turn_digest, Occasion::Escalated { after }, notifiers))
    }

    fn count(&self, index: usize, outcome: Notified) {
        if let Some(notifier) = self.notifiers.get(index) {
            self.metrics.notified(&notifier.name, outcome);
        }
    }

    /// The run as `GET /v1/runs/{id}` shows it, read with the notifications' retries; `None` (counted
    /// and logged) when it is gone or cannot be read.
    async fn read_run(&self, job: &Job) -> Option<Run> {
        let read = outbox::with_retries(self.retry.attempts, self.retry.first_delay, |_| async {
            match self.runtime.get(&job.run_id).await {
                Ok(run) => Attempt::Done(Some(run_view(&run))),
                Err(ReadError::NotFound(_)) => Attempt::Done(None),
                Err(ReadError::Store(error)) => {
                    Attempt::Failed { failure: error.to_string(), retryable: error.is_retryable() }
                }
            }
        })
        .await;
        let found = match read {
            Ok(found) => found,
            Err((attempts, failure)) => {
                tracing::warn!(run = %job.run_id, attempts, %failure, "cannot read the run to notify of it");
                for index in &job.notifiers {
                    self.count(*index, Notified::Failed);
                }
                return None;
            }
        };
        if found.is_none() {
            tracing::debug!(run = %job.run_id, "the run no longer exists; nothing sent");
            if let Occasion::Escalated { .. } = job.occasion {
                for index in &job.notifiers {
                    self.count(*index, Notified::Skipped);
                }
            }
        }
        found
    }

    /// When the run started waiting on the job's turn: the time of its `approval_requested` with that
    /// digest, read from its log.
    async fn requested_at(&self, job: &Job) -> Option<Millis> {
        let events = self.runtime.all_events(&job.run_id, 0).await.ok()?;
        events
            .iter()
            .rev()
            .filter(|e| e.kind == EventKind::ApprovalRequested)
            .find(|e| data::ApprovalRequested::deserialize(&e.data).is_ok_and(|r| r.turn_digest == job.digest))
            .and_then(|e| event_millis(&e.at))
    }

    /// Sends the notification of `job` through notifier `index`, with its retries, and counts the outcome.
    async fn send(&self, index: usize, job: &Job, run: &Run, calls: &[&Call], waiting_since: Millis) {
        let notifier = &self.notifiers[index];
        let notification = self.notification(notifier, job, run, calls, waiting_since);
        let sent = outbox::with_retries(self.retry.attempts, self.retry.first_delay, |attempt| {
            let notification = &notification;
            async move {
                match notifier.transport.send(notification).await {
                    Ok(()) => Attempt::Done(()),
                    Err(error) => {
                        tracing::debug!(notifier = %notifier.name, run = %job.run_id, attempt, %error, "notification attempt failed");
                        Attempt::Failed { failure: error.message, retryable: error.retryable }
                    }
                }
            }
        })
        .await;
        match sent {
            Ok(()) => self.count(index, Notified::Sent),
            Err((attempts, failure)) => {
                tracing::warn!(notifier = %notifier.name, run = %job.run_id, attempts, %failure, "notification not sent");
                self.count(index, Notified::Failed);
            }
        }
    }

    /// The notification `notifier` sends for `job`: the run, and each call waiting for a decision with
    /// its Approve and Deny links, signed for the notifier's actor.
    fn notification(
        &self,
        notifier: &Notifier,
        job: &Job,
        run: &Run,
        calls: &[&Call],
        waiting_since: Millis,
    ) -> Notification {
        let now = self.runtime.clock().now();
        let deadline = run.pending.as_ref().and_then(|p| p.expires_at.as_deref()).and_then(event_millis);
        let expires_at = link::expires_at(now, deadline);
        let link = |call: &Call, action: LinkAction| {
            self.links.url(&LinkClaims {
                run: run.id.clone(),
                digest: job.digest.clone(),
                call: call.call_id.clone(),
                action,
                actor: notifier.actor.clone(),
                expires_at,
                notifier: notifier.name.clone(),
            })
        };
        Notification {
            event: match job.occasion {
                Occasion::Requested => NotifyEvent::Requested,
                Occasion::Escalated { after } => NotifyEvent::Escalated { after },
            },
            agent: run.agent.clone(),
            run_id: run.id.clone(),
            input: run.input.clone(),
            review_url: self.links.review_url(&run.id),
            calls: calls
                .iter()
                .map(|call| NotifyCall {
                    call_id: call.call_id.clone(),
                    tool: call.tool.clone(),
                    preview: call.preview.clone().unwrap_or_default(),
                    approve_url: link(call, LinkAction::Approve),
                    deny_url: link(call, LinkAction::Deny),
                })
                .collect(),
            waiting_since,
        }
    }
}

impl Consumer for Notifications {
    type Job = Job;

    fn jobs(&self, run_id: &RunId, event: &StoredEvent, too_old: bool) -> Vec<Job> {
        let read = match event.kind {
            EventKind::ApprovalRequested => self.requested(&event.data),
            EventKind::ApprovalEscalated => self.escalated(run_id, &event.data),
            _ => return Vec::new(),
        };
        let Some((digest, occasion, notifiers)) = read else {
            tracing::warn!(run = %run_id, seq = event.seq, kind = %event.kind.as_str(), "the event does not read; nothing sent");
            return Vec::new();
        };
        if too_old && matches!(occasion, Occasion::Escalated { .. }) {
            // Those named are known without the run (a request's notifiers depend on its agent: read then).
            for index in notifiers {
                self.count(index, Notified::Expired);
            }
            return Vec::new();
        }
        if notifiers.is_empty() {
            return Vec::new();
        }
        let at = event_millis(&event.at).unwrap_or_default();
        vec![Job { run_id: run_id.clone(), digest, at, occasion, notifiers, too_old }]
    }

    async fn deliver(&self, job: &Job) {
        let Some(run) = self.read_run(job).await else { return };
        let notifiers: Vec<usize> = match job.occasion {
            Occasion::Requested => {
                job.notifiers.iter().copied().filter(|i| self.notifiers[*i].agents.contains(&run.agent)).collect()
            }
            Occasion::Escalated { .. } => job.notifiers.clone(),
        };
        if job.too_old {
            for index in notifiers {
                self.count(index, Notified::Expired);
            }
            return;
        }
        let waiting = run.status == RunStatus::WaitingForApproval
            && run.pending.as_ref().is_some_and(|p| p.turn_digest == job.digest);
        let calls: Vec<&Call> = run.awaiting_decision().collect();
        if !waiting || calls.is_empty() {
            tracing::debug!(run = %job.run_id, "the run no longer waits on that turn; nothing sent");
            for index in notifiers {
                self.count(index, Notified::Skipped);
            }
            return;
        }
        let waiting_since = match job.occasion {
            Occasion::Requested => job.at,
            Occasion::Escalated { after } => {
                self.requested_at(job).await.unwrap_or_else(|| job.at - outbox::millis(after))
            }
        };
        let sends = notifiers.into_iter().map(|index| self.send(index, job, &run, &calls, waiting_since));
        futures_util::future::join_all(sends).await;
    }

    fn dropped(&self, job: &Job) {
        tracing::warn!(run = %job.run_id, "notification queue full; notification dropped");
        for index in &job.notifiers {
            self.count(*index, Notified::Dropped);
        }
    }

    fn reader_held(&self, held: bool) {
        self.metrics.notification_outbox.held(held);
    }

    fn queued(&self, queued: bool) {
        self.metrics.notification_outbox.queued(queued);
    }
}

/// An RFC 3339 time as milliseconds since the Unix epoch.
pub(crate) fn event_millis(at: &str) -> Option<Millis> {
    chrono::DateTime::parse_from_rfc3339(at).ok().map(|t| t.timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_secret_is_at_least_32_bytes_and_never_shown() {
        assert_eq!(LinkSecret::new(vec![7; 31]).err(), Some(ShortLinkSecret(31)));
        let secret = LinkSecret::new(b"0123456789abcdef0123456789abcdef".to_vec());
        let shown = format!("{secret:?}");
        assert!(secret.is_ok() && !shown.contains("0123"), "{shown}");
    }

    #[test]
    fn links_and_review_urls_start_with_the_public_url() -> Result<(), ShortLinkSecret> {
        let links = Links::new(LinkSecret::new(vec![1; 32])?, "https://tollgate.example.com/");
        let run = RunId::new("0193b0c6-0000-7000-8000-000000000001");
        assert_eq!(links.review_url(&run), "https://tollgate.example.com/#/runs/0193b0c6-0000-7000-8000-000000000001");
        let claims = LinkClaims {
            run: run.clone(),
            digest: "sha256:ab".into(),
            call: "c1".into(),
            action: LinkAction::Deny,
            actor: "alice".into(),
            expires_at: 2_000,
            notifier: "ops".into(),
        };
        let url = links.url(&claims);
        let token = url.strip_prefix("https://tollgate.example.com/approve/").unwrap_or_default();
        assert_eq!(links.verify(token, 1_000), Ok(claims));
        Ok(())
    }
}
