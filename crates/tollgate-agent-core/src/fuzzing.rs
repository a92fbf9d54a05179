//! The fuzz target `suspension`'s entry point (`fuzz/`), shared with the test that replays its corpus
//! (`tests/all/fuzz_corpus.rs`). Not part of the API.
//!
//! A stored suspension is read back by another process or another version, so its reader takes any text:
//! [`Suspension::from_json`] gives a suspension or an error, never a panic, and the same answer as its
//! general path (a JSON value first, then the suspension), which it skips for text this build wrote;
//! and a suspension is one the store can keep — written by [`Suspension::to_stored`], it reads back equal (digest included), and
//! writing it again gives the same text.
//!
//! A fuzzer cannot forge a SHA-256 digest, so only its seeds would reach the round trip. Text that is a
//! suspension in every way but its `turn_digest` is therefore also checked, with the digest recomputed.

use crate::suspension::Suspension;
use serde_json::Value;

/// Reads `data` as a stored suspension and checks the round trip; `Err` says which promise broke.
pub fn check_suspension(data: &[u8]) -> Result<(), String> {
    // A store keeps text; bytes that are not UTF-8 never reach the reader.
    let Ok(text) = std::str::from_utf8(data) else { return Ok(()) };
    let general = serde_json::from_str::<Value>(text)
        .map_err(|e| e.to_string())
        .and_then(|value| Suspension::from_value(value).map_err(|e| e.to_string()));
    match (Suspension::from_json(text), general) {
        (Ok(read), Ok(general)) if read != general => {
            return Err(format!("the two ways of reading disagree:\n{read:?}\n{general:?}"));
        }
        (Ok(read), Err(e)) => return Err(format!("read as {read:?}, which the general path refuses: {e}")),
        (Err(e), Ok(general)) => return Err(format!("refused ({e}), which the general path reads as {general:?}")),
        _ => {}
    }
    let suspension = match Suspension::from_json(text) {
        Ok(suspension) => suspension,
        Err(_) => match with_digest_recomputed(text) {
            Some(suspension) => suspension,
            None => return Ok(()),
        },
    };
    let stored = suspension.to_stored().map_err(|e| format!("a suspension cannot be stored: {e}"))?;
    let read_back =
        stored.parse().map_err(|e| format!("a stored suspension does not read back: {e}\n{}", stored.as_str()))?;
    if read_back != suspension {
        return Err(format!("the suspension changed in the round trip:\n{suspension:?}\n{read_back:?}"));
    }
    let stored_again = read_back.to_stored().map_err(|e| format!("a read-back suspension cannot be stored: {e}"))?;
    if stored_again != stored {
        return Err(format!("storing twice gives other text:\n{}\n{}", stored.as_str(), stored_again.as_str()));
    }
    Ok(())
}

/// The suspension `text` holds if its digest is all that is wrong with it (read the way
/// [`Suspension::from_json`]'s general path reads: a JSON value first, then the suspension), with the
/// right digest.
fn with_digest_recomputed(text: &str) -> Option<Suspension> {
    let value: Value = serde_json::from_str(text).ok()?;
    let Suspension { round, transcript, calls, counters, trace, tools, .. } = serde_json::from_value(value).ok()?;
    Some(Suspension::new(round, transcript, calls, counters, trace, tools))
}
