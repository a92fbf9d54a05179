//! Request bodies (docs/api.md, "Endpoints" and "Decisions").
//!
//! Every body rejects fields it does not know (docs/api.md: a 422), and leaves an absent optional field out
//! when a client serialises it, so what a client sends is the smallest body that says what it means.
//! Rules that span fields (`decisions` not empty, not together with `approve_all`, …) are the server's
//! to check: it answers each with its own 422 detail. The schemas state the same rules (the
//! `DecideRequest` schema is one of its three forms), so the OpenAPI document refuses exactly what the
//! server refuses.

use crate::grant::Remember;
use crate::ids::CallId;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// `POST /v1/runs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", schema(as = CreateRun))]
pub struct StartRunRequest {
    /// The agent; the first configured agent when absent or null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// What the agent is asked to do: a string with at least one character that is not white space.
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            pattern = "[^\\t-\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"
        )
    )]
    pub input: String,
    /// Handed to every tool call of the run and stored with it (which customer, which tenant); shown on
    /// the run, never in its events. A JSON object of at most 16 KiB as compact JSON, nested at most 16
    /// levels deep (the object itself is the first); `{}` when absent or null.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "object_or_null")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<Map<String, Value>>,
    /// Answer once the run waits for approval or has ended (default false: answer at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<bool>,
}

/// `metadata` of [`StartRunRequest`]: an object, or absent when null; anything else is refused naming the
/// field (a plain map would only say "expected a map").
fn object_or_null<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Map<String, Value>>, D::Error> {
    let found = match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(map)) => return Ok(Some(map)),
        Some(Value::Array(_)) => "an array",
        Some(Value::String(_)) => "a string",
        Some(Value::Number(_)) => "a number",
        Some(Value::Bool(_)) => "a boolean",
    };
    Err(serde::de::Error::custom(format!("`metadata` must be a JSON object, not {found}")))
}

/// `approve`: run the call as the model asked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ApproveDecision {
    /// The held call.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub call_id: CallId,
    /// Also make a grant for calls like this one, in the same transaction (V2.md, grants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remember: Option<Remember>,
}

/// `edit`: run the call with these arguments instead (checked against the tool's schema).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EditDecision {
    /// The held call.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub call_id: CallId,
    /// The approver's arguments: a JSON object.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub arguments: Value,
}

/// `deny`: do not run the call; the model is told the reason.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DenyDecision {
    /// The held call.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub call_id: CallId,
    /// The reason given to the model (the server records `no reason given` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `respond`: do not run the call; this text is its result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RespondDecision {
    /// The held call.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub call_id: CallId,
    /// The result given in the tool's place.
    pub result: String,
}

/// One decision for one held call, by `call_id`, tagged by `action`.
///
/// Its schema (`DecisionItem`, hand-written below) is a `oneOf` of the four named action components with
/// `action` as discriminator, the shape client generators read (an `allOf` per variant was dropped by
/// openapi-python-client).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum CallDecision {
    /// Run the call as the model asked.
    Approve(ApproveDecision),
    /// Run the call with other arguments.
    Edit(EditDecision),
    /// Do not run the call; tell the model why.
    Deny(DenyDecision),
    /// Do not run the call; give this result instead.
    Respond(RespondDecision),
}

impl CallDecision {
    /// The held call this decision is for.
    pub fn call_id(&self) -> &CallId {
        match self {
            CallDecision::Approve(d) => &d.call_id,
            CallDecision::Edit(d) => &d.call_id,
            CallDecision::Deny(d) => &d.call_id,
            CallDecision::Respond(d) => &d.call_id,
        }
    }
}

/// `POST /v1/runs/{id}/decisions`: either `decisions`, or `approve_all`, or `deny_all` (with `reason`).
///
/// Its schema (`DecideRequest`, hand-written below) is one of three closed forms, `DecideEach`,
/// `DecideApproveAll` and `DecideDenyAll`: exactly the bodies [`DecisionRequest`] parses into and the
/// server's cross-field rules let through.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    /// The digest of the held turn the decisions were made on (`pending.turn_digest`).
    pub turn_digest: String,
    /// Decisions for some or all held calls; not empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decisions: Option<Vec<CallDecision>>,
    /// Approve every held call not yet decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approve_all: Option<bool>,
    /// Deny every held call not yet decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny_all: Option<bool>,
    /// The reason for `deny_all`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Answer once the run waits again or has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<bool>,
}

impl DecisionRequest {
    /// Decisions for some or all held calls of the turn `turn_digest`.
    pub fn each(turn_digest: impl Into<String>, decisions: Vec<CallDecision>) -> Self {
        Self { turn_digest: turn_digest.into(), decisions: Some(decisions), ..Self::default() }
    }

    /// Approve every held call not yet decided.
    pub fn approve_all(turn_digest: impl Into<String>) -> Self {
        Self { turn_digest: turn_digest.into(), approve_all: Some(true), ..Self::default() }
    }

    /// Deny every held call not yet decided, for `reason`.
    pub fn deny_all(turn_digest: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { turn_digest: turn_digest.into(), deny_all: Some(true), reason: Some(reason.into()), ..Self::default() }
    }
}

/// `(action, component)` of each [`CallDecision`] variant.
#[cfg(feature = "openapi")]
const DECISION_ACTIONS: [(&str, &str); 4] = [
    ("approve", "ApproveDecision"),
    ("edit", "EditDecision"),
    ("deny", "DenyDecision"),
    ("respond", "RespondDecision"),
];

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for CallDecision {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        let component = |name: &str| format!("#/components/schemas/{name}");
        let variants: Vec<Value> =
            DECISION_ACTIONS.iter().map(|(_, name)| serde_json::json!({"$ref": component(name)})).collect();
        let mapping: serde_json::Map<String, Value> = DECISION_ACTIONS
            .iter()
            .map(|(action, name)| ((*action).to_owned(), Value::from(component(name))))
            .collect();
        schema_of(serde_json::json!({
            "oneOf": variants,
            "discriminator": {"propertyName": "action", "mapping": mapping},
            "description": "One decision for one held call, by `call_id`, tagged by `action`.",
        }))
    }
}

#[cfg(feature = "openapi")]
impl ToSchema for CallDecision {
    fn name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("DecisionItem")
    }

    fn schemas(schemas: &mut Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>)>) {
        use utoipa::PartialSchema;
        schemas.push((ApproveDecision::name().into_owned(), ApproveDecision::schema()));
        schemas.push((EditDecision::name().into_owned(), EditDecision::schema()));
        schemas.push((DenyDecision::name().into_owned(), DenyDecision::schema()));
        schemas.push((RespondDecision::name().into_owned(), RespondDecision::schema()));
    }
}

/// The three forms of a [`DecisionRequest`], each a closed object: the components `DecideEach`,
/// `DecideApproveAll` and `DecideDenyAll`. A form's `approve_all` / `deny_all` it does not use may be
/// `false` or `null`; the other fields it does not use are absent. (The server also takes `null` for
/// them, as for any optional field, but a property that can only be `null` is dropped by openapi-fetch's
/// typing of request bodies, which then refuses the document's own `DecideRequest`.)
///
/// They are JSON rather than utoipa types because utoipa's schema types have no `const`: the server's
/// `openapi_json` writes these exact values over the (lossy) components [`DecisionRequest`] registers.
pub fn decide_forms() -> [(&'static str, Value); 3] {
    use serde_json::json;
    let digest = json!({"type": "string", "description": "The digest of the held turn the decisions were made on (`pending.turn_digest`)."});
    let wait = json!({"type": ["boolean", "null"], "description": "Answer once the run waits again or has ended."});
    // `const`, not a boolean `enum`: openapi-python-client reads the one and drops a form with the other.
    let off = json!({"anyOf": [{"type": "boolean", "const": false}, {"type": "null"}], "description": "Not in this form: `false` or `null`."});
    let on = |what: &str| json!({"type": "boolean", "const": true, "description": what});
    [
        (
            "DecideEach",
            json!({
                "type": "object",
                "description": "Decisions for some or all held calls, each by `call_id`.",
                "required": ["turn_digest", "decisions"],
                "properties": {
                    "turn_digest": digest,
                    "decisions": {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/DecisionItem"},
                                  "description": "Decisions for some or all held calls; not empty."},
                    "approve_all": off, "deny_all": off, "wait": wait,
                },
                "additionalProperties": false,
            }),
        ),
        (
            "DecideApproveAll",
            json!({
                "type": "object",
                "description": "Approve every held call that takes a decision.",
                "required": ["turn_digest", "approve_all"],
                "properties": {
                    "turn_digest": digest,
                    "approve_all": on("Approve every held call not yet decided."),
                    "deny_all": off, "wait": wait,
                },
                "additionalProperties": false,
            }),
        ),
        (
            "DecideDenyAll",
            json!({
                "type": "object",
                "description": "Deny every held call that takes a decision.",
                "required": ["turn_digest", "deny_all"],
                "properties": {
                    "turn_digest": digest,
                    "deny_all": on("Deny every held call not yet decided."),
                    "reason": {"type": ["string", "null"], "description": "The reason given to the model (`no reason given` when absent)."},
                    "approve_all": off, "wait": wait,
                },
                "additionalProperties": false,
            }),
        ),
    ]
}

/// A schema written as JSON; the shape is fixed, so it always reads (a test checks each one).
#[cfg(feature = "openapi")]
fn schema_of(value: Value) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    serde_json::from_value(value).unwrap_or_default()
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for DecisionRequest {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        let forms: Vec<Value> = decide_forms()
            .iter()
            .map(|(name, _)| serde_json::json!({"$ref": format!("#/components/schemas/{name}")}))
            .collect();
        schema_of(serde_json::json!({
            "oneOf": forms,
            "description": "`POST /v1/runs/{id}/decisions`: exactly one of `decisions` (not empty), `approve_all: true`, `deny_all: true` (with an optional `reason`).",
        }))
    }
}

#[cfg(feature = "openapi")]
impl ToSchema for DecisionRequest {
    fn name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("DecideRequest")
    }

    fn schemas(schemas: &mut Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>)>) {
        for (name, form) in decide_forms() {
            schemas.push((name.to_owned(), schema_of(form)));
        }
        schemas.push((CallDecision::name().into_owned(), <CallDecision as utoipa::PartialSchema>::schema()));
        <CallDecision as ToSchema>::schemas(schemas);
    }
}

/// `POST /v1/runs/{id}/cancel`; the body may be empty.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Why, recorded on the `run_cancelled` event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `POST /v1/purge`; an empty body means the configured retention windows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PurgeRequest {
    /// Terminal runs finished longer ago than this go (`30s`, `15m`, `24h`, `30d`: at most 14 digits,
    /// white space around allowed); waiting runs go by the configured `retention.waiting_after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(
            pattern = "^[\\t-\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]*[0-9]{1,14}[smhd][\\t-\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]*$"
        )
    )]
    pub older_than: Option<String>,
}
