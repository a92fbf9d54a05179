//! Grants through a real socket (V2.md section 1): made directly, listed, read, revoked; a matching call
//! passes the gate without a person and its `tool_started` names the grant; a revocation is honoured by
//! the next gate check, on another node too; `apply_to_waiting` decides each waiting run once however
//! many requests race; bad input gets its status and changes nothing.

use crate::common::{Backend, Config, PAIR, Server, backends, id, tokens};
use serde_json::{Value, json};
use std::sync::Arc;
use tollgate_agent_core::RunId;
use tollgate_agent_store::{PostgresStore, ScratchSchema};
use tollgate_agent_testkit::postgres_url;

async fn make_grant(server: &Server, body: Value) -> Value {
    let reply = server.post("/v1/grants", body).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.body
}

async fn start(server: &Server, agent: &str, input: &str) -> Value {
    let reply = server.post("/v1/runs", json!({"agent": agent, "input": input, "wait": true})).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.body
}

/// The data of every `tool_started` event of a run.
async fn tool_starts(server: &Server, run: &RunId) -> Vec<Value> {
    let events = server.get(&format!("/v1/runs/{run}/events")).await;
    let events = events.body["events"].as_array().cloned().unwrap_or_default();
    events.into_iter().filter(|e| e["kind"] == "tool_started").map(|e| e["data"].clone()).collect()
}

#[tokio::test]
async fn a_grant_lets_matching_calls_through_and_a_revocation_stops_them() {
    for backend in backends() {
        let server = Server::start(Config { backend: backend.clone(), ..Config::default() }).await;
        // Only `write` with text `a`: the pair's first call passes, the second still asks.
        let grant = make_grant(
            &server,
            json!({"agent": PAIR, "tool": "write", "match": {"/text": "a"}, "ttl": "1h", "reason": "notes are fine"}),
        )
        .await;
        let grant_id = grant["id"].as_str().unwrap_or_default().to_owned();
        assert_eq!(grant["scope"], "agent", "{grant}");
        assert_eq!(grant["uses"], 0, "{grant}");
        assert_eq!(grant["created_by"], "local");
        assert!(grant["revoked_at"].is_null() && grant["run_id"].is_null(), "{grant}");

        let run = start(&server, PAIR, "x").await;
        assert_eq!(run["status"], "waiting_for_approval", "{backend:?}: {run}");
        let calls = run["pending"]["calls"].as_array().cloned().unwrap_or_default();
        assert_eq!(calls[0]["state"], "allowed", "{calls:?}");
        assert_eq!(calls[0]["grant"], grant_id.as_str(), "{calls:?}");
        assert_eq!(calls[0]["takes_decision"], false);
        assert_eq!(calls[1]["state"], "waiting", "{calls:?}");
        assert!(calls[1]["grant"].is_null());
        assert_eq!(calls[1]["suggested_match"], json!({"/text": "b"}), "the exact arguments: {calls:?}");
        let done = server.approve_and_wait(&run).await;
        assert_eq!(done.body["status"], "completed", "{}", done.body);
        assert_eq!(server.tools.write.call_count(), 2, "{backend:?}");
        let starts = tool_starts(&server, &id(&run)).await;
        assert_eq!(starts.len(), 2, "{starts:?}");
        assert_eq!(starts[0]["grant"], grant_id.as_str(), "{starts:?}");
        assert_eq!(starts[0]["gate"], "ask", "a granted call keeps its gate: {starts:?}");
        assert!(starts[1]["grant"].is_null() && starts[1].get("grant").is_some(), "null, not absent: {starts:?}");
        let read = server.get(&format!("/v1/grants/{grant_id}")).await;
        assert_eq!(read.status, 200, "{}", read.body);
        assert_eq!(read.body["uses"], 1, "{}", read.body);

        // A grant on any arguments: the whole turn passes, the run completes without a person.
        let any = make_grant(&server, json!({"agent": PAIR, "tool": "write"})).await;
        let write_entry = |tools: &Value| {
            tools["tools"].as_array().and_then(|t| t.iter().find(|t| t["name"] == "write").cloned()).unwrap_or_default()
        };
        let listed = write_entry(&server.get(&format!("/v1/tools?agent={PAIR}")).await.body);
        assert_eq!(listed["gate"], "allow", "{listed}");
        assert_eq!(listed["why"], format!("grant {}", any["id"].as_str().unwrap_or_default()), "{listed}");
        let run = start(&server, PAIR, "y").await;
        assert_eq!(run["status"], "completed", "{backend:?}: {run}");
        let starts = tool_starts(&server, &id(&run)).await;
        assert!(starts.iter().all(|s| !s["grant"].is_null()), "{starts:?}");

        // Revoked: both grants stop at the next gate check.
        for grant in [&grant_id, any["id"].as_str().unwrap_or_default()] {
            let revoked = server.call("DELETE", &format!("/v1/grants/{grant}"), None, None).await;
            assert_eq!(revoked.status, 200, "{}", revoked.body);
            assert_eq!(revoked.body["revoked_by"], "local", "{}", revoked.body);
            assert!(revoked.body["revoked_at"].is_string(), "{}", revoked.body);
            server.call("DELETE", &format!("/v1/grants/{grant}"), None, None).await.assert_problem(409, "conflict");
        }
        let listed = write_entry(&server.get(&format!("/v1/tools?agent={PAIR}")).await.body);
        assert_eq!(listed["gate"], "ask", "revoked: the tool's own gate again: {listed}");
        let run = start(&server, PAIR, "z").await;
        let calls = run["pending"]["calls"].as_array().cloned().unwrap_or_default();
        assert!(calls.iter().all(|c| c["state"] == "waiting"), "{backend:?}: {calls:?}");

        // Listing: active only by default, every grant with `active=false`, newest first.
        let active = server.get("/v1/grants").await;
        assert_eq!(active.status, 200, "{}", active.body);
        assert_eq!(active.body["grants"], json!([]), "{}", active.body);
        let all = server.get(&format!("/v1/grants?active=false&agent={PAIR}")).await;
        let ids: Vec<&str> = all.body["grants"]
            .as_array()
            .map(|g| g.iter().filter_map(|g| g["id"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(ids, [any["id"].as_str().unwrap_or_default(), grant_id.as_str()], "{}", all.body);
        let page = server.get("/v1/grants?active=false&limit=1").await;
        let next = page.body["next_cursor"].as_str().unwrap_or_default().to_owned();
        let rest = server.get(&format!("/v1/grants?active=false&limit=1&cursor={next}")).await;
        assert_eq!(rest.body["grants"][0]["id"], grant_id.as_str(), "{}", rest.body);
        server.stop().await;
    }
}

#[tokio::test]
async fn bad_grants_are_refused_and_change_nothing() {
    let server = Server::start(Config::default()).await;
    let cases = [
        (json!({"agent": "nobody", "tool": "write"}), 404, "not-found"),
        (json!({"agent": PAIR, "tool": "absent"}), 404, "not-found"),
        (json!({"agent": PAIR, "tool": "write", "match": {"text": "a"}}), 422, "invalid-request"),
        (json!({"agent": PAIR, "tool": "write", "ttl": "40d"}), 422, "invalid-request"),
        (json!({"agent": PAIR, "tool": "write", "ttl": "soon"}), 422, "invalid-request"),
        (
            json!({"agent": PAIR, "tool": "write", "run_id": "01900000-0000-7000-8000-000000000000"}),
            422,
            "invalid-request",
        ),
        (json!({"agent": PAIR, "tool": "write", "scope": "run"}), 422, "invalid-request"),
        (
            json!({"agent": PAIR, "tool": "write", "scope": "run", "run_id": "01900000-0000-7000-8000-000000000000"}),
            404,
            "not-found",
        ),
        (json!({"agent": PAIR, "tool": "write", "colour": "red"}), 422, "invalid-request"),
        (json!({"tool": "write"}), 422, "invalid-request"),
    ];
    for (body, status, slug) in cases {
        let reply = server.post("/v1/grants", body.clone()).await;
        assert_eq!(reply.status, status, "{body}: {}", reply.body);
        reply.assert_problem(status, slug);
    }
    let listed = server.get("/v1/grants?active=false").await;
    assert_eq!(listed.body["grants"], json!([]), "nothing was made: {}", listed.body);
    server.get("/v1/grants/01900000-0000-7000-8000-000000000000").await.assert_problem(404, "not-found");
    server.get("/v1/grants/nope").await.assert_problem(404, "not-found");
    server.get("/v1/grants?limit=0").await.assert_problem(422, "invalid-request");
    server.get("/v1/grants?cursor=x").await.assert_problem(422, "invalid-request");
    server.stop().await;
}

#[tokio::test]
async fn only_approvers_make_and_revoke_grants() {
    let server = Server::start(Config { tokens: tokens(), ..Config::default() }).await;
    let body = json!({"agent": PAIR, "tool": "write"});
    let refused = server.call("POST", "/v1/grants", Some("alice-token"), Some(body.clone())).await;
    refused.assert_problem(403, "forbidden");
    let made = server.call("POST", "/v1/grants", Some("bob-token"), Some(body)).await;
    assert_eq!(made.status, 201, "{}", made.body);
    assert_eq!(made.body["created_by"], "bob");
    let grant = made.body["id"].as_str().unwrap_or_default().to_owned();
    // Reading needs a token of any role; revoking the approver role.
    let read = server.call("GET", &format!("/v1/grants/{grant}"), Some("alice-token"), None).await;
    assert_eq!(read.status, 200, "{}", read.body);
    server.call("GET", "/v1/grants", None, None).await.assert_problem(401, "unauthorized");
    let path = format!("/v1/grants/{grant}");
    server.call("DELETE", &path, Some("alice-token"), None).await.assert_problem(403, "forbidden");
    let revoked = server.call("DELETE", &path, Some("carol-token"), None).await;
    assert_eq!(revoked.body["revoked_by"], "carol", "{}", revoked.body);
    server.stop().await;
}

#[tokio::test]
async fn apply_to_waiting_decides_each_cleared_run_once_however_many_requests_race() {
    for backend in backends() {
        let server = Arc::new(Server::start(Config { backend: backend.clone(), ..Config::default() }).await);
        let mut waiting = Vec::new();
        for i in 0..5 {
            waiting.push(id(&start(&server, PAIR, &format!("run {i}")).await));
        }
        // 20 concurrent requests, each a grant that clears every waiting run.
        let requests = (0..20).map(|_| {
            let server = Arc::clone(&server);
            tokio::spawn(async move {
                make_grant(&server, json!({"agent": PAIR, "tool": "write", "apply_to_waiting": true})).await
            })
        });
        let mut applied: Vec<RunId> = Vec::new();
        for request in requests {
            let grant = request.await.unwrap_or_else(|e| panic!("{e}"));
            let ids = grant["applied_to"].as_array().cloned().unwrap_or_default();
            applied.extend(ids.iter().filter_map(Value::as_str).map(RunId::from));
        }
        applied.sort();
        let mut expected = waiting.clone();
        expected.sort();
        assert_eq!(applied, expected, "{backend:?}: each run applied once, by one request");
        for run in &waiting {
            let done = server.settled(run).await;
            assert_eq!(done["status"], "completed", "{backend:?}: {done}");
            let kinds = server.event_kinds(run).await;
            assert_eq!(kinds.iter().filter(|k| *k == "run_resumed").count(), 1, "{backend:?}: {kinds:?}");
            assert_eq!(kinds.iter().filter(|k| *k == "decision").count(), 2, "{backend:?}: {kinds:?}");
        }
        assert_eq!(server.tools.write.call_count(), 10, "{backend:?}: two calls per run, once each");
        match Arc::try_unwrap(server) {
            Ok(server) => server.stop().await,
            Err(_) => panic!("a request still holds the server"),
        }
    }
}

#[tokio::test]
async fn a_revocation_on_one_node_is_honoured_by_the_next_gate_check_on_another() {
    let Some(base) = postgres_url() else { return };
    let schema = ScratchSchema::create(&base, "tollgate_grants").await.unwrap_or_else(|e| panic!("{e}"));
    let url = schema.url();
    let open = || async { PostgresStore::open(&url).await.unwrap_or_else(|e| panic!("{e}")) };
    let config = |store: PostgresStore| Config {
        backend: Backend::Postgres(url.clone()),
        store: Some(Arc::new(store)),
        ..Config::default()
    };
    let a = Server::start(config(open().await)).await;
    let b = Server::start(config(open().await)).await;
    let grant = make_grant(&a, json!({"agent": PAIR, "tool": "write"})).await;
    let run = start(&b, PAIR, "on b").await;
    assert_eq!(run["status"], "completed", "node B reads node A's grant: {run}");
    let revoked =
        a.call("DELETE", &format!("/v1/grants/{}", grant["id"].as_str().unwrap_or_default()), None, None).await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    let run = start(&b, PAIR, "on b again").await;
    assert_eq!(run["status"], "waiting_for_approval", "node B honours node A's revocation: {run}");
    let read = b.get(&format!("/v1/grants/{}", grant["id"].as_str().unwrap_or_default())).await;
    assert_eq!(read.body["uses"], 2, "{}", read.body);
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn approve_and_remember_makes_the_grant_with_the_decision() {
    for backend in backends() {
        let server = Server::start(Config { backend: backend.clone(), ..Config::default() }).await;
        let run = start(&server, PAIR, "x").await;
        let decide = |body: Value| {
            let path = format!("/v1/runs/{}/decisions", id(&run));
            let server = &server;
            async move { server.post(&path, body).await }
        };
        let digest = crate::common::digest(&run);
        // Refused whole, nothing recorded: remember on a deny, a bad pointer, a ttl over max_ttl.
        let refusals = [
            json!({"turn_digest": digest, "decisions": [
                {"action": "approve", "call_id": "call_1", "remember": {"match": {"text": "a"}}}]}),
            json!({"turn_digest": digest, "decisions": [
                {"action": "approve", "call_id": "call_1", "remember": {"ttl": "90d"}}]}),
            json!({"turn_digest": digest, "decisions": [
                {"action": "approve", "call_id": "call_1", "remember": {"ttl": "soon"}}]}),
            json!({"turn_digest": digest, "decisions": [
                {"action": "deny", "call_id": "call_1", "remember": {}}]}),
        ];
        for body in refusals {
            let reply = decide(body.clone()).await;
            assert_eq!(reply.status, 422, "{backend:?} {body}: {}", reply.body);
        }
        let still = server.get(&format!("/v1/runs/{}", id(&run))).await;
        assert_eq!(still.body["version"], run["version"], "nothing recorded: {}", still.body);
        assert_eq!(server.get("/v1/grants?active=false").await.body["grants"], json!([]));

        // Approve call_1 and remember it (the suggested pattern: the exact arguments), approve call_2.
        let reply = decide(json!({"turn_digest": digest, "wait": true, "decisions": [
            {"action": "approve", "call_id": "call_1", "remember": {"reason": "a is fine"}},
            {"action": "approve", "call_id": "call_2"}]}))
        .await;
        assert_eq!(reply.body["status"], "completed", "{}", reply.body);
        let grants = server.get("/v1/grants").await.body["grants"].clone();
        assert_eq!(grants.as_array().map(Vec::len), Some(1), "{grants}");
        let grant = &grants[0];
        assert_eq!(grant["match"], json!({"/text": "a"}), "{grant}");
        assert_eq!(grant["reason"], "a is fine");
        assert_eq!(grant["uses"], 0, "the decision that made it is not a use: {grant}");
        let events = server.get(&format!("/v1/runs/{}/events", id(&run))).await.body["events"].clone();
        let decisions: Vec<&Value> =
            events.as_array().map(|e| e.iter().filter(|e| e["kind"] == "decision").collect()).unwrap_or_default();
        assert_eq!(decisions[0]["data"]["grant"], grant["id"], "{decisions:?}");
        assert!(decisions[1]["data"].get("grant").is_none(), "{decisions:?}");
        // The next run's `a` passes; its `b` still asks.
        let next = start(&server, PAIR, "y").await;
        let calls = next["pending"]["calls"].clone();
        assert_eq!(calls[0]["grant"], grant["id"], "{calls}");
        assert_eq!(calls[1]["state"], "waiting", "{calls}");
        server.stop().await;
    }
}

#[tokio::test]
async fn a_revocation_racing_runs_at_the_gate_is_all_or_nothing_per_call() {
    for backend in backends() {
        let server = Arc::new(Server::start(Config { backend: backend.clone(), ..Config::default() }).await);
        let grant = make_grant(&server, json!({"agent": PAIR, "tool": "write"})).await;
        let grant_id = grant["id"].as_str().unwrap_or_default().to_owned();
        // Eight runs reach the gate while the grant is revoked.
        let runs: Vec<_> = (0..8)
            .map(|i| {
                let server = Arc::clone(&server);
                tokio::spawn(async move { start(&server, PAIR, &format!("race {i}")).await })
            })
            .collect();
        let revoked = server.call("DELETE", &format!("/v1/grants/{grant_id}"), None, None).await;
        assert_eq!(revoked.status, 200, "{}", revoked.body);
        let mut passed = 0;
        for run in runs {
            let run = run.await.unwrap_or_else(|e| panic!("{e}"));
            let starts = tool_starts(&server, &id(&run)).await;
            match run["status"].as_str() {
                // Passed by the grant: each call that ran names it (a revocation between the hold and
                // the resume makes the calls their error results instead: none ran).
                Some("completed") => {
                    passed += starts.len();
                    assert!(starts.iter().all(|s| s["grant"] == grant_id.as_str()), "{starts:?}");
                }
                // Held: nothing ran, each call asks or names the grant it had at the gate.
                Some("waiting_for_approval") => assert!(starts.is_empty(), "{starts:?}"),
                other => panic!("{backend:?}: a run ended {other:?}: {run}"),
            }
        }
        // Every call the grant let through is counted, and none passes after the revocation answered.
        let read = server.get(&format!("/v1/grants/{grant_id}")).await;
        assert_eq!(read.body["uses"], passed, "{}", read.body);
        let after = start(&server, PAIR, "after").await;
        assert_eq!(after["status"], "waiting_for_approval", "{backend:?}: {after}");
        let calls = after["pending"]["calls"].as_array().cloned().unwrap_or_default();
        assert!(calls.iter().all(|c| c["grant"].is_null()), "{calls:?}");
        match Arc::try_unwrap(server) {
            Ok(server) => server.stop().await,
            Err(_) => panic!("a request still holds the server"),
        }
    }
}
