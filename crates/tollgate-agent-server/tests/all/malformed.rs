//! Malformed input on every endpoint: bad JSON, wrong types, missing and unknown fields, oversized and
//! mistyped bodies, bad ids and query parameters. Each is a 4xx problem, nothing is written, and the
//! server keeps serving.

use crate::common::{Config, SCRIBE, Server, digest, id};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate_agent_core::RunId;

/// What the store holds, to compare before and after.
async fn snapshot(server: &Server, ids: &[RunId]) -> (usize, Vec<Value>, Vec<usize>) {
    let mut runs = Vec::new();
    let mut events = Vec::new();
    for id in ids {
        runs.push(server.get(&format!("/v1/runs/{id}")).await.body);
        events.push(server.event_kinds(id).await.len());
    }
    (server.run_count().await, runs, events)
}

#[tokio::test]
async fn malformed_input_is_refused_and_writes_nothing() {
    let server = Server::start(Config::default()).await;
    let waiting = server.waiting_run(SCRIBE, "keep me").await;
    let ended = server.waiting_run(SCRIBE, "ended").await;
    server.post(&format!("/v1/runs/{}/cancel", id(&ended)), json!({})).await;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let ids = vec![id(&waiting), id(&ended)];
    let before = snapshot(&server, &ids).await;

    let decisions = format!("/v1/runs/{}/decisions", id(&waiting));
    let cancel = format!("/v1/runs/{}/cancel", id(&waiting));
    let d = digest(&waiting);
    let body_endpoints = ["/v1/runs", decisions.as_str(), cancel.as_str(), "/v1/purge"];

    // Not JSON at all: 400.
    for path in body_endpoints {
        for text in ["{", "{\"input\": \"x\",}", "nope", "{\"input\": \"x\"} trailing", "\u{feff}{}"] {
            let reply = server.post_raw(path, Some("application/json"), text.as_bytes().to_vec()).await;
            reply.assert_problem(400, "malformed-json");
        }
        let invalid_utf8 = server.post_raw(path, Some("application/json"), vec![b'{', b'"', 0xff, b'"', b'}']).await;
        invalid_utf8.assert_problem(400, "malformed-json");
    }

    // Well-formed JSON of the wrong shape: 422.
    let wrong: Vec<(&str, Value)> = vec![
        ("/v1/runs", json!([])),
        ("/v1/runs", json!("input")),
        ("/v1/runs", json!({"input": 5})),
        ("/v1/runs", json!({"input": ["x"]})),
        ("/v1/runs", json!({"input": "x", "wait": "yes"})),
        ("/v1/runs", json!({"input": "x", "agent": 7})),
        ("/v1/runs", json!({"input": "x", "unknown": true})),
        ("/v1/runs", json!({})),
        ("/v1/runs", json!({"input": "   "})),
        (decisions.as_str(), json!({})),
        (decisions.as_str(), json!({"turn_digest": 5, "approve_all": true})),
        (decisions.as_str(), json!({"turn_digest": d, "approve_all": "yes"})),
        (decisions.as_str(), json!({"turn_digest": d, "approve_all": true, "extra": 1})),
        (decisions.as_str(), json!({"turn_digest": d, "decisions": {"call_1": "approve"}})),
        (decisions.as_str(), json!({"turn_digest": d, "decisions": [{"call_id": "call_1"}]})),
        (decisions.as_str(), json!({"turn_digest": d, "decisions": [{"call_id": "call_1", "action": "maybe"}]})),
        (
            decisions.as_str(),
            json!({"turn_digest": d, "decisions": [{"call_id": "call_1", "action": "approve", "note": "x"}]}),
        ),
        (decisions.as_str(), json!({"turn_digest": d, "decisions": [{"call_id": 1, "action": "approve"}]})),
        (
            decisions.as_str(),
            json!({"turn_digest": d, "decisions": [{"call_id": "call_1", "action": "respond", "result": {"a": 1}}]}),
        ),
        (decisions.as_str(), json!({"turn_digest": d, "decisions": [{"call_id": "call_1", "action": "edit"}]})),
        (decisions.as_str(), json!({"turn_digest": d, "decisions": [], "wait": true})),
        (decisions.as_str(), json!({"turn_digest": d, "approve_all": true, "deny_all": true})),
        (cancel.as_str(), json!({"reason": 5})),
        (cancel.as_str(), json!({"why": "x"})),
        (cancel.as_str(), json!([])),
        ("/v1/purge", json!({"older_than": 30})),
        ("/v1/purge", json!({"older_than": "yesterday"})),
        ("/v1/purge", json!({"older_than": "0s", "dry_run": true})),
    ];
    for (path, body) in wrong {
        let reply = server.post(path, body.clone()).await;
        assert_eq!(reply.status, 422, "{path} {body}: {}", reply.body);
        reply.assert_problem(422, "invalid-request");
    }

    // A body declared as something else than JSON: 415 (a cross-site form post cannot forge JSON).
    for path in body_endpoints {
        let reply = server.post_raw(path, Some("text/plain"), br#"{"older_than": "0s", "input": "x"}"#.to_vec()).await;
        reply.assert_problem(415, "unsupported-media-type");
        let form = server.post_raw(path, Some("application/x-www-form-urlencoded"), b"input=x".to_vec()).await;
        form.assert_problem(415, "unsupported-media-type");
    }

    // Over the default 1 MiB limit: 413 (the server may close the connection after answering).
    for path in body_endpoints {
        let mut big = br#"{"input": ""#.to_vec();
        big.resize(1024 * 1024 + 16, b'a');
        big.extend_from_slice(br#""}"#);
        match server.client.post(server.url(path)).header("content-type", "application/json").body(big).send().await {
            Ok(response) => assert_eq!(response.status().as_u16(), 413, "{path}"),
            Err(e) => assert!(e.is_request() || e.is_body() || e.is_connect(), "{path}: {e}"),
        }
        let status = oversized_chunked(&server, path).await;
        assert!(status.is_none_or(|s| s == 413), "{path}: chunked oversized body answered {status:?}");
    }
    // Just under the limit is read (and then judged on its content).
    let mut near = br#"{"input": "x", "agent": ""#.to_vec();
    near.resize(1024 * 1024 - 64, b'a');
    near.extend_from_slice(br#""}"#);
    server.post_raw("/v1/runs", Some("application/json"), near).await.assert_problem(404, "not-found");

    // Bad ids and query parameters on the read side.
    for path in [
        "/v1/runs/not-a-run",
        "/v1/runs/%00",
        "/v1/runs/0193b0c6-0000-7000-8000-00000000000",
        "/v1/runs/not-a-run/events",
        "/v1/runs/not-a-run/decisions",
        "/v1/runs/not-a-run/cancel",
    ] {
        let method = if path.ends_with("decisions") || path.ends_with("cancel") { "POST" } else { "GET" };
        let reply = server.call(method, path, None, Some(json!({"turn_digest": d, "approve_all": true}))).await;
        reply.assert_problem(404, "not-found");
    }
    for path in [
        "/v1/runs?limit=1000",
        "/v1/runs?limit=1e3",
        "/v1/runs?status=WAITING",
        "/v1/runs?limit=5&limit=6",
        "/v1/runs?cursor=%27%20OR%201%3D1",
        "/v1/tools?agent=scribe&x=1",
    ] {
        server.get(path).await.assert_problem(422, "invalid-request");
    }
    let events = format!("/v1/runs/{}/events", id(&waiting));
    let sse = server
        .client
        .get(server.url(&events))
        .header("accept", "text/event-stream")
        .header("last-event-id", "abc")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sse.status().as_u16(), 422);

    let after = snapshot(&server, &ids).await;
    assert_eq!(after, before, "nothing was written: same runs, same records, same event logs");
    assert_eq!(server.tools.write.call_count(), 0);

    // Still serving, and still deciding correctly.
    let reply = server.post(&decisions, json!({"turn_digest": d, "approve_all": true, "wait": true})).await;
    assert_eq!(reply.body["status"], "completed", "{}", reply.body);
    server.stop().await;
}

/// Sends an oversized body with chunked transfer encoding (no Content-Length) over a raw socket and
/// returns the status, or `None` when the server closed the connection before answering.
async fn oversized_chunked(server: &Server, path: &str) -> Option<u16> {
    let addr = server.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("{e}"));
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(head.as_bytes()).await.is_err() {
        return None;
    }
    let chunk = vec![b' '; 64 * 1024];
    for _ in 0..20 {
        let mut frame = format!("{:x}\r\n", chunk.len()).into_bytes();
        frame.extend_from_slice(&chunk);
        frame.extend_from_slice(b"\r\n");
        if stream.write_all(&frame).await.is_err() {
            break;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer);
    text.strip_prefix("HTTP/1.1 ").and_then(|rest| rest.get(..3)).and_then(|code| code.parse().ok())
}
