//! The seal migration on SQLite (see [`crate::seal`]): each batch is one `BEGIN IMMEDIATE`
//! transaction on the write connection, taken between the writer's own batches.

use super::{SqliteStore, lock};
use crate::codec::database_error;
use crate::seal::{
    RunSeal, SealReport, StoredRun, UnsealedEvent, needs_keys, plan_run_seal, select_runs_sql,
    select_unsealed_events_sql, update_column_sql, update_event_sql,
};
use rusqlite::{Connection, params};
use tollgate_agent_core::StoreError;

impl SqliteStore {
    /// Seals the unsealed values of at most `limit` runs after id `after` (`""`: from the first), in
    /// one transaction. Answers what it did and the cursor of the next batch (`None`: it was the last).
    ///
    /// # Errors
    /// [`crate::seal`]'s error for a store without data keys; a database failure (nothing of the
    /// batch is then written).
    pub fn seal_batch(&self, after: &str, limit: u32) -> Result<(SealReport, Option<String>), StoreError> {
        let keys = self.keys.as_deref().ok_or_else(needs_keys)?;
        let connection = lock(&self.committer.connection);
        let failed = |e: rusqlite::Error| database_error(&self.secrets, "cannot seal runs", &e);
        connection.execute_batch("BEGIN IMMEDIATE").map_err(failed)?;
        let batch = (|| -> rusqlite::Result<(SealReport, Option<String>)> {
            let runs = read_runs(&connection, after, limit)?;
            let mut report = SealReport::default();
            for run in &runs {
                let planned = plan_run_seal(keys, run, read_unsealed_events(&connection, &run.id)?);
                report.count(&planned);
                if let Ok(Some(seal)) = planned {
                    write_seal(&connection, run, seal)?;
                }
            }
            let next = match runs.last() {
                Some(last) if !crate::seal::last_batch(runs.len(), limit) => Some(last.id.clone()),
                _ => None,
            };
            Ok((report, next))
        })();
        match batch {
            Ok(done) => {
                connection.execute_batch("COMMIT").map_err(failed)?;
                Ok(done)
            }
            Err(e) => {
                if let Err(undo) = connection.execute_batch("ROLLBACK") {
                    tracing::warn!(error = %undo, "cannot roll back a failed seal batch");
                }
                Err(failed(e))
            }
        }
    }
}

fn read_runs(connection: &Connection, after: &str, limit: u32) -> rusqlite::Result<Vec<StoredRun>> {
    let mut statement = connection.prepare(&select_runs_sql('?'))?;
    let runs = statement.query_map(params![after, i64::from(limit)], |row| {
        Ok(StoredRun {
            id: row.get(0)?,
            version: row.get(1)?,
            suspension: row.get(2)?,
            decisions: row.get(3)?,
            has_v2_events: row.get(4)?,
        })
    })?;
    runs.collect()
}

fn read_unsealed_events(connection: &Connection, id: &str) -> rusqlite::Result<Vec<UnsealedEvent>> {
    let mut statement = connection.prepare_cached(&select_unsealed_events_sql('?'))?;
    let events = statement
        .query_map([id], |row| Ok(UnsealedEvent { seq: row.get(0)?, data: row.get(1)?, hash: row.get(2)? }))?;
    events.collect()
}

/// Writes one run's seal. Inside the batch's immediate transaction nothing else writes, so the
/// compare-and-set clauses always match here; they keep the statements the same as on PostgreSQL.
fn write_seal(connection: &Connection, run: &StoredRun, seal: RunSeal) -> rusqlite::Result<()> {
    for (column, value) in [("suspension", seal.suspension), ("decisions", seal.decisions)] {
        if let Some(value) = value {
            connection.execute(&update_column_sql(column, '?'), params![value, run.id, run.version])?;
        }
    }
    let mut update = connection.prepare_cached(&update_event_sql('?'))?;
    for (seq, read, sealed) in seal.events {
        update.execute(params![sealed, run.id, seq, read])?;
    }
    Ok(())
}
