//! The contract of [`Grants`](tollgate_agent_core::Grants): standing approvals stored, listed, revoked
//! once, read at the gate, counted, and made with a vote in the vote's own transaction.

use super::{Harness, OWNER, T0, create_running, create_waiting, held, id};
use anyhow::{Context, ensure};
use serde_json::{Value, json};
use std::sync::Arc;
use tollgate_agent_core::grant::{GrantMatch, GrantQuery, GrantRecord, GrantStatus};
use tollgate_agent_core::run::{Millis, RunStatus, Transition, Vote};
use tollgate_agent_core::store::{Conflict, Guard, StoreError};
use tollgate_agent_core::suspension::Decision;
use tollgate_agent_core::transcript::Usage;
use tollgate_agent_core::{Actor, GrantId, GrantScope, Requirement, RunId};

/// A UUIDv7-shaped grant id; `n` orders them like creation time does.
fn grant_id(n: u64) -> GrantId {
    GrantId::from(format!("01980000-0000-7000-9000-{n:012x}"))
}

/// Grant `n` of `agent` for `tool` (scope agent, or run `run`), made at `T0 + n`, expiring at `expires_at`.
fn grant(n: u64, agent: &str, tool: &str, run: Option<&RunId>, expires_at: Millis) -> anyhow::Result<GrantRecord> {
    let Value::Object(pattern) = json!({"/path": "notes/*", "/mode": 420}) else { anyhow::bail!("not an object") };
    Ok(GrantRecord {
        id: grant_id(n),
        agent: agent.to_owned(),
        tool: tool.to_owned(),
        matcher: GrantMatch::new(pattern)?,
        scope: if run.is_some() { GrantScope::Run } else { GrantScope::Agent },
        run_id: run.cloned(),
        reason: n.is_multiple_of(2).then(|| format!("reason {n}")),
        created_by: Actor::from("alice"),
        created_at: T0 + i64::try_from(n)?,
        expires_at,
        revoked: None,
        uses: 0,
    })
}

/// The ids of a list of grants, in order.
fn ids(grants: &[GrantRecord]) -> Vec<GrantId> {
    grants.iter().map(|grant| grant.id.clone()).collect()
}

fn ids_of(ns: &[u64]) -> Vec<GrantId> {
    ns.iter().map(|n| grant_id(*n)).collect()
}

const LATER: Millis = T0 + 3_600_000;

/// The grants in force for run `run` of `agent` at `now`, as a gate reads them: the agent's active
/// grants that cover the run.
async fn in_force(
    store: &dyn tollgate_agent_core::RunStore,
    agent: &str,
    run: &RunId,
    now: Millis,
) -> Result<Vec<GrantRecord>, StoreError> {
    let active = store.active_grants(agent, now).await?;
    Ok(active.into_iter().filter(|grant| grant.covers(agent, run)).collect())
}

/// A `tool_started` event for `call`, allowed by `grant` (or by no grant).
fn started_by_grant(call: &str, grant: Option<&GrantId>) -> tollgate_agent_core::NewEvent {
    let data = json!({"call_id": call, "tool": "fs_write", "arguments": {}, "gate": "ask", "grant": grant});
    tollgate_agent_core::NewEvent { at: T0 + 5, kind: tollgate_agent_core::EventKind::ToolStarted, round: 1, data }
}

/// A grant comes back exactly as stored, new (its uses 0, not revoked, whatever was given); an id taken
/// is a database error; an unknown id is `GrantNotFound`. The listing is newest first, filtered by
/// agent, tool and activity, paged by cursor, its limit clamped to 1..=1000.
pub(crate) async fn grants_are_stored_read_and_listed_newest_first<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let given =
        GrantRecord { uses: 9, revoked: Some((T0, Actor::from("bob"))), ..grant(1, "notes", "fs_write", None, LATER)? };
    let created = store.create_grant(given.clone()).await?;
    ensure!(created == GrantRecord { uses: 0, revoked: None, ..given }, "stored new: {created:?}");
    ensure!(store.grant(&grant_id(1)).await? == created);
    let run = id(7);
    let scoped = store.create_grant(grant(2, "notes", "fs_delete", Some(&run), LATER)?).await?;
    ensure!(store.grant(&grant_id(2)).await? == scoped && scoped.run_id == Some(run));
    let again = store.create_grant(grant(1, "other", "shell", None, LATER)?).await;
    ensure!(matches!(again, Err(StoreError::Database(_))), "an id taken: {again:?}");
    ensure!(store.grant(&grant_id(1)).await? == created, "the first keeps its id");
    let unknown = store.grant(&grant_id(99)).await;
    ensure!(unknown == Err(StoreError::GrantNotFound(grant_id(99))), "{unknown:?}");

    store.create_grant(grant(3, "notes", "fs_write", None, T0 + 100)?).await?; // expires
    store.create_grant(grant(4, "pay", "fs_write", None, LATER)?).await?;
    store.create_grant(grant(5, "notes", "fs_write", None, LATER)?).await?;
    store.revoke_grant(&grant_id(5), &Actor::from("bob"), T0 + 50).await?;
    store.create_grant(grant(6, "notes", "shell", None, LATER)?).await?;

    let list = |agent: Option<&str>, tool: Option<&str>, active_at: Option<Millis>| GrantQuery {
        agent: agent.map(str::to_owned),
        tool: tool.map(str::to_owned),
        active_at,
        limit: 100,
        cursor: None,
    };
    let cases: [(GrantQuery, &[u64]); 7] = [
        (list(None, None, None), &[6, 5, 4, 3, 2, 1]),
        (list(Some("notes"), None, None), &[6, 5, 3, 2, 1]),
        (list(None, Some("fs_write"), None), &[5, 4, 3, 1]),
        (list(Some("notes"), Some("fs_write"), None), &[5, 3, 1]),
        (list(None, None, Some(T0 + 100)), &[6, 4, 2, 1]),
        (list(None, None, Some(T0 + 99)), &[6, 4, 3, 2, 1]),
        (list(Some("notes"), Some("fs_write"), Some(T0 + 100)), &[1]),
    ];
    for (query, expected) in cases {
        let page = store.list_grants(query.clone()).await?;
        ensure!(ids(&page.grants) == ids_of(expected), "{query:?}: {:?}", ids(&page.grants));
        ensure!(page.next_cursor.is_none(), "{query:?}: one page");
    }
    let listed = store.list_grants(list(None, None, None)).await?.grants;
    ensure!(listed.iter().any(|g| g.revoked == Some((T0 + 50, Actor::from("bob")))), "revocations listed");
    ensure!(listed.last() == Some(&created), "listed as read");

    // Pages of two, active or not, then active only: every grant once, in order, and the last page says so.
    for (active_at, expected) in [(None, vec![6, 5, 4, 3, 2, 1]), (Some(T0 + 100), vec![6, 4, 2, 1])] {
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let page = store.list_grants(GrantQuery { active_at, limit: 2, cursor, ..Default::default() }).await?;
            ensure!(page.grants.len() <= 2, "{page:?}");
            seen.extend(ids(&page.grants));
            match page.next_cursor {
                Some(next) => {
                    ensure!(Some(next.as_str()) == seen.last().map(GrantId::as_str), "the cursor is the last id");
                    cursor = Some(next);
                }
                None => break,
            }
        }
        ensure!(seen == ids_of(&expected), "{active_at:?}: {seen:?}");
    }
    let one = store.list_grants(GrantQuery { limit: 0, ..Default::default() }).await?;
    ensure!(ids(&one.grants) == ids_of(&[6]) && one.next_cursor.as_deref() == Some(grant_id(6).as_str()), "{one:?}");
    let all = store.list_grants(GrantQuery { limit: 5_000, ..Default::default() }).await?;
    ensure!(all.grants.len() == 6 && all.next_cursor.is_none());
    Ok(())
}

/// More than 1000 grants: a page holds at most 1000, and the next page the rest.
pub(crate) async fn a_page_of_grants_holds_at_most_1000<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    for n in 1..=1_001 {
        store.create_grant(grant(n, "notes", "fs_write", None, LATER)?).await?;
    }
    let first = store.list_grants(GrantQuery { limit: u32::MAX, ..Default::default() }).await?;
    ensure!(first.grants.len() == 1_000 && first.grants.first().map(|g| &g.id) == Some(&grant_id(1_001)));
    let rest =
        store.list_grants(GrantQuery { limit: u32::MAX, cursor: first.next_cursor, ..Default::default() }).await?;
    ensure!(ids(&rest.grants) == ids_of(&[1]) && rest.next_cursor.is_none(), "{:?}", ids(&rest.grants));
    Ok(())
}

/// Revoking is a compare-and-set on an active grant: it answers the grant revoked (and stores it so);
/// a grant already revoked is `GrantClosed` revoked (even once expired too), one past its expiry
/// `GrantClosed` expired (the expiry is exclusive), an unknown one `GrantNotFound`; a refused revocation
/// changes nothing.
pub(crate) async fn revoking_a_grant_is_a_compare_and_set<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let expires_at = T0 + 1_000;
    let active = store.create_grant(grant(1, "notes", "fs_write", None, expires_at)?).await?;
    let bob = Actor::from("bob");
    let revoked = store.revoke_grant(&active.id, &bob, T0 + 10).await?;
    ensure!(revoked == GrantRecord { revoked: Some((T0 + 10, bob.clone())), ..active.clone() }, "{revoked:?}");
    ensure!(store.grant(&active.id).await? == revoked);
    for at in [T0 + 11, expires_at + 5] {
        let twice = store.revoke_grant(&active.id, &Actor::from("carol"), at).await;
        let closed = StoreError::GrantClosed { id: active.id.clone(), status: GrantStatus::Revoked };
        ensure!(twice == Err(closed), "revoked beats expired at {at}: {twice:?}");
    }
    ensure!(store.grant(&active.id).await? == revoked, "a refused revocation changes nothing");

    let expiring = store.create_grant(grant(2, "notes", "fs_write", None, expires_at)?).await?;
    let late = store.revoke_grant(&expiring.id, &bob, expires_at).await;
    ensure!(late == Err(StoreError::GrantClosed { id: expiring.id.clone(), status: GrantStatus::Expired }), "{late:?}");
    ensure!(store.grant(&expiring.id).await? == expiring, "an expired grant is left as it was");
    let in_time = store.revoke_grant(&expiring.id, &bob, expires_at - 1).await?;
    ensure!(in_time.revoked == Some((expires_at - 1, bob.clone())));

    let unknown = store.revoke_grant(&grant_id(99), &bob, T0).await;
    ensure!(unknown == Err(StoreError::GrantNotFound(grant_id(99))), "{unknown:?}");
    Ok(())
}

/// 16 people revoke one grant at once: exactly one revokes it, every other learns it is revoked, and the
/// grant names the one who did.
pub(crate) async fn one_of_racing_revocations_revokes<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let target = store.create_grant(grant(1, "notes", "fs_write", None, LATER)?).await?;
    let start = Arc::new(tokio::sync::Barrier::new(16));
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (store, start, id) = (store.clone(), start.clone(), target.id.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            store.revoke_grant(&id, &Actor::from(format!("revoker-{i}")), T0 + 10).await
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        match task.await? {
            Ok(revoked) => winners.push(revoked),
            Err(StoreError::GrantClosed { status: GrantStatus::Revoked, .. }) => {}
            Err(other) => anyhow::bail!("a losing revocation must find the grant revoked, got {other:?}"),
        }
    }
    ensure!(winners.len() == 1, "exactly one revocation, got {}", winners.len());
    ensure!(store.grant(&target.id).await? == winners[0]);
    Ok(())
}

/// The grants in force for a run: the agent's, active at the time asked (not revoked, not yet expired),
/// of scope agent or of scope run for this run, oldest first.
pub(crate) async fn the_grants_for_a_run_are_those_in_force_oldest_first<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let (mine, theirs) = (id(1), id(2));
    store.create_grant(grant(1, "notes", "fs_write", None, LATER)?).await?;
    store.create_grant(grant(2, "notes", "fs_write", Some(&mine), LATER)?).await?;
    store.create_grant(grant(3, "notes", "shell", Some(&theirs), LATER)?).await?;
    store.create_grant(grant(4, "other", "fs_write", None, LATER)?).await?;
    store.create_grant(grant(5, "notes", "fs_write", None, T0 + 100)?).await?;
    store.create_grant(grant(6, "notes", "fs_write", None, LATER)?).await?;
    store.revoke_grant(&grant_id(6), &Actor::from("bob"), T0 + 1).await?;
    store.create_grant(grant(7, "notes", "fs_delete", Some(&mine), T0 + 100)?).await?;
    store.create_grant(grant(8, "notes", "fs_write", None, LATER)?).await?;

    let cases: [(&str, &RunId, Millis, &[u64]); 6] = [
        ("notes", &mine, T0 + 99, &[1, 2, 5, 7, 8]),
        ("notes", &mine, T0 + 100, &[1, 2, 8]),
        ("notes", &theirs, T0 + 100, &[1, 3, 8]),
        ("notes", &id(3), T0, &[1, 5, 8]),
        ("other", &mine, T0, &[4]),
        ("nobody", &mine, T0, &[]),
    ];
    for (agent, run, now, expected) in cases {
        let found = in_force(&*store, agent, run, now).await?;
        ensure!(ids(&found) == ids_of(expected), "{agent} {run} at {now}: {:?}", ids(&found));
        ensure!(found.iter().all(|g| g.covers(agent, run) && g.status(now) == GrantStatus::Active));
    }
    ensure!(in_force(&*store, "notes", &mine, LATER).await?.is_empty(), "all expired by then");
    ensure!(
        store.active_grants("notes", T0).await?.len() == 6,
        "every scope: {:?}",
        store.active_grants("notes", T0).await?
    );
    Ok(())
}

/// A grant's uses are counted by the write that commits a `tool_started` naming it, in that write's
/// transaction: each such event once (appended, or with a transition such as a resume's claim), none
/// for a start without a grant or for a write that does not commit; a grant gone is no error.
pub(crate) async fn a_grant_counts_its_uses<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let counted = store.create_grant(grant(1, "notes", "fs_write", None, LATER)?).await?;
    let other = store.create_grant(grant(2, "notes", "fs_write", None, LATER)?).await?;
    let run = create_running(&*store, 1, "notes").await?;
    let (gone, mine) = (grant_id(99), Some(&counted.id));
    store.append(&run.id, OWNER, vec![started_by_grant("c1", mine), started_by_grant("c2", mine)], LATER).await?;
    store
        .append(&run.id, OWNER, vec![started_by_grant("c3", None), started_by_grant("c4", Some(&gone))], LATER)
        .await?;
    // A write refused (another owner's lease) counts nothing.
    let refused = store.append(&run.id, "someone else", vec![started_by_grant("c5", mine)], LATER).await;
    ensure!(refused.is_err(), "{refused:?}");
    ensure!(store.grant(&counted.id).await?.uses == 2, "{:?}", store.grant(&counted.id).await?);
    ensure!(store.grant(&other.id).await? == other, "another grant is left alone");
    // Counted with a transition too (a resume's claim commits the first start with it).
    let mut held = held(&["call_1"], None);
    held.approvals.clear();
    let suspend = Transition::Suspend { held, iterations: 1, usage: Usage::default() };
    let suspended = store
        .transition(&run.id, Guard::Lease(OWNER.into()), suspend, vec![started_by_grant("c6", mine)], T0 + 10)
        .await?;
    ensure!(store.grant(&counted.id).await?.uses == 3, "with a transition: {:?}", store.grant(&counted.id).await?);
    let stale = Transition::Suspend { held: self::held(&["call_1"], None), iterations: 1, usage: Usage::default() };
    let refused = store
        .transition(&run.id, Guard::Version(suspended.version - 1), stale, vec![started_by_grant("c7", mine)], T0 + 11)
        .await;
    ensure!(refused.is_err(), "{refused:?}");
    ensure!(store.grant(&counted.id).await?.uses == 3, "a refused transition counts nothing");
    // And with a run's creation (a first segment whose held turn a grant cleared); a duplicate counts nothing.
    let born = super::running_run(2, "notes");
    let first = vec![super::started(&born), started_by_grant("c8", mine)];
    store.create(born.clone(), first.clone()).await?;
    ensure!(store.grant(&counted.id).await?.uses == 4, "with a creation: {:?}", store.grant(&counted.id).await?);
    ensure!(store.create(born, first).await.is_err(), "a duplicate");
    ensure!(store.grant(&counted.id).await?.uses == 4, "a duplicate creation counts nothing");
    // A revoked grant keeps its count.
    let revoked = store.revoke_grant(&counted.id, &Actor::from("bob"), T0 + 1).await?;
    ensure!(revoked.uses == 4);
    Ok(())
}

/// The version of an agent's grants is 0 before any, and moves with every grant of the agent made (on
/// its own or with a vote) or revoked, never with another agent's, a use counted or a revocation refused.
pub(crate) async fn the_version_of_an_agents_grants_moves_with_each_change<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    ensure!(store.grants_version("demo").await? == 0);
    store.create_grant(grant(1, "demo", "fs_write", None, LATER)?).await?;
    let first = store.grants_version("demo").await?;
    ensure!(first > 0);
    store.create_grant(grant(2, "other", "fs_write", None, LATER)?).await?;
    ensure!(store.grants_version("demo").await? == first, "another agent's grant");
    let waiting = create_waiting(&*store, 1, &["call_1"], None).await?;
    let vote = approve_remembering("call_1", "alice", vec![grant(3, "demo", "shell", None, LATER)?]);
    store.transition(&waiting.id, Guard::Version(waiting.version), vote, vec![], T0 + 20).await?;
    let remembered = store.grants_version("demo").await?;
    ensure!(remembered > first, "a grant made with a vote");
    let run = create_running(&*store, 2, "demo").await?;
    store.append(&run.id, OWNER, vec![started_by_grant("c1", Some(&grant_id(1)))], LATER).await?;
    ensure!(store.grants_version("demo").await? == remembered, "a use counted");
    store.revoke_grant(&grant_id(1), &Actor::from("bob"), T0 + 30).await?;
    let revoked = store.grants_version("demo").await?;
    ensure!(revoked > remembered, "a revocation");
    ensure!(store.revoke_grant(&grant_id(1), &Actor::from("bob"), T0 + 31).await.is_err());
    ensure!(store.grants_version("demo").await? == revoked, "a revocation refused");
    Ok(())
}

/// A vote by `actor` approving `call`, remembering `grants`.
fn approve_remembering(call: &str, actor: &str, grants: Vec<GrantRecord>) -> Transition {
    Transition::Vote {
        votes: vec![(call.into(), Vote { decision: Decision::Approve, actor: actor.into(), at: T0 + 20 })],
        resume: None,
        remember: grants,
    }
}

/// The same vote without the grants.
fn without_grants(transition: &Transition) -> anyhow::Result<Transition> {
    match transition {
        Transition::Vote { votes, resume, .. } => {
            Ok(Transition::Vote { votes: votes.clone(), resume: resume.clone(), remember: Vec::new() })
        }
        other => anyhow::bail!("not a vote: {other:?}"),
    }
}

/// A vote that remembers commits its grants with it (new: uses 0, not revoked), and the run is exactly
/// as the same vote would leave it without them; a vote that claims the resume remembers too.
pub(crate) async fn a_vote_commits_the_grants_it_remembers<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let waiting = create_waiting(&*store, 1, &["call_1"], None).await?;
    let twin = create_waiting(&*store, 2, &["call_1"], None).await?;
    let given = GrantRecord { uses: 3, ..grant(1, "demo", "fs_write", Some(&waiting.id), LATER)? };
    let remembered = vec![given.clone(), grant(2, "demo", "shell", None, LATER)?];
    let vote = approve_remembering("call_1", "alice", remembered);
    let decided = store.transition(&waiting.id, Guard::Version(waiting.version), vote.clone(), vec![], T0 + 20).await?;
    ensure!(store.get(&waiting.id).await? == decided);
    let plain =
        store.transition(&twin.id, Guard::Version(twin.version), without_grants(&vote)?, vec![], T0 + 20).await?;
    ensure!(
        (decided.version, decided.status(), decided.held_turn()) == (plain.version, plain.status(), plain.held_turn()),
        "the grants change nothing of the run:\n{decided:?}\n{plain:?}"
    );
    ensure!(store.grant(&grant_id(1)).await? == GrantRecord { uses: 0, ..given });
    ensure!(store.grant(&grant_id(2)).await?.tool == "shell");
    let found = in_force(&*store, "demo", &waiting.id, T0 + 30).await?;
    ensure!(ids(&found) == ids_of(&[1, 2]), "{:?}", ids(&found));

    // A quorum's second approval claims the resume and remembers.
    let run = create_running(&*store, 3, "demo").await?;
    let mut held = held(&["call_1"], None);
    held.approvals[0].requirement = Requirement::new(std::num::NonZeroU32::new(2).context("two")?);
    let suspend = Transition::Suspend { held, iterations: 1, usage: Usage::default() };
    let waiting = store.transition(&run.id, Guard::Lease(OWNER.into()), suspend, vec![], T0 + 10).await?;
    let first = approve_remembering("call_1", "alice", vec![grant(3, "demo", "fs_write", None, LATER)?]);
    let half = store.transition(&run.id, Guard::Version(waiting.version), first, vec![], T0 + 20).await?;
    let Transition::Vote { votes, .. } = approve_remembering("call_1", "bob", Vec::new()) else { unreachable!() };
    let second = Transition::Vote {
        votes,
        resume: Some(tollgate_agent_core::run::Lease { owner: "node-r".into(), expires_at: T0 + 90_000 }),
        remember: vec![grant(4, "demo", "fs_write", Some(&run.id), LATER)?],
    };
    let resumed = store.transition(&run.id, Guard::Version(half.version), second, vec![], T0 + 21).await?;
    ensure!(resumed.status() == RunStatus::Running && store.get(&run.id).await? == resumed);
    let found = in_force(&*store, "demo", &run.id, T0 + 30).await?;
    ensure!(ids(&found) == ids_of(&[2, 3, 4]), "{:?}", ids(&found));
    Ok(())
}

/// A vote that does not commit makes no grant: a stale guard, a vote the approval refuses, a run that is
/// not there. And a grant that cannot be written (its id taken) fails the vote with it: the run is left
/// as it was.
pub(crate) async fn a_vote_that_fails_commits_no_grant<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let waiting = create_waiting(&*store, 1, &["call_1", "call_2"], None).await?;
    let first = approve_remembering("call_1", "alice", vec![grant(1, "demo", "fs_write", None, LATER)?]);
    let decided = store.transition(&waiting.id, Guard::Version(waiting.version), first, vec![], T0 + 20).await?;

    let stale = approve_remembering("call_2", "alice", vec![grant(2, "demo", "fs_write", None, LATER)?]);
    let refused = store.transition(&waiting.id, Guard::Version(waiting.version), stale, vec![], T0 + 21).await;
    ensure!(
        matches!(refused, Err(StoreError::Conflict { conflict: Conflict::StaleVersion { .. }, .. })),
        "{refused:?}"
    );
    let again = approve_remembering("call_1", "alice", vec![grant(3, "demo", "fs_write", None, LATER)?]);
    let refused = store.transition(&waiting.id, Guard::Version(decided.version), again, vec![], T0 + 21).await;
    ensure!(matches!(refused, Err(StoreError::Transition(_))), "a second decision of call_1: {refused:?}");
    let nowhere = approve_remembering("call_1", "alice", vec![grant(4, "demo", "fs_write", None, LATER)?]);
    let refused = store.transition(&id(9), Guard::Version(1), nowhere, vec![], T0 + 21).await;
    ensure!(matches!(refused, Err(StoreError::NotFound(_))), "{refused:?}");
    for n in [2, 3, 4] {
        let absent = store.grant(&grant_id(n)).await;
        ensure!(absent == Err(StoreError::GrantNotFound(grant_id(n))), "grant {n}: {absent:?}");
    }

    let taken = approve_remembering(
        "call_2",
        "alice",
        vec![grant(5, "demo", "fs_write", None, LATER)?, grant(1, "demo", "shell", None, LATER)?],
    );
    let failed = store.transition(&waiting.id, Guard::Version(decided.version), taken, vec![], T0 + 22).await;
    ensure!(failed.is_err(), "a grant that cannot be written fails its vote: {failed:?}");
    ensure!(store.get(&waiting.id).await? == decided, "the vote was not recorded");
    ensure!(store.grant(&grant_id(5)).await == Err(StoreError::GrantNotFound(grant_id(5))));
    ensure!(store.grant(&grant_id(1)).await?.tool == "fs_write", "the grant holding the id is untouched");
    let page = store.list_grants(GrantQuery { limit: 10, ..Default::default() }).await?;
    ensure!(ids(&page.grants) == ids_of(&[1]), "{:?}", ids(&page.grants));
    Ok(())
}

/// Two votes on the version read, each remembering a grant, race: one commits with its grant, the other
/// conflicts and leaves none.
pub(crate) async fn of_two_racing_votes_only_the_winners_grant_exists<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    for round in 0..8_u64 {
        let waiting = create_waiting(&*store, 10 + round, &["call_1"], None).await?;
        let at = Guard::Version(waiting.version);
        let (a, b) = (2 * round + 1, 2 * round + 2);
        let alice = approve_remembering("call_1", "alice", vec![grant(a, "demo", "fs_write", None, LATER)?]);
        let bob = approve_remembering("call_1", "bob", vec![grant(b, "demo", "fs_write", None, LATER)?]);
        let (alice, bob) = tokio::join!(
            store.transition(&waiting.id, at.clone(), alice, vec![], T0 + 20),
            store.transition(&waiting.id, at, bob, vec![], T0 + 20)
        );
        let (winner, loser) = match (&alice, &bob) {
            (Ok(_), Err(StoreError::Conflict { .. })) => (a, b),
            (Err(StoreError::Conflict { .. }), Ok(_)) => (b, a),
            other => anyhow::bail!("one vote commits, the other conflicts: {other:?}"),
        };
        ensure!(store.grant(&grant_id(winner)).await.is_ok(), "round {round}: the winner's grant");
        ensure!(
            store.grant(&grant_id(loser)).await == Err(StoreError::GrantNotFound(grant_id(loser))),
            "round {round}"
        );
    }
    Ok(())
}

/// A grant row that does not parse (its `match` not JSON, a key that is not a JSON pointer, not an
/// object; an unknown scope; half a revocation) is `CorruptDatabase` naming the grant, from every read
/// of it and from a revocation — never a panic, never a guess.
pub(crate) async fn a_corrupt_grant_row_is_a_corrupt_database<H: Harness>(h: &H) -> anyhow::Result<()> {
    let store = h.store();
    let target = store.create_grant(grant(1, "notes", "fs_write", None, LATER)?).await?;
    // With whether the gate's read meets the row (a grant with a revocation time is not in force).
    let damages = [
        (r#""match" = 'not json'"#, true),
        (r#""match" = '{"path": "notes/*"}'"#, true),
        (r#""match" = '["/path"]'"#, true),
        ("scope = 'world'", true),
        ("revoked_at = 5", false),
    ];
    let pattern = serde_json::to_string(target.matcher.pattern())?;
    for (damage, read_at_the_gate) in damages {
        h.execute(format!("UPDATE grants SET {damage} WHERE id = '{}'", target.id)).await?;
        let corrupt = |result: &Result<Vec<GrantRecord>, StoreError>| matches!(result, Err(StoreError::CorruptDatabase(detail)) if detail.contains(target.id.as_str()));
        let read = store.grant(&target.id).await.map(|grant| vec![grant]);
        ensure!(corrupt(&read), "{damage}: get {read:?}");
        let listed = store.list_grants(GrantQuery { limit: 10, ..Default::default() }).await;
        ensure!(corrupt(&listed.map(|page| page.grants)), "{damage}: list");
        let at_gate = in_force(&*store, "notes", &id(1), T0).await;
        if read_at_the_gate {
            ensure!(corrupt(&at_gate), "{damage}: active_grants {at_gate:?}");
        } else {
            ensure!(at_gate.as_ref().is_ok_and(Vec::is_empty), "{damage}: active_grants {at_gate:?}");
        }
        let revoked = store.revoke_grant(&target.id, &Actor::from("bob"), T0).await.map(|grant| vec![grant]);
        ensure!(corrupt(&revoked), "{damage}: revoke {revoked:?}");
        // A revocation refused for it changed nothing: restored, the row reads as before.
        h.execute(format!(
            "UPDATE grants SET \"match\" = '{pattern}', scope = 'agent', revoked_at = NULL WHERE id = '{}'",
            target.id
        ))
        .await?;
        ensure!(store.grant(&target.id).await? == target, "{damage}: restored");
    }
    Ok(())
}
