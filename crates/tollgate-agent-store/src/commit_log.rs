//! What both stores share for the commit log ([`ChangeFeed::committed`]) and its named readers
//! ([`ChangeFeed::hold_reader`]): positions and the reader table's statements.
//!
//! [`ChangeFeed::committed`]: tollgate_agent_core::ChangeFeed::committed
//! [`ChangeFeed::hold_reader`]: tollgate_agent_core::ChangeFeed::hold_reader

use tollgate_agent_core::StoreError;

/// A position a store did not give (or one of another backend's): answered as corrupt stored data, so
/// that its reader starts again rather than retrying the same position for ever.
pub(crate) fn bad_position(position: &str) -> StoreError {
    StoreError::Corrupt {
        id: "commit log".to_owned(),
        detail: format!("`{position}` is not a position of this store's commit log"),
    }
}

/// A position beyond anything this database has given: the database was replaced (restored from a
/// backup, or dumped into another cluster, whose numbering starts lower), so reading on from it would
/// pass over every commit until the numbering catches up.
pub(crate) fn position_ahead(position: &str) -> StoreError {
    StoreError::Corrupt {
        id: "commit log".to_owned(),
        detail: format!(
            "position `{position}` is ahead of this database's commits (a database restored or moved since it was \
             stored?)"
        ),
    }
}

#[cfg(feature = "postgres")]
/// A PostgreSQL position: the batch last read, as (transaction, run id, last seq); positions are
/// ordered as these triples are. `TX:LAST_SEQ:RUN_ID`.
pub(crate) fn pg_position(tx: i64, run_id: &str, last_seq: i64) -> String {
    format!("{tx}:{last_seq}:{run_id}")
}

#[cfg(feature = "postgres")]
/// Reads a [`pg_position`].
pub(crate) fn parse_pg_position(position: &str) -> Result<(i64, String, i64), StoreError> {
    let mut parts = position.splitn(3, ':');
    let (Some(tx), Some(last_seq), Some(run_id)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad_position(position));
    };
    match (tx.parse(), last_seq.parse()) {
        (Ok(tx), Ok(last_seq)) => Ok((tx, run_id.to_owned(), last_seq)),
        _ => Err(bad_position(position)),
    }
}

#[cfg(feature = "sqlite")]
/// Reads a SQLite position: the id of the last event read.
pub(crate) fn parse_sqlite_position(position: &str) -> Result<i64, StoreError> {
    position.parse::<i64>().ok().filter(|id| *id >= 0).ok_or_else(|| bad_position(position))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_positions_read_back_and_nonsense_is_refused() {
        let position = pg_position(42, "run:with:colons", 7);
        assert_eq!(parse_pg_position(&position), Ok((42, "run:with:colons".to_owned(), 7)));
        for bad in ["", "42", "42:x:r", "x:1:r"] {
            assert!(matches!(parse_pg_position(bad), Err(StoreError::Corrupt { .. })), "{bad}");
        }
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_positions_read_back_and_nonsense_is_refused() {
        assert_eq!(parse_sqlite_position("12"), Ok(12));
        for bad in ["", "-1", "1:2:r", "x"] {
            assert!(matches!(parse_sqlite_position(bad), Err(StoreError::Corrupt { .. })), "{bad}");
        }
    }
}
