//! The run object of docs/api.md, as the HTTP API and the CLI's `--json` print it: [`tollgate_agent_protocol::Run`],
//! built from the stored record by [`crate::wire::run`].

use serde_json::Value;
use tollgate_agent_core::RunRecord;

/// The docs/api.md "Run" object for a record. A held turn whose suspension cannot be read shows no calls (and
/// is logged); deciding on it fails the run as `corrupt_suspension`.
pub fn run_view(run: &RunRecord) -> tollgate_agent_protocol::Run {
    crate::wire::run(run)
}

/// [`run_view`] as JSON, for callers that look at it by key (tests, `--json`).
pub fn run_json(run: &RunRecord) -> Value {
    // Cannot fail: the run object is strings, numbers, booleans, JSON values and string-keyed maps.
    serde_json::to_value(run_view(run)).unwrap_or(Value::Null)
}
