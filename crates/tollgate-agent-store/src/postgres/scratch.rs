//! [`ScratchSchema`]: a schema of its own per test or benchmark on a shared PostgreSQL server, and the
//! sweep of those left behind.

use crate::codec::{Secrets, database_error};
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tollgate_agent_core::store::StoreError;

/// A schema of its own on a PostgreSQL server, for tests and benchmarks that share one database: runs
/// kept in it are seen (and, by a worker pool, claimed) only by stores opened on [`ScratchSchema::url`].
#[derive(Debug)]
pub struct ScratchSchema {
    base: String,
    name: String,
}

/// A scratch schema's prefix is lowercase ASCII letters, digits and `_`.
fn check_prefix(prefix: &str) -> Result<(), StoreError> {
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
        return Err(StoreError::Database(format!("a schema prefix is lowercase letters, digits and _: {prefix:?}")));
    }
    Ok(())
}

/// When scratch schema `name` (`PREFIX_PID_NANOS_N`) was made, in nanoseconds since the Unix epoch;
/// `None` for a name of another shape.
fn scratch_schema_time(name: &str, prefix: &str) -> Option<u128> {
    let rest = name.strip_prefix(prefix)?.strip_prefix('_')?;
    let parts: Vec<&str> = rest.split('_').collect();
    let [pid, nanos, n] = parts.as_slice() else { return None };
    if [pid, nanos, n].iter().any(|part| part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    nanos.parse().ok()
}

impl ScratchSchema {
    /// Creates a fresh schema `PREFIX_PID_NANOS_N` on the server of `base` (a `postgres://` URL).
    ///
    /// # Errors
    /// A `prefix` that is not lowercase ASCII letters, digits and `_` is [`StoreError::Database`], as is
    /// a server that cannot be reached or refuses `CREATE SCHEMA`.
    pub async fn create(base: &str, prefix: &str) -> Result<ScratchSchema, StoreError> {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        check_prefix(prefix)?;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{prefix}_{}_{nanos}_{n}", std::process::id());
        let schema = ScratchSchema { base: base.to_owned(), name };
        schema.admin(&format!("CREATE SCHEMA {}", schema.name)).await?;
        Ok(schema)
    }

    /// Drops the schemas of `prefix` that [`ScratchSchema::create`] made more than `older_than` ago
    /// (by the time in their names): those of processes that ended without dropping theirs, such as
    /// test binaries. Answers how many it dropped. Other schemas, and names of another shape, are left
    /// alone.
    ///
    /// # Errors
    /// As [`ScratchSchema::create`] for the prefix and the server.
    pub async fn sweep(base: &str, prefix: &str, older_than: Duration) -> Result<u64, StoreError> {
        check_prefix(prefix)?;
        let secrets = Secrets::from_url(base);
        let failed = |e: sqlx::Error| database_error(&secrets, "cannot sweep scratch schemas", &e);
        let mut admin = PgConnection::connect(base).await.map_err(failed)?;
        // `_` is a LIKE wildcard: escaped, so only this prefix's names match.
        let pattern = format!("{}\\_%", prefix.replace('_', "\\_"));
        let names: Vec<String> = sqlx::query_scalar("SELECT nspname::TEXT FROM pg_namespace WHERE nspname LIKE $1")
            .bind(pattern)
            .fetch_all(&mut admin)
            .await
            .map_err(failed)?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let mut dropped = 0;
        for name in names {
            let Some(made) = scratch_schema_time(&name, prefix) else { continue };
            if now.saturating_sub(made) < older_than.as_nanos() {
                continue;
            }
            // The name is the prefix (checked) and digits: safe to write into the statement.
            admin.execute(AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {name} CASCADE"))).await.map_err(failed)?;
            dropped += 1;
        }
        admin.close().await.map_err(failed)?;
        Ok(dropped)
    }

    /// [`ScratchSchema::sweep`] the first time this process asks for `prefix`; answers 0 after that.
    /// For test harnesses that open scratch schemas test after test.
    ///
    /// # Errors
    /// As [`ScratchSchema::sweep`].
    pub async fn sweep_once(base: &str, prefix: &str, older_than: Duration) -> Result<u64, StoreError> {
        static SWEPT: Mutex<Vec<String>> = Mutex::new(Vec::new());
        {
            let mut swept = SWEPT.lock().unwrap_or_else(PoisonError::into_inner);
            if swept.iter().any(|p| p == prefix) {
                return Ok(0);
            }
            swept.push(prefix.to_owned());
        }
        ScratchSchema::sweep(base, prefix, older_than).await
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The URL of a store in this schema (`options[search_path]`).
    pub fn url(&self) -> String {
        let separator = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{separator}options[search_path]={}", self.base, self.name)
    }

    /// Drops the schema and everything in it.
    ///
    /// # Errors
    /// The server cannot be reached or refuses.
    pub async fn drop_all(self) -> Result<(), StoreError> {
        self.admin(&format!("DROP SCHEMA {} CASCADE", self.name)).await
    }

    async fn admin(&self, statement: &str) -> Result<(), StoreError> {
        let secrets = Secrets::from_url(&self.base);
        let failed = |e: sqlx::Error| database_error(&secrets, "cannot manage a scratch schema", &e);
        let mut admin = PgConnection::connect(&self.base).await.map_err(failed)?;
        admin.execute(AssertSqlSafe(statement.to_owned())).await.map_err(failed)?;
        admin.close().await.map_err(failed)
    }
}
