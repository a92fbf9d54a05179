//! # tollgate-agent-store
//!
//! The two [`RunStore`] backends: SQLite (embedded default: one file, WAL, full durability) and
//! PostgreSQL (several Tollgate nodes sharing one database), opened from a URL with [`open`].
//!
//! ```
//! # use serde_json::json;
//! # use tollgate_agent_core::{Clock, EventKind, IntegrityCheck, NewEvent, RunId, RunRecord, RunStatus, SystemClock};
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # #[cfg(feature = "sqlite")] {
//! let store = tollgate_agent_store::open("sqlite::memory:").await?; // or sqlite://FILE, postgres://…
//! let now = SystemClock.now();
//! let id = RunId::from("run-1");
//! let run = RunRecord::new(id.clone(), "writer".into(), "Save a note".into(), "alice".into(), now, None);
//! let started = NewEvent { at: now, kind: EventKind::RunStarted, round: 0, data: json!({"input": "Save a note"}) };
//! store.create(run, vec![started]).await?; // the run and its first events, in one transaction
//!
//! let run = store.get(&id).await?;
//! assert_eq!((run.status(), run.last_seq), (RunStatus::Queued, 1));
//! let events = store.events(&id, 0, 100).await?;
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
//! - Grants ([`Grants`](tollgate_agent_core::Grants)): a `grants` row per grant (its `match` as JSON
//!   text, times as Unix milliseconds), listed newest first by id like runs, at most 1000 a page. A
//!   revocation is a compare-and-set on an active grant; the grants a vote remembers are inserted in the
//!   vote's own transaction. A grant row that cannot be decoded is [`StoreError::CorruptDatabase`]
//!   naming it, from every read of it (the listing and the gate's read included: a grant is never
//!   guessed at). Grants are not sealed by encryption at rest.
//! - Database errors are named by the database's own code, never its text: a full disk is
//!   [`StoreError::DiskFull`], a database that refuses writes [`StoreError::ReadOnly`], damaged bytes
//!   [`StoreError::Corrupt`] for the run whose row or events they are in (that run fails alone) or
//!   [`StoreError::CorruptDatabase`], a connection that fails or a lock held past the busy timeout
//!   [`StoreError::Unreachable`] (retryable), anything else [`StoreError::Database`] (retryable).
//!   None contains the password of the URL the store was opened with.
//! - [`StoreHealth::probe_write`](tollgate_agent_core::StoreHealth::probe_write) commits a write to the
//!   one-row `health` table (for `/readyz`);
//!   [`StoreHealth::check_integrity`](tollgate_agent_core::StoreHealth::check_integrity) is SQLite's
//!   `quick_check` / `integrity_check`, or a read of every table on PostgreSQL.
//! - [`ChangeFeed::changes`](tollgate_agent_core::ChangeFeed::changes) on PostgreSQL: the changes other
//!   nodes commit, announced by each write through LISTEN/NOTIFY on one dedicated connection per store
//!   (see [`pg_notify`]); SQLite announces none.
//! - Optional encryption at rest ([`StoreOptions::data_keys`], see [`encryption`]): the run's
//!   suspension and decisions and each event's data are stored sealed with AES-256-GCM, bound to the
//!   run's version (and an event's seq and chain form), below the hash chain, which is then keyed
//!   (HMAC-SHA256 with a key derived from the first data key); a value this store cannot decrypt, or
//!   plaintext where a sealed value belongs, is [`StoreError::Undecryptable`] for that run.
//!   [`seal_unsealed`] (`tollgate seal`) seals what earlier versions left unsealed.
//! - [`StoreOptions::secure_delete`]: SQLite zeroes what it deletes or overwrites.

// A build without either backend (Cargo features `sqlite`, `postgres`) keeps the shared code unused.
mod codec;
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code, unused_imports, unused_macros))]
mod commit_log;
pub mod encryption;
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code, unused_imports, unused_macros))]
mod grant_rows;
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
mod pg_sealing;
#[cfg(feature = "postgres")]
mod pg_targets;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub mod seal;
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
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Encrypt suspensions, decisions and event data at rest with these keys (the first seals new
    /// values, every one opens the values that name it). `None`: values are written in plaintext, and
    /// a sealed value read back is [`StoreError::Undecryptable`].
    pub data_keys: Option<Arc<DataKeys>>,
    /// SQLite only: `PRAGMA secure_delete = ON` on every connection, so the bytes of a deleted or
    /// overwritten value are zeroed in the file instead of staying in its free space until a `VACUUM`.
    /// Set below privacy level `full` (where the events keep no content but purged and rewritten
    /// rows, suspensions with their arguments included, still held it). PostgreSQL keeps dead tuples
    /// until `VACUUM` whatever this says.
    pub secure_delete: bool,
    /// PostgreSQL only: how long a statement waits for a connection (one of the pool's, or a new one,
    /// connecting included) before it fails with [`StoreError::Unreachable`] (`[store]
    /// connect_timeout`, default [`DEFAULT_CONNECT_TIMEOUT`]). While the database is down or hung, each
    /// operation fails after this wait instead of hanging.
    pub connect_timeout: std::time::Duration,
}

/// [`StoreOptions::connect_timeout`] by default.
pub const DEFAULT_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions { data_keys: None, secure_delete: false, connect_timeout: DEFAULT_CONNECT_TIMEOUT }
    }
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

/// Seals, as the first data key of `options`, every value encryption at rest refuses to read in the
/// store `url` names: plaintext written before encryption was on, and a run's column sealed as
/// `enc:v1` (see [`seal`] for what it refuses and why). It walks the runs in batches of `batch` runs,
/// each one transaction, calling `progress` with what each batch did, and answers the total. Running it
/// again seals nothing more.
///
/// # Errors
/// Without data keys, a [`StoreError::Database`] saying so; the store's errors (a batch that fails
/// writes nothing, the batches before it stay sealed).
pub async fn seal_unsealed(
    url: &str,
    options: StoreOptions,
    batch: u32,
    mut progress: impl FnMut(&seal::SealReport),
) -> Result<seal::SealReport, StoreError> {
    if options.data_keys.is_none() {
        return Err(seal::needs_keys());
    }
    let batch = batch.max(1);
    if url.starts_with("sqlite:") {
        #[cfg(feature = "sqlite")]
        {
            let store = sqlite::SqliteStore::open_with(url, options).await?;
            let walked = in_batches(&mut progress, |after| std::future::ready(store.seal_batch(&after, batch))).await;
            store.close().await;
            return walked;
        }
        #[cfg(not(feature = "sqlite"))]
        return Err(compiled_out("SQLite", "sqlite"));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        {
            let store = postgres::PostgresStore::open_with(url, options).await?;
            let walked = in_batches(&mut progress, |after| {
                let store = &store;
                async move { store.seal_batch(&after, batch).await }
            })
            .await;
            store.close().await;
            return walked;
        }
        #[cfg(not(feature = "postgres"))]
        return Err(compiled_out("PostgreSQL", "postgres"));
    }
    // Opening reports the unsupported scheme as it does for every other use.
    open_with(url, options).await.map(drop)?;
    Ok(seal::SealReport::default())
}

/// Runs `seal_batch` from the first run on, each time after the last run the previous batch reached,
/// until a batch says it reached the end; answers the total of the batches.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
async fn in_batches<F, Fut>(
    progress: &mut impl FnMut(&seal::SealReport),
    mut seal_batch: F,
) -> Result<seal::SealReport, StoreError>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Result<(seal::SealReport, Option<String>), StoreError>>,
{
    let mut total = seal::SealReport::default();
    let mut after = String::new();
    loop {
        let (done, next) = seal_batch(after).await?;
        progress(&done);
        total.add(done);
        match next {
            Some(next) => after = next,
            None => return Ok(total),
        }
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
