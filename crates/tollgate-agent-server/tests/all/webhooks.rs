//! Webhooks against receivers on loopback: one verifies the signature of every delivery, one always
//! fails (and is retried) while runs go on completing; the Standard Webhooks signatures checked by the
//! `standardwebhooks` package from PyPI, which refuses a delivery replayed under another id or time.

use crate::common::{self, Config, SCRIBE, Server, id};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tollgate_agent_core::EventKind;
use tollgate_agent_core::RunId;
use tollgate_agent_server::WebhookTarget;

#[derive(Clone, Default)]
pub(crate) struct Received {
    deliveries: Arc<Mutex<Vec<(HeaderMap, Bytes)>>>,
}

impl Received {
    pub(crate) fn all(&self) -> Vec<(HeaderMap, Bytes)> {
        self.deliveries.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The `X-Tollgate-Delivery` of every request received, sorted (duplicates kept).
    pub(crate) fn delivery_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .all()
            .iter()
            .filter_map(|(headers, _)| headers.get("x-tollgate-delivery")?.to_str().ok().map(str::to_owned))
            .collect();
        ids.sort();
        ids
    }
}

/// Starts a receiver answering `status` to every POST; returns its URL and what it received.
pub(crate) async fn receiver(status: StatusCode) -> (String, Received) {
    start_receiver(status, None).await
}

/// Starts a receiver that takes every POST and never answers; returns its URL and what it received.
pub(crate) async fn hanging_receiver() -> (String, Received) {
    start_receiver(StatusCode::OK, Some(Duration::from_secs(3600))).await
}

async fn start_receiver(status: StatusCode, hang: Option<Duration>) -> (String, Received) {
    let received = Received::default();
    let app = Router::new()
        .route(
            "/hook",
            post(move |State(received): State<Received>, headers: HeaderMap, body: Bytes| async move {
                received.deliveries.lock().unwrap_or_else(PoisonError::into_inner).push((headers, body));
                if let Some(hang) = hang {
                    tokio::time::sleep(hang).await;
                }
                status
            }),
        )
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/hook"), received)
}

fn expected_signature(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Waits (bounded) until `check` holds.
pub(crate) async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} did not happen within 10 s");
}

#[tokio::test]
async fn signed_deliveries_and_a_failing_receiver_that_blocks_nothing() {
    let (good_url, good) = receiver(StatusCode::NO_CONTENT).await;
    let (bad_url, bad) = receiver(StatusCode::INTERNAL_SERVER_ERROR).await;
    let webhooks = vec![
        WebhookTarget {
            url: good_url,
            secret: "hook-secret".into(),
            events: vec![EventKind::ApprovalRequested, EventKind::RunCompleted],
        },
        WebhookTarget { url: bad_url, secret: "other".into(), events: EventKind::ALL.to_vec() },
    ];
    let server = Server::start(Config { webhooks, ..Default::default() }).await;

    let mut ids = Vec::new();
    for i in 0..3 {
        let run = server.waiting_run(SCRIBE, &format!("hook {i}")).await;
        let done = server.approve_and_wait(&run).await;
        assert_eq!(done.body["status"], "completed", "a failing receiver does not hold up a run: {}", done.body);
        ids.push(id(&run));
    }

    eventually("six signed deliveries", || good.all().len() >= 6).await;
    let deliveries = good.all();
    assert_eq!(deliveries.len(), 6, "two listed kinds for each of three runs, each once");
    let mut seen = Vec::new();
    for (headers, body) in &deliveries {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        assert_eq!(
            header("x-tollgate-signature"),
            expected_signature("hook-secret", body),
            "signed over the exact body"
        );
        assert_eq!(header("content-type"), "application/json");
        let payload: Value = serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}"));
        let kind = payload["event"]["kind"].as_str().unwrap_or_default().to_owned();
        assert_eq!(header("x-tollgate-event"), kind);
        let run_id = RunId::from(payload["run_id"].as_str().unwrap_or_default());
        assert_eq!(header("x-tollgate-delivery"), format!("{run_id}:{}", payload["event"]["seq"]));
        // The event is exactly as the events endpoint serves it.
        let events = server.get(&format!("/v1/runs/{run_id}/events")).await.body["events"].clone();
        let stored = events.as_array().and_then(|e| e.iter().find(|e| e["seq"] == payload["event"]["seq"]).cloned());
        assert_eq!(stored, Some(payload["event"].clone()));
        seen.push((run_id, kind));
    }
    seen.sort();
    let mut expected: Vec<(RunId, String)> = ids
        .iter()
        .flat_map(|id| [(id.clone(), "approval_requested".to_owned()), (id.clone(), "run_completed".to_owned())])
        .collect();
    expected.sort();
    assert_eq!(seen, expected);

    // The failing receiver got every event of every run, each tried three times (the test's policy).
    let total_events: usize = {
        let mut n = 0;
        for id in &ids {
            n += server.event_kinds(id).await.len();
        }
        n
    };
    eventually("every retry of the failing receiver", || bad.all().len() >= total_events * 3).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(bad.all().len(), total_events * 3, "three attempts per event, then it gives up");
    let root = server.get("/metrics").await.body.as_str().unwrap_or_default().to_owned();
    assert!(
        root.contains(&format!("tollgate_webhook_deliveries_total{{outcome=\"failed\"}} {total_events}\n")),
        "{root}"
    );
    assert!(root.contains("tollgate_webhook_deliveries_total{outcome=\"delivered\"} 6\n"), "{root}");
    server.stop().await;
}

/// A secret as a Standard Webhooks receiver holds it: `whsec_` + the base64 of the key.
fn whsec(key: &[u8]) -> String {
    format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(key))
}

#[tokio::test(flavor = "multi_thread")]
async fn standard_webhooks_signatures_verify_with_the_pypi_package_and_replays_do_not() {
    let Some(python) = common::python(&["standardwebhooks"]) else { return };
    let kinds = vec![EventKind::ApprovalRequested, EventKind::RunCompleted];
    let (plain_url, plain) = receiver(StatusCode::NO_CONTENT).await;
    let (whsec_url, whsec_received) = receiver(StatusCode::NO_CONTENT).await;
    // A plain secret is the key as it is; a `whsec_` secret is the key in base64 (docs/api.md).
    let whsec_secret = whsec(b"a key of random bytes \x00\xff");
    let webhooks = vec![
        WebhookTarget { url: plain_url, secret: "hook-secret".into(), events: kinds.clone() },
        WebhookTarget { url: whsec_url, secret: whsec_secret.clone(), events: kinds },
    ];
    let server = Server::start(Config { webhooks, ..Default::default() }).await;
    let run = server.waiting_run(SCRIBE, "standard").await;
    assert_eq!(server.approve_and_wait(&run).await.body["status"], "completed");
    eventually("two deliveries to each receiver", || plain.all().len() >= 2 && whsec_received.all().len() >= 2).await;

    let mut cases = Vec::new();
    for (receiver_secret, received) in [(whsec(b"hook-secret"), &plain), (whsec_secret, &whsec_received)] {
        let deliveries = received.all();
        let standard = |headers: &HeaderMap| {
            ["webhook-id", "webhook-timestamp", "webhook-signature"]
                .map(|name| (name, headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()))
        };
        for (headers, _) in &deliveries {
            let [(_, id), _, _] = standard(headers);
            assert_eq!(Some(id.as_str()), headers.get("x-tollgate-delivery").and_then(|v| v.to_str().ok()));
        }
        let case = |name: &str, headers: [(&str, String); 3], body: &Bytes, expect: &str| {
            json!({
                "name": name,
                "secret": receiver_secret,
                "headers": headers.into_iter().map(|(name, value)| (name.to_owned(), Value::String(value))).collect::<serde_json::Map<String, Value>>(),
                "body": String::from_utf8_lossy(body),
                "expect": expect,
            })
        };
        for (headers, body) in &deliveries {
            cases.push(case("as delivered", standard(headers), body, "valid"));
        }
        // The attack: a captured delivery sent again under another delivery's id, or at another time.
        let (first, second) = (&deliveries[0], &deliveries[1]);
        let [id, timestamp, signature] = standard(&first.0);
        let other_id = standard(&second.0)[0].1.clone();
        assert_ne!(id.1, other_id);
        cases.push(case(
            "replayed under another id",
            [("webhook-id", other_id), timestamp.clone(), signature.clone()],
            &first.1,
            "invalid",
        ));
        let later = (timestamp.1.parse::<i64>().unwrap_or_else(|e| panic!("{e}")) + 1).to_string();
        cases.push(case(
            "replayed at another time",
            [id.clone(), ("webhook-timestamp", later), signature.clone()],
            &first.1,
            "invalid",
        ));
        cases.push(case("another body", [id, timestamp, signature], &second.1, "invalid"));
    }
    let file = tollgate_agent_testkit::scratch_dir("standard-webhooks").join("cases.json");
    std::fs::write(&file, serde_json::to_vec(&cases).unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"));
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/verify_standard_webhooks.py");
    let out = std::process::Command::new(python).arg(script).arg(&file).output().unwrap_or_else(|e| panic!("{e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "standardwebhooks disagrees:\n{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("ok: ")).count(), cases.len(), "{text}");
    server.stop().await;
}

#[tokio::test]
async fn a_whsec_secret_that_is_not_base64_is_refused_at_start() {
    let runtime = Server::start(Config::default()).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
    let options = tollgate_agent_server::ServerOptions {
        webhooks: vec![WebhookTarget {
            url: "http://127.0.0.1:9/hook".into(),
            secret: "whsec_not base64!".into(),
            events: EventKind::ALL.to_vec(),
        }],
        ..Default::default()
    };
    let refused =
        tollgate_agent_server::serve_on(listener, runtime.runtime.clone(), options, std::future::pending()).await;
    let Err(tollgate_agent_server::ServerError::Options(why)) = refused else { panic!("{refused:?}") };
    assert!(why.contains("whsec_") && why.contains("base64"), "{why}");
    runtime.stop().await;
}

#[tokio::test]
async fn a_bad_webhook_url_is_refused_at_start() {
    let runtime = Server::start(Config::default()).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
    let options = tollgate_agent_server::ServerOptions {
        webhooks: vec![WebhookTarget { url: "not a url".into(), secret: "s".into(), events: EventKind::ALL.to_vec() }],
        ..Default::default()
    };
    let refused =
        tollgate_agent_server::serve_on(listener, runtime.runtime.clone(), options, std::future::pending()).await;
    assert!(matches!(refused, Err(tollgate_agent_server::ServerError::Options(_))), "{refused:?}");
    runtime.stop().await;
}

#[tokio::test]
async fn shutdown_flushes_queued_deliveries() {
    let (url, received) = receiver(StatusCode::OK).await;
    let webhooks = vec![WebhookTarget { url, secret: "s".into(), events: vec![EventKind::RunCancelled] }];
    let server = Server::start(Config { webhooks, ..Default::default() }).await;
    let run = server.waiting_run(SCRIBE, "last words").await;
    let cancelled = server.post(&format!("/v1/runs/{}/cancel", id(&run)), json!({})).await;
    assert_eq!(cancelled.status, 200);
    server.stop().await;
    let kinds: Vec<Value> = received
        .all()
        .iter()
        .map(|(_, body)| serde_json::from_slice::<Value>(body).map(|v| v["event"]["kind"].clone()).unwrap_or_default())
        .collect();
    assert_eq!(kinds, vec![json!("run_cancelled")], "delivered before the server returned");
}

/// A run this server did not start (another node's, or one from before a restart) is first seen at its
/// decision: its webhooks carry every event after the held turn's `approval_requested`, each once, and
/// none from before it (the feed reads the run's events once to find that start and hands them on from
/// there).
#[tokio::test]
async fn a_run_started_elsewhere_delivers_from_its_held_turn_on_each_event_once() {
    let first = Server::start(Config::default()).await;
    let run = first.waiting_run(SCRIBE, "started elsewhere").await;
    let store = first.store.clone();
    first.stop().await;

    let (url, hooks) = receiver(StatusCode::OK).await;
    let webhooks = vec![WebhookTarget { url, secret: "s".into(), events: EventKind::ALL.to_vec() }];
    let second = Server::start(Config { store: Some(store), webhooks, ..Default::default() }).await;
    let done = second.approve_and_wait(&run).await;
    assert_eq!(done.body["status"], "completed", "{}", done.body);
    let kinds = second.event_kinds(&id(&run)).await;
    let held = kinds.iter().rposition(|k| k == "approval_requested").unwrap_or_else(|| panic!("{kinds:?}"));
    let expected: Vec<(u64, String)> =
        kinds.iter().enumerate().skip(held + 1).map(|(i, kind)| (i as u64 + 1, kind.clone())).collect();
    eventually("the run's last event delivered", || hooks.all().len() >= expected.len()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut delivered: Vec<(u64, String)> = hooks
        .all()
        .iter()
        .map(|(_, body)| {
            let payload: Value = serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}"));
            let kind = payload["event"]["kind"].as_str().unwrap_or_default().to_owned();
            (payload["event"]["seq"].as_u64().unwrap_or_default(), kind)
        })
        .collect();
    delivered.sort();
    assert_eq!(delivered, expected, "every event after the held turn, once each");
    second.stop().await;
}

/// The feed hands on what this server commits from the commits themselves (the store's commit tap):
/// a run driven here from its start to its end costs the feed no read of events, and each of its
/// events is delivered once. Behind a store that does not tap, the feed reads them instead and
/// delivers the same.
#[tokio::test]
async fn the_feed_hands_on_this_servers_commits_without_reading_them_back() {
    for tapping in [true, false] {
        let inner = crate::common::open_store(&crate::common::Backend::Sqlite).await;
        let store = tollgate_agent_testkit::FailingStore::logging(inner);
        let store = Arc::new(if tapping { store.tapping() } else { store });
        let (url, hooks) = receiver(StatusCode::OK).await;
        let webhooks = vec![WebhookTarget { url, secret: "s".into(), events: EventKind::ALL.to_vec() }];
        let server = Server::start(Config { store: Some(store.clone()), webhooks, ..Default::default() }).await;
        let run = server.waiting_run(SCRIBE, "tapped").await;
        let done = server.approve_and_wait(&run).await;
        assert_eq!(done.body["status"], "completed", "{}", done.body);
        let completed = || {
            hooks.all().iter().any(|(headers, _)| headers.get("x-tollgate-event").is_some_and(|k| k == "run_completed"))
        };
        eventually("run_completed delivered", completed).await;
        let feed_reads = store.event_reads();
        let kinds = server.event_kinds(&id(&run)).await;
        let mut delivered: Vec<u64> = hooks
            .all()
            .iter()
            .map(|(_, body)| {
                let payload: Value = serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}"));
                payload["event"]["seq"].as_u64().unwrap_or_default()
            })
            .collect();
        delivered.sort_unstable();
        assert_eq!(delivered, (1..=kinds.len() as u64).collect::<Vec<_>>(), "every event once ({kinds:?})");
        let metrics = server.get("/metrics").await;
        let counted = metrics.body.as_str().unwrap_or_default().lines().find_map(|line| {
            line.strip_prefix("tollgate_event_feed_store_reads_total ").and_then(|n| n.parse::<usize>().ok())
        });
        if tapping {
            assert_eq!(feed_reads, 0, "the feed read events back");
        } else {
            assert!(feed_reads > 0, "without a tap the feed reads");
        }
        assert_eq!(counted, Some(feed_reads), "/metrics counts the feed's reads");
        server.stop().await;
    }
}

/// A delivery still under way when its server stops is not lost: the position the server stores in
/// the commit log's `webhooks` reader stays before it, and the next server on the same store (here a
/// restart; another node alike) delivers it, once the first has released the reader.
#[tokio::test]
async fn a_delivery_under_way_at_shutdown_is_made_by_the_next_server() {
    let (stuck_url, stuck) = hanging_receiver().await;
    let hook = |url| vec![WebhookTarget { url, secret: "s".into(), events: vec![EventKind::RunCompleted] }];
    let first = Server::start(Config { webhooks: hook(stuck_url), ..Default::default() }).await;
    let run = first.waiting_run(SCRIBE, "under way").await;
    let done = first.approve_and_wait(&run).await;
    assert_eq!(done.body["status"], "completed", "{}", done.body);
    eventually("the delivery reached the receiver that never answers", || !stuck.all().is_empty()).await;
    let store = first.store.clone();
    // Stopping waits 5 s for the delivery (which would take three 2-second attempts), then gives up.
    first.stop().await;

    let (url, hooks) = receiver(StatusCode::OK).await;
    let second = Server::start(Config { store: Some(store), webhooks: hook(url), ..Default::default() }).await;
    eventually("the next server delivers it", || !hooks.all().is_empty()).await;
    let kinds = second.event_kinds(&id(&run)).await;
    assert_eq!(hooks.delivery_ids(), vec![format!("{}:{}", id(&run), kinds.len())], "the run's run_completed, once");
    second.stop().await;
}

/// A backlog larger than the delivery queue — events committed while no server delivered, read by the
/// next one from the stored position — is delivered whole: the holder reads on only while its queue
/// has room, so nothing is dropped.
#[tokio::test]
async fn a_backlog_larger_than_the_queue_is_delivered_without_a_drop() {
    let (url_1, hooks_1) = receiver(StatusCode::OK).await;
    let (url_2, hooks_2) = receiver(StatusCode::OK).await;
    let all = |url: &String| WebhookTarget { url: url.clone(), secret: "s".into(), events: EventKind::ALL.to_vec() };
    let targets = vec![all(&url_1), all(&url_2)];
    // The reader gets its position from a first server, which then stops.
    let first = Server::start(Config { webhooks: targets.clone(), ..Default::default() }).await;
    let store = first.store.clone();
    first.stop().await;
    // 1,600 waiting runs (four events each) committed with no webhooks configured: 12,800 deliveries.
    let quiet = Server::start(Config { store: Some(store.clone()), ..Default::default() }).await;
    let inputs: Vec<String> = (0..1_600).map(|i| format!("backlog {i}")).collect();
    for chunk in inputs.chunks(32) {
        futures_util::future::join_all(chunk.iter().map(|input| quiet.waiting_run(SCRIBE, input))).await;
    }
    let events = 1_600 * quiet.event_kinds(&id(&quiet.waiting_run(SCRIBE, "one more").await)).await.len();
    quiet.stop().await;

    let second = Server::start(Config { store: Some(store), webhooks: targets, ..Default::default() }).await;
    for _ in 0..600 {
        if hooks_1.all().len() >= events && hooks_2.all().len() >= events {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = second.get("/metrics").await.body.as_str().unwrap_or_default().to_owned();
    assert!(metrics.contains("tollgate_webhook_deliveries_total{outcome=\"dropped\"} 0\n"), "{metrics}");
    assert!(metrics.contains("tollgate_webhook_reader_held 1\n"), "the only server holds the reader: {metrics}");
    let mut drained = false;
    for _ in 0..100 {
        let metrics = second.get("/metrics").await.body.as_str().unwrap_or_default().to_owned();
        if metrics.contains("tollgate_webhook_queue_depth 0\n") {
            drained = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(drained, "every delivery ended, the queue is empty");
    for hooks in [&hooks_1, &hooks_2] {
        let mut delivered = hooks.delivery_ids();
        delivered.dedup();
        assert!(delivered.len() >= events, "{} of {events} events delivered", delivered.len());
    }
    second.stop().await;
}

/// A stored position ahead of everything the database has given (the database was restored from a
/// backup since it was stored) would pass over every new commit: the server notices and delivers from
/// the end of the log instead.
#[tokio::test]
async fn a_position_ahead_of_the_database_is_dropped_for_the_end_of_the_log() {
    let store = crate::common::open_store(&crate::common::Backend::Sqlite).await;
    let now = tollgate_agent_core::Clock::now(&tollgate_agent_core::SystemClock);
    let planted = store.hold_reader("webhooks", "a node before the restore", Some("9000000000"), now - 1, now).await;
    assert!(matches!(planted, Ok(tollgate_agent_core::ReaderHold::Held { .. })), "{planted:?}");
    let (url, hooks) = receiver(StatusCode::OK).await;
    let webhooks = vec![WebhookTarget { url, secret: "s".into(), events: vec![EventKind::RunCompleted] }];
    let server = Server::start(Config { store: Some(store), webhooks, ..Default::default() }).await;
    let run = server.waiting_run(SCRIBE, "after a restore").await;
    let done = server.approve_and_wait(&run).await;
    assert_eq!(done.body["status"], "completed", "{}", done.body);
    eventually("run_completed delivered", || !hooks.all().is_empty()).await;
    let kinds = server.event_kinds(&id(&run)).await;
    assert_eq!(hooks.delivery_ids(), vec![format!("{}:{}", id(&run), kinds.len())]);
    server.stop().await;
}
