//! [`SlowChatModel`]: an OpenAI-compatible Chat Completions server on loopback that streams a fixed
//! answer a piece at a time, for end-to-end tests of live model text (a real `tollgate` process with an
//! `openai` provider whose `base_url` is [`SlowChatModel::base_url`]). Plain threads and blocking I/O:
//! it serves any test, async or not, and lives as long as the test process.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

/// A slow streaming model: every request gets `pieces` as `delta.content` chunks, the first after
/// `first`, then one every `every`, then `finish_reason: stop`, the usage and `[DONE]`. Built with
/// [`SlowChatModel::cutting`], its first answers are cut instead.
#[derive(Debug, Clone)]
pub struct SlowChatModel {
    port: u16,
    requests: Arc<AtomicUsize>,
    held: Arc<Held>,
}

/// Whether answers wait ([`SlowChatModel::hold`]).
#[derive(Debug, Default)]
struct Held {
    held: Mutex<bool>,
    released: Condvar,
}

impl Held {
    fn wait(&self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        while *held {
            held = self.released.wait(held).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl SlowChatModel {
    /// Starts the server on a free loopback port.
    pub fn start(pieces: &'static [&'static str], first: Duration, every: Duration) -> std::io::Result<Self> {
        Self::cutting(pieces, first, every, 0, 0)
    }

    /// As [`start`](Self::start), but the first `cut` answers stop after `after` pieces: the connection
    /// closes cleanly without the end of the stream (no `finish_reason`, no `[DONE]`), as a proxy ends a
    /// stream cut on its way.
    pub fn cutting(
        pieces: &'static [&'static str],
        first: Duration,
        every: Duration,
        cut: usize,
        after: usize,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        let requests = Arc::new(AtomicUsize::new(0));
        let held = Arc::new(Held::default());
        let (counted, holding) = (Arc::clone(&requests), Arc::clone(&held));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let number = counted.fetch_add(1, Ordering::SeqCst);
                let sent = if number < cut { &pieces[..after.min(pieces.len())] } else { pieces };
                let whole = number >= cut;
                let holding = Arc::clone(&holding);
                std::thread::spawn(move || {
                    holding.wait();
                    answer(stream, sent, first, every, whole);
                });
            }
        });
        Ok(Self { port, requests, held })
    }

    /// Answers wait from now on, until [`release`](Self::release) (so that a test can start watching
    /// before the first piece goes out).
    pub fn hold(&self) {
        *self.held.held.lock().unwrap_or_else(PoisonError::into_inner) = true;
    }

    /// Answers go out again, the waiting ones first.
    pub fn release(&self) {
        *self.held.held.lock().unwrap_or_else(PoisonError::into_inner) = false;
        self.held.released.notify_all();
    }

    /// How many requests it has taken so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// `http://127.0.0.1:PORT/v1`, the `base_url` of an `openai` provider.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }
}

fn answer(mut stream: TcpStream, pieces: &[&str], first: Duration, every: Duration, whole: bool) {
    // The request: its head, then as many body bytes as it says.
    let mut request = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        let Ok(read) = stream.read(&mut buffer) else { return };
        if read == 0 {
            return;
        }
        request.extend_from_slice(&buffer[..read]);
        if http_message_len(&request).is_some() {
            break;
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
    if !whole {
        return;
    }
    let end = "data: {\"choices\": [{\"index\": 0, \"delta\": {}, \"finish_reason\": \"stop\"}]}\n\n\
               data: {\"choices\": [], \"usage\": {\"prompt_tokens\": 5, \"completion_tokens\": 5}}\n\n\
               data: [DONE]\n\n";
    let _ = stream.write_all(end.as_bytes());
}

/// The length of the HTTP/1.1 message at the start of `received` (its head, then as many body bytes as
/// its `Content-Length` says, none without one), once all of it is there; `None` until then.
pub fn http_message_len(received: &[u8]) -> Option<usize> {
    let text = String::from_utf8_lossy(received);
    let head_end = text.find("\r\n\r\n")?;
    let length = text[..head_end]
        .lines()
        .find_map(|line| line.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
        .and_then(|value| value.parse::<usize>().ok())
        .unwrap_or(0);
    let total = head_end + 4 + length;
    (received.len() >= total).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::http_message_len;

    #[test]
    fn a_message_is_whole_once_its_head_and_body_are_there() {
        assert_eq!(http_message_len(b"GET / HTTP/1.1\r\nHost: x"), None);
        assert_eq!(http_message_len(b"GET / HTTP/1.1\r\n\r\n"), Some(18));
        let post = b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\nab";
        assert_eq!(http_message_len(post), None);
        assert_eq!(http_message_len(b"POST / HTTP/1.1\r\ncontent-length: 4\r\n\r\nabcdEXTRA"), Some(42));
    }
}
