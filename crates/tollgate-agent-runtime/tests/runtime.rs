//! The durable runtime against real stores: SQLite always, PostgreSQL when `TOLLGATE_TEST_POSTGRES_URL`
//! is set (and always in CI).

use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tollgate_agent_core::{Actor, ApprovalError, CallId, DecisionError, GrantId, GrantQuery, RunId, TraceContext};
use tollgate_agent_core::{
    Clock, Decision, EventKind, Gate, Guard, HeldTurn, LoopConfig, Metadata, MetadataError, RunQuery, RunRecord,
    RunStatus, RunStore, StoredSuspension, ToolLoop, ToolRegistry, Transition, TurnDigest,
};
use tollgate_agent_providers::{Script, ScriptedModel};
use tollgate_agent_runtime::{
    AgentSpec, CancelError, DecideError, DecisionSet, GrantError, NewGrant, OnExpiry, ReadError, Retention, Runtime,
    RuntimeOptions, Schedule, StartError, StartRun, UuidV7Ids,
};
use tollgate_agent_testkit::{ManualClock, TestTool, postgres_url, scratch_dir};

const T0: i64 = 1_796_000_000_000;

async fn sqlite() -> Arc<dyn RunStore> {
    let path = scratch_dir("runtime").join("tollgate.db");
    tollgate_agent_store::open(&format!("sqlite://{}", path.display())).await.unwrap_or_else(|e| panic!("{e}"))
}

async fn stores() -> Vec<(&'static str, Arc<dyn RunStore>)> {
    let mut stores = vec![("sqlite", sqlite().await)];
    if let Some(url) = postgres_url() {
        // Once per test process: the schemas of earlier runs of these tests (kept by the store
        // handles the tests leave open) are dropped after a day.
        tollgate_agent_store::ScratchSchema::sweep_once(&url, "tollgate_test_runtime", Duration::from_secs(86_400))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        // A schema of its own: the worker pools of tests running side by side claim only their own runs.
        let schema = tollgate_agent_store::ScratchSchema::create(&url, "tollgate_test_runtime")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        stores.push(("postgres", tollgate_agent_store::open(&schema.url()).await.unwrap_or_else(|e| panic!("{e}"))));
    }
    stores
}

struct Setup {
    script: Value,
    tools: Vec<TestTool>,
    ttl: Option<Duration>,
    on_expiry: OnExpiry,
    forbid_self_approval: bool,
    /// `escalate_after` and who is told.
    escalation: Option<tollgate_agent_runtime::EscalationRule>,
    /// When set, the tool results the model was given on its latest call ([`Listening`]).
    heard: Option<Heard>,
}

impl Setup {
    fn new(script: Value, tools: Vec<TestTool>) -> Self {
        Self {
            script,
            tools,
            ttl: None,
            on_expiry: OnExpiry::Deny,
            forbid_self_approval: false,
            escalation: None,
            heard: None,
        }
    }

    fn spec(&self) -> AgentSpec {
        let mut registry = ToolRegistry::new();
        for tool in &self.tools {
            registry.register(tool.shared()).unwrap_or_else(|e| panic!("{e}"));
        }
        let registry = Arc::new(registry);
        let script = Script::from_value(self.script.clone()).unwrap_or_else(|e| panic!("{e}"));
        let scripted = ScriptedModel::new(script);
        let model: Arc<dyn tollgate_agent_core::ModelClient> = match &self.heard {
            Some(heard) => Arc::new(Listening { inner: scripted, heard: Arc::clone(heard) }),
            None => Arc::new(scripted),
        };
        let agent_loop = ToolLoop::new(model, registry.clone(), LoopConfig::default());
        AgentSpec {
            name: "writer".into(),
            model: "scripted".into(),
            agent_loop: Arc::new(agent_loop),
            tools: registry
                .iter()
                .map(|t| tollgate_agent_runtime::ToolInfo::of(t.tool().as_ref(), "default"))
                .collect(),
            approval_ttl: self.ttl,
            on_expiry: self.on_expiry,
            forbid_self_approval: self.forbid_self_approval,
            escalation: self.escalation.clone(),
        }
    }

    fn runtime(&self, store: Arc<dyn RunStore>, clock: &ManualClock, node: &str) -> Runtime {
        self.traced_runtime(store, clock, node, None)
    }

    fn traced_runtime(
        &self,
        store: Arc<dyn RunStore>,
        clock: &ManualClock,
        node: &str,
        telemetry: Option<tollgate_agent_runtime::Telemetry>,
    ) -> Runtime {
        let options = RuntimeOptions {
            node_id: node.into(),
            lease: Duration::from_secs(30),
            telemetry,
            ..RuntimeOptions::default()
        };
        Runtime::new(store, vec![self.spec()], Arc::new(clock.clone()), Arc::new(UuidV7Ids), options)
    }
}

fn write_tool() -> TestTool {
    TestTool::new("write").gate(Gate::Ask).preview("write a note")
}

fn one_write() -> Value {
    json!({"turns": [
        {"tool_calls": [{"name": "write", "arguments": {"text": "{{input}}"}}]},
        {"when_denied": {"text": "Not written."}, "when_approved": {"text": "done"}}
    ]})
}

fn two_writes() -> Value {
    json!({"turns": [
        {"tool_calls": [{"name": "write", "arguments": {"text": "a"}}, {"name": "write", "arguments": {"text": "b"}}]},
        {"text": "done"}
    ]})
}

fn digest(run: &RunRecord) -> String {
    run.held_turn().map(|p| p.turn_digest.0.clone()).unwrap_or_default()
}

async fn event_kinds(runtime: &Runtime, id: &RunId) -> Vec<EventKind> {
    runtime.events(id, 0, 1000).await.unwrap_or_default().into_iter().map(|e| e.kind).collect()
}

/// For each event of one of `kinds`, in order: its kind's name and the named fields of its data.
async fn event_fields(runtime: &Runtime, id: &RunId, kinds: &[EventKind], fields: &[&str]) -> Vec<Value> {
    let events = runtime.events(id, 0, 1000).await.unwrap_or_default();
    events
        .into_iter()
        .filter(|e| kinds.contains(&e.kind))
        .map(|e| {
            let mut row = vec![json!(e.kind.as_str())];
            row.extend(fields.iter().map(|f| e.data[*f].clone()));
            Value::Array(row)
        })
        .collect()
}

#[tokio::test]
async fn approve_runs_the_tool_once_and_the_log_verifies() {
    for (backend, store) in stores().await {
        let setup = Setup::new(one_write(), vec![write_tool()]);
        let runtime = setup.runtime(store, &ManualClock::at(T0), "node-a");
        let run =
            runtime.start_and_wait(StartRun::new("hello", "alice")).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(run.status(), RunStatus::WaitingForApproval, "{backend}");
        assert_eq!(setup.tools[0].call_count(), 0, "{backend}: nothing runs before the decision");
        let view = tollgate_agent_runtime::view::run_json(&run);
        assert_eq!(view["pending"]["calls"][0]["preview"], "write a note", "{backend}");

        let decided = runtime
            .decide(
                &run.id,
                &digest(&run),
                DecisionSet::Each(vec![("call_1".into(), Decision::Approve)]),
                &"bob".into(),
            )
            .await
            .unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(decided.status(), RunStatus::Running, "{backend}");
        // The claim's commit carries the approved call's ledger entry: one commit before the call runs.
        let claimed = runtime.events(&run.id, 4, 100).await.unwrap_or_default();
        let claimed: Vec<EventKind> = claimed.iter().filter(|e| e.seq <= decided.last_seq).map(|e| e.kind).collect();
        assert_eq!(claimed, vec![EventKind::Decision, EventKind::RunResumed, EventKind::ToolStarted], "{backend}");
        let done = runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(done.status(), RunStatus::Completed, "{backend}");
        assert_eq!(done.output(), Some("done"));
        assert!(done.held_turn().is_none(), "{backend}: finishing clears the held turn");
        assert_eq!(setup.tools[0].calls(), vec![(CallId::from("call_1"), json!({"text": "hello"}))]);
        assert_eq!(runtime.verify(&run.id).await.ok().and_then(|r| r.ok()), Some(done.last_seq), "{backend}");
        assert_eq!(
            event_kinds(&runtime, &run.id).await,
            vec![
                EventKind::RunStarted,
                EventKind::ModelRequest,
                EventKind::ModelResponse,
                EventKind::ApprovalRequested,
                EventKind::Decision,
                EventKind::RunResumed,
                EventKind::ToolStarted,
                EventKind::ToolFinished,
                EventKind::ModelRequest,
                EventKind::ModelResponse,
                EventKind::RunCompleted,
            ],
            "{backend}"
        );
        let decision = runtime.events(&run.id, 4, 1).await.unwrap_or_default();
        assert_eq!(decision[0].data["actor"], "bob", "{backend}: the decision names who decided");
    }
}

/// A runtime with one write tool over `inner` behind a store that logs its writes and counts its reads
/// (and passes commit taps on when `tapping`), and a run of it held at the gate by `start_and_wait`.
async fn logged_waiting_run(
    inner: Arc<dyn RunStore>,
    backend: &str,
    tapping: bool,
) -> (Arc<tollgate_agent_testkit::FailingStore>, Setup, Runtime, RunRecord) {
    let store = tollgate_agent_testkit::FailingStore::logging(inner);
    let store = Arc::new(if tapping { store.tapping() } else { store });
    let setup = Setup::new(one_write(), vec![write_tool()]);
    let runtime = setup.runtime(store.clone(), &ManualClock::at(T0), "node-a");
    let run =
        runtime.start_and_wait(StartRun::new("hello", "alice")).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
    (store, setup, runtime, run)
}

#[tokio::test]
async fn an_approval_cycle_costs_one_write_to_wait_and_two_to_finish() {
    for (backend, inner) in stores().await {
        // The waiting starter's run is created already held: one write.
        let (store, setup, runtime, run) = logged_waiting_run(inner, backend, false).await;
        assert_eq!(run.status(), RunStatus::WaitingForApproval, "{backend}");
        assert_eq!(store.writes(), vec!["create waiting_for_approval"], "{backend}");
        assert_eq!(runtime.get(&run.id).await.ok().map(|r| r.last_seq), Some(run.last_seq), "{backend}");
        // The approval claims the resume with the call's ledger entry; the end is the second write.
        runtime
            .decide(&run.id, &digest(&run), DecisionSet::ApproveAll, &"bob".into())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let done = runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(done.status(), RunStatus::Completed, "{backend}");
        assert_eq!(
            store.writes(),
            vec!["create waiting_for_approval", "transition vote", "transition complete"],
            "{backend}"
        );
        assert_eq!(setup.tools[0].call_count(), 1, "{backend}");
        assert_eq!(runtime.verify(&run.id).await.ok().and_then(|r| r.ok()), Some(done.last_seq), "{backend}");

        // A starter who takes the id at once gets a run already stored, as created.
        let started = runtime.start(StartRun::new("later", "alice")).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(started.status(), RunStatus::Running, "{backend}");
        let stored = runtime.get(&started.id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(stored.id, started.id, "{backend}");
        assert_eq!(store.writes()[3], "create running", "{backend}");
    }
}

#[tokio::test]
async fn a_waiting_starters_run_is_stored_by_its_first_durable_write() {
    // Turn 1 runs an allow-gated call; the second model call commits that progress first, which is
    // where the run is created; turn 2 then holds a call.
    let script = json!({"turns": [
        {"tool_calls": [{"name": "list"}]},
        {"tool_calls": [{"name": "write", "arguments": {"text": "x"}}]},
        {"text": "done"}
    ]});
    for (backend, inner) in stores().await {
        let store = Arc::new(tollgate_agent_testkit::FailingStore::logging(inner));
        let setup = Setup::new(script.clone(), vec![TestTool::new("list"), write_tool()]);
        let runtime = setup.runtime(store.clone(), &ManualClock::at(T0), "node-a");
        let run =
            runtime.start_and_wait(StartRun::new("go", "alice")).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(run.status(), RunStatus::WaitingForApproval, "{backend}");
        assert_eq!(store.writes(), vec!["create running", "transition suspend"], "{backend}");
        assert_eq!(
            event_kinds(&runtime, &run.id).await,
            vec![
                EventKind::RunStarted,
                EventKind::ModelRequest,
                EventKind::ModelResponse,
                EventKind::ToolStarted,
                EventKind::ToolFinished,
                EventKind::ModelRequest,
                EventKind::ModelResponse,
                EventKind::ApprovalRequested,
            ],
            "{backend}"
        );
        assert_eq!(runtime.verify(&run.id).await.ok().and_then(|r| r.ok()), Some(run.last_seq), "{backend}");
    }
}

#[tokio::test]
async fn a_run_resumed_by_another_runtime_on_the_same_file_gives_its_tools_the_metadata() {
    let url = format!("sqlite://{}", scratch_dir("runtime-metadata").join("tollgate.db").display());
    let open = || async { tollgate_agent_store::open(&url).await.unwrap_or_else(|e| panic!("{e}")) };
    let script = json!({"turns": [
        {"tool_calls": [{"name": "list"}]},
        {"tool_calls": [{"name": "write", "arguments": {"text": "x"}}]},
        {"text": "done"}
    ]});
    let given = json!({"customer": "acme", "tenant": {"id": 7}});
    let Value::Object(map) = given.clone() else { panic!("an object") };
    let metadata = Metadata::try_from(given.clone()).unwrap_or_else(|e| panic!("{e}"));

    let first = Setup::new(script.clone(), vec![TestTool::new("list"), write_tool()]);
    let runtime = first.runtime(open().await, &ManualClock::at(T0), "node-a");
    let run = runtime
        .start_and_wait(StartRun::new("go", "alice").metadata(map.clone()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.status(), RunStatus::WaitingForApproval);
    assert_eq!(run.metadata, metadata);
    assert_eq!(tollgate_agent_runtime::view::run_json(&run)["metadata"], given, "shown on the run");
    let seen: Vec<(RunId, Metadata)> = first.tools[0].contexts().into_iter().map(|c| (c.run_id, c.metadata)).collect();
    assert_eq!(seen, vec![(run.id.clone(), metadata.clone())], "the first segment's call");
    let events = runtime.events(&run.id, 0, 100).await.unwrap_or_default();
    assert!(events.iter().all(|e| !e.data.to_string().contains("acme")), "metadata stays out of the events");
    runtime.drain().await;
    drop(runtime);

    // Another process on the same file resumes the run: its tools get the metadata stored with it.
    let second = Setup::new(script, vec![TestTool::new("list"), write_tool()]);
    let runtime = second.runtime(open().await, &ManualClock::at(T0 + 1_000), "node-b");
    let loaded = runtime.get(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.metadata, metadata);
    let done = runtime
        .decide_and_wait(&loaded, &digest(&loaded), DecisionSet::ApproveAll, &"bob".into())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.status(), RunStatus::Completed);
    let seen: Vec<(RunId, CallId, Metadata)> =
        second.tools[1].contexts().into_iter().map(|c| (c.run_id, c.call_id, c.metadata)).collect();
    assert_eq!(seen, vec![(run.id.clone(), CallId::from("call_2"), metadata.clone())], "the resumed segment's call");
    assert_eq!(done.metadata, metadata);

    // Metadata over the limit starts nothing.
    let big = json!({"blob": "x".repeat(Metadata::MAX_BYTES)});
    let Value::Object(big) = big else { panic!("an object") };
    let refused = runtime.start(StartRun::new("go", "alice").metadata(big)).await;
    assert!(
        matches!(refused, Err(StartError::InvalidMetadata(MetadataError::TooLarge { limit: 16_384, .. }))),
        "{refused:?}"
    );
    let listed = runtime.list(RunQuery::default()).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(listed.runs.len(), 1, "nothing was stored");
}

#[tokio::test]
async fn an_edited_call_has_one_ledger_entry_with_the_arguments_it_ran_with() {
    for (backend, store) in stores().await {
        let setup = Setup::new(two_writes(), vec![write_tool()]);
        let runtime = setup.runtime(store, &ManualClock::at(T0), "node-a");
        let run =
            runtime.start_and_wait(StartRun::new("x", "alice")).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        let set = DecisionSet::Each(vec![
            ("call_1".into(), Decision::Edit { arguments: json!({"text": "edited"}) }),
            ("call_2".into(), Decision::Respond { result: "already written".into() }),
        ]);
        let done = runtime.decide_and_wait(&run, &digest(&run), set, &"bob".into()).await;
        let done = done.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(done.status(), RunStatus::Completed, "{backend}");
        assert_eq!(setup.tools[0].calls(), vec![(CallId::from("call_1"), json!({"text": "edited"}))], "{backend}");
        assert_eq!(
            event_fields(&runtime, &run.id, &[EventKind::ToolStarted], &["call_id", "arguments"]).await,
            vec![json!(["tool_started", "call_1", {"text": "edited"}])],
            "{backend}: one entry, with the edit's arguments"
        );
        assert_eq!(runtime.verify(&run.id).await.ok().and_then(|r| r.ok()), Some(done.last_seq), "{backend}");
    }
}

#[tokio::test]
async fn deny_all_gives_the_model_the_reason_and_runs_nothing() {
    let setup = Setup::new(one_write(), vec![write_tool()]);
    let runtime = setup.runtime(sqlite().await, &ManualClock::at(T0), "node-a");
    let run = runtime.start_and_wait(StartRun::new("hello", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    runtime
        .decide(&run.id, &digest(&run), DecisionSet::DenyAll { reason: "not on a Friday".into() }, &"bob".into())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let done = runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.output(), Some("Not written."));
    assert_eq!(setup.tools[0].call_count(), 0);
    let kinds = event_kinds(&runtime, &run.id).await;
    assert!(!kinds.contains(&EventKind::ToolStarted), "a denied call gets no tool_started");
}

#[tokio::test]
async fn partial_decisions_wait_for_the_rest_and_errors_change_nothing() {
    let setup = Setup::new(two_writes(), vec![write_tool()]);
    let runtime = setup.runtime(sqlite().await, &ManualClock::at(T0), "node-a");
    let run = runtime.start_and_wait(StartRun::new("x", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    let d = digest(&run);
    let each = |id: &str, decision: Decision| DecisionSet::Each(vec![(id.into(), decision)]);

    let stale = runtime.decide(&run.id, "sha256:0000", each("call_1", Decision::Approve), &"bob".into()).await;
    assert!(matches!(stale, Err(DecideError::StaleDigest { current }) if current.0 == d));
    let unknown = runtime.decide(&run.id, &d, each("call_9", Decision::Approve), &"bob".into()).await;
    assert!(matches!(unknown, Err(DecideError::Invalid(DecisionError::UnknownCall(id))) if id == "call_9"));
    let empty = runtime.decide(&run.id, &d, DecisionSet::Each(vec![]), &"bob".into()).await;
    assert!(matches!(empty, Err(DecideError::NoDecisions)));

    let partial = runtime.decide(&run.id, &d, each("call_1", Decision::Approve), &"bob".into()).await;
    let partial = partial.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(partial.status(), RunStatus::WaitingForApproval, "one of two calls decided: still waiting");
    assert_eq!(setup.tools[0].call_count(), 0);
    let again = runtime.decide(&run.id, &d, each("call_1", Decision::Approve), &"bob".into()).await;
    assert!(matches!(again, Err(DecideError::AlreadyDecided { call_id }) if call_id == "call_1"));

    runtime.decide(&run.id, &d, DecisionSet::ApproveAll, &"carol".into()).await.unwrap_or_else(|e| panic!("{e}"));
    let done = runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.status(), RunStatus::Completed);
    assert_eq!(setup.tools[0].call_count(), 2);
    // The first call's ledger entry rode with the claim, the second's was committed as it started: one
    // `tool_started` per call, each before its `tool_finished`.
    assert_eq!(
        event_fields(&runtime, &run.id, &[EventKind::ToolStarted, EventKind::ToolFinished], &["call_id"]).await,
        vec![
            json!(["tool_started", "call_1"]),
            json!(["tool_finished", "call_1"]),
            json!(["tool_started", "call_2"]),
            json!(["tool_finished", "call_2"]),
        ]
    );
    let after = runtime.decide(&run.id, &d, each("call_1", Decision::Approve), &"bob".into()).await;
    assert!(
        matches!(after, Err(DecideError::NotWaiting { status: RunStatus::Completed, .. })),
        "a finished run takes no decision"
    );
}

#[tokio::test]
async fn decide_and_wait_starts_from_the_loaded_run_and_rereads_a_stale_one() {
    let setup = Setup::new(two_writes(), vec![write_tool()]);
    let runtime = setup.runtime(sqlite().await, &ManualClock::at(T0), "node-a");
    let run = runtime.start_and_wait(StartRun::new("x", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    let d = digest(&run);

    // Someone else decides the first call after this caller loaded the run.
    let loaded = runtime.get(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    runtime
        .decide(&run.id, &d, DecisionSet::Each(vec![("call_1".into(), Decision::Approve)]), &"bob".into())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Approving "all" on the stale record is decided on the run as stored: only call_2 is left.
    let done = runtime.decide_and_wait(&loaded, &d, DecisionSet::ApproveAll, &"carol".into()).await;
    let done = done.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.status(), RunStatus::Completed, "answers once the resumed run has ended");
    assert_eq!(setup.tools[0].call_count(), 2);
    assert_eq!(
        event_fields(&runtime, &run.id, &[EventKind::Decision], &["call_id", "actor"]).await,
        vec![json!(["decision", "call_1", "bob"]), json!(["decision", "call_2", "carol"])]
    );

    // On a run that has ended, the loaded record's answer is the stored run's: a conflict.
    let late = runtime.decide_and_wait(&loaded, &d, DecisionSet::ApproveAll, &"dave".into()).await;
    assert!(matches!(late, Err(DecideError::NotWaiting { .. })), "{late:?}");

    // A partial decision answers at once, still waiting.
    let other = runtime.start_and_wait(StartRun::new("y", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    let each = DecisionSet::Each(vec![("call_1".into(), Decision::Approve)]);
    let partial = runtime.decide_and_wait(&other, &digest(&other), each, &"bob".into()).await;
    assert_eq!(partial.ok().map(|r| r.status()), Some(RunStatus::WaitingForApproval));
}

#[tokio::test]
async fn thirty_two_concurrent_deciders_resume_once() {
    for (backend, store) in stores().await {
        let setup = Setup::new(one_write(), vec![write_tool()]);
        let runtime = setup.runtime(store, &ManualClock::at(T0), "node-a");
        let run =
            runtime.start_and_wait(StartRun::new("race", "alice")).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        let d = digest(&run);
        let mut tasks = Vec::new();
        for i in 0..32 {
            let runtime = runtime.clone();
            let (id, d) = (run.id.clone(), d.clone());
            tasks.push(tokio::spawn(async move {
                runtime
                    .decide(
                        &id,
                        &d,
                        DecisionSet::Each(vec![("call_1".into(), Decision::Approve)]),
                        &Actor::from(format!("a{i}")),
                    )
                    .await
            }));
        }
        let mut won = 0;
        for task in tasks {
            match task.await.unwrap_or_else(|e| panic!("{e}")) {
                Ok(_) => won += 1,
                // The losers find the call decided, or the run already resumed.
                Err(
                    DecideError::AlreadyDecided { .. } | DecideError::NotWaiting { .. } | DecideError::LostRace { .. },
                ) => {}
                Err(other) => panic!("{backend}: unexpected {other}"),
            }
        }
        assert_eq!(won, 1, "{backend}: exactly one decision lands");
        let done = runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(done.status(), RunStatus::Completed, "{backend}");
        assert_eq!(setup.tools[0].call_count(), 1, "{backend}: the tool ran once");
        let resumed = event_kinds(&runtime, &run.id).await.iter().filter(|k| **k == EventKind::RunResumed).count();
        assert_eq!(resumed, 1, "{backend}");
    }
}

/// A quorum call (`approvals = 2`) runs only once two distinct people approved it: the first approval
/// keeps the run waiting (its `decision` event counts it), the same actor twice is a conflict, an edit
/// is refused, `approve_all` counts once for its actor, and the second approval resumes the run, which
/// runs the call once.
#[tokio::test]
async fn a_quorum_call_runs_after_its_nth_distinct_approval() {
    for (backend, store) in stores().await {
        let setup = Setup::new(one_write(), vec![write_tool().approvals(2)]);
        let runtime = setup.runtime(store, &ManualClock::at(T0), "node-a");
        let run = runtime.start_and_wait(StartRun::new("pay", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
        let d = digest(&run);
        let approval = run.held_turn().and_then(|h| h.approval(&"call_1".into())).cloned();
        assert_eq!(approval.map(|a| a.required()), Some(2), "{backend}: the requirement is the tool's");
        let requested = runtime.events(&run.id, 0, 100).await.unwrap_or_else(|e| panic!("{e}"));
        let requested = requested.iter().find(|e| e.kind == EventKind::ApprovalRequested).map(|e| e.data.clone());
        assert_eq!(
            requested.map(|d| d["calls"][0]["approvals"].clone()),
            Some(json!({"required": 2, "given": []})),
            "{backend}: approval_requested says how many people the call needs"
        );
        let each = |decision: Decision| DecisionSet::Each(vec![("call_1".into(), decision)]);

        let first = runtime.decide(&run.id, &d, each(Decision::Approve), &"bob".into()).await;
        let first = first.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(first.status(), RunStatus::WaitingForApproval, "{backend}: one of two approvals");
        let shown = tollgate_agent_runtime::wire::run(&first);
        let call = &shown.pending.as_ref().map(|p| p.calls[0].clone()).unwrap_or_else(|| panic!("{backend}"));
        assert!(call.takes_decision && call.decision.is_none(), "{backend}: still open");
        assert_eq!(
            call.approvals,
            Some(tollgate_agent_protocol::Approvals { required: 2, given: vec!["bob".into()] }),
            "{backend}"
        );

        let twice = runtime.decide(&run.id, &d, each(Decision::Approve), &"bob".into()).await;
        assert!(
            matches!(&twice, Err(DecideError::Vote(ApprovalError::AlreadyApproved { actor, .. })) if actor == "bob"),
            "{twice:?}"
        );
        let all_again = runtime.decide(&run.id, &d, DecisionSet::ApproveAll, &"bob".into()).await;
        assert!(
            matches!(all_again, Err(DecideError::Vote(ApprovalError::AlreadyApproved { .. }))),
            "{backend}: approve_all counts once"
        );
        let edit = runtime
            .decide(&run.id, &d, each(Decision::Edit { arguments: json!({"text": "x"}) }), &"carol".into())
            .await;
        assert!(
            matches!(edit, Err(DecideError::Vote(ApprovalError::QuorumAction { action: "edit", required: 2, .. }))),
            "{edit:?}"
        );
        let respond =
            runtime.decide(&run.id, &d, each(Decision::Respond { result: "ok".into() }), &"carol".into()).await;
        assert!(
            matches!(respond, Err(DecideError::Vote(ApprovalError::QuorumAction { action: "respond", .. }))),
            "{respond:?}"
        );
        assert_eq!(setup.tools[0].call_count(), 0, "{backend}: nothing ran");

        runtime.decide(&run.id, &d, DecisionSet::ApproveAll, &"carol".into()).await.unwrap_or_else(|e| panic!("{e}"));
        let done = runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(done.status(), RunStatus::Completed, "{backend}");
        assert_eq!(done.output(), Some("done"), "{backend}");
        assert_eq!(setup.tools[0].call_count(), 1, "{backend}: the call ran once");
        assert_eq!(
            event_fields(&runtime, &run.id, &[EventKind::Decision, EventKind::RunResumed], &["actor", "approvals"])
                .await,
            vec![
                json!(["decision", "bob", {"required": 2, "given": ["bob"]}]),
                json!(["decision", "carol", {"required": 2, "given": ["bob", "carol"]}]),
                json!(["run_resumed", "carol", null]),
            ],
            "{backend}"
        );
    }
}

/// One deny denies a quorum call, even after approvals (the denier's own among them).
#[tokio::test]
async fn one_deny_denies_a_quorum_call() {
    let setup = Setup::new(one_write(), vec![write_tool().approvals(3)]);
    let runtime = setup.runtime(sqlite().await, &ManualClock::at(T0), "node-a");
    let run = runtime.start_and_wait(StartRun::new("pay", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    let d = digest(&run);
    let each = |decision: Decision| DecisionSet::Each(vec![("call_1".into(), decision)]);
    for actor in ["bob", "carol"] {
        runtime.decide(&run.id, &d, each(Decision::Approve), &actor.into()).await.unwrap_or_else(|e| panic!("{e}"));
    }
    let denied = runtime.decide(&run.id, &d, each(Decision::Deny { reason: "too much".into() }), &"carol".into()).await;
    denied.unwrap_or_else(|e| panic!("{e}"));
    let done = runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((done.status(), done.output()), (RunStatus::Completed, Some("Not written.")));
    assert_eq!(setup.tools[0].call_count(), 0, "a denied call never runs");
}

/// Thirty-two approvers race on a quorum of three: exactly three distinct approvals land, the third
/// resumes the run, and the call runs once.
#[tokio::test]
async fn thirty_two_approvers_racing_on_a_quorum_resume_once() {
    for (backend, store) in stores().await {
        let setup = Setup::new(one_write(), vec![write_tool().approvals(3)]);
        let runtime = setup.runtime(store, &ManualClock::at(T0), "node-a");
        let run = runtime.start_and_wait(StartRun::new("race", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
        let d = digest(&run);
        let tasks: Vec<_> = (0..32)
            .map(|i| {
                let (runtime, id, d) = (runtime.clone(), run.id.clone(), d.clone());
                tokio::spawn(async move {
                    runtime.decide(&id, &d, DecisionSet::ApproveAll, &Actor::from(format!("a{i}"))).await
                })
            })
            .collect();
        let mut landed = 0;
        for task in tasks {
            match task.await.unwrap_or_else(|e| panic!("{e}")) {
                Ok(_) => landed += 1,
                Err(DecideError::NotWaiting { .. } | DecideError::LostRace { .. } | DecideError::NothingToDecide) => {}
                Err(other) => panic!("{backend}: unexpected {other}"),
            }
        }
        assert_eq!(landed, 3, "{backend}: exactly three approvals land");
        let done = runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(done.status(), RunStatus::Completed, "{backend}");
        assert_eq!(setup.tools[0].call_count(), 1, "{backend}: the tool ran once");
        let kinds = event_kinds(&runtime, &run.id).await;
        assert_eq!(kinds.iter().filter(|k| **k == EventKind::Decision).count(), 3, "{backend}");
        assert_eq!(kinds.iter().filter(|k| **k == EventKind::RunResumed).count(), 1, "{backend}");
    }
}

/// The changed-target case: an edit recorded by a partial decision, its arguments forbidden by the time
/// the last decision settles the turn. The resume is planned once, by that last decision: the edited
/// call ends as its own error result, the rest of the turn runs, and the run completes (never failed).
#[tokio::test]
async fn an_edit_whose_target_changed_before_the_turn_settled_is_its_calls_error_result() {
    let changed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = Arc::clone(&changed);
    let write = write_tool().gate_fn(move |args| {
        let edited = args["text"] == "edited";
        if edited && seen.load(std::sync::atomic::Ordering::SeqCst) { Gate::Forbid } else { Gate::Ask }
    });
    let setup = Setup::new(two_writes(), vec![write]);
    let runtime = setup.runtime(sqlite().await, &ManualClock::at(T0), "node-a");
    let run = runtime.start_and_wait(StartRun::new("x", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    let d = digest(&run);
    let edit = DecisionSet::Each(vec![("call_1".into(), Decision::Edit { arguments: json!({"text": "edited"}) })]);
    let partial = runtime.decide(&run.id, &d, edit, &"bob".into()).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(partial.status(), RunStatus::WaitingForApproval);

    changed.store(true, std::sync::atomic::Ordering::SeqCst);
    let last = DecisionSet::Each(vec![("call_2".into(), Decision::Approve)]);
    runtime.decide(&run.id, &d, last, &"carol".into()).await.unwrap_or_else(|e| panic!("{e}"));
    let done = runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((done.status(), done.output()), (RunStatus::Completed, Some("done")));
    assert_eq!(
        setup.tools[0].calls(),
        vec![(CallId::from("call_2"), json!({"text": "b"}))],
        "only the approved call ran"
    );
    let finished =
        event_fields(&runtime, &run.id, &[EventKind::ToolStarted, EventKind::ToolFinished], &["call_id"]).await;
    assert_eq!(finished, vec![json!(["tool_started", "call_2"]), json!(["tool_finished", "call_2"])]);
}

#[tokio::test]
async fn self_approval_can_be_forbidden() {
    let mut setup = Setup::new(one_write(), vec![write_tool()]);
    setup.forbid_self_approval = true;
    let runtime = setup.runtime(sqlite().await, &ManualClock::at(T0), "node-a");
    let run = runtime.start_and_wait(StartRun::new("x", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    let own = runtime.decide(&run.id, &digest(&run), DecisionSet::ApproveAll, &"alice".into()).await;
    assert!(matches!(own, Err(DecideError::SelfApprovalForbidden { actor, .. }) if actor == "alice"));
    assert!(matches!(
        runtime.check_decider("writer", &"alice".into(), &"alice".into()),
        Err(DecideError::SelfApprovalForbidden { .. })
    ));
    assert!(runtime.check_decider("writer", &"alice".into(), &"bob".into()).is_ok());
    let other = runtime.decide(&run.id, &digest(&run), DecisionSet::ApproveAll, &"bob".into()).await;
    assert!(other.is_ok());
}

#[tokio::test]
async fn deadlines_apply_the_agents_on_expiry() {
    for on_expiry in [OnExpiry::Deny, OnExpiry::Cancel] {
        let mut setup = Setup::new(one_write(), vec![write_tool()]);
        setup.ttl = Some(Duration::from_secs(60));
        setup.on_expiry = on_expiry;
        let clock = ManualClock::at(T0);
        let runtime = setup.runtime(sqlite().await, &clock, "node-a");
        let run = runtime.start_and_wait(StartRun::new("x", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run.held_turn().and_then(|p| p.expires_at), Some(T0 + 60_000));
        assert_eq!(runtime.sweep().await.ok(), Some(0), "not due yet");
        clock.advance(Duration::from_secs(61));
        assert_eq!(runtime.sweep().await.ok(), Some(1));
        let done = runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
        let events = runtime.events(&run.id, 0, 100).await.unwrap_or_default();
        match on_expiry {
            OnExpiry::Deny => {
                assert_eq!(done.status(), RunStatus::Completed);
                assert_eq!(done.output(), Some("Not written."));
                let decision = events.iter().find(|e| e.kind == EventKind::Decision).map(|e| e.data.clone());
                assert_eq!(
                    decision,
                    Some(
                        json!({"action": "deny", "reason": "approval deadline passed", "call_id": "call_1", "actor": "system"})
                    )
                );
            }
            OnExpiry::Cancel => {
                assert_eq!(done.status(), RunStatus::Expired);
                assert_eq!(events.last().map(|e| e.kind), Some(EventKind::RunExpired));
            }
            other => panic!("no case for {other:?}"),
        }
        assert_eq!(setup.tools[0].call_count(), 0);
    }
}

/// A held turn nobody settles is escalated once, `escalate_after` after it was held: an
/// `approval_escalated` event naming the agent's notifiers, every open approval marked, on either
/// backend and whichever of two nodes sweeps; it keeps waiting and a decision still resumes it. A
/// later held turn of the same run is escalated again, on its own schedule.
#[tokio::test]
async fn a_held_turn_nobody_settles_is_escalated_once() {
    for (backend, store) in stores().await {
        let mut setup = Setup::new(
            json!({"turns": [
                {"tool_calls": [{"name": "write", "arguments": {"text": "a"}}]},
                {"tool_calls": [{"name": "write", "arguments": {"text": "b"}}]},
                {"text": "done"}
            ]}),
            vec![write_tool()],
        );
        // Written as the configuration wrote it, not as it would be shortened (`1h`).
        let rule = tollgate_agent_runtime::EscalationRule {
            after: Duration::from_secs(3600),
            after_text: "60m".to_owned(),
            notify: vec!["ops".to_owned(), "oncall".to_owned()],
        };
        setup.escalation = Some(rule);
        let clock = ManualClock::at(T0);
        let (a, b) = (setup.runtime(store.clone(), &clock, "node-a"), setup.runtime(store.clone(), &clock, "node-b"));
        let run = a.start_and_wait(StartRun::new("x", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run.status(), RunStatus::WaitingForApproval, "{backend}");
        clock.advance(Duration::from_secs(3599));
        assert_eq!(a.escalate_due().await.ok(), Some(0), "{backend}: not due yet");
        clock.advance(Duration::from_secs(1));
        let (first, second) = tokio::join!(a.escalate_due(), b.escalate_due());
        assert_eq!(first.unwrap_or(9) + second.unwrap_or(9), 1, "{backend}: escalated once, by one node");
        assert_eq!(a.escalate_due().await.ok(), Some(0), "{backend}: once per held turn");
        let escalated = a.get(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(escalated.status(), RunStatus::WaitingForApproval, "{backend}");
        let approval = escalated.held_turn().and_then(|held| held.approvals.first()).cloned();
        let marker = approval.as_ref().and_then(|a| a.escalated()).map(|e| (e.at, e.notified.clone()));
        assert_eq!(marker, Some((T0 + 3_600_000, vec!["ops".to_owned(), "oncall".to_owned()])), "{backend}");
        let shown = tollgate_agent_runtime::wire::run(&escalated).pending.and_then(|p| p.escalated);
        let notified = shown.map(|e| e.notified);
        assert_eq!(notified, Some(vec!["ops".to_owned(), "oncall".to_owned()]), "{backend}: the run object shows it");
        let logged =
            event_fields(&a, &run.id, &[EventKind::ApprovalEscalated], &["turn_digest", "after", "notified"]).await;
        assert_eq!(logged, vec![json!(["approval_escalated", digest(&run), "60m", ["ops", "oncall"]])], "{backend}");

        // Still decided as ever; the next held turn waits its own hour.
        let next = a
            .decide(&run.id, &digest(&escalated), DecisionSet::ApproveAll, &"bob".into())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(next.status(), RunStatus::Running | RunStatus::Queued | RunStatus::WaitingForApproval));
        let held_again = a.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(held_again.status(), RunStatus::WaitingForApproval, "{backend}");
        assert_ne!(digest(&held_again), digest(&run));
        assert_eq!(b.escalate_due().await.ok(), Some(0), "{backend}: the new turn was just held");
        clock.advance(Duration::from_secs(3600));
        assert_eq!(b.escalate_due().await.ok(), Some(1), "{backend}: the second turn");
        let kinds = event_kinds(&a, &run.id).await;
        assert_eq!(kinds.iter().filter(|k| **k == EventKind::ApprovalEscalated).count(), 2, "{backend}");
        let verified = a.verify(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(verified.is_ok(), "{backend}: {verified:?}");
    }
}

#[tokio::test]
async fn a_corrupt_suspension_fails_only_its_run() {
    let store = sqlite().await;
    let setup = Setup::new(one_write(), vec![write_tool()]);
    let clock = ManualClock::at(T0);
    let runtime = setup.runtime(store.clone(), &clock, "node-a");
    let healthy = runtime.start_and_wait(StartRun::new("ok", "alice")).await.unwrap_or_else(|e| panic!("{e}"));

    // A run whose stored suspension was written by a future Tollgate.
    let lease = tollgate_agent_core::Lease { owner: "node-x".into(), expires_at: T0 + 30_000 };
    let record = RunRecord::new(
        "0190aaaa-0000-7000-8000-000000000001".into(),
        "writer".into(),
        "x".into(),
        "alice".into(),
        T0,
        Some(lease),
    );
    store.create(record.clone(), vec![]).await.unwrap_or_else(|e| panic!("{e}"));
    let held = HeldTurn {
        suspension: StoredSuspension::from_stored(r#"{"schema_version": 99}"#.into()),
        turn_digest: TurnDigest("sha256:abc".into()),
        approvals: vec![tollgate_agent_core::Approval::pending(
            "ap-1".into(),
            record.id.clone(),
            "call_1",
            tollgate_agent_core::Requirement::SINGLE,
            None,
        )],
        expires_at: None,
    };
    let suspend = Transition::Suspend { held, iterations: 1, usage: Default::default() };
    store
        .transition(&record.id, Guard::Lease("node-x".into()), suspend, vec![], T0)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let refused = runtime.decide(&record.id, "sha256:abc", DecisionSet::ApproveAll, &"bob".into()).await;
    assert!(
        matches!(&refused, Err(DecideError::CorruptSuspension { detail, .. }) if detail.contains("schema_version 99")),
        "{refused:?}"
    );
    let failed = runtime.get(&record.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(failed.status(), RunStatus::Failed);
    assert_eq!(failed.error().as_ref().map(|e| e.kind.as_str()), Some("corrupt_suspension"));

    runtime
        .decide(&healthy.id, &digest(&healthy), DecisionSet::ApproveAll, &"bob".into())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let done = runtime.wait_settled(&healthy.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.status(), RunStatus::Completed, "other runs keep working");
}

#[tokio::test]
async fn a_suspension_that_cannot_be_stored_fails_the_run_visibly() {
    let store: Arc<dyn RunStore> = Arc::new(tollgate_agent_testkit::FailingStore::new(sqlite().await, "suspend"));
    let setup = Setup::new(one_write(), vec![write_tool()]);
    let runtime = setup.runtime(store, &ManualClock::at(T0), "node-a");
    // Started and held in one write (the starter waits)...
    let run = runtime.start_and_wait(StartRun::new("x", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.status(), RunStatus::Failed, "never reported as waiting");
    assert_eq!(run.error().as_ref().map(|e| e.kind.as_str()), Some("store"));
    assert_eq!(runtime.get(&run.id).await.ok().map(|r| r.status()), Some(RunStatus::Failed), "stored as failed");
    // ...or created first (the starter took the id at once) and held by a later write.
    let run = runtime.start(StartRun::new("y", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    let run = runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.status(), RunStatus::Failed, "never reported as waiting");
    assert_eq!(run.error().as_ref().map(|e| e.kind.as_str()), Some("store"));
}

#[tokio::test]
async fn cancel_and_purge() {
    let setup = Setup::new(one_write(), vec![write_tool()]);
    let clock = ManualClock::at(T0);
    let runtime = setup.runtime(sqlite().await, &clock, "node-a");
    let waiting = runtime.start_and_wait(StartRun::new("keep", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    let cancelled = runtime.start_and_wait(StartRun::new("drop", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    let c =
        runtime.cancel(&cancelled.id, &"alice".into(), Some("changed my mind")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.status(), RunStatus::Cancelled);
    assert!(matches!(
        runtime.cancel(&cancelled.id, &"alice".into(), None).await,
        Err(CancelError::AlreadyTerminal { status: RunStatus::Cancelled, .. })
    ));

    clock.advance(Duration::from_secs(3600));
    let now = clock.now();
    // Terminal runs older than 30 minutes go; waiting runs are kept for 90 days.
    let purged = runtime.purge(now - 1_800_000, now - 90 * 86_400_000).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(purged, 1);
    assert!(matches!(runtime.get(&cancelled.id).await, Err(ReadError::NotFound(_))));
    assert!(runtime.events(&cancelled.id, 0, 10).await.is_err(), "events go with their run");
    assert!(runtime.get(&waiting.id).await.is_ok());
    let purged = runtime.purge(now - 1_800_000, now - 1_800_000).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(purged, 1, "the waiting run goes by the waiting window");
}

const CRASH_CHILD_DB: &str = "TOLLGATE_CRASH_CHILD_DB";

/// The child half of the crash test: approves the held call and hangs inside the tool until killed.
/// Without the environment variable it does nothing (it is not a test on its own).
#[tokio::test]
async fn crash_child_process() {
    let Ok(db) = std::env::var(CRASH_CHILD_DB) else { return };
    let store = tollgate_agent_store::open(&format!("sqlite://{db}")).await.unwrap_or_else(|e| panic!("{e}"));
    let setup = Setup::new(one_write(), vec![write_tool().behaviour(tollgate_agent_testkit::Behaviour::Hang)]);
    let runtime = setup.runtime(store, &ManualClock::at(T0), "node-child");
    let run = runtime.start_and_wait(StartRun::new("crash", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    runtime
        .decide(&run.id, &digest(&run), DecisionSet::ApproveAll, &"bob".into())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_secs(3600)).await;
}

/// Runs the child test `child` (this test binary, `--exact child`) on a fresh SQLite database, waits
/// (bounded) until the run it starts has committed the event `reached` looks for, and kills the child
/// there: a process dying mid-call. Returns the store and the run.
async fn crash_child_when(
    child: &str,
    reached: impl Fn(&tollgate_agent_core::StoredEvent) -> bool,
) -> (Arc<dyn RunStore>, RunId) {
    let dir = scratch_dir("crash");
    let db = dir.join("tollgate.db");
    let mut process = std::process::Command::new(std::env::current_exe().unwrap_or_else(|e| panic!("{e}")))
        .args(["--exact", child, "--nocapture", "--test-threads=1"])
        .env(CRASH_CHILD_DB, &db)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));

    let mut store: Option<Arc<dyn RunStore>> = None;
    let mut run_id = None;
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if !db.exists() {
            continue;
        }
        if store.is_none() {
            store = tollgate_agent_store::open(&format!("sqlite://{}", db.display())).await.ok();
        }
        let Some(s) = &store else { continue };
        let page = s.list(tollgate_agent_core::RunQuery { limit: 1, ..Default::default() }).await;
        let Some(run) = page.ok().and_then(|p| p.runs.into_iter().next()) else { continue };
        let events = s.events(&run.id, 0, 100).await.unwrap_or_default();
        if events.iter().any(&reached) {
            run_id = Some(run.id);
            break;
        }
    }
    let _ = process.kill();
    let _ = process.wait();
    let (Some(store), Some(run_id)) = (store, run_id) else { panic!("{child} never reached the crash point") };
    (store, run_id)
}

#[tokio::test]
async fn a_call_started_but_never_finished_is_in_doubt_after_a_crash() {
    // Killed mid-call: tool_started is committed, tool_finished never will be.
    let (store, run_id) = crash_child_when("crash_child_process", |e| e.kind == EventKind::ToolStarted).await;

    // Another process, after the child's lease ran out.
    let setup = Setup::new(one_write(), vec![write_tool()]);
    let clock = ManualClock::at(T0 + 120_000);
    let runtime = setup.runtime(store, &clock, "node-parent");
    assert_eq!(runtime.sweep().await.ok(), Some(1));
    let run = runtime.wait_settled(&run_id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.status(), RunStatus::WaitingForApproval, "back to waiting, not re-run");
    let view = tollgate_agent_runtime::view::run_json(&run);
    assert_eq!(view["pending"]["calls"][0]["in_doubt"], true);
    assert_eq!(view["pending"]["calls"][0]["state"], "in_doubt");
    assert_eq!(view["pending"]["calls"][0]["takes_decision"], true);
    assert_eq!(setup.tools[0].call_count(), 0, "nothing runs again without a decision");
    assert_eq!(runtime.sweep().await.ok(), Some(0), "a sweep does not touch it again");

    runtime
        .decide(&run_id, &digest(&run), DecisionSet::ApproveAll, &"bob".into())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let done = runtime.wait_settled(&run_id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.status(), RunStatus::Completed);
    assert_eq!(setup.tools[0].call_count(), 1, "run again once a person approved");
    assert!(runtime.verify(&run_id).await.ok().is_some_and(|r| r.is_ok()));
}

/// One turn asking for two calls: `write` (call_1), then `send` (call_2).
fn write_then_send() -> Value {
    json!({"turns": [
        {"tool_calls": [{"name": "write", "arguments": {"text": "a"}}, {"name": "send", "arguments": {"text": "b"}}]},
        {"text": "done"}
    ]})
}

fn send_tool() -> TestTool {
    TestTool::new("send").gate(Gate::Ask).preview("send b")
}

/// The child half of the two-call crash tests: approves both held calls; `write` (call_1) runs to its
/// end, `send` (call_2) hangs until the process is killed. Without the environment variable it does
/// nothing (it is not a test on its own).
#[tokio::test]
async fn crash_child_process_after_the_first_call() {
    let Ok(db) = std::env::var(CRASH_CHILD_DB) else { return };
    let store = tollgate_agent_store::open(&format!("sqlite://{db}")).await.unwrap_or_else(|e| panic!("{e}"));
    let send = send_tool().behaviour(tollgate_agent_testkit::Behaviour::Hang);
    let setup = Setup::new(write_then_send(), vec![write_tool(), send]);
    let runtime = setup.runtime(store, &ManualClock::at(T0), "node-child");
    let run = runtime.start_and_wait(StartRun::new("crash", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    runtime
        .decide(&run.id, &digest(&run), DecisionSet::ApproveAll, &"bob".into())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_secs(3600)).await;
}

/// A run whose process died after call_1's `tool_finished` and before call_2's, taken over by another
/// process (`setup`'s tools): back to waiting, with call_1 finished and call_2 in doubt.
async fn crashed_between_two_calls(setup: &Setup) -> (Runtime, RunRecord) {
    let (store, run_id) = crash_child_when("crash_child_process_after_the_first_call", |e| {
        e.kind == EventKind::ToolStarted && e.data["call_id"] == "call_2"
    })
    .await;
    let runtime = setup.runtime(store, &ManualClock::at(T0 + 120_000), "node-parent");
    assert_eq!(runtime.sweep().await.ok(), Some(1));
    let run = runtime.wait_settled(&run_id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.status(), RunStatus::WaitingForApproval, "back to waiting, nothing re-run");
    (runtime, run)
}

/// Every `tool_started` and `tool_finished` of the run, as (kind, call_id).
async fn tool_ledger(runtime: &Runtime, id: &RunId) -> Vec<Value> {
    event_fields(runtime, id, &[EventKind::ToolStarted, EventKind::ToolFinished], &["call_id"]).await
}

/// The ledger of a run that crashed between its two calls and then completed: call_1 ran once (in the
/// child), call_2 started in the child, was cut off, and ran once more after the decision.
fn ledger_after_the_crash() -> Vec<Value> {
    vec![
        json!(["tool_started", "call_1"]),
        json!(["tool_finished", "call_1"]),
        json!(["tool_started", "call_2"]),
        json!(["tool_started", "call_2"]),
        json!(["tool_finished", "call_2"]),
    ]
}

#[tokio::test]
async fn after_a_crash_between_two_calls_the_view_says_which_ran_and_deciding_the_rest_resumes() {
    let setup = Setup::new(write_then_send(), vec![write_tool(), send_tool()]);
    let (runtime, run) = crashed_between_two_calls(&setup).await;
    let view = tollgate_agent_runtime::view::run_json(&run);
    let calls = &view["pending"]["calls"];
    // call_1 already ran: it says so, with its result, and takes no decision. The v1 fields stay.
    assert_eq!(calls[0]["state"], "finished");
    assert_eq!(calls[0]["takes_decision"], false);
    assert_eq!(calls[0]["result"], json!({"content": "ran write with {\"text\":\"a\"}", "is_error": false}));
    assert_eq!(
        (&calls[0]["gate"], &calls[0]["in_doubt"], &calls[0]["decision"]),
        (&json!("ask"), &json!(false), &Value::Null)
    );
    // call_2 started and never finished.
    assert_eq!(calls[1]["state"], "in_doubt");
    assert_eq!(calls[1]["takes_decision"], true);
    assert_eq!((&calls[1]["in_doubt"], &calls[1]["result"]), (&json!(true), &Value::Null));
    let wire = tollgate_agent_runtime::view::run_view(&run);
    let open: Vec<&str> = wire.awaiting_decision().map(|c| c.call_id.as_str()).collect();
    assert_eq!(open, ["call_2"]);

    // Deciding call_1 is refused, saying it already ran; nothing is recorded.
    let refused = runtime
        .decide(&run.id, &digest(&run), DecisionSet::Each(vec![("call_1".into(), Decision::Approve)]), &"bob".into())
        .await;
    assert!(
        matches!(&refused, Err(DecideError::Invalid(DecisionError::AlreadyRan { call_id })) if call_id == "call_1"),
        "{refused:?}"
    );
    assert!(refused.is_err_and(|e| e.to_string().contains("already ran")));
    assert_eq!(runtime.get(&run.id).await.ok().map(|r| r.version), Some(run.version), "nothing was recorded");

    // Deciding call_2 alone completes the set and resumes.
    runtime
        .decide(&run.id, &digest(&run), DecisionSet::Each(vec![("call_2".into(), Decision::Approve)]), &"bob".into())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let done = runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.status(), RunStatus::Completed);
    assert_eq!(done.output(), Some("done"));
    assert_eq!(setup.tools[0].call_count(), 0, "call_1 is not run again");
    assert_eq!(setup.tools[1].call_count(), 1, "call_2 runs once, on the decision");
    assert_eq!(tool_ledger(&runtime, &run.id).await, ledger_after_the_crash());
    assert!(runtime.verify(&run.id).await.ok().is_some_and(|r| r.is_ok()));
}

#[tokio::test]
async fn after_a_crash_between_two_calls_approve_all_ends_as_deciding_the_rest_does() {
    let per_call = Setup::new(write_then_send(), vec![write_tool(), send_tool()]);
    let (runtime, run) = crashed_between_two_calls(&per_call).await;
    let decide_call_2 = DecisionSet::Each(vec![("call_2".into(), Decision::Approve)]);
    runtime.decide(&run.id, &digest(&run), decide_call_2, &"bob".into()).await.unwrap_or_else(|e| panic!("{e}"));
    let one_by_one = runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    let one_by_one_kinds = event_kinds(&runtime, &run.id).await;

    let all = Setup::new(write_then_send(), vec![write_tool(), send_tool()]);
    let (runtime, run) = crashed_between_two_calls(&all).await;
    runtime
        .decide(&run.id, &digest(&run), DecisionSet::ApproveAll, &"bob".into())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let done = runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        event_fields(&runtime, &run.id, &[EventKind::Decision], &["call_id", "action"]).await,
        vec![
            json!(["decision", "call_1", "approve"]),
            json!(["decision", "call_2", "approve"]),
            json!(["decision", "call_2", "approve"]),
        ],
        "the child approved both; after the crash approve_all passes over call_1, which already ran"
    );

    assert_eq!(done.status(), RunStatus::Completed);
    assert_eq!((done.status(), done.output()), (one_by_one.status(), one_by_one.output()));
    assert_eq!(event_kinds(&runtime, &run.id).await, one_by_one_kinds, "the same steps, in the same order");
    assert_eq!(tool_ledger(&runtime, &run.id).await, ledger_after_the_crash());
    for setup in [&per_call, &all] {
        assert_eq!(setup.tools.iter().map(TestTool::call_count).collect::<Vec<_>>(), [0, 1]);
    }
}

/// `[privacy] level`: events keep shapes (redacted) or ids only (metadata); the held turn keeps the calls
/// in full for the approver; the chain verifies over what is stored; a configured secret is redacted.
#[tokio::test]
async fn privacy_levels_shape_what_events_keep() {
    use tollgate_agent_runtime::PrivacyLevel;
    for (backend, store) in stores().await {
        for level in [PrivacyLevel::Redacted, PrivacyLevel::Metadata] {
            let setup = Setup::new(one_write(), vec![write_tool()]);
            let options = RuntimeOptions {
                privacy: level,
                redactor: tollgate_agent_core::Redactor::new(["sk-live-0123456789"]),
                ..RuntimeOptions::default()
            };
            let clock = ManualClock::at(T0);
            let runtime =
                Runtime::new(store.clone(), vec![setup.spec()], Arc::new(clock.clone()), Arc::new(UuidV7Ids), options);
            let input = "pay with sk-live-0123456789";
            let run = runtime
                .start_and_wait(StartRun::new(input, "alice"))
                .await
                .unwrap_or_else(|e| panic!("{backend}: {e}"));
            let held = run.held_turn().map(|p| p.suspension.as_str().to_owned()).unwrap_or_default();
            assert!(held.contains(input), "{backend} {level:?}: the held turn keeps the call in full");
            let done = runtime
                .decide_and_wait(&run, &digest(&run), DecisionSet::ApproveAll, &"bob".into())
                .await
                .unwrap_or_else(|e| panic!("{backend}: {e}"));
            assert_eq!(done.status(), RunStatus::Completed, "{backend} {level:?}");
            let started = event_fields(&runtime, &run.id, &[EventKind::RunStarted], &["input", "agent"]).await;
            let tool = event_fields(&runtime, &run.id, &[EventKind::ToolStarted], &["call_id", "arguments"]).await;
            match level {
                PrivacyLevel::Redacted => {
                    // The secret is redacted first: "pay with [redacted]" is 19 bytes.
                    assert_eq!(started, vec![json!(["run_started", "[string: 19 bytes]", "writer"])]);
                    assert_eq!(tool, vec![json!(["tool_started", "call_1", {"text": "[string: 19 bytes]"}])]);
                }
                _ => {
                    assert_eq!(started, vec![json!(["run_started", null, "writer"])]);
                    assert_eq!(tool, vec![json!(["tool_started", "call_1", null])]);
                }
            }
            let all = runtime.events(&run.id, 0, 1000).await.unwrap_or_default();
            assert!(!serde_json::to_string(&all).unwrap_or_default().contains("sk-live"), "{backend} {level:?}");
            assert_eq!(runtime.verify(&run.id).await.ok().and_then(|r| r.ok()), Some(done.last_seq), "{backend}");
        }
    }
}

#[tokio::test]
async fn the_closing_completion_at_the_iteration_cap_and_run_completed_are_round_n_plus_one() {
    // The default cap is 10 model calls with tools. Turn 1 holds a write; every later turn calls `tick`
    // (allow), past the cap: turn 10's call is refused, and the closing completion (no tools offered,
    // round 11) ends the run; its tool calls are dropped.
    let cap = LoopConfig::default().max_iterations;
    let mut turns = vec![json!({"tool_calls": [{"name": "write", "arguments": {"text": "{{input}}"}}]})];
    turns.extend((2..=cap).map(|_| json!({"tool_calls": [{"name": "tick"}]})));
    turns.push(json!({"text": "Stopping at the cap.", "tool_calls": [{"name": "tick"}]}));
    let script = json!({ "turns": turns });
    for (backend, store) in stores().await {
        let setup = Setup::new(script.clone(), vec![write_tool(), TestTool::new("tick")]);
        let runtime = setup.runtime(store, &ManualClock::at(T0), "node-a");
        let run =
            runtime.start_and_wait(StartRun::new("hello", "alice")).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(run.status(), RunStatus::WaitingForApproval, "{backend}");
        let done = runtime
            .decide_and_wait(&run, &digest(&run), DecisionSet::ApproveAll, &"bob".into())
            .await
            .unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(done.status(), RunStatus::Completed, "{backend}");
        assert_eq!(done.output(), Some("Stopping at the cap."), "{backend}");
        assert_eq!(setup.tools[0].call_count(), 1, "{backend}");
        assert_eq!(setup.tools[1].call_count(), cap as usize - 2, "{backend}: the capped turn's call does not run");

        let events = runtime.events(&run.id, 0, 1000).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        let tail: Vec<(EventKind, u32)> = events.iter().rev().take(3).rev().map(|e| (e.kind, e.round)).collect();
        assert_eq!(
            tail,
            vec![
                (EventKind::ModelRequest, cap + 1),
                (EventKind::ModelResponse, cap + 1),
                (EventKind::RunCompleted, cap + 1),
            ],
            "{backend}"
        );
        let closing = event_fields(&runtime, &run.id, &[EventKind::ModelRequest], &["tools"]).await;
        assert_eq!(closing.last(), Some(&json!(["model_request", []])), "{backend}: no tools are offered");
        let completed = event_fields(&runtime, &run.id, &[EventKind::RunCompleted], &["termination_reason"]).await;
        assert_eq!(completed, vec![json!(["run_completed", "max_iterations"])], "{backend}");
        // Every other model call is its own round, 1 to the cap.
        let rounds: Vec<u32> = events.iter().filter(|e| e.kind == EventKind::ModelRequest).map(|e| e.round).collect();
        assert_eq!(rounds, (1..=cap + 1).collect::<Vec<_>>(), "{backend}");
        assert_eq!(runtime.verify(&run.id).await.ok().and_then(|r| r.ok()), Some(done.last_seq), "{backend}");
    }
}

/// The one maintenance scheduler comes due on the runtime's clock, not on the wall clock: a deadline
/// passes, and later retention lets the run go, only as the injected clock says so.
#[tokio::test]
async fn the_maintenance_scheduler_runs_deadlines_and_retention_on_the_runtimes_clock() {
    let mut setup = Setup::new(one_write(), vec![write_tool()]);
    setup.ttl = Some(Duration::from_secs(60));
    setup.on_expiry = OnExpiry::Cancel;
    let clock = ManualClock::at(T0);
    let runtime = setup.runtime(sqlite().await, &clock, "node-a");
    let run = runtime.start_and_wait(StartRun::new("x", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    let retention =
        Retention { terminal_after: Duration::from_secs(86_400), waiting_after: Duration::from_secs(7 * 86_400) };
    let maintenance = runtime.spawn_maintenance(Schedule::server(retention));

    let mut notices = runtime.subscribe();
    clock.advance(Duration::from_secs(61));
    let expired = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match notices.recv().await {
                Ok(notice) if notice.run_id == run.id && notice.status == RunStatus::Expired => return,
                Ok(_) => continue,
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    assert!(expired.is_ok(), "the deadline was applied once the runtime's clock passed it");

    // A day and an hour later on the runtime's clock, the next hourly retention purges the expired run.
    clock.advance(Duration::from_secs(86_400 + 3_600));
    let mut gone = false;
    for _ in 0..100 {
        if matches!(runtime.get(&run.id).await, Err(ReadError::NotFound(_))) {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "retention applied on the runtime's clock");
    maintenance.stop();
}

/// A runtime of `workers` workers whose claim loop runs, as `serve` starts it.
fn pooled(setup: &Setup, store: Arc<dyn RunStore>, clock: &ManualClock, node: &str, workers: usize) -> Runtime {
    let options =
        RuntimeOptions { node_id: node.into(), lease: Duration::from_secs(30), workers, ..RuntimeOptions::default() };
    let runtime = Runtime::new(store, vec![setup.spec()], Arc::new(clock.clone()), Arc::new(UuidV7Ids), options);
    runtime.start_workers();
    runtime
}

fn slow(name: &str, gate: Gate) -> TestTool {
    TestTool::new(name).gate(gate).behaviour(tollgate_agent_testkit::Behaviour::Sleep(Duration::from_millis(150)))
}

/// A pool of one: further runs and resumes are queued, not refused or dropped, and its worker drives
/// every one of them in turn; each approved call runs once.
#[tokio::test]
async fn a_full_pool_queues_starts_and_resumes_and_drives_them_all() {
    for (backend, store) in stores().await {
        let script = json!({"turns": [
            {"tool_calls": [{"name": "list", "arguments": {}}]},
            {"tool_calls": [{"name": "write", "arguments": {"text": "{{input}}"}}]},
            {"text": "done"}
        ]});
        let setup = Setup::new(script, vec![slow("list", Gate::Allow), slow("write", Gate::Ask)]);
        let runtime = pooled(&setup, store, &ManualClock::at(T0), "node-a", 1);
        let mut ids = Vec::new();
        for n in 0..3 {
            let run =
                runtime.start(StartRun::new(&format!("run {n}"), "alice")).await.unwrap_or_else(|e| panic!("{e}"));
            let expected = if n == 0 { RunStatus::Running } else { RunStatus::Queued };
            assert_eq!(run.status(), expected, "{backend}: run {n} with one worker");
            ids.push(run.id);
        }
        assert_eq!(runtime.workers().busy, 1, "{backend}");
        let mut waiting = Vec::new();
        for id in &ids {
            let run = runtime.wait_settled(id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
            assert_eq!(run.status(), RunStatus::WaitingForApproval, "{backend}");
            waiting.push(run);
        }
        let stats = runtime.workers();
        assert_eq!((stats.size, stats.claims), (1, 2), "{backend}: the two queued runs were claimed");
        assert_eq!(stats.claim_latency_buckets.last().map(|(_, n)| *n), Some(2), "{backend}: {stats:?}");

        runtime.drain().await;
        let mut statuses = Vec::new();
        for run in &waiting {
            let decided = runtime
                .decide(&run.id, &digest(run), DecisionSet::ApproveAll, &"bob".into())
                .await
                .unwrap_or_else(|e| panic!("{backend}: {e}"));
            statuses.push(decided.status());
        }
        // One resume at most takes the free worker at once: normally the first, but the claim loop may
        // hold the worker for a look at the queue just as a decision arrives, which queues that one and
        // lets the next take the worker. Every other resume finds it busy (the approved tool sleeps for
        // 150 ms) and queues.
        let running = statuses.iter().filter(|s| **s == RunStatus::Running).count();
        assert!(running <= 1, "{backend}: {statuses:?}");
        assert!(
            statuses.iter().all(|s| matches!(s, RunStatus::Running | RunStatus::Queued)),
            "{backend}: {statuses:?}"
        );
        let resumes_queued = statuses.iter().filter(|s| **s == RunStatus::Queued).count() as u64;
        for id in &ids {
            let done = runtime.wait_settled(id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
            assert_eq!(done.status(), RunStatus::Completed, "{backend}");
            assert!(runtime.verify(id).await.is_ok_and(|r| r.is_ok()), "{backend}");
        }
        assert_eq!(setup.tools[1].call_count(), 3, "{backend}: each approved write ran once");
        assert_eq!(runtime.workers().claims, 2 + resumes_queued, "{backend}: queued starts and resumes were claimed");
        runtime.stop_taking_work();
        runtime.drain().await;
    }
}

/// A node with free workers claims as many queued runs as it has free workers in one claim (one
/// statement of the store), not one after another; the queue's oldest wait is there while runs wait
/// and gone once they are claimed.
#[tokio::test]
async fn free_workers_claim_the_queue_in_one_claim() {
    for (backend, store) in stores().await {
        let setup = Setup::new(json!({"turns": [{"text": "done"}]}), vec![]);
        let clock = ManualClock::at(T0);
        // A node that takes no work queues the runs started through it.
        let queuer = pooled(&setup, store.clone(), &clock, "node-q", 1);
        queuer.stop_taking_work();
        let mut ids = Vec::new();
        for n in 0..6 {
            let run = queuer.start(StartRun::new(&format!("run {n}"), "alice")).await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(run.status(), RunStatus::Queued, "{backend}");
            ids.push(run.id);
        }
        clock.advance(Duration::from_secs(3));
        let wait = queuer.oldest_queued_wait().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(wait, Some(Duration::from_secs(3)), "{backend}: the oldest queued run has waited 3 s");

        let logged = Arc::new(tollgate_agent_testkit::FailingStore::logging(store));
        let worker = pooled(&setup, logged.clone(), &clock, "node-w", 8);
        for id in &ids {
            let done = worker.wait_settled(id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
            assert_eq!(done.status(), RunStatus::Completed, "{backend}");
        }
        let claims: Vec<String> = logged.writes().into_iter().filter(|w| w.starts_with("claim")).collect();
        // The first look takes one worker; finding a run, the next takes every free one (at least the 7
        // the first run did not take) and claims the other five in one statement.
        assert_eq!(claims.get(..2), Some(&["claim 1".to_owned(), "claimed 1".to_owned()][..]), "{backend}: {claims:?}");
        let batch: usize = claims.get(2).and_then(|c| c.strip_prefix("claim ")?.parse().ok()).unwrap_or(0);
        assert!(batch >= 7, "{backend}: {claims:?}");
        assert_eq!(claims.get(3).map(String::as_str), Some("claimed 5"), "{backend}: {claims:?}");
        assert_eq!(worker.workers().claims, 6, "{backend}");
        assert_eq!(worker.oldest_queued_wait().await.unwrap_or_else(|e| panic!("{e}")), None, "{backend}");
        worker.stop_taking_work();
        worker.drain().await;
    }
}

/// A node that stops taking work gives the run it drives back at the next step boundary (queued, its
/// held turn and what ran kept, the lease dropped) and queues new work; another node's worker continues
/// at once, and the approved call never runs twice.
#[tokio::test]
async fn stopping_gives_runs_back_and_another_node_continues_at_once() {
    for (backend, store) in stores().await {
        let script = json!({"turns": [
            {"tool_calls": [{"name": "write", "arguments": {"text": "{{input}}"}}]},
            {"tool_calls": [{"name": "list", "arguments": {}}]},
            {"text": "done"}
        ]});
        let setup = Setup::new(script, vec![slow("list", Gate::Allow), slow("write", Gate::Ask)]);
        let clock = ManualClock::at(T0);
        let a = pooled(&setup, store.clone(), &clock, "node-a", 4);
        let run = a.start_and_wait(StartRun::new("hello", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run.status(), RunStatus::WaitingForApproval, "{backend}");
        let decided = a
            .decide(&run.id, &digest(&run), DecisionSet::ApproveAll, &"bob".into())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(decided.status(), RunStatus::Running, "{backend}: A resumes it (the write runs)");

        a.stop_taking_work();
        assert!(!a.workers().accepting, "{backend}");
        let queued = a.start(StartRun::new("later", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(queued.status(), RunStatus::Queued, "{backend}: a stopping node queues new runs");
        a.drain().await;
        let given_back = a.get(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(given_back.status(), RunStatus::Queued, "{backend}: given back after the write");
        assert!(given_back.lease().is_none() && given_back.held_turn().is_some(), "{backend}");
        assert_eq!(setup.tools[1].call_count(), 1, "{backend}: the approved write ran on A");
        assert!(event_kinds(&a, &run.id).await.contains(&EventKind::ToolFinished), "{backend}: its result is kept");

        // The clock does not move: B continues without waiting for A's lease to expire.
        let b = pooled(&setup, store, &clock, "node-b", 4);
        let done = b.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(done.status(), RunStatus::Completed, "{backend}");
        let later = b.wait_settled(&queued.id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(later.status(), RunStatus::WaitingForApproval, "{backend}: B claimed the queued start");
        assert_eq!(setup.tools[1].call_count(), 1, "{backend}: the first run's write never ran twice");
        let writes = event_fields(&b, &run.id, &[EventKind::ToolStarted], &["tool"]).await;
        assert_eq!(writes.iter().filter(|row| row[1] == "write").count(), 1, "{backend}: {writes:?}");
        assert!(b.verify(&run.id).await.is_ok_and(|r| r.is_ok()), "{backend}");
        b.drain().await;
    }
}

/// Followers poll only where the store cannot announce other processes' commits: always on SQLite
/// (another process may commit to the same file), on PostgreSQL only until its listener listens.
#[tokio::test]
async fn followers_poll_only_while_the_store_does_not_announce_other_processes_commits() {
    let second = Duration::from_secs(1);
    for (backend, store) in stores().await {
        let setup = Setup::new(one_write(), vec![write_tool()]);
        let runtime = setup.runtime(store, &ManualClock::at(T0), "node-a");
        if backend == "sqlite" {
            assert_eq!(runtime.recheck_after(second), Some(second), "{backend}");
            continue;
        }
        let started = std::time::Instant::now();
        while runtime.recheck_after(second).is_some() {
            assert!(started.elapsed() < Duration::from_secs(10), "{backend}: the listener never listened");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Listening: a run started here is still followed to the gate without any poll.
        let run = runtime.start(StartRun::new("hello", "alice")).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        let waiting = tokio::time::timeout(Duration::from_secs(10), runtime.wait_settled(&run.id))
            .await
            .unwrap_or_else(|_| panic!("{backend}: wait_settled never woke"))
            .unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(waiting.status(), RunStatus::WaitingForApproval, "{backend}");
    }
}

/// A follower reads the store only for what it knows is there: one read of events for the change that
/// wakes it — none when the store taps its commits, whose events the runtime keeps for followed runs —
/// and none of the run (the notice says where the run stands), and it ends after the terminal event
/// without another read. Started after the end, it reads the run once and ends.
#[tokio::test]
async fn a_follower_reads_one_page_per_change_and_ends_with_the_run() {
    for ((backend, inner), tapping) in stores().await.into_iter().flat_map(|s| [(s.clone(), false), (s, true)]) {
        let (store, _setup, runtime, run) = logged_waiting_run(inner, backend, tapping).await;
        // A long poll interval: on SQLite (which announces nothing) only notices wake it in this test.
        let mut follower = runtime.follow(&run.id, 0, Duration::from_secs(60));
        follower.seen(&run);
        let reads = |store: &tollgate_agent_testkit::FailingStore| (store.event_reads(), store.run_reads());
        let before = reads(&store);
        let first = follower.next().await.unwrap_or_else(|e| panic!("{backend}: {e}")).unwrap_or_default();
        assert_eq!(first.iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=run.last_seq).collect::<Vec<_>>());
        assert_eq!(reads(&store), (before.0 + 1, before.1), "{backend}: one read of events, none of the run");

        runtime
            .decide(&run.id, &digest(&run), DecisionSet::ApproveAll, &"bob".into())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let done = runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(done.status(), RunStatus::Completed, "{backend}");
        let before = reads(&store);
        // From the store, one page to the end; from what the runtime kept, one page per commit.
        let mut rest = Vec::new();
        while let Some(page) = follower.next().await.unwrap_or_else(|e| panic!("{backend}: {e}")) {
            assert!(!page.is_empty(), "{backend}: an empty page");
            rest.extend(page);
        }
        assert_eq!(
            rest.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (run.last_seq + 1..=done.last_seq).collect::<Vec<_>>(),
            "{backend}, tapping {tapping}"
        );
        assert!(rest.last().is_some_and(|e| e.kind == EventKind::RunCompleted), "{backend}: {rest:?}");
        let stored = runtime.events(&run.id, run.last_seq, 1000).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(rest, stored, "{backend}, tapping {tapping}: as stored");
        let before = (before.0 + 1, before.1); // that read
        let read = usize::from(!tapping);
        assert_eq!(reads(&store), (before.0 + read, before.1), "{backend}, tapping {tapping}: events of both changes");
        assert_eq!(follower.cursor(), done.last_seq, "{backend}");

        let before = reads(&store);
        let mut late = runtime.follow(&run.id, done.last_seq, Duration::from_secs(60));
        let end = late.next().await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert!(end.is_none(), "{backend}: {end:?}");
        assert_eq!(reads(&store), (before.0, before.1 + 1), "{backend}: one read of the run");
        let mut missing = runtime.follow(&"0198f000-0000-7000-8000-000000000000".into(), 0, Duration::from_secs(60));
        let gone = missing.next().await;
        assert!(matches!(gone, Err(ReadError::NotFound(_))), "{backend}: {gone:?}");
    }
}

/// A model that streams one delta, then waits for ever (until its call is dropped, which it records).
struct Endless {
    dropped: Arc<std::sync::atomic::AtomicBool>,
}

struct OnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl tollgate_agent_core::ModelClient for Endless {
    fn complete<'a>(
        &'a self,
        request: tollgate_agent_core::ModelRequest<'a>,
    ) -> tollgate_agent_core::BoxFuture<'a, Result<tollgate_agent_core::ModelResponse, tollgate_agent_core::ModelError>>
    {
        self.complete_streaming(request, &tollgate_agent_core::NoDeltas)
    }

    fn complete_streaming<'a>(
        &'a self,
        _request: tollgate_agent_core::ModelRequest<'a>,
        deltas: &'a dyn tollgate_agent_core::ModelDeltas,
    ) -> tollgate_agent_core::BoxFuture<'a, Result<tollgate_agent_core::ModelResponse, tollgate_agent_core::ModelError>>
    {
        let guard = OnDrop(Arc::clone(&self.dropped));
        Box::pin(async move {
            let _guard = guard;
            deltas.delta(tollgate_agent_core::ModelDelta::Text("thinking"));
            std::future::pending().await
        })
    }
}

/// The live text of a model call reaches `Runtime::deltas` (never the log); cancelling the run while
/// the call streams drops the call at once (its request aborted) and nothing after the cancel is
/// stored for it.
#[tokio::test]
async fn cancel_during_a_streamed_model_call_aborts_the_call() {
    for (backend, store) in stores().await {
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let model = Endless { dropped: Arc::clone(&dropped) };
        let agent_loop = ToolLoop::new(Arc::new(model), Arc::new(ToolRegistry::new()), LoopConfig::default());
        let spec = AgentSpec {
            name: "writer".into(),
            model: "endless".into(),
            agent_loop: Arc::new(agent_loop),
            tools: Vec::new(),
            approval_ttl: None,
            on_expiry: OnExpiry::Deny,
            forbid_self_approval: false,
            escalation: None,
        };
        let options = RuntimeOptions { node_id: "node-a".into(), ..RuntimeOptions::default() };
        let runtime =
            Runtime::new(store, vec![spec], Arc::new(tollgate_agent_core::SystemClock), Arc::new(UuidV7Ids), options);
        let mut deltas = runtime.deltas();
        let run = runtime.start(StartRun::new("think", "alice")).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        let delta = tokio::time::timeout(Duration::from_secs(10), deltas.recv())
            .await
            .unwrap_or_else(|_| panic!("{backend}: no delta within 10 s"))
            .unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(delta.run_id, run.id, "{backend}");
        assert_eq!(delta.text, tollgate_agent_runtime::LiveText::Text("thinking".into()), "{backend}");
        assert!(!dropped.load(std::sync::atomic::Ordering::SeqCst), "{backend}: the call is under way");

        runtime.cancel(&run.id, &"bob".into(), Some("too slow")).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        let cancelled_at = std::time::Instant::now();
        while !dropped.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(cancelled_at.elapsed() < Duration::from_secs(5), "{backend}: the call was not dropped");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        runtime.drain().await;
        let kinds = event_kinds(&runtime, &run.id).await;
        assert_eq!(kinds.last(), Some(&EventKind::RunCancelled), "{backend}: {kinds:?}");
        assert!(!kinds.contains(&EventKind::ModelResponse), "{backend}: {kinds:?}");
        let stored = runtime.events(&run.id, 0, 1000).await.unwrap_or_default();
        assert!(stored.iter().all(|e| !e.data.to_string().contains("thinking")), "{backend}: a delta is never stored");
        assert_eq!(runtime.get(&run.id).await.map(|r| r.status()).ok(), Some(RunStatus::Cancelled), "{backend}");
    }
}

/// A run whose segment stops every process that drives it (here: an allow-gated tool that never returns,
/// each runtime abandoned as if its process had died) is taken over `max_takeovers` times in a row, then
/// failed as `crash_loop` by the next takeover instead of being driven again; each takeover is on the log.
#[tokio::test]
async fn a_run_taken_over_again_and_again_without_a_new_step_is_failed_as_a_crash_loop() {
    for (name, store) in stores().await {
        let hang = TestTool::new("search").gate(Gate::Allow).behaviour(tollgate_agent_testkit::Behaviour::Hang);
        let script =
            json!({"turns": [{"tool_calls": [{"name": "search", "arguments": {"text": "x"}}]}, {"text": "done"}]});
        let setup = Setup::new(script, vec![hang]);
        let first = setup.runtime(store.clone(), &ManualClock::at(T0), "node-0");
        let run = first.start(StartRun::new("loop", "alice")).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut runtimes = vec![first];
        // Each later process comes after the previous one's lease (30 s) ran out.
        for n in 1..=3_i64 {
            let runtime = setup.runtime(store.clone(), &ManualClock::at(T0 + n * 120_000), &format!("node-{n}"));
            assert_eq!(runtime.sweep().await.ok(), Some(1), "{name}: takeover {n}");
            let now = runtime.get(&run.id).await.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(now.status(), RunStatus::Running, "{name}: takeover {n} drives the run again");
            runtimes.push(runtime);
        }
        let last = setup.runtime(store.clone(), &ManualClock::at(T0 + 4 * 120_000), "node-4");
        assert_eq!(last.sweep().await.ok(), Some(1));
        let failed = last.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(failed.status(), RunStatus::Failed, "{name}");
        let error = failed.error().cloned().unwrap_or_else(|| panic!("{name}: no error"));
        assert_eq!(error.kind, tollgate_agent_core::RunErrorKind::CrashLoop, "{name}");
        assert!(error.message.contains("taken over 3 times in a row"), "{name}: {}", error.message);
        let taken =
            event_fields(&last, &run.id, &[EventKind::RunTakenOver], &["owner", "previous_owner", "takeovers"]).await;
        assert_eq!(
            taken,
            vec![
                json!(["run_taken_over", "node-1", "node-0", 1]),
                json!(["run_taken_over", "node-2", "node-1", 2]),
                json!(["run_taken_over", "node-3", "node-2", 3]),
                json!(["run_taken_over", "node-4", "node-3", 4]),
            ],
            "{name}"
        );
        assert_eq!(event_kinds(&last, &run.id).await.last(), Some(&EventKind::RunFailed), "{name}");
        assert!(last.verify(&run.id).await.ok().is_some_and(|r| r.is_ok()), "{name}: the chain holds");
    }
}

/// A takeover whose segment reaches a new step starts the count again: only takeovers in a row count.
#[tokio::test]
async fn a_takeover_that_reaches_a_new_step_starts_the_count_again() {
    let store = sqlite().await;
    // Killed mid-call twice over: the call is in doubt after each takeover, which is a new step (the
    // run waits for a person again), so the run is never failed as a crash loop.
    let setup = Setup::new(one_write(), vec![write_tool().behaviour(tollgate_agent_testkit::Behaviour::Hang)]);
    let first = setup.runtime(store.clone(), &ManualClock::at(T0), "node-0");
    let run = first.start_and_wait(StartRun::new("again", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    let mut held = run;
    let mut runtimes = vec![first];
    for n in 1..=4_i64 {
        let runtime = setup.runtime(store.clone(), &ManualClock::at(T0 + n * 120_000), &format!("node-{n}"));
        runtime
            .decide(&held.id, &digest(&held), DecisionSet::ApproveAll, &"bob".into())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let later = setup.runtime(store.clone(), &ManualClock::at(T0 + n * 120_000 + 60_000), &format!("node-{n}b"));
        assert_eq!(later.sweep().await.ok(), Some(1), "takeover {n}");
        held = later.wait_settled(&held.id).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(held.status(), RunStatus::WaitingForApproval, "takeover {n}: back to waiting, in doubt");
        runtimes.push(runtime);
        runtimes.push(later);
    }
    let taken = event_fields(&runtimes[0], &held.id, &[EventKind::RunTakenOver], &["takeovers"]).await;
    assert_eq!(taken, vec![json!(["run_taken_over", 1]); 4]);
}

/// Waits until `outage` failed `n` writes (the drive is waiting it out).
async fn until_failed(outage: &tollgate_agent_testkit::Outage, n: usize) {
    for _ in 0..600 {
        if outage.failed() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the outage failed {} writes, not {n}", outage.failed());
}

/// A store that cannot take writes for a while — full, read-only, unreachable; refusing each write, or
/// making it and losing the answer — never fails a run: its drive waits the outage out and goes on, the
/// sweep of its own node does not take it over while it waits (its lease lapsed meanwhile), every
/// approved call runs once and no event is stored twice.
#[tokio::test]
async fn a_store_outage_never_fails_a_run_and_it_goes_on_once_the_store_takes_writes() {
    use tollgate_agent_core::StoreError;
    use tollgate_agent_testkit::{FailingStore, Outage};
    let outages = [
        (StoreError::DiskFull("SQLITE_FULL".into()), false),
        (StoreError::ReadOnly("SQLITE_READONLY".into()), false),
        (StoreError::Unreachable("connection reset".into()), true),
    ];
    for (backend, inner) in stores().await {
        for (error, answers_lost) in outages.clone() {
            let case = format!("{backend}, {error}, answers lost: {answers_lost}");
            let outage = Arc::new(Outage::default());
            let store: Arc<dyn RunStore> = Arc::new(FailingStore::with_outage(inner.clone(), outage.clone()));
            let setup = Setup::new(two_writes(), vec![slow("write", Gate::Ask)]);
            let clock = ManualClock::at(T0);
            let runtime = setup.runtime(store, &clock, "node-a");
            let run = runtime.start_and_wait(StartRun::new("hello", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
            let decided = runtime
                .decide(&run.id, &digest(&run), DecisionSet::ApproveAll, &"bob".into())
                .await
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(decided.status(), RunStatus::Running, "{case}");
            // The first write runs (its start went with the claim); the second's start, its result
            // and the end of the run meet the outage.
            outage.begin(error.clone(), answers_lost);
            until_failed(&outage, 3).await;
            // The store is back while the drive waits for its next attempt: a sweep of its own node then
            // finds the run's lease lapsed (no renewal got through) and must leave it to the drive.
            clock.advance(Duration::from_secs(60));
            outage.end();
            runtime.sweep().await.unwrap_or_else(|e| panic!("{case}: {e}"));
            let done = runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(done.status(), RunStatus::Completed, "{case}: {:?}", done.error());
            assert_eq!(setup.tools[0].call_count(), 2, "{case}: each approved write ran once");
            let kinds = event_kinds(&runtime, &run.id).await;
            let count = |kind: EventKind| kinds.iter().filter(|k| **k == kind).count();
            assert_eq!(
                (count(EventKind::ToolStarted), count(EventKind::ToolFinished), count(EventKind::RunCompleted)),
                (2, 2, 1),
                "{case}: {kinds:?}"
            );
            assert_eq!(count(EventKind::RunTakenOver), 0, "{case}: its own node never took it over");
            assert!(runtime.verify(&run.id).await.is_ok_and(|r| r.is_ok()), "{case}");
        }
    }
}

/// A node that stops taking work while the store still refuses gives its waiting write up without
/// failing the run: the run stays running under the lapsing lease, and once the store takes writes
/// another node takes it over and ends it, the approved call that ran kept, nothing run twice.
#[tokio::test]
async fn a_write_given_up_at_shutdown_leaves_the_run_to_its_lease_not_failed() {
    use tollgate_agent_core::StoreError;
    use tollgate_agent_testkit::{FailingStore, Outage};
    for (backend, inner) in stores().await {
        let outage = Arc::new(Outage::default());
        let store: Arc<dyn RunStore> = Arc::new(FailingStore::with_outage(inner.clone(), outage.clone()));
        let setup = Setup::new(two_writes(), vec![slow("write", Gate::Ask)]);
        let clock = ManualClock::at(T0);
        let a = setup.runtime(store, &clock, "node-a");
        let run = a.start_and_wait(StartRun::new("hello", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
        a.decide(&run.id, &digest(&run), DecisionSet::ApproveAll, &"bob".into())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        outage.begin(StoreError::DiskFull("SQLITE_FULL".into()), false);
        until_failed(&outage, 2).await;
        a.stop_taking_work();
        a.drain().await;
        outage.end();
        let left = a.get(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(left.status(), RunStatus::Running, "{backend}: not failed, left to its lease");

        clock.advance(Duration::from_secs(60));
        let b = setup.runtime(inner.clone(), &clock, "node-b");
        b.sweep().await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        let after = b.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        // The second write's start may or may not have been stored before the outage: either it never
        // started (B runs it) or it is in doubt (a person decides again). Never run twice by itself.
        let calls = setup.tools[0].call_count();
        match after.status() {
            RunStatus::Completed => assert_eq!(calls, 2, "{backend}"),
            RunStatus::WaitingForApproval => assert!(calls <= 2, "{backend}: {calls}"),
            other => panic!("{backend}: {other} {:?}", after.error()),
        }
        assert!(b.verify(&run.id).await.is_ok_and(|r| r.is_ok()), "{backend}");
        b.drain().await;
    }
}

/// The tool results a [`Listening`] model was given on its latest call.
type Heard = Arc<std::sync::Mutex<Vec<tollgate_agent_core::ToolResult>>>;

/// A scripted model that keeps the tool results of the transcript it was last given: what the model
/// was told of each call, run or not.
struct Listening {
    inner: ScriptedModel,
    heard: Heard,
}

impl Listening {
    fn hear(&self, request: &tollgate_agent_core::ModelRequest<'_>) {
        let results = request.messages.iter().filter_map(|m| match m {
            tollgate_agent_core::Message::Tool(result) => Some(result.clone()),
            _ => None,
        });
        *self.heard.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = results.collect();
    }
}

impl tollgate_agent_core::ModelClient for Listening {
    fn complete<'a>(
        &'a self,
        request: tollgate_agent_core::ModelRequest<'a>,
    ) -> tollgate_agent_core::BoxFuture<'a, Result<tollgate_agent_core::ModelResponse, tollgate_agent_core::ModelError>>
    {
        self.hear(&request);
        self.inner.complete(request)
    }

    fn complete_streaming<'a>(
        &'a self,
        request: tollgate_agent_core::ModelRequest<'a>,
        deltas: &'a dyn tollgate_agent_core::ModelDeltas,
    ) -> tollgate_agent_core::BoxFuture<'a, Result<tollgate_agent_core::ModelResponse, tollgate_agent_core::ModelError>>
    {
        self.hear(&request);
        self.inner.complete_streaming(request, deltas)
    }

    /// As a provider reached over the network says (the scripted model says nothing).
    fn server(&self) -> Option<(&str, u16)> {
        Some(("models.example.com", 8443))
    }
}

/// A grant made by `actor` through `runtime` on every call of the writer's `write` tool.
async fn grant_writes(runtime: &Runtime, actor: &str) -> tollgate_agent_core::GrantRecord {
    let new = NewGrant {
        agent: "writer".into(),
        tool: "write".into(),
        reason: Some("notes are fine".into()),
        ..NewGrant::default()
    };
    runtime.create_grant(new, &actor.into()).await.unwrap_or_else(|e| panic!("{e}")).grant
}

/// The grant that allowed call `call_id` of `run`'s held turn, as stored.
fn held_grant(run: &RunRecord, call_id: &str) -> Option<GrantId> {
    let suspension = run.held_turn()?.suspension.parse().ok()?;
    suspension.call(&call_id.into())?.grant().cloned()
}

/// Waits (bounded) until `tool` has been called.
async fn until_called(tool: &TestTool) {
    for _ in 0..600 {
        if tool.call_count() > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the tool was never called");
}

/// The child half of the granted crash test: makes a grant on `write`, starts a run whose call the grant
/// allows (no person), and hangs inside the tool until killed. Without the environment variable it does
/// nothing (it is not a test on its own).
#[tokio::test]
async fn crash_child_process_granted() {
    let Ok(db) = std::env::var(CRASH_CHILD_DB) else { return };
    let store = tollgate_agent_store::open(&format!("sqlite://{db}")).await.unwrap_or_else(|e| panic!("{e}"));
    let setup = Setup::new(one_write(), vec![write_tool().behaviour(tollgate_agent_testkit::Behaviour::Hang)]);
    let runtime = setup.runtime(store, &ManualClock::at(T0), "node-child");
    grant_writes(&runtime, "carol").await;
    runtime.start(StartRun::new("crash", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_secs(3600)).await;
}

/// A grant never runs a side effect twice: a call it allowed whose process died mid-call is in doubt
/// after the takeover (the run waits, a person decides), never run again by the grant.
#[tokio::test]
async fn a_granted_call_that_crashed_mid_run_is_in_doubt_after_the_takeover() {
    let (store, run_id) = crash_child_when("crash_child_process_granted", |e| e.kind == EventKind::ToolStarted).await;

    // Another process, after the child's lease (30 s) ran out; the grant is still in force (8 hours).
    let setup = Setup::new(one_write(), vec![write_tool()]);
    let runtime = setup.runtime(store, &ManualClock::at(T0 + 120_000), "node-parent");
    let grants = runtime.list_grants(GrantQuery { limit: 10, ..GrantQuery::default() }).await;
    let grants = grants.unwrap_or_else(|e| panic!("{e}")).grants;
    assert_eq!(grants.len(), 1, "{grants:?}");
    let grant = grants[0].id.clone();
    // The child's call passed the gate by the grant: its start names it, and no person was asked.
    assert_eq!(
        event_fields(&runtime, &run_id, &[EventKind::ToolStarted], &["call_id", "gate", "grant"]).await,
        vec![json!(["tool_started", "call_1", "ask", grant.as_str()])]
    );
    let kinds = event_kinds(&runtime, &run_id).await;
    assert!(!kinds.contains(&EventKind::ApprovalRequested), "{kinds:?}");

    assert_eq!(runtime.sweep().await.ok(), Some(1));
    let run = runtime.wait_settled(&run_id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.status(), RunStatus::WaitingForApproval, "back to waiting, not re-run by the grant");
    let view = tollgate_agent_runtime::view::run_json(&run);
    let call = &view["pending"]["calls"][0];
    assert_eq!((&call["call_id"], &call["state"]), (&json!("call_1"), &json!("in_doubt")), "{call}");
    assert_eq!((&call["in_doubt"], &call["takes_decision"]), (&json!(true), &json!(true)), "{call}");
    assert_eq!(call["grant"], Value::Null, "a call in doubt needs a person, whatever allowed it before");
    let requested = event_fields(&runtime, &run_id, &[EventKind::ApprovalRequested], &["calls"]).await;
    assert_eq!(requested.len(), 1, "{requested:?}");
    assert_eq!(requested[0][1][0]["in_doubt"], true, "{requested:?}");
    assert_eq!(setup.tools[0].call_count(), 0, "nothing runs again without a decision");
    assert_eq!(
        tool_ledger(&runtime, &run_id).await,
        vec![json!(["tool_started", "call_1"])],
        "the tool ran once so far, in the child"
    );
    assert_eq!(runtime.sweep().await.ok(), Some(0), "a sweep does not touch it again");

    runtime
        .decide(&run_id, &digest(&run), DecisionSet::ApproveAll, &"bob".into())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let done = runtime.wait_settled(&run_id).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((done.status(), done.output()), (RunStatus::Completed, Some("done")));
    assert_eq!(setup.tools[0].call_count(), 1, "run again once, on the person's approval");
    assert_eq!(
        event_fields(&runtime, &run_id, &[EventKind::ToolStarted, EventKind::ToolFinished], &["call_id", "grant"])
            .await,
        vec![
            json!(["tool_started", "call_1", grant.as_str()]),
            json!(["tool_started", "call_1", null]),
            json!(["tool_finished", "call_1", null]),
        ],
        "the second start is the person's approval, not the grant's"
    );
    // The child counted its use once its start was stored (unless it was killed in between); the
    // person's approval is not a use.
    let uses = runtime.grant(&grant).await.map(|g| g.uses).unwrap_or_else(|e| panic!("{e}"));
    assert!(uses <= 1, "{uses}");
    assert!(runtime.verify(&run_id).await.ok().is_some_and(|r| r.is_ok()));
}

/// A turn every asking call of which a grant allowed is held as the running run's turn (no approval is
/// requested) and resumed at once: the run is never stored without it while the call runs, the call's
/// start names the grant, and the grant counts the use.
#[tokio::test]
async fn a_granted_only_turn_runs_without_a_person_and_keeps_its_held_turn_while_the_call_runs() {
    for (backend, inner) in stores().await {
        let store = Arc::new(tollgate_agent_testkit::FailingStore::logging(inner.clone()));
        let setup = Setup::new(one_write(), vec![write_tool()]);
        let runtime = setup.runtime(store.clone(), &ManualClock::at(T0), "node-a");
        let grant = grant_writes(&runtime, "carol").await;
        let done =
            runtime.start_and_wait(StartRun::new("hello", "alice")).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!((done.status(), done.output()), (RunStatus::Completed, Some("done")), "{backend}");
        assert!(done.held_turn().is_none(), "{backend}: finishing clears the held turn");
        assert_eq!(setup.tools[0].calls(), vec![(CallId::from("call_1"), json!({"text": "hello"}))], "{backend}");
        // Created with its held turn (running) and the call's start in one commit before the call ran
        // (as an approved call's start rides with the claim of its resume), then the end: two commits.
        assert_eq!(store.writes(), vec!["create running", "transition complete"], "{backend}");
        assert_eq!(
            event_kinds(&runtime, &done.id).await,
            vec![
                EventKind::RunStarted,
                EventKind::ModelRequest,
                EventKind::ModelResponse,
                EventKind::ToolStarted,
                EventKind::ToolFinished,
                EventKind::ModelRequest,
                EventKind::ModelResponse,
                EventKind::RunCompleted,
            ],
            "{backend}: no approval requested, no resume by anyone"
        );
        assert_eq!(
            event_fields(&runtime, &done.id, &[EventKind::ToolStarted], &["call_id", "gate", "grant"]).await,
            vec![json!(["tool_started", "call_1", "ask", grant.id.as_str()])],
            "{backend}"
        );
        let counted = runtime.grant(&grant.id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(counted.uses, 1, "{backend}");
        assert_eq!(runtime.verify(&done.id).await.ok().and_then(|r| r.ok()), Some(done.last_seq), "{backend}");

        // While a granted call runs, the run is stored running with the turn held, the call's grant on it.
        let hanging = Setup::new(one_write(), vec![write_tool().behaviour(tollgate_agent_testkit::Behaviour::Hang)]);
        let other = hanging.runtime(inner, &ManualClock::at(T0), "node-b");
        let run = other.start(StartRun::new("hang", "alice")).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        until_called(&hanging.tools[0]).await;
        let stored = other.get(&run.id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(stored.status(), RunStatus::Running, "{backend}");
        assert_eq!(held_grant(&stored, "call_1"), Some(grant.id.clone()), "{backend}: the held turn is stored");
        assert!(stored.held_turn().is_some_and(|h| h.approvals.is_empty()), "{backend}: nobody is asked");
        assert_eq!(
            event_fields(&other, &run.id, &[EventKind::ToolStarted], &["grant"]).await,
            vec![json!(["tool_started", grant.id.as_str()])],
            "{backend}: its start was committed before it ran"
        );
        // Counted once its start was stored, before the call.
        let counted = other.grant(&grant.id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(counted.uses, 2, "{backend}");
    }
}

/// `forbid_self_approval` bars a grant on a run its own maker started: that run asks; another's passes.
#[tokio::test]
async fn forbid_self_approval_bars_a_grant_on_its_makers_own_run() {
    for (backend, store) in stores().await {
        let mut setup = Setup::new(one_write(), vec![write_tool()]);
        setup.forbid_self_approval = true;
        let runtime = setup.runtime(store, &ManualClock::at(T0), "node-a");
        let grant = grant_writes(&runtime, "alice").await;

        let own =
            runtime.start_and_wait(StartRun::new("mine", "alice")).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(own.status(), RunStatus::WaitingForApproval, "{backend}: alice's grant is barred on her own run");
        let call = &tollgate_agent_runtime::view::run_json(&own)["pending"]["calls"][0];
        assert_eq!((&call["state"], &call["grant"]), (&json!("waiting"), &Value::Null), "{backend}: {call}");
        assert_eq!(setup.tools[0].call_count(), 0, "{backend}");

        let others =
            runtime.start_and_wait(StartRun::new("yours", "bob")).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!((others.status(), others.output()), (RunStatus::Completed, Some("done")), "{backend}");
        assert_eq!(
            event_fields(&runtime, &others.id, &[EventKind::ToolStarted], &["grant"]).await,
            vec![json!(["tool_started", grant.id.as_str()])],
            "{backend}"
        );

        // Alice's run is decided by a person other than her, as before.
        let done = runtime
            .decide_and_wait(&own, &digest(&own), DecisionSet::ApproveAll, &"bob".into())
            .await
            .unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(done.status(), RunStatus::Completed, "{backend}");
        assert_eq!(
            event_fields(&runtime, &own.id, &[EventKind::ToolStarted], &["grant"]).await,
            vec![json!(["tool_started", null])],
            "{backend}"
        );
        assert_eq!(setup.tools[0].call_count(), 2, "{backend}");
        let counted = runtime.grant(&grant.id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(counted.uses, 1, "{backend}: only bob's run used it");
    }
}

/// A turn held for another call keeps its granted call waiting with it; the grant revoked before the
/// resume, that call ends as its own error result (it never runs), the rest runs and the run completes.
#[tokio::test]
async fn a_grant_revoked_between_the_hold_and_the_resume_leaves_its_call_an_error_result() {
    for (backend, store) in stores().await {
        let mut setup = Setup::new(write_then_send(), vec![write_tool(), send_tool()]);
        let heard = Heard::default();
        setup.heard = Some(Arc::clone(&heard));
        let runtime = setup.runtime(store, &ManualClock::at(T0), "node-a");
        let grant = grant_writes(&runtime, "carol").await;
        let run =
            runtime.start_and_wait(StartRun::new("x", "alice")).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(run.status(), RunStatus::WaitingForApproval, "{backend}: send asks");
        let calls = &tollgate_agent_runtime::view::run_json(&run)["pending"]["calls"];
        assert_eq!(
            (&calls[0]["state"], &calls[0]["grant"], &calls[0]["takes_decision"]),
            (&json!("allowed"), &json!(grant.id.as_str()), &json!(false)),
            "{backend}: {calls}"
        );
        assert_eq!((&calls[1]["state"], &calls[1]["takes_decision"]), (&json!("waiting"), &json!(true)), "{backend}");
        assert_eq!(setup.tools[0].call_count(), 0, "{backend}: the granted call waits with the turn");

        let revoked = runtime.revoke_grant(&grant.id, &"carol".into()).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(revoked.revoked.is_some(), "{backend}");
        let approve_send = DecisionSet::Each(vec![("call_2".into(), Decision::Approve)]);
        runtime.decide(&run.id, &digest(&run), approve_send, &"bob".into()).await.unwrap_or_else(|e| panic!("{e}"));
        let done = runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!((done.status(), done.output()), (RunStatus::Completed, Some("done")), "{backend}");
        assert_eq!(setup.tools[0].call_count(), 0, "{backend}: the revoked grant's call never ran");
        assert_eq!(setup.tools[1].call_count(), 1, "{backend}: the approved call ran once");
        assert_eq!(
            tool_ledger(&runtime, &run.id).await,
            vec![json!(["tool_started", "call_2"]), json!(["tool_finished", "call_2"])],
            "{backend}"
        );
        let told = heard.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let told: Vec<(&str, bool)> = told.iter().map(|r| (r.call_id.as_str(), r.is_error)).collect();
        assert_eq!(told, [("call_1", true), ("call_2", false)], "{backend}");
        let write_result = heard.lock().unwrap_or_else(std::sync::PoisonError::into_inner)[0].content.clone();
        let expected = format!("allowed by grant {}, which no longer allows it", grant.id);
        assert!(write_result.contains(&expected), "{backend}: {write_result}");
        let after = runtime.grant(&grant.id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(after.uses, 0, "{backend}: a call the grant did not run is not a use");
        assert!(runtime.verify(&run.id).await.is_ok_and(|r| r.is_ok()), "{backend}");
    }
}

/// `[grants] enabled = false`: a grant already in the store allows nothing, and none can be made.
#[tokio::test]
async fn with_grants_disabled_a_stored_grant_allows_nothing_and_none_is_made() {
    for (backend, store) in stores().await {
        let setup = Setup::new(one_write(), vec![write_tool()]);
        let clock = ManualClock::at(T0);
        let enabled = setup.runtime(store.clone(), &clock, "node-a");
        let grant = grant_writes(&enabled, "carol").await;
        let options = RuntimeOptions {
            node_id: "node-off".into(),
            grants: tollgate_agent_runtime::GrantSettings {
                enabled: false,
                ..tollgate_agent_runtime::GrantSettings::default()
            },
            ..RuntimeOptions::default()
        };
        let disabled = Runtime::new(store, vec![setup.spec()], Arc::new(clock.clone()), Arc::new(UuidV7Ids), options);
        assert!(!disabled.grant_settings().enabled, "{backend}");

        let run =
            disabled.start_and_wait(StartRun::new("x", "alice")).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(run.status(), RunStatus::WaitingForApproval, "{backend}: the stored grant allows nothing");
        let call = &tollgate_agent_runtime::view::run_json(&run)["pending"]["calls"][0];
        assert_eq!((&call["state"], &call["grant"]), (&json!("waiting"), &Value::Null), "{backend}: {call}");
        assert_eq!(setup.tools[0].call_count(), 0, "{backend}");
        let tools = disabled.effective_tools("writer").await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        let gates: Vec<Gate> = tools.unwrap_or_default().iter().map(|t| t.gate).collect();
        assert_eq!(gates, [Gate::Ask], "{backend}: no grant lifts a gate");

        let new = NewGrant { agent: "writer".into(), tool: "write".into(), ..NewGrant::default() };
        let refused = disabled.create_grant(new, &"carol".into()).await;
        assert!(matches!(refused, Err(GrantError::Disabled)), "{backend}: {refused:?}");
        assert!(refused.is_err_and(|e| !e.is_retryable()), "{backend}");
        let listed = disabled.list_grants(GrantQuery { limit: 10, ..GrantQuery::default() }).await;
        let listed: Vec<GrantId> = listed.unwrap_or_else(|e| panic!("{e}")).grants.into_iter().map(|g| g.id).collect();
        assert_eq!(listed, std::slice::from_ref(&grant.id), "{backend}: nothing was made");

        // The same grant allows the call on a runtime with grants on.
        let passed =
            enabled.start_and_wait(StartRun::new("y", "alice")).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(passed.status(), RunStatus::Completed, "{backend}");
        let counted = enabled.grant(&grant.id).await.unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(counted.uses, 1, "{backend}: only the run on the enabled runtime used it");
    }
}

/// Spans kept in memory, exported as each ends.
#[derive(Clone, Debug, Default)]
struct Spans(Arc<std::sync::Mutex<Vec<opentelemetry_sdk::trace::SpanData>>>);

impl opentelemetry_sdk::trace::SpanExporter for Spans {
    fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> impl std::future::Future<Output = opentelemetry_sdk::error::OTelSdkResult> + Send {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(batch);
        std::future::ready(Ok(()))
    }
}

impl Spans {
    /// Telemetry sampling `ratio` of new runs into these spans.
    fn telemetry(&self, ratio: f64) -> tollgate_agent_runtime::Telemetry {
        use opentelemetry::trace::TracerProvider as _;
        let provider =
            opentelemetry_sdk::trace::SdkTracerProvider::builder().with_simple_exporter(self.clone()).build();
        tollgate_agent_runtime::Telemetry::new(provider.tracer("test"), ratio, false)
    }

    /// The `await_approval` spans' attribute `key`, in the order they ended.
    fn waits(&self, key: &str) -> Vec<String> {
        let spans = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        spans
            .iter()
            .filter(|s| s.name.starts_with("await_approval"))
            .map(|s| {
                s.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.to_string()).unwrap_or_default()
            })
            .collect()
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }
}

/// A held turn's wait is a span ended by what ended it: the settling vote (its actor, `approved` or
/// `denied`), a deadline (`expired`, whichever `on_expiry`), a cancellation (`cancelled`) — one span per
/// turn, none for a partial vote; a run sampled out makes no span at all.
#[tokio::test]
async fn a_waits_span_says_who_or_what_ended_it() {
    let spans = Spans::default();
    for on_expiry in [OnExpiry::Deny, OnExpiry::Cancel] {
        let mut setup = Setup::new(one_write(), vec![write_tool()]);
        setup.ttl = Some(Duration::from_secs(60));
        setup.on_expiry = on_expiry;
        let clock = ManualClock::at(T0);
        let runtime = setup.traced_runtime(sqlite().await, &clock, "node-a", Some(spans.telemetry(1.0)));
        let run = runtime.start_and_wait(StartRun::new("x", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(run.trace.is_some_and(|t| t.sampled), "created with a sampled trace");
        clock.advance(Duration::from_secs(61));
        assert_eq!(runtime.sweep().await.ok(), Some(1));
        runtime.wait_settled(&run.id).await.unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(spans.waits("tollgate.approval.outcome"), ["expired", "expired"]);
    assert_eq!(spans.waits("tollgate.approval.actor"), ["system", "system"]);

    let setup = Setup::new(two_writes(), vec![write_tool()]);
    let runtime = setup.traced_runtime(sqlite().await, &ManualClock::at(T0), "node-a", Some(spans.telemetry(1.0)));
    let start =
        || async { runtime.start_and_wait(StartRun::new("x", "alice")).await.unwrap_or_else(|e| panic!("{e}")) };
    let cancelled = start().await;
    runtime.cancel(&cancelled.id, &Actor::from("carol"), Some("not today")).await.unwrap_or_else(|e| panic!("{e}"));
    let decided = start().await;
    let call = |id: &str| DecisionSet::Each(vec![(CallId::from(id), Decision::Approve)]);
    let partial = runtime.decide(&decided.id, &digest(&decided), call("call_1"), &Actor::from("bob")).await;
    partial.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(spans.waits("tollgate.approval.outcome").len(), 3, "a partial vote ends no wait");
    let deny = DecisionSet::Each(vec![(CallId::from("call_2"), Decision::Deny { reason: "no".into() })]);
    runtime
        .decide_and_wait(&decided, &digest(&decided), deny, &Actor::from("dave"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(spans.waits("tollgate.approval.outcome"), ["expired", "expired", "cancelled", "mixed"]);
    assert_eq!(spans.waits("tollgate.approval.actor")[2..], ["carol", "dave"]);
    assert_eq!(spans.waits("tollgate.approval.calls")[3], "2");

    let before = spans.len();
    let unsampled = setup.traced_runtime(sqlite().await, &ManualClock::at(T0), "node-a", Some(spans.telemetry(0.0)));
    let run = unsampled.start_and_wait(StartRun::new("x", "alice")).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(run.trace.is_some_and(|t| !t.sampled), "the decision is stored");
    let approve = DecisionSet::ApproveAll;
    unsampled
        .decide_and_wait(&run, &digest(&run), approve, &Actor::from("bob"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(spans.len(), before, "a run sampled out makes no span");
}

/// A run started inside a caller's trace joins it: its first segment's span is a child of the caller's
/// span in the caller's trace, later segments and the wait stay in that trace, and the caller's sampling
/// decision holds whatever the ratio (a caller that sampled out gets no span even at 100 %). Model calls
/// carry the server the model names.
#[tokio::test]
async fn a_run_joins_the_callers_trace_and_follows_its_decision() {
    let spans = Spans::default();
    let mut setup = Setup::new(one_write(), vec![write_tool()]);
    // A model that names its server, which model calls' spans carry (`server.address`, `server.port`).
    setup.heard = Some(Heard::default());
    let runtime = setup.traced_runtime(sqlite().await, &ManualClock::at(T0), "node-a", Some(spans.telemetry(0.0)));
    let caller = TraceContext::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        .unwrap_or_else(|e| panic!("{e}"));
    let run = runtime
        .start_and_wait(StartRun::new("x", "alice").trace_parent(caller))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let trace = run.trace.unwrap_or_else(|| panic!("a trace"));
    assert_eq!((trace.trace_id, trace.parent, trace.sampled), (caller.trace_id, Some(caller.span_id), true));
    runtime
        .decide_and_wait(&run, &digest(&run), DecisionSet::ApproveAll, &Actor::from("bob"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let recorded = spans.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let segments: Vec<_> = recorded.iter().filter(|s| s.name.starts_with("invoke_agent")).collect();
    assert_eq!(segments.len(), 2, "start and resume: {recorded:?}");
    assert!(recorded.iter().all(|s| s.span_context.trace_id().to_bytes() == caller.trace_id), "one trace");
    let root = segments.iter().find(|s| s.span_context.span_id().to_bytes() == trace.span_id);
    let root = root.unwrap_or_else(|| panic!("the root segment has the stored id"));
    assert_eq!(root.parent_span_id.to_bytes(), caller.span_id, "the root is the caller's child");
    assert!(recorded.iter().any(|s| s.name.starts_with("await_approval")), "the wait is in the trace");
    let chats: Vec<_> = recorded.iter().filter(|s| s.name.starts_with("chat")).collect();
    assert_eq!(chats.len(), 2, "a model call in each segment");
    for chat in chats {
        let attribute =
            |key: &str| chat.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.to_string());
        assert_eq!(attribute("server.address").as_deref(), Some("models.example.com"));
        assert_eq!(attribute("server.port").as_deref(), Some("8443"));
    }

    let before = spans.len();
    let runtime = setup.traced_runtime(sqlite().await, &ManualClock::at(T0), "node-a", Some(spans.telemetry(1.0)));
    let unsampled = TraceContext { sampled: false, ..caller };
    let run = runtime
        .start_and_wait(StartRun::new("x", "alice").trace_parent(unsampled))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(run.trace.is_some_and(|t| !t.sampled && t.trace_id == caller.trace_id));
    runtime
        .decide_and_wait(&run, &digest(&run), DecisionSet::ApproveAll, &Actor::from("bob"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(spans.len(), before, "the caller sampled it out");
}
