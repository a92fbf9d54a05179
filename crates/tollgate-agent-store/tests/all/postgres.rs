//! The store contract against PostgreSQL: each case in a schema of its own (dropped afterwards) on
//! the server `TOLLGATE_TEST_POSTGRES_URL` names. Without that variable the cases are skipped with a
//! note — except under CI, where they fail: CI must run them.

use crate::contract::{
    FILLED_QUEUED_AT, FILLED_RUNS, Harness, T0, a_filled_queue_is_claimed_oldest_first, id, running_run,
};
use serde_json::json;
use sqlx::{Connection, Executor, PgConnection};
use std::sync::Arc;
use std::time::Duration;
use tollgate_agent_core::store::{ChangeFeed, RunRows, RunStore, StoreError};
use tollgate_agent_core::{Approval, ApprovalId, Requirement, RunStatus};
use tollgate_agent_store::seal::SealReport;
use tollgate_agent_store::{PostgresStore, ScratchSchema, StoreOptions};

struct Postgres {
    base_url: String,
    url: String,
    schema: String,
    store: Arc<dyn RunStore>,
}

impl Harness for Postgres {
    fn store(&self) -> Arc<dyn RunStore> {
        self.store.clone()
    }

    async fn execute(&self, sql: String) -> anyhow::Result<()> {
        let mut connection = PgConnection::connect(&self.url).await?;
        connection.execute(sqlx::AssertSqlSafe(sql)).await?;
        connection.close().await?;
        Ok(())
    }

    async fn query_i64(&self, sql: String) -> anyhow::Result<i64> {
        let mut connection = PgConnection::connect(&self.url).await?;
        let n = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(&mut connection).await?;
        connection.close().await?;
        Ok(n)
    }

    async fn query_text(&self, sql: String) -> anyhow::Result<String> {
        let mut connection = PgConnection::connect(&self.url).await?;
        let text = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(&mut connection).await?;
        connection.close().await?;
        Ok(text)
    }

    async fn open_again(&self) -> Result<Arc<dyn RunStore>, StoreError> {
        Ok(Arc::new(PostgresStore::open(&self.url).await?))
    }

    async fn open_with(&self, options: StoreOptions) -> Result<Arc<dyn RunStore>, StoreError> {
        Ok(Arc::new(PostgresStore::open_with(&self.url, options).await?))
    }

    async fn file_contains(&self, _text: &str) -> anyhow::Result<Option<bool>> {
        Ok(None)
    }

    async fn seal(&self, options: StoreOptions, batch: u32) -> Result<SealReport, StoreError> {
        tollgate_agent_store::seal_unsealed(&self.url, options, batch, |_| {}).await
    }
}

fn base_url() -> anyhow::Result<Option<String>> {
    match std::env::var("TOLLGATE_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Ok(Some(url)),
        _ if std::env::var_os("CI").is_some() => anyhow::bail!(
            "TOLLGATE_TEST_POSTGRES_URL is not set: CI must run the PostgreSQL store contract \
             (e.g. postgres://postgres@127.0.0.1:5432/test)"
        ),
        _ => {
            eprintln!("note: TOLLGATE_TEST_POSTGRES_URL is not set; skipping the PostgreSQL store contract");
            Ok(None)
        }
    }
}

async fn setup() -> anyhow::Result<Option<Postgres>> {
    let Some(base_url) = base_url()? else { return Ok(None) };
    // Once per test process: schemas left by earlier runs (a test binary killed mid-case) go after a day.
    ScratchSchema::sweep_once(&base_url, "tollgate_test", Duration::from_secs(86_400)).await?;
    let scratch = ScratchSchema::create(&base_url, "tollgate_test").await?;
    let (url, schema) = (scratch.url(), scratch.name().to_owned());
    let store = Arc::new(PostgresStore::open(&url).await?);
    Ok(Some(Postgres { base_url, url, schema, store }))
}

async fn teardown(harness: &Postgres) {
    let dropped = async {
        let mut admin = PgConnection::connect(&harness.base_url).await?;
        admin.execute(sqlx::AssertSqlSafe(format!("DROP SCHEMA {} CASCADE", harness.schema))).await?;
        admin.close().await
    };
    if let Err(error) = dropped.await {
        eprintln!("cannot drop schema {}: {error}", harness.schema);
    }
}

all_contract_tests!(setup, teardown);

#[tokio::test]
async fn a_password_never_appears_in_errors() {
    // Nothing listens on port 1, so the connection fails and the error text is produced.
    let result = PostgresStore::open("postgres://tollgate:Sup3r%2FSecret@127.0.0.1:1/tollgate").await;
    let error = result.err();
    assert!(matches!(error, Some(StoreError::Unreachable(_))), "{error:?}");
    let text = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(text.starts_with("the run store cannot be reached"), "{text}");
    assert!(!text.contains("Sup3r") && !text.contains("Secret"), "{text}");
}

/// A change notification (sent by the write itself since migration 10) names the run and where it stands, never its data;
/// a lease renewal alone announces nothing.
#[tokio::test]
async fn the_change_notification_carries_no_data() -> anyhow::Result<()> {
    use sqlx::postgres::PgListener;
    use tollgate_agent_core::{EventKind, NewEvent, RunRecord};
    let Some(harness) = setup().await? else { return Ok(()) };
    let result = async {
        // Named and recorded as a node's listener: a write announces itself only while one listens.
        let store = PostgresStore::open(&harness.url).await?;
        let mut listener = PgListener::connect(&format!("{}&application_name=tollgate-listener%20probe", harness.url)).await?;
        listener.listen(tollgate_agent_store::pg_notify::CHANNEL).await?;
        sqlx::query("INSERT INTO listeners (node, pid) VALUES ('probe', pg_backend_pid())").execute(&mut listener).await?;
        let owner = "node-a";
        let lease = tollgate_agent_core::Lease { owner: owner.into(), expires_at: T0 + 30_000 };
        let run = RunRecord::new(id(1), "demo".into(), "secret input".into(), "alice".into(), T0, Some(lease));
        let started = NewEvent { at: T0, kind: EventKind::RunStarted, round: 0, data: json!({"input": "secret input"}) };
        store.create(run, vec![started]).await?;
        store.append(&id(1), owner, vec![], T0 + 40_000).await?; // a renewal alone
        let call = json!({"arguments": {"to": "secret argument"}});
        store.append(&id(1), owner, vec![NewEvent { at: T0, kind: EventKind::ToolStarted, round: 1, data: call }], T0 + 50_000).await?;
        let mut payloads = Vec::new();
        while payloads.len() < 2 {
            let notification = tokio::time::timeout(Duration::from_secs(5), listener.recv()).await??;
            let payload: serde_json::Value = serde_json::from_str(notification.payload())?;
            if payload["schema"] == harness.schema.as_str() {
                assert!(!notification.payload().contains("secret"), "{}", notification.payload());
                payloads.push(payload);
            }
        }
        let node = store.node();
        let expected = [
            json!({"schema": harness.schema, "node": node, "id": id(1), "version": 1, "status": "running", "last_seq": 1}),
            json!({"schema": harness.schema, "node": node, "id": id(1), "version": 1, "status": "running", "last_seq": 2}),
        ];
        assert_eq!(payloads, expected);
        Ok(())
    }
    .await;
    teardown(&harness).await;
    result
}

/// `changes()` announces what another store (node) commits and leaves out its own; after its listening
/// connection is killed it says `Lost`, reconnects, says `Resync`, and announces the next change.
#[tokio::test]
async fn a_store_announces_other_nodes_changes_and_recovers_a_lost_listener() -> anyhow::Result<()> {
    use futures_util::StreamExt;
    use tollgate_agent_core::{EventKind, NewEvent, StoreChange};
    let Some(harness) = setup().await? else { return Ok(()) };
    let result = async {
        let a = PostgresStore::open(&harness.url).await?;
        let b = PostgresStore::open(&harness.url).await?;
        assert!(!b.announces_changes(), "nothing is announced before the listener listens");
        let mut changes = b.changes().ok_or_else(|| anyhow::anyhow!("PostgreSQL announces changes"))?;
        let mut next = async || tokio::time::timeout(Duration::from_secs(5), changes.next()).await.ok().flatten();
        assert_eq!(next().await, Some(StoreChange::Resync), "listening");
        assert!(!b.announces_changes(), "settling: a write that looked for listeners just before may say nothing");
        b.create(running_run(1, "demo"), vec![]).await?; // b's own: left out
        a.create(running_run(2, "demo"), vec![]).await?;
        let created = StoreChange::Run { id: id(2), version: 1, status: RunStatus::Running, last_seq: 0 };
        assert_eq!(next().await, Some(created));
        assert_eq!(next().await, Some(StoreChange::Resync), "settled");
        assert!(b.announces_changes(), "once settled, every commit of another node is announced");

        let mut admin = PgConnection::connect(&harness.base_url).await?;
        let killed: Vec<bool> =
            sqlx::query_scalar("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1")
                .bind(format!("tollgate-listener {}", b.node()))
                .fetch_all(&mut admin)
                .await?;
        admin.close().await?;
        assert_eq!(killed, vec![true]);
        assert_eq!(next().await, Some(StoreChange::Lost), "the loss is said before anything else");
        assert_eq!(next().await, Some(StoreChange::Resync), "listening again");
        let event = NewEvent { at: T0, kind: EventKind::ModelRequest, round: 1, data: json!({}) };
        a.append(&id(2), "node-a", vec![event], T0 + 60_000).await?;
        let appended = StoreChange::Run { id: id(2), version: 1, status: RunStatus::Running, last_seq: 1 };
        assert_eq!(next().await, Some(appended));
        Ok(())
    }
    .await;
    teardown(&harness).await;
    result
}

/// A write announces itself while a row of another node's listener exists, without asking the server
/// whether that listener's backend lives (which cost each write more the more connections the server
/// had); a listening store sweeps the rows of listeners that are gone every `SWEEP` instead, and leaves
/// live ones, its own included.
#[tokio::test]
async fn a_listening_store_sweeps_the_rows_of_listeners_that_are_gone() -> anyhow::Result<()> {
    use futures_util::StreamExt;
    use std::time::Instant;
    use tollgate_agent_core::StoreChange;
    use tollgate_agent_store::pg_notify::SWEEP;
    let Some(harness) = setup().await? else { return Ok(()) };
    let result = async {
        let store = PostgresStore::open(&harness.url).await?;
        let mut changes = store.changes().ok_or_else(|| anyhow::anyhow!("PostgreSQL announces changes"))?;
        let first = tokio::time::timeout(Duration::from_secs(5), changes.next()).await?;
        assert_eq!(first, Some(StoreChange::Resync), "listening");
        // A live listener of another node (its backend named as listeners are), and a row whose backend
        // is no listener: what a crashed node leaves once its pid is reused.
        let mut alive =
            PgConnection::connect(&format!("{}&application_name=tollgate-listener%20alive", harness.url)).await?;
        sqlx::query("INSERT INTO listeners (node, pid) VALUES ('alive', pg_backend_pid())").execute(&mut alive).await?;
        let mut admin = PgConnection::connect(&harness.url).await?;
        sqlx::query("INSERT INTO listeners (node, pid) VALUES ('gone', pg_backend_pid())").execute(&mut admin).await?;
        let nodes = async |admin: &mut PgConnection| {
            sqlx::query_scalar::<_, String>("SELECT node FROM listeners ORDER BY node").fetch_all(admin).await
        };
        let mut expected = vec!["alive".to_owned(), store.node().to_owned()];
        expected.sort();
        let deadline = Instant::now() + SWEEP + Duration::from_secs(5);
        let mut left = nodes(&mut admin).await?;
        while left != expected {
            assert!(Instant::now() < deadline, "the rows left after a sweep: {left:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
            left = nodes(&mut admin).await?;
        }
        alive.close().await?;
        admin.close().await?;
        Ok(())
    }
    .await;
    teardown(&harness).await;
    result
}

/// Two stores (two nodes, each remembering the rows it last read or wrote) take turns writing one
/// run, so that each plans every write on a row the other has changed since: each such write must
/// notice, read the row and apply on it — versions, events and the chain as if one node did all.
/// (Appends and suspends plan on a stale running row and are stopped by their statement; a decide is
/// refused on the stale row and planned again on the row read.)
#[tokio::test]
async fn two_nodes_taking_turns_on_one_run_never_write_on_a_stale_row() -> anyhow::Result<()> {
    use tollgate_agent_core::event::verify_chain;
    use tollgate_agent_core::run::{Lease, Transition};
    use tollgate_agent_core::store::{Conflict, Guard};
    use tollgate_agent_core::suspension::{Decision, StoredSuspension, TurnDigest};
    use tollgate_agent_core::transcript::Usage;
    use tollgate_agent_core::{EventKind, HeldTurn, NewEvent, Vote};
    let Some(harness) = setup().await? else { return Ok(()) };
    let result = async {
        let a: Arc<dyn RunStore> = Arc::new(PostgresStore::open(&harness.url).await?);
        let b: Arc<dyn RunStore> = Arc::new(PostgresStore::open(&harness.url).await?);
        let nodes = [a, b];
        let owner = "node-a";
        let event = |kind, round| NewEvent { at: T0, kind, round, data: json!({"round": round}) };
        let started = event(EventKind::RunStarted, 0);
        let mut run = nodes[0].create(running_run(1, "demo"), vec![started]).await?;
        // b remembers the run as created; a's writes below make that stale.
        assert_eq!(nodes[1].get(&run.id).await?, run);
        let rounds: u32 = 12;
        let mut turn = 0usize;
        let mut next_node = || {
            turn += 1;
            &nodes[turn % 2]
        };
        for round in 1..=rounds {
            let lease_until = T0 + 60_000 + i64::from(round);
            // Three appends in a row: each node plans on the running row it wrote two writes ago.
            let mut seq = run.last_seq;
            for step in 0..3 {
                let events = vec![event(EventKind::ModelRequest, round), event(EventKind::ModelResponse, round)];
                let appended = next_node().append(&run.id, owner, events, lease_until + step).await?;
                assert_eq!(appended, seq + 2, "round {round}: append {step}");
                seq = appended;
            }
            let held = HeldTurn {
                suspension: StoredSuspension::from_stored(
                    json!({"schema_version": 1, "calls": ["call_1"]}).to_string(),
                ),
                turn_digest: TurnDigest(format!("sha256:{}", "ab".repeat(32))),
                approvals: vec![Approval::pending(
                    ApprovalId::new("ap-1"),
                    run.id.clone(),
                    "call_1",
                    Requirement::SINGLE,
                    None,
                )],
                expires_at: None,
            };
            let suspend =
                Transition::Suspend { held, iterations: round, usage: Usage { input_tokens: 10, output_tokens: 1 } };
            let waiting = next_node()
                .transition(
                    &run.id,
                    Guard::Lease(owner.into()),
                    suspend,
                    vec![event(EventKind::ApprovalRequested, round)],
                    T0 + 10,
                )
                .await?;
            assert_eq!((waiting.version, waiting.last_seq), (run.version + 1, seq + 1), "round {round}: suspend");
            let decision = Vote { decision: Decision::Approve, actor: "alice".into(), at: T0 + 20 };
            let decide = Transition::Vote {
                votes: vec![("call_1".into(), decision)],
                resume: Some(Lease { owner: owner.to_owned(), expires_at: lease_until }),
                remember: Vec::new(),
            };
            run = next_node()
                .transition(
                    &run.id,
                    Guard::Version(waiting.version),
                    decide,
                    vec![event(EventKind::Decision, round)],
                    T0 + 20,
                )
                .await?;
            assert_eq!(
                (run.version, run.last_seq),
                (waiting.version + 1, waiting.last_seq + 1),
                "round {round}: decide"
            );
        }
        assert_eq!(run.version, 1 + 2 * u64::from(rounds));
        assert_eq!(run.last_seq, 1 + 8 * u64::from(rounds));
        for node in &nodes {
            assert_eq!(node.get(&run.id).await?, run, "both nodes read the same run");
            let events = node.events(&run.id, 0, 1_000).await?;
            let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
            assert_eq!(seqs, (1..=run.last_seq).collect::<Vec<_>>(), "no event lost or doubled");
            verify_chain(&events, run.last_seq, &run.last_hash).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        }
        // A guard that is really stale still conflicts (and changes nothing), whichever node remembers what.
        let stale =
            nodes[turn % 2].transition(&run.id, Guard::Version(run.version - 1), Transition::Cancel, vec![], T0).await;
        assert!(
            matches!(&stale, Err(StoreError::Conflict { conflict: Conflict::StaleVersion { .. }, .. })),
            "{stale:?}"
        );
        assert_eq!(nodes[(turn + 1) % 2].get(&run.id).await?, run);
        Ok(())
    }
    .await;
    teardown(&harness).await;
    result
}

/// Many creates, transitions and reads of different runs at once go to PostgreSQL in groups — rows
/// written by one statement share its transaction id (`xmin`), and there are fewer of those than runs —
/// yet each gets exactly the answer it would have got alone: of two creates of one id one wins and one
/// is a duplicate; a create PostgreSQL refuses fails alone, not the group it was in; a transition
/// planned on a row another node has changed meanwhile is not written on the stale row but planned
/// again; a read of an id that does not exist is "not found" among reads that find theirs; every hash
/// chain verifies and no event is lost or doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_writes_of_many_runs_each_get_the_answer_they_would_get_alone() -> anyhow::Result<()> {
    use futures_util::future::join_all;
    use tollgate_agent_core::event::verify_chain;
    use tollgate_agent_core::run::Transition;
    use tollgate_agent_core::store::Guard;
    use tollgate_agent_core::suspension::{StoredSuspension, TurnDigest};
    use tollgate_agent_core::transcript::Usage;
    use tollgate_agent_core::{EventKind, HeldTurn, NewEvent};
    let Some(harness) = setup().await? else { return Ok(()) };
    let result = async {
        let a: Arc<dyn RunStore> = Arc::new(PostgresStore::open(&harness.url).await?);
        let b: Arc<dyn RunStore> = Arc::new(PostgresStore::open(&harness.url).await?);
        let runs: u64 = 240;
        let event = |kind, round| NewEvent { at: T0, kind, round, data: json!({"round": round}) };
        // Every fourth run is created twice at once; ten more runs have an input PostgreSQL refuses
        // (text cannot hold NUL), which fails the group they are in, and then only themselves.
        let refused = runs + 1..=runs + 10;
        let creates = (1..=runs).chain((1..=runs).step_by(4)).chain(refused.clone()).map(|n| {
            let a = Arc::clone(&a);
            let mut run = running_run(n, "demo");
            if n > runs {
                run.input = "NUL \0 here".into();
            }
            tokio::spawn(async move { (n, a.create(run, vec![event(EventKind::RunStarted, 0)]).await) })
        });
        let mut created = std::collections::BTreeMap::new();
        for joined in join_all(creates).await {
            let (n, answer) = joined?;
            match answer {
                Ok(run) => assert!(created.insert(n, run).is_none(), "run {n} created twice"),
                Err(StoreError::Duplicate(dup)) => assert_eq!(id(n), dup),
                Err(StoreError::Database(_)) if refused.contains(&n) => {}
                Err(other) => anyhow::bail!("create {n}: {other}"),
            }
        }
        assert_eq!(created.len() as u64, runs, "each run created exactly once");
        let creating_statements =
            harness.query_i64("SELECT COUNT(DISTINCT xmin::TEXT) FROM event_batches WHERE seqs[1] = 1".into()).await?;
        assert!(creating_statements < i64::try_from(runs)?, "creates went in groups: {creating_statements} statements");
        // b moves every third run's chain on: a remembers those rows as they were.
        for n in (1..=runs).step_by(3) {
            b.append(&id(n), "node-a", vec![event(EventKind::ModelRequest, 1)], T0 + 60_000).await?;
        }
        let suspends = (1..=runs).map(|n| {
            let a = Arc::clone(&a);
            tokio::spawn(async move {
                let held = HeldTurn {
                    suspension: StoredSuspension::from_stored(json!({"schema_version": 1, "calls": ["c"]}).to_string()),
                    turn_digest: TurnDigest(format!("sha256:{}", "ab".repeat(32))),
                    approvals: vec![Approval::pending(ApprovalId::new("ap-c"), id(n), "c", Requirement::SINGLE, None)],
                    expires_at: None,
                };
                let suspend = Transition::Suspend { held, iterations: 1, usage: Usage::default() };
                let events = vec![event(EventKind::ApprovalRequested, 1)];
                (n, a.transition(&id(n), Guard::Lease("node-a".into()), suspend, events, T0 + 10).await)
            })
        });
        for joined in join_all(suspends).await {
            let (n, answer) = joined?;
            let run = answer.map_err(|e| anyhow::anyhow!("suspend {n}: {e}"))?;
            let moved_by_b = u64::from((n - 1) % 3 == 0);
            assert_eq!(run.status(), RunStatus::WaitingForApproval, "run {n}");
            assert_eq!((run.version, run.last_seq), (created[&n].version + 1, 2 + moved_by_b), "run {n}");
            assert_eq!(b.get(&run.id).await?, run, "run {n} as stored");
            let events = b.events(&run.id, 0, 100).await?;
            let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
            assert_eq!(seqs, (1..=run.last_seq).collect::<Vec<_>>(), "run {n}: no event lost or doubled");
            verify_chain(&events, run.last_seq, &run.last_hash).map_err(|e| anyhow::anyhow!("run {n}: {e:?}"))?;
        }
        // Reads at once, of runs that exist and of ids that do not (the refused among them): each its
        // own answer.
        let reads = (1..=runs + 40).map(|n| {
            let a = Arc::clone(&a);
            tokio::spawn(async move { (n, a.get(&id(n)).await) })
        });
        for joined in join_all(reads).await {
            match joined? {
                (n, Ok(run)) if n <= runs => assert_eq!(b.get(&run.id).await?, run, "run {n} read alike"),
                (n, Err(StoreError::NotFound(missing))) if n > runs => assert_eq!(id(n), missing),
                (n, other) => anyhow::bail!("read {n}: {other:?}"),
            }
        }
        let suspending_statements = harness
            .query_i64(
                "SELECT COUNT(DISTINCT xmin::TEXT) FROM event_batches WHERE kinds[1] = 'approval_requested'".into(),
            )
            .await?;
        assert!(
            suspending_statements < i64::try_from(runs)?,
            "transitions went in groups: {suspending_statements} statements"
        );
        Ok(())
    }
    .await;
    teardown(&harness).await;
    result
}

/// Sweeping scratch schemas drops this prefix's schemas made longer ago than asked (by the time in
/// their names), and leaves fresh ones, other prefixes' and names of another shape alone.
#[tokio::test]
async fn a_sweep_drops_only_old_scratch_schemas_of_its_prefix() -> anyhow::Result<()> {
    let Some(base) = base_url()? else { return Ok(()) };
    let exists = |name: String| {
        let base = base.clone();
        async move {
            let mut admin = PgConnection::connect(&base).await?;
            let found: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_namespace WHERE nspname = $1")
                .bind(name)
                .fetch_optional(&mut admin)
                .await?;
            admin.close().await?;
            anyhow::Ok(found.is_some())
        }
    };
    // A prefix of this process alone, so that other tests' schemas are never in play.
    let prefix = format!("tollgate_sweep_{}", std::process::id());
    let old = format!("{prefix}_1_1000_0"); // made in 1970
    let odd = format!("{prefix}_not_a_time"); // another shape
    let other = format!("{prefix}x_1_1000_0"); // another prefix that starts alike
    let mut admin = PgConnection::connect(&base).await?;
    for name in [&old, &odd, &other] {
        admin.execute(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}"))).await?;
    }
    admin.close().await?;
    let fresh = tollgate_agent_store::ScratchSchema::create(&base, &prefix).await?;

    let dropped = tollgate_agent_store::ScratchSchema::sweep(&base, &prefix, Duration::from_secs(3600)).await?;
    assert_eq!(dropped, 1);
    assert!(!exists(old).await?, "the old schema is dropped");
    assert!(exists(fresh.name().to_owned()).await?, "a fresh one stays");
    assert!(exists(odd.clone()).await?, "a name of another shape stays");
    assert!(exists(other.clone()).await?, "another prefix's stays");
    assert!(tollgate_agent_store::ScratchSchema::sweep(&base, "Bad-Prefix", Duration::ZERO).await.is_err());

    fresh.drop_all().await?;
    let mut admin = PgConnection::connect(&base).await?;
    for name in [&odd, &other] {
        admin.execute(sqlx::AssertSqlSafe(format!("DROP SCHEMA {name}"))).await?;
    }
    admin.close().await?;
    Ok(())
}

/// Migration 9 turns a log of one row per event into batches: a store written before it reads back
/// the same events in order, their chain verifies, and the log goes on growing (reads that start inside a
/// batch or page through several see each event once).
#[tokio::test]
async fn events_stored_one_row_each_become_batches_that_read_and_grow_as_before() -> anyhow::Result<()> {
    use tollgate_agent_core::event::verify_chain;
    use tollgate_agent_core::{EventKind, NewEvent};
    let Some(harness) = setup().await? else { return Ok(()) };
    let result = async {
        let store = harness.store();
        let event = |kind, round| NewEvent { at: T0, kind, round, data: json!({"round": round}) };
        let run = store.create(running_run(1, "demo"), vec![event(EventKind::RunStarted, 0)]).await?;
        for round in 1..=3 {
            let events = vec![event(EventKind::ModelRequest, round), event(EventKind::ModelResponse, round)];
            store.append(&run.id, "node-a", events, T0 + 60_000).await?;
        }
        let before = store.events(&run.id, 0, 100).await?;
        assert_eq!(before.len(), 7);
        // The layout before migration 9: one row per event, as the view shows them.
        harness
            .execute(
                "CREATE TABLE old_events AS SELECT * FROM events; \
                 DROP VIEW events; DROP FUNCTION tollgate_events_edit(); DROP TABLE event_batches; \
                 ALTER TABLE old_events RENAME TO events; ALTER TABLE events ADD PRIMARY KEY (run_id, seq); \
                 DELETE FROM tollgate_migrations WHERE version >= 9"
                    .into(),
            )
            .await?;
        let migrated = harness.open_again().await?;
        assert_eq!(harness.query_i64("SELECT COUNT(*) FROM event_batches".into()).await?, 7, "batches of one");
        assert_eq!(migrated.events(&run.id, 0, 100).await?, before);
        let run = migrated.get(&run.id).await?;
        verify_chain(&before, run.last_seq, &run.last_hash)?;

        let events = vec![event(EventKind::ModelRequest, 4), event(EventKind::ModelResponse, 4)];
        let last = migrated.append(&run.id, "node-a", events, T0 + 60_000).await?;
        assert_eq!(last, 9);
        let all = migrated.events(&run.id, 0, 100).await?;
        assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=9).collect::<Vec<_>>());
        assert_eq!(harness.query_i64("SELECT COUNT(*) FROM event_batches".into()).await?, 8, "one more batch");
        let run = migrated.get(&run.id).await?;
        verify_chain(&all, run.last_seq, &run.last_hash)?;
        // Pages of every size, starting anywhere, inside a batch or not.
        for after in 0..9 {
            for limit in 1..=4 {
                let page = migrated.events(&run.id, after, limit).await?;
                let expected: Vec<u64> = (after + 1..=9).take(limit as usize).collect();
                assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), expected, "after {after}, limit {limit}");
            }
        }
        anyhow::Ok(())
    }
    .await;
    teardown(&harness).await;
    result
}

/// The commit log never skips a commit that becomes visible after a later one: while a transaction
/// that began first is open, a later commit is not read (the log waits at the older transaction, and
/// says so: `pending`), and once it commits both are read, the older first.
#[tokio::test]
async fn the_commit_log_waits_for_an_older_transaction_and_skips_nothing() -> anyhow::Result<()> {
    let Some(h) = setup().await? else { return Ok(()) };
    let store = h.store();
    let start = store.committed(None, 100).await?.next;
    let mut slow = PgConnection::connect(&h.url).await?;
    slow.execute("BEGIN").await?;
    slow.execute(
        "INSERT INTO event_batches (run_id, last_seq, seqs, ats, kinds, rounds, datas, hashes) VALUES \
         ('slow', 1, ARRAY[1], ARRAY['2025-11-29T10:00:00Z'], ARRAY['run_started'], ARRAY[0], ARRAY['{}'], ARRAY['h'])",
    )
    .await?;
    let run = running_run(1, "demo");
    store.create(run.clone(), vec![crate::contract::started(&run)]).await?;
    let early = store.committed(Some(&start), 100).await?;
    anyhow::ensure!(early.events.is_empty(), "read past an open older transaction: {:?}", early.events);
    anyhow::ensure!(early.pending, "a read behind an open transaction says commits may still enter the log");
    let early_again = store.committed(Some(&early.next), 100).await?;
    anyhow::ensure!(early_again.events.is_empty(), "{:?}", early_again.events);
    slow.execute("COMMIT").await?;
    slow.close().await?;
    let (events, _, _) = crate::contract::read_log(&*store, &early_again.next, 100, 2).await?;
    let runs: Vec<&str> = events.iter().map(|(run, _)| run.as_str()).collect();
    anyhow::ensure!(runs == ["slow", run.id.as_str()], "{runs:?}");
    teardown(&h).await;
    Ok(())
}

/// Fills the harness's `runs` with the 100,000 runs of [`FILLED_QUEUED_AT`], of status `status`, with
/// autovacuum off for the table so that nothing analyses it behind the test's back.
async fn fill_runs(harness: &Postgres, status: &str) -> anyhow::Result<()> {
    use tollgate_agent_core::RunRecord;
    harness.execute("ALTER TABLE runs SET (autovacuum_enabled = false)".into()).await?;
    // A template row written by the store, for the chain head of a run without events.
    let template = RunRecord::new(id(0), "demo".into(), "q".into(), "local".into(), T0, None);
    harness.store.create(template, vec![]).await?;
    harness
        .execute(format!(
            "INSERT INTO runs (id, agent, status, version, input, iterations, input_tokens, output_tokens, \
             created_by, created_at, updated_at, last_seq, last_hash) \
             SELECT '01980000-0000-7000-8000-' || lpad(to_hex(n), 12, '0'), \
             CASE WHEN n % 10 = 0 THEN 'demo' ELSE 'other' END, '{status}', 1, 'q', 0, 0, 0, 'local', \
             {T0} + n, {queued_at}, 0, (SELECT last_hash FROM runs WHERE id = '{}') \
             FROM generate_series(1, {FILLED_RUNS}) AS n",
            id(0),
            queued_at = FILLED_QUEUED_AT.replace("T0", &T0.to_string()),
        ))
        .await?;
    harness.execute(format!("DELETE FROM runs WHERE id = '{}'", id(0))).await
}

/// Asserts that `plan` (EXPLAIN's lines) reads `runs_queue` in order: no sort, no scan of the table.
fn assert_reads_the_queue_index(plan: &[String]) {
    let text = plan.join("\n");
    assert!(text.contains("Index Scan using runs_queue on runs"), "{text}");
    for other in ["Sort", "Seq Scan", "Bitmap"] {
        assert!(!text.contains(other), "{other} in the claim's plan:\n{text}");
    }
}

/// The claim's plan is the queue's index read in order on a table of 100,000 queued runs that
/// PostgreSQL has never analysed (what a burst leaves before autovacuum comes by), and the claim takes
/// the oldest queued runs of its agents, up to its limit, in one go.
#[tokio::test]
async fn the_claim_reads_the_queue_index_on_a_table_never_analysed() -> anyhow::Result<()> {
    let Some(harness) = setup().await? else { return Ok(()) };
    let result = async {
        fill_runs(&harness, "queued").await?;
        let analysed = harness
            .query_i64(
                "SELECT COUNT(*) FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname = 'runs' \
                 AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)"
                    .into(),
            )
            .await?;
        assert_eq!(analysed, 0, "the table was never analysed");
        let store = PostgresStore::open(&harness.url).await?;
        assert_reads_the_queue_index(&store.claim_plan(&["demo".to_owned()], 64).await?);
        a_filled_queue_is_claimed_oldest_first(&store).await?;
        Ok(())
    }
    .await;
    teardown(&harness).await;
    result
}

/// The same on statistics gone stale: analysed while no run was queued, then 100,000 runs queued at
/// once. PostgreSQL then believes almost no row is queued; the claim still reads the queue's index.
#[tokio::test]
async fn the_claim_reads_the_queue_index_on_stale_statistics() -> anyhow::Result<()> {
    let Some(harness) = setup().await? else { return Ok(()) };
    let result = async {
        fill_runs(&harness, "completed").await?;
        harness.execute("ANALYZE runs".into()).await?;
        harness.execute("UPDATE runs SET status = 'queued'".into()).await?;
        let store = PostgresStore::open(&harness.url).await?;
        assert_reads_the_queue_index(&store.claim_plan(&["demo".to_owned()], 64).await?);
        assert_reads_the_queue_index(&store.claim_plan(&["demo".to_owned(), "other".to_owned()], 1).await?);
        Ok(())
    }
    .await;
    teardown(&harness).await;
    result
}
