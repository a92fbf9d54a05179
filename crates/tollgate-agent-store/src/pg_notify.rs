//! How a [`crate::PostgresStore`] learns of the changes other nodes commit: PostgreSQL's LISTEN/NOTIFY.
//!
//! Every statement that writes a run (`postgres/rows.rs`: create, transition, append; a trigger on `runs` did
//! this until migration 10) ends, for the row it inserted or updated to a new version or chain head, with
//! `pg_notify('tollgate_runs', payload)` — since migration 6 only
//! while a listener of another node is recorded in the schema's `listeners` table (each listener
//! records itself there once it listens, clears the rows of listeners that are gone, and sweeps them
//! again every [`SWEEP`]: a row left by a node that crashed makes writes announce to nobody for at most
//! that long). PostgreSQL delivers a
//! notification when its transaction commits, and only if it commits, so no write path knows of it. The
//! payload names the run and where it stands, never its data:
//! `{"schema", "node", "id", "version", "status", "last_seq"}`.
//!
//! Every connection of a store carries its tag in the session setting `tollgate.node` (see `PostgresStore::node`),
//! which the statement copies into `node`. One change feed per store holds one dedicated connection
//! (a [`PgListener`]), started when the first subscriber comes, that turns each notification of the
//! store's own schema and of another node into a [`StoreChange::Run`] on a broadcast; a notification
//! that does not parse is logged and dropped.
//!
//! A lost connection is re-opened with a backoff from [`MIN_BACKOFF`] doubling to [`MAX_BACKOFF`];
//! notifications sent meanwhile are lost, so once it listens again the feed sends
//! [`StoreChange::Resync`] (also once after the first LISTEN, for what committed before it): followers
//! read their runs again, and keep polling for [`SETTLE`] (a write that looked for listeners
//! just before this one recorded itself announces nothing); then a second `Resync`, and from there
//! followers wait on notifications alone (`ChangeFeed::announces_changes`). When a connection that
//! listened is lost the feed sends [`StoreChange::Lost`]: followers read again and poll until it is
//! back. A connection that has been quiet for [`QUIET_CHECK`] is pinged ([`PING_TIMEOUT`]), so a
//! connection dropped silently is noticed within 10 s.

/// Removes the rows of listeners whose backend is gone (a node that crashed or stopped), and this
/// node's own earlier rows (it records itself again).
const FORGET_GONE_LISTENERS: &str = "DELETE FROM listeners AS l WHERE l.node = $1 OR NOT EXISTS \
     (SELECT 1 FROM pg_stat_get_activity(l.pid) AS a WHERE a.application_name = 'tollgate-listener ' || l.node)";
/// Removes the rows of other nodes' listeners whose backend is gone: the writes check only that rows
/// exist, so a crashed node's row would otherwise keep them announcing to nobody.
const SWEEP_GONE_LISTENERS: &str = "DELETE FROM listeners AS l WHERE l.node <> $1 AND NOT EXISTS \
     (SELECT 1 FROM pg_stat_get_activity(l.pid) AS a WHERE a.application_name = 'tollgate-listener ' || l.node)";
/// Records this listener (its node tag, its backend) for the other nodes' writes.
const RECORD_LISTENER: &str = "INSERT INTO listeners (node, pid) VALUES ($1, pg_backend_pid())";

use crate::pg_targets::Targets;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde::Deserialize;
use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::{Executor, PgPool};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{broadcast, oneshot};
use tollgate_agent_core::{RunStatus, StoreChange};

/// The channel a write notifies on.
pub const CHANNEL: &str = "tollgate_runs";

/// The session setting that carries a store's tag into its writes' notifications.
pub const NODE_SETTING: &str = "tollgate.node";

/// The first wait before re-opening a lost connection.
pub const MIN_BACKOFF: Duration = Duration::from_millis(100);

/// The longest wait between two attempts to re-open it.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A listening connection quiet this long is pinged: followers rely on its notifications alone while
/// it listens (they poll only while it is lost), so a connection dropped without a word must be noticed
/// soon.
pub const QUIET_CHECK: Duration = Duration::from_secs(5);

/// How long after its listener records itself a store still lets followers poll: a write that looked
/// for listeners just before the record sends no notification, even if it commits after.
pub const SETTLE: Duration = Duration::from_secs(2);

/// How often a listening connection deletes the rows of other nodes' listeners whose backend is gone,
/// whatever the traffic: the longest a crashed node's row makes other nodes' writes announce to
/// nobody while another node listens.
pub const SWEEP: Duration = Duration::from_secs(10);

/// How long that ping may take before the connection counts as lost.
pub const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// How many changes a slow subscriber may fall behind before it is told to resync.
const BUFFER: usize = 4096;

/// A tag unique to one store in this process and, with the process id and the time, among the nodes
/// sharing a database.
pub(crate) fn node_tag() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{:x}-{nanos:x}-{:x}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The notification's payload, as a write builds it.
#[derive(Deserialize)]
struct Payload {
    schema: String,
    node: Option<String>,
    id: String,
    version: u64,
    status: String,
    last_seq: u64,
}

/// One store's listener and the broadcast it feeds.
pub(crate) struct Announcements {
    node: String,
    /// The store's hosts: the listener connects to the one in use.
    targets: Arc<Targets>,
    changes: broadcast::Sender<StoreChange>,
    /// True while the listener listens (from its `Resync` to its `Lost`).
    listening: Arc<AtomicBool>,
    /// Set once the listener task runs; dropping it (with the store) ends the task.
    stop: Mutex<Option<oneshot::Sender<()>>>,
}

impl Announcements {
    /// A feed for the store tagged `node`, connecting to the host of `targets` in use each time it
    /// connects; nothing connects until [`Announcements::subscribe`].
    pub(crate) fn new(node: String, targets: Arc<Targets>) -> Self {
        let (changes, _) = broadcast::channel(BUFFER);
        Self { node, targets, changes, listening: Arc::new(AtomicBool::new(false)), stop: Mutex::new(None) }
    }

    /// Whether the listener listens now: every other process's commit is announced.
    pub(crate) fn listening(&self) -> bool {
        self.listening.load(Ordering::Acquire)
    }

    /// This store's tag.
    pub(crate) fn node(&self) -> &str {
        &self.node
    }

    /// A new subscription, starting the listener on first use. `None` outside a tokio runtime (no task
    /// can listen there).
    pub(crate) fn subscribe(&self) -> Option<BoxStream<'static, StoreChange>> {
        let mut stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
        if stop.is_none() {
            let runtime = tokio::runtime::Handle::try_current().ok()?;
            let (stop_tx, stop_rx) = oneshot::channel();
            let listener = Listener {
                node: self.node.clone(),
                targets: Arc::clone(&self.targets),
                changes: self.changes.clone(),
                listening: Arc::clone(&self.listening),
            };
            runtime.spawn(listener.run(stop_rx));
            *stop = Some(stop_tx);
        }
        drop(stop);
        let receiver = self.changes.subscribe();
        let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
            match receiver.recv().await {
                Ok(change) => Some((change, receiver)),
                Err(broadcast::error::RecvError::Lagged(_)) => Some((StoreChange::Resync, receiver)),
                Err(broadcast::error::RecvError::Closed) => None,
            }
        });
        Some(stream.boxed())
    }
}

/// The task behind a [`Announcements`].
struct Listener {
    node: String,
    targets: Arc<Targets>,
    changes: broadcast::Sender<StoreChange>,
    listening: Arc<AtomicBool>,
}

/// Why a listening session ended.
enum Ended {
    /// The store is gone.
    Stopped,
    /// The connection failed or was lost (after listening, when `listened`).
    Lost { listened: bool, error: Option<sqlx::Error> },
}

impl Listener {
    async fn run(self, mut stop: oneshot::Receiver<()>) {
        let mut backoff = MIN_BACKOFF;
        loop {
            let pool = PgPoolOptions::new()
                .max_connections(1)
                .min_connections(0)
                .max_lifetime(None)
                .idle_timeout(None)
                .connect_lazy_with(
                    self.targets.current().application_name(&format!("tollgate-listener {}", self.node)),
                );
            let ended = tokio::select! {
                ended = self.session(&pool) => ended,
                _ = &mut stop => Ended::Stopped,
            };
            self.listening.store(false, Ordering::Release);
            pool.close().await;
            match ended {
                Ended::Stopped => return,
                Ended::Lost { listened, error } => {
                    if listened {
                        backoff = MIN_BACKOFF;
                        // Until the next Resync nothing is announced: followers poll meanwhile.
                        let _ = self.changes.send(StoreChange::Lost);
                    }
                    let error = error.map(|e| e.to_string()).unwrap_or_else(|| "connection closed".to_owned());
                    tracing::warn!(%error, retry_in = ?backoff, "lost the PostgreSQL change listener; reconnecting");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = &mut stop => return,
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Listens on one connection until it is lost.
    async fn session(&self, pool: &PgPool) -> Ended {
        let lost = |listened, error| Ended::Lost { listened, error: Some(error) };
        let mut listener = match PgListener::connect_with(pool).await {
            Ok(listener) => listener,
            Err(error) => return lost(false, error),
        };
        listener.ignore_pool_close_event(true);
        if let Err(error) = listener.listen(CHANNEL).await {
            return lost(false, error);
        }
        let schema: String = match sqlx::query_scalar("SELECT current_schema()").fetch_one(&mut listener).await {
            Ok(schema) => schema,
            Err(error) => return lost(false, error),
        };
        // Other nodes' writes notify only while a listener of another node is recorded (migration 6).
        for statement in [FORGET_GONE_LISTENERS, RECORD_LISTENER] {
            if let Err(error) = sqlx::query(statement).bind(&self.node).execute(&mut listener).await {
                return lost(false, error);
            }
        }
        // Whatever committed before the LISTEN took effect (or while the connection was down) went
        // unannounced: followers read again. A write that looked at `listeners` before this
        // row was committed sends nothing even if it commits later, so followers keep polling for
        // SETTLE more; then every other process's commit is announced, and they read once more.
        let _ = self.changes.send(StoreChange::Resync);
        let settled_at = tokio::time::Instant::now() + SETTLE;
        let mut sweep_at = tokio::time::Instant::now() + SWEEP;
        loop {
            // Due whether or not notifications keep coming; the statement pings the connection too.
            if tokio::time::Instant::now() >= sweep_at {
                let sweep = sqlx::query(SWEEP_GONE_LISTENERS).bind(&self.node).execute(&mut listener);
                match tokio::time::timeout(PING_TIMEOUT, sweep).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => return lost(true, error),
                    Err(_) => return Ended::Lost { listened: true, error: None },
                }
                sweep_at = tokio::time::Instant::now() + SWEEP;
            }
            let announced = self.listening.load(Ordering::Acquire);
            let quiet =
                if announced { QUIET_CHECK } else { settled_at.saturating_duration_since(tokio::time::Instant::now()) };
            let quiet = quiet.min(sweep_at.saturating_duration_since(tokio::time::Instant::now()));
            match tokio::time::timeout(quiet, listener.try_recv()).await {
                Ok(Ok(Some(notification))) => {
                    if let Some(change) = self.change(&schema, notification.payload()) {
                        let _ = self.changes.send(change);
                    }
                }
                Ok(Ok(None)) => return Ended::Lost { listened: true, error: None },
                Ok(Err(error)) => return lost(true, error),
                Err(_sweep) if tokio::time::Instant::now() >= sweep_at => {} // at the top of the loop
                Err(_settled) if !announced => {
                    self.listening.store(true, Ordering::Release);
                    let _ = self.changes.send(StoreChange::Resync);
                }
                Err(_quiet) => match tokio::time::timeout(PING_TIMEOUT, listener.execute("SELECT 1")).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => return lost(true, error),
                    Err(_) => return Ended::Lost { listened: true, error: None },
                },
            }
        }
    }

    /// The change a payload announces, unless it is this store's own or another schema's.
    fn change(&self, schema: &str, payload: &str) -> Option<StoreChange> {
        let payload: Payload = match serde_json::from_str(payload) {
            Ok(payload) => payload,
            Err(error) => {
                tracing::warn!(%error, "ignoring a change notification that does not parse");
                return None;
            }
        };
        if payload.schema != schema || payload.node.as_deref() == Some(self.node.as_str()) {
            return None;
        }
        let Some(status) = RunStatus::parse(&payload.status) else {
            tracing::warn!(run = %payload.id, status = %payload.status, "ignoring a change notification with an unknown status");
            return None;
        };
        Some(StoreChange::Run { id: payload.id.into(), version: payload.version, status, last_seq: payload.last_seq })
    }
}
