//! `Tollgate::router_with`: the HTTP API inside an embedder's service, with tokens, and its webhooks.

use super::*;
use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode};
use tollgate::server::{ApiToken, Role, ServerOptions};
use tower_service::Service;

async fn call(router: &mut tollgate::server::Router, request: Request<Body>) -> (StatusCode, serde_json::Value) {
    let response = router.call(request).await.unwrap_or_else(|e| match e {});
    let status = response.status();
    let bytes = to_bytes(response.into_body(), 1 << 20).await.unwrap_or_else(|e| panic!("{e}"));
    (status, serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null))
}

fn post(uri: &str, token: Option<&str>, body: serde_json::Value) -> Request<Body> {
    let mut request = Request::post(uri).header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    request.body(Body::from(body.to_string())).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn the_mounted_api_asks_for_tokens_and_keeps_roles_apart() {
    let pay = Pay::default();
    let tollgate = tollgate_on("sqlite::memory:", &pay).await;
    let options = ServerOptions {
        tokens: vec![
            ApiToken { name: "app".into(), token: "t-runner".into(), roles: vec![Role::Runner] },
            ApiToken { name: "lead".into(), token: "t-approver".into(), roles: vec![Role::Approver] },
        ],
        ..ServerOptions::default()
    };
    let mut router = tollgate.router_with(&options).unwrap_or_else(|e| panic!("{e}"));

    let (status, _) = call(&mut router, post("/v1/runs", None, serde_json::json!({"input": "pay"}))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, run) =
        call(&mut router, post("/v1/runs", Some("t-runner"), serde_json::json!({"input": "pay", "wait": true}))).await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    assert_eq!(run["created_by"], "app");
    let id = tollgate::RunId::from(run["id"].as_str().unwrap_or_default());
    let digest = run["pending"]["turn_digest"].clone();

    // The runner may not decide; the approver may, and the library sees the decision at once.
    let decide = |token| {
        post(
            &format!("/v1/runs/{id}/decisions"),
            Some(token),
            serde_json::json!({"turn_digest": digest, "approve_all": true}),
        )
    };
    let (status, _) = call(&mut router, decide("t-runner")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, decided) = call(&mut router, decide("t-approver")).await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    let run = tollgate.wait(&id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.status, tollgate::RunStatus::Completed);
    assert_eq!(pay.runs.load(Ordering::SeqCst), 3);
}

/// The webhooks given to `router_with` are delivered while the embedder serves the router: a run
/// decided through it reaches the receiver, signed; a URL that is not one is refused; `shutdown` stops
/// the deliveries.
#[tokio::test]
async fn the_mounted_api_delivers_its_webhooks() {
    use tollgate::server::WebhookTarget;
    use wiremock::matchers::{header, method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let receiver = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/hook"))
        .and(header("x-tollgate-event", "run_completed"))
        .respond_with(ResponseTemplate::new(204))
        .mount(&receiver)
        .await;
    let pay = Pay::default();
    let tollgate = tollgate_on("sqlite::memory:", &pay).await;
    let hook = |url: String| WebhookTarget { url, secret: "s".into(), events: vec![tollgate::EventKind::RunCompleted] };
    let refused =
        tollgate.router_with(&ServerOptions { webhooks: vec![hook("not a url".into())], ..Default::default() });
    assert!(matches!(refused, Err(tollgate::server::ServerError::Options(_))), "{:?}", refused.err());
    let options = ServerOptions { webhooks: vec![hook(format!("{}/hook", receiver.uri()))], ..Default::default() };
    let mut router = tollgate.router_with(&options).unwrap_or_else(|e| panic!("{e}"));

    let (status, run) =
        call(&mut router, post("/v1/runs", None, serde_json::json!({"input": "pay", "wait": true}))).await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    let id = run["id"].as_str().unwrap_or_default().to_owned();
    let decision = serde_json::json!({"turn_digest": run["pending"]["turn_digest"], "approve_all": true, "wait": true});
    let (status, done) = call(&mut router, post(&format!("/v1/runs/{id}/decisions"), None, decision)).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    let mut delivered = Vec::new();
    for _ in 0..200 {
        delivered = receiver.received_requests().await.unwrap_or_default();
        if !delivered.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(delivered.len(), 1, "run_completed, once");
    let body: serde_json::Value = serde_json::from_slice(&delivered[0].body).unwrap_or_default();
    assert_eq!(body["run_id"], id.as_str());
    assert_eq!(body["event"]["kind"], "run_completed");
    let signature = delivered[0].headers.get("x-tollgate-signature").and_then(|v| v.to_str().ok());
    assert_eq!(signature, Some(tollgate::server::signature("s", &delivered[0].body).as_str()));
    tollgate.shutdown().await;
}
