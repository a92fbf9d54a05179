use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tollgate_agent_notify::transport::{SetupError, SlackNotifier, Transport};

use crate::{TestResult, notification, refusing_address};

/// The webhook's path is its secret: no error may show it.
const SECRET_PATH: &str = "/services/T0000/B0000/s3cretWebhookToken";

/// A webhook task, giving back the request it read.
type Server = JoinHandle<Result<Request, std::io::Error>>;

/// One request as the server read it.
struct Request {
    head: String,
    body: Vec<u8>,
}

/// Reads one HTTP/1.1 request: its head, then as many body bytes as `content-length` says.
async fn read_request(stream: &mut tokio::net::TcpStream) -> Result<Request, std::io::Error> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let length = head
        .lines()
        .find_map(|line| line.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = buffer[head_end..].to_vec();
    while body.len() < length {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        body.extend_from_slice(&chunk[..read]);
    }
    Ok(Request { head, body })
}

/// A webhook that answers one request with `status` and `body`; the handle gives back the request.
async fn webhook(status: &'static str, body: &'static str) -> Result<(String, Server), std::io::Error> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}{SECRET_PATH}", listener.local_addr()?);
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await?;
        let request = read_request(&mut stream).await?;
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await?;
        Ok(request)
    });
    Ok((url, server))
}

#[tokio::test]
async fn a_2xx_answer_delivers_the_block_kit_message() -> TestResult {
    let (url, server) = webhook("200 OK", "ok").await?;
    let slack = SlackNotifier::new(url, Duration::from_secs(10))?;
    slack.send(&notification()).await?;
    let request = server.await??;
    assert!(request.head.starts_with(&format!("POST {SECRET_PATH} HTTP/1.1\r\n")), "{}", request.head);
    assert!(request.head.to_ascii_lowercase().contains("content-type: application/json"), "{}", request.head);
    let message: serde_json::Value = serde_json::from_slice(&request.body)?;
    assert_eq!(message["blocks"][0]["type"], "header");
    let urls: Vec<&str> = message["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|block| block["type"] == "actions")
        .flat_map(|block| block["elements"].as_array().into_iter().flatten())
        .filter_map(|button| button["url"].as_str())
        .collect();
    assert_eq!(urls.len(), 5, "{urls:?}");
    assert!(urls.contains(&"https://tollgate.example.com/approve/t1.deny2.mac"));
    Ok(())
}

#[tokio::test]
async fn a_server_error_may_pass_and_a_client_error_will_not() -> TestResult {
    for (status, retryable) in [
        ("500 Internal Server Error", true),
        ("503 Service Unavailable", true),
        ("429 Too Many Requests", true),
        ("400 Bad Request", false),
        ("404 Not Found", false),
    ] {
        let (url, server) = webhook(status, "invalid_payload").await?;
        let slack = SlackNotifier::new(url, Duration::from_secs(10))?;
        let error = slack.send(&notification()).await.expect_err(status);
        server.await??;
        assert_eq!(error.retryable, retryable, "{status}: {error}");
        let code = &status[..3];
        assert_eq!(error.to_string(), format!("Slack answered HTTP {code}: invalid_payload"));
    }
    Ok(())
}

#[tokio::test]
async fn a_redirect_is_not_followed() -> TestResult {
    let (url, server) = webhook("302 Found\r\nlocation: http://127.0.0.1:9/elsewhere", "").await?;
    let error = SlackNotifier::new(url, Duration::from_secs(10))?.send(&notification()).await.expect_err("a 302");
    server.await??;
    assert!(!error.retryable);
    assert_eq!(error.to_string(), "Slack answered HTTP 302");
    Ok(())
}

#[tokio::test]
async fn a_refused_connection_may_pass_and_hides_the_url() -> TestResult {
    let address = refusing_address().await?;
    let slack = SlackNotifier::new(format!("http://{address}{SECRET_PATH}"), Duration::from_secs(10))?;
    let error = slack.send(&notification()).await.expect_err("nothing listens");
    assert!(error.retryable, "{error}");
    assert!(error.to_string().starts_with("cannot connect to Slack"), "{error}");
    assert!(!error.to_string().contains("s3cret") && !format!("{error:?}").contains("s3cret"), "{error:?}");
    assert!(!format!("{slack:?}").contains("s3cret"));
    Ok(())
}

#[tokio::test]
async fn a_webhook_that_never_answers_times_out() -> TestResult {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}{SECRET_PATH}", listener.local_addr()?);
    // Reads the request, then holds the connection without answering until the client gives up.
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await?;
        read_request(&mut stream).await?;
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest).await;
        Ok::<_, std::io::Error>(())
    });
    let slack = Transport::Slack(SlackNotifier::new(url, Duration::from_millis(300))?);
    let started = std::time::Instant::now();
    let error = slack.send(&notification()).await.expect_err("no answer");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert!(error.retryable, "{error}");
    assert_eq!(error.to_string(), "Slack did not answer within 300ms");
    server.await??;
    Ok(())
}

#[test]
fn a_webhook_url_must_be_http() {
    for bad in ["", "hooks.slack.com/services/x", "ftp://hooks.slack.com/x", "javascript:alert(1)"] {
        assert_eq!(SlackNotifier::new(bad.into(), Duration::from_secs(1)).err(), Some(SetupError::SlackUrl), "{bad}");
    }
    assert!(!SetupError::SlackUrl.to_string().contains("hooks"));
}
