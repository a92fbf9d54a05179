//! What both backends share: the row form of a run and of an event, the pure part of each write
//! (guard check, [`RunRecord::apply`], [`chain`]), and the mapping of database errors.
//!
//! Promises kept here for both backends:
//! - a row decodes to exactly the [`RunRecord`] that was encoded into it, or to
//!   [`StoreError::Corrupt`] (or [`StoreError::Undecryptable`]) naming the run — never to a guess;
//! - with data keys, the columns `suspension` and `decisions` of a run and `data` of an event are
//!   sealed on the way in and opened on the way out (see [`crate::encryption`]); events are chained
//!   over their plaintext before that;
//! - a database error is named by its code, never its text ([`database_error`]): disk full, read-only,
//!   corrupt (the run's when the failing operation was on one run), unreachable, or another failure;
//!   its message never contains the password of the URL the store was opened with.

use crate::encryption::{At, DataKeys, Place, open, seal};
use serde_json::Value;
use std::collections::BTreeMap;
use tollgate_agent_core::event::{ChainKey, EventKind, HashForm, NewEvent, StoredEvent, chain_with};
use tollgate_agent_core::run::{
    HeldTurn, Lease, Millis, RunError, RunRecord, RunState, RunStatus, Transition, TransitionError, Vote,
};
use tollgate_agent_core::suspension::{StoredSuspension, TurnDigest};
use tollgate_agent_core::tool_loop::TerminationReason;
use tollgate_agent_core::transcript::Usage;
use tollgate_agent_core::{
    Approval, ApprovalCommand, ApprovalId, Conflict, Guard, Metadata, Requirement, StoreError, TraceContext,
};

/// The columns of `runs`, in the order [`read_run_row`] reads them and [`bind_run_row!`] binds them.
macro_rules! run_columns {
    () => {
        "id, agent, status, version, input, output, termination_reason, iterations, input_tokens, \
         output_tokens, created_by, created_at, updated_at, finished_at, error, suspension, turn_digest, \
         required_calls, decisions, expires_at, lease_owner, lease_expires_at, last_seq, last_hash, metadata, trace, \
         trace_parent"
    };
}
pub(crate) use run_columns;

#[cfg(feature = "postgres")]
/// Binds every field of a [`RunRow`] in [`run_columns!`] order.
macro_rules! bind_run_row {
    ($query:expr, $row:expr) => {{
        let row = $row;
        $query
            .bind(&row.id)
            .bind(&row.agent)
            .bind(&row.status)
            .bind(row.version)
            .bind(&row.input)
            .bind(&row.output)
            .bind(&row.termination_reason)
            .bind(row.iterations)
            .bind(row.input_tokens)
            .bind(row.output_tokens)
            .bind(&row.created_by)
            .bind(row.created_at)
            .bind(row.updated_at)
            .bind(row.finished_at)
            .bind(&row.error)
            .bind(&row.suspension)
            .bind(&row.turn_digest)
            .bind(&row.required_calls)
            .bind(&row.decisions)
            .bind(row.expires_at)
            .bind(&row.lease_owner)
            .bind(row.lease_expires_at)
            .bind(row.last_seq)
            .bind(&row.last_hash)
            .bind(&row.metadata)
            .bind(&row.trace)
            .bind(&row.trace_parent)
    }};
}
#[cfg(feature = "postgres")]
pub(crate) use bind_run_row;

#[cfg(feature = "postgres")]
/// Binds the fields a transition may change, in the order of the backends' `UPDATE runs SET …`
/// statements: status, version, output, termination_reason, iterations, input_tokens, output_tokens,
/// updated_at, finished_at, error, suspension, turn_digest, required_calls, decisions, expires_at,
/// lease_owner, lease_expires_at, last_seq, last_hash. Not `metadata` or `trace`, which never change.
macro_rules! bind_run_changes {
    ($query:expr, $row:expr) => {{
        let row = $row;
        $query
            .bind(&row.status)
            .bind(row.version)
            .bind(&row.output)
            .bind(&row.termination_reason)
            .bind(row.iterations)
            .bind(row.input_tokens)
            .bind(row.output_tokens)
            .bind(row.updated_at)
            .bind(row.finished_at)
            .bind(&row.error)
            .bind(&row.suspension)
            .bind(&row.turn_digest)
            .bind(&row.required_calls)
            .bind(&row.decisions)
            .bind(row.expires_at)
            .bind(&row.lease_owner)
            .bind(row.lease_expires_at)
            .bind(row.last_seq)
            .bind(&row.last_hash)
    }};
}
#[cfg(feature = "postgres")]
pub(crate) use bind_run_changes;

/// A run as its `runs` row holds it: plain SQL values, JSON as text.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RunRow {
    pub id: String,
    pub agent: String,
    pub status: String,
    pub version: i64,
    pub input: String,
    pub output: Option<String>,
    pub termination_reason: Option<String>,
    pub iterations: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub created_by: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
    pub error: Option<String>,
    pub suspension: Option<String>,
    pub turn_digest: Option<String>,
    pub required_calls: Option<String>,
    pub decisions: Option<String>,
    pub expires_at: Option<i64>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub last_seq: i64,
    pub last_hash: String,
    /// JSON object; NULL when empty (and in rows from before migration 3).
    pub metadata: Option<String>,
    /// The run's W3C `traceparent`; NULL without one (and in rows from before SQLite migration 10,
    /// PostgreSQL 17).
    pub trace: Option<String>,
    /// The parent of the run's root span (16 hex), when it joined a caller's trace; NULL otherwise (and
    /// in rows from before SQLite migration 11, PostgreSQL 18).
    pub trace_parent: Option<String>,
}

/// Counters are `u64` in Rust and signed 64-bit in SQL; no real run comes near the limit.
fn to_sql_int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn encode_json<T: serde::Serialize>(id: &str, what: &str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Database(format!("cannot encode the {what} of run {id}: {e}")))
}

/// A sealed column's stored value: without keys the plaintext itself; with keys the value it replaces
/// when that holds the same plaintext at the same version (`unchanged`) already sealed as v2 with the
/// current key — an unchanged value is not encrypted again, and SQLite's update then leaves its column
/// alone — else a new seal (bound to the new version).
fn sealed_column(
    keys: Option<&DataKeys>,
    place: Place<'_>,
    unchanged: Option<&Option<String>>,
    plain: impl FnOnce() -> Result<String, StoreError>,
) -> Result<String, StoreError> {
    let Some(keys) = keys else { return plain() };
    match unchanged {
        Some(Some(stored)) if keys.sealed_with_current_key(stored) => Ok(stored.clone()),
        _ => keys.seal(place, &plain()?),
    }
}

/// The approvals of a held turn from its `decisions` column (opened) and its required calls.
///
/// Written since approvals became records: a JSON array of [`Approval`]s, one per required call in the
/// same order. Written before (v1, and every build up to commit `04e7135`): a JSON object of the one
/// decision recorded per call id, or NULL before the first — read as single approvals (one decision
/// settles each), decided where a decision is recorded, with the id `RUN/CALL`. Such a row is written
/// in the new form at its next change, so a run waiting across the upgrade resumes as it would have.
fn decode_approvals(
    run_id: &str,
    required: &[String],
    text: Option<&str>,
    due: Option<Millis>,
) -> Result<Vec<Approval>, String> {
    // The form is told by the first character, so the text is parsed once, straight into its type.
    let text = text.unwrap_or("{}");
    if text.trim_start().starts_with('[') {
        let approvals: Vec<Approval> = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let calls: Vec<&str> = approvals.iter().map(|a| a.call_id.as_str()).collect();
        if calls != required.iter().map(String::as_str).collect::<Vec<_>>() {
            return Err(format!("its approvals ({}) are not those of the required calls", calls.join(", ")));
        }
        return Ok(approvals);
    }
    let mut decisions: BTreeMap<String, Vote> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let approvals = required
        .iter()
        .map(|call_id| {
            let id = ApprovalId::new(format!("{run_id}/{call_id}"));
            let pending = Approval::pending(id, run_id, call_id.clone(), Requirement::SINGLE, due);
            match decisions.remove(call_id) {
                Some(decision) => pending.apply(&ApprovalCommand::Vote(decision)).map_err(|e| e.to_string()),
                None => Ok(pending),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    match decisions.keys().next() {
        Some(stray) => Err(format!("a decision for `{stray}`, which is not a required call")),
        None => Ok(approvals),
    }
}

impl RunRow {
    /// The row for a record. With data keys its sealed columns are encrypted; `before` is the record
    /// and the stored row this one replaces (for a value that did not change, see [`sealed_column`]).
    pub(crate) fn encode(
        run: &RunRecord,
        keys: Option<&DataKeys>,
        before: Option<(&RunRecord, &RunRow)>,
    ) -> Result<RunRow, StoreError> {
        let pending = run.held_turn();
        let version = to_sql_int(run.version);
        let place = |column| Place { run_id: &run.id, column, at: At::Version(version) };
        // Only with keys: without them nothing is compared (the write path stays as it was). A value
        // sealed at another version is bound to that version: it is sealed again.
        let before_pending =
            keys.and(before).filter(|(_, row)| row.version == version).map(|(record, row)| (record.held_turn(), row));
        let suspension = pending
            .map(|p| {
                let unchanged = before_pending
                    .filter(|(old, _)| old.is_some_and(|old| old.suspension == p.suspension))
                    .map(|(_, row)| &row.suspension);
                sealed_column(keys, place("runs.suspension"), unchanged, || Ok(p.suspension.as_str().to_owned()))
            })
            .transpose()?;
        // The held turn's approval records, in the column that held v1's decisions (see
        // [`decode_approvals`] for the form it had then).
        let decisions = pending
            .map(|p| {
                let unchanged = before_pending
                    .filter(|(old, _)| old.is_some_and(|old| old.approvals == p.approvals))
                    .map(|(_, row)| &row.decisions);
                sealed_column(keys, place("runs.decisions"), unchanged, || {
                    encode_json(&run.id, "approvals", &p.approvals)
                })
            })
            .transpose()?;
        Ok(RunRow {
            id: run.id.to_string(),
            agent: run.agent.clone(),
            status: run.status().as_str().to_owned(),
            version: to_sql_int(run.version),
            input: run.input.clone(),
            output: run.output().map(str::to_owned),
            termination_reason: run.termination_reason().map(|r| r.as_str().to_owned()),
            iterations: i64::from(run.iterations),
            input_tokens: to_sql_int(run.usage.input_tokens),
            output_tokens: to_sql_int(run.usage.output_tokens),
            created_by: run.created_by.to_string(),
            created_at: run.created_at,
            updated_at: run.updated_at,
            finished_at: run.finished_at(),
            error: run.error().map(|e| encode_json(&run.id, "error", e)).transpose()?,
            suspension,
            turn_digest: pending.map(|p| p.turn_digest.as_str().to_owned()),
            required_calls: pending
                .map(|p| encode_json(&run.id, "required calls", &p.required().collect::<Vec<_>>()))
                .transpose()?,
            decisions,
            expires_at: pending.and_then(|p| p.expires_at),
            lease_owner: run.lease().map(|l| l.owner.clone()),
            lease_expires_at: run.lease().map(|l| l.expires_at),
            last_seq: to_sql_int(run.last_seq),
            last_hash: run.last_hash.clone(),
            // An empty object is stored as NULL, as in rows from before the column.
            metadata: if run.metadata.is_empty() {
                None
            } else {
                Some(encode_json(&run.id, "metadata", &run.metadata)?)
            },
            trace: run.trace.map(|trace| trace.to_string()),
            trace_parent: run.trace.and_then(|trace| trace.parent_hex()),
        })
    }

    /// The record this row holds (its sealed columns opened with `keys`), or [`StoreError::Corrupt`] /
    /// [`StoreError::Undecryptable`].
    pub(crate) fn decode(self, keys: Option<&DataKeys>) -> Result<RunRecord, StoreError> {
        let id = self.id;
        let corrupt = |detail: String| StoreError::Corrupt { id: id.clone(), detail };
        let place = |column| Place { run_id: &id, column, at: At::Version(self.version) };
        let unsigned = |column: &str, value: i64| {
            u64::try_from(value).map_err(|_| corrupt(format!("column {column} is negative ({value})")))
        };
        let status =
            RunStatus::parse(&self.status).ok_or_else(|| corrupt(format!("unknown status `{}`", self.status)))?;
        let termination_reason = self
            .termination_reason
            .map(|text| {
                serde_json::from_value::<TerminationReason>(Value::String(text.clone()))
                    .map_err(|_| corrupt(format!("unknown termination reason `{text}`")))
            })
            .transpose()?;
        let metadata = match self.metadata {
            None => Metadata::new(),
            Some(text) => serde_json::from_str::<Metadata>(&text)
                .map_err(|e| corrupt(format!("column metadata is not valid: {e}")))?,
        };
        let trace = match (self.trace, self.trace_parent) {
            (None, None) => None,
            (None, Some(_)) => return Err(corrupt("column trace_parent is set without column trace".into())),
            (Some(text), parent) => {
                let trace = TraceContext::parse(&text).map_err(|e| corrupt(format!("column trace: {e}")))?;
                match parent {
                    None => Some(trace),
                    Some(parent) => {
                        Some(trace.with_parent_hex(&parent).map_err(|e| corrupt(format!("column trace_parent: {e}")))?)
                    }
                }
            }
        };
        let iterations = u32::try_from(self.iterations)
            .map_err(|_| corrupt(format!("column iterations is out of range ({})", self.iterations)))?;
        let usage = Usage {
            input_tokens: unsigned("input_tokens", self.input_tokens)?,
            output_tokens: unsigned("output_tokens", self.output_tokens)?,
        };
        let error = self
            .error
            .map(|text| {
                serde_json::from_str::<RunError>(&text).map_err(|e| corrupt(format!("column error is not valid: {e}")))
            })
            .transpose()?;
        let mut held = match self.suspension {
            None => {
                let stray = [
                    ("turn_digest", self.turn_digest.is_some()),
                    ("required_calls", self.required_calls.is_some()),
                    ("decisions", self.decisions.is_some()),
                    ("expires_at", self.expires_at.is_some()),
                ];
                if let Some((column, _)) = stray.iter().find(|(_, present)| *present) {
                    return Err(corrupt(format!("column {column} is set without a suspension")));
                }
                None
            }
            Some(suspension) => {
                let suspension = open(keys, place("runs.suspension"), suspension)?;
                let turn_digest =
                    self.turn_digest.ok_or_else(|| corrupt("a held turn without a turn digest".to_owned()))?;
                let required: Vec<String> = match self.required_calls {
                    Some(text) => serde_json::from_str(&text)
                        .map_err(|e| corrupt(format!("column required_calls is not valid: {e}")))?,
                    None => return Err(corrupt("a held turn without its required calls".to_owned())),
                };
                let decisions = self.decisions.map(|text| open(keys, place("runs.decisions"), text)).transpose()?;
                let approvals = decode_approvals(&id, &required, decisions.as_deref(), self.expires_at)
                    .map_err(|detail| corrupt(format!("column decisions is not valid: {detail}")))?;
                Some(HeldTurn {
                    suspension: StoredSuspension::from_stored(suspension),
                    turn_digest: TurnDigest(turn_digest),
                    approvals,
                    expires_at: self.expires_at,
                })
            }
        };
        let mut lease = match (self.lease_owner, self.lease_expires_at) {
            (Some(owner), Some(expires_at)) => Some(Lease { owner, expires_at }),
            (None, None) => None,
            _ => return Err(corrupt("a lease without both owner and expiry".to_owned())),
        };
        let (mut output, mut error, mut finished_at) = (self.output, error, self.finished_at);
        let mut reason = termination_reason;
        let contradiction = |what: &str| corrupt(format!("a {status} run {what}"));
        let mut finished = || finished_at.take().ok_or_else(|| contradiction("without its finish time"));
        let mut ended_by = |expected: TerminationReason| match reason.take() {
            Some(found) if found == expected => Ok(()),
            found => Err(contradiction(&format!(
                "with termination reason {}",
                found.map_or("(none)", TerminationReason::as_str)
            ))),
        };
        let state = match status {
            RunStatus::Queued => RunState::Queued { resuming: held.take() },
            RunStatus::Running => RunState::Running {
                lease: lease.take().ok_or_else(|| contradiction("without a lease"))?,
                resuming: held.take(),
            },
            RunStatus::WaitingForApproval => {
                RunState::Waiting(held.take().ok_or_else(|| contradiction("without its held turn (suspension)"))?)
            }
            RunStatus::Completed => RunState::Completed {
                output: output.take(),
                reason: reason.take().ok_or_else(|| contradiction("without a termination reason"))?,
                finished_at: finished()?,
            },
            RunStatus::Failed => {
                ended_by(TerminationReason::Error)?;
                let error = error.take().ok_or_else(|| contradiction("without its error"))?;
                RunState::Failed { error, finished_at: finished()? }
            }
            RunStatus::Cancelled => {
                ended_by(TerminationReason::Cancelled)?;
                RunState::Cancelled { finished_at: finished()? }
            }
            RunStatus::Expired => {
                ended_by(TerminationReason::Expired)?;
                RunState::Expired { finished_at: finished()? }
            }
        };
        // What the status did not take contradicts it (a finished run with a lease, a queued run with
        // an output, ...).
        let left = [
            ("a lease", lease.is_some()),
            ("a held turn (suspension)", held.is_some()),
            ("an output", output.is_some()),
            ("an error", error.is_some()),
            ("a finish time", finished_at.is_some()),
            ("a termination reason", reason.is_some()),
        ];
        if let Some((what, _)) = left.iter().find(|(_, present)| *present) {
            return Err(contradiction(&format!("with {what}")));
        }
        Ok(RunRecord {
            agent: self.agent,
            input: self.input,
            metadata,
            trace,
            iterations,
            usage,
            version: unsigned("version", self.version)?,
            created_by: self.created_by.into(),
            created_at: self.created_at,
            updated_at: self.updated_at,
            last_seq: unsigned("last_seq", self.last_seq)?,
            last_hash: self.last_hash,
            state,
            id: id.into(),
        })
    }
}

/// Typed access to the columns of a result row, by position: what the two backends' row types
/// (sqlx's `PgRow`, rusqlite's `Row`) have in common for reading runs and events. An error is the
/// driver's text (a wrong SQL type, a missing column).
pub(crate) trait Columns {
    fn text(&self, index: usize) -> Result<String, String>;
    fn optional_text(&self, index: usize) -> Result<Option<String>, String>;
    fn int(&self, index: usize) -> Result<i64, String>;
    fn optional_int(&self, index: usize) -> Result<Option<i64>, String>;
}

/// Reads the [`run_columns!`] of a result row (any extra columns after them are ignored). A value of
/// the wrong SQL type is [`StoreError::Corrupt`] for that run.
pub(crate) fn read_run_row(row: &impl Columns) -> Result<RunRow, StoreError> {
    let id = row
        .text(0)
        .map_err(|e| StoreError::Corrupt { id: "<unreadable id>".to_owned(), detail: format!("column id: {e}") })?;
    let read = || -> Result<RunRow, String> {
        Ok(RunRow {
            agent: row.text(1)?,
            status: row.text(2)?,
            version: row.int(3)?,
            input: row.text(4)?,
            output: row.optional_text(5)?,
            termination_reason: row.optional_text(6)?,
            iterations: row.int(7)?,
            input_tokens: row.int(8)?,
            output_tokens: row.int(9)?,
            created_by: row.text(10)?,
            created_at: row.int(11)?,
            updated_at: row.int(12)?,
            finished_at: row.optional_int(13)?,
            error: row.optional_text(14)?,
            suspension: row.optional_text(15)?,
            turn_digest: row.optional_text(16)?,
            required_calls: row.optional_text(17)?,
            decisions: row.optional_text(18)?,
            expires_at: row.optional_int(19)?,
            lease_owner: row.optional_text(20)?,
            lease_expires_at: row.optional_int(21)?,
            last_seq: row.int(22)?,
            last_hash: row.text(23)?,
            metadata: row.optional_text(24)?,
            trace: row.optional_text(25)?,
            trace_parent: row.optional_text(26)?,
            id: id.clone(),
        })
    };
    read().map_err(|detail| StoreError::Corrupt { id: id.clone(), detail })
}

/// The chain key new events are chained with: the current one of `keys`, none without keys.
pub(crate) fn chain_key(keys: Option<&DataKeys>) -> Option<&ChainKey> {
    keys.and_then(|keys| keys.chain_keys().current())
}

/// Reads and decodes a run row.
pub(crate) fn decode_run(row: &impl Columns, keys: Option<&DataKeys>) -> Result<RunRecord, StoreError> {
    read_run_row(row)?.decode(keys)
}

/// Decodes rows for `list` and `due`: a corrupt row is skipped with a warning so that one bad run does
/// not hide all the others (reading it by id still reports [`StoreError::Corrupt`]). So is a row this
/// store cannot decrypt ([`StoreError::Undecryptable`]).
#[cfg(feature = "postgres")]
pub(crate) fn decode_runs_skipping_corrupt<R: Columns>(
    rows: &[R],
    operation: &str,
    keys: Option<&DataKeys>,
) -> Vec<RunRecord> {
    rows.iter().filter_map(|row| keep_readable(decode_run(row, keys), operation)).collect()
}

/// The runs that decoded, and the ids of those that did not (each logged as by [`keep_readable`]): a
/// page of `list` leaves the unreadable ones out of its runs and names them in `skipped`.
pub(crate) fn split_readable(
    runs: impl IntoIterator<Item = Result<RunRecord, StoreError>>,
    operation: &str,
) -> (Vec<RunRecord>, Vec<String>) {
    let mut readable = Vec::new();
    let mut skipped = Vec::new();
    for run in runs {
        let id = match &run {
            Err(StoreError::Corrupt { id, .. } | StoreError::Undecryptable { id, .. }) => Some(id.clone()),
            _ => None,
        };
        match keep_readable(run, operation) {
            Some(run) => readable.push(run),
            None => skipped.push(id.unwrap_or_else(|| "<unknown id>".to_owned())),
        }
    }
    (readable, skipped)
}

/// A decoded run, or `None` with a warning when its row is corrupt (see [`decode_runs_skipping_corrupt`]).
pub(crate) fn keep_readable(run: Result<RunRecord, StoreError>, operation: &str) -> Option<RunRecord> {
    match run {
        Ok(run) => Some(run),
        Err(error) => {
            tracing::warn!(%error, operation, "skipping a run whose stored row cannot be read");
            None
        }
    }
}

/// An event as its `events` row holds it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct EventRow {
    pub seq: i64,
    pub at: String,
    pub kind: &'static str,
    pub round: i64,
    pub data: String,
    pub hash: String,
}

impl EventRow {
    /// The row for a chained event, its data sealed with `keys` (bound to the run and the seq).
    pub(crate) fn encode(run_id: &str, event: &StoredEvent, keys: Option<&DataKeys>) -> Result<EventRow, StoreError> {
        let seq = to_sql_int(event.seq);
        let data = encode_json(run_id, "event data", &event.data)?;
        Ok(EventRow {
            seq,
            at: event.at.clone(),
            kind: event.kind.as_str(),
            round: i64::from(event.round),
            data: seal(keys, event_place(run_id, seq, &event.hash), data)?,
            hash: event.hash.clone(),
        })
    }
}

/// Where an event's data is sealed: its run, its seq and the chain key its hash names, so that a keyed
/// hash rewritten without the key leaves the data unopenable.
pub(crate) fn event_place<'a>(run_id: &'a str, seq: i64, hash: &'a str) -> Place<'a> {
    let chain_key = match HashForm::of(hash) {
        HashForm::Keyed { key_id } => Some(key_id),
        HashForm::Plain => None,
    };
    Place { run_id, column: "events.data", at: At::Event { seq, chain_key } }
}

/// Reads an `events` row selected as `seq, at, kind, round, data, hash`, its data opened with `keys`.
pub(crate) fn decode_event(
    run_id: &str,
    row: &impl Columns,
    keys: Option<&DataKeys>,
) -> Result<StoredEvent, StoreError> {
    let corrupt = |detail: String| StoreError::Corrupt { id: run_id.to_owned(), detail };
    let read = || -> Result<(i64, String, String, i64, String, String), String> {
        Ok((row.int(0)?, row.text(1)?, row.text(2)?, row.int(3)?, row.text(4)?, row.text(5)?))
    };
    let (seq, at, kind, round, data, hash) = read().map_err(|e| corrupt(format!("an event row: {e}")))?;
    let data = open(keys, event_place(run_id, seq, &hash), data)?;
    let seq = u64::try_from(seq).map_err(|_| corrupt(format!("event seq {seq} is negative")))?;
    Ok(StoredEvent {
        seq,
        at,
        kind: EventKind::parse(&kind).ok_or_else(|| corrupt(format!("event {seq} has unknown kind `{kind}`")))?,
        round: u32::try_from(round).map_err(|_| corrupt(format!("event {seq} has round {round} out of range")))?,
        data: serde_json::from_str(&data).map_err(|e| corrupt(format!("event {seq} data is not JSON: {e}")))?,
        hash,
    })
}

/// Checks a [`Guard`] against a run as it is now.
pub(crate) fn check_guard(
    id: &str,
    guard: &Guard,
    status: RunStatus,
    version: u64,
    lease_owner: Option<&str>,
) -> Result<(), StoreError> {
    match guard {
        Guard::Version(expected) if *expected != version => Err(StoreError::Conflict {
            id: id.to_owned(),
            conflict: Conflict::StaleVersion { expected: *expected, found: version },
        }),
        Guard::Version(_) => Ok(()),
        Guard::Lease(owner) => {
            if status != RunStatus::Running {
                Err(StoreError::Conflict { id: id.to_owned(), conflict: Conflict::NotRunning { status } })
            } else if lease_owner != Some(owner.as_str()) {
                Err(StoreError::Conflict {
                    id: id.to_owned(),
                    conflict: Conflict::LeaseLost { holder: lease_owner.map(str::to_owned) },
                })
            } else {
                Ok(())
            }
        }
    }
}

/// The pure part of a transition: the guard, [`RunRecord::apply`], and the chained events (keyed with
/// `chain_key` when there is one). Returns the new record (with its new chain head) and the events to
/// insert.
pub(crate) fn plan_transition(
    current: &RunRecord,
    guard: &Guard,
    transition: &Transition,
    events: Vec<NewEvent>,
    now: Millis,
    chain_key: Option<&ChainKey>,
) -> Result<(RunRecord, Vec<StoredEvent>), StoreError> {
    check_guard(&current.id, guard, current.status(), current.version, current.lease().map(|l| l.owner.as_str()))?;
    let mut next = current.apply(transition, now).map_err(|refused| match refused {
        // Someone renewed the lease since the taker read the run: the takeover lost a race.
        TransitionError::LeaseHeld { owner, expires_at } => {
            StoreError::Conflict { id: current.id.to_string(), conflict: Conflict::LeaseHeld { owner, expires_at } }
        }
        refused => StoreError::Transition(refused),
    })?;
    let (stored, last_seq, last_hash) = chain_with(current.last_seq, &current.last_hash, events, chain_key);
    next.last_seq = last_seq;
    next.last_hash = last_hash;
    Ok((next, stored))
}

/// The pure part of a create: chains the first events after the record's (empty) chain head.
pub(crate) fn plan_create(
    mut run: RunRecord,
    events: Vec<NewEvent>,
    chain_key: Option<&ChainKey>,
) -> (RunRecord, Vec<StoredEvent>) {
    let (stored, last_seq, last_hash) = chain_with(run.last_seq, &run.last_hash, events, chain_key);
    run.last_seq = last_seq;
    run.last_hash = last_hash;
    (run, stored)
}

/// The fields of a run that `append` reads.
pub(crate) struct ChainHead {
    pub status: String,
    pub lease_owner: Option<String>,
    pub last_seq: i64,
    pub last_hash: String,
}

/// The pure part of an append: the lease guard and the chained events. Returns the events and the new
/// chain head.
pub(crate) fn plan_append(
    id: &str,
    owner: &str,
    head: ChainHead,
    events: Vec<NewEvent>,
    chain_key: Option<&ChainKey>,
) -> Result<(Vec<StoredEvent>, u64, String), StoreError> {
    let corrupt = |detail: String| StoreError::Corrupt { id: id.to_owned(), detail };
    let status = RunStatus::parse(&head.status).ok_or_else(|| corrupt(format!("unknown status `{}`", head.status)))?;
    let last_seq = u64::try_from(head.last_seq).map_err(|_| corrupt("column last_seq is negative".to_owned()))?;
    check_guard(id, &Guard::Lease(owner.to_owned()), status, 0, head.lease_owner.as_deref())?;
    Ok(chain_with(last_seq, &head.last_hash, events, chain_key))
}

/// The exclusive upper end of the id range that starts with `prefix` (ids are compared bytewise).
pub(crate) fn prefix_upper_bound(prefix: &str) -> String {
    let mut upper = String::with_capacity(prefix.len() + 4);
    upper.push_str(prefix);
    upper.push(char::MAX);
    upper
}

/// How many matches `resolve_prefix` counts at most before saying "more than".
pub(crate) const PREFIX_COUNT_CAP: i64 = 10_000;

/// The answer of `resolve_prefix` from the first (up to two) matching ids and, when there are several,
/// their count (capped at [`PREFIX_COUNT_CAP`] + 1).
pub(crate) fn resolve_prefix_answer(prefix: &str, first: Vec<String>, count: i64) -> Result<String, StoreError> {
    let mut ids = first.into_iter();
    match (ids.next(), ids.next()) {
        (None, _) => Err(StoreError::NotFound(prefix.to_owned())),
        (Some(id), None) => Ok(id),
        (Some(_), Some(_)) => {
            let more = count > PREFIX_COUNT_CAP;
            let matches = u64::try_from(count.min(PREFIX_COUNT_CAP)).unwrap_or(0);
            Err(StoreError::Conflict {
                id: prefix.to_owned(),
                conflict: Conflict::AmbiguousPrefix { prefix: prefix.to_owned(), matches, more },
            })
        }
    }
}

/// Passwords of the URL a store was opened with, kept only to remove them from error messages.
#[derive(Clone, Debug, Default)]
pub(crate) struct Secrets(Vec<String>);

impl Secrets {
    /// The password of `scheme://user:PASSWORD@host/…` and of a `password=` query parameter, both as
    /// written and percent-decoded.
    pub(crate) fn from_url(url: &str) -> Secrets {
        let mut found = Vec::new();
        if let Some((_, rest)) = url.split_once("://") {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
            if let Some((userinfo, _)) = authority.rsplit_once('@')
                && let Some((_, password)) = userinfo.split_once(':')
            {
                found.push(password.to_owned());
            }
        }
        if let Some((_, query)) = url.split_once('?') {
            for pair in query.split('&') {
                if let Some(password) = pair.strip_prefix("password=") {
                    found.push(password.to_owned());
                }
            }
        }
        let decoded: Vec<String> = found.iter().map(|p| percent_decode(p)).collect();
        found.extend(decoded);
        found.retain(|p| !p.is_empty());
        found.sort_by_key(|p| std::cmp::Reverse(p.len()));
        found.dedup();
        Secrets(found)
    }

    /// The text with every secret replaced by `***`.
    pub(crate) fn redact(&self, text: &str) -> String {
        self.0.iter().fold(text.to_owned(), |text, secret| text.replace(secret.as_str(), "***"))
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) =
                (bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex))
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `(status, count)` rows as the store reports them. A status this build does not know is logged
/// and left out (a row edited behind Tollgate's back); `list` and `get` report such runs as corrupt.
pub(crate) fn status_counts(rows: Vec<(String, i64)>) -> Vec<(RunStatus, u64)> {
    rows.into_iter()
        .filter_map(|(status, count)| match RunStatus::parse(&status) {
            Some(parsed) => Some((parsed, u64::try_from(count).unwrap_or(0))),
            None => {
                tracing::warn!(status, count, "runs with an unknown status are left out of the counts");
                None
            }
        })
        .collect()
}

/// What a database error means for the caller: the store names these in [`StoreError`], each with its
/// own problem type over HTTP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No room left: [`StoreError::DiskFull`].
    DiskFull,
    /// Writes are refused: [`StoreError::ReadOnly`].
    ReadOnly,
    /// The bytes read back are damaged: [`StoreError::Corrupt`] for a run, else
    /// [`StoreError::CorruptDatabase`].
    Corrupt,
    /// The database cannot be reached right now: [`StoreError::Unreachable`].
    Unreachable,
    /// The operating system failed an I/O call under the database (SQLite's `SQLITE_IOERR_*`), for a
    /// reason the code does not say: [`StoreError::Database`], unless the store finds the reason out
    /// (the SQLite store asks its folder whether the file system refuses writes: then `ReadOnly`).
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    Io,
    /// Anything else: [`StoreError::Database`].
    Other,
}

/// An error of a database driver, classified by its code (never by its text).
pub(crate) trait DatabaseFailure: std::fmt::Display {
    /// What the error means.
    fn failure(&self) -> Failure;
}

#[cfg(feature = "sqlite")]
impl DatabaseFailure for rusqlite::Error {
    /// By SQLite's extended result code ([`sqlite_failure`]).
    fn failure(&self) -> Failure {
        self.sqlite_error().map_or(Failure::Other, |error| sqlite_failure(error.extended_code))
    }
}

/// What SQLite's extended result code `code` means (its low byte is the primary code): `SQLITE_FULL`
/// (also at `max_page_count`) is a full disk; `SQLITE_READONLY` and each of its extended codes
/// (`_RECOVERY`, `_CANTLOCK`, `_ROLLBACK`, `_DBMOVED`, `_CANTINIT`, `_DIRECTORY`) refused writes;
/// `SQLITE_CORRUPT` / `SQLITE_NOTADB` damage; `SQLITE_BUSY` / `SQLITE_LOCKED` (the busy timeout ran
/// out) / `SQLITE_CANTOPEN` an unreachable database; every `SQLITE_IOERR_*` an I/O error whose cause
/// (a file system remounted read-only answers `EROFS`, which SQLite reports as `SQLITE_IOERR_WRITE`,
/// `_FSYNC`, `_TRUNCATE`, ...) the code does not carry.
#[cfg(feature = "sqlite")]
pub(crate) fn sqlite_failure(code: std::ffi::c_int) -> Failure {
    use rusqlite::ffi;
    match code & 0xff {
        ffi::SQLITE_FULL => Failure::DiskFull,
        ffi::SQLITE_READONLY => Failure::ReadOnly,
        ffi::SQLITE_CORRUPT | ffi::SQLITE_NOTADB => Failure::Corrupt,
        ffi::SQLITE_BUSY | ffi::SQLITE_LOCKED | ffi::SQLITE_CANTOPEN => Failure::Unreachable,
        ffi::SQLITE_IOERR => Failure::Io,
        _ => Failure::Other,
    }
}

#[cfg(feature = "postgres")]
impl DatabaseFailure for sqlx::Error {
    /// By PostgreSQL's SQLSTATE ([`sqlstate_failure`]); and sqlx's own I/O, TLS and pool failures
    /// (no connection within the store's `connect_timeout` included) are an unreachable database.
    fn failure(&self) -> Failure {
        match self {
            sqlx::Error::Database(error) => error.code().map_or(Failure::Other, |code| sqlstate_failure(&code)),
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => Failure::Unreachable,
            _ => Failure::Other,
        }
    }
}

/// What PostgreSQL's SQLSTATE `code` means: `53100` disk_full (the server maps `ENOSPC` to it);
/// `25006` read_only_sql_transaction (a standby, or `default_transaction_read_only`); `XX001` /
/// `XX002` data / index corrupted; class `08` (connection exception), `57P01`-`57P03` (the server
/// shutting down or starting) and `53300` too_many_connections an unreachable database.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn sqlstate_failure(code: &str) -> Failure {
    match code {
        "53100" => Failure::DiskFull,
        "25006" => Failure::ReadOnly,
        "XX001" | "XX002" => Failure::Corrupt,
        "57P01" | "57P02" | "57P03" | "53300" => Failure::Unreachable,
        code if code.starts_with("08") => Failure::Unreachable,
        _ => Failure::Other,
    }
}

/// A database failure as the [`StoreError`] its code names, with `context` and secrets removed. A
/// corruption here is the database's ([`StoreError::CorruptDatabase`]): use [`run_error`] where the
/// failing read or write was of one run.
pub(crate) fn database_error(secrets: &Secrets, context: &str, error: &impl DatabaseFailure) -> StoreError {
    let text = secrets.redact(&format!("{context}: {error}"));
    match error.failure() {
        Failure::DiskFull => StoreError::DiskFull(text),
        Failure::ReadOnly => StoreError::ReadOnly(text),
        Failure::Corrupt => StoreError::CorruptDatabase(text),
        Failure::Unreachable => StoreError::Unreachable(text),
        Failure::Io | Failure::Other => StoreError::Database(text),
    }
}

/// [`database_error`] for an operation on run `id`: damaged bytes met there are that run's
/// ([`StoreError::Corrupt`]), so the run fails alone and the others stay readable.
pub(crate) fn run_error(secrets: &Secrets, context: &str, id: &str, error: &impl DatabaseFailure) -> StoreError {
    match database_error(secrets, context, error) {
        StoreError::CorruptDatabase(detail) => StoreError::Corrupt { id: id.to_owned(), detail },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_agent_core::suspension::Decision;

    fn waiting_run() -> RunRecord {
        let mut run = RunRecord::new(
            "0193b0c6-0000-7000-8000-000000000001".into(),
            "demo".into(),
            "hello".into(),
            "local".into(),
            1_000,
            Some(Lease { owner: "node-a".into(), expires_at: 31_000 }),
        );
        run.usage = Usage { input_tokens: 120, output_tokens: 30 };
        run.iterations = 1;
        let id = run.id.clone();
        let pending = |call: &str, requirement| {
            Approval::pending(ApprovalId::new(format!("ap-{call}")), id.clone(), call, requirement, Some(9_000))
        };
        let denied = pending("call_1", Requirement::SINGLE).apply(&ApprovalCommand::Vote(Vote {
            decision: Decision::Deny { reason: "no".into() },
            actor: "alice".into(),
            at: 2_000,
        }));
        let two = Requirement::new(std::num::NonZeroU32::MIN.saturating_add(1));
        run.state = RunState::Waiting(HeldTurn {
            suspension: StoredSuspension::from_stored("{\"schema_version\":1}".into()),
            turn_digest: TurnDigest(format!("sha256:{}", "a".repeat(64))),
            approvals: vec![denied.unwrap_or_else(|e| panic!("{e}")), pending("call_2", two)],
            expires_at: Some(9_000),
        });
        run
    }

    #[test]
    fn a_run_round_trips_through_its_row() -> Result<(), StoreError> {
        let waiting = waiting_run();
        assert_eq!(RunRow::encode(&waiting, None, None)?.decode(None)?, waiting);
        let failed =
            waiting.apply(&Transition::Fail { error: RunError { kind: "k".into(), message: "m".into() } }, 5)?;
        assert_eq!(RunRow::encode(&failed, None, None)?.decode(None)?, failed);
        let approve = |actor: &str| Vote { decision: Decision::Approve, actor: actor.into(), at: 3_000 };
        // A quorum of two: the first approval keeps the run waiting, the second resumes it.
        let half = waiting.apply(
            &Transition::Vote { votes: vec![("call_2".into(), approve("bob"))], resume: None, remember: Vec::new() },
            3_000,
        )?;
        assert_eq!(half.status(), RunStatus::WaitingForApproval);
        assert_eq!(RunRow::encode(&half, None, None)?.decode(None)?, half);
        let resuming = half.apply(
            &Transition::Vote {
                votes: vec![("call_2".into(), approve("carol"))],
                resume: Some(Lease { owner: "node-b".into(), expires_at: 33_000 }),
                remember: Vec::new(),
            },
            3_000,
        )?;
        assert!(resuming.held_turn().is_some() && resuming.lease().is_some());
        assert_eq!(RunRow::encode(&resuming, None, None)?.decode(None)?, resuming);
        let completed = resuming.apply(
            &Transition::Complete {
                output: None,
                reason: TerminationReason::BudgetExhausted,
                iterations: 2,
                usage: Usage::default(),
            },
            4_000,
        )?;
        assert_eq!(RunRow::encode(&completed, None, None)?.decode(None)?, completed);
        for ended in [Transition::Cancel, Transition::Expire] {
            let ended = waiting.apply(&ended, 6_000)?;
            assert_eq!(RunRow::encode(&ended, None, None)?.decode(None)?, ended);
        }
        let running = RunRecord::new(
            "x".into(),
            "a".into(),
            "i".into(),
            "c".into(),
            1,
            Some(Lease { owner: "o".into(), expires_at: 2 }),
        );
        assert_eq!(RunRow::encode(&running, None, None)?.decode(None)?, running);
        assert_eq!(RunRow::encode(&running, None, None)?.metadata, None, "no metadata is NULL");
        let metadata = Metadata::try_from(serde_json::json!({"customer": "acme", "seats": [1, 2]}))
            .map_err(|e| StoreError::Database(e.to_string()))?;
        let with_metadata = running.with_metadata(metadata);
        let row = RunRow::encode(&with_metadata, None, None)?;
        assert_eq!(row.metadata.as_deref(), Some(r#"{"customer":"acme","seats":[1,2]}"#));
        assert_eq!(row.decode(None)?, with_metadata);
        Ok(())
    }

    /// A held turn stored before approvals were records keeps its decisions in a JSON object by call id
    /// (or NULL before the first): each required call reads as a single approval, decided where a
    /// decision is recorded; a stray decision is corrupt.
    #[test]
    fn decisions_stored_before_approvals_were_records_read_as_single_approvals() -> Result<(), StoreError> {
        let mut row = RunRow::encode(&waiting_run(), None, None)?;
        row.decisions = Some(r#"{"call_1":{"action":"deny","reason":"no","actor":"alice","at":2000}}"#.into());
        let run = row.clone().decode(None)?;
        let held = run.held_turn().ok_or_else(|| StoreError::Database("not held".into()))?;
        assert_eq!(held.required().collect::<Vec<_>>(), ["call_1", "call_2"]);
        assert_eq!(held.approvals[0].id.as_str(), format!("{}/call_1", run.id));
        assert_eq!(
            held.approval(&"call_1".into()).and_then(Approval::settled_by),
            Some(Vote { decision: Decision::Deny { reason: "no".into() }, actor: "alice".into(), at: 2_000 })
        );
        assert!(held.approvals[1].is_pending() && !held.approvals[1].requirement.is_quorum());
        // Written back in the new form, it reads the same.
        assert_eq!(RunRow::encode(&run, None, None)?.decode(None)?, run);
        row.decisions = None;
        assert!(row.clone().decode(None)?.held_turn().is_some_and(|h| h.decisions().is_empty()));
        row.decisions = Some(r#"{"call_9":{"action":"approve","actor":"a","at":1}}"#.into());
        assert!(
            matches!(row.clone().decode(None), Err(StoreError::Corrupt { detail, .. }) if detail.contains("call_9"))
        );
        // Approvals that are not those of the required calls are corrupt too.
        let mut row = RunRow::encode(&waiting_run(), None, None)?;
        row.required_calls = Some(r#"["call_1"]"#.into());
        assert!(matches!(row.decode(None), Err(StoreError::Corrupt { detail, .. }) if detail.contains("required")));
        Ok(())
    }

    #[test]
    fn a_bad_row_is_corrupt_for_its_run() -> Result<(), StoreError> {
        let mut row = RunRow::encode(&waiting_run(), None, None)?;
        row.decisions = Some("{not json".into());
        assert!(matches!(row.decode(None), Err(StoreError::Corrupt { id, .. }) if id.starts_with("0193b0c6")));
        let mut row = RunRow::encode(&waiting_run(), None, None)?;
        row.status = "sleeping".into();
        assert!(matches!(row.decode(None), Err(StoreError::Corrupt { .. })));
        let mut row = RunRow::encode(&waiting_run(), None, None)?;
        row.version = -1;
        assert!(matches!(row.decode(None), Err(StoreError::Corrupt { .. })));
        Ok(())
    }

    #[test]
    fn a_row_whose_columns_contradict_its_status_is_corrupt() -> Result<(), StoreError> {
        let waiting = RunRow::encode(&waiting_run(), None, None)?;
        let cancelled = RunRow::encode(&waiting_run().apply(&Transition::Cancel, 5)?, None, None)?;
        let running = RunRow::encode(
            &RunRecord::new(
                "r".into(),
                "a".into(),
                "i".into(),
                "c".into(),
                1,
                Some(Lease { owner: "o".into(), expires_at: 2 }),
            ),
            None,
            None,
        )?;
        let tampered: Vec<(&str, RunRow)> = vec![
            (
                "without its held turn",
                RunRow {
                    suspension: None,
                    turn_digest: None,
                    required_calls: None,
                    decisions: None,
                    expires_at: None,
                    ..waiting.clone()
                },
            ),
            ("column turn_digest is set without a suspension", RunRow { suspension: None, ..waiting.clone() }),
            ("with a lease", RunRow { lease_owner: Some("o".into()), lease_expires_at: Some(9), ..waiting.clone() }),
            (
                "with a held turn",
                RunRow {
                    suspension: waiting.suspension.clone(),
                    turn_digest: waiting.turn_digest.clone(),
                    required_calls: waiting.required_calls.clone(),
                    ..cancelled.clone()
                },
            ),
            ("with an output", RunRow { output: Some("x".into()), ..waiting.clone() }),
            ("without its finish time", RunRow { finished_at: None, ..cancelled.clone() }),
            (
                "with termination reason completed",
                RunRow { termination_reason: Some("completed".into()), ..cancelled.clone() },
            ),
            ("with termination reason (none)", RunRow { termination_reason: None, ..cancelled.clone() }),
            (
                "without its error",
                RunRow { status: "failed".into(), termination_reason: Some("error".into()), ..cancelled.clone() },
            ),
            ("without a lease", RunRow { lease_owner: None, lease_expires_at: None, ..running.clone() }),
            ("with a finish time", RunRow { finished_at: Some(3), ..running.clone() }),
            ("with a lease", RunRow { status: "queued".into(), ..running }),
        ];
        for (why, row) in tampered {
            let read = row.decode(None);
            assert!(
                matches!(&read, Err(StoreError::Corrupt { detail, .. }) if detail.contains(why)),
                "{why}: {read:?}"
            );
        }
        Ok(())
    }

    /// SQLite's extended result codes, by their numbers (sqlite3.h), name the failure by their primary
    /// code: every `SQLITE_READONLY_*` refuses writes, every `SQLITE_IOERR_*` is an I/O error.
    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_extended_codes_name_the_failure() {
        let cases = [
            (13, Failure::DiskFull),     // SQLITE_FULL
            (8, Failure::ReadOnly),      // SQLITE_READONLY
            (264, Failure::ReadOnly),    // SQLITE_READONLY_RECOVERY
            (520, Failure::ReadOnly),    // SQLITE_READONLY_CANTLOCK
            (776, Failure::ReadOnly),    // SQLITE_READONLY_ROLLBACK
            (1032, Failure::ReadOnly),   // SQLITE_READONLY_DBMOVED
            (1288, Failure::ReadOnly),   // SQLITE_READONLY_CANTINIT
            (1544, Failure::ReadOnly),   // SQLITE_READONLY_DIRECTORY
            (10, Failure::Io),           // SQLITE_IOERR
            (778, Failure::Io),          // SQLITE_IOERR_WRITE (EROFS on a file system remounted read-only)
            (1034, Failure::Io),         // SQLITE_IOERR_FSYNC
            (1546, Failure::Io),         // SQLITE_IOERR_TRUNCATE
            (4874, Failure::Io),         // SQLITE_IOERR_SHMSIZE
            (11, Failure::Corrupt),      // SQLITE_CORRUPT
            (267, Failure::Corrupt),     // SQLITE_CORRUPT_VTAB
            (26, Failure::Corrupt),      // SQLITE_NOTADB
            (5, Failure::Unreachable),   // SQLITE_BUSY
            (261, Failure::Unreachable), // SQLITE_BUSY_RECOVERY
            (6, Failure::Unreachable),   // SQLITE_LOCKED
            (14, Failure::Unreachable),  // SQLITE_CANTOPEN
            (19, Failure::Other),        // SQLITE_CONSTRAINT
            (2067, Failure::Other),      // SQLITE_CONSTRAINT_UNIQUE
            (1, Failure::Other),         // SQLITE_ERROR
        ];
        for (code, failure) in cases {
            assert_eq!(sqlite_failure(code), failure, "extended code {code}");
        }
    }

    #[test]
    fn sqlstates_name_the_failure() {
        let cases = [
            ("53100", Failure::DiskFull),
            ("25006", Failure::ReadOnly),
            ("XX001", Failure::Corrupt),
            ("XX002", Failure::Corrupt),
            ("08006", Failure::Unreachable),
            ("08001", Failure::Unreachable),
            ("57P01", Failure::Unreachable),
            ("57P03", Failure::Unreachable),
            ("53300", Failure::Unreachable),
            ("23505", Failure::Other),
            ("40001", Failure::Other),
        ];
        for (code, failure) in cases {
            assert_eq!(sqlstate_failure(code), failure, "SQLSTATE {code}");
        }
    }

    #[test]
    fn passwords_never_reach_error_text() {
        let secrets = Secrets::from_url("postgres://tollgate:s3cr%40t@db.example:5432/runs?password=other");
        let text = secrets.redact("could not connect to postgres://tollgate:s3cr%40t@db.example with s3cr@t or other");
        assert!(!text.contains("s3cr"), "{text}");
        assert!(!text.contains("other"), "{text}");
        assert!(Secrets::from_url("postgres://postgres@127.0.0.1/test").0.is_empty());
    }

    #[test]
    fn prefix_answers() {
        assert_eq!(resolve_prefix_answer("01", vec![], 0), Err(StoreError::NotFound("01".into())));
        assert_eq!(resolve_prefix_answer("01", vec!["0123".into()], 1), Ok("0123".into()));
        let Err(StoreError::Conflict { conflict, .. }) =
            resolve_prefix_answer("01", vec!["011".into(), "012".into()], 3)
        else {
            panic!("several matches must conflict");
        };
        assert_eq!(conflict, Conflict::AmbiguousPrefix { prefix: "01".into(), matches: 3, more: false });
        assert_eq!(conflict.to_string(), "the prefix `01` matches 3 runs; give more characters");
        let Err(StoreError::Conflict { conflict, .. }) =
            resolve_prefix_answer("01", vec!["011".into(), "012".into()], PREFIX_COUNT_CAP + 1)
        else {
            panic!("several matches must conflict");
        };
        assert_eq!(conflict.to_string(), "the prefix `01` matches more than 10000 runs; give more characters");
        assert!(prefix_upper_bound("01").as_str() > "01ffff-ffff");
    }
}
