//! Embedded schema migrations, applied on open, and the refusal of a database written by a newer
//! Tollgate.
//!
//! Each backend lists its migrations (SQL files under `migrations/<backend>/`, compiled in). Applied
//! ones are recorded in the table `tollgate_migrations`; a database that records a version newer than
//! the newest this build knows is refused with [`StoreError::NewerSchema`] before anything is written,
//! so an old binary never guesses at a newer layout.

use tollgate_agent_core::StoreError;

/// One schema change.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Migration {
    /// 1, 2, … in order of application.
    pub version: i64,
    /// A short name, recorded with the version.
    pub name: &'static str,
    /// The statements (several, separated by `;`).
    pub sql: &'static str,
}

/// Creates the bookkeeping table (the same statement works on both backends).
pub(crate) const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS tollgate_migrations (\
     version BIGINT NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)";

/// The newest applied version (NULL on a new database).
pub(crate) const SELECT_VERSION: &str = "SELECT MAX(version) FROM tollgate_migrations";

/// The migrations a database at version `found` still needs, or `NewerSchema`.
pub(crate) fn to_apply(migrations: &'static [Migration], found: i64) -> Result<Vec<Migration>, StoreError> {
    let supported = migrations.iter().map(|m| m.version).max().unwrap_or(0);
    if found > supported {
        return Err(StoreError::NewerSchema { found, supported });
    }
    Ok(migrations.iter().filter(|m| m.version > found).copied().collect())
}

/// Wall-clock milliseconds, only for the `applied_at` bookkeeping column.
pub(crate) fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &[Migration] =
        &[Migration { version: 1, name: "one", sql: "" }, Migration { version: 2, name: "two", sql: "" }];

    #[test]
    fn applies_what_is_missing_and_refuses_newer() {
        assert_eq!(to_apply(TWO, 0).map(|m| m.len()), Ok(2));
        assert_eq!(to_apply(TWO, 1).map(|m| m.iter().map(|m| m.version).collect::<Vec<_>>()), Ok(vec![2]));
        assert_eq!(to_apply(TWO, 2).map(|m| m.len()), Ok(0));
        assert_eq!(to_apply(TWO, 3).map(|m| m.len()), Err(StoreError::NewerSchema { found: 3, supported: 2 }));
    }
}
