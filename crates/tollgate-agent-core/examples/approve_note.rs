//! # Approving a tool call, end to end
//!
//! The whole Tollgate cycle in one small program, with no network and no key:
//!
//! 1. define a typed tool with a side effect (`send_email`, its arguments a Rust struct) whose gate is `ask`;
//! 2. build a [`ToolLoop`] over it and a scripted model;
//! 3. start a run: the model asks to send an email, and the loop hands back [`Outcome::Suspended`] — a value,
//!    not an error — before anything is sent;
//! 4. show the person what would happen (each held call with its preview);
//! 5. store the suspension as JSON text and read it back, as another process would;
//! 6. decide (approve, or deny with `--deny`) and resume; print the answer and the transcript.
//!
//! ```text
//! cargo run -p tollgate-agent-core --example approve_note
//! cargo run -p tollgate-agent-core --example approve_note -- --deny
//! ```
//!
//! `cargo test -p tollgate-agent-core` runs the tests at the bottom of this file, so the walkthrough keeps working.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::error::Error;
use std::sync::{Arc, Mutex, PoisonError};
use tollgate_agent_core::scripted::{Script, ScriptedModel};
use tollgate_agent_core::{
    AgentLoop, Completion, Decision, Decisions, Gate, IntoTool, LoopConfig, Message, NoHooks, Outcome, RunScope,
    Suspension, ToolContext, ToolError, ToolLoop, ToolOutput, ToolRegistry, TypedTool,
};

/// The run's input: what the user asks the agent to do.
const INPUT: &str = "Tell Ada the meeting moves to 3pm on Thursday.";

/// The reason a person gives when denying with `--deny`; the model is told it.
const DENY_REASON: &str = "Ada already knows; no email needed.";

// ---------------------------------------------------------------------------------------------------------------
// Step 1: a tool with a side effect.
// ---------------------------------------------------------------------------------------------------------------

/// One email, as `send_email` receives it: the tool's arguments as a Rust type. The JSON schema the model is
/// offered, and that every call (and every edit an approver makes) is checked against, is derived from it:
/// the doc comments are the fields' descriptions, `deny_unknown_fields` refuses other keys. Its hash is
/// pinned in a suspension: if the schema changes before the run resumes, the held call is reported instead
/// of run.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Email {
    /// The recipient's address.
    to: String,
    /// The subject line.
    subject: String,
    /// The message.
    body: String,
}

/// Where "sent" emails go. A real tool would talk to an SMTP server or an email API.
type Outbox = Arc<Mutex<Vec<Email>>>;

/// Sends an email — so a person must approve each call first.
struct SendEmail {
    outbox: Outbox,
}

impl TypedTool for SendEmail {
    type Args = Email;

    const NAME: &str = "send_email";

    const DESCRIPTION: &str = "Sends an email on the user's behalf.";

    /// The default gate is `allow`. Sending mail cannot be undone, so every call waits for a person.
    /// (`fn gate(&self, email: &Email, ctx: &ToolContext)` could decide per call: allow mail to the
    /// user's own domain, read from the run's metadata in `ctx`, and ask for the rest.)
    const GATE: Gate = Gate::Ask;

    /// What the approver sees. Show exactly what would happen, in the words the person would use.
    async fn preview(&self, email: &Email) -> Option<String> {
        Some(format!("To: {}\nSubject: {}\n\n{}", email.to, email.subject, email.body))
    }

    /// Runs only after a person approved (or edited) the call, with arguments that passed the schema and
    /// parsed as an `Email`. An `Err` here is logged for the operator; the model is only told that the
    /// tool failed.
    async fn call(&self, email: Email, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let to = email.to.clone();
        self.outbox.lock().unwrap_or_else(PoisonError::into_inner).push(email);
        // `run_id:call_id` is unique per call: a real mail API would get it as its idempotency key.
        Ok(ToolOutput::text(format!("Sent to {to} (message id <{}>).", ctx.idempotency_key())))
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Step 2: the agent — a model, its tools and a configuration.
// ---------------------------------------------------------------------------------------------------------------

/// The scripted model's turns. Turn 1 asks for one `send_email` call (`{{input}}` is replaced by the run's
/// input); turn 2 answers depending on whether the person denied it. A real agent would use an OpenAI or
/// Anthropic adapter here; the loop cannot tell the difference.
fn script() -> Result<Script, Box<dyn Error>> {
    let script = json!({"turns": [
        {
            "text": "I'll email Ada about the new time.",
            "tool_calls": [{"name": "send_email", "arguments": {
                "to": "ada@example.com",
                "subject": "Meeting moved",
                "body": "{{input}}"
            }}]
        },
        {
            "when_approved": {"text": "Done: I emailed ada@example.com about the new meeting time."},
            "when_denied": {"text": "Understood: I did not send the email."}
        }
    ]});
    Ok(Script::from_value(script)?)
}

/// Builds the agent. A process that resumes a run builds the same agent from its own configuration; only
/// the suspension travels between processes.
fn build_agent(outbox: &Outbox) -> Result<ToolLoop, Box<dyn Error>> {
    // `into_tool` derives the schema from `Email` and wraps the typed tool for the registry.
    let tools = ToolRegistry::new().with(SendEmail { outbox: Arc::clone(outbox) }.into_tool())?;
    let config = LoopConfig {
        system_prompt: Some("You are an assistant that can send email. Be brief.".into()),
        ..LoopConfig::default()
    };
    Ok(ToolLoop::new(Arc::new(ScriptedModel::new(script()?)), Arc::new(tools), config))
}

// ---------------------------------------------------------------------------------------------------------------
// Steps 3 to 6: run, stop at the gate, store, decide, resume.
// ---------------------------------------------------------------------------------------------------------------

/// What one walkthrough produced.
struct Walkthrough {
    /// Emails sent while the run waited at the gate: always 0.
    sent_while_waiting: usize,
    /// The finished run.
    completion: Completion,
    /// The emails actually sent.
    sent: Vec<Email>,
}

/// The whole cycle; `deny` picks the person's decision.
async fn walkthrough(deny: bool) -> Result<Walkthrough, Box<dyn Error>> {
    let outbox = Outbox::default();
    // The run's id, and any metadata its tools should see (here none); a durable runtime stores both
    // with the run and gives them back on resume.
    let scope = RunScope::new("run-approve-note");

    // Step 3: start the run. Hooks let a durable runtime persist each step; `NoHooks` keeps nothing.
    let first_process = build_agent(&outbox)?;
    println!("user> {INPUT}\n");
    let suspension = match first_process.start(&scope, INPUT, &NoHooks).await? {
        Outcome::Suspended(suspension) => suspension,
        Outcome::Completed(done) => {
            return Err(format!("expected the run to stop at the gate, but it ended: {:?}", done.reason).into());
        }
    };

    // Step 4: show the held turn. Nothing of it has run: the outbox is still empty.
    let sent_while_waiting = outbox.lock().unwrap_or_else(PoisonError::into_inner).len();
    println!("The run is waiting for approval (turn {}, digest {}).", suspension.round, suspension.turn_digest);
    for call in suspension.decidable_calls() {
        println!("\n  call {} — {} (gate: {})", call.call_id, call.tool, call.gate());
        println!("  arguments: {}", call.arguments);
        for line in call.preview.as_deref().unwrap_or("(no preview)").lines() {
            println!("  | {line}");
        }
    }

    // Step 5: persist it. The JSON text is everything needed to resume: the transcript up to the held
    // turn, the held calls, the counters and the pinned tool schemas. Store it in a database, a file, a
    // queue — and read it back, perhaps days later in another process, with `Suspension::from_json`,
    // which refuses a format version it does not know and a digest that does not match the calls.
    let stored: String = suspension.to_json()?;
    println!("\nStored the suspension: {} bytes of JSON.", stored.len());
    drop(suspension);
    let suspension = Suspension::from_json(&stored)?;

    // Step 6: decide, one decision per held call, keyed by `call_id` (never by position). Besides
    // approve and deny there are `Decision::Edit` (run with the approver's arguments) and
    // `Decision::Respond` (give a result in the tool's place).
    let decision = if deny { Decision::Deny { reason: DENY_REASON.into() } } else { Decision::Approve };
    println!("Decision: {}{}", decision.action(), if deny { format!(" ({DENY_REASON})") } else { String::new() });
    let decisions: Decisions = suspension.decidable_calls().map(|c| (c.call_id.clone(), decision.clone())).collect();

    // Resume on a freshly built agent, as another process would. The loop re-checks each call against the
    // live tools, runs the approved ones, gives denied ones a result carrying the reason, and carries on.
    // A resumed run can stop at the gate again; this script's second turn has no calls, so it ends.
    let second_process = build_agent(&outbox)?;
    let completion = match second_process.resume(&scope, suspension, &decisions, &NoHooks).await? {
        Outcome::Completed(done) => done,
        Outcome::Suspended(_) => return Err("expected the run to end after the decision".into()),
    };

    let sent = outbox.lock().unwrap_or_else(PoisonError::into_inner).clone();
    Ok(Walkthrough { sent_while_waiting, completion, sent })
}

/// The answer, the transcript the model saw, and what actually happened.
fn print_result(run: &Walkthrough) {
    let done = &run.completion;
    println!("\nassistant> {}", done.output.as_deref().unwrap_or("(no text)"));
    println!("\nTranscript ({:?}, {} model calls):", done.reason, done.counters.iterations);
    for message in &done.transcript {
        println!("  {}", describe(message));
    }
    println!("\nEmails sent while the run waited at the gate: {}", run.sent_while_waiting);
    println!("Emails sent after the decision: {}", run.sent.len());
    for email in &run.sent {
        println!("  to {}: {}", email.to, email.subject);
    }
}

/// One transcript entry on one line.
fn describe(message: &Message) -> String {
    match message {
        Message::System { content } => format!("system:    {content}"),
        Message::User { content } => format!("user:      {content}"),
        Message::Assistant { content, tool_calls } => {
            let calls: Vec<String> =
                tool_calls.iter().map(|c| format!("{}({}) as {}", c.name, c.arguments, c.call_id)).collect();
            match (content, calls.is_empty()) {
                (Some(text), true) => format!("assistant: {text}"),
                (Some(text), false) => format!("assistant: {text} [calls {}]", calls.join(", ")),
                (None, _) => format!("assistant: [calls {}]", calls.join(", ")),
            }
        }
        Message::Tool(result) => {
            let tag = if result.denied {
                " (denied)"
            } else if result.is_error {
                " (error)"
            } else {
                ""
            };
            format!("tool:      {} {}{tag}: {}", result.call_id, result.tool, result.content)
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let deny = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--deny") => true,
        Some(other) => return Err(format!("unknown argument `{other}`; usage: approve_note [--deny]").into()),
    };
    let run = walkthrough(deny).await?;
    print_result(&run);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_agent_core::TerminationReason;

    /// The last message must be the model's answer; the one before it the held call's only result.
    fn last_tool_result(done: &Completion) -> &tollgate_agent_core::ToolResult {
        match done.transcript.iter().rev().nth(1) {
            Some(Message::Tool(result)) => result,
            other => panic!("expected the held call's result before the answer, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn approving_sends_the_email() {
        let run = walkthrough(false).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run.sent_while_waiting, 0, "nothing is sent before the decision");
        assert_eq!(
            run.sent,
            vec![Email { to: "ada@example.com".into(), subject: "Meeting moved".into(), body: INPUT.into() }]
        );
        assert_eq!(run.completion.reason, TerminationReason::Completed);
        assert_eq!(
            run.completion.output.as_deref(),
            Some("Done: I emailed ada@example.com about the new meeting time.")
        );
        let result = last_tool_result(&run.completion);
        assert_eq!(result.content, "Sent to ada@example.com (message id <run-approve-note:call_1>).");
        assert!(!result.is_error && !result.denied);
        assert_eq!(run.completion.counters.tool_invocations, 1);
    }

    #[tokio::test]
    async fn denying_sends_nothing_and_tells_the_model_why() {
        let run = walkthrough(true).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run.sent_while_waiting, 0, "nothing is sent before the decision");
        assert!(run.sent.is_empty(), "a denied call never runs");
        assert_eq!(run.completion.output.as_deref(), Some("Understood: I did not send the email."));
        let result = last_tool_result(&run.completion);
        assert!(result.denied && result.is_error);
        assert!(result.content.contains(DENY_REASON), "the model sees the reason: {}", result.content);
        assert_eq!(run.completion.counters.tool_invocations, 0);
    }

    #[tokio::test]
    async fn preview_shows_what_would_be_sent() {
        // Through the `Tool` port, as the loop asks it: JSON arguments in, the typed preview out.
        let tool = SendEmail { outbox: Outbox::default() }.into_tool();
        let args = json!({"to": "a@b.c", "subject": "Hi", "body": "Line 1\nLine 2"});
        let preview = tool.preview(&args).await;
        assert_eq!(preview.as_deref(), Some("To: a@b.c\nSubject: Hi\n\nLine 1\nLine 2"));
    }

    #[test]
    fn the_schema_is_derived_from_the_email() {
        let tool = SendEmail { outbox: Outbox::default() }.into_tool();
        let schema = tool.parameters();
        assert_eq!(schema["required"], json!(["to", "subject", "body"]));
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(schema["properties"]["to"]["description"], json!("The recipient's address."));
    }
}
