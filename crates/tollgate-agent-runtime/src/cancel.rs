//! Cancelling a run that has not ended.

use crate::error::CasFailure;
use crate::telemetry::WaitEnd;
use crate::{CancelError, DECIDE_ATTEMPTS, Runtime, events};
use tollgate_agent_core::{Actor, Guard, RunId, RunRecord, RunStatus, Transition};

impl Runtime {
    /// Cancels a run that has not finished.
    pub async fn cancel(&self, id: &RunId, actor: &Actor, reason: Option<&str>) -> Result<RunRecord, CancelError> {
        for _ in 0..DECIDE_ATTEMPTS {
            let run = self.get(id).await?;
            if run.status().is_terminal() {
                return Err(CancelError::AlreadyTerminal { id: run.id.clone(), status: run.status() });
            }
            let now = self.inner.clock.now();
            let event = events::run_cancelled(now, run.iterations, actor, reason);
            match self
                .inner
                .store
                .rows
                .transition(id, Guard::Version(run.version), Transition::Cancel, vec![event], now)
                .await
            {
                Ok(next) => {
                    self.inner.notify(&next);
                    if let (Some(tracing), Some(turn), RunStatus::WaitingForApproval) =
                        (&self.inner.tracing, run.held_turn(), run.status())
                    {
                        tracing.wait_ended(&run, turn, WaitEnd::Cancelled { actor: actor.as_str() }, now);
                    }
                    return Ok(next);
                }
                Err(failed) => match CasFailure::from(failed) {
                    // Changed since it was read (the driving process committed a step): read it again.
                    CasFailure::Overtaken => continue,
                    CasFailure::NotFound(id) => return Err(CancelError::NotFound(id)),
                    CasFailure::Store(error) => return Err(CancelError::Store(error)),
                },
            }
        }
        Err(CancelError::LostRace { id: id.to_owned() })
    }
}
