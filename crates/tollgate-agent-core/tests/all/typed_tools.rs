//! Typed tools through the loop: arguments parsed once and handed over typed, a gate and a preview that
//! read them, the derived schema's shape, arguments the schema refuses and arguments it lets through that
//! do not deserialise (refused before the gate, never run, also when an approver edits them in), a
//! panicking typed tool, a gate that reads the run's context, `?` in a tool, and `tool_fn`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex, PoisonError};
use tollgate_agent_core::scripted::{Script, ScriptedModel};
use tollgate_agent_core::{
    AgentLoop, CallId, Completion, Decision, DecisionError, Decisions, ErrorContext, Gate, HeldCallState, IntoTool,
    LoopConfig, LoopError, Message, Metadata, NoHooks, Outcome, Preview, RunScope, Suspension, Tool, ToolContext,
    ToolError, ToolLoop, ToolOutput, ToolRegistry, ToolResult, TypedTool, args_schema, tool_fn,
};

// ---------------------------------------------------------------------------------------------------------
// A typed tool with every method

/// A currency code: three capital letters. The schema says only "a string", so "euros" passes the
/// schema and fails to deserialise.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(try_from = "String")]
#[schemars(with = "String")]
struct Currency(String);

impl TryFrom<String> for Currency {
    type Error = String;

    fn try_from(code: String) -> Result<Self, String> {
        if code.len() == 3 && code.chars().all(|c| c.is_ascii_uppercase()) {
            Ok(Self(code))
        } else {
            Err(format!("`{code}` is not a currency code like EUR"))
        }
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TransferArgs {
    /// Who is paid.
    to: String,
    /// How much.
    amount: u32,
    /// A currency code, e.g. EUR.
    currency: Currency,
}

/// Pays people: blocks one payee, asks above 100, previews from the typed arguments, and logs each call
/// with its context.
#[derive(Clone, Default)]
struct Transfer {
    calls: Arc<Mutex<Vec<(TransferArgs, ToolContext)>>>,
}

impl Transfer {
    fn calls(&self) -> Vec<(TransferArgs, ToolContext)> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl TypedTool for Transfer {
    type Args = TransferArgs;
    const NAME: &str = "transfer";
    const DESCRIPTION: &str = "Transfers money to someone.";
    const GATE: Gate = Gate::Ask;

    async fn validate(&self, args: &TransferArgs) -> Result<(), String> {
        if args.to == "mallory" { Err("payments to mallory are blocked".to_owned()) } else { Ok(()) }
    }

    fn gate(&self, args: &TransferArgs, _ctx: &ToolContext) -> Gate {
        if args.amount > 100 { Gate::Ask } else { Gate::Allow }
    }

    async fn preview(&self, args: &TransferArgs) -> Option<String> {
        Some(format!("pay {} {} to {}", args.amount, args.currency.0, args.to))
    }

    async fn call(&self, args: TransferArgs, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let text = format!("sent {} {} to {}", args.amount, args.currency.0, args.to);
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).push((args, ctx));
        Ok(text.into())
    }
}

fn transfer_args(to: &str, amount: u32) -> TransferArgs {
    TransferArgs { to: to.to_owned(), amount, currency: Currency("EUR".to_owned()) }
}

// ---------------------------------------------------------------------------------------------------------
// Driving the loop

fn agent(calls: Value, tools: Vec<Arc<dyn Tool>>) -> ToolLoop {
    let script = json!({"turns": [{"tool_calls": calls}, {"text": "Done."}]});
    let model = ScriptedModel::new(Script::from_value(script).unwrap_or_else(|e| panic!("{e}")));
    let mut registry = ToolRegistry::new();
    for tool in tools {
        registry.register(tool).unwrap_or_else(|e| panic!("{e}"));
    }
    ToolLoop::new(Arc::new(model), Arc::new(registry), LoopConfig::default())
}

fn completed(outcome: Result<Outcome, LoopError>) -> Completion {
    match outcome {
        Ok(Outcome::Completed(done)) => done,
        other => panic!("expected a completion, got {other:?}"),
    }
}

fn suspended(outcome: Result<Outcome, LoopError>) -> Suspension {
    match outcome {
        Ok(Outcome::Suspended(suspension)) => suspension,
        other => panic!("expected a suspension, got {other:?}"),
    }
}

fn result<'a>(transcript: &'a [Message], call_id: &str) -> &'a ToolResult {
    transcript
        .iter()
        .find_map(|m| match m {
            Message::Tool(r) if r.call_id == call_id => Some(r),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {call_id}"))
}

fn decide(call_id: &str, decision: Decision) -> Decisions {
    [(CallId::from(call_id), decision)].into_iter().collect()
}

// ---------------------------------------------------------------------------------------------------------
// Through the loop

#[tokio::test]
async fn a_typed_tool_gets_its_arguments_parsed_and_its_context() {
    let transfer = Transfer::default();
    let calls = json!([{"name": "transfer", "arguments": {"to": "bob", "amount": 40, "currency": "EUR"}}]);
    let agent = agent(calls, vec![transfer.clone().into_tool()]);

    let done = completed(agent.start(&RunScope::new("run-7"), "pay bob", &NoHooks).await);

    let answer = result(&done.transcript, "call_1");
    assert_eq!((answer.content.as_str(), answer.is_error), ("sent 40 EUR to bob", false));
    let ran = transfer.calls();
    assert_eq!(ran.len(), 1, "allowed (40 is not above 100): ran without asking");
    assert_eq!(ran[0].0, transfer_args("bob", 40));
    assert_eq!((ran[0].1.run_id.as_str(), ran[0].1.call_id.as_str()), ("run-7", "call_1"));
}

#[tokio::test]
async fn the_gate_and_the_preview_read_the_typed_arguments() {
    let transfer = Transfer::default();
    let calls = json!([
        {"name": "transfer", "arguments": {"to": "bob", "amount": 40, "currency": "EUR"}},
        {"name": "transfer", "arguments": {"to": "carol", "amount": 250, "currency": "EUR"}}
    ]);
    let agent = agent(calls, vec![transfer.clone().into_tool()]);
    let scope = RunScope::new("run");

    let suspension = suspended(agent.start(&scope, "pay", &NoHooks).await);

    let small = suspension.call(&CallId::from("call_1")).unwrap_or_else(|| panic!("call_1 held"));
    let large = suspension.call(&CallId::from("call_2")).unwrap_or_else(|| panic!("call_2 held"));
    assert_eq!(small.state, HeldCallState::Allowed);
    assert_eq!(large.state, HeldCallState::Asks, "250 is above 100");
    assert_eq!(large.preview.as_deref(), Some("pay 250 EUR to carol"));
    assert!(transfer.calls().is_empty(), "nothing of a turn that asks runs before the decision");

    let done = completed(agent.resume(&scope, suspension, &decide("call_2", Decision::Approve), &NoHooks).await);

    assert_eq!(result(&done.transcript, "call_2").content, "sent 250 EUR to carol");
    let ran: Vec<TransferArgs> = transfer.calls().into_iter().map(|(args, _)| args).collect();
    assert_eq!(ran, [transfer_args("bob", 40), transfer_args("carol", 250)]);
}

#[tokio::test]
async fn validate_refuses_before_the_gate_with_its_message() {
    let transfer = Transfer::default();
    let calls = json!([{"name": "transfer", "arguments": {"to": "mallory", "amount": 900, "currency": "EUR"}}]);
    let agent = agent(calls, vec![transfer.clone().into_tool()]);

    // 900 would ask: refused first, nobody is asked.
    let done = completed(agent.start(&RunScope::new("run"), "pay", &NoHooks).await);

    let refused = result(&done.transcript, "call_1");
    assert_eq!(refused.content, "Tool transfer was not run: payments to mallory are blocked");
    assert!(refused.is_error);
    assert!(transfer.calls().is_empty());
}

#[tokio::test]
async fn arguments_the_schema_refuses_never_reach_the_tool() {
    let transfer = Transfer::default();
    let calls = json!([{"name": "transfer", "arguments": {"to": "bob", "amount": "lots", "currency": "EUR"}}]);
    let agent = agent(calls, vec![transfer.clone().into_tool()]);

    let done = completed(agent.start(&RunScope::new("run"), "pay", &NoHooks).await);

    let refused = result(&done.transcript, "call_1");
    assert!(refused.content.starts_with("Tool transfer was not run: invalid arguments: /amount: "), "{refused:?}");
    assert!(refused.is_error);
    assert!(transfer.calls().is_empty());
}

#[tokio::test]
async fn arguments_that_pass_the_schema_but_do_not_deserialise_are_refused_before_the_gate() {
    let transfer = Transfer::default();
    let tool = transfer.clone().into_tool();
    let bad = json!({"to": "bob", "amount": 250, "currency": "euros"});
    let calls = json!([{"name": "transfer", "arguments": bad}]);
    let agent = agent(calls, vec![tool.clone()]);
    let registered = agent.tools().get("transfer").unwrap_or_else(|| panic!("registered"));
    assert_eq!(registered.check_arguments(&bad), Ok(()), "the schema lets it through");

    // 250 would ask if it could be read: it is refused instead, and nobody is asked.
    let done = completed(agent.start(&RunScope::new("run"), "pay", &NoHooks).await);

    let refused = result(&done.transcript, "call_1");
    assert_eq!(
        refused.content,
        "Tool transfer was not run: invalid arguments: `euros` is not a currency code like EUR"
    );
    assert!(refused.is_error);
    assert!(transfer.calls().is_empty());

    // Through the port directly: the declared gate, no preview, and a call made anyway is an error result.
    assert_eq!(tool.gate(&bad, &ToolContext::listing()), Gate::Ask, "the tool's declared GATE");
    assert_eq!(tool.gate(&json!({}), &ToolContext::listing()), Gate::Ask, "what listings show");
    assert_eq!(tool.preview(&bad).await, None);
    let called = tool.call(bad, ToolContext::new("run", "call_1")).await.map_err(|e| e.to_string());
    assert_eq!(called, Ok(ToolOutput::error("invalid arguments: `euros` is not a currency code like EUR")));
    assert!(transfer.calls().is_empty());
}

#[tokio::test]
async fn edited_arguments_are_parsed_checked_and_gated_again() {
    let transfer = Transfer::default();
    let calls = json!([{"name": "transfer", "arguments": {"to": "carol", "amount": 250, "currency": "EUR"}}]);
    let agent = agent(calls, vec![transfer.clone().into_tool()]);
    let scope = RunScope::new("run");
    let suspension = suspended(agent.start(&scope, "pay", &NoHooks).await);

    // An edit that does not deserialise is refused as a decision: nothing runs.
    let unreadable = Decision::Edit { arguments: json!({"to": "carol", "amount": 25, "currency": "euros"}) };
    let refused = agent.resume(&scope, suspension.clone(), &decide("call_1", unreadable), &NoHooks).await;
    match refused {
        Err(LoopError::Decision(DecisionError::InvalidEdit { call_id, message })) => {
            assert_eq!(call_id, "call_1");
            assert_eq!(message, "invalid arguments: `euros` is not a currency code like EUR");
        }
        other => panic!("expected an invalid edit, got {other:?}"),
    }
    assert!(transfer.calls().is_empty());

    let edited = Decision::Edit { arguments: json!({"to": "carol", "amount": 120, "currency": "EUR"}) };
    let done = completed(agent.resume(&scope, suspension, &decide("call_1", edited), &NoHooks).await);

    assert!(result(&done.transcript, "call_1").content.ends_with("sent 120 EUR to carol"));
    assert_eq!(transfer.calls().into_iter().map(|(args, _)| args).collect::<Vec<_>>(), [transfer_args("carol", 120)]);
}

/// Panics when called.
struct Explodes;

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

impl TypedTool for Explodes {
    type Args = NoArgs;
    const NAME: &str = "explodes";
    const DESCRIPTION: &str = "Always panics.";

    async fn call(&self, _args: NoArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        panic!("boom")
    }
}

#[tokio::test]
async fn a_panicking_typed_tool_is_an_error_result_and_the_run_goes_on() {
    let agent = agent(json!([{"name": "explodes"}]), vec![Explodes.into_tool()]);

    let done = completed(agent.start(&RunScope::new("run"), "go", &NoHooks).await);

    let failed = result(&done.transcript, "call_1");
    assert_eq!((failed.content.as_str(), failed.is_error), ("Tool explodes failed.", true));
    assert_eq!(done.output.as_deref(), Some("Done."));
}

// ---------------------------------------------------------------------------------------------------------
// A gate that reads the run, and `?` in a tool

/// An amount to pay.
#[derive(Deserialize, JsonSchema)]
struct AmountArgs {
    /// Euros.
    amount: u32,
}

/// Allows up to the run's `limit` (its metadata), asks above it, forbids a run without one; keeps the
/// context of every gate question.
#[derive(Clone, Default)]
struct RunLimit {
    asked: Arc<Mutex<Vec<ToolContext>>>,
}

impl TypedTool for RunLimit {
    type Args = AmountArgs;
    const NAME: &str = "pay";
    const DESCRIPTION: &str = "Pays.";
    const GATE: Gate = Gate::Ask;

    fn gate(&self, args: &AmountArgs, ctx: &ToolContext) -> Gate {
        self.asked.lock().unwrap_or_else(PoisonError::into_inner).push(ctx.clone());
        match ctx.metadata.get_as::<u32>("limit") {
            Ok(Some(limit)) if args.amount <= limit => Gate::Allow,
            Ok(Some(_)) => Gate::Ask,
            Ok(None) | Err(_) => Gate::Forbid,
        }
    }

    async fn call(&self, args: AmountArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(format!("paid {}", args.amount).into())
    }
}

#[tokio::test]
async fn the_gate_reads_the_runs_context_at_the_start_at_an_edit_and_at_the_resume() {
    let limit = RunLimit::default();
    let agent = agent(
        json!([{"name": "pay", "arguments": {"amount": 10}}, {"name": "pay", "arguments": {"amount": 500}}]),
        vec![limit.clone().into_tool()],
    );
    let metadata = Metadata::try_from(json!({"limit": 100})).unwrap_or_else(|e| panic!("{e}"));
    let scope = RunScope::new("run-7").with_metadata(metadata.clone());
    let bare = RunScope::new("run-7");

    let held = suspended(agent.start(&scope, "pay", &NoHooks).await);
    let asked: Vec<(String, String, Metadata)> = limit
        .asked
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|c| (c.run_id.to_string(), c.call_id.to_string(), c.metadata.clone()))
        .collect();
    let each = |call: &str| ("run-7".to_owned(), call.to_owned(), metadata.clone());
    assert_eq!(asked, [each("call_1"), each("call_2")]);
    let states: Vec<&HeldCallState> = held.calls.iter().map(|c| &c.state).collect();
    assert!(matches!(states[..], [HeldCallState::Allowed, HeldCallState::Asks]), "{states:?}");

    // An edit is gated in the run's context: within the limit it is taken; without the run's metadata the
    // same edit would be forbidden.
    let edit = Decision::Edit { arguments: json!({"amount": 50}) };
    let call_2 = CallId::from("call_2");
    assert_eq!(agent.check_decision(&scope, &held, &call_2, &edit).await, Ok(()));
    let refused = agent.check_decision(&bare, &held, &call_2, &edit).await;
    assert!(matches!(refused, Err(DecisionError::InvalidEdit { .. })), "{refused:?}");

    // The resume asks the gate again in the scope it is given.
    let stored = held.to_json().unwrap_or_else(|e| panic!("{e}"));
    let reload = || Suspension::from_json(&stored).unwrap_or_else(|e| panic!("{e}"));
    let done = completed(agent.resume(&scope, reload(), &decide("call_2", Decision::Approve), &NoHooks).await);
    assert_eq!(result(&done.transcript, "call_2").content, "paid 500");
    let done = completed(agent.resume(&bare, reload(), &decide("call_2", Decision::Approve), &NoHooks).await);
    assert_eq!(result(&done.transcript, "call_2").content, "Tool pay is forbidden by policy and was not run.");
}

/// Fails with a source, as a client library's error would.
#[derive(Debug, thiserror::Error)]
#[error("the ledger refused the payment")]
struct LedgerRefused(#[source] std::num::ParseIntError);

#[test]
fn question_mark_in_a_tool_keeps_the_error_chain_and_adds_a_context() {
    let pay = |amount: &str| -> Result<u32, ToolError> {
        let cents: u32 = amount.parse().map_err(LedgerRefused)?;
        Ok(cents)
    };
    assert_eq!(pay("12").ok(), Some(12));
    let chain = "the ledger refused the payment: invalid digit found in string";
    assert_eq!(pay("x").err().map(|e| e.message).as_deref(), Some(chain));
    let context = pay("x").context("paying order 7").err().map(|e| e.to_string());
    assert_eq!(context, Some(format!("paying order 7: {chain}")));
    let absent: Option<u32> = None;
    assert_eq!(
        absent.with_context(|| format!("no order {}", 7)).err().map(|e| e.message).as_deref(),
        Some("no order 7")
    );
    let boxed: Box<dyn std::error::Error + Send + Sync> = ToolError::new("the ledger is down").into();
    assert_eq!(boxed.to_string(), "the ledger is down");
}

// ---------------------------------------------------------------------------------------------------------
// The derived schema

// Only the schemas of these types are used.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum Priority {
    Low,
    High,
}

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Address {
    /// The street and number.
    street: String,
    /// The postcode, if known.
    postcode: Option<String>,
}

/// The arguments of a tool (this doc comment is for Rust readers and is left out of the schema).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ShipArgs {
    /// Where to.
    address: Address,
    /// How many parcels.
    #[schemars(range(min = 1))]
    parcels: u8,
    /// Kilograms.
    weight: f64,
    /// How urgent.
    priority: Option<Priority>,
    /// When it was promised, RFC 3339.
    #[schemars(extend("format" = "date-time"))]
    promised: Option<String>,
    /// Labels to print.
    #[serde(default)]
    labels: Vec<String>,
    /// For the driver.
    #[serde(default)]
    note: Option<String>,
}

#[test]
fn the_derived_schema_is_the_plain_object_schema_a_model_expects() {
    assert_eq!(
        args_schema::<ShipArgs>(),
        json!({
            "type": "object",
            "properties": {
                "address": {
                    "description": "Where to.",
                    "type": "object",
                    "properties": {
                        "street": {"type": "string", "description": "The street and number."},
                        "postcode": {"type": "string", "description": "The postcode, if known."}
                    },
                    "required": ["street"]
                },
                "parcels": {"type": "integer", "minimum": 1, "maximum": 255, "description": "How many parcels."},
                "weight": {"type": "number", "description": "Kilograms."},
                "priority": {"type": "string", "enum": ["low", "high"], "description": "How urgent."},
                "promised": {"type": "string", "format": "date-time", "description": "When it was promised, RFC 3339."},
                "labels": {"type": "array", "items": {"type": "string"}, "default": [], "description": "Labels to print."},
                "note": {"type": "string", "description": "For the driver."}
            },
            "required": ["address", "parcels", "weight"],
            "additionalProperties": false
        })
    );
    assert_eq!(args_schema::<NoArgs>(), json!({"type": "object", "properties": {}}));
}

// ---------------------------------------------------------------------------------------------------------
// tool_fn

#[derive(Deserialize, JsonSchema)]
struct RefundArgs {
    /// The order.
    order: String,
    /// Euros.
    amount: u32,
}

#[tokio::test]
async fn a_tool_fn_runs_gates_and_previews_from_its_typed_arguments() {
    let refund = tool_fn("refund", "Refunds an order.", |args: RefundArgs, ctx: ToolContext| async move {
        Ok(format!("refunded {} EUR on {} ({})", args.amount, args.order, ctx.call_id).into())
    })
    .validate(|args| if args.order.is_empty() { Err("no order given".to_owned()) } else { Ok(()) })
    .gate(|args, _ctx| if args.amount > 100 { Gate::Ask } else { Gate::Allow })
    .preview(|args| Some(format!("refund {} EUR on {}", args.amount, args.order)))
    .into_tool();
    assert_eq!(refund.parameters()["required"], json!(["order", "amount"]));
    assert_eq!(
        refund.gate(&json!({}), &ToolContext::listing()),
        Gate::Ask,
        "with a gate set, what cannot be read asks"
    );
    let calls = json!([
        {"name": "refund", "arguments": {"order": "A-1", "amount": 20}},
        {"name": "refund", "arguments": {"order": "", "amount": 20}},
        {"name": "refund", "arguments": {"order": "A-2", "amount": 500}}
    ]);
    let agent = agent(calls, vec![refund]);
    let scope = RunScope::new("run");

    let suspension = suspended(agent.start(&scope, "refund", &NoHooks).await);

    let states: Vec<&HeldCallState> = ["call_1", "call_2", "call_3"]
        .iter()
        .map(|id| &suspension.call(&CallId::from(*id)).unwrap_or_else(|| panic!("{id} held")).state)
        .collect();
    assert!(
        matches!(states[..], [HeldCallState::Allowed, HeldCallState::Refused(_), HeldCallState::Asks]),
        "{states:?}"
    );
    let held = suspension.call(&CallId::from("call_3")).and_then(|c| c.preview.clone());
    assert_eq!(held.as_deref(), Some("refund 500 EUR on A-2"));

    let done = completed(agent.resume(&scope, suspension, &decide("call_3", Decision::Approve), &NoHooks).await);

    assert_eq!(result(&done.transcript, "call_1").content, "refunded 20 EUR on A-1 (call_1)");
    assert_eq!(result(&done.transcript, "call_2").content, "Tool refund was not run: no order given");
    assert_eq!(result(&done.transcript, "call_3").content, "refunded 500 EUR on A-2 (call_3)");
}

#[tokio::test]
async fn a_tool_fn_without_a_gate_allows() {
    let now = tool_fn("now", "Tells the time.", |_: NoArgs, _| async { Ok(ToolOutput::text("noon")) }).into_tool();
    assert_eq!(now.gate(&json!({}), &ToolContext::listing()), Gate::Allow);
    assert_eq!(now.preview(&json!({})).await, None);
    let called = now.call(json!({}), ToolContext::new("run", "call_1")).await.map_err(|e| e.to_string());
    assert_eq!(called, Ok(ToolOutput::text("noon")));
    let refused = now.call(json!("now"), ToolContext::new("run", "call_2")).await.map_err(|e| e.to_string());
    assert!(refused.is_ok_and(|out| out.is_error && out.content.starts_with("invalid arguments: ")));
}

// ---------------------------------------------------------------------------------------------------------
// A preview that observes

/// Pays like [`Transfer`], and its preview records the payee's account as it saw it.
#[derive(Clone, Default)]
struct ObservingTransfer {
    inner: Transfer,
}

impl TypedTool for ObservingTransfer {
    type Args = TransferArgs;
    const NAME: &str = "transfer";
    const DESCRIPTION: &str = "Transfers money to someone.";
    const GATE: Gate = Gate::Ask;

    fn gate(&self, args: &TransferArgs, ctx: &ToolContext) -> Gate {
        self.inner.gate(args, ctx)
    }

    async fn observed_preview(&self, args: &TransferArgs) -> Option<Preview> {
        let seen = json!({"account": args.to, "balance": 1000});
        Some(Preview::new(format!("pay {} to {}", args.amount, args.to)).with_observed(seen))
    }

    async fn call(&self, args: TransferArgs, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        self.inner.call(args, ctx).await
    }
}

#[tokio::test]
async fn the_observation_of_an_approved_preview_reaches_the_call_and_no_other() {
    let tool = ObservingTransfer::default();
    let calls = json!([
        {"name": "transfer", "arguments": {"to": "bob", "amount": 40, "currency": "EUR"}},
        {"name": "transfer", "arguments": {"to": "carol", "amount": 250, "currency": "EUR"}},
        {"name": "transfer", "arguments": {"to": "dave", "amount": 300, "currency": "EUR"}}
    ]);
    let agent = agent(calls, vec![tool.clone().into_tool()]);
    let scope = RunScope::new("run");

    let held = suspended(agent.start(&scope, "pay", &NoHooks).await);
    let carol = held.call(&CallId::from("call_2")).unwrap_or_else(|| panic!("call_2 held"));
    assert_eq!(carol.preview.as_deref(), Some("pay 250 to carol"));
    assert_eq!(carol.observed, Some(json!({"account": "carol", "balance": 1000})));
    // Stored and read back with the observation, which the digest binds.
    let held =
        Suspension::from_json(&held.to_json().unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"));

    let edited = json!({"to": "dave", "amount": 200, "currency": "EUR"});
    let decisions: Decisions =
        [(CallId::from("call_2"), Decision::Approve), (CallId::from("call_3"), Decision::Edit { arguments: edited })]
            .into_iter()
            .collect();
    completed(agent.resume(&scope, held, &decisions, &NoHooks).await);

    let observed: Vec<(String, Option<Value>)> =
        tool.inner.calls().into_iter().map(|(args, ctx)| (args.to, ctx.observed)).collect();
    assert_eq!(
        observed,
        [
            ("bob".to_owned(), None),
            ("carol".to_owned(), Some(json!({"account": "carol", "balance": 1000}))),
            ("dave".to_owned(), None),
        ],
        "an allowed call and edited arguments were never approved on a preview"
    );
}
