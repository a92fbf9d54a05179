//! The event log: append-only per run, `seq` from 1 without gaps, each event hash-chained to the one
//! before it so that any edited, removed or reordered event is detected by [`verify_chain`].
//!
//! `hash = sha256_hex(previous hash ‖ canonical JSON of {seq, at, kind, round, data})`, with 64 `0`
//! characters before the first event (docs/events.md).
//!
//! With a [`ChainKey`] (a store with data keys derives one), the chain is *keyed*: an event's hash is
//! `hmac:KEY_ID:` followed by the hex HMAC-SHA256 under that key of the same text, so whoever can write
//! the database but does not hold the key cannot recompute the chain after an edit. Each hash names its
//! own form, so unkeyed chains written before keeping verify as they are; what this module refuses:
//! - an unkeyed hash after a keyed one in the same run (a downgrade, [`ChainBreak::Downgrade`]);
//! - a keyed hash whose key is not at hand ([`ChainBreak::KeyMissing`]): it is never taken as intact.

use crate::canonical::{Hashing, Sink, write_string, write_value};
use crate::run::{GENESIS_HASH, Millis, rfc3339};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The kinds of event: the wire's type (docs/events.md), so an event's `kind` is one type from the store
/// to the API.
pub use tollgate_agent_protocol::EventKind;

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

/// What a keyed hash starts with (then the key id, `:`, and 64 hex digits).
pub const KEYED_HASH_PREFIX: &str = "hmac:";

/// A key the event chain is keyed with (HMAC-SHA256), and the id its hashes name it by. Its `Debug`
/// shows the id only.
#[derive(Clone)]
pub struct ChainKey {
    id: String,
    /// HMAC-SHA256 keyed and ready; cloned for each hash.
    mac: Hmac<Sha256>,
}

impl std::fmt::Debug for ChainKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainKey").field("id", &self.id).finish_non_exhaustive()
    }
}

impl ChainKey {
    /// A key under `id`. The id must not contain `:` (it is the separator of a keyed hash); a store
    /// derives both from one of its data keys.
    pub fn new(id: impl Into<String>, key: [u8; 32]) -> ChainKey {
        // HMAC pads a key shorter than the block with zeros (RFC 2104): keying with the padded block
        // is HMAC under the 32-byte key, without a length check that could fail.
        let mut block = [0u8; 64];
        block[..32].copy_from_slice(&key);
        ChainKey { id: id.into(), mac: <Hmac<Sha256> as hmac::digest::KeyInit>::new(&block.into()) }
    }

    /// The chain key of data key `id`: `HMAC-SHA256(data key, "tollgate:chain-key:v1")`, under the
    /// data key's id. A key of its own (not the data key itself), so that the chain's MAC and the
    /// encryption never share a key.
    pub fn derive(id: impl Into<String>, data_key: &[u8; 32]) -> ChainKey {
        let mut derived = Keyed(ChainKey::new("", *data_key).mac);
        derived.push_str(CHAIN_KEY_LABEL);
        ChainKey::new(id, derived.0.finalize().into_bytes().into())
    }

    /// The key's id, as keyed hashes name it.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// The label a chain key is derived with from a data key (see [`ChainKey::derive`]).
pub const CHAIN_KEY_LABEL: &str = "tollgate:chain-key:v1";

/// The chain keys at hand: the first keys new events, every one verifies the hashes that name it (so a
/// rotated key stays listed until no run's hashes name it).
#[derive(Clone, Debug, Default)]
pub struct ChainKeys(Vec<ChainKey>);

impl ChainKeys {
    /// The keys, the one keying new events first.
    pub fn new(keys: Vec<ChainKey>) -> ChainKeys {
        ChainKeys(keys)
    }

    /// The key new events are chained with.
    pub fn current(&self) -> Option<&ChainKey> {
        self.0.first()
    }

    /// The key with this id.
    pub fn get(&self, id: &str) -> Option<&ChainKey> {
        self.0.iter().find(|key| key.id == id)
    }
}

/// How an event's hash was made, as its text says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashForm<'a> {
    /// `sha256` hex, unkeyed.
    Plain,
    /// `hmac:KEY_ID:HEX`, keyed with the chain key `key_id`.
    Keyed {
        /// The id of the key.
        key_id: &'a str,
    },
}

impl HashForm<'_> {
    /// The form a stored hash text has.
    pub fn of(hash: &str) -> HashForm<'_> {
        match hash.strip_prefix(KEYED_HASH_PREFIX).and_then(|rest| rest.split_once(':')) {
            Some((key_id, _)) => HashForm::Keyed { key_id },
            None => HashForm::Plain,
        }
    }
}

/// Feeds the hashed text of an event, `prev ‖ canonical {at, data, kind, round, seq}`, to `sink` as it
/// is written.
fn write_hashed(sink: &mut impl Sink, prev_hash: &str, seq: u64, at: &str, kind: EventKind, round: u32, data: &Value) {
    sink.push_str(prev_hash);
    sink.push_str("{\"at\":");
    write_string(at, sink);
    sink.push_str(",\"data\":");
    write_value(data, sink);
    sink.push_str(",\"kind\":");
    write_string(kind.as_str(), sink);
    sink.push_str(&format!(",\"round\":{round},\"seq\":{seq}}}"));
}

/// The text fed to an HMAC as it is written.
struct Keyed(Hmac<Sha256>);

impl Sink for Keyed {
    fn push_str(&mut self, text: &str) {
        self.0.update(text.as_bytes());
    }
}

/// The (unkeyed) hash of an event given the previous event's hash.
pub fn event_hash(prev_hash: &str, seq: u64, at: &str, kind: EventKind, round: u32, data: &Value) -> String {
    let mut hasher = Hashing(Sha256::new());
    write_hashed(&mut hasher, prev_hash, seq, at, kind, round, data);
    hex::encode(hasher.0.finalize())
}

/// The keyed hash of an event given the previous event's hash: `hmac:KEY_ID:` and the hex
/// HMAC-SHA256 under `key` of the text [`event_hash`] hashes.
pub fn keyed_event_hash(
    key: &ChainKey,
    prev_hash: &str,
    seq: u64,
    at: &str,
    kind: EventKind,
    round: u32,
    data: &Value,
) -> String {
    let mut mac = Keyed(key.mac.clone());
    write_hashed(&mut mac, prev_hash, seq, at, kind, round, data);
    format!("{KEYED_HASH_PREFIX}{}:{}", key.id, hex::encode(mac.0.finalize().into_bytes()))
}

/// Numbers and chains new events after `(last_seq, last_hash)`; returns them and the new chain head.
pub fn chain(last_seq: u64, last_hash: &str, events: Vec<NewEvent>) -> (Vec<StoredEvent>, u64, String) {
    chain_with(last_seq, last_hash, events, None)
}

/// [`chain`], keyed with `key` when there is one (see the module's notes).
pub fn chain_with(
    last_seq: u64,
    last_hash: &str,
    events: Vec<NewEvent>,
    key: Option<&ChainKey>,
) -> (Vec<StoredEvent>, u64, String) {
    let mut seq = last_seq;
    let mut hash = last_hash.to_owned();
    let stored = events
        .into_iter()
        .map(|e| {
            seq += 1;
            let at = rfc3339(e.at);
            hash = match key {
                Some(key) => keyed_event_hash(key, &hash, seq, &at, e.kind, e.round, &e.data),
                None => event_hash(&hash, seq, &at, e.kind, e.round, &e.data),
            };
            StoredEvent { seq, at, kind: e.kind, round: e.round, data: e.data, hash: hash.clone() }
        })
        .collect();
    (stored, seq, hash)
}

/// Where a chain breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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
    /// The event's hash is keyed with a chain key that is not at hand, so it cannot be checked.
    #[error("event {seq} is chained with key `{key_id}`, which is not configured here: it cannot be verified")]
    KeyMissing {
        /// The first seq that cannot be checked.
        seq: u64,
        /// The key its hash names.
        key_id: String,
    },
    /// The event's hash is unkeyed although an earlier event of the run is keyed: the chain was
    /// recomputed without the key.
    #[error("event {seq} has an unkeyed hash after keyed ones: the chain was rewritten without its key")]
    Downgrade {
        /// The first unkeyed seq after a keyed one.
        seq: u64,
    },
}

impl ChainBreak {
    /// The first seq at which the log is wrong.
    pub fn seq(&self) -> u64 {
        match self {
            ChainBreak::Gap { expected, .. } => *expected,
            ChainBreak::Mismatch { seq } => *seq,
            ChainBreak::Truncated { found, .. } => found + 1,
            ChainBreak::KeyMissing { seq, .. } | ChainBreak::Downgrade { seq } => *seq,
        }
    }
}

/// Checks a run's whole log against its recorded head `(last_seq, last_hash)`, without keys: a keyed
/// hash is [`ChainBreak::KeyMissing`] (see [`verify_chain_with`]).
pub fn verify_chain(events: &[StoredEvent], last_seq: u64, last_hash: &str) -> Result<(), ChainBreak> {
    verify_chain_with(events, last_seq, last_hash, None)
}

/// Checks a run's whole log against its recorded head `(last_seq, last_hash)`: each unkeyed hash as
/// sha256, each keyed hash with the key of `keys` it names. A keyed hash whose key is not there is
/// [`ChainBreak::KeyMissing`]; an unkeyed hash after a keyed one is [`ChainBreak::Downgrade`].
pub fn verify_chain_with(
    events: &[StoredEvent],
    last_seq: u64,
    last_hash: &str,
    keys: Option<&ChainKeys>,
) -> Result<(), ChainBreak> {
    let mut prev = GENESIS_HASH.to_owned();
    let mut keyed = false;
    for (i, event) in events.iter().enumerate() {
        let expected = i as u64 + 1;
        if event.seq != expected {
            return Err(ChainBreak::Gap { expected, found: event.seq });
        }
        let hash = match HashForm::of(&event.hash) {
            HashForm::Plain if keyed => return Err(ChainBreak::Downgrade { seq: event.seq }),
            HashForm::Plain => event_hash(&prev, event.seq, &event.at, event.kind, event.round, &event.data),
            HashForm::Keyed { key_id } => {
                keyed = true;
                let Some(key) = keys.and_then(|keys| keys.get(key_id)) else {
                    return Err(ChainBreak::KeyMissing { seq: event.seq, key_id: key_id.to_owned() });
                };
                keyed_event_hash(key, &prev, event.seq, &event.at, event.kind, event.round, &event.data)
            }
        };
        // Both are public digests of the same text; a keyed one is compared in constant time all the
        // same, so a timing difference tells nothing about the key.
        if !constant_time_eq(hash.as_bytes(), event.hash.as_bytes()) {
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

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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

    fn keyed_log(key: &ChainKey, n: u32) -> (Vec<StoredEvent>, u64, String) {
        let (events, ..) = log(n);
        let new = events
            .iter()
            .enumerate()
            .map(|(i, e)| NewEvent {
                at: 1_764_410_400_000 + i as i64,
                kind: e.kind,
                round: e.round,
                data: e.data.clone(),
            })
            .collect();
        chain_with(0, GENESIS_HASH, new, Some(key))
    }

    #[test]
    fn a_keyed_hash_is_the_hmac_of_the_same_text_and_names_its_key() -> Result<(), hmac::digest::InvalidLength> {
        let key = ChainKey::new("k1", [7; 32]);
        let data = json!({"b": 1, "a": "x"});
        let text = format!(
            "{GENESIS_HASH}{{\"at\":\"t\",\"data\":{{\"a\":\"x\",\"b\":1}},\"kind\":\"decision\",\"round\":2,\"seq\":1}}"
        );
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&[7; 32])?;
        mac.update(text.as_bytes());
        let expected = format!("hmac:k1:{}", hex::encode(mac.finalize().into_bytes()));
        assert_eq!(keyed_event_hash(&key, GENESIS_HASH, 1, "t", EventKind::Decision, 2, &data), expected);
        assert_eq!(HashForm::of(&expected), HashForm::Keyed { key_id: "k1" });
        assert_eq!(HashForm::of(&"ab".repeat(32)), HashForm::Plain);
        assert_eq!(format!("{key:?}"), "ChainKey { id: \"k1\", .. }");
        Ok(())
    }

    #[test]
    fn a_keyed_chain_verifies_only_with_its_key() {
        let key = ChainKey::new("k1", [7; 32]);
        let (events, seq, hash) = keyed_log(&key, 4);
        let keys = ChainKeys::new(vec![ChainKey::new("k2", [9; 32]), key.clone()]);
        assert_eq!(verify_chain_with(&events, seq, &hash, Some(&keys)), Ok(()), "an older key still verifies");
        assert_eq!(
            verify_chain(&events, seq, &hash),
            Err(ChainBreak::KeyMissing { seq: 1, key_id: "k1".into() }),
            "never intact without the key"
        );
        let impostor = ChainKeys::new(vec![ChainKey::new("k1", [8; 32])]);
        assert_eq!(verify_chain_with(&events, seq, &hash, Some(&impostor)), Err(ChainBreak::Mismatch { seq: 1 }));
        let mut edited = events.clone();
        edited[2].data = json!({"i": 99});
        assert_eq!(verify_chain_with(&edited, seq, &hash, Some(&keys)), Err(ChainBreak::Mismatch { seq: 3 }));
    }

    /// An edit whose hashes were recomputed with plain sha256 from there on is a downgrade.
    #[test]
    fn an_unkeyed_hash_after_a_keyed_one_is_a_downgrade() {
        let key = ChainKey::new("k1", [7; 32]);
        let keys = ChainKeys::new(vec![key.clone()]);
        let (mut events, seq, _) = keyed_log(&key, 4);
        events[2].data = json!({"i": 99});
        let mut prev = events[1].hash.clone();
        for event in &mut events[2..] {
            event.hash = event_hash(&prev, event.seq, &event.at, event.kind, event.round, &event.data);
            prev = event.hash.clone();
        }
        assert_eq!(verify_chain_with(&events, seq, &prev, Some(&keys)), Err(ChainBreak::Downgrade { seq: 3 }));
        assert_eq!(ChainBreak::Downgrade { seq: 3 }.seq(), 3);
    }
}
