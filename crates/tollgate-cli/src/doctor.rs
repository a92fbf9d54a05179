//! `tollgate doctor`: checks the store this process opens, end to end.
//!
//! 1. The database's own check ([`IntegrityCheck::Full`]: SQLite's `PRAGMA integrity_check`; on
//!    PostgreSQL a read of every table).
//! 2. Every run, page by page through the whole store: each one is read and its hash chain verified
//!    (as `tollgate verify` does). A run whose row or events cannot be read is reported as unreadable
//!    and the check goes on with the others.
//!
//! It prints a summary (`--json`: the same as one JSON object) and exits 0 when all is well, 1 when
//! anything was found. It only reads: it repairs nothing. It needs the store itself, so it is not for
//! `--server`.

use crate::backend::Backend;
use crate::commands::Context;
use crate::exit::{CliError, Exit};
use serde::Serialize;
use tollgate_agent_core::{IntegrityCheck, RunQuery, RunStore};
use tollgate_agent_runtime::{ReadError, Runtime};

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
    /// Set when the walk through the runs had to stop before the end (a list that failed).
    pub incomplete: Option<String>,
}

/// A run whose chain breaks.
#[derive(Debug, Serialize)]
pub struct BrokenChain {
    /// The run.
    pub id: String,
    /// The first event that does not verify.
    pub first_bad_seq: u64,
    /// How it breaks.
    pub message: String,
}

/// A run that cannot be read.
#[derive(Debug, Serialize)]
pub struct Unreadable {
    /// The run.
    pub id: String,
    /// The store's error.
    pub error: String,
}

/// `tollgate doctor`.
pub async fn doctor(ctx: &Context) -> Result<Exit, CliError> {
    let Backend::Local(local) = ctx.backend() else {
        return Err(CliError::usage("`doctor` checks the store itself: run it where the store is, without --server"));
    };
    let summary = check(&local.runtime).await;
    if ctx.json {
        ctx.print_json(&serde_json::to_value(&summary).unwrap_or_default());
    } else {
        ctx.data(&render(&summary));
    }
    Ok(if summary.ok { Exit::Done } else { Exit::Failed })
}

/// Checks the database, then every run.
pub async fn check(runtime: &Runtime) -> Summary {
    let store = runtime.store();
    let mut summary = Summary {
        database_problems: match store.check_integrity(IntegrityCheck::Full).await {
            Ok(problems) => problems,
            Err(error) => vec![error.to_string()],
        },
        ..Summary::default()
    };
    let mut cursor = None;
    loop {
        let page = match store.list(RunQuery { status: None, agent: None, limit: PAGE, cursor }).await {
            Ok(page) => page,
            Err(error) => {
                summary.incomplete = Some(format!("cannot list every run: {error}"));
                break;
            }
        };
        for id in page.skipped {
            summary.runs_checked += 1;
            let error = match store.get(&id).await {
                Err(error) => error.to_string(),
                Ok(_) => "its row could not be read while listing".to_owned(),
            };
            summary.unreadable_runs.push(Unreadable { id, error });
        }
        for run in page.runs {
            summary.runs_checked += 1;
            match runtime.verify(&run.id).await {
                Ok(Ok(_)) => summary.chains_intact += 1,
                Ok(Err(broken)) => summary.broken_chains.push(BrokenChain {
                    id: run.id,
                    first_bad_seq: broken.seq(),
                    message: broken.to_string(),
                }),
                Err(ReadError::NotFound(_)) => summary.runs_checked -= 1, // purged meanwhile
                Err(ReadError::Store(error)) => {
                    summary.unreadable_runs.push(Unreadable { id: run.id, error: error.to_string() })
                }
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
        && summary.incomplete.is_none();
    summary
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
    if let Some(why) = &summary.incomplete {
        text.push_str(&format!("incomplete: {why}\n"));
    }
    text.push_str(if summary.ok { "all is well\n" } else { "problems found\n" });
    text
}

/// `serve`'s check at start: SQLite's `PRAGMA quick_check` (PostgreSQL: each table readable). A
/// database that fails it is refused (exit 2, as for a store that cannot be opened), naming what is
/// wrong and `tollgate doctor`.
pub async fn refuse_corrupt(store: &dyn RunStore) -> Result<(), CliError> {
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
