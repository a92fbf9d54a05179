//! Every endpoint of docs/api.md through a real socket: the success cases and the documented errors.

use crate::common;
use tollgate_agent_core::RunId;

use crate::common::{Config, GUARDED, PAIR, SCRIBE, Server, backends, digest, id};
use serde_json::{Value, json};

#[tokio::test]
async fn approve_cycle_with_wait_on_every_backend() {
    for backend in backends() {
        let server = Server::start(Config { backend: backend.clone(), ..Default::default() }).await;
        let run = server.waiting_run(SCRIBE, "hello").await;
        assert_eq!(run["agent"], SCRIBE);
        assert_eq!(run["created_by"], "local");
        assert_eq!(run["iterations"], 1);
        assert!(digest(&run).starts_with("sha256:") && digest(&run).len() == 71, "{backend:?}: {run}");
        let calls = run["pending"]["calls"].as_array().cloned().unwrap_or_default();
        let summary: Vec<(Value, Value, Value)> =
            calls.iter().map(|c| (c["tool"].clone(), c["gate"].clone(), c["decision"].clone())).collect();
        assert_eq!(
            summary,
            vec![
                (json!("write"), json!("ask"), Value::Null),
                (json!("list"), json!("allow"), Value::Null),
                (json!("nuke"), json!("forbid"), Value::Null),
            ],
            "{backend:?}: every call of the held turn is listed"
        );
        assert_eq!(calls[0]["preview"], "write a note");
        assert_eq!(calls[0]["arguments"], json!({"text": "hello"}));
        assert_eq!(calls[0]["in_doubt"], false);
        assert_eq!(server.tools.write.call_count(), 0, "nothing runs before the decision");

        let decided = server
            .post(
                &format!("/v1/runs/{}/decisions", id(&run)),
                json!({"turn_digest": digest(&run), "decisions": [{"call_id": "call_1", "action": "approve"}], "wait": true}),
            )
            .await;
        assert_eq!(decided.status, 200, "{backend:?}: {}", decided.body);
        assert_eq!(decided.body["status"], "completed", "{backend:?}");
        assert_eq!(decided.body["output"], "done");
        assert_eq!(decided.body["termination_reason"], "completed");
        assert_eq!(decided.body["pending"], Value::Null);
        assert!(decided.body["finished_at"].is_string());
        assert_eq!(server.tools.write.call_count(), 1);
        assert_eq!(server.tools.list.call_count(), 1, "allow-gated calls run after the decision");
        assert_eq!(server.tools.nuke.call_count(), 0, "forbidden calls never run");

        let events = server.get(&format!("/v1/runs/{}/events", id(&run))).await;
        assert_eq!(events.status, 200);
        let events = events.body["events"].as_array().cloned().unwrap_or_default();
        let decision = events.iter().find(|e| e["kind"] == "decision").cloned().unwrap_or_default();
        assert_eq!(decision["data"], json!({"action": "approve", "call_id": "call_1", "actor": "local"}));
        let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
        assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
        assert!(events.iter().all(|e| e["hash"].as_str().is_some_and(|h| h.len() == 64)));
        let after = server.get(&format!("/v1/runs/{}/events?after=3", id(&run))).await;
        assert_eq!(after.body["events"][0]["seq"], 4, "`after` skips what the client has");
        server.stop().await;
    }
}

#[tokio::test]
async fn create_run_answers_201_at_once_or_when_settled() {
    let server = Server::start(Config::default()).await;
    let reply = server.post("/v1/runs", json!({"input": "no wait"})).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert_eq!(reply.body["agent"], SCRIBE, "the first agent is the default");
    assert_eq!(reply.body["status"], "queued", "without wait the run is answered as created, queued for a worker");
    let location = reply.headers.get("location").and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert_eq!(location, format!("/v1/runs/{}", id(&reply.body)));
    let settled = server.settled(&id(&reply.body)).await;
    assert_eq!(settled["status"], "waiting_for_approval");

    let null_agent = server.post("/v1/runs", json!({"agent": null, "input": "x", "wait": null})).await;
    assert_eq!(null_agent.status, 201, "null means absent: {}", null_agent.body);
    assert_eq!(null_agent.body["agent"], SCRIBE);

    server.post("/v1/runs", json!({"agent": "nobody", "input": "x"})).await.assert_problem(404, "not-found");
    server.post("/v1/runs", json!({"input": ""})).await.assert_problem(422, "invalid-request");
    server.post("/v1/runs", json!({"agent": SCRIBE})).await.assert_problem(422, "invalid-request");
    server.post("/v1/runs", json!({"input": null})).await.assert_problem(422, "invalid-request");
    server.stop().await;
}

#[tokio::test]
async fn metadata_given_at_start_is_shown_on_the_run_and_reaches_its_tools() {
    for backend in backends() {
        let server = Server::start(Config { backend: backend.clone(), ..Default::default() }).await;
        let metadata = json!({"customer": "acme", "tenant": {"id": 7, "tags": ["eu"]}});
        let body = json!({"agent": SCRIBE, "input": "hello", "metadata": metadata, "wait": true});
        let reply = server.post("/v1/runs", body).await;
        assert_eq!(reply.status, 201, "{backend:?}: {}", reply.body);
        assert_eq!(reply.body["metadata"], metadata, "{backend:?}: shown on the run");
        let run = reply.body;
        assert_eq!(server.get(&format!("/v1/runs/{}", id(&run))).await.body["metadata"], metadata);
        let listed = server.get("/v1/runs?status=waiting_for_approval").await;
        assert_eq!(listed.body["runs"][0]["metadata"], metadata, "{backend:?}: and in the list");

        let decided = server.approve_and_wait(&run).await;
        assert_eq!(decided.body["status"], "completed", "{backend:?}: {}", decided.body);
        assert_eq!(decided.body["metadata"], metadata);
        // The held call and the allow-gated one both ran after the resume, each seeing the metadata.
        let expected = tollgate_agent_core::Metadata::try_from(metadata.clone()).unwrap_or_else(|e| panic!("{e}"));
        let seen: Vec<_> = [server.tools.write.contexts(), server.tools.list.contexts()]
            .concat()
            .into_iter()
            .map(|ctx| (ctx.run_id, ctx.metadata))
            .collect();
        assert_eq!(seen, vec![(id(&run), expected.clone()), (id(&run), expected)], "{backend:?}");
        let events = server.get(&format!("/v1/runs/{}/events", id(&run))).await;
        assert!(!events.body.to_string().contains("acme"), "{backend:?}: metadata is not in the events");

        let plain = server.waiting_run(SCRIBE, "no metadata").await;
        assert_eq!(plain["metadata"], json!({}), "{backend:?}: none is an empty object");
        let null = server.post("/v1/runs", json!({"input": "x", "metadata": null})).await;
        assert_eq!((null.status, &null.body["metadata"]), (201, &json!({})), "null means absent");
        server.stop().await;
    }
}

#[tokio::test]
async fn metadata_that_is_not_an_object_too_large_or_too_deep_is_refused() {
    let server = Server::start(Config::default()).await;
    let deep = (0..17).fold(json!(1), |inner, _| json!({ "a": inner }));
    let cases = [
        (json!([1, 2]), "`metadata` must be a JSON object, not an array"),
        (json!("acme"), "`metadata` must be a JSON object, not a string"),
        (json!({"blob": "x".repeat(16 * 1024)}), "metadata must be at most 16384 bytes as JSON, not 16395"),
        (deep, "metadata must be nested at most 16 levels deep"),
    ];
    for (metadata, detail) in cases {
        let reply = server.post("/v1/runs", json!({"input": "x", "metadata": metadata})).await;
        reply.assert_problem(422, "invalid-request");
        assert!(reply.body["detail"].as_str().is_some_and(|d| d.contains(detail)), "{detail}: {}", reply.body);
    }
    assert_eq!(server.run_count().await, 0, "nothing was started");
    // At the limits exactly, the run starts.
    let at_limit = json!({"input": "x", "metadata": {"blob": "x".repeat(16 * 1024 - 11)}});
    assert_eq!(server.post("/v1/runs", at_limit).await.status, 201);
    let deepest = (0..16).fold(json!(1), |inner, _| json!({ "a": inner }));
    assert_eq!(server.post("/v1/runs", json!({"input": "x", "metadata": deepest})).await.status, 201);
    server.stop().await;
}

#[tokio::test]
async fn get_run_and_its_errors() {
    let server = Server::start(Config::default()).await;
    let run = server.waiting_run(SCRIBE, "read me").await;
    let reply = server.get(&format!("/v1/runs/{}", id(&run))).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, run, "GET answers the same run object");
    server.get("/v1/runs/0193b0c6-0000-7000-8000-000000000000").await.assert_problem(404, "not-found");
    server.get("/v1/runs/not-a-uuid").await.assert_problem(404, "not-found");
    server.get("/v1/runs/0193B0C6-0000-7000-8000-000000000000").await.assert_problem(404, "not-found");
    server.get("/v1/runs/0193b0c6-0000-7000-8000-000000000000/events").await.assert_problem(404, "not-found");
    server.get(&format!("/v1/runs/{}/events?after=x", id(&run))).await.assert_problem(422, "invalid-request");
    server.get(&format!("/v1/runs/{}/events?since=1", id(&run))).await.assert_problem(422, "invalid-request");
    server.stop().await;
}

#[tokio::test]
async fn list_runs_pages_newest_first_and_filters() {
    let server = Server::start(Config::default()).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(id(&server.waiting_run(SCRIBE, &format!("run {i}")).await));
    }
    let pair = id(&server.waiting_run(PAIR, "pair").await);
    let done = server.waiting_run(SCRIBE, "to cancel").await;
    server.post(&format!("/v1/runs/{}/cancel", id(&done)), json!({})).await;

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/runs?limit=3&cursor={c}"),
            None => "/v1/runs?limit=3".to_owned(),
        };
        let page = server.get(&path).await;
        assert_eq!(page.status, 200, "{}", page.body);
        let runs = page.body["runs"].as_array().cloned().unwrap_or_default();
        assert!(runs.len() <= 3);
        seen.extend(runs.iter().map(id));
        match page.body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let mut expected: Vec<RunId> = ids.clone();
    expected.push(pair.clone());
    expected.push(id(&done));
    expected.reverse();
    assert_eq!(seen, expected, "every run once, newest first");

    let waiting = server.get("/v1/runs?status=waiting_for_approval&limit=500").await;
    assert_eq!(waiting.body["runs"].as_array().map(Vec::len), Some(6));
    assert_eq!(waiting.body["next_cursor"], Value::Null);
    let cancelled = server.get("/v1/runs?status=cancelled").await;
    assert_eq!(cancelled.body["runs"].as_array().map(|r| r.iter().map(id).collect::<Vec<_>>()), Some(vec![id(&done)]));
    let by_agent = server.get(&format!("/v1/runs?agent={PAIR}")).await;
    assert_eq!(by_agent.body["runs"].as_array().map(|r| r.iter().map(id).collect::<Vec<_>>()), Some(vec![pair]));
    let nobody = server.get("/v1/runs?agent=nobody").await;
    assert_eq!(nobody.body, json!({"runs": [], "next_cursor": null}));

    for bad in [
        "/v1/runs?limit=501",
        "/v1/runs?limit=0",
        "/v1/runs?limit=-1",
        "/v1/runs?limit=ten",
        "/v1/runs?status=sleeping",
        "/v1/runs?cursor=not-a-cursor",
        "/v1/runs?colour=blue",
    ] {
        server.get(bad).await.assert_problem(422, "invalid-request");
    }
    server.stop().await;
}

#[tokio::test]
async fn decision_errors_change_nothing() {
    let server = Server::start(Config::default()).await;
    let run = server.waiting_run(SCRIBE, "careful").await;
    let path = format!("/v1/runs/{}/decisions", id(&run));
    let d = digest(&run);
    let stale = format!("sha256:{}", "0".repeat(64));
    let approve = |call: &str| json!([{"call_id": call, "action": "approve"}]);

    server
        .post(&path, json!({"turn_digest": stale, "decisions": approve("call_1")}))
        .await
        .assert_problem(409, "conflict");
    server
        .post(&path, json!({"turn_digest": d, "decisions": approve("call_9")}))
        .await
        .assert_problem(422, "invalid-decision");
    let allow = server.post(&path, json!({"turn_digest": d, "decisions": approve("call_2")})).await;
    allow.assert_problem(422, "invalid-decision");
    assert!(allow.body["detail"].as_str().is_some_and(|m| m.contains("allow")), "{}", allow.body);
    server
        .post(&path, json!({"turn_digest": d, "decisions": approve("call_3")}))
        .await
        .assert_problem(422, "invalid-decision");
    server.post(&path, json!({"turn_digest": d, "decisions": []})).await.assert_problem(422, "invalid-request");
    server
        .post(&path, json!({"turn_digest": d, "decisions": approve("call_1"), "approve_all": true}))
        .await
        .assert_problem(422, "invalid-request");
    server
        .post(&path, json!({"turn_digest": d, "decisions": approve("call_1"), "deny_all": true}))
        .await
        .assert_problem(422, "invalid-request");
    server.post(&path, json!({"turn_digest": d})).await.assert_problem(422, "invalid-request");
    let bad_edit = json!([{"call_id": "call_1", "action": "edit", "arguments": {"text": 5}}]);
    server.post(&path, json!({"turn_digest": d, "decisions": bad_edit})).await.assert_problem(422, "invalid-decision");
    let twice = json!([{"call_id": "call_1", "action": "approve"}, {"call_id": "call_1", "action": "deny"}]);
    server.post(&path, json!({"turn_digest": d, "decisions": twice})).await.assert_problem(422, "invalid-request");
    server
        .post("/v1/runs/0193b0c6-0000-7000-8000-000000000000/decisions", json!({"turn_digest": d, "approve_all": true}))
        .await
        .assert_problem(404, "not-found");

    let unchanged = server.get(&format!("/v1/runs/{}", id(&run))).await;
    assert_eq!(unchanged.body, run, "refused decisions wrote nothing");
    assert_eq!(server.event_kinds(&id(&run)).await.iter().filter(|k| *k == "decision").count(), 0);

    let done = server.post(&path, json!({"turn_digest": d, "approve_all": true, "wait": true})).await;
    assert_eq!(done.body["status"], "completed", "{}", done.body);
    server.post(&path, json!({"turn_digest": d, "approve_all": true})).await.assert_problem(409, "conflict");
    server.stop().await;
}

#[tokio::test]
async fn partial_decisions_wait_for_the_rest() {
    let server = Server::start(Config::default()).await;
    let run = server.waiting_run(PAIR, "two").await;
    let path = format!("/v1/runs/{}/decisions", id(&run));
    let d = digest(&run);
    let first = server
        .post(
            &path,
            json!({"turn_digest": d, "decisions": [{"call_id": "call_1", "action": "deny", "reason": "not a"}]}),
        )
        .await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body["status"], "waiting_for_approval", "one of two held calls decided: still waiting");
    let recorded = &first.body["pending"]["calls"][0]["decision"];
    assert_eq!(
        (recorded["action"].clone(), recorded["reason"].clone(), recorded["actor"].clone()),
        (json!("deny"), json!("not a"), json!("local"))
    );
    assert!(recorded["at"].is_string());
    assert_eq!(first.body["pending"]["calls"][1]["decision"], Value::Null);
    assert_eq!(digest(&first.body), d, "a partial decision keeps the digest");

    server
        .post(&path, json!({"turn_digest": d, "decisions": [{"call_id": "call_1", "action": "approve"}]}))
        .await
        .assert_problem(409, "conflict");
    let rest = server.post(&path, json!({"turn_digest": d, "approve_all": true, "wait": true})).await;
    assert_eq!(rest.body["status"], "completed", "{}", rest.body);
    let ran: Vec<Value> = server.tools.write.calls().into_iter().map(|(_, args)| args).collect();
    assert_eq!(ran, vec![json!({"text": "b"})], "approve_all applies to the calls not yet decided");
    server.stop().await;
}

#[tokio::test]
async fn edit_respond_and_deny() {
    let server = Server::start(Config::default()).await;
    let edited = server.waiting_run(SCRIBE, "original").await;
    let reply = server
        .post(
            &format!("/v1/runs/{}/decisions", id(&edited)),
            json!({"turn_digest": digest(&edited), "wait": true,
                   "decisions": [{"call_id": "call_1", "action": "edit", "arguments": {"text": "edited"}}]}),
        )
        .await;
    assert_eq!(reply.body["status"], "completed", "{}", reply.body);
    assert_eq!(server.tools.write.calls(), vec![("call_1".into(), json!({"text": "edited"}))]);

    let responded = server.waiting_run(SCRIBE, "respond").await;
    let reply = server
        .post(
            &format!("/v1/runs/{}/decisions", id(&responded)),
            json!({"turn_digest": digest(&responded), "wait": true,
                   "decisions": [{"call_id": "call_1", "action": "respond", "result": "The answer is 42"}]}),
        )
        .await;
    assert_eq!(reply.body["status"], "completed", "{}", reply.body);
    assert_eq!(server.tools.write.call_count(), 1, "a responded call does not run");

    let denied = server.waiting_run(SCRIBE, "deny").await;
    let reply = server
        .post(
            &format!("/v1/runs/{}/decisions", id(&denied)),
            json!({"turn_digest": digest(&denied), "deny_all": true, "reason": "not on a Friday", "wait": true}),
        )
        .await;
    assert_eq!(reply.body["status"], "completed", "{}", reply.body);
    assert_eq!(reply.body["output"], "Not written.");
    assert_eq!(server.tools.write.call_count(), 1, "a denied call does not run");
    let events = server.get(&format!("/v1/runs/{}/events", id(&denied))).await;
    let decision = events.body["events"].as_array().and_then(|e| e.iter().find(|e| e["kind"] == "decision").cloned());
    assert_eq!(decision.map(|e| e["data"]["reason"].clone()), Some(json!("not on a Friday")));
    server.stop().await;
}

#[tokio::test]
async fn cancel_with_and_without_a_body() {
    let server = Server::start(Config::default()).await;
    let first = server.waiting_run(SCRIBE, "one").await;
    let reply = server.post_raw(&format!("/v1/runs/{}/cancel", id(&first)), None, Vec::new()).await;
    assert_eq!(reply.status, 200, "an empty body is fine: {}", reply.body);
    assert_eq!(reply.body["status"], "cancelled");
    assert_eq!(reply.body["termination_reason"], "cancelled");
    server.post(&format!("/v1/runs/{}/cancel", id(&first)), json!({})).await.assert_problem(409, "conflict");

    let second = server.waiting_run(SCRIBE, "two").await;
    let reply = server.post(&format!("/v1/runs/{}/cancel", id(&second)), json!({"reason": "changed my mind"})).await;
    assert_eq!(reply.status, 200);
    let events = server.get(&format!("/v1/runs/{}/events", id(&second))).await;
    let last = events.body["events"].as_array().and_then(|e| e.last().cloned()).unwrap_or_default();
    assert_eq!(last["kind"], "run_cancelled");
    assert_eq!(last["data"], json!({"actor": "local", "reason": "changed my mind"}));
    server
        .post("/v1/runs/0193b0c6-0000-7000-8000-000000000000/cancel", json!({}))
        .await
        .assert_problem(404, "not-found");
    assert_eq!(server.tools.write.call_count(), 0);
    server.stop().await;
}

#[tokio::test]
async fn agents_and_tools() {
    let server = Server::start(Config::default()).await;
    let agents = server.get("/v1/agents").await;
    assert_eq!(agents.status, 200);
    let names: Vec<Value> =
        agents.body["agents"].as_array().map(|a| a.iter().map(|a| a["name"].clone()).collect()).unwrap_or_default();
    assert_eq!(names, vec![json!(SCRIBE), json!(PAIR), json!(GUARDED), json!(common::SLOW)]);
    assert_eq!(agents.body["agents"][0]["model"], "scripted");
    assert_eq!(agents.body["agents"][0]["tools"], json!(["write", "list", "nuke"]));
    assert_eq!(agents.body["agents"][2]["forbid_self_approval"], true);

    let catalog = server.get("/v1/tools").await;
    assert_eq!(catalog.status, 200);
    let gates: Vec<(Value, Value)> = catalog.body["tools"]
        .as_array()
        .map(|t| t.iter().map(|t| (t["name"].clone(), t["gate"].clone())).collect())
        .unwrap_or_default();
    assert_eq!(
        gates,
        vec![(json!("write"), json!("ask")), (json!("list"), json!("allow")), (json!("nuke"), json!("forbid"))]
    );
    assert_eq!(catalog.body["tools"][0]["parameters"]["required"], json!(["text"]));
    assert_eq!(catalog.body["tools"][0]["description"], "test tool write");

    let scribe = server.get(&format!("/v1/tools?agent={SCRIBE}")).await;
    assert_eq!(scribe.status, 200);
    assert_eq!(scribe.body["tools"][1]["name"], "list");
    assert_eq!(scribe.body["tools"][1]["gate"], "ask", "the agent's effective gate, not the default");
    assert_eq!(scribe.body["tools"][1]["why"], "policy: tool = \"list\"");
    server.get("/v1/tools?agent=unknown").await.assert_problem(404, "not-found");
    server.get("/v1/tools?agnet=scribe").await.assert_problem(422, "invalid-request");
    server.stop().await;
}

#[tokio::test]
async fn purge_by_window_or_by_configured_retention() {
    let server = Server::start(Config::default()).await;
    let waiting = server.waiting_run(SCRIBE, "keep").await;
    let finished = server.waiting_run(SCRIBE, "drop").await;
    server.post(&format!("/v1/runs/{}/cancel", id(&finished)), json!({})).await;

    let configured = server.post_raw("/v1/purge", None, Vec::new()).await;
    assert_eq!(configured.status, 200, "{}", configured.body);
    assert_eq!(configured.body, json!({"deleted_runs": 0}), "nothing is 30 days old");
    server.post("/v1/purge", json!({"older_than": "soon"})).await.assert_problem(422, "invalid-request");
    server.post("/v1/purge", json!({"older_than": 30})).await.assert_problem(422, "invalid-request");
    server.post("/v1/purge", json!({"before": "30d"})).await.assert_problem(422, "invalid-request");

    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let purged = server.post("/v1/purge", json!({"older_than": "0s"})).await;
    assert_eq!(purged.body, json!({"deleted_runs": 1}), "older_than applies to terminal runs only");
    server.get(&format!("/v1/runs/{}", id(&finished))).await.assert_problem(404, "not-found");
    server.get(&format!("/v1/runs/{}/events", id(&finished))).await.assert_problem(404, "not-found");
    assert_eq!(
        server.get(&format!("/v1/runs/{}", id(&waiting))).await.status,
        200,
        "waiting runs go by their own window"
    );
    server.stop().await;
}

#[tokio::test]
async fn health_metrics_and_unknown_routes() {
    let server = Server::start(Config::default()).await;
    let health = server.get("/healthz").await;
    assert_eq!((health.status, health.body.clone()), (200, json!({"status": "ok"})));

    let run = server.waiting_run(SCRIBE, "metrics").await;
    server.waiting_run(SCRIBE, "still waiting").await;
    server.approve_and_wait(&run).await;
    // The event feed reads what was committed in the background; give it a moment (bounded).
    let mut text = String::new();
    for _ in 0..100 {
        let metrics = server.get("/metrics").await;
        assert_eq!(metrics.status, 200);
        assert!(metrics.content_type().starts_with("text/plain"), "{}", metrics.content_type());
        text = metrics.body.as_str().unwrap_or_default().to_owned();
        if text.contains("tollgate_tool_call_duration_seconds_count{tool=\"write\"} 1\n") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for line in [
        "tollgate_runs{status=\"waiting_for_approval\"} 1\n",
        "tollgate_runs{status=\"completed\"} 1\n",
        "tollgate_waiting_runs 1\n",
        "# TYPE tollgate_queue_oldest_seconds gauge\ntollgate_queue_oldest_seconds 0\n",
        "tollgate_decisions_total{action=\"approve\"} 1\n",
        "tollgate_decisions_total{action=\"deny\"} 0\n",
        "tollgate_tool_call_duration_seconds_count{tool=\"write\"} 1\n",
        "tollgate_tool_call_duration_seconds_count{tool=\"list\"} 1\n",
        "tollgate_model_call_duration_seconds_count 3\n",
        "# TYPE tollgate_model_call_duration_seconds histogram\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }

    let unknown = server.get("/v2/runs").await;
    unknown.assert_problem(404, "not-found");
    server.call("DELETE", "/v1/runs", None, None).await.assert_problem(405, "method-not-allowed");
    server.call("GET", "/v1/purge", None, None).await.assert_problem(405, "method-not-allowed");
    server.call("PUT", &format!("/v1/runs/{}", id(&run)), None, None).await.assert_problem(405, "method-not-allowed");
    let root = server.get("/").await;
    assert_eq!(root.status, 200);
    assert!(root.content_type().starts_with("text/html"));
    server.stop().await;
}

#[tokio::test]
async fn problem_documents_snapshot() {
    let server = Server::start(Config::default()).await;
    let run = server.waiting_run(SCRIBE, "snap").await;
    let stale = server
        .post(
            &format!("/v1/runs/{}/decisions", id(&run)),
            json!({"turn_digest": format!("sha256:{}", "0".repeat(64)), "approve_all": true}),
        )
        .await;
    let mut stale_body = stale.body.clone();
    stale_body["detail"] = json!(stale.body["detail"].as_str().unwrap_or_default().replace(&digest(&run), "[digest]"));
    insta::assert_json_snapshot!("stale_digest", stale_body);
    let malformed = server.post_raw("/v1/runs", Some("application/json"), b"{\"input\": ".to_vec()).await;
    insta::assert_json_snapshot!("malformed_json", malformed.body);
    let unknown_field = server.post("/v1/runs", json!({"input": "x", "priority": 1})).await;
    insta::assert_json_snapshot!("unknown_field", unknown_field.body);
    server.stop().await;
}

/// A burst of commits far larger than the runtime's broadcast of notices (4096) — 1,500 runs held and
/// approved at once, some ten notices each — while the event feed reads events slowly (5 ms a read), so
/// that it falls far behind the writers: it still counts every event, since it follows the runtime's
/// change set rather than the broadcast.
#[tokio::test]
async fn the_event_feed_counts_every_event_of_a_burst_it_falls_behind() {
    use tollgate_agent_runtime::{DecisionSet, StartRun};
    const RUNS: usize = 1500;
    let inner = common::open_store(&common::Backend::Sqlite).await;
    let store = tollgate_agent_testkit::FailingStore::slow_event_reads(inner, std::time::Duration::from_millis(5));
    let server = Server::start(Config { store: Some(std::sync::Arc::new(store)), ..Config::default() }).await;
    let start = |i: usize| {
        let runtime = server.runtime.clone();
        tokio::spawn(async move {
            let input = format!("burst {i}");
            let request = StartRun::new(&input, "local").agent(SCRIBE);
            let run = runtime.start_and_wait(request).await.unwrap_or_else(|e| panic!("{e}"));
            let digest = run.held_turn().map(|held| held.turn_digest.as_str().to_owned()).unwrap_or_default();
            runtime
                .decide_and_wait(&run, &digest, DecisionSet::ApproveAll, &"local".into())
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        })
    };
    let runs: Vec<_> = (0..RUNS).map(start).collect();
    for run in runs {
        let run = run.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run.status().as_str(), "completed");
    }
    let want = format!("tollgate_events_total{{kind=\"run_completed\"}} {RUNS}\n");
    let mut text = String::new();
    for _ in 0..600 {
        text = server.get("/metrics").await.body.as_str().unwrap_or_default().to_owned();
        if text.contains(&want) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(text.contains(&want), "missing {want:?} in\n{text}");
    for kind in ["run_started", "approval_requested", "decision", "run_resumed"] {
        let line = format!("tollgate_events_total{{kind=\"{kind}\"}} {RUNS}\n");
        assert!(text.contains(&line), "missing {line:?} in\n{text}");
    }
    server.stop().await;
}
