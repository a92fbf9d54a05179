//! `/metrics` in the Prometheus text format.
//!
//! - `tollgate_runs{status}` and `tollgate_waiting_runs`: gauges counted by the store (one
//!   `GROUP BY status` query) when scraped, cached for a few seconds.
//! - `tollgate_decisions_total{action}`, `tollgate_events_total{kind}`, and the model-call and
//!   tool-call latency histograms: counted from the events this process commits, as the event feed
//!   (`feed.rs`) reads them; they start at zero with the process, as counters do.
//! - `tollgate_webhook_deliveries_total{outcome}`: webhook deliveries that succeeded, failed after every
//!   retry, or were dropped because the queue was full.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};
use tollgate_core::RunStatus;
use tollgate_runtime::Runtime;

/// How long run counts are reused between scrapes.
const COUNT_TTL: Duration = Duration::from_secs(5);

/// Histogram bucket bounds, seconds.
const BUCKETS: [f64; 14] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0];

/// A Prometheus histogram of durations.
#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum_secs: f64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        for (bound, count) in BUCKETS.iter().zip(self.counts.iter_mut()) {
            if secs <= *bound {
                *count += 1;
            }
        }
        self.count += 1;
        self.sum_secs += secs;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (bound, count) in BUCKETS.iter().zip(self.counts.iter()) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", self.count);
        let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum_secs);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[derive(Default)]
struct Observed {
    decisions: BTreeMap<String, u64>,
    events: BTreeMap<&'static str, u64>,
    model_calls: Histogram,
    tool_calls: BTreeMap<String, Histogram>,
}

/// What a webhook delivery came to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Delivery {
    Delivered,
    Failed,
    Dropped,
}

/// The server's counters.
#[derive(Default)]
pub(crate) struct Metrics {
    observed: Mutex<Observed>,
    delivered: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    counts: tokio::sync::Mutex<Option<(Instant, StatusCounts)>>,
}

/// How many runs have each status.
type StatusCounts = Vec<(RunStatus, u64)>;

impl Metrics {
    fn observed(&self) -> std::sync::MutexGuard<'_, Observed> {
        self.observed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn event(&self, kind: tollgate_core::EventKind) {
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
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Runs per status, counted by the store, cached briefly.
    async fn run_counts(&self, runtime: &Runtime) -> Result<StatusCounts, tollgate_core::StoreError> {
        let mut cache = self.counts.lock().await;
        if let Some((at, counts)) = cache.as_ref()
            && at.elapsed() < COUNT_TTL
        {
            return Ok(counts.clone());
        }
        let counts = runtime.count_by_status().await?;
        *cache = Some((Instant::now(), counts.clone()));
        Ok(counts)
    }

    /// The whole exposition.
    pub(crate) async fn render(&self, runtime: &Runtime) -> Result<String, tollgate_core::StoreError> {
        let counts = self.run_counts(runtime).await?;
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

        let observed = self.observed();
        out.push_str("# HELP tollgate_decisions_total Decisions recorded by this process, by action.\n");
        out.push_str("# TYPE tollgate_decisions_total counter\n");
        for action in ["approve", "edit", "deny", "respond"] {
            let n = observed.decisions.get(action).copied().unwrap_or(0);
            let _ = writeln!(out, "tollgate_decisions_total{{action=\"{action}\"}} {n}");
        }
        out.push_str("# HELP tollgate_events_total Events committed by this process, by kind.\n");
        out.push_str("# TYPE tollgate_events_total counter\n");
        for kind in tollgate_core::EventKind::ALL {
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
        drop(observed);
        out.push_str("# HELP tollgate_webhook_deliveries_total Webhook deliveries by outcome.\n");
        out.push_str("# TYPE tollgate_webhook_deliveries_total counter\n");
        for (outcome, counter) in [("delivered", &self.delivered), ("failed", &self.failed), ("dropped", &self.dropped)]
        {
            let _ = writeln!(
                out,
                "tollgate_webhook_deliveries_total{{outcome=\"{outcome}\"}} {}",
                counter.load(Ordering::Relaxed)
            );
        }
        Ok(out)
    }
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
}
