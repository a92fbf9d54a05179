//! Runs as the store keeps them, and the transitions between their statuses.
//!
//! Every change to a run is a [`Transition`] applied by [`RunRecord::apply`], a pure function that both
//! store backends call inside their compare-and-set transaction. It is the one place that says which
//! status may follow which: a terminal run never changes again, and a lease is taken over only once it
//! has expired. What each status carries is a [`RunState`], so a waiting run always has its held turn,
//! a running run its lease, and a finished run neither.

use crate::approval::{Approval, ApprovalCommand, ApprovalError};
use crate::metadata::Metadata;
use crate::suspension::{Decision, Decisions, StoredSuspension, TurnDigest};
use crate::tool::RunScope;
use crate::tool_loop::TerminationReason;
use crate::transcript::Usage;
use serde::{Deserialize, Serialize};
use tollgate_agent_protocol::{Actor, CallId, RunId};

/// Milliseconds since the Unix epoch, UTC.
pub type Millis = i64;

/// Formats a time as RFC 3339 UTC with milliseconds, e.g. `2026-11-29T10:00:00.000Z`. Total: a time
/// beyond chrono's range (±262,143 years) is written with an expanded, signed year (ISO 8601), e.g.
/// `+292278994-08-17T07:12:55.807Z`, never as some other time.
pub fn rfc3339(at: Millis) -> String {
    match chrono::DateTime::<chrono::Utc>::from_timestamp_millis(at) {
        Some(time) => time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        None => expanded_rfc3339(at),
    }
}

/// [`rfc3339`] for any `i64` of milliseconds, on the proleptic Gregorian calendar (civil-from-days, as
/// in Howard Hinnant's `chrono` algorithms; no intermediate overflows for any `i64` input).
fn expanded_rfc3339(at: Millis) -> String {
    const DAY: i64 = 86_400_000;
    let (days, in_day) = (at.div_euclid(DAY), at.rem_euclid(DAY));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (hour, minute) = (in_day / 3_600_000, in_day / 60_000 % 60);
    let (second, milli) = (in_day / 1_000 % 60, in_day % 1_000);
    format!("{year:+}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{milli:03}Z")
}

/// A run's status: the wire's type, so a run object's `status` and the runtime's compare.
pub use tollgate_agent_protocol::RunStatus;

/// Why a run failed, as shown to users (never a secret, never a stack), and its kind: the wire's types.
pub use tollgate_agent_protocol::{RunError, RunErrorKind};

/// A vote: one actor's decision on a held call's approval, and when it was cast (a decision as recorded;
/// a single approval is settled by its first vote, a quorum by several).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Vote {
    /// The decision.
    #[serde(flatten)]
    pub decision: Decision,
    /// Who decided (a token's name, `local`, or `system` for expiry).
    pub actor: Actor,
    /// When.
    pub at: Millis,
}

/// The held turn of a run: its stored suspension and the approvals of its calls.
#[derive(Clone, Debug, PartialEq)]
pub struct HeldTurn {
    /// The suspension as stored. Parsed by the runtime, which fails just this run when the text is
    /// corrupt or from an unknown version.
    pub suspension: StoredSuspension,
    /// Its turn digest, copied out so a stale decision is refused without parsing.
    pub turn_digest: TurnDigest,
    /// One approval per call that needs people before the run can resume (asks, or is in doubt), in the
    /// model's order: its requirement, the votes taken and where it stands.
    pub approvals: Vec<Approval>,
    /// The approval deadline, if the agent has one.
    pub expires_at: Option<Millis>,
}

impl HeldTurn {
    /// True when every approval is decided: the run can resume.
    pub fn complete_for_resume(&self) -> bool {
        self.approvals.iter().all(|a| a.decision().is_some())
    }

    /// The ids of the calls that need people, in the model's order.
    pub fn required(&self) -> impl Iterator<Item = &CallId> {
        self.approvals.iter().map(|a| &a.call_id)
    }

    /// The approval of this call, if it needs people.
    pub fn approval(&self, call_id: &CallId) -> Option<&Approval> {
        self.approvals.iter().find(|a| &a.call_id == call_id)
    }

    /// The decision of every decided approval, by call id: what a resume runs.
    pub fn decisions(&self) -> Decisions {
        self.approvals.iter().filter_map(|a| a.decision().map(|d| (a.call_id.clone(), d.clone()))).collect()
    }
}

/// Who is driving a running run, and until when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The process's owner id.
    pub owner: String,
    /// When another process may take the run over.
    pub expires_at: Millis,
}

impl Lease {
    /// True when another process may take the run over at `now`.
    pub fn expired_at(&self, now: Millis) -> bool {
        self.expires_at <= now
    }
}

/// Where a run is, with what only that status has: a running run has a lease, a waiting run has its
/// held turn, a finished run has neither (and its end).
#[derive(Clone, Debug, PartialEq)]
pub enum RunState {
    /// Waiting for a worker to pick it up: created and not started yet, or with every decision in and
    /// not resumed yet, or given back by a node that shut down while it drove it.
    Queued {
        /// The held turn the run resumes from when a worker claims it (none for a run not started, or
        /// given back before it ever held a turn).
        resuming: Option<HeldTurn>,
    },
    /// A process holds the lease and drives the loop.
    Running {
        /// Who drives it, until when.
        lease: Lease,
        /// The held turn this segment resumes from, kept until the segment ends so that a crash can
        /// be recovered from it (see the runtime's recovery).
        resuming: Option<HeldTurn>,
    },
    /// Held at the gate.
    Waiting(HeldTurn),
    /// Finished normally (also at the iteration cap or the token budget).
    Completed {
        /// The final text.
        output: Option<String>,
        /// Why it ended.
        reason: TerminationReason,
        /// When.
        finished_at: Millis,
    },
    /// Finished with an error.
    Failed {
        /// Why.
        error: RunError,
        /// When.
        finished_at: Millis,
    },
    /// Cancelled by a person.
    Cancelled {
        /// When.
        finished_at: Millis,
    },
    /// Its approval deadline passed with `on_expiry = "cancel"`.
    Expired {
        /// When.
        finished_at: Millis,
    },
}

impl RunState {
    /// The status this state is in.
    pub fn status(&self) -> RunStatus {
        match self {
            RunState::Queued { .. } => RunStatus::Queued,
            RunState::Running { .. } => RunStatus::Running,
            RunState::Waiting(_) => RunStatus::WaitingForApproval,
            RunState::Completed { .. } => RunStatus::Completed,
            RunState::Failed { .. } => RunStatus::Failed,
            RunState::Cancelled { .. } => RunStatus::Cancelled,
            RunState::Expired { .. } => RunStatus::Expired,
        }
    }
}

/// A run as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord {
    /// UUIDv7.
    pub id: RunId,
    /// The agent's name.
    pub agent: String,
    /// The run's input.
    pub input: String,
    /// What its starter gave every tool call of the run (empty when nothing); never changes.
    pub metadata: Metadata,
    /// The OpenTelemetry trace its spans belong to, when it was created with telemetry on
    /// ([`TraceContext`](crate::TraceContext)); never changes.
    pub trace: Option<crate::TraceContext>,
    /// Model calls so far.
    pub iterations: u32,
    /// Tokens so far.
    pub usage: Usage,
    /// Bumped by every transition; the compare-and-set key.
    pub version: u64,
    /// The actor who started it.
    pub created_by: Actor,
    /// Creation time.
    pub created_at: Millis,
    /// Last transition time.
    pub updated_at: Millis,
    /// Number of the last event.
    pub last_seq: u64,
    /// Hash of the last event (64 zeros before the first).
    pub last_hash: String,
    /// Its status and what only that status has.
    pub state: RunState,
}

/// The 64-zero hash that precedes a run's first event.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

impl RunRecord {
    /// A new run, `running` under a lease (or `queued` when `lease` is None), version 1, without metadata
    /// (see [`with_metadata`](Self::with_metadata)).
    pub fn new(id: RunId, agent: String, input: String, created_by: Actor, now: Millis, lease: Option<Lease>) -> Self {
        Self {
            id,
            agent,
            input,
            metadata: Metadata::new(),
            trace: None,
            iterations: 0,
            usage: Usage::default(),
            version: 1,
            created_by,
            created_at: now,
            updated_at: now,
            last_seq: 0,
            last_hash: GENESIS_HASH.to_owned(),
            state: match lease {
                Some(lease) => RunState::Running { lease, resuming: None },
                None => RunState::Queued { resuming: None },
            },
        }
    }

    /// The same run with this metadata.
    pub fn with_metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = metadata;
        self
    }

    /// The same run in this trace.
    pub fn with_trace(mut self, trace: Option<crate::TraceContext>) -> Self {
        self.trace = trace;
        self
    }

    /// What the loop runs this run's segments under: its id and metadata.
    pub fn scope(&self) -> RunScope {
        RunScope { run_id: self.id.clone(), metadata: self.metadata.clone() }
    }

    /// Current status.
    pub fn status(&self) -> RunStatus {
        self.state.status()
    }

    /// The held turn: while waiting, while queued to resume it, and while running a resume of it.
    pub fn held_turn(&self) -> Option<&HeldTurn> {
        match &self.state {
            RunState::Waiting(held)
            | RunState::Queued { resuming: Some(held) }
            | RunState::Running { resuming: Some(held), .. } => Some(held),
            _ => None,
        }
    }

    /// The lease, while running.
    pub fn lease(&self) -> Option<&Lease> {
        match &self.state {
            RunState::Running { lease, .. } => Some(lease),
            _ => None,
        }
    }

    /// The final output, once completed (if the model gave one).
    pub fn output(&self) -> Option<&str> {
        match &self.state {
            RunState::Completed { output, .. } => output.as_deref(),
            _ => None,
        }
    }

    /// Why it failed, once failed.
    pub fn error(&self) -> Option<&RunError> {
        match &self.state {
            RunState::Failed { error, .. } => Some(error),
            _ => None,
        }
    }

    /// Why it ended, once terminal.
    pub fn termination_reason(&self) -> Option<TerminationReason> {
        match &self.state {
            RunState::Completed { reason, .. } => Some(*reason),
            RunState::Failed { .. } => Some(TerminationReason::Error),
            RunState::Cancelled { .. } => Some(TerminationReason::Cancelled),
            RunState::Expired { .. } => Some(TerminationReason::Expired),
            RunState::Queued { .. } | RunState::Running { .. } | RunState::Waiting(_) => None,
        }
    }

    /// When it became terminal.
    pub fn finished_at(&self) -> Option<Millis> {
        match &self.state {
            RunState::Completed { finished_at, .. }
            | RunState::Failed { finished_at, .. }
            | RunState::Cancelled { finished_at }
            | RunState::Expired { finished_at } => Some(*finished_at),
            RunState::Queued { .. } | RunState::Running { .. } | RunState::Waiting(_) => None,
        }
    }

    /// Applies a transition, or says why it cannot apply. Pure: the caller persists the result.
    ///
    /// A takeover (a claim on a running run) applies only once the lease has expired at `now`: the
    /// stores call this inside their transaction on the row as it is there, so a renewal committed
    /// after the taker read the run (a renewal does not bump the version) still wins.
    pub fn apply(&self, transition: &Transition, now: Millis) -> Result<RunRecord, TransitionError> {
        let refuse = || TransitionError::NotAllowed { from: self.status(), transition: transition.name() };
        let terminal = self.status().is_terminal();
        let mut next = self.clone();
        next.version += 1;
        next.updated_at = now;
        next.state = match (&self.state, transition) {
            (RunState::Queued { resuming }, Transition::Claim { lease }) => {
                RunState::Running { lease: lease.clone(), resuming: resuming.clone() }
            }
            (RunState::Running { resuming, .. }, Transition::Release) => {
                RunState::Queued { resuming: resuming.clone() }
            }
            (RunState::Waiting(held), Transition::Claim { lease }) if held.complete_for_resume() => {
                RunState::Running { lease: lease.clone(), resuming: Some(held.clone()) }
            }
            (RunState::Running { lease: current, resuming }, Transition::Claim { lease }) => {
                if !current.expired_at(now) {
                    return Err(TransitionError::LeaseHeld {
                        owner: current.owner.clone(),
                        expires_at: current.expires_at,
                    });
                }
                RunState::Running { lease: lease.clone(), resuming: resuming.clone() }
            }
            (RunState::Running { lease, .. }, Transition::Suspend { held, iterations, usage }) => {
                next.iterations = *iterations;
                next.usage = *usage;
                if held.approvals.is_empty() {
                    // Nobody to ask (every call that asked was allowed by a grant): held and resumed at
                    // once, by the same lease, so a crash while it runs is recovered from the held turn.
                    RunState::Running { lease: lease.clone(), resuming: Some(held.clone()) }
                } else {
                    RunState::Waiting(held.clone())
                }
            }
            (RunState::Waiting(held), Transition::Vote { votes, resume, .. }) => {
                let mut held = held.clone();
                for (call_id, vote) in votes {
                    let Some(approval) = held.approvals.iter_mut().find(|a| &a.call_id == call_id) else {
                        return Err(refuse());
                    };
                    *approval = approval.apply(&ApprovalCommand::Vote(vote.clone()))?;
                }
                match resume {
                    Some(lease) if held.complete_for_resume() => {
                        RunState::Running { lease: lease.clone(), resuming: Some(held) }
                    }
                    Some(_) => return Err(refuse()),
                    None if held.complete_for_resume() => RunState::Queued { resuming: Some(held) },
                    None => RunState::Waiting(held),
                }
            }
            (RunState::Waiting(held), Transition::Escalate { at, notified }) => {
                // Every approval still open is escalated, once: a turn escalated already is refused
                // (its first open approval says so), so two sweeps racing escalate it once.
                let mut held = held.clone();
                let mut open = held.approvals.iter_mut().filter(|a| a.is_pending()).peekable();
                if open.peek().is_none() {
                    return Err(refuse());
                }
                for approval in open {
                    *approval = approval.apply(&ApprovalCommand::Escalate { at: *at, notified: notified.clone() })?;
                }
                RunState::Waiting(held)
            }
            (RunState::Running { .. }, Transition::Complete { output, reason, iterations, usage }) => {
                next.iterations = *iterations;
                next.usage = *usage;
                RunState::Completed { output: output.clone(), reason: *reason, finished_at: now }
            }
            (_, Transition::Fail { error }) if !terminal => RunState::Failed { error: error.clone(), finished_at: now },
            (_, Transition::Cancel) if !terminal => RunState::Cancelled { finished_at: now },
            (RunState::Waiting(_), Transition::Expire) => RunState::Expired { finished_at: now },
            _ => return Err(refuse()),
        };
        Ok(next)
    }
}

/// A change to a run. Which statuses each may follow is decided by [`RunRecord::apply`].
#[derive(Clone, Debug, PartialEq)]
pub enum Transition {
    /// queued → running (a worker picks the run up, and resumes its held turn if it has one); waiting
    /// (every decision in) → running; running → running (takeover, once the lease has expired). Takes
    /// the lease.
    Claim {
        /// The new lease.
        lease: Lease,
    },
    /// running → waiting_for_approval with a new held turn; running → running (resuming it at once) when
    /// the turn has no approval to wait for (every call that asked was allowed by a grant).
    Suspend {
        /// The held turn.
        held: HeldTurn,
        /// Model calls so far.
        iterations: u32,
        /// Tokens so far.
        usage: Usage,
    },
    /// waiting → waiting, recording votes on the approvals of the held turn, each applied by
    /// [`Approval::apply`] in order (a vote an approval refuses refuses the whole transition). With
    /// `resume`, the votes must settle the last open approval and the run goes on to running under that
    /// lease in the same transaction (so exactly one request — the one whose vote settled the turn —
    /// resumes it); without, votes that settle the turn queue the run for a worker (queued, its held
    /// turn kept), which resumes it.
    Vote {
        /// The votes, by call id, in the order they are taken.
        votes: Vec<(CallId, Vote)>,
        /// Claim the resume with this lease.
        resume: Option<Lease>,
        /// Grants the votes make (`remember` on an approval), created in the same transaction; the
        /// run's record does not change for them.
        remember: Vec<crate::grant::GrantRecord>,
    },
    /// waiting → waiting, escalating every open approval of the held turn ([`ApprovalCommand::Escalate`]):
    /// the turn waited the agent's `escalate_after` and `notified` were told. Refused for a turn already
    /// escalated, so it happens once per held turn.
    Escalate {
        /// When.
        at: Millis,
        /// The notifiers told (their configured names).
        notified: Vec<String>,
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
    /// running → queued, keeping the held turn it resumes: the lease's holder gives the run back (a node
    /// shutting down), so that a worker of any node claims it at once instead of waiting for the lease
    /// to expire.
    Release,
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
            Transition::Vote { .. } => "vote",
            Transition::Escalate { .. } => "escalate",
            Transition::Complete { .. } => "complete",
            Transition::Fail { .. } => "fail",
            Transition::Cancel => "cancel",
            Transition::Expire => "expire",
            Transition::Release => "release",
        }
    }
}

/// A transition that does not apply to the run as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransitionError {
    /// The transition does not follow the run's status.
    #[error("cannot {transition} a run that is {from}")]
    NotAllowed {
        /// The run's status.
        from: RunStatus,
        /// The transition tried.
        transition: &'static str,
    },
    /// An approval of the held turn refused a vote (closed, the same actor twice, an action a quorum
    /// does not take).
    #[error(transparent)]
    Approval(#[from] ApprovalError),
    /// A takeover of a running run whose lease has not expired (it was renewed since the taker read the
    /// run). Stores report it as a conflict.
    #[error("cannot take over a run whose lease, held by {owner}, is valid until {}", rfc3339(*expires_at))]
    LeaseHeld {
        /// Who holds the lease.
        owner: String,
        /// Until when.
        expires_at: Millis,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::Requirement;

    const T: Millis = 1_764_410_400_000;

    fn lease(owner: &str, expires_at: Millis) -> Lease {
        Lease { owner: owner.to_owned(), expires_at }
    }

    fn held(required: &[&str]) -> HeldTurn {
        HeldTurn {
            suspension: StoredSuspension::from_stored("{\"schema_version\":1}".to_owned()),
            turn_digest: TurnDigest(format!("sha256:{}", "a".repeat(64))),
            approvals: required
                .iter()
                .map(|c| Approval::pending(format!("ap-{c}").into(), "run", *c, Requirement::SINGLE, None))
                .collect(),
            expires_at: None,
        }
    }

    fn running() -> RunRecord {
        RunRecord::new("run".into(), "demo".into(), "hi".into(), "alice".into(), T, Some(lease("node-a", T + 30_000)))
    }

    fn suspend(required: &[&str]) -> Transition {
        Transition::Suspend { held: held(required), iterations: 1, usage: Usage::default() }
    }

    #[test]
    fn a_takeover_applies_only_once_the_lease_has_expired() -> Result<(), TransitionError> {
        let run = running();
        let takeover = Transition::Claim { lease: lease("node-b", T + 90_000) };
        // Planned on the lease as read, but the lease is (still, or again after a renewal) valid at `now`.
        assert_eq!(
            run.apply(&takeover, T + 29_999),
            Err(TransitionError::LeaseHeld { owner: "node-a".into(), expires_at: T + 30_000 })
        );
        let taken = run.apply(&takeover, T + 30_000)?;
        assert_eq!(taken.lease(), Some(&lease("node-b", T + 90_000)));
        assert_eq!(taken.version, run.version + 1);

        // A held turn with nobody to ask (every call that asked was allowed by a grant) is resumed at once
        // under the same lease; a takeover of a resuming run keeps the held turn, which recovery reads.
        let resuming = run.apply(&suspend(&[]), T + 1)?;
        assert_eq!(resuming.status(), RunStatus::Running);
        assert_eq!(resuming.lease(), run.lease());
        assert!(resuming.held_turn().is_some());
        assert!(matches!(resuming.apply(&takeover, T + 29_999), Err(TransitionError::LeaseHeld { .. })));
        let taken = resuming.apply(&takeover, T + 30_000)?;
        assert_eq!(taken.held_turn(), resuming.held_turn());
        Ok(())
    }

    #[test]
    fn what_a_run_carries_follows_its_status() -> Result<(), TransitionError> {
        let waiting = running().apply(&suspend(&["call_1"]), T + 1)?;
        assert_eq!(waiting.status(), RunStatus::WaitingForApproval);
        assert!(waiting.held_turn().is_some() && waiting.lease().is_none());

        let decision = Vote { decision: Decision::Approve, actor: "bob".into(), at: T + 2 };
        let early = waiting.apply(&Transition::Claim { lease: lease("node-a", T + 9) }, T + 2);
        assert_eq!(
            early,
            Err(TransitionError::NotAllowed { from: RunStatus::WaitingForApproval, transition: "claim" })
        );
        let resumed = waiting.apply(
            &Transition::Vote {
                votes: vec![("call_1".into(), decision)],
                resume: Some(lease("node-a", T + 30_002)),
                remember: Vec::new(),
            },
            T + 2,
        )?;
        assert_eq!(resumed.status(), RunStatus::Running);
        assert_eq!(resumed.held_turn().map(|h| h.decisions().len()), Some(1), "kept while the resume runs");

        let done = resumed.apply(
            &Transition::Complete {
                output: Some("ok".into()),
                reason: TerminationReason::Completed,
                iterations: 2,
                usage: Usage::default(),
            },
            T + 3,
        )?;
        assert_eq!(done.status(), RunStatus::Completed);
        assert_eq!(
            (done.output(), done.termination_reason(), done.finished_at()),
            (Some("ok"), Some(TerminationReason::Completed), Some(T + 3))
        );
        assert!(done.held_turn().is_none() && done.lease().is_none() && done.error().is_none());
        assert_eq!(
            done.apply(&Transition::Cancel, T + 4),
            Err(TransitionError::NotAllowed { from: RunStatus::Completed, transition: "cancel" })
        );

        let cancelled = waiting.apply(&Transition::Cancel, T + 5)?;
        assert_eq!(cancelled.termination_reason(), Some(TerminationReason::Cancelled));
        assert!(cancelled.held_turn().is_none() && cancelled.output().is_none());
        let error = RunError::new(RunErrorKind::Store, "m");
        let failed = resumed.apply(&Transition::Fail { error: error.clone() }, T + 6)?;
        assert_eq!((failed.error(), failed.termination_reason()), (Some(&error), Some(TerminationReason::Error)));
        assert!(failed.held_turn().is_none() && failed.lease().is_none());
        Ok(())
    }

    #[test]
    fn every_time_formats_as_itself() {
        assert_eq!(rfc3339(T), "2025-11-29T10:00:00.000Z");
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999Z");
        // Beyond chrono's range: an expanded year, as java.time writes these instants.
        assert_eq!(rfc3339(i64::MAX), "+292278994-08-17T07:12:55.807Z");
        assert_eq!(rfc3339(i64::MIN), "-292275055-05-16T16:47:04.192Z");
        // The two ways agree where both apply (four-digit years).
        for at in [T, 0, -1, 951_782_400_000, 253_402_300_799_999, -30_610_224_000_000] {
            assert_eq!(expanded_rfc3339(at).trim_start_matches('+'), rfc3339(at), "{at}");
        }
    }
}
