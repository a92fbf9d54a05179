//! Property tests for the loop's invariants over random scripts, gates and decisions (docs/design.md, "The loop"):
//!
//! - no ask-gated call runs without an `approve` or `edit` decision for its `call_id`;
//! - before every model call, every earlier call has exactly one result, right after its turn;
//! - suspending and approving everything gives the same run as never asking.
//!
//! Each case plays a random script of up to five turns of up to four calls against three tools whose gates
//! are fixed or depend on the arguments (plus, sometimes, a tool that does not exist), decides every held
//! call at random, and resumes — each time in a fresh loop from the suspension's JSON, as another process
//! would — until the run completes. The result of every call is then checked against a reference model.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use tollgate_agent_core::scripted::{Script, ScriptedModel};
use tollgate_agent_core::{
    AgentLoop, BoxFuture, CallId, Completion, Decision, Decisions, Gate, HeldCall, ITERATION_LIMIT_RESULT, LoopConfig,
    Message, ModelClient, ModelError, ModelRequest, ModelResponse, NoHooks, Outcome, RunScope, Suspension, ToolLoop,
    ToolRegistry, ToolResult,
};
use tollgate_agent_testkit::TestTool;

const TOOLS: [&str; 3] = ["alpha", "beta", "gamma"];
const UNKNOWN_TOOLS: [&str; 2] = ["ghost", "rm_rf"];
const DENIAL_REASON: &str = "not now";

/// A tool's gate: fixed, or chosen by the call's arguments.
#[derive(Clone, Copy, Debug)]
enum GateRule {
    Fixed(Gate),
    /// By `flag` (absent counts as false).
    ByFlag {
        on: Gate,
        off: Gate,
    },
    /// By `n` (absent or not a number counts as 0).
    BySize {
        small: Gate,
        large: Gate,
    },
}

impl GateRule {
    fn gate(self, args: &Value) -> Gate {
        match self {
            GateRule::Fixed(gate) => gate,
            GateRule::ByFlag { on, off } => {
                if args.get("flag").and_then(Value::as_bool).unwrap_or(false) {
                    on
                } else {
                    off
                }
            }
            GateRule::BySize { small, large } => {
                if args.get("n").and_then(Value::as_i64).unwrap_or(0) >= 5 {
                    large
                } else {
                    small
                }
            }
        }
    }

    /// The same rule with every `ask` turned into `allow` (a `forbid` stays).
    fn without_ask(self) -> Self {
        let relax = |gate| if gate == Gate::Ask { Gate::Allow } else { gate };
        match self {
            GateRule::Fixed(gate) => GateRule::Fixed(relax(gate)),
            GateRule::ByFlag { on, off } => GateRule::ByFlag { on: relax(on), off: relax(off) },
            GateRule::BySize { small, large } => GateRule::BySize { small: relax(small), large: relax(large) },
        }
    }
}

fn schema(tool: &str) -> Value {
    match tool {
        "beta" => json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}),
        "gamma" => json!({"type": "object", "properties": {"flag": {"type": "boolean"}}}),
        _ => json!({"type": "object"}),
    }
}

/// The reference answer to "do these arguments pass the tool's schema" for the schemas above.
fn schema_accepts(tool: &str, args: &Value) -> bool {
    match tool {
        "beta" => args.get("n").is_some_and(Value::is_i64),
        "gamma" => args.get("flag").is_none_or(Value::is_boolean),
        _ => args.is_object(),
    }
}

/// How the random approver answers one held call.
#[derive(Clone, Debug)]
enum Choice {
    Approve,
    Edit { n: i64, flag: bool },
    Deny,
    Respond,
}

impl Choice {
    fn decision(&self, call_id: &str) -> Decision {
        match self {
            Choice::Approve => Decision::Approve,
            // Valid for every schema above, so the edit is never refused.
            Choice::Edit { n, flag } => Decision::Edit { arguments: json!({"n": n, "flag": flag}) },
            Choice::Deny => Decision::Deny { reason: DENIAL_REASON.into() },
            Choice::Respond => Decision::Respond { result: format!("answered in place of {call_id}") },
        }
    }
}

#[derive(Clone, Debug)]
struct Call {
    tool: String,
    arguments: Value,
}

#[derive(Clone, Debug)]
struct Case {
    rules: [GateRule; 3],
    turns: Vec<Vec<Call>>,
    choices: Vec<Choice>,
    max_iterations: u32,
    concurrency: usize,
}

impl Case {
    /// The script: the random turns, then a closing answer (also what the closing completion at the cap
    /// reads, since it is always the next unread turn).
    fn script(&self) -> Value {
        let mut turns: Vec<Value> = self
            .turns
            .iter()
            .enumerate()
            .map(|(i, calls)| {
                let calls: Vec<Value> =
                    calls.iter().map(|c| json!({"name": c.tool, "arguments": c.arguments})).collect();
                json!({"text": format!("step {}", i + 1), "tool_calls": calls})
            })
            .collect();
        turns.push(json!({"text": "done"}));
        json!({"turns": turns})
    }

    fn config(&self) -> LoopConfig {
        LoopConfig { max_iterations: self.max_iterations, concurrency: self.concurrency, ..LoopConfig::default() }
    }

    fn rule(&self, tool: &str) -> Option<GateRule> {
        TOOLS.iter().position(|t| *t == tool).map(|i| self.rules[i])
    }

    fn without_ask(&self) -> Self {
        Self { rules: self.rules.map(GateRule::without_ask), ..self.clone() }
    }
}

fn gate() -> impl Strategy<Value = Gate> {
    prop_oneof![2 => Just(Gate::Allow), 3 => Just(Gate::Ask), 1 => Just(Gate::Forbid)]
}

fn rule() -> impl Strategy<Value = GateRule> {
    prop_oneof![
        gate().prop_map(GateRule::Fixed),
        (gate(), gate()).prop_map(|(on, off)| GateRule::ByFlag { on, off }),
        (gate(), gate()).prop_map(|(small, large)| GateRule::BySize { small, large }),
    ]
}

fn call() -> impl Strategy<Value = Call> {
    let tool = prop_oneof![
        6 => proptest::sample::select(TOOLS.to_vec()),
        1 => proptest::sample::select(UNKNOWN_TOOLS.to_vec()),
    ];
    let arguments = prop_oneof![
        6 => (0i64..10, any::<bool>()).prop_map(|(n, flag)| json!({"n": n, "flag": flag})),
        1 => Just(json!({"n": "many"})),
        1 => Just(json!({})),
    ];
    (tool, arguments).prop_map(|(tool, arguments)| Call { tool: tool.to_owned(), arguments })
}

fn choice() -> impl Strategy<Value = Choice> {
    prop_oneof![
        Just(Choice::Approve),
        (0i64..10, any::<bool>()).prop_map(|(n, flag)| Choice::Edit { n, flag }),
        Just(Choice::Deny),
        Just(Choice::Respond),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::array::uniform3(rule()),
        proptest::collection::vec(proptest::collection::vec(call(), 0..=4), 1..=5),
        proptest::collection::vec(choice(), 1..=8),
        // Mostly room for several rounds; sometimes a cap that cuts the script short.
        prop_oneof![1 => 1u32..=2, 3 => 3u32..=6],
        1usize..=4,
    )
        .prop_map(|(rules, turns, choices, max_iterations, concurrency)| Case {
            rules,
            turns,
            choices,
            max_iterations,
            concurrency,
        })
}

/// The scripted model behind a check of invariant 6: every request's transcript gives each call of each
/// assistant turn exactly one result, right after the turn and in the model's order, with no orphans.
/// A broken transcript is refused as a provider would refuse it, and remembered.
struct CheckedModel {
    inner: ScriptedModel,
    violations: Mutex<Vec<String>>,
}

impl CheckedModel {
    fn new(case: &Case) -> Result<Self, TestCaseError> {
        let script = Script::from_value(case.script()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        Ok(Self { inner: ScriptedModel::new(script), violations: Mutex::default() })
    }

    fn violations(&self) -> Vec<String> {
        self.violations.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl ModelClient for CheckedModel {
    fn complete<'a>(&'a self, request: ModelRequest<'a>) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        if let Err(problem) = check_transcript(request.messages) {
            self.violations.lock().unwrap_or_else(PoisonError::into_inner).push(problem.clone());
            return Box::pin(std::future::ready(Err(ModelError::BadRequest { status: 400, message: problem })));
        }
        self.inner.complete(request)
    }
}

fn check_transcript(messages: &[Message]) -> Result<(), String> {
    let mut calls: BTreeMap<&str, usize> = BTreeMap::new();
    let mut results: BTreeMap<&str, usize> = BTreeMap::new();
    for message in messages {
        match message {
            Message::Assistant { tool_calls, .. } => {
                for call in tool_calls {
                    *calls.entry(call.call_id.as_str()).or_default() += 1;
                }
            }
            Message::Tool(result) => *results.entry(result.call_id.as_str()).or_default() += 1,
            _ => {}
        }
    }
    if let Some((id, n)) = calls.iter().find(|(_, n)| **n != 1) {
        return Err(format!("call id {id} appears in {n} calls"));
    }
    for id in calls.keys() {
        match results.get(id) {
            Some(1) => {}
            n => return Err(format!("call {id} has {} results", n.copied().unwrap_or(0))),
        }
    }
    if let Some(id) = results.keys().find(|id| !calls.contains_key(*id)) {
        return Err(format!("result for {id} answers no call"));
    }
    // Providers also want the results right after their turn, in the turn's order.
    let mut i = 0;
    while let Some(message) = messages.get(i) {
        match message {
            Message::Assistant { tool_calls, .. } => {
                for (k, call) in tool_calls.iter().enumerate() {
                    match messages.get(i + 1 + k) {
                        Some(Message::Tool(result)) if result.call_id == call.call_id => {}
                        other => return Err(format!("call {} is not answered in place: {other:?}", call.call_id)),
                    }
                }
                i += 1 + tool_calls.len();
            }
            Message::Tool(result) => return Err(format!("result for {} is out of place", result.call_id)),
            _ => i += 1,
        }
    }
    Ok(())
}

/// The case's tools; their call logs are shared by every loop built over them.
struct Toolbox {
    tools: Vec<TestTool>,
}

impl Toolbox {
    fn new(case: &Case) -> Self {
        let tools = TOOLS
            .iter()
            .zip(case.rules)
            .map(|(name, rule)| TestTool::new(*name).schema(schema(name)).gate_fn(move |args| rule.gate(args)))
            .collect();
        Self { tools }
    }

    /// A fresh registry over the same tools, as a new process would build.
    fn registry(&self) -> Result<Arc<ToolRegistry>, TestCaseError> {
        let mut registry = ToolRegistry::new();
        for tool in &self.tools {
            registry.register(tool.shared()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        Ok(Arc::new(registry))
    }

    /// Every invocation so far: call id → (tool, arguments), with every call id that ran more than once.
    fn invocations(&self) -> (BTreeMap<CallId, (String, Value)>, Vec<CallId>) {
        let mut ran = BTreeMap::new();
        let mut repeated = Vec::new();
        for (tool, name) in self.tools.iter().zip(TOOLS) {
            for (call_id, args) in tool.calls() {
                if ran.insert(call_id.clone(), (name.to_owned(), args)).is_some() {
                    repeated.push(call_id);
                }
            }
        }
        (ran, repeated)
    }
}

/// What one whole run (every segment) did.
struct Run {
    completion: Completion,
    decisions: Decisions,
    suspensions: usize,
}

/// Starts a run and resumes it until it completes, deciding each held call with `decide`.
async fn run_to_completion(
    case: &Case,
    toolbox: &Toolbox,
    decide: impl Fn(usize, &HeldCall) -> Decision,
) -> Result<Run, TestCaseError> {
    let model = Arc::new(CheckedModel::new(case)?);
    let new_loop =
        || -> Result<ToolLoop, TestCaseError> { Ok(ToolLoop::new(model.clone(), toolbox.registry()?, case.config())) };
    let mut decisions = Decisions::new();
    let mut suspensions = 0;
    let mut outcome = new_loop()?.start(&RunScope::new("run"), "go", &NoHooks).await;
    loop {
        let suspension = match outcome {
            Ok(Outcome::Completed(completion)) => {
                prop_assert_eq!(model.violations(), Vec::<String>::new());
                return Ok(Run { completion, decisions, suspensions });
            }
            Ok(Outcome::Suspended(suspension)) => suspension,
            Err(e) => return Err(TestCaseError::fail(format!("the run failed: {e}; {:?}", model.violations()))),
        };
        suspensions += 1;
        prop_assert!(suspensions <= case.turns.len(), "more suspensions than turns");
        check_suspension(case, toolbox, &suspension)?;

        // Another process reads it back before resuming.
        let stored = suspension.to_json().unwrap_or_else(|e| panic!("{e}"));
        let restored = Suspension::from_json(&stored).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&restored, &suspension);

        let held: Decisions = restored
            .decidable_calls()
            .enumerate()
            .map(|(i, call)| (call.call_id.clone(), decide(decisions.len() + i, call)))
            .collect();
        decisions.extend(held.clone());
        outcome = new_loop()?.resume(&RunScope::new("run"), restored, &held, &NoHooks).await;
    }
}

/// A suspension holds the last turn whole, nothing of it ran, and exactly its ask-gated calls take a decision.
fn check_suspension(case: &Case, toolbox: &Toolbox, suspension: &Suspension) -> Result<(), TestCaseError> {
    let turns: Vec<&Message> =
        suspension.transcript.iter().filter(|m| matches!(m, Message::Assistant { .. })).collect();
    prop_assert_eq!(suspension.round as usize, turns.len());
    prop_assert_eq!(suspension.counters.iterations, suspension.round);
    let Some(Message::Assistant { tool_calls, .. }) = suspension.transcript.last() else {
        return Err(TestCaseError::fail("a suspension ends with the held assistant turn"));
    };
    let held: Vec<&str> = suspension.calls.iter().map(|c| c.call_id.as_str()).collect();
    let asked: Vec<&str> = tool_calls.iter().map(|c| c.call_id.as_str()).collect();
    prop_assert_eq!(held, asked, "the held calls are the turn's calls, in order");

    let (ran, _) = toolbox.invocations();
    for call in &suspension.calls {
        prop_assert!(!ran.contains_key(&call.call_id), "{} ran before its turn was decided", call.call_id);
        let asks = case
            .rule(&call.tool)
            .is_some_and(|rule| schema_accepts(&call.tool, &call.arguments) && rule.gate(&call.arguments) == Gate::Ask);
        prop_assert_eq!(call.takes_decision(), asks, "{} takes a decision iff its gate asks", &call.call_id);
    }
    Ok(())
}

/// What the reference model says one call's result must be.
enum Expected {
    Ran { arguments: Value, content: String },
    NotRun { content: String, is_error: bool, denied: bool },
}

fn expected(case: &Case, round: u32, tool: &str, arguments: &Value, decision: Option<&Decision>) -> Expected {
    let refused = |content: String| Expected::NotRun { content, is_error: true, denied: false };
    let forbidden = || refused(format!("Tool {tool} is forbidden by policy and was not run."));
    if round >= case.max_iterations {
        return refused(ITERATION_LIMIT_RESULT.to_owned());
    }
    let Some(rule) = case.rule(tool) else {
        return refused(format!("Tool {tool} does not exist. Available tools: alpha, beta, gamma."));
    };
    if !schema_accepts(tool, arguments) {
        return refused(format!("Tool {tool} was not run: invalid arguments:"));
    }
    let ran = |arguments: &Value| Expected::Ran {
        arguments: arguments.clone(),
        content: format!("ran {tool} with {arguments}"),
    };
    match (rule.gate(arguments), decision) {
        (Gate::Forbid, _) => forbidden(),
        (Gate::Allow, _) | (Gate::Ask, Some(Decision::Approve)) => ran(arguments),
        (Gate::Ask, Some(Decision::Edit { arguments })) => match rule.gate(arguments) {
            Gate::Forbid => forbidden(),
            _ => Expected::Ran {
                arguments: arguments.clone(),
                content: format!("[arguments edited by the approver: {arguments}]\nran {tool} with {arguments}"),
            },
        },
        (Gate::Ask, Some(Decision::Deny { reason })) => Expected::NotRun {
            content: format!("Tool {tool} was denied by the approver: {reason}"),
            is_error: true,
            denied: true,
        },
        (Gate::Ask, Some(Decision::Respond { result })) => {
            Expected::NotRun { content: result.clone(), is_error: false, denied: false }
        }
        (Gate::Ask, None) => refused("an ask-gated call without a decision has no result".into()),
    }
}

/// Checks every call of a finished run against the reference model and the tools' call logs.
fn check_run(case: &Case, toolbox: &Toolbox, run: &Run) -> Result<(), TestCaseError> {
    let done = &run.completion;
    check_transcript(&done.transcript).map_err(TestCaseError::fail)?;
    let results: BTreeMap<&str, &ToolResult> = done
        .transcript
        .iter()
        .filter_map(|m| match m {
            Message::Tool(result) => Some((result.call_id.as_str(), result)),
            _ => None,
        })
        .collect();
    let (ran, repeated) = toolbox.invocations();
    prop_assert_eq!(repeated, Vec::<CallId>::new(), "a call ran twice");

    // Invariant: an ask-gated call runs only with an approve or edit decision for its own call_id.
    for (call_id, (tool, arguments)) in &ran {
        let asked = case.rule(tool).is_some_and(|rule| {
            let model_args = done.transcript.iter().find_map(|m| match m {
                Message::Assistant { tool_calls, .. } => {
                    tool_calls.iter().find(|c| &c.call_id == call_id).map(|c| &c.arguments)
                }
                _ => None,
            });
            model_args.is_some_and(|args| rule.gate(args) == Gate::Ask)
        });
        if asked {
            match run.decisions.get(call_id) {
                Some(Decision::Approve | Decision::Edit { .. }) => {}
                other => {
                    return Err(TestCaseError::fail(format!(
                        "ask-gated {call_id} ({tool} {arguments}) ran with decision {other:?}"
                    )));
                }
            }
        }
    }

    let mut round = 0;
    let mut expected_runs = 0u32;
    for message in &done.transcript {
        let Message::Assistant { tool_calls, .. } = message else { continue };
        round += 1;
        for call in tool_calls {
            let id = call.call_id.as_str();
            let result = results.get(id).ok_or_else(|| TestCaseError::fail(format!("{id} has no result")))?;
            match expected(case, round, &call.name, &call.arguments, run.decisions.get(id)) {
                Expected::Ran { arguments, content } => {
                    expected_runs += 1;
                    prop_assert_eq!(ran.get(id), Some(&(call.name.clone(), arguments)), "{} ran as decided", id);
                    prop_assert_eq!(&result.content, &content);
                    prop_assert!(!result.is_error && !result.denied);
                }
                Expected::NotRun { content, is_error, denied } => {
                    prop_assert!(!ran.contains_key(id), "{} ran but must not have", id);
                    prop_assert!(result.content.starts_with(&content), "{}: {:?} vs {:?}", id, result.content, content);
                    prop_assert_eq!((result.is_error, result.denied), (is_error, denied), "{}", id);
                }
            }
        }
    }
    prop_assert_eq!(ran.len(), expected_runs as usize);
    prop_assert_eq!(done.counters.tool_invocations, expected_runs);
    let traced: BTreeMap<&str, (&str, &Value)> =
        done.trace.iter().map(|i| (i.call_id.as_str(), (i.tool.as_str(), &i.arguments))).collect();
    let logged: BTreeMap<&str, (&str, &Value)> =
        ran.iter().map(|(id, (tool, args))| (id.as_str(), (tool.as_str(), args))).collect();
    prop_assert_eq!(traced, logged, "the trace lists exactly the calls that ran");

    // The run ends at the first turn without calls, or at the cap.
    let answered_at = case.turns.iter().position(Vec::is_empty).unwrap_or(case.turns.len()) as u32 + 1;
    let iterations = answered_at.min(case.max_iterations);
    prop_assert_eq!(done.counters.iterations, iterations);
    Ok(())
}

fn runtime() -> Result<tokio::runtime::Runtime, TestCaseError> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| TestCaseError::fail(e.to_string()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Random decisions: every call gets exactly the result its gate and decision call for, no ask-gated
    /// call runs without approve/edit, and the transcript is well formed before every model call.
    #[test]
    fn every_call_gets_the_one_result_its_gate_and_decision_call_for(case in case()) {
        let toolbox = Toolbox::new(&case);
        let run = runtime()?.block_on(run_to_completion(&case, &toolbox, |i, call| {
            case.choices[i % case.choices.len()].decision(&call.call_id)
        }))?;
        check_run(&case, &toolbox, &run)?;
    }

    /// Suspending at every ask and approving everything is invisible in the result: the counters, trace,
    /// transcript and tool invocations equal those of the same run with every `ask` turned into `allow`.
    #[test]
    fn approving_everything_matches_never_asking(case in case()) {
        let rt = runtime()?;
        let asking = Toolbox::new(&case);
        let approved = rt.block_on(run_to_completion(&case, &asking, |_, _| Decision::Approve))?;
        let relaxed = case.without_ask();
        let allowing = Toolbox::new(&relaxed);
        let direct = rt.block_on(run_to_completion(&relaxed, &allowing, |_, _| Decision::Approve))?;

        prop_assert_eq!(direct.suspensions, 0);
        let (a, d) = (&approved.completion, &direct.completion);
        prop_assert_eq!(a.counters, d.counters);
        prop_assert_eq!(&a.trace, &d.trace);
        prop_assert_eq!(&a.transcript, &d.transcript);
        prop_assert_eq!((&a.output, a.reason), (&d.output, d.reason));
        prop_assert_eq!(asking.invocations(), allowing.invocations());
    }
}
