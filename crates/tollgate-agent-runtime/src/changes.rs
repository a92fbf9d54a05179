//! Every run this process changed, for a consumer that must not miss one: the runs changed since it
//! last looked, each once, with where it stands now. Unlike the [notices](crate::Runtime::subscribe)
//! (a broadcast, which a reader that falls behind loses part of), a change set cannot overflow: it
//! holds one entry per run changed and not yet taken, so its size is bounded by the runs in flight,
//! however fast they change. The server's event feed (metrics, webhooks) follows one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use tokio::sync::Notify;
use tollgate_agent_core::RunId;
use tollgate_agent_core::RunStatus;

/// Where a run stands after the last change this process made to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Changed {
    /// Its last event's seq.
    pub last_seq: u64,
    /// Its status after the change (`running` after an append of events alone).
    pub status: RunStatus,
    /// This process created the run since the set was last taken: every event of it is new.
    pub created: bool,
}

#[derive(Default)]
pub(crate) struct Pending {
    runs: Mutex<HashMap<RunId, Changed>>,
    wake: Notify,
}

impl Pending {
    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, Changed>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The runs this process changed since the set was last taken ([`Runtime::changes`](crate::Runtime::changes)).
pub struct ChangeSet {
    pending: Arc<Pending>,
}

impl ChangeSet {
    /// Waits until a run has changed, then takes every run changed so far (each once, with its latest
    /// seq and status).
    pub async fn next(&self) -> HashMap<RunId, Changed> {
        loop {
            let woken = self.pending.wake.notified();
            let taken = self.take();
            if !taken.is_empty() {
                return taken;
            }
            woken.await;
        }
    }

    /// Takes every run changed so far, without waiting (empty when none has).
    pub fn take(&self) -> HashMap<RunId, Changed> {
        std::mem::take(&mut *self.pending.runs())
    }
}

/// The change sets of one runtime.
#[derive(Default)]
pub(crate) struct ChangeSets(Mutex<Vec<Weak<Pending>>>);

impl ChangeSets {
    pub(crate) fn open(&self) -> ChangeSet {
        let pending = Arc::new(Pending::default());
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(Arc::downgrade(&pending));
        ChangeSet { pending }
    }

    /// Records a change of run `id` in every open set (a set dropped is forgotten).
    pub(crate) fn record(&self, id: &RunId, changed: Changed) {
        let mut sets = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if sets.is_empty() {
            return;
        }
        sets.retain(|set| {
            let Some(set) = set.upgrade() else { return false };
            let mut runs = set.runs();
            match runs.get_mut(id) {
                // Commits of one run come in order; an append's notice never goes back on a later seq.
                Some(entry) if changed.last_seq >= entry.last_seq => {
                    *entry = Changed { created: entry.created || changed.created, ..changed };
                }
                Some(_) => {}
                // The run's id is copied only when it enters the set, not at every change of it.
                None => {
                    runs.insert(id.to_owned(), changed);
                }
            }
            drop(runs);
            set.wake.notify_one();
            true
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_set_that_falls_behind_loses_nothing_and_holds_one_entry_per_run() {
        let sets = ChangeSets::default();
        let set = sets.open();
        // Far more changes than a broadcast of notices holds (4096), nobody reading meanwhile.
        for seq in 1..=200_u64 {
            for run in 0..100 {
                let status = if seq == 200 { RunStatus::Completed } else { RunStatus::Running };
                sets.record(&RunId::from(format!("run-{run}")), Changed { last_seq: seq, status, created: seq == 1 });
            }
        }
        let taken = set.next().await;
        assert_eq!(taken.len(), 100, "one entry per run");
        let last = Changed { last_seq: 200, status: RunStatus::Completed, created: true };
        assert!(taken.values().all(|c| *c == last), "the latest change, and that the run was created since");
        assert!(set.take().is_empty(), "taken once");
        // An out-of-order older seq never replaces a newer one.
        let seventh = Changed { last_seq: 7, status: RunStatus::Running, created: false };
        sets.record(&"run-0".into(), seventh);
        sets.record(&"run-0".into(), Changed { last_seq: 5, status: RunStatus::WaitingForApproval, created: false });
        assert_eq!(set.take().get("run-0"), Some(&seventh));
    }

    #[tokio::test]
    async fn next_waits_for_a_change_and_a_dropped_set_is_forgotten() {
        let sets = Arc::new(ChangeSets::default());
        let set = sets.open();
        let waiting = tokio::spawn(async move { set.next().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "nothing changed yet");
        sets.record(&"r".into(), Changed { last_seq: 1, status: RunStatus::Running, created: true });
        let taken = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert!(matches!(taken, Ok(Ok(ref runs)) if runs.len() == 1), "{taken:?}");
        // The set was moved into the task and dropped with it: recording forgets it.
        sets.record(&"r".into(), Changed { last_seq: 2, status: RunStatus::Running, created: false });
        assert!(sets.0.lock().unwrap_or_else(PoisonError::into_inner).is_empty());
    }
}
