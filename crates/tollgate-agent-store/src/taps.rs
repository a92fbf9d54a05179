//! The commit taps of a store ([`ChangeFeed::tap_commits`](tollgate_agent_core::ChangeFeed::tap_commits)):
//! each backend fires them after a commit, with the events it wrote, before the write returns.

use std::panic::AssertUnwindSafe;
use std::sync::{PoisonError, RwLock, Weak};
use tollgate_agent_core::{CommitTap, RunId, StoredEvent};

type WeakTap = Weak<dyn Fn(&RunId, &[StoredEvent]) + Send + Sync>;

/// The taps a store was given, each held weakly: dropped by its caller, it is forgotten.
#[derive(Default)]
pub(crate) struct Taps(RwLock<Vec<WeakTap>>);

impl Taps {
    /// Adds a tap (forgetting those whose callers dropped them).
    pub(crate) fn add(&self, tap: &CommitTap) {
        let mut taps = self.0.write().unwrap_or_else(PoisonError::into_inner);
        taps.retain(|tap| tap.strong_count() > 0);
        taps.push(std::sync::Arc::downgrade(tap));
    }

    /// Hands a commit's events of run `run_id` to every tap. A tap that panics is logged and the
    /// commit goes on: it was already durable.
    pub(crate) fn fire(&self, run_id: &RunId, events: &[StoredEvent]) {
        if events.is_empty() {
            return;
        }
        let taps = self.0.read().unwrap_or_else(PoisonError::into_inner);
        for tap in taps.iter().filter_map(Weak::upgrade) {
            if std::panic::catch_unwind(AssertUnwindSafe(|| tap(run_id, events))).is_err() {
                tracing::error!(run = %run_id, "a commit tap panicked; its follower reads the events instead");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tollgate_agent_core::EventKind;

    fn event(seq: u64) -> StoredEvent {
        StoredEvent {
            seq,
            at: "2026-01-01T00:00:00.000Z".to_owned(),
            kind: EventKind::RunResumed,
            round: 0,
            data: serde_json::Value::Null,
            hash: String::new(),
        }
    }

    #[test]
    fn a_tap_sees_each_commit_until_dropped_and_a_panicking_one_harms_no_other() {
        let taps = Taps::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        let tap: CommitTap = Arc::new(move |run: &RunId, events: &[StoredEvent]| {
            kept.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((run.clone(), events.iter().map(|e| e.seq).collect::<Vec<_>>()));
        });
        let panicking: CommitTap = Arc::new(|_: &RunId, _: &[StoredEvent]| panic!("a broken follower"));
        taps.add(&panicking);
        taps.add(&tap);
        let run = RunId::from("r");
        taps.fire(&run, &[event(1), event(2)]);
        taps.fire(&run, &[]);
        assert_eq!(
            *seen.lock().unwrap_or_else(PoisonError::into_inner),
            vec![(run.clone(), vec![1, 2])],
            "once, and nothing for no events"
        );
        drop(tap);
        taps.fire(&run, &[event(3)]);
        assert_eq!(seen.lock().unwrap_or_else(PoisonError::into_inner).len(), 1, "a dropped tap is forgotten");
        taps.add(&panicking);
        assert_eq!(
            taps.0.read().unwrap_or_else(PoisonError::into_inner).len(),
            2,
            "the dropped one went at the next add"
        );
    }
}
