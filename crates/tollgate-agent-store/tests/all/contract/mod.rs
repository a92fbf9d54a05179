//! The store contract: what every `RunStore` backend promises, written once and run against SQLite
//! (`tests/sqlite.rs`) and PostgreSQL (`tests/postgres.rs`) through a [`Harness`].
//!
//! Each case gets a fresh, empty database from its harness (a temp file, or a schema of its own), so
//! the cases run in parallel and repeatedly.

#![allow(dead_code)]

mod grants;

pub(crate) use grants::{
    a_corrupt_grant_row_is_a_corrupt_database, a_grant_counts_its_uses, a_page_of_grants_holds_at_most_1000,
    a_vote_commits_the_grants_it_remembers, a_vote_that_fails_commits_no_grant,
    grants_are_stored_read_and_listed_newest_first, of_two_racing_votes_only_the_winners_grant_exists,
    one_of_racing_revocations_revokes, revoking_a_grant_is_a_compare_and_set,
    the_grants_for_a_run_are_those_in_force_oldest_first, the_version_of_an_agents_grants_moves_with_each_change,
};

use anyhow::{Context, ensure};
use serde_json::json;
use std::future::Future;
use std::sync::Arc;
use tollgate_agent_core::event::{ChainBreak, EventKind, NewEvent, event_hash, verify_chain, verify_chain_with};
use tollgate_agent_core::run::{
    HeldTurn, Lease, Millis, RunError, RunRecord, RunState, RunStatus, Transition, TransitionError, Vote,
};
use tollgate_agent_core::store::{
    Conflict, EVENT_PAGE, Guard, IntegrityCheck, RunQuery, RunStore, StoreError, events_after,
};
use tollgate_agent_core::suspension::{Decision, StoredSuspension, TurnDigest};
use tollgate_agent_core::tool_loop::TerminationReason;
use tollgate_agent_core::transcript::Usage;
use tollgate_agent_core::{Approval, ApprovalError, ApprovalId, Metadata, Requirement, RunId};
use tollgate_agent_store::seal::SealReport;
use tollgate_agent_store::{DataKey, DataKeys, StoreOptions};

/// A backend under test: a store on a fresh database, plus raw SQL on that same database (to tamper
/// with rows as an attacker or a disk fault would).
pub(crate) trait Harness: Send + Sync + 'static {
    /// The store.
    fn store(&self) -> Arc<dyn RunStore>;
    /// Runs one SQL statement directly on the database.
    fn execute(&self, sql: String) -> impl Future<Output = anyhow::Result<()>> + Send;
    /// Runs a query returning one integer.
    fn query_i64(&self, sql: String) -> impl Future<Output = anyhow::Result<i64>> + Send;
    /// Runs a query returning one text value.
    fn query_text(&self, sql: String) -> impl Future<Output = anyhow::Result<String>> + Send;
    /// Opens another store on the same database.
    fn open_again(&self) -> impl Future<Output = Result<Arc<dyn RunStore>, StoreError>> + Send;
    /// Opens another store on the same database with options (data keys).
    fn open_with(&self, options: StoreOptions) -> impl Future<Output = Result<Arc<dyn RunStore>, StoreError>> + Send;
    /// Whether the database's files hold `text` (after a checkpoint that empties the WAL into the
    /// file); `None` where the backend has no file to look in (PostgreSQL).
    fn file_contains(&self, text: &str) -> impl Future<Output = anyhow::Result<Option<bool>>> + Send;
    /// Runs the seal migration (`tollgate seal`) on the same database, `batch` runs per transaction.
    fn seal(&self, options: StoreOptions, batch: u32) -> impl Future<Output = Result<SealReport, StoreError>> + Send;
}

/// 2025-11-29T10:00:00Z.
pub(crate) const T0: Millis = 1_764_410_400_000;
const OWNER: &str = "node-a";

/// A UUIDv7-shaped id; `n` orders them like creation time does.
pub(crate) fn id(n: u64) -> RunId {
    RunId::from(format!("01980000-0000-7000-8000-{n:012x}"))
}

fn event(kind: EventKind, round: u32, data: serde_json::Value) -> NewEvent {
    NewEvent { at: T0, kind, round, data }
}

fn lease(owner: &str, expires_at: Millis) -> Lease {
    Lease { owner: owner.to_owned(), expires_at }
}

/// A new running run of `agent`, created at `T0 + n`.
pub(crate) fn running_run(n: u64, agent: &str) -> RunRecord {
    let at = T0 + i64::try_from(n).unwrap_or(0);
    RunRecord::new(id(n), agent.to_owned(), format!("input {n}"), "local".into(), at, Some(lease(OWNER, at + 30_000)))
}

fn held(calls: &[&str], expires_at: Option<Millis>) -> HeldTurn {
    HeldTurn {
        suspension: StoredSuspension::from_stored(json!({"schema_version": 1, "calls": calls}).to_string()),
        turn_digest: TurnDigest(format!("sha256:{}", "ab".repeat(32))),
        approvals: calls
            .iter()
            .map(|c| Approval::pending(ApprovalId::new(format!("ap-{c}")), "run", *c, Requirement::SINGLE, expires_at))
            .collect(),
        expires_at,
    }
}

fn suspend(calls: &[&str], expires_at: Option<Millis>) -> Transition {
    Transition::Suspend {
        held: held(calls, expires_at),
        iterations: 1,
        usage: Usage { input_tokens: 120, output_tokens: 30 },
    }
}

fn decide(call: &str, decision: Decision) -> Transition {
    Transition::Vote {
        votes: vec![(call.into(), Vote { decision, actor: "alice".into(), at: T0 + 5 })],
        resume: None,
        remember: Vec::new(),
    }
}

/// The agents of the nodes claiming queued runs in these cases.
fn agents() -> Vec<String> {
    vec!["demo".to_owned()]
}

fn claim(owner: &str) -> Transition {
    Transition::Claim { lease: lease(owner, T0 + 60_000) }
}

fn complete() -> Transition {
    Transition::Complete {
        output: Some("done".into()),
        reason: TerminationReason::Completed,
        iterations: 2,
        usage: Usage { input_tokens: 300, output_tokens: 40 },
    }
}

fn fail() -> Transition {
    Transition::Fail { error: RunError { kind: "model_timeout".into(), message: "the model did not answer".into() } }
}

/// Every transition, for the "nothing applies" checks.
fn all_transitions() -> Vec<Transition> {
    vec![
        claim("node-z"),
        suspend(&["call_9"], None),
        decide("call_1", Decision::Approve),
        complete(),
        fail(),
        Transition::Cancel,
        Transition::Expire,
        Transition::Release,
    ]
}

/// The `run_started` event of a new run.
pub(crate) fn started(run: &RunRecord) -> NewEvent {
    event(EventKind::RunStarted, 0, json!({"agent": run.agent, "input": run.input, "actor": "local"}))
}

async fn create_running(store: &dyn RunStore, n: u64, agent: &str) -> anyhow::Result<RunRecord> {
    let run = running_run(n, agent);
    let started = started(&run);
    Ok(store.create(run, vec![started]).await?)
}

/// A run waiting at the gate on `calls`, at version 2.
async fn create_waiting(
    store: &dyn RunStore,
    n: u64,
    calls: &[&str],
    expires_at: Option<Millis>,
) -> anyhow::Result<RunRecord> {
    let run = create_running(store, n, "demo").await?;
    let requested = event(EventKind::ApprovalRequested, 1, json!({"calls": calls}));
    Ok(store
        .transition(&run.id, Guard::Lease(OWNER.into()), suspend(calls, expires_at), vec![requested], T0 + 10)
        .await?)
}

/// Drives a run to a terminal status.
async fn create_terminal(store: &dyn RunStore, n: u64, status: RunStatus, at: Millis) -> anyhow::Result<RunRecord> {
    let run = create_running(store, n, "demo").await?;
    let lease_guard = Guard::Lease(OWNER.into());
    let done = match status {
        RunStatus::Completed => store.transition(&run.id, lease_guard, complete(), vec![], at).await?,
        RunStatus::Failed => store.transition(&run.id, lease_guard, fail(), vec![], at).await?,
        RunStatus::Cancelled => {
            store.transition(&run.id, Guard::Version(run.version), Transition::Cancel, vec![], at).await?
        }
        RunStatus::Expired => {
            let waiting = store.transition(&run.id, lease_guard, suspend(&["call_1"], Some(at)), vec![], at).await?;
            store.transition(&run.id, Guard::Version(waiting.version), Transition::Expire, vec![], at).await?
        }
        other => anyhow::bail!("{other} is not terminal"),
    };
    ensure!(done.status() == status, "expected {status}, got {}", done.status());
    Ok(done)
}

/// The conflict a result reports, if it is one.
fn conflict_of<T>(result: &Result<T, StoreError>) -> Option<&Conflict> {
    match result {
        Err(StoreError::Conflict { conflict, .. }) => Some(conflict),
        _ => None,
    }
}

fn is_refused<T: std::fmt::Debug>(result: &Result<T, StoreError>) -> bool {
    matches!(result, Err(StoreError::Transition(_)))
}

// ---------------------------------------------------------------------------------------------------
// The cases.

/// create, get, and a duplicate id.
pub(crate) async fn create_get_and_duplicate<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let created = create_running(&*store, 1, "demo").await?;
    ensure!(created.last_seq == 1, "create chains its first event");
    let read = store.get(&created.id).await?;
    ensure!(read == created, "get returns what create returned:\n{read:?}\n{created:?}");
    ensure!(read.status() == RunStatus::Running && read.version == 1);
    ensure!(read.lease() == Some(&lease(OWNER, T0 + 1 + 30_000)));

    let again = store.create(running_run(1, "other"), vec![]).await;
    ensure!(matches!(again, Err(StoreError::Duplicate(ref id)) if created.id == *id), "{again:?}");
    ensure!(store.get(&created.id).await? == created, "a duplicate create changes nothing");
    ensure!(store.events(&created.id, 0, 100).await?.len() == 1);

    let missing = store.get(&id(999)).await;
    ensure!(matches!(missing, Err(StoreError::NotFound(_))), "{missing:?}");
    // Text comes back byte for byte: quotes, backslashes, control characters, astral characters.
    let odd = "say \"hi\" \\ to\n\t✓ 😀 \u{1}\u{7f} {\"not\": json}".to_owned();
    let mut tricky = RunRecord::new(id(3), "d\"e'mo".into(), odd.clone(), "lo\\cal".into(), T0, None);
    tricky.state =
        RunState::Completed { output: Some(odd.clone()), reason: TerminationReason::Completed, finished_at: T0 };
    let tricky = store.create(tricky, vec![event(EventKind::RunStarted, 0, json!({"input": odd}))]).await?;
    ensure!(store.get(&tricky.id).await? == tricky, "odd text round-trips");
    ensure!(store.events(&tricky.id, 0, 10).await?[0].data["input"] == odd.as_str());

    let queued = RunRecord::new(id(2), "demo".into(), "q".into(), "local".into(), T0, None);
    let queued = store.create(queued, vec![]).await?;
    ensure!(queued.status() == RunStatus::Queued && queued.last_seq == 0);
    ensure!(store.get(&queued.id).await? == queued);
    ensure!(store.events(&queued.id, 0, 10).await?.is_empty(), "a run without events has an empty log");
    Ok(())
}

/// Every field of a waiting run survives storage, including decisions and the deadline.
pub(crate) async fn a_waiting_run_round_trips<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let waiting = create_waiting(&*store, 1, &["call_1", "call_2"], Some(T0 + 1_000)).await?;
    let decided = store
        .transition(
            &waiting.id,
            Guard::Version(waiting.version),
            decide("call_1", Decision::Edit { arguments: json!({"path": "b"}) }),
            vec![],
            T0 + 20,
        )
        .await?;
    let read = store.get(&waiting.id).await?;
    ensure!(read == decided, "\n{read:?}\n{decided:?}");
    let pending = read.held_turn().context("a waiting run has its held turn")?;
    ensure!(pending.decisions().len() == 1 && pending.expires_at == Some(T0 + 1_000));
    ensure!(read.usage == Usage { input_tokens: 120, output_tokens: 30 } && read.iterations == 1);
    Ok(())
}

/// A quorum call's approval is stored with its run: each vote is a compare-and-set on the run's version
/// (of two votes on the version read, one commits and the other conflicts), a refused vote (the same
/// actor twice, an edit) changes nothing, and the vote that settles the last open approval claims the
/// resume in the same transaction, keeping every vote.
pub(crate) async fn quorum_votes_are_compare_and_sets_on_the_run<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let run = create_running(&*store, 1, "demo").await?;
    let mut held = held(&["call_1", "call_2"], None);
    held.approvals[0].requirement = Requirement::new(std::num::NonZeroU32::new(2).context("two")?);
    let suspend = Transition::Suspend { held, iterations: 1, usage: Usage::default() };
    let waiting = store.transition(&run.id, Guard::Lease(OWNER.into()), suspend, vec![], T0 + 10).await?;
    let vote = |call: &str, actor: &str, decision: Decision| Transition::Vote {
        votes: vec![(call.into(), Vote { decision, actor: actor.into(), at: T0 + 20 })],
        resume: None,
        remember: Vec::new(),
    };
    let at = Guard::Version(waiting.version);
    let alice = store.transition(&run.id, at.clone(), vote("call_1", "alice", Decision::Approve), vec![], T0 + 20);
    let bob = store.transition(&run.id, at, vote("call_1", "bob", Decision::Approve), vec![], T0 + 20);
    let (alice, bob) = tokio::join!(alice, bob);
    let first = match (alice, bob) {
        (Ok(first), Err(StoreError::Conflict { .. })) | (Err(StoreError::Conflict { .. }), Ok(first)) => first,
        other => anyhow::bail!("one vote on the version read commits, the other conflicts: {other:?}"),
    };
    ensure!(first.status() == RunStatus::WaitingForApproval);
    let approval = first.held_turn().and_then(|h| h.approval(&"call_1".into())).context("approval")?;
    ensure!(approval.is_pending() && approval.approvals_given().len() == 1, "{approval:?}");
    let voter = approval.approvals_given()[0].to_owned();

    let again = store
        .transition(&run.id, Guard::Version(first.version), vote("call_1", &voter, Decision::Approve), vec![], T0 + 21)
        .await;
    ensure!(
        matches!(again, Err(StoreError::Transition(TransitionError::Approval(ApprovalError::AlreadyApproved { .. })))),
        "{again:?}"
    );
    let edit = vote("call_1", "carol", Decision::Edit { arguments: json!({}) });
    let edit = store.transition(&run.id, Guard::Version(first.version), edit, vec![], T0 + 21).await;
    ensure!(matches!(edit, Err(StoreError::Transition(TransitionError::Approval(_)))), "{edit:?}");
    ensure!(store.get(&run.id).await? == first, "a refused vote changes nothing");

    let other = if voter == "alice" { "bob" } else { "alice" };
    let both = Transition::Vote {
        votes: vec![
            ("call_1".into(), Vote { decision: Decision::Approve, actor: other.into(), at: T0 + 22 }),
            ("call_2".into(), Vote { decision: Decision::Approve, actor: other.into(), at: T0 + 22 }),
        ],
        resume: Some(lease("node-r", T0 + 90_000)),
        remember: Vec::new(),
    };
    let resumed = store.transition(&run.id, Guard::Version(first.version), both, vec![], T0 + 22).await?;
    ensure!(resumed.status() == RunStatus::Running && resumed.lease().is_some_and(|l| l.owner == "node-r"));
    let kept = resumed.held_turn().context("kept while the resume runs")?;
    ensure!(kept.complete_for_resume() && kept.approval(&"call_1".into()).is_some_and(|a| a.votes.len() == 2));
    ensure!(store.get(&run.id).await? == resumed);
    Ok(())
}

/// A run's metadata is stored with it and comes back unchanged through every transition, an append
/// and `list`; it is kept out of the events. A run without metadata (and a row from before the
/// column, NULL) reads as an empty object; a column that is not a JSON object is corrupt.
pub(crate) async fn metadata_round_trips_and_never_changes<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let metadata = Metadata::try_from(json!({
        "customer": "acme \"east\" ✓ 😀",
        "tenant": {"id": 7, "tags": ["a", null, true, 1.5]},
        "": "an empty key",
    }))?;
    let run = running_run(1, "demo").with_metadata(metadata.clone());
    let created = store.create(run, vec![event(EventKind::RunStarted, 0, json!({"input": "input 1"}))]).await?;
    ensure!(created.metadata == metadata && store.get(&created.id).await? == created, "create, then get");
    let stored = stored_text(h, "metadata", "runs", format!("id = '{}'", created.id)).await?;
    ensure!(serde_json::from_str::<Metadata>(&stored)? == metadata, "the column is the JSON object: {stored}");
    let events = store.events(&created.id, 0, 10).await?;
    ensure!(!serde_json::to_string(&events[0].data)?.contains("acme"), "metadata is not in the events");

    store.append(&created.id, OWNER, vec![event(EventKind::ModelRequest, 1, json!({}))], T0 + 5).await?;
    let walked = walk_to_done(&*store, &created).await?;
    for (step, record) in &walked {
        ensure!(record.metadata == metadata, "{step}: {:?}", record.metadata);
    }
    let done = walked[3].1.clone();
    ensure!(store.get(&created.id).await?.metadata == metadata);

    // The default query lists the first page (a default limit, not 0).
    let plain = create_running(&*store, 2, "demo").await?;
    ensure!(plain.metadata.is_empty() && store.get(&plain.id).await?.metadata.is_empty());
    let null = h.query_i64(format!("SELECT COUNT(*) FROM runs WHERE id = '{}' AND metadata IS NULL", plain.id)).await?;
    ensure!(null == 1, "no metadata is stored as NULL");
    let completed = store.list(RunQuery { status: Some(RunStatus::Completed), ..Default::default() }).await?;
    ensure!(completed.runs == vec![done.clone()], "{completed:?}");
    let all = store.list(RunQuery::default()).await?;
    ensure!(all.runs.iter().map(|r| r.metadata.len()).collect::<Vec<_>>() == vec![0, 3], "{all:?}");

    // A row written before the column existed: NULL reads as no metadata, the rest as it was.
    h.execute(format!("UPDATE runs SET metadata = NULL WHERE id = '{}'", created.id)).await?;
    let old = store.get(&created.id).await?;
    ensure!(old.metadata.is_empty() && RunRecord { metadata: metadata.clone(), ..old } == done);

    h.execute(format!("UPDATE runs SET metadata = '[1]' WHERE id = '{}'", created.id)).await?;
    let read = store.get(&created.id).await;
    ensure!(
        matches!(&read, Err(StoreError::Corrupt { id, detail }) if created.id == *id && detail.contains("metadata")),
        "{read:?}"
    );
    Ok(())
}

/// A run's trace context (docs/telemetry.md) is stored with it as a `traceparent` and comes back unchanged
/// through every transition and `list`; a run without one (and a row from before the column) has none;
/// a column that is not a `traceparent` is corrupt.
pub(crate) async fn trace_round_trips_and_never_changes<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let trace = Some(tollgate_agent_core::TraceContext::parse(traceparent)?);
    let created = store
        .create(running_run(1, "demo").with_trace(trace), vec![event(EventKind::RunStarted, 0, json!({}))])
        .await?;
    ensure!(created.trace == trace && store.get(&created.id).await? == created, "create, then get");
    ensure!(stored_text(h, "trace", "runs", format!("id = '{}'", created.id)).await? == traceparent);
    for (step, record) in &walk_to_done(&*store, &created).await? {
        ensure!(record.trace == trace, "{step}: {:?}", record.trace);
    }
    let plain = create_running(&*store, 2, "demo").await?;
    ensure!(plain.trace.is_none() && store.get(&plain.id).await?.trace.is_none());
    let listed = store.list(RunQuery::default()).await?;
    ensure!(listed.runs.iter().map(|r| r.trace).collect::<Vec<_>>() == vec![None, trace], "{listed:?}");

    // A run that joined a caller's trace keeps the caller's span as its root's parent, in its own column;
    // creates made together (grouped into one statement where the backend groups them) keep theirs.
    let caller = tollgate_agent_core::TraceContext::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")?;
    let joined: Vec<_> = (3..=10u8).map(|n| Some(tollgate_agent_core::TraceContext::joining(caller, [n; 8]))).collect();
    let creates = joined.iter().zip(3..).map(|(trace, n)| {
        store.create(running_run(n, "demo").with_trace(*trace), vec![event(EventKind::RunStarted, 0, json!({}))])
    });
    for (made, trace) in futures_util::future::try_join_all(creates).await?.iter().zip(&joined) {
        ensure!(made.trace == *trace && store.get(&made.id).await?.trace == *trace, "{made:?}");
    }
    let first_joined = id(3);
    let parent_text = stored_text(h, "trace_parent", "runs", format!("id = '{first_joined}'")).await?;
    ensure!(parent_text == "b7ad6b7169203331", "{parent_text}");
    h.execute(format!("UPDATE runs SET trace_parent = 'B7AD6B7169203331' WHERE id = '{first_joined}'")).await?;
    let read = store.get(&first_joined).await;
    ensure!(matches!(&read, Err(StoreError::Corrupt { detail, .. }) if detail.contains("trace_parent")), "{read:?}");
    h.execute(format!("UPDATE runs SET trace = NULL WHERE id = '{first_joined}'")).await?;
    let read = store.get(&first_joined).await;
    ensure!(matches!(&read, Err(StoreError::Corrupt { detail, .. }) if detail.contains("trace_parent")), "{read:?}");

    h.execute(format!("UPDATE runs SET trace = 'not a traceparent' WHERE id = '{}'", created.id)).await?;
    let read = store.get(&created.id).await;
    ensure!(
        matches!(&read, Err(StoreError::Corrupt { id, detail }) if created.id == *id && detail.contains("trace")),
        "{read:?}"
    );
    Ok(())
}

/// list: newest first, filters by status and agent, cursor pages that neither skip nor repeat.
pub(crate) async fn list_filters_and_pages<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    for n in 1..=7 {
        let agent = if n % 2 == 0 { "writer" } else { "demo" };
        create_running(&*store, n, agent).await?;
    }
    for n in 8..=10 {
        create_waiting(&*store, n, &["call_1"], None).await?;
    }
    let ids = |page: &tollgate_agent_core::RunPage| page.runs.iter().map(|r| r.id.clone()).collect::<Vec<_>>();

    let all = store.list(RunQuery { limit: 100, ..Default::default() }).await?;
    ensure!(ids(&all) == (1..=10).rev().map(id).collect::<Vec<_>>(), "newest first: {:?}", ids(&all));
    ensure!(all.next_cursor.is_none(), "no cursor when nothing remains");

    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = store.list(RunQuery { limit: 3, cursor: cursor.clone(), ..Default::default() }).await?;
        ensure!(page.runs.len() <= 3);
        seen.extend(ids(&page));
        pages += 1;
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
        ensure!(pages < 10, "pagination does not end");
    }
    ensure!(seen == ids(&all), "pages of 3 cover the list exactly once: {seen:?}");
    ensure!(pages == 4, "10 runs in pages of 3 take 4 pages, got {pages}");

    let exact = store.list(RunQuery { limit: 10, ..Default::default() }).await?;
    ensure!(exact.runs.len() == 10 && exact.next_cursor.is_none(), "exactly `limit` remaining: no next cursor");

    let waiting =
        store.list(RunQuery { status: Some(RunStatus::WaitingForApproval), limit: 50, ..Default::default() }).await?;
    ensure!(ids(&waiting) == vec![id(10), id(9), id(8)], "{:?}", ids(&waiting));
    let writers = store.list(RunQuery { agent: Some("writer".into()), limit: 50, ..Default::default() }).await?;
    ensure!(ids(&writers) == vec![id(6), id(4), id(2)], "{:?}", ids(&writers));
    // One agent's runs of several statuses, paged: newest first across the statuses.
    let mut demo = Vec::new();
    let mut cursor = None;
    for _ in 0..5 {
        let page = store.list(RunQuery { agent: Some("demo".into()), limit: 2, cursor, ..Default::default() }).await?;
        demo.push(ids(&page));
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    let expected: Vec<Vec<RunId>> = [vec![10, 9], vec![8, 7], vec![5, 3], vec![1]]
        .into_iter()
        .map(|page| page.into_iter().map(id).collect())
        .collect();
    ensure!(demo == expected, "demo's runs in pages of 2: {demo:?}");
    let both = store
        .list(RunQuery { agent: Some("demo".into()), status: Some(RunStatus::Running), limit: 2, ..Default::default() })
        .await?;
    ensure!(ids(&both) == vec![id(7), id(5)], "{:?}", ids(&both));
    let rest = store
        .list(RunQuery {
            agent: Some("demo".into()),
            status: Some(RunStatus::Running),
            limit: 2,
            cursor: both.next_cursor.clone(),
        })
        .await?;
    ensure!(ids(&rest) == vec![id(3), id(1)] && rest.next_cursor.is_none(), "{:?}", ids(&rest));
    let none = store.list(RunQuery { status: Some(RunStatus::Expired), limit: 50, ..Default::default() }).await?;
    ensure!(none.runs.is_empty() && none.next_cursor.is_none());
    Ok(())
}

/// resolve_prefix: unique, ambiguous (with the count), missing.
pub(crate) async fn resolve_prefix_finds_one_run<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    for n in [0x10, 0x11, 0x12, 0x20] {
        create_running(&*store, n, "demo").await?;
    }
    ensure!(store.resolve_prefix(&id(0x20)).await? == id(0x20), "a whole id resolves to itself");
    ensure!(store.resolve_prefix("01980000-0000-7000-8000-00000000002").await? == id(0x20));
    let several = store.resolve_prefix("01980000-0000-7000-8000-00000000001").await;
    let prefix = "01980000-0000-7000-8000-00000000001";
    match several {
        Err(StoreError::Conflict { conflict, .. }) => {
            ensure!(
                conflict == Conflict::AmbiguousPrefix { prefix: prefix.into(), matches: 3, more: false },
                "an ambiguous prefix counts its matches: {conflict:?}"
            );
            ensure!(conflict.to_string() == format!("the prefix `{prefix}` matches 3 runs; give more characters"));
        }
        other => anyhow::bail!("an ambiguous prefix must conflict: {other:?}"),
    }
    let missing = store.resolve_prefix("ffff").await;
    ensure!(matches!(missing, Err(StoreError::NotFound(_))), "{missing:?}");
    let wildcard = store.resolve_prefix("01980000-0000-7000-8000-%").await;
    ensure!(matches!(wildcard, Err(StoreError::NotFound(_))), "a prefix is not a pattern: {wildcard:?}");
    Ok(())
}

/// The whole approval cycle: running → waiting → decided → running → completed, with versions,
/// leases, and one event log.
pub(crate) async fn legal_transitions_walk_the_cycle<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let run = create_running(&*store, 1, "demo").await?;
    let waiting = create_waiting_from(&*store, &run).await?;
    ensure!(waiting.status() == RunStatus::WaitingForApproval && waiting.version == 2 && waiting.lease().is_none());

    let decision = event(EventKind::Decision, 1, json!({"call_id": "call_1", "action": "approve", "actor": "alice"}));
    let decided = store
        .transition(&run.id, Guard::Version(2), decide("call_1", Decision::Approve), vec![decision], T0 + 20)
        .await?;
    ensure!(decided.status() == RunStatus::Queued && decided.version == 3, "the last decision queues the run");
    ensure!(decided.held_turn().is_some() && decided.lease().is_none(), "queued with its held turn, unleased");

    let resumed = event(EventKind::RunResumed, 1, json!({"actor": "alice"}));
    let claimed = store.transition(&run.id, Guard::Version(3), claim("node-b"), vec![resumed], T0 + 30).await?;
    ensure!(claimed.status() == RunStatus::Running && claimed.lease() == Some(&lease("node-b", T0 + 60_000)));
    ensure!(claimed.held_turn().is_some(), "a resuming run keeps its held turn until it moves on");

    let finished = event(EventKind::RunCompleted, 2, json!({"output": "done", "termination_reason": "completed"}));
    let done = store.transition(&run.id, Guard::Lease("node-b".into()), complete(), vec![finished], T0 + 40).await?;
    ensure!(done.status() == RunStatus::Completed && done.version == 5);
    ensure!(done.finished_at() == Some(T0 + 40) && done.held_turn().is_none() && done.lease().is_none());
    ensure!(done.output() == Some("done") && done.termination_reason() == Some(TerminationReason::Completed));
    ensure!(store.get(&run.id).await? == done);

    let events = store.events(&run.id, 0, 100).await?;
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    ensure!(
        kinds
            == vec![
                EventKind::RunStarted,
                EventKind::ApprovalRequested,
                EventKind::Decision,
                EventKind::RunResumed,
                EventKind::RunCompleted
            ],
        "{kinds:?}"
    );
    ensure!(done.last_seq == 5);
    verify_chain(&events, done.last_seq, &done.last_hash)?;

    // Queued → running by claim; cancel from waiting; expire from waiting; fail from running.
    let queued =
        store.create(RunRecord::new(id(2), "demo".into(), "q".into(), "local".into(), T0, None), vec![]).await?;
    let started = store.transition(&queued.id, Guard::Version(1), claim(OWNER), vec![], T0 + 1).await?;
    ensure!(started.status() == RunStatus::Running);
    let failed = store.transition(&queued.id, Guard::Lease(OWNER.into()), fail(), vec![], T0 + 2).await?;
    ensure!(failed.status() == RunStatus::Failed && failed.error().is_some());
    let waiting = create_waiting(&*store, 3, &["call_1"], None).await?;
    let cancelled =
        store.transition(&waiting.id, Guard::Version(waiting.version), Transition::Cancel, vec![], T0 + 3).await?;
    ensure!(cancelled.status() == RunStatus::Cancelled && cancelled.held_turn().is_none());
    let waiting = create_waiting(&*store, 4, &["call_1"], Some(T0)).await?;
    let expired =
        store.transition(&waiting.id, Guard::Version(waiting.version), Transition::Expire, vec![], T0 + 4).await?;
    ensure!(expired.status() == RunStatus::Expired && expired.termination_reason() == Some(TerminationReason::Expired));
    // Running → running: another node takes over a run (its lease having expired).
    let running = create_running(&*store, 5, "demo").await?;
    let taken = store.transition(&running.id, Guard::Version(1), claim("node-c"), vec![], T0 + 50_000).await?;
    ensure!(taken.lease().map(|l| l.owner.as_str()) == Some("node-c"));
    Ok(())
}

/// Takes the running `run` through its life — held (`waiting`), approved (`decided`), claimed by
/// `node-b` (`resumed`), completed (`done`) — and answers each record with its step's name.
async fn walk_to_done(store: &dyn RunStore, run: &RunRecord) -> anyhow::Result<[(&'static str, RunRecord); 4]> {
    let waiting = create_waiting_from(store, run).await?;
    let decided = store
        .transition(&run.id, Guard::Version(waiting.version), decide("call_1", Decision::Approve), vec![], T0 + 20)
        .await?;
    let resumed = store.transition(&run.id, Guard::Version(decided.version), claim("node-b"), vec![], T0 + 30).await?;
    let done = store.transition(&run.id, Guard::Lease("node-b".into()), complete(), vec![], T0 + 40).await?;
    Ok([("waiting", waiting), ("decided", decided), ("resumed", resumed), ("done", done)])
}

async fn create_waiting_from(store: &dyn RunStore, run: &RunRecord) -> anyhow::Result<RunRecord> {
    let requested = event(EventKind::ApprovalRequested, 1, json!({"calls": ["call_1"]}));
    Ok(store
        .transition(&run.id, Guard::Lease(OWNER.into()), suspend(&["call_1"], None), vec![requested], T0 + 10)
        .await?)
}

/// Transitions that do not apply are refused and change nothing — above all, a terminal run never
/// changes again.
pub(crate) async fn illegal_transitions_change_nothing<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let mut n = 0;
    for status in [RunStatus::Completed, RunStatus::Failed, RunStatus::Cancelled, RunStatus::Expired] {
        n += 1;
        let done = create_terminal(&*store, n, status, T0 + 100).await?;
        for transition in all_transitions() {
            let name = transition.name();
            let result = store
                .transition(
                    &done.id,
                    Guard::Version(done.version),
                    transition,
                    vec![event(EventKind::RunResumed, 9, json!({}))],
                    T0 + 200,
                )
                .await;
            ensure!(is_refused(&result), "{name} on a {status} run must be refused: {result:?}");
        }
        let appended = store.append(&done.id, OWNER, vec![event(EventKind::ToolStarted, 9, json!({}))], T0 + 300).await;
        ensure!(
            conflict_of(&appended) == Some(&Conflict::NotRunning { status }),
            "append to a {status} run: {appended:?}"
        );
        ensure!(store.get(&done.id).await? == done, "a {status} run never changes");
        ensure!(store.events(&done.id, 0, 100).await?.len() as u64 == done.last_seq, "no event reaches a {status} run");
    }

    // suspend only from running.
    let waiting = create_waiting(&*store, 10, &["call_1"], None).await?;
    let again =
        store.transition(&waiting.id, Guard::Version(waiting.version), suspend(&["call_2"], None), vec![], T0).await;
    ensure!(is_refused(&again), "suspend from waiting: {again:?}");
    // claim from waiting only when every required call is decided.
    let waiting = create_waiting(&*store, 11, &["call_1", "call_2"], None).await?;
    let early = store.transition(&waiting.id, Guard::Version(waiting.version), claim(OWNER), vec![], T0).await;
    ensure!(is_refused(&early), "claim before any decision: {early:?}");
    let half = store
        .transition(&waiting.id, Guard::Version(waiting.version), decide("call_1", Decision::Approve), vec![], T0)
        .await?;
    let still_early = store.transition(&waiting.id, Guard::Version(half.version), claim(OWNER), vec![], T0).await;
    ensure!(is_refused(&still_early), "claim with one of two decisions: {still_early:?}");
    // deciding the same call twice is refused, and the first decision stands.
    let twice = store
        .transition(
            &waiting.id,
            Guard::Version(half.version),
            decide("call_1", Decision::Deny { reason: "no".into() }),
            vec![],
            T0,
        )
        .await;
    ensure!(is_refused(&twice), "a second decision for call_1: {twice:?}");
    ensure!(store.get(&waiting.id).await? == half, "a refused decision changes nothing");
    let full = store
        .transition(
            &waiting.id,
            Guard::Version(half.version),
            decide("call_2", Decision::Respond { result: "42".into() }),
            vec![],
            T0,
        )
        .await?;
    let claimed = store.transition(&waiting.id, Guard::Version(full.version), claim(OWNER), vec![], T0).await?;
    ensure!(claimed.status() == RunStatus::Running);
    // complete and expire do not apply to a waiting run; decide does not apply to a running one.
    let waiting = create_waiting(&*store, 12, &["call_1"], None).await?;
    let completed = store.transition(&waiting.id, Guard::Version(waiting.version), complete(), vec![], T0).await;
    ensure!(is_refused(&completed), "complete from waiting: {completed:?}");
    let running = create_running(&*store, 13, "demo").await?;
    let decided =
        store.transition(&running.id, Guard::Version(1), decide("call_1", Decision::Approve), vec![], T0).await;
    ensure!(is_refused(&decided), "decide on a running run: {decided:?}");
    let expired = store.transition(&running.id, Guard::Version(1), Transition::Expire, vec![], T0).await;
    ensure!(is_refused(&expired), "expire a running run: {expired:?}");
    ensure!(store.get(&running.id).await?.version == 1);

    let missing = store.transition(&id(999), Guard::Version(1), Transition::Cancel, vec![], T0).await;
    ensure!(matches!(missing, Err(StoreError::NotFound(_))), "{missing:?}");
    Ok(())
}

/// From every status, every transition: the store answers exactly what the pure
/// `RunRecord::apply` says — the same new record, or the same refusal, and then nothing changed.
pub(crate) async fn every_transition_from_every_status_matches_apply<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let mut n = 0;
    let statuses = ["queued", "running", "waiting", "waiting_decided", "completed", "failed", "cancelled", "expired"];
    let transitions = || {
        let mut all = all_transitions();
        all.push(Transition::Vote {
            votes: vec![("call_1".into(), Vote { decision: Decision::Approve, actor: "alice".into(), at: T0 + 5 })],
            resume: Some(lease("node-r", T0 + 90_000)),
            remember: Vec::new(),
        });
        all
    };
    let mut applied = 0;
    for status in statuses {
        for transition in transitions() {
            n += 1;
            let run = match status {
                "queued" => {
                    store
                        .create(RunRecord::new(id(n), "demo".into(), "q".into(), "local".into(), T0, None), vec![])
                        .await?
                }
                "running" => create_running(&*store, n, "demo").await?,
                "waiting" => create_waiting(&*store, n, &["call_1"], None).await?,
                "waiting_decided" => {
                    let waiting = create_waiting(&*store, n, &["call_1"], None).await?;
                    store
                        .transition(
                            &waiting.id,
                            Guard::Version(waiting.version),
                            decide("call_1", Decision::Approve),
                            vec![],
                            T0 + 6,
                        )
                        .await?
                }
                "completed" => create_terminal(&*store, n, RunStatus::Completed, T0 + 7).await?,
                "failed" => create_terminal(&*store, n, RunStatus::Failed, T0 + 7).await?,
                "cancelled" => create_terminal(&*store, n, RunStatus::Cancelled, T0 + 7).await?,
                _ => create_terminal(&*store, n, RunStatus::Expired, T0 + 7).await?,
            };
            let name = transition.name();
            let expected = run.apply(&transition, T0 + 100);
            let got = store.transition(&run.id, Guard::Version(run.version), transition, vec![], T0 + 100).await;
            match (expected, got) {
                (Ok(expected), Ok(got)) => {
                    ensure!(got == expected, "{name} from {status}:\n{got:?}\n{expected:?}");
                    ensure!(store.get(&run.id).await? == expected, "{name} from {status} is stored");
                    applied += 1;
                }
                (Err(expected), Err(StoreError::Transition(got))) => {
                    ensure!(got == expected, "{name} from {status}: {got} vs {expected}");
                    ensure!(store.get(&run.id).await? == run, "a refused {name} from {status} changes nothing");
                }
                // A takeover of a lease that is still valid lost a race: the store says conflict.
                (
                    Err(expected @ TransitionError::LeaseHeld { .. }),
                    Err(StoreError::Conflict { conflict: conflict @ Conflict::LeaseHeld { .. }, .. }),
                ) => {
                    let Conflict::LeaseHeld { owner, expires_at } = &conflict else { unreachable!() };
                    ensure!(
                        expected == TransitionError::LeaseHeld { owner: owner.clone(), expires_at: *expires_at },
                        "{name} from {status}: {conflict:?} vs {expected:?}"
                    );
                    ensure!(conflict.to_string() == expected.to_string(), "the same words as apply's refusal");
                    ensure!(store.get(&run.id).await? == run, "a refused {name} from {status} changes nothing");
                }
                (expected, got) => anyhow::bail!("{name} from {status}: apply says {expected:?}, the store {got:?}"),
            }
        }
    }
    ensure!(applied >= 12, "the table exercises the legal transitions too ({applied})");
    Ok(())
}

/// A stale version is a conflict, and the run is left as the winner wrote it.
pub(crate) async fn version_guard_conflicts<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let waiting = create_waiting(&*store, 1, &["call_1", "call_2"], None).await?;
    let v = waiting.version;
    let first =
        store.transition(&waiting.id, Guard::Version(v), decide("call_1", Decision::Approve), vec![], T0).await?;
    for stale in [v, v - 1, v + 5] {
        let result = store
            .transition(
                &waiting.id,
                Guard::Version(stale),
                decide("call_2", Decision::Approve),
                vec![event(EventKind::Decision, 1, json!({}))],
                T0,
            )
            .await;
        ensure!(
            conflict_of(&result) == Some(&Conflict::StaleVersion { expected: stale, found: first.version }),
            "version {stale} against {}: {result:?}",
            first.version
        );
    }
    ensure!(store.get(&waiting.id).await? == first);
    ensure!(store.events(&waiting.id, 0, 100).await?.len() as u64 == first.last_seq);
    Ok(())
}

/// The lease guard: only the owner of a running run transitions or appends; append renews the lease
/// without a version bump.
pub(crate) async fn lease_guard_and_append<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let run = create_running(&*store, 1, "demo").await?;
    let wrong_owner = store.transition(&run.id, Guard::Lease("intruder".into()), complete(), vec![], T0).await;
    let lost = Conflict::LeaseLost { holder: Some(OWNER.into()) };
    ensure!(conflict_of(&wrong_owner) == Some(&lost), "{wrong_owner:?}");
    let wrong_append =
        store.append(&run.id, "intruder", vec![event(EventKind::ModelRequest, 1, json!({}))], T0 + 99_000).await;
    ensure!(conflict_of(&wrong_append) == Some(&lost), "{wrong_append:?}");

    let seq = store
        .append(
            &run.id,
            OWNER,
            vec![
                event(EventKind::ModelRequest, 1, json!({"messages": 2})),
                event(EventKind::ModelResponse, 1, json!({"text": "hi"})),
            ],
            T0 + 90_000,
        )
        .await?;
    ensure!(seq == 3, "append returns the last seq: {seq}");
    let renewed = store.append(&run.id, OWNER, vec![], T0 + 120_000).await?;
    ensure!(renewed == 3, "renewing alone appends nothing");
    let read = store.get(&run.id).await?;
    ensure!(read.version == run.version, "append does not bump the version");
    ensure!(read.last_seq == 3 && read.lease() == Some(&lease(OWNER, T0 + 120_000)), "{read:?}");
    verify_chain(&store.events(&run.id, 0, 100).await?, read.last_seq, &read.last_hash)?;

    let waiting = create_waiting_from(&*store, &read).await?;
    let not_running = store.transition(&run.id, Guard::Lease(OWNER.into()), complete(), vec![], T0).await;
    let waits = Conflict::NotRunning { status: RunStatus::WaitingForApproval };
    ensure!(conflict_of(&not_running) == Some(&waits), "a waiting run holds no lease: {not_running:?}");
    let append_waiting = store.append(&run.id, OWNER, vec![], T0).await;
    ensure!(conflict_of(&append_waiting) == Some(&waits), "{append_waiting:?}");
    ensure!(store.get(&run.id).await? == waiting);
    let missing = store.append(&id(999), OWNER, vec![], T0).await;
    ensure!(matches!(missing, Err(StoreError::NotFound(_))), "{missing:?}");
    Ok(())
}

/// Events are numbered from 1 without gaps across create, transitions and appends; `after` and
/// `limit` page through them; the chain verifies.
pub(crate) async fn events_are_numbered_and_chained<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let run = create_running(&*store, 1, "demo").await?;
    store
        .append(
            &run.id,
            OWNER,
            vec![event(EventKind::ModelRequest, 1, json!({"messages": 2, "tools": ["fs_write"]}))],
            T0 + 60_000,
        )
        .await?;
    let data =
        json!({"text": "héllo ✓", "n": 1.5, "big": 12345678901234567_u64, "z": null, "a": [true, {"y": 1, "x": 2}]});
    store.append(&run.id, OWNER, vec![event(EventKind::ModelResponse, 1, data.clone())], T0 + 60_000).await?;
    let waiting = create_waiting_from(&*store, &store.get(&run.id).await?).await?;
    let decided = store
        .transition(
            &run.id,
            Guard::Version(waiting.version),
            decide("call_1", Decision::Approve),
            vec![
                event(EventKind::Decision, 1, json!({"call_id": "call_1"})),
                event(EventKind::RunResumed, 1, json!({"actor": "alice"})),
            ],
            T0 + 70,
        )
        .await?;

    let events = store.events(&run.id, 0, 1000).await?;
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    ensure!(seqs == (1..=6).collect::<Vec<_>>(), "{seqs:?}");
    ensure!(decided.last_seq == 6 && events[5].hash == decided.last_hash);
    ensure!(events[2].data == data, "event data round-trips: {}", events[2].data);
    ensure!(events.iter().all(|e| e.at == "2025-11-29T10:00:00.000Z"), "`at` is stored as hashed");
    verify_chain(&events, decided.last_seq, &decided.last_hash)?;

    let tail = store.events(&run.id, 4, 1000).await?;
    ensure!(tail.iter().map(|e| e.seq).collect::<Vec<_>>() == vec![5, 6]);
    let window = store.events(&run.id, 1, 2).await?;
    ensure!(window.iter().map(|e| e.seq).collect::<Vec<_>>() == vec![2, 3]);
    ensure!(store.events(&run.id, 6, 10).await?.is_empty());
    let missing = store.events(&id(999), 0, 10).await;
    ensure!(matches!(missing, Err(StoreError::NotFound(_))), "{missing:?}");
    Ok(())
}

/// `events_after` reads a log longer than a page whole, and from any seq on, across page boundaries.
pub(crate) async fn events_after_reads_every_page<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let run = create_running(&*store, 1, "demo").await?;
    let page = u64::from(EVENT_PAGE);
    // Two full pages and a bit: the event of `create` plus 2 * page + 10 appended.
    for chunk in 0..5 {
        let size = if chunk < 4 { page / 2 } else { 10 };
        let events = (0..size).map(|i| event(EventKind::ModelRequest, 1, json!({"i": i}))).collect();
        store.append(&run.id, OWNER, events, T0 + 60_000).await?;
    }
    let read = store.get(&run.id).await?;
    ensure!(read.last_seq == 2 * page + 11, "{}", read.last_seq);
    let all = events_after(&*store, &run.id, 0).await?;
    ensure!(all.iter().map(|e| e.seq).eq(1..=read.last_seq), "every event once, in order");
    verify_chain(&all, read.last_seq, &read.last_hash)?;
    let from_a_boundary = events_after(&*store, &run.id, page).await?;
    ensure!(from_a_boundary.iter().map(|e| e.seq).eq(page + 1..=read.last_seq));
    ensure!(events_after(&*store, &run.id, read.last_seq).await?.is_empty(), "nothing after the last");
    let exactly_two_pages = events_after(&*store, &run.id, 11).await?;
    ensure!(exactly_two_pages.len() as u64 == 2 * page, "a last full page ends with an empty one");
    let missing = events_after(&*store, &id(999), 0).await;
    ensure!(matches!(missing, Err(StoreError::NotFound(_))), "{missing:?}");
    Ok(())
}

/// An event edited directly in the database is caught by `verify_chain`, at its seq.
pub(crate) async fn an_edited_event_breaks_the_chain<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let waiting = create_waiting(&*store, 1, &["call_1"], None).await?;
    store
        .transition(
            &waiting.id,
            Guard::Version(waiting.version),
            decide("call_1", Decision::Approve),
            vec![event(EventKind::Decision, 1, json!({"call_id": "call_1", "action": "approve"}))],
            T0,
        )
        .await?;
    let run = store.get(&waiting.id).await?;
    verify_chain(&store.events(&run.id, 0, 100).await?, run.last_seq, &run.last_hash)?;

    h.execute(format!(
        "UPDATE events SET data = '{{\"call_id\":\"call_1\",\"action\":\"deny\"}}' WHERE run_id = '{}' AND seq = 3",
        run.id
    ))
    .await?;
    let tampered = store.events(&run.id, 0, 100).await?;
    ensure!(tampered[2].data["action"] == "deny", "the edit is visible");
    let verdict = verify_chain(&tampered, run.last_seq, &run.last_hash);
    ensure!(verdict == Err(ChainBreak::Mismatch { seq: 3 }), "{verdict:?}");

    h.execute(format!("DELETE FROM events WHERE run_id = '{}' AND seq = 2", run.id)).await?;
    let removed = verify_chain(&store.events(&run.id, 0, 100).await?, run.last_seq, &run.last_hash);
    ensure!(removed == Err(ChainBreak::Gap { expected: 2, found: 3 }), "{removed:?}");
    Ok(())
}

/// due: waiting runs past their deadline and running runs past their lease, oldest first.
pub(crate) async fn due_finds_expired_deadlines_and_leases<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let now = T0 + 1_000_000;
    create_waiting(&*store, 1, &["call_1"], Some(now - 10)).await?; // due 3rd
    create_waiting(&*store, 2, &["call_1"], Some(now + 10)).await?; // not yet
    create_waiting(&*store, 3, &["call_1"], None).await?; // no deadline
    create_waiting(&*store, 4, &["call_1"], Some(now)).await?; // due 4th (at now)
    let stale = create_running(&*store, 5, "demo").await?; // lease T0 + 5 + 30_000: due 1st
    let fresh = create_running(&*store, 6, "demo").await?;
    store.append(&fresh.id, OWNER, vec![], now + 30_000).await?; // renewed: not due
    let old = create_running(&*store, 7, "demo").await?;
    store.append(&old.id, OWNER, vec![], now - 100).await?; // due 2nd
    create_terminal(&*store, 8, RunStatus::Completed, T0).await?;
    create_terminal(&*store, 9, RunStatus::Expired, T0).await?; // had a deadline; terminal now

    let due = store.due(now, 100).await?;
    let ids: Vec<_> = due.iter().map(|r| r.id.clone()).collect();
    ensure!(ids == vec![stale.id.clone(), id(7), id(1), id(4)], "{ids:?}");
    let first_two = store.due(now, 2).await?;
    ensure!(first_two.iter().map(|r| r.id.clone()).collect::<Vec<_>>() == vec![stale.id, id(7)]);
    ensure!(store.due(T0, 100).await?.is_empty(), "nothing is due before any deadline");
    Ok(())
}

/// waiting_changed: waiting runs by their last change, in a window after a (time, id) and up to a time,
/// oldest first then by id, paged by the last run read; runs of other statuses never.
pub(crate) async fn waiting_changed_reads_a_window_of_waiting_runs<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    // Each waits from T0 + 10 (its suspension), in id order.
    for n in 1..=5 {
        create_waiting(&*store, n, &["call_1"], None).await?;
    }
    let later = create_running(&*store, 6, "demo").await?;
    let later =
        store.transition(&later.id, Guard::Lease(OWNER.into()), suspend(&["call_1"], None), vec![], T0 + 50).await?;
    create_running(&*store, 7, "demo").await?;
    create_terminal(&*store, 8, RunStatus::Completed, T0 + 10).await?;
    let ids = |runs: &[RunRecord]| runs.iter().map(|r| r.id.clone()).collect::<Vec<_>>();

    let all = store.waiting_changed((T0, ""), T0 + 100, 100).await?;
    ensure!(ids(&all) == vec![id(1), id(2), id(3), id(4), id(5), later.id.clone()], "{:?}", ids(&all));
    ensure!(all.iter().all(|r| r.status() == RunStatus::WaitingForApproval));
    let first = store.waiting_changed((T0, ""), T0 + 100, 2).await?;
    ensure!(ids(&first) == vec![id(1), id(2)]);
    let next = store.waiting_changed((T0 + 10, id(2).as_str()), T0 + 100, 2).await?;
    ensure!(ids(&next) == vec![id(3), id(4)], "continues after the last run read: {:?}", ids(&next));
    let until = store.waiting_changed((T0, ""), T0 + 49, 100).await?;
    ensure!(ids(&until).len() == 5, "up to and including the time: {:?}", ids(&until));
    let after = store.waiting_changed((T0 + 10, id(5).as_str()), T0 + 100, 100).await?;
    ensure!(ids(&after) == vec![later.id.clone()], "{:?}", ids(&after));
    ensure!(store.waiting_changed((T0 + 50, ""), T0 + 50, 100).await?.len() == 1, "at the window's start, by id");
    ensure!(store.waiting_changed((T0 + 50, later.id.as_str()), T0 + 100, 100).await?.is_empty());
    Ok(())
}

/// purge: terminal runs by finished_at, waiting runs by updated_at, in batches, events with them;
/// running and recent runs stay.
pub(crate) async fn counts_by_status<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    ensure!(store.count_by_status().await?.is_empty(), "an empty store counts nothing");
    create_running(&*store, 1, "demo").await?;
    create_waiting(&*store, 2, &["call_1"], None).await?;
    create_waiting(&*store, 3, &["call_1"], None).await?;
    create_terminal(&*store, 4, RunStatus::Completed, T0 + 20).await?;
    create_terminal(&*store, 5, RunStatus::Cancelled, T0 + 20).await?;
    let mut counts = store.count_by_status().await?;
    counts.sort_by_key(|(status, _)| status.as_str());
    let expected = [
        (RunStatus::Cancelled, 1),
        (RunStatus::Completed, 1),
        (RunStatus::Running, 1),
        (RunStatus::WaitingForApproval, 2),
    ];
    ensure!(counts == expected, "counts {counts:?}");
    Ok(())
}

pub(crate) async fn purge_windows_and_batches<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let old = T0 + 1_000;
    let new = T0 + 9_000;
    let cut = T0 + 5_000;
    for (n, status) in
        [(1, RunStatus::Completed), (2, RunStatus::Failed), (3, RunStatus::Cancelled), (4, RunStatus::Expired)]
    {
        create_terminal(&*store, n, status, old).await?;
    }
    create_terminal(&*store, 5, RunStatus::Completed, new).await?;
    create_waiting(&*store, 6, &["call_1"], None).await?; // updated T0 + 10: old
    let recent = create_waiting(&*store, 7, &["call_1", "call_2"], None).await?;
    store
        .transition(&recent.id, Guard::Version(recent.version), decide("call_1", Decision::Approve), vec![], new)
        .await?;
    create_running(&*store, 8, "demo").await?; // running: never purged
    let orphans_before = h.query_i64("SELECT COUNT(*) FROM events".into()).await?;
    ensure!(orphans_before > 0);

    let first = store.purge(cut, cut, 2).await?;
    ensure!(first == 2, "a batch bounds the purge: {first}");
    let second = store.purge(cut, cut, 2).await?;
    ensure!(second == 2, "{second}");
    let third = store.purge(cut, cut, 2).await?;
    ensure!(third == 1, "five runs were old enough: {third}");
    ensure!(store.purge(cut, cut, 2).await? == 0);

    let left: Vec<RunId> =
        store.list(RunQuery { limit: 100, ..Default::default() }).await?.runs.into_iter().map(|r| r.id).collect();
    ensure!(left == vec![id(8), id(7), id(5)], "{left:?}");
    for n in [1, 2, 3, 4, 6] {
        let gone = store.get(&id(n)).await;
        ensure!(matches!(gone, Err(StoreError::NotFound(_))), "{gone:?}");
        let events = store.events(&id(n), 0, 10).await;
        ensure!(matches!(events, Err(StoreError::NotFound(_))), "{events:?}");
    }
    let orphans = h.query_i64("SELECT COUNT(*) FROM events WHERE run_id NOT IN (SELECT id FROM runs)".into()).await?;
    ensure!(orphans == 0, "purged runs leave no events behind ({orphans})");
    let kept = h.query_i64(format!("SELECT COUNT(*) FROM events WHERE run_id = '{}'", id(5))).await?;
    ensure!(kept > 0);

    // The two windows are separate: a later terminal cut alone takes the recent completed run only.
    ensure!(store.purge(new + 1, T0, 100).await? == 1);
    ensure!(store.get(&id(5)).await.is_err() && store.get(&id(7)).await.is_ok());
    ensure!(store.purge(T0, new + 1, 100).await? == 1);
    ensure!(store.get(&id(7)).await.is_err() && store.get(&id(8)).await.is_ok());
    Ok(())
}

/// A database written by a newer Tollgate is refused on open.
pub(crate) async fn a_newer_schema_is_refused<H: Harness>(h: &H) -> anyhow::Result<()> {
    h.store();
    ensure!(h.open_again().await.is_ok(), "opening a current database twice is fine");
    h.execute("INSERT INTO tollgate_migrations (version, name, applied_at) VALUES (999, 'from_the_future', 0)".into())
        .await?;
    match h.open_again().await {
        Err(StoreError::NewerSchema { found: 999, supported }) => ensure!((1..999).contains(&supported)),
        Err(other) => anyhow::bail!("expected NewerSchema, got {other:?}"),
        Ok(_) => anyhow::bail!("a newer schema must be refused"),
    }
    Ok(())
}

/// A row that cannot be decoded is `Corrupt` for that run only; the others keep working.
pub(crate) async fn a_corrupt_row_spoils_only_its_run<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let bad = create_waiting(&*store, 1, &["call_1"], Some(T0)).await?;
    let good = create_waiting(&*store, 2, &["call_1"], Some(T0)).await?;
    create_running(&*store, 3, "demo").await?;
    h.execute(format!("UPDATE runs SET decisions = 'not json' WHERE id = '{}'", bad.id)).await?;

    let read = store.get(&bad.id).await;
    ensure!(matches!(&read, Err(StoreError::Corrupt { id, .. }) if bad.id == *id), "{read:?}");
    let moved = store.transition(&bad.id, Guard::Version(bad.version), Transition::Cancel, vec![], T0).await;
    ensure!(matches!(&moved, Err(StoreError::Corrupt { .. })), "{moved:?}");
    // Its events are rows of their own: they stay readable, as the record of what happened.
    let events = store.events(&bad.id, 0, 100).await?;
    ensure!(u64::try_from(events.len())? == bad.last_seq, "{events:?}");
    verify_chain(&events, bad.last_seq, &bad.last_hash)?;

    ensure!(store.get(&good.id).await? == good);
    let listed: Vec<RunId> =
        store.list(RunQuery { limit: 10, ..Default::default() }).await?.runs.into_iter().map(|r| r.id).collect();
    ensure!(listed == vec![id(3), id(2)], "list skips the corrupt run and shows the rest: {listed:?}");
    // The corrupt row still takes its place in paging: the page after [3, 2] holds only it, so it
    // comes back empty, and ends the listing.
    let page = store.list(RunQuery { limit: 2, ..Default::default() }).await?;
    ensure!(page.runs.len() == 2 && page.next_cursor.as_deref() == Some(id(2).as_str()), "{page:?}");
    let after = store.list(RunQuery { limit: 2, cursor: page.next_cursor, ..Default::default() }).await?;
    ensure!(after.runs.is_empty() && after.next_cursor.is_none(), "{after:?}");
    let due: Vec<RunId> = store.due(T0 + 100, 10).await?.into_iter().map(|r| r.id).collect();
    ensure!(due == vec![good.id.clone()], "{due:?}");
    store.transition(&good.id, Guard::Version(good.version), Transition::Cancel, vec![], T0).await?;

    h.execute(format!("UPDATE runs SET status = 'sleeping' WHERE id = '{}'", id(3))).await?;
    let read = store.get(&id(3)).await;
    ensure!(matches!(&read, Err(StoreError::Corrupt { id: i, .. }) if id(3) == *i), "{read:?}");
    let appended = store.append(&id(3), OWNER, vec![], T0).await;
    ensure!(matches!(&appended, Err(StoreError::Corrupt { .. })), "{appended:?}");

    // Columns that contradict the status: a waiting run without its held turn.
    let waiting = create_waiting(&*store, 4, &["call_1"], None).await?;
    h.execute(format!(
        "UPDATE runs SET suspension = NULL, turn_digest = NULL, required_calls = NULL, decisions = NULL \
         WHERE id = '{}'",
        waiting.id
    ))
    .await?;
    let read = store.get(&waiting.id).await;
    ensure!(
        matches!(&read, Err(StoreError::Corrupt { id, detail }) if waiting.id == *id && detail.contains("held turn")),
        "{read:?}"
    );
    Ok(())
}

/// Writes racing each other, some of them failing: each is answered for itself, and a failed one
/// undoes nothing of the others (on SQLite they share one group commit).
pub(crate) async fn concurrent_writes_fail_alone<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    for n in 0..16 {
        create_running(&*store, n, "demo").await?;
    }
    let mut tasks = Vec::new();
    for n in 0..48 {
        let store = store.clone();
        // 0..16 exist already (duplicates), 16..48 are new.
        tasks.push(tokio::spawn(async move { (n, create_running(&*store, n, "demo").await) }));
    }
    for n in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let lease_guard = Guard::Lease(OWNER.into());
            let outcome = store
                .transition(
                    &id(n),
                    lease_guard,
                    suspend(&["call_1"], None),
                    vec![event(EventKind::ApprovalRequested, 1, json!({}))],
                    T0 + 10,
                )
                .await;
            (100 + n, outcome.map_err(anyhow::Error::from))
        }));
    }
    for task in tasks {
        let (n, outcome) = task.await?;
        match n {
            0..16 => {
                let duplicate = outcome.err().and_then(|e| e.downcast::<StoreError>().ok());
                ensure!(matches!(duplicate, Some(StoreError::Duplicate(_))), "run {n}: {duplicate:?}");
            }
            16..48 => ensure!(outcome?.last_seq == 1, "run {n}"),
            _ => ensure!(outcome?.status() == RunStatus::WaitingForApproval, "suspend {n}"),
        }
    }
    let all = store.list(RunQuery { limit: 100, ..Default::default() }).await?;
    ensure!(all.runs.len() == 48, "{}", all.runs.len());
    for run in &all.runs {
        let events = store.events(&run.id, 0, 100).await?;
        verify_chain(&events, run.last_seq, &run.last_hash)?;
        let expected = if run.status() == RunStatus::WaitingForApproval { 2 } else { 1 };
        ensure!(events.len() == expected, "{}: {} events", run.id, events.len());
    }
    Ok(())
}

/// A write that fails after it has begun writing (here: its events collide with existing ones because
/// the run's chain head was set back in the database) leaves no trace, and other writes go on.
pub(crate) async fn a_write_failing_midway_leaves_no_trace<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let broken = create_waiting(&*store, 1, &["call_1"], None).await?;
    let healthy = create_waiting(&*store, 2, &["call_1"], None).await?;
    h.execute(format!("UPDATE runs SET last_seq = 0 WHERE id = '{}'", broken.id)).await?;
    let broken_before = store.get(&broken.id).await?;

    let decision = || vec![event(EventKind::Decision, 1, json!({"call_id": "call_1"}))];
    let (failed, fine) = tokio::join!(
        store.transition(
            &broken.id,
            Guard::Version(broken.version),
            decide("call_1", Decision::Approve),
            decision(),
            T0 + 20
        ),
        store.transition(
            &healthy.id,
            Guard::Version(healthy.version),
            decide("call_1", Decision::Approve),
            decision(),
            T0 + 20
        ),
    );
    ensure!(matches!(failed, Err(StoreError::Database(_))), "{failed:?}");
    ensure!(fine?.version == healthy.version + 1);
    ensure!(store.get(&broken.id).await? == broken_before, "the failed transition's row update was undone");
    ensure!(store.events(&broken.id, 0, 100).await?.len() == 2);
    ensure!(store.events(&healthy.id, 0, 100).await?.len() == 3);
    Ok(())
}

/// A takeover is planned on a lease seen expired, but the owner renews the lease first (a renewal does
/// not bump the version, so the version guard alone lets the takeover through): the takeover must fail
/// with a conflict, checked on the lease as stored when it commits, and the owner keeps the run.
pub(crate) async fn a_renewal_before_a_takeover_wins<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let run = create_running(&*store, 1, "demo").await?;
    let expired_at = T0 + 1 + 30_000;
    let now = expired_at + 5;
    // What the taker's sweep read: the run, due at `now`.
    let seen = store.due(now, 10).await?;
    ensure!(seen.len() == 1 && seen[0].lease().is_some_and(|l| l.expires_at == expired_at), "{seen:?}");
    let seen = &seen[0];

    store.append(&run.id, OWNER, vec![], now + 30_000).await?;
    let takeover = store.transition(&run.id, Guard::Version(seen.version), claim("node-b"), vec![], now).await;
    ensure!(
        conflict_of(&takeover) == Some(&Conflict::LeaseHeld { owner: OWNER.into(), expires_at: now + 30_000 }),
        "a takeover after a renewal must conflict: {takeover:?}"
    );
    let read = store.get(&run.id).await?;
    ensure!(read.lease() == Some(&lease(OWNER, now + 30_000)) && read.version == seen.version, "{read:?}");
    ensure!(store.append(&run.id, OWNER, vec![], now + 60_000).await? == read.last_seq, "the owner keeps driving");

    // Raced for real, many times: never both. Either the renewal commits first (the takeover then
    // conflicts), or the takeover does (the renewal then conflicts: the lease is another's).
    for n in 2..22 {
        let run = create_running(&*store, n, "demo").await?;
        let now = run.lease().map_or(T0, |l| l.expires_at) + 1;
        let (renewed, taken) = tokio::join!(
            store.append(&run.id, OWNER, vec![], now + 30_000),
            store.transition(&run.id, Guard::Version(run.version), claim("node-b"), vec![], now),
        );
        match (&renewed, &taken) {
            (Ok(_), Err(StoreError::Conflict { conflict: Conflict::LeaseHeld { owner, .. }, .. }))
                if owner == OWNER =>
            {
                ensure!(store.get(&run.id).await?.lease().is_some_and(|l| l.owner == OWNER));
            }
            (Err(StoreError::Conflict { conflict: Conflict::LeaseLost { holder: Some(holder) }, .. }), Ok(taken))
                if holder == "node-b" =>
            {
                ensure!(store.get(&run.id).await? == *taken && taken.lease().is_some_and(|l| l.owner == "node-b"));
            }
            _ => anyhow::bail!("run {n}: exactly one of the renewal and the takeover wins: {renewed:?} / {taken:?}"),
        }
    }
    Ok(())
}

/// 32 tasks claim one waiting run with the same version guard at once: exactly one wins.
pub(crate) async fn exactly_one_of_32_racing_claims_wins<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let waiting = create_waiting(&*store, 1, &["call_1"], None).await?;
    let decided = store
        .transition(&waiting.id, Guard::Version(waiting.version), decide("call_1", Decision::Approve), vec![], T0)
        .await?;
    let start = Arc::new(tokio::sync::Barrier::new(32));
    let mut tasks = Vec::new();
    for i in 0..32 {
        let (store, start, run_id) = (store.clone(), start.clone(), decided.id.clone());
        let v = decided.version;
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let resumed = event(EventKind::RunResumed, 1, json!({"actor": format!("racer-{i}")}));
            store.transition(&run_id, Guard::Version(v), claim(&format!("racer-{i}")), vec![resumed], T0 + 1).await
        }));
    }
    let mut winners = Vec::new();
    for (i, task) in tasks.into_iter().enumerate() {
        match task.await? {
            Ok(run) => winners.push((i, run)),
            Err(StoreError::Conflict { conflict: Conflict::StaleVersion { expected, found }, .. })
                if expected == decided.version && found == decided.version + 1 => {}
            Err(other) => anyhow::bail!("a losing claim must be a stale version, got {other:?}"),
        }
    }
    ensure!(winners.len() == 1, "exactly one claim wins, got {}", winners.len());
    let (i, winner) = &winners[0];
    let read = store.get(&decided.id).await?;
    ensure!(read == *winner && read.version == decided.version + 1);
    ensure!(read.lease().map(|l| l.owner.clone()) == Some(format!("racer-{i}")));
    let events = store.events(&decided.id, 0, 100).await?;
    ensure!(events.iter().filter(|e| e.kind == EventKind::RunResumed).count() == 1, "one resume on the record");
    verify_chain(&events, read.last_seq, &read.last_hash)?;
    Ok(())
}

/// Claims at most one queued run for `owner` (a worker of one free slot).
async fn claim_one(
    store: &dyn RunStore,
    owner: &str,
    lease_until: Millis,
    now: Millis,
) -> anyhow::Result<Option<tollgate_agent_core::store::Claimed>> {
    let mut claimed = store.claim_queued(&agents(), 1, lease(owner, lease_until), now).await?;
    ensure!(claimed.len() <= 1, "a claim of one took {}", claimed.len());
    Ok(claimed.pop())
}

/// A queued run (new, or queued with its held turn) is claimed by the queue, oldest queued first, with
/// the lease asked for; cancelled or running runs are never claimed; a released run is queued again
/// with its held turn and claimed again; an empty queue answers nothing.
pub(crate) async fn queued_runs_are_claimed_oldest_first_and_released_back<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    ensure!(store.oldest_queued().await?.is_none(), "nothing queued yet");
    ensure!(claim_one(&*store, "node-a", T0 + 60_000, T0).await?.is_none(), "nothing queued yet");
    ensure!(store.claim_queued(&agents(), 0, lease("node-a", T0 + 60_000), T0).await?.is_empty(), "a claim of none");
    // A queued run of an agent this node does not have is left to the nodes that have it.
    store.create(RunRecord::new(id(9), "other".into(), "q".into(), "local".into(), T0 + 1, None), vec![]).await?;
    let queued = |n: u64, at: Millis| RunRecord::new(id(n), "demo".into(), format!("q{n}"), "local".into(), at, None);
    // Queued out of id order: the queue goes by when each was queued, not by id.
    store.create(queued(2, T0 + 3), vec![]).await?;
    store.create(queued(3, T0 + 2), vec![]).await?;
    let cancelled = store.create(queued(1, T0 + 1), vec![]).await?;
    store.transition(&cancelled.id, Guard::Version(1), Transition::Cancel, vec![], T0 + 4).await?;
    create_running(&*store, 4, "demo").await?;
    // Every decision in, no resume: queued with the held turn.
    let waiting = create_waiting(&*store, 5, &["call_1"], None).await?;
    let decided = store
        .transition(&waiting.id, Guard::Version(waiting.version), decide("call_1", Decision::Approve), vec![], T0 + 20)
        .await?;
    ensure!(decided.status() == RunStatus::Queued && decided.held_turn().is_some());
    ensure!(store.oldest_queued().await? == Some(T0 + 1), "the oldest queued run is of any agent");

    let first = claim_one(&*store, "node-a", T0 + 60_000, T0 + 100).await?.context("run 3 is queued")?;
    ensure!(
        first.run.id == id(3) && first.queued_at == T0 + 2,
        "queued first, claimed first: {} at {}",
        first.run.id,
        first.queued_at
    );
    ensure!(first.run.status() == RunStatus::Running && first.run.version == 2);
    ensure!(first.run.lease() == Some(&lease("node-a", T0 + 60_000)) && first.run.held_turn().is_none());
    ensure!(store.get(&first.run.id).await? == first.run, "the claim is stored");
    let second = claim_one(&*store, "node-b", T0 + 60_000, T0 + 101).await?.context("run 2 is queued")?;
    ensure!(second.run.id == id(2) && second.run.lease().map(|l| l.owner.as_str()) == Some("node-b"));
    let third = claim_one(&*store, "node-b", T0 + 60_000, T0 + 102).await?.context("run 5 is queued")?;
    ensure!(third.run.id == decided.id && third.queued_at == T0 + 20);
    ensure!(third.run.held_turn() == decided.held_turn(), "the claim resumes the held turn");
    ensure!(claim_one(&*store, "node-a", T0 + 60_000, T0 + 103).await?.is_none(), "no run is claimed twice");
    let other = store.claim_queued(&["other".to_owned()], 4, lease("node-o", T0 + 60_000), T0 + 103).await?;
    ensure!(other.iter().map(|c| c.run.id.clone()).collect::<Vec<_>>() == [id(9)], "`other`'s run, to a node with it");
    ensure!(store.oldest_queued().await?.is_none(), "the queue is empty");

    // Given back by its holder (a node shutting down): queued with its held turn, the lease gone.
    let stale =
        store.transition(&third.run.id, Guard::Lease("node-a".into()), Transition::Release, vec![], T0 + 104).await;
    ensure!(
        conflict_of(&stale) == Some(&Conflict::LeaseLost { holder: Some("node-b".into()) }),
        "only the lease's holder gives a run back: {stale:?}"
    );
    let appended = event(EventKind::ToolStarted, 1, json!({"call_id": "call_1"}));
    let released = store
        .transition(&third.run.id, Guard::Lease("node-b".into()), Transition::Release, vec![appended], T0 + 105)
        .await?;
    ensure!(released.status() == RunStatus::Queued && released.lease().is_none());
    ensure!(released.held_turn() == decided.held_turn(), "released with the held turn it resumes");
    ensure!(store.oldest_queued().await? == Some(T0 + 105), "queued again when given back");
    let again = claim_one(&*store, "node-c", T0 + 90_000, T0 + 106).await?.context("released runs are queued")?;
    ensure!(again.run.id == released.id && again.queued_at == T0 + 105 && again.run.held_turn() == decided.held_turn());
    let events = store.events(&again.run.id, 0, 100).await?;
    verify_chain(&events, again.run.last_seq, &again.run.last_hash)?;
    ensure!(events.iter().any(|e| e.kind == EventKind::ToolStarted), "the release's events are kept");
    Ok(())
}

/// New runs and resumes share one queue ordered by when each began to wait: a run queued to resume
/// (whose id, from its creation, is older than every new run's) goes after the new runs queued before
/// it and before those queued after it, so neither class waits behind the other without bound. A claim
/// of several takes the oldest ones, each once, and the next claim goes on where it stopped.
pub(crate) async fn new_runs_and_resumes_are_claimed_in_the_order_they_were_queued<H: Harness>(
    h: &H,
) -> anyhow::Result<()> {
    let store = h.store();
    // Runs 1..=3 wait for a decision (held since T0 + 10); runs 11..=16 are new, queued at T0 + 100,
    // T0 + 200, ... T0 + 600; the decisions queue runs 1..=3 at T0 + 250, T0 + 450 and T0 + 650.
    let mut waiting = Vec::new();
    for n in 1..=3 {
        waiting.push(create_waiting(&*store, n, &["call_1"], None).await?);
    }
    for n in 11..=16_u64 {
        let at = T0 + 100 * i64::try_from(n - 10)?;
        store.create(RunRecord::new(id(n), "demo".into(), "q".into(), "local".into(), at, None), vec![]).await?;
    }
    for (i, run) in waiting.iter().enumerate() {
        let at = T0 + 250 + 200 * i64::try_from(i)?;
        store.transition(&run.id, Guard::Version(run.version), decide("call_1", Decision::Approve), vec![], at).await?;
    }
    let expected = [(11, 100), (12, 200), (1, 250), (13, 300), (14, 400), (2, 450), (15, 500), (16, 600), (3, 650)];
    ensure!(store.oldest_queued().await? == Some(T0 + 100));
    let mut order = Vec::new();
    for (round, limit) in [4_u32, 4, 4].into_iter().enumerate() {
        let owner = format!("node-{round}");
        let claimed = store.claim_queued(&agents(), limit, lease(&owner, T0 + 60_000), T0 + 1_000).await?;
        ensure!(claimed.len() <= usize::try_from(limit)?, "at most the limit: {}", claimed.len());
        for claim in claimed {
            ensure!(
                claim.run.status() == RunStatus::Running && claim.run.lease().map(|l| l.owner.as_str()) == Some(&owner)
            );
            ensure!(store.get(&claim.run.id).await? == claim.run, "the claim is stored");
            order.push((claim.run.id, claim.queued_at - T0));
        }
    }
    let expected: Vec<(RunId, Millis)> = expected.iter().map(|(n, at)| (id(*n), *at)).collect();
    ensure!(order == expected, "claimed in queued order:\n{order:?}\n{expected:?}");
    ensure!(store.oldest_queued().await?.is_none(), "every run was claimed");
    Ok(())
}

/// Queued runs that cannot be read are passed over, and others are claimed in their place: a claim of
/// two whose two oldest queued runs are corrupt takes the next two. The corrupt ones stay queued.
pub(crate) async fn queued_runs_that_cannot_be_read_are_passed_over<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    for n in 1..=6 {
        let at = T0 + i64::try_from(n)?;
        store.create(RunRecord::new(id(n), "demo".into(), "q".into(), "local".into(), at, None), vec![]).await?;
    }
    h.execute(format!("UPDATE runs SET decisions = 'not json' WHERE id IN ('{}', '{}')", id(1), id(2))).await?;
    let agents = agents();
    let claim = |limit: u32| store.claim_queued(&agents, limit, lease("node-a", T0 + 60_000), T0 + 100);
    let first: Vec<RunId> = claim(2).await?.into_iter().map(|c| c.run.id).collect();
    ensure!(first == [id(3), id(4)], "the two oldest readable runs: {first:?}");
    let rest: Vec<RunId> = claim(5).await?.into_iter().map(|c| c.run.id).collect();
    ensure!(rest == [id(5), id(6)], "{rest:?}");
    ensure!(claim(1).await?.is_empty(), "only the corrupt runs are left");
    ensure!(store.oldest_queued().await? == Some(T0 + 1), "the corrupt runs stay queued");
    Ok(())
}

/// How many runs [`FILLED_QUEUED_AT`]'s queue holds.
pub(crate) const FILLED_RUNS: i64 = 100_000;

/// The SQL expression of when run `n` of a filled queue was queued: an order unlike the ids'. The
/// backends' tests fill `runs` with runs `id(1..=FILLED_RUNS)`, every tenth of agent `demo` and the
/// others of `other`, run `n` queued at this (`n` and `T0` written in).
pub(crate) const FILLED_QUEUED_AT: &str = "T0 + (n * 7919) % 100003";

/// On a queue filled as [`FILLED_QUEUED_AT`] says, a claim of 64 takes the 64 oldest queued runs of
/// `demo` in one go, oldest first, and the oldest queued run left is the oldest of the others.
pub(crate) async fn a_filled_queue_is_claimed_oldest_first(store: &dyn RunStore) -> anyhow::Result<()> {
    let queued_at = |n: i64| T0 + (n * 7919) % 100_003; // FILLED_QUEUED_AT
    let mut demo: Vec<(Millis, RunId, i64)> = (1..=FILLED_RUNS)
        .filter(|n| n % 10 == 0)
        .map(|n| (queued_at(n), id(u64::try_from(n).unwrap_or(0)), n))
        .collect();
    demo.sort();
    let expected: Vec<RunId> = demo.iter().take(64).map(|(_, id, _)| id.clone()).collect();
    let claimed = store.claim_queued(&agents(), 64, lease("node-a", T0 + 600_000), T0 + 200_000).await?;
    let ids: Vec<RunId> = claimed.iter().map(|c| c.run.id.clone()).collect();
    ensure!(ids == expected, "the 64 oldest queued runs of `demo`, oldest first:\n{ids:?}\n{expected:?}");
    ensure!(claimed.iter().all(|c| c.run.status() == RunStatus::Running));
    let taken: std::collections::HashSet<i64> = demo.iter().take(64).map(|(_, _, n)| *n).collect();
    let oldest = (1..=FILLED_RUNS).filter(|n| !taken.contains(n)).map(queued_at).min();
    ensure!(store.oldest_queued().await? == oldest, "the oldest of the runs left, of any agent");
    Ok(())
}

/// Two stores on one database (two nodes), eight workers each, claim a queue of 60 runs at once, up
/// to three at a time: every run is claimed exactly once, none is left, and no claim fails for having
/// raced another.
pub(crate) async fn racing_workers_of_two_nodes_never_claim_a_run_twice<H: Harness>(h: &H) -> anyhow::Result<()> {
    let nodes = [h.store(), h.open_again().await?];
    for n in 1..=60 {
        let at = T0 + i64::try_from(n % 7)?;
        nodes[0].create(RunRecord::new(id(n), "demo".into(), "q".into(), "local".into(), at, None), vec![]).await?;
    }
    let start = Arc::new(tokio::sync::Barrier::new(16));
    let mut workers = Vec::new();
    for (node, store) in nodes.iter().enumerate() {
        for worker in 0..8 {
            let (store, start) = (store.clone(), start.clone());
            workers.push(tokio::spawn(async move {
                start.wait().await;
                let owner = format!("node-{node}-{worker}");
                let mut claimed = Vec::new();
                loop {
                    let batch = store.claim_queued(&agents(), 3, lease(&owner, T0 + 60_000), T0 + 10).await?;
                    anyhow::ensure!(batch.len() <= 3, "at most three: {}", batch.len());
                    if batch.is_empty() {
                        break;
                    }
                    for claim in batch {
                        anyhow::ensure!(claim.run.lease().map(|l| l.owner.as_str()) == Some(owner.as_str()));
                        claimed.push(claim.run.id);
                    }
                }
                anyhow::Ok(claimed)
            }));
        }
    }
    let mut all = Vec::new();
    for worker in workers {
        all.extend(worker.await??);
    }
    all.sort();
    let expected: Vec<RunId> = (1..=60).map(id).collect();
    ensure!(all == expected, "each run claimed once: {} claims", all.len());
    let counts = nodes[1].count_by_status().await?;
    ensure!(counts == vec![(RunStatus::Running, 60)], "{counts:?}");
    Ok(())
}

/// The owner's appends race each other and a lease-guarded suspend of the same run: writers to one run
/// queue up, none is lost or fails for having raced. Each append lands (before the suspend) or is told
/// the run no longer runs (after it); the landed ones and the suspend's event make one gapless chain.
pub(crate) async fn racing_appends_and_a_transition_make_one_chain<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let run = create_running(&*store, 1, "demo").await?;
    let start = Arc::new(tokio::sync::Barrier::new(17));
    let mut appends = Vec::new();
    for i in 0..16 {
        let (store, start, run_id) = (store.clone(), start.clone(), run.id.clone());
        appends.push(tokio::spawn(async move {
            start.wait().await;
            let request = event(EventKind::ModelRequest, 1, json!({"racer": i}));
            store.append(&run_id, OWNER, vec![request], T0 + 60_000 + i).await
        }));
    }
    let suspend_task = {
        let (store, start, run_id) = (store.clone(), start.clone(), run.id.clone());
        tokio::spawn(async move {
            start.wait().await;
            let requested = event(EventKind::ApprovalRequested, 1, json!({"calls": ["call_1"]}));
            store
                .transition(&run_id, Guard::Lease(OWNER.into()), suspend(&["call_1"], None), vec![requested], T0 + 10)
                .await
        })
    };
    let mut landed = Vec::new();
    for task in appends {
        match task.await? {
            Ok(seq) => landed.push(seq),
            Err(StoreError::Conflict {
                conflict: Conflict::NotRunning { status: RunStatus::WaitingForApproval },
                ..
            }) => {}
            Err(other) => anyhow::bail!("an append either lands or finds the run waiting, got {other:?}"),
        }
    }
    let waiting = suspend_task.await??;
    landed.sort_unstable();
    let landed_count = u64::try_from(landed.len())?;
    let expected: Vec<u64> = (2..2 + landed_count).collect();
    ensure!(landed == expected, "the appends took seqs {landed:?}, not one each from 2");
    ensure!(waiting.last_seq == 2 + landed_count && waiting.version == run.version + 1, "{waiting:?}");
    let read = store.get(&run.id).await?;
    ensure!(read == waiting, "{read:?}");
    let events = store.events(&run.id, 0, 100).await?;
    ensure!(u64::try_from(events.len())? == read.last_seq, "{} events for last_seq {}", events.len(), read.last_seq);
    ensure!(events.last().is_some_and(|e| e.kind == EventKind::ApprovalRequested), "the suspend's event is last");
    verify_chain(&events, read.last_seq, &read.last_hash)?;
    Ok(())
}

/// What a commit tap (`RunStore::tap_commits`) is handed, run by run and in order.
type Tapped = Arc<std::sync::Mutex<Vec<(RunId, Vec<tollgate_agent_core::StoredEvent>)>>>;

fn tap_into(tapped: &Tapped) -> tollgate_agent_core::CommitTap {
    let tapped = tapped.clone();
    Arc::new(move |run: &RunId, events: &[tollgate_agent_core::StoredEvent]| {
        tapped.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((run.clone(), events.to_vec()));
    })
}

/// A commit tap is handed each commit made through its store — creates, transitions and appends,
/// alone and many at once (grouped), sealed or not — with its events exactly as `events` serves them
/// afterwards: every event once, in order, nothing of a refused write, nothing another store of the
/// same database committed, nothing once the tap is dropped.
pub(crate) async fn a_commit_tap_sees_each_commit_as_stored<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.open_with(keyring(&[("k1", 1)])?).await?;
    let tapped = Tapped::default();
    let tap = tap_into(&tapped);
    ensure!(store.tap_commits(&tap), "every backend of this crate taps its commits");

    // One at a time: a create, appends, a suspend, a refused transition, a decision, the end.
    let run = create_running(&*store, 1, "demo").await?;
    store.append(&run.id, OWNER, vec![event(EventKind::ModelRequest, 1, json!({"messages": 2}))], T0 + 60_000).await?;
    store.append(&run.id, OWNER, vec![], T0 + 61_000).await?;
    let requested = event(EventKind::ApprovalRequested, 1, json!({"calls": ["call_1"], "secret": "s3"}));
    let waiting =
        store.transition(&run.id, Guard::Lease(OWNER.into()), suspend(&["call_1"], None), vec![requested], T0).await?;
    let stale = event(EventKind::RunCancelled, 1, json!({}));
    let refused = store.transition(&run.id, Guard::Version(waiting.version + 7), Transition::Cancel, vec![stale], T0);
    ensure!(refused.await.is_err(), "a stale guard is refused");
    let resumed = event(EventKind::RunResumed, 1, json!({"actor": "alice"}));
    store
        .transition(&run.id, Guard::Version(waiting.version), decide("call_1", Decision::Approve), vec![resumed], T0)
        .await?;

    // Many at once (PostgreSQL groups them): 24 creates, then a suspend of each.
    let mut tasks = Vec::new();
    for n in 10..34 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move { create_waiting(&*store, n, &["call_1"], None).await }));
    }
    for task in tasks {
        task.await??;
    }
    // Another store on the same database: its commits are not this tap's.
    let other = h.open_with(keyring(&[("k1", 1)])?).await?;
    create_running(&*other, 40, "demo").await?;

    let mut by_run: std::collections::BTreeMap<RunId, Vec<tollgate_agent_core::StoredEvent>> = Default::default();
    for (run, events) in tapped.lock().unwrap_or_else(std::sync::PoisonError::into_inner).drain(..) {
        ensure!(!events.is_empty(), "a commit without events taps nothing");
        by_run.entry(run).or_default().extend(events);
    }
    ensure!(!by_run.contains_key(&id(40)), "another store's commit was tapped");
    ensure!(by_run.len() == 25, "{} runs tapped", by_run.len());
    for (run, events) in &by_run {
        let stored = store.events(run, 0, 1000).await?;
        ensure!(*events == stored, "run {run}: tapped {events:?}\nstored {stored:?}");
    }
    ensure!(by_run[&run.id].len() == 4, "the refused write's event was not tapped: {:?}", by_run[&run.id]);

    drop(tap);
    create_running(&*store, 50, "demo").await?;
    ensure!(tapped.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_empty(), "a dropped tap is forgotten");
    Ok(())
}

/// Reads the commit log from `from` in pages of `limit` until `expected` events (read or passed over)
/// are in, or 10 s pass: the events, the runs of those passed over, and where the log ends. (A
/// PostgreSQL log waits for every older transaction of the cluster, other tests' included, to end.)
pub(crate) async fn read_log(
    store: &dyn RunStore,
    from: &str,
    limit: u32,
    expected: usize,
) -> anyhow::Result<(Vec<(RunId, tollgate_agent_core::StoredEvent)>, Vec<RunId>, String)> {
    read_log_after(store, from, limit, expected, None).await
}

/// [`read_log`], leaving out the first event of run `pre_start` (one committed just before the log's
/// start, which PostgreSQL may read too: at least once).
pub(crate) async fn read_log_after(
    store: &dyn RunStore,
    from: &str,
    limit: u32,
    expected: usize,
    pre_start: Option<&RunId>,
) -> anyhow::Result<(Vec<(RunId, tollgate_agent_core::StoredEvent)>, Vec<RunId>, String)> {
    let (mut events, mut skipped, mut at) = (Vec::new(), Vec::new(), from.to_owned());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let page = store.committed(Some(&at), limit).await?;
        events.extend(page.events.into_iter().filter(|(run, event)| !(Some(run) == pre_start && event.seq == 1)));
        skipped.extend(page.skipped.into_iter().map(|(run, _)| run));
        at = page.next;
        if !page.more && events.len() + skipped.len() >= expected {
            return Ok((events, skipped, at));
        }
        ensure!(std::time::Instant::now() < deadline, "{} of {expected} events in the log", events.len());
        if !page.more {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// The commit log holds every commit made after its start, by this store and by another on the same
/// database, one at a time and many at once: each event once, a run's in seq order, exactly as
/// `events` serves them (sealed data opened), nothing from a refused write, and nothing from before
/// the start but, on PostgreSQL, possibly the commit made just before it. Read again from its end it is empty; a damaged event is passed over and named; a position
/// the store did not give is refused.
pub(crate) async fn the_commit_log_holds_every_commit_once<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.open_with(keyring(&[("k1", 1)])?).await?;
    let before = create_running(&*store, 1, "demo").await?;
    let start = store.committed(None, 100).await?;
    ensure!(start.events.is_empty() && !start.more, "a log read from its end starts empty: {start:?}");

    store
        .append(&before.id, OWNER, vec![event(EventKind::ModelRequest, 1, json!({"messages": 2}))], T0 + 60_000)
        .await?;
    store.append(&before.id, OWNER, vec![], T0 + 61_000).await?;
    let waiting = create_waiting(&*store, 2, &["call_1"], None).await?;
    let stale = event(EventKind::RunCancelled, 1, json!({}));
    let refused =
        store.transition(&waiting.id, Guard::Version(waiting.version + 7), Transition::Cancel, vec![stale], T0);
    ensure!(refused.await.is_err(), "a stale guard is refused");
    let resumed = event(EventKind::RunResumed, 1, json!({"actor": "alice", "secret": "s3"}));
    store
        .transition(
            &waiting.id,
            Guard::Version(waiting.version),
            decide("call_1", Decision::Approve),
            vec![resumed],
            T0,
        )
        .await?;
    let mut tasks = Vec::new();
    for n in 10..34 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move { create_waiting(&*store, n, &["call_1"], None).await }));
    }
    let other = h.open_with(keyring(&[("k1", 1)])?).await?;
    tasks.push(tokio::spawn(async move { create_waiting(&*other, 40, &["call_1"], None).await }));
    for task in tasks {
        task.await??;
    }

    let mut expected = store.events(&before.id, 0, 1000).await?.len() - 1;
    for n in [2, 40].into_iter().chain(10..34) {
        expected += store.events(&id(n), 0, 1000).await?.len();
    }
    for limit in [1, 7, 1000] {
        // On PostgreSQL, `before`'s creation may be read too, while another transaction of the cluster
        // (another test) older than it ran at the start: at least once, never lost.
        let (events, skipped, end) = read_log_after(&*store, &start.next, limit, expected, Some(&before.id)).await?;
        ensure!(events.len() == expected, "limit {limit}: {} events, not {expected}", events.len());
        ensure!(skipped.is_empty(), "nothing is damaged yet: {skipped:?}");
        let mut by_run: std::collections::BTreeMap<RunId, Vec<tollgate_agent_core::StoredEvent>> = Default::default();
        for (run, event) in events {
            by_run.entry(run).or_default().push(event);
        }
        ensure!(by_run.len() == 27, "limit {limit}: {} runs in the log", by_run.len());
        for (run, events) in &by_run {
            let stored = store.events(run, 0, 1000).await?;
            let expected: Vec<_> = if *run == before.id { stored[1..].to_vec() } else { stored };
            ensure!(*events == expected, "limit {limit}, run {run}: logged {events:?}\nstored {expected:?}");
        }
        let again = store.committed(Some(&end), limit).await?;
        ensure!(again.events.is_empty() && !again.more, "read again from its end: {again:?}");
    }

    // A damaged event is passed over, named by its run; the events around it are read.
    h.execute(format!("UPDATE events SET data = 'not json' WHERE run_id = '{}' AND seq = 1", id(11))).await?;
    let (events, skipped, _) = read_log_after(&*store, &start.next, 1000, expected, Some(&before.id)).await?;
    ensure!(skipped == vec![id(11)], "{skipped:?}");
    ensure!(events.iter().any(|(run, e)| *run == id(11) && e.seq == 2), "the run's other event is read");

    // Nonsense, and positions ahead of anything this database gave (a database restored from a backup).
    for nonsense in ["", "x", "1:2", "-5", "abc:def:ghi", "9000000000000", "9000000000000:0:"] {
        let refused = store.committed(Some(nonsense), 10).await;
        ensure!(matches!(refused, Err(StoreError::Corrupt { .. })), "position `{nonsense}`: {refused:?}");
    }
    Ok(())
}

/// A named reader of the log is held by one holder at a time, until its hold ends or is released; its
/// position is stored only by its holder and outlives every hold; 16 racing holders get one hold.
pub(crate) async fn a_log_reader_has_one_holder_at_a_time<H: Harness>(h: &H) -> anyhow::Result<()> {
    use tollgate_agent_core::ReaderHold;
    let store = h.store();
    let held = |position: Option<&str>| ReaderHold::Held { position: position.map(str::to_owned) };
    let elsewhere = |holder: &str, until| ReaderHold::Elsewhere { holder: holder.to_owned(), until };
    ensure!(store.hold_reader("hooks", "a", None, T0 + 10_000, T0).await? == held(None));
    ensure!(store.hold_reader("hooks", "b", Some("x"), T0 + 20_000, T0 + 1).await? == elsewhere("a", T0 + 10_000));
    ensure!(store.hold_reader("hooks", "a", Some("p1"), T0 + 11_000, T0 + 2).await? == held(Some("p1")));
    ensure!(store.hold_reader("hooks", "a", None, T0 + 11_000, T0 + 3).await? == held(Some("p1")), "kept");
    ensure!(store.hold_reader("other", "b", None, T0 + 11_000, T0 + 3).await? == held(None), "names are apart");
    // Once the hold ends, another takes it, with the position as it was.
    ensure!(store.hold_reader("hooks", "b", None, T0 + 30_000, T0 + 11_000).await? == held(Some("p1")));
    ensure!(
        store.hold_reader("hooks", "a", Some("p2"), T0 + 40_000, T0 + 11_001).await? == elsewhere("b", T0 + 30_000)
    );
    ensure!(
        store.hold_reader("hooks", "b", None, T0 + 30_000, T0 + 11_002).await? == held(Some("p1")),
        "a wrote nothing"
    );
    // Only the holder releases.
    store.release_reader("hooks", "a").await?;
    ensure!(store.hold_reader("hooks", "a", None, T0 + 40_000, T0 + 11_003).await? == elsewhere("b", T0 + 30_000));
    store.release_reader("hooks", "b").await?;
    ensure!(store.hold_reader("hooks", "a", None, T0 + 40_000, T0 + 11_004).await? == held(Some("p1")), "released");

    let mut racers = Vec::new();
    for n in 0..16 {
        let store = store.clone();
        racers.push(tokio::spawn(async move {
            store.hold_reader("race", &format!("node-{n}"), Some("p"), T0 + 10_000, T0).await
        }));
    }
    let mut winners = 0;
    for racer in racers {
        if let ReaderHold::Held { .. } = racer.await?? {
            winners += 1;
        }
    }
    ensure!(winners == 1, "{winners} racers hold the reader");
    Ok(())
}

// ---------------------------------------------------------------------------------------------------
// Encryption at rest.

/// Store options with a keyring of `(id, byte)` keys (each key is 32 times its byte), the first sealing.
fn keyring(keys: &[(&str, u8)]) -> anyhow::Result<StoreOptions> {
    let keys = keys.iter().map(|(id, byte)| DataKey::new(*id, [*byte; 32])).collect::<Result<Vec<_>, _>>()?;
    Ok(StoreOptions { data_keys: Some(Arc::new(DataKeys::new(keys)?)), ..StoreOptions::default() })
}

async fn stored_text<H: Harness>(h: &H, column: &str, table: &str, filter: String) -> anyhow::Result<String> {
    h.query_text(format!("SELECT {column} FROM {table} WHERE {filter}")).await
}

/// The error of a read that must fail as undecryptable for `run`, its detail naming `key`.
fn ensure_undecryptable<T: std::fmt::Debug>(
    result: Result<T, StoreError>,
    run: &str,
    key: &str,
    why: &str,
) -> anyhow::Result<()> {
    match result {
        Err(StoreError::Undecryptable { id, detail }) => {
            ensure!(id == run, "the error names run {id}, not {run}");
            ensure!(detail.contains(&format!("`{key}`")) && detail.contains(why), "{detail}");
            Ok(())
        }
        other => anyhow::bail!("expected Undecryptable for {run}, got {other:?}"),
    }
}

/// With data keys, suspensions, decisions and event data are stored sealed and read back as written;
/// the chain (over the plaintext) verifies; an unchanged value is not sealed again; an event's sealed
/// data moved to another event does not open.
pub(crate) async fn encrypted_values_round_trip<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.open_with(keyring(&[("k1", 1)])?).await?;
    let waiting = create_waiting(&*store, 1, &["call_1", "call_2"], Some(T0 + 1_000)).await?;
    let by_id = format!("id = '{}'", waiting.id);
    let sealed_suspension = stored_text(h, "suspension", "runs", by_id.clone()).await?;
    let decided = store
        .transition(
            &waiting.id,
            Guard::Version(waiting.version),
            decide("call_1", Decision::Edit { arguments: json!({"path": "secret-path"}) }),
            vec![event(EventKind::Decision, 1, json!({"call_id": "call_1", "arguments": {"path": "secret-path"}}))],
            T0 + 20,
        )
        .await?;
    ensure!(store.get(&waiting.id).await? == decided, "get returns what the transition returned");
    let listed = store.list(RunQuery { limit: 10, ..Default::default() }).await?;
    ensure!(listed.runs == vec![decided.clone()], "list opens sealed values too");
    ensure!(store.due(T0 + 1_000, 10).await? == vec![decided.clone()], "due opens sealed values too");
    let events = store.events(&waiting.id, 0, 100).await?;
    ensure!(events.len() == 3 && events[2].data["arguments"]["path"] == "secret-path");
    verify_chain_with(&events, decided.last_seq, &decided.last_hash, store.chain_keys())?;
    ensure!(events.iter().all(|e| e.hash.starts_with("hmac:k1:")), "the chain is keyed: {:?}", events[0].hash);

    for column in ["suspension", "decisions"] {
        let stored = stored_text(h, column, "runs", by_id.clone()).await?;
        ensure!(stored.starts_with("enc:v2:k1:"), "runs.{column} is sealed: {stored}");
        ensure!(!stored.contains("call_1") && !stored.contains("secret-path"), "{stored}");
    }
    ensure!(
        stored_text(h, "suspension", "runs", by_id.clone()).await? != sealed_suspension,
        "a decision (a new version) seals the suspension again, bound to the new version"
    );
    for seq in 1..=3 {
        let stored = stored_text(h, "data", "events", format!("run_id = '{}' AND seq = {seq}", waiting.id)).await?;
        ensure!(stored.starts_with("enc:v2:k1:") && !stored.contains("call_1"), "event {seq}: {stored}");
    }
    let sealed_events =
        h.query_i64(format!("SELECT COUNT(*) FROM events WHERE run_id = '{}' AND data LIKE 'enc:v2:k1:%'", waiting.id));
    ensure!(sealed_events.await? == 3);

    h.execute(format!(
        "UPDATE events SET data = (SELECT data FROM events WHERE run_id = '{0}' AND seq = 2)          WHERE run_id = '{0}' AND seq = 3",
        waiting.id
    ))
    .await?;
    ensure_undecryptable(store.events(&waiting.id, 0, 100).await, &waiting.id, "k1", "event 3")?;
    Ok(())
}

/// A store without the key a value names (no keys, another id, or another key under the same id) fails
/// that run's reads with an error naming the run and the key id; other runs still read and list.
pub(crate) async fn a_missing_or_wrong_key_fails_clearly<H: Harness>(h: &H) -> anyhow::Result<()> {
    let sealed = h.open_with(keyring(&[("k1", 1)])?).await?;
    let secret = create_waiting(&*sealed, 1, &["call_1"], None).await?;

    let wrong_key = h.open_with(keyring(&[("k1", 9)])?).await?;
    let other_id = h.open_with(keyring(&[("k2", 2)])?).await?;
    let none = h.store();
    let cases: [(&Arc<dyn RunStore>, &str); 3] =
        [(&wrong_key, "does not decrypt"), (&other_id, "not configured"), (&none, "no data keys configured")];
    for (n, (store, why)) in (2..).zip(cases) {
        // A run each store wrote itself: it reads, whatever the others hold.
        let own = create_waiting(&**store, n, &["call_1"], None).await?;
        ensure_undecryptable(store.get(&secret.id).await, &secret.id, "k1", why)?;
        ensure_undecryptable(store.events(&secret.id, 0, 10).await, &secret.id, "k1", why)?;
        let listed = store.list(RunQuery { limit: 1, ..Default::default() }).await?;
        ensure!(listed.runs == vec![own.clone()], "list shows the run it can read ({why})");
        let listed = store.list(RunQuery { limit: 10, ..Default::default() }).await?;
        ensure!(!listed.runs.iter().any(|r| r.id == secret.id), "list skips the run it cannot read ({why})");
        ensure!(listed.skipped.iter().any(|s| secret.id == *s), "{why}: {:?}", listed.skipped);
        ensure!(store.get(&own.id).await? == own);
        let refused =
            store.transition(&secret.id, Guard::Version(secret.version), Transition::Cancel, vec![], T0 + 30).await;
        ensure_undecryptable(refused, &secret.id, "k1", why)?;
    }
    ensure!(sealed.get(&secret.id).await? == secret, "the right key still reads it, nothing was changed");
    Ok(())
}

/// A new first key seals new values while the old key still opens old ones (and still verifies the
/// hashes it keyed); dropping the old key leaves only the runs it sealed unreadable.
pub(crate) async fn rotating_keys_keeps_old_values_readable<H: Harness>(h: &H) -> anyhow::Result<()> {
    let first = h.open_with(keyring(&[("k1", 1)])?).await?;
    let a = create_waiting(&*first, 1, &["call_1"], None).await?;

    let rotated = h.open_with(keyring(&[("k2", 2), ("k1", 1)])?).await?;
    ensure!(rotated.get(&a.id).await? == a, "the old key still opens run A");
    let a_events = rotated.events(&a.id, 0, 10).await?;
    verify_chain_with(&a_events, a.last_seq, &a.last_hash, rotated.chain_keys())?;
    let b = create_waiting(&*rotated, 2, &["call_1"], None).await?;
    let stored = |run: &str| stored_text(h, "suspension", "runs", format!("id = '{run}'"));
    ensure!(stored(&b.id).await?.starts_with("enc:v2:k2:"), "new values are sealed with the first key");
    ensure!(stored(&a.id).await?.starts_with("enc:v2:k1:"), "reading does not rewrite");
    let b_event = stored_text(h, "data", "events", format!("run_id = '{}' AND seq = 1", b.id)).await?;
    ensure!(b_event.starts_with("enc:v2:k2:"), "{b_event}");

    let only_new = h.open_with(keyring(&[("k2", 2)])?).await?;
    ensure_undecryptable(only_new.get(&a.id).await, &a.id, "k1", "not configured")?;
    ensure!(only_new.get(&b.id).await? == b);
    verify_chain_with(&only_new.events(&b.id, 0, 10).await?, b.last_seq, &b.last_hash, only_new.chain_keys())?;

    // A change to run A under [k2, k1] seals its rewritten row values with k2 (its events keep k1).
    let decided = rotated
        .transition(&a.id, Guard::Version(a.version), decide("call_1", Decision::Approve), vec![], T0 + 40)
        .await?;
    ensure!(stored(&a.id).await?.starts_with("enc:v2:k2:"), "a rewritten run moves to the first key");
    ensure!(only_new.get(&a.id).await? == decided);
    ensure_undecryptable(only_new.events(&a.id, 0, 10).await, &a.id, "k1", "not configured")?;
    Ok(())
}

/// Encryption turned on for a database with plaintext runs: they are refused (as planted plaintext
/// would be) until the seal migration seals them, in batches; then they read, verify (their old events
/// unkeyed, new ones keyed) and go on; a second migration seals nothing.
pub(crate) async fn plain_runs_are_refused_until_sealed<H: Harness>(h: &H) -> anyhow::Result<()> {
    let plain = create_waiting(&*h.store(), 1, &["call_1"], None).await?;
    let done = create_terminal(&*h.store(), 2, RunStatus::Completed, T0 + 5).await?;
    let third = create_waiting(&*h.store(), 3, &["call_1"], None).await?;
    let by_id = format!("id = '{}'", plain.id);
    ensure!(stored_text(h, "suspension", "runs", by_id.clone()).await?.starts_with('{'), "written in plaintext");
    let sealed = h.open_with(keyring(&[("k1", 1)])?).await?;
    ensure_plaintext_refused(sealed.get(&plain.id).await, &plain.id)?;
    ensure_plaintext_refused(sealed.events(&done.id, 0, 10).await, &done.id)?;

    let mut batches = 0;
    let report = h.seal(keyring(&[("k1", 1)])?, 2).await?;
    batches += 1;
    ensure!(report.runs_checked == 3 && report.runs_sealed == 3, "{report:?}");
    ensure!(report.columns_sealed == 4, "two waiting runs' suspensions and (empty) decisions: {report:?}");
    ensure!(report.events_sealed == plain.last_seq + done.last_seq + third.last_seq, "{report:?}");
    ensure!(report.refused.is_empty(), "{report:?}");
    ensure!(stored_text(h, "suspension", "runs", by_id.clone()).await?.starts_with("enc:v2:k1:"));
    let unsealed = h.query_i64("SELECT COUNT(*) FROM events WHERE data NOT LIKE 'enc:v2:%'".to_owned()).await?;
    ensure!(unsealed == 0, "{unsealed} events left unsealed");
    ensure!(sealed.get(&plain.id).await? == plain && sealed.get(&done.id).await? == done);
    verify_chain_with(&sealed.events(&plain.id, 0, 10).await?, plain.last_seq, &plain.last_hash, sealed.chain_keys())?;

    let decided = sealed
        .transition(
            &plain.id,
            Guard::Version(plain.version),
            decide("call_1", Decision::Deny { reason: "no".into() }),
            vec![event(EventKind::Decision, 1, json!({"call_id": "call_1", "action": "deny"}))],
            T0 + 20,
        )
        .await?;
    let events = sealed.events(&plain.id, 0, 10).await?;
    verify_chain_with(&events, decided.last_seq, &decided.last_hash, sealed.chain_keys())?;
    ensure!(!events[0].hash.starts_with("hmac:") && events[2].hash.starts_with("hmac:k1:"), "old unkeyed, new keyed");

    let again = h.seal(keyring(&[("k1", 1)])?, 2).await?;
    batches += 1;
    ensure!(again.runs_checked == 3 && again.runs_sealed == 0 && again.refused.is_empty(), "{again:?} ({batches})");
    Ok(())
}

fn ensure_plaintext_refused<T: std::fmt::Debug>(result: Result<T, StoreError>, run: &str) -> anyhow::Result<()> {
    match result {
        Err(StoreError::Undecryptable { id, detail }) if id == run => {
            ensure!(detail.contains("plaintext") && detail.contains("tollgate seal"), "{detail}");
            Ok(())
        }
        other => anyhow::bail!("plaintext in run {run} must be refused, got {other:?}"),
    }
}

/// A plaintext suspension written by SQL into a sealed run is refused — by `get`, by a decision and
/// by the migration (the run holds sealed values, so the plaintext was planted) — never read as the
/// held turn.
pub(crate) async fn a_planted_plaintext_suspension_is_refused<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.open_with(keyring(&[("k1", 1)])?).await?;
    let waiting = create_waiting(&*store, 1, &["call_1"], None).await?;
    let planted = json!({"schema_version": 1, "calls": ["rm -rf"]}).to_string();
    h.execute(format!("UPDATE runs SET suspension = '{planted}' WHERE id = '{}'", waiting.id)).await?;
    // A store that remembers rows (PostgreSQL) reads the planted row on its next read by id.
    let fresh = h.open_with(keyring(&[("k1", 1)])?).await?;
    for store in [&store, &fresh] {
        ensure_plaintext_refused(store.get(&waiting.id).await, &waiting.id)?;
        let approve = store
            .transition(
                &waiting.id,
                Guard::Version(waiting.version),
                decide("call_1", Decision::Approve),
                vec![],
                T0 + 20,
            )
            .await;
        ensure_plaintext_refused(approve, &waiting.id)?;
    }
    let report = h.seal(keyring(&[("k1", 1)])?, 10).await?;
    ensure!(report.runs_sealed == 0 && report.refused.len() == 1, "{report:?}");
    ensure!(waiting.id == report.refused[0].id && report.refused[0].reason.contains("behind Tollgate's back"));
    ensure_plaintext_refused(fresh.get(&waiting.id).await, &waiting.id)?;
    ensure!(
        h.query_i64(format!("SELECT COUNT(*) FROM events WHERE run_id = '{}' AND kind = 'decision'", waiting.id))
            .await?
            == 0,
        "no decision was recorded on the planted turn"
    );
    Ok(())
}

/// The suspension a run held at an earlier version, put back by SQL after the run moved on, does not
/// open (its associated data names the older version), so the finished call is not offered again.
pub(crate) async fn an_older_sealed_suspension_does_not_open<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.open_with(keyring(&[("k1", 1)])?).await?;
    let waiting = create_waiting(&*store, 1, &["call_1"], None).await?;
    let by_id = format!("id = '{}'", waiting.id);
    let first_turn = stored_text(h, "suspension", "runs", by_id.clone()).await?;
    let resumed = store
        .transition(
            &waiting.id,
            Guard::Version(waiting.version),
            Transition::Vote {
                votes: vec![(
                    "call_1".into(),
                    Vote { decision: Decision::Approve, actor: "alice".into(), at: T0 + 20 },
                )],
                resume: Some(lease(OWNER, T0 + 60_000)),
                remember: Vec::new(),
            },
            vec![event(EventKind::ToolStarted, 1, json!({"call_id": "call_1", "idempotency_key": "k:call_1"}))],
            T0 + 20,
        )
        .await?;
    let second = store
        .transition(
            &waiting.id,
            Guard::Lease(OWNER.into()),
            suspend(&["call_2"], None),
            vec![event(EventKind::ApprovalRequested, 2, json!({"calls": ["call_2"]}))],
            T0 + 30,
        )
        .await?;
    ensure!(second.version > resumed.version && resumed.version > waiting.version);
    h.execute(format!("UPDATE runs SET suspension = '{first_turn}', decisions = NULL WHERE {by_id}")).await?;
    let fresh = h.open_with(keyring(&[("k1", 1)])?).await?;
    let replayed = fresh.get(&waiting.id).await;
    ensure_undecryptable(replayed, &waiting.id, "k1", "does not decrypt")?;
    let approve = fresh
        .transition(&waiting.id, Guard::Version(second.version), decide("call_1", Decision::Approve), vec![], T0 + 40)
        .await;
    ensure_undecryptable(approve, &waiting.id, "k1", "does not decrypt")?;
    let started =
        h.query_i64(format!("SELECT COUNT(*) FROM events WHERE run_id = '{}' AND kind = 'tool_started'", waiting.id));
    ensure!(started.await? == 1, "call_1 started once");
    Ok(())
}

/// A v1 envelope as earlier builds sealed a run's column (associated data: `tollgate:v1`, run, column).
fn seal_v1(key: [u8; 32], run: &str, column: &str, plain: &str) -> anyhow::Result<String> {
    use aes_gcm::aead::{Aead, KeyInit, Payload};
    use base64::Engine;
    let cipher = aes_gcm::Aes256Gcm::new(&key.into());
    let nonce = [3u8; 12];
    let aad = format!("tollgate:v1\0{run}\0{column}");
    let sealed = cipher
        .encrypt(aes_gcm::Nonce::from_slice(&nonce), Payload { msg: plain.as_bytes(), aad: aad.as_bytes() })
        .map_err(|_| anyhow::anyhow!("v1 test seal"))?;
    let bytes = [nonce.as_slice(), &sealed].concat();
    Ok(format!("enc:v1:k1:{}", base64::engine::general_purpose::STANDARD.encode(bytes)))
}

/// A run's column sealed as `enc:v1` (no version bound) is refused until the migration seals it as v2;
/// then it reads.
pub(crate) async fn a_v1_sealed_column_is_refused_until_sealed_again<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.open_with(keyring(&[("k1", 1)])?).await?;
    let waiting = create_waiting(&*h.store(), 1, &["call_1"], None).await?;
    let plain_turn = stored_text(h, "suspension", "runs", format!("id = '{}'", waiting.id)).await?;
    let v1 = seal_v1([1; 32], &waiting.id, "runs.suspension", &plain_turn)?;
    h.execute(format!("UPDATE runs SET suspension = '{v1}' WHERE id = '{}'", waiting.id)).await?;
    match store.get(&waiting.id).await {
        Err(StoreError::Undecryptable { detail, .. }) if detail.contains("enc:v1") => {}
        other => anyhow::bail!("a v1 column must be refused, got {other:?}"),
    }
    let report = h.seal(keyring(&[("k1", 1)])?, 10).await?;
    ensure!(report.runs_sealed == 1 && report.columns_sealed == 2 && report.events_sealed == 2, "{report:?}");
    let fresh = h.open_with(keyring(&[("k1", 1)])?).await?;
    ensure!(fresh.get(&waiting.id).await? == waiting);
    Ok(())
}

/// A keyed chain rewritten by SQL without the key does not pass: an edited event whose hashes are
/// recomputed with plain sha256 is a downgrade at its seq, and a whole log recomputed that way no longer
/// opens (each event's data is bound to its chain key); a payload replaced by plaintext is refused.
pub(crate) async fn a_keyed_chain_rewritten_without_the_key_fails<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.open_with(keyring(&[("k1", 1)])?).await?;
    let waiting = create_waiting(&*store, 1, &["call_1"], None).await?;
    let events = store.events(&waiting.id, 0, 10).await?;
    let keys = store.chain_keys();
    verify_chain_with(&events, waiting.last_seq, &waiting.last_hash, keys)?;

    // Event 2's kind changed, its hash and the head recomputed with sha256 (its data left sealed).
    let mut forged = events.clone();
    forged[1].kind = EventKind::RunResumed;
    forged[1].hash = event_hash(&forged[0].hash, 2, &forged[1].at, forged[1].kind, forged[1].round, &forged[1].data);
    let by_event = |seq: u64| format!("run_id = '{}' AND seq = {seq}", waiting.id);
    h.execute(format!("UPDATE events SET kind = 'run_resumed', hash = '{}' WHERE {}", forged[1].hash, by_event(2)))
        .await?;
    h.execute(format!("UPDATE runs SET last_hash = '{}' WHERE id = '{}'", forged[1].hash, waiting.id)).await?;
    let fresh = h.open_with(keyring(&[("k1", 1)])?).await?;
    let run = fresh.get(&waiting.id).await?;
    match fresh.events(&waiting.id, 0, 10).await {
        // The data is bound to the key its hash named: with the hash unkeyed it no longer opens.
        Err(StoreError::Undecryptable { id, detail }) => ensure!(waiting.id == id && detail.contains("event 2")),
        Ok(read) => {
            let verdict = verify_chain_with(&read, run.last_seq, &run.last_hash, fresh.chain_keys());
            ensure!(verdict == Err(ChainBreak::Downgrade { seq: 2 }), "{verdict:?}");
        }
        Err(other) => anyhow::bail!("{other:?}"),
    }
    // Even with the data opened as it was, the chain names the downgrade.
    let verdict = verify_chain_with(&forged, run.last_seq, &run.last_hash, fresh.chain_keys());
    ensure!(verdict == Err(ChainBreak::Downgrade { seq: 2 }), "{verdict:?}");

    // A payload replaced by plaintext is refused, whatever its hash says.
    let payload = json!({"calls": ["call_9"]});
    let hash = event_hash(&forged[0].hash, 2, &forged[1].at, EventKind::ApprovalRequested, 1, &payload);
    h.execute(format!(
        "UPDATE events SET kind = 'approval_requested', data = '{payload}', hash = '{hash}' WHERE {}",
        by_event(2)
    ))
    .await?;
    ensure_plaintext_refused(fresh.events(&waiting.id, 0, 10).await, &waiting.id)?;
    Ok(())
}

/// Below privacy level `full` the SQLite store zeroes what it deletes: a suspension overwritten and a
/// run purged leave none of their text in the file (after a checkpoint). PostgreSQL is not covered
/// (dead tuples stay until VACUUM, see docs/configuration.md), so there the case only checks that the
/// option opens the store.
pub(crate) async fn secure_delete_leaves_no_deleted_text<H: Harness>(h: &H) -> anyhow::Result<()> {
    let options = StoreOptions { secure_delete: true, ..StoreOptions::default() };
    let store = h.open_with(options).await?;
    let marker = "the-secret-argument-8c41e7";
    let run = create_running(&*store, 1, "demo").await?;
    let requested = event(EventKind::ApprovalRequested, 1, json!({"calls": [marker]}));
    let waiting = store
        .transition(&run.id, Guard::Lease(OWNER.into()), suspend(&[marker], None), vec![requested], T0 + 10)
        .await?;
    store.transition(&waiting.id, Guard::Version(waiting.version), Transition::Cancel, vec![], T0 + 20).await?;
    ensure!(h.file_contains(marker).await? != Some(false), "the text must be in the file before the purge");
    let purged = store.purge(T0 + 1_000, T0 + 1_000, 10).await?;
    ensure!(purged == 1, "{purged} runs purged");
    ensure!(h.file_contains(marker).await? != Some(true), "the purged text is still in the database file");
    Ok(())
}
/// Defines one `#[tokio::test]` per contract case, each on a fresh harness from `$setup` (an async
/// fn returning `anyhow::Result<Option<H>>`; `None` skips) and torn down by `$teardown` even when
/// the case fails.
#[macro_export]
macro_rules! contract_tests {
    ($setup:path, $teardown:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() -> anyhow::Result<()> {
                let Some(harness) = $setup().await? else { return Ok(()) };
                let harness = std::sync::Arc::new(harness);
                let running = harness.clone();
                let outcome = tokio::spawn(async move { $crate::contract::$case(&*running).await }).await;
                $teardown(&harness).await;
                match outcome {
                    Ok(result) => result,
                    Err(join) => std::panic::resume_unwind(join.into_panic()),
                }
            }
        )*
    };
}

/// `probe_write` commits (its one row is there, rewritten each time) and a sound database checks clean
/// at both depths.
pub(crate) async fn the_write_probe_commits_and_a_sound_database_checks_clean<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    create_running(&*store, 1, "demo").await?;
    store.probe_write().await?;
    let first = h.query_i64("SELECT MAX(probed_at) FROM health".to_owned()).await?;
    store.probe_write().await?;
    ensure!(h.query_i64("SELECT COUNT(*) FROM health".to_owned()).await? == 1);
    ensure!(h.query_i64("SELECT MAX(probed_at) FROM health".to_owned()).await? >= first);
    ensure!(store.check_integrity(IntegrityCheck::Quick).await?.is_empty());
    ensure!(store.check_integrity(IntegrityCheck::Full).await?.is_empty());
    Ok(())
}

/// Every case, for `contract_tests!`.
#[macro_export]
macro_rules! all_contract_tests {
    ($setup:path, $teardown:path) => {
        $crate::contract_tests!($setup, $teardown;
            create_get_and_duplicate,
            a_waiting_run_round_trips,
            metadata_round_trips_and_never_changes,
            trace_round_trips_and_never_changes,
            list_filters_and_pages,
            resolve_prefix_finds_one_run,
            legal_transitions_walk_the_cycle,
            illegal_transitions_change_nothing,
            every_transition_from_every_status_matches_apply,
            quorum_votes_are_compare_and_sets_on_the_run,
            version_guard_conflicts,
            lease_guard_and_append,
            events_are_numbered_and_chained,
            events_after_reads_every_page,
            an_edited_event_breaks_the_chain,
            due_finds_expired_deadlines_and_leases,
            waiting_changed_reads_a_window_of_waiting_runs,
            purge_windows_and_batches,
            counts_by_status,
            a_newer_schema_is_refused,
            a_corrupt_row_spoils_only_its_run,
            concurrent_writes_fail_alone,
            a_write_failing_midway_leaves_no_trace,
            exactly_one_of_32_racing_claims_wins,
            queued_runs_are_claimed_oldest_first_and_released_back,
            new_runs_and_resumes_are_claimed_in_the_order_they_were_queued,
            queued_runs_that_cannot_be_read_are_passed_over,
            racing_workers_of_two_nodes_never_claim_a_run_twice,
            racing_appends_and_a_transition_make_one_chain,
            a_commit_tap_sees_each_commit_as_stored,
            the_commit_log_holds_every_commit_once,
            a_log_reader_has_one_holder_at_a_time,
            a_renewal_before_a_takeover_wins,
            encrypted_values_round_trip,
            a_missing_or_wrong_key_fails_clearly,
            rotating_keys_keeps_old_values_readable,
            plain_runs_are_refused_until_sealed,
            a_planted_plaintext_suspension_is_refused,
            an_older_sealed_suspension_does_not_open,
            a_v1_sealed_column_is_refused_until_sealed_again,
            a_keyed_chain_rewritten_without_the_key_fails,
            secure_delete_leaves_no_deleted_text,
            the_write_probe_commits_and_a_sound_database_checks_clean,
            grants_are_stored_read_and_listed_newest_first,
            a_page_of_grants_holds_at_most_1000,
            revoking_a_grant_is_a_compare_and_set,
            one_of_racing_revocations_revokes,
            the_grants_for_a_run_are_those_in_force_oldest_first,
            a_grant_counts_its_uses,
            the_version_of_an_agents_grants_moves_with_each_change,
            a_vote_commits_the_grants_it_remembers,
            a_vote_that_fails_commits_no_grant,
            of_two_racing_votes_only_the_winners_grant_exists,
            a_corrupt_grant_row_is_a_corrupt_database,
        );
    };
}
