//! `tollgate doctor`: checks the store this process opens, end to end.
//!
//! 1. The database's own check ([`IntegrityCheck::Full`]: SQLite's `PRAGMA integrity_check`; on
//!    PostgreSQL a read of every table).
//! 2. Every run, page by page through the whole store: each one is read and its hash chain verified
//!    (as `tollgate verify` does, keyed hashes with the store's chain keys). A run whose row or events
//!    cannot be read (a wrong key, plaintext or a replayed value where a sealed one belongs) is reported
//!    as unreadable and the check goes on with the others.
//! 3. The log against what the run holds: no idempotency key in two `tool_started` events of a run (a
//!    call that ran twice), and for a waiting run, its suspension against the run's last
//!    `approval_requested` event — the same turn digest (also the run row's), the same held calls (ids
//!    and tools, in order) and, at privacy level `full`, the same arguments (canonical sha256, after the
//!    configured secrets are redacted as in the log) — and that its log has not ended.
//!
//! It prints a summary (`--json`: the same as one JSON object) and exits 0 when all is well, 1 when
//! anything was found. It only reads: it repairs nothing. It needs the store itself, so it is not for
//! `--server`.

use crate::backend::Backend;
use crate::commands::Context;
use crate::exit::{CliError, Exit};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use tollgate_agent_core::canonical::canonical_sha256;
use tollgate_agent_core::redact::Redactor;
use tollgate_agent_core::{
    EventKind, IntegrityCheck, RunId, RunQuery, RunRecord, RunState, StoreError, StoreHealth, StoredEvent,
    verify_chain_with,
};
use tollgate_agent_runtime::Runtime;

/// Runs read per page of the walk through every run.
const PAGE: u32 = 500;

/// What `doctor` found.
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    /// True when nothing below is wrong.
    pub ok: bool,
    /// What the database's own check found wrong, one line each (empty: sound).
    pub database_problems: Vec<String>,
    /// Runs found (readable or not).
    pub runs_checked: u64,
    /// Runs whose hash chain verified.
    pub chains_intact: u64,
    /// Runs whose hash chain breaks.
    pub broken_chains: Vec<BrokenChain>,
    /// Runs whose stored data cannot be read.
    pub unreadable_runs: Vec<Unreadable>,
    /// Waiting runs whose suspension is not the turn their last `approval_requested` event announced.
    pub mismatched_suspensions: Vec<Mismatch>,
    /// Runs with an idempotency key in more than one `tool_started` event (a call that ran twice).
    pub repeated_calls: Vec<Mismatch>,
    /// Set when the walk through the runs had to stop before the end (a list that failed).
    pub incomplete: Option<String>,
}

/// A run whose chain breaks.
#[derive(Debug, Serialize)]
pub struct BrokenChain {
    /// The run.
    pub id: RunId,
    /// The first event that does not verify.
    pub first_bad_seq: u64,
    /// How it breaks.
    pub message: String,
}

/// A run whose stored parts disagree.
#[derive(Debug, Serialize)]
pub struct Mismatch {
    /// The run.
    pub id: RunId,
    /// What disagrees.
    pub message: String,
}

/// What the log is compared with: the configured secrets (redacted from event data as the log was
/// written) and whether events keep arguments as they were (privacy level `full`).
pub struct LogForm {
    /// The redactor of the configured secrets.
    pub redactor: Redactor,
    /// Whether `approval_requested` events keep the calls' arguments.
    pub full_arguments: bool,
}

/// A run that cannot be read.
#[derive(Debug, Serialize)]
pub struct Unreadable {
    /// The run.
    pub id: RunId,
    /// The store's error.
    pub error: String,
}

/// `tollgate doctor`.
pub async fn doctor(ctx: &Context) -> Result<Exit, CliError> {
    let Backend::Local(local) = ctx.backend() else {
        return Err(CliError::usage("`doctor` checks the store itself: run it where the store is, without --server"));
    };
    let form = LogForm {
        redactor: tollgate_agent_app::redactor(&local.config),
        full_arguments: local.config.privacy.level == tollgate_agent_config::PrivacyLevel::Full,
    };
    let summary = check(&local.runtime, &form).await;
    if ctx.json {
        ctx.print_json(&serde_json::to_value(&summary).unwrap_or_default());
    } else {
        ctx.data(&render(&summary));
    }
    Ok(if summary.ok { Exit::Done } else { Exit::Failed })
}

/// Checks the database, then every run.
pub async fn check(runtime: &Runtime, form: &LogForm) -> Summary {
    let (log, health) = (runtime.event_log(), runtime.health());
    let mut summary = Summary {
        database_problems: match health.check_integrity(IntegrityCheck::Full).await {
            Ok(problems) => problems,
            Err(error) => vec![error.to_string()],
        },
        ..Summary::default()
    };
    let mut cursor = None;
    loop {
        let page = match runtime.list(RunQuery { status: None, agent: None, limit: PAGE, cursor }).await {
            Ok(page) => page,
            Err(error) => {
                summary.incomplete = Some(format!("cannot list every run: {error}"));
                break;
            }
        };
        for id in page.skipped.into_iter().map(RunId::from) {
            summary.runs_checked += 1;
            let error = match runtime.get(&id).await {
                Err(error) => error.to_string(),
                Ok(_) => "its row could not be read while listing".to_owned(),
            };
            summary.unreadable_runs.push(Unreadable { id, error });
        }
        for run in page.runs {
            summary.runs_checked += 1;
            let events = match tollgate_agent_core::store::events_after(&**log, &run.id, 0).await {
                Ok(events) => events,
                Err(StoreError::NotFound(_)) => {
                    summary.runs_checked -= 1; // purged meanwhile
                    continue;
                }
                Err(error) => {
                    summary.unreadable_runs.push(Unreadable { id: run.id, error: error.to_string() });
                    continue;
                }
            };
            match verify_chain_with(&events, run.last_seq, &run.last_hash, log.chain_keys()) {
                Ok(()) => summary.chains_intact += 1,
                Err(broken) => summary.broken_chains.push(BrokenChain {
                    id: run.id.clone(),
                    first_bad_seq: broken.seq(),
                    message: broken.to_string(),
                }),
            }
            if let Some(message) = repeated_call(&events) {
                summary.repeated_calls.push(Mismatch { id: run.id.clone(), message });
            }
            if let Some(message) = suspension_mismatch(&run, &events, form) {
                summary.mismatched_suspensions.push(Mismatch { id: run.id.clone(), message });
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    summary.ok = summary.database_problems.is_empty()
        && summary.broken_chains.is_empty()
        && summary.unreadable_runs.is_empty()
        && summary.mismatched_suspensions.is_empty()
        && summary.repeated_calls.is_empty()
        && summary.incomplete.is_none();
    summary
}

/// The first idempotency key found in two `tool_started` events of the log, said as a sentence.
fn repeated_call(events: &[StoredEvent]) -> Option<String> {
    let mut seen: BTreeMap<&str, u64> = BTreeMap::new();
    for event in events.iter().filter(|e| e.kind == EventKind::ToolStarted) {
        let Some(key) = event.data["idempotency_key"].as_str() else { continue };
        if let Some(first) = seen.insert(key, event.seq) {
            return Some(format!(
                "idempotency key `{key}` started twice (events {first} and {}): a call ran again",
                event.seq
            ));
        }
    }
    None
}

/// Where a waiting run's suspension differs from its last `approval_requested` event, said as a
/// sentence; `None` when it is the turn announced (or the run is not waiting).
fn suspension_mismatch(run: &RunRecord, events: &[StoredEvent], form: &LogForm) -> Option<String> {
    let RunState::Waiting(held) = &run.state else { return None };
    // A waiting run whose log has ended was put back to an earlier state.
    if let Some(ended) = events.iter().find(|e| e.kind.is_terminal()) {
        return Some(format!("it waits, but its log ended at event {} ({})", ended.seq, ended.kind.as_str()));
    }
    let Some(requested) = events.iter().rev().find(|e| e.kind == EventKind::ApprovalRequested) else {
        return Some("it waits, but its log has no approval_requested event".to_owned());
    };
    let suspension = match held.suspension.parse() {
        Ok(suspension) => suspension,
        Err(error) => return Some(format!("its suspension cannot be read: {error}")),
    };
    let announced = requested.data["turn_digest"].as_str().unwrap_or_default();
    let digests = [("the suspension's", suspension.turn_digest.as_str()), ("the run's", held.turn_digest.as_str())];
    if let Some((whose, digest)) = digests.iter().find(|(_, digest)| *digest != announced) {
        return Some(format!(
            "{whose} turn digest {digest} is not the one approval_requested (event {}) announced, {announced}",
            requested.seq
        ));
    }
    let logged: &[Value] = requested.data["calls"].as_array().map_or(&[], Vec::as_slice);
    if logged.len() != suspension.calls.len() {
        return Some(format!(
            "the suspension holds {} call(s), approval_requested (event {}) announced {}",
            suspension.calls.len(),
            requested.seq,
            logged.len()
        ));
    }
    for (held_call, logged) in suspension.calls.iter().zip(logged) {
        let (id, tool) = (logged["call_id"].as_str().unwrap_or_default(), logged["tool"].as_str().unwrap_or_default());
        if held_call.call_id != id || held_call.tool != tool {
            return Some(format!(
                "the suspension holds call {} ({}) where approval_requested (event {}) announced {id} ({tool})",
                held_call.call_id, held_call.tool, requested.seq
            ));
        }
        if form.full_arguments {
            let mut arguments = held_call.arguments.clone();
            form.redactor.redact_value(&mut arguments);
            if canonical_sha256(&arguments) != canonical_sha256(&logged["arguments"]) {
                return Some(format!(
                    "the arguments of call {id} in the suspension are not those approval_requested (event {}) \
                     announced",
                    requested.seq
                ));
            }
        }
    }
    None
}

/// The summary for people.
fn render(summary: &Summary) -> String {
    let mut text = String::new();
    if summary.database_problems.is_empty() {
        text.push_str("database: the integrity check passed\n");
    } else {
        text.push_str(&format!("database: {} problem(s)\n", summary.database_problems.len()));
        for problem in &summary.database_problems {
            text.push_str(&format!("  {problem}\n"));
        }
    }
    text.push_str(&format!("runs checked: {}\n", summary.runs_checked));
    text.push_str(&format!("chains intact: {}\n", summary.chains_intact));
    text.push_str(&format!("broken chains: {}\n", summary.broken_chains.len()));
    for broken in &summary.broken_chains {
        text.push_str(&format!("  {} breaks at seq {}: {}\n", broken.id, broken.first_bad_seq, broken.message));
    }
    text.push_str(&format!("unreadable runs: {}\n", summary.unreadable_runs.len()));
    for run in &summary.unreadable_runs {
        text.push_str(&format!("  {}: {}\n", run.id, run.error));
    }
    text.push_str(&format!("suspensions not as announced: {}\n", summary.mismatched_suspensions.len()));
    for run in &summary.mismatched_suspensions {
        text.push_str(&format!("  {}: {}\n", run.id, run.message));
    }
    text.push_str(&format!("calls started twice: {}\n", summary.repeated_calls.len()));
    for run in &summary.repeated_calls {
        text.push_str(&format!("  {}: {}\n", run.id, run.message));
    }
    if let Some(why) = &summary.incomplete {
        text.push_str(&format!("incomplete: {why}\n"));
    }
    text.push_str(if summary.ok { "all is well\n" } else { "problems found\n" });
    text
}

/// `serve`'s check at start: SQLite's `PRAGMA quick_check` (PostgreSQL: each table readable). A
/// database that fails it is refused (exit 2, as for a store that cannot be opened), naming what is
/// wrong and `tollgate doctor`.
pub async fn refuse_corrupt(store: &dyn StoreHealth) -> Result<(), CliError> {
    let problems = match store.check_integrity(IntegrityCheck::Quick).await {
        Ok(problems) => problems,
        Err(error) => vec![error.to_string()],
    };
    if problems.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = problems.iter().take(5).map(String::as_str).collect();
    let more = problems.len().saturating_sub(shown.len());
    Err(CliError::usage(format!(
        "refusing to serve: the store's database failed its check ({} problem(s){}):\n  {}\n\
         run `tollgate doctor` for the full report, and restore the database from a backup",
        problems.len(),
        if more > 0 { format!(", {more} more not shown") } else { String::new() },
        shown.join("\n  ")
    )))
}
