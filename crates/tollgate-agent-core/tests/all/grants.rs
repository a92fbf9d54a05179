//! Grants at the gate (V2.md section 1; docs/design.md, "Grants"): a grant in force lets a call that asks
//! run without anyone deciding, and nothing else — never a call the gate forbids, one whose tool says no
//! grant may allow it, one in doubt or one a quorum must approve. A path is judged as the tool resolves it.
//! A granted call in a held turn runs at the resume only if its own grant still allows it. Each rule has
//! its test, then a property over random tools, grants and turns.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use tollgate_agent_core::scripted::{Script, ScriptedModel};
use tollgate_agent_core::{
    AgentLoop, BoxFuture, CallId, Completion, Decision, DecisionError, Decisions, Gate, GrantId, GrantMatch,
    GrantRecord, GrantScope, HeldCall, HeldCallState, HookError, LoopConfig, LoopError, LoopEvent, LoopHooks, Message,
    NoHooks, Outcome, PolicyPath, Requirement, RunScope, Suspension, SuspensionError, ToolLoop, ToolRegistry,
    ToolResult,
};
use tollgate_agent_testkit::{RecordingHooks, TestTool};

// ---------------------------------------------------------------------------------------------------------
// Building loops, grants and reading outcomes

fn agent(script: Value, tools: &[&TestTool]) -> ToolLoop {
    let model = ScriptedModel::new(Script::from_value(script).unwrap_or_else(|e| panic!("{e}")));
    let mut registry = ToolRegistry::new();
    for tool in tools {
        registry.register(tool.shared()).unwrap_or_else(|e| panic!("{e}"));
    }
    ToolLoop::new(Arc::new(model), Arc::new(registry), LoopConfig::default())
}

/// One turn of calls, then a closing answer.
fn one_turn(calls: Value) -> Value {
    json!({"turns": [{"tool_calls": calls}, {"text": "Done."}]})
}

fn suspended(outcome: Result<Outcome, LoopError>) -> Suspension {
    match outcome {
        Ok(Outcome::Suspended(suspension)) => suspension,
        other => panic!("expected a suspension, got {other:?}"),
    }
}

fn completed(outcome: Result<Outcome, LoopError>) -> Completion {
    match outcome {
        Ok(Outcome::Completed(done)) => done,
        other => panic!("expected a completion, got {other:?}"),
    }
}

/// A stored suspension, as another process reads it.
fn reload(suspension: &Suspension) -> Suspension {
    Suspension::from_json(&suspension.to_json().unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"))
}

/// The one result a call got.
fn result<'a>(transcript: &'a [Message], call_id: &str) -> &'a ToolResult {
    let mut found = transcript.iter().filter_map(|m| match m {
        Message::Tool(r) if r.call_id == call_id => Some(r),
        _ => None,
    });
    match (found.next(), found.next()) {
        (Some(r), None) => r,
        (first, second) => panic!("{call_id} must have exactly one result, found {first:?} and {second:?}"),
    }
}

fn states(suspension: &Suspension) -> Vec<HeldCallState> {
    suspension.calls.iter().map(|c| c.state.clone()).collect()
}

fn granted(id: &str) -> HeldCallState {
    HeldCallState::Granted(GrantId::from(id))
}

fn pattern(value: Value) -> GrantMatch {
    match value {
        Value::Object(map) => GrantMatch::new(map).unwrap_or_else(|e| panic!("{e}")),
        other => panic!("not an object: {other}"),
    }
}

/// An active grant of agent `notes` for `tool`, every run, on `match`.
fn grant(id: &str, tool: &str, matcher: Value) -> GrantRecord {
    GrantRecord {
        id: id.into(),
        agent: "notes".into(),
        tool: tool.into(),
        matcher: pattern(matcher),
        scope: GrantScope::Agent,
        run_id: None,
        reason: None,
        created_by: "alice".into(),
        created_at: 0,
        expires_at: i64::MAX,
        revoked: None,
        uses: 0,
    }
}

fn hooks_with(grants: Vec<GrantRecord>) -> RecordingHooks {
    let hooks = RecordingHooks::default();
    hooks.set_grants(grants);
    hooks
}

/// Resolves `/path` as a workspace tool does: `.` and empty segments dropped, `..` taking one back.
fn resolved_path(args: &Value) -> Vec<PolicyPath> {
    let Some(spelled) = args.get("path").and_then(Value::as_str) else { return Vec::new() };
    let mut parts: Vec<&str> = Vec::new();
    for part in spelled.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    let path = if parts.is_empty() { ".".to_owned() } else { parts.join("/") };
    vec![PolicyPath { pointer: "/path".into(), path, subtree: false }]
}

fn write_tool() -> TestTool {
    TestTool::new("write").gate(Gate::Ask).policy_paths_fn(resolved_path)
}

// ---------------------------------------------------------------------------------------------------------
// What a grant allows at the gate

/// The same turn, without and with a grant in force: with it, the asking call is `Granted` (gate still
/// `ask`), nobody is asked, nothing ran before the turn was held, and the resume at once (no decision)
/// runs it, its start naming the grant.
#[tokio::test]
async fn a_grant_in_force_allows_an_asking_call_without_anyone_deciding() {
    let (write, list) = (write_tool(), TestTool::new("list"));
    let turn = one_turn(json!([{"name": "write", "arguments": {"path": "notes/a.md"}}, {"name": "list"}]));
    let scope = RunScope::new("run");

    let asked = suspended(agent(turn.clone(), &[&write, &list]).start(&scope, "go", &NoHooks).await);
    assert_eq!(states(&asked), [HeldCallState::Asks, HeldCallState::Allowed], "no grant: the call asks");
    assert_eq!(
        asked.calls[0].suggested_match.as_ref().map(|m| Value::Object(m.clone())),
        Some(json!({"/path": "notes/a.md"})),
        "a call that asks carries the tool's suggestion"
    );

    let grants = vec![grant("g-list", "list", json!({})), grant("g-write", "write", json!({"/path": "notes/*"}))];
    let hooks = hooks_with(grants.clone());
    let agent = agent(turn, &[&write, &list]);
    let held = reload(&suspended(agent.start(&scope, "go", &hooks).await));
    assert_eq!(states(&held), [granted("g-write"), HeldCallState::Allowed]);
    assert_eq!(held.calls[0].gate(), Gate::Ask, "a granted call keeps its gate");
    assert_eq!(held.calls[0].suggested_match, None, "nobody is asked: nothing to suggest");
    assert_eq!(held.decidable_calls().count(), 0, "no call takes a decision");
    assert_eq!(write.call_count() + list.call_count(), 0, "nothing of the turn ran before it was held");

    let plan = agent
        .plan_resume(&RunScope::new("run"), &held, &Decisions::new(), &grants)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let first = plan.first_decided().map(|c| (c.call_id, c.gate, c.grant));
    assert_eq!(first, Some(("call_1".into(), Gate::Ask, Some("g-write".into()))), "its start may ride with the claim");
    let done = completed(agent.resume_planned(&scope, held, plan, &hooks).await);
    assert_eq!(write.calls(), [(CallId::from("call_1"), json!({"path": "notes/a.md"}))]);
    assert!(!result(&done.transcript, "call_1").is_error);
    let started: Vec<String> = hooks.lines().into_iter().filter(|l| l.starts_with("tool_started")).collect();
    assert_eq!(started, ["tool_started 1 call_1 write ask grant=g-write", "tool_started 1 call_2 list allow"]);
}

#[tokio::test]
async fn a_grant_never_lifts_forbid() {
    let rm = TestTool::new("rm").gate(Gate::Forbid);
    let write = write_tool().gate_fn(|args| {
        if args["path"].as_str().is_some_and(|p| p.starts_with('/')) { Gate::Forbid } else { Gate::Ask }
    });
    let grants = vec![grant("g-rm", "rm", json!({})), grant("g-write", "write", json!({}))];
    let scope = RunScope::new("run");

    // Only forbidden calls: nothing to hold, each is its error result.
    let forbidden =
        json!([{"name": "rm", "arguments": {"path": "a"}}, {"name": "write", "arguments": {"path": "/etc/x"}}]);
    let hooks = hooks_with(grants.clone());
    let done = completed(agent(one_turn(forbidden), &[&rm, &write]).start(&scope, "go", &hooks).await);
    for call_id in ["call_1", "call_2"] {
        assert!(result(&done.transcript, call_id).content.contains("is forbidden by policy"), "{call_id}");
    }
    assert_eq!(rm.call_count() + write.call_count(), 0);

    // Beside a granted call: still refused, and only the granted one runs.
    let mixed = json!([
        {"name": "rm", "arguments": {"path": "a"}},
        {"name": "write", "arguments": {"path": "/etc/x"}},
        {"name": "write", "arguments": {"path": "notes/a"}}
    ]);
    let agent = agent(one_turn(mixed), &[&rm, &write]);
    let held = suspended(agent.start(&scope, "go", &hooks).await);
    assert!(matches!(held.calls[0].state, HeldCallState::Refused(_)));
    assert!(matches!(held.calls[1].state, HeldCallState::Refused(_)));
    assert_eq!(held.calls[2].state, granted("g-write"));
    let plan = agent
        .plan_resume(&RunScope::new("run"), &held, &Decisions::new(), &grants)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    completed(agent.resume_planned(&scope, held, plan, &hooks).await);
    assert_eq!(rm.call_count(), 0);
    assert_eq!(write.calls(), [(CallId::from("call_3"), json!({"path": "notes/a"}))]);
}

/// A tool that says no grant may allow a call (a policy rule's `grantable = false`) keeps asking for it,
/// whatever grants are in force, and proposes no grant for it; a person's decision runs it as ever.
#[tokio::test]
async fn a_call_its_tool_says_is_not_grantable_keeps_asking() {
    let shell = TestTool::new("shell").gate(Gate::Ask).grantable_fn(|_| false);
    let write = write_tool().grantable_fn(|args| !args["path"].as_str().is_some_and(|p| p.starts_with("secrets/")));
    let calls = json!([
        {"name": "shell", "arguments": {"argv": ["ls"]}},
        {"name": "write", "arguments": {"path": "secrets/key"}},
        {"name": "write", "arguments": {"path": "notes/a"}}
    ]);
    let grants = vec![grant("g-shell", "shell", json!({})), grant("g-write", "write", json!({}))];
    let hooks = hooks_with(grants.clone());
    let scope = RunScope::new("run");
    let agent = agent(one_turn(calls), &[&shell, &write]);

    let held = reload(&suspended(agent.start(&scope, "go", &hooks).await));
    assert_eq!(states(&held), [HeldCallState::Asks, HeldCallState::Asks, granted("g-write")]);
    let decidable: Vec<&str> = held.decidable_calls().map(|c| c.call_id.as_str()).collect();
    assert_eq!(decidable, ["call_1", "call_2"]);
    assert!(held.calls[..2].iter().all(|c| c.suggested_match.is_none()), "no grant is proposed where none may apply");
    assert_eq!(agent.granted(&held.calls[0], &grants), None);
    assert_eq!(agent.granted(&held.calls[1], &grants), None);

    let decided: Decisions =
        [(CallId::from("call_1"), Decision::Deny { reason: "no".into() }), (CallId::from("call_2"), Decision::Approve)]
            .into_iter()
            .collect();
    let plan =
        agent.plan_resume(&RunScope::new("run"), &held, &decided, &grants).await.unwrap_or_else(|e| panic!("{e}"));
    completed(agent.resume_planned(&scope, held, plan, &hooks).await);
    assert_eq!(shell.call_count(), 0, "denied, and no grant stands in");
    let started: Vec<String> = hooks.lines().into_iter().filter(|l| l.starts_with("tool_started")).collect();
    assert_eq!(started, ["tool_started 1 call_2 write ask", "tool_started 1 call_3 write ask grant=g-write"]);
}

/// A quorum asks several people by design: no grant stands in for them.
#[tokio::test]
async fn a_call_a_quorum_must_approve_keeps_asking() {
    let pay = TestTool::new("pay").gate(Gate::Ask).approvals(2);
    let agent = agent(one_turn(json!([{"name": "pay", "arguments": {"cents": 5}}])), &[&pay]);
    let grants = vec![grant("g-pay", "pay", json!({}))];
    let held = suspended(agent.start(&RunScope::new("run"), "go", &hooks_with(grants.clone())).await);
    assert_eq!(states(&held), [HeldCallState::Asks]);
    assert_eq!(agent.granted(&held.calls[0], &grants), None);
}

/// A grant on `notes/*` reads the path as the tool resolves it: `notes/../x` is `x` and asks, while an odd
/// spelling of a path inside the folder is allowed.
#[tokio::test]
async fn a_grant_on_a_folder_judges_the_resolved_path_not_its_spelling() {
    let write = write_tool();
    let paths = ["notes/a.md", "notes/../x", "./notes//b.md", "notes/../notes/c.md", "notes/deep/d.md", "x/../notes"];
    let calls: Vec<Value> = paths.iter().map(|p| json!({"name": "write", "arguments": {"path": p}})).collect();
    let grants = vec![grant("g-notes", "write", json!({"/path": "notes/*"}))];
    let agent = agent(one_turn(Value::Array(calls)), &[&write]);
    let held = suspended(agent.start(&RunScope::new("run"), "go", &hooks_with(grants.clone())).await);
    let asks = HeldCallState::Asks;
    let g = granted("g-notes");
    assert_eq!(states(&held), [g.clone(), asks.clone(), g.clone(), g, asks.clone(), asks]);
    for call in &held.calls {
        let expected = matches!(call.state, HeldCallState::Granted(_)).then(|| GrantId::from("g-notes"));
        assert_eq!(agent.granted(&HeldCall { state: HeldCallState::Asks, ..call.clone() }, &grants), expected);
    }
}

// ---------------------------------------------------------------------------------------------------------
// A granted call in a held turn, at the resume

/// The script: a `write` in `notes/` and a `pay`, then the answer.
fn granted_and_asking() -> Value {
    one_turn(json!([{"name": "write", "arguments": {"path": "notes/a"}}, {"name": "pay", "arguments": {"cents": 5}}]))
}

/// The turn held with its `write` granted, for the `pay` decision (nothing of it ran).
async fn held_for_a_person() -> Suspension {
    let agent = agent(granted_and_asking(), &[&write_tool(), &TestTool::new("pay").gate(Gate::Ask)]);
    let hooks = hooks_with(vec![grant("g-write", "write", json!({"/path": "notes/*"}))]);
    let held = reload(&suspended(agent.start(&RunScope::new("run"), "go", &hooks).await));
    assert_eq!(states(&held), [granted("g-write"), HeldCallState::Asks]);
    held
}

/// Resumes `held` with `pay` approved and `in_force` the grants now, in a fresh loop (another process)
/// over `write` and a fresh `pay`; the completion and how many times each ran.
async fn resume_with(held: Suspension, write: &TestTool, in_force: Vec<GrantRecord>) -> (Completion, usize, usize) {
    let pay = TestTool::new("pay").gate(Gate::Ask);
    let agent = agent(granted_and_asking(), &[write, &pay]);
    let approve: Decisions = [(CallId::from("call_2"), Decision::Approve)].into_iter().collect();
    let plan =
        agent.plan_resume(&RunScope::new("run"), &held, &approve, &in_force).await.unwrap_or_else(|e| panic!("{e}"));
    let hooks = hooks_with(in_force);
    let done = completed(agent.resume_planned(&RunScope::new("run"), held, plan, &hooks).await);
    (done, write.call_count(), pay.call_count())
}

#[tokio::test]
async fn a_granted_call_runs_at_the_resume_only_if_its_grant_still_allows_it() {
    let notes = || grant("g-write", "write", json!({"/path": "notes/*"}));
    let cases: [(&str, TestTool, Vec<GrantRecord>, bool); 5] = [
        ("still in force", write_tool(), vec![notes()], true),
        ("revoked (or expired): no longer passed", write_tool(), Vec::new(), false),
        ("another grant does not stand in for it", write_tool(), vec![grant("g-any", "write", json!({}))], false),
        ("narrowed", write_tool(), vec![grant("g-write", "write", json!({"/path": "other/*"}))], false),
        ("its tool now says no grant may allow it", write_tool().grantable_fn(|_| false), vec![notes()], false),
    ];
    for (why, write, in_force, runs) in cases {
        let (done, writes, pays) = resume_with(held_for_a_person().await, &write, in_force).await;
        assert_eq!((writes, pays), (usize::from(runs), 1), "{why}: the rest of the turn runs");
        let own = result(&done.transcript, "call_1");
        if runs {
            assert!(!own.is_error, "{why}: {own:?}");
        } else {
            assert!(own.is_error && !own.denied, "{why}: {own:?}");
            assert!(own.content.contains("allowed by grant g-write, which no longer allows it"), "{why}: {own:?}");
        }
        assert!(!result(&done.transcript, "call_2").is_error, "{why}");
    }
}

/// `resume` (plan and execute in one) has no grant in force: a granted call is its error result there.
#[tokio::test]
async fn resume_without_grants_does_not_run_a_granted_call() {
    let (write, pay) = (write_tool(), TestTool::new("pay").gate(Gate::Ask));
    let held = held_for_a_person().await;
    let agent = agent(granted_and_asking(), &[&write, &pay]);
    let approve: Decisions = [(CallId::from("call_2"), Decision::Approve)].into_iter().collect();
    let done = completed(agent.resume(&RunScope::new("run"), held, &approve, &NoHooks).await);
    assert_eq!((write.call_count(), pay.call_count()), (0, 1));
    assert!(result(&done.transcript, "call_1").is_error);
}

/// A granted call that started but never finished (a crash) is in doubt: it takes a person's decision,
/// and no grant in force lets it run again.
#[tokio::test]
async fn a_granted_call_left_in_doubt_takes_a_persons_decision() {
    let write = write_tool();
    let grants = vec![grant("g-write", "write", json!({}))];
    let agent = agent(one_turn(json!([{"name": "write", "arguments": {"path": "notes/a"}}])), &[&write]);
    let mut held = suspended(agent.start(&RunScope::new("run"), "go", &hooks_with(grants.clone())).await);
    let before = held.turn_digest.clone();
    assert!(held.mark_in_doubt(&CallId::from("call_1")));
    assert_eq!(states(&held), [HeldCallState::InDoubt]);
    assert_ne!(held.turn_digest, before);
    assert!(held.calls[0].takes_decision());
    assert_eq!(agent.granted(&held.calls[0], &grants), None);
    let planned = agent.plan_resume(&RunScope::new("run"), &held, &Decisions::new(), &grants).await;
    assert!(matches!(planned, Err(DecisionError::Missing(ref m)) if m == &[CallId::from("call_1")]), "{planned:?}");
}

// ---------------------------------------------------------------------------------------------------------
// The stored form

fn held_call(state: HeldCallState) -> HeldCall {
    HeldCall {
        call_id: "call_1".into(),
        tool: "write".into(),
        arguments: json!({"path": "notes/a"}),
        preview: None,
        observed: None,
        state,
        requirement: Requirement::SINGLE,
        suggested_match: None,
    }
}

#[tokio::test]
async fn a_granted_call_is_stored_as_an_asking_call_with_its_grant() -> Result<(), SuspensionError> {
    let call = held_call(granted("g-1"));
    let text = serde_json::to_string(&call).map_err(|e| SuspensionError::Invalid(e.to_string()))?;
    let v1 = r#""call_id":"call_1","tool":"write","arguments":{"path":"notes/a"},"gate":"ask","preview":null"#;
    assert_eq!(text, format!(r#"{{{v1},"in_doubt":false,"settled":null,"grant":"g-1"}}"#), "v1 fields, then the grant");
    let read: HeldCall = serde_json::from_str(&text).map_err(|e| SuspensionError::Invalid(e.to_string()))?;
    assert_eq!(read, call);

    // In a held turn as the loop stores it, read back whole by another process.
    let write = write_tool();
    let agent = agent(one_turn(json!([{"name": "write", "arguments": {"path": "notes/a"}}])), &[&write]);
    let hooks = hooks_with(vec![grant("g-1", "write", json!({}))]);
    let held = suspended(agent.start(&RunScope::new("run"), "go", &hooks).await);
    let stored = held.to_json()?;
    assert!(stored.contains(r#""settled":null,"grant":"g-1"}"#), "{stored}");
    assert_eq!(Suspension::from_json(&stored)?, held);
    Ok(())
}

#[test]
fn a_stored_grant_beside_another_state_is_refused() {
    let settled = r#"{"call_id":"call_1","tool":"write","content":"x"}"#;
    for flags in [
        r#""gate":"allow","grant":"g-1""#.to_owned(),
        r#""gate":"ask","in_doubt":true,"grant":"g-1""#.to_owned(),
        format!(r#""gate":"ask","settled":{settled},"grant":"g-1""#),
        format!(r#""gate":"forbid","settled":{settled},"grant":"g-1""#),
    ] {
        let text = format!(r#"{{"call_id":"call_1","tool":"write","arguments":{{}},{flags}}}"#);
        let read = serde_json::from_str::<HeldCall>(&text);
        assert!(read.as_ref().is_err_and(|e| e.to_string().contains("no call is in that state")), "{flags}: {read:?}");
    }
}

// ---------------------------------------------------------------------------------------------------------
// The property: whatever grants exist, nothing forbidden, refused to grants or needing a quorum runs
// without a person's decision, and a granted call runs only under a grant that allows it then.

const TOOLS: [&str; 3] = ["alpha", "beta", "gamma"];
const PATHS: [&str; 5] = ["notes/a", "notes/../x", "./notes//b", "x", "notes/deep/c"];

/// A gate, or whether a grant may allow a call, by the call's `flag`.
#[derive(Clone, Copy, Debug)]
enum ByFlag<T> {
    Fixed(T),
    Flag { on: T, off: T },
}

impl<T: Copy> ByFlag<T> {
    fn of(self, args: &Value) -> T {
        match self {
            ByFlag::Fixed(value) => value,
            ByFlag::Flag { on, off } => {
                if args.get("flag").and_then(Value::as_bool).unwrap_or(false) {
                    on
                } else {
                    off
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct ToolRule {
    gate: ByFlag<Gate>,
    grantable: ByFlag<bool>,
    approvals: u32,
}

#[derive(Clone, Debug)]
struct GrantCase {
    rules: [ToolRule; 3],
    grants: Vec<GrantRecord>,
    /// Per grant: revoked once the run was first held.
    revoked: Vec<bool>,
    turns: Vec<Vec<(String, Value)>>,
    choices: Vec<u8>,
}

impl GrantCase {
    fn rule(&self, tool: &str) -> Option<ToolRule> {
        TOOLS.iter().position(|t| *t == tool).map(|i| self.rules[i])
    }

    /// The grants in force for segment `segment` (0: the start).
    fn in_force(&self, segment: usize) -> Vec<GrantRecord> {
        self.grants
            .iter()
            .zip(&self.revoked)
            .filter(|(_, revoked)| segment == 0 || !**revoked)
            .map(|(g, _)| g.clone())
            .collect()
    }

    fn script(&self) -> Value {
        let turns: Vec<Value> = self
            .turns
            .iter()
            .map(|calls| {
                let calls: Vec<Value> =
                    calls.iter().map(|(tool, args)| json!({"name": tool, "arguments": args})).collect();
                json!({"tool_calls": calls})
            })
            .chain([json!({"text": "done"})])
            .collect();
        json!({"turns": turns})
    }
}

fn gate_strategy() -> impl Strategy<Value = Gate> {
    prop_oneof![1 => Just(Gate::Allow), 3 => Just(Gate::Ask), 1 => Just(Gate::Forbid)]
}

fn by_flag<T: Copy + std::fmt::Debug + 'static, S: Strategy<Value = T> + 'static>(
    value: impl Fn() -> S,
) -> impl Strategy<Value = ByFlag<T>> {
    prop_oneof![value().prop_map(ByFlag::Fixed), (value(), value()).prop_map(|(on, off)| ByFlag::Flag { on, off }),]
}

fn tool_rule() -> impl Strategy<Value = ToolRule> {
    (
        by_flag(gate_strategy),
        by_flag(|| prop_oneof![3 => Just(true), 1 => Just(false)]),
        prop_oneof![4 => Just(1u32), 1 => Just(2u32)],
    )
        .prop_map(|(gate, grantable, approvals)| ToolRule { gate, grantable, approvals })
}

fn grant_strategy() -> impl Strategy<Value = GrantRecord> {
    let tool = proptest::sample::select(vec!["alpha", "beta", "gamma", "ghost"]);
    let matcher = prop_oneof![
        Just(json!({})),
        (0i64..4).prop_map(|n| json!({"/n": n})),
        any::<bool>().prop_map(|flag| json!({"/flag": flag})),
        Just(json!({"/path": "notes/*"})),
        Just(json!({"/path": "*"})),
        Just(json!({"/n": "1"})),
        Just(json!({"/missing": "*"})),
    ];
    (tool, matcher, 0u16..1000).prop_map(|(tool, matcher, id)| grant(&format!("g-{id}"), tool, matcher))
}

fn call_strategy() -> impl Strategy<Value = (String, Value)> {
    let tool = prop_oneof![6 => proptest::sample::select(TOOLS.to_vec()), 1 => Just("ghost")];
    let args = (0i64..4, any::<bool>(), proptest::sample::select(PATHS.to_vec()))
        .prop_map(|(n, flag, path)| json!({"n": n, "flag": flag, "path": path}));
    (tool, args).prop_map(|(tool, args)| (tool.to_owned(), args))
}

fn grant_case() -> impl Strategy<Value = GrantCase> {
    (
        proptest::array::uniform3(tool_rule()),
        proptest::collection::vec((grant_strategy(), any::<bool>()), 0..=5),
        proptest::collection::vec(proptest::collection::vec(call_strategy(), 0..=4), 1..=4),
        proptest::collection::vec(0u8..3, 1..=6),
    )
        .prop_map(|(rules, grants, turns, choices)| {
            let (grants, revoked) = grants.into_iter().unzip();
            GrantCase { rules, grants, revoked, turns, choices }
        })
}

/// Hooks of one segment: its grants in force, and each call's start with the grant it named.
#[derive(Default)]
struct Segment {
    grants: Vec<GrantRecord>,
    started: Mutex<Vec<(CallId, Gate, Option<GrantId>)>>,
}

impl LoopHooks for Segment {
    fn on_event<'a>(&'a self, event: LoopEvent<'a>) -> BoxFuture<'a, Result<(), HookError>> {
        if let LoopEvent::ToolStarted { call_id, gate, grant, .. } = event {
            self.started.lock().unwrap_or_else(PoisonError::into_inner).push((call_id.clone(), gate, grant.cloned()));
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn grants_in_force(&self) -> BoxFuture<'_, Result<Arc<[GrantRecord]>, HookError>> {
        Box::pin(std::future::ready(Ok(Arc::from(self.grants.clone()))))
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, TestCaseError> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| TestCaseError::fail(e.to_string()))
}

/// Whether a grant of `grants` would allow the call by the rules alone (tool, grantable, resolved match).
fn some_grant_allows(case: &GrantCase, grants: &[GrantRecord], grant: &GrantId, tool: &str, args: &Value) -> bool {
    let Some(rule) = case.rule(tool) else { return false };
    rule.grantable.of(args)
        && rule.approvals == 1
        && grants
            .iter()
            .find(|g| g.tool == tool && g.matcher.matches(args, &resolved_path(args)))
            .is_some_and(|g| &g.id == grant)
}

/// A call's start as the hooks saw it, with the grants in force in its segment.
struct Started {
    call_id: CallId,
    gate: Gate,
    grant: Option<GrantId>,
    in_force: Vec<GrantRecord>,
}

/// What a whole run did: its completion, every call's start, every person's decision.
struct Played {
    done: Completion,
    starts: Vec<Started>,
    decided: Decisions,
}

/// Runs the case to completion, a fresh loop (as another process) per segment, deciding each held call
/// by the case's choices and revoking the case's revoked grants once the run was first held.
async fn play(case: &GrantCase, tools: &[TestTool]) -> Result<Played, TestCaseError> {
    let script = Script::from_value(case.script()).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let model = Arc::new(ScriptedModel::new(script));
    let new_loop = || -> Result<ToolLoop, TestCaseError> {
        let mut registry = ToolRegistry::new();
        for tool in tools {
            registry.register(tool.shared()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        Ok(ToolLoop::new(model.clone(), Arc::new(registry), LoopConfig { max_iterations: 10, ..LoopConfig::default() }))
    };
    let mut starts = Vec::new();
    let mut decided = Decisions::new();
    let mut segment = Segment { grants: case.in_force(0), ..Segment::default() };
    let mut outcome = new_loop()?.start(&RunScope::new("run"), "go", &segment).await;
    let mut segments = 0;
    loop {
        let started = std::mem::take(&mut *segment.started.lock().unwrap_or_else(PoisonError::into_inner));
        starts.extend(started.into_iter().map(|(call_id, gate, grant)| Started {
            call_id,
            gate,
            grant,
            in_force: segment.grants.clone(),
        }));
        let held = match outcome {
            Ok(Outcome::Completed(done)) => return Ok(Played { done, starts, decided }),
            Ok(Outcome::Suspended(held)) => held,
            Err(e) => return Err(TestCaseError::fail(format!("the run failed: {e}"))),
        };
        segments += 1;
        prop_assert!(segments <= case.turns.len(), "more suspensions than turns");
        // Held as granted only what a grant in force allowed, by the rules alone.
        for call in &held.calls {
            if let HeldCallState::Granted(grant) = &call.state {
                prop_assert!(
                    case.rule(&call.tool).is_some_and(|r| r.gate.of(&call.arguments) == Gate::Ask),
                    "{call:?}"
                );
                prop_assert!(some_grant_allows(case, &segment.grants, grant, &call.tool, &call.arguments), "{call:?}");
            }
        }
        let held = Suspension::from_json(&held.to_json().map_err(|e| TestCaseError::fail(e.to_string()))?)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let decisions: Decisions = held
            .decidable_calls()
            .enumerate()
            .map(|(i, call)| {
                let decision = match case.choices[(decided.len() + i) % case.choices.len()] {
                    0 => Decision::Approve,
                    1 => Decision::Deny { reason: "no".into() },
                    _ => Decision::Respond { result: "answered".into() },
                };
                (call.call_id.clone(), decision)
            })
            .collect();
        decided.extend(decisions.clone());
        segment = Segment { grants: case.in_force(segments), ..Segment::default() };
        let agent = new_loop()?;
        let plan = agent
            .plan_resume(&RunScope::new("run"), &held, &decisions, &segment.grants)
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        outcome = agent.resume_planned(&RunScope::new("run"), held, plan, &segment).await;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Whatever grants exist: a call runs only when its gate allows it, a person approved it, or a grant
    /// in force in its segment allowed it by every rule (the gate asks, the tool lets a grant allow it, no
    /// quorum, the grant's tool and resolved match); so no call its gate forbids, or whose tool says no
    /// grant may allow it, ever runs without a person's decision. Every call gets exactly one result.
    #[test]
    fn no_call_runs_on_a_grant_that_the_rules_do_not_let_allow_it(case in grant_case()) {
        let tools: Vec<TestTool> = TOOLS
            .iter()
            .zip(case.rules)
            .map(|(name, rule)| {
                TestTool::new(*name)
                    .gate_fn(move |args| rule.gate.of(args))
                    .grantable_fn(move |args| rule.grantable.of(args))
                    .approvals(rule.approvals)
                    .policy_paths_fn(resolved_path)
            })
            .collect();
        let Played { done, starts, decided } = runtime()?.block_on(play(&case, &tools))?;

        let model_calls: BTreeMap<&CallId, (&str, &Value)> = done
            .transcript
            .iter()
            .filter_map(|m| match m {
                Message::Assistant { tool_calls, .. } => Some(tool_calls),
                _ => None,
            })
            .flatten()
            .map(|c| (&c.call_id, (c.name.as_str(), &c.arguments)))
            .collect();
        for call_id in model_calls.keys() {
            let answers =
                done.transcript.iter().filter(|m| matches!(m, Message::Tool(r) if &r.call_id == *call_id)).count();
            prop_assert_eq!(answers, 1, "{} has exactly one result", call_id);
        }
        let mut ran: BTreeMap<CallId, Value> = BTreeMap::new();
        for (tool, name) in tools.iter().zip(TOOLS) {
            for (call_id, args) in tool.calls() {
                prop_assert!(ran.insert(call_id.clone(), args).is_none(), "{} ({}) ran twice", call_id, name);
            }
        }
        prop_assert_eq!(ran.len(), starts.len(), "every call that ran was announced once");
        for Started { call_id, gate, grant, in_force } in &starts {
            let (tool, args) =
                model_calls.get(call_id).copied().ok_or_else(|| TestCaseError::fail(format!("{call_id} is no call")))?;
            let rule = case.rule(tool).ok_or_else(|| TestCaseError::fail(format!("unknown {tool} ran")))?;
            prop_assert_eq!(ran.get(call_id), Some(args), "{} ran with the model's arguments", call_id);
            prop_assert_eq!(*gate, rule.gate.of(args), "{} started under its own gate", call_id);
            let by_person = matches!(decided.get(call_id), Some(Decision::Approve));
            match (rule.gate.of(args), grant) {
                (Gate::Forbid, _) => return Err(TestCaseError::fail(format!("forbidden {call_id} ran"))),
                (Gate::Allow, grant) => prop_assert_eq!(grant, &None, "{}", call_id),
                (Gate::Ask, None) => prop_assert!(by_person, "{} asked and ran without an approval", call_id),
                (Gate::Ask, Some(grant)) => {
                    prop_assert!(!decided.contains_key(call_id), "{} was decided by a person and a grant", call_id);
                    prop_assert!(
                        some_grant_allows(&case, in_force, grant, tool, args),
                        "{} ran on {} against the rules",
                        call_id,
                        grant
                    );
                }
            }
        }
    }
}
