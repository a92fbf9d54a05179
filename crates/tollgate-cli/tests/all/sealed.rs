//! Encryption at rest with integrity (issue 31, item 9) through the real binary over a real SQLite file:
//! a plaintext suspension planted in a sealed run and an older sealed suspension put back are refused
//! and never executed; a keyed chain rewritten with plain sha256 fails `verify` and `doctor`; `doctor`
//! finds a suspension that is not the turn its log announced and a call started twice; `tollgate seal`
//! seals the plaintext of a database from before encryption, which then reads and goes on.

use anyhow::Result;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection, Executor};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use tollgate_agent_core::EventKind;
use tollgate_agent_core::event::event_hash;
use tollgate_agent_testkit::scratch_dir;

use crate::support::Outcome;

const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn plain(dir: &Path, args: &[&str]) -> Result<Outcome> {
    let _ = std::fs::remove_file(dir.join("tollgate.toml"));
    crate::support::tollgate_in(dir, args, &[])
}

fn keyed(dir: &Path, args: &[&str]) -> Result<Outcome> {
    std::fs::write(dir.join("tollgate.toml"), "[[privacy.keys]]\nid = \"k1\"\nkey = \"env:TEST_DATA_KEY\"\n")?;
    crate::support::tollgate_in(dir, args, &[("TEST_DATA_KEY", KEY)])
}

/// Runs SQL statements on the folder's database, behind Tollgate's back.
fn execute(dir: &Path, sql: &[String]) -> Result<()> {
    tokio::runtime::Runtime::new()?.block_on(async {
        let url = format!("sqlite://{}", dir.join("tollgate.db").display());
        let mut connection = SqliteConnectOptions::from_str(&url)?.connect().await?;
        for statement in sql {
            connection.execute(sqlx::AssertSqlSafe(statement.clone())).await?;
        }
        connection.close().await?;
        anyhow::Ok(())
    })
}

fn query_text(dir: &Path, sql: &str) -> Result<String> {
    tokio::runtime::Runtime::new()?.block_on(async {
        let url = format!("sqlite://{}", dir.join("tollgate.db").display());
        let mut connection = SqliteConnectOptions::from_str(&url)?.connect().await?;
        let text: String = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned())).fetch_one(&mut connection).await?;
        connection.close().await?;
        anyhow::Ok(text)
    })
}

fn note(dir: &Path) -> PathBuf {
    dir.join("workspace").join("note.txt")
}

fn count_started(dir: &Path, id: &str) -> Result<String> {
    query_text(
        dir,
        &format!("SELECT CAST(COUNT(*) AS TEXT) FROM events WHERE run_id = '{id}' AND kind = 'tool_started'"),
    )
}

/// A plaintext suspension (a genuine held turn, from a run written before encryption) planted by SQL
/// into a sealed waiting run: `show` and `approve` refuse it, naming the run, and the call never runs.
#[test]
fn a_planted_plaintext_suspension_is_refused_not_executed() -> Result<()> {
    let dir = scratch_dir("planted");
    let source = plain(&dir, &["run", "--detach", "hello"])?.waiting_id()?;
    let target = keyed(&dir, &["run", "--detach", "other"])?.waiting_id()?;
    execute(
        &dir,
        &[format!(
            "UPDATE runs SET (suspension, turn_digest, required_calls, decisions) = \
         (SELECT suspension, turn_digest, required_calls, decisions FROM runs WHERE id = '{source}') WHERE id = '{target}'"
        )],
    )?;
    for args in [vec!["show", target.as_str()], vec!["approve", target.as_str()]] {
        let refused = keyed(&dir, &args)?;
        assert_ne!(refused.code, 0, "{args:?}: {refused:?}");
        assert!(refused.stderr.contains(&target) && refused.stderr.contains("plaintext"), "{refused:?}");
    }
    assert!(!note(&dir).exists(), "the planted call ran");
    assert_eq!(count_started(&dir, &target)?, "0");
    Ok(())
}

/// The columns of a waiting run as they were, put back by SQL after the run was approved and
/// finished (all but its version and chain head): the old suspension does not open, the finished call
/// does not run a second time, and `doctor` names the run.
#[test]
fn an_older_sealed_suspension_put_back_does_not_run_the_call_twice() -> Result<()> {
    let dir = scratch_dir("replayed");
    let id = keyed(&dir, &["run", "--detach", "hello"])?.waiting_id()?;
    let columns = "status, output, termination_reason, finished_at, suspension, turn_digest, required_calls, \
                   decisions, expires_at, lease_owner, lease_expires_at";
    execute(&dir, &[format!("CREATE TABLE snapshot AS SELECT {columns} FROM runs WHERE id = '{id}'")])?;
    let approved = keyed(&dir, &["approve", &id])?;
    assert_eq!(approved.code, 0, "{approved:?}");
    let started = count_started(&dir, &id)?;
    std::fs::remove_file(note(&dir))?;
    execute(&dir, &[format!("UPDATE runs SET ({columns}) = (SELECT {columns} FROM snapshot) WHERE id = '{id}'")])?;

    let again = keyed(&dir, &["approve", &id])?;
    assert_ne!(again.code, 0, "{again:?}");
    assert!(again.stderr.contains(&id) && again.stderr.contains("does not decrypt"), "{again:?}");
    assert!(!note(&dir).exists(), "the finished call ran again");
    assert_eq!(count_started(&dir, &id)?, started, "no call started again");
    let doctor = keyed(&dir, &["doctor", "--json"])?;
    assert_eq!(doctor.code, 1, "{doctor:?}");
    assert_eq!(doctor.json()?["unreadable_runs"][0]["id"], id.as_str());
    Ok(())
}

/// An event row's unsealed columns: seq, at, kind, round, hash.
type EventRow = (u64, String, String, u32, String);

/// The unsealed columns of a run's events, as an attacker with the database but not the key reads them.
fn rows(dir: &Path, id: &str) -> Result<Vec<EventRow>> {
    tokio::runtime::Runtime::new()?.block_on(async {
        let url = format!("sqlite://{}", dir.join("tollgate.db").display());
        let mut connection = SqliteConnectOptions::from_str(&url)?.connect().await?;
        let rows: Vec<(i64, String, String, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT seq, at, kind, round, hash FROM events WHERE run_id = '{id}' ORDER BY seq"
        )))
        .fetch_all(&mut connection)
        .await?;
        connection.close().await?;
        Ok(rows.into_iter().map(|(seq, at, kind, round, hash)| (seq as u64, at, kind, round as u32, hash)).collect())
    })
}

/// A keyed chain edited by SQL — an event's payload replaced and every hash from there recomputed with
/// plain sha256, the run's head too — fails `verify` and `doctor`.
#[test]
fn a_keyed_chain_rewritten_with_sha256_fails_verify() -> Result<()> {
    let dir = scratch_dir("rechained");
    let id = keyed(&dir, &["run", "--detach", "hello"])?.waiting_id()?;
    assert_eq!(keyed(&dir, &["verify", &id])?.code, 0);
    let log = rows(&dir, &id)?;
    assert!(log.iter().all(|(.., hash)| hash.starts_with("hmac:k1:")), "the chain is keyed: {log:?}");
    // Every event's payload becomes `{"forged": seq}` and the chain is rebuilt with sha256.
    let mut prev = "0".repeat(64);
    let mut sql = Vec::new();
    for (seq, at, kind, round, _) in &log {
        let data = serde_json::json!({ "forged": seq });
        let kind = EventKind::parse(kind).ok_or_else(|| anyhow::anyhow!("kind {kind}"))?;
        prev = event_hash(&prev, *seq, at, kind, *round, &data);
        sql.push(format!("UPDATE events SET data = '{data}', hash = '{prev}' WHERE run_id = '{id}' AND seq = {seq}"));
    }
    sql.push(format!("UPDATE runs SET last_hash = '{prev}' WHERE id = '{id}'"));
    execute(&dir, &sql)?;
    let verified = keyed(&dir, &["verify", &id])?;
    assert_eq!(verified.code, 1, "{verified:?}");
    assert!(!verified.stdout.contains("intact"), "{verified:?}");
    assert_eq!(keyed(&dir, &["doctor"])?.code, 1);
    Ok(())
}

/// `doctor` compares a waiting run's suspension with its last `approval_requested` and looks for an
/// idempotency key started twice, naming the run each time.
#[test]
fn doctor_finds_a_swapped_suspension_and_a_call_started_twice() -> Result<()> {
    let dir = scratch_dir("doctor-log");
    let first = plain(&dir, &["run", "--detach", "first"])?.waiting_id()?;
    let second = plain(&dir, &["run", "--detach", "second"])?.waiting_id()?;
    let done = plain(&dir, &["run", "--detach", "third"])?.waiting_id()?;
    assert_eq!(plain(&dir, &["approve", &done])?.code, 0);
    assert_eq!(plain(&dir, &["doctor"])?.code, 0, "sound before the edits");

    // The first run's held turn swapped for the second's (the row's digest too).
    execute(
        &dir,
        &[format!(
            "UPDATE runs SET (suspension, turn_digest) = (SELECT suspension, turn_digest FROM runs WHERE id = '{second}') \
         WHERE id = '{first}'"
        )],
    )?;
    // The finished run's tool_started appended again, the chain and the head recomputed (a consistent log
    // in which the call ran twice).
    let (seq, at, round, data, head): (i64, String, i64, String, String) =
        tokio::runtime::Runtime::new()?.block_on(async {
            let url = format!("sqlite://{}", dir.join("tollgate.db").display());
            let mut connection = SqliteConnectOptions::from_str(&url)?.connect().await?;
            let row = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT r.last_seq, e.at, e.round, e.data, r.last_hash FROM runs r JOIN events e ON e.run_id = r.id \
                 WHERE r.id = '{done}' AND e.kind = 'tool_started'"
            )))
            .fetch_one(&mut connection)
            .await?;
            connection.close().await?;
            anyhow::Ok(row)
        })?;
    let next = seq as u64 + 1;
    let value: serde_json::Value = serde_json::from_str(&data)?;
    let hash = event_hash(&head, next, &at, EventKind::ToolStarted, round as u32, &value);
    execute(
        &dir,
        &[
            format!(
                "INSERT INTO events (run_id, seq, at, kind, round, data, hash) \
             VALUES ('{done}', {next}, '{at}', 'tool_started', {round}, '{data}', '{hash}')"
            ),
            format!("UPDATE runs SET last_seq = {next}, last_hash = '{hash}' WHERE id = '{done}'"),
        ],
    )?;

    let doctor = plain(&dir, &["doctor", "--json"])?;
    assert_eq!(doctor.code, 1, "{doctor:?}");
    let summary = doctor.json()?;
    assert_eq!(summary["chains_intact"], 3, "the edits keep every chain intact: {summary}");
    assert_eq!(summary["mismatched_suspensions"][0]["id"], first.as_str(), "{summary}");
    assert!(summary["mismatched_suspensions"][0]["message"].as_str().unwrap_or_default().contains("turn digest"));
    assert_eq!(summary["mismatched_suspensions"].as_array().map(Vec::len), Some(1), "{summary}");
    assert_eq!(summary["repeated_calls"][0]["id"], done.as_str(), "{summary}");
    assert!(summary["repeated_calls"][0]["message"].as_str().unwrap_or_default().contains("started twice"));
    let text = plain(&dir, &["doctor"])?;
    assert!(text.stdout.contains("suspensions not as announced: 1") && text.stdout.contains("calls started twice: 1"));
    Ok(())
}

/// A database written before encryption: with keys its runs are refused until `tollgate seal` seals
/// them; then they read, verify, are approved and run; a second `seal` finds nothing to do.
#[test]
fn seal_seals_old_plaintext_rows_which_then_read() -> Result<()> {
    let dir = scratch_dir("seal");
    let id = plain(&dir, &["run", "--detach", "hello"])?.waiting_id()?;
    let refused = keyed(&dir, &["show", &id])?;
    assert_ne!(refused.code, 0, "{refused:?}");
    assert!(refused.stderr.contains("tollgate seal"), "the error says what to do: {refused:?}");

    let sealed = keyed(&dir, &["seal", "--json"])?;
    assert_eq!(sealed.code, 0, "{sealed:?}");
    let report = sealed.json()?;
    assert_eq!((report["runs_checked"].as_u64(), report["runs_sealed"].as_u64()), (Some(1), Some(1)), "{report}");
    assert_eq!(report["columns_sealed"], 2, "the suspension and the decisions: {report}");
    let suspension = query_text(&dir, &format!("SELECT suspension FROM runs WHERE id = '{id}'"))?;
    assert!(suspension.starts_with("enc:v2:k1:"), "{suspension}");

    let shown = keyed(&dir, &["show", &id])?;
    assert_eq!(shown.code, 0, "{shown:?}");
    assert!(shown.stdout.contains("note.txt"), "{shown:?}");
    assert_eq!(keyed(&dir, &["verify", &id])?.code, 0);
    assert_eq!(keyed(&dir, &["approve", &id])?.code, 0);
    assert_eq!(std::fs::read_to_string(note(&dir))?, "hello");
    assert_eq!(keyed(&dir, &["verify", &id])?.code, 0, "old unkeyed events, new keyed ones");

    let again = keyed(&dir, &["seal"])?;
    assert_eq!(again.code, 0, "{again:?}");
    assert!(again.stdout.contains("runs sealed: 0"), "{again:?}");
    assert_eq!(plain(&dir, &["seal"])?.code, 2, "without keys there is nothing to seal with");
    Ok(())
}
