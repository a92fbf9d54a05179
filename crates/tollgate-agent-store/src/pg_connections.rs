//! The PostgreSQL store's connections between statements: kept by the store, not handed back to
//! sqlx's pool after every statement.
//!
//! sqlx tests each connection that comes back to its pool: the drop of a `PoolConnection` spawns a
//! task that pings it (a Sync message, then a wait for the server's ReadyForQuery), a guard for
//! connections that a cancelled future left in the middle of a message. That is one more round trip
//! after every statement, paid in both processes: in workload A on one node it was a ninth of the
//! node's CPU time, about as much as the statements themselves, and a wake-up of the database server's
//! backend each time.
//!
//! A connection whose statement finished — its answer read to the end, the server ready for the next
//! one, no transaction open — is in a known state, so the store keeps it here instead
//! ([`Held::finished`]) and the next statement takes it without a ping, the most recently used
//! first. Any other ending (an error, a cancelled future, a transaction that did not commit) drops the
//! connection, which takes sqlx's own path: pinged and returned, or closed. The pool's other rules
//! still apply: a connection kept here idle for [`PING_IF_IDLE_FOR`] or more goes back to the pool
//! (which pings it before its next use), and one kept for [`BACK_TO_THE_POOL_AFTER`] goes back after
//! its statement, so that the pool sees it again (its maximum lifetime). Every connection kept here
//! counts against the pool's size, so the store never opens more than it did.

use sqlx::pool::PoolConnection;
use sqlx::postgres::PgPool;
use sqlx::{PgConnection, Postgres};
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, SemaphorePermit};

/// A connection idle for at least this long is pinged before use (and replaced if dead).
pub(crate) const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

/// A connection taken from the pool this long ago goes back to it after its statement.
pub(crate) const BACK_TO_THE_POOL_AFTER: Duration = Duration::from_secs(60);

/// The pool, and the connections the store keeps between statements.
///
/// Every statement of the store takes its connection here, holding one of as many permits as the pool
/// has connections: a statement waiting for the pool itself could otherwise wait for ever while
/// the connections it waits for are kept here, idle, by statements that finished.
pub(crate) struct Connections {
    pool: PgPool,
    permits: Semaphore,
    /// How long a statement waits for a permit (then: [`sqlx::Error::PoolTimedOut`]).
    wait: Duration,
    kept: Mutex<Vec<Kept>>,
}

struct Kept {
    connection: PoolConnection<Postgres>,
    /// When it was taken from the pool.
    taken: Instant,
    /// When its last statement finished.
    used: Instant,
}

impl Connections {
    /// `pool` holds at most `size` connections; a statement waits at most `wait` for one.
    pub(crate) fn new(pool: PgPool, size: usize, wait: Duration) -> Connections {
        Connections { pool, permits: Semaphore::new(size), wait, kept: Mutex::default() }
    }

    /// A connection for a statement: a kept one used less than [`PING_IF_IDLE_FOR`] ago, or one from
    /// the pool (kept ones idle for longer go back to it first).
    pub(crate) async fn acquire(&self) -> Result<Held<'_>, sqlx::Error> {
        self.acquire_by(Instant::now() + self.wait).await
    }

    /// [`Connections::acquire`] for a statement that has waited since `since` already (in a queue of
    /// grouped statements): the wait for its connection ends where a wait begun then would have.
    pub(crate) async fn acquire_since(&self, since: Instant) -> Result<Held<'_>, sqlx::Error> {
        self.acquire_by(since + self.wait).await
    }

    async fn acquire_by(&self, deadline: Instant) -> Result<Held<'_>, sqlx::Error> {
        let deadline = tokio::time::Instant::from_std(deadline);
        let permit = match tokio::time::timeout_at(deadline, self.permits.acquire()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_closed)) => return Err(sqlx::Error::PoolClosed),
            Err(_elapsed) => return Err(sqlx::Error::PoolTimedOut),
        };
        let now = Instant::now();
        let (fresh, stale) = {
            let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            // The most recently used is last: if it is stale, so are all the others.
            match kept.pop() {
                Some(top) if now.duration_since(top.used) < PING_IF_IDLE_FOR => (Some(top), Vec::new()),
                Some(top) => {
                    let mut stale = std::mem::take(&mut *kept);
                    stale.push(top);
                    (None, stale)
                }
                None => (None, Vec::new()),
            }
        };
        // Dropped outside the lock: back to the pool, which pings each before its next use.
        drop(stale);
        if let Some(Kept { connection, taken, .. }) = fresh {
            return Ok(Held { connection, taken, home: self, _permit: permit });
        }
        // With a permit held, fewer than the pool's size of connections are in use or kept: the pool
        // has one, or is getting one back.
        let connection = match tokio::time::timeout_at(deadline, self.pool.acquire()).await {
            Ok(connection) => connection?,
            Err(_elapsed) => return Err(sqlx::Error::PoolTimedOut),
        };
        Ok(Held { connection, taken: Instant::now(), home: self, _permit: permit })
    }

    /// Gives every kept connection back to the pool, then closes the pool (waiting for connections in
    /// use to come back).
    pub(crate) async fn close(&self) {
        self.permits.close();
        drop(std::mem::take(&mut *self.kept.lock().unwrap_or_else(PoisonError::into_inner)));
        self.pool.close().await;
    }

    /// How many connections are kept between statements now.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl Drop for Connections {
    fn drop(&mut self) {
        let kept = std::mem::take(self.kept.get_mut().unwrap_or_else(PoisonError::into_inner));
        // A pool connection dropped hands itself back through a task on the current Tokio runtime; with
        // none (the store dropped after its runtime), sqlx would panic. Detached, each closes its socket.
        if tokio::runtime::Handle::try_current().is_err() {
            for Kept { connection, .. } in kept {
                drop(connection.detach());
            }
        }
    }
}

/// A connection in use by one statement (or one transaction). Dropped, it goes back to the pool
/// through sqlx's test; [`Held::finished`] keeps it for the next statement instead.
pub(crate) struct Held<'a> {
    connection: PoolConnection<Postgres>,
    taken: Instant,
    home: &'a Connections,
    _permit: SemaphorePermit<'a>,
}

impl Held<'_> {
    /// The statement (or transaction) finished cleanly: its answer was read to the end and no
    /// transaction is open, so the connection is kept for the next statement.
    pub(crate) fn finished(self) {
        let Held { connection, taken, home, _permit } = self;
        let used = Instant::now();
        if used.duration_since(taken) >= BACK_TO_THE_POOL_AFTER {
            return; // dropped: back to the pool
        }
        home.kept.lock().unwrap_or_else(PoisonError::into_inner).push(Kept { connection, taken, used });
    }
}

impl Deref for Held<'_> {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.connection
    }
}

impl DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.connection
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::postgres::PgPoolOptions;
    use std::sync::Arc;

    /// A pool of 4 on TOLLGATE_TEST_POSTGRES_URL; `None` (skip) without one, outside CI.
    fn pool() -> Option<PgPool> {
        let url = tollgate_agent_testkit::postgres_url()?;
        Some(PgPoolOptions::new().max_connections(4).connect_lazy(&url).unwrap_or_else(|e| panic!("{e}")))
    }

    async fn backend(connection: &mut PgConnection) -> Result<i32, sqlx::Error> {
        sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(connection).await
    }

    /// A finished statement's connection is kept and serves the next statement (the same server backend,
    /// no other taken from the pool); one that failed, or whose future was dropped mid-statement, or
    /// that stayed idle too long, goes back to the pool instead, and the next statement works.
    #[tokio::test]
    async fn finished_connections_are_kept_and_others_go_back_to_the_pool() {
        let Some(pool) = pool() else { return };
        let connections = Connections::new(pool.clone(), 4, Duration::from_secs(10));
        let mut first = connections.acquire().await.unwrap_or_else(|e| panic!("{e}"));
        let pid = backend(&mut first).await.unwrap_or_else(|e| panic!("{e}"));
        first.finished();
        assert_eq!(connections.kept(), 1);
        for _ in 0..20 {
            let mut again = connections.acquire().await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(connections.kept(), 0, "taken out while in use");
            assert_eq!(backend(&mut again).await.unwrap_or_else(|e| panic!("{e}")), pid, "the kept connection");
            again.finished();
        }
        assert_eq!(pool.size(), 1, "one connection served every statement");

        // A statement that failed: not kept.
        let mut failing = connections.acquire().await.unwrap_or_else(|e| panic!("{e}"));
        assert!(sqlx::query("SELECT 1 / 0").execute(&mut *failing).await.is_err());
        drop(failing);
        assert_eq!(connections.kept(), 0);

        // A future dropped in the middle of its statement: not kept, and the pool's test of it leaves
        // nothing behind for the next statement.
        let mut cancelled = connections.acquire().await.unwrap_or_else(|e| panic!("{e}"));
        let slow = sqlx::query("SELECT pg_sleep(1)").execute(&mut *cancelled);
        assert!(tokio::time::timeout(Duration::from_millis(100), slow).await.is_err());
        drop(cancelled);
        assert_eq!(connections.kept(), 0);
        let mut next = connections.acquire().await.unwrap_or_else(|e| panic!("{e}"));
        let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&mut *next).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(one, 1);
        next.finished();
        assert_eq!(connections.kept(), 1);

        // Idle for longer than PING_IF_IDLE_FOR: back to the pool at the next acquire.
        tokio::time::sleep(PING_IF_IDLE_FOR + Duration::from_millis(100)).await;
        let mut later = connections.acquire().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(connections.kept(), 0);
        backend(&mut later).await.unwrap_or_else(|e| panic!("{e}"));
        later.finished();

        connections.close().await;
        assert!(pool.is_closed());
        assert_eq!(pool.size(), 0, "closing gave back and closed the kept connections");
    }

    /// Four times as many statements at once as the pool has connections, again and again: each gets
    /// one in turn. Without the permits, statements left waiting in the pool itself waited for ever
    /// (well, for the pool's timeout) while finished ones kept every connection here.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn more_statements_than_connections_all_get_one() {
        let Some(pool) = pool() else { return };
        let connections = Arc::new(Connections::new(pool.clone(), 4, Duration::from_secs(10)));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let connections = connections.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..25 {
                    let mut held = connections.acquire().await?;
                    sqlx::query("SELECT pg_sleep(0.001)").execute(&mut *held).await?;
                    held.finished();
                }
                Ok::<(), sqlx::Error>(())
            }));
        }
        for task in tasks {
            task.await.unwrap_or_else(|e| panic!("{e}")).unwrap_or_else(|e| panic!("{e}"));
        }
        assert!(pool.size() <= 4, "{}", pool.size());
        connections.close().await;
    }

    /// A statement that has already waited (queued for a place among grouped statements) waits for a
    /// connection only for what is left of the common wait: with every connection taken, one that
    /// began longer ago than the wait fails at once, and one that began just now gets a connection
    /// when one comes back.
    #[tokio::test]
    async fn a_statement_that_waited_already_waits_only_for_the_rest() {
        let Some(pool) = pool() else { return };
        let connections = Arc::new(Connections::new(pool, 1, Duration::from_secs(10)));
        let held = connections.acquire().await.unwrap_or_else(|e| panic!("{e}"));
        let began = Instant::now();
        let late = connections.acquire_since(Instant::now() - Duration::from_secs(11)).await;
        assert!(matches!(late, Err(sqlx::Error::PoolTimedOut)), "{:?}", late.err());
        assert!(began.elapsed() < Duration::from_secs(5), "it did not wait for a connection");
        let waiting = tokio::spawn({
            let connections = Arc::clone(&connections);
            async move { connections.acquire_since(Instant::now()).await.map(|held| held.finished()) }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "it waits while the one connection is taken");
        held.finished();
        waiting.await.unwrap_or_else(|e| panic!("{e}")).unwrap_or_else(|e| panic!("{e}"));
        connections.close().await;
    }

    /// Dropped after its runtime is gone, the list closes its connections without a runtime (sqlx's
    /// way back to the pool needs one and would panic).
    #[test]
    fn a_list_dropped_without_a_runtime_does_not_panic() {
        let Some(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build().ok() else {
            panic!("no runtime");
        };
        let connections = runtime.block_on(async {
            let pool = pool()?;
            let connections = Connections::new(pool, 4, Duration::from_secs(10));
            let mut held = connections.acquire().await.unwrap_or_else(|e| panic!("{e}"));
            backend(&mut held).await.unwrap_or_else(|e| panic!("{e}"));
            held.finished();
            Some(connections)
        });
        drop(runtime);
        let Some(connections) = connections else { return };
        assert_eq!(connections.kept(), 1);
        drop(connections);
    }
}
