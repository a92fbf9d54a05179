use super::*;
use tollgate::{CallState, DecideError, Decision, ListQuery, PendingError, RunStatus};

#[tokio::test]
async fn a_held_turn_is_decided_per_call_by_two_people_and_resumes_once() {
    let pay = Pay::default();
    let (_dir, url) = temp_db();
    let tollgate = tollgate_on(&url, &pay).await;
    let run = tollgate.start("pay everyone").metadata("customer", "c-7").wait().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.status, RunStatus::WaitingForApproval);
    assert_eq!(pay.runs.load(Ordering::SeqCst), 0, "nothing of a held turn runs before the decisions");

    let held = tollgate.pending(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(held.digest.starts_with("sha256:"));
    assert_eq!(held.calls.len(), 3);
    let awaiting: Vec<&str> = held.awaiting().map(|c| c.call_id.as_str()).collect();
    assert_eq!(awaiting, ["call_2", "call_3"]);
    assert_eq!(held.call(&"call_2".into()).and_then(|c| c.preview.clone()).as_deref(), Some("pay bob 50000 cents"));

    // Alice approves bob's payment only; the run keeps waiting for cy's.
    let partial =
        tollgate.decide(held.decisions().approve("call_2")).by("alice").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(partial.status, RunStatus::WaitingForApproval);
    let held = tollgate.pending(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(held.awaiting().map(|c| c.call_id.as_str()).collect::<Vec<_>>(), ["call_3"]);
    assert_eq!(held.call(&"call_2".into()).map(|c| c.state), Some(CallState::Decided));

    // Bob edits cy's payment down; that completes the set and resumes the run.
    let done = tollgate
        .decide(held.decisions().edit("call_3", serde_json::json!({"to": "cy", "cents": 100})))
        .by("bob")
        .wait()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((done.status, done.output.as_deref()), (RunStatus::Completed, Some("done")));
    assert_eq!(pay.runs.load(Ordering::SeqCst), 3);
    assert_eq!(*pay.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner), ["c-7", "c-7", "c-7"]);
    assert!(tollgate.verify(&run.id).await.unwrap_or_else(|e| panic!("{e}")) > 0);

    // The turn is gone: pending says so, and an old decision is refused without running anything.
    let gone = tollgate.pending(&run.id).await.err();
    assert!(matches!(gone, Some(PendingError::NotWaiting { status: RunStatus::Completed, .. })), "{gone:?}");
    let again = tollgate.decide(held.approve_all()).await.err();
    assert!(again.is_some(), "a decision on a finished run was accepted");
    assert_eq!(pay.runs.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn deny_all_respond_and_a_stale_digest() {
    let pay = Pay::default();
    let tollgate = tollgate_on("sqlite::memory:", &pay).await;
    let run = tollgate.start("pay").wait().await.unwrap_or_else(|e| panic!("{e}"));
    let held = tollgate.pending(&run.id).await.unwrap_or_else(|e| panic!("{e}"));

    let stale = tollgate::Decisions::for_turn(run.id.clone(), "sha256:0000").approve("call_2");
    let refused = tollgate.decide(stale).await.err();
    assert!(matches!(refused, Some(DecideError::StaleDigest { .. })), "{refused:?}");

    // Deny everything but answer cy's call in the tool's place.
    let decisions = held.deny_all("not today").respond("call_3", "cy was paid in cash");
    let done = tollgate.decide(decisions).wait().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(pay.runs.load(Ordering::SeqCst), 1, "only the allowed call ran");
    let events: Vec<_> = futures_util::StreamExt::collect(tollgate.events(&run.id)).await;
    let events: Vec<tollgate::Event> = events.into_iter().map(|e| e.unwrap_or_else(|e| panic!("{e}"))).collect();
    let text = serde_json::to_string(&events).unwrap_or_default();
    assert!(text.contains("not today") && text.contains("cy was paid in cash"), "{text}");
}

#[tokio::test]
async fn decide_each_gets_every_awaiting_call() {
    let pay = Pay::default();
    let tollgate = tollgate_on("sqlite::memory:", &pay).await;
    let run = tollgate.start("pay").wait().await.unwrap_or_else(|e| panic!("{e}"));
    let held = tollgate.pending(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    let decisions = held.decide_each(|call| match call.arguments["to"].as_str() {
        Some("bob") => Decision::Approve,
        _ => Decision::Deny { reason: "no".into() },
    });
    let done = tollgate.decide(decisions).wait().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(pay.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn pending_on_an_unknown_run_and_listing_with_the_default_limit() {
    let pay = Pay::default();
    let tollgate = tollgate_on("sqlite::memory:", &pay).await;
    let missing = tollgate.pending(&"01900000-0000-7000-8000-000000000000".into()).await.err();
    assert!(matches!(missing, Some(PendingError::NotFound(_))), "{missing:?}");
    for _ in 0..3 {
        tollgate.start("pay").wait().await.unwrap_or_else(|e| panic!("{e}"));
    }
    let page = tollgate.list(ListQuery::status(RunStatus::WaitingForApproval)).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(page.runs.len(), 3);
    let mut first_two = ListQuery::default();
    first_two.limit = 2;
    let page = tollgate.list(first_two).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(page.runs.len(), 2);
    assert!(page.next_cursor.is_some());
}

#[tokio::test]
async fn a_run_waiting_in_one_runtime_resumes_in_another_with_its_metadata() {
    let (_dir, url) = temp_db();
    let first = Pay::default();
    let id = {
        let tollgate = tollgate_on(&url, &first).await;
        let run = tollgate.start("pay").metadata("customer", "c-9").wait().await.unwrap_or_else(|e| panic!("{e}"));
        tollgate.shutdown().await;
        run.id
    };
    let second = Pay::default();
    let tollgate = tollgate_on(&url, &second).await;
    let held = tollgate.pending(&id).await.unwrap_or_else(|e| panic!("{e}"));
    let done = tollgate.decide(held.approve_all()).wait().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(first.runs.load(Ordering::SeqCst), 0);
    assert_eq!(second.runs.load(Ordering::SeqCst), 3);
    assert_eq!(*second.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner), ["c-9", "c-9", "c-9"]);
}
