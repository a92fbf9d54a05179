//! The committed `openapi.json` is exactly what the code generates, and what `GET /openapi.json` serves.
//! After an intended change: `UPDATE_OPENAPI=1 cargo test -p tollgate-agent-server --test all openapi`.

use crate::common;

use std::path::PathBuf;

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("openapi.json")
}

#[test]
fn committed_openapi_matches_the_code() {
    let generated = tollgate_agent_server::openapi_json();
    let path = committed_path();
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} drifted from the code; review the change and run `UPDATE_OPENAPI=1 cargo test -p tollgate-agent-server --test all openapi`",
        path.display()
    );
}

#[test]
fn the_document_is_openapi_3_1_and_covers_every_endpoint_of_api_md() {
    let doc: serde_json::Value =
        serde_json::from_str(&tollgate_agent_server::openapi_json()).unwrap_or_else(|e| panic!("{e}"));
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.1")), "{}", doc["openapi"]);
    let endpoints = [
        ("post", "/v1/runs"),
        ("get", "/v1/runs"),
        ("get", "/v1/runs/{id}"),
        ("get", "/v1/runs/{id}/events"),
        ("post", "/v1/runs/{id}/decisions"),
        ("post", "/v1/runs/{id}/cancel"),
        ("get", "/v1/agents"),
        ("get", "/v1/tools"),
        ("post", "/v1/purge"),
        ("get", "/healthz"),
        ("get", "/metrics"),
        ("get", "/openapi.json"),
    ];
    for (method, path) in endpoints {
        assert!(doc["paths"][path][method].is_object(), "{method} {path} is not documented");
    }
    assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
}

#[tokio::test]
async fn the_server_serves_the_same_document_without_a_token() {
    let server = common::Server::start(common::Config { tokens: common::tokens(), ..Default::default() }).await;
    let response = server.client.get(server.url("/openapi.json")).send().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap_or_default(), tollgate_agent_server::openapi_json());
    server.stop().await;
}

/// With tokens the document declares `bearer` on every operation that takes one (and says what a server
/// without tokens serves); a server without tokens serves it with no security requirement and no 401,
/// and nothing else changed.
#[tokio::test]
async fn security_is_declared_only_where_a_token_is_needed() {
    let parse = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap_or_else(|e| panic!("{e}"));
    let with = parse(&tollgate_agent_server::openapi_json());
    let open = ["/healthz", "/readyz", "/openapi.json"];
    for (path, item) in with["paths"].as_object().into_iter().flatten() {
        for (method, operation) in item.as_object().into_iter().flatten() {
            if open.contains(&path.as_str()) {
                assert!(operation.get("security").is_none(), "{method} {path} needs no token");
            } else {
                assert_eq!(operation["security"], serde_json::json!([{"bearer": []}]), "{method} {path}");
                assert!(operation["responses"]["401"].is_object(), "{method} {path} lists 401");
            }
        }
    }
    let description = with["info"]["description"].as_str().unwrap_or_default();
    assert!(description.contains("A server without tokens serves"), "the committed document says so: {description}");

    let server = common::Server::start(common::Config::default()).await;
    let served = server.get("/openapi.json").await;
    assert_eq!(served.status, 200);
    assert_eq!(served.body, parse(&tollgate_agent_server::openapi_json_without_tokens()));
    let text = served.body.to_string();
    for key in ["\"security\"", "\"securitySchemes\"", "\"bearer\""] {
        assert!(!text.contains(key), "{key} in the document served without tokens");
    }
    // The same document, less the security requirements and the 401 answers, and its description.
    let mut expected = with.clone();
    expected["components"].as_object_mut().map(|c| c.remove("securitySchemes"));
    for item in expected["paths"].as_object_mut().into_iter().flat_map(|paths| paths.values_mut()) {
        for operation in item.as_object_mut().into_iter().flat_map(|item| item.values_mut()) {
            operation.as_object_mut().map(|o| o.remove("security"));
            operation["responses"].as_object_mut().map(|r| r.remove("401"));
        }
    }
    expected["info"]["description"] = served.body["info"]["description"].clone();
    assert_eq!(served.body, expected);
    let description = served.body["info"]["description"].as_str().unwrap_or_default();
    assert!(description.contains("This server has no tokens configured"), "{description}");
    server.stop().await;
}

/// No free-form object is left bare: each object schema without `properties` is open
/// (`additionalProperties: true`), which generators read as a map of anything.
#[test]
fn free_form_objects_are_open() {
    fn walk(schema: &serde_json::Value, at: &str, found: &mut Vec<String>) {
        match schema {
            serde_json::Value::Object(map) => {
                let object = map
                    .get("type")
                    .is_some_and(|t| t == "object" || t.as_array().is_some_and(|a| a.contains(&"object".into())));
                if object && !map.contains_key("properties") {
                    assert_eq!(map.get("additionalProperties"), Some(&serde_json::Value::Bool(true)), "{at}");
                    found.push(at.to_owned());
                }
                for (key, child) in map {
                    walk(child, &format!("{at}/{key}"), found);
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|item| walk(item, at, found)),
            _ => {}
        }
    }
    let doc: serde_json::Value =
        serde_json::from_str(&tollgate_agent_server::openapi_json()).unwrap_or_else(|e| panic!("{e}"));
    let mut found = Vec::new();
    walk(&doc, "", &mut found);
    for named in [
        "/components/schemas/EditDecision/properties/arguments",
        "/components/schemas/CreateRun/properties/metadata",
        "/components/schemas/Run/properties/metadata",
        "/components/schemas/HeldCall/properties/arguments",
        "/components/schemas/Tool/properties/parameters",
        "/components/schemas/Event/properties/data",
    ] {
        assert!(found.iter().any(|at| at == named), "{named} is a free-form object: {found:#?}");
    }
}

/// Checks `value` against the document's component schema `name`.
fn assert_fits(doc: &serde_json::Value, name: &str, value: &serde_json::Value) {
    let schema = serde_json::json!({
        "$ref": format!("#/components/schemas/{name}"),
        "components": doc["components"].clone(),
    });
    let validator = jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{name}: {e}"));
    let errors: Vec<String> = validator.iter_errors(value).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "{name} does not fit its documented schema: {errors:#?}\n{value:#}");
}

#[tokio::test]
async fn what_the_server_answers_fits_the_documented_schemas() {
    use common::{PAIR, SCRIBE, digest, id};
    use serde_json::json;
    let doc: serde_json::Value =
        serde_json::from_str(&tollgate_agent_server::openapi_json()).unwrap_or_else(|e| panic!("{e}"));
    let server = common::Server::start(common::Config::default()).await;

    let running = server.post("/v1/runs", json!({"input": "fresh"})).await;
    assert_fits(&doc, "Run", &running.body);
    let pair = server.waiting_run(PAIR, "two").await;
    assert_fits(&doc, "Run", &pair);
    let edited = server
        .post(
            &format!("/v1/runs/{}/decisions", id(&pair)),
            json!({"turn_digest": digest(&pair), "decisions": [
                {"call_id": "call_1", "action": "edit", "arguments": {"text": "c"}}
            ]}),
        )
        .await;
    assert_eq!(edited.body["pending"]["calls"][0]["decision"]["action"], "edit");
    assert_fits(&doc, "Run", &edited.body);
    let partial = server.waiting_run(PAIR, "partial").await;
    let denied = server
        .post(
            &format!("/v1/runs/{}/decisions", id(&partial)),
            json!({"turn_digest": digest(&partial), "decisions": [
                {"call_id": "call_1", "action": "deny", "reason": "no"},
            ]}),
        )
        .await;
    assert_fits(&doc, "Run", &denied.body);
    let responded = server
        .post(
            &format!("/v1/runs/{}/decisions", id(&partial)),
            json!({"turn_digest": digest(&partial), "wait": true, "decisions": [
                {"call_id": "call_2", "action": "respond", "result": "42"},
            ]}),
        )
        .await;
    assert_eq!(responded.body["status"], "completed");
    assert_fits(&doc, "Run", &responded.body);
    let scribe = server.waiting_run(SCRIBE, "cancel").await;
    let cancelled = server.post(&format!("/v1/runs/{}/cancel", id(&scribe)), json!({"reason": "x"})).await;
    assert_fits(&doc, "Run", &cancelled.body);

    assert_fits(&doc, "RunList", &server.get("/v1/runs?limit=2").await.body);
    assert_fits(&doc, "EventList", &server.get(&format!("/v1/runs/{}/events", id(&partial))).await.body);
    assert_fits(&doc, "AgentList", &server.get("/v1/agents").await.body);
    assert_fits(&doc, "ToolList", &server.get("/v1/tools").await.body);
    assert_fits(&doc, "ToolList", &server.get(&format!("/v1/tools?agent={SCRIBE}")).await.body);
    assert_fits(&doc, "PurgeResult", &server.post("/v1/purge", json!({"older_than": "30d"})).await.body);
    assert_fits(&doc, "Health", &server.get("/healthz").await.body);
    assert_fits(&doc, "Problem", &server.get("/v1/runs?limit=9999").await.body);
    assert_fits(&doc, "Problem", &server.get("/nowhere").await.body);
    // The checker is not vacuous.
    let schema = json!({"$ref": "#/components/schemas/Run", "components": doc["components"].clone()});
    let validator = jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{e}"));
    let mut wrong = cancelled.body.clone();
    wrong["status"] = json!("sleeping");
    assert!(!validator.is_valid(&wrong), "a value outside the documented set is caught");
    // Answers may grow optional fields (tollgate-agent-protocol: clients ignore what they do not know), so
    // their schemas are open; request bodies are closed, each decision action included.
    let item = json!({"$ref": "#/components/schemas/DecisionItem", "components": doc["components"].clone()});
    let item = jsonschema::validator_for(&item).unwrap_or_else(|e| panic!("{e}"));
    for body in [
        json!({"call_id": "c", "action": "approve"}),
        json!({"call_id": "c", "action": "edit", "arguments": {"x": 1}}),
        json!({"call_id": "c", "action": "deny"}),
        json!({"call_id": "c", "action": "respond", "result": "42"}),
    ] {
        assert!(item.is_valid(&body), "{body} fits DecisionItem");
    }
    assert!(!item.is_valid(&json!({"call_id": "c", "action": "approve", "surprise": 1})), "a closed request");
    assert!(!item.is_valid(&json!({"call_id": "c", "action": "launch"})), "an unknown action");
    server.stop().await;
}
