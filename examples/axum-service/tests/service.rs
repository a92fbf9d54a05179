//! The example service as a client sees it: the binary on a free port, plain HTTP/1.1 requests.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

struct Service {
    child: Child,
    addr: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(db: &std::path::Path) -> Service {
    let mut child = Command::new(env!("CARGO_BIN_EXE_example-axum-service"))
        .arg("127.0.0.1:0")
        .env("TOLLGATE_EXAMPLE_DB", db)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("could not start the example: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap_or_else(|e| panic!("{e}"));
    let addr = line.trim().strip_prefix("listening on http://").unwrap_or_else(|| panic!("{line:?}")).to_owned();
    Service { child, addr }
}

/// One request, `Connection: close`; the status and the JSON body.
fn request(service: &Service, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut stream = TcpStream::connect(&service.addr).unwrap_or_else(|e| panic!("{e}"));
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        service.addr,
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body.as_bytes()))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap_or_else(|e| panic!("{e}"));
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{answer}"));
    let (_, body) = answer.split_once("\r\n\r\n").unwrap_or_else(|| panic!("{answer}"));
    (status, serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}")))
}

#[test]
fn a_large_refund_waits_for_support_and_is_paid_once_approved_through_the_service() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let service = start(&dir.path().join("refunds.db"));

    let (status, asked) = request(
        &service,
        "POST",
        "/refunds",
        Some(serde_json::json!({"customer": "c-42", "request": "My order arrived broken"})),
    );
    assert_eq!(status, 201, "{asked}");
    assert_eq!(asked["status"], "waiting_for_approval", "{asked}");
    let run = asked["run"].as_str().unwrap_or_else(|| panic!("{asked}")).to_owned();

    let (status, list) = request(&service, "GET", "/approvals", None);
    assert_eq!(status, 200);
    let waiting = &list["waiting"][0];
    assert_eq!(waiting["run"], run.as_str());
    assert_eq!(waiting["customer"], "c-42");
    assert_eq!(waiting["calls"][0]["arguments"], serde_json::json!({"order": "A-1001", "cents": 7999}));
    let digest = waiting["digest"].as_str().unwrap_or_else(|| panic!("{list}")).to_owned();

    // A stale digest is refused; the right one resumes the run, and the tool sees the customer.
    let (status, _) = request(
        &service,
        "POST",
        &format!("/approvals/{run}"),
        Some(serde_json::json!({"digest": "sha256:00", "approve": true})),
    );
    assert_eq!(status, 409);
    let (status, done) = request(
        &service,
        "POST",
        &format!("/approvals/{run}"),
        Some(serde_json::json!({"digest": digest, "approve": true})),
    );
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed", "{done}");

    // Tollgate's own API, mounted under /tollgate, shows the same run and the tool's result.
    let (status, events) = request(&service, "GET", &format!("/tollgate/v1/runs/{run}/events"), None);
    assert_eq!(status, 200, "{events}");
    let text = events.to_string();
    assert!(text.contains("refunded 7999 cents on order A-1001 to customer c-42"), "{text}");
    let (_, list) = request(&service, "GET", "/approvals", None);
    assert_eq!(list["waiting"], serde_json::json!([]));
}
