//! A run's events ([`EventLog`]): read from its event batches, and the keys their chain is
//! verified with.

use super::PostgresStore;
use crate::codec::decode_event;
use crate::encryption::DataKeys;
use tollgate_agent_core::BoxFuture;
use tollgate_agent_core::RunId;
use tollgate_agent_core::event::StoredEvent;
use tollgate_agent_core::store::{EventLog, StoreError};

/// The events after seq `$2`, at most `$3`: from the first `$3` batches whose last seq is above `$2`
/// (each holds at least one event, and only the first can hold seqs at or below `$2`).
const SELECT_EVENTS: &str = "SELECT e.seq, e.at, e.kind, e.round, e.data, e.hash \
     FROM (SELECT * FROM event_batches WHERE run_id = $1 AND last_seq > $2 ORDER BY last_seq LIMIT $3) AS b, \
     UNNEST(b.seqs, b.ats, b.kinds, b.rounds, b.datas, b.hashes) AS e (seq, at, kind, round, data, hash) \
     WHERE e.seq > $2 ORDER BY e.seq LIMIT $3";
const RUN_EXISTS: &str = "SELECT 1 FROM runs WHERE id = $1";

impl PostgresStore {
    async fn read_events(&self, id: &str, after: u64, limit: u32) -> Result<Vec<StoredEvent>, StoreError> {
        let mut connection = self.connection().await?;
        let rows = sqlx::query(SELECT_EVENTS)
            .bind(id)
            .bind(i64::try_from(after).unwrap_or(i64::MAX))
            .bind(i64::from(limit))
            .fetch_all(&mut *connection)
            .await
            .map_err(self.run_failed("cannot read events", id))?;
        if rows.is_empty() {
            let exists = sqlx::query(RUN_EXISTS)
                .bind(id)
                .fetch_optional(&mut *connection)
                .await
                .map_err(self.db_error("cannot read a run"))?;
            if exists.is_none() {
                connection.finished();
                return Err(StoreError::NotFound(id.to_owned()));
            }
        }
        connection.finished();
        rows.iter().map(|row| decode_event(id, row, self.keys())).collect()
    }
}

impl EventLog for PostgresStore {
    fn events<'a>(
        &'a self,
        id: &'a RunId,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>, StoreError>> {
        Box::pin(self.read_events(id, after, limit))
    }

    fn chain_keys(&self) -> Option<&tollgate_agent_core::event::ChainKeys> {
        self.keys().map(DataKeys::chain_keys)
    }
}
