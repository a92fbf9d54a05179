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
//!
//! When the store's URL names several hosts ([`crate::pg_targets`]), the pool is that of the host in
//! use. A statement that does not finish cleanly, or a connection that takes over
//! [`SLOW_CONNECTION`] to come, has the store check (at most once per [`CHECK_AT_MOST_EVERY`], one
//! check at a time) which host it should use; when that is another host, a new pool for it replaces the
//! old one, which closes once its connections in use come back, and no connection of the old host is
//! kept or handed out again. A statement waiting for a connection asks again each
//! [`SLOW_CONNECTION`], of the pool in use then, so it moves to the new host as soon as the store
//! does (not after its whole wait on the old one). It counts its moves, and the checks that found no
//! host would do, for `/metrics` ([`Connections::hosts`]).

use crate::pg_targets::{Targets, close_quietly};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::{PgConnection, Postgres};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, SemaphorePermit};
use tollgate_agent_core::StoreHosts;

/// A connection idle for at least this long is pinged before use (and replaced if dead).
pub(crate) const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

/// A connection taken from the pool this long ago goes back to it after its statement.
pub(crate) const BACK_TO_THE_POOL_AFTER: Duration = Duration::from_secs(60);

/// With several hosts: a connection that takes this long to come has the store check its host.
pub(crate) const SLOW_CONNECTION: Duration = Duration::from_secs(1);

/// With several hosts: checks of which host to use are this far apart at least.
pub(crate) const CHECK_AT_MOST_EVERY: Duration = Duration::from_secs(1);

/// Makes the pool of one host.
pub(crate) type MakePool = Box<dyn Fn(PgConnectOptions) -> PgPool + Send + Sync>;

/// The pool, and the connections the store keeps between statements.
///
/// Every statement of the store takes its connection here, holding one of as many permits as the pool
/// has connections: a statement waiting for the pool itself could otherwise wait for ever while
/// the connections it waits for are kept here, idle, by statements that finished.
pub(crate) struct Connections {
    /// The pool of the host in use, and its generation (one more at each change of host).
    pool: Mutex<(u64, PgPool)>,
    make_pool: MakePool,
    targets: Arc<Targets>,
    permits: Semaphore,
    /// How long a statement waits for a permit (then: [`sqlx::Error::PoolTimedOut`]).
    wait: Duration,
    kept: Mutex<Vec<Kept>>,
    /// A check of the host is under way.
    checking: AtomicBool,
    /// When the last check began.
    checked: Mutex<Option<Instant>>,
    /// Moves to another host since the store opened.
    moves: AtomicU64,
    /// Checks that found no host would do.
    none_would_do: AtomicU64,
}

struct Kept {
    connection: PoolConnection<Postgres>,
    /// The generation of the pool it came from.
    generation: u64,
    /// When it was taken from the pool.
    taken: Instant,
    /// When its last statement finished.
    used: Instant,
}

impl Connections {
    /// The pool of `targets`' host in use, made by `make_pool`, holds at most `size` connections; a
    /// statement waits at most `wait` for one.
    pub(crate) fn new(targets: Arc<Targets>, make_pool: MakePool, size: usize, wait: Duration) -> Connections {
        let pool = make_pool(targets.current());
        Connections {
            pool: Mutex::new((0, pool)),
            make_pool,
            targets,
            permits: Semaphore::new(size),
            wait,
            kept: Mutex::default(),
            checking: AtomicBool::new(false),
            checked: Mutex::new(None),
            moves: AtomicU64::new(0),
            none_would_do: AtomicU64::new(0),
        }
    }

    /// The pool in use and its generation.
    fn pool(&self) -> (u64, PgPool) {
        self.pool.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The generation of the pool in use (without a copy of the pool).
    fn generation(&self) -> u64 {
        self.pool.lock().unwrap_or_else(PoisonError::into_inner).0
    }

    /// A connection for a statement: a kept one used less than [`PING_IF_IDLE_FOR`] ago, or one from
    /// the pool (kept ones idle for longer go back to it first).
    pub(crate) async fn acquire(self: &Arc<Self>) -> Result<Held<'_>, sqlx::Error> {
        self.acquire_by(Instant::now() + self.wait).await
    }

    /// [`Connections::acquire`] for a statement that has waited since `since` already (in a queue of
    /// grouped statements): the wait for its connection ends where a wait begun then would have.
    pub(crate) async fn acquire_since(self: &Arc<Self>, since: Instant) -> Result<Held<'_>, sqlx::Error> {
        self.acquire_by(since + self.wait).await
    }

    async fn acquire_by(self: &Arc<Self>, deadline: Instant) -> Result<Held<'_>, sqlx::Error> {
        let deadline = tokio::time::Instant::from_std(deadline);
        let permit = match tokio::time::timeout_at(deadline, self.permits.acquire()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_closed)) => return Err(sqlx::Error::PoolClosed),
            Err(_elapsed) => return Err(sqlx::Error::PoolTimedOut),
        };
        let now = Instant::now();
        let generation = self.generation();
        let (fresh, stale) = {
            let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            // Those of a host no longer in use go (back to their closing pool).
            let mut stale: Vec<Kept> = Vec::new();
            if kept.iter().any(|k| k.generation != generation) {
                let (current, old): (Vec<Kept>, Vec<Kept>) =
                    std::mem::take(&mut *kept).into_iter().partition(|k| k.generation == generation);
                *kept = current;
                stale = old;
            }
            // The most recently used is last: if it is stale, so are all the others.
            match kept.pop() {
                Some(top) if now.duration_since(top.used) < PING_IF_IDLE_FOR => (Some(top), stale),
                Some(top) => {
                    stale.extend(std::mem::take(&mut *kept));
                    stale.push(top);
                    (None, stale)
                }
                None => (None, stale),
            }
        };
        // Dropped outside the lock: back to the pool, which pings each before its next use.
        drop(stale);
        if let Some(Kept { connection, taken, generation, .. }) = fresh {
            return Ok(Held::new(connection, generation, taken, self, permit));
        }
        // With a permit held, fewer than the pool's size of connections are in use or kept: the pool
        // has one, or is getting one back. (Its wait is boxed: sqlx's is some 15 KB, which would make
        // every future that acquires — every statement's — as large, and copied whole each time one is
        // boxed, though the connection kept above serves nearly all of them.)
        let (mut generation, mut pool) = self.pool();
        loop {
            let acquired = if self.targets.several() {
                let slow_at = (tokio::time::Instant::now() + SLOW_CONNECTION).min(deadline);
                match tokio::time::timeout_at(slow_at, Box::pin(pool.acquire())).await {
                    Err(_slow) if slow_at < deadline => {
                        // Slow (with a permit held, the pool is connecting, not full): the store looks
                        // for its host, and this waits again, each second, on whichever pool is in use.
                        self.suspect();
                        (generation, pool) = self.pool();
                        continue;
                    }
                    acquired => acquired,
                }
            } else {
                tokio::time::timeout_at(deadline, Box::pin(pool.acquire())).await
            };
            match acquired {
                Ok(Ok(connection)) => {
                    return Ok(Held::new(connection, generation, Instant::now(), self, permit));
                }
                // The pool was replaced (another host) while this waited: wait on the new one.
                Ok(Err(sqlx::Error::PoolClosed)) if self.generation() != generation => {
                    (generation, pool) = self.pool();
                }
                Ok(Err(error)) => return Err(error),
                Err(_elapsed) => return Err(sqlx::Error::PoolTimedOut),
            }
        }
    }

    /// With several hosts: checks, in a task of its own, which host the store should use, and moves to
    /// it when it is another (see the module's documentation). Does nothing with one host, while a
    /// check is under way, or within [`CHECK_AT_MOST_EVERY`] of the last.
    pub(crate) fn suspect(self: &Arc<Self>) {
        if !self.targets.several() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        {
            let mut checked = self.checked.lock().unwrap_or_else(PoisonError::into_inner);
            if checked.is_some_and(|at| at.elapsed() < CHECK_AT_MOST_EVERY) {
                return;
            }
            if self.checking.swap(true, Ordering::AcqRel) {
                return;
            }
            *checked = Some(Instant::now());
        }
        let connections = Arc::clone(self);
        runtime.spawn(async move {
            let old_pool = connections.check().await;
            connections.checking.store(false, Ordering::Release);
            // Waits for the old host's connections in use to come back, then closes them.
            if let Some(old_pool) = old_pool {
                old_pool.close().await;
            }
        });
    }

    /// Finds the host to use and moves there if it is another: answers the pool it replaced.
    async fn check(&self) -> Option<PgPool> {
        let (index, connection) = match self.targets.select().await {
            Ok(found) => found,
            Err(error) => {
                self.none_would_do.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, "no PostgreSQL host will do for now; the store keeps looking");
                return None;
            }
        };
        close_quietly(connection).await;
        let was = self.targets.current_index();
        if index == was {
            return None;
        }
        self.targets.choose(index);
        let new_pool = (self.make_pool)(self.targets.current());
        let old_pool = {
            let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
            let generation = pool.0 + 1;
            std::mem::replace(&mut *pool, (generation, new_pool)).1
        };
        drop(std::mem::take(&mut *self.kept.lock().unwrap_or_else(PoisonError::into_inner)));
        self.moves.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            from = self.targets.name(was),
            to = self.targets.name(index),
            "the PostgreSQL host the store needs has moved; its connections follow"
        );
        Some(old_pool)
    }

    /// The hosts, the one in use, and the moves and failed looks so far (for `/metrics`).
    pub(crate) fn hosts(&self) -> StoreHosts {
        StoreHosts {
            hosts: self.targets.names().to_vec(),
            current: self.targets.current_index(),
            moves: self.moves.load(Ordering::Relaxed),
            none_would_do: self.none_would_do.load(Ordering::Relaxed),
        }
    }

    /// Gives every kept connection back to the pool, then closes the pool (waiting for connections in
    /// use to come back).
    pub(crate) async fn close(&self) {
        self.permits.close();
        drop(std::mem::take(&mut *self.kept.lock().unwrap_or_else(PoisonError::into_inner)));
        self.pool().1.close().await;
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
/// through sqlx's test (and, with several hosts, has the store check its host);
/// [`Held::finished`] keeps it for the next statement instead.
pub(crate) struct Held<'a> {
    connection: PoolConnection<Postgres>,
    generation: u64,
    taken: Instant,
    home: &'a Arc<Connections>,
    _permit: SemaphorePermit<'a>,
    unclean: Unclean<'a>,
}

/// Dropped armed (its statement did not finish cleanly), has the store check its host.
struct Unclean<'a>(Option<&'a Arc<Connections>>);

impl Drop for Unclean<'_> {
    fn drop(&mut self) {
        if let Some(home) = self.0 {
            home.suspect();
        }
    }
}

impl<'a> Held<'a> {
    fn new(
        connection: PoolConnection<Postgres>,
        generation: u64,
        taken: Instant,
        home: &'a Arc<Connections>,
        permit: SemaphorePermit<'a>,
    ) -> Held<'a> {
        Held { connection, generation, taken, home, _permit: permit, unclean: Unclean(Some(home)) }
    }

    /// The statement (or transaction) finished cleanly: its answer was read to the end and no
    /// transaction is open, so the connection is kept for the next statement.
    pub(crate) fn finished(self) {
        let Held { connection, generation, taken, home, _permit, mut unclean } = self;
        unclean.0 = None;
        let used = Instant::now();
        if used.duration_since(taken) >= BACK_TO_THE_POOL_AFTER || home.generation() != generation {
            return; // dropped: back to its pool
        }
        home.kept.lock().unwrap_or_else(PoisonError::into_inner).push(Kept { connection, generation, taken, used });
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

    /// Connections over `pool` (the test database's one host).
    fn connections_on(pool: &PgPool, size: usize) -> Arc<Connections> {
        let url = tollgate_agent_testkit::postgres_url().unwrap_or_else(|| panic!("a test database"));
        let targets = Arc::new(Targets::parse(&url).unwrap_or_else(|e| panic!("{e}")));
        let pool = pool.clone();
        Arc::new(Connections::new(targets, Box::new(move |_| pool.clone()), size, Duration::from_secs(10)))
    }

    /// Connections over every host of `url`, a pool of 2 per host.
    fn connections_over(url: &str) -> Arc<Connections> {
        let targets = Arc::new(Targets::parse(url).unwrap_or_else(|e| panic!("{e}")));
        let make_pool: MakePool =
            Box::new(|options| PgPoolOptions::new().max_connections(2).connect_lazy_with(options));
        Arc::new(Connections::new(targets, make_pool, 2, Duration::from_secs(10)))
    }

    /// Acquiring is a small future. sqlx's own wait for a pool's connection (some 15 KB in a release
    /// build, 4 KB in a test build) is boxed, so the future of every statement, which holds this one,
    /// stays small. Each such future is copied whole when it is boxed; those copies were most of the
    /// node's `memcpy` time per run. No server is needed: the future is made, never polled.
    #[tokio::test]
    async fn acquiring_is_a_small_future() {
        let connections = connections_over("postgres://tollgate@127.0.0.1:1/none");
        let acquiring = connections.acquire();
        let size = std::mem::size_of_val(&acquiring);
        assert!(size < 2048, "the future of acquire is {size} bytes");
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
        let connections = connections_on(&pool, 4);
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
        let connections = connections_on(&pool, 4);
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
        let connections = connections_on(&pool, 1);
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

    /// A check that finds another host to use moves the pool there and counts the move; one that
    /// finds no host will do counts that and stays. `hosts` says so (it is what `/metrics` shows).
    #[tokio::test]
    async fn a_move_and_a_look_that_found_no_host_are_counted() {
        let Some(url) = crate::pg_targets::tests::test_url("127.0.0.1:1,{db}", "") else { return };
        let connections = connections_over(&url);
        let before = connections.hosts();
        assert_eq!((before.current, before.moves, before.none_would_do), (0, 0, 0));
        assert_eq!(before.hosts.first().map(String::as_str), Some("127.0.0.1:1"));
        assert_eq!(before.hosts.len(), 2);

        let old = connections.check().await.unwrap_or_else(|| panic!("the refused host is left"));
        old.close().await;
        let moved = connections.hosts();
        assert_eq!((moved.current, moved.moves, moved.none_would_do), (1, 1, 0));
        let mut held = connections.acquire().await.unwrap_or_else(|e| panic!("{e}"));
        backend(&mut held).await.unwrap_or_else(|e| panic!("{e}"));
        held.finished();
        assert!(connections.check().await.is_none(), "the host in use will do: no move");
        assert_eq!(connections.hosts().moves, 1);
        connections.close().await;

        let Some(url) = crate::pg_targets::tests::test_url("127.0.0.1:1,127.0.0.1:2", "") else { return };
        let connections = connections_over(&url);
        assert!(connections.check().await.is_none());
        let none = connections.hosts();
        assert_eq!((none.current, none.moves, none.none_would_do), (0, 0, 1));
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
            let connections = connections_on(&pool, 4);
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
