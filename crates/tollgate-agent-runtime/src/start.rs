//! Starting a run: created running under this process's lease (or queued for a worker), driven at once, and the
//! waits of a start.

use crate::error::DriveError;
use crate::{AgentSpec, ReadError, Runtime, StartError, StartRun, Work, events};
use std::sync::Arc;
use tollgate_agent_core::RunId;
use tollgate_agent_core::RunRecord;

impl Runtime {
    /// Starts a run: driven in this process, in the background, when one of its workers is free
    /// (answered as created, `running`), else queued for the first free worker of any node (answered
    /// `queued`, see [`enqueue`](Self::enqueue)).
    pub async fn start(&self, request: StartRun<'_>) -> Result<RunRecord, StartError> {
        let Some(slot) = self.inner.pool.try_slot() else {
            return self.enqueue(request).await;
        };
        let (run, spec) = self.create_run(request, true).await?;
        self.inner.spawn_drive(run.clone(), spec, Work::Start, None, slot);
        Ok(run)
    }

    /// Creates a run `queued` and answers it so: the first free worker of any node sharing the store
    /// claims it ([`start_workers`](Self::start_workers), which this starts for this process if it
    /// has not yet), oldest first.
    pub async fn enqueue(&self, request: StartRun<'_>) -> Result<RunRecord, StartError> {
        let (run, _) = self.create_run(request, false).await?;
        // A process that queues work claims it too (no-op once its claim loop runs).
        self.start_workers();
        self.inner.pool.queued();
        Ok(run)
    }

    /// Creates and stores a run with its `run_started` event: leased to this process (`running`) or
    /// `queued`.
    async fn create_run(&self, request: StartRun<'_>, leased: bool) -> Result<(RunRecord, Arc<AgentSpec>), StartError> {
        let (run, spec) = self.inner.new_run(request, leased)?;
        let started = events::run_started(&run);
        let run = self.inner.store.rows.create(run, vec![started]).await.map_err(StartError::Store)?;
        self.inner.notify_created(&run);
        Ok((run, spec))
    }

    /// [`wait_settled`](Self::wait_settled) for a run this request started: gone meanwhile is
    /// [`StartError::Vanished`].
    async fn wait_started(&self, id: &RunId) -> Result<RunRecord, StartError> {
        self.wait_settled(id).await.map_err(|error| match error {
            ReadError::NotFound(id) => StartError::Vanished(id),
            ReadError::Store(error) => StartError::Store(error),
        })
    }

    /// Starts a run and answers once it waits for approval or has ended.
    ///
    /// Until then only the caller, who is waiting, knows of the run, so it is not committed on its own:
    /// its creation rides with its first durable write (the held turn, the end, or the progress committed
    /// before a second model call), one commit less. Should the process die before that, no run is left
    /// behind and the caller's request fails; nothing was promised to anyone.
    pub async fn start_and_wait(&self, request: StartRun<'_>) -> Result<RunRecord, StartError> {
        let Some(slot) = self.inner.pool.try_slot() else {
            // Every worker is busy (or this process is shutting down): queued, and followed in the store.
            let run = self.enqueue(request).await?;
            return self.wait_started(&run.id).await;
        };
        let (run, spec) = self.inner.new_run(request, true)?;
        let id = run.id.clone();
        // Driven in a task of its own (so that many runs started at once from one task still run side by
        // side and commit together), which answers here.
        let (done, driven) = tokio::sync::oneshot::channel();
        self.inner.spawn_drive(run, spec, Work::Create, Some(done), slot);
        match driven.await {
            Ok(Ok(run)) => Ok(run),
            Ok(Err(DriveError::Store(error))) => Err(StartError::Store(error)),
            // Stored, then changed hands (cancelled, taken over, or given back at shutdown): wait on the
            // stored run.
            Ok(Err(DriveError::ChangedHands { .. } | DriveError::Released { .. })) | Err(_) => {
                self.wait_started(&id).await
            }
        }
    }
}
