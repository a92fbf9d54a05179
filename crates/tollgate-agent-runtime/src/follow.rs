//! Following one run's events as they commit ([`Follower`], from [`Runtime::follow`]): what the HTTP
//! API's live events, the library's event stream and any other reader of a run's log as it grows share.
//!
//! A follower remembers where the run stood when it last looked — its last event's seq and its status,
//! from a read of the run or from the notice that woke it — so it reads the store only for events it
//! knows are there: one read of events per change it is woken for, and a read of the run only when it
//! does not know where the run stands (at the start unless told, after a resync or a lag, and after a
//! quiet poll interval while the store does not announce other processes' commits).

use crate::{ReadError, RunNotice, Runtime};
use std::time::Duration;
use tokio::sync::broadcast;
use tollgate_agent_core::{RunRecord, RunStatus, StoredEvent};

/// Events read per store query.
const PAGE: u32 = 500;

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
    id: String,
    cursor: u64,
    head: Option<Head>,
    poll: Duration,
    /// The run's terminal event was handed out: there is nothing after it.
    ended: bool,
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
    pub fn follow(&self, id: &str, after: u64, poll: Duration) -> Follower {
        Follower {
            runtime: self.clone(),
            notices: self.subscribe(),
            id: id.to_owned(),
            cursor: after,
            head: None,
            poll,
            ended: false,
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
                let page = self.runtime.inner.store.events(&self.id, self.cursor, PAGE).await?;
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
        let (id, cursor) = (self.id.as_str(), self.cursor);
        let notices = &mut self.notices;
        let woken = async {
            loop {
                match notices.recv().await {
                    Ok(notice) if notice.wakes(id, cursor) => {
                        return (notice.run_id == id)
                            .then_some(Head { last_seq: notice.last_seq, status: notice.status });
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return None,
                    // No more notices: only the poll interval ends the wait.
                    Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
                }
            }
        };
        match self.runtime.recheck_after(self.poll) {
            Some(limit) => tokio::time::timeout(limit, woken).await.ok().flatten(),
            None => woken.await,
        }
    }
}
