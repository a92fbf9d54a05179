//! `http_request` through the `Tool` port, against servers on 127.0.0.1 only: requests as given, status
//! and body back, non-2xx and redirects as error results, the preview (nothing masked), bad arguments, a capped
//! body, and servers that never answer.

use crate::support::{Fixture, assert_refused, call};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tollgate_agent_core::{Gate, IntoTool, Tool, ToolContext, ToolOutput};
use tollgate_agent_tools::HttpRequest;
use tollgate_agent_tools::http::MAX_BODY_BYTES;
use wiremock::matchers::{body_string, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn http_tool() -> Arc<dyn Tool> {
    HttpRequest::new().into_tool()
}

fn quick_tool() -> Arc<dyn Tool> {
    HttpRequest::with_timeout(Duration::from_millis(300)).into_tool()
}

#[tokio::test]
async fn get_returns_the_status_line_headers_and_body() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/hello"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_string("hello")
                .insert_header("content-type", "text/plain")
                .insert_header("set-cookie", "session=abc"),
        )
        .expect(1)
        .mount(&server)
        .await;
    let out = call(&http_tool(), json!({"method": "GET", "url": format!("{}/hello", server.uri())})).await;
    assert_eq!(out, ToolOutput::text("HTTP/1.1 200 OK\ncontent-type: text/plain\ncontent-length: 5\n\nhello"));
}

#[tokio::test]
async fn post_sends_the_headers_and_body_given() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/items"))
        .and(header("x-trace", "abc"))
        .and(header("content-type", "application/json"))
        .and(body_string(r#"{"name":"pen"}"#))
        .respond_with(ResponseTemplate::new(201).set_body_string(r#"{"id":7}"#))
        .expect(1)
        .mount(&server)
        .await;
    let args = json!({
        "method": "POST",
        "url": format!("{}/items", server.uri()),
        "headers": {"X-Trace": "abc", "Content-Type": "application/json"},
        "body": r#"{"name":"pen"}"#
    });
    let out = call(&http_tool(), args).await;
    assert!(!out.is_error && out.content.starts_with("HTTP/1.1 201 Created\n"), "{out:?}");
    assert!(out.content.ends_with("\n\n{\"id\":7}"), "{out:?}");
}

#[tokio::test]
async fn head_has_no_body() {
    let server = MockServer::start().await;
    Mock::given(method("HEAD")).respond_with(ResponseTemplate::new(204)).expect(1).mount(&server).await;
    let out = call(&http_tool(), json!({"method": "HEAD", "url": server.uri()})).await;
    assert_eq!(out, ToolOutput::text("HTTP/1.1 204 No Content\n\n(empty body)"));
}

#[tokio::test]
async fn non_2xx_is_an_error_result_and_redirects_are_not_followed() {
    let server = MockServer::start().await;
    Mock::given(path("/missing"))
        .respond_with(ResponseTemplate::new(404).set_body_string("no such item"))
        .mount(&server)
        .await;
    Mock::given(path("/moved"))
        .respond_with(ResponseTemplate::new(302).insert_header("location", "/elsewhere"))
        .mount(&server)
        .await;
    Mock::given(path("/elsewhere")).respond_with(ResponseTemplate::new(200)).expect(0).mount(&server).await;

    let out = call(&http_tool(), json!({"method": "DELETE", "url": format!("{}/missing", server.uri())})).await;
    assert!(out.is_error, "{out:?}");
    assert!(
        out.content.starts_with("HTTP/1.1 404 Not Found\n") && out.content.ends_with("\n\nno such item"),
        "{out:?}"
    );

    let out = call(&http_tool(), json!({"method": "GET", "url": format!("{}/moved", server.uri())})).await;
    assert!(out.is_error, "{out:?}");
    assert!(
        out.content.starts_with("HTTP/1.1 302 Found\n") && out.content.contains("\nlocation: /elsewhere\n"),
        "{out:?}"
    );
}

#[tokio::test]
async fn the_preview_hides_nothing_the_model_chose() {
    let tool = http_tool();
    // Credentials the model chose are data it sends out: the approver sees each of them.
    let args = json!({
        "method": "PUT",
        "url": "https://bob:hunter2@api.example.test/v1/items/7?x=1",
        "headers": {"Authorization": "Bearer sk-live-123", "X-Api-Key": "k-456", "Cookie": "sid=789", "X-Session-Token": "t-1", "Accept": "application/json"},
        "body": "{\"name\":\"pen\"}"
    });
    assert_eq!(tool.gate(&args, &ToolContext::listing()), Gate::Ask);
    assert_eq!(tool.validate(&args).await, Ok(()));
    let preview = tool.preview(&args).await.unwrap_or_default();
    assert_eq!(
        preview,
        "PUT https://bob:hunter2@api.example.test/v1/items/7?x=1\nauthorization: Bearer sk-live-123\nx-api-key: k-456\ncookie: sid=789\nx-session-token: t-1\naccept: application/json\nbody (14 bytes):\n{\"name\":\"pen\"}\ntimeout: 30s"
    );
    assert!(!preview.contains("****"), "{preview}");

    // A body up to 16,000 bytes is shown whole; a longer one says how long and where the rest is.
    let whole = format!("{}end", "x".repeat(15_997));
    let preview =
        tool.preview(&json!({"method": "POST", "url": "http://127.0.0.1/", "body": whole})).await.unwrap_or_default();
    assert!(preview.ends_with(&format!("body (16000 bytes):\n{whole}\ntimeout: 30s")), "{}", preview.len());
    let long = format!("{}tail-data", "x".repeat(20_000));
    let preview =
        tool.preview(&json!({"method": "POST", "url": "http://127.0.0.1/", "body": long})).await.unwrap_or_default();
    assert!(preview.contains("\nbody (20009 bytes, the first 16000 shown):\nxxx"), "{}", preview.len());
    assert!(
        preview.ends_with(
            "\n[body cut at 16000 of 20009 bytes: the whole body is this call's `body` argument]\ntimeout: 30s"
        ),
        "{}",
        preview.len()
    );
    let preview = tool.preview(&json!({"method": "GET", "url": "http://127.0.0.1:9/x"})).await.unwrap_or_default();
    assert_eq!(preview, "GET http://127.0.0.1:9/x\nno body\ntimeout: 30s");
}

#[tokio::test]
async fn bad_arguments_are_refused_and_nothing_is_sent() {
    let server = MockServer::start().await;
    let url = server.uri();
    let tool = http_tool();
    let fx = Fixture::new();
    let registry = fx.registry();
    let check = |args: Value| registry.get("http_request").map(|t| t.check_arguments(&args).is_ok());
    assert_eq!(check(json!({"method": "GET", "url": url, "headers": {"a": "b"}, "body": ""})), Some(true));
    assert_eq!(check(json!({"method": "GET"})), Some(false), "url is required");
    assert_eq!(check(json!({"url": url})), Some(false), "method is required");
    assert_eq!(check(json!({"method": "TRACE", "url": url})), Some(false));
    assert_eq!(check(json!({"method": "GET", "url": url, "headers": {"a": 1}})), Some(false));
    assert_eq!(check(json!({"method": "GET", "url": url, "body": {"a": 1}})), Some(false));

    let cases = [
        (json!({"method": "TRACE", "url": url}), "method `TRACE` is not one of"),
        (json!({"method": "get", "url": url}), "method `get` is not one of"),
        (json!({"method": "GET", "url": "ftp://127.0.0.1/file"}), "must be http:// or https://"),
        (json!({"method": "GET", "url": "file:///etc/passwd"}), "must be http:// or https://"),
        (json!({"method": "GET", "url": "/relative/path"}), "url `/relative/path`"),
        (json!({"method": "GET", "url": "not a url"}), "url `not a url`"),
        (json!({"method": "GET", "url": url, "headers": {"bad name": "x"}}), "not a valid header name"),
        (json!({"method": "GET", "url": url, "headers": {"x-a": "one\ntwo"}}), "not a valid header value"),
        (json!({"method": "GET", "url": url, "headers": {"x-a": 1}}), "must be a string"),
        (json!({"method": "GET", "url": url, "timeout": 5}), "unknown field `timeout`"),
        (json!({"method": "GET"}), "missing field `url`"),
    ];
    for (args, needle) in cases {
        assert_refused(&tool, args, needle).await;
    }
    let received = server.received_requests().await.unwrap_or_default();
    assert!(received.is_empty(), "{received:?}");
}

#[tokio::test]
async fn a_large_body_is_capped_with_a_marker() {
    let server = MockServer::start().await;
    Mock::given(path("/big"))
        .respond_with(ResponseTemplate::new(200).set_body_string("a".repeat(200 * 1024)))
        .mount(&server)
        .await;
    Mock::given(path("/blob"))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(vec![0x00, 0x9f, 0x92, 0x96, 0xff]))
        .mount(&server)
        .await;
    let out = call(&http_tool(), json!({"method": "GET", "url": format!("{}/big", server.uri())})).await;
    assert!(!out.is_error, "{}", &out.content[..100]);
    assert!(out.content.ends_with(&format!("\n[body cut at {MAX_BODY_BYTES} bytes; 204800 bytes in all]")));
    assert!(out.content.len() < MAX_BODY_BYTES + 300, "{}", out.content.len());

    let out = call(&http_tool(), json!({"method": "GET", "url": format!("{}/blob", server.uri())})).await;
    assert!(out.content.ends_with("\n\n[binary body: 5 bytes not shown]"), "{out:?}");
}

/// A server on 127.0.0.1 that reads the start of each request, writes `reply` and then holds the
/// connection open forever.
async fn stalling_server(reply: &'static [u8]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut request = [0u8; 1024];
            let _ = socket.read(&mut request).await;
            let _ = socket.write_all(reply).await;
            held.push(socket);
        }
    });
    format!("http://{addr}/")
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    let url = stalling_server(b"").await;
    let out = call(&quick_tool(), json!({"method": "GET", "url": url})).await;
    assert_eq!(out, ToolOutput::error(format!("request timed out after 0.3s: GET {url}")));
}

#[tokio::test]
async fn a_body_that_stops_coming_times_out() {
    let url = stalling_server(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nhello").await;
    let out = call(&quick_tool(), json!({"method": "GET", "url": url})).await;
    assert_eq!(out, ToolOutput::error(format!("request timed out after 0.3s: GET {url}")));
}

#[tokio::test]
async fn a_refused_connection_is_an_error_result() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    drop(listener);
    let out = call(&http_tool(), json!({"method": "GET", "url": format!("http://{addr}/")})).await;
    assert!(out.is_error && out.content.starts_with(&format!("GET http://{addr}/ failed: ")), "{out:?}");
}
