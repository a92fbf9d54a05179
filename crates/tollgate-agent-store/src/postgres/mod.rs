//! The PostgreSQL backend, for several Tollgate nodes sharing one database.
//!
//! Every write is one statement, atomic by itself, so that a write costs as few round trips as it can:
//! a create inserts the run and its first events in one statement; a transition or an append reads the
//! run, plans the write in Rust (the transition rules and the hash chain live there), then writes the
//! row and all of its events in one statement that applies only if the row is still as it was read —
//! same `version`, `last_seq` and `lease_expires_at`. Every change to a run's row changes one of those
//! (a transition bumps the version; an append, which does not, moves the chain head or the lease), so
//! "unchanged" means the write was planned on the row as it is when it commits: of two resumes with the
//! same version guard exactly one passes, and a takeover planned on a lease renewed since loses. A
//! write whose row changed meanwhile is planned again once, on the row locked (`SELECT … FOR UPDATE`
//! in a transaction), where it cannot lose again: contention costs a retry, never a wrong answer.
//! Each store also remembers the last row it read or wrote of each run (a bounded cache): a transition or
//! an append on a remembered run is planned on that row and goes straight to its conditional statement,
//! one round trip in all. If another node changed the row meanwhile the statement writes nothing, the
//! entry is dropped, and the write takes the path above (read, write, locked retry). The cache is a
//! guess, never a guard: an answer planned on it is returned only once its statement applied, and a
//! plan refused on it (a guard, a transition rule) is made again on the row read.
//! A vote that makes grants (`Transition::Vote`'s `remember`) is the exception: it takes the locked
//! path at once, its grants inserted in the same transaction as the vote (`rows.rs`).
//! Under load, the reads, creates and transitions of different runs share one statement per kind, each
//! answered as if alone (`pg_groups.rs`); a lone operation keeps the statement described here.
//! Statements take their connections from the store's connection list (`pg_connections.rs`), which
//! keeps those that finished cleanly for the next statement rather than returning them through sqlx's
//! ping.
//! Purge locks its victims with `FOR UPDATE SKIP LOCKED`, so it never waits for, nor deletes from
//! under, a run that is being changed.
//!
//! Tables live in the connection's current schema; choose another with the URL parameter
//! `options[search_path]=NAME` (the schema must exist).
//!
//! The store's concerns, one file each, as the traits of [`tollgate_agent_core::store`] divide them:
//! `rows.rs` (`RunRows`: create, read, list and change a run; the grouped statements and the row
//! cache), `log.rs` (`EventLog`: a run's events), `queue.rs` (`RunQueue`: claims), `schedules.rs`
//! (`Schedules`: due runs, purge), `health.rs` (`StoreHealth`: probe, integrity, counts), `feed.rs`
//! (`ChangeFeed`: the commit log, its readers, announcements and taps), `grants.rs` (`Grants`: standing
//! approvals; a vote's are inserted in the vote's transaction, see `rows.rs`) and `scratch.rs`
//! ([`ScratchSchema`]). This file holds the store itself: opening, the pool, migrations, and what the
//! concerns share.

mod feed;
mod grants;
mod health;
mod log;
mod queue;
mod rows;
mod schedules;
mod scratch;

pub use scratch::ScratchSchema;

use crate::StoreOptions;
use crate::codec::{Columns, RunRow, Secrets, database_error, run_error};
use crate::encryption::DataKeys;
use crate::migrations::{self, Migration};
use crate::pg_connections::{Connections, Held, PING_IF_IDLE_FOR};
use crate::pg_groups::Groups;
use crate::pg_nodelay;
use crate::pg_notify::{self, Announcements};
use crate::pg_targets::Targets;
use crate::taps::Taps;
use rows::{PlannedCreate, PlannedTransition, ReadRun, RowCache};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{Connection, Executor, PgConnection, Row};
use std::sync::Arc;
use std::time::Duration;
use tollgate_agent_core::run::RunRecord;
use tollgate_agent_core::store::StoreError;

impl Columns for PgRow {
    fn text(&self, index: usize) -> Result<String, String> {
        self.try_get(index).map_err(|e| e.to_string())
    }

    fn optional_text(&self, index: usize) -> Result<Option<String>, String> {
        self.try_get(index).map_err(|e| e.to_string())
    }

    fn int(&self, index: usize) -> Result<i64, String> {
        self.try_get(index).map_err(|e| e.to_string())
    }

    fn optional_int(&self, index: usize) -> Result<Option<i64>, String> {
        self.try_get(index).map_err(|e| e.to_string())
    }
}

/// The schema changes of this backend, oldest first.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "runs_and_events",
        sql: include_str!("../../migrations/postgres/0001_runs_and_events.sql"),
    },
    Migration { version: 2, name: "health", sql: include_str!("../../migrations/postgres/0002_health.sql") },
    Migration {
        version: 3,
        name: "run_metadata",
        sql: include_str!("../../migrations/postgres/0003_run_metadata.sql"),
    },
    Migration {
        version: 4,
        name: "run_notifications",
        sql: include_str!("../../migrations/postgres/0004_run_notifications.sql"),
    },
    Migration {
        version: 5,
        name: "notify_only_when_listened",
        sql: include_str!("../../migrations/postgres/0005_notify_only_when_listened.sql"),
    },
    Migration {
        version: 6,
        name: "listeners_table",
        sql: include_str!("../../migrations/postgres/0006_listeners_table.sql"),
    },
    Migration {
        version: 7,
        name: "events_without_foreign_key",
        sql: include_str!("../../migrations/postgres/0007_events_without_foreign_key.sql"),
    },
    Migration {
        version: 8,
        name: "fewer_run_indexes",
        sql: include_str!("../../migrations/postgres/0008_fewer_run_indexes.sql"),
    },
    Migration {
        version: 9,
        name: "event_batches",
        sql: include_str!("../../migrations/postgres/0009_event_batches.sql"),
    },
    Migration {
        version: 10,
        name: "announce_in_the_write",
        sql: include_str!("../../migrations/postgres/0010_announce_in_the_write.sql"),
    },
    Migration { version: 11, name: "commit_log", sql: include_str!("../../migrations/postgres/0011_commit_log.sql") },
    Migration { version: 12, name: "queue_index", sql: include_str!("../../migrations/postgres/0012_queue_index.sql") },
    Migration { version: 13, name: "approvals", sql: include_str!("../../migrations/postgres/0013_approvals.sql") },
    Migration { version: 14, name: "grants", sql: include_str!("../../migrations/postgres/0014_grants.sql") },
    Migration {
        version: 15,
        name: "grant_versions",
        sql: include_str!("../../migrations/postgres/0015_grant_versions.sql"),
    },
    Migration {
        version: 16,
        name: "waiting_changed_index",
        sql: include_str!("../../migrations/postgres/0016_waiting_changed_index.sql"),
    },
    Migration { version: 17, name: "run_trace", sql: include_str!("../../migrations/postgres/0017_run_trace.sql") },
    Migration {
        version: 18,
        name: "run_trace_parent",
        sql: include_str!("../../migrations/postgres/0018_run_trace_parent.sql"),
    },
];

/// Connections per node.
const POOL_SIZE: u32 = 16;

/// Statements of one kind (reads of a run, creates, transitions) under way at once; operations beyond
/// wait and go together in the next (see [`crate::pg_groups`]). Two rather than four: larger groups,
/// fewer statements and commits per run, and more of workload A with 32 in flight (docs/nodes.md).
const GROUPS_AT_ONCE: usize = 2;

/// The PostgreSQL [`RunStore`](tollgate_agent_core::RunStore): a connection pool, one statement per
/// write guarded by a compare-and-set on the row as read, row locks when that loses a race.
#[derive(Clone)]
pub struct PostgresStore {
    /// The pool, and the connections kept between statements (see [`crate::pg_connections`]).
    connections: Arc<Connections>,
    secrets: Secrets,
    /// Seals and opens the encrypted columns; `None`: plaintext.
    keys: Option<Arc<DataKeys>>,
    /// The changes other nodes commit (see [`crate::pg_notify`]).
    feed: Arc<Announcements>,
    /// The rows writes plan on before reading (see [`RowCache`]).
    cache: Arc<RowCache>,
    /// Handed each commit's events (see
    /// [`ChangeFeed::tap_commits`](tollgate_agent_core::store::ChangeFeed::tap_commits)).
    taps: Arc<Taps>,
    /// Creates and transitions waiting for a statement of their kind (see [`crate::pg_groups`]).
    reads: Arc<Groups<ReadRun, Option<RunRow>>>,
    creates: Arc<Groups<PlannedCreate, Option<RunRecord>>>,
    transitions: Arc<Groups<PlannedTransition, Option<RunRecord>>>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").finish_non_exhaustive()
    }
}

/// The pool of one host: `TCP_NODELAY` on each new connection, and with several hosts a check that the
/// server is still what the store needs (after a failover a host may answer as a standby: such a
/// connection is refused, and the pool tries again while the store looks for the new primary).
///
/// `wait` bounds how long a statement waits for a connection, connecting included: sqlx retries a
/// refused connection until then, so a database that restarts within it serves the statement.
fn pool_of(options: PgConnectOptions, targets: Arc<Targets>, wait: Duration) -> sqlx::PgPool {
    // A Unix socket has no Nagle delay (see `pg_nodelay`).
    let tcp_port = options.get_socket().is_none().then(|| options.get_port());
    PgPoolOptions::new()
        .after_connect(move |connection, _| {
            let targets = Arc::clone(&targets);
            Box::pin(async move {
                if let Some(port) = tcp_port {
                    pg_nodelay::set_nodelay_to(port).await;
                }
                if targets.several() && !targets.accepts(connection).await? {
                    return Err(sqlx::Error::Protocol("this PostgreSQL host is no longer what the store needs".into()));
                }
                Ok(())
            })
        })
        .max_connections(POOL_SIZE)
        .acquire_timeout(wait)
        // sqlx's default pings every connection it hands out: a round trip before each write.
        // Ping only one that has been idle for a while (a server restarted or a firewall that
        // dropped it meanwhile); one that answered moments ago runs the same risk as after a ping.
        .test_before_acquire(false)
        .before_acquire(|connection, meta| {
            Box::pin(async move { Ok(meta.idle_for < PING_IF_IDLE_FOR || connection.ping().await.is_ok()) })
        })
        .connect_lazy_with(options)
}

/// The URL of the one host of `url` a store would use now: with several hosts (libpq's
/// `HOST1:PORT,HOST2:PORT`), the first in order that is what `target_session_attrs` asks (by default,
/// writable), as a URL naming that host alone (and without `target_session_attrs`); with one host, that
/// host's URL, once it answered (and, with `target_session_attrs`, will do). For tools that need a
/// single server, such as `tollgate bench --store` making its scratch schemas; a store itself takes the
/// whole list and follows a failover.
///
/// # Errors
/// A URL that cannot be read ([`StoreError::Database`]); no host that will do ([`StoreError::Unreachable`],
/// with several hosts naming each and why; never the password).
pub async fn host_url(url: &str) -> Result<String, StoreError> {
    let secrets = Secrets::from_url(url);
    let targets = Targets::parse(url).map_err(|e| database_error(&secrets, "cannot read the PostgreSQL URL", &e))?;
    let (index, connection) =
        targets.select().await.map_err(|e| database_error(&secrets, "cannot connect to PostgreSQL", &e))?;
    crate::pg_targets::close_quietly(connection).await;
    Ok(targets.url(index).to_owned())
}

impl PostgresStore {
    /// Connects to `postgres://USER[:PASSWORD]@HOST:PORT/DB[?…]` and applies the embedded migrations
    /// (under an advisory lock, so nodes starting together migrate once). The URL may name several
    /// hosts, libpq's way (`HOST1:PORT,HOST2:PORT`, with `target_session_attrs`): the store uses the
    /// first it can write to and follows a failover (see `pg_targets`).
    ///
    /// # Errors
    /// [`StoreError::NewerSchema`] when the database was written by a newer Tollgate;
    /// when it cannot be reached or migrated, the error its SQLSTATE names ([`StoreError::Unreachable`],
    /// [`StoreError::ReadOnly`], ...; never containing the password).
    pub async fn open(url: &str) -> Result<PostgresStore, StoreError> {
        PostgresStore::open_with(url, StoreOptions::default()).await
    }

    /// [`PostgresStore::open`] with `options` (data keys for encryption at rest).
    ///
    /// # Errors
    /// As [`PostgresStore::open`].
    pub async fn open_with(url: &str, store_options: StoreOptions) -> Result<PostgresStore, StoreError> {
        let secrets = Secrets::from_url(url);
        let node = pg_notify::node_tag();
        let targets =
            Targets::parse(url).map_err(|e| database_error(&secrets, "invalid PostgreSQL URL", &e))?.map(|options| {
                options
                    .application_name("tollgate")
                    // The tag each write copies into its notification, so this store skips its own.
                    .options([(pg_notify::NODE_SETTING, node.as_str())])
            });
        let targets = Arc::new(targets);
        // One direct connection first: an unreachable server or a bad password is reported at once
        // (a pool would retry until its acquire timeout), and it applies the migrations. With several
        // hosts, it is to the first that will do, which the store then uses.
        let (index, mut connection) =
            targets.select().await.map_err(|e| database_error(&secrets, "cannot connect to PostgreSQL", &e))?;
        targets.choose(index);
        let migrated = migrate(&mut connection, &secrets).await;
        if let Err(error) = connection.close().await {
            tracing::debug!(%error, "cannot close the migration connection cleanly");
        }
        migrated?;
        let feed = Arc::new(Announcements::new(node, Arc::clone(&targets)));
        let make_pool = {
            let targets = Arc::clone(&targets);
            let wait = store_options.connect_timeout;
            Box::new(move |options: PgConnectOptions| pool_of(options, Arc::clone(&targets), wait))
        };
        let connections =
            Arc::new(Connections::new(targets, make_pool, POOL_SIZE as usize, store_options.connect_timeout));
        Ok(PostgresStore {
            connections,
            secrets,
            keys: store_options.data_keys,
            feed,
            cache: Arc::default(),
            taps: Arc::default(),
            reads: Arc::new(Groups::new(GROUPS_AT_ONCE)),
            creates: Arc::new(Groups::new(GROUPS_AT_ONCE)),
            transitions: Arc::new(Groups::new(GROUPS_AT_ONCE)),
        })
    }

    /// The tag this store's writes carry in their change notifications (the session setting
    /// `tollgate.node`), unique to this store among the nodes of a database.
    pub fn node(&self) -> &str {
        self.feed.node()
    }

    /// Closes every connection of the pool.
    pub async fn close(self) {
        self.connections.close().await;
    }

    /// A connection for the next statement (see [`crate::pg_connections`]).
    pub(crate) async fn connection(&self) -> Result<Held<'_>, StoreError> {
        self.connections.acquire().await.map_err(self.db_error("cannot reach PostgreSQL"))
    }

    /// The port the server sees this store's next statement come from (`inet_client_port()`).
    #[cfg(test)]
    pub(crate) async fn client_port(&self) -> Result<i32, StoreError> {
        let mut connection = self.connection().await?;
        let port = sqlx::query_scalar("SELECT inet_client_port()")
            .fetch_one(&mut *connection)
            .await
            .map_err(self.db_error("cannot read the client port"))?;
        connection.finished();
        Ok(port)
    }

    fn keys(&self) -> Option<&DataKeys> {
        self.keys.as_deref()
    }

    /// The data keys, for the seal migration (`crate::pg_sealing`).
    pub(crate) fn data_keys(&self) -> Option<&DataKeys> {
        self.keys()
    }

    /// Forgets the row this store remembers for run `id` (its next write reads it again).
    pub(crate) fn forget_row(&self, id: &str) {
        self.cache.remove(id);
    }

    pub(crate) fn db_error<'a>(&'a self, context: &'a str) -> impl Fn(sqlx::Error) -> StoreError + 'a {
        move |e| database_error(&self.secrets, context, &e)
    }

    /// [`PostgresStore::db_error`] for a read of run `id`: corrupted data met there is that run's.
    fn run_failed<'a>(&'a self, context: &'a str, id: &'a str) -> impl Fn(sqlx::Error) -> StoreError + 'a {
        move |e| run_error(&self.secrets, context, id, &e)
    }
}

/// Applies the migrations this build knows, in one transaction, under an advisory lock (per schema)
/// so that nodes starting together migrate once.
async fn migrate(connection: &mut PgConnection, secrets: &Secrets) -> Result<(), StoreError> {
    let error = |e: sqlx::Error| database_error(secrets, "cannot migrate the PostgreSQL database", &e);
    let mut tx = connection.begin().await.map_err(error)?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('tollgate_migrations:' || current_schema()))")
        .execute(&mut *tx)
        .await
        .map_err(error)?;
    tx.execute(migrations::CREATE_TABLE).await.map_err(error)?;
    let found: Option<i64> = sqlx::query_scalar(migrations::SELECT_VERSION).fetch_one(&mut *tx).await.map_err(error)?;
    for migration in migrations::to_apply(MIGRATIONS, found.unwrap_or(0))? {
        tx.execute(sqlx::raw_sql(migration.sql)).await.map_err(error)?;
        sqlx::query("INSERT INTO tollgate_migrations (version, name, applied_at) VALUES ($1, $2, $3)")
            .bind(migration.version)
            .bind(migration.name)
            .bind(migrations::now_millis())
            .execute(&mut *tx)
            .await
            .map_err(error)?;
    }
    tx.commit().await.map_err(error)
}
