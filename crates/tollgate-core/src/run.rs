//! Runs as the store keeps them, and the transitions between their statuses.
//!
//! Every change to a run is a [`Transition`] applied by [`RunRecord::apply`], a pure function that both
//! store backends call inside their compare-and-set transaction. It is the one place that says which
//! status may follow which: a terminal run never changes again, a pending turn exists only while a run
//! waits (or is resuming from it), and finishing clears it.

use crate::suspension::{Decision, TurnDigest};
use crate::tool_loop::TerminationReason;
use crate::transcript::Usage;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Milliseconds since the Unix epoch, UTC.
pub type Millis = i64;

/// Formats a time as RFC 3339 UTC with milliseconds, e.g. `2026-11-29T10:00:00.000Z`.
pub fn rfc3339(at: Millis) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(at)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A run's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Created, not yet picked up.
    Queued,
    /// A process holds its lease and is driving the loop.
    Running,
    /// Held at the gate.
    WaitingForApproval,
    /// Finished normally (also at the iteration cap or the token budget).
    Completed,
    /// Finished with an error.
    Failed,
    /// Cancelled by a person.
    Cancelled,
    /// Its approval deadline passed with `on_expiry = "cancel"`.
    Expired,
}

impl RunStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::WaitingForApproval,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Expired,
    ];

    /// The snake_case name used in JSON, SQL and on screen.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::WaitingForApproval => "waiting_for_approval",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Expired => "expired",
        }
    }

    /// Parses the snake_case name.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Completed, failed, cancelled and expired runs never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled | RunStatus::Expired)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a run failed, as shown to users: never a secret, never a stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunError {
    /// A stable short name, e.g. `model_timeout`, `corrupt_suspension`.
    pub kind: String,
    /// A sentence for people.
    pub message: String,
}

/// A decision as recorded: who, when, what.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedDecision {
    /// The decision.
    #[serde(flatten)]
    pub decision: Decision,
    /// Who decided (a token's name, `local`, or `system` for expiry).
    pub actor: String,
    /// When.
    pub at: Millis,
}

/// The held turn of a run: its stored suspension and the decisions recorded so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    /// The suspension as stored (JSON text). Parsed by the runtime, which fails just this run when the
    /// text is corrupt or from an unknown version.
    pub suspension: String,
    /// Its turn digest, copied out so a stale decision is refused without parsing.
    pub turn_digest: TurnDigest,
    /// The calls that need a decision before the run can resume (ask-gated or in doubt).
    pub required: Vec<String>,
    /// Decisions recorded so far, by call id.
    pub decisions: BTreeMap<String, RecordedDecision>,
    /// The approval deadline, if the agent has one.
    pub expires_at: Option<Millis>,
}

/// Who is driving a running run, and until when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The process's owner id.
    pub owner: String,
    /// When another process may take the run over.
    pub expires_at: Millis,
}

/// A run as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// UUIDv7.
    pub id: String,
    /// The agent's name.
    pub agent: String,
    /// Current status.
    pub status: RunStatus,
    /// The run's input.
    pub input: String,
    /// The final output, once completed.
    pub output: Option<String>,
    /// Why it ended, once terminal.
    pub termination_reason: Option<TerminationReason>,
    /// Model calls so far.
    pub iterations: u32,
    /// Tokens so far.
    pub usage: Usage,
    /// Bumped by every transition; the compare-and-set key.
    pub version: u64,
    /// The actor who started it.
    pub created_by: String,
    /// Creation time.
    pub created_at: Millis,
    /// Last transition time.
    pub updated_at: Millis,
    /// When it became terminal.
    pub finished_at: Option<Millis>,
    /// Why it failed.
    pub error: Option<RunError>,
    /// The held turn: present while waiting, and kept while running a resume (so a crash can be recovered).
    pub pending: Option<Pending>,
    /// The lease, while running.
    pub lease: Option<Lease>,
    /// Number of the last event.
    pub last_seq: u64,
    /// Hash of the last event (64 zeros before the first).
    pub last_hash: String,
}

/// The 64-zero hash that precedes a run's first event.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

impl RunRecord {
    /// A new run, `running` under a lease (or `queued` when `lease` is None), version 1.
    pub fn new(
        id: String,
        agent: String,
        input: String,
        created_by: String,
        now: Millis,
        lease: Option<Lease>,
    ) -> Self {
        Self {
            id,
            agent,
            status: if lease.is_some() { RunStatus::Running } else { RunStatus::Queued },
            input,
            output: None,
            termination_reason: None,
            iterations: 0,
            usage: Usage::default(),
            version: 1,
            created_by,
            created_at: now,
            updated_at: now,
            finished_at: None,
            error: None,
            pending: None,
            lease,
            last_seq: 0,
            last_hash: GENESIS_HASH.to_owned(),
        }
    }

    /// Applies a transition, or says why it cannot apply. Pure: the caller persists the result.
    pub fn apply(&self, transition: &Transition, now: Millis) -> Result<RunRecord, TransitionError> {
        use RunStatus::*;
        let refuse = || TransitionError { from: self.status, transition: transition.name() };
        let mut next = self.clone();
        next.version += 1;
        next.updated_at = now;
        match transition {
            Transition::Claim { lease } => {
                if !matches!(self.status, Queued | WaitingForApproval | Running) {
                    return Err(refuse());
                }
                if self.status == WaitingForApproval {
                    let complete = self.pending.as_ref().is_some_and(|p| p.complete_for_resume());
                    if !complete {
                        return Err(refuse());
                    }
                }
                next.status = Running;
                next.lease = Some(lease.clone());
            }
            Transition::Suspend { pending, iterations, usage } => {
                if self.status != Running {
                    return Err(refuse());
                }
                next.status = WaitingForApproval;
                next.pending = Some(pending.clone());
                next.lease = None;
                next.iterations = *iterations;
                next.usage = *usage;
            }
            Transition::Decide { decisions, resume } => {
                if self.status != WaitingForApproval {
                    return Err(refuse());
                }
                let pending = next.pending.as_mut().ok_or_else(refuse)?;
                for (call_id, decision) in decisions {
                    if pending.decisions.contains_key(call_id) {
                        return Err(refuse());
                    }
                    pending.decisions.insert(call_id.clone(), decision.clone());
                }
                if let Some(lease) = resume {
                    if !pending.complete_for_resume() {
                        return Err(refuse());
                    }
                    next.status = Running;
                    next.lease = Some(lease.clone());
                }
            }
            Transition::Complete { output, reason, iterations, usage } => {
                if self.status != Running {
                    return Err(refuse());
                }
                next.status = Completed;
                next.output = output.clone();
                next.termination_reason = Some(*reason);
                next.iterations = *iterations;
                next.usage = *usage;
                next.finish(now);
            }
            Transition::Fail { error } => {
                if self.status.is_terminal() {
                    return Err(refuse());
                }
                next.status = Failed;
                next.termination_reason = Some(TerminationReason::Error);
                next.error = Some(error.clone());
                next.finish(now);
            }
            Transition::Cancel => {
                if self.status.is_terminal() {
                    return Err(refuse());
                }
                next.status = Cancelled;
                next.termination_reason = Some(TerminationReason::Cancelled);
                next.finish(now);
            }
            Transition::Expire => {
                if self.status != WaitingForApproval {
                    return Err(refuse());
                }
                next.status = Expired;
                next.termination_reason = Some(TerminationReason::Expired);
                next.finish(now);
            }
        }
        Ok(next)
    }

    fn finish(&mut self, now: Millis) {
        self.finished_at = Some(now);
        self.pending = None;
        self.lease = None;
    }
}

impl Pending {
    /// True when every call that needs a decision has one.
    pub fn complete_for_resume(&self) -> bool {
        self.required.iter().all(|id| self.decisions.contains_key(id))
    }
}

/// A change to a run. Which statuses each may follow is decided by [`RunRecord::apply`].
#[derive(Clone, Debug, PartialEq)]
pub enum Transition {
    /// queued → running; waiting (every decision in) → running; running → running (takeover after the
    /// lease expired). Takes the lease.
    Claim {
        /// The new lease.
        lease: Lease,
    },
    /// running → waiting_for_approval with a new held turn.
    Suspend {
        /// The held turn.
        pending: Pending,
        /// Model calls so far.
        iterations: u32,
        /// Tokens so far.
        usage: Usage,
    },
    /// waiting → waiting, recording decisions for calls not yet decided; with `resume`, the decisions
    /// must complete the set and the run goes on to running under that lease in the same transaction
    /// (so exactly one request — the one that completed the set — resumes it).
    Decide {
        /// The new decisions, by call id.
        decisions: Vec<(String, RecordedDecision)>,
        /// Claim the resume with this lease.
        resume: Option<Lease>,
    },
    /// running → completed.
    Complete {
        /// The final text.
        output: Option<String>,
        /// Why it ended.
        reason: TerminationReason,
        /// Model calls.
        iterations: u32,
        /// Tokens.
        usage: Usage,
    },
    /// any non-terminal → failed.
    Fail {
        /// Why.
        error: RunError,
    },
    /// any non-terminal → cancelled.
    Cancel,
    /// waiting → expired.
    Expire,
}

impl Transition {
    /// The transition's name, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            Transition::Claim { .. } => "claim",
            Transition::Suspend { .. } => "suspend",
            Transition::Decide { .. } => "decide",
            Transition::Complete { .. } => "complete",
            Transition::Fail { .. } => "fail",
            Transition::Cancel => "cancel",
            Transition::Expire => "expire",
        }
    }
}

/// A transition that does not apply to the run's current status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot {transition} a run that is {from}")]
pub struct TransitionError {
    /// The run's status.
    pub from: RunStatus,
    /// The transition tried.
    pub transition: &'static str,
}
