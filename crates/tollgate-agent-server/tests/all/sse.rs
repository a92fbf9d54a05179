//! Live events over SSE, parsed by hand: `id:` = seq, `event:` = kind, `data:` = the event JSON; a
//! reconnect with `Last-Event-ID` resumes after it (and wins over `?after=`); the stream ends after the
//! terminal event; a client that goes away changes nothing.

use crate::common::{Config, SCRIBE, Server, TALKER, digest, id};
use serde_json::{Value, json};
use std::time::Duration;
use tollgate_agent_testkit::SseFrames;

/// One parsed SSE event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SseEvent {
    pub(crate) id: Option<String>,
    pub(crate) event: Option<String>,
    pub(crate) data: Value,
}

/// An open SSE response, read frame by frame.
pub(crate) struct Stream {
    response: reqwest::Response,
    frames: SseFrames,
}

impl Stream {
    pub(crate) async fn open(server: &Server, path: &str, last_event_id: Option<&str>) -> reqwest::Response {
        let mut request = server.client.get(server.url(path)).header("accept", "text/event-stream");
        if let Some(last) = last_event_id {
            request = request.header("last-event-id", last);
        }
        request.send().await.unwrap_or_else(|e| panic!("{e}"))
    }

    pub(crate) fn new(response: reqwest::Response) -> Self {
        assert_eq!(response.status().as_u16(), 200);
        let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
        assert!(content_type.starts_with("text/event-stream"), "{content_type}");
        Self { response, frames: SseFrames::default() }
    }

    /// The next event, `None` when the stream ended. Comments (keep-alives) are skipped.
    pub(crate) async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(frame) = self.frames.next_frame() {
                let data = serde_json::from_str(&frame.data)
                    .unwrap_or_else(|e| panic!("data is not JSON ({e}): {}", frame.data));
                return Some(SseEvent { id: frame.id, event: frame.event, data });
            }
            let chunk = tokio::time::timeout(Duration::from_secs(20), self.response.chunk())
                .await
                .unwrap_or_else(|_| panic!("no SSE frame within 20 s"))
                .unwrap_or_else(|e| panic!("{e}"))?;
            self.frames.push(&chunk);
        }
    }
}

#[tokio::test]
async fn follow_a_run_live_and_reconnect_with_last_event_id() {
    let server = Server::start(Config::default()).await;
    let run = server.waiting_run(SCRIBE, "live").await;
    let path = format!("/v1/runs/{}/events", id(&run));

    let mut stream = Stream::new(Stream::open(&server, &path, None).await);
    let mut seen = Vec::new();
    while let Some(event) = stream.next().await {
        assert_eq!(event.id.as_deref(), event.data["seq"].as_u64().map(|s| s.to_string()).as_deref());
        assert_eq!(event.event.as_deref(), event.data["kind"].as_str());
        let kind = event.data["kind"].as_str().unwrap_or_default().to_owned();
        seen.push(event);
        if kind == "approval_requested" {
            break;
        }
    }
    assert_eq!(
        seen.iter().map(|e| e.data["kind"].as_str().unwrap_or_default()).collect::<Vec<_>>(),
        vec!["run_started", "model_request", "model_response", "approval_requested"]
    );
    let json_events = server.get(&path).await.body["events"].clone();
    assert_eq!(Value::Array(seen.iter().map(|e| e.data.clone()).collect()), json_events, "SSE data is the event JSON");

    // The client goes away while the run waits; that changes nothing.
    drop(stream);
    assert_eq!(server.get(&format!("/v1/runs/{}", id(&run))).await.body["status"], "waiting_for_approval");

    // Reconnect after the last event seen, then decide: the rest arrives live and the stream ends.
    let last = seen.last().and_then(|e| e.id.clone()).unwrap_or_default();
    let mut stream = Stream::new(Stream::open(&server, &format!("{path}?after=1"), Some(&last)).await);
    let decided = server
        .post(&format!("/v1/runs/{}/decisions", id(&run)), json!({"turn_digest": digest(&run), "approve_all": true}))
        .await;
    assert_eq!(decided.status, 200);
    let mut rest = Vec::new();
    while let Some(event) = stream.next().await {
        rest.push(event);
    }
    let kinds: Vec<&str> = rest.iter().map(|e| e.data["kind"].as_str().unwrap_or_default()).collect();
    assert_eq!(kinds.first(), Some(&"decision"), "Last-Event-ID wins over ?after=: {kinds:?}");
    assert_eq!(kinds.last(), Some(&"run_completed"), "the stream ends after the terminal event: {kinds:?}");
    assert!(kinds.contains(&"run_resumed") && kinds.contains(&"tool_finished"), "{kinds:?}");
    let all: Vec<Value> = seen.iter().chain(rest.iter()).map(|e| e.data.clone()).collect();
    assert_eq!(Value::Array(all), server.get(&path).await.body["events"], "every event once, in order");

    // A finished run streams what is after the cursor and ends; with nothing left it answers 204.
    let mut replay = Stream::new(Stream::open(&server, &format!("{path}?after=9"), None).await);
    let mut replayed = Vec::new();
    while let Some(event) = replay.next().await {
        replayed.push(event.data["seq"].as_u64().unwrap_or_default());
    }
    let total = all_count(&server, &path).await;
    assert_eq!(replayed, (10..=total).collect::<Vec<_>>());
    let done = Stream::open(&server, &path, Some(&total.to_string())).await;
    assert_eq!(done.status().as_u16(), 204, "nothing left: EventSource stops reconnecting");
    server.stop().await;
}

/// With `deltas=true` the stream also carries the model's text as it streams: `model_delta` events with
/// no `id:` line, `{"round", "text"}`, between the stored events, which are all there, in order, as
/// without it. Without `deltas=true` no delta is sent.
#[tokio::test]
async fn deltas_true_adds_the_models_live_text_without_ids() {
    let server = Server::start(Config::default()).await;
    for with_deltas in [true, false] {
        let run = server.waiting_run(SCRIBE, "live text").await;
        let path = format!("/v1/runs/{}/events", id(&run));
        let query = if with_deltas { "?deltas=true" } else { "?deltas=false" };
        let mut stream = Stream::new(Stream::open(&server, &format!("{path}{query}"), Some("4")).await);
        let decided = server
            .post(
                &format!("/v1/runs/{}/decisions", id(&run)),
                json!({"turn_digest": digest(&run), "approve_all": true}),
            )
            .await;
        assert_eq!(decided.status, 200);
        let mut stored = Vec::new();
        let mut deltas = Vec::new();
        while let Some(event) = stream.next().await {
            if event.event.as_deref() == Some("model_delta") {
                assert_eq!(event.id, None, "a delta has no id: Last-Event-ID stays the last stored seq");
                deltas.push(event.data);
            } else {
                stored.push(event.data);
            }
        }
        let all = server.get(&path).await.body["events"].clone();
        let after_four: Vec<Value> = all.as_array().map(|a| a[4..].to_vec()).unwrap_or_default();
        assert_eq!(stored, after_four, "the stored events, each once, in order");
        if with_deltas {
            assert_eq!(deltas, vec![json!({"round": 2, "text": "do"}), json!({"round": 2, "text": "ne"})]);
            let response = stored.iter().find(|e| e["kind"] == "model_response" && e["round"] == 2);
            assert_eq!(response.map(|e| e["data"]["text"].clone()), Some(json!("done")), "the stored turn is whole");
        } else {
            assert!(deltas.is_empty(), "{deltas:?}");
        }
    }
    let run = server.waiting_run(SCRIBE, "bad query").await;
    let refused = server.call("GET", &format!("/v1/runs/{}/events?deltas=maybe", id(&run)), None, None).await;
    assert_eq!(refused.status, 422, "{:?}", refused.body);
    server.stop().await;
}

/// With a secret configured (in production there always is one: the provider key), the live text holds
/// back a round's tail while the call goes on, and sends it, redacted, when the call answers: the
/// round's deltas still add up to the text of its `model_response` event, before that event.
#[tokio::test]
async fn with_a_secret_configured_a_rounds_deltas_still_add_up_to_its_text() {
    let secret = format!("sk-proj-{}", "0123456789abcdef".repeat(10));
    let server = Server::start(Config { secrets: vec![secret], ..Config::default() }).await;
    let run = server.waiting_run(SCRIBE, "live text").await;
    let path = format!("/v1/runs/{}/events", id(&run));
    let mut stream = Stream::new(Stream::open(&server, &format!("{path}?deltas=true"), Some("4")).await);
    let decided = server
        .post(&format!("/v1/runs/{}/decisions", id(&run)), json!({"turn_digest": digest(&run), "approve_all": true}))
        .await;
    assert_eq!(decided.status, 200);
    let mut streamed = String::new();
    let mut response = None;
    while let Some(event) = stream.next().await {
        if event.event.as_deref() == Some("model_delta") {
            assert_eq!(event.data["round"], 2);
            assert!(response.is_none(), "a round's deltas come before its model_response event");
            streamed.push_str(event.data["text"].as_str().unwrap_or_default());
        } else if event.data["kind"] == "model_response" && event.data["round"] == 2 {
            response = Some(event.data["data"]["text"].clone());
        }
    }
    assert_eq!(response, Some(json!("done")));
    assert_eq!(streamed, "done", "the held tail went out when the call answered");
    server.stop().await;
}

/// A 164-character key, as a provider issues them.
fn long_key() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let body: String = (0..156).map(|i| char::from(ALPHABET[(i * 29 + 5) % ALPHABET.len()])).collect();
    format!("sk-proj-{body}")
}

/// What `talk` streams: short pieces, none of them near a secret.
const TALK: &[&str] = &["I will ", "write a ", "short note", " and then ", "stop."];

/// A provider stream cut after some text (the connection closes cleanly without the stream's end, as a
/// proxy ends a cut stream) is a connection failure: the model call is tried again under `max_retries`,
/// viewers get `{"round", "reset": true}` first, then the new attempt's deltas, which — with a real
/// 164-character key configured — add up to the text of the round's `model_response` event; the run
/// completes. With `max_retries = 0` the run fails with the connection failure's kind.
#[tokio::test]
async fn a_stream_cut_after_deltas_is_tried_again_and_viewers_reset_first() {
    let whole: String = TALK.concat();
    let model = tollgate_agent_testkit::SlowChatModel::cutting(TALK, Duration::ZERO, Duration::from_millis(5), 1, 2)
        .unwrap_or_else(|e| panic!("{e}"));
    // Held until the viewer is connected, so it sees the first attempt too.
    model.hold();
    let config = Config { secrets: vec![long_key()], talker: Some((model.base_url(), 1)), ..Config::default() };
    let server = Server::start(config).await;
    let started = server.post("/v1/runs", json!({"agent": TALKER, "input": "talk"})).await;
    assert!(started.status < 300, "{}", started.body);
    let path = format!("/v1/runs/{}/events?deltas=true", id(&started.body));
    let mut stream = Stream::new(Stream::open(&server, &path, None).await);
    model.release();
    let mut deltas: Vec<Value> = Vec::new();
    let mut response = None;
    while let Some(event) = stream.next().await {
        if event.event.as_deref() == Some("model_delta") {
            assert_eq!(event.id, None, "a delta has no id");
            assert_eq!(event.data["round"], 1, "{}", event.data);
            deltas.push(event.data);
        } else if event.data["kind"] == "model_response" {
            response = event.data["data"]["text"].as_str().map(str::to_owned);
        }
    }
    assert_eq!(response.as_deref(), Some(whole.as_str()), "the run's text is the second attempt's, whole");
    let resets: Vec<usize> = deltas.iter().enumerate().filter(|(_, d)| d["reset"] == true).map(|(at, _)| at).collect();
    assert_eq!(resets.len(), 1, "{deltas:?}");
    assert_eq!(deltas[resets[0]], json!({"round": 1, "reset": true}));
    let text_of = |deltas: &[Value]| deltas.iter().map(|d| d["text"].as_str().unwrap_or_default()).collect::<String>();
    let before = text_of(&deltas[..resets[0]]);
    assert!(!before.is_empty() && TALK[..2].concat().starts_with(&before), "the cut attempt's text: {before:?}");
    assert_eq!(text_of(&deltas[resets[0] + 1..]), whole, "after the reset the deltas add up to the text");
    assert_eq!(server.settled(&id(&started.body)).await["status"], "completed");
    assert_eq!(model.requests(), 2);
    server.stop().await;

    // No retries: the cut stream fails the run as a connection failure (not an invalid response).
    let model = tollgate_agent_testkit::SlowChatModel::cutting(TALK, Duration::ZERO, Duration::ZERO, 1, 2)
        .unwrap_or_else(|e| panic!("{e}"));
    let server = Server::start(Config { talker: Some((model.base_url(), 0)), ..Config::default() }).await;
    let started = server.post("/v1/runs", json!({"agent": TALKER, "input": "talk"})).await;
    let run = server.settled(&id(&started.body)).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["error"]["kind"], "model_connection", "{run}");
    assert_eq!(model.requests(), 1);
    server.stop().await;
}

async fn all_count(server: &Server, path: &str) -> u64 {
    server.get(path).await.body["events"].as_array().map_or(0, |e| e.len() as u64)
}

#[tokio::test]
async fn streams_end_on_cancel_and_on_shutdown_and_unknown_runs_are_404() {
    let server = Server::start(Config::default()).await;
    let cancelled = server.waiting_run(SCRIBE, "cancel me").await;
    let mut stream =
        Stream::new(Stream::open(&server, &format!("/v1/runs/{}/events?after=4", id(&cancelled)), None).await);
    server.post(&format!("/v1/runs/{}/cancel", id(&cancelled)), json!({"reason": "enough"})).await;
    let event = stream.next().await.map(|e| e.data["kind"].clone());
    assert_eq!(event, Some(json!("run_cancelled")));
    assert!(stream.next().await.is_none(), "ended after the terminal event");

    let missing = Stream::open(&server, "/v1/runs/0193b0c6-0000-7000-8000-000000000000/events", None).await;
    assert_eq!(missing.status().as_u16(), 404);

    // An open stream on a waiting run does not hold up shutdown.
    let waiting = server.waiting_run(SCRIBE, "waits").await;
    let mut open = Stream::new(Stream::open(&server, &format!("/v1/runs/{}/events?after=4", id(&waiting)), None).await);
    let reading = tokio::spawn(async move { open.next().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.stop().await;
    let ended = tokio::time::timeout(Duration::from_secs(5), reading).await;
    assert!(matches!(ended, Ok(Ok(None))), "the stream ended with the server: {ended:?}");
}

#[tokio::test]
async fn a_quiet_stream_gets_keep_alives() {
    let server = Server::start(Config { sse_keep_alive: Duration::from_millis(100), ..Default::default() }).await;
    let run = server.waiting_run(SCRIBE, "quiet").await;
    let mut response = Stream::open(&server, &format!("/v1/runs/{}/events?after=4", id(&run)), None).await;
    assert_eq!(response.status().as_u16(), 200);
    let chunk = tokio::time::timeout(Duration::from_secs(5), response.chunk())
        .await
        .unwrap_or_else(|_| panic!("no keep-alive within 5 s"))
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&chunk);
    assert!(text.starts_with(':'), "a keep-alive is an SSE comment: {text:?}");
    drop(response);
    server.stop().await;
}
