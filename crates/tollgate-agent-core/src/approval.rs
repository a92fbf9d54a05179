//! An approval: the durable record of one held call waiting for people, and the rules of its votes.
//!
//! Every change to an approval is an [`ApprovalCommand`] applied by [`Approval::apply`], a pure function
//! beside [`RunRecord::apply`](crate::RunRecord::apply): the caller persists what it returns. It is the one
//! place that says how votes add up, and it promises:
//!
//! - a pending approval is decided by the first `deny` vote, or by the `approve` vote of its N-th distinct
//!   actor (N = [`Approval::required`]); with N = 1 its first vote decides it, whatever the action, exactly
//!   as a single decision does today;
//! - so it is decided with a decision that runs the call (`approve` or `edit`) only once it holds approving
//!   votes from at least N distinct actors and no `deny`;
//! - a quorum approval (N ≥ 2) takes only `approve` and `deny`;
//! - a decided, expired or cancelled approval never changes again;
//! - a refused command changes nothing (`apply` returns an error and the record stays as it was).
//!
//! Escalation is a marker on a pending approval, not a state of its own: an escalated approval keeps
//! waiting and keeps taking votes, and is escalated at most once (V2.md: once per held turn).
//!
//! A run's held turn keeps one approval per call that needs people ([`HeldTurn::approvals`](crate::HeldTurn)),
//! stored with the run's row, so that a vote and the run's own transition are one compare-and-set:
//! [`Transition::Vote`](crate::Transition::Vote) applies each vote here, and the vote that settles the
//! last open approval claims the resume in the same transaction (docs/design.md, "Approvals").

use crate::run::{Millis, Vote};
use crate::suspension::Decision;
use serde::{Deserialize, Serialize};
use std::num::NonZeroU32;
pub use tollgate_agent_protocol::ApprovalId;
use tollgate_agent_protocol::{Actor, CallId, RunId};

/// What a call needs before it counts as approved: `approve` votes from this many distinct actors (at
/// least 1). Stored as `{"approvals": N}`; 0 is refused when read.
///
/// A requirement of 2 or more is a quorum (a policy rule's `approvals = N`): it takes only `approve` and
/// `deny`, since an edit or a response cannot be agreed by several people one vote at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Requirement {
    approvals: NonZeroU32,
}

impl Requirement {
    /// One approval, any action: today's single decision.
    pub const SINGLE: Requirement = Requirement { approvals: NonZeroU32::MIN };

    /// `approve` from `approvals` distinct actors.
    pub fn new(approvals: NonZeroU32) -> Requirement {
        Requirement { approvals }
    }

    /// How many distinct actors must approve.
    pub fn approvals(self) -> u32 {
        self.approvals.get()
    }

    /// True for 2 or more approvals.
    pub fn is_quorum(self) -> bool {
        self.approvals() >= 2
    }

    /// True when a vote with this action is taken: every action for a single approval, only `approve`
    /// and `deny` for a quorum.
    pub fn allows(self, decision: &Decision) -> bool {
        !self.is_quorum() || matches!(decision, Decision::Approve | Decision::Deny { .. })
    }
}

impl Default for Requirement {
    fn default() -> Requirement {
        Requirement::SINGLE
    }
}

/// A pending approval's escalation: when it was escalated and whom that notified.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Escalation {
    /// When.
    pub at: Millis,
    /// The notifiers it went to (their configured names).
    pub notified: Vec<String>,
}

/// Where an approval stands. Only [`ApprovalState::Pending`] takes commands; the other states are final.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ApprovalState {
    /// Waiting for votes.
    Pending {
        /// The deadline, if the agent has one. Informational for the deadline sweep, which applies it
        /// (with a `deny` vote by `system`, or [`ApprovalCommand::Expire`]): until then a vote is taken
        /// even after it, as today's decisions are.
        due: Option<Millis>,
        /// Set once the approval was escalated; it keeps waiting and taking votes.
        escalated: Option<Escalation>,
    },
    /// Settled by a vote.
    Decided {
        /// What happens to the call: `approve` (its N-th distinct approval), `edit`, `respond` (a single
        /// approval's only vote) or `deny` (the first deny, with its reason).
        decision: Decision,
        /// When the deciding vote was cast.
        at: Millis,
    },
    /// Its deadline passed with the run ended `expired`; it took no decision.
    Expired {
        /// When.
        at: Millis,
    },
    /// Its run was cancelled before it was decided.
    Cancelled {
        /// When.
        at: Millis,
    },
}

impl ApprovalState {
    /// The state's name: `pending`, `decided`, `expired` or `cancelled`.
    pub fn name(&self) -> &'static str {
        match self {
            ApprovalState::Pending { .. } => "pending",
            ApprovalState::Decided { .. } => "decided",
            ApprovalState::Expired { .. } => "expired",
            ApprovalState::Cancelled { .. } => "cancelled",
        }
    }
}

/// A change to an approval. Which states each applies to is decided by [`Approval::apply`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ApprovalCommand {
    /// A person's (or `system`'s) vote: its action, actor and time, as a decision is recorded today.
    /// Pending → decided when it settles the approval, pending → pending (one more approval) otherwise.
    Vote(Vote),
    /// Pending → expired: the run's deadline passed and the run ended `expired`.
    Expire {
        /// When.
        at: Millis,
    },
    /// Pending → pending, escalated: the approval waited too long and more people were notified.
    Escalate {
        /// When.
        at: Millis,
        /// The notifiers told.
        notified: Vec<String>,
    },
    /// Pending → cancelled: the run was cancelled.
    Cancel {
        /// When.
        at: Millis,
    },
}

impl ApprovalCommand {
    /// The command's name, for errors: `vote`, `expire`, `escalate` or `cancel`.
    pub fn name(&self) -> &'static str {
        match self {
            ApprovalCommand::Vote(_) => "vote",
            ApprovalCommand::Expire { .. } => "expire",
            ApprovalCommand::Escalate { .. } => "escalate",
            ApprovalCommand::Cancel { .. } => "cancel",
        }
    }
}

/// A command an approval refuses. Nothing changed.
///
/// [`ApprovalError::is_conflict`] tells the two HTTP answers apart: a conflict with what others did or
/// with the approval's state (409 `conflict`), or a vote that does not fit the call (422
/// `invalid-decision`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// The approval is decided, expired or cancelled: it takes no vote and no command. 409.
    #[error("the approval of call `{call_id}` is {state} and takes no {command}")]
    Closed {
        /// The call.
        call_id: CallId,
        /// The approval's state: `decided`, `expired` or `cancelled`.
        state: &'static str,
        /// The command refused.
        command: &'static str,
    },
    /// This actor already approved this quorum call; approvals must come from distinct actors. 409.
    #[error("{actor} already approved call `{call_id}`: its approvals must come from distinct people")]
    AlreadyApproved {
        /// The call.
        call_id: CallId,
        /// Who approved twice.
        actor: Actor,
    },
    /// An `edit` or `respond` vote on a quorum call, which takes only `approve` and `deny`. 422.
    #[error("call `{call_id}` needs {required} approvals and takes only approve or deny, not {action}")]
    QuorumAction {
        /// The call.
        call_id: CallId,
        /// The refused action.
        action: &'static str,
        /// How many approvals the call needs.
        required: u32,
    },
    /// The approval was escalated already (escalation notifies once per held turn). 409.
    #[error("the approval of call `{call_id}` was escalated already")]
    AlreadyEscalated {
        /// The call.
        call_id: CallId,
    },
}

impl ApprovalError {
    /// A stable short name for the error kind: `approval_closed`, `already_approved`,
    /// `quorum_refuses_action` or `already_escalated`.
    pub fn kind(&self) -> &'static str {
        match self {
            ApprovalError::Closed { .. } => "approval_closed",
            ApprovalError::AlreadyApproved { .. } => "already_approved",
            ApprovalError::QuorumAction { .. } => "quorum_refuses_action",
            ApprovalError::AlreadyEscalated { .. } => "already_escalated",
        }
    }

    /// True for a conflict (HTTP 409): the approval's state or another vote is in the way, and the same
    /// request could have succeeded earlier. False for a vote that can never fit this call (HTTP 422).
    pub fn is_conflict(&self) -> bool {
        match self {
            ApprovalError::Closed { .. } | ApprovalError::AlreadyApproved { .. } => true,
            ApprovalError::AlreadyEscalated { .. } => true,
            ApprovalError::QuorumAction { .. } => false,
        }
    }
}

/// One held call's wait for people: who must approve it, the votes cast so far, and where it stands.
///
/// Votes are kept in every state, in the order they were taken, so a decided, expired or cancelled
/// approval still says who voted. The requirement is kept too: it does not change with the state.
///
/// Stored as one flat JSON object, without the fields a fresh approval leaves at their defaults: `id`,
/// `run`, `root` (absent when it is the run itself), `call_id`, `approvals` (absent for 1), `votes`
/// (absent when none), `state` (`pending`, `decided`, `expired`, `cancelled`) and that state's own
/// fields — `due` and `escalated` when set, `decision` and `at`, or `at`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Approval {
    /// The approval's id.
    pub id: ApprovalId,
    /// The id of the run that holds the call.
    pub run: RunId,
    /// The id of that run's root run, where it is decided: the run itself for a top run, the top of the
    /// tree for a sub-agent's run.
    pub root: RunId,
    /// The held call's id.
    pub call_id: CallId,
    /// What the call needs before it counts as approved.
    pub requirement: Requirement,
    /// The votes taken, oldest first (refused votes are not kept).
    pub votes: Vec<Vote>,
    /// Where it stands.
    pub state: ApprovalState,
}

/// The state's name in an approval's stored form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum StateName {
    Pending,
    Decided,
    Expired,
    Cancelled,
}

/// An approval as written: flat, borrowing the record ([`Approval`]'s stored form).
#[derive(Serialize)]
struct ApprovalOut<'a> {
    id: &'a ApprovalId,
    run: &'a RunId,
    #[serde(skip_serializing_if = "Option::is_none")]
    root: Option<&'a RunId>,
    call_id: &'a CallId,
    #[serde(skip_serializing_if = "Option::is_none")]
    approvals: Option<u32>,
    #[serde(skip_serializing_if = "<[Vote]>::is_empty")]
    votes: &'a [Vote],
    state: StateName,
    #[serde(skip_serializing_if = "Option::is_none")]
    due: Option<Millis>,
    #[serde(skip_serializing_if = "Option::is_none")]
    escalated: Option<&'a Escalation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decision: Option<&'a Decision>,
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<Millis>,
}

/// An approval as read back ([`Approval`]'s stored form); a combination no state has is refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApprovalIn {
    id: ApprovalId,
    run: RunId,
    #[serde(default)]
    root: Option<RunId>,
    call_id: CallId,
    #[serde(default)]
    approvals: Option<NonZeroU32>,
    #[serde(default)]
    votes: Vec<Vote>,
    state: StateName,
    #[serde(default)]
    due: Option<Millis>,
    #[serde(default)]
    escalated: Option<Escalation>,
    #[serde(default)]
    decision: Option<Decision>,
    #[serde(default)]
    at: Option<Millis>,
}

impl Serialize for Approval {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (state, due, escalated, decision, at) = match &self.state {
            ApprovalState::Pending { due, escalated } => (StateName::Pending, *due, escalated.as_ref(), None, None),
            ApprovalState::Decided { decision, at } => (StateName::Decided, None, None, Some(decision), Some(*at)),
            ApprovalState::Expired { at } => (StateName::Expired, None, None, None, Some(*at)),
            ApprovalState::Cancelled { at } => (StateName::Cancelled, None, None, None, Some(*at)),
        };
        ApprovalOut {
            id: &self.id,
            run: &self.run,
            root: (self.root != self.run).then_some(&self.root),
            call_id: &self.call_id,
            approvals: self.requirement.is_quorum().then(|| self.requirement.approvals()),
            votes: &self.votes,
            state,
            due,
            escalated,
            decision,
            at,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Approval {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let ApprovalIn { id, run, root, call_id, approvals, votes, state, due, escalated, decision, at } =
            ApprovalIn::deserialize(deserializer)?;
        if state != StateName::Pending && (due.is_some() || escalated.is_some()) {
            return Err(serde::de::Error::custom(format!(
                "approval of call `{call_id}` has a due time or an escalation and is not pending"
            )));
        }
        let state = match (state, decision, at) {
            (StateName::Pending, None, None) => ApprovalState::Pending { due, escalated },
            (StateName::Decided, Some(decision), Some(at)) => ApprovalState::Decided { decision, at },
            (StateName::Expired, None, Some(at)) => ApprovalState::Expired { at },
            (StateName::Cancelled, None, Some(at)) => ApprovalState::Cancelled { at },
            (state, decision, at) => {
                return Err(serde::de::Error::custom(format!(
                    "approval of call `{call_id}` is {state:?} with {} and {}: no approval is in that state",
                    if decision.is_some() { "a decision" } else { "no decision" },
                    if at.is_some() { "a time" } else { "no time" },
                )));
            }
        };
        let requirement = approvals.map_or(Requirement::SINGLE, Requirement::new);
        let root = root.unwrap_or_else(|| run.clone());
        Ok(Approval { id, run, root, call_id, requirement, votes, state })
    }
}

impl Approval {
    /// A pending approval of a top run's call (its root is the run itself), with no votes.
    pub fn pending(
        id: ApprovalId,
        run: impl Into<RunId>,
        call_id: impl Into<CallId>,
        requirement: Requirement,
        due: Option<Millis>,
    ) -> Approval {
        let run = run.into();
        Approval {
            id,
            root: run.clone(),
            run,
            call_id: call_id.into(),
            requirement,
            votes: Vec::new(),
            state: ApprovalState::Pending { due, escalated: None },
        }
    }

    /// The same approval, for a call of a sub-agent's run decided at the root run `root`.
    pub fn under_root(mut self, root: impl Into<RunId>) -> Approval {
        self.root = root.into();
        self
    }

    /// How many distinct actors must approve (`pending.calls[].approvals.required`).
    pub fn required(&self) -> u32 {
        self.requirement.approvals()
    }

    /// The distinct actors whose vote lets the call run (`approve`, or `edit` on a single approval), in
    /// the order they voted (`pending.calls[].approvals.given`; empty before any approval).
    pub fn approvals_given(&self) -> Vec<&Actor> {
        let mut given: Vec<&Actor> = Vec::new();
        for vote in &self.votes {
            let approving = matches!(vote.decision, Decision::Approve | Decision::Edit { .. });
            if approving && !given.contains(&&vote.actor) {
                given.push(&vote.actor);
            }
        }
        given
    }

    /// True while the approval takes votes.
    pub fn is_pending(&self) -> bool {
        matches!(self.state, ApprovalState::Pending { .. })
    }

    /// Its escalation, while it is pending and was escalated.
    pub fn escalated(&self) -> Option<&Escalation> {
        match &self.state {
            ApprovalState::Pending { escalated, .. } => escalated.as_ref(),
            _ => None,
        }
    }

    /// The decision it settled on, once decided.
    pub fn decision(&self) -> Option<&Decision> {
        match &self.state {
            ApprovalState::Decided { decision, .. } => Some(decision),
            _ => None,
        }
    }

    /// The vote that settled a decided approval, with the decision it settled on: the last vote taken
    /// (its `approve` for a quorum, its only vote for a single approval, the first `deny`).
    pub fn settled_by(&self) -> Option<Vote> {
        let ApprovalState::Decided { decision, at } = &self.state else { return None };
        let actor = self.votes.last().map_or_else(Actor::default, |v| v.actor.clone());
        Some(Vote { decision: decision.clone(), actor, at: *at })
    }

    /// Applies a command, or says why it cannot apply. Pure: the caller persists the result.
    ///
    /// A vote is checked in this order: the approval must be pending (else [`ApprovalError::Closed`]),
    /// its action allowed by the requirement ([`ApprovalError::QuorumAction`]), and an `approve` must
    /// come from an actor who has not approved yet ([`ApprovalError::AlreadyApproved`]). A `deny` is
    /// taken from anyone, including an actor who approved earlier: one deny denies.
    pub fn apply(&self, command: &ApprovalCommand) -> Result<Approval, ApprovalError> {
        let ApprovalState::Pending { due, escalated } = &self.state else {
            return Err(ApprovalError::Closed {
                call_id: self.call_id.clone(),
                state: self.state.name(),
                command: command.name(),
            });
        };
        let mut next = self.clone();
        next.state = match command {
            ApprovalCommand::Vote(vote) => {
                if !self.requirement.allows(&vote.decision) {
                    return Err(ApprovalError::QuorumAction {
                        call_id: self.call_id.clone(),
                        action: vote.decision.action(),
                        required: self.required(),
                    });
                }
                if matches!(vote.decision, Decision::Approve) && self.approvals_given().contains(&&vote.actor) {
                    return Err(ApprovalError::AlreadyApproved {
                        call_id: self.call_id.clone(),
                        actor: vote.actor.clone(),
                    });
                }
                next.votes.push(vote.clone());
                // Counted on the new record, so the vote just taken is among the approvals.
                let settles = match vote.decision {
                    Decision::Approve => next.approvals_given().len() >= self.requirement.approvals() as usize,
                    Decision::Edit { .. } | Decision::Deny { .. } | Decision::Respond { .. } => true,
                };
                if settles {
                    ApprovalState::Decided { decision: vote.decision.clone(), at: vote.at }
                } else {
                    self.state.clone()
                }
            }
            ApprovalCommand::Escalate { at, notified } => {
                if escalated.is_some() {
                    return Err(ApprovalError::AlreadyEscalated { call_id: self.call_id.clone() });
                }
                let escalated = Some(Escalation { at: *at, notified: notified.clone() });
                ApprovalState::Pending { due: *due, escalated }
            }
            ApprovalCommand::Expire { at } => ApprovalState::Expired { at: *at },
            ApprovalCommand::Cancel { at } => ApprovalState::Cancelled { at: *at },
        };
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T: Millis = 1_764_410_400_000;

    fn vote(actor: &str, decision: Decision) -> ApprovalCommand {
        ApprovalCommand::Vote(Vote { decision, actor: actor.into(), at: T + 10 })
    }

    fn approve(actor: &str) -> ApprovalCommand {
        vote(actor, Decision::Approve)
    }

    fn quorum(n: u32) -> Requirement {
        Requirement::new(NonZeroU32::new(n).unwrap())
    }

    fn approval(requirement: Requirement) -> Approval {
        Approval::pending("ap-1".into(), "run-1", "call_1", requirement, Some(T + 1_000))
    }

    fn applied(approval: Approval, commands: &[ApprovalCommand]) -> Approval {
        commands.iter().fold(approval, |a, c| a.apply(c).unwrap())
    }

    /// Every state a stored approval can be in, by name.
    fn states() -> Vec<(&'static str, Approval)> {
        let single = approval(Requirement::SINGLE);
        let two = approval(quorum(2));
        vec![
            ("single, no vote", single.clone()),
            ("quorum of 2, no vote", two.clone()),
            ("quorum of 2, alice approved", applied(two.clone(), &[approve("alice")])),
            ("quorum of 2, escalated", applied(two, &[ApprovalCommand::Escalate { at: T, notified: vec![] }])),
            ("decided", applied(single.clone(), &[approve("alice")])),
            ("expired", applied(single.clone(), &[ApprovalCommand::Expire { at: T }])),
            ("cancelled", applied(single, &[ApprovalCommand::Cancel { at: T }])),
        ]
    }

    /// Every command, by name.
    fn commands() -> Vec<(&'static str, ApprovalCommand)> {
        vec![
            ("approve by alice", approve("alice")),
            ("approve by bob", approve("bob")),
            ("deny by alice", vote("alice", Decision::Deny { reason: "no".into() })),
            ("edit by bob", vote("bob", Decision::Edit { arguments: json!({"path": "b"}) })),
            ("respond by bob", vote("bob", Decision::Respond { result: "done".into() })),
            ("expire", ApprovalCommand::Expire { at: T + 20 }),
            ("escalate", ApprovalCommand::Escalate { at: T + 20, notified: vec!["ops".into()] }),
            ("cancel", ApprovalCommand::Cancel { at: T + 20 }),
        ]
    }

    /// What an outcome looks like in the table: the new state (with the decision's action, and how many
    /// approvals it holds while pending), or the error's kind.
    fn outcome(result: Result<Approval, ApprovalError>) -> String {
        match result {
            Ok(a) => match &a.state {
                ApprovalState::Decided { decision, .. } => format!("decided {}", decision.action()),
                ApprovalState::Pending { escalated, .. } => {
                    let mark = if escalated.is_some() { ", escalated" } else { "" };
                    format!("pending {}/{}{mark}", a.approvals_given().len(), a.required())
                }
                state => state.name().to_owned(),
            },
            Err(e) => format!("error {}", e.kind()),
        }
    }

    #[test]
    fn every_state_takes_every_command_as_the_table_says() {
        // Columns: the commands of `commands()`, in order.
        let table: [(&str, [&str; 8]); 7] = [
            (
                "single, no vote",
                [
                    "decided approve",
                    "decided approve",
                    "decided deny",
                    "decided edit",
                    "decided respond",
                    "expired",
                    "pending 0/1, escalated",
                    "cancelled",
                ],
            ),
            (
                "quorum of 2, no vote",
                [
                    "pending 1/2",
                    "pending 1/2",
                    "decided deny",
                    "error quorum_refuses_action",
                    "error quorum_refuses_action",
                    "expired",
                    "pending 0/2, escalated",
                    "cancelled",
                ],
            ),
            (
                "quorum of 2, alice approved",
                [
                    "error already_approved",
                    "decided approve",
                    "decided deny",
                    "error quorum_refuses_action",
                    "error quorum_refuses_action",
                    "expired",
                    "pending 1/2, escalated",
                    "cancelled",
                ],
            ),
            (
                "quorum of 2, escalated",
                [
                    "pending 1/2, escalated",
                    "pending 1/2, escalated",
                    "decided deny",
                    "error quorum_refuses_action",
                    "error quorum_refuses_action",
                    "expired",
                    "error already_escalated",
                    "cancelled",
                ],
            ),
            ("decided", ["error approval_closed"; 8]),
            ("expired", ["error approval_closed"; 8]),
            ("cancelled", ["error approval_closed"; 8]),
        ];
        let states = states();
        let commands = commands();
        assert_eq!(states.len(), table.len());
        for ((state_name, approval), (row_name, row)) in states.iter().zip(table) {
            assert_eq!(*state_name, row_name);
            for ((command_name, command), expected) in commands.iter().zip(row) {
                let before = approval.clone();
                let got = outcome(approval.apply(command));
                assert_eq!(got, expected, "{state_name} × {command_name}");
                assert_eq!(*approval, before, "apply is pure");
            }
        }
    }

    #[test]
    fn a_quorum_decides_on_the_last_distinct_approval_with_every_vote_kept() {
        let three = approval(quorum(3));
        let done = applied(three, &[approve("alice"), approve("bob"), approve("carol")]);
        assert_eq!(done.decision(), Some(&Decision::Approve));
        assert_eq!(done.approvals_given(), ["alice", "bob", "carol"]);
        assert_eq!(done.votes.len(), 3);
        assert_eq!(done.required(), 3);
    }

    #[test]
    fn a_deny_after_ones_own_approval_denies_and_keeps_its_reason() {
        let two = applied(approval(quorum(2)), &[approve("alice")]);
        let denied = two.apply(&vote("alice", Decision::Deny { reason: "changed my mind".into() })).unwrap();
        assert_eq!(denied.decision(), Some(&Decision::Deny { reason: "changed my mind".into() }));
        assert!(matches!(denied.state, ApprovalState::Decided { at, .. } if at == T + 10));
    }

    #[test]
    fn errors_say_which_http_answer_they_are() {
        let two = approval(quorum(2));
        let edit = two.apply(&vote("bob", Decision::Edit { arguments: json!({}) })).unwrap_err();
        assert!(!edit.is_conflict());
        assert_eq!(edit.to_string(), "call `call_1` needs 2 approvals and takes only approve or deny, not edit");
        let twice = applied(two, &[approve("alice")]).apply(&approve("alice")).unwrap_err();
        assert!(twice.is_conflict());
        assert_eq!(
            twice.to_string(),
            "alice already approved call `call_1`: its approvals must come from distinct people"
        );
        let closed = applied(approval(Requirement::SINGLE), &[ApprovalCommand::Expire { at: T }])
            .apply(&approve("bob"))
            .unwrap_err();
        assert!(closed.is_conflict());
        assert_eq!(closed.to_string(), "the approval of call `call_1` is expired and takes no vote");
    }

    #[test]
    fn the_record_is_one_flat_object_without_defaults() {
        // A fresh single approval of a top run: nothing beyond what identifies it and its state.
        let fresh = approval(Requirement::SINGLE);
        let stored = serde_json::to_value(&fresh).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            stored,
            json!({"id": "ap-1", "run": "run-1", "call_id": "call_1", "state": "pending", "due": T + 1_000})
        );
        assert_eq!(serde_json::from_value::<Approval>(stored).unwrap_or_else(|e| panic!("{e}")), fresh);

        let a = applied(approval(quorum(2)).under_root("root-1"), &[approve("alice")]);
        let stored = serde_json::to_value(&a).unwrap();
        assert_eq!(
            stored,
            json!({
                "id": "ap-1", "run": "run-1", "root": "root-1", "call_id": "call_1", "approvals": 2,
                "votes": [{"action": "approve", "actor": "alice", "at": T + 10}],
                "state": "pending", "due": T + 1_000,
            })
        );
        assert_eq!(serde_json::from_value::<Approval>(stored).unwrap(), a);
        let decided = a.apply(&vote("bob", Decision::Deny { reason: "no".into() })).unwrap();
        let stored = serde_json::to_value(&decided).unwrap();
        assert_eq!(stored["state"], "decided");
        assert_eq!(stored["decision"], json!({"action": "deny", "reason": "no"}));
        assert_eq!(serde_json::from_value::<Approval>(stored).unwrap(), decided);
        for ended in
            [ApprovalCommand::Expire { at: T }, ApprovalCommand::Escalate { at: T, notified: vec!["ops".into()] }]
        {
            let a = approval(Requirement::SINGLE).apply(&ended).unwrap_or_else(|e| panic!("{e}"));
            let stored = serde_json::to_value(&a).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(serde_json::from_value::<Approval>(stored).unwrap_or_else(|e| panic!("{e}")), a);
        }
        // Combinations no state has are refused.
        for broken in [
            json!({"id": "a", "run": "r", "call_id": "c", "state": "decided", "at": 1}),
            json!({"id": "a", "run": "r", "call_id": "c", "state": "expired"}),
            json!({"id": "a", "run": "r", "call_id": "c", "state": "pending", "at": 1}),
            json!({"id": "a", "run": "r", "call_id": "c", "state": "expired", "at": 1, "due": 2}),
            json!({"id": "a", "run": "r", "call_id": "c", "state": "pending", "approvals": 0}),
            json!({"id": "a", "run": "r", "call_id": "c", "state": "pending", "extra": 1}),
        ] {
            assert!(serde_json::from_value::<Approval>(broken.clone()).is_err(), "{broken}");
        }
    }

    #[test]
    fn a_requirement_of_zero_approvals_is_refused_when_read() {
        assert!(serde_json::from_value::<Requirement>(json!({"approvals": 0})).is_err());
        assert_eq!(serde_json::from_value::<Requirement>(json!({"approvals": 1})).unwrap(), Requirement::SINGLE);
    }

    #[test]
    fn a_top_run_is_its_own_root() {
        let a = approval(Requirement::SINGLE);
        assert_eq!(a.root, a.run);
        assert_eq!(a.id.to_string(), "ap-1");
        assert!(a.approvals_given().is_empty());
    }
}
