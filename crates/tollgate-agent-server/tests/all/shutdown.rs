//! Graceful shutdown leaves every run resumable: a run left waiting by one server is decided through
//! the next one, over the same store.

use crate::common;

use crate::common::{Config, SCRIBE, Server, id};
use serde_json::json;
use tollgate_agent_core::{EventKind, RunStatus};

#[tokio::test]
async fn a_waiting_run_survives_a_restart() {
    let first = Server::start(Config::default()).await;
    let run = first.waiting_run(SCRIBE, "across restarts").await;
    let store = first.store.clone();
    first.stop().await;

    let second = Server::start(Config { store: Some(store), ..Default::default() }).await;
    let reply = second.approve_and_wait(&run).await;
    assert_eq!(reply.body["status"], "completed", "{}", reply.body);
    assert_eq!(second.tools.write.call_count(), 1);
    assert!(second.runtime.verify(&id(&run)).await.is_ok_and(|r| r.is_ok()));
    second.stop().await;
}

#[tokio::test]
async fn shutdown_lets_an_in_flight_step_commit_and_gives_the_run_back() {
    let server = Server::start(Config::default()).await;
    let reply = server.post("/v1/runs", json!({"agent": common::SLOW, "input": "mid-step"})).await;
    assert_eq!(reply.status, 201);
    assert_eq!(reply.body["status"], "queued");
    let run_id = id(&reply.body);
    let store = server.store.clone();
    // A worker claims it and starts the `pause` call, still running when the server is told to stop.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while store.get(&run_id).await.map(|run| run.status()).ok() != Some(RunStatus::Running) {
        assert!(std::time::Instant::now() < deadline, "no worker claimed the run");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    tokio::time::sleep(common::PAUSE / 4).await;
    let started = std::time::Instant::now();
    server.stop().await;
    assert!(started.elapsed() >= common::PAUSE / 4, "shutdown waited for the step");
    let run = store.get(&run_id).await.unwrap_or_else(|e| panic!("{e}"));
    let events = store.events(&run_id, 0, 100).await.unwrap_or_default();
    assert!(events.iter().any(|e| e.kind == EventKind::ToolFinished), "the pause call finished and committed");
    // Given back at the step boundary, not left running under a lease: the next server continues at once.
    assert_eq!(run.status(), RunStatus::Queued, "given back at shutdown");
    assert!(run.lease().is_none(), "the lease is released, not left to expire");
    assert_eq!(events.last().map(|e| e.kind), Some(EventKind::ToolFinished), "no model call after the pause");

    let next = Server::start(Config { store: Some(store.clone()), ..Default::default() }).await;
    let settled = next.settled(&run_id).await;
    assert_eq!(settled["status"], "waiting_for_approval", "{settled}");
    // (The run held no turn yet, so the next server starts its segment again: `pause` is allow-gated,
    // safe to repeat, as after a takeover.)
    assert!(next.runtime.verify(&run_id).await.is_ok_and(|r| r.is_ok()));
    next.stop().await;
}
