//! Every status an operation answers is one its OpenAPI document lists for it, an error with the
//! `Problem` schema under `application/problem+json`: each operation is driven through a real socket
//! into each of its answers — its own (success, role, not found, conflict, bad input, stream cap), those
//! of every operation of its kind (a body's 400 / 408 / 413 / 415, a token's 401, the connection limit's
//! 503), and the store's failures (500 / 503 / 507) — and the answer is looked up in the document the
//! server serves. A status the server sends and the document leaves out fails here, as a generated
//! client would fail on it (openapi-python-client raises `UnexpectedStatus`).
//!
//! Not driven here: the 403 a server without tokens answers another OS user (`local_owner.rs` drives it,
//! as root).

use crate::common::{self, Config, PAIR, Reply, SCRIBE, Server, digest, id};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate_agent_core::StoreError;
use tollgate_agent_server::PROBLEM_JSON;
use tollgate_agent_testkit::{FailingStore, Outage};

/// The largest body the servers here take.
const MAX_BODY: usize = 4096;

/// An OpenAPI document, as a server serves it.
struct Document(Value);

impl Document {
    async fn served(server: &Server) -> Document {
        let reply = server.get("/openapi.json").await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        Document(reply.body)
    }

    /// Every operation: its method and path template.
    fn operations(&self) -> Vec<(String, String)> {
        let paths = self.0["paths"].as_object().unwrap_or_else(|| panic!("no paths"));
        paths
            .iter()
            .flat_map(|(path, item)| {
                item.as_object().into_iter().flatten().map(move |(method, _)| (method.clone(), path.clone()))
            })
            .collect()
    }

    fn operation(&self, method: &str, template: &str) -> &Value {
        let operation = &self.0["paths"][template][method.to_ascii_lowercase()];
        assert!(operation.is_object(), "{method} {template} is not in the document");
        operation
    }

    /// Fails unless `reply`'s status is listed on the operation, a problem as `Problem` in
    /// `application/problem+json`, and the reply is one.
    fn assert_lists(&self, method: &str, template: &str, reply: &Reply) {
        self.assert_lists_answer(method, template, reply.status, reply.content_type(), &reply.body);
    }

    fn assert_lists_answer(&self, method: &str, template: &str, status: u16, content_type: &str, body: &Value) {
        let answer = &self.operation(method, template)["responses"][status.to_string()];
        assert!(answer.is_object(), "{method} {template} answered {status}, which its document does not list: {body}");
        if status >= 400 {
            let schema = &answer["content"]["application/problem+json"]["schema"]["$ref"];
            assert_eq!(schema, "#/components/schemas/Problem", "{method} {template} {status}: {answer}");
            assert_eq!(content_type, "application/problem+json", "{method} {template}: {body}");
            assert_eq!(body["status"], status, "{method} {template}: {body}");
        }
    }
}

/// A request of one operation: method, path template, the path sent, the token and the body.
struct Call {
    method: String,
    template: String,
    path: String,
    token: Option<&'static str>,
    /// The content type and bytes of the body, if any.
    body: Option<(&'static str, Vec<u8>)>,
    /// Extra headers.
    headers: Vec<(&'static str, Vec<u8>)>,
}

impl Call {
    fn new(method: &str, template: &str, path: impl Into<String>) -> Call {
        let (method, template) = (method.to_owned(), template.to_owned());
        Call { method, template, path: path.into(), token: None, body: None, headers: Vec::new() }
    }

    fn token(self, token: &'static str) -> Call {
        Call { token: Some(token), ..self }
    }

    fn json(self, body: Value) -> Call {
        self.raw("application/json", body.to_string().into_bytes())
    }

    fn raw(self, content_type: &'static str, bytes: Vec<u8>) -> Call {
        Call { body: Some((content_type, bytes)), ..self }
    }

    fn header(mut self, name: &'static str, value: &[u8]) -> Call {
        self.headers.push((name, value.to_vec()));
        self
    }

    async fn send(&self, server: &Server) -> Reply {
        let method = reqwest::Method::from_bytes(self.method.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let mut request = server.client.request(method, server.url(&self.path));
        if let Some(token) = self.token {
            request = request.bearer_auth(token);
        }
        if let Some((content_type, bytes)) = &self.body {
            request = request.header("content-type", *content_type).body(bytes.clone());
        }
        for (name, value) in &self.headers {
            let value = reqwest::header::HeaderValue::from_bytes(value).unwrap_or_else(|e| panic!("{e}"));
            request = request.header(*name, value);
        }
        let response = request.send().await.unwrap_or_else(|e| panic!("{} {}: {e}", self.method, self.path));
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Reply { status, headers, body }
    }

    /// Sends the call, checks it got `status`, and that the document lists it.
    async fn expect(&self, server: &Server, doc: &Document, status: u16) -> Reply {
        let reply = self.send(server).await;
        assert_eq!(reply.status, status, "{} {}: {}", self.method, self.path, reply.body);
        doc.assert_lists(&self.method, &self.template, &reply);
        reply
    }
}

/// `template` with `{id}` replaced: a grant's id under `/v1/grants`, else a run's.
fn concrete(template: &str, run: &str, grant: &str) -> String {
    template.replace("{id}", if template.starts_with("/v1/grants") { grant } else { run })
}

/// The status of an answer to `head` sent alone on a raw connection, read until the server closes it.
async fn raw_status(server: &Server, head: &str) -> (u16, String) {
    let addr = server.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("{e}"));
    stream.write_all(head.as_bytes()).await.unwrap_or_else(|e| panic!("{e}"));
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut received)).await;
    let text = String::from_utf8_lossy(&received).into_owned();
    assert!(read.is_ok(), "the connection is still open after 10 s: {text}");
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status line: {text}"));
    (status, text)
}

/// A path of each document operation: the waiting `run`'s and the `grant`'s ids where it takes one.
fn every_operation(doc: &Document, run: &str, grant: &str) -> Vec<(String, String, String)> {
    doc.operations()
        .into_iter()
        .map(|(method, template)| {
            let path = concrete(&template, run, grant);
            (method.to_ascii_uppercase(), template, path)
        })
        .collect()
}

/// With tokens: each operation's own answers, then the answers every operation of a kind gives.
#[tokio::test(flavor = "multi_thread")]
async fn every_answer_of_every_operation_is_listed_in_the_document() {
    let server = Server::start(Config {
        tokens: common::tokens(),
        max_body_bytes: MAX_BODY,
        tune: Some(|o| {
            o.body_timeout = Duration::from_millis(300);
            o.max_streams_per_client = 1;
        }),
        ..Default::default()
    })
    .await;
    let doc = Document::served(&server).await;
    assert_eq!(doc.0, serde_json::from_str::<Value>(&tollgate_agent_server::openapi_json()).unwrap_or_default());

    // A run that waits, one that completed, one to cancel, and a grant that allows nothing used here.
    let start = |input: &str| json!({"agent": PAIR, "input": input, "wait": true});
    let waiting = Call::new("POST", "/v1/runs", "/v1/runs").token("carol-token").json(start("held"));
    let waiting = waiting.expect(&server, &doc, 201).await.body;
    let w = id(&waiting).to_string();
    let done = Call::new("POST", "/v1/runs", "/v1/runs").token("carol-token").json(start("done"));
    let done = done.expect(&server, &doc, 201).await.body;
    let c = id(&done).to_string();
    let decisions = |run: &str| format!("/v1/runs/{run}/decisions");
    let approve = json!({"turn_digest": digest(&done), "approve_all": true, "wait": true});
    let decide = Call::new("POST", "/v1/runs/{id}/decisions", decisions(&c)).token("bob-token").json(approve.clone());
    assert_eq!(decide.expect(&server, &doc, 200).await.body["status"], "completed");
    let grant = json!({"agent": PAIR, "tool": "write", "match": {"/text": "never written here"}});
    let grant = Call::new("POST", "/v1/grants", "/v1/grants").token("bob-token").json(grant);
    let g = grant.expect(&server, &doc, 201).await.body["id"].as_str().unwrap_or_default().to_owned();
    let unknown = "01980000-0000-7000-8000-00000000beef";

    // Each operation's own answers.
    let run_path = format!("/v1/runs/{w}");
    let events = format!("/v1/runs/{w}/events");
    let sse = |path: &str| {
        Call::new("GET", "/v1/runs/{id}/events", path).token("alice-token").header("accept", b"text/event-stream")
    };
    let cases = [
        (Call::new("POST", "/v1/runs", "/v1/runs").token("bob-token").json(start("x")), 403),
        (
            Call::new("POST", "/v1/runs", "/v1/runs")
                .token("alice-token")
                .json(json!({"agent": "nobody", "input": "x"})),
            404,
        ),
        (Call::new("POST", "/v1/runs", "/v1/runs").token("alice-token").json(json!({"input": " "})), 422),
        (Call::new("GET", "/v1/runs", "/v1/runs").token("alice-token"), 200),
        (Call::new("GET", "/v1/runs", "/v1/runs?limit=0").token("alice-token"), 422),
        (Call::new("GET", "/v1/runs/{id}", run_path.clone()).token("alice-token"), 200),
        (Call::new("GET", "/v1/runs/{id}", format!("/v1/runs/{unknown}")).token("alice-token"), 404),
        (Call::new("GET", "/v1/runs/{id}/events", events.clone()).token("alice-token"), 200),
        (Call::new("GET", "/v1/runs/{id}/events", format!("/v1/runs/{unknown}/events")).token("alice-token"), 404),
        (Call::new("GET", "/v1/runs/{id}/events", format!("{events}?after=x")).token("alice-token"), 422),
        (sse(&events).header("last-event-id", b""), 422),
        (sse(&format!("/v1/runs/{c}/events")).header("last-event-id", b"9999"), 204),
        (Call::new("POST", "/v1/runs/{id}/decisions", decisions(&w)).token("alice-token").json(approve.clone()), 403),
        (
            Call::new("POST", "/v1/runs/{id}/decisions", decisions(unknown)).token("bob-token").json(approve.clone()),
            404,
        ),
        (Call::new("POST", "/v1/runs/{id}/decisions", decisions(&c)).token("bob-token").json(approve), 409),
        (
            Call::new("POST", "/v1/runs/{id}/decisions", decisions(&w)).token("bob-token").json(json!({
                "turn_digest": digest(&waiting), "decisions": [{"call_id": "call_9", "action": "approve"}]
            })),
            422,
        ),
        (Call::new("POST", "/v1/runs/{id}/cancel", format!("/v1/runs/{w}/cancel")).token("bob-token"), 403),
        (Call::new("POST", "/v1/runs/{id}/cancel", format!("/v1/runs/{unknown}/cancel")).token("root-token"), 404),
        (Call::new("POST", "/v1/runs/{id}/cancel", format!("/v1/runs/{c}/cancel")).token("root-token"), 409),
        (
            Call::new("POST", "/v1/runs/{id}/cancel", format!("/v1/runs/{w}/cancel"))
                .token("root-token")
                .json(json!({"why": 1})),
            422,
        ),
        (
            Call::new("POST", "/v1/grants", "/v1/grants")
                .token("alice-token")
                .json(json!({"agent": PAIR, "tool": "write"})),
            403,
        ),
        (
            Call::new("POST", "/v1/grants", "/v1/grants")
                .token("bob-token")
                .json(json!({"agent": "nobody", "tool": "write"})),
            404,
        ),
        (
            Call::new("POST", "/v1/grants", "/v1/grants")
                .token("bob-token")
                .json(json!({"agent": PAIR, "tool": "write", "ttl": "soon"})),
            422,
        ),
        (Call::new("GET", "/v1/grants", "/v1/grants").token("alice-token"), 200),
        (Call::new("GET", "/v1/grants", "/v1/grants?limit=0").token("alice-token"), 422),
        (Call::new("GET", "/v1/grants/{id}", format!("/v1/grants/{g}")).token("alice-token"), 200),
        (Call::new("GET", "/v1/grants/{id}", format!("/v1/grants/{unknown}")).token("alice-token"), 404),
        (Call::new("DELETE", "/v1/grants/{id}", format!("/v1/grants/{g}")).token("alice-token"), 403),
        (Call::new("DELETE", "/v1/grants/{id}", format!("/v1/grants/{unknown}")).token("bob-token"), 404),
        (Call::new("DELETE", "/v1/grants/{id}", format!("/v1/grants/{g}")).token("bob-token"), 200),
        (Call::new("DELETE", "/v1/grants/{id}", format!("/v1/grants/{g}")).token("bob-token"), 409),
        (Call::new("GET", "/v1/agents", "/v1/agents").token("alice-token"), 200),
        (Call::new("GET", "/v1/tools", format!("/v1/tools?agent={SCRIBE}")).token("alice-token"), 200),
        (Call::new("GET", "/v1/tools", "/v1/tools?agent=nobody").token("alice-token"), 404),
        (Call::new("GET", "/v1/tools", "/v1/tools?agents=x").token("alice-token"), 422),
        (Call::new("POST", "/v1/purge", "/v1/purge").token("bob-token"), 403),
        (Call::new("POST", "/v1/purge", "/v1/purge").token("root-token").json(json!({"older_than": "soon"})), 422),
        (Call::new("POST", "/v1/purge", "/v1/purge").token("root-token").json(json!({"older_than": "3650d"})), 200),
        (Call::new("GET", "/healthz", "/healthz"), 200),
        (Call::new("GET", "/readyz", "/readyz"), 200),
        (Call::new("GET", "/metrics", "/metrics").token("alice-token"), 403),
        (Call::new("GET", "/metrics", "/metrics").token("root-token"), 200),
        (Call::new("GET", "/openapi.json", "/openapi.json"), 200),
        (Call::new("POST", "/v1/runs/{id}/cancel", format!("/v1/runs/{w}/cancel")).token("carol-token"), 200),
    ];
    for (call, status) in &cases {
        call.expect(&server, &doc, *status).await;
    }

    // A second live-event stream of one token past `max_streams_per_client` (1): 429.
    let held = Call::new("POST", "/v1/runs", "/v1/runs").token("carol-token").json(start("streamed"));
    let held = id(&held.expect(&server, &doc, 201).await.body).to_string();
    let stream = |token: &'static str| {
        let request = server.client.get(server.url(&format!("/v1/runs/{held}/events"))).bearer_auth(token);
        request.header("accept", "text/event-stream").send()
    };
    let open = stream("alice-token").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(open.status(), 200);
    let capped = sse(&format!("/v1/runs/{held}/events")).expect(&server, &doc, 429).await;
    assert_eq!(capped.body["type"], "https://tollgate.dev/problems/too-many-requests");
    drop(open);

    // What every operation of a kind answers: without a token 401; a body that is not JSON 400, not
    // declared as JSON 415, too large 413, too slow 408.
    for (method, template, path) in every_operation(&doc, &w, &g) {
        let operation = doc.operation(&method, &template);
        if operation.get("security").is_some() {
            Call::new(&method, &template, path.clone()).expect(&server, &doc, 401).await;
        }
        if operation.get("requestBody").is_none() {
            continue;
        }
        let call = |content_type: &'static str, bytes: &[u8]| {
            Call::new(&method, &template, path.clone()).token("root-token").raw(content_type, bytes.to_vec())
        };
        call("application/json", b"{").expect(&server, &doc, 400).await;
        call("text/plain", b"{}").expect(&server, &doc, 415).await;
        call("application/json", &vec![b' '; MAX_BODY + 1]).expect(&server, &doc, 413).await;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer root-token\r\n\
             Content-Type: application/json\r\nContent-Length: 20\r\n\r\n"
        );
        let (status, text) = raw_status(&server, &head).await;
        assert_eq!(status, 408, "{method} {path} with a body that never arrives: {text}");
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or_default();
        let problem = head.to_ascii_lowercase().contains("content-type: application/problem+json");
        let body = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"));
        doc.assert_lists_answer(&method, &template, status, if problem { PROBLEM_JSON } else { head }, &body);
    }
    server.stop().await;
}

/// The store's failures, as each operation that reads runs, grants or counts meets them (reads failing:
/// a broken store) and as each that writes — starts, decisions, cancels, grants, purges — meets them
/// (writes failing: an outage), on a server without tokens and in the document it serves.
#[tokio::test(flavor = "multi_thread")]
async fn the_store_s_failures_are_listed_where_they_are_answered() {
    let failures = [
        (StoreError::DiskFull("SQLITE_FULL".into()), 507),
        (StoreError::ReadOnly("SQLITE_READONLY".into()), 503),
        (StoreError::CorruptDatabase("page 7".into()), 500),
        (StoreError::Unreachable("connection refused".into()), 503),
    ];
    for (error, status) in failures {
        // Reads fail: every operation that reads a run, the log, grants or the counts, and `/readyz`'s probe.
        let store = Arc::new(FailingStore::broken(common::open_store(&Default::default()).await, error.clone()));
        let server = Server::start(Config { store: Some(store), ..Config::default() }).await;
        let doc = Document::served(&server).await;
        let run = "01980000-0000-7000-8000-000000000001";
        let body = json!({"turn_digest": "sha256:00", "approve_all": true});
        let reads = [
            Call::new("GET", "/v1/runs", "/v1/runs"),
            Call::new("GET", "/v1/runs/{id}", format!("/v1/runs/{run}")),
            Call::new("GET", "/v1/runs/{id}/events", format!("/v1/runs/{run}/events")),
            Call::new("GET", "/v1/runs/{id}/events", format!("/v1/runs/{run}/events"))
                .header("accept", b"text/event-stream"),
            Call::new("POST", "/v1/runs/{id}/decisions", format!("/v1/runs/{run}/decisions")).json(body),
            Call::new("POST", "/v1/runs/{id}/cancel", format!("/v1/runs/{run}/cancel")),
            Call::new("GET", "/v1/grants", "/v1/grants"),
            Call::new("GET", "/v1/grants/{id}", format!("/v1/grants/{run}")),
            Call::new("GET", "/metrics", "/metrics"),
        ];
        for call in &reads {
            call.expect(&server, &doc, status).await;
        }
        Call::new("GET", "/readyz", "/readyz").expect(&server, &doc, 503).await;
        server.stop().await;

        // Writes fail: a start, a decision, a cancel, a grant made and revoked, a purge.
        let outage = Arc::new(Outage::default());
        let inner = common::open_store(&Default::default()).await;
        let store = Arc::new(FailingStore::with_outage(inner, outage.clone()));
        let server = Server::start(Config { store: Some(store), ..Config::default() }).await;
        let waiting = server.waiting_run(PAIR, "held").await;
        let run = id(&waiting);
        let grant = json!({"agent": PAIR, "tool": "write", "match": {"/text": "never written here"}});
        let made = Call::new("POST", "/v1/grants", "/v1/grants").json(grant.clone()).expect(&server, &doc, 201).await;
        let made = made.body["id"].as_str().unwrap_or_default().to_owned();
        outage.begin(error.clone(), false);
        let approve = json!({"turn_digest": digest(&waiting), "approve_all": true});
        let writes = [
            Call::new("POST", "/v1/runs", "/v1/runs").json(json!({"agent": PAIR, "input": "x"})),
            Call::new("POST", "/v1/runs/{id}/decisions", format!("/v1/runs/{run}/decisions")).json(approve),
            Call::new("POST", "/v1/runs/{id}/cancel", format!("/v1/runs/{run}/cancel")),
            Call::new("POST", "/v1/grants", "/v1/grants").json(grant),
            Call::new("DELETE", "/v1/grants/{id}", format!("/v1/grants/{made}")),
            Call::new("POST", "/v1/purge", "/v1/purge").json(json!({"older_than": "0s"})),
        ];
        for call in &writes {
            call.expect(&server, &doc, status).await;
        }
        outage.end();
        server.stop().await;
    }
}

/// Past `max_connections` every operation but `/healthz` answers a caller without a token 503.
#[tokio::test(flavor = "multi_thread")]
async fn past_the_connection_limit_every_operation_but_healthz_answers_503_as_listed() {
    let server = Server::start(Config {
        tokens: common::tokens(),
        tune: Some(|o| {
            o.max_connections = 2;
            o.reserved_connections = 4;
            o.idle_timeout = Duration::from_secs(60);
        }),
        ..Default::default()
    })
    .await;
    // No request before the two idle connections that take every place: none of its connections may
    // still count, or be reused. The document is the one served with tokens.
    let doc = Document(serde_json::from_str(&tollgate_agent_server::openapi_json()).unwrap_or_default());
    let addr = server.base.trim_start_matches("http://").to_owned();
    let connect = || tokio::net::TcpStream::connect(addr.clone());
    let held = (connect().await.unwrap_or_else(|e| panic!("{e}")), connect().await.unwrap_or_else(|e| panic!("{e}")));
    let run = "01980000-0000-7000-8000-000000000001";
    for (method, template, path) in every_operation(&doc, run, "01980000-0000-7000-8000-00000000beef") {
        let call = Call::new(&method, &template, path);
        if template == "/healthz" {
            call.expect(&server, &doc, 200).await;
        } else {
            let reply = call.expect(&server, &doc, 503).await;
            assert_eq!(reply.body["type"], "https://tollgate.dev/problems/unavailable", "{}", reply.body);
        }
    }
    drop(held);
    server.stop().await;
}

/// A path called with a method it does not list: 405, a problem document with `Allow`, as the
/// document's description says (no operation answers it: it is the answer to no operation).
#[tokio::test]
async fn a_method_a_path_does_not_list_is_405_as_the_document_says() {
    let server = Server::start(Config::default()).await;
    let doc = Document::served(&server).await;
    let description = doc.0["info"]["description"].as_str().unwrap_or_default();
    assert!(description.contains("405 `method-not-allowed`"), "{description}");
    let mut paths: Vec<String> = doc.operations().into_iter().map(|(_, template)| template).collect();
    paths.dedup();
    for template in paths {
        let listed: Vec<String> = doc.0["paths"][&template]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(method, _)| method.to_ascii_uppercase())
            .collect();
        let path = concrete(&template, "01980000-0000-7000-8000-000000000001", "01980000-0000-7000-8000-000000000002");
        let reply = Call::new("PATCH", &template, path.clone()).send(&server).await;
        reply.assert_problem(405, "method-not-allowed");
        let allow = reply.headers.get("allow").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        for method in &listed {
            assert!(allow.split(',').any(|m| m.trim() == method), "PATCH {path}: `Allow: {allow}` lacks {method}");
        }
    }
    server.stop().await;
}

/// `Last-Event-ID` as docs/api.md states it, through a real socket: one event seq, else 422
/// `invalid-request` — an empty, blank or non-ASCII value is refused, never taken as absent — on the
/// stream and the JSON form alike; a good one resumes after it.
#[tokio::test]
async fn last_event_id_is_one_event_seq_or_422() {
    let server = Server::start(Config::default()).await;
    let doc = Document::served(&server).await;
    let run = server.waiting_run(SCRIBE, "resume").await;
    let events = format!("/v1/runs/{}/events", id(&run));
    let bad: [&[&[u8]]; 8] = [
        &[b""],
        &[b"   "],
        &[b"\xe2\x80\x8b7"],
        &[b"s\xe9q"],
        &[b"+7"],
        &[b"7 8"],
        &[b"9223372036854775808"],
        &[b"1", b"2"],
    ];
    for values in bad {
        for sse in [true, false] {
            let mut call = Call::new("GET", "/v1/runs/{id}/events", events.clone());
            if sse {
                call = call.header("accept", b"text/event-stream");
            }
            for value in values {
                call = call.header("last-event-id", value);
            }
            let reply = call.expect(&server, &doc, 422).await;
            reply.assert_problem(422, "invalid-request");
            assert!(reply.body["detail"].as_str().is_some_and(|d| d.contains("Last-Event-ID")), "{}", reply.body);
        }
    }
    // A seq resumes after it: the first event sent is the next one.
    let mut stream = crate::sse::Stream::new(crate::sse::Stream::open(&server, &events, Some("1")).await);
    let first = stream.next().await.unwrap_or_else(|| panic!("the stream ended before an event"));
    assert_eq!(first.id.as_deref(), Some("2"), "{first:?}");
    drop(stream);
    server.stop().await;
}
