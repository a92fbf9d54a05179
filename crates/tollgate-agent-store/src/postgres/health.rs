//! The store's health ([`StoreHealth`]): the write probe behind `/readyz`, the integrity check (a
//! read of every table), and the runs counted by status.

use super::PostgresStore;
use crate::codec::status_counts;
use crate::migrations;
use sqlx::AssertSqlSafe;
use tollgate_agent_core::BoxFuture;
use tollgate_agent_core::run::RunStatus;
use tollgate_agent_core::store::{IntegrityCheck, StoreError, StoreHealth};

/// The probe of [`StoreHealth::probe_write`]: one committed row update.
const PROBE: &str = "INSERT INTO health (id, probed_at) VALUES (1, $1) \
     ON CONFLICT (id) DO UPDATE SET probed_at = EXCLUDED.probed_at";

/// Tables `check_integrity` reads: every row with `Full` (PostgreSQL then reads every page, checking
/// its checksum when the cluster has them), one row with `Quick`.
const TABLES: [&str; 6] = ["runs", "event_batches", "grants", "log_readers", "health", "tollgate_migrations"];

impl PostgresStore {
    async fn probe(&self) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        sqlx::query(PROBE)
            .bind(migrations::now_millis())
            .execute(&mut *connection)
            .await
            .map_err(self.db_error("cannot write the probe"))?;
        connection.finished();
        Ok(())
    }

    /// Reads each table (see [`TABLES`]); a table whose read fails with corrupted data is a line of the
    /// answer, any other failure the error.
    async fn check_tables(&self, depth: IntegrityCheck) -> Result<Vec<String>, StoreError> {
        let mut problems = Vec::new();
        for table in TABLES {
            let sql = match depth {
                IntegrityCheck::Quick => format!("SELECT COUNT(*) FROM (SELECT 1 FROM {table} LIMIT 1) AS t"),
                IntegrityCheck::Full => format!("SELECT COUNT(*) FROM {table}"),
            };
            let mut connection = self.connection().await?;
            let read: Result<i64, sqlx::Error> =
                sqlx::query_scalar(AssertSqlSafe(sql)).fetch_one(&mut *connection).await;
            match read.map_err(self.db_error("cannot check the database")) {
                Ok(_) => connection.finished(),
                Err(StoreError::CorruptDatabase(detail)) => problems.push(format!("table {table}: {detail}")),
                Err(error) => return Err(error),
            }
        }
        Ok(problems)
    }

    async fn count_runs(&self) -> Result<Vec<(RunStatus, u64)>, StoreError> {
        let mut connection = self.connection().await?;
        let rows: Vec<(String, i64)> = sqlx::query_as("SELECT status, COUNT(*) FROM runs GROUP BY status")
            .fetch_all(&mut *connection)
            .await
            .map_err(self.db_error("cannot count runs"))?;
        connection.finished();
        Ok(status_counts(rows))
    }
}

impl StoreHealth for PostgresStore {
    fn count_by_status(&self) -> BoxFuture<'_, Result<Vec<(RunStatus, u64)>, StoreError>> {
        Box::pin(self.count_runs())
    }

    fn probe_write(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.probe())
    }

    fn check_integrity(&self, depth: IntegrityCheck) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(self.check_tables(depth))
    }
}
