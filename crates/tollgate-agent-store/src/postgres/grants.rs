//! Grants ([`Grants`]): create, read, list, revoke, the active grants of an agent and their version —
//! each one statement (a revocation in a transaction of its own, and when refused read again to say
//! why). A
//! revocation is a compare-and-set (`UPDATE … WHERE revoked_at IS NULL AND expires_at > now`): of two
//! racing, PostgreSQL lets the second wait for the first's row lock and then finds the row revoked, so
//! exactly one revokes. The grants a vote makes are inserted in the vote's transaction (see `rows.rs`,
//! [`PostgresStore::insert_grants`]).

use super::PostgresStore;
use crate::grant_rows::{GrantRow, decode_grant, grant_columns, grant_page, refused_revocation, rows_for_page};
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use tollgate_agent_core::grant::{GrantPage, GrantQuery, GrantRecord};
use tollgate_agent_core::run::Millis;
use tollgate_agent_core::store::{Grants, StoreError};
use tollgate_agent_core::{Actor, BoxFuture, GrantId};

const INSERT_GRANT: &str = concat!(
    "INSERT INTO grants (",
    grant_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
);
const SELECT_GRANT: &str = concat!("SELECT ", grant_columns!(), " FROM grants WHERE id = $1");
/// The compare-and-set of a revocation: grant `$1`, if active at `$2`, revoked then by `$3`.
const REVOKE_GRANT: &str = concat!(
    "UPDATE grants SET revoked_at = $2, revoked_by = $3 WHERE id = $1 AND revoked_at IS NULL AND expires_at > $2 ",
    "RETURNING ",
    grant_columns!()
);
/// The grants of agent `$1` active at `$2`, oldest first, from the partial index `grants_active`; which
/// of them cover a run (their scope) is [`GrantRecord::covers`]'s to say.
const SELECT_ACTIVE_GRANTS: &str = concat!(
    "SELECT ",
    grant_columns!(),
    " FROM grants WHERE agent = $1 AND revoked_at IS NULL AND expires_at > $2 ORDER BY id"
);
/// Counts one use of grant `$1` (a `tool_started` naming it is written in the same transaction).
const COUNT_USE_POSTGRES: &str = "UPDATE grants SET uses = uses + 1 WHERE id = $1";
/// The version of agent `$1`'s grants (migration 15; no row: 0).
const SELECT_GRANTS_VERSION: &str = "SELECT version FROM grant_versions WHERE agent = $1";

impl PostgresStore {
    /// Inserts new grants on `connection` (inside the caller's transaction, for a vote's).
    pub(super) async fn insert_grants(
        &self,
        connection: &mut PgConnection,
        rows: &[GrantRow],
    ) -> Result<(), StoreError> {
        for row in rows {
            sqlx::query(INSERT_GRANT)
                .bind(&row.id)
                .bind(&row.agent)
                .bind(&row.tool)
                .bind(&row.pattern)
                .bind(&row.scope)
                .bind(&row.run_id)
                .bind(&row.reason)
                .bind(&row.created_by)
                .bind(row.created_at)
                .bind(row.expires_at)
                .bind(row.revoked_at)
                .bind(&row.revoked_by)
                .bind(row.uses)
                .execute(&mut *connection)
                .await
                .map_err(self.db_error("cannot write a grant"))?;
        }
        Ok(())
    }

    async fn store_grant(&self, grant: GrantRecord) -> Result<GrantRecord, StoreError> {
        let (row, grant) = GrantRow::new(grant)?;
        let mut connection = self.connection().await?;
        self.insert_grants(&mut connection, std::slice::from_ref(&row)).await?;
        connection.finished();
        Ok(grant)
    }

    async fn find_grant(&self, connection: &mut PgConnection, id: &GrantId) -> Result<Option<GrantRecord>, StoreError> {
        let found = sqlx::query(SELECT_GRANT)
            .bind(id.as_str())
            .fetch_optional(&mut *connection)
            .await
            .map_err(self.db_error("cannot read a grant"))?;
        found.as_ref().map(decode_grant).transpose()
    }

    async fn read_grant(&self, id: &GrantId) -> Result<GrantRecord, StoreError> {
        let mut connection = self.connection().await?;
        let found = self.find_grant(&mut connection, id).await?;
        connection.finished();
        found.ok_or_else(|| StoreError::GrantNotFound(id.clone()))
    }

    async fn list_grant_page(&self, query: GrantQuery) -> Result<GrantPage, StoreError> {
        let mut n = 0;
        let mut param = || {
            n += 1;
            format!("${n}")
        };
        let mut sql = String::from(concat!("SELECT ", grant_columns!(), " FROM grants WHERE TRUE"));
        if query.agent.is_some() {
            sql.push_str(&format!(" AND agent = {}", param()));
        }
        if query.tool.is_some() {
            sql.push_str(&format!(" AND tool = {}", param()));
        }
        if query.active_at.is_some() {
            sql.push_str(&format!(" AND revoked_at IS NULL AND expires_at > {}", param()));
        }
        if query.cursor.is_some() {
            sql.push_str(&format!(" AND id < {}", param()));
        }
        sql.push_str(&format!(" ORDER BY id DESC LIMIT {}", param()));
        let mut statement = sqlx::query(AssertSqlSafe(sql));
        if let Some(agent) = &query.agent {
            statement = statement.bind(agent);
        }
        if let Some(tool) = &query.tool {
            statement = statement.bind(tool);
        }
        if let Some(at) = query.active_at {
            statement = statement.bind(at);
        }
        if let Some(cursor) = &query.cursor {
            statement = statement.bind(cursor);
        }
        let mut connection = self.connection().await?;
        let rows = statement
            .bind(rows_for_page(query.limit))
            .fetch_all(&mut *connection)
            .await
            .map_err(self.db_error("cannot list grants"))?;
        connection.finished();
        let grants = rows.iter().map(decode_grant).collect::<Result<Vec<_>, _>>()?;
        Ok(grant_page(grants, query.limit))
    }

    async fn revoke_if_active(&self, id: &GrantId, actor: &Actor, now: Millis) -> Result<GrantRecord, StoreError> {
        let mut connection = self.connection().await?;
        // In a transaction, so that a grant revoked whose row then cannot be read is left as it was.
        let mut tx = connection.begin().await.map_err(self.db_error("cannot begin a transaction"))?;
        let revoked = sqlx::query(REVOKE_GRANT)
            .bind(id.as_str())
            .bind(now)
            .bind(actor.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(self.db_error("cannot revoke a grant"))?;
        let revoked = revoked.as_ref().map(decode_grant).transpose()?;
        tx.commit().await.map_err(self.db_error("cannot commit"))?;
        if let Some(revoked) = revoked {
            connection.finished();
            return Ok(revoked);
        }
        // A statement of its own, after the compare-and-set's transaction, so that it sees a revocation
        // that committed while the compare-and-set waited for it (that statement's snapshot predates it).
        let found = self.find_grant(&mut connection, id).await?;
        connection.finished();
        Err(refused_revocation(id, found, now))
    }

    async fn active_grants_of(&self, agent: &str, now: Millis) -> Result<Vec<GrantRecord>, StoreError> {
        let mut connection = self.connection().await?;
        let rows = sqlx::query(SELECT_ACTIVE_GRANTS)
            .bind(agent)
            .bind(now)
            .fetch_all(&mut *connection)
            .await
            .map_err(self.db_error("cannot read the grants of an agent"))?;
        connection.finished();
        rows.iter().map(decode_grant).collect()
    }

    async fn grants_version_of(&self, agent: &str) -> Result<u64, StoreError> {
        let mut connection = self.connection().await?;
        let version: Option<i64> = sqlx::query_scalar(SELECT_GRANTS_VERSION)
            .bind(agent)
            .fetch_optional(&mut *connection)
            .await
            .map_err(self.db_error("cannot read the version of an agent's grants"))?;
        connection.finished();
        Ok(version.map_or(0, |v| u64::try_from(v).unwrap_or(0)))
    }

    /// Counts one use of each of `grants` (as `uses_in` finds them in the events written) on
    /// `connection`, inside the transaction that commits those events.
    pub(super) async fn count_uses(&self, connection: &mut PgConnection, grants: &[&str]) -> Result<(), StoreError> {
        for grant in grants {
            sqlx::query(COUNT_USE_POSTGRES)
                .bind(*grant)
                .execute(&mut *connection)
                .await
                .map_err(self.db_error("cannot count a use of a grant"))?;
        }
        Ok(())
    }
}

impl Grants for PostgresStore {
    fn create_grant(&self, grant: GrantRecord) -> BoxFuture<'_, Result<GrantRecord, StoreError>> {
        Box::pin(self.store_grant(grant))
    }

    fn grant<'a>(&'a self, id: &'a GrantId) -> BoxFuture<'a, Result<GrantRecord, StoreError>> {
        Box::pin(self.read_grant(id))
    }

    fn list_grants(&self, query: GrantQuery) -> BoxFuture<'_, Result<GrantPage, StoreError>> {
        Box::pin(self.list_grant_page(query))
    }

    fn revoke_grant<'a>(
        &'a self,
        id: &'a GrantId,
        actor: &'a Actor,
        now: Millis,
    ) -> BoxFuture<'a, Result<GrantRecord, StoreError>> {
        Box::pin(self.revoke_if_active(id, actor, now))
    }

    fn grants_version<'a>(&'a self, agent: &'a str) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(self.grants_version_of(agent))
    }

    fn active_grants<'a>(&'a self, agent: &'a str, now: Millis) -> BoxFuture<'a, Result<Vec<GrantRecord>, StoreError>> {
        Box::pin(self.active_grants_of(agent, now))
    }
}
