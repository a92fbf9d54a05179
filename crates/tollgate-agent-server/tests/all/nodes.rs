//! Two nodes on one PostgreSQL schema: two servers, each with a `PostgresStore` of its own. Node B
//! learns of node A's commits at once through LISTEN/NOTIFY: `wait_settled` and B's SSE stream wake
//! within a second of A's commit (measured), B's listener comes back after its connection is killed,
//! and B's webhooks never deliver A's events.

use crate::common::{Backend, Config, SLOW, Server, digest, id};
use crate::sse::Stream;
use crate::webhooks::{eventually, receiver};
use axum::http::StatusCode;
use serde_json::json;
use sqlx::{Connection, Executor, PgConnection};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate_agent_server::WebhookTarget;
use tollgate_agent_store::PostgresStore;
use tollgate_agent_testkit::postgres_url;

/// The most a follower on node B may lag node A's commit.
const WAKE_BOUND: Duration = Duration::from_secs(1);

/// A fresh schema on the test server: its URL and name.
async fn fresh_schema(base: &str) -> (String, String) {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let schema = format!("tollgate_nodes_{}_{nanos}", std::process::id());
    let mut admin = PgConnection::connect(base).await.unwrap_or_else(|e| panic!("{e}"));
    admin.execute(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).await.unwrap_or_else(|e| panic!("{e}"));
    admin.close().await.unwrap_or_else(|e| panic!("{e}"));
    let separator = if base.contains('?') { '&' } else { '?' };
    (format!("{base}{separator}options[search_path]={schema}"), schema)
}

/// Waits (bounded) until the store tagged `node` listens, and answers its listener's backend pid.
async fn listening(base: &str, node: &str) -> i32 {
    let mut admin = PgConnection::connect(base).await.unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // The listener asks for its schema right after its LISTEN.
        let pid: Option<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query = 'SELECT current_schema()'",
        )
        .bind(format!("tollgate-listener {node}"))
        .fetch_optional(&mut admin)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        if let Some(pid) = pid {
            return pid;
        }
        assert!(Instant::now() < deadline, "node {node} does not listen within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// When node A committed each seq of run `id`, from A's own notices.
#[derive(Clone, Default)]
struct Commits(Arc<std::sync::Mutex<BTreeMap<u64, Instant>>>);

impl Commits {
    fn follow(server: &Server) -> Self {
        let commits = Commits::default();
        let mut notices = server.runtime.subscribe();
        let recorded = commits.clone();
        tokio::spawn(async move {
            while let Ok(notice) = notices.recv().await {
                let mut seqs = recorded.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                seqs.entry(notice.last_seq).or_insert_with(Instant::now);
            }
        });
        commits
    }

    /// When the commit that wrote `seq` was announced on A; `None` when A has not announced it yet
    /// (B read it in the moment between A's commit and A's notice).
    fn of(&self, seq: u64) -> Option<Instant> {
        let seqs = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        seqs.range(seq..).next().map(|(_, at)| *at)
    }
}

#[tokio::test]
async fn another_nodes_commits_wake_waiters_and_streams_at_once() {
    let Some(base) = postgres_url() else { return };
    let (url, schema) = fresh_schema(&base).await;
    let store_a = PostgresStore::open(&url).await.unwrap_or_else(|e| panic!("{e}"));
    let store_b = PostgresStore::open(&url).await.unwrap_or_else(|e| panic!("{e}"));
    let node_b = store_b.node().to_owned();
    let (url_a, hooks_a) = receiver(StatusCode::OK).await;
    let (url_b, hooks_b) = receiver(StatusCode::OK).await;
    let hook = |url: String| vec![WebhookTarget { url, secret: "s".into(), events: vec!["*".into()] }];
    let config = |store: PostgresStore, webhooks| Config {
        backend: Backend::Postgres(url.clone()),
        store: Some(Arc::new(store)),
        webhooks,
        ..Config::default()
    };
    let a = Server::start(config(store_a, hook(url_a))).await;
    let b = Server::start(config(store_b, hook(url_b))).await;
    let commits = Commits::follow(&a);
    listening(&base, &node_b).await;

    // A starts the run and drives it (a pause, then the held turn); B follows it from the start.
    let started = a.post("/v1/runs", json!({"agent": SLOW, "input": "from node a"})).await;
    assert_eq!(started.status, 201, "{}", started.body);
    let run_id = id(&started.body);
    let path = format!("/v1/runs/{run_id}/events");
    let mut stream = Stream::new(Stream::open(&b, &path, None).await);
    let opened = Instant::now();
    let waiter = tokio::spawn({
        let runtime = b.runtime.clone();
        let run_id = run_id.clone();
        async move {
            let run = runtime.wait_settled(&run_id).await.unwrap_or_else(|e| panic!("{e}"));
            (run, Instant::now())
        }
    });
    let mut latencies = Vec::new();
    let mut seen = Vec::new();
    let mut follow = async |stream: &mut Stream, until: &str, after: Instant| {
        while let Some(event) = stream.next().await {
            let arrived = Instant::now();
            let seq = event.data["seq"].as_u64().unwrap_or_default();
            let kind = event.data["kind"].as_str().unwrap_or_default().to_owned();
            let committed = commits.of(seq).unwrap_or(arrived);
            if committed > after {
                latencies.push((seq, kind.clone(), arrived.duration_since(committed)));
            }
            seen.push(event.data);
            if kind == until {
                return;
            }
        }
    };
    follow(&mut stream, "approval_requested", opened).await;
    let (waiting, woke) = waiter.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(waiting.status().as_str(), "waiting_for_approval");
    let wait_latency = woke.duration_since(commits.of(waiting.last_seq).unwrap_or(woke));
    eprintln!("node B's wait_settled woke {wait_latency:?} after node A's commit");
    assert!(wait_latency < WAKE_BOUND, "wait_settled on B woke {wait_latency:?} after A's commit");

    // B's listening connection is killed: it comes back, and B still wakes for A's next commits.
    let pid = listening(&base, &node_b).await;
    let mut admin = PgConnection::connect(&base).await.unwrap_or_else(|e| panic!("{e}"));
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&mut admin)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(killed);
    let again = listening(&base, &node_b).await;
    assert_ne!(again, pid, "a new listening connection");

    let run = a.get(&format!("/v1/runs/{run_id}")).await.body;
    let deciding = Instant::now();
    let decided = a
        .post(&format!("/v1/runs/{run_id}/decisions"), json!({"turn_digest": digest(&run), "approve_all": true}))
        .await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    follow(&mut stream, "run_completed", deciding).await;
    assert!(stream.next().await.is_none(), "the stream ends after the terminal event");

    let all = a.get(&path).await.body["events"].clone();
    assert_eq!(serde_json::Value::Array(seen), all, "B saw every event once, in order, with no gap");
    eprintln!("node B's SSE latencies after node A's commits: {latencies:?}");
    assert!(latencies.iter().any(|(_, kind, _)| kind == "run_completed"), "{latencies:?}");
    for (seq, kind, latency) in &latencies {
        assert!(*latency < WAKE_BOUND, "event {seq} ({kind}) reached B {latency:?} after A's commit");
    }

    // Each event's webhooks go out from the node that committed it: A, never B as well.
    let completed = |hooks: &crate::webhooks::Received| {
        hooks.all().iter().any(|(headers, _)| headers.get("x-tollgate-event").is_some_and(|e| e == "run_completed"))
    };
    eventually("node A delivers run_completed", || completed(&hooks_a)).await;
    assert!(hooks_b.all().is_empty(), "node B delivered node A's events: {}", hooks_b.all().len());

    a.stop().await;
    b.stop().await;
    admin.execute(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).await.unwrap_or_else(|e| panic!("{e}"));
}
