//! `time_now` (allow): the current UTC time, RFC 3339, read from an injected [`Clock`] so tests are
//! deterministic.

use chrono::{DateTime, SecondsFormat};
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;
use tollgate_agent_core::{Clock, ToolContext, ToolError, ToolOutput, TypedTool};

/// `time_now`: the current UTC time as RFC 3339 with milliseconds, e.g. `2025-01-31T09:30:00.000Z`.
pub struct TimeNow {
    clock: Arc<dyn Clock>,
}

/// The arguments of `time_now`: none at all (an unknown key is refused).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

impl TimeNow {
    /// The tool reading this clock.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self { clock }
    }
}

impl TypedTool for TimeNow {
    type Args = NoArgs;
    const NAME: &str = "time_now";
    const DESCRIPTION: &str = "The current date and time in UTC, RFC 3339 (e.g. 2025-01-31T09:30:00.000Z).";

    async fn call(&self, _args: NoArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let millis = self.clock.now();
        let now = DateTime::from_timestamp_millis(millis)
            .ok_or_else(|| ToolError::new(format!("the clock reads {millis} ms, outside the calendar")))?;
        Ok(ToolOutput::text(now.to_rfc3339_opts(SecondsFormat::Millis, true)))
    }
}
