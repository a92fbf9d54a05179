//! # tollgate-store
//!
//! The two [`RunStore`] backends: SQLite (embedded default: one file, WAL, full durability) and
//! PostgreSQL (several Tollgate nodes sharing one database). Both apply their embedded migrations on
//! open and refuse a database written by a newer Tollgate.
//!
//! Both follow the promises of [`tollgate_core::store`]: each transition is one transaction that
//! compare-and-sets the run, applies [`tollgate_core::RunRecord::apply`] and appends its hash-chained events.

pub mod postgres;
pub mod sqlite;

use std::sync::Arc;
use tollgate_core::{RunStore, StoreError};

/// Opens the store a URL names: `sqlite://FILE` / `sqlite:///ABS/FILE` / `sqlite::memory:`, or
/// `postgres://…` / `postgresql://…`.
pub async fn open(url: &str) -> Result<Arc<dyn RunStore>, StoreError> {
    if url.starts_with("sqlite:") {
        Ok(Arc::new(sqlite::SqliteStore::open(url).await?))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(postgres::PostgresStore::open(url).await?))
    } else {
        Err(StoreError::Database(format!(
            "unsupported store URL `{url}`: expected sqlite://FILE or postgres://USER@HOST:PORT/DB"
        )))
    }
}
