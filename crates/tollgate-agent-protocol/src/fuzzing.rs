//! The fuzz target `api_bodies`' entry point (`fuzz/`), shared with the tests that replay its corpus
//! (`tests/all/fuzz_corpus.rs` here and in `tollgate-agent-server`). Not part of the API.
//!
//! Every request body of the HTTP API is read from untrusted bytes: each type gives a value or an error,
//! never a panic; and a body a type accepts is one a client can send — serialised, it reads back equal,
//! and serialising that gives the same text (the CLI and third-party clients build bodies from these types).

use crate::{CancelRequest, DecisionRequest, PurgeRequest, StartRunRequest};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// Reads `data` as each request body type and checks the round trip; `Err` says which promise broke.
pub fn check_request_body(data: &[u8]) -> Result<(), String> {
    round_trip::<StartRunRequest>(data)?;
    round_trip::<DecisionRequest>(data)?;
    round_trip::<CancelRequest>(data)?;
    round_trip::<PurgeRequest>(data)
}

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(data: &[u8]) -> Result<(), String> {
    let Ok(body) = serde_json::from_slice::<T>(data) else { return Ok(()) };
    let name = std::any::type_name::<T>();
    let text = serde_json::to_string(&body).map_err(|e| format!("an accepted {name} cannot be written: {e}"))?;
    let read_back: T =
        serde_json::from_str(&text).map_err(|e| format!("a written {name} does not read back: {e}\n{text}"))?;
    if read_back != body {
        return Err(format!("the {name} changed in the round trip:\n{body:?}\n{read_back:?}"));
    }
    let text_again = serde_json::to_string(&read_back).map_err(|e| format!("{name} cannot be written again: {e}"))?;
    if text_again != text {
        return Err(format!("writing the {name} twice gives other text:\n{text}\n{text_again}"));
    }
    Ok(())
}
