//! `tollgate doctor` and `serve`'s check at start, on the real binary over a real SQLite file: a sound
//! store (exit 0), an edited event (a broken chain, exit 1), flipped bytes in the file (the database
//! check fails, doctor exits 1, `serve` refuses to start with exit 2).

use anyhow::Result;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection, Executor};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use tollgate_agent_testkit::scratch_dir;

use crate::support::Outcome;

fn tollgate(dir: &Path, args: &[&str]) -> Result<Outcome> {
    crate::support::tollgate_in(dir, args, &[])
}

/// A folder with two demo runs waiting in `tollgate.db`; their ids, oldest first.
fn two_waiting_runs() -> Result<(PathBuf, Vec<String>)> {
    let dir = scratch_dir("doctor");
    let mut ids = Vec::new();
    for input in ["first", "second"] {
        ids.push(tollgate(&dir, &["run", "--detach", input])?.waiting_id()?);
    }
    Ok((dir, ids))
}

async fn execute(db: &Path, sql: &str) -> Result<()> {
    let mut connection = SqliteConnectOptions::from_str(&format!("sqlite://{}", db.display()))?.connect().await?;
    connection.execute(sqlx::AssertSqlSafe(sql.to_owned())).await?;
    connection.close().await?;
    Ok(())
}

#[test]
fn doctor_passes_a_sound_store_and_names_a_broken_chain() -> Result<()> {
    let (dir, ids) = two_waiting_runs()?;
    let sound = tollgate(&dir, &["doctor"])?;
    assert_eq!(sound.code, 0, "{sound:?}");
    for line in ["database: the integrity check passed", "runs checked: 2", "chains intact: 2", "all is well"] {
        assert!(sound.stdout.contains(line), "{line}: {sound:?}");
    }

    tokio::runtime::Runtime::new()?.block_on(execute(
        &dir.join("tollgate.db"),
        &format!("UPDATE events SET data = '{{\"edited\": true}}' WHERE run_id = '{}' AND seq = 2", ids[0]),
    ))?;
    let broken = tollgate(&dir, &["doctor", "--json"])?;
    assert_eq!(broken.code, 1, "{broken:?}");
    let summary = broken.json()?;
    assert_eq!(summary["ok"], false);
    assert_eq!((summary["runs_checked"].as_u64(), summary["chains_intact"].as_u64()), (Some(2), Some(1)));
    assert_eq!(summary["broken_chains"][0]["id"], ids[0].as_str());
    assert_eq!(summary["broken_chains"][0]["first_bad_seq"], 2);
    assert_eq!(summary["unreadable_runs"], serde_json::json!([]));
    assert_eq!(summary["database_problems"], serde_json::json!([]));
    Ok(())
}

#[test]
fn flipped_bytes_fail_doctor_and_stop_serve_from_starting() -> Result<()> {
    let (dir, _) = two_waiting_runs()?;
    let db = dir.join("tollgate.db");
    // Everything into the database file, then the root page of `runs` (one page: two runs) gets a cell
    // pointer that points past its end.
    let root = tokio::runtime::Runtime::new()?.block_on(async {
        let mut connection = SqliteConnectOptions::from_str(&format!("sqlite://{}", db.display()))?.connect().await?;
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").await?;
        let root: i64 = sqlx::query_scalar("SELECT rootpage FROM sqlite_schema WHERE name = 'runs'")
            .fetch_one(&mut connection)
            .await?;
        let page_size: i64 = sqlx::query_scalar("PRAGMA page_size").fetch_one(&mut connection).await?;
        connection.close().await?;
        anyhow::Ok(usize::try_from((root - 1) * page_size)?)
    })?;
    let mut bytes = std::fs::read(&db)?;
    assert_eq!(bytes[root], 0x0d, "the root of `runs` is a leaf page");
    bytes[root + 8] = 0xff;
    bytes[root + 9] = 0xf0;
    std::fs::write(&db, &bytes)?;

    let doctor = tollgate(&dir, &["doctor", "--json"])?;
    assert_eq!(doctor.code, 1, "{doctor:?}");
    let summary = doctor.json()?;
    let problems = summary["database_problems"].to_string();
    assert!(problems.contains("malformed") || problems.contains("page"), "the check failed: {problems}");
    let unreadable = summary["unreadable_runs"].as_array().map_or(0, Vec::len);
    assert!(unreadable > 0 || !summary["incomplete"].is_null(), "{summary}");

    let serve = tollgate(&dir, &["serve", "--addr", "127.0.0.1:0"])?;
    assert_eq!(serve.code, 2, "{serve:?}");
    assert!(serve.stderr.contains("refusing to serve") && serve.stderr.contains("tollgate doctor"), "{serve:?}");
    Ok(())
}
