//! Following one run's events as they commit ([`Follower`], from [`Runtime::follow`]): what the HTTP
//! API's live events, the library's event stream and any other reader of a run's log as it grows share.
//!
//! A follower remembers where the run stood when it last looked — its last event's seq and its status,
//! from a read of the run or from the notice that woke it — so it reads the store only for events it
//! knows are there: one read of events per change it is woken for, and a read of the run only when it
//! does not know where the run stands (at the start unless told, after a resync or a lag, and after a
//! quiet poll interval while the store does not announce other processes' commits).
//!
//! The events of this process's own commits need no read at all: the runtime taps its store's commits
//! ([`ChangeFeed::tap_commits`](tollgate_agent_core::ChangeFeed::tap_commits)) and keeps, for each run some
//! follower follows, the events committed since (up to [`RECENT_PER_RUN`] per run). A follower woken
//! by such a commit takes them from there; it reads the store for what is not there (another node's
//! commits, those before it started, a store that does not tap).

use crate::{ReadError, RunNotice, Runtime};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::broadcast;
use tollgate_agent_core::RunId;
use tollgate_agent_core::{CommitTap, RunRecord, RunStatus, StoredEvent};

/// Events read per store query.
const PAGE: u32 = 500;
/// The most events the runtime keeps of one followed run's commits (the oldest go first).
pub const RECENT_PER_RUN: usize = 1_000;

/// The events of this process's commits to the runs that followers follow, as the store's commit tap
/// hands them over. Nothing is kept of a run nobody follows.
#[derive(Default)]
pub(crate) struct Recent {
    runs: Mutex<HashMap<RunId, Followed>>,
    /// How many followers there are, all runs together: without any, a commit costs one load.
    followers: AtomicUsize,
}

#[derive(Default)]
struct Followed {
    followers: usize,
    /// In seq order; may have holes (a commit tapped before the follow, or pushed out).
    events: VecDeque<StoredEvent>,
}

impl Recent {
    /// Taps `store`'s commits into a new cache; `None` (and no cache) when the store cannot tap.
    pub(crate) fn tapping(store: &dyn tollgate_agent_core::ChangeFeed) -> Option<(Arc<Recent>, CommitTap)> {
        let recent = Arc::new(Recent::default());
        let kept = Arc::clone(&recent);
        let tap: CommitTap = Arc::new(move |run_id: &RunId, events: &[StoredEvent]| kept.keep(run_id, events));
        store.tap_commits(&tap).then_some((recent, tap))
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, Followed>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn keep(&self, run_id: &RunId, events: &[StoredEvent]) {
        if self.followers.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut runs = self.runs();
        let Some(followed) = runs.get_mut(run_id) else { return };
        for event in events {
            // Two commits of one run may reach the tap in either order: keep the seqs sorted.
            let at = followed.events.partition_point(|kept| kept.seq < event.seq);
            if followed.events.get(at).is_none_or(|kept| kept.seq != event.seq) {
                followed.events.insert(at, event.clone());
            }
        }
        while followed.events.len() > RECENT_PER_RUN {
            followed.events.pop_front();
        }
    }

    fn follow(&self, run_id: &RunId) {
        self.runs().entry(run_id.to_owned()).or_default().followers += 1;
        self.followers.fetch_add(1, Ordering::AcqRel);
    }

    fn unfollow(&self, run_id: &RunId) {
        let mut runs = self.runs();
        if let Some(followed) = runs.get_mut(run_id) {
            followed.followers = followed.followers.saturating_sub(1);
            if followed.followers == 0 {
                runs.remove(run_id);
            }
        }
        self.followers.fetch_sub(1, Ordering::AcqRel);
    }

    /// The events of run `run_id` after seq `after` through `through`, if every one of them is kept.
    fn between(&self, run_id: &RunId, after: u64, through: u64) -> Option<Vec<StoredEvent>> {
        let wanted = usize::try_from(through.checked_sub(after)?).ok().filter(|n| *n > 0)?;
        let runs = self.runs();
        let events = &runs.get(run_id)?.events;
        let from = events.partition_point(|kept| kept.seq <= after);
        let page: Vec<StoredEvent> = events.iter().skip(from).take(wanted).cloned().collect();
        let whole = page.len() == wanted && page.iter().zip(after + 1..).all(|(event, seq)| event.seq == seq);
        whole.then_some(page)
    }
}

/// Where a run stood at the last look.
#[derive(Clone, Copy, Debug)]
struct Head {
    last_seq: u64,
    status: RunStatus,
}

/// A run's events after a seq, as they commit ([`Runtime::follow`]).
pub struct Follower {
    runtime: Runtime,
    notices: broadcast::Receiver<RunNotice>,
    id: RunId,
    cursor: u64,
    head: Option<Head>,
    poll: Duration,
    /// The run's terminal event was handed out: there is nothing after it.
    ended: bool,
    /// This process's commits to the run, when the store taps them.
    recent: Option<Arc<Recent>>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        if let Some(recent) = &self.recent {
            recent.unfollow(&self.id);
        }
    }
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower").field("id", &self.id).field("cursor", &self.cursor).finish_non_exhaustive()
    }
}

impl Runtime {
    /// Follows run `id`'s events after seq `after` as they commit. It subscribes to the runtime's
    /// notices now, so nothing committed after this call is missed. While the store does not announce
    /// other processes' commits it also looks again every `poll` (see [`Runtime::recheck_after`]).
    pub fn follow(&self, id: &RunId, after: u64, poll: Duration) -> Follower {
        let recent = self.inner.recent.clone();
        if let Some(recent) = &recent {
            recent.follow(id);
        }
        Follower {
            runtime: self.clone(),
            notices: self.subscribe(),
            id: id.to_owned(),
            cursor: after,
            head: None,
            poll,
            ended: false,
            recent,
        }
    }
}

impl Follower {
    /// Tells the follower where the run stood in `run`, read after [`Runtime::follow`]: its first look
    /// then reads no run.
    pub fn seen(&mut self, run: &RunRecord) {
        if run.id == self.id {
            self.head = Some(Head { last_seq: run.last_seq, status: run.status() });
        }
    }

    /// The seq of the last event handed out (or the start point).
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The next events after the cursor, in order, waiting until there are some; `Ok(None)` once the
    /// run has ended and every one of its events was handed out. Cancelling it (dropping the future)
    /// loses nothing: the next call starts where this one would have.
    ///
    /// # Errors
    /// [`ReadError::NotFound`] when the run does not exist (or was purged meanwhile); the store's
    /// error when a read fails.
    pub async fn next(&mut self) -> Result<Option<Vec<StoredEvent>>, ReadError> {
        loop {
            if self.ended {
                return Ok(None);
            }
            let head = match self.head {
                Some(head) => head,
                None => {
                    let run = self.runtime.get(&self.id).await?;
                    let head = Head { last_seq: run.last_seq, status: run.status() };
                    self.head = Some(head);
                    head
                }
            };
            if head.last_seq > self.cursor {
                let kept = self.recent.as_ref().and_then(|recent| recent.between(&self.id, self.cursor, head.last_seq));
                let page = match kept {
                    Some(page) => page,
                    None => self.runtime.inner.store.log.events(&self.id, self.cursor, PAGE).await?,
                };
                if let Some(last) = page.last() {
                    self.cursor = last.seq;
                    self.ended = page.iter().any(|event| event.kind.is_terminal());
                    if self.cursor > head.last_seq {
                        // Read past what the run was known to hold: where it stands now is unknown.
                        self.head = None;
                    }
                    return Ok(Some(page));
                }
                // The run said there was more, and none was there: look at the run again after the
                // wait rather than read again at once.
                self.head = None;
            } else if head.status.is_terminal() {
                return Ok(None);
            }
            self.head = self.wait().await;
        }
    }

    /// Waits for a notice that the run moved past the cursor (answering where it stands then), or
    /// for a reason to look at it again (a resync, a lag, a quiet poll interval): `None`.
    async fn wait(&mut self) -> Option<Head> {
        let notice = self.runtime.wait_for_run(&mut self.notices, &self.id, self.cursor, self.poll).await?;
        (notice.run_id == self.id).then_some(Head { last_seq: notice.last_seq, status: notice.status })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_agent_testkit::{seqs_of as seqs, stored_events as events};

    #[test]
    fn kept_events_serve_a_range_only_whole_and_only_while_followed() {
        let recent = Recent::default();
        let (r, other) = (RunId::from("r"), RunId::from("other"));
        recent.keep(&r, &events(1..=3));
        assert_eq!(seqs(recent.between(&r, 0, 3)), None, "nobody followed r: nothing kept");
        recent.follow(&r);
        // Two commits that reached the tap out of order, one of them twice.
        recent.keep(&r, &events(6..=7));
        recent.keep(&r, &events(4..=5));
        recent.keep(&r, &events(6..=6));
        recent.keep(&other, &events(1..=2));
        assert_eq!(seqs(recent.between(&r, 3, 7)), Some(vec![4, 5, 6, 7]));
        assert_eq!(seqs(recent.between(&r, 5, 6)), Some(vec![6]));
        assert_eq!(seqs(recent.between(&r, 2, 7)), None, "3 was never kept: the caller reads");
        assert_eq!(seqs(recent.between(&r, 7, 9)), None, "8 and 9 are not there yet");
        assert_eq!(seqs(recent.between(&r, 7, 7)), None, "nothing wanted");
        assert_eq!(seqs(recent.between(&other, 0, 2)), None, "not followed");
        // The oldest go past the limit.
        recent.keep(&r, &events(8..=(RECENT_PER_RUN as u64 + 7)));
        assert_eq!(seqs(recent.between(&r, 3, 5)), None);
        assert_eq!(seqs(recent.between(&r, 8, 9)), Some(vec![9]));
        recent.unfollow(&r);
        assert!(recent.runs().is_empty(), "forgotten with its last follower");
        assert_eq!(recent.followers.load(Ordering::Acquire), 0);
    }
}
