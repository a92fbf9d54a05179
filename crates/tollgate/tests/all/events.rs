use super::*;
use futures_util::StreamExt;
use std::time::Duration;
use tollgate::{EventKind, RunStatus};

#[tokio::test]
async fn the_stream_gives_every_event_in_order_and_ends_with_the_run() {
    let pay = Pay::default();
    let tollgate = tollgate_on("sqlite::memory:", &pay).await;
    let run = tollgate.start("pay").wait().await.unwrap_or_else(|e| panic!("{e}"));
    let mut stream = tollgate.events(&run.id);
    let mut seen = Vec::new();
    // Everything so far, up to the held turn.
    while seen.last().map(|e: &tollgate::Event| e.kind) != Some(EventKind::ApprovalRequested) {
        let event = tokio::time::timeout(Duration::from_secs(5), stream.next()).await;
        seen.push(
            event.ok().flatten().unwrap_or_else(|| panic!("stream ended early")).unwrap_or_else(|e| panic!("{e}")),
        );
    }
    // Deciding in this process: the rest arrives live, and the stream ends after the last event.
    let held = tollgate.pending(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    tollgate.decide(held.approve_all()).await.unwrap_or_else(|e| panic!("{e}"));
    while let Some(event) =
        tokio::time::timeout(Duration::from_secs(5), stream.next()).await.unwrap_or_else(|_| panic!("stuck"))
    {
        seen.push(event.unwrap_or_else(|e| panic!("{e}")));
    }
    let seqs: Vec<u64> = seen.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "no gap, no repeat");
    assert_eq!(seen.last().map(|e| e.kind), Some(EventKind::RunCompleted));
    let final_run = tollgate.get(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(final_run.status, RunStatus::Completed);

    // `after` starts later.
    let tail: Vec<_> = tollgate.events(&run.id).after(seqs.len() as u64 - 1).collect().await;
    assert_eq!(tail.len(), 1);
}

#[tokio::test]
async fn the_stream_sees_a_change_made_by_another_runtime_on_the_same_store() {
    let (_dir, url) = temp_db();
    let watcher = tollgate_on(&url, &Pay::default()).await;
    let actor = tollgate_on(&url, &Pay::default()).await;
    let run = actor.start("pay").wait().await.unwrap_or_else(|e| panic!("{e}"));
    let mut stream = watcher.events(&run.id).poll_interval(Duration::from_millis(50));
    let mut last = 0;
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(500), stream.next()).await {
        last = event.unwrap_or_else(|e| panic!("{e}")).seq;
    }
    assert!(last > 0);
    let held = actor.pending(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    actor.decide(held.approve_all()).wait().await.unwrap_or_else(|e| panic!("{e}"));
    // The watcher's process heard nothing of it: its stream finds the events by reading the store.
    let rest: Vec<_> = tokio::time::timeout(Duration::from_secs(5), stream.collect::<Vec<_>>())
        .await
        .unwrap_or_else(|_| panic!("the stream did not see the other runtime's commit"));
    let kinds: Vec<EventKind> = rest.into_iter().map(|e| e.unwrap_or_else(|e| panic!("{e}")).kind).collect();
    assert_eq!(kinds.last(), Some(&EventKind::RunCompleted), "{kinds:?}");
}

#[tokio::test]
async fn the_stream_of_an_unknown_run_is_one_error() {
    let tollgate = tollgate_on("sqlite::memory:", &Pay::default()).await;
    let items: Vec<_> = tollgate.events(&"01900000-0000-7000-8000-000000000000".into()).collect().await;
    assert_eq!(items.len(), 1);
    assert!(matches!(items[0], Err(tollgate::ReadError::NotFound(_))));
}

/// `Tollgate::deltas` carries the model's live text of each run, in order; the run's output is the
/// whole text and no event holds the pieces.
#[tokio::test]
async fn deltas_carry_the_live_text_of_a_streaming_model() {
    let tollgate =
        tollgate::Tollgate::builder()
            .store("sqlite::memory:")
            .agent(tollgate::Agent::new("chat").model(tollgate::Model::scripted_json(
                r#"{"turns": [{"text": "streamed hello", "stream_chunks": 3}]}"#,
            )))
            .build()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    let mut deltas = tollgate.deltas();
    let run = tollgate.start("hello").wait().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.output.as_deref(), Some("streamed hello"));
    let mut pieces = Vec::new();
    while let Ok(delta) = deltas.try_recv() {
        assert_eq!((delta.run_id.as_str(), delta.round), (run.id.as_str(), 1));
        match &delta.text {
            tollgate::LiveText::Text(text) => pieces.push(text.clone()),
            tollgate::LiveText::Reset => panic!("nothing was retried"),
        }
    }
    assert_eq!(pieces.len(), 3, "{pieces:?}");
    assert_eq!(pieces.concat(), "streamed hello");
}
