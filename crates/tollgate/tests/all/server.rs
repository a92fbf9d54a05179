//! `Tollgate::router_with`: the HTTP API inside an embedder's service, with tokens, its webhooks and its
//! notifications.

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

/// What `receiver` was sent, once it was sent something (or after 10 s).
async fn first_requests(receiver: &wiremock::MockServer) -> Vec<wiremock::Request> {
    let mut received = Vec::new();
    for _ in 0..200 {
        received = receiver.received_requests().await.unwrap_or_default();
        if !received.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    received
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
    let delivered = first_requests(&receiver).await;
    assert_eq!(delivered.len(), 1, "run_completed, once");
    let body: serde_json::Value = serde_json::from_slice(&delivered[0].body).unwrap_or_default();
    assert_eq!(body["run_id"], id.as_str());
    assert_eq!(body["event"]["kind"], "run_completed");
    let signature = delivered[0].headers.get("x-tollgate-signature").and_then(|v| v.to_str().ok());
    assert_eq!(signature, Some(tollgate::server::signature("s", &delivered[0].body).as_str()));
    tollgate.shutdown().await;
}

/// The notifiers given to `router_with` are told while the embedder serves the router: a run that waits
/// reaches the Slack receiver with signed links under the embedder's `public_url`, and the Approve link,
/// followed through the router, decides the call as the notifier's actor. Notifiers without a link secret
/// are refused.
#[tokio::test]
async fn the_mounted_api_sends_its_notifications_and_takes_their_links() {
    use tollgate::server::{LinkSecret, Notifier, SlackNotifier, Transport};
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let slack = MockServer::start().await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(200).set_body_string("ok")).mount(&slack).await;
    let pay = Pay::default();
    let tollgate = tollgate_on("sqlite::memory:", &pay).await;
    let transport = SlackNotifier::new(format!("{}/hook", slack.uri()), std::time::Duration::from_secs(5));
    let notifier = Notifier {
        name: "ops".into(),
        transport: Transport::Slack(transport.unwrap_or_else(|e| panic!("{e}"))),
        actor: "lead".into(),
        agents: vec!["bank".into()],
    };
    let refused = tollgate.router_with(&ServerOptions { notifiers: vec![notifier.clone()], ..Default::default() });
    assert!(matches!(refused, Err(tollgate::server::ServerError::Options(_))), "{:?}", refused.err());
    let secret = LinkSecret::new(b"a link secret of at least 32 bytes".to_vec()).unwrap_or_else(|e| panic!("{e}"));
    let options = ServerOptions {
        notifiers: vec![notifier],
        link_secret: Some(secret),
        public_url: Some("https://app.example.com/tollgate".into()),
        ..Default::default()
    };
    let mut router = tollgate.router_with(&options).unwrap_or_else(|e| panic!("{e}"));
    tollgate.deliveries_positioned().await;

    let (status, run) =
        call(&mut router, post("/v1/runs", None, serde_json::json!({"input": "pay", "wait": true}))).await;
    assert_eq!((status, run["status"].as_str()), (StatusCode::CREATED, Some("waiting_for_approval")), "{run}");
    let told = first_requests(&slack).await;
    assert_eq!(told.len(), 1, "one message for the waiting run");
    let message = String::from_utf8_lossy(&told[0].body).into_owned();
    let prefix = "https://app.example.com/tollgate/approve/";
    let links: Vec<&str> =
        message.match_indices(prefix).filter_map(|(at, _)| message[at + prefix.len()..].split('"').next()).collect();
    assert!(!links.is_empty(), "signed links under the public URL: {message}");

    // Each Approve link of the held turn, followed through the embedder's router (as its public URL maps
    // `/tollgate/approve/...` to the router's `/approve/...`); the form's POST decides.
    let id = tollgate::RunId::from(run["id"].as_str().unwrap_or_default());
    for token in links.iter().step_by(2) {
        let request = Request::post(format!("/approve/{token}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::empty())
            .unwrap_or_else(|e| panic!("{e}"));
        let response = router.call(request).await.unwrap_or_else(|e| match e {});
        assert_eq!(response.status(), StatusCode::OK);
    }
    let done = tollgate.wait(&id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.status, tollgate::RunStatus::Completed, "{done:?}");
    let request = Request::get(format!("/v1/runs/{id}/events")).body(Body::empty()).unwrap_or_else(|e| panic!("{e}"));
    let (status, events) = call(&mut router, request).await;
    assert_eq!(status, StatusCode::OK);
    let decided: Vec<_> =
        events["events"].as_array().into_iter().flatten().filter(|e| e["kind"] == "decision").collect();
    assert!(!decided.is_empty() && decided.iter().all(|e| e["data"]["actor"] == "lead"), "{events}");
    tollgate.shutdown().await;
}
