//! The queue ([`RunQueue`]): claims of the oldest queued runs, `FOR UPDATE SKIP LOCKED` in the
//! queue index's order, written in one grouped statement; when the oldest was queued; the claim's plan.

use super::PostgresStore;
use super::rows::{GroupColumns, PlannedTransition, UPDATE_RUNS};
use crate::codec::{Columns, read_run_row, run_columns};
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use tollgate_agent_core::BoxFuture;
use tollgate_agent_core::run::{Lease, Millis, Transition};
use tollgate_agent_core::store::{Claimed, Guard, RunQueue, StoreError};

/// Opens a claim's transaction (one round trip): with sorts off, the only plan PostgreSQL has for
/// [`SELECT_QUEUED_FOR_CLAIM`] and [`SELECT_OLDEST_QUEUED`] is the partial index `runs_queue` read in
/// order (migration 12), whatever its statistics say of the table — stale ones after a burst made it
/// scan every queued row of `runs_status_id` and sort them, 34.5 ms per claim. JIT is off with it: a
/// sort the write still needs is costed at PostgreSQL's "disabled" price, far above `jit_above_cost`,
/// and compiling the plan then took 600-800 ms a claim.
pub(crate) const BEGIN_QUEUE_READ: &str = "BEGIN; SET LOCAL enable_sort = off; SET LOCAL jit = off";
/// The claim's write: [`UPDATE_RUNS`] under a text of its own, so that the plans PostgreSQL caches for
/// it (per statement text and connection) are made in a claim's transaction only, and a plan made with
/// sorts off never serves the grouped transitions of [`UPDATE_RUNS`] (nor the other way round).
static CLAIM_RUNS: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("{UPDATE_RUNS} -- the claim's write, planned with sorts off"));
/// The oldest queued runs of the agents `$1` (by when each was queued, then id: `runs_queue`'s order)
/// that no other transaction has locked, at most `$2`, leaving out the ids `$3` (rows of this claim
/// that could not be read), locked for a claim: only the rows returned are locked.
pub(crate) const SELECT_QUEUED_FOR_CLAIM: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs WHERE status = 'queued' AND agent = ANY($1) AND id <> ALL($3) ",
    "ORDER BY updated_at, id LIMIT $2 FOR UPDATE SKIP LOCKED"
);
/// When the run queued longest was queued (see [`BEGIN_QUEUE_READ`]).
const SELECT_OLDEST_QUEUED: &str =
    "SELECT updated_at FROM runs WHERE status = 'queued' ORDER BY updated_at, id LIMIT 1";

impl PostgresStore {
    /// Claims up to `limit` of the oldest queued runs no other node is claiming, on `connection`, in
    /// one transaction of four round trips whatever `limit` is: the queued rows are selected and locked
    /// in `runs_queue`'s order with `FOR UPDATE SKIP LOCKED` (rows another node's claim holds are passed
    /// over, never waited for; only the rows selected are locked), each claim is planned on its row,
    /// and one statement ([`CLAIM_RUNS`]) writes them all. A row that cannot be read or claimed is
    /// passed over with a warning (it stays queued), and another is selected in its place.
    async fn claim_on(
        &self,
        connection: &mut PgConnection,
        agents: &[String],
        limit: u32,
        lease: Lease,
        now: Millis,
    ) -> Result<Vec<Claimed>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut tx =
            connection.begin_with(BEGIN_QUEUE_READ).await.map_err(self.db_error("cannot begin a transaction"))?;
        let claim = Transition::Claim { lease };
        let mut planned: Vec<PlannedTransition> = Vec::new();
        let mut queued_at: Vec<Millis> = Vec::new();
        let mut passed_over: Vec<String> = Vec::new();
        loop {
            let wanted = limit - u32::try_from(planned.len()).unwrap_or(limit);
            let rows = sqlx::query(SELECT_QUEUED_FOR_CLAIM)
                .bind(agents)
                .bind(i64::from(wanted))
                .bind(&passed_over)
                .fetch_all(&mut *tx)
                .await
                .map_err(self.db_error("cannot read queued runs"))?;
            let selected = rows.len();
            let mut unnamed = false;
            for row in &rows {
                let run = read_run_row(row).and_then(|row| {
                    let at = row.updated_at;
                    let guard = Guard::Version(u64::try_from(row.version).unwrap_or_default());
                    Ok((at, self.plan_transition_on(row, &guard, &claim, Vec::new(), now)?))
                });
                match run {
                    Ok((at, plan)) => {
                        queued_at.push(at);
                        planned.push(plan);
                    }
                    Err(error) => {
                        tracing::warn!(%error, "a queued run cannot be claimed; passed over");
                        match row.text(0) {
                            Ok(id) => passed_over.push(id),
                            Err(_) => unnamed = true,
                        }
                    }
                }
            }
            // Done when the queue has no more (fewer rows than asked), the claim is full, or a row that
            // cannot even be named would be selected again.
            let full = planned.len() >= usize::try_from(limit).unwrap_or(usize::MAX);
            if full || unnamed || selected < usize::try_from(wanted).unwrap_or(usize::MAX) {
                break;
            }
        }
        if planned.is_empty() {
            tx.commit().await.map_err(self.db_error("cannot commit"))?;
            return Ok(Vec::new());
        }
        let written = self.write_grouped(&mut tx, CLAIM_RUNS.as_str(), GroupColumns::transitions(&planned)).await?;
        if let Some(changed) = planned.iter().find(|plan| !written.contains(plan.next.id.as_str())) {
            // Locked since they were read: no one else can have changed them.
            return Err(StoreError::Database(format!("queued run {} changed under its claim", changed.next.id)));
        }
        tx.commit().await.map_err(self.db_error("cannot commit"))?;
        // A claim appends no events: nothing for the taps.
        Ok(planned
            .into_iter()
            .zip(queued_at)
            .map(|(plan, queued_at)| {
                self.cache.put(plan.changes);
                Claimed { run: plan.next, queued_at }
            })
            .collect())
    }

    /// When the run queued longest was queued (see [`RunQueue::oldest_queued`]).
    async fn oldest_queued_at(&self) -> Result<Option<Millis>, StoreError> {
        let mut connection = self.connection().await?;
        let mut tx =
            connection.begin_with(BEGIN_QUEUE_READ).await.map_err(self.db_error("cannot begin a transaction"))?;
        let oldest = sqlx::query_scalar(SELECT_OLDEST_QUEUED)
            .fetch_optional(&mut *tx)
            .await
            .map_err(self.db_error("cannot read the queue"))?;
        tx.commit().await.map_err(self.db_error("cannot commit"))?;
        connection.finished();
        Ok(oldest)
    }

    /// The plan PostgreSQL makes now for a claim of up to `limit` runs of `agents` (`EXPLAIN` of the
    /// claim's own statement in its own transaction, rolled back), one line of text per line: for an
    /// operator who wonders why the queue drains slowly, and for the test that holds the plan to the
    /// queue's index whatever the table's statistics.
    ///
    /// # Errors
    /// The server cannot be reached or refuses the statement.
    pub async fn claim_plan(&self, agents: &[String], limit: u32) -> Result<Vec<String>, StoreError> {
        let failed = self.db_error("cannot explain the claim");
        let mut connection = self.connection().await?;
        let mut tx = connection.begin_with(BEGIN_QUEUE_READ).await.map_err(&failed)?;
        let explain = format!("EXPLAIN {SELECT_QUEUED_FOR_CLAIM}");
        let plan: Vec<String> = sqlx::query_scalar(AssertSqlSafe(explain))
            .bind(agents)
            .bind(i64::from(limit))
            .bind(Vec::<String>::new())
            .fetch_all(&mut *tx)
            .await
            .map_err(&failed)?;
        tx.rollback().await.map_err(&failed)?;
        connection.finished();
        Ok(plan)
    }
}

impl RunQueue for PostgresStore {
    fn claim_queued<'a>(
        &'a self,
        agents: &'a [String],
        limit: u32,
        lease: Lease,
        now: Millis,
    ) -> BoxFuture<'a, Result<Vec<Claimed>, StoreError>> {
        Box::pin(async move {
            let mut connection = self.connection().await?;
            let claimed = self.claim_on(&mut connection, agents, limit, lease, now).await?;
            connection.finished();
            Ok(claimed)
        })
    }

    fn oldest_queued(&self) -> BoxFuture<'_, Result<Option<Millis>, StoreError>> {
        Box::pin(self.oldest_queued_at())
    }
}
