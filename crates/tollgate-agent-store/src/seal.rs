//! The migration that seals what encryption at rest refuses to read (`tollgate seal`): plaintext in a
//! sealed column, written before `[[privacy.keys]]` was configured, and a run's column sealed in the
//! `enc:v1` envelope, which does not bind the run's version (see [`crate::encryption`]).
//!
//! It walks the runs by id in batches (each batch one transaction) and, per run, seals as v2 with the
//! first data key: the `suspension` and `decisions` columns that are plaintext or v1, and every event
//! whose data is plaintext. Values already sealed as v2 are left alone, so running it again changes
//! nothing (events sealed as v1 stay as they are: v1 binds an event to its run and seq, and an event is
//! written once). What it writes is compare-and-set on the run's version and on each event's value as it
//! was read, so it can run beside a server.
//!
//! What it refuses to seal (the run is reported and left as it is, still refused on reads): a run that
//! already holds values this build sealed (v2) yet has a plaintext or v1 column, and a plaintext event
//! whose hash is keyed. A store with keys never writes those, so they were written behind its back; sealing
//! them would make a planted value look genuine.
//!
//! The migration trusts the other plaintext and v1 values it finds: run it once, right after turning
//! encryption on or upgrading, and check the store with `tollgate doctor` afterwards.

use crate::codec::event_place;
use crate::encryption::{At, DataKeys, Place, is_sealed, is_sealed_v2, open_unsealed};
use serde::Serialize;
use tollgate_agent_core::StoreError;
use tollgate_agent_core::event::HashForm;

/// What a run of the migration did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SealReport {
    /// Runs looked at.
    pub runs_checked: u64,
    /// Runs with at least one value sealed now.
    pub runs_sealed: u64,
    /// `suspension` and `decisions` values sealed now (plaintext or v1 before).
    pub columns_sealed: u64,
    /// Events whose plaintext data was sealed now.
    pub events_sealed: u64,
    /// Runs left as they were because their values look planted (see the module's notes).
    pub refused: Vec<SealRefusal>,
}

impl SealReport {
    /// Adds what one batch did.
    pub(crate) fn add(&mut self, batch: SealReport) {
        self.runs_checked += batch.runs_checked;
        self.runs_sealed += batch.runs_sealed;
        self.columns_sealed += batch.columns_sealed;
        self.events_sealed += batch.events_sealed;
        self.refused.extend(batch.refused);
    }

    /// What one run's seal did.
    pub(crate) fn count(&mut self, planned: &Result<Option<RunSeal>, SealRefusal>) {
        self.runs_checked += 1;
        match planned {
            Ok(Some(seal)) => {
                self.runs_sealed += 1;
                self.columns_sealed += u64::from(seal.suspension.is_some()) + u64::from(seal.decisions.is_some());
                self.events_sealed += seal.events.len() as u64;
            }
            Ok(None) => {}
            Err(refusal) => self.refused.push(refusal.clone()),
        }
    }
}

/// A run the migration would not seal, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SealRefusal {
    /// The run.
    pub id: String,
    /// Why its values were left as they are.
    pub reason: String,
}

/// A run's stored values, as the migration reads them.
pub(crate) struct StoredRun {
    pub id: String,
    pub version: i64,
    pub suspension: Option<String>,
    pub decisions: Option<String>,
    /// Whether any of its events' data is sealed as v2.
    pub has_v2_events: bool,
}

/// An event whose data is not sealed.
pub(crate) struct UnsealedEvent {
    pub seq: i64,
    pub data: String,
    pub hash: String,
}

/// What sealing one run writes: the new values of the columns that change, and for each event its seq,
/// its data as read and its sealed data.
#[derive(Debug, Default)]
pub(crate) struct RunSeal {
    pub suspension: Option<String>,
    pub decisions: Option<String>,
    pub events: Vec<(i64, String, String)>,
}

/// Plans the seal of one run: `None` when nothing in it needs sealing.
pub(crate) fn plan_run_seal(
    keys: &DataKeys,
    run: &StoredRun,
    events: Vec<UnsealedEvent>,
) -> Result<Option<RunSeal>, SealRefusal> {
    let refuse = |reason: String| SealRefusal { id: run.id.clone(), reason };
    let columns = [("runs.suspension", &run.suspension), ("runs.decisions", &run.decisions)];
    let holds_v2 = run.has_v2_events || columns.iter().any(|(_, value)| value.as_deref().is_some_and(is_sealed_v2));
    let mut seal = RunSeal::default();
    for (column, value) in columns {
        let Some(stored) = value.as_deref().filter(|stored| !is_sealed_v2(stored)) else { continue };
        let form = if is_sealed(stored) { "sealed as `enc:v1`" } else { "plaintext" };
        if holds_v2 {
            return Err(refuse(format!(
                "its {column} is {form} while the run holds values sealed by this version: it was written \
                 behind Tollgate's back"
            )));
        }
        let place = Place { run_id: &run.id, column, at: At::Version(run.version) };
        let plain = open_unsealed(Some(keys), place, stored.to_owned()).map_err(|e| refuse(e.to_string()))?;
        let sealed = keys.seal(place, &plain).map_err(|e| refuse(e.to_string()))?;
        match column {
            "runs.suspension" => seal.suspension = Some(sealed),
            _ => seal.decisions = Some(sealed),
        }
    }
    for event in events {
        if let HashForm::Keyed { key_id } = HashForm::of(&event.hash) {
            return Err(refuse(format!(
                "event {} is plaintext although its hash is keyed (`{key_id}`): it was written behind \
                 Tollgate's back",
                event.seq
            )));
        }
        let sealed =
            keys.seal(event_place(&run.id, event.seq, &event.hash), &event.data).map_err(|e| refuse(e.to_string()))?;
        seal.events.push((event.seq, event.data, sealed));
    }
    let nothing = seal.suspension.is_none() && seal.decisions.is_none() && seal.events.is_empty();
    Ok(if nothing { None } else { Some(seal) })
}

/// Selects a batch of runs after a cursor: `id, version, suspension, decisions` and whether any event of
/// the run is sealed as v2 (`$1`/`?1` the cursor, `$2`/`?2` the batch size). The same text runs on both
/// backends (only the parameter marks differ).
pub(crate) fn select_runs_sql(mark: char) -> String {
    format!(
        "SELECT r.id, r.version, r.suspension, r.decisions, \
         EXISTS (SELECT 1 FROM events AS e WHERE e.run_id = r.id AND substr(e.data, 1, 7) = 'enc:v2:') \
         FROM runs AS r WHERE r.id > {mark}1 ORDER BY r.id LIMIT {mark}2"
    )
}

/// Selects a run's events whose data is not sealed: `seq, data, hash` (`$1`/`?1` the run).
pub(crate) fn select_unsealed_events_sql(mark: char) -> String {
    format!("SELECT seq, data, hash FROM events WHERE run_id = {mark}1 AND substr(data, 1, 4) <> 'enc:' ORDER BY seq")
}

/// Sets one column of a run if the run is still at the version read (`column`, then the value, the id
/// and the version as parameters 1 to 3).
pub(crate) fn update_column_sql(column: &str, mark: char) -> String {
    let column = column.trim_start_matches("runs.");
    format!("UPDATE runs SET {column} = {mark}1 WHERE id = {mark}2 AND version = {mark}3")
}

/// Sets an event's data if it is still as read (the new data, the run, the seq, the data read).
pub(crate) fn update_event_sql(mark: char) -> String {
    format!("UPDATE events SET data = {mark}1 WHERE run_id = {mark}2 AND seq = {mark}3 AND data = {mark}4")
}

/// Whether nothing more is to be done after a batch of `found` runs when `limit` were asked for.
pub(crate) fn last_batch(found: usize, limit: u32) -> bool {
    found < limit as usize
}

/// The error for a migration asked of a store without keys.
pub(crate) fn needs_keys() -> StoreError {
    StoreError::Database(
        "sealing needs data keys: configure [[privacy.keys]] (the first key seals) and run it again".to_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encryption::{DataKey, open};

    fn keys() -> DataKeys {
        match DataKey::new("k1", [1; 32]).and_then(|key| DataKeys::new([key])) {
            Ok(keys) => keys,
            Err(e) => panic!("{e}"),
        }
    }

    fn run(suspension: Option<&str>, has_v2_events: bool) -> StoredRun {
        StoredRun {
            id: "r1".into(),
            version: 4,
            suspension: suspension.map(str::to_owned),
            decisions: None,
            has_v2_events,
        }
    }

    #[test]
    fn plaintext_is_sealed_bound_to_the_runs_version_and_a_second_pass_finds_nothing() -> Result<(), StoreError> {
        let keys = keys();
        let events = vec![UnsealedEvent { seq: 1, data: "{}".into(), hash: "ab".repeat(32) }];
        let planned = plan_run_seal(&keys, &run(Some("{\"s\":1}"), false), events);
        let Ok(Some(seal)) = planned else { panic!("{planned:?}") };
        let Some(suspension) = seal.suspension else { panic!("the suspension is sealed") };
        let place = Place { run_id: "r1", column: "runs.suspension", at: At::Version(4) };
        assert_eq!(open(Some(&keys), place, suspension.clone())?, "{\"s\":1}");
        assert_eq!(seal.events.len(), 1);
        let again = plan_run_seal(&keys, &run(Some(&suspension), true), Vec::new());
        assert!(matches!(again, Ok(None)), "{again:?}");
        Ok(())
    }

    #[test]
    fn planted_values_are_refused() {
        let keys = keys();
        let planted = plan_run_seal(&keys, &run(Some("{}"), true), Vec::new());
        assert!(matches!(&planted, Err(r) if r.reason.contains("plaintext") && r.id == "r1"), "{planted:?}");
        let keyed = vec![UnsealedEvent { seq: 2, data: "{}".into(), hash: format!("hmac:k1:{}", "a".repeat(64)) }];
        let planted = plan_run_seal(&keys, &run(None, false), keyed);
        assert!(matches!(&planted, Err(r) if r.reason.contains("event 2")), "{planted:?}");
    }
}
