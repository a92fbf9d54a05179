//! `tollgate run` on a terminal (docs/cli.md: "on a terminal, ask at the gate"): a spinner while the run
//! works, each step printed as it is committed, and at the gate a prompt per held call — approve (y),
//! approve and remember (a, a grant for calls like it), deny (n, with a reason), edit (e, the arguments in
//! `$EDITOR`), respond (r) or quit (q).
//!
//! What it promises:
//! - It is used only when stdin and stderr are both terminals and `--detach` was not given
//!   ([`is_interactive`]); everything else keeps the non-interactive behaviour.
//! - It works the same in local mode and through a server (`--server`): steps are drawn from the run's
//!   event log (the audit record), read after each change (a notice in process, the live event stream
//!   of the API), so they show what was committed, in order, and nothing else.
//! - Nothing is sent until every held call of the turn has an answer; then one decision set goes out,
//!   naming the digest of the turn the person was shown, so a turn that changed meanwhile is refused
//!   (a conflict) and shown again rather than decided blind.
//! - Edited arguments are checked before anything is sent: JSON, an object, changed; locally also by the
//!   agent's own loop (the tool's schema and checks), and a bad edit is reported and asked again. Through
//!   a server, which holds the tools, the server checks them when the answers are sent: a refusal is
//!   shown and the held turn asked again.
//! - A quorum call (a policy rule's `approvals = N`, V2.md §4) shows its count (`1 of 2 approvals
//!   (alice)`) and is offered only approve and deny, which are all it takes. One this person approved is
//!   not asked again while it waits for the other approvers (their approval would be refused as a second
//!   one): with nothing else to answer, the prompt says what it waits for and leaves the run waiting.
//! - Approve and remember (V2.md, grants) is offered only on a call whose tool suggests a pattern
//!   (`suggested_match`: not a quorum call, not one a policy rule keeps from grants), and not where
//!   grants are known to be off. It shows the pattern and how long the grant lasts (the configured
//!   `default_ttl` locally; through a server, the server's), Enter accepts, and the approval goes out
//!   with `remember` (scope `agent`): the grant is made in the same transaction as the decision.
//! - Quitting (q or end of input) sends nothing: the run stays waiting, and `run` prints the waiting
//!   line and the commands that decide it (exit 3).
//! - The model's text is printed as it arrives when its provider streams (V2 streaming: the runtime's
//!   live text in local mode, `deltas=true` through a server), on the line its round's step would
//!   begin. The stored turn finishes that line: with the rest of its text when the line said the start
//!   of it (what the redactor held back until the call answered, say), so the line shows the round's
//!   whole text; with the turn's own step line when the live text went astray (a delta lost). Then only
//!   its calls are added. Live text of a round whose turn is printed already is dropped. Live text is
//!   never stored; the step lines stay the log's.
//!
//! Progress and prompts go to stderr; stdout gets only what `run` prints when the run settles.

mod editor;
mod steps;

use crate::backend::Backend;
use crate::context::Context;
use crate::duration::{format_duration, parse_duration};
use crate::exit::CliError;
use crate::exit::DecisionRefused;
use crate::render;
use crate::view::RunView;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;
use std::collections::HashSet;
use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;
use tollgate_agent_core::{Actor, CallId, Decision, EventKind, GrantScope, RunId, RunStatus};
use tollgate_agent_protocol::Call;
use tollgate_agent_runtime::decide::RememberSpec;
use tollgate_agent_runtime::{DecisionSet, LiveText};
/// The question asked for each held call that cannot be remembered.
const CHOICES: &str = "approve (y), deny (n), edit (e), respond (r), quit (q)? ";
/// Said when an answer is not one of [`CHOICES`].
const CHOICES_HELP: &str = "  y  run the call as shown\n  n  deny it; the model is told your reason\n  \
                            e  edit its arguments in $EDITOR\n  r  answer in the tool's place\n  q  leave the run waiting";
/// The question asked for a held call that may be remembered (its tool suggests a pattern).
const REMEMBER_CHOICES: &str = "approve (y), approve and remember (a), deny (n), edit (e), respond (r), quit (q)? ";
/// Said when an answer is not one of [`REMEMBER_CHOICES`].
const REMEMBER_HELP: &str = "  y  run the call as shown\n  \
                             a  run it, and let calls like it (the suggested pattern) pass without asking for a while\n  \
                             n  deny it; the model is told your reason\n  e  edit its arguments in $EDITOR\n  \
                             r  answer in the tool's place\n  q  leave the run waiting";
/// The question asked for a quorum call, which takes only approve or deny.
const QUORUM_CHOICES: &str = "approve (y), deny (n), quit (q)? ";
/// Said when an answer is not one of [`QUORUM_CHOICES`].
const QUORUM_HELP: &str = "  y  approve the call as shown, as one of the approvals it needs\n  \
                           n  deny it; the model is told your reason\n  q  leave the run waiting";

/// True when `run` should follow the run on the terminal and ask at the gate: stdin and stderr are both
/// terminals (someone can answer, and sees the questions).
pub(crate) fn is_interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Follows run `run_id` on the terminal until it ends, or until the person leaves it waiting; asks at
/// every gate it reaches. Returns the run as it settled.
pub(crate) async fn follow_on_terminal(ctx: &Context, run_id: &RunId) -> Result<RunView, CliError> {
    let backend = ctx.backend();
    let mut watch = backend.watch(run_id);
    let mut steps = Steps::new(ctx.is_quiet());
    let mut approved = ApprovedHere::default();
    loop {
        let run = backend.get(run_id).await?;
        // Read after the run: the log holds at least every event of the state just read.
        steps.catch_up(backend, run_id).await?;
        if run.status == RunStatus::WaitingForApproval {
            steps.pause();
            match decide_at_gate(backend, &run, &mut approved).await? {
                AtGate::Sent => continue,
                AtGate::Left => return backend.get(run_id).await,
            }
        }
        if run.status.is_terminal() {
            steps.pause();
            return Ok(run);
        }
        steps.spin();
        loop {
            let changed = watch.changed().await;
            for (round, text) in watch.take_text() {
                steps.live(round, &text);
            }
            if changed {
                break;
            }
        }
    }
}

/// The steps printed so far, and the spinner while the run works (none with `-q`).
struct Steps {
    /// The seq of the last event printed.
    after: u64,
    quiet: bool,
    spinner: Option<ProgressBar>,
    activity: String,
    /// The calls the log printed so far shows ran (a held turn listed again after a crash names them).
    ran: steps::Ran,
    /// The round whose live text is on the screen, on a line not ended yet.
    live_round: Option<u32>,
    /// The live text on that line, as received (before it was made safe for the terminal).
    live_text: String,
    /// The last round whose stored turn was printed: live text of it comes too late.
    answered: u32,
}

impl Steps {
    fn new(quiet: bool) -> Self {
        Self {
            after: 0,
            quiet,
            spinner: None,
            activity: "working".to_owned(),
            ran: steps::Ran::default(),
            live_round: None,
            live_text: String::new(),
            answered: 0,
        }
    }

    /// Prints the events committed since the last call.
    async fn catch_up(&mut self, backend: &Backend, run_id: &RunId) -> Result<(), CliError> {
        for event in backend.events(run_id, self.after).await? {
            self.after = event.seq;
            if let Some(activity) = steps::activity(&event) {
                self.activity = activity;
            }
            self.ran.note(&event);
            let mut lines = steps::lines(&event, &self.ran);
            if event.kind == EventKind::ModelResponse {
                self.answered = self.answered.max(event.round);
            }
            if let Some(round) = self.live_round {
                if event.kind == EventKind::ModelResponse && event.round == round {
                    let stored = steps::model_text(&event).unwrap_or_default();
                    if let Some(rest) = stored.strip_prefix(self.live_text.as_str()) {
                        // The live line said the start of the text: it ends with the rest, and the
                        // stored turn adds only its calls.
                        eprint!("{}", tollgate_agent_core::terminal_safe(rest));
                        if !lines.is_empty() {
                            lines.remove(0);
                        }
                    }
                    self.end_live();
                } else if !lines.is_empty() {
                    self.end_live();
                }
            }
            for line in lines {
                self.print(&line);
            }
        }
        Ok(())
    }

    /// Prints the model's live text of `round` as it arrives (V2 streaming), on a line begun as the
    /// round's step line would be, made safe for the terminal ([`tollgate_agent_core::terminal_safe`]);
    /// the stored turn then finishes the line and prints its calls. A reset (the call is tried again)
    /// ends the line saying so. Text of a round whose turn was printed already is dropped.
    fn live(&mut self, round: u32, text: &LiveText) {
        if self.quiet || round <= self.answered {
            return;
        }
        // The spinner would draw over a line being written.
        if let Some(spinner) = self.spinner.take() {
            spinner.finish_and_clear();
        }
        match text {
            LiveText::Reset => {
                if self.live_round.take().is_some() {
                    self.live_text.clear();
                    say!(" … (the model call is tried again)");
                }
            }
            LiveText::Text(piece) => {
                if self.live_round != Some(round) {
                    self.end_live();
                    eprint!("round {round} · model: ");
                    self.live_round = Some(round);
                }
                self.live_text.push_str(piece);
                eprint!("{}", tollgate_agent_core::terminal_safe(piece));
                let _ = std::io::stderr().flush();
            }
        }
    }

    /// Ends the line of live text, if one is open.
    fn end_live(&mut self) {
        self.live_text.clear();
        if self.live_round.take().is_some() {
            eprintln!();
        }
    }

    fn print(&self, line: &str) {
        if self.quiet {
            return;
        }
        let line = tollgate_agent_core::terminal_safe(line);
        match &self.spinner {
            // Above the spinner, which is drawn again below the line.
            Some(spinner) => spinner.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }

    /// Shows the spinner with what the run is busy with.
    fn spin(&mut self) {
        if self.quiet || self.live_round.is_some() {
            return;
        }
        let spinner = self.spinner.get_or_insert_with(new_spinner);
        spinner.set_message(tollgate_agent_core::terminal_safe_line(&self.activity).into_owned());
    }

    /// Takes the spinner off the screen (before a prompt, and at the end).
    fn pause(&mut self) {
        self.end_live();
        if let Some(spinner) = self.spinner.take() {
            spinner.finish_and_clear();
        }
    }
}

impl Drop for Steps {
    fn drop(&mut self) {
        self.pause();
    }
}

fn new_spinner() -> ProgressBar {
    // Draws on stderr, and nothing at all when stderr is not a terminal.
    let spinner = ProgressBar::new_spinner();
    spinner.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    spinner.enable_steady_tick(Duration::from_millis(100));
    spinner
}

/// What happened at the gate.
enum AtGate {
    /// Decisions went out, or were refused with a reason shown: look at the run again.
    Sent,
    /// The person left the run waiting (or it cannot be decided here); nothing was sent.
    Left,
}

/// The quorum calls this prompt approved, by turn digest and call id. The person at the terminal may
/// not approve them again, so while they wait for other approvers they are not asked about.
#[derive(Debug, Default)]
struct ApprovedHere(HashSet<(String, CallId)>);

impl ApprovedHere {
    /// Notes the approvals of quorum calls among `decisions`, sent for the held turn `digest` of `open`.
    fn note(&mut self, digest: &str, open: &[&Call], decisions: &[(CallId, Decision)]) {
        for (call_id, decision) in decisions {
            let quorum = open.iter().any(|c| &c.call_id == call_id && c.approvals.is_some());
            if quorum && matches!(decision, Decision::Approve) {
                self.0.insert((digest.to_owned(), call_id.clone()));
            }
        }
    }

    /// True when `call` is a quorum call of the held turn `digest` that the person at the terminal
    /// approved already: approved from this prompt, or `actor` (the one decisions from here are recorded
    /// as, when known) is among its approvers.
    fn waits_for_others(&self, digest: &str, call: &Call, actor: Option<&Actor>) -> bool {
        let Some(approvals) = &call.approvals else { return false };
        self.0.contains(&(digest.to_owned(), call.call_id.clone()))
            || actor.is_some_and(|me| approvals.given.iter().any(|given| given == me))
    }
}

/// Shows each held call that still takes a decision from this person, asks for one, and sends them all
/// at once.
async fn decide_at_gate(backend: &Backend, run: &RunView, approved: &mut ApprovedHere) -> Result<AtGate, CliError> {
    if let Err(why) = backend.may_decide(run) {
        say!("{why}");
        return Ok(AtGate::Left);
    }
    let digest = run.pending.as_ref().map(|p| p.turn_digest.as_str()).unwrap_or_default();
    let (waiting, open): (Vec<&Call>, Vec<&Call>) =
        run.awaiting_decision().partition(|call| approved.waits_for_others(digest, call, backend.actor()));
    for call in &waiting {
        if let Some(approvals) = &call.approvals {
            let missing = approvals.missing();
            let more = if missing == 1 { "1 more approval".to_owned() } else { format!("{missing} more approvals") };
            say!("{} has {}: it waits for {more}, from someone else", call.call_id, render::approvals_count(approvals));
        }
    }
    if open.is_empty() {
        return Ok(AtGate::Left);
    }
    let mut decisions = Vec::with_capacity(open.len());
    let mut remember = Vec::new();
    for (index, call) in open.iter().enumerate() {
        eprint!("{}", tollgate_agent_core::terminal_safe(&held_call_block(call, index + 1, open.len())));
        match ask_for_decision(backend, run, call).await? {
            Some(Answer { decision, remember: remembered }) => {
                decisions.push((call.call_id.clone(), decision));
                if let Some(spec) = remembered {
                    remember.push((call.call_id.clone(), spec));
                }
            }
            None => {
                say!("nothing was sent; the run stays waiting");
                return Ok(AtGate::Left);
            }
        }
    }
    match backend.decide(run, &DecisionSet::Each(decisions.clone()), &remember).await {
        Ok(_) => {
            approved.note(digest, &open, &decisions);
            Ok(AtGate::Sent)
        }
        // The turn changed under the person (e.g. its deadline passed) or a decision does not fit it:
        // say so, and show the run as it is now.
        Err(DecisionRefused::Conflict(detail)) => {
            say!("not sent: {detail}");
            Ok(AtGate::Sent)
        }
        Err(DecisionRefused::Invalid(error)) => {
            say!("not sent: {}", error.message);
            Ok(AtGate::Sent)
        }
        Err(DecisionRefused::Forbidden(error)) => {
            say!("not sent: {}", error.message);
            Ok(AtGate::Left)
        }
        Err(DecisionRefused::Failed(error)) => Err(error),
    }
}

/// One held call as the person sees it before answering: tool, arguments (pretty JSON) and preview;
/// for a quorum call its count first, and last why it is offered only approve and deny.
fn held_call_block(call: &Call, index: usize, count: usize) -> String {
    let position = if count > 1 { format!("  [{index} of {count}]") } else { String::new() };
    let mut out = format!("\n{} {} wants to run{position}\n", call.call_id, call.tool);
    if let Some(approvals) = &call.approvals {
        out.push_str(&format!("  {}\n", render::approvals_count(approvals)));
    }
    if call.in_doubt {
        out.push_str("  IN DOUBT: it started before a crash and may already have run\n");
    }
    out.push_str("  arguments\n");
    for line in pretty(&call.arguments).lines() {
        out.push_str(&format!("    {line}\n"));
    }
    if let Some(preview) = &call.preview {
        out.push_str("  preview\n");
        for line in preview.lines() {
            out.push_str(&format!("    {line}\n"));
        }
    }
    if let Some(approvals) = &call.approvals {
        out.push_str(&format!(
            "  it runs once {} different people approve it, and one deny denies it: approve or deny only \
             (no edit or respond)\n",
            approvals.required
        ));
    }
    out
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// An answer to [`CHOICES`] or [`REMEMBER_CHOICES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Choice {
    Approve,
    Remember,
    Deny,
    Edit,
    Respond,
    Quit,
}

fn parse_choice(answer: &str) -> Option<Choice> {
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" | "approve" => Some(Choice::Approve),
        "a" | "remember" => Some(Choice::Remember),
        "n" | "no" | "deny" => Some(Choice::Deny),
        "e" | "edit" => Some(Choice::Edit),
        "r" | "respond" => Some(Choice::Respond),
        "q" | "quit" => Some(Choice::Quit),
        _ => None,
    }
}

/// The person's answer about one held call: the decision, and the grant to make with an approval.
struct Answer {
    decision: Decision,
    remember: Option<RememberSpec>,
}

impl From<Decision> for Answer {
    fn from(decision: Decision) -> Self {
        Answer { decision, remember: None }
    }
}

/// True when `call` may be approved and remembered here: its tool suggests a pattern (so it is no
/// quorum call and no policy rule keeps it from grants), and grants are not known to be off.
fn offers_remember(backend: &Backend, call: &Call) -> bool {
    call.approvals.is_none()
        && call.suggested_match.is_some()
        && backend.grant_settings().is_none_or(|settings| settings.enabled)
}

/// Asks until the person decides `call`; `None` when they quit or input ends.
async fn ask_for_decision(backend: &Backend, run: &RunView, call: &Call) -> Result<Option<Answer>, CliError> {
    // The text of an edit that did not pass, so the next edit starts from it rather than from scratch.
    let mut draft: Option<String> = None;
    let remembers = offers_remember(backend, call);
    let (question, help) = if call.approvals.is_some() {
        (QUORUM_CHOICES, QUORUM_HELP)
    } else if remembers {
        (REMEMBER_CHOICES, REMEMBER_HELP)
    } else {
        (CHOICES, CHOICES_HELP)
    };
    loop {
        let Some(answer) = ask(question).await? else { return Ok(None) };
        let Some(choice) = parse_choice(&answer) else {
            if !answer.trim().is_empty() {
                say!("`{}` is not one of the answers", answer.trim());
            }
            say!("{help}");
            continue;
        };
        if let (Some(approvals), Choice::Edit | Choice::Respond) = (&call.approvals, choice) {
            say!(
                "`{}` is not taken here: {} needs {} approvals, so it takes only approve or deny",
                answer.trim(),
                call.call_id,
                approvals.required
            );
            say!("{help}");
            continue;
        }
        if choice == Choice::Remember && !remembers {
            say!("`{}` is not taken here: {}", answer.trim(), why_not_remembered(backend, call));
            say!("{help}");
            continue;
        }
        match choice {
            Choice::Approve => return Ok(Some(Decision::Approve.into())),
            Choice::Quit => return Ok(None),
            Choice::Remember => match ask_remember(backend, run, call).await? {
                Remembering::Accepted(spec) => {
                    return Ok(Some(Answer { decision: Decision::Approve, remember: Some(spec) }));
                }
                Remembering::Back => {
                    say!("{help}");
                    continue;
                }
                Remembering::Quit => return Ok(None),
            },
            Choice::Deny => {
                let reason = ask_text("reason (the model is told): ").await?;
                return Ok(reason.map(|reason| Decision::Deny { reason }.into()));
            }
            Choice::Respond => {
                let result = ask_text("result (the model receives it in the tool's place): ").await?;
                return Ok(result.map(|result| Decision::Respond { result }.into()));
            }
            Choice::Edit => {
                let text = draft.take().unwrap_or_else(|| format!("{}\n", pretty(&call.arguments)));
                let call_id = call.call_id.clone();
                let edited = tokio::task::spawn_blocking(move || editor::edit_text(&call_id, &text))
                    .await
                    .map_err(|e| CliError::failed(format!("the editor did not finish: {e}")))?;
                let text = match edited {
                    Ok(text) => text,
                    Err(problem) => {
                        say!("{problem}");
                        continue;
                    }
                };
                match check_edit(backend, run, call, &text).await {
                    Ok(decision) => return Ok(Some(decision.into())),
                    Err(problem) => {
                        say!("{problem}\nanswer e to edit them again, or choose another answer");
                        draft = Some(text);
                    }
                }
            }
        }
    }
}

/// Why `call` cannot be approved and remembered here.
fn why_not_remembered(backend: &Backend, call: &Call) -> String {
    if backend.grant_settings().is_some_and(|settings| !settings.enabled) {
        "grants are off here ([grants] enabled = false)".to_owned()
    } else if let Some(approvals) = &call.approvals {
        format!("{} needs {} approvals, and no grant stands in for them", call.call_id, approvals.required)
    } else {
        format!(
            "{} asks every time: its tool suggests no pattern to remember, or a policy rule keeps it from grants",
            call.call_id
        )
    }
}

/// What the person said to the grant offered by `a`.
enum Remembering {
    /// Approve, making this grant.
    Accepted(RememberSpec),
    /// Back to the question about the call.
    Back,
    /// Quit, or input ended.
    Quit,
}

/// Shows the grant `a` would make for `call` (its suggested pattern, scope agent, the default expiry)
/// and asks how long it lasts: Enter accepts the default, a duration changes it, `b` goes back.
async fn ask_remember(backend: &Backend, run: &RunView, call: &Call) -> Result<Remembering, CliError> {
    let settings = backend.grant_settings();
    let default = settings.map(|s| s.default_ttl);
    say!("{}", remember_offer(call, &run.agent, default));
    let question = match default {
        Some(ttl) => format!("for how long? (Enter: {}; or e.g. 30m, 7d; b: back) ", format_duration(ttl)),
        None => "for how long? (Enter: the server's default; or e.g. 30m, 7d; b: back) ".to_owned(),
    };
    loop {
        let Some(answer) = ask(&question).await? else { return Ok(Remembering::Quit) };
        let answer = answer.trim();
        let ttl = match answer.to_ascii_lowercase().as_str() {
            "" => None,
            "b" | "back" => return Ok(Remembering::Back),
            "q" | "quit" => return Ok(Remembering::Quit),
            _ => match parse_duration(answer) {
                Ok(ttl) if ttl.is_zero() => {
                    say!("a grant lasts more than 0s");
                    continue;
                }
                Ok(ttl) if settings.is_some_and(|s| ttl > s.max_ttl) => {
                    let max = settings.map(|s| format_duration(s.max_ttl)).unwrap_or_default();
                    say!("a grant lasts at most {max} here ([grants] max_ttl)");
                    continue;
                }
                Ok(ttl) => Some(ttl),
                Err(problem) => {
                    say!("{problem}");
                    continue;
                }
            },
        };
        return Ok(Remembering::Accepted(RememberSpec { scope: GrantScope::Agent, pattern: None, ttl, reason: None }));
    }
}

/// The grant `a` offers for `call` of a run of `agent`, in words: its pattern and, when known here, how
/// long it lasts by default.
fn remember_offer(call: &Call, agent: &str, default_ttl: Option<std::time::Duration>) -> String {
    let pattern = call.suggested_match.clone().map(Value::Object).unwrap_or_default();
    let lasting = match default_ttl {
        Some(ttl) => format!("for {}", format_duration(ttl)),
        None => "for the server's default time ([grants] default_ttl)".to_owned(),
    };
    format!(
        "  approve, and from now on let {} calls of agent {agent} whose arguments match\n    {pattern}\n  \
         pass the gate without asking, in every run of {agent}, {lasting}",
        call.tool
    )
}

/// The edit decision for the edited text, when it holds arguments the call's tool accepts (as far as can
/// be checked before sending); else what is wrong with it.
async fn check_edit(backend: &Backend, run: &RunView, call: &Call, text: &str) -> Result<Decision, String> {
    let arguments: Value =
        serde_json::from_str(text).map_err(|e| format!("the edited arguments are not valid JSON: {e}"))?;
    if !arguments.is_object() {
        return Err("the edited arguments must be a JSON object of the tool's arguments".to_owned());
    }
    if arguments == call.arguments {
        return Err("the arguments are unchanged (answer y to approve them as they are)".to_owned());
    }
    let decision = Decision::Edit { arguments };
    backend.check_decision(run, &call.call_id, &decision).await?;
    Ok(decision)
}

/// Asks for a line of text that is not blank; `None` when input ends.
async fn ask_text(question: &str) -> Result<Option<String>, CliError> {
    loop {
        match ask(question).await? {
            None => return Ok(None),
            Some(text) if text.trim().is_empty() => {
                say!("an answer is needed (end of input leaves the run waiting)")
            }
            Some(text) => return Ok(Some(text.trim().to_owned())),
        }
    }
}

/// Asks on stderr and reads one line from stdin; `None` at end of input (or when the terminal cannot be
/// read, which leaves the run waiting just the same).
async fn ask(question: &str) -> Result<Option<String>, CliError> {
    let question = question.to_owned();
    let answer = tokio::task::spawn_blocking(move || -> std::io::Result<Option<String>> {
        let mut stderr = std::io::stderr();
        stderr.write_all(question.as_bytes())?;
        stderr.flush()?;
        let mut line = String::new();
        if std::io::stdin().lock().read_line(&mut line)? == 0 {
            // End the prompt's line, so what follows starts on its own.
            let _ = writeln!(stderr);
            return Ok(None);
        }
        Ok(Some(line.trim_end_matches(['\r', '\n']).to_owned()))
    })
    .await
    .map_err(|e| CliError::failed(format!("the prompt did not finish: {e}")))?;
    match answer {
        Ok(answer) => Ok(answer),
        Err(error) => {
            say!("cannot read the answer from the terminal: {error}");
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_are_letters_or_words_in_any_case() {
        assert_eq!(parse_choice("y"), Some(Choice::Approve));
        assert_eq!(parse_choice(" YES "), Some(Choice::Approve));
        assert_eq!(parse_choice("n"), Some(Choice::Deny));
        assert_eq!(parse_choice("Edit"), Some(Choice::Edit));
        assert_eq!(parse_choice("r"), Some(Choice::Respond));
        assert_eq!(parse_choice("q"), Some(Choice::Quit));
        assert_eq!(parse_choice("a"), Some(Choice::Remember));
        assert_eq!(parse_choice("Remember"), Some(Choice::Remember));
        assert_eq!(parse_choice(""), None);
        assert_eq!(parse_choice("maybe"), None);
    }

    #[test]
    fn a_held_call_shows_its_tool_arguments_and_preview() {
        let call = Call {
            call_id: "call_2".into(),
            tool: "fs_write".into(),
            arguments: json!({"path": "note.txt", "content": "hello"}),
            gate: tollgate_agent_protocol::Gate::Ask,
            preview: Some("create note.txt (5 bytes)".into()),
            in_doubt: true,
            decision: None,
            state: tollgate_agent_protocol::CallState::InDoubt,
            takes_decision: true,
            result: None,
            approvals: None,
            suggested_match: None,
            grant: None,
        };
        assert_eq!(
            held_call_block(&call, 2, 3),
            "\ncall_2 fs_write wants to run  [2 of 3]\n\
             \x20 IN DOUBT: it started before a crash and may already have run\n\
             \x20 arguments\n\
             \x20   {\n\
             \x20     \"path\": \"note.txt\",\n\
             \x20     \"content\": \"hello\"\n\
             \x20   }\n\
             \x20 preview\n\
             \x20   create note.txt (5 bytes)\n"
        );
    }

    #[test]
    fn the_grant_offered_shows_its_pattern_and_how_long_it_lasts() {
        let mut call = quorum_call("call_2", &[]);
        call.approvals = None;
        call.suggested_match = Some(serde_json::Map::from_iter([("/path".to_owned(), json!("notes/*"))]));
        assert_eq!(
            remember_offer(&call, "demo", Some(std::time::Duration::from_secs(8 * 3600))),
            "  approve, and from now on let fs_write calls of agent demo whose arguments match\n    \
             {\"/path\":\"notes/*\"}\n  pass the gate without asking, in every run of demo, for 8h"
        );
        assert!(
            remember_offer(&call, "demo", None).ends_with("for the server's default time ([grants] default_ttl)"),
            "through a server the default is the server's"
        );
    }

    fn quorum_call(id: &str, given: &[&str]) -> Call {
        Call {
            call_id: id.into(),
            tool: "fs_write".into(),
            arguments: json!({"path": "note.txt"}),
            gate: tollgate_agent_protocol::Gate::Ask,
            preview: None,
            in_doubt: false,
            decision: None,
            state: tollgate_agent_protocol::CallState::Waiting,
            takes_decision: true,
            result: None,
            approvals: Some(tollgate_agent_protocol::Approvals {
                required: 2,
                given: given.iter().copied().map(Actor::from).collect(),
            }),
            suggested_match: None,
            grant: None,
        }
    }

    #[test]
    fn a_quorum_call_shows_its_count_and_why_it_takes_only_approve_or_deny() {
        assert_eq!(
            held_call_block(&quorum_call("call_1", &["alice"]), 1, 1),
            "\ncall_1 fs_write wants to run\n\
             \x20 1 of 2 approvals (alice)\n\
             \x20 arguments\n\
             \x20   {\n\
             \x20     \"path\": \"note.txt\"\n\
             \x20   }\n\
             \x20 it runs once 2 different people approve it, and one deny denies it: approve or deny only \
             (no edit or respond)\n"
        );
        assert!(held_call_block(&quorum_call("call_1", &[]), 1, 1).contains("\n  0 of 2 approvals\n"));
    }

    #[test]
    fn a_quorum_call_approved_here_waits_for_others_and_a_plain_call_never_does() {
        let open = quorum_call("call_1", &[]);
        let mut plain = quorum_call("call_2", &[]);
        plain.approvals = None;
        let mut approved = ApprovedHere::default();
        approved.note(
            "sha256:a",
            &[&open, &plain],
            &[("call_1".into(), Decision::Approve), ("call_2".into(), Decision::Approve)],
        );
        let after = quorum_call("call_1", &["bob"]);
        assert!(approved.waits_for_others("sha256:a", &after, None), "approved from this prompt");
        assert!(!approved.waits_for_others("sha256:b", &after, None), "another turn's call_1 is another call");
        assert!(!approved.waits_for_others("sha256:a", &plain, None), "a single decision settles a plain call");
        // Approved elsewhere by the actor this command line decides as.
        let fresh = ApprovedHere::default();
        assert!(fresh.waits_for_others("sha256:a", &after, Some(&Actor::from("bob"))));
        assert!(!fresh.waits_for_others("sha256:a", &after, Some(&Actor::from("local"))));
        // A deny is not an approval: the call is not waiting on anyone.
        let mut denied = ApprovedHere::default();
        denied.note("sha256:a", &[&open], &[("call_1".into(), Decision::Deny { reason: "no".into() })]);
        assert!(!denied.waits_for_others("sha256:a", &open, None));
    }
}
