//! The event feed: follows the runs this process changes ([`Runtime::changes`]), reads the events each
//! change committed, and counts them in the metrics. Only this process's own commits: each event is
//! counted by the node that committed it, so nodes sharing a PostgreSQL database never count one event
//! once per node. (Webhooks read the store's commit log instead: `webhooks.rs`.) It never writes
//! and never blocks a run; a feed that falls behind loses nothing: the change set holds one entry per
//! run changed since the feed last looked, and the feed reads each such run's events from its cursor.
//!
//! The events come from the commits themselves: the store hands each commit's events to the feed's
//! commit tap ([`ChangeFeed::tap_commits`](tollgate_agent_core::ChangeFeed::tap_commits)) before the write
//! returns, so the feed reads nothing back while it keeps up. It reads from the store only what it was
//! not handed: when the store does not tap, when more than [`MAX_HELD`] events wait for it (the tap
//! then drops a run's events until the feed has caught up with it), or when a commit's answer was lost.
//!
//! Per run it remembers the last seq it handed on, so each event goes out once. Memory is bounded:
//! past [`MAX_TRACKED`] runs, the waiting ones are forgotten first. A run this process created it hands
//! on from its first event; any other run from the first event this process committed to it, as
//! tapped. Only where it holds none of them (a change without events, such as a claim, or events it
//! has to read) does it look for a start in the store: after the run's last `approval_requested`
//! event, which may count a decision a second time; the events it reads
//! to find that start are handed on from there, not read again.
//!
//! `tollgate_approval_wait_seconds` counts, for each held turn this process resumed (each `run_resumed`
//! it committed: the decision that completed the turn, a person's or the deadline's), the time from the
//! turn's `approval_requested` to that `run_resumed`, by their `at` times. The start is the last
//! `approval_requested` the feed handed on for the run; when it has none (the run waited before this
//! process saw it: started on another node, or before a restart), it reads the start from the run's log
//! — here, in the feed, off the commit path.

use crate::metrics::Metrics;
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate_agent_core::{CallId, CommitTap, EventKind, RunId, RunStatus, StoredEvent};
use tollgate_agent_protocol::event_data as data;
use tollgate_agent_runtime::{Changed, Runtime};

/// How many runs the feed keeps a cursor for.
const MAX_TRACKED: usize = 100_000;
const PAGE: u32 = 500;
/// The most events a first look at a run keeps from the reads that find where to start.
const KEPT: usize = 2_000;
/// The most events the commit tap holds for the feed; past it, a run's events are dropped (and read
/// from the store later) until the feed has caught up with that run.
const MAX_HELD: usize = 20_000;

/// The events this process committed, as the commit tap handed them, waiting for the feed.
#[derive(Default)]
struct Held {
    runs: HashMap<RunId, HeldRun>,
    /// Events held, all runs together.
    events: usize,
}

#[derive(Default)]
struct HeldRun {
    events: Vec<StoredEvent>,
    /// The last seq dropped for want of room (0: none): until the feed has looked at the run up to
    /// there, nothing more is held for it, so what is held never has a hole.
    dropped_through: u64,
}

impl Held {
    fn hold(&mut self, run_id: &RunId, events: &[StoredEvent]) {
        let Some(last) = events.last().map(|e| e.seq) else { return };
        if !self.runs.contains_key(run_id) {
            self.runs.insert(run_id.to_owned(), HeldRun::default());
        }
        let Some(run) = self.runs.get_mut(run_id) else { return };
        if run.dropped_through > 0 || self.events + events.len() > MAX_HELD {
            self.events -= run.events.len();
            run.events = Vec::new();
            run.dropped_through = run.dropped_through.max(last);
            return;
        }
        run.events.extend_from_slice(events);
        self.events += events.len();
    }

    /// The events held of run `run_id` up to `last_seq`, in seq order (later ones stay held); `None`
    /// when none are or some were dropped, so the caller reads.
    fn take(&mut self, run_id: &RunId, last_seq: u64) -> Option<Vec<StoredEvent>> {
        let run = self.runs.get_mut(run_id)?;
        if run.dropped_through > 0 {
            // A run dropped holds nothing; it is held again once the feed has looked past the drop.
            if last_seq >= run.dropped_through {
                self.runs.remove(run_id);
            }
            return None;
        }
        // Two commits of one run may reach the tap in either order.
        run.events.sort_by_key(|e| e.seq);
        let later = run.events.split_off(run.events.partition_point(|e| e.seq <= last_seq));
        let taken = std::mem::replace(&mut run.events, later);
        if run.events.is_empty() {
            self.runs.remove(run_id);
        }
        self.events -= taken.len();
        Some(taken)
    }
}

#[derive(Default)]
struct Cursor {
    seq: u64,
    status: Option<RunStatus>,
    model_request: Option<(u32, i64)>,
    tools: HashMap<CallId, (String, i64)>,
    /// When the run's held turn was requested (its last `approval_requested` handed on).
    waiting_since: Option<i64>,
    /// The `run_resumed` events (seq, time) handed on with no `approval_requested` before them: their
    /// start is read from the log.
    resumed_unmatched: Vec<(u64, i64)>,
}

struct Feed {
    runtime: Runtime,
    metrics: Arc<Metrics>,
    runs: HashMap<RunId, Cursor>,
    held: Arc<Mutex<Held>>,
    /// The store holds the tap only while this does.
    _tap: CommitTap,
}

/// Starts the feed. Subscribes before returning, so nothing committed after this call is missed. When
/// `stop` completes, the feed counts what is already queued and ends.
pub(crate) fn spawn(runtime: Runtime, metrics: Arc<Metrics>, stop: oneshot::Receiver<()>) -> JoinHandle<()> {
    // The tap first: a commit between the two is held and handed on with the run's next change.
    let held = Arc::new(Mutex::new(Held::default()));
    let holder = held.clone();
    let tap: CommitTap = Arc::new(move |run_id: &RunId, events: &[StoredEvent]| {
        holder.lock().unwrap_or_else(PoisonError::into_inner).hold(run_id, events);
    });
    if !runtime.change_feed().tap_commits(&tap) {
        tracing::debug!("the store does not tap its commits: the event feed reads them");
    }
    let changes = runtime.changes();
    let mut feed = Feed { runtime, metrics, runs: HashMap::new(), held, _tap: tap };
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
    async fn process(&mut self, run_id: &RunId, change: Changed) {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner).take(run_id, change.last_seq);
        let mut cursor = match self.runs.remove(run_id) {
            Some(cursor) => cursor,
            // Created here since the feed last looked: every event is new.
            None if change.created => Cursor::default(),
            // What this process committed to it, from its first commit on.
            None if let Some(first) = held.as_ref().and_then(|events| events.first()) => {
                Cursor { seq: first.seq.saturating_sub(1), ..Cursor::default() }
            }
            None => {
                // The events read to find where to start are handed on from there, not read again.
                let (start, read) = self.start_for_unknown(run_id, change.last_seq).await;
                let mut cursor = Cursor { seq: start, ..Cursor::default() };
                // The held turn's request, read to find the start (and not handed on again).
                if let Some(first) = read.first()
                    && first.seq == start
                    && first.kind == EventKind::ApprovalRequested
                {
                    cursor.waiting_since = millis(&first.at);
                }
                if let Some(last) = read.last().map(|e| e.seq) {
                    for event in &read {
                        self.observe(&mut cursor, event);
                    }
                    cursor.seq = cursor.seq.max(last);
                }
                cursor
            }
        };
        // The events held, as far as they follow on without a hole; the store fills in the rest.
        for event in held.iter().flatten() {
            if event.seq > cursor.seq + 1 {
                break;
            }
            self.observe(&mut cursor, event);
            cursor.seq = cursor.seq.max(event.seq);
        }
        while cursor.seq < change.last_seq {
            self.metrics.feed_read();
            let page = match self.runtime.event_log().events(run_id, cursor.seq, PAGE).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(run = %run_id, error = %e, "event feed cannot read events");
                    break;
                }
            };
            let Some(last) = page.last().map(|e| e.seq) else { break };
            for event in &page {
                self.observe(&mut cursor, event);
            }
            cursor.seq = last;
        }
        for (seq, resumed_at) in std::mem::take(&mut cursor.resumed_unmatched) {
            if let Some(since) = self.requested_before(run_id, seq).await {
                self.metrics.approval_wait(seconds(resumed_at - since));
            }
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
    async fn start_for_unknown(&self, run_id: &RunId, last_seq: u64) -> (u64, Vec<StoredEvent>) {
        if last_seq <= 1 {
            return (0, Vec::new());
        }
        let mut anchor = None;
        let mut after = 0;
        let mut kept = Vec::new();
        let mut overflowed = false;
        while after < last_seq {
            self.metrics.feed_read();
            let Ok(page) = self.runtime.event_log().events(run_id, after, 1000).await else { break };
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

    /// The time of the last `approval_requested` of run `run_id` before its event `seq`, read from its log.
    async fn requested_before(&self, run_id: &RunId, seq: u64) -> Option<i64> {
        let mut after = 0;
        let mut found = None;
        while after + 1 < seq {
            self.metrics.feed_read();
            let page = match self.runtime.event_log().events(run_id, after, PAGE).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(run = %run_id, error = %e, "event feed cannot read when a held turn was requested");
                    return None;
                }
            };
            let Some(last) = page.last().map(|e| e.seq) else { break };
            for event in page.iter().filter(|e| e.seq < seq && e.kind == EventKind::ApprovalRequested) {
                found = millis(&event.at);
            }
            after = last;
        }
        found
    }

    fn observe(&self, cursor: &mut Cursor, event: &StoredEvent) {
        if event.seq <= cursor.seq {
            return;
        }
        self.metrics.event(event.kind);
        let at = millis(&event.at);
        match event.kind {
            EventKind::ApprovalRequested => cursor.waiting_since = at,
            EventKind::RunResumed => match (cursor.waiting_since.take(), at) {
                (Some(since), Some(at)) => self.metrics.approval_wait(seconds(at - since)),
                (None, Some(at)) => cursor.resumed_unmatched.push((event.seq, at)),
                (_, None) => {}
            },
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
    }
}

fn millis(at: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(at).ok().map(|t| t.timestamp_millis())
}

fn seconds(ms: i64) -> f64 {
    ms.max(0) as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_agent_testkit::{seqs_of as seqs, stored_events as events};

    #[test]
    fn held_events_come_out_in_order_up_to_the_change_and_the_rest_stay() {
        let mut held = Held::default();
        assert_eq!(seqs(held.take(&"r".into(), 9)), None, "nothing held: the caller reads");
        // Two commits that reached the tap out of order.
        held.hold(&"r".into(), &events(5..=6));
        held.hold(&"r".into(), &events(3..=4));
        held.hold(&"r".into(), &[]);
        assert_eq!(seqs(held.take(&"r".into(), 4)), Some(vec![3, 4]));
        assert_eq!(held.events, 2, "5 and 6 stay for the next change");
        assert_eq!(seqs(held.take(&"r".into(), 6)), Some(vec![5, 6]));
        assert!(held.runs.is_empty() && held.events == 0, "taken whole: forgotten");
    }

    #[test]
    fn past_the_limit_a_run_is_read_until_the_feed_has_looked_past_what_was_dropped() {
        let mut held = Held::default();
        held.hold(&"big".into(), &events(1..=MAX_HELD as u64));
        held.hold(&"r".into(), &events(1..=2));
        assert_eq!(held.events, MAX_HELD, "no room for r");
        held.hold(&"r".into(), &events(3..=3));
        assert_eq!(seqs(held.take(&"r".into(), 2)), None, "dropped: read");
        assert_eq!(seqs(held.take(&"big".into(), MAX_HELD as u64)).map(|s| s.len()), Some(MAX_HELD));
        // Room again, but r dropped up to 3: what comes now is not held until the feed is past 3.
        held.hold(&"r".into(), &events(4..=4));
        assert_eq!(seqs(held.take(&"r".into(), 3)), None, "still behind what was dropped");
        assert_eq!(seqs(held.take(&"r".into(), 4)), None, "4 was dropped too: read");
        held.hold(&"r".into(), &events(5..=5));
        assert_eq!(seqs(held.take(&"r".into(), 5)), Some(vec![5]), "past the drop: held again");
        assert!(held.runs.is_empty() && held.events == 0);
    }
}
