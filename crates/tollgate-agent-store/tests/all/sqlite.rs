//! The store contract against SQLite (a fresh file in a temp dir per case), plus what only SQLite
//! has: reopening the file, the in-memory database.

use crate::contract::{
    FILLED_QUEUED_AT, FILLED_RUNS, Harness, T0, a_filled_queue_is_claimed_oldest_first, id, running_run,
};
use anyhow::Context;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection, Executor};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tollgate_agent_core::event::{EventKind, NewEvent, verify_chain};
use tollgate_agent_core::grant::{GrantMatch, GrantQuery, GrantRecord};
use tollgate_agent_core::run::{RunStatus, Transition};
use tollgate_agent_core::store::{
    EventLog, Grants, Guard, IntegrityCheck, RunQuery, RunRows, RunStore, StoreError, StoreHealth,
};
use tollgate_agent_core::{Actor, GrantScope, RunId};
use tollgate_agent_store::seal::SealReport;
use tollgate_agent_store::{SqliteStore, StoreOptions};

/// A directory of its own under the system temp dir, removed when dropped (test failed or not).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.0) {
            eprintln!("cannot remove {}: {error}", self.0.display());
        }
    }
}

fn temp_dir() -> anyhow::Result<TempDir> {
    Ok(TempDir(unique_dir()?))
}

fn unique_dir() -> anyhow::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos();
    let dir = std::env::temp_dir().join(format!(
        "tollgate-agent-store-test-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

struct Sqlite {
    url: String,
    store: Arc<dyn RunStore>,
    /// Dropped last: the database's folder goes after the store.
    _dir: TempDir,
}

impl Sqlite {
    async fn connection(&self) -> anyhow::Result<sqlx::SqliteConnection> {
        Ok(SqliteConnectOptions::from_str(&self.url)?.connect().await?)
    }
}

impl Harness for Sqlite {
    fn store(&self) -> Arc<dyn RunStore> {
        self.store.clone()
    }

    async fn execute(&self, sql: String) -> anyhow::Result<()> {
        let mut connection = self.connection().await?;
        connection.execute(sqlx::AssertSqlSafe(sql)).await?;
        connection.close().await?;
        Ok(())
    }

    async fn query_i64(&self, sql: String) -> anyhow::Result<i64> {
        let mut connection = self.connection().await?;
        let n = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(&mut connection).await?;
        connection.close().await?;
        Ok(n)
    }

    async fn query_text(&self, sql: String) -> anyhow::Result<String> {
        let mut connection = self.connection().await?;
        let text = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(&mut connection).await?;
        connection.close().await?;
        Ok(text)
    }

    async fn open_again(&self) -> Result<Arc<dyn RunStore>, StoreError> {
        Ok(Arc::new(SqliteStore::open(&self.url).await?))
    }

    async fn open_with(&self, options: StoreOptions) -> Result<Arc<dyn RunStore>, StoreError> {
        Ok(Arc::new(SqliteStore::open_with(&self.url, options).await?))
    }

    async fn file_contains(&self, text: &str) -> anyhow::Result<Option<bool>> {
        let mut connection = self.connection().await?;
        let (busy, _, _): (i64, i64, i64) =
            sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)").fetch_one(&mut connection).await?;
        connection.close().await?;
        anyhow::ensure!(busy == 0, "the checkpoint could not finish");
        let file = self._dir.0.join("tollgate.db");
        let mut found = false;
        for path in [file.clone(), file.with_extension("db-wal")] {
            let bytes = match std::fs::read(&path) {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e.into()),
            };
            found |= bytes.windows(text.len()).any(|window| window == text.as_bytes());
        }
        Ok(Some(found))
    }

    async fn seal(&self, options: StoreOptions, batch: u32) -> Result<SealReport, StoreError> {
        tollgate_agent_store::seal_unsealed(&self.url, options, batch, |_| {}).await
    }
}

async fn setup() -> anyhow::Result<Option<Sqlite>> {
    let dir = temp_dir()?;
    let url = format!("sqlite://{}", dir.0.join("tollgate.db").display());
    let store = Arc::new(SqliteStore::open(&url).await?);
    Ok(Some(Sqlite { url, store, _dir: dir }))
}

/// The directory goes when the harness is dropped.
async fn teardown(_: &Sqlite) {}

all_contract_tests!(setup, teardown);

fn started() -> Vec<NewEvent> {
    vec![NewEvent { at: T0, kind: EventKind::RunStarted, round: 0, data: serde_json::json!({"actor": "local"}) }]
}

#[tokio::test]
async fn data_survives_close_and_reopen() -> anyhow::Result<()> {
    let dir = temp_dir()?;
    let path = dir.0.join("nested-name.db");
    let url = format!("sqlite://{}", path.display());
    let store = SqliteStore::open(&url).await?;
    ensure_file(&path)?;
    let created = store.create(running_run(1, "demo"), started()).await?;
    let cancelled = store.transition(&created.id, Guard::Version(1), Transition::Cancel, started(), T0 + 1).await?;
    store.close().await;

    let reopened = SqliteStore::open(&url).await?;
    anyhow::ensure!(reopened.get(&created.id).await? == cancelled);
    let events = reopened.events(&created.id, 0, 10).await?;
    anyhow::ensure!(events.len() == 2);
    verify_chain(&events, cancelled.last_seq, &cancelled.last_hash)?;
    reopened.close().await;
    Ok(())
}

fn ensure_file(path: &std::path::Path) -> anyhow::Result<()> {
    anyhow::ensure!(path.is_file(), "open creates the database file {}", path.display());
    Ok(())
}

#[tokio::test]
async fn the_file_is_in_wal_mode() -> anyhow::Result<()> {
    let dir = temp_dir()?;
    let url = format!("sqlite://{}", dir.0.join("tollgate.db").display());
    let store = SqliteStore::open(&url).await?;
    store.create(running_run(1, "demo"), started()).await?;
    let mut connection = SqliteConnectOptions::from_str(&url)?.connect().await?;
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut connection).await?;
    anyhow::ensure!(mode == "wal", "journal mode {mode}");
    anyhow::ensure!(dir.0.join("tollgate.db-wal").exists(), "a WAL file exists next to the database");
    connection.close().await?;
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn an_in_memory_store_works_and_is_private() -> anyhow::Result<()> {
    let one = SqliteStore::open("sqlite::memory:").await?;
    let two = SqliteStore::open("sqlite::memory:").await?;
    let created = one.create(running_run(1, "demo"), started()).await?;
    let waiting = one
        .transition(
            &created.id,
            Guard::Version(1),
            Transition::Fail { error: tollgate_agent_core::RunError { kind: "k".into(), message: "m".into() } },
            vec![],
            T0,
        )
        .await?;
    anyhow::ensure!(waiting.status() == RunStatus::Failed);
    anyhow::ensure!(one.get(&created.id).await? == waiting, "reads see the writer's commits");
    anyhow::ensure!(one.list(RunQuery { limit: 10, ..Default::default() }).await?.runs.len() == 1);
    anyhow::ensure!(matches!(two.get(&id(1)).await, Err(StoreError::NotFound(_))), "each memory store is its own");
    one.close().await;
    two.close().await;
    Ok(())
}

#[tokio::test]
async fn an_unsupported_url_names_only_its_scheme() {
    let error = tollgate_agent_store::open("mysql://root:hunter2@db/tollgate").await.err();
    let text = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(text.contains("mysql") && !text.contains("hunter2"), "{text}");
}

/// No commit runs a checkpoint itself (the write connection's automatic checkpoint is off), yet the WAL
/// does reach the database file: the checkpointer thread copies it back as commits go by.
#[tokio::test]
async fn the_checkpointer_copies_the_wal_into_the_database_file() -> anyhow::Result<()> {
    let dir = temp_dir()?;
    let path = dir.0.join("tollgate.db");
    let store = SqliteStore::open(&format!("sqlite://{}", path.display())).await?;
    let before = std::fs::metadata(&path)?.len();
    for n in 1..=450 {
        store.create(running_run(n, "demo"), started()).await?;
    }
    let mut grown = false;
    for _ in 0..100 {
        if std::fs::metadata(&path)?.len() > before + 64 * 1024 {
            grown = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    anyhow::ensure!(grown, "450 runs' pages reached the database file ({before} bytes before)");
    anyhow::ensure!(store.list(RunQuery { limit: 500, ..Default::default() }).await?.runs.len() == 450);
    store.close().await;
    Ok(())
}

/// Under a steady stream of commits the WAL still starts over: it stays bounded instead of growing with
/// every run ever written.
#[tokio::test]
async fn the_wal_stays_bounded_under_steady_writes() -> anyhow::Result<()> {
    let dir = temp_dir()?;
    let path = dir.0.join("tollgate.db");
    let store = SqliteStore::open(&format!("sqlite://{}", path.display())).await?;
    let wal = dir.0.join("tollgate.db-wal");
    let mut largest = 0;
    for n in 1..=6000 {
        store.create(running_run(n, "demo"), started()).await?;
        if n % 100 == 0 {
            largest = largest.max(std::fs::metadata(&wal)?.len());
        }
    }
    // 6,000 runs write about 60,000 WAL frames (235 MiB) when the WAL never starts over. It starts over
    // within about 50 MiB; the margin is for a busy machine where the checkpointer runs late.
    anyhow::ensure!(largest < 120 * 1024 * 1024, "the WAL grew to {largest} bytes");
    store.close().await;
    Ok(())
}

/// The offset in `bytes` of the one page (of `page_size`) holding `marker`.
fn page_holding(bytes: &[u8], marker: &[u8], page_size: usize) -> anyhow::Result<usize> {
    let at: Vec<usize> =
        bytes.windows(marker.len()).enumerate().filter(|(_, w)| *w == marker).map(|(i, _)| i).collect();
    anyhow::ensure!(at.len() == 1, "the marker is in the file once, found {} times", at.len());
    Ok(at[0] / page_size * page_size)
}

/// Flipped bytes in the page of one run's row (its first cell pointer, as a bad sector or a stray
/// write would leave it): the database fails its check, which names the page; that run fails alone as
/// `Corrupt` naming it; every other run is still read, listed (the damaged one in `skipped`) and
/// written.
#[tokio::test]
async fn flipped_bytes_in_one_runs_page_spoil_only_that_run() -> anyhow::Result<()> {
    let dir = temp_dir()?;
    let path = dir.0.join("flipped.db");
    let url = format!("sqlite://{}", path.display());
    let store = SqliteStore::open(&url).await?;
    // Inputs of ~3 KB: each row fills a 4 KB page of its own, so one damaged page is one run.
    let input = |n: u64| format!("MARKER-{n:04}-{}", "x".repeat(3000));
    for n in 1..=5 {
        let mut run = running_run(n, "demo");
        run.input = input(n);
        store.create(run, started()).await?;
    }
    store.close().await;
    {
        // Everything into the database file, so the bytes below are the only copy.
        let connection = rusqlite::Connection::open(&path)?;
        connection.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    }
    let mut bytes = std::fs::read(&path)?;
    let page = page_holding(&bytes, b"MARKER-0003-", 4096)?;
    anyhow::ensure!(bytes[page] == 0x0d, "a table leaf page");
    // The first entry of the cell pointer array (after the 8-byte leaf header) now points past the page.
    bytes[page + 8] = 0xff;
    bytes[page + 9] = 0xf0;
    std::fs::write(&path, &bytes)?;

    let store = SqliteStore::open(&url).await?;
    let quick = store.check_integrity(IntegrityCheck::Quick).await?;
    anyhow::ensure!(!quick.is_empty(), "quick_check finds the damaged page");
    let full = store.check_integrity(IntegrityCheck::Full).await?;
    anyhow::ensure!(full.iter().any(|line| line.contains("page")), "integrity_check names the page: {full:?}");

    let broken = id(3);
    match store.get(&broken).await {
        Err(StoreError::Corrupt { id, detail }) => {
            anyhow::ensure!(broken == id && detail.contains("malformed"), "{id}: {detail}")
        }
        other => anyhow::bail!("expected Corrupt for run 3, got {other:?}"),
    }
    for n in [1, 2, 4, 5] {
        anyhow::ensure!(store.get(&id(n)).await?.input == input(n));
        anyhow::ensure!(store.events(&id(n), 0, 10).await?.len() == 1);
    }
    let page = store.list(RunQuery { limit: 10, ..Default::default() }).await?;
    let listed: Vec<&RunId> = page.runs.iter().map(|r| &r.id).collect();
    anyhow::ensure!(listed == [&id(5), &id(4), &id(2), &id(1)], "{listed:?}");
    anyhow::ensure!(page.skipped == [broken.as_str()], "{:?}", page.skipped);
    // Paging goes on past the damaged run.
    let first = store.list(RunQuery { limit: 3, ..Default::default() }).await?;
    anyhow::ensure!(first.runs.len() == 2 && first.next_cursor.as_deref() == Some(broken.as_str()));
    let rest = store.list(RunQuery { limit: 3, cursor: first.next_cursor, ..Default::default() }).await?;
    anyhow::ensure!(rest.runs.iter().map(|r| r.id.clone()).collect::<Vec<_>>() == [id(2), id(1)]);
    // The others are still written.
    store.transition(&id(4), Guard::Version(1), Transition::Cancel, started(), T0 + 10).await?;
    store.close().await;
    Ok(())
}

/// A file that is not a database at all is refused at open as a corrupt database.
#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused_as_corrupt() -> anyhow::Result<()> {
    let dir = temp_dir()?;
    let path = dir.0.join("not-a.db");
    std::fs::write(&path, vec![0x5a_u8; 8192])?;
    match SqliteStore::open(&format!("sqlite://{}", path.display())).await {
        Err(StoreError::CorruptDatabase(detail)) => anyhow::ensure!(detail.contains("not a database"), "{detail}"),
        other => anyhow::bail!("expected CorruptDatabase, got {:?}", other.map(|_| "a store")),
    }
    Ok(())
}

/// Opened with `?mode=ro`, a database reads but every write (and the probe) is `ReadOnly`.
#[tokio::test]
async fn a_read_only_database_reads_and_refuses_writes() -> anyhow::Result<()> {
    let dir = temp_dir()?;
    let path = dir.0.join("ro.db");
    let url = format!("sqlite://{}", path.display());
    let store = SqliteStore::open(&url).await?;
    let created = store.create(running_run(1, "demo"), started()).await?;
    store.close().await;

    let store = SqliteStore::open(&format!("{url}?mode=ro")).await?;
    anyhow::ensure!(store.get(&created.id).await? == created);
    let write = store.transition(&created.id, Guard::Version(1), Transition::Cancel, started(), T0 + 1).await;
    anyhow::ensure!(matches!(write, Err(StoreError::ReadOnly(_))), "{write:?}");
    let create = store.create(running_run(2, "demo"), started()).await;
    anyhow::ensure!(matches!(create, Err(StoreError::ReadOnly(_))), "{create:?}");
    let probe = store.probe_write().await;
    anyhow::ensure!(matches!(probe, Err(StoreError::ReadOnly(_))), "{probe:?}");
    store.close().await;
    Ok(())
}

/// The claim's plan is the queue's index read in order (no temporary B-tree for the ORDER BY, no scan of
/// the table) on a table of 100,000 queued runs, never analysed or analysed before they were queued;
/// and the claim takes the oldest queued runs of its agents, up to its limit, in one go.
#[tokio::test]
async fn the_claim_reads_the_queue_index_whatever_the_statistics() -> anyhow::Result<()> {
    let Some(harness) = setup().await? else { return Ok(()) };
    let store = SqliteStore::open(&harness.url).await?;
    let assert_reads_the_queue_index = |plan: Vec<String>| {
        let text = plan.join("\n");
        // The partial index holds the queued runs alone: read in order, it stops at the limit.
        assert!(plan.iter().any(|step| step == "SCAN runs USING INDEX runs_queue"), "{text}");
        assert!(!text.contains("TEMP B-TREE") && !plan.iter().any(|step| step == "SCAN runs"), "{text}");
    };
    let template = tollgate_agent_core::RunRecord::new(id(0), "demo".into(), "q".into(), "local".into(), T0, None);
    store.create(template, vec![]).await?;
    harness
        .execute(format!(
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {FILLED_RUNS}) \
             INSERT INTO runs (id, agent, status, version, input, iterations, input_tokens, output_tokens, \
             created_by, created_at, updated_at, last_seq, last_hash) \
             SELECT printf('01980000-0000-7000-8000-%012x', n), CASE WHEN n % 10 = 0 THEN 'demo' ELSE 'other' END, \
             'queued', 1, 'q', 0, 0, 0, 'local', {T0} + n, {queued_at}, 0, \
             (SELECT last_hash FROM runs WHERE id = '{0}') FROM g; DELETE FROM runs WHERE id = '{0}'",
            id(0),
            queued_at = FILLED_QUEUED_AT.replace("T0", &T0.to_string()),
        ))
        .await?;
    assert_reads_the_queue_index(store.claim_plan()?);
    harness.execute("UPDATE runs SET status = 'completed'; ANALYZE; UPDATE runs SET status = 'queued'".into()).await?;
    let store = SqliteStore::open(&harness.url).await?;
    assert_reads_the_queue_index(store.claim_plan()?);
    a_filled_queue_is_claimed_oldest_first(&store).await?;
    Ok(())
}

/// The frozen databases (`fixtures/v1`, `fixtures/v2` at the workspace root, copied: the committed files
/// are never touched) open, migrate to this build's newest version with an empty `grants` table, keep
/// every run readable, and take grants.
#[tokio::test]
async fn the_frozen_databases_migrate_to_grants() -> anyhow::Result<()> {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    for (fixture, runs) in [("v1", 6), ("v2", 2)] {
        let dir = temp_dir()?;
        let path = dir.0.join("tollgate.db");
        std::fs::copy(fixtures.join(fixture).join("tollgate.db"), &path)?;
        let url = format!("sqlite://{}", path.display());
        let store = SqliteStore::open(&url).await?;
        let page = store.list(RunQuery { limit: 100, ..Default::default() }).await?;
        anyhow::ensure!(page.runs.len() == runs && page.skipped.is_empty(), "{fixture}: {page:?}");
        for run in &page.runs {
            let events = store.events(&run.id, 0, 1_000).await?;
            verify_chain(&events, run.last_seq, &run.last_hash)?;
        }
        anyhow::ensure!(store.list_grants(GrantQuery { limit: 10, ..Default::default() }).await?.grants.is_empty());
        let grant = GrantRecord {
            id: "01980000-0000-7000-9000-000000000001".into(),
            agent: page.runs[0].agent.clone(),
            tool: "fs_write".into(),
            matcher: GrantMatch::any(),
            scope: GrantScope::Run,
            run_id: Some(page.runs[0].id.clone()),
            reason: None,
            created_by: Actor::from("local"),
            created_at: T0,
            expires_at: T0 + 1_000,
            revoked: None,
            uses: 0,
        };
        let created = store.create_grant(grant).await?;
        anyhow::ensure!(store.active_grants(&created.agent, T0).await? == vec![created.clone()]);
        anyhow::ensure!(store.grants_version(&created.agent).await? == 1, "{fixture}: the version of its grants");
        store.close().await;
        let mut connection = SqliteConnectOptions::from_str(&url)?.connect().await?;
        let version: i64 =
            sqlx::query_scalar("SELECT MAX(version) FROM tollgate_migrations").fetch_one(&mut connection).await?;
        anyhow::ensure!(version == 11, "{fixture}: migrated to {version}");
        connection.close().await?;
    }
    Ok(())
}

/// A grant's column holding a value of the wrong type (text where the count belongs, which SQLite's
/// type affinity lets in) is `CorruptDatabase` naming the grant, not a panic.
#[tokio::test]
async fn a_grant_column_of_the_wrong_type_is_a_corrupt_database() -> anyhow::Result<()> {
    let dir = temp_dir()?;
    let url = format!("sqlite://{}", dir.0.join("tollgate.db").display());
    let store = SqliteStore::open(&url).await?;
    let grant = GrantRecord {
        id: "01980000-0000-7000-9000-000000000001".into(),
        agent: "demo".into(),
        tool: "fs_write".into(),
        matcher: GrantMatch::any(),
        scope: GrantScope::Agent,
        run_id: None,
        reason: None,
        created_by: Actor::from("local"),
        created_at: T0,
        expires_at: T0 + 1_000,
        revoked: None,
        uses: 0,
    };
    let created = store.create_grant(grant).await?;
    let mut connection = SqliteConnectOptions::from_str(&url)?.connect().await?;
    sqlx::query("UPDATE grants SET uses = 'many'").execute(&mut connection).await?;
    connection.close().await?;
    let corrupt = |result: Result<Vec<GrantRecord>, StoreError>| matches!(result, Err(StoreError::CorruptDatabase(detail)) if detail.contains(created.id.as_str()));
    anyhow::ensure!(corrupt(store.grant(&created.id).await.map(|g| vec![g])));
    anyhow::ensure!(corrupt(store.active_grants("demo", T0).await));
    anyhow::ensure!(corrupt(store.list_grants(GrantQuery { limit: 5, ..Default::default() }).await.map(|p| p.grants)));
    store.close().await;
    Ok(())
}
