//! The event feed: follows the runs this process changes ([`Runtime::changes`]), reads the events each
//! change committed, and hands them to the metrics and the webhook dispatcher. Only this process's own
//! commits: each event's webhooks are delivered, and its metrics counted, by the node that committed
//! it, so nodes sharing a PostgreSQL database never deliver one event once per node. It never writes
//! and never blocks a run; a feed that falls behind loses nothing: the change set holds one entry per
//! run changed since the feed last looked, and the feed reads each such run's events from its cursor.
//!
//! Per run it remembers the last seq it handed on, so each event goes out once. Memory is bounded:
//! past [`MAX_TRACKED`] runs, the waiting ones are forgotten first. A run this process created it reads
//! from its first event. For a run it does not know (decided here but started by another process or
//! before a restart, or forgotten), it starts after the run's
//! last `approval_requested` event, which may hand on a decision a second time: webhooks are at least
//! once. The events it reads to find that start are handed on from there, so a run decided on another
//! node than the one that started it costs the feed one read of its events, not two.

use crate::metrics::Metrics;
use crate::webhooks::Webhooks;
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate_agent_core::{EventKind, RunStatus, StoredEvent};
use tollgate_agent_protocol::event_data as data;
use tollgate_agent_runtime::{Changed, Runtime};

/// How many runs the feed keeps a cursor for.
const MAX_TRACKED: usize = 100_000;
const PAGE: u32 = 500;
/// The most events a first look at a run keeps from the reads that find where to start.
const KEPT: usize = 2_000;

#[derive(Default)]
struct Cursor {
    seq: u64,
    status: Option<RunStatus>,
    model_request: Option<(u32, i64)>,
    tools: HashMap<String, (String, i64)>,
}

struct Feed {
    runtime: Runtime,
    metrics: Arc<Metrics>,
    webhooks: Option<Webhooks>,
    runs: HashMap<String, Cursor>,
}

/// Starts the feed. Subscribes before returning, so nothing committed after this call is missed. When
/// `stop` completes, the feed hands on what is already queued and ends (dropping its webhook queue, so
/// the dispatcher can finish).
pub(crate) fn spawn(
    runtime: Runtime,
    metrics: Arc<Metrics>,
    webhooks: Option<Webhooks>,
    stop: oneshot::Receiver<()>,
) -> JoinHandle<()> {
    let changes = runtime.changes();
    let mut feed = Feed { runtime, metrics, webhooks, runs: HashMap::new() };
    tokio::spawn(async move {
        let mut stop = stop;
        loop {
            // Every run changed since the last look, once each: a burst costs one read per run.
            let (changed, stopping) = tokio::select! {
                changed = changes.next() => (changed, false),
                _ = &mut stop => (changes.take(), true),
            };
            for (run_id, change) in changed {
                feed.process(&run_id, change).await;
            }
            if stopping {
                return;
            }
        }
    })
}

impl Feed {
    async fn process(&mut self, run_id: &str, change: Changed) {
        let mut cursor = match self.runs.remove(run_id) {
            Some(cursor) => cursor,
            // Created here since the feed last looked: every event is new.
            None if change.created => Cursor::default(),
            None => {
                // The events read to find where to start are handed on from there, not read again.
                let (start, read) = self.start_for_unknown(run_id, change.last_seq).await;
                let mut cursor = Cursor { seq: start, ..Cursor::default() };
                if let Some(last) = read.last().map(|e| e.seq) {
                    for event in &read {
                        self.observe(run_id, &mut cursor, event);
                    }
                    cursor.seq = cursor.seq.max(last);
                }
                cursor
            }
        };
        while cursor.seq < change.last_seq {
            let page = match self.runtime.store().events(run_id, cursor.seq, PAGE).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(run = %run_id, error = %e, "event feed cannot read events");
                    break;
                }
            };
            let Some(last) = page.last().map(|e| e.seq) else { break };
            for event in &page {
                self.observe(run_id, &mut cursor, event);
            }
            cursor.seq = last;
        }
        cursor.status = Some(change.status);
        if !change.status.is_terminal() {
            self.runs.insert(run_id.to_owned(), cursor);
        }
        if self.runs.len() > MAX_TRACKED {
            self.runs.retain(|_, c| c.status != Some(RunStatus::WaitingForApproval));
            if self.runs.len() > MAX_TRACKED {
                self.runs.clear();
            }
        }
    }

    /// Where to start for a run first seen at this change (its last event `last_seq`), and the events
    /// read to find it from the last `approval_requested` on (those after the start are handed on);
    /// none kept when there were more than [`KEPT`] of them (the caller reads them again instead).
    async fn start_for_unknown(&self, run_id: &str, last_seq: u64) -> (u64, Vec<StoredEvent>) {
        if last_seq <= 1 {
            return (0, Vec::new());
        }
        let mut anchor = None;
        let mut after = 0;
        let mut kept = Vec::new();
        let mut overflowed = false;
        while after < last_seq {
            let Ok(page) = self.runtime.store().events(run_id, after, 1000).await else { break };
            let Some(last) = page.last().map(|e| e.seq) else { break };
            for event in page {
                if event.seq <= last_seq && event.kind == EventKind::ApprovalRequested {
                    anchor = Some(event.seq);
                    kept.clear();
                    overflowed = false;
                }
                if kept.len() < KEPT {
                    kept.push(event);
                } else {
                    overflowed = true;
                }
            }
            after = last;
        }
        if overflowed {
            kept.clear();
        }
        let start = match anchor {
            // The change that held the turn: hand on its approval_requested.
            Some(seq) if seq == last_seq => seq - 1,
            Some(seq) => seq,
            None => 0,
        };
        (start, kept)
    }

    fn observe(&self, run_id: &str, cursor: &mut Cursor, event: &StoredEvent) {
        if event.seq <= cursor.seq {
            return;
        }
        self.metrics.event(event.kind);
        let at = millis(&event.at);
        match event.kind {
            EventKind::ModelRequest => cursor.model_request = at.map(|at| (event.round, at)),
            EventKind::ModelResponse => {
                if let (Some((round, started)), Some(at)) = (cursor.model_request.take(), at)
                    && round == event.round
                {
                    self.metrics.model_call(seconds(at - started));
                }
            }
            // Typed reads of the event data (borrowing it, no copy); an event that does not read is
            // left out of the metrics, never guessed at.
            EventKind::ToolStarted => {
                if let (Ok(started), Some(at)) = (data::ToolStarted::deserialize(&event.data), at) {
                    cursor.tools.insert(started.call_id, (started.tool, at));
                }
            }
            EventKind::ToolFinished => {
                if let Ok(finished) = data::ToolFinished::deserialize(&event.data)
                    && let (Some((tool, started)), Some(at)) = (cursor.tools.remove(&finished.call_id), at)
                {
                    self.metrics.tool_call(&tool, seconds(at - started));
                }
            }
            EventKind::Decision => {
                if let Ok(decided) = data::DecisionMade::deserialize(&event.data) {
                    self.metrics.decision(decided.decision.action());
                }
            }
            _ => {}
        }
        if let Some(webhooks) = &self.webhooks {
            webhooks.offer(run_id, event);
        }
    }
}

fn millis(at: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(at).ok().map(|t| t.timestamp_millis())
}

fn seconds(ms: i64) -> f64 {
    ms.max(0) as f64 / 1000.0
}
