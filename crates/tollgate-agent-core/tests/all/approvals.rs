//! Property test for the approval record's rules (docs/design.md, "Approvals"): whatever the order of
//! votes (approvals by random actors, repeats among them, denials, edits, responses), expiries, escalations
//! and cancels,
//!
//! - an approval is decided with a decision that runs the call (`approve`, `edit`) only when it holds
//!   approving votes from at least `required` distinct actors and no `deny`;
//! - a decided, expired or cancelled approval never changes again;
//! - every command is taken or refused exactly as a small reference model says.

use proptest::prelude::*;
use std::num::NonZeroU32;
use tollgate_agent_core::{
    Approval, ApprovalCommand, ApprovalError, ApprovalState, Decision, Millis, Requirement, Vote,
};

const ACTORS: [&str; 5] = ["alice", "bob", "carol", "dave", "system"];
const T: Millis = 1_764_410_400_000;

#[derive(Clone, Debug)]
enum Op {
    Vote { actor: usize, action: u8 },
    Expire,
    Escalate,
    Cancel,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0..ACTORS.len(), 0u8..10).prop_map(|(actor, action)| Op::Vote { actor, action }),
        1 => Just(Op::Expire),
        2 => Just(Op::Escalate),
        1 => Just(Op::Cancel),
    ]
}

/// Mostly approvals: a quorum is reached often enough to be tested.
fn decision(action: u8) -> Decision {
    match action {
        0..=6 => Decision::Approve,
        7 => Decision::Deny { reason: "no".into() },
        8 => Decision::Edit { arguments: serde_json::json!({"n": 1}) },
        _ => Decision::Respond { result: "done".into() },
    }
}

fn command(op: &Op, at: Millis) -> ApprovalCommand {
    match *op {
        Op::Vote { actor, action } => {
            ApprovalCommand::Vote(Vote { decision: decision(action), actor: ACTORS[actor].into(), at })
        }
        Op::Expire => ApprovalCommand::Expire { at },
        Op::Escalate => ApprovalCommand::Escalate { at, notified: vec!["ops".into()] },
        Op::Cancel => ApprovalCommand::Cancel { at },
    }
}

/// The reference: what each command must do, from the rules alone.
#[derive(Debug)]
enum Model {
    Open {
        approvers: Vec<usize>,
        escalated: bool,
    },
    /// The final state's name, or the settled decision's action.
    Closed(&'static str),
}

impl Model {
    /// `Ok(())` when the command is taken (and the model moved on), else the refusal's kind.
    fn step(&mut self, op: &Op, required: usize) -> Result<(), &'static str> {
        let Model::Open { approvers, escalated } = self else {
            return Err("approval_closed");
        };
        match *op {
            Op::Vote { actor, action } => match decision(action) {
                Decision::Approve if approvers.contains(&actor) => return Err("already_approved"),
                Decision::Approve => {
                    approvers.push(actor);
                    if approvers.len() >= required {
                        *self = Model::Closed("approve");
                    }
                }
                Decision::Deny { .. } => *self = Model::Closed("deny"),
                _ if required >= 2 => return Err("quorum_refuses_action"),
                other => *self = Model::Closed(other.action()),
            },
            Op::Escalate if *escalated => return Err("already_escalated"),
            Op::Escalate => *escalated = true,
            Op::Expire => *self = Model::Closed("expired"),
            Op::Cancel => *self = Model::Closed("cancelled"),
        }
        Ok(())
    }
}

fn closed_name(approval: &Approval) -> Option<&'static str> {
    match &approval.state {
        ApprovalState::Pending { .. } => None,
        ApprovalState::Decided { decision, .. } => Some(decision.action()),
        other => Some(other.name()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn no_call_is_approved_with_fewer_approvals_than_required_and_a_closed_approval_never_changes(
        required in 1u32..=4,
        ops in prop::collection::vec(op(), 0..24),
    ) {
        let requirement = Requirement::new(NonZeroU32::new(required).unwrap());
        let mut approval = Approval::pending("ap-1".into(), "run-1", "call_1", requirement, Some(T + 60_000));
        let mut model = Model::Open { approvers: Vec::new(), escalated: false };
        let mut closed: Option<Approval> = None;
        for (i, op) in ops.iter().enumerate() {
            let at = T + i as Millis;
            let result = approval.apply(&command(op, at));
            let expected = model.step(op, required as usize);
            prop_assert_eq!(result.as_ref().map(|_| ()).map_err(ApprovalError::kind), expected, "{:?}", op);
            if let Err(error) = &result {
                prop_assert_eq!(error.is_conflict(), error.kind() != "quorum_refuses_action");
            }
            if let Ok(next) = result {
                approval = next;
            }
            if let Some(closed) = &closed {
                prop_assert_eq!(closed, &approval, "a closed approval changed");
            }
            match (&model, closed_name(&approval)) {
                (Model::Open { approvers, .. }, None) => {
                    let given: Vec<&str> = approvers.iter().map(|&a| ACTORS[a]).collect();
                    prop_assert_eq!(approval.approvals_given(), given);
                }
                (Model::Closed(name), Some(got)) => {
                    prop_assert_eq!(*name, got);
                    closed.get_or_insert_with(|| approval.clone());
                }
                (model, got) => prop_assert!(false, "model {:?}, record {:?}", model, got),
            }
            if matches!(approval.decision(), Some(Decision::Approve | Decision::Edit { .. })) {
                prop_assert!(approval.approvals_given().len() >= required as usize);
                let denied = approval.votes.iter().any(|v| matches!(v.decision, Decision::Deny { .. }));
                prop_assert!(!denied, "approved despite a deny");
            }
            let approves = approval.votes.iter().filter(|v| v.decision == Decision::Approve);
            let mut actors: Vec<&str> = approves.map(|v| v.actor.as_str()).collect();
            let all = actors.len();
            actors.sort_unstable();
            actors.dedup();
            prop_assert_eq!(actors.len(), all, "an actor's approval counted twice");
        }
    }
}
