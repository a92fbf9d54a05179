//! Grants ([`Grants`]): create, read, list, revoke, the grants in force for a run, and their uses —
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
use tollgate_agent_core::{Actor, BoxFuture, GrantId, RunId};

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
/// of them cover a run (their scope) is [`GrantRecord::covers`]'s to say, so that a row whose scope
/// cannot be read is reported rather than passed over.
const SELECT_ACTIVE_GRANTS: &str = concat!(
    "SELECT ",
    grant_columns!(),
    " FROM grants WHERE agent = $1 AND revoked_at IS NULL AND expires_at > $2 ORDER BY id"
);
const COUNT_GRANT_USE: &str = "UPDATE grants SET uses = uses + 1 WHERE id = $1";

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

    async fn grants_covering(&self, agent: &str, run: &RunId, now: Millis) -> Result<Vec<GrantRecord>, StoreError> {
        let mut connection = self.connection().await?;
        let rows = sqlx::query(SELECT_ACTIVE_GRANTS)
            .bind(agent)
            .bind(now)
            .fetch_all(&mut *connection)
            .await
            .map_err(self.db_error("cannot read the grants of a run"))?;
        connection.finished();
        let grants = rows.iter().map(decode_grant).collect::<Result<Vec<_>, _>>()?;
        Ok(grants.into_iter().filter(|grant| grant.covers(agent, run)).collect())
    }

    async fn count_use_of(&self, id: &GrantId) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        sqlx::query(COUNT_GRANT_USE)
            .bind(id.as_str())
            .execute(&mut *connection)
            .await
            .map_err(self.db_error("cannot count a grant's use"))?;
        connection.finished();
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

    fn grants_for_run<'a>(
        &'a self,
        agent: &'a str,
        run: &'a RunId,
        now: Millis,
    ) -> BoxFuture<'a, Result<Vec<GrantRecord>, StoreError>> {
        Box::pin(self.grants_covering(agent, run, now))
    }

    fn count_grant_use<'a>(&'a self, id: &'a GrantId) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.count_use_of(id))
    }
}
