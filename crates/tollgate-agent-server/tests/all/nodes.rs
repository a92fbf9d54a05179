//! Two nodes on one PostgreSQL schema: two servers, each with a `PostgresStore` of its own. Node B
//! learns of node A's commits at once through LISTEN/NOTIFY: `wait_settled` and B's SSE stream wake
//! within a second of A's commit (measured), B's listener comes back after its connection is killed,
//! and one node at a time delivers webhooks (the holder of the commit log's reader): each event once.

use crate::common::{Backend, Config, SLOW, Server, digest};
use crate::sse::Stream;
use crate::webhooks::{eventually, receiver};
use axum::http::StatusCode;
use serde_json::json;
use sqlx::{Connection, PgConnection};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate_agent_runtime::StartRun;
use tollgate_agent_server::WebhookTarget;
use tollgate_agent_store::{PostgresStore, ScratchSchema};
use tollgate_agent_testkit::postgres_url;

/// The most a follower on node B may lag node A's commit.
const WAKE_BOUND: Duration = Duration::from_secs(1);

/// Waits (bounded) until the store tagged `node` listens in `schema` (its listener has recorded itself,
/// and that backend is alive), and answers its listener's backend pid.
async fn listening(base: &str, schema: &str, node: &str) -> i32 {
    let mut admin = PgConnection::connect(base).await.unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let query = format!(
        "SELECT l.pid FROM {schema}.listeners AS l JOIN pg_stat_activity AS a ON a.pid = l.pid \
         WHERE l.node = $1 AND a.application_name = 'tollgate-listener ' || l.node"
    );
    loop {
        let pid: Option<i32> = sqlx::query_scalar(sqlx::AssertSqlSafe(query.clone()))
            .bind(node)
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
    let schema = ScratchSchema::create(&base, "tollgate_nodes").await.unwrap_or_else(|e| panic!("{e}"));
    let url = schema.url();
    let store_a = PostgresStore::open(&url).await.unwrap_or_else(|e| panic!("{e}"));
    let store_b = PostgresStore::open(&url).await.unwrap_or_else(|e| panic!("{e}"));
    let node_b = store_b.node().to_owned();
    // Both nodes deliver to one receiver, as nodes behind one load balancer are configured alike.
    let (url_hooks, hooks) = receiver(StatusCode::OK).await;
    let hook = |url: String| {
        vec![WebhookTarget { url, secret: "s".into(), events: tollgate_agent_core::EventKind::ALL.to_vec() }]
    };
    let config = |store: PostgresStore, webhooks| Config {
        backend: Backend::Postgres(url.clone()),
        store: Some(Arc::new(store)),
        webhooks,
        ..Config::default()
    };
    let a = Server::start(config(store_a, hook(url_hooks.clone()))).await;
    let b = Server::start(config(store_b, hook(url_hooks))).await;
    let commits = Commits::follow(&a);
    listening(&base, schema.name(), &node_b).await;
    // Once B listens, its followers wait on notices alone: nothing on B polls for A's commits, so the
    // latencies below are those of the notifications.
    let polls = |runtime: &tollgate_agent_runtime::Runtime| runtime.recheck_after(Duration::from_secs(1)).is_some();
    eventually("node B relies on notifications alone", || !polls(&b.runtime)).await;

    // A starts the run and drives it (a pause, then the held turn); B follows it from the start. (Started
    // through A's runtime: over HTTP without `wait` it would be queued, and B's workers might claim it.)
    let start = StartRun::new("from node a", "local").agent(SLOW);
    let started = a.runtime.start(start).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(started.status().as_str(), "running");
    let run_id = started.id.clone();
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
    let pid = listening(&base, schema.name(), &node_b).await;
    let mut b_notices = b.runtime.subscribe();
    let mut admin = PgConnection::connect(&base).await.unwrap_or_else(|e| panic!("{e}"));
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&mut admin)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(killed);
    let again = listening(&base, schema.name(), &node_b).await;
    assert_ne!(again, pid, "a new listening connection");
    eventually("node B relies on notifications alone again", || !polls(&b.runtime)).await;
    // Two resyncs on B: at the loss (followers read again, then poll) and once it listens again.
    let mut resyncs = 0;
    while resyncs < 2 {
        let notice = tokio::time::timeout(Duration::from_secs(10), b_notices.recv())
            .await
            .unwrap_or_else(|_| panic!("node B said {resyncs} resync(s) around its lost listener, not 2"))
            .unwrap_or_else(|e| panic!("{e}"));
        if notice.origin == tollgate_agent_runtime::Origin::Resync {
            resyncs += 1;
        }
    }

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

    // One node at a time holds the webhook reader of the commit log: each event is delivered once,
    // whichever node committed it.
    let expected: Vec<String> = {
        let mut ids: Vec<String> =
            (1..=all.as_array().map_or(0, Vec::len)).map(|seq| format!("{run_id}:{seq}")).collect();
        ids.sort();
        ids
    };
    eventually("every event delivered", || hooks.delivery_ids().len() >= expected.len()).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(hooks.delivery_ids(), expected, "each event once, by one node");
    let mut holders = 0;
    for node in [&a, &b] {
        let metrics = node.get("/metrics").await.body.as_str().unwrap_or_default().to_owned();
        holders += usize::from(metrics.contains("tollgate_webhook_reader_held 1\n"));
    }
    assert_eq!(holders, 1, "one node says it holds the webhook reader");

    a.stop().await;
    b.stop().await;
    admin.close().await.unwrap_or_else(|e| panic!("{e}"));
    schema.drop_all().await.unwrap_or_else(|e| panic!("{e}"));
}
