//! Reading runs and their logs: by id or prefix, listed, counted, events, and the chain verified.

use crate::{RUN_ID_LEN, ReadError, ResolveError, Runtime};
use tollgate_agent_core::RunId;
use tollgate_agent_core::{
    ChainBreak, Conflict, RunPage, RunQuery, RunRecord, RunStatus, StoreError, StoredEvent, verify_chain_with,
};

impl Runtime {
    /// Reads a run.
    pub async fn get(&self, id: &RunId) -> Result<RunRecord, ReadError> {
        Ok(self.inner.store.rows.get(id).await?)
    }

    /// Resolves a unique id prefix (or a whole id) to a full id.
    pub async fn resolve(&self, prefix: &str) -> Result<RunId, ResolveError> {
        let plausible = !prefix.is_empty()
            && prefix.len() <= RUN_ID_LEN
            && prefix.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || b == b'-');
        if !plausible {
            return Err(ResolveError::InvalidPrefix(prefix.to_owned()));
        }
        match self.inner.store.rows.resolve_prefix(prefix).await {
            Ok(id) => Ok(id),
            Err(StoreError::NotFound(_)) => Err(ResolveError::NotFound(prefix.to_owned())),
            Err(StoreError::Conflict { conflict: Conflict::AmbiguousPrefix { prefix, matches, more }, .. }) => {
                Err(ResolveError::Ambiguous { prefix, matches, more })
            }
            Err(other) => Err(ResolveError::Store(other)),
        }
    }

    /// Lists runs, newest first.
    pub async fn list(&self, query: RunQuery) -> Result<RunPage, StoreError> {
        self.inner.store.rows.list(query).await
    }

    /// How many runs have each status, every status listed (zero where none).
    pub async fn count_by_status(&self) -> Result<Vec<(RunStatus, u64)>, StoreError> {
        let counted = self.inner.store.health.count_by_status().await?;
        Ok(RunStatus::ALL
            .iter()
            .map(|status| (*status, counted.iter().find(|(s, _)| s == status).map_or(0, |(_, n)| *n)))
            .collect())
    }

    /// A run's events after `after` (at most `limit`). A run that does not exist is
    /// [`ReadError::NotFound`] (the store says so: its run is not read first). The events of a run
    /// whose own row is damaged stay readable.
    pub async fn events(&self, id: &RunId, after: u64, limit: u32) -> Result<Vec<StoredEvent>, ReadError> {
        Ok(self.inner.store.log.events(id, after, limit).await?)
    }

    /// Every event of a run after `after`, however many pages that takes (see [`Runtime::events`]).
    pub async fn all_events(&self, id: &RunId, after: u64) -> Result<Vec<StoredEvent>, ReadError> {
        Ok(tollgate_agent_core::store::events_after(&*self.inner.store.log, id, after).await?)
    }

    /// Checks a run's hash chain: `Ok(Err(break))` names the first bad event.
    pub async fn verify(&self, id: &RunId) -> Result<Result<u64, ChainBreak>, ReadError> {
        let run = self.inner.store.rows.get(id).await?;
        let all = tollgate_agent_core::store::events_after(&*self.inner.store.log, id, 0).await?;
        // Keyed hashes are checked with the store's chain keys (docs/events.md).
        let keys = self.inner.store.log.chain_keys();
        Ok(verify_chain_with(&all, run.last_seq, &run.last_hash, keys).map(|()| run.last_seq))
    }
}
