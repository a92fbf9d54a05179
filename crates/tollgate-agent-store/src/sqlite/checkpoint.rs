//! Checkpoints of the WAL back into the database file: the checkpointer thread, and the write
//! connection's hook that finishes a WAL grown long.
//!
//! The write connection's automatic checkpoint is off ([`set_up_wal`]): a checkpointer thread with its
//! own connection copies the WAL (`PASSIVE`: it never blocks the writer or the readers) every
//! [`CHECKPOINT_EVERY`] write operations and after a quiet spell, and a commit that leaves the WAL longer
//! than [`RESTART_FRAMES`] copies what is left itself, so that the WAL starts over instead of growing.

use super::Location;
use crate::codec::{Secrets, database_error};
use rusqlite::Connection;
use std::time::Duration;
use tollgate_agent_core::store::StoreError;

/// Write operations between two checkpoints of the WAL into the database file (each writes about ten
/// pages: some 40 MiB of WAL; checkpointing four times as often cost a third more CPU per run).
pub(super) const CHECKPOINT_EVERY: u64 = 1000;

/// A WAL holding more frames than this (16 MiB) after a commit is finished by the write connection
/// itself, so that the next transaction starts it over from the top: commits then overwrite the
/// file's blocks instead of growing it (a sync that must also record a new file size costs twice the
/// CPU).
const RESTART_FRAMES: i32 = 4096;

/// What a WAL file is cut back to when it starts over.
const WAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// The checkpointer also runs this long after the last one when writes came in meanwhile.
const CHECKPOINT_IDLE: Duration = Duration::from_secs(2);

/// Starts the checkpointer: a thread with its own connection that copies the WAL back into the
/// database file (`PRAGMA wal_checkpoint(PASSIVE)`: it never waits for, nor blocks, the writer or the
/// readers) when woken and after a quiet spell. The write connection's own automatic checkpoint is
/// off (see [`finish_a_long_wal`] for the one it does run). The thread ends when the returned sender is
/// dropped.
pub(super) fn start_checkpointer(
    location: Location,
    secrets: Secrets,
) -> Result<std::sync::mpsc::SyncSender<()>, StoreError> {
    let (wake, woken) = std::sync::mpsc::sync_channel::<()>(1);
    let connection =
        location.connect().map_err(|e| database_error(&secrets, "cannot open the SQLite checkpoint connection", &e))?;
    std::thread::Builder::new()
        .name("tollgate-sqlite-checkpoint".to_owned())
        .spawn(move || {
            // Woken every CHECKPOINT_EVERY write operations, or after a quiet spell (a checkpoint of an empty WAL
            // costs next to nothing).
            while let Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) = woken.recv_timeout(CHECKPOINT_IDLE) {
                if let Err(e) = connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                    tracing::warn!(error = %database_error(&secrets, "checkpoint", &e), "a WAL checkpoint failed");
                }
            }
        })
        .map_err(|e| StoreError::Database(format!("cannot start the SQLite checkpoint thread: {e}")))?;
    Ok(wake)
}

/// Called by SQLite on the write connection after each commit, with the frames now in the WAL. While
/// commits keep coming, the checkpointer (beside them) never copies the very last frames, and SQLite
/// starts a WAL over only once all of them are copied: past [`RESTART_FRAMES`], the write connection
/// copies what is left itself (`PASSIVE`, so never waiting on anyone), and its next transaction starts
/// the WAL over. Its own errors are not the commit's (which has happened): they are only logged, and
/// the next commit tries again.
fn finish_a_long_wal(wal: &rusqlite::hooks::Wal, frames: std::ffi::c_int) -> rusqlite::Result<()> {
    if frames > RESTART_FRAMES
        && let Err(e) = wal.checkpoint_v2(rusqlite::hooks::CheckpointMode::PASSIVE)
    {
        tracing::debug!(error = %e, "the write connection could not finish the WAL yet");
    }
    Ok(())
}

/// Sets up the write connection of a file database: SQLite's automatic checkpoint is off (the
/// checkpointer thread copies the WAL, see [`start_checkpointer`]), a WAL that starts over is cut back
/// to [`WAL_SIZE_LIMIT`], and a commit that leaves the WAL long finishes it ([`finish_a_long_wal`]).
pub(super) fn set_up_wal(write_connection: &Connection, secrets: &Secrets) -> Result<(), StoreError> {
    let configure = |pragma: &str, value: i64| {
        write_connection
            .pragma_update(None, pragma, value)
            .map_err(|e| database_error(secrets, "cannot configure the SQLite database", &e))
    };
    configure("wal_autocheckpoint", 0)?;
    configure("journal_size_limit", WAL_SIZE_LIMIT)?;
    write_connection.wal_hook(Some(finish_a_long_wal));
    Ok(())
}
