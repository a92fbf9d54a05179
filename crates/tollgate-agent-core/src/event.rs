//! The event log: append-only per run, `seq` from 1 without gaps, each event hash-chained to the one
//! before it so that any edited, removed or reordered event is detected by [`verify_chain`].
//!
//! `hash = sha256_hex(previous hash as 64 hex chars ‖ canonical JSON of {seq, at, kind, round, data})`,
//! with 64 `0` characters before the first event (docs/events.md).

use crate::canonical::{Hashing, Sink, write_string, write_value};
use crate::run::{GENESIS_HASH, Millis, rfc3339};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The kinds of event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A run began.
    RunStarted,
    /// A model call is about to be made.
    ModelRequest,
    /// A model call answered.
    ModelResponse,
    /// A call is about to run (committed first for ask-gated calls).
    ToolStarted,
    /// A call ran.
    ToolFinished,
    /// A turn is held at the gate.
    ApprovalRequested,
    /// A person (or the system) decided one call.
    Decision,
    /// A waiting run resumed.
    RunResumed,
    /// The run completed.
    RunCompleted,
    /// The run failed.
    RunFailed,
    /// The run was cancelled.
    RunCancelled,
    /// The run's approval deadline passed.
    RunExpired,
}

impl EventKind {
    /// Every kind.
    pub const ALL: [EventKind; 12] = [
        EventKind::RunStarted,
        EventKind::ModelRequest,
        EventKind::ModelResponse,
        EventKind::ToolStarted,
        EventKind::ToolFinished,
        EventKind::ApprovalRequested,
        EventKind::Decision,
        EventKind::RunResumed,
        EventKind::RunCompleted,
        EventKind::RunFailed,
        EventKind::RunCancelled,
        EventKind::RunExpired,
    ];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::RunStarted => "run_started",
            EventKind::ModelRequest => "model_request",
            EventKind::ModelResponse => "model_response",
            EventKind::ToolStarted => "tool_started",
            EventKind::ToolFinished => "tool_finished",
            EventKind::ApprovalRequested => "approval_requested",
            EventKind::Decision => "decision",
            EventKind::RunResumed => "run_resumed",
            EventKind::RunCompleted => "run_completed",
            EventKind::RunFailed => "run_failed",
            EventKind::RunCancelled => "run_cancelled",
            EventKind::RunExpired => "run_expired",
        }
    }

    /// Parses the snake_case name.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// True for the kinds that end a run.
    pub fn is_terminal(self) -> bool {
        matches!(self, EventKind::RunCompleted | EventKind::RunFailed | EventKind::RunCancelled | EventKind::RunExpired)
    }
}

/// An event before the store numbers and chains it.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    /// When it happened.
    pub at: Millis,
    /// What happened.
    pub kind: EventKind,
    /// The model call it belongs to (0 before the first).
    pub round: u32,
    /// Details per kind (docs/api.md).
    pub data: Value,
}

/// An event as stored and served.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    /// 1, 2, … per run, without gaps.
    pub seq: u64,
    /// RFC 3339 UTC time, exactly as hashed.
    pub at: String,
    /// What happened.
    pub kind: EventKind,
    /// The model call it belongs to.
    pub round: u32,
    /// Details per kind.
    pub data: Value,
    /// Lowercase hex sha256 chaining this event to the previous one.
    pub hash: String,
}

/// The hash of an event given the previous event's hash.
pub fn event_hash(prev_hash: &str, seq: u64, at: &str, kind: EventKind, round: u32, data: &Value) -> String {
    // The canonical text of {seq, at, kind, round, data}, its keys in canonical order, fed to the hash
    // as it is written.
    let mut hasher = Hashing(Sha256::new());
    hasher.push_str(prev_hash);
    hasher.push_str("{\"at\":");
    write_string(at, &mut hasher);
    hasher.push_str(",\"data\":");
    write_value(data, &mut hasher);
    hasher.push_str(",\"kind\":");
    write_string(kind.as_str(), &mut hasher);
    hasher.push_str(&format!(",\"round\":{round},\"seq\":{seq}}}"));
    hex::encode(hasher.0.finalize())
}

/// Numbers and chains new events after `(last_seq, last_hash)`; returns them and the new chain head.
pub fn chain(last_seq: u64, last_hash: &str, events: Vec<NewEvent>) -> (Vec<StoredEvent>, u64, String) {
    let mut seq = last_seq;
    let mut hash = last_hash.to_owned();
    let stored = events
        .into_iter()
        .map(|e| {
            seq += 1;
            let at = rfc3339(e.at);
            hash = event_hash(&hash, seq, &at, e.kind, e.round, &e.data);
            StoredEvent { seq, at, kind: e.kind, round: e.round, data: e.data, hash: hash.clone() }
        })
        .collect();
    (stored, seq, hash)
}

/// Where a chain breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainBreak {
    /// An event is missing or out of order: `expected` was due where `found` stands.
    #[error("event {expected} is missing or out of order (found seq {found})")]
    Gap {
        /// The seq that should stand here.
        expected: u64,
        /// The seq found.
        found: u64,
    },
    /// The event's hash does not match its content and the previous hash.
    #[error("event {seq} does not match its hash")]
    Mismatch {
        /// The first seq whose hash does not match.
        seq: u64,
    },
    /// The log ends before the run's recorded last event.
    #[error("the log ends at event {found} but the run records {expected} events")]
    Truncated {
        /// How many events the run records.
        expected: u64,
        /// The last seq found.
        found: u64,
    },
}

impl ChainBreak {
    /// The first seq at which the log is wrong.
    pub fn seq(&self) -> u64 {
        match self {
            ChainBreak::Gap { expected, .. } => *expected,
            ChainBreak::Mismatch { seq } => *seq,
            ChainBreak::Truncated { found, .. } => found + 1,
        }
    }
}

/// Checks a run's whole log against its recorded head `(last_seq, last_hash)`.
pub fn verify_chain(events: &[StoredEvent], last_seq: u64, last_hash: &str) -> Result<(), ChainBreak> {
    let mut prev = GENESIS_HASH.to_owned();
    for (i, event) in events.iter().enumerate() {
        let expected = i as u64 + 1;
        if event.seq != expected {
            return Err(ChainBreak::Gap { expected, found: event.seq });
        }
        let hash = event_hash(&prev, event.seq, &event.at, event.kind, event.round, &event.data);
        if hash != event.hash {
            return Err(ChainBreak::Mismatch { seq: event.seq });
        }
        prev = hash;
    }
    let found = events.len() as u64;
    if found != last_seq {
        return Err(ChainBreak::Truncated { expected: last_seq, found });
    }
    if found > 0 && prev != last_hash {
        return Err(ChainBreak::Mismatch { seq: found });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{sha256_hex, to_canonical_string};
    use serde_json::json;

    #[test]
    fn the_hash_is_sha256_of_the_previous_hash_and_the_canonical_event() {
        let data = json!({"z": [1, 2.5, null, true], "a\"b": "line\nbreak \u{1} é 🦀", "\u{ff61}": {"y": 1, "x": -3},
                          "\u{1f600}": "surrogates sort first", "n": 12345678901234_u64});
        let at = "2026-11-29T10:00:00.123Z";
        let body = json!({"seq": 7, "at": at, "kind": "tool_finished", "round": 3, "data": data});
        let expected = sha256_hex(format!("{}{}", "ab".repeat(32), to_canonical_string(&body)).as_bytes());
        assert_eq!(event_hash(&"ab".repeat(32), 7, at, EventKind::ToolFinished, 3, &data), expected);
        assert_eq!(crate::canonical::canonical_sha256(&data), sha256_hex(to_canonical_string(&data).as_bytes()));
    }

    fn log(n: u32) -> (Vec<StoredEvent>, u64, String) {
        let events = (0..n)
            .map(|i| NewEvent {
                at: 1_764_410_400_000 + i64::from(i),
                kind: EventKind::ModelRequest,
                round: i,
                data: json!({"i": i}),
            })
            .collect();
        chain(0, GENESIS_HASH, events)
    }

    #[test]
    fn intact_chain_verifies() {
        let (events, seq, hash) = log(5);
        assert_eq!(verify_chain(&events, seq, &hash), Ok(()));
        assert_eq!(events[0].at, "2025-11-29T10:00:00.000Z");
    }

    #[test]
    fn detects_edit_removal_reorder_and_truncation() {
        let (events, seq, hash) = log(5);
        let mut edited = events.clone();
        edited[2].data = json!({"i": 99});
        assert_eq!(verify_chain(&edited, seq, &hash), Err(ChainBreak::Mismatch { seq: 3 }));
        let mut removed = events.clone();
        removed.remove(1);
        assert_eq!(verify_chain(&removed, seq, &hash), Err(ChainBreak::Gap { expected: 2, found: 3 }));
        let mut reordered = events.clone();
        reordered.swap(1, 2);
        assert_eq!(verify_chain(&reordered, seq, &hash), Err(ChainBreak::Gap { expected: 2, found: 3 }));
        let mut renumbered = reordered.clone();
        renumbered[1].seq = 2;
        renumbered[2].seq = 3;
        assert_eq!(verify_chain(&renumbered, seq, &hash), Err(ChainBreak::Mismatch { seq: 2 }));
        assert_eq!(verify_chain(&events[..4], seq, &hash), Err(ChainBreak::Truncated { expected: 5, found: 4 }));
    }

    #[test]
    fn hash_matches_the_documented_formula() {
        let data = json!({"b": 1, "a": "x"});
        let expected = sha256_hex(
            format!("{GENESIS_HASH}{{\"at\":\"t\",\"data\":{{\"a\":\"x\",\"b\":1}},\"kind\":\"decision\",\"round\":2,\"seq\":1}}")
                .as_bytes(),
        );
        assert_eq!(event_hash(GENESIS_HASH, 1, "t", EventKind::Decision, 2, &data), expected);
    }
}
