//! The schemas an OpenAPI client generator sees, against the document the server commits today
//! (`crates/tollgate-agent-server/openapi.json`): no component is renamed, no field is added, dropped or made
//! optional, and each decision action is a component of its own.

use serde_json::Value;
use std::collections::BTreeSet;
use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(components(schemas(
    tollgate_agent_protocol::StartRunRequest,
    tollgate_agent_protocol::DecisionRequest,
    tollgate_agent_protocol::CallDecision,
    tollgate_agent_protocol::CancelRequest,
    tollgate_agent_protocol::PurgeRequest,
    tollgate_agent_protocol::Run,
    tollgate_agent_protocol::RunPage,
    tollgate_agent_protocol::Event,
    tollgate_agent_protocol::EventPage,
    tollgate_agent_protocol::AgentList,
    tollgate_agent_protocol::ToolList,
    tollgate_agent_protocol::PurgeResult,
    tollgate_agent_protocol::Health,
    tollgate_agent_protocol::Problem,
    tollgate_agent_protocol::Grant,
    tollgate_agent_protocol::GrantPage,
    tollgate_agent_protocol::CreateGrantRequest,
    tollgate_agent_protocol::Remember,
    tollgate_agent_protocol::GrantScope,
)))]
struct Doc;

fn schemas() -> (Value, Value) {
    let ours: Value = serde_json::to_value(Doc::openapi()).unwrap_or_else(|e| panic!("{e}"));
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tollgate-agent-server/openapi.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let committed: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    (ours["components"]["schemas"].clone(), committed["components"]["schemas"].clone())
}

fn names(schemas: &Value) -> BTreeSet<String> {
    schemas.as_object().into_iter().flatten().map(|(k, _)| k.clone()).collect()
}

/// `required` and the property names of an object schema.
fn fields(schema: &Value) -> (Vec<Value>, BTreeSet<String>) {
    let required = schema["required"].as_array().cloned().unwrap_or_default();
    (required, names(&schema["properties"]))
}

#[test]
fn every_committed_component_keeps_its_name_and_fields() {
    let (ours, committed) = schemas();
    let added: BTreeSet<String> = names(&ours).difference(&names(&committed)).cloned().collect();
    assert!(added.is_empty(), "components the committed document lacks: {added:?}");
    let missing: Vec<String> = names(&committed).difference(&names(&ours)).cloned().collect();
    assert!(missing.is_empty(), "components the protocol does not define: {missing:?}");
    // The server's document also lists each decision component's `action` tag (openapi.rs,
    // `TaggedDecisions`): a closed schema cannot see the tag beside it.
    let tagged = ["ApproveDecision", "EditDecision", "DenyDecision", "RespondDecision"];
    for name in names(&committed).iter().filter(|n| !tagged.contains(&n.as_str())) {
        assert_eq!(fields(&ours[name]), fields(&committed[name]), "{name}");
        for (property, schema) in committed[name]["properties"].as_object().into_iter().flatten() {
            let nullable = |s: &Value| s.to_string().contains("\"null\"");
            assert_eq!(nullable(&ours[name]["properties"][property]), nullable(schema), "{name}.{property}");
        }
        assert_eq!(ours[name]["enum"], committed[name]["enum"], "{name}");
    }
}

#[test]
fn each_decision_action_is_a_named_component() {
    let (ours, _) = schemas();
    let referenced: Vec<String> = ours["DecisionItem"]["oneOf"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|variant| variant["$ref"].as_str().map(str::to_owned))
        .collect();
    // Plain references with a discriminator: client generators keep every variant (an `allOf` per
    // variant made openapi-python-client drop them).
    assert_eq!(ours["DecisionItem"]["discriminator"]["propertyName"], "action");
    assert_eq!(ours["DecisionItem"]["discriminator"]["mapping"]["edit"], "#/components/schemas/EditDecision");
    assert_eq!(
        referenced,
        ["ApproveDecision", "EditDecision", "DenyDecision", "RespondDecision"]
            .map(|n| format!("#/components/schemas/{n}"))
    );
    for (name, required) in [
        ("ApproveDecision", vec!["call_id"]),
        ("EditDecision", vec!["call_id", "arguments"]),
        ("DenyDecision", vec!["call_id"]),
        ("RespondDecision", vec!["call_id", "result"]),
    ] {
        assert_eq!(ours[name]["required"], serde_json::json!(required), "{name}");
        assert_eq!(ours[name]["additionalProperties"], Value::Bool(false), "{name} is a request: closed");
    }
    // One flat object: openapi-python-client drops an `allOf` of the tagged `Decision`.
    assert_eq!(ours["RecordedDecision"]["required"], serde_json::json!(["action", "actor", "at"]));
    assert_eq!(ours["RecordedDecision"]["properties"]["action"]["enum"][1], "edit");
}
