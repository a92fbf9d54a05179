//! The OpenAPI 3.1 document of the API, generated from the handlers' annotations and the wire types of
//! `tollgate-agent-protocol` (each derives its schema, under the component name it has always had). A copy is committed as `crates/tollgate-agent-server/openapi.json`; a test fails when the two
//! drift (`UPDATE_OPENAPI=1 cargo test -p tollgate-agent-server --test all openapi` rewrites the copy).

use crate::{grants, routes};
use tollgate_agent_protocol as wire;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Tollgate HTTP API",
        version = "1",
        description = "Runs of agents that stop at the gate before any side-effecting tool call, and the decisions that \
resume them. JSON in and out; errors are application/problem+json with a stable `type` \
(https://tollgate.dev/problems/SLUG). With tokens configured, every route but /healthz, /readyz, /openapi.json and the \
playground needs `Authorization: Bearer TOKEN`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    paths(
        routes::create_run,
        routes::list_runs,
        routes::get_run,
        routes::run_events,
        routes::decide,
        routes::cancel_run,
        grants::create_grant,
        grants::list_grants,
        grants::get_grant,
        grants::revoke_grant,
        routes::agents,
        routes::tools,
        routes::purge,
        routes::healthz,
        routes::readyz,
        routes::metrics,
        routes::openapi,
    ),
    components(schemas(
        wire::StartRunRequest,
        wire::DecisionRequest,
        wire::CallDecision,
        wire::CancelRequest,
        wire::PurgeRequest,
        wire::Run,
        wire::RunPage,
        wire::Event,
        wire::EventPage,
        wire::AgentList,
        wire::ToolList,
        wire::PurgeResult,
        wire::Health,
        wire::Problem,
        wire::Grant,
        wire::GrantPage,
        wire::CreateGrantRequest,
        wire::Remember,
        wire::GrantScope,
    )),
    modifiers(&BearerAuth, &TaggedDecisions),
    tags(
        (name = "runs", description = "Start, list, read, follow, decide and cancel runs"),
        (name = "agents", description = "The configured agents and their tools"),
        (name = "grants", description = "Standing approvals: make, list, read and revoke"),
        (name = "admin", description = "Retention"),
        (name = "meta", description = "Health, metrics and this document"),
    )
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Each decision action is its own closed component (`additionalProperties: false`), one branch of
/// `DecisionItem`'s `oneOf` discriminated by `action`; serde reads `action` as the enum's tag, so the
/// derived structs leave it out, and each component lists it here, or no body would validate.
struct TaggedDecisions;

impl Modify for TaggedDecisions {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::RefOr;
        use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
        let Some(components) = openapi.components.as_mut() else { return };
        for (name, action) in [
            ("ApproveDecision", "approve"),
            ("EditDecision", "edit"),
            ("DenyDecision", "deny"),
            ("RespondDecision", "respond"),
        ] {
            if let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(name) {
                let tag = ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some([action]))
                    .description(Some("The action."))
                    .build();
                object.properties.insert("action".to_owned(), RefOr::T(Schema::Object(tag)));
                object.required.insert(0, "action".to_owned());
            }
        }
    }
}

/// The OpenAPI document as pretty-printed JSON (what `GET /openapi.json` serves). The three forms of a
/// decision request are written as the protocol crate states them (`decide_forms`): they use `const`,
/// which utoipa's schema types cannot hold.
pub fn openapi_json() -> String {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    if let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(|s| s.as_object_mut()) {
        for (name, form) in wire::decide_forms() {
            schemas.insert(name.to_owned(), form);
        }
    }
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}
