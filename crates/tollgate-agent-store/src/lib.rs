//! # tollgate-agent-store
//!
//! The two [`RunStore`] backends: SQLite (embedded default: one file, WAL, full durability) and
//! PostgreSQL (several Tollgate nodes sharing one database), opened from a URL with [`open`].
//!
//! ```
//! # use serde_json::json;
//! # use tollgate_agent_core::{Clock, EventKind, IntegrityCheck, NewEvent, RunRecord, RunStatus, SystemClock};
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # #[cfg(feature = "sqlite")] {
//! let store = tollgate_agent_store::open("sqlite::memory:").await?; // or sqlite://FILE, postgres://…
//! let now = SystemClock.now();
//! let run = RunRecord::new("run-1".into(), "writer".into(), "Save a note".into(), "alice".into(), now, None);
//! let started = NewEvent { at: now, kind: EventKind::RunStarted, round: 0, data: json!({"input": "Save a note"}) };
//! store.create(run, vec![started]).await?; // the run and its first events, in one transaction
//!
//! let run = store.get("run-1").await?;
//! assert_eq!((run.status(), run.last_seq), (RunStatus::Queued, 1));
//! let events = store.events("run-1", 0, 100).await?;
//! assert!(tollgate_agent_core::verify_chain(&events, run.last_seq, &run.last_hash).is_ok());
//! store.probe_write().await?; // what `/readyz` asks
//! assert!(store.check_integrity(IntegrityCheck::Quick).await?.is_empty());
//! # }
//! # Ok(()) }
//! ```
//!
//! Cargo features (both default): `sqlite` ([`SqliteStore`], SQLite compiled in through rusqlite) and
//! `postgres` ([`PostgresStore`], sqlx with rustls on aws-lc-rs). A URL of a backend the build leaves out
//! is an error naming the feature to enable. Both backends apply their embedded migrations on open and
//! refuse a database written by a newer Tollgate.
//!
//! Both follow the promises of [`tollgate_agent_core::store`]: each transition is one transaction that
//! compare-and-sets the run, applies [`tollgate_agent_core::RunRecord::apply`] and appends its hash-chained events.
//! One contract suite (`tests/contract`) runs against both.
//!
//! Shared choices:
//! - Schema: a `runs` row per run (indexed id, agent, status, version, times, deadline, lease, chain
//!   head; the held turn's suspension in its own text column; decisions, required calls and error
//!   as JSON text; times as Unix milliseconds) and an `events` row per event (`at` exactly as hashed,
//!   `data` as JSON text), deleted with its run. Migrations are embedded and recorded in
//!   `tollgate_migrations`.
//! - A row that cannot be decoded, or whose columns contradict its status (a waiting run without its
//!   suspension, a finished run with a lease, ...), is [`StoreError::Corrupt`] for that run, from
//!   `get`, `transition`, `append` and `events`. `list` and `due` skip such a row with a `tracing`
//!   warning instead of failing
//!   (the page names them in [`tollgate_agent_core::RunPage::skipped`]); the skipped row still takes its
//!   place in paging, so a page may hold fewer runs than the limit while `next_cursor` goes on.
//! - `list` pages newest first by id; the cursor is the last id of the page, and `next_cursor` is
//!   `None` once no run is left after the page.
//! - Database errors are named by the database's own code, never its text: a full disk is
//!   [`StoreError::DiskFull`], a database that refuses writes [`StoreError::ReadOnly`], damaged bytes
//!   [`StoreError::Corrupt`] for the run whose row or events they are in (that run fails alone) or
//!   [`StoreError::CorruptDatabase`], a connection that fails or a lock held past the busy timeout
//!   [`StoreError::Unreachable`] (retryable), anything else [`StoreError::Database`] (retryable).
//!   None contains the password of the URL the store was opened with.
//! - [`RunStore::probe_write`] commits a write to the one-row `health` table (for `/readyz`);
//!   [`RunStore::check_integrity`] is SQLite's `quick_check` / `integrity_check`, or a read of every
//!   table on PostgreSQL.
//! - [`RunStore::changes`] on PostgreSQL: the changes other nodes commit, announced by each write through
//!   LISTEN/NOTIFY on one dedicated connection per store (see [`pg_notify`]); SQLite announces none.
//! - Optional encryption at rest ([`StoreOptions::data_keys`], see [`encryption`]): the run's
//!   suspension and decisions and each event's data are stored sealed with AES-256-GCM, below the
//!   hash chain; a value this store cannot decrypt is [`StoreError::Undecryptable`] for that run.

// A build without either backend (Cargo features `sqlite`, `postgres`) keeps the shared code unused.
mod codec;
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code, unused_imports, unused_macros))]
mod commit_log;
pub mod encryption;
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
mod migrations;
#[cfg(feature = "postgres")]
mod pg_connections;
#[cfg(feature = "postgres")]
mod pg_groups;
#[cfg(feature = "postgres")]
mod pg_nodelay;
#[cfg(feature = "postgres")]
pub mod pg_notify;
#[cfg(feature = "postgres")]
mod pg_targets;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
mod taps;

pub use encryption::{DataKey, DataKeyError, DataKeys};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresStore, ScratchSchema, host_url};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;

use std::sync::Arc;
use tollgate_agent_core::{RunStore, StoreError};

/// How a store is opened, beyond its URL.
#[derive(Clone, Debug, Default)]
pub struct StoreOptions {
    /// Encrypt suspensions, decisions and event data at rest with these keys (the first seals new
    /// values, every one opens the values that name it). `None`: values are written in plaintext, and
    /// a sealed value read back is [`StoreError::Undecryptable`].
    pub data_keys: Option<Arc<DataKeys>>,
}

/// The URL with its password (`user:PASSWORD@`, `password=` parameter, as written or percent-encoded)
/// replaced by `***`, for messages about the store.
pub fn redact_url(url: &str) -> String {
    codec::Secrets::from_url(url).redact(url)
}

/// Opens the store a URL names: `sqlite://FILE` / `sqlite:///ABS/FILE` / `sqlite::memory:`, or
/// `postgres://…` / `postgresql://…`, without encryption.
pub async fn open(url: &str) -> Result<Arc<dyn RunStore>, StoreError> {
    open_with(url, StoreOptions::default()).await
}

/// Opens the store a URL names (see [`open`]) with `options`.
///
/// A URL of a backend this build leaves out (Cargo features `sqlite` and `postgres`) is a
/// [`StoreError::Database`] that names the feature to enable.
pub async fn open_with(url: &str, options: StoreOptions) -> Result<Arc<dyn RunStore>, StoreError> {
    if url.starts_with("sqlite:") {
        open_sqlite(url, options).await
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        open_postgres(url, options).await
    } else {
        // Only the scheme is echoed: the rest of a URL may hold a password.
        let scheme = url.split_once(':').map_or("(none)", |(scheme, _)| scheme);
        Err(StoreError::Database(format!(
            "unsupported store URL scheme `{scheme}`: expected sqlite://FILE or postgres://USER@HOST:PORT/DB"
        )))
    }
}

#[cfg(feature = "sqlite")]
async fn open_sqlite(url: &str, options: StoreOptions) -> Result<Arc<dyn RunStore>, StoreError> {
    Ok(Arc::new(sqlite::SqliteStore::open_with(url, options).await?))
}

#[cfg(not(feature = "sqlite"))]
async fn open_sqlite(_url: &str, _options: StoreOptions) -> Result<Arc<dyn RunStore>, StoreError> {
    Err(compiled_out("SQLite", "sqlite"))
}

#[cfg(feature = "postgres")]
async fn open_postgres(url: &str, options: StoreOptions) -> Result<Arc<dyn RunStore>, StoreError> {
    Ok(Arc::new(postgres::PostgresStore::open_with(url, options).await?))
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(_url: &str, _options: StoreOptions) -> Result<Arc<dyn RunStore>, StoreError> {
    Err(compiled_out("PostgreSQL", "postgres"))
}

/// The error for a URL of a backend this build leaves out.
#[cfg(not(all(feature = "sqlite", feature = "postgres")))]
fn compiled_out(backend: &str, feature: &str) -> StoreError {
    StoreError::Database(format!("this build has no {backend} support: enable the `{feature}` feature"))
}

#[cfg(test)]
mod tests {
    /// A URL of a backend this build leaves out is an error naming the feature, not a panic.
    #[cfg(not(all(feature = "sqlite", feature = "postgres")))]
    #[tokio::test]
    async fn a_compiled_out_backend_is_a_clear_error() {
        use tollgate_agent_core::StoreError;
        let missing = [
            (cfg!(feature = "sqlite"), "sqlite::memory:", "no SQLite support: enable the `sqlite` feature"),
            (
                cfg!(feature = "postgres"),
                "postgres://u:pw@127.0.0.1:1/db",
                "no PostgreSQL support: enable the `postgres` feature",
            ),
        ];
        for (_, url, expected) in missing.into_iter().filter(|(built, ..)| !built) {
            match super::open(url).await {
                Err(StoreError::Database(text)) => {
                    assert!(text.contains(expected), "{text}");
                    assert!(!text.contains("pw"), "{text}");
                }
                Err(other) => panic!("{url}: {other:?}"),
                Ok(_) => panic!("{url} opened"),
            }
        }
    }
}
