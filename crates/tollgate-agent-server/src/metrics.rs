//! `/metrics` in the Prometheus text format.
//!
//! - `tollgate_runs{status}`, `tollgate_waiting_runs` and `tollgate_queue_depth` (queued runs, the
//!   queue every node shares): gauges counted by the store (one `GROUP BY status` query) when scraped,
//!   cached for a few seconds; `tollgate_queue_oldest_seconds` (how long the oldest queued run has
//!   waited, 0 when none: the first entry of the queue's index) with them.
//! - `tollgate_workers`, `tollgate_workers_busy`, `tollgate_workers_accepting`, `tollgate_claims_total`
//!   and the `tollgate_claim_latency_seconds` histogram (queued → claimed): this process's worker pool.
//! - `tollgate_decisions_total{action}`, `tollgate_events_total{kind}`, and the model-call and
//!   tool-call latency histograms: counted from the events this process commits, as the event feed
//!   (`feed.rs`) reads them; they start at zero with the process, as counters do.
//! - `tollgate_webhook_deliveries_total{outcome}`: webhook deliveries that succeeded, failed after every
//!   retry, were dropped (one page of the commit log held more than the queue had room for), or
//!   expired (read more than a day after their commit).
//! - `tollgate_webhook_reader_held` (1 while this process holds the commit log's `webhooks` reader and
//!   so delivers every node's webhooks) and `tollgate_webhook_queue_depth` (deliveries queued or under way).
//! - `tollgate_notifications_total{notifier,outcome}`: notifications (`notify.rs`) by notifier and outcome:
//!   `sent`, `failed` (after every retry, or a failure no retry mends), `skipped` (the run no longer waited
//!   on that turn, or no longer exists, when it was to be sent), `expired` (read more than a day after its
//!   commit), `dropped` (one page of the commit log held more than the queue had room for). Every
//!   configured notifier's series are there from the start, at zero.
//! - `tollgate_notification_reader_held` and `tollgate_notification_queue_depth`: as the webhook gauges,
//!   for the commit log's `notifications` reader.
//! - `tollgate_approval_wait_seconds` (histogram): how long each held turn this process resumed had waited,
//!   from its `approval_requested` to the `run_resumed` of the decision that completed it (see `feed.rs`).
//! - `tollgate_event_feed_store_reads_total`: reads of events the feed made from the store, for commits
//!   it was not handed by the store's commit tap (zero while it keeps up with a store that taps).
//! - `tollgate_connections_open`, `tollgate_connections_refused_total`,
//!   `tollgate_connections_timed_out_total{timeout}` (`idle`, `header_read`), `tollgate_accept_errors_total`,
//!   `tollgate_sse_streams_open` and `tollgate_sse_streams_refused_total`: the limits of `connections.rs`
//!   and the live-event streams, counted as they happen.
//! - `tollgate_store_outage_waits_total`: waits of this process's drives for a store that could not take
//!   their progress (docs/nodes.md, "When the store fails").
//! - On PostgreSQL: `tollgate_store_host{host}` (1 for the host of `[store] url` in use, 0 for the
//!   others), `tollgate_store_host_moves_total` (moves to another host: failovers this process followed)
//!   and `tollgate_store_host_none_would_do_total` (looks for the host to use that found none would do).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};
use tollgate_agent_core::RunStatus;
use tollgate_agent_runtime::Runtime;

/// How long run counts are reused between scrapes.
const COUNT_TTL: Duration = Duration::from_secs(5);

/// Histogram bucket bounds, seconds.
const BUCKETS: [f64; 14] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0];

/// The bucket bounds of `tollgate_approval_wait_seconds`, seconds: from a second to three days (people
/// answer in seconds at a desk, in hours by mail).
const WAIT_BUCKETS: [f64; 16] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14_400.0, 28_800.0, 86_400.0, 172_800.0,
    259_200.0,
];

/// A Prometheus histogram of durations.
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    count: u64,
    sum_secs: f64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::with_bounds(&BUCKETS)
    }
}

impl Histogram {
    fn with_bounds(bounds: &'static [f64]) -> Self {
        Histogram { bounds, counts: vec![0; bounds.len()], count: 0, sum_secs: 0.0 }
    }

    fn observe(&mut self, secs: f64) {
        for (bound, count) in self.bounds.iter().zip(self.counts.iter_mut()) {
            if secs <= *bound {
                *count += 1;
            }
        }
        self.count += 1;
        self.sum_secs += secs;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (bound, count) in self.bounds.iter().zip(self.counts.iter()) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", self.count);
        let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum_secs);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

struct Observed {
    decisions: BTreeMap<String, u64>,
    events: BTreeMap<&'static str, u64>,
    model_calls: Histogram,
    tool_calls: BTreeMap<String, Histogram>,
    approval_waits: Histogram,
    /// Notifications by notifier, one count per [`Notified`] outcome (in [`Notified::ALL`]'s order).
    notifications: BTreeMap<String, [u64; Notified::ALL.len()]>,
}

impl Default for Observed {
    fn default() -> Self {
        Observed {
            decisions: BTreeMap::new(),
            events: BTreeMap::new(),
            model_calls: Histogram::default(),
            tool_calls: BTreeMap::new(),
            approval_waits: Histogram::with_bounds(&WAIT_BUCKETS),
            notifications: BTreeMap::new(),
        }
    }
}

/// What one notification to one notifier came to (`tollgate_notifications_total{outcome}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Notified {
    /// Delivered.
    Sent,
    /// Not delivered: failed after every retry, or in a way no retry mends.
    Failed,
    /// Not sent: the run no longer waited on that turn (or no longer existed) by then.
    Skipped,
    /// Not sent: its event was read more than a day after its commit.
    Expired,
    /// Not sent: the queue had no room.
    Dropped,
}

impl Notified {
    /// Every outcome, in the order the exposition lists them.
    const ALL: [Notified; 5] =
        [Notified::Sent, Notified::Failed, Notified::Skipped, Notified::Expired, Notified::Dropped];

    /// The `outcome` label.
    fn as_str(self) -> &'static str {
        match self {
            Notified::Sent => "sent",
            Notified::Failed => "failed",
            Notified::Skipped => "skipped",
            Notified::Expired => "expired",
            Notified::Dropped => "dropped",
        }
    }
}

/// What a webhook delivery came to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Delivery {
    Delivered,
    Failed,
    Dropped,
    /// Not tried: the event was committed more than a day before the dispatcher read it.
    Expired,
}

/// An outbox's gauges (`outbox.rs`): 1 while this process holds its reader of the commit log, and its
/// deliveries queued or under way.
#[derive(Default)]
pub(crate) struct OutboxGauges {
    held: AtomicU64,
    queue: AtomicU64,
}

impl OutboxGauges {
    /// `tollgate_{kind}_reader_held` and `tollgate_{kind}_queue_depth`: of the reader named `reader`, whose
    /// holder `acts` (delivers, sends) the `reader` of every node; its `deliveries` under way.
    fn render(&self, out: &mut String, kind: &str, reader: &str, acts: &str, deliveries: &str) {
        let help = format!(
            "1 while this process holds the commit log's {reader} reader (it {acts} the {reader} of every node)."
        );
        render_one(out, &format!("tollgate_{kind}_reader_held"), "gauge", &help, self.held.load(Ordering::Relaxed));
        let help = format!("{deliveries} queued or under way in this process.");
        render_one(out, &format!("tollgate_{kind}_queue_depth"), "gauge", &help, self.queue.load(Ordering::Relaxed));
    }

    /// Whether this process holds the reader now.
    pub(crate) fn held(&self, held: bool) {
        self.held.store(u64::from(held), Ordering::Relaxed);
    }

    /// A delivery was queued (`true`) or has ended (`false`).
    pub(crate) fn queued(&self, queued: bool) {
        if queued {
            self.queue.fetch_add(1, Ordering::Relaxed);
        } else {
            self.queue.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The server's counters.
#[derive(Default)]
pub(crate) struct Metrics {
    observed: Mutex<Observed>,
    delivered: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    expired: AtomicU64,
    /// The webhooks' outbox: whether this process holds the commit log's `webhooks` reader (it delivers
    /// every node's webhooks), and the deliveries queued or under way.
    pub(crate) webhook_outbox: OutboxGauges,
    /// The same for notifications and the `notifications` reader.
    pub(crate) notification_outbox: OutboxGauges,
    feed_reads: AtomicU64,
    counts: tokio::sync::Mutex<Option<(Instant, QueueState)>>,
    connections_open: AtomicU64,
    connections_refused: AtomicU64,
    idle_timeouts: AtomicU64,
    header_read_timeouts: AtomicU64,
    accept_errors: AtomicU64,
    streams_open: AtomicU64,
    streams_refused: AtomicU64,
}

/// How many runs have each status.
type StatusCounts = Vec<(RunStatus, u64)>;

/// The runs counted by status, and how long the oldest queued run has waited (none queued: `None`).
type QueueState = (StatusCounts, Option<Duration>);

impl Metrics {
    fn observed(&self) -> std::sync::MutexGuard<'_, Observed> {
        self.observed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn event(&self, kind: tollgate_agent_core::EventKind) {
        *self.observed().events.entry(kind.as_str()).or_default() += 1;
    }

    pub(crate) fn decision(&self, action: &str) {
        *self.observed().decisions.entry(action.to_owned()).or_default() += 1;
    }

    pub(crate) fn model_call(&self, secs: f64) {
        self.observed().model_calls.observe(secs);
    }

    pub(crate) fn tool_call(&self, tool: &str, secs: f64) {
        self.observed().tool_calls.entry(tool.to_owned()).or_default().observe(secs);
    }

    pub(crate) fn webhook(&self, outcome: Delivery) {
        let counter = match outcome {
            Delivery::Delivered => &self.delivered,
            Delivery::Failed => &self.failed,
            Delivery::Dropped => &self.dropped,
            Delivery::Expired => &self.expired,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Lists the configured notifiers, so that their series are exposed (at zero) before anything is sent.
    pub(crate) fn notifiers<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let mut observed = self.observed();
        for name in names {
            observed.notifications.entry(name.to_owned()).or_default();
        }
    }

    /// One notification to `notifier` came to `outcome`.
    pub(crate) fn notified(&self, notifier: &str, outcome: Notified) {
        let index = Notified::ALL.iter().position(|o| *o == outcome).unwrap_or_default();
        self.observed().notifications.entry(notifier.to_owned()).or_default()[index] += 1;
    }

    /// A held turn waited `secs` from its `approval_requested` to the `run_resumed` that completed it.
    pub(crate) fn approval_wait(&self, secs: f64) {
        self.observed().approval_waits.observe(secs);
    }

    /// The event feed read events from the store.
    pub(crate) fn feed_read(&self) {
        self.feed_reads.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn connection_opened(&self) {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn connection_timed_out(&self, timeout: crate::connections::Timeout) {
        let counter = match timeout {
            crate::connections::Timeout::Idle => &self.idle_timeouts,
            crate::connections::Timeout::HeaderRead => &self.header_read_timeouts,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn accept_error(&self) {
        self.accept_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stream_opened(&self) {
        self.streams_open.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stream_closed(&self) {
        self.streams_open.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn stream_refused(&self) {
        self.streams_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Runs per status and the queue's oldest wait, read from the store, cached briefly.
    async fn run_counts(&self, runtime: &Runtime) -> Result<QueueState, tollgate_agent_core::StoreError> {
        let mut cache = self.counts.lock().await;
        if let Some((at, state)) = cache.as_ref()
            && at.elapsed() < COUNT_TTL
        {
            return Ok(state.clone());
        }
        let state = (runtime.count_by_status().await?, runtime.oldest_queued_wait().await?);
        *cache = Some((Instant::now(), state.clone()));
        Ok(state)
    }

    /// The whole exposition.
    pub(crate) async fn render(&self, runtime: &Runtime) -> Result<String, tollgate_agent_core::StoreError> {
        let (counts, oldest_wait) = self.run_counts(runtime).await?;
        let mut out = String::with_capacity(4096);
        out.push_str("# HELP tollgate_runs Runs in the store by status.\n");
        out.push_str("# TYPE tollgate_runs gauge\n");
        for (status, n) in &counts {
            let _ = writeln!(out, "tollgate_runs{{status=\"{status}\"}} {n}");
        }
        let waiting = counts.iter().find(|(s, _)| *s == RunStatus::WaitingForApproval).map_or(0, |(_, n)| *n);
        out.push_str("# HELP tollgate_waiting_runs Runs waiting for approval.\n");
        out.push_str("# TYPE tollgate_waiting_runs gauge\n");
        let _ = writeln!(out, "tollgate_waiting_runs {waiting}");
        let queued = counts.iter().find(|(s, _)| *s == RunStatus::Queued).map_or(0, |(_, n)| *n);
        render_workers(&mut out, &runtime.workers(), queued);
        let oldest = oldest_wait.map_or(0.0, |wait| wait.as_secs_f64());
        out.push_str(
            "# HELP tollgate_queue_oldest_seconds How long the oldest queued run has waited for a worker of any node (0 when none is queued).\n",
        );
        out.push_str("# TYPE tollgate_queue_oldest_seconds gauge\n");
        let _ = writeln!(out, "tollgate_queue_oldest_seconds {oldest}");
        render_one(
            &mut out,
            "tollgate_store_outage_waits_total",
            "counter",
            "Waits of this process's runs for a store that could not take their progress (full, read-only, unreachable); each run goes on once the store takes writes.",
            runtime.outage_waits(),
        );
        if let Some(hosts) = runtime.change_feed().hosts() {
            render_store_hosts(&mut out, &hosts);
        }

        let observed = self.observed();
        out.push_str("# HELP tollgate_decisions_total Decisions recorded by this process, by action.\n");
        out.push_str("# TYPE tollgate_decisions_total counter\n");
        for action in ["approve", "edit", "deny", "respond"] {
            let n = observed.decisions.get(action).copied().unwrap_or(0);
            let _ = writeln!(out, "tollgate_decisions_total{{action=\"{action}\"}} {n}");
        }
        out.push_str("# HELP tollgate_events_total Events committed by this process, by kind.\n");
        out.push_str("# TYPE tollgate_events_total counter\n");
        for kind in tollgate_agent_core::EventKind::ALL {
            let n = observed.events.get(kind.as_str()).copied().unwrap_or(0);
            let _ = writeln!(out, "tollgate_events_total{{kind=\"{}\"}} {n}", kind.as_str());
        }
        out.push_str(
            "# HELP tollgate_model_call_duration_seconds Model call latency (model_request to model_response).\n",
        );
        out.push_str("# TYPE tollgate_model_call_duration_seconds histogram\n");
        observed.model_calls.render(&mut out, "tollgate_model_call_duration_seconds", "");
        out.push_str(
            "# HELP tollgate_tool_call_duration_seconds Tool call latency (tool_started to tool_finished), by tool.\n",
        );
        out.push_str("# TYPE tollgate_tool_call_duration_seconds histogram\n");
        for (tool, histogram) in &observed.tool_calls {
            histogram.render(&mut out, "tollgate_tool_call_duration_seconds", &format!("tool=\"{}\"", escape(tool)));
        }
        out.push_str(
            "# HELP tollgate_approval_wait_seconds How long held turns this process resumed had waited (approval_requested to the run_resumed of the completing decision).\n",
        );
        out.push_str("# TYPE tollgate_approval_wait_seconds histogram\n");
        observed.approval_waits.render(&mut out, "tollgate_approval_wait_seconds", "");
        out.push_str("# HELP tollgate_notifications_total Notifications by notifier and outcome.\n");
        out.push_str("# TYPE tollgate_notifications_total counter\n");
        for (notifier, counts) in &observed.notifications {
            for (outcome, n) in Notified::ALL.iter().zip(counts) {
                let (notifier, outcome) = (escape(notifier), outcome.as_str());
                let _ =
                    writeln!(out, "tollgate_notifications_total{{notifier=\"{notifier}\",outcome=\"{outcome}\"}} {n}");
            }
        }
        drop(observed);
        out.push_str(
            "# HELP tollgate_event_feed_store_reads_total Reads of events the event feed made from the store, for commits the store's commit tap did not hand it.\n",
        );
        out.push_str("# TYPE tollgate_event_feed_store_reads_total counter\n");
        let _ = writeln!(out, "tollgate_event_feed_store_reads_total {}", self.feed_reads.load(Ordering::Relaxed));
        out.push_str("# HELP tollgate_webhook_deliveries_total Webhook deliveries by outcome.\n");
        out.push_str("# TYPE tollgate_webhook_deliveries_total counter\n");
        for (outcome, counter) in [
            ("delivered", &self.delivered),
            ("failed", &self.failed),
            ("dropped", &self.dropped),
            ("expired", &self.expired),
        ] {
            let _ = writeln!(
                out,
                "tollgate_webhook_deliveries_total{{outcome=\"{outcome}\"}} {}",
                counter.load(Ordering::Relaxed)
            );
        }
        self.webhook_outbox.render(&mut out, "webhook", "webhooks", "delivers", "Webhook deliveries");
        self.notification_outbox.render(&mut out, "notification", "notifications", "sends", "Notifications");
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        for (name, kind, help, value) in [
            ("tollgate_connections_open", "gauge", "HTTP connections open.", load(&self.connections_open)),
            (
                "tollgate_connections_refused_total",
                "counter",
                "Connections or requests refused past [server] max_connections.",
                load(&self.connections_refused),
            ),
            (
                "tollgate_accept_errors_total",
                "counter",
                "Failed accepts (e.g. out of file descriptors), each followed by a short pause.",
                load(&self.accept_errors),
            ),
            ("tollgate_sse_streams_open", "gauge", "Live-event streams open.", load(&self.streams_open)),
            (
                "tollgate_sse_streams_refused_total",
                "counter",
                "Live-event streams refused past [server] max_streams_per_client.",
                load(&self.streams_refused),
            ),
        ] {
            render_one(&mut out, name, kind, help, value);
        }
        out.push_str("# HELP tollgate_connections_timed_out_total Connections closed by a deadline, by timeout.\n");
        out.push_str("# TYPE tollgate_connections_timed_out_total counter\n");
        for (timeout, counter) in [("idle", &self.idle_timeouts), ("header_read", &self.header_read_timeouts)] {
            let _ = writeln!(out, "tollgate_connections_timed_out_total{{timeout=\"{timeout}\"}} {}", load(counter));
        }
        Ok(out)
    }
}

/// A PostgreSQL store's hosts: which one it uses, its moves and its failed looks.
fn render_store_hosts(out: &mut String, hosts: &tollgate_agent_core::StoreHosts) {
    out.push_str(
        "# HELP tollgate_store_host The PostgreSQL hosts of [store] url: 1 for the one in use, 0 for the others.\n",
    );
    out.push_str("# TYPE tollgate_store_host gauge\n");
    for (index, host) in hosts.hosts.iter().enumerate() {
        let _ = writeln!(out, "tollgate_store_host{{host=\"{}\"}} {}", escape(host), u8::from(index == hosts.current));
    }
    render_one(
        out,
        "tollgate_store_host_moves_total",
        "counter",
        "Times this process's store moved to another PostgreSQL host (a failover).",
        hosts.moves,
    );
    render_one(
        out,
        "tollgate_store_host_none_would_do_total",
        "counter",
        "Looks for the PostgreSQL host to use that found none would do (none reachable and writable).",
        hosts.none_would_do,
    );
}

/// The worker pool: its size and load, the queue all nodes share, and this process's claims.
fn render_workers(out: &mut String, workers: &tollgate_agent_runtime::WorkerStats, queued: u64) {
    let busy = u64::try_from(workers.busy).unwrap_or(u64::MAX);
    let size = u64::try_from(workers.size).unwrap_or(u64::MAX);
    for (name, kind, help, value) in [
        (
            "tollgate_queue_depth",
            "gauge",
            "Queued runs waiting for a worker of any node (counted by the store).",
            queued,
        ),
        ("tollgate_workers", "gauge", "Runs this process drives at most at once ([runtime] workers).", size),
        ("tollgate_workers_busy", "gauge", "Runs this process drives now.", busy),
        (
            "tollgate_workers_accepting",
            "gauge",
            "1 while this process takes new work, 0 once it is shutting down.",
            u64::from(workers.accepting),
        ),
        ("tollgate_claims_total", "counter", "Queued runs this process's workers claimed.", workers.claims),
    ] {
        render_one(out, name, kind, help, value);
    }
    let name = "tollgate_claim_latency_seconds";
    let _ =
        writeln!(out, "# HELP {name} How long a run this process claimed had been queued.\n# TYPE {name} histogram");
    for (bound, count) in &workers.claim_latency_buckets {
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {count}");
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", workers.claims);
    let _ = writeln!(out, "{name}_sum {}", workers.claim_latency_sum_secs);
    let _ = writeln!(out, "{name}_count {}", workers.claims);
}

/// One metric without labels: its help, its type and its value.
fn render_one(out: &mut String, name: &str, kind: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
}

/// Escapes a label value.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let mut h = Histogram::default();
        h.observe(0.002);
        h.observe(0.2);
        h.observe(500.0);
        let mut out = String::new();
        h.render(&mut out, "x", "tool=\"t\"");
        assert!(out.contains("x_bucket{tool=\"t\",le=\"0.001\"} 0\n"));
        assert!(out.contains("x_bucket{tool=\"t\",le=\"0.005\"} 1\n"));
        assert!(out.contains("x_bucket{tool=\"t\",le=\"0.25\"} 2\n"));
        assert!(out.contains("x_bucket{tool=\"t\",le=\"+Inf\"} 3\n"));
        assert!(out.contains("x_count{tool=\"t\"} 3\n"));
        assert_eq!(escape("a\"b"), "a\\\"b");
    }

    #[test]
    fn approval_waits_have_buckets_of_seconds_to_days() {
        let mut h = Histogram::with_bounds(&WAIT_BUCKETS);
        h.observe(3.0);
        h.observe(5400.0);
        let mut out = String::new();
        h.render(&mut out, "w", "");
        assert!(out.contains("w_bucket{le=\"1\"} 0\n"), "{out}");
        assert!(out.contains("w_bucket{le=\"5\"} 1\n"), "{out}");
        assert!(out.contains("w_bucket{le=\"3600\"} 1\n"), "{out}");
        assert!(out.contains("w_bucket{le=\"7200\"} 2\n"), "{out}");
        assert!(out.contains("w_bucket{le=\"259200\"} 2\n"), "{out}");
        assert!(out.contains("w_sum 5403\n") && out.contains("w_count 2\n"), "{out}");
    }

    #[test]
    fn every_notifier_has_every_outcome_from_the_start() {
        let metrics = Metrics::default();
        metrics.notifiers(["ops", "mail"]);
        metrics.notified("ops", Notified::Sent);
        metrics.notified("ops", Notified::Sent);
        metrics.notified("mail", Notified::Dropped);
        let observed = metrics.observed();
        assert_eq!(observed.notifications.get("ops"), Some(&[2, 0, 0, 0, 0]));
        assert_eq!(observed.notifications.get("mail"), Some(&[0, 0, 0, 0, 1]));
    }

    #[test]
    fn store_hosts_name_the_one_in_use_and_count_moves() {
        let hosts = tollgate_agent_core::StoreHosts {
            hosts: vec!["pg1:5432".into(), "pg2:5433".into()],
            current: 1,
            moves: 2,
            none_would_do: 3,
        };
        let mut out = String::new();
        render_store_hosts(&mut out, &hosts);
        assert!(out.contains("# TYPE tollgate_store_host gauge\n"), "{out}");
        assert!(out.contains("tollgate_store_host{host=\"pg1:5432\"} 0\n"), "{out}");
        assert!(out.contains("tollgate_store_host{host=\"pg2:5433\"} 1\n"), "{out}");
        assert!(
            out.contains("# TYPE tollgate_store_host_moves_total counter\ntollgate_store_host_moves_total 2\n"),
            "{out}"
        );
        assert!(out.contains("tollgate_store_host_none_would_do_total 3\n"), "{out}");
    }
}
