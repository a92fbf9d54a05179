//! Grants ([`Grants`]) on SQLite: reads on the read connections (short index lookups, as the runs'
//! are), writes through the writer like every other write. A revocation is a compare-and-set inside
//! the writer's transaction, so that whoever races, one revokes and the others learn why not from the
//! grant as it then stands; the grants a vote makes are written in the vote's own operation (see
//! `writer`), never on their own.

use super::SqliteStore;
use super::writer::Request;
use crate::grant_rows::{GrantRow, decode_grant, grant_columns, grant_page, rows_for_page};
use rusqlite::{OptionalExtension, ToSql, params, params_from_iter};
use tollgate_agent_core::grant::{GrantPage, GrantQuery, GrantRecord};
use tollgate_agent_core::run::Millis;
use tollgate_agent_core::store::{Grants, StoreError};
use tollgate_agent_core::{Actor, BoxFuture, GrantId};

/// The grants of agent `?1` active at `?2`, oldest first, read from the partial index `grants_active`;
/// which of them cover a run (their scope) is [`GrantRecord::covers`]'s to say.
pub(super) const SELECT_ACTIVE_GRANTS: &str = concat!(
    "SELECT ",
    grant_columns!(),
    " FROM grants WHERE agent = ?1 AND revoked_at IS NULL AND expires_at > ?2 ORDER BY id"
);

/// The version of agent `?1`'s grants (migration 8; no row: 0).
const SELECT_GRANTS_VERSION: &str = "SELECT version FROM grant_versions WHERE agent = ?1";

impl SqliteStore {
    fn read_grant(&self, id: &GrantId) -> Result<GrantRecord, StoreError> {
        let found = self.read("cannot read a grant", |connection| {
            let mut statement = connection.prepare_cached(super::SELECT_GRANT)?;
            Ok(statement.query_row([id.as_str()], |row| Ok(decode_grant(row))).optional()?)
        })?;
        found.unwrap_or_else(|| Err(StoreError::GrantNotFound(id.clone())))
    }

    fn read_grant_page(&self, query: &GrantQuery) -> Result<GrantPage, StoreError> {
        let mut arguments: Vec<&dyn ToSql> = Vec::with_capacity(5);
        if let Some(agent) = &query.agent {
            arguments.push(agent);
        }
        if let Some(tool) = &query.tool {
            arguments.push(tool);
        }
        if let Some(at) = &query.active_at {
            arguments.push(at);
        }
        if let Some(cursor) = &query.cursor {
            arguments.push(cursor);
        }
        let fetch = rows_for_page(query.limit);
        arguments.push(&fetch);
        let grants = self.read("cannot list grants", |connection| {
            let mut statement = connection.prepare_cached(&grant_list_sql(query))?;
            let rows = statement.query_map(params_from_iter(arguments.iter()), |row| Ok(decode_grant(row)))?;
            let rows = rows.collect::<Result<Vec<_>, _>>()?;
            Ok(rows.into_iter().collect::<Result<Vec<_>, StoreError>>()?)
        })?;
        Ok(grant_page(grants, query.limit))
    }

    fn read_active_grants(&self, agent: &str, now: Millis) -> Result<Vec<GrantRecord>, StoreError> {
        self.read("cannot read the grants of an agent", |connection| {
            let mut statement = connection.prepare_cached(SELECT_ACTIVE_GRANTS)?;
            let rows = statement.query_map(params![agent, now], |row| Ok(decode_grant(row)))?;
            let rows = rows.collect::<Result<Vec<_>, _>>()?;
            Ok(rows.into_iter().collect::<Result<Vec<_>, StoreError>>()?)
        })
    }

    fn read_grants_version(&self, agent: &str) -> Result<u64, StoreError> {
        let version = self.read("cannot read the version of an agent's grants", |connection| {
            let mut statement = connection.prepare_cached(SELECT_GRANTS_VERSION)?;
            Ok(statement.query_row([agent], |row| row.get::<_, i64>(0)).optional()?)
        })?;
        Ok(version.map_or(0, |v| u64::try_from(v).unwrap_or(0)))
    }
}

/// The statement for a [`GrantQuery`]: its filters in order (agent, tool, active at, cursor), then the
/// limit. At most 16 distinct texts come out of this, so each stays prepared in the connection's
/// statement cache.
pub(super) fn grant_list_sql(query: &GrantQuery) -> String {
    let mut sql = String::from(concat!("SELECT ", grant_columns!(), " FROM grants WHERE 1 = 1"));
    if query.agent.is_some() {
        sql.push_str(" AND agent = ?");
    }
    if query.tool.is_some() {
        sql.push_str(" AND tool = ?");
    }
    if query.active_at.is_some() {
        sql.push_str(" AND revoked_at IS NULL AND expires_at > ?");
    }
    if query.cursor.is_some() {
        sql.push_str(" AND id < ?");
    }
    sql.push_str(" ORDER BY id DESC LIMIT ?");
    sql
}

impl Grants for SqliteStore {
    fn create_grant(&self, grant: GrantRecord) -> BoxFuture<'_, Result<GrantRecord, StoreError>> {
        Box::pin(async move {
            let (row, grant) = GrantRow::new(grant)?;
            self.write_count(Request::CreateGrant { row }).await?;
            Ok(grant)
        })
    }

    fn grant<'a>(&'a self, id: &'a GrantId) -> BoxFuture<'a, Result<GrantRecord, StoreError>> {
        Box::pin(async move { self.read_grant(id) })
    }

    fn list_grants(&self, query: GrantQuery) -> BoxFuture<'_, Result<GrantPage, StoreError>> {
        Box::pin(async move { self.read_grant_page(&query) })
    }

    fn revoke_grant<'a>(
        &'a self,
        id: &'a GrantId,
        actor: &'a Actor,
        now: Millis,
    ) -> BoxFuture<'a, Result<GrantRecord, StoreError>> {
        let request = Request::RevokeGrant { id: id.clone(), actor: actor.to_string(), now };
        Box::pin(self.write_grant(request))
    }

    fn grants_version<'a>(&'a self, agent: &'a str) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move { self.read_grants_version(agent) })
    }

    fn active_grants<'a>(&'a self, agent: &'a str, now: Millis) -> BoxFuture<'a, Result<Vec<GrantRecord>, StoreError>> {
        Box::pin(async move { self.read_active_grants(agent, now) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::params_from_iter;

    /// The gate's lookup searches the partial index of unrevoked grants by agent and expiry (revoked and
    /// long-expired grants are never read), and every listing reads an index, never the whole table.
    #[tokio::test]
    async fn grant_queries_use_indexes() -> Result<(), Box<dyn std::error::Error>> {
        let store = SqliteStore::open("sqlite::memory:").await?;
        let plan = |sql: String| {
            store.read("explain", |connection| {
                let mut statement = connection.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
                let unbound = std::iter::repeat_n(rusqlite::types::Null, statement.parameter_count());
                let steps = statement.query_map(params_from_iter(unbound), |row| row.get::<_, String>(3))?;
                Ok(steps.collect::<Result<Vec<_>, _>>()?)
            })
        };
        let gate = plan(SELECT_ACTIVE_GRANTS.to_owned())?;
        assert!(gate.iter().any(|step| step.starts_with("SEARCH grants USING INDEX grants_active")), "{gate:#?}");
        let text = |on: bool| on.then(|| "x".to_owned());
        for filters in 0..16_u8 {
            let query = GrantQuery {
                agent: text(filters & 1 != 0),
                tool: text(filters & 2 != 0),
                active_at: (filters & 4 != 0).then_some(0),
                limit: 10,
                cursor: text(filters & 8 != 0),
            };
            let steps = plan(grant_list_sql(&query))?;
            assert!(
                steps.iter().all(|step| step.contains("USING INDEX") || step.starts_with("USE TEMP")),
                "{query:?}: {steps:#?}"
            );
        }
        store.close().await;
        Ok(())
    }
}
