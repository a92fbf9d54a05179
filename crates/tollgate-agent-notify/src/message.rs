//! The message a notifier sends when a run starts waiting at the gate, or is still waiting when its wait
//! is escalated: a [`Notification`], rendered as a Slack Block Kit message ([`slack_message`]) or a mail
//! ([`email_message`]) with the same content and links.
//!
//! The invariants: every text of a run in a message (agent, run and call ids, input, tool, preview) went
//! through core's terminal sanitiser — a person reads it — and is escaped for where it goes (Slack's `&`,
//! `<`, `>`; HTML in the mail's HTML part), so it cannot add links, mentions or markup; the input is cut to
//! [`INPUT_LIMIT`] and each preview to [`PREVIEW_LIMIT`] characters with a visible `…`; a link is included
//! only when it is an `http(s)` URL.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};
use tollgate_agent_core::{CallId, Millis, RunId};

use crate::text::{ELLIPSIS, block, duration, html_block, html_escape, html_line, is_web_url, line, shorten, time};

/// The most characters of a run's input a message shows.
pub const INPUT_LIMIT: usize = 500;

/// The most characters of a call's preview a message shows (Slack's section text takes 3,000; the rest is
/// the call's title and the code fence).
pub const PREVIEW_LIMIT: usize = 2_900;

/// The most characters of a name (agent, tool, call id) a message shows.
const NAME_LIMIT: usize = 80;

/// The most calls a Slack message lists, each with its buttons (Slack takes 50 blocks a message).
const SLACK_CALLS: usize = 20;

/// The longest URL a Slack button takes.
const SLACK_URL_LIMIT: usize = 3_000;

/// Why a notification is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotifyEvent {
    /// The run started waiting for approval.
    Requested,
    /// The run is still waiting after the agent's `escalate_after`.
    Escalated {
        /// How long it has waited (the configured `escalate_after`).
        after: Duration,
    },
}

/// One held call waiting for a decision, with its signed links.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotifyCall {
    /// The call.
    pub call_id: CallId,
    /// Its tool.
    pub tool: String,
    /// Its preview, in full (the renderers shorten it).
    pub preview: String,
    /// The signed link that approves it.
    pub approve_url: String,
    /// The signed link that denies it.
    pub deny_url: String,
}

/// What one notification says: a run waiting at the gate and the calls it waits on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notification {
    /// Why it is sent.
    pub event: NotifyEvent,
    /// The run's agent.
    pub agent: String,
    /// The run.
    pub run_id: RunId,
    /// The run's input, in full (the renderers shorten it).
    pub input: String,
    /// The run's page in the playground.
    pub review_url: String,
    /// The held calls waiting for a decision, in the turn's order.
    pub calls: Vec<NotifyCall>,
    /// When the run started waiting, in milliseconds since the Unix epoch.
    pub waiting_since: Millis,
}

/// A mail's content: its subject and its two bodies, which say the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmailContent {
    /// The subject line.
    pub subject: String,
    /// The plain-text body.
    pub text: String,
    /// The HTML body.
    pub html: String,
}

impl Notification {
    /// `1 call` or `N calls`.
    fn calls_phrase(&self) -> String {
        match self.calls.len() {
            1 => "1 call".to_owned(),
            n => format!("{n} calls"),
        }
    }

    /// The headline: who waits and why this is sent, as plain text (not yet made safe).
    fn headline(&self) -> String {
        let agent = shorten(&self.agent, NAME_LIMIT);
        match &self.event {
            NotifyEvent::Requested => format!("{agent} is waiting for approval"),
            NotifyEvent::Escalated { after } => format!("{agent} is still waiting after {}", duration(*after)),
        }
    }
}

/// The Slack Block Kit message for `notification`: a `text` fallback and `blocks` — a header, the agent,
/// run and wait, the input, then each call's tool and preview (in a code block) followed by its Approve
/// and Deny link buttons, and last a Review button to the playground.
pub fn slack_message(notification: &Notification) -> Value {
    let n = notification;
    let fallback = format!("{} ({}, run {})", n.headline(), n.calls_phrase(), n.run_id);
    let mut blocks = vec![
        json!({"type": "header", "text": {"type": "plain_text", "text": slack_text(&n.headline(), 150, Shape::Line), "emoji": false}}),
        json!({"type": "section", "fields": [
            {"type": "mrkdwn", "text": format!("*Agent*\n{}", slack_text(&n.agent, NAME_LIMIT, Shape::Line))},
            {"type": "mrkdwn", "text": format!("*Run*\n`{}`", slack_text(n.run_id.as_str(), NAME_LIMIT, Shape::Code))},
            {"type": "mrkdwn", "text": format!("*Waiting since*\n{}", time(n.waiting_since))},
            {"type": "mrkdwn", "text": format!("*Waiting on*\n{}", n.calls_phrase())},
        ]}),
    ];
    if !n.input.trim().is_empty() {
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn",
            "text": format!("*Input*\n```\n{}\n```", slack_text(&n.input, INPUT_LIMIT, Shape::Fenced))}}));
    }
    let total = n.calls.len();
    for (index, call) in n.calls.iter().take(SLACK_CALLS).enumerate() {
        let number = index + 1;
        let preview = if call.preview.trim().is_empty() {
            "_No preview._".to_owned()
        } else {
            format!("```\n{}\n```", slack_text(&call.preview, PREVIEW_LIMIT, Shape::Fenced))
        };
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": format!(
            "*Call {number} of {total}:* `{}` (`{}`)\n{preview}",
            slack_text(&call.tool, NAME_LIMIT, Shape::Code),
            slack_text(call.call_id.as_str(), NAME_LIMIT, Shape::Code),
        )}}));
        let buttons: Vec<Value> =
            [("Approve", "primary", "approve", &call.approve_url), ("Deny", "danger", "deny", &call.deny_url)]
                .into_iter()
                .filter(|(_, _, _, url)| is_web_url(url) && url.len() <= SLACK_URL_LIMIT)
                .map(|(label, style, id, url)| {
                    json!({"type": "button", "text": {"type": "plain_text", "text": label}, "style": style,
                "url": url, "action_id": format!("{id}-{number}")})
                })
                .collect();
        if !buttons.is_empty() {
            blocks.push(json!({"type": "actions", "elements": buttons}));
        }
    }
    if total > SLACK_CALLS {
        blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn",
            "text": format!("{} more calls wait too: review them in the playground.", total - SLACK_CALLS)}]}));
    }
    if is_web_url(&n.review_url) && n.review_url.len() <= SLACK_URL_LIMIT {
        blocks.push(json!({"type": "actions", "elements": [{"type": "button",
            "text": {"type": "plain_text", "text": "Review"}, "url": n.review_url, "action_id": "review"}]}));
    }
    json!({"text": slack_text(&fallback, 1_000, Shape::Line), "blocks": blocks})
}

/// The mail for `notification`: a subject, and text and HTML bodies with the same content and links.
pub fn email_message(notification: &Notification) -> EmailContent {
    let n = notification;
    let subject = format!("[Tollgate] {} ({}, run {})", line(&n.headline()), n.calls_phrase(), line(n.run_id.as_str()));
    EmailContent { subject: shorten(&subject, 200).into_owned(), text: email_text(n), html: email_html(n) }
}

/// The plain-text body: links written out in full, each on its own line.
fn email_text(n: &Notification) -> String {
    let mut text = format!(
        "{}.\n\nAgent: {}\nRun: {}\nWaiting since: {}\nWaiting on: {}\n",
        line(&n.headline()),
        line(&shorten(&n.agent, NAME_LIMIT)),
        line(n.run_id.as_str()),
        time(n.waiting_since),
        n.calls_phrase(),
    );
    if !n.input.trim().is_empty() {
        let _ = write!(text, "\nInput:\n{}\n", indent(&block(&shorten(&n.input, INPUT_LIMIT))));
    }
    let total = n.calls.len();
    for (index, call) in n.calls.iter().enumerate() {
        let _ = write!(
            text,
            "\nCall {} of {total}: {} ({})\n",
            index + 1,
            line(&shorten(&call.tool, NAME_LIMIT)),
            line(&shorten(call.call_id.as_str(), NAME_LIMIT)),
        );
        if call.preview.trim().is_empty() {
            text.push_str("    (no preview)\n");
        } else {
            let _ = writeln!(text, "{}", indent(&block(&shorten(&call.preview, PREVIEW_LIMIT))));
        }
        for (label, url) in [("Approve", &call.approve_url), ("Deny", &call.deny_url)] {
            if is_web_url(url) {
                let _ = writeln!(text, "{label}: {url}");
            }
        }
    }
    if is_web_url(&n.review_url) {
        let _ = write!(text, "\nReview in the playground: {}\n", n.review_url);
    }
    text.push_str("\nEach link opens a page that asks you to confirm; opening it decides nothing.\n");
    text
}

/// The HTML body: inline styles only (mail readers drop style sheets), every text escaped.
fn email_html(n: &Notification) -> String {
    const PRE: &str = "margin:0 0 12px;padding:10px;background:#f5f6f8;border:1px solid #d3d7de;border-radius:6px;\
        white-space:pre-wrap;overflow-wrap:anywhere;font:13px/1.45 ui-monospace,Menlo,Consolas,monospace";
    let mut html = format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{title}</title>\n</head>\n\
         <body style=\"margin:0;padding:16px;background:#ffffff;color:#1c2230;\
         font:15px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif\">\n\
         <div style=\"max-width:640px;margin:0 auto\">\n\
         <h1 style=\"font-size:20px;line-height:1.3;margin:0 0 12px\">{title}</h1>\n\
         <p style=\"margin:0 0 12px\">Agent <strong>{agent}</strong> &middot; run <code>{run}</code><br>\n\
         Waiting on {calls} since {since}</p>\n",
        title = html_line(&n.headline()),
        agent = html_line(&shorten(&n.agent, NAME_LIMIT)),
        run = html_line(n.run_id.as_str()),
        since = html_escape(&time(n.waiting_since)),
        calls = n.calls_phrase(),
    );
    if !n.input.trim().is_empty() {
        let _ = write!(
            html,
            "<h2 style=\"font-size:16px;margin:16px 0 6px\">Input</h2>\n<pre style=\"{PRE}\">{}</pre>\n",
            html_block(&shorten(&n.input, INPUT_LIMIT))
        );
    }
    let total = n.calls.len();
    for (index, call) in n.calls.iter().enumerate() {
        let _ = writeln!(
            html,
            "<h2 style=\"font-size:16px;margin:20px 0 6px\">Call {} of {total}: <code>{}</code> \
             <span style=\"color:#596170;font-weight:normal\">({})</span></h2>",
            index + 1,
            html_line(&shorten(&call.tool, NAME_LIMIT)),
            html_line(&shorten(call.call_id.as_str(), NAME_LIMIT)),
        );
        if call.preview.trim().is_empty() {
            html.push_str("<p style=\"margin:0 0 12px;color:#596170\">No preview.</p>\n");
        } else {
            let _ = writeln!(html, "<pre style=\"{PRE}\">{}</pre>", html_block(&shorten(&call.preview, PREVIEW_LIMIT)));
        }
        let buttons: Vec<String> = [("Approve", "#1a7f37", &call.approve_url), ("Deny", "#b42318", &call.deny_url)]
            .into_iter()
            .filter(|(_, _, url)| is_web_url(url))
            .map(|(label, colour, url)| email_button(label, colour, url))
            .collect();
        if !buttons.is_empty() {
            let _ = writeln!(html, "<p style=\"margin:0 0 12px\">{}</p>", buttons.join(" "));
        }
    }
    if is_web_url(&n.review_url) {
        let _ = writeln!(
            html,
            "<p style=\"margin:20px 0 12px\"><a href=\"{}\" style=\"color:#0b57d0\">Review in the playground</a></p>",
            html_escape(&n.review_url)
        );
    }
    html.push_str(
        "<p style=\"margin:20px 0 0;color:#596170;font-size:13px\">Each link opens a page that asks you to \
         confirm; opening it decides nothing.</p>\n</div>\n</body>\n</html>\n",
    );
    html
}

/// A link that looks like a button.
fn email_button(label: &str, colour: &str, url: &str) -> String {
    format!(
        "<a href=\"{}\" style=\"display:inline-block;padding:10px 18px;margin:0 8px 8px 0;border-radius:6px;\
         background:{colour};color:#ffffff;font-weight:600;text-decoration:none\">{label}</a>",
        html_escape(url)
    )
}

/// Every line of `text` indented by four spaces, so a block stands apart in a plain-text mail.
fn indent(text: &str) -> String {
    text.lines().map(|line| format!("    {line}")).collect::<Vec<_>>().join("\n")
}

/// Where a Slack text goes, which decides what is made safe in it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// On one line: line breaks escaped.
    Line,
    /// Inside an inline code span: on one line, and no backtick that would end the span.
    Code,
    /// Inside a fenced code block: lines kept, and no run of three backticks that would end the block.
    Fenced,
}

/// `text` made safe, fitted to its place and escaped for Slack (`&`, `<`, `>`), at most `max_chars`
/// characters as sent, a `…` last when it was cut.
fn slack_text(text: &str, max_chars: usize, shape: Shape) -> String {
    let safe = match shape {
        Shape::Line => line(text).into_owned(),
        Shape::Code => line(text).replace('`', "\u{2cb}"),
        Shape::Fenced => block(text).replace("```", "\u{2cb}\u{2cb}\u{2cb}"),
    };
    let mut out = String::with_capacity(safe.len().min(max_chars * 4));
    let mut used = 0;
    let mut chars = safe.chars().peekable();
    while let Some(c) = chars.next() {
        let piece = match c {
            '&' => "&amp;",
            '<' => "&lt;",
            '>' => "&gt;",
            _ => "",
        };
        let width = if piece.is_empty() { 1 } else { piece.len() };
        // Room for this character and, unless it is the last, an ellipsis after it.
        let reserve = usize::from(chars.peek().is_some());
        if used + width + reserve > max_chars {
            out.push(ELLIPSIS);
            return out;
        }
        if piece.is_empty() {
            out.push(c);
        } else {
            out.push_str(piece);
        }
        used += width;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(n: usize) -> NotifyCall {
        NotifyCall {
            call_id: CallId::new(format!("call_{n}")),
            tool: "fs_write".into(),
            preview: format!("write notes/{n}.txt\n+hello"),
            approve_url: format!("https://tollgate.example.com/approve/t1.approve{n}.mac"),
            deny_url: format!("https://tollgate.example.com/approve/t1.deny{n}.mac"),
        }
    }

    fn notification(calls: usize) -> Notification {
        Notification {
            event: NotifyEvent::Requested,
            agent: "notes".into(),
            run_id: RunId::new("0193b0c6-1f2e-7a3b-8c4d-5e6f70819203"),
            input: "Write hello to a note".into(),
            review_url: "https://tollgate.example.com/#/runs/0193b0c6-1f2e-7a3b-8c4d-5e6f70819203".into(),
            calls: (1..=calls).map(call).collect(),
            waiting_since: 1_750_000_000_000,
        }
    }

    /// Every `text` string anywhere in a Block Kit value.
    fn texts(value: &Value) -> Vec<String> {
        let mut found = Vec::new();
        match value {
            Value::Object(map) => {
                for (key, value) in map {
                    match value {
                        Value::String(text) if key == "text" => found.push(text.clone()),
                        other => found.extend(texts(other)),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| found.extend(texts(item))),
            _ => {}
        }
        found
    }

    fn buttons(message: &Value) -> Vec<(String, Option<String>, String)> {
        let blocks = message["blocks"].as_array().cloned().unwrap_or_default();
        blocks
            .iter()
            .filter(|block| block["type"] == "actions")
            .flat_map(|block| block["elements"].as_array().cloned().unwrap_or_default())
            .map(|button| {
                (
                    button["text"]["text"].as_str().unwrap_or_default().to_owned(),
                    button["style"].as_str().map(str::to_owned),
                    button["url"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn the_slack_message_has_a_header_the_calls_and_link_buttons() {
        let message = slack_message(&notification(2));
        let blocks = message["blocks"].as_array().cloned().unwrap_or_default();
        assert_eq!(blocks[0]["type"], "header");
        assert_eq!(blocks[0]["text"]["type"], "plain_text");
        assert_eq!(blocks[0]["text"]["text"], "notes is waiting for approval");
        assert_eq!(
            message["text"],
            "notes is waiting for approval (2 calls, run 0193b0c6-1f2e-7a3b-8c4d-5e6f70819203)"
        );
        let summary = texts(&blocks[1]).join("\n");
        assert!(summary.contains("*Agent*\nnotes"), "{summary}");
        assert!(summary.contains("`0193b0c6-1f2e-7a3b-8c4d-5e6f70819203`"));
        assert!(summary.contains("2025-06-15 15:06 UTC"));
        assert_eq!(blocks[2]["text"]["text"], "*Input*\n```\nWrite hello to a note\n```");
        assert_eq!(
            blocks[3]["text"]["text"],
            "*Call 1 of 2:* `fs_write` (`call_1`)\n```\nwrite notes/1.txt\n+hello\n```"
        );
        assert_eq!(blocks[4]["type"], "actions");
        assert_eq!(
            blocks[5]["text"]["text"],
            "*Call 2 of 2:* `fs_write` (`call_2`)\n```\nwrite notes/2.txt\n+hello\n```"
        );
        let url = |s: &str| format!("https://tollgate.example.com/approve/t1.{s}.mac");
        assert_eq!(
            buttons(&message),
            vec![
                ("Approve".into(), Some("primary".into()), url("approve1")),
                ("Deny".into(), Some("danger".into()), url("deny1")),
                ("Approve".into(), Some("primary".into()), url("approve2")),
                ("Deny".into(), Some("danger".into()), url("deny2")),
                ("Review".into(), None, notification(2).review_url),
            ]
        );
        let ids: std::collections::HashSet<_> = blocks
            .iter()
            .filter_map(|b| b["elements"].as_array())
            .flatten()
            .filter_map(|e| e["action_id"].as_str())
            .collect();
        assert_eq!(ids.len(), 5, "action ids are unique");
    }

    #[test]
    fn an_escalation_says_how_long_it_has_waited() {
        let escalated =
            Notification { event: NotifyEvent::Escalated { after: Duration::from_secs(3_600) }, ..notification(1) };
        let message = slack_message(&escalated);
        assert_eq!(message["blocks"][0]["text"]["text"], "notes is still waiting after 1h");
        let mail = email_message(&escalated);
        assert!(mail.subject.contains("still waiting after 1h"), "{}", mail.subject);
        assert!(mail.text.starts_with("notes is still waiting after 1h."));
    }

    #[test]
    fn slack_texts_are_escaped_but_urls_are_not() {
        let mut hostile = notification(1);
        hostile.agent = "<!channel> & co".into();
        hostile.input = "<https://evil.example|click> & \u{202e}".into();
        hostile.calls[0].tool = "tool`*bold*`".into();
        hostile.calls[0].preview = "a < b && c > d\n```\n<@U123>".into();
        hostile.calls[0].approve_url = "https://tollgate.example.com/approve/t1.a&b.c".into();
        let message = slack_message(&hostile);
        for text in texts(&message) {
            assert!(!text.contains('<') && !text.contains('>'), "{text}");
            assert!(!text.contains("& "), "an unescaped ampersand: {text}");
            assert!(!text.contains('\u{202e}'), "{text}");
        }
        let all = texts(&message).join("\n");
        assert!(all.contains("&lt;!channel&gt; &amp; co"), "{all}");
        assert!(all.contains("&lt;https://evil.example|click&gt; &amp; \\u{202e}"), "{all}");
        assert!(all.contains("a &lt; b &amp;&amp; c &gt; d\nˋˋˋ\n&lt;@U123&gt;"), "{all}");
        assert!(all.contains("`toolˋ*bold*ˋ`"), "{all}");
        assert_eq!(buttons(&message)[0].2, "https://tollgate.example.com/approve/t1.a&b.c");
    }

    #[test]
    fn only_http_links_become_buttons() {
        let mut odd = notification(1);
        odd.calls[0].approve_url = "javascript:alert(1)".into();
        odd.review_url = "/relative".into();
        let message = slack_message(&odd);
        let labels: Vec<String> = buttons(&message).into_iter().map(|(label, _, _)| label).collect();
        assert_eq!(labels, ["Deny"]);
        let mail = email_message(&odd);
        assert!(!mail.text.contains("javascript:") && !mail.html.contains("javascript:"));
        assert!(!mail.text.contains("Approve:"));
    }

    #[test]
    fn a_long_preview_is_cut_to_the_slack_limit() {
        let mut long = notification(1);
        long.calls[0].preview = "<".repeat(10_000);
        long.input = "é".repeat(1_000);
        let message = slack_message(&long);
        let section = message["blocks"][3]["text"]["text"].as_str().unwrap_or_default().to_owned();
        assert!(section.chars().count() <= 3_000, "{}", section.chars().count());
        let preview = section.split("```\n").nth(1).unwrap_or_default().trim_end_matches("\n```");
        assert!(preview.chars().count() <= PREVIEW_LIMIT && preview.chars().count() > PREVIEW_LIMIT - 5);
        assert!(preview.ends_with("&lt;…"), "cut after a whole entity: {}", &preview[preview.len() - 12..]);
        let input = message["blocks"][2]["text"]["text"].as_str().unwrap_or_default().to_owned();
        let input = input.trim_start_matches("*Input*\n```\n").trim_end_matches("\n```");
        assert_eq!(input.chars().count(), INPUT_LIMIT);
        assert!(input.ends_with("é…"));
    }

    #[test]
    fn many_calls_stay_within_slacks_block_limit() {
        let message = slack_message(&notification(30));
        let blocks = message["blocks"].as_array().cloned().unwrap_or_default();
        assert!(blocks.len() <= 50, "{}", blocks.len());
        assert!(texts(&message).iter().any(|t| t.contains("10 more calls wait too")));
        assert_eq!(buttons(&message).last().map(|b| b.0.clone()), Some("Review".into()));
    }

    #[test]
    fn slack_text_fits_its_budget() {
        assert_eq!(slack_text("abc", 3, Shape::Line), "abc");
        assert_eq!(slack_text("abcd", 3, Shape::Line), "ab…");
        assert_eq!(slack_text("a&b", 5, Shape::Line), "a…");
        assert_eq!(slack_text("a&", 6, Shape::Line), "a&amp;");
        assert_eq!(slack_text("a\nb", 10, Shape::Line), "a\\nb");
        assert_eq!(slack_text("a\nb", 10, Shape::Fenced), "a\nb");
    }

    #[test]
    fn the_mail_has_the_same_content_and_links_in_both_parts() {
        let mail = email_message(&notification(2));
        assert_eq!(
            mail.subject,
            "[Tollgate] notes is waiting for approval (2 calls, run 0193b0c6-1f2e-7a3b-8c4d-5e6f70819203)"
        );
        for link in ["t1.approve1.mac", "t1.deny1.mac", "t1.approve2.mac", "t1.deny2.mac", "#/runs/0193b0c6"] {
            assert!(mail.text.contains(link), "{link} in {}", mail.text);
            assert!(mail.html.contains(link), "{link} in {}", mail.html);
        }
        assert!(mail.text.contains("Approve: https://tollgate.example.com/approve/t1.approve1.mac\n"));
        assert!(mail.text.contains("Call 2 of 2: fs_write (call_2)\n    write notes/2.txt\n    +hello\n"));
        assert!(mail.text.contains("Input:\n    Write hello to a note\n"));
        assert!(mail.html.contains(">Approve</a>") && mail.html.contains(">Deny</a>"));
        assert!(mail.html.contains("write notes/1.txt\n+hello</pre>"));
        assert!(mail.html.starts_with("<!doctype html>") && mail.html.contains("<html lang=\"en\">"));
    }

    #[test]
    fn the_mail_escapes_and_sanitises_every_text() {
        let mut hostile = notification(1);
        hostile.agent = "<script>x</script>".into();
        hostile.calls[0].preview = "<img src=x onerror=alert(1)>\u{202e}\r".into();
        hostile.run_id = RunId::new("run\nBcc: victim@example.com");
        let mail = email_message(&hostile);
        assert!(!mail.html.contains("<script") && !mail.html.contains("<img"));
        assert!(mail.html.contains("&lt;img src=x onerror=alert(1)&gt;\\u{202e}\\r"));
        assert!(mail.text.contains("<img src=x onerror=alert(1)>\\u{202e}\\r"));
        assert!(!mail.subject.contains('\n') && mail.subject.contains("run\\nBcc"));
        for body in [&mail.text, &mail.html] {
            assert!(!body.chars().any(|c| tollgate_agent_core::display::is_unsafe_for_terminal(c) && c != '\n'));
        }
    }
}
