//! Encryption at rest of the values that hold what a run said and did: the `suspension` and
//! `decisions` columns of `runs` and the `data` column of `events`.
//!
//! It is a storage transform below the hash chain: events are chained over their plaintext
//! ([`tollgate_agent_core::event::chain_with`], keyed with a chain key derived from the first data key,
//! [`DataKeys::chain_keys`]) before they are sealed, and opened again before anyone reads them.
//!
//! The stored form of a sealed value is a text envelope that no JSON value can be mistaken for:
//!
//! ```text
//! enc:v2:<key id>:<base64 (standard, padded) of nonce (12 bytes) ‖ ciphertext ‖ GCM tag (16 bytes)>
//! ```
//!
//! AES-256-GCM with a random 96-bit nonce per value. The associated data binds a value to where it is
//! stored and when, fields separated by NUL bytes:
//! - a run's column: `tollgate:v2`, the run id, the column, `version=` and the run's version (the
//!   compare-and-set version of its row), so a value of the same run and column from an older version
//!   does not open once the run has moved on;
//! - an event's data: `tollgate:v2`, the run id, `events.data`, `seq=` and its seq, `chain=` and the id
//!   of the chain key its hash names (empty for an unkeyed hash), so an event whose keyed hash is
//!   recomputed without the key no longer opens.
//!
//! Envelope `enc:v1:` (associated data `tollgate:v1`, run id, column, and an event's seq; no version)
//! was written by earlier builds. Promises, with data keys:
//! - a value that is not sealed (plaintext) where a sealed one belongs is refused:
//!   [`StoreError::Undecryptable`] for that run, naming the column, never read or executed;
//! - a run's column sealed as `enc:v1` is refused the same way (v1 does not bind the version, so an
//!   older value could be put back); an event's `enc:v1` data still opens (an event is written once,
//!   and v1 binds it to its run and seq);
//! - both are sealed as v2 by the migration `tollgate seal` (`open_unsealed` is its only reader that
//!   accepts them);
//! - a sealed value the store cannot open is [`StoreError::Undecryptable`] naming the run, the
//!   column and the key id (never key material); a malformed envelope is [`StoreError::Corrupt`];
//!   neither ever panics.
//!
//! Without data keys, values are stored and read as plaintext, writing costs nothing more, and a sealed
//! value read back is [`StoreError::Undecryptable`].

use aes_gcm::aead::rand_core::RngCore;
use aes_gcm::aead::{AeadInPlace, KeyInit, OsRng};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use tollgate_agent_core::StoreError;
use tollgate_agent_core::event::{ChainKey, ChainKeys};

/// What every sealed value starts with (then the version).
const SEALED: &str = "enc:";

/// The envelope of earlier builds (no version in the associated data).
const V1: &str = "enc:v1:";

/// The envelope this build writes.
const V2: &str = "enc:v2:";

const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;

/// The longest key id.
const MAX_ID_LEN: usize = 64;

/// A data key could not be built from its configuration. The text never contains key material.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DataKeyError {
    /// The id is empty, too long, or has a character outside `A-Z a-z 0-9 _ . -`.
    #[error("invalid data key id `{id}`: {reason}")]
    InvalidId {
        /// The id as given.
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The key is not exactly 64 hexadecimal digits (32 bytes).
    #[error("data key `{id}` must be 64 hexadecimal digits (32 bytes, e.g. `openssl rand -hex 32`)")]
    InvalidKey {
        /// The key's id.
        id: String,
    },
    /// No key was given.
    #[error("no data keys were given: at least one is needed to encrypt")]
    Empty,
    /// Two keys share an id.
    #[error("two data keys have the id `{0}`")]
    DuplicateId(String),
}

/// One AES-256 key and the id that sealed values name it by.
#[derive(Clone)]
pub struct DataKey {
    id: String,
    key: [u8; 32],
}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataKey").field("id", &self.id).finish_non_exhaustive()
    }
}

impl DataKey {
    /// A key under `id` (1 to 64 characters of `A-Z a-z 0-9 _ . -`).
    ///
    /// # Errors
    /// [`DataKeyError::InvalidId`].
    pub fn new(id: impl Into<String>, key: [u8; 32]) -> Result<DataKey, DataKeyError> {
        let id = id.into();
        check_id(&id)?;
        Ok(DataKey { id, key })
    }

    /// A key under `id` from 64 hexadecimal digits (surrounding whitespace ignored).
    ///
    /// # Errors
    /// [`DataKeyError::InvalidId`], or [`DataKeyError::InvalidKey`] (which does not echo the text).
    pub fn from_hex(id: impl Into<String>, hex: &str) -> Result<DataKey, DataKeyError> {
        let id = id.into();
        check_id(&id)?;
        let mut key = [0u8; 32];
        match hex::decode_to_slice(hex.trim(), &mut key) {
            Ok(()) => Ok(DataKey { id, key }),
            Err(_) => Err(DataKeyError::InvalidKey { id }),
        }
    }

    /// The key's id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

fn check_id(id: &str) -> Result<(), DataKeyError> {
    let invalid = |reason| Err(DataKeyError::InvalidId { id: id.to_owned(), reason });
    if id.is_empty() {
        invalid("it is empty")
    } else if id.len() > MAX_ID_LEN {
        invalid("it is longer than 64 characters")
    } else if !id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')) {
        invalid("only A-Z, a-z, 0-9, `_`, `.` and `-` are allowed")
    } else {
        Ok(())
    }
}

/// A keyring: the first key seals, every key opens the values that name it (so a new key goes first
/// and the old ones stay until nothing names them). Each data key also gives the chain key of the same
/// id ([`ChainKey::derive`]).
pub struct DataKeys {
    /// Ids and ready ciphers, the sealing one first.
    keys: Vec<(String, Aes256Gcm)>,
    /// `enc:v2:<first id>:`, what a value sealed with the current key starts with.
    sealing_prefix: String,
    /// The chain keys, in the same order.
    chain: ChainKeys,
}

impl std::fmt::Debug for DataKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataKeys").field("ids", &self.ids().collect::<Vec<_>>()).finish()
    }
}

impl DataKeys {
    /// The keyring of `keys`, the first one sealing.
    ///
    /// # Errors
    /// [`DataKeyError::Empty`] or [`DataKeyError::DuplicateId`].
    pub fn new(keys: impl IntoIterator<Item = DataKey>) -> Result<DataKeys, DataKeyError> {
        let mut ring: Vec<(String, Aes256Gcm)> = Vec::new();
        let mut chain = Vec::new();
        for DataKey { id, key } in keys {
            if ring.iter().any(|(known, _)| *known == id) {
                return Err(DataKeyError::DuplicateId(id));
            }
            chain.push(ChainKey::derive(id.clone(), &key));
            let cipher = Aes256Gcm::new(&key.into());
            ring.push((id, cipher));
        }
        let first = ring.first().map(|(id, _)| id.clone()).ok_or(DataKeyError::Empty)?;
        Ok(DataKeys { keys: ring, sealing_prefix: format!("{V2}{first}:"), chain: ChainKeys::new(chain) })
    }

    /// The chain keys: the first keys new events, each verifies the hashes that name its id.
    pub fn chain_keys(&self) -> &ChainKeys {
        &self.chain
    }

    /// The ids, the sealing one first.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|(id, _)| id.as_str())
    }

    /// Whether `stored` is sealed as v2 with the current (first) key, so that an unchanged value in an
    /// unchanged place (the same version) need not be sealed again.
    pub(crate) fn sealed_with_current_key(&self, stored: &str) -> bool {
        stored.starts_with(&self.sealing_prefix)
    }

    /// Seals `plain` with the first key for `place`.
    pub(crate) fn seal(&self, place: Place<'_>, plain: &str) -> Result<String, StoreError> {
        let Some((_, cipher)) = self.keys.first() else {
            return Err(StoreError::Database("internal error: an empty keyring".to_owned()));
        };
        let mut buffer = Vec::with_capacity(NONCE_LEN + plain.len() + TAG_LEN);
        buffer.resize(NONCE_LEN, 0);
        OsRng
            .try_fill_bytes(&mut buffer)
            .map_err(|e| StoreError::Database(format!("cannot draw a nonce to encrypt run {}: {e}", place.run_id)))?;
        buffer.extend_from_slice(plain.as_bytes());
        let (nonce, message) = buffer.split_at_mut(NONCE_LEN);
        let tag = cipher
            .encrypt_in_place_detached(Nonce::from_slice(nonce), &place.associated_data(Version::V2), message)
            .map_err(|_| {
                StoreError::Database(format!("cannot encrypt the {} of run {}", place.column, place.run_id))
            })?;
        buffer.extend_from_slice(&tag);
        let mut sealed = String::with_capacity(self.sealing_prefix.len() + buffer.len().div_ceil(3) * 4);
        sealed.push_str(&self.sealing_prefix);
        BASE64.encode_string(&buffer, &mut sealed);
        Ok(sealed)
    }

    /// Opens a sealed value (see [`open`]).
    fn open(&self, place: Place<'_>, envelope: Envelope<'_>) -> Result<String, StoreError> {
        let Some((_, cipher)) = self.keys.iter().find(|(id, _)| id == envelope.key_id) else {
            let configured = self.ids().collect::<Vec<_>>().join(", ");
            return Err(place.undecryptable(format!(
                "it is encrypted with data key `{}`, which is not configured (configured: {configured})",
                envelope.key_id
            )));
        };
        let mut bytes = envelope.bytes;
        let (nonce, rest) = bytes.split_at_mut(NONCE_LEN);
        let (message, tag) = rest.split_at_mut(rest.len() - TAG_LEN);
        let opened = cipher.decrypt_in_place_detached(
            Nonce::from_slice(nonce),
            &place.associated_data(envelope.version),
            message,
            Tag::from_slice(tag),
        );
        if opened.is_err() {
            return Err(place.undecryptable(format!(
                "data key `{}` does not decrypt it (a different key under that id, or an altered or moved value)",
                envelope.key_id
            )));
        }
        bytes.truncate(bytes.len() - TAG_LEN);
        bytes.drain(..NONCE_LEN);
        String::from_utf8(bytes).map_err(|_| place.corrupt("it decrypts to text that is not UTF-8".to_owned()))
    }
}

/// Where a sealed value lives; the associated data of its encryption.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Place<'a> {
    pub run_id: &'a str,
    /// `runs.suspension`, `runs.decisions` or `events.data`.
    pub column: &'static str,
    /// What binds the value to its moment: the run's version, or the event's seq and chain form.
    pub at: At<'a>,
}

/// What, beyond the run and the column, a sealed value is bound to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum At<'a> {
    /// A column of the run's row, at the row's (compare-and-set) version.
    Version(i64),
    /// An event's data: its seq, and the id of the chain key its hash names (`None`: unkeyed).
    Event { seq: i64, chain_key: Option<&'a str> },
}

/// The envelope versions this build reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

impl Place<'_> {
    fn associated_data(&self, version: Version) -> Vec<u8> {
        let mut data = Vec::with_capacity(64 + self.run_id.len());
        data.extend_from_slice(match version {
            Version::V1 => b"tollgate:v1\0",
            Version::V2 => b"tollgate:v2\0",
        });
        data.extend_from_slice(self.run_id.as_bytes());
        data.push(0);
        data.extend_from_slice(self.column.as_bytes());
        match (version, self.at) {
            // v1 bound an event to its seq and a run's column to nothing more.
            (Version::V1, At::Version(_)) => {}
            (Version::V1, At::Event { seq, .. }) => {
                data.push(0);
                data.extend_from_slice(seq.to_string().as_bytes());
            }
            (Version::V2, At::Version(version)) => {
                data.extend_from_slice(format!("\0version={version}").as_bytes());
            }
            (Version::V2, At::Event { seq, chain_key }) => {
                data.extend_from_slice(format!("\0seq={seq}\0chain={}", chain_key.unwrap_or_default()).as_bytes());
            }
        }
        data
    }

    fn what(&self) -> String {
        match self.at {
            At::Event { seq, .. } => format!("{} of event {seq}", self.column),
            At::Version(_) => self.column.to_owned(),
        }
    }

    fn undecryptable(&self, why: String) -> StoreError {
        StoreError::Undecryptable { id: self.run_id.to_owned(), detail: format!("column {}: {why}", self.what()) }
    }

    fn corrupt(&self, why: String) -> StoreError {
        StoreError::Corrupt { id: self.run_id.to_owned(), detail: format!("column {}: {why}", self.what()) }
    }
}

/// A parsed `enc:v1:` or `enc:v2:` value.
#[derive(Debug, PartialEq)]
struct Envelope<'a> {
    version: Version,
    key_id: &'a str,
    /// Nonce ‖ ciphertext ‖ tag (at least nonce and tag).
    bytes: Vec<u8>,
}

/// Why a stored value that starts with `enc:` is not an envelope this build reads.
#[derive(Debug, PartialEq)]
enum Malformed {
    UnknownVersion(String),
    NoKeyId,
    BadBase64,
    TooShort(usize),
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Malformed::UnknownVersion(version) => {
                write!(f, "encrypted with envelope version `{version}`, which this Tollgate does not know")
            }
            Malformed::NoKeyId => f.write_str("an encrypted value without a valid key id"),
            Malformed::BadBase64 => f.write_str("an encrypted value that is not valid base64"),
            Malformed::TooShort(n) => write!(f, "an encrypted value of {n} bytes, too short for a nonce and a tag"),
        }
    }
}

fn parse_envelope(stored: &str) -> Result<Envelope<'_>, Malformed> {
    let (version, rest) = match (stored.strip_prefix(V2), stored.strip_prefix(V1)) {
        (Some(rest), _) => (Version::V2, rest),
        (None, Some(rest)) => (Version::V1, rest),
        (None, None) => {
            let version = stored.strip_prefix(SEALED).unwrap_or(stored).split(':').next().unwrap_or_default();
            return Err(Malformed::UnknownVersion(version.chars().take(16).collect()));
        }
    };
    let (key_id, payload) = rest.split_once(':').ok_or(Malformed::NoKeyId)?;
    if check_id(key_id).is_err() {
        return Err(Malformed::NoKeyId);
    }
    let bytes = BASE64.decode(payload).map_err(|_| Malformed::BadBase64)?;
    if bytes.len() < NONCE_LEN + TAG_LEN {
        return Err(Malformed::TooShort(bytes.len()));
    }
    Ok(Envelope { version, key_id, bytes })
}

/// Whether a stored value is sealed (otherwise it is plaintext).
pub(crate) fn is_sealed(stored: &str) -> bool {
    stored.starts_with(SEALED)
}

/// Whether a stored value is sealed in this build's envelope (v2).
pub(crate) fn is_sealed_v2(stored: &str) -> bool {
    stored.starts_with(V2)
}

/// Seals `plain` for `place` when there are keys; without keys it is stored as it is (no copy).
pub(crate) fn seal(keys: Option<&DataKeys>, place: Place<'_>, plain: String) -> Result<String, StoreError> {
    match keys {
        None => Ok(plain),
        Some(keys) => keys.seal(place, &plain),
    }
}

/// What the migration must do to reach `tollgate seal`: the advice of every refusal of an unsealed value.
const RUN_SEAL: &str = "if it was written before encryption at rest (or before this version), run `tollgate seal` \
     once to seal it; otherwise the database was written behind Tollgate's back";

/// The plaintext of a stored value. Without keys: a plain value as it is (no copy); a sealed one is
/// refused. With keys: a sealed value opened; plaintext refused, and a run's column sealed as v1
/// refused (see the module's promises).
pub(crate) fn open(keys: Option<&DataKeys>, place: Place<'_>, stored: String) -> Result<String, StoreError> {
    let Some(keys) = keys else {
        return open_unsealed(None, place, stored);
    };
    if !is_sealed(&stored) {
        return Err(place.undecryptable(format!(
            "it is plaintext where a sealed value belongs (encryption at rest is on): refused; {RUN_SEAL}"
        )));
    }
    let envelope = parse_envelope(&stored).map_err(|malformed| place.corrupt(malformed.to_string()))?;
    if let (Version::V1, At::Version(_)) = (envelope.version, place.at) {
        return Err(place.undecryptable(format!(
            "it is sealed as `enc:v1`, which does not bind the run's version (an older value could have been \
             put back): refused; {RUN_SEAL}"
        )));
    }
    keys.open(place, envelope)
}

/// The plaintext of a stored value, accepting plaintext and v1 envelopes everywhere: for the migration
/// that seals them (and for a store without keys, where every value is plaintext).
pub(crate) fn open_unsealed(keys: Option<&DataKeys>, place: Place<'_>, stored: String) -> Result<String, StoreError> {
    if !is_sealed(&stored) {
        return Ok(stored);
    }
    let envelope = parse_envelope(&stored).map_err(|malformed| place.corrupt(malformed.to_string()))?;
    match keys {
        Some(keys) => keys.open(place, envelope),
        None => Err(place.undecryptable(format!(
            "it is encrypted with data key `{}` and this store has no data keys configured",
            envelope.key_id
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "01980000-0000-7000-8000-000000000001";

    fn event(seq: i64) -> Place<'static> {
        Place { run_id: RUN, column: "events.data", at: At::Event { seq, chain_key: Some("k1") } }
    }

    fn column(column: &'static str, version: i64) -> Place<'static> {
        Place { run_id: RUN, column, at: At::Version(version) }
    }

    fn keys(ids: &[(&str, u8)]) -> DataKeys {
        let ring = ids.iter().map(|(id, byte)| DataKey::new(*id, [*byte; 32])).collect::<Result<Vec<_>, _>>();
        match ring.and_then(DataKeys::new) {
            Ok(keys) => keys,
            Err(e) => panic!("test keys: {e}"),
        }
    }

    /// A v1 envelope as earlier builds wrote it.
    fn seal_v1(keys: &DataKeys, place: Place<'_>, plain: &str) -> String {
        let (id, cipher) = &keys.keys[0];
        let mut buffer = vec![7u8; NONCE_LEN];
        buffer.extend_from_slice(plain.as_bytes());
        let (nonce, message) = buffer.split_at_mut(NONCE_LEN);
        let tag = cipher
            .encrypt_in_place_detached(Nonce::from_slice(nonce), &place.associated_data(Version::V1), message)
            .unwrap_or_else(|_| panic!("v1 test seal"));
        buffer.extend_from_slice(&tag);
        format!("{V1}{id}:{}", BASE64.encode(&buffer))
    }

    #[test]
    fn a_value_round_trips_and_is_bound_to_its_place_and_moment() -> Result<(), StoreError> {
        let ring = keys(&[("k1", 1)]);
        let plain = r#"{"schema_version":1,"secret":"the plaintext ✓"}"#;
        let sealed = ring.seal(event(3), plain)?;
        assert!(sealed.starts_with("enc:v2:k1:"), "{sealed}");
        assert!(!sealed.contains("secret"));
        assert_ne!(sealed, ring.seal(event(3), plain)?, "a fresh nonce per value");
        assert_eq!(open(Some(&ring), event(3), sealed.clone())?, plain);
        for elsewhere in [
            event(4),
            Place { run_id: RUN, column: "events.data", at: At::Event { seq: 3, chain_key: None } },
            column("runs.suspension", 3),
            Place { run_id: "another-run", ..event(3) },
        ] {
            let moved = open(Some(&ring), elsewhere, sealed.clone());
            assert!(matches!(moved, Err(StoreError::Undecryptable { ref detail, .. }) if detail.contains("`k1`")));
        }
        let suspension = ring.seal(column("runs.suspension", 4), plain)?;
        assert_eq!(open(Some(&ring), column("runs.suspension", 4), suspension.clone())?, plain);
        let older = open(Some(&ring), column("runs.suspension", 5), suspension);
        assert!(matches!(older, Err(StoreError::Undecryptable { .. })), "a value of version 4 at version 5: {older:?}");
        Ok(())
    }

    #[test]
    fn with_keys_plaintext_is_refused_and_without_keys_it_passes_through() -> Result<(), StoreError> {
        let ring = keys(&[("k1", 1)]);
        for plain in ["{\"a\":1}", "", "[]", "null", "encrypted? no"] {
            for place in [column("runs.suspension", 1), event(1)] {
                let refused = open(Some(&ring), place, plain.to_owned());
                let Err(StoreError::Undecryptable { id, detail }) = refused else {
                    panic!("{plain:?} was not refused: {refused:?}");
                };
                assert!(id == RUN && detail.contains("plaintext") && detail.contains("tollgate seal"), "{detail}");
                assert_eq!(open_unsealed(Some(&ring), place, plain.to_owned())?, plain);
                assert_eq!(open(None, place, plain.to_owned())?, plain);
            }
        }
        assert_eq!(seal(None, column("runs.suspension", 1), "{}".to_owned())?, "{}");
        Ok(())
    }

    /// v1 does not bind the version: a run's column sealed as v1 is refused (but opens for the
    /// migration), while an event's v1 data, written once and bound to its seq, still opens.
    #[test]
    fn v1_opens_for_events_and_only_for_the_migration_in_a_runs_columns() -> Result<(), StoreError> {
        let ring = keys(&[("k1", 1)]);
        let v1_suspension = seal_v1(&ring, column("runs.suspension", 0), "{}");
        let refused = open(Some(&ring), column("runs.suspension", 9), v1_suspension.clone());
        assert!(
            matches!(&refused, Err(StoreError::Undecryptable { detail, .. }) if detail.contains("enc:v1")),
            "{refused:?}"
        );
        assert_eq!(open_unsealed(Some(&ring), column("runs.suspension", 9), v1_suspension)?, "{}");
        let v1_event = seal_v1(&ring, event(2), "[]");
        assert_eq!(open(Some(&ring), event(2), v1_event.clone())?, "[]");
        assert!(matches!(open(Some(&ring), event(3), v1_event), Err(StoreError::Undecryptable { .. })));
        Ok(())
    }

    #[test]
    fn a_missing_or_wrong_key_names_the_run_and_the_key() -> Result<(), StoreError> {
        let sealed = keys(&[("k1", 1)]).seal(column("runs.suspension", 1), "{}")?;
        let cases = [
            (open(None, column("runs.suspension", 1), sealed.clone()), "no data keys configured"),
            (open(Some(&keys(&[("k2", 2)])), column("runs.suspension", 1), sealed.clone()), "not configured"),
            (open(Some(&keys(&[("k1", 9)])), column("runs.suspension", 1), sealed.clone()), "does not decrypt"),
        ];
        for (result, why) in cases {
            let Err(StoreError::Undecryptable { id, detail }) = result else {
                panic!("expected Undecryptable ({why}), got {result:?}");
            };
            assert_eq!(id, RUN);
            assert!(detail.contains("`k1`") && detail.contains(why) && detail.contains("suspension"), "{detail}");
        }
        Ok(())
    }

    #[test]
    fn malformed_envelopes_are_corrupt_never_a_panic() {
        let ring = keys(&[("k1", 1)]);
        let short = format!("enc:v2:k1:{}", BASE64.encode([0u8; NONCE_LEN + TAG_LEN - 1]));
        let cases: [(&str, &str); 9] = [
            ("enc:", "version ``"),
            ("enc:v3:k1:AAAA", "version `v3`"),
            ("enc:v1:", "key id"),
            ("enc:v2:", "key id"),
            ("enc:v2:k1", "key id"),
            ("enc:v2::AAAA", "key id"),
            ("enc:v2:k1:not base64!", "base64"),
            ("enc:v2:k1:", "0 bytes"),
            (&short, "27 bytes"),
        ];
        for (stored, why) in cases {
            for keys in [Some(&ring), None] {
                let result = open(keys, event(1), stored.to_owned());
                let Err(StoreError::Corrupt { id, detail }) = &result else {
                    panic!("{stored}: expected Corrupt, got {result:?}");
                };
                assert!(id == RUN && detail.contains(why) && detail.contains("event 1"), "{stored}: {detail}");
            }
        }
        // The shortest well-formed value (an empty plaintext) is not a parse error, only a wrong tag.
        let empty = format!("enc:v2:k1:{}", BASE64.encode([0u8; NONCE_LEN + TAG_LEN]));
        assert!(matches!(open(Some(&ring), event(1), empty), Err(StoreError::Undecryptable { .. })));
    }

    #[test]
    fn keys_parse_from_hex_without_echoing_them() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
        let key = DataKey::from_hex("2025-01", &format!(" {hex}\n"));
        assert!(matches!(&key, Ok(key) if key.id() == "2025-01" && key.key[1] == 0x11 && key.key[31] == 0xff));
        for bad in [&hex[..62], &format!("{hex}00"), &hex.replace('a', "g"), ""] {
            let error = DataKey::from_hex("k", bad).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(error.contains("64 hexadecimal digits"), "{error}");
            assert!(bad.len() < 8 || !error.contains(&bad[..8]), "{error}");
        }
        for bad in ["", "a:b", "with space", &"x".repeat(65)] {
            assert!(matches!(DataKey::from_hex(bad, hex), Err(DataKeyError::InvalidId { .. })), "{bad}");
        }
        let secret = DataKey::from_hex("k1", hex).map(|key| format!("{key:?}")).unwrap_or_default();
        assert_eq!(secret, "DataKey { id: \"k1\", .. }");
    }

    #[test]
    fn a_keyring_seals_with_its_first_key_and_debug_shows_only_ids() -> Result<(), StoreError> {
        assert!(matches!(DataKeys::new(Vec::new()), Err(DataKeyError::Empty)));
        let twice =
            [DataKey::new("k1", [1; 32]), DataKey::new("k1", [2; 32])].into_iter().collect::<Result<Vec<_>, _>>();
        assert!(matches!(twice.map(DataKeys::new), Ok(Err(DataKeyError::DuplicateId(id))) if id == "k1"));
        let ring = keys(&[("k2", 2), ("k1", 1)]);
        assert_eq!(format!("{ring:?}"), "DataKeys { ids: [\"k2\", \"k1\"] }");
        let old = keys(&[("k1", 1)]).seal(column("runs.decisions", 1), "{}")?;
        assert_eq!(open(Some(&ring), column("runs.decisions", 1), old.clone())?, "{}");
        assert!(!ring.sealed_with_current_key(&old));
        let new = ring.seal(column("runs.decisions", 1), "{}")?;
        assert!(new.starts_with("enc:v2:k2:") && ring.sealed_with_current_key(&new));
        // The chain keys follow the data keys' order and ids, and are not the data keys themselves.
        let chain = ring.chain_keys();
        assert_eq!(chain.current().map(|k| k.id()), Some("k2"));
        assert!(chain.get("k1").is_some() && chain.get("k3").is_none());
        Ok(())
    }
}
