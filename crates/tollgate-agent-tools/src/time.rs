//! `time_now` (allow): the current UTC time, RFC 3339, read from an injected [`Clock`] so tests are
//! deterministic.

use crate::call::{parse, ready};
use chrono::{DateTime, SecondsFormat};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use tollgate_agent_core::{BoxFuture, Clock, Gate, Tool, ToolContext, ToolError, ToolOutput};

/// `time_now`: the current UTC time as RFC 3339 with milliseconds, e.g. `2025-01-31T09:30:00.000Z`.
pub struct TimeNow {
    clock: Arc<dyn Clock>,
    schema: Value,
}

/// No arguments at all: an unknown key is refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

impl TimeNow {
    /// The tool reading this clock.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        let schema = json!({"type": "object", "properties": {}, "additionalProperties": false});
        Self { clock, schema }
    }

    fn now(&self, args: &Value) -> Result<ToolOutput, ToolError> {
        if let Err(e) = parse::<NoArgs>(args) {
            return Ok(ToolOutput::error(e));
        }
        let millis = self.clock.now();
        let now = DateTime::from_timestamp_millis(millis)
            .ok_or_else(|| ToolError::new(format!("the clock reads {millis} ms, outside the calendar")))?;
        Ok(ToolOutput::text(now.to_rfc3339_opts(SecondsFormat::Millis, true)))
    }
}

impl Tool for TimeNow {
    fn name(&self) -> &str {
        "time_now"
    }

    fn description(&self) -> &str {
        "The current date and time in UTC, RFC 3339 (e.g. 2025-01-31T09:30:00.000Z)."
    }

    fn parameters(&self) -> &Value {
        &self.schema
    }

    fn validate<'a>(&'a self, args: &'a Value) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(std::future::ready(parse::<NoArgs>(args).map(drop)))
    }

    fn gate(&self, _args: &Value) -> Gate {
        Gate::Allow
    }

    fn call<'a>(&'a self, args: Value, _ctx: ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        ready(self.now(&args))
    }
}
