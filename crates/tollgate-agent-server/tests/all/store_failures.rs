//! What the API answers when the store fails: each failure its own problem type and status
//! (docs/api.md), `/healthz` alive whatever the store does, and `/readyz` ready only when the store can
//! write.

use crate::common::{Config, Server, backends, open_store};
use serde_json::json;
use std::sync::Arc;
use tollgate_agent_core::StoreError;
use tollgate_agent_testkit::FailingStore;

const RUN: &str = "/v1/runs/01980000-0000-7000-8000-000000000001";

/// Every store failure through the router: its status and `type` on a read, 503 with the same `type`
/// from `/readyz`, and `/healthz` still 200.
#[tokio::test]
async fn each_store_failure_answers_its_own_problem_type() {
    let cases = [
        (StoreError::DiskFull("SQLITE_FULL".into()), 507, "disk-full"),
        (StoreError::ReadOnly("SQLITE_READONLY".into()), 503, "read-only"),
        (
            StoreError::Corrupt { id: "01980000-0000-7000-8000-000000000001".into(), detail: "malformed".into() },
            500,
            "corrupt-run",
        ),
        (StoreError::CorruptDatabase("Tree 4 page 18".into()), 500, "corrupt-database"),
        (StoreError::Unreachable("connection refused".into()), 503, "unavailable"),
        (StoreError::Database("constraint".into()), 503, "unavailable"),
    ];
    for (error, status, slug) in cases {
        let inner = open_store(&Default::default()).await;
        let store = Arc::new(FailingStore::broken(inner, error.clone()));
        let server = Server::start(Config { store: Some(store), ..Config::default() }).await;
        let type_uri = format!("https://tollgate.dev/problems/{slug}");

        let read = server.get(RUN).await;
        assert_eq!(
            (read.status, read.body["type"].as_str()),
            (status, Some(type_uri.as_str())),
            "{error}: {}",
            read.body
        );
        assert_eq!(read.body["status"], status);
        assert_eq!(read.headers["content-type"], "application/problem+json");
        let detail = read.body["detail"].as_str().unwrap_or_default();
        assert!(!detail.contains(&error.to_string()), "the store's message stays in the log: {detail}");
        if slug == "corrupt-run" {
            assert!(detail.contains("01980000-0000-7000-8000-000000000001"), "names the run: {detail}");
        }
        let list = server.get("/v1/runs").await;
        assert_eq!(list.status, status, "{}", list.body);

        let ready = server.get("/readyz").await;
        assert_eq!((ready.status, ready.body["type"].as_str()), (503, Some(type_uri.as_str())), "{}", ready.body);
        assert_eq!(ready.body["status"], 503);
        let alive = server.get("/healthz").await;
        assert_eq!((alive.status, &alive.body), (200, &json!({"status": "ok"})));
        server.stop().await;
    }
}

/// A store that can write is ready, on each backend (the probe really commits).
#[tokio::test]
async fn readyz_is_ready_when_the_store_can_write() {
    for backend in backends() {
        let server = Server::start(Config { backend, ..Config::default() }).await;
        let ready = server.get("/readyz").await;
        assert_eq!((ready.status, &ready.body), (200, &json!({"status": "ready"})));
        server.stop().await;
    }
}
