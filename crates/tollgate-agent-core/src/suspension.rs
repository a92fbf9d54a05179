//! Suspensions (a run held at the gate) and the decisions that resume them.
//!
//! A suspension is persisted and may be resumed by another process or another version of Tollgate, so it
//! carries `schema_version` and is read only through [`Suspension::from_json`] / [`Suspension::from_value`],
//! which refuse a version they do not know rather than guess.

use crate::approval::Requirement;
use crate::canonical::canonical_sha256;
use crate::tool::{Gate, ToolPin};
use crate::transcript::{Counters, Invocation, Message, ToolResult};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::num::NonZeroU32;
use tollgate_agent_protocol::RunErrorKind;
use tollgate_agent_protocol::{CallId, GrantId};

/// The suspension format this build writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// `sha256:` + 64 lowercase hex digits over the held calls and the schemas they were checked against.
/// A decision names the digest it was made on; a different digest means the person saw another turn.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TurnDigest(pub String);

impl std::fmt::Display for TurnDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl TurnDigest {
    /// The digest as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One call of the held turn, as the approver sees it.
///
/// Stored as `{"call_id","tool","arguments","gate","preview","in_doubt","settled"}` (in that order, the
/// v1 suspension format), followed by `"observed"` only when the preview observed something (so a call
/// without one is stored, read and digested exactly as v1 wrote it): [`HeldCallState`] is written as the
/// `gate`, `in_doubt` and `settled` it stood for, and a stored combination that no state stands for (say,
/// `in_doubt` with a result) is refused.
#[derive(Clone, Debug, PartialEq)]
pub struct HeldCall {
    /// The model's id for the call.
    pub call_id: CallId,
    /// The tool named.
    pub tool: String,
    /// The model's arguments.
    pub arguments: Value,
    /// What the approver sees, if the tool gives a preview.
    pub preview: Option<String>,
    /// The state of the world the preview was made from ([`Preview::observed`](crate::Preview)), never a
    /// JSON `null`. Part of the turn's digest, so a decision is bound to it; handed back to the tool when
    /// the call runs on a person's approval ([`ToolContext::observed`](crate::ToolContext)).
    pub observed: Option<Value>,
    /// Where the call stands.
    pub state: HeldCallState,
    /// How many distinct people must approve it when it asks ([`Tool::requirement`](crate::Tool)): one
    /// decision for most calls, a quorum where a policy rule says `approvals = N`. Stored and digested
    /// as `"approvals": N` only for a quorum, so a call one decision settles is stored as v1 wrote it.
    pub requirement: Requirement,
    /// For a call that asks and may be remembered: the grant `match` its tool proposes
    /// ([`Tool::suggested_match`](crate::Tool::suggested_match)), what `remember` uses when it names
    /// none. Stored (and digested) only when present.
    pub suggested_match: Option<Map<String, Value>>,
}

/// Where a held call stands: whether it runs, waits for a person, or already has its result.
#[derive(Clone, Debug, PartialEq)]
pub enum HeldCallState {
    /// Refused before the gate or by it (unknown tool, bad arguments, forbidden, a repeated call id):
    /// it never runs, and this error result is its answer. Stored as gate `forbid` with the result.
    Refused(ToolResult),
    /// Allowed by the gate: runs without a decision.
    Allowed,
    /// Gated `ask`: runs only on a person's decision.
    Asks,
    /// Gated `ask` and allowed by this grant (V2.md, grants): runs without a person, as an approved call
    /// does (its start committed before it runs, so a crash leaves it in doubt), and at a resume only if
    /// the grant is still in force. Stored as gate `ask` with `"grant": ID`.
    Granted(GrantId),
    /// Gated `ask`, started but its end was never recorded (a crash): it may or may not have taken
    /// effect, so it runs again only on a person's decision.
    InDoubt,
    /// Gated `ask`, and it finished before a crash: its recorded result stands, it neither runs again
    /// nor takes a decision.
    Finished(ToolResult),
}

impl HeldCall {
    /// The gate's verdict: `forbid` for a refused call, `ask` for a call that asked (even once it is in
    /// doubt or finished), `allow` otherwise.
    pub fn gate(&self) -> Gate {
        match self.state {
            HeldCallState::Refused(_) => Gate::Forbid,
            HeldCallState::Allowed => Gate::Allow,
            HeldCallState::Asks | HeldCallState::Granted(_) | HeldCallState::InDoubt | HeldCallState::Finished(_) => {
                Gate::Ask
            }
        }
    }

    /// The grant that allowed the call, if one did.
    pub fn grant(&self) -> Option<&GrantId> {
        match &self.state {
            HeldCallState::Granted(grant) => Some(grant),
            _ => None,
        }
    }

    /// True when the call started and its end was never recorded.
    pub fn in_doubt(&self) -> bool {
        matches!(self.state, HeldCallState::InDoubt)
    }

    /// The call's result when it is already settled and will neither run nor take a decision: a refusal
    /// or a result recorded before a crash.
    pub fn settled(&self) -> Option<&ToolResult> {
        match &self.state {
            HeldCallState::Refused(result) | HeldCallState::Finished(result) => Some(result),
            HeldCallState::Allowed | HeldCallState::Asks | HeldCallState::Granted(_) | HeldCallState::InDoubt => None,
        }
    }

    /// True when this call needs a person's decision before the run can resume.
    pub fn takes_decision(&self) -> bool {
        matches!(self.state, HeldCallState::Asks | HeldCallState::InDoubt)
    }

    /// Why a decision naming this call is refused, or `None` when it [takes one](Self::takes_decision):
    /// a call that already ran before a crash says so; any other says it takes none.
    pub fn refuse_decision(&self) -> Option<DecisionError> {
        if self.takes_decision() {
            return None;
        }
        let call_id = self.call_id.clone();
        Some(match self.state {
            HeldCallState::Finished(_) => DecisionError::AlreadyRan { call_id },
            HeldCallState::Refused(_)
            | HeldCallState::Allowed
            | HeldCallState::Asks
            | HeldCallState::Granted(_)
            | HeldCallState::InDoubt => DecisionError::NotDecidable { call_id, gate: self.gate() },
        })
    }
}

/// A held call as stored (the v1 format); see [`HeldCall`].
#[derive(Serialize)]
struct HeldCallOut<'a> {
    call_id: &'a str,
    tool: &'a str,
    arguments: &'a Value,
    gate: Gate,
    preview: &'a Option<String>,
    in_doubt: bool,
    settled: Option<&'a ToolResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    observed: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    approvals: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    grant: Option<&'a GrantId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    suggested_match: Option<&'a Map<String, Value>>,
}

/// A held call as read back (the v1 format); see [`HeldCall`].
#[derive(Deserialize)]
struct HeldCallIn {
    call_id: CallId,
    tool: String,
    arguments: Value,
    gate: Gate,
    #[serde(default)]
    preview: Option<String>,
    #[serde(default)]
    in_doubt: bool,
    #[serde(default)]
    settled: Option<ToolResult>,
    #[serde(default)]
    observed: Option<Value>,
    #[serde(default)]
    approvals: Option<NonZeroU32>,
    #[serde(default)]
    grant: Option<GrantId>,
    #[serde(default)]
    suggested_match: Option<Map<String, Value>>,
}

impl Serialize for HeldCall {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        HeldCallOut {
            call_id: &self.call_id,
            tool: &self.tool,
            arguments: &self.arguments,
            gate: self.gate(),
            preview: &self.preview,
            in_doubt: self.in_doubt(),
            settled: self.settled(),
            observed: self.observed.as_ref(),
            approvals: self.requirement.is_quorum().then(|| self.requirement.approvals()),
            grant: self.grant(),
            suggested_match: self.suggested_match.as_ref(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for HeldCall {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let HeldCallIn {
            call_id,
            tool,
            arguments,
            gate,
            preview,
            in_doubt,
            settled,
            observed,
            approvals,
            grant,
            suggested_match,
        } = HeldCallIn::deserialize(deserializer)?;
        let requirement = approvals.map_or(Requirement::SINGLE, Requirement::new);
        let state = match (gate, in_doubt, settled, grant) {
            (Gate::Ask, false, None, Some(grant)) => HeldCallState::Granted(grant),
            (Gate::Forbid, false, Some(result), None) => HeldCallState::Refused(result),
            (Gate::Allow, false, None, None) => HeldCallState::Allowed,
            (Gate::Ask, false, None, None) => HeldCallState::Asks,
            (Gate::Ask, true, None, None) => HeldCallState::InDoubt,
            (Gate::Ask, false, Some(result), None) => HeldCallState::Finished(result),
            (gate, in_doubt, settled, grant) => {
                return Err(serde::de::Error::custom(format!(
                    "held call `{call_id}` has gate {gate}, in_doubt {in_doubt}, {} and {}: no call is in that state",
                    if settled.is_some() { "a settled result" } else { "no settled result" },
                    if grant.is_some() { "a grant" } else { "no grant" }
                )));
            }
        };
        Ok(HeldCall { call_id, tool, arguments, preview, observed, state, requirement, suggested_match })
    }
}

/// A run waiting at the gate. Everything needed to resume it, in any process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Suspension {
    /// Always [`SCHEMA_VERSION`] when written by this build.
    pub schema_version: u32,
    /// The model call (1-based) whose turn is held.
    pub round: u32,
    /// The transcript up to and including the held assistant turn.
    pub transcript: Vec<Message>,
    /// Every call of the held turn, in the model's order.
    pub calls: Vec<HeldCall>,
    /// What the run has consumed so far.
    pub counters: Counters,
    /// Every tool invocation that ran in earlier segments.
    pub trace: Vec<Invocation>,
    /// Name and schema hash of every tool offered when the turn was held.
    pub tools: Vec<ToolPin>,
    /// Digest of the held calls and their schemas.
    pub turn_digest: TurnDigest,
}

/// A suspension that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SuspensionError {
    /// The text is not JSON or not a suspension.
    #[error("stored suspension is not valid: {0}")]
    Invalid(String),
    /// Written by a version of Tollgate this build does not understand.
    #[error("stored suspension has schema_version {found}; this build of Tollgate reads version {supported} only")]
    UnsupportedVersion {
        /// The version found.
        found: u64,
        /// The version this build reads.
        supported: u32,
    },
    /// The suspension could not be written as JSON (nothing is stored then).
    #[error("the suspension cannot be written as JSON: {0}")]
    Unserialisable(String),
}

/// A suspension as a store keeps it: its JSON text, exactly as written (it is digested and hashed into
/// events, so it is never rewritten). Read back only through [`StoredSuspension::parse`], which refuses
/// unknown versions and corrupt text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSuspension(String);

impl StoredSuspension {
    /// Text read back from a store, as it was stored; checked when [parsed](Self::parse).
    pub fn from_stored(text: String) -> Self {
        Self(text)
    }

    /// The suspension it holds, or why it cannot be read.
    pub fn parse(&self) -> Result<Suspension, SuspensionError> {
        Suspension::from_json(&self.0)
    }

    /// The stored text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The stored text, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl Suspension {
    /// Builds a suspension and computes its digest.
    pub(crate) fn new(
        round: u32,
        transcript: Vec<Message>,
        calls: Vec<HeldCall>,
        counters: Counters,
        trace: Vec<Invocation>,
        tools: Vec<ToolPin>,
    ) -> Self {
        let turn_digest = compute_digest(&calls, &tools);
        Self { schema_version: SCHEMA_VERSION, round, transcript, calls, counters, trace, tools, turn_digest }
    }

    /// Reads a stored suspension, refusing unknown versions.
    pub fn from_json(text: &str) -> Result<Self, SuspensionError> {
        // What this build writes reads straight into the struct, without a tree of values first (a
        // resume parses the suspension on every decision). Anything else — another version, text that
        // is not a suspension — takes the general path, which says what is wrong with it.
        if text.trim_start().starts_with('{')
            && let Ok(suspension) = serde_json::from_str::<Suspension>(text)
            && suspension.schema_version == SCHEMA_VERSION
        {
            return suspension.verified();
        }
        let value: Value = serde_json::from_str(text).map_err(|e| SuspensionError::Invalid(e.to_string()))?;
        Self::from_value(value)
    }

    /// Reads a stored suspension from a JSON value, refusing unknown versions.
    pub fn from_value(value: Value) -> Result<Self, SuspensionError> {
        let found = value
            .get("schema_version")
            .and_then(Value::as_u64)
            .ok_or_else(|| SuspensionError::Invalid("schema_version is missing or not a number".into()))?;
        if found != u64::from(SCHEMA_VERSION) {
            return Err(SuspensionError::UnsupportedVersion { found, supported: SCHEMA_VERSION });
        }
        let suspension: Suspension =
            serde_json::from_value(value).map_err(|e| SuspensionError::Invalid(e.to_string()))?;
        suspension.verified()
    }

    /// The suspension read, if its digest matches its held calls and their schemas.
    fn verified(self) -> Result<Self, SuspensionError> {
        if self.turn_digest != compute_digest(&self.calls, &self.tools) {
            return Err(SuspensionError::Invalid("turn_digest does not match the held calls".into()));
        }
        Ok(self)
    }

    /// The suspension as a store keeps it.
    pub fn to_stored(&self) -> Result<StoredSuspension, SuspensionError> {
        serde_json::to_string(self).map(StoredSuspension).map_err(|e| SuspensionError::Unserialisable(e.to_string()))
    }

    /// The stored JSON text (the same text as [`to_stored`](Self::to_stored), as a `String`).
    pub fn to_json(&self) -> Result<String, SuspensionError> {
        self.to_stored().map(StoredSuspension::into_string)
    }

    /// The calls that still need a decision.
    pub fn decidable_calls(&self) -> impl Iterator<Item = &HeldCall> {
        self.calls.iter().filter(|c| c.takes_decision())
    }

    /// The held call with this id.
    pub fn call(&self, call_id: &CallId) -> Option<&HeldCall> {
        self.calls.iter().find(|c| &c.call_id == call_id)
    }

    /// True when a grant allowed a call of the turn: its resume needs the grants in force.
    pub fn has_granted_calls(&self) -> bool {
        self.calls.iter().any(|c| c.grant().is_some())
    }

    /// Marks a call that takes a decision or that a grant allowed in doubt (started, never finished) and
    /// recomputes the digest, so a decision made on the earlier view of the turn is stale; a call in
    /// doubt takes a person's decision, whatever allowed it before. Returns false when there is no such
    /// call or it is neither.
    pub fn mark_in_doubt(&mut self, call_id: &CallId) -> bool {
        let Some(call) =
            self.calls.iter_mut().find(|c| &c.call_id == call_id && (c.takes_decision() || c.grant().is_some()))
        else {
            return false;
        };
        call.state = HeldCallState::InDoubt;
        self.turn_digest = compute_digest(&self.calls, &self.tools);
        true
    }

    /// Records the result of a call that takes a decision or that a grant allowed as finished (it ran
    /// before a crash) and recomputes the digest. Returns false when there is no such call or it is
    /// neither.
    pub fn settle(&mut self, result: ToolResult) -> bool {
        let Some(call) =
            self.calls.iter_mut().find(|c| c.call_id == result.call_id && (c.takes_decision() || c.grant().is_some()))
        else {
            return false;
        };
        call.state = HeldCallState::Finished(result);
        self.turn_digest = compute_digest(&self.calls, &self.tools);
        true
    }
}

fn compute_digest(calls: &[HeldCall], tools: &[ToolPin]) -> TurnDigest {
    let schemas: BTreeMap<&str, &str> = tools
        .iter()
        .filter(|t| calls.iter().any(|c| c.tool == t.name))
        .map(|t| (t.name.as_str(), t.schema_hash.as_str()))
        .collect();
    let calls: Vec<Value> = calls
        .iter()
        .map(|c| {
            let mut call = json!({
                "call_id": c.call_id,
                "tool": c.tool,
                "arguments": c.arguments,
                "gate": c.gate(),
                "in_doubt": c.in_doubt(),
                "settled": c.settled().map(|r| json!({"content": r.content, "is_error": r.is_error})),
            });
            // Only when present: a call without an observation digests as v1 digested it.
            if let (Some(observed), Some(fields)) = (&c.observed, call.as_object_mut()) {
                fields.insert("observed".to_owned(), observed.clone());
            }
            // Likewise a quorum: an approver's decision is bound to how many people the call needs.
            if let (true, Some(fields)) = (c.requirement.is_quorum(), call.as_object_mut()) {
                fields.insert("approvals".to_owned(), json!(c.requirement.approvals()));
            }
            // And a grant: an approver decides knowing which calls of the turn run by a grant, and what
            // `remember` would make of each call.
            if let (Some(grant), Some(fields)) = (c.grant(), call.as_object_mut()) {
                fields.insert("grant".to_owned(), json!(grant));
            }
            if let (Some(suggested), Some(fields)) = (&c.suggested_match, call.as_object_mut()) {
                fields.insert("suggested_match".to_owned(), Value::Object(suggested.clone()));
            }
            call
        })
        .collect();
    TurnDigest(format!("sha256:{}", canonical_sha256(&json!({"calls": calls, "schemas": schemas}))))
}

/// A person's answer for one held call (`approve`, `edit`, `deny`, `respond`): the wire's type, one
/// enum from a request's decision to the stored vote and the resume.
pub use tollgate_agent_protocol::Decision;

/// Decisions keyed by `call_id` (never by position).
pub type Decisions = BTreeMap<CallId, Decision>;

/// A set of decisions that cannot resume a suspension. Nothing ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecisionError {
    /// No held call has this id.
    #[error("no held call has id `{0}`")]
    UnknownCall(CallId),
    /// The call runs or is refused without a person's decision.
    #[error("call `{call_id}` has gate `{gate}` and takes no decision")]
    NotDecidable {
        /// The call.
        call_id: CallId,
        /// Its gate.
        gate: Gate,
    },
    /// The call ran to its end before a crash: its recorded result stands, so it takes no decision.
    #[error("call `{call_id}` already ran before a crash (its result is recorded) and takes no decision")]
    AlreadyRan {
        /// The call.
        call_id: CallId,
    },
    /// Some held calls have no decision yet.
    #[error("held calls without a decision: {}", .0.join(", "))]
    Missing(Vec<CallId>),
    /// Edited arguments fail the tool's schema or checks.
    #[error("edited arguments for call `{call_id}` are invalid: {message}")]
    InvalidEdit {
        /// The call.
        call_id: CallId,
        /// What is wrong with them.
        message: String,
    },
}

impl DecisionError {
    /// A stable short name for the error kind.
    pub fn kind(&self) -> RunErrorKind {
        match self {
            DecisionError::UnknownCall(_) => RunErrorKind::UnknownCall,
            DecisionError::NotDecidable { .. } => RunErrorKind::NotDecidable,
            DecisionError::AlreadyRan { .. } => RunErrorKind::AlreadyRan,
            DecisionError::Missing(_) => RunErrorKind::MissingDecisions,
            DecisionError::InvalidEdit { .. } => RunErrorKind::InvalidArguments,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(call_id: &str, content: &str) -> ToolResult {
        ToolResult {
            call_id: call_id.into(),
            tool: "write".into(),
            content: content.into(),
            is_error: true,
            denied: false,
            images: Vec::new(),
        }
    }

    fn call(state: HeldCallState) -> HeldCall {
        HeldCall {
            call_id: "c1".into(),
            tool: "write".into(),
            arguments: json!({"a": 1}),
            preview: None,
            observed: None,
            state,
            requirement: Requirement::SINGLE,
            suggested_match: None,
        }
    }

    #[test]
    fn each_call_state_is_stored_as_its_v1_flags_and_read_back() -> Result<(), serde_json::Error> {
        let settled = r#"{"call_id":"c1","tool":"write","content":"no","is_error":true}"#;
        let cases = [
            (
                HeldCallState::Refused(result("c1", "no")),
                format!(r#""gate":"forbid","preview":null,"in_doubt":false,"settled":{settled}"#),
            ),
            (HeldCallState::Allowed, r#""gate":"allow","preview":null,"in_doubt":false,"settled":null"#.to_owned()),
            (HeldCallState::Asks, r#""gate":"ask","preview":null,"in_doubt":false,"settled":null"#.to_owned()),
            (HeldCallState::InDoubt, r#""gate":"ask","preview":null,"in_doubt":true,"settled":null"#.to_owned()),
            (
                HeldCallState::Finished(result("c1", "no")),
                format!(r#""gate":"ask","preview":null,"in_doubt":false,"settled":{settled}"#),
            ),
        ];
        for (state, flags) in cases {
            let held = call(state);
            let text = serde_json::to_string(&held)?;
            assert_eq!(text, format!(r#"{{"call_id":"c1","tool":"write","arguments":{{"a":1}},{flags}}}"#));
            assert_eq!(serde_json::from_str::<HeldCall>(&text)?, held);
        }
        Ok(())
    }

    /// A preview's observation is stored after the v1 fields only when there is one, and it is part of the
    /// digest: a decision is bound to what the approver's preview saw, and a stored observation edited
    /// afterwards makes the suspension unreadable.
    #[test]
    fn an_observation_is_stored_and_digested_only_when_present() -> Result<(), SuspensionError> {
        let observed = json!({"kind": "file", "size": 13});
        let held = HeldCall { observed: Some(observed.clone()), ..call(HeldCallState::Asks) };
        let text = serde_json::to_string(&held).map_err(|e| SuspensionError::Invalid(e.to_string()))?;
        assert!(text.ends_with(r#""settled":null,"observed":{"kind":"file","size":13}}"#), "{text}");
        let read: HeldCall = serde_json::from_str(&text).map_err(|e| SuspensionError::Invalid(e.to_string()))?;
        assert_eq!(read, held);

        let suspension =
            |call: HeldCall| Suspension::new(1, Vec::new(), vec![call], Counters::default(), Vec::new(), Vec::new());
        let without = suspension(call(HeldCallState::Asks));
        let with = suspension(held.clone());
        let other = suspension(HeldCall { observed: Some(json!({"kind": "file", "size": 14})), ..held });
        assert_ne!(with.turn_digest, without.turn_digest, "the observation is digested");
        assert_ne!(with.turn_digest, other.turn_digest, "a different observation is another turn");
        let stored = with.to_json()?;
        assert_eq!(Suspension::from_json(&stored)?, with);
        let tampered = stored.replacen(r#""size":13"#, r#""size":99"#, 1);
        assert!(
            matches!(Suspension::from_json(&tampered), Err(SuspensionError::Invalid(e)) if e.contains("turn_digest"))
        );
        Ok(())
    }

    #[test]
    fn stored_flags_that_no_state_stands_for_are_refused() {
        let settled = r#"{"call_id":"c1","tool":"write","content":"x"}"#;
        for flags in [
            r#""gate":"forbid""#.to_owned(),
            r#""gate":"allow","in_doubt":true"#.to_owned(),
            format!(r#""gate":"allow","settled":{settled}"#),
            format!(r#""gate":"ask","in_doubt":true,"settled":{settled}"#),
            r#""gate":"forbid","in_doubt":true"#.to_owned(),
        ] {
            let text = format!(r#"{{"call_id":"c1","tool":"write","arguments":{{}},{flags}}}"#);
            let read = serde_json::from_str::<HeldCall>(&text);
            assert!(
                read.as_ref().is_err_and(|e| e.to_string().contains("no call is in that state")),
                "{flags}: {read:?}"
            );
        }
    }

    /// Text this build wrote reads straight into the struct; it answers what the general path (a tree of
    /// values first) answers, and every refusal is the general path's: another version, a changed
    /// digest, something that is not an object, a field of the wrong type, a repeated key.
    #[test]
    fn a_stored_suspension_reads_as_the_general_path_reads_it() -> Result<(), SuspensionError> {
        let transcript = vec![Message::user("hello \u{e9} \"quoted\"\n")];
        let tools = vec![ToolPin { name: "write".into(), schema_hash: "sha256:abc".into() }];
        let held =
            Suspension::new(2, transcript, vec![call(HeldCallState::Asks)], Counters::default(), Vec::new(), tools);
        let text = held.to_json()?;
        let general =
            Suspension::from_value(serde_json::from_str(&text).map_err(|e| SuspensionError::Invalid(e.to_string()))?)?;
        assert_eq!(Suspension::from_json(&text)?, general);
        assert_eq!(Suspension::from_json(&format!("  \n{text}"))?, held, "leading white space");

        let newer = text.replacen(&format!("\"schema_version\":{SCHEMA_VERSION}"), "\"schema_version\":99", 1);
        assert!(matches!(
            Suspension::from_json(&newer),
            Err(SuspensionError::UnsupportedVersion { found: 99, supported: SCHEMA_VERSION })
        ));
        let changed = text.replacen("\"a\":1", "\"a\":2", 1);
        assert!(
            matches!(Suspension::from_json(&changed), Err(SuspensionError::Invalid(e)) if e.contains("turn_digest"))
        );
        for (broken, says) in [
            (format!("[{text}]"), "schema_version is missing"),
            ("{\"round\":1}".to_owned(), "schema_version is missing"),
            (text.replacen("\"round\":2", "\"round\":\"two\"", 1), "invalid type"),
            ("{".to_owned(), "EOF"),
        ] {
            let read = Suspension::from_json(&broken);
            assert!(matches!(&read, Err(SuspensionError::Invalid(e)) if e.contains(says)), "{broken}: {read:?}");
        }
        // A key written twice is read as the general path reads it (the last one counts).
        let twice = text.replacen("\"round\":2", "\"round\":7,\"round\":2", 1);
        assert_eq!(Suspension::from_json(&twice)?, general);
        Ok(())
    }

    #[test]
    fn recovery_marks_only_calls_that_take_a_decision() {
        let mut suspension = Suspension::new(
            1,
            Vec::new(),
            vec![call(HeldCallState::Allowed)],
            Counters::default(),
            Vec::new(),
            Vec::new(),
        );
        let (c1, before) = (CallId::from("c1"), suspension.turn_digest.clone());
        assert!(!suspension.mark_in_doubt(&c1) && !suspension.settle(result("c1", "x")), "an allowed call just runs");
        suspension.calls[0].state = HeldCallState::Asks;
        assert!(suspension.mark_in_doubt(&c1));
        assert!(suspension.calls[0].in_doubt() && suspension.calls[0].takes_decision());
        assert!(suspension.settle(result("c1", "done")));
        assert_eq!(suspension.calls[0].state, HeldCallState::Finished(result("c1", "done")));
        assert!(!suspension.calls[0].takes_decision() && suspension.turn_digest != before);
        assert!(!suspension.mark_in_doubt(&c1) && !suspension.mark_in_doubt(&CallId::from("nope")));
    }

    #[test]
    fn a_decision_on_a_call_that_takes_none_is_refused_saying_why() {
        assert_eq!(call(HeldCallState::Asks).refuse_decision(), None);
        assert_eq!(call(HeldCallState::InDoubt).refuse_decision(), None);
        assert_eq!(
            call(HeldCallState::Finished(result("c1", "done"))).refuse_decision(),
            Some(DecisionError::AlreadyRan { call_id: "c1".into() })
        );
        assert_eq!(
            call(HeldCallState::Allowed).refuse_decision(),
            Some(DecisionError::NotDecidable { call_id: "c1".into(), gate: Gate::Allow })
        );
        assert_eq!(
            call(HeldCallState::Refused(result("c1", "no"))).refuse_decision(),
            Some(DecisionError::NotDecidable { call_id: "c1".into(), gate: Gate::Forbid })
        );
        for state in [
            HeldCallState::Asks,
            HeldCallState::InDoubt,
            HeldCallState::Allowed,
            HeldCallState::Finished(result("c1", "x")),
        ] {
            let held = call(state);
            assert_eq!(held.refuse_decision().is_none(), held.takes_decision(), "{held:?}");
        }
    }
}
