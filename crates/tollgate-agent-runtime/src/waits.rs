//! Waiting for a run: until it reaches a state, or settles (waits at the gate or ends).

use crate::{Origin, ReadError, RunNotice, Runtime, WAIT_RECHECK, settled};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tollgate_agent_core::RunId;
use tollgate_agent_core::RunRecord;

impl Runtime {
    /// How a follower of one run waits: until a notice on `notices` says run `id` moved past `seq` (or
    /// says to resync, or the follower fell behind), or — while the store does not announce other
    /// processes' commits — until `fallback` passes (see [`recheck_after`](Self::recheck_after)).
    /// Answers the notice that woke it, if one did (a resync's among them).
    pub async fn wait_for_run(
        &self,
        notices: &mut broadcast::Receiver<RunNotice>,
        id: &RunId,
        seq: u64,
        fallback: Duration,
    ) -> Option<RunNotice> {
        let mut woke = None;
        let woken = async {
            loop {
                match notices.recv().await {
                    Ok(notice) if notice.wakes(id, seq) => {
                        woke = Some(notice);
                        return;
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    // No more notices: only the fallback ends the wait.
                    Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
                }
            }
        };
        self.wait_or_recheck(fallback, woken).await;
        woke
    }

    /// Waits until a run waits for approval or has ended. A notice that carries a settled record newer
    /// than the last state read answers without another read; any other settled notice, a lag, a
    /// resync, or — while the store does not announce other processes' commits — a quiet half second
    /// reads the run again (another process may drive it).
    pub async fn wait_settled(&self, id: &RunId) -> Result<RunRecord, ReadError> {
        let notices = self.subscribe();
        let run = self.get(id).await?;
        self.wait_settled_from(run, notices).await
    }

    /// [`Runtime::wait_settled`] from `run` as a call of this runtime committed it (a start, a
    /// decision), with `notices` [subscribed](Runtime::subscribe) before that call: every later
    /// commit is among them, so the wait begins without reading the run again.
    pub async fn wait_settled_from(
        &self,
        run: RunRecord,
        mut notices: broadcast::Receiver<RunNotice>,
    ) -> Result<RunRecord, ReadError> {
        let id = run.id.clone();
        let id = &id;
        let mut run = run;
        loop {
            if settled(run.status()) {
                return Ok(run);
            }
            let version = run.version;
            let wait = async {
                loop {
                    match notices.recv().await {
                        Ok(notice) if &notice.run_id == id && settled(notice.status) => {
                            return notice.run.filter(|r| r.version > version);
                        }
                        Ok(notice) if notice.origin == Origin::Resync => return None,
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(_)) => return None,
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            };
            let mut woke = None;
            self.wait_or_recheck(WAIT_RECHECK, async { woke = wait.await }).await;
            run = match woke {
                Some(committed) => Arc::unwrap_or_clone(committed),
                None => self.get(id).await?,
            };
        }
    }
}
