//! 50 concurrent decision requests on one run: every answer is 200 or 409, the run resumes once, and
//! the tool runs once — on every backend.

use crate::common::{Config, SCRIBE, Server, backends, digest, id};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_deciders_resume_once() {
    for backend in backends() {
        let server = Server::start(Config { backend: backend.clone(), ..Default::default() }).await;
        let run = server.waiting_run(SCRIBE, "race").await;
        let path = server.url(&format!("/v1/runs/{}/decisions", id(&run)));
        let mut requests = Vec::new();
        for i in 0..50 {
            let client = server.client.clone();
            let path = path.clone();
            // Half decide one call, half approve all: both forms race for the same resume.
            let body = if i % 2 == 0 {
                json!({"turn_digest": digest(&run), "decisions": [{"call_id": "call_1", "action": "approve"}], "wait": true})
            } else {
                json!({"turn_digest": digest(&run), "approve_all": true})
            };
            requests.push(tokio::spawn(async move {
                let response = client.post(path).json(&body).send().await.unwrap_or_else(|e| panic!("{e}"));
                response.status().as_u16()
            }));
        }
        let mut statuses = Vec::new();
        for request in requests {
            statuses.push(request.await.unwrap_or_else(|e| panic!("{e}")));
        }
        assert!(statuses.iter().all(|s| *s == 200 || *s == 409), "{backend:?}: {statuses:?}");
        assert_eq!(
            statuses.iter().filter(|s| **s == 200).count(),
            1,
            "{backend:?}: exactly one decision lands: {statuses:?}"
        );

        let done = server.settled(&id(&run)).await;
        assert_eq!(done["status"], "completed", "{backend:?}");
        assert_eq!(server.tools.write.call_count(), 1, "{backend:?}: the tool ran once");
        let kinds = server.event_kinds(&id(&run)).await;
        assert_eq!(kinds.iter().filter(|k| *k == "run_resumed").count(), 1, "{backend:?}: {kinds:?}");
        assert_eq!(kinds.iter().filter(|k| *k == "decision").count(), 1, "{backend:?}: {kinds:?}");
        assert_eq!(kinds.iter().filter(|k| *k == "tool_started").count(), 2, "{backend:?}: write and list, once each");
        let verified = server.runtime.verify(&id(&run)).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(verified.is_ok(), "{backend:?}: the log verifies");
        assert_eq!(server.get("/healthz").await.status, 200);
        server.stop().await;
    }
}
