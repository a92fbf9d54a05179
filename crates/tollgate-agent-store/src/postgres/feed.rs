//! What other readers learn of the store's commits ([`ChangeFeed`]): the commit log and its named
//! readers, the changes other nodes announce (see [`crate::pg_notify`]), the hosts, and the taps.

use super::PostgresStore;
use crate::codec::decode_event;
use crate::commit_log::{parse_pg_position, pg_position, position_ahead};
use futures_util::stream::BoxStream;
use sqlx::Row;
use tollgate_agent_core::BoxFuture;
use tollgate_agent_core::run::Millis;
use tollgate_agent_core::store::{ChangeFeed, CommittedPage, ReaderHold, StoreChange, StoreError};

/// The commit log after position (`$1` transaction, `$2` run, `$3` last seq): the events of at most `$4`
/// batches, those of transactions older than every transaction still running (the horizon, column 9,
/// on every row, and on a row of its own with no event when there is none; column 10, the next
/// transaction id: above the horizon while transactions are under way), in the log's order.
const SELECT_COMMITTED: &str = "SELECT e.seq, e.at, e.kind, e.round, e.data, e.hash, b.run_id, b.tx, b.last_seq, h.x, h.y \
     FROM (SELECT pg_snapshot_xmin(s)::text::bigint AS x, pg_snapshot_xmax(s)::text::bigint AS y \
         FROM pg_current_snapshot() AS s) AS h \
     LEFT JOIN LATERAL (SELECT run_id, tx, last_seq, seqs, ats, kinds, rounds, datas, hashes FROM event_batches \
         WHERE tx >= $1 AND (tx, run_id, last_seq) > ($1, $2, $3) AND tx < h.x \
         ORDER BY tx, run_id, last_seq LIMIT $4) AS b ON true \
     LEFT JOIN LATERAL UNNEST(b.seqs, b.ats, b.kinds, b.rounds, b.datas, b.hashes) \
         AS e (seq, at, kind, round, data, hash) ON true \
     ORDER BY b.tx, b.run_id, b.last_seq, e.seq";
/// The end of the commit log: the horizon (see [`SELECT_COMMITTED`]).
const COMMITTED_END: &str = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint";
/// Takes, renews or keeps a reader's hold (see [`ChangeFeed::hold_reader`]); no row when another holds it.
const HOLD_READER: &str = "INSERT INTO log_readers AS r (name, holder, held_until, position, updated_at) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
     held_until = excluded.held_until, position = COALESCE(excluded.position, r.position), \
     updated_at = excluded.updated_at WHERE r.holder = excluded.holder OR r.held_until <= excluded.updated_at \
     RETURNING position";
const READER_HOLDER: &str = "SELECT holder, held_until FROM log_readers WHERE name = $1";
const RELEASE_READER: &str = "UPDATE log_readers SET held_until = 0 WHERE name = $1 AND holder = $2";

impl PostgresStore {
    async fn read_committed(&self, after: Option<&str>, limit: u32) -> Result<CommittedPage, StoreError> {
        let mut connection = self.connection().await?;
        let Some(after) = after else {
            let end: i64 = sqlx::query_scalar(COMMITTED_END)
                .fetch_one(&mut *connection)
                .await
                .map_err(self.db_error("cannot read the commit log"))?;
            connection.finished();
            return Ok(CommittedPage { next: pg_position(end, "", 0), ..CommittedPage::default() });
        };
        let (tx, run_id, last_seq) = parse_pg_position(after)?;
        let rows = sqlx::query(SELECT_COMMITTED)
            .bind(tx)
            .bind(run_id)
            .bind(last_seq)
            .bind(i64::from(limit.max(1)))
            .fetch_all(&mut *connection)
            .await
            .map_err(self.db_error("cannot read the commit log"))?;
        connection.finished();
        let mut page = CommittedPage::default();
        let (mut horizon, mut last, mut batches) = (0, None, 0_u32);
        for row in &rows {
            horizon = row.try_get::<i64, _>(9).map_err(self.db_error("cannot read the commit log"))?;
            let next_xid: i64 = row.try_get(10).map_err(self.db_error("cannot read the commit log"))?;
            if tx > next_xid {
                return Err(position_ahead(after));
            }
            page.pending = next_xid > horizon;
            let batch: (Option<String>, Option<i64>, Option<i64>) = (
                row.try_get(6).map_err(self.db_error("cannot read the commit log"))?,
                row.try_get(7).map_err(self.db_error("cannot read the commit log"))?,
                row.try_get(8).map_err(self.db_error("cannot read the commit log"))?,
            );
            let (Some(run_id), Some(tx), Some(last_seq)) = batch else { continue };
            if last.as_ref() != Some(&(tx, run_id.clone(), last_seq)) {
                batches += 1;
                last = Some((tx, run_id.clone(), last_seq));
            }
            match decode_event(&run_id, row, self.keys()) {
                Ok(event) => page.events.push((run_id.into(), event)),
                Err(error) => page.skipped.push((run_id.into(), error)),
            }
        }
        page.more = batches >= limit.max(1);
        page.next = match last {
            Some((tx, run_id, last_seq)) if page.more => pg_position(tx, &run_id, last_seq),
            // Everything older than the horizon has been read: the next read starts there.
            _ if horizon > tx => pg_position(horizon, "", 0),
            _ => after.to_owned(),
        };
        Ok(page)
    }

    async fn hold(
        &self,
        name: &str,
        holder: &str,
        position: Option<&str>,
        until: Millis,
        now: Millis,
    ) -> Result<ReaderHold, StoreError> {
        let mut connection = self.connection().await?;
        let held: Option<Option<String>> = sqlx::query_scalar(HOLD_READER)
            .bind(name)
            .bind(holder)
            .bind(until)
            .bind(position)
            .bind(now)
            .fetch_optional(&mut *connection)
            .await
            .map_err(self.db_error("cannot hold a reader of the commit log"))?;
        let answer = match held {
            Some(position) => ReaderHold::Held { position },
            None => {
                let other: Option<(String, i64)> = sqlx::query_as(READER_HOLDER)
                    .bind(name)
                    .fetch_optional(&mut *connection)
                    .await
                    .map_err(self.db_error("cannot read a reader of the commit log"))?;
                let (holder, until) = other.unwrap_or_default();
                ReaderHold::Elsewhere { holder, until }
            }
        };
        connection.finished();
        Ok(answer)
    }

    async fn release(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        sqlx::query(RELEASE_READER)
            .bind(name)
            .bind(holder)
            .execute(&mut *connection)
            .await
            .map_err(self.db_error("cannot release a reader of the commit log"))?;
        connection.finished();
        Ok(())
    }
}

impl ChangeFeed for PostgresStore {
    fn committed<'a>(&'a self, after: Option<&'a str>, limit: u32) -> BoxFuture<'a, Result<CommittedPage, StoreError>> {
        Box::pin(self.read_committed(after, limit))
    }

    fn hold_reader<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        position: Option<&'a str>,
        until: Millis,
        now: Millis,
    ) -> BoxFuture<'a, Result<ReaderHold, StoreError>> {
        Box::pin(self.hold(name, holder, position, until, now))
    }

    fn release_reader<'a>(&'a self, name: &'a str, holder: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.release(name, holder))
    }

    fn changes(&self) -> Option<BoxStream<'static, StoreChange>> {
        self.feed.subscribe()
    }

    fn announces_changes(&self) -> bool {
        self.feed.listening()
    }

    fn hosts(&self) -> Option<tollgate_agent_core::StoreHosts> {
        Some(self.connections.hosts())
    }

    fn tap_commits(&self, tap: &tollgate_agent_core::CommitTap) -> bool {
        self.taps.add(tap);
        true
    }
}
