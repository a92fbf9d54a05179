//! [`SlowChatModel`]: an OpenAI-compatible Chat Completions server on loopback that streams a fixed
//! answer a piece at a time, for end-to-end tests of live model text (a real `tollgate` process with an
//! `openai` provider whose `base_url` is [`SlowChatModel::base_url`]). Plain threads and blocking I/O:
//! it serves any test, async or not, and lives as long as the test process.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::Duration;

/// A slow streaming model: every request gets `pieces` as `delta.content` chunks, the first after
/// `first`, then one every `every`, then `finish_reason: stop`, the usage and `[DONE]`.
#[derive(Debug, Clone)]
pub struct SlowChatModel {
    port: u16,
}

impl SlowChatModel {
    /// Starts the server on a free loopback port.
    pub fn start(pieces: &'static [&'static str], first: Duration, every: Duration) -> std::io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || answer(stream, pieces, first, every));
            }
        });
        Ok(Self { port })
    }

    /// `http://127.0.0.1:PORT/v1`, the `base_url` of an `openai` provider.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }
}

fn answer(mut stream: TcpStream, pieces: &[&str], first: Duration, every: Duration) {
    // The request: its head, then as many body bytes as it says.
    let mut request = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        let Ok(read) = stream.read(&mut buffer) else { return };
        if read == 0 {
            return;
        }
        request.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&request).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if request.len() >= end + 4 + length {
                break;
            }
        }
    }
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
    if stream.write_all(head.as_bytes()).is_err() {
        return;
    }
    std::thread::sleep(first);
    for (i, piece) in pieces.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(every);
        }
        let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]});
        if stream.write_all(format!("data: {chunk}\n\n").as_bytes()).and_then(|()| stream.flush()).is_err() {
            return;
        }
    }
    let end = "data: {\"choices\": [{\"index\": 0, \"delta\": {}, \"finish_reason\": \"stop\"}]}\n\n\
               data: {\"choices\": [], \"usage\": {\"prompt_tokens\": 5, \"completion_tokens\": 5}}\n\n\
               data: [DONE]\n\n";
    let _ = stream.write_all(end.as_bytes());
}
