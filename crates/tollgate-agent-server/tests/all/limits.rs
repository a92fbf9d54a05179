//! No unbounded connections (docs/api.md, "Limits"): slow and idle connections are closed, connections
//! past `max_connections` are refused while `/healthz` and authenticated callers still get through, and
//! live-event streams are capped per client. Every test runs on a real socket with short limits.

use crate::common::{self, Config, SCRIBE, Server};
use serde_json::json;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a test waits for something that should happen well before it.
const BOUND: Duration = Duration::from_secs(10);

fn addr(server: &Server) -> SocketAddr {
    server.base.trim_start_matches("http://").parse().unwrap_or_else(|e| panic!("{e}"))
}

async fn connect(server: &Server) -> TcpStream {
    TcpStream::connect(addr(server)).await.unwrap_or_else(|e| panic!("{e}"))
}

/// Reads until the server closes the connection (EOF or reset) and returns what it sent; panics if it is
/// still open after [`BOUND`].
async fn until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(BOUND, stream.read(&mut buf)).await {
            Err(_) => panic!("the connection is still open after {BOUND:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => return received,
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads one response with a `Content-Length` body, leaving the connection open.
async fn one_response(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&received).into_owned();
        if tollgate_agent_testkit::http_message_len(&received).is_some() {
            return text;
        }
        let n = tokio::time::timeout(BOUND, stream.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("no full response within {BOUND:?}: {text:?}"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(n > 0, "closed mid-response: {text:?}");
        received.extend_from_slice(&buf[..n]);
    }
}

async fn send(stream: &mut TcpStream, text: &str) {
    stream.write_all(text.as_bytes()).await.unwrap_or_else(|e| panic!("{e}"));
}

/// The value of an unlabelled (or fully labelled) sample in `/metrics`.
async fn metric(server: &Server, sample: &str) -> u64 {
    let reply = server.call("GET", "/metrics", Some("root-token"), None).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let text = reply.body.as_str().unwrap_or_default().to_owned();
    text.lines()
        .find_map(|line| line.strip_prefix(sample).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {sample} in /metrics:\n{text}"))
}

/// Repeats `attempt` until it returns true, for at most [`BOUND`] (the server frees a connection's
/// place once it sees the close, a moment after the client's).
async fn eventually(what: &str, mut attempt: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while started.elapsed() < BOUND {
        if attempt().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what}: not within {BOUND:?}");
}

fn with_tokens(tune: fn(&mut tollgate_agent_server::ServerOptions)) -> Config {
    Config { tokens: common::tokens(), tune: Some(tune), ..Default::default() }
}

#[tokio::test]
async fn a_request_head_sent_too_slowly_is_cut_off_after_the_header_read_timeout() {
    let server = Server::start(with_tokens(|o| {
        o.header_read_timeout = Duration::from_millis(300);
        o.idle_timeout = Duration::from_secs(60);
    }))
    .await;
    let mut slow = connect(&server).await;
    send(&mut slow, "GET /healthz HTTP/1.1\r\nHost: loc").await;
    let sent = Instant::now();
    let received = until_closed(&mut slow).await;
    assert!(received.is_empty(), "nothing is answered: {:?}", String::from_utf8_lossy(&received));
    // Closed by the header deadline (300 ms after the first byte), long before the idle one (60 s).
    assert!(sent.elapsed() >= Duration::from_millis(300), "not before the header-read timeout");
    assert_eq!(metric(&server, "tollgate_connections_timed_out_total{timeout=\"header_read\"}").await, 1);
    server.stop().await;
}

/// A body trickled one byte every 200 ms is answered 408 `request-timeout` at `body_timeout` (its head
/// arrived whole, so no other deadline applies), the connection is closed, and nothing is written. At
/// that pace the body would take longer than [`BOUND`] to arrive: without the deadline the test fails.
#[tokio::test]
async fn a_trickled_body_is_closed_at_the_body_timeout() {
    let server = Server::start(with_tokens(|o| o.body_timeout = Duration::from_millis(600))).await;
    let body = format!(r#"{{"agent": "{SCRIBE}", "input": "a body sent one byte at a time, 200 ms apart"}}"#);
    let mut stream = connect(&server).await;
    let head = format!(
        "POST /v1/runs HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer carol-token\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    send(&mut stream, &head).await;
    // One byte every 200 ms until the answer begins; then read it to the close.
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    let mut bytes = body.bytes();
    let started = Instant::now();
    while received.is_empty() {
        assert!(started.elapsed() < BOUND, "no answer within {BOUND:?}");
        if let Some(byte) = bytes.next() {
            stream.write_all(&[byte]).await.unwrap_or_else(|e| panic!("{e}"));
        }
        tokio::select! {
            read = stream.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            },
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
    received.extend(until_closed(&mut stream).await);
    let response = String::from_utf8_lossy(&received);
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(response.contains("https://tollgate.dev/problems/request-timeout"), "{response}");
    assert!(response.to_ascii_lowercase().contains("connection: close"), "{response}");
    assert_eq!(server.run_count().await, 0, "nothing is written");
    server.stop().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let idle = Duration::from_millis(1200);
    let server = Server::start(with_tokens(|o| {
        o.header_read_timeout = Duration::from_millis(200);
        o.idle_timeout = Duration::from_millis(1200);
    }))
    .await;
    let mut kept = connect(&server).await;
    send(&mut kept, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
    let response = one_response(&mut kept).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(!response.to_ascii_lowercase().contains("connection: close"), "kept alive: {response}");
    let answered = Instant::now();
    let received = until_closed(&mut kept).await;
    assert!(received.is_empty(), "{:?}", String::from_utf8_lossy(&received));
    // The idle deadline, not the header one (200 ms), closed it (a margin for the response's last bytes
    // reaching us after the server counted the connection idle).
    assert!(answered.elapsed() + Duration::from_millis(100) >= idle, "closed after {:?}", answered.elapsed());
    assert!(metric(&server, "tollgate_connections_timed_out_total{timeout=\"idle\"}").await >= 1);
    server.stop().await;
}

#[tokio::test]
async fn past_max_connections_only_health_checks_and_authenticated_callers_are_served() {
    let server = Server::start(with_tokens(|o| {
        o.max_connections = 2;
        o.reserved_connections = 8;
        o.idle_timeout = Duration::from_secs(60);
        o.header_read_timeout = Duration::from_secs(5);
    }))
    .await;
    // Two idle connections take every place.
    let first = connect(&server).await;
    let _second = connect(&server).await;

    // The next one is refused with a problem document, and closed.
    let mut refused = connect(&server).await;
    send(&mut refused, "GET /openapi.json HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
    let answer = String::from_utf8_lossy(&until_closed(&mut refused).await).into_owned();
    let lower = answer.to_ascii_lowercase();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(lower.contains("content-type: application/problem+json"), "{answer}");
    assert!(lower.contains("connection: close") && lower.contains("retry-after: 1"), "{answer}");
    assert!(answer.contains(r#""type":"https://tollgate.dev/problems/unavailable""#), "{answer}");

    // The same through a client: refused, yet `/healthz` and callers with a token still get through.
    server.get("/openapi.json").await.assert_problem(503, "unavailable");
    assert_eq!(server.get("/healthz").await.status, 200);
    let listed = server.call("GET", "/v1/runs", Some("alice-token"), None).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let started = server.call("POST", "/v1/runs", Some("alice-token"), Some(json!({"agent": SCRIBE, "input": "x"})));
    assert_eq!(started.await.status, 201);
    let unknown = server.call("GET", "/v1/runs", Some("stolen-token"), None).await;
    unknown.assert_problem(503, "unavailable");

    // Once an idle connection goes, its place serves anyone again.
    drop(first);
    eventually("a freed place serves a request without a token", async || {
        server.get("/openapi.json").await.status == 200
    })
    .await;
    assert!(metric(&server, "tollgate_connections_refused_total").await >= 3);
    // Shutdown does not wait for the idle connection still held.
    server.stop().await;
}

#[tokio::test]
async fn with_the_reserve_taken_too_a_connection_is_closed_unanswered() {
    let server = Server::start(with_tokens(|o| {
        o.max_connections = 1;
        o.reserved_connections = 1;
        o.idle_timeout = Duration::from_secs(60);
        o.header_read_timeout = Duration::from_secs(30);
    }))
    .await;
    let _served = connect(&server).await;
    let _reserved = connect(&server).await;
    let mut third = connect(&server).await;
    let received = until_closed(&mut third).await;
    assert!(received.is_empty(), "{:?}", String::from_utf8_lossy(&received));
    server.stop().await;
}

/// Opens a live-event stream of `run` and returns its status (the response is kept open in `held` on 200).
async fn stream(
    server: &Server,
    client: &reqwest::Client,
    token: Option<&str>,
    run: &str,
    held: &mut Vec<reqwest::Response>,
) -> (u16, serde_json::Value) {
    let mut request = client.get(server.url(&format!("/v1/runs/{run}/events"))).header("accept", "text/event-stream");
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap_or_else(|e| panic!("{e}"));
    let status = response.status().as_u16();
    if status == 200 {
        held.push(response);
        return (status, serde_json::Value::Null);
    }
    let retry_after = response.headers().get("retry-after").cloned();
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    if status == 429 {
        assert_eq!(body["type"], "https://tollgate.dev/problems/too-many-requests", "{body}");
        assert!(retry_after.is_some(), "a 429 says when to retry");
    }
    (status, body)
}

#[tokio::test]
async fn a_token_holds_at_most_max_streams_per_client_and_others_still_stream() {
    let server = Server::start(with_tokens(|o| o.max_streams_per_client = 2)).await;
    let reply = server
        .call("POST", "/v1/runs", Some("carol-token"), Some(json!({"agent": SCRIBE, "input": "s", "wait": true})))
        .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    let run = common::id(&reply.body);
    let client = reqwest::Client::new();
    let mut alice = Vec::new();
    assert_eq!(stream(&server, &client, Some("alice-token"), &run, &mut alice).await.0, 200);
    assert_eq!(stream(&server, &client, Some("alice-token"), &run, &mut alice).await.0, 200);
    let (status, body) = stream(&server, &client, Some("alice-token"), &run, &mut alice).await;
    assert_eq!(status, 429, "{body}");
    let mut bob = Vec::new();
    assert_eq!(stream(&server, &client, Some("bob-token"), &run, &mut bob).await.0, 200, "another client streams");
    assert_eq!(metric(&server, "tollgate_sse_streams_open").await, 3);
    assert_eq!(metric(&server, "tollgate_sse_streams_refused_total").await, 1);

    // Closing one of alice's streams gives her the place back.
    alice.pop();
    eventually("alice streams again once one of hers closed", async || {
        stream(&server, &client, Some("alice-token"), &run, &mut alice).await.0 == 200
    })
    .await;
    drop((alice, bob));
    server.stop().await;
}

#[tokio::test]
async fn without_auth_streams_are_capped_per_peer_address() {
    let server = Server::start(Config { tune: Some(|o| o.max_streams_per_client = 1), ..Default::default() }).await;
    let run = common::id(&server.waiting_run(SCRIBE, "per address").await);
    let here = reqwest::Client::new();
    // Another address of the loopback network is another client.
    let elsewhere = reqwest::Client::builder()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut held = Vec::new();
    assert_eq!(stream(&server, &here, None, &run, &mut held).await.0, 200);
    assert_eq!(stream(&server, &here, None, &run, &mut held).await.0, 429);
    assert_eq!(stream(&server, &elsewhere, None, &run, &mut held).await.0, 200);
    drop(held);
    server.stop().await;
}
