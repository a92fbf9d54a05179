//! `time_now` through the `Tool` port: the injected clock's time as RFC 3339 UTC, and no arguments.

use crate::support::{Fixture, call};
use serde_json::json;
use std::sync::Arc;
use tollgate_agent_core::{Gate, IntoTool, ToolContext, ToolOutput};
use tollgate_agent_testkit::ManualClock;
use tollgate_agent_tools::TimeNow;

#[tokio::test]
async fn reads_the_injected_clock_as_rfc3339_utc() {
    let clock = ManualClock::at(1_738_315_800_123);
    let tool = TimeNow::new(Arc::new(clock.clone())).into_tool();
    assert_eq!(tool.gate(&json!({}), &ToolContext::listing()), Gate::Allow);
    assert_eq!(tool.preview(&json!({})).await, None);
    assert_eq!(call(&tool, json!({})).await, ToolOutput::text("2025-01-31T09:30:00.123Z"));
    clock.advance(std::time::Duration::from_secs(86_400));
    assert_eq!(call(&tool, json!({})).await, ToolOutput::text("2025-02-01T09:30:00.123Z"));
}

#[tokio::test]
async fn the_builtin_reads_the_system_clock() {
    let fx = Fixture::new();
    let before = chrono::Utc::now();
    let out = call(&fx.tool("time_now"), json!({})).await;
    let read = chrono::DateTime::parse_from_rfc3339(&out.content).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert!(out.content.ends_with('Z'), "UTC: {out:?}");
    assert!(read.timestamp_millis() >= before.timestamp_millis(), "{out:?} is before {before}");
}

#[tokio::test]
async fn takes_no_arguments() {
    let fx = Fixture::new();
    let tool = fx.tool("time_now");
    assert_eq!(tool.parameters(), &json!({"type": "object", "properties": {}, "additionalProperties": false}));
    let registry = fx.registry();
    let check = |args| registry.get("time_now").map(|t| t.check_arguments(&args).is_ok());
    assert_eq!(check(json!({})), Some(true));
    assert_eq!(check(json!({"timezone": "Europe/Paris"})), Some(false));
    for args in [json!({"timezone": "Europe/Paris"}), json!("now"), json!(null)] {
        assert!(tool.validate(&args).await.is_err(), "{args}");
        let out = call(&tool, args.clone()).await;
        assert!(out.is_error && out.content.contains("invalid arguments"), "{args}: {out:?}");
    }
}
