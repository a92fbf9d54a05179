//! The OpenAPI 3.1 document of the API, generated from the handlers' annotations and the wire types of
//! `tollgate-agent-protocol` (each derives its schema, under the component name it has always had). A
//! copy is committed as `crates/tollgate-agent-server/openapi.json`; a test fails when the two drift
//! (`UPDATE_OPENAPI=1 cargo test -p tollgate-agent-server --test all openapi` rewrites the copy).
//!
//! What it promises, beyond the annotations:
//! - **Every status an operation can answer is listed on it**, each error with the `Problem` schema
//!   under `application/problem+json`. A handler's annotation names its own answers (its role's 403,
//!   404, 409, 422, 429); the answers every operation of a kind shares are added here, from one table
//!   ([`SHARED_ANSWERS`]): a body's 400 / 408 / 413 / 415, a token's 401 and 403, the store's 500 / 503 /
//!   507, the connection limit's 503. (A path called with a method it does not list answers 405: that is
//!   no operation's answer, so the document's description says it.)
//! - **Free-form objects are open**: an object schema with no `properties` (an edit's `arguments`,
//!   `metadata`, a tool's `parameters`, an event's `data`, a grant's `match`, ...) declares
//!   `additionalProperties: true`, so generators type it as a map of anything, not as an empty object.
//! - **Security follows the configuration**: the committed document is the one a server with tokens
//!   serves (every `/v1` operation and `/metrics` declare `bearer`); a server without tokens serves
//!   [`openapi_json_without_tokens`], with no security requirement and no 401.

use crate::{grants, routes};
use serde_json::{Map, Value, json};
use tollgate_agent_protocol as wire;
use tollgate_agent_protocol::PROBLEM_JSON;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Tollgate HTTP API",
        version = "1",
        description = "Runs of agents that stop at the gate before any side-effecting tool call, and the decisions that \
resume them. JSON in and out; errors are application/problem+json with a stable `type` \
(https://tollgate.dev/problems/SLUG), and every operation lists each status it can answer. A path called with a \
method it does not list answers 405 `method-not-allowed` (a problem document, with `Allow`).",
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

/// The sentence of the document's description that says who must authenticate, with tokens.
const WITH_TOKENS: &str = "This is the document of a server with tokens (`[[auth.tokens]]`): every operation that declares \
`bearer` security needs `Authorization: Bearer TOKEN` (else 401). A server without tokens serves, at GET /openapi.json, \
this document without any security requirement or 401: every caller is `local`, and only the OS user running the \
server may call /v1 and /metrics (else 403).";

/// The same sentence in the document a server without tokens serves.
const WITHOUT_TOKENS: &str = "This server has no tokens configured: no operation needs `Authorization`, every caller \
is `local`, and only the OS user running the server may call /v1 and /metrics (else 403). A server with tokens \
declares `bearer` security on those operations.";

/// What an operation shares with others of its kind, and so is listed on it here rather than in its
/// annotation.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// It reads a request body.
    Body,
    /// It takes a caller (`security`): with tokens, the token; without, the connection's OS user.
    Caller,
    /// It reads or writes the store.
    Store,
    /// It is refused past `[server] max_connections` (every operation but `/healthz`, which the
    /// reserve serves).
    Limited,
}

/// The operations that touch no store (by `operationId`); every other operation does.
const STORELESS: [&str; 4] = ["agents", "healthz", "readyz", "openapi"];

/// Each answer operations of a kind share: its kind, status, the description when the operation lists
/// no answer of that status, and the clause added when its annotation already lists one.
const SHARED_ANSWERS: [(Kind, &str, &str, &str); 10] = [
    (Kind::Body, "400", "`malformed-json`: the body is not JSON, or cannot be read", "or the body is not JSON"),
    (
        Kind::Body,
        "408",
        "`request-timeout`: the body did not arrive within `[server] body_timeout`; the connection is closed",
        "or the body did not arrive in time",
    ),
    (Kind::Body, "413", "`payload-too-large`: the body is over `[server] max_body_bytes`", "or the body is too large"),
    (
        Kind::Body,
        "415",
        "`unsupported-media-type`: a body declared as something other than JSON",
        "or the body is not declared as JSON",
    ),
    (Kind::Caller, "401", "`unauthorized`: missing or unknown token", "or the token is missing or unknown"),
    (
        Kind::Caller,
        "403",
        "`forbidden`: without tokens, a connection from an OS user other than the server's",
        "or, without tokens, a connection from an OS user other than the server's",
    ),
    (
        Kind::Store,
        "500",
        "`internal`: the server failed; `corrupt-run`: the run's stored data is damaged (`detail` names it); \
         `corrupt-database`: the store's database is damaged",
        "",
    ),
    (
        Kind::Store,
        "503",
        "`unavailable`: the store cannot be reached or failed to answer (retry), or the server is at \
         `[server] max_connections` (`Retry-After: 1`); `read-only`: the store refuses writes",
        "or the store cannot be reached",
    ),
    (Kind::Store, "507", "`disk-full`: the store has no room left to write; reads still work", ""),
    (
        Kind::Limited,
        "503",
        "`unavailable`: the server is at `[server] max_connections` (`Retry-After: 1`, `Connection: close`)",
        "or the server is at `[server] max_connections` (`Retry-After: 1`)",
    ),
];

/// The document a server with tokens serves (`GET /openapi.json`), pretty-printed: the committed copy.
/// The three forms of a decision request are written as the protocol crate states them
/// (`decide_forms`): they use `const`, which utoipa's schema types cannot hold.
pub fn openapi_json() -> String {
    pretty(&document())
}

/// The document a server without tokens serves: [`openapi_json`] without `bearer` security, without
/// 401 answers, and saying so in its description.
pub fn openapi_json_without_tokens() -> String {
    let mut doc = document();
    if let Some(description) = doc.pointer_mut("/info/description").and_then(|d| d.as_str()).map(str::to_owned) {
        doc["info"]["description"] = Value::from(description.replace(WITH_TOKENS, WITHOUT_TOKENS));
    }
    if let Some(components) = doc.get_mut("components").and_then(Value::as_object_mut) {
        components.remove("securitySchemes");
    }
    for operation in operations(&mut doc) {
        operation.remove("security");
        if let Some(responses) = operation.get_mut("responses").and_then(Value::as_object_mut) {
            responses.remove("401");
        }
    }
    pretty(&doc)
}

fn pretty(doc: &Value) -> String {
    let mut text = serde_json::to_string_pretty(doc).unwrap_or_default();
    text.push('\n');
    text
}

/// The document with tokens, as a JSON value.
fn document() -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    if let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(|s| s.as_object_mut()) {
        for (name, form) in wire::decide_forms() {
            schemas.insert(name.to_owned(), form);
        }
    }
    if let Some(description) = doc.pointer_mut("/info/description") {
        *description = Value::from(format!("{} {WITH_TOKENS}", description.as_str().unwrap_or_default()));
    }
    for operation in operations(&mut doc) {
        add_shared_answers(operation);
    }
    open_free_form_objects(&mut doc);
    doc
}

/// Every operation of the document.
fn operations(doc: &mut Value) -> impl Iterator<Item = &mut Map<String, Value>> {
    doc.get_mut("paths")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|paths| paths.values_mut())
        .filter_map(Value::as_object_mut)
        .flat_map(|item| item.values_mut())
        .filter_map(Value::as_object_mut)
}

/// Lists on `operation` the [`SHARED_ANSWERS`] of its kinds, its answers then ordered by status.
fn add_shared_answers(operation: &mut Map<String, Value>) {
    let id = operation.get("operationId").and_then(Value::as_str).unwrap_or_default().to_owned();
    let kinds = [
        (Kind::Body, operation.contains_key("requestBody")),
        (Kind::Caller, operation.contains_key("security")),
        (Kind::Store, !STORELESS.contains(&id.as_str())),
        (Kind::Limited, id != "healthz" && STORELESS.contains(&id.as_str())),
    ];
    let Some(responses) = operation.get_mut("responses").and_then(Value::as_object_mut) else { return };
    for (kind, status, alone, also) in SHARED_ANSWERS {
        if !kinds.contains(&(kind, true)) {
            continue;
        }
        match responses.get_mut(status) {
            Some(answer) => {
                if let Some(description) = answer.get("description").and_then(Value::as_str)
                    && !also.is_empty()
                {
                    answer["description"] = Value::from(format!("{description}; {also}"));
                }
            }
            None => {
                let problem = json!({"schema": {"$ref": "#/components/schemas/Problem"}});
                responses.insert(status.to_owned(), json!({"description": alone, "content": {PROBLEM_JSON: problem}}));
            }
        }
    }
    let mut sorted: Vec<(String, Value)> = std::mem::take(responses).into_iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    responses.extend(sorted);
}

/// Gives every object schema without `properties` (a free-form object) `additionalProperties: true`:
/// JSON Schema allows any member there already, but generators such as openapi-typescript read a bare
/// `{"type": "object"}` as an object with no members (`Record<string, never>`), which no value fits.
fn open_free_form_objects(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let is_object = match map.get("type") {
                Some(Value::String(t)) => t == "object",
                Some(Value::Array(types)) => types.iter().any(|t| t == "object"),
                _ => false,
            };
            let shaped = ["properties", "additionalProperties", "patternProperties", "$ref", "allOf", "oneOf", "anyOf"]
                .iter()
                .any(|key| map.contains_key(*key));
            if is_object && !shaped {
                map.insert("additionalProperties".to_owned(), Value::Bool(true));
            }
            for (key, child) in map.iter_mut() {
                // Values, not schemas.
                if !matches!(key.as_str(), "example" | "examples" | "default" | "enum" | "const") {
                    open_free_form_objects(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(open_free_form_objects),
        _ => {}
    }
}
