//! Auth as docs/api.md says: 401 without a known token, 403 without the role, runners cancel only their own
//! runs, `forbid_self_approval`, the actor recorded on events, the public routes, and no public address
//! without tokens.

use crate::common::{Config, GUARDED, SCRIBE, Server, digest, id, tokens};
use serde_json::{Value, json};

const ALICE: Option<&str> = Some("alice-token"); // runner
const BOB: Option<&str> = Some("bob-token"); // approver
const CAROL: Option<&str> = Some("carol-token"); // runner + approver
const ROOT: Option<&str> = Some("root-token"); // admin

async fn start_as(server: &Server, token: Option<&str>, agent: &str, input: &str) -> Value {
    let reply =
        server.call("POST", "/v1/runs", token, Some(json!({"agent": agent, "input": input, "wait": true}))).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.body
}

#[tokio::test]
async fn tokens_and_roles() {
    let server = Server::start(Config { tokens: tokens(), ..Default::default() }).await;
    let before = server.run_count().await;

    // 401 before anything else: missing, unknown, malformed; even with a bad body.
    for token in [None, Some("nobody"), Some("")] {
        let reply = server.call("POST", "/v1/runs", token, Some(json!({"input": "x"}))).await;
        reply.assert_problem(401, "unauthorized");
        assert_eq!(reply.headers.get("www-authenticate").and_then(|v| v.to_str().ok()), Some("Bearer"));
        server.call("GET", "/v1/runs", token, None).await.assert_problem(401, "unauthorized");
        server.call("GET", "/v1/agents", token, None).await.assert_problem(401, "unauthorized");
        server.call("GET", "/metrics", token, None).await.assert_problem(401, "unauthorized");
    }
    let basic = server.client.get(server.url("/v1/runs")).basic_auth("alice", Some("alice-token")).send().await;
    assert_eq!(basic.map(|r| r.status().as_u16()).ok(), Some(401));
    server.call("POST", "/v1/runs", None, None).await.assert_problem(401, "unauthorized");
    assert_eq!(server.run_count().await, before, "nothing written");

    // Public routes.
    assert_eq!(server.get("/healthz").await.status, 200);
    assert_eq!(server.get("/openapi.json").await.status, 200);
    assert_eq!(server.get("/").await.status, 200);

    // Roles: an approver cannot start; a runner cannot decide or purge; only admin reads metrics.
    server.call("POST", "/v1/runs", BOB, Some(json!({"input": "x"}))).await.assert_problem(403, "forbidden");
    let run = start_as(&server, ALICE, SCRIBE, "from alice").await;
    assert_eq!(run["created_by"], "alice");
    let decide = format!("/v1/runs/{}/decisions", id(&run));
    let approve = json!({"turn_digest": digest(&run), "approve_all": true, "wait": true});
    server.call("POST", &decide, ALICE, Some(approve.clone())).await.assert_problem(403, "forbidden");
    server.call("POST", "/v1/purge", ALICE, Some(json!({}))).await.assert_problem(403, "forbidden");
    server.call("POST", "/v1/purge", BOB, None).await.assert_problem(403, "forbidden");
    server.call("GET", "/metrics", CAROL, None).await.assert_problem(403, "forbidden");
    assert_eq!(server.call("GET", "/metrics", ROOT, None).await.status, 200);
    assert_eq!(server.call("POST", "/v1/purge", ROOT, None).await.status, 200);

    // Every role reads every run.
    for token in [ALICE, BOB, CAROL, ROOT] {
        assert_eq!(server.call("GET", &format!("/v1/runs/{}", id(&run)), token, None).await.status, 200);
        assert_eq!(server.call("GET", "/v1/runs", token, None).await.status, 200);
        assert_eq!(server.call("GET", &format!("/v1/runs/{}/events", id(&run)), token, None).await.status, 200);
        assert_eq!(server.call("GET", "/v1/tools", token, None).await.status, 200);
    }

    // The approver decides; the decision and the resume name who did it.
    let done = server.call("POST", &decide, BOB, Some(approve)).await;
    assert_eq!(done.body["status"], "completed", "{}", done.body);
    let events = server.call("GET", &format!("/v1/runs/{}/events", id(&run)), BOB, None).await.body["events"].clone();
    let actor = |kind: &str| {
        events.as_array().and_then(|e| e.iter().find(|e| e["kind"] == kind)).map(|e| e["data"]["actor"].clone())
    };
    assert_eq!(actor("run_started"), Some(json!("alice")));
    assert_eq!(actor("decision"), Some(json!("bob")));
    assert_eq!(actor("run_resumed"), Some(json!("bob")));
    server.stop().await;
}

#[tokio::test]
async fn runners_cancel_only_their_own_runs() {
    let server = Server::start(Config { tokens: tokens(), ..Default::default() }).await;
    let alices = start_as(&server, ALICE, SCRIBE, "alice's").await;
    let carols = start_as(&server, CAROL, SCRIBE, "carol's").await;
    let cancel = |run: &Value| format!("/v1/runs/{}/cancel", id(run));

    server.call("POST", &cancel(&carols), ALICE, None).await.assert_problem(403, "forbidden");
    server.call("POST", &cancel(&alices), BOB, None).await.assert_problem(403, "forbidden");
    let own = server.call("POST", &cancel(&alices), ALICE, None).await;
    assert_eq!(own.body["status"], "cancelled", "{}", own.body);
    let by_admin = server.call("POST", &cancel(&carols), ROOT, Some(json!({"reason": "admin"}))).await;
    assert_eq!(by_admin.body["status"], "cancelled", "{}", by_admin.body);
    let events = server.call("GET", &format!("/v1/runs/{}/events", id(&carols)), ROOT, None).await;
    let last = events.body["events"].as_array().and_then(|e| e.last().cloned()).unwrap_or_default();
    assert_eq!(last["data"], json!({"actor": "root", "reason": "admin"}));
    server.stop().await;
}

#[tokio::test]
async fn forbid_self_approval() {
    let server = Server::start(Config { tokens: tokens(), ..Default::default() }).await;
    let run = start_as(&server, CAROL, GUARDED, "mine").await;
    let decide = format!("/v1/runs/{}/decisions", id(&run));
    let approve = json!({"turn_digest": digest(&run), "approve_all": true, "wait": true});
    server.call("POST", &decide, CAROL, Some(approve.clone())).await.assert_problem(403, "forbidden");
    assert_eq!(server.tools.write.call_count(), 0);
    let by_bob = server.call("POST", &decide, BOB, Some(approve)).await;
    assert_eq!(by_bob.body["status"], "completed", "{}", by_bob.body);

    // Without self-approval forbidden, the starter may decide.
    let open = start_as(&server, CAROL, SCRIBE, "mine too").await;
    let own = server
        .call(
            "POST",
            &format!("/v1/runs/{}/decisions", id(&open)),
            CAROL,
            Some(json!({"turn_digest": digest(&open), "approve_all": true})),
        )
        .await;
    assert_eq!(own.status, 200, "{}", own.body);
    server.stop().await;
}

#[tokio::test]
async fn no_tokens_refuses_a_public_address() {
    let runtime = Server::start(Config::default()).await;
    let options = tollgate_agent_server::ServerOptions {
        addr: "0.0.0.0:0".parse().unwrap_or_else(|e| panic!("{e}")),
        ..Default::default()
    };
    let refused = tollgate_agent_server::serve(runtime.runtime.clone(), options, std::future::ready(())).await;
    assert!(matches!(refused, Err(tollgate_agent_server::ServerError::NoAuthOnPublicAddress(_))), "{refused:?}");
    runtime.stop().await;
}
