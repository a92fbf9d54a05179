//! What is due and what is old ([`Schedules`]): the runs whose approval or lease expired, and the purge
//! of finished and long-waiting runs with their events.

use super::PostgresStore;
use crate::codec::{decode_runs_skipping_corrupt, run_columns};
use tollgate_agent_core::BoxFuture;
use tollgate_agent_core::run::{Millis, RunRecord};
use tollgate_agent_core::store::{Schedules, StoreError};

const SELECT_DUE: &str = concat!(
    "SELECT * FROM (SELECT ",
    run_columns!(),
    ", expires_at AS due_at FROM runs WHERE status = 'waiting_for_approval' AND expires_at IS NOT NULL ",
    "AND expires_at <= $1 ORDER BY expires_at LIMIT $2) AS waiting ",
    "UNION ALL SELECT * FROM (SELECT ",
    run_columns!(),
    ", lease_expires_at AS due_at FROM runs WHERE status = 'running' AND lease_expires_at IS NOT NULL ",
    "AND lease_expires_at <= $1 ORDER BY lease_expires_at LIMIT $2) AS running ",
    "ORDER BY due_at, id LIMIT $2"
);
/// Waiting runs changed after `($1, $2)` (time, then id) and at or before `$3`, in that order, at most
/// `$4`: the escalation sweep's window, read in order from the partial index `runs_waiting_changed`
/// (migration 16).
const SELECT_WAITING_CHANGED: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs WHERE status = 'waiting_for_approval' AND updated_at >= $1 AND updated_at <= $3 ",
    "AND (updated_at > $1 OR id > $2) ORDER BY updated_at, id LIMIT $4"
);
/// The conditions are stated again on the DELETE itself so that a row changed between the selection
/// and the lock (no longer matching) is left alone. The runs' events go in the same statement (no
/// foreign key cascades since migration 7).
const PURGE: &str = "WITH terminal AS (\
         SELECT id FROM runs WHERE finished_at IS NOT NULL AND finished_at < $1 \
         ORDER BY finished_at LIMIT $3 FOR UPDATE SKIP LOCKED), \
     waiting AS (\
         SELECT id FROM runs WHERE status = 'waiting_for_approval' AND updated_at < $2 \
         ORDER BY updated_at LIMIT $3 FOR UPDATE SKIP LOCKED), \
     victims AS (SELECT id FROM terminal UNION ALL SELECT id FROM waiting LIMIT $3), \
     deleted AS (DELETE FROM runs WHERE id IN (SELECT id FROM victims) \
     AND ((finished_at IS NOT NULL AND finished_at < $1) OR (status = 'waiting_for_approval' AND updated_at < $2)) \
     RETURNING id), \
     their_events AS (DELETE FROM event_batches WHERE run_id IN (SELECT id FROM deleted)) \
     SELECT id FROM deleted";

impl PostgresStore {
    async fn due_runs(&self, now: Millis, limit: u32) -> Result<Vec<RunRecord>, StoreError> {
        let mut connection = self.connection().await?;
        let rows = sqlx::query(SELECT_DUE)
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(&mut *connection)
            .await
            .map_err(self.db_error("cannot read due runs"))?;
        connection.finished();
        Ok(decode_runs_skipping_corrupt(&rows, "due", self.keys()))
    }

    async fn waiting_changed_runs(
        &self,
        from: (Millis, &str),
        until: Millis,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let mut connection = self.connection().await?;
        let rows = sqlx::query(SELECT_WAITING_CHANGED)
            .bind(from.0)
            .bind(from.1)
            .bind(until)
            .bind(i64::from(limit))
            .fetch_all(&mut *connection)
            .await
            .map_err(self.db_error("cannot read waiting runs"))?;
        connection.finished();
        Ok(decode_runs_skipping_corrupt(&rows, "waiting", self.keys()))
    }

    async fn purge_runs(&self, terminal_before: Millis, waiting_before: Millis, batch: u32) -> Result<u64, StoreError> {
        let mut connection = self.connection().await?;
        let deleted: Vec<String> = sqlx::query_scalar(PURGE)
            .bind(terminal_before)
            .bind(waiting_before)
            .bind(i64::from(batch))
            .fetch_all(&mut *connection)
            .await
            .map_err(self.db_error("cannot purge runs"))?;
        connection.finished();
        for id in &deleted {
            self.cache.remove(id);
        }
        Ok(u64::try_from(deleted.len()).unwrap_or(u64::MAX))
    }
}

impl Schedules for PostgresStore {
    fn due(&self, now: Millis, limit: u32) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>> {
        Box::pin(self.due_runs(now, limit))
    }

    fn waiting_changed<'a>(
        &'a self,
        from: (Millis, &'a str),
        until: Millis,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, StoreError>> {
        Box::pin(self.waiting_changed_runs(from, until, limit))
    }

    fn purge(
        &self,
        terminal_before: Millis,
        waiting_before: Millis,
        batch: u32,
    ) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(self.purge_runs(terminal_before, waiting_before, batch))
    }
}
