//! Writes that outlive a store outage.
//!
//! A store that is full, read-only or unreachable ([`StoreError::is_outage`]) is a condition an operator
//! fixes; it says nothing about the run. So a drive whose write of a stored run meets one does not fail
//! the run (a run not stored yet is answered to its starter at once instead, see `hooks`): it
//! waits and writes again, backing off from [`FIRST_WAIT`] to [`LONGEST_WAIT`], holding its worker and
//! its place in flight, until the store takes the write — or until something else settles it: the run
//! changed hands (another node took it over once its lease expired; the write then conflicts and the
//! drive stops, as any drive that lost its run does), or this process stops taking work (the write is
//! given up; the run's lease expires and any node continues it from its last stored step).
//!
//! A write retried after an outage may have been committed already, its answer lost with the
//! connection. Before writing again, and when the write again conflicts, the run's log is read: when its
//! last events are the ones being written (same kind, round and time), the write took effect and is not
//! repeated, so no event is stored twice.

use crate::Inner;
use std::time::Duration;
use tollgate_agent_core::RunId;
use tollgate_agent_core::{NewEvent, RunRecord, StoreError, rfc3339};

/// The first wait after a write met an outage.
pub(crate) const FIRST_WAIT: Duration = Duration::from_millis(100);
/// The longest wait between two attempts.
pub(crate) const LONGEST_WAIT: Duration = Duration::from_secs(2);

/// One attempt of a write; `retry` is false for the first.
pub(crate) struct Attempt {
    pub(crate) retry: bool,
}

impl Inner {
    /// Runs `write` until the store takes it or refuses it for a reason other than an outage; an
    /// outage is waited out (see the module's documentation) while this process takes work. `what`
    /// names the write in the log.
    pub(crate) async fn until_stored<T, F, Fut>(
        &self,
        run_id: &RunId,
        what: &str,
        mut write: F,
    ) -> Result<T, StoreError>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let mut wait = FIRST_WAIT;
        let mut retry = false;
        loop {
            match write(Attempt { retry }).await {
                Err(error) if error.is_outage() && self.pool.accepting() => {
                    if !retry {
                        tracing::warn!(run = %run_id, %error, write = what, "the store cannot take the run's progress; waiting for it");
                    }
                    self.outage_waits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(LONGEST_WAIT);
                    retry = true;
                }
                Err(error) => return Err(error),
                Ok(value) => {
                    if retry {
                        tracing::info!(run = %run_id, write = what, "the store took the run's progress again");
                    }
                    return Ok(value);
                }
            }
        }
    }

    /// The run as stored, when its log ends with `events` (compared by kind, round and time): a write
    /// of them whose answer was lost took effect. `None` when it does not, or when the log cannot be read.
    pub(crate) async fn stored_already(&self, run_id: &RunId, events: &[NewEvent]) -> Option<RunRecord> {
        let run = self.store.rows.get(run_id).await.ok()?;
        let count = u64::try_from(events.len()).ok()?;
        if events.is_empty() || run.last_seq < count {
            return None;
        }
        let tail = self.store.log.events(run_id, run.last_seq - count, u32::try_from(count).ok()?).await.ok()?;
        let same = tail.len() == events.len()
            && tail.iter().zip(events).all(|(stored, new)| {
                stored.kind == new.kind && stored.round == new.round && stored.at == rfc3339(new.at)
            });
        same.then_some(run)
    }
}

impl crate::Runtime {
    /// How many times this process's drives waited for a store that could not take their progress (a
    /// full disk, a read-only file system, a lost database): `/metrics`'
    /// `tollgate_store_outage_waits_total`.
    pub fn outage_waits(&self) -> u64 {
        self.inner().outage_waits.load(std::sync::atomic::Ordering::Relaxed)
    }
}
