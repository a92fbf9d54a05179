//! `Tollgate::router_with`: the HTTP API inside an embedder's service, with tokens.

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
    let mut router = tollgate.router_with(&options);

    let (status, _) = call(&mut router, post("/v1/runs", None, serde_json::json!({"input": "pay"}))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, run) =
        call(&mut router, post("/v1/runs", Some("t-runner"), serde_json::json!({"input": "pay", "wait": true}))).await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    assert_eq!(run["created_by"], "app");
    let id = run["id"].as_str().unwrap_or_default().to_owned();
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
