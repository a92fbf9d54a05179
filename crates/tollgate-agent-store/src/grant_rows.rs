//! Grants as rows of the `grants` table (migrations `sqlite/0007_grants.sql`, `postgres/0014_grants.sql`),
//! and what both backends' [`Grants`](tollgate_agent_core::Grants) share: the listing's page, the
//! answer to a revocation refused.
//!
//! Promises kept here for both backends:
//! - a row decodes to exactly the [`GrantRecord`] that was stored, or to
//!   [`StoreError::CorruptDatabase`] naming the grant (a `match` that is not a JSON object of JSON
//!   pointers, an unknown scope, a revocation without its time or its actor, a value of the wrong SQL
//!   type) — never to a guess, never a panic;
//! - a grant is stored new: its `uses` 0, not revoked, whatever the record given says;
//! - a page of grants is newest first by id, at most [`MAX_PAGE`] long; its cursor is the last id of
//!   the page, and `next_cursor` is `None` once no grant is left after the page.

use crate::codec::Columns;
use serde_json::Value;
use tollgate_agent_core::event::{EventKind, StoredEvent};
use tollgate_agent_core::grant::{GrantMatch, GrantPage, GrantRecord, GrantStatus};
use tollgate_agent_core::run::Millis;
use tollgate_agent_core::{GrantId, GrantScope, StoreError};

/// The columns of `grants`, in the order [`read_grant_row`] reads them (`match` is a keyword of
/// SQLite's, hence quoted).
macro_rules! grant_columns {
    () => {
        "id, agent, tool, \"match\", scope, run_id, reason, created_by, created_at, expires_at, revoked_at, \
         revoked_by, uses"
    };
}
pub(crate) use grant_columns;

/// The most grants a page holds, whatever the query asks.
pub(crate) const MAX_PAGE: u32 = 1000;

/// A grant as its `grants` row holds it: plain SQL values, the `match` as JSON text.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GrantRow {
    pub id: String,
    pub agent: String,
    pub tool: String,
    pub pattern: String,
    pub scope: String,
    pub run_id: Option<String>,
    pub reason: Option<String>,
    pub created_by: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
    pub revoked_by: Option<String>,
    pub uses: i64,
}

impl GrantRow {
    /// The row of a new grant, and the record it stands for: `uses` 0, not revoked.
    pub(crate) fn new(grant: GrantRecord) -> Result<(GrantRow, GrantRecord), StoreError> {
        let grant = GrantRecord { uses: 0, revoked: None, ..grant };
        let pattern = serde_json::to_string(grant.matcher.pattern())
            .map_err(|e| StoreError::Database(format!("cannot encode the match of grant {}: {e}", grant.id)))?;
        let row = GrantRow {
            id: grant.id.to_string(),
            agent: grant.agent.clone(),
            tool: grant.tool.clone(),
            pattern,
            scope: grant.scope.as_str().to_owned(),
            run_id: grant.run_id.as_ref().map(ToString::to_string),
            reason: grant.reason.clone(),
            created_by: grant.created_by.to_string(),
            created_at: grant.created_at,
            expires_at: grant.expires_at,
            revoked_at: None,
            revoked_by: None,
            uses: 0,
        };
        Ok((row, grant))
    }

    /// The record the row holds, or [`StoreError::CorruptDatabase`] naming the grant.
    pub(crate) fn decode(self) -> Result<GrantRecord, StoreError> {
        let corrupt = |detail: String| StoreError::CorruptDatabase(format!("grant {}: {detail}", self.id));
        let pattern = match serde_json::from_str::<Value>(&self.pattern) {
            Ok(Value::Object(pattern)) => pattern,
            Ok(other) => return Err(corrupt(format!("its match is not a JSON object: {other}"))),
            Err(e) => return Err(corrupt(format!("its match is not JSON: {e}"))),
        };
        let matcher = GrantMatch::new(pattern).map_err(|e| corrupt(format!("its match: {e}")))?;
        let scope = GrantScope::parse(&self.scope).ok_or_else(|| corrupt(format!("unknown scope `{}`", self.scope)))?;
        let revoked = match (self.revoked_at, &self.revoked_by) {
            (Some(at), Some(by)) => Some((at, by.as_str().into())),
            (None, None) => None,
            _ => return Err(corrupt("revoked_at and revoked_by must be set together".to_owned())),
        };
        let uses = u64::try_from(self.uses).map_err(|_| corrupt(format!("negative uses {}", self.uses)))?;
        Ok(GrantRecord {
            agent: self.agent,
            tool: self.tool,
            matcher,
            scope,
            run_id: self.run_id.map(Into::into),
            reason: self.reason,
            created_by: self.created_by.into(),
            created_at: self.created_at,
            expires_at: self.expires_at,
            revoked,
            uses,
            id: self.id.into(),
        })
    }
}

/// Reads the [`grant_columns!`] of a result row. A value of the wrong SQL type is
/// [`StoreError::CorruptDatabase`] naming the grant.
pub(crate) fn read_grant_row(row: &impl Columns) -> Result<GrantRow, StoreError> {
    let id = row.text(0).map_err(|e| StoreError::CorruptDatabase(format!("a grant's id cannot be read: {e}")))?;
    let read = || -> Result<GrantRow, String> {
        Ok(GrantRow {
            agent: row.text(1)?,
            tool: row.text(2)?,
            pattern: row.text(3)?,
            scope: row.text(4)?,
            run_id: row.optional_text(5)?,
            reason: row.optional_text(6)?,
            created_by: row.text(7)?,
            created_at: row.int(8)?,
            expires_at: row.int(9)?,
            revoked_at: row.optional_int(10)?,
            revoked_by: row.optional_text(11)?,
            uses: row.int(12)?,
            id: id.clone(),
        })
    };
    read().map_err(|detail| StoreError::CorruptDatabase(format!("grant {id}: {detail}")))
}

/// Reads and decodes a grant row.
pub(crate) fn decode_grant(row: &impl Columns) -> Result<GrantRecord, StoreError> {
    read_grant_row(row)?.decode()
}

/// How many rows a listing reads for a page of `limit`: the page, clamped to `1..=MAX_PAGE`, and one
/// more, which tells whether another page exists.
pub(crate) fn rows_for_page(limit: u32) -> i64 {
    i64::from(limit.clamp(1, MAX_PAGE)) + 1
}

/// The page of `limit` (clamped as [`rows_for_page`] reads) out of the rows read, newest first.
pub(crate) fn grant_page(mut grants: Vec<GrantRecord>, limit: u32) -> GrantPage {
    let limit = usize::try_from(limit.clamp(1, MAX_PAGE)).unwrap_or(usize::MAX);
    let more = grants.len() > limit;
    grants.truncate(limit);
    let next_cursor = if more { grants.last().map(|grant| grant.id.to_string()) } else { None };
    GrantPage { grants, next_cursor }
}

/// Why grant `id` could not be revoked at `now`, given the grant as it stands after the
/// compare-and-set wrote nothing: it is not there, or already revoked (which beats expired), or expired.
pub(crate) fn refused_revocation(id: &GrantId, found: Option<GrantRecord>, now: Millis) -> StoreError {
    match found.map(|grant| grant.status(now)) {
        None => StoreError::GrantNotFound(id.clone()),
        Some(GrantStatus::Active) => {
            // Only a change behind the store's back (an active grant the compare-and-set missed).
            StoreError::Database(format!("grant {id} changed while it was being revoked"))
        }
        Some(status) => StoreError::GrantClosed { id: id.clone(), status },
    }
}

/// The grants whose use `events` record: one entry per `tool_started` whose data names a grant
/// (`"grant": ID`), for the write that commits them to count in its own transaction. A grant gone
/// meanwhile is counted nowhere (its statement changes no row).
pub(crate) fn uses_in(events: &[StoredEvent]) -> Vec<&str> {
    events.iter().filter_map(|event| use_of(event.kind, &event.data)).collect()
}

/// Whether `events` (about to be written) record a use of a grant (see [`uses_in`]).
#[cfg(feature = "postgres")]
pub(crate) fn record_uses(events: &[tollgate_agent_core::event::NewEvent]) -> bool {
    events.iter().any(|event| use_of(event.kind, &event.data).is_some())
}

/// The grant an event of `kind` with `data` records a use of: a `tool_started` naming one.
fn use_of(kind: EventKind, data: &Value) -> Option<&str> {
    (kind == EventKind::ToolStarted).then(|| data.get("grant").and_then(Value::as_str)).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn grant() -> GrantRecord {
        let Value::Object(pattern) = json!({"/path": "notes/*", "/mode": 420}) else { unreachable!() };
        GrantRecord {
            id: "g1".into(),
            agent: "notes".into(),
            tool: "fs_write".into(),
            matcher: GrantMatch::new(pattern).unwrap_or_else(|e| panic!("{e}")),
            scope: GrantScope::Run,
            run_id: Some("r1".into()),
            reason: Some("tidying".into()),
            created_by: "alice".into(),
            created_at: 10,
            expires_at: 20,
            revoked: Some((15, "bob".into())),
            uses: 3,
        }
    }

    #[test]
    fn a_new_grant_round_trips_unused_and_unrevoked() -> Result<(), StoreError> {
        let (row, stored) = GrantRow::new(grant())?;
        assert_eq!((row.uses, row.revoked_at, &row.revoked_by), (0, None, &None));
        assert_eq!(row.pattern, r#"{"/path":"notes/*","/mode":420}"#, "the pattern's order is kept");
        assert_eq!(stored, GrantRecord { uses: 0, revoked: None, ..grant() });
        assert_eq!(row.decode()?, stored);
        Ok(())
    }

    #[test]
    fn a_row_that_does_not_parse_is_corrupt_naming_the_grant() -> Result<(), StoreError> {
        let (row, _) = GrantRow::new(grant())?;
        let damaged = [
            GrantRow { pattern: "not json".into(), ..row.clone() },
            GrantRow { pattern: "[1]".into(), ..row.clone() },
            GrantRow { pattern: r#"{"path": "x"}"#.into(), ..row.clone() },
            GrantRow { scope: "world".into(), ..row.clone() },
            GrantRow { revoked_at: Some(1), ..row.clone() },
            GrantRow { uses: -1, ..row },
        ];
        for damaged in damaged {
            let decoded = damaged.clone().decode();
            assert!(
                matches!(&decoded, Err(StoreError::CorruptDatabase(detail)) if detail.contains("grant g1")),
                "{damaged:?}: {decoded:?}"
            );
        }
        Ok(())
    }

    #[test]
    fn pages_are_clamped_and_name_their_last_id() -> Result<(), StoreError> {
        let grants: Vec<GrantRecord> = (0..3).map(|n| GrantRecord { id: format!("g{n}").into(), ..grant() }).collect();
        assert_eq!(rows_for_page(0), 2);
        assert_eq!(rows_for_page(5_000), i64::from(MAX_PAGE) + 1);
        let page = grant_page(grants.clone(), 2);
        assert_eq!((page.grants.len(), page.next_cursor.as_deref()), (2, Some("g1")));
        let last = grant_page(grants, 3);
        assert_eq!((last.grants.len(), last.next_cursor), (3, None));
        Ok(())
    }

    #[test]
    fn a_refused_revocation_says_why() {
        let id = GrantId::from("g1");
        assert_eq!(refused_revocation(&id, None, 0), StoreError::GrantNotFound(id.clone()));
        let expired_and_revoked = grant();
        assert_eq!(
            refused_revocation(&id, Some(expired_and_revoked), 30),
            StoreError::GrantClosed { id: id.clone(), status: GrantStatus::Revoked },
            "revoked beats expired"
        );
        let expired = GrantRecord { revoked: None, ..grant() };
        assert_eq!(
            refused_revocation(&id, Some(expired), 20),
            StoreError::GrantClosed { id, status: GrantStatus::Expired },
            "expiry is exclusive"
        );
    }
}
