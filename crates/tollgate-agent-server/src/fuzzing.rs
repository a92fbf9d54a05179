//! The fuzz target `api_bodies`' entry point (`fuzz/`), shared with the test that replays its corpus
//! (`tests/all/fuzz_corpus.rs`). Not part of the API.
//!
//! Adds the server's own reading to the protocol's round trip
//! ([`tollgate_agent_protocol::fuzzing::check_request_body`]): each body goes through the route's reading
//! (`input::parse_json` / `input::parse_optional_json`) and validation (the decision set, `older_than`),
//! which give a value or a 4xx problem — never a panic, and never a 5xx for bad input, which the `input`
//! module promises never reaches the runtime.

use crate::input::{parse_json, parse_optional_json};
use crate::problem::{ApiError, ProblemKind};
use crate::routes::decision_set;
use tollgate_agent_protocol::{CancelRequest, DecisionRequest, PurgeRequest, StartRunRequest};

/// Reads `data` as every request body the way the routes do; `Err` says which promise broke.
pub fn check_request_body(data: &[u8]) -> Result<(), String> {
    tollgate_agent_protocol::fuzzing::check_request_body(data)?;
    client_error(parse_json::<StartRunRequest>(data).map(drop))?;
    client_error(parse_json::<DecisionRequest>(data).and_then(|request| decision_set(&request).map(drop)))?;
    client_error(parse_optional_json::<CancelRequest>(data).map(drop))?;
    client_error(parse_optional_json::<PurgeRequest>(data).and_then(|request| match request.older_than.as_deref() {
        Some(text) => crate::duration::parse(text).map(drop).map_err(ApiError::invalid),
        None => Ok(()),
    }))
}

fn client_error(read: Result<(), ApiError>) -> Result<(), String> {
    match read {
        Ok(()) => Ok(()),
        Err(error) if matches!(error.kind, ProblemKind::MalformedJson | ProblemKind::InvalidRequest) => Ok(()),
        Err(error) => Err(format!("bad input answered with {:?}: {}", error.kind, error.detail)),
    }
}
