//! Graceful shutdown leaves every run resumable: a run left waiting by one server is decided through
//! the next one, over the same store.

use crate::common;

use crate::common::{Config, SCRIBE, Server, digest, id};
use serde_json::json;

#[tokio::test]
async fn a_waiting_run_survives_a_restart() {
    let first = Server::start(Config::default()).await;
    let run = first.waiting_run(SCRIBE, "across restarts").await;
    let store = first.store.clone();
    first.stop().await;

    let second = Server::start(Config { store: Some(store), ..Default::default() }).await;
    let reply = second
        .post(
            &format!("/v1/runs/{}/decisions", id(&run)),
            json!({"turn_digest": digest(&run), "approve_all": true, "wait": true}),
        )
        .await;
    assert_eq!(reply.body["status"], "completed", "{}", reply.body);
    assert_eq!(second.tools.write.call_count(), 1);
    assert!(second.runtime.verify(&id(&run)).await.is_ok_and(|r| r.is_ok()));
    second.stop().await;
}

#[tokio::test]
async fn shutdown_lets_an_in_flight_step_commit() {
    let server = Server::start(Config::default()).await;
    let reply = server.post("/v1/runs", json!({"agent": common::SLOW, "input": "mid-step"})).await;
    assert_eq!(reply.status, 201);
    assert_eq!(reply.body["status"], "running");
    let run_id = id(&reply.body);
    let store = server.store.clone();
    let started = std::time::Instant::now();
    // The `pause` call is still running when the server is told to stop.
    server.stop().await;
    assert!(started.elapsed() >= common::PAUSE / 2, "shutdown waited for the step");
    let run = store.get(&run_id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.status(), tollgate_agent_core::RunStatus::WaitingForApproval, "the segment committed before exit");
    let events = store.events(&run_id, 0, 100).await.unwrap_or_default();
    assert!(events.iter().any(|e| e.kind == tollgate_agent_core::EventKind::ToolFinished), "the pause call finished");
}
