//! Reads: a small pool of read connections and the queries that run on them.
//!
//! Reads (get, list, events, due, resolve_prefix, counts) run on the calling thread, on a read
//! connection of the pool; WAL lets them read the last committed state while a write goes on. They are
//! short index lookups (at most a page of rows), so they do not hold an async worker long. An in-memory
//! database has one connection, so there they share the writer's.

use super::{Location, SELECT_RUN, SqliteStore, lock, run_exists};
use crate::codec::{
    PREFIX_COUNT_CAP, database_error, decode_event, decode_run, keep_readable, prefix_upper_bound,
    resolve_prefix_answer, run_columns, run_error, split_readable, status_counts,
};
use crate::commit_log::{parse_sqlite_position, position_ahead};
use rusqlite::{Connection, OptionalExtension, ToSql, params, params_from_iter};
use std::sync::{Arc, Mutex};
use tollgate_agent_core::event::StoredEvent;
use tollgate_agent_core::run::{Millis, RunRecord, RunStatus};
use tollgate_agent_core::store::{CommittedPage, IntegrityCheck, RunPage, RunQuery, StoreError};

/// Read connections kept open between reads.
const IDLE_READERS: usize = 8;

pub(super) const SELECT_EVENTS: &str =
    "SELECT seq, at, kind, round, data, hash FROM events WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3";

/// The commit log after event id `?1`, at most `?2` events, in id order (see `ChangeFeed::committed`).
const SELECT_COMMITTED: &str =
    "SELECT seq, at, kind, round, data, hash, run_id, id FROM events WHERE id > ?1 ORDER BY id LIMIT ?2";
/// The end of the commit log: the last event id ever given (AUTOINCREMENT's, which deletions keep).
const COMMITTED_END: &str = "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)";
const READER: &str = "SELECT holder, held_until, position FROM log_readers WHERE name = ?1";

pub(super) const SELECT_DUE: &str = concat!(
    "SELECT * FROM (SELECT ",
    run_columns!(),
    ", expires_at AS due_at FROM runs WHERE status = 'waiting_for_approval' AND expires_at IS NOT NULL ",
    "AND expires_at <= ?1 ORDER BY expires_at LIMIT ?2) AS waiting ",
    "UNION ALL SELECT * FROM (SELECT ",
    run_columns!(),
    ", lease_expires_at AS due_at FROM runs WHERE status = 'running' AND lease_expires_at IS NOT NULL ",
    "AND lease_expires_at <= ?1 ORDER BY lease_expires_at LIMIT ?2) AS running ",
    "ORDER BY due_at, id LIMIT ?2"
);

/// Waiting runs changed after `(?1, ?2)` (time, then id) and at or before `?3`, in that order, at most
/// `?4`: the escalation sweep's window, read in order from the partial index `runs_waiting_changed`
/// (migration 9; `INDEXED BY` holds the plan to it, as for the queue).
pub(super) const SELECT_WAITING_CHANGED: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs INDEXED BY runs_waiting_changed WHERE status = 'waiting_for_approval' AND updated_at >= ?1 AND updated_at <= ?3 ",
    "AND (updated_at > ?1 OR id > ?2) ORDER BY updated_at, id LIMIT ?4"
);

/// The oldest queued runs of the agents in the JSON array `?1` (by when each was queued, then id), at
/// most `?2`, for a worker's claim. `INDEXED BY` holds the plan to the partial index `runs_queue`
/// (migration 5) read in order, whatever SQLite's planner knows of the table: without it, it may take
/// `runs_agent_status_id` and sort every queued row of the agents.
pub(super) const SELECT_QUEUED: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs INDEXED BY runs_queue WHERE status = 'queued' AND agent IN (SELECT value FROM json_each(?1)) ",
    "ORDER BY updated_at, id LIMIT ?2"
);

/// When the run queued longest was queued: the first entry of `runs_queue`.
const SELECT_OLDEST_QUEUED: &str =
    "SELECT updated_at FROM runs INDEXED BY runs_queue WHERE status = 'queued' ORDER BY updated_at, id LIMIT 1";

/// Rows read beyond a claim's `limit`, so that a few queued rows that cannot be read (passed over, and
/// still queued) do not stop the queue behind them.
const UNREADABLE_SLACK: u32 = 8;

/// A scan of the small `(status, id)` index, not of the table (for `/metrics`, which caches it).
pub(super) const COUNT_BY_STATUS: &str = "SELECT status, COUNT(*) FROM runs GROUP BY status";

pub(super) const PREFIX_FIRST: &str = "SELECT id FROM runs WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT 2";

pub(super) const PREFIX_COUNT: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM runs WHERE id >= ?1 AND id < ?2 LIMIT ?3)";

impl SqliteStore {
    /// Runs `read` on a read connection; a database error is reported with `context`.
    pub(super) fn read<T>(
        &self,
        context: &str,
        read: impl FnOnce(&Connection) -> Result<T, ReadError>,
    ) -> Result<T, StoreError> {
        self.readers.read(read).map_err(|error| match error {
            ReadError::Database(e) => database_error(&self.secrets, context, &self.folder.met(&e)),
            ReadError::Store(e) => e,
        })
    }

    /// [`SqliteStore::read`] of one run's rows: damaged bytes met there are [`StoreError::Corrupt`] for
    /// run `id`, so that run fails alone.
    fn read_of_run<T>(
        &self,
        context: &str,
        id: &str,
        read: impl FnOnce(&Connection) -> Result<T, ReadError>,
    ) -> Result<T, StoreError> {
        self.readers.read(read).map_err(|error| match error {
            ReadError::Database(e) => run_error(&self.secrets, context, id, &self.folder.met(&e)),
            ReadError::Store(e) => e,
        })
    }

    pub(super) fn get_run(&self, id: &str) -> Result<RunRecord, StoreError> {
        let keys = self.keys.as_deref();
        let run = self.read_of_run("cannot read a run", id, |connection| {
            let mut statement = connection.prepare_cached(SELECT_RUN)?;
            Ok(statement.query_row([id], |row| Ok(decode_run(row, keys))).optional()?)
        })?;
        run.unwrap_or_else(|| Err(StoreError::NotFound(id.to_owned())))
    }

    pub(super) fn list_runs(&self, query: &RunQuery) -> Result<RunPage, StoreError> {
        if query.limit == 0 {
            return Ok(RunPage { runs: Vec::new(), next_cursor: None, skipped: Vec::new() });
        }
        let mut arguments: Vec<&dyn ToSql> = Vec::with_capacity(4);
        let status = query.status.map(|status| status.as_str());
        if let Some(status) = &status {
            arguments.push(status);
        }
        if let Some(agent) = &query.agent {
            arguments.push(agent);
        }
        if let Some(cursor) = &query.cursor {
            arguments.push(cursor);
        }
        let fetch = i64::from(query.limit) + 1;
        arguments.push(&fetch);
        let keys = self.keys.as_deref();
        let read = self.read("cannot list runs", |connection| {
            let mut statement = connection.prepare_cached(&list_sql(query))?;
            let rows = statement
                .query_map(params_from_iter(arguments.iter()), |row| Ok((row.get(0), decode_run(row, keys))))?;
            Ok(rows.collect::<Result<Vec<(rusqlite::Result<String>, _)>, _>>()?)
        });
        let rows = match read {
            Ok(rows) => rows,
            // A damaged page of the table ends the scan; the index of ids is another b-tree, so the
            // page is listed from it and each run read on its own: only the damaged runs are skipped.
            Err(StoreError::CorruptDatabase(detail)) => {
                tracing::warn!(%detail, "listing runs one by one around a damaged page of the database");
                self.list_run_by_run(query, &arguments)?
            }
            Err(error) => return Err(error),
        };
        let limit = usize::try_from(query.limit).unwrap_or(usize::MAX);
        let next_cursor =
            if rows.len() > limit { rows.get(limit - 1).and_then(|(id, _)| id.as_ref().ok().cloned()) } else { None };
        let (runs, skipped) = split_readable(rows.into_iter().take(limit).map(|(_, run)| run), "list");
        Ok(RunPage { runs, next_cursor, skipped })
    }

    /// The page of [`SqliteStore::list_runs`] read from an index of ids, then run by run.
    #[expect(clippy::type_complexity, reason = "the same rows as the single query's")]
    fn list_run_by_run(
        &self,
        query: &RunQuery,
        arguments: &[&dyn ToSql],
    ) -> Result<Vec<(rusqlite::Result<String>, Result<RunRecord, StoreError>)>, StoreError> {
        let ids = self.read("cannot list run ids", |connection| {
            let mut statement = connection.prepare_cached(&list_ids_sql(query))?;
            let ids = statement.query_map(params_from_iter(arguments.iter()), |row| row.get::<_, String>(0))?;
            Ok(ids.collect::<Result<Vec<_>, _>>()?)
        })?;
        Ok(ids.into_iter().map(|id| (Ok(id.clone()), self.get_run(&id))).collect())
    }

    /// SQLite's own check of the database file, on a read connection: every line it reports but `ok`.
    pub(super) fn check_file(&self, depth: IntegrityCheck) -> Result<Vec<String>, StoreError> {
        let pragma = match depth {
            IntegrityCheck::Quick => "PRAGMA quick_check(100)",
            IntegrityCheck::Full => "PRAGMA integrity_check(100)",
        };
        let lines = self.read("the check cannot read the database", |connection| {
            let mut statement = connection.prepare(pragma)?;
            let lines = statement.query_map([], |row| row.get::<_, String>(0))?;
            Ok(lines.collect::<Result<Vec<_>, _>>()?)
        });
        match lines {
            Ok(lines) => Ok(lines.into_iter().filter(|line| line != "ok").collect()),
            // Damage that stops the check itself (a page it cannot even parse) is what it found.
            Err(StoreError::CorruptDatabase(detail)) => Ok(vec![detail]),
            Err(error) => Err(error),
        }
    }

    pub(super) fn resolve(&self, prefix: &str) -> Result<String, StoreError> {
        let upper = prefix_upper_bound(prefix);
        let (first, count) = self.read("cannot look up a run id prefix", |connection| {
            let mut statement = connection.prepare_cached(PREFIX_FIRST)?;
            let first =
                statement.query_map([prefix, upper.as_str()], |row| row.get(0))?.collect::<Result<Vec<String>, _>>()?;
            let count = if first.len() > 1 {
                let mut statement = connection.prepare_cached(PREFIX_COUNT)?;
                statement.query_row(params![prefix, upper, PREFIX_COUNT_CAP + 1], |row| row.get(0))?
            } else {
                0
            };
            Ok((first, count))
        })?;
        resolve_prefix_answer(prefix, first, count)
    }

    pub(super) fn read_events(&self, id: &str, after: u64, limit: u32) -> Result<Vec<StoredEvent>, StoreError> {
        let keys = self.keys.as_deref();
        self.read_of_run("cannot read events", id, |connection| {
            let mut statement = connection.prepare_cached(SELECT_EVENTS)?;
            let after = i64::try_from(after).unwrap_or(i64::MAX);
            let events = statement
                .query_map(params![id, after, i64::from(limit)], |row| Ok(decode_event(id, row, keys)))?
                .collect::<Result<Vec<_>, _>>()?;
            if events.is_empty() && !run_exists(connection, id)? {
                return Err(ReadError::Store(StoreError::NotFound(id.to_owned())));
            }
            Ok(events.into_iter().collect::<Result<Vec<_>, _>>()?)
        })
    }

    pub(super) fn read_committed(&self, after: Option<&str>, limit: u32) -> Result<CommittedPage, StoreError> {
        let Some(after) = after else {
            let end: i64 = self.read("cannot read the commit log", |connection| {
                Ok(connection.prepare_cached(COMMITTED_END)?.query_row([], |row| row.get(0))?)
            })?;
            return Ok(CommittedPage { next: end.to_string(), ..CommittedPage::default() });
        };
        let from = parse_sqlite_position(after)?;
        let keys = self.keys.as_deref();
        let limit = limit.max(1);
        let rows = self.read("cannot read the commit log", |connection| {
            let end: i64 = connection.prepare_cached(COMMITTED_END)?.query_row([], |row| row.get(0))?;
            if from > end {
                return Err(ReadError::Store(position_ahead(after)));
            }
            let mut statement = connection.prepare_cached(SELECT_COMMITTED)?;
            let rows = statement.query_map(params![from, i64::from(limit)], |row| {
                let (run_id, id): (String, i64) = (row.get(6)?, row.get(7)?);
                Ok((id, decode_event(&run_id, row, keys), run_id))
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })?;
        let mut page = CommittedPage {
            more: rows.len() >= limit as usize,
            next: rows.last().map_or(from, |(id, _, _)| *id).to_string(),
            ..CommittedPage::default()
        };
        for (_, event, run_id) in rows {
            match event {
                Ok(event) => page.events.push((run_id.into(), event)),
                Err(error) => page.skipped.push((run_id.into(), error)),
            }
        }
        Ok(page)
    }

    /// The hold of reader `name` as stored: holder, until and position.
    pub(super) fn reader(&self, name: &str) -> Result<Option<(String, Millis, Option<String>)>, StoreError> {
        self.read("cannot read a reader of the commit log", |connection| {
            let mut statement = connection.prepare_cached(READER)?;
            Ok(statement.query_row([name], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?))).optional()?)
        })
    }

    pub(super) fn count_runs(&self) -> Result<Vec<(RunStatus, u64)>, StoreError> {
        let counts = self.read("cannot count runs", |connection| {
            let mut statement = connection.prepare_cached(COUNT_BY_STATUS)?;
            let rows = statement.query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })?;
        Ok(status_counts(counts))
    }

    /// The oldest queued runs of `agents` that can be read (see [`SELECT_QUEUED`]), at most `limit`.
    pub(super) fn queued_runs(&self, agents: &[String], limit: u32) -> Result<Vec<RunRecord>, StoreError> {
        let keys = self.keys.as_deref();
        let agents = serde_json::Value::from(agents.to_vec()).to_string();
        let wanted = usize::try_from(limit).unwrap_or(usize::MAX);
        self.read("cannot read queued runs", |connection| {
            let mut statement = connection.prepare_cached(SELECT_QUEUED)?;
            let read = i64::from(limit.saturating_add(UNREADABLE_SLACK));
            // Rows are decoded (and opened, with data keys) one by one, only until `limit` are readable.
            let mut runs = Vec::new();
            for run in statement.query_map(params![agents, read], |row| Ok(decode_run(row, keys)))? {
                if runs.len() == wanted {
                    break;
                }
                runs.extend(keep_readable(run?, "claim"));
            }
            Ok(runs)
        })
    }

    /// When the run queued longest was queued (see [`SELECT_OLDEST_QUEUED`]).
    pub(super) fn oldest_queued_at(&self) -> Result<Option<Millis>, StoreError> {
        self.read("cannot read the queue", |connection| {
            let mut statement = connection.prepare_cached(SELECT_OLDEST_QUEUED)?;
            Ok(statement.query_row([], |row| row.get(0)).optional()?)
        })
    }

    /// SQLite's plan for a claim (`EXPLAIN QUERY PLAN` of `SELECT_QUEUED`), one line per step: for
    /// the test that holds it to the queue's index.
    ///
    /// # Errors
    /// The database cannot be read.
    pub fn claim_plan(&self) -> Result<Vec<String>, StoreError> {
        self.read("cannot explain the claim", |connection| {
            let mut statement = connection.prepare(&format!("EXPLAIN QUERY PLAN {SELECT_QUEUED}"))?;
            let steps = statement.query_map(params!["[]", 1], |row| row.get::<_, String>(3))?;
            Ok(steps.collect::<Result<Vec<_>, _>>()?)
        })
    }

    pub(super) fn waiting_changed_runs(
        &self,
        from: (Millis, &str),
        until: Millis,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let keys = self.keys.as_deref();
        let runs = self.read("cannot read waiting runs", |connection| {
            let mut statement = connection.prepare_cached(SELECT_WAITING_CHANGED)?;
            let arguments = params![from.0, from.1, until, i64::from(limit)];
            let runs = statement.query_map(arguments, |row| Ok(decode_run(row, keys)))?;
            Ok(runs.collect::<Result<Vec<_>, _>>()?)
        })?;
        Ok(runs.into_iter().filter_map(|run| keep_readable(run, "waiting")).collect())
    }

    pub(super) fn due_runs(&self, now: Millis, limit: u32) -> Result<Vec<RunRecord>, StoreError> {
        let keys = self.keys.as_deref();
        let runs = self.read("cannot read due runs", |connection| {
            let mut statement = connection.prepare_cached(SELECT_DUE)?;
            let runs = statement.query_map(params![now, i64::from(limit)], |row| Ok(decode_run(row, keys)))?;
            Ok(runs.collect::<Result<Vec<_>, _>>()?)
        })?;
        Ok(runs.into_iter().filter_map(|run| keep_readable(run, "due")).collect())
    }
}

/// A read's failure: the database's, or a store answer (not found) decided inside the read.
pub(super) enum ReadError {
    Database(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for ReadError {
    fn from(error: rusqlite::Error) -> ReadError {
        ReadError::Database(error)
    }
}

impl From<StoreError> for ReadError {
    fn from(error: StoreError) -> ReadError {
        ReadError::Store(error)
    }
}

/// The read connections.
pub(super) struct Readers {
    pub(super) source: ReadSource,
    /// Connections not in use (file databases only).
    pub(super) idle: Mutex<Vec<Connection>>,
}

pub(super) enum ReadSource {
    /// Each read takes a connection of its own to the file (WAL: readers never wait for the writer).
    Own(Location),
    /// An in-memory database has one connection: the writer's.
    Writer(Arc<Mutex<Connection>>),
}

impl Readers {
    fn read<T>(&self, read: impl FnOnce(&Connection) -> Result<T, ReadError>) -> Result<T, ReadError> {
        match &self.source {
            ReadSource::Writer(connection) => read(&lock(connection)),
            ReadSource::Own(location) => {
                let idle = lock(&self.idle).pop();
                let connection = match idle {
                    Some(connection) => connection,
                    None => {
                        let connection = location.connect()?;
                        connection.pragma_update(None, "query_only", true)?;
                        connection
                    }
                };
                let result = read(&connection);
                let mut idle = lock(&self.idle);
                if idle.len() < IDLE_READERS {
                    idle.push(connection);
                }
                result
            }
        }
    }
}

/// The statement for a [`RunQuery`]: its filters in order (status, agent, cursor), then the limit —
/// one more than asked, which tells whether another page exists. At most 8 distinct texts come out
/// of this, so each stays prepared in the connection's statement cache.
pub(super) fn list_sql(query: &RunQuery) -> String {
    list_statement(concat!("SELECT ", run_columns!(), " FROM runs WHERE 1 = 1"), query)
}

/// [`list_sql`] for the ids alone: answered from an index, without reading the table's pages.
pub(super) fn list_ids_sql(query: &RunQuery) -> String {
    list_statement("SELECT id FROM runs WHERE 1 = 1", query)
}

fn list_statement(select: &str, query: &RunQuery) -> String {
    let mut sql = String::from(select);
    if query.status.is_some() {
        sql.push_str(" AND status = ?");
    }
    if query.agent.is_some() {
        sql.push_str(" AND agent = ?");
    }
    if query.cursor.is_some() {
        sql.push_str(" AND id < ?");
    }
    sql.push_str(" ORDER BY id DESC LIMIT ?");
    sql
}
