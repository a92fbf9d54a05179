//! Asking at the gate on a terminal (CLI.md: `run` on a terminal asks y / n / e with each call's preview).
//!
//! This is the boundary where that prompt plugs in: [`follow_at_gate`] is called by `run` when stdin is a
//! terminal and `--detach` was not given, with a run that waits for approval. It must return the run as
//! it finally settled (completed, failed, or waiting again if the person left it), deciding through
//! [`crate::commands::Context::decide_and_settle`] so the exit code follows the same rule as the deciding
//! commands.
//!
//! Not written yet: for now the run is left waiting, exactly as with `--detach`.

use crate::commands::Context;
use crate::exit::CliError;
use tollgate_core::RunRecord;

/// Follows a waiting run on the terminal and returns it as it settled. For now: leaves it waiting.
pub(crate) async fn follow_at_gate(_ctx: &Context, run: RunRecord) -> Result<RunRecord, CliError> {
    Ok(run)
}
