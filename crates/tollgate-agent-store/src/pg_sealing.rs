//! The seal migration on PostgreSQL (see [`crate::seal`]): each batch is one transaction that locks
//! its runs (`FOR UPDATE`), so no node changes them while they are sealed; events are updated through
//! the `events` view (its trigger edits the event in its batch).

use crate::postgres::PostgresStore;
use crate::seal::{
    SealReport, StoredRun, UnsealedEvent, last_batch, needs_keys, plan_run_seal, select_runs_sql,
    select_unsealed_events_sql, update_column_sql, update_event_sql,
};
use sqlx::{Connection, Row};
use tollgate_agent_core::StoreError;

impl PostgresStore {
    /// Seals the unsealed values of at most `limit` runs after id `after` (`""`: from the first), in
    /// one transaction. Answers what it did and the cursor of the next batch (`None`: it was the last).
    ///
    /// # Errors
    /// [`crate::seal`]'s error for a store without data keys; a database failure (nothing of the
    /// batch is then written).
    pub async fn seal_batch(&self, after: &str, limit: u32) -> Result<(SealReport, Option<String>), StoreError> {
        let keys = self.data_keys().ok_or_else(needs_keys)?;
        let failed = self.db_error("cannot seal runs");
        let mut connection = self.connection().await?;
        let mut tx = Connection::begin(&mut *connection).await.map_err(&failed)?;
        let select = format!("{} FOR UPDATE OF r", select_runs_sql('$'));
        let rows = sqlx::query(sqlx::AssertSqlSafe(select))
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await
            .map_err(&failed)?;
        let runs = rows
            .iter()
            .map(|row| {
                Ok(StoredRun {
                    id: row.try_get(0)?,
                    version: row.try_get(1)?,
                    suspension: row.try_get(2)?,
                    decisions: row.try_get(3)?,
                    has_v2_events: row.try_get(4)?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(&failed)?;
        let mut report = SealReport::default();
        for run in &runs {
            let events = sqlx::query(sqlx::AssertSqlSafe(select_unsealed_events_sql('$')))
                .bind(&run.id)
                .fetch_all(&mut *tx)
                .await
                .map_err(&failed)?
                .iter()
                .map(|row| Ok(UnsealedEvent { seq: row.try_get(0)?, data: row.try_get(1)?, hash: row.try_get(2)? }))
                .collect::<Result<Vec<_>, sqlx::Error>>()
                .map_err(&failed)?;
            let planned = plan_run_seal(keys, run, events);
            report.count(&planned);
            let Ok(Some(seal)) = planned else { continue };
            for (column, value) in [("suspension", seal.suspension), ("decisions", seal.decisions)] {
                if let Some(value) = value {
                    sqlx::query(sqlx::AssertSqlSafe(update_column_sql(column, '$')))
                        .bind(value)
                        .bind(&run.id)
                        .bind(run.version)
                        .execute(&mut *tx)
                        .await
                        .map_err(&failed)?;
                }
            }
            for (seq, read, sealed) in seal.events {
                sqlx::query(sqlx::AssertSqlSafe(update_event_sql('$')))
                    .bind(sealed)
                    .bind(&run.id)
                    .bind(seq)
                    .bind(read)
                    .execute(&mut *tx)
                    .await
                    .map_err(&failed)?;
            }
            // A row this node remembers holds the values as they were.
            self.forget_row(&run.id);
        }
        tx.commit().await.map_err(&failed)?;
        connection.finished();
        let next = match runs.last() {
            Some(last) if !last_batch(runs.len(), limit) => Some(last.id.clone()),
            _ => None,
        };
        Ok((report, next))
    }
}
